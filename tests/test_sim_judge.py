"""The specification judges real histories: a real ``Worker``'s run, fed through the simulator's model event by event.

A clean run passes; the same run with a planted bug in the real statements is judged wrong at the
event where it went wrong, by name, with the events that led there, in ``leaselab.sim.judge`` and in
``leaselab check``'s report alike.
"""

from __future__ import annotations

from leaselab import Backoff, Queue, Worker
from leaselab.check import History, check, check_history, load
from leaselab.sim.judge import RULES, judge
from leaselab.sim.mutants import planted

FAST = Backoff(base=0.2)


def _run(db: str, backoff: Backoff, jobs: list[dict]) -> None:
    queue = Queue(db, backoff=backoff)
    for spec in jobs:
        queue.enqueue(spec["payload"], priority=spec.get("priority", 0), delay=spec.get("delay", 0.0))
    Worker(queue, "leaselab.harness.demo:task", name="w1", exit_when_idle=True).run()
    queue.close()


def _judged(db: str, backoff: Backoff):
    h = load(db)
    return judge(h.jobs, h.events, backoff=backoff), h


def test_a_real_workers_clean_run_with_failures_delays_and_priorities_agrees_with_the_specification(tmp_path):
    db = str(tmp_path / "q.db")
    jobs = [
        {"payload": {"fail": 1}},
        {"payload": {}, "priority": 2},
        {"payload": {"fail": 2}, "priority": 1},
        {"payload": {}, "delay": 0.3},
        {"payload": {"fail": True}},  # dies after its attempts
    ]
    _run(db, FAST, jobs)
    found, h = _judged(db, FAST)
    assert found is None
    assert {e["kind"] for e in h.events} >= {"claimed", "failed", "completed", "dead"}
    assert check(db, backoff=FAST).clean


def test_a_retry_run_at_once_by_a_planted_no_backoff_is_named_at_its_claim(tmp_path):
    db = str(tmp_path / "q.db")
    with planted("no_backoff"):
        _run(db, Backoff(base=5.0), [{"payload": {"fail": 1}}])
    found, h = _judged(db, Backoff(base=5.0))
    assert found is not None and found.rule == "claim_before_run_at" and found.job == 1
    event = next(e for e in h.events if e["id"] == found.event)
    assert (event["kind"], event["attempt"]) == ("claimed", 2)
    assert [e["kind"] for e in h.events if e["id"] in found.led] == ["enqueued", "claimed", "failed", "claimed"]
    assert found.facts["early"] > 4.0  # the backoff was 5 s; the mutant ran it again at once
    # Without the mutant the same run keeps the specification: what was caught is the bug.
    clean_db = str(tmp_path / "clean.db")
    _run(clean_db, Backoff(base=0.2), [{"payload": {"fail": 1}}])
    assert _judged(clean_db, Backoff(base=0.2))[0] is None


def test_leaselab_check_reports_the_specifications_verdict_in_both_languages(tmp_path):
    db = str(tmp_path / "q.db")
    with planted("no_backoff"):
        _run(db, Backoff(), [{"payload": {"fail": 1}}])
    report = check(db)  # the queue's default backoff, as a `leaselab worker` has it
    hits = [a for a in report.anomalies if a.kind == "specification"]
    assert len(hits) == 1 and hits[0].job == 1 and hits[0].what == "spec.claim_before_run_at"
    assert "claimed (attempt 2)" in hits[0].sentence("en") and "before its run_at" in hits[0].sentence("en")
    assert "захватили (попытка 2)" in hits[0].sentence("ru")
    assert hits[0].witness[-1].startswith("events#") and " claimed attempt=2 " in hits[0].witness[-1]
    assert "нарушена спецификация" in report.render("ru")
    # Told that the queue had no backoff to keep, the same history is clean of it.
    assert not [a for a in check(db, backoff=None).anomalies if a.kind == "specification"]


def test_a_delayed_job_claimed_at_once_by_a_planted_claim_before_run_at_is_named(tmp_path):
    db = str(tmp_path / "q.db")
    with planted("claim_before_run_at"):
        _run(db, FAST, [{"payload": {}, "delay": 60.0}])
    found, h = _judged(db, FAST)
    assert found is not None and (found.rule, found.job) == ("claim_before_run_at", 1)
    assert next(e for e in h.events if e["id"] == found.event)["kind"] == "claimed"
    assert found.facts["early"] > 50.0


def test_a_claim_that_passes_over_a_higher_priority_is_named_with_the_job_it_passed(tmp_path):
    db = str(tmp_path / "q.db")
    with planted("claim_ignores_priority"):
        _run(db, FAST, [{"payload": {}}, {"payload": {}, "priority": 5}])
    found, _ = _judged(db, FAST)
    assert found is not None and found.rule == "claim_order" and found.facts == {"taken": [1], "passed": 2}


def test_a_history_a_server_wrote_is_not_judged_and_the_report_says_so(tmp_path):
    db = str(tmp_path / "q.db")
    with planted("no_backoff"):
        _run(db, Backoff(), [{"payload": {"fail": 1}}])
    h = load(db)
    unordered = History(jobs=h.jobs, events=h.events, effects=h.effects, now=h.now, ordered=False)
    report = check_history(unordered)
    assert report.clean and "spec_unordered" in report.notes


def test_every_rule_the_judge_names_has_a_sentence_in_both_languages():
    from leaselab.check.texts import SENTENCES

    for lang in ("en", "ru"):
        assert {f"spec.{rule}" for rule in RULES} <= set(SENTENCES[lang])


def test_a_retried_job_whose_first_run_at_the_table_lost_is_not_judged_out_of_claim_order():
    from tests.test_check import T0, Build

    # Job 2 was enqueued before job 1's retry came due, so the queue rightly claims it first; the table
    # keeps only job 2's last run_at, so the model cannot rank it, and must not call the claim wrong.
    b = Build().enqueue(1, at=T0).enqueue(2, at=T0 + 0.5)
    b.claim(1, "a" * 32, T0 + 1).fail(1, "a" * 32, T0 + 1.1)
    b.claim(2, "b" * 32, T0 + 3).fail(2, "b" * 32, T0 + 3.1)
    b.claim(1, "c" * 32, T0 + 3.2).complete(1, "c" * 32, T0 + 3.3)
    b.claim(2, "d" * 32, T0 + 4.2).complete(2, "d" * 32, T0 + 4.3)
    h = b.history()
    assert judge(h.jobs, h.events, backoff=Backoff()) is None
    # Known run_ats are still ranked: job 1's retry due at T0 + 2.1 passed over for a later job 3 is wrong.
    b = Build().enqueue(1, at=T0).enqueue(3, at=T0 + 2.5)
    b.claim(1, "a" * 32, T0 + 1).fail(1, "a" * 32, T0 + 1.1)
    b.claim(3, "b" * 32, T0 + 3).complete(3, "b" * 32, T0 + 3.1)
    b.claim(1, "c" * 32, T0 + 3.2).complete(1, "c" * 32, T0 + 3.3)
    h = b.history()
    found = judge(h.jobs, h.events, backoff=Backoff())
    assert found is not None and found.rule == "claim_order" and found.facts == {"taken": [3], "passed": 1}
