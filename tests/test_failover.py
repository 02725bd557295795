"""A real failover under real worker processes: an asynchronous standby held behind loses fences and
acknowledged completions, which only the workers' journals can witness; a synchronous one loses none.

Bounded by conditions (completions journaled, workers exited), never by durations; the counts vary
from run to run, so the asynchronous run asserts some, the synchronous one none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from leaselab import Queue
from leaselab.check import check
from leaselab.harness.pgreplicas import Replicated
from tests.support.polling import wait_until
from tests.support.servers import in_memory

pytest.importorskip("psycopg")

JOBS = 1500
WORKERS = 2
BEFORE = 30  # completions journaled before the fault is set up, and again after
DRAIN = 600  # seconds the fleet may take to drain on a loaded machine: a bound, not a measure


def _completions(folder: Path) -> int:
    return sum(
        json.loads(line)["kind"] == "completed"
        for path in folder.glob("*.jsonl")
        for line in path.read_text().splitlines()
        if line.endswith("}")
    )


def failover_run(tmp_path: Path, synchronous: str | None, bin_dir) -> dict[str, int]:
    """Workers on a multi-host URL, the primary stopped mid-run, the standby promoted, the fleet drained;
    the checker's totals, judged against the workers' journals."""
    folder = tmp_path / "journal"
    with Replicated(standbys=1, synchronous=synchronous, bin_dir=bin_dir, parent=in_memory()) as servers:
        url = servers.create_database("demo")
        with Queue(url) as q:
            q.enqueue_many([{"seconds": 0.005}] * JOBS)
        servers.catch_up()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        argv = ["--db", url, "--handler", "leaselab.harness.demo:sleepy", "--journal", str(folder), "--lease", "5"]
        fleet = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "leaselab",
                    "worker",
                    *argv,
                    "--name",
                    f"w{i}",
                    "--lease",
                    "5",
                    "--exit-when-idle",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
            for i in range(WORKERS)
        ]
        try:
            wait_until(lambda: _completions(folder) >= BEFORE, DRAIN, message="the first completions")
            if synchronous is None:
                servers.hold(servers.standbys[0])  # from here on the asynchronous primary's commits stay on it
            mark = _completions(folder)
            wait_until(lambda: _completions(folder) >= mark + BEFORE, DRAIN, message="completions past the mark")
            servers.stop_primary()
            servers.promote(servers.standbys[0])
            for worker in fleet:
                worker.wait(DRAIN)
        finally:
            for worker in fleet:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
        assert all(worker.returncode == 0 for worker in fleet)
        report = check(url, journal=folder, idle=True)
        return dict(report.totals)


def test_a_failover_to_an_asynchronous_standby_held_behind_hands_fences_out_twice_and_loses_completions(
    tmp_path, bin_dir
):
    totals = failover_run(tmp_path, None, bin_dir)
    assert totals.get("fence_handed_twice", 0) > 0 and totals.get("acknowledged_lost", 0) > 0, totals


def test_a_failover_to_a_synchronous_standby_loses_no_fence_and_no_acknowledged_completion(tmp_path, bin_dir):
    totals = failover_run(tmp_path, "remote_apply", bin_dir)
    assert totals.get("fence_handed_twice", 0) == 0 and totals.get("acknowledged_lost", 0) == 0, totals
