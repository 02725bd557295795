"""The check cells of the lessons' exercises: each runs the reader's code against the real thing.

A check returns one line in the lesson's language: right, not yet (with what differs),
or a reminder to write the answer first. Tests feed each check a right and a wrong answer.
"""

from __future__ import annotations

import math
import sqlite3
import time
from typing import Any, Callable, Iterable

from ..clock import ManualClock
from ..job import Event
from ..queue import Queue
from .effects import Ledger
from .fence import STORE_TABLE
from .texts import text

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


def _verdict(results: list[tuple[Any, Any, str]], lang: str) -> str:
    if all(got is None for got, _, _ in results):
        return text("check_todo", lang)
    for got, want, detail in results:
        if got != want:
            return text("check_wrong", lang, detail=detail)
    return text("check_right", lang, detail=results[0][2])


def check_misses(misses_tolerated: Callable[[float, float], Any], lang: str = "en") -> str:
    """Lesson 1: compare the reader's ``misses_tolerated(lease, every)`` with the queue on several leases."""
    results = []
    for lease, every in MISS_CASES:
        got, want = misses_tolerated(lease, every), misses_the_queue_tolerates(lease, every)
        results.append((got, want, text("l1_ex_misses", lang, lease=lease, every=every, got=got, want=want)))
    return _verdict(results, lang)


def check_refused_zombie(events: Callable[[], Iterable[Event]], zombie: str = "w1", lang: str = "en",
                         timeout: float = 8.0) -> str:
    """Lesson 0: did ``zombie``'s write get refused after another worker completed its job?

    ``events`` is read again until that shows or ``timeout`` seconds pass: the refusal
    comes a moment after the zombie is thawed.
    """
    deadline = time.monotonic() + timeout
    while True:
        history = list(events())
        refused = [e for e in history if e.kind == "lease_lost" and e.worker == zombie]
        done_by = {e.job_id: e.worker for e in history if e.kind == "completed"}
        for e in refused:
            if done_by.get(e.job_id) not in (None, zombie):
                return text("check_right", lang, detail=text("l0_ex_refused", lang, zombie=zombie,
                                                              other=done_by[e.job_id]))
        if time.monotonic() > deadline:
            return text("check_wrong", lang, detail=text("l0_ex_not_refused", lang, zombie=zombie))
        time.sleep(0.1)


def check_safe_claim(race: Any, lang: str = "en") -> str:
    """Lesson 2: a ``wrong.race`` result is right when the naive claim gave no duplicate and no lock error."""
    detail = text("l2_ex_safe", lang, transaction=repr(race.transaction), dups=race.duplicates > 0,
                  locked=race.locked > 0)
    ok = race.duplicates == 0 and race.locked == 0 and race.claims == race.jobs
    return text("check_right" if ok else "check_wrong", lang, detail=detail)


READ_PAGE = "SELECT value FROM fenced WHERE key = 'page'"

# (what happens, the writes in order as (value, fence), the value that must stand)
FENCE_CASES = (
    ("(7, 2), (7, 1)", (("v2", (7, 2)), ("v1", (7, 1))), "v2"),
    ("(7, 1), (7, 2)", (("v1", (7, 1)), ("v2", (7, 2))), "v2"),
    ("(7, 3), (7, 12)", (("a", (7, 3)), ("b", (7, 12))), "b"),
    ("(7, 12), (7, 3)", (("a", (7, 12)), ("b", (7, 3))), "a"),
    # Equal, and no token to show it is the same claim: it may be a second claim given this
    # fence after a crash lost the first, so it must not replace that write.
    ("(7, 2), (7, 2)", (("a", (7, 2)), ("b", (7, 2))), "a"),
)


def check_fenced_write(fenced_write: Callable[[sqlite3.Connection, str, Any, tuple[int, int]], Any],
                       lang: str = "en") -> str:
    """Lesson 3: run the reader's ``fenced_write(conn, key, value, fence)`` on a real table, case by case."""
    results = []
    for case, writes, want in FENCE_CASES:
        conn = sqlite3.connect(":memory:", isolation_level=None)
        try:
            conn.execute(STORE_TABLE)
            for value, fence in writes:
                fenced_write(conn, "page", value, fence)
            row = conn.execute(READ_PAGE).fetchone()
        except Exception as exc:  # the reader's code: say what it raised instead of a traceback
            return text("check_wrong", lang, detail=text("l3_ex_error", lang, error=f"{type(exc).__name__}: {exc}"))
        finally:
            conn.close()
        got = None if row is None else row[0]
        results.append((got, want, text("l3_ex_case", lang, case=case, got=got, want=want)))
    return _verdict(results, lang)


def check_idempotent_deposit(deposit: Callable[[Ledger, Any], Any], ledger_path: Any, lang: str = "en") -> str:
    """Lesson 4: run the reader's ``deposit(ledger, job)`` for three attempts of one job and one of another.

    The jobs come from a real queue on a manual clock (each retry is a reap and a new
    claim); the ledger is a new file at ``ledger_path``. Right when dave got 10 per job.
    """
    clock = ManualClock()
    attempts = []
    with Queue(":memory:", clock=clock) as q:
        first = q.enqueue("pay dave", max_attempts=3)  # dead after the third: the next claim is the second job
        for _ in range(3):
            attempts.append(q.claim("w", lease=10))
            clock.advance(11)
            q.reap()
            clock.advance(60)
        second = q.enqueue("pay dave again")
        attempts.append(q.claim("w", lease=10))
        clock.advance(60)
        if [(j.id, j.attempts) for j in attempts] != [(first, 1), (first, 2), (first, 3), (second, 1)]:
            raise AssertionError("the exercise's jobs did not come out as planned")  # pragma: no cover
    with Ledger(ledger_path) as ledger:
        try:
            for job in attempts:
                deposit(ledger, job)
        except Exception as exc:  # the reader's code: say what it raised instead of a traceback
            return text("check_wrong", lang, detail=text("l4_ex_error", lang, error=f"{type(exc).__name__}: {exc}"))
        got = ledger.balance("dave")
    detail = text("l4_ex_case", lang, a=first, b=second, got=got, want=20)
    return _verdict([(got, 20, detail)], lang)


# Pause histograms (seconds of pause: how many were seen) the lesson 5 check tries, the lesson's own first.
LEASE_CASES = (
    {0.01: 812_331, 0.1: 20_514, 0.5: 1_203, 1.0: 97, 2.0: 11, 4.5: 2},
    {0.2: 10, 2.0: 3},
    {0.05: 1000, 0.3: 7},
    {6.0: 1, 1.0: 50},
)


def lease_survives(lease: float, pause: float) -> bool:
    """Ask a real queue: does a ``lease`` renewed every third survive a ``pause`` just before a beat was due?"""
    clock = ManualClock()
    with Queue(":memory:", clock=clock) as q:
        q.enqueue("pause")
        job = q.claim("w", lease=lease)          # the last beat before the pause renews to here
        clock.advance(lease / 3 + pause)         # the next beat, due at lease/3, comes that late
        return q.get(job.id).lease_until > clock()


def shortest_lease(pauses: dict[float, int]) -> int:
    """The shortest whole-second lease for which the queue survives every pause in ``pauses``."""
    lease = 1
    while not all(lease_survives(lease, p) for p in pauses):
        lease += 1
    return lease


def check_lease_size(choose_lease: Callable[[dict[float, int]], Any], lang: str = "en") -> str:
    """Lesson 5: the reader's ``choose_lease(pauses)`` must give the queue's shortest surviving lease."""
    results = []
    for pauses in LEASE_CASES:
        try:
            got = choose_lease(dict(pauses))
        except Exception as exc:  # the reader's code: say what it raised instead of a traceback
            return text("check_wrong", lang, detail=text("l5_ex_error", lang, error=f"{type(exc).__name__}: {exc}"))
        want = shortest_lease(pauses)
        shown = "{" + ", ".join(f"{k:g}: {v}" for k, v in pauses.items()) + "}"
        results.append((got, want, text("l5_ex_case", lang, pauses=shown, got=got, want=want)))
    return _verdict(results, lang)


def check_server_claim(statement: str, url: str, lang: str = "en") -> str:
    """Lesson 6: the reader's claim statement, raced by two connections as in the lesson on the empty
    database at ``url``, must give B the other job without waiting for A's row lock."""
    from .race import ServerRace  # psycopg is needed here only, not by every lesson

    race = ServerRace(url, statement)
    try:
        a = race.a_claims()
        waited = race.b_claims()
        race.a_commits()
        b = race.b_result()
    except Exception as exc:  # the reader's SQL: say what the server answered instead of a traceback
        return text("check_wrong", lang, detail=text("l6_ex_error", lang, error=f"{type(exc).__name__}: {exc}"))
    finally:
        race.close()
    detail = text("l6_ex_race", lang, a=a, b=b, waited=waited)
    ok = a is not None and b is not None and a != b and not waited
    return text("check_right" if ok else "check_wrong", lang, detail=detail)


# -- lesson 7: a rule of the checker, written by the reader ------------------------------------------

RULE_LEASE = 10.0


def _plain_events(events: list[Event]) -> list[dict[str, Any]]:
    return [{"job": e.job_id, "kind": e.kind, "at": e.at, "worker": e.worker, "token": e.token} for e in events]


def overlap_histories() -> tuple[list[dict[str, Any]], list[dict[str, Any]], set[int]]:
    """Lesson 7: a clean history from a real queue on a manual clock, the same history with two
    reaps moved early (a reaper that did not wait out the lease), and the jobs whose leases then overlap.

    Job 1 is claimed, beaten and done. Job 2's holder goes silent; it is reaped after its lease and
    claimed again. Job 3's holder beats once, then goes silent; it is reaped after the renewed lease
    and claimed again. In the planted copy job 2 is reaped and claimed again at 19 s (its lease ran
    to 22 s), and job 3 at 55 s: past the claim's 10 s, but inside the lease its heartbeat renewed.
    """
    clock = ManualClock(start=0.0)
    with Queue(":memory:", clock=clock) as q:
        j1, j2 = q.enqueue_many(["one", "two"])
        a = q.claim("w1", lease=RULE_LEASE)            # job 1 at 0
        clock.advance(8)
        q.heartbeat(a.id, a.token, lease=RULE_LEASE)   # its lease now runs to 18
        clock.advance(4)
        q.complete(a.id, a.token, "done")             # 12
        b = q.claim("w1", lease=RULE_LEASE)           # job 2 at 12, lease to 22; w1 falls silent
        clock.advance(11)
        q.reap()                                      # 23
        clock.advance(7)
        c = q.claim("w2", lease=RULE_LEASE)           # job 2 again at 30 (after the backoff)
        q.complete(c.id, c.token, "done")
        clock.advance(10)
        j3 = q.enqueue("three")
        d = q.claim("w1", lease=RULE_LEASE)           # job 3 at 40
        clock.advance(8)
        q.heartbeat(d.id, d.token, lease=RULE_LEASE)  # 48: its lease now runs to 58; then w1 falls silent
        clock.advance(11)
        q.reap()                                      # 59
        clock.advance(11)
        e = q.claim("w2", lease=RULE_LEASE)           # job 3 again at 70
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
    """Lesson 7: the reader's ``overlapping(events, lease)`` must find the planted overlaps and nothing in the clean run."""
    clean, planted, want = overlap_histories()
    results = []
    for name, events, expected in (("planted", planted, want), ("clean", clean, set())):
        try:
            got = overlapping([dict(ev) for ev in events], RULE_LEASE)
        except Exception as exc:  # the reader's code: say what it raised instead of a traceback
            return text("check_wrong", lang, detail=text("l7_ex_rule_error", lang, error=f"{type(exc).__name__}: {exc}"))
        got = None if got is None else set(got)
        results.append((got, expected, text(f"l7_ex_rule_{name}", lang, got=sorted(got or []), want=sorted(expected))))
    return _verdict(results, lang)
