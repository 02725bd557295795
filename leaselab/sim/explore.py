"""Exploring schedules: seeded random ones, or every one of a small scope; replaying one; shrinking a failure.

A schedule is the list of actions taken, each named by a tuple (``("claim", "w1")``, ``("pause",
"w2", 1.5)``, ``("tick",)``). After its last action the world is *drained*: no more faults, and each
step the first enabled action in a fixed order, until every job is done or dead; a job that never
gets there is ``stuck``. Replaying a schedule skips an action that is not enabled when its turn
comes, so any sub-list of a schedule is a schedule too: that is what shrinking tries.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .model import Violation
from .world import Action, Scenario, World

DRAIN_ORDER = ("deliver", "retry", "finish", "beat", "claim", "reap", "start", "tick")
MAX_STEPS = 400  # a random schedule's length at most, before the drain
DRAIN_LEASES = 200  # a drain gives up (the job is stuck) after this many leases of virtual time


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
        enabled = [a for a in world.enabled() if not world.is_fault(a)]
        if not enabled:
            break
        action = min(enabled, key=lambda a: DRAIN_ORDER.index(a[0]))
        world.step(action)
        taken.append(action)
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
    violation = None
    try:
        todo = iter(actions) if actions is not None else None
        for _ in range(MAX_STEPS if todo is None else len(actions or ())):
            enabled = world.enabled()
            if todo is not None:
                action = next(todo)
                if action not in enabled:
                    continue
            else:
                if not enabled or (world.settled() and world.idle()):
                    break
                action = _choose(world, rng, enabled)
            world.step(action)
            taken.append(action)
            if fingerprint:
                states.add(state_of(world))
        chosen = len(taken)
        _drain(world, taken)
        del taken[chosen:]  # the drain is implied by the schedule: replay runs it again
    except Violation as found:
        violation = found
    finally:
        world.close()
    return Run(scenario, seed, taken, world.trace, violation, len(world.trace), world.t, states)


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
                    w.loop and (w.loop.what, w.loop.held),
                    w.pulse and (w.pulse.what, w.pulse.held),
                    w.armed,
                    round(w.at(w.next_beat) - world.t, 6),
                    max(round(w.paused_until - world.t, 6), 0),
                    max(round(w.cut_until - world.t, 6), 0),
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
            return Run(scenario, 0, prefix, world.trace, found, len(world.trace), world.t)
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


def shrink(failing: Run, *, handler: Any = None, budget: float = 30.0) -> Run:
    """The fewest actions (and faults) of ``failing``'s schedule that still break the same promise."""
    kind = failing.violation.kind if failing.violation else None
    best = failing
    deadline = time.monotonic() + budget

    def fails(actions: list[Action]) -> Run | None:
        result = run(failing.scenario, failing.seed, actions=actions, handler=handler)
        return result if result.violation is not None and result.violation.kind == kind else None

    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        chunk = max(1, len(best.actions) // 2)
        while chunk >= 1 and time.monotonic() < deadline:
            i = 0
            while i < len(best.actions) and time.monotonic() < deadline:
                candidate = best.actions[:i] + best.actions[i + chunk :]
                result = fails(candidate)
                if result is not None and len(result.actions) < len(best.actions):
                    best, changed = result, True
                else:
                    i += chunk
            chunk //= 2
    return best


def numbered(result: Run) -> Iterator[str]:
    """The trace of a run as numbered lines."""
    for i, line in enumerate(result.trace, 1):
        yield f"{i:3d}. {line}"
