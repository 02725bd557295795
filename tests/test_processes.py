"""Real worker processes on one file: draining in parallel, fencing a paused zombie, surviving a crash, signals.

Processes are the subject here, so these tests use real time; every wait is a deadline, never a duration
that a success depends on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

from leaselab import Queue, Status
from leaselab.worker import STARTED
from tests.support.polling import pid_gone, process_state, wait_until
from tests.support.procs import log_of

HEAVY = ("pandas", "ipywidgets", "matplotlib", "numpy", "IPython")


def claimed_by(q: Queue, job_id: int, worker: str):
    """The claimed event of ``worker`` on ``job_id``, or None yet."""
    for e in q.events(job_id):
        if e.kind == "claimed" and e.worker == worker:
            return e
    return None


def story(q: Queue, job_id: int) -> list[tuple[str, str | None]]:
    """The job's history without heartbeats: (kind, worker) pairs, oldest first."""
    return [(e.kind, e.worker) for e in q.events(job_id) if e.kind != "heartbeat"]


def test_eight_worker_processes_drain_two_thousand_jobs_each_claimed_exactly_once(tmp_path, fleet_on):
    db = tmp_path / "jobs.db"
    n_jobs, n_workers = 2000, 8
    with Queue(db) as q:
        ids = q.enqueue_many([{"n": n} for n in range(n_jobs)])
    fleet = fleet_on(db)
    workers = [
        fleet.spawn("leaselab.harness.demo:echo", lease=60, name=f"w{i}", exit_when_idle=True) for i in range(n_workers)
    ]
    for w in workers:
        assert fleet.wait(w, timeout=180) == 0, f"{w} exited badly:\n{fleet.log_tail(w)}"

    with Queue(db) as q:
        assert q.stats() == {"pending": 0, "running": 0, "done": n_jobs, "dead": 0}
        jobs = q.jobs(limit=n_jobs + 1)
        events = q.events()
    assert [j.id for j in jobs] == ids
    assert all(j.status is Status.DONE and j.attempts == 1 and j.result == j.payload for j in jobs)
    claims = Counter(e.job_id for e in events if e.kind == "claimed")
    assert set(claims) == set(ids) and set(claims.values()) == {1}
    assert Counter(e.kind for e in events) == {"enqueued": n_jobs, "claimed": n_jobs, "completed": n_jobs}
    per_worker = Counter(j.worker for j in jobs)
    assert len(per_worker) > 1, per_worker
    for w in workers:
        log = log_of(fleet, w)
        assert "database is locked" not in log and "Traceback" not in log, log


def test_a_paused_worker_past_its_lease_is_fenced_off_and_the_other_result_stands(tmp_path, fleet_on):
    db = tmp_path / "jobs.db"
    fleet = fleet_on(db)
    with Queue(db) as q:
        job_id = q.enqueue({"seconds": 4})
        a = fleet.spawn(lease=1.5, name="A")
        claim_a = wait_until(lambda: claimed_by(q, job_id, "A"), message="A to claim the job")

        fleet.pause(a)
        wait_until(lambda: process_state(fleet.pid(a)) == "T", message="A to be stopped")
        until = q.get(job_id).lease_until  # read after the stop: no heartbeat can move it now
        wait_until(lambda: time.time() > until, message="A's lease to run out")
        assert q.reap() == [job_id]

        b = fleet.spawn(lease=30, name="B", exit_when_idle=True)
        assert fleet.wait(b, timeout=60) == 0, log_of(fleet, b)
        done = q.get(job_id)
        assert done.status is Status.DONE and done.result["worker"] == "B" and done.attempts == 2

        fleet.resume(a)
        lost = wait_until(
            lambda: [e for e in q.events(job_id) if e.kind == "lease_lost"], message="A's write to be refused"
        )
        assert [(e.worker, e.token, e.attempt) for e in lost] == [("A", claim_a.token, 1)]
        wait_until(lambda: "lease lost" in log_of(fleet, a), message="A to log the lost lease")

        fleet.stop(a)
        assert fleet.wait(a, timeout=60) == 0, log_of(fleet, a)
        final = q.get(job_id)
        assert final.status is Status.DONE and final.result["worker"] == "B" and final.worker == "B"
        assert story(q, job_id) == [
            ("enqueued", None),
            ("claimed", "A"),
            ("reaped", "A"),
            ("claimed", "B"),
            ("completed", "B"),
            ("lease_lost", "A"),
        ]


def test_a_worker_killed_mid_job_has_its_job_reaped_retried_and_done(tmp_path, fleet_on):
    db = tmp_path / "jobs.db"
    fleet = fleet_on(db)
    with Queue(db) as q:
        job_id = q.enqueue({"seconds": 5})
        a = fleet.spawn(lease=2, name="A")
        wait_until(lambda: claimed_by(q, job_id, "A"), message="A to claim the job")
        fleet.kill(a)
        assert fleet.wait(a, timeout=60) == -signal.SIGKILL
        assert q.get(job_id).status is Status.RUNNING  # nobody knows yet

        # B reaps on its own: no extra process or call is needed to bring the job back.
        b = fleet.spawn(lease=30, name="B", exit_when_idle=True)
        assert fleet.wait(b, timeout=60) == 0, log_of(fleet, b)
        job = q.get(job_id)
        assert job.status is Status.DONE and job.attempts == 2 and job.result["worker"] == "B"
        assert story(q, job_id) == [
            ("enqueued", None),
            ("claimed", "A"),
            ("reaped", "A"),
            ("claimed", "B"),
            ("completed", "B"),
        ]
        reaped = [e for e in q.events(job_id) if e.kind == "reaped"]
        assert reaped[0].detail == "lease expired"
        assert f"reaped expired leases of jobs [{job_id}]" in log_of(fleet, b)


def test_importing_the_core_pulls_in_no_pandas_ipywidgets_or_matplotlib():
    code = (
        "import json, sys, leaselab, leaselab.queue, leaselab.worker, leaselab.cli; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == []


def test_a_running_worker_process_has_no_heavy_modules_loaded(tmp_path, fleet_on):
    (tmp_path / "probe_handler.py").write_text(
        textwrap.dedent(f"""
        import sys

        def heavy(job):
            return sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
    """)
    )
    db = tmp_path / "jobs.db"
    with Queue(db) as q:
        job_id = q.enqueue("probe")
    # fleet_on runs the test in tmp_path, and a fleet's workers import handlers from the current folder.
    fleet = fleet_on(db)
    w = fleet.spawn("probe_handler:heavy", lease=30, name="probe", exit_when_idle=True)
    assert fleet.wait(w, timeout=60) == 0, log_of(fleet, w)
    with Queue(db) as q:
        job = q.get(job_id)
    assert job.status is Status.DONE and job.result == []


def test_with_ignore_sigint_sigint_does_not_stop_a_worker_and_sigterm_lets_it_finish_the_job_and_exit_0(
    tmp_path, fleet_on
):
    db = tmp_path / "jobs.db"
    fleet = fleet_on(db)  # a fleet's workers are started with --ignore-sigint
    with Queue(db) as q:
        w = fleet.spawn(lease=10, name="w-sig")  # returns once it has started
        os.kill(fleet.pid(w), signal.SIGINT)  # what a notebook's Interrupt sends to the kernel's process group
        first = q.enqueue({"seconds": 0})
        wait_until(lambda: q.get(first).status is Status.DONE, message="the worker to run a job after SIGINT")
        assert fleet.state(w) == "running" and q.get(first).worker == "w-sig"

        second = q.enqueue({"seconds": 2})
        wait_until(lambda: claimed_by(q, second, "w-sig"), message="the worker to claim the slow job")
        fleet.stop(w)
        assert fleet.wait(w, timeout=60) == 0, log_of(fleet, w)
        job = q.get(second)
        assert job.status is Status.DONE and job.result["worker"] == "w-sig"
        assert "exiting" in log_of(fleet, w) and "Traceback" not in log_of(fleet, w)


def start_in_a_terminal(
    tmp_path, db, name: str, lease: float, sigint=signal.SIG_DFL, extra: tuple[str, ...] = ()
) -> subprocess.Popen:
    """``leaselab worker`` as a shell starts it: SIGINT at its default (or ignored, as for ``worker &``)."""
    # Not a Fleet: a fleet's worker always gets --ignore-sigint and a session of its own; a terminal's gets neither.
    log = open(tmp_path / f"{name}.out", "wb")
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "leaselab",
                "worker",
                "--db",
                str(db),
                "--handler",
                "leaselab.harness.demo:task",
                "--name",
                name,
                "--lease",
                str(lease),
                "--poll",
                "0.02",
                "--max-poll",
                "0.2",
                *extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Whatever this test runner inherited (a CI script may run it with SIGINT ignored):
            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
        )
    finally:
        log.close()


@pytest.fixture
def terminal(tmp_path):
    """Start workers as a terminal would; any still running at teardown is killed (through Popen: no pid reuse)."""
    started: list[subprocess.Popen] = []

    def start(db, name: str, lease: float, sigint=signal.SIG_DFL, extra: tuple[str, ...] = ()):
        proc = start_in_a_terminal(tmp_path, db, name, lease, sigint, extra)
        started.append(proc)
        out = tmp_path / f"{name}.out"
        wait_until(
            lambda: f" {STARTED}" in out.read_text() or proc.poll() is not None, message=f"worker {name} to start"
        )
        assert proc.poll() is None, out.read_text()
        return proc, out

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def test_a_worker_started_in_a_terminal_says_ctrl_c_stops_it_and_a_first_ctrl_c_finishes_the_job(tmp_path, terminal):
    db = tmp_path / "jobs.db"
    with Queue(db) as q:
        proc, out = terminal(db, "w-term", lease=10)
        assert "Ctrl-C to stop" in out.read_text()
        first, second = q.enqueue({"seconds": 1.5}), q.enqueue({"seconds": 0})
        wait_until(lambda: claimed_by(q, first, "w-term"), message="the worker to claim the first job")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, out.read_text()
        text = out.read_text()
        assert f"finishing job {first}, Ctrl-C again to hand it back and quit" in text and "Traceback" not in text
        assert "exiting: claimed 1, completed 1" in text
        assert q.get(first).status is Status.DONE and q.get(second).status is Status.PENDING


def test_ctrl_c_on_a_worker_with_two_slots_names_both_jobs_and_finishes_both(tmp_path, terminal):
    db = tmp_path / "jobs.db"
    with Queue(db) as q:
        a, b, c = q.enqueue({"seconds": 1.5}), q.enqueue({"seconds": 1.5}), q.enqueue({"seconds": 0})
        proc, out = terminal(db, "w-two", lease=10, extra=("--concurrency", "2"))
        wait_until(lambda: claimed_by(q, a, "w-two") and claimed_by(q, b, "w-two"), message="both slots to fill")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, out.read_text()
        assert f"finishing jobs {a}, {b}, Ctrl-C again to hand them back and quit" in out.read_text()
        assert [q.get(i).status for i in (a, b, c)] == [Status.DONE, Status.DONE, Status.PENDING]


def test_an_idle_worker_in_a_terminal_exits_on_the_first_ctrl_c(tmp_path, terminal):
    db = tmp_path / "jobs.db"
    Queue(db).close()
    proc, out = terminal(db, "w-idle", lease=10)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0, out.read_text()
    assert "no job running: stopping" in out.read_text() and "exiting: claimed 0" in out.read_text()


def test_a_second_ctrl_c_hands_the_job_back_and_exits_at_once(tmp_path, terminal):
    db = tmp_path / "jobs.db"
    with Queue(db) as q:
        job_id = q.enqueue({"seconds": 60})
        proc, out = terminal(db, "w-twice", lease=30)
        wait_until(lambda: claimed_by(q, job_id, "w-twice"), message="the worker to claim the long job")
        proc.send_signal(signal.SIGINT)
        wait_until(
            lambda: "Ctrl-C again to hand it back and quit" in out.read_text(), message="the first Ctrl-C's message"
        )
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 130, out.read_text()  # long before the 60 s job could finish
        assert f"stopped at once: handed back jobs {job_id} (pending)" in out.read_text()
        job = q.get(job_id)  # back at once, not a 30 s lease later
        assert job.status is Status.PENDING and job.attempts == 1 and job.result is None
        assert [e.kind for e in q.events(job_id) if e.kind != "heartbeat"] == ["enqueued", "claimed", "released"]


def test_a_worker_started_with_sigint_ignored_keeps_ignoring_it(tmp_path, terminal):
    db = tmp_path / "jobs.db"
    with Queue(db) as q:
        proc, out = terminal(db, "w-bg", lease=10, sigint=signal.SIG_IGN)
        assert f"ignoring Ctrl-C; stop it with: kill {proc.pid}" in out.read_text()
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        job_id = q.enqueue({"seconds": 0})
        wait_until(lambda: q.get(job_id).status is Status.DONE, message="the worker to run a job after SIGINT")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_a_worker_whose_parent_dies_exits_on_its_own(tmp_path, kill_at_teardown):
    db = tmp_path / "jobs.db"
    Queue(db).close()
    log = tmp_path / "orphan.out"
    # Not a Fleet: the parent that dies is a separate bare process (test_fleet kills a Fleet's parent).
    parent_code = textwrap.dedent(f"""
        import subprocess, sys, time
        with open({str(log)!r}, "wb") as out:
            p = subprocess.Popen([sys.executable, "-m", "leaselab", "worker", "--db", {str(db)!r},
                                  "--handler", "leaselab.harness.demo:task", "--name", "orphan", "--lease", "5"],
                                 stdout=out, stderr=subprocess.STDOUT)
        print(p.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(parent.stdout.readline())
        kill_at_teardown(worker_pid)
        wait_until(lambda: f" {STARTED}" in log.read_text(), message="the orphan-to-be to start")
        assert not pid_gone(worker_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_until(lambda: pid_gone(worker_pid), timeout=15, message="the orphaned worker to exit")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        parent.stdout.close()


def test_a_killed_workers_job_comes_back_about_one_lease_later_while_every_live_worker_is_in_a_long_handler(
    tmp_path, fleet_on
):
    # Issue 19, row 5: the reaper ran only at the top of the worker loop, so with w1 busy for a
    # minute the killed worker's job waited the whole minute. The pulse reaps on its own cadence.
    db, lease = tmp_path / "jobs.db", 2.0
    fleet = fleet_on(db)
    with Queue(db) as q:
        long_job = q.enqueue({"seconds": 90})
        w1 = fleet.spawn(lease=lease, name="w1")
        wait_until(lambda: claimed_by(q, long_job, "w1"), message="w1 to claim the long job")
        victim = q.enqueue({"seconds": 90})
        w2 = fleet.spawn(lease=lease, name="w2")
        wait_until(lambda: claimed_by(q, victim, "w2"), message="w2 to claim the second job")
        fleet.kill(w2)
        # lease + reap interval (min(lease, 1)) + slack for a shared machine; the old code took
        # the 90 s of w1's handler.
        wait_until(
            lambda: any(e.kind == "reaped" for e in q.events(victim)),
            timeout=15,
            message="the killed worker's job to be reaped while w1 is still in its handler",
        )
        assert q.get(long_job).status is Status.RUNNING and q.get(long_job).worker == "w1"
        assert fleet.state(w1) == "running" and "completed job" not in log_of(fleet, w1)
    assert f"reaped expired leases of jobs [{victim}]" in log_of(fleet, w1)
