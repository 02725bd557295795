"""The queue's public API, its lease semantics, its SQL and its errors, with the clock moved instead of sleeping."""

from __future__ import annotations

import dataclasses
import math
import os
import sqlite3
import stat
import threading
import time
from pathlib import Path

import pytest

from leaselab import (
    Backoff,
    DatabaseBusy,
    DatabaseMissing,
    DatabaseUnwritable,
    InvalidPayload,
    Job,
    JobNotFound,
    LeaselabError,
    LeaseLost,
    NotALeaselabDatabase,
    Queue,
    SchemaTooNew,
    Status,
    UnsupportedSQLite,
    lessons,
)
from leaselab.backends.sqlite import APPLICATION_ID, SCHEMA_VERSION, require_sqlite
from leaselab.backends.sqlite import statements as sql
from procs import as_nobody
from servers import IN_PROCESS_BACKENDS

TARGETS = IN_PROCESS_BACKENDS  # the contract suite: on the APSW backend too

LEASE = 30.0

# The tests below run on every backend (the ``queue`` and ``target`` fixtures); this narrows
# one to SQLite, for a fact of the file (query plans, pages, pragmas).
sqlite_only = pytest.mark.parametrize("target", ["sqlite"], indirect=True)


def kinds(q: Queue, job_id: int | None = None, skip_heartbeats: bool = False) -> list[str]:
    return [e.kind for e in q.events(job_id) if not (skip_heartbeats and e.kind == "heartbeat")]


def nothing_written(q: Queue) -> bool:
    return q.stats() == {"pending": 0, "running": 0, "done": 0, "dead": 0} and q.events() == []


# -- enqueue ----------------------------------------------------------------


def test_enqueue_returns_increasing_ids_and_stores_a_pending_job(queue, clock):
    first = queue.enqueue({"n": 1, "текст": "привет", "list": [1, 2.5, None, True]})
    second = queue.enqueue([1, 2, 3])
    assert isinstance(first, int) and second > first
    job = queue.get(first)
    assert isinstance(job, Job)
    assert job.payload == {"n": 1, "текст": "привет", "list": [1, 2.5, None, True]}
    assert job.status is Status.PENDING and job.status == "pending"
    assert (job.priority, job.attempts, job.max_attempts) == (0, 0, 5)
    assert job.run_at == clock() and job.created_at == clock()
    assert (job.lease_until, job.worker, job.token, job.result, job.last_error) == (None,) * 5


def test_enqueue_stores_priority_and_max_attempts(queue):
    job = queue.get(queue.enqueue("x", priority=7, max_attempts=2))
    assert (job.priority, job.max_attempts) == (7, 2)


def test_a_delayed_job_is_not_claimable_until_its_run_at(queue, clock):
    job_id = queue.enqueue("later", delay=10)
    assert queue.get(job_id).run_at == clock() + 10
    assert queue.claim("w1", LEASE) is None
    clock.advance(9.999)
    assert queue.claim("w1", LEASE) is None
    clock.advance(0.001)
    assert queue.claim("w1", LEASE).id == job_id


def test_run_at_is_absolute_and_overrides_delay(queue, clock):
    job_id = queue.enqueue("at", delay=1000, run_at=clock() + 5)
    assert queue.get(job_id).run_at == clock() + 5
    clock.advance(5)
    assert queue.claim("w1", LEASE).id == job_id


def test_enqueue_many_returns_ids_in_order_and_a_bad_payload_writes_none(queue):
    ids = queue.enqueue_many([{"i": i} for i in range(5)], priority=3)
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert [queue.get(i).payload for i in ids] == [{"i": i} for i in range(5)]
    assert all(queue.get(i).priority == 3 for i in ids)
    with pytest.raises(InvalidPayload):
        queue.enqueue_many([{"ok": 1}, {"bad": float("nan")}])
    assert queue.stats()["pending"] == 5


def test_next_run_at_is_the_earliest_pending_run_at(queue, clock):
    assert queue.next_run_at() is None
    queue.enqueue("b", delay=20)
    queue.enqueue("a", delay=5)
    assert queue.next_run_at() == clock() + 5


# -- claim --------------------------------------------------------------------


def test_claim_on_an_empty_queue_returns_none(queue):
    assert queue.claim("w1", LEASE) is None


def test_claim_leases_the_job_to_the_worker(queue, clock):
    job_id = queue.enqueue({"a": 1})
    job = queue.claim("w1", lease=12.5)
    assert job.id == job_id and job.payload == {"a": 1}
    assert job.status is Status.RUNNING
    assert job.worker == "w1" and job.attempts == 1
    assert job.lease_until == clock() + 12.5 and job.started_at == clock()
    assert isinstance(job.token, str) and len(job.token) >= 16
    assert queue.get(job_id) == job


def test_a_job_read_back_is_a_frozen_value_like_one_built_by_hand(queue):
    job = queue.get(queue.enqueue({"a": [1, 2]}, priority=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.status = Status.DONE
    fields = {f.name: getattr(job, f.name) for f in dataclasses.fields(Job)}
    assert Job(**fields) == job
    assert dataclasses.replace(job, priority=4).priority == 4 and job.priority == 3
    assert repr(job).startswith("Job(id=1, payload={'a': [1, 2]}, status=<Status.PENDING")


def test_claim_order_is_priority_then_run_at_then_id(queue, clock):
    now = clock()
    a = queue.enqueue("a", priority=0)
    b = queue.enqueue("b", priority=5)
    c = queue.enqueue("c", priority=5, run_at=now - 10)
    d = queue.enqueue("d", priority=0, run_at=now - 5)
    e = queue.enqueue("e", priority=0)
    f = queue.enqueue("f", priority=-1, run_at=now - 100)
    later = queue.enqueue("later", priority=100, delay=1)
    order = [queue.claim("w", LEASE).id for _ in range(6)]
    assert order == [c, b, d, a, e, f]
    assert queue.claim("w", LEASE) is None
    clock.advance(1)
    assert queue.claim("w", LEASE).id == later


def test_a_claimed_job_is_not_claimed_again_while_running(queue):
    queue.enqueue("only")
    assert queue.claim("w1", LEASE) is not None
    assert queue.claim("w2", LEASE) is None


# -- heartbeat, complete, fail --------------------------------------------------


def test_heartbeat_extends_the_lease_so_the_reaper_leaves_the_job(queue, clock):
    queue.enqueue("x")
    job = queue.claim("w1", lease=10)
    clock.advance(8)
    new_until = queue.heartbeat(job.id, job.token, lease=10)
    assert new_until == clock() + 10
    assert queue.get(job.id).lease_until == new_until
    clock.advance(5)  # past the first lease, inside the renewed one
    assert queue.reap() == []
    assert queue.get(job.id).status is Status.RUNNING


def test_complete_stores_the_result_and_marks_done(queue, clock):
    queue.enqueue("x")
    job = queue.claim("w1", LEASE)
    clock.advance(3)
    queue.complete(job.id, job.token, result={"answer": 42, "list": [1, "два"]})
    done = queue.get(job.id)
    assert done.status is Status.DONE
    assert done.result == {"answer": 42, "list": [1, "два"]}
    assert done.finished_at == clock() and done.lease_until is None
    assert queue.claim("w2", LEASE) is None


def test_complete_twice_is_refused_with_lease_lost(queue):
    queue.enqueue("x")
    job = queue.claim("w1", LEASE)
    queue.complete(job.id, job.token, "first")
    with pytest.raises(LeaseLost) as info:
        queue.complete(job.id, job.token, "second")
    assert info.value.job_id == job.id and info.value.status == "done"
    assert queue.get(job.id).result == "first"


def test_fail_returns_pending_and_the_job_waits_out_its_backoff(target, clock):
    q = Queue(target, clock=clock, backoff=Backoff(base=2, cap=100))
    job_id = q.enqueue("x", max_attempts=3)
    job = q.claim("w1", LEASE)
    assert q.fail(job.id, job.token, "boom") is Status.PENDING
    failed = q.get(job_id)
    assert failed.status is Status.PENDING and failed.last_error == "boom"
    assert failed.run_at == clock() + 2 and failed.lease_until is None
    assert q.claim("w1", LEASE) is None
    clock.advance(2)
    job = q.claim("w1", LEASE)
    assert job.attempts == 2
    assert q.fail(job.id, job.token, "boom again") is Status.PENDING
    assert q.get(job_id).run_at == clock() + 4  # base * 2**(attempts-1)
    q.close()


def test_fail_on_the_last_attempt_makes_the_job_dead(queue, clock):
    job_id = queue.enqueue("x", max_attempts=2)
    for attempt in (1, 2):
        job = queue.claim("w1", LEASE)
        assert job.attempts == attempt
        status = queue.fail(job.id, job.token, f"boom {attempt}")
        clock.advance(100)
    assert status is Status.DEAD
    dead = queue.get(job_id)
    assert dead.status is Status.DEAD and dead.last_error == "boom 2" and dead.finished_at is not None
    assert queue.claim("w1", LEASE) is None
    assert kinds(queue, job_id) == ["enqueued", "claimed", "failed", "claimed", "failed", "dead"]


# -- reap -------------------------------------------------------------------------


def test_reap_moves_an_expired_lease_back_to_pending_with_backoff(queue, clock):
    job_id = queue.enqueue("x")
    queue.claim("w1", lease=10)
    clock.advance(10)
    assert queue.reap() == []  # lease_until < now, strictly: at the very instant it still holds
    clock.advance(0.5)
    assert queue.reap() == [job_id]
    job = queue.get(job_id)
    assert job.status is Status.PENDING and job.last_error == "lease expired"
    assert job.run_at == clock() + queue.backoff.delay(1) and job.lease_until is None
    assert queue.reap() == []


def test_reap_leaves_unexpired_leases_and_returns_only_what_it_moved(queue, clock):
    short, long_ = queue.enqueue("short"), queue.enqueue("long")
    queue.claim("w1", lease=5)
    queue.claim("w2", lease=50)
    clock.advance(6)
    assert queue.reap() == [short]
    assert queue.get(long_).status is Status.RUNNING


def test_reap_keeps_every_job_a_batch_claim_took_when_kept_by_that_claims_own_token(queue, clock):
    """A worker keeps a claim it has sent before it knows which jobs it took, and no other claim's."""
    queue.enqueue_many(["a", "b", "c"])
    mine = queue.claim_many(2, "w1", lease=5, token="f" * 32)
    theirs = queue.claim("w2", lease=5)
    clock.advance(6)
    assert queue.reap(keep=["f" * 32]) == [theirs.id]
    assert [queue.get(job.id).status for job in mine] == [Status.RUNNING, Status.RUNNING]
    assert sorted(queue.reap(keep=["f" * 31])) == sorted(job.id for job in mine)  # a prefix alone keeps nothing


def test_reap_on_the_last_attempt_makes_the_job_dead(queue, clock):
    job_id = queue.enqueue("x", max_attempts=1)
    queue.claim("w1", lease=5)
    clock.advance(6)
    assert queue.reap() == [job_id]
    assert queue.get(job_id).status is Status.DEAD
    assert kinds(queue, job_id) == ["enqueued", "claimed", "reaped", "dead"]


# -- lease semantics and fencing ---------------------------------------------------


def test_a_late_holder_not_yet_reaped_can_still_heartbeat_and_complete(queue, clock):
    queue.enqueue("x")
    job = queue.claim("w1", lease=5)
    clock.advance(20)  # far past lease_until, but nobody reaped
    assert queue.heartbeat(job.id, job.token, lease=5) == clock() + 5
    clock.advance(20)
    queue.complete(job.id, job.token, "late but fine")
    assert queue.get(job.id).status is Status.DONE
    assert queue.get(job.id).result == "late but fine"


def test_after_the_reap_the_old_holder_gets_lease_lost_on_every_write(queue, clock):
    queue.enqueue("x")
    job = queue.claim("w1", lease=5)
    clock.advance(6)
    queue.reap()
    for write in (lambda: queue.heartbeat(job.id, job.token, 5),
                  lambda: queue.complete(job.id, job.token, "zombie"),
                  lambda: queue.fail(job.id, job.token, "zombie")):
        with pytest.raises(LeaseLost) as info:
            write()
        assert info.value.job_id == job.id
        assert isinstance(info.value, LeaselabError)
    after = queue.get(job.id)
    assert after.status is Status.PENDING and after.result is None and after.last_error == "lease expired"


def test_after_a_reclaim_the_zombie_is_fenced_off_and_the_new_result_stands(queue, clock):
    queue.enqueue("x")
    a = queue.claim("A", lease=5)
    clock.advance(6)
    queue.reap()
    clock.advance(queue.backoff.delay(1))
    b = queue.claim("B", lease=5)
    assert b.id == a.id and b.token != a.token and b.attempts == 2
    with pytest.raises(LeaseLost):
        queue.heartbeat(a.id, a.token, 5)
    queue.complete(b.id, b.token, {"by": "B"})
    with pytest.raises(LeaseLost) as info:
        queue.complete(a.id, a.token, {"by": "A"})
    assert info.value.status == "done"
    final = queue.get(a.id)
    assert final.status is Status.DONE and final.result == {"by": "B"} and final.worker == "B"


def test_a_refused_write_is_recorded_as_a_lease_lost_event_of_the_zombie(queue, clock):
    queue.enqueue("x")
    a = queue.claim("A", lease=5)
    clock.advance(6)
    queue.reap()
    clock.advance(5)
    b = queue.claim("B", lease=5)
    with pytest.raises(LeaseLost):
        queue.complete(a.id, a.token, "zombie")
    lost = [e for e in queue.events(a.id) if e.kind == "lease_lost"]
    assert len(lost) == 1
    assert (lost[0].worker, lost[0].token, lost[0].attempt) == ("A", a.token, 1)
    assert lost[0].at == clock() and "complete" in lost[0].detail
    assert queue.get(a.id).token == b.token  # the refused write changed nothing


def test_tokens_are_unique_per_claim_and_attempts_rise_on_every_claim(queue, clock):
    job_id = queue.enqueue("x", max_attempts=40)
    tokens, fences = [], []
    for n in range(1, 41):
        job = queue.claim(f"w{n % 3}", lease=1)
        assert job.attempts == n
        tokens.append(job.token)
        fences.append(job.fence)
        if n % 2:
            queue.fail(job.id, job.token, "again")
        else:
            clock.advance(2)
            queue.reap()
        clock.advance(queue.backoff.cap)
    assert len(set(tokens)) == len(tokens)
    assert fences == sorted(fences) and len(set(fences)) == len(fences)
    assert fences[0] == (job_id, 1) and fences[-1] == (job_id, 40)
    assert queue.get(job_id).status is Status.DEAD


# -- reading ------------------------------------------------------------------------


def test_get_jobs_and_stats_show_every_status(queue, clock):
    assert queue.stats() == {"pending": 0, "running": 0, "done": 0, "dead": 0}
    assert queue.jobs() == []
    ids = queue.enqueue_many(["done", "dead", "running", "pending"], max_attempts=1)
    j = queue.claim("w", LEASE)
    queue.complete(j.id, j.token, "ok")
    j = queue.claim("w", LEASE)
    queue.fail(j.id, j.token, "bad")
    queue.claim("w", LEASE)
    assert queue.stats() == {"pending": 1, "running": 1, "done": 1, "dead": 1}
    assert [job.id for job in queue.jobs()] == ids
    assert [job.status.value for job in queue.jobs()] == ["done", "dead", "running", "pending"]
    assert [job.id for job in queue.jobs(status="dead")] == [ids[1]]
    assert [job.id for job in queue.jobs(status=Status.RUNNING)] == [ids[2]]
    assert [job.id for job in queue.jobs(limit=2)] == ids[:2]
    with pytest.raises(ValueError, match="status"):
        queue.jobs(status="sleeping")


def test_jobs_newest_first_gives_the_latest_n(queue):
    ids = queue.enqueue_many(range(5))
    assert [j.id for j in queue.jobs(limit=2, newest_first=True)] == ids[:-3:-1]
    assert [j.id for j in queue.jobs(status="pending", limit=3, newest_first=True)] == ids[:-4:-1]


def test_events_tell_the_story_of_a_job_in_order_with_worker_token_and_attempt(queue, clock):
    other = queue.enqueue("other")
    job_id = queue.enqueue("x", priority=1)
    t0 = clock()
    first = queue.claim("w1", LEASE)
    clock.advance(1)
    queue.heartbeat(first.id, first.token, LEASE)
    clock.advance(1)
    queue.fail(first.id, first.token, "boom")
    clock.advance(10)
    second = queue.claim("w2", LEASE)
    clock.advance(1)
    queue.complete(second.id, second.token, "ok")

    events = queue.events(job_id)
    assert [e.kind for e in events] == ["enqueued", "claimed", "heartbeat", "failed", "claimed", "completed"]
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert all(e.job_id == job_id for e in events)
    assert [e.at for e in events] == [t0, t0, t0 + 1, t0 + 2, t0 + 12, t0 + 13]
    assert [e.attempt for e in events] == [0, 1, 1, 1, 2, 2]
    assert [e.worker for e in events] == [None, "w1", "w1", "w1", "w2", "w2"]
    assert [e.token for e in events] == [None, first.token, first.token, first.token, second.token, second.token]
    assert events[3].detail == "boom"
    everything = queue.events()
    assert {e.job_id for e in everything} == {other, job_id}
    assert queue.events(after=events[2].id)[0].id > events[2].id
    assert [e.kind for e in queue.events(job_id, after=events[3].id)] == ["claimed", "completed"]


def test_the_history_agrees_with_the_jobs_table(queue, clock):
    ids = queue.enqueue_many(list(range(30)), max_attempts=3)
    for round_ in range(6):
        for n in range(10):
            job = queue.claim(f"w{n}", lease=5)
            if job is None:
                break
            choice = (job.id + round_) % 4
            if choice == 0:
                queue.complete(job.id, job.token, job.payload)
            elif choice == 1:
                queue.fail(job.id, job.token, "x")
            elif choice == 2:
                queue.heartbeat(job.id, job.token, 5)
            # choice 3: abandoned, the reaper gets it
        clock.advance(6)
        queue.reap()
        clock.advance(queue.backoff.cap)
    last_kind = {"done": {"completed"}, "dead": {"dead"}, "pending": {"enqueued", "failed", "reaped"},
                 "running": {"claimed", "heartbeat"}}
    statuses = set()
    for job_id in ids:
        job = queue.get(job_id)
        history = queue.events(job_id)
        statuses.add(job.status.value)
        assert sum(e.kind == "claimed" for e in history) == job.attempts
        assert history[0].kind == "enqueued"
        assert history[-1].kind in last_kind[job.status.value]
        assert sum(e.kind in ("completed", "dead") for e in history) == (job.status in ("done", "dead"))
    assert {"done", "dead"} <= statuses


# -- the SQL --------------------------------------------------------------------------


def plan(q: Queue, statement: str, params: dict) -> list[str]:
    return [row[3] for row in q.backend.connection.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()]


@sqlite_only
def test_the_claim_is_one_statement_served_by_the_claim_index_without_a_temp_btree(queue, clock):
    queue.enqueue_many([{"i": i} for i in range(200)], priority=1)
    for _ in range(50):
        j = queue.claim("w", LEASE)
        queue.complete(j.id, j.token)
    steps = plan(queue, sql.CLAIM, {"now": clock(), "lease_until": clock() + 1, "worker": "w", "token": "t"})
    assert any("jobs_claim" in s for s in steps), steps
    assert not any("TEMP B-TREE" in s for s in steps), steps
    assert sql.CLAIM.strip().upper().startswith("UPDATE JOBS")
    assert "RETURNING" in sql.CLAIM.upper() and "LIMIT 1" in sql.CLAIM.upper()


@sqlite_only
def test_the_claim_jumps_over_delayed_jobs_at_a_higher_priority_instead_of_stepping_over_each(queue):
    queue.enqueue_many(list(range(20)), priority=9, delay=3600)  # urgent, but not yet
    queue.enqueue_many(["first", "second"])
    few, first = lessons.claim_steps(queue)
    queue.enqueue_many(list(range(20_000)), priority=9, delay=3600)
    many, second = lessons.claim_steps(queue)
    assert (first.payload, second.payload) == ("first", "second")
    assert many <= few * 1.5, (few, many)  # without the statistics: ~100,000 steps against ~300
    steps = plan(queue, sql.CLAIM, {"now": 0, "lease_until": 1, "worker": "w", "token": "t"})
    assert any("jobs_claim (ANY(priority) AND run_at<?)" in s for s in steps), steps


def test_the_claim_statistics_are_written_once_and_a_real_analyze_is_kept(db_path, clock):
    with Queue(db_path, clock=clock) as q:
        q.enqueue_many(list(range(50)))
        q.backend.connection.execute("ANALYZE")
        real = q.backend.connection.execute("SELECT stat FROM sqlite_stat1 WHERE idx = 'jobs_claim'").fetchone()[0]
    assert real.startswith("50 ")
    with Queue(db_path, clock=clock) as q:  # opening again does not overwrite what ANALYZE found
        assert q.backend.connection.execute("SELECT stat FROM sqlite_stat1 WHERE idx = 'jobs_claim'").fetchone()[0] == real


@sqlite_only
def test_the_reaper_is_one_statement_served_by_the_lease_index(queue, clock):
    steps = plan(queue, sql.REAP, {"now": clock(), "keep": '["a", "b"]'})
    assert any("jobs_lease" in s for s in steps), steps
    assert not any("TEMP B-TREE" in s for s in steps), steps
    assert sql.REAP.strip().upper().startswith("UPDATE JOBS")


@sqlite_only
def test_one_jobs_history_is_read_by_walking_its_links_not_by_scanning_every_event(queue, clock):
    ids = queue.enqueue_many(list(range(300)))
    for _ in range(300):  # interleave: every job's events are spread across the whole table
        job = queue.claim("w", LEASE)
        queue.heartbeat(job.id, job.token, LEASE)
        queue.complete(job.id, job.token, job.payload)
    for statement in (sql.EVENTS_FOR_JOB, sql.RECORD_LEASE_LOST):
        params = {"id": ids[7], "after": 0, "token": "t", "now": clock(), "detail": "d"}
        steps = plan(queue, statement, params)
        assert not any(s.startswith("SCAN e") for s in steps), steps  # events is only ever SEARCHed by rowid
    assert [e.kind for e in queue.events(ids[7])] == ["enqueued", "claimed", "heartbeat", "completed"]
    assert {e.job_id for e in queue.events(ids[7])} == {ids[7]}
    whole = queue.events()
    for job_id in (ids[0], ids[150], ids[-1]):
        assert queue.events(job_id) == [e for e in whole if e.job_id == job_id]


def test_a_new_file_uses_small_pages_and_the_current_schema(db_path, clock):
    Queue(db_path, clock=clock).close()
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 1024
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    assert {r[1]: r[5] for r in conn.execute("PRAGMA table_list")}["jobs"] == 1  # STRICT
    conn.close()


def _version_1_file(path: Path) -> dict[int, list[tuple]]:
    """A file as leaselab's schema version 1 wrote it (4 KiB pages, events indexed by job), with history."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript((Path(__file__).parent / "data" / "schema_v1.sql").read_text())
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    for n in range(3):
        conn.execute("INSERT INTO jobs (payload, run_at, created_at, updated_at) VALUES (?, 1, 1, 1)", (str(n),))
    for job_id, token in ((1, "a"), (2, "b"), (1, "c")):  # job 1 is claimed twice, around job 2
        conn.execute("UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = 'old', token = ?, "
                     "lease_until = 99, updated_at = 2, last_event = 'claimed' WHERE id = ?", (token, job_id))
    conn.execute("UPDATE jobs SET status = 'done', result = '1', lease_until = NULL, updated_at = 3, "
                 "last_event = 'completed' WHERE id = 2")
    history = {j: conn.execute("SELECT id, kind, token FROM events WHERE job_id = ? ORDER BY id", (j,)).fetchall()
               for j in (1, 2, 3)}
    conn.close()
    return history


def test_a_version_1_file_is_upgraded_in_place_and_keeps_its_history(tmp_path, clock):
    path = tmp_path / "v1.db"
    before = _version_1_file(path)
    with Queue(path, clock=clock) as q:
        assert {j: [(e.id, e.kind, e.token) for e in q.events(j)] for j in (1, 2, 3)} == before
        with pytest.raises(LeaseLost):  # the first claim's token was fenced off by the second
            q.complete(1, "a")
        q.complete(1, "c", "late but fine")
        assert [e.kind for e in q.events(1)] == ["enqueued", "claimed", "claimed", "lease_lost", "completed"]
        assert q.events(1)[3].worker == "old" and q.events(1)[3].attempt == 1  # found through the links
        assert q.claim("new").id == 3
        assert q.stats() == {"pending": 0, "running": 1, "done": 2, "dead": 0}
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    assert {r[1]: r[5] for r in conn.execute("PRAGMA table_list")}["jobs"] == 1  # STRICT
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'events_job'").fetchone()[0] == 0
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096  # an old file keeps its pages
    assert conn.execute("SELECT count(*) FROM sqlite_stat1 WHERE idx = 'jobs_claim'").fetchone()[0] == 1
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_the_tracer_sees_the_exact_claim_statement_and_its_params(queue, clock):
    queue.enqueue("x")
    seen = []
    queue.tracer = lambda statement, params: seen.append((statement, params))
    job = queue.claim("w7", lease=9)
    assert (queue.backend.statements.CLAIM.strip(), {"now": clock(), "lease_until": clock() + 9, "worker": "w7",
                                "token": job.token}) in seen
    queue.tracer = None
    queue.reap()
    assert len(seen) == 1


# -- durability ------------------------------------------------------------------------


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_both_durabilities_run_a_job_through_and_survive_reopening(target, clock, durability):
    q = Queue(target, clock=clock, durability=durability)
    job_id = q.enqueue({"d": durability})
    job = q.claim("w", LEASE)
    q.complete(job.id, job.token, durability)
    q.close()
    with Queue(target, clock=clock) as again:
        assert again.get(job_id).result == durability


def test_an_unknown_durability_is_a_value_error(db_path):
    with pytest.raises(ValueError, match="durability"):
        Queue(db_path, durability="paranoid")
    assert not db_path.exists()


def _sync_levels_of_writes(q: Queue, action) -> set[int]:
    """Run ``action`` and return the PRAGMA synchronous level (1 NORMAL, 2 FULL) its writes committed at."""
    level = q.backend.connection.execute("PRAGMA synchronous").fetchone()[0]
    statements: list[str] = []
    q.backend.connection.set_trace_callback(statements.append)
    try:
        action()
    finally:
        q.backend.connection.set_trace_callback(None)
    levels = set()
    for statement in statements:
        text = " ".join(statement.split()).upper()
        if text.startswith("PRAGMA SYNCHRONOUS ="):
            level = {"FULL": 2, "NORMAL": 1}[text.rsplit(" ", 1)[1]]
        elif text.startswith(("INSERT", "UPDATE", "WITH", "COMMIT")):
            levels.add(level)
    return levels


def test_a_full_queue_syncs_enqueue_claim_and_complete_and_nothing_else(db_path, clock):
    q = Queue(db_path, clock=clock, durability="full")
    job_ids, holder = [], []
    assert _sync_levels_of_writes(q, lambda: job_ids.append(q.enqueue("x"))) == {2}
    assert _sync_levels_of_writes(q, lambda: q.enqueue_many(["y", "z"])) == {2}
    # A claim's fence (attempt, token) is what outside stores trust: a crash must never hand it out twice.
    assert _sync_levels_of_writes(q, lambda: holder.append(q.claim("w", LEASE))) == {2}
    batch: list = []
    assert _sync_levels_of_writes(q, lambda: batch.extend(q.claim_many(2, "w", LEASE))) == {2}
    assert len(batch) == 2 and q.complete_many([(j.id, j.token, "ok") for j in batch]) == []
    job = holder[0]
    assert _sync_levels_of_writes(q, lambda: q.heartbeat(job.id, job.token, LEASE)) == {1}
    assert _sync_levels_of_writes(q, lambda: q.complete(job.id, job.token, "ok")) == {2}
    assert _sync_levels_of_writes(q, lambda: q.reap()) == {1}
    q.enqueue_many(["n", "m"])
    nxt = q.claim("w", LEASE)
    assert _sync_levels_of_writes(q, lambda: holder.append(q.complete_and_claim(nxt.id, nxt.token))) == {2}
    lost = holder[-1]
    q.reap()
    clock.advance(LEASE + 1)
    q.reap()
    refused = []

    def zombie_completes():
        with pytest.raises(LeaseLost) as info:
            q.complete(lost.id, lost.token)
        refused.append(info.value)

    # The completion is attempted at FULL and changes nothing; the refusal's record is history,
    # not a result, so it is written at NORMAL.
    assert _sync_levels_of_writes(q, zombie_completes) == {1, 2}
    assert len(refused) == 1 and q.events(lost.id)[-1].kind == "lease_lost"
    q.close()


def test_a_full_queue_switches_the_sync_level_only_when_it_changes(db_path, clock):
    """A worker's loop of complete_and_claim, or a run of enqueues, issues no PRAGMA per job."""
    q = Queue(db_path, clock=clock, durability="full")
    statements: list[str] = []
    q.backend.connection.set_trace_callback(statements.append)
    for n in range(10):
        q.enqueue(n)
    job = q.claim("w", LEASE)
    while job is not None:
        job = q.complete_and_claim(job.id, job.token, worker="w", lease=LEASE)
    pragmas = [s for s in statements if s.upper().startswith("PRAGMA SYNCHRONOUS")]
    # FULL for the enqueues, the first claim and the whole drain: one switch, from the connection's NORMAL.
    assert pragmas == ["PRAGMA synchronous = FULL"]
    assert q.stats()["done"] == 10
    q.backend.connection.set_trace_callback(None)
    q.close()


def test_a_normal_queue_never_asks_for_a_full_sync(db_path, clock):
    q = Queue(db_path, clock=clock, durability="normal")
    statements: list[str] = []
    q.backend.connection.set_trace_callback(statements.append)
    q.enqueue("x")
    q.enqueue_many(["y"])
    job = q.claim("w", LEASE)
    q.complete(job.id, job.token, "ok")
    assert not any("synchronous = FULL" in s for s in statements)
    assert q.backend.connection.execute("PRAGMA synchronous").fetchone()[0] == 1
    assert q.backend.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    q.close()


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [float("nan"), float("inf"), {"x": float("-inf")}, {1, 2}, object(),
                                     b"bytes", {"nested": [object()]}])
def test_a_payload_that_is_not_json_is_refused_and_nothing_is_written(queue, payload):
    with pytest.raises(InvalidPayload) as info:
        queue.enqueue(payload)
    assert isinstance(info.value, ValueError) and isinstance(info.value, LeaselabError)
    assert "payload" in str(info.value)
    assert nothing_written(queue)


def test_a_result_that_is_not_json_is_refused_and_the_job_stays_running(queue):
    queue.enqueue("x")
    job = queue.claim("w", LEASE)
    with pytest.raises(InvalidPayload, match="result"):
        queue.complete(job.id, job.token, {"v": math.nan})
    assert queue.get(job.id).status is Status.RUNNING
    assert kinds(queue, job.id) == ["enqueued", "claimed"]


@pytest.mark.parametrize("lease, error", [(0, ValueError), (-1, ValueError), (float("nan"), ValueError),
                                          (float("inf"), ValueError), (True, TypeError), ("5", TypeError),
                                          (None, TypeError)])
def test_a_bad_lease_names_the_argument_and_writes_nothing(queue, lease, error):
    queue.enqueue("x")
    with pytest.raises(error, match="lease"):
        queue.claim("w", lease=lease)
    assert queue.stats()["running"] == 0 and kinds(queue) == ["enqueued"]
    queue.enqueue("y")
    job = queue.claim("w", LEASE)
    with pytest.raises(error, match="lease"):
        queue.heartbeat(job.id, job.token, lease=lease)
    assert queue.get(job.id).lease_until == job.lease_until


@pytest.mark.parametrize("max_attempts, error", [(0, ValueError), (-3, ValueError), (1.5, TypeError),
                                                 (True, TypeError)])
def test_max_attempts_below_one_is_refused_and_nothing_is_written(queue, max_attempts, error):
    with pytest.raises(error, match="max_attempts"):
        queue.enqueue("x", max_attempts=max_attempts)
    assert nothing_written(queue)


@pytest.mark.parametrize("kwargs, error, name", [
    ({"priority": 1.5}, TypeError, "priority"),
    ({"delay": -1}, ValueError, "delay"),
    ({"delay": float("nan")}, ValueError, "delay"),
    ({"run_at": "soon"}, TypeError, "run_at"),
])
def test_other_bad_enqueue_arguments_name_themselves_and_write_nothing(queue, kwargs, error, name):
    with pytest.raises(error, match=name):
        queue.enqueue("x", **kwargs)
    assert nothing_written(queue)


def test_a_bad_worker_name_is_refused(queue):
    queue.enqueue("x")
    for bad in ("", None, 3):
        with pytest.raises(TypeError, match="worker"):
            queue.claim(bad, LEASE)
    assert queue.stats()["pending"] == 1


@pytest.mark.parametrize("call", [
    lambda q: q.get(999),
    lambda q: q.heartbeat(999, "token", LEASE),
    lambda q: q.complete(999, "token", "r"),
    lambda q: q.fail(999, "token", "e"),
])
def test_an_unknown_job_id_is_job_not_found_and_writes_nothing(queue, call):
    with pytest.raises(JobNotFound) as info:
        call(queue)
    assert info.value.job_id == 999 and isinstance(info.value, LeaselabError)
    assert nothing_written(queue)


def test_a_job_id_of_the_wrong_type_is_a_type_error(queue):
    with pytest.raises(TypeError, match="job_id"):
        queue.get("1")


def file_bytes_and_siblings(path: Path) -> tuple[bytes, list[str]]:
    return path.read_bytes(), sorted(p.name for p in path.parent.iterdir())


def test_a_file_that_is_not_sqlite_is_refused_and_left_byte_for_byte(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 100)
    before = file_bytes_and_siblings(path)
    with pytest.raises(NotALeaselabDatabase):
        Queue(path)
    assert file_bytes_and_siblings(path) == before


def test_a_sqlite_file_of_another_application_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO customers (name) VALUES ('Ада')")
    conn.commit()
    conn.close()
    before = file_bytes_and_siblings(path)
    with pytest.raises(NotALeaselabDatabase, match="another application"):
        Queue(path)
    assert file_bytes_and_siblings(path) == before


def test_a_leaselab_file_with_a_newer_schema_is_refused(db_path):
    Queue(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(SchemaTooNew, match="99"):
        Queue(db_path)


def test_a_missing_folder_is_database_unwritable_and_is_not_created(tmp_path):
    missing = tmp_path / "no" / "such" / "folder"
    with pytest.raises(DatabaseUnwritable):
        Queue(missing / "jobs.db")
    assert not (tmp_path / "no").exists()


def test_a_fresh_file_is_not_mistaken_for_foreign_when_another_queue_creates_the_schema_meanwhile(
        tmp_path, monkeypatch):
    # Pin the race of many workers opening one new file: another process creates the schema between
    # our reading the file's ids and our listing its tables. Either it must wait for our read to end,
    # or we must see its schema whole; we must never see its tables without its ids.
    path = tmp_path / "fresh.db"
    real_connect = sqlite3.connect
    others: list[str] = []
    started: list[bool] = []

    class Interleaved(sqlite3.Connection):
        def execute(self, statement, *args):
            if statement.startswith("SELECT name FROM sqlite_master") and not started:
                started.append(True)  # once: the other queue's own connection is Interleaved too

                def other_process():
                    try:
                        Queue(path, busy_timeout=0.5).close()
                        others.append("created the schema")
                    except LeaselabError as exc:
                        others.append(f"waited: {type(exc).__name__}")
                thread = threading.Thread(target=other_process)
                thread.start()
                thread.join()
            return super().execute(statement, *args)

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real_connect(*a, factory=Interleaved, **k))
    with Queue(path) as q:
        job_id = q.enqueue("first")
    monkeypatch.undo()
    assert others, "the interleaving never happened"
    with Queue(path) as q:
        assert q.get(job_id).payload == "first"


def test_a_folder_given_as_the_queue_file_is_refused(tmp_path):
    with pytest.raises(NotALeaselabDatabase, match="folder"):
        Queue(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_clock_that_is_not_callable_or_not_a_number_is_refused(target):
    with pytest.raises(TypeError, match="clock"):
        Queue(target, clock=12.0)
    with Queue(target, clock=lambda: float("nan")) as q:
        with pytest.raises(ValueError, match="clock"):
            q.enqueue("x")
    with Queue(target) as q:
        assert nothing_written(q)


def test_an_old_sqlite_is_refused_and_3_37_is_enough():
    with pytest.raises(UnsupportedSQLite, match="3.37 or newer for STRICT tables; this Python links SQLite 3.36.0"):
        require_sqlite((3, 36, 0))
    require_sqlite((3, 37, 0))
    require_sqlite(sqlite3.sqlite_version_info)


# -- permissions: real only for a user the bits apply to ---------------------------------

def _open_outcome(path: Path) -> str:
    """What opening a Queue on ``path`` did: "opened", or the error's type and message."""
    try:
        Queue(path).close()
        return "opened"
    except Exception as exc:  # noqa: BLE001 - any outcome is reported, the test judges it
        return f"{type(exc).__name__}: {exc}"


def _needs_bits_or_root(folder: Path) -> None:
    if os.geteuid() != 0 and os.access(folder, os.W_OK):
        pytest.skip("not root, and permission bits do not stop this user from writing here")


def test_a_folder_that_is_not_writable_is_database_unwritable(open_dir):
    locked = open_dir / "locked"
    locked.mkdir(mode=0o755)
    target = locked / "jobs.db"
    if os.geteuid() != 0:
        locked.chmod(0o555)
        _needs_bits_or_root(locked)
    outcome = as_nobody(lambda: _open_outcome(target))
    assert outcome.startswith("DatabaseUnwritable"), outcome
    assert "not writable" in outcome
    assert not target.exists()


def test_a_read_only_queue_file_is_database_unwritable_and_unchanged(open_dir):
    shared = open_dir / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # the folder is writable by anyone; only the file is not
    target = shared / "jobs.db"
    with Queue(target) as q:
        q.enqueue("x")
    for sidecar in ("jobs.db-wal", "jobs.db-shm"):
        assert not (shared / sidecar).exists()
    target.chmod(0o644)
    before = file_bytes_and_siblings(target)
    if os.geteuid() != 0:
        target.chmod(0o444)
        if os.access(target, os.W_OK):
            pytest.skip("not root, and permission bits do not stop this user from writing the file")
    outcome = as_nobody(lambda: _open_outcome(target))
    assert outcome.startswith("DatabaseUnwritable"), outcome
    assert file_bytes_and_siblings(target) == before
    assert stat.S_IMODE(target.stat().st_mode) in (0o644, 0o444)


# -- complete_and_claim: the worker's hot path, one transaction ------------------------------------


def test_complete_and_claim_finishes_the_job_and_leases_the_next_to_the_same_worker(queue, clock):
    first, second = queue.enqueue("a"), queue.enqueue("b")
    job = queue.claim("w1", lease=10)
    clock.advance(1)
    nxt = queue.complete_and_claim(job.id, job.token, {"ok": 1}, worker="w1", lease=10)
    assert queue.get(first).status == "done" and queue.get(first).result == {"ok": 1}
    assert nxt.id == second and nxt.status == "running" and nxt.worker == "w1"
    assert nxt.token != job.token and nxt.lease_until == clock() + 10
    kinds = [(e.job_id, e.kind) for e in queue.events() if e.kind in ("claimed", "completed")]
    assert kinds == [(first, "claimed"), (first, "completed"), (second, "claimed")]


def test_complete_and_claim_returns_none_when_nothing_is_left(queue):
    queue.enqueue("only")
    job = queue.claim("w1")
    assert queue.complete_and_claim(job.id, job.token, None, worker="w1") is None
    assert queue.stats() == {"pending": 0, "running": 0, "done": 1, "dead": 0}


def test_complete_and_claim_with_a_stale_token_is_lease_lost_and_claims_nothing(queue, clock):
    job_id = queue.enqueue("x")
    zombie = queue.claim("w1", lease=5)
    clock.advance(6)
    queue.reap()
    clock.advance(60)  # past the backoff
    fresh = queue.claim("w2", lease=5)
    waiting = queue.enqueue("y")  # something w1 could take if the refused call claimed anyway
    with pytest.raises(LeaseLost) as lost:
        queue.complete_and_claim(zombie.id, zombie.token, "zombie result", worker="w1")
    assert lost.value.job_id == job_id
    now = queue.get(job_id)
    assert (now.status, now.token, now.result) == ("running", fresh.token, None)
    assert queue.get(waiting).status == "pending" and queue.get(waiting).attempts == 0
    assert queue.events(job_id)[-1].kind == "lease_lost"


def test_complete_and_claim_for_an_unknown_job_is_job_not_found_and_claims_nothing(queue):
    queue.enqueue("x")
    with pytest.raises(JobNotFound):
        queue.complete_and_claim(999, "token", None, worker="w1")
    assert queue.stats()["pending"] == 1


def test_create_false_refuses_a_missing_file_naming_it_and_the_nearest_queue_and_makes_nothing(tmp_path):
    Queue(tmp_path / "lab.db").close()
    typo = tmp_path / "lab.bd"
    with pytest.raises(DatabaseMissing) as caught:
        Queue(typo, create=False)
    assert isinstance(caught.value, FileNotFoundError) and isinstance(caught.value, LeaselabError)
    assert str(typo) in str(caught.value) and f"did you mean {tmp_path / 'lab.db'}?" in str(caught.value)
    assert caught.value.nearest == str(tmp_path / "lab.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab.db"]


def test_create_false_suggests_nothing_when_no_queue_file_is_close(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(DatabaseMissing) as caught:
        Queue(tmp_path / "jobs.db", create=False)
    assert caught.value.nearest is None and "did you mean" not in str(caught.value)


def test_create_false_opens_an_existing_queue_and_the_default_still_creates_one(tmp_path):
    path = tmp_path / "jobs.db"
    with Queue(path) as q:  # the default: the lessons rely on a first Queue() making the file
        job_id = q.enqueue("x")
    with Queue(path, create=False) as q:
        assert q.get(job_id).payload == "x"


# -- completing: the caller's statements and the completion in one transaction ------------------
# The statements take no parameters, so the same SQL runs on every backend's connection.


def _ledger(q: Queue) -> list:
    return q.backend.connection.execute("SELECT n FROM ledger ORDER BY n").fetchall()


def test_completing_commits_the_callers_statements_with_the_completion(queue):
    with queue.backend.transaction(durable=False) as run:
        run("CREATE TABLE ledger (n integer)")
    queue.enqueue("pay")
    job = queue.claim("w1")
    with queue.completing(job, result="paid") as tx:
        tx.execute("INSERT INTO ledger VALUES (1)")
    assert _ledger(queue) == [(1,)]
    assert queue.get(job.id).result == "paid" and queue.get(job.id).status is Status.DONE


def test_an_error_inside_completing_writes_neither_and_the_job_stays_running(queue):
    with queue.backend.transaction(durable=False) as run:
        run("CREATE TABLE ledger (n integer)")
    queue.enqueue("pay")
    job = queue.claim("w1")
    with pytest.raises(RuntimeError, match="crash"):
        with queue.completing(job) as tx:
            tx.execute("INSERT INTO ledger VALUES (1)")
            raise RuntimeError("crash")
    assert _ledger(queue) == []
    assert queue.get(job.id).status is Status.RUNNING


def test_a_zombie_completing_gets_lease_lost_and_its_statements_are_rolled_back(queue, clock):
    with queue.backend.transaction(durable=False) as run:
        run("CREATE TABLE ledger (n integer)")
    queue.enqueue("pay")
    zombie = queue.claim("w1", lease=5)
    clock.advance(6)
    queue.reap()
    clock.advance(60)
    fresh = queue.claim("w2")
    with pytest.raises(LeaseLost):
        with queue.completing(zombie) as tx:
            tx.execute("INSERT INTO ledger VALUES (1)")
    with queue.completing(fresh, result="w2") as tx:
        tx.execute("INSERT INTO ledger VALUES (2)")
    assert _ledger(queue) == [(2,)]
    assert queue.get(fresh.id).result == "w2"
    assert "lease_lost" in kinds(queue, fresh.id)


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_a_current_file_opens_at_once_while_another_process_holds_its_write_lock(target, tmp_path):
    # A worker frozen in the middle of a write transaction holds the lock; a new worker must still
    # start (and wait at its claim), or whoever waits for it to start waits on the frozen one too.
    Queue(target).close()
    holder = sqlite3.connect(target, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with Queue(target, busy_timeout=5.0) as q:
            assert time.monotonic() - started < 4.0, "the open waited for the write lock"
            assert q.stats()["pending"] == 0  # reading needs no write lock in WAL mode
            with Queue(target, busy_timeout=0.2) as other, pytest.raises(DatabaseBusy):
                other.enqueue("x")  # a write still waits for the lock, and says so
    finally:
        holder.execute("ROLLBACK")
        holder.close()
