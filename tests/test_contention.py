"""Contention: 16 processes enqueue, claim, complete and reap on one queue at once, on each backend;
no caller sees 'database is locked', and no job is claimed twice."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time

import pytest

from leaselab import Queue

PROCESSES = 16
JOBS_EACH = 40

# Each process waits for the go file so all 16 hit the file together, then interleaves
# its own enqueues with claims of anyone's jobs, and reaps now and then (another writer).
CLIENT = r"""
import json, os, sys, time, traceback
from leaselab import Queue
db, go, name, jobs_each, total = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
out = {"name": name, "enqueued": [], "done": [], "errors": []}
while not os.path.exists(go):
    time.sleep(0.001)
try:
    q = Queue(db)  # inside the race: sixteen first opens of a new file at once
    deadline = time.monotonic() + 120  # a bound on the race itself, in the child: not a wait for a condition
    while time.monotonic() < deadline and not os.path.exists(go + ".abort"):
        if len(out["enqueued"]) < jobs_each:
            out["enqueued"].append(q.enqueue({"from": name, "n": len(out["enqueued"])}))
        job = q.claim(name, lease=600)
        if job is not None:
            q.heartbeat(job.id, job.token, 600)
            q.complete(job.id, job.token, {"by": name})
            out["done"].append(job.id)
        elif len(out["enqueued"]) == jobs_each and q.stats()["done"] == total:
            break
        if len(out["done"]) % 10 == 3:
            q.reap()
except Exception as exc:
    where = " <- ".join(f"{f.name}:{f.lineno}" for f in reversed(traceback.extract_tb(exc.__traceback__)))
    out["errors"].append(f"{type(exc).__name__}: {exc} [at {where}]")
    open(go + ".abort", "w").close()  # the others would wait for jobs this process never enqueued
print(json.dumps(out))
"""


@pytest.fixture
def clients():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


def test_sixteen_processes_enqueuing_and_claiming_at_once_never_see_database_is_locked(tmp_path, target, clients):
    db, go = target, tmp_path / "go"
    total = PROCESSES * JOBS_EACH
    for i in range(PROCESSES):
        clients.append(
            subprocess.Popen(
                [sys.executable, "-c", CLIENT, db, str(go), f"p{i:02d}", str(JOBS_EACH), str(total)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    time.sleep(0.5)  # let the interpreters start, so the go file releases them together
    go.touch()

    results, stderr = [], []
    for p in clients:
        out, err = p.communicate(timeout=180)
        stderr.append(err)
        assert p.returncode == 0, f"client exited {p.returncode}: {err[-2000:]}"
        results.append(json.loads(out))

    errors = [e for r in results for e in r["errors"]]
    assert errors == [], f"errors reached callers: {errors[:10]}"
    assert not any("locked" in err for err in stderr), "\n".join(stderr)

    enqueued = sorted(i for r in results for i in r["enqueued"])
    done = sorted(i for r in results for i in r["done"])
    assert len(enqueued) == total == len(set(enqueued))
    assert done == enqueued, "every job completed exactly once, by exactly one process"

    with Queue(db) as q:  # 0 jobs claimed twice: every job done at its first attempt
        jobs = q.jobs(limit=total + 1)
        assert {(j.status.value, j.attempts) for j in jobs} == {("done", 1)} and len(jobs) == total
        assert [e.kind for e in q.events()].count("claimed") == total
    if q.backend.kind == "sqlite":
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()
