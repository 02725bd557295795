"""huey's side of the audit: a ``SqliteHuey`` at its defaults and one task, as huey's guide writes an app.

The consumer is huey's own (``huey_consumer audit_huey_app.huey``). Which completions huey
took is read from its public ``SIGNAL_COMPLETE``, sent by the consumer after a task returned.
"""

import os

from huey import SqliteHuey
from huey.signals import SIGNAL_COMPLETE

from audit_ledger import handle, record

huey = SqliteHuey("audit", filename=os.environ["AUDIT_HUEY_DB"])


@huey.task()
def job(key, fault, ledger):
    return handle(key, fault, ledger)


@huey.signal(SIGNAL_COMPLETE)
def completed(signal, task, exc=None):
    key, _, ledger = task.args
    record(ledger, key, "accepted")
