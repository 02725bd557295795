"""The queue's contract for bad calls: each gets a clear error and writes nothing, on every backend.

One table of calls with bad arguments, run against a small queue with a job in each interesting
state. For each call: the named error type, the words its message must contain, and, read back
through the queue's own reading API (so the same check holds on PostgreSQL), the jobs unchanged and
the history unchanged except that a refused write is recorded as ``lease_lost``. Then a clock that
is no clock. Files that are not a healthy queue, and the command line, are in ``test_bad_input.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from leaselab import (
    HandlerError,
    InvalidPayload,
    JobNotFound,
    LeaselabError,
    LeaseLost,
    Queue,
    Worker,
    load_handler,
)
from tests.support.servers import IN_PROCESS_BACKENDS
from tests.support.sqlite_marks import integrity, marks

TARGETS = IN_PROCESS_BACKENDS  # the contract suite: on the APSW backend too


@dataclass
class Setup:
    """A small queue with one job in each interesting state, the tokens to address them, and where it lives."""

    target: str
    pending: int
    running: int
    running_token: str
    done: int
    done_token: str


@pytest.fixture
def setup(queue, target) -> Setup:
    ids = queue.enqueue_many([{"n": i} for i in range(3)])
    running = queue.claim("w1", lease=600)
    done = queue.claim("w2", lease=600)
    queue.complete(done.id, done.token, {"ok": True})
    return Setup(target, ids[2], running.id, running.token, done.id, done.token)


def snapshot(q: Queue) -> tuple[list, list, dict]:
    """Every job, the whole history and the counts, as the queue's public API reads them."""
    return q.jobs(limit=1_000_000), q.events(), q.stats()


# Each bad lease is tried on both calls that take one: a claim and a heartbeat of the running job.
BAD_LEASES: list[tuple[str, Any, type]] = [
    ("a negative lease", -1, ValueError),
    ("a zero lease", 0, ValueError),
    ("a NaN lease", math.nan, ValueError),
    ("an infinite lease", math.inf, ValueError),
    ("a lease given as text", "30", TypeError),
    ("a lease of True", True, TypeError),
    ("no lease (None)", None, TypeError),
]


def _claim_with(lease):
    return lambda q, s: q.claim("w", lease=lease)


def _heartbeat_with(lease):
    return lambda q, s: q.heartbeat(s.running, s.running_token, lease)


# (what, the call, the error it gets, words its message must contain, event kinds it may add)
Call = Callable[[Queue, Setup], Any]
BAD_CALLS: list[tuple[str, Call, type, str, tuple[str, ...]]] = [
    ("a set payload (not JSON)", lambda q, s: q.enqueue({1, 2}), InvalidPayload, "payload", ()),
    ("an object payload", lambda q, s: q.enqueue(object()), InvalidPayload, "payload", ()),
    ("an object nested in a payload", lambda q, s: q.enqueue({"nested": [object()]}), InvalidPayload, "payload", ()),
    (
        "bytes as payload (a pickle cannot get in)",
        lambda q, s: q.enqueue(b"\x80\x04K\x01."),
        InvalidPayload,
        "payload",
        (),
    ),
    ("a NaN payload", lambda q, s: q.enqueue({"x": math.nan}), InvalidPayload, "NaN", ()),
    ("a bare NaN payload", lambda q, s: q.enqueue(math.nan), InvalidPayload, "payload", ()),
    ("an infinite payload", lambda q, s: q.enqueue([math.inf]), InvalidPayload, "payload", ()),
    ("a bare infinite payload", lambda q, s: q.enqueue(math.inf), InvalidPayload, "payload", ()),
    ("a negative infinity in a payload", lambda q, s: q.enqueue({"x": -math.inf}), InvalidPayload, "payload", ()),
    ("a huge payload (2 MB)", lambda q, s: q.enqueue("x" * 2_000_000), InvalidPayload, "limit", ()),
    ("one NaN among many payloads", lambda q, s: q.enqueue_many([1, 2, math.nan]), InvalidPayload, "payload", ()),
    *[(what, _claim_with(lease), error, "lease", ()) for what, lease, error in BAD_LEASES],
    *[(f"{what} on heartbeat", _heartbeat_with(lease), error, "lease", ()) for what, lease, error in BAD_LEASES],
    ("max_attempts = 0", lambda q, s: q.enqueue(1, max_attempts=0), ValueError, "max_attempts", ()),
    ("max_attempts = -3", lambda q, s: q.enqueue(1, max_attempts=-3), ValueError, "max_attempts", ()),
    ("max_attempts = 2.5", lambda q, s: q.enqueue(1, max_attempts=2.5), TypeError, "max_attempts", ()),
    ("max_attempts = True", lambda q, s: q.enqueue(1, max_attempts=True), TypeError, "max_attempts", ()),
    ("a negative delay", lambda q, s: q.enqueue(1, delay=-1), ValueError, "delay", ()),
    ("a NaN delay", lambda q, s: q.enqueue(1, delay=math.nan), ValueError, "delay", ()),
    ("a NaN run_at", lambda q, s: q.enqueue(1, run_at=math.nan), ValueError, "run_at", ()),
    ("a run_at given as text", lambda q, s: q.enqueue(1, run_at="soon"), TypeError, "run_at", ()),
    ("a priority given as text", lambda q, s: q.enqueue(1, priority="high"), TypeError, "priority", ()),
    ("a fractional priority", lambda q, s: q.enqueue(1, priority=1.5), TypeError, "priority", ()),
    ("a priority beyond 64 bits", lambda q, s: q.enqueue(1, priority=2**70), ValueError, "priority", ()),
    ("an empty worker name", lambda q, s: q.claim(""), TypeError, "worker", ()),
    ("no worker name (None)", lambda q, s: q.claim(None), TypeError, "worker", ()),
    ("a number as worker name", lambda q, s: q.claim(3), TypeError, "worker", ()),
    ("a 10,000-character worker name", lambda q, s: q.claim("w" * 10_000), ValueError, "worker", ()),
    ("get of an unknown job id", lambda q, s: q.get(999), JobNotFound, "999", ()),
    ("complete of an unknown job id", lambda q, s: q.complete(999, "t"), JobNotFound, "999", ()),
    ("heartbeat of an unknown job id", lambda q, s: q.heartbeat(999, "t"), JobNotFound, "999", ()),
    ("fail of an unknown job id", lambda q, s: q.fail(999, "t"), JobNotFound, "999", ()),
    ("a job id that is SQL text", lambda q, s: q.get("1 OR 1=1"), TypeError, "job_id", ()),
    (
        "a heartbeat for a job that is done",
        lambda q, s: q.heartbeat(s.done, s.done_token),
        LeaseLost,
        "done",
        ("lease_lost",),
    ),
    (
        "a second complete of a done job",
        lambda q, s: q.complete(s.done, s.done_token, 1),
        LeaseLost,
        "done",
        ("lease_lost",),
    ),
    (
        "a complete with someone else's token",
        lambda q, s: q.complete(s.running, s.done_token),
        LeaseLost,
        "running",
        ("lease_lost",),
    ),
    (
        "a complete of a pending job",
        lambda q, s: q.complete(s.pending, s.running_token),
        LeaseLost,
        "pending",
        ("lease_lost",),
    ),
    ("a NaN result", lambda q, s: q.complete(s.running, s.running_token, math.nan), InvalidPayload, "result", ()),
    ("a token that is not text", lambda q, s: q.complete(s.running, None), TypeError, "token", ()),
    ("an error that is not text", lambda q, s: q.fail(s.running, s.running_token, 42), TypeError, "error", ()),
    ("an unknown status filter", lambda q, s: q.jobs(status="lost"), ValueError, "status", ()),
    ("an unknown durability", lambda q, s: Queue(s.target, durability="fast"), ValueError, "durability", ()),
    (
        "a call timeout of zero",
        lambda q, s: Queue(s.target, call_timeout=0),
        ValueError,
        "call_timeout must be > 0",
        (),
    ),
    (
        "a call timeout that is not a number",
        lambda q, s: Queue(s.target, call_timeout="27"),
        TypeError,
        "call_timeout must be a number",
        (),
    ),
    (
        "a handler module that does not import",
        lambda q, s: load_handler("no_such_module_xyz:run"),
        HandlerError,
        "no_such_module_xyz",
        (),
    ),
    (
        "a handler function that does not exist",
        lambda q, s: Worker(q, "leaselab.harness.demo:no_such"),
        HandlerError,
        "no_such",
        (),
    ),
    (
        "a handler path without a colon",
        lambda q, s: Worker(q, "leaselab.harness.demo.task"),
        HandlerError,
        "module:function",
        (),
    ),
]


@pytest.mark.parametrize("what, call, error, words, adds", BAD_CALLS, ids=[row[0] for row in BAD_CALLS])
def test_each_bad_call_gets_a_clear_error_and_writes_nothing(queue, setup, request, what, call, error, words, adds):
    on_a_sqlite_file = request.node.callspec.params["target"] == "sqlite"
    marks_before = marks(setup.target) if on_a_sqlite_file else None
    jobs_before, events_before, stats_before = snapshot(queue)
    with pytest.raises(error) as caught:
        call(queue, setup)
    assert words in str(caught.value), f"{what}: message {str(caught.value)!r} should name {words!r}"
    # What a caller may catch it as: a leaselab error, an invalid payload also a ValueError, and an
    # unknown job names its id.
    assert isinstance(caught.value, LeaselabError) or not issubclass(error, LeaselabError)
    if error is InvalidPayload:
        assert isinstance(caught.value, ValueError)
    if error is JobNotFound:
        assert caught.value.job_id == 999
    jobs_after, events_after, stats_after = snapshot(queue)
    assert jobs_after == jobs_before and stats_after == stats_before, f"{what} changed the jobs"
    assert events_after[: len(events_before)] == events_before, f"{what} rewrote the history"
    added = events_after[len(events_before) :]
    assert [e.kind for e in added] == list(adds), f"{what} added other events"
    if added:  # the refusal is now the newest entry of that job's history
        assert queue.events(added[0].job_id)[-1].id == added[0].id
    if on_a_sqlite_file:  # and the file is still whose and what it was, and sound
        assert marks(setup.target) == marks_before and integrity(setup.target) == "ok"
    assert queue.claim("after").id == setup.pending  # and the queue still works


# -- a clock that is no clock ----------------------------------------------------------------------


def nothing_written(q: Queue) -> bool:
    return q.stats() == {"pending": 0, "running": 0, "done": 0, "dead": 0} and q.events() == []


def test_a_clock_that_is_not_callable_or_not_a_number_is_refused(target):
    with pytest.raises(TypeError, match="clock"):
        Queue(target, clock=12.0)
    with Queue(target, clock=lambda: float("nan")) as q:
        with pytest.raises(ValueError, match="clock"):
            q.enqueue("x")
    with Queue(target) as q:
        assert nothing_written(q)
