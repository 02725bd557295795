"""What a job and an event look like to a caller: frozen dataclasses made by one converter each."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .errors import InvalidPayload


class Status(str, Enum):
    """A job's place in its life: pending -> running -> done, or back to pending, or dead."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"

    def __str__(self) -> str:
        return self.value


def _load_json(job_id: int, what: str, text: str | bytes) -> Any:
    # Only JSON is ever read back: something else in the file (a planted pickle, say) is damage, not code.
    try:
        return json.loads(text)
    except (ValueError, TypeError) as exc:
        raise InvalidPayload(f"job {job_id}: the stored {what} is not JSON ({exc})") from None


def _seconds(value: float | int | None) -> float | None:
    # SQLite may hand back a whole REAL as an int (RETURNING skips column affinity).
    return None if value is None else float(value)


# The columns every statement that returns a job selects, in this order.
JOB_COLUMNS = (
    "id, payload, status, priority, run_at, attempts, max_attempts, lease_until, "
    "worker, token, result, last_error, created_at, started_at, finished_at"
)


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

    @property
    def fence(self) -> tuple[int, int]:
        """``(job id, attempt number)``: compare it to reject writes from an older attempt."""
        return (self.id, self.attempts)

    @classmethod
    def from_row(cls, row: tuple) -> "Job":
        """Build a Job from a row selected with ``JOB_COLUMNS``."""
        (id_, payload, status, priority, run_at, attempts, max_attempts, lease_until,
         worker, token, result, last_error, created_at, started_at, finished_at) = row
        # A worker builds one Job per claim, so this skips the frozen __init__ (one guarded
        # setattr per field, about half of a claim's Python time) and fills the fields directly;
        # the instance is as frozen as any other afterwards.
        job = object.__new__(cls)
        job.__dict__.update(
            id=id_,
            payload=_load_json(id_, "payload", payload),
            status=_STATUSES.get(status) or Status(status),  # Status() names a damaged value
            priority=priority,
            run_at=float(run_at),
            attempts=attempts,
            max_attempts=max_attempts,
            lease_until=_seconds(lease_until),
            worker=worker,
            token=token,
            result=None if result is None else _load_json(id_, "result", result),
            last_error=last_error,
            created_at=float(created_at),
            started_at=_seconds(started_at),
            finished_at=_seconds(finished_at),
        )
        return job


_STATUSES = {s.value: s for s in Status}

EVENT_KINDS = ("enqueued", "claimed", "heartbeat", "completed", "failed", "reaped", "dead", "lease_lost")

EVENT_COLUMNS = "id, job_id, kind, at, worker, token, attempt, detail"


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
    def from_row(cls, row: tuple) -> "Event":
        return cls(*row)
