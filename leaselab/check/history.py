"""What a run left behind, read with the raw driver: the jobs table, the events table and the effects.

The queue's file is opened with ``sqlite3`` in ``mode=ro`` (nothing can be created or
written), a server with raw psycopg in one REPEATABLE READ READ ONLY transaction; on both,
the two tables are read in one snapshot, so a worker still writing cannot make them
disagree. Never through ``Queue``: a bug in the library must not be able to hide itself
from its own checker.

``snapshot(target)`` streams: it walks the jobs in id order beside their events, ordered by
job then id, and hands the checker one job at a time (``Snapshot.per_job``), so a history of
a million jobs is read in the memory of one job's rows. ``load(target)`` reads everything
into a ``History`` of plain dicts, which is also how a test or a lesson builds a history by
hand; ``in_memory(history)`` walks such a history the same way.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..backends import check_target, is_server_url, no_primary, primary_only, scrub, server_error, server_url
from ..errors import (
    DatabaseMissing,
    DatabaseUnreachable,
    NoPrimary,
    NotALeaselabDatabase,
    ServerRefused,
    TooManyClients,
)
from .effects import EffectSource, effects_from
from .shapes import (
    COUNT_JOBS,
    PLAIN_FILE,
    PLAIN_SERVER,
    REST_EVENTS_FILE,
    REST_EVENTS_SERVER,
    REST_JOBS_FILE,
    REST_JOBS_SERVER,
    ROWS_WITHOUT_HISTORY,
    Plain,
    plain_from,
)

SELECT_JOBS = """
SELECT id, payload, status, priority, run_at, attempts, max_attempts, lease_until, worker, token,
       result, last_error, created_at, updated_at, last_event_id
  FROM jobs ORDER BY id
"""

SELECT_EVENTS = "SELECT id, job_id, kind, at, worker, token, attempt, detail, prev FROM events ORDER BY id"

# What the rules read of a job, streamed: no payload, result or error, which no rule looks at.
SELECT_JOBS_CHECKED = """
SELECT id, status, priority, run_at, attempts, max_attempts, lease_until, worker, token, last_event_id
  FROM jobs ORDER BY id
"""

# Each job's events together, oldest first: the events table has no index on job_id (a write
# appends one row and nothing more), so the database sorts, spilling to disk, not to our memory.
SELECT_EVENTS_BY_JOB = (
    "SELECT id, job_id, kind, at, worker, token, attempt, detail, prev FROM events ORDER BY job_id, id"
)

COUNT_EVENTS = "SELECT count(*) FROM events"

# One event by id: a job's linked history that points outside its own events.
SELECT_EVENT_FILE = "SELECT id, job_id, kind, at, worker, token, attempt, detail, prev FROM events WHERE id = ?"
SELECT_EVENT_SERVER = "SELECT id, job_id, kind, at, worker, token, attempt, detail, prev FROM events WHERE id = %s"

SERVER_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8 AS now"

# The checker's read sets its own statement timeout, inside its transaction: an administrator's
# `ALTER DATABASE ... SET statement_timeout` sized for the queue's short statements would cut
# off a read of the whole history. 0 is no timeout; connect_timeout still bounds an unreachable server.
SERVER_NO_TIMEOUT = "SET LOCAL statement_timeout = 0"

# Rows the server sends per round trip while the checker walks its cursors.
SERVER_BATCH = 5000

# What a server says when it will never let this connection in: no such database, no such
# user, a wrong password. Anything else at connect time is a server that cannot be reached.
_REFUSED_STATES = ("3D000", "28000", "28P01")

JOB_FIELDS = (
    "id",
    "status",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "lease_until",
    "worker",
    "token",
    "last_event_id",
)
EVENT_FIELDS = ("id", "job_id", "kind", "at", "worker", "token", "attempt", "detail", "prev")


@dataclass(frozen=True)
class History:
    """The jobs (by id), the events (by id) and the effects of one run, with the time it was read.

    ``now`` is the queue's clock when the snapshot was taken (the server's on PostgreSQL):
    leases and run times are compared with it.
    """

    jobs: list[dict[str, Any]]
    events: list[dict[str, Any]]
    effects: list[dict[str, Any]] = field(default_factory=list)
    now: float = 0.0
    # The events' ids are the order the queue applied them in: true of a SQLite file (one writer at a
    # time), not of a server, whose ids are handed out as rows are written, before their commits.
    ordered: bool = True


class Snapshot(Protocol):
    """One consistent view of a run, walked job by job: what the checker reads, from a file, a server or lists."""

    now: float
    ordered: bool

    def per_job(
        self, only: list[int] | None = None
    ) -> Iterator[tuple[dict[str, Any] | None, int, list[dict[str, Any]]]]:
        """Each job in id order as ``(row, id, events)``: its row (None when its events outlive it) and its
        events, oldest first; with ``only`` (ids in order), those jobs alone."""
        ...

    def plain(self, idle: bool) -> Plain | None:
        """The jobs whose whole history is a common one no rule can fault, counted in the database, and the ids
        of every other job (``shapes``); None when this view cannot tell them apart (walk every job)."""
        ...

    def event(self, event_id: int) -> dict[str, Any] | None:
        """One event by id, from the same snapshot; None when there is no such event."""
        ...

    def size(self) -> int:
        """How many events the history holds."""
        ...

    def whole(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every job and every event (by id), in memory: for the specification, which reads the history in order."""
        ...


def merge(jobs: Iterable[dict[str, Any]], events: Iterable[dict[str, Any]]) -> Iterator[tuple[Any, int, list]]:
    """Jobs in id order beside events ordered by job then id: ``(row or None, id, events)`` per job."""
    grouped = ((job_id, list(group)) for job_id, group in itertools.groupby(events, key=lambda e: e["job_id"]))
    pending = next(grouped, None)
    for j in jobs:
        while pending is not None and pending[0] < j["id"]:
            yield None, pending[0], pending[1]  # events whose job's row is gone
            pending = next(grouped, None)
        if pending is not None and pending[0] == j["id"]:
            yield j, j["id"], pending[1]
            pending = next(grouped, None)
        else:
            yield j, j["id"], []
    while pending is not None:
        yield None, pending[0], pending[1]
        pending = next(grouped, None)


class _Listed:
    """A ``History`` held in lists, walked as a snapshot."""

    def __init__(self, history: History):
        self.history = history
        self.now = history.now
        self.ordered = history.ordered
        self._by_id: dict[int, dict] | None = None

    def per_job(
        self, only: list[int] | None = None
    ) -> Iterator[tuple[dict[str, Any] | None, int, list[dict[str, Any]]]]:
        wanted = None if only is None else set(only)
        jobs = sorted((j for j in self.history.jobs if wanted is None or j["id"] in wanted), key=lambda j: j["id"])
        events = sorted(
            (e for e in self.history.events if wanted is None or e["job_id"] in wanted),
            key=lambda e: (e["job_id"], e["id"]),
        )
        return merge(jobs, events)

    def plain(self, idle: bool) -> Plain | None:
        return None  # already in memory: the rules read it as fast as a count would

    def event(self, event_id: int) -> dict[str, Any] | None:
        if self._by_id is None:
            self._by_id = {e["id"]: e for e in self.history.events}
        return self._by_id.get(event_id)

    def size(self) -> int:
        return len(self.history.events)

    def whole(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return self.history.jobs, self.history.events


def in_memory(history: History) -> Snapshot:
    """``history`` (lists of dicts, read by ``load`` or built by hand) as a ``Snapshot``."""
    return _Listed(history)


class _Driven:
    """A snapshot read through a driver's connection, inside one read-only transaction the caller holds."""

    def __init__(
        self,
        rows: Callable[..., Iterator[tuple]],
        one: Callable[[int], tuple | None],
        now: float,
        ordered: bool,
        server: bool,
    ):
        self._rows, self._one = rows, one
        self.now, self.ordered, self._server = now, ordered, server

    def per_job(
        self, only: list[int] | None = None
    ) -> Iterator[tuple[dict[str, Any] | None, int, list[dict[str, Any]]]]:
        if only is None:
            job_rows, event_rows = self._rows(SELECT_JOBS_CHECKED), self._rows(SELECT_EVENTS_BY_JOB)
        elif not only:
            return iter(())
        elif self._server:
            job_rows, event_rows = self._rows(REST_JOBS_SERVER, (only,)), self._rows(REST_EVENTS_SERVER, (only,))
        else:
            ids = json.dumps(only)
            job_rows, event_rows = self._rows(REST_JOBS_FILE, (ids,)), self._rows(REST_EVENTS_FILE, (ids,))
        jobs = (_job_row(row) for row in job_rows)
        events = (dict(zip(EVENT_FIELDS, row, strict=True)) for row in event_rows)
        return merge(jobs, events)

    def plain(self, idle: bool) -> Plain | None:
        found = plain_from(self._rows(PLAIN_SERVER if self._server else PLAIN_FILE, {"idle": idle, "now": self.now}))
        ((rows,),) = list(self._rows(COUNT_JOBS))
        if rows == found.with_history:
            return found
        bare = {job_id for (job_id,) in self._rows(ROWS_WITHOUT_HISTORY)}
        return replace(found, rest=sorted(bare.union(found.rest)))

    def event(self, event_id: int) -> dict[str, Any] | None:
        row = self._one(event_id)
        return None if row is None else dict(zip(EVENT_FIELDS, row, strict=True))

    def size(self) -> int:
        ((n,),) = list(self._rows(COUNT_EVENTS))
        return n

    def whole(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return [_job_row(row) for row in self._rows(SELECT_JOBS_CHECKED)], [
            dict(zip(EVENT_FIELDS, row, strict=True)) for row in self._rows(SELECT_EVENTS)
        ]


def _job_row(row: tuple) -> dict[str, Any]:
    return dict(zip(JOB_FIELDS, row, strict=True))


@contextmanager
def snapshot(target: str | os.PathLike, *, now: float | None = None) -> Iterator[Snapshot]:
    """Open ``target`` (a SQLite file path or a ``postgresql://`` URL) for one consistent read, streamed.

    The transaction stays open while the ``with`` block walks it. ``now`` replaces the
    database's clock. A missing file raises ``DatabaseMissing`` and is not created; a file or
    database without leaselab's tables raises ``NotALeaselabDatabase``.
    """
    target = os.fspath(target)
    check_target(target)
    reader = _server_snapshot(server_url(target), now) if is_server_url(target) else _file_snapshot(target, now)
    with reader as view:
        yield view


def load(target: str | os.PathLike, *, effects: EffectSource = None, now: float | None = None) -> History:
    """Read ``target`` (a SQLite file path or a ``postgresql://`` URL) and ``effects`` into a ``History``.

    Everything in memory, payloads and results decoded: for a test, a lesson or a tool that
    wants the rows; ``check`` streams instead. ``now`` replaces the database's clock (a history
    made on a ``ManualClock``). A missing file raises ``DatabaseMissing`` and is not created; a
    file or database without leaselab's tables raises ``NotALeaselabDatabase``.
    """
    target = os.fspath(target)
    check_target(target)
    if is_server_url(target):
        jobs, events, clock = _read_server(server_url(target))
    else:
        jobs, events, clock = _read_file(target)
    for job in jobs:
        job["payload"] = _json(job["payload"])
        job["result"] = None if job["result"] is None else _json(job["result"])
    return History(
        jobs=jobs,
        events=events,
        effects=effects_from(effects),
        now=clock if now is None else now,
        ordered=not is_server_url(target),
    )


def _json(text: Any) -> Any:
    # Another program may have written anything into the file: keep what cannot be read as it is.
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return text


def _connect_file(path: str) -> sqlite3.Connection:
    if not os.path.exists(path):
        raise DatabaseMissing(path)
    if os.path.isdir(path):
        raise NotALeaselabDatabase(f"{path} is a folder, not a queue file")
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    try:
        return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0)
    except sqlite3.Error as exc:
        raise NotALeaselabDatabase(f"{path}: cannot be opened to read ({exc})") from None


def _not_a_queue(path: str, exc: Exception) -> NotALeaselabDatabase:
    return NotALeaselabDatabase(f"{path} is not a leaselab queue file ({exc})")


def _read_file(path: str) -> tuple[list[dict], list[dict], float]:
    conn = _connect_file(path)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("BEGIN")  # both tables from one snapshot
        jobs = [dict(row) for row in conn.execute(SELECT_JOBS)]
        events = [dict(row) for row in conn.execute(SELECT_EVENTS)]
        conn.execute("ROLLBACK")
    except sqlite3.DatabaseError as exc:  # not SQLite at all, or another application's file
        raise _not_a_queue(path, exc) from None
    finally:
        conn.close()
    return jobs, events, time.time()


@contextmanager
def _file_snapshot(path: str, now: float | None) -> Iterator[Snapshot]:
    conn = _connect_file(path)

    def rows(sql: str, params: Any = ()) -> Iterator[tuple]:
        try:
            yield from conn.execute(sql, params)
        except sqlite3.DatabaseError as exc:
            raise _not_a_queue(path, exc) from None

    def one(event_id: int) -> tuple | None:
        return conn.execute(SELECT_EVENT_FILE, (event_id,)).fetchone()

    try:
        try:
            conn.execute("BEGIN")
            # A deferred transaction takes its snapshot at its first read: read before the clock.
            conn.execute("SELECT count(*) FROM jobs WHERE id = 0").fetchone()
        except sqlite3.DatabaseError as exc:  # not SQLite at all, or another application's file
            raise _not_a_queue(path, exc) from None
        yield _Driven(rows, one, time.time() if now is None else now, ordered=True, server=False)
    finally:
        conn.close()  # closing ends the read transaction


def _connect_server(url: str, **options: Any) -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(
            f"checking a PostgreSQL queue needs psycopg 3: pip install 'leaselab[postgres]' ({exc})"
        ) from exc
    try:
        conn = psycopg.connect(url, connect_timeout=10, **{**primary_only(url), **options})
    except psycopg.Error as exc:
        message = scrub(str(exc), url)
        said = no_primary(str(exc), url)
        if said is not None:
            raise NoPrimary(said) from None
        if (
            getattr(exc, "sqlstate", None) in _REFUSED_STATES
            or "does not exist" in message
            or "authentication failed" in message
        ):
            raise ServerRefused(f"the server refused the connection ({message})") from None
        error = server_error(exc, url)
        if isinstance(error, TooManyClients):  # the server is there, and full: not "cannot reach"
            raise error from None
        raise DatabaseUnreachable(f"cannot reach the server ({message})") from None
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True
    return conn


def _server_errors(url: str, exc: Exception) -> Exception:
    import psycopg

    if isinstance(exc, psycopg.errors.UndefinedTable):
        return NotALeaselabDatabase(f"the database holds no leaselab queue ({scrub(str(exc), url)})")
    return DatabaseUnreachable(f"the history could not be read ({scrub(str(exc), url)})")


def _read_server(url: str) -> tuple[list[dict], list[dict], float]:
    import psycopg
    from psycopg.rows import dict_row

    conn = _connect_server(url, row_factory=dict_row)
    try:
        try:
            conn.execute(SERVER_NO_TIMEOUT)
            jobs = conn.execute(SELECT_JOBS).fetchall()
            events = conn.execute(SELECT_EVENTS).fetchall()
            clock = conn.execute(SERVER_NOW).fetchone()["now"]
        except psycopg.Error as exc:
            raise _server_errors(url, exc) from None
        conn.rollback()
    finally:
        conn.close()
    return jobs, events, clock


@contextmanager
def _server_snapshot(url: str, now: float | None) -> Iterator[Snapshot]:
    import psycopg

    conn = _connect_server(url)
    cursors = itertools.count()

    def rows(sql: str, params: Any = None) -> Iterator[tuple]:
        try:
            # A server-side cursor: the rows come SERVER_BATCH at a time, never all at once.
            with conn.cursor(name=f"leaselab_check_{next(cursors)}") as cursor:
                cursor.itersize = SERVER_BATCH
                cursor.execute(sql, params)
                yield from cursor
        except psycopg.Error as exc:
            raise _server_errors(url, exc) from None

    def one(event_id: int) -> tuple | None:
        try:
            return conn.execute(SELECT_EVENT_SERVER, (event_id,)).fetchone()
        except psycopg.Error as exc:
            raise _server_errors(url, exc) from None

    try:
        try:
            conn.execute(SERVER_NO_TIMEOUT)
            # The snapshot is taken at the transaction's first query; the clock is read in it.
            (clock,) = conn.execute(SERVER_NOW).fetchone()
        except psycopg.Error as exc:
            raise _server_errors(url, exc) from None
        yield _Driven(rows, one, clock if now is None else now, ordered=False, server=True)
    finally:
        conn.close()


# -- witness lines: one row of the history each, the same in every language --------------------


def _short(token: Any) -> str:
    return "-" if token is None else str(token)[:8]


def _at(t: Any) -> str:
    return "-" if t is None else f"{t:.3f}"


def event_line(e: dict[str, Any]) -> str:
    """``events#12 job=3 claimed attempt=1 worker=w1 token=1a2b3c4d at=1767225600.000``."""
    line = (
        f"events#{e['id']} job={e['job_id']} {e['kind']} attempt={e['attempt']} worker={e.get('worker') or '-'} "
        f"token={_short(e.get('token'))} at={_at(e.get('at'))}"
    )
    return line + (f" detail={e['detail']!r:.60}" if e.get("detail") else "")


def job_line(j: dict[str, Any]) -> str:
    """``jobs#3 status=running attempts=1/5 worker=w1 token=1a2b3c4d lease_until=1767225630.000``."""
    return (
        f"jobs#{j['id']} status={j['status']} attempts={j['attempts']}/{j['max_attempts']} "
        f"worker={j.get('worker') or '-'} token={_short(j.get('token'))} lease_until={_at(j.get('lease_until'))} "
        f"run_at={_at(j.get('run_at'))}"
    )


def effect_line(x: dict[str, Any]) -> str:
    """``effects#4 job=3 attempt=1 key=- token=1a2b3c4d worker=w1``."""
    return (
        f"effects#{x['n']} job={x['job']} attempt={x['attempt'] if x['attempt'] is not None else '-'} "
        f"key={x['key'] if x['key'] is not None else '-'} token={_short(x.get('token'))} "
        f"worker={x.get('worker') or '-'}"
    )
