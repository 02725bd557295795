"""A handler that takes a second argument learns from its Lease that a heartbeat was refused."""

from __future__ import annotations

import time

import pytest

from leaselab import Lease, LeaseLost, ManualClock, Queue, Worker
from leaselab.fencing import FencedStore
from leaselab.worker.lease import wants_lease
from tests.support.polling import process_state, wait_until
from tests.support.procs import log_of
from tests.support.servers import IN_PROCESS_BACKENDS

# A lease's heartbeats refused by the queue: on every backend, APSW too (the worker runs in this process).
TARGETS = IN_PROCESS_BACKENDS


def test_check_raises_lease_lost_only_once_lost_is_set(queue):
    queue.enqueue("x")
    lease = Lease(queue.claim("w1"))
    lease.check()
    lease.lost.set()
    with pytest.raises(LeaseLost, match="lease lost on job 1"):
        lease.check()


def test_a_handler_with_two_arguments_is_given_the_lease_and_one_with_one_argument_only_the_job():
    def one(job): ...
    def two(job, lease): ...
    def defaulted(job, lease=None): ...

    assert (wants_lease(one), wants_lease(two), wants_lease(defaulted), wants_lease(len)) == (False, True, True, False)


def test_in_a_worker_a_one_argument_handler_still_runs_and_a_two_argument_one_gets_a_live_lease(worker_queue):
    worker_queue.enqueue_many(["a", "b"])
    seen = []
    Worker(worker_queue, lambda job: seen.append(job.payload), name="w1").run(max_jobs=1)
    Worker(worker_queue, lambda job, lease: seen.append((lease.job.id, lease.lost.is_set())), name="w1").run(max_jobs=1)
    assert seen == ["a", (2, False)]


def test_a_refused_heartbeat_sets_lost_while_the_handler_still_runs(target):
    clock = ManualClock()
    with Queue(target, clock=clock, call_timeout=0.9) as q:  # below the worker's lease
        job_id = q.enqueue("x")
        told = []

        def handler(job, lease):
            clock.advance(10)  # the lease (1 s) runs out while the handler works...
            q.reap()  # ...someone reaps it...
            assert lease.lost.wait(5)  # ...and the next heartbeat (a third of a second on) is refused
            told.append(lease.lost.is_set())
            lease.check()

        logged = []
        stats = Worker(q, handler, name="w1", lease=1.0, log=logged.append).run(max_jobs=1)
        assert told == [True] and stats.lost == 1
        assert any("heartbeat refused" in line for line in logged)
        assert q.get(job_id).status.value == "pending"


def _publish(q: Queue, store, seconds: float, check_lease: bool) -> int:
    return q.enqueue({"store": str(store), "key": "home.html", "seconds": seconds, "check_lease": check_lease})


@pytest.mark.parametrize("check_lease", [False, True])
def test_a_frozen_worker_that_checks_its_lease_writes_nothing_outside_the_queue(tmp_path, fleet_on, check_lease):
    db, store = tmp_path / "jobs.db", tmp_path / "pages.db"
    fleet = fleet_on(db)
    with Queue(db) as q:
        job_id = _publish(q, store, seconds=3.0, check_lease=check_lease)
        a = fleet.spawn("leaselab.harness.demo:publish", lease=1.0, name="A")
        wait_until(lambda: q.get(job_id).worker == "A", message="A to claim the job")
        time.sleep(0.3)
        fleet.pause(a)
        wait_until(lambda: process_state(fleet.pid(a)) == "T", message="A to be stopped")
        until = q.get(job_id).lease_until
        wait_until(lambda: time.time() > until, message="A's lease to run out")
        assert q.reap() == [job_id]
        b = fleet.spawn("leaselab.harness.demo:publish", lease=30, name="B", exit_when_idle=True)
        assert fleet.wait(b, timeout=60) == 0, log_of(fleet, b)
        with FencedStore(store) as pages:
            assert pages.read("home.html")[0] == {"worker": "B", "attempt": 2}
        fleet.resume(a)
        # A learns it lost the lease from the refused heartbeat or, first, from its own deadline: a
        # handler that checks its lease may raise, and end the attempt, before the overdue beat is sent.
        wait_until(
            lambda: "heartbeat refused" in log_of(fleet, a) or "may have run out" in log_of(fleet, a),
            message="A to log the lost lease",
        )
        wait_until(lambda: "ended without its lease" in log_of(fleet, a), message="A's handler to end")
        with FencedStore(store) as pages:
            page = pages.read("home.html")[0]
        # Unfenced and unchecked, the zombie overwrites B's page; checking its lease, it never writes.
        assert page == ({"worker": "B", "attempt": 2} if check_lease else {"worker": "A", "attempt": 1})
        if check_lease:
            assert "ended without its lease: LeaseLost" in log_of(fleet, a)
        fleet.stop(a)
        assert fleet.wait(a, timeout=60) == 0, log_of(fleet, a)


def test_with_concurrency_each_handler_gets_its_own_lease_and_refused_heartbeats_set_them(target):
    import threading

    clock = ManualClock()
    with Queue(target, clock=clock, call_timeout=0.9) as q:  # below the worker's lease
        q.enqueue_many(["a", "b"])
        both = threading.Barrier(2)
        told = {}

        def handler(job, lease):
            both.wait(10)
            if job.payload == "a":
                clock.advance(10)  # both leases (1 s) run out...
                q.reap()  # ...and both jobs are taken back while their handlers run
            told[job.payload] = (lease.job.id == job.id, lease.lost.wait(5))

        stats = Worker(q, handler, name="w1", lease=1.0, concurrency=2).run(max_jobs=2)
        assert told == {"a": (True, True), "b": (True, True)} and stats.lost == 2


def test_a_lease_past_its_deadline_is_announced_once_whether_the_handler_or_the_watcher_finds_it(tmp_path):
    from leaselab.worker.lease import Lease, Leases

    with Queue(tmp_path / "q.db") as q:
        q.enqueue("x")
        job = q.claim("w1", lease=10)
    now = [0.0]
    told: list = []
    leases = Leases(on_expired=told.append)
    try:
        lease = Lease(job, 10, sent=0.0, clock=lambda: now[0])
        leases.add(lease)
        lease.check()  # within its lease: nothing happens
        now[0] = 9.5  # past the lease less its tenth, on the worker's own clock
        with pytest.raises(LeaseLost):
            lease.check()  # the handler finds it first; the worker is told all the same
        with pytest.raises(LeaseLost):
            lease.check()
        assert lease.expired() and told == [lease]
    finally:
        leases.close()
    assert told == [lease]


def test_the_watcher_sleeping_toward_a_long_lease_still_gives_up_a_shorter_one_added_later_on_time(tmp_path):
    """The watcher is woken only for a deadline sooner than its own (not for every claim): a short
    lease added while it sleeps toward a long one, or holds nothing, is still given up at its deadline."""
    from leaselab.worker.lease import Lease, Leases

    with Queue(tmp_path / "q.db") as q:
        q.enqueue_many(["long", "short", "shorter"])
        long, short, shorter = (q.claim("w1", lease=30) for _ in range(3))
    told: list = []
    leases = Leases(on_expired=told.append)
    try:
        leases.add(Lease(long, 30))
        started = time.monotonic()
        leases.add(quick := Lease(short, 0.5, margin=0))
        wait_until(lambda: told == [quick], timeout=5)
        assert time.monotonic() - started < 3
        leases.remove(quick)
        for lease in list(leases.renewable()):
            leases.remove(lease)  # holding nothing: it sleeps as long as the shortest lease it saw
        started = time.monotonic()
        leases.add(quicker := Lease(shorter, 0.2, margin=0))
        wait_until(lambda: told == [quick, quicker], timeout=5)
        assert time.monotonic() - started < 3
    finally:
        leases.close()


def test_leases_handed_in_stop_being_renewed_but_stay_kept_from_the_reaper_until_their_outcome_is_written(tmp_path):
    """``hand_in`` is remove and keep in one step: at no moment is a finished attempt's token neither
    renewed nor kept, and once the outcome is written (the context exits) it is neither."""
    from leaselab.worker.lease import Lease, Leases

    with Queue(tmp_path / "q.db") as q:
        q.enqueue_many(["a", "b", "c"])
        a, b, c = (Lease(job, 30) for job in q.claim_many(3, "w1"))
    leases = Leases()
    try:
        leases.add(a, b, c)
        assert sorted(leases.keep()) == sorted([a.token, b.token, c.token]) and len(leases) == 3
        with leases.hand_in([a, b], "refill-claim"):
            assert leases.renewable() == [c]
            assert sorted(leases.keep()) == sorted([c.token, "refill-claim", a.token, b.token])
        assert leases.keep() == [c.token] and leases.renewable() == [c] and len(leases) == 1
    finally:
        leases.close()
