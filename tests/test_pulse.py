"""The pulse, stepped by hand on a real queue: its heartbeat, its reaper, and the order between them.

On every backend (APSW too), but for a beat failing under another program's lock on the SQLite file.
"""

from __future__ import annotations

import sqlite3

from leaselab import ManualClock, Queue, Status
from leaselab.worker.lease import Lease, Leases
from leaselab.worker.pulse import Pulse
from tests.support.polling import wait_until
from tests.support.servers import IN_PROCESS_BACKENDS

TARGETS = IN_PROCESS_BACKENDS


def test_a_worker_whose_beat_failed_does_not_reap_its_own_expired_lease_and_the_next_beat_renews_it(tmp_path):
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
        assert any("heartbeat failed" in line for line in lines)
        other.execute("COMMIT")
        other.close()
        clock.advance(11)  # meanwhile, on the queue's clock, the lease the worker holds ran out
        monotonic[0] = 5.5  # a reap is due (the one tried under the lock set it to 5), the next beat (6) not yet
        pulse.tick()
        assert q.get(job.id).status is Status.RUNNING  # its own reaper did not take its live job
        monotonic[0] = 6.0  # the retried beat gets through
        pulse.tick()
        assert q.get(job.id).status is Status.RUNNING and q.get(job.id).lease_until == clock() + 10
        assert "reaped" not in [e.kind for e in q.events(job.id)]
    finally:
        leases.close()
        q.close()


def test_a_worker_holding_nothing_reaps_on_its_cadence(target):
    clock = ManualClock()
    with Queue(target, clock=clock) as q:
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


def test_a_worker_never_reaps_its_own_jobs_whatever_their_leases_say_but_another_workers_reaper_does(target):
    """A freeze can let a live worker's leases run out anywhere between a beat and its reap."""
    clock = ManualClock()
    with Queue(target, clock=clock) as q:
        q.enqueue_many(["mine", "a dead worker's"])
        [mine], theirs = q.claim_many(1, "w1", lease=10), q.claim("w2", lease=10)  # a batch's token too
        leases = Leases()
        leases.add(Lease(mine, 10))
        pulse = Pulse(q, leases, lease=10, reap_every=1.0, log=lambda line: None, clock=lambda: 0.0)
        try:
            clock.advance(11)  # both leases ran out, say while w1 was frozen
            pulse.tick()  # w1's own round
            assert q.get(mine.id).status is Status.RUNNING and q.get(theirs.id).status is Status.PENDING
            assert q.reap() == [mine.id]  # any other worker's reaper takes it
        finally:
            leases.close()


def test_a_round_that_fails_for_any_reason_does_not_end_the_heartbeat(target):
    """A bug in one round (here, once, in reading the held leases) is logged, and the next round beats."""

    class FailsOnce(Leases):
        failed = False

        def renewable(self):
            if not self.failed:
                self.failed = True
                raise RuntimeError("one bad round")
            return super().renewable()

    lines: list[str] = []
    with Queue(target) as q:
        q.enqueue("x")
        job = q.claim("w1", lease=0.6)
        leases = FailsOnce()
        leases.add(Lease(job, 0.6))
        try:
            with Pulse(q, leases, lease=0.6, reap_every=0.2, log=lines.append):
                wait_until(
                    lambda: q.get(job.id).lease_until > job.lease_until,
                    timeout=10,
                    message="a beat after the failed round",
                )
        finally:
            leases.close()
    assert any("pulse failed, trying again: RuntimeError: one bad round" in line for line in lines)
    assert q_status_running(target, job.id)


def q_status_running(db, job_id) -> bool:
    with Queue(db) as q:
        return q.get(job_id).status is Status.RUNNING
