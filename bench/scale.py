"""Does leaselab stay flat as the file grows? Claim time at 1,000 vs 1,000,000 pending, reaping, worker start-up.

    ./dev bench scale [--big 1000000] [--small 1000] [--reap 100000] [--data DIR]

Prints one table:

- claim time (median of 2,000 claims) with ``--small`` and with ``--big`` runnable jobs
  pending, and their ratio (target: big <= 1.5 x small, which the partial index
  ``jobs_claim`` should give); plus the case the index alone cannot help: the big file
  with a tenth of its jobs delayed into the future at the top priority. With the
  statistics leaselab writes into a new file SQLite skip-scans past them; the same
  file with the statistics deleted (as files of schema version 1 had none) shows the
  walk over every delayed job that they prevent;
- reaping ``--reap`` expired leases in one call;
- a worker process (``python -m leaselab worker``): time from spawn to its first
  claimed job (target well under 0.5 s; the bare interpreter's start-up is printed
  beside it) and its resident memory from ``/proc/PID/status`` (target < 40 MB).

Filling the big file takes a minute or two. Databases live in ``bench/.data``.
"""

from __future__ import annotations

import argparse
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from leaselab import ManualClock, Queue
from progress import step

HERE = Path(__file__).resolve().parent
CLAIMS = 2000


def fill(q: Queue, n: int, chunk: int = 50_000, **kwargs) -> None:
    for start in range(0, n, chunk):
        q.enqueue_many([{"n": i} for i in range(start, min(n, start + chunk))], **kwargs)


# Untimed: puts the claimed job back, so the pending count stays exactly what the case says.
PUT_BACK = (
    "UPDATE jobs SET status = 'pending', attempts = attempts - 1, last_event = 'reaped', lease_until = NULL"
    " WHERE id = ?"
)  # the attempt is given back too: a pending job must have one left (schema 3)


def claim_times(q: Queue, count: int = CLAIMS) -> list[float]:
    times = []
    for _ in range(count):
        t = time.perf_counter()
        job = q.claim("bench", lease=600)
        times.append(time.perf_counter() - t)
        q.backend.connection.execute(PUT_BACK, (job.id,))
    return times


def claim_case(data: Path, pending: int, delayed_top: int = 0, statistics_: bool = True) -> float:
    """Median seconds per claim with ``pending`` runnable jobs (and ``delayed_top`` future jobs above them).

    ``statistics_=False`` deletes the planner statistics leaselab writes when it makes the schema.
    """
    path = data / f"claim-{pending}-{delayed_top}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with Queue(path, durability="normal") as q:
        fill(q, pending, priority=0)
        if delayed_top:
            fill(q, delayed_top, priority=10, delay=86_400)
        q.backend.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        if not statistics_:
            q.backend.connection.execute("DELETE FROM sqlite_stat1")
            q.backend.connection.execute("ANALYZE sqlite_schema")  # the connection forgets them too
        claim_times(q, 200)  # warm the page cache the same way for every size
        median = statistics.median(claim_times(q))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return median


def claim_plan(data: Path) -> str:
    from leaselab.backends.sqlite import statements as sql

    path = data / "plan.db"
    with Queue(path) as q:
        rows = q.backend.connection.execute(
            "EXPLAIN QUERY PLAN " + sql.CLAIM,
            {"now": 0, "lease_until": 1, "worker": "w", "token": "t", "queue": "default"},
        ).fetchall()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return "; ".join(r[-1] for r in rows)


def reap_case(data: Path, n: int) -> tuple[float, float, int]:
    """Seconds to reap ``n`` expired leases in one call, and to reap when none has expired."""
    path = data / "reap.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    clock = ManualClock(time.time())
    with Queue(path, clock=clock, durability="normal") as q:
        fill(q, n)
        for _ in range(n):
            q.claim("doomed", lease=30)
        t = time.perf_counter()
        assert q.reap() == []
        idle = time.perf_counter() - t
        clock.advance(31)
        t = time.perf_counter()
        moved = len(q.reap())
        busy = time.perf_counter() - t
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return busy, idle, moved


def rss_kb(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1])
    return out


def worker_case(data: Path, runs: int = 7) -> tuple[float, float, dict[str, int]]:
    """Median seconds from spawn to first claim, bare interpreter start-up, and memory after the first job."""
    starts, bare = [], []
    memory: dict[str, int] = {}
    for i in range(runs):
        path = data / f"worker-{i}.db"
        with Queue(path) as q:
            job_id = q.enqueue({"seconds": 0})
        t0 = time.time()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "leaselab",
                "worker",
                "--db",
                str(path),
                "--handler",
                "leaselab.harness.demo:task",
                "--name",
                "starter",
                "--lease",
                "30",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with Queue(path) as q:
                deadline = time.monotonic() + 30
                while q.get(job_id).status.value != "done" and time.monotonic() < deadline:
                    time.sleep(0.01)
                job = q.get(job_id)
            starts.append(job.started_at - t0)
            time.sleep(0.3)  # idle-polling, as it would sit between jobs
            memory = rss_kb(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - t)
    return statistics.median(starts), statistics.median(bare), memory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--reap", type=int, default=100_000)
    parser.add_argument("--data", default=str(HERE / ".data"), help="folder for the databases (a real disk)")
    args = parser.parse_args(argv)
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    random.seed(0)

    print(f"# leaselab scale, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; databases in {data.resolve()}")
    print(f"# claim plan: {claim_plan(data)}\n")
    step(f"claim time with {args.small:,} pending")
    small = claim_case(data, args.small)
    step(f"claim time with {args.big:,} pending (filling the file first)")
    big = claim_case(data, args.big)
    step(f"claim time with {args.big:,} pending and {args.big // 10:,} delayed at top priority")
    skewed = claim_case(data, args.big, delayed_top=args.big // 10)
    step("the same without leaselab's planner statistics")
    skewed_bare = claim_case(data, args.big, delayed_top=args.big // 10, statistics_=False)
    step(f"reaping {args.reap:,} expired leases")
    busy, idle, moved = reap_case(data, args.reap)
    step("worker processes: spawn to first claimed job, and memory")
    start, bare, memory = worker_case(data)
    step("done")

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    rows = [
        (f"claim, {args.small:,} pending", f"{small * 1e6:.0f} µs", ""),
        (
            f"claim, {args.big:,} pending",
            f"{big * 1e6:.0f} µs",
            f"{big / small:.2f}x the small file; target <= 1.5x: {verdict(big / small <= 1.5)}",
        ),
        (
            f"claim, {args.big:,} pending + {args.big // 10:,} delayed at top priority",
            f"{skewed * 1e6:.0f} µs",
            f"{skewed / small:.2f}x: SQLite skip-scans the index by priority (no target)",
        ),
        (
            "  the same without leaselab's planner statistics",
            f"{skewed_bare * 1e6:.0f} µs",
            f"{skewed_bare / small:.1f}x: the claim steps over every not-yet-runnable job above it",
        ),
        (f"reap {moved:,} expired leases (one call)", f"{busy:.2f} s", f"{moved / busy:,.0f} jobs/s"),
        (f"reap with {moved:,} running, none expired", f"{idle * 1e3:.2f} ms", "the lease index: no scan"),
        (
            "worker: spawn to first claimed job",
            f"{start * 1e3:.0f} ms",
            f"bare `python -c pass` {bare * 1e3:.0f} ms; target well under 500 ms: {verdict(start < 0.5)}",
        ),
        (
            "worker: resident memory (VmRSS / peak VmHWM)",
            f"{memory.get('VmRSS', 0) / 1024:.1f} / {memory.get('VmHWM', 0) / 1024:.1f} MB",
            f"target < 40 MB: {verdict(memory.get('VmHWM', 10**9) < 40 * 1024)}",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"| {'measure':<{width}} | {'result':>14} | note |")
    print(f"|{'-' * (width + 2)}|{'-' * 16}|------|")
    for what, result, note in rows:
        print(f"| {what:<{width}} | {result:>14} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
