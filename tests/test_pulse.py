"""The pulse, stepped by hand on a real file: its heartbeat, its reaper, and the order between them."""

from __future__ import annotations

import sqlite3

from leaselab import ManualClock, Queue, Status
from leaselab.lease import Lease, Leases
from leaselab.pulse import Pulse


def test_a_worker_whose_beat_failed_does_not_reap_its_own_expired_lease_before_a_beat_gets_through(tmp_path):
    db, clock, lines = tmp_path / "q.db", ManualClock(), []
    q = Queue(db, clock=clock, busy_timeout=0.05)
    q.enqueue("long")
    job = q.claim("w1", lease=10)
    leases = Leases()
    leases.add(Lease(job, 10))
    monotonic = [0.0]
    pulse = Pulse(q, leases, lease=10, reap_every=1.0, log=lines.append, clock=lambda: monotonic[0])
    try:
        pulse.tick()  # the first round reaps at once: nothing has expired
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another program holds the file past the busy timeout
        monotonic[0] = 4.0
        pulse.tick()  # the beat that was due fails
        assert not pulse.reached and any("heartbeat failed" in line for line in lines)
        other.execute("COMMIT")
        other.close()
        clock.advance(11)  # meanwhile, on the queue's clock, the lease the worker holds ran out
        monotonic[0] = 5.5  # a reap is due (the one tried under the lock set it to 5), the next beat (6) not yet
        pulse.tick()
        assert q.get(job.id).status is Status.RUNNING  # its own reaper did not take its live job
        monotonic[0] = 6.0  # the retried beat gets through, and only then does it reap
        pulse.tick()
        assert pulse.reached
        assert q.get(job.id).status is Status.RUNNING and q.get(job.id).lease_until == clock() + 10
        assert "reaped" not in [e.kind for e in q.events(job.id)]
    finally:
        leases.close()
        q.close()


def test_a_worker_holding_nothing_reaps_on_its_cadence(tmp_path):
    clock = ManualClock()
    with Queue(tmp_path / "q.db", clock=clock) as q:
        q.enqueue("x")
        crashed = q.claim("dead", lease=1)
        leases = Leases()
        monotonic = [0.0]
        pulse = Pulse(q, leases, lease=30, reap_every=1.0, log=lambda line: None, clock=lambda: monotonic[0])
        try:
            pulse.tick()
            clock.advance(2)
            monotonic[0] = 0.5
            pulse.tick()  # not due yet
            assert q.get(crashed.id).status is Status.RUNNING
            monotonic[0] = 1.0
            pulse.tick()
            assert q.get(crashed.id).status is Status.PENDING
        finally:
            leases.close()
