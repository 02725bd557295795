"""How long a failed or reaped job waits before it may run again."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff ``base * 2**(attempts-1)``, capped at ``cap`` seconds.

    ``jitter`` (0 to 1) stretches each delay by up to that fraction. Because the
    stretch is below one doubling, a later attempt never waits less than an
    earlier one. With ``jitter=0`` (the default) the delay is deterministic.
    """

    base: float = 1.0
    cap: float = 60.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        for name in ("base", "cap", "jitter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise TypeError(f"Backoff {name} must be a finite number, got {value!r}")
        if self.base < 0:
            raise ValueError(f"Backoff base must be >= 0, got {self.base!r}")
        if self.cap < self.base:
            raise ValueError(f"Backoff cap must be >= base ({self.base!r}), got {self.cap!r}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"Backoff jitter must be between 0 and 1, got {self.jitter!r}")

    def delay(self, attempts: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after the ``attempts``-th attempt ended (attempts >= 1)."""
        if attempts < 1:
            return 0.0
        # 2**1023 is the largest power a float holds; past the cap the size is moot.
        raw = self.base * 2.0 ** min(attempts - 1, 1023)
        if self.jitter:
            raw *= 1.0 + self.jitter * rand()
        return min(self.cap, raw)
