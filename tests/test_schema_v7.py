"""Schema 7: the CHECKs on a job's status and an event's kind without IN lists. SQLite builds a temporary
b-tree (``OpenEphemeral``) for an IN list of more than two constants every time a statement checks it, so
with ``status IN (...)`` and ``kind IN (...)`` each claim and completion built three, about a fifth of its
work. A version 6 file (as the previous leaselab wrote it: tests/data/schema_v6.sql) is upgraded in place
when opened: both tables built anew, every row and link kept, the same rules enforced."""

from __future__ import annotations

import re
import sqlite3

import pytest

from leaselab import ManualClock, Queue
from leaselab.backends import sql as shared
from leaselab.backends.sqlite import SCHEMA_VERSION
from leaselab.backends.sqlite import statements as sqlite_sql
from tests.support.sqlite_marks import old_file

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
