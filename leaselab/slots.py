"""A worker with k slots: up to k handlers at once, leased in one statement, completed in one commit.

``Worker(..., concurrency=k)`` runs this loop instead of the one-job loop. It claims
only as many jobs as it has free slots (a job waiting in a buffer would burn its
lease), renews every held lease every third of the lease in one statement, and
commits the completions of every handler that has finished in one transaction: with
``durability="full"`` that is one sync for the whole group, and a completion is
acknowledged (counted, logged) only after that commit returned.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from .errors import InvalidPayload, LeaselabError, LeaseLost
from .lease import Lease
from .faults import STOPPED
from .job import Job

if TYPE_CHECKING:
    from .worker import Worker, WorkerStats

_UNWRITTEN = "stopped with job {}'s outcome unwritten: its lease runs out and it runs again"


class Slots:
    """The jobs one worker holds right now, each running on its own thread."""

    def __init__(self, worker: "Worker"):
        self.worker = worker
        self.held: dict[Future, Job] = {}
        self.lost: set[int] = set()  # ids whose lease a heartbeat found taken
        self.leases: dict[int, Lease] = {}  # what each running handler may ask about its lease
        self.max_jobs: int | None = None  # run()'s limit on claims
        self._lock = threading.Lock()
        self._beating = threading.Event()

    # -- the loop -------------------------------------------------------------

    def run(self, max_jobs: int | None) -> "WorkerStats":
        w = self.worker
        self.max_jobs = max_jobs
        wait_for = w.poll
        beat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        beat.start()
        with ThreadPoolExecutor(max_workers=w.concurrency, thread_name_prefix=f"{w.name}-slot") as pool:
            try:
                while True:
                    w.reap_if_due()
                    free = self._free()
                    claimed = self._claim(pool, free) if free > 0 else 0
                    if not self.held:
                        if w.stopping or (max_jobs is not None and w.stats.claimed >= max_jobs):
                            break
                        if claimed:
                            continue
                        if w.exit_when_idle and w.queue_idle():
                            break
                        w.idle_wait(wait_for)
                        wait_for = min(wait_for * 2, w.max_poll)
                        continue
                    wait_for = w.poll
                    # Wake when a handler finishes, or after a poll interval to refill free slots.
                    done, _ = wait(list(self.held), timeout=w.poll if free > 0 else None,
                                   return_when=FIRST_COMPLETED)
                    if done:
                        self._finish(pool, [f for f in self.held if f.done()])
            finally:
                self._beating.set()
                beat.join()
        return w.stats

    def _claim(self, pool: ThreadPoolExecutor, free: int) -> int:
        w = self.worker
        try:
            jobs = w.outlast("claim", lambda: w.queue.claim_many(free, w.name, w.lease))
        except InvalidPayload as exc:
            w.log(f"skipped a damaged job: {exc}")
            return 0
        if jobs is STOPPED:
            return 0
        self._start(pool, jobs)
        return len(jobs)

    def _start(self, pool: ThreadPoolExecutor, jobs: list[Job]) -> None:
        w = self.worker
        for job in jobs:
            w.stats.claimed += 1
            w.log(f"claimed job {job.id} (attempt {job.attempts}/{job.max_attempts})")
            with self._lock:
                self.leases[job.id] = Lease(job)
                self.held[pool.submit(w.call_handler, job, self.leases[job.id])] = job

    def _free(self) -> int:
        """How many jobs to claim now: the free slots, within ``max_jobs``, none once stopping."""
        w = self.worker
        if w.stopping:
            return 0
        free = w.concurrency - len(self.held)
        if self.max_jobs is not None:
            free = min(free, self.max_jobs - w.stats.claimed)
        return max(free, 0)

    def _finish(self, pool: ThreadPoolExecutor, finished: list[Future]) -> None:
        """Fail what raised, then complete the rest and refill the free slots in one transaction
        (one statement on a server); only then count them done."""
        w = self.worker
        with self._lock:
            jobs = [(f, self.held.pop(f)) for f in finished]
            for _, job in jobs:
                self.leases.pop(job.id, None)
        completions: list[tuple[Job, Any]] = []
        for future, job in jobs:
            if job.id in self.lost:
                self.lost.discard(job.id)
                w.stats.lost += 1
                w.log(f"lease lost on job {job.id} (attempt {job.attempts}): result not written")
                continue
            error = future.exception()
            if error is None:
                completions.append((job, future.result()))
                continue
            self._fail(job, f"{type(error).__name__}: {error}")
        if not completions:
            return
        free = self._free()
        try:
            # Retried through transient faults: fenced job by job, so a retry is never applied twice.
            outcome = w.outlast("complete", lambda: w.queue.complete_many_and_claim(
                [(j.id, j.token, r) for j, r in completions], free, w.name, w.lease))
            if outcome is STOPPED:
                for job, _ in completions:
                    w.stats.lost += 1
                    w.log(_UNWRITTEN.format(job.id))
                return
            refused, claimed = outcome
            refused, failed = set(refused), set()
        except InvalidPayload:
            # One result is not JSON: nothing was written, nothing claimed. Complete them one by one
            # so only that job fails; the loop refills the slots.
            refused, failed, claimed = set(), set(), []
            for job, result in completions:
                try:
                    refused.update(w.queue.complete_many([(job.id, job.token, result)]))
                except InvalidPayload as exc:
                    self._fail(job, f"handler returned a result that is not JSON: {exc}")
                    failed.add(job.id)
        for job, _ in completions:
            if job.id in refused:
                w.stats.lost += 1
                w.log(f"lease lost on job {job.id} (attempt {job.attempts}): result not written")
            elif job.id not in failed:
                w.stats.completed += 1
                w.log(f"completed job {job.id}")
        self._start(pool, claimed)

    def _fail(self, job: Job, error: str) -> None:
        w = self.worker
        try:
            status = w.outlast(f"fail job {job.id}", lambda: w.queue.fail(job.id, job.token, error))
        except LeaseLost:
            w.stats.lost += 1
            w.log(f"lease lost on job {job.id} (attempt {job.attempts}): failure not written")
            return
        if status is STOPPED:
            w.stats.lost += 1
            w.log(_UNWRITTEN.format(job.id))
            return
        w.stats.failed += 1
        w.log(f"failed job {job.id}: {error} -> {status}")

    def _heartbeat(self) -> None:
        """Renew every held lease every third of the lease, in one statement."""
        w = self.worker
        while not self._beating.wait(w.lease / 3):
            with self._lock:
                held = [(j.id, j.token) for j in self.held.values() if j.id not in self.lost]
            if not held:
                continue
            try:
                renewed = w.queue.heartbeat_many(held, w.lease)
            except LeaselabError as exc:  # a busy file is worth another try at the next beat
                w.log(f"heartbeat failed: {exc}")
                continue
            for job_id, _ in held:
                if job_id not in renewed:
                    self.lost.add(job_id)
                    with self._lock:
                        lease = self.leases.get(job_id)
                    if lease is not None:
                        lease.lost.set()
                    w.log(f"lease lost on job {job_id}: heartbeat refused")
