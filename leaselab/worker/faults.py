"""Transient faults as a worker sees them: how long it waits between retries, and what it logs.

A ``TransientError`` (a write lock held past the busy timeout, a full disk, a lost
server) may pass, so a worker retries the call after ``FIRST_WAIT`` seconds, then
twice as long each time, up to ``MAX_WAIT``. Each wait is logged with a line that
contains ``WAITING`` and the end of the fault with one that contains ``CLEARED``, so a
reader of the log alone (the lab's ``Fleet``) can tell that a worker is waiting.
"""

from __future__ import annotations

import enum
from typing import Final

from .decisions import FIRST_WAIT, MAX_WAIT  # noqa: F401  (the waits are the worker's decisions; named here too)

WAITING = "waiting on a transient fault"
CLEARED = "fault cleared"


class Stopped(enum.Enum):
    """The type of ``STOPPED``, its one value: a type checker tells it from what a call returns."""

    STOPPED = "stopped"


STOPPED: Final = Stopped.STOPPED  # what a retry returns when the worker was asked to stop while it waited
