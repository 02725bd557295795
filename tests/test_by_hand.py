"""What an operator does by hand: a dead job retried with fresh attempts, a pending job cancelled, and
a running one's lease revoked so that its worker's next write is refused and its handler stops."""

from __future__ import annotations

import threading

import pytest

from leaselab import JobNotFound, LeaseLost, Queue, Worker, WrongStatus
from leaselab.check import check, load
from leaselab.sim.judge import judge
from leaselab.worker import CALL_TIMEOUT_SHARE


def _dead(queue: Queue, payload: object = "x", error: str = "boom") -> int:
    """A job that failed its only attempt."""
    job_id = queue.enqueue(payload, max_attempts=1)
    job = queue.claim("w1")
    assert job is not None and job.id == job_id
    assert queue.fail(job_id, job.token, error) == "dead"
    return job_id


def test_a_retried_dead_job_runs_again_with_fresh_attempts_and_its_fence_keeps_rising(queue, clock):
    job_id = _dead(queue)
    assert queue.retry([job_id], attempts=2) == [job_id]
    job = queue.get(job_id)
    # The count is kept and the budget raised: the next claim is attempt 2, a fence no claim wrote before.
    assert (job.status, job.attempts, job.max_attempts, job.run_at) == ("pending", 1, 3, clock())
    assert job.last_error == "boom"  # why it died stays readable until a new attempt says otherwise
    assert [e.kind for e in queue.events(job_id)][-3:] == ["failed", "dead", "retried"]
    again = queue.claim("w2")
    assert again is not None and again.attempts == 2
    queue.fail(job_id, again.token, "boom again")
    assert queue.get(job_id).status == "pending"  # one fresh attempt left of the two
    clock.advance(3600)
    last = queue.claim("w3")
    assert last is not None and last.attempts == 3
    queue.fail(job_id, last.token, "boom at last")
    assert queue.get(job_id).status == "dead"
    assert check(queue.path).clean  # the checker and the specification read the retry as it is


def test_retry_dead_takes_every_dead_job_and_no_other(queue):
    first, second = _dead(queue), _dead(queue)
    waiting = queue.enqueue("y")
    assert queue.retry(dead=True) == [first, second]
    assert queue.get(waiting).status == "pending" and queue.retry(dead=True) == []


def test_a_retry_naming_a_job_that_is_not_dead_retries_none_and_names_its_status(queue):
    dead = _dead(queue)
    waiting = queue.enqueue("y")
    with pytest.raises(WrongStatus, match=rf"job {waiting} is pending.*Nothing was changed") as caught:
        queue.retry([dead, waiting])
    assert caught.value.statuses == {waiting: "pending"}
    assert queue.get(dead).status == "dead"  # all or nothing
    with pytest.raises(JobNotFound, match="no job with id 999"):
        queue.retry([dead, 999])
    assert queue.get(dead).status == "dead"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda q: q.retry(), ValueError),
        (lambda q: q.retry([1], dead=True), ValueError),
        (lambda q: q.retry([]), ValueError),
        (lambda q: q.retry("12"), TypeError),
        (lambda q: q.retry([1], attempts=0), ValueError),
        (lambda q: q.retry(dead=True, attempts=10**7), ValueError),
        (lambda q: q.cancel([1], reason=""), TypeError),
        (lambda q: q.cancel([True]), TypeError),
    ],
)
def test_a_bad_retry_or_cancel_is_refused_before_anything_is_written(queue, call, error):
    queue.enqueue("x")
    with pytest.raises(error):
        call(queue)
    assert [e.kind for e in queue.events()] == ["enqueued"]


def test_a_cancelled_pending_job_is_dead_with_its_reason_and_no_worker_gets_it(queue):
    job_id = queue.enqueue("x")
    assert queue.cancel([job_id, job_id], reason="sent by mistake") == [job_id]
    job = queue.get(job_id)
    assert (job.status, job.last_error) == ("dead", "sent by mistake")
    cancelled = queue.events(job_id)[-2]
    assert (cancelled.kind, cancelled.detail) == ("cancelled", "sent by mistake")
    assert queue.claim("w1") is None
    with pytest.raises(WrongStatus, match=rf"cannot cancel: job {job_id} is dead"):
        queue.cancel([job_id])
    assert check(queue.path).clean


def test_cancelling_a_running_job_fences_off_its_holder_and_the_history_stays_clean(queue):
    job_id = queue.enqueue("x")
    job = queue.claim("w1")
    assert queue.cancel([job_id]) == [job_id]
    for write in (
        lambda: queue.heartbeat(job_id, job.token),
        lambda: queue.complete(job_id, job.token, "late"),
        lambda: queue.fail(job_id, job.token, "late"),
    ):
        with pytest.raises(LeaseLost, match="job is now dead"):
            write()
    assert queue.get(job_id).result is None
    assert [e.kind for e in queue.events(job_id)][-3:] == ["lease_lost"] * 3
    queue.retry([job_id])
    again = queue.claim("w2")
    assert again is not None and again.attempts == 2
    queue.complete(job_id, again.token, "ok")
    assert check(queue.path).clean


def test_a_cancelled_running_job_stops_its_handler_at_its_next_lease_check(target):
    """A real worker: its next heartbeat is refused, so ``lease.check()`` raises and the handler stops."""
    lease = 1.0
    started, stopped = threading.Event(), threading.Event()

    def handler(job, held):
        started.set()
        try:
            while True:  # work that checks its lease between steps, as a handler that writes outside should
                held.check()
                stopped.wait(0.05)
        except LeaseLost:
            stopped.set()
            raise

    with Queue(target, call_timeout=CALL_TIMEOUT_SHARE * lease) as q:
        job_id = q.enqueue("long")
        worker = Worker(q, handler, name="w1", lease=lease, poll=0.02, exit_when_idle=True, signals=False)
        runner = threading.Thread(target=worker.run, daemon=True)
        runner.start()
        assert started.wait(30)
        q.cancel([job_id], reason="no longer wanted")
        assert stopped.wait(30)  # it stopped on its own: nothing killed it
        runner.join(30)
        assert not runner.is_alive()
        kinds = [e.kind for e in q.events(job_id)]
        assert kinds[:2] == ["enqueued", "claimed"] and "cancelled" in kinds
        assert kinds[kinds.index("cancelled") + 1] == "dead"
        refused = [e for e in q.events(job_id) if e.kind == "lease_lost"]
        assert refused and refused[0].detail.startswith("heartbeat refused")
        assert q.get(job_id).status == "dead" and worker.stats.completed == 0
        assert check(target, idle=True).clean


def test_a_retried_job_is_run_by_a_real_worker_like_any_other(target):
    with Queue(target, call_timeout=CALL_TIMEOUT_SHARE * 5) as q:
        job_id = _dead(q)
        q.retry([job_id])
        Worker(q, lambda job: "ok", name="w2", lease=5, exit_when_idle=True, signals=False).run()
        assert q.get(job_id).attempts == 2 and q.get(job_id).result == "ok"
        assert check(target, idle=True).clean


# -- what the checker and the specification make of them ------------------------------------------------


def _other_program(db: str, sql: str, *params: object) -> None:
    """A write leaselab's queue would never make, taken by another program with the raw driver."""
    from tests.test_check import other_program

    other_program(db, sql, *params)


def test_a_retry_of_a_job_that_was_not_dead_is_a_history_that_disagrees_and_breaks_the_specification(queue, clock):
    job_id = queue.enqueue("x")
    _other_program(queue.path, "UPDATE jobs SET last_event = 'retried' WHERE id = ?", job_id)
    report = check(queue.path, now=clock())
    assert ("history_disagrees", job_id) in [(a.kind, a.job) for a in report.anomalies]
    assert any("retried by hand (event 2) while it was pending" in a.sentence() for a in report.anomalies)
    h = load(queue.path)
    found = judge(h.jobs, h.events)
    assert found is not None and (found.rule, found.job) == ("retried_not_dead", job_id)


def test_a_write_by_a_cancelled_holder_that_was_accepted_is_a_stale_write(queue, clock):
    job_id = queue.enqueue("x")
    held = queue.claim("w1")
    queue.cancel([job_id])
    assert check(queue.path, now=clock()).clean
    # The old token's heartbeat taken without the fence: the trigger records it under that token.
    _other_program(
        queue.path,
        "UPDATE jobs SET status = 'running', lease_until = ?, last_event = 'heartbeat' WHERE id = ?",
        clock() + 30,
        job_id,
    )
    report = check(queue.path, now=clock())
    stale = [a for a in report.anomalies if a.kind == "stale_write_accepted"]
    assert stale and stale[0].job == job_id and held.token[:8] in stale[0].sentence()
    assert "after the job was cancelled" in stale[0].sentence()
    h = load(queue.path)
    found = judge(h.jobs, h.events)
    assert found is not None and found.rule == "write_without_token"
