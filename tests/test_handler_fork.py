"""A handler that calls ``os.fork()`` and returns in both processes: the worker finishes its jobs
and exits, the parent's result is the one written, and no child lives on as a second worker."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from leaselab import Queue, Status
from tests.support.polling import pid_gone, wait_until

PROGRAM = textwrap.dedent("""
    import os, sys
    from leaselab import Worker

    db, pids, slots = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def handle(job):
        if os.fork() == 0:
            with open(pids, "a") as f:
                f.write(f"{os.getpid()}\\n")
            return "child"  # as the parent does: the child must not go on as a worker
        return "parent"

    with Worker(db, handle, name="forks", concurrency=slots, exit_when_idle=True, poll=0.01) as worker:
        stats = worker.run()
    print("returned", stats.completed, flush=True)
""")


@pytest.mark.parametrize("slots", [1, 4], ids=["one slot", "four slots"])
def test_a_handler_that_forks_neither_hangs_the_worker_nor_leaves_a_worker_in_the_child(tmp_path, slots):
    db, pids = str(tmp_path / "q.db"), tmp_path / "children"
    with Queue(db) as q:
        ids = q.enqueue_many(list(range(6)))
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, db, str(pids), str(slots)], stdout=subprocess.PIPE, text=True
    )
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    children = [int(line) for line in pids.read_text().split()]
    try:
        assert proc.returncode == 0 and "returned 6" in out, out
        with Queue(db) as q:
            assert [(q.get(i).status, q.get(i).result) for i in ids] == [(Status.DONE, "parent")] * 6
            assert q.stats()["running"] == 0
        assert len(children) == 6
        wait_until(lambda: all(pid_gone(pid) for pid in children), timeout=30, message="every forked child to be gone")
    finally:
        for pid in children:
            if not pid_gone(pid):
                subprocess.run(["kill", "-9", str(pid)], check=False)
