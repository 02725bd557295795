"""Periodic jobs run by workers: ``Worker(schedules=)`` enqueues each tick while it runs and its handler runs
them; two ``leaselab worker --schedule FILE`` processes on one schedule, on SQLite and PostgreSQL, enqueue
each tick once between them; a bad schedule file or schedule is refused before the worker starts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime

import pytest

from leaselab import Queue, Worker
from leaselab.errors import InvalidPayload
from leaselab.periodic import Schedule
from tests.test_cli import assert_one_clean_error_line, run

WAIT = 120.0  # the longest a test waits for ticks to come due and be run, on a busy machine


def _tick_times(jobs) -> list[float]:
    keys = [j.key for j in jobs if j.key is not None]
    assert len(keys) == len(set(keys)), sorted(keys)
    return sorted(datetime.fromisoformat(k.split("@")[1].replace("Z", "+00:00")).timestamp() for k in keys)


def _until(done, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_a_worker_with_schedules_enqueues_each_tick_and_runs_its_job(db_path):
    with Queue(db_path) as q:
        worker = Worker(
            q,
            lambda job: {"ran": job.key},
            schedules=[Schedule("beat", every=0.1, payload={"kind": "beat"}, catch_up="all")],
            signals=False,
            max_poll=0.05,
        )
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            _until(lambda: q.stats()["done"] >= 5, "five ticks run")
        finally:
            worker.stop()
            thread.join()
        jobs = q.jobs()
    times = _tick_times(jobs)
    assert [round((b - a) / 0.1) for a, b in zip(times, times[1:], strict=False)] == [1] * (len(times) - 1)
    assert all(j.payload == {"kind": "beat"} for j in jobs)
    assert all(j.result == {"ran": j.key} for j in jobs if j.status == "done")


def test_a_worker_refuses_a_schedule_whose_payload_is_not_json_before_it_runs(db_path):
    with Queue(db_path) as q, pytest.raises(InvalidPayload):
        Worker(q, lambda job: None, schedules=[Schedule("bad", every=1, payload={1, 2})], signals=False)


def test_two_worker_processes_on_one_schedule_file_enqueue_each_tick_once(tmp_path, target):
    (tmp_path / "tasks.py").write_text("def beat(job):\n    return job.key\n", encoding="utf-8")
    schedules = tmp_path / "schedules.json"
    schedules.write_text(json.dumps([{"name": "beat", "every": 0.2, "catch_up": "all", "payload": {"b": 1}}]))
    Queue(target).close()
    argv = [sys.executable, "-m", "leaselab", "worker", "--db", target, "--handler", "tasks:beat"]
    workers = [
        subprocess.Popen(
            [*argv, "--schedule", str(schedules), "--name", f"w{n}", "--max-poll", "0.1"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    try:
        with Queue(target) as q:
            _until(lambda: q.stats()["done"] >= 8, "eight ticks run")
        for w in workers:
            w.send_signal(signal.SIGTERM)
        outs = [w.communicate(timeout=WAIT) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    for w, (out, err) in zip(workers, outs, strict=True):
        assert w.returncode == 0, err
        assert "running schedules beat from" in out, out
    with Queue(target) as q:
        jobs = q.jobs()
    times = _tick_times(jobs)
    assert [round((b - a) / 0.2) for a, b in zip(times, times[1:], strict=False)] == [1] * (len(times) - 1)
    assert {j.result for j in jobs if j.status == "done"} <= {j.key for j in jobs}


def test_the_worker_command_refuses_a_bad_schedule_file_in_one_line(capsys, tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text('[{"name": "x", "every": 0}]')
    db = str(tmp_path / "q.db")
    assert_one_clean_error_line(
        *run(capsys, "worker", "--db", db, "--handler", "leaselab.harness.demo:task", "--schedule", str(bad)),
        "entry 1",
        "every must be > 0",
    )
    assert_one_clean_error_line(
        *run(capsys, "worker", "--db", db, "--handler", "leaselab.harness.demo:task", "--schedule", "nope.json"),
        "cannot read",
    )
    assert not (tmp_path / "q.db").exists()
