"""The worker's own record of its heartbeats' round trips: a histogram with fixed buckets.

Each acknowledged beat adds one count, in the pulse's thread, by a binary search over the
bucket bounds and one list increment: no lock, no allocation, nothing on the claim path. A
beat that failed (a busy file, a lost server) has no round trip and is not counted. What it
is for: a lease must outlast the longest delay a beat meets (lesson 5, ``Histogram.longest``).
"""

from __future__ import annotations

import math
from bisect import bisect_left

# Upper bounds of the buckets, in seconds; one more bucket, unbounded, holds anything longer.
BOUNDS: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


def _shown(bound: float) -> str:
    return f"{bound * 1000:g}ms" if bound < 1 else f"{bound:g}s"


class Histogram:
    """Counts of heartbeat round trips by bucket; ``bounds`` are the buckets' upper limits in seconds."""

    def __init__(self, bounds: tuple[float, ...] = BOUNDS):
        if not bounds or list(bounds) != sorted(set(bounds)) or bounds[0] <= 0:
            raise ValueError(f"bounds must be positive and strictly increasing, got {bounds!r}")
        self.bounds = tuple(bounds) + (math.inf,)
        self.counts = [0] * len(self.bounds)

    def record(self, seconds: float) -> None:
        """Count one round trip of ``seconds`` in the first bucket whose bound is at least that."""
        self.counts[bisect_left(self.bounds, seconds)] += 1

    @property
    def total(self) -> int:
        """How many round trips were counted."""
        return sum(self.counts)

    def buckets(self) -> dict[float, int]:
        """``{upper bound: count}`` for every bucket that counted something (the last bound is ``inf``)."""
        return {bound: n for bound, n in zip(self.bounds, list(self.counts), strict=True) if n}

    def longest(self) -> float | None:
        """The upper bound of the highest bucket that counted something: no round trip took longer.
        None before any; ``inf`` if one took longer than the last finite bound."""
        seen = self.buckets()
        return max(seen) if seen else None

    def describe(self) -> str:
        """One line: ``heartbeats 12, round trip ≤1ms: 10, ≤2ms: 2``."""
        parts = [
            f">{_shown(self.bounds[-2])}: {n}" if math.isinf(bound) else f"≤{_shown(bound)}: {n}"
            for bound, n in self.buckets().items()
        ]
        return f"heartbeats {self.total}" + (", round trip " + ", ".join(parts) if parts else "")
