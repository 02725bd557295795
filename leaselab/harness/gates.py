"""Faults put into a handler, at the point the lesson chooses, so no machine's speed decides a verdict.

A handler of one's own calls ``fault_point(job, "before")`` just before its outside effect and
``fault_point(job, "after")`` just after it. Both do nothing unless the job's payload asks for a
fault there: ``{"fault": "after"}`` (or ``{"fault": "after", "victim": 3}`` for job 3 only). On
the job's first attempt:

- ``"before"`` kills the worker's own process with ``SIGKILL``: the crash before the effect, so
  the next attempt must do it (a handler that skips retried jobs loses the payment here);
- ``"after"`` freezes the worker's own process with ``SIGSTOP`` until another attempt has
  finished the job (or a minute has passed): the pause after the effect and before ``complete``,
  so the effect is done and its attempt's lease runs out; the next attempt runs the handler again.
  The stop is sent only while no write of the worker is under way (see ``FREEZER``).

A nemesis outside the process (``leaselab chaos``'s pauses) can hit any instant; these hit the
one instant that matters, every time. The freeze is made and ended by a small watcher process that
uses the queue file with raw ``sqlite3`` (it needs ``$LEASELAB_DB``, which the lab's workers carry).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from typing import Any

WHERE = ("before", "after")
FREEZE_FOR_AT_MOST = 60.0

# Has an attempt after ``attempt`` finished job ``id``? Read with raw sqlite3, never through leaselab.
DONE_BY_ANOTHER = "SELECT status = 'done' AND attempts > ? FROM jobs WHERE id = ?"

# The watcher. It stops the worker only while it holds the queue file's write lock itself, so the
# worker cannot be frozen in the middle of a write (its heartbeat thread may be in one): a worker
# stopped holding SQLite's write lock would stall every other worker, and nobody could take its
# job. It stops the worker again whenever someone else (a nemesis's resume) has let it run, until
# another attempt has finished the job (or the minute is up); then it sends SIGCONT (a few times).
#
# It leaves the worker's process group (a terminal's Ctrl-C must not kill it and leave the worker
# stopped for good) but not its session. Where the kernel groups processes by session for the
# scheduler (autogroup, on by default in Debian's and Ubuntu's kernels), a new session is a
# scheduling group of its own, weighed against the others as one: a watcher that sleeps most of the
# time, on a CPU busy with another group, was measured waiting runnable for up to 25 s, too late
# to freeze anything. In the worker's session it shares the worker's group and runs when it wakes.
FREEZER = r"""
import os, signal, sqlite3, sys, time
os.setpgrp()
pid, db, job, attempt = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
until, sql = float(sys.argv[5]), sys.argv[6]
def done_by_another():
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return bool(conn.execute(sql, (attempt, job)).fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return False
def stopped():
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return True  # gone: nothing left to freeze
    return text[text.rfind(")") + 2:].split(" ", 1)[0] == "T"
lock = sqlite3.connect(db, timeout=60, isolation_level=None)
while not done_by_another() and time.time() < until:
    if not stopped():  # the first time, or after someone else's SIGCONT (a nemesis's resume)
        lock.execute("BEGIN IMMEDIATE")
        try:
            os.kill(pid, signal.SIGSTOP)
            # kill() returns once the signal is queued: a worker that waits for a CPU runs on until it
            # is next scheduled, and would take the lock the moment it is let go, then stop holding it.
            held_until = time.monotonic() + 5
            while not stopped() and time.monotonic() < held_until:
                time.sleep(0.001)
        finally:
            lock.execute("ROLLBACK")
    time.sleep(0.05)
lock.close()
for _ in range(25):
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        break
    time.sleep(0.2)
"""


def _asked(job: Any, where: str) -> bool:
    if where not in WHERE:
        raise ValueError(f"where must be one of {', '.join(WHERE)}; got {where!r}")
    payload = job.payload if isinstance(job.payload, dict) else {}
    victim = payload.get("victim")
    return payload.get("fault") == where and job.attempts == 1 and (victim is None or victim == job.id)


def _done_by_another(db: str, job: Any) -> bool:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return bool(conn.execute(DONE_BY_ANOTHER, (job.attempts, job.id)).fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def freeze_until_done_by_another(job: Any) -> None:
    """Freeze this worker until another attempt has finished ``job`` (a SQLite queue), a minute at most.

    A watcher process sends the SIGSTOP, at a moment no write of this worker is under way, and
    the SIGCONT once another attempt is done; meanwhile this handler waits for that. A SIGCONT
    from anyone else (a nemesis's resume) is undone by the watcher at once, and the handler never
    returns before another attempt has finished the job, or the minute is up. Linux only (/proc).
    """
    db = os.environ.get("LEASELAB_DB")
    if not db:
        raise RuntimeError("freezing until another attempt is done needs $LEASELAB_DB (the lab's workers carry it)")
    until = time.time() + FREEZE_FOR_AT_MOST
    subprocess.Popen(
        [
            sys.executable,
            "-c",
            FREEZER,
            str(os.getpid()),
            db,
            str(job.id),
            str(job.attempts),
            repr(until),
            DONE_BY_ANOTHER,
        ],
        stdin=subprocess.DEVNULL,
    )
    while not _done_by_another(db, job) and time.time() < until:
        time.sleep(0.05)


def fault_point(job: Any, where: str) -> None:
    """The fault the payload asks for at ``where`` ("before" or "after" the effect), on attempt 1 only."""
    if not _asked(job, where):
        return
    if where == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    else:
        freeze_until_done_by_another(job)
