"""The check cells of the lessons' exercises: each runs the reader's code against the real thing.

A check returns one line in the lesson's language: right, not yet (with what differs),
or a reminder to write the answer first. Tests feed each check a right and a wrong answer.
"""

from __future__ import annotations

import math
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..clock import ManualClock
from ..harness.effects import Ledger
from ..job import Event, Job
from ..queue import Queue
from ..sim.mutants import Mutant
from ..worker.lease import Lease
from .texts import text
from .wrong import NAIVE_SELECT

# (lease, heartbeat interval) pairs the lesson 1 check tries, the lesson's own first.
MISS_CASES = ((30.0, 10.0), (30.0, 7.5), (30.0, 12.0), (10.0, 1.0), (60.0, 20.0), (9.0, 4.0))


def misses_the_queue_tolerates(lease: float, every: float) -> int:
    """Ask a real queue's reaper: how many heartbeats in a row can be missed so the next still lands inside the lease?

    For each number of misses, a fresh job is claimed and the reaper runs at the very next
    instant after the next beat is due (the next float). By the letter of REAP
    (``lease_until < :now``) a beat landing exactly at ``lease_until`` still wins, but an
    instant later any reaper may take the job, and no beat is exactly on time: the safety
    margin counts only beats that land strictly inside the lease. -1: not even the first beat does.
    """
    if not every > 0 or not lease > 0:
        raise ValueError(f"lease and every must be > 0, got lease={lease!r}, every={every!r}")
    missed = 0
    while True:
        clock = ManualClock(start=0.0)  # the claim at 0 puts lease_until at exactly ``lease``
        with Queue(":memory:", clock=clock) as q:
            q.enqueue("beat")
            q.claim("w", lease=lease)
            clock.advance(math.nextafter((missed + 1) * every, math.inf))  # just after the beat that got through
            if q.reap():
                return missed - 1
        missed += 1


def _planned(job: Job | None) -> Job:
    """What a claim the exercise planned took: its own queue, on a clock it moves, holds a job for it."""
    if job is None:
        raise AssertionError("the exercise's jobs did not come out as planned")  # pragma: no cover
    return job


def _verdict(results: list[tuple[Any, Any, str]], lang: str, right: str | None = None) -> str:
    """The first case that differs, or ``right`` (else the first case) when none does."""
    if all(got is None for got, _, _ in results):
        return text("check_todo", lang)
    for got, want, detail in results:
        if got != want:
            return text("check_wrong", lang, detail=detail)
    return text("check_right", lang, detail=results[0][2] if right is None else right)


def check_misses(misses_tolerated: Callable[[float, float], Any], lang: str = "en") -> str:
    """Lesson 1: compare the reader's ``misses_tolerated(lease, every)`` with the queue on several leases."""
    results: list[tuple[Any, Any, str]] = []
    for lease, every in MISS_CASES:
        got, want = misses_tolerated(lease, every), misses_the_queue_tolerates(lease, every)
        results.append((got, want, text("l1_ex_misses", lang, lease=lease, every=every, got=got, want=want)))
    return _verdict(results, lang)


def check_refused_alone(
    events: Callable[[], Iterable[Event]], zombie: str = "w1", lang: str = "en", timeout: float = 8.0
) -> str:
    """Lesson 0: was ``zombie``'s write refused, with no other worker ever claiming its job?

    Only a reaper (the scenario's ``reap``) can take the job from a frozen worker that is
    alone. ``events`` is read again until the refusal shows or ``timeout`` seconds pass: it
    comes a moment after the zombie is thawed.
    """
    deadline = time.monotonic() + timeout
    while True:
        history = list(events())
        others = sorted({e.worker for e in history if e.kind == "claimed" and e.worker not in (zombie, None)})
        if any(e.kind == "lease_lost" and e.worker == zombie for e in history):
            if others:
                return text("check_wrong", lang, detail=text("l0_ex_not_alone", lang, zombie=zombie, other=others[0]))
            return text("check_right", lang, detail=text("l0_ex_refused_alone", lang, zombie=zombie))
        if time.monotonic() > deadline:
            return text("check_wrong", lang, detail=text("l0_ex_not_refused", lang, zombie=zombie))
        time.sleep(0.1)


def check_guarded_take(take: Callable[[sqlite3.Connection, int, str], Any], lang: str = "en") -> str:
    """Lesson 2: the reader's ``take(conn, job_id, worker)``, step two of the naive claim, under the interleaving that
    breaks it.

    Two claimers, A and B, each on its own connection to a real queue file of two jobs and
    without a transaction, both look (``wrong.NAIVE_SELECT``) and see job 1. A takes it, then
    B tries: B's take must say it did not get the job and leave A's claim as it was; B then
    looks again and takes job 2. The interleaving is made by hand, so the check is the same
    on every machine.
    """
    folder = tempfile.mkdtemp(prefix="leaselab-take-")
    path = os.path.join(folder, "take.db")
    with Queue(path) as q:
        first, second = q.enqueue_many(["one", "two"])
    a = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    b = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    look = lambda conn: conn.execute(NAIVE_SELECT, {"now": time.time()}).fetchone()[0]  # noqa: E731
    results: list[tuple[Any, Any, str]] = []
    try:
        a_sees, b_sees = look(a), look(b)
        a_took = take(a, a_sees, "A")
        results.append(
            (
                None if a_took is None else bool(a_took),
                True,
                text("l2_ex_take_first", lang, id=a_sees, got=a_took, want=True),
            )
        )
        b_took = take(b, b_sees, "B")
        results.append(
            (
                None if b_took is None else bool(b_took),
                False,
                text("l2_ex_take_second", lang, id=b_sees, got=b_took, want=False),
            )
        )
        with Queue(path) as q:
            held = q.get(first)
        results.append(
            (
                (held.worker, held.attempts),
                ("A", 1),
                text("l2_ex_take_held", lang, id=first, worker=held.worker, attempts=held.attempts),
            )
        )
        b_sees = look(b)
        b_took = take(b, b_sees, "B")
        with Queue(path) as q:
            held = q.get(second)
        results.append(
            (
                (b_sees, None if b_took is None else bool(b_took), held.worker),
                (second, True, "B"),
                text("l2_ex_take_again", lang, id=b_sees, got=b_took, want=second),
            )
        )
    except Exception as exc:  # the reader's code: say what it raised instead of a traceback
        return text("check_wrong", lang, detail=text("l2_ex_take_error", lang, error=f"{type(exc).__name__}: {exc}"))
    finally:
        a.close()
        b.close()
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)
    if a_took is None:
        return text("check_todo", lang)
    return _verdict(results, lang, right=text("l2_ex_take_right", lang, id=first, other=second))


def store_writes() -> list[tuple[str, str, Any, tuple[int, int], str]]:
    """Lesson 3: the writes the store check makes, as (what happens, key, value, fence, token), from a real queue.

    On a clock we move, w1 claims job 1 and falls silent, a reaper takes the job back, and w2
    claims it again: two real claims, with their real fences and tokens. Then job 2.
    """
    clock = ManualClock()
    with Queue(":memory:", clock=clock) as q:
        first = q.enqueue("home page")
        zombie = q.claim("w1", lease=10)
        clock.advance(11)
        q.reap()
        clock.advance(60)  # past the backoff
        holder = q.claim("w2", lease=10)
        assert zombie is not None and zombie.token is not None and holder is not None and holder.token is not None
        q.complete(holder.id, holder.token)
        q.enqueue("new home page")
        later = q.claim("w3", lease=10)
        assert later is not None and later.token is not None  # the claims above are planned: each takes a job
        if (zombie.id, zombie.attempts, holder.id, holder.attempts) != (first, 1, first, 2) or later.id == first:
            raise AssertionError("the exercise's claims did not come out as planned")  # pragma: no cover
    return [
        ("holder", "home.html", "w2", holder.fence, holder.token),
        ("zombie", "home.html", "w1", zombie.fence, zombie.token),
        ("zombie_new_key", "about.html", "w1", zombie.fence, zombie.token),
        ("holder_again", "home.html", "w2 again", holder.fence, holder.token),
        ("twin", "home.html", "twin", holder.fence, "a-second-claim-with-the-same-fence"),
        ("later_job", "home.html", "w3", later.fence, later.token),
    ]


# What each write of store_writes must return, and what home.html must read after it.
STORE_WANT = {
    "holder": (True, "w2"),
    "zombie": (False, "w2"),
    "zombie_new_key": (False, "w2"),
    "holder_again": (True, "w2 again"),
    "twin": (False, "w2 again"),
    "later_job": (True, "w3"),
}


def check_store(store_class: Callable[[], Any], lang: str = "en") -> str:
    """Lesson 3: a fresh ``store_class()`` gets the writes of ``store_writes`` in order; each must be accepted or
    refused right."""
    writes = store_writes()
    results: list[tuple[Any, Any, str]] = []
    try:
        store = store_class()
        for case, key, value, fence, token in writes:
            accepted = store.write(key, value, fence, token)
            page = store.read("home.html")
            want_accepted, want_page = STORE_WANT[case]
            what = text(f"l3_ex_{case}", lang, fence=f"({fence[0]}, {fence[1]})", page=key)
            results.append(
                (
                    None if accepted is None else bool(accepted),
                    want_accepted,
                    text("l3_ex_write", lang, what=what, got=accepted, want=want_accepted),
                )
            )
            results.append((page, want_page, text("l3_ex_page", lang, what=what, got=page, want=want_page)))
    except Exception as exc:  # the reader's code: say what it raised instead of a traceback
        return text("check_wrong", lang, detail=text("l3_ex_store_error", lang, error=f"{type(exc).__name__}: {exc}"))
    if results[0][0] is None:
        return text("check_todo", lang)
    return _verdict(results, lang, right=text("l3_ex_store_right", lang))


class _Crash(BaseException):
    """The check's stand-in for a worker killed mid-handler: a BaseException, so no ``except Exception`` hides it."""


class _CrashingLedger:
    """A ledger whose ``deposit`` kills the attempt (raises ``_Crash``) at the ``crash_at``-th call."""

    def __init__(self, ledger: Ledger, crash_at: int | None):
        self._ledger, self._crash_at, self.calls = ledger, crash_at, 0

    def deposit(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self._crash_at:
            raise _Crash()
        return self._ledger.deposit(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)


def check_idempotent_transfer(transfer: Callable[[Any, Any], Any], ledger_path: Any, lang: str = "en") -> str:
    """Lesson 4: run the reader's ``transfer(ledger, job)`` (10 from alice to bob) for every attempt of two jobs.

    The jobs come from a real queue on a clock we move. Job 1's first attempt dies between
    its two deposits (the second deposit raises instead of writing); its second makes both
    deposits, and is reaped as if it died before completing, so its third runs them again.
    Job 2 runs once. Right when alice has -20 and bob 20.
    """
    clock = ManualClock()
    attempts: list[Job] = []
    with Queue(":memory:", clock=clock) as q:
        first = q.enqueue("alice pays bob 10", max_attempts=3)
        for _ in range(3):
            attempts.append(_planned(q.claim("w", lease=10)))
            clock.advance(11)
            q.reap()
            clock.advance(60)
        second = q.enqueue("alice pays bob 10 again")
        attempts.append(_planned(q.claim("w", lease=10)))
        if [(j.id, j.attempts) for j in attempts] != [(first, 1), (first, 2), (first, 3), (second, 1)]:
            raise AssertionError("the exercise's jobs did not come out as planned")  # pragma: no cover
    with Ledger(ledger_path) as ledger:
        try:
            for job in attempts:
                try:
                    transfer(_CrashingLedger(ledger, crash_at=2 if (job.id, job.attempts) == (first, 1) else None), job)
                except _Crash:
                    pass
        except Exception as exc:  # the reader's code: say what it raised instead of a traceback
            return text(
                "check_wrong", lang, detail=text("l4_ex_transfer_error", lang, error=f"{type(exc).__name__}: {exc}")
            )
        got = (ledger.balance("alice"), ledger.balance("bob"))
        if not ledger.entries():
            return text("check_todo", lang)
    detail = text("l4_ex_transfer", lang, a=first, b=second, alice=got[0], bob=got[1])
    return _verdict([(got, (-20, 20), detail)], lang)


# Pause histograms (seconds of pause: how many were seen) the lesson 5 check tries, the lesson's own first.
LEASE_CASES = (
    {0.01: 812_331, 0.1: 20_514, 0.5: 1_203, 1.0: 97, 2.0: 11, 4.5: 2},
    {0.2: 10, 2.0: 3},
    {0.05: 1000, 0.3: 7},
    {6.0: 1, 1.0: 50},
)


def lease_survives(lease: float, pause: float) -> bool:
    """Ask a real queue and a worker's own lease: does a ``lease`` renewed every third survive a ``pause``
    just before a beat was due, on both sides?

    The database needs the late beat before ``lease_until``; the worker is stricter: it gives the lease
    up (``Lease.expired()``, and a handler's ``check()`` raises) a margin before, counted from when the
    last acknowledged beat was *sent*. A beat the database still accepts after that comes too late for
    the attempt, which has stopped. Both clocks start at the claim, sent and applied at the same instant.
    """
    clock = ManualClock(start=0.0)
    with Queue(":memory:", clock=clock) as q:
        q.enqueue("pause")
        job = _planned(q.claim("w", lease=lease))  # the last beat before the pause renews to here
        held = Lease(job, lease, sent=clock(), clock=clock)  # the worker's view of the same lease
        clock.advance(lease / 3 + pause)  # the next beat, due at lease/3 (the pulse's beat_every), comes that late
        until = q.get(job.id).lease_until  # past it, any worker's reaper may take the job
        return until is not None and until > clock() and not held.expired()


def shortest_lease(pauses: dict[float, int]) -> int:
    """The shortest whole-second lease that survives every pause in ``pauses``, the worker's deadline included."""
    lease = 1
    while not all(lease_survives(lease, p) for p in pauses):
        lease += 1
    return lease


def check_lease_size(choose_lease: Callable[[dict[float, int]], Any], lang: str = "en") -> str:
    """Lesson 5: the reader's ``choose_lease(pauses)`` must give the queue's shortest surviving lease."""
    results: list[tuple[Any, Any, str]] = []
    for pauses in LEASE_CASES:
        try:
            got = choose_lease(dict(pauses))
        except Exception as exc:  # the reader's code: say what it raised instead of a traceback
            return text("check_wrong", lang, detail=text("l5_ex_error", lang, error=f"{type(exc).__name__}: {exc}"))
        want = shortest_lease(pauses)
        shown = "{" + ", ".join(f"{k:g}: {v}" for k, v in pauses.items()) + "}"
        results.append((got, want, text("l5_ex_case", lang, pauses=shown, got=got, want=want)))
    return _verdict(results, lang)


# (lease, the attempt that crashed, backoff base, backoff cap): the lesson 5 check's cases, the lesson's own first.
WAIT_CASES = (
    (8.0, 1, 1.0, 60.0),
    (30.0, 1, 1.0, 60.0),
    (10.0, 3, 1.0, 60.0),
    (10.0, 4, 2.0, 60.0),
    (10.0, 9, 1.0, 60.0),
    (5.0, 2, 0.5, 1.0),
)
REAP_EVERY = MAX_POLL = 1.0  # the worker's defaults: a reap every second at most, an idle poll every second at most


def crashed_job_wait(
    lease: float, attempt: int, base: float, cap: float, reap_every: float = REAP_EVERY, max_poll: float = MAX_POLL
) -> float:
    """Replay on a real queue, on a clock we move, the worst case for a job whose worker died at ``attempt``.

    The worker dies right after a heartbeat, so its lease runs a whole ``lease`` past the
    crash; the reaper's tick before that finds nothing (REAP wants ``lease_until < now``), so the
    reap comes ``reap_every`` after the lease ends; the queue's own ``Backoff(base, cap)`` puts
    ``run_at`` after it; and an idle worker polls ``max_poll`` after that. Returns the seconds
    from the crash until that worker claims the job again.
    """
    from ..backoff import Backoff

    clock = ManualClock(start=0.0)
    with Queue(":memory:", clock=clock, backoff=Backoff(base=base, cap=cap)) as q:
        job_id = q.enqueue("crashes", max_attempts=attempt + 1)
        for _ in range(attempt - 1):  # the attempts before ended in failures
            job = _planned(q.claim("w", lease=lease))
            assert job.token is not None
            q.fail(job.id, job.token, "failed")
            clock.advance(q.get(job_id).run_at - clock())
        job = _planned(q.claim("w", lease=lease))
        assert job.token is not None
        clock.advance(lease / 3)
        q.heartbeat(job.id, job.token, lease=lease)  # the last beat: the worker dies right after it
        crash = clock()
        until = q.get(job_id).lease_until
        assert until is not None  # running, on the lease the beat just renewed
        clock.advance(until - clock())
        if q.reap():
            raise AssertionError("a lease was reaped at its deadline")  # pragma: no cover
        clock.advance(reap_every)  # the next tick of some live worker's reaper
        if q.reap() != [job_id]:
            raise AssertionError("the crashed job was not reaped")  # pragma: no cover
        clock.advance(q.get(job_id).run_at - clock())
        clock.advance(max_poll)  # an idle worker's next poll
        again = q.claim("w2", lease=lease)
        if again is None or again.id != job_id or again.attempts != attempt + 1:
            raise AssertionError("the crashed job was not claimed again")  # pragma: no cover
        return clock() - crash


def check_crash_wait(worst_wait: Callable[[float, int, float, float], Any], lang: str = "en") -> str:
    """Lesson 5: the reader's ``worst_wait(lease, attempt, base, cap)`` against ``crashed_job_wait`` on a real queue."""
    results: list[tuple[Any, Any, str]] = []
    for lease, attempt, base, cap in WAIT_CASES:
        try:
            got = worst_wait(lease, attempt, base, cap)
        except Exception as exc:  # the reader's code: say what it raised instead of a traceback
            return text(
                "check_wrong", lang, detail=text("l5_ex_wait_error", lang, error=f"{type(exc).__name__}: {exc}")
            )
        want = crashed_job_wait(lease, attempt, base, cap)
        close = (
            got is not None
            and not isinstance(got, bool)
            and isinstance(got, (int, float))
            and math.isclose(got, want, abs_tol=1e-6)
        )
        results.append(
            (
                None if got is None else (want if close else got),
                want,
                text("l5_ex_wait_case", lang, lease=lease, attempt=attempt, base=base, cap=cap, got=got, want=want),
            )
        )
    return _verdict(results, lang)


def check_server_batch_claim(statement: str, url: str, lang: str = "en") -> str:
    """Lesson 6: the reader's batch claim (``%(n)s`` jobs at most), raced by A and B on four jobs with n = 2.

    A claims and keeps its transaction open; B claims meanwhile. Right when each took two
    jobs, none of them the other's, and B did not wait for A's row locks.
    """
    from .race import ServerRace  # psycopg is needed here only, not by every lesson

    race = ServerRace(url, statement, jobs=4, n=2)
    try:
        a = race.a_claims()
        waited = race.b_claims()
        race.a_commits()
        b = race.b_result()
    except Exception as exc:  # the reader's SQL: say what the server answered instead of a traceback
        return text("check_wrong", lang, detail=text("l6_ex_error", lang, error=f"{type(exc).__name__}: {exc}"))
    finally:
        race.close()
    detail = text("l6_ex_batch", lang, a=a, b=b, waited=waited)
    ok = len(a) == 2 and len(b) == 2 and not set(a) & set(b) and not waited
    return text("check_right" if ok else "check_wrong", lang, detail=detail)


# -- lesson 8: a rule of the checker, written by the reader ------------------------------------------

RULE_LEASE = 10.0


def _plain_events(events: list[Event]) -> list[dict[str, Any]]:
    return [{"job": e.job_id, "kind": e.kind, "at": e.at, "worker": e.worker, "token": e.token} for e in events]


def overlap_histories() -> tuple[list[dict[str, Any]], list[dict[str, Any]], set[int]]:
    """Lesson 8: a clean history from a real queue on a manual clock, the same history with two
    reaps moved early (a reaper that did not wait out the lease), and the jobs whose leases then overlap.

    Job 1 is claimed, beaten and done. Job 2's holder goes silent; it is reaped after its lease and
    claimed again. Job 3's holder beats once, then goes silent; it is reaped after the renewed lease
    and claimed again. In the planted copy job 2 is reaped and claimed again at 19 s (its lease ran
    to 22 s), and job 3 at 55 s: past the claim's 10 s, but inside the lease its heartbeat renewed.
    """
    clock = ManualClock(start=0.0)
    with Queue(":memory:", clock=clock) as q:
        j1, j2 = q.enqueue_many(["one", "two"])
        a = _planned(q.claim("w1", lease=RULE_LEASE))  # job 1 at 0
        assert a.token is not None
        clock.advance(8)
        q.heartbeat(a.id, a.token, lease=RULE_LEASE)  # its lease now runs to 18
        clock.advance(4)
        q.complete(a.id, a.token, "done")  # 12
        b = q.claim("w1", lease=RULE_LEASE)  # job 2 at 12, lease to 22; w1 falls silent
        clock.advance(11)
        q.reap()  # 23
        clock.advance(7)
        c = _planned(q.claim("w2", lease=RULE_LEASE))  # job 2 again at 30 (after the backoff)
        assert c.token is not None
        q.complete(c.id, c.token, "done")
        clock.advance(10)
        j3 = q.enqueue("three")
        d = _planned(q.claim("w1", lease=RULE_LEASE))  # job 3 at 40
        assert d.token is not None
        clock.advance(8)
        q.heartbeat(d.id, d.token, lease=RULE_LEASE)  # 48: its lease now runs to 58; then w1 falls silent
        clock.advance(11)
        q.reap()  # 59
        clock.advance(11)
        e = _planned(q.claim("w2", lease=RULE_LEASE))  # job 3 again at 70
        assert e.token is not None
        q.complete(e.id, e.token, "done")
        if [x.id if x else None for x in (a, b, c, d, e)] != [j1, j2, j2, j3, j3]:
            raise AssertionError("the exercise's jobs did not come out as planned")  # pragma: no cover
        clean = _plain_events(q.events())
    planted = [dict(ev) for ev in clean]
    moved = {j2: 19.0, j3: 55.0}
    for job, at in moved.items():
        reap = next(ev for ev in planted if ev["job"] == job and ev["kind"] == "reaped")
        again = [ev for ev in planted if ev["job"] == job and ev["kind"] == "claimed"][1]
        reap["at"], again["at"] = at, at + 0.5
    planted.sort(key=lambda ev: ev["at"])
    return clean, planted, set(moved)


def check_overlap_rule(overlapping: Callable[[list[dict], float], Any], lang: str = "en") -> str:
    """Lesson 8: the reader's ``overlapping(events, lease)`` must find the planted overlaps and nothing in the clean
    run."""
    clean, planted, want = overlap_histories()
    results: list[tuple[Any, Any, str]] = []
    for name, events, expected in (("planted", planted, want), ("clean", clean, set())):
        try:
            got = overlapping([dict(ev) for ev in events], RULE_LEASE)
        except Exception as exc:  # the reader's code: say what it raised instead of a traceback
            return text(
                "check_wrong", lang, detail=text("l7_ex_rule_error", lang, error=f"{type(exc).__name__}: {exc}")
            )
        got = None if got is None else set(got)
        results.append((got, expected, text(f"l7_ex_rule_{name}", lang, got=sorted(got or []), want=sorted(expected))))
    return _verdict(results, lang)


def check_planted(mutant: Mutant, lang: str = "en", schedules: int | None = None, seed: int = 0) -> str:
    """Lesson 9: hunt the reader's mutant (``lessons.schedules.edited``) with ``explore.hunt``: ``schedules``
    schedules of its portfolio from ``seed`` on (a count, never seconds), the first failure shrunk within a
    fixed number of replays. Says: nothing was changed, a statement the simulated workers never run, SQL that
    SQLite cannot prepare, caught (with the shrunk witness, numbered), or not caught."""
    from ..backends.sqlite import statements
    from ..sim import explore
    from ..sim.mutants import planted
    from . import schedules as lesson9

    n = lesson9.CHECK_SCHEDULES if schedules is None else schedules
    if all(text_ == replacement for _, text_, replacement in mutant.edits) and not (mutant.decision or mutant.patches):
        return text("l8_ex_same", lang)
    names = [name for names, _, _ in mutant.edits for name in names]
    for name in names:
        if not lesson9.runs_statement(name):
            return text("l8_ex_unused", lang, name=name)
    with planted(mutant):
        for name in names:
            error = lesson9.sql_error(getattr(statements, name))
            if error is not None:
                return text("l8_ex_error", lang, name=name, error=error.removeprefix(":memory:: "))
        try:
            hunted = explore.hunt(
                seed=seed, seconds=None, schedules=n, shrink_seconds=math.inf, shrink_tries=lesson9.SHRINK_TRIES
            )
        except Exception as exc:  # a change the simulator cannot even run: say so, in the lesson's language
            return text("l8_ex_failed", lang, error=f"{type(exc).__name__}: {exc}")
    if hunted.run is None or hunted.found is None:
        return text("l8_ex_missed", lang, n=hunted.schedules)
    lines = [
        text(
            "l8_ex_caught",
            lang,
            n=hunted.schedules,
            of=n,
            before=len(hunted.found.actions),
            after=len(hunted.run.actions),
        )
    ]
    return "\n".join(lines + lesson9.story(hunted.run, lang))
