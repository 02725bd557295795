"""Each exercise's check cell tells a right answer from a wrong one (and from no answer yet)."""

from __future__ import annotations

import math

import pytest

from leaselab import ManualClock, Queue
from leaselab.lessons import exercises
from leaselab.lessons.texts import text


def test_the_queue_tolerates_one_missed_beat_at_a_third_of_the_lease_not_two():
    assert exercises.misses_the_queue_tolerates(30, 10) == 1
    assert exercises.misses_the_queue_tolerates(30, 7.5) == 2


def test_a_beat_due_exactly_at_lease_until_is_left_out_as_a_margin_though_reap_would_still_wait_then():
    clock = ManualClock(start=0.0)
    with Queue(":memory:", clock=clock) as q:
        q.enqueue("beat")
        job = q.claim("w", lease=30)
        clock.advance(30)
        assert q.reap() == []  # REAP is lease_until < :now: at the deadline itself the job stays
        clock.advance(math.nextafter(30, math.inf) - 30)
        assert q.reap() == [job.id]  # an instant later any reaper takes it
    # So the third beat of a 30 s lease, due at 30 s, is not counted on: one miss, not two.
    assert exercises.misses_the_queue_tolerates(30, 10) == 1
    assert exercises.misses_the_queue_tolerates(10, 1) == 8
    assert exercises.misses_the_queue_tolerates(10, 10) == -1  # not even the first beat lands inside


def test_the_misses_check_names_a_beat_interval_that_is_not_positive():
    with pytest.raises(ValueError, match="every=0"):
        exercises.misses_the_queue_tolerates(30, 0)


def test_the_lease_check_accepts_the_right_formula_and_names_the_first_wrong_case():
    assert exercises.check_misses(lambda lease, every: math.ceil(lease / every) - 2).startswith("Right:")
    wrong = exercises.check_misses(lambda lease, every: int(lease // every) - 1, "ru")
    assert wrong.startswith("Пока нет:") and "misses_tolerated(30, 10) = 2" in wrong
    assert "Напишите ответ" in exercises.check_misses(lambda lease, every: None, "ru")


def _history(tmp_path, zombie_refused: bool):
    clock = ManualClock()
    q = Queue(tmp_path / "h.db", clock=clock)
    q.enqueue("x")
    first = q.claim("w1", lease=3)
    clock.advance(4)
    q.reap()
    clock.advance(5)
    second = q.claim("w2", lease=3)
    q.complete(second.id, second.token)
    if zombie_refused:
        try:
            q.heartbeat(first.id, first.token, 3)
        except Exception:
            pass
    return q


def test_the_zombie_scenario_check_wants_the_zombie_refused_after_another_finished(tmp_path):
    right = _history(tmp_path, zombie_refused=True)
    assert exercises.check_refused_zombie(right.events, "w1").startswith("Right: w1's write was refused after w2")
    (tmp_path / "x").mkdir()
    wrong = _history(tmp_path / "x", zombie_refused=False)
    assert exercises.check_refused_zombie(wrong.events, "w1", "ru", timeout=0.2).startswith("Пока нет:")


def test_the_safe_claim_check_accepts_only_immediate(tmp_path):
    from leaselab.lessons import wrong

    results = {t: exercises.check_safe_claim(wrong.race(tmp_path / f"{t}.db", claim="naive", pause=0.002,
                                                        transaction=t))
               for t in (None, "deferred", "immediate")}
    assert results["immediate"].startswith("Right:")
    assert results[None].startswith("Not yet:") and "any duplicate: True" in results[None]
    assert results["deferred"].startswith("Not yet:") and 'any "database is locked": True' in results["deferred"]


def test_the_fenced_write_check_refuses_the_plain_upsert_and_accepts_the_fenced_one():
    from leaselab.lessons import fence

    def plain(conn, key, value, f):
        conn.execute(fence.PLAIN_WRITE, {"key": key, "job": f[0], "attempt": f[1], "token": None, "value": value})

    def fenced(conn, key, value, f):
        conn.execute(fence.FENCED_WRITE, {"key": key, "job": f[0], "attempt": f[1], "token": None, "value": value})

    def at_least(conn, key, value, f):  # the old advice: an equal fence from anyone may write again
        conn.execute(fence.PLAIN_WRITE.strip() + " WHERE (fenced.fence_job, fenced.fence_attempt)"
                     " <= (excluded.fence_job, excluded.fence_attempt)",
                     {"key": key, "job": f[0], "attempt": f[1], "token": None, "value": value})

    def broken(conn, key, value, f):
        conn.execute("INSERT INTO nowhere VALUES (1)")

    assert exercises.check_fenced_write(fenced).startswith("Right:")
    assert exercises.check_fenced_write(plain) == "Not yet: (7, 2), (7, 1): the page holds v1, it should hold v2"
    assert exercises.check_fenced_write(at_least) == "Not yet: (7, 2), (7, 2): the page holds b, it should hold a"
    assert "no such table: nowhere" in exercises.check_fenced_write(broken, "ru")


def test_the_idempotency_check_wants_one_deposit_per_job_not_per_attempt(tmp_path):
    def keyed(ledger, job):
        ledger.deposit("dave", 10, job=job, key=f"job-{job.id}")

    def per_attempt(ledger, job):
        ledger.deposit("dave", 10, job=job, key=f"job-{job.id}-{job.attempts}")

    def one_key_for_all(ledger, job):
        ledger.deposit("dave", 10, job=job, key="dave")

    assert exercises.check_idempotent_deposit(keyed, tmp_path / "a.db").startswith("Right:")
    assert "dave has 40" in exercises.check_idempotent_deposit(per_attempt, tmp_path / "b.db")
    assert "dave has 10" in exercises.check_idempotent_deposit(one_key_for_all, tmp_path / "c.db")


# -- lesson 7: a rule of the checker -----------------------------------------------------------------

def _overlapping(events, lease):
    held, found = {}, set()
    for e in sorted(events, key=lambda e: e["at"]):
        job, token = e["job"], e["token"]
        if e["kind"] == "claimed":
            if job in held and held[job][0] != token and e["at"] < held[job][1]:
                found.add(job)
            held[job] = (token, e["at"] + lease)
        elif e["kind"] == "heartbeat" and held.get(job, (None,))[0] == token:
            held[job] = (token, e["at"] + lease)
        elif e["kind"] in ("completed", "failed", "dead"):
            held.pop(job, None)
    return found


def _ignores_heartbeats(events, lease):
    last, found = {}, set()
    for e in events:
        if e["kind"] == "claimed":
            if e["job"] in last and e["at"] < last[e["job"]] + lease:
                found.add(e["job"])
            last[e["job"]] = e["at"]
    return found


def test_the_planted_history_moves_two_reaps_inside_a_live_lease_and_the_clean_one_is_a_real_queue_s():
    clean, planted, want = exercises.overlap_histories()
    assert want == {2, 3}
    assert _overlapping(clean, exercises.RULE_LEASE) == set() and _overlapping(planted, exercises.RULE_LEASE) == want
    assert [e["kind"] for e in clean if e["job"] == 3] == ["enqueued", "claimed", "heartbeat", "reaped", "claimed",
                                                           "completed"]


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_rule_check_passes_a_right_rule_and_names_what_a_wrong_one_missed(lang):
    assert exercises.check_overlap_rule(_overlapping, lang).startswith(text("check_right", lang, detail=""))
    missed = exercises.check_overlap_rule(_ignores_heartbeats, lang)  # job 3's renewed lease is missed
    assert missed.startswith(text("check_wrong", lang, detail="")) and "[2]" in missed
    everything = exercises.check_overlap_rule(lambda events, lease: {e["job"] for e in events}, lang)
    assert everything.startswith(text("check_wrong", lang, detail=""))  # it fails the clean history
    assert exercises.check_overlap_rule(lambda events, lease: None, lang) == text("check_todo", lang)
    assert "ZeroDivisionError" in exercises.check_overlap_rule(lambda events, lease: 1 / 0, lang)
