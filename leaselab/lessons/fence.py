"""Fencing an outside system: a store that refuses writes from an older attempt.

The queue's token fences writes *to the queue*. A zombie's write to anything else
(a file, a bucket, another database) happens before it ever talks to the queue, so
that system must check a fence itself. ``job.fence`` is ``(job id, attempts)`` and
only rises: every claim adds one to ``attempts``. ``FencedStore`` keeps, per key,
the highest fence it has accepted and refuses anything lower, in one statement.

A fence orders the attempts of *one* job. The store compares ``(job id, attempts)``
as a pair, so across jobs the higher job id wins whatever the attempts or the time:
a write of job 8 replaces any write of job 7, and job 7 can never write that key
again. That is right when a later job should supersede an earlier one on the same
key (jobs enqueued in order); when two unrelated jobs share a key, give each job its
own key, or order them by something both agree on, such as a version.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

STORE_TABLE = """
CREATE TABLE IF NOT EXISTS fenced (
    key           TEXT PRIMARY KEY,
    fence_job     INTEGER NOT NULL,
    fence_attempt INTEGER NOT NULL,
    value         TEXT NOT NULL
)
"""

# Accept a write only when its fence is at least the one stored: an older attempt changes nothing.
FENCED_WRITE = """
INSERT INTO fenced (key, fence_job, fence_attempt, value) VALUES (:key, :job, :attempt, :value)
ON CONFLICT (key) DO UPDATE SET fence_job = excluded.fence_job, fence_attempt = excluded.fence_attempt,
                                value = excluded.value
 WHERE (fenced.fence_job, fenced.fence_attempt) <= (excluded.fence_job, excluded.fence_attempt)
"""

# What an outside system without fencing does: the last writer wins, however stale.
PLAIN_WRITE = """
INSERT INTO fenced (key, fence_job, fence_attempt, value) VALUES (:key, :job, :attempt, :value)
ON CONFLICT (key) DO UPDATE SET fence_job = excluded.fence_job, fence_attempt = excluded.fence_attempt,
                                value = excluded.value
"""

READ = "SELECT value, fence_job, fence_attempt FROM fenced WHERE key = ?"


class FencedStore:
    """A key-value store in a SQLite file that remembers the fence of each key's last accepted write."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        self._conn.execute(STORE_TABLE)

    def write(self, key: str, value: Any, fence: tuple[int, int], check: bool = True) -> bool:
        """Store ``value`` under ``key`` unless a newer fence already wrote it; True if accepted.

        ``check=False`` skips the comparison: the unfenced write, for showing what goes wrong.
        """
        job, attempt = fence
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (job, attempt)):
            raise TypeError(f"fence must be (job id, attempts) as two ints, got {fence!r}")
        cursor = self._conn.execute(FENCED_WRITE if check else PLAIN_WRITE, {
            "key": key, "job": job, "attempt": attempt, "value": json.dumps(value, ensure_ascii=False),
        })
        return cursor.rowcount == 1

    def read(self, key: str) -> tuple[Any, tuple[int, int]] | None:
        """``(value, fence)`` of the last accepted write to ``key``, or None."""
        row = self._conn.execute(READ, (key,)).fetchone()
        return None if row is None else (json.loads(row[0]), (row[1], row[2]))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "FencedStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
