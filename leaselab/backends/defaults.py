"""The optional operations of the contract (``FastPaths``), each built from ``Backend``'s primitives.

A backend derives from ``BackendDefaults`` and writes only what ``Backend`` requires; it overrides a
default where its engine can fuse the steps (SQLite in one transaction, PostgreSQL in one statement).
``with_defaults`` gives a backend that does not derive from it the same defaults, keeping every fast
path it has. Every default keeps the fence of the primitives it calls (each one fenced and atomic on
its own) and answers as the fused operation does; what it gives up is that its steps commit one by
one, not together: each docstring says what a crash between them leaves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, cast

from .contract import FAST_PATHS, Backend, Claim, Claimed, Completion, FullBackend, NewJob


class BackendDefaults:
    """A mixin: every ``FastPaths`` member from the ``Backend`` primitives of the class it is mixed into."""

    def wait_for_work(self: Backend, timeout: float, stop: threading.Event | None = None) -> None:
        """Sleep ``timeout`` seconds, or until ``stop`` is set: an engine with no way to announce a new job."""
        if stop is not None:
            stop.wait(timeout)
        else:
            time.sleep(timeout)

    def enqueue_many(self: Backend, jobs: Sequence[NewJob], now: float, *, durable: bool) -> list[int]:
        """One ``enqueue`` per job, in order; the ids in order.

        Weaker than one transaction: each job commits (and at ``durable`` syncs) on its own, so an
        error or a crash part-way leaves the jobs before it enqueued. The queue checks every payload
        before calling, so a bad payload still writes none."""
        return [self.enqueue(job, now, durable=durable) for job in jobs]

    def heartbeat_many(self: Backend, tokens: Sequence[str], lease: float, now: float | None) -> dict[int, float]:
        """For each token, the job it holds (``held_by``) renewed by ``heartbeat``: {job id: new lease_until}.

        Each renewal is fenced and atomic on its own (a token that no longer holds its job renews
        nothing); they are not one statement, so each is dated as it is applied."""
        renewed: dict[int, float] = {}
        for token in tokens:
            for job in self.held_by(token):
                if job.token == token:
                    until = self.heartbeat(job.id, token, lease, now)
                    if until is not None:
                        renewed[job.id] = until
        return renewed

    def complete_and_claim(
        self: Backend, done: Completion, claim: Claim, *, durable: bool
    ) -> tuple[bool, Claimed | None]:
        """``complete``, then, only if that changed its row, ``claim``: (whether it completed, the job or None).

        Two transactions, not one: a crash between them leaves the job done and nothing claimed,
        as a worker that stopped right after completing would."""
        if not self.complete(done, claim.now, durable=durable):
            return False, None
        return True, self.claim(claim, durable=durable)

    def complete_many(self: Backend, done: Sequence[Completion], now: float, *, durable: bool) -> list[int]:
        """One fenced ``complete`` per item, in order; the ids that completed (a second completion of one
        job is refused, since the first one changed its row).

        Weaker than one transaction: each completion commits on its own, so a crash part-way leaves
        those before it done and the rest running, as separate completions would."""
        return [item.id for item in done if self.complete(item, now, durable=durable)]

    def complete_many_and_claim(
        self: FullBackend, done: Sequence[Completion], n: int, claim: Claim, *, durable: bool
    ) -> tuple[list[int], list[Claimed]]:
        """``complete_many`` (the backend's own, if it has one), then (``n`` > 0) ``claim_many``, whatever
        the completions answered.

        Not one transaction: as ``complete_many``, and a crash before the claim leaves nothing claimed."""
        completed = self.complete_many(done, claim.now, durable=durable)
        return completed, (self.claim_many(n, claim, durable=durable) if n > 0 else [])


class _Defaulted(BackendDefaults):
    """A backend that does not derive from ``BackendDefaults``, with the defaults it lacks: every other
    attribute (read or set) is the backend's own, and so is every fast path it has."""

    def __init__(self, backend: Backend):
        object.__setattr__(self, "_backend", backend)
        for name in FAST_PATHS:
            own = getattr(backend, name, None)
            if own is not None:
                object.__setattr__(self, name, own)  # an instance's attribute wins over the mixin's method

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._backend, name, value)


def with_defaults(backend: Backend) -> FullBackend:
    """``backend`` itself if it has every fast path (its own or ``BackendDefaults``'), else a view of it
    with the defaults it lacks."""
    if all(callable(getattr(backend, name, None)) for name in FAST_PATHS):
        return cast(FullBackend, backend)
    return cast(FullBackend, _Defaulted(backend))
