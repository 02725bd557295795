"""leaselab.worker.signals: a signal's action runs on the relay's thread, so a signal landing while the main
thread holds a lock the action needs (Event.wait's own, for a few bytecodes) cannot deadlock it.

Each case runs in a child process of its own: the relay installs process-wide handlers, and a case
that deadlocks must fail on a deadline instead of hanging the suite.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

DEADLINE = 60  # seconds; each case finishes in well under one when it passes


def run_child(body: str) -> subprocess.CompletedProcess:
    script = "import os, signal, threading, time\nfrom leaselab.worker.signals import Relay\n" + textwrap.dedent(body)
    try:
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=DEADLINE)
    except subprocess.TimeoutExpired as exc:  # run() has killed it
        pytest.fail(f"the child hung for {DEADLINE}s; it printed: {exc.stdout!r} {exc.stderr!r}")


def test_a_sigterm_while_the_main_thread_holds_the_events_lock_sets_the_event_once_the_lock_is_free():
    # What a worker idle in Event.wait() meets when SIGTERM lands between two of wait()'s bytecodes:
    # a handler setting that Event on the main thread would wait on the lock its own thread holds.
    done = run_child("""
        stop = threading.Event()
        with Relay({signal.SIGTERM: stop.set}):
            with stop._cond:  # as Event.wait() holds it on its way in and out
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # the pending handler runs during this, with the lock still held
                print("still held, set:", stop._flag, flush=True)
            print("set after release:", stop.wait(30), flush=True)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["still held, set: False", "set after release: True"]


def test_a_signal_that_lands_on_another_thread_acts_while_the_main_thread_sleeps():
    # The kernel gives a signal sent to the process to any thread that does not block it. One that lands
    # on a helper thread does not wake a main thread asleep in a handler's time.sleep(3600): a Python
    # handler would wait that hour. pthread_kill makes the unlucky case certain.
    done = run_child("""
        relayed = threading.Event()
        def act():
            print("relayed", flush=True)
            os._exit(0)
        helper = threading.Thread(target=relayed.wait, daemon=True)
        helper.start()
        with Relay({signal.SIGTERM: act}):
            signal.pthread_kill(helper.ident, signal.SIGTERM)
            time.sleep(3600)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["relayed"]


def test_the_wakeup_descriptor_before_the_relay_is_back_after_it():
    done = run_child("""
        import socket
        a, b = socket.socketpair()
        a.setblocking(False)
        signal.set_wakeup_fd(a.fileno())
        with Relay({signal.SIGUSR1: lambda: None}):
            pass
        print(signal.set_wakeup_fd(-1) == a.fileno(), flush=True)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True"]


def test_the_handlers_before_are_back_after_the_relay_and_sig_ign_ignores():
    done = run_child("""
        def mine(*_):
            print("mine", flush=True)
        signal.signal(signal.SIGUSR1, mine)
        got = []
        with Relay({signal.SIGUSR1: lambda: got.append("relayed"), signal.SIGUSR2: signal.SIG_IGN}):
            print(signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN, flush=True)
            os.kill(os.getpid(), signal.SIGUSR2)  # ignored: the default would end the process
            os.kill(os.getpid(), signal.SIGUSR1)
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                time.sleep(0.01)
        print(got, flush=True)
        print(signal.getsignal(signal.SIGUSR1) is mine, signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL,
              flush=True)
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.1)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True", "['relayed']", "True True", "mine"]


def test_signals_arriving_together_run_their_actions_in_order_and_a_failing_action_ends_nothing():
    done = run_child("""
        got = []
        def broken():
            raise RuntimeError("the action's own bug")
        with Relay({signal.SIGUSR1: lambda: got.append(1), signal.SIGUSR2: broken,
                    signal.SIGHUP: lambda: got.append("hup")}):
            for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP):
                os.kill(os.getpid(), sig)
                time.sleep(0.05)  # three separate signals: a second of one kind pending merges into the first
            deadline = time.monotonic() + 30
            while len(got) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
        print(got, flush=True)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[1, 'hup']"]
    assert "RuntimeError: the action's own bug" in done.stderr


def test_the_relay_leaves_no_thread_or_descriptor_behind():
    done = run_child("""
        before_fds = sorted(os.listdir("/proc/self/fd"))
        for _ in range(50):
            with Relay({signal.SIGUSR1: lambda: None}):
                os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        print(sorted(os.listdir("/proc/self/fd")) == before_fds, threading.active_count(), flush=True)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True 1"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_worker_command_stopped_by_a_signal_puts_the_handlers_back(tmp_path, sig):
    # main() may run inside a longer-lived program: after the worker, its handlers are its own again.
    done = run_child(f"""
        import sys
        from leaselab import Queue
        from leaselab.cli import main
        from leaselab.worker import STARTED

        class Watched:  # stdout, and an Event set once the worker says it started
            started = threading.Event()
            def write(self, text):
                if STARTED in text:
                    self.started.set()
                return sys.__stdout__.write(text)
            def flush(self):
                sys.__stdout__.flush()
            def fileno(self):
                return sys.__stdout__.fileno()

        def mine(*_):
            pass
        signal.signal(signal.SIGTERM, mine)
        signal.signal(signal.SIGINT, mine)
        Queue({str(tmp_path / "jobs.db")!r}).close()
        sys.stdout = Watched()
        def send():
            Watched.started.wait(30)
            os.kill(os.getpid(), {int(sig)})
        threading.Thread(target=send, daemon=True).start()
        rc = main(["worker", "--db", {str(tmp_path / "jobs.db")!r}, "--handler", "leaselab.harness.demo:echo",
                   "--name", "w"])
        print("rc", rc, signal.getsignal(signal.SIGTERM) is mine, signal.getsignal(signal.SIGINT) is mine,
              flush=True)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "rc 0 True True", done.stdout
    assert "exiting: claimed 0" in done.stdout
