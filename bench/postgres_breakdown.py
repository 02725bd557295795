"""Where a job's time goes on PostgreSQL: the drain and the enqueue taken apart, one layer at a time.

    ./dev bench postgres_breakdown [--jobs 2000] [--repeat 3] [--slots 8] [--fsync off]

One throw-away server with fsync on (as ``bench/postgres.py``), one process, a fresh database
per row and round, rows interleaved round by round. Each row adds one layer to the one above:

drain (claim + complete, one job at a time):
- raw fused: the bare table and the fused statement of ``postgres.py`` (the floor);
- leaselab's COMPLETE_AND_CLAIM sent by hand: leaselab's schema (history triggers, two partial
  indexes, the CHECKs), its statement, psycopg with nothing around it;
- ``Queue.complete_and_claim`` in a loop: the queue's own Python (checks, JSON, tokens, Job rows);
- ``Queue.complete_many_and_claim`` with one job: the statement the ``Worker`` sends (a JSON
  array of completions, a batch claim), the same Python;
- ``Worker``, one slot: the loop's own bookkeeping (leases, pulse, outcome) on top.

drain, k jobs at a time (``--slots k``), the same layers for a worker with k slots:
- raw fused, k at a time: the bare table, the k completions and the next k claims in one
  statement (``postgres.py``'s floor for k slots);
- leaselab's COMPLETE_MANY_AND_CLAIM sent by hand: leaselab's schema and its batch statement,
  which writes its own history rows (no trigger call per row), psycopg with nothing around it;
- ``Queue.complete_many_and_claim`` with k jobs in a loop: the queue's Python per batch;
- ``Worker`` with k slots: the handlers on k threads, the leases, the pulse, the outcomes.

enqueue (one call per job): a raw INSERT; leaselab's ENQUEUE by hand with its triggers off, then
with the history trigger, then with both (history and the notification check); ``Queue.enqueue``.

Per row: jobs/s, the ratio to the row's floor in the same round, and WAL per job from
``pg_stat_wal`` (records, bytes, flushes: ``wal_sync``), read before and after the timed part.
With ``--fsync off`` no flush costs
anything (``pg_stat_wal`` still counts the flushes asked for), so what each layer costs the CPU and
the round trip shows; with fsync on, each row's flush is most of its time. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import psycopg  # noqa: E402

import postgres as pg  # noqa: E402  (the raw floor's statements)
import throughput  # noqa: E402  (the machine line)
from leaselab import Queue, Worker  # noqa: E402
from leaselab.backends.postgres import statements as sql  # noqa: E402
from leaselab.harness.pgserver import PgServer  # noqa: E402
from progress import step  # noqa: E402

WAL = "SELECT wal_records, wal_bytes, wal_sync FROM pg_stat_wal"


def _wal(url: str) -> tuple[int, int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return tuple(int(v) for v in conn.execute(WAL).fetchone())


def _leaselab_db(url: str, jobs: int) -> None:
    with Queue(url) as q:
        for start in range(0, jobs, 500):
            q.enqueue_many(list(range(start, min(jobs, start + 500))))


def _raw_db(url: str, jobs: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(pg.RAW_SCHEMA)
        with conn.transaction():
            for n in range(jobs):
                conn.execute(pg.RAW_ENQUEUE, {"payload": str(n), "now": time.time()})


# -- drains: set up (url, jobs), then the timed part (url) -> jobs run ------------------------------


def raw_fused(url: str) -> None:
    pg.raw_fused_drain(url, 1, _NoWait(), _NoWait())


def leaselab_by_hand(url: str) -> None:
    pg.leaselab_by_hand_drain(url, 1, _NoWait(), _NoWait())


def queue_calls(url: str) -> None:
    with Queue(url, durability="full") as q:
        job = q.claim("w")
        while job is not None:
            job = q.complete_and_claim(job.id, job.token, None, "w")


def queue_batch_of_one(url: str) -> None:
    with Queue(url, durability="full") as q:
        jobs = q.claim_many(1, "w")
        while jobs:
            _, jobs = q.complete_many_and_claim([(jobs[0].id, jobs[0].token, None)], 1, "w")


def worker(url: str) -> None:
    with Queue(url, durability="full", call_timeout=27) as q:  # below the worker's lease (30 s)
        Worker(q, lambda job: None, name="w", exit_when_idle=True, poll=0.01, max_poll=0.05, log=None).run()


def raw_fused_k(url: str, k: int) -> None:
    pg.raw_fused_batch_drain(url, k, _NoWait(), _NoWait())


def leaselab_by_hand_k(url: str, k: int) -> None:
    pg.leaselab_by_hand_drain(url, k, _NoWait(), _NoWait())


def queue_calls_k(url: str, k: int) -> None:
    with Queue(url, durability="full") as q:
        jobs = q.claim_many(k, "w")
        while jobs:
            _, jobs = q.complete_many_and_claim([(job.id, job.token, None) for job in jobs], k, "w")


def worker_k(url: str, k: int) -> None:
    with Queue(url, durability="full", call_timeout=27) as q:  # below the worker's lease (30 s)
        Worker(
            q, lambda job: None, name="w", exit_when_idle=True, poll=0.01, max_poll=0.05, log=None, concurrency=k
        ).run()


class _NoWait:
    def put(self, _: object) -> None:
        pass

    def wait(self) -> None:
        pass


DRAINS: dict[str, tuple[Callable[[str, int], None], Callable[[str], None]]] = {
    "raw fused statement, bare table (the floor)": (_raw_db, raw_fused),
    "leaselab's COMPLETE_AND_CLAIM by hand": (_leaselab_db, leaselab_by_hand),
    "Queue.complete_and_claim in a loop": (_leaselab_db, queue_calls),
    "Queue.complete_many_and_claim, 1 job": (_leaselab_db, queue_batch_of_one),
    "Worker, 1 slot": (_leaselab_db, worker),
}

# The same layers k at a time: the timed part takes (url, k).
DRAINS_K: dict[str, tuple[Callable[[str, int], None], Callable[[str, int], None]]] = {
    "raw fused, k at a time, bare table (the floor)": (_raw_db, raw_fused_k),
    "leaselab's COMPLETE_MANY_AND_CLAIM by hand": (_leaselab_db, leaselab_by_hand_k),
    "Queue.complete_many_and_claim, k jobs": (_leaselab_db, queue_calls_k),
    "Worker, k slots": (_leaselab_db, worker_k),
}


# -- enqueues: set up (url), then the timed part (url, jobs) --------------------------------------


def _raw_schema(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(pg.RAW_SCHEMA)


def _leaselab_schema(*disabled: str) -> Callable[[str], None]:
    def prepare(url: str) -> None:
        Queue(url).close()
        with psycopg.connect(url, autocommit=True) as conn:
            for trigger in disabled:
                conn.execute(f"ALTER TABLE jobs DISABLE TRIGGER {trigger}")  # fixed names, this script's own

    return prepare


def raw_insert(url: str, jobs: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for n in range(jobs):
            conn.execute(pg.RAW_ENQUEUE, {"payload": str(n), "now": time.time()})


def enqueue_by_hand(url: str, jobs: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for n in range(jobs):
            now = time.time()
            conn.execute(
                sql.ENQUEUE,
                {"payload": str(n), "priority": 0, "run_at": now, "max_attempts": 5, "now": now}
                | {"timeout": None, "beat_timeout": None, "queue": "default", "key": None},
            ).fetchone()


def queue_enqueue(url: str, jobs: int) -> None:
    with Queue(url, durability="full") as q:
        for n in range(jobs):
            q.enqueue(n)


ENQUEUES: dict[str, tuple[Callable[[str], None], Callable[[str, int], None]]] = {
    "raw INSERT, bare table (the floor)": (_raw_schema, raw_insert),
    "leaselab's ENQUEUE by hand, no triggers": (_leaselab_schema("jobs_enqueued", "jobs_notify"), enqueue_by_hand),
    "… with the history trigger": (_leaselab_schema("jobs_notify"), enqueue_by_hand),
    "… and the notification check": (_leaselab_schema(), enqueue_by_hand),
    "Queue.enqueue": (_leaselab_schema(), queue_enqueue),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--slots", type=int, default=8, help="k, for the k-at-a-time drain (default 8)")
    ap.add_argument(
        "--fsync",
        choices=("on", "off"),
        default="on",
        help="off: no flush costs anything, so what each layer costs the CPU shows (default on)",
    )
    args = ap.parse_args(argv)
    drains = {
        **DRAINS,
        **{label: (prepare, functools.partial(drain, k=args.slots)) for label, (prepare, drain) in DRAINS_K.items()},
    }
    runs: dict[str, list[tuple[float, tuple[float, ...]]]] = {}
    step(f"starting a throw-away PostgreSQL server with fsync {args.fsync}")
    with PgServer(fsync=args.fsync == "on") as server:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
            prepared_from = conn.prepare_threshold  # leaselab's connections keep psycopg's default
        n = 0
        for round_ in range(args.repeat):
            for label, (prepare, drain) in drains.items():
                n += 1
                step(f"round {round_ + 1}/{args.repeat}: drain, {label}")
                url = server.create_database(f"d{n}")
                prepare(url, args.jobs)
                before, start = _wal(url), time.perf_counter()
                drain(url)
                seconds, after = time.perf_counter() - start, _wal(url)
                runs.setdefault(label, []).append(
                    (args.jobs / seconds, tuple((a - b) / args.jobs for a, b in zip(after, before, strict=True)))
                )
            for label, (prepare, enqueue) in ENQUEUES.items():
                n += 1
                step(f"round {round_ + 1}/{args.repeat}: enqueue, {label}")
                url = server.create_database(f"e{n}")
                prepare(url)
                before, start = _wal(url), time.perf_counter()
                enqueue(url, args.jobs)
                seconds, after = time.perf_counter() - start, _wal(url)
                runs.setdefault(label, []).append(
                    (args.jobs / seconds, tuple((a - b) / args.jobs for a, b in zip(after, before, strict=True)))
                )

    print(f"# where a job's time goes on PostgreSQL, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(
        f"# {throughput.machine()}, PostgreSQL {version} (fsync {args.fsync}), psycopg {psycopg.__version__} "
        f"(a statement is prepared on the server after {prepared_from} runs on a connection)"
    )
    print(f"# {args.jobs} jobs per row, {args.repeat} rounds, rows interleaved; medians\n")
    for title, rows in (
        ("drain, one job at a time", DRAINS),
        (f"drain, {args.slots} jobs at a time", DRAINS_K),
        ("enqueue, one call per job", ENQUEUES),
    ):
        floor = next(iter(rows))
        print(f"| {title:<44} | jobs/s | ÷ floor | ÷ row above | WAL records/job | WAL bytes/job | flushes/job |")
        print("|" + "---|" * 7)
        above = None
        for label in rows:
            rates = [r[0] for r in runs[label]]
            ratio = statistics.median(a[0] / f[0] for a, f in zip(runs[label], runs[floor], strict=True))
            step_ = (
                ""
                if above is None
                else f"{statistics.median(a[0] / b[0] for a, b in zip(runs[label], runs[above], strict=True)):.2f}"
            )
            wal = [statistics.median(r[1][i] for r in runs[label]) for i in range(3)]
            print(
                f"| {label:<44} | {statistics.median(rates):>6.0f} | {ratio:>7.2f} | {step_:>11} | "
                f"{wal[0]:>15.1f} | {wal[1]:>13.0f} | {wal[2]:>11.2f} |"
            )
            above = label
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
