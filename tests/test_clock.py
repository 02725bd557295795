"""The clocks leaselab reads: the one that carries a server's time on counts a suspend of the host."""

from __future__ import annotations

import time

import pytest

from leaselab import clock


@pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="CLOCK_BOOTTIME is Linux's")
def test_on_linux_elapsed_reads_the_boot_clock_which_counts_a_suspend_as_monotonic_does_not():
    assert clock.ELAPSED_CLOCK_ID == time.CLOCK_BOOTTIME
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    got = clock.elapsed()
    after = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert before <= got <= after


def test_elapsed_never_goes_back():
    readings = [clock.elapsed() for _ in range(1000)]
    assert readings == sorted(readings)
