"""The workers' journal (what the queue told each worker) and ``leaselab check --journal``, which judges the
server's history against it."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

from leaselab import Queue, Worker
from leaselab.check import check
from leaselab.check.history import History, load
from leaselab.check.journal import journal_anomalies, read_journal


def _run(db: str, journal=None, jobs: int = 3) -> None:
    with Queue(db) as q:
        for n in range(jobs):
            q.enqueue({"n": n})
        handler = lambda job: job.payload["n"]  # noqa: E731
        with Worker(q, handler, name="w1", exit_when_idle=True, signals=False, journal=journal) as worker:
            worker.run()


def test_a_worker_journals_each_claim_and_each_acknowledged_completion_and_a_clean_run_checks_clean(tmp_path):
    db, folder = str(tmp_path / "q.db"), tmp_path / "journal"
    _run(db, folder)
    (path,) = folder.glob("w1-*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((e["kind"], e["job"]) for e in lines) == sorted(
        [("claimed", n) for n in (1, 2, 3)] + [("completed", n) for n in (1, 2, 3)]
    )
    assert all(e["attempt"] == 1 and e["token"] and e["worker"] == "w1" for e in lines)
    assert check(db, journal=folder).clean


def test_a_worker_keeps_no_journal_unless_asked(tmp_path):
    _run(str(tmp_path / "q.db"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.db"]


def test_check_journal_names_a_completion_the_queue_forgot_with_both_witnesses(tmp_path):
    db, folder = str(tmp_path / "q.db"), tmp_path / "journal"
    _run(db, folder)
    # A forgotten completion, as a failover to a standby that lacked it leaves it: the row and its history
    # as they were before the completion, written with the raw driver.
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM events WHERE job_id = 2 AND kind = 'completed'")
        conn.execute("UPDATE jobs SET status = 'running', lease_until = 9e9 WHERE id = 2")
    done = subprocess.run(
        [sys.executable, "-m", "leaselab", "check", "--db", db, "--journal", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert done.returncode == 1, done.stderr
    assert "acknowledged outcome lost" in done.stdout
    assert "job=2 completed attempt=1 worker=w1" in done.stdout and "jobs#2 status=" in done.stdout


def test_a_failure_the_server_forgot_is_no_broken_promise_the_attempt_is_reaped_and_runs_again(tmp_path):
    # A failure is committed without waiting for the disk at every durability (docs/durability.md):
    # a server crash right after its reply may lose it, and the job then stays running under the
    # attempt's claim until the reaper takes it back. The journal judges the promises the queue makes.
    db, folder = str(tmp_path / "q.db"), tmp_path / "journal"
    with Queue(db) as q:
        q.enqueue({"n": 1})
        with Worker(q, lambda job: 1 / 0, name="w1", exit_when_idle=True, signals=False, journal=folder) as worker:
            worker.run(max_jobs=1)
    (path,) = folder.glob("w1-*.jsonl")
    assert [json.loads(line)["kind"] for line in path.read_text().splitlines()] == ["claimed", "failed"]
    with sqlite3.connect(db) as conn:  # the failure forgotten: the row and history as before it
        conn.execute("DELETE FROM events WHERE job_id = 1 AND kind = 'failed'")
        conn.execute("UPDATE jobs SET status = 'running', lease_until = 9e9 WHERE id = 1")
    assert [a.kind for a in journal_anomalies(load(db), read_journal(folder))] == []


def test_check_journal_refuses_a_folder_that_is_not_there(tmp_path):
    _run(str(tmp_path / "q.db"))
    done = subprocess.run(
        [sys.executable, "-m", "leaselab", "check", "--db", str(tmp_path / "q.db"), "--journal", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert done.returncode == 2 and "--journal: no journal folder" in done.stderr


def _fence_told_twice(second_claim_at: float) -> list[dict]:
    """Attempt 1 of job 1 told to token c (claimed at 1, completed at 2), then to token e (claimed at
    ``second_claim_at``, completed a second later)."""
    c, e = "c" * 32, "e" * 32
    return [
        {"kind": "claimed", "job": 1, "attempt": 1, "token": c, "worker": "w1", "at": 1.0},
        {"kind": "completed", "job": 1, "attempt": 1, "token": c, "worker": "w1", "at": 2.0},
        {"kind": "claimed", "job": 1, "attempt": 1, "token": e, "worker": "w2", "at": second_claim_at},
        {"kind": "completed", "job": 1, "attempt": 1, "token": e, "worker": "w2", "at": second_claim_at + 1},
    ]


def test_a_fence_handed_again_after_its_first_holder_was_told_is_a_failover_not_a_split_brain():
    kinds = [a.kind for a in journal_anomalies(History(jobs=[], events=[]), read_journal(_fence_told_twice(3.0)))]
    assert "fence_handed_twice" in kinds and "split_brain" not in kinds


def test_a_fence_whose_two_holders_were_told_while_the_other_held_it_is_a_split_brain_with_four_witnesses():
    told = read_journal(_fence_told_twice(1.5))
    found = [a for a in journal_anomalies(History(jobs=[], events=[]), told) if a.kind == "split_brain"]
    assert len(found) == 1 and found[0].facts["overlap"] == 0.5 and len(found[0].witness) == 4
    assert "two servers took the queue's writes at once" in found[0].sentence("en")
