"""Handlers for the chaos command's tests: a transfer, an outside effect, that freezes on its first attempt.

The fault that makes the transfer repeat is put into the handler, so no machine's speed can
change the verdict: the first attempt of job ``freeze_job`` records its effect, then freezes
its own worker (SIGSTOP) until another attempt has finished the job, or for a minute at most.
Any SIGCONT before that (a nemesis's resume) finds the job unfinished and freezes it again. ``transfer`` repeats the effect; ``transfer_once`` keeps it to one by its key.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

from leaselab.check import read_effects, record_effect

FREEZE_FOR_AT_MOST = 60.0

# Read with raw sqlite3 from a child of the frozen worker: has another attempt finished the job?
DONE_BY_ANOTHER = "SELECT status = 'done' AND attempts > ? FROM jobs WHERE id = ?"

# Sends SIGCONT to the frozen worker once another attempt has finished the job (a few times,
# in case the first lands before the worker is stopped), or when the minute is up.
THAW = r"""
import os, signal, sqlite3, sys, time
pid, db, job, attempt, until, sql = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
def done_by_another():
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return bool(conn.execute(sql, (attempt, job)).fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return False
while not done_by_another() and time.time() < until:
    time.sleep(0.05)
for _ in range(25):
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        break
    time.sleep(0.2)
"""


def _done_by_another(job) -> bool:
    conn = sqlite3.connect(f"file:{os.environ['LEASELAB_DB']}?mode=ro", uri=True, timeout=1)
    try:
        return bool(conn.execute(DONE_BY_ANOTHER, (job.attempts, job.id)).fetchone()[0])
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def _freeze_until_done_by_another(job) -> None:
    """SIGSTOP this worker until another attempt has finished the job (SQLite queues: the tests' own)."""
    until = time.time() + FREEZE_FOR_AT_MOST
    subprocess.Popen([sys.executable, "-c", THAW, str(os.getpid()), os.environ["LEASELAB_DB"], str(job.id),
                      str(job.attempts), repr(until), DONE_BY_ANOTHER], start_new_session=True,
                     stdin=subprocess.DEVNULL)
    while not _done_by_another(job) and time.time() < until:
        os.kill(os.getpid(), signal.SIGSTOP)


def transfer(job):
    """Send 10 to the payload's account: an outside effect with no guard against a second attempt."""
    record_effect(job, key=f"transfer-{job.id}", amount=10)
    if job.attempts == 1 and job.id == job.payload.get("freeze_job"):
        _freeze_until_done_by_another(job)
    return {"sent": 10}


def transfer_once(job):
    """The same transfer, kept to once by its idempotency key: a second attempt finds it done."""
    key = f"transfer-{job.id}"
    if any(line.get("key") == key for line in read_effects(os.environ["LEASELAB_EFFECTS"])):
        return {"sent": 0}  # the effect happened once already: this run adds nothing
    record_effect(job, key=key, amount=10)
    if job.attempts == 1 and job.id == job.payload.get("freeze_job"):
        _freeze_until_done_by_another(job)
    return {"sent": 10}
