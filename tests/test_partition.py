"""A worker cut off the network: its lease runs out, another worker finishes the job, and its late write is refused.

Only a server queue has a network between a worker and its jobs; each worker of a
``Fleet`` on a ``postgresql://`` queue talks to the server through its own proxy.
"""

from __future__ import annotations

import time

import pytest

from leaselab import Status
from leaselab.harness.demo import read_effects
from leaselab.harness.errors import PartitionUnsupported, UnknownWorker, WorkerNotRunning
from tests.support.polling import wait_until


@pytest.fixture
def server_fleet(pg_url, fleet_on):
    return fleet_on(pg_url)


def test_a_cut_off_worker_loses_its_job_to_another_and_its_late_completion_is_refused(server_fleet):
    fleet, q = server_fleet, server_fleet.queue
    job_id = q.enqueue({"seconds": 2.5})
    fleet.spawn(lease=1.5, name="w1")
    wait_until(lambda: q.get(job_id).worker == "w1", message="w1 to claim the job")
    first = q.get(job_id)
    fleet.partition("w1")
    status = fleet.status()[0]
    assert status.partitioned and status.badge == "cut_off" and status.jobs == (job_id,)
    # Its heartbeats no longer arrive: the lease runs out and the reaper hands the job on.
    wait_until(
        lambda: q.get(job_id).lease_until is None or q.get(job_id).lease_until < q.clock(),
        timeout=20,
        message="w1's lease to run out",
    )
    # Past its lease but its job not yet taken back: "lease expired", not yet a zombie.
    assert fleet.status()[0].badge == "lease_expired"
    wait_until(
        lambda: q.reap() or q.get(job_id).status is not Status.RUNNING or q.get(job_id).attempts > 1,
        message="the job to be reaped",
    )
    fleet.spawn(lease=5.0, name="w2")
    wait_until(lambda: q.get(job_id).status is Status.DONE, timeout=30, message="w2 to finish the job")
    done = q.get(job_id)
    assert done.worker == "w2" and done.attempts == 2 and done.result["worker"] == "w2"
    # The job is w2's now, but w1, still cut off, believes it holds it: still a zombie, not just cut off.
    status = fleet.status()[0]
    assert status.jobs == () and status.partitioned_jobs == (job_id,) and status.badge == "zombie"
    fleet.heal("w1")
    assert not fleet.status()[0].partitioned
    wait_until(
        lambda: "lease lost on job" in fleet.log_tail("w1", lines=50),
        timeout=30,
        message="w1 to learn, once reconnected, that it lost the job",
    )
    assert q.get(job_id).result == done.result  # the zombie's write was refused: w2's result stands
    refused = [e for e in q.events(job_id) if e.kind == "lease_lost"]
    assert refused and refused[-1].token == first.token and refused[-1].worker == "w1"
    actions = [(a.worker, a.action) for a in fleet.actions]
    assert ("w1", "partition") in actions and ("w1", "heal") in actions


def test_a_healed_worker_goes_on_working(server_fleet):
    fleet, q = server_fleet, server_fleet.queue
    fleet.spawn(lease=5.0, name="w1")
    fleet.partition("w1")
    ids = q.enqueue_many([{"seconds": 0}] * 3)
    # Enqueued while it is cut off: nothing reaches it, so nothing is claimed.
    time.sleep(1.5)
    assert q.stats()["done"] == 0
    fleet.heal("w1")
    wait_until(lambda: q.stats()["done"] == 3, timeout=30, message="the healed worker to drain the queue")
    assert {q.get(i).worker for i in ids} == {"w1"}


def test_partitioning_an_unknown_or_dead_worker_is_a_clear_error(server_fleet):
    with pytest.raises(UnknownWorker, match="nosuch"):
        server_fleet.partition("nosuch")
    server_fleet.spawn(lease=5.0, name="w1")
    server_fleet.kill("w1")
    with pytest.raises(WorkerNotRunning, match="cannot cut off worker 'w1'"):
        server_fleet.partition("w1")
    with pytest.raises(WorkerNotRunning, match="cannot reconnect worker 'w1'"):
        server_fleet.heal("w1")


def test_a_worker_of_a_sqlite_queue_has_no_network_to_cut(tmp_path, fleet_on):
    fleet = fleet_on(tmp_path / "lab.db")
    fleet.spawn(lease=5.0, name="w1")
    with pytest.raises(PartitionUnsupported, match="SQLite file"):
        fleet.partition("w1")
    assert not fleet.status()[0].partitioned


def test_shutdown_ends_a_cut_off_worker_cleanly(server_fleet):
    fleet, q = server_fleet, server_fleet.queue
    q.enqueue({"seconds": 0.5})
    fleet.spawn(lease=5.0, name="w1")
    wait_until(lambda: q.stats()["running"] + q.stats()["done"] == 1, message="w1 to claim")
    fleet.partition("w1")
    fleet.shutdown()
    assert fleet.status()[0].state == "exited" and fleet.status()[0].returncode == 0


def test_a_handler_cut_off_mid_run_learns_its_lease_may_be_gone_and_stops_before_its_side_effect(
    server_fleet, tmp_path
):
    # Issue 19, row 6: lease.lost was set only by a refused heartbeat. Cut off, the heartbeat
    # hangs and nothing is refused, so lease.check() never raised and the handler went on to act
    # as a zombie. The worker's own clock on the lease now sets it.
    fleet, q = server_fleet, server_fleet.queue
    effects, lease = tmp_path / "effects.jsonl", 2.0
    job_id = q.enqueue({"seconds": 30, "effects": str(effects)})
    fleet.spawn(handler="leaselab.harness.demo:careful", lease=lease, name="w1")
    wait_until(lambda: [e["detail"]["when"] for e in read_effects(effects)] == ["start"], message="w1 to start the job")
    fleet.partition("w1")
    # About one lease after the last acknowledged heartbeat; generous for a shared machine, and far
    # short of the 30 s after which the handler would write its effect.
    wait_until(lambda: len(read_effects(effects)) > 1, timeout=12, message="the cut-off handler to stop by itself")
    assert [e["detail"]["when"] for e in read_effects(effects)] == ["start", "stopped"]
    assert f"lease of job {job_id} (attempt 1) may have run out" in fleet.log_tail("w1", lines=50)
    # The worker writes nothing for that attempt (it could not, cut off); the job stays the queue's to reap.
    wait_until(lambda: "ended without its lease" in fleet.log_tail("w1", lines=50), message="w1 to give the attempt up")
    assert q.get(job_id).status is Status.RUNNING and q.get(job_id).result is None
    fleet.heal("w1")


def test_a_dropped_reply_cuts_the_worker_once_and_it_carries_on_with_its_jobs(server_fleet):
    fleet, q = server_fleet, server_fleet.queue
    fleet.spawn(lease=5.0, name="w1")
    # The next statement it sends (an idle poll, most likely) runs, unanswered. If a loaded proxy reads only
    # now the Terminate of the connection the worker closed as it started, that gets no reply and the drop waits.
    fleet.drop_reply("w1")
    try:
        wait_until(lambda: fleet.status()[0].replies_dropped == 1, message="the reply to be dropped")
    except pytest.fail.Exception:  # if it fails again, say what the worker was doing
        pytest.fail(
            f"no reply dropped in 20 s: w1 is {fleet.state('w1')}, "
            f"{fleet.status()[0].replies_dropped} dropped; its log:\n{fleet.log_tail('w1', lines=40)}"
        )
    job = q.enqueue({"seconds": 0})
    wait_until(lambda: q.get(job).status is Status.DONE, message="the job to be done after the cut")
    assert fleet.state("w1") == "running"
    assert [a.action for a in fleet.actions] == ["spawn", "drop-reply"]


def test_a_worker_of_a_sqlite_queue_has_no_reply_to_drop(tmp_path, fleet_on):
    fleet = fleet_on(tmp_path / "lab.db")
    fleet.spawn(lease=5.0, name="w1")
    with pytest.raises(PartitionUnsupported, match="SQLite file"):
        fleet.drop_reply("w1")
