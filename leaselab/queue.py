"""The queue: a single-statement claim, leases, fencing tokens and a reaper, on any backend.

This module holds the queue's logic once. The SQL dialect, the connection and the
translation of driver errors live in ``leaselab.backends``.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from .backends import is_server_url, open_backend  # is_server_url: public here for the lab
from .backoff import Backoff
from .checks import integer, number, positive, text
from .clock import Clock, system_clock
from .errors import InvalidPayload, JobNotFound, LeaseLost
from .job import MAX_JSON_DEPTH, Event, Job, Status, check_json_depth

DEFAULT_LEASE = 30.0
DEFAULT_MAX_PAYLOAD = 1_000_000
DURABILITIES = ("full", "normal")

Tracer = Callable[[str, Any], None]

# Strict JSON: NaN and Infinity are not JSON, and other languages' parsers reject them.
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


class Queue:
    """A job queue in one SQLite file, or in a PostgreSQL database given by a ``postgresql://`` URL;
    safe to share between threads and processes.

    ``clock`` is a callable returning unix seconds (a ``ManualClock`` in tests and lessons).
    Without one, a file queue uses ``time.time`` and a PostgreSQL queue the server's clock,
    so workers on hosts whose clocks disagree still agree on every lease. ``durability="full"`` makes every
    acknowledged enqueue and completion, and every claim, reach the disk before the call returns: a
    claim's fence (its attempt and token) is what outside stores trust, so a crash must never hand it
    out twice. Heartbeats, failures and reaps ride on the next sync, because losing one to a crash
    only causes a retry. ``"normal"`` syncs nothing: on SQLite it survives any process crash but may
    lose the last transactions on power loss; on PostgreSQL (``synchronous_commit`` off) a server
    crash may lose the last acknowledged commits and hand a claim's fence out again. On PostgreSQL
    ``busy_timeout`` bounds the wait for another transaction's lock (``lock_timeout``) and for the
    connection.
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
        create: bool = True,
    ):
        if durability not in DURABILITIES:
            raise ValueError(f"durability must be 'full' or 'normal', got {durability!r}")
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning unix seconds, got {clock!r}")
        if backoff is not None and not isinstance(backoff, Backoff):
            raise TypeError(f"backoff must be a leaselab.Backoff, got {backoff!r}")
        self.path = os.fspath(path)
        self.durability = durability
        self.backoff = backoff or Backoff()
        self.max_payload_bytes = integer("max_payload_bytes", max_payload_bytes, 1)
        # Acknowledged writes (enqueues, completions) sync to disk at "full"; the rest never
        # wait for a sync, because losing one to a power cut only causes a retry.
        self._acknowledged = durability == "full"
        self.backend = open_backend(self.path, busy_timeout=positive("busy_timeout", busy_timeout),
                                    backoff=self.backoff, tracer=tracer, create=create)
        self.clock: Clock = clock or self.backend.clock or system_clock
        self.backend.use_clock(self.clock)
        self._sql = self.backend.statements
        self._run = self.backend.run
        self._changed = self.backend.changed

    @property
    def tracer(self) -> Tracer | None:
        """Called with (statement, params) before each statement runs; None for no tracing."""
        return self.backend.tracer

    @tracer.setter
    def tracer(self, tracer: Tracer | None) -> None:
        if tracer is not None and not callable(tracer):
            raise TypeError(f"tracer must be a callable taking (statement, params), got {tracer!r}")
        self.backend.tracer = tracer

    @property
    def call_timeout(self) -> float | None:
        """The longest one call may wait for a server that does not answer, in seconds (None: no bound).

        On PostgreSQL such a call raises ``DatabaseUnreachable`` and the next one reconnects;
        a worker sets it below its lease. A file queue ignores it: its busy timeout bounds every wait.
        """
        return self.backend.call_timeout

    @call_timeout.setter
    def call_timeout(self, seconds: float | None) -> None:
        self.backend.call_timeout = None if seconds is None else positive("call_timeout", seconds)

    # -- life cycle -------------------------------------------------------

    def close(self) -> None:
        """Close the connection. The file stays; open it again with a new ``Queue``."""
        self.backend.close()

    def wait_for_work(self, timeout: float, stop: threading.Event | None = None) -> None:
        """Block until a job may have arrived, ``stop`` is set, or ``timeout`` seconds pass: an idle worker's sleep.

        A file queue just sleeps; a PostgreSQL queue wakes as soon as a job is enqueued into a queue
        where no runnable job was waiting (LISTEN/NOTIFY; with one waiting, the workers are not idle).
        """
        self.backend.wait_for_work(positive("timeout", timeout), stop)

    def __enter__(self) -> "Queue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Queue({self.backend.name!r}, durability={self.durability!r})"

    # -- the statements ---------------------------------------------------

    def _now(self) -> float:
        return number("clock()", self.clock())

    def _json(self, what: str, value: Any) -> str:
        try:
            text = _ENCODER.encode(value)
        except (TypeError, ValueError) as exc:
            raise InvalidPayload(f"{what} must be JSON: numbers, strings, true/false/null, arrays and objects "
                                 f"(no NaN or Infinity, no sets, no Python objects): {exc}") from None
        except RecursionError:  # nested past the interpreter's limit, so far past ours too
            raise InvalidPayload(f"{what} nests arrays or objects more than {MAX_JSON_DEPTH} deep") from None
        check_json_depth(what, text)
        size = len(text.encode("utf-8"))
        if size > self.max_payload_bytes:
            raise InvalidPayload(f"{what} is {size} bytes of JSON; the limit is {self.max_payload_bytes}")
        return text

    def _enqueue_params(self, payload, priority, delay, run_at, max_attempts, now) -> dict:
        params = {
            "payload": self._json("payload", payload),
            "priority": integer("priority", priority),
            "max_attempts": integer("max_attempts", max_attempts, 1),
            "now": now,
        }
        delay = number("delay", delay)
        if delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {delay!r}")
        params["run_at"] = now + delay if run_at is None else number("run_at", run_at)
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
        return self._run(self._sql.ENQUEUE, params, durable=self._acknowledged)[0][0]

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
        with self.backend.transaction(durable=self._acknowledged) as run:
            ids = [run(self._sql.ENQUEUE, row).fetchone()[0] for row in rows]
        return ids

    def claim(self, worker: str = "worker", lease: float = DEFAULT_LEASE, *, token: str | None = None) -> Job | None:
        """Take the next runnable job and lease it to ``worker`` for ``lease`` seconds, or return None.

        ``token`` is the claim's fence token (a fresh random one if None). A caller that makes its
        own can find the job with ``held_by(token)`` if the reply to this call never arrives.
        At ``durability="full"`` the claim is on disk before this returns.
        """
        worker = text("worker", worker)
        lease = positive("lease", lease)
        token = new_token() if token is None else _token("token", token)
        now = self._now()
        rows = self._run(self._sql.CLAIM, {"now": now, "lease_until": now + lease, "worker": worker, "token": token},
                         durable=self._acknowledged)
        return self._claimed(rows, token)

    def held_by(self, token: str) -> list[Job]:
        """The running jobs that the claim made with ``token`` still holds, in claim order.

        After a claim whose reply never came (a dropped connection), this tells whether it went
        through: the tokens are the caller's own (``claim(token=...)``, ``claim_many(token=...)``).
        """
        rows = self._run(self._sql.HELD_BY, {"token": _token("token", token)})
        return self._claimed_many(rows)

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

        "Now" is when the database applies the renewal, not when it was asked for: a beat that
        waited on a lock still gets a whole lease. Works while ``token`` still holds the job,
        even past ``lease_until`` if no one has reaped or re-claimed it yet. Raises ``LeaseLost``
        otherwise.
        """
        job_id, token = self._fence_args(job_id, token)
        lease = positive("lease", lease)
        rows, now = self._renew(self._sql.HEARTBEAT, {"id": job_id, "token": token}, lease)
        if not rows:
            self._lease_lost(job_id, token, now, "heartbeat")
        return rows[0][0]

    def _renew(self, statement: str, params: dict, lease: float) -> tuple[list[tuple], float]:
        """Run a lease renewal, one statement that reads "now" once it holds its locks: SQLite's
        ``leaselab_now()`` (this queue's clock), or the server's clock when the queue keeps none of
        its own. Returns (rows, the time to date a refusal with).

        One statement, not a transaction around it: a worker frozen (``SIGSTOP``) between a
        ``BEGIN`` and its ``COMMIT`` would hold a file's one write lock, and stop every other worker.
        """
        now = None if self.clock is self.backend.clock else self._now()
        rows = self._run(statement, {**params, "now": now, "lease": lease})
        return rows, self._now() if now is None else now

    def complete(self, job_id: int, token: str, result: Any = None) -> None:
        """Mark the job done with a JSON ``result``; ``LeaseLost`` if ``token`` no longer holds it.

        Safe to retry after a reply that never came: a job already done under this same token
        is this completion having gone through, and the call returns as if it had just done it.
        """
        job_id, token = self._fence_args(job_id, token)
        params = {"id": job_id, "token": token, "result": self._json("result", result), "now": self._now()}
        if not self._changed(self._sql.COMPLETE, params, durable=self._acknowledged):
            self._lease_lost(job_id, token, params["now"], "complete", params["result"])

    def complete_and_claim(
        self, job_id: int, token: str, result: Any = None, worker: str = "worker", lease: float = DEFAULT_LEASE,
        *, next_token: str | None = None,
    ) -> Job | None:
        """Complete one job and claim the next in one transaction: a worker's hot path.

        Fenced exactly like ``complete``: if ``token`` no longer holds the job, the
        refusal is recorded, nothing is claimed and ``LeaseLost`` is raised. One
        commit instead of two, and with ``durability="full"`` still one sync per job;
        on PostgreSQL one statement, so one round trip to the server.
        Returns None when nothing is runnable, or when the next job's stored payload was
        damaged (that attempt is failed with the reason, as ``claim`` does).

        Retried with the same ``next_token`` after a reply that never came, it neither completes
        twice nor leaves the first try's claim orphaned: a job already done under ``token`` is
        this completion having gone through, and the job claimed then is found by ``next_token``.
        """
        job_id, token = self._fence_args(job_id, token)
        worker = text("worker", worker)
        lease = positive("lease", lease)
        next_token = new_token() if next_token is None else _token("next_token", next_token)
        now = self._now()
        done = {"id": job_id, "token": token, "result": self._json("result", result), "now": now}
        if self._sql.COMPLETE_AND_CLAIM is not None:  # a server: both in one statement, one round trip
            (completed, *claimed), = self._run(self._sql.COMPLETE_AND_CLAIM, {
                **done, "lease_until": now + lease, "worker": worker, "next_token": next_token},
                durable=self._acknowledged)
            if not completed:
                self._lease_lost(job_id, token, now, "complete", done["result"])
                return next(iter(self.held_by(next_token)), None)  # went through before: its claim, if any
            rows = [] if claimed[0] is None else [tuple(claimed)]
        else:
            rows = self._complete_then_claim(done, worker, lease, next_token)
        try:
            return self._claimed(rows, next_token)
        except InvalidPayload:
            return None  # the completion stands; the damaged next job was failed with the reason

    def _complete_then_claim(self, done: dict, worker: str, lease: float, next_token: str) -> list[tuple]:
        """COMPLETE, then (only if it changed the job) CLAIM, in one transaction; the claimed rows."""
        job_id, token, now = done["id"], done["token"], done["now"]
        with self.backend.transaction(durable=self._acknowledged) as run:
            if run(self._sql.COMPLETE, done).rowcount:
                return run(self._sql.CLAIM, {"now": now, "lease_until": now + lease, "worker": worker,
                                             "token": next_token}).fetchall()
        self._lease_lost(job_id, token, now, "complete", done["result"])
        return self._run(self._sql.HELD_BY, {"token": next_token})  # it went through before: its claim, if any

    @contextmanager
    def completing(self, job: Job, result: Any = None) -> Iterator[Any]:
        """One transaction: your own statements, then ``job``'s fenced completion, committed together.

        Yields the backend's connection inside the transaction; run the job's side effects
        on it (``tx.execute(...)``) and they commit with the completion or not at all. If
        the job's token no longer holds it, everything is rolled back, the refusal is
        recorded in the job's history and ``LeaseLost`` is raised; if the block raises,
        nothing is written and the job stays running. Keep the block short: it holds the
        database's write lock (on SQLite, the one writer of the whole file) while it runs.
        """
        if not isinstance(job, Job):
            raise TypeError(f"job must be a leaselab.Job from a claim, got {job!r}")
        job_id, token = self._fence_args(job.id, job.token)
        params = {"id": job_id, "token": token, "result": self._json("result", result)}
        try:
            with self.backend.transaction(durable=self._acknowledged) as run:
                yield self.backend.connection
                params["now"] = self._now()
                if not run(self._sql.COMPLETE, params).rowcount:
                    raise _Refused  # rolls the caller's statements back with the refused completion
        except _Refused:
            self._lease_lost(job_id, token, params["now"], "complete", went_through=False)

    def fail(self, job_id: int, token: str, error: str = "failed") -> Status:
        """Record a failed attempt and return the new status: ``pending`` (after backoff) or ``dead``.

        Safe to retry after a reply that never came: a job this token already failed is answered
        with its status, not with ``LeaseLost``.
        """
        job_id, token = self._fence_args(job_id, token)
        if not isinstance(error, str):
            raise TypeError(f"error must be a str, got {error!r}")
        now = self._now()
        error = error[:10_000]
        rows = self._run(self._sql.FAIL, {"id": job_id, "token": token, "error": error, "now": now})
        if not rows:
            return Status(self._lease_lost(job_id, token, now, "fail", error))
        return Status(rows[0][0])

    def reap(self, keep: Iterable[str] = ()) -> list[int]:
        """Return every running job whose lease has expired to pending (with backoff) or to dead.

        Returns the ids it moved. A job whose holder is merely late but not yet
        reaped can still be heartbeated or completed by that holder. ``keep`` are tokens
        not to reap: a worker's own, since a worker that runs the reaper is alive, even if a
        freeze let its leases run out (another worker's reaper decides about those). A batch
        claim's token (``claim_many(token=...)``) keeps every job that claim took, so a worker
        can keep a claim it sent before it knows which jobs it got.
        """
        keep = [_held_token("keep", token) for token in keep]
        return [row[0] for row in self._run(self._sql.REAP, {"now": self._now(), "keep": json.dumps(keep)})]

    # -- batches: one statement or one transaction for many jobs ----------

    def claim_many(
        self, n: int, worker: str = "worker", lease: float = DEFAULT_LEASE, *, token: str | None = None
    ) -> list[Job]:
        """Lease up to ``n`` runnable jobs to ``worker`` in one statement, in claim order; [] if none.

        Each job gets its own token, exactly as if claimed one by one: ``token`` (a fresh random
        one if None), a dash and the job's id; ``held_by(token)`` finds them after a lost reply.
        A job whose stored payload was damaged is failed with the reason and left out of the list.
        At ``durability="full"`` the claims are on disk before this returns.
        """
        params = self._claim_many_params(n, worker, lease, token=token)
        return self._claimed_many(self._run(self._sql.CLAIM_MANY, params, durable=self._acknowledged))

    def _claim_many_params(self, n: int, worker: str, lease: float, least: int = 1, token: str | None = None) -> dict:
        n = integer("n", n, least)
        worker = text("worker", worker)
        lease = positive("lease", lease)
        token = new_token() if token is None else _token("token", token)
        now = self._now()
        return {"now": now, "lease_until": now + lease, "worker": worker, "token": token, "n": n}

    def _claimed_many(self, rows: list[tuple]) -> list[Job]:
        jobs = []
        for row in rows:
            try:
                jobs.append(Job.from_row(row))
            except InvalidPayload as exc:
                self.fail(row[0], row[9], str(exc))  # row[9] is the token (JOB_COLUMNS order)
        jobs.sort(key=lambda j: (-j.priority, j.run_at, j.id))
        return jobs

    def heartbeat_many(self, held: Iterable[tuple[int, str]], lease: float = DEFAULT_LEASE) -> dict[int, float]:
        """Renew every ``(job_id, token)`` lease in one statement; returns {job_id: new lease_until}.

        A job missing from the result is no longer held by that token (``LeaseLost`` for it alone);
        each such refusal is written into that job's history, as ``heartbeat`` does.
        """
        held = [self._fence_args(job_id, token) for job_id, token in held]
        lease = positive("lease", lease)
        if not held:
            return {}
        rows, now = self._renew(self._sql.HEARTBEAT_MANY, {"tokens": json.dumps([t for _, t in held])}, lease)
        renewed = {job_id: until for job_id, until in rows}
        lost = [(job_id, token, None) for job_id, token in held if job_id not in renewed]
        if lost:
            with self.backend.transaction(durable=False) as run:
                _refusals(self._sql, run, lost, "heartbeat", now)
        return renewed

    def complete_many(self, done: Iterable[tuple[int, str, Any]]) -> list[int]:
        """Complete every ``(job_id, token, result)`` in one transaction (one sync at "full").

        Fenced job by job: a job whose token no longer holds it is refused, and the refusal
        recorded in its history, while the others complete. Returns the ids refused, in the
        order given; [] when every job completed. Every argument is checked, and every result
        encoded, before anything is written. On PostgreSQL it is one statement.
        """
        items = self._completions(done)
        if not items:
            return []
        refused, _ = self._complete_many_then(items, None)
        return refused

    def complete_many_and_claim(
        self, done: Iterable[tuple[int, str, Any]], n: int, worker: str = "worker", lease: float = DEFAULT_LEASE,
        *, token: str | None = None,
    ) -> tuple[list[int], list[Job]]:
        """``complete_many(done)`` and ``claim_many(n, worker, lease)`` in one transaction: a worker
        with slots refills the slots that just finished. Returns (ids refused, jobs claimed).

        One commit (one sync at "full"); on PostgreSQL one statement, one round trip. The claim
        does not depend on the completions: a refused job frees its slot as a completed one does.
        ``n`` may be 0 (nothing to claim). ``token`` is the claims' token, as for ``claim_many``.
        """
        items = self._completions(done)
        claim = self._claim_many_params(n, worker, lease, least=0, token=token)
        refused, rows = self._complete_many_then(items, claim)
        return refused, self._claimed_many(rows)

    def _completions(self, done: Iterable[tuple[int, str, Any]]) -> list[dict]:
        items = []
        for job_id, token, result in done:
            job_id, token = self._fence_args(job_id, token)
            items.append({"id": job_id, "token": token, "result": self._json("result", result)})
        return items

    def _complete_many_then(self, items: list[dict], claim: dict | None) -> tuple[list[int], list[tuple]]:
        """Complete ``items`` and, with ``claim``, claim as CLAIM_MANY does; (ids refused, claimed rows)."""
        now = claim["now"] if claim is not None else self._now()
        if self._sql.COMPLETE_MANY is not None:  # a server: one statement, one round trip
            if claim is None:
                rows = self._run(self._sql.COMPLETE_MANY, {"done": json.dumps(items), "now": now},
                                 durable=self._acknowledged)
                completed, claimed = [row[0] for row in rows], []
            else:
                rows = self._run(self._sql.COMPLETE_MANY_AND_CLAIM, {**claim, "done": json.dumps(items)},
                                 durable=self._acknowledged)
                completed = rows[0][0] or []
                claimed = [row[1:] for row in rows if row[1] is not None]
            left = set(completed)
            unchanged = []
            for params in items:
                if params["id"] in left:
                    left.discard(params["id"])  # a second completion of one job in the same call is refused
                else:
                    unchanged.append(params)
            if not unchanged:
                return [], claimed
            with self.backend.transaction(durable=False) as run:
                return _refusals(self._sql, run, _writes(unchanged), "complete", now, done=set(completed)), claimed
        claimed, completed, unchanged = [], set(), []
        with self.backend.transaction(durable=self._acknowledged) as run:
            for params in items:
                params["now"] = now
                if run(self._sql.COMPLETE, params).rowcount:
                    completed.add(params["id"])
                else:
                    unchanged.append(params)
            refused = _refusals(self._sql, run, _writes(unchanged), "complete", now, done=completed)
            if claim is not None and claim["n"] > 0:
                claimed = run(self._sql.CLAIM_MANY, claim).fetchall()
        return refused, claimed

    def _fence_args(self, job_id: Any, token: Any) -> tuple[int, str]:
        job_id = integer("job_id", job_id)
        if not isinstance(token, str):
            raise TypeError(f"token must be the str from the claim, got {token!r}")
        return job_id, token

    def _lease_lost(self, job_id: int, token: str, now: float, action: str, written: str | None = None,
                    went_through: bool = True) -> str:
        """After a fenced write changed no row: return the job's status if this token's own earlier
        try of the same write (``written``: the result or error) went through, as after a lost reply;
        else record the refusal in the job's history and raise ``LeaseLost``."""
        with self.backend.transaction(durable=False) as run:
            status = _went_through(run, self._sql, job_id, token, action, written) if went_through else None
            if status is not None:
                return status
            status = _record_lease_lost(self._sql, run, job_id, token, now, action)
        raise LeaseLost(job_id, token, status)

    # -- reading ----------------------------------------------------------

    def get(self, job_id: int) -> Job:
        """The job as it is now; ``JobNotFound`` for an unknown id."""
        rows = self._run(self._sql.GET, (integer("job_id", job_id),))
        if not rows:
            raise JobNotFound(job_id)
        return Job.from_row(rows[0])

    def jobs(self, status: str | Status | None = None, limit: int = 1000, *, newest_first: bool = False) -> list[Job]:
        """Jobs in id order, optionally only those with ``status``; ``newest_first`` gives the latest ``limit``.

        A row damaged outside leaselab (a payload that is not JSON, say) does not fail the listing:
        it is listed as a ``Job`` whose ``damage`` says what is wrong, its unreadable fields None.
        """
        limit = integer("limit", limit, 0)
        if status is None:
            rows = self._run(self._sql.LIST_JOBS_NEWEST if newest_first else self._sql.LIST_JOBS, {"limit": limit})
        else:
            try:
                status = Status(status)
            except ValueError:
                raise ValueError(f"status must be one of {', '.join(s.value for s in Status)}; got {status!r}") from None
            statement = self._sql.LIST_JOBS_BY_STATUS_NEWEST if newest_first else self._sql.LIST_JOBS_BY_STATUS
            rows = self._run(statement, {"status": status.value, "limit": limit})
        return [Job.from_row_or_damaged(r) for r in rows]

    def stats(self) -> dict[str, int]:
        """How many jobs are in each status, all four present, zeros included."""
        counts = {s.value: 0 for s in Status}
        counts.update(dict(self._run(self._sql.STATS)))
        return counts

    def events(self, job_id: int | None = None, after: int = 0) -> list[Event]:
        """The history of transitions, oldest first; ``after`` skips events up to that event id."""
        after = integer("after", after)
        if job_id is None:
            rows = self._run(self._sql.EVENTS, {"after": after})
        else:
            rows = self._run(self._sql.EVENTS_FOR_JOB, {"id": integer("job_id", job_id), "after": after})
        return [Event.from_row(r) for r in rows]

    def next_run_at(self) -> float | None:
        """When the earliest pending job becomes claimable, or None if nothing is pending."""
        return self._run(self._sql.NEXT_RUN_AT)[0][0]


def new_token() -> str:
    """A fresh claim token: 128 random bits in hex. A worker makes its own, so that after a claim
    whose reply never came it can ask which jobs that token holds (``Queue.held_by``)."""
    return secrets.token_hex(16)


def _held_token(name: str, token: Any) -> str:
    """A token some job holds: a claim's own, or a batch claim's (its token, a dash, the job id)."""
    if not isinstance(token, str) or not token:
        raise TypeError(f"{name} must hold the str tokens of claims, got {token!r}")
    return token


def _token(name: str, token: Any) -> str:
    if not isinstance(token, str) or not token or "-" in token or "\x00" in token:
        raise ValueError(f"{name} must be a non-empty str without '-' or NUL (as new_token() makes), got {token!r}")
    return token


# What a fenced write leaves behind when it went through: the statuses it sets, its last event,
# and the column that holds what it wrote.
_WRITTEN = {"complete": ({"done"}, "completed", 3), "fail": ({"pending", "dead"}, "failed", 4)}


def _went_through(run: Callable[..., Any], sql: Any, job_id: int, token: str, action: str,
                  written: str | None) -> str | None:
    """The job's status if the row shows this very write (``action`` by ``token``, writing
    ``written``) already made: a try whose reply was lost went through. Else None.

    A token is unique to one claim and only its holder completes or fails the job, so a row
    under the same token, with the same last event and the same value, can only be that write.
    A second completion with another result is a different write, and is refused.
    """
    if action not in _WRITTEN:
        return None
    rows = run(sql.OUTCOME, {"id": job_id}).fetchall()
    if not rows:
        return None
    statuses, event, column = _WRITTEN[action]
    row = rows[0]
    status, held_by, last_event = row[0], row[1], row[2]
    if held_by == token and status in statuses and last_event == event and row[column] == written:
        return status
    return None


def _writes(items: list[dict]) -> list[tuple[int, str, str]]:
    """(job id, token, result) of each completion's parameters."""
    return [(params["id"], params["token"], params["result"]) for params in items]


def _refusals(sql: Any, run: Callable[..., Any], unchanged: list[tuple[int, str, str | None]], action: str,
              now: float, done: set[int] | None = None) -> list[int]:
    """Of fenced writes that changed no row (job id, token, what they wrote), inside a transaction:
    one whose earlier try went through unseen is done (its id joins ``done``); every other is refused,
    and the refusal written into its job's history. Returns the ids refused, in order.

    A job in ``done`` already took a write in this very call, so another write of it is refused.
    """
    done = set() if done is None else done
    refused = []
    for job_id, token, written in unchanged:
        if job_id not in done and _went_through(run, sql, job_id, token, action, written):
            done.add(job_id)
            continue
        try:
            _record_lease_lost(sql, run, job_id, token, now, action)
        except JobNotFound:
            pass  # nothing to write a refusal into; the caller still learns it lost the job
        refused.append(job_id)
    return refused


def _record_lease_lost(sql: Any, run: Callable[..., Any], job_id: int, token: str, now: float, action: str) -> str:
    """Write a refused write into the job's history (inside a transaction); return the job's status."""
    detail = f"{action} refused: token no longer holds the job"
    rows = run(sql.RECORD_LEASE_LOST, {"id": job_id, "token": token, "now": now, "detail": detail,
                                       "after": 0}).fetchall()
    if not rows:
        raise JobNotFound(job_id)
    event_id, status = rows[0]
    run(sql.LINK_EVENT, {"event_id": event_id, "id": job_id})
    return status


class _Refused(Exception):
    """Inside ``Queue.completing``: the fenced completion changed no row, so the transaction must roll back."""
