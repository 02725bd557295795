"""The executable specification: what the queue promises, as a reference model in plain Python.

Every operation the simulator sends to the real ``Queue`` is also applied here, at the same "now";
after each one the simulator compares what the queue answered and what its rows say with what this
model says, field by field, and the first disagreement is a ``Violation`` that names the operation,
the job and the field. Nothing here reads the database: the model is the queue's promises written
once more, independently of the statements, so a change to a statement that breaks a promise shows.

The promises, one per rule below:

- a claim takes the runnable jobs (pending, ``run_at`` reached) in claim order (priority highest
  first, then ``run_at``, then id), at most ``n``; each becomes running, its attempts one higher, its
  lease ``now + lease``, with a token no claim ever wrote before (the claim's, or the claim's, a dash
  and the job's id);
- a heartbeat, a completion and a failure change a job only while it is running under that very token
  (the fence); a completion or failure already written under that token counts as written;
- a completion makes the job done with its result; a failure, and an expired lease taken back by the
  reaper, make it pending again after ``backoff.delay(attempts)``, or dead once its attempts are spent;
- the reaper takes back exactly the running jobs whose lease ended before now, except those held by
  a token it was asked to keep (a worker's own, or any job a kept claim token took);
- an attempt given up at its timeout is written as a failure is (``time_out``: fenced, then pending
  after the backoff, or dead), and no heartbeat renews a lease past the attempt's timeout: checked by
  the world, which knows each worker's clock.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from ..backoff import Backoff

STATUSES = ("pending", "running", "done", "dead")
# Times are compared exactly, as the statements compare them: the model adds the same doubles in the
# same order as SQLite does (now + lease, now + backoff), so it gets the very same values.


# Every promise a Violation can name: the queue's rows against the model (wrong_*), the answers of its
# calls, and the world's own rules about workers, effects and progress.
KINDS = (
    "rows",
    "wrong_status",
    "wrong_attempts",
    "wrong_token",
    "wrong_worker",
    "wrong_priority",
    "wrong_max_attempts",
    "wrong_run_at",
    "wrong_lease_until",
    "wrong_result",
    "wrong_outcome",
    "token",
    "token_reused",
    "claim_order",
    "held_by",
    "fence",
    "refused_completion",
    "refused_failure",
    "refused_heartbeat",
    "reap",
    "queue_error",
    "effect_without_lease",
    "effect_repeated",
    "needless_rerun",
    "reaped_own_job",
    "stuck",
    "lost_on_power_cut",
    "torn_on_power_cut",
    "acknowledged_lost",
    "renewed_past_timeout",
)


class Violation(Exception):
    """A promise broken: ``kind`` (one of ``KINDS``) names which, ``message`` says how, for the step that broke it."""

    def __init__(self, kind: str, message: str):
        if kind not in KINDS:
            raise ValueError(f"no promise named {kind!r}: a Violation's kind is one of model.KINDS")
        self.kind, self.message = kind, message
        super().__init__(f"{kind}: {message}")


@dataclass(frozen=True)
class Row:
    """One job as the specification says it must be."""

    id: int
    status: str
    priority: int
    run_at: float
    attempts: int
    max_attempts: int
    lease_until: float | None = None
    worker: str | None = None
    token: str | None = None
    result: Any = None
    done_by: str | None = None  # the token whose completion made it done
    timeout: float | None = None  # the longest one attempt may run, seconds
    claimed_at: float | None = None  # the queue's time of the running attempt's claim


def _changed_row(job: Row, **changes: Any) -> Row:
    """``dataclasses.replace(job, **changes)`` without its generic work: the model makes hundreds a schedule.
    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; Row has no
    ``__post_init__`` and no default factories, so filling a new one's fields at once is the same row."""
    row = object.__new__(Row)
    row.__dict__.update(job.__dict__, **changes)
    return row


@dataclass
class Model:
    """The queue's state as its promises say it must be, changed by the same operations as the queue."""

    backoff: Backoff
    jobs: dict[int, Row] = field(default_factory=dict)
    tokens: set[str] = field(default_factory=set)  # every token any claim ever wrote
    failed_by: dict[str, str] = field(default_factory=dict)  # token -> the status its written failure gave
    # The ids of the jobs the operations below wrote, until the caller clears it: the simulator compares
    # those with the queue's rows after each call, and works out again only what they change.
    changed: set[int] = field(default_factory=set)

    # -- the operations ------------------------------------------------------------------

    def enqueue(
        self, job_id: int, priority: int, run_at: float, max_attempts: int, timeout: float | None = None
    ) -> None:
        self.changed.add(job_id)
        self.jobs[job_id] = Row(job_id, "pending", priority, run_at, 0, max_attempts, timeout=timeout)

    def runnable(self, now: float, n: int | None = None) -> list[Row]:
        """The jobs a claim may take at ``now``, in claim order: all of them, or the first ``n``."""
        # Each job keyed by its place in claim order, the id last: no two keys are equal, so the job itself is
        # never compared, and the first n of them are the first n of the whole order, sorted.
        ready = [
            (-j.priority, j.run_at, j.id, j) for j in self.jobs.values() if j.status == "pending" and j.run_at <= now
        ]
        return [key[-1] for key in (sorted(ready) if n is None else heapq.nsmallest(n, ready))]

    def pending(self) -> bool:
        return any(j.status == "pending" for j in self.jobs.values())

    def claim(self, n: int, worker: str, lease: float, token: str, now: float, got: dict[int, str]) -> None:
        """A claim of up to ``n`` jobs under ``token`` that the queue answered with ``got`` ({id: token})."""
        want = self.runnable(now, n)
        ids = [j.id for j in want]
        # Two runnable jobs at the same key within float noise may be taken in either order.
        if sorted(got) != sorted(ids):
            raise Violation(
                "claim_order",
                f"claim of {n} at {now:.3f} took jobs {sorted(got)}; runnable in claim order were "
                f"{[j.id for j in self.runnable(now)]}, so it must take {ids}",
            )
        for job in want:
            written = got[job.id]
            if written not in (token, f"{token}-{job.id}"):
                raise Violation("token", f"job {job.id} claimed with token {written!r}, not the claim's own")
            if written in self.tokens:
                raise Violation(
                    "token_reused", f"job {job.id} claimed with token {written!r}, written by an earlier claim"
                )
            self.tokens.add(written)
            self.changed.add(job.id)
            self.jobs[job.id] = _changed_row(
                job,
                status="running",
                attempts=job.attempts + 1,
                lease_until=now + lease,
                worker=worker,
                token=written,
                result=None,
                claimed_at=now,
            )

    def heartbeat(self, held: list[tuple[int, str]], lease: float, now: float) -> set[int]:
        renewed = set()
        for job_id, token in held:
            job = self.jobs.get(job_id)
            if job is not None and job.status == "running" and job.token == token:
                self.changed.add(job_id)
                self.jobs[job_id] = _changed_row(job, lease_until=now + lease)
                renewed.add(job_id)
        return renewed

    def complete(self, job_id: int, token: str, result: Any) -> bool:
        """True when the completion counts as written: now, or by this token before."""
        job = self.jobs.get(job_id)
        if job is None:
            return False
        if job.status == "running" and job.token == token:
            self.changed.add(job_id)
            self.jobs[job_id] = _changed_row(job, status="done", lease_until=None, result=result, done_by=token)
            return True
        return job.status == "done" and job.done_by == token

    def fail(self, job_id: int, token: str, now: float) -> str | None:
        """The job's status after the failure (or the timeout: the same rule), or None when it is refused."""
        job = self.jobs.get(job_id)
        if job is None:
            return None
        if job.status == "running" and job.token == token:
            self.changed.add(job_id)
            self.jobs[job_id] = self._retry_or_dead(job, now)
            self.failed_by[token] = self.jobs[job_id].status
            return self.jobs[job_id].status
        # Written before, under this token (its reply was lost): the status that failure gave.
        return self.failed_by.get(token)

    def release(self, job_id: int, token: str, now: float) -> str | None:
        """A holder hands its job back (``Queue.release``): pending and runnable at once, or dead when its
        attempts are spent; None when refused (that token no longer holds it)."""
        job = self.jobs.get(job_id)
        if job is None or job.status != "running" or job.token != token:
            return None
        self.changed.add(job_id)
        if job.attempts >= job.max_attempts:
            self.jobs[job_id] = _changed_row(job, status="dead", lease_until=None)
        else:
            self.jobs[job_id] = _changed_row(job, status="pending", lease_until=None, run_at=now)
        return self.jobs[job_id].status

    def reap(self, keep: list[str], now: float) -> set[int]:
        moved = set()
        for job in list(self.jobs.values()):
            if job.status != "running" or job.lease_until is None or job.lease_until >= now:
                continue
            if job.token in keep or (job.token or "").split("-")[0] in keep:
                continue
            self.changed.add(job.id)
            self.jobs[job.id] = self._retry_or_dead(job, now)
            moved.add(job.id)
        return moved

    def _retry_or_dead(self, job: Row, now: float) -> Row:
        if job.attempts >= job.max_attempts:
            return _changed_row(job, status="dead", lease_until=None)
        return _changed_row(job, status="pending", lease_until=None, run_at=now + self.backoff.delay(job.attempts))

    # -- judging the queue ------------------------------------------------------------------

    def expired_at(self, job_id: int, now: float) -> bool:
        """True when job ``job_id``'s lease had ended by ``now`` (the reaper may take it)."""
        job = self.jobs[job_id]
        return job.lease_until is not None and job.lease_until < now

    def compare(self, rows: dict[int, dict[str, Any]], after: str, *, ids: set[int] | None = None) -> None:
        """Raise ``Violation`` at the first field where the queue's ``rows`` differ from the model: every job's,
        or only those of ``ids`` (then ``rows`` holds those, and every other row is known to be the model's)."""
        if ids is None and set(rows) != set(self.jobs):
            raise Violation(
                "rows", f"after {after}: the queue holds jobs {sorted(rows)}, the model {sorted(self.jobs)}"
            )
        for job_id in sorted(self.jobs if ids is None else ids):
            want, got = self.jobs[job_id], rows[job_id]
            if _agrees(want, got):
                continue
            for name in ("status", "attempts", "token", "worker", "priority", "max_attempts"):
                if name in ("token", "worker") and want.status == "pending" and want.attempts == 0:
                    continue
                if getattr(want, name) != got[name]:
                    raise Violation(
                        f"wrong_{name}",
                        f"after {after}: job {job_id} has {name} {got[name]!r}, "
                        f"the specification says {getattr(want, name)!r}",
                    )
            for name in ("run_at", "lease_until"):
                a, b = getattr(want, name), got[name]
                if name == "lease_until" and want.status != "running":
                    continue  # a finished job's lease no longer matters; the status says it is over
                if (a is None) != (b is None) or (a is not None and a != b):
                    raise Violation(
                        f"wrong_{name}",
                        f"after {after}: job {job_id} has {name} {_show(b)}, the specification says {_show(a)}",
                    )
            if want.status == "done" and got["result"] != want.result:
                raise Violation(
                    "wrong_result",
                    f"after {after}: job {job_id} holds result {got['result']!r}, written was {want.result!r}",
                )


def _agrees(want: Row, got: dict[str, Any]) -> bool:
    """True when the row ``got`` holds every field ``compare`` judges as ``want`` has it: the common answer, in
    one expression. False leaves it to ``compare``'s field-by-field check, which names the first field that
    differs (or finds none: a field it does not judge for that status)."""
    return (
        want.status == got["status"]
        and want.attempts == got["attempts"]
        and want.token == got["token"]
        and want.worker == got["worker"]
        and want.priority == got["priority"]
        and want.max_attempts == got["max_attempts"]
        and want.run_at == got["run_at"]
        and (want.status != "running" or want.lease_until == got["lease_until"])
        and (want.status != "done" or got["result"] == want.result)
    )


def _show(value: float | None) -> str:
    return "none" if value is None else f"{value:.3f}"
