"""The leaselab command: enqueue, worker, reap, stats, jobs, events, chaos."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from datetime import datetime
from typing import Sequence

from .backends import is_server_url
from .errors import LeaselabError
from .job import Status
from .printable import has_unprintable, printable
from .queue import DEFAULT_LEASE, DURABILITIES, Queue

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # what a shell reports for a program ended by Ctrl-C (128 + SIGINT)


def _stamp(t: float | None) -> str:
    if t is None:
        return "-"
    try:
        return datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3]
    except (ValueError, OverflowError, OSError):  # a time no calendar holds (year 10000, say): the number
        return f"{t:.3f}"


def _short(value: object, width: int) -> str:
    """``value`` on one line of at most ``width`` characters, its control characters shown escaped."""
    text = "-" if value is None else (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    text = printable(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _open(args: argparse.Namespace, create: bool = False) -> Queue:
    # Only enqueue makes a queue: any other command given a mistyped --db must say so, not
    # answer from a fresh empty file it just left behind.
    create = create or is_server_url(args.db)  # a server URL names no file to look for
    return Queue(args.db, durability=getattr(args, "durability", "full"), create=create,
                 busy_timeout=args.busy_timeout)


def cmd_enqueue(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise ValueError(f"payload is not valid JSON: {exc}") from None
    with _open(args, create=True) as q:
        ids = q.enqueue_many([payload] * args.count, priority=args.priority, delay=args.delay,
                             max_attempts=args.max_attempts)
    print(" ".join(map(str, ids)))
    return 0


def _watch_parent(parent: int, interval: float = 0.5) -> None:
    """Exit the moment the process that started us is gone, so no worker outlives a killed kernel."""
    while True:
        time.sleep(interval)
        if os.getppid() != parent:
            os._exit(3)


def _say(line: str) -> None:
    """Write one line straight to stdout: safe inside a signal handler, where print() may be mid-write."""
    data = line.encode(errors="replace") + b"\n"
    try:
        while data:
            data = data[os.write(sys.stdout.fileno(), data):]
    except (OSError, ValueError):  # output closed or gone: the stop itself matters more than saying so
        pass


def _jobs_phrase(ids: list[int]) -> tuple[str, str]:
    """("job 12", "it") or ("jobs 12, 13", "them")."""
    if len(ids) == 1:
        return f"job {ids[0]}", "it"
    return "jobs " + ", ".join(map(str, ids)), "them"


def cmd_worker(args: argparse.Namespace) -> int:
    from .worker import STOPPED, Worker, load_handler, outlast

    def log(message: str) -> None:
        # One line per message, whatever a handler's error or a job's text holds: a newline in
        # it would forge a log line of its own, an ESC would drive the reader's terminal.
        print(f"{_stamp(time.time())} {printable(message)}", flush=True)

    # SIGTERM (and a first Ctrl-C) are honoured from here on, even before the worker exists:
    # opening the file and importing the handler take a while, and a stop asked for then must
    # still be clean.
    stop_asked = threading.Event()
    worker: Worker | None = None
    queue: Queue | None = None
    interrupts = 0
    held: list[int] | None = None  # the jobs being finished after a first Ctrl-C, once known
    announcer: threading.Thread | None = None

    def stop(*_: object) -> None:
        stop_asked.set()
        if worker is not None:
            worker.stop()

    def announce() -> None:
        # Asked of the queue, on a thread: the handler may interrupt the main thread mid-statement,
        # and with several slots no single attribute knows every job this worker holds.
        nonlocal held
        try:
            ids = sorted(j.id for j in queue.jobs(status="running", limit=100_000) if j.worker == worker.name)
        except Exception:  # a busy file, or a worker that finished and closed it meanwhile
            log("stopping, Ctrl-C again to quit at once")
            return
        held = ids
        if ids:
            what, pronoun = _jobs_phrase(ids)
            log(f"finishing {what}, Ctrl-C again to abandon {pronoun}")
        else:
            log("no job running: stopping")

    def interrupted(*_: object) -> None:
        nonlocal interrupts, announcer
        interrupts += 1
        if interrupts > 1:
            if held:
                what, _ = _jobs_phrase(held)
                _say(f"{_stamp(time.time())} abandoning {what}: back to the queue when the lease runs out")
            else:
                _say(f"{_stamp(time.time())} stopped at once")
            os._exit(EXIT_INTERRUPTED)
        stop()
        if worker is None or queue is None:
            _say(f"{_stamp(time.time())} stopping before the first job, Ctrl-C again to quit at once")
        else:
            announcer = threading.Thread(target=announce, name="ctrl-c")
            announcer.start()

    # A notebook's Interrupt sends SIGINT to the kernel's group: the lab's workers (--ignore-sigint,
    # or started with SIGINT already ignored, as a shell does for `worker &`) must not stop on it.
    # In a terminal, Ctrl-C is how a person stops a worker.
    ignore_sigint = args.ignore_sigint or signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    before = signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_sigint else interrupted), \
        signal.signal(signal.SIGTERM, stop)
    try:
        handler = load_handler(args.handler)  # a bad --handler is reported before a bad --db
        parent = os.getppid()
        if parent > 1:  # from here on: a worker waiting for its server must not outlive who started it
            threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="parent-watch").start()
        # A server not up yet, a first connection dropped, a full disk: waited out as they are
        # mid-run, with the same log lines. Anything retrying cannot fix still exits 2 at once.
        named = args.name or f"worker-{os.getpid()}"  # as the worker will prefix its own lines
        opened = outlast("open the queue", lambda: _open(args), stop=stop_asked,
                         log=lambda message: log(f"{named}: {message}"))
        if opened is STOPPED:
            log("stopped before the queue could be opened")
            return 0
        try:
            worker = Worker(opened, handler, name=args.name, lease=args.lease, poll=args.poll,
                            max_poll=args.max_poll, exit_when_idle=args.exit_when_idle, log=log,
                            concurrency=args.concurrency)
        except BaseException:
            opened.close()
            raise
        queue = opened
        if stop_asked.is_set():
            worker.stop()
        slots = f", {args.concurrency} at once" if args.concurrency > 1 else ""
        how = f"ignoring Ctrl-C; stop it with: kill {os.getpid()}" if ignore_sigint else "Ctrl-C to stop"
        log(f"started (pid {os.getpid()}, handler {args.handler}, lease {args.lease:g}s{slots}); {how}")
        try:
            stats = worker.run()
        finally:
            if announcer is not None:  # it reads the queue: say which jobs are finishing before closing it
                announcer.join()
            queue.close()
        log(f"exiting: claimed {stats.claimed}, completed {stats.completed}, failed {stats.failed}, "
            f"lost {stats.lost}, reaped {stats.reaped}")
        return 0
    finally:  # main() may run inside a longer-lived program, a test for one
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


def cmd_reap(args: argparse.Namespace) -> int:
    with _open(args) as q:
        moved = q.reap()
    print(f"reaped {len(moved)}" + (f": {' '.join(map(str, moved))}" if moved else ""))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as q:
        counts = q.stats()
    if args.json:
        print(json.dumps(counts))
    else:
        for status, n in counts.items():
            print(f"{printable(status):<8}{n:>8}")
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    with _open(args) as q:
        jobs = q.jobs(status=args.status, limit=args.limit)
        now = q.clock()
    header = f"{'id':>6}  {'status':<8} {'pri':>4} {'att':>5}  {'worker':<12} {'lease left':>10}  {'payload':<24} result/error"
    print(header)
    for j in jobs:
        if j.damage:  # listed, never hidden: the rest of the table stays readable
            print(f"{j.id:>6}  {'DAMAGED':<8} {printable(j.damage)}")
            continue
        left = "-" if j.lease_until is None else f"{j.lease_until - now:.1f}s"
        outcome = j.last_error if j.status in ("pending", "dead") and j.last_error else j.result
        print(f"{j.id:>6}  {j.status.value:<8} {j.priority:>4} {j.attempts:>2}/{j.max_attempts:<2}  "
              f"{_short(j.worker, 12):<12} {left:>10}  {_short(j.payload, 24):<24} {_short(outcome, 40)}")
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    with _open(args) as q:
        events = q.events(job_id=args.job)
        if args.job is not None and not events:
            q.get(args.job)  # every job has an "enqueued" event: no history means no such job

    print(f"{'time':<12}  {'job':>6}  {'kind':<10} {'att':>3}  {'worker':<12} detail")
    for e in events:
        print(f"{_stamp(e.at):<12}  {e.job_id:>6}  {printable(e.kind):<10} {e.attempt:>3}  {_short(e.worker, 12):<12} "
              f"{_short(e.detail, 60) if e.detail else ''}")
    return 0


def cmd_chaos(args: argparse.Namespace) -> int:
    # Imported here: the lab and the lessons it drives must not load with every worker's start.
    from .chaos.command import main as chaos

    return chaos(args)


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _worker_name(text: str) -> str:
    # The name is written into every log line and listing: a newline in it would split them.
    if not text or has_unprintable(text):
        raise argparse.ArgumentTypeError(f"must be a non-empty name without control characters, got {text!r}")
    return text


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr, like every other leaselab error."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {printable(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="leaselab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, func) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--db", default=os.environ.get("LEASELAB_DB", "leaselab.db"),
                       help="queue file, or a postgresql://user@host:port/dbname URL "
                            "(default: $LEASELAB_DB or leaselab.db)")
        p.add_argument("--busy-timeout", type=_positive_float, default=30.0, metavar="SECONDS",
                       help="how long to wait for another process's write lock before giving up on "
                            "one try (a worker then retries; default 30)")
        p.set_defaults(func=func)
        return p

    p = command("enqueue", "add jobs with a JSON payload", cmd_enqueue)
    p.add_argument("payload", help='JSON, e.g. \'{"seconds": 2}\'')
    p.add_argument("--priority", type=int, default=0)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--max-attempts", type=int, default=5)
    p.add_argument("--count", type=_positive_int, default=1, help="how many identical jobs")
    p.add_argument("--durability", choices=DURABILITIES, default="full")

    p = command("worker", "run one worker process", cmd_worker)
    p.add_argument("--handler", required=True, help="module:function, e.g. leaselab.lessons.demo:task")
    p.add_argument("--name", type=_worker_name, default=None,
                   help="the name in the queue's rows and the log (default: worker-PID)")
    p.add_argument("--lease", type=_positive_float, default=DEFAULT_LEASE)
    p.add_argument("--poll", type=_positive_float, default=0.05)
    p.add_argument("--max-poll", type=_positive_float, default=1.0)
    p.add_argument("--exit-when-idle", action="store_true", help="exit once no job is pending or running")
    p.add_argument("--durability", choices=DURABILITIES, default="full",
                   help="full: claims and completions are on disk before they count; normal: faster, may lose "
                        "the last ones on power loss (SQLite) or a server crash (PostgreSQL)")
    p.add_argument("--concurrency", type=_positive_int, default=1,
                   help="how many jobs to run at once, on threads (default 1)")
    p.add_argument("--ignore-sigint", action="store_true",
                   help="keep running on Ctrl-C (SIGINT); stop with SIGTERM. The lab's workers use it, "
                        "so a notebook's Interrupt does not stop them")

    command("reap", "move expired leases back to pending (or dead)", cmd_reap)
    p = command("stats", "count jobs by status", cmd_stats)
    p.add_argument("--json", action="store_true")
    p = command("jobs", "list jobs as a table", cmd_jobs)
    p.add_argument("--status", choices=[s.value for s in Status])
    p.add_argument("--limit", type=int, default=100)
    p = command("events", "show the history of transitions", cmd_events)
    p.add_argument("--job", type=int, default=None)

    p = command("chaos", "run real workers under a seeded fault schedule, then check what the queue kept "
                         "(exit 0 clean, 1 broken)", cmd_chaos)
    p.add_argument("--handler", required=True, help="module:function, e.g. leaselab.lessons.demo:task")
    p.add_argument("--workers", type=_positive_int, default=4, help="worker processes kept running (default 4)")
    p.add_argument("--concurrency", type=_positive_int, default=1, help="jobs each worker runs at once (default 1)")
    p.add_argument("--jobs", type=_positive_int, default=500, help="how many jobs (default 500)")
    p.add_argument("--seconds", type=_positive_float, default=60.0, help="how long the faults go on (default 60)")
    p.add_argument("--lease", type=_positive_float, default=None, help="the workers' lease (default 1 s)")
    p.add_argument("--faults", default=None,
                   help="comma-separated faults (default: every one this queue can have); an unknown one "
                        "is refused with the list")
    p.add_argument("--seed", type=int, default=None, help="replay a run's schedule (default: a random seed)")
    p.add_argument("--payload", default="{}", help="every job's JSON payload (default {})")
    p.add_argument("--out", default=None, help="the run's folder: logs, effects (default: beside the queue)")
    p.add_argument("--json", action="store_true", help="the result as one JSON document on stdout")
    p.add_argument("--lang", default="en", help="the language it speaks: en or ru")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed: an exit code, not an exception
        return 0 if exc.code is None else exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    try:
        return args.func(args)
    except (LeaselabError, ValueError, TypeError) as exc:
        print(f"leaselab {args.command}: error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
