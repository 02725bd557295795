"""What a worker costs a PostgreSQL server in connections: one, idle or busy, its wait for work
LISTENing on the connection its claims, heartbeats and reaps use; and a server with every
connection slot taken is a fault a worker waits out and a command reports in one line."""

from __future__ import annotations

import itertools
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leaselab import Queue, Status
from leaselab.errors import TooManyClients, TransientError

try:
    import psycopg
except ImportError:  # pragma: no cover - the postgres extra is part of the test extra
    if os.environ.get("CI"):
        raise
    pytest.skip("PostgreSQL tests need psycopg (pip install 'leaselab[postgres]')", allow_module_level=True)

from tests.support.polling import wait_until
from tests.support.servers import start_pg_server

ADMIN = "pg-connections-test"  # the application_name of this module's own connections, never counted
FULL_DATABASES = itertools.count()  # a new database on the small server for each test
DEADLINE = 30.0  # far below the workers' 60 s poll, far above any wake-up on a loaded machine
SLOW_POLL = "60"  # an idle worker that finds a job sooner was woken by a notification


def _worker(url: str, log: Path, *args: str) -> subprocess.Popen:
    """A ``leaselab worker`` process running the demo handler, its log (both streams) into ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "leaselab", "worker", "--handler", "leaselab.harness.demo:task", "--db", url, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:  # pragma: no cover - a worker that ignores SIGTERM: do not leave it
        proc.kill()
        proc.wait()


@pytest.fixture
def admin(pg_queue_url) -> Iterator[psycopg.Connection]:
    """This module's connection to the queue's database: it reads pg_stat_activity and sends the
    NOTIFYs (a notification reaches only the listeners of its own database)."""
    conn = psycopg.connect(pg_queue_url, autocommit=True, application_name=ADMIN)
    yield conn
    conn.close()


def _sessions(admin: psycopg.Connection, url: str) -> int:
    """How many sessions are open on ``url``'s database, other than this module's own."""
    dbname = url.rsplit("/", 1)[1]
    ((count,),) = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name <> %s", (dbname, ADMIN)
    ).fetchall()
    return count


def _claimed_after_notifies(admin: psycopg.Connection, url: str, job_id: int) -> None:
    """Wait until ``job_id`` is done, notifying the workers' channel meanwhile: a worker started just
    now may not LISTEN yet when the job's own enqueue notified."""

    def done() -> bool:
        with Queue(url) as q:
            if q.get(job_id).status is Status.DONE:
                return True
        admin.execute("SELECT pg_notify('leaselab_jobs', '')")
        return False

    wait_until(done, DEADLINE, interval=0.2, message=f"job {job_id} to be run by the woken worker")


def test_an_idle_worker_holds_one_connection_and_an_enqueue_still_wakes_it_at_once(pg_queue_url, admin, tmp_path):
    worker = _worker(pg_queue_url, tmp_path / "w.log", "--poll", SLOW_POLL, "--max-poll", SLOW_POLL)
    try:
        with Queue(pg_queue_url) as q:
            first = q.enqueue({"seconds": 0})
        # Notified until it runs: the worker LISTENs from then on, and is idle again afterwards.
        _claimed_after_notifies(admin, pg_queue_url, first)
        # Only the worker is left on the database (the producer's session ends as it closes).
        wait_until(lambda: _sessions(admin, pg_queue_url) == 1, DEADLINE, message="the worker's one connection")
        for _ in range(20):  # its reaper runs every second meanwhile, on that same connection
            assert _sessions(admin, pg_queue_url) == 1
            time.sleep(0.1)
        # This enqueue notifies once, while the worker waits or runs a statement: either way it is
        # woken long before its 60 s poll, and by the one connection it holds.
        with Queue(pg_queue_url) as q:
            second = q.enqueue({"seconds": 0})
            wait_until(lambda: q.get(second).status is Status.DONE, DEADLINE, message="the notified worker")
        wait_until(lambda: _sessions(admin, pg_queue_url) == 1, DEADLINE, message="still one connection")
    finally:
        _stop(worker)
    assert "Traceback" not in (tmp_path / "w.log").read_text()


def test_a_long_job_keeps_its_lease_while_the_workers_other_slot_waits_for_work(pg_queue_url, tmp_path):
    log = tmp_path / "w.log"
    worker = _worker(pg_queue_url, log, "--lease", "2", "--concurrency", "2", "--poll", "0.05", "--max-poll", "0.2")
    try:
        with Queue(pg_queue_url) as q:
            job_id = q.enqueue({"seconds": 7})  # three and a half leases: renewed ten times or so
            wait_until(lambda: q.get(job_id).status is Status.DONE, 60, message="the long job to finish")
            job = q.get(job_id)
            kinds = [event.kind for event in q.events(job_id)]
    finally:
        _stop(worker)
    assert job.attempts == 1, (kinds, log.read_text())
    assert "reaped" not in kinds and "lease_lost" not in kinds, kinds


def test_the_wait_for_work_leaves_the_connection_free_for_the_heartbeat(pg_queue_url):
    """A worker's pulse beats on the connection its loop waits on: a wait holding it would hold every
    beat until a notification or the poll's end, past the lease."""
    with Queue(pg_queue_url, call_timeout=5) as q:
        q.enqueue("held")
        job = q.claim("w", lease=30)
        assert job is not None
        stop = threading.Event()
        waiter = threading.Thread(target=q.wait_for_work, args=(60, stop))
        waiter.start()
        try:
            for _ in range(50):
                q.heartbeat(job.id, job.token, 30)
            assert waiter.is_alive(), "the wait ended early: nothing was enqueued"
        finally:
            stop.set()
            waiter.join(DEADLINE)
        assert not waiter.is_alive(), "a stop reaches the wait"


def test_a_notification_read_by_another_statement_still_wakes_the_next_wait(pg_queue_url):
    with Queue(pg_queue_url) as q, Queue(pg_queue_url) as producer:
        q.wait_for_work(0.01)  # LISTENs from here on
        producer.enqueue("wake")  # the queue was empty: it notifies
        fd = q.backend.connection.fileno()
        wait_until(lambda: select.select([fd], [], [], 0)[0], DEADLINE, message="the notification on the socket")
        assert q.stats()["pending"] == 1  # this statement's reply comes after the notification, and reads it
        woke = threading.Event()
        waiter = threading.Thread(target=lambda: (q.wait_for_work(60), woke.set()))
        waiter.start()
        wait_until(woke.is_set, DEADLINE, message="the wait to find the notification already read")
        waiter.join()


def test_a_reconnected_queue_listens_again(pg_queue_url, admin):
    with Queue(pg_queue_url) as q:
        q.wait_for_work(0.01)
        pid = q.backend.connection.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_until(lambda: _reconnected(q, pid), DEADLINE, message="a reconnect")
        woke = threading.Event()
        waiter = threading.Thread(target=lambda: (q.wait_for_work(60), woke.set()))
        waiter.start()

        def notified() -> bool:  # the new connection's LISTEN comes in the wait, after it began
            admin.execute("SELECT pg_notify('leaselab_jobs', '')")
            return woke.is_set()

        wait_until(notified, DEADLINE, interval=0.2, message="a notification on the new connection")
        waiter.join()


def _reconnected(q: Queue, old_pid: int) -> bool:
    """True once ``q`` is on a new session; a call that meets the dropped one fails and drops it."""
    try:
        q.stats()
    except TransientError:
        return False
    return q.backend.connection.info.backend_pid != old_pid


# -- a server with every slot taken ---------------------------------------------------------


@pytest.fixture(scope="module")
def small_server():
    """A server of its own with five connection slots, so a test can take them all."""
    server = start_pg_server(settings={"max_connections": 5, "superuser_reserved_connections": 0})
    yield server
    server.stop()


@pytest.fixture
def full(small_server) -> Iterator[tuple[str, list[psycopg.Connection]]]:
    """A queue's URL on ``small_server`` with one job waiting, and connections taking every slot."""
    url = small_server.create_database(f"full_{next(FULL_DATABASES)}")
    with Queue(url) as q:
        q.enqueue({"seconds": 0})
    held: list[psycopg.Connection] = []
    try:
        while True:
            try:
                held.append(psycopg.connect(url, autocommit=True, application_name=ADMIN))
            except psycopg.OperationalError as exc:
                assert "too many clients" in str(exc), exc
                break
        assert held, "the server took no connection at all"
        yield url, held
    finally:
        for conn in held:
            conn.close()


@pytest.mark.parametrize("command", [["enqueue", "{}"], ["stats"], ["jobs"], ["check"]], ids=lambda argv: argv[0])
def test_a_command_on_a_full_server_says_too_many_clients_in_one_line(full, command):
    url, _ = full
    done = subprocess.run(
        [sys.executable, "-m", "leaselab", *command, "--db", url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and done.stdout == "", done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"leaselab {command[0]}: error: "), done.stderr
    assert "too many clients" in lines[0] and "Traceback" not in done.stderr


def test_a_full_server_raises_too_many_clients_a_transient_error(full):
    url, _ = full
    with pytest.raises(TooManyClients, match="too many clients") as caught:
        Queue(url)
    assert isinstance(caught.value, TransientError)


def test_a_worker_started_on_a_full_server_waits_and_works_once_a_slot_frees(full, tmp_path):
    url, held = full
    log = tmp_path / "w.log"
    worker = _worker(url, log, "--poll", "0.05", "--max-poll", "0.2")
    try:
        wait_until(
            lambda: (
                "waiting on a transient fault (open the queue)" in log.read_text()
                and "too many clients" in log.read_text()
            ),
            DEADLINE,
            message="the worker to wait for a free slot",
        )
        assert worker.poll() is None, log.read_text()
        watcher = held.pop(0)  # one slot frees; another of ours reads the queue
        watcher.close()
        observer = held[0]

        def done() -> bool:
            rows = observer.execute("SELECT status FROM jobs").fetchall()
            return rows == [("done",)]

        wait_until(done, 60, interval=0.2, message="the worker to take the free slot and run the job")
    finally:
        _stop(worker)
    text = log.read_text()
    assert "fault cleared: open the queue went through" in text and "Traceback" not in text, text
