"""What a job and an event look like to a caller: frozen dataclasses made by one converter each."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from .errors import InvalidPayload


class Status(str, Enum):
    """A job's place in its life: pending -> running -> done, or back to pending, or dead."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"

    def __str__(self) -> str:
        return self.value


# How deeply a payload or result may nest arrays and objects, both ways. Python's own JSON
# decoder and encoder recurse once per level and hit the interpreter's recursion limit
# (about 1,000, less on a worker's thread) with a RecursionError; a fixed, lower limit turns
# that into ``InvalidPayload`` on the way in and a failed attempt on the way out.
MAX_JSON_DEPTH = 100

# A JSON string, written so a long or unterminated one cannot make the regex backtrack.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def check_json_depth(what: str, text: str, *, of_job: int | None = None) -> None:
    """Raise ``InvalidPayload`` if the JSON ``text`` nests arrays or objects deeper than ``MAX_JSON_DEPTH``;
    the message names ``what``, as the stored field of job ``of_job`` if given."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:  # the common case: too few brackets to matter
        return
    depth = 0
    for bracket in _BRACKET.findall(_JSON_STRING.sub("", text)):  # brackets inside strings do not nest
        depth += 1 if bracket in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            named = what if of_job is None else f"job {of_job}: the stored {what}"
            raise InvalidPayload(f"{named} nests arrays or objects more than {MAX_JSON_DEPTH} deep")


# The C scanner ``json.loads`` ends in, called directly. On a short payload most of ``json.loads``'s
# time goes around it (three calls and two regular-expression matches for the whitespace around the
# value), and a worker reads a payload with every claim. It returns the value and where it ended.
_SCAN_JSON = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set in __init__; typeshed omits it


def _load_json(job_id: int, what: str, text: str | bytes) -> Any:
    # Only JSON is ever read back: something else in the file (a planted pickle, say) is damage, not code.
    try:
        if isinstance(text, str):
            if len(text) > MAX_JSON_DEPTH:  # a shorter text cannot nest that deep: no call for most payloads
                check_json_depth(what, text, of_job=job_id)
            try:
                value, end = _SCAN_JSON(text, 0)
            except StopIteration:  # no value at the very start: json.loads skips whitespace or names the fault
                end = -1
            if end == len(text):  # one value and nothing after it, as leaselab writes them
                return value
        return json.loads(text)  # whitespace around the value, trailing text, bytes: its rules, its errors
    except (ValueError, TypeError, RecursionError) as exc:
        if isinstance(exc, InvalidPayload):
            raise
        raise InvalidPayload(f"job {job_id}: the stored {what} is not JSON ({exc})") from None


# The columns every statement that returns a job selects, in this order.
JOB_COLUMNS = (
    "id, payload, status, priority, run_at, attempts, max_attempts, lease_until, "
    "worker, token, result, last_error, created_at, started_at, finished_at, timeout, beat_timeout, queue, key"
)

# The queue a job goes to when none is named, and the one a worker serves when given one handler.
DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class Job:
    """One job as it was when read. ``(id, attempts)`` rises with every claim: a fence for outside systems."""

    id: int
    payload: Any
    status: Status
    priority: int
    run_at: float
    attempts: int
    max_attempts: int
    lease_until: float | None
    worker: str | None
    token: str | None
    result: Any
    last_error: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    # The longest one attempt may run, in seconds (None: the worker's ``job_timeout``, if any), and
    # the longest its handler may go without ``Lease.beat()`` (None: no such limit).
    timeout: float | None = None
    beat_timeout: float | None = None
    # The named queue it waits in (only workers serving that queue claim it), and its unique key: while a
    # job with a key is pending or running, enqueueing that key again returns this job (``Queue.enqueue_unique``).
    queue: str = DEFAULT_QUEUE
    key: str | None = None
    # Why this row could not be read in full, or None for a healthy job. Only listings
    # (``Queue.jobs``) return a damaged job, so one bad row hides nothing else; its unreadable
    # fields are None. A claim never hands one to a handler: it fails that attempt instead.
    damage: str | None = field(default=None, compare=False)

    @property
    def fence(self) -> tuple[int, int]:
        """``(job id, attempt number)``: compare it to reject writes from an older attempt."""
        return (self.id, self.attempts)

    @classmethod
    def from_row(cls, row: Iterable[Any]) -> Job:
        """Build a Job from a row selected with ``JOB_COLUMNS``: a tuple, a ``JobRow`` or a ``sqlite3.Row``,
        its values named here once, by the column list, in one unpacking (a worker's every claim)."""
        (
            id_,
            payload,
            status,
            priority,
            run_at,
            attempts,
            max_attempts,
            lease_until,
            worker,
            token,
            result,
            last_error,
            created_at,
            started_at,
            finished_at,
            timeout,
            beat_timeout,
            queue,
            key,
        ) = row
        # A worker builds one Job per claim, so this skips the frozen __init__ (one guarded
        # setattr per field, about half of a claim's Python time) and gives the instance its fields
        # as one dict, built in one step; it is as frozen as any other afterwards. The times are
        # made floats in line (SQLite may hand back a whole REAL as an int: RETURNING skips column
        # affinity), not by a helper: a call costs as much as the rest of a field.
        job = object.__new__(cls)
        object.__setattr__(
            job,
            "__dict__",
            {
                "id": id_,
                "payload": _load_json(id_, "payload", payload),
                "status": _STATUSES.get(status) or Status(status),  # Status() names a damaged value
                "priority": priority,
                "run_at": float(run_at),
                "attempts": attempts,
                "max_attempts": max_attempts,
                "lease_until": None if lease_until is None else float(lease_until),
                "worker": worker,
                "token": token,
                "result": None if result is None else _load_json(id_, "result", result),
                "last_error": last_error,
                "created_at": float(created_at),
                "started_at": None if started_at is None else float(started_at),
                "finished_at": None if finished_at is None else float(finished_at),
                "timeout": None if timeout is None else float(timeout),
                "beat_timeout": None if beat_timeout is None else float(beat_timeout),
                "queue": queue,
                "key": key,
                "damage": None,
            },
        )
        return job

    @classmethod
    def from_row_or_damaged(cls, row: Iterable[Any]) -> Job:
        """Like ``from_row``, but a row that cannot be read in full gives a Job with ``damage`` set.

        Every field that can be read is kept; each one that cannot is None and named in ``damage``.
        """
        try:
            return cls.from_row(row)
        except (ValueError, TypeError, LookupError) as exc:
            first = str(exc)
        named = JobRow._make(row)
        fields, problems = {}, []
        readers = {
            "payload": lambda v: _load_json(named.id, "payload", v),
            "result": lambda v: None if v is None else _load_json(named.id, "result", v),
            "status": lambda v: _STATUSES[v],
        }
        for name, value in zip(JobRow._fields, named, strict=True):
            kind = _FIELD_KINDS.get(name)
            try:
                if name in readers:
                    fields[name] = readers[name](value)
                elif kind is float:
                    fields[name] = None if value is None else _finite(value)
                elif kind is int:
                    fields[name] = _whole(value)
                elif value is not None and not isinstance(value, str):
                    raise TypeError(value)
                else:
                    fields[name] = value
            except (ValueError, TypeError, LookupError) as exc:
                fields[name] = None
                problems.append(str(exc) if isinstance(exc, InvalidPayload) else f"{name} is {value!r:.40}")
        job = object.__new__(cls)
        job.__dict__.update(fields, damage=f"job {named.id} is damaged: " + ("; ".join(problems) or first))
        return job


_STATUSES = {s.value: s for s in Status}


class JobRow(NamedTuple):
    """A job's row (``JOB_COLUMNS``) with its columns named, as the driver stored them: read ``row.token``."""

    id: int
    payload: Any
    status: Any
    priority: Any
    run_at: Any
    attempts: Any
    max_attempts: Any
    lease_until: Any
    worker: Any
    token: Any
    result: Any
    last_error: Any
    created_at: Any
    started_at: Any
    finished_at: Any
    timeout: Any
    beat_timeout: Any
    queue: Any
    key: Any


if JobRow._fields != tuple(JOB_COLUMNS.replace(" ", "").split(",")):  # pragma: no cover  (an edit of one alone)
    raise AssertionError("JobRow's fields must be JOB_COLUMNS, in order")
_FIELD_KINDS = {
    "priority": int,
    "attempts": int,
    "max_attempts": int,
    "run_at": float,
    "lease_until": float,
    "created_at": float,
    "started_at": float,
    "finished_at": float,
    "timeout": float,
    "beat_timeout": float,
    "id": int,
}


def _finite(value: Any) -> float:
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value == value
        and abs(value) != float("inf")
    ):
        return float(value)
    raise ValueError(value)


def _whole(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(value)


EVENT_COLUMNS = "id, job_id, kind, at, worker, token, attempt, detail"

# The history's kinds of event that end an attempt and send the job back to pending (or on to dead):
# its holder's, fenced by its token as its other writes are (a failure, a timeout its worker gave it
# up at, a hand-back when its worker stopped), and the reaper's, for a holder whose lease ran out.
HOLDER_RELEASES = ("failed", "timed_out", "released")
REAPER_RELEASES = ("reaped",)
RELEASES = HOLDER_RELEASES + REAPER_RELEASES
# What an operator does by hand (``Queue.retry``, ``Queue.cancel``): a dead job put back to pending, and a
# pending or running job made dead (a 'dead' event follows), its holder's token then holding nothing.
RETRIED = "retried"
CANCELLED = "cancelled"


class Enqueued(NamedTuple):
    """What ``Queue.enqueue_unique`` did: the job's ``id``, whether it is ``new``, and, when it is not, the
    ``status`` of the job already holding ``key`` (pending or running), whose id is the one returned."""

    id: int
    new: bool
    status: str
    key: str
    queue: str

    def __str__(self) -> str:
        if self.new:
            return f"job {self.id} enqueued with key {self.key}"
        return f"job {self.id} already {self.status} with key {self.key}"


@dataclass(frozen=True)
class Event:
    """One transition in a job's history, written in the same transaction as the change."""

    id: int
    job_id: int
    kind: str
    at: float
    worker: str | None
    token: str | None
    attempt: int
    detail: str | None

    @classmethod
    def from_row(cls, row: tuple) -> Event:
        return cls(*row)
