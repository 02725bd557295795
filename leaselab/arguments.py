"""Argument checks shared by the queue, the worker, the lab and the lessons.

Each returns the value it was given (as the type it promises) or raises ``TypeError``
or ``ValueError`` with a message that names the argument and the value.
"""

from __future__ import annotations

import math
from typing import Any


def number(name: str, value: Any) -> float:
    """A finite int or float (not a bool), as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return float(value)


def positive(name: str, value: Any) -> float:
    """A finite number of seconds above zero, as a float."""
    value = number(name, value)
    if value <= 0:
        raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
    return value


def integer(name: str, value: Any, minimum: int | None = None) -> int:
    """An int (not a bool) that fits in 64 bits, at least ``minimum`` if given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{name} must fit in 64 bits, got {value!r}")
    return value


def text(name: str, value: Any, limit: int = 200) -> str:
    """A non-empty str of at most ``limit`` characters."""
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty str, got {value!r}")
    if len(value) > limit:
        raise ValueError(f"{name} must be at most {limit} characters, got {len(value)}")
    return value
