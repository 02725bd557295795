"""The SQLite queue file: what a new file is and how an old one is upgraded; files that are not a leaselab
queue, or are newer, or cannot be written (permissions real only for a user the bits apply to);
``create=False``; the refusal of an old SQLite; and an open that never waits for another's write lock.

Facts of the file, so SQLite only; hostile and damaged files are in ``test_bad_input.py``.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from pathlib import Path

import pytest

from leaselab import DatabaseMissing, LeaselabError, LeaseLost, Queue
from leaselab.backends.sqlite import SCHEMA_VERSION, require_sqlite
from leaselab.errors import DatabaseBusy, DatabaseUnwritable, NotALeaselabDatabase, SchemaTooNew, UnsupportedSQLite
from tests.support.procs import as_nobody
from tests.support.sqlite_marks import old_file

# -- a new file, an old file -------------------------------------------------------------


def test_a_new_file_uses_small_pages_and_the_current_schema(db_path, clock):
    Queue(db_path, clock=clock).close()
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 1024
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    assert {r[1]: r[5] for r in conn.execute("PRAGMA table_list")}["jobs"] == 1  # STRICT
    conn.close()


def _version_1_file(path: Path) -> dict[int, list[tuple]]:
    """A file as leaselab's schema version 1 wrote it (4 KiB pages, events indexed by job), with history."""
    conn = old_file(path, 1)
    for n in range(3):
        conn.execute("INSERT INTO jobs (payload, run_at, created_at, updated_at) VALUES (?, 1, 1, 1)", (str(n),))
    for job_id, token in ((1, "a"), (2, "b"), (1, "c")):  # job 1 is claimed twice, around job 2
        conn.execute(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = 'old', token = ?, "
            "lease_until = 99, updated_at = 2, last_event = 'claimed' WHERE id = ?",
            (token, job_id),
        )
    conn.execute(
        "UPDATE jobs SET status = 'done', result = '1', lease_until = NULL, updated_at = 3, "
        "last_event = 'completed' WHERE id = 2"
    )
    history = {
        j: conn.execute("SELECT id, kind, token FROM events WHERE job_id = ? ORDER BY id", (j,)).fetchall()
        for j in (1, 2, 3)
    }
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
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    assert {r[1]: r[5] for r in conn.execute("PRAGMA table_list")}["jobs"] == 1  # STRICT
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'events_job'").fetchone()[0] == 0
    assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096  # an old file keeps its pages
    assert conn.execute("SELECT count(*) FROM sqlite_stat1 WHERE idx = 'jobs_claim'").fetchone()[0] == 1
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


# -- files that are not a leaselab queue, or not one this version may open ------------------


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
    tmp_path, monkeypatch
):
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


def test_an_old_sqlite_is_refused_and_3_37_is_enough():
    with pytest.raises(UnsupportedSQLite, match="3.37 or newer for STRICT tables; this Python links SQLite 3.36.0"):
        require_sqlite((3, 36, 0))
    require_sqlite((3, 37, 0))
    require_sqlite(sqlite3.sqlite_version_info)


# -- create=False ------------------------------------------------------------------------


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


# -- the opening lock ---------------------------------------------------------------------


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
