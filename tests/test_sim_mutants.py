"""Every shipped mutant is caught by ``hunt`` and shrunk to a witness of at most a dozen actions. Budgets
are schedules and replays, not seconds, so the outcome is the same on any machine."""

from __future__ import annotations

import pytest

from leaselab.sim import explore, mutants

WITNESS = 12  # actions, ticks included; the drain after them is implied


@pytest.mark.parametrize("name", mutants.NAMES)
def test_every_shipped_mutant_is_caught_and_shrunk_to_a_dozen_actions(name):
    with mutants.planted(name):
        hunt = explore.hunt(seed=0, schedules=1500, seconds=None, shrink_tries=400, shrink_seconds=3600)
    assert hunt.run is not None and hunt.run.violation is not None, f"{name} was not caught"
    assert len(hunt.run.actions) <= WITNESS, hunt.run.actions


def test_the_shipped_mutants_are_more_than_twenty_and_each_says_what_it_breaks():
    assert len(mutants.NAMES) == len(set(mutants.NAMES)) >= 20
    assert all(m.breaks and (m.edits or m.decision or m.patches) for m in mutants.MUTANTS)
