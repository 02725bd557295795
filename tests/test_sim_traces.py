"""The simulator's schedules, pinned: each seed of each scenario below (the speed target's, the hunt's
portfolio, no faults at all, and two planted bugs) must give the very trace, actions, verdict, steps
and virtual time it gave when ``tests/data/sim_traces.json`` was recorded. Work that makes the
simulator faster must not change what it simulates; this is what says so.

The digests were recorded on the code before that work (``python tests/test_sim_traces.py >
tests/data/sim_traces.json`` with that checkout first on ``PYTHONPATH``). Re-record them only for a
change that is *meant* to change what the simulator does, and say so in the commit.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from leaselab.sim import explore, mutants
from leaselab.sim.world import FAULTS, Scenario

DIGESTS = Path(__file__).parent / "data" / "sim_traces.json"
SCENARIOS = {
    "target": (Scenario(workers=4, jobs=50, lease=1.0), 6),  # bench/simulate.py's
    "no_faults": (Scenario(workers=3, jobs=6, faults=()), 10),
    "normal_power": (Scenario(workers=2, jobs=3, faults=FAULTS, durability="normal"), 15),
    **{f"portfolio{i}": (scenario, 15) for i, scenario in enumerate(explore.PORTFOLIO)},
}
# Planted bugs, each with schedules of the hunt's first scenario: the first finds it in 12, the others sooner.
PLANTED = {"unfenced_heartbeat": 12, "early_reap": 10, "claim_ignores_priority": 3}
_NEEDS_APSW = {name for name, (scenario, _) in SCENARIOS.items() if "power" in scenario.faults}


def digest(run: explore.Run) -> str:
    """What a run did, as one hash. A power cut's queue lives in a fresh temporary folder, on a disk named
    after the process: those names (they appear in a queue error's message) are the place, not the schedule."""
    text = json.dumps(
        [
            run.trace,
            [list(a) for a in run.actions],
            run.violation and [run.violation.kind, run.violation.message],
            run.steps,
            repr(run.virtual),
        ]
    )
    text = re.sub(r"leaselab-volatile-\d+-\d+", "<disk>", re.sub(r"leaselab-sim-[^/]+", "<folder>", text))
    return hashlib.sha256(text.encode()).hexdigest()


def record() -> dict[str, str]:
    """Every digest, by "scenario/seed" and "mutant/seed"."""
    found = {}
    for name, (scenario, seeds) in SCENARIOS.items():
        for seed in range(seeds):
            found[f"{name}/{seed}"] = digest(explore.run(scenario, seed))
    for name, seeds in PLANTED.items():
        with mutants.planted(name):
            for seed in range(seeds):
                found[f"{name}/{seed}"] = digest(explore.run(explore.PORTFOLIO[0], seed))
    return found


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_each_seed_gives_the_trace_it_gave_when_recorded(name: str):
    if name in _NEEDS_APSW and importlib.util.find_spec("apsw") is None:
        pytest.skip("a power cut needs APSW")
    want = json.loads(DIGESTS.read_text())
    scenario, seeds = SCENARIOS[name]
    changed = [seed for seed in range(seeds) if digest(explore.run(scenario, seed)) != want[f"{name}/{seed}"]]
    assert not changed, f"{scenario}: seeds {changed} no longer give the recorded schedule"


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_bug_is_found_by_the_same_schedules_as_when_recorded(name: str):
    want = json.loads(DIGESTS.read_text())
    with mutants.planted(name):
        runs = [explore.run(explore.PORTFOLIO[0], seed) for seed in range(PLANTED[name])]
    assert any(run.failed for run in runs)  # the digests pin finding it, not only running
    changed = [seed for seed, run in enumerate(runs) if digest(run) != want[f"{name}/{seed}"]]
    assert not changed, f"with {name} planted, seeds {changed} no longer give the recorded schedule"


def test_the_recorded_digests_cover_every_pinned_schedule():
    want = json.loads(DIGESTS.read_text())
    names = {f"{n}/{s}" for n, (_, seeds) in SCENARIOS.items() for s in range(seeds)}
    names |= {f"{n}/{s}" for n, seeds in PLANTED.items() for s in range(seeds)}
    assert set(want) == names


if __name__ == "__main__":
    json.dump(record(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
