"""The simulated world: the real ``Queue`` on real SQLite, workers that make the real worker's decisions,
and faults, all on virtual time, in one process, one step at a time.

A step is one action, named by a tuple that replays it: a worker claims, a handler finishes and its
outcome is sent, the pulse beats or reaps, a call held in the network arrives, the clock moves to the
next moment anything is due, or a fault strikes (a crash, a pause, a cut link, a call held in flight,
a reply lost). Every queue call goes to the real statements at the calling worker's "now" and to the
specification (``model.Model``); the first disagreement, or a broken promise about the workers (an
effect made without the lease, a job taken back from a live worker, a job run again for no fault),
is a ``Violation``. What each worker decides (when its lease is gone on its own clock, when to beat,
what to write for a finished attempt, what to ask after a lost reply, what its reaper keeps) is
``leaselab.worker.decisions``, the code the real ``Worker`` runs; the world supplies only the time,
the network and the faults.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..backoff import Backoff
from ..errors import LeaselabError, LeaseLost, TransientError
from ..job import Job
from ..queue import Queue
from ..worker import decisions
from ..worker.lease import Lease
from .model import Model, Violation

EPOCH = 1_767_225_600.0  # the queue's clock at virtual time 0: 2026-01-01T00:00:00Z
# Every fault the world can strike, by name.
FAULTS = ("crash", "pause", "cut", "delay", "lose", "power", "hang", "suspend", "jump")
# Faults that need the queue on a disk that can lose power (APSW's volatile disk, leaselab.harness.powercut):
# slower, and APSW is an extra, so a scenario strikes them only when it names them.
ON_DISK = ("power",)
# A handler that never returns while its worker's pulse goes on: struck only where the jobs have a timeout
# (without one, the job is held for ever, as promised: that is what a timeout is for).
NEEDS_TIMEOUT = ("hang",)
HANG_TIMEOUT = 1.2  # leases: the jobs' timeout where a scenario strikes hangs and names none of its own
# Faults of a worker's clock: a suspend (its host sleeps and its monotonic clock stands still meanwhile, as
# CLOCK_MONOTONIC does across a suspend) and a jump (its clock steps forward). Never struck at a worker already
# paused: a clock's history is then one freeze or step at a time, which ``SimWorker.at`` inverts exactly.
# Struck where a scenario names them (``explore.PORTFOLIO``'s scenario of clocks apart does): among the default
# faults they would thin out the others', and the witnesses of what those find would grow.
CLOCK_FAULTS = ("suspend", "jump")
DEFAULT_FAULTS = tuple(f for f in FAULTS if f not in ON_DISK + NEEDS_TIMEOUT + CLOCK_FAULTS)
TICK = 0.001  # past a deadline by this much: the reaper's "lease_until < now" holds
LATE = 0.05  # of the lease: a worker whose due step waits longer than this, while time moves, was slow
Action = tuple[Any, ...]
UNKNOWN = object()  # a value not worked out yet
# Time moving on, tick after tick, until the earliest lease the queue holds has ended, no worker acting
# meanwhile (each tick as "tick" takes it, slow workers counted late alike): the shorthand a shrunk
# witness uses for a run of ticks. Random schedules and exhaustive exploration take ticks one at a time.
EXPIRE: tuple[Any, ...] = ("expire",)
ROW_COLUMNS = (
    "id",
    "status",
    "attempts",
    "token",
    "worker",
    "priority",
    "max_attempts",
    "run_at",
    "lease_until",
    "result",
)
ROWS = "SELECT " + ", ".join(ROW_COLUMNS) + " FROM jobs"  # what the model is compared with
SOME_ROWS = ROWS + " WHERE id IN ({marks})"  # the rows of the jobs the model changed and no statement touched
# Every row a statement inserts or updates is handed, as it is then, to a function of the world's own on the
# queue's connection, and every row it deletes is noted there as gone (temporary triggers calling it: nothing of
# the queue's schema or statements changes, and the rows a statement reports as changed do not count its
# triggers). After each call only those rows, and those of the jobs the specification changed, are compared: any
# other row is the one the last comparison found equal to the model's. The rows come straight from the
# statements, with no statement of the world's own to read them back; a write the queue rolled back would be
# noted too, but the queue rolls back only on an error, and an error from the queue ends the schedule.
NOTE_ROW, NOTE_GONE = "leaselab_sim_row", "leaselab_sim_gone"  # the world's functions, by their SQL names
_NEW = ", ".join(f"new.{name}" for name in ROW_COLUMNS)
TOUCHED = (
    f"CREATE TEMP TRIGGER touched_insert AFTER INSERT ON main.jobs BEGIN SELECT {NOTE_ROW}({_NEW}); END",
    "CREATE TEMP TRIGGER touched_update AFTER UPDATE ON main.jobs BEGIN"
    f" SELECT {NOTE_GONE}(old.id) WHERE old.id IS NOT new.id; SELECT {NOTE_ROW}({_NEW}); END",
    f"CREATE TEMP TRIGGER touched_delete AFTER DELETE ON main.jobs BEGIN SELECT {NOTE_GONE}(old.id); END",
)
CHECKPOINT = "PRAGMA wal_checkpoint(TRUNCATE)"  # the WAL into the file, synced at either durability


class HandlerFailed(Exception):
    """A simulated handler's planned failure."""


class Interleaved(Exception):
    """Raised by ``between`` inside a simulated call: the operation's first transaction has run, and
    ``rest`` (its next one) is left in flight for a later step, so another worker may act in between."""

    def __init__(self, rest: Callable[[], Any]):
        self.rest = rest
        super().__init__("the rest of an operation in flight")


def between(rest: Callable[[], Any]) -> Any:
    """A boundary between two transactions of one queue operation (a planted two-step claim is one):
    inside a simulated call the world holds ``rest`` back and lets any other action come first; anywhere
    else ``rest`` runs at once."""
    if World.driving:
        raise Interleaved(rest)
    return rest()


@dataclass(frozen=True)
class Scenario:
    """What is simulated: how many workers and jobs, the lease, each handler's running time, the faults."""

    workers: int = 2
    jobs: int = 2
    lease: float = 1.0
    slots: int = 1  # each worker's concurrency
    work: float = 0.4  # a handler's running time, in lease-seconds of virtual time
    max_attempts: int = 3
    faults: tuple[str, ...] = DEFAULT_FAULTS
    max_faults: int = 2  # at most this many faults in one schedule
    skew: float = 0.0  # each worker's clock runs up to this fraction fast or slow
    backoff: float = 0.2  # the queue's backoff base, seconds
    timeout: float | None = None  # each job's timeout, in leases (the fourth of every four runs 1.6)
    # The queue's durability (``queue.DURABILITIES``) where it is on a disk that can lose power ("power" among
    # the faults): what a power cut may take is what that setting allows (``World._power_cut``).
    durability: str = "full"

    def job_specs(self) -> list[dict[str, Any]]:
        """The jobs, the same for every schedule: every third delayed, every second fails once, the third
        of every four fails every attempt (so it must end dead, its attempts spent), the fourth of every
        four runs longer than the lease (so it lives on heartbeats), priorities mixed."""
        return [
            {
                "priority": i % 2,
                "delay": 0.5 * self.lease if i % 3 == 2 else 0.0,
                "fails": self.max_attempts if i % 4 == 2 else (1 if i % 2 == 1 else 0),
                "work": self.lease * (1.6 if i % 4 == 3 else self.work * (1 + 0.25 * (i % 3))),
            }
            for i in range(self.jobs)
        ]


@dataclass
class Attempt:
    """One claim of one job, as the world saw it: who held it, what its handler did, what faults hit it."""

    job: int
    number: int
    token: str
    worker: str
    start: float
    ended: str | None = None  # "returned", "raised", "lost"
    faults: set[str] = field(default_factory=set)


@dataclass
class Call:
    """A call a worker sent: ``apply`` runs it on the queue; ``reply`` or ``fault`` tells the worker."""

    what: str
    apply: Any
    reply: Any
    fault: Any
    again: Any = None  # the call to make instead on a retry (a recovery), if not ``apply``
    held: bool = False  # held in the network, applied by a later "deliver" step
    rest: Any = None  # the rest of an operation whose first transaction ran (see ``between``)
    faults: set[str] = field(default_factory=set)  # what hit it on the way: the attempts it starts count them
    lose: bool = False  # applied, but the answer is lost
    retry_at: float | None = None  # waiting out a transient fault until this virtual time
    wait: float | None = None  # the last retry wait, on the worker's clock


class SimWorker:
    """One worker's state: its leases (real ``Lease`` objects on its own clock), its running handlers, its calls."""

    def __init__(self, world: World, name: str, rate: float):
        self.world, self.name, self.rate = world, name, rate
        self.offset = world.t * (1 - rate)  # its clock starts at the world's time
        # What clock faults did to it, in the order struck: ("suspend", start, end) froze it from start to end
        # (world times); ("jump", at, seconds) stepped it forward by seconds at world time at.
        self.shifts: list[tuple[str, float, float]] = []
        self.leases: dict[str, Lease] = {}  # held: renewed by the pulse until handed in
        self.limited = 0  # how many of them have a limit (``limited``): only those can be overdue
        self.ends: dict[str, float] = {}  # token -> virtual time its handler returns
        self.kept: list[str] = []  # tokens of claims and outcomes in flight: see decisions.keep_from_reaper
        self.loop: Call | None = None
        self.pulse: Call | None = None
        self.next_beat = self.clock() + decisions.beat_every(world.scenario.lease)
        self.next_reap = self.clock()
        self.paused_until = -math.inf
        self.cut_until = -math.inf
        self.armed: str | None = None  # "delay" or "lose": what happens to the next call
        self.empty_at = -math.inf  # when a claim last came back empty: the next waits for time to move
        self.alive = True

    def clock(self) -> float:
        """The worker's monotonic clock: the world's time, running at its own rate, less what a suspend froze and
        plus what a jump stepped."""
        if not self.shifts:  # asked for at every step of every schedule: the common case without a call more
            return self.world.t * self.rate + self.offset
        return self.reading(self.world.t)

    def reading(self, t: float) -> float:
        """What the worker's clock reads at world time ``t``."""
        clock = t * self.rate + self.offset
        for kind, start, size in self.shifts:
            if kind == "suspend":
                clock -= self.rate * min(max(t - start, 0.0), size - start)
            elif t >= start:
                clock += size
        return clock

    def at(self, clock: float) -> float:
        """The world's time when the worker's clock first reads ``clock``."""
        t = (clock - self.offset) / self.rate
        if not self.shifts:  # asked for many times a step: the common case without a loop
            return t
        for kind, start, size in self.shifts:  # each shift moves the times after it, in the order struck
            if t > start:
                t = t + (size - start) if kind == "suspend" else max(start, t - size / self.rate)
        return t

    def paused(self) -> bool:
        return self.world.t < self.paused_until

    def running(self) -> int:
        return len(self.ends)

    def renewable(self) -> list[Lease]:
        return [lease for lease in self.leases.values() if not lease.refused]

    def hold(self, lease: Lease) -> None:
        """Hold ``lease`` until it is handed in (``hand_in``)."""
        self.leases[lease.token] = lease
        self.limited += limited(lease)

    def hand_in(self, token: str) -> Lease:
        """The lease held under ``token``, held no longer."""
        lease = self.leases.pop(token)
        self.limited -= limited(lease)
        return lease

    def overdue(self) -> list[tuple[Lease, str]]:
        """The leases the pulse must give up now (``decisions.overdue`` on the worker's own clock), with why."""
        if not self.limited:  # asked for at every step: without a limit, none is looked at
            return []
        now, found = None, []
        for lease in self.leases.values():
            # An attempt with no limit is never overdue: skipped, as the real ``Leases.overdue`` skips it.
            if lease.refused or not limited(lease):
                continue
            if now is None:
                now = self.clock()
            reason = lease.overdue(now)
            if reason is not None:
                found.append((lease, reason))
        return found

    def can_hang(self) -> bool:
        """True when a handler of this worker is running and may yet return: one that can be made to hang."""
        return any(end < math.inf for end in self.ends.values())


def limited(lease: Lease) -> bool:
    """True when the attempt under ``lease`` has a limit (a timeout or a beat timeout): one without is never
    overdue (``decisions.overdue_at`` says None), and the real ``Leases.overdue`` skips it."""
    return lease.timeout is not None or lease.beat_timeout is not None


class World:
    """One schedule's world. ``step(action)`` takes one enabled action; ``enabled()`` lists them."""

    driving = False  # True while a world applies a call: ``between`` holds the rest of it back

    def __init__(self, scenario: Scenario, *, handler: Any = None, seed: int = 0):
        self.scenario = scenario
        self.t = 0.0
        self.db_now = EPOCH
        self.backoff = Backoff(base=scenario.backoff, cap=60.0)
        self.disk: Any = None  # the volatile disk the queue is on, for a power cut; None: in memory
        self._folder: str | None = None
        self.queue = self._on_disk() if "power" in scenario.faults else self._in_memory()
        self.model = Model(self.backoff)
        self.workers: dict[str, SimWorker] = {}
        self.attempts: dict[str, Attempt] = {}
        self.trace: list[str] = []
        self.faults = 0
        self.started = 0
        self.handler = handler
        if hasattr(handler, "start"):  # a recorded handler (sim.handlers): an empty outside world per schedule
            handler.start()
        self.effects: list[tuple[int, str, float]] = []
        self.replying: Call | None = None  # the call whose answer is being taken in
        self._tokens = random.Random(f"tokens-{seed}")  # deterministic tokens: the same seed, the same trace
        skews = random.Random(f"skew-{seed}")
        timeout = None if scenario.timeout is None else scenario.timeout * scenario.lease
        for spec in scenario.job_specs():
            job_id = self.queue.enqueue(
                {"work": spec["work"], "fails": spec["fails"]},
                priority=spec["priority"],
                delay=spec["delay"],
                max_attempts=scenario.max_attempts,
                timeout=timeout,
            )
            self.model.enqueue(job_id, spec["priority"], EPOCH + spec["delay"], scenario.max_attempts, timeout)
        if self.disk is not None:  # the jobs were enqueued before the schedule began, and are on the disk
            self.queue.backend.connection.execute(CHECKPOINT)  # type: ignore[attr-defined]  # the SQL backends'
        # What a power cut may leave (``_power_cut``): the table as after any commit from the last one the disk
        # must keep on, oldest first; and which of those the last call that acknowledged an enqueue, a claim or
        # a completion left, with that call.
        self.kept: list[dict[int, Any]] = [dict(self.model.jobs)]
        self.acknowledged: tuple[int, str] = (0, "the enqueues")
        for _ in range(scenario.workers):
            self._start(1 + skews.uniform(-scenario.skew, scenario.skew))
        self._watch_rows()
        self._enabled: list[Action] | None = None  # enabled() and next_time() of this step, once worked out
        self._next: float | None | object = UNKNOWN
        self._due: tuple[list[float], bool] | None = None  # _jobs_due(), until the next call
        self._fault_actions: dict[tuple[str, bool], list[Action]] = {}  # _faults_of(), worked out once
        self._claims_of: dict[int, int] = {}  # _claims(), by the handlers running, worked out once
        self._live: list[SimWorker] | None = None  # _live_now(), until the step ends
        self._jobs_anew()

    def _watch_rows(self) -> None:
        """Note every row a statement touches from now on (``TOUCHED``: temporary triggers on the queue's own
        connection), and compare every row at the next call: on a new queue, and after a power cut reopened it."""
        self._db = self.queue.backend.connection  # type: ignore[attr-defined]  # the SQL backends' escape hatch
        # id -> the row as the last statement that touched it left it (``ROW_COLUMNS``), or None: gone.
        touched: dict[int, tuple | None] = {}
        self._touched = touched

        def note_row(*row: Any) -> None:
            touched[row[0]] = row

        def note_gone(job_id: int) -> None:
            touched[job_id] = None

        self._db.create_function(NOTE_ROW, len(ROW_COLUMNS), note_row)
        self._db.create_function(NOTE_GONE, 1, note_gone)
        for statement in TOUCHED:
            self._db.execute(statement)
        self._compared = False  # the first call compares every row; each later one, those touched since

    def _jobs_anew(self) -> None:
        """Work out afresh which jobs are running and pending and when each one's own time comes."""
        self._due_of: dict[int, float] = {}  # job id -> when its lease or its delay ends, in virtual time
        self._running: set[int] = set()
        self._waiting: set[int] = set()  # pending
        self._due, self._pending = None, False
        self._jobs_changed(self.model.jobs.keys())

    def _jobs_changed(self, ids: Any) -> None:
        """The jobs ``ids`` changed in the model (only a call, or a power cut, changes them): what depends on them
        is worked out again for those alone."""
        if not ids:  # a call that changed no job (a reap that found nothing)
            return
        jobs = self.model.jobs
        due = None if self._due is None else self._due[0]  # once worked out, kept in order as times change
        for job_id in ids:
            job = jobs[job_id]
            self._running.discard(job_id)
            self._waiting.discard(job_id)
            at = self._due_of.pop(job_id, None)
            if at is not None and due is not None:
                del due[bisect.bisect_left(due, at)]
            at = None
            if job.status == "running":
                self._running.add(job_id)
                if job.lease_until is not None:
                    at = job.lease_until - EPOCH + TICK
            elif job.status == "pending":
                self._waiting.add(job_id)
                at = job.run_at - EPOCH + TICK
            if at is not None:
                self._due_of[job_id] = at
                if due is not None:
                    bisect.insort(due, at)
        self._due = None if due is None else (due, bool(self._running))
        self._pending = bool(self._waiting)  # some job is pending

    def _in_memory(self) -> Queue:
        return Queue(":memory:", clock=lambda: self.db_now, backoff=self.backoff)

    def _on_disk(self) -> Queue:
        """The queue on a file of a fresh volatile disk, at the scenario's durability: at ``"full"`` an
        acknowledged enqueue, claim or completion is promised to survive a power cut; at ``"normal"`` only what
        a sync (a checkpoint) wrote is, and a cut may take back the commits after it."""
        from ..harness.powercut import VolatileDisk  # APSW: only a scenario with a power cut needs it

        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="leaselab-sim-")
            Queue(os.path.join(self._folder, "q.db")).close()
        self.disk = VolatileDisk()
        return Queue(
            self.disk.target(os.path.join(self._folder, "q.db")),
            clock=lambda: self.db_now,
            backoff=self.backoff,
            durability=self.scenario.durability,
            create=False,
        )

    # -- what can happen next -----------------------------------------------------------------

    def enabled(self) -> list[Action]:
        """Every action that can be taken now, in a fixed order (worked out once per step)."""
        if self._enabled is None:
            self._enabled = self._work_out_enabled()
        return self._enabled

    def calm(self) -> list[Action]:
        """The actions of ``enabled()`` that are no fault, in its order: what a drain chooses from (the faults
        that could strike are not worked out at all, unless ``enabled()`` was asked for this step already)."""
        if self._enabled is not None:
            return [a for a in self._enabled if not self.is_fault(a)]
        return self._work_out_enabled(faults=False)

    def _work_out_enabled(self, faults: bool = True) -> list[Action]:
        actions: list[Action] = []
        live = self._live_now()
        pending, running = self._pending, self._jobs_due()[1]
        t = self.t
        for w in live:
            if t < w.paused_until:
                continue
            loop = w.loop
            if loop is None:
                if w.ends and min(w.ends.values()) <= t:
                    actions.append(("finish", w.name))
                elif pending and w.empty_at < t and self._claims(w):
                    actions.append(("claim", w.name))
            elif loop.retry_at is not None and loop.retry_at <= t:
                actions.append(("retry", w.name))
            if w.pulse is None:
                if w.limited and w.overdue():  # only a lease with a limit can be overdue
                    actions.append(("give_up", w.name))
                elif w.leases and w.at(w.next_beat) <= t and w.renewable():
                    actions.append(("beat", w.name))
                elif running and w.at(w.next_reap) <= t:
                    actions.append(("reap", w.name))
        for w in self.workers.values():
            if w.loop is not None and w.loop.held:
                actions.append(("deliver", w.name, "loop"))
            if w.pulse is not None and w.pulse.held:
                actions.append(("deliver", w.name, "pulse"))
        if faults and self.faults < self.scenario.max_faults:
            for w in live:
                actions.extend(
                    a
                    for a in self._faults_of(w.name, w.armed is not None)
                    if (a[0] != "hang" or w.can_hang()) and (a[0] not in CLOCK_FAULTS or t >= w.paused_until)
                )
        if faults and self.faults < self.scenario.max_faults and self.disk is not None and live:
            actions.append(("power",))
        if len(live) < self.scenario.workers:
            actions.append(("start",))
        due = self._jobs_due()[0]
        # Time can move when anything is due later: a job's own time often says so without working out when.
        if (due and t < due[-1] < math.inf) or self.next_time() is not None:
            actions.append(("tick",))
        return actions

    def _faults_of(self, name: str, armed: bool) -> list[Action]:
        """The faults that may strike worker ``name`` (one whose next call is ``armed`` already: no delay, no lose)."""
        key = (name, armed)
        if key not in self._fault_actions:
            actions: list[Action] = []
            for kind in self.scenario.faults:
                if kind in ON_DISK or (kind in ("delay", "lose") and armed):  # ON_DISK: the whole machine's
                    continue
                if kind in NEEDS_TIMEOUT and self.scenario.timeout is None:
                    continue
                if kind == "pause":
                    for length in (0.5, 1.5):
                        actions.append(("pause", name, length))
                elif kind in ("cut", "suspend"):
                    actions.append((kind, name, 1.5))
                elif kind == "jump":
                    actions.append(("jump", name, 1.0))
                else:
                    actions.append((kind, name))
            self._fault_actions[key] = actions
        return self._fault_actions[key]

    def is_fault(self, action: Action) -> bool:
        return action[0] in FAULTS

    def live(self) -> list[SimWorker]:
        return [w for w in self.workers.values() if w.alive]

    def _live_now(self) -> list[SimWorker]:
        """``live()``, worked out once a step: only a step starts a worker or ends one."""
        if self._live is None:
            self._live = self.live()
        return self._live

    def next_time(self) -> float | None:
        """The next virtual time anything is due: a handler, a beat, a reap, a retry, a lease's end, a delay's end
        (worked out once per step)."""
        if self._next is UNKNOWN:
            self._next = self._work_out_next_time()
        return self._next  # type: ignore[return-value]  # worked out just above

    def _work_out_next_time(self) -> float | None:
        t = self.t
        due, running = self._jobs_due()
        at = bisect.bisect_right(due, t)
        best = due[at] if at < len(due) else math.inf  # the least time later than now, so far
        for w in self._live_now():
            if t < w.paused_until < best:
                best = w.paused_until
            if t < w.cut_until < best:
                best = w.cut_until
            for at_ in w.ends.values():
                if t < at_ < best:
                    best = at_
            if running:
                at_ = w.at(w.next_reap)
                if t < at_ < best:
                    best = at_
            if w.loop is not None and w.loop.retry_at is not None and t < w.loop.retry_at < best:
                best = w.loop.retry_at
            if w.leases:
                renewable = w.renewable()
                if renewable:
                    at_ = w.at(w.next_beat)
                    if t < at_ < best:
                        best = at_
                    for lease in renewable if w.limited else ():
                        if not limited(lease):
                            continue  # no limit: never overdue (decisions.overdue_at says None)
                        due_ = decisions.overdue_at(lease.started, lease.timeout, lease.progressed, lease.beat_timeout)
                        if due_ is not None and t < w.at(due_) < best:
                            best = w.at(due_)
                for lease in w.leases.values():
                    if lease.deadline is not None:
                        at_ = w.at(lease.deadline) + TICK
                        if t < at_ < best:
                            best = at_
        return best if best < math.inf else None

    def _jobs_due(self) -> tuple[list[float], bool]:
        """When the jobs' own times come (a running job's lease ends, a pending job's delay ends), in order, and
        whether any job is running: worked out once, then kept in order by ``_jobs_changed`` for the jobs a call
        changed, as only a call changes the jobs."""
        if self._due is None:
            self._due = sorted(self._due_of.values()), bool(self._running)
        return self._due

    def lease_end(self) -> float | None:
        """When the earliest lease the queue holds will have ended (the reaper may take the job then), if one will."""
        ends = [
            job.lease_until - EPOCH + TICK
            for job in self.model.jobs.values()
            if job.status == "running" and job.lease_until is not None and job.lease_until - EPOCH + TICK > self.t
        ]
        return min(ends) if ends else None

    def idle(self) -> bool:
        """True when no call is in flight or waiting to be retried."""
        return not any(w.loop or w.pulse for w in self.workers.values())

    def settled(self) -> bool:
        """True when every job is done or dead."""
        return not self._running and not self._waiting

    # -- taking one action ----------------------------------------------------------------------

    def step(self, action: Action) -> None:
        try:
            self._take(action)
        finally:
            self._enabled, self._next, self._live = None, UNKNOWN, None  # the next step works them out afresh

    def _take(self, action: Action) -> None:
        kind = action[0]
        if kind == "expire":
            end = self.lease_end()
            while end is not None and self.t < end and self.next_time() is not None:
                self.step(("tick",))
            return
        if kind == "tick":
            later = self.next_time()
            assert later is not None
            self._late(later)
            self.t = later
            self._watch()
            return
        if kind == "start":
            self._start(1.0)
            return
        if kind == "power":
            self.faults += 1
            self._power_cut()
            return
        w = self.workers[action[1]]
        if self.is_fault(action):
            self.faults += 1
            self._strike(w, action)
            return
        if kind == "deliver":
            self._deliver(w, action[2])
        elif kind == "claim":
            self._claim(w)
        elif kind == "finish":
            self._finish(w)
        elif kind == "retry":
            self._retry(w)
        elif kind == "beat":
            self._beat(w)
        elif kind == "give_up":
            self._give_up(w)
        elif kind == "reap":
            self._reap(w)

    def _late(self, later: float) -> None:
        """Time moving to ``later`` past a step a worker could have taken long before (its handler done, a
        beat or a retry due) is a slow worker, as after a pause: its attempts count that as a fault."""
        slack, t = LATE * self.scenario.lease, self.t
        for w in self._live_now():
            if t < w.paused_until:  # paused
                continue
            loop = w.loop
            if (
                (loop is None and w.ends and later > min(w.ends.values()) + slack)
                or (w.pulse is None and w.leases and later > w.at(w.next_beat) + slack and w.renewable())
                or (loop is not None and loop.retry_at is not None and later > loop.retry_at + slack)
            ):
                for token in list(w.leases) + w.kept:
                    if token in self.attempts:
                        self.attempts[token].faults.add("late")

    def _watch(self) -> None:
        """The real worker's deadline watcher (``leaselab.worker.lease``): a lease past its own deadline is
        lost as soon as the time comes, not only when the handler checks; a paused worker's watcher waits, and
        the moment a pause ends its threads race: the pulse may beat before the watcher looks, so it looks at
        the next moment."""
        t = self.t
        for w in self._live_now():
            if t > w.paused_until:  # not paused, nor at the moment its pause ends
                for lease in w.leases.values():
                    lease.expired()

    def note(self, line: str) -> None:
        self.trace.append(f"{self.t:8.3f}  {line}")

    # -- the workers' actions (their decisions are decisions.*) ---------------------------------

    def _start(self, rate: float) -> None:
        self.started += 1
        name = f"w{self.started}"
        self.workers[name] = SimWorker(self, name, rate)
        self.note(f"{name} starts")

    def _claims(self, w: SimWorker) -> int:
        running = len(w.ends)
        if running not in self._claims_of:  # asked for at every step: the decision taken once for each count
            self._claims_of[running] = decisions.claims_to_make(self.scenario.slots, running, 0, None, False)
        return self._claims_of[running]

    def _token(self) -> str:
        return f"{self._tokens.getrandbits(64):016x}"

    def _claim(self, w: SimWorker) -> None:
        n, token, sent = self._claims(w), self._token(), w.clock()
        lease = self.scenario.lease
        w.kept.append(token)

        def apply() -> list[Job]:
            return self._op(
                w, f"claim {n}", lambda: self.queue.claim_many(n, w.name, lease, token=token), claim=(n, token)
            )

        tried = [token]

        def again() -> list[Job]:
            fresh, done = self._token(), list(tried)
            tried.append(fresh)
            w.kept.append(fresh)
            return self._op(
                w,
                f"claim {n} again",
                lambda: decisions.recover_claim(self.queue, done, fresh, n, w.name, lease),
                claim=(n, fresh),
                tried=done,
            )

        def reply(jobs: list[Job]) -> None:
            for t in tried:
                w.kept.remove(t)
            if not jobs:
                w.empty_at = self.t
            self._hold(w, jobs, sent)

        self._send(w, "loop", Call("claim", apply, reply, self._loop_fault(w), again=again))

    def _hold(self, w: SimWorker, jobs: list[Job], sent: float) -> None:
        for job in jobs:
            lease = Lease(job, self.scenario.lease, sent=sent, clock=w.clock)
            w.hold(lease)
            w.ends[lease.token] = self.t + job.payload["work"] / w.rate
            attempt = self.attempts[lease.token] = Attempt(job.id, job.attempts, lease.token, w.name, self.t)
            if w.cut_until > self.t:  # a fault still under way hits the attempt that starts in it
                attempt.faults.add("cut")
            if w.paused():
                attempt.faults.add("pause")
            if self.replying is not None:  # a claim that met a fault on its way hands it to what it took
                attempt.faults |= self.replying.faults
            for call in (w.loop, w.pulse):  # a call still held back holds up the beat or the outcome
                if call is not None and call.held:
                    attempt.faults.add("delay")
            if w.armed is not None:
                attempt.faults.add(w.armed)
            self.note(f"{w.name} holds job {job.id} (attempt {job.attempts})")

    def _finish(self, w: SimWorker) -> None:
        finished = [token for token, end in w.ends.items() if end <= self.t]
        outcomes = []
        for token in finished:
            del w.ends[token]
            lease = w.hand_in(token)
            result, error = self._run_handler(w, lease)
            outcomes.append((lease, result, error))
            w.kept.append(token)  # handed in: kept from the reaper until its outcome is written
        completions, failures = [], []
        for lease, result, error in outcomes:
            verdict = decisions.verdict(lease.refused, error)
            if verdict is decisions.Verdict.DROP:
                self.note(f"{w.name} drops job {lease.job.id}'s outcome: its lease is lost")
                w.kept.remove(lease.token)
            elif verdict is decisions.Verdict.COMPLETE:
                completions.append((lease, result))
            else:
                failures.append((lease, f"{type(error).__name__}: {error}"))
        if failures:
            self._send_failures(w, failures, completions)
        elif completions:
            self._send_completions(w, completions)

    def _run_handler(self, w: SimWorker, lease: Lease) -> tuple[Any, BaseException | None]:
        attempt = self.attempts[lease.token]
        try:
            lease.check()
        except LeaseLost as exc:
            attempt.ended = "lost"
            self.note(f"{w.name}'s handler of job {lease.job.id} finds its lease gone on its own clock")
            return None, exc
        self._effect(w, lease)
        if self.handler is not None:
            try:
                result = self.handler(lease.job)
            except Violation:  # its effects broke a promise (sim.handlers): the finding, not the handler's failure
                raise
            except Exception as exc:
                attempt.ended = "raised"
                self.note(f"{w.name}'s handler of job {lease.job.id} raises")
                return None, exc
            attempt.ended = "returned"
            self.note(f"{w.name}'s handler of job {lease.job.id} returns")
            return result, None
        if lease.job.attempts <= lease.job.payload["fails"]:
            attempt.ended = "raised"
            self.note(f"{w.name}'s handler of job {lease.job.id} raises")
            return None, HandlerFailed("planned failure")
        attempt.ended = "returned"
        self.note(f"{w.name}'s handler of job {lease.job.id} returns")
        return {"job": lease.job.id, "attempt": lease.job.attempts}, None

    def _effect(self, w: SimWorker, lease: Lease) -> None:
        """The handler's write to an outside store that checks no fence: it is right only while the
        attempt still holds the job on the queue's own clock."""
        job = self.model.jobs[lease.job.id]
        now = self._queue_now(w)
        self.effects.append((lease.job.id, lease.token, self.t))
        if job.status != "running" or job.token != lease.token or self.model.expired_at(job.id, now):
            if "suspend" in self.attempts[lease.token].faults:
                # A clock that stood still while the host slept cannot tell the worker its lease is gone: no
                # check of its own can, which is why every write it sends the queue is fenced (and why an
                # outside store must fence too). The queue's fence is judged when the outcome arrives.
                self.note(
                    f"{w.name}'s handler of job {lease.job.id} writes its effect after its lease ended: "
                    "its clock did not count the suspend"
                )
                return
            raise Violation(
                "effect_without_lease",
                f"{w.name}'s handler of job {lease.job.id} (attempt {lease.job.attempts}) wrote its effect at "
                f"{self.t:.3f} after its lease had ended (the job is {job.status}, attempt {job.attempts}): "
                f"its lease.check() passed, on the worker's own clock",
            )

    def _send_completions(self, w: SimWorker, completions: list[tuple[Lease, Any]]) -> None:
        items = [(lease.job.id, lease.token, result) for lease, result in completions]
        refill, sent = self._token(), w.clock()
        free = self._claims(w)
        lease_s = self.scenario.lease
        w.kept.append(refill)

        def apply() -> tuple[list[int], list[Job]]:
            return self._op(
                w,
                f"complete {[i for i, _, _ in items]} and claim {free}",
                lambda: self.queue.complete_many_and_claim(items, free, w.name, lease_s, token=refill),
                done=items,
                claim=(free, refill) if free else None,
            )

        def again() -> tuple[list[int], list[Job]]:
            return self._op(
                w,
                f"complete {[i for i, _, _ in items]} again",
                lambda: decisions.recover_completion(self.queue, items, refill),
                done=items,
                claim=None,
            )

        def reply(answer: tuple[list[int], list[Job]]) -> None:
            refused, jobs = answer
            for lease, _ in completions:
                w.kept.remove(lease.token)
                self.note(
                    f"{w.name}: job {lease.job.id} "
                    + ("refused: lease lost" if lease.job.id in refused else "completed")
                )
            w.kept.remove(refill)
            self._hold(w, jobs, sent)

        self._send(w, "loop", Call("complete", apply, reply, self._loop_fault(w), again=again))

    def _send_failures(
        self, w: SimWorker, failures: list[tuple[Lease, str]], completions: list[tuple[Lease, Any]]
    ) -> None:
        lease, error = failures[0]

        def apply() -> str:
            return self._op(
                w, f"fail {lease.job.id}", lambda: self.queue.fail(lease.job.id, lease.token, error), fail=lease
            )

        def reply(status: Any) -> None:
            w.kept.remove(lease.token)
            self.note(f"{w.name}: job {lease.job.id} failed -> {status}")
            if len(failures) > 1:
                self._send_failures(w, failures[1:], completions)
            elif completions:
                self._send_completions(w, completions)

        def fault(exc: Exception) -> None:
            if isinstance(exc, LeaseLost):
                w.kept.remove(lease.token)
                self.note(f"{w.name}: job {lease.job.id}'s failure refused: lease lost")
                reply_rest()
            else:
                self._loop_fault(w)(exc)

        def reply_rest() -> None:
            w.loop = None
            if len(failures) > 1:
                self._send_failures(w, failures[1:], completions)
            elif completions:
                self._send_completions(w, completions)

        self._send(w, "loop", Call("fail", apply, reply, fault))

    def _beat(self, w: SimWorker) -> None:
        held = w.renewable()
        sent, lease_s, sent_at = w.clock(), self.scenario.lease, EPOCH + self.t
        pairs = [(lease.job.id, lease.token) for lease in held]

        def apply() -> dict[int, float]:
            return self._op(
                w,
                f"heartbeat {[i for i, _ in pairs]}",
                lambda: self.queue.heartbeat_many(pairs, lease_s),
                beat=pairs,
                sent=sent_at,
            )

        def reply(renewed: dict[int, float]) -> None:
            stale = decisions.superseded((lease.job.id, lease.job.attempts) for lease in held)
            for lease in held:
                if decisions.beat_refused(lease.job.id, renewed, (lease.job.id, lease.job.attempts) in stale):
                    lease.refuse()
                    self.note(f"{w.name}: heartbeat refused for job {lease.job.id}")
                else:
                    lease.renewed(sent)
            w.next_beat = decisions.next_beat(sent, lease_s, True, w.clock())

        def fault(exc: Exception) -> None:
            w.next_beat = decisions.next_beat(sent, lease_s, False, w.clock())
            self.note(f"{w.name}: heartbeat failed: {exc}")

        self._send(w, "pulse", Call("beat", apply, reply, fault))

    def _give_up(self, w: SimWorker) -> None:
        """The pulse gives up an attempt past its timeout (``decisions.overdue``): its lease is no longer
        renewed nor kept, and the attempt is written as timed out, fenced. Its handler runs on, holding its
        slot; a worker whose every slot is so held exits (``decisions.out_of_service``), as the real one does
        for its supervisor to start another."""
        lease, reason = w.overdue()[0]
        lease.give_up(reason)
        attempt = self.attempts[lease.token]
        attempt.faults.add("timeout")
        self.note(f"{w.name} gives job {lease.job.id} up: it {reason}")  # decisions.overdue's words

        def apply() -> str:
            return self._op(
                w,
                f"timeout of {lease.job.id}",
                lambda: self.queue.time_out(lease.job.id, lease.token, reason),
                fail=lease,
            )

        def reply(status: Any) -> None:
            self.note(f"{w.name}: job {lease.job.id} timed out -> {status}")
            self._out_of_service(w)

        def fault(exc: Exception) -> None:  # not tried again: the lease runs out and a reaper takes the job
            self.note(f"{w.name}: job {lease.job.id}'s timeout not written: {exc}")  # its lease runs out
            self._out_of_service(w)

        self._send(w, "pulse", Call("timeout", apply, reply, fault))

    def _out_of_service(self, w: SimWorker) -> None:
        hung = sum(1 for token in w.ends if w.leases[token].given_up is not None)
        if w.alive and decisions.out_of_service(hung, self.scenario.slots):
            w.alive = False
            self.note(f"{w.name} exits: every slot holds a handler past its timeout")

    def _reap(self, w: SimWorker) -> None:
        keep = decisions.keep_from_reaper([lease.token for lease in w.renewable()], w.kept)
        mine = {lease.token for lease in w.renewable()} | set(w.kept)

        def apply() -> list[int]:
            before = dict(self.model.jobs)  # its rows never change: a later call puts new ones in their place
            moved = self._op(w, "reap", lambda: self.queue.reap(keep=keep), reap=keep)
            for job_id in moved:
                token = before[job_id].token or ""
                if w.alive and (token in mine or token.split("-")[0] in mine):
                    raise Violation(
                        "reaped_own_job",
                        f"{w.name}'s reaper took back job {job_id}, which {w.name} itself still holds: a live "
                        f"worker's jobs are no crashed worker's",
                    )
            return moved

        def reply(moved: list[int]) -> None:
            w.next_reap = w.clock() + min(self.scenario.lease, 1.0)
            if moved:
                ids = ", ".join(str(i) for i in sorted(moved))
                self.note(f"{w.name} reaped {'job' if len(moved) == 1 else 'jobs'} {ids}")

        def fault(exc: Exception) -> None:
            w.next_reap = w.clock() + min(self.scenario.lease, 1.0)

        self._send(w, "pulse", Call("reap", apply, reply, fault))

    # -- the network ------------------------------------------------------------------------------

    def _loop_fault(self, w: SimWorker) -> Any:
        def fault(exc: Exception) -> None:
            call = w.loop
            assert call is not None
            call.wait = decisions.retry_wait(call.wait)
            call.retry_at = self.t + call.wait / w.rate
            self.note(f"{w.name}: {call.what} met a transient fault, retrying in {call.wait:g}s")

        return fault

    def _send(self, w: SimWorker, slot: str, call: Call) -> None:
        setattr(w, slot, call)
        if self.t < w.cut_until:
            call.faults.add("cut")
            self._failed(w, slot, call, TransientError("link cut"))
            return
        if w.armed is not None:
            call.faults.add(w.armed)
        if w.armed == "delay":
            w.armed, call.held = None, True
            self.note(f"{w.name}: {call.what} sent; held in the network")
            return
        if w.armed == "lose":
            w.armed, call.lose = None, True
        self._arrive(w, slot, call)

    def _arrive(self, w: SimWorker, slot: str, call: Call) -> None:
        if call.rest is not None:
            run, call.rest = call.rest, None
        else:
            run = call.again if call.again is not None and call.wait is not None else call.apply
        World.driving = True
        try:
            answer = run()
        except Interleaved as split:
            call.rest, call.held = split.rest, True
            self.note(f"{w.name}: {call.what}: its first transaction ran; the next is in flight")
            return
        except (TransientError, LeaseLost) as exc:
            if w.alive:
                self._failed(w, slot, call, exc)
            return
        finally:
            World.driving = False
        if not w.alive:
            return
        if call.lose:
            call.lose = False
            self.note(f"{w.name}: the reply to {call.what} is lost")
            self._failed(w, slot, call, TransientError("reply lost"))
            return
        setattr(w, slot, None)
        self.replying = call
        try:
            call.reply(answer)
        finally:
            self.replying = None

    def _failed(self, w: SimWorker, slot: str, call: Call, exc: Exception) -> None:
        if slot == "pulse" or isinstance(exc, LeaseLost):
            setattr(w, slot, None)
        call.fault(exc)

    def _retry(self, w: SimWorker) -> None:
        call = w.loop
        assert call is not None
        call.retry_at = None
        self._send(w, "loop", call)

    def _deliver(self, w: SimWorker, slot: str) -> None:
        call = getattr(w, slot)
        call.held = False
        self.note(f"{w.name}: {call.what} arrives")
        self._arrive(w, slot, call)

    # -- faults -----------------------------------------------------------------------------------

    def _strike(self, w: SimWorker, action: Action) -> None:
        kind = action[0]
        for token in list(w.leases) + list(w.kept):
            if token in self.attempts:
                self.attempts[token].faults.add(kind)
        for call in (w.loop, w.pulse):
            if call is not None:
                call.faults.add(kind)
        if kind == "crash":
            w.alive = False
            for token in w.leases:
                self.attempts[token].faults.add("crash")
            self.note(f"{w.name} crashes")
        elif kind == "pause":
            # A pause struck at a worker paused or suspended longer does not wake it sooner.
            w.paused_until = max(w.paused_until, self.t + action[2] * self.scenario.lease)
            self.note(f"{w.name} pauses for {action[2] * self.scenario.lease:g}s")
        elif kind == "cut":
            w.cut_until = self.t + action[2] * self.scenario.lease
            self.note(f"{w.name}'s link is cut for {action[2] * self.scenario.lease:g}s")
        elif kind == "suspend":
            length = action[2] * self.scenario.lease
            w.paused_until = self.t + length
            w.shifts.append(("suspend", self.t, self.t + length))
            self.note(f"{w.name}'s host suspends for {length:g}s: its monotonic clock stands still")
        elif kind == "jump":
            w.shifts.append(("jump", self.t, action[2] * self.scenario.lease))
            self.note(f"{w.name}'s clock jumps {action[2] * self.scenario.lease:g}s forward")
            for lease in w.leases.values():  # its deadline watcher wakes to a clock past its deadlines
                lease.expired()
        elif kind == "hang":
            token = min((t for t, end in w.ends.items() if end < math.inf), key=w.ends.__getitem__)
            w.ends[token] = math.inf
            self.note(f"{w.name}'s handler of job {w.leases[token].job.id} hangs: its pulse goes on")
        else:
            w.armed = kind
            self.note(
                f"{w.name}'s next call will be " + ("held in flight" if kind == "delay" else "answered into the void")
            )

    # -- every call, on the queue and on the specification ---------------------------------------------

    def _queue_now(self, w: SimWorker) -> float:
        return EPOCH + self.t

    def _op(self, w: SimWorker, what: str, call: Any, **expect: Any) -> Any:
        try:
            return self._call(w, what, call, **expect)
        finally:  # the jobs may have changed
            self._jobs_changed(self.model.changed)

    def _call(self, w: SimWorker, what: str, call: Any, **expect: Any) -> Any:
        self.db_now = now = self._queue_now(w)
        self.model.changed.clear()  # what this call changes, for _compare and _jobs_changed
        before = dict(self.model.jobs)
        after = f"{w.name}'s {what} at {self.t:.3f}"
        try:
            answer = call()
        except Interleaved as split:  # judged when the rest has run: that is when it commits
            rest = split.rest
            raise Interleaved(lambda: self._op(w, what, rest, **expect)) from None
        except LeaseLost:
            if "fail" in expect:  # refused: the specification must refuse it too
                held: Lease = expect["fail"]
                status = self.model.fail(held.job.id, held.token, now)
                if status is not None:
                    raise Violation(
                        "refused_failure",
                        f"{after}: the failure of job {held.job.id} was refused, though its token held it",
                    ) from None
            self._compare(after)
            self._note_sync(before, after)
            raise
        except TransientError:
            raise
        except LeaselabError as exc:  # the schema's own checks refused what the statement wrote
            raise Violation("queue_error", f"{after}: the queue raised {type(exc).__name__}: {exc}") from None
        self._judge(w, answer, now, after, before, **expect)
        self._compare(after)
        # A claim or completion that wrote nothing (an empty claim) commits no page, so it syncs nothing.
        if self.disk is not None:  # only a power cut asks what was synced: in memory, nothing is worked out
            durable = ("claim" in expect or "done" in expect) and self.model.jobs != before
            self._note_sync(before, after, durable=durable)
        return answer

    def _note_sync(self, before: dict, after: str, durable: bool = False) -> None:
        """What a power cut may leave, after a call (``before``: the model's jobs before it; ``durable``: it
        acknowledged an enqueue, a claim or a completion). At "full" a durable call is on the disk when it
        returns, and with it every commit before it (the WAL is written in order): the table as after it is the
        least the cut may leave. Any other commit may be lost, or kept; at "normal", every one since the
        schedule began (the setting promises nothing it syncs; a checkpoint that did sync more only means the
        disk keeps a later state of the list). What the setting promises, not what this disk happened to sync:
        a sync during a call (the WAL's header, when the log starts over) need not hold the call's commit."""
        if self.disk is None:
            return
        if durable and self.scenario.durability == "full":
            self.kept = [dict(self.model.jobs)]
        elif self.model.jobs != before:
            self.kept.append(dict(self.model.jobs))
        if durable:
            self.acknowledged = (len(self.kept) - 1, after)

    def _power_cut(self) -> None:
        """The machine loses power: the queue's file keeps only what was synced, and every worker on it dies
        (a SQLite queue and its workers share one machine). The rows read back must be the table as after one
        of the commits the cut may leave (``kept``); a real disk may keep more than this one does, never less.
        At "full" anything else is ``lost_on_power_cut``: an acknowledged write gone. At "normal" it is
        ``torn_on_power_cut`` (more lost than the last sync allows, or a state no commit made); and the rows
        being what the setting allows, the acknowledged writes the cut took back are ``acknowledged_lost``:
        what the setting costs, found and shown like a broken promise, because a claim's fence may then be
        handed out twice."""
        self.note("the power fails: every worker dies and the disk keeps only what was synced")
        for w in self.live():
            self._strike(w, ("crash", w.name))
        self.disk.cut()
        self.queue = self._on_disk()
        self._watch_rows()
        rows = self._rows()
        left, index = None, len(self.kept)
        for index in range(len(self.kept) - 1, -1, -1):  # the least lost first
            self.model.jobs = dict(self.kept[index])
            try:
                self.model.compare(rows, "the power cut")
            except Violation as wrong:
                left = wrong
                continue
            left = None
            break
        self._jobs_anew()
        if left is not None:
            if self.scenario.durability == "full":
                raise Violation(
                    "lost_on_power_cut", f"an acknowledged write did not survive the power cut: {left.message}"
                )
            raise Violation(
                "torn_on_power_cut",
                "the rows after the power cut are not the table as any commit since the last sync left it: "
                + left.message,
            )
        acknowledged, by = self.acknowledged
        promised, self.kept, self.acknowledged = self.kept[acknowledged], [dict(self.model.jobs)], (0, by)
        if index >= acknowledged:  # the disk kept every acknowledged write, and maybe more
            return
        for job_id, want in sorted(promised.items()):
            got = self.model.jobs.get(job_id)
            if got is None or (want.status, want.attempts, want.token) != (got.status, got.attempts, got.token):
                raise Violation(
                    "acknowledged_lost",
                    f"the power cut took back what {by} acknowledged: job {job_id} was {want.status} "
                    f"(attempt {want.attempts}), it is "
                    + ("gone" if got is None else f"{got.status} (attempt {got.attempts})")
                    + f" after it; durability='{self.scenario.durability}' syncs nothing before it answers, so "
                    "a power cut may take back the last commits, and a claim's fence may be handed out again",
                )

    def _compare(self, after: str) -> None:
        """The model against the queue's rows after a call: the first time every row, then the rows a statement
        touched since the last comparison and the jobs the model changed in the call (``Model.changed``).
        Any other row is as the last comparison found it, equal to the model's, so the first disagreement is
        found, and named, exactly as by comparing every row."""
        touched = self._touched
        if not self._compared:
            touched.clear()
            self._compared = True
            self.model.compare(self._rows(), after)
            return
        rows, gone = {}, set()
        if touched:
            for job_id, row in touched.items():
                if row is None:
                    gone.add(job_id)
                else:
                    rows[job_id] = _row(row)
            touched.clear()
        jobs = self.model.jobs
        changed = self.model.changed  # the jobs the model changed in this call
        if not gone and rows.keys() == changed and rows.keys() <= jobs.keys():  # the statements touched just those
            if changed:
                self.model.compare(rows, after, ids=changed)
            return
        untouched = changed - rows.keys() - gone
        if untouched:
            rows.update(self._rows(sorted(untouched)))
        ids = rows.keys() | gone | changed
        if not ids:
            return
        # A row added (read, not in the model) or gone (in the model, not read): named with the whole table.
        if not rows.keys() <= jobs.keys() or not jobs.keys().isdisjoint(ids - rows.keys()):
            self.model.compare(self._rows(), after)
        self.model.compare(rows, after, ids=ids & jobs.keys())

    def _judge(self, w: SimWorker, answer: Any, now: float, after: str, before: dict, **expect: Any) -> None:
        m, lease = self.model, self.scenario.lease
        done, claim = expect.get("done"), expect.get("claim")
        if done is not None:
            refused = answer[0]
            for job_id, token, result in done:
                ok = m.complete(job_id, token, json.loads(json.dumps(result)))
                if ok == (job_id in refused):
                    raise Violation(
                        "fence" if ok is False else "refused_completion",
                        f"{after}: the completion of job {job_id} under token {token} was "
                        + (
                            "accepted, though that token no longer held the job"
                            if not ok
                            else "refused, though its token held the job"
                        ),
                    )
                if ok and self.attempts.get(token) is not None and self.attempts[token].ended != "returned":
                    raise Violation(
                        "wrong_outcome", f"{after}: job {job_id} completed by an attempt whose handler did not return"
                    )
        if claim is not None:
            n, token = claim
            jobs = answer if done is None else answer[1]
            tried = expect.get("tried", ())  # a retry's earlier tokens: jobs held under one are the claim's
            mine = (
                {
                    j.id
                    for j in before.values()
                    if j.status == "running" and any(j.token in (t, f"{t}-{j.id}") for t in tried)
                }
                if tried
                else set()
            )
            if mine:  # a retry that found an earlier try's claims by their token: no new claim
                if {j.id for j in jobs} != mine:
                    raise Violation(
                        "held_by",
                        f"{after}: the claim's token holds jobs {sorted(mine)}, found {sorted(j.id for j in jobs)}",
                    )
            else:
                m.claim(n, w.name, lease, token, now, {j.id: j.token for j in jobs})
                for job in jobs:
                    self._rerun(job, before)
        if "beat" in expect:
            want = m.heartbeat(expect["beat"], lease, now)
            if set(answer) != want:
                raise Violation(
                    "fence" if set(answer) - want else "refused_heartbeat",
                    f"{after}: the heartbeat renewed jobs {sorted(answer)}; "
                    f"only {sorted(want)} were held by their tokens",
                )
            for job_id in want:
                job = m.jobs[job_id]
                # The worker counts the timeout on its own clock, from the claim's send (no later than the
                # queue's claim), so by the queue's clock it ends by claimed_at + timeout / rate, later by what
                # a suspend froze of its clock since (the handler stood still too); a jump only brings it sooner.
                if job.timeout is not None and job.claimed_at is not None:
                    end = job.claimed_at + job.timeout / w.rate
                    for kind, start, until in w.shifts:
                        if kind == "suspend" and EPOCH + until > job.claimed_at:
                            end += EPOCH + until - max(EPOCH + start, job.claimed_at)
                    # Judged when the worker sent it: one held in the network may arrive later, as any write may.
                    sent = expect.get("sent", now)
                    if sent > end + TICK:
                        raise Violation(
                            "renewed_past_timeout",
                            f"{after}: the heartbeat sent {sent - job.claimed_at:.3f}s into job {job_id}'s attempt "
                            f"renewed its lease, past its timeout of {job.timeout:g}s: a hung handler would hold "
                            "it for ever",
                        )
        if "fail" in expect:
            held: Lease = expect["fail"]
            status = m.fail(held.job.id, held.token, now)
            if status is None:
                raise Violation(
                    "fence",
                    f"{after}: the failure of job {held.job.id} was accepted, though its token no longer held it",
                )
            if str(answer) != status:
                raise Violation(
                    "wrong_status", f"{after}: job {held.job.id} failed to {answer}, the specification says {status}"
                )
        if "reap" in expect:
            want = m.reap(expect["reap"], now)
            if set(answer) != want:
                raise Violation(
                    "reap",
                    f"{after}: the reaper took back jobs {sorted(answer)}; "
                    f"the leases that had ended were those of {sorted(want)}",
                )

    def _rerun(self, job: Job, before: dict) -> None:
        """A job claimed again after an attempt whose handler returned (or gave its lease up): that attempt must
        have met a fault that could cost it the lease (its worker crashed, paused, was cut off, or its call was
        held in flight; or a reply was lost, for a lease given up)."""
        old = before[job.id]
        if old.attempts == 0:
            return
        last = self.attempts.get(old.token or "")
        if last is None or last.ended not in ("returned", "lost"):
            return
        # A handler that found its lease gone on its own clock had a heartbeat fail: a lost reply may do that.
        excuses = {"crash", "pause", "cut", "delay", "late", "timeout", *CLOCK_FAULTS}
        if last.ended == "lost":
            excuses.add("lose")
        if not (last.faults & excuses):
            raise Violation(
                "needless_rerun",
                f"job {job.id} is claimed again (attempt {job.attempts}) "
                f"though attempt {last.number}'s handler "
                + ("returned" if last.ended == "returned" else "gave the lease up on its own clock")
                + f" and no {', '.join(sorted(excuses))} hit {last.worker}: only "
                + (", ".join(sorted(last.faults)) or "nothing")
                + " did",
            )

    def _rows(self, ids: list[int] | None = None) -> dict[int, dict[str, Any]]:
        """Every job's row (or those of ``ids``) as the statements left it, read straight from the table (the
        model is checked against the rows, not against what the queue's own readers make of them)."""
        if ids is None:
            found = self._db.execute(ROWS).fetchall()
        else:
            found = self._db.execute(SOME_ROWS.format(marks=", ".join("?" * len(ids))), ids).fetchall()
        return {row[0]: _row(row) for row in found}

    def close(self) -> None:
        self.queue.close()
        if self.disk is not None and self.disk.powered:
            self.disk.cut()  # a disk stays registered with SQLite until it is cut
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


def _row(row: tuple) -> dict[str, Any]:
    """A row of ``ROW_COLUMNS`` as the model compares it: by name, its result decoded."""
    job = dict(zip(ROW_COLUMNS, row, strict=True))
    if job["result"] is not None:
        job["result"] = json.loads(job["result"])
    return job
