"""Named queues, on every backend: a job waits in the queue it was enqueued to, a claim takes jobs only
from the queues it serves (one statement, in claim order across them), a worker runs each job with its
queue's handler, and the listings and counts read one queue or each. A bad name is refused by name."""

from __future__ import annotations

import pytest

from leaselab import Queue, Worker
from leaselab.errors import HandlerError, InvalidQueueName
from tests.support.servers import IN_PROCESS_BACKENDS

TARGETS = IN_PROCESS_BACKENDS  # the contract suite: on the APSW and minimal backends too

LEASE = 30.0


def test_a_job_enqueued_with_no_queue_is_in_the_default_queue_and_a_plain_claim_takes_it(queue):
    job_id = queue.enqueue("plain")
    job = queue.claim("w", LEASE)
    assert (job.id, job.queue) == (job_id, "default")


def test_a_claim_takes_only_from_the_queue_it_serves(queue):
    emails = queue.enqueue("mail", queue="emails", priority=9)
    plain = queue.enqueue("plain")
    assert queue.claim("w", LEASE).id == plain  # the default queue's claim never sees the emails
    assert queue.claim("w", LEASE) is None
    job = queue.claim("w", LEASE, queues="emails")
    assert (job.id, job.queue, job.payload) == (emails, "emails", "mail")
    assert queue.claim("w", LEASE, queues="sms") is None


def test_a_claim_of_several_queues_takes_their_jobs_in_claim_order_and_no_others(queue, clock):
    a_low = queue.enqueue("a-low", queue="a", priority=1)
    b_high = queue.enqueue("b-high", queue="b", priority=5)
    queue.enqueue("c", queue="c", priority=9)
    clock.advance(1)
    b_low = queue.enqueue("b-low", queue="b", priority=1)
    taken = [queue.claim("w", LEASE, queues=["a", "b"]) for _ in range(4)]
    assert [j and j.id for j in taken] == [b_high, a_low, b_low, None]
    batch_ids = queue.enqueue_many(["x", "y"], queue="b") + queue.enqueue_many(["z"], queue="a")
    batch = queue.claim_many(5, "w", LEASE, queues=("a", "b"))
    assert sorted(j.id for j in batch) == sorted(batch_ids)


def test_the_fused_claims_serve_the_named_queues_too(queue):
    first = queue.enqueue(1, queue="emails")
    queue.enqueue(2)  # default: not for this worker
    second = queue.enqueue(3, queue="emails")
    sms = queue.enqueue(4, queue="sms")
    job = queue.claim("w", LEASE, queues="emails")
    assert job.id == first
    job = queue.complete_and_claim(job.id, job.token, None, "w", LEASE, queues="emails")
    assert job.id == second
    refused, jobs = queue.complete_many_and_claim([(job.id, job.token, None)], 2, "w", LEASE, queues=["sms", "x"])
    assert refused == [] and [j.id for j in jobs] == [sms]
    refused, jobs = queue.complete_many_and_claim([(jobs[0].id, jobs[0].token, None)], 2, "w", LEASE, queues="sms")
    assert refused == [] and jobs == []
    assert queue.stats("default") == {"pending": 1, "running": 0, "done": 0, "dead": 0}


def test_listings_and_counts_read_one_queue_or_each(queue):
    queue.enqueue_many(["a", "b"], queue="emails")
    queue.enqueue("c")
    queue.claim("w", LEASE, queues="emails")
    assert [j.payload for j in queue.jobs(queue="emails")] == ["a", "b"]
    assert [j.payload for j in queue.jobs("pending", queue="emails")] == ["b"]
    assert [j.payload for j in queue.jobs(queue="emails", newest_first=True, limit=1)] == ["b"]
    assert [j.payload for j in queue.jobs(queue="nobody")] == []
    assert queue.stats("emails") == {"pending": 1, "running": 1, "done": 0, "dead": 0}
    assert queue.stats("nobody") == {"pending": 0, "running": 0, "done": 0, "dead": 0}
    assert queue.stats() == {"pending": 2, "running": 1, "done": 0, "dead": 0}
    assert queue.stats_by_queue() == {
        "default": {"pending": 1, "running": 0, "done": 0, "dead": 0},
        "emails": {"pending": 1, "running": 1, "done": 0, "dead": 0},
    }


@pytest.mark.parametrize("bad", ["", "has space", "-leading", "a=b", "x" * 65, "new\nline", 7, None])
def test_a_bad_queue_name_is_refused_with_a_typed_error_naming_it_and_nothing_is_written(queue, bad):
    with pytest.raises(InvalidQueueName) as refused:
        queue.enqueue("x", queue=bad)
    assert repr(bad) in str(refused.value) and refused.value.name == bad
    with pytest.raises(InvalidQueueName):
        queue.enqueue_many(["x"], queue=bad)
    with pytest.raises(InvalidQueueName):
        queue.claim("w", LEASE, queues=["ok", bad])
    if bad is not None:  # jobs(queue=None) and stats(None) read every queue
        with pytest.raises(InvalidQueueName):
            queue.jobs(queue=bad)
        with pytest.raises(InvalidQueueName):
            queue.stats(bad)
    assert queue.stats() == {"pending": 0, "running": 0, "done": 0, "dead": 0}


def test_a_claim_must_serve_at_least_one_queue(queue):
    with pytest.raises(ValueError, match="at least one queue"):
        queue.claim("w", LEASE, queues=[])


def _record(seen: list, tag: str):
    def handler(job):
        seen.append((tag, job.queue, job.payload))

    return handler


def test_a_worker_runs_each_job_with_its_queues_handler_and_leaves_other_queues_alone(worker_queue):
    q = worker_queue
    q.enqueue("mail", queue="emails")
    q.enqueue("text", queue="sms")
    q.enqueue("plain")  # nobody here serves the default queue
    q.enqueue("ignored", queue="other")
    seen: list = []

    def with_lease(job, lease):
        seen.append(("sms-handler", job.queue, job.payload, lease.job.id == job.id))

    Worker(
        q, queues={"emails": _record(seen, "email-handler"), "sms": with_lease}, exit_when_idle=True, signals=False
    ).run()
    assert sorted(seen) == [("email-handler", "emails", "mail"), ("sms-handler", "sms", "text", True)]
    by_queue = q.stats_by_queue()
    assert by_queue["default"]["pending"] == 1 and by_queue["other"]["pending"] == 1  # exit_when_idle: its own queues


def test_a_worker_with_one_handler_for_several_named_queues_and_one_beside_for_the_default(worker_queue):
    q = worker_queue
    for name in ("a", "b", "default"):
        q.enqueue(name, queue=name)
    seen: list = []
    Worker(q, _record(seen, "one"), queues=["a", "b"], exit_when_idle=True, signals=False).run()
    assert sorted(seen) == [("one", "a", "a"), ("one", "b", "b")]
    Worker(q, _record(seen, "default"), queues={"c": _record(seen, "c")}, exit_when_idle=True, signals=False).run()
    assert ("default", "default", "default") in seen


def test_a_worker_given_no_handler_or_the_default_queue_twice_is_refused(tmp_path):
    with pytest.raises(HandlerError):
        Worker(str(tmp_path / "q.db"))
    with pytest.raises(HandlerError):
        Worker(str(tmp_path / "q.db"), queues=["a"])
    with pytest.raises(ValueError, match="two handlers"):
        Worker(str(tmp_path / "q.db"), print, queues={"default": print})
    with pytest.raises(InvalidQueueName):
        Worker(str(tmp_path / "q.db"), queues={"bad name": print})
    assert not (tmp_path / "q.db").exists()  # refused before the queue was opened


def test_jobs_written_by_schema_4_code_paths_still_read_as_default(target, clock):
    # The Job a listing returns carries the queue and the key; a plain job has no key.
    with Queue(target, clock=clock) as q:
        q.enqueue("x")
        (job,) = q.jobs()
        assert (job.queue, job.key) == ("default", None)


def test_retrying_every_dead_job_of_one_queue_leaves_the_other_queues_dead_jobs_alone(queue):
    def kill(name: str) -> int:
        job_id = queue.enqueue(name, queue=name, max_attempts=1)
        job = queue.claim("w", LEASE, queues=name)
        queue.fail(job.id, job.token, "boom")
        return job_id

    emails, sms = kill("emails"), kill("sms")
    assert queue.retry(dead=True, queue="emails") == [emails]
    assert (queue.get(emails).status, queue.get(sms).status) == ("pending", "dead")
    assert queue.retry(dead=True) == [sms]
    with pytest.raises(ValueError, match="dead=True"):
        queue.retry([sms], queue="sms")
    with pytest.raises(InvalidQueueName):
        queue.retry(dead=True, queue="no spaces")
