"""Schema 6: periodic schedules' last ticks. A version 5 file or database (as the previous leaselab wrote
it: tests/data/schema_v5.sql, pg_schema_v5.sql) is upgraded in place when opened: every job keeps its row
and history, the schedules table appears as a new one has it, and schedules run on it."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from leaselab import ManualClock, Queue
from leaselab.backends.sqlite import SCHEMA_VERSION
from leaselab.periodic import Schedule
from tests.support.sqlite_marks import old_file

DATA = Path(__file__).parent / "data"
T0 = 1_767_225_600.0


def _fill(execute) -> None:
    """Two version 5 jobs: a pending one in a named queue with a key, and a plain one."""
    execute(
        "INSERT INTO jobs (payload, run_at, created_at, updated_at, queue, key) VALUES ('1', 1, 1, 1, 'mail', 'k-1')"
    )
    execute("INSERT INTO jobs (payload, run_at, created_at, updated_at) VALUES ('2', 1, 1, 1)")


def _runs_a_schedule(target) -> None:
    clock = ManualClock(T0)
    s = Schedule("tick", every=60)
    with Queue(target, clock=clock) as q:
        assert [(j.queue, j.key) for j in q.jobs()] == [("mail", "k-1"), ("default", None)]
        assert not q.enqueue_unique("x", "k-1").new  # the key index came through
        q.run_schedule(s)
        clock.advance(60)
        (made,) = q.run_schedule(s)
        assert q.get(made).key == "tick@2026-01-01T00:01:00Z"


def _table(conn: sqlite3.Connection, name: str) -> list[tuple]:
    return conn.execute("SELECT type, name, sql FROM sqlite_master WHERE tbl_name = ?", (name,)).fetchall()


def test_a_version_5_file_is_upgraded_in_place_and_runs_schedules(tmp_path):
    path = tmp_path / "v5.db"
    conn = old_file(path, 5)
    _fill(conn.execute)
    jobs_before = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
    events_before = conn.execute("SELECT * FROM events ORDER BY id").fetchall()
    conn.close()
    _runs_a_schedule(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    assert conn.execute("SELECT * FROM jobs WHERE id <= 2 ORDER BY id").fetchall() == jobs_before
    assert conn.execute("SELECT * FROM events ORDER BY id").fetchall()[: len(events_before)] == events_before
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    fresh = tmp_path / "fresh.db"
    Queue(fresh).close()
    assert _table(conn, "schedules") == _table(sqlite3.connect(fresh), "schedules")
    assert _table(conn, "schedules")  # there at all
    with pytest.raises(sqlite3.IntegrityError):  # its CHECKs came with it
        conn.execute("INSERT INTO schedules (name, last_tick) VALUES ('', 1)")


def test_a_version_5_database_on_postgresql_is_upgraded_to_the_very_schema_a_new_one_has(pg_url, pg_server):
    psycopg = pytest.importorskip("psycopg") if not os.environ.get("CI") else __import__("psycopg")
    from tests.test_pg_schema import catalog, events_of, mark, raw

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute((DATA / "pg_schema_v5.sql").read_text())
        _fill(conn.execute)
    jobs_before = raw(pg_url, "SELECT * FROM jobs ORDER BY id")
    events_before = events_of(pg_url)
    _runs_a_schedule(pg_url)
    assert raw(pg_url, "SELECT * FROM jobs WHERE id <= 2 ORDER BY id") == jobs_before
    assert events_of(pg_url)[: len(events_before)] == events_before
    from leaselab.backends.postgres import SCHEMA_VERSION as PG_SCHEMA_VERSION

    assert mark(pg_url) == [(f"leaselab queue, schema {PG_SCHEMA_VERSION}",) * 2]
    fresh = pg_server.create_database(f"fresh_v6_{os.getpid()}_{abs(hash(pg_url)) % 10**6}")
    Queue(fresh).close()
    assert catalog(pg_url) == catalog(fresh)
    schedules = (
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
        " WHERE table_name = 'schedules' AND table_schema = current_schema() ORDER BY ordinal_position"
    )
    checks = (
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'schedules'::regclass ORDER BY 1"
    )
    assert raw(pg_url, schedules) == raw(fresh, schedules) != []
    assert raw(pg_url, checks) == raw(fresh, checks) != []
