"""Chaos: real workers SIGKILLed, SIGSTOPped and resumed while they drain 2,000 jobs; then the history is checked.

A nemesis (after Jepsen's) picks faults at random for ``LEASELAB_CHAOS_SECONDS``
(default 30). Leases are 1 s, pauses last up to 3 s, so a paused worker wakes
up as a zombie whose job was reaped and re-run. On PostgreSQL it also cuts workers
off the server, drops the replies to their statements (the statement ran; the worker
cannot know), and crashes the server itself: a server of the test's own, whose WAL
writer is lazy (``LAZY_WAL_WRITER``), so a crash loses every commit that was not made
durable. The run prints ``chaos seed: N``;
``LEASELAB_CHAOS_SEED=N pytest -m chaos`` replays the same workload and the same
fault schedule (process timing still varies: it is a real machine).
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import sqlite3
import threading
import time

import pytest

import history
from servers import BACKENDS, fresh_database
from leaselab import Queue
from procs import Pool, wait_for

pytestmark = pytest.mark.chaos

WORKERS = 8
JOBS = 2000
LEASE = 1.0
NEMESIS_SECONDS = float(os.environ.get("LEASELAB_CHAOS_SECONDS", "30"))
DRAIN_TIMEOUT = 150.0


@pytest.fixture
def seed() -> int:
    value = int(os.environ.get("LEASELAB_CHAOS_SEED") or secrets.randbelow(2**32))
    print(f"chaos seed: {value}")
    return value


@pytest.fixture(params=BACKENDS)
def target(request, db_path) -> str:
    """As conftest's ``target``, except that the queue's server is the crashable one (conftest)."""
    if request.param == "sqlite":
        return str(db_path)
    return fresh_database(request.getfixturevalue("crashable_server"), "chaos")


@pytest.fixture
def pool(tmp_path, target):
    # Every other worker runs four jobs at once: batched claims, heartbeats and completions
    # must keep every promise the one-job loop keeps, under the same nemesis.
    workers = Pool(target, tmp_path / "logs", LEASE, concurrencies=(1, 4))
    yield workers
    workers.close()


def workload(rng: random.Random, effects: str) -> list[dict]:
    """Jobs as enqueue() keyword arguments: mostly quick ones, some failing, some slow, delayed or urgent."""
    jobs = []
    for _ in range(JOBS):
        payload: dict = {"seconds": rng.choice([0, 0.002, 0.01, 0.03]), "effects": effects}
        kwargs: dict = {"priority": rng.choice([-5, 0, 0, 0, 0, 3, 10])}
        roll = rng.random()
        if roll < 0.10:
            payload["fail"] = 1                      # fails once, then succeeds
        elif roll < 0.15:
            payload["fail"] = True                   # fails every time: must end dead
            kwargs["max_attempts"] = rng.choice([1, 2, 3])
        elif roll < 0.17:
            payload["seconds"] = 1.5                 # outlives the lease: lives on heartbeats
        if rng.random() < 0.2:
            kwargs["delay"] = round(rng.uniform(0.5, 15), 3)
        jobs.append({"payload": payload, **kwargs})
    return jobs


def counts(db: str) -> dict[str, int]:
    if db.startswith(("postgresql://", "postgres://")):
        import psycopg

        with psycopg.connect(db, autocommit=True) as conn:
            return dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
    finally:
        conn.close()


def nemesis(rng: random.Random, pool: Pool, seconds: float, server=None,
            server_lock: threading.Lock | None = None) -> list[str]:
    """Random SIGKILL / SIGSTOP / SIGCONT / SIGTERM, and replacements, for ``seconds``; on a server also
    network cuts and heals, dropped replies, and (given ``server``) crashes of the server, each taken
    under ``server_lock``; returns what it did."""
    done: list[str] = []
    resume_at: dict[str, float] = {}
    heal_at: dict[str, float] = {}
    end = time.monotonic() + seconds
    next_crash = time.monotonic() + rng.uniform(2.0, 5.0)
    while time.monotonic() < end:
        time.sleep(rng.uniform(0.05, 0.4))
        now = time.monotonic()
        # A worker still opening its first connection now waits a fault out (test_transient's
        # start-up tests prove that on its own); here crashes and drops wait for every worker to be
        # past its start, so what they hit is the loop, which is what this run is about.
        booted = all(p.started() for p in pool.live())
        if server is not None and now >= next_crash and booted:
            # Down for less than a lease (recovery itself takes about 0.1 s here): every worker can
            # still find its unseen claim by its token before the reaper gives the job away.
            down_for = rng.uniform(0.0, 0.3)
            with server_lock:
                server.restart(down_for)
            done.append(f"crash server (down {down_for:.2f}s)")
            next_crash = time.monotonic() + rng.uniform(3.0, 6.0)
        if pool.networked and rng.random() < 0.3 and (
                talking := [p for p in sorted(pool.live(), key=lambda p: p.name)
                            if not p.stopped and not p.cut and p.started()]):
            # The statement reaches the server and its outcome stands; the worker only sees a cut.
            victim = rng.choice(talking)
            victim.proxy.drop_next_reply()
            done.append(f"drop reply {victim.name}")
        for p in pool.live():
            if p.stopped and resume_at.get(p.name, 0) <= now:
                p.signal(signal.SIGCONT)
                done.append(f"cont {p.name}")
            if p.cut and heal_at.get(p.name, 0) <= now:
                p.heal()
                done.append(f"heal {p.name}")
        live = sorted(pool.live(), key=lambda p: p.name)
        running = [p for p in live if not p.stopped]
        roll = rng.random()
        if roll < 0.30 and live:
            victim = rng.choice(live)
            victim.signal(signal.SIGKILL)
            done.append(f"kill {victim.name}{' (stopped)' if victim.stopped else ''}")
        elif roll < 0.70 and running:
            victim = rng.choice(running)
            victim.signal(signal.SIGSTOP)
            resume_at[victim.name] = now + rng.uniform(0.3, 3.0)
            done.append(f"stop {victim.name}")
        # Partitions are 8% of the rolls: at 4%, the time the crashes take left some seeds under three.
        elif pool.networked and roll < 0.78 and (reachable := [p for p in running if not p.cut]):
            # The server's own fault: the worker runs on but cannot reach the database.
            victim = rng.choice(reachable)
            victim.partition()
            heal_at[victim.name] = now + rng.uniform(0.3, 3.0)
            done.append(f"partition {victim.name}")
        elif roll < 0.82 and (booted := [p for p in running if p.started()]):
            victim = rng.choice(booted)
            victim.signal(signal.SIGTERM)  # a polite stop: finish the job, then exit
            done.append(f"term {victim.name}")
        while len(pool.live()) < WORKERS:
            done.append(f"spawn {pool.spawn().name}")
        if rng.random() < 0.05 and len(pool.live()) < WORKERS + 3:
            done.append(f"spawn extra {pool.spawn().name}")
    for p in pool.live():
        if p.stopped:
            p.signal(signal.SIGCONT)
            done.append(f"cont {p.name}")
        if p.cut:
            p.heal()
            done.append(f"heal {p.name}")
    return done


def test_no_job_is_lost_and_no_zombie_write_is_accepted_under_random_kills_and_pauses(request, tmp_path, pool, seed):
    db, effects = pool.db, str(tmp_path / "effects.jsonl")
    server = request.getfixturevalue("crashable_server") if pool.networked else None
    # The feeder is not under test: it enqueues between crashes, each batch on a fresh connection,
    # so a crash never leaves it unsure whether a batch went in (a retry would enqueue it twice).
    server_lock = threading.Lock()
    rng = random.Random(seed)
    jobs = workload(rng, effects)
    # A quarter up front, the rest in batches spread over the nemesis, so faults hit a busy queue throughout.
    first, rest = jobs[: JOBS // 4], jobs[JOBS // 4:]
    batches = [rest[i:i + 50] for i in range(0, len(rest), 50)]
    start = time.monotonic()
    due = [start + NEMESIS_SECONDS * 0.8 * i / len(batches) for i in range(len(batches))]

    def add(q: Queue, batch: list[dict]) -> None:
        for kw in batch:
            q.enqueue(**kw)

    with Queue(db) as q:
        add(q, first)

    # The feeder has its own thread and connection. Enqueueing from the nemesis's own loop once
    # deadlocked: a worker paused while holding SQLite's write lock can only be resumed by the
    # nemesis, which sat waiting for that very lock. (SQLite's lock is not a lease: a frozen
    # holder stalls every writer until it runs again.)
    fed: list[BaseException] = []

    def feed() -> None:
        try:
            for when, batch in zip(due, batches):
                time.sleep(max(0.0, when - time.monotonic()))
                with server_lock, Queue(db) as q:
                    add(q, batch)
        except BaseException as exc:  # re-raised in the test's thread below
            fed.append(exc)

    feeder = threading.Thread(target=feed, name="chaos-feeder", daemon=True)
    for _ in range(WORKERS):
        pool.spawn()
    feeder.start()
    actions = nemesis(rng, pool, NEMESIS_SECONDS, server, server_lock)
    feeder.join(timeout=120)
    assert not feeder.is_alive(), "the feeder never finished enqueueing"
    if fed:
        raise fed[0]

    where = f"(chaos seed {seed}; replay with LEASELAB_CHAOS_SEED={seed})"
    drained = wait_for(lambda: (lambda c: c.get("pending", 0) + c.get("running", 0) == 0)(counts(db)),
                       timeout=DRAIN_TIMEOUT, interval=0.5)
    exit_codes = pool.terminate_all()
    logs = {p.name: p.log() for p in pool.all}

    jobs_rows, events, effect_lines = history.load(db, effects)
    facts = history.summary(jobs_rows, events, effect_lines)
    kills = sum(a.startswith("kill") for a in actions)
    stops = sum(a.startswith("stop") for a in actions)
    cuts = sum(a.startswith("partition") for a in actions)
    crashes = sum(a.startswith("crash") for a in actions)
    dropped = sum(p.proxy.replies_dropped for p in pool.all) if pool.networked else 0
    print(f"chaos seed {seed}: {kills} kills, {stops} pauses, {cuts} partitions, {crashes} server crashes, "
          f"{dropped} replies dropped, {len(pool.all)} workers in all; {facts}")

    assert drained, f"queue did not drain within {DRAIN_TIMEOUT}s: {counts(db)} {where}"
    assert len(jobs_rows) == JOBS, f"{len(jobs_rows)} jobs in the file, {JOBS} enqueued {where}"
    # A worker killed between its claim and its handler leaves an attempt that never ran; no other may.
    killed = {p.name for p in pool.all if p.killed}
    violations = history.check_all(jobs_rows, events, effect_lines, lease=LEASE, vanished=killed)
    assert violations == [], f"{len(violations)} violations {where}:\n" + "\n".join(violations[:40])

    # The faults must really have hit, or the checks above proved nothing.
    assert kills >= 5 and stops >= 5, f"nemesis too gentle: {kills} kills, {stops} pauses {where}"
    assert not pool.networked or cuts >= 3, f"nemesis too gentle: {cuts} partitions {where}"
    assert not pool.networked or (crashes >= 3 and dropped >= 10), \
        f"nemesis too gentle: {crashes} server crashes, {dropped} replies dropped {where}"
    assert facts.get("events_reaped", 0) > 0, f"no lease ever expired: {facts} {where}"
    assert facts.get("events_lease_lost", 0) > 0, f"no zombie write was ever refused: {facts} {where}"
    assert facts.get("status_dead", 0) > 0 and facts.get("status_done", 0) > 0, f"{facts} {where}"

    batched = [p.name for p in pool.all if "at once" in p.log()]
    assert batched and len(batched) < len(pool.all), f"the mix of concurrency 1 and 4 did not run {where}"

    # Every worker we did not SIGKILL left cleanly, and no caller ever saw an error escape.
    unclean = {p.name: exit_codes[p.name] for p in pool.all if not p.killed and exit_codes[p.name] != 0}
    assert unclean == {}, f"workers exited badly: {unclean} {where}\n" + "\n".join(
        logs[name][-2000:] for name in unclean)
    for name, text in logs.items():
        assert "Traceback" not in text and "database is locked" not in text, f"{name} log {where}:\n{text[-3000:]}"
