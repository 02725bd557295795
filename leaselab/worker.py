"""The worker runtime: claim, run the handler while a heartbeat renews the lease, then complete or fail."""

from __future__ import annotations

import importlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from . import faults
from .errors import HandlerError, InvalidPayload, LeaselabError, LeaseLost, TransientError
from .job import Job
from .lease import Lease, wants_lease
from .checks import integer, positive
from .queue import DEFAULT_LEASE, Queue
from .slots import Slots

STOPPED = faults.STOPPED  # what outlast returns when a stop came while it waited

Handler = Callable[[Job], Any]
Log = Callable[[str], None]
T = TypeVar("T")


def load_handler(path: str) -> Handler:
    """Import a handler named ``module:function``; ``HandlerError`` says what went wrong."""
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise HandlerError(f"handler must look like 'module:function', got {path!r}")
    module_name, attr = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any failure while importing user code is the user's to see
        raise HandlerError(f"cannot import handler module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    try:
        handler = getattr(module, attr)
    except AttributeError:
        raise HandlerError(f"module {module_name!r} has no handler named {attr!r}") from None
    if not callable(handler):
        raise HandlerError(f"handler {path!r} is not callable")
    return handler


@dataclass
class WorkerStats:
    """What one worker did: every claimed job ends in exactly one of the last three counters."""

    claimed: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0
    reaped: int = 0


class _Heartbeat:
    """Renews one job's lease every third of the lease until stopped or fenced off."""

    def __init__(self, worker: "Worker", job: Job, lease: Lease):
        self.worker, self.job, self.lease = worker, job, lease
        self.lost = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{job.id}", daemon=True)

    def __enter__(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _beat(self) -> None:
        w, job = self.worker, self.job
        while not self._done.wait(w.lease / 3):
            try:
                w.queue.heartbeat(job.id, job.token, w.lease)
            except LeaseLost:
                self.lost = True
                self.lease.lost.set()  # a handler that takes the lease can stop before its side effect
                w._log(f"lease lost on job {job.id} (attempt {job.attempts}): heartbeat refused")
                return
            except LeaselabError as exc:  # a busy file is worth another try at the next beat
                w._log(f"heartbeat for job {job.id} failed: {exc}")


class Worker:
    """Runs ``handler`` on claimed jobs in a loop until ``stop()``, SIGTERM or (optionally) an idle queue.

    ``handler`` is a callable taking a ``Job`` or an import path ``module:function``;
    its return value is the JSON result, an exception fails the attempt. Expired
    leases are reaped at least every ``reap_every`` seconds, so a crashed worker's
    job comes back without any extra process. Idle polling starts at ``poll`` and
    doubles up to ``max_poll``. With ``concurrency=k`` up to k handlers run at once on
    threads (see ``leaselab.slots``): jobs are leased and renewed in batches and the
    completions of the handlers that finished together commit in one transaction.
    A handler taking a second argument gets the attempt's ``Lease``, whose ``lost`` is
    set when a heartbeat is refused.
    """

    def __init__(
        self,
        queue_or_path: Queue | str | os.PathLike,
        handler: Handler | str,
        name: str | None = None,
        lease: float = DEFAULT_LEASE,
        poll: float = 0.05,
        *,
        max_poll: float = 1.0,
        reap_every: float | None = None,
        exit_when_idle: bool = False,
        log: Log | None = None,
        concurrency: int = 1,
    ):
        # The handler first: a bad handler path must not leave a fresh, empty queue file behind.
        self.handler = load_handler(handler) if isinstance(handler, str) else handler
        if not callable(self.handler):
            raise HandlerError(f"handler must be callable or 'module:function', got {handler!r}")
        self.queue = queue_or_path if isinstance(queue_or_path, Queue) else Queue(queue_or_path)
        self.name = name or f"worker-{os.getpid()}"
        self.lease = positive("lease", lease)
        self.poll = positive("poll", poll)
        self.max_poll = max(self.poll, positive("max_poll", max_poll))
        self.reap_every = min(self.lease, 1.0) if reap_every is None else positive("reap_every", reap_every)
        self.exit_when_idle = exit_when_idle
        self.concurrency = integer("concurrency", concurrency, 1)
        self.stats = WorkerStats()
        self.current: Job | None = None
        self._log_fn = log
        self._stop = threading.Event()
        self._last_reap = float("-inf")
        self._next: Job | None = None
        self._max_jobs: int | None = None
        self._in_run = False
        self.fault: str | None = None  # the transient fault the worker is waiting out, if any

    def _log(self, message: str) -> None:
        if self._log_fn is not None:
            self._log_fn(f"{self.name}: {message}")

    def log(self, message: str) -> None:
        """Write one line to the worker's log, prefixed with its name."""
        self._log(message)

    def call_handler(self, job: Job, lease: Lease | None = None) -> Any:
        """Run the handler on one job and return its result; an exception is the attempt's failure.

        A handler that takes a second argument gets ``lease`` (a fresh one if none is given).
        """
        if wants_lease(self.handler):
            return self.handler(job, lease if lease is not None else Lease(job))
        return self.handler(job)

    def queue_idle(self) -> bool:
        """True when no job is pending or running: what ``exit_when_idle`` waits for.

        Retried through transient faults; also True when a stop came while it waited.
        """
        return self.outlast("idle check", self._queue_idle) in (True, STOPPED)

    def idle_wait(self, seconds: float) -> None:
        """Wait while there is nothing to claim, at most ``seconds``; a stop ends the wait at once."""
        self._stop.wait(seconds)

    def stop(self) -> None:
        """Ask the loop to finish the current job and return."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, max_jobs: int | None = None) -> WorkerStats:
        """Process jobs until stopped, ``max_jobs`` claimed, or idle with ``exit_when_idle``."""
        self._max_jobs, self._in_run = max_jobs, True
        try:
            if self.concurrency > 1:
                return Slots(self).run(max_jobs)
            return self._loop(max_jobs)
        finally:
            self._in_run = False

    def outlast(self, what: str, call: Callable[[], T]) -> T | object:
        """``call()``, retried with a growing (capped) wait while it raises ``TransientError``.

        Each wait is logged (``faults.WAITING``), and the end of the fault (``faults.CLEARED``).
        Returns ``STOPPED`` if a stop is asked for while waiting; any other error goes to the caller.
        """
        wait = faults.FIRST_WAIT
        while True:
            try:
                result = call()
            except TransientError as exc:
                self.fault = f"{what}: {exc}"
                self._log(f"{faults.WAITING} ({what}), retrying in {wait:g}s: {exc}")
                if self._stop.wait(wait):
                    return STOPPED
                wait = min(wait * 2, faults.MAX_WAIT)
                continue
            if self.fault is not None:
                self._log(f"{faults.CLEARED}: {what} went through")
                self.fault = None
            return result

    def _loop(self, max_jobs: int | None) -> WorkerStats:
        wait = self.poll
        # A job claimed together with the last completion is finished even if a stop came meanwhile.
        while self._next is not None or not self._stop.is_set():
            self.reap_if_due()
            job, self._next = self._next, None
            if job is None:
                if max_jobs is not None and self.stats.claimed >= max_jobs:
                    break
                try:
                    job = self.outlast("claim", lambda: self.queue.claim(self.name, self.lease))
                except InvalidPayload as exc:  # the queue already failed that job; take the next
                    self._log(f"skipped a damaged job: {exc}")
                    continue
                if job is STOPPED:
                    break
            if job is None:
                if self.exit_when_idle and self.queue_idle():
                    break
                self.queue.wait_for_work(wait, self._stop)  # on PostgreSQL, an enqueue wakes it early
                wait = min(wait * 2, self.max_poll)
                continue
            wait = self.poll
            self.process(job)
        return self.stats

    def _wants_next(self) -> bool:
        # Only the loop takes the next job early: a caller of process() gets exactly one job handled.
        if not self._in_run or self._stop.is_set():
            return False
        return self._max_jobs is None or self.stats.claimed < self._max_jobs

    def reap_if_due(self) -> list[int]:
        """Reap expired leases if ``reap_every`` seconds (real time) have passed since the last reap."""
        now = time.monotonic()
        if now - self._last_reap < self.reap_every:
            return []
        self._last_reap = now
        moved = self.outlast("reap", self.queue.reap)
        if moved is STOPPED:
            return []
        if moved:
            self.stats.reaped += len(moved)
            self._log(f"reaped expired leases of jobs {moved}")
        return moved

    def _queue_idle(self) -> bool:
        counts = self.queue.stats()
        return counts["pending"] == 0 and counts["running"] == 0

    def _complete(self, job: Job, result: Any) -> None:
        if self._wants_next():  # finish and take the next job in one transaction
            self._next = self.queue.complete_and_claim(job.id, job.token, result, self.name, self.lease)
        else:
            self.queue.complete(job.id, job.token, result)

    def process(self, job: Job) -> str:
        """Run the handler on a claimed job; returns 'completed', 'failed' or 'lost'."""
        self.stats.claimed += 1
        self.current = job
        self._log(f"claimed job {job.id} (attempt {job.attempts}/{job.max_attempts})")
        error: str | None = None
        result: Any = None
        lease = Lease(job)
        try:
            with _Heartbeat(self, job, lease) as beat:
                try:
                    result = self.call_handler(job, lease)
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
            if beat.lost:
                self.stats.lost += 1
                self._log(f"job {job.id} (attempt {job.attempts}) ended without its lease: {error or 'result not written'}")
                return "lost"
            try:
                # The fenced completion (or failure) is retried through transient faults: that is
                # safe, since a retry after the lease was lost is refused, never applied twice.
                if error is None:
                    try:
                        written = self.outlast(f"complete job {job.id}", lambda: self._complete(job, result))
                    except InvalidPayload as exc:
                        error = f"handler returned a result that is not JSON: {exc}"
                    else:
                        if written is not STOPPED:
                            self.stats.completed += 1
                            self._log(f"completed job {job.id}")
                            return "completed"
                if error is not None:
                    status = self.outlast(f"fail job {job.id}", lambda: self.queue.fail(job.id, job.token, error))
                    if status is not STOPPED:
                        self.stats.failed += 1
                        self._log(f"failed job {job.id}: {error} -> {status}")
                        return "failed"
                self.stats.lost += 1
                self._log(f"stopped with job {job.id}'s outcome unwritten: its lease runs out and it runs again")
                return "lost"
            except LeaseLost:
                self.stats.lost += 1
                self._log(f"lease lost on job {job.id} (attempt {job.attempts}): result not written")
                return "lost"
        finally:
            self.current = None
