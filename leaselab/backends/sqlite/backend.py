"""The SQLite backend: one file, WAL, one writer at a time. Its SQL, schema, connection and errors.

The queue's logic lives once in ``leaselab.queue``; this module knows how to open a file
safely, how SQLite begins, syncs and ends a transaction (the rest of the plumbing is
``SqlBackend``'s), how it completes and claims in one transaction, and how to translate
SQLite's errors into leaselab's.
"""

from __future__ import annotations

import difflib
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ...backoff import Backoff
from ...errors import (
    DatabaseBusy,
    DatabaseMissing,
    DatabaseUnwritable,
    DiskFull,
    KeyHeld,
    LeaselabError,
    NotALeaselabDatabase,
    QueueFileGone,
    SchemaTooNew,
    UnsupportedSQLite,
)
from ..base import SqlBackend, claimed, claiming
from ..contract import Backend, Claim, Claimed, Completion, FullBackend, Tracer
from . import statements as sql

SCHEMA_VERSION = 7
PAGE_SIZE = 1024  # for new files; see schema.sql
APPLICATION_ID = 0x4C454153  # "LEAS": marks a SQLite file as a leaselab queue
SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_FULL = 13  # the primary result code of "database or disk is full"
SQLITE_IOERR = 10  # "disk I/O error": its extended codes (IOERR_SHMSIZE, IOERR_WRITE, ...) say which call failed
SQLITE_CANTOPEN = 14  # "unable to open database file": also what a folder with no free inode gives
# Less free space than this beside the file, and an I/O error is the disk being full: SQLite's
# largest single write is a 32 KiB -shm region or one WAL frame (a page, up to 64 KiB, and a header).
FULL_MARGIN = 64 * 1024
MIN_SQLITE = (3, 37, 0)  # STRICT tables arrived in 3.37 (RETURNING in 3.35)


def require_sqlite(version_info: tuple = sqlite3.sqlite_version_info) -> None:
    """Raise ``UnsupportedSQLite`` unless the SQLite library has STRICT tables (3.37+) and RETURNING."""
    # No fallback to untyped tables: with them, any program could write text where the claim and
    # the reaper compare numbers and stick a job for ever. Python 3.11+ from python.org, conda,
    # Ubuntu 22.04 and Debian 12 all link 3.37 or newer.
    if tuple(version_info) < MIN_SQLITE:
        have = ".".join(map(str, version_info))
        raise UnsupportedSQLite(
            f"leaselab needs SQLite 3.37 or newer for STRICT tables; this Python links SQLite {have}"
        )


def schema_statements() -> list[str]:
    """The statements of ``schema.sql``, split where SQLite says a statement is complete."""
    text = resources.files(__package__).joinpath("schema.sql").read_text(encoding="utf-8")
    statements, current = [], []
    for line in text.splitlines():
        current.append(line)
        chunk = "\n".join(current).strip()
        if chunk and sqlite3.complete_statement(chunk):
            if not all(line.strip().startswith("--") or not line.strip() for line in current):
                statements.append(chunk)
            current = []
    return statements


def _code(statement: str) -> str:
    """A statement without the comment lines ``schema.sql`` puts before it."""
    return "\n".join(line for line in statement.splitlines() if not line.lstrip().startswith("--")).lstrip()


def file_identity(path: str) -> tuple[int, int] | None:
    """The (device, inode) of the file at ``path``; None for a database with no file of its own to
    watch (``:memory:``, a ``file:`` URI, which may name a VFS) or one that cannot be looked at."""
    if path == ":memory:" or path.startswith("file:"):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def nearest_queue_file(path: str) -> str | None:
    """The existing ``.db`` file in ``path``'s folder whose name is closest to it, if any is close."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    try:
        names = [c.name for c in folder.iterdir() if c.suffix == ".db" and c.is_file()]
    except OSError:
        return None
    match = difflib.get_close_matches(p.name, names, n=1, cutoff=0.5)
    return str(folder / match[0]) if match else None


class SqliteBackend(SqlBackend):
    """A queue file: one connection, guarded by a lock so threads may share it.

    ``create=False`` refuses a path where no file exists yet, instead of making a new queue.
    ``connection`` (the ``sqlite3`` connection), ``run`` and ``transaction`` are escape hatches
    for lessons and tests, outside the ``Backend`` contract.
    """

    statements = sql
    kind = "sqlite"
    driver_error: type[Exception] = sqlite3.Error
    sqlite_version_info: tuple = sqlite3.sqlite_version_info  # of the SQLite library the driver links
    clock = None  # a file has no clock of its own: the queue uses the caller's
    call_timeout: float | None = None  # kept, never used: the busy timeout already bounds every wait on a file

    def __init__(
        self,
        path: str,
        *,
        busy_timeout: float,
        backoff: Backoff,
        tracer: Tracer | None = None,
        create: bool = True,
    ):
        require_sqlite(self.sqlite_version_info)
        super().__init__(path, tracer)
        self.path = path
        if not create and path != ":memory:" and not path.startswith("file:") and not Path(path).exists():
            raise DatabaseMissing(path, nearest_queue_file(path))
        self._conn = self._open(path, busy_timeout, create)
        self._identity = file_identity(path)  # what _still_there() compares; None: nothing to watch
        self._gone: QueueFileGone | None = None  # once found, every later call raises it
        self._immediate = _Immediate(self._conn)  # the one connection's transaction, made once
        self._synchronous_full = False  # prepare() leaves the connection at synchronous = NORMAL
        self._conn.create_function("leaselab_backoff", 1, backoff.delay, deterministic=not backoff.jitter)

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Read ``clock`` inside the statements that need the time once they hold the write lock
        (``leaselab_now()`` in the renewals)."""
        self._conn.create_function("leaselab_now", 0, lambda: float(clock()))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _open(self, path: str, busy_timeout: float, create: bool) -> sqlite3.Connection:
        """The driver's connection to ``path``, ready for the queue (``prepare``): the one step another
        driver of the same engine does its own way (``leaselab.backends.apsw``)."""
        if path != ":memory:" and not path.startswith("file:"):
            _check_path(path)
        try:
            conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise translate(exc, path) from exc
        return prepare(conn, path, busy_timeout, self._translate)

    # -- the hooks of SqlBackend -----------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._gone is not None:
            raise self._gone
        return self._conn

    def _still_there(self) -> None:
        """Raise ``QueueFileGone`` (now and on every later call) if the file at ``path`` is no longer
        the one opened: deleted, renamed away, or another file moved into its place. SQLite goes on
        writing to the open file either way, into pages no one can open again (SQLite's "How To
        Corrupt" page, 2.4 and 2.5). A ``stat`` of the path: asked at each heartbeat, each reap and
        each claim that found nothing (a busy worker is told within a third of a lease, an idle one
        within a poll), not on every write."""
        if self._identity is None or self._gone is not None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            now = None
        except OSError:  # cannot tell (a folder it may no longer search): not a reason to stop
            return
        else:
            now = (st.st_dev, st.st_ino)
        if now != self._identity:
            self._gone = QueueFileGone(self.path, replaced=now is not None)
            raise self._gone

    def claim_many(self, n: int, claim: Claim, *, durable: bool) -> list[Claimed]:
        jobs = super().claim_many(n, claim, durable=durable)
        if not jobs:
            self._still_there()
        return jobs

    def heartbeat_many(self, tokens: Sequence[str], lease: float, now: float | None) -> dict[int, float]:
        self._still_there()
        return super().heartbeat_many(tokens, lease, now)

    def reap(self, now: float, keep: Sequence[str]) -> list[int]:
        self._still_there()
        return super().reap(now, keep)

    def _sync(self, conn: sqlite3.Connection, durable: bool) -> None:
        """Make the next commit sync to disk if it is ``durable``; caller holds the lock.

        The setting is switched only when it changes, so a run of completions (a worker's
        loop) or of enqueues pays for no switching at all.
        """
        if durable != self._synchronous_full:
            conn.execute("PRAGMA synchronous = FULL" if durable else "PRAGMA synchronous = NORMAL")
            self._synchronous_full = durable

    def _begin(self, conn: sqlite3.Connection) -> _Immediate:
        return self._immediate if conn is self._conn else _Immediate(conn)

    def _translate(self, exc: sqlite3.Error) -> LeaselabError:
        return translate(exc, self.path)

    def _claim_many_statement(self, n: int, claim: Claim) -> str:
        if len(claim.queues) > 1:
            return sql.CLAIM_MANY_SEVERAL
        return sql.CLAIM_MANY_OF_ONE if n == 1 else sql.CLAIM_MANY

    # -- SQLite's own strategy -------------------------------------------------------------
    # SQLite has no UPDATE inside WITH, so a completion and the next claim are COMPLETE then
    # CLAIM in one transaction (one commit, one sync); on a file there is no round trip to save.

    def complete_and_claim(self, done: Completion, claim: Claim, *, durable: bool) -> tuple[bool, Claimed | None]:
        with self.transaction(durable) as run:
            if not run(
                sql.COMPLETE, {"id": done.id, "token": done.token, "result": done.result, "now": claim.now}
            ).rowcount:
                return False, None
            rows = run(sql.CLAIM if len(claim.queues) == 1 else sql.CLAIM_SEVERAL, claiming(claim)).fetchall()
        return True, (claimed(rows)[0] if rows else None)

    def complete_many(self, done: Sequence[Completion], now: float, *, durable: bool) -> list[int]:
        return self._complete_many_then(done, now, 0, None, durable)[0]

    def complete_many_and_claim(
        self, done: Sequence[Completion], n: int, claim: Claim, *, durable: bool
    ) -> tuple[list[int], list[Claimed]]:
        return self._complete_many_then(done, claim.now, n, claim, durable)

    def _complete_many_then(
        self, done: Sequence[Completion], now: float, n: int, claim: Claim | None, durable: bool
    ) -> tuple[list[int], list[Claimed]]:
        """COMPLETE job by job, then (with ``claim`` and ``n`` > 0) CLAIM_MANY, in one transaction."""
        completed, rows = [], []
        with self.transaction(durable) as run:
            for item in done:
                if run(sql.COMPLETE, {"id": item.id, "token": item.token, "result": item.result, "now": now}).rowcount:
                    completed.append(item.id)
            if claim is not None and n > 0:
                rows = run(self._claim_many_statement(n, claim), {**claiming(claim), "n": n}).fetchall()
        return completed, claimed(rows)


class _Immediate:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, or a rollback after an error: SQLite's transaction, as a context."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, kind: Any, *exc: Any) -> None:
        if kind is None:
            self.conn.execute("COMMIT")
        else:
            _rollback(self.conn)


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back after an error, if anything is left to roll back; never replace that error."""
    if not conn.in_transaction:  # SQLite may have rolled back already (a full disk does)
        return
    try:
        conn.execute("ROLLBACK")
    except conn.Error:  # the caller's error is the one to report; SQLite ends the transaction anyway
        pass


def translate(exc: Exception, path: str, code: int | None = None, name: str | None = None) -> LeaselabError:
    """The leaselab error for a SQLite error; ``code`` and ``name`` are SQLite's extended result code and
    its name where the driver keeps them elsewhere than ``sqlite3.Error`` does."""
    message = str(exc)
    lowered = message.lower()
    if code is None:
        code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+; the message is all 3.10 gives
    if code == SQLITE_FULL or "database or disk is full" in lowered:
        return DiskFull(path, message)
    # SQLite says SQLITE_FULL only when a write into a file fails with ENOSPC. Growing the -shm
    # (at open, the first time after the last connection closed), creating the -wal or truncating
    # fail on a full disk as a bare "disk I/O error", and a folder out of inodes as "unable to
    # open": only the file system can tell these from a failing disk or a missing folder.
    primary = None if code is None else code & 0xFF
    if primary in (SQLITE_IOERR, SQLITE_CANTOPEN) or (
        code is None and ("disk i/o error" in lowered or "unable to open" in lowered)
    ):
        short = out_of_space(path)
        if short is not None:
            name = name or getattr(exc, "sqlite_errorname", None)
            return DiskFull(path, f"{message}{f' ({name})' if name else ''}; {short}")
    if "unique constraint failed: jobs.key" in lowered:
        return KeyHeld(f"{path}: another pending or running job holds this job's unique key ({message})")
    if "locked" in lowered or "busy" in lowered:
        return DatabaseBusy(f"{path}: another process held the write lock past the busy timeout ({message})")
    if "readonly" in lowered or "read-only" in lowered or "unable to open" in lowered:
        return DatabaseUnwritable(f"{path}: cannot write the queue file ({message})")
    if "not a database" in lowered or "malformed" in lowered or "corrupt" in lowered:
        return NotALeaselabDatabase(f"{path} is not a valid leaselab database: {message}")
    return LeaselabError(f"{path}: SQLite error: {message}")


def out_of_space(path: str) -> str | None:
    """What is short on the file system holding ``path`` (free space or inodes), or None if neither is."""
    if path == ":memory:" or path.startswith("file:") or not hasattr(os, "statvfs"):
        return None
    folder = Path(path).resolve().parent
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    # root may write into the blocks and inodes kept back for it: its disk is full only when they are gone.
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    free = (st.f_bfree if root else st.f_bavail) * st.f_frsize
    if free < FULL_MARGIN:
        return f"{free} bytes free in {folder}"
    inodes = st.f_ffree if root else st.f_favail
    if st.f_files > 0 and inodes == 0:  # f_files 0: a file system that does not count inodes (btrfs)
        return f"no free inode in {folder}"
    return None


def _check_path(path: str) -> None:
    p = Path(path)
    if p.is_dir():
        raise NotALeaselabDatabase(f"{path} is a folder, not a queue file")
    if p.exists():
        with open(p, "rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
        if head and head != SQLITE_HEADER:
            raise NotALeaselabDatabase(f"{path} is not a SQLite database (its first bytes are not the SQLite header)")
        if not os.access(p, os.R_OK | os.W_OK):
            raise DatabaseUnwritable(f"{path} is not writable; leaselab needs to write to its queue file")
    folder = p.resolve().parent
    if not folder.is_dir():
        raise DatabaseUnwritable(f"cannot create {path}: folder {folder} does not exist")
    # WAL keeps -wal and -shm files beside the database, so the folder must be writable too.
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DatabaseUnwritable(f"cannot use {path}: folder {folder} is not writable")


def prepare(conn: Any, path: str, busy_timeout: float, translate_error: Callable[[Any], LeaselabError]) -> Any:
    """``conn`` checked, switched to WAL and given the schema (made or upgraded); closed after an error,
    which ``translate_error`` turns into leaselab's.

    ``conn`` is a ``sqlite3`` connection in autocommit mode, or anything that offers its ``execute``
    (a cursor with ``fetchone``), ``in_transaction``, ``Error`` and ``close``.
    """
    try:
        # One read transaction, so the ids and the table list come from one snapshot: read apart,
        # another process creating the schema in between made a fresh file look foreign.
        conn.execute("BEGIN")
        try:
            version = _check_schema(conn, path)
        finally:
            if conn.in_transaction:  # an error may already have ended it; keep that error, not ours
                conn.execute("COMMIT")
        if version == 0:
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE:d}")  # only an empty file takes it: no effect later
        mode = _journal_mode_wal(conn, busy_timeout)
        if path != ":memory:" and mode.lower() != "wal":
            raise DatabaseUnwritable(f"{path}: could not switch to WAL mode (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        if version == SCHEMA_VERSION:
            # Current already: nothing to write, so no write lock to wait for. A worker starting
            # while another holds the lock (frozen mid-transaction, say) opens at once and waits
            # at its first claim instead, where the lock is the queue's to take.
            return conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = _check_schema(conn, path)  # again, under the write lock: another process may have won
            if version < SCHEMA_VERSION:
                # Older files keep their page size; a file at sql.REBUILT_BY or below stops its steps there.
                upgrades = range(version, SCHEMA_VERSION if version > sql.REBUILT_BY else sql.REBUILT_BY + 1)
                upgrades = upgrades if version else range(0)
                schema = schema_statements()
                tables = [s for s in schema if _code(s).startswith("CREATE TABLE")]
                for statement in [s for v in upgrades for s in sql.MIGRATIONS.get(v, ())] + tables:
                    conn.execute(statement)
                for statement in [s for v in upgrades for s in sql.REFILLS.get(v, ())]:
                    conn.execute(statement)
                for statement in [s for s in schema if s not in tables] + list(sql.CLAIM_STATISTICS):
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")  # int constants: pragmas take no ?
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
    except LeaselabError:
        conn.close()
        raise
    except conn.Error as exc:
        conn.close()
        raise translate_error(exc) from exc
    return conn


def _journal_mode_wal(conn: sqlite3.Connection, busy_timeout: float) -> str:
    """Switch to WAL, waiting up to the busy timeout; returns the journal mode SQLite reports."""
    # A new file's switch to WAL needs the exclusive lock, and SQLite calls no busy handler for
    # it: when many processes open a new file at once, some get "database is locked" at once.
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except conn.Error as exc:  # "database is locked": sqlite3's OperationalError, APSW's BusyError
            if "locked" not in str(exc).lower() or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def _check_schema(conn: sqlite3.Connection, path: str) -> int:
    """Refuse files that are not ours or are too new; return the schema version, 0 for an empty file."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if app_id == 0 and version == 0:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        if tables:
            raise NotALeaselabDatabase(
                f"{path} is a SQLite database of another application (tables: {', '.join(tables[:5])})"
            )
        return 0
    if app_id != APPLICATION_ID:
        raise NotALeaselabDatabase(f"{path} is a SQLite database of another application (application_id {app_id})")
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"{path} has leaselab schema version {version}; this leaselab knows up to {SCHEMA_VERSION}. "
            "Upgrade leaselab to open it."
        )
    if version > sql.REBUILT_BY:
        strict = {row[1]: row[5] for row in conn.execute("PRAGMA main.table_list")}
        if not (strict.get("jobs") and strict.get("events")):
            return sql.REBUILT_BY  # made untyped again by hand: rebuild (and repair) like a version 2 file
    return version


# The type checker proves this class satisfies the contract (tests/test_types.py runs it).
_CONTRACT: type[Backend] = SqliteBackend
_FULL: type[FullBackend] = SqliteBackend  # with every fast path: its own, or a default from BackendDefaults
