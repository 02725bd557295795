"""What a backend must provide, and what it may: the ``Backend`` Protocol of the required
operations, the ``FastPaths`` Protocol of the optional fused ones, and the typed values that cross them.

``leaselab.queue`` holds the queue's logic once (argument checks, the clock, tokens, telling a write
that went through unseen from a refusal, ``LeaseLost``) and calls only these methods. A new engine
writes the few primitive operations of ``Backend``: enqueue one job, claim one (or a batch, whose
tokens name each job), renew one lease, complete or fail one job, reap, the fenced completion inside
the caller's transaction (``completing``), the refusals' transaction, and the reads. Each is what the
queue cannot build from the others. The fused fast paths of ``FastPaths`` (complete-and-claim, batch
enqueues, completions and renewals, waiting for work) are optional: ``leaselab.backends.defaults``
builds each from the primitives (``BackendDefaults``, a mixin; ``with_defaults`` for a backend that
does not derive from it), and a backend that can do one in fewer statements or round trips overrides
it. The type checker run in the suite (``tests/test_types.py``) proves each backend satisfies
``Backend``, and the SQL ones ``FullBackend`` too.

The values that cross it are named tuples (typed, immutable, and cheap to make on a worker's hot
path); times are unix seconds from the queue's clock; payloads, results and errors arrive already encoded
(JSON text, checked by the queue). ``durable`` asks for the write to reach the disk before the call
returns (the queue's ``durability="full"``). A fenced write (``WHERE status = 'running' AND token = ?``)
that changed no row reports it (``False``, ``None``, or an id left out of a list); deciding what that
means (a write that went through unseen, or ``LeaseLost``) is the queue's job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ..job import DEFAULT_QUEUE, Enqueued, Event, Job, Status

Tracer = Callable[[str, Any], None]


class NewJob(NamedTuple):
    """One job to enqueue, its payload already JSON text."""

    payload: str
    priority: int
    run_at: float
    max_attempts: int
    timeout: float | None = None  # the longest one attempt may run, seconds
    beat_timeout: float | None = None  # the longest its handler may go without reporting progress
    queue: str = DEFAULT_QUEUE  # the named queue it waits in
    key: str | None = None  # a unique job's key (``enqueue_unique``); None for any other job


class Claim(NamedTuple):
    """Who claims, with which token, when, and until when the lease runs."""

    worker: str
    token: str
    now: float
    lease_until: float
    queues: tuple[str, ...] = (DEFAULT_QUEUE,)  # the named queues it takes jobs from; never empty


class Completion(NamedTuple):
    """One fenced completion: the job, the token that should hold it, and its result as JSON text."""

    id: int
    token: str
    result: str


class Unreadable(NamedTuple):
    """A claimed row whose stored payload cannot be read (damaged outside leaselab): the queue fails
    that attempt with ``reason`` instead of handing it to a handler."""

    id: int
    token: str
    reason: str


# What a claim hands back for one job.
Claimed = Job | Unreadable


class Outcome(NamedTuple):
    """What a job's row says now, read after a fenced write changed no row: enough to tell a write
    that went through unseen (same token, same last event, same value) from a refusal."""

    status: str
    token: str | None
    last_event: str
    result: str | None
    last_error: str | None


class ByHand(NamedTuple):
    """What an operator's retry or cancel did: the ids it ``changed``, or, when it left a job it was
    named alone, nothing at all (its transaction rolled back) and ``refused``: {id: that job's
    status, None for an unknown id}."""

    changed: list[int]
    refused: dict[int, str | None]


@dataclass
class Completing:
    """The handle of ``Backend.completing``: the driver connection inside the transaction (for the
    caller's own statements), and, once the block is over, whether the completion took and when."""

    connection: Any
    completed: bool = False
    now: float = 0.0


class Refusals(Protocol):
    """Inside one transaction: reading a job's outcome and writing a refused write into its history."""

    def outcome(self, job_id: int) -> Outcome | None:
        """The job's row as an ``Outcome``; None for an unknown id."""
        ...

    def failed(self, job_id: int, token: str, error: str, kind: str = "failed") -> bool:
        """Whether the job's history holds a ``kind`` event (``failed`` or ``timed_out``) by the claim
        ``token`` with ``error``."""
        ...

    def record(self, job_id: int, token: str, now: float, detail: str) -> str | None:
        """Append a ``lease_lost`` event naming the claim ``token`` made; the job's status, None for an unknown id."""
        ...


class Backend(Protocol):
    """What every backend must write: the primitive operations, each one statement or one transaction.
    See the module's docstring for the conventions; ``FastPaths`` for what it may add."""

    # A name for messages (a server's URL without its password), and the engine ("sqlite", "postgresql").
    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    # The database's own clock (unix seconds), or None when the caller's clock is the one to use.
    @property
    def clock(self) -> Callable[[], float] | None: ...

    tracer: Tracer | None  # called with (statement, params) before each statement runs
    call_timeout: float | None  # the longest one call may wait for a server; ignored where every wait is bounded

    # Whether ``call_timeout`` bounds its calls (a server's); False where it is ignored.
    @property
    def bounds_calls(self) -> bool: ...

    def use_clock(self, clock: Callable[[], float]) -> None:
        """The queue's clock, for statements that read the time once they hold their locks."""
        ...

    def close(self) -> None: ...

    # -- writes ---------------------------------------------------------------

    def enqueue(self, job: NewJob, now: float, *, durable: bool) -> int: ...

    def enqueue_unique(self, job: NewJob, now: float, *, durable: bool) -> Enqueued:
        """Enqueue ``job`` (its ``key`` set) unless a pending or running job holds that key; then that job,
        not new. Race-free: however many callers enqueue one key at once, one job is made."""
        ...

    def schedule_last(self, name: str) -> float | None:
        """The last tick handled of the periodic schedule ``name``; None if no scheduler ran it yet."""
        ...

    def advance_schedule(
        self, name: str, last: float | None, tick: float, jobs: Sequence[NewJob], now: float, *, durable: bool
    ) -> list[int] | None:
        """In one transaction: move schedule ``name``'s last tick from ``last`` (None: no row yet) to ``tick``
        and enqueue ``jobs`` (each with its tick's key); their ids, or None, writing nothing, if the last tick
        was no longer ``last`` (another scheduler moved it first). Race-free: one caller per ``last`` wins."""
        ...

    def claim(self, claim: Claim, *, durable: bool) -> Claimed | None:
        """Lease the next runnable job in one statement; None when none is runnable."""
        ...

    def claim_many(self, n: int, claim: Claim, *, durable: bool) -> list[Claimed]:
        """Lease up to ``n`` runnable jobs in one statement, each token ``claim.token`` + '-' + its id; any order.

        Required, not built from ``claim``: each token names the job it leases, which no claim knows
        before its statement has picked the job."""
        ...

    def heartbeat(self, job_id: int, token: str, lease: float, now: float | None) -> float | None:
        """Renew one lease to (the time the write is applied) + ``lease``; the new lease_until, None if fenced off.

        ``now`` None: read the time from the backend's own clock as the statement runs."""
        ...

    def complete(self, done: Completion, now: float, *, durable: bool) -> bool:
        """The fenced completion; False when it changed no row."""
        ...

    def completing(
        self, done: Completion, now: Callable[[], float], *, durable: bool
    ) -> AbstractContextManager[Completing]:
        """One transaction: the caller's block (on ``Completing.connection``), then the fenced completion
        dated ``now()``; all rolled back if that changed no row (``Completing.completed`` False)."""
        ...

    def fail(self, job_id: int, token: str, error: str, now: float, kind: str = "failed") -> str | None:
        """A fenced failed attempt: back to pending after the backoff, or dead; the new status, None if fenced off.
        ``kind`` is the history's word for it: ``failed``, or ``timed_out`` (its worker gave it up at its timeout)."""
        ...

    def release(self, tokens: Sequence[str], now: float) -> dict[int, str]:
        """Hand back every running job held by one of ``tokens`` (its holder stops), in one statement:
        pending and runnable at once, or dead if its attempts are spent; {job id: new status}. A job
        another token holds now is left out."""
        ...

    def retry(
        self, ids: Sequence[int] | None, fresh: int, now: float, *, durable: bool, queue: str | None = None
    ) -> ByHand:
        """Put dead jobs back to pending, runnable at ``now``, with ``fresh`` attempts on top of those they
        used (``max_attempts`` raised, ``attempts`` kept), each with a ``retried`` event: the jobs in
        ``ids``, all or none in one transaction (any of them not dead: none, and ``ByHand.refused``
        says why), or with ``ids`` None every dead job (of ``queue`` alone, if given)."""
        ...

    def cancel(self, ids: Sequence[int], reason: str, now: float, *, durable: bool) -> ByHand:
        """Make the pending and running jobs in ``ids`` dead, each with a ``cancelled`` event whose detail
        is ``reason``: all or none in one transaction, as ``retry``. A running job's holder then holds
        nothing: its token's later writes are refused."""
        ...

    def reap(self, now: float, keep: Sequence[str]) -> list[int]:
        """Expire every running lease past ``now`` not held by a token in ``keep``, in one statement; their ids."""
        ...

    def refusals(self) -> AbstractContextManager[Refusals]:
        """A transaction for settling fenced writes that changed no row (never synced on its own)."""
        ...

    # -- reads ----------------------------------------------------------------

    def held_by(self, token: str) -> list[Claimed]:
        """The running jobs that the claim made with ``token`` (or a batch claim's ``token-<id>``) holds."""
        ...

    def get(self, job_id: int) -> Job | None: ...

    def jobs(
        self, status: Status | None, limit: int, newest_first: bool, after: int = 0, queue: str | None = None
    ) -> list[Job]:
        """At most ``limit`` jobs with ids above ``after``, in id order (or the newest of them), of one ``queue``
        if given; a damaged row as a ``Job`` whose ``damage`` says why."""
        ...

    def stats(self) -> dict[str, dict[str, int]]:
        """How many jobs are in each status that has any, by queue: {queue: {status: count}}."""
        ...

    def events(self, job_id: int | None, after: int, limit: int | None = None) -> list[Event]:
        """The history, oldest first, after event id ``after``, at most ``limit`` events (None: all); one job's
        alone if ``job_id`` is given."""
        ...

    def next_run_at(self) -> float | None:
        """When the earliest pending job becomes claimable; None if none is pending."""
        ...


class FastPaths(Protocol):
    """What a backend may add: fused operations, each with a correct default built from ``Backend``'s
    primitives (``leaselab.backends.defaults``). A backend overrides one to do it in one transaction,
    one statement or one round trip; the queue calls the backend's own when it has it. Each override
    keeps the default's answers, and each default's docstring says what atomicity it gives up."""

    def wait_for_work(self, timeout: float, stop: threading.Event | None = None) -> None:
        """Block until a job may have arrived, ``stop`` is set, or ``timeout`` seconds pass."""
        ...

    def enqueue_many(self, jobs: Sequence[NewJob], now: float, *, durable: bool) -> list[int]:
        """All in one transaction; the ids in order."""
        ...

    def heartbeat_many(self, tokens: Sequence[str], lease: float, now: float | None) -> dict[int, float]:
        """Renew every lease these tokens hold, in one statement: {job id: new lease_until}."""
        ...

    def complete_and_claim(self, done: Completion, claim: Claim, *, durable: bool) -> tuple[bool, Claimed | None]:
        """Complete ``done`` and, only if that changed its row, claim as ``claim`` does, in one transaction.
        Returns (whether it completed, the claimed job or None)."""
        ...

    def complete_many(self, done: Sequence[Completion], now: float, *, durable: bool) -> list[int]:
        """Every completion in one transaction, each fenced on its own; the ids that completed."""
        ...

    def complete_many_and_claim(
        self, done: Sequence[Completion], n: int, claim: Claim, *, durable: bool
    ) -> tuple[list[int], list[Claimed]]:
        """``complete_many`` and ``claim_many`` in one transaction; the claim does not wait on the completions."""
        ...


class FullBackend(Backend, FastPaths, Protocol):
    """A backend with every fast path, its own or a default: what the queue holds."""


# The optional members, by name: what ``with_defaults`` fills in where a backend lacks them.
FAST_PATHS = (
    "wait_for_work",
    "enqueue_many",
    "heartbeat_many",
    "complete_and_claim",
    "complete_many",
    "complete_many_and_claim",
)
