"""Chaos: real workers under a seeded fault schedule, then the checker over what the queue kept.

Jepsen's method for leaselab's promises: ``schedule`` makes a replayable list of faults from a
seed, ``nemesis`` applies it to the lab's ``Fleet`` (SIGKILL, SIGSTOP past the lease, a cut
network, a dropped reply, a jumping clock, a crashed server), ``run`` does the whole run and
calls ``leaselab.check``; ``command`` is ``leaselab chaos``. The top layer: it may import the
core, the backends, the checker, the lab and the lessons.
"""

from __future__ import annotations

from .run import ChaosResult, Progress, run
from .schedule import FAULTS, Schedule, Step, applicable, parse_faults, plan

__all__ = ["FAULTS", "ChaosResult", "Progress", "Schedule", "Step", "applicable", "parse_faults", "plan", "run"]
