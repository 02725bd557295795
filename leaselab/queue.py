"""The queue: a single-statement claim, leases, fencing tokens and a reaper, on any backend.

This module holds the queue's logic once: argument checks, the clock, tokens, telling a write
that went through unseen from a refusal, and ``LeaseLost``. It speaks to its backend only through
the contract (``leaselab.backends.contract``): the required ``Backend`` operations, and the optional
``FastPaths``, the backend's own or the defaults built from its primitives
(``leaselab.backends.defaults``); the SQL, the transactions and what an
engine can fuse into one statement live in ``leaselab.backends``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from .arguments import integer, number, positive, queue_name, queue_names, text, unique_key
from .backends import open_backend
from .backends.contract import ByHand, Claim, Claimed, Completion, FullBackend, NewJob, Refusals, Unreadable
from .backoff import Backoff
from .clock import Clock, system_clock
from .errors import InvalidPayload, JobNotFound, LeaselabError, LeaseLost, WrongStatus
from .job import DEFAULT_QUEUE, MAX_JSON_DEPTH, Enqueued, Event, Job, Status, check_json_depth
from .periodic import Schedule, due, next_tick, tick_key

DEFAULT_LEASE = 30.0
DEFAULT_MAX_PAYLOAD = 1_000_000
DURABILITIES = ("full", "normal")
MAX_ERROR = 10_000  # characters of a failure's text kept (last_error, and its event's detail)
SCHEDULE_TRIES = 100  # run_schedule's reads again after losing the race: each loss means another scheduler moved it
MAX_FRESH_ATTEMPTS = 1_000_000  # the most a retry by hand may add: attempts + this never nears 64 bits

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
    connection. ``call_timeout`` sets the property of that name: on a server, a queue given to a
    ``Worker`` needs one below the worker's lease.
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
        call_timeout: float | None = None,
    ):
        if durability not in DURABILITIES:
            raise ValueError(f"durability must be 'full' or 'normal', got {durability!r}")
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a callable returning unix seconds, got {clock!r}")
        if backoff is not None and not isinstance(backoff, Backoff):
            raise TypeError(f"backoff must be a leaselab.Backoff, got {backoff!r}")
        call_timeout = None if call_timeout is None else positive("call_timeout", call_timeout)
        self.path = os.fspath(path)
        self.durability = durability
        self.backoff = backoff or Backoff()
        self.max_payload_bytes = integer("max_payload_bytes", max_payload_bytes, 1)
        # Acknowledged writes (enqueues, completions) sync to disk at "full"; the rest never
        # wait for a sync, because losing one to a power cut only causes a retry.
        self._acknowledged = durability == "full"
        # The backend's own fast paths where it has them, the defaults built from its primitives where not.
        self.backend: FullBackend = open_backend(
            self.path,
            busy_timeout=positive("busy_timeout", busy_timeout),
            backoff=self.backoff,
            tracer=tracer,
            create=create,
        )
        self.clock: Clock = clock or self.backend.clock or system_clock
        self.backend.use_clock(self.clock)
        if call_timeout is not None:
            # Only now, past the schema check: opening may upgrade a big table, which takes longer
            # than any one call of a worker should, and that is no call the worker's lease waits on.
            self.backend.call_timeout = call_timeout

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

        On PostgreSQL such a call raises ``DatabaseUnreachable`` and the next one reconnects; a
        ``Worker`` refuses a queue whose calls could outlast its lease (``bounds_calls``, and no
        ``call_timeout`` below the lease), and never sets it on a queue it is given. A file queue
        ignores it: its busy timeout bounds every wait.
        """
        return self.backend.call_timeout

    @call_timeout.setter
    def call_timeout(self, seconds: float | None) -> None:
        self.backend.call_timeout = None if seconds is None else positive("call_timeout", seconds)

    @property
    def bounds_calls(self) -> bool:
        """Whether ``call_timeout`` bounds this queue's calls: True on a server, False on a file, which
        ignores it."""
        return self.backend.bounds_calls

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

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Queue({self.backend.name!r}, durability={self.durability!r})"

    # -- the statements ---------------------------------------------------

    def _now(self) -> float:
        return number("clock()", self.clock())

    def _json(self, what: str, value: Any) -> str:
        if value is None:  # most handlers return nothing: a worker's every completion writes this
            return "null"
        try:
            text = _ENCODER.encode(value)
        except (TypeError, ValueError) as exc:
            raise InvalidPayload(
                f"{what} must be JSON: numbers, strings, true/false/null, arrays and objects "
                f"(no NaN or Infinity, no sets, no Python objects): {exc}"
            ) from None
        except RecursionError:  # nested past the interpreter's limit, so far past ours too
            raise InvalidPayload(f"{what} nests arrays or objects more than {MAX_JSON_DEPTH} deep") from None
        check_json_depth(what, text)
        size = len(text.encode("utf-8"))
        if size > self.max_payload_bytes:
            raise InvalidPayload(f"{what} is {size} bytes of JSON; the limit is {self.max_payload_bytes}")
        return text

    def check_payload(self, payload: Any) -> None:
        """Raise ``InvalidPayload`` if ``payload`` could not be enqueued (not strict JSON, nested too deep,
        past ``max_payload_bytes``): check many before writing any, as ``leaselab enqueue --file`` does."""
        self._json("payload", payload)

    def _new_job(
        self,
        payload: Any,
        priority: int,
        delay: float,
        run_at: float | None,
        max_attempts: int,
        now: float,
        timeout: float | None = None,
        beat_timeout: float | None = None,
        queue: str = DEFAULT_QUEUE,
        key: str | None = None,
    ) -> NewJob:
        payload = self._json("payload", payload)
        priority = integer("priority", priority)
        max_attempts = integer("max_attempts", max_attempts, 1)
        delay = number("delay", delay)
        if delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {delay!r}")
        return NewJob(
            payload,
            priority,
            now + delay if run_at is None else number("run_at", run_at),
            max_attempts,
            None if timeout is None else positive("timeout", timeout),
            None if beat_timeout is None else positive("beat_timeout", beat_timeout),
            queue_name(queue),
            None if key is None else unique_key(key),
        )

    def enqueue(
        self,
        payload: Any,
        priority: int = 0,
        delay: float = 0.0,
        run_at: float | None = None,
        max_attempts: int = 5,
        *,
        timeout: float | None = None,
        beat_timeout: float | None = None,
        queue: str = DEFAULT_QUEUE,
        key: str | None = None,
    ) -> int:
        """Add a job and return its id. Higher ``priority`` runs first; ``run_at`` overrides ``delay``.

        ``queue`` names the queue it waits in: only a worker serving that queue claims it. With a ``key``,
        it is a unique job (``enqueue_unique``): while a job with that key is pending or running, no new
        job is made and that job's id is returned.

        ``timeout`` is the longest one attempt may run, in seconds: past it the worker gives the attempt
        up (a ``timed_out`` event; the job is retried after the backoff, or dead), whatever its
        handler is doing. ``beat_timeout`` is the longest the handler may go without calling
        ``lease.beat()``: its lease is renewed only while it reports progress. None: the worker's own
        defaults (``job_timeout``, ``beat_timeout``), if any.
        """
        if key is not None:
            return self.enqueue_unique(
                payload,
                key,
                priority,
                delay,
                run_at,
                max_attempts,
                timeout=timeout,
                beat_timeout=beat_timeout,
                queue=queue,
            ).id
        now = self._now()
        job = self._new_job(payload, priority, delay, run_at, max_attempts, now, timeout, beat_timeout, queue)
        return self.backend.enqueue(job, now, durable=self._acknowledged)

    def enqueue_unique(
        self,
        payload: Any,
        key: str,
        priority: int = 0,
        delay: float = 0.0,
        run_at: float | None = None,
        max_attempts: int = 5,
        *,
        timeout: float | None = None,
        beat_timeout: float | None = None,
        queue: str = DEFAULT_QUEUE,
    ) -> Enqueued:
        """Add a job with ``key`` unless a job with that key is pending or running; say which job it is.

        Returns an ``Enqueued``: its ``id`` (the new job's, or the one already holding the key), ``new``, and
        the holder's ``status``; ``str()`` of it reads "job 12 already pending with key invoice-42". Once
        that job is done or dead the key is free again. Race-free: a unique index decides, so however many
        processes enqueue one key at once, exactly one job is made. The other arguments are ``enqueue``'s;
        a job already there keeps its own payload and options.
        """
        now = self._now()
        job = self._new_job(
            payload, priority, delay, run_at, max_attempts, now, timeout, beat_timeout, queue, unique_key(key)
        )
        return self.backend.enqueue_unique(job, now, durable=self._acknowledged)

    def run_schedule(self, schedule: Schedule) -> list[int]:
        """Enqueue the ticks of ``schedule`` due now (``leaselab.periodic.due``); the new jobs' ids.

        Each tick's job has the key ``tick_key(name, tick)``. Race-free: the ticks are enqueued in the
        transaction that moves the schedule's last tick past them with a compare-and-set, so however many
        processes run one schedule at once, each tick is enqueued exactly once, even long after its job
        finished. A caller that loses the race reads the new last tick and decides again.
        """
        if not isinstance(schedule, Schedule):
            raise TypeError(f"schedule must be a leaselab.periodic.Schedule, got {schedule!r}")
        for _ in range(SCHEDULE_TRIES):
            last = self.backend.schedule_last(schedule.name)
            now = self._now()
            ticks, advance_to = due(schedule, last, now)
            if advance_to is None:
                return []
            payload = self._json("payload", schedule.payload)
            jobs = [
                NewJob(
                    payload,
                    schedule.priority,
                    tick,
                    schedule.max_attempts,
                    None,
                    None,
                    schedule.queue,
                    tick_key(schedule.name, tick),
                )
                for tick in ticks
            ]
            made = self.backend.advance_schedule(schedule.name, last, advance_to, jobs, now, durable=self._acknowledged)
            if made is not None:
                return made
        raise LeaselabError(f"schedule {schedule.name}: other schedulers kept moving it, {SCHEDULE_TRIES} times")

    def next_tick(self, schedule: Schedule) -> float:
        """When ``schedule`` next has a tick due, by this queue's clock (unix seconds)."""
        return next_tick(schedule, self.backend.schedule_last(schedule.name), self._now())

    def enqueue_many(
        self,
        payloads: Iterable[Any],
        priority: int = 0,
        delay: float = 0.0,
        run_at: float | None = None,
        max_attempts: int = 5,
        *,
        timeout: float | None = None,
        beat_timeout: float | None = None,
        queue: str = DEFAULT_QUEUE,
    ) -> list[int]:
        """Add many jobs in one transaction (one sync to disk) and return their ids, in order.

        Every payload is checked before anything is written: one bad payload writes none. The other
        arguments are ``enqueue``'s, the same for every job.
        """
        now = self._now()
        queue = queue_name(queue)
        jobs = [
            self._new_job(p, priority, delay, run_at, max_attempts, now, timeout, beat_timeout, queue) for p in payloads
        ]
        return self.backend.enqueue_many(jobs, now, durable=self._acknowledged)

    def claim(
        self,
        worker: str = "worker",
        lease: float = DEFAULT_LEASE,
        *,
        token: str | None = None,
        queues: str | Iterable[str] = DEFAULT_QUEUE,
    ) -> Job | None:
        """Take the next runnable job and lease it to ``worker`` for ``lease`` seconds, or return None.

        ``queues`` is the named queue to take it from, or several (the next runnable job of any of them,
        in claim order); the default queue, 'default', if none is named.

        ``token`` is the claim's fence token (a fresh random one if None). A caller that makes its
        own can find the job with ``held_by(token)`` if the reply to this call never arrives.
        At ``durability="full"`` the claim is on disk before this returns.
        """
        claim = self._claim("token", worker, lease, token, queues)
        return self._readable(self.backend.claim(claim, durable=self._acknowledged))

    def _claim(self, name: str, worker: str, lease: float, token: str | None, queues: str | Iterable[str]) -> Claim:
        worker = text("worker", worker)
        lease = positive("lease", lease)
        token = new_token() if token is None else _token(name, token)
        served = _DEFAULT_QUEUES if queues is DEFAULT_QUEUE or queues == DEFAULT_QUEUE else queue_names(queues)
        now = self._now()
        return Claim(worker, token, now, now + lease, served)

    def held_by(self, token: str) -> list[Job]:
        """The running jobs that the claim made with ``token`` still holds, in claim order.

        After a claim whose reply never came (a dropped connection), this tells whether it went
        through: the tokens are the caller's own (``claim(token=...)``, ``claim_many(token=...)``).
        """
        return self._readable_many(self.backend.held_by(_token("token", token)))

    def _readable(self, job: Claimed | None) -> Job | None:
        if isinstance(job, Unreadable):
            # A row damaged outside leaselab: give the attempt back as failed (so it ends dead, not
            # stuck running), then tell the caller.
            self.fail(job.id, job.token, job.reason)
            raise InvalidPayload(job.reason)
        return job

    def heartbeat(self, job_id: int, token: str, lease: float = DEFAULT_LEASE) -> float:
        """Extend the lease to now + ``lease`` and return the new ``lease_until``.

        "Now" is when the database applies the renewal, not when it was asked for: a beat that
        waited on a lock still gets a whole lease. Works while ``token`` still holds the job,
        even past ``lease_until`` if no one has reaped or re-claimed it yet. Raises ``LeaseLost``
        otherwise.
        """
        job_id, token = self._fence_args(job_id, token)
        lease = positive("lease", lease)
        now = self._renewal_now()
        until = self.backend.heartbeat(job_id, token, lease, now)
        if until is None:
            self._lease_lost(job_id, token, self._now() if now is None else now, "heartbeat")
            raise AssertionError("unreachable: a refused heartbeat raises LeaseLost")  # pragma: no cover
        return until

    def _renewal_now(self) -> float | None:
        """The time a lease renewal is given: None when the queue keeps the backend's own clock, which
        the renewal then reads once it holds its locks (SQLite's ``leaselab_now()`` reads the queue's).

        A renewal is one statement, not a transaction around it: a worker frozen (``SIGSTOP``)
        between a ``BEGIN`` and its ``COMMIT`` would hold a file's one write lock, and stop every other worker.
        """
        return None if self.clock is self.backend.clock else self._now()

    def complete(self, job_id: int, token: str, result: Any = None) -> None:
        """Mark the job done with a JSON ``result``; ``LeaseLost`` if ``token`` no longer holds it.

        Safe to retry after a reply that never came: a job already done under this same token
        is this completion having gone through, and the call returns as if it had just done it.
        """
        job_id, token = self._fence_args(job_id, token)
        done = Completion(job_id, token, self._json("result", result))
        now = self._now()
        if not self.backend.complete(done, now, durable=self._acknowledged):
            self._lease_lost(job_id, token, now, "complete", done.result)

    def complete_and_claim(
        self,
        job_id: int,
        token: str,
        result: Any = None,
        worker: str = "worker",
        lease: float = DEFAULT_LEASE,
        *,
        next_token: str | None = None,
        queues: str | Iterable[str] = DEFAULT_QUEUE,
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
        claim = self._claim("next_token", worker, lease, next_token, queues)
        done = Completion(job_id, token, self._json("result", result))
        completed, job = self.backend.complete_and_claim(done, claim, durable=self._acknowledged)
        if not completed:
            self._lease_lost(job_id, token, claim.now, "complete", done.result)
            return next(iter(self.held_by(claim.token)), None)  # it went through before: its claim, if any
        try:
            return self._readable(job)
        except InvalidPayload:
            return None  # the completion stands; the damaged next job was failed with the reason

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
        done = Completion(job_id, token, self._json("result", result))
        with self.backend.completing(done, self._now, durable=self._acknowledged) as completing:
            yield completing.connection
        if not completing.completed:
            self._lease_lost(job_id, token, completing.now, "complete", went_through=False)

    def fail(self, job_id: int, token: str, error: str = "failed") -> Status:
        """Record a failed attempt and return the new status: ``pending`` (after backoff) or ``dead``.

        Safe to retry after a reply that never came: a job this token already failed is answered
        with the status that failure gave it (even if the job has been claimed again since), not
        with ``LeaseLost``.
        """
        return self._end_attempt(job_id, token, error, "fail")

    def time_out(self, job_id: int, token: str, reason: str) -> Status:
        """Give up an attempt that ran past its timeout, as its worker does: ``fail`` written as a
        ``timed_out`` event (``reason`` its detail); pending after the backoff, or dead. Fenced, and
        safe to retry after a lost reply, as ``fail`` is."""
        return self._end_attempt(job_id, token, reason, "time_out")

    def _end_attempt(self, job_id: int, token: str, error: str, action: str) -> Status:
        job_id, token = self._fence_args(job_id, token)
        if not isinstance(error, str):
            raise TypeError(f"error must be a str, got {error!r}")
        now = self._now()
        error = error[:MAX_ERROR]
        status = self.backend.fail(job_id, token, error, now, _WRITTEN[action].event)
        if status is None:
            return Status(self._lease_lost(job_id, token, now, action, error))
        return Status(status)

    def release(self, held: Iterable[tuple[int, str]]) -> dict[int, Status]:
        """Hand back every ``(job_id, token)`` this worker holds, at once, in one statement: what a
        worker does when it stops before its handlers finish. Each job is pending and runnable now (no
        backoff), or dead if its attempts are spent (the attempt counts: its handler ran, maybe in
        part), with a ``released`` event. Returns {job_id: new status}; a job missing from it is no
        longer held by that token (another worker has it), and is left alone.
        """
        held = [self._fence_args(job_id, token) for job_id, token in held]
        if not held:
            return {}
        released = self.backend.release([token for _, token in held], self._now())
        ids = {job_id for job_id, _ in held}
        return {job_id: Status(status) for job_id, status in released.items() if job_id in ids}

    # -- what an operator does by hand ----------------------------------

    def retry(
        self, ids: Iterable[int] | None = None, *, dead: bool = False, attempts: int = 1, queue: str | None = None
    ) -> list[int]:
        """Put dead jobs back to pending, runnable now, and return their ids: those in ``ids``, or with
        ``dead=True`` every dead job (of the named ``queue`` alone, if given).

        Each gets ``attempts`` fresh attempts on top of those it used: its ``max_attempts`` becomes
        ``attempts + fresh`` and its attempt count is kept, so the fence (job id, attempt) of every
        later claim is new and an outside store that accepts only newer fences still refuses the old
        ones. The history gets a ``retried`` event (its ``attempt`` the count kept); ``last_error``
        stays until a new attempt writes its own. All or nothing, in one transaction: an unknown id
        raises ``JobNotFound``, a job that is not dead ``WrongStatus``, and then no job was retried.
        """
        fresh = integer("attempts", attempts, 1)
        if fresh > MAX_FRESH_ATTEMPTS:
            raise ValueError(f"attempts must be at most {MAX_FRESH_ATTEMPTS}, got {attempts!r}")
        if dead is not True and dead is not False:
            raise TypeError(f"dead must be True or False, got {dead!r}")
        if (ids is None) == (not dead):
            raise ValueError("retry takes either job ids or dead=True (every dead job), not both and not neither")
        if queue is not None and not dead:
            raise ValueError("queue= picks which dead jobs dead=True retries; named jobs are retried wherever they are")
        queue = None if queue is None else queue_name(queue)
        now = self._now()
        if ids is None:
            return sorted(self.backend.retry(None, fresh, now, durable=self._acknowledged, queue=queue).changed)
        named = self._ids(ids)
        return self._by_hand(self.backend.retry(named, fresh, now, durable=self._acknowledged), "retry", "a dead job")

    def cancel(self, ids: Iterable[int], reason: str = "cancelled by hand") -> list[int]:
        """Cancel jobs and return their ids: each pending or running job in ``ids`` becomes dead at once,
        with a ``cancelled`` event whose detail (and ``last_error``) is ``reason``.

        A running job's handler is not killed: its worker's token no longer holds the job, so the
        fence refuses its next heartbeat, completion or failure (written into the history as a
        refused write), and the handler's ``lease.check()`` raises ``LeaseLost`` after the refused
        beat. All or nothing, in one transaction: an unknown id raises ``JobNotFound``, a job done or
        dead already ``WrongStatus``, and then no job was cancelled. ``retry`` brings a cancelled job back.
        """
        if not isinstance(reason, str) or not reason:
            raise TypeError(f"reason must be a non-empty str, got {reason!r}")
        named = self._ids(ids)
        done = self.backend.cancel(named, reason[:MAX_ERROR], self._now(), durable=self._acknowledged)
        return self._by_hand(done, "cancel", "a pending or running job")

    @staticmethod
    def _ids(ids: Iterable[int]) -> list[int]:
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(f"ids must be an iterable of job ids, got {ids!r}")
        named = list(dict.fromkeys(integer("job id", job_id) for job_id in ids))  # each once, in order
        if not named:
            raise ValueError("name at least one job id")
        return named

    @staticmethod
    def _by_hand(done: ByHand, action: str, allowed: str) -> list[int]:
        """The ids a retry or cancel changed; the error that says why it changed none."""
        unknown = [job_id for job_id, status in done.refused.items() if status is None]
        if unknown:
            raise JobNotFound(unknown[0])
        if done.refused:
            raise WrongStatus(action, {job_id: str(status) for job_id, status in done.refused.items()}, allowed)
        return sorted(done.changed)

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
        return self.backend.reap(self._now(), keep)

    # -- batches: one statement or one transaction for many jobs ----------

    def claim_many(
        self,
        n: int,
        worker: str = "worker",
        lease: float = DEFAULT_LEASE,
        *,
        token: str | None = None,
        queues: str | Iterable[str] = DEFAULT_QUEUE,
    ) -> list[Job]:
        """Lease up to ``n`` runnable jobs to ``worker`` in one statement, in claim order; [] if none.

        Each job gets its own token, exactly as if claimed one by one: ``token`` (a fresh random
        one if None), a dash and the job's id; ``held_by(token)`` finds them after a lost reply.
        A job whose stored payload was damaged is failed with the reason and left out of the list.
        At ``durability="full"`` the claims are on disk before this returns.
        """
        n = integer("n", n, 1)
        claim = self._claim("token", worker, lease, token, queues)
        return self._readable_many(self.backend.claim_many(n, claim, durable=self._acknowledged))

    def _readable_many(self, claimed: list[Claimed]) -> list[Job]:
        """The readable jobs, in claim order; each unreadable one's attempt failed with the reason."""
        jobs = []
        for job in claimed:
            if isinstance(job, Unreadable):
                self.fail(job.id, job.token, job.reason)
            else:
                jobs.append(job)
        if len(jobs) > 1:  # a one-slot worker's every claim holds one job
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
        now = self._renewal_now()
        # The answer names jobs, not tokens: a job given twice (a worker that claimed again the job it
        # still runs, frozen past its lease) goes in a batch of its own, so each answer says which
        # token renewed it. Almost always there is one batch, one statement.
        batches: list[list[tuple[int, str]]] = [held]
        if len({job_id for job_id, _ in held}) < len(held):
            batches = []
            ids: list[set[int]] = []  # the job ids in each batch
            for pair in held:
                n = next((i for i, taken in enumerate(ids) if pair[0] not in taken), len(batches))
                if n == len(batches):
                    batches.append([])
                    ids.append(set())
                batches[n].append(pair)
                ids[n].add(pair[0])
        renewed: dict[int, float] = {}
        lost = []
        for batch in batches:
            answer = self.backend.heartbeat_many([t for _, t in batch], lease, now)
            renewed.update(answer)
            lost += [(job_id, token, None) for job_id, token in batch if job_id not in answer]
        if lost:
            with self.backend.refusals() as refusals:
                _settle(refusals, lost, "heartbeat", self._now() if now is None else now)
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
        now = self._now()
        return self._refused(items, self.backend.complete_many(items, now, durable=self._acknowledged), now)

    def complete_many_and_claim(
        self,
        done: Iterable[tuple[int, str, Any]],
        n: int,
        worker: str = "worker",
        lease: float = DEFAULT_LEASE,
        *,
        token: str | None = None,
        queues: str | Iterable[str] = DEFAULT_QUEUE,
    ) -> tuple[list[int], list[Job]]:
        """``complete_many(done)`` and ``claim_many(n, worker, lease)`` in one transaction: a worker
        with slots refills the slots that just finished. Returns (ids refused, jobs claimed).

        One commit (one sync at "full"); on PostgreSQL one statement, one round trip. The claim
        does not depend on the completions: a refused job frees its slot as a completed one does.
        ``n`` may be 0 (nothing to claim). ``token`` is the claims' token, as for ``claim_many``.
        """
        items = self._completions(done)
        n = integer("n", n, 0)
        claim = self._claim("token", worker, lease, token, queues)
        completed, claimed = self.backend.complete_many_and_claim(items, n, claim, durable=self._acknowledged)
        return self._refused(items, completed, claim.now), self._readable_many(claimed)

    def _completions(self, done: Iterable[tuple[int, str, Any]]) -> list[Completion]:
        items = []
        for job_id, token, result in done:
            job_id, token = self._fence_args(job_id, token)
            items.append(Completion(job_id, token, self._json("result", result)))
        return items

    def _refused(self, items: Sequence[Completion], completed: list[int], now: float) -> list[int]:
        """Of ``items``, the ids refused once those whose earlier try went through unseen are set apart;
        each refusal written into its job's history. A second completion of one job in the same call
        is refused: the first one is the one that completed."""
        if len(completed) == len(items):  # each row is updated once: every item completed, none twice
            return []
        left = set(completed)
        unchanged = []
        for item in items:
            if item.id in left:
                left.discard(item.id)
            else:
                unchanged.append((item.id, item.token, item.result))
        if not unchanged:
            return []
        with self.backend.refusals() as refusals:
            return _settle(refusals, unchanged, "complete", now, done=set(completed))

    def _fence_args(self, job_id: Any, token: Any) -> tuple[int, str]:
        job_id = integer("job_id", job_id)
        if not isinstance(token, str):
            raise TypeError(f"token must be the str from the claim, got {token!r}")
        return job_id, token

    def _lease_lost(
        self, job_id: int, token: str, now: float, action: str, written: str | None = None, went_through: bool = True
    ) -> str:
        """After a fenced write changed no row: return the job's status if this token's own earlier
        try of the same write (``written``: the result or error) went through, as after a lost reply;
        else record the refusal in the job's history and raise ``LeaseLost``."""
        with self.backend.refusals() as refusals:
            status = _went_through(refusals, job_id, token, action, written) if went_through else None
            if status is not None:
                return status
            status = _record_lease_lost(refusals, job_id, token, now, action)
        raise LeaseLost(job_id, token, status)

    # -- reading ----------------------------------------------------------

    def get(self, job_id: int) -> Job:
        """The job as it is now; ``JobNotFound`` for an unknown id."""
        job_id = integer("job_id", job_id)
        job = self.backend.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def jobs(
        self,
        status: str | Status | None = None,
        limit: int = 1000,
        *,
        newest_first: bool = False,
        after: int = 0,
        queue: str | None = None,
    ) -> list[Job]:
        """At most ``limit`` jobs in id order, optionally only those with ``status``, or of one ``queue``;
        ``newest_first`` gives the latest ``limit``. ``after`` skips the jobs up to that id: the next page
        starts after the last id seen.

        A row damaged outside leaselab (a payload that is not JSON, say) does not fail the listing:
        it is listed as a ``Job`` whose ``damage`` says what is wrong, its unreadable fields None.
        """
        limit = integer("limit", limit, 0)
        after = integer("after", after)
        if status is not None:
            try:
                status = Status(status)
            except ValueError:
                raise ValueError(
                    f"status must be one of {', '.join(s.value for s in Status)}; got {status!r}"
                ) from None
        queue = None if queue is None else queue_name(queue)
        return self.backend.jobs(status, limit, newest_first, after, queue)

    def stats(self, queue: str | None = None) -> dict[str, int]:
        """How many jobs are in each status, all four present, zeros included: in every queue, or in ``queue``."""
        by_queue = self.backend.stats()
        if queue is not None:
            name = queue_name(queue)
            by_queue = {name: by_queue.get(name, {})}
        counts = {s.value: 0 for s in Status}
        for of_queue in by_queue.values():
            for status, n in of_queue.items():
                counts[status] += n
        return counts

    def stats_by_queue(self) -> dict[str, dict[str, int]]:
        """``stats()`` of each queue that holds any job, in one read, the queues by name in alphabetical order."""
        by_queue = self.backend.stats()
        return {name: {s.value: by_queue[name].get(s.value, 0) for s in Status} for name in sorted(by_queue)}

    def events(self, job_id: int | None = None, after: int = 0, limit: int | None = None) -> list[Event]:
        """The history of transitions, oldest first; ``after`` skips events up to that event id, and ``limit``
        (None: no bound) returns at most that many: a page, whose last id is the next page's ``after``."""
        after = integer("after", after)
        if limit is not None:
            limit = integer("limit", limit, 0)
        return self.backend.events(None if job_id is None else integer("job_id", job_id), after, limit)

    def next_run_at(self) -> float | None:
        """When the earliest pending job becomes claimable, or None if nothing is pending."""
        return self.backend.next_run_at()


_DEFAULT_QUEUES = (DEFAULT_QUEUE,)  # what every claim that names no queue serves: checked once, here


def new_token() -> str:
    """A fresh claim token: 128 random bits in hex. A worker makes its own, so that after a claim
    whose reply never came it can ask which jobs that token holds (``Queue.held_by``).
    ``os.urandom`` is where ``secrets.token_hex`` takes its bytes from, without its three calls
    on the way: this is on a worker's path once per job."""
    return os.urandom(16).hex()


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
# and the field of the outcome that holds what it wrote.
class _Write(NamedTuple):
    """What a fenced write leaves in the row: the statuses it may give, its last_event, the column it writes."""

    statuses: frozenset[str]
    event: str
    field: str


_WRITTEN = {
    "complete": _Write(frozenset({"done"}), "completed", "result"),
    "fail": _Write(frozenset({"pending", "dead"}), "failed", "last_error"),
    "time_out": _Write(frozenset({"pending", "dead"}), "timed_out", "last_error"),
}


def _went_through(refusals: Refusals, job_id: int, token: str, action: str, written: str | None) -> str | None:
    """The status this very write (``action`` by ``token``, writing ``written``) left the job in,
    if the job shows it already made: a try whose reply was lost went through. Else None.

    A token is unique to one claim and only its holder completes or fails the job, so a row
    under the same token, with the same last event and the same value, can only be that write.
    A second completion with another result is a different write, and is refused.
    """
    if action not in _WRITTEN:
        return None
    outcome = refusals.outcome(job_id)
    if outcome is None:
        return None
    statuses, event, field = _WRITTEN[action]
    if (
        outcome.token == token
        and outcome.status in statuses
        and outcome.last_event == event
        and getattr(outcome, field) == written
    ):
        return outcome.status
    if (
        event in ("failed", "timed_out")
        and written is not None
        and outcome.token != token
        and refusals.failed(job_id, token, written, event)
    ):
        # Failed by this token, then claimed again: the failure had put it back to pending (a
        # dead job is never claimed again, and keeps the token that ended it).
        return "pending"
    return None


def _settle(
    refusals: Refusals,
    unchanged: Sequence[tuple[int, str, str | None]],
    action: str,
    now: float,
    done: set[int] | None = None,
) -> list[int]:
    """Of fenced writes that changed no row (job id, token, what they wrote), inside a transaction:
    one whose earlier try went through unseen is done (its id joins ``done``); every other is refused,
    and the refusal written into its job's history. Returns the ids refused, in order.

    A job in ``done`` already took a write in this very call, so another write of it is refused.
    """
    done = set() if done is None else done
    refused = []
    for job_id, token, written in unchanged:
        if job_id not in done and _went_through(refusals, job_id, token, action, written):
            done.add(job_id)
            continue
        try:
            _record_lease_lost(refusals, job_id, token, now, action)
        except JobNotFound:
            pass  # nothing to write a refusal into; the caller still learns it lost the job
        refused.append(job_id)
    return refused


def _record_lease_lost(refusals: Refusals, job_id: int, token: str, now: float, action: str) -> str:
    """Write a refused write into the job's history (inside a transaction); return the job's status."""
    status = refusals.record(job_id, token, now, f"{action} refused: token no longer holds the job")
    if status is None:
        raise JobNotFound(job_id)
    return status
