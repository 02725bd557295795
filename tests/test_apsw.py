"""The APSW backend's own facts: which target opens it, and APSW's errors read as leaselab's (the
contract suite runs on it through the ``target`` fixture; its power cuts are in test_powercut)."""

from __future__ import annotations

import sqlite3

import pytest

pytest.importorskip("apsw")

from leaselab import DatabaseMissing, Queue
from leaselab.backends import names_a_vfs
from leaselab.errors import DatabaseBusy, NotALeaselabDatabase


def _uri(path) -> str:
    return f"file:{path}?vfs=unix"  # SQLite's own file system, named, so through APSW


def test_only_a_file_uri_with_a_vfs_parameter_names_a_vfs():
    assert names_a_vfs("file:/tmp/q.db?vfs=unix") and names_a_vfs("file:q.db?mode=rw&vfs=x")
    assert not any(
        map(
            names_a_vfs,
            ["/tmp/q.db", "file:/tmp/q.db", "file:/tmp/q.db?mode=rw", "/tmp/vfs=x.db", "postgresql://h/db?vfs=x"],
        )
    )


def test_a_write_lock_held_past_the_busy_timeout_is_database_busy(tmp_path):
    with Queue(_uri(tmp_path / "q.db")) as holder, Queue(_uri(tmp_path / "q.db"), busy_timeout=0.1) as waiter:
        with holder.backend.transaction(durable=False):
            with pytest.raises(DatabaseBusy, match="held the write lock"):
                waiter.enqueue("x")
        assert waiter.enqueue("x") == 1


def test_another_applications_file_and_a_file_that_is_not_sqlite_are_refused_by_name(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.close()
    with pytest.raises(NotALeaselabDatabase, match="another application"):
        Queue(_uri(other))
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(NotALeaselabDatabase, match="not a valid leaselab database"):
        Queue(_uri(garbage))


def test_create_false_refuses_a_missing_file_and_makes_none(tmp_path):
    with pytest.raises(DatabaseMissing):
        Queue(_uri(tmp_path / "missing.db"), create=False)
    assert not (tmp_path / "missing.db").exists()
