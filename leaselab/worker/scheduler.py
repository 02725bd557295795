"""A worker's scheduler: a thread that enqueues its periodic schedules' ticks as they fall due.

Any number of workers may run the same schedules: ``Queue.run_schedule`` enqueues each tick exactly once
however many race. The thread only decides when to look again: at the next tick, at most ``max_wait``
seconds away (so a tick is enqueued within that of its time even when the queue's clock is not the
host's), and never busier than ``min_wait``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from ..periodic import Schedule
from ..queue import Queue


class Scheduler:
    """Runs ``schedules`` on ``queue`` in a thread of its own from ``start()`` to ``stop()``; ``log`` gets a
    line for each tick enqueued and for each fault (which it waits out, as the worker's pulse does)."""

    def __init__(
        self,
        queue: Queue,
        schedules: Sequence[Schedule],
        log: Callable[[str], None],
        max_wait: float = 1.0,
        min_wait: float = 0.01,
    ):
        names = [s.name for s in schedules]
        if len(set(names)) != len(names):
            raise ValueError(f"schedules must have distinct names, got {names}")
        self.queue, self.schedules, self.log = queue, list(schedules), log
        self.max_wait, self.min_wait = max_wait, min_wait
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> dict[str, list[int]]:
        """Enqueue every schedule's due ticks now; {name: the new jobs' ids} for those that made any."""
        made: dict[str, list[int]] = {}
        for schedule in self.schedules:
            ids = self.queue.run_schedule(schedule)
            if ids:
                made[schedule.name] = ids
                self.log(f"schedule {schedule.name}: enqueued job {', '.join(map(str, ids))}")
        return made

    def wait(self) -> float:
        """Seconds until the next look: to the earliest next tick, within ``min_wait`` and ``max_wait``."""
        now = self.queue.clock()
        soonest = min(self.queue.next_tick(s) for s in self.schedules) - now
        return min(self.max_wait, max(self.min_wait, soonest))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="leaselab-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
                pause = self.wait()
            except Exception as exc:  # a lost server or a locked file: the next look may find it back
                self.log(f"scheduler: {type(exc).__name__}: {exc}; trying again")
                pause = self.max_wait
            self._stop.wait(pause)
