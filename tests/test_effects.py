"""Repeats made harmless: a keyed deposit counts once, and an effect committed with the completion is fenced."""

from __future__ import annotations

import pytest

from leaselab import LeaseLost, ManualClock, Queue
from leaselab.harness import effects


def test_plain_deposits_all_count_and_keyed_ones_count_once(tmp_path):
    with effects.Ledger(tmp_path / "l.db") as ledger:
        assert [ledger.deposit("a", 10) for _ in range(3)] == [True, True, True]
        assert [ledger.deposit("b", 10, key="job-1") for _ in range(3)] == [True, False, False]
        assert (ledger.balance("a"), ledger.balance("b"), ledger.balance("nobody")) == (30, 10, 0)


# The lessons' ledger is a table in a SQLite file (effects.Ledger opens it with sqlite3, record_deposit
# writes SQLite's :name parameters), so completing with it runs on a SQLite queue file: on PostgreSQL
# record_deposit is a syntax error, and sqlite3 cannot open the APSW backend's in-process disk. What the
# queue itself promises here (queue.completing: the caller's statements and the fenced completion in one
# transaction) is pinned on every backend in test_contract_queue.py.
def _queue_with_job(tmp_path):
    clock = ManualClock()
    q = Queue(tmp_path / "q.db", clock=clock)
    ledger = effects.Ledger(q.path)
    return clock, q, ledger, q.enqueue("pay")


def test_completing_commits_the_effect_and_the_completion_together(tmp_path):
    clock, q, ledger, job_id = _queue_with_job(tmp_path)
    job = q.claim("w1")
    with effects.completing(q, job, result="paid") as tx:
        effects.record_deposit(tx, "c", 10, job=job)
    assert (q.get(job_id).status, q.get(job_id).result, ledger.balance("c")) == ("done", "paid", 10)


def test_a_crash_inside_completing_writes_neither(tmp_path):
    clock, q, ledger, job_id = _queue_with_job(tmp_path)
    job = q.claim("w1")
    with pytest.raises(RuntimeError):
        with effects.completing(q, job) as tx:
            effects.record_deposit(tx, "c", 10, job=job)
            raise RuntimeError("crash")
    assert (q.get(job_id).status, ledger.balance("c")) == ("running", 0)


def test_a_zombie_completing_gets_lease_lost_and_its_effect_is_rolled_back(tmp_path, zombie):
    clock, q, ledger, job_id = _queue_with_job(tmp_path)
    stale, fresh = zombie(lease=10, holder="w1", successor="w2", queue=q)
    with effects.completing(q, fresh) as tx:
        effects.record_deposit(tx, "c", 10, job=fresh)
    with pytest.raises(LeaseLost):
        with effects.completing(q, stale) as tx:
            effects.record_deposit(tx, "c", 10, job=stale)
    assert [(e["amount"], e["attempt"]) for e in ledger.entries()] == [(10, 2)]
    assert [e.worker for e in q.events(job_id) if e.kind == "lease_lost"] == ["w1"]


def test_deposit_handler_crashing_after_its_effect_pays_twice_unless_keyed(tmp_path, target, fleet_on):
    """At-least-once with real processes: the queue on a file or a server, the ledger in a file of its own."""
    from tests.support.polling import wait_until

    q = Queue(target)
    ledger_file = str(tmp_path / "ledger.db")
    plain = q.enqueue({"ledger": ledger_file, "account": "a", "amount": 10, "crash": 1})
    keyed = q.enqueue({"ledger": ledger_file, "account": "b", "amount": 10, "keyed": True, "crash": 1})
    fleet = fleet_on(q.path)
    for name in ("w1", "w2", "w3"):
        fleet.spawn("leaselab.harness.effects:deposit", lease=1.0, name=name)
    wait_until(lambda: q.get(plain).status == q.get(keyed).status == "done", message="both jobs done")
    with effects.Ledger(ledger_file) as ledger:
        assert (ledger.balance("a"), ledger.balance("b")) == (20, 10)
    q.close()
