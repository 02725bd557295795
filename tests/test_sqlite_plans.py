"""The SQL of the SQLite backend as SQLite runs it: each hot statement is one statement, served by its
index without a temporary B-tree; the claim's statistics; one job's history read by walking its links.

Facts of one engine's planner, so they run on SQLite only (huey's contract suite leaves these to the
backend's own tests); what every backend must do is in ``test_contract_queue.py``.
"""

from __future__ import annotations

import pytest

from leaselab import Queue, lessons
from leaselab.backends.sqlite import statements as sql

LEASE = 30.0

# The ``queue`` fixture runs a test on every backend; this narrows one to SQLite, whose planner it asks.
sqlite_only = pytest.mark.parametrize("target", ["sqlite"], indirect=True)


def plan(q: Queue, statement: str, params: dict) -> list[str]:
    return [row[3] for row in q.backend.connection.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()]


@sqlite_only
def test_the_claim_is_one_statement_served_by_the_claim_index_without_a_temp_btree(queue, clock):
    queue.enqueue_many([{"i": i} for i in range(200)], priority=1)
    for _ in range(50):
        j = queue.claim("w", LEASE)
        queue.complete(j.id, j.token)
    steps = plan(
        queue, sql.CLAIM, {"now": clock(), "lease_until": clock() + 1, "worker": "w", "token": "t", "queue": "default"}
    )
    assert any("jobs_claim" in s for s in steps), steps
    assert not any("TEMP B-TREE" in s for s in steps), steps
    assert sql.CLAIM.strip().upper().startswith("UPDATE JOBS")
    assert "RETURNING" in sql.CLAIM.upper() and "LIMIT 1" in sql.CLAIM.upper()


@sqlite_only
def test_a_batch_claim_of_one_job_reads_its_id_as_a_scalar_not_through_a_temporary_list(queue, clock):
    # A one-slot worker claims and refills one job at a time through the batch calls: with IN,
    # SQLite would fill a temporary table with the one id and probe it (a fifth of a claim's cost).
    queue.enqueue_many([{"i": i} for i in range(4)])
    ran: list[str] = []
    queue.backend.connection.set_trace_callback(ran.append)
    try:
        [one] = queue.claim_many(1, "w", LEASE, token="t1")
        refused, [refill] = queue.complete_many_and_claim([(one.id, one.token, None)], 1, "w", LEASE, token="t2")
        two = queue.claim_many(2, "w", LEASE, token="t3")
    finally:
        queue.backend.connection.set_trace_callback(None)
    # SQLite reports the statement again for each trigger program it runs: each claim once.
    claims = list(dict.fromkeys(s for s in ran if s.strip().startswith("UPDATE jobs SET status = 'running'")))
    assert len(claims) == 3, ran
    for statement in claims[:2]:
        steps = plan(queue, statement, {})
        assert any("SCALAR SUBQUERY" in s for s in steps) and not any("LIST SUBQUERY" in s for s in steps), steps
    assert any("LIST SUBQUERY" in s for s in plan(queue, claims[2], {}))  # k at a time: IN, as it must
    # The same tokens as any batch claim: the call's token, '-', the job's id.
    assert (one.token, refill.token, refused) == (f"t1-{one.id}", f"t2-{refill.id}", [])
    assert sorted(j.token for j in two) == sorted(f"t3-{j.id}" for j in two) and len(two) == 2


@sqlite_only
def test_the_claim_jumps_over_delayed_jobs_at_a_higher_priority_instead_of_stepping_over_each(queue):
    queue.enqueue_many(list(range(20)), priority=9, delay=3600)  # urgent, but not yet
    queue.enqueue_many(["first", "second"])
    few, first = lessons.claim_steps(queue)
    queue.enqueue_many(list(range(20_000)), priority=9, delay=3600)
    many, second = lessons.claim_steps(queue)
    assert (first.payload, second.payload) == ("first", "second")
    assert many <= few * 1.5, (few, many)  # without the statistics: ~100,000 steps against ~300
    steps = plan(queue, sql.CLAIM, {"now": 0, "lease_until": 1, "worker": "w", "token": "t", "queue": "default"})
    assert any("jobs_claim (ANY(priority) AND queue=? AND run_at<?)" in s for s in steps), steps


def test_the_claim_statistics_are_written_once_and_a_real_analyze_is_kept(db_path, clock):
    with Queue(db_path, clock=clock) as q:
        q.enqueue_many(list(range(50)))
        q.backend.connection.execute("ANALYZE")
        real = q.backend.connection.execute("SELECT stat FROM sqlite_stat1 WHERE idx = 'jobs_claim'").fetchone()[0]
    assert real.startswith("50 ")
    with Queue(db_path, clock=clock) as q:  # opening again does not overwrite what ANALYZE found
        assert (
            q.backend.connection.execute("SELECT stat FROM sqlite_stat1 WHERE idx = 'jobs_claim'").fetchone()[0] == real
        )


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
        params = {"id": ids[7], "after": 0, "limit": 100, "token": "t", "now": clock(), "detail": "d"}
        steps = plan(queue, statement, params)
        assert not any(s.startswith("SCAN e") for s in steps), steps  # events is only ever SEARCHed by rowid
    assert [e.kind for e in queue.events(ids[7])] == ["enqueued", "claimed", "heartbeat", "completed"]
    assert {e.job_id for e in queue.events(ids[7])} == {ids[7]}
    whole = queue.events()
    for job_id in (ids[0], ids[150], ids[-1]):
        assert queue.events(job_id) == [e for e in whole if e.job_id == job_id]


def _steps(queue: Queue, claim) -> tuple[int, object]:
    """SQLite virtual-machine steps that ``claim()`` took on the queue's connection: work, not time."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn = queue.backend.connection
    conn.set_progress_handler(count, 1)
    try:
        job = claim()
    finally:
        conn.set_progress_handler(None, 1)
    return steps, job


@sqlite_only
def test_a_claim_for_a_quiet_queue_seeks_to_it_instead_of_stepping_over_another_queues_backlog(queue):
    queue.enqueue_many(list(range(20)), queue="bulk")
    queue.enqueue_many(["first", "second"], queue="quiet")
    few, first = _steps(queue, lambda: queue.claim("w", LEASE, queues="quiet"))
    queue.enqueue_many(list(range(20_000)), queue="bulk")  # runnable, same priority, older than none of quiet's
    many, second = _steps(queue, lambda: queue.claim("w", LEASE, queues="quiet"))
    assert (first.payload, second.payload) == ("first", "second")
    assert many <= few * 1.5, (few, many)  # with the queue outside the index: ~100,000 steps more
    several, third = _steps(queue, lambda: queue.claim("w", LEASE, queues=["quiet", "other"]))
    assert third is None and several <= few * 3, (few, several)


@sqlite_only
def test_a_claim_of_several_queues_seeks_each_queue_in_the_claim_index_and_sorts_only_those_few(queue, clock):
    queue.enqueue_many(list(range(50)), queue="a")
    params = {"now": clock(), "lease_until": 1, "worker": "w", "token": "t", "queues": '["a", "b"]', "n": 2}
    for statement in (sql.CLAIM_SEVERAL, sql.CLAIM_MANY_SEVERAL):
        steps = plan(queue, statement, params)
        assert "CORRELATED LIST SUBQUERY 1" in steps, steps  # once for each queue named
        assert any("jobs_claim (ANY(priority) AND queue=? AND run_at<?)" in s for s in steps), steps
        # The sort is of the few rows the seeks found (queues x LIMIT), never of a queue's backlog: the
        # step count of the test above.
        assert sum("TEMP B-TREE" in s for s in steps) == 1, steps


@sqlite_only
def test_a_unique_enqueue_finds_the_holder_of_its_key_through_the_key_index(queue):
    queue.enqueue_many(list(range(50)))
    queue.enqueue_unique("x", "k")
    assert any("jobs_key" in s for s in plan(queue, sql.HOLDING_KEY, {"key": "k"}))
