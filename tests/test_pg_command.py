"""`leaselab pg start|url|stop`: the tests' throw-away PostgreSQL server, for a person at a shell; it is
removed on stop, or when the process that owns it ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from leaselab import Queue
from leaselab.harness import pgcommand
from tests.support.polling import wait_until

pytestmark = pytest.mark.skipif(pgcommand.running() is not None, reason="this user already runs a `leaselab pg` server")


def _leaselab(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "leaselab", *argv], capture_output=True, text=True, timeout=180)


def _folder_of(url: str) -> Path:
    with psycopg.connect(url) as conn:
        return Path(conn.execute("SHOW data_directory").fetchone()[0])


def test_pg_start_prints_a_url_the_queue_opens_url_repeats_it_and_stop_removes_it():
    owner = subprocess.Popen(["sleep", "600"])
    try:
        started = _leaselab("pg", "start", "--owner", str(owner.pid))
        assert started.returncode == 0, started.stderr
        url = started.stdout.strip()
        assert url.startswith("postgresql://") and "leaselab pg stop" in started.stderr
        assert _leaselab("pg", "url").stdout.strip() == url
        assert _leaselab("pg", "start", "--owner", str(owner.pid)).stdout.strip() == url  # one server, not two
        with Queue(url) as q:
            q.enqueue({"to": "a@example.org"})
            assert q.stats()["pending"] == 1
        folder = _folder_of(url)
        stopped = _leaselab("pg", "stop")
        assert (stopped.returncode, stopped.stdout.strip()) == (0, "stopped: its folder is removed")
        assert not folder.exists() and not pgcommand.state_path().exists()
        gone = _leaselab("pg", "url")
        assert gone.returncode == 2 and "no server is running" in gone.stderr
        assert _leaselab("pg", "stop").stdout.strip() == "no server was running"
    finally:
        owner.kill()
        owner.wait()


def test_the_server_is_removed_when_its_owner_dies():
    owner = subprocess.Popen(["sleep", "600"])
    try:
        started = _leaselab("pg", "start", "--owner", str(owner.pid), "--quiet")
        assert started.returncode == 0 and started.stderr == "", started.stderr
        folder = _folder_of(started.stdout.strip())
        keeper = pgcommand.running()
        assert keeper is not None
    finally:
        owner.kill()
        owner.wait()
    wait_until(lambda: pgcommand.running() is None and not folder.exists(), message="the server removed")
    assert not pgcommand.state_path().exists()
