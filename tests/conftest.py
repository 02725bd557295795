"""Shared fixtures: a queue on a manual clock, fleets of worker processes that never outlive a test;
and the check that no PostgreSQL server outlives the run."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from leaselab import ManualClock, Queue
from leaselab.harness.fleet import Fleet
from leaselab.harness.pgserver import LABEL_VARIABLE
from leaselab.queue import DEFAULT_LEASE
from leaselab.worker import CALL_TIMEOUT_SHARE
from tests.support import minimal_backend
from tests.support.polling import pid_gone
from tests.support.procs import shut_down
from tests.support.servers import BACKENDS, DatabasePool, pg_bin_dir, servers_left_running, start_pg_server

minimal_backend.register()  # minimal:<path> targets: the contract suite's backend of the required part alone

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
        lines = [
            f"{len(left)} PostgreSQL server(s) this run started still ran at its end; ended now:",
            *(f"  postmaster pid {pid}, data folder {data}" for pid, data in left),
        ]
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("")  # the progress line is still open
        for line in lines:
            if reporter is not None:
                reporter.write_line(line, red=True, bold=True)
            else:
                print(line, file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


@pytest.fixture
def bin_dir():
    """PostgreSQL's programs, for a test that starts servers of its own."""
    return pg_bin_dir()


@pytest.fixture(scope="session")
def pg_server():
    """A throw-away PostgreSQL cluster for the whole run."""
    server = start_pg_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_databases(pg_server) -> DatabasePool:
    """New, empty databases on the session's server, made ahead of the tests that take them."""
    pool = DatabasePool(pg_server, "t")
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def pg_queues(pg_server, pg_databases) -> DatabasePool:
    """New databases each holding a new, empty queue: copies of one the session made with ``Queue``
    (making the schema in each took longer than the copy)."""
    template = pg_databases.take()
    Queue(template).close()
    pool = DatabasePool(pg_server, "q", template=template.rsplit("/", 1)[1])
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def crashable_server():
    """A second throw-away server, for the tests that crash it (the session's server serves every
    other test). Its WAL writer is lazy, so a crash loses each commit not made durable, as it can on
    any busy server."""
    from leaselab.harness.pgserver import LAZY_WAL_WRITER

    server = start_pg_server(settings=LAZY_WAL_WRITER)
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_databases) -> str:
    """The URL of a new, empty database on the session's server: every test starts from nothing."""
    url = pg_databases.take()
    yield url
    pg_databases.give_back(url)


@pytest.fixture
def pg_queue_url(pg_queues) -> str:
    """The URL of a new database holding a new, empty queue, as ``Queue`` makes it on first open
    (``pg_url`` for a database with nothing in it, to test that first open)."""
    url = pg_queues.take()
    yield url
    pg_queues.give_back(url)


@pytest.fixture(params=BACKENDS)
def target(request, db_path: Path) -> str:
    """Where a queue lives, once per backend: a file under tmp_path, or a new PostgreSQL database
    holding an empty queue (``pg_queue_url``);
    in a module that sets ``TARGETS = IN_PROCESS_BACKENDS``, also that file on a ``VolatileDisk``
    (the APSW backend), cut at teardown, which ends the connections opened on it, and that file
    opened by the minimal backend (``tests/support/minimal_backend.py``: the required contract alone).

    A test of a SQLite-only fact narrows it with ``@pytest.mark.parametrize("target", ["sqlite"], indirect=True)``.
    """
    if request.param == "sqlite":
        return str(db_path)
    if request.param == "minimal":
        return f"{minimal_backend.SCHEME}:{db_path}"
    if request.param == "apsw":
        from leaselab.harness.powercut import VolatileDisk

        disk = VolatileDisk()
        request.addfinalizer(disk.cut)
        return disk.target(db_path)
    return request.getfixturevalue("pg_queue_url")


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
def worker_queue(target: str, clock: ManualClock):
    """``queue``, opened as a worker opens its own: its calls end before the default lease. A ``Worker``
    refuses a server's queue whose calls could outlast its lease, and never changes a queue it is given."""
    q = Queue(target, clock=clock, call_timeout=CALL_TIMEOUT_SHARE * DEFAULT_LEASE)
    yield q
    q.close()


@pytest.fixture
def zombie(request):
    """Make a zombie of the next pending job's holder, the way a stalled worker becomes one.

    ``zombie(lease=5, holder="A", successor="B", retake=True, queue=None) -> (old, new)``: ``holder``
    claims the next pending job for ``lease`` seconds; the clock moves past the lease and the reaper
    takes the job back (checked); the clock moves past the retry's backoff,
    ``queue.backoff.delay(attempt)``; and with ``retake`` the ``successor`` claims the job again, for
    the same lease (checked to be the same job). ``old`` is the holder's ``Job``, whose token every
    write now finds fenced off; ``new`` is the successor's, or None without ``retake`` (the job is then
    pending and claimable).

    It works on the test's ``queue`` fixture, whose time is the ``clock`` fixture; a test that opens
    its own queue on a ``ManualClock`` passes it as ``queue=``.
    """

    def make(
        lease: float = 5.0, holder: str = "A", successor: str = "B", retake: bool = True, queue: Queue | None = None
    ):
        q = queue if queue is not None else request.getfixturevalue("queue")
        old = q.claim(holder, lease=lease)
        assert old is not None, "no pending job to make a zombie of"
        q.clock.advance(lease + 1)
        assert old.id in q.reap(), f"job {old.id} was not reaped"
        q.clock.advance(q.backoff.delay(old.attempts))
        if not retake:
            return old, None
        new = q.claim(successor, lease=lease)
        assert new is not None and new.id == old.id, f"{successor} did not retake job {old.id}: {new}"
        return old, new

    return make


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
