"""Rows another program wrote into a PostgreSQL queue: none sticks a job or stops the others (issue 19, row 8).

PostgreSQL's schema 2 has the CHECKs of SQLite's schema 3: times are finite (double precision
takes 'NaN' and 'Infinity'), a running job has a lease and a token, a pending job has an
attempt left, and attempts is bigint as max_attempts is. The server refuses each bad write;
a version 1 database that already holds such rows is upgraded in place when it is opened,
and those jobs end dead with the reason, as SQLite's upgrade ends them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from leaselab import Queue, Status, Worker
from tests.support import history
from tests.support.servers import open_at_once

try:
    import psycopg
except ImportError:  # pragma: no cover - the postgres extra is part of the test extra
    if os.environ.get("CI"):
        raise
    pytest.skip("PostgreSQL tests need psycopg (pip install 'leaselab[postgres]')", allow_module_level=True)

from leaselab.backends.postgres import SCHEMA_VERSION  # after the psycopg check

V1_SCHEMA = Path(__file__).parent / "data" / "pg_schema_v1.sql"
BIGINT_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


def raw(url: str, statement: str, params: tuple = ()) -> list[tuple]:
    """Write or read as another program would: plain psycopg, no leaselab."""
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description is not None else []


def version_1_database(url: str, jobs: int = 8) -> None:
    """A database as leaselab's PostgreSQL schema 1 made it, with ``jobs`` pending jobs, jobs 1..3
    claimed by worker 'old' (job 1 reaped and claimed again, as a real history goes), job 3 done."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(V1_SCHEMA.read_text())
        for n in range(jobs):
            conn.execute(
                "INSERT INTO jobs (payload, run_at, created_at, updated_at, max_attempts) VALUES (%s, 1, 1, 1, 3)",
                (f'{{"n": {n}}}',),
            )
        for job_id, token in ((1, "a"), (2, "b"), (3, "c"), (1, "d")):
            conn.execute(
                "UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = 'old', token = %s,"
                " lease_until = 1e10, started_at = 2, updated_at = 2, last_event = 'claimed'"
                " WHERE id = %s",
                (token, job_id),
            )
            if token == "a":
                conn.execute(
                    "UPDATE jobs SET status = 'pending', lease_until = NULL, last_error = 'lease expired',"
                    " updated_at = 2, last_event = 'reaped' WHERE id = 1"
                )
        conn.execute(
            "UPDATE jobs SET status = 'done', result = '1', lease_until = NULL, finished_at = 3,"
            " updated_at = 3, last_event = 'completed' WHERE id = 3"
        )


def mark(url: str) -> list[tuple]:
    return raw(url, "SELECT obj_description('jobs'::regclass), obj_description('events'::regclass)")


def events_of(url: str) -> list[tuple]:
    return raw(url, "SELECT id, job_id, kind, at, worker, token, attempt, detail, prev FROM events ORDER BY id")


def catalog(url: str) -> dict[str, list[tuple]]:
    """What a schema is, read from the server's catalogs: columns, constraints, indexes, triggers, marks."""
    return {
        "columns": raw(
            url,
            "SELECT table_name, column_name, data_type, domain_name, is_nullable, column_default"
            " FROM information_schema.columns WHERE table_name IN ('jobs', 'events')"
            " AND table_schema = current_schema() ORDER BY table_name, ordinal_position",
        ),
        "constraints": raw(
            url,
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid IN ('jobs'::regclass, 'events'::regclass) ORDER BY 1, 2",
        ),
        "indexes": raw(
            url, "SELECT indexname, indexdef FROM pg_indexes WHERE tablename IN ('jobs', 'events') ORDER BY 1"
        ),
        "triggers": raw(
            url,
            "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger"
            " WHERE tgrelid = 'jobs'::regclass AND NOT tgisinternal ORDER BY 1",
        ),
        "domains": raw(
            url,
            "SELECT t.typname, format_type(t.typbasetype, t.typtypmod), c.conname, pg_get_constraintdef(c.oid)"
            " FROM pg_type t JOIN pg_constraint c ON c.contypid = t.oid"
            " WHERE t.typtype = 'd' AND t.typnamespace = current_schema()::regnamespace ORDER BY 1, 3",
        ),
        "marks": mark(url),
    }


# -- the server refuses each bad write -----------------------------------------------------------

REFUSED = {  # what another program writes into a queue with job 1 running and job 2 pending
    "run_at = 'NaN' (never claimable, never dead)": "UPDATE jobs SET run_at = 'NaN' WHERE id = 2",
    "run_at = 'Infinity'": "UPDATE jobs SET run_at = 'Infinity' WHERE id = 2",
    "run_at = '-Infinity'": "UPDATE jobs SET run_at = '-Infinity' WHERE id = 2",
    "lease_until = 'NaN' on a running job (never reaped)": "UPDATE jobs SET lease_until = 'NaN' WHERE id = 1",
    "lease_until = 'Infinity' on a running job": "UPDATE jobs SET lease_until = 'Infinity' WHERE id = 1",
    "a running job with no lease": "UPDATE jobs SET lease_until = NULL WHERE id = 1",
    "a running job with no token": "UPDATE jobs SET token = NULL WHERE id = 1",
    "created_at = 'NaN'": "UPDATE jobs SET created_at = 'NaN' WHERE id = 2",
    "started_at = 'Infinity'": "UPDATE jobs SET started_at = 'Infinity' WHERE id = 1",
    "finished_at = '-Infinity'": "UPDATE jobs SET finished_at = '-Infinity' WHERE id = 2",
    "updated_at = 'NaN'": "UPDATE jobs SET updated_at = 'NaN' WHERE id = 2",
    "a pending job with no attempt left": "UPDATE jobs SET attempts = max_attempts WHERE id = 2",
    "a pending job at attempts 2147483647 of 5": "UPDATE jobs SET attempts = 2147483647 WHERE id = 2",
    "a new job at run_at 'NaN'": "INSERT INTO jobs (payload, run_at, created_at, updated_at) VALUES ('1', 'NaN', 1, 1)",
    "a new running job with no lease": "INSERT INTO jobs (payload, status, token, run_at, created_at, updated_at)"
    " VALUES ('1', 'running', 't', 1, 1, 1)",
}


@pytest.mark.parametrize("statement", REFUSED.values(), ids=REFUSED.keys())
def test_the_server_refuses_each_value_that_would_stick_a_job_or_stop_the_claim_and_keeps_the_rows(pg_url, statement):
    with Queue(pg_url) as q:
        q.enqueue_many([1, 2])
        q.claim("w")
    before = raw(pg_url, "SELECT * FROM jobs ORDER BY id"), events_of(pg_url)
    with pytest.raises(psycopg.errors.CheckViolation):
        raw(pg_url, statement)
    assert (raw(pg_url, "SELECT * FROM jobs ORDER BY id"), events_of(pg_url)) == before


def test_a_pending_job_past_the_32_bit_limit_is_claimed_and_ends_and_the_other_jobs_still_run(pg_url):
    """attempts is bigint, as max_attempts is: a job at attempt 2**31 is only a job (version 1
    stored attempts as integer, and its claim's attempts + 1 failed every claim)."""
    with Queue(pg_url, call_timeout=27) as q:  # below the worker's lease (30 s)
        big, *others = q.enqueue_many([{"n": n} for n in range(4)], max_attempts=BIGINT_MAX)
        raw(pg_url, "UPDATE jobs SET attempts = %s WHERE id = %s", (INT_MAX, big))
        last, _ = q.enqueue_many([{"fail": True}, "x"], max_attempts=BIGINT_MAX)
        raw(pg_url, "UPDATE jobs SET attempts = %s WHERE id = %s", (BIGINT_MAX - 1, last))
        stats = Worker(q, "leaselab.harness.demo:task", name="w", exit_when_idle=True).run()
        assert stats.completed == 5 and stats.failed == 1
        assert q.get(big).status is Status.DONE and q.get(big).attempts == INT_MAX + 1
        # The very last attempt a bigint allows: claimed once, failed, dead, and never overflowed.
        assert q.get(last).status is Status.DEAD and q.get(last).attempts == BIGINT_MAX
        assert [e.attempt for e in q.events(last) if e.kind == "claimed"] == [BIGINT_MAX]
        assert q.stats() == {"pending": 0, "running": 0, "done": 5, "dead": 1}


# -- version 1 databases: upgraded in place, bad rows repaired and their jobs ended -------------


def test_a_version_1_database_is_upgraded_in_place_to_the_very_schema_a_new_database_has(pg_url, pg_server):
    version_1_database(pg_url)
    jobs_before = raw(pg_url, "SELECT * FROM jobs ORDER BY id")
    events_before = events_of(pg_url)
    assert mark(pg_url) == [("leaselab queue, schema 1", "leaselab queue, schema 1")]
    with Queue(pg_url) as q:
        assert q.stats() == {"pending": 5, "running": 2, "done": 1, "dead": 0}
        after = raw(pg_url, "SELECT * FROM jobs ORDER BY id")
        assert [row[: len(jobs_before[0])] for row in after] == jobs_before  # a sound row is left as it was
        assert events_of(pg_url) == events_before
        q.complete(1, "d", "late but fine")  # the running job's holder finishes after the upgrade
        assert [e.kind for e in q.events(1)] == ["enqueued", "claimed", "reaped", "claimed", "completed"]
    fresh = pg_server.create_database(f"fresh_{os.getpid()}_{abs(hash(pg_url)) % 10**6}")
    Queue(fresh).close()
    assert SCHEMA_VERSION == 7
    assert catalog(pg_url) == catalog(fresh)
    jobs, events, _ = history.load(pg_url)
    assert history.check_fencing(events) == history.check_attempts(jobs, events) == []
    assert history.check_events_agree(jobs, events) == history.check_links(jobs, events) == []


HOSTILE_V1 = {  # job id -> what another program wrote into a version 1 database, and what the reason names
    1: ("UPDATE jobs SET lease_until = 'NaN' WHERE id = 1", "lease_until was NaN"),
    2: ("UPDATE jobs SET lease_until = 'Infinity' WHERE id = 2", "lease_until was Infinity"),
    4: (
        "UPDATE jobs SET status = 'running', token = NULL, lease_until = NULL WHERE id = 4",
        "running with no lease or no token",
    ),
    5: ("UPDATE jobs SET run_at = 'NaN' WHERE id = 5", "run_at was NaN"),
    6: ("UPDATE jobs SET attempts = 2147483647 WHERE id = 6", "pending with no attempt left"),
    7: (
        "UPDATE jobs SET created_at = '-Infinity', updated_at = 'NaN' WHERE id = 7",
        "created_at was -Infinity; updated_at was NaN",
    ),
}


def test_a_version_1_database_holding_rows_that_stick_jobs_is_upgraded_and_those_jobs_end_dead_with_the_reason(pg_url):
    version_1_database(pg_url, jobs=10)
    raw(pg_url, "UPDATE jobs SET finished_at = 'Infinity' WHERE id = 3")  # a finished job keeps its status
    for statement, _ in HOSTILE_V1.values():
        raw(pg_url, statement)
    # A job at attempt 2147483647 that has attempts left: on version 1 its claim stopped the fleet.
    raw(pg_url, "UPDATE jobs SET attempts = 2147483647, max_attempts = %s WHERE id = 8", (BIGINT_MAX,))
    events_before = events_of(pg_url)
    with Queue(pg_url, call_timeout=27) as q:  # below the worker's lease (30 s); the upgrade is not bounded by it
        jobs = {j.id: j for j in q.jobs()}
        for job_id, (_, reason) in HOSTILE_V1.items():
            assert jobs[job_id].status is Status.DEAD, job_id
            assert jobs[job_id].last_error == f"damaged in the database, found by the upgrade to schema 2: {reason}"
            assert jobs[job_id].lease_until is None and jobs[job_id].finished_at is not None
            assert [(e.kind, e.detail) for e in q.events(job_id)][-1] == ("dead", jobs[job_id].last_error)
        assert jobs[5].run_at == jobs[5].finished_at  # a time that was not finite: the upgrade's
        assert jobs[3].status is Status.DONE and jobs[3].finished_at is None
        assert (
            jobs[3].last_error == "damaged in the database, found by the upgrade to schema 2: finished_at was Infinity"
        )
        assert [jobs[n].status for n in (8, 9, 10)] == [Status.PENDING] * 3
        assert [jobs[n].last_error for n in (8, 9, 10)] == [None] * 3
        worker = Worker(q, "leaselab.harness.demo:echo", name="w", exit_when_idle=True).run()
        assert worker.completed == 3
        assert q.get(8).attempts == 2**31
        assert q.reap() == []
        assert q.stats() == {"pending": 0, "running": 0, "done": 4, "dead": 6}
    assert mark(pg_url) == [(f"leaselab queue, schema {SCHEMA_VERSION}",) * 2]
    added = events_of(pg_url)[len(events_before) :]
    assert events_of(pg_url)[: len(events_before)] == events_before  # the history is kept as it was
    assert sorted(e[1] for e in added if e[2] == "dead") == sorted(HOSTILE_V1)  # one 'dead' event per ended job
    jobs, events, _ = history.load(pg_url)
    assert history.check_fencing(events) == history.check_links(jobs, events) == []


def test_a_worker_process_on_an_upgraded_database_drains_the_good_jobs_and_exits_when_idle(pg_url):
    """On version 1 this worker either exited at its first claim (integer out of range) or never
    exited (a running job whose lease is NaN is never reaped, so the queue is never idle)."""
    version_1_database(pg_url, jobs=6)
    raw(pg_url, "UPDATE jobs SET lease_until = 'NaN' WHERE id = 2")
    raw(pg_url, "UPDATE jobs SET attempts = 2147483647 WHERE id = 4")
    raw(pg_url, "UPDATE jobs SET lease_until = 5 WHERE id = 1")  # its holder is gone: reaped, then run again
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaselab",
            "worker",
            "--db",
            pg_url,
            "--handler",
            "leaselab.harness.demo:echo",
            "--name",
            "w",
            "--exit-when-idle",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "completed 3" in done.stdout and "reaped 1" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert raw(pg_url, "SELECT id, status FROM jobs ORDER BY id") == [
        (1, "done"),
        (2, "dead"),
        (3, "done"),
        (4, "dead"),
        (5, "done"),
        (6, "done"),
    ]


def test_sixteen_queues_opening_a_version_1_database_at_once_upgrade_it_once(pg_url):
    version_1_database(pg_url)
    raw(pg_url, "UPDATE jobs SET lease_until = 'NaN' WHERE id = 2")
    raw(pg_url, "UPDATE jobs SET run_at = 'Infinity' WHERE id = 5")
    assert open_at_once(pg_url, lambda q: q.stats()) == []
    assert raw(pg_url, "SELECT job_id, count(*) FROM events WHERE kind = 'dead' GROUP BY job_id ORDER BY 1") == [
        (2, 1),
        (5, 1),
    ]
    assert mark(pg_url) == [(f"leaselab queue, schema {SCHEMA_VERSION}",) * 2]
