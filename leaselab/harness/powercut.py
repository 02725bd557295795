"""A power cut, for real: a disk that forgets whatever SQLite never asked it to sync.

``VolatileDisk`` is an APSW virtual file system over the real files. Every write goes
through to the file as usual (that is the operating system's cache: every process can
read it, and it survives the writer's ``SIGKILL``), and every sync records what the
file held at that moment: what the disk itself would have. ``cut()`` is the power
going off: later writes are dropped, and every file goes back to its content at its
last sync (a file never synced is gone), as after the reboot. This is the worst case
the operating system allows; a real cut may keep some unsynced writes, never fewer
synced ones.

``disk.target(path)`` names a file on the disk, and a ``Queue`` opened on it is leaselab's own
queue, statements, transactions and durability rule (README, "Durability") on the APSW backend:
at ``durability="full"`` an enqueue, a claim and a completion are synced before they return (a
claim, because its fence is what outside stores trust); heartbeats, failures and reaps never ask
for a sync of their own. ``Session`` is that ``Queue`` for a file made with ``Queue`` first: an
ordinary leaselab file before and after, read back with ``Queue``. APSW is needed here (the
``lab`` and ``test`` extras); nothing else imports this module.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

import apsw

from ..clock import Clock
from ..errors import DatabaseMissing
from ..queue import DURABILITIES, Queue


class _File(apsw.VFSFile):
    """One open file of the disk: writes go through unless the power is off; a sync is remembered."""

    def __init__(self, disk: VolatileDisk, name: Any, flags: list[int]):
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
    """A file system whose files keep, through a ``cut()``, only what was synced.

    ``target(path)`` names a file on it for ``Queue``: ``Queue(disk.target(path))`` is leaselab's own
    queue (the APSW backend) writing through this disk. Cut every disk made: until then it holds
    every connection opened on it, and stays registered with SQLite.
    """

    _count = 0

    def __init__(self) -> None:
        VolatileDisk._count += 1
        self.name = f"leaselab-volatile-{os.getpid()}-{VolatileDisk._count}"
        self.powered = True
        self.syncs = 0
        self._durable: dict[str, bytes | None] = {}
        # Every connection opened on this disk, held until the cut: one closed before it (a queue
        # dropped by its caller) would checkpoint, and a checkpoint syncs, which a process that
        # the power took never gets to do.
        self._connections: list[apsw.Connection] = []
        super().__init__(self.name, "")
        apsw.connection_hooks.append(self._opened)

    def target(self, path: str | os.PathLike) -> str:
        """The SQLite URI of ``path`` on this disk, for ``Queue``: ``file:/abs/path?vfs=<this disk>``."""
        return f"file:{quote(os.path.abspath(path))}?vfs={self.name}"

    def _opened(self, connection: apsw.Connection) -> None:
        if connection.open_vfs == self.name:
            self._connections.append(connection)

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
        """The power goes: drop every later write, close every queue opened on the disk, and put back what was
        synced."""
        self.powered = False
        apsw.connection_hooks.remove(self._opened)
        for connection in self._connections:
            connection.close()  # its last checkpoint writes nothing now; its Queue is of no more use
        self._connections.clear()
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


class Session(Queue):
    """A ``Queue`` on a file of a ``VolatileDisk``: leaselab's own statements, transactions and
    durability rule, through the APSW backend. The file must exist (made with ``Queue``)."""

    def __init__(
        self, path: str | os.PathLike, disk: VolatileDisk, durability: str = "full", clock: Clock | None = None
    ):
        try:
            super().__init__(disk.target(path), clock, durability, create=False)
        except DatabaseMissing:
            raise FileNotFoundError(
                f"make the queue file with Queue first; there is none at {os.fspath(path)}"
            ) from None


# The same work through the real Queue in a process of its own, which then SIGKILLs itself.
_KILLED = """
import os, signal, sys
from leaselab import Queue
from leaselab.harness.powercut import workload
workload(Queue(sys.argv[1], durability=sys.argv[2]))
os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_after_workload(path: str | os.PathLike, durability: str = "normal") -> int:
    """Run ``workload``'s steps with ``Queue`` in a new process that then kills itself with SIGKILL; its return code."""
    import subprocess
    import sys

    if durability not in DURABILITIES:
        raise ValueError(f"durability must be 'full' or 'normal', got {durability!r}")
    done = subprocess.run(
        [sys.executable, "-c", _KILLED, os.fspath(path), durability],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    return done.returncode


def workload(queue: Queue) -> None:
    """What every power-cut demonstration does: three enqueues, a claim and its completion, one more claim."""
    for n in range(3):
        queue.enqueue({"n": n})
    first = queue.claim("w1")
    assert first is not None and first.token is not None  # three jobs were just enqueued
    queue.complete(first.id, first.token, {"ok": 1})
    queue.claim("w1")
