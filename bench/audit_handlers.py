"""What the audit's worker processes run: leaselab's handler, and persist-queue's consumer loop as its README writes it.

Not a program (``./dev bench`` lists only bench/'s programs): the persist-queue consumer
starts as ``python -c "import audit_handlers; audit_handlers.persist_consumer(FOLDER, LEDGER)"``.

persist-queue ships no worker: its README's consumer is ``item = q.get()``, the work,
``q.ack(item)``. The loop below is that, with ``SQLiteAckQueue`` at its defaults (so
``auto_resume=True``: opening the queue puts every unacknowledged item back). What ``ack``
returns is persist-queue's own answer to "was this completion taken": the id when it
marked the item acked, None when it found nothing to ack.
"""

from __future__ import annotations

from audit_ledger import handle, record


def leaselab_job(job):
    """leaselab's handler: the payload carries the ledger key, the fault and the ledger file."""
    p = job.payload
    return handle(p["key"], p["fault"], p["ledger"])


def persist_consumer(folder: str, ledger: str) -> None:
    from persistqueue import SQLiteAckQueue

    q = SQLiteAckQueue(folder)
    while True:
        item = q.get()  # blocks until an item is ready
        handle(item["key"], item["fault"], item["ledger"])
        record(ledger, item["key"], "accepted" if q.ack(item) is not None else "refused")


def litequeue_consumer(db: str, ledger: str, stale_after: int | None) -> None:
    """litequeue's README loop: pop, work, ``done``; with ``stale_after``, first put back what stayed locked too
    long."""
    import json
    import time

    from litequeue import LiteQueue

    q = LiteQueue(db)
    while True:
        if stale_after is not None:
            for message in q.list_locked(stale_after):
                q.retry(message.message_id)
        message = q.pop()
        if message is None:
            time.sleep(0.05)
            continue
        item = json.loads(message.data)
        handle(item["key"], item["fault"], item["ledger"])
        # done() matches the message id alone and always changes the row: litequeue takes every completion.
        q.done(message.message_id)
        record(ledger, item["key"], "accepted")


def pgqueuer_consumer(url: str, heartbeat_timeout: float | None) -> None:
    """PgQueuer's own QueueManager, as its guide runs it, with one entrypoint; its default heartbeat_timeout unless
    given."""
    import asyncio
    import json
    from datetime import timedelta

    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    async def run() -> None:
        conn = await asyncpg.connect(url)
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint("audit")
        async def audit(job) -> None:
            item = json.loads(job.payload)
            handle(item["key"], item["fault"], item["ledger"])

        # Short: the stale job is re-picked on a poll, and the poll waits dequeue_timeout (30 s) for a NOTIFY first.
        kwargs = (
            {}
            if heartbeat_timeout is None
            else {"heartbeat_timeout": timedelta(seconds=heartbeat_timeout), "dequeue_timeout": timedelta(seconds=1)}
        )
        await qm.run(**kwargs)

    asyncio.run(run())
