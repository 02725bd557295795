"""Throw-away PostgreSQL servers for the tests, where a queue lives, and what a server left behind.

A module of tests.support, not conftest: ``notebooks/conftest.py`` shares that module name, so a bare
``from conftest import ...`` could get the lessons' one; ``tests.support.servers`` is this one only.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.polling import pid_gone, wait_until

BACKENDS = ("sqlite", "postgresql")
# With the APSW backend on the power-cut lesson's VolatileDisk, a file system registered in this
# process only: for the modules whose queues all live in the test's process (the contract suite),
# which say so with TARGETS = IN_PROCESS_BACKENDS. A worker process could not open it.
# Also the minimal backend of tests/minimal_backend.py (registered in this process only: a
# ``minimal:<path>`` target), which writes only the required contract and takes every fast path's default.
IN_PROCESS_BACKENDS = BACKENDS + ("apsw", "minimal")


# Memory, for what the suite writes and throws away: a crashed server's restart once waited a minute
# and more behind other tests' writes to the disk (a virtual environment being installed, benchmarks
# flushing), side by side in CI, and never came back in time.
MEMORY = Path("/dev/shm")
MEMORY_ROOM = 2 << 30  # bytes free it needs, or the disk serves after all


def in_memory() -> Path | None:
    """/dev/shm when it is a writable folder with ``MEMORY_ROOM`` free (a tmpfs: nothing written there
    waits on a disk), else None."""
    if MEMORY.is_dir() and os.access(MEMORY, os.W_OK) and shutil.disk_usage(MEMORY).free >= MEMORY_ROOM:
        return MEMORY
    return None


def start_pg_server(**options):
    """A throw-away PostgreSQL cluster, its folder in memory when there is room (``in_memory``).
    Without PostgreSQL the test that needs it skips with the reason, except in CI (``CI`` set),
    where it fails: CI must run them all."""
    from leaselab.harness.pgserver import PgServer, PgUnavailable

    try:
        import psycopg  # noqa: F401  (the postgres extra)

        return PgServer(**{"parent": in_memory(), **options}).start()
    except (ImportError, PgUnavailable) as exc:
        _unavailable(exc)


def needs_postgres() -> None:
    """For a test that starts its servers through leaselab itself (``--db postgresql``): psycopg and
    the server binaries must be here; without them it skips, or fails in CI, as ``start_pg_server``."""
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        _unavailable(exc)
    pg_bin_dir()


def pg_bin_dir():
    """The folder of PostgreSQL's programs (``find_bin_dir``); without them the test skips, or fails in CI."""
    from leaselab.harness.pgserver import PgUnavailable, find_bin_dir

    try:
        return find_bin_dir()
    except PgUnavailable as exc:
        _unavailable(exc)


def _unavailable(exc: BaseException) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL tests cannot run in CI: {exc}")
    pytest.skip(f"PostgreSQL tests need psycopg and the server binaries: {exc}")


def open_at_once(target: str, use: Callable, times: int = 16) -> list[Exception]:
    """``times`` threads each open a ``Queue`` on ``target`` at once and call ``use`` on it; the
    leaselab errors they met (an empty list when every one opened and used it)."""
    from leaselab import LeaselabError, Queue

    errors: list[Exception] = []

    def open_one() -> None:
        try:
            with Queue(target) as q:
                use(q)
        except LeaselabError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(times)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


_DATABASES = itertools.count(1)  # next() on it is one step: pools' threads and tests may ask at once


def database_name(prefix: str) -> str:
    """A database name no other test of this run is given: ``prefix``, this process's pid, a count."""
    return f"{prefix}{os.getpid()}_{next(_DATABASES)}"


def fresh_database(server, prefix: str) -> str:
    """The URL of a new, empty database on ``server``, its name unique in this run."""
    return server.create_database(database_name(prefix))


class DatabasePool:
    """New, empty databases on one server, made a few ahead of need and dropped after use, on a thread of their own.

    Every PostgreSQL test starts from an empty database of its own. Making one (a copy of
    ``template1``) takes the server a tenth of a second or more, and removing a few hundred of them
    with the server's folder at the end of a run took it 10-20 s: here both happen while other
    tests run, so a test takes a database that is ready and hands it back at its end. Each database
    is handed out once. A failure to make one is raised by ``take``; one that cannot be dropped is
    left to go with the server's folder.

    With ``template``, each database is a copy of that one instead (which nobody may be connected
    to while copies are made).
    """

    def __init__(self, server, prefix: str, ahead: int = 4, template: str = "template1"):
        import psycopg  # the postgres extra; start_pg_server has skipped the test already without it

        self.server, self.prefix, self.ahead, self.template = server, prefix, ahead, template
        self._admin = psycopg.connect(server.url("postgres"), autocommit=True)
        self._ready: list[object] = []  # URLs, or the exception that stopped the making
        self._used: list[str] = []  # names to drop
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=f"databases-{prefix}", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._closed or self._used or len(self._ready) < self.ahead)
                if self._closed:
                    return
                dropping = self._used.pop() if self._used else None
                making = dropping is None
            try:
                if dropping is not None:
                    self._admin.execute(f'DROP DATABASE IF EXISTS "{dropping}" WITH (FORCE)')
                    continue
                name = database_name(self.prefix)
                self._admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
                made: object = self.server.url(name)
            except Exception as exc:  # noqa: BLE001 - a failed drop is harmless; a failed make goes to take()
                if not making:
                    continue
                made = exc
            with self._changed:
                self._ready.append(made)
                self._changed.notify_all()
            if isinstance(made, Exception):
                return

    def take(self, timeout: float = 120.0) -> str:
        """The URL of a database nobody else was given."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._ready, timeout):
                pytest.fail(f"no new database on {self.server!r} within {timeout:g} s")
            made = self._ready[0] if isinstance(self._ready[0], Exception) else self._ready.pop(0)
            self._changed.notify_all()
        if isinstance(made, Exception):
            raise made
        return made

    def give_back(self, url: str) -> None:
        """Drop the database at ``url`` soon, on the pool's thread (ending any connection still open to it)."""
        with self._changed:
            self._used.append(url.rsplit("/", 1)[1])
            self._changed.notify_all()

    def close(self) -> None:
        """Stop making and dropping databases (before the server stops)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join(30)
        self._admin.close()


# -- what a server leaves behind ------------------------------------------------------------------


def server_leftovers(folder: str | os.PathLike, port: int | None, *pids: int) -> list[str]:
    """What a server that lived in ``folder`` on ``port`` left behind: processes that name its folder
    (the postmaster), any of ``pids`` still alive, the folder itself, and a port that still answers."""
    folder = str(folder)
    left = processes_naming(folder)
    left += [f"pid {pid} ({' '.join(_argv(pid)) or '?'})" for pid in pids if not pid_gone(pid)]
    if os.path.lexists(folder):
        left.append(f"the folder {folder} (holding {sorted(os.listdir(folder)) if os.path.isdir(folder) else '?'})")
    try:
        if port is not None:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            left.append(f"port {port}, which accepts connections")
    except OSError:
        pass
    return left


def wait_nothing_left(leftovers: Callable[[], list[str]], timeout: float = 60.0) -> None:
    """Wait until ``leftovers()`` is empty; fail the test with what is still there after ``timeout``."""
    try:
        wait_until(lambda: not leftovers(), timeout, interval=0.1, message="the server to leave nothing behind")
    except pytest.fail.Exception:
        pytest.fail(f"still there {timeout:g}s after the server's owner ended: {leftovers()}")


def labelled_servers(label: str) -> list[tuple[int, str]]:
    """(pid, data folder) of every live postmaster named ``label`` (``LEASELAB_PG_LABEL``) or a label below it."""
    found = []
    for pid, argv in _processes():
        names = [
            b.partition("=")[2] for a, b in itertools.pairwise(argv) if a == "-c" and b.startswith("cluster_name=")
        ]
        if any(n == label or n.startswith(label + ".") for n in names) and "-D" in argv[:-1]:
            found.append((pid, argv[argv.index("-D") + 1]))
    return found


def servers_left_running(label: str, timeout: float) -> list[tuple[int, str]]:
    """The servers named ``label`` still running after ``timeout`` (their watchdogs may be ending them);
    each is then ended and its folder removed, so that nothing stays."""
    from leaselab.harness.pgwatchdog import end_server, remove_folder

    # Not wait_until: this runs after the last test, and what is still running at the timeout is the answer.
    deadline = time.monotonic() + timeout
    while (left := labelled_servers(label)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for _, data in left:
        end_server(data, grace=0)
        if os.path.basename(os.path.dirname(data)).startswith("leaselab-pg-"):
            remove_folder(os.path.dirname(data))
    return left


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [os.fsdecode(a) for a in fh.read().split(b"\0")[:-1]]
    except OSError:
        return []


def processes_naming(text: str) -> list[str]:
    """Every live process with ``text`` in one of its arguments (a postmaster's -D, a worker's --db), as "pid N
    (argv)"."""
    return [
        f"pid {pid} ({' '.join(argv)})"
        for pid, argv in _processes()
        if pid != os.getpid() and any(text in a for a in argv)
    ]


def _processes() -> list[tuple[int, list[str]]]:
    """(pid, argv) of every live process on the machine (zombies have no argv)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (argv := _argv(int(entry))):
            found.append((int(entry), argv))
    return found
