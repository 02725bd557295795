"""Which of a chaos run's faults hit a running attempt, and a run none of whose faults did says it proved nothing.

The overlap is computed on hand-made histories first (every boundary), then on two real short runs on
SQLite whose nemesis is held back by the test: one begins only once every job is done (its faults can
hit nothing: the toothless verdict), one while the one job is held running by the demo's gate
(its one fault must be seen to hit it, or the faults' times were put on the wrong clock).
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pytest

from leaselab.chaos import plan, run
from leaselab.chaos.nemesis import Applied, Nemesis
from leaselab.chaos.overlap import Attempt, attempts, hit
from leaselab.chaos.run import ChaosResult
from leaselab.chaos.schedule import Step
from leaselab.check import Report
from tests.support.polling import wait_until

# The module, not the function ``leaselab.chaos.run`` that shadows it as the package's attribute.
RUN_MODULE = importlib.import_module("leaselab.chaos.run")
ORIGIN = 1000.0  # the queue's clock when the nemesis began


def event(n: int, job: int, kind: str, at: float, worker: str | None = None, attempt: int = 1) -> dict:
    return {"id": n, "job_id": job, "kind": kind, "at": at, "worker": worker, "token": None, "attempt": attempt}


# Job 1 runs on w1 from 1001 to 1003. Job 2 runs on w2 from 1002 until it is reaped at 1006, then on
# w1 from 1007 to 1008. Nothing runs after 1008.
HISTORY = [
    event(1, 1, "enqueued", 1000.0),
    event(2, 2, "enqueued", 1000.0),
    event(3, 1, "claimed", 1001.0, "w1"),
    event(4, 2, "claimed", 1002.0, "w2"),
    event(5, 1, "heartbeat", 1002.5, "w1"),
    event(6, 1, "completed", 1003.0, "w1"),
    event(7, 2, "reaped", 1006.0, "w1"),
    event(8, 2, "lease_lost", 1006.5, "w2"),
    event(9, 2, "claimed", 1007.0, "w1", attempt=2),
    event(10, 2, "completed", 1008.0, "w1", attempt=2),
]


def applied(
    at: float,
    fault: str,
    process: str | None,
    lasts: float = 0.0,
    missed: str | None = None,
    until: float | None = None,
) -> Applied:
    slot = None if process is None else process.split("-")[0]
    return Applied(Step(at, fault, slot, lasts), at, process, missed, until)


def test_an_attempt_runs_from_its_claim_to_the_event_that_ended_it():
    assert attempts(HISTORY) == [
        Attempt(1, 1, "w1", 1001.0, 1003.0),
        Attempt(2, 1, "w2", 1002.0, 1006.0),  # the reap ends it, though w2 wrote on (lease_lost)
        Attempt(2, 2, "w1", 1007.0, 1008.0),
    ]
    still = attempts([*HISTORY, event(11, 3, "claimed", 1009.0, "w2-2", attempt=1)])
    assert still[-1] == Attempt(3, 1, "w2-2", 1009.0, math.inf)


@pytest.mark.parametrize(
    "fault, hits",
    [
        (applied(0.5, "kill", "w1"), []),  # before any claim
        (applied(0.5, "pause", "w1", lasts=0.4), []),  # over before any claim
        (applied(20.0, "kill", "w1"), []),  # after every attempt ended
        (applied(20.0, "server-crash", None, lasts=0.3), []),  # the server down after every attempt ended
        (applied(1.0, "kill", "w1"), [(1, 1)]),  # at the very instant of the claim: hit
        (applied(3.0, "kill", "w1"), []),  # at the very instant of the completion: it ran no more
        (applied(6.0, "kill", "w2"), []),  # at the instant of the reap
        (applied(1.5, "pause", "w2", lasts=0.5), [(2, 1)]),  # its last instant is the claim's
        (applied(0.5, "pause", "w1", lasts=3.0), [(1, 1)]),  # begun before the claim, still on after
        (applied(2.5, "kill", "w3"), []),  # another worker's attempts were running, not w3's
        (applied(2.5, "drop-reply", "w1"), [(1, 1)]),
        (applied(2.5, "server-crash", None, lasts=0.1), [(1, 1), (2, 1)]),  # a server crash hits every one
        (applied(6.5, "pause", "w1", lasts=2.0), [(2, 2)]),  # w1's second attempt, of the reaped job
        # A pause begun late is cut short by the next step on its slot: it ends when it really ended.
        (applied(6.0, "pause", "w1", lasts=1.5, until=6.9), []),
        (applied(6.0, "pause", "w1", lasts=0.5, until=7.0), [(2, 2)]),  # ended later than planned
        (applied(2.9, "server-crash", None, until=3.2), [(1, 1), (2, 1)]),  # down until the server was back
        (applied(3.5, "server-crash", None, until=6.9), [(2, 1)]),
        (applied(2.5, "kill", "w1", missed="WorkerNotRunning: gone"), []),  # not applied: hit nothing
    ],
)
def test_a_fault_hits_the_attempts_its_process_was_running_while_it_lasted(fault, hits):
    assert [(a.job, a.attempt) for a in hit(fault, ORIGIN, attempts(HISTORY))] == hits


def test_a_replacement_process_is_not_the_process_it_replaced():
    running = attempts([event(1, 1, "claimed", 1001.0, "w1-2")])
    assert hit(applied(2.0, "kill", "w1"), ORIGIN, running) == []
    assert len(hit(applied(2.0, "kill", "w1-2"), ORIGIN, running)) == 1
    assert len(hit(applied(2.0, "server-crash", None), ORIGIN, running)) == 1  # still running at the end


# -- what a run says ---------------------------------------------------------------------------------

COUNTS = {"jobs": 5, "attempts": 5, "repeated_runs": 0, "refused_zombies": 0, "reaps": 0, "refused_writes": 0}


def result(hits: list[int], *, report: Report | None = None) -> ChaosResult:
    """A run of ``len(hits)`` kills, the n-th of which hit ``hits[n]`` attempts."""
    schedule = plan(1, seconds=1, workers=1, lease=1.0, faults=("kill",))
    return ChaosResult(
        schedule=schedule,
        report=report or Report(anomalies=[], counts={**COUNTS, "effects": 0}),
        applied=[applied(0.1 * i, "kill", "w1") for i in range(len(hits))],
        hits=hits,
        drained=True,
        drain_timeout=60.0,
        missing=0,
        stats={"done": 5},
        enqueued=5,
        workers=[],
        killed=[],
        folder=Path("run"),
        seconds=1.0,
    )


@pytest.mark.parametrize(
    "hits, en, ru",
    [
        ([1, 0, 2], "of 3 faults, 2 hit a running attempt", "из 3 сбоев на выполняющуюся попытку пришлись 2"),
        ([1], "of 1 fault, 1 hit a running attempt", "из 1 сбоя на выполняющуюся попытку пришёлся 1"),
        ([0] * 20 + [1], "of 21 faults, 1 hit a running attempt", "из 21 сбоя на выполняющуюся попытку пришёлся 1"),
        ([1] * 5, "of 5 faults, 5 hit a running attempt", "из 5 сбоев на выполняющуюся попытку пришлось 5"),
        ([0, 0], "of 2 faults, 0 hit a running attempt", "из 2 сбоев на выполняющуюся попытку пришлось 0"),
    ],
)
def test_the_result_says_how_many_of_its_faults_hit_a_running_attempt_in_either_language(hits, en, ru):
    done = result(hits)
    assert done.faults_overlapping_attempts == sum(1 for n in hits if n)
    assert en in done.render("en").splitlines() and ru in done.render("ru").splitlines()
    assert done.to_json()["faults_overlapping_attempts"] == done.faults_overlapping_attempts
    assert [a["attempts_hit"] for a in done.to_json()["applied"]] == hits


def test_a_clean_run_whose_faults_hit_nothing_or_that_had_none_says_it_proved_nothing_about_faults():
    tally_en, tally_ru = (
        "5 jobs, 0 repeated runs, 0 zombies refused",
        "5 задач, 0 повторных запусков, 0 зомби получили отказ",
    )
    toothless, none = result([0, 0]), result([])
    assert toothless.clean and none.clean  # no promise broken: exit 0, as for any clean run
    assert toothless.verdict("en") == (
        f"every promise held, but no fault hit a running attempt: this run proved nothing about faults ({tally_en})"
    )
    assert toothless.verdict("ru") == (
        "все обещания сдержаны, но ни один сбой не пришёлся на выполняющуюся попытку: "
        f"о сбоях этот прогон ничего не доказал ({tally_ru})"
    )
    assert none.verdict("en") == (
        f"every promise held, but no fault was applied: this run proved nothing about faults ({tally_en})"
    )
    assert none.verdict("ru") == (
        "все обещания сдержаны, но не было применено ни одного сбоя: о сбоях этот прогон ничего не доказал "
        f"({tally_ru})"
    )
    for done in (toothless, none):
        for lang, bare in (("en", "every promise held:"), ("ru", "все обещания сдержаны:")):
            shown = done.render(lang).splitlines()
            assert done.verdict(lang) in shown and not [line for line in shown if line.startswith(bare)]
    # One fault that hit is enough for the checker's own headline.
    assert result([0, 1]).verdict("en") == f"every promise held: {tally_en}"


# -- real runs ---------------------------------------------------------------------------------------

JOBS = 5


class NemesisAfterTheJobs(Nemesis):
    """The run's own nemesis, begun only once every job is done: its faults come when nothing runs."""

    def run(self) -> list[Applied]:
        wait_until(lambda: self.fleet.queue.stats().get("done") == JOBS, message="every job done")
        return super().run()


def test_a_real_run_whose_faults_all_come_after_the_jobs_finished_says_it_proved_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(RUN_MODULE, "Nemesis", NemesisAfterTheJobs)
    done = run(
        tmp_path / "q.db",
        "leaselab.harness.demo:task",
        workers=2,
        jobs=JOBS,
        payload={"seconds": 0.01},
        seconds=2.0,
        faults=("kill", "pause"),
        seed=3,
        folder=tmp_path / "run",
    )
    faults = sum(done.fault_counts().values())
    assert faults >= 2 and done.clean, done.render()
    assert done.faults_overlapping_attempts == 0 and done.to_json()["faults_overlapping_attempts"] == 0
    en, ru = done.render("en").splitlines(), done.render("ru").splitlines()
    assert f"of {faults} {'fault' if faults == 1 else 'faults'}, 0 hit a running attempt" in en
    # The demo task records no effect here: the same headline says repeated effects were not checked.
    assert [line for line in en if line.startswith("every promise held")] == [
        "every promise held, but no fault hit a running attempt: this run proved nothing about faults "
        f"({JOBS} jobs, 0 repeated runs, 0 zombies refused); but repeated effects were NOT checked: no effect was "
        "recorded (call leaselab.check.record_effect(job, key=...) in the handler once its effect took hold, and "
        "give check --effects FILE; chaos names the file in $LEASELAB_EFFECTS)"
    ]
    assert [line for line in ru if line.startswith("все обещания сдержаны")][0].startswith(
        "все обещания сдержаны, но ни один сбой не пришёлся на выполняющуюся попытку: о сбоях этот прогон "
        f"ничего не доказал ({JOBS} задач, 0 повторных запусков, 0 зомби получили отказ); но повторы действий НЕ "
        "проверялись"
    )


def test_a_real_run_whose_fault_comes_while_a_job_runs_counts_it_as_a_hit(tmp_path, monkeypatch):
    gate = tmp_path / "gate"

    class NemesisOnAHeldJob(Nemesis):
        """Begun once the one job runs; the job's first attempt is held until every fault is over."""

        def run(self) -> list[Applied]:
            wait_until(lambda: self.fleet.queue.stats().get("running") == 1, message="the job running")
            try:
                return super().run()
            finally:
                gate.touch()

    monkeypatch.setattr(RUN_MODULE, "Nemesis", NemesisOnAHeldJob)
    # One pause, of the one worker, within the first second (and it lasts past the lease).
    assert [s.fault for s in plan(1, seconds=1.0, workers=1, lease=1.0, faults=("pause",)).steps] == ["pause"]
    done = run(
        tmp_path / "q.db",
        "leaselab.harness.demo:task",
        workers=1,
        jobs=1,
        payload={"hold": str(gate)},
        seconds=1.0,
        faults=("pause",),
        seed=1,
        folder=tmp_path / "run",
    )
    assert done.clean and done.fault_counts() == {"pause": 1}, done.render()
    assert done.hits == [1] and done.faults_overlapping_attempts == 1
    [pause] = done.applied
    assert pause.until == pytest.approx(pause.at + pause.step.lasts, abs=0.5)  # ended on time, and recorded
    assert "of 1 fault, 1 hit a running attempt" in done.render("en").splitlines()
    assert done.verdict("en").startswith("every promise held: 1 job")
