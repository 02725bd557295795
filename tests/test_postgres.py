"""Facts of the PostgreSQL backend alone: the claim under READ COMMITTED, the server's clock,
LISTEN/NOTIFY, dropped connections, foreign tables, durability and the backoff in SQL."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from leaselab import Backoff, ManualClock, Queue, Status, Worker
from leaselab.errors import (
    DatabaseBusy,
    DatabaseUnreachable,
    NotALeaselabDatabase,
    SchemaTooNew,
    ServerRefused,
    TransientError,
)

try:
    import psycopg
except ImportError:  # pragma: no cover - the postgres extra is part of the test extra
    if os.environ.get("CI"):
        raise
    pytest.skip("PostgreSQL tests need psycopg (pip install 'leaselab[postgres]')", allow_module_level=True)

from leaselab.backends.postgres import statements as sql  # after the psycopg check
from leaselab.harness.pgserver import free_port
from leaselab.harness.skew import SKEWED_WORKER
from leaselab.lessons.race import NAIVE_CLAIM  # the article's claim, as lesson 6 shows it
from tests.support.polling import wait_until
from tests.support.servers import open_at_once


def _claim_params(worker: str, now: float = 1000.0) -> dict:
    return {"now": now, "lease_until": now + 30, "worker": worker, "token": f"token-{worker}", "queue": "default"}


def _waiting_on_a_lock(admin, pid: int) -> bool:
    row = admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return row is not None and row[0] == "Lock"


def _interleave(url: str, statement: str) -> tuple[tuple, tuple, bool]:
    """A claims and holds its transaction open; B runs the same claim meanwhile; then A commits.

    Returns (A's row, B's row, whether B had to wait for A's row lock).
    """
    with Queue(url, clock=ManualClock(0)) as q:
        q.enqueue_many(["first", "second"])
    a = psycopg.connect(url)  # not autocommit: READ COMMITTED transactions, PostgreSQL's default
    b = psycopg.connect(url)
    admin = psycopg.connect(url, autocommit=True)
    try:
        assert a.execute("SHOW transaction_isolation").fetchone()[0] == "read committed"
        row_a = a.execute(statement, _claim_params("A")).fetchone()
        got: dict = {}
        b_thread = threading.Thread(target=lambda: got.update(row=b.execute(statement, _claim_params("B")).fetchone()))
        b_thread.start()
        b_pid = b.info.backend_pid
        # B either comes to wait on A's row lock or gets through without waiting; which is the result.
        waited = (
            wait_until(
                lambda: (
                    "waited"
                    if _waiting_on_a_lock(admin, b_pid)
                    else ("went through" if not b_thread.is_alive() else None)
                ),
                10,
                interval=0.01,
                message="B to wait on A's row lock or finish its claim",
            )
            == "waited"
        )
        a.commit()
        b_thread.join(10)
        assert not b_thread.is_alive()
        b.commit()
        return row_a, got["row"], waited
    finally:
        for conn in (a, b, admin):
            conn.close()


def test_the_articles_claim_gives_one_job_to_two_connections_under_read_committed(pg_url):
    row_a, row_b, waited = _interleave(pg_url, NAIVE_CLAIM)
    assert waited, "B must have waited on A's row lock for the interleaving to be the one that fails"
    # B's subquery chose the same id before A committed; after the wait only the outer WHERE is
    # re-checked, and it still matches: the same job, claimed twice, A's token overwritten.
    assert row_a[0] == row_b[0]
    with Queue(pg_url, clock=ManualClock(0)) as q:
        job = q.get(row_a[0])
        assert (job.attempts, job.worker, job.token) == (2, "B", "token-B")
        assert [e.worker for e in q.events(job.id) if e.kind == "claimed"] == ["A", "B"]


def test_leaselabs_claim_under_the_same_interleaving_gives_the_second_connection_the_next_job(pg_url):
    assert NAIVE_CLAIM != sql.CLAIM
    row_a, row_b, waited = _interleave(pg_url, sql.CLAIM)
    assert not waited, "SKIP LOCKED steps over A's row instead of waiting for it"
    assert (row_a[1], row_b[1]) == ('"first"', '"second"')
    with Queue(pg_url, clock=ManualClock(0)) as q:
        assert [(j.attempts, j.worker) for j in q.jobs()] == [(1, "A"), (1, "B")]


# -- whose clock ---------------------------------------------------------------------------


def _skewed_worker(fleet, skew: float, name: str) -> str:
    """A worker of ``fleet`` whose own clock is off by ``skew`` seconds (lesson 6's program as the launcher):
    everything in the process that asks the system for the time gets it wrong."""
    return fleet.spawn(
        "leaselab.harness.demo:echo",
        lease=5.0,
        name=name,
        max_poll=0.2,
        launcher=(sys.executable, "-c", SKEWED_WORKER, repr(skew)),
    )


def test_without_a_clock_a_postgresql_queue_takes_the_time_from_the_server(pg_url):
    with Queue(pg_url) as q:
        (server_now,) = (
            psycopg.connect(pg_url, autocommit=True)
            .execute("SELECT extract(epoch FROM clock_timestamp())::float8")
            .fetchone()
        )
        assert abs(q.clock() - server_now) < 5
        job_id = q.enqueue("x")
        assert abs(q.get(job_id).created_at - server_now) < 5
    clock = ManualClock(1000)
    with Queue(pg_url, clock=clock) as q:  # an explicit clock still wins
        assert q.clock() == 1000
        assert q.get(q.enqueue("y")).run_at == 1000


def test_a_worker_whose_clock_runs_ten_minutes_fast_does_not_steal_a_live_lease(pg_url, fleet_on):
    with Queue(pg_url) as q:
        q.enqueue("held")
        held = q.claim("holder", lease=120)
        _skewed_worker(fleet_on(pg_url), +600, "fast")
        later = q.enqueue("later")
        wait_until(
            lambda: q.get(later).status is Status.DONE, 30, message="the fast worker to run a job"
        )  # it ran its loop, reaper included
        time.sleep(1.5)  # and more reaps, at least once a second
        job = q.get(held.id)
        assert (job.status, job.token, job.attempts) == (Status.RUNNING, held.token, 1)
        q.heartbeat(held.id, held.token, 120)  # the holder still holds it
        # The same fast clock given explicitly is what the server's clock protects against:
        with Queue(pg_url, clock=lambda: time.time() + 600) as wrong:
            assert wrong.reap() == [held.id]


def test_a_worker_whose_clock_runs_ten_minutes_slow_still_reaps_an_expired_lease(pg_url, fleet_on):
    with Queue(pg_url) as q:
        q.enqueue("abandoned")
        gone = q.claim("crashed", lease=1)  # its holder never comes back
        _skewed_worker(fleet_on(pg_url), -600, "slow")
        wait_until(lambda: q.get(gone.id).status is Status.DONE, 30, message="the slow worker to redo the job")
        job = q.get(gone.id)
        assert (job.attempts, job.worker) == (2, "slow")
        assert [e.kind for e in q.events(gone.id)][:3] == ["enqueued", "claimed", "reaped"]


# -- waiting for work ------------------------------------------------------------------------


def test_an_idle_postgresql_worker_wakes_on_notify_long_before_its_poll(pg_url):
    with Queue(pg_url, call_timeout=27) as q, Queue(pg_url) as producer:
        worker = Worker(q, lambda job: job.payload, name="w", poll=60, max_poll=60)
        runner = threading.Thread(target=worker.run)
        runner.start()
        try:
            time.sleep(0.5)  # the worker found nothing and waits, for up to a minute by its poll
            started = time.monotonic()
            job_id = producer.enqueue("wake")
            wait_until(lambda: producer.get(job_id).status is Status.DONE, 20, message="the notified worker")
            assert time.monotonic() - started < 20
        finally:
            worker.stop()
            runner.join(5)
        assert not runner.is_alive(), "a stop reaches a worker waiting for a notification"


def test_an_enqueue_notifies_only_when_no_runnable_job_was_already_waiting(pg_url):
    """A NOTIFY serializes commits database-wide; with a runnable job waiting, workers are busy anyway."""
    listener = psycopg.connect(pg_url, autocommit=True)
    listener.execute("LISTEN leaselab_jobs")

    def notified() -> int:
        return sum(1 for _ in listener.notifies(timeout=0.5))

    try:
        with Queue(pg_url, clock=ManualClock(1000)) as q:
            q.enqueue("first")  # nothing waiting: wake the idle workers
            assert notified() == 1
            q.enqueue("second")  # "first" still waits to run: no one is idle for long
            q.enqueue_many(["third", "fourth"])
            assert notified() == 0
            for _ in range(4):
                job = q.claim("w")
                q.complete(job.id, job.token)
            q.enqueue("later", delay=3600)  # the queue was empty again
            assert notified() == 1
            q.enqueue("now")  # only a job for later waits: a runnable one wakes them
            assert notified() == 1
    finally:
        listener.close()


def test_an_enqueue_into_a_quiet_named_queue_notifies_though_another_queue_has_a_backlog(pg_url):
    """A backlog in one queue says nothing of the workers serving another, who may be idle; and a unique
    enqueue whose key is held inserts nothing and wakes no one."""
    listener = psycopg.connect(pg_url, autocommit=True)
    listener.execute("LISTEN leaselab_jobs")

    def notified() -> int:
        return sum(1 for _ in listener.notifies(timeout=0.5))

    try:
        with Queue(pg_url, clock=ManualClock(1000)) as q:
            q.enqueue_many(["a", "b"], queue="busy")
            assert notified() == 1
            q.enqueue("c", queue="busy")  # its own queue has a runnable job: its workers are busy
            assert notified() == 0
            q.enqueue("mail", queue="quiet")  # a queue with nothing waiting: its idle workers wake
            assert notified() == 1
            q.enqueue_unique("x", "k", queue="other")
            assert notified() == 1
            assert not q.enqueue_unique("x", "k", queue="other").new
            assert notified() == 0
    finally:
        listener.close()


def test_wait_for_work_returns_at_its_timeout_when_nothing_comes(pg_url):
    with Queue(pg_url) as q:
        started = time.monotonic()
        q.wait_for_work(0.3)
        assert 0.25 < time.monotonic() - started < 5


# -- connections and errors ----------------------------------------------------------------


def test_a_dropped_connection_is_a_transient_error_and_the_next_call_reconnects(pg_url):
    with Queue(pg_url) as q:
        job_id = q.enqueue("x")
        pid = q.backend.connection.info.backend_pid
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(DatabaseUnreachable) as caught:
            q.get(job_id)
        assert isinstance(caught.value, TransientError)
        assert q.get(job_id).payload == "x"  # reconnected
        assert q.backend.connection.info.backend_pid != pid


def test_an_unreachable_server_names_host_port_and_database_but_never_the_password():
    port = free_port()
    with pytest.raises(DatabaseUnreachable) as caught:
        Queue(f"postgresql://alice:s3cret-pw@127.0.0.1:{port}/queue_db")
    message = str(caught.value)
    assert f"127.0.0.1:{port}/queue_db" in message and "alice" in message
    assert "s3cret-pw" not in message and "s3cret-pw" not in repr(caught.value.__cause__ or "")


def test_a_missing_database_is_refused_by_name(pg_server):
    with pytest.raises(ServerRefused, match="no_such_db"):
        Queue(pg_server.url("no_such_db"))


def test_a_database_with_other_tables_is_fine_but_a_foreign_jobs_table_is_refused_and_untouched(pg_url, pg_server):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE customers (id int)")
    with Queue(pg_url) as q:  # other tables: fine
        q.enqueue("x")
    other = pg_server.create_database(f"foreign_{id(pg_url) % 10**6}")
    with psycopg.connect(other, autocommit=True) as conn:
        conn.execute("CREATE TABLE jobs (id int, what text)")
        conn.execute("INSERT INTO jobs VALUES (1, 'theirs')")
        with pytest.raises(NotALeaselabDatabase, match="jobs"):
            Queue(other)
        assert conn.execute("SELECT * FROM jobs").fetchall() == [(1, "theirs")]
        assert conn.execute("SELECT to_regclass('events')").fetchone()[0] is None


def test_a_newer_schema_is_refused(pg_url):
    Queue(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("COMMENT ON TABLE jobs IS 'leaselab queue, schema 99'")
        conn.execute("COMMENT ON TABLE events IS 'leaselab queue, schema 99'")
    with pytest.raises(SchemaTooNew, match="99"):
        Queue(pg_url)


def test_sixteen_queues_opening_a_new_database_at_once_create_the_schema_once(pg_url):
    assert open_at_once(pg_url, lambda q: q.enqueue("x")) == []
    with Queue(pg_url) as q:
        assert q.stats()["pending"] == 16


# -- durability and backoff --------------------------------------------------------------------


def _synchronous_commit(q: Queue) -> str:
    return q.backend.connection.execute("SHOW synchronous_commit").fetchone()[0]


def test_a_full_queue_waits_for_the_flush_on_enqueue_claim_and_complete_only(pg_url):
    with Queue(pg_url, clock=ManualClock(), durability="full") as q:
        seen = []
        q.enqueue_many(["a", "b"])
        seen.append(("enqueue_many", _synchronous_commit(q)))
        q.enqueue("c")
        seen.append(("enqueue", _synchronous_commit(q)))
        job = q.claim("w")
        seen.append(("claim", _synchronous_commit(q)))
        q.heartbeat(job.id, job.token)
        seen.append(("heartbeat", _synchronous_commit(q)))
        nxt = q.complete_and_claim(job.id, job.token, 1, "w")
        seen.append(("complete_and_claim", _synchronous_commit(q)))
        q.fail(nxt.id, nxt.token)
        seen.append(("fail", _synchronous_commit(q)))
        last = q.claim("w")
        q.complete(last.id, last.token)
        seen.append(("complete", _synchronous_commit(q)))
        q.reap()
        seen.append(("reap", _synchronous_commit(q)))
    assert seen == [
        ("enqueue_many", "on"),
        ("enqueue", "on"),
        ("claim", "on"),
        ("heartbeat", "off"),
        ("complete_and_claim", "on"),
        ("fail", "off"),
        ("complete", "on"),
        ("reap", "off"),
    ]


def test_a_normal_queue_never_waits_for_the_flush(pg_url):
    with Queue(pg_url, clock=ManualClock(), durability="normal") as q:
        q.enqueue("a")
        job = q.claim("w")
        q.complete(job.id, job.token)
        assert _synchronous_commit(q) == "off"


@pytest.mark.parametrize(
    "backoff",
    [
        Backoff(),
        Backoff(base=2, cap=100),
        Backoff(base=0.25, cap=7),
        Backoff(base=0, cap=0),
        Backoff(base=1e-6, cap=1e12),
    ],
)
def test_the_servers_backoff_is_the_very_delay_backoff_computes(pg_url, backoff):
    clock = ManualClock(0.0)  # near zero, so a tiny delay is not lost in the rounding of a large now
    with Queue(pg_url, clock=clock, backoff=backoff) as q:
        job_id = q.enqueue("x", max_attempts=100)
        for attempt in range(1, 61):
            job = q.claim("w")
            q.fail(job.id, job.token)
            assert q.get(job_id).run_at == clock() + backoff.delay(attempt), f"attempt {attempt}"
            clock.advance(q.get(job_id).run_at - clock())


def test_the_servers_jittered_backoff_stays_within_the_jitter_and_varies(pg_url):
    backoff = Backoff(base=1, cap=1000, jitter=0.5)
    clock = ManualClock(0.0)
    with Queue(pg_url, clock=clock, backoff=backoff) as q:
        delays = []
        for _ in range(20):
            job_id = q.enqueue("x")
            job = q.claim("w")
            q.fail(job.id, job.token)
            delays.append(q.get(job_id).run_at - clock())  # the clock stands still: each claim takes the new job
    assert all(1.0 <= d <= 1.5 for d in delays) and len(set(delays)) > 1


def test_a_reap_on_the_server_uses_the_queues_backoff_and_ends_dead_on_the_last_attempt(pg_url):
    clock = ManualClock(0.0)
    with Queue(pg_url, clock=clock, backoff=Backoff(base=3, cap=100)) as q:
        job_id = q.enqueue("x", max_attempts=2)
        q.claim("w", lease=1)
        clock.advance(2)
        assert q.reap() == [job_id]
        assert q.get(job_id).run_at == clock() + 3
        clock.advance(3)
        q.claim("w", lease=1)
        clock.advance(2)
        assert q.reap() == [job_id] and q.get(job_id).status is Status.DEAD
        assert [e.kind for e in q.events(job_id)][-2:] == ["reaped", "dead"]


# -- the command line ----------------------------------------------------------------------------


def _cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "leaselab", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_every_command_takes_a_postgresql_url_and_a_worker_drains_the_queue(pg_url):
    assert _cli("enqueue", '{"seconds": 0}', "--count", "3", "--db", pg_url).stdout.split() == ["1", "2", "3"]
    worker = _cli(
        "worker", "--db", pg_url, "--handler", "leaselab.harness.demo:echo", "--name", "cli-w", "--exit-when-idle"
    )
    assert worker.returncode == 0, worker.stderr
    assert "completed 3" in worker.stdout
    stats = _cli("stats", "--json", env={"LEASELAB_DB": pg_url})  # the URL from the environment
    assert stats.returncode == 0 and '"done": 3' in stats.stdout
    assert "cli-w" in _cli("jobs", "--db", pg_url).stdout
    assert _cli("events", "--db", pg_url, "--job", "2").stdout.count("\n") == 4  # header + 3 events
    assert _cli("reap", "--db", pg_url).stdout.strip() == "reaped 0"


DOCS_URL = "postgresql://app@db.example:5432/jobs"  # docs/postgres.md's example server


def test_the_postgres_docs_commands_work_as_written_against_a_real_server(pg_url):
    """docs/postgres.md's first shell block, line by line, with its example URL pointed at this server
    (after the pip line, which the test environment already ran) and the worker told to stop when the
    queue is empty."""
    docs = (Path(__file__).resolve().parent.parent / "docs" / "postgres.md").read_text(encoding="utf-8")
    # The block for a server of your own (the one before it starts a throw-away server: test_pg_command).
    block = next(b for b in re.findall(r"```bash\n(.*?)```", docs, flags=re.S) if "pip install -e" in b)
    lines = [line for line in block.splitlines() if line.strip()]
    assert lines[0].startswith("pip install -e '.[postgres]'") and DOCS_URL in block
    bin_dir = Path(sys.executable).parent  # where this environment's `leaselab` script is
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = [line.replace(DOCS_URL, pg_url) for line in lines[1:]]
    script = [line.replace(" --name ", " --exit-when-idle --name ") if " worker " in line else line for line in script]
    done = subprocess.run(["bash", "-ec", "\n".join(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "completed 5" in done.stdout and re.search(r"^done\s+5$", done.stdout, flags=re.M), done.stdout
    assert "db.example" not in done.stdout + done.stderr


def test_a_command_against_an_unreachable_server_exits_2_with_one_line_naming_it_without_the_password():
    port = free_port()
    done = _cli("stats", "--db", f"postgresql://bob:hunter2@127.0.0.1:{port}/jobs")
    assert done.returncode == 2
    assert f"127.0.0.1:{port}/jobs" in done.stderr and "hunter2" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_lab_on_a_server_shows_the_server_and_database_but_never_the_password(pg_url, tmp_path, monkeypatch):
    from leaselab.lab import Lab

    monkeypatch.chdir(tmp_path)
    with_password = pg_url.replace("leaselab@", "leaselab:pa55word@")  # local connections are trusted anyway
    lab = Lab(with_password, refresh=None)
    try:
        shown = repr(lab.fleet) + lab.widget.children[0].value  # the title and its tooltip
    finally:
        lab.close()
    assert "pa55word" not in shown and pg_url.rsplit("/", 1)[1] in shown


def test_a_nul_in_a_failure_message_is_kept_visibly_and_a_nul_in_a_worker_name_is_refused_by_name(pg_url):
    with Queue(pg_url, clock=ManualClock()) as q:
        job_id = q.enqueue("a\x00b")  # JSON escapes it: payloads are fine
        assert q.get(job_id).payload == "a\x00b"
        with pytest.raises(ValueError, match="worker contains a NUL"):
            q.claim("w\x00")
        job = q.claim("w")
        assert q.fail(job.id, job.token, "boom\x00tail") is Status.PENDING
        assert q.get(job_id).last_error == "boom\\0tail"


def test_a_server_restart_is_one_transient_error_then_the_queue_carries_on_with_nothing_lost(pg_server):
    from leaselab.harness.pgserver import PgServer

    with PgServer(pg_server.bin_dir) as own:  # its own server: a restart drops every connection to it
        url = own.create_database("restarted")
        with Queue(url, clock=ManualClock()) as q:
            ids = q.enqueue_many(["a", "b"])
            job = q.claim("w")
            q.complete(job.id, job.token, "before")  # acknowledged: it waits for the WAL flush
            own.restart()  # an immediate stop: what was not flushed is gone, as after a crash
            with pytest.raises(DatabaseUnreachable, match=f"127.0.0.1:{own.port}/restarted"):
                q.stats()
            assert q.stats() == {"pending": 1, "running": 0, "done": 1, "dead": 0}
            job = q.claim("w")
            q.complete(job.id, job.token, "after")
            assert [q.get(i).result for i in ids] == ["before", "after"]


RESYNC_STEP_BACK = 0.25  # seconds: half of a slow round trip to a local server, with room


def test_the_server_clock_is_read_once_per_resync_not_once_per_call(pg_url, monkeypatch):
    from leaselab.backends.postgres import backend

    with Queue(pg_url) as q:
        seen = []
        q.tracer = lambda statement, params: seen.append(statement)
        for _ in range(5):
            q.enqueue("x")
        assert seen.count(sql.SERVER_NOW.strip()) <= 1 and seen.count(sql.ENQUEUE.strip()) == 5
        before = q.clock()
        monkeypatch.setattr(backend, "CLOCK_RESYNC", 0.0)  # every call reads the server again
        seen.clear()
        after = q.clock()
        # A reading is placed at the midpoint of its round trip (backend.now), so a resync may step back
        # by up to half a round trip: 0.7 ms was seen on a loaded machine. Not more than that.
        assert seen == [sql.SERVER_NOW.strip()] and before - RESYNC_STEP_BACK <= after < before + 5


def test_the_servers_time_is_carried_on_a_clock_that_counts_a_suspend_of_the_host(pg_url, monkeypatch):
    from leaselab.backends.postgres import backend

    host = ManualClock(start=5_000.0)  # this host's clock.elapsed(), which we suspend by moving it
    monkeypatch.setattr(backend, "elapsed", host)
    with Queue(pg_url) as q:
        read = q.clock()  # read from the server, placed at the round trip's midpoint: now, on ``host``
        seen = []
        q.tracer = lambda statement, params: seen.append(statement)
        host.advance(20.0)  # the host slept 20 s, which a clock counting a suspend counts
        assert q.clock() == pytest.approx(read + 20.0) and seen == []  # carried, not read again


# -- the worker's hot path: one statement, one round trip --------------------------------------


def test_complete_and_claim_is_one_statement_on_a_server(pg_url):
    """Sent as BEGIN, COMPLETE, CLAIM, COMMIT it was four round trips and slower than two calls."""
    with Queue(pg_url, clock=ManualClock()) as q:
        q.enqueue_many(["a", "b"])
        job = q.claim("w")
        seen = []
        q.tracer = lambda statement, params: seen.append(statement)
        nxt = q.complete_and_claim(job.id, job.token, "ok", "w")
        assert seen == [sql.COMPLETE_AND_CLAIM.strip()]
        assert q.get(job.id).status == "done" and q.get(job.id).result == "ok"
        assert (nxt.payload, nxt.status, nxt.worker, nxt.attempts) == ("b", "running", "w", 1)
        assert [e.kind for e in q.events(job.id)] == ["enqueued", "claimed", "completed"]
        assert [e.kind for e in q.events(nxt.id)] == ["enqueued", "claimed"]


def test_a_workers_batches_write_their_own_history_and_every_other_write_still_gets_the_triggers(pg_url):
    """A worker with slots claims, completes and refills in statements that link their events themselves
    (no plpgsql call per row): with the history trigger off, the jobs' whole histories are still written,
    linked and in order. Another program's write, and the one-job statements, still get theirs from it."""
    from tests.support import history

    with Queue(pg_url) as q:
        q.enqueue_many(list(range(8)))
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("ALTER TABLE jobs DISABLE TRIGGER jobs_changed")
        with Queue(pg_url) as q:
            first = q.claim_many(4, "w")
            refused, second = q.complete_many_and_claim([(j.id, j.token, j.payload) for j in first], 4, "w")
            assert refused == [] and len(second) == 4
            assert q.complete_many([(j.id, j.token, j.payload) for j in second]) == []
        admin.execute("ALTER TABLE jobs ENABLE TRIGGER jobs_changed")
        jobs, events, _ = history.load(pg_url)
        assert history.check_links(jobs, events) == history.check_events_agree(jobs, events) == []
        assert [(e["job_id"], e["kind"]) for e in events if e["kind"] != "enqueued"] == (
            [(j.id, "claimed") for j in first]
            + [(j.id, "completed") for j in first]
            + [(j.id, "claimed") for j in second]
            + [(j.id, "completed") for j in second]
        )
        # Another program's write names what it did in last_event and leaves the links alone: the trigger writes it.
        admin.execute(
            "UPDATE jobs SET status = 'dead', last_error = 'by hand', updated_at = 1, last_event = 'failed'"
            " WHERE id = 1"
        )
        with Queue(pg_url) as q:
            assert [e.kind for e in q.events(1)] == ["enqueued", "claimed", "completed", "failed", "dead"]
            q.enqueue_many(["y", "z"])
            y = q.claim("w")  # CLAIM, as the lessons print it, and the one-job statements keep the trigger
            z = q.complete_and_claim(y.id, y.token, None, "w")
            q.complete(z.id, z.token, None)
            assert [[e.kind for e in q.events(j.id)] for j in (y, z)] == [["enqueued", "claimed", "completed"]] * 2
        jobs, events, _ = history.load(pg_url)
        assert history.check_links(jobs, events) == []


def test_workers_draining_with_complete_and_claim_at_once_never_share_a_job(pg_url):
    n, threads = 400, 8
    with Queue(pg_url) as q:
        q.enqueue_many(list(range(n)))
    claimed: list[int] = []
    errors: list[BaseException] = []

    def drain(name: str) -> None:
        try:
            with Queue(pg_url) as q:
                job = q.claim(name)
                while job is not None:
                    claimed.append(job.id)
                    job = q.complete_and_claim(job.id, job.token, job.payload, name)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    workers = [threading.Thread(target=drain, args=(f"w{i}",)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in workers)
    assert sorted(claimed) == list(range(1, n + 1))  # each job claimed exactly once
    with Queue(pg_url) as q:
        assert q.stats()["done"] == n
        assert all(job.attempts == 1 and job.result == job.payload for job in q.jobs(limit=n))


def test_complete_many_is_one_statement_on_a_server_and_a_job_given_twice_is_refused_the_second_time(pg_url):
    with Queue(pg_url, clock=ManualClock()) as q:
        q.enqueue_many(["a", "b"])
        a, b = q.claim_many(2, "w")
        seen = []
        q.tracer = lambda statement, params: seen.append(statement)
        assert q.complete_many([(a.id, a.token, "A"), (b.id, b.token, "B")]) == []
        assert seen == [sql.COMPLETE_MANY.strip()]
        assert [q.get(j.id).result for j in (a, b)] == ["A", "B"]
        q.enqueue("c")
        c = q.claim("w")
        assert q.complete_many([(c.id, c.token, "first"), (c.id, c.token, "second")]) == [c.id]
        assert q.get(c.id).result == "first"
        assert [e.kind for e in q.events(c.id)][-1] == "lease_lost"
    from tests.support import history

    # One completion, one event: the second is no orphan 'completed' event outside the job's linked history.
    jobs, events, _ = history.load(pg_url)
    assert history.check_links(jobs, events) == []
    assert [e["kind"] for e in events if e["job_id"] == c.id].count("completed") == 1


@pytest.mark.parametrize("call", ["complete_many", "heartbeat_many"])
def test_a_nul_in_a_batched_token_is_refused_by_name_and_writes_nothing(pg_url, call):
    with Queue(pg_url, clock=ManualClock()) as q:
        q.enqueue_many(["a", "b"])
        a, b = q.claim_many(2, "w")
        held = [(a.id, a.token), (b.id, "to\x00ken")]
        with pytest.raises(ValueError, match="token contains a NUL"):
            if call == "complete_many":
                q.complete_many([(job_id, token, None) for job_id, token in held])
            else:
                q.heartbeat_many(held)
        assert q.stats()["running"] == 2 and q.get(a.id).lease_until == a.lease_until
        # A NUL inside a result is JSON's \u0000, text like any other: that batch goes through.
        assert q.complete_many([(a.id, a.token, "a\x00b"), (b.id, b.token, "\\\x00")]) == []
        assert [q.get(a.id).result, q.get(b.id).result] == ["a\x00b", "\\\x00"]


def test_complete_many_and_claim_is_one_statement_on_a_server(pg_url):
    with Queue(pg_url, clock=ManualClock()) as q:
        q.enqueue_many(["a", "b", "c", "d"])
        a, b = q.claim_many(2, "w")
        seen = []
        q.tracer = lambda statement, params: seen.append(statement)
        refused, claimed = q.complete_many_and_claim([(a.id, a.token, "A"), (b.id, b.token, "B")], 3, "w")
        assert seen == [sql.COMPLETE_MANY_AND_CLAIM.strip()]
        assert refused == [] and [j.payload for j in claimed] == ["c", "d"]
        assert [q.get(j.id).result for j in (a, b)] == ["A", "B"]


def test_one_completion_and_the_refill_go_as_parameters_not_a_json_array_refused_or_not(pg_url):
    """A one-slot worker's every job: the same fence, the same batch tokens, no jsonb to unpack."""
    with Queue(pg_url, clock=ManualClock()) as q:
        q.enqueue_many(["a", "b", "c"])
        (a,) = q.claim_many(1, "w")
        seen = []
        q.tracer = lambda statement, params: seen.append(statement)
        refused, [b] = q.complete_many_and_claim([(a.id, a.token, "A\x00")], 1, "w", token="t1")
        assert seen == [sql.COMPLETE_ONE_AND_CLAIM.strip()]
        assert refused == [] and b.payload == "b" and b.token == f"t1-{b.id}" and q.held_by("t1") == [b]
        assert q.get(a.id).result == "A\x00"
        refused, [c] = q.complete_many_and_claim([(a.id, a.token, "again, other")], 1, "w")  # fenced off
        assert refused == [a.id] and c.payload == "c" and q.get(a.id).result == "A\x00"
        assert [e.kind for e in q.events(a.id)][-1] == "lease_lost"


# -- every call bounded by the call timeout (issue 19, "must hold") ------------------------------


def test_a_heartbeat_through_a_cut_link_raises_unreachable_within_the_call_timeout_and_the_next_call_reconnects(pg_url):
    from leaselab.harness.proxy import Proxy, server_address, through

    with Queue(pg_url) as direct:
        job_id = direct.enqueue("x")
    with Proxy(server_address(pg_url)) as proxy, Queue(through(pg_url, proxy.port)) as q:
        q.call_timeout = 1.0
        job = q.claim("w", lease=30)
        proxy.partition()
        started = time.monotonic()
        with pytest.raises(DatabaseUnreachable, match=r"no reply within the call timeout, 1s"):
            q.heartbeat(job.id, job.token, lease=30)
        # Cut at the call timeout, not hung until TCP gives up (minutes) or the link comes back.
        assert time.monotonic() - started < 5
        proxy.heal()
        assert q.heartbeat(job.id, job.token, lease=30) > q.clock()  # a new connection, the same claim
        assert q.get(job_id).status is Status.RUNNING and q.get(job_id).token == job.token


def test_a_queue_opened_with_a_call_timeout_sets_its_server_limits_from_its_first_call(pg_url):
    with Queue(pg_url, call_timeout=2.0) as q:
        limits = q.backend.run("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")[0]
        assert limits == ("1500ms", "1500ms")  # half a second before the call timeout, as the setter gives them


def test_the_call_timeout_is_checked_and_its_server_limits_end_a_lock_wait_before_the_client_cuts(pg_url):
    with Queue(pg_url, busy_timeout=30) as q, Queue(pg_url) as other:
        assert q.call_timeout is None
        with pytest.raises(ValueError, match="call_timeout"):
            q.call_timeout = 0
        q.call_timeout = 2.0
        q.enqueue("x")
        job = q.claim("w", lease=30)
        limits = q.backend.run("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")[0]
        assert limits == ("1500ms", "1500ms")  # half a second before the call timeout, below the busy timeout
        conn = q.backend.connection
        with other.backend.transaction(durable=False) as run:
            run("SELECT id FROM jobs WHERE id = %(id)s FOR UPDATE", {"id": job.id})
            with pytest.raises(DatabaseBusy):  # the server gave up waiting for the row lock
                q.heartbeat(job.id, job.token, lease=30)
        assert q.heartbeat(job.id, job.token, lease=30) > q.clock()
        assert q.backend.connection is conn  # ended by the server, not cut by the client: no reconnect
