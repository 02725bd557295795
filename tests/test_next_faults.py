"""The faults an adversary tries after kill, pause and a cut network: a server crash right after a claim,
a reply lost after its statement committed, a lock shorter than the busy timeout, slots under latency.

Each test runs real code against a real SQLite file or a real PostgreSQL server, and each failed on
the code before the worker was rebuilt as one loop with durable claims and outcomes resolved by token.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import psycopg
import pytest

from leaselab import Backoff, LeaseLost, Queue, Status, Worker
from leaselab.errors import DatabaseUnreachable
from leaselab.harness.proxy import Proxy, server_address, through
from tests.support.polling import wait_until
from tests.support.servers import fresh_database

QUICK = Backoff(base=0.01, cap=0.05)


def _events(url: str, job_id: int) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT kind, attempt, token FROM events WHERE job_id = %s ORDER BY id", (job_id,)
        ).fetchall()


# -- 1. a server crash must never hand one fence to two claims ------------------------------------


def test_a_claim_at_full_durability_survives_a_server_crash_so_its_fence_is_never_handed_out_again(crashable_server):
    crashable = crashable_server
    url = fresh_database(crashable, "crash")
    for round_ in range(3):
        with Queue(url, durability="full", backoff=QUICK) as q:
            job_id = q.enqueue({"round": round_})
            first = q.claim("w1", lease=1)
        crashable.crash()  # at once: the WAL writer has not flushed anything on its own
        crashable.recover()
        with Queue(url, durability="full", backoff=QUICK) as q:
            after = q.get(job_id)
            assert (after.status, after.attempts, after.token) == (Status.RUNNING, 1, first.token)
            wait_until(
                lambda job_id=job_id: q.reap() == [job_id] or q.get(job_id).status is not Status.RUNNING, timeout=10
            )
            wait_until(lambda: (q.next_run_at() or 0) <= q.clock(), timeout=10)
            second = q.claim("w2", lease=30)
            assert second.id == job_id and second.fence != first.fence and second.attempts == 2
            q.complete(second.id, second.token, "ok")


def test_at_normal_durability_a_server_crash_may_forget_a_claim_and_hand_its_fence_out_again(crashable_server):
    """What "normal" gives up on a server, shown, so the README's warning is a measured fact."""
    crashable = crashable_server
    url = fresh_database(crashable, "normal")
    with Queue(url, durability="full") as q:
        job_id = q.enqueue("x", max_attempts=100)
    forgotten = 0
    for _ in range(4):
        with Queue(url, durability="normal", backoff=QUICK) as q:
            first = q.claim("w1", lease=30)
        crashable.crash()
        crashable.recover()
        with Queue(url, durability="full", backoff=QUICK) as q:
            if q.get(job_id).status is Status.PENDING:  # the claim is gone: the next one gets its fence
                forgotten += 1
                again = q.claim("w2", lease=30)
                assert again.fence == first.fence and again.token != first.token
                q.fail(again.id, again.token, "again")
            else:
                job = q.get(job_id)
                q.fail(job.id, job.token, "kept")
            wait_until(lambda: (q.next_run_at() or 0) <= q.clock(), timeout=30)
    assert forgotten >= 1


# -- 2. a reply lost after its statement committed is found out, not guessed --------------------


@pytest.fixture
def proxied(pg_url):
    proxy = Proxy(server_address(pg_url))
    yield pg_url, through(pg_url, proxy.port), proxy
    proxy.close()


def test_a_completion_whose_reply_was_lost_is_found_done_and_the_job_claimed_with_it_is_not_orphaned(proxied):
    direct, url, proxy = proxied
    with Queue(direct) as q:
        a, b = q.enqueue_many(["a", "b"], max_attempts=1)
    with Queue(url) as q:
        job = q.claim("w1", lease=30)
        proxy.drop_next_reply()
        with pytest.raises(DatabaseUnreachable):
            q.complete_and_claim(job.id, job.token, "done a", "w1", next_token="feed" * 8)
        # The statement committed: the retry with the same tokens learns so, and gets the job it claimed.
        nxt = q.complete_and_claim(job.id, job.token, "done a", "w1", next_token="feed" * 8)
        assert nxt is not None and nxt.id == b and nxt.token == "feed" * 8
        q.complete(nxt.id, nxt.token, "done b")
        assert q.get(a).result == "done a" and q.get(b).status is Status.DONE
    assert [kind for kind, *_ in _events(direct, a)] == ["enqueued", "claimed", "completed"]
    assert [kind for kind, *_ in _events(direct, b)] == ["enqueued", "claimed", "completed"]


def test_a_claim_still_running_when_its_call_timed_out_cannot_commit_after_the_queue_looked(pg_queue_url):
    """A chaos run's finding: a claim cut by the call timeout was still under way on the server; the
    worker's look by its token (``held_by``) came first and found nothing, then the claim committed,
    and the job, claimed by a worker that did not know it, was reaped to dead unrun. The next call
    now ends the cut call's session first and waits until it is gone, so the look is the truth.

    Here the claim waits on a lock another program holds, with the session's own lock and statement
    timeouts lifted (as a server slower than the call timeout would be), and the lock is let go
    only after the look."""
    with Queue(pg_queue_url) as q:
        job_id = q.enqueue("x", max_attempts=1)
    with psycopg.connect(pg_queue_url) as other, Queue(pg_queue_url) as q:
        q.call_timeout = 0.5
        q.backend.connection.execute("SET lock_timeout = 0; SET statement_timeout = 0")
        other.execute("LOCK TABLE jobs IN SHARE MODE")  # an UPDATE waits; a SELECT does not
        with pytest.raises(DatabaseUnreachable):
            q.claim("w1", lease=30, token="cafe" * 8)
        looked = [job.id for job in q.held_by("cafe" * 8)]
        other.rollback()  # the lock goes: a claim still waiting on it would now commit
        time.sleep(0.5)
    with Queue(pg_queue_url) as q:
        job = q.get(job_id)
    held = job.status is Status.RUNNING and job.token == "cafe" * 8
    assert looked == ([job_id] if held else []), (looked, job.status, job.token)


def test_a_different_second_completion_under_the_same_token_is_still_refused(pg_url):
    with Queue(pg_url) as q:
        q.enqueue("x")
        job = q.claim("w1")
        q.complete(job.id, job.token, "first")
        q.complete(job.id, job.token, "first")  # a retry of the very same write: it went through
        with pytest.raises(LeaseLost):
            q.complete(job.id, job.token, "second")
        assert q.get(job.id).result == "first"


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_worker_whose_completion_reply_is_lost_counts_it_done_and_runs_the_job_claimed_with_it(proxied, concurrency):
    direct, url, proxy = proxied
    ran: list[int] = []
    lines: list[str] = []
    with Queue(direct) as q:
        ids = q.enqueue_many([{"drop": i % 3 == 0} for i in range(9)], max_attempts=1)

    def handler(job):
        ran.append(job.id)
        if job.payload["drop"]:
            proxy.drop_next_reply()  # the next request is this job's completion (the lease is long)
        return job.id

    with Queue(url, call_timeout=27) as q:
        worker = Worker(
            q, handler, name="w1", lease=30, concurrency=concurrency, exit_when_idle=True, poll=0.01, log=lines.append
        )
        stats = worker.run()
    assert proxy.replies_dropped >= 3
    with Queue(direct) as q:
        assert [q.get(i).status for i in ids] == [Status.DONE] * 9  # none dead: no attempt spent by nobody
        assert [q.get(i).result for i in ids] == ids
        for i in ids:
            assert "lease_lost" not in [kind for kind, *_ in _events(direct, i)]
    assert sorted(ran) == ids  # each handler ran exactly once
    assert (stats.completed, stats.lost) == (9, 0)
    assert not [line for line in lines if "lease lost" in line], lines


# -- 3. a lock shorter than the busy timeout never costs a live holder its lease -----------------

LOCK_HELD = 7.5
BUSY = 8.0
# The first beat (at 3.3 s) waits out the lock; its lease, written from when it was sent, would end
# at 13.3 s, while one written from when it was applied ends after 17 s. The worker's call timeout
# (0.9 of the lease, 9 s) is longer than the lock, as the busy timeout is.
LEASE = 10.0


def _hold_lock(target: str, job_id: int, seconds: float, ready: threading.Event) -> None:
    if target.startswith("postgresql://"):
        with psycopg.connect(target) as conn:
            with conn.transaction():
                conn.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
                ready.set()
                time.sleep(seconds)
    else:
        conn = sqlite3.connect(target, isolation_level=None, timeout=30)
        conn.execute("BEGIN IMMEDIATE")
        ready.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
        conn.close()


def test_a_heartbeat_that_waited_on_a_lock_under_the_busy_timeout_writes_a_whole_lease_and_the_holder_keeps_it(target):
    lines: list[str] = []
    with Queue(target, busy_timeout=BUSY) as setup:
        job_id = setup.enqueue("slow")
    queue = Queue(target, busy_timeout=BUSY, call_timeout=0.9 * LEASE)
    worker = Worker(
        queue,
        lambda job: time.sleep(LOCK_HELD + 3) or "ok",
        name="w1",
        lease=LEASE,
        exit_when_idle=True,
        poll=0.01,
        log=lines.append,
    )
    runner = threading.Thread(target=worker.run)
    runner.start()
    other = Queue(target, busy_timeout=BUSY)
    try:
        wait_until(lambda: other.get(job_id).status is Status.RUNNING, timeout=10)
        ready = threading.Event()
        locker = threading.Thread(target=_hold_lock, args=(target, job_id, LOCK_HELD, ready))
        locker.start()
        ready.wait(10)
        locker.join()
        released = other.clock()
        # The beat that waited is applied now, and its lease runs from now. Asked within a second (a
        # beat interval is 3.3 s), before any later beat could have mended a lease written from the send.
        wait_until(
            lambda: other.get(job_id).lease_until >= released + LEASE - 1,
            timeout=1.0,
            message="the waiting beat to write a lease measured from when it was applied",
        )
        time.sleep(max(0.0, released + 1.0 - other.clock()))
        assert other.reap() == []  # another worker's reaper, a second after the lock, finds a live lease
    finally:
        runner.join(60)
        other.close()
        queue.close()
    with Queue(target) as q:
        job = q.get(job_id)
        assert (job.status, job.attempts, job.result) == (Status.DONE, 1, "ok")
        assert "reaped" not in [e.kind for e in q.events(job_id)]


# -- 4. with slots and latency, a refusal is judged by the token it was for ----------------------


def test_a_worker_with_slots_behind_a_slow_link_never_takes_a_finished_job_for_a_lost_one(proxied):
    direct, url, proxy = proxied
    lines: list[str] = []
    with Queue(direct) as q:
        ids = q.enqueue_many([{"n": i} for i in range(40)], max_attempts=1)

    def handler(job):
        time.sleep(0.05 + (job.payload["n"] % 5) * 0.04)
        return job.payload["n"]

    proxy.delay(0.02)  # 40 ms a round trip: a beat is in flight while handlers finish
    with Queue(url, call_timeout=0.8) as q:
        stats = Worker(
            q, handler, name="w1", lease=0.9, concurrency=4, exit_when_idle=True, poll=0.01, log=lines.append
        ).run()
    with Queue(direct) as q:
        assert [q.get(i).status for i in ids] == [Status.DONE] * 40
        lost = [e for i in ids for e in q.events(i) if e.kind == "lease_lost"]
    assert lost == []
    assert (stats.completed, stats.lost) == (40, 0)
    assert not [line for line in lines if "refused" in line or "lease lost" in line], lines
