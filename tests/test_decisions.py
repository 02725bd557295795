"""The worker's decisions (``leaselab.worker.decisions``): each rule, and that the real worker runs
them from that module, so a change there (a simulator's planted bug, a fix) changes the real worker."""

from __future__ import annotations

import math

import pytest

from leaselab import Job, Lease, LeaseLost, Queue, Worker
from leaselab.worker import decisions
from leaselab.worker.decisions import Verdict


def test_a_lease_is_given_up_a_margin_before_the_database_could_reap_it_counted_from_the_send():
    assert decisions.own_deadline(100.0, 30.0, decisions.margin(30.0)) == pytest.approx(127.0)
    # A renewal sent earlier than the deadline it would give never moves the deadline back.
    assert decisions.renewed_deadline(127.0, 90.0, 30.0, 3.0) == 127.0
    assert decisions.renewed_deadline(127.0, 110.0, 30.0, 3.0) == pytest.approx(137.0)


def test_the_beat_comes_every_third_of_a_lease_and_soon_after_one_that_failed():
    assert decisions.beat_every(30.0) == 10.0
    assert decisions.next_beat(50.0, 30.0, True, 51.0) == 60.0
    assert decisions.next_beat(50.0, 30.0, False, 51.0) == 51.0 + decisions.MAX_WAIT


def test_retry_waits_double_from_the_first_up_to_the_cap():
    waits = [decisions.retry_wait(None)]
    for _ in range(10):
        waits.append(decisions.retry_wait(waits[-1]))
    assert waits[0] == decisions.FIRST_WAIT and waits[1] == 2 * decisions.FIRST_WAIT
    assert max(waits) == decisions.MAX_WAIT == waits[-1]


def test_claims_fill_the_free_slots_within_max_jobs_and_none_once_stopping():
    assert decisions.claims_to_make(4, 1, 0, None, False) == 3
    assert decisions.claims_to_make(4, 1, 9, 10, False) == 1
    assert decisions.claims_to_make(4, 0, 0, None, True) == 0
    assert decisions.claims_to_make(2, 3, 0, None, False) == 0


def test_the_verdict_drops_a_lost_lease_completes_a_return_and_fails_an_exception():
    assert decisions.verdict(False, None) is Verdict.COMPLETE
    assert decisions.verdict(False, ValueError("x")) is Verdict.FAIL
    assert decisions.verdict(False, SystemExit(3)) is Verdict.FAIL
    assert decisions.verdict(True, None) is Verdict.DROP
    assert decisions.verdict(False, LeaseLost(1, "t")) is Verdict.DROP


def test_the_reaper_keeps_the_renewed_leases_and_the_calls_in_flight():
    assert decisions.keep_from_reaper(["a"], ["b", "c"]) == ["a", "b", "c"]


def test_a_refusal_is_a_job_missing_from_the_heartbeats_answer():
    assert decisions.beat_refused(3, {1: 0.0, 2: 0.0})
    assert not decisions.beat_refused(1, {1: 0.0})


def test_a_claim_recovered_after_a_lost_reply_finds_its_jobs_by_token_and_claims_nothing_more(tmp_path):
    with Queue(tmp_path / "q.db") as queue:
        queue.enqueue({"n": 1})
        queue.enqueue({"n": 2})
        [first] = queue.claim_many(1, "w", 30, token="tok")  # went through; its reply "was lost"
        assert [j.id for j in decisions.recover_claim(queue, ["tok"], "tok2", 1, "w", 30)] == [first.id]
        assert queue.stats()["running"] == 1
        assert queue.held_by("tok2") == []


def test_a_claim_recovered_after_its_unseen_job_was_reaped_claims_under_a_fresh_token(tmp_path):
    # The simulator found this: the first try committed, the reply was lost, the lease ran out and the
    # job was reaped before the retry. Sent again under the first token, one token would fence two claims.
    now = [1000.0]
    with Queue(tmp_path / "q.db", clock=lambda: now[0]) as queue:
        queue.enqueue({"n": 1})
        [first] = queue.claim_many(1, "w", 1, token="tok")
        now[0] += 5
        assert queue.reap() == [first.id]
        now[0] += 5  # past the backoff
        [again] = decisions.recover_claim(queue, ["tok"], "tok2", 1, "w", 30)
        assert (again.id, again.token, again.attempts) == (first.id, "tok2-1", 2)
        assert queue.held_by("tok") == []


def test_a_decision_changed_in_its_module_changes_the_real_worker(tmp_path, monkeypatch):
    def handler(job: Job) -> None:
        raise RuntimeError("boom")

    def run() -> str:
        with Queue(tmp_path / f"q{len(list(tmp_path.iterdir()))}.db") as queue:
            job_id = queue.enqueue({}, max_attempts=1)
            Worker(queue, handler, lease=5, exit_when_idle=True, signals=False).run()
            return str(queue.get(job_id).status)

    assert run() == "dead"
    monkeypatch.setattr(decisions, "verdict", lambda refused, error: Verdict.COMPLETE)
    assert run() == "done"


def test_the_own_deadline_in_the_module_is_the_one_a_lease_uses(tmp_path, monkeypatch):
    with Queue(tmp_path / "q.db") as queue:
        queue.enqueue({})
        job = queue.claim("w", 1.0)
    assert job is not None
    assert Lease(job, 1.0, sent=0.0).deadline == pytest.approx(0.9)
    monkeypatch.setattr(decisions, "own_deadline", lambda sent, seconds, margin: math.inf)
    assert Lease(job, 1.0, sent=0.0).deadline == math.inf


def test_of_two_attempts_of_one_job_a_worker_holds_the_earlier_is_superseded_and_its_beat_refused():
    held = [(4, 1), (5, 2), (4, 2)]
    assert decisions.superseded(held) == {(4, 1)}
    assert decisions.superseded([(4, 1), (5, 1)]) == set()
    renewed = {4: 100.0, 5: 100.0}  # the answer names job 4: attempt 2's renewal, not attempt 1's
    assert decisions.beat_refused(4, renewed, (4, 1) in decisions.superseded(held))
    assert not decisions.beat_refused(4, renewed, (4, 2) in decisions.superseded(held))


def test_the_simulator_no_longer_finds_a_stale_attempt_renewed_by_its_successors_beat():
    # The schedule the simulator found (portfolio scenario 4, seed 535): w1, frozen past its lease,
    # claimed job 4 again on its other slot; its beat renewed attempt 2, and attempt 1's handler,
    # still running, took that for its own lease and wrote its effect as a zombie.
    from leaselab.sim import explore

    assert explore.run(explore.PORTFOLIO[3], 535).violation is None
