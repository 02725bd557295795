"""Side effects that survive at-least-once: an idempotency key, or the effect committed with the completion.

The effect in the lessons is a deposit into a ledger table in a SQLite file. A
plain deposit repeated by a second attempt counts the money twice. Keyed by the
job id, the repeat is ignored. ``Ledger.deposit_once`` keeps a key as Stripe's API documents its
own, remembered until it expires and refused (``KeyReused``) when it comes back with different
parameters; here it is stored with a hash of the request, in the same transaction as the deposit.
Written in the queue's own file, in the same transaction as the fenced completion, the effect
happens exactly when the job is done.
``deposit`` is a handler for worker processes; ``completing`` is the transaction.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..job import Job
from ..queue import Queue
from .errors import KeyReused

LEDGER_TABLE = """
CREATE TABLE IF NOT EXISTS ledger (
    id      INTEGER PRIMARY KEY,
    key     TEXT UNIQUE,              -- the idempotency key; NULL for an unkeyed deposit
    account TEXT    NOT NULL,
    amount  INTEGER NOT NULL,
    job_id  INTEGER,
    attempt INTEGER
)
"""

DEPOSIT = """
INSERT INTO ledger (key, account, amount, job_id, attempt)
VALUES (:key, :account, :amount, :job_id, :attempt)
"""

# The same insert, but a key seen before changes nothing: a repeat is harmless.
DEPOSIT_ONCE = DEPOSIT + "ON CONFLICT (key) DO NOTHING\n"

# The keys a receiver remembers: each with a hash of the request it came with, and until when.
KEYS_TABLE = """
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key        TEXT PRIMARY KEY,
    request    TEXT NOT NULL,             -- sha256 of the request the key first came with
    expires_at REAL NOT NULL
)
"""

# Take the key: a new key, or one whose time ran out, is (re)written; a live one changes nothing.
TAKE_KEY = """
INSERT INTO idempotency_keys (key, request, expires_at) VALUES (:key, :request, :expires_at)
ON CONFLICT (key) DO UPDATE SET request = excluded.request, expires_at = excluded.expires_at
WHERE idempotency_keys.expires_at <= :now
"""

KEPT_REQUEST = "SELECT request FROM idempotency_keys WHERE key = ?"

DEFAULT_KEY_TTL = 24 * 3600.0  # how long a key is remembered: a day (Stripe may prune a key once it is that old)


class Outcome(enum.Enum):
    """What ``Ledger.deposit_once`` did."""

    DEPOSITED = "deposited"  # the key was new (or had expired): the money moved
    REPEAT = "repeat"  # the same key with the same request, still remembered: nothing moved


def request_hash(account: str, amount: int) -> str:
    """The fingerprint a key is stored with: the same request gives the same hash, any change another."""
    canonical = json.dumps({"account": account, "amount": amount}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


BALANCE = "SELECT coalesce(sum(amount), 0) FROM ledger WHERE account = ?"

ENTRIES = "SELECT key, account, amount, job_id, attempt FROM ledger ORDER BY id"


def _connect(path: str | os.PathLike) -> sqlite3.Connection:
    conn = sqlite3.connect(os.fspath(path), timeout=30.0, isolation_level=None)
    conn.execute(LEDGER_TABLE)
    conn.execute(KEYS_TABLE)
    return conn


def record_deposit(
    conn: sqlite3.Connection, account: str, amount: int, job: Job | None = None, key: str | None = None
) -> bool:
    """Insert one deposit on ``conn`` (inside a caller's transaction, if any); True if a row was written."""
    cursor = conn.execute(
        DEPOSIT if key is None else DEPOSIT_ONCE,
        {
            "key": key,
            "account": account,
            "amount": amount,
            "job_id": None if job is None else job.id,
            "attempt": None if job is None else job.attempts,
        },
    )
    return cursor.rowcount == 1


class Ledger:
    """A table of deposits in a SQLite file: the outside world a handler changes.

    ``clock`` (wall-clock seconds) and ``key_ttl`` (seconds) decide when a key of ``deposit_once``
    is forgotten.
    """

    def __init__(
        self, path: str | os.PathLike, *, clock: Callable[[], float] = time.time, key_ttl: float = DEFAULT_KEY_TTL
    ):
        if not isinstance(key_ttl, int | float) or isinstance(key_ttl, bool) or not key_ttl > 0:
            raise ValueError(f"key_ttl must be a positive number of seconds, got {key_ttl!r}")
        self.path = os.fspath(path)
        self.clock, self.key_ttl = clock, float(key_ttl)
        self._conn = _connect(self.path)

    def deposit(self, account: str, amount: int, job: Job | None = None, key: str | None = None) -> bool:
        """Add a deposit; with a ``key`` seen before, add nothing. True if a row was written."""
        return record_deposit(self._conn, account, amount, job=job, key=key)

    def deposit_once(self, account: str, amount: int, key: str, job: Job | None = None) -> Outcome:
        """Deposit under an idempotency key, the key and the deposit in one transaction.

        A key not seen, or seen more than ``key_ttl`` seconds ago, is stored with the request's
        hash and the money moves (``DEPOSITED``); the same key with the same request within
        ``key_ttl`` moves nothing (``REPEAT``); with a different request it raises ``KeyReused``
        and nothing is written. A crash between the two writes leaves neither: no key without
        its deposit, so a retry is never taken for a repeat of a deposit that never happened.
        """
        request, now = request_hash(account, amount), self.clock()
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            taken = self._conn.execute(
                TAKE_KEY, {"key": key, "request": request, "expires_at": now + self.key_ttl, "now": now}
            ).rowcount
            if taken == 1:
                record_deposit(self._conn, account, amount, job=job)
                outcome = Outcome.DEPOSITED
            elif self._conn.execute(KEPT_REQUEST, (key,)).fetchone()[0] == request:
                outcome = Outcome.REPEAT
            else:
                raise KeyReused(
                    f"idempotency key {key!r} was used for a different request within {self.key_ttl:g}s: "
                    f"refused, not taken for a repeat"
                )
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")
        return outcome

    def balance(self, account: str) -> int:
        """The sum of the account's deposits."""
        return self._conn.execute(BALANCE, (account,)).fetchone()[0]

    def entries(self) -> list[dict[str, Any]]:
        """Every deposit, oldest first."""
        cols = ("key", "account", "amount", "job_id", "attempt")
        return [dict(zip(cols, row, strict=True)) for row in self._conn.execute(ENTRIES)]

    def effects(self) -> list[dict[str, Any]]:
        """The deposits made by jobs, as ``leaselab.check`` reads effects: ``check(db, effects=ledger.effects)``.

        Each deposit is one effect of its job, keyed by its idempotency key (None for an
        unkeyed one): two rows of one job with one key are the money counted twice.
        """
        return [
            {
                "job": e["job_id"],
                "attempt": e["attempt"],
                "key": e["key"],
                "detail": {"account": e["account"], "amount": e["amount"]},
            }
            for e in self.entries()
            if e["job_id"] is not None
        ]

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def deposit(job: Job) -> Any:
    """Handler: deposit ``amount`` into ``account`` of the ``ledger`` file, then maybe crash before completing.

    Payload: ``{"ledger": path, "account": "alice", "amount": 10, "keyed": false,
    "seconds": 0, "crash": 1}``. ``keyed`` uses ``job-<id>`` as the idempotency key;
    ``crash: N`` SIGKILLs the worker after the deposit on the first N attempts.
    """
    opts = job.payload
    key = f"job-{job.id}" if opts.get("keyed") else None
    with Ledger(opts["ledger"]) as ledger:
        written = ledger.deposit(opts.get("account", "alice"), int(opts.get("amount", 10)), job=job, key=key)
    time.sleep(float(opts.get("seconds", 0)))
    crash = opts.get("crash", False)
    if crash is True or (isinstance(crash, int) and not isinstance(crash, bool) and job.attempts <= crash):
        os.kill(os.getpid(), signal.SIGKILL)
    return {"deposited": written, "attempt": job.attempts}


@contextmanager
def completing(queue: Queue, job: Job, result: Any = None) -> Iterator[sqlite3.Connection]:
    """One transaction in the queue's file: your effect statements, then the fenced completion.

    The same as ``queue.completing(job, result)``: run effects on the yielded connection
    (``tx.execute(...)`` or ``record_deposit(tx, ...)``). If the token no longer holds
    the job, everything is rolled back and ``LeaseLost`` is raised; if the block raises
    (or the process dies), nothing is written and the job stays running. The block
    holds SQLite's one write lock for the whole file while it runs, so keep it short.
    """
    with queue.completing(job, result) as tx:
        tx.execute(LEDGER_TABLE)
        yield tx
