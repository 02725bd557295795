"""A job that cannot get stuck behind a live process that does nothing: timeouts, progress, and a clean stop.

A handler that hangs keeps its worker's heartbeat going (the pulse is another thread), so the lease
alone never brings its job back. A job's ``timeout`` (or the worker's ``job_timeout``) and its
``beat_timeout`` do: past either, the worker stops renewing the lease and writes the attempt as
``timed_out``, so the job is retried after its backoff, or dead. SIGTERM finishes the jobs for a grace,
then hands them back (``released``) so the next worker need not wait for the lease. On both backends.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest

from leaselab import Queue, Worker
from leaselab.worker import decisions
from leaselab.worker.process import EXIT_HUNG, EXIT_TERMINATED
from tests.support.polling import wait_until

GENEROUS = 120.0  # a deadline only bounds a failure: these pass in about a second on an idle machine


def kinds(q: Queue, job_id: int) -> list[str]:
    return [e.kind for e in q.events(job_id) if e.kind != "heartbeat"]


# -- the decision, apart from any thread -----------------------------------------------------------


def test_an_attempt_is_overdue_past_its_timeout_or_past_its_beat_timeout_and_not_before():
    assert decisions.overdue(10.0, 0.0, None, 0.0, None) is None
    assert decisions.overdue(4.9, 0.0, 5.0, 0.0, None) is None
    assert decisions.overdue(5.0, 0.0, 5.0, 0.0, None) == "ran past its timeout of 5s"
    assert decisions.overdue(5.0, 0.0, 60.0, 4.0, 2.0) is None  # it reported progress at 4
    assert "no progress for 2s" in decisions.overdue(6.0, 0.0, 60.0, 4.0, 2.0)
    assert decisions.overdue_at(1.0, 5.0, 3.0, 2.0) == 5.0 and decisions.overdue_at(1.0, None, 1.0, None) is None
    assert not decisions.out_of_service(1, 2) and decisions.out_of_service(2, 2)


# -- a worker in a program ---------------------------------------------------------------------------


def test_a_hung_handler_loses_its_job_at_its_timeout_while_the_other_slot_carries_on(target):
    release = threading.Event()
    said: list[str] = []

    def handler(job):
        if job.payload == "hang":
            release.wait()  # a lock never released, until the test ends
        return job.payload

    with Queue(target) as q:
        hung = q.enqueue("hang", timeout=0.5, max_attempts=1)
        others = q.enqueue_many(["a", "b", "c"])
    worker = Worker(target, handler, name="w", lease=2, concurrency=2, signals=False, log=said.append, poll=0.02)
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    try:
        with Queue(target) as q:
            wait_until(lambda: q.get(hung).status == "dead", GENEROUS, message="the hung job given up")
            assert kinds(q, hung) == ["enqueued", "claimed", "timed_out", "dead"]
            (timed_out,) = [e for e in q.events(hung) if e.kind == "timed_out"]
            assert timed_out.detail == "ran past its timeout of 0.5s" and timed_out.worker == "w"
            wait_until(lambda: all(q.get(i).status == "done" for i in others), GENEROUS, message="the others done")
        line = "job 1 (attempt 1) ran past its timeout of 0.5s: given up, dead now"
        wait_until(lambda: any(line in said_line for said_line in said), GENEROUS, message="the timeout's line")
    finally:
        release.set()
        worker.stop()
        runner.join(GENEROUS)
    assert not runner.is_alive()
    with Queue(target) as q:  # the late handler's result is not written: the attempt was given up
        assert q.get(hung).status == "dead" and q.get(hung).result is None
    assert any("its handler returned after it ran past its timeout of 0.5s: not written" in line for line in said), said


def test_a_worker_whose_every_slot_is_hung_stops_claiming_and_says_so(target):
    release = threading.Event()
    said: list[str] = []
    with Queue(target) as q:
        q.enqueue("hang")
        spare = q.enqueue("never claimed")
    worker = Worker(
        target, lambda job: release.wait(), name="w", lease=2, job_timeout=0.3, signals=False, log=said.append
    )
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    try:
        wait_until(lambda: worker.stopping, GENEROUS, message="the worker out of service")
        assert any("every slot holds a handler past its timeout (jobs 1): stopping" in line for line in said), said
    finally:
        release.set()
        runner.join(GENEROUS)
    with Queue(target) as q:
        assert q.get(spare).status == "pending"  # a stopping worker claims nothing more
        assert kinds(q, 1)[:3] == ["enqueued", "claimed", "timed_out"] and q.get(1).status == "pending"


def test_a_handler_that_reports_progress_keeps_its_lease_and_one_that_stops_reporting_loses_it(target):
    def handler(job, lease):
        for _ in range(20):  # about a second of work, reporting progress at every step
            lease.beat()
            threading.Event().wait(0.05)
        if job.payload == "stall":
            threading.Event().wait(3)  # and then nothing: no progress for longer than its beat_timeout
        return "moved"

    with Queue(target) as q:
        steady = q.enqueue("steady", beat_timeout=2)
        stall = q.enqueue("stall", beat_timeout=0.5, max_attempts=1)
    with Worker(target, handler, name="w", lease=10, concurrency=2, exit_when_idle=True, signals=False) as worker:
        worker.run()
    with Queue(target) as q:
        assert q.get(steady).status == "done" and q.get(steady).result == "moved"
        assert kinds(q, stall) == ["enqueued", "claimed", "timed_out", "dead"]
        assert "no progress for 0.5s" in q.events(stall)[-2].detail


def test_a_stopped_worker_hands_back_the_jobs_still_running_when_its_grace_runs_out(target):
    release = threading.Event()
    said: list[str] = []
    with Queue(target) as q:
        job_id = q.enqueue("slow")
    worker = Worker(
        target, lambda job: release.wait(), name="w", lease=30, concurrency=2, grace=0.2, signals=False, log=said.append
    )
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    try:
        with Queue(target) as q:
            wait_until(lambda: q.get(job_id).status == "running", GENEROUS, message="the job claimed")
            worker.stop()
            runner.join(GENEROUS)  # returns at the grace's end, its handler still running
            assert not runner.is_alive()
            job = q.get(job_id)
            assert (job.status, job.attempts) == ("pending", 1)
            assert kinds(q, job_id) == ["enqueued", "claimed", "released"]
            released = q.events(job_id)[-1]
            assert job.run_at == released.at  # runnable at once: no backoff, no lease to wait for
    finally:
        release.set()
    assert "w: stopping: finishing 1 job, at most 0.2s" in said
    assert any(f"grace of 0.2s ran out: handed back jobs {job_id} (pending)" in line for line in said), said


# -- the command -----------------------------------------------------------------------------------


def _worker(target: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "leaselab", "worker", "--db", target, "--lease", "2", "--max-poll", "0.2", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _read_until(proc: subprocess.Popen, text: str) -> str:
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"the worker never said {text!r}: {''.join(seen)}")


def test_a_one_slot_worker_whose_handler_hangs_gives_the_job_up_and_exits_with_status_5(target):
    with Queue(target) as q:
        job_id = q.enqueue({"seconds": 3600})
    proc = _worker(target, "--handler", "leaselab.harness.demo:sleepy", "--job-timeout", "0.5")
    try:
        out, _ = proc.communicate(timeout=GENEROUS)
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.returncode == EXIT_HUNG, out
    assert "ran past its timeout of 0.5s: given up, pending now" in out, out
    assert f"exiting: every slot holds a handler past its timeout (job {job_id}); start a new worker" in out, out
    with Queue(target) as q:
        assert kinds(q, job_id) == ["enqueued", "claimed", "timed_out"] and q.get(job_id).status == "pending"


def test_enqueue_timeout_on_the_command_line_is_the_jobs_own(target):
    out = subprocess.run(
        [sys.executable, "-m", "leaselab", "enqueue", "--db", target, "{}", "--timeout", "7", "--beat-timeout", "2"],
        capture_output=True,
        text=True,
        timeout=GENEROUS,
    )
    assert out.returncode == 0, out.stderr
    with Queue(target) as q:
        job = q.get(int(out.stdout))
        assert (job.timeout, job.beat_timeout) == (7.0, 2.0)
    bad = subprocess.run(
        [sys.executable, "-m", "leaselab", "enqueue", "--db", target, "{}", "--timeout", "0"],
        capture_output=True,
        text=True,
        timeout=GENEROUS,
    )
    assert bad.returncode == 2 and "--timeout" in bad.stderr and "Traceback" not in bad.stderr


def test_sigterm_finishes_within_the_grace_then_hands_the_job_back_at_once(target):
    with Queue(target) as q:
        job_id = q.enqueue({"seconds": 3600})
    proc = _worker(target, "--handler", "leaselab.harness.demo:sleepy", "--grace", "0.5", "--lease", "30")
    try:
        _read_until(proc, f"claimed job {job_id}")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=GENEROUS)
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.returncode == 0, out
    assert "stopping: finishing 1 job, at most 0.5s" in out, out
    assert f"grace of 0.5s ran out: handed back jobs {job_id} (pending)" in out, out
    with Queue(target) as q:
        job = q.get(job_id)
        assert job.status == "pending" and job.run_at == q.events(job_id)[-1].at  # not a 30 s lease later
        assert kinds(q, job_id) == ["enqueued", "claimed", "released"]


def test_a_second_sigterm_hands_the_job_back_and_quits_now(target):
    with Queue(target) as q:
        job_id = q.enqueue({"seconds": 3600})
    proc = _worker(target, "--handler", "leaselab.harness.demo:sleepy", "--grace", "3600")
    try:
        _read_until(proc, f"claimed job {job_id}")
        proc.send_signal(signal.SIGTERM)
        said = _read_until(proc, "stopping: finishing 1 job, at most 3600s")
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=GENEROUS)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
            raise AssertionError(f"the worker did not stop on a second SIGTERM; it said:\n{said}{rest}") from None
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.returncode == EXIT_TERMINATED, out
    assert f"stopped at once: handed back jobs {job_id} (pending)" in out, out
    with Queue(target) as q:
        assert kinds(q, job_id) == ["enqueued", "claimed", "released"]


def test_a_worker_with_nothing_running_stops_on_sigterm_at_once(target):
    Queue(target).close()
    proc = _worker(target, "--handler", "leaselab.harness.demo:sleepy")
    try:
        _read_until(proc, "started")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=GENEROUS)
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.returncode == 0 and "exiting: claimed 0" in out, out
    assert "stopping: finishing" not in out and "grace" not in out


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_a_second_sigterm_stops_the_worker_even_when_a_lock_keeps_it_from_handing_the_job_back(target):
    import sqlite3

    with Queue(target) as q:
        job_id = q.enqueue({"seconds": 3600})
    proc = _worker(target, "--handler", "leaselab.harness.demo:sleepy", "--grace", "3600", "--lease", "30")
    blocker = sqlite3.connect(target, isolation_level=None)
    try:
        _read_until(proc, f"claimed job {job_id}")
        proc.send_signal(signal.SIGTERM)
        _read_until(proc, "stopping: finishing 1 job")
        blocker.execute("BEGIN IMMEDIATE")  # another program holds the write lock, for longer than the wait
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=GENEROUS)  # the busy timeout is 30 s; the second stop waits 5
    finally:
        blocker.close()
        proc.kill()
        proc.wait(10)
    assert proc.returncode == EXIT_TERMINATED, out
    assert "stopped at once" in out and "handed back" not in out, out
    with Queue(target) as q:  # not handed back: its lease covers it, as for a crash
        assert q.get(job_id).status == "running"
