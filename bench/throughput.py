"""Jobs per second for leaselab beside a raw-SQLite baseline and three peers, at matched durability.

    ./dev bench throughput [--jobs 5000] [--repeat 5] [--only leaselab-full,huey] [--data DIR]

Same workload for everyone, one machine, contenders interleaved round by round: enqueue N small JSON jobs one
call at a time, then drain them one job at a time (claim + complete), first in
one process, then in four processes at once. Two durability levels:

leaselab is measured twice: the "worker path" drains as ``Worker`` does (each completion
claims the next job in the same transaction, ``Queue.complete_and_claim``), and "two calls"
runs ``claim`` then ``complete`` as separate transactions. The ratio columns use the worker path.

- NORMAL (``synchronous=NORMAL`` in WAL: survives any process crash, may lose the
  last commits on power loss): leaselab ``durability="normal"``, the raw baseline
  at NORMAL, litequeue (its default).
- FULL (every acknowledged write synced): leaselab's default ``"full"`` (enqueue, claim
  and complete synced: the worker path's completion and next claim share one sync, "two
  calls" pays one for each), the raw baseline at FULL (every
  statement synced), huey's ``SqliteStorage`` and persist-queue's ``SQLiteAckQueue``
  (both leave SQLite's default, FULL).

The raw baseline is the floor of a fenced, at-least-once SQLite queue: a bare table
with the claim index, the single-statement claim and the fenced complete, with no
history, no validation and no Python around it beyond ``execute``. The "fenced floor"
rows run the same statements with 1 KiB pages and each completion fused with the next
claim in one transaction, as leaselab's Worker does: the fastest a fenced at-least-once
drain on this layout can be, and so a bound on what any such queue can reach. The printed
``sync`` column is what each contender's connection actually reports for
``PRAGMA synchronous``. The 4-process drain also counts jobs delivered twice:
a queue whose dequeue is not one atomic statement can hand one job to two processes.
Databases live in ``bench/.data`` (a real disk, not tmpfs) unless ``--data`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from progress import step

HERE = Path(__file__).resolve().parent

# -- the contenders: each is (open(path) -> handle, enqueue(h, n), drain_one(h) -> id or None, sync(h)) --


def leaselab_system(durability: str):
    from leaselab import Queue

    def open_(path: Path):
        return Queue(path / "q.db", durability=durability)

    def enqueue(q, n: int) -> None:
        q.enqueue({"n": n})

    def drain_one(q):
        job = q.claim("bench", lease=300)
        if job is None:
            return None
        q.complete(job.id, job.token)
        return job.id

    def sync(q) -> int:
        return 2 if durability == "full" else q.backend.connection.execute("PRAGMA synchronous").fetchone()[0]

    return open_, enqueue, drain_one, sync


def leaselab_worker_system(durability: str):
    """The drain as leaselab's Worker does it: each completion claims the next job in the same transaction."""
    from leaselab import Queue

    class Handle:
        def __init__(self, path: Path):
            self.q = Queue(path / "q.db", durability=durability)
            self.job, self.started = None, False

    def enqueue(h, n: int) -> None:
        h.q.enqueue({"n": n})

    def drain_one(h):
        if not h.started:
            h.job, h.started = h.q.claim("bench", lease=300), True
        job = h.job
        if job is None:
            return None
        h.job = h.q.complete_and_claim(job.id, job.token, None, worker="bench", lease=300)
        return job.id

    def sync(h) -> int:
        return 2 if durability == "full" else h.q.backend.connection.execute("PRAGMA synchronous").fetchone()[0]

    return Handle, enqueue, drain_one, sync


RAW_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY, payload TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'pending',
    priority INTEGER NOT NULL DEFAULT 0, run_at REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    lease_until REAL, worker TEXT, token TEXT, result TEXT, updated_at REAL);
CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (priority DESC, run_at, id) WHERE status = 'pending';
"""
RAW_ENQUEUE = "INSERT INTO jobs (payload, run_at, updated_at) VALUES (?, ?, ?)"
RAW_CLAIM = """
UPDATE jobs SET status = 'running', attempts = attempts + 1, lease_until = :lease_until,
       worker = :worker, token = :token, updated_at = :now
 WHERE id = (SELECT id FROM jobs WHERE status = 'pending' AND run_at <= :now
              ORDER BY priority DESC, run_at, id LIMIT 1)
RETURNING id, payload, token"""
RAW_COMPLETE = """
UPDATE jobs SET status = 'done', result = :result, lease_until = NULL, updated_at = :now
 WHERE id = :id AND status = 'running' AND token = :token"""


def raw_system(synchronous: str):
    import secrets

    def open_(path: Path):
        conn = sqlite3.connect(path / "raw.db", timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute({"NORMAL": "PRAGMA synchronous = NORMAL", "FULL": "PRAGMA synchronous = FULL"}[synchronous])
        conn.executescript(RAW_SCHEMA)
        return conn

    def enqueue(conn, n: int) -> None:
        now = time.time()
        conn.execute(RAW_ENQUEUE, (json.dumps({"n": n}), now, now))

    def drain_one(conn):
        now = time.time()
        row = conn.execute(
            RAW_CLAIM, {"now": now, "lease_until": now + 300, "worker": "bench", "token": secrets.token_hex(16)}
        ).fetchone()
        if row is None:
            return None
        conn.execute(RAW_COMPLETE, {"id": row[0], "token": row[2], "result": "null", "now": time.time()})
        return row[0]

    def sync(conn) -> int:
        return conn.execute("PRAGMA synchronous").fetchone()[0]

    return open_, enqueue, drain_one, sync


def floor_system(synchronous: str):
    """The least a fenced, at-least-once queue can do per job: the raw statements, fused as leaselab's Worker does.

    A bare table with only the claim index, 1 KiB pages, each completion and the next claim in one
    transaction: no history, no reaper index, no validation. If a peer drains faster than this, no
    at-least-once queue with fencing on this layout can pass it, whatever it keeps besides.
    """
    import secrets

    class Handle:
        def __init__(self, path: Path):
            self.conn = sqlite3.connect(path / "floor.db", timeout=30, isolation_level=None)
            self.conn.execute("PRAGMA page_size = 1024")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute(
                {"NORMAL": "PRAGMA synchronous = NORMAL", "FULL": "PRAGMA synchronous = FULL"}[synchronous]
            )
            self.conn.executescript(RAW_SCHEMA)
            self.held = None  # (id, token) of the job this process holds

    def claim(conn, token: str):
        now = time.time()
        return conn.execute(
            RAW_CLAIM, {"now": now, "lease_until": now + 300, "worker": "bench", "token": token}
        ).fetchone()

    def enqueue(h, n: int) -> None:
        now = time.time()
        h.conn.execute(RAW_ENQUEUE, (json.dumps({"n": n}), now, now))

    def drain_one(h):
        if h.held is None:
            token = secrets.token_hex(16)
            row = claim(h.conn, token)
            if row is None:
                return None
            h.held = (row[0], token)
        job_id, token = h.held
        next_token = secrets.token_hex(16)
        h.conn.execute("BEGIN IMMEDIATE")
        h.conn.execute(RAW_COMPLETE, {"id": job_id, "token": token, "result": "null", "now": time.time()})
        row = claim(h.conn, next_token)
        h.conn.execute("COMMIT")
        h.held = None if row is None else (row[0], next_token)
        return job_id

    def sync(h) -> int:
        return h.conn.execute("PRAGMA synchronous").fetchone()[0]

    return Handle, enqueue, drain_one, sync


def litequeue_system():
    from litequeue import LiteQueue

    def open_(path: Path):
        return LiteQueue(str(path / "lq.db"), timeout=30)

    def enqueue(q, n: int) -> None:
        q.put(json.dumps({"n": n}))

    def drain_one(q):
        message = q.pop()
        if message is None:
            return None
        q.done(message.message_id)
        return json.loads(message.data)["n"]

    def sync(q) -> int:
        return q.conn.execute("PRAGMA synchronous").fetchone()[0]

    return open_, enqueue, drain_one, sync


def huey_system():
    from huey.storage import SqliteStorage

    def open_(path: Path):
        return SqliteStorage(name="bench", filename=str(path / "huey.db"), timeout=30)

    def enqueue(s, n: int) -> None:
        s.enqueue(json.dumps({"n": n}).encode())

    def drain_one(s):
        data = s.dequeue()
        if data is None:
            return None
        return json.loads(bytes(data))["n"]  # huey deletes on dequeue: nothing to acknowledge

    def sync(s) -> int:
        return s.conn.execute("PRAGMA synchronous").fetchone()[0]

    return open_, enqueue, drain_one, sync


def persistqueue_system():
    import persistqueue.serializers.json as pq_json
    from persistqueue import SQLiteAckQueue
    from persistqueue.exceptions import Empty

    def open_(path: Path):
        # auto_resume would put every other process's unacked jobs back: off for a shared file.
        return SQLiteAckQueue(str(path / "pq"), auto_resume=False, multithreading=True, timeout=30, serializer=pq_json)

    def enqueue(q, n: int) -> None:
        q.put({"n": n})

    def drain_one(q):
        try:
            item = q.get(block=False, raw=True)
        except Empty:
            return None
        q.ack(id=item["pqid"])
        return item["data"]["n"]

    def sync(q) -> int:
        return q._putter.execute("PRAGMA synchronous").fetchone()[0]

    return open_, enqueue, drain_one, sync


CONTENDERS: dict[str, tuple[str, str, Callable]] = {
    # key: (level, label, factory)
    "leaselab-normal": ("NORMAL", 'leaselab "normal", worker path', lambda: leaselab_worker_system("normal")),
    "leaselab-normal-calls": ("NORMAL", 'leaselab "normal", two calls', lambda: leaselab_system("normal")),
    "raw-normal": ("NORMAL", "raw SQLite claim+fenced complete", lambda: raw_system("NORMAL")),
    "floor-normal": ("NORMAL", "fenced floor: raw, 1 KiB, fused", lambda: floor_system("NORMAL")),
    "litequeue": ("NORMAL", "litequeue 0.9", litequeue_system),
    "leaselab-full": ("FULL", 'leaselab "full", worker path', lambda: leaselab_worker_system("full")),
    "leaselab-full-calls": ("FULL", 'leaselab "full", two calls', lambda: leaselab_system("full")),
    "raw-full": ("FULL", "raw SQLite claim+fenced complete", lambda: raw_system("FULL")),
    "floor-full": ("FULL", "fenced floor: raw, 1 KiB, fused", lambda: floor_system("FULL")),
    "huey": ("FULL", "huey SqliteStorage", huey_system),
    "persist-queue": ("FULL", "persist-queue SQLiteAckQueue", persistqueue_system),
}


# -- running one contender ------------------------------------------------------------------------


def _child(key: str, path: str, phase: str, numbers: list[int], go, out) -> None:
    open_, enqueue, drain_one, _ = CONTENDERS[key][2]()
    handle = open_(Path(path))
    go.wait()
    got: list = []
    if phase == "enqueue":
        for n in numbers:
            enqueue(handle, n)
    else:
        while (item := drain_one(handle)) is not None:
            got.append(item)
    out.put(got)


def run_phase(key: str, path: Path, phase: str, jobs: int, procs: int) -> tuple[float, list]:
    """Seconds for ``procs`` processes to enqueue ``jobs`` (split evenly) or to drain the queue."""
    ctx = mp.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    chunks = [list(range(i, jobs, procs)) for i in range(procs)]
    children = [ctx.Process(target=_child, args=(key, str(path), phase, chunks[i], go, out)) for i in range(procs)]
    for c in children:
        c.start()
    time.sleep(0.3 + 0.1 * procs)  # every child has opened its connection before the clock starts
    start = time.perf_counter()
    go.set()
    results = [out.get(timeout=600) for _ in children]
    elapsed = time.perf_counter() - start
    for c in children:
        c.join(timeout=60)
        if c.exitcode != 0:
            raise RuntimeError(f"{key} {phase} child exited {c.exitcode}")
    return elapsed, [item for r in results for item in r]


def measure(key: str, data: Path, jobs: int, procs: int) -> dict:
    path = data / f"{key}-{procs}p"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    open_, _, _, sync = CONTENDERS[key][2]()
    handle = open_(path)  # create the schema before the race, as a deployment would
    level = sync(handle)
    enq_s, _ = run_phase(key, path, "enqueue", jobs, procs)
    drain_s, delivered = run_phase(key, path, "drain", jobs, procs)
    shutil.rmtree(path, ignore_errors=True)
    return {
        "enqueue": jobs / enq_s,
        "drain": len(delivered) / drain_s if delivered else 0.0,
        "delivered": len(delivered),
        "duplicates": len(delivered) - len(set(delivered)),
        "sync": level,
    }


def machine() -> str:
    """The CPU, its cores and the Python: the first line of every benchmark's table."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs per run (default 5000)")
    parser.add_argument("--only", default="", help="comma-separated contenders: " + ", ".join(CONTENDERS))
    parser.add_argument("--procs", default="1,4", help="process counts to run (default 1,4)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; the table shows medians (default 5)")
    parser.add_argument("--data", default=str(HERE / ".data"), help="folder for the databases (a real disk)")
    args = parser.parse_args(argv)
    keys = [k for k in CONTENDERS if not args.only or k in args.only.split(",")]
    procs_list = [int(p) for p in args.procs.split(",")]
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)

    print(f"# leaselab throughput, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"# {machine()}, SQLite {sqlite3.sqlite_version}")
    print(
        f"# {args.jobs} jobs per run, {args.repeat} rounds (contenders interleaved, medians shown); "
        f"databases in {data.resolve()}"
    )
    print("# jobs/s; enqueue = one call per job; drain = claim + complete per job (huey: dequeue, which deletes)\n")
    runs: dict[tuple[str, int], list[dict]] = {}
    for round_ in range(args.repeat):
        for key in keys:
            for procs in procs_list:
                step(f"round {round_ + 1} of {args.repeat}: {key}, {procs} process(es)")
                r = measure(key, data, args.jobs, procs)
                runs.setdefault((key, procs), []).append(r)
                print(
                    f"  round {round_ + 1}: {key:<16} {procs}p  enqueue {r['enqueue']:>8.0f}/s  "
                    f"drain {r['drain']:>8.0f}/s",
                    file=sys.stderr,
                    flush=True,
                )

    def med(key: str, procs: int, field: str) -> float:
        return statistics.median(r[field] for r in runs[key, procs])

    def per_round(ours: str, key: str, procs: int, field: str) -> float:
        # Each round ran leaselab and the other back to back, so a round's ratio shares its moment's
        # load; the median of those ratios is steadier on a shared machine than a ratio of medians.
        return statistics.median(a[field] / b[field] for a, b in zip(runs[ours, procs], runs[key, procs], strict=True))

    header = (
        "| level  | contender                        | sync | procs | enqueue/s | drain/s | drain min–max "
        "| leaselab ÷ this: enqueue | drain | delivered twice |"
    )
    print(header)
    print("|" + "|".join("-" * len(c) for c in header.split("|")[1:-1]) + "|")
    for key in keys:
        level, label, _ = CONTENDERS[key]
        ours = "leaselab-normal" if level == "NORMAL" else "leaselab-full"
        for procs in procs_list:
            drains = [r["drain"] for r in runs[key, procs]]
            drain = med(key, procs, "drain")
            mine = (ours, procs) in runs and key != ours
            ratio_e = f"{per_round(ours, key, procs, 'enqueue'):.2f}" if mine else ""
            ratio = f"{per_round(ours, key, procs, 'drain'):.2f}" if mine and drain else ""
            twice = sum(r["duplicates"] for r in runs[key, procs])
            print(
                f"| {level:<6} | {label:<32} | {runs[key, procs][0]['sync']:>4} | {procs:>5} | "
                f"{med(key, procs, 'enqueue'):>9.0f} | {drain:>7.0f} | {f'{min(drains):.0f}–{max(drains):.0f}':>13} "
                f"| {ratio_e:>24} | {ratio:>5} | {twice:>15} |"
            )
    print("\nsync: what the contender's own connection reports for PRAGMA synchronous (1 = NORMAL, 2 = FULL);")
    print("leaselab 'full' syncs enqueue and complete, and lets the claim ride on the next sync.")
    print("leaselab ÷ this: the median over rounds of leaselab's rate divided by this contender's, same round.")
    print("delivered twice: jobs handed to two processes at once, summed over the rounds.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
