"""A job's life as a state machine: every change of status the queue makes, the call that makes it and
the event it writes into the history, listed once.

The lessons draw their state diagram from ``TRANSITIONS``, and ``tests/test_lifecycle.py`` makes every
row happen on every backend and checks that the job moved as the row says: a picture of the protocol
that cannot drift from the code.
"""

from __future__ import annotations

from typing import NamedTuple

from .job import Status

# The calls, by name: a row's ``call`` is one of these, a method of ``leaselab.Queue``.
ENQUEUE, CLAIM, HEARTBEAT, COMPLETE, FAIL, TIME_OUT, RELEASE, REAP, RETRY, CANCEL = (
    "enqueue",
    "claim",
    "heartbeat",
    "complete",
    "fail",
    "time_out",
    "release",
    "reap",
    "retry",
    "cancel",
)


class Transition(NamedTuple):
    """One way a job changes: from ``source`` (None: the job does not exist yet) to ``target``, by the
    queue's ``call``, writing ``events`` (in order) into the history. ``fenced`` says the call is made by
    the attempt's holder and applies only under its token (``WHERE status='running' AND token=?``);
    ``when`` says which of two rows with the same call applies."""

    source: Status | None
    target: Status
    call: str
    events: tuple[str, ...]
    fenced: bool = False
    when: str = ""


# When a fenced failure, a timeout, a hand-back or a reap sends a job back: attempts left, or spent.
ATTEMPTS_LEFT = "attempts left"
ATTEMPTS_SPENT = "attempts spent"

TRANSITIONS: tuple[Transition, ...] = (
    Transition(None, Status.PENDING, ENQUEUE, ("enqueued",)),
    Transition(Status.PENDING, Status.RUNNING, CLAIM, ("claimed",)),
    Transition(Status.RUNNING, Status.RUNNING, HEARTBEAT, ("heartbeat",), fenced=True),
    Transition(Status.RUNNING, Status.DONE, COMPLETE, ("completed",), fenced=True),
    Transition(Status.RUNNING, Status.PENDING, FAIL, ("failed",), fenced=True, when=ATTEMPTS_LEFT),
    Transition(Status.RUNNING, Status.DEAD, FAIL, ("failed", "dead"), fenced=True, when=ATTEMPTS_SPENT),
    Transition(Status.RUNNING, Status.PENDING, TIME_OUT, ("timed_out",), fenced=True, when=ATTEMPTS_LEFT),
    Transition(Status.RUNNING, Status.DEAD, TIME_OUT, ("timed_out", "dead"), fenced=True, when=ATTEMPTS_SPENT),
    Transition(Status.RUNNING, Status.PENDING, RELEASE, ("released",), fenced=True, when=ATTEMPTS_LEFT),
    Transition(Status.RUNNING, Status.DEAD, RELEASE, ("released", "dead"), fenced=True, when=ATTEMPTS_SPENT),
    Transition(Status.RUNNING, Status.PENDING, REAP, ("reaped",), when=ATTEMPTS_LEFT),
    Transition(Status.RUNNING, Status.DEAD, REAP, ("reaped", "dead"), when=ATTEMPTS_SPENT),
    Transition(Status.DEAD, Status.PENDING, RETRY, ("retried",)),
    Transition(Status.PENDING, Status.DEAD, CANCEL, ("cancelled", "dead")),
    Transition(Status.RUNNING, Status.DEAD, CANCEL, ("cancelled", "dead")),
)

# A fenced call whose token no longer holds the job changes nothing and writes this event instead.
REFUSED = "lease_lost"


def edges() -> dict[tuple[Status | None, Status], list[Transition]]:
    """The transitions grouped by (source, target), in ``TRANSITIONS``'s order: one arrow each."""
    grouped: dict[tuple[Status | None, Status], list[Transition]] = {}
    for row in TRANSITIONS:
        grouped.setdefault((row.source, row.target), []).append(row)
    return grouped
