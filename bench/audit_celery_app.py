"""Celery's side of the audit: a Redis broker, ``acks_late`` (its documentation's setting for at-least-once), one task.

``AUDIT_VISIBILITY`` sets the Redis transport's ``visibility_timeout`` (empty: Celery's
default, an hour). Which completions Celery took is read from its public ``task_success``
signal, sent in the pool process once the task returned, before the late ack.
"""

import os

from celery import Celery
from celery.signals import task_success

from audit_ledger import handle, record

app = Celery("audit", broker=os.environ["AUDIT_REDIS_URL"])
app.conf.task_acks_late = True
app.conf.worker_prefetch_multiplier = 1
if os.environ.get("AUDIT_VISIBILITY"):
    app.conf.broker_transport_options = {"visibility_timeout": int(os.environ["AUDIT_VISIBILITY"])}


@app.task
def job(key, fault, ledger):
    return handle(key, fault, ledger)


@task_success.connect
def completed(sender=None, result=None, **kwargs):
    key, _, ledger = sender.request.args
    record(ledger, key, "accepted")
