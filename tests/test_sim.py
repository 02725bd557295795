"""The simulator: deterministic runs, replays, shrinking, exhaustive exploration, and the worker's
decisions shared with the real worker (a change there changes what the simulator sees)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from leaselab.sim import explore, mutants
from leaselab.sim.errors import MutantStale, UnknownMutant
from leaselab.sim.world import DEFAULT_FAULTS, FAULTS, NEEDS_TIMEOUT, Scenario
from leaselab.worker import decisions

SCENARIO = Scenario(workers=3, jobs=4, slots=2, skew=0.03)

_TRACE = """
import json, sys
from leaselab.sim import explore
from leaselab.sim.world import Scenario
run = explore.run(Scenario(workers=3, jobs=4, slots=2, skew=0.03), 11)
print(json.dumps(run.trace))
"""


def test_the_same_seed_gives_a_byte_identical_trace_here_and_in_another_process():
    first, second = explore.run(SCENARIO, 11), explore.run(SCENARIO, 11)
    assert first.trace == second.trace and len(first.trace) > 10
    other = subprocess.run([sys.executable, "-c", _TRACE], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(other.stdout) == first.trace
    assert explore.run(SCENARIO, 12).trace != first.trace


def test_replaying_a_runs_actions_reproduces_its_trace():
    for seed in range(5):
        found = explore.run(SCENARIO, seed)
        again = explore.run(SCENARIO, seed, actions=found.actions)
        assert again.trace == found.trace and again.actions == found.actions


def test_a_failing_run_replays_to_the_same_violation():
    with mutants.planted("unfenced_complete"):
        found, _, _ = explore.search(explore.PORTFOLIO[0], seed=0, schedules=500)
        assert found is not None and found.violation is not None
        again = explore.run(found.scenario, found.seed, actions=found.actions)
    assert again.violation is not None and str(again.violation) == str(found.violation)
    assert again.trace == found.trace


def test_shrinking_keeps_the_kind_of_violation_and_never_grows():
    with mutants.planted("unfenced_fail"):
        found, _, _ = explore.search(explore.PORTFOLIO[0], seed=0, schedules=500)
        assert found is not None and found.violation is not None
        small = explore.shrink(found, budget=600, tries=300)
        assert small.violation is not None and small.violation.kind == found.violation.kind
        assert len(small.actions) < len(found.actions)
        replayed = explore.run(small.scenario, small.seed, actions=small.actions)
    assert replayed.violation is not None and replayed.violation.kind == found.violation.kind


def test_numbered_prints_the_trace_as_numbered_steps():
    lines = list(explore.numbered(explore.run(SCENARIO, 1)))
    assert lines[0].startswith("  1. ") and "w1 starts" in lines[0]


@pytest.mark.parametrize("scenario", explore.PORTFOLIO, ids=lambda s: f"{s.workers}w{s.jobs}j{s.slots}s")
def test_the_real_code_keeps_every_promise_in_every_portfolio_scenario(scenario):
    found, n, steps = explore.search(scenario, seed=1000, schedules=60)
    assert found is None, "\n".join(explore.numbered(found))
    assert n == 60 and steps > 60


def test_hunt_rotates_through_the_portfolio_and_reports_the_effort():
    clean = explore.hunt(seed=5, schedules=8, seconds=None)
    assert clean.run is None and clean.found is None
    assert clean.schedules == 8 and clean.steps > 8 and clean.scenarios == explore.PORTFOLIO
    with mutants.planted("claim_takes_running"):
        caught = explore.hunt(seed=5, schedules=200, seconds=None, shrink_tries=200, shrink_seconds=600)
    assert caught.run is not None and caught.found is not None and caught.run.violation is not None
    assert len(caught.run.actions) <= len(caught.found.actions)


def test_an_always_failing_job_ends_dead_with_its_attempts_spent():
    scenario = Scenario(workers=1, jobs=3, faults=(), max_faults=0)
    assert scenario.job_specs()[2]["fails"] == scenario.max_attempts
    run = explore.run(scenario, 0, actions=[])  # the drain alone: every step taken when it is due
    assert run.violation is None
    assert any("job 3 failed -> dead" in line for line in run.trace)


# A scope small enough to cover in seconds: two workers, one job, one call held in flight.
SMALL = Scenario(workers=2, jobs=1, faults=("delay",), max_faults=1)


def test_exhaustive_exploration_covers_a_small_scope_and_the_real_code_holds():
    found, states, schedules = explore.exhaustive(SMALL, depth=8)
    assert found is None
    assert states > 100 and schedules > 50 and states >= schedules


def test_exhaustive_exploration_finds_the_zombies_unfenced_completion():
    with mutants.planted("unfenced_complete"):
        found, states, schedules = explore.exhaustive(SMALL, depth=9)
    assert found is not None and found.violation is not None and found.violation.kind == "fence"
    assert ("delay", "w1") in found.actions or ("delay", "w2") in found.actions
    assert states > 0 and schedules > 0


def test_a_change_to_a_worker_decision_changes_what_the_simulator_sees(monkeypatch):
    frozen = [("claim", "w1"), ("pause", "w1", 1.5)]
    assert explore.run(SMALL, 0, actions=frozen).violation is None
    monkeypatch.setattr(decisions, "own_deadline", lambda sent, seconds, margin: float("inf"))
    broken = explore.run(SMALL, 0, actions=frozen)
    assert broken.violation is not None and broken.violation.kind == "effect_without_lease"


def test_planted_takes_a_mutant_of_your_own_and_undoes_it():
    from leaselab.backends.sqlite import statements

    before = statements.COMPLETE
    mine = mutants.Mutant("mine", "a completion without its fence", ((("COMPLETE",), " AND token = :token", ""),))
    with mutants.planted(mine) as planted:
        assert planted is mine and " AND token = :token" not in statements.COMPLETE
    assert statements.COMPLETE == before


def test_a_mutant_whose_text_is_gone_is_stale_and_names_it():
    gone = mutants.Mutant("gone", "nothing", ((("COMPLETE",), "no such text", ""),))
    with pytest.raises(MutantStale, match="no such text"), mutants.planted(gone):
        pass
    nowhere = mutants.Mutant("nowhere", "nothing", ((("NO_SUCH_STATEMENT",), "x", ""),))
    with pytest.raises(MutantStale, match="NO_SUCH_STATEMENT"), mutants.planted(nowhere):
        pass
    with pytest.raises(UnknownMutant, match="no mutant named"):
        mutants.find("no_such_mutant")


# -- a power cut: the queue on APSW's volatile disk, at durability "full" ------------------------------

POWER = Scenario(workers=2, jobs=3, faults=FAULTS)


def _claim_then_cut() -> list[str]:
    from leaselab.sim.model import Violation
    from leaselab.sim.world import World

    world = World(POWER)
    try:
        world.step(("claim", "w1"))
        world.step(("power",))
        return [row["status"] for row in world._rows().values()]
    except Violation as found:
        return [found.kind]
    finally:
        world.close()


def test_a_claim_acknowledged_at_durability_full_survives_a_power_cut_and_every_worker_dies_with_it():
    assert _claim_then_cut() == ["pending", "running", "pending"]  # job 2 has the higher priority
    world = __import__("leaselab.sim.world", fromlist=["World"]).World(POWER)
    try:
        world.step(("power",))
        assert world.live() == [] and ("start",) in world.enabled()
    finally:
        world.close()


def test_a_claim_that_is_not_synced_is_lost_in_the_cut_and_the_simulator_says_so():
    with mutants.planted("non_durable_claim"):
        assert _claim_then_cut() == ["lost_on_power_cut"]


def test_the_power_scenario_keeps_every_promise_on_the_clean_code():
    found, n, _ = explore.search(POWER, seed=0, schedules=120)
    assert found is None and n == 120


def test_only_a_scenario_that_names_the_power_cut_puts_its_queue_on_a_disk():
    from leaselab.sim.world import DEFAULT_FAULTS, World

    assert "power" not in DEFAULT_FAULTS and Scenario().faults == DEFAULT_FAULTS
    world = World(Scenario())
    try:
        assert world.disk is None and ("power",) not in world.enabled()
    finally:
        world.close()


@pytest.mark.parametrize("column, value", [("priority", 9), ("status", "'done'"), ("run_at", "run_at + 1")])
def test_a_row_no_call_should_have_changed_is_caught_at_the_next_call(column, value):
    # Only the rows a call touched are read back after it: a write to any other row (a statement gone astray)
    # must still be caught at the very next call, named as comparing every row would name it.
    from leaselab.sim.model import Violation
    from leaselab.sim.world import World

    world = World(Scenario(workers=1, jobs=4))
    world.step(("claim", "w1"))  # every row compared once; job 1 claimed
    world.queue.backend.connection.execute(f"UPDATE jobs SET {column} = {value} WHERE id = 4")
    with pytest.raises(Violation) as caught:
        world.step(("beat", "w1"))
    world.close()
    assert caught.value.kind == f"wrong_{column}" and "job 4 " in caught.value.message


@pytest.mark.parametrize(
    "statement, held",
    [("DELETE FROM jobs WHERE id = 4", "[1, 2, 3]"), ("UPDATE jobs SET id = 99 WHERE id = 4", "[1, 2, 3, 99]")],
)
def test_a_row_gone_or_added_behind_the_models_back_is_named_with_the_whole_table(statement, held):
    # The triggers note a deleted row (and a row whose id changed) as gone, and the new id's row as touched: the
    # next call, which itself touches another job, still names the table's jobs against the model's.
    from leaselab.sim.model import Violation
    from leaselab.sim.world import World

    world = World(Scenario(workers=1, jobs=4))
    world.step(("claim", "w1"))  # every row compared once; job 2 (the first of the higher priority) claimed
    world.queue.backend.connection.execute(statement)
    with pytest.raises(Violation) as caught:
        world.step(("beat", "w1"))
    world.close()
    assert caught.value.kind == "rows"
    assert f"the queue holds jobs {held}, the model [1, 2, 3, 4]" in caught.value.message


def test_expire_is_the_ticks_it_stands_for():
    # ("expire",) lets time pass tick after tick until the earliest lease the queue holds has ended: the same
    # world as taking those ticks one by one, trace and state alike.
    from leaselab.sim.world import EXPIRE, World

    ticked, expired = World(SCENARIO), World(SCENARIO)
    for world in (ticked, expired):
        world.step(("claim", "w1"))
    end = ticked.lease_end()
    assert end is not None and end > ticked.t
    ticks = 0
    while ticked.t < end:
        ticked.step(("tick",))
        ticks += 1
    expired.step(EXPIRE)
    assert ticks > 1 and expired.t == ticked.t == end
    assert expired.trace == ticked.trace and explore.state_of(expired) == explore.state_of(ticked)
    ticked.close(), expired.close()


def test_shrinking_replaces_a_stretch_of_time_by_one_expire():
    # A worker with no margin for its clock, running slow, writes its effect after the queue's lease ended:
    # that takes time passing with nothing else happening, which the shrunk witness says in one step.
    scenario = Scenario(workers=2, jobs=4, slots=2, skew=0.03)
    with mutants.planted("no_margin"):
        found = next(
            r
            for seed in range(50)
            for ticks in range(2, 9)
            if (r := explore.run(scenario, seed, actions=[("claim", "w1"), *[("tick",)] * ticks])).failed
        )
        shrunk = explore.shrink(found, tries=200, budget=3600)
        again = explore.run(shrunk.scenario, shrunk.seed, actions=shrunk.actions)
    assert ("expire",) in shrunk.actions and len(shrunk.actions) < len(found.actions)
    assert shrunk.violation is not None and shrunk.violation.kind == "effect_without_lease"
    assert again.trace == shrunk.trace


def test_a_hung_handler_is_given_up_at_its_timeout_and_its_job_done_by_another_worker():
    scenario = Scenario(workers=2, jobs=2, timeout=1.2, faults=DEFAULT_FAULTS + NEEDS_TIMEOUT)
    run = explore.run(scenario, 0, actions=[("claim", "w1"), ("hang", "w1")])
    assert run.violation is None, run.violation
    trace = "\n".join(run.trace)
    # Job 2 goes first: it has the higher priority (Scenario.job_specs).
    assert "w1's handler of job 2 hangs: its pulse goes on" in trace
    assert "w1 gives job 2 up: it ran past its timeout of 1.2s" in trace
    assert "w1: job 2 timed out -> pending" in trace
    assert "w1 exits: every slot holds a handler past its timeout" in trace  # one slot: at once, as exit 5
    assert re.search(r"w[23]: job 2 completed", trace), trace


def test_without_the_timeout_check_a_hung_handlers_lease_is_renewed_past_it():
    scenario = Scenario(workers=2, jobs=2, timeout=1.2, faults=DEFAULT_FAULTS + NEEDS_TIMEOUT)
    with mutants.planted("timeout_ignored"):
        run = explore.run(scenario, 0, actions=[("claim", "w1"), ("hang", "w1")])
    assert run.violation is not None and run.violation.kind == "renewed_past_timeout", run.violation
