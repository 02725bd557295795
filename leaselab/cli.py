"""The leaselab command: enqueue, worker, reap, stats, jobs, events, show, retry, cancel, check, chaos, simulate."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from .arguments import queue_name
from .backends import is_server_url
from .backends.sqlite.backend import nearest_queue_file
from .backoff import Backoff
from .errors import DatabaseMissing, InvalidPayload, LeaselabError, QueueFileGone
from .job import DEFAULT_QUEUE, Event, Job, Status
from .periodic import load_schedules
from .printable import has_unprintable, printable
from .queue import DEFAULT_LEASE, DURABILITIES, Queue
from .words import LANGS
from .worker import DEFAULT_GRACE
from .worker.logline import LineLog, stamp
from .worker.process import EXIT_HUNG

EXIT_ANOMALY = 1  # check: the run broke a promise
EXIT_BAD_INPUT = 2


def _short(value: object, width: int, as_json: bool = False) -> str:
    """``value`` on one line of at most ``width`` characters, its control characters shown escaped.

    ``as_json`` shows a string as JSON too (``"str"``, quoted), as a payload or a result is stored;
    otherwise a string (a worker's name, a handler's error) is shown as it is.
    """
    if value is None:
        text = "-"
    elif isinstance(value, str) and not as_json:
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False)
    text = printable(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _open(args: argparse.Namespace, create: bool = False, call_timeout: float | None = None) -> Queue:
    # Only enqueue makes a queue: any other command given a mistyped --db must say so, not
    # answer from a fresh empty file it just left behind.
    create = create or is_server_url(args.db)  # a server URL names no file to look for
    return Queue(
        args.db,
        durability=getattr(args, "durability", "full"),
        create=create,
        busy_timeout=args.busy_timeout,
        call_timeout=call_timeout,
    )


# Jobs a file's lines are enqueued in at a time: one transaction each, so a long file never holds
# the write lock for long, and one page of payloads is in memory as JSON text, not all of them.
ENQUEUE_BATCH = 10_000


def _payload_lines(source: IO[str], name: str) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of ``source`` as (its number, the JSON value it holds); a line that is not
    JSON is refused naming ``name`` and its number."""
    for number, line in enumerate(source, 1):
        if not line.strip():
            continue  # a blank line (the last newline, say) holds no job
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name}, line {number}: not valid JSON ({exc.msg}, column {exc.colno})") from None


def _read_payloads(path: str) -> list[tuple[int, Any]]:
    """Every (line number, payload) of a JSON-lines file (``-``: standard input), each line read before any
    is written."""
    if path == "-":
        return list(_payload_lines(sys.stdin, "standard input"))
    try:
        with open(path, encoding="utf-8") as source:
            return list(_payload_lines(source, path))
    except FileNotFoundError:
        raise ValueError(f"--file: no file at {path}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"--file: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def cmd_enqueue(args: argparse.Namespace) -> int:
    if (args.payload is None) == (args.file is None):
        raise ValueError("give a payload, or --file with one JSON payload a line, not both")
    if args.key is not None and (args.file is not None or args.count != 1):
        raise ValueError("--key makes one unique job: give one payload, without --count or --file")
    if args.file is not None:
        if args.count != 1:
            raise ValueError("--count repeats one payload; a --file gives one job a line")
        lines = _read_payloads(args.file)
        payloads = [payload for _, payload in lines]
    else:
        try:
            payloads = [json.loads(args.payload)] * args.count
        except json.JSONDecodeError as exc:
            raise ValueError(f"payload is not valid JSON: {exc}") from None
    options = {
        "priority": args.priority,
        "delay": args.delay,
        "max_attempts": args.max_attempts,
        "timeout": args.timeout,
        "beat_timeout": args.beat_timeout,
        "queue": args.queue,
    }
    ids: list[int] = []
    with _open(args, create=True) as q:
        if args.key is not None:
            # The id goes to standard output either way, so a script reads it as for any enqueue; that
            # it is another job's, already there with this key, is said on standard error.
            enqueued = q.enqueue_unique(payloads[0], args.key, **options)
            if not enqueued.new:
                print(f"leaselab enqueue: {printable(str(enqueued))}", file=sys.stderr)
            print(json.dumps([enqueued.id]) if args.json else enqueued.id)
            return 0
        if args.file is not None:
            # Every payload is checked before the first batch is written, so a bad one (too big, nested
            # too deep) refuses the whole file with its line number, and nothing is written.
            name = "standard input" if args.file == "-" else args.file
            for number, payload in lines:
                try:
                    q.check_payload(payload)
                except InvalidPayload as exc:
                    raise ValueError(f"{name}, line {number}: {exc}") from None
        for start in range(0, len(payloads), ENQUEUE_BATCH):
            ids.extend(q.enqueue_many(payloads[start : start + ENQUEUE_BATCH], **options))
    print(json.dumps(ids) if args.json else " ".join(map(str, ids)))
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from .worker import CALL_TIMEOUT_SHARE, STARTED, STOPPED, Worker, load_handler, outlast
    from .worker.process import EXIT_FILE_GONE, ProcessControl

    log = LineLog()  # the worker hands it each turn's lines at once (LineLog.lines)

    # SIGTERM, Ctrl-C and the parent's death are honoured from here on, even before the worker
    # exists: opening the file and importing the handler take a while, and a stop asked for then
    # must still be clean. A notebook's Interrupt sends SIGINT to the kernel's group: the lab's
    # workers (--ignore-sigint, or started with SIGINT already ignored, as a shell does for
    # `worker &`) must not stop on it. In a terminal, Ctrl-C is how a person stops a worker. The
    # handlers before are back when the command returns: main() may run inside a longer-lived
    # program, a test for one.
    with ProcessControl(log, ignore_sigint=args.ignore_sigint) as control:
        served = _served(args.handler, args.queue)  # a bad --handler or --queue is reported before a bad --db
        handlers = {name: load_handler(path) for name, path in served.items()}
        schedules = load_schedules(args.schedule) if args.schedule is not None else []
        # A server not up yet, a first connection dropped, a full disk: waited out as they are
        # mid-run, with the same log lines. Anything retrying cannot fix still exits 2 at once.
        named = args.name or f"worker-{os.getpid()}"  # as the worker will prefix its own lines
        opened = outlast(
            "open the queue",
            lambda: _open(args, call_timeout=CALL_TIMEOUT_SHARE * args.lease),  # as a worker opens its own
            stop=control.stop_asked,
            log=lambda message: log(f"{named}: {message}"),
        )
        if opened is STOPPED:
            log("stopped before the queue could be opened")
            return 0
        try:
            worker = Worker(
                opened,
                queues=handlers,
                name=args.name,
                lease=args.lease,
                poll=args.poll,
                max_poll=args.max_poll,
                exit_when_idle=args.exit_when_idle,
                log=log,
                concurrency=args.concurrency,
                job_timeout=args.job_timeout,
                beat_timeout=args.beat_timeout,
                grace=args.grace,
                journal=args.journal,
                schedules=schedules,
            )
        except BaseException:
            opened.close()
            raise
        control.attach(worker)
        slots = f", {args.concurrency} at once" if args.concurrency > 1 else ""
        if list(served) == [DEFAULT_QUEUE]:
            serving = f"handler {served[DEFAULT_QUEUE]}"
        else:
            serving = "queues " + ", ".join(f"{name}={path}" for name, path in served.items())
        log(f"{STARTED}{os.getpid()}, {serving}, lease {args.lease:g}s{slots}); {control.how_to_stop}")
        if schedules:
            log(f"{worker.name}: running schedules {', '.join(s.name for s in schedules)} from {args.schedule}")
        try:
            stats = worker.run()
        except QueueFileGone as exc:  # nothing more can be written: a supervisor should look, not retry blindly
            log(f"exiting: {exc}")
            return EXIT_FILE_GONE
        finally:
            control.finish_announcing()  # it reads the queue: say which jobs are finishing before closing it
            opened.close()
        log(
            f"exiting: claimed {stats.claimed}, completed {stats.completed}, failed {stats.failed}, "
            f"lost {stats.lost}, reaped {stats.reaped}; {stats.heartbeat_latencies.describe()}"
        )
        return 0


def _served(handler: str | None, queues: Sequence[str]) -> dict[str, str]:
    """{queue: MODULE:FUNCTION} from ``--handler`` and the ``--queue`` options: ``--queue NAME`` is served by
    ``--handler``, ``--queue NAME=MODULE:FUNCTION`` by its own; with no bare ``--queue``, ``--handler``
    serves the default queue."""
    served: dict[str, str] = {}

    def serve(name: str, path: str | None, option: str) -> None:
        if path is None:
            raise ValueError(
                f"--queue {name} takes its handler from --handler: give --handler, or --queue {name}=MODULE:FUNCTION"
            )
        if queue_name(name) in served:
            raise ValueError(f"queue {name!r} is given two handlers ({served[name]} and {path}, by {option})")
        served[name] = path

    bare = [q for q in queues if "=" not in q]
    for name in bare:
        serve(name, handler, f"--queue {name}")
    for name, path in (q.split("=", 1) for q in queues if "=" in q):
        serve(name, path, f"--queue {name}={path}")
    if not bare and handler is not None:
        serve(DEFAULT_QUEUE, handler, "--handler")
    if not served:
        raise ValueError("give --handler MODULE:FUNCTION, or --queue NAME=MODULE:FUNCTION")
    return served


def cmd_reap(args: argparse.Namespace) -> int:
    with _open(args) as q:
        moved = q.reap()
    print(f"reaped {len(moved)}" + (f": {' '.join(map(str, moved))}" if moved else ""))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as q:
        if args.by_queue:
            by_queue = q.stats_by_queue()
            if args.json:
                print(json.dumps(by_queue))
            else:
                statuses = [s.value for s in Status]
                print(f"{'queue':<20}" + "".join(f"{status:>9}" for status in statuses))
                for name, counts in by_queue.items():
                    print(f"{printable(name):<20}" + "".join(f"{counts[status]:>9}" for status in statuses))
            return 0
        counts = q.stats(args.queue)
    if args.json:
        print(json.dumps(counts))
    else:
        for status, n in counts.items():
            print(f"{printable(status):<8}{n:>8}")
    return 0


def _lease_left(lease_until: float | None, now: float) -> str:
    """``12.3s`` left, or ``expired 0.8s ago`` once the reaper may take the job back; ``-`` for no lease."""
    if lease_until is None:
        return "-"
    left = lease_until - now
    return f"{left:.1f}s" if left >= 0 else f"expired {-left:.1f}s ago"


# Rows a listing reads at a time: `jobs` and `events` hold one page, whatever the table's size.
PAGE = 1000
# Seconds between looks for new rows while --follow waits.
FOLLOW_POLL = 0.5


class _Stopped(Exception):
    """SIGTERM arrived while a listing followed the queue."""


@contextmanager
def _until_stopped() -> Iterator[None]:
    """Ctrl-C or SIGTERM ends what runs inside: a follow stops there, as asked, and exits 0."""

    def stop(signum: int, frame: Any) -> None:
        raise _Stopped

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except (KeyboardInterrupt, _Stopped):
        pass
    finally:
        signal.signal(signal.SIGTERM, before)


def _listing(
    fetch: Callable[[int, int], Sequence[Any]],
    show: Callable[[Sequence[Any]], None],
    after: int,
    limit: int | None,
    follow: bool,
) -> None:
    """Page through ``fetch(after, n)`` (rows with ids above ``after``, at most ``n``), ``show`` each page.

    At most ``limit`` rows (None: every one); with ``follow``, then keep looking for rows with greater
    ids every ``FOLLOW_POLL`` seconds until stopped.
    """
    left = limit
    while left is None or left > 0:
        want = PAGE if left is None else min(PAGE, left)
        page = fetch(after, want)
        if page:
            show(page)
            after = page[-1].id
        if left is not None:
            left -= len(page)
        if len(page) < want:
            break
    sys.stdout.flush()
    if not follow:
        return
    with _until_stopped():
        while True:
            page = fetch(after, PAGE)
            if page:
                show(page)
                sys.stdout.flush()
                after = page[-1].id
            if len(page) < PAGE:
                time.sleep(FOLLOW_POLL)


def job_json(job: Job) -> dict[str, Any]:
    """A job as one JSON object: every field of ``Job`` by its name, the status as its word."""
    fields = {f.name: getattr(job, f.name) for f in dataclasses.fields(job)}
    fields["status"] = None if job.status is None else Status(job.status).value
    return fields


def event_json(event: Event) -> dict[str, Any]:
    """An event as one JSON object: every field of ``Event`` by its name."""
    return dataclasses.asdict(event)


def _json_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# How wide `jobs` cuts a payload and a result or error, unless --wide.
PAYLOAD_WIDTH, OUTCOME_WIDTH = 24, 40


def cmd_jobs(args: argparse.Namespace) -> int:
    with _open(args) as q:
        if not args.json:
            print(
                f"{'id':>6}  {'status':<8} {'pri':>4} {'att':>5}  {'worker':<12} {'lease left':>16}  "
                f"{'payload':<24} result/error"
            )
        # --wide cuts nothing: a payload and a result or error are shown whole, on the job's one line
        # (a traceback's newlines shown escaped); `leaselab show ID` prints one job's error as lines.
        wide = 10**18 if args.wide else None

        def show(jobs: Sequence[Any]) -> None:
            if args.json:  # one object a line (JSON lines), so a page or a --follow can be read as it comes
                print("\n".join(_json_line(job_json(j)) for j in jobs))
                return
            now = q.clock()
            for j in jobs:
                if j.damage:  # listed, never hidden: the rest of the table stays readable
                    print(f"{j.id:>6}  {'DAMAGED':<8} {printable(j.damage)}")
                    continue
                left = _lease_left(j.lease_until, now)
                failed = j.status in ("pending", "dead") and j.last_error
                width = wide or OUTCOME_WIDTH
                # A failed attempt's error is its exception's line, then its traceback: the table shows the line.
                error = j.last_error if wide or not failed else j.last_error.split("\n", 1)[0]
                outcome = _short(error, width) if failed else _short(j.result, width, as_json=True)
                payload = _short(j.payload, wide or PAYLOAD_WIDTH, as_json=True)
                print(
                    f"{j.id:>6}  {j.status.value:<8} {j.priority:>4} {j.attempts:>2}/{j.max_attempts:<2}  "
                    f"{_short(j.worker, 12):<12} {left:>16}  {payload:<24} {outcome}"
                )

        def fetch(after: int, n: int) -> Sequence[Any]:
            return q.jobs(status=args.status, limit=n, after=after, queue=args.queue)

        _listing(fetch, show, args.after, args.limit, args.follow)
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    with _open(args) as q:
        if args.job is not None and not q.events(job_id=args.job, limit=1):
            q.get(args.job)  # every job has an "enqueued" event: no history means no such job
        if not args.json:
            print(f"{'time':<12}  {'job':>6}  {'kind':<10} {'att':>3}  {'worker':<12} detail")

        def show(events: Sequence[Any]) -> None:
            if args.json:  # one object a line, as `jobs --json`
                print("\n".join(_json_line(event_json(e)) for e in events))
                return
            for e in events:
                print(
                    f"{stamp(e.at):<12}  {e.job_id:>6}  {printable(e.kind):<10} {e.attempt:>3}  "
                    f"{_short(e.worker, 12):<12} {_short(e.detail, 60) if e.detail else ''}"
                )

        def fetch(after: int, n: int) -> Sequence[Any]:
            return q.events(job_id=args.job, after=after, limit=n)

        _listing(fetch, show, args.after, args.limit, args.follow)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with _open(args) as q:
        job = q.get(args.id)
        events = q.events(job_id=args.id)
    if args.json:
        print(_json_line({"job": job_json(job), "events": [event_json(e) for e in events]}))
        return 0
    print(f"job {job.id}")
    if job.damage:
        print(f"  damaged:     {printable(job.damage)}")
    fields = (
        ("status", None if job.status is None else Status(job.status).value),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("priority", job.priority),
        ("payload", json.dumps(job.payload, ensure_ascii=False)),
        ("run at", stamp(job.run_at)),
        ("created", stamp(job.created_at)),
        ("started", stamp(job.started_at)),
        ("finished", stamp(job.finished_at)),
        ("worker", job.worker or "-"),
        ("lease until", stamp(job.lease_until)),
        ("timeout", "-" if job.timeout is None else f"{job.timeout:g}s"),
        ("beat timeout", "-" if job.beat_timeout is None else f"{job.beat_timeout:g}s"),
    )
    for name, value in fields:
        print(f"  {name + ':':<14}{printable(str(value))}")
    if job.status is Status.DONE or job.result is not None:
        print(f"  {'result:':<14}{printable(json.dumps(job.result, ensure_ascii=False))}")
    if job.last_error:
        print("  last error:")
        for line in job.last_error.splitlines():  # in full: a failed attempt's whole traceback
            print(f"    {printable(line)}")
    print("history:")
    print(f"  {'time':<12}  {'kind':<10} {'att':>3}  {'worker':<12} {'token':<8}  detail")
    for e in events:
        detail = e.detail.splitlines()[0] if e.detail else ""  # a traceback's first line: the last error above
        token = "-" if e.token is None else e.token[:8]
        print(
            f"  {stamp(e.at):<12}  {printable(e.kind):<10} {e.attempt:>3}  {_short(e.worker, 12):<12} "
            f"{printable(token):<8}  {printable(detail)}"
        )
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    if bool(args.ids) == args.dead:
        raise ValueError("name the dead jobs to retry, or --dead for every one, not both")
    with _open(args) as q:
        if args.queue is not None and not args.dead:
            raise ValueError("--queue picks which dead jobs --dead retries; named jobs are retried wherever they are")
        if args.dead:
            ids = q.retry(dead=True, attempts=args.attempts, queue=args.queue)
        else:
            ids = q.retry(args.ids, attempts=args.attempts)
    _print_ids(args, "retried", ids)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    with _open(args) as q:
        ids = q.cancel(args.ids, reason=args.reason)
    _print_ids(args, "cancelled", ids)
    return 0


def _print_ids(args: argparse.Namespace, done: str, ids: list[int]) -> None:
    print(json.dumps(ids) if args.json else f"{done} {len(ids)}" + (f": {' '.join(map(str, ids))}" if ids else ""))


def cmd_check(args: argparse.Namespace) -> int:
    from .check import SHOWN, check

    # Read-only, so nothing could be created anyway; but a mistyped path deserves the hint the
    # other commands give.
    if not is_server_url(args.db) and not os.path.exists(args.db):
        raise DatabaseMissing(args.db, nearest_queue_file(args.db))
    if args.effects is not None and not os.path.isfile(args.effects):
        raise ValueError(f"--effects: no effects file at {args.effects}")
    # A report holds the first few anomalies of each kind and counts the rest: a queue of a million
    # jobs gone wrong the same way is said in a few lines, not a million.
    keep = None if args.all else SHOWN
    if args.journal is not None and not os.path.isdir(args.journal):
        raise ValueError(f"--journal: no journal folder at {args.journal}")
    options: dict[str, Any] = {} if args.backoff is None else {"backoff": args.backoff or None}
    report = check(
        args.db,
        effects=args.effects,
        lease=args.lease,
        idle=args.idle,
        keep=keep,
        max_run=args.max_run,
        journal=args.journal,
        thorough=args.thorough,
        **options,
    )
    print(json.dumps(report.to_json(), ensure_ascii=False) if args.json else report.render(args.lang, shown=keep))
    return 0 if report.clean else EXIT_ANOMALY


def cmd_simulate(args: argparse.Namespace) -> int:
    # Imported here: a worker's start must not load the simulator.
    from .sim.command import main as simulate

    return simulate(args)


def cmd_pg(args: argparse.Namespace) -> int:
    # Imported here: a worker's start must not load the harness.
    from .harness import pgcommand

    if args.action == "start":
        url, started = pgcommand.start(os.getppid() if args.owner is None else args.owner)
        print(url)
        if started and not args.quiet:
            print(
                "a throw-away PostgreSQL server: removed by `leaselab pg stop`, or when this shell ends; "
                "`leaselab pg url` prints its URL again",
                file=sys.stderr,
            )
    elif args.action == "url":
        print(pgcommand.url())
    else:
        print("stopped: its folder is removed" if pgcommand.stop() else "no server was running")
    return 0


def cmd_chaos(args: argparse.Namespace) -> int:
    # Imported here: the lab and the lessons it drives must not load with every worker's start.
    from .chaos.command import main as chaos

    return chaos(args)


# The argparse types below raise ArgumentTypeError for every bad value, so argparse prints
# "argument --lease: must be ..." and never "invalid _positive_float value" (a Python name).
INT64 = (-(2**63), 2**63 - 1)  # what both backends store in an integer column


def _seconds(text: str, minimum: float, inclusive: bool) -> float:
    bound = f"{'>=' if inclusive else '>'} {minimum:g}"
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
        raise argparse.ArgumentTypeError(f"must be a number of seconds {bound}, got {text!r}")
    return value


def _whole(text: str, minimum: int | None) -> int:
    bound = "" if minimum is None else f" >= {minimum}"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number{bound}, got {text!r}") from None
    if minimum is not None and value < minimum:
        raise argparse.ArgumentTypeError(f"must be a whole number{bound}, got {text!r}")
    if not INT64[0] <= value <= INT64[1]:
        raise argparse.ArgumentTypeError(f"must fit in 64 bits ({INT64[0]} to {INT64[1]}), got {text!r}")
    return value


def _backoff(text: str) -> Backoff | bool:
    """``--backoff``: "BASE,CAP" (seconds) as a Backoff, or "none" as False (retry delays not judged)."""
    if text.strip().lower() == "none":
        return False
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected BASE,CAP in seconds (e.g. 0.5,30) or none, got {text!r}")
    base, cap = (_seconds(part.strip(), 0, inclusive=True) for part in parts)
    try:
        return Backoff(base=base, cap=cap)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_float(text: str) -> float:
    return _seconds(text, 0, inclusive=False)


def _non_negative_float(text: str) -> float:
    return _seconds(text, 0, inclusive=True)


def _positive_int(text: str) -> int:
    return _whole(text, 1)


def _non_negative_int(text: str) -> int:
    return _whole(text, 0)


def _any_int(text: str) -> int:
    return _whole(text, None)


def _worker_name(text: str) -> str:
    # The name is written into every log line and listing: a newline in it would split them.
    if not text or has_unprintable(text):
        raise argparse.ArgumentTypeError(f"must be a non-empty name without control characters, got {text!r}")
    return text


def _queue(text: str) -> str:
    try:
        return queue_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr, like every other leaselab error."""

    # Options of which a command needs at least one (the worker: --handler, or a --queue with its own),
    # as argparse names them in its message; checked as the command line is read, as a required one is.
    one_of: tuple[str, ...] = ()

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {printable(message)}\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, rest = super().parse_known_args(args, namespace)
        if self.one_of and not any(getattr(parsed, o.lstrip("-").replace("-", "_"), None) for o in self.one_of):
            self.error(f"one of the arguments {' '.join(self.one_of)} is required")
        return parsed, rest


def _paging(p: argparse.ArgumentParser, rows: str, new: str) -> None:
    p.add_argument(
        "--after",
        type=_non_negative_int,
        default=0,
        metavar="ID",
        help=f"only the {rows} with ids greater than ID: the next page after the last id shown (default 0)",
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help=f"after the listing, keep printing new {new}, until Ctrl-C or SIGTERM (then exit 0)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="leaselab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, func) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument(
            "--db",
            default=os.environ.get("LEASELAB_DB", "leaselab.db"),
            help="queue file, or a postgresql://user@host:port/dbname URL (default: $LEASELAB_DB or leaselab.db)",
        )
        p.add_argument(
            "--busy-timeout",
            type=_positive_float,
            default=30.0,
            metavar="SECONDS",
            help="how long to wait for another process's write lock before giving up on "
            "one try (a worker then retries; default 30)",
        )
        p.set_defaults(func=func)
        return p

    p = command("enqueue", "add jobs with a JSON payload, or one job a line of a JSON-lines file", cmd_enqueue)
    p.add_argument("payload", nargs="?", default=None, help="JSON, e.g. '{\"seconds\": 2}'")
    p.add_argument(
        "--file",
        default=None,
        metavar="PATH",
        help="enqueue one job for each line of this file, each line one JSON payload ('-': standard input); "
        "a line that is not JSON is refused with its number, and nothing is written",
    )
    p.add_argument("--json", action="store_true", help="print the new ids as one JSON array")
    p.add_argument(
        "--priority", type=_any_int, default=0, metavar="N", help="a whole number; the highest runs first (default 0)"
    )
    p.add_argument(
        "--delay",
        type=_non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help="seconds from now before the jobs may be claimed (default 0)",
    )
    p.add_argument(
        "--max-attempts",
        type=_positive_int,
        default=5,
        metavar="N",
        help="claims a job gets before it is dead (default 5)",
    )
    p.add_argument("--count", type=_positive_int, default=1, metavar="N", help="how many identical jobs (default 1)")
    p.add_argument(
        "--queue",
        type=_queue,
        default=DEFAULT_QUEUE,
        metavar="NAME",
        help=f"the named queue the jobs wait in; only workers serving it claim them (default {DEFAULT_QUEUE})",
    )
    p.add_argument(
        "--key",
        default=None,
        metavar="KEY",
        help="a unique job: enqueued only if no job with this key is pending or running; else that job's id is "
        "printed, and standard error says it was already there",
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="the longest one attempt may run: past it the worker gives it up and the job is retried "
        "(default: the worker's --job-timeout, if any)",
    )
    p.add_argument(
        "--beat-timeout",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="the longest the handler may go without calling lease.beat() (default: none)",
    )
    p.add_argument(
        "--durability",
        choices=DURABILITIES,
        default="full",
        help="full: the jobs are on disk before their ids are printed; normal: faster, may lose "
        "the last ones on power loss (SQLite) or a server crash (PostgreSQL)",
    )

    p = command("worker", "run one worker process", cmd_worker)
    p.add_argument(
        "--handler",
        default=None,
        metavar="MODULE:FUNCTION",
        help="the function that runs each job, e.g. leaselab.harness.demo:task, or myh:work for "
        f"myh.py in the current folder; it serves the {DEFAULT_QUEUE} queue, or the queues named by --queue NAME",
    )
    p.add_argument(
        "--queue",
        action="append",
        default=[],
        metavar="NAME[=MODULE:FUNCTION]",
        help="a named queue to serve, by --handler or by its own handler after '='; repeat for several, "
        "e.g. --queue emails=tasks:send --queue sms=tasks:text",
    )
    p.one_of = ("--handler", "--queue")  # type: ignore[attr-defined]  # our _Parser's, as every subparser is
    p.add_argument(
        "--name", type=_worker_name, default=None, help="the name in the queue's rows and the log (default: worker-PID)"
    )
    p.add_argument(
        "--lease",
        type=_positive_float,
        default=DEFAULT_LEASE,
        metavar="SECONDS",
        help=f"how long a claim holds a job without a heartbeat; renewed every third of it (default {DEFAULT_LEASE:g})",
    )
    p.add_argument(
        "--poll",
        type=_positive_float,
        default=0.05,
        metavar="SECONDS",
        help="seconds between looks for a job while idle, at first (default 0.05)",
    )
    p.add_argument(
        "--max-poll",
        type=_positive_float,
        default=1.0,
        metavar="SECONDS",
        help="while idle the wait doubles up to this many seconds (default 1)",
    )
    p.add_argument("--exit-when-idle", action="store_true", help="exit once no job is pending or running")
    p.add_argument(
        "--schedule",
        default=None,
        metavar="FILE",
        help="also enqueue the ticks of the periodic schedules in FILE (a JSON list of "
        '{"name": ..., "every": SECONDS or "cron": "*/5 * * * *", "payload": ...}); '
        "any number of workers may run the same file: each tick is enqueued once",
    )
    p.add_argument(
        "--journal",
        default=None,
        metavar="DIR",
        help="keep a journal in DIR of what the queue told this worker (claims, acknowledged outcomes), "
        "for leaselab check --journal",
    )
    p.add_argument(
        "--durability",
        choices=DURABILITIES,
        default="full",
        help="full: claims and completions are on disk before they count; normal: faster, may lose "
        "the last ones on power loss (SQLite) or a server crash (PostgreSQL)",
    )
    p.add_argument(
        "--concurrency", type=_positive_int, default=1, help="how many jobs to run at once, on threads (default 1)"
    )
    p.add_argument(
        "--job-timeout",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="the longest one attempt may run unless its job says (enqueue --timeout): past it the job is "
        "given up and retried; a handler still running holds its slot, and a worker whose every slot is "
        f"held so exits with status {EXIT_HUNG} (default: no limit)",
    )
    p.add_argument(
        "--beat-timeout",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="the longest a handler may go without calling lease.beat(), unless its job says (default: none)",
    )
    p.add_argument(
        "--grace",
        type=_non_negative_float,
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl-C, how long the running jobs may take to finish before they are handed "
        f"back to the queue at once; a second signal hands them back now (default {DEFAULT_GRACE:g})",
    )
    p.add_argument(
        "--ignore-sigint",
        action="store_true",
        help="keep running on Ctrl-C (SIGINT); stop with SIGTERM. The lab's workers use it, "
        "so a notebook's Interrupt does not stop them",
    )

    command("reap", "move expired leases back to pending (or dead)", cmd_reap)
    p = command("stats", "count jobs by status", cmd_stats)
    p.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    per_queue = p.add_mutually_exclusive_group()
    per_queue.add_argument("--queue", type=_queue, default=None, metavar="NAME", help="count only this queue's jobs")
    per_queue.add_argument("--by-queue", action="store_true", help="one row of counts for each named queue")
    p = command("jobs", "list jobs as a table", cmd_jobs)
    p.add_argument("--status", choices=[s.value for s in Status], help="only the jobs in this status")
    p.add_argument("--queue", type=_queue, default=None, metavar="NAME", help="only the jobs of this named queue")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="one JSON object a line, every field of each job")
    shown.add_argument("--wide", action="store_true", help="cut no payload, result or error to fit the table")
    p.add_argument(
        "--limit",
        type=_non_negative_int,
        default=100,
        metavar="N",
        help="list at most this many jobs, in id order (default 100)",
    )
    _paging(p, "jobs", "jobs as they are enqueued")
    p = command("events", "show the history of transitions", cmd_events)
    p.add_argument("--job", type=_any_int, default=None, metavar="ID", help="only this job's history")
    p.add_argument(
        "--limit",
        type=_non_negative_int,
        default=None,
        metavar="N",
        help="show at most this many events, in id order (default: every one, read a page at a time)",
    )
    _paging(p, "events", "events as they are written")
    p.add_argument("--json", action="store_true", help="one JSON object a line, every field of each event")

    p = command("show", "show one job in full: its fields, its result or whole last error, and its history", cmd_show)
    p.add_argument("id", type=_any_int, metavar="ID", help="the job's id")
    p.add_argument("--json", action="store_true", help="one JSON object: the job and its events")

    p = command(
        "retry",
        "put dead jobs back to pending, runnable now, with fresh attempts (all or none: a job not dead "
        "refuses them all)",
        cmd_retry,
    )
    p.add_argument("ids", type=_any_int, nargs="*", metavar="ID", help="the dead jobs to retry")
    p.add_argument("--dead", action="store_true", help="retry every dead job")
    p.add_argument(
        "--queue", type=_queue, default=None, metavar="NAME", help="with --dead: that queue's dead jobs alone"
    )
    p.add_argument(
        "--attempts",
        type=_positive_int,
        default=1,
        metavar="N",
        help="fresh attempts each job gets on top of those it used (default 1): its attempt count is kept, "
        "so every later claim's fence is still new",
    )
    p.add_argument("--json", action="store_true", help="print the retried ids as one JSON array")

    p = command(
        "cancel",
        "cancel pending or running jobs: each is dead at once; a running one's worker is refused its next "
        "write and its handler stops at its next lease check (all or none)",
        cmd_cancel,
    )
    p.add_argument("ids", type=_any_int, nargs="+", metavar="ID", help="the jobs to cancel")
    p.add_argument(
        "--reason",
        default="cancelled by hand",
        help="the history's detail and the job's last error (default: %(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print the cancelled ids as one JSON array")

    p = command("check", "check that a run kept every promise: exit 0 clean, 1 if it found an anomaly", cmd_check)
    p.add_argument(
        "--effects",
        default=None,
        metavar="FILE",
        help="the handlers' effects file (what record_effect wrote), to find repeated effects",
    )
    p.add_argument(
        "--journal",
        default=None,
        metavar="DIR",
        help="the workers' journals (leaselab worker --journal DIR): find fences handed out twice and "
        "acknowledged outcomes the server no longer has",
    )
    p.add_argument(
        "--lease",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="the lease the workers used, to time the reaps (default: what the history shows)",
    )
    ended = p.add_mutually_exclusive_group()
    ended.add_argument(
        "--idle",
        action="store_true",
        help="the run ended with the workers idle: a job still running is lost, or stuck once its lease ran "
        "out, and a pending job that could run is stuck (default: workers may still be at work, or none started)",
    )
    ended.add_argument(
        "--still-running",
        action="store_true",
        help="the workers may still be at work (the default): a job not finished is not lost, a pending "
        "job is not stuck, and only a lease that ran out a minute ago is stuck",
    )
    p.add_argument(
        "--backoff",
        type=_backoff,
        default=None,
        metavar="BASE,CAP",
        help="the backoff the queue used, in seconds, by which the specification judges when a retried job may "
        "run again, e.g. 0.5,30; 'none': do not judge retry delays (default: a queue's own, 1,60)",
    )
    p.add_argument(
        "--max-run",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="a job still running an attempt claimed longer ago than this is hung, however many heartbeats "
        "renewed it (default: not looked for; attempts given up at their timeout are named either way)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="show every anomaly with its witnesses (default: the first three of each kind, and how many more)",
    )
    p.add_argument(
        "--thorough",
        action="store_true",
        help="read and judge every job in Python, the common histories too (default: those are judged and "
        "counted inside the database); the same report, slower",
    )
    p.add_argument("--json", action="store_true", help="the report as JSON, for programs")
    p.add_argument("--lang", choices=LANGS, default="en", help="the report's language (default en)")

    p = sub.add_parser(
        "pg",
        help="start, show or stop a throw-away PostgreSQL server to try the queue on",
        description="start: a throw-away PostgreSQL server, its database's URL printed (for --db); it is removed "
        "on `leaselab pg stop`, or when the shell that started it ends. url: print that URL again. stop: stop it "
        "and remove its folder.",
    )
    p.set_defaults(func=cmd_pg)
    p.add_argument(
        "action",
        choices=("start", "url", "stop"),
        help="start a server and print its URL, print that URL again, or stop it and remove its folder",
    )
    p.add_argument(
        "--owner",
        type=_positive_int,
        default=None,
        metavar="PID",
        help="start: the process whose end removes the server (default: the shell that ran the command)",
    )
    p.add_argument("--quiet", action="store_true", help="start: print the URL alone")

    p = command(
        "chaos",
        "run real workers under a seeded fault schedule, then check what the queue kept (exit 0 clean, 1 broken)",
        cmd_chaos,
    )
    p.add_argument("--handler", required=True, help="module:function, e.g. leaselab.harness.demo:task")
    p.add_argument(
        "--workers", type=_positive_int, metavar="N", default=4, help="worker processes kept running (default 4)"
    )
    p.add_argument(
        "--concurrency", type=_positive_int, metavar="N", default=1, help="jobs each worker runs at once (default 1)"
    )
    p.add_argument("--jobs", type=_positive_int, metavar="N", default=500, help="how many jobs (default 500)")
    p.add_argument(
        "--seconds",
        type=_positive_float,
        metavar="SECONDS",
        default=60.0,
        help="how long the faults go on (default 60)",
    )
    p.add_argument(
        "--lease",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="the workers' lease in seconds (default 1)",
    )
    p.add_argument(
        "--faults",
        default=None,
        help="comma-separated faults (default: every one this queue can have); an unknown one is refused with the list",
    )
    p.add_argument(
        "--seed", type=_any_int, default=None, metavar="N", help="replay a run's schedule (default: a random seed)"
    )
    p.add_argument(
        "--replication",
        default=None,
        metavar="sync|async",
        help="with --faults failover: the throw-away primary's replication to its standby (default sync); async "
        "holds the standby behind before each failover",
    )
    p.add_argument("--payload", default="{}", help="every job's JSON payload (default {})")
    p.add_argument("--out", default=None, help="the run's folder: logs, effects, journals (default: beside the queue)")
    p.add_argument("--json", action="store_true", help="the result as one JSON document on stdout")
    p.add_argument("--lang", choices=LANGS, default="en", help="the language it speaks (default en)")

    # Its numbers are checked by the command, not by argparse, so a bad one is said in --lang's language.
    p = sub.add_parser(
        "simulate",
        help="run this leaselab's queue and worker decisions on virtual time under many fault schedules "
        "(exit 0 clean, 1 with a shrunk witness, 2 on a usage error)",
        description="Run this leaselab's real queue statements and worker decisions on virtual time under "
        "seeded or exhaustive fault schedules, checking every step against the specification. Exit 0 when "
        "every promise held, 1 with the shortest schedule found that breaks one, 2 on a usage error.",
    )
    p.set_defaults(func=cmd_simulate)
    p.add_argument("--seed", default=None, metavar="N", help="the first schedule's seed (default 0)")
    p.add_argument(
        "--seconds", default=None, metavar="S", help="search for this many seconds (default 10 when no --schedules)"
    )
    p.add_argument(
        "--schedules",
        default=None,
        metavar="N",
        help="run this many schedules; with --exhaustive, explore at most this many distinct states (default 500)",
    )
    p.add_argument("--exhaustive", action="store_true", help="every schedule of the scope, states already seen skipped")
    p.add_argument("--workers", default=None, metavar="N", help="workers in the scenario (default 2)")
    p.add_argument("--jobs", default=None, metavar="N", help="jobs in the scenario (default 2)")
    p.add_argument(
        "--faults",
        default=None,
        metavar="LIST",
        help="comma-separated faults to strike, of crash, pause, cut, delay, lose, power, hang, suspend, jump "
        "(default: all but power, hang, suspend and jump; '' for none); hang gives the jobs a timeout of 1.2 leases",
    )
    p.add_argument(
        "--durability",
        default=None,
        metavar="{full,normal}",
        help="the queue's durability where the power can fail (with power in --faults; default full): at normal "
        "a power cut may take back acknowledged writes, and the simulator shows which",
    )
    p.add_argument("--replay", default=None, metavar="FILE", help="run a saved witness again, step for step")
    p.add_argument(
        "--save", default=None, metavar="FILE", help="where to save a witness (default leaselab-witness.json)"
    )
    p.add_argument(
        "--handler",
        default=None,
        metavar="MODULE:FUNCTION",
        help="run your handler in the simulated world and report effect_repeated if it is not idempotent",
    )
    p.add_argument(
        "--mutant", default=None, metavar="NAME", help="plant one shipped bug, to see it caught ('list' lists them)"
    )
    p.add_argument("--list-mutants", action="store_true", help="list the shipped mutants and exit")
    p.add_argument("--json", action="store_true", help="the result as one JSON object on stdout")
    p.add_argument("--lang", choices=LANGS, default="en", help="the language it speaks (default en)")
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
