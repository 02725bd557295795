"""A worker's pulse: one thread that renews every lease the worker holds and reaps on its own cadence.

The heartbeat renews all held leases in one statement every third of the lease; a beat
that took longer than that (it waited on a lock) is followed by the next at once. A
lease the database refuses is marked refused, and judged by its token alone: the worker
stops renewing a lease before it completes or fails that job (under the same lock the
heartbeat holds while it runs), so a beat never meets a job its own worker just finished.

The reaper runs here too, every ``reap_every`` seconds, not between jobs: when every
worker is inside a long handler, a crashed worker's job still comes back about one
lease (plus the reap interval and the backoff) after its last heartbeat.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from . import faults
from .errors import LeaselabError, TransientError
from .lease import Lease, Leases
from .queue import Queue

Log = Callable[[str], None]


class Pulse:
    """The heartbeat and reaper thread of one worker; a context manager that starts and stops it."""

    def __init__(self, queue: Queue, leases: Leases, lease: float, reap_every: float, log: Log,
                 on_reaped: Callable[[list[int]], None] | None = None, *,
                 clock: Callable[[], float] = time.monotonic):
        self.queue, self.leases, self.lease, self.reap_every = queue, leases, lease, reap_every
        self.log = log
        self.on_reaped = on_reaped
        self._clock = clock  # monotonic seconds; a test steps it and calls tick() itself
        self._next_beat: float | None = None
        self._next_reap = 0.0
        self.reached = True  # the last beat reached the database (or had nothing to renew)
        self.beating = threading.Lock()  # held while a beat runs: see remove()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pulse", daemon=True)

    def __enter__(self) -> "Pulse":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def remove(self, lease: Lease) -> None:
        """Stop renewing ``lease`` (its handler finished); waits for a beat in flight to end, so
        that beat cannot be refused for a job this worker is about to complete."""
        with self.beating:
            self.leases.remove(lease)

    def _run(self) -> None:
        while not self._stop.wait(self.tick()):
            pass

    def tick(self) -> float:
        """One round: beat if a beat is due, then reap if a reap is due; the seconds until the next.

        A beat that waited past its interval is followed by the next at once; a failed one is
        tried again soon, since each missed beat eats into the lease. A worker whose own leases
        could not be renewed does not reap: after a freeze its leases have run out on the server,
        and its reaper would take its own live jobs before a beat got through. Other workers'
        reapers still take those of a dead one.
        """
        every = self.lease / 3
        now = self._clock()
        if self._next_beat is None:  # the first round: reap at once, beat a third of a lease on
            self._next_beat, self._next_reap = now + every, now
        if now >= self._next_beat:
            self.reached = self.beat()
            self._next_beat = now + every if self.reached else self._clock() + min(every, faults.MAX_WAIT)
        if self.reached and self._clock() >= self._next_reap:
            self.reap()
            self._next_reap = self._clock() + self.reap_every
        return max(0.0, min(self._next_beat, self._next_reap) - self._clock())

    def beat(self) -> bool:
        """Renew every renewable lease in one statement; False when the database could not be asked."""
        with self.beating:
            held = self.leases.renewable()
            if not held:
                return True
            sent = self._clock()
            try:
                renewed = self.queue.heartbeat_many([(lease.job.id, lease.token) for lease in held], self.lease)
            except LeaselabError as exc:  # a busy file or a lost server: the next beat tries again
                self.log(f"heartbeat failed: {exc}")
                return False
            kept = []
            for lease in held:
                if lease.job.id in renewed:  # the statement matched by token: this very claim was renewed
                    kept.append(lease)
                else:
                    lease.refuse()
                    self.log(f"lease lost on job {lease.job.id} (attempt {lease.job.attempts}): heartbeat refused")
            self.leases.renewed(kept, sent)
            return True

    def reap(self) -> list[int]:
        """Reap expired leases once; a transient fault skips this round (the next one tries again)."""
        try:
            moved = self.queue.reap()
        except TransientError:
            return []
        except LeaselabError as exc:
            self.log(f"reap failed: {exc}")
            return []
        if moved:
            self.log(f"reaped expired leases of jobs {moved}")
            if self.on_reaped is not None:
                self.on_reaped(moved)
        return moved
