"""leaselab.lifecycle: every row of the state machine the lessons draw happens, on every backend, as it says.

Each row is made to happen on a fresh job in the row's source status; the job must end in the row's
target status with exactly the row's events written. A fenced row is also tried under a stale token:
nothing may change but a ``lease_lost`` event. And the table must name every event the schema knows,
so a new kind of change cannot be left out of the picture.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import leaselab
from leaselab import LeaseLost, Status
from leaselab.lifecycle import ATTEMPTS_SPENT, REFUSED, TRANSITIONS, Transition, edges
from tests.support.servers import IN_PROCESS_BACKENDS

TARGETS = IN_PROCESS_BACKENDS
LEASE = 10.0


def _job_in(queue, clock, row: Transition):
    """A job in ``row.source`` (with one attempt allowed when the row is for spent attempts): (id, token)."""
    attempts = 1 if row.when == ATTEMPTS_SPENT or row.source is Status.DEAD else 3
    job_id = queue.enqueue({"row": row.call}, max_attempts=attempts)
    if row.source in (Status.RUNNING, Status.DEAD):
        token = queue.claim("w1", lease=LEASE).token
        if row.source is Status.DEAD:
            assert queue.fail(job_id, token, "spent") is Status.DEAD
        return job_id, token
    return job_id, None


def _make(queue, clock, row: Transition, job_id: int | None, token: str | None) -> int:
    """Make ``row`` happen to the job (``enqueue`` makes it); return its id."""
    if row.call == "enqueue":
        return queue.enqueue({"row": row.call})
    if row.call == "claim":
        assert queue.claim("w2", lease=LEASE).id == job_id
    elif row.call == "heartbeat":
        queue.heartbeat(job_id, token, lease=LEASE)
    elif row.call == "complete":
        queue.complete(job_id, token, {"ok": True})
    elif row.call == "fail":
        queue.fail(job_id, token, "boom")
    elif row.call == "time_out":
        queue.time_out(job_id, token, "ran past its timeout")
    elif row.call == "release":
        queue.release([(job_id, token)])
    elif row.call == "reap":
        clock.advance(LEASE + 1)
        assert queue.reap() == [job_id]
    elif row.call == "retry":
        assert queue.retry([job_id]) == [job_id]
    elif row.call == "cancel":
        assert queue.cancel([job_id]) == [job_id]
    else:  # pragma: no cover  (a new call in the table: teach this test to make it)
        raise AssertionError(f"no way to make {row.call!r} happen")
    return job_id


def _label(row: Transition) -> str:
    source = row.source.value if row.source else "new"
    return f"{source}->{row.target.value}:{row.call}" + (f"({row.when})" if row.when else "")


@pytest.mark.parametrize("row", TRANSITIONS, ids=_label)
def test_every_transition_happens_as_the_table_says(queue, clock, row):
    job_id, token = (None, None) if row.source is None else _job_in(queue, clock, row)
    before = len(queue.events(job_id)) if job_id is not None else 0
    job_id = _make(queue, clock, row, job_id, token)
    assert queue.get(job_id).status is row.target
    assert tuple(e.kind for e in queue.events(job_id)[before:]) == row.events


@pytest.mark.parametrize("row", [r for r in TRANSITIONS if r.fenced], ids=_label)
def test_every_fenced_transition_under_a_stale_token_changes_nothing_but_the_history(queue, clock, row):
    job_id, stale = _job_in(queue, clock, row)
    clock.advance(LEASE + 1)
    queue.reap()
    clock.advance(3600)  # past any backoff
    fresh = queue.claim("w2", lease=LEASE)
    if fresh is None:  # its one attempt was spent by the reap: nothing holds it, and the write must still fail
        assert queue.get(job_id).status is Status.DEAD
    before_job, before = queue.get(job_id), len(queue.events(job_id))
    if row.call == "release":  # a hand-back of many jobs reports the refused ones instead of raising
        assert queue.release([(job_id, stale)]) == {}
    else:
        with pytest.raises(LeaseLost):
            _make(queue, clock, row, job_id, stale)
    assert queue.get(job_id) == before_job
    assert [e.kind for e in queue.events(job_id)[before:]] in ([REFUSED], [])


def test_the_table_names_every_event_the_schema_can_write():
    schema = (Path(leaselab.__file__).parent / "backends" / "sqlite" / "schema.sql").read_text()
    listed = re.search(r"kind\s+TEXT\s+NOT NULL CONSTRAINT known_kind\s+CHECK \(([^)]*)\)", schema)
    assert listed is not None, "the events table's CHECK list of kinds moved: find it again"
    kinds = set(re.findall(r"kind = '(\w+)'", listed.group(1)))
    named = {kind for row in TRANSITIONS for kind in row.events} | {REFUSED}
    assert kinds == named


def test_the_arrows_group_every_row_once():
    grouped = edges()
    assert sorted((r for rows in grouped.values() for r in rows), key=TRANSITIONS.index) == list(TRANSITIONS)
    assert (Status.RUNNING, Status.DEAD) in grouped and (None, Status.PENDING) in grouped
