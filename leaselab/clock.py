"""Clocks: where leaselab gets "now". Tests and lessons move a manual clock instead of sleeping."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from functools import partial

Clock = Callable[[], float]

system_clock: Clock = time.time


def _counting_suspend() -> int | None:
    """The id of a clock that never steps and goes on counting while the host is suspended, if this
    platform has one that ``time.clock_gettime`` can read: Linux's ``CLOCK_BOOTTIME``."""
    boottime: int | None = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return None
    try:
        time.clock_gettime(boottime)
    except OSError:  # a kernel or a sandbox that refuses it: fall back as on other platforms
        return None
    return boottime


# What ``elapsed`` reads: CLOCK_BOOTTIME where there is one, else None (then ``time.monotonic``).
ELAPSED_CLOCK_ID: int | None = _counting_suspend()


# ``elapsed()``: seconds from an arbitrary start, for measuring how long passed between two readings.
# Never steps when the wall clock is set, like ``time.monotonic``; on Linux it also counts the time the
# host was suspended, which ``time.monotonic`` (CLOCK_MONOTONIC) leaves out, so a time carried forward
# on it does not fall behind by a whole suspend. Elsewhere it is ``time.monotonic``, which on some
# platforms stops while the host sleeps. A C callable, not a function around one: the worker reads it
# several times a job, and a Python frame costs more than the reading.
elapsed: Clock = time.monotonic if ELAPSED_CLOCK_ID is None else partial(time.clock_gettime, ELAPSED_CLOCK_ID)


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
