"""``SqlBackend``: the plumbing every SQL backend shares (one connection under a lock, the tracer,
running a statement or a transaction, translating the driver's errors) and the queue operations
that are one statement in every dialect, written once over the dialect's statement module.

A dialect subclasses it, names its statements and its driver's error class, and fills in the
hooks: how to reach the connection, how to bound a call, how to ask for a synced commit, how
to begin and end a transaction, and whatever it does its own way (SQLite completes and claims in
one transaction, PostgreSQL in one statement). ``run``, ``transaction`` and ``connection`` are
this class's own escape hatches, for tests, lessons and benchmarks that must reach the engine:
they are not part of the ``Backend`` contract, and ``leaselab.queue`` never calls them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import ModuleType
from typing import Any, NamedTuple, TypeVar

from ..errors import InvalidPayload, LeaselabError
from ..job import Enqueued, Event, Job, JobRow, Status
from .contract import ByHand, Claim, Claimed, Completing, Completion, NewJob, Outcome, Tracer, Unreadable
from .defaults import BackendDefaults

Run = Callable[..., Any]  # run(statement, params) -> the driver's cursor, inside a transaction

_UNBOUNDED: AbstractContextManager[None] = nullcontext()
T = TypeVar("T")

NO_LIMIT = 2**63 - 1  # a page with no bound: the largest LIMIT both dialects take

# How many times a unique enqueue tries again when the job that held its key ended between its
# insert (refused by jobs_key) and its read of that job: each try needs another job to end just then.
UNIQUE_TRIES = 100


def claimed(rows: Iterable[Sequence[Any]]) -> list[Claimed]:
    """The jobs of claimed rows (``JOB_COLUMNS``), each one whose payload cannot be read as ``Unreadable``."""
    jobs: list[Claimed] = []
    for row in rows:
        try:
            jobs.append(Job.from_row(row))
        except InvalidPayload as exc:
            named = JobRow._make(row)
            jobs.append(Unreadable(named.id, named.token, str(exc)))
    return jobs


class Renewal(NamedTuple):
    """A row of ``HEARTBEAT_MANY``: the job and its new lease."""

    id: int
    lease_until: float


class Recorded(NamedTuple):
    """The row of ``RECORD_LEASE_LOST``: the refusal's event and the job's status."""

    event_id: int
    status: str


class Count(NamedTuple):
    """A row of ``STATS``."""

    queue: str
    status: str
    jobs: int


class Holder(NamedTuple):
    """The row of ``HOLDING_KEY``: the job that holds a key now."""

    id: int
    status: str
    queue: str


class _Undo(Exception):
    """Inside an operator's retry or cancel: a job it was named is not one it may change, so nothing is."""

    def __init__(self, refused: dict[int, str | None]):
        self.refused = refused


class _Lost(Exception):
    """Inside ``advance_schedule``: another scheduler moved the last tick first, so nothing is written."""


class _Refused(Exception):
    """Inside ``completing``: the fenced completion changed no row, so the transaction must roll back."""


class SqlRefusals:
    """``Refusals`` on a transaction's ``run``."""

    def __init__(self, run: Run, statements: ModuleType):
        self._run, self._sql = run, statements

    def outcome(self, job_id: int) -> Outcome | None:
        rows = self._run(self._sql.OUTCOME, {"id": job_id}).fetchall()
        return Outcome._make(rows[0]) if rows else None  # its fields are the statement's columns

    def failed(self, job_id: int, token: str, error: str, kind: str = "failed") -> bool:
        params = {"id": job_id, "token": token, "error": error, "kind": kind}
        (count,) = self._run(self._sql.FAILED_BY, params).fetchone()
        return count > 0

    def record(self, job_id: int, token: str, now: float, detail: str) -> str | None:
        rows = self._run(
            self._sql.RECORD_LEASE_LOST, {"id": job_id, "token": token, "now": now, "detail": detail, "after": 0}
        ).fetchall()
        if not rows:
            return None
        recorded = Recorded._make(rows[0])
        self._run(self._sql.LINK_EVENT, {"event_id": recorded.event_id, "id": job_id})
        return recorded.status


class _Transaction:
    """``SqlBackend.transaction`` where no call is bounded (SQLite): the lock, the synced commit if
    asked, the dialect's BEGIN ... COMMIT, and every driver error translated, as one plain context:
    a worker enters one per job, and a generator's context costs several calls more. A dialect that
    bounds its calls takes ``_bounded_transaction`` instead."""

    __slots__ = ("_backend", "_durable", "_conn", "_begun")

    def __init__(self, backend: SqlBackend, durable: bool):
        self._backend, self._durable = backend, durable

    def __enter__(self) -> Run:
        backend = self._backend
        backend._lock.acquire()
        try:
            conn = self._conn = backend._connection()
            backend._sync(conn, self._durable)
            begun = backend._begin(conn)
            begun.__enter__()
            self._begun = begun
        except backend.driver_error as exc:
            backend._lock.release()
            raise backend._translate(exc) from exc
        except BaseException:
            backend._lock.release()
            raise
        return self._run

    def _run(self, statement: str, params: Any = ()) -> Any:
        backend = self._backend
        if backend._adapts_params:
            params = backend._prepare(params)
        if backend.tracer is not None:
            backend.tracer(statement.strip(), params)
        return self._conn.execute(statement, params)

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        backend = self._backend
        try:
            self._begun.__exit__(kind, exc, tb)  # COMMIT, or a rollback after an error; never swallows it
        except backend.driver_error as failed:  # the COMMIT itself failed (a full disk, say)
            raise backend._translate(failed) from failed
        finally:
            backend._lock.release()
        if exc is not None and isinstance(exc, backend.driver_error):
            raise backend._translate(exc) from exc


class SqlBackend(BackendDefaults):
    """One connection, guarded by a lock so threads may share it, and the statements of one dialect."""

    statements: ModuleType
    kind: str
    driver_error: type[Exception]  # what the driver raises; translated into leaselab's errors
    backoff_params: dict[str, float] = {}  # what FAIL and REAP need besides their own parameters

    def __init__(self, name: str, tracer: Tracer | None):
        self.name = name
        self.tracer = tracer
        self._lock = threading.RLock()
        # A call pays only for the hooks its dialect fills in: SQLite bounds no call and adapts no
        # parameter, and a worker's every statement would otherwise go through both for nothing.
        dialect = type(self)
        self.bounds_calls = dialect._bounded is not SqlBackend._bounded
        self._adapts_params = dialect._prepare is not SqlBackend._prepare

    # -- the dialect's hooks (the caller holds the lock) ------------------------------------

    def _connection(self) -> Any:
        """The open driver connection."""
        raise NotImplementedError

    def _bounded(self, conn: Any) -> AbstractContextManager[None]:
        """Bound one call on ``conn`` (a watchdog, say); unbounded by default."""
        return _UNBOUNDED

    def _sync(self, conn: Any, durable: bool) -> None:
        """Make the next commit reach the disk if it is ``durable``."""
        raise NotImplementedError

    def _begin(self, conn: Any) -> AbstractContextManager[Any]:
        """The driver's transaction: committed on a clean exit, rolled back on an exception."""
        raise NotImplementedError

    def _translate(self, exc: Any) -> LeaselabError:
        """The leaselab error for one of ``driver_error``."""
        raise NotImplementedError

    def _prepare(self, params: Any) -> Any:
        """The parameters as the driver can take them (refusing what the engine cannot store)."""
        return params

    def _check_tokens(self, tokens: Iterable[str]) -> None:
        """Refuse tokens the engine cannot hold, before they travel inside a JSON array."""

    @staticmethod
    def _rows(cursor: Any) -> list[tuple]:
        """The rows a statement returned, [] for one that returns none."""
        return cursor.fetchall() if cursor.description is not None else []

    # -- plumbing -------------------------------------------------------------------------

    @property
    def connection(self) -> Any:
        """The driver's connection the queue uses: an escape hatch, not part of the contract."""
        with self._lock:
            return self._connection()

    def run(self, statement: str, params: Any = (), *, durable: bool = False) -> list[tuple]:
        """Run one statement in its own transaction and return its rows (an escape hatch, as ``connection``)."""
        return self._alone(statement, params, durable, self._rows)

    def _changed(self, statement: str, params: Any, durable: bool) -> int:
        """Run one statement in its own transaction; how many rows it changed (not its triggers)."""
        return self._alone(statement, params, durable, _rowcount)

    def _alone(self, statement: str, params: Any, durable: bool, read: Callable[[Any], T]) -> T:
        """Run one statement in its own transaction, traced, bounded and translated; ``read(cursor)``."""
        if self._adapts_params:
            params = self._prepare(params)
        if self.tracer is not None:
            self.tracer(statement.strip(), params)
        with self._lock:
            conn = self._connection()
            try:
                if not self.bounds_calls:
                    self._sync(conn, durable)
                    return read(conn.execute(statement, params))
                with self._bounded(conn):
                    self._sync(conn, durable)
                    return read(conn.execute(statement, params))
            except self.driver_error as exc:
                raise self._translate(exc) from exc

    def transaction(self, durable: bool) -> AbstractContextManager[Run]:
        """One transaction under the lock; yields run(statement, params) -> the driver's cursor."""
        if self.bounds_calls:
            return self._bounded_transaction(durable)
        return _Transaction(self, durable)

    @contextmanager
    def _bounded_transaction(self, durable: bool) -> Iterator[Run]:
        """``transaction`` on a dialect that bounds its calls: the bound wraps the whole transaction,
        so it sees every error of it first (a call it cut, on PostgreSQL)."""

        def run(statement: str, params: Any = ()) -> Any:
            if self._adapts_params:
                params = self._prepare(params)
            if self.tracer is not None:
                self.tracer(statement.strip(), params)
            return conn.execute(statement, params)

        with self._lock:
            conn = self._connection()
            try:
                with self._bounded(conn):
                    self._sync(conn, durable)
                    with self._begin(conn):
                        yield run
            except self.driver_error as exc:
                raise self._translate(exc) from exc

    # -- the operations that are one statement in every dialect ----------------------------

    def enqueue(self, job: NewJob, now: float, *, durable: bool) -> int:
        ((job_id,),) = self.run(self.statements.ENQUEUE, _enqueued(job, now), durable=durable)  # RETURNING id
        return job_id

    def enqueue_unique(self, job: NewJob, now: float, *, durable: bool) -> Enqueued:
        params = _enqueued(job, now)
        for _ in range(UNIQUE_TRIES):
            with self.transaction(durable) as run:
                made = run(self.statements.ENQUEUE_UNIQUE, params).fetchone()  # RETURNING id; None: refused
                if made is not None:
                    return Enqueued(made[0], True, Status.PENDING.value, job.key or "", job.queue)
                held = run(self.statements.HOLDING_KEY, {"key": job.key}).fetchone()
                if held is not None:
                    holder = Holder._make(held)
                    return Enqueued(holder.id, False, holder.status, job.key or "", holder.queue)
        raise LeaselabError(f"key {job.key!r}: its jobs kept ending as it was enqueued, {UNIQUE_TRIES} times")

    def schedule_last(self, name: str) -> float | None:
        rows = self.run(self.statements.SCHEDULE_LAST, {"name": name})
        return rows[0][0] if rows else None

    def advance_schedule(
        self, name: str, last: float | None, tick: float, jobs: Sequence[NewJob], now: float, *, durable: bool
    ) -> list[int] | None:
        try:
            with self.transaction(durable) as run:
                if last is None:
                    moved = run(self.statements.SCHEDULE_START, {"name": name, "tick": tick}).rowcount
                else:
                    moved = run(self.statements.SCHEDULE_ADVANCE, {"name": name, "tick": tick, "last": last}).rowcount
                if not moved:
                    raise _Lost
                # ENQUEUE_UNIQUE: a tick's key held by a job someone enqueued by hand is left to that job.
                made = [run(self.statements.ENQUEUE_UNIQUE, _enqueued(job, now)).fetchone() for job in jobs]
                return [row[0] for row in made if row is not None]
        except _Lost:
            return None

    def enqueue_many(self, jobs: Sequence[NewJob], now: float, *, durable: bool) -> list[int]:
        with self.transaction(durable) as run:
            return self._ids_of_each(run, self.statements.ENQUEUE, [_enqueued(job, now) for job in jobs])

    def _ids_of_each(self, run: Run, statement: str, each: list[dict[str, Any]]) -> list[int]:
        """Inside an open transaction, ``statement`` once per parameter set; the id each one returned."""
        return [job_id for params in each for (job_id,) in [run(statement, params).fetchone()]]

    def claim(self, claim: Claim, *, durable: bool) -> Claimed | None:
        statement = self.statements.CLAIM if len(claim.queues) == 1 else self.statements.CLAIM_SEVERAL
        rows = self.run(statement, claiming(claim), durable=durable)
        return claimed(rows)[0] if rows else None

    def claim_many(self, n: int, claim: Claim, *, durable: bool) -> list[Claimed]:
        return claimed(self.run(self._claim_many_statement(n, claim), {**claiming(claim), "n": n}, durable=durable))

    def _claim_many_statement(self, n: int, claim: Claim) -> str:
        """The statement that claims up to ``n`` jobs from ``claim.queues``: ``CLAIM_MANY`` (``CLAIM_MANY_SEVERAL``
        for several queues), unless the dialect has a cheaper one for that ``n`` (the same rows and tokens)."""
        return self.statements.CLAIM_MANY if len(claim.queues) == 1 else self.statements.CLAIM_MANY_SEVERAL

    def held_by(self, token: str) -> list[Claimed]:
        return claimed(self.run(self.statements.HELD_BY, {"token": token}))

    def heartbeat(self, job_id: int, token: str, lease: float, now: float | None) -> float | None:
        rows = self.run(self.statements.HEARTBEAT, {"id": job_id, "token": token, "now": now, "lease": lease})
        for (lease_until,) in rows:  # RETURNING lease_until: one row, or none if fenced off
            return lease_until
        return None

    def heartbeat_many(self, tokens: Sequence[str], lease: float, now: float | None) -> dict[int, float]:
        self._check_tokens(tokens)
        rows = self.run(
            self.statements.HEARTBEAT_MANY, {"tokens": json.dumps(list(tokens)), "now": now, "lease": lease}
        )
        return {renewal.id: renewal.lease_until for renewal in map(Renewal._make, rows)}

    def complete(self, done: Completion, now: float, *, durable: bool) -> bool:
        return self._changed(self.statements.COMPLETE, _completing(done, now), durable) > 0

    @contextmanager
    def completing(self, done: Completion, now: Callable[[], float], *, durable: bool) -> Iterator[Completing]:
        try:
            with self.transaction(durable) as run:
                handle = Completing(self._connection())
                yield handle
                handle.now = now()
                if not run(self.statements.COMPLETE, _completing(done, handle.now)).rowcount:
                    raise _Refused  # rolls the caller's statements back with the refused completion
                handle.completed = True
        except _Refused:
            pass

    def fail(self, job_id: int, token: str, error: str, now: float, kind: str = "failed") -> str | None:
        params = {"id": job_id, "token": token, "error": error, "now": now, "kind": kind, **self.backoff_params}
        rows = self.run(self.statements.FAIL, params)
        for (status,) in rows:  # RETURNING status: one row, or none if fenced off
            return status
        return None

    def release(self, tokens: Sequence[str], now: float) -> dict[int, str]:
        self._check_tokens(tokens)
        rows = self.run(self.statements.RELEASE, {"tokens": json.dumps(list(tokens)), "now": now})
        return {job_id: status for job_id, status in rows}  # RETURNING id, status

    def retry(
        self, ids: Sequence[int] | None, fresh: int, now: float, *, durable: bool, queue: str | None = None
    ) -> ByHand:
        if ids is None:
            rows = self.run(self.statements.RETRY_DEAD, {"fresh": fresh, "now": now, "queue": queue}, durable=durable)
            return ByHand([job_id for (job_id,) in rows], {})  # RETURNING id
        return self._by_hand(self.statements.RETRY, {"fresh": fresh, "now": now}, ids, durable)

    def cancel(self, ids: Sequence[int], reason: str, now: float, *, durable: bool) -> ByHand:
        return self._by_hand(self.statements.CANCEL, {"reason": reason, "now": now}, ids, durable)

    def _by_hand(self, statement: str, params: dict[str, Any], ids: Sequence[int], durable: bool) -> ByHand:
        """``statement`` over the jobs in ``ids``, in one transaction rolled back unless it changed every one."""
        listed = {"ids": json.dumps(list(ids))}
        try:
            with self.transaction(durable) as run:
                changed = [job_id for (job_id,) in run(statement, {**params, **listed}).fetchall()]
                missed = set(ids) - set(changed)
                if missed:
                    found = dict(run(self.statements.STATUSES, {"ids": json.dumps(sorted(missed))}).fetchall())
                    raise _Undo({job_id: found.get(job_id) for job_id in sorted(missed)})
                return ByHand(changed, {})
        except _Undo as undo:
            return ByHand([], undo.refused)

    def reap(self, now: float, keep: Sequence[str]) -> list[int]:
        self._check_tokens(keep)
        rows = self.run(self.statements.REAP, {"now": now, "keep": json.dumps(list(keep)), **self.backoff_params})
        return [job_id for (job_id,) in rows]  # RETURNING id

    @contextmanager
    def refusals(self) -> Iterator[SqlRefusals]:
        with self.transaction(durable=False) as run:
            yield SqlRefusals(run, self.statements)

    def get(self, job_id: int) -> Job | None:
        rows = self.run(self.statements.GET, {"id": job_id})
        return Job.from_row(rows[0]) if rows else None  # JOB_COLUMNS, named by Job.from_row

    def jobs(
        self, status: Status | None, limit: int, newest_first: bool, after: int = 0, queue: str | None = None
    ) -> list[Job]:
        sql = self.statements
        page = {"limit": limit, "after": after, "queue": queue}
        if status is None:
            rows = self.run(sql.LIST_JOBS_NEWEST if newest_first else sql.LIST_JOBS, page)
        else:
            rows = self.run(
                sql.LIST_JOBS_BY_STATUS_NEWEST if newest_first else sql.LIST_JOBS_BY_STATUS,
                {"status": status.value, **page},
            )
        return [Job.from_row_or_damaged(row) for row in rows]

    def stats(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for count in map(Count._make, self.run(self.statements.STATS)):
            counts.setdefault(count.queue, {})[count.status] = count.jobs
        return counts

    def events(self, job_id: int | None, after: int, limit: int | None = None) -> list[Event]:
        page = {"after": after, "limit": NO_LIMIT if limit is None else limit}
        if job_id is None:
            rows = self.run(self.statements.EVENTS, page)
        else:
            rows = self.run(self.statements.EVENTS_FOR_JOB, {"id": job_id, **page})
        return [Event.from_row(row) for row in rows]

    def next_run_at(self) -> float | None:
        ((run_at,),) = self.run(self.statements.NEXT_RUN_AT)  # SELECT min(run_at): one row, None if none pending
        return run_at


def _enqueued(job: NewJob, now: float) -> dict[str, Any]:
    return {
        "payload": job.payload,
        "priority": job.priority,
        "run_at": job.run_at,
        "max_attempts": job.max_attempts,
        "timeout": job.timeout,
        "beat_timeout": job.beat_timeout,
        "queue": job.queue,
        "key": job.key,
        "now": now,
    }


def serving(queues: Sequence[str]) -> dict[str, Any]:
    """The parameters that say which queues a claim serves: :queue for one (``SERVES_ONE``), :queues (a JSON
    array) for several (each dialect's ``SERVES_SEVERAL``)."""
    return {"queue": queues[0]} if len(queues) == 1 else {"queues": json.dumps(list(queues))}


def claiming(claim: Claim) -> dict[str, Any]:
    """The parameters of a claim statement (not its :n), from ``claim``."""
    worker, token, now, lease_until, queues = claim
    if len(queues) == 1:  # a worker's every claim, one queue: one dict, built in one step
        return {"now": now, "lease_until": lease_until, "worker": worker, "token": token, "queue": queues[0]}
    return {"now": now, "lease_until": lease_until, "worker": worker, "token": token, **serving(queues)}


def _completing(done: Completion, now: float) -> dict[str, Any]:
    return {"id": done.id, "token": done.token, "result": done.result, "now": now}


def _rowcount(cursor: Any) -> int:
    return cursor.rowcount
