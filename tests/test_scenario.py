"""Scripted scenarios replay a failure step by step or at once, against a Fleet or a Lab."""

from __future__ import annotations

import pytest

from leaselab import Status
from leaselab.lab.errors import ScenarioTimeout
from leaselab.lab.scenario import (
    Scenario,
    enqueue,
    parse_line,
    pause,
    resume,
    spawn,
    wait_idle,
    wait_leases,
    wait_running,
)
from leaselab.lab.timeline import timeline_data
from tests.support.polling import wait_until

ZOMBIE = """
    # w1 freezes holding a job, w2 reaps it and does it again, w1 wakes (only once w2 is done,
    # so no timing decides who does the job) and is fenced off
    spawn w1
    enqueue 1 seconds=3
    wait running=1
    spawn w2
    pause w1
    wait leases=3
    wait idle timeout=60
    resume w1
    wait idle timeout=60
"""


@pytest.fixture
def fleet(tmp_path, fleet_on):
    return fleet_on(tmp_path / "lab.db")


def test_the_text_form_and_the_list_form_are_the_same_scenario():
    steps = [
        spawn("w1"),
        enqueue(1, seconds=3),
        wait_running(1),
        spawn("w2"),
        pause("w1"),
        wait_leases(3),
        wait_idle(timeout=60),
        resume("w1"),
        wait_idle(timeout=60),
    ]
    assert Scenario.parse(ZOMBIE).steps == steps


def test_a_scenario_prints_as_its_steps_with_a_cursor():
    s = Scenario.parse(ZOMBIE)
    assert str(s).splitlines()[0] == "→  1. spawn w1"
    assert str(s).splitlines()[5].strip() == "6. wait leases=3"


def test_bad_lines_are_refused_with_their_line_number():
    with pytest.raises(ValueError, match="line 2: unknown step 'explode'"):
        Scenario.parse("spawn w1\nexplode w1")
    with pytest.raises(ValueError, match="wait takes"):
        parse_line("wait soon")
    with pytest.raises(ValueError, match="kind"):
        parse_line("enqueue 3 kind=melt")


def test_step_runs_one_step_at_a_time(fleet):
    s = Scenario.parse(ZOMBIE, lease=1.0)
    assert s.step(fleet) == spawn("w1")
    assert fleet.names == ["w1"] and fleet.queue.stats()["pending"] == 0
    assert s.step(fleet) == enqueue(1, seconds=3)
    assert sum(fleet.queue.stats().values()) == 1
    assert s.position == 2 and not s.done


def test_the_zombie_scenario_replays_a_refused_write_against_a_fleet(fleet):
    s = Scenario.parse(ZOMBIE, lease=1.0)
    s.run(fleet)
    assert s.done and s.step(fleet) is None
    [job] = fleet.queue.jobs()
    assert job.status == Status.DONE and job.attempts == 2 and job.worker == "w2"
    kinds = [e.kind for e in fleet.queue.events(job_id=job.id)]
    assert "reaped" in kinds
    # w1 wakes believing it still holds the job; its write is fenced off and recorded.
    wait_until(
        lambda: any(e.kind == "lease_lost" and e.worker == "w1" for e in fleet.queue.events(job_id=job.id)),
        message="w1's refused write",
    )
    data = timeline_data(fleet.queue.events(), fleet.actions)
    assert [f.kind for f in data.faults if f.worker == "w1"] == ["pause"]
    assert any(m.kind == "reaped" and m.worker == "w1" for m in data.marks)


def test_a_scenario_drives_a_lab_and_its_tables_follow(tmp_path):
    from leaselab.lab.dashboard import Lab

    lab = Lab(str(tmp_path / "lab.db"), lease=1.0, refresh=None)
    try:
        Scenario([spawn(), enqueue(2, seconds=0), wait_idle(timeout=60)], target=lab).run()
        assert "done: 2" in lab.counts.value
        assert "leaselab-state-running" in lab.row("w1").cells.value
    finally:
        lab.close()


def test_wait_idle_that_never_settles_raises_scenario_timeout(fleet):
    with pytest.raises(ScenarioTimeout, match="not idle"):
        Scenario([enqueue(1), wait_idle(timeout=0.3)]).run(fleet)
    with pytest.raises(ScenarioTimeout, match="not 1 running"):
        Scenario.parse("wait running=1 timeout=0.3").run(fleet)


def test_a_scenario_without_a_target_says_what_it_needs():
    with pytest.raises(TypeError, match="Lab or a Fleet"):
        Scenario([spawn()]).step()


def test_the_text_form_hangs_a_worker_spawned_with_a_job_timeout(fleet):
    s = Scenario.parse("spawn w1 timeout=1\nhang w1\nenqueue 1 seconds=0", lease=1.0)
    assert str(s.steps[0]) == "spawn w1 timeout=1" and str(s.steps[1]) == "hang w1"
    s.run(fleet)
    wait_until(lambda: fleet.state("w1") == "exited", message="w1 to exit, its only slot hung")
    assert fleet.status()[0].returncode == 5
    assert [e.kind for e in fleet.queue.events(1) if e.kind != "heartbeat"] == ["enqueued", "claimed", "timed_out"]
