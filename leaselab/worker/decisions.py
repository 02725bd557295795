"""What a worker decides, apart from threads, sleeps and sockets: one piece of code that the real
``Worker`` (its loop, its pulse, its leases) and the simulator (``leaselab.sim``) both call.

Every function here takes what the worker knows (times on its own clock, ``clock.elapsed``, what a call
returned) and says what to do; none of them reads a clock, sleeps, starts a thread or talks to the
database, except the two recoveries, which say which questions to ask the queue after a call whose
reply never came and ask them through the queue they are given. Callers look each one up on this
module when they use it (``decisions.verdict(...)``), never by a name imported once, so a change
here (a planted bug, a test's patch) changes the real worker and the simulator alike.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import LeaseLost
from ..job import DEFAULT_QUEUE

if TYPE_CHECKING:
    from ..job import Job
    from ..queue import Queue

MARGIN = 0.1  # of the lease: how long before the database could reap a job the worker gives it up
FIRST_WAIT = 0.05  # the first wait before a call that met a transient fault is tried again
MAX_WAIT = 2.0  # the longest wait between such tries


# -- the lease on the worker's own clock ----------------------------------------------------


def margin(seconds: float) -> float:
    """How much earlier than the database the worker gives a lease of ``seconds`` up."""
    return MARGIN * seconds


def own_deadline(sent: float, seconds: float, margin: float) -> float:
    """When the worker gives a lease up on its own clock: counted from when the claim (or the last
    acknowledged heartbeat) was *sent*, which is no later than the database applied it, less the margin.
    A worker cut off from its database learns from this alone that it may be a zombie."""
    return sent + seconds - margin


def renewed_deadline(deadline: float, sent: float, seconds: float, margin: float) -> float:
    """The deadline after a heartbeat sent at ``sent`` was acknowledged: never earlier than before."""
    return max(deadline, own_deadline(sent, seconds, margin))


# -- the pulse's cadence ----------------------------------------------------------------------


def beat_every(lease: float) -> float:
    """How often the held leases are renewed: three beats fit in a lease, so two may be lost."""
    return lease / 3


def next_beat(now: float, lease: float, reached: bool, after: float) -> float:
    """When to beat next, after a beat at ``now`` that ended at ``after``: a third of a lease on if it
    reached the database, or soon (a missed beat eats into the lease) if it did not."""
    every = beat_every(lease)
    return now + every if reached else after + min(every, MAX_WAIT)


def overdue(
    now: float, started: float, timeout: float | None, progressed: float, beat_timeout: float | None
) -> str | None:
    """Why an attempt must be given up at ``now``, or None: it began at ``started`` and may run
    ``timeout`` seconds at most; its handler last reported progress (``Lease.beat()``, or the start) at
    ``progressed`` and may go ``beat_timeout`` seconds without. A heartbeat proves the worker lives, not
    that the job moves: past either limit the worker stops renewing the lease and gives the attempt up."""
    if timeout is not None and now - started >= timeout:
        return f"ran past its timeout of {timeout:g}s"
    if beat_timeout is not None and now - progressed >= beat_timeout:
        return f"reported no progress for {beat_timeout:g}s (its beat_timeout)"
    return None


def overdue_at(started: float, timeout: float | None, progressed: float, beat_timeout: float | None) -> float | None:
    """When ``overdue`` will first say yes, as things stand (None: never)."""
    times = []
    if timeout is not None:
        times.append(started + timeout)
    if beat_timeout is not None:
        times.append(progressed + beat_timeout)
    return min(times, default=None)


def out_of_service(hung: int, concurrency: int) -> bool:
    """True when every slot holds a handler past its timeout: Python cannot stop a thread, so the worker
    can do nothing more and should exit (at once with one slot), for its supervisor to start a new one."""
    return hung >= concurrency


def keep_from_reaper(renewable: Iterable[str], in_flight: Iterable[str]) -> list[str]:
    """The tokens a worker's own reaper must not reap: the leases it renews and the claims and outcomes
    it has sent. The worker is alive (its reaper runs in it): its jobs are no crashed worker's, whatever
    a freeze did to their leases; another worker's reaper takes them if it is not."""
    return [*renewable, *in_flight]


# -- transient faults -------------------------------------------------------------------------


def retry_wait(previous: float | None) -> float:
    """How long to wait before trying again a call that met a transient fault: ``FIRST_WAIT``, then
    twice the previous wait, up to ``MAX_WAIT``."""
    return FIRST_WAIT if previous is None else min(previous * 2, MAX_WAIT)


# -- claims and outcomes ----------------------------------------------------------------------


def claims_to_make(concurrency: int, running: int, claimed: int, max_jobs: int | None, stopping: bool) -> int:
    """How many jobs to claim now: the free slots, within ``max_jobs``, none once stopping."""
    if stopping:
        return 0
    free = concurrency - running
    if max_jobs is not None:
        free = min(free, max_jobs - claimed)
    return max(free, 0)


class Verdict(enum.Enum):
    """What the worker writes for a finished attempt."""

    COMPLETE = "complete"  # the handler returned: write its result, fenced by the token
    FAIL = "fail"  # the handler raised: write the failure, fenced; the queue retries or buries the job
    DROP = "drop"  # the lease is known lost: write nothing, the job is another attempt's now


def verdict(refused: bool, error: BaseException | None) -> Verdict:
    """The outcome to write for an attempt whose lease was ``refused`` (a heartbeat came back refused)
    or not, whose handler raised ``error`` (None: it returned). A handler's ``LeaseLost`` (its
    ``lease.check()`` found the lease gone) writes nothing either: the fence would refuse it anyway."""
    if refused or isinstance(error, LeaseLost):
        return Verdict.DROP
    return Verdict.COMPLETE if error is None else Verdict.FAIL


def beat_refused(held: int, renewed: Iterable[int], superseded: bool = False) -> bool:
    """True when a heartbeat that asked to renew job ``held`` did not renew it: the statement matched
    by token, so a job missing from its answer was fenced off. ``superseded``: this worker also holds
    a later attempt of the same job (``superseded`` below), so the job in the answer is that
    attempt's, and this one's token holds nothing."""
    return superseded or held not in renewed


def superseded(held: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Of the ``(job id, attempt)`` a worker holds, those a later attempt of the same job, also held,
    makes stale. A worker frozen past its lease can claim the very job it still runs on another slot;
    only the latest claim's token can be on the row, and a heartbeat's answer names jobs, not tokens."""
    latest: dict[int, int] = {}
    pairs = list(held)
    for job_id, attempt in pairs:
        latest[job_id] = max(attempt, latest.get(job_id, attempt))
    return {(job_id, attempt) for job_id, attempt in pairs if attempt < latest[job_id]}


# -- after a reply that never came -------------------------------------------------------------


def recover_claim(
    queue: Queue,
    tried: Sequence[str],
    token: str,
    n: int,
    worker: str,
    lease: float,
    queues: str | Sequence[str] = DEFAULT_QUEUE,
) -> list[Job]:
    """A claim retried after a transient fault: any try may have committed unseen, so the jobs held
    under a token already ``tried`` are the claim's; only if none are is the claim sent again, under
    the fresh ``token``. Never under one tried: a claim that committed unseen and whose job was
    reaped meanwhile would write that token a second time, and a fence is one claim's alone."""
    for old in tried:
        held = queue.held_by(old)
        if held:
            return held
    return queue.claim_many(n, worker, lease, token=token, queues=queues)


def recover_completion(queue: Queue, items: list[tuple[int, str, Any]], refill: str) -> tuple[list[int], list[Job]]:
    """Completions (and the claim sent with them under ``refill``) retried after a transient fault: each
    completion again under its own token, which the queue counts as done if the first try wrote it, and
    the claim's jobs found by its token. Never under a new token: the fence would refuse it, and a
    result already written would be taken for a lost lease."""
    return queue.complete_many(items), queue.held_by(refill)
