"""A backend that writes only what the contract requires (``leaselab.backends.contract.Backend``), on
SQLite through the standard library's ``sqlite3``: the proof that a new backend needs no fast path.

It reuses the SQLite backend's schema and statements (``prepare``, ``statements``), and nothing of
``SqlBackend``: one connection under a lock, ``BEGIN IMMEDIATE`` ... ``COMMIT`` around each operation,
rows read by name (``sqlite3.Row``). Every fused operation (complete-and-claim, the batches, waiting
for work) is ``BackendDefaults``', built from these. ``register()`` makes ``minimal:<path>`` targets
open it, so the contract suite runs on it as on any other backend (tests/conftest.py).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from leaselab.backends import register_backend
from leaselab.backends.contract import (
    Backend,
    ByHand,
    Claim,
    Claimed,
    Completing,
    Completion,
    NewJob,
    Outcome,
    Tracer,
    Unreadable,
)
from leaselab.backends.defaults import BackendDefaults
from leaselab.backends.sqlite import statements as sql
from leaselab.backends.sqlite.backend import prepare, translate
from leaselab.backoff import Backoff
from leaselab.errors import DatabaseMissing, InvalidPayload
from leaselab.job import Enqueued, Event, Job, Status

SCHEME = "minimal"


class _Refused(Exception):
    """Inside ``completing``: the completion changed no row, so the caller's block rolls back with it."""


class _Undone(Exception):
    """Inside a retry or cancel: a job named is not one it may change, so the whole call rolls back."""

    def __init__(self, refused: dict[int, str | None]):
        self.refused = refused


class MinimalBackend(BackendDefaults):
    """The required operations only, one transaction each."""

    kind = "sqlite"
    statements = sql  # which statements it runs (the tests' tracer looks them up); not a contract member
    clock = None  # the queue's clock
    call_timeout: float | None = None  # no server to wait for
    bounds_calls = False  # so call_timeout is kept and ignored

    def __init__(self, path: str, *, busy_timeout: float, backoff: Backoff, tracer: Tracer | None, create: bool):
        if not create and not Path(path).exists():
            raise DatabaseMissing(path)
        self.name, self.path, self.tracer = path, path, tracer
        self._lock = threading.RLock()
        try:
            conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise translate(exc, path) from exc
        self._conn = prepare(conn, path, busy_timeout, lambda exc: translate(exc, path))
        self._conn.create_function("leaselab_backoff", 1, backoff.delay)

    def use_clock(self, clock: Callable[[], float]) -> None:
        self._conn.create_function("leaselab_now", 0, lambda: float(clock()))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _transaction(self, durable: bool = False) -> Iterator[Callable[..., sqlite3.Cursor]]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` under the lock, synced if ``durable``; yields run(statement, params)."""

        def run(statement: str, params: Any = ()) -> sqlite3.Cursor:
            if self.tracer is not None:
                self.tracer(statement.strip(), params)
            cursor = self._conn.cursor()
            cursor.row_factory = sqlite3.Row  # the queue's statements only: the caller's keep plain tuples
            return cursor.execute(statement, params)

        with self._lock:
            try:
                self._conn.execute("PRAGMA synchronous = FULL" if durable else "PRAGMA synchronous = NORMAL")
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield run
                except BaseException:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise translate(exc, self.path) from exc

    # The escape hatches the SQL backends offer tests and lessons (not contract members).
    transaction = _transaction

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    def _rows(self, statement: str, params: Any = (), durable: bool = False) -> list[sqlite3.Row]:
        with self._transaction(durable) as run:
            return run(statement, params).fetchall()

    # -- writes ---------------------------------------------------------------

    def enqueue(self, job: NewJob, now: float, *, durable: bool) -> int:
        (row,) = self._rows(sql.ENQUEUE, {**job._asdict(), "now": now}, durable)
        return row["id"]

    def schedule_last(self, name: str) -> float | None:
        rows = self._rows(sql.SCHEDULE_LAST, {"name": name})
        return rows[0]["last_tick"] if rows else None

    def advance_schedule(
        self, name: str, last: float | None, tick: float, jobs: Sequence[NewJob], now: float, *, durable: bool
    ) -> list[int] | None:
        # One transaction holds the file's write lock: the compare-and-set and the enqueues go together.
        with self._transaction(durable) as run:
            if last is None:
                moved = run(sql.SCHEDULE_START, {"name": name, "tick": tick}).rowcount
            else:
                moved = run(sql.SCHEDULE_ADVANCE, {"name": name, "tick": tick, "last": last}).rowcount
            if not moved:
                return None  # nothing was written: the commit ends an empty transaction
            made = [run(sql.ENQUEUE_UNIQUE, {**job._asdict(), "now": now}).fetchone() for job in jobs]
            return [row["id"] for row in made if row is not None]

    def enqueue_unique(self, job: NewJob, now: float, *, durable: bool) -> Enqueued:
        # One transaction holds the file's write lock: no other enqueue can come between the two.
        with self._transaction(durable) as run:
            made = run(sql.ENQUEUE_UNIQUE, {**job._asdict(), "now": now}).fetchone()
            if made is not None:
                return Enqueued(made["id"], True, "pending", job.key or "", job.queue)
            held = run(sql.HOLDING_KEY, {"key": job.key}).fetchone()
            return Enqueued(held["id"], False, held["status"], job.key or "", held["queue"])

    def claim(self, claim: Claim, *, durable: bool) -> Claimed | None:
        one = len(claim.queues) == 1
        rows = self._rows(sql.CLAIM if one else sql.CLAIM_SEVERAL, _claiming(claim), durable)
        return _claimed(rows[0]) if rows else None

    def claim_many(self, n: int, claim: Claim, *, durable: bool) -> list[Claimed]:
        statement = sql.CLAIM_MANY if len(claim.queues) == 1 else sql.CLAIM_MANY_SEVERAL
        return [_claimed(row) for row in self._rows(statement, {**_claiming(claim), "n": n}, durable)]

    def heartbeat(self, job_id: int, token: str, lease: float, now: float | None) -> float | None:
        rows = self._rows(sql.HEARTBEAT, {"id": job_id, "token": token, "lease": lease})
        return rows[0]["lease_until"] if rows else None

    def complete(self, done: Completion, now: float, *, durable: bool) -> bool:
        with self._transaction(durable) as run:
            return run(sql.COMPLETE, {**done._asdict(), "now": now}).rowcount > 0

    @contextmanager
    def completing(self, done: Completion, now: Callable[[], float], *, durable: bool) -> Iterator[Completing]:
        handle = Completing(self._conn)
        try:
            with self._transaction(durable) as run:
                yield handle
                handle.now = now()
                if not run(sql.COMPLETE, {**done._asdict(), "now": handle.now}).rowcount:
                    raise _Refused
                handle.completed = True
        except _Refused:
            pass

    def fail(self, job_id: int, token: str, error: str, now: float, kind: str = "failed") -> str | None:
        rows = self._rows(sql.FAIL, {"id": job_id, "token": token, "error": error, "now": now, "kind": kind})
        return rows[0]["status"] if rows else None

    def release(self, tokens: Sequence[str], now: float) -> dict[int, str]:
        return {
            row["id"]: row["status"]
            for row in self._rows(sql.RELEASE, {"tokens": json.dumps(list(tokens)), "now": now})
        }

    def retry(
        self, ids: Sequence[int] | None, fresh: int, now: float, *, durable: bool, queue: str | None = None
    ) -> ByHand:
        if ids is None:
            params = {"fresh": fresh, "now": now, "queue": queue}
            return ByHand([row["id"] for row in self._rows(sql.RETRY_DEAD, params, durable)], {})
        return self._by_hand(sql.RETRY, {"fresh": fresh, "now": now}, ids, durable)

    def cancel(self, ids: Sequence[int], reason: str, now: float, *, durable: bool) -> ByHand:
        return self._by_hand(sql.CANCEL, {"reason": reason, "now": now}, ids, durable)

    def _by_hand(self, statement: str, params: dict[str, Any], ids: Sequence[int], durable: bool) -> ByHand:
        """One transaction, rolled back unless ``statement`` changed every job in ``ids``."""
        try:
            with self._transaction(durable) as run:
                changed = [row["id"] for row in run(statement, {**params, "ids": json.dumps(list(ids))})]
                missed = sorted(set(ids) - set(changed))
                if missed:
                    found = {row["id"]: row["status"] for row in run(sql.STATUSES, {"ids": json.dumps(missed)})}
                    raise _Undone({job_id: found.get(job_id) for job_id in missed})
                return ByHand(changed, {})
        except _Undone as undone:
            return ByHand([], undone.refused)

    def reap(self, now: float, keep: Sequence[str]) -> list[int]:
        return [row["id"] for row in self._rows(sql.REAP, {"now": now, "keep": json.dumps(list(keep))})]

    @contextmanager
    def refusals(self) -> Iterator[_Refusals]:
        with self._transaction() as run:
            yield _Refusals(run)

    # -- reads ----------------------------------------------------------------

    def held_by(self, token: str) -> list[Claimed]:
        return [_claimed(row) for row in self._rows(sql.HELD_BY, {"token": token})]

    def get(self, job_id: int) -> Job | None:
        rows = self._rows(sql.GET, {"id": job_id})
        return Job.from_row(rows[0]) if rows else None

    def jobs(
        self, status: Status | None, limit: int, newest_first: bool, after: int = 0, queue: str | None = None
    ) -> list[Job]:
        page = {"limit": limit, "after": after, "queue": queue}
        if status is None:
            statement = sql.LIST_JOBS_NEWEST if newest_first else sql.LIST_JOBS
            rows = self._rows(statement, page)
        else:
            statement = sql.LIST_JOBS_BY_STATUS_NEWEST if newest_first else sql.LIST_JOBS_BY_STATUS
            rows = self._rows(statement, {"status": status.value, **page})
        return [Job.from_row_or_damaged(row) for row in rows]

    def stats(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for row in self._rows(sql.STATS):
            counts.setdefault(row["queue"], {})[row["status"]] = row["count(*)"]
        return counts

    def events(self, job_id: int | None, after: int, limit: int | None = None) -> list[Event]:
        page = {"after": after, "limit": -1 if limit is None else limit}  # SQLite: a negative LIMIT is none
        if job_id is None:
            rows = self._rows(sql.EVENTS, page)
        else:
            rows = self._rows(sql.EVENTS_FOR_JOB, {"id": job_id, **page})
        return [Event(**{key: row[key] for key in row.keys()}) for row in rows]

    def next_run_at(self) -> float | None:
        return self._rows(sql.NEXT_RUN_AT)[0]["min(run_at)"]


class _Refusals:
    """``Refusals`` inside one of the backend's transactions."""

    def __init__(self, run: Callable[..., sqlite3.Cursor]):
        self._run = run

    def outcome(self, job_id: int) -> Outcome | None:
        row = self._run(sql.OUTCOME, {"id": job_id}).fetchone()
        return None if row is None else Outcome(**{key: row[key] for key in Outcome._fields})

    def failed(self, job_id: int, token: str, error: str, kind: str = "failed") -> bool:
        params = {"id": job_id, "token": token, "error": error, "kind": kind}
        return self._run(sql.FAILED_BY, params).fetchone()[0] > 0

    def record(self, job_id: int, token: str, now: float, detail: str) -> str | None:
        params = {"id": job_id, "token": token, "now": now, "detail": detail, "after": 0}
        row = self._run(sql.RECORD_LEASE_LOST, params).fetchone()
        if row is None:
            return None
        event_id, status = row  # RETURNING id, (SELECT status ...): the second column has no name
        self._run(sql.LINK_EVENT, {"event_id": event_id, "id": job_id})
        return status


def _claimed(row: sqlite3.Row) -> Claimed:
    try:
        return Job.from_row(row)
    except InvalidPayload as exc:
        return Unreadable(row["id"], row["token"], str(exc))


def open_minimal(target: str, **options: Any) -> MinimalBackend:
    return MinimalBackend(target.removeprefix(f"{SCHEME}:"), **options)


def register() -> None:
    """``minimal:<path>`` opens a ``MinimalBackend`` on that file."""
    register_backend(SCHEME, open_minimal)


# The type checker proves it meets the required contract, and nothing more is asked (tests/test_types.py).
_CONTRACT: type[Backend] = MinimalBackend


def _claiming(claim: Claim) -> dict[str, Any]:
    """A claim's parameters: :queue for one queue, :queues (a JSON array) for several."""
    served = {"queue": claim.queues[0]} if len(claim.queues) == 1 else {"queues": json.dumps(list(claim.queues))}
    return {"worker": claim.worker, "token": claim.token, "now": claim.now, "lease_until": claim.lease_until, **served}
