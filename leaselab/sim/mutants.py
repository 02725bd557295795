"""Planted bugs: each a small change to one of the real statements or one of the worker's decisions,
that the simulator must catch. ``planted(name)`` applies one for the length of a ``with`` block, in
this process only; nothing is written to a file.

A statement mutant rewrites the text of named SQLite statements (``leaselab.backends.sqlite.statements``),
which the backend reads each time it runs one; a decision mutant replaces a function of
``leaselab.worker.decisions``, which the real worker and the simulator both look up each time. A
mutant whose text no longer matches (a statement was rewritten) raises ``MutantStale`` rather than
silently planting nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..backends.sqlite import statements
from ..queue import new_token
from ..worker import decisions
from .errors import MutantStale, UnknownMutant


@dataclass(frozen=True)
class Mutant:
    """One planted bug: its name, what it breaks, and the change (statement edits or a decision's replacement)."""

    name: str
    breaks: str
    edits: tuple[tuple[tuple[str, ...], str, str], ...] = ()  # (statement names, text, replacement)
    decision: tuple[str, Callable[..., Any]] | None = None


def _recover_under_new_tokens(queue: Any, items: list[tuple[int, str, Any]], refill: str) -> Any:
    return queue.complete_many([(job_id, new_token(), result) for job_id, _, result in items]), queue.held_by(refill)


def _no_deadline(sent: float, seconds: float, margin: float) -> float:
    return math.inf


def _keep_nothing(renewable: Any, in_flight: Any) -> list[str]:
    return []


def _complete_anyway(refused: bool, error: BaseException | None) -> decisions.Verdict:
    return decisions.Verdict.DROP if refused else decisions.Verdict.COMPLETE


_CLAIMS = ("CLAIM", "CLAIM_MANY", "CLAIM_MANY_OF_ONE")

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
)

NAMES = tuple(m.name for m in MUTANTS)


def find(name: str) -> Mutant:
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    raise UnknownMutant(f"no mutant named {name!r}; there are: {', '.join(NAMES)}")


@contextmanager
def planted(mutant: str | Mutant) -> Iterator[Mutant]:
    """Plant a mutant (one of ``MUTANTS`` by name, or a ``Mutant`` of your own) in this process until the
    block ends; every change is undone after."""
    mutant = find(mutant) if isinstance(mutant, str) else mutant
    name = mutant.name
    saved: dict[tuple[Any, str], Any] = {}
    try:
        for names, text, replacement in mutant.edits:
            for statement in names:
                original = saved.get((statements, statement), getattr(statements, statement))
                current = getattr(statements, statement)
                if text not in current:
                    raise MutantStale(f"mutant {name}: statement {statement} no longer contains {text!r}")
                saved.setdefault((statements, statement), original)
                setattr(statements, statement, current.replace(text, replacement))
        if mutant.decision is not None:
            attr, replacement_fn = mutant.decision
            saved[(decisions, attr)] = getattr(decisions, attr)
            setattr(decisions, attr, replacement_fn)
        yield mutant
    finally:
        for (module, attr), value in saved.items():
            setattr(module, attr, value)
