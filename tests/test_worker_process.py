"""``Worker.run()`` called from a Python program behaves as the ``leaselab worker`` command does:
SIGTERM and a first Ctrl-C finish the job held and return, a second Ctrl-C exits at once, the
parent's death ends it, and the signal handlers before are back afterwards."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from leaselab import Queue, Status
from tests.support.polling import pid_gone, wait_until

# A program that runs one Worker on the main thread. Its handler holds job 1 until the worker has
# been asked to stop (so no clock decides what is seen), then returns; the program prints what
# run() returned and whether SIGTERM's and SIGINT's handlers are the ones it had before.
PROGRAM = textwrap.dedent("""
    import signal, sys, time
    from leaselab import Worker

    said = []

    def log(line):
        said.append(line)
        print(line, flush=True)

    def handle(job):
        print("holding", job.id, flush=True)
        # After a Ctrl-C, hold the job until the worker has said which jobs it finishes: it reads
        # that from the queue, and a job already done by then would not be named.
        # (Worker.stop() says "stopping: finishing 1 job, at most 25s" first: not that line.)
        told = lambda: any("Ctrl-C again" in line for line in said)
        while not worker.stopping or (sys.argv[2] == "int" and not told()):
            time.sleep(0.01)
        return "done"

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with Worker(sys.argv[1], handle, name="py", lease=30, log=log) as worker:
        stats = worker.run()
    print("returned", stats.completed, flush=True)
    print("handlers back", (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before, flush=True)
""")


def _read_until(stream, text: str) -> str:
    """The lines of ``stream`` up to the first that holds ``text`` (which must come)."""
    seen = ""
    for line in stream:
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"{text!r} never came; the output was:\n{seen}")


def _start(tmp_path, mode: str, jobs: int = 2) -> tuple[subprocess.Popen, str]:
    db = str(tmp_path / "q.db")
    with Queue(db) as q:
        for n in range(jobs):
            q.enqueue(n)
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, db, mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    _read_until(proc.stdout, "holding 1")
    return proc, db


def _statuses(db: str) -> list[Status]:
    with Queue(db) as q:
        return [q.get(job_id).status for job_id in (1, 2)]


def test_sigterm_finishes_the_job_held_claims_no_other_and_puts_the_handlers_back(tmp_path):
    proc, db = _start(tmp_path, "term")
    try:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "returned 1" in out and "handlers back True" in out
    assert _statuses(db) == [Status.DONE, Status.PENDING]


def test_a_first_ctrl_c_says_which_job_it_finishes_and_returns(tmp_path):
    proc, db = _start(tmp_path, "int")
    try:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "py: finishing job 1, Ctrl-C again to hand it back and quit" in out
    assert "returned 1" in out and "handlers back True" in out
    assert _statuses(db) == [Status.DONE, Status.PENDING]


# The same program, but its handler never lets go: only a second Ctrl-C ends it.
STUCK = PROGRAM.replace("while not worker.stopping or", "while True or")


def test_a_second_ctrl_c_exits_at_once_and_hands_the_job_back(tmp_path):
    db = str(tmp_path / "q.db")
    with Queue(db) as q:
        q.enqueue(0)
    proc = subprocess.Popen([sys.executable, "-c", STUCK, db, "int"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        _read_until(proc.stdout, "holding 1")
        proc.send_signal(signal.SIGINT)
        _read_until(proc.stdout, "finishing job 1")  # the second Ctrl-C after the first was seen
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "stopped at once: handed back jobs 1 (pending)" in out
    with Queue(db) as q:
        assert q.get(1).status == Status.PENDING


def test_a_worker_run_from_python_exits_when_its_parent_is_gone(tmp_path, kill_at_teardown):
    db = str(tmp_path / "q.db")
    with Queue(db) as q:
        q.enqueue(0)
    parent_code = textwrap.dedent(f"""
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, "-c", {STUCK!r}, {db!r}, "int"], stdout=subprocess.PIPE, text=True)
        print(p.pid, flush=True)
        for line in p.stdout:
            if "holding 1" in line:
                print("holding 1", flush=True)
                break
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        worker_pid = int(parent.stdout.readline())
        kill_at_teardown(worker_pid)
        assert parent.stdout.readline().strip() == "holding 1"
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_until(lambda: pid_gone(worker_pid), timeout=15, message="the orphaned Python worker to exit")
    finally:
        parent.kill()
        parent.wait(10)


def test_a_worker_on_another_thread_or_made_with_signals_false_leaves_the_signals_alone(tmp_path):
    import threading

    from leaselab import Worker

    db = tmp_path / "q.db"
    with Queue(db) as q:
        q.enqueue(0)
        before = signal.getsignal(signal.SIGTERM)
        seen = []
        worker = Worker(
            q, lambda job: seen.append(signal.getsignal(signal.SIGTERM)), exit_when_idle=True, signals=False
        )
        worker.run()
        q.enqueue(1)
        other = Worker(q, lambda job: seen.append(signal.getsignal(signal.SIGTERM)), exit_when_idle=True)
        thread = threading.Thread(target=other.run)
        thread.start()
        thread.join(60)
        assert seen == [before, before]
