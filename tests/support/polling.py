"""Polling and /proc helpers the process tests share (procs.py starts the processes).

A module of tests.support, not conftest.py: fixtures are pytest's to hand out, and a helper is imported
by its package name, ``from tests.support.polling import wait_until``, which nothing else can shadow."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from leaselab import lessons
from leaselab.harness.fleet import process_state  # the fleet's own reading of /proc, shared

# Generous: the machine is shared and has two cores. A deadline only bounds a failure, never a success.
DEFAULT_TIMEOUT = 20.0


def wait_until(
    condition: Callable[[], object],
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = 0.05,
    message: str = "condition",
) -> object:
    """Poll ``condition`` until it returns something truthy and return that; fail the test after ``timeout``."""
    try:
        return lessons.wait_until(condition, timeout, interval, what=message)
    except TimeoutError as exc:
        pytest.fail(str(exc))


def pid_gone(pid: int) -> bool:
    """True when the process has exited (absent, or a zombie nobody has reaped yet)."""
    return process_state(pid) in (None, "Z")
