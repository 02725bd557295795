"""On PostgreSQL, end to end: leaselab's worker beside PgQueuer and Procrastinate, each draining N no-op jobs.

    ./dev bench pg_peers [--jobs 5000] [--repeat 3] [--concurrency 8]

One throw-away server (``leaselab.lessons.pgserver``: ``initdb`` in a temp folder,
``fsync=off``, so every contender's commits cost the same and none waits on a disk),
a fresh database per contender and round. Each queue is filled with N jobs first,
then timed from the start of its worker until the last job is finished:

- leaselab: ``leaselab worker --exit-when-idle`` as a process (its start-up, about
  0.1 s, is inside the time), one job at a time and with ``--concurrency k``;
- Procrastinate: ``app.run_worker(wait=False, concurrency=…)`` in this process, an
  ``async`` no-op task;
- PgQueuer: ``QueueManager.run(mode=drain)`` in this process (psycopg's async driver),
  an ``async`` no-op entrypoint; its batch size is 1 for "one at a time" and k for k.

leaselab writes the handler's result and a history row per transition; Procrastinate
keeps the job row and its events; PgQueuer deletes a finished job and logs it. None
of the three loses an acknowledged job on a worker crash: all three lease (or lock)
what they run. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from progress import step  # noqa: E402

from leaselab import Queue  # noqa: E402
from leaselab.lessons.pgserver import PgServer  # noqa: E402


def leaselab_drain(url: str, jobs: int, slots: int) -> float:
    with Queue(url) as q:
        for start in range(0, jobs, 1000):
            q.enqueue_many([{"n": n} for n in range(start, min(jobs, start + 1000))])
    cmd = [sys.executable, "-m", "leaselab", "worker", "--db", url, "--handler", "leaselab.lessons.demo:echo",
           "--name", "bench", "--exit-when-idle", "--concurrency", str(slots), "--poll", "0.01", "--max-poll", "0.05"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    with Queue(url) as q:
        done = q.stats()["done"]
    assert done == jobs, f"leaselab finished {done} of {jobs}"
    return jobs / seconds


def procrastinate_drain(url: str, jobs: int, slots: int) -> float:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    ran = []

    @app.task(name="noop")
    async def noop(n: int) -> None:
        ran.append(n)

    with app.open():
        app.schema_manager.apply_schema()
        for start in range(0, jobs, 1000):
            noop.batch_defer(*({"n": n} for n in range(start, min(jobs, start + 1000))))
        start = time.perf_counter()
        app.run_worker(wait=False, concurrency=slots, install_signal_handlers=False)
        seconds = time.perf_counter() - start
    assert len(ran) == jobs, f"procrastinate ran {len(ran)} of {jobs}"
    return jobs / seconds


def pgqueuer_drain(url: str, jobs: int, slots: int) -> float:
    import psycopg
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    async def run() -> float:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            driver = PsycopgDriver(conn)
            queries = Queries(driver)
            await queries.install()
            for start in range(0, jobs, 1000):
                n = min(jobs, start + 1000) - start
                await queries.enqueue(["noop"] * n, [b"x"] * n, [0] * n)
            qm = QueueManager(queries)
            ran = []

            @qm.entrypoint("noop")
            async def noop(job) -> None:
                ran.append(job.id)

            start = time.perf_counter()
            await qm.run(mode=QueueExecutionMode.drain, batch_size=slots, dequeue_timeout=timedelta(seconds=1))
            seconds = time.perf_counter() - start
            assert len(ran) == jobs, f"pgqueuer ran {len(ran)} of {jobs}"
            return jobs / seconds
        finally:
            await conn.close()

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args(argv)
    k = args.concurrency
    rows = {
        "leaselab worker, 1 at a time": lambda url: leaselab_drain(url, args.jobs, 1),
        f"leaselab worker, {k} slots": lambda url: leaselab_drain(url, args.jobs, k),
        "Procrastinate, concurrency 1": lambda url: procrastinate_drain(url, args.jobs, 1),
        f"Procrastinate, concurrency {k}": lambda url: procrastinate_drain(url, args.jobs, k),
        "PgQueuer, batch 1": lambda url: pgqueuer_drain(url, args.jobs, 1),
        f"PgQueuer, batch {k}": lambda url: pgqueuer_drain(url, args.jobs, k),
    }
    results: dict[str, list[float]] = {name: [] for name in rows}
    step("starting a throw-away PostgreSQL server")
    with PgServer() as server:
        n = 0
        for r in range(args.repeat):
            for name, run in rows.items():
                n += 1
                step(f"round {r + 1}/{args.repeat}: {name}")
                results[name].append(run(server.create_database(f"bench_{n}")))
    med = {name: statistics.median(v) for name, v in results.items()}
    print(f"{args.jobs} no-op jobs, one worker, {args.repeat} interleaved rounds, PostgreSQL with fsync=off")
    print()
    print(f"| {'contender':<32} | {'jobs/s, median':>14} | {'min-max':>15} |")
    print(f"|{'-' * 34}|{'-' * 16}|{'-' * 17}|")
    for name, rate in med.items():
        span = f"{min(results[name]):,.0f}-{max(results[name]):,.0f}"
        print(f"| {name:<32} | {rate:>14,.0f} | {span:>15} |")
    print()
    ours1, oursk = med["leaselab worker, 1 at a time"], med[f"leaselab worker, {k} slots"]
    for peer in ("Procrastinate", "PgQueuer"):
        one = med["Procrastinate, concurrency 1" if peer == "Procrastinate" else "PgQueuer, batch 1"]
        many = med[f"Procrastinate, concurrency {k}" if peer == "Procrastinate" else f"PgQueuer, batch {k}"]
        print(f"leaselab ÷ {peer}: one at a time {ours1 / one:.2f}, with {k} {oursk / many:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
