"""Lesson 8, exercise 3: a fault the reader writes, run on real workers against section 2's three handlers."""

from __future__ import annotations

import pytest

from leaselab import lessons
from leaselab.chaos import proof
from leaselab.chaos.texts import text
from leaselab.lessons.predict import QUESTIONS
from tests.test_proof import KEYED, KEYED_PER_ATTEMPT, SKIPS_RETRIES

# Section 2's handlers, by the names the "Your turn" lesson gives them (notebooks/src/*-your-turn.py).
SECTION_TWO = {"KEYED": KEYED, "SKIPS_RETRIES": SKIPS_RETRIES, "KEY_PER_ATTEMPT": KEYED_PER_ATTEMPT}
# The answer's fault: the first attempt of job 2, frozen until another attempt has finished the job.
FREEZE_JOB_2 = """
if job.id == 2 and job.attempts == 1:
    gates.freeze_until_done_by_another(job)
"""


def _check(fault: str, at: str, folder, lang: str = "en") -> proof.FaultCheck:
    return proof.check_fault(fault, at, SECTION_TWO, folder, lang)


def test_a_freeze_before_the_payment_breaks_only_the_key_per_attempt_and_a_kept_guess_of_that_is_right(tmp_path):
    guess = lessons.predict("l7_ex3", "en", answer="KEY_PER_ATTEMPT", folder=tmp_path)
    found = _check(FREEZE_JOB_2, "before", tmp_path / "run")
    assert found.lines == (
        "KEYED: job 2 ran again, and each account got 10 exactly once",
        # The zombie pays after the retry skipped: once, though not by the attempt that finished the job.
        "SKIPS_RETRIES: job 2 ran again, and each account got 10 exactly once",
        "KEY_PER_ATTEMPT: job 2 ran again, and account a2 got 20, not 10",
        "Your fault breaks: KEY_PER_ATTEMPT",
    )
    assert found.broken == "KEY_PER_ATTEMPT"
    assert guess.right(found.broken)
    assert str(guess.revealed(found.broken)) == (
        "The run says: KEY_PER_ATTEMPT only. Your guess: KEY_PER_ATTEMPT only. Right."
    )


def test_a_freeze_after_the_payment_is_checked_in_russian_and_a_wrong_guess_is_told_so(tmp_path):
    guess = lessons.predict("l7_ex3", "ru", answer="SKIPS_RETRIES+KEY_PER_ATTEMPT", folder=tmp_path)
    found = _check(FREEZE_JOB_2.replace("job.id == 2", "job.id == 3"), "after", tmp_path / "run", "ru")
    assert found.lines == (
        "KEYED: повторная попытка была у задачи 3, и каждый счёт получил 10 ровно один раз",
        "SKIPS_RETRIES: повторная попытка была у задачи 3, и каждый счёт получил 10 ровно один раз",
        "KEY_PER_ATTEMPT: повторная попытка была у задачи 3, и счёт a3 получил 20, а не 10",
        "Ваш сбой ломает: KEY_PER_ATTEMPT",
    )
    assert not guess.right(found.broken)
    assert str(guess.revealed(found.broken)) == (
        "Правильный ответ: только KEY_PER_ATTEMPT. Ваш прогноз: SKIPS_RETRIES и KEY_PER_ATTEMPT. "
        "На этот раз мимо; почему — в ответе ниже."
    )


@pytest.mark.parametrize(
    ("fault", "at", "key"),
    [
        ("", "before", "proof_fault_none"),  # the exercise as the lesson gives it: nothing written yet
        ("# gates.freeze_until_done_by_another(job)\n", "before", "proof_fault_none"),  # a comment freezes nothing
        ("gates.freeze_until_done_by_another(job)\n", "before", "proof_fault_every"),
        ("if job.attempts == 1\n    gates.freeze_until_done_by_another(job)\n", "after", "proof_fault_syntax"),
        (FREEZE_JOB_2, "during", "proof_fault_at"),
    ],
)
def test_a_fault_that_is_missing_unguarded_unreadable_or_nowhere_is_told_why_without_a_run(tmp_path, fault, at, key):
    found = _check(fault, at, tmp_path / "run", "en")
    assert found.broken is None
    assert len(found.lines) == 1 and found.lines[0].startswith(text("proof_wrong", "en", detail=""))
    want = text(key, "en", at=repr(at), error="").split(":")[0]
    assert want in found.lines[0]
    assert not (tmp_path / "run").exists()  # nothing was run
    # and a kept guess has nothing to be compared with
    shown = lessons.predict("l7_ex3", "en", folder=tmp_path).revealed(found.broken)
    assert str(shown) == "Nothing to compare yet: the check ran nothing."
    assert shown._repr_html_() == "<p>Nothing to compare yet: the check ran nothing.</p>"  # nothing to fold


def test_a_fault_that_never_strikes_is_told_so_after_its_run(tmp_path):
    found = _check(FREEZE_JOB_2.replace("job.id == 2", "job.id == 9"), "before", tmp_path / "run", "en")
    assert found.broken is None
    assert found.lines == (text("proof_wrong", "en", detail=text("proof_fault_missed", "en", name="KEYED")),)
    assert "no job ran a second attempt" in found.lines[0]


def test_the_handlers_must_be_section_twos_three():
    with pytest.raises(ValueError, match="handlers must be section 2's KEYED, SKIPS_RETRIES, KEY_PER_ATTEMPT"):
        proof.check_fault(FREEZE_JOB_2, "before", {"KEYED": KEYED}, "unused", "en")


def test_the_guess_offers_every_answer_the_check_can_give_each_labelled_in_both_languages():
    assert QUESTIONS["l7_ex3"].options == proof.FAULT_ANSWERS
    assert len(proof.FAULT_ANSWERS) == 2 ** len(proof.SECTION_TWO)
    for lang in ("en", "ru"):
        for option in proof.FAULT_ANSWERS:
            assert lessons.predict("l7_ex3", lang, folder="/nonexistent").say(option)
