"""`leaselab events` and `leaselab jobs` page (--limit, --after) and follow (--follow) a queue of any size."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from leaselab import Queue
from leaselab.cli import PAGE, main


def run(capsys, *argv: str) -> tuple[int, list[str]]:
    code = main(list(argv))
    out, _ = capsys.readouterr()
    return code, out.splitlines()[1:]  # the rows, under the header


def job_ids(rows: list[str]) -> list[int]:
    return [int(row.split()[0]) for row in rows]


def event_jobs(rows: list[str]) -> list[int]:
    return [int(row.split()[1]) for row in rows]


def test_events_page_with_limit_and_after(capsys, target):
    with Queue(target) as q:
        ids = q.enqueue_many(list(range(5)))
        events = q.events()
    code, rows = run(capsys, "events", "--db", target, "--limit", "2")
    assert code == 0 and event_jobs(rows) == ids[:2]
    _, rows = run(capsys, "events", "--db", target, "--limit", "2", "--after", str(events[1].id))
    assert event_jobs(rows) == ids[2:4]
    _, rows = run(capsys, "events", "--db", target, "--after", str(events[3].id))
    assert event_jobs(rows) == ids[4:]
    _, rows = run(capsys, "events", "--db", target, "--limit", "0")
    assert rows == []


def test_events_without_a_limit_print_every_event_across_pages(capsys, tmp_path):
    db = str(tmp_path / "q.db")
    with Queue(db) as q:
        ids = q.enqueue_many(list(range(PAGE + 5)))
    _, rows = run(capsys, "events", "--db", db)
    assert event_jobs(rows) == ids
    _, rows = run(capsys, "events", "--db", db, "--limit", str(PAGE + 2))
    assert event_jobs(rows) == ids[: PAGE + 2]


def test_one_jobs_events_page_too(capsys, tmp_path):
    db = str(tmp_path / "q.db")
    with Queue(db) as q:
        job_id = q.enqueue(1)
        job = q.claim("w1")
        q.complete(job.id, job.token, None)
        first = q.events(job_id)[0]
    _, rows = run(capsys, "events", "--db", db, "--job", str(job_id), "--after", str(first.id), "--limit", "1")
    assert [row.split()[2] for row in rows] == ["claimed"]


def test_jobs_page_with_limit_and_after_and_status(capsys, target):
    with Queue(target) as q:
        ids = q.enqueue_many(list(range(6)))
        q.claim("w1")
    code, rows = run(capsys, "jobs", "--db", target, "--limit", "2", "--after", str(ids[1]))
    assert code == 0 and job_ids(rows) == ids[2:4]
    _, rows = run(capsys, "jobs", "--db", target, "--status", "pending", "--after", str(ids[0]), "--limit", "3")
    assert job_ids(rows) == ids[1:4]
    _, rows = run(capsys, "jobs", "--db", target, "--after", str(ids[-1]))
    assert rows == []


def test_a_negative_after_is_refused_by_argparse(capsys, tmp_path):
    db = str(tmp_path / "q.db")
    Queue(db).close()
    assert main(["events", "--db", db, "--after", "-1"]) == 2
    assert "--after" in capsys.readouterr().err


class Follower:
    """``leaselab COMMAND --follow`` as a terminal would run it, its lines collected by a thread as they come."""

    def __init__(self, *argv: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "leaselab", *argv, "--follow"], stdout=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, wanted, deadline: float = 60.0) -> str:
        """The first line ``wanted(line)`` is true of, waiting as long as the deadline (generous: a loaded
        machine) allows, or until the command ends."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            found = next((line for line in list(self.lines) if wanted(line)), None)
            if found is not None:
                return found
            if not self.reader.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no such line; got {self.lines!r}")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def follower():
    started: list[Follower] = []

    def start(*argv: str) -> Follower:
        started.append(Follower(*argv))
        return started[-1]

    yield start
    for f in started:
        if f.proc.poll() is None:
            f.proc.kill()
            f.proc.wait()


def test_events_follow_prints_an_event_written_after_it_started_and_exits_0_on_sigterm(tmp_path, follower):
    db = str(tmp_path / "q.db")
    with Queue(db) as q:
        first = q.enqueue(1)
    f = follower("events", "--db", db)
    f.wait_for(lambda line: line.split()[1:3] == [str(first), "enqueued"])
    with Queue(db) as q:
        later = q.enqueue(2)
        job = q.claim("w1")
    f.wait_for(lambda line: line.split()[1:3] == [str(later), "enqueued"])
    f.wait_for(lambda line: line.split()[1:3] == [str(job.id), "claimed"])
    assert f.stop() == 0


def test_jobs_follow_prints_a_job_enqueued_after_it_started_and_exits_0_on_sigterm(tmp_path, follower):
    db = str(tmp_path / "q.db")
    Queue(db).close()
    f = follower("jobs", "--db", db)
    f.wait_for(lambda line: line.split()[:2] == ["id", "status"])
    with Queue(db) as q:
        later = q.enqueue({"hello": 1})
    f.wait_for(lambda line: line.split()[:2] == [str(later), "pending"])
    assert f.stop() == 0
