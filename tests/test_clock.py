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


def test_the_worker_counts_its_own_deadline_on_elapsed_so_a_suspend_counts():
    # No test can suspend the host; what can be checked is that every place the worker reads its own
    # time for a lease reads clock.elapsed (CLOCK_BOOTTIME on Linux), not time.monotonic, which stops.
    import inspect

    from leaselab.worker import lease, loop, pulse

    assert inspect.signature(lease.Lease).parameters["clock"].default is clock.elapsed
    assert inspect.signature(pulse.Pulse).parameters["clock"].default is clock.elapsed
    source = inspect.getsource(loop)
    assert "monotonic" not in source and "elapsed()" in source
