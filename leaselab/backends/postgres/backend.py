"""The PostgreSQL backend: the same queue on a server, for workers on many hosts.

The queue's logic lives once in ``leaselab.queue``, the plumbing shared with SQLite in
``SqlBackend``; this module opens a connection with psycopg 3, makes or checks the schema,
bounds each call and reconnects after a dropped one, fuses a completion with the next claim
into one statement, waits for work with LISTEN/NOTIFY, gives the server's clock, and
translates the driver's errors into leaselab's (naming the server, never the password).
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import ExecStatus

from ...backoff import Backoff
from ...clock import elapsed
from ...errors import (
    DatabaseBusy,
    DatabaseMissing,
    DatabaseUnreachable,
    DatabaseUnwritable,
    InvalidTarget,
    KeyHeld,
    LeaselabError,
    NoPrimary,
    NotALeaselabDatabase,
    SchemaTooNew,
    ServerRefused,
    TooManyClients,
)
from .. import no_primary, primary_only, scrub
from ..base import SqlBackend, claimed, serving
from ..contract import Backend, Claim, Claimed, Completion, FullBackend, Tracer
from . import statements as sql

SCHEMA_VERSION = 7
TUPLES_OK = ExecStatus.TUPLES_OK
SCHEMA_MARK = re.compile(r"leaselab queue, schema (\d+)")
SCHEMA_LOCK_KEY = 0x4C454153  # "LEAS", as the SQLite files' application_id
MAX_BACKOFF_CAP = 1e300
CHANNEL_POLL = 0.1  # how often a worker waiting for a notification looks at its stop flag
CLOCK_RESYNC = 30.0  # seconds between readings of the server's clock
# How much sooner than the client's call timeout the server's own limits end a wait, so the server
# ends it first and the connection survives: a small, fixed head start, not a share, since a share
# of a 27 s call timeout (a 30 s lease) would cut a 25 s lock wait that the busy timeout allows.
SERVER_HEAD_START = 0.5


# SQLSTATE classes and codes, by what they mean to a caller.
_BUSY = {"55P03", "57014", "40001", "40P01"}  # lock timeout, statement timeout, serialization, deadlock
_UNWRITABLE = {"25006", "42501", "53100", "53200", "53400"}  # read-only, no privilege, disk full, out of memory
_UNIQUE_VIOLATION = "23505"  # a second pending or running job with one key (jobs_key)
_REFUSED = {"3D000", "28000", "28P01"}  # no such database, authorization refused, wrong password
_REFUSED_AT_CONNECT = re.compile(
    r'FATAL:\s+(database ".*" does not exist|password authentication failed|'
    r'role ".*" does not exist|no pg_hba.conf entry)'
)
_UNREACHABLE_CLASSES = ("08", "57P")  # connection failures, server shutting down
_TOO_MANY_CLIENTS = "53300"
# A connection refused for want of a slot arrives before any SQLSTATE, in one of two FATAL lines: the
# first when every slot is taken, the second when only those kept for superusers (or, from
# PostgreSQL 16, for roles given pg_use_reserved_connections) are left.
_TOO_MANY_CLIENTS_AT_CONNECT = re.compile(
    r"FATAL:\s+(sorry, too many clients already|remaining connection slots are reserved)"
)


def schema_script() -> str:
    """The text of ``schema.sql``: run as one script, in one transaction."""
    return sql.SCHEMA


def display_name(url: str) -> str:
    """``postgresql://user@host:port/dbname``: the server a message names, without the password.

    ``InvalidTarget`` (a ``ValueError``) for a URL libpq cannot parse, in words that hold no
    part of its password.
    """
    try:
        info = {key: str(value) for key, value in conninfo_to_dict(url).items()}
    except psycopg.Error as exc:  # libpq quotes the whole URL, password and all, in its reason
        reason = _scrub(str(exc).replace(url, "…"), url)
        raise InvalidTarget(f"not a valid PostgreSQL URL: {reason}") from None
    user = f"{info['user']}@" if info.get("user") else ""
    host = info.get("host") or info.get("hostaddr") or "localhost"
    # libpq ends the user at the first @ (the rest of a password holding one becomes the host),
    # and without an @ it reads "user:password" as "host:port": either way libpq's later errors
    # would quote a piece of the password as a host or a port.
    if "@" in host:
        raise InvalidTarget(
            "not a valid PostgreSQL URL: more than one @ before the host (write an @ inside a user or password as %40)"
        )
    if not re.fullmatch(r"[0-9]*(,[0-9]*)*", info.get("port") or ""):
        raise InvalidTarget(
            "not a valid PostgreSQL URL: its port is not a number (not repeated here: "
            "it may be a password, if the URL lacks the @ before the host)"
        )
    hosts, ports = host.split(","), (info.get("port") or "").split(",")
    if len(ports) == 1:  # one port for every host, as libpq reads it
        ports = ports * len(hosts)
    where = ",".join(f"{h or 'localhost'}:{p or 5432}" for h, p in zip(hosts, ports, strict=False))
    return f"postgresql://{user}{where}/{info.get('dbname') or info.get('user') or ''}"


def _scrub(message: str, url: str) -> str:
    """``message`` without ``url``'s password in any form, and on one line (libpq's hints span lines)."""
    try:
        password = str(conninfo_to_dict(url).get("password") or "")
    except psycopg.Error:
        password = ""
    if password:
        message = message.replace(password, "***")
    return _one_line(scrub(message, url))


def _one_line(message: str) -> str:
    """libpq's lines as one line of sentences: ``…failed: Connection refused. Is the server running…?``

    Its lines end without a full stop (``Connection refused``, then ``Is the server running…?``
    on the next), so joining them with a space alone would run the sentences together.
    """
    lines = [" ".join(line.split()) for line in message.splitlines()]
    lines = [line for line in lines if line]
    return " ".join(
        line if line.endswith((".", "?", "!", ":", ";", ",")) or i == len(lines) - 1 else line + "."
        for i, line in enumerate(lines)
    )


class PostgresBackend(SqlBackend):
    """A queue in a PostgreSQL database on one connection, guarded by a lock so threads may share
    it: a worker's loop, its pulse and its wait for work (which LISTENs on that same connection) all
    use it, so a worker holds one connection to the server, idle or busy.

    ``create=False`` refuses a database that holds no leaselab tables yet instead of making them.
    ``call_timeout`` (seconds, or None for none) bounds each call: see its setter. ``connection``
    (the psycopg connection), ``run`` and ``transaction`` are escape hatches for lessons and
    tests, outside the ``Backend`` contract.
    """

    statements = sql
    kind = "postgresql"
    driver_error = psycopg.Error

    def __init__(
        self,
        url: str,
        *,
        busy_timeout: float,
        backoff: Backoff,
        tracer: Tracer | None = None,
        create: bool = True,
    ):
        super().__init__(display_name(url), tracer)
        self.url = url
        self._busy_timeout = busy_timeout
        # A cap past 1e300 seconds (the universe is 4e17 seconds old) is 1e300 on the server,
        # so no product in the backoff's SQL can overflow a float.
        cap = min(float(backoff.cap), MAX_BACKOFF_CAP)
        self.backoff_params = {
            "backoff_base": min(float(backoff.base), cap),
            "backoff_cap": cap,
            "backoff_jitter": float(backoff.jitter),
        }
        self._conn: psycopg.Connection | None = None
        self._session: tuple[int, Any] | None = None  # the open connection's (pid, backend_start)
        self._orphan: tuple[int, Any] | None = None  # a dropped session whose last call is unknown
        # The connection that LISTENs (the open one, unless it dropped since), and whether a notification
        # came since the last wait for work returned: set by whichever thread's statement read it.
        self._listening: psycopg.Connection | None = None
        self._notified = threading.Event()
        self._synchronous: bool | None = None
        self._durable_level = "on"  # synchronous_commit for an acknowledged write: _open reads the server's
        self._clock_base: tuple[float, float] | None = None  # (server time, clock.elapsed()) of the last reading
        self._call_timeout: float | None = None
        self._deadline: tuple[float, psycopg.Connection] | None = None  # of the call in flight, if bounded
        self._cut = False  # the watchdog cut the call in flight
        self._watch = threading.Lock()  # guards _deadline and _cut between a call and the watchdog
        self._watchdog: threading.Event | None = None  # set to stop the watchdog thread; None: none running
        with self._lock:
            conn = self._connection()
            try:
                self._ensure_schema(conn, create)
            except psycopg.Error as exc:
                self.close()
                raise self._translate(exc) from exc
            except BaseException:
                self.close()
                raise
        # Without an explicit clock, the queue takes "now" from here: workers on different
        # hosts then agree on leases, run_at and the reaper, whatever their own clocks say.
        self.clock: Callable[[], float] | None = self.now

    # -- connections -------------------------------------------------------

    def _limit(self) -> float:
        """The longest any one wait may last: the busy timeout, or the call timeout if shorter."""
        return self._busy_timeout if self._call_timeout is None else min(self._busy_timeout, self._call_timeout)

    def _connect_params(self) -> dict[str, Any]:
        """Timeouts for a new connection: a silent or dead peer is noticed within about ``_limit()``.

        libpq waits at least 2 s for a connection whatever it is told. The keepalives find a
        peer that is gone; ``tcp_user_timeout`` a link that takes data and never acknowledges it.
        """
        limit = self._limit()
        probe = max(1, int(limit / 4))
        return {
            **primary_only(self.url),
            "connect_timeout": max(2, min(30, int(limit))),
            "keepalives": 1,
            "keepalives_idle": probe,
            "keepalives_interval": probe,
            "keepalives_count": 3,
            "tcp_user_timeout": int(limit * 1000),
        }

    def _open(self) -> psycopg.Connection:
        params = self._connect_params()
        limit, probe = self._limit(), params["keepalives_idle"]
        if self._call_timeout is not None:
            limit = min(self._busy_timeout, max(self._call_timeout - SERVER_HEAD_START, 0.5 * self._call_timeout))
        try:
            conn = psycopg.connect(self.url, autocommit=True, application_name="leaselab", **params)
            # A write that waits on another transaction's row lock gives up after the busy timeout, or
            # before the call timeout if that is shorter: the server ends the wait (DatabaseBusy, the
            # connection intact) before the watchdog would cut the call.
            # The server's own keepalives end this session's transaction, and free its locks, when
            # this worker's host is cut off for good.
            # No bitmap scans: on a jobs table autovacuum has not analyzed yet (a new database, the first
            # minute of a burst), the planner guesses a handful of pending rows and serves the claim by a
            # bitmap scan of every runnable job and a sort of them all, so each claim reads the whole
            # backlog (measured: 2.9 ms a batch statement with 6,800 jobs waiting, 0.56 ms without). The
            # claim's ordered walk of jobs_claim, which stops after LIMIT rows, is then its only index
            # path, whatever the statistics say (SQLite's schema writes the statistics its claim needs;
            # PostgreSQL's cannot be written). No statement of the queue needs a bitmap: each reads by
            # one index, by id, or the whole table.
            (*_, configured), *_ = conn.execute(
                "SELECT set_config('lock_timeout', %s, false), set_config('tcp_keepalives_idle', %s, false),"
                " set_config('tcp_keepalives_interval', %s, false),"
                " set_config('tcp_keepalives_count', '3', false), set_config('tcp_user_timeout', %s, false),"
                " set_config('enable_bitmapscan', 'off', false), current_setting('synchronous_commit')",
                (f"{int(limit * 1000)}ms", str(probe), str(probe), str(int(limit * 1000))),
            ).fetchall()
            # An acknowledged write waits for at least the WAL flush ("on"), and for more when the server
            # asks more: "remote_apply" (a synchronous standby has applied it) is kept, not weakened to "on".
            self._durable_level = "remote_apply" if configured == "remote_apply" else "on"
            if self._call_timeout is not None:
                conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{int(limit * 1000)}ms",))
        except psycopg.Error as exc:
            raise self._translate(exc) from exc
        return conn

    # -- the call timeout --------------------------------------------------

    @property
    def call_timeout(self) -> float | None:
        """The longest one call (a statement, or a whole transaction) may wait for the server, or None."""
        return self._call_timeout

    @call_timeout.setter
    def call_timeout(self, seconds: float | None) -> None:
        """Bound every later call: the server ends a statement or lock wait that runs past it, and a
        watchdog thread cuts the connection of a call the server never answers (a partition), so the
        call raises ``DatabaseUnreachable`` and the next one reconnects. The connection open now is
        closed, so the next call opens one with the new limits."""
        with self._lock:
            self._call_timeout = seconds
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @contextmanager
    def _bounded(self, conn: psycopg.Connection) -> Iterator[None]:
        """Arm the watchdog for one call on ``conn``; a call it cut raises ``DatabaseUnreachable``.
        Caller holds the lock."""
        if self._call_timeout is None:
            yield
            return
        if self._watchdog is None:
            self._watchdog = threading.Event()
            threading.Thread(
                target=self._watch_calls, args=(self._watchdog,), name="leaselab-call-timeout", daemon=True
            ).start()
        with self._watch:  # two assignments: arming a call wakes no thread, it is on every statement's path
            self._cut = False
            self._deadline = (time.monotonic() + self._call_timeout, conn)
        cut = False
        try:
            yield
        except psycopg.Error as exc:
            cut = self._disarm()
            if not cut:
                raise
            self._translate(exc)  # drops the broken connection: the next call opens a new one
            raise DatabaseUnreachable(
                f"{self.name}: cannot reach the server (no reply within the call timeout, "
                f"{self._call_timeout:g}s; the connection was cut)"
            ) from exc
        finally:
            if not cut:
                self._disarm()

    def _disarm(self) -> bool:
        """End the call's deadline; True if the watchdog cut the call."""
        with self._watch:
            self._deadline = None
            cut, self._cut = self._cut, False
            return cut

    def _watch_calls(self, stop: threading.Event) -> None:
        # One thread per backend, not one per call, and no wake-up per call: it looks every tenth of
        # the call timeout (so a cut comes at most a tenth late) and, if the call in flight is past
        # its deadline, shuts its socket down. libpq then reads end-of-file, psycopg raises, and the
        # connection is marked broken.
        while not stop.wait(max(0.01, (self._call_timeout or 10.0) / 10)):
            with self._watch:  # held while cutting: the call cannot end and a new one start meanwhile
                if self._deadline is not None and time.monotonic() >= self._deadline[0]:
                    conn, self._deadline, self._cut = self._deadline[1], None, True
                    _shut_down(conn)

    def _connection(self) -> psycopg.Connection:
        """The open connection, reconnecting first if the last one dropped; caller holds the lock."""
        if self._conn is None or self._conn.closed:
            conn = self._open()
            try:
                if self._orphan is not None:
                    self._end_orphan(conn, *self._orphan)
                session = conn.execute(sql.SESSION).fetchone()
            except BaseException as exc:
                conn.close()
                if isinstance(exc, psycopg.Error):
                    raise self._translate(exc) from exc
                raise
            self._conn, self._session = conn, session
            self._synchronous = None
        return self._conn

    def _end_orphan(self, conn: psycopg.Connection, pid: int, started: Any) -> None:
        """End the session of the call whose reply never came, and wait until it has ended (see
        ``statements.END_SESSION``); ``DatabaseUnreachable`` if it outlasts the busy timeout."""
        rows = conn.execute(
            sql.END_SESSION, {"pid": pid, "started": started, "wait_ms": max(1, int(self._limit() * 1000))}
        ).fetchall()
        if rows and not rows[0][0]:
            raise DatabaseUnreachable(
                f"{self.name}: the session of a call whose reply never came is still "
                f"ending on the server (pid {pid}); what it did is not known yet"
            )
        self._orphan = None

    def _ensure_schema(self, conn: psycopg.Connection, create: bool) -> None:
        """Create the schema in an empty database, or upgrade an older one in place (``create`` or not)."""
        version = self._schema_version(conn)
        if version == SCHEMA_VERSION:
            return
        if version == 0 and not create:
            raise DatabaseMissing(f"{self.name} (the database holds no leaselab tables)")
        with conn.transaction():
            conn.execute(sql.SCHEMA_COMMITS_LOCALLY)
            conn.execute(sql.SCHEMA_LOCK, {"key": SCHEMA_LOCK_KEY})
            version = self._schema_version(conn)  # again, under the lock: another process may have won
            if version == 0:
                conn.execute(schema_script())
            for statement in [s for v in range(version or SCHEMA_VERSION, SCHEMA_VERSION) for s in sql.MIGRATIONS[v]]:
                conn.execute(statement)

    def _schema_version(self, conn: psycopg.Connection) -> int:
        """Refuse tables that are not ours or are too new; return the schema version, 0 for none yet."""
        versions = []
        for table, exists, comment in conn.execute(sql.SCHEMA_MARKS).fetchall():
            if not exists:
                continue
            mark = SCHEMA_MARK.fullmatch(comment or "")
            if mark is None:
                raise NotALeaselabDatabase(
                    f"{self.name} holds a table named {table} that is not leaselab's; "
                    "use another database (or schema) for the queue"
                )
            versions.append(int(mark.group(1)))
        if len(versions) == 1:
            raise NotALeaselabDatabase(f"{self.name} holds only one of leaselab's two tables (jobs, events)")
        version = max(versions, default=0)
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"{self.name} has leaselab schema version {version}; this leaselab knows up to "
                f"{SCHEMA_VERSION}. Upgrade leaselab to open it."
            )
        return version

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Nothing to do: a renewal on the server reads the server's clock in the statement, or is
        given the time when the queue keeps a clock of its own."""

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.set()
            self._watchdog = None
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = self._listening = None

    # -- statements --------------------------------------------------------

    def now(self) -> float:
        """The server's clock, in unix seconds: read from the server at most every ``CLOCK_RESYNC``
        seconds and carried forward between reads by this host's monotonic clock.

        Asking the server on every call would add a round trip to every claim and completion.
        The clock carried on is ``clock.elapsed``: it never jumps when this host's wall clock is
        set or skewed, and on Linux it counts a suspend of the host too (``time.monotonic``
        stops then, and the carried time would lag the server's by the whole suspend, so a claim
        could write a lease already in the server's past). Over a resync interval it drifts from
        the server's clock by the two hosts' rate difference: microseconds while NTP disciplines
        both, more without it. The reading is placed at the midpoint of its round trip, so it may
        be off by up to half of that round trip.
        """
        base = self._clock_base
        if base is None or elapsed() - base[1] > CLOCK_RESYNC:
            sent = elapsed()
            ((server,),) = self.run(sql.SERVER_NOW)
            base = self._clock_base = (server, (sent + elapsed()) / 2)
        return base[0] + (elapsed() - base[1])

    # -- the hooks of SqlBackend -----------------------------------------------------------

    def _prepare(self, params: Any) -> Any:
        if isinstance(params, dict):
            for key, value in params.items():
                if isinstance(value, str) and "\x00" in value:
                    params = _without_nul(params, key, value)
        return params

    def _check_tokens(self, tokens: Iterable[str]) -> None:
        # Tokens inside a JSON array reach the server as \u0000, which jsonb refuses in words that name nothing.
        if any("\x00" in token for token in tokens):
            raise ValueError("a token contains a NUL character (\\x00), which PostgreSQL text cannot hold")

    def _sync(self, conn: psycopg.Connection, durable: bool) -> None:
        """Make the next commit wait for the WAL flush if it is ``durable`` (and for a synchronous standby to
        apply it, on a server set to ``remote_apply``); caller holds the lock.

        Switched only when it changes, so a run of completions or of claims pays nothing.
        """
        if durable != self._synchronous:
            conn.execute(
                "SELECT set_config('synchronous_commit', %s, false)", (self._durable_level if durable else "off",)
            )
            self._synchronous = durable

    def _begin(self, conn: psycopg.Connection) -> Any:
        return conn.transaction()

    @staticmethod
    def _rows(cursor: psycopg.Cursor) -> list[tuple]:
        # psycopg builds a Column object for every column each time ``description`` is read: sixteen
        # per claim, on every job's statement. The result's status says the same for free.
        result = cursor.pgresult
        return cursor.fetchall() if result is not None and result.status == TUPLES_OK else []

    def _ids_of_each(self, run: Any, statement: str, each: list[dict[str, Any]]) -> list[int]:
        """Pipelined (psycopg's ``executemany``): the statements go out back to back instead of one
        round trip each; still one statement per job, so each fires its triggers as ``enqueue`` does."""
        if len(each) < 2:
            return super()._ids_of_each(run, statement, each)
        each = [self._prepare(params) for params in each]
        if self.tracer is not None:
            for params in each:
                self.tracer(statement.strip(), params)
        cursor = self._connection().cursor()
        cursor.executemany(statement, each, returning=True)
        ids: list[int] = []
        while True:
            ids.extend(job_id for (job_id,) in cursor.fetchall())  # RETURNING id
            if not cursor.nextset():
                return ids

    # -- the server's own strategy: what SQLite does in a transaction, here one statement, one round trip

    def complete_and_claim(self, done: Completion, claim: Claim, *, durable: bool) -> tuple[bool, Claimed | None]:
        ((completed, job_id, *rest),) = self.run(  # whether it completed, then the claimed job's JOB_COLUMNS
            sql.COMPLETE_AND_CLAIM if len(claim.queues) == 1 else sql.COMPLETE_AND_CLAIM_SEVERAL,
            {
                "id": done.id,
                "token": done.token,
                "result": done.result,
                "now": claim.now,
                "lease_until": claim.lease_until,
                "worker": claim.worker,
                "next_token": claim.token,
                **serving(claim.queues),
            },
            durable=durable,
        )
        if not completed:
            return False, None
        return True, (None if job_id is None else claimed([(job_id, *rest)])[0])

    def complete_many(self, done: Sequence[Completion], now: float, *, durable: bool) -> list[int]:
        rows = self.run(sql.COMPLETE_MANY, {"done": self._done(done), "now": now}, durable=durable)
        return [job_id for (job_id,) in rows]  # RETURNING id

    def complete_many_and_claim(
        self, done: Sequence[Completion], n: int, claim: Claim, *, durable: bool
    ) -> tuple[list[int], list[Claimed]]:
        claiming = {
            "now": claim.now,
            "lease_until": claim.lease_until,
            "worker": claim.worker,
            "n": n,
            **serving(claim.queues),
        }
        one_queue = len(claim.queues) == 1
        if len(done) == 1:  # a one-slot worker's every job: no JSON array to build and unpack
            (one,) = done
            rows = self.run(
                sql.COMPLETE_ONE_AND_CLAIM if one_queue else sql.COMPLETE_ONE_AND_CLAIM_SEVERAL,
                {**claiming, "id": one.id, "token": one.token, "result": one.result, "next_token": claim.token},
                durable=durable,
            )
        else:
            rows = self.run(
                sql.COMPLETE_MANY_AND_CLAIM if one_queue else sql.COMPLETE_MANY_AND_CLAIM_SEVERAL,
                {**claiming, "done": self._done(done), "token": claim.token},
                durable=durable,
            )
        # Each row: the ids that completed (the same on every row), then a claimed job's JOB_COLUMNS (all
        # NULL when nothing was claimed).
        completed = next((ids for ids, *_ in rows), None) or []
        return completed, claimed((job_id, *rest) for _, job_id, *rest in rows if job_id is not None)

    def _done(self, done: Sequence[Completion]) -> str:
        """The completions as the JSON array COMPLETE_MANY reads."""
        self._check_tokens(item.token for item in done)
        return json.dumps([{"id": item.id, "token": item.token, "result": item.result} for item in done])

    # -- waiting for work ----------------------------------------------------

    def wait_for_work(self, timeout: float, stop: threading.Event | None = None) -> None:
        """Return on a NOTIFY (an enqueue that found no runnable job waiting: see schema.sql), when
        ``stop`` is set, or after ``timeout`` seconds.

        It LISTENs on the queue's own connection, not on one of its own, so an idle worker holds no
        second connection: on a server with a small ``max_connections`` each worker costs one. The
        lock is held only to look for notifications, never while waiting for one (a ``select`` on the
        socket, in slices of ``CHANNEL_POLL`` to see ``stop``): the pulse's heartbeat and reaper run on
        the same connection meanwhile. A notification that one of their statements read is kept for
        this wait by the connection's notify handler, and one that came while the worker was busy wakes
        its next wait at once: a spare claim, never a missed job.
        """
        deadline = time.monotonic() + timeout
        while not self._notified.is_set() and not (stop is not None and stop.is_set()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                with self._lock:
                    socket_fd = self._listen().fileno()
            except (LeaselabError, psycopg.Error):
                # No connection (the server is down or full, say): wait out the poll; the next claim
                # reports the fault, and the next wait connects and LISTENs again.
                stop.wait(left) if stop is not None else time.sleep(left)
                return
            if self._notified.is_set():
                break
            _readable(socket_fd, min(left, CHANNEL_POLL))
        self._notified.clear()

    def _listen(self) -> psycopg.Connection:
        """The open connection, LISTENing (again, after a reconnect), with what the server sent read
        and any notification in it noted; caller holds the lock."""
        conn = self._connection()
        try:
            with self._bounded(conn):
                if self._listening is not conn:
                    conn.add_notify_handler(self._notice)
                    conn.execute(sql.LISTEN)
                    self._listening = conn
                # Without blocking: what is on the socket already, a notification or end-of-file.
                conn.pgconn.consume_input()
                while conn.pgconn.notifies() is not None:
                    self._notified.set()
        except psycopg.Error as exc:
            raise self._translate(exc) from exc
        return conn

    def _notice(self, notification: psycopg.Notify) -> None:
        """The connection's notify handler: psycopg calls it for each notification a statement's reply
        carried, on the thread that ran the statement."""
        self._notified.set()

    # -- errors --------------------------------------------------------------

    def _translate(self, exc: psycopg.Error) -> LeaselabError:
        if self._conn is not None and self._conn.broken:
            self._conn.close()  # the next call opens a new connection, once this one's session has ended
            self._conn, self._orphan = None, self._session or self._orphan
        return translate(exc, self.name, self.url)


def _readable(fd: int, timeout: float) -> None:
    """Wait until ``fd`` has something to read (or is closed or broken), at most ``timeout`` seconds.

    poll(2) where there is one: select(2) refuses a descriptor past FD_SETSIZE (1024), which a
    worker whose handlers keep many files open may be given.
    """
    try:
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.poll(timeout * 1000)
        else:  # pragma: no cover - Windows
            select.select([fd], [], [], timeout)
    except (OSError, ValueError):  # another thread closed the connection meanwhile: the caller looks again
        time.sleep(timeout)


def _shut_down(conn: psycopg.Connection) -> None:
    """Shut down ``conn``'s socket under libpq: a call blocked on it gets end-of-file at once."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except (OSError, psycopg.Error):  # closed meanwhile: nothing left to cut
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()  # the duplicate only; libpq still owns its descriptor


def translate(exc: psycopg.Error, name: str, url: str) -> LeaselabError:
    """The leaselab error for a psycopg error: it names the server and never shows the password."""
    message = _scrub(str(exc), url)
    code = getattr(exc, "sqlstate", None) or ""
    if code in _BUSY:
        return DatabaseBusy(f"{name}: a lock was held past the busy timeout ({message})")
    if code in _UNWRITABLE:
        return DatabaseUnwritable(f"{name}: cannot write the queue ({message})")
    # A refused connection arrives before any SQLSTATE: the server's FATAL line says why.
    if code in _REFUSED or (not code and _REFUSED_AT_CONNECT.search(message)):
        return ServerRefused(f"{name}: the server refused the connection ({message})")
    if code == _TOO_MANY_CLIENTS or (not code and _TOO_MANY_CLIENTS_AT_CONNECT.search(message)):
        return TooManyClients(
            f"{name}: too many clients: the server refused a new connection, every slot it allows "
            f"(max_connections) is taken ({message})"
        )
    if code == _UNIQUE_VIOLATION and getattr(getattr(exc, "diag", None), "constraint_name", None) == "jobs_key":
        return KeyHeld(f"{name}: another pending or running job holds this job's unique key ({message})")
    said = None if code else no_primary(str(exc), url)
    if said is not None:
        return NoPrimary(f"{name}: {said}")
    if code.startswith(_UNREACHABLE_CLASSES) or (not code and isinstance(exc, psycopg.OperationalError)):
        return DatabaseUnreachable(f"{name}: cannot reach the server ({message})")
    return LeaselabError(f"{name}: PostgreSQL error: {message}")


def _without_nul(params: dict, key: str, value: str) -> dict:
    """PostgreSQL text cannot hold NUL: a failure's message keeps it as the two characters ``\\0``
    (a handler's exception text must not crash the worker that records it); any other text is refused."""
    if key == "error":
        return {**params, key: value.replace("\x00", "\\0")}
    raise ValueError(f"{key} contains a NUL character (\\x00), which PostgreSQL text cannot hold: {value!r}")


# The type checker proves this class satisfies the contract (tests/test_types.py runs it).
_CONTRACT: type[Backend] = PostgresBackend
_FULL: type[FullBackend] = PostgresBackend  # with every fast path: its own, or a default from BackendDefaults
