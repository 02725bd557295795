"""How long one dashboard refresh takes with 10,000 jobs in the file, against reading the whole table.

    ./dev bench lab_refresh [--jobs 10000] [--repeat 30]

Prints milliseconds per refresh (median of ``--repeat``) for:

- baseline: a bare ``SELECT * FROM jobs`` fetched with sqlite3 (what a naive dashboard would read);
- read_view: what the lab reads each refresh (counts, the newest 200 jobs, the fleet's status);
- Lab.refresh: read_view plus rendering the HTML tables and setting widget values (headless);
- all jobs as Job objects: ``queue.jobs(limit=N)``, for scale.

and the ratios to the baseline. Three real workers are running (idle: every job is
delayed an hour), so the fleet's status reads the running jobs as it would live.
Timings vary on a shared machine; compare the ratios, not the absolute figures.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from leaselab import ManualClock, Queue
from leaselab.lab.dashboard import Lab, read_view
from progress import step


def fill(path: Path, n: int) -> None:
    """A file that looks lived-in: most jobs done, some failed or dead, a few running, the rest pending."""
    clock = ManualClock(time.time() - 3600)
    q = Queue(path, clock=clock, durability="normal")
    done, dead, running = int(n * 0.7), int(n * 0.02), 5
    q.enqueue_many([{"seconds": 1, "i": i} for i in range(done)])
    for _ in range(done):
        job = q.claim("old-worker", lease=30)
        q.complete(job.id, job.token, {"ok": job.id})
    q.enqueue_many([{"fail": True, "i": i} for i in range(dead)], max_attempts=1)
    for _ in range(dead):
        job = q.claim("old-worker", lease=30)
        q.fail(job.id, job.token, "boom")
    q.enqueue_many([{"seconds": 1, "i": i} for i in range(running)])
    for _ in range(running):
        q.claim("old-worker", lease=7200)
    q.enqueue_many([{"seconds": 1, "i": i} for i in range(n - done - dead - running)], delay=2 * 3600)
    q.close()


def timed(fn, repeat: int) -> float:
    fn()  # warm the page cache and statement cache
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--workers", type=int, default=3)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        step(f"filling a file with {args.jobs:,} jobs")
        fill(path, args.jobs)
        conn = sqlite3.connect(path)
        lab = Lab(str(path), refresh=None, lease=30.0)
        try:
            step(f"starting {args.workers} workers")
            for _ in range(args.workers):
                lab.spawn()
            step(f"timing each read {args.repeat} times")
            baseline = timed(lambda: conn.execute("SELECT * FROM jobs").fetchall(), args.repeat)
            view = timed(lambda: read_view(lab.queue, lab.fleet), args.repeat)
            refresh = timed(lab.refresh, args.repeat)
            all_jobs = timed(lambda: lab.queue.jobs(limit=args.jobs), args.repeat)
            counts = lab.queue.stats()
        finally:
            lab.close()
            conn.close()

    print(f"{args.jobs} jobs in the file ({counts}), {args.workers} live workers, median of {args.repeat}")
    print(f"{'what':<44}{'ms':>9}{'x baseline':>12}")
    for what, ms in (
        ("baseline: SELECT * FROM jobs (sqlite3)", baseline),
        ("read_view: counts + newest 200 + fleet", view),
        ("Lab.refresh: read + render + set widgets", refresh),
        ("all jobs as Job objects", all_jobs),
    ):
        print(f"{what:<44}{ms:>9.2f}{ms / baseline:>12.2f}")
    print(f"Lab.refresh at {refresh:.1f} ms is {refresh / 10:.1f}% of a 1 s refresh period")
    return 0


if __name__ == "__main__":
    sys.exit(main())
