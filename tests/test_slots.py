"""A worker with concurrency k: k handlers at once, only free slots claimed, batched leases, nothing lost to a crash."""

from __future__ import annotations

import threading
import time

import pytest

from leaselab import Queue, Status, Worker
from tests.support import history
from tests.support.polling import wait_until
from tests.support.procs import log_of
from tests.support.servers import IN_PROCESS_BACKENDS

# The slots run in this process: on a queue of every backend, APSW too. The fleets' tests take a file.
TARGETS = IN_PROCESS_BACKENDS
# A queue given to a worker bounds its calls below the worker's lease (30 s): call_timeout=27.


def test_a_worker_with_four_slots_runs_four_handlers_at_once_and_drains_the_queue(target):
    running, most = set(), [0]
    lock = threading.Lock()

    def handler(job):
        with lock:
            running.add(job.id)
            most[0] = max(most[0], len(running))
        time.sleep(0.2)
        with lock:
            running.discard(job.id)
        return job.payload * 2

    with Queue(target, call_timeout=27) as q:
        ids = q.enqueue_many(range(12))
        stats = Worker(q, handler, name="w1", concurrency=4, exit_when_idle=True, poll=0.01).run()
        assert most[0] == 4
        assert (stats.claimed, stats.completed, stats.failed, stats.lost) == (12, 12, 0, 0)
        assert [q.get(i).result for i in ids] == [i * 2 for i in range(12)]


def test_a_worker_never_holds_more_jobs_than_it_has_slots(target):
    seen = []

    with Queue(target, call_timeout=27) as q:
        q.enqueue_many([0.1] * 10)

        def handler(job):
            seen.append(q.stats()["running"])
            time.sleep(job.payload)

        Worker(q, handler, name="w1", concurrency=2, exit_when_idle=True, poll=0.01).run()
        assert q.stats()["done"] == 10
    assert max(seen) <= 2


def test_a_slot_whose_handler_raises_fails_that_job_alone(target):
    def handler(job):
        if job.payload == "bad":
            raise ValueError("no")
        return "ok"

    with Queue(target, call_timeout=27) as q:
        good = q.enqueue_many(["a", "b", "c"])
        bad = q.enqueue("bad", max_attempts=1)
        not_json = q.enqueue("set", max_attempts=1)

        def handler2(job):
            return {1, 2} if job.payload == "set" else handler(job)

        stats = Worker(q, handler2, name="w1", concurrency=4, exit_when_idle=True, poll=0.01).run()
        assert [q.get(i).status for i in good] == [Status.DONE] * 3
        assert q.get(bad).status is Status.DEAD and "ValueError: no" in q.get(bad).last_error
        assert q.get(not_json).status is Status.DEAD and "not JSON" in q.get(not_json).last_error
        assert (stats.completed, stats.failed, stats.lost) == (3, 2, 0)


@pytest.mark.parametrize("concurrency", [1, 2], ids=["one slot", "two slots"])
@pytest.mark.parametrize(
    "error", [SystemExit(3), KeyboardInterrupt("3"), GeneratorExit("3")], ids=lambda e: type(e).__name__
)
def test_a_slot_whose_handler_raises_a_base_exception_fails_that_job_and_runs_the_next(target, concurrency, error):
    """SystemExit, KeyboardInterrupt and GeneratorExit are no Exception: either slot kind reports them as
    the attempt's failure, instead of dying with the job held (and, with one slot, the worker with it)."""

    def handler(job):
        if job.payload == "exit":
            raise error
        return job.payload

    with Queue(target, call_timeout=27) as q:
        first = q.enqueue("exit", max_attempts=1)
        rest = q.enqueue_many(list("abcde"))
        worker = Worker(q, handler, name="w1", concurrency=concurrency, exit_when_idle=True, poll=0.01)
        runs = threading.Thread(target=worker.run, daemon=True)  # a slot lost with its job would hang run()
        runs.start()
        runs.join(60)
        assert not runs.is_alive(), "the worker is still waiting for the slot whose handler raised"
        stats = worker.stats
        assert q.get(first).status is Status.DEAD
        assert q.get(first).last_error.startswith(f"{type(error).__name__}: 3")
        assert [q.get(i).result for i in rest] == list("abcde")
        assert (stats.completed, stats.failed, stats.lost) == (5, 1, 0)


@pytest.mark.parametrize("value", [0, -1, 1.5, "4", True])
def test_concurrency_must_be_a_positive_int(target, value):
    with Queue(target) as q:
        with pytest.raises((TypeError, ValueError), match="concurrency"):
            Worker(q, "leaselab.harness.demo:echo", concurrency=value)


def test_the_cli_refuses_a_concurrency_below_one(tmp_path, capsys):
    from leaselab.cli import main

    code = main(
        ["worker", "--db", str(tmp_path / "q.db"), "--handler", "leaselab.harness.demo:echo", "--concurrency", "0"]
    )
    assert code == 2
    assert "concurrency" in capsys.readouterr().err


def test_a_paused_worker_with_four_slots_gets_lease_lost_for_every_job_it_held(tmp_path, fleet_on):
    db = tmp_path / "q.db"
    fleet = fleet_on(db)
    with Queue(db) as q:
        ids = q.enqueue_many([{"seconds": 2.0}] * 4)
        w = fleet.spawn(lease=1.0, name="w1", concurrency=4, poll=0.02)
        wait_until(lambda: q.stats()["running"] == 4, message="all four jobs running in w1")
        fleet.pause(w)
        try:
            time.sleep(1.3)  # past every lease
            assert sorted(q.reap()) == ids
            wait_until(lambda: q.next_run_at() is not None and q.next_run_at() <= time.time(), timeout=10)
            taken = []
            for _ in ids:
                job = q.claim("w2", lease=30)
                taken.append(job)
            assert sorted(j.id for j in taken) == ids
        finally:
            fleet.resume(w)
        wait_until(lambda: log_of(fleet, w).count("lease lost on job") >= 4, message="w1 to learn it lost all four")
        for job in taken:
            q.complete(job.id, job.token, "from w2")
        fleet.stop(w)
        assert fleet.wait(w, timeout=60) == 0
        assert [q.get(i).result for i in ids] == ["from w2"] * 4
        assert "lost 4" in log_of(fleet, w)


def test_sigterm_lets_every_running_slot_finish_and_claims_nothing_more(tmp_path, fleet_on):
    db = tmp_path / "q.db"
    fleet = fleet_on(db)
    with Queue(db) as q:
        ids = q.enqueue_many([{"seconds": 1.0}] * 3 + [{"seconds": 0}] * 3)
        w = fleet.spawn(lease=5.0, name="w1", concurrency=3)
        wait_until(lambda: q.stats()["running"] == 3, message="three jobs running")
        fleet.stop(w)
        assert fleet.wait(w, timeout=60) == 0
        assert [q.get(i).status for i in ids] == [Status.DONE] * 3 + [Status.PENDING] * 3


def test_sigkill_mid_batch_loses_nothing_and_the_history_holds(tmp_path, fleet_on):
    db, effects = tmp_path / "q.db", str(tmp_path / "effects.jsonl")
    fleet = fleet_on(db)
    with Queue(db) as q:
        q.enqueue_many([{"seconds": 0.3, "effects": effects}] * 16, max_attempts=3)
        w1 = fleet.spawn(lease=1.0, name="w1", concurrency=4)
        wait_until(lambda: q.stats()["running"] == 4, message="w1 to hold four jobs")
        fleet.kill(w1)
        w2 = fleet.spawn(lease=1.0, name="w2", exit_when_idle=True, concurrency=4)
        assert fleet.wait(w2, timeout=60) == 0, log_of(fleet, w2)
        assert q.stats()["done"] == 16
    jobs, events, effect_lines = history.load(str(db), effects)
    assert history.check_all(jobs, events, effect_lines) == []
    assert any(e["kind"] == "reaped" for e in events)
