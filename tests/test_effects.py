"""Repeats made harmless: a keyed deposit counts once, and an effect committed with the completion is fenced."""

from __future__ import annotations

import sqlite3

import pytest

from leaselab import LeaseLost, ManualClock, Queue
from leaselab.harness import effects
from leaselab.harness.errors import KeyReused


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


# -- a key kept as payment services keep it: with the request's hash, until it expires ------------


def test_a_kept_key_moves_money_once_and_a_repeat_within_its_lifetime_moves_nothing(tmp_path):
    clock = ManualClock()
    with effects.Ledger(tmp_path / "keys.db", clock=clock, key_ttl=60) as ledger:
        first = ledger.deposit_once("frank", 10, key="order-7")
        clock.advance(59)
        again = ledger.deposit_once("frank", 10, key="order-7")
        assert (first, again) == (effects.Outcome.DEPOSITED, effects.Outcome.REPEAT)
        assert ledger.balance("frank") == 10


def test_the_same_key_with_a_different_request_is_refused_and_writes_nothing(tmp_path):
    with effects.Ledger(tmp_path / "keys.db") as ledger:
        ledger.deposit_once("frank", 10, key="order-7")
        with pytest.raises(KeyReused, match="order-7"):
            ledger.deposit_once("frank", 100, key="order-7")
        with pytest.raises(KeyReused):
            ledger.deposit_once("grace", 10, key="order-7")
        assert (ledger.balance("frank"), ledger.balance("grace"), len(ledger.entries())) == (10, 0, 1)
    raw = sqlite3.connect(tmp_path / "keys.db")  # read the file itself: the first request's hash is what is kept
    assert raw.execute("SELECT request FROM idempotency_keys").fetchall() == [(effects.request_hash("frank", 10),)]
    raw.close()


def test_an_expired_key_is_forgotten_so_the_same_request_moves_money_again(tmp_path):
    clock = ManualClock()
    with effects.Ledger(tmp_path / "keys.db", clock=clock, key_ttl=60) as ledger:
        ledger.deposit_once("frank", 10, key="order-7")
        clock.advance(60)
        assert ledger.deposit_once("frank", 10, key="order-7") is effects.Outcome.DEPOSITED
        assert ledger.deposit_once("frank", 25, key="order-8") is effects.Outcome.DEPOSITED
        clock.advance(61)
        assert ledger.deposit_once("frank", 99, key="order-8") is effects.Outcome.DEPOSITED  # forgotten: new
        assert ledger.balance("frank") == 10 + 10 + 25 + 99


def test_a_deposit_that_fails_after_taking_its_key_leaves_neither_key_nor_money(tmp_path):
    path = tmp_path / "keys.db"
    with effects.Ledger(path) as ledger:
        ledger.deposit("frank", 1)
        raw = sqlite3.connect(path)  # a trigger that fails the deposit's insert, after the key was taken
        raw.execute("CREATE TRIGGER no_more BEFORE INSERT ON ledger BEGIN SELECT RAISE(ABORT, 'disk full'); END")
        raw.commit()
        with pytest.raises(sqlite3.IntegrityError, match="disk full"):
            ledger.deposit_once("frank", 10, key="order-7")
        raw.execute("DROP TRIGGER no_more")
        raw.commit()
        assert raw.execute("SELECT count(*) FROM idempotency_keys").fetchone() == (0,)
        raw.close()
        assert ledger.deposit_once("frank", 10, key="order-7") is effects.Outcome.DEPOSITED  # not a "repeat"
        assert ledger.balance("frank") == 11


@pytest.mark.parametrize("ttl", [0, -1, "60", True, float("nan")])
def test_a_key_lifetime_must_be_a_positive_number(tmp_path, ttl):
    with pytest.raises(ValueError, match="key_ttl"):
        effects.Ledger(tmp_path / "keys.db", key_ttl=ttl)
