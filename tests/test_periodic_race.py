"""Periodic jobs under a real race: many processes run the same schedule on the real clock for many ticks,
each also claiming and completing the jobs, on SQLite and on PostgreSQL. Every tick from the first to the
last is enqueued exactly once: no tick twice (even one whose job was already done when a slower scheduler
came to it) and none skipped (catch_up="all"). The compare-and-set decides, so no timing makes two."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone

from leaselab import Queue

RACERS = 8
TICKS = 20
EVERY = 0.05

# One racer: open the queue, say so, wait at the gate, then until its schedule has handled TICKS ticks past
# the gate's time, run the schedule and claim and complete whatever it can, as a worker would.
RACER = textwrap.dedent(
    """
    import os, sys, time
    from leaselab import Queue
    from leaselab.periodic import Schedule
    target, gate, every, ticks = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    schedule = Schedule("race", every=every, catch_up="all")
    with Queue(target, durability="normal") as q:
        q.stats()
        print("ready", flush=True)
        while not os.path.exists(gate):
            time.sleep(0.001)
        end = float(open(gate).read()) + ticks * every
        while (q.backend.schedule_last("race") or 0) < end:
            q.run_schedule(schedule)
            job = q.claim("racer-%d" % os.getpid())
            if job is not None:
                q.complete(job.id, job.token)
    print("done", flush=True)
    """
)


def _key_time(key: str) -> float:
    return datetime.fromisoformat(key.split("@", 1)[1].replace("Z", "+00:00")).replace(tzinfo=timezone.utc).timestamp()


def test_many_processes_running_one_schedule_enqueue_each_tick_exactly_once(target, tmp_path):
    Queue(target).close()
    gate = tmp_path / "gate"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, target, str(gate), str(EVERY), str(TICKS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(RACERS)
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready", racer.stderr.read() if racer.stderr else ""
        (tmp_path / "gate.new").write_text(repr(time.time()))
        os.replace(tmp_path / "gate.new", gate)  # whole at once: a racer never reads it half-written
        for racer in racers:
            out, err = racer.communicate(timeout=600)
            assert racer.returncode == 0 and out.strip() == "done", err
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.wait()
    with Queue(target) as q:
        keys = [j.key for j in q.jobs() if j.key is not None]
        done = q.stats()["done"]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    times = sorted(_key_time(k) for k in keys)
    assert len(times) >= TICKS
    steps = {round((b - a) / EVERY) for a, b in zip(times, times[1:], strict=False)}
    assert steps == {1}, f"ticks skipped: steps of {steps} periods"
    assert done > 0  # jobs finished while schedulers still ran: the unique index alone would not have held
