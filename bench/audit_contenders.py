"""The audit's contenders: how each queue is filled, how its own worker starts, and what its state says is in flight.

Each is driven through its public API and its own worker or consumer, as its documentation
runs it; none is patched or subclassed. ``settings`` names what differs from its defaults.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a worker process: bench/ and this checkout importable first."""
    path = os.pathsep.join([str(HERE), str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    return dict(os.environ, PYTHONPATH=path, **extra)


@dataclass
class Contender:
    """One queue under audit, set up in ``folder``."""
    name: str
    settings: str
    folder: Path = field(default=Path("."))
    # How long the harness waits for a job to come back after a fault before it says "never":
    # the documented bound (the lease) plus ample slack for a loaded machine.
    comeback_wait: float = 30.0

    def version(self) -> str:
        raise NotImplementedError

    def setup(self, folder: Path) -> None:
        self.folder = folder

    def enqueue(self, key: str, fault: str | None, ledger: Path) -> None:
        raise NotImplementedError

    def worker(self, name: str) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def held(self) -> set[str]:
        """The keys the queue still shows in flight (claimed, unacknowledged)."""
        return set()

    def settled(self, log: Path, ledger_lines: list[dict], pid: int, key: str) -> bool:
        """True once the worker ``pid`` has handed its completion of ``key`` to the queue and the queue answered."""
        return any(line["job"] == key and line["pid"] == pid and line["what"] in ("accepted", "refused")
                   for line in ledger_lines)

    def queue_acceptances(self, pids: dict[str, int]) -> list[dict]:
        """Ledger lines for completions the queue's own record shows (for queues whose worker says so only there)."""
        return []

    def queue_check(self, vanished: list[str]) -> str | None:
        """What a checker of the queue's own history says (None: the queue keeps no history to check)."""
        return None


class Leaselab(Contender):
    def __init__(self, lease: float | None):
        settings = "defaults (lease 30 s)" if lease is None else f"lease {lease:g} s (short, to be reached)"
        super().__init__("leaselab (SQLite)", settings, comeback_wait=(30.0 if lease is None else lease) + 30.0)
        self.lease = lease

    def version(self) -> str:
        import leaselab
        return leaselab.__version__

    @property
    def db(self) -> Path:
        return self.folder / "leaselab.db"

    def enqueue(self, key, fault, ledger):
        from leaselab import Queue
        with Queue(self.db) as q:
            q.enqueue({"key": key, "fault": fault, "ledger": str(ledger)})

    def worker(self, name):
        cmd = [sys.executable, "-m", "leaselab", "worker", "--db", str(self.db), "--handler",
               "audit_handlers:leaselab_job", "--name", name, "--poll", "0.05", "--max-poll", "0.2"]
        if self.lease is not None:
            cmd += ["--lease", str(self.lease)]
        return cmd, child_env()

    def _rows(self, sql: str) -> list[tuple]:
        conn = sqlite3.connect(self.db)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def held(self):
        import json
        return {json.loads(p)["key"] for (p,) in self._rows("SELECT payload FROM jobs WHERE status = 'running'")}

    def settled(self, log, ledger_lines, pid, key):
        text = log.read_text() if log.exists() else ""
        return "completed job" in text or "lease lost on job" in text

    def queue_acceptances(self, pids):
        import json
        rows = self._rows("SELECT e.worker, e.at, j.payload FROM events e JOIN jobs j ON j.id = e.job_id "
                          "WHERE e.kind = 'completed' ORDER BY e.id")
        return [{"job": json.loads(payload)["key"], "pid": pids[worker], "what": "accepted", "t": at}
                for worker, at, payload in rows if worker in pids]


    def queue_check(self, vanished):
        from leaselab.check import check
        report = check(self.db, lease=30.0 if self.lease is None else self.lease, vanished=vanished)
        return "leaselab check: " + report.headline()


class Huey(Contender):
    def __init__(self):
        super().__init__("huey (SqliteHuey)", "defaults (no lease: a task is deleted when dequeued)",
                         comeback_wait=10.0)

    def version(self) -> str:
        import huey
        return huey.__version__

    def _env(self):
        return child_env(AUDIT_HUEY_DB=str(self.folder / "huey.db"))

    def enqueue(self, key, fault, ledger):
        import subprocess
        subprocess.run([sys.executable, "-c", f"import audit_huey_app as a; a.job({key!r}, {fault!r}, {str(ledger)!r})"],
                       check=True, env=self._env())

    def worker(self, name):
        return [sys.executable, "-m", "huey.bin.huey_consumer", "audit_huey_app.huey"], self._env()


class PersistQueue(Contender):
    def __init__(self):
        super().__init__("persist-queue (SQLiteAckQueue)",
                         "defaults (no visibility timeout; auto_resume: opening the queue puts unacked items back)",
                         comeback_wait=10.0)

    def version(self) -> str:
        from importlib.metadata import version
        return version("persist-queue")

    @property
    def path(self) -> Path:
        return self.folder / "persist"

    def enqueue(self, key, fault, ledger):
        from persistqueue import SQLiteAckQueue
        q = SQLiteAckQueue(str(self.path))
        q.put({"key": key, "fault": fault, "ledger": str(ledger)})

    def worker(self, name):
        ledger = self.folder / "ledger.jsonl"
        code = f"import audit_handlers; audit_handlers.persist_consumer({str(self.path)!r}, {str(ledger)!r})"
        return [sys.executable, "-c", code], child_env()

    def held(self):
        import glob
        import pickle
        found = set()
        for db in glob.glob(str(self.path / "*.db")) or [str(self.path / "data.db")]:
            if not os.path.exists(db):
                continue
            conn = sqlite3.connect(db)
            try:
                tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
                for table in tables:
                    cols = [c[1] for c in conn.execute(f'PRAGMA table_info("{table}")')]
                    if "status" in cols and "data" in cols:
                        # persist-queue's AckStatus.unack is '2'; the item is pickled by its default serializer.
                        for (data,) in conn.execute(f'SELECT data FROM "{table}" WHERE status IN (2, \'2\')'):
                            found.add(pickle.loads(data)["key"])
            finally:
                conn.close()
        return found


def quick() -> list[Contender]:
    """``--quick``: leaselab on SQLite with a lease short enough to be reached, huey and persist-queue."""
    return [Leaselab(lease=2.0), Huey(), PersistQueue()]


def full() -> list[Contender]:
    """The whole audit: each contender at its defaults, then with its lease short enough to be reached."""
    return [Leaselab(lease=None), Leaselab(lease=2.0), Huey(), PersistQueue()]
