"""The checker names what a live process that does nothing leaves behind: every attempt a worker gave up at
its timeout (timed out), and, when asked, a job still running an attempt older than --max-run however many
heartbeats renewed it (hung). Either way the report is not "every promise held". On both backends."""

from __future__ import annotations

import subprocess
import sys

from leaselab import Queue
from leaselab.check import check


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "leaselab", *argv], capture_output=True, text=True, timeout=120)


def test_an_attempt_given_up_at_its_timeout_is_named_in_both_languages(target, clock):
    with Queue(target, clock=clock) as q:
        job_id = q.enqueue("slow", timeout=5)
        job = q.claim("w1", lease=30)
        q.time_out(job_id, job.token, "ran past its timeout of 5s")
        clock.advance(60)  # past the backoff
        again = q.claim("w2", lease=30)
        q.complete(job_id, again.token, "done at last")
    report = check(target, now=clock())
    assert not report.clean
    assert [a.kind for a in report.anomalies] == ["timed_out"]
    (anomaly,) = report.anomalies
    assert anomaly.sentence("en") == (
        f"job {job_id}: attempt 1 ran past its timeout of 5.0 s, and its worker gave it up: its handler may hang"
    )
    assert anomaly.sentence("ru").startswith(f"задача {job_id}: попытка 1 вышла за тайм-аут в 5,0 с")
    out = _cli("check", "--db", target, "--lang", "ru")
    assert out.returncode == 1 and "попытка снята по тайм-ауту" in out.stdout, out.stdout + out.stderr


def test_a_job_running_longer_than_max_run_under_heartbeats_is_hung_and_without_max_run_is_not(target, clock):
    with Queue(target, clock=clock) as q:
        job_id = q.enqueue("forever")
        job = q.claim("w1", lease=2)
        for _ in range(30):  # the pulse renews it every beat; the handler does nothing
            clock.advance(0.5)
            q.heartbeat(job_id, job.token, lease=2)
    assert check(target, now=clock(), idle=False).clean  # no timeout asked, no promise broken
    report = check(target, now=clock(), idle=False, max_run=10)
    assert [a.kind for a in report.anomalies] == ["hung"]
    assert report.anomalies[0].sentence("en") == (
        f"job {job_id} has been running attempt 1 for 15.0 s (30 heartbeats), longer than the 10.0 s allowed: its "
        "worker lives, but its handler may hang; give the job a timeout"
    )
    assert "(попытка 1, 30 продлений аренды)" in report.anomalies[0].sentence("ru")
