"""What a running handler can know about its lease, and the worker's own clock on it.

A handler that takes a second argument gets a ``Lease``. Its ``lost`` is set the moment
a heartbeat comes back refused, and also, without asking anyone, once the lease may
have run out: the worker counts from when it *sent* the last heartbeat the database
acknowledged (or the claim), on its own clock (``clock.elapsed``: on Linux CLOCK_BOOTTIME, which
keeps counting while the host is suspended), and gives up a safety margin
before the database could reap the job. So a worker cut off from its database (its
heartbeats hang, nothing is refused) still learns that it may be a zombie. ``check()``
raises ``LeaseLost`` then. It narrows the window in which a zombie acts but cannot
close it (the handler may be between its check and its write): a store that checks
the fence still must.
"""

from __future__ import annotations

import inspect
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..clock import elapsed
from ..errors import LeaseLost
from ..job import Job
from . import decisions
from .decisions import MARGIN  # noqa: F401  (named here too: what a handler's lease gives up early)

# Taken when a lease's ``lost`` is first made, set, or found due, so that whoever finds the deadline
# passed first announces it, once. One for every lease: those moments are rare, and a worker makes a
# Lease for every job it claims.
_EXPIRING = threading.Lock()


class Lease:
    """The lease one attempt runs under; ``lost`` is a ``threading.Event``.

    ``seconds`` is the lease's length; with it, the lease runs out on the worker's own clock
    ``margin`` seconds (a tenth of the lease by default) before the database could reap it,
    counted from ``sent``, the time on ``clock`` the claim was sent. Without it (a lease made
    by hand for a test or a lesson), only a refused heartbeat sets ``lost``.
    """

    # A worker makes one for every job it claims: slots make each smaller and quicker to fill.
    __slots__ = (
        "job",
        "token",
        "_lost",
        "refused",
        "seconds",
        "margin",
        "_clock",
        "_on_expired",
        "deadline",
        "started",
        "timeout",
        "beat_timeout",
        "progressed",
        "given_up",
    )

    def __init__(
        self,
        job: Job,
        seconds: float | None = None,
        *,
        sent: float | None = None,
        margin: float | None = None,
        clock: Callable[[], float] = elapsed,
        timeout: float | None = None,
        beat_timeout: float | None = None,
    ):
        self.job = job
        # the claim's token: with the fence, what tells this claim from any other
        self.token: str = job.token  # type: ignore[assignment]  # a lease is of a claimed job, which has one
        # ``lost`` is made when first asked for: most attempts end before anyone waits on it, and a
        # worker makes a Lease for every job it claims (an Event is a Condition and two locks).
        self._lost: threading.Event | None = None
        self.refused = False  # the database itself said the token no longer holds the job
        self.seconds = seconds
        self.margin = (decisions.margin(seconds) if margin is None else margin) if seconds is not None else 0.0
        self._clock = clock
        self._on_expired: Callable[[Lease], None] | None = None  # set by the Leases that hold it
        self.deadline: float | None = None
        # The attempt's own limits (the job's, else the worker's defaults), counted on the same clock
        # from the claim's send: past either, the worker gives the attempt up (decisions.overdue).
        self.started = clock() if sent is None else sent
        self.timeout = job.timeout if job.timeout is not None else timeout
        self.beat_timeout = job.beat_timeout if job.beat_timeout is not None else beat_timeout
        self.progressed = self.started
        self.given_up: str | None = None  # why the worker gave this attempt up (its timeout), if it did
        if seconds is not None:
            self.deadline = decisions.own_deadline(self.started, seconds, self.margin)

    @property
    def lost(self) -> threading.Event:
        """Set once the lease may be gone: a heartbeat refused, or its deadline passed."""
        with _EXPIRING:
            return self._event()

    def _event(self) -> threading.Event:
        # Caller holds _EXPIRING, so two threads asking at once get the same Event.
        if self._lost is None:
            self._lost = threading.Event()
        return self._lost

    def _is_lost(self) -> bool:
        return self._lost is not None and self._lost.is_set()

    @property
    def fence(self) -> tuple[int, int]:
        """The attempt's fence, ``(job id, attempts)``, for a store outside the queue."""
        return self.job.fence

    def renewed(self, sent: float) -> None:
        """A heartbeat sent at ``sent`` (on the lease's clock) was acknowledged: the lease runs from then."""
        if self.seconds is not None and self.deadline is not None and not self._is_lost():  # set together
            self.deadline = decisions.renewed_deadline(self.deadline, sent, self.seconds, self.margin)

    def refuse(self) -> None:
        """The database refused this token: the job is no longer this attempt's."""
        self.refused = True
        with _EXPIRING:
            self._event().set()

    def left(self) -> float | None:
        """Seconds until the worker gives this lease up on its own clock (negative once past), or None."""
        return None if self.deadline is None else self.deadline - self._clock()

    def expired(self) -> bool:
        """True once the lease may have run out: refused, or past the worker's own deadline.

        The first call to find the deadline passed (the handler's ``check()`` or the worker's
        watcher, whichever comes first) sets ``lost`` and tells the worker, once.
        """
        if not self._is_lost() and self.deadline is not None and self._clock() >= self.deadline:
            with _EXPIRING:
                announce = not self._is_lost()
                self._event().set()
            if announce and self._on_expired is not None:
                self._on_expired(self)
        return self._is_lost()

    def beat(self) -> None:
        """Report progress: the handler is moving, not only alive. With a ``beat_timeout`` (the job's or
        the worker's), the lease is renewed only while the handler calls this at least that often.
        Raises ``LeaseLost`` if the lease may be gone, as ``check()`` does, so a long loop that beats
        learns it at once."""
        self.progressed = self._clock()
        self.check()

    def overdue(self, now: float) -> str | None:
        """Why this attempt must be given up at ``now`` (past its timeout or its beat_timeout), or None."""
        return decisions.overdue(now, self.started, self.timeout, self.progressed, self.beat_timeout)

    def give_up(self, reason: str) -> None:
        """The worker gives this attempt up (``reason``: its timeout): no more renewals, and the handler's
        ``check()`` and ``beat()`` raise ``LeaseLost`` from now on."""
        self.given_up = reason
        self.refuse()

    def check(self) -> None:
        """Raise ``LeaseLost`` if the lease may be gone (a heartbeat refused, or no acknowledged
        heartbeat for a lease less the margin); return otherwise."""
        if self.expired():
            raise LeaseLost(self.job.id, self.job.token)

    def __repr__(self) -> str:
        return f"Lease(job={self.job.id}, attempt={self.job.attempts}, lost={self._is_lost()})"


class Leases:
    """The leases one worker holds, by token, and a thread that sets ``lost`` at each deadline.

    The thread never touches the database, so a heartbeat hung on a cut connection cannot
    keep it from telling a handler that its lease may be gone. ``on_expired`` is called (on
    whichever thread finds the deadline passed first) once for each lease given up on the clock.
    """

    def __init__(self, on_expired: Callable[[Lease], None] | None = None):
        self._held: dict[str, Lease] = {}
        self._kept: list[str] = []  # tokens kept from the reaper though not renewed: see keeping()
        # Taken as a plain lock where nothing waits or is woken (a worker adds, keeps and removes
        # every job it claims): a Condition's own enter and exit are Python calls around the lock's.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self._wake_at = math.inf  # the monotonic time the watcher sleeps until (inf: for ever)
        self._shortest = math.inf  # the shortest time to a deadline any lease had when added
        self._on_expired = on_expired
        self._thread = threading.Thread(target=self._watch, name="lease-deadlines", daemon=True)
        self._thread.start()

    def add(self, *leases: Lease) -> None:
        """Hold ``leases`` (a claim's, all at once: one lock taken for a batch)."""
        # The watcher is woken only for a deadline sooner than the one it sleeps toward. A worker
        # claims thousands of jobs a second and finishes each before the watcher looks: woken for
        # every claim made while it held nothing, it cost a thread switch per job. Holding nothing,
        # it sleeps as long as the shortest lease it was given, so a lease no shorter needs no wake.
        now = time.monotonic()
        with self._lock:
            for lease in leases:
                lease._on_expired = self._on_expired
                self._held[lease.token] = lease
                left = lease.left()
                if left is not None:
                    if left > 0:
                        self._shortest = min(self._shortest, left)
                    if now + left < self._wake_at:
                        self._changed.notify()

    def remove(self, lease: Lease) -> None:
        with self._lock:
            self._held.pop(lease.token, None)

    def hand_in(self, leases: Iterable[Lease], *tokens: str) -> _Keeping:
        """Stop holding ``leases`` (their handlers finished) and keep their tokens, and ``tokens``,
        from the reaper until the returned context exits: ``remove`` and ``keeping`` in one step,
        so no moment passes in which a finished attempt's token is neither held nor kept."""
        with self._lock:
            kept = list(tokens)
            for lease in leases:
                self._held.pop(lease.token, None)
                kept.append(lease.token)
            self._kept.extend(kept)
        return _Keeping(self, kept)

    def overdue(self, now: float) -> list[tuple[Lease, str]]:
        """Every held lease whose attempt is past its timeout (or its beat_timeout) at ``now``, each
        given up here (no longer renewed, nor kept from the reaper), with why."""
        found = []
        with self._lock:
            for lease in list(self._held.values()):
                if lease.refused or (lease.timeout is None and lease.beat_timeout is None):
                    continue
                reason = lease.overdue(now)
                if reason is not None:
                    lease.give_up(reason)
                    found.append((lease, reason))
        return found

    def next_overdue(self) -> float | None:
        """The soonest time, on the leases' clock, a held lease's attempt will be past a limit (None: none has one)."""
        with self._lock:
            times = [
                decisions.overdue_at(lease.started, lease.timeout, lease.progressed, lease.beat_timeout)
                for lease in self._held.values()
                if not lease.refused and (lease.timeout is not None or lease.beat_timeout is not None)
            ]
        return min((t for t in times if t is not None), default=None)

    def renewable(self) -> list[Lease]:
        """The leases a heartbeat should renew now: held, and not refused."""
        with self._lock:
            return [lease for lease in self._held.values() if not lease.refused]

    def keeping(self, *tokens: str) -> _Keeping:
        """Count ``tokens`` as this worker's from this call until the returned context exits, renewed
        or not: a claim's from before it is sent until its leases are added, and a finished attempt's
        from when its lease stops being renewed until its outcome is written (``hand_in``). A freeze
        that falls in either window must not leave those jobs to the worker's own reaper (see ``keep``)."""
        with self._lock:
            self._kept.extend(tokens)
        return _Keeping(self, tokens)

    def keep(self) -> list[str]:
        """The tokens this worker's reaper must not reap: its renewable leases', its claims' in flight
        (a batch claim's token keeps every job it took, ``Queue.reap``) and its outcomes' in flight."""
        with self._lock:
            return decisions.keep_from_reaper(
                [lease.token for lease in self._held.values() if not lease.refused], self._kept
            )

    def renewed(self, leases: Iterable[Lease], sent: float) -> None:
        # No wake: a renewal only moves deadlines later, and a watcher that wakes early looks again.
        with self._lock:
            for lease in leases:
                lease.renewed(sent)

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()
        self._thread.join()

    def _watch(self) -> None:
        told: set[str] = set()
        with self._changed:
            while not self._closed:
                told &= set(self._held)
                soonest = None
                for token, lease in self._held.items():
                    if token in told:
                        continue
                    if lease.expired():  # tells the worker, if this is where the deadline was found passed
                        told.add(token)
                        continue
                    left = lease.left()
                    if left is not None and (soonest is None or left < soonest):
                        soonest = left
                if soonest is None and self._shortest < math.inf:
                    soonest = self._shortest  # nothing held: see add()
                wait = None if soonest is None else max(soonest, 0.001)
                self._wake_at = math.inf if wait is None else time.monotonic() + wait
                self._changed.wait(wait)


class _Keeping:
    """What ``Leases.keeping`` and ``hand_in`` return: the tokens are kept from the call on, and let go
    when the context exits (a plain class: a generator's context costs several calls more, once per job)."""

    __slots__ = ("_leases", "_tokens")

    def __init__(self, leases: Leases, tokens: Iterable[str]):
        self._leases, self._tokens = leases, tokens

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: Any) -> None:
        with self._leases._lock:
            for token in self._tokens:
                self._leases._kept.remove(token)


def wants_lease(handler: Callable[..., Any]) -> bool:
    """True when ``handler`` can be called as ``handler(job, lease)``; a one-argument handler gets only the job."""
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # some builtins have no signature: call them the old way
        return False
    try:
        signature.bind(None, None)
    except TypeError:
        return False
    return True
