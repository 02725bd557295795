"""Exploring schedules: seeded random ones, or every one of a small scope; replaying one; shrinking a failure.

A schedule is the list of actions taken, each named by a tuple (``("claim", "w1")``, ``("pause",
"w2", 1.5)``, ``("tick",)``). After its last action the world is *drained*: no more faults, and each
step the first enabled action in a fixed order, until every job is done or dead; a job that never
gets there is ``stuck``. Replaying a schedule lets time move on to an action that is not enabled yet
(a handler still running, a beat not yet due: "tick" after "tick", at most ``WAIT_LEASES`` leases of
virtual time), and skips one that does not become enabled, so any sub-list of a schedule is a schedule
too: that is what shrinking tries, and why a shrunk schedule rarely needs a "tick" of its own. Where time
must pass further than that, shrinking replaces the stretch by ``("expire",)``: tick after tick until the
earliest lease the queue holds has ended (``world.EXPIRE``), what those ticks did in one step.
"""

from __future__ import annotations

import hashlib
import importlib.util
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .model import Violation
from .world import CLOCK_FAULTS, DEFAULT_FAULTS, EXPIRE, FAULTS, HANG_TIMEOUT, NEEDS_TIMEOUT, Action, Scenario, World

DRAIN_ORDER = ("deliver", "retry", "finish", "give_up", "beat", "claim", "reap", "start", "tick")
_DRAIN_RANK = {kind: rank for rank, kind in enumerate(DRAIN_ORDER)}  # DRAIN_ORDER.index, looked up once
MAX_STEPS = 400  # a random schedule's length at most, before the drain
DRAIN_LEASES = 200  # a drain gives up (the job is stuck) after this many leases of virtual time
WAIT_LEASES = 3.0  # a replayed action not yet enabled waits this many leases of virtual time, at most


@dataclass
class Run:
    """One schedule run: the actions taken, the trace, and the violation found (None: every promise held)."""

    scenario: Scenario
    seed: int
    actions: list[Action]
    trace: list[str]
    violation: Violation | None
    steps: int  # actions taken, drain included
    virtual: float  # seconds of virtual time simulated
    states: set[str] = field(default_factory=set)

    @property
    def failed(self) -> bool:
        return self.violation is not None


def _choose(world: World, rng: random.Random, enabled: list[Action]) -> Action:
    weights = [0.06 if world.is_fault(a) else (0.5 if a[0] == "tick" else 1.0) for a in enabled]
    return rng.choices(enabled, weights)[0]


def _drain(world: World, taken: list[Action]) -> None:
    limit = world.t + DRAIN_LEASES * world.scenario.lease
    while not world.settled() or any(w.loop or w.pulse for w in world.workers.values() if w.alive):
        if world.t > limit or len(taken) > 100 * MAX_STEPS:
            break
        enabled = world.calm()
        if not enabled:
            break
        action = min(enabled, key=lambda a: _DRAIN_RANK[a[0]])
        taken.append(action)
        world.step(action)
    if not world.settled():
        stuck = sorted(j.id for j in world.model.jobs.values() if j.status not in ("done", "dead"))
        raise Violation(
            "stuck",
            f"jobs {stuck} are neither done nor dead {world.t:.1f}s into the schedule, with every fault over "
            f"and the workers left to run",
        )


def run(
    scenario: Scenario,
    seed: int,
    *,
    actions: list[Action] | None = None,
    handler: Any = None,
    fingerprint: bool = False,
) -> Run:
    """Run one schedule: random from ``seed``, or ``actions`` replayed (skipping any not enabled), then drained."""
    world = World(scenario, handler=handler, seed=seed)
    rng = random.Random(seed)
    taken: list[Action] = []
    states: set[str] = set()
    violation, chosen = None, None
    try:
        todo = iter(actions) if actions is not None else None
        for _ in range(MAX_STEPS if todo is None else len(actions or ())):
            enabled = world.enabled()
            if todo is not None:
                action = next(todo)
                if action == EXPIRE:
                    if world.lease_end() is None:
                        continue
                elif action not in enabled:
                    enabled = _wait_for(world, action)
                    if action not in enabled:
                        continue
            else:
                if not enabled or (world.settled() and world.idle()):
                    break
                action = _choose(world, rng, enabled)
            taken.append(action)  # before it is taken: the action that breaks a promise is the schedule's last
            world.step(action)
            if fingerprint:
                states.add(state_of(world))
        chosen = len(taken)
        _drain(world, taken)
    except Violation as found:
        violation = found
    finally:
        world.close()
    steps = len(taken)
    if chosen is not None:
        del taken[chosen:]  # the drain is implied by the schedule: replay runs it again
    return Run(scenario, seed, taken, world.trace, violation, steps, world.t, states)


def _wait_for(world: World, action: Action) -> list[Action]:
    """Let time move ("tick" after "tick") until ``action`` is enabled or ``WAIT_LEASES`` leases passed;
    what is enabled then. Only time moves: no worker acts meanwhile."""
    limit = world.t + WAIT_LEASES * world.scenario.lease
    enabled = world.enabled()
    while action not in enabled and ("tick",) in enabled and world.t < limit:
        world.step(("tick",))
        enabled = world.enabled()
    return enabled


def state_of(world: World) -> str:
    """A digest of what matters for what can happen next: the jobs' rows and every worker's state,
    times relative to now, so two schedules that reach the same situation by different paths meet."""
    parts = [
        repr(
            sorted((j.id, j.status, j.attempts, _rel(j.lease_until, world), j.token) for j in world.model.jobs.values())
        )
    ]
    for w in world.workers.values():
        parts.append(
            repr(
                (
                    w.name,
                    w.alive,
                    sorted((t, round(e - world.t, 6)) for t, e in w.ends.items()),
                    sorted(
                        (t, lease.refused, round(w.at(lease.deadline or 0) - world.t, 6))
                        for t, lease in w.leases.items()
                    ),
                    w.loop and (w.loop.what, w.loop.held, w.loop.rest is not None, w.loop.retry_at is not None),
                    w.pulse and (w.pulse.what, w.pulse.held),
                    w.armed,
                    round(w.at(w.next_beat) - world.t, 6),
                    max(round(w.paused_until - world.t, 6), 0),
                    max(round(w.cut_until - world.t, 6), 0),
                    # asleep with its clock stopped, or only paused: the same wait, another clock after it
                    any(kind == "suspend" and until > world.t for kind, _, until in w.shifts),
                )
            )
        )
    parts.append(str(world.faults))
    return hashlib.blake2b("|".join(parts).encode(), digest_size=12).hexdigest()


def _rel(at: float | None, world: World) -> float | None:
    from .world import EPOCH

    return None if at is None else round(at - EPOCH - world.t, 6)


def search(
    scenario: Scenario,
    *,
    seed: int = 0,
    schedules: int | None = None,
    seconds: float | None = None,
    handler: Any = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Run | None, int, int]:
    """Random schedules from ``seed`` on, until one fails, ``schedules`` ran or ``seconds`` passed.

    Returns (the first failing run or None, schedules run, steps taken)."""
    start, n, steps = time.monotonic(), 0, 0
    while True:
        if schedules is not None and n >= schedules:
            return None, n, steps
        if seconds is not None and time.monotonic() - start >= seconds:
            return None, n, steps
        result = run(scenario, seed + n, handler=handler)
        n += 1
        steps += result.steps
        if progress is not None:
            progress(n, steps)
        if result.failed:
            return result, n, steps


def exhaustive(
    scenario: Scenario, *, depth: int = 40, handler: Any = None, limit: int | None = None
) -> tuple[Run | None, int, int]:
    """Every schedule of the scope, depth first, up to ``depth`` actions each, a state already explored
    skipped (as a model checker does). Returns (the first failing run or None, distinct states, schedules)."""
    seen: set[str] = set()
    schedules = 0

    def explore(prefix: list[Action]) -> Run | None:
        nonlocal schedules
        world = World(scenario, handler=handler, seed=0)
        try:
            for action in prefix:
                world.step(action)
            enabled = world.enabled()
            key = state_of(world)
        except Violation as found:
            return Run(scenario, 0, prefix, world.trace, found, len(prefix), world.t)
        finally:
            world.close()
        if key in seen:
            return None
        seen.add(key)
        if limit is not None and len(seen) >= limit:
            return None
        if len(prefix) >= depth or not enabled or world.settled():
            schedules += 1
            result = run(scenario, 0, actions=prefix, handler=handler)
            return result if result.failed else None
        for action in enabled:
            deeper = explore([*prefix, action])
            if deeper is not None:
                return deeper
        return None

    found = explore([])
    return found, len(seen), schedules


def shrink(failing: Run, *, handler: Any = None, budget: float = 30.0, tries: int | None = None) -> Run:
    """The fewest actions (and faults) of ``failing``'s schedule that still break the same promise.

    Delta debugging over the actions (drop halves, then quarters, ... of the schedule), then each action
    alone, then each fault made milder (a shorter pause); a candidate is kept when it breaks the promise
    of the same kind with fewer actions, or as many and milder faults. ``budget`` bounds the seconds,
    ``tries`` (if given) the schedules replayed: with it and a large ``budget`` the result is the same on
    any machine."""
    kind = failing.violation.kind if failing.violation else None
    best = failing
    deadline = time.monotonic() + budget
    spent = 0

    def out() -> bool:
        return time.monotonic() >= deadline or (tries is not None and spent >= tries)

    def better(actions: list[Action]) -> bool:
        nonlocal best, spent
        if out():
            return False
        spent += 1
        result = run(failing.scenario, failing.seed, actions=actions, handler=handler)
        if result.violation is None or result.violation.kind != kind or _size(result) >= _size(best):
            return False
        best = result
        return True

    def collapse() -> bool:
        """Replace a stretch of actions that lets time pass (a tick first, no fault) by ``EXPIRE``: the longest
        stretches first, each at most ``COLLAPSE`` actions long."""
        actions = best.actions
        for width in range(min(COLLAPSE, len(actions)), 1, -1):
            for i in range(len(actions) - width + 1):
                window = actions[i : i + width]
                if window[0] == ("tick",) and not any(a[0] in FAULTS for a in window):
                    if better([*actions[:i], EXPIRE, *actions[i + width :]]):
                        return True
        return False

    if kind is None:
        return best
    parts = 2
    while len(best.actions) >= 2 and not out():
        actions = best.actions
        size = -(-len(actions) // parts)
        chunks = [actions[i : i + size] for i in range(0, len(actions), size)]
        for i in range(len(chunks)):
            if better([a for chunk in chunks[:i] + chunks[i + 1 :] for a in chunk]):
                parts = max(parts - 1, 2)
                break
        else:
            if size == 1:
                break
            parts = min(parts * 2, len(actions))
    changed = True
    while changed and not out():
        changed = False
        while collapse():  # a stretch of time passing, as one step: the single removals then go further
            changed = True
        for i in range(len(best.actions) - 1, -1, -1):
            if i < len(best.actions) and better(best.actions[:i] + best.actions[i + 1 :]):
                changed = True
        for i, action in enumerate(best.actions):
            for milder in MILDER.get(action[0], ()):
                if i < len(best.actions) and len(action) > 2 and milder < action[2]:
                    if better([*best.actions[:i], (*action[:2], milder), *best.actions[i + 1 :]]):
                        changed = True
    return best


CANDIDATES = 4  # failing schedules ``hunt`` shrinks, keeping the smallest witness
COLLAPSE = 6  # the longest stretch of actions ``shrink`` tries to replace by ``EXPIRE``
MILDER = {"pause": (0.5,), "suspend": (0.5,), "jump": (0.5,)}  # a fault's milder forms, for shrinking


def _size(result: Run) -> tuple[int, int, float]:
    """How big a witness is: its actions, then its faults, then how long they last."""
    faults = [a for a in result.actions if a[0] in FAULTS]
    return len(result.actions), len(faults), sum(a[2] for a in faults if len(a) > 2)


# The scenarios ``hunt`` takes turns with: one and two slots, two and three workers, clocks that run a
# little fast or slow (within the worker's margin), a job that fails every attempt, and jobs of a single
# attempt (every lost lease and every failure is the last: the way to dead is taken at once, not after
# a long way round). Chosen from what the specification promises (claim order, leases, fences, retries,
# the dead), not from any planted bug.
# With APSW installed (the lab and test extras), one more puts the queue on a disk that can lose
# power, at durability "full": what was acknowledged must survive the cut.
PORTFOLIO: tuple[Scenario, ...] = (
    Scenario(workers=2, jobs=3),
    Scenario(workers=2, jobs=3, slots=2),
    # Clocks apart, and clocks that stop while a host sleeps or step forward (``world.CLOCK_FAULTS``).
    Scenario(workers=3, jobs=3, skew=0.03, faults=DEFAULT_FAULTS + CLOCK_FAULTS),
    Scenario(workers=2, jobs=4, slots=2, skew=0.03),
    Scenario(workers=2, jobs=3, max_attempts=1),
    # Jobs with a timeout (the fourth runs past it every time, so it ends dead), and handlers that hang.
    Scenario(workers=2, jobs=4, timeout=HANG_TIMEOUT, faults=DEFAULT_FAULTS + NEEDS_TIMEOUT),
) + ((Scenario(workers=2, jobs=3, faults=FAULTS),) if importlib.util.find_spec("apsw") else ())


@dataclass
class Hunt:
    """What ``hunt`` found: the shrunk failing run (None: every promise held), as found, and the effort."""

    run: Run | None
    found: Run | None
    schedules: int
    steps: int
    scenarios: tuple[Scenario, ...]  # the scenarios it took turns with, in order
    seconds: float
    virtual: float = 0.0  # seconds of virtual time the schedules searched simulated, together


def hunt(
    *,
    seed: int = 0,
    seconds: float | None = 60.0,
    schedules: int | None = None,
    handler: Any = None,
    progress: Callable[[int, int], None] | None = None,
    portfolio: tuple[Scenario, ...] = PORTFOLIO,
    shrink_seconds: float = 30.0,
    shrink_tries: int | None = None,
) -> Hunt:
    """Random schedules of each scenario of ``portfolio`` in turn (schedule ``i``: scenario ``i`` modulo
    their number, seed ``seed + i``) until one fails, ``schedules`` ran or ``seconds`` passed; the failure
    shrunk (``shrink``, with ``shrink_seconds`` and ``shrink_tries``)."""
    start, n, steps, virtual = time.monotonic(), 0, 0, 0.0
    found = None
    while found is None:
        if schedules is not None and n >= schedules:
            break
        if seconds is not None and time.monotonic() - start >= seconds:
            break
        result = run(portfolio[n % len(portfolio)], seed + n, handler=handler)
        n, steps, virtual = n + 1, steps + result.steps, virtual + result.virtual
        if progress is not None:
            progress(n, steps)
        if result.failed:
            found = result
    tried = tuple(portfolio[: min(n, len(portfolio))])
    if found is None:
        return Hunt(None, None, n, steps, tried, time.monotonic() - start, virtual)
    # One failure may be a long way round: a few more, each shrunk, and the smallest kept. Of any kind: one
    # bug often breaks several promises, and the shortest schedule that shows any of them shows the bug.
    candidates, more = [found], 0
    while len(candidates) < CANDIDATES and more < max(n, 20) * 2:
        other = run(portfolio[(n + more) % len(portfolio)], seed + n + more, handler=handler)
        more += 1
        if other.violation is not None:
            candidates.append(other)
    share = None if shrink_tries is None else shrink_tries // len(candidates)
    shrunk = [shrink(c, handler=handler, budget=shrink_seconds / len(candidates), tries=share) for c in candidates]
    best = min(shrunk, key=_size)
    return Hunt(best, found, n, steps, tried, time.monotonic() - start, virtual)


def numbered(result: Run) -> Iterator[str]:
    """The trace of a run as numbered lines."""
    for i, line in enumerate(result.trace, 1):
        yield f"{i:3d}. {line}"
