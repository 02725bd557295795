"""Backoff: a pure, capped exponential function, configurable per queue, never shrinking with jitter."""

from __future__ import annotations

import dataclasses
import math

import pytest

from leaselab import Backoff, ManualClock, Queue, Status
from tests.support.servers import IN_PROCESS_BACKENDS

# The queue's use of its backoff is part of the contract: those tests run on every backend, APSW too.
TARGETS = IN_PROCESS_BACKENDS


def test_the_default_backoff_doubles_from_one_second():
    b = Backoff()
    assert [b.delay(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 16.0]


def test_the_delay_is_capped():
    b = Backoff(base=1, cap=10)
    assert [b.delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_huge_attempt_counts_stay_at_the_cap_without_overflow():
    b = Backoff(base=0.5, cap=30)
    for attempts in (100, 1024, 1025, 10**6, 2**63 - 1):
        assert b.delay(attempts) == 30


def test_no_attempt_yet_means_no_delay():
    assert Backoff(base=3).delay(0) == 0.0
    assert Backoff(base=3).delay(-5) == 0.0


def test_without_jitter_the_delay_is_deterministic_and_ignores_randomness():
    b = Backoff(base=0.25, cap=100)
    calls = []

    def rand() -> float:
        calls.append(1)
        return 0.9

    assert b.delay(3, rand=rand) == b.delay(3) == 1.0
    assert calls == []


def test_jitter_stretches_each_delay_within_its_fraction():
    b = Backoff(base=1, cap=1000, jitter=0.5)
    assert b.delay(3, rand=lambda: 0.0) == 4.0
    assert b.delay(3, rand=lambda: 0.5) == 5.0
    assert b.delay(3, rand=lambda: 0.999999) == pytest.approx(6.0, abs=1e-5)
    assert 4.0 <= b.delay(3) < 6.0


@pytest.mark.parametrize("jitter", [0.0, 0.1, 0.5, 1.0])
def test_jitter_never_makes_a_later_delay_shorter_than_an_earlier_one(jitter):
    b = Backoff(base=0.3, cap=45, jitter=jitter)
    just_below_one = math.nextafter(1.0, 0.0)  # random.random() is in [0, 1)
    for attempts in range(1, 30):
        unluckiest_earlier = b.delay(attempts, rand=lambda: just_below_one)
        luckiest_later = b.delay(attempts + 1, rand=lambda: 0.0)
        assert luckiest_later >= unluckiest_earlier, attempts


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"base": -1}, ValueError, "base"),
        ({"base": float("nan")}, TypeError, "base"),
        ({"base": True}, TypeError, "base"),
        ({"base": 5, "cap": 1}, ValueError, "cap"),
        ({"cap": float("inf")}, TypeError, "cap"),
        ({"jitter": 1.5}, ValueError, "jitter"),
        ({"jitter": -0.1}, ValueError, "jitter"),
        ({"jitter": "0.1"}, TypeError, "jitter"),
    ],
)
def test_a_bad_backoff_setting_names_itself(kwargs, error, name):
    with pytest.raises(error, match=name):
        Backoff(**kwargs)


def test_a_backoff_is_immutable():
    b = Backoff()
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.base = 10


def test_each_queue_uses_its_own_backoff_for_failures_and_reaps(target):
    # Two queues on one database, each failing and reaping its own jobs in turn: each delay is its
    # queue's backoff, whoever made the job.
    clock = ManualClock()
    slow = Queue(target, clock=clock, backoff=Backoff(base=7, cap=100))
    fast = Queue(target, clock=clock)
    for q in (slow, fast):
        mine = [q.enqueue("f"), q.enqueue("r")]
        job = q.claim("w", lease=5)
        assert job.id == mine[0]
        assert q.fail(job.id, job.token, "boom") is Status.PENDING
        assert q.claim("w", lease=5).id == mine[1]
        clock.advance(6)
        assert q.reap() == [mine[1]]
        base = 7 if q is slow else 1
        assert [q.get(i).run_at - clock() for i in mine] == [base - 6, base]
    slow.close()
    fast.close()


def test_a_queue_refuses_a_backoff_that_is_not_a_backoff(target):
    with pytest.raises(TypeError, match="backoff"):
        Queue(target, backoff=2.0)


def test_a_jittered_queue_retries_within_the_jitter_window(target):
    clock = ManualClock()
    q = Queue(target, clock=clock, backoff=Backoff(base=10, cap=1000, jitter=0.5))
    ids = q.enqueue_many(range(20))
    for _ in ids:
        job = q.claim("w", lease=5)
        q.fail(job.id, job.token, "boom")
    waits = [q.get(i).run_at - clock() for i in ids]
    assert all(10 <= w < 15 for w in waits), waits
    assert len(set(waits)) > 1  # the jitter really varies
    q.close()
