"""A chaos run: real workers (the lab's ``Fleet``), the jobs, a seeded fault schedule, a bounded drain, the checker.

::

    result = run("chaos.db", "leaselab.harness.demo:task", workers=4, jobs=500, seconds=30, seed=7)
    print(result.render())            # the faults applied, then the checker's report
    result.clean                      # no anomaly, the queue drained, no acknowledged job missing
    result.faults_overlapping_attempts  # the faults that hit a running attempt: 0, and it proved nothing

A quarter of the jobs go in before the workers start, the rest in batches over the first
eight tenths of the faults, so the faults hit a busy queue throughout. Everything the run
leaves is in its folder: ``logs/`` (one file per worker process), ``actions.jsonl`` (what
the fleet did to them), ``effects.jsonl`` (what handlers recorded with
``leaselab.check.record_effect``; every worker has it in ``LEASELAB_EFFECTS``), ``journal/``
(each worker's journal of what the queue told it, which the checker judges the server's history
by: ``leaselab check --journal``). Whatever happens, Ctrl-C included, every worker is stopped
before ``run`` returns or raises.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..arguments import integer, positive
from ..backends import is_server_url
from ..check import Report, check_history, load
from ..errors import TransientError
from ..harness.fleet import DEFAULT_HANDLER, Fleet, WorkerStatus, files_prefix
from ..queue import Queue
from ..worker import load_handler
from . import overlap
from .errors import QueueNotEmpty, ServerNotRecovered
from .failover import Failover
from .nemesis import Applied, Nemesis, Slots, run_in_thread
from .schedule import FAULTS, Schedule, applicable, plan, slots
from .texts import text

DEFAULT_LEASE = 1.0
# Bounds on the load one run may put on a machine: a typo must not start a thousand processes.
MAX_WORKERS, MAX_CONCURRENCY, MAX_JOBS, MAX_SECONDS = 32, 16, 100_000, 3600.0
UP_FRONT = 0.25  # of the jobs, enqueued before the first worker starts
FEED_OVER = 0.8  # the rest go in over this part of the faults' time ...
BATCH = 50  # ... this many at a time
GRACE = 10.0  # seconds a worker gets to finish its job at the end before SIGKILL
JOURNAL = "journal"  # the run folder's folder of the workers' journals
EFFECTS_ENV = "LEASELAB_EFFECTS"  # where leaselab.check.record_effect appends, as that module reads it


@dataclass(frozen=True)
class Progress:
    """How a run stands: seconds since the faults began, jobs finished (done or dead), faults applied."""

    elapsed: float
    finished: int
    total: int
    faults: int
    by_fault: dict[str, int]

    def render(self, lang: str = "en") -> str:
        detail = "".join(f", {text('label_' + f, lang)} {n}" for f, n in self.by_fault.items())
        return text(
            "progress",
            lang,
            elapsed=self.elapsed,
            done=self.finished,
            total=self.total,
            faults=self.faults,
            detail=f" ({detail[2:]})" if detail else "",
        )


class ProgressLines:
    """Hands each ``Progress`` on to ``progress``, except a closing one that would repeat the last.

    The closing line is dropped only when it says what the line before it said (the same jobs
    finished, the same faults), never for coming soon after it: a line printed a moment before the
    last job finished must not stand as the run's last word.
    """

    def __init__(self, progress: Callable[[Progress], None] | None) -> None:
        self.progress = progress
        self.shown: Progress | None = None

    def show(self, now: Progress, *, last: bool = False) -> None:
        if self.progress is None:
            return
        if (
            last
            and self.shown is not None
            and (self.shown.finished, self.shown.by_fault) == (now.finished, now.by_fault)
        ):
            return
        self.shown = now
        self.progress(now)


@dataclass
class ChaosResult:
    """What a run did and what the checker found. ``clean``: no anomaly, drained, nothing acknowledged missing."""

    schedule: Schedule
    report: Report
    applied: list[Applied]
    hits: list[int]  # for each applied fault, how many running attempts it hit (``overlap.hit``)
    drained: bool
    drain_timeout: float
    missing: int  # acknowledged enqueues that are not in the jobs table
    stats: dict[str, int]  # the jobs table by status at the end
    enqueued: int
    workers: list[WorkerStatus]  # every worker process of the run, as the fleet saw it at the end
    killed: list[str]  # the processes a kill step ended
    folder: Path
    seconds: float  # how long the run took, start to checked
    effects: Path = field(default=Path())

    @property
    def clean(self) -> bool:
        return self.report.clean and self.drained and self.missing == 0

    def fault_counts(self) -> dict[str, int]:
        """Faults really applied, by kind, in ``FAULTS`` order."""
        done = [a.step.fault for a in self.applied if a.missed is None]
        return {f: n for f in FAULTS if (n := done.count(f))}

    @property
    def faults_overlapping_attempts(self) -> int:
        """How many of the faults applied hit a running attempt: with none, a clean run proved nothing about faults."""
        return sum(1 for n in self.hits if n)

    @property
    def replies_dropped(self) -> int:
        return sum(w.replies_dropped for w in self.workers)

    def verdict(self, lang: str = "en") -> str:
        """The report's headline, unless every promise held while no fault hit a running attempt: then that, said."""
        if not self.report.clean or self.faults_overlapping_attempts:
            return self.report.headline(lang)
        key = "toothless" if self.fault_counts() else "toothless_no_faults"
        return self.report.unchecked(text(key, lang, tally=self.report.tally(lang)), lang)

    def render(self, lang: str = "en") -> str:
        counts = self.fault_counts()
        detail = "".join(f", {text('label_' + f, lang)} {n}" for f, n in counts.items())
        faults = sum(counts.values())
        lines = [
            text(
                "summary",
                lang,
                faults=faults,
                detail=f" ({detail[2:]})" if detail else "",
                workers=len(self.workers),
                dropped=self.replies_dropped,
            )
        ]
        if faults:
            lines.append(text("hits", lang, faults=faults, hit=self.faults_overlapping_attempts))
        lines += [
            text("missed", lang, at=a.at, fault=a.step.fault, worker=a.step.worker or "", why=a.missed)
            for a in self.applied
            if a.missed is not None
        ]
        if not self.drained:
            lines.append(
                text(
                    "not_drained",
                    lang,
                    seconds=self.drain_timeout,
                    pending=self.stats.get("pending", 0),
                    running=self.stats.get("running", 0),
                )
            )
        if self.missing:
            lines.append(text("missing", lang, n=self.missing))
        # The report's first line is its headline: the verdict takes its place.
        lines += [self.verdict(lang), *self.report.render(lang).split("\n")[1:]]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "clean": self.clean,
            "seed": self.schedule.seed,
            "schedule": self.schedule.to_json(),
            "applied": [
                {
                    "at": round(a.at, 3),
                    "fault": a.step.fault,
                    "worker": a.step.worker,
                    "process": a.process,
                    "missed": a.missed,
                    "until": None if a.until is None else round(a.until, 3),
                    "attempts_hit": n,
                }
                for a, n in zip(self.applied, self.hits, strict=True)
            ],
            "faults": self.fault_counts(),
            "faults_overlapping_attempts": self.faults_overlapping_attempts,
            "replies_dropped": self.replies_dropped,
            "drained": self.drained,
            "missing": self.missing,
            "enqueued": self.enqueued,
            "stats": self.stats,
            "workers": len(self.workers),
            "killed": self.killed,
            "seconds": round(self.seconds, 3),
            "folder": str(self.folder),
            "report": self.report.to_json(),
        }


def _jobs(jobs: int | Sequence[dict], payload: Any) -> list[dict]:
    if isinstance(jobs, int) and not isinstance(jobs, bool):
        return [{"payload": payload}] * int(_at_most("jobs", integer("jobs", jobs, 1), MAX_JOBS))
    if isinstance(jobs, (str, bytes)) or not isinstance(jobs, Sequence) or not jobs:
        raise TypeError(f"jobs must be a count or a non-empty list of enqueue() arguments, got {jobs!r}")
    for kw in jobs:
        if not isinstance(kw, dict) or "payload" not in kw:
            raise TypeError(f"each job must be a dict of enqueue() arguments with a 'payload', got {kw!r}")
    return list(jobs)


def _at_most(name: str, value: float, limit: float) -> float:
    if value > limit:
        raise ValueError(f"{name} must be at most {limit:g}, got {value!r}")
    return value


def _concurrencies(concurrency: int | Iterable[int]) -> tuple[int, ...]:
    values = (concurrency,) if isinstance(concurrency, int) else tuple(concurrency)
    if not values:
        raise ValueError("concurrency must be a number of slots or a non-empty list of them")
    return tuple(int(_at_most("concurrency", integer("concurrency", c, 1), MAX_CONCURRENCY)) for c in values)


def _fresh(folder: Path) -> None:
    """A run folder holds one run: what an earlier run left in it is removed (only what a run writes)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("effects.jsonl", "actions.jsonl"):
        (folder / name).unlink(missing_ok=True)
    for sub in ("logs", "clock", JOURNAL):
        shutil.rmtree(folder / sub, ignore_errors=True)


def _enqueue(q: Queue, batch: list[dict]) -> int:
    if all(kw.keys() == {"payload"} for kw in batch):
        return len(q.enqueue_many([kw["payload"] for kw in batch]))
    for kw in batch:
        q.enqueue(**kw)
    return len(batch)


def run(
    target: str | os.PathLike,
    handler: str = DEFAULT_HANDLER,
    *,
    workers: int = 4,
    concurrency: int | Iterable[int] = 1,
    jobs: int | Sequence[dict] = 500,
    payload: Any = None,
    seconds: float = 60.0,
    lease: float = DEFAULT_LEASE,
    faults: Iterable[str] | str | None = None,
    seed: int | None = None,
    server: Any = None,
    servers: Any = None,
    folder: str | os.PathLike | None = None,
    drain_timeout: float | None = None,
    on_start: Callable[[Schedule], None] | None = None,
    progress: Callable[[Progress], None] | None = None,
    progress_every: float = 2.0,
    env: dict[str, str] | None = None,
) -> ChaosResult:
    """Run ``handler`` on real workers under a seeded fault schedule, then check what the queue kept.

    ``target`` is an empty queue: a SQLite path or a ``postgresql://`` URL (a queue that already
    holds jobs raises ``QueueNotEmpty``: the checker judges every job in it). ``jobs`` is a count
    of ``payload`` jobs, or a list of ``Queue.enqueue`` keyword arguments. ``faults`` defaults to
    every fault the queue can have (``schedule.applicable``); ``server`` is a ``PgServer`` that
    the caller started for this run, which ``server-crash`` may crash; ``servers`` is a started
    ``Replicated`` (``failover.replicated``) whose multi-host URL is ``target``, which ``failover``
    fails over (``failover`` says how). ``on_start`` gets the
    schedule before any worker starts; ``progress`` gets a ``Progress`` every ``progress_every``
    seconds. The drain after the faults waits at most ``drain_timeout`` (default: the longer of
    60 s and ``seconds``). ``env`` adds to every worker's environment (a ``PYTHONPATH`` to the
    folder of a handler of one's own, say).
    """
    target = os.fspath(target)
    load_handler(handler)  # a handler that does not import fails here, before anything starts
    workers = int(_at_most("workers", integer("workers", workers, 1), MAX_WORKERS))
    concurrencies = _concurrencies(concurrency)
    job_list = _jobs(jobs, payload)
    _at_most("jobs", len(job_list), MAX_JOBS)  # a list, too
    seconds = _at_most("seconds", positive("seconds", seconds), MAX_SECONDS)
    lease = positive("lease", lease)
    drain_timeout = max(60.0, seconds) if drain_timeout is None else positive("drain_timeout", drain_timeout)
    progress_every = positive("progress_every", progress_every)
    chosen = applicable(
        faults, server=is_server_url(target), own_server=server is not None, replicated=servers is not None
    )
    seed = secrets.randbelow(2**32) if seed is None else integer("seed", seed, 0)
    schedule = plan(seed, seconds=seconds, workers=workers, lease=lease, faults=chosen)

    with Queue(target) as q:
        held = sum(q.stats().values())
    if held:
        raise QueueNotEmpty(
            f"the queue already holds {held} jobs; chaos checks every job in its queue, "
            "so give it an empty one (a new file, or a new database)"
        )
    folder = Path(folder) if folder is not None else Path(files_prefix(target) + ".chaos")
    _fresh(folder)
    effects = folder / "effects.jsonl"
    journal = folder / JOURNAL
    journal.mkdir()
    if on_start is not None:
        on_start(schedule)

    started = time.monotonic()
    server_lock = threading.Lock()
    # A replicated server's URL names every host: a worker's proxy stands for one, so none is made.
    fleet = Fleet(
        target,
        log_dir=folder / "logs",
        actions_file=folder / "actions.jsonl",
        grace=GRACE,
        proxies=servers is None,
    )
    clock_dir = None
    if "clock" in chosen:
        clock_dir = folder / "clock"
        clock_dir.mkdir()
    pool = Slots(
        fleet,
        slots(workers),
        handler=handler,
        lease=lease,
        concurrency=concurrencies,
        env={**(env or {}), EFFECTS_ENV: str(effects)},
        clock_dir=clock_dir,
        journal=journal,
    )
    failover = None
    if servers is not None:
        fleet_slots = sum(concurrencies[i % len(concurrencies)] for i in range(workers))
        failover = Failover(servers, journal, fleet_slots)
    nemesis = Nemesis(schedule, pool, server=server, server_lock=server_lock, failover=failover)
    first, rest = job_list[: max(1, int(len(job_list) * UP_FRONT))], job_list[max(1, int(len(job_list) * UP_FRONT)) :]
    enqueued = [0]
    fed: list[BaseException] = []
    feeding_done = threading.Event()
    stop = threading.Event()
    watch = Queue(target)
    try:
        # The queue's clock minus this one: the events are on the queue's clock (the server's, on a
        # server), the faults on this process's monotonic clock, counted from when the nemesis began.
        queue_minus_monotonic = watch.clock() - time.monotonic()
        enqueued[0] += _enqueue(fleet.queue, first)
        for slot in pool.names:
            pool.fill(slot)
        t0 = time.monotonic()
        batches = [rest[i : i + BATCH] for i in range(0, len(rest), BATCH)]

        def feed() -> None:
            # Its own thread and connections: a worker frozen while holding SQLite's write lock can
            # only be thawed by the nemesis, which must never be the one waiting for that lock.
            try:
                for i, batch in enumerate(batches):
                    if stop.wait(max(0.0, t0 + seconds * FEED_OVER * i / len(batches) - time.monotonic())):
                        return
                    with server_lock, Queue(target) as feeder:
                        enqueued[0] += _enqueue(feeder, batch)
            except BaseException as exc:  # re-raised on the run's thread
                fed.append(exc)
            finally:
                feeding_done.set()

        feeder = threading.Thread(target=feed, name="chaos-feeder", daemon=True)
        feeder.start()
        thread, raised = run_in_thread(nemesis)
        last = {"pending": len(job_list), "running": 0}

        def look() -> dict[str, int]:
            try:
                last.update(watch.stats())
            except TransientError:  # the server is down this moment: the last look stands
                pass
            return last

        lines = ProgressLines(progress)

        def report_progress(last: bool = False) -> None:
            if progress is None:
                return
            counts = look()
            applied = [a.step.fault for a in list(nemesis.applied) if a.missed is None]
            lines.show(
                Progress(
                    time.monotonic() - t0,
                    counts.get("done", 0) + counts.get("dead", 0),
                    len(job_list),
                    len(applied),
                    {f: n for f in FAULTS if (n := applied.count(f))},
                ),
                last=last,
            )

        next_report = time.monotonic() + progress_every
        while thread.is_alive() or feeder.is_alive():
            thread.join(timeout=min(0.2, max(0.0, next_report - time.monotonic())))
            if time.monotonic() >= next_report:
                report_progress()
                next_report += progress_every
        if raised:
            raise raised[0]
        down = [a for a in nemesis.applied if a.step.fault == "server-crash" and a.missed is not None]
        if servers is not None and not servers.primary.running:
            broke = [a for a in nemesis.applied if a.step.fault == "failover" and a.missed is not None]
            raise ServerNotRecovered(
                "a failover left no primary running" + (f": {broke[-1].missed}" if broke else "")
            ) from (fed[0] if fed else None)
        if down:  # the server stayed down: whatever failed after (the feeder, say) failed for that
            raise ServerNotRecovered(
                f"the server crashed at {down[0].at:.1f}s did not start again: {down[0].missed}"
            ) from (fed[0] if fed else None)
        if fed:
            raise fed[0]
        deadline = time.monotonic() + drain_timeout
        drained = False
        while True:
            counts = look()
            if counts.get("pending", 0) + counts.get("running", 0) == 0:
                drained = True
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
            if time.monotonic() >= next_report:
                report_progress()
                next_report += progress_every
        report_progress(last=True)
    finally:
        stop.set()
        nemesis.stop()
        fleet.shutdown()
        watch.close()
    final = fleet.status()
    stats = fleet.queue.stats()
    fleet.queue.close()
    history = load(target, effects=effects)
    report = check_history(history, lease=lease, idle=drained, journal=journal)
    missing = max(0, enqueued[0] - sum(stats.values()))
    applied = list(nemesis.applied)
    running = overlap.attempts(history.events)
    origin = queue_minus_monotonic + (nemesis.started or 0.0)  # no start: nothing was applied
    hits = [len(overlap.hit(a, origin, running)) for a in applied]
    return ChaosResult(
        schedule=schedule,
        report=report,
        applied=applied,
        hits=hits,
        drained=drained,
        drain_timeout=drain_timeout,
        missing=missing,
        stats=stats,
        enqueued=enqueued[0],
        workers=final,
        killed=list(pool.killed),
        folder=folder,
        seconds=time.monotonic() - started,
        effects=effects,
    )
