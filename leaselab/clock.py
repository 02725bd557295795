"""Clocks: where leaselab gets "now". Tests and lessons move a manual clock instead of sleeping."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

Clock = Callable[[], float]

system_clock: Clock = time.time


class ManualClock:
    """A clock that stands still until you move it: ``clock.advance(31)`` is a lease going by.

    Safe to share between threads. Calling it returns the current unix seconds.
    """

    def __init__(self, start: float = 1_767_225_600.0):  # 2026-01-01T00:00:00Z
        self._now = float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` and return the new time."""
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds):
            raise TypeError(f"seconds must be a finite number, got {seconds!r}")
        if seconds < 0:
            raise ValueError(f"a clock only moves forward; seconds must be >= 0, got {seconds!r}")
        with self._lock:
            self._now += seconds
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self():.3f})"
