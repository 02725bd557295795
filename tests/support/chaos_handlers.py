"""Handlers for the chaos command's tests: a transfer, an outside effect, that freezes on its first attempt.

The fault that makes the transfer repeat is put into the handler, so no machine's speed can
change the verdict: the first attempt of job ``freeze_job`` records its effect, then freezes
its own worker (SIGSTOP) until another attempt has finished the job, or for a minute at most.
Any SIGCONT before that (a nemesis's resume) finds the job unfinished and freezes it again.
``transfer`` repeats the effect; ``transfer_once`` keeps it to one by its key.
"""

from __future__ import annotations

import os

from leaselab.check import read_effects, record_effect
from leaselab.harness.gates import freeze_until_done_by_another as _freeze_until_done_by_another


def transfer(job):
    """Send 10 to the payload's account: an outside effect with no guard against a second attempt."""
    record_effect(job, key=f"transfer-{job.id}", amount=10)
    if job.attempts == 1 and job.id == job.payload.get("freeze_job"):
        _freeze_until_done_by_another(job)
    return {"sent": 10}


def transfer_once(job):
    """The same transfer, kept to once by its idempotency key: a second attempt finds it done."""
    key = f"transfer-{job.id}"
    if any(line.get("key") == key for line in read_effects(os.environ["LEASELAB_EFFECTS"])):
        return {"sent": 0}  # the effect happened once already: this run adds nothing
    record_effect(job, key=key, amount=10)
    if job.attempts == 1 and job.id == job.payload.get("freeze_job"):
        _freeze_until_done_by_another(job)
    return {"sent": 10}
