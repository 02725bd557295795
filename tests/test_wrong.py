"""The wrong ways really are wrong: the naive claim hands one job to two workers, the unfenced write lets a zombie
win."""

from __future__ import annotations

import pytest

from leaselab import LeaseLost, ManualClock, Queue
from leaselab.lessons import wrong


def test_two_naive_claimers_interleaved_both_get_the_same_job(tmp_path):
    clock = ManualClock()
    q = Queue(tmp_path / "jobs.db", clock=clock)
    q.enqueue_many(["a", "b"])
    a = wrong.NaiveClaimer(q.path, "A", clock=clock)
    b = wrong.NaiveClaimer(q.path, "B", clock=clock)
    a_pick, b_pick = a.select(), b.select()
    a_job, b_job = a.update(a_pick), b.update(b_pick)
    assert a_job.id == b_job.id == 1
    assert [(e.worker, e.attempt) for e in q.events(1) if e.kind == "claimed"] == [("A", 1), ("B", 2)]
    assert q.get(1).token == b_job.token != a_job.token
    a.close(), b.close(), q.close()


def test_naive_claim_without_interleaving_takes_jobs_in_claim_order(tmp_path):
    q = Queue(tmp_path / "jobs.db")
    q.enqueue("low")
    q.enqueue("high", priority=5)
    with wrong.NaiveClaimer(q.path, "A") as a:
        assert [a.claim().payload, a.claim().payload, a.claim()] == ["high", "low", None]
    q.close()


def test_unfenced_complete_overwrites_the_newer_result(tmp_path, zombie):
    clock = ManualClock()
    q = Queue(tmp_path / "jobs.db", clock=clock)
    job_id = q.enqueue("page")
    stale, fresh = zombie(lease=10, holder="w1", successor="w2", queue=q)
    q.complete(fresh.id, fresh.token, "new")
    with pytest.raises(LeaseLost):
        q.complete(stale.id, stale.token, "stale")
    assert q.get(job_id).result == "new"
    assert wrong.unfenced_complete(q.path, job_id, "stale", clock=clock) is True
    assert q.get(job_id).result == "stale"
    q.close()


def test_naive_race_between_processes_gives_duplicates(tmp_path):
    result = wrong.race(tmp_path / "naive.db", claim="naive", workers=4, jobs=100)
    assert result.claims > result.jobs
    assert result.duplicates == result.claims - result.jobs > 0


def test_single_statement_race_between_processes_gives_none(tmp_path):
    result = wrong.race(tmp_path / "single.db", claim="single", workers=4, jobs=200)
    assert (result.claims, result.duplicates) == (200, 0)


def test_race_with_one_worker_has_no_duplicates_even_when_naive(tmp_path):
    assert wrong.race(tmp_path / "alone.db", claim="naive", workers=1, jobs=30).duplicates == 0


def test_race_refuses_an_unknown_claim_and_an_existing_file(tmp_path):
    with pytest.raises(ValueError, match="claim must be"):
        wrong.race(tmp_path / "x.db", claim="clever")
    Queue(tmp_path / "used.db").close()
    with pytest.raises(FileExistsError):
        wrong.race(tmp_path / "used.db")


def test_race_leaves_no_gate_folder_behind(tmp_path):
    wrong.race(tmp_path / "r.db", claim="single", workers=2, jobs=10)
    assert not (tmp_path / "r.db.race").exists()


def test_a_deferred_transaction_stops_the_double_claim_by_making_the_loser_fail_with_locked(tmp_path):
    result = wrong.race(tmp_path / "deferred.db", claim="naive", workers=4, jobs=100, transaction="deferred")
    assert result.duplicates == 0 and result.claims == 100
    assert result.locked > 0  # every loser was rolled back and tried again


def test_begin_immediate_takes_the_write_lock_first_so_nobody_fails_and_nobody_duplicates(tmp_path):
    result = wrong.race(tmp_path / "immediate.db", claim="naive", workers=4, jobs=100, transaction="immediate")
    assert (result.duplicates, result.locked, result.claims) == (0, 0, 100)


def test_an_unknown_transaction_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="transaction must be"):
        wrong.race(tmp_path / "x.db", transaction="exclusive")
    with pytest.raises(ValueError, match="transaction must be"):
        wrong.NaiveClaimer(tmp_path / "y.db", "A", transaction="serializable")


# -- a claim not made durable: a server crash hands its fence out again (lesson 7) -----------------


def test_a_crash_forgets_a_forgetful_claim_and_the_next_claim_gets_its_fence_while_a_durable_one_is_kept(
    crashable_server,
):
    from tests.support.servers import fresh_database

    url = fresh_database(crashable_server, "forgetful")
    first, rounds = wrong.claim_until_a_crash_forgets(crashable_server, url, worker="A")
    assert 1 <= rounds <= 10
    with Queue(url) as q:
        assert (q.get(first.id).status, q.get(first.id).attempts) == ("pending", 0)
        second = q.claim("B", lease=600)
        assert second.id == first.id and second.fence == first.fence and second.token != first.token
        with pytest.raises(LeaseLost):
            q.complete(first.id, first.token, "A")
        q.complete(second.id, second.token, "B")
        durable_id = q.enqueue("kept")
        held = q.claim("A", lease=600)
    crashable_server.crash()
    crashable_server.recover()
    with Queue(url) as q:
        kept = q.get(durable_id)
        assert (kept.status, kept.attempts, kept.token) == ("running", 1, held.token)
        assert q.claim("B") is None
        q.complete(held.id, held.token, "A")


def test_claim_until_a_crash_forgets_refuses_a_file_and_a_bad_round_count(tmp_path):
    with pytest.raises(ValueError, match="postgresql:// URL"):
        wrong.claim_until_a_crash_forgets(None, str(tmp_path / "jobs.db"))
    with pytest.raises(ValueError, match="rounds"):
        wrong.claim_until_a_crash_forgets(None, "postgresql://x@127.0.0.1/db", rounds=0)


def test_when_no_crash_forgets_the_claim_the_error_names_the_setting_that_makes_one_forget(pg_server):
    """A real server cannot be made to keep an unsynced claim on demand, so the "crash" here is one
    that changes nothing; the queue and the database are real."""
    from leaselab.lessons.errors import CrashKeptTheClaim

    class Survives:  # a "crash" that changes nothing: every claim is kept
        def crash(self):
            pass

        def recover(self):
            pass

    from tests.support.servers import fresh_database

    with pytest.raises(CrashKeptTheClaim, match="none of 2 crashes forgot the claim.*LAZY_WAL_WRITER"):
        wrong.claim_until_a_crash_forgets(Survives(), fresh_database(pg_server, "kept"), rounds=2)
