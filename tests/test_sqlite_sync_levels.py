"""What each durability asks SQLite to sync: a ``full`` queue syncs what a crash must not lose (enqueue,
claim, complete) and nothing else, switching the level only when it changes; a ``normal`` queue never
asks for a full sync. SQLite's PRAGMA synchronous, read through the connection's trace.

That both durabilities run a job through on every backend is in ``test_contract_queue.py``.
"""

from __future__ import annotations

import pytest

from leaselab import LeaseLost, Queue

LEASE = 30.0


def test_an_unknown_durability_is_a_value_error(db_path):
    with pytest.raises(ValueError, match="durability"):
        Queue(db_path, durability="paranoid")
    assert not db_path.exists()


def _sync_levels_of_writes(q: Queue, action) -> set[int]:
    """Run ``action`` and return the PRAGMA synchronous level (1 NORMAL, 2 FULL) its writes committed at."""
    level = q.backend.connection.execute("PRAGMA synchronous").fetchone()[0]
    statements: list[str] = []
    q.backend.connection.set_trace_callback(statements.append)
    try:
        action()
    finally:
        q.backend.connection.set_trace_callback(None)
    levels = set()
    for statement in statements:
        text = " ".join(statement.split()).upper()
        if text.startswith("PRAGMA SYNCHRONOUS ="):
            level = {"FULL": 2, "NORMAL": 1}[text.rsplit(" ", 1)[1]]
        elif text.startswith(("INSERT", "UPDATE", "WITH", "COMMIT")):
            levels.add(level)
    return levels


def test_a_full_queue_syncs_enqueue_claim_and_complete_and_nothing_else(db_path, clock):
    q = Queue(db_path, clock=clock, durability="full")
    job_ids, holder = [], []
    assert _sync_levels_of_writes(q, lambda: job_ids.append(q.enqueue("x"))) == {2}
    assert _sync_levels_of_writes(q, lambda: q.enqueue_many(["y", "z"])) == {2}
    # A claim's fence (attempt, token) is what outside stores trust: a crash must never hand it out twice.
    assert _sync_levels_of_writes(q, lambda: holder.append(q.claim("w", LEASE))) == {2}
    batch: list = []
    assert _sync_levels_of_writes(q, lambda: batch.extend(q.claim_many(2, "w", LEASE))) == {2}
    assert len(batch) == 2 and q.complete_many([(j.id, j.token, "ok") for j in batch]) == []
    job = holder[0]
    assert _sync_levels_of_writes(q, lambda: q.heartbeat(job.id, job.token, LEASE)) == {1}
    assert _sync_levels_of_writes(q, lambda: q.complete(job.id, job.token, "ok")) == {2}
    assert _sync_levels_of_writes(q, lambda: q.reap()) == {1}
    q.enqueue_many(["n", "m"])
    nxt = q.claim("w", LEASE)
    assert _sync_levels_of_writes(q, lambda: holder.append(q.complete_and_claim(nxt.id, nxt.token))) == {2}
    lost = holder[-1]
    q.reap()
    clock.advance(LEASE + 1)
    q.reap()
    refused = []

    def zombie_completes():
        with pytest.raises(LeaseLost) as info:
            q.complete(lost.id, lost.token)
        refused.append(info.value)

    # The completion is attempted at FULL and changes nothing; the refusal's record is history,
    # not a result, so it is written at NORMAL.
    assert _sync_levels_of_writes(q, zombie_completes) == {1, 2}
    assert len(refused) == 1 and q.events(lost.id)[-1].kind == "lease_lost"
    q.close()


def test_a_full_queue_switches_the_sync_level_only_when_it_changes(db_path, clock):
    """A worker's loop of complete_and_claim, or a run of enqueues, issues no PRAGMA per job."""
    q = Queue(db_path, clock=clock, durability="full")
    statements: list[str] = []
    q.backend.connection.set_trace_callback(statements.append)
    for n in range(10):
        q.enqueue(n)
    job = q.claim("w", LEASE)
    while job is not None:
        job = q.complete_and_claim(job.id, job.token, worker="w", lease=LEASE)
    pragmas = [s for s in statements if s.upper().startswith("PRAGMA SYNCHRONOUS")]
    # FULL for the enqueues, the first claim and the whole drain: one switch, from the connection's NORMAL.
    assert pragmas == ["PRAGMA synchronous = FULL"]
    assert q.stats()["done"] == 10
    q.backend.connection.set_trace_callback(None)
    q.close()


def test_a_normal_queue_never_asks_for_a_full_sync(db_path, clock):
    q = Queue(db_path, clock=clock, durability="normal")
    statements: list[str] = []
    q.backend.connection.set_trace_callback(statements.append)
    q.enqueue("x")
    q.enqueue_many(["y"])
    job = q.claim("w", LEASE)
    q.complete(job.id, job.token, "ok")
    assert not any("synchronous = FULL" in s for s in statements)
    assert q.backend.connection.execute("PRAGMA synchronous").fetchone()[0] == 1
    assert q.backend.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    q.close()
