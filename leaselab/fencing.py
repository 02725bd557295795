"""Fencing an outside system: a store that refuses writes from an older attempt.

The queue's token fences writes *to the queue*. A zombie's write to anything else
(a file, a bucket, another database) happens before it ever talks to the queue, so
that system must check a fence itself. ``job.fence`` is ``(job id, attempts)`` and
only rises: every claim adds one to ``attempts``. ``FencedStore`` keeps, per key,
the highest fence it has accepted and the token of the claim that wrote it, and
accepts a write only when its fence is strictly newer, or equal and from that same
claim (its token) writing again; in one statement.

Why not an equal fence from anyone: a fence is only as good as its durability. If a
server crash loses a claim, the next claim gets the same ``attempts`` again, so two
claims (the zombie and the new holder) carry one fence. Their tokens still differ, so
the store keeps whichever wrote first and refuses the other, instead of letting the
later writer replace it. Which one is right the store cannot know: only a queue whose
claims reach the disk before the worker acts (``durability="full"``) never hands a
fence out twice. A write with no token and an equal fence is refused too.

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
    value         TEXT NOT NULL,
    token         TEXT
)
"""

# A store made before tokens were kept: its rows get none, so an equal fence cannot write over them.
ADD_TOKEN = "ALTER TABLE fenced ADD COLUMN token TEXT"

# Accept a write only when its fence is newer than the one stored, or the same claim writes again.
FENCED_WRITE = """
INSERT INTO fenced (key, fence_job, fence_attempt, token, value) VALUES (:key, :job, :attempt, :token, :value)
ON CONFLICT (key) DO UPDATE SET fence_job = excluded.fence_job, fence_attempt = excluded.fence_attempt,
                                token = excluded.token, value = excluded.value
 WHERE (fenced.fence_job, fenced.fence_attempt) < (excluded.fence_job, excluded.fence_attempt)
    OR ((fenced.fence_job, fenced.fence_attempt) = (excluded.fence_job, excluded.fence_attempt)
        AND fenced.token = excluded.token)
"""

# What an outside system without fencing does: the last writer wins, however stale.
PLAIN_WRITE = """
INSERT INTO fenced (key, fence_job, fence_attempt, token, value) VALUES (:key, :job, :attempt, :token, :value)
ON CONFLICT (key) DO UPDATE SET fence_job = excluded.fence_job, fence_attempt = excluded.fence_attempt,
                                token = excluded.token, value = excluded.value
"""

READ = "SELECT value, fence_job, fence_attempt FROM fenced WHERE key = ?"


class FencedStore:
    """A key-value store in a SQLite file that remembers the fence and token of each key's last accepted write."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        # Under the write lock: two workers opening an old store at once must not both add the column.
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._conn.execute(STORE_TABLE)
            columns = {row[1] for row in self._conn.execute("PRAGMA table_info(fenced)")}
            if "token" not in columns:
                self._conn.execute(ADD_TOKEN)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            self._conn.close()
            raise

    def write(
        self, key: str, value: Any, fence: tuple[int, int], check: bool = True, *, token: str | None = None
    ) -> bool:
        """Store ``value`` under ``key`` unless the stored fence forbids it; True if accepted.

        Accepted when ``fence`` is newer than the stored one, or equal to it with the same
        ``token`` (the claim's ``job.token``: one claim writing again). An equal fence from
        another token, or with none, is refused: it may be a second claim given the same
        fence after a crash. ``check=False`` skips the comparison: the unfenced write, for
        showing what goes wrong.
        """
        job, attempt = fence
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (job, attempt)):
            raise TypeError(f"fence must be (job id, attempts) as two ints, got {fence!r}")
        if token is not None and not isinstance(token, str):
            raise TypeError(f"token must be the claim's token (a str) or None, got {token!r}")
        cursor = self._conn.execute(
            FENCED_WRITE if check else PLAIN_WRITE,
            {
                "key": key,
                "job": job,
                "attempt": attempt,
                "token": token,
                "value": json.dumps(value, ensure_ascii=False),
            },
        )
        return cursor.rowcount == 1

    def read(self, key: str) -> tuple[Any, tuple[int, int]] | None:
        """``(value, fence)`` of the last accepted write to ``key``, or None."""
        row = self._conn.execute(READ, (key,)).fetchone()
        return None if row is None else (json.loads(row[0]), (row[1], row[2]))

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> FencedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
