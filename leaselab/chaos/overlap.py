"""Which faults of a run hit a running attempt: a clean verdict proves something only about those.

A run whose faults all came while no job was running (every job done before the first one, say)
kept every promise without being tested: this module says so. An attempt runs from its
``claimed`` event until the first event that ended it (``completed``, ``failed``, ``reaped``,
``dead``, or another claim of its job), or to the end of the history if nothing did; at that
instant it no longer runs. A fault lasts from when it was applied until it ended
(``Applied.until``; a kill or a dropped reply is an instant). A fault on a worker's slot hits
the attempts of the process it hit; a server crash hits every attempt running. It hits an
attempt when some instant of the fault lies within the attempt's run: a fault at the very
instant of a claim hits it, one at the very instant the attempt ended does not.

The events' times are the queue's clock, a fault's are seconds after the nemesis began: ``origin``
is the queue's clock at that moment. The match is as good as the times a worker writes: on a
file queue a worker whose clock a ``clock`` fault jumped writes on the jumped clock, and on a
server a worker writes the server's time as it last read it, carried forward.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .nemesis import Applied

ENDS = ("completed", "failed", "reaped", "dead")  # after one of these, the attempt it ends runs no more


@dataclass(frozen=True)
class Attempt:
    """One attempt as the queue saw it: claimed by ``worker`` at ``start``, running until ``end`` (excluded)."""

    job: int
    attempt: int
    worker: str | None
    start: float
    end: float  # math.inf: the history ends with it still running


def attempts(events: Iterable[dict]) -> list[Attempt]:
    """Every attempt in ``events`` (rows of the events table, as ``leaselab.check.load`` reads them)."""
    found = []
    open_claims: dict[int, dict] = {}  # job id -> the claim of its attempt running now
    for e in sorted(events, key=lambda e: e["id"]):
        claim = open_claims.get(e["job_id"])
        if claim is not None and (e["kind"] in ENDS or e["kind"] == "claimed"):
            found.append(Attempt(e["job_id"], claim["attempt"], claim.get("worker"), claim["at"], e["at"]))
            del open_claims[e["job_id"]]
        if e["kind"] == "claimed":
            open_claims[e["job_id"]] = e
    found += [
        Attempt(job_id, claim["attempt"], claim.get("worker"), claim["at"], math.inf)
        for job_id, claim in open_claims.items()
    ]
    return found


def hit(fault: Applied, origin: float, running: Sequence[Attempt]) -> list[Attempt]:
    """The attempts of ``running`` that ``fault`` hit; ``origin`` is the queue's clock when the nemesis began."""
    if fault.missed is not None:
        return []
    start = origin + fault.at
    end = origin + (fault.until if fault.until is not None else fault.at + fault.step.lasts)
    server_wide = fault.step.worker is None
    return [a for a in running if (server_wide or a.worker == fault.process) and a.start <= end and start < a.end]
