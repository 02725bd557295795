"""A worker's journal: what the queue told it, one JSON line each, for ``leaselab check --journal``.

A server that fails over to a standby which lacked its last commits forgets claims and
completions it had acknowledged; its own history then shows nothing wrong, because the only
witness of what was lost is the client that was told. So each worker (``Worker(journal=DIR)``,
``leaselab worker --journal DIR``) writes, to ``DIR/NAME-PID.jsonl``, one line per

- claim: ``{"kind": "claimed", "job": 3, "attempt": 1, "token": "…", "worker": "w1", "at": …}``;
- acknowledged outcome: ``"kind": "completed"`` or ``"failed"`` (with ``"status"``, what the
  queue said the job became), written only once the queue acknowledged it.

Durability: lines are buffered and flushed to the operating system after each batch of claims
and each acknowledged outcome, with no fsync. A worker that is killed loses nothing it was told
(the kernel holds what was flushed); a machine that loses power may lose the last lines, which
can only hide an anomaly from the checker, never invent one. Standard library only.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

SUFFIX = ".jsonl"
KINDS = ("claimed", "completed", "failed")


class Journal:
    """One worker's journal file in ``folder`` (made if missing), appended to as the worker is told things."""

    def __init__(self, folder: str | os.PathLike, worker: str):
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in worker)[:80]
        self.path = path / f"{safe}-{os.getpid()}{SUFFIX}"
        self.worker = worker
        self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 16)  # closed by close()
        self._lock = threading.Lock()

    def claimed(self, jobs: list[tuple[int, int, str]]) -> None:
        """The claims just acknowledged: (job id, attempt, token) each."""
        with self._lock:
            for job, attempt, token in jobs:
                self._line({"kind": "claimed", "job": job, "attempt": attempt, "token": token})
            self._file.flush()

    def outcome(self, kind: str, job: int, attempt: int, token: str, status: str | None = None) -> None:
        """An outcome the queue acknowledged: ``completed``, or ``failed`` with the job's new ``status``."""
        if kind not in KINDS[1:]:
            raise ValueError(f"kind must be completed or failed, got {kind!r}")
        entry: dict[str, Any] = {"kind": kind, "job": job, "attempt": attempt, "token": token}
        if status is not None:
            entry["status"] = status
        with self._lock:
            self._line(entry)
            self._file.flush()

    def _line(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps({**entry, "worker": self.worker, "at": time.time()}) + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()
