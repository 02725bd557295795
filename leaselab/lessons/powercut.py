"""A power cut, for real: a disk that forgets whatever SQLite never asked it to sync.

``VolatileDisk`` is an APSW virtual file system over the real files. Every write goes
through to the file as usual (that is the operating system's cache: every process can
read it, and it survives the writer's ``SIGKILL``), and every sync records what the
file held at that moment: what the disk itself would have. ``cut()`` is the power
going off: later writes are dropped, and every file goes back to its content at its
last sync (a file never synced is gone), as after the reboot. This is the worst case
the operating system allows; a real cut may keep some unsynced writes, never fewer
synced ones.

``Session`` runs leaselab's own statements on such a disk with the ``Queue``'s
durability rule (README, "Durability"): an enqueue, a claim and a completion are
synced before they return at ``durability="full"`` (a claim, because its fence is what
outside stores trust); heartbeats, failures and reaps never ask for a sync of their own. Make the file with ``Queue``
first: it is an ordinary leaselab file before and after, read back with ``Queue``.
APSW is needed here (the ``lab`` and ``test`` extras); nothing else imports this module.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

import apsw

from ..backends.sqlite import statements as sql
from ..backoff import Backoff
from ..clock import Clock, system_clock
from ..job import Job
from ..queue import DEFAULT_LEASE, DURABILITIES


class _File(apsw.VFSFile):
    """One open file of the disk: writes go through unless the power is off; a sync is remembered."""

    def __init__(self, disk: "VolatileDisk", name: Any, flags: list[int]):
        self.disk = disk
        self.path = name.filename() if isinstance(name, apsw.URIFilename) else name
        disk.seen(self.path)
        super().__init__("", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        if self.disk.powered:
            super().xWrite(data, offset)

    def xTruncate(self, size: int) -> None:
        if self.disk.powered:
            super().xTruncate(size)

    def xSync(self, flags: int) -> None:
        if self.disk.powered:
            super().xSync(flags)
            self.disk.synced(self.path)


class VolatileDisk(apsw.VFS):
    """A file system whose files keep, through a ``cut()``, only what was synced."""

    _count = 0

    def __init__(self) -> None:
        VolatileDisk._count += 1
        self.name = f"leaselab-volatile-{os.getpid()}-{VolatileDisk._count}"
        self.powered = True
        self.syncs = 0
        self._durable: dict[str, bytes | None] = {}
        self._sessions: list["Session"] = []
        super().__init__(self.name, "")

    def xOpen(self, name: Any, flags: list[int]) -> _File:
        return _File(self, name, flags)

    def xDelete(self, filename: str, syncdir: bool) -> None:
        if self.powered:
            super().xDelete(filename, syncdir)
            self._durable[filename] = None

    def seen(self, path: str | None) -> None:
        """The first time a file is opened, what it holds is on the disk already (it was there at boot)."""
        if path is not None and path not in self._durable:
            self._durable[path] = _read(path)

    def synced(self, path: str | None) -> None:
        """A sync made the file's whole current content durable."""
        if path is not None:
            self.syncs += 1
            self._durable[path] = _read(path)

    def cut(self) -> None:
        """The power goes: drop every later write, close every session, and put back what was synced."""
        self.powered = False
        for session in self._sessions:
            session.connection.close()  # its last checkpoint writes nothing now
        for path, content in self._durable.items():
            if content is None:
                if os.path.exists(path):
                    os.remove(path)
            else:
                with open(path, "wb") as fh:
                    fh.write(content)
        for path in list(self._durable):
            if os.path.exists(path + "-shm"):  # shared memory does not survive a reboot
                os.remove(path + "-shm")
        self.unregister()


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


class Session:
    """leaselab's own statements on a file of a ``VolatileDisk``, each in its own transaction as ``Queue`` runs them."""

    def __init__(self, path: str | os.PathLike, disk: VolatileDisk, durability: str = "full",
                 clock: Clock | None = None):
        if durability not in DURABILITIES:
            raise ValueError(f"durability must be 'full' or 'normal', got {durability!r}")
        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"make the queue file with Queue first; there is none at {path}")
        self.durability = durability
        self.clock = clock or system_clock
        self.connection = apsw.Connection(path, vfs=disk.name)
        self.connection.execute("PRAGMA synchronous = NORMAL")
        self.connection.create_scalar_function("leaselab_backoff", Backoff().delay, 1)
        disk._sessions.append(self)

    def _run(self, statement: str, params: dict[str, Any], acknowledged: bool) -> list[tuple]:
        durable = acknowledged and self.durability == "full"
        self.connection.execute("PRAGMA synchronous = FULL" if durable else "PRAGMA synchronous = NORMAL")
        return list(self.connection.execute(statement, params))

    def enqueue(self, payload: Any) -> int:
        """Add a job (an acknowledged write) and return its id."""
        now = self.clock()
        rows = self._run(sql.ENQUEUE, {"payload": json.dumps(payload), "priority": 0, "run_at": now,
                                       "max_attempts": 5, "now": now}, acknowledged=True)
        return rows[0][0]

    def claim(self, worker: str, lease: float = DEFAULT_LEASE) -> Job | None:
        """Claim the next job with leaselab's single statement (synced at "full": its fence must not come back)."""
        now = self.clock()
        rows = self._run(sql.CLAIM, {"now": now, "lease_until": now + lease, "worker": worker,
                                     "token": secrets.token_hex(16)}, acknowledged=True)
        return Job.from_row(rows[0]) if rows else None

    def complete(self, job: Job, result: Any = None) -> None:
        """Complete a claimed job with the fenced statement (an acknowledged write)."""
        self._run(sql.COMPLETE, {"id": job.id, "token": job.token, "result": json.dumps(result),
                                 "now": self.clock()}, acknowledged=True)


# The same work through the real Queue in a process of its own, which then SIGKILLs itself.
_KILLED = """
import os, signal, sys
from leaselab import Queue
q = Queue(sys.argv[1], durability=sys.argv[2])
for n in range(3):
    q.enqueue({"n": n})
first = q.claim("w1")
q.complete(first.id, first.token, {"ok": 1})
q.claim("w1")
os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_after_workload(path: str | os.PathLike, durability: str = "normal") -> int:
    """Run ``workload``'s steps with ``Queue`` in a new process that then kills itself with SIGKILL; its return code."""
    import subprocess
    import sys

    if durability not in DURABILITIES:
        raise ValueError(f"durability must be 'full' or 'normal', got {durability!r}")
    done = subprocess.run([sys.executable, "-c", _KILLED, os.fspath(path), durability],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    return done.returncode


def workload(session: Session) -> None:
    """What every power-cut demonstration does: three enqueues, a claim and its completion, one more claim."""
    for n in range(3):
        session.enqueue({"n": n})
    first = session.claim("w1")
    session.complete(first, {"ok": 1})
    session.claim("w1")
