"""Fleet drives real worker processes: spawn, pause, resume, kill, stop, shutdown, and no orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from leaselab import HandlerError, LeaselabError, Queue, Status
from leaselab.harness.errors import SignalsUnsupported, UnknownWorker, WorkerExists, WorkerNotRunning
from leaselab.harness.fleet import faults_path, read_actions
from leaselab.worker import STARTED
from tests.support.polling import pid_gone, process_state, wait_until

# How far a server's clock, carried forward by a worker, and this process's may disagree in a test:
# a round trip and then some (0.15 s seen under load).
CLOCK_SLACK = 0.5


@pytest.fixture
def fleet(target, fleet_on):
    """A fleet on a fresh queue, on each backend; every worker it spawned is gone after the test."""
    return fleet_on(target)


def claimed_by(queue: Queue, name: str):
    return lambda: [j for j in queue.jobs(status="running") if j.worker == name]


def test_spawned_worker_is_a_live_process_that_claims_jobs(fleet):
    fleet.queue.enqueue({"seconds": 0})
    name = fleet.spawn(lease=2.0)
    assert name == "w1"
    assert process_state(fleet.pid(name)) not in (None, "Z")
    wait_until(lambda: fleet.queue.stats()["done"] == 1, message="the job to be done")
    assert fleet.queue.jobs()[0].worker == "w1"
    assert fleet.status()[0].state == "running"


def test_default_names_count_up_and_a_live_name_cannot_be_reused(fleet):
    assert [fleet.spawn(lease=2.0), fleet.spawn(lease=2.0)] == ["w1", "w2"]
    with pytest.raises(WorkerExists):
        fleet.spawn(lease=2.0, name="w1")
    assert fleet.spawn(lease=2.0, name="reader") == "reader"


def test_pause_stops_the_process_and_its_lease_runs_out_then_resume_continues(fleet):
    fleet.queue.enqueue({"seconds": 30})
    name = fleet.spawn(lease=1.0)
    job = wait_until(claimed_by(fleet.queue, name), message="w1 to claim")[0]
    fleet.pause(name)
    wait_until(lambda: process_state(fleet.pid(name)) == "T", message="the OS to report w1 stopped")
    assert fleet.state(name) == "paused"
    status = wait_until(
        lambda: [s for s in fleet.status() if s.lease_left is not None and s.lease_left < 0],
        message="w1's lease to run out while paused",
    )[0]
    # Nobody reaped it: its token is still in the job, so it is late, not a zombie.
    assert status.job_id == job.id and status.badge == "lease_expired"
    fleet.resume(name)
    wait_until(lambda: process_state(fleet.pid(name)) not in ("T", None), message="w1 to run again")
    assert fleet.state(name) == "running"
    # Resumed, it heartbeats again on the job nobody reaped: the lease is extended.
    wait_until(lambda: fleet.queue.get(job.id).lease_until > fleet.clock(), message="a fresh lease")


def test_kill_is_a_crash_with_signal_9_and_the_job_comes_back_after_a_reap(fleet):
    fleet.queue.enqueue({"seconds": 30})
    name = fleet.spawn(lease=1.0)
    job = wait_until(claimed_by(fleet.queue, name), message="w1 to claim")[0]
    pid = fleet.pid(name)
    fleet.kill(name)
    assert pid_gone(pid)
    [status] = fleet.status()
    assert (status.state, status.returncode) == ("killed", -signal.SIGKILL)
    wait_until(
        lambda: fleet.queue.reap() or fleet.queue.get(job.id).status == Status.PENDING,
        message="the dead worker's lease to be reaped",
    )
    assert fleet.queue.get(job.id).status == Status.PENDING


def test_a_worker_that_crashes_itself_shows_as_killed(fleet):
    fleet.queue.enqueue({"crash": True})
    name = fleet.spawn(lease=2.0)
    wait_until(lambda: fleet.state(name) == "killed", message="the crash handler to kill w1")
    assert fleet.status()[0].returncode == -signal.SIGKILL
    assert any(a.action == "exit" and a.detail == "signal 9" for a in fleet.actions)


def test_stop_lets_the_worker_finish_its_job_then_exit_0(fleet):
    fleet.queue.enqueue({"seconds": 1.5})
    name = fleet.spawn(lease=3.0)
    job = wait_until(claimed_by(fleet.queue, name), message="w1 to claim")[0]
    fleet.stop(name)
    assert fleet.wait(name, timeout=30) == 0
    assert fleet.queue.get(job.id).status == Status.DONE
    assert fleet.state(name) == "exited"
    assert "exiting" in fleet.log_tail(name)


def test_stop_on_a_paused_worker_resumes_it_first(fleet):
    name = fleet.spawn(lease=2.0)
    fleet.pause(name)
    fleet.stop(name)
    assert fleet.wait(name, timeout=30) == 0


def test_shutdown_leaves_no_child_process_even_a_paused_one(tmp_path, fleet_on):
    fleet = fleet_on(tmp_path / "lab.db")
    fleet.queue.enqueue_many([{"seconds": 30}] * 3)
    names = [fleet.spawn(lease=2.0) for _ in range(3)]
    pids = [fleet.pid(n) for n in names]
    wait_until(lambda: fleet.queue.stats()["running"] == 3, message="all three to claim")
    fleet.pause(names[0])
    fleet.shutdown(grace=1.0)
    assert all(pid_gone(pid) for pid in pids)
    assert {s.state for s in fleet.status()} <= {"killed", "exited"}
    fleet.shutdown()  # idempotent


def test_a_killed_parent_leaves_no_orphan_worker(tmp_path, kill_at_teardown):
    script = textwrap.dedent(f"""
        import sys, time
        from leaselab.harness.fleet import Fleet
        fleet = Fleet({str(tmp_path / "lab.db")!r})
        name = fleet.spawn(lease=2.0)
        print(fleet.pid(name), flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(parent.stdout.readline())
        kill_at_teardown(worker_pid)
        assert not pid_gone(worker_pid)
        parent.kill()
        parent.wait(10)
        wait_until(lambda: pid_gone(worker_pid), timeout=20, message="the orphaned worker to exit")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)


def test_the_worker_runs_in_its_own_session_so_a_notebook_interrupt_does_not_reach_it(fleet):
    name = fleet.spawn(lease=2.0)
    assert os.getsid(fleet.pid(name)) != os.getsid(0)


def test_unknown_worker_name_is_a_clear_error(fleet):
    fleet.spawn(lease=2.0)
    with pytest.raises(UnknownWorker, match="'w9'.*w1"):
        fleet.pause("w9")
    with pytest.raises(UnknownWorker):
        fleet.kill("w9")


def test_pausing_a_killed_worker_says_it_was_killed(fleet):
    name = fleet.spawn(lease=2.0)
    fleet.kill(name)
    with pytest.raises(WorkerNotRunning, match="killed by signal 9"):
        fleet.pause(name)
    with pytest.raises(WorkerNotRunning):
        fleet.kill(name)


def test_a_handler_that_does_not_import_fails_at_spawn_and_starts_nothing(fleet):
    with pytest.raises(HandlerError, match="no_such_module"):
        fleet.spawn(handler="no_such_module:run")
    with pytest.raises(HandlerError, match="no handler named"):
        fleet.spawn(handler="leaselab.harness.demo:no_such_function")
    assert fleet.names == []


def test_pause_and_resume_without_sigstop_raise_signals_unsupported(fleet, monkeypatch):
    name = fleet.spawn(lease=2.0)
    monkeypatch.delattr(signal, "SIGSTOP")
    monkeypatch.delattr(signal, "SIGCONT")
    with pytest.raises(SignalsUnsupported, match="SIGSTOP"):
        fleet.pause(name)
    with pytest.raises(SignalsUnsupported):
        fleet.resume(name)
    assert issubclass(SignalsUnsupported, LeaselabError)
    assert fleet.state(name) == "running"


def test_bad_names_and_leases_are_refused_before_anything_starts(fleet):
    with pytest.raises(ValueError, match="name"):
        fleet.spawn(name="w 1; rm")
    with pytest.raises(ValueError, match="lease"):
        fleet.spawn(lease=0)
    assert fleet.names == []


def test_each_worker_logs_to_its_own_file(fleet):
    a, b = fleet.spawn(lease=2.0), fleet.spawn(lease=2.0)
    wait_until(
        lambda: STARTED in fleet.log_tail(a) and STARTED in fleet.log_tail(b), message="both workers to log their start"
    )
    assert fleet.log_path(a) != fleet.log_path(b)
    assert f"{STARTED}{fleet.pid(a)}," in fleet.log_tail(a)


def test_pauses_and_kills_are_recorded_beside_the_file_for_later_timelines(fleet):
    name = fleet.spawn(lease=2.0)
    fleet.pause(name)
    fleet.resume(name)
    fleet.kill(name)
    recorded = [(a.worker, a.action) for a in read_actions(fleet.path)]
    assert recorded == [("w1", "spawn"), ("w1", "pause"), ("w1", "resume"), ("w1", "kill")]
    assert faults_path(fleet.path).exists()


def test_a_worker_that_cannot_start_fails_the_spawn_with_the_end_of_its_log(fleet, tmp_path, monkeypatch):
    # Importable here (the folder is on this process's path) but not in the child: it exits at start.
    (tmp_path / "only_here").mkdir()
    (tmp_path / "only_here" / "handlers_only_here.py").write_text("def run(job):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "only_here"))
    with pytest.raises(WorkerNotRunning, match="handlers_only_here"):
        fleet.spawn(handler="handlers_only_here:run", lease=2.0)
    assert fleet.state("w1") == "exited"


def test_a_server_queues_files_go_to_the_current_folder_named_without_the_password(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = "postgresql://alice:s3cret@db.example:6543/jobs"
    assert faults_path(url) == tmp_path / "pg-db.example-6543-jobs.faults.jsonl"
    assert faults_path(tmp_path / "lab.db") == tmp_path / "lab.db.faults.jsonl"


def test_a_paused_worker_is_a_zombie_only_once_its_expired_job_was_reaped(fleet):
    fleet.queue.enqueue({"seconds": 30})
    name = fleet.spawn(lease=1.0)
    job = wait_until(claimed_by(fleet.queue, name), message="w1 to claim")[0]
    fleet.pause(name)
    assert fleet.status()[0].badge == "paused"
    wait_until(lambda: fleet.status()[0].lease_left < 0, message="w1's lease to run out while paused")
    assert fleet.status()[0].badge == "lease_expired"
    assert fleet.queue.reap() == [job.id]  # the job is taken from it: now it acts on a lease it lost
    [status] = fleet.status()
    assert (status.badge, status.job_id, status.paused_job) == ("zombie", None, job.id)
    fleet.resume(name)
    wait_until(lambda: fleet.status()[0].badge == "running", message="the thawed worker to let go of the job")


def test_a_worker_paused_while_idle_is_paused_not_a_zombie(fleet):
    name = fleet.spawn(lease=0.5)
    fleet.pause(name)
    wait_until(lambda: fleet.status()[0].paused_for > 1.0, message="two leases to pass")
    assert fleet.status()[0].badge == "paused"


def test_a_spawned_worker_shrugs_off_a_real_sigint_and_says_how_to_stop_it(fleet):
    name = fleet.spawn(lease=2.0)
    pid = fleet.pid(name)
    assert f"ignoring Ctrl-C; stop it with: kill {pid}" in fleet.log_tail(name)
    fleet.queue.enqueue({"seconds": 0.5})
    wait_until(claimed_by(fleet.queue, name), message="the worker to claim the job")
    os.kill(pid, signal.SIGINT)  # what a notebook's Interrupt sends, delivered straight to the worker
    os.kill(pid, signal.SIGINT)  # twice: a terminal worker would abandon its job now
    wait_until(lambda: fleet.queue.stats()["done"] == 1, message="the job to finish despite the SIGINTs")
    second = fleet.queue.enqueue({"seconds": 0})
    wait_until(lambda: fleet.queue.get(second).status is Status.DONE, message="the worker to take the next job")
    assert fleet.state(name) == "running" and "Ctrl-C again" not in fleet.log_tail(name)


def test_a_worker_spawned_with_three_slots_holds_three_jobs_and_status_shows_them_all(fleet):
    ids = fleet.queue.enqueue_many([{"seconds": 3}] * 4)
    name = fleet.spawn(lease=5.0, concurrency=3)
    wait_until(lambda: len(fleet.status()[0].jobs) == 3, message="w1 to hold three jobs")
    status = fleet.status()[0]
    assert status.concurrency == 3 and status.jobs == tuple(ids[:3]) and status.job_id in ids[:3]
    # On a server the lease runs on the server's clock and lease_left on this one's (5.005 s was seen).
    assert 0 < status.lease_left <= 5.0 + CLOCK_SLACK
    fleet.pause(name)
    assert "holding jobs " + ", ".join(map(str, ids[:3])) in [a.detail for a in fleet.actions if a.action == "pause"]
    fleet.resume(name)


@pytest.mark.parametrize("value", [0, -2, 1.5, "2"])
def test_a_concurrency_below_one_or_not_an_int_is_refused_before_anything_starts(fleet, value):
    with pytest.raises((TypeError, ValueError), match="concurrency"):
        fleet.spawn(concurrency=value)
    assert fleet.names == []


def test_a_worker_that_crashes_by_itself_is_recorded_when_it_dies_not_when_someone_asks(fleet):
    from leaselab.lab.timeline import timeline_data

    job_id = fleet.queue.enqueue({"seconds": 0.2, "crash": 1})
    fleet.spawn(lease=5.0, name="w1")
    # Nobody calls status() or state(): only the fleet's own watcher can notice the death.
    exit_ = wait_until(lambda: [a for a in fleet.actions if a.action == "exit"], timeout=5)[0]
    claimed = next(e for e in fleet.queue.events(job_id) if e.kind == "claimed")
    # The handler sleeps 0.2 s before it crashes, but on a server the claim is dated by the worker's
    # reading of the server's clock carried forward on its own monotonic clock, off by up to a round
    # trip (0.15 s seen under load), while the exit is dated by this process's: only "after" is certain.
    assert exit_.detail == "signal 9" and 0.0 < exit_.at - claimed.at < 2.0
    # The timeline ends the dead attempt and starts the shading at the crash, long before a reap could.
    data = timeline_data(fleet.queue.events(), fleet.actions, now=claimed.at + 5)
    bar = next(b for b in data.bars if b.worker == "w1")
    down = next(f for f in data.faults if f.kind == "kill")
    assert bar.end == down.start == exit_.at


def test_a_worker_gets_the_extra_environment_and_launcher_it_was_spawned_with(fleet, tmp_path):
    # The launcher runs before leaselab's command line, as chaos's clock-jumping worker does.
    launcher = (
        sys.executable,
        "-c",
        "import os, sys; print('launched with', os.environ['CHAOS_TEST_MARK']); "
        "from leaselab.cli import main; sys.exit(main(sys.argv[1:]))",
    )
    name = fleet.spawn(lease=2.0, env={"CHAOS_TEST_MARK": "m-42"}, launcher=launcher)
    wait_until(lambda: "launched with m-42" in fleet.log_tail(name), message="the launcher's line")
    assert fleet.state(name) == "running"


def test_a_fleet_given_an_actions_file_records_there_and_not_beside_the_queue(tmp_path, fleet_on):
    record = tmp_path / "run" / "actions.jsonl"
    record.parent.mkdir()
    fleet = fleet_on(tmp_path / "lab.db", actions_file=record)
    fleet.kill(fleet.spawn(lease=2.0))
    assert [json.loads(line)["action"] for line in record.read_text().splitlines()][:2] == ["spawn", "kill"]
    assert not faults_path(fleet.path).exists()


SPINNER = """
import time

def spin(job):
    end = time.monotonic() + job.payload["seconds"]
    while time.monotonic() < end:
        pass
"""


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_pause_returns_once_the_worker_is_stopped_even_when_it_waits_for_the_cpu(fleet, tmp_path):
    """kill(SIGSTOP) returns once the signal is sent; a worker that is runnable but not running (here it
    shares one CPU with this thread) goes on until it is scheduled. pause() waits until it is stopped."""
    (tmp_path / "spinner.py").write_text(SPINNER)
    job_id = fleet.queue.enqueue({"seconds": 60})
    name = fleet.spawn("spinner:spin", lease=30.0)
    wait_until(claimed_by(fleet.queue, name), message="the worker to claim the spinning job")
    pid = fleet.pid(name)
    cpu = min(os.sched_getaffinity(0))
    mine = os.sched_getaffinity(0)
    for thread in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(thread), {cpu})
    os.sched_setaffinity(0, {cpu})
    try:
        fleet.pause(name)
        state = process_state(pid)
    finally:
        os.sched_setaffinity(0, mine)
    assert state == "T", f"pause() returned with the worker in state {state!r}"
    assert fleet.queue.get(job_id).worker == name


# -- hang: a live worker whose handler does nothing ------------------------------------------------


def kinds_without_beats(queue: Queue, job_id: int) -> list[str]:
    return [e.kind for e in queue.events(job_id) if e.kind != "heartbeat"]


def test_hang_makes_the_handler_wait_for_ever_while_its_heartbeat_keeps_the_lease(fleet):
    name = fleet.spawn(lease=1.0)
    fleet.hang(name)  # idle: its next handler takes the request
    assert fleet.status()[0].hang_asked and fleet.status()[0].badge == "running"
    job_id = fleet.queue.enqueue({"seconds": 0})  # a job that would be done at once
    status = wait_until(lambda: [s for s in fleet.status() if s.badge == "hung"], message="w1's handler hung")[0]
    assert not status.hang_asked and status.state == "running"
    wait_until(lambda: fleet.status()[0].hung_job == job_id, message="the hung handler's job written")
    beats = wait_until(
        lambda: len([e for e in fleet.queue.events(job_id) if e.kind == "heartbeat"]) >= 6,
        message="six heartbeats (two leases) on the hung job",
    )
    assert beats
    job = fleet.queue.get(job_id)
    assert (job.status, job.attempts, job.worker) == (Status.RUNNING, 1, name)
    assert kinds_without_beats(fleet.queue, job_id) == ["enqueued", "claimed"]
    assert fleet.status()[0].badge == "hung" and fleet.status()[0].jobs == (job_id,)
    assert [a.action for a in fleet.actions if a.worker == name][:2] == ["spawn", "hang"]


def test_with_a_job_timeout_a_hung_handler_gives_its_job_back_and_the_worker_exits_with_status_5(fleet):
    name = fleet.spawn(lease=1.0, job_timeout=1.0)
    fleet.hang(name)
    job_id = fleet.queue.enqueue({"seconds": 0})
    wait_until(lambda: fleet.state(name) == "exited", message="w1 to exit once its only slot is hung")
    [status] = fleet.status()
    assert (status.returncode, status.badge) == (5, "exited")
    assert kinds_without_beats(fleet.queue, job_id) == ["enqueued", "claimed", "timed_out"]
    (timed_out,) = [e for e in fleet.queue.events(job_id) if e.kind == "timed_out"]
    assert (timed_out.worker, timed_out.detail) == (name, "ran past its timeout of 1s")
    job = fleet.queue.get(job_id)
    assert (job.status, job.attempts) == (Status.PENDING, 1)
    log = fleet.log_tail(name)
    assert f"exiting: every slot holds a handler past its timeout (job {job_id}); start a new worker" in log, log
    assert fleet.actions[-1].action == "exit" and fleet.actions[-1].detail == "code 5"
    # The name may be reused, and the new worker inherits no hang: it does the job as attempt 2.
    assert fleet.spawn(lease=1.0, name=name) == name
    wait_until(lambda: fleet.queue.get(job_id).status == Status.DONE, message="the new w1 to do the job")
    assert fleet.queue.get(job_id).attempts == 2 and fleet.status()[0].badge == "running"


def test_one_hang_request_hangs_one_slot_and_the_other_slots_carry_on(fleet):
    name = fleet.spawn(lease=1.0, concurrency=2, job_timeout=60.0)
    fleet.hang(name)
    ids = fleet.queue.enqueue_many([{"seconds": 0}] * 4)
    wait_until(lambda: fleet.queue.stats()["done"] == 3, message="three jobs done beside the hung one")
    [status] = fleet.status()
    assert status.badge == "hung" and status.state == "running"
    [stuck] = [i for i in ids if fleet.queue.get(i).status == Status.RUNNING]
    wait_until(lambda: fleet.status()[0].hung_job == stuck, message="the hung handler's job written")


def test_hang_is_refused_for_a_handler_that_does_not_read_hang_requests(fleet):
    from leaselab.harness.errors import HangUnsupported

    name = fleet.spawn(handler="leaselab.harness.demo:echo", lease=2.0)
    with pytest.raises(HangUnsupported, match="does not read hang requests"):
        fleet.hang(name)
    assert not fleet.status()[0].hang_asked
