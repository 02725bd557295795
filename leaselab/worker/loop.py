"""The worker runtime: one loop for any number of slots. Claim as many jobs as there are free slots,
run each handler while the pulse renews every lease, then complete what finished and refill the
free slots in one transaction (one statement on a server), or fail what raised.

With one slot the handler runs on the loop's own thread; with k, on k threads. Everything else
(the claim, the heartbeat, the outcome, the retries through transient faults) is the same code.
An outcome the worker could not see (a connection dropped before the reply) is found out, by the
tokens the worker made itself, before it decides anything: never guessed as lost.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from queue import Empty, SimpleQueue
from typing import Any, Final, TypeVar

from ..arguments import integer, number, positive
from ..clock import elapsed
from ..errors import (
    CallTimeoutTooLong,
    HandlerError,
    InvalidPayload,
    LeaselabError,
    LeaseLost,
    QueueFileGone,
    TransientError,
)
from ..job import DEFAULT_QUEUE, Job
from ..periodic import Schedule
from ..printable import has_unprintable
from ..queue import DEFAULT_LEASE, Queue, new_token
from . import decisions, failure, faults
from .journal import Journal
from .latency import Histogram
from .lease import Lease, Leases, wants_lease
from .logline import LineLog
from .process import ProcessControl
from .pulse import Pulse
from .routing import ByQueue, Queues, handlers_by_queue
from .scheduler import Scheduler

STOPPED: Final = faults.STOPPED  # what outlast returns when a stop came while it waited
# How a worker process's line saying it is ready begins (``leaselab worker`` prints it once its signal
# handlers are in place): whoever waits for a worker to start (the lab's Fleet, the tests) looks for it.
STARTED = "started (pid "
# The call timeout of a queue a worker opens for itself, as a share of its lease: every call ends
# before the lease could (habit 25).
CALL_TIMEOUT_SHARE: Final = 0.9
# Seconds a stopping worker lets its handlers finish before it hands their jobs back: below the
# 30 s that Kubernetes and Heroku wait between SIGTERM and SIGKILL (docker stop waits 10: --grace 8).
DEFAULT_GRACE: Final = 25.0

Handler = Callable[[Job], Any]
Log = Callable[[str], None]
T = TypeVar("T")


def load_handler(path: str) -> Handler:
    """Import a handler named ``module:function``; ``HandlerError`` says what went wrong.

    The current folder is importable, first, as it is for ``python -m leaselab`` (and for celery's
    and rq's workers): the ``leaselab`` command starts with its own folder on ``sys.path`` instead,
    and ``myh:work`` must find the ``myh.py`` the user is standing beside. It stays importable, so
    a handler may import its neighbours later. A module that cannot be found is reported with the
    folders searched; a file path (``pkg/mod.py:work``) with the dotted name to give instead.
    """
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise HandlerError(f"handler must look like 'module:function', got {path!r}")
    module_name, attr = path.split(":")
    _current_folder_first()
    if "/" in module_name or os.sep in module_name:  # never a module name: do not even try it
        raise HandlerError(f"handler {path!r} is a file path, not a module: {_dotted_hint(module_name, attr)}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            # The handler's module was found; something it imports was not.
            raise HandlerError(f"cannot import handler module {module_name!r}: {type(exc).__name__}: {exc}") from exc
        hint = f"; {_dotted_hint(module_name, attr)}" if module_name.endswith(".py") else ""
        raise HandlerError(
            f"cannot import handler module {module_name!r}: no module named {exc.name!r} in "
            f"{', '.join(_searched())}{hint}"
        ) from exc
    except Exception as exc:  # any failure while importing user code is the user's to see
        raise HandlerError(f"cannot import handler module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    try:
        handler = getattr(module, attr)
    except AttributeError:
        raise HandlerError(f"module {module_name!r} has no handler named {attr!r}") from None
    if not callable(handler):
        raise HandlerError(f"handler {path!r} is not callable")
    _refuse_coroutine(handler, path)
    return handler


def handler_path(handler: Callable[..., Any]) -> str:
    """The ``module:function`` that ``load_handler`` turns back into ``handler``, for a process that must import it.

    A default handler is written as a reference to the function, not as a string, so that an import
    checker sees the dependency and a renamed function fails where it is named.
    """
    module, name = getattr(handler, "__module__", None), getattr(handler, "__qualname__", "")
    if not module or not name.isidentifier():  # a lambda, a nested function, a bound method
        raise HandlerError(f"a handler for another process must be a module-level function, got {handler!r}")
    return f"{module}:{name}"


def _refuse_coroutine(handler: Callable[..., Any], name: str) -> None:
    """``HandlerError`` for a coroutine function: called as a plain function, it would return a coroutine
    that never runs, and every job would fail as "not JSON"."""
    # An async def function, a partial of one, or an object whose __call__ is one.
    if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(getattr(handler, "__call__", None)):  # noqa: B004  (inspects the method)
        call = getattr(handler, "__name__", "handler")
        raise HandlerError(
            f"handler {name} is asynchronous (async def): the worker calls handlers as plain "
            f"functions, on its own threads; call it from one, e.g. "
            f"def run(job): return asyncio.run({call}(job))"
        )


def _refuse_calls_past(queue: Queue, lease: float) -> None:
    """``CallTimeoutTooLong`` for a queue given to a worker whose calls to a server could outlast its lease:
    a call still waiting when the lease ran out would act on a job that may be another worker's by then."""
    bound = queue.call_timeout
    if not queue.bounds_calls or (bound is not None and bound < lease):
        return
    now = "None (no bound)" if bound is None else f"{bound:g}s, not below the lease"
    raise CallTimeoutTooLong(
        f"a worker's calls must end before its lease, but the queue's call_timeout is {now}: open the "
        f"queue with Queue(url, call_timeout={CALL_TIMEOUT_SHARE * lease:g}) (below the lease of {lease:g}s), "
        "or give the Worker the URL and it opens its own"
    )


def _folders() -> list[str]:
    """The folders on ``sys.path`` as absolute paths (``''`` is the current folder), each once."""
    try:
        here = os.getcwd()
    except OSError:  # the current folder was deleted under us: nothing in it to import
        here = None
    folders = [
        os.path.join(here, entry) if here and not os.path.isabs(entry) else entry
        for entry in sys.path
        if isinstance(entry, str) and (here or os.path.isabs(entry))
    ]
    return list(dict.fromkeys(os.path.normpath(f) for f in folders))


def _current_folder_first() -> None:
    try:
        here = os.getcwd()
    except OSError:
        return
    if here not in _folders():
        sys.path.insert(0, here)


def _searched() -> list[str]:
    """The folders an import looks in that exist, as paths a reader can check."""
    return [f for f in _folders() if os.path.isdir(f)]


def _dotted_hint(file: str, attr: str) -> str:
    """What to write instead of a handler's file path: its dotted module name from a folder on
    ``sys.path`` (the current one is there), or else the file's own folder to run from."""
    absolute = os.path.abspath(file[: -len(".py")] if file.endswith(".py") else file)
    for root in _folders():
        parts = os.path.relpath(absolute, root).split(os.sep)
        if parts[-1] == "__init__":
            parts.pop()
        if parts and all(part.isidentifier() for part in parts):  # never "..": it is no identifier
            return f"name its module instead: {'.'.join(parts)}:{attr}"
    folder, name = os.path.split(absolute)
    return f"name its module instead, run from the folder that holds it: cd {folder} and use {name}:{attr}"


@dataclass
class WorkerStats:
    """What one worker did: every claimed job ends in exactly one of completed, failed and lost.

    ``heartbeat_latencies`` counts the round trip of each acknowledged heartbeat by bucket (``Histogram``),
    what a lease must outlast (lesson 5); the pulse's thread writes it, a reader may read it at any time.
    """

    claimed: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0
    reaped: int = 0
    heartbeat_latencies: Histogram = field(default_factory=Histogram)


def outlast(
    what: str,
    call: Callable[[], T],
    *,
    stop: threading.Event,
    log: Callable[[str], None],
    again: Callable[[], T] | None = None,
    state: Any = None,
) -> T | faults.Stopped:
    """``call()``, retried with a growing (capped) wait while it raises ``TransientError``.

    Tries after the first call ``again`` instead, when given: after a fault the first try may
    have gone through unseen (a reply lost with the connection), and ``again`` finds that out
    before it acts. Each wait is logged (``faults.WAITING``), and the end of the fault
    (``faults.CLEARED``); ``state.fault`` (if given) names the fault while it lasts, for a reader
    such as the lab. Returns
    ``faults.STOPPED`` if ``stop`` is set while waiting; any other error goes to the caller.
    """
    wait_for = decisions.retry_wait(None)
    attempt, waited = call, False
    while True:
        try:
            result = attempt()
        except TransientError as exc:
            if state is not None:
                state.fault = f"{what}: {exc}"
            log(f"{faults.WAITING} ({what}), retrying in {wait_for:g}s: {exc}")
            if stop.wait(wait_for):
                return STOPPED
            wait_for = decisions.retry_wait(wait_for)
            attempt, waited = again or call, True
            continue
        if waited:
            log(f"{faults.CLEARED}: {what} went through")
        if state is not None:
            state.fault = None
        return result


# This process's id, kept current by a hook that runs in the child of every os.fork(): read after
# each handler at the cost of a list index, where os.getpid() is a system call on every job.
_PID = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


def _jobs(n: int) -> str:
    return "1 job" if n == 1 else f"{n} jobs"


def _leave_forked() -> None:
    """End a process that a handler forked and that returned from the handler: it is no worker. It
    must not write the outcome through its copy of the parent's connection, nor claim, nor wait for a
    loop thread that fork() did not copy. ``os._exit``, so nothing of the parent's is flushed or run.
    Called when ``_PID[0]`` is no longer the slot's own pid: the comparison is made at the call, so a
    job in the worker itself pays no call for it."""
    os._exit(0)


# A finished attempt: its lease, the handler's return value, and the exception it raised (or None).
Finished = tuple[Lease, Any, "BaseException | None"]
_WAKE: Any = object()  # put among the finished attempts to end the loop's wait (_Threads.wake)
_LEASE = itemgetter(0)  # a finished attempt's lease


class _Inline:
    """The slot of a one-slot worker: the handler runs on the loop's thread, at once.

    ``handler`` is called as ``handler(job, lease)`` when ``with_lease``, else ``handler(job)``:
    the slot calls it itself, a frame less on every job than a helper that decides each time."""

    def __init__(self, handler: Callable[..., Any], with_lease: bool):
        self._handler, self._with_lease = handler, with_lease
        self._finished: list[Finished] = []
        self._pid = _PID[0]

    def start(self, lease: Lease) -> None:
        try:
            result = self._handler(lease.job, lease) if self._with_lease else self._handler(lease.job)
        except BaseException as exc:  # sys.exit(), KeyboardInterrupt too: as a slot thread, the attempt's failure
            if _PID[0] != self._pid:
                _leave_forked()
            self._finished.append((lease, None, exc))
        else:
            if _PID[0] != self._pid:
                _leave_forked()
            self._finished.append((lease, result, None))

    def finished(self, timeout: float | None) -> list[Finished]:
        done, self._finished = self._finished, []
        return done

    def wake(self) -> None:
        pass  # the loop's own thread runs the handler: there is no wait to end

    def shutdown(self, wait: bool = True) -> None:
        pass


class _Threads:
    """The slots of a worker with k of them: k threads that take leases from one queue and put each
    finished attempt on another, which the loop blocks on. A ``Future`` per job and
    ``concurrent.futures.wait`` over every running one (a waiter installed on each, every turn of the
    loop) cost the worker twice its own CPU per job with eight slots (bench/README)."""

    def __init__(self, k: int, handler: Callable[..., Any], with_lease: bool, name: str):
        self._handler, self._with_lease = handler, with_lease
        self._todo: SimpleQueue[Lease | None] = SimpleQueue()
        self._done: SimpleQueue[Finished] = SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-slot-{i + 1}", daemon=True) for i in range(k)
        ]
        for thread in self._threads:
            thread.start()

    def _serve(self) -> None:
        handler, with_lease, pid = self._handler, self._with_lease, _PID[0]
        while (lease := self._todo.get()) is not None:
            try:
                result = handler(lease.job, lease) if with_lease else handler(lease.job)
            except BaseException as exc:  # sys.exit() too: the attempt's failure, never a lost slot
                if _PID[0] != pid:
                    _leave_forked()
                self._done.put((lease, None, exc))
            else:
                if _PID[0] != pid:
                    _leave_forked()
                self._done.put((lease, result, None))

    def start(self, lease: Lease) -> None:
        self._todo.put(lease)

    def finished(self, timeout: float | None) -> list[Finished]:
        """Every attempt finished so far; if none, wait up to ``timeout`` seconds (None: until one is).
        After ``wake()``, [] at once."""
        try:
            done = [self._done.get(timeout=timeout)]
        except Empty:
            return []
        while True:
            try:
                done.append(self._done.get_nowait())
            except Empty:
                return [f for f in done if f is not _WAKE]

    def wake(self) -> None:
        """End a wait in ``finished`` now, with nothing finished: the loop has something else to do."""
        self._done.put(_WAKE)  # type: ignore[arg-type]  # a marker, never returned

    def shutdown(self, wait: bool = True) -> None:
        """Let every slot thread end once its handler returns; with ``wait``, until they have. Without
        (handlers given up at a grace's end), they end when their handlers return, or with the process."""
        for _ in self._threads:
            self._todo.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


class Worker:
    """Runs ``handler`` on claimed jobs in a loop until ``stop()``, SIGTERM or (optionally) an idle queue.

    ``handler`` is a callable taking a ``Job`` or an import path ``module:function``;
    its return value is the JSON result, an exception fails the attempt. With
    ``concurrency=k`` up to k handlers run at once on threads; the loop is the same for
    any k. Every held lease is renewed in one statement every third of the lease, and
    expired leases are reaped at least every ``reap_every`` seconds on the same thread,
    even while every handler is busy, so a crashed worker's job comes back without any
    extra process. Idle polling starts at ``poll`` and doubles up to ``max_poll``.
    A handler taking a second argument gets the attempt's ``Lease``: its ``lost`` is set
    when a heartbeat is refused, or when no heartbeat has been acknowledged for the lease
    less a tenth (the worker's own clock, so a cut-off worker learns it too).
    ``log`` gets each line, prefixed with the worker's name, as it is made; a ``LineLog``
    (the ``leaselab worker`` command's) gets the lines of one turn of the loop together
    (its completions, then the claims made with them), unless one says a wait begins.
    A job may run ``timeout`` seconds at most (``Queue.enqueue(timeout=)``, else the worker's
    ``job_timeout``) and go ``beat_timeout`` seconds at most without its handler calling
    ``lease.beat()``: past either, the pulse stops renewing that lease and writes the attempt as timed
    out, so the job is retried (after the backoff) or dead, whatever the handler does. Python cannot
    stop the handler's thread: its slot stays out of service until the handler returns, and once
    every slot is (at once, with one slot) ``on_hung`` is called (``leaselab worker`` exits, status 5),
    or the worker stops claiming and says so. ``stop()`` lets the handlers finish for ``grace``
    seconds, then hands every job still held back to the queue at once (``Queue.release``).
    A worker made from a path opens its own queue, with a ``call_timeout`` below the lease, and closes
    it in ``close()`` (or a ``with`` block); a queue passed in stays the caller's, settings and all, and
    on a server must come with a ``call_timeout`` below the lease (``CallTimeoutTooLong`` if not).
    ``run()`` on the main thread handles SIGTERM, Ctrl-C and the parent's death as the ``leaselab
    worker`` command does, unless ``signals=False``. ``journal``: a folder where the worker appends
    what the queue told it (each claim, each acknowledged outcome; ``worker.journal``), for
    ``leaselab check --journal``; None (the default) keeps none.
    ``queues``: the named queues it serves (``handler`` serves the default queue alone otherwise): a list
    of names that ``handler`` serves, or {name: handler} (``leaselab.worker.routing``). Its claims take
    jobs from those queues only, each job to its queue's handler.
    ``schedules``: periodic ``Schedule`` objects whose ticks a thread of the worker enqueues while ``run()``
    runs (``leaselab.worker.scheduler``); any number of workers may run the same ones.
    """

    def __init__(
        self,
        queue_or_path: Queue | str | os.PathLike,
        handler: Handler | str | None = None,
        name: str | None = None,
        lease: float = DEFAULT_LEASE,
        poll: float = 0.05,
        *,
        max_poll: float = 1.0,
        reap_every: float | None = None,
        exit_when_idle: bool = False,
        log: Log | None = None,
        concurrency: int = 1,
        signals: bool = True,
        job_timeout: float | None = None,
        beat_timeout: float | None = None,
        grace: float | None = DEFAULT_GRACE,
        journal: str | os.PathLike | None = None,
        queues: Queues | None = None,
        schedules: Sequence[Schedule] = (),
    ):
        # The handlers first: a bad handler path must not leave a fresh, empty queue file behind.
        loaded: dict[Any, Callable[..., Any]] = {}  # one import or check per handler, however many queues it serves
        self.handlers: dict[str, Callable[..., Any]] = {}
        for served, given in handlers_by_queue(handler, queues).items():
            key = given if isinstance(given, str) else id(given)
            if key not in loaded:
                function = load_handler(given) if isinstance(given, str) else given
                if not callable(function):
                    raise HandlerError(f"handler must be callable or 'module:function', got {given!r}")
                _refuse_coroutine(function, getattr(given, "__qualname__", repr(given)))
                loaded[key] = function
            self.handlers[served] = loaded[key]
        # The named queues its claims take jobs from, in the order given; what each claim names them by
        # (the default queue's name itself, which the queue takes without checking it again).
        self.queues: tuple[str, ...] = tuple(self.handlers)
        self._serves: str | tuple[str, ...] = DEFAULT_QUEUE if self.queues == (DEFAULT_QUEUE,) else self.queues
        # One handler for every queue is called as it is; several, through the job's queue.
        self.handler: Callable[..., Any] = next(iter(loaded.values())) if len(loaded) == 1 else ByQueue(self.handlers)
        self.lease = positive("lease", lease)
        self.poll = positive("poll", poll)
        self.max_poll = max(self.poll, positive("max_poll", max_poll))
        self.reap_every = min(self.lease, 1.0) if reap_every is None else positive("reap_every", reap_every)
        self.concurrency = integer("concurrency", concurrency, 1)
        self.job_timeout = None if job_timeout is None else positive("job_timeout", job_timeout)
        self.beat_timeout = None if beat_timeout is None else positive("beat_timeout", beat_timeout)
        self.grace = None if grace is None else number("grace", grace)
        if self.grace is not None and self.grace < 0:
            raise ValueError(f"grace must be >= 0 seconds (or None: no limit), got {grace!r}")
        if name is not None and has_unprintable(name):  # it goes into every log line and row: one line each
            raise ValueError(f"name must not hold control characters, got {name!r}")
        # A queue the worker opened from a path is its own to close (close(), or ``with``); a
        # queue it was given stays the caller's: changing its call timeout would reconnect it, under
        # whatever the caller was doing with it.
        self._owns_queue = not isinstance(queue_or_path, Queue)
        if isinstance(queue_or_path, Queue):
            self.queue = queue_or_path
            _refuse_calls_past(self.queue, self.lease)
        else:
            self.queue = Queue(queue_or_path, call_timeout=CALL_TIMEOUT_SHARE * self.lease)
        self.name = name or f"worker-{os.getpid()}"
        self._prefix = f"{self.name}: "  # every line the worker writes begins with its name
        # What the queue told this worker, for ``leaselab check --journal`` (off unless asked: journal.py).
        self._journal = Journal(journal, self.name) if journal is not None else None
        self.exit_when_idle = exit_when_idle
        self.signals = signals
        self.stats = WorkerStats()
        self._log_fn = log
        # A LineLog (the command's) takes a turn's lines at once: one stamp, one write. Any other
        # log gets each line as it is made.
        self._log_lines = log.lines if isinstance(log, LineLog) else None
        self._turn: list[str] | None = None  # the lines of the turn in progress, written at its end
        self._stop = threading.Event()
        self._wants_lease = wants_lease(self.handler)
        self._leases: Leases | None = None
        self._pulse: Pulse | None = None
        self.fault: str | None = None  # the transient fault the worker is waiting out, if any
        # Called (on the pulse's thread) when a heartbeat or a reap finds the queue file gone, while a
        # handler may still run: ``leaselab worker`` exits there and then (status 4). None: the worker
        # says so, claims no more, and run() raises QueueFileGone at its next call on the queue.
        self.on_file_gone: Callable[[QueueFileGone], None] | None = None
        # Called (on the pulse's thread) with the jobs whose handlers hold every slot past their
        # timeouts: ``leaselab worker`` exits there (status 5). None: the worker says so and stops.
        self.on_hung: Callable[[list[int]], None] | None = None
        # Called (on the grace's timer thread) with what the grace's end handed back, when handlers
        # were still running then: ``leaselab worker`` exits there. None: run() returns without them.
        self.on_grace_out: Callable[[dict[int, str]], None] | None = None
        self._hung: list[int] = []  # the jobs whose handlers run on past their timeouts, holding slots
        self._hung_lock = threading.Lock()
        self._slots: _Inline | _Threads | None = None
        self._abandoned = False  # the grace ran out: run() returns without waiting for its handlers
        self._grace_timer: threading.Timer | None = None
        # Periodic schedules this worker enqueues the ticks of while it runs (any number of workers may
        # run the same ones: each tick is enqueued once). Their payloads are checked now, not at a tick.
        for schedule in schedules:
            if not isinstance(schedule, Schedule):
                raise TypeError(f"schedules must be leaselab.periodic.Schedule objects, got {schedule!r}")
            self.queue.check_payload(schedule.payload)
        self.scheduler = Scheduler(self.queue, schedules, self.log, max_wait=self.max_poll) if schedules else None

    def close(self) -> None:
        """Close the queue the worker opened from a path; a queue passed in is left open for its owner."""
        if self._owns_queue:
            self.queue.close()
        if self._journal is not None:
            self._journal.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log(self, message: str) -> None:
        """Write one line to the worker's log, prefixed with its name, at once (from any thread)."""
        if self._log_fn is not None:
            self._log_fn(self._prefix + message)

    def _log(self, message: str) -> None:
        """A line from the loop's own thread: kept until the end of the turn if one is in progress."""
        if self._turn is not None:
            self._turn.append(self._prefix + message)
        elif self._log_fn is not None:
            self._log_fn(self._prefix + message)

    def _log_now(self, message: str) -> None:
        """A line that must not wait for the turn's end (a wait about to begin): written, with the
        turn's lines before it, at once."""
        self._log(message)
        self._write_turn(keep_open=True)

    def _begin_turn(self) -> None:
        """Hold the loop's lines from here to ``_write_turn``, if the log can take them at once."""
        self._turn = [] if self._log_lines is not None else None

    def _write_turn(self, keep_open: bool = False) -> None:
        """Write the turn's lines in order, in one write, and end it unless ``keep_open``."""
        lines = self._turn
        self._turn = [] if keep_open and lines is not None else None
        if lines and self._log_lines is not None:  # a turn holds lines only for a log that takes them
            self._log_lines(lines)

    def queue_idle(self) -> bool:
        """True when no job of the queues it serves is pending or running: what ``exit_when_idle`` waits for.

        Retried through transient faults; also True when a stop came while it waited.
        """
        return self.outlast("idle check", self._queue_idle) in (True, STOPPED)

    def idle_wait(self, seconds: float) -> None:
        """Wait while there is nothing to claim, at most ``seconds``; a stop ends the wait at once."""
        self._stop.wait(seconds)

    def stop(self) -> None:
        """Ask the loop to claim no more, finish the jobs it holds and return; after ``grace`` seconds,
        the jobs still held are handed back to the queue at once (``release_held``)."""
        if self._stop.is_set():
            return
        self._stop.set()
        running = len(self.held())  # a handler given up at its timeout is no job of this worker's now
        if not running:
            return
        if self.grace is None:
            self.log(f"stopping: finishing {_jobs(running)}")
            return
        self.log(f"stopping: finishing {_jobs(running)}, at most {self.grace:g}s")
        self._grace_timer = threading.Timer(self.grace, self._grace_ran_out)
        self._grace_timer.daemon = True
        self._grace_timer.start()

    def held(self) -> list[int]:
        """The ids of the jobs whose handlers are running now, under leases this worker still renews."""
        leases = self._leases
        return [] if leases is None else sorted(lease.job.id for lease in leases.renewable())

    def release_held(self, why: str) -> dict[int, str]:
        """Hand every job this worker still holds back to the queue at once, fenced (``Queue.release``),
        and say so (``why`` says why); their handlers' outcomes are dropped when they return. Returns
        {job id: new status}. A job that could not be handed back (the database is unreachable) comes
        back when its lease runs out: its lease is no longer renewed either way."""
        leases, pulse = self._leases, self._pulse
        if leases is None or pulse is None:
            return {}
        with pulse.beating:  # no beat in flight renews what is being handed back
            held = leases.renewable()
            for lease in held:
                lease.give_up(f"was handed back ({why})")
        if not held:
            return {}
        try:
            released = self.queue.release([(lease.job.id, lease.token) for lease in held])
        except LeaselabError as exc:
            ids = ", ".join(str(lease.job.id) for lease in held)
            self.log(f"{why}: could not hand back jobs {ids} ({exc}): they come back when their leases run out")
            return {}
        statuses = {job_id: status.value for job_id, status in released.items()}
        if statuses:
            said = ", ".join(f"{job_id} ({status})" for job_id, status in sorted(statuses.items()))
            self.log(f"{why}: handed back jobs {said}")
        return statuses

    def _grace_ran_out(self) -> None:  # on the timer's thread
        if self._leases is None or not self.held():
            return
        assert self.grace is not None  # the timer runs only with a grace
        released = self.release_held(f"grace of {self.grace:g}s ran out")
        self._abandoned = True
        if self.on_grace_out is not None:
            self.on_grace_out(released)
            return
        slots = self._slots
        if slots is not None:
            slots.wake()  # run() returns now; the handlers' threads end when they do

    def _timed_out(self, lease: Lease, reason: str, status: str | None) -> None:  # on the pulse's thread
        job = lease.job
        then = "" if status is None else f", {status} now"
        self.log(
            f"job {job.id} (attempt {job.attempts}) {reason}: given up{then}; its handler runs on "
            "and holds its slot until it returns"
        )
        with self._hung_lock:
            self._hung.append(job.id)
            hung = list(self._hung)
        if decisions.out_of_service(len(hung), self.concurrency):
            if self.on_hung is not None:
                self.on_hung(hung)
                return
            self.log(f"every slot holds a handler past its timeout (jobs {', '.join(map(str, hung))}): stopping")
            self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def outlast(self, what: str, call: Callable[[], T], again: Callable[[], T] | None = None) -> T | faults.Stopped:
        """``call()`` retried through transient faults, logged; see ``leaselab.worker.outlast``."""
        return outlast(what, call, stop=self._stop, log=self._log_now, again=again, state=self)

    # -- the loop -------------------------------------------------------------

    def run(self, max_jobs: int | None = None) -> WorkerStats:
        """Process jobs until stopped, ``max_jobs`` claimed, or idle with ``exit_when_idle``.

        On a program's main thread, unless made with ``signals=False``, it behaves as the
        ``leaselab worker`` command does (``process.ProcessControl``) until it returns: SIGTERM and
        a first Ctrl-C finish the jobs it holds and return, a second Ctrl-C exits the program at once
        (status 130, the jobs back when their leases run out), and the program exits (status 3) if
        the process that started it is gone. The signal handlers before are back when it returns.
        """
        if self.signals and not ProcessControl.active and threading.current_thread() is threading.main_thread():
            with ProcessControl(self.log) as control:
                control.attach(self)
                return self._run(max_jobs)
        return self._run(max_jobs)

    def _run(self, max_jobs: int | None) -> WorkerStats:
        slots = (
            _Inline(self.handler, self._wants_lease)
            if self.concurrency == 1
            else _Threads(self.concurrency, self.handler, self._wants_lease, self.name)
        )
        running = 0
        wait_for = self.poll
        self._slots, self._abandoned = slots, False
        if self.scheduler is not None:
            self.scheduler.start()
        with self._running():
            try:
                starting: list[Lease] = []
                woken: list[Finished] = []  # what the wait at the bottom of the loop returned
                while not self._abandoned:
                    for lease in starting:  # one slot: the handler runs here, now
                        slots.start(lease)
                    running += len(starting)
                    starting = []
                    finished, woken = woken or slots.finished(timeout=0), []
                    if finished:
                        running -= len(finished)
                        starting = self._finish(finished, self._free(running, max_jobs))[1]
                        wait_for = self.poll
                        continue
                    free = self._free(running, max_jobs)
                    if free:
                        starting = self._claim(free)
                        if starting:
                            wait_for = self.poll
                            continue
                    if not running:
                        if self.stopping or (max_jobs is not None and self.stats.claimed >= max_jobs):
                            break
                        if self.exit_when_idle and self.queue_idle():
                            break
                        self.queue.wait_for_work(wait_for, self._stop)  # on PostgreSQL, an enqueue wakes it early
                        wait_for = min(wait_for * 2, self.max_poll)
                        continue
                    # Wake when a handler finishes, or after a poll interval to refill free slots.
                    woken = slots.finished(timeout=self.poll if free else None)
            finally:
                if self.scheduler is not None:
                    self.scheduler.stop()
                if self._grace_timer is not None:
                    self._grace_timer.cancel()
                slots.shutdown(wait=not self._abandoned)
                self._slots = None
        return self.stats

    def process(self, job: Job) -> str:
        """Run the handler on one claimed job and write its outcome; 'completed', 'failed' or 'lost'.

        Exactly one job: nothing is claimed with the completion.
        """
        with self._running():
            [lease] = self._hold([job], sent=None)
            slot = _Inline(self.handler, self._wants_lease)
            slot.start(lease)
            outcomes, _ = self._finish(slot.finished(timeout=0), 0)
        return outcomes[id(lease)]

    @contextmanager
    def _running(self) -> Iterator[None]:
        """The pulse and the lease deadlines for the length of a run; re-entrant (process() inside run())."""
        if self._pulse is not None:
            yield
            return
        self._leases = Leases(on_expired=self._gave_up)
        try:
            with Pulse(
                self.queue,
                self._leases,
                self.lease,
                self.reap_every,
                self.log,
                on_reaped=self._reaped,
                on_gone=self._file_gone,
                on_timed_out=self._timed_out,
                latencies=self.stats.heartbeat_latencies,
            ) as self._pulse:
                yield
        finally:
            self._leases.close()
            self._pulse = self._leases = None

    def _free(self, running: int, max_jobs: int | None) -> int:
        """How many jobs to claim now: the free slots, within ``max_jobs``, none once stopping."""
        return decisions.claims_to_make(self.concurrency, running, self.stats.claimed, max_jobs, self._stop.is_set())

    def _claim(self, n: int) -> list[Lease]:
        token, sent = new_token(), elapsed()
        assert self._leases is not None  # made by run(), the only caller
        self._begin_turn()
        tried = [token]  # every token this claim was sent under: a retry takes a fresh one
        retries: list[Any] = []  # what keeps a retry's token, let go with the first's

        def again() -> list[Job]:
            fresh = new_token()
            retries.append(leases.keeping(fresh))
            done = list(tried)
            tried.append(fresh)
            return decisions.recover_claim(self.queue, done, fresh, n, self.name, self.lease, self._serves)

        leases = self._leases
        try:
            with leases.keeping(token):  # from the send to _hold, the pulse's reap keeps these jobs
                try:
                    jobs = self.outlast(
                        "claim",
                        lambda: self.queue.claim_many(n, self.name, self.lease, token=token, queues=self._serves),
                        again=again,
                    )
                except InvalidPayload as exc:  # the queue already failed that job; take the next
                    self._log(f"skipped a damaged job: {exc}")
                    return []
                if jobs is STOPPED:
                    return []
                return self._hold(jobs, sent)
        finally:
            for keeping in retries:
                keeping.__exit__(None, None, None)
            self._write_turn()

    def _hold(self, jobs: list[Job], sent: float | None) -> list[Lease]:
        """A lease for each job just claimed (the claim sent at ``sent`` on ``clock.elapsed``), held from now on."""
        leases = []
        for job in jobs:
            self.stats.claimed += 1
            self._log(f"claimed job {job.id} (attempt {job.attempts}/{job.max_attempts})")
            leases.append(Lease(job, self.lease, sent=sent, timeout=self.job_timeout, beat_timeout=self.beat_timeout))
        assert self._leases is not None  # made by run(), whose turns call this
        self._leases.add(*leases)
        if self._journal is not None and leases:
            self._journal.claimed([(lease.job.id, lease.job.attempts, lease.token) for lease in leases])
        return leases

    def _finish(self, finished: list[Finished], free: int) -> tuple[dict[int, str], list[Lease]]:
        """Write the outcome of every finished handler: fail what raised, then complete the rest and
        refill ``free`` slots in one transaction. Returns (each attempt's outcome by ``id`` of its
        lease, the leases claimed)."""
        # No beat from here on (none can be refused for a job finished here), and kept from the worker's
        # own reaper until the outcomes are written: a lease that runs out meanwhile (a freeze) must not
        # hand the job to anyone, this worker included. The refill's claims too, as in _claim.
        # The turn's lines (outcomes, then claims) are written at its end, together.
        refill = new_token()
        assert self._pulse is not None  # made by run(), the only caller
        self._begin_turn()
        try:
            with self._pulse.hand_in(map(_LEASE, finished), refill):
                return self._write_outcomes(finished, free, refill)
        finally:
            self._write_turn()

    def _write_outcomes(self, finished: list[Finished], free: int, refill: str) -> tuple[dict[int, str], list[Lease]]:
        outcomes: dict[int, str] = {}
        completions: list[tuple[Lease, Any]] = []
        for lease, result, error in finished:
            job = lease.job
            what = decisions.verdict(lease.refused, error)
            if lease.given_up is not None:  # given up at its timeout, or handed back: not this attempt's to write
                self.stats.lost += 1
                with self._hung_lock:
                    if job.id in self._hung:
                        self._hung.remove(job.id)
                self._log(
                    f"job {job.id} (attempt {job.attempts}): its handler returned after it "
                    f"{lease.given_up}: not written"
                )
                outcomes[id(lease)] = "lost"
            elif what is decisions.Verdict.DROP:
                self.stats.lost += 1
                why = f"{type(error).__name__}: {error}" if error is not None else "result not written"
                self._log(f"job {job.id} (attempt {job.attempts}) ended without its lease: {why}")
                outcomes[id(lease)] = "lost"
            elif what is decisions.Verdict.COMPLETE:
                completions.append((lease, result))
            else:  # the whole traceback is kept; the log's line shows its summary
                assert error is not None  # the verdict fails only an attempt whose handler raised
                outcomes[id(lease)] = self._fail(lease, failure.described(error), failure.summary(error))
        claimed: list[Lease] = []
        if completions:
            done, claimed = self._complete_and_claim(completions, free, refill)
            outcomes.update(done)
        return outcomes, claimed

    def _complete_and_claim(
        self, completions: list[tuple[Lease, Any]], free: int, token: str
    ) -> tuple[dict[int, str], list[Lease]]:
        items = [(lease.job.id, lease.token, result) for lease, result in completions]
        sent = elapsed()

        if len(items) == 1 and free == 1:  # one slot: the single call, cheaper than a batch of one
            ((job_id, job_token, result),) = items

            def first():
                try:
                    job = self.queue.complete_and_claim(
                        job_id, job_token, result, self.name, self.lease, next_token=token, queues=self._serves
                    )
                except LeaseLost:  # refused and recorded; nothing was claimed
                    return [job_id], []
                return [], ([] if job is None else [job])
        else:

            def first():
                return self.queue.complete_many_and_claim(
                    items, free, self.name, self.lease, token=token, queues=self._serves
                )

        def again():
            # The first try may have committed unseen: completions already written under their own
            # tokens count as done (the queue tells), and jobs that try claimed are found by token.
            return decisions.recover_completion(self.queue, items, token)

        outcomes: dict[int, str] = {}
        try:
            outcome = self.outlast("complete", first, again=again)
        except InvalidPayload:
            # One result is not JSON: nothing was written, nothing claimed. Complete them one by one
            # so only that job fails; the loop refills the slots.
            for lease, result in completions:
                try:
                    refused = self.outlast(
                        f"complete job {lease.job.id}",
                        partial(self.queue.complete_many, [(lease.job.id, lease.token, result)]),
                    )
                except InvalidPayload as exc:
                    outcomes[id(lease)] = self._fail(lease, f"handler returned a result that is not JSON: {exc}")
                    continue
                outcomes[id(lease)] = self._completed(lease, refused)
            return outcomes, []
        if outcome is STOPPED:
            for lease, _ in completions:
                outcomes[id(lease)] = self._unwritten(lease)
            return outcomes, []
        refused, jobs = outcome
        for lease, _ in completions:
            outcomes[id(lease)] = self._completed(lease, refused)
        return outcomes, self._hold(jobs, sent)

    def _completed(self, lease: Lease, refused: Any) -> str:
        if refused is STOPPED:
            return self._unwritten(lease)
        job = lease.job
        if job.id in refused:
            self.stats.lost += 1
            self._log(f"lease lost on job {job.id} (attempt {job.attempts}): result not written")
            return "lost"
        self.stats.completed += 1
        self._log(f"completed job {job.id}")
        if self._journal is not None:
            self._journal.outcome("completed", job.id, job.attempts, lease.token)
        return "completed"

    def _fail(self, lease: Lease, error: str, shown: str | None = None) -> str:
        job = lease.job
        try:
            status = self.outlast(f"fail job {job.id}", lambda: self.queue.fail(job.id, lease.token, error))
        except LeaseLost:
            self.stats.lost += 1
            self._log(f"lease lost on job {job.id} (attempt {job.attempts}): failure not written")
            return "lost"
        if status is STOPPED:
            return self._unwritten(lease)
        self.stats.failed += 1
        self._log(f"failed job {job.id}: {error if shown is None else shown} -> {status}")
        if self._journal is not None:
            self._journal.outcome("failed", job.id, job.attempts, lease.token, str(getattr(status, "value", status)))
        return "failed"

    def _unwritten(self, lease: Lease) -> str:
        self.stats.lost += 1
        self._log(f"stopped with job {lease.job.id}'s outcome unwritten: its lease runs out and it runs again")
        return "lost"

    def _gave_up(self, lease: Lease) -> None:  # on whichever thread found the deadline passed
        assert lease.seconds is not None  # only a lease with a length has a deadline
        self.log(
            f"lease of job {lease.job.id} (attempt {lease.job.attempts}) may have run out: no heartbeat "
            f"acknowledged for {lease.seconds - lease.margin:g}s; its handler's lease.check() now raises"
        )

    def _file_gone(self, exc: QueueFileGone) -> None:  # on the pulse's thread
        if self.on_file_gone is not None:
            self.on_file_gone(exc)
            return
        self.log(str(exc))
        self._stop.set()

    def _reaped(self, moved: list[int]) -> None:
        self.stats.reaped += len(moved)

    def _queue_idle(self) -> bool:
        by_queue = self.queue.stats_by_queue()  # the queues this worker serves: others' jobs are not its to wait for
        counts = [by_queue.get(name, {}) for name in self.queues]
        return not any(of_queue.get("pending", 0) or of_queue.get("running", 0) for of_queue in counts)
