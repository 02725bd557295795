"""Shared fixtures: a queue on a manual clock, fleets of worker processes that never outlive a test;
and the check that no PostgreSQL server outlives the run."""

from __future__ import annotations

import fcntl
import os
import signal
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from leaselab import ManualClock, Queue
from leaselab.lab.fleet import Fleet
from leaselab.lessons.pgserver import LABEL_VARIABLE

from polling import pid_gone
from procs import shut_down
from servers import BACKENDS, fresh_database, servers_left_running, start_pg_server

# -- no PostgreSQL server outlives the run ---------------------------------------------------------
# Every server the run starts, in any process below it, is named after the run (its cluster_name,
# from LEASELAB_PG_LABEL; a nested run's is named below it). One still running at the end, once
# the watchdogs had this long to end theirs, fails the run, and is ended.
SERVERS_END_WITHIN = 15.0


def pytest_configure(config):
    outer = os.environ.get(LABEL_VARIABLE)
    os.environ[LABEL_VARIABLE] = f"{outer}.{os.getpid()}" if outer else f"pytest-{os.getpid()}"


def pytest_sessionfinish(session):
    left = servers_left_running(os.environ[LABEL_VARIABLE], SERVERS_END_WITHIN)
    if left:
        lines = [f"{len(left)} PostgreSQL server(s) this run started still ran at its end; ended now:",
                 *(f"  postmaster pid {pid}, data folder {data}" for pid, data in left)]
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("")  # the progress line is still open
        for line in lines:
            if reporter is not None:
                reporter.write_line(line, red=True, bold=True)
            else:
                print(line, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# -- tests that must not share the disk -----------------------------------------------------------
# Side by side (xdist), a test that crashes a server and times its recovery never runs while another
# floods the disk with a fresh virtual environment: under that flood of dirty pages a crashed server's
# processes sat in their writes for a minute, and the restart never came back (seen once in CI). The
# flooders share the disk with one another; a crasher takes it alone. A lock file named after the run.
FLOODS_THE_DISK = ("test_binder.py", "test_newcomer.py", "test_dev.py", "test_own_handler.py", "test_packaging.py")
CRASHES_A_SERVER = ("test_chaos.py", "test_chaos_cli.py", "test_next_faults.py")


def _disk_turn(item: pytest.Item) -> int | None:
    if item.path.name in CRASHES_A_SERVER or "crashable_server" in getattr(item, "fixturenames", ()):
        return fcntl.LOCK_EX
    if item.path.name in FLOODS_THE_DISK:
        return fcntl.LOCK_SH
    return None


@pytest.fixture(autouse=True)
def _takes_turns_with_the_disk(request):
    turn = _disk_turn(request.node)
    if turn is None:
        yield
        return
    run = os.environ[LABEL_VARIABLE].split(".", 1)[0]  # the same for every xdist worker of one run
    with open(Path(tempfile.gettempdir()) / f"leaselab-{run}.disk-turns", "a") as lock:
        fcntl.flock(lock, turn)
        yield


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


@pytest.fixture(scope="session")
def pg_server():
    """A throw-away PostgreSQL cluster for the whole run."""
    server = start_pg_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def crashable_server():
    """A second throw-away server, for the tests that crash it (the session's server serves every
    other test). Its WAL writer is lazy, so a crash loses each commit not made durable, as it can on
    any busy server."""
    from leaselab.lessons.pgserver import LAZY_WAL_WRITER

    server = start_pg_server(settings=LAZY_WAL_WRITER)
    yield server
    server.stop()




@pytest.fixture
def pg_url(pg_server) -> str:
    """The URL of a new, empty database on the session's server: every test starts from nothing."""
    return fresh_database(pg_server, "t")



@pytest.fixture(params=BACKENDS)
def target(request, db_path: Path) -> str:
    """Where a queue lives, once per backend: a file under tmp_path, or a fresh PostgreSQL database;
    in a module that sets ``TARGETS = IN_PROCESS_BACKENDS``, also that file on a ``VolatileDisk``
    (the APSW backend), cut at teardown, which ends the connections opened on it.

    A test of a SQLite-only fact narrows it with ``@pytest.mark.parametrize("target", ["sqlite"], indirect=True)``.
    """
    if request.param == "sqlite":
        return str(db_path)
    if request.param == "apsw":
        from leaselab.lessons.powercut import VolatileDisk

        disk = VolatileDisk()
        request.addfinalizer(disk.cut)
        return disk.target(db_path)
    return request.getfixturevalue("pg_url")


@pytest.hookimpl(tryfirst=True)  # before the marks are read
def pytest_generate_tests(metafunc):
    # A module's TARGETS replace the backends target runs on, but not where a test narrows them itself.
    targets = getattr(metafunc.module, "TARGETS", None)
    if targets is None or "target" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if "target" in ([n.strip() for n in names.split(",")] if isinstance(names, str) else names):
            return
    # As a mark, as a test's own narrowing is: the fixture's params give way only to a mark.
    metafunc.definition.add_marker(pytest.mark.parametrize("target", targets, indirect=True))


@pytest.fixture
def queue(target: str, clock: ManualClock):
    """A fresh queue on each backend whose time moves only when the test calls ``clock.advance``."""
    q = Queue(target, clock=clock)
    yield q
    q.close()


@pytest.fixture
def fleet_on(tmp_path: Path, monkeypatch):
    """Make ``Fleet(target, **kwargs)`` (grace 5 s unless given); every worker of every fleet made is
    gone after the test (``procs.shut_down``).

    The test runs in ``tmp_path``: a server queue's logs and record of actions go to the current
    folder, as a notebook's go beside it.
    """
    monkeypatch.chdir(tmp_path)
    made: list[Fleet] = []

    def make(target, **kwargs) -> Fleet:
        made.append(Fleet(target, **{"grace": 5.0, **kwargs}))
        return made[-1]

    yield make
    for fleet in made:
        shut_down(fleet)


@pytest.fixture
def kill_at_teardown():
    """Register stray pids (grandchildren a test does not own through Popen) to SIGKILL at teardown."""
    pids: list[int] = []
    yield pids.append
    for pid in pids:
        if not pid_gone(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def open_dir():
    """A world-traversable temp folder (pytest's tmp_path is 0700, which would hide everything from nobody)."""
    folder = Path(tempfile.mkdtemp(prefix="leaselab-perm-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
