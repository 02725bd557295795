"""End to end, as a user runs it: one worker process drains N no-op jobs; leaselab with k slots beside huey's consumer.

    ./dev bench consumers [--jobs 20000] [--repeat 3] [--threads 8] [--data DIR] [--no-strace]

Every contender starts as its own process on a queue already holding N jobs, and the
clock runs from its start until the last job is finished (leaselab: the worker exits
with ``--exit-when-idle``; huey: the consumer has stored N results). Rows:

- leaselab, one job at a time (``--concurrency 1``, today's worker path) and with k
  slots (``--concurrency k``), at ``durability="full"`` and ``"normal"``;
- leaselab's queue calls: what the worker sends per job (``complete_and_claim`` in a loop, no
  handler, no log), in a process of its own started the same way, so the worker ÷ this row is
  the cost of the worker's own bookkeeping;
- the flat loop: those calls plus what a one-slot worker must do per job (its lease held and
  kept from its reaper, the handler, the turn's two log lines, a stop check) written as one
  loop with no layers, started the same way: the floor for a worker that logs each job; at
  NORMAL once more with the lines made but not written, to show what writing them costs;
- huey's own consumer (``huey_consumer -k thread -w k``) on ``SqliteHuey``, at its
  default durability (SQLite's default ``synchronous=FULL``). huey deletes a task when
  it dequeues it (at-most-once), so it never writes a completion;
- at NORMAL, the raw baseline: the bare claim and fenced completion of
  ``throughput.py`` in one loop, in this process, no history and no handler.

With ``strace`` on the machine, each leaselab FULL row and huey are run once more under
``strace -f -c`` to count fsync/fdatasync calls per job (the counting run is not timed).
Databases live in ``bench/.data`` (a real disk, not tmpfs) unless ``--data`` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import throughput  # noqa: E402  (the raw baseline and the machine line live there)
from progress import step  # noqa: E402

HUEY_APP = """
import os
from huey import SqliteHuey
huey = SqliteHuey("bench", filename=os.environ["BENCH_HUEY_DB"])

@huey.task()
def noop(n):
    return n
"""


def say(message: str) -> None:
    print(message, flush=True)


def fill_leaselab(db: Path, jobs: int, durability: str) -> None:
    from leaselab import Queue

    with Queue(db, durability=durability) as q:
        for start in range(0, jobs, 1000):
            q.enqueue_many([{"n": n} for n in range(start, min(jobs, start + 1000))])


def leaselab_cmd(db: Path, slots: int, durability: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "leaselab",
        "worker",
        "--db",
        str(db),
        "--handler",
        "leaselab.harness.demo:echo",
        "--name",
        "bench",
        "--exit-when-idle",
        "--concurrency",
        str(slots),
        "--durability",
        durability,
        "--poll",
        "0.01",
        "--max-poll",
        "0.05",
    ]


def run_leaselab(folder: Path, jobs: int, slots: int, durability: str, strace: str | None = None) -> float:
    db = folder / f"ll-{slots}-{durability}.db"
    fill_leaselab(db, jobs, durability)
    cmd = leaselab_cmd(db, slots, durability)
    if strace:
        cmd = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", strace] + cmd
    return timed_drain(cmd, db, jobs, "leaselab")


def timed_drain(cmd: list[str], db: Path, jobs: int, what: str) -> float:
    """Jobs per second of ``cmd`` draining the leaselab file ``db``, checked to have done all ``jobs``."""
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    conn = sqlite3.connect(db)
    done = conn.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()[0]
    conn.close()
    assert done == jobs, f"{what} finished {done} of {jobs}"
    return jobs / seconds


def drain_by_calls(db: str, durability: str) -> None:
    """What the worker does per job, as bare queue calls: ``complete_and_claim`` in a loop, no handler."""
    from leaselab import Queue

    with Queue(db, durability=durability) as q:
        job = q.claim("bench")
        while job is not None:
            job = q.complete_and_claim(job.id, job.token, job.payload, "bench")


def drain_flat(db: str, durability: str, log_lines: str = "log") -> None:
    """What a one-slot worker must do per job besides its queue calls, written as one flat loop:
    a ``Lease`` held in the worker's ``Leases`` (its own deadline, kept from its reaper while the
    outcome is written, under the lock a heartbeat holds), the demo handler, the two log lines of
    the turn through the command's ``LineLog``, a stop check, the counts. No layers, no outcome
    routing beyond a completion: the floor for a worker that logs each job and keeps its promises.
    With ``log_lines="nolog"`` the lines are made but never written: what the log's writing costs."""
    from leaselab import Queue
    from leaselab.errors import LeaseLost
    from leaselab.harness.demo import echo
    from leaselab.queue import DEFAULT_LEASE, new_token
    from leaselab.worker.lease import Lease, Leases
    from leaselab.worker.logline import LineLog

    name, seconds, stop = "bench", DEFAULT_LEASE, threading.Event()
    log = LineLog() if log_lines == "log" else argparse.Namespace(lines=lambda lines: None)
    beating, leases = threading.Lock(), Leases()
    claimed = completed = 0
    try:
        with Queue(db, durability=durability) as q:
            sent = time.monotonic()
            job, turn = q.claim(name, seconds, token=new_token()), []
            while job is not None and not stop.is_set():
                lease = Lease(job, seconds, sent=sent)
                leases.add(lease)
                claimed += 1
                turn.append(f"{name}: claimed job {job.id} (attempt {job.attempts}/{job.max_attempts})")
                log.lines(turn)
                try:
                    result = echo(job)
                except Exception:  # the demo's echo never raises; a worker would fail the job here
                    result = None
                refill = new_token()
                with beating:
                    kept = leases.hand_in((lease,), refill)
                with kept:
                    sent = time.monotonic()
                    try:
                        following = q.complete_and_claim(job.id, lease.token, result, name, seconds, next_token=refill)
                    except LeaseLost:
                        following, turn = None, [f"{name}: lease lost on job {job.id}"]
                    else:
                        completed += 1
                        turn = [f"{name}: completed job {job.id}"]
                job = following
            log.lines(turn + [f"{name}: exiting: claimed {claimed}, completed {completed}"])
    finally:
        leases.close()


def run_calls(folder: Path, jobs: int, durability: str) -> float:
    """The queue calls of one job at a time in a process of their own, started as the worker is."""
    db = folder / f"calls-{durability}.db"
    fill_leaselab(db, jobs, durability)
    return timed_drain([sys.executable, __file__, "--drain-by-calls", str(db), durability], db, jobs, "the queue calls")


def run_flat(folder: Path, jobs: int, durability: str, log_lines: str = "log") -> float:
    """The one-slot worker's bookkeeping written flat (``drain_flat``), in a process of its own."""
    db = folder / f"flat-{durability}.db"
    fill_leaselab(db, jobs, durability)
    return timed_drain(
        [sys.executable, __file__, "--drain-flat", str(db), durability, log_lines], db, jobs, "the flat loop"
    )


def run_huey(folder: Path, jobs: int, threads: int, strace: str | None = None) -> float:
    app_dir = folder / "hueyapp"
    app_dir.mkdir(exist_ok=True)
    (app_dir / "bench_huey_app.py").write_text(HUEY_APP)
    db = folder / "huey.db"
    env = dict(os.environ, BENCH_HUEY_DB=str(db), PYTHONPATH=str(app_dir))
    filler = f"import bench_huey_app as a\nfor n in range({jobs}): a.noop(n)\n"
    subprocess.run([sys.executable, "-c", filler], check=True, env=env)
    cmd = [
        sys.executable,
        "-m",
        "huey.bin.huey_consumer",
        "bench_huey_app.huey",
        "-k",
        "thread",
        "-w",
        str(threads),
        "-d",
        "0.01",
        "-m",
        "0.05",
        "-q",
    ]
    if strace:
        cmd = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", strace] + cmd
    start = time.perf_counter()
    consumer = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        conn = sqlite3.connect(db, timeout=30)
        while True:
            stored = conn.execute("SELECT count(*) FROM kv").fetchone()[0]
            if stored >= jobs:
                break
            if consumer.poll() is not None:
                raise RuntimeError("huey's consumer exited early")
            time.sleep(0.005)
        seconds = time.perf_counter() - start
        conn.close()
    finally:
        os.killpg(consumer.pid, signal.SIGTERM)  # the consumer, and strace around it when counting
        consumer.wait(60)
    return jobs / seconds


def run_raw(folder: Path, jobs: int) -> float:
    open_, enqueue, drain_one, _ = throughput.raw_system("NORMAL")
    sub = folder / "raw"
    sub.mkdir(exist_ok=True)
    conn = open_(sub)
    conn.execute("BEGIN")
    for n in range(jobs):
        enqueue(conn, n)
    conn.execute("COMMIT")
    start = time.perf_counter()
    drained = 0
    while drain_one(conn) is not None:
        drained += 1
    seconds = time.perf_counter() - start
    conn.close()
    assert drained == jobs
    return jobs / seconds


def fsyncs(path: str) -> int:
    total = 0
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if parts and parts[-1] in ("fsync", "fdatasync"):
            total += int(parts[3]) if len(parts) >= 6 else int(parts[-2])
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=8, help="leaselab's slots and huey's worker threads")
    ap.add_argument("--data", type=Path, default=HERE / ".data")
    ap.add_argument("--no-strace", action="store_true")
    ap.add_argument("--drain-by-calls", nargs=2, metavar=("DB", "DURABILITY"), help=argparse.SUPPRESS)
    ap.add_argument("--drain-flat", nargs=3, metavar=("DB", "DURABILITY", "LOG"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.drain_by_calls:
        drain_by_calls(*args.drain_by_calls)
        return 0
    if args.drain_flat:
        drain_flat(*args.drain_flat)
        return 0
    args.data.mkdir(parents=True, exist_ok=True)
    k = args.threads
    rows = {
        "leaselab FULL, 1 at a time": lambda d: run_leaselab(d, args.jobs, 1, "full"),
        "leaselab FULL, queue calls": lambda d: run_calls(d, args.jobs, "full"),
        "leaselab FULL, flat loop": lambda d: run_flat(d, args.jobs, "full"),
        f"leaselab FULL, {k} slots": lambda d: run_leaselab(d, args.jobs, k, "full"),
        f"huey consumer, {k} threads": lambda d: run_huey(d, args.jobs, k),
        "leaselab NORMAL, 1 at a time": lambda d: run_leaselab(d, args.jobs, 1, "normal"),
        f"leaselab NORMAL, {k} slots": lambda d: run_leaselab(d, args.jobs, k, "normal"),
        "leaselab NORMAL, queue calls": lambda d: run_calls(d, args.jobs, "normal"),
        "leaselab NORMAL, flat loop": lambda d: run_flat(d, args.jobs, "normal"),
        "leaselab NORMAL, flat, lines unwritten": lambda d: run_flat(d, args.jobs, "normal", "nolog"),
        "raw baseline NORMAL (in process)": lambda d: run_raw(d, args.jobs),
    }
    say(f"machine: {throughput.machine()}, SQLite {sqlite3.sqlite_version}")
    say(f"{args.jobs} no-op jobs, one worker process, {args.repeat} interleaved rounds")
    results: dict[str, list[float]] = {name: [] for name in rows}
    for r in range(args.repeat):
        for name, run in rows.items():
            folder = Path(tempfile.mkdtemp(dir=args.data))
            step(f"round {r + 1}/{args.repeat}: {name}")
            try:
                rate = run(folder)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            results[name].append(rate)
    med = {name: statistics.median(v) for name, v in results.items()}

    def ratio(ours: str, theirs: str) -> float:
        # Rows ran one after another within a round: a round's ratio shares its moment's load.
        return statistics.median(a / b for a, b in zip(results[ours], results[theirs], strict=True))

    say("")
    say(f"| {'contender (one process)':<38} | {'jobs/s, median':>14} | {'min-max':>15} |")
    say(f"|{'-' * 40}|{'-' * 16}|{'-' * 17}|")
    for name, rate in med.items():
        span = f"{min(results[name]):,.0f}-{max(results[name]):,.0f}"
        say(f"| {name:<38} | {rate:>14,.0f} | {span:>15} |")
    say("")
    say("ratios, each the median of the rounds' own ratios:")
    say(
        f"FULL:   leaselab {k} slots / huey {k} threads      = "
        f"{ratio(f'leaselab FULL, {k} slots', f'huey consumer, {k} threads'):.2f}   (target >= 3)"
    )
    say(
        f"FULL:   leaselab 1 at a time / its queue calls = "
        f"{ratio('leaselab FULL, 1 at a time', 'leaselab FULL, queue calls'):.2f}   (target >= 0.85)"
    )
    say(
        f"NORMAL: leaselab 1 at a time / its queue calls = "
        f"{ratio('leaselab NORMAL, 1 at a time', 'leaselab NORMAL, queue calls'):.2f}   (target >= 0.85)"
    )
    for level in ("FULL", "NORMAL"):
        say(
            f"{level + ':':<8}{'flat loop / its queue calls':<39}= "
            f"{ratio(f'leaselab {level}, flat loop', f'leaselab {level}, queue calls'):.2f}   "
            "(the floor for a worker logging each job)"
        )
        say(
            f"{level + ':':<8}{'leaselab 1 at a time / flat loop':<39}= "
            f"{ratio(f'leaselab {level}, 1 at a time', f'leaselab {level}, flat loop'):.2f}   "
            "(what the worker's structure costs)"
        )
    say(
        f"{'NORMAL:':<8}{'flat, lines unwritten / queue calls':<39}= "
        f"{ratio('leaselab NORMAL, flat, lines unwritten', 'leaselab NORMAL, queue calls'):.2f}   "
        "(the floor without writing the log)"
    )
    say(
        f"FULL:   leaselab {k} slots / leaselab 1 at a time = "
        f"{ratio(f'leaselab FULL, {k} slots', 'leaselab FULL, 1 at a time'):.2f}"
    )
    say(
        f"NORMAL: leaselab {k} slots / leaselab 1 at a time = "
        f"{ratio(f'leaselab NORMAL, {k} slots', 'leaselab NORMAL, 1 at a time'):.2f}"
    )
    say(
        f"NORMAL: leaselab {k} slots / raw baseline         = "
        f"{ratio(f'leaselab NORMAL, {k} slots', 'raw baseline NORMAL (in process)'):.2f}"
    )
    if not args.no_strace and shutil.which("strace"):
        say("")
        say("fsync + fdatasync calls per job at FULL (one extra, untimed run each, under strace -f -c):")
        for name, run in (
            ("leaselab FULL, 1 at a time", lambda d, s: run_leaselab(d, args.jobs, 1, "full", s)),
            (f"leaselab FULL, {k} slots", lambda d, s: run_leaselab(d, args.jobs, k, "full", s)),
            (f"huey consumer, {k} threads", lambda d, s: run_huey(d, args.jobs, k, s)),
        ):
            folder = Path(tempfile.mkdtemp(dir=args.data))
            step(f"counting fsyncs: {name}")
            try:
                trace = str(folder / "strace.txt")
                run(folder, trace)
                say(f"  {name:<34} {fsyncs(trace) / args.jobs:.3f}")
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
