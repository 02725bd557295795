"""``leaselab.check`` and ``leaselab check``: every rule catches its planted anomaly and passes a clean run.

Histories are built three ways: by hand as dicts (one small builder that writes the rows and
events as the queue's triggers would), from real queues made to misbehave by "another
program" writing rows with raw sqlite3 or psycopg, and from real worker processes.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from leaselab import LeaseLost, ManualClock, Queue, Worker
from leaselab.backends import is_server_url
from leaselab.check import (
    KINDS,
    LANGS,
    Anomaly,
    History,
    Report,
    check,
    check_history,
    read_effects,
    record_effect,
)
from leaselab.check import effects as effects_module
from leaselab.check.errors import InvalidEffects
from leaselab.check.texts import COUNTED, REPORT, SENTENCES, TITLES, WORDS, counted
from leaselab.cli import EXIT_ANOMALY, EXIT_BAD_INPUT, main
from leaselab.errors import DatabaseMissing, InvalidTarget, NotALeaselabDatabase, ServerRefused
from leaselab.harness.demo import task
from leaselab.harness.effects import Ledger, deposit
from tests.support.servers import fresh_database

LEASE = 5.0
T0 = 1_000.0


class Build:
    """A history by hand: each call appends the event the queue's trigger would write and updates the row.

    A planted anomaly is the same calls in an order, or with a token, the real queue refuses.
    """

    def __init__(self, now: float = T0 + 100):
        self.rows: dict[int, dict] = {}
        self.events: list[dict] = []
        self.effects: list[dict] = []
        self.journal: list[dict] = []  # what the workers were told (leaselab.worker.journal), if a case says
        self.now = now

    def _event(self, job: int, kind: str, at: float, token=None, worker=None, detail=None) -> dict:
        row = self.rows.get(job)
        e = {
            "id": len(self.events) + 1,
            "job_id": job,
            "kind": kind,
            "at": at,
            "worker": worker,
            "token": token,
            "attempt": row["attempts"] if row else 0,
            "detail": detail,
            "prev": row["last_event_id"] if row else None,
        }
        self.events.append(e)
        if row:
            row["last_event_id"] = e["id"]
        return e

    def enqueue(self, job: int, at: float = T0, max_attempts: int = 5, run_at: float | None = None) -> Build:
        self.rows[job] = {
            "id": job,
            "payload": {},
            "status": "pending",
            "priority": 0,
            "run_at": at if run_at is None else run_at,
            "attempts": 0,
            "max_attempts": max_attempts,
            "lease_until": None,
            "worker": None,
            "token": None,
            "result": None,
            "last_error": None,
            "created_at": at,
            "updated_at": at,
            "last_event_id": None,
        }
        self._event(job, "enqueued", at)
        self.rows[job]["last_event_id"] = self.events[-1]["id"]
        return self

    def claim(self, job: int, token: str, at: float, worker: str = "w1", attempt: int | None = None) -> Build:
        row = self.rows[job]
        row.update(
            status="running",
            attempts=row["attempts"] + 1 if attempt is None else attempt,
            token=token,
            worker=worker,
            lease_until=at + LEASE,
        )
        self._event(job, "claimed", at, token, worker)
        return self

    def beat(self, job: int, token: str, at: float) -> Build:
        self.rows[job]["lease_until"] = at + LEASE
        self._event(job, "heartbeat", at, token, self.rows[job]["worker"])
        return self

    def complete(self, job: int, token: str, at: float) -> Build:
        self.rows[job].update(status="done", lease_until=None)
        self._event(job, "completed", at, token, self.rows[job]["worker"])
        return self

    def fail(self, job: int, token: str, at: float) -> Build:
        row = self.rows[job]
        row.update(status="pending" if row["attempts"] < row["max_attempts"] else "dead", lease_until=None)
        self._event(job, "failed", at, token, row["worker"], "boom")
        if row["status"] == "dead":
            self._event(job, "dead", at, token, row["worker"], "boom")
        return self

    def time_out(self, job: int, token: str, at: float, seconds: float = 5) -> Build:
        row = self.rows[job]
        row.update(status="pending" if row["attempts"] < row["max_attempts"] else "dead", lease_until=None)
        self._event(job, "timed_out", at, token, row["worker"], f"ran past its timeout of {seconds:g}s")
        if row["status"] == "dead":
            self._event(job, "dead", at, token, row["worker"], "timed out")
        return self

    def reap(self, job: int, at: float) -> Build:
        row = self.rows[job]
        row.update(status="pending" if row["attempts"] < row["max_attempts"] else "dead", lease_until=None)
        self._event(job, "reaped", at, row["token"], row["worker"], "lease expired")
        if row["status"] == "dead":
            self._event(job, "dead", at, row["token"], row["worker"], "lease expired")
        return self

    def refuse(self, job: int, token: str, at: float) -> Build:
        self._event(job, "lease_lost", at, token, "w1", "complete refused")
        return self

    def effect(self, job: int, attempt: int, token: str, key: str | None = None) -> Build:
        self.effects.append({"job": job, "attempt": attempt, "token": token, "key": key})
        return self

    def told(
        self, kind: str, job: int, token: str, attempt: int = 1, worker: str = "w1", at: float | None = None
    ) -> Build:
        entry = {"kind": kind, "job": job, "attempt": attempt, "token": token, "worker": worker}
        self.journal.append(entry if at is None else {**entry, "at": at})
        return self

    def judged(self) -> dict:
        """The options that give the checker this history's journal, if it has one."""
        return {"journal": self.journal} if self.journal else {}

    def history(self) -> History:
        return History(
            jobs=[dict(r) for _, r in sorted(self.rows.items())],
            events=[dict(e) for e in self.events],
            effects=list(self.effects),
            now=self.now,
        )


def zombie(b: Build, job: int = 1) -> Build:
    """The textbook run: a claim, its lease runs out, a reap, a new claim completes, the zombie is refused."""
    return (
        b.enqueue(job)
        .claim(job, "a" * 32, T0 + 1)
        .reap(job, T0 + 7)
        .claim(job, "b" * 32, T0 + 8, worker="w2")
        .complete(job, "b" * 32, T0 + 9)
        .refuse(job, "a" * 32, T0 + 10)
    )


def plain(b: Build, job: int = 1) -> Build:
    return b.enqueue(job).claim(job, "c" * 32, T0 + 1).complete(job, "c" * 32, T0 + 2)


# Each case: (the bad history, the good one beside it, the options, the kind and job the bad one must show).
CASES = {
    "lost: an enqueued job whose row is gone": (lambda b: (plain(b), b.rows.pop(1)), lambda b: plain(b), {}, "lost", 1),
    "lost: a job still running under a valid lease while the workers are idle": (
        lambda b: b.enqueue(1).claim(1, "c" * 32, b.now - 1),
        lambda b: plain(b),
        {},
        "lost",
        1,
    ),
    "lost: an effect recorded for a job the table does not have": (
        lambda b: (plain(b), b.effect(9, 1, "d" * 32)),
        lambda b: (plain(b), b.effect(1, 1, "c" * 32)),
        {},
        "lost",
        9,
    ),
    "stuck: running under a lease that ran out long ago": (
        lambda b: b.enqueue(1).claim(1, "c" * 32, b.now - 100),
        lambda b: b.enqueue(1).claim(1, "c" * 32, b.now - 1),
        {"idle": False},
        "stuck",
        1,
    ),
    "stuck: runnable and never claimed while the workers were idle": (
        lambda b: b.enqueue(1),
        lambda b: b.enqueue(1, run_at=b.now + 60),
        {},
        "stuck",
        1,
    ),
    "fence reused: two claims with one attempt number": (
        lambda b: (
            b.enqueue(1)
            .claim(1, "a" * 32, T0 + 1)
            .reap(1, T0 + 7)
            .claim(1, "b" * 32, T0 + 8, attempt=1)
            .complete(1, "b" * 32, T0 + 9)
        ),
        lambda b: zombie(b),
        {},
        "fence_reused",
        1,
    ),
    "stale write accepted: a heartbeat from a token reaped long ago": (
        lambda b: (
            b.enqueue(1)
            .claim(1, "a" * 32, T0 + 1)
            .reap(1, T0 + 7)
            .claim(1, "b" * 32, T0 + 8, worker="w2")
            .beat(1, "a" * 32, T0 + 8.5)
            .complete(1, "b" * 32, T0 + 9)
        ),
        lambda b: b.enqueue(1).claim(1, "c" * 32, T0 + 1).beat(1, "c" * 32, T0 + 3).complete(1, "c" * 32, T0 + 4),
        {},
        "stale_write_accepted",
        1,
    ),
    "overlapping leases: a claim while another token holds the job": (
        lambda b: b.enqueue(1).claim(1, "a" * 32, T0 + 1).claim(1, "b" * 32, T0 + 2).complete(1, "b" * 32, T0 + 3),
        lambda b: zombie(b),
        {},
        "overlapping_leases",
        1,
    ),
    "overlapping leases: a reclaim inside the reaped holder's lease": (
        lambda b: (
            b.enqueue(1)
            .claim(1, "a" * 32, T0 + 1)
            .reap(1, T0 + 2)
            .claim(1, "b" * 32, T0 + 3)
            .complete(1, "b" * 32, T0 + 4)
        ),
        lambda b: zombie(b),
        {"lease": LEASE},
        "overlapping_leases",
        1,
    ),
    "completed twice": (lambda b: plain(b).complete(1, "c" * 32, T0 + 3), lambda b: plain(b), {}, "completed_twice", 1),
    "claimed after completion": (
        lambda b: plain(b).claim(1, "d" * 32, T0 + 3),
        lambda b: plain(b),
        {},
        "claimed_after_completion",
        1,
    ),
    "false loss: a lease lost recorded for the token that completed": (
        lambda b: plain(b).refuse(1, "c" * 32, T0 + 3),
        lambda b: zombie(b),
        {},
        "false_loss",
        1,
    ),
    "effect repeated: an unkeyed effect done by two attempts": (
        lambda b: zombie(b).effect(1, 1, "a" * 32).effect(1, 2, "b" * 32),
        lambda b: zombie(b).effect(1, 1, "a" * 32, key="pay-1"),
        {},
        "effect_repeated",
        1,
    ),
    "history disagrees: the table says another status than the events": (
        lambda b: (plain(b), b.rows[1].update(status="dead")),
        lambda b: plain(b),
        {},
        "history_disagrees",
        1,
    ),
    "live holder reaped: a reap two seconds into a five-second lease": (
        lambda b: (
            b.enqueue(1)
            .claim(1, "a" * 32, T0 + 1)
            .reap(1, T0 + 3)
            .claim(1, "b" * 32, T0 + 9)
            .complete(1, "b" * 32, T0 + 10)
        ),
        lambda b: zombie(b),
        {"lease": LEASE},
        "live_holder_reaped",
        1,
    ),
    "attempts exceeded": (
        lambda b: (plain(b), b.rows[1].update(max_attempts=1, attempts=2)),
        lambda b: (plain(b), b.rows[1].update(max_attempts=1)),
        {},
        "attempts_exceeded",
        1,
    ),
    "dead unrun: a job dead after its attempts, its handler never run": (
        lambda b: b.enqueue(1, max_attempts=1).claim(1, "a" * 32, T0 + 1).reap(1, T0 + 7),
        lambda b: b.enqueue(1, max_attempts=1).claim(1, "a" * 32, T0 + 1).effect(1, 1, "a" * 32).reap(1, T0 + 7),
        {"runs_recorded": True},
        "dead_unrun",
        1,
    ),
    "specification: a job claimed before its run_at": (
        lambda b: b.enqueue(1, run_at=T0 + 50).claim(1, "a" * 32, T0 + 1).complete(1, "a" * 32, T0 + 2),
        lambda b: b.enqueue(1, run_at=T0 + 1).claim(1, "a" * 32, T0 + 1).complete(1, "a" * 32, T0 + 2),
        {},
        "specification",
        1,
    ),
    "timed out: an attempt given up at its timeout": (
        lambda b: (
            b.enqueue(1)
            .claim(1, "a" * 32, T0 + 1)
            .time_out(1, "a" * 32, T0 + 6)
            .claim(1, "b" * 32, T0 + 9)
            .complete(1, "b" * 32, T0 + 10)
        ),
        lambda b: (
            b.enqueue(1)
            .claim(1, "a" * 32, T0 + 1)
            .fail(1, "a" * 32, T0 + 6)
            .claim(1, "b" * 32, T0 + 9)
            .complete(1, "b" * 32, T0 + 10)
        ),
        {},
        "timed_out",
        1,
    ),
    "hung: a job running longer than --max-run under heartbeats": (
        lambda b: b.enqueue(1).claim(1, "a" * 32, T0 + 1).beat(1, "a" * 32, T0 + 50).beat(1, "a" * 32, T0 + 99),
        lambda b: b.enqueue(1).claim(1, "a" * 32, T0 + 60).beat(1, "a" * 32, T0 + 80).beat(1, "a" * 32, T0 + 99),
        {"idle": False, "max_run": 60},
        "hung",
        1,
    ),
    "specification: a retry claimed before its backoff ended": (
        lambda b: (
            b.enqueue(1).claim(1, "a" * 32, T0 + 1).fail(1, "a" * 32, T0 + 2).claim(1, "b" * 32, T0 + 2.5)
        ).complete(1, "b" * 32, T0 + 4),
        lambda b: (
            b.enqueue(1).claim(1, "a" * 32, T0 + 1).fail(1, "a" * 32, T0 + 2).claim(1, "b" * 32, T0 + 3)
        ).complete(1, "b" * 32, T0 + 4),
        {},
        "specification",
        1,
    ),
    "fence handed twice: the journals show one attempt claimed by two tokens, the server one claim": (
        lambda b: plain(b).told("claimed", 1, "c" * 32).told("claimed", 1, "e" * 32, worker="w2"),
        lambda b: plain(b).told("claimed", 1, "c" * 32).told("completed", 1, "c" * 32),
        {},
        "fence_handed_twice",
        1,
    ),
    "split brain: two holders of one fence each told of their completion while the other held it": (
        lambda b: (
            plain(b)
            .told("claimed", 1, "c" * 32, at=T0 + 1)
            .told("claimed", 1, "e" * 32, worker="w2", at=T0 + 2)
            .told("completed", 1, "c" * 32, at=T0 + 3)
            .told("completed", 1, "e" * 32, worker="w2", at=T0 + 4)
        ),
        lambda b: plain(b).told("claimed", 1, "c" * 32, at=T0 + 1).told("completed", 1, "c" * 32, at=T0 + 2),
        {},
        "split_brain",
        1,
    ),
    "acknowledged lost: a completion a worker was told of, which the server does not have": (
        lambda b: b.enqueue(1).told("claimed", 1, "c" * 32).told("completed", 1, "c" * 32),
        lambda b: plain(b).told("claimed", 1, "c" * 32).told("completed", 1, "c" * 32),
        {"idle": False},
        "acknowledged_lost",
        1,
    ),
    "acknowledged lost: a completion a worker was told of, the server's by another token": (
        lambda b: plain(b).told("claimed", 1, "e" * 32).told("completed", 1, "e" * 32),
        lambda b: plain(b),
        {},
        "acknowledged_lost",
        1,
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_each_rule_catches_its_planted_anomaly_and_passes_the_clean_history_beside_it(case):
    bad, good, options, kind, job = CASES[case]
    b = Build()
    bad(b)
    report = check_history(b.history(), **options, **b.judged())
    hits = [a for a in report.anomalies if a.kind == kind and a.job == job]
    assert hits, f"{case}: {[(a.kind, a.job, a.sentence()) for a in report.anomalies]}"
    assert all(a.witness and all(isinstance(line, str) for line in a.witness) for a in hits)
    assert f"job={job}" in hits[0].witness[0] or f"jobs#{job}" in hits[0].witness[0]
    assert not report.clean and report.render().count(TITLES["en"][kind]) >= 1
    b = Build()
    good(b)
    clean = check_history(b.history(), **options, **b.judged())
    assert clean.clean, f"{case}, clean side: {[(a.kind, a.sentence()) for a in clean.anomalies]}"


def test_every_kind_has_a_planted_case():
    assert {case[3] for case in CASES.values()} == set(KINDS)


def test_a_job_that_ran_twice_with_its_effect_kept_once_is_a_repeated_run_not_an_anomaly():
    b = zombie(Build()).effect(1, 2, "b" * 32, key="pay-1")
    report = check_history(b.history())
    assert report.clean
    assert report.counts["repeated_runs"] == 1 and report.counts["repeats_absorbed"] == 1
    assert report.counts["refused_zombies"] == 1 and report.counts["effects"] == 1
    assert "repeated runs whose effect happened once: 1" in report.render()


def test_a_job_waiting_for_its_time_is_counted_not_reported():
    b = plain(Build()).enqueue(2, run_at=T0 + 1_000)
    report = check_history(b.history())
    assert report.clean and report.counts["waiting"] == 1
    assert "1 job still waits for its time" in report.render()
    assert "1 задача ещё ждёт своего времени" in report.render("ru")


def test_without_the_lease_reaps_are_not_timed_and_the_report_says_so():
    b = Build().enqueue(1).claim(1, "a" * 32, T0 + 1).reap(1, T0 + 3).claim(1, "b" * 32, T0 + 9)
    b.complete(1, "b" * 32, T0 + 10)
    report = check_history(b.history())
    assert report.clean and report.notes[0] == "lease_unknown"
    assert "not timed" in report.render() and "не проверены по времени" in report.render("ru")


def test_a_running_jobs_lease_end_tells_the_checker_its_workers_lease():
    # w1's running job shows its lease (5 s): w1's earlier reap, two seconds in, was too early.
    b = Build().enqueue(1).claim(1, "a" * 32, T0 + 1).reap(1, T0 + 3).claim(1, "b" * 32, T0 + 9, worker="w2")
    b.complete(1, "b" * 32, T0 + 10).enqueue(2).claim(2, "c" * 32, b.now - 1)
    report = check_history(b.history(), idle=False)
    assert [(a.kind, a.job) for a in report.anomalies] == [("live_holder_reaped", 1)]


# -- real queues, with "another program" writing rows ---------------------------------------------
# On SQLite and PostgreSQL (the target fixture): check reads a file with sqlite3 and a server with
# psycopg, never through Queue, and sqlite3 cannot open the APSW backend's in-process disk.


def refused_zombie(q: Queue, clock: ManualClock, result, late) -> tuple:
    """One job: w1 claims it and goes silent past its lease, it is reaped, w2 claims and completes it
    with ``result``, and w1's ``late(job)`` write is refused. Returns (w1's Job, w2's Job)."""
    q.enqueue({"n": 1})
    first = q.claim("w1", lease=LEASE)
    clock.advance(LEASE + 1)
    q.reap()
    clock.advance(60)
    second = q.claim("w2", lease=LEASE)
    q.complete(second.id, second.token, result)
    with pytest.raises(LeaseLost):
        late(first)
    return first, second


@pytest.fixture
def real(target, clock):
    """A queue on a manual clock with one zombie refused; returns (target, clock, the zombie's first Job)."""
    db = target
    with Queue(db, clock=clock) as q:
        first, _ = refused_zombie(q, clock, {"ok": True}, lambda z: q.complete(z.id, z.token, {"late": True}))
        q.enqueue({"n": 2})
        job = q.claim("w1", lease=LEASE)
        q.complete(job.id, job.token, None)
    return db, clock, first


def other_program(db: str | Path, sql: str, *params) -> None:
    """Run ``sql`` (``?`` parameters) as another program would, with the raw driver: psycopg on a
    server, sqlite3 on a file."""
    if is_server_url(db):
        import psycopg

        with psycopg.connect(str(db), autocommit=True) as server:
            server.execute(sql.replace("?", "%s"), params)
        return
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(sql, params)
    finally:
        conn.close()


def test_a_real_clean_run_keeps_every_promise_and_counts_its_zombie(real):
    db, clock, _ = real
    report = check(db, now=clock(), lease=LEASE)
    assert report.clean, report.render()
    assert report.counts == {
        **report.counts,
        "jobs": 2,
        "done": 2,
        "attempts": 3,
        "repeated_runs": 1,
        "reaps": 1,
        "refused_zombies": 1,
        "refused_writes": 1,
        "effects": 0,
    }
    # No effect was recorded: the headline itself says that repeated effects were not checked, and how to.
    assert report.render().splitlines()[0] == (
        "every promise held: 2 jobs, 1 repeated run, 1 zombie refused; but repeated effects were NOT checked: "
        "no effect was recorded (call leaselab.check.record_effect(job, key=...) in the handler once its effect "
        "took hold, and give check --effects FILE; chaos names the file in $LEASELAB_EFFECTS)"
    )
    assert (
        report.render("ru")
        .splitlines()[0]
        .startswith(
            "все обещания сдержаны: 2 задачи, 1 повторный запуск, 1 зомби получил отказ; но повторы действий НЕ "
            "проверялись: ни одно действие не записано"
        )
    )
    assert "not looked for" not in report.render()  # said once, in the headline, not again as a footnote


def test_a_stale_completion_written_by_another_program_is_caught_with_the_triggers_own_event(target, clock, zombie):
    db = target
    with Queue(db, clock=clock) as q:
        q.enqueue(1)
        zombie_job, holder = zombie(lease=LEASE, holder="w1", successor="w2", queue=q)
    # The zombie's completion taken without the fence: the trigger records it under the zombie's token.
    other_program(
        db,
        "UPDATE jobs SET status = 'done', token = ?, lease_until = NULL, last_event = 'completed' WHERE id = ?",
        zombie_job.token,
        zombie_job.id,
    )
    report = check(db, now=clock())
    stale = [a for a in report.anomalies if a.kind == "stale_write_accepted"]
    assert stale and stale[0].job == zombie_job.id
    assert zombie_job.token[:8] in stale[0].sentence() and holder.token[:8] in stale[0].sentence()
    assert any("completed" in line and zombie_job.token[:8] in line for line in stale[0].witness)


def test_a_second_completion_written_by_another_program_is_completed_twice(real):
    db, clock, first = real
    other_program(db, "UPDATE jobs SET token = ?, last_event = 'completed' WHERE id = ?", first.token, first.id)
    assert "completed_twice" in [a.kind for a in check(db, now=clock()).anomalies]


def test_a_row_deleted_by_another_program_is_a_lost_job(real):
    db, clock, _ = real
    other_program(db, "DELETE FROM jobs WHERE id = 2")
    report = check(db, now=clock())
    assert [(a.kind, a.job) for a in report.anomalies] == [("lost", 2)]


def test_a_status_changed_behind_the_triggers_back_is_a_history_that_disagrees(real):
    db, clock, _ = real
    other_program(db, "UPDATE jobs SET status = 'dead' WHERE id = 2")
    report = check(db, now=clock())
    assert [(a.kind, a.job) for a in report.anomalies] == [("history_disagrees", 2)]
    assert "the status is done, the jobs table says dead" in report.anomalies[0].sentence()


def test_a_job_abandoned_by_a_killed_worker_is_stuck_once_its_lease_ran_out(target):
    # On SQLite and PostgreSQL (check reads a file or a server, not the APSW backend's in-process disk).
    db, clock = target, ManualClock()
    with Queue(db, clock=clock) as q:
        q.enqueue(1)
        q.claim("w1", lease=LEASE)  # and w1 dies here
    assert [a.kind for a in check(db, now=clock()).anomalies] == ["lost"]  # its lease still runs
    assert check(db, now=clock(), idle=False).clean  # a live run: its worker may still be at it
    report = check(db, now=clock() + LEASE + 1)
    assert [a.kind for a in report.anomalies] == ["stuck"] and "ran out 1.0 s ago" in report.anomalies[0].sentence()
    assert "истекла 1,0 с назад" in report.anomalies[0].sentence("ru")  # a decimal comma in Russian


def _ledger_run(db: str, clock: ManualClock, ledger_path: Path, keyed: bool) -> Ledger:
    """One deposit job run twice (its first worker stalls past the lease): the lessons' ledger as the store."""
    with Queue(db, clock=clock) as q:
        q.enqueue({"ledger": str(ledger_path), "amount": 10, "keyed": keyed})
        first = q.claim("w1", lease=LEASE)
        deposit(first)  # ...then w1 freezes before completing
        clock.advance(LEASE + 1)
        q.reap()
        clock.advance(60)
        second = q.claim("w2", lease=LEASE)
        q.complete(second.id, second.token, deposit(second))
    return Ledger(ledger_path)


def test_the_lessons_ledger_through_the_callable_form_tells_a_double_deposit_from_a_keyed_one(tmp_path, target, clock):
    # Both runs in one queue, each with a ledger of its own: the keyed run's check sees the plain
    # run's job too, which ran twice and has no effect in the keyed ledger (no anomaly, none absorbed).
    db = target
    with _ledger_run(db, clock, tmp_path / "plain.db", keyed=False) as ledger:
        report = check(db, effects=ledger.effects, now=clock())
    assert [(a.kind, a.job) for a in report.anomalies] == [("effect_repeated", 1)]
    assert report.anomalies[0].sentence() == (
        "job 1: its effect happened 2 times (attempts 1, 2); fix: let the store keep it once per idempotency key "
        '(write it under key="job-1", insert-if-absent), or refuse an older attempt\'s write'
    )
    assert (
        report.anomalies[0]
        .sentence("ru")
        .startswith("задача 1: её действие выполнено 2 раза (попытки 1, 2); как исправить:")
    )
    with _ledger_run(db, clock, tmp_path / "keyed.db", keyed=True) as ledger:
        report = check(db, effects=ledger.effects, now=clock())
    assert report.clean and report.counts["repeats_absorbed"] == 1 and report.counts["effects"] == 1


def test_a_real_worker_process_records_its_effects_into_the_file_leaselab_effects_names(tmp_path, target, fleet_on):
    db, effects = target, tmp_path / "effects.jsonl"
    with Queue(db) as q:
        q.enqueue_many([{"seconds": 0}] * 3)
    fleet = fleet_on(db)
    w = fleet.spawn(
        "leaselab.harness.demo:effect",
        lease=LEASE,
        name="w1",
        exit_when_idle=True,
        env={"LEASELAB_EFFECTS": str(effects)},
    )
    assert fleet.wait(w, timeout=60) == 0, fleet.log_tail(w)
    lines = read_effects(effects)
    assert sorted(line["job"] for line in lines) == [1, 2, 3]
    assert {tuple(sorted(line)) for line in lines} == {tuple(sorted(effects_module.FIELDS))}
    assert {line["worker"] for line in lines} == {"w1"} and all(line["token"] for line in lines)
    report = check(db, effects=effects, lease=LEASE, runs_recorded=True)
    assert report.clean, report.render()
    assert report.counts["effects"] == 3


def test_a_worker_run_in_process_leaves_a_clean_history(tmp_path, target):
    db, effects = target, tmp_path / "effects.jsonl"
    with Queue(db, call_timeout=0.9 * LEASE) as q:
        q.enqueue_many([{"effects": str(effects)}] * 5 + [{"effects": str(effects), "fail": 1}])
        Worker(q, task, name="w1", lease=LEASE, exit_when_idle=True, poll=0.01).run()
    report = check(db, effects=effects, lease=LEASE, runs_recorded=True)
    # The failing job ran twice, unkeyed: its effect repeated, as the demo handler means it to.
    assert [(a.kind, a.job) for a in report.anomalies] == [("effect_repeated", 6)]


# -- the effects API ----------------------------------------------------------------------------


def test_record_effect_does_nothing_without_a_file_and_appends_one_line_with_one(tmp_path, monkeypatch):
    monkeypatch.delenv("LEASELAB_EFFECTS", raising=False)
    db = tmp_path / "q.db"
    with Queue(db) as q:
        q.enqueue(1)
        job = q.claim("w1")
    assert record_effect(job, "mail-1") is None and list(tmp_path.iterdir()) == [db]
    path = tmp_path / "e.jsonl"
    monkeypatch.setenv("LEASELAB_EFFECTS", str(path))
    line = record_effect(job, "mail-1", to="alice")
    assert read_effects(path) == [line]
    assert (line["job"], line["attempt"], line["token"], line["worker"], line["key"], line["detail"]) == (
        job.id,
        1,
        job.token,
        "w1",
        "mail-1",
        {"to": "alice"},
    )
    record_effect(job, path=tmp_path / "other.jsonl")  # an explicit path wins over the variable
    assert len(read_effects(path)) == 1 and len(read_effects(tmp_path / "other.jsonl")) == 1


def test_bad_effects_are_typed_errors_that_name_the_problem(tmp_path):
    path = tmp_path / "e.jsonl"
    with pytest.raises(TypeError, match="job must be the Job"):
        record_effect(7, path=path)
    job = type("J", (), {"id": 1, "attempts": 1, "token": "t", "worker": "w"})()
    with pytest.raises(TypeError, match="key must be a str"):
        record_effect(job, key=3, path=path)
    with pytest.raises(TypeError, match="must be JSON"):
        record_effect(job, path=path, when=object())
    assert not path.exists()
    path.write_text('{"job": 1, "attempt": 1}\nnot json\n')
    with pytest.raises(InvalidEffects, match="line 2"):
        read_effects(path)
    assert read_effects(tmp_path / "absent.jsonl") == []
    with pytest.raises(InvalidEffects, match="job must be a job id"):
        check_history(History(jobs=[], events=[], effects=[{"attempt": 1}]))
    with pytest.raises(InvalidEffects, match="not a dict"):
        effects_module.effects_from(lambda: ["deposit"])
    with pytest.raises(TypeError, match="effects must be None"):
        effects_module.effects_from(42)


def test_bad_options_are_typed_errors_naming_the_argument(real, tmp_path):
    db, _, _ = real
    with pytest.raises(ValueError, match="lease"):
        check(db, lease=0)
    with pytest.raises(TypeError, match="idle"):
        check(db, idle="yes")
    with pytest.raises(TypeError, match="vanished"):
        check(db, vanished="w1")
    with pytest.raises(ValueError, match="lang"):
        check(db).render("fr")
    with pytest.raises(InvalidTarget):
        check("host=db dbname=jobs")
    with pytest.raises(DatabaseMissing):
        check(tmp_path / "absent.db")
    assert not (tmp_path / "absent.db").exists()
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\n")
    with pytest.raises(NotALeaselabDatabase):
        check(notes)
    assert notes.read_text() == "shopping list\n"
    with pytest.raises(NotALeaselabDatabase, match="folder"):
        check(tmp_path)
    with pytest.raises(ValueError, match="kind"):
        Anomaly("exploded", 1, [], "lost.gone")


# -- the report in both languages ---------------------------------------------------------------


def test_both_languages_say_the_same_things():
    for table in (TITLES, SENTENCES, WORDS, COUNTED, REPORT):
        assert set(table) == set(LANGS)
        assert set(table["en"]) == set(table["ru"])
    for words in WORDS["en"]:
        assert set(WORDS["en"][words]) == set(WORDS["ru"][words])
    assert tuple(TITLES["en"]) == KINDS


@pytest.mark.parametrize(
    "n, word",
    [
        (1, "задача"),
        (2, "задачи"),
        (4, "задачи"),
        (5, "задач"),
        (11, "задач"),
        (12, "задач"),
        (14, "задач"),
        (21, "задача"),
        (22, "задачи"),
        (25, "задач"),
        (111, "задач"),
        (0, "задач"),
    ],
)
def test_russian_counts_take_the_right_plural(n, word):
    assert counted("ru", n, ("задача", "задачи", "задач")) == f"{n} {word}"


def _every_anomaly() -> Report:
    found = []
    for bad, _, options, _, _ in CASES.values():
        b = Build()
        bad(b)
        found += check_history(b.history(), **options, **b.judged()).anomalies
    return Report(anomalies=found, counts=check_history(Build().history()).counts)


def test_a_russian_report_has_no_english_sentence_and_an_english_one_no_russian():
    report = _every_anomaly()
    assert {a.what for a in report.anomalies} >= {"lost.gone", "stale.token", "effect.repeated", "fence_reused"}
    # Every anomaly shown: a "… more not shown" line names the command that shows them, in its own words.
    ru, en = report.render("ru", shown=None), report.render("en", shown=None)
    prose = [line for line in ru.splitlines() if line and not line.startswith("    ")]  # witnesses are data rows
    assert prose
    for line in prose:
        line = re.sub(r"\b[0-9a-f]{8}\b", "", line)  # tokens are data, not words
        assert not re.search(r"[A-Za-z]{2,}[ ,:]+[A-Za-z]{2,}", line), line
        assert re.search("[а-яё]", line), line
    for a in report.anomalies:
        assert a.sentence("en") not in ru and a.sentence("ru") in ru and a.title("ru") in ru
    assert not re.search("[а-яё]", en)
    # The witnesses are the same rows in both.
    assert [line for line in ru.splitlines() if line.startswith("    ")] == [
        line for line in en.splitlines() if line.startswith("    ")
    ]


def test_every_russian_template_is_russian():
    for what, template in SENTENCES["ru"].items():
        words = re.sub(r"\{[a-z_]+\}", "", template)
        assert not re.search(r"[A-Za-z]", words), what


def test_the_json_report_carries_kinds_jobs_witnesses_and_both_sentences():
    data = json.loads(json.dumps(_every_anomaly().to_json()))
    assert data["clean"] is False and {a["kind"] for a in data["anomalies"]} == set(KINDS)
    first = data["anomalies"][0]
    assert set(first) == {"kind", "job", "what", "facts", "witness", "sentence"} and set(first["sentence"]) == set(
        LANGS
    )


def test_text_another_program_wrote_is_shown_escaped():
    b = plain(Build())
    b.rows[1]["worker"] = "evil\x1b[2J"
    b.events[-1]["worker"] = "evil\x1b[2J\nforged line"
    b.rows[1]["status"] = "dead"
    out = check_history(b.history()).render()
    assert "\x1b" not in out and "forged line" in out and "\nforged line" not in out


# -- the command ---------------------------------------------------------------------------------


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_prints_the_report_and_exits_0_when_clean_1_on_an_anomaly(capsys, target):
    db = target
    with Queue(db) as q:
        q.enqueue(1)
        job = q.claim("w1")
        q.complete(job.id, job.token, None)
    code, out, err = run(capsys, "check", "--db", str(db))
    assert (code, err) == (0, "") and out.startswith("every promise held: 1 job, 0 repeated runs, 0 zombies refused")
    other_program(db, "DELETE FROM jobs WHERE id = 1")
    code, out, err = run(capsys, "check", "--db", str(db))
    assert (code, err) == (EXIT_ANOMALY, "") and out.startswith("1 anomaly in 0 jobs")
    assert "lost: job 1 is gone" in out and "events#1 job=1 enqueued" in out
    code, out, _ = run(capsys, "check", "--db", str(db), "--lang", "ru")
    assert code == EXIT_ANOMALY and out.startswith("найдено аномалий: 1 (всего 0 задач)")
    assert "задача потеряна: задача 1 пропала" in out


def test_check_json_is_for_programs(capsys, real):
    db, _, _ = real
    code, out, _ = run(capsys, "check", "--db", str(db), "--json", "--lease", "5", "--still-running")
    data = json.loads(out)
    assert code == 0 and data["clean"] is True and data["counts"]["refused_zombies"] == 1
    other_program(db, "UPDATE jobs SET status = 'dead' WHERE id = 2")
    code, out, _ = run(capsys, "check", "--db", str(db), "--json")
    data = json.loads(out)
    assert code == EXIT_ANOMALY and [(a["kind"], a["job"]) for a in data["anomalies"]] == [("history_disagrees", 2)]


def test_check_with_an_effects_file_finds_the_repeated_effect(capsys, tmp_path, target):
    db, effects = target, tmp_path / "effects.jsonl"
    with Queue(db) as q:
        q.enqueue({"effects": str(effects)})
        job = q.claim("w1")
        task(job)
        task(job)  # one claim running its effect twice
        q.complete(job.id, job.token, None)
    code, out, _ = run(capsys, "check", "--db", str(db), "--effects", str(effects))
    assert code == EXIT_ANOMALY and "effect repeated: job 1: its effect happened 2 times (attempts 1, 1); fix:" in out


def test_check_usage_errors_are_one_line_exit_2_and_create_nothing(capsys, tmp_path):
    (tmp_path / "lab.db").write_bytes(b"")
    for argv, word in (
        (["--db", str(tmp_path / "lab.bd")], "did you mean"),
        (["--db", str(tmp_path / "lab.db"), "--effects", str(tmp_path / "none.jsonl")], "--effects"),
        (["--db", str(tmp_path / "lab.db"), "--lease", "0"], "lease"),
        (["--db", str(tmp_path / "lab.db"), "--lang", "fr"], "lang"),
        (["--db", str(tmp_path / "lab.db")], "not a leaselab queue"),
    ):
        code, out, err = run(capsys, "check", *argv)
        assert code == EXIT_BAD_INPUT and out == "" and len(err.splitlines()) == 1, (argv, err)
        assert word in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab.db"]


# -- PostgreSQL ----------------------------------------------------------------------------------


def test_a_server_history_is_read_in_one_snapshot_and_checked_the_same(pg_server):
    import psycopg

    url, clock = fresh_database(pg_server, "check"), ManualClock()
    with Queue(url, clock=clock) as q:
        _, second = refused_zombie(q, clock, None, lambda z: q.heartbeat(z.id, z.token, lease=LEASE))
    report = check(url, now=clock(), lease=LEASE)
    assert report.clean, report.render()
    assert (report.counts["jobs"], report.counts["repeated_runs"], report.counts["refused_zombies"]) == (1, 1, 1)
    with psycopg.connect(url, autocommit=True) as conn:  # another program, behind the triggers' back
        conn.execute("UPDATE jobs SET status = 'dead' WHERE id = %s", (second.id,))
    report = check(url, now=clock())
    assert [(a.kind, a.job) for a in report.anomalies] == [("history_disagrees", second.id)]


def test_a_server_without_the_database_or_the_tables_is_a_clear_error(pg_server):
    import psycopg

    url = fresh_database(pg_server, "check")
    with pytest.raises(NotALeaselabDatabase):
        check(url)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE tablename IN ('jobs', 'events')").fetchone()[0] == 0
    with pytest.raises(ServerRefused):
        check(url.rsplit("/", 1)[0] + "/no_such_database_here")


def test_an_effects_file_in_another_format_is_refused_with_the_line_it_could_not_read(tmp_path, capsys, target):
    Queue(target).close()
    emails = tmp_path / "emails.jsonl"  # what a handler appended: its own lines, not record_effect's
    emails.write_text('{"job": 1, "attempt": 1, "token": "t", "key": null}\n{"to": "a@example.org", "job": 1}\n')
    with pytest.raises(InvalidEffects, match=r'emails.jsonl, line 2: .*\'to\' is no field.*\{"to": "a@example.org"'):
        read_effects(emails)
    emails.write_text('{"job": 1}\n')
    with pytest.raises(InvalidEffects, match=r"line 1: .*no attempt"):
        read_effects(emails)
    code, out, err = run(capsys, "check", "--db", target, "--effects", str(emails))
    assert code == 2 and out == "" and "emails.jsonl, line 1" in err and '{"job": 1}' in err
