"""Each exercise's check cell tells a right answer from a wrong one (and from no answer yet)."""

from __future__ import annotations

import math
import secrets
import time

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


def _history(tmp_path, zombie_refused: bool, other: bool):
    """w1 claims and falls behind; a reaper takes its job; with ``other``, w2 runs it; w1 then writes."""
    clock = ManualClock()
    q = Queue(tmp_path / "h.db", clock=clock)
    q.enqueue("x")
    first = q.claim("w1", lease=3)
    clock.advance(4)
    q.reap()
    if other:
        clock.advance(5)
        second = q.claim("w2", lease=3)
        q.complete(second.id, second.token)
    if zombie_refused:
        try:
            q.heartbeat(first.id, first.token, 3)
        except Exception:
            pass
    return q


def test_the_zombie_scenario_check_wants_w1_refused_with_no_other_worker(tmp_path):
    for folder in ("right", "not-alone", "not-refused"):
        (tmp_path / folder).mkdir()
    right = _history(tmp_path / "right", zombie_refused=True, other=False)
    assert exercises.check_refused_alone(right.events, "w1").startswith(
        "Right: w1's write was refused and no other worker ever took its job"
    )
    assert "зомби его сделал один только reaper" in exercises.check_refused_alone(right.events, "w1", "ru")
    with_w2 = _history(tmp_path / "not-alone", zombie_refused=True, other=True)  # the lesson's own demonstration
    assert exercises.check_refused_alone(with_w2.events, "w1").startswith(
        "Not yet: w1's write was refused, but w2 took the job too"
    )
    assert exercises.check_refused_alone(with_w2.events, "w1", "ru").startswith("Пока нет: запись w1 отклонена, но")
    wrong = _history(tmp_path / "not-refused", zombie_refused=False, other=False)
    assert exercises.check_refused_alone(wrong.events, "w1", "ru", timeout=0.2).startswith(
        "Пока нет: ни одну запись w1 не отклонили"
    )
    assert "no write of w1 was refused" in exercises.check_refused_alone(wrong.events, "w1", timeout=0.2)


def _take(guarded):
    """Step two of the naive claim; with ``guarded``, only while the job is still pending."""
    from leaselab.lessons import wrong

    update = (
        wrong.NAIVE_UPDATE.replace("WHERE id = :id", "WHERE id = :id AND status = 'pending'")
        if guarded
        else wrong.NAIVE_UPDATE
    )

    def take(conn, job_id, worker):
        now = time.time()
        row = conn.execute(
            update,
            {"id": job_id, "now": now, "lease_until": now + 30, "worker": worker, "token": secrets.token_hex(16)},
        ).fetchone()
        return row is not None

    return take


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_take_check_wants_the_second_taker_told_it_lost_and_the_first_claim_kept(lang):
    assert exercises.check_guarded_take(_take(guarded=True), lang).startswith(text("check_right", lang, detail=""))
    naive = exercises.check_guarded_take(_take(guarded=False), lang)
    yes, no = {"en": ("yes", "no"), "ru": ("да", "нет")}[lang]  # a yes-or-no fact in the reader's words
    assert naive.startswith(text("check_wrong", lang, detail="")) and yes in naive and no in naive
    assert exercises.check_guarded_take(lambda conn, job_id, worker: None, lang) == text("check_todo", lang)
    assert "ZeroDivisionError" in exercises.check_guarded_take(lambda conn, job_id, worker: 1 / 0, lang)


def test_a_take_that_says_false_without_taking_leaves_job_one_to_nobody():
    verdict = exercises.check_guarded_take(lambda conn, job_id, worker: False)
    assert verdict.startswith("Not yet: A takes job 1")


class _PerJobStore:
    """Refuses a fence older than any this store has seen for that job, on any key; and per key, anything older."""

    def __init__(self):
        self.pages, self.newest = {}, {}

    def write(self, key, value, fence, token):
        job, attempt = fence
        seen = self.newest.get(job)
        if seen is not None and (attempt, token) != seen and attempt <= seen[0]:
            return False
        if key in self.pages and self.pages[key][1] > fence:
            return False
        self.newest[job] = (attempt, token)
        self.pages[key] = (value, fence)
        return True

    def read(self, key):
        return self.pages[key][0] if key in self.pages else None


class _PerKeyStore(_PerJobStore):
    """The rule of FENCED_WRITE: newer per key, or equal from the same claim; blind to what other keys saw."""

    def write(self, key, value, fence, token):
        old = self.pages.get(key)
        if old is not None and not (old[1] < fence or (old[1] == fence and old[2] == token)):
            return False
        self.pages[key] = (value, fence, token)
        return True


class _PlainStore(_PerJobStore):
    def write(self, key, value, fence, token):
        self.pages[key] = (value, fence)
        return True


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_store_check_wants_the_zombie_refused_even_on_a_key_the_new_holder_has_not_written(lang):
    assert exercises.check_store(_PerJobStore, lang).startswith(text("check_right", lang, detail=""))
    per_key = exercises.check_store(_PerKeyStore, lang)
    assert per_key.startswith(text("check_wrong", lang, detail="")) and "about.html" in per_key
    plain = exercises.check_store(_PlainStore, lang)
    assert plain.startswith(text("check_wrong", lang, detail="")) and "(1, 1)" in plain

    class Todo(_PerJobStore):
        def write(self, key, value, fence, token):
            return None

    assert exercises.check_store(Todo, lang) == text("check_todo", lang)
    assert "ZeroDivisionError" in exercises.check_store(lambda: 1 / 0, lang)


def test_the_store_check_s_writes_carry_real_claims_fences_and_tokens():
    writes = {case: (fence, token) for case, _, _, fence, token in exercises.store_writes()}
    assert writes["holder"][0] == (1, 2) and writes["zombie"][0] == (1, 1) and writes["later_job"][0] == (2, 1)
    assert writes["holder"][1] != writes["zombie"][1] and writes["twin"][0] == writes["holder"][0]


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_transfer_check_wants_one_key_per_deposit_that_every_attempt_of_the_job_shares(tmp_path, lang):
    def keyed(ledger, job):
        ledger.deposit("alice", -10, job=job, key=f"job-{job.id}-from")
        ledger.deposit("bob", 10, job=job, key=f"job-{job.id}-to")

    def one_key(ledger, job):  # the key of the lesson's deposit, for both: bob's is taken for a repeat
        ledger.deposit("alice", -10, job=job, key=f"job-{job.id}")
        ledger.deposit("bob", 10, job=job, key=f"job-{job.id}")

    def per_attempt(ledger, job):
        ledger.deposit("alice", -10, job=job, key=f"job-{job.id}-{job.attempts}-from")
        ledger.deposit("bob", 10, job=job, key=f"job-{job.id}-{job.attempts}-to")

    def swallowing(ledger, job):  # catching everything does not hide the crash
        try:
            keyed(ledger, job)
        except Exception:
            pass

    assert exercises.check_idempotent_transfer(keyed, tmp_path / "a.db", lang).startswith(
        text("check_right", lang, detail="")
    )
    assert exercises.check_idempotent_transfer(swallowing, tmp_path / "e.db", lang).startswith(
        text("check_right", lang, detail="")
    )
    assert " 0" in exercises.check_idempotent_transfer(one_key, tmp_path / "b.db", lang)  # bob got nothing
    assert "-40" in exercises.check_idempotent_transfer(per_attempt, tmp_path / "c.db", lang)
    assert exercises.check_idempotent_transfer(lambda ledger, job: None, tmp_path / "d.db", lang) == text(
        "check_todo", lang
    )


def test_a_pause_the_database_survives_can_still_outlast_the_worker_s_own_deadline():
    # A 7 s lease, its beat due at 7/3 s coming 4.5 s late: at 6.83 s the database still holds the
    # job (lease_until is 7), but the worker gave the lease up at 0.9 * 7 = 6.3 s after the claim.
    clock = ManualClock(start=0.0)
    with Queue(":memory:", clock=clock) as q:
        q.enqueue("pause")
        job = q.claim("w", lease=7)
        clock.advance(7 / 3 + 4.5)
        assert q.get(job.id).lease_until > clock()
    assert not exercises.lease_survives(7, 4.5)
    assert exercises.lease_survives(8, 4.5)  # 8/3 + 4.5 = 7.17 < 0.9 * 8 = 7.2
    assert exercises.shortest_lease({0.5: 100, 4.5: 2}) == 8


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_lease_size_check_wants_the_worker_s_deadline_not_only_the_database_s(lang):
    def workers_view(pauses):  # the beat, sent L/3 + P after the last, must beat 0.9 L
        return math.floor(max(pauses) / (0.9 - 1 / 3)) + 1

    def databases_view(pauses):  # the beat must land before L: L > 1.5 P
        return math.floor(1.5 * max(pauses)) + 1

    assert exercises.check_lease_size(workers_view, lang).startswith(text("check_right", lang, detail=""))
    wrong = exercises.check_lease_size(databases_view, lang)
    assert wrong.startswith(text("check_wrong", lang, detail="")) and "= 7" in wrong and " 8" in wrong
    assert exercises.check_lease_size(lambda pauses: None, lang) == text("check_todo", lang)
    assert "ZeroDivisionError" in exercises.check_lease_size(lambda pauses: 1 / 0, lang)


def test_a_crashed_job_waits_its_lease_a_reaper_tick_its_backoff_and_a_poll():
    assert exercises.crashed_job_wait(7, 1, 1, 60) == pytest.approx(7 + 1 + 1 + 1)
    assert exercises.crashed_job_wait(10, 3, 1, 60) == pytest.approx(10 + 1 + 4 + 1)
    assert exercises.crashed_job_wait(10, 9, 1, 60) == pytest.approx(10 + 1 + 60 + 1)  # 2**8 capped


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_wait_check_wants_the_backoff_of_the_attempt_that_crashed(lang):
    def right(lease, attempt, base, cap):
        return lease + 1 + min(cap, base * 2 ** (attempt - 1)) + 1

    def first_attempt_only(lease, attempt, base, cap):  # the lesson's sum, with a first attempt's backoff
        return lease + 1 + base + 1

    assert exercises.check_crash_wait(right, lang).startswith(text("check_right", lang, detail=""))
    wrong = exercises.check_crash_wait(first_attempt_only, lang)
    assert wrong.startswith(text("check_wrong", lang, detail="")) and "3" in wrong
    assert exercises.check_crash_wait(lambda *a: None, lang) == text("check_todo", lang)
    assert "ZeroDivisionError" in exercises.check_crash_wait(lambda *a: 1 / 0, lang)


# -- lesson 8: a rule of the checker -----------------------------------------------------------------


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
    assert [e["kind"] for e in clean if e["job"] == 3] == [
        "enqueued",
        "claimed",
        "heartbeat",
        "reaped",
        "claimed",
        "completed",
    ]


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_rule_check_passes_a_right_rule_and_names_what_a_wrong_one_missed(lang):
    assert exercises.check_overlap_rule(_overlapping, lang).startswith(text("check_right", lang, detail=""))
    missed = exercises.check_overlap_rule(_ignores_heartbeats, lang)  # job 3's renewed lease is missed
    assert missed.startswith(text("check_wrong", lang, detail="")) and "[2]" in missed
    everything = exercises.check_overlap_rule(lambda events, lease: {e["job"] for e in events}, lang)
    assert everything.startswith(text("check_wrong", lang, detail=""))  # it fails the clean history
    assert exercises.check_overlap_rule(lambda events, lease: None, lang) == text("check_todo", lang)
    assert "ZeroDivisionError" in exercises.check_overlap_rule(lambda events, lease: 1 / 0, lang)
