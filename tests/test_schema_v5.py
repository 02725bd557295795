"""Schema 5: named queues and unique keys. A version 4 file or database (as the previous leaselab wrote
it: tests/data/schema_v4.sql, pg_schema_v4.sql) is upgraded in place when opened: every job keeps its
row and history and is in the default queue, the claim index is rebuilt with the queue in it (and its
planner statistics with it), and the new features work on it as on a new one."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from leaselab import Queue
from leaselab.backends.sqlite import SCHEMA_VERSION
from tests.support import history
from tests.support.sqlite_marks import old_file

DATA = Path(__file__).parent / "data"


def _fill(execute) -> None:
    """Three jobs through the version 4 triggers: 1 running, 2 done, 3 pending with a timeout."""
    for n in range(3):
        payload = json.dumps({"n": n})
        timeout = "2.5" if n == 2 else "NULL"
        execute(
            "INSERT INTO jobs (payload, run_at, created_at, updated_at, max_attempts, timeout)"
            f" VALUES ('{payload}', 1, 1, 1, 3, {timeout})"
        )
    for job_id, token in ((1, "a"), (2, "b")):
        execute(
            f"UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = 'old', token = '{token}', "
            f"lease_until = 1e10, updated_at = 2, last_event = 'claimed' WHERE id = {job_id}"
        )
    execute(
        "UPDATE jobs SET status = 'done', result = '1', lease_until = NULL, updated_at = 3, "
        "last_event = 'completed' WHERE id = 2"
    )


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple]:
    return [row[1:] for row in conn.execute(f"PRAGMA table_info({table})")]


def _sqlite_schema(conn: sqlite3.Connection) -> list[tuple]:
    return sorted(conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))


def test_a_version_4_file_is_upgraded_in_place_keeps_every_row_and_serves_queues_and_keys(tmp_path):
    path = tmp_path / "v4.db"
    conn = old_file(path, 4)
    conn.executescript(
        "ANALYZE sqlite_schema;"
        "INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES ('jobs', 'jobs_claim', '1000000 100000 1 1');"
    )  # what leaselab 4 wrote into every new file: statistics of the old index's three columns
    _fill(conn.execute)
    jobs_before = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    events_before = conn.execute("SELECT * FROM events ORDER BY id").fetchall()
    conn.close()
    with Queue(path) as q:
        assert q.stats_by_queue() == {"default": {"pending": 1, "running": 1, "done": 1, "dead": 0}}
        assert [(j.queue, j.key) for j in q.jobs()] == [("default", None)] * 3
        job = q.claim("new")
        assert (job.id, job.timeout) == (3, 2.5)
        q.complete(1, "a")  # the old holder's token still fences its job
        mail = q.enqueue("mail", queue="emails")
        assert q.claim("new", queues="emails").id == mail
        assert q.enqueue_unique("x", "k").new and not q.enqueue_unique("y", "k").new
    conn = sqlite3.connect(path)
    after = conn.execute("SELECT * FROM jobs WHERE id = 2").fetchall()
    assert after == [row + ("default", None) for row in jobs_before if row[0] == 2]  # the new columns last
    assert conn.execute("SELECT * FROM events ORDER BY id").fetchall()[: len(events_before)] == events_before
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    # The old index's statistics are gone with it; the new index has the new ones.
    assert conn.execute("SELECT stat FROM sqlite_stat1 WHERE idx = 'jobs_claim'").fetchall() == [
        ("1000000 100000 20000 1 1",)
    ]
    fresh = tmp_path / "fresh.db"
    Queue(fresh).close()
    fresh_conn = sqlite3.connect(fresh)
    for table in ("jobs", "events"):
        assert _columns(conn, table) == _columns(fresh_conn, table), table
    # Same indexes and triggers; the tables' text differs only as ALTER TABLE writes an added column.
    upgraded = {(t, n) for t, n, _ in _sqlite_schema(conn)}
    assert upgraded == {(t, n) for t, n, _ in _sqlite_schema(fresh_conn)}
    assert [s for t, _, s in _sqlite_schema(conn) if t == "index"] == [
        s for t, _, s in _sqlite_schema(fresh_conn) if t == "index"
    ]
    for target in (conn, fresh_conn):  # the CHECKs an upgraded file enforces are a new file's
        with pytest.raises(sqlite3.IntegrityError):
            target.execute(
                "INSERT INTO jobs (payload, run_at, created_at, updated_at, queue) VALUES ('1', 1, 1, 1, '')"
            )
    jobs, events, _ = history.load(str(path))
    assert history.check_fencing(events) == [] and history.check_events_agree(jobs, events) == []


def test_a_version_4_database_on_postgresql_is_upgraded_to_the_very_schema_a_new_one_has(pg_url, pg_server):
    psycopg = pytest.importorskip("psycopg") if not os.environ.get("CI") else __import__("psycopg")
    from tests.test_pg_schema import catalog, events_of, raw

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute((DATA / "pg_schema_v4.sql").read_text())
        _fill(conn.execute)
    jobs_before = raw(pg_url, "SELECT * FROM jobs ORDER BY id")
    events_before = events_of(pg_url)
    with Queue(pg_url) as q:
        assert q.stats_by_queue() == {"default": {"pending": 1, "running": 1, "done": 1, "dead": 0}}
        assert raw(pg_url, "SELECT * FROM jobs WHERE id = 2") == [
            r + ("default", None) for r in jobs_before if r[0] == 2
        ]
        assert events_of(pg_url) == events_before
        assert q.claim("new").id == 3
        mail = q.enqueue("mail", queue="emails")
        assert q.claim("new", queues=["emails", "sms"]).id == mail
        assert q.enqueue_unique("x", "k").new and not q.enqueue_unique("y", "k").new
    fresh = pg_server.create_database(f"fresh_v5_{os.getpid()}_{abs(hash(pg_url)) % 10**6}")
    Queue(fresh).close()
    assert catalog(pg_url) == catalog(fresh)
