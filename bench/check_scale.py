"""Does `leaselab check` stay within time and memory on a big history? And do `events`/`jobs` page?

    ./dev bench check_scale [--jobs 1000000] [--data DIR] [--keep]

Builds a queue file of ``--jobs`` jobs with a realistic mix (85 % done: enqueued, claimed,
completed; 10 % pending and due: enqueued; 5 % dead after two failed attempts: enqueued, claimed,
failed, claimed, failed, dead), written straight into the tables of a schema ``Queue`` made, with the
history's triggers set aside while the rows go in and put back after (a million jobs in well under a
minute). Then, each command in a child process of its own, timed on the wall clock and its peak
resident memory read from ``os.wait4``:

- the floors, measured in the same run on the same file: ``SELECT count(*)`` of both tables (SQLite's
  own walk, no Python), and a Python walk that fetches every row of both tables, the events ordered by
  job as the checker reads them, and does nothing with them;
- the floor under the fast path: the shapes statement (``leaselab.check.shapes.PLAIN``, which judges and
  counts the common histories inside SQLite) run alone through ``sqlite3``, its rows fetched and nothing else;
- ``leaselab check`` (target: under 10 s and 300 MB at a million jobs), its time per job, and its ratio
  to the Python walk; and ``leaselab check --thorough``, which reads every job into Python as check did before
  the fast path, with the ratio of the two measured in the same run (``÷ thorough``);
- ``leaselab events --limit 100`` and ``leaselab jobs --limit 100``: a page, whatever the file's size.

Prints one table on stdout. The file lives in ``bench/.data`` and is deleted unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from leaselab import Queue
from progress import step

HERE = Path(__file__).resolve().parent
T0 = 1_767_225_600.0  # 2026-01-01, the history's first second
CHUNK = 50_000

JOB_INSERT = """
INSERT INTO jobs (id, payload, status, priority, run_at, attempts, max_attempts, lease_until, worker, token,
                  result, last_error, created_at, started_at, finished_at, updated_at, last_event, last_event_id)
VALUES (?, ?, ?, 0, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
EVENT_INSERT = (
    "INSERT INTO events (id, job_id, kind, at, worker, token, attempt, detail, prev) VALUES (?,?,?,?,?,?,?,?,?)"
)
TRIGGERS = "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'jobs'"

# The Python floor: every row of both tables into Python, the events in the order the checker reads them.
WALK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("BEGIN")
n = sum(1 for _ in conn.execute("SELECT id, status, priority, run_at, attempts, max_attempts, lease_until, worker,"
                                " token, last_event_id FROM jobs ORDER BY id"))
n += sum(1 for _ in conn.execute("SELECT id, job_id, kind, at, worker, token, attempt, detail, prev FROM events"
                                 " ORDER BY job_id, id"))
print(n)
"""
# The fast path's own floor: its one statement inside SQLite, with nothing of the checker around it.
SHAPES = """
import sqlite3, sys
from leaselab.check.shapes import PLAIN_FILE
conn = sqlite3.connect(sys.argv[1])
print(len(conn.execute(PLAIN_FILE, {"idle": False, "now": 0.0}).fetchall()))
"""
COUNT = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
print(conn.execute("SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM events)").fetchone()[0])
"""


def kind_of(job: int) -> str:
    """85 done, 10 pending, 5 dead in every hundred, spread through the ids."""
    r = job % 100
    return "pending" if r < 10 else "dead" if r < 15 else "done"


def rows(n: int) -> Iterator[tuple[list[tuple], list[tuple]]]:
    """The jobs and their events, CHUNK jobs at a time: every enqueue first (event id = job id), then
    each job's later events in job order, linked through prev as the triggers link them."""
    next_event = n + 1
    for start in range(1, n + 1, CHUNK):
        jobs, events = [], []
        for job in range(start, min(n + 1, start + CHUNK)):
            at = T0 + job * 1e-3
            events.append((job, job, "enqueued", at, None, None, 0, None, None))
            kind = kind_of(job)
            worker = f"w{job % 4}"
            prev = job
            if kind == "pending":
                jobs.append(
                    (job, f'{{"n": {job}}}', "pending", at, 0, 5, None, None, None, None, at, None, None, at,
                     "enqueued", job)
                )  # fmt: skip
                continue
            attempts = 1 if kind == "done" else 2
            token = ""
            for attempt in range(1, attempts + 1):
                token = f"{job:030x}{attempt:02x}"
                claimed = at + 1000 + attempt
                events.append((next_event, job, "claimed", claimed, worker, token, attempt, None, prev))
                prev, next_event = next_event, next_event + 1
                end = "completed" if kind == "done" else "failed"
                events.append((next_event, job, end, claimed + 0.5, worker, token, attempt,
                               "boom" if end == "failed" else None, prev))  # fmt: skip
                prev, next_event = next_event, next_event + 1
            finished = at + 1000 + attempts + 0.5
            if kind == "dead":
                events.append((next_event, job, "dead", finished, worker, token, attempts, "boom", prev))
                prev, next_event = next_event, next_event + 1
            jobs.append(
                (job, f'{{"n": {job}}}', kind, at, attempts, 2 if kind == "dead" else 5, worker, token,
                 '{"ok": true}' if kind == "done" else None, "boom" if kind == "dead" else None,
                 at, finished - 0.5, finished, finished, "completed" if kind == "done" else "dead", prev)
            )  # fmt: skip
        yield jobs, events


def build(path: Path, n: int) -> float:
    """Make the file; the seconds it took."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    started = time.monotonic()
    Queue(path).close()  # leaselab's own schema, indexes and statistics
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    triggers = conn.execute(TRIGGERS).fetchall()
    conn.execute("BEGIN")
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER {name}")  # a bench file's own names: none is a value from outside
    for jobs, events in rows(n):
        conn.executemany(JOB_INSERT, jobs)
        conn.executemany(EVENT_INSERT, events)
    for _, sql in triggers:
        conn.execute(sql)
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.monotonic() - started


def child(argv: list[str]) -> tuple[float, float, float, str]:
    """Run ``argv``; its wall seconds, its CPU seconds (user and system), its peak resident MB, and the first
    line it printed."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    lines = proc.stdout.read().splitlines()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    cpu = usage.ru_utime + usage.ru_stime
    return seconds, cpu, usage.ru_maxrss / 1024, (lines[0] if lines else "") + f" (exit {proc.returncode})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--data", type=Path, default=HERE / ".data")
    parser.add_argument("--keep", action="store_true", help="keep the file afterwards")
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    path = args.data / f"check-{args.jobs}.db"
    if args.build_only:
        print(f"{build(path, args.jobs):.1f}")
        return
    py = sys.executable
    step(f"building {args.jobs:,} jobs into {path}")
    # In a child: a child forked from a parent that had built the file would start at the parent's size,
    # and its peak resident memory with it.
    built = float(subprocess.check_output([py, __file__, "--jobs", str(args.jobs), "--data", str(args.data),
                                           "--build-only"], text=True))  # fmt: skip
    cases = [
        ("floor: SELECT count(*) of both tables", [py, "-c", COUNT, str(path)]),
        ("floor: Python walk of every row", [py, "-c", WALK, str(path)]),
        ("floor: the shapes statement alone", [py, "-c", SHAPES, str(path)]),
        ("leaselab check", [py, "-m", "leaselab", "check", "--db", str(path)]),
        ("leaselab check --thorough", [py, "-m", "leaselab", "check", "--db", str(path), "--thorough"]),
        ("leaselab events --limit 100", [py, "-m", "leaselab", "events", "--db", str(path), "--limit", "100"]),
        ("leaselab jobs --limit 100", [py, "-m", "leaselab", "jobs", "--db", str(path), "--limit", "100"]),
        ("python -c pass (start-up)", [py, "-c", "pass"]),
    ]
    results = {}
    for name, argv in cases:
        step(name)
        results[name] = child(argv)
    walk = results["floor: Python walk of every row"][0]
    thorough = results["leaselab check --thorough"][0]
    print(f"\n{args.jobs:,} jobs, file {path.stat().st_size / 2**20:,.0f} MB, built in {built:.1f} s\n")
    print(
        f"| {'command':<40} | {'seconds':>8} | {'CPU s':>6} | {'µs/job':>7} | {'÷ walk':>6} | {'÷ thorough':>10} | "
        f"{'peak MB':>7} | first line"
    )
    print(f"|{'-' * 42}|{'-' * 10}|{'-' * 8}|{'-' * 9}|{'-' * 8}|{'-' * 12}|{'-' * 9}|---")
    for name, (seconds, cpu, mb, first) in results.items():
        print(
            f"| {name:<40} | {seconds:8.2f} | {cpu:6.2f} | {seconds / args.jobs * 1e6:7.2f} | {seconds / walk:6.2f} | "
            f"{seconds / thorough:10.2f} | {mb:7.0f} | {first[:70]}"
        )
    fast = results["leaselab check"]
    print(
        f"\ncheck ÷ check --thorough: {fast[0] / thorough:.2f} (wall), "
        f"{fast[1] / results['leaselab check --thorough'][1]:.2f} (CPU); check's peak {fast[2]:.0f} MB"
    )
    if not args.keep:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
