"""The nemesis: applies a ``Schedule`` to the workers of a ``Fleet`` (and to a server that chaos started).

Each step hits the process that fills its slot when the step comes (``Slots``). A kill is
followed at once by a new worker in the slot, so the fleet keeps its size; a pause, a
partition and a clock jump end after the step's ``lasts`` (SIGCONT, heal, the clock put
right); a server crash holds the server lock while the server is down, so whoever enqueues
under that lock never wonders whether a batch went in. A step that cannot be applied (its
worker died by itself, the fleet's own connection was cut by a crash) is recorded with the
reason, never raised: the run goes on and the record says what really happened.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import TransientError
from ..harness.errors import WorkerNotRunning
from ..harness.fleet import Fleet
from . import jumps
from .failover import Failover
from .schedule import Schedule, Step

SETTLE_TIMEOUT = 30.0  # seconds a recovered server gets to take the fleet's own connection again


@dataclass(frozen=True)
class Applied:
    """A step as it really happened: when (seconds from the start), to which process, or why not.

    ``until`` is when a lasting fault really ended (a server crash: when the server was back),
    which may be sooner than ``at + step.lasts`` (a step that began late is cut short by the
    next on its slot) or later; None for an instant fault.
    """

    step: Step
    at: float
    process: str | None
    missed: str | None = None
    until: float | None = None


class Slots:
    """A run's worker slots and the process that fills each; a killed worker's slot gets a new process.

    The first process of slot ``w2`` is named ``w2``, its replacements ``w2-2``, ``w2-3``...
    ``concurrency`` is one number for every slot or one per slot, taken in turn. With
    ``clock_dir`` every worker can have its clock jump (``jumps``), each reading its own file there.
    With ``journal`` every worker keeps its journal in that folder (``leaselab worker --journal``).
    """

    def __init__(
        self,
        fleet: Fleet,
        names: tuple[str, ...],
        *,
        handler: str,
        lease: float,
        concurrency: tuple[int, ...] = (1,),
        env: dict[str, str] | None = None,
        clock_dir: Path | None = None,
        journal: Path | None = None,
        poll: float = 0.02,
        max_poll: float = 0.2,
    ):
        self.fleet, self.names, self.handler, self.lease = fleet, names, handler, lease
        self.concurrency, self.env, self.clock_dir = concurrency, dict(env or {}), clock_dir
        self.poll, self.max_poll, self.journal = poll, max_poll, journal
        self.killed: list[str] = []  # every process a kill step ended, in order
        self._current: dict[str, str] = {}
        self._generation = dict.fromkeys(names, 0)

    def fill(self, slot: str) -> str:
        """Start a new worker in ``slot`` and return its name."""
        self._generation[slot] += 1
        gen = self._generation[slot]
        name = slot if gen == 1 else f"{slot}-{gen}"
        env, launcher = dict(self.env), None
        if self.clock_dir is not None:
            env.update(jumps.environment(self.clock_file(name)))
            launcher = jumps.LAUNCHER
        slots = self.concurrency[self.names.index(slot) % len(self.concurrency)]
        self.fleet.spawn(
            self.handler,
            lease=self.lease,
            name=name,
            poll=self.poll,
            max_poll=self.max_poll,
            concurrency=slots,
            env=env,
            launcher=launcher,
            journal=self.journal,
        )
        self._current[slot] = name
        return name

    def current(self, slot: str) -> str:
        """The name of the process in ``slot`` now."""
        return self._current[slot]

    def clock_file(self, name: str) -> Path:
        assert self.clock_dir is not None  # a clock fault is only scheduled with a clock_dir
        return self.clock_dir / f"{name}.clock"


class Nemesis:
    """Applies ``schedule`` to ``slots`` from the moment ``run()`` is called; ``stop()`` ends it early.

    ``server`` (a ``PgServer`` chaos started) is what ``server-crash`` steps restart, each
    under ``server_lock``. Every lasting fault still open when the run ends, early or not,
    is ended then: no worker is left frozen, cut off or on a wrong clock. ``failover`` strikes the
    ``failover`` steps on a replicated server chaos started (``failover.Failover``).
    """

    def __init__(
        self,
        schedule: Schedule,
        slots: Slots,
        *,
        server: Any = None,
        server_lock: threading.Lock | None = None,
        clock: Callable[[], float] = time.monotonic,
        failover: Failover | None = None,
    ):
        self.schedule, self.slots, self.fleet = schedule, slots, slots.fleet
        self.failover = failover
        self.server, self.server_lock = server, server_lock or threading.Lock()
        self.clock = clock
        self.applied: list[Applied] = []
        self.started: float | None = None  # the ``clock`` reading every ``Applied.at`` counts from
        self._stop = threading.Event()
        self._open: dict[str, tuple[Step, str]] = {}  # slot -> the lasting step on it and the process hit
        self._open_applied: dict[str, int] = {}  # slot -> the index in ``applied`` of the step open on it

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> list[Applied]:
        """Apply every step at its offset from now (late, if the one before took longer); return the record."""
        start = self.started = self.clock()
        # (due, 1, order, step) begins a step; (due, 0, order, step) ends one, first when both are due.
        agenda = [(s.at, 1, i, s) for i, s in enumerate(self.schedule.steps)]
        heapq.heapify(agenda)
        order = len(agenda)
        try:
            while agenda:
                due, begins, _, step = heapq.heappop(agenda)
                if self._stop.wait(max(0.0, start + due - self.clock())):
                    break
                if not begins:
                    assert step.worker is not None  # only a fault on a worker's slot is ended later
                    self._end(step.worker, step)
                    continue
                if step.worker in self._open:  # the one before on this slot began late: it ends now
                    self._end(step.worker)
                applied = self._begin(step, self.clock() - start)
                if step.worker is None and applied.missed is None:  # the server is back: its crash is over
                    applied = replace(applied, until=self.clock() - start)
                self.applied.append(applied)
                if step.worker in self._open:
                    self._open_applied[step.worker] = len(self.applied) - 1
                    order += 1
                    heapq.heappush(agenda, (applied.at + step.lasts, 0, order, step))
        finally:
            for slot in list(self._open):
                self._end(slot)
        return self.applied

    def _begin(self, step: Step, at: float) -> Applied:
        if step.fault == "server-crash":
            try:
                with self.server_lock:
                    self.server.restart(step.lasts)
                    self._settle()
            except Exception as exc:  # a server that would not come back: recorded; the drain will show the rest
                return Applied(step, at, None, f"{type(exc).__name__}: {exc}")
            return Applied(step, at, None)
        if step.fault == "failover":
            assert self.failover is not None  # a failover is only scheduled on a replicated server
            try:
                missed = self.failover.strike(self.server_lock)
                if missed is None:
                    self._settle()
            except Exception as exc:  # a failover that broke the server: recorded; the run checks it is up
                return Applied(step, at, None, f"{type(exc).__name__}: {exc}")
            return Applied(step, at, None, missed)
        assert step.worker is not None  # every other fault is on a worker's slot
        name = self.slots.current(step.worker)
        try:
            if step.fault == "kill":
                self.fleet.kill(name)
                self.slots.killed.append(name)
                self.slots.fill(step.worker)
            elif step.fault == "pause":
                self._open[step.worker] = (step, name)
                self.fleet.pause(name)
            elif step.fault == "partition":
                self._open[step.worker] = (step, name)
                self.fleet.partition(name)
            elif step.fault == "drop-reply":
                self.fleet.drop_reply(name)
            elif step.fault == "clock":
                jumps.jump(self.fleet.pid(name), self.slots.clock_file(name), step.jump)
                self._open[step.worker] = (step, name)
        except WorkerNotRunning as exc:
            # It died by itself (a handler that crashes it, say): the slot gets a new worker.
            self._open.pop(step.worker, None)
            self.slots.fill(step.worker)
            return Applied(step, at, name, str(exc))
        except (TransientError, ProcessLookupError) as exc:
            # The signal or the cut went out; only the fleet's look at the jobs table failed (a
            # server just crashed). The fault stands and is ended on time.
            return Applied(step, at, name, f"{type(exc).__name__}: {exc}")
        return Applied(step, at, name)

    def _end(self, slot: str, step: Step | None = None) -> None:
        """End the lasting fault open on ``slot`` (only if it is ``step``, when given)."""
        if slot not in self._open or (step is not None and self._open[slot][0] is not step):
            return
        step, name = self._open.pop(slot)
        index = self._open_applied.pop(slot, None)
        if index is not None and self.started is not None:
            self.applied[index] = replace(self.applied[index], until=self.clock() - self.started)
        try:
            if step.fault == "pause":
                self.fleet.resume(name)
            elif step.fault == "partition":
                self.fleet.heal(name)
            elif step.fault == "clock":
                jumps.jump(self.fleet.pid(name), self.slots.clock_file(name), 0.0)
        except (WorkerNotRunning, ProcessLookupError, TransientError):
            pass  # killed meanwhile, or the fleet's connection is down: nothing left to put right in it

    def _settle(self) -> None:
        """Wait until the fleet's own connection works again after a restart, so its next look succeeds."""
        deadline = self.clock() + SETTLE_TIMEOUT
        while True:
            try:
                self.fleet.queue.stats()
                return
            except TransientError:
                if self.clock() > deadline:
                    raise
                time.sleep(0.05)


def run_in_thread(nemesis: Nemesis) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``nemesis.run()`` on a daemon thread; the list gets what it raised, if anything."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            nemesis.run()
        except BaseException as exc:  # re-raised by the run on its own thread
            raised.append(exc)

    thread = threading.Thread(target=target, name="chaos-nemesis", daemon=True)
    thread.start()
    return thread, raised
