"""The checker on a real three-job history: it passes it clean, and names each promise broken by hand in a copy.

``leaselab.check`` holds the rules; ``history`` (the chaos suite's use of it) adds the demo
handler's own contract. Every test plants one anomaly in a copy of the real history and
asserts its kind, its job and a witness that shows it.
"""

from __future__ import annotations

import copy

import pytest

from leaselab import LeaseLost, ManualClock, Queue
from leaselab.check import History, check_history, load
from leaselab.harness.demo import task
from tests.support import history


@pytest.fixture
def clean(tmp_path, target):
    """A real three-job history made with a manual clock (leases of 5 s): one plain, whose completion is retried
    as after a lost reply; one reaped, redone, and its zombie's late completion refused; one failing to death.
    Made on SQLite and PostgreSQL: each must record the same history, which each rule then judges. Not on the
    APSW backend's VolatileDisk: ``load`` reads a file or a server, and the disk lives in this process only
    (its ``file:...?vfs=`` target is a DatabaseMissing to ``load``)."""
    db, effects = target, str(tmp_path / "effects.jsonl")
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
    return load(db, effects=effects, now=clock())


def found(h: History, lease: float | None = None, vanished=()):
    """The anomalies the product's rules name, with every run recorded (the demo handler records each)."""
    return check_history(h, lease=lease, idle=True, runs_recorded=True, vanished=vanished).anomalies


def caught(anomalies, kind: str, job: int, *words: str) -> bool:
    """One of ``anomalies`` is ``kind`` on ``job``, with a witness, and its sentence says each of ``words``."""
    return any(
        a.kind == kind and a.job == job and a.witness and all(w in a.sentence() for w in words) for a in anomalies
    )


def planted(clean: History, **changes) -> History:
    h = copy.deepcopy(clean)
    return History(**{"jobs": h.jobs, "events": h.events, "effects": h.effects, "now": h.now, **changes})


def event(h: History, job: int, kind: str, nth: int = 0) -> dict:
    return [e for e in h.events if e["job_id"] == job and e["kind"] == kind][nth]


def test_a_clean_history_has_no_anomaly_but_the_demo_handlers_repeated_effect(clean):
    assert [j["status"] for j in clean.jobs] == ["done", "done", "dead"]
    # The demo handler is not idempotent on purpose: jobs 2 and 3 ran twice, and so did their effects.
    assert [(a.kind, a.job) for a in found(clean, lease=5)] == [("effect_repeated", 2), ("effect_repeated", 3)]
    assert history.check_all(clean.jobs, clean.events, clean.effects) == []
    assert history.check_all(clean.jobs, clean.events, clean.effects, lease=5) == []


def test_the_clean_history_has_each_event_the_rules_judge(clean):
    kinds = [e["kind"] for e in clean.events]
    assert kinds.count("lease_lost") == 1 and "reaped" in kinds and "dead" in kinds
    assert all(line["token"] for line in clean.effects)
    report = check_history(clean, lease=5)
    assert report.counts["repeated_runs"] == 2 and report.counts["reaps"] == 1
    assert report.counts["refused_zombies"] == 1 and report.counts["attempts"] == 5


def test_a_job_left_running_is_reported(clean):
    h = planted(clean)
    h.jobs[0].update(status="running", lease_until=h.now + 10)
    assert caught(found(h), "lost", 1, "still running")
    h.jobs[0]["lease_until"] = h.now - 100
    assert caught(found(h), "stuck", 1, "ran out")
    assert history.check_final_states(h.jobs)


def test_a_completion_by_a_stale_token_is_reported(clean):
    h = planted(clean)
    # the zombie's completion accepted after the reap, before the re-claim
    reaped = event(h, 2, "reaped")
    h.events.append(dict(reaped, id=reaped["id"] + 0.5, kind="completed"))
    assert caught(found(h), "stale_write_accepted", 2, "while no one held")


def test_a_completion_with_the_wrong_token_is_reported(clean):
    h = planted(clean)
    event(h, 2, "completed")["token"] = event(h, 2, "claimed")["token"]
    assert caught(found(h), "stale_write_accepted", 2, "completion", "while token")


def test_a_claim_while_a_lease_is_held_is_reported(clean):
    h = planted(clean)
    h = planted(h, events=[e for e in h.events if not (e["job_id"] == 2 and e["kind"] == "reaped")])
    assert caught(found(h), "overlapping_leases", 2, "still held it")


def test_a_write_after_done_is_reported(clean):
    h = planted(clean)
    h.events.append(dict(event(h, 1, "completed"), id=10_000, kind="heartbeat"))
    assert caught(found(h), "stale_write_accepted", 1, "heartbeat", "after the job was done")
    h.events[-1]["kind"] = "completed"
    assert caught(found(h), "completed_twice", 1)
    h.events[-1].update(kind="claimed", attempt=2)
    assert caught(found(h), "claimed_after_completion", 1, "attempt 2")


def test_a_done_job_whose_handler_never_ran_is_reported(clean):
    h = planted(clean)
    h = planted(h, effects=[line for line in h.effects if line["job"] != 1])
    assert caught(found(h), "history_disagrees", 1, "recorded no run")


def test_a_run_of_an_attempt_never_claimed_is_reported(clean):
    h = planted(clean)
    h.effects.append(dict(h.effects[0], attempt=2))  # job 1 ran twice but was never reaped
    assert caught(found(h), "history_disagrees", 1, "attempt 2, which was never claimed")
    assert caught(found(h), "claimed_after_completion", 1, "attempt 1 had already completed")


def test_a_result_from_an_older_attempt_is_reported(clean):
    h = planted(clean)
    h.jobs[1]["result"]["attempt"] = 1  # the zombie's result overwrote attempt 2's
    assert any("stored result came from attempt 1" in s for s in history.check_demo(h.jobs, h.events))


def test_an_unwanted_failure_is_reported(clean):
    h = planted(clean)
    h.jobs[2]["payload"].pop("fail")
    assert any("did not ask it to" in s for s in history.check_demo(h.jobs, h.events))


def test_attempts_beyond_max_attempts_are_reported(clean):
    h = planted(clean)
    h.jobs[2]["max_attempts"] = 1
    assert caught(found(h), "attempts_exceeded", 3, "2 attempts")


def test_a_table_that_disagrees_with_its_events_is_reported(clean):
    h = planted(clean)
    h.jobs[1]["token"] = "forged"
    h.jobs[0]["status"] = "dead"
    assert caught(found(h), "history_disagrees", 2, "token")
    assert caught(found(h), "history_disagrees", 1, "status is done", "says dead")


def test_a_history_whose_links_skip_or_cross_jobs_is_reported(clean):
    h = planted(clean)
    assert not [a for a in found(h) if a.what.startswith("disagree.link")]
    newest_of_first = next(e for e in h.events if e["id"] == h.jobs[0]["last_event_id"])
    newest_of_first["prev"] = None  # the job's older events fall off its list
    h.jobs[1]["last_event_id"] = h.jobs[2]["last_event_id"]  # one job's head points into another's list
    assert caught(found(h), "history_disagrees", 1, "linked history")
    assert caught(found(h), "history_disagrees", 2, "linked history")
    h.jobs[2]["last_event_id"] = 10_000
    assert caught(found(h), "history_disagrees", 3, "event 10000, which does not exist")


def test_a_fence_handed_to_two_claims_is_reported(clean):
    h = planted(clean)
    claim = event(h, 2, "claimed")
    h.events.append(dict(claim, id=claim["id"] + 0.5, token="f" * 32, worker="w9"))  # the same attempt, another claim
    assert caught(found(h), "fence_reused", 2, "attempt 1 was handed to 2 claims")


def test_a_fence_reused_after_its_claim_was_lost_shows_in_the_runs(clean):
    h = planted(clean)
    # A crash took the first claim of job 1 back, events and all; only its handler's run remembers it.
    first = next(line for line in h.effects if line["job"] == 1)
    h.effects.append(dict(first, token="e" * 32, worker="w7"))
    anomalies = found(h)
    assert caught(anomalies, "fence_reused", 1, "attempt 1 was handed to 2 claims")
    assert any("effects#" in line for a in anomalies if a.kind == "fence_reused" for line in a.witness)


def test_a_lease_lost_for_the_token_that_completed_is_reported(clean):
    h = planted(clean)
    assert not [a for a in found(h) if a.kind == "false_loss"]  # the zombie's refusal is a true loss
    h.events.append(
        dict(
            event(h, 1, "completed"),
            id=10_000,
            kind="lease_lost",
            detail="complete refused: token no longer holds the job",
        )
    )
    assert caught(found(h), "false_loss", 1, "completed the job")


def test_a_lease_lost_for_the_token_that_failed_is_reported(clean):
    h = planted(clean)
    h.events.append(
        dict(event(h, 3, "failed"), id=10_000, kind="lease_lost", detail="fail refused: token no longer holds the job")
    )
    assert caught(found(h), "false_loss", 3, "failed the job")


def test_a_dead_job_whose_handler_never_ran_is_reported_unless_its_workers_were_killed(clean):
    h = planted(clean)
    assert not [a for a in found(h) if a.kind == "dead_unrun"]
    h = planted(h, effects=[line for line in h.effects if line["job"] != 3])
    assert caught(found(h), "dead_unrun", 3, "after 2 attempts", "claimed by w1")
    assert not [a for a in found(h, vanished={"w1"}) if a.kind == "dead_unrun"]  # both claims were w1's


def test_a_reap_before_the_holders_lease_ran_out_is_reported(clean):
    h = planted(clean)
    assert not [a for a in found(h, lease=5) if a.kind in ("live_holder_reaped", "overlapping_leases")]
    reaped, claim = event(h, 2, "reaped"), event(h, 2, "claimed")
    # The holder's heartbeat one second before the reap: its lease had four seconds left.
    beat = dict(claim, id=reaped["id"] - 0.5, kind="heartbeat", at=reaped["at"] - 1)
    assert caught(found(planted(h, events=h.events + [beat]), lease=5), "live_holder_reaped", 2, "4.0 s before")
    # Without the lease, the reap cannot be timed, and the report says so.
    report = check_history(planted(h, events=h.events + [beat]))
    assert not [a for a in report.anomalies if a.kind == "live_holder_reaped"] and "lease_unknown" in report.notes
    # A renewal that long ago is not a live holder.
    old = dict(beat, at=reaped["at"] - 5.5)
    assert not [a for a in found(planted(h, events=h.events + [old]), lease=5) if a.kind == "live_holder_reaped"]
    # Nor is a heartbeat of another token.
    other = dict(beat, token="other")
    assert not [a for a in found(planted(h, events=h.events + [other]), lease=5) if a.kind == "live_holder_reaped"]


def test_a_reclaim_inside_the_reaped_holders_lease_is_overlapping_leases(clean):
    h = planted(clean)
    reaped, again = event(h, 2, "reaped"), event(h, 2, "claimed", 1)
    again["at"] = reaped["at"] + 0.5  # the re-claim half a second after a reap that came too early
    beat = dict(event(h, 2, "claimed"), id=reaped["id"] - 0.5, kind="heartbeat", at=reaped["at"] - 1)
    assert caught(found(planted(h, events=h.events + [beat]), lease=5), "overlapping_leases", 2, "3.5 s before")
