"""The wrong ways, for lessons only: the two-statement claim, the unfenced write, the claim not made durable.

Nothing in the library uses this module. Each piece reproduces a bug the real queue
is built to prevent, so a lesson can show the failure before the mechanism.
``race`` runs real processes against one file and counts how often a job was given
out twice, for the naive claim and for the library's single statement alike.
``forgetful_queue`` acknowledges its claims before they are durable, so a server crash
can forget a claim whose worker is already acting on it, and the next claim gets the
same fence (lesson 7).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..arguments import integer, positive, text
from ..clock import Clock, system_clock
from ..job import JOB_COLUMNS, Job
from ..queue import Queue
from .errors import CrashKeptTheClaim

# Step one of the naive claim: look for the next job...
NAIVE_SELECT = """
SELECT id FROM jobs
 WHERE status = 'pending' AND run_at <= :now
 ORDER BY priority DESC, run_at ASC, id ASC
 LIMIT 1
"""

# ...step two: take it. Nothing re-checks that it is still pending, so two readers both win.
NAIVE_UPDATE = f"""
UPDATE jobs SET status = 'running', attempts = attempts + 1,
       lease_until = :lease_until, worker = :worker, token = :token, started_at = :now,
       updated_at = :now, last_event = 'claimed'
 WHERE id = :id
RETURNING {JOB_COLUMNS}
"""

# The write a zombie should never be allowed: it matches the id only, not the token.
UNFENCED_COMPLETE = """
UPDATE jobs SET status = 'done', result = :result, lease_until = NULL, finished_at = :now,
       updated_at = :now, last_event = 'completed'
 WHERE id = :id
"""

# The two statements inside one transaction. A deferred BEGIN reads without the write lock, so two
# claimers can still pick the same job, but the second to write finds its snapshot stale and gets
# "database is locked" (an error to roll back and retry). IMMEDIATE takes the write lock first.
BEGIN = {"deferred": "BEGIN DEFERRED", "immediate": "BEGIN IMMEDIATE"}
COMMIT, ROLLBACK = "COMMIT", "ROLLBACK"
TRANSACTIONS = (None, *BEGIN)

# How many claims went to a job that had already been claimed: each one is a duplicate.
COUNT_CLAIMS = """
SELECT count(*), count(DISTINCT job_id) FROM events WHERE kind = 'claimed'
"""


class NaiveClaimer:
    """One worker's own connection that claims in two statements, SELECT then UPDATE: racy on purpose.

    Call ``select()`` and ``update(job_id)`` separately to force an interleaving
    between two claimers, or ``claim()`` to do both with ``pause`` seconds between.
    ``transaction`` wraps ``claim()``'s two statements in ``BEGIN DEFERRED`` or
    ``BEGIN IMMEDIATE``; ``locked`` counts the claims that failed with "database is
    locked" and were rolled back and tried again.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        name: str,
        lease: float = 30.0,
        clock: Clock | None = None,
        pause: float = 0.0,
        transaction: str | None = None,
    ):
        Queue(path).close()  # creates the schema if the file is new, and checks it is ours
        self.name = text("name", name)
        self.lease = positive("lease", lease)
        self.clock = clock or system_clock
        if isinstance(pause, bool) or not isinstance(pause, (int, float)) or pause < 0:
            raise ValueError(f"pause must be a number of seconds >= 0, got {pause!r}")
        self.pause = float(pause)
        if transaction not in TRANSACTIONS:
            raise ValueError(f"transaction must be None, 'deferred' or 'immediate', got {transaction!r}")
        self.transaction = transaction
        self.locked = 0
        self._conn = sqlite3.connect(os.fspath(path), timeout=30.0, isolation_level=None)

    def select(self) -> int | None:
        """Step one: the id of the job this worker would take, or None. Changes nothing."""
        row = self._conn.execute(NAIVE_SELECT, {"now": self.clock()}).fetchone()
        return None if row is None else row[0]

    def update(self, job_id: int) -> Job:
        """Step two: mark ``job_id`` as ours, whoever took it in the meantime."""
        now = self.clock()
        row = self._conn.execute(
            NAIVE_UPDATE,
            {
                "id": job_id,
                "now": now,
                "lease_until": now + self.lease,
                "worker": self.name,
                "token": secrets.token_hex(16),
            },
        ).fetchone()
        return Job.from_row(row)

    def claim(self) -> Job | None:
        """Both steps, with ``pause`` seconds between them (a network round trip, a busy CPU)."""
        if self.transaction is None:
            return self._steps()
        while True:
            self._conn.execute(BEGIN[self.transaction])
            try:
                job = self._steps()
                self._conn.execute(COMMIT)
                return job
            except sqlite3.OperationalError as exc:
                self._conn.execute(ROLLBACK)
                if "locked" not in str(exc):
                    raise
                self.locked += 1

    def _steps(self) -> Job | None:
        job_id = self.select()
        if job_id is None:
            return None
        if self.pause:
            time.sleep(self.pause)
        return self.update(job_id)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> NaiveClaimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unfenced_complete(path: str | os.PathLike, job_id: int, result: object = None, clock: Clock | None = None) -> bool:
    """Mark a job done without checking the token: the write a zombie must never get. True if a row changed."""
    import json

    now = (clock or system_clock)()
    with sqlite3.connect(os.fspath(path), timeout=30.0, isolation_level=None) as conn:
        changed = conn.execute(
            UNFENCED_COMPLETE,
            {
                "id": job_id,
                "result": json.dumps(result),
                "now": now,
            },
        ).rowcount
    conn.close()
    return changed > 0


def forgetful_queue(target: str | os.PathLike, clock: Clock | None = None) -> Queue:
    """A queue whose claims are acknowledged before they reach the disk: ``durability="normal"``.

    On a server its claims commit with ``synchronous_commit = off``: the worker has its job
    and its fence while the claim still lives only in the server's memory, and a crash then
    forgets it. The job is pending again with its old ``attempts``, so the next claim gets
    the very fence the first worker is still writing with. Wrong for any queue whose fences
    an outside store trusts; leaselab's default, ``durability="full"``, waits for the disk.
    """
    return Queue(target, clock=clock, durability="normal")


def claim_until_a_crash_forgets(
    server: Any, target: str, worker: str = "A", lease: float = 600.0, rounds: int = 10, clock: Clock | None = None
) -> tuple[Job, int]:
    """Claim a fresh job through ``forgetful_queue``, crash ``server`` and recover it, until a crash forgets the claim.

    ``server`` is a ``PgServer`` (``crash()``, ``recover()``) that holds ``target``, started
    with ``settings=LAZY_WAL_WRITER`` so that a crash loses what was not written; even so
    the server may write a claim on its own before the crash, so the claim is tried again
    on a new job, up to ``rounds`` times. Each job is enqueued durably, so only the claim
    can be lost. Returns the forgotten claim (its worker still holds it, as far as it
    knows) and the number of rounds it took; ``CrashKeptTheClaim`` if every crash kept it.
    """
    if not str(target).startswith(("postgresql://", "postgres://")):
        raise ValueError(f"target must be the postgresql:// URL of a database on the server to crash, got {target!r}")
    rounds = integer("rounds", rounds, 1)
    for round_ in range(1, rounds + 1):
        with Queue(target, clock=clock) as durable:
            job_id = durable.enqueue({"round": round_})
        with forgetful_queue(target, clock=clock) as forgetful:
            claim = forgetful.claim(worker, lease=lease)
        server.crash()  # at once: nothing else commits between the claim and the crash
        server.recover()
        with Queue(target, clock=clock) as durable:
            if claim is not None and claim.id == job_id and durable.get(job_id).attempts == claim.attempts - 1:
                return claim, round_
    raise CrashKeptTheClaim(
        f"none of {rounds} crashes forgot the claim; start the server with "
        f"PgServer(settings=LAZY_WAL_WRITER) so a crash loses what was not made durable"
    )


@dataclass(frozen=True)
class RaceResult:
    """What a race observed: jobs handed out, claims made, and claims of an already claimed job."""

    claim: str
    workers: int
    jobs: int
    claims: int
    duplicates: int
    locked: int = 0  # claims that failed with "database is locked" and were retried
    transaction: str | None = None


CLAIMS = ("naive", "single")


def count_claims(path: str | os.PathLike) -> tuple[int, int]:
    """``(claims made, distinct jobs claimed)`` from the history of the queue file."""
    with sqlite3.connect(os.fspath(path), timeout=30.0) as conn:
        total, distinct = conn.execute(COUNT_CLAIMS).fetchone()
    conn.close()
    return total, distinct


def run_racers(commands: Sequence[Sequence[str]], gate: Path, timeout: float) -> None:
    """Start one racer process per command, let them go together once each has written
    ``ready-*`` into ``gate`` (by touching ``gate/go``), and wait for all; ``RuntimeError`` if one
    never reaches the starting line or fails. No process outlives the call."""
    procs: list[subprocess.Popen] = []
    try:
        for command in commands:
            procs.append(
                subprocess.Popen(
                    list(command), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                )
            )
        deadline = time.monotonic() + timeout
        while len(list(gate.glob("ready-*"))) < len(procs):
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                raise RuntimeError("a racer did not reach the starting line")
            time.sleep(0.01)
        (gate / "go").touch()
        for p in procs:
            _, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            if p.returncode != 0:
                raise RuntimeError(f"a racer failed: {err.decode(errors='replace')}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def at_starting_line(gate: Path, name: str, timeout: float = 60.0) -> bool:
    """A racer's side of ``run_racers``: say ``ready-<name>``, then wait for ``go``; False if it never
    comes within ``timeout`` (the parent is gone), so no racer waits forever."""
    (gate / f"ready-{name}").touch()
    deadline = time.monotonic() + timeout
    while not (gate / "go").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def race(
    path: str | os.PathLike,
    claim: str = "naive",
    workers: int = 4,
    jobs: int = 100,
    pause: float = 0.002,
    timeout: float = 60.0,
    transaction: str | None = None,
) -> RaceResult:
    """Fill a new queue file with ``jobs`` jobs and let ``workers`` processes claim them all at once.

    Every process waits at a starting line until all are ready, then claims until
    the queue is empty. ``claim="naive"`` uses ``NaiveClaimer`` (with ``pause``
    between its two statements, inside ``transaction`` if given); ``"single"`` uses
    ``Queue.claim``. No process outlives the call.
    """
    if claim not in CLAIMS:
        raise ValueError(f"claim must be 'naive' or 'single', got {claim!r}")
    if transaction not in TRANSACTIONS:
        raise ValueError(f"transaction must be None, 'deferred' or 'immediate', got {transaction!r}")
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"race needs a new queue file; {path} already exists")
    with Queue(path) as q:
        q.enqueue_many(range(jobs))
    gate = path.with_name(path.name + ".race")
    gate.mkdir()
    try:
        run_racers(
            [
                [
                    sys.executable,
                    "-m",
                    "leaselab.lessons.wrong",
                    "--db",
                    str(path),
                    "--claim",
                    claim,
                    "--name",
                    f"racer-{i + 1}",
                    "--gate",
                    str(gate),
                    "--pause",
                    repr(pause),
                    *(["--transaction", transaction] if transaction else []),
                ]
                for i in range(workers)
            ],
            gate,
            timeout,
        )
        locked = sum(int(f.read_text()) for f in gate.glob("locked-*"))
    finally:
        for f in gate.iterdir():
            f.unlink()
        gate.rmdir()
    total, distinct = count_claims(path)
    return RaceResult(
        claim=claim,
        workers=workers,
        jobs=jobs,
        claims=total,
        duplicates=total - distinct,
        locked=locked,
        transaction=transaction,
    )


def _racer(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leaselab.lessons.wrong", description="one racer of wrong.race")
    parser.add_argument("--db", required=True)
    parser.add_argument("--claim", choices=CLAIMS, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--gate", required=True)
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--transaction", choices=[t for t in TRANSACTIONS if t])
    args = parser.parse_args(argv)
    gate = Path(args.gate)
    claimer = None
    if args.claim == "naive":
        claimer = NaiveClaimer(args.db, args.name, pause=args.pause, transaction=args.transaction)
        take = claimer.claim
    else:
        q = Queue(args.db)
        take = lambda: q.claim(args.name)  # noqa: E731
    if not at_starting_line(gate, args.name):
        return 1
    while take() is not None:
        pass
    (gate / f"locked-{args.name}").write_text(str(claimer.locked if claimer else 0))
    return 0


if __name__ == "__main__":
    raise SystemExit(_racer())
