"""The chaos checker itself, on tiny histories: it passes a clean one and catches each kind of broken promise."""

from __future__ import annotations

import copy

import pytest

import history
from leaselab import LeaseLost, ManualClock, Queue
from leaselab.lessons.demo import task


@pytest.fixture
def clean(tmp_path):
    """A real three-job history made with a manual clock (leases of 5 s): one plain, whose completion is retried
    as after a lost reply; one reaped, redone, and its zombie's late completion refused; one failing to death."""
    db, effects = str(tmp_path / "q.db"), str(tmp_path / "effects.jsonl")
    clock = ManualClock()
    with Queue(db, clock=clock) as q:
        plain = q.enqueue({"effects": effects})
        reaped = q.enqueue({"effects": effects})
        doomed = q.enqueue({"effects": effects, "fail": True}, priority=-1, max_attempts=2)

        job = q.claim("w1", lease=5)
        assert job.id == plain
        result = task(job)
        q.complete(job.id, job.token, result)
        q.complete(job.id, job.token, result)  # the retry of a completion whose reply was lost

        zombie = q.claim("w2", lease=5)  # runs, then its worker stalls past the lease
        task(zombie)
        clock.advance(6)
        assert q.reap() == [reaped]
        clock.advance(60)
        again = q.claim("w3", lease=5)
        assert again.id == reaped
        q.complete(again.id, again.token, task(again))
        with pytest.raises(LeaseLost):  # the zombie wakes and tries to write: a true loss
            q.complete(zombie.id, zombie.token, {"late": True})

        for _ in range(2):
            job = q.claim("w1", lease=5)
            assert job.id == doomed
            with pytest.raises(RuntimeError):
                task(job)
            q.fail(job.id, job.token, "RuntimeError")
            clock.advance(60)
    return history.load(db, effects)


def broken(rule: str, found: list[str]) -> bool:
    return any(rule in line for line in found)


def test_a_clean_history_has_no_violations(clean):
    jobs, events, effects = clean
    assert history.check_all(jobs, events, effects) == []
    assert [j["status"] for j in jobs] == ["done", "done", "dead"]


def test_the_clean_history_has_each_event_the_new_rules_judge(clean):
    jobs, events, effects = clean
    kinds = [e["kind"] for e in events]
    assert kinds.count("lease_lost") == 1 and "reaped" in kinds and "dead" in kinds
    assert all(line["token"] for line in effects)
    assert history.check_all(jobs, events, effects, lease=5) == []


def test_a_job_left_running_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    jobs[0]["status"] = "running"
    assert broken("ended 'running'", history.check_final_states(jobs))


def test_a_completion_by_a_stale_token_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    # the zombie's completion accepted after the reap, before the re-claim
    reaped_event = next(e for e in events if e["job_id"] == 2 and e["kind"] == "reaped")
    stale = dict(reaped_event, id=reaped_event["id"] + 0.5, kind="completed")
    found = history.check_fencing(events + [stale])
    assert broken("accepted with no lease held", found)


def test_a_completion_with_the_wrong_token_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    done = next(e for e in events if e["job_id"] == 2 and e["kind"] == "completed")
    first_claim = next(e for e in events if e["job_id"] == 2 and e["kind"] == "claimed")
    done["token"] = first_claim["token"]
    assert broken("stale token", history.check_fencing(events))


def test_a_claim_while_a_lease_is_held_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    events = [e for e in events if not (e["job_id"] == 2 and e["kind"] == "reaped")]
    assert broken("claimed again", history.check_fencing(events))


def test_a_write_after_done_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    done = next(e for e in events if e["job_id"] == 1 and e["kind"] == "completed")
    events.append(dict(done, id=10_000, kind="heartbeat"))
    assert broken("after it was completed", history.check_fencing(events))


def test_a_done_job_whose_handler_never_ran_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    effects = [line for line in effects if line["job"] != 1]
    assert broken("handler never ran", history.check_effects(jobs, events, effects))


def test_a_rerun_without_a_lost_lease_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    effects.append(dict(effects[0], attempt=2))  # job 1 ran twice but was never reaped
    found = history.check_effects(jobs, events, effects)
    assert broken("never claimed", found) and broken("not a lost lease", found)


def test_a_result_from_an_older_attempt_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    jobs[1]["result"]["attempt"] = 1  # the zombie's result overwrote attempt 2's
    assert broken("stored result came from attempt 1", history.check_effects(jobs, events, effects))


def test_an_unwanted_failure_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    jobs[2]["payload"].pop("fail")
    assert broken("did not ask it to", history.check_effects(jobs, events, effects))


def test_attempts_beyond_max_attempts_are_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    jobs[2]["max_attempts"] = 1
    assert broken("attempts > max_attempts", history.check_attempts(jobs, events))


def test_a_table_that_disagrees_with_its_events_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    jobs[1]["token"] = "forged"
    jobs[0]["status"] = "dead"
    found = history.check_events_agree(jobs, events)
    assert broken("token=", found) and broken("status=", found)


def test_a_history_whose_links_skip_or_cross_jobs_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    assert history.check_links(jobs, events) == []
    newest_of_first = next(e for e in events if e["id"] == jobs[0]["last_event_id"])
    newest_of_first["prev"] = None  # the job's older events fall off its list
    jobs[1]["last_event_id"] = jobs[2]["last_event_id"]  # one job's head points into another's list
    found = history.check_links(jobs, events)
    assert broken(f"job {jobs[0]['id']}: its linked history", found)
    assert broken(f"job {jobs[1]['id']}: its linked history", found)
    jobs[2]["last_event_id"] = 10_000
    assert broken("which does not exist", history.check_links(jobs, events))


def test_a_fence_handed_to_two_claims_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    assert history.check_fences(events, effects) == []
    claim = next(e for e in events if e["job_id"] == 2 and e["kind"] == "claimed")
    twin = dict(claim, id=claim["id"] + 0.5, token="f" * 32, worker="w9")  # the same attempt, another claim
    assert broken("job 2: fence reused: attempt 1 held by 2 claims", history.check_fences(events + [twin], effects))


def test_a_fence_reused_after_its_claim_was_lost_shows_in_the_runs(clean):
    jobs, events, effects = copy.deepcopy(clean)
    # A crash took the first claim of job 1 back, events and all; only its handler's run remembers it.
    first = next(line for line in effects if line["job"] == 1)
    effects.append(dict(first, token="e" * 32, worker="w7"))
    assert broken("job 1: fence reused: attempt 1 held by 2 claims", history.check_fences(events, effects))


def test_a_lease_lost_for_the_token_that_completed_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    assert history.check_false_losses(events) == []  # the zombie's refusal is a true loss
    done = next(e for e in events if e["job_id"] == 1 and e["kind"] == "completed")
    falsified = dict(done, id=10_000, kind="lease_lost", detail="complete refused: token no longer holds the job")
    assert broken("job 1: false loss", history.check_false_losses(events + [falsified]))


def test_a_lease_lost_for_the_token_that_failed_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    failed = next(e for e in events if e["job_id"] == 3 and e["kind"] == "failed")
    falsified = dict(failed, id=10_000, kind="lease_lost", detail="fail refused: token no longer holds the job")
    assert broken("job 3: false loss", history.check_false_losses(events + [falsified]))


def test_a_dead_job_whose_handler_never_ran_is_reported_unless_its_workers_were_killed(clean):
    jobs, events, effects = copy.deepcopy(clean)
    assert history.check_dead_ran(jobs, events, effects) == []
    effects = [line for line in effects if line["job"] != 3]
    assert broken("job 3: dead after 2 attempts, but its handler never ran", history.check_dead_ran(jobs, events, effects))
    assert history.check_dead_ran(jobs, events, effects, vanished={"w1"}) == []  # both claims were w1's


def test_a_reap_before_the_holders_lease_ran_out_is_reported(clean):
    jobs, events, effects = copy.deepcopy(clean)
    assert history.check_reaps(events, lease=5) == []
    reaped = next(e for e in events if e["job_id"] == 2 and e["kind"] == "reaped")
    claim = next(e for e in events if e["job_id"] == 2 and e["kind"] == "claimed")
    # The holder's heartbeat one second before the reap: its lease had four seconds left.
    beat = dict(claim, id=reaped["id"] - 0.5, kind="heartbeat", at=reaped["at"] - 1)
    assert broken("job 2: live holder reaped", history.check_reaps(events + [beat], lease=5))
    # A renewal that long ago is not a live holder.
    old = dict(beat, at=reaped["at"] - 5.5)
    assert history.check_reaps(events + [old], lease=5) == []
    # Nor is a heartbeat of another token.
    assert history.check_reaps(events + [dict(beat, token="other")], lease=5) == []
