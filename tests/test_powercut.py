"""A real power cut on leaselab's own statements: what each durability keeps, and what SIGKILL keeps."""

from __future__ import annotations

import signal

import pytest

pytest.importorskip("apsw")

from leaselab import Queue  # noqa: E402
from leaselab.lessons import powercut  # noqa: E402


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
            (1, "done", 1), (2, "running", 1), (3, "pending", 0)]


def test_after_the_cut_writes_are_dropped_and_the_disk_is_gone(tmp_path):
    path = tmp_path / "q.db"
    Queue(path).close()
    disk = powercut.VolatileDisk()
    session = powercut.Session(path, disk, durability="full")
    session.enqueue("kept")
    disk.cut()
    with Queue(path) as q:
        assert [j.payload for j in q.jobs()] == ["kept"]
    with pytest.raises(Exception):
        powercut.Session(path, disk)  # the disk's file system was unregistered with the power


def test_a_session_names_a_bad_durability_and_a_missing_file(tmp_path):
    disk = powercut.VolatileDisk()
    with pytest.raises(ValueError, match="durability must be 'full' or 'normal'"):
        powercut.Session(tmp_path / "x.db", disk, durability="paranoid")
    with pytest.raises(FileNotFoundError, match="make the queue file with Queue first"):
        powercut.Session(tmp_path / "missing.db", disk)
    disk.cut()
