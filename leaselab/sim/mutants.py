"""Planted bugs: each a small change to one of the real statements or one of the worker's decisions,
that the simulator must catch. ``planted(name)`` applies one for the length of a ``with`` block, in
this process only; nothing is written to a file.

A statement mutant rewrites the text of named SQLite statements (``leaselab.backends.sqlite.statements``),
which the backend reads each time it runs one; a decision mutant replaces a function of
``leaselab.worker.decisions``, which the real worker and the simulator both look up each time; a few
replace a method of the real ``Queue`` (``patches``). A mutant whose text no longer matches (a statement
was rewritten) raises ``MutantStale`` rather than silently planting nothing. ``planted`` takes a
shipped mutant's name or a ``Mutant`` of your own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..backends.sqlite import statements
from ..backends.sqlite.backend import SqliteBackend
from ..job import JOB_COLUMNS
from ..queue import DEFAULT_LEASE, Queue, new_token
from ..worker import decisions
from .errors import MutantStale, UnknownMutant
from .world import between


@dataclass(frozen=True)
class Mutant:
    """One planted bug: its name, what it breaks, and the change (statement edits or a decision's replacement)."""

    name: str
    breaks: str
    edits: tuple[tuple[tuple[str, ...], str, str], ...] = ()  # (statement names, text, replacement)
    decision: tuple[str, Callable[..., Any]] | None = None
    patches: tuple[tuple[Any, str, Any], ...] = ()  # (owner, attribute, replacement)


def _recover_under_new_tokens(queue: Any, items: list[tuple[int, str, Any]], refill: str) -> Any:
    return queue.complete_many([(job_id, new_token(), result) for job_id, _, result in items]), queue.held_by(refill)


def _no_deadline(sent: float, seconds: float, margin: float) -> float:
    return math.inf


def _keep_nothing(renewable: Any, in_flight: Any) -> list[str]:
    return []


def _complete_anyway(refused: bool, error: BaseException | None) -> decisions.Verdict:
    return decisions.Verdict.DROP if refused else decisions.Verdict.COMPLETE


def _beat_once_a_lease(lease: float) -> float:
    return lease


def _never_refused(held: int, renewed: Any, superseded: bool = False) -> bool:
    return False


def _no_margin(seconds: float) -> float:
    return 0.0


def _never_overdue(now: float, started: float, timeout: Any, progressed: float, beat_timeout: Any) -> None:
    return None


# The two-step claim, lesson 2's wrong way: read the next runnable jobs in one transaction, lease them
# by id in another, without asking again whether they are still pending.
TWO_STEP_PICK = """
SELECT id FROM jobs WHERE status = 'pending' AND run_at <= :now
 ORDER BY priority DESC, run_at ASC, id ASC LIMIT :n
"""

TWO_STEP_TAKE = (
    """
UPDATE jobs SET status = 'running', attempts = attempts + 1, lease_until = :lease_until, worker = :worker,
       token = :token || '-' || id, started_at = :now, updated_at = :now, last_event = 'claimed'
 WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING """
    + JOB_COLUMNS
)


def _two_step_claim_many(
    queue: Queue,
    n: int,
    worker: str = "worker",
    lease: float = DEFAULT_LEASE,
    *,
    token: str | None = None,
    queues: Any = None,  # the simulator's workers serve the default queue, every job's
) -> list[Any]:
    backend: Any = queue.backend  # the SQL backends' escape hatch, run(statement, params)
    token = new_token() if token is None else token
    picked = [job_id for (job_id,) in backend.run(TWO_STEP_PICK, {"now": queue.clock(), "n": n})]

    def take() -> list[Any]:
        now = queue.clock()
        params = {"ids": json.dumps(picked), "now": now, "lease_until": now + lease, "worker": worker, "token": token}
        taken = [row[0] for row in backend.run(TWO_STEP_TAKE, params)]
        return sorted((queue.get(job_id) for job_id in taken), key=lambda j: (-j.priority, j.run_at, j.id))

    return between(take)


_SQLITE_CLAIM_MANY = SqliteBackend.claim_many


def _claim_many_unsynced(backend: SqliteBackend, n: int, claim: Any, *, durable: bool) -> list[Any]:
    return _SQLITE_CLAIM_MANY(backend, n, claim, durable=False)


_CLAIMS = ("CLAIM", "CLAIM_MANY", "CLAIM_MANY_OF_ONE", "CLAIM_SEVERAL", "CLAIM_MANY_SEVERAL")

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "unfenced_complete",
        "a completion without the token check: a zombie's late result overwrites the job",
        ((("COMPLETE",), " AND token = :token", ""),),
    ),
    Mutant(
        "unfenced_fail",
        "a failure without the token check: a zombie's failure sends back a job another worker holds",
        ((("FAIL",), " AND token = :token", ""),),
    ),
    Mutant(
        "unfenced_heartbeat",
        "a heartbeat that renews a job that is no longer running under its token",
        ((("HEARTBEAT_MANY",), "WHERE status = 'running' AND token IN", "WHERE token IN"),),
    ),
    Mutant(
        "claim_before_run_at",
        "a claim that takes a delayed (or backing-off) job before its run_at",
        ((_CLAIMS, " AND run_at <= :now", ""),),
    ),
    Mutant(
        "claim_ignores_priority",
        "a claim that takes jobs by id, not by priority",
        ((_CLAIMS, "ORDER BY priority DESC, run_at ASC, id ASC", "ORDER BY id ASC"),),
    ),
    Mutant(
        "early_reap",
        "a reaper that takes leases back a little before they end",
        ((("REAP",), "lease_until < :now", "lease_until < :now + 0.1"),),
    ),
    Mutant(
        "attempt_too_many",
        "one attempt more than max_attempts before a job is dead",
        ((("FAIL", "REAP"), "attempts >= max_attempts", "attempts > max_attempts"),),
    ),
    Mutant(
        "no_backoff",
        "a failed or reaped job runs again at once, without its backoff",
        ((("FAIL", "REAP"), ":now + leaselab_backoff(attempts)", ":now"),),
    ),
    Mutant(
        "batch_token_reused",
        "every job of a batch claim gets the same token, so one fence covers several jobs",
        ((("CLAIM_MANY",), "token = :token || '-' || id", "token = :token"),),
    ),
    Mutant(
        "no_own_deadline",
        "the worker never gives a lease up on its own clock: a cut-off worker's handler writes as a zombie",
        decision=("own_deadline", _no_deadline),
    ),
    Mutant(
        "reap_own_jobs",
        "the worker's reaper keeps nothing back, so a worker takes back its own jobs after a freeze",
        decision=("keep_from_reaper", _keep_nothing),
    ),
    Mutant(
        "retry_under_new_token",
        "a completion retried after a lost reply goes under a new token, so the fence refuses the result",
        decision=("recover_completion", _recover_under_new_tokens),
    ),
    Mutant(
        "failures_completed",
        "a handler's exception is written as a completion",
        decision=("verdict", _complete_anyway),
    ),
    Mutant(
        "two_step_claim",
        "a claim that reads the next job, then leases it by id in a second transaction without checking it is "
        "still pending: two workers take the same job",
        patches=((Queue, "claim_many", _two_step_claim_many),),
    ),
    Mutant(
        "non_durable_claim",
        "a claim committed without a sync even at durability='full': a power cut takes back a claim already "
        "acknowledged, and the attempt it counted",
        patches=((SqliteBackend, "claim_many", _claim_many_unsynced),),
    ),
    # Further protocol bugs, invented for the simulator, not from the list.
    Mutant(
        "heartbeat_from_old_lease",
        "a heartbeat that extends the lease from its old end instead of from now",
        ((("HEARTBEAT_MANY",), "lease_until = leaselab_now() + :lease", "lease_until = lease_until + :lease"),),
    ),
    Mutant(
        "reap_resets_attempts",
        "a reaper that sets a job's attempts back to zero, so a job that keeps crashing workers never dies",
        ((("REAP",), "lease_until = NULL,", "attempts = 0, lease_until = NULL,"),),
    ),
    Mutant(
        "reaped_never_dead",
        "a reaper that ignores max_attempts: a job whose last attempt's lease expired goes back to pending",
        ((("REAP",), "attempts >= max_attempts", "attempts > max_attempts"),),
    ),
    Mutant(
        "claim_takes_running",
        "a claim that also takes running jobs, whose lease another worker still holds",
        ((_CLAIMS, "WHERE status = 'pending' AND run_at <= :now", "WHERE run_at <= :now"),),
    ),
    Mutant(
        "complete_ignores_status",
        "a completion fenced by the token alone: a late result lands on a job reaped and waiting to run again",
        ((("COMPLETE",), "AND status = 'running' AND token = :token", "AND token = :token"),),
    ),
    Mutant(
        "beat_once_a_lease",
        "the worker beats once a lease instead of three times, so its own deadline always comes first",
        decision=("beat_every", _beat_once_a_lease),
    ),
    Mutant(
        "refused_beat_renews",
        "the worker takes a refused heartbeat for a renewal and goes on as if it held the lease",
        decision=("beat_refused", _never_refused),
    ),
    Mutant(
        "no_margin",
        "the worker gives its lease up exactly when the database may reap it, with no margin for its clock",
        decision=("margin", _no_margin),
    ),
    Mutant(
        "timeout_ignored",
        "the pulse never gives an attempt up at its timeout: a hung handler's lease is renewed for ever",
        decision=("overdue", _never_overdue),
    ),
)

NAMES = tuple(m.name for m in MUTANTS)


def find(name: str | Mutant) -> Mutant:
    if isinstance(name, Mutant):
        return name
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    raise UnknownMutant(f"no mutant named {name!r}; there are: {', '.join(NAMES)}")


@contextmanager
def planted(name: str | Mutant) -> Iterator[Mutant]:
    """Plant a mutant (a shipped one's name, or a ``Mutant`` of your own) in this process until the block
    ends; every change is undone after. ``MutantStale`` if a statement does not hold the text to change."""
    mutant = find(name)
    saved: dict[tuple[Any, str], Any] = {}
    try:
        for names, text, replacement in mutant.edits:
            for statement in names:
                if not hasattr(statements, statement):
                    raise MutantStale(f"mutant {mutant.name}: there is no statement {statement}")
                original = saved.get((statements, statement), getattr(statements, statement))
                current = getattr(statements, statement)
                if text not in current:
                    raise MutantStale(f"mutant {mutant.name}: statement {statement} no longer contains {text!r}")
                saved.setdefault((statements, statement), original)
                setattr(statements, statement, current.replace(text, replacement))
        if mutant.decision is not None:
            attr, replacement_fn = mutant.decision
            saved[(decisions, attr)] = getattr(decisions, attr)
            setattr(decisions, attr, replacement_fn)
        for owner, attr, replacement_fn in mutant.patches:
            saved.setdefault((owner, attr), getattr(owner, attr))
            setattr(owner, attr, replacement_fn)
        yield mutant
    finally:
        for (module, attr), value in saved.items():
            setattr(module, attr, value)
