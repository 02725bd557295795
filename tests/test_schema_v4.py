"""Schema 4: a job's timeouts and the history's 'timed_out' and 'released' kinds. A version 3 file or
database (as the previous leaselab wrote it: tests/data/schema_v3.sql, pg_schema_v3.sql) is upgraded in
place when opened: every job and every event stays as it was, and the new kinds can be written."""

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
    """Three jobs through the old triggers: 1 claimed twice (reaped in between), 2 done, 3 pending."""
    for n in range(3):
        payload = json.dumps({"n": n})
        execute(
            f"INSERT INTO jobs (payload, run_at, created_at, updated_at, max_attempts) VALUES ('{payload}', 1, 1, 1, 3)"
        )
    for job_id, token in ((1, "a"), (2, "b"), (1, "c")):
        execute(
            f"UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = 'old', token = '{token}', "
            f"lease_until = 1e10, updated_at = 2, last_event = 'claimed' WHERE id = {job_id}"
        )
        if token == "a":
            execute(
                "UPDATE jobs SET status = 'pending', lease_until = NULL, last_error = 'lease expired', "
                "updated_at = 2, last_event = 'reaped' WHERE id = 1"
            )
    execute(
        "UPDATE jobs SET status = 'done', result = '1', lease_until = NULL, updated_at = 3, "
        "last_event = 'completed' WHERE id = 2"
    )


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple]:
    return [row[1:] for row in conn.execute(f"PRAGMA table_info({table})")]


def test_a_version_3_file_is_upgraded_in_place_keeps_every_row_and_takes_the_new_kinds(tmp_path):
    path = tmp_path / "v3.db"
    conn = old_file(path, 3)
    _fill(conn.execute)
    jobs_before = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    events_before = conn.execute("SELECT * FROM events ORDER BY id").fetchall()
    conn.close()
    with Queue(path) as q:
        assert q.stats() == {"pending": 1, "running": 1, "done": 1, "dead": 0}
        assert q.time_out(1, "c", "ran past its timeout of 5s").value == "pending"
        job = q.claim("new")
        assert job.id == 3 and job.timeout is None
        assert q.release([(3, job.token)]) == {3: "pending"}
        assert [e.kind for e in q.events(1)][-1] == "timed_out"
        assert [e.kind for e in q.events(3)][-1] == "released"
        q.enqueue("later", timeout=2.5)
        assert q.get(4).timeout == 2.5
    conn = sqlite3.connect(path)
    after = conn.execute("SELECT * FROM jobs WHERE id IN (2) ORDER BY id").fetchall()
    assert after == [row + (None, None, "default", None) for row in jobs_before if row[0] == 2]  # new columns last
    assert conn.execute("SELECT * FROM events ORDER BY id").fetchall()[: len(events_before)] == events_before
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '%v3%'").fetchall() == []
    fresh = tmp_path / "fresh.db"
    Queue(fresh).close()
    fresh_conn = sqlite3.connect(fresh)
    for table in ("jobs", "events"):
        assert _columns(conn, table) == _columns(fresh_conn, table), table
    # The CHECKs an upgraded file enforces are a new file's: a bad kind, a bad timeout, refused alike.
    for target in (conn, fresh_conn):
        with pytest.raises(sqlite3.IntegrityError):
            target.execute(
                "INSERT INTO jobs (payload, run_at, created_at, updated_at, timeout) VALUES ('1', 1, 1, 1, 0)"
            )
        with pytest.raises(sqlite3.IntegrityError):
            target.execute("INSERT INTO events (job_id, kind, at, attempt) VALUES (1, 'vanished', 1, 1)")
    jobs, events, _ = history.load(str(path))
    assert history.check_fencing(events) == [] and history.check_events_agree(jobs, events) == []


def test_a_version_2_file_is_rebuilt_once_straight_to_the_newest_schema(tmp_path):
    path = tmp_path / "v2.db"
    conn = old_file(path, 2)
    _fill(conn.execute)
    events_before = conn.execute("SELECT id, job_id, kind, token FROM events ORDER BY id").fetchall()
    conn.close()
    with Queue(path) as q:
        q.time_out(1, "c", "too slow")
        assert [e.kind for e in q.events(1)][-1] == "timed_out"
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT id, job_id, kind, token FROM events ORDER BY id").fetchall()[:-1] == events_before
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert {r[1]: r[5] for r in conn.execute("PRAGMA table_list")}["events"] == 1  # STRICT


def test_a_version_3_database_on_postgresql_is_upgraded_to_the_very_schema_a_new_one_has(pg_url, pg_server):
    psycopg = pytest.importorskip("psycopg") if not os.environ.get("CI") else __import__("psycopg")
    from tests.test_pg_schema import catalog, events_of, raw

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute((DATA / "pg_schema_v3.sql").read_text())
        _fill(conn.execute)
    jobs_before = raw(pg_url, "SELECT * FROM jobs ORDER BY id")
    events_before = events_of(pg_url)
    with Queue(pg_url) as q:
        assert q.stats() == {"pending": 1, "running": 1, "done": 1, "dead": 0}
        assert raw(pg_url, "SELECT * FROM jobs WHERE id = 2") == [
            r + (None, None, "default", None) for r in jobs_before if r[0] == 2
        ]
        assert events_of(pg_url) == events_before
        q.time_out(1, "c", "ran past its timeout of 5s")
        ((kind, detail),) = raw(pg_url, "SELECT kind, detail FROM events ORDER BY id DESC LIMIT 1")
        assert (kind, detail) == ("timed_out", "ran past its timeout of 5s")  # the new trigger keeps the reason
    fresh = pg_server.create_database(f"fresh_v4_{os.getpid()}_{abs(hash(pg_url)) % 10**6}")
    Queue(fresh).close()
    assert catalog(pg_url) == catalog(fresh)
