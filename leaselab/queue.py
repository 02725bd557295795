"""The queue: one SQLite file, a single-statement claim, leases, fencing tokens and a reaper."""

from __future__ import annotations

import json
import math
import operator
import os
import secrets
import sqlite3
import threading
import time
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from . import sql
from .backoff import Backoff
from .clock import Clock, system_clock
from .errors import (
    DatabaseBusy,
    DatabaseUnwritable,
    InvalidPayload,
    JobNotFound,
    LeaselabError,
    LeaseLost,
    NotALeaselabDatabase,
    SchemaTooNew,
    UnsupportedSQLite,
)
from .job import Event, Job, Status

SCHEMA_VERSION = 2
PAGE_SIZE = 1024  # for new files; see schema.sql
APPLICATION_ID = 0x4C454153  # "LEAS": marks a SQLite file as a leaselab queue
SQLITE_HEADER = b"SQLite format 3\x00"
MIN_SQLITE = (3, 35, 0)  # RETURNING arrived in 3.35
DEFAULT_LEASE = 30.0
DEFAULT_MAX_PAYLOAD = 1_000_000
DURABILITIES = ("full", "normal")

Tracer = Callable[[str, Any], None]

_ROWCOUNT = operator.attrgetter("rowcount")  # how many rows a statement changed, its triggers' not counted

# Strict JSON: NaN and Infinity are not JSON, and other languages' parsers reject them.
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def require_sqlite(version_info: tuple = sqlite3.sqlite_version_info) -> None:
    """Raise ``UnsupportedSQLite`` unless the SQLite library has RETURNING (3.35+)."""
    if tuple(version_info) < MIN_SQLITE:
        have = ".".join(map(str, version_info))
        raise UnsupportedSQLite(
            f"leaselab needs SQLite 3.35 or newer for RETURNING; this Python links SQLite {have}"
        )


def schema_statements() -> list[str]:
    """The statements of ``schema.sql``, split where SQLite says a statement is complete."""
    text = resources.files("leaselab").joinpath("schema.sql").read_text(encoding="utf-8")
    statements, current = [], []
    for line in text.splitlines():
        current.append(line)
        chunk = "\n".join(current).strip()
        if chunk and sqlite3.complete_statement(chunk):
            if not all(l.strip().startswith("--") or not l.strip() for l in current):
                statements.append(chunk)
            current = []
    return statements


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def _positive(name: str, value: Any) -> float:
    value = _number(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
    return value


def _integer(name: str, value: Any, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{name} must fit in 64 bits, got {value!r}")
    return value


def _text(name: str, value: Any, limit: int = 200) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty str, got {value!r}")
    if len(value) > limit:
        raise ValueError(f"{name} must be at most {limit} characters, got {len(value)}")
    return value


class Queue:
    """A job queue in one SQLite file, safe to share between threads and processes.

    ``clock`` is a callable returning unix seconds (``time.time`` by default; a
    ``ManualClock`` in tests and lessons). ``durability="full"`` makes every
    acknowledged enqueue and completion reach the disk before the call returns;
    claims, heartbeats, failures and reaps ride on the next sync, because losing
    one to a power cut only causes a retry. ``"normal"`` survives any process
    crash but may lose the last transactions on power loss.
    """

    def __init__(
        self,
        path: str | os.PathLike = "leaselab.db",
        clock: Clock | None = None,
        durability: str = "full",
        *,
        backoff: Backoff | None = None,
        busy_timeout: float = 30.0,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD,
        tracer: Tracer | None = None,
    ):
        require_sqlite()
        if durability not in DURABILITIES:
            raise ValueError(f"durability must be 'full' or 'normal', got {durability!r}")
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning unix seconds, got {clock!r}")
        if backoff is not None and not isinstance(backoff, Backoff):
            raise TypeError(f"backoff must be a leaselab.Backoff, got {backoff!r}")
        self.path = os.fspath(path)
        self.clock: Clock = clock or system_clock
        self.durability = durability
        self.backoff = backoff or Backoff()
        self.max_payload_bytes = _integer("max_payload_bytes", max_payload_bytes, 1)
        self.tracer = tracer
        self._lock = threading.RLock()
        self._conn = _connect(self.path, _positive("busy_timeout", busy_timeout))
        self._synchronous_full = False  # _connect leaves the connection at synchronous = NORMAL
        self._conn.create_function(
            "leaselab_backoff", 1, self.backoff.delay, deterministic=not self.backoff.jitter
        )

    # -- life cycle -------------------------------------------------------

    def close(self) -> None:
        """Close the connection. The file stays; open it again with a new ``Queue``."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Queue({self.path!r}, durability={self.durability!r})"

    # -- the statements ---------------------------------------------------

    def _run(self, statement: str, params: Any = (), *, durable: bool = False) -> list[tuple]:
        """Run one statement in its own transaction and return its rows."""
        return self._execute(statement, params, durable, sqlite3.Cursor.fetchall)

    def _changed(self, statement: str, params: Any = (), *, durable: bool = False) -> int:
        """Run one statement in its own transaction and return how many rows it changed (not its triggers)."""
        return self._execute(statement, params, durable, _ROWCOUNT)

    def _execute(self, statement: str, params: Any, durable: bool, read: Callable[[sqlite3.Cursor], Any]) -> Any:
        if self.tracer is not None:
            self.tracer(statement.strip(), params)
        with self._lock:
            try:
                self._sync(durable)
                return read(self._conn.execute(statement, params))
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc

    def _sync(self, durable: bool) -> None:
        """Make the next commit sync to disk if it is ``durable`` and the queue is "full"; caller holds the lock.

        The setting is switched only when it changes, so a run of completions (a worker's
        loop) or of enqueues pays for no switching at all.
        """
        full = durable and self.durability == "full"
        if full != self._synchronous_full:
            self._conn.execute("PRAGMA synchronous = FULL" if full else "PRAGMA synchronous = NORMAL")
            self._synchronous_full = full

    @contextmanager
    def _transaction(self, durable: bool) -> Iterator[Callable[..., sqlite3.Cursor]]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` under the lock; yields run(statement, params) -> cursor for inside it."""
        def run(statement: str, params: Any = ()) -> sqlite3.Cursor:
            if self.tracer is not None:
                self.tracer(statement.strip(), params)
            return conn.execute(statement, params)

        with self._lock:
            conn = self._conn
            try:
                self._sync(durable)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield run
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc

    def _now(self) -> float:
        return _number("clock()", self.clock())

    def _json(self, what: str, value: Any) -> str:
        try:
            text = _ENCODER.encode(value)
        except (TypeError, ValueError) as exc:
            raise InvalidPayload(f"{what} must be JSON (no NaN, no sets, no objects): {exc}") from None
        size = len(text.encode("utf-8"))
        if size > self.max_payload_bytes:
            raise InvalidPayload(f"{what} is {size} bytes of JSON; the limit is {self.max_payload_bytes}")
        return text

    def _enqueue_params(self, payload, priority, delay, run_at, max_attempts, now) -> dict:
        params = {
            "payload": self._json("payload", payload),
            "priority": _integer("priority", priority),
            "max_attempts": _integer("max_attempts", max_attempts, 1),
            "now": now,
        }
        delay = _number("delay", delay)
        if delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {delay!r}")
        params["run_at"] = now + delay if run_at is None else _number("run_at", run_at)
        return params

    def enqueue(
        self,
        payload: Any,
        priority: int = 0,
        delay: float = 0.0,
        run_at: float | None = None,
        max_attempts: int = 5,
    ) -> int:
        """Add a job and return its id. Higher ``priority`` runs first; ``run_at`` overrides ``delay``."""
        params = self._enqueue_params(payload, priority, delay, run_at, max_attempts, self._now())
        return self._run(sql.ENQUEUE, params, durable=True)[0][0]

    def enqueue_many(
        self,
        payloads: Iterable[Any],
        priority: int = 0,
        delay: float = 0.0,
        run_at: float | None = None,
        max_attempts: int = 5,
    ) -> list[int]:
        """Add many jobs in one transaction (one sync to disk) and return their ids, in order.

        Every payload is checked before anything is written: one bad payload writes none.
        """
        now = self._now()
        rows = [self._enqueue_params(p, priority, delay, run_at, max_attempts, now) for p in payloads]
        with self._transaction(durable=True) as run:
            ids = [run(sql.ENQUEUE, row).fetchone()[0] for row in rows]
        return ids

    def claim(self, worker: str = "worker", lease: float = DEFAULT_LEASE) -> Job | None:
        """Take the next runnable job and lease it to ``worker`` for ``lease`` seconds, or return None."""
        worker = _text("worker", worker)
        lease = _positive("lease", lease)
        now = self._now()
        token = secrets.token_hex(16)
        rows = self._run(sql.CLAIM, {"now": now, "lease_until": now + lease, "worker": worker, "token": token})
        return self._claimed(rows, token)

    def _claimed(self, rows: list[tuple], token: str) -> Job | None:
        if not rows:
            return None
        try:
            return Job.from_row(rows[0])
        except InvalidPayload as exc:
            # A row damaged outside leaselab: give the attempt back as failed (so it ends dead, not
            # stuck running), then tell the caller.
            self.fail(rows[0][0], token, str(exc))
            raise

    def heartbeat(self, job_id: int, token: str, lease: float = DEFAULT_LEASE) -> float:
        """Extend the lease to now + ``lease`` and return the new ``lease_until``.

        Works while ``token`` still holds the job, even past ``lease_until`` if no
        one has reaped or re-claimed it yet. Raises ``LeaseLost`` otherwise.
        """
        job_id, token = self._fence_args(job_id, token)
        lease = _positive("lease", lease)
        now = self._now()
        rows = self._run(sql.HEARTBEAT, {"id": job_id, "token": token, "now": now, "lease_until": now + lease})
        if not rows:
            self._lease_lost(job_id, token, now, "heartbeat")
        return rows[0][0]

    def complete(self, job_id: int, token: str, result: Any = None) -> None:
        """Mark the job done with a JSON ``result``; ``LeaseLost`` if ``token`` no longer holds it."""
        job_id, token = self._fence_args(job_id, token)
        params = {"id": job_id, "token": token, "result": self._json("result", result), "now": self._now()}
        if not self._changed(sql.COMPLETE, params, durable=True):
            self._lease_lost(job_id, token, params["now"], "complete")

    def complete_and_claim(
        self, job_id: int, token: str, result: Any = None, worker: str = "worker", lease: float = DEFAULT_LEASE
    ) -> Job | None:
        """Complete one job and claim the next in one transaction: a worker's hot path.

        Fenced exactly like ``complete``: if ``token`` no longer holds the job, the
        refusal is recorded, nothing is claimed and ``LeaseLost`` is raised. One
        commit instead of two, and with ``durability="full"`` still one sync per job.
        Returns None when nothing is runnable, or when the next job's stored payload was
        damaged (that attempt is failed with the reason, as ``claim`` does).
        """
        job_id, token = self._fence_args(job_id, token)
        worker = _text("worker", worker)
        lease = _positive("lease", lease)
        now = self._now()
        done = {"id": job_id, "token": token, "result": self._json("result", result), "now": now}
        next_token = secrets.token_hex(16)
        with self._transaction(durable=True) as run:
            if run(sql.COMPLETE, done).rowcount:
                refused = None
                rows = run(sql.CLAIM, {"now": now, "lease_until": now + lease, "worker": worker,
                                       "token": next_token}).fetchall()
            else:
                refused = _record_lease_lost(run, job_id, token, now, "complete")
        if refused is not None:
            raise LeaseLost(job_id, token, refused)
        try:
            return self._claimed(rows, next_token)
        except InvalidPayload:
            return None  # the completion stands; the damaged next job was failed with the reason

    def fail(self, job_id: int, token: str, error: str = "failed") -> Status:
        """Record a failed attempt and return the new status: ``pending`` (after backoff) or ``dead``."""
        job_id, token = self._fence_args(job_id, token)
        if not isinstance(error, str):
            raise TypeError(f"error must be a str, got {error!r}")
        now = self._now()
        rows = self._run(sql.FAIL, {"id": job_id, "token": token, "error": error[:10_000], "now": now})
        if not rows:
            self._lease_lost(job_id, token, now, "fail")
        return Status(rows[0][0])

    def reap(self) -> list[int]:
        """Return every running job whose lease has expired to pending (with backoff) or to dead.

        Returns the ids it moved. A job whose holder is merely late but not yet
        reaped can still be heartbeated or completed by that holder.
        """
        return [row[0] for row in self._run(sql.REAP, {"now": self._now()})]

    def _fence_args(self, job_id: Any, token: Any) -> tuple[int, str]:
        job_id = _integer("job_id", job_id)
        if not isinstance(token, str):
            raise TypeError(f"token must be the str from the claim, got {token!r}")
        return job_id, token

    def _lease_lost(self, job_id: int, token: str, now: float, action: str) -> None:
        with self._transaction(durable=False) as run:
            status = _record_lease_lost(run, job_id, token, now, action)
        raise LeaseLost(job_id, token, status)

    # -- reading ----------------------------------------------------------

    def get(self, job_id: int) -> Job:
        """The job as it is now; ``JobNotFound`` for an unknown id."""
        rows = self._run(sql.GET, (_integer("job_id", job_id),))
        if not rows:
            raise JobNotFound(job_id)
        return Job.from_row(rows[0])

    def jobs(self, status: str | Status | None = None, limit: int = 1000, *, newest_first: bool = False) -> list[Job]:
        """Jobs in id order, optionally only those with ``status``; ``newest_first`` gives the latest ``limit``."""
        limit = _integer("limit", limit, 0)
        if status is None:
            rows = self._run(sql.LIST_JOBS_NEWEST if newest_first else sql.LIST_JOBS, {"limit": limit})
        else:
            try:
                status = Status(status)
            except ValueError:
                raise ValueError(f"status must be one of pending, running, done, dead; got {status!r}") from None
            statement = sql.LIST_JOBS_BY_STATUS_NEWEST if newest_first else sql.LIST_JOBS_BY_STATUS
            rows = self._run(statement, {"status": status.value, "limit": limit})
        return [Job.from_row(r) for r in rows]

    def stats(self) -> dict[str, int]:
        """How many jobs are in each status, all four present, zeros included."""
        counts = {s.value: 0 for s in Status}
        counts.update(dict(self._run(sql.STATS)))
        return counts

    def events(self, job_id: int | None = None, after: int = 0) -> list[Event]:
        """The history of transitions, oldest first; ``after`` skips events up to that event id."""
        after = _integer("after", after)
        if job_id is None:
            rows = self._run(sql.EVENTS, {"after": after})
        else:
            rows = self._run(sql.EVENTS_FOR_JOB, {"id": _integer("job_id", job_id), "after": after})
        return [Event.from_row(r) for r in rows]

    def next_run_at(self) -> float | None:
        """When the earliest pending job becomes claimable, or None if nothing is pending."""
        return self._run(sql.NEXT_RUN_AT)[0][0]


def _record_lease_lost(run: Callable[..., sqlite3.Cursor], job_id: int, token: str, now: float, action: str) -> str:
    """Write a refused write into the job's history (inside a transaction); return the job's status."""
    detail = f"{action} refused: token no longer holds the job"
    rows = run(sql.RECORD_LEASE_LOST, {"id": job_id, "token": token, "now": now, "detail": detail,
                                       "after": 0}).fetchall()
    if not rows:
        raise JobNotFound(job_id)
    event_id, status = rows[0]
    run(sql.LINK_EVENT, {"event_id": event_id, "id": job_id})
    return status


def _translate(exc: sqlite3.Error, path: str) -> LeaselabError:
    message = str(exc)
    lowered = message.lower()
    if "locked" in lowered or "busy" in lowered:
        return DatabaseBusy(f"{path}: another process held the write lock past the busy timeout ({message})")
    if "readonly" in lowered or "read-only" in lowered or "unable to open" in lowered:
        return DatabaseUnwritable(f"{path}: cannot write the queue file ({message})")
    if "not a database" in lowered or "malformed" in lowered or "corrupt" in lowered:
        return NotALeaselabDatabase(f"{path} is not a valid leaselab database: {message}")
    return LeaselabError(f"{path}: SQLite error: {message}")


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


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    if path != ":memory:" and not path.startswith("file:"):
        _check_path(path)
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise _translate(exc, path) from exc
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
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = _check_schema(conn, path)  # again, under the write lock: another process may have won
            if version < SCHEMA_VERSION:
                for statement in sql.MIGRATIONS.get(version, ()):  # older files keep their page size
                    conn.execute(statement)
                for statement in schema_statements() + list(sql.CLAIM_STATISTICS):
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")  # int constants: pragmas take no ?
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION:d}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    except LeaselabError:
        conn.close()
        raise
    except sqlite3.Error as exc:
        conn.close()
        raise _translate(exc, path) from exc
    return conn


def _journal_mode_wal(conn: sqlite3.Connection, busy_timeout: float) -> str:
    """Switch to WAL, waiting up to the busy timeout; returns the journal mode SQLite reports."""
    # A new file's switch to WAL needs the exclusive lock, and SQLite calls no busy handler for
    # it: when many processes open a new file at once, some get "database is locked" at once.
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
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
    return version
