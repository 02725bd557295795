"""The chaos checker itself, on tiny histories: it passes a clean one and catches each kind of broken promise."""

from __future__ import annotations

import copy

import pytest

import history
from leaselab import ManualClock, Queue
from leaselab.lessons.demo import task


@pytest.fixture
def clean(tmp_path):
    """A real three-job history made with a manual clock: one plain, one reaped then redone, one failing to death."""
    db, effects = str(tmp_path / "q.db"), str(tmp_path / "effects.jsonl")
    clock = ManualClock()
    with Queue(db, clock=clock) as q:
        plain = q.enqueue({"effects": effects})
        reaped = q.enqueue({"effects": effects})
        doomed = q.enqueue({"effects": effects, "fail": True}, priority=-1, max_attempts=2)

        job = q.claim("w1", lease=5)
        assert job.id == plain
        q.complete(job.id, job.token, task(job))

        zombie = q.claim("w2", lease=5)  # runs, then its worker stalls past the lease
        task(zombie)
        clock.advance(6)
        assert q.reap() == [reaped]
        clock.advance(60)
        again = q.claim("w3", lease=5)
        assert again.id == reaped
        q.complete(again.id, again.token, task(again))

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
