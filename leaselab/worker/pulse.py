"""A worker's pulse: one thread that renews every lease the worker holds and reaps on its own cadence.

The heartbeat renews all held leases in one statement every third of the lease; a beat
that took longer than that (it waited on a lock) is followed by the next at once. A
lease the database refuses is marked refused, and judged by its token alone: the worker
stops renewing a lease before it completes or fails that job (under the same lock the
heartbeat holds while it runs), so a beat never meets a job its own worker just finished.

Attempts past their timeout (or their beat_timeout) are given up here too, at each round: the
lease is no longer renewed and the attempt is written as timed out (``Queue.time_out``, fenced),
so the job is retried after the backoff without waiting for the lease to run out, whatever its
handler is doing; if that write cannot be made, the lease runs out and a reaper takes the job.

The reaper runs here too, every ``reap_every`` seconds, not between jobs: when every
worker is inside a long handler, a crashed worker's job still comes back about one
lease (plus the reap interval and the backoff) after its last heartbeat.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

from ..clock import elapsed
from ..errors import LeaselabError, LeaseLost, QueueFileGone, TransientError
from ..queue import Queue
from . import decisions
from .latency import Histogram
from .lease import Lease, Leases

Log = Callable[[str], None]


class Pulse:
    """The heartbeat and reaper thread of one worker; a context manager that starts and stops it."""

    def __init__(
        self,
        queue: Queue,
        leases: Leases,
        lease: float,
        reap_every: float,
        log: Log,
        on_reaped: Callable[[list[int]], None] | None = None,
        on_gone: Callable[[QueueFileGone], None] | None = None,
        on_timed_out: Callable[[Lease, str, str | None], None] | None = None,
        *,
        clock: Callable[[], float] = elapsed,
        latencies: Histogram | None = None,
    ):
        self.queue, self.leases, self.lease, self.reap_every = queue, leases, lease, reap_every
        self.log = log
        self.on_reaped = on_reaped
        self.on_gone = on_gone
        self.on_timed_out = on_timed_out  # (lease, reason, the job's new status or None if not written)
        self._clock = clock  # clock.elapsed's seconds; a test steps it and calls tick() itself
        self.latencies = latencies  # each acknowledged beat's round trip is counted here, if given
        self._next_beat: float | None = None
        self._next_reap = 0.0
        self.beating = threading.Lock()  # held while a beat runs: see remove()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pulse", daemon=True)

    def __enter__(self) -> Pulse:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def hand_in(self, leases: Iterable[Lease], *tokens: str) -> AbstractContextManager[None]:
        """Stop renewing ``leases`` (their handlers finished) and keep their tokens, and ``tokens``, from
        the reaper until the returned context exits (``Leases.hand_in``). Waits for a beat in flight
        to end first, so that beat cannot be refused for a job this worker is about to complete."""
        with self.beating:
            return self.leases.hand_in(leases, *tokens)

    def _run(self) -> None:
        wait = 0.0
        while not self._stop.wait(wait):
            try:
                wait = self.tick()
            except Exception as exc:  # a bug in one round must not end every later beat
                self.log(f"pulse failed, trying again: {type(exc).__name__}: {exc}")
                wait = min(decisions.beat_every(self.lease), decisions.MAX_WAIT)

    def tick(self) -> float:
        """One round: beat if a beat is due, then reap if a reap is due; the seconds until the next.

        A beat that waited past its interval is followed by the next at once; a failed one is
        tried again soon, since each missed beat eats into the lease.
        """
        now = self._clock()
        if self._next_beat is None:  # the first round: reap at once, beat a third of a lease on
            self._next_beat, self._next_reap = now + decisions.beat_every(self.lease), now
        self.time_out(now)
        if now >= self._next_beat:
            reached = self.beat()
            self._next_beat = decisions.next_beat(now, self.lease, reached, self._clock())
        if self._clock() >= self._next_reap:
            self.reap()
            self._next_reap = self._clock() + self.reap_every
        soonest = min(self._next_beat, self._next_reap)
        overdue = self.leases.next_overdue()
        if overdue is not None:
            soonest = min(soonest, overdue)
        return max(0.0, soonest - self._clock())

    def time_out(self, now: float) -> None:
        """Give up every attempt past its timeout at ``now``: no more renewals, and each written as timed
        out (fenced) so the job is retried at once after its backoff, or dead. Taken under the beat's
        lock, like ``hand_in``: an attempt whose handler finished first is the loop's to write."""
        with self.beating:
            overdue = self.leases.overdue(now)
        for lease, reason in overdue:
            job = lease.job
            try:
                status: str | None = self.queue.time_out(job.id, lease.token, reason).value
            except QueueFileGone as exc:
                self._gone(exc)
                return
            except LeaseLost:
                status = None  # another attempt holds the job already: nothing of this one to write
            except LeaselabError as exc:  # the lease runs out on its own, and a reaper takes the job
                self.log(f"could not write job {job.id}'s timeout ({exc}): it comes back when its lease runs out")
                status = None
            if self.on_timed_out is not None:
                self.on_timed_out(lease, reason, status)

    def beat(self) -> bool:
        """Renew every renewable lease in one statement; False when the database could not be asked."""
        with self.beating:
            held = self.leases.renewable()
            if not held:
                return True
            sent = self._clock()
            try:
                renewed = self.queue.heartbeat_many([(lease.job.id, lease.token) for lease in held], self.lease)
            except QueueFileGone as exc:
                self._gone(exc)
                return False
            except LeaselabError as exc:  # a busy file or a lost server: the next beat tries again
                self.log(f"heartbeat failed: {exc}")
                return False
            if self.latencies is not None:  # one bucket increment, on this thread only: nothing to lock
                self.latencies.record(self._clock() - sent)
            kept = []
            stale = decisions.superseded((lease.job.id, lease.job.attempts) for lease in held)
            for lease in held:
                if decisions.beat_refused(lease.job.id, renewed, (lease.job.id, lease.job.attempts) in stale):
                    lease.refuse()
                    self.log(f"lease lost on job {lease.job.id} (attempt {lease.job.attempts}): heartbeat refused")
                else:  # the statement matched by token: this very claim was renewed
                    kept.append(lease)
            self.leases.renewed(kept, sent)
            return True

    def _gone(self, exc: QueueFileGone) -> None:
        """The queue's file is gone: tell the worker (or say so) once, and beat no more (the queue
        refuses every call now; the worker's loop meets the same error at its next call and ends)."""
        self._stop.set()
        if self.on_gone is not None:
            self.on_gone(exc)
        else:
            self.log(str(exc))

    def reap(self) -> list[int]:
        """Reap expired leases once, except this worker's own; a transient fault skips this round.

        Its own jobs are not reaped whatever their leases say: the worker is alive (this runs in
        it), and a freeze (SIGSTOP, a suspended host) may have let them run out while it slept,
        anywhere between a beat and this reap, or between a claim's commit and the worker recording
        it. Another worker's reaper takes them if it is not.
        """
        try:
            moved = self.queue.reap(keep=self.leases.keep())
        except TransientError:
            return []
        except QueueFileGone as exc:
            self._gone(exc)
            return []
        except LeaselabError as exc:
            self.log(f"reap failed: {exc}")
            return []
        if moved:
            self.log(f"reaped expired leases of jobs {moved}")
            if self.on_reaped is not None:
                self.on_reaped(moved)
        return moved
