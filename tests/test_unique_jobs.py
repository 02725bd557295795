"""Unique jobs, on every backend: a key enqueues one job while a job with that key is pending or running,
the caller is told which job it got and whether it was new, and once that job is done or dead the key
is free again. A bad key is refused with a typed error."""

from __future__ import annotations

import pytest

from leaselab import Queue
from leaselab.errors import InvalidKey, KeyHeld
from tests.support.servers import IN_PROCESS_BACKENDS

TARGETS = IN_PROCESS_BACKENDS

LEASE = 30.0


def test_a_key_enqueues_once_while_its_job_is_pending_and_says_which_job_it_returned(queue):
    first = queue.enqueue_unique({"invoice": 42}, "invoice-42")
    again = queue.enqueue_unique({"invoice": "other payload"}, "invoice-42", priority=7)
    assert first.new and not again.new
    assert again.id == first.id and again.status == "pending" and again.key == "invoice-42"
    assert str(again) == f"job {first.id} already pending with key invoice-42"
    assert str(first) == f"job {first.id} enqueued with key invoice-42"
    (job,) = queue.jobs()
    assert (job.payload, job.priority, job.key) == ({"invoice": 42}, 0, "invoice-42")  # the first one's
    assert queue.enqueue("x", key="invoice-42") == first.id  # enqueue(key=) returns the id alone


def test_while_its_job_runs_the_key_still_returns_it_and_once_done_the_key_is_free(queue):
    first = queue.enqueue_unique("a", "k")
    job = queue.claim("w", LEASE)
    running = queue.enqueue_unique("b", "k")
    assert (running.id, running.new, running.status) == (first.id, False, "running")
    queue.complete(job.id, job.token)
    fresh = queue.enqueue_unique("c", "k")
    assert fresh.new and fresh.id != first.id
    assert [j.key for j in queue.jobs()] == ["k", "k"]


def test_a_dead_job_frees_its_key(queue):
    first = queue.enqueue_unique("a", "k", max_attempts=1)
    job = queue.claim("w", LEASE)
    assert queue.fail(job.id, job.token, "boom").value == "dead"
    assert queue.enqueue_unique("b", "k").new
    assert queue.get(first.id).status == "dead"


def test_keys_are_one_namespace_across_queues_and_the_holder_says_its_queue(queue):
    first = queue.enqueue_unique("a", "k", queue="emails")
    other = queue.enqueue_unique("b", "k", queue="sms")
    assert (other.id, other.new, other.queue) == (first.id, False, "emails")
    assert queue.enqueue_unique("c", "another").new


def test_jobs_without_a_key_are_never_merged(queue):
    assert len(set(queue.enqueue_many(["same"] * 3) + [queue.enqueue("same"), queue.enqueue("same")])) == 5


@pytest.mark.parametrize("bad", ["", "x" * 201, "nul\x00inside", 42, None])
def test_a_bad_key_is_refused_with_a_typed_error_and_nothing_is_written(queue, bad):
    with pytest.raises(InvalidKey):
        queue.enqueue_unique("x", bad)
    if bad is not None:  # enqueue(key=None) is a plain job
        with pytest.raises(InvalidKey):
            queue.enqueue("x", key=bad)
    assert queue.stats()["pending"] == 0


def test_the_key_survives_reopening(target, clock):
    with Queue(target, clock=clock) as q:
        first = q.enqueue_unique("a", "k")
    with Queue(target, clock=clock) as q:
        assert q.enqueue_unique("a", "k").id == first.id and q.get(first.id).key == "k"


def test_a_dead_job_is_not_retried_while_another_job_holds_its_key_and_nothing_is_written(queue):
    first = queue.enqueue_unique("a", "k", max_attempts=1)
    job = queue.claim("w", LEASE)
    queue.fail(job.id, job.token, "boom")
    second = queue.enqueue_unique("b", "k")
    assert second.new
    with pytest.raises(KeyHeld, match="unique key"):
        queue.retry([first.id])
    assert queue.get(first.id).status == "dead" and queue.get(second.id).status == "pending"
    queue.cancel([second.id])
    assert queue.retry([first.id]) == [first.id]  # the key is free: the retry goes through
