"""The simulator's clock faults (a host's suspend that a monotonic clock does not count, a clock's jump forward)
and the queue's durability under a power cut: what each setting promises, and what the simulator says when a
cut takes back what was acknowledged."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from leaselab.sim import explore, mutants, report
from leaselab.sim.model import Violation
from leaselab.sim.world import CLOCK_FAULTS, DEFAULT_FAULTS, FAULTS, Scenario, World

ONE_JOB = Scenario(workers=2, jobs=1, faults=CLOCK_FAULTS)


def test_a_suspend_stops_the_workers_clock_for_as_long_as_it_lasts_and_a_jump_steps_it_forward():
    world = World(ONE_JOB)
    try:
        w1, w2 = world.workers["w1"], world.workers["w2"]
        world.step(("claim", "w1"))
        world.step(("suspend", "w1", 1.5))
        assert world.t == 0.0 and ("suspend", "w1", 1.5) in world._faults_of("w1", False)
        asleep = w1.clock()
        while world.t < 1.0:
            world.step(("tick",))
        assert w1.paused() and w1.clock() == asleep  # a second of the world's time, none on its clock
        assert w2.clock() == world.t
        assert w1.reading(2.0) == pytest.approx(0.5)  # after the suspend its clock runs again, 1.5 s behind
        assert w1.at(0.5) == pytest.approx(2.0)
        # No clock fault is struck at a worker already asleep: its clock's history stays one shift at a time.
        assert not any(a[0] in CLOCK_FAULTS and a[1] == "w1" for a in world.enabled())
        world.step(("jump", "w2", 1.0))
        assert w2.clock() == pytest.approx(world.t + 1.0)
        assert w2.at(w2.clock() + 0.5) == pytest.approx(world.t + 0.5)
    finally:
        world.close()


def test_after_a_suspend_past_its_lease_the_real_worker_writes_as_a_zombie_and_the_fence_refuses_it():
    # w1's clock stood still while its host slept, so on waking its own deadline says the lease still holds:
    # its handler's effect lands after the lease ended (noted, not a finding: no check of its own could see
    # it), and its completion reaches the queue after w2's reaper took the job back and w2 claimed it.
    run = explore.run(
        ONE_JOB, 0, actions=[("claim", "w1"), ("suspend", "w1", 1.5), ("expire",), ("reap", "w2"), ("claim", "w2")]
    )
    assert run.violation is None, run.violation
    trace = "\n".join(run.trace)
    assert "w1's host suspends for 1.5s: its monotonic clock stands still" in trace
    assert "w2 reaped job 1" in trace and "w2 holds job 1 (attempt 2)" in trace
    assert "w1's handler of job 1 writes its effect after its lease ended: its clock did not count the suspend" in trace
    assert "w1: job 1 refused: lease lost" in trace and "w2: job 1 completed" in trace
    assert trace.index("w1: job 1 refused") > trace.index("w2 holds job 1 (attempt 2)")


def test_a_pause_as_long_as_that_suspend_lets_the_workers_own_deadline_stop_it_first():
    run = explore.run(
        Scenario(workers=2, jobs=1, faults=("pause",)),
        0,
        actions=[("claim", "w1"), ("pause", "w1", 1.5), ("expire",), ("reap", "w2"), ("claim", "w2")],
    )
    assert run.violation is None
    trace = "\n".join(run.trace)
    assert "writes its effect after its lease ended" not in trace and "w1: job 1 refused" not in trace
    assert "w1 drops job 1's outcome: its lease is lost" in trace


def test_a_forward_jump_makes_the_worker_give_its_lease_up_early_and_the_job_runs_again_with_no_finding():
    run = explore.run(ONE_JOB, 0, actions=[("claim", "w1"), ("jump", "w1", 1.0)])
    assert run.violation is None, run.violation
    trace = "\n".join(run.trace)
    assert "w1's clock jumps 1s forward" in trace
    assert "w1's handler of job 1 finds its lease gone on its own clock" in trace
    assert "job 1 (attempt 2)" in trace and "job 1 completed" in trace


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(workers=2, jobs=3, faults=("crash", "delay", *CLOCK_FAULTS)),
        Scenario(workers=3, jobs=4, slots=2, skew=0.03, faults=DEFAULT_FAULTS + CLOCK_FAULTS),
        Scenario(workers=2, jobs=4, timeout=1.2, faults=(*CLOCK_FAULTS, "hang", "lose")),
    ],
    ids=["clocks-crash-delay", "defaults-and-clocks", "clocks-and-hangs"],
)
def test_seeded_schedules_with_suspends_and_jumps_keep_every_promise_on_the_real_code(scenario):
    assert set(CLOCK_FAULTS) <= set(FAULTS) and not set(CLOCK_FAULTS) & set(DEFAULT_FAULTS)
    found, n, _ = explore.search(scenario, seed=300, schedules=120)
    assert found is None, "\n".join(explore.numbered(found))
    assert n == 120


def test_the_suspend_is_what_exposes_the_unfenced_completion_where_pauses_alone_do_not():
    # Without the fence in the completion, the worker's own deadline is the only guard. A pause never gets past
    # it (the worker's clock counts the pause); a suspend does, and the zombie's result is taken.
    with mutants.planted("unfenced_complete"):
        paused, n, _ = explore.search(Scenario(workers=2, jobs=3, faults=("crash", "pause")), seed=0, schedules=600)
        assert paused is None and n == 600
        found, _, _ = explore.search(
            Scenario(workers=2, jobs=3, faults=("crash", "pause", "suspend")), seed=0, schedules=600
        )
        assert found is not None and found.violation is not None and found.violation.kind == "fence"
        shrunk = explore.shrink(found, tries=300, budget=3600)
        assert shrunk.violation is not None and shrunk.violation.kind == "fence"
        suspends = [a for a in shrunk.actions if a[0] == "suspend"]
        assert suspends and len(shrunk.actions) <= 12, shrunk.actions
        # The same schedule with each suspend made a pause of the same length keeps every promise.
        as_pauses = [("pause", *a[1:]) if a[0] == "suspend" else a for a in shrunk.actions]
        assert explore.run(shrunk.scenario, shrunk.seed, actions=as_pauses).violation is None
    assert explore.run(shrunk.scenario, shrunk.seed, actions=shrunk.actions).violation is None  # fenced: held


def test_exhaustively_no_pause_gets_a_zombies_completion_past_the_workers_deadline_and_one_suspend_does():
    # Every schedule of two workers, one job and one fault, nine actions deep: with a pause, the missing fence
    # never shows (the worker's own deadline, on a clock that counts the pause, always stops it); with a
    # suspend the first few states already show it.
    with mutants.planted("unfenced_complete"):
        paused, states, _ = explore.exhaustive(Scenario(workers=2, jobs=1, faults=("pause",), max_faults=1), depth=9)
        assert paused is None and states > 1000
        found, _, _ = explore.exhaustive(Scenario(workers=2, jobs=1, faults=("suspend",), max_faults=1), depth=9)
    assert found is not None and found.violation is not None and found.violation.kind == "fence"
    assert ("suspend", "w1", 1.5) in found.actions and len(found.actions) <= 9


def test_the_clock_faults_read_back_in_russian_and_are_drawn():
    run = explore.run(ONE_JOB, 0, actions=[("claim", "w1"), ("suspend", "w1", 1.5), ("jump", "w2", 1.0)])
    ru = "\n".join(report.steps(run, "ru"))
    assert "хост w1 уходит в сон на 1,5 с, и монотонные часы воркера всё это время стоят" in ru
    assert "часы w2 скачком уходят вперёд на 1 с" in ru
    assert "suspend" not in ru and "jumps" not in ru
    data = report.spans(run)
    assert {"worker": "w1", "at": 0.0, "kind": "suspend"} in data["points"]
    assert any(f["worker"] == "w1" and f["kind"] == "pause" for f in data["faults"])
    drawn = report.drawing(run)
    assert "S" in drawn[0] and "J" in drawn[1]


# -- the queue's durability under a power cut ---------------------------------------------------------------


def _power(durability: str) -> Scenario:
    return Scenario(workers=2, jobs=3, faults=("crash", "power"), durability=durability)


def _kind(scenario: Scenario, actions: list) -> str | None:
    run = explore.run(scenario, 0, actions=actions)
    return None if run.violation is None else run.violation.kind


def test_at_full_a_power_cut_keeps_every_acknowledged_write():
    found, n, _ = explore.search(_power("full"), seed=0, schedules=120)
    assert found is None and n == 120
    assert _kind(_power("full"), [("claim", "w1"), ("power",)]) is None


def test_at_normal_a_power_cut_takes_back_an_acknowledged_claim_and_the_simulator_names_it_shrunk():
    found, _, _ = explore.search(_power("normal"), seed=0, schedules=200)
    assert found is not None and found.violation is not None and found.violation.kind == "acknowledged_lost"
    shrunk = explore.shrink(found, tries=200, budget=3600)
    assert shrunk.violation is not None and shrunk.violation.kind == "acknowledged_lost"
    assert ("power",) in shrunk.actions and len(shrunk.actions) <= 3, shrunk.actions
    assert "durability='normal'" in shrunk.violation.message and "acknowledged" in shrunk.violation.message
    assert _kind(_power("full"), shrunk.actions) is None  # the same schedule at "full": nothing lost
    # A cut with nothing acknowledged since the enqueues (synced before the schedule began) takes nothing back.
    assert _kind(_power("normal"), [("power",)]) is None


def test_at_normal_a_claim_a_checkpoint_synced_survives_the_cut_and_nothing_is_reported_lost():
    # The setting promises nothing, but a disk may keep more than it promised: then nothing was taken back.
    world = World(_power("normal"))
    try:
        world.step(("claim", "w1"))
        world._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        world.step(("power",))
        assert [row["status"] for row in world._rows().values()] == ["pending", "running", "pending"]
    finally:
        world.close()


@pytest.mark.parametrize("durability, kind", [("full", "lost_on_power_cut"), ("normal", "torn_on_power_cut")])
def test_a_state_after_the_cut_that_no_commit_left_is_named_by_what_the_setting_promised(durability, kind):
    # A write behind the queue's back, synced: after the cut the table holds a row no call ever made.
    world = World(_power(durability))
    try:
        world.step(("claim", "w1"))
        world._db.execute("UPDATE jobs SET priority = 7 WHERE id = 1")
        world._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with pytest.raises(Violation) as caught:
            world.step(("power",))
    finally:
        world.close()
    assert caught.value.kind == kind and "job 1 has priority 7" in caught.value.message


def _simulate(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "leaselab", "simulate", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def test_simulate_takes_the_durability_and_the_clock_faults_by_name(tmp_path):
    normal = _simulate(
        "--faults", "crash,power", "--durability", "normal", "--schedules", "100", "--json", cwd=tmp_path
    )
    assert normal.returncode == 1, normal.stderr
    result = json.loads(normal.stdout)
    assert result["scenario"]["durability"] == "normal" and result["violation"]["kind"] == "acknowledged_lost"
    assert len(result["witness"]["actions"]) <= 3
    replayed = _simulate("--replay", "leaselab-witness.json", cwd=tmp_path)
    assert replayed.returncode == 1 and "the trace is the saved one, step for step" in replayed.stdout
    ru = _simulate(
        "--faults", "crash,power", "--durability", "normal", "--schedules", "100", "--lang", "ru", cwd=tmp_path
    )
    assert ru.returncode == 1
    assert "очередь лежит на диске, который может остаться без питания, durability='normal'" in ru.stdout
    assert "отключение питания отняло подтверждённую запись (при durability='normal' это допустимо)" in ru.stdout
    clocks = _simulate("--faults", "suspend,jump,crash", "--schedules", "40", cwd=tmp_path)
    assert clocks.returncode == 0, clocks.stdout + clocks.stderr
    assert "suspend, jump, crash" in clocks.stdout


@pytest.mark.parametrize(
    "args, said",
    [
        (["--durability", "fsync"], "--durability must be one of full, normal, not 'fsync'"),
        (["--durability", "normal"], "--durability matters only where the power can fail: add power to --faults"),
        (["--durability", "normal", "--faults", "crash"], "add power to --faults"),
    ],
)
def test_a_bad_or_pointless_durability_is_a_usage_error(tmp_path, args, said):
    done = _simulate(*args, cwd=tmp_path)
    assert done.returncode == 2 and said in done.stderr and done.stdout == ""
    ru = _simulate(*args, "--lang", "ru", cwd=tmp_path)
    assert ru.returncode == 2 and "--durability" in ru.stderr and "must" not in ru.stderr


def test_a_reap_reads_as_words_in_both_languages_not_as_a_python_list():
    one = report.read_step("   1.001  w2 reaped job 1")
    three = report.read_step("   1.001  w2 reaped jobs 1, 2, 3")
    assert one.render("en") == "w2 reaped job 1" and three.render("en") == "w2 reaped jobs 1, 2, 3"
    assert one.render("ru") == "w2 вернул в очередь задачу 1"
    assert three.render("ru") == "w2 вернул в очередь задачи 1, 2, 3"
