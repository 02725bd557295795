"""Where a one-process drain's time goes on PostgreSQL: the client's CPU, the server's CPU, and the wait.

    ./dev bench postgres_cpu [--jobs 4000] [--repeat 3] [--slots 8] [--only leaselab-worker,pgqueuer]

One throw-away server with fsync on (as ``bench/postgres.py``), one client process: this one. For
each contender of ``bench/postgres.py`` k jobs at a time, a fresh database, its jobs enqueued, then
its drain run in this process and timed, contenders interleaved round by round. Per job:

- wall: the drain's elapsed time;
- client: this process's CPU (user + system, all its threads: ``getrusage``);
- server: the CPU of the server's processes (the postmaster and every child it started, with the
  children that ended and were reaped: utime, stime, cutime, cstime from ``/proc``);
- wait: wall minus both, the time in which neither side ran for the drain (the round trips' wake-ups,
  the flush when it does not overlap with CPU); negative when the two sides ran at once.

In one process a batch is one round trip, so client, server and wait add up: the row shows which
part a faster drain must cut. One more row, ``two-loops``, drains with two ``Worker`` objects of
k/2 slots each on their own connections in this process, so one batch's server work could overlap
the other's client work. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import queue
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import psycopg  # noqa: E402

import postgres as pg  # noqa: E402  (the contenders)
import throughput  # noqa: E402  (the machine line)
from leaselab import Queue, Worker  # noqa: E402
from leaselab.harness.pgserver import PgServer  # noqa: E402
from progress import step  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
DEFAULT = "leaselab-hand,leaselab-hand-threads,leaselab-worker,two-loops,pgqueuer"


def two_loops(url: str, slots: int, ready, go) -> list:
    """Two Workers of slots // 2 on two connections, run side by side in this process."""
    got: list = []
    queues = [Queue(url, durability="full", call_timeout=27) for _ in range(2)]  # below the workers' lease (30 s)
    try:
        workers = [
            Worker(
                q,
                lambda job: got.append(job.payload),
                name=f"bench-{os.getpid()}-{i}",
                exit_when_idle=True,
                concurrency=max(1, slots // 2),
                poll=0.01,
                max_poll=0.05,
                log=lambda line: None,
            )
            for i, q in enumerate(queues)
        ]
        ready.put(os.getpid())  # set up: tell the caller, then wait for the start, as each contender does
        go.wait()
        threads = [threading.Thread(target=worker.run) for worker in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for q in queues:
            q.close()
    return got


CONTENDERS = {key: row[:4] for key, row in pg.CONTENDERS.items()}  # name, prepare, enqueue, drain
CONTENDERS["two-loops"] = (
    "two `Worker`s of k/2 slots, one process",
    pg.leaselab_prepare,
    pg.leaselab_enqueue,
    two_loops,
)


def server_seconds(postmaster: int) -> float:
    """CPU seconds of the postmaster and its children, the ended ones included (they are reaped by it)."""
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked: the postmaster's cutime has it now, or soon
            continue
        if int(entry.name) == postmaster or int(fields[1]) == postmaster:
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / TICKS


class _Started:
    """The drains' start signal, already given: this script times them itself."""

    def wait(self) -> None:
        return None


def measure(server: PgServer, postmaster: int, key: str, jobs: int, slots: int, n: int) -> dict:
    _, prepare, enqueue, drain = CONTENDERS[key]
    url = server.create_database(f"c{n}_{key.replace('-', '_')}")
    prepare(url)
    enqueue(url, list(range(jobs)), queue.SimpleQueue(), _Started())
    time.sleep(0.5)  # the enqueue's connection gone, the server quiet
    s0, r0, t0 = server_seconds(postmaster), resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    ran = drain(url, slots, queue.SimpleQueue(), _Started())
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(0.2)  # the drain's backends reaped, so the postmaster's cutime holds them
    s1 = server_seconds(postmaster)
    if sorted(set(ran)) != list(range(jobs)):
        raise RuntimeError(f"{key}: {len(set(ran))} of {jobs} jobs ran")
    client = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    wall, srv = t1 - t0, s1 - s0
    per_job = 1e6 / jobs
    return {
        "rate": jobs / wall,
        "wall": wall * per_job,
        "client": client * per_job,
        "server": srv * per_job,
        "wait": (wall - client - srv) * per_job,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=4000, help="jobs per run (default 4000)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the table shows medians (default 3)")
    ap.add_argument("--slots", type=int, default=8, help="jobs at a time (default 8)")
    ap.add_argument(
        "--only",
        default=DEFAULT,
        help=f"comma-separated contenders (default {DEFAULT}); any of " + ", ".join(CONTENDERS),
    )
    args = ap.parse_args(argv)
    keys = args.only.split(",")
    unknown = [k for k in keys if k not in CONTENDERS]
    if unknown:
        ap.error(f"unknown contender(s): {', '.join(unknown)}")
    step("starting a throw-away PostgreSQL server with fsync on")
    runs: dict[str, list[dict]] = {k: [] for k in keys}
    with PgServer(fsync=True) as server:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
        postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
        n = 0
        for round_ in range(args.repeat):
            for key in keys:
                n += 1
                step(f"round {round_ + 1} of {args.repeat}: {key}, {args.slots} at a time")
                runs[key].append(measure(server, postmaster, key, args.jobs, args.slots, n))

    print(
        f"# where a one-process drain's time goes on PostgreSQL, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(
        f"# {throughput.machine()}, PostgreSQL {version} (fsync on, synchronous_commit on), "
        f"psycopg {psycopg.__version__}"
    )
    print(
        f"# {args.jobs} jobs per run, {args.slots} at a time, one process, "
        f"{args.repeat} round{'s' if args.repeat != 1 else ''} (contenders interleaved, medians; µs per job)\n"
    )
    print("| contender | jobs/s | wall | client CPU | server CPU | wait |")
    print("|---|---|---|---|---|---|")
    for key in keys:
        cells = [f"{statistics.median(r['rate'] for r in runs[key]):,.0f}"]
        cells += [f"{statistics.median(r[f] for r in runs[key]):.0f}" for f in ("wall", "client", "server", "wait")]
        print(f"| {CONTENDERS[key][0]} | " + " | ".join(cells) + " |")
    print(
        "\nwall = client CPU + server CPU + wait. With one loop a batch's round trip is serial, so a faster\n"
        "drain must take its time from one of the three; two loops may overlap (a negative wait)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
