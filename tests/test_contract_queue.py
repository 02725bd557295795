"""The queue's contract: what every backend must show through the public API (enqueue, claim,
heartbeat, complete and fail, the reaper, lease semantics and fencing, reading, complete_and_claim and
completing with the caller's statements), with the clock moved instead of sleeping.

Run on every backend, APSW too. The rest of the contract suite: bad calls in
``test_contract_bad_calls.py``, each backend's typed answers in ``test_contract_backend.py``. Facts of
the SQLite file, its query plans and its sync levels are in ``test_sqlite_file.py``,
``test_sqlite_plans.py`` and ``test_sqlite_sync_levels.py``.
"""

from __future__ import annotations

import dataclasses

import pytest

from leaselab import Backoff, InvalidPayload, Job, JobNotFound, LeaselabError, LeaseLost, Queue, Status
from tests.support.servers import IN_PROCESS_BACKENDS

TARGETS = IN_PROCESS_BACKENDS  # the contract suite: on the APSW backend too

LEASE = 30.0


def kinds(q: Queue, job_id: int | None = None, skip_heartbeats: bool = False) -> list[str]:
    return [e.kind for e in q.events(job_id) if not (skip_heartbeats and e.kind == "heartbeat")]


# -- enqueue ----------------------------------------------------------------


def test_enqueue_returns_increasing_ids_and_stores_a_pending_job(queue, clock):
    first = queue.enqueue({"n": 1, "текст": "привет", "list": [1, 2.5, None, True]})
    second = queue.enqueue([1, 2, 3])
    assert isinstance(first, int) and second > first
    job = queue.get(first)
    assert isinstance(job, Job)
    assert job.payload == {"n": 1, "текст": "привет", "list": [1, 2.5, None, True]}
    assert job.status is Status.PENDING and job.status == "pending"
    assert (job.priority, job.attempts, job.max_attempts) == (0, 0, 5)
    assert job.run_at == clock() and job.created_at == clock()
    assert (job.lease_until, job.worker, job.token, job.result, job.last_error) == (None,) * 5


def test_enqueue_stores_priority_and_max_attempts(queue):
    job = queue.get(queue.enqueue("x", priority=7, max_attempts=2))
    assert (job.priority, job.max_attempts) == (7, 2)


def test_a_delayed_job_is_not_claimable_until_its_run_at(queue, clock):
    job_id = queue.enqueue("later", delay=10)
    assert queue.get(job_id).run_at == clock() + 10
    assert queue.claim("w1", LEASE) is None
    clock.advance(9.999)
    assert queue.claim("w1", LEASE) is None
    clock.advance(0.001)
    assert queue.claim("w1", LEASE).id == job_id


def test_run_at_is_absolute_and_overrides_delay(queue, clock):
    job_id = queue.enqueue("at", delay=1000, run_at=clock() + 5)
    assert queue.get(job_id).run_at == clock() + 5
    clock.advance(5)
    assert queue.claim("w1", LEASE).id == job_id


def test_enqueue_many_returns_ids_in_order_and_a_bad_payload_writes_none(queue):
    ids = queue.enqueue_many([{"i": i} for i in range(5)], priority=3)
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert [queue.get(i).payload for i in ids] == [{"i": i} for i in range(5)]
    assert all(queue.get(i).priority == 3 for i in ids)
    with pytest.raises(InvalidPayload):
        queue.enqueue_many([{"ok": 1}, {"bad": float("nan")}])
    assert queue.stats()["pending"] == 5


def test_next_run_at_is_the_earliest_pending_run_at(queue, clock):
    assert queue.next_run_at() is None
    queue.enqueue("b", delay=20)
    queue.enqueue("a", delay=5)
    assert queue.next_run_at() == clock() + 5


# -- claim --------------------------------------------------------------------


def test_claim_on_an_empty_queue_returns_none(queue):
    assert queue.claim("w1", LEASE) is None


def test_claim_leases_the_job_to_the_worker(queue, clock):
    job_id = queue.enqueue({"a": 1})
    job = queue.claim("w1", lease=12.5)
    assert job.id == job_id and job.payload == {"a": 1}
    assert job.status is Status.RUNNING
    assert job.worker == "w1" and job.attempts == 1
    assert job.lease_until == clock() + 12.5 and job.started_at == clock()
    assert isinstance(job.token, str) and len(job.token) >= 16
    assert queue.get(job_id) == job


def test_a_job_read_back_is_a_frozen_value_like_one_built_by_hand(queue):
    job = queue.get(queue.enqueue({"a": [1, 2]}, priority=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.status = Status.DONE
    fields = {f.name: getattr(job, f.name) for f in dataclasses.fields(Job)}
    assert Job(**fields) == job
    assert dataclasses.replace(job, priority=4).priority == 4 and job.priority == 3
    assert repr(job).startswith("Job(id=1, payload={'a': [1, 2]}, status=<Status.PENDING")


def test_claim_order_is_priority_then_run_at_then_id(queue, clock):
    now = clock()
    a = queue.enqueue("a", priority=0)
    b = queue.enqueue("b", priority=5)
    c = queue.enqueue("c", priority=5, run_at=now - 10)
    d = queue.enqueue("d", priority=0, run_at=now - 5)
    e = queue.enqueue("e", priority=0)
    f = queue.enqueue("f", priority=-1, run_at=now - 100)
    later = queue.enqueue("later", priority=100, delay=1)
    order = [queue.claim("w", LEASE).id for _ in range(6)]
    assert order == [c, b, d, a, e, f]
    assert queue.claim("w", LEASE) is None
    clock.advance(1)
    assert queue.claim("w", LEASE).id == later


def test_a_claimed_job_is_not_claimed_again_while_running(queue):
    queue.enqueue("only")
    assert queue.claim("w1", LEASE) is not None
    assert queue.claim("w2", LEASE) is None


# -- heartbeat, complete, fail --------------------------------------------------


def test_heartbeat_extends_the_lease_so_the_reaper_leaves_the_job(queue, clock):
    queue.enqueue("x")
    job = queue.claim("w1", lease=10)
    clock.advance(8)
    new_until = queue.heartbeat(job.id, job.token, lease=10)
    assert new_until == clock() + 10
    assert queue.get(job.id).lease_until == new_until
    clock.advance(5)  # past the first lease, inside the renewed one
    assert queue.reap() == []
    assert queue.get(job.id).status is Status.RUNNING


def test_complete_stores_the_result_and_marks_done(queue, clock):
    queue.enqueue("x")
    job = queue.claim("w1", LEASE)
    clock.advance(3)
    queue.complete(job.id, job.token, result={"answer": 42, "list": [1, "два"]})
    done = queue.get(job.id)
    assert done.status is Status.DONE
    assert done.result == {"answer": 42, "list": [1, "два"]}
    assert done.finished_at == clock() and done.lease_until is None
    assert queue.claim("w2", LEASE) is None


def test_complete_twice_is_refused_with_lease_lost(queue):
    queue.enqueue("x")
    job = queue.claim("w1", LEASE)
    queue.complete(job.id, job.token, "first")
    with pytest.raises(LeaseLost) as info:
        queue.complete(job.id, job.token, "second")
    assert info.value.job_id == job.id and info.value.status == "done"
    assert queue.get(job.id).result == "first"


def test_fail_returns_pending_and_the_job_waits_out_its_backoff(target, clock):
    q = Queue(target, clock=clock, backoff=Backoff(base=2, cap=100))
    job_id = q.enqueue("x", max_attempts=3)
    job = q.claim("w1", LEASE)
    assert q.fail(job.id, job.token, "boom") is Status.PENDING
    failed = q.get(job_id)
    assert failed.status is Status.PENDING and failed.last_error == "boom"
    assert failed.run_at == clock() + 2 and failed.lease_until is None
    assert q.claim("w1", LEASE) is None
    clock.advance(2)
    job = q.claim("w1", LEASE)
    assert job.attempts == 2
    assert q.fail(job.id, job.token, "boom again") is Status.PENDING
    assert q.get(job_id).run_at == clock() + 4  # base * 2**(attempts-1)
    q.close()


def test_fail_on_the_last_attempt_makes_the_job_dead(queue, clock):
    job_id = queue.enqueue("x", max_attempts=2)
    for attempt in (1, 2):
        job = queue.claim("w1", LEASE)
        assert job.attempts == attempt
        status = queue.fail(job.id, job.token, f"boom {attempt}")
        clock.advance(100)
    assert status is Status.DEAD
    dead = queue.get(job_id)
    assert dead.status is Status.DEAD and dead.last_error == "boom 2" and dead.finished_at is not None
    assert queue.claim("w1", LEASE) is None
    assert kinds(queue, job_id) == ["enqueued", "claimed", "failed", "claimed", "failed", "dead"]


def test_a_failure_retried_after_its_job_was_claimed_again_is_answered_pending_and_is_no_lost_lease(queue, clock):
    """The retry of a fail whose reply never came, arriving once the job is on its next attempt: the
    first try went through (the history holds its ``failed`` event), so the retry is answered with
    the status that failure gave, and nothing is recorded as lost. Another failure is refused."""
    job_id = queue.enqueue("x", max_attempts=3)
    first = queue.claim("w1", LEASE)
    assert queue.fail(first.id, first.token, "boom") is Status.PENDING
    clock.advance(100)
    second = queue.claim("w2", LEASE)
    assert queue.fail(first.id, first.token, "boom") is Status.PENDING
    assert kinds(queue, job_id) == ["enqueued", "claimed", "failed", "claimed"]
    for refused in (
        lambda: queue.fail(first.id, first.token, "another error"),
        lambda: queue.complete(first.id, first.token),
    ):
        with pytest.raises(LeaseLost):
            refused()
    assert kinds(queue, job_id)[-2:] == ["lease_lost", "lease_lost"]
    assert (queue.get(job_id).status, queue.get(job_id).token) == (Status.RUNNING, second.token)


# -- reap -------------------------------------------------------------------------


def test_reap_moves_an_expired_lease_back_to_pending_with_backoff(queue, clock):
    job_id = queue.enqueue("x")
    queue.claim("w1", lease=10)
    clock.advance(10)
    assert queue.reap() == []  # lease_until < now, strictly: at the very instant it still holds
    clock.advance(0.5)
    assert queue.reap() == [job_id]
    job = queue.get(job_id)
    assert job.status is Status.PENDING and job.last_error == "lease expired"
    assert job.run_at == clock() + queue.backoff.delay(1) and job.lease_until is None
    assert queue.reap() == []


def test_reap_leaves_unexpired_leases_and_returns_only_what_it_moved(queue, clock):
    short, long_ = queue.enqueue("short"), queue.enqueue("long")
    queue.claim("w1", lease=5)
    queue.claim("w2", lease=50)
    clock.advance(6)
    assert queue.reap() == [short]
    assert queue.get(long_).status is Status.RUNNING


def test_reap_keeps_every_job_a_batch_claim_took_when_kept_by_that_claims_own_token(queue, clock):
    """A worker keeps a claim it has sent before it knows which jobs it took, and no other claim's."""
    queue.enqueue_many(["a", "b", "c"])
    mine = queue.claim_many(2, "w1", lease=5, token="f" * 32)
    theirs = queue.claim("w2", lease=5)
    clock.advance(6)
    assert queue.reap(keep=["f" * 32]) == [theirs.id]
    assert [queue.get(job.id).status for job in mine] == [Status.RUNNING, Status.RUNNING]
    assert sorted(queue.reap(keep=["f" * 31])) == sorted(job.id for job in mine)  # a prefix alone keeps nothing


def test_reap_on_the_last_attempt_makes_the_job_dead(queue, clock):
    job_id = queue.enqueue("x", max_attempts=1)
    queue.claim("w1", lease=5)
    clock.advance(6)
    assert queue.reap() == [job_id]
    assert queue.get(job_id).status is Status.DEAD
    assert kinds(queue, job_id) == ["enqueued", "claimed", "reaped", "dead"]


# -- lease semantics and fencing ---------------------------------------------------


def test_a_late_holder_not_yet_reaped_can_still_heartbeat_and_complete(queue, clock):
    queue.enqueue("x")
    job = queue.claim("w1", lease=5)
    clock.advance(20)  # far past lease_until, but nobody reaped
    assert queue.heartbeat(job.id, job.token, lease=5) == clock() + 5
    clock.advance(20)
    queue.complete(job.id, job.token, "late but fine")
    assert queue.get(job.id).status is Status.DONE
    assert queue.get(job.id).result == "late but fine"


def test_after_the_reap_the_old_holder_gets_lease_lost_on_every_write(queue, zombie):
    queue.enqueue("x")
    job, _ = zombie(holder="w1", retake=False)
    for write in (
        lambda: queue.heartbeat(job.id, job.token, 5),
        lambda: queue.complete(job.id, job.token, "zombie"),
        lambda: queue.fail(job.id, job.token, "zombie"),
    ):
        with pytest.raises(LeaseLost) as info:
            write()
        assert info.value.job_id == job.id
        assert isinstance(info.value, LeaselabError)
    after = queue.get(job.id)
    assert after.status is Status.PENDING and after.result is None and after.last_error == "lease expired"


def test_after_a_reclaim_the_zombie_is_fenced_off_and_the_new_result_stands(queue, zombie):
    queue.enqueue("x")
    a, b = zombie()
    assert b.id == a.id and b.token != a.token and b.attempts == 2
    with pytest.raises(LeaseLost):
        queue.heartbeat(a.id, a.token, 5)
    queue.complete(b.id, b.token, {"by": "B"})
    with pytest.raises(LeaseLost) as info:
        queue.complete(a.id, a.token, {"by": "A"})
    assert info.value.status == "done"
    final = queue.get(a.id)
    assert final.status is Status.DONE and final.result == {"by": "B"} and final.worker == "B"


def test_a_refused_write_is_recorded_as_a_lease_lost_event_of_the_zombie(queue, clock, zombie):
    queue.enqueue("x")
    a, b = zombie()
    with pytest.raises(LeaseLost):
        queue.complete(a.id, a.token, "zombie")
    lost = [e for e in queue.events(a.id) if e.kind == "lease_lost"]
    assert len(lost) == 1
    assert (lost[0].worker, lost[0].token, lost[0].attempt) == ("A", a.token, 1)
    assert lost[0].at == clock() and "complete" in lost[0].detail
    assert queue.get(a.id).token == b.token  # the refused write changed nothing


def test_tokens_are_unique_per_claim_and_attempts_rise_on_every_claim(queue, clock):
    job_id = queue.enqueue("x", max_attempts=40)
    tokens, fences = [], []
    for n in range(1, 41):
        job = queue.claim(f"w{n % 3}", lease=1)
        assert job.attempts == n
        tokens.append(job.token)
        fences.append(job.fence)
        if n % 2:
            queue.fail(job.id, job.token, "again")
        else:
            clock.advance(2)
            queue.reap()
        clock.advance(queue.backoff.cap)
    assert len(set(tokens)) == len(tokens)
    assert fences == sorted(fences) and len(set(fences)) == len(fences)
    assert fences[0] == (job_id, 1) and fences[-1] == (job_id, 40)
    assert queue.get(job_id).status is Status.DEAD


# -- reading ------------------------------------------------------------------------


def test_get_jobs_and_stats_show_every_status(queue, clock):
    assert queue.stats() == {"pending": 0, "running": 0, "done": 0, "dead": 0}
    assert queue.jobs() == []
    ids = queue.enqueue_many(["done", "dead", "running", "pending"], max_attempts=1)
    j = queue.claim("w", LEASE)
    queue.complete(j.id, j.token, "ok")
    j = queue.claim("w", LEASE)
    queue.fail(j.id, j.token, "bad")
    queue.claim("w", LEASE)
    assert queue.stats() == {"pending": 1, "running": 1, "done": 1, "dead": 1}
    assert [job.id for job in queue.jobs()] == ids
    assert [job.status.value for job in queue.jobs()] == ["done", "dead", "running", "pending"]
    assert [job.id for job in queue.jobs(status="dead")] == [ids[1]]
    assert [job.id for job in queue.jobs(status=Status.RUNNING)] == [ids[2]]
    assert [job.id for job in queue.jobs(limit=2)] == ids[:2]
    with pytest.raises(ValueError, match="status"):
        queue.jobs(status="sleeping")


def test_jobs_newest_first_gives_the_latest_n(queue):
    ids = queue.enqueue_many(range(5))
    assert [j.id for j in queue.jobs(limit=2, newest_first=True)] == ids[:-3:-1]
    assert [j.id for j in queue.jobs(status="pending", limit=3, newest_first=True)] == ids[:-4:-1]


def test_jobs_page_by_after_and_limit_in_id_order_with_or_without_a_status(queue, clock):
    ids = queue.enqueue_many(list(range(7)))
    job = queue.claim("w", 30)  # the first job runs: the rest stay pending
    first = [j.id for j in queue.jobs(limit=3)]
    assert first == ids[:3]
    assert [j.id for j in queue.jobs(limit=3, after=first[-1])] == ids[3:6]
    assert [j.id for j in queue.jobs(limit=3, after=ids[5])] == ids[6:]
    assert queue.jobs(limit=3, after=ids[-1]) == []
    assert [j.id for j in queue.jobs(status="pending", limit=2, after=job.id)] == ids[1:3]
    assert [j.id for j in queue.jobs(limit=2, after=ids[2], newest_first=True)] == ids[:-3:-1]
    with pytest.raises(TypeError, match="after"):
        queue.jobs(after="3")


def test_events_page_by_after_and_limit_and_together_give_the_whole_history(queue, clock):
    ids = queue.enqueue_many(list(range(4)))
    for _ in ids:
        job = queue.claim("w", 30)
        queue.complete(job.id, job.token, None)
    whole = queue.events()
    pages, after = [], 0
    while page := queue.events(after=after, limit=5):
        assert len(page) <= 5
        pages.append(page)
        after = page[-1].id
    assert [e for page in pages for e in page] == whole
    assert [len(page) for page in pages] == [5, 5, 2]
    assert queue.events(limit=0) == []
    mine = queue.events(ids[2])
    assert queue.events(ids[2], limit=2) == mine[:2]
    assert queue.events(ids[2], after=mine[0].id, limit=1) == mine[1:2]
    with pytest.raises(ValueError, match="limit"):
        queue.events(limit=-1)


def test_events_tell_the_story_of_a_job_in_order_with_worker_token_and_attempt(queue, clock):
    other = queue.enqueue("other")
    job_id = queue.enqueue("x", priority=1)
    t0 = clock()
    first = queue.claim("w1", LEASE)
    clock.advance(1)
    queue.heartbeat(first.id, first.token, LEASE)
    clock.advance(1)
    queue.fail(first.id, first.token, "boom")
    clock.advance(10)
    second = queue.claim("w2", LEASE)
    clock.advance(1)
    queue.complete(second.id, second.token, "ok")

    events = queue.events(job_id)
    assert [e.kind for e in events] == ["enqueued", "claimed", "heartbeat", "failed", "claimed", "completed"]
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert all(e.job_id == job_id for e in events)
    assert [e.at for e in events] == [t0, t0, t0 + 1, t0 + 2, t0 + 12, t0 + 13]
    assert [e.attempt for e in events] == [0, 1, 1, 1, 2, 2]
    assert [e.worker for e in events] == [None, "w1", "w1", "w1", "w2", "w2"]
    assert [e.token for e in events] == [None, first.token, first.token, first.token, second.token, second.token]
    assert events[3].detail == "boom"
    everything = queue.events()
    assert {e.job_id for e in everything} == {other, job_id}
    assert queue.events(after=events[2].id)[0].id > events[2].id
    assert [e.kind for e in queue.events(job_id, after=events[3].id)] == ["claimed", "completed"]


def test_the_history_agrees_with_the_jobs_table(queue, clock):
    ids = queue.enqueue_many(list(range(30)), max_attempts=3)
    for round_ in range(6):
        for n in range(10):
            job = queue.claim(f"w{n}", lease=5)
            if job is None:
                break
            choice = (job.id + round_) % 4
            if choice == 0:
                queue.complete(job.id, job.token, job.payload)
            elif choice == 1:
                queue.fail(job.id, job.token, "x")
            elif choice == 2:
                queue.heartbeat(job.id, job.token, 5)
            # choice 3: abandoned, the reaper gets it
        clock.advance(6)
        queue.reap()
        clock.advance(queue.backoff.cap)
    last_kind = {
        "done": {"completed"},
        "dead": {"dead"},
        "pending": {"enqueued", "failed", "reaped"},
        "running": {"claimed", "heartbeat"},
    }
    statuses = set()
    for job_id in ids:
        job = queue.get(job_id)
        history = queue.events(job_id)
        statuses.add(job.status.value)
        assert sum(e.kind == "claimed" for e in history) == job.attempts
        assert history[0].kind == "enqueued"
        assert history[-1].kind in last_kind[job.status.value]
        assert sum(e.kind in ("completed", "dead") for e in history) == (job.status in ("done", "dead"))
    assert {"done", "dead"} <= statuses


# -- the SQL a reader sees ---------------------------------------------------------------


def test_the_tracer_sees_the_exact_claim_statement_and_its_params(queue, clock):
    queue.enqueue("x")
    seen = []
    queue.tracer = lambda statement, params: seen.append((statement, params))
    job = queue.claim("w7", lease=9)
    assert (
        queue.backend.statements.CLAIM.strip(),
        {"now": clock(), "lease_until": clock() + 9, "worker": "w7", "token": job.token, "queue": "default"},
    ) in seen
    queue.tracer = None
    queue.reap()
    assert len(seen) == 1


# -- durability ------------------------------------------------------------------------


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_both_durabilities_run_a_job_through_and_survive_reopening(target, clock, durability):
    q = Queue(target, clock=clock, durability=durability)
    job_id = q.enqueue({"d": durability})
    job = q.claim("w", LEASE)
    q.complete(job.id, job.token, durability)
    q.close()
    with Queue(target, clock=clock) as again:
        assert again.get(job_id).result == durability


# -- the call timeout --------------------------------------------------------------------------------


def test_a_queue_opened_with_a_call_timeout_holds_it_and_only_a_server_bounds_its_calls_by_it(target):
    with Queue(target, call_timeout=2.5) as q:
        assert q.call_timeout == 2.5
        assert q.bounds_calls is (q.backend.kind == "postgresql")  # a file's busy timeout bounds every wait
        q.enqueue("x")
        assert q.claim("w").payload == "x"
    with Queue(target) as q:
        assert q.call_timeout is None


# -- complete_and_claim: the worker's hot path, one transaction ------------------------------------


def test_complete_and_claim_finishes_the_job_and_leases_the_next_to_the_same_worker(queue, clock):
    first, second = queue.enqueue("a"), queue.enqueue("b")
    job = queue.claim("w1", lease=10)
    clock.advance(1)
    nxt = queue.complete_and_claim(job.id, job.token, {"ok": 1}, worker="w1", lease=10)
    assert queue.get(first).status == "done" and queue.get(first).result == {"ok": 1}
    assert nxt.id == second and nxt.status == "running" and nxt.worker == "w1"
    assert nxt.token != job.token and nxt.lease_until == clock() + 10
    kinds = [(e.job_id, e.kind) for e in queue.events() if e.kind in ("claimed", "completed")]
    assert kinds == [(first, "claimed"), (first, "completed"), (second, "claimed")]


def test_complete_and_claim_returns_none_when_nothing_is_left(queue):
    queue.enqueue("only")
    job = queue.claim("w1")
    assert queue.complete_and_claim(job.id, job.token, None, worker="w1") is None
    assert queue.stats() == {"pending": 0, "running": 0, "done": 1, "dead": 0}


def test_complete_and_claim_with_a_stale_token_is_lease_lost_and_claims_nothing(queue, zombie):
    job_id = queue.enqueue("x")
    stale, fresh = zombie(holder="w1", successor="w2")
    waiting = queue.enqueue("y")  # something w1 could take if the refused call claimed anyway
    with pytest.raises(LeaseLost) as lost:
        queue.complete_and_claim(stale.id, stale.token, "zombie result", worker="w1")
    assert lost.value.job_id == job_id
    now = queue.get(job_id)
    assert (now.status, now.token, now.result) == ("running", fresh.token, None)
    assert queue.get(waiting).status == "pending" and queue.get(waiting).attempts == 0
    assert queue.events(job_id)[-1].kind == "lease_lost"


def test_complete_and_claim_for_an_unknown_job_is_job_not_found_and_claims_nothing(queue):
    queue.enqueue("x")
    with pytest.raises(JobNotFound):
        queue.complete_and_claim(999, "token", None, worker="w1")
    assert queue.stats()["pending"] == 1


# -- completing: the caller's statements and the completion in one transaction ------------------
# The statements take no parameters, so the same SQL runs on every backend's connection.


def _ledger(q: Queue) -> list:
    return q.backend.connection.execute("SELECT n FROM ledger ORDER BY n").fetchall()


def test_completing_commits_the_callers_statements_with_the_completion(queue):
    with queue.backend.transaction(durable=False) as run:
        run("CREATE TABLE ledger (n integer)")
    queue.enqueue("pay")
    job = queue.claim("w1")
    with queue.completing(job, result="paid") as tx:
        tx.execute("INSERT INTO ledger VALUES (1)")
    assert _ledger(queue) == [(1,)]
    assert queue.get(job.id).result == "paid" and queue.get(job.id).status is Status.DONE


def test_an_error_inside_completing_writes_neither_and_the_job_stays_running(queue):
    with queue.backend.transaction(durable=False) as run:
        run("CREATE TABLE ledger (n integer)")
    queue.enqueue("pay")
    job = queue.claim("w1")
    with pytest.raises(RuntimeError, match="crash"):
        with queue.completing(job) as tx:
            tx.execute("INSERT INTO ledger VALUES (1)")
            raise RuntimeError("crash")
    assert _ledger(queue) == []
    assert queue.get(job.id).status is Status.RUNNING


def test_a_zombie_completing_gets_lease_lost_and_its_statements_are_rolled_back(queue, zombie):
    with queue.backend.transaction(durable=False) as run:
        run("CREATE TABLE ledger (n integer)")
    queue.enqueue("pay")
    stale, fresh = zombie(holder="w1", successor="w2")
    with pytest.raises(LeaseLost):
        with queue.completing(stale) as tx:
            tx.execute("INSERT INTO ledger VALUES (1)")
    with queue.completing(fresh, result="w2") as tx:
        tx.execute("INSERT INTO ledger VALUES (2)")
    assert _ledger(queue) == [(2,)]
    assert queue.get(fresh.id).result == "w2"
    assert "lease_lost" in kinds(queue, fresh.id)
