"""What the audit's worker processes run: leaselab's handler, and persist-queue's consumer loop as its README writes it.

    python bench/audit_handlers.py persist QUEUE_FOLDER LEDGER

persist-queue ships no worker: its README's consumer is ``item = q.get()``, the work,
``q.ack(item)``. The loop below is that, with ``SQLiteAckQueue`` at its defaults (so
``auto_resume=True``: opening the queue puts every unacknowledged item back). What ``ack``
returns is persist-queue's own answer to "was this completion taken": the id when it
marked the item acked, None when it found nothing to ack.
"""

from __future__ import annotations

import sys

from audit_ledger import handle, record


def leaselab_job(job):
    """leaselab's handler: the payload carries the ledger key, the fault and the ledger file."""
    p = job.payload
    return handle(p["key"], p["fault"], p["ledger"])


def persist_consumer(folder: str, ledger: str) -> None:
    from persistqueue import SQLiteAckQueue

    q = SQLiteAckQueue(folder, multithreading=True)
    while True:
        item = q.get()  # blocks until an item is ready
        handle(item["key"], item["fault"], item["ledger"])
        record(ledger, item["key"], "accepted" if q.ack(item) is not None else "refused")


if __name__ == "__main__":
    if sys.argv[1:2] != ["persist"] or len(sys.argv) != 4:
        sys.exit("usage: audit_handlers.py persist QUEUE_FOLDER LEDGER")
    persist_consumer(sys.argv[2], sys.argv[3])
