"""Batches: many jobs leased in one statement, renewed in one statement, completed in one transaction, fenced job by
job."""

from __future__ import annotations

import sqlite3

import pytest

from leaselab import InvalidPayload, LeaseLost, Status
from tests.support import history
from tests.support.servers import IN_PROCESS_BACKENDS

TARGETS = IN_PROCESS_BACKENDS  # the contract suite: on the APSW backend too


def test_claim_many_leases_up_to_n_jobs_in_claim_order_each_with_its_own_token(queue, clock):
    low = queue.enqueue("low", priority=0)
    high = queue.enqueue("high", priority=5)
    later = queue.enqueue("later", delay=60)
    second = queue.enqueue("second", priority=0)
    jobs = queue.claim_many(10, worker="w1", lease=9)
    assert [j.id for j in jobs] == [high, low, second]  # priority first, then run_at, then id; not the delayed one
    assert len({j.token for j in jobs}) == 3
    assert all(j.status is Status.RUNNING and j.worker == "w1" and j.attempts == 1 for j in jobs)
    assert all(j.lease_until == clock() + 9 for j in jobs)
    assert queue.get(later).status is Status.PENDING
    assert queue.claim_many(10, worker="w2") == []


def test_claim_many_takes_no_more_than_n(queue):
    ids = queue.enqueue_many(range(5))
    assert [j.id for j in queue.claim_many(2, worker="w1")] == ids[:2]
    assert queue.stats()["pending"] == 3


def test_a_token_from_a_batch_claim_is_never_reused_by_a_later_claim_of_the_same_job(queue, clock):
    job_id = queue.enqueue("x")
    first = queue.claim_many(1, worker="w1", lease=5)[0]
    clock.advance(10)
    queue.reap()
    clock.advance(120)
    second = queue.claim_many(1, worker="w2", lease=5)[0]
    assert second.id == job_id and second.token != first.token
    with pytest.raises(LeaseLost):
        queue.complete(first.id, first.token, "zombie")


@pytest.mark.parametrize("n", [0, -1, 1.5, "3", True, None])
def test_claim_many_refuses_a_batch_size_that_is_not_a_positive_int(queue, n):
    queue.enqueue("x")
    with pytest.raises((TypeError, ValueError), match="n must"):
        queue.claim_many(n, worker="w1")
    assert queue.stats() == {"pending": 1, "running": 0, "done": 0, "dead": 0}


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # damage written with sqlite3 into the file
def test_claim_many_fails_a_damaged_job_and_returns_the_others(queue, db_path):
    good = queue.enqueue("fine")
    bad = queue.enqueue("to be damaged")
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE jobs SET payload = '{not json' WHERE id = ?", (bad,))
    conn.commit()
    conn.close()
    jobs = queue.claim_many(5, worker="w1")
    assert [j.id for j in jobs] == [good]
    row = queue.backend.run("SELECT status, last_error FROM jobs WHERE id = ?", (bad,))[0]
    assert row[0] == "pending" and "not JSON" in row[1]


def test_complete_many_completes_every_job_in_one_transaction(queue):
    queue.enqueue_many(["a", "b", "c"])
    jobs = queue.claim_many(3, worker="w1")
    assert queue.complete_many([(j.id, j.token, {"n": j.payload}) for j in jobs]) == []
    assert [queue.get(j.id).result for j in jobs] == [{"n": "a"}, {"n": "b"}, {"n": "c"}]
    assert queue.stats()["done"] == 3


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # SQLite's statement trace
def test_one_commit_holds_the_whole_batch_of_completions(queue, db_path):
    queue.enqueue_many(["a", "b", "c"])
    jobs = queue.claim_many(3, worker="w1")
    commits = []
    queue.backend.connection.set_trace_callback(lambda s: commits.append(s) if s.strip().upper() == "COMMIT" else None)
    try:
        queue.complete_many([(j.id, j.token, None) for j in jobs])
    finally:
        queue.backend.connection.set_trace_callback(None)
    assert commits == ["COMMIT"]


def test_a_batch_completion_refuses_only_the_fenced_off_job_and_records_it(queue, clock):
    queue.enqueue_many(["a", "b", "c"], max_attempts=5)
    a, b, c = queue.claim_many(3, worker="w1", lease=5)
    clock.advance(6)
    # b's lease runs out and another worker takes it over before w1 finishes the batch
    queue.heartbeat(a.id, a.token, 5)
    queue.heartbeat(c.id, c.token, 5)
    assert queue.reap() == [b.id]
    clock.advance(60)
    b2 = queue.claim("w2", lease=30)
    assert b2.id == b.id
    refused = queue.complete_many([(a.id, a.token, "a"), (b.id, b.token, "stale"), (c.id, c.token, "c")])
    assert refused == [b.id]
    assert queue.get(a.id).status is Status.DONE and queue.get(c.id).status is Status.DONE
    now_b = queue.get(b.id)
    assert now_b.status is Status.RUNNING and now_b.token == b2.token and now_b.result is None
    lost = [e for e in queue.events(b.id) if e.kind == "lease_lost"]
    assert len(lost) == 1 and lost[0].token == b.token and lost[0].worker == "w1" and lost[0].attempt == 1
    queue.complete(b2.id, b2.token, "fresh")
    assert queue.get(b.id).result == "fresh"


def test_complete_many_and_claim_completes_the_batch_and_refills_the_slots_in_one_go(queue, clock):
    queue.enqueue_many(["a", "b", "c", "d", "e"])
    a, b = queue.claim_many(2, worker="w1", lease=5)
    clock.advance(6)
    queue.heartbeat(a.id, a.token, 5)
    assert queue.reap() == [b.id]  # b's lease ran out ...
    taken = queue.claim("w2")  # ... and w2 took over the next job in line
    refused, claimed = queue.complete_many_and_claim(
        [(a.id, a.token, "A"), (b.id, b.token, "stale")], 2, worker="w1", lease=7
    )
    assert refused == [b.id] and queue.get(a.id).result == "A"
    assert [j.payload for j in claimed] == ["d", "e"] and taken.payload == "c"
    assert all(j.worker == "w1" and j.status is Status.RUNNING and j.lease_until == clock() + 7 for j in claimed)
    assert len({j.token for j in claimed}) == 2
    assert [e.kind for e in queue.events(b.id)][-1] == "lease_lost"
    refused, claimed = queue.complete_many_and_claim([(j.id, j.token, j.payload) for j in claimed], 0, worker="w1")
    assert refused == [] and claimed == [] and queue.stats()["done"] == 3


def test_a_job_given_twice_in_one_batch_is_completed_once_and_its_second_completion_refused(queue):
    """Every job but one given once, that one twice: the count of rows completed falls one short of
    the items, and the second completion (another result, the same token) is the one refused."""
    queue.enqueue_many(["a", "b", "c"])
    a, b, c = queue.claim_many(3, worker="w1")
    items = [(a.id, a.token, "A"), (b.id, b.token, "B"), (b.id, b.token, "B again"), (c.id, c.token, "C")]
    refused, claimed = queue.complete_many_and_claim(items, 1, worker="w1")
    assert refused == [b.id] and claimed == []
    assert [queue.get(j.id).result for j in (a, b, c)] == ["A", "B", "C"]
    assert [e.kind for e in queue.events(b.id)][-2:] == ["completed", "lease_lost"]


def test_complete_many_and_claim_claims_even_when_nothing_completes(queue):
    queue.enqueue_many(["a", "b"])
    refused, claimed = queue.complete_many_and_claim([], 5, worker="w1")
    assert refused == [] and [j.payload for j in claimed] == ["a", "b"]
    refused, claimed = queue.complete_many_and_claim([], 5, worker="w1")
    assert (refused, claimed) == ([], [])


def test_a_batch_with_a_result_that_is_not_json_writes_nothing(queue):
    queue.enqueue_many(["a", "b"])
    a, b = queue.claim_many(2, worker="w1")
    with pytest.raises(InvalidPayload):
        queue.complete_many([(a.id, a.token, "fine"), (b.id, b.token, float("nan"))])
    assert queue.stats()["running"] == 2


def test_heartbeat_many_renews_every_held_lease_in_one_statement_and_names_what_was_lost(queue, clock):
    queue.enqueue_many(["a", "b"])
    a, b = queue.claim_many(2, worker="w1", lease=5)
    clock.advance(6)
    queue.reap()  # both expired; now only a is taken again, by w2
    clock.advance(60)
    a2 = queue.claim("w2", lease=5)
    assert a2.id == a.id
    seen = []
    queue.tracer = lambda statement, params: seen.append(statement)
    renewed = queue.heartbeat_many([(a2.id, a2.token), (b.id, b.token)], lease=7)
    assert renewed == {a2.id: clock() + 7}
    assert sum(s.startswith("UPDATE jobs") and "lease_until =" in s for s in seen) == 1
    assert [e.kind for e in queue.events(b.id)][-1] == "lease_lost"
    assert queue.heartbeat_many([], lease=7) == {}


def test_heartbeat_many_given_one_job_under_two_tokens_renews_only_the_token_on_the_row(queue, clock):
    # A worker frozen past its lease may claim the very job it still runs on another slot: its beat
    # then names that job twice, under its old token and its new one. The answer names jobs, so a
    # single statement would let the new token's renewal pass for the old one's too.
    queue.enqueue("x")
    old = queue.claim("w1", lease=5)
    clock.advance(6)
    queue.reap()
    clock.advance(60)
    new = queue.claim("w1", lease=5)
    assert new.id == old.id and new.token != old.token
    before = len(queue.events(old.id))
    renewed = queue.heartbeat_many([(old.id, old.token), (new.id, new.token)], lease=7)
    assert renewed == {new.id: clock() + 7}
    lost = [e for e in queue.events(old.id)[before:] if e.kind == "lease_lost"]
    assert [(e.token, e.attempt) for e in lost] == [(old.token, 1)]  # the old token's refusal, written


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)  # the checker reads the file with sqlite3
def test_the_history_of_batched_work_passes_the_chaos_checker(queue, db_path, clock):
    queue.enqueue_many([{"i": i} for i in range(20)], max_attempts=3)
    while True:
        jobs = queue.claim_many(6, worker="w1", lease=5)
        if not jobs:
            break
        queue.heartbeat_many([(j.id, j.token) for j in jobs], lease=5)
        queue.complete_many([(j.id, j.token, j.payload) for j in jobs])
    jobs, events, _ = history.load(str(db_path))
    # Every check but the effects one: no handler ran here, so there is no effects file to compare.
    problems = (
        history.check_final_states(jobs)
        + history.check_fencing(events)
        + history.check_attempts(jobs, events)
        + history.check_events_agree(jobs, events)
        + history.check_links(jobs, events)
    )
    assert problems == []
    assert queue.stats()["done"] == 20
