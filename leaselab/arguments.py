"""Argument checks shared by the queue, the worker, the lab and the lessons.

Each returns the value it was given (as the type it promises) or raises ``TypeError``
or ``ValueError`` with a message that names the argument and the value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from .errors import InvalidKey, InvalidQueueName


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


# A queue's name: what a command line can carry after --queue and before an '=' (so no '='), and
# what a log line shows as it is (no spaces, no control characters).
_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
MAX_KEY = 200


def queue_name(value: Any) -> str:
    """A valid queue name; ``InvalidQueueName`` (naming it) otherwise."""
    if not isinstance(value, str) or _QUEUE_NAME.fullmatch(value) is None:
        raise InvalidQueueName(value)
    return value


def queue_names(value: Any) -> tuple[str, ...]:
    """One queue name (a str) or several (any other iterable of them), as a tuple without repeats, in order."""
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, Iterable) else [value]
    if not names:
        raise ValueError("queues must name at least one queue")
    return tuple(dict.fromkeys(queue_name(name) for name in names))


def unique_key(value: Any) -> str:
    """A unique job's key: a non-empty str of at most ``MAX_KEY`` characters, without NUL."""
    if not isinstance(value, str) or not value or len(value) > MAX_KEY or "\x00" in value:
        raise InvalidKey(f"key must be a non-empty text of at most {MAX_KEY} characters without NUL, got {value!r:.60}")
    return value
