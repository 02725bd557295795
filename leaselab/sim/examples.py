"""Two handlers to try ``leaselab simulate --handler`` on: the same payment, made twice over or made once.

Both pay 10 into alice's account of a ``Ledger`` in the current folder and record the payment with
``record_effect`` when it took hold. ``pay`` deposits without a key, so an attempt run again after a
crash pays again: the simulator reports ``effect_repeated``. ``pay_once`` deposits under the job's
idempotency key, so a second attempt's deposit changes nothing and is not recorded: at-least-once
running, exactly-once paying.
"""

from __future__ import annotations

from typing import Any

from ..check.effects import record_effect
from ..harness.effects import Ledger

LEDGER = "ledger.db"  # in the current folder: the simulator gives each schedule an empty one


def pay(job: Any) -> dict[str, Any]:
    """Not idempotent: every attempt deposits 10 again."""
    with Ledger(LEDGER) as ledger:
        written = ledger.deposit("alice", 10, job=job)
    if written:
        record_effect(job, key="payment")
    return {"paid": written}


def pay_once(job: Any) -> dict[str, Any]:
    """Idempotent: the deposit is keyed by the job's id, so another attempt's deposit is ignored."""
    with Ledger(LEDGER) as ledger:
        written = ledger.deposit("alice", 10, job=job, key=f"job-{job.id}")
    if written:
        record_effect(job, key="payment")
    return {"paid": written}
