"""Schema 7: the CHECKs on a job's status and an event's kind without IN lists. SQLite builds a temporary
b-tree (``OpenEphemeral``) for an IN list of more than two constants every time a statement checks it, so
with ``status IN (...)`` and ``kind IN (...)`` each claim and completion built three, about a fifth of its
work. A version 6 file (as the previous leaselab wrote it: tests/data/schema_v6.sql) is upgraded in place
when opened: both tables built anew, every row and link kept, the same rules enforced."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pytest

from leaselab import ManualClock, Queue
from leaselab.backends import sql as shared
from leaselab.backends.sqlite import SCHEMA_VERSION
from leaselab.backends.sqlite import statements as sqlite_sql
from tests.support.sqlite_marks import old_file

DATA = Path(__file__).parent / "data"
T0 = 1_767_225_600.0

# Every statement a worker sends per job, and the queue's other writes.
HOT = {
    "ENQUEUE": shared.ENQUEUE,
    "ENQUEUE_UNIQUE": shared.ENQUEUE_UNIQUE,
    "CLAIM": sqlite_sql.CLAIM,
    "CLAIM_MANY": sqlite_sql.CLAIM_MANY,
    "CLAIM_MANY_OF_ONE": sqlite_sql.CLAIM_MANY_OF_ONE,
    "COMPLETE": shared.COMPLETE,
    "HEARTBEAT": sqlite_sql.HEARTBEAT,
    "HEARTBEAT_MANY": sqlite_sql.HEARTBEAT_MANY,
    "FAIL": sqlite_sql.FAIL,
    "REAP": sqlite_sql.REAP,
}
CONSTANT = {"String8", "Integer", "Real", "Int64"}


def _constant_lists(conn: sqlite3.Connection, statement: str) -> int:
    """How many temporary b-trees one run of ``statement`` builds from a list of constants (an IN list), its
    triggers' programs included (EXPLAIN lists them after the statement's own): an ``OpenEphemeral`` whose next
    steps load a constant, make it a record and insert it. Other temporary tables (RETURNING's rows, a
    subquery's ids, the ids of a JSON array) hold what the statement found, and are not counted."""
    params = {name: None for name in re.findall(r"(?<![:\w]):([A-Za-z_]\w*)", statement)}
    ops = [row[1] for row in conn.execute("EXPLAIN " + statement, params)] + [""] * 3  # room to look ahead
    return sum(
        1
        for at, op in enumerate(ops)
        if op == "OpenEphemeral" and ops[at + 1] in CONSTANT and ops[at + 2 : at + 4] == ["MakeRecord", "IdxInsert"]
    )


def _fill(execute) -> None:
    """Version 6 jobs of every status, with their history: pending, running, done, dead."""
    execute(
        "INSERT INTO jobs (payload, run_at, created_at, updated_at, queue, key, timeout) "
        "VALUES ('1', 1, 1, 1, 'mail', 'k-1', 5.0)"
    )
    execute("INSERT INTO jobs (payload, run_at, created_at, updated_at) VALUES ('2', 1, 1, 1)")
    execute("INSERT INTO jobs (payload, run_at, created_at, updated_at) VALUES ('3', 1, 1, 1)")
    execute("INSERT INTO jobs (payload, run_at, created_at, updated_at) VALUES ('4', 1, 1, 1)")
    execute(
        "UPDATE jobs SET status = 'running', attempts = 1, lease_until = 9, worker = 'w', token = 't2',"
        " last_event = 'claimed', updated_at = 2 WHERE id = 2"
    )
    execute(
        "UPDATE jobs SET status = 'done', attempts = 1, result = '7', finished_at = 3, last_event = 'completed',"
        " updated_at = 3 WHERE id = 3"
    )
    execute(
        "UPDATE jobs SET status = 'dead', attempts = 5, last_error = 'boom', last_event = 'failed',"
        " updated_at = 4 WHERE id = 4"
    )


def _schema(conn: sqlite3.Connection) -> list[tuple]:
    return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()


def test_no_statement_a_worker_sends_builds_a_temporary_b_tree(tmp_path):
    with Queue(tmp_path / "q.db") as q:  # its own connection: the SQL functions the statements call are there
        conn = q.backend.connection  # type: ignore[attr-defined]  # the SQL backends' escape hatch
        assert {name: _constant_lists(conn, statement) for name, statement in HOT.items()} == dict.fromkeys(HOT, 0)


def test_the_version_6_schema_built_three_for_a_completion(tmp_path):
    """What the rewrite took away, seen on the previous schema: the count the test above holds at 0."""
    conn = old_file(tmp_path / "v6.db", 6)  # not opened by a Queue, which would upgrade it
    assert _constant_lists(conn, shared.COMPLETE) == 3  # the status CHECK, and the kind CHECK of each event


def test_a_version_6_file_is_upgraded_in_place_to_the_very_schema_a_new_one_has(tmp_path):
    path = tmp_path / "v6.db"
    conn = old_file(path, 6)
    _fill(conn.execute)
    jobs_before = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    events_before = conn.execute("SELECT * FROM events ORDER BY id").fetchall()
    conn.close()
    clock = ManualClock(T0)
    with Queue(path, clock=clock) as q:
        assert [j.status.value for j in q.jobs()] == ["pending", "running", "done", "dead"]
        assert [e.kind for e in q.events(4)] == ["enqueued", "failed", "dead"]  # the links came through
        assert not q.enqueue_unique("x", "k-1").new  # and the key index
        job = q.claim("w", queues=["mail"])
        assert job is not None and job.id == 1 and job.timeout == 5.0
        q.complete(job.id, job.token, {"ok": True})
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    assert conn.execute("SELECT * FROM jobs WHERE id > 1 ORDER BY id").fetchall() == jobs_before[1:]
    assert conn.execute("SELECT * FROM events ORDER BY id").fetchall()[: len(events_before)] == events_before
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    fresh = tmp_path / "fresh.db"
    Queue(fresh).close()
    assert _schema(conn) == _schema(sqlite3.connect(fresh))
    assert conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '%_v6'").fetchall() == []
    assert _constant_lists(conn, shared.COMPLETE) == 0


@pytest.mark.parametrize(
    ("statement", "constraint"),
    [
        ("UPDATE jobs SET status = 'finished' WHERE id = 1", "known_status"),
        ("INSERT INTO events (job_id, kind, at, attempt) VALUES (1, 'exploded', 1, 0)", "known_kind"),
    ],
)
def test_the_rewritten_checks_refuse_what_the_lists_refused_and_say_which(tmp_path, statement, constraint):
    with Queue(tmp_path / "q.db") as q:
        q.enqueue({"n": 1})
    conn = sqlite3.connect(tmp_path / "q.db")
    with pytest.raises(sqlite3.IntegrityError, match=f"CHECK constraint failed: {constraint}"):
        conn.execute(statement)


# -- PostgreSQL's schema 7: a one-column rule is a domain, not a CHECK the server reads again per statement --

ONE_COLUMN_CHECKS = (
    "SELECT conrelid::regclass::text, conname FROM pg_constraint"
    " WHERE contype = 'c' AND conrelid IN ('jobs'::regclass, 'events'::regclass) AND cardinality(conkey) = 1"
    " ORDER BY 1, 2"
)


def test_on_postgresql_no_rule_about_one_column_is_a_table_check(pg_url):
    """A table's CHECKs are read from their stored text in every statement that writes a row; a domain's once
    per session. Only the two rules about several columns are left to the table."""
    from tests.test_pg_schema import raw

    Queue(pg_url).close()
    assert raw(pg_url, ONE_COLUMN_CHECKS) == []
    assert raw(pg_url, "SELECT conname FROM pg_constraint WHERE contype = 'c' AND conrelid = 'jobs'::regclass") != []


def test_a_version_6_database_on_postgresql_is_upgraded_to_the_very_schema_a_new_one_has(pg_url, pg_server):
    psycopg = pytest.importorskip("psycopg")
    from leaselab.backends.postgres import SCHEMA_VERSION as PG_SCHEMA_VERSION
    from tests.test_pg_schema import catalog, events_of, mark, raw

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute((DATA / "pg_schema_v6.sql").read_text())
        _fill(conn.execute)
    assert len(raw(pg_url, ONE_COLUMN_CHECKS)) == 14  # what version 6 had: thirteen on jobs, one on events
    jobs_before = raw(pg_url, "SELECT * FROM jobs ORDER BY id")
    events_before = events_of(pg_url)
    with Queue(pg_url) as q:
        assert [j.status.value for j in q.jobs()] == ["pending", "running", "done", "dead"]
        assert not q.enqueue_unique("x", "k-1").new
        job = q.claim("w", queues=["mail"])
        assert job is not None and job.id == 1 and job.timeout == 5.0 and isinstance(job.run_at, float)
        q.complete(job.id, job.token, {"ok": True})
    assert raw(pg_url, "SELECT * FROM jobs WHERE id > 1 ORDER BY id") == jobs_before[1:]
    assert events_of(pg_url)[: len(events_before)] == events_before
    assert mark(pg_url) == [(f"leaselab queue, schema {PG_SCHEMA_VERSION}",) * 2] == [("leaselab queue, schema 7",) * 2]
    fresh = pg_server.create_database(f"fresh_v7_{os.getpid()}_{abs(hash(pg_url)) % 10**6}")
    Queue(fresh).close()
    assert catalog(pg_url) == catalog(fresh)
    assert raw(pg_url, ONE_COLUMN_CHECKS) == []
    with pytest.raises(psycopg.errors.CheckViolation, match="leaselab_time_finite"):
        raw(pg_url, "UPDATE jobs SET run_at = 'NaN' WHERE id = 2")
    with pytest.raises(psycopg.errors.CheckViolation, match="leaselab_event_kind_known"):
        raw(pg_url, "INSERT INTO events (job_id, kind, at, attempt) VALUES (1, 'exploded', 1, 0)")


def test_a_version_6_database_holding_a_row_no_rule_allows_is_refused_whole_and_left_as_it_was(pg_url):
    """Changing a column to its domain checks every row: a row that another program wrote past a rule (here by
    dropping the CHECK first) fails the upgrade, in one transaction, so nothing of it is left half done."""
    psycopg = pytest.importorskip("psycopg")
    from leaselab.errors import LeaselabError
    from tests.test_pg_schema import mark, raw

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute((DATA / "pg_schema_v6.sql").read_text())
        _fill(conn.execute)
        conn.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_queue_check")
        conn.execute("UPDATE jobs SET queue = '' WHERE id = 2")
    before = raw(pg_url, "SELECT * FROM jobs ORDER BY id")
    with pytest.raises(LeaselabError, match="leaselab_queue_name_length"):
        Queue(pg_url).close()
    assert mark(pg_url) == [("leaselab queue, schema 6",) * 2]
    assert raw(pg_url, "SELECT * FROM jobs ORDER BY id") == before
    assert raw(pg_url, "SELECT typname FROM pg_type WHERE starts_with(typname, 'leaselab') AND typtype = 'd'") == []
