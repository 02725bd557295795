"""A real power cut on leaselab's own statements: what each durability keeps, and what SIGKILL keeps."""

from __future__ import annotations

import signal

import pytest

pytest.importorskip("apsw")

from leaselab import LeaselabError, ManualClock, Queue
from leaselab.harness import powercut


def _after_cut(path, durability):
    Queue(path, durability=durability).close()
    disk = powercut.VolatileDisk()
    powercut.workload(powercut.Session(path, disk, durability=durability))
    disk.cut()
    with Queue(path) as q:
        return [(j.id, j.status.value, j.attempts) for j in q.jobs()], disk.syncs


def test_at_normal_durability_a_power_cut_rolls_back_acknowledged_enqueues_and_completions(tmp_path):
    jobs, _ = _after_cut(tmp_path / "normal.db", "normal")
    assert jobs == []  # nothing was synced since the file was made


def test_at_full_durability_every_acknowledged_write_and_every_claim_survives_so_no_fence_comes_back(tmp_path):
    jobs, syncs = _after_cut(tmp_path / "full.db", "full")
    assert syncs >= 6  # three enqueues, two claims and a completion, each synced before it returned
    assert jobs == [(1, "done", 1), (2, "running", 1), (3, "pending", 0)]


def test_sigkill_loses_nothing_committed_even_at_normal_durability(tmp_path):
    path = tmp_path / "killed.db"
    assert powercut.killed_after_workload(path, "normal") == -signal.SIGKILL
    with Queue(path) as q:
        assert [(j.id, j.status.value, j.attempts) for j in q.jobs()] == [
            (1, "done", 1),
            (2, "running", 1),
            (3, "pending", 0),
        ]


def test_after_the_cut_writes_are_dropped_and_the_disk_is_gone(tmp_path):
    path = tmp_path / "q.db"
    Queue(path).close()
    disk = powercut.VolatileDisk()
    session = powercut.Session(path, disk, durability="full")
    session.enqueue("kept")
    disk.cut()
    with Queue(path) as q:
        assert [j.payload for j in q.jobs()] == ["kept"]
    with pytest.raises(LeaselabError, match="no such vfs"):
        powercut.Session(path, disk)  # the disk's file system was unregistered with the power


def test_a_session_names_a_bad_durability_and_a_missing_file(tmp_path):
    disk = powercut.VolatileDisk()
    with pytest.raises(ValueError, match="durability must be 'full' or 'normal'"):
        powercut.Session(tmp_path / "x.db", disk, durability="paranoid")
    with pytest.raises(FileNotFoundError, match="make the queue file with Queue first"):
        powercut.Session(tmp_path / "missing.db", disk)
    disk.cut()


# -- the Queue itself on the disk: leaselab's own statements and durability rule under the cut --------


def _made(path, durability="full"):
    Queue(path, durability=durability).close()  # on the real disk before the power goes
    return powercut.VolatileDisk()


def test_a_file_uri_naming_the_disk_opens_the_queue_through_the_apsw_backend(tmp_path):
    from leaselab.backends.apsw import ApswBackend

    disk = _made(tmp_path / "q.db")
    q = Queue(disk.target(tmp_path / "q.db"))
    assert isinstance(q.backend, ApswBackend) and q.backend.kind == "sqlite"
    assert q.enqueue("x") == 1 and disk.syncs >= 1  # the write went through the disk, and was synced
    disk.cut()


def test_at_full_durability_an_acknowledged_completion_survives_the_cut(tmp_path):
    path = tmp_path / "q.db"
    disk = _made(path)
    q = Queue(disk.target(path), durability="full")
    q.enqueue({"n": 1})
    job = q.claim("w1")
    q.complete(job.id, job.token, {"ok": 1})  # acknowledged: the caller was told it is done
    disk.cut()
    with Queue(path) as after:
        assert (after.get(job.id).status.value, after.get(job.id).result) == ("done", {"ok": 1})


def test_at_normal_durability_the_cut_may_take_an_acknowledged_completion_back(tmp_path):
    path = tmp_path / "q.db"
    disk = _made(path, "normal")
    q = Queue(disk.target(path), durability="normal")
    job_id = q.enqueue({"n": 1})
    job = q.claim("w1")
    q.complete(job.id, job.token, {"ok": 1})
    disk.cut()
    with Queue(path) as after:
        assert after.jobs() == [] and after.stats()["done"] == 0  # the job, its claim and its completion: gone
        assert after.enqueue({"n": 1}) == job_id  # and its id is handed out again


def test_at_full_durability_no_fence_is_handed_out_twice_after_a_cut(tmp_path):
    path = tmp_path / "q.db"
    disk = _made(path)
    q = Queue(disk.target(path), durability="full")
    q.enqueue({"n": 1})
    before = q.claim("w1", lease=5)
    disk.cut()
    clock = ManualClock(before.lease_until + 1)  # after the reboot, the lease has run out
    with Queue(path, clock=clock) as after:
        assert after.reap() == [before.id]
        clock.advance(3600)  # past the reap's backoff
        again = after.claim("w2")
    assert (again.id, again.attempts) == (before.id, before.attempts + 1)  # a newer fence, never the same one
    assert again.token != before.token


def test_at_normal_durability_a_claim_the_cut_took_back_hands_its_fence_out_again(tmp_path):
    # The same steps with only the claim unsynced: the contrast that makes the test above mean something.
    path = tmp_path / "q.db"
    disk = _made(path)
    Queue(disk.target(path), durability="full").enqueue({"n": 1})
    before = Queue(disk.target(path), durability="normal").claim("w1", lease=5)
    disk.cut()
    with Queue(path, clock=ManualClock(before.lease_until + 1)) as after:
        assert after.reap() == []  # nothing to reap: the claim is gone
        again = after.claim("w2")
    assert (again.id, again.attempts) == (before.id, before.attempts)  # the same fence, twice


def test_a_queue_dropped_before_the_cut_still_loses_what_was_never_synced(tmp_path):
    # Its connection stays open until the cut, as it would in a process the power took: closed
    # earlier, it would checkpoint, and a checkpoint syncs.
    path = tmp_path / "q.db"
    disk = _made(path, "normal")
    powercut.workload(Queue(disk.target(path), durability="normal"))
    disk.cut()
    with Queue(path) as after:
        assert after.jobs() == []


def test_a_queue_used_after_the_cut_raises_a_leaselab_error(tmp_path):
    path = tmp_path / "q.db"
    disk = _made(path)
    q = Queue(disk.target(path))
    disk.cut()
    with pytest.raises(LeaselabError):
        q.enqueue("too late")
    q.close()
