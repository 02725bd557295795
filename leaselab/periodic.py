"""Periodic jobs: a ``Schedule`` (every N seconds, or a cron expression) and ``due``, the pure decision of
which of its ticks to enqueue now, given the last tick already handled and the missed-tick policy.

The I/O is apart: ``Queue.run_schedule`` reads the schedule's last tick, asks ``due``, and enqueues the
ticks in the same transaction as a compare-and-set of that last tick (``schedules`` table), so however
many schedulers race, each tick is enqueued by exactly one of them. The job of a tick carries the key
``name@time`` (``tick_key``), the tick's time in UTC.

Missed ticks (every scheduler was down when they fell due), by ``catch_up``:
- ``"latest"`` (the default): only the newest due tick is enqueued; the older missed ones are skipped.
- ``"all"``: every due tick is enqueued, oldest first (at most ``MAX_CATCH_UP`` per call; the rest next).
- ``"none"``: a tick is enqueued only if no tick before it was missed; after downtime that missed a
  tick, nothing is enqueued until the next tick falls due.
A schedule seen for the first time starts then: its first tick is the first one after that moment.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple

from .arguments import integer, number, positive, queue_name
from .errors import InvalidSchedule
from .job import DEFAULT_QUEUE

CATCH_UP = ("latest", "all", "none")  # the missed-tick policies, as ``due`` reads them
MAX_CATCH_UP = 1000  # the most ticks one call enqueues for one schedule under catch_up="all"

# A schedule's name goes into every tick's key (name@time, at most 200 characters): no '@', no spaces.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")


@dataclass(frozen=True)
class Schedule:
    """A job enqueued at each tick: ``every`` seconds (ticks at ``start + k * every``; ``start`` 0 puts
    them on whole multiples of the period since 1970 UTC) or at each time of ``cron`` (five fields, UTC;
    needs the croniter package). ``payload``, ``queue``, ``priority`` and ``max_attempts`` are each
    tick's job's. ``catch_up`` says what happens to ticks missed while no scheduler ran (module docstring).
    """

    name: str
    every: float | None = None
    cron: str | None = None
    payload: Any = None
    queue: str = DEFAULT_QUEUE
    catch_up: str = "latest"
    start: float = 0.0
    priority: int = 0
    max_attempts: int = 5

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or _NAME.fullmatch(self.name) is None:
            raise InvalidSchedule(
                f"a schedule's name must be 1-100 letters, digits, '_', '.', ':' or '-', got {self.name!r}"
            )
        if (self.every is None) == (self.cron is None):
            raise InvalidSchedule(f"schedule {self.name}: give exactly one of every= or cron=")
        if self.every is not None:
            positive("every", self.every)
        else:
            _check_cron(self.name, self.cron)
        if self.catch_up not in CATCH_UP:
            raise InvalidSchedule(
                f"schedule {self.name}: catch_up must be one of {', '.join(CATCH_UP)}, got {self.catch_up!r}"
            )
        number("start", self.start)
        queue_name(self.queue)
        integer("priority", self.priority)
        integer("max_attempts", self.max_attempts, 1)

    def latest_tick(self, moment: float) -> float:
        """Its newest tick time at or before ``moment``."""
        if self.every is not None:
            k = math.floor((moment - self.start) / self.every)
            while self.start + k * self.every > moment:  # a float's rounding may overshoot by one
                k -= 1
            while self.start + (k + 1) * self.every <= moment:
                k += 1
            return self.start + k * self.every
        from croniter import croniter

        before = float(croniter(self.cron, datetime.fromtimestamp(moment, timezone.utc)).get_prev(float))
        after = next(self.ticks_after(before))
        return after if after <= moment else before  # moment may be a tick itself

    def ticks_after(self, moment: float) -> Iterator[float]:
        """Its tick times strictly after ``moment``, in order, without end."""
        if self.every is not None:
            k = math.floor((moment - self.start) / self.every) + 1
            while True:
                tick = self.start + k * self.every
                if tick > moment:  # a float's rounding may put the k-th tick on or before moment
                    yield tick
                k += 1
        else:
            from croniter import croniter

            times = croniter(self.cron, datetime.fromtimestamp(moment, timezone.utc))
            while True:
                yield float(times.get_next(float))


def _check_cron(name: str, expression: Any) -> None:
    """Check a cron expression with croniter; ``InvalidSchedule`` if it is bad or croniter is missing."""
    try:
        from croniter import croniter
    except ImportError as exc:
        raise InvalidSchedule(
            f"schedule {name}: cron= needs the croniter package (pip install 'leaselab[cron]'), or use every="
        ) from exc
    if not isinstance(expression, str) or not croniter.is_valid(expression):
        raise InvalidSchedule(f"schedule {name}: not a cron expression: {expression!r}")


class Due(NamedTuple):
    """What a scheduler does now: enqueue ``ticks`` and move the last tick to ``advance_to`` (None: nothing)."""

    ticks: list[float]
    advance_to: float | None


def due(schedule: Schedule, last: float | None, now: float) -> Due:
    """The ticks of ``schedule`` to enqueue at ``now``, given ``last``, the last tick handled (None: never run).

    Pure: the same arguments give the same answer, so every racing scheduler computes the same ticks,
    and only the one whose compare-and-set of ``last`` wins enqueues them.
    """
    if last is None:
        return Due([], now)  # a new schedule starts now: its first tick is the next one
    first = next(schedule.ticks_after(last))
    if first > now:
        return Due([], None)
    if schedule.catch_up == "all":
        ticks: list[float] = []
        for tick in schedule.ticks_after(last):
            if tick > now or len(ticks) == MAX_CATCH_UP:
                break
            ticks.append(tick)
        return Due(ticks, ticks[-1])
    # Found directly, not by walking from last: a month down on a one-second schedule is millions of ticks.
    newest = schedule.latest_tick(now)
    if schedule.catch_up == "latest" or newest == first:
        return Due([newest], newest)
    return Due([], newest)  # "none", and a tick was missed: skip to the newest, enqueue nothing


def next_tick(schedule: Schedule, last: float | None, now: float) -> float:
    """When ``schedule`` next has a tick due, after ``last`` (or ``now`` if it never ran)."""
    return next(schedule.ticks_after(max(last, now) if last is not None else now))


def tick_key(name: str, tick: float) -> str:
    """The unique key of a tick's job: the schedule's name, '@', and the tick's UTC time (ISO 8601)."""
    moment = datetime.fromtimestamp(tick, timezone.utc)
    spec = "seconds" if moment.microsecond == 0 else "microseconds"
    return f"{name}@{moment.replace(tzinfo=None).isoformat(timespec=spec)}Z"


_TICK_KEY = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.:-]{0,99})@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{6})?)Z")


def tick_of(key: str | None) -> tuple[str, float] | None:
    """The schedule's name and tick time of a key ``tick_key`` made; None for any other key."""
    found = _TICK_KEY.fullmatch(key) if key is not None else None
    if found is None:
        return None
    return found.group(1), datetime.fromisoformat(found.group(2)).replace(tzinfo=timezone.utc).timestamp()


# What a schedule file's entries may hold: Schedule's arguments, each a JSON value.
FIELDS = ("name", "every", "cron", "payload", "queue", "catch_up", "start", "priority", "max_attempts")


def load_schedules(path: str) -> list[Schedule]:
    """The schedules of a JSON file holding a list of objects, each ``Schedule``'s arguments by name
    (``{"name": "digest", "every": 3600, "payload": {"kind": "digest"}}``); ``InvalidSchedule`` naming the
    file and the entry for anything else."""
    try:
        with open(path, encoding="utf-8") as file:
            entries = json.load(file)
    except OSError as exc:
        raise InvalidSchedule(f"--schedule {path}: cannot read it ({exc.strerror})") from None
    except ValueError as exc:
        raise InvalidSchedule(f"--schedule {path}: not JSON ({exc})") from None
    if not isinstance(entries, list) or not entries:
        raise InvalidSchedule(f"--schedule {path}: must hold a non-empty JSON list of schedules")
    schedules = []
    for n, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or not set(entry) <= set(FIELDS):
            unknown = sorted(set(entry) - set(FIELDS)) if isinstance(entry, dict) else None
            raise InvalidSchedule(
                f"--schedule {path}: entry {n} must be an object with only {', '.join(FIELDS)}"
                + (f" (unknown: {', '.join(unknown)})" if unknown else f", got {entry!r:.60}")
            )
        try:
            schedules.append(Schedule(**entry))
        except (TypeError, ValueError) as exc:  # InvalidSchedule is a ValueError
            raise InvalidSchedule(f"--schedule {path}: entry {n}: {exc}") from None
    names = [s.name for s in schedules]
    if len(set(names)) != len(names):
        raise InvalidSchedule(f"--schedule {path}: two schedules share a name: {names}")
    return schedules
