"""Claims racing on a PostgreSQL server (lesson 6): the claim of lesson 2 and leaselab's, by hand and by processes.

::

    race = ServerRace(url, NAIVE_CLAIM)   # two jobs are enqueued, A and B connect
    race.a_claims()        # A claims in a transaction it keeps open: the id it took
    race.b_claims()        # B runs the same statement meanwhile: True if it waits on A's row lock
    race.a_commits()
    race.b_result()        # the id B took once A committed
    race.close()

``server_race(url, "naive")`` races worker processes instead, each claiming in autocommit
(one statement, one transaction) until the queue is empty, and counts from the history how
many claims went to a job someone had already claimed, as ``wrong.race`` does on a file.

Every connection runs in PostgreSQL's default isolation, READ COMMITTED. Needs psycopg
(``leaselab[postgres]``); it is imported only here, so a worker never loads it.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg

from ..backends.postgres import statements as sql
from ..clock import ManualClock
from ..job import DEFAULT_QUEUE
from ..queue import Queue
from .wrong import RaceResult, at_starting_line, run_racers

# The article's claim, exactly as on SQLite: the subquery picks, the outer UPDATE takes.
NAIVE_CLAIM = sql.CLAIM.replace("\n              FOR UPDATE SKIP LOCKED", "")
# The claim leaselab runs on PostgreSQL.
CLAIM = sql.CLAIM
STATEMENTS = {"naive": NAIVE_CLAIM, "single": CLAIM}  # what server_race's processes run, by name

COUNT_CLAIMS = "SELECT count(*), count(DISTINCT job_id) FROM events WHERE kind = 'claimed'"

WAITING_ON_A_LOCK = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"


def _params(worker: str, now: float = 1000.0) -> dict:
    return {"now": now, "lease_until": now + 30, "worker": worker, "token": f"token-{worker}", "queue": DEFAULT_QUEUE}


class ServerRace:
    """Connections A and B to a fresh queue of two jobs, each step of their claims run when you call it."""

    def __init__(self, url: str, statement: str, timeout: float = 10.0, jobs: int = 2, n: int | None = None):
        self.url, self.statement, self.timeout = url, statement, timeout
        self.n = n  # a batch claim's %(n)s: then each claim returns the sorted ids of every row it took
        with Queue(url, clock=ManualClock(0)) as q:
            if sum(q.stats().values()):
                raise ValueError("ServerRace needs an empty database: it enqueues its own jobs")
            q.enqueue_many([f"job {i + 1}" for i in range(jobs)])
        self.a = psycopg.connect(url)  # not autocommit: each claim opens a transaction that stays open
        self.b = psycopg.connect(url)
        self.admin = psycopg.connect(url, autocommit=True)
        self._b_row: dict = {}
        self._b_thread: threading.Thread | None = None

    def isolation(self) -> str:
        """The isolation level A's transactions run at (PostgreSQL's default: read committed)."""
        level = self.a.execute("SHOW transaction_isolation").fetchone()[0]  # type: ignore[index]  # one row
        self.a.rollback()
        return level

    def a_claims(self):
        """A runs the claim and keeps its transaction open; returns the id it took (a batch: the sorted ids)."""
        return self._taken(self.a.execute(self.statement, self._params("A")))

    def _params(self, worker: str) -> dict:
        return _params(worker) if self.n is None else {**_params(worker), "n": self.n}

    def _taken(self, cursor):
        if self.n is not None:
            return sorted(row[0] for row in cursor.fetchall())
        row = cursor.fetchone()
        return row[0] if row else None

    def b_claims(self) -> bool:
        """B runs the same claim on its own thread; True once B waits on a row lock, False if it finished."""

        def run() -> None:
            try:
                self._b_row["row"] = self._taken(self.b.execute(self.statement, self._params("B")))
            except Exception as exc:  # handed to the caller by b_result
                self._b_row["error"] = exc

        self._b_thread = threading.Thread(target=run, daemon=True)
        self._b_thread.start()
        pid = self.b.info.backend_pid
        deadline = time.monotonic() + self.timeout
        while self._b_thread.is_alive() and time.monotonic() < deadline:
            if self.admin.execute(WAITING_ON_A_LOCK, (pid,)).fetchone()[0]:  # type: ignore[index]  # a count
                return True
            time.sleep(0.01)
        return False

    def a_commits(self) -> None:
        """A commits its claim, which releases its row lock."""
        self.a.commit()

    def b_result(self):
        """Wait for B's claim to return, commit it, and give the id B took (a batch: the sorted ids)."""
        self._b_thread.join(self.timeout)
        if self._b_thread.is_alive():
            raise TimeoutError(f"B's claim did not return within {self.timeout:g}s")
        if "error" in self._b_row:
            self.b.rollback()
            raise self._b_row["error"]
        self.b.commit()
        return self._b_row.get("row")

    def claims(self) -> list[tuple[int, str | None]]:
        """Every claim the queue's history recorded, as (job id, worker), in order."""
        with Queue(self.url, clock=ManualClock(0)) as q:
            return [(e.job_id, e.worker) for e in q.events() if e.kind == "claimed"]

    def close(self) -> None:
        for conn in (self.a, self.b, self.admin):
            conn.close()


def server_race(url: str, claim: str = "naive", workers: int = 4, jobs: int = 200, timeout: float = 120.0):
    """Enqueue ``jobs`` jobs in the empty database at ``url`` and let ``workers`` processes claim them all at once.

    Each process waits at a starting line until all are ready, then runs ``claim``
    (``"naive"``: the claim of lesson 2; ``"single"``: leaselab's, with ``FOR UPDATE SKIP
    LOCKED``) in autocommit, each claim its own transaction, until it claims nothing. The
    result is a ``wrong.RaceResult``: claims made, and duplicates, claims of a job that had
    been claimed already. No process outlives the call.
    """
    if claim not in STATEMENTS:
        raise ValueError(f"claim must be 'naive' or 'single', got {claim!r}")
    with Queue(url, clock=ManualClock(0)) as q:
        if sum(q.stats().values()):
            raise ValueError("server_race needs an empty database: it enqueues its own jobs")
        q.enqueue_many(range(jobs))
    import tempfile

    gate = Path(tempfile.mkdtemp(prefix="leaselab-race-"))
    try:
        run_racers(
            [
                [
                    sys.executable,
                    "-m",
                    "leaselab.lessons.race",
                    "--url",
                    url,
                    "--claim",
                    claim,
                    "--name",
                    f"racer-{i + 1}",
                    "--gate",
                    str(gate),
                ]
                for i in range(workers)
            ],
            gate,
            timeout,
        )
    finally:
        for f in gate.iterdir():
            f.unlink()
        gate.rmdir()
    with psycopg.connect(url) as conn:
        total, distinct = conn.execute(COUNT_CLAIMS).fetchone()  # type: ignore[misc]  # counts: one row
    return RaceResult(claim=claim, workers=workers, jobs=jobs, claims=total, duplicates=total - distinct)


def _racer(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leaselab.lessons.race", description="one racer of server_race")
    parser.add_argument("--url", required=True)
    parser.add_argument("--claim", choices=list(STATEMENTS), required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--gate", required=True)
    args = parser.parse_args(argv)
    gate = Path(args.gate)
    statement = STATEMENTS[args.claim]
    with psycopg.connect(args.url, autocommit=True) as conn:  # each claim is its own transaction
        conn.execute("SELECT 1")  # connected before the start, so no racer is late by a connection's setup
        if not at_starting_line(gate, args.name):
            return 1
        while True:
            now = time.time()
            row = conn.execute(
                statement,
                {
                    "now": now,
                    "lease_until": now + 30,
                    "worker": args.name,
                    "token": secrets.token_hex(16),
                    "queue": DEFAULT_QUEUE,
                },
            ).fetchone()
            if row is None:
                return 0


if __name__ == "__main__":
    raise SystemExit(_racer())
