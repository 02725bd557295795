"""The audit's ledger and its rules: every run a handler makes, written outside the queue, and what it proves.

A line is ``{"job": key, "pid": pid, "what": "start"|"end"|"accepted"|"refused", "t": unix seconds}``.
``start`` and ``end`` are written by the handler around its work; ``accepted`` and
``refused`` say what the queue did with that process's completion, read from the queue's
own public record (leaselab's events, huey's completion signal, persist-queue's ``ack``).
One ``os.write`` of one short line to a file opened with ``O_APPEND`` is one append, so
processes share the file without a lock.

The fault lives in the handler, so machine speed cannot change a verdict: on a job's
first run (no earlier ``start`` for its key in the ledger) ``fault="crash"`` SIGKILLs the
handler's own process, ``fault="zombie"`` SIGSTOPs it, and ``fault="partition"`` keeps the run
going (the process alive, its worker cut off from the server by the harness) until the harness
heals the network and creates the run's release file (``release_file``).
Standard library only: the contenders' worker processes import this module.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

FAULTS = ("crash", "zombie", "partition")
WHATS = ("start", "end", "accepted", "refused")
WORK_SECONDS = 0.2  # a run that is not the faulted one: long enough to be a visible interval
# How long a partitioned run waits for its release at most: far past every wait of the harness,
# so only a harness that died leaves it to end by itself.
RELEASE_WAIT = 600.0


class LedgerError(ValueError):
    """Raised when a ledger line or a fault name is not one the audit writes."""


def record(ledger: str | os.PathLike, job: str, what: str, pid: int | None = None, t: float | None = None) -> None:
    """Append one line to ``ledger``: ``what`` happened to ``job`` in process ``pid`` (this one by default)."""
    if what not in WHATS:
        raise LedgerError(f"what must be one of {', '.join(WHATS)}, got {what!r}")
    line = (
        json.dumps(
            {"job": job, "pid": os.getpid() if pid is None else pid, "what": what, "t": time.time() if t is None else t}
        )
        + "\n"
    )
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(ledger: str | os.PathLike) -> list[dict]:
    """Every line of ``ledger`` in the order written; a missing file is an empty ledger."""
    path = Path(ledger)
    if not path.exists():
        return []
    lines = []
    for n, text in enumerate(path.read_text().splitlines(), 1):
        try:
            line = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LedgerError(f"{path}:{n} is not JSON: {exc}") from None
        if not isinstance(line, dict) or line.get("what") not in WHATS:
            raise LedgerError(f"{path}:{n} is not a ledger line: {text[:80]!r}")
        lines.append(line)
    return lines


def release_file(ledger: str | os.PathLike, job: str) -> Path:
    """The file whose existence lets the partitioned first run of ``job`` finish."""
    return Path(f"{ledger}.{job}.release")


def handle(job: str, fault: str | None, ledger: str) -> int:
    """The audit's handler body, the same for every contender: record the run, fault on the first, return the pid."""
    if fault is not None and fault not in FAULTS:
        raise LedgerError(f"fault must be one of {', '.join(FAULTS)} or None, got {fault!r}")
    first = not any(line["job"] == job and line["what"] == "start" for line in read(ledger))
    record(ledger, job, "start")
    # A signal a process sends itself stops or kills every thread of it, but when the handler runs on
    # a thread of its own (Procrastinate's sync tasks) that thread may go on for a moment first: the
    # sleep after each kill is where the signal lands, never the "end" line.
    if first and fault == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(RELEASE_WAIT)
    if first and fault == "zombie":
        os.kill(os.getpid(), signal.SIGSTOP)  # the harness sends SIGCONT once another run has finished
    elif first and fault == "partition":
        deadline = time.monotonic() + RELEASE_WAIT
        while not release_file(ledger, job).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    time.sleep(WORK_SECONDS)
    record(ledger, job, "end")
    return os.getpid()


@dataclass(frozen=True)
class Run:
    """One run of a job: the process, when it started, and when it ended (None: it never did, killed)."""

    job: str
    pid: int
    start: float
    end: float | None


def runs(lines: list[dict]) -> list[Run]:
    """The runs the ledger shows; an ``end`` closes its process's open run of that job."""
    found: list[Run] = []
    for line in lines:
        if line["what"] == "start":
            found.append(Run(line["job"], line["pid"], line["t"], None))
        elif line["what"] == "end":
            for i in range(len(found) - 1, -1, -1):
                r = found[i]
                if r.job == line["job"] and r.pid == line["pid"] and r.end is None:
                    found[i] = Run(r.job, r.pid, r.start, line["t"])
                    break
    return found


@dataclass(frozen=True)
class Verdict:
    """What the ledger proves about one scenario: each count is a number of jobs (or pairs of runs)."""

    runs: int
    overlapping: int  # pairs of runs of one job that were both under way at one moment
    stale_accepted: int  # completions accepted from a run that a newer run of the job had already replaced
    completed_twice: int  # jobs whose completion the queue accepted more than once
    lost: int  # jobs never completed and no longer held by the queue
    stuck: int  # jobs never completed that the queue still holds as in flight, with no one running them
    back_after: float | None  # seconds from the faulted run's start to the next run's start (None: never)
    jobs: int = 1  # how many jobs the scenario enqueued
    rerun_after_done: int = 0  # runs that began after an earlier run of the same job had finished its work

    @property
    def clean(self) -> bool:
        """No promise of at-least-once with fenced completions broken (overlap alone is the zombie's nature)."""
        return not (self.stale_accepted or self.completed_twice or self.lost or self.stuck)


def judge(lines: list[dict], jobs: list[str], held: set[str]) -> Verdict:
    """The rules over a ledger: ``jobs`` the keys enqueued, ``held`` those the queue still shows in flight."""
    all_runs = runs(lines)
    overlapping = 0
    for i, a in enumerate(all_runs):
        for b in all_runs[i + 1 :]:
            if a.job == b.job and a.pid != b.pid and _overlap(a, b):
                overlapping += 1
    accepted: dict[str, list[dict]] = {}
    for line in lines:
        if line["what"] == "accepted":
            accepted.setdefault(line["job"], []).append(line)
    stale = 0
    for job, acks in accepted.items():
        for ack in acks:
            newer = [
                r
                for r in all_runs
                if r.job == job
                and r.pid != ack["pid"]
                and r.start > _start_of(all_runs, job, ack["pid"])
                and r.start < ack["t"]
            ]
            if newer:
                stale += 1
    twice = sum(1 for acks in accepted.values() if len(acks) > 1)
    unfinished = [job for job in jobs if job not in accepted]
    stuck = sum(1 for job in unfinished if job in held)
    lost = len(unfinished) - stuck
    back = None
    for job in jobs:
        starts = sorted(r.start for r in all_runs if r.job == job)
        if len(starts) > 1:
            back = starts[1] - starts[0] if back is None else max(back, starts[1] - starts[0])
    # A run after a finished one did the work again: its queue lost or never took the earlier completion.
    rerun = sum(
        1
        for r in all_runs
        if any(o.job == r.job and o is not r and o.end is not None and o.end <= r.start for o in all_runs)
    )
    return Verdict(len(all_runs), overlapping, stale, twice, lost, stuck, back, len(jobs), rerun)


def _overlap(a: Run, b: Run) -> bool:
    # A run that never ended was killed at its start (the crash fault kills right after recording it).
    a_end = a.end if a.end is not None else a.start
    b_end = b.end if b.end is not None else b.start
    return a.start < b_end and b.start < a_end


def _start_of(all_runs: list[Run], job: str, pid: int) -> float:
    mine = [r.start for r in all_runs if r.job == job and r.pid == pid]
    return max(mine) if mine else float("inf")
