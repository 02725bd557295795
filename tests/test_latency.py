"""The worker's histogram of its heartbeats' round trips: its buckets, one count per acknowledged beat,
and what a real worker on a real queue records. Counts and bucket structure only, never speeds."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading

import pytest

from leaselab import ManualClock, Queue, Worker
from leaselab.worker import Histogram
from leaselab.worker.latency import BOUNDS
from leaselab.worker.lease import Lease, Leases
from leaselab.worker.pulse import Pulse

GENEROUS = 120.0


def test_a_round_trip_lands_in_the_first_bucket_whose_bound_holds_it():
    h = Histogram()
    for seconds in (0.0, 0.001, 0.0011, 0.5, 30.0, 31.0, 1e9):
        h.record(seconds)
    assert h.buckets() == {0.001: 2, 0.002: 1, 0.5: 1, 30.0: 1, math.inf: 2}
    assert h.total == 7 and len(h.counts) == len(BOUNDS) + 1
    assert h.longest() == math.inf
    assert h.describe() == "heartbeats 7, round trip ≤1ms: 2, ≤2ms: 1, ≤500ms: 1, ≤30s: 1, >30s: 2"


def test_an_empty_histogram_says_so_and_has_no_longest():
    h = Histogram()
    assert (h.total, h.buckets(), h.longest(), h.describe()) == (0, {}, None, "heartbeats 0")


@pytest.mark.parametrize("bounds", [(), (0.1, 0.1), (0.2, 0.1), (0.0, 1.0), (-1.0, 1.0)])
def test_bucket_bounds_must_be_positive_and_strictly_increasing(bounds):
    with pytest.raises(ValueError, match="bounds"):
        Histogram(bounds)


def test_each_acknowledged_beat_adds_exactly_one_count_of_its_round_trip_on_the_pulses_clock(tmp_path):
    clock = ManualClock()
    with Queue(tmp_path / "q.db", clock=clock) as q:
        q.enqueue("long")
        job = q.claim("w1", lease=9)
        leases = Leases()
        leases.add(Lease(job, 9))
        ticks = [0.0]

        def pulse_clock() -> float:  # every reading is 4 ms after the last: a beat's round trip reads 4 ms
            ticks[0] += 0.004
            return ticks[0]

        latencies = Histogram()
        pulse = Pulse(
            q, leases, lease=9, reap_every=100.0, log=lambda line: None, clock=pulse_clock, latencies=latencies
        )
        try:
            for _ in range(5):
                assert pulse.beat()
            assert latencies.buckets() == {0.005: 5}
        finally:
            leases.close()


def test_a_beat_with_nothing_held_counts_nothing(tmp_path):
    with Queue(tmp_path / "q.db") as q:
        latencies = Histogram()
        leases = Leases()
        pulse = Pulse(q, leases, lease=9, reap_every=100.0, log=lambda line: None, latencies=latencies)
        try:
            assert pulse.beat() and latencies.total == 0
        finally:
            leases.close()


def test_a_real_worker_records_its_heartbeats_round_trips_in_its_stats(tmp_path):
    q = Queue(tmp_path / "q.db")
    q.enqueue_many(["a", "b"])
    worker: Worker
    enough = threading.Event()

    def handler(job):  # hold each job until the worker has counted three more acknowledged beats
        start = worker.stats.heartbeat_latencies.total
        deadline = threading.Event()
        for _ in range(int(GENEROUS / 0.01)):
            if worker.stats.heartbeat_latencies.total >= start + 3:
                enough.set()
                return "ok"
            deadline.wait(0.01)
        raise AssertionError("no heartbeat was counted")

    worker = Worker(q, handler, lease=1.5, exit_when_idle=True, signals=False)
    try:
        stats = worker.run()
    finally:
        q.close()
    latencies = stats.heartbeat_latencies
    assert enough.is_set() and stats.completed == 2
    assert latencies.total >= 6 and sum(latencies.buckets().values()) == latencies.total
    assert set(latencies.buckets()) <= set(latencies.bounds)


def test_the_worker_command_ends_with_its_heartbeat_histogram(tmp_path):
    db = tmp_path / "q.db"
    with Queue(db) as q:
        q.enqueue({"seconds": 0.5})
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaselab",
            "worker",
            "--db",
            str(db),
            "--handler",
            "leaselab.harness.demo:task",
            "--lease",
            "0.3",
            "--exit-when-idle",
        ],
        capture_output=True,
        text=True,
        timeout=GENEROUS,
        check=True,
    )
    line = [x for x in done.stdout.splitlines() if "exiting: claimed 1, completed 1" in x]
    assert line, done.stdout + done.stderr
    match = re.search(r"; heartbeats (\d+)(?:, round trip (.*))?$", line[0])
    assert match, line[0]
    counted = [int(n) for n in re.findall(r"[≤>][\d.]+m?s: (\d+)", match.group(2) or "")]
    assert sum(counted) == int(match.group(1))


def test_claims_and_completions_count_nothing_only_heartbeats_do(tmp_path):
    # The histogram is written by the pulse alone: a worker that never beats (its first beat is twenty
    # minutes away) claims and completes every job with the histogram untouched, so the claim path
    # pays nothing for it; and the histogram holds no lock of its own to contend for.
    with Queue(tmp_path / "q.db") as q:
        q.enqueue_many(list(range(20)))
        stats = Worker(q, lambda job: job.payload, lease=3600, exit_when_idle=True, signals=False).run()
    assert (stats.completed, stats.heartbeat_latencies.total) == (20, 0)
    assert not [v for v in vars(stats.heartbeat_latencies).values() if hasattr(v, "acquire")]
