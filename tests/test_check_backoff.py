"""`leaselab check --backoff BASE,CAP`: a queue made with its own backoff is judged by it, not by the default one."""

from __future__ import annotations

import subprocess
import sys

import pytest

from leaselab import Backoff, ManualClock, Queue


def _check(path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "leaselab", "check", "--db", str(path), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def quick_retry(tmp_path):
    """A job failed once and retried 0.2 s later, on a queue whose backoff starts at 0.1 s."""
    path = tmp_path / "q.db"
    clock = ManualClock(1_000_000.0)
    with Queue(path, clock=clock, backoff=Backoff(base=0.1, cap=5)) as q:
        job_id = q.enqueue("x")
        first = q.claim("w", 30)
        q.fail(job_id, first.token, "boom")
        clock.advance(0.2)
        again = q.claim("w", 30)
        q.complete(job_id, again.token, "ok")
    return path


def test_a_queues_own_backoff_is_how_its_retries_are_judged(quick_retry):
    by_default = _check(quick_retry)
    assert by_default.returncode == 1 and "before" in by_default.stdout, by_default.stdout  # 0.2 s < the default 1 s
    told = _check(quick_retry, "--backoff", "0.1,5")
    assert told.returncode == 0 and "every promise held" in told.stdout, told.stdout + told.stderr
    unjudged = _check(quick_retry, "--backoff", "none")
    assert unjudged.returncode == 0, unjudged.stdout + unjudged.stderr


@pytest.mark.parametrize("bad", ["0.1", "a,b", "5,1", "-1,3"])
def test_a_backoff_that_is_not_base_and_cap_is_refused_in_one_line(quick_retry, bad):
    out = _check(quick_retry, "--backoff", bad)
    assert out.returncode == 2 and "--backoff" in out.stderr and "Traceback" not in out.stderr, out.stderr
