"""The ``failover`` fault: the primary of a replicated server chaos started is stopped at once, its standby promoted,
and a new standby made from the new primary on the dead one's port, so the fleet's multi-host URL fails over again.

A failover is struck only once the workers were told of more: it waits until their journals hold
``margin`` more acknowledged outcomes (completions, failures) than when it began, a bound on
events, not on time. With asynchronous replication the standby is held behind first (its WAL
sender frozen, ``Replicated.hold``), so those outcomes are acknowledged by a primary whose standby
never gets them: the failover loses them every time, not by luck. ``margin`` is more than the
outcomes the workers could have been told before the hold but journaled after it (a worker
journals only the jobs it holds, and it holds at most its slots and as many claimed ahead), so
at least ``WITNESSES`` of them are lost. With synchronous replication the same wait makes each
failover land on a busy fleet, and nothing acknowledged is lost.

One standby throughout: after each failover the dead primary's folder is removed and a new
standby is copied from the promoted one (``pg_basebackup``) onto the dead one's port, so the
URL never changes; with synchronous replication the new primary waits for it before the next
failover can come.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from ..harness.pgreplicas import Replicated
from ..worker.journal import KINDS, SUFFIX

REPLICATIONS = ("sync", "async")  # ``leaselab chaos --replication``: the first is the default
SYNCHRONOUS_LEVEL = "on"  # what ``sync`` sets: a standby has flushed each commit before it is acknowledged
WITNESSES = 3  # outcomes a held-back failover must lose at least
GATE_TIMEOUT = 60.0  # seconds a failover waits for the workers to be told of more, then is recorded as missed
OUTCOMES = KINDS[1:]


def replicated(replication: str, **options: Any) -> Replicated:
    """A primary and one standby for ``leaselab chaos --faults failover``, not started; ``replication`` is sync
    or async."""
    if replication not in REPLICATIONS:
        raise ValueError(f"replication must be one of {', '.join(REPLICATIONS)}, got {replication!r}")
    return Replicated(standbys=1, synchronous=SYNCHRONOUS_LEVEL if replication == "sync" else None, **options)


def acknowledged(folder: Path) -> int:
    """How many outcomes the journals in ``folder`` say the workers were told of (a half-written line not counted)."""
    n = 0
    for path in folder.glob(f"*{SUFFIX}"):
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        for line in text.splitlines(keepends=True):
            if line.endswith("\n") and json.loads(line)["kind"] in OUTCOMES:
                n += 1
    return n


class Failover:
    """Strikes failovers on ``servers`` (a started ``Replicated``), gated on the journals in ``journal``.

    ``slots`` is how many jobs the whole fleet runs at once (for ``margin``)."""

    def __init__(self, servers: Replicated, journal: Path, slots: int, *, gate_timeout: float = GATE_TIMEOUT):
        self.servers, self.journal, self.gate_timeout = servers, journal, gate_timeout
        self.margin = 2 * slots + WITNESSES
        self.held = servers.synchronous is None

    def strike(self, lock: threading.Lock) -> str | None:
        """One failover; None once done, else why it was not (the fleet was told of nothing more in time).

        ``lock`` is held from the stop to the promotion: whoever enqueues under it never sends a batch to a
        primary about to die."""
        standby = self.servers.standbys[0]
        if self.held:
            self.servers.hold(standby)
        goal = acknowledged(self.journal) + self.margin
        deadline = time.monotonic() + self.gate_timeout
        while acknowledged(self.journal) < goal:
            if time.monotonic() > deadline:
                if self.held:
                    self.servers.release(standby)
                return f"the workers were told of fewer than {self.margin} outcomes in {self.gate_timeout:g}s"
            time.sleep(0.05)
        with lock:
            self.servers.stop_primary()
            self.servers.promote(standby)
        self.servers.replace_primary()
        return None
