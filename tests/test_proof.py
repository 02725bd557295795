"""Lesson 7's grade: a payment handler run, not read, under a freeze after its payment and a crash before it."""

from __future__ import annotations

import pytest

from leaselab.chaos import proof
from leaselab.chaos.texts import text

PLAIN = '''
from leaselab.lessons import effects, gates

def pay(job):
    with effects.Ledger(job.payload["ledger"]) as ledger:
        gates.fault_point(job, "before")
        ledger.deposit(job.payload["account"], job.payload["amount"], job=job)
        gates.fault_point(job, "after")
    return "paid"
'''
KEYED = PLAIN.replace("job=job)", 'job=job, key=f"pay-{job.id}")')
# A wrong fix: skip the payment on a retry. The freeze after the payment cannot catch it; the crash
# before the payment does (the retry never pays).
SKIPS_RETRIES = PLAIN.replace("        ledger.deposit", "        if job.attempts == 1:\n            ledger.deposit")
# Another wrong fix: a key per attempt is a new key every time.
KEYED_PER_ATTEMPT = PLAIN.replace("job=job)", 'job=job, key=f"pay-{job.id}-{job.attempts}")')


def test_the_plain_payment_repeats_its_effect_under_the_freeze_after_it(tmp_path):
    t = proof.trial(PLAIN, tmp_path / "t", fault="after")
    assert [(a.kind, a.job) for a in t.report.anomalies] == [("effect_repeated", 1)]
    assert t.balances["a1"] == 2 * proof.AMOUNT and not t.paid_once
    assert t.chaos.clean  # the queue itself kept every promise: at-least-once, as promised


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_a_key_per_job_is_graded_right(tmp_path, lang):
    assert proof.grade(KEYED, tmp_path, lang) == text("proof_right", lang, n=len(proof.ACCOUNTS), amount=proof.AMOUNT)


def test_skipping_retries_is_caught_by_the_crash_before_the_payment(tmp_path):
    line = proof.grade(SKIPS_RETRIES, tmp_path, "en")
    assert line == text("proof_wrong", "en", detail=text("proof_money", "en", where=text("proof_before", "en"),
                                                        account="a1", got=0, want=proof.AMOUNT))


def test_a_key_per_attempt_is_caught_by_the_freeze_after_the_payment(tmp_path):
    line = proof.grade(KEYED_PER_ATTEMPT, tmp_path, "ru")
    assert line.startswith(text("proof_wrong", "ru", detail=text("proof_after", "ru")))
    # Two different keys of one job are two effects, each once: the checker sees no repeat, the money does.
    assert "a1" in line and "20" in line


def test_a_source_without_pay_or_an_unknown_fault_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"must define pay\(job\)"):
        proof.trial("def handle(job):\n    pass\n", tmp_path / "x")
    with pytest.raises(ValueError, match="fault must be one of after, before"):
        proof.trial(PLAIN, tmp_path / "y", fault="during")
