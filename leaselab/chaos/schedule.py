"""A fault schedule: seeded, printable, replayable. The same seed gives the same faults at the same offsets.

A schedule is plain data, made before anything runs: a list of ``Step(at, fault, worker)``
where ``at`` is seconds from the start of the faults and ``worker`` is a *slot* (``w1`` ..
``wN``), not a process: the process that fills the slot when the step comes is the one hit,
so a replay hits the same slots although every killed worker's replacement is a new process.
Steps that last (a pause, a partition, a clock jump, a server's down time) say for how long;
a slot is never given a second lasting fault before its first one ends.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from ..arguments import integer, positive
from .errors import FaultNotApplicable, UnknownFault
from .texts import text

FAULTS = ("kill", "pause", "partition", "drop-reply", "clock", "server-crash", "failover")
NETWORK_FAULTS = ("partition", "drop-reply")  # need a network between a worker and its queue: a server
OWN_SERVER_FAULTS = ("server-crash",)  # need a server that chaos started, and so may crash
REPLICATED_FAULTS = ("failover",)  # need a primary and a standby that chaos started
SQLITE_DEFAULT_LEAVES_OUT = ("clock",)  # a file queue trusts each worker's clock: lesson 6's known break
LASTING = ("pause", "partition", "clock")  # the slot is busy until the step ends

# How often each worker fault comes, relative to the others (the server's crashes have their own pace).
WEIGHTS = {"kill": 3, "pause": 4, "partition": 2, "drop-reply": 3, "clock": 1}
GAP = (0.2, 0.8)  # seconds between two worker faults
CRASH_GAP = (3.0, 6.0)  # seconds between two server crashes; the first comes after 2 to 5 seconds
FAILOVER_GAP = (3.0, 6.0)  # seconds between two failovers (each waits for acknowledged outcomes first, and
# takes a promotion and a new standby's copy); the first comes after 1 to 3 seconds
PAST_LEASE = (1.5, 3.0)  # a pause or a partition lasts this many leases: long enough to lose the lease
JUMP = (2.0, 5.0)  # a clock jumps by this many leases, forward or back ...
JUMP_LASTS = (2.0, 4.0)  # ... for this many leases
DOWN = (0.0, 0.3)  # a crashed server stays down this many leases: a worker still finds its unseen
# claim by its token before a reaper can give the job away


@dataclass(frozen=True)
class Step:
    """One fault: at ``at`` seconds, ``fault`` hits slot ``worker`` (None: the server) for ``lasts`` seconds."""

    at: float
    fault: str
    worker: str | None = None
    lasts: float = 0.0
    jump: float = 0.0  # clock: how far the worker's clock jumps, in seconds

    def describe(self, lang: str = "en") -> str:
        """One line: the offset, then what happens, in ``lang``."""
        return f"{self.at:6.2f}s  " + text(self.fault, lang, worker=self.worker, lasts=self.lasts, jump=self.jump)


@dataclass(frozen=True)
class Schedule:
    """What a chaos run will do, made from its seed alone; ``render`` prints it, ``steps`` replays it."""

    seed: int
    seconds: float
    workers: int
    lease: float
    faults: tuple[str, ...]
    steps: tuple[Step, ...]

    def render(self, lang: str = "en") -> str:
        head = [
            text("seed", lang, seed=self.seed),
            text("schedule", lang, n=len(self.steps), seconds=self.seconds, workers=self.workers, lease=self.lease),
        ]
        return "\n".join(head + ["  " + s.describe(lang) for s in self.steps])

    def counts(self) -> dict[str, int]:
        """How many steps of each fault, in ``FAULTS`` order; faults that never come are left out."""
        return {f: n for f in FAULTS if (n := sum(s.fault == f for s in self.steps))}

    def to_json(self) -> dict:
        return {
            "seed": self.seed,
            "seconds": self.seconds,
            "workers": self.workers,
            "lease": self.lease,
            "faults": list(self.faults),
            "steps": [asdict(s) for s in self.steps],
        }


def slots(workers: int) -> tuple[str, ...]:
    """The names of a run's worker slots: w1 .. wN."""
    return tuple(f"w{i}" for i in range(1, workers + 1))


def parse_faults(faults: str | Iterable[str]) -> tuple[str, ...]:
    """``"kill,pause"`` or ``["kill", "pause"]`` as a tuple in ``FAULTS`` order; ``UnknownFault`` names a stranger."""
    names = [f.strip() for f in faults.split(",")] if isinstance(faults, str) else list(faults)
    unknown = [f for f in names if f not in FAULTS]
    if unknown or not names:
        raise UnknownFault(
            f"unknown fault {', '.join(map(repr, unknown)) or '(none given)'}; the faults are {', '.join(FAULTS)}"
        )
    return tuple(f for f in FAULTS if f in names)


def applicable(
    faults: Iterable[str] | None, *, server: bool, own_server: bool, replicated: bool = False
) -> tuple[str, ...]:
    """The faults to run, checked against the queue: ``None`` means every fault it can have.

    A SQLite file has no network to cut and no server to crash; a server chaos did not start
    is somebody's, and is never crashed. A replicated server chaos started (``replicated``) fails
    over instead of crashing, and its workers reach it by a multi-host URL, which the fleet's
    one-server proxies cannot stand in for: no partition, no dropped reply. Each refusal raises
    ``FaultNotApplicable`` naming the fault.
    """
    if faults is None:
        return tuple(
            f
            for f in FAULTS
            if (server or (f not in NETWORK_FAULTS and f not in SQLITE_DEFAULT_LEAVES_OUT))
            and (own_server or f not in OWN_SERVER_FAULTS)
            and (replicated or f not in REPLICATED_FAULTS)
            and not (replicated and f in NETWORK_FAULTS + OWN_SERVER_FAULTS)
        )
    faults = parse_faults(faults)
    for f in faults:
        if f in REPLICATED_FAULTS and not replicated:
            raise FaultNotApplicable(
                f"fault {f!r} stops a primary and promotes its standby; chaos fails over only a replicated "
                "server it started itself (use --db postgresql --faults failover)"
            )
        if replicated and f in NETWORK_FAULTS + OWN_SERVER_FAULTS:
            why = (
                "the failover is this server's crash"
                if f in OWN_SERVER_FAULTS
                else "the workers reach it by a multi-host URL, and a worker's proxy stands for one server"
            )
            raise FaultNotApplicable(f"fault {f!r} does not go with failover: {why}")
        if f in NETWORK_FAULTS and not server:
            raise FaultNotApplicable(
                f"fault {f!r} needs a network between the workers and the queue; a SQLite "
                "file has none (use a postgresql:// queue, or --db postgresql)"
            )
        if f in OWN_SERVER_FAULTS and not own_server:
            why = "a SQLite file has no server" if not server else "this server was not started by chaos"
            raise FaultNotApplicable(
                f"fault {f!r} crashes a server that chaos started itself; {why} "
                "(use --db postgresql for a throw-away one)"
            )
    return faults


def plan(seed: int, *, seconds: float, workers: int, lease: float, faults: Iterable[str]) -> Schedule:
    """The schedule for ``seed``: worker faults every 0.2 to 0.8 s, a server crash every 3 to 6 s."""
    seed = integer("seed", seed, 0)
    seconds = positive("seconds", seconds)
    workers = integer("workers", workers, 1)
    lease = positive("lease", lease)
    faults = parse_faults(faults)
    rng = random.Random(seed)
    names = slots(workers)
    busy_until = dict.fromkeys(names, 0.0)
    worker_faults = [f for f in faults if f in WEIGHTS]
    steps: list[Step] = []
    if worker_faults:
        at = rng.uniform(*GAP)
        while at < seconds:
            fault = rng.choices(worker_faults, weights=[WEIGHTS[f] for f in worker_faults])[0]
            free = [n for n in names if busy_until[n] <= at]
            if free:
                worker = rng.choice(free)
                lasts = jump = 0.0
                if fault in ("pause", "partition"):
                    lasts = lease * rng.uniform(*PAST_LEASE)
                elif fault == "clock":
                    jump = lease * rng.uniform(*JUMP) * rng.choice((-1, 1))
                    lasts = lease * rng.uniform(*JUMP_LASTS)
                if fault in LASTING:
                    busy_until[worker] = at + lasts
                steps.append(Step(round(at, 3), fault, worker, round(lasts, 3), round(jump, 3)))
            at += rng.uniform(*GAP)
    if "server-crash" in faults:
        at = rng.uniform(2.0, 5.0)
        while at < seconds:
            steps.append(Step(round(at, 3), "server-crash", None, round(lease * rng.uniform(*DOWN), 3)))
            at += rng.uniform(*CRASH_GAP)
    if "failover" in faults:
        at = rng.uniform(1.0, 3.0)
        while at < seconds:
            steps.append(Step(round(at, 3), "failover"))
            at += rng.uniform(*FAILOVER_GAP)
    steps.sort(key=lambda s: (s.at, s.fault, s.worker or ""))
    return Schedule(seed, seconds, workers, lease, faults, tuple(steps))
