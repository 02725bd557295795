"""Transient faults, with real processes: a write lock held past the busy timeout, and a full disk that frees up.

The second table of issue 15. A worker must log the fault, keep its job and token,
retry with a capped backoff and carry on once the fault passes; nothing acknowledged
(an enqueue that returned an id, a completion that was logged) may be lost. The held
lock is another program's on every backend (``tests/support/locks.py``): on a file or a
server for a fleet, the APSW backend too for a worker in this process. The full disk is
a SQLite file's, a real one: a 2 MiB tmpfs mounted for the test (which needs root;
elsewhere the test is skipped).
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from leaselab import LeaselabError, Queue, TransientError
from leaselab.backends import is_server_url
from leaselab.errors import DatabaseBusy, DiskFull
from leaselab.worker.faults import CLEARED as FAULT_CLEARED
from leaselab.worker.faults import WAITING as FAULT_WAITING
from tests.support import history
from tests.support.locks import BUSY_WORDS, WriteLock, hold_write_lock
from tests.support.polling import wait_until
from tests.support.procs import log_of
from tests.support.servers import IN_PROCESS_BACKENDS

# A fleet's worker as these tests start it: quick polls, and it exits once the queue is empty.
FAST = dict(lease=5.0, name="w1", poll=0.01, max_poll=0.1, exit_when_idle=True)
WORKER_EXITS_WITHIN = 90.0


def start_worker(db: Path | str, log: Path) -> subprocess.Popen:
    """The worker of ``FAST`` as a bare process, for the tests that watch it before it has started.

    Not a Fleet: ``Fleet.spawn`` returns once the worker's start line is out, which it prints only
    once the queue is open, and these tests watch it wait for the queue to open."""
    with open(log, "wb") as fh:
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
                FAST["name"],
                "--lease",
                repr(FAST["lease"]),
                "--poll",
                repr(FAST["poll"]),
                "--max-poll",
                repr(FAST["max_poll"]),
                "--exit-when-idle",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )


def finish(proc: subprocess.Popen, timeout: float = WORKER_EXITS_WITHIN) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:  # pragma: no cover - a hang is the failure being tested
        proc.kill()
        proc.wait()
        pytest.fail("the worker did not exit by itself")


def assert_history_holds(db: Path | str) -> None:
    jobs, events, _ = history.load(str(db))
    assert history.check_final_states(jobs) == []
    assert history.check_fencing(events) == []
    assert history.check_attempts(jobs, events) == []
    assert history.check_events_agree(jobs, events) == []


def test_the_transient_errors_share_one_base_and_a_full_disk_is_its_own():
    assert issubclass(DatabaseBusy, TransientError) and issubclass(DiskFull, TransientError)
    assert issubclass(TransientError, LeaselabError)
    assert "q.db" in str(DiskFull("q.db")) and DiskFull("q.db").path == "q.db"


# -- a write lock held past the busy timeout ----------------------------------------------------
# Another program's long write (what a worker frozen mid-commit in the lab does to everyone else),
# on every backend (tests/support/locks.py): a fleet's on a file or a server, the in-process worker's
# on the APSW backend too.


@pytest.mark.parametrize("concurrency", [1, 3], ids=["one job at a time", "three at once"])
def test_a_worker_outlives_a_write_lock_held_past_its_busy_timeout_and_finishes_every_job(
    target, fleet_on, concurrency
):
    db = target
    with Queue(db) as q:
        ids = q.enqueue_many([{"seconds": 0.05}] * 30)
    fleet = fleet_on(db)
    name = fleet.spawn(**FAST, busy_timeout=0.2, concurrency=concurrency)
    with Queue(db) as q:
        wait_until(lambda: q.stats()["done"] >= 2, message="the worker's first jobs")
    for _ in range(2):  # each hold outlasts the worker's busy timeout many times over
        hold_write_lock(db, 1.5)
        time.sleep(0.2)
    code = fleet.wait(name, WORKER_EXITS_WITHIN)  # None: it did not exit by itself
    text = log_of(fleet, name)
    assert code == 0, text
    assert "Traceback" not in text and "error:" not in text
    assert FAULT_WAITING in text and BUSY_WORDS in text and FAULT_CLEARED in text
    waits = [float(w) for w in re.findall(r"retrying in ([0-9.e+-]+)s", text)]
    assert waits and max(waits) <= 2.0  # a capped backoff
    with Queue(db) as q:
        assert q.stats() == {"pending": 0, "running": 0, "done": len(ids), "dead": 0}
    assert_history_holds(db)


def test_the_lab_shows_a_worker_waiting_on_a_held_lock_and_running_again_after(target, fleet_on):
    from leaselab.lab.dashboard import worker_row_html

    db = target
    with Queue(db) as q:
        q.enqueue_many([{"seconds": 0.05}] * 200)
    fleet = fleet_on(db)
    name = fleet.spawn(lease=5.0, poll=0.01, busy_timeout=0.2)
    holder = threading.Thread(target=hold_write_lock, args=(db, 3.0))
    holder.start()
    try:
        waiting = wait_until(
            lambda: next((w for w in fleet.status() if w.badge == "waiting"), None), message="the waiting badge"
        )
        assert waiting.name == name and BUSY_WORDS in waiting.fault
        assert "leaselab-state-waiting" in worker_row_html(waiting, "en")
        assert "ждёт" in worker_row_html(waiting, "ru")
    finally:
        holder.join()
    wait_until(lambda: fleet.status()[0].badge == "running", message="the worker running again")
    assert fleet.status()[0].fault is None


# -- a full disk that frees up ---------------------------------------------------------------


def mount_tmpfs(tmp_path: Path, options: str) -> Path:
    """Mount a tmpfs of its own under ``tmp_path`` (skipping the test where that is not allowed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    return mount


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs of its own, so filling it fills nobody else's disk."""
    mount = mount_tmpfs(tmp_path, "size=2m")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.fixture
def few_inodes(tmp_path):
    """A tmpfs with room for data but only 8 inodes (its root folder takes one)."""
    mount = mount_tmpfs(tmp_path, "size=2m,nr_inodes=8")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(folder: Path) -> Path:
    """Write a ballast file until the file system is full; return it (remove it to free the space)."""
    ballast = folder / "ballast"
    with open(ballast, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return ballast


def test_a_full_disk_is_disk_full_naming_the_file_and_nothing_half_written_survives(small_disk):
    db = small_disk / "q.db"
    with Queue(db) as q:
        first, second = q.enqueue_many(["a", "b"])
        job = q.claim("w")
        ballast = fill(small_disk)
        with pytest.raises(DiskFull, match=re.escape(str(db))):
            for _ in range(1000):  # the log grows into the last free pages, then the disk is full
                q.enqueue("x" * 900)
        with pytest.raises(DiskFull, match="database or disk is full"):  # the real cause, not a ROLLBACK error
            for _ in range(1000):
                q.complete_and_claim(job.id, job.token, "r" * 900, worker="w")
        assert q.get(job.id).status.value == "running" and q.get(second).status.value == "pending"
        ballast.unlink()
        assert q.complete_and_claim(job.id, job.token, "done", worker="w").id == second
        assert q.get(first).result == "done"


def test_a_worker_waits_out_a_full_disk_and_no_acknowledged_enqueue_or_completion_is_lost(
    small_disk, tmp_path, fleet_on
):
    db = small_disk / "q.db"
    with Queue(db) as q:
        acknowledged = q.enqueue_many([{"seconds": 0.05}] * 5)
    # Its log and record off the small disk, which is about to be full.
    fleet = fleet_on(db, log_dir=tmp_path / "logs", actions_file=tmp_path / "actions.jsonl")
    name = fleet.spawn(**FAST)
    with Queue(db) as q:
        wait_until(lambda: q.stats()["done"] >= 1, message="the worker's first job")
        ballast = fill(small_disk)
        refused = 0
        for _ in range(300):
            try:
                acknowledged.append(q.enqueue({"seconds": 0.05, "pad": "x" * 900}))
            except DiskFull:
                refused += 1
        assert refused > 0
        wait_until(lambda: FAULT_WAITING in log_of(fleet, name), message="the worker waiting on the full disk")
        assert fleet.state(name) == "running"  # waiting, not exited
        ballast.unlink()
        acknowledged += q.enqueue_many([{"seconds": 0.01}] * 3)
    code = fleet.wait(name, WORKER_EXITS_WITHIN)  # None: it did not exit by itself
    text = log_of(fleet, name)
    assert code == 0, text
    assert "Traceback" not in text and "disk holding the queue file is full" in text and FAULT_CLEARED in text
    completed = {int(n) for n in re.findall(r"completed job (\d+)", text)}
    with Queue(db) as q:
        statuses = {j.id: j.status.value for j in q.jobs(limit=10_000)}
    assert all(statuses[i] == "done" for i in acknowledged)  # every acknowledged enqueue ran
    assert all(statuses[i] == "done" for i in completed)  # every logged completion stands
    assert set(statuses) == set(acknowledged)
    assert_history_holds(db)


@pytest.mark.parametrize("target", IN_PROCESS_BACKENDS, indirect=True)  # the worker runs in this process
def test_a_stop_while_a_completion_waits_on_a_held_lock_ends_the_worker_and_the_job_stays_its_to_reap(target):
    from leaselab import Worker

    db = target
    with Queue(db) as q:
        job_id = q.enqueue(1)
    holder = WriteLock(db)
    lines: list[str] = []

    def handler(job):
        holder.take()  # from now on every write of the worker times out
        return "done"

    def log(line: str) -> None:
        lines.append(line)
        if FAULT_WAITING in line and len([x for x in lines if FAULT_WAITING in x]) == 3:
            worker.stop()  # SIGTERM, in the CLI

    with Queue(db, busy_timeout=0.05, call_timeout=27) as q:
        worker = Worker(q, handler, name="w", lease=30, log=log)
        stats = worker.run()
    holder.release()
    holder.close()
    assert (stats.claimed, stats.completed, stats.lost) == (1, 0, 1)
    assert "stopped with job 1's outcome unwritten" in lines[-1]
    waits = [float(w) for w in re.findall(r"retrying in ([0-9.e+-]+)s", "\n".join(lines))]
    assert waits == [0.05, 0.1, 0.2]  # doubling from the first wait
    with Queue(db) as q:
        job = q.get(job_id)
        assert job.status.value == "running" and job.worker == "w"  # its lease runs out; a reaper brings it back


def rename_the_jobs_table(db: str) -> None:
    """What another program may do to a queue: afterwards it is no longer one the worker can use."""
    if is_server_url(db):
        import psycopg

        with psycopg.connect(db, autocommit=True) as server:
            server.execute("ALTER TABLE jobs RENAME TO not_jobs")
        return
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE jobs RENAME TO not_jobs")
    conn.commit()
    conn.close()


def test_an_error_retrying_cannot_fix_ends_the_worker_with_a_one_line_reason(target, fleet_on):
    db = target
    with Queue(db) as q:
        q.enqueue(1, delay=3600)  # pending for an hour: the worker polls, and --exit-when-idle keeps it
    fleet = fleet_on(db)
    name = fleet.spawn(**FAST)  # returns once the worker has started
    rename_the_jobs_table(db)
    code = fleet.wait(name, WORKER_EXITS_WITHIN)
    text = log_of(fleet, name)
    assert code == 2
    # What each backend says of the table that is gone (a server adds the statement after it).
    gone = 'relation "jobs" does not exist' if is_server_url(db) else "no such table: jobs"
    # The pulse reaps at once when the worker starts, and spawn returns at the start line: the rename
    # may come before that first reap, whose failure the pulse logs and shrugs off. It is not the reason.
    errors = [
        line
        for line in text.splitlines()
        if "error:" in line and not re.search(rf" {FAST['name']}: reap failed: .*{re.escape(gone)}", line)
    ]
    assert len(errors) == 1 and errors[0].startswith("leaselab worker: error:") and gone in errors[0]
    assert "Traceback" not in text and FAULT_WAITING not in text


# -- a full disk at open: SQLite says "disk I/O error" or "unable to open", not "disk is full" ----


def close_cleanly(db: Path) -> None:
    """Make a queue with one job and close it, so SQLite deletes its -wal and -shm files."""
    with Queue(db) as q:
        q.enqueue("kept")
    assert not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()


def test_opening_a_new_queue_file_on_a_full_disk_is_disk_full_naming_the_file(small_disk):
    db = small_disk / "new.db"
    fill(small_disk)
    with pytest.raises(DiskFull, match=re.escape(str(db))) as raised:
        Queue(db)
    assert raised.value.path == str(db) and "full" in str(raised.value)


def test_opening_a_queue_whose_wal_and_shm_must_be_made_again_on_a_full_disk_is_disk_full(small_disk):
    db = small_disk / "old.db"
    close_cleanly(db)
    ballast = fill(small_disk)
    with pytest.raises(DiskFull, match=re.escape(str(db))) as raised:
        Queue(db)
    # What SQLite itself said: the -shm could not grow. The disk, not the file, is at fault.
    assert isinstance(raised.value.__cause__, sqlite3.Error) and "disk I/O error" in str(raised.value)
    assert "0 bytes free" in str(raised.value)
    ballast.unlink()
    with Queue(db) as q:  # nothing was harmed: once there is room, the queue opens with its job
        assert [j.payload for j in q.jobs()] == ["kept"]


def test_a_folder_with_no_free_inode_for_the_wal_is_a_full_disk_too(few_inodes):
    db = few_inodes / "old.db"
    close_cleanly(db)
    for n in itertools.count():  # empty files until the file system has no inode left
        try:
            (few_inodes / f"empty{n}").touch()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            break
    with pytest.raises(DiskFull, match="no free inode") as raised:
        Queue(db)
    assert raised.value.path == str(db)
    with pytest.raises(DiskFull, match="no free inode"):
        Queue(few_inodes / "new.db")


@pytest.mark.parametrize("command", ["enqueue", "stats"])
def test_the_command_on_a_full_disk_says_in_one_line_that_the_disk_is_full(small_disk, command):
    db = small_disk / ("new.db" if command == "enqueue" else "old.db")
    if command == "stats":
        close_cleanly(db)
    fill(small_disk)
    args = [command, "--db", str(db)] + (['{"n": 1}'] if command == "enqueue" else [])
    done = subprocess.run([sys.executable, "-m", "leaselab", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"leaselab {command}: error: {db}:"), done.stderr
    assert "the disk holding the queue file is full" in lines[0]


# -- faults at start: waited out as they are mid-run (issue 19, row 7) ---------------------------


def test_a_worker_whose_first_connections_are_dropped_waits_and_then_runs_the_job(pg_url, tmp_path):
    from leaselab.harness.proxy import Proxy, server_address, through

    with Queue(pg_url) as q:
        job_id = q.enqueue({"seconds": 0})
    log = tmp_path / "w1.log"
    with Proxy(server_address(pg_url)) as proxy:
        # Every connection fails at start-up until the worker has said it waits: a window of seconds would
        # pass before a worker slow to start (a loaded machine) made its first connection.
        proxy.drop_replies(600)
        proc = start_worker(through(pg_url, proxy.port), log)
        try:
            wait_until(lambda: FAULT_WAITING in log.read_text(), message="the worker waiting for the server")
            assert proc.poll() is None
            proxy.drop_replies(0)  # the server answers again
        finally:
            code = finish(proc)
    text = log.read_text()
    assert code == 0, text
    assert f"w1: {FAULT_WAITING} (open the queue)" in text and "cannot reach the server" in text
    assert f"w1: {FAULT_CLEARED}: open the queue went through" in text and f"completed job {job_id}" in text
    with Queue(pg_url) as q:
        assert q.get(job_id).status.value == "done"


def test_a_stop_while_a_worker_waits_for_a_server_that_is_down_exits_zero(tmp_path):
    import signal

    from leaselab.harness.pgserver import free_port

    log = tmp_path / "w1.log"
    proc = start_worker(f"postgresql://nobody@127.0.0.1:{free_port()}/none", log)  # nothing listens there
    try:
        wait_until(lambda: log.read_text().count(FAULT_WAITING) >= 2, message="the worker waiting for the server")
        proc.send_signal(signal.SIGTERM)
    finally:
        code = finish(proc, timeout=30)
    text = log.read_text()
    assert code == 0, text
    assert "stopped before the queue could be opened" in text and "Traceback" not in text


def test_a_worker_started_on_a_full_disk_waits_and_drains_the_queue_once_there_is_room(small_disk, tmp_path):
    db, log = small_disk / "old.db", tmp_path / "w1.log"
    close_cleanly(db)  # its -wal and -shm must be made again at open: on a full disk, they cannot
    ballast = fill(small_disk)
    proc = start_worker(db, log)
    try:
        wait_until(lambda: FAULT_WAITING in log.read_text(), message="the worker waiting on the full disk")
        assert proc.poll() is None
        ballast.unlink()
    finally:
        code = finish(proc)
    text = log.read_text()
    assert code == 0, text
    assert "disk holding the queue file is full" in text and f"w1: {FAULT_CLEARED}: open the queue" in text
    with Queue(db) as q:
        assert [(j.payload, j.status.value) for j in q.jobs()] == [("kept", "done")]
