"""Another program holding a queue's write lock, on each backend: the transient fault a busy timeout is for.

``WriteLock(target)`` connects with the raw driver, never through ``Queue``; ``take()`` makes every
write of the queue wait (a read goes on) until ``release()``. A SQLite file is held as a writer holds
it, with ``BEGIN IMMEDIATE``: through ``sqlite3``, or through APSW on an APSW target's file system (a
VFS registered in APSW's SQLite, which ``sqlite3`` cannot see). A server's queue is held with
``LOCK TABLE jobs IN EXCLUSIVE MODE``, which stops every ``INSERT`` and ``UPDATE`` of the jobs and lets a
plain ``SELECT`` through, as SQLite's write lock does in WAL mode.

What the queue says when the lock outlasts its busy timeout differs: ``BUSY_WORDS`` is what both say.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from leaselab.backends import is_server_url, names_a_vfs
from tests.support import minimal_backend

# SQLite: "another process held the write lock past the busy timeout"; PostgreSQL: "a lock was held
# past the busy timeout" (leaselab.errors.DatabaseBusy, as each backend words it).
BUSY_WORDS = "past the busy timeout"


class WriteLock:
    """A connection of another program to ``target`` that can hold the queue's write lock."""

    def __init__(self, target: str):
        self.target = target
        self._conn: Any
        if is_server_url(target):
            import psycopg

            self._conn = psycopg.connect(target)  # not autocommit: LOCK TABLE holds until the transaction ends
        elif names_a_vfs(target):
            import apsw

            vfs = parse_qs(urlsplit(target).query)["vfs"][-1]
            self._conn = apsw.Connection(target, flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_URI, vfs=vfs)
        else:
            path = target.removeprefix(f"{minimal_backend.SCHEME}:")
            self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def take(self) -> None:
        """Hold the lock from now on (at once: nobody else writes while it is taken)."""
        if is_server_url(self.target):
            self._conn.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
        else:
            self._conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        """Let the lock go, writing nothing."""
        if is_server_url(self.target):
            self._conn.rollback()
        else:
            self._conn.execute("ROLLBACK")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> WriteLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def hold_write_lock(target: str, seconds: float) -> None:
    """Hold ``target``'s write lock for ``seconds``, as a long write of another process would."""
    with WriteLock(target) as lock:
        lock.take()
        time.sleep(seconds)
        lock.release()
