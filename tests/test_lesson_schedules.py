"""Lesson 8's props: every interleaving of two claims on a real file, the simulator's runs as a reader sees
them, and the exercise that plants a reader's own statement."""

from __future__ import annotations

import math

import pytest

from leaselab.backends.sqlite import statements
from leaselab.lessons import exercises, schedules
from leaselab.sim import explore
from leaselab.sim.mutants import Mutant, planted


def test_orders_are_every_interleaving_of_each_workers_steps_in_their_order():
    two = list(schedules.orders(2, 2))
    assert len(two) == 6 == len(set(two))
    assert two[0] == (0, 0, 1, 1)
    assert len(list(schedules.orders(3, 2))) == math.factorial(6) // 2**3
    assert list(schedules.orders(3, 1)) == [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]


def test_the_naive_claim_gives_a_job_to_two_workers_in_every_order_where_both_look_before_either_writes(tmp_path):
    runs = schedules.every_schedule(tmp_path, "naive", 2, 1)
    assert len(runs) == 6
    bad = [[s.kind for s in r.steps] for r in runs if r.bad]
    assert bad == [["select", "select", "update", "update"]] * 4
    assert sum(r.bad for r in schedules.every_schedule(tmp_path, "naive", 3, 1)) == 72
    assert list(tmp_path.iterdir()) == []


def test_the_single_statement_claim_never_gives_a_job_to_two_workers(tmp_path):
    for workers, jobs in ((2, 1), (3, 1), (3, 2)):
        runs = schedules.every_schedule(tmp_path, "single", workers, jobs)
        assert len(runs) == math.factorial(workers)
        assert not any(r.bad for r in runs)


def test_a_bad_interleaving_reads_as_numbered_steps_in_both_languages(tmp_path):
    first = next(r for r in schedules.every_schedule(tmp_path, "naive", 2, 1) if r.bad)
    assert schedules.numbered_steps(first) == [
        "1. A: SELECT sees job 1",
        "2. B: SELECT sees job 1",
        "3. A: UPDATE takes job 1, attempt 1",
        "4. B: UPDATE takes job 1, attempt 2",
    ]
    assert schedules.numbered_steps(first, "ru")[3] == "4. B: UPDATE забирает задачу 1, попытка 2"


def test_every_schedule_refuses_a_claim_it_does_not_know(tmp_path):
    with pytest.raises(ValueError, match="claim must be one of"):
        schedules.every_schedule(tmp_path, "optimistic")


@pytest.fixture(scope="module")
def zombie() -> tuple[explore.Run, explore.Run]:
    """The lesson's witness (unfenced_complete, shrunk) and the same schedule on the real queue."""
    with planted("unfenced_complete"):
        found, _, _ = explore.search(schedules.ZOMBIE, seed=0, schedules=3000)
        assert found is not None
        witness = explore.shrink(found, budget=schedules.SHRINK_BUDGET)
    return witness, explore.run(schedules.ZOMBIE, witness.seed, actions=witness.actions)


def test_every_line_of_the_lessons_runs_reads_in_russian(zombie):
    for run in zombie:
        for line in schedules.steps(run, "ru"):
            assert not any(w in line for w in (" holds ", " starts", "arrives", "reaped", "refused", "handler")), line
        assert schedules.verdict(run, "ru").startswith(("нарушено обещание fence:", "все обещания сдержаны"))
    assert len(schedules.steps(zombie[0])) == len(list(explore.numbered(zombie[0])))
    assert schedules.steps(zombie[0])[6] == "  7.   1001 ms  w1 reaped jobs [1]"


def test_a_russian_trace_writes_times_in_milliseconds_and_seconds_with_a_decimal_comma(zombie):
    assert schedules.steps(zombie[0], "ru")[6] == "  7.   1001 мс  reaper воркера w1 возвращает в очередь задачи [1]"
    assert schedules.trace_line("w2 pauses for 1.5s", "ru") == "w2 замирает на 1,5 с"
    assert schedules.trace_line("w1: complete met a transient fault, retrying in 0.05s", "ru") == (
        "w1: завершение натыкается на временный сбой, повтор через 0,05 с"
    )
    assert schedules.trace_line("something new", "ru") == "something new"


def test_the_timeline_of_a_run_replays_it_to_the_same_history(zombie):
    witness, fenced = zombie
    picture = schedules.timeline_of(fenced)
    assert picture.lanes == ["w1", "w2"]
    assert [(b.worker, b.attempt, b.outcome) for b in picture.bars] == [("w2", 1, "lease_lost"), ("w1", 2, "completed")]
    with planted("unfenced_complete"):
        broken = schedules.timeline_of(witness)
    # The bug's own history: the zombie's completion lands on w1's row, so the history records it as w1's.
    assert [(b.worker, b.outcome) for b in broken.bars] == [("w2", "reaped"), ("w1", "completed")]
    assert broken.bars[1].start == broken.bars[1].end


def test_edited_makes_a_mutant_of_a_statement_and_refuses_a_name_that_is_none():
    mutant = schedules.edited("COMPLETE", "x")
    assert isinstance(mutant, Mutant) and mutant.edits == ((("COMPLETE",), statements.COMPLETE, "x"),)
    with pytest.raises(ValueError, match="no statement named"):
        schedules.edited("COMPLET", "x")
    with planted(mutant):
        assert statements.COMPLETE == "x"
    assert statements.COMPLETE == mutant.edits[0][1]


def test_runs_statement_tells_the_statements_the_simulated_workers_run():
    assert schedules.runs_statement("COMPLETE") and schedules.runs_statement("HEARTBEAT_MANY")
    assert not schedules.runs_statement("HEARTBEAT")


def test_the_check_catches_a_completion_that_checks_the_token_but_not_the_status():
    copy = statements.COMPLETE.replace("status = 'running' AND ", "")
    said = exercises.check_planted(schedules.edited("COMPLETE", copy))
    assert said.startswith("caught: schedule ")
    assert said.splitlines()[-1].startswith("broken promise fence: a write was accepted")


def test_the_check_says_not_caught_for_a_change_the_specification_does_not_see():
    copy = statements.COMPLETE.replace("finished_at = :now", "finished_at = NULL")
    said = exercises.check_planted(schedules.edited("COMPLETE", copy), "ru", schedules=50)
    assert said.startswith("не поймано за 50 ")


def test_the_check_says_when_nothing_was_changed_or_the_statement_never_runs_or_breaks():
    assert "change something" in exercises.check_planted(schedules.edited("COMPLETE", statements.COMPLETE))
    assert "never run HEARTBEAT" in exercises.check_planted(schedules.edited("HEARTBEAT", "SELECT 1"))
    said = exercises.check_planted(schedules.edited("COMPLETE", statements.COMPLETE.replace("WHERE", "WHER")))
    assert said.startswith("the run failed:") and "syntax error" in said
