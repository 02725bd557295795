"""A queue file deleted, renamed or replaced under an open queue: SQLite would go on writing into a
file no one can open again. The queue notices at a heartbeat, a reap or a claim that finds nothing,
refuses every call from then on, and a worker says so in one line and exits with status 4."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from leaselab import Queue
from leaselab.errors import QueueFileGone
from leaselab.worker.process import EXIT_FILE_GONE


def _remove(path) -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{path}{suffix}"):
            os.remove(f"{path}{suffix}")


def test_a_deleted_file_is_found_at_the_next_heartbeat_and_then_every_call_is_refused(tmp_path):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        q.enqueue("a")
        [job] = q.claim_many(1, "w", 30)
        _remove(path)
        with pytest.raises(QueueFileGone, match="was deleted or renamed") as gone:
            q.heartbeat_many([(job.id, job.token)], 30)
        assert gone.value.path == str(path) and not gone.value.replaced
        with pytest.raises(QueueFileGone):  # a completion is not acknowledged into the lost file
            q.complete(job.id, job.token, "done")
        with pytest.raises(QueueFileGone):
            q.enqueue("b")
    assert not path.exists()  # nor is a new, empty file made in its place


def test_a_file_replaced_by_another_is_found_at_the_next_reap(tmp_path):
    path, other = tmp_path / "q.db", tmp_path / "other.db"
    with Queue(other) as o:
        o.enqueue("new")
    with Queue(path) as q:
        q.enqueue("old")
        os.replace(other, path)  # the -wal of the old file is left behind, as `mv` leaves it
        with pytest.raises(QueueFileGone, match="was replaced by another file") as gone:
            q.reap()
        assert gone.value.replaced
        with pytest.raises(QueueFileGone):
            q.enqueue("written after")
    # Not asserted: that the new file reads back as it was. The old file's -wal is still at
    # q.db-wal, and SQLite reads it into whichever file is at q.db when that is next opened: that is
    # the replacement's own damage (SQLite's "How To Corrupt", 2.4), done before any call noticed it.


def test_an_idle_queue_finds_its_file_gone_at_a_claim_that_finds_nothing(tmp_path):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        assert q.claim_many(1, "w", 30) == []
        os.rename(path, tmp_path / "elsewhere.db")
        with pytest.raises(QueueFileGone):
            q.claim_many(1, "w", 30)


def test_a_queue_in_memory_has_no_file_to_lose(tmp_path):
    with Queue(":memory:") as q:
        q.enqueue("a")
        [job] = q.claim_many(1, "w", 30)
        assert q.heartbeat_many([(job.id, job.token)], 30) == {job.id: pytest.approx(q.get(job.id).lease_until)}
        assert q.reap() == []


def _worker(path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "leaselab", "worker", "--db", str(path), "--lease", "1", "--max-poll", "0.2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for(proc: subprocess.Popen, text: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if text in line:
            return
    raise AssertionError(f"the worker never said {text!r}")


@pytest.mark.parametrize("how", ["deleted", "replaced"])
@pytest.mark.parametrize("busy", [True, False], ids=["running a job", "idle"])
def test_a_worker_whose_file_is_gone_exits_with_status_4_and_says_why(tmp_path, how, busy):
    path, other = tmp_path / "q.db", tmp_path / "other.db"
    with Queue(path) as q:
        if busy:
            q.enqueue({"seconds": 3600})
    with Queue(other) as o:
        o.enqueue("for the new file")
    proc = _worker(path, "--handler", "leaselab.harness.demo:sleepy", *(() if busy else ("--name", "idle")))
    try:
        _wait_for(proc, "claimed job 1" if busy else "started")
        if how == "deleted":
            _remove(path)
        else:
            os.replace(other, path)
        out, _ = proc.communicate(timeout=120)  # within a beat (a third of the 1 s lease) or a poll, unloaded
        assert proc.returncode == EXIT_FILE_GONE, out
        said = [line for line in out.splitlines() if "queue file" in line]
        want = "was deleted or renamed" if how == "deleted" else "was replaced by another file"
        assert any(want in line and str(path) in line for line in said), out
    finally:
        proc.kill()
        proc.wait(10)


def test_a_worker_in_a_program_stops_claiming_and_run_raises_once_its_file_is_gone(tmp_path):
    from leaselab import Worker

    path = tmp_path / "q.db"
    with Queue(path) as q:
        q.enqueue_many(["first", "second"])
    said: list[str] = []

    def handler(job):
        _remove(path)
        for _ in range(6000):  # until the pulse has told the worker (a third of the 1 s lease, unloaded)
            if worker.stopping:
                break
            time.sleep(0.01)
        return "done"

    worker = Worker(str(path), handler, name="py", lease=1, log=said.append, signals=False)
    with worker, pytest.raises(QueueFileGone):
        worker.run()
    assert worker.stopping and worker.stats.claimed == 1  # the second job was never claimed
    assert sum("was deleted or renamed" in line for line in said) == 1, said
