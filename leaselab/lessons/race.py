"""Two claims on a PostgreSQL server, interleaved by hand (lesson 6): the article's claim and leaselab's.

::

    race = ServerRace(url, NAIVE_CLAIM)   # two jobs are enqueued, A and B connect
    race.a_claims()        # A claims in a transaction it keeps open: the id it took
    race.b_claims()        # B runs the same statement meanwhile: True if it waits on A's row lock
    race.a_commits()
    race.b_result()        # the id B took once A committed
    race.close()

Both connections run in PostgreSQL's default isolation, READ COMMITTED. Needs psycopg
(``leaselab[postgres]``); it is imported only here, so a worker never loads it.
"""

from __future__ import annotations

import threading
import time

import psycopg

from ..backends.postgres import statements as sql
from ..clock import ManualClock
from ..queue import Queue

# The article's claim, exactly as on SQLite: the subquery picks, the outer UPDATE takes.
NAIVE_CLAIM = sql.CLAIM.replace("\n              FOR UPDATE SKIP LOCKED", "")
# The claim leaselab runs on PostgreSQL.
CLAIM = sql.CLAIM

WAITING_ON_A_LOCK = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"


def _params(worker: str, now: float = 1000.0) -> dict:
    return {"now": now, "lease_until": now + 30, "worker": worker, "token": f"token-{worker}"}


class ServerRace:
    """Connections A and B to a fresh queue of two jobs, each step of their claims run when you call it."""

    def __init__(self, url: str, statement: str, timeout: float = 10.0):
        self.url, self.statement, self.timeout = url, statement, timeout
        with Queue(url, clock=ManualClock(0)) as q:
            if sum(q.stats().values()):
                raise ValueError("ServerRace needs an empty database: it enqueues its own two jobs")
            q.enqueue_many(["first", "second"])
        self.a = psycopg.connect(url)  # not autocommit: each claim opens a transaction that stays open
        self.b = psycopg.connect(url)
        self.admin = psycopg.connect(url, autocommit=True)
        self._b_row: dict = {}
        self._b_thread: threading.Thread | None = None

    def isolation(self) -> str:
        """The isolation level A's transactions run at (PostgreSQL's default: read committed)."""
        level = self.a.execute("SHOW transaction_isolation").fetchone()[0]
        self.a.rollback()
        return level

    def a_claims(self) -> int | None:
        """A runs the claim and keeps its transaction open; returns the id it took."""
        row = self.a.execute(self.statement, _params("A")).fetchone()
        return row[0] if row else None

    def b_claims(self) -> bool:
        """B runs the same claim on its own thread; True once B waits on a row lock, False if it finished."""
        def run() -> None:
            try:
                self._b_row["row"] = self.b.execute(self.statement, _params("B")).fetchone()
            except Exception as exc:  # handed to the caller by b_result
                self._b_row["error"] = exc

        self._b_thread = threading.Thread(target=run, daemon=True)
        self._b_thread.start()
        pid = self.b.info.backend_pid
        deadline = time.monotonic() + self.timeout
        while self._b_thread.is_alive() and time.monotonic() < deadline:
            if self.admin.execute(WAITING_ON_A_LOCK, (pid,)).fetchone()[0]:
                return True
            time.sleep(0.01)
        return False

    def a_commits(self) -> None:
        """A commits its claim, which releases its row lock."""
        self.a.commit()

    def b_result(self) -> int | None:
        """Wait for B's claim to return, commit it, and give the id B took."""
        self._b_thread.join(self.timeout)
        if self._b_thread.is_alive():
            raise TimeoutError(f"B's claim did not return within {self.timeout:g}s")
        if "error" in self._b_row:
            self.b.rollback()
            raise self._b_row["error"]
        self.b.commit()
        row = self._b_row.get("row")
        return row[0] if row else None

    def claims(self) -> list[tuple[int, str]]:
        """Every claim the queue's history recorded, as (job id, worker), in order."""
        with Queue(self.url, clock=ManualClock(0)) as q:
            return [(e.job_id, e.worker) for e in q.events() if e.kind == "claimed"]

    def close(self) -> None:
        for conn in (self.a, self.b, self.admin):
            conn.close()
