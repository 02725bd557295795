"""Where a leaselab claim + complete spends its time: the schema's parts added one at a time.

    ./dev bench breakdown [--jobs 5000] [--repeat 5]

Runs the drain (claim + fenced complete, one job at a time, one process) at
``synchronous=NORMAL`` and ``FULL`` for:

1. the raw baseline of ``throughput.py``: a bare table and the claim index, SQLite's default 4 KiB pages;
2. the same baseline with 1 KiB pages, leaselab's page size for new files;
3. leaselab's ``jobs`` table and ``jobs_claim`` index, leaselab's exact statements via bare ``sqlite3``, 1 KiB pages;
4. plus the reaper's ``jobs_lease`` index;
5. plus the ``events`` table filled by the history triggers, linked per job (the whole schema);
   5b, for comparison: the same history found through an index on ``events(job_id, id)``
   instead (schema version 1's design), measured but not part of the sum;
6. the ``Queue`` API itself, claim() then complete() (validation, tokens, ``Job`` objects;
   at FULL the ``PRAGMA synchronous`` switch between a claim and a completion);
7. the ``Queue`` API as a ``Worker`` drains: ``complete_and_claim``, one transaction per job.

Each step's µs per job is the median of ``--repeat`` runs; the differences say what each part costs.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sqlite3
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import throughput  # the raw baseline's schema and statements
from leaselab import Queue
from leaselab.backends.sqlite import PAGE_SIZE, schema_statements
from leaselab.backends.sqlite import statements as sql
from progress import step

HERE = Path(__file__).resolve().parent


def leaselab_schema(parts: set[str]) -> list[str]:
    keep = []
    for statement in schema_statements():
        code = " ".join(line for line in statement.splitlines() if not line.strip().startswith("--"))
        head = " ".join(code.split()[:6])
        if "TRIGGER" in head and "triggers" not in parts:
            continue
        if "jobs_lease" in head and "lease_index" not in parts:
            continue
        if "ON events" in code.replace("\n", " ") or "TABLE IF NOT EXISTS events" in head:
            if "triggers" not in parts:
                continue
        keep.append(statement)
    if "events_index" in parts:  # version 1's way to find one job's history
        keep.append("CREATE INDEX events_job ON events (job_id, id)")
    return keep


def fresh(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def bare_run(
    path: Path,
    sync: str,
    statements: list[str],
    claim: str,
    complete: str,
    token_col: int,
    insert,
    jobs: int,
    page_size: int = 4096,
) -> float:
    fresh(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size = {page_size:d}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = " + {"NORMAL": "NORMAL", "FULL": "FULL"}[sync])
    conn.create_function("leaselab_backoff", 1, lambda attempts: 1.0)
    for statement in statements:
        conn.execute(statement)
    conn.execute("BEGIN")
    for n in range(jobs):
        insert(conn, n)
    conn.execute("COMMIT")
    start = time.perf_counter()
    for _ in range(jobs):
        now = time.time()
        row = conn.execute(
            claim,
            {
                "now": now,
                "lease_until": now + 300,
                "worker": "bench",
                "token": secrets.token_hex(16),
                "queue": "default",  # leaselab's claim serves one named queue; the raw one ignores it
            },
        ).fetchone()
        conn.execute(complete, {"id": row[0], "token": row[token_col], "result": "null", "now": time.time()}).fetchall()
    elapsed = time.perf_counter() - start
    conn.close()
    fresh(path)
    return elapsed / jobs


def raw_insert(conn, n):
    now = time.time()
    conn.execute(throughput.RAW_ENQUEUE, (json.dumps({"n": n}), now, now))


def leaselab_insert(conn, n):
    now = time.time()
    conn.execute(
        sql.ENQUEUE,
        {
            "payload": json.dumps({"n": n}),
            "priority": 0,
            "run_at": now,
            "max_attempts": 5,
            "timeout": None,
            "beat_timeout": None,
            "queue": "default",
            "key": None,
            "now": now,
        },
    ).fetchall()


def api_run(path: Path, sync: str, jobs: int) -> float:
    fresh(path)
    with Queue(path, durability=sync.lower()) as q:
        q.enqueue_many([{"n": n} for n in range(jobs)])
        start = time.perf_counter()
        for _ in range(jobs):
            job = q.claim("bench", lease=300)
            q.complete(job.id, job.token)
        elapsed = time.perf_counter() - start
    fresh(path)
    return elapsed / jobs


def worker_run(path: Path, sync: str, jobs: int) -> float:
    fresh(path)
    with Queue(path, durability=sync.lower()) as q:
        q.enqueue_many([{"n": n} for n in range(jobs)])
        start = time.perf_counter()
        job = q.claim("bench", lease=300)
        while job is not None:
            job = q.complete_and_claim(job.id, job.token, None, worker="bench", lease=300)
        elapsed = time.perf_counter() - start
    fresh(path)
    return elapsed / jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", default=str(HERE / ".data"))
    args = parser.parse_args(argv)
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    path = data / "breakdown.db"
    raw_schema = [s.strip() for s in throughput.RAW_SCHEMA.split(";") if s.strip()]

    def bare(statements, page_size=PAGE_SIZE, raw=False):
        if raw:
            return lambda s: bare_run(
                path, s, raw_schema, throughput.RAW_CLAIM, throughput.RAW_COMPLETE, 2, raw_insert, args.jobs, page_size
            )
        return lambda s: bare_run(
            path, s, statements, sql.CLAIM, sql.COMPLETE, 9, leaselab_insert, args.jobs, page_size
        )

    steps = [
        ("1 raw baseline (bare table + claim index, 4 KiB pages)", bare(None, 4096, raw=True), True),
        ("2 raw baseline with 1 KiB pages", bare(None, raw=True), True),
        ("3 leaselab jobs table + jobs_claim, bare sqlite3", bare(leaselab_schema(set())), True),
        ("4 + jobs_lease index (the reaper's)", bare(leaselab_schema({"lease_index"})), True),
        ("5 + events and history triggers (full schema)", bare(leaselab_schema({"lease_index", "triggers"})), True),
        (
            "5b   (history found by an index instead of links)",
            bare(leaselab_schema({"lease_index", "triggers", "events_index"})),
            False,
        ),
        ("6 the Queue API, claim() then complete()", lambda s: api_run(path, s, args.jobs), True),
        ("7 the Queue API, complete_and_claim (the Worker)", lambda s: worker_run(path, s, args.jobs), True),
    ]
    print(
        f"# leaselab drain breakdown, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{args.jobs} jobs, median of {args.repeat}; µs per job (claim + complete), one process"
    )
    results: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.repeat):
        for sync in ("NORMAL", "FULL"):
            step(f"round {round_ + 1} of {args.repeat}, synchronous={sync}: {len(steps)} steps")
            for label, run, _ in steps:
                results.setdefault((label, sync), []).append(run(sync))
    print(f"| {'step':<52} | NORMAL µs | + vs prev | FULL µs | + vs prev |")
    print(f"|{'-' * 54}|-----------|-----------|---------|-----------|")
    prev = {}
    for label, _, chained in steps:
        cells = []
        for sync in ("NORMAL", "FULL"):
            us = statistics.median(results[label, sync]) * 1e6
            delta = "" if sync not in prev else f"{us - prev[sync]:+.0f}"
            if chained:
                prev[sync] = us
            cells.append((us, delta))
        print(f"| {label:<52} | {cells[0][0]:>9.0f} | {cells[0][1]:>9} | {cells[1][0]:>7.0f} | {cells[1][1]:>9} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
