"""Real worker processes for the fault tests: start them, pause them, kill them, and never leave one behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from polling import pid_gone


def wait_for(condition: Callable[[], bool], timeout: float = 20.0, interval: float = 0.1) -> bool:
    """Poll ``condition`` until it is true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


class WorkerProc:
    """One ``python -m leaselab worker`` process with its log file."""

    def __init__(self, db: str, name: str, log_dir: Path, lease: float,
                 handler: str = "leaselab.lessons.demo:task", extra: tuple[str, ...] = ()):
        self.name = name
        self.proxy = None  # on a server queue: the worker's own proxy, so the test can cut its network
        self.cut = False
        if db.startswith(("postgresql://", "postgres://")):
            from leaselab.lab.proxy import Proxy, server_address, through

            self.proxy = Proxy(server_address(db))
            db = through(db, self.proxy.port)
        self.log_path = log_dir / f"{name}.log"
        self.stopped = False
        self.killed = False
        with open(self.log_path, "wb") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "leaselab", "worker", "--db", db, "--handler", handler,
                 "--name", name, "--lease", str(lease), "--poll", "0.02", "--max-poll", "0.2", *extra],
                stdout=log, stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig == signal.SIGCONT:
            self.stopped = False
        elif sig == signal.SIGKILL:
            self.killed = True

    def kill(self) -> None:
        """SIGKILL (a stopped process dies too) and reap it; close its proxy."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self.killed = True
        self.popen.wait(timeout=10)
        if self.proxy is not None:
            self.proxy.close()

    def partition(self) -> None:
        """Cut the worker off the server: its queries hang until ``heal``."""
        self.proxy.partition()
        self.cut = True

    def heal(self) -> None:
        self.proxy.heal()
        self.cut = False

    def started(self) -> bool:
        """True once the worker has said it started: from then on SIGTERM means "finish and exit 0".

        Before that the interpreter is still booting and SIGTERM's default action kills it (-15).
        """
        return " started (pid " in self.log()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class Pool:
    """Every worker a test started; ``close()`` (from a fixture finalizer) kills whatever is left."""

    def __init__(self, db: str, log_dir: Path, lease: float, concurrencies: tuple[int, ...] = (1,)):
        self.db, self.log_dir, self.lease = db, log_dir, lease
        self.networked = db.startswith(("postgresql://", "postgres://"))  # workers behind proxies: partitions
        self.concurrencies = concurrencies  # spawned workers take these in turn
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.all: list[WorkerProc] = []
        self._count = 0

    def spawn(self, **kwargs) -> WorkerProc:
        self._count += 1
        slots = self.concurrencies[self._count % len(self.concurrencies)]
        if slots != 1:
            kwargs["extra"] = (*kwargs.get("extra", ()), "--concurrency", str(slots))
        proc = WorkerProc(self.db, f"w{self._count:03d}", self.log_dir, self.lease, **kwargs)
        self.all.append(proc)
        return proc

    def live(self) -> list[WorkerProc]:
        return [p for p in self.all if p.alive() and not p.killed]

    def terminate_all(self, timeout: float = 30.0) -> dict[str, int | None]:
        """SIGCONT then SIGTERM every live worker (finish the job, exit); return name -> exit code."""
        for p in self.live():
            p.signal(signal.SIGCONT)
            if p.cut:
                p.heal()
        wait_for(lambda: all(p.started() for p in self.live()), timeout=timeout)
        for p in self.live():
            p.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        codes: dict[str, int | None] = {}
        for p in self.all:
            try:
                codes[p.name] = p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[p.name] = None
        return codes

    def close(self) -> None:
        for p in self.all:
            try:
                p.kill()
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass


NOBODY = 65534  # uid and gid of "nobody": a user the permission bits apply to (root ignores them)


def as_nobody(fn: Callable[[], str]) -> str:
    """Return ``fn()``, run as uid/gid 65534 in a forked child when this process is root.

    Forking (not a fresh interpreter) because this interpreter may live where that user cannot
    read. An exception in the child comes back as "unexpected <type>: <message>".
    """
    if os.geteuid() != 0:
        return fn()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, try, report, and leave without running pytest's clean-up
        code = 0
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = fn()
        except BaseException as exc:  # noqa: BLE001 - everything must reach the parent
            out, code = f"unexpected {type(exc).__name__}: {exc}", 1
        os.write(write, out.encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        out = fh.read().decode()
    os.waitpid(pid, 0)
    return out


def shut_down(fleet) -> None:
    """A test fleet's teardown: ``shutdown()``, then SIGKILL any worker that outlived it."""
    pids = [fleet.pid(n) for n in fleet.names]
    fleet.shutdown()
    for pid in pids:
        if not pid_gone(pid):  # pragma: no cover - shutdown failed; do not leave it running
            os.kill(pid, signal.SIGKILL)
