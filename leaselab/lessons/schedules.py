"""Lesson 9's props: every interleaving of two claims, and the simulator's findings as a reader sees them.

``every_schedule`` runs every order in which a few workers' claim steps can interleave, each step
one real SQLite statement on its own connection to a fresh copy of one file, and says which orders
gave a job to two workers: lesson 2's naive claim (a SELECT, then an UPDATE) against leaselab's
claim (one statement). ``story`` prints a simulated run in the lesson's language and ``picture`` puts
it on the lab's timeline, both from ``leaselab.sim.report``; ``edited`` makes a ``Mutant`` of a
reader's copy of one statement, ``runs_statement`` says whether the simulated workers run a
statement at all, and ``sql_error`` whether SQLite can prepare a copy.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends.sqlite import statements
from ..clock import ManualClock
from ..errors import LeaselabError
from ..job import Job
from ..lab.timeline import Bar, Fault, Mark, Timeline
from ..queue import Queue
from ..sim import explore, report
from ..sim.mutants import Mutant, planted
from ..sim.world import Scenario
from .texts import text
from .wrong import NaiveClaimer

CLAIMS = ("naive", "single")  # lesson 2's two-statement claim, and leaselab's one statement
STEPS = {"naive": ("select", "update"), "single": ("claim",)}  # one real statement each
START = 1_000.0  # the queue's clock, the same for the enqueue and every step
LEASE = 30.0  # long enough that no lease ends during an interleaving: only the order matters

# The zombie of lesson 3 in the smallest scope that holds it: two workers, one job, and one fault,
# a call held in the network (sent while the lease is valid, applied later).
ZOMBIE = Scenario(workers=2, jobs=1, faults=("delay",), max_faults=1)
ZOMBIE_SCHEDULES = 3000
# A worker's own deadline against a clock that stops: every schedule of two workers, one job and one fault, nine
# actions deep, with the fence out of the completion. A pause, which the worker's clock counts, and a suspend of
# its host, which a clock that stops while the host sleeps does not (explore.exhaustive: states, not seconds).
SLEEP_FAULTS = ("pause", "suspend")
SLEEP = {fault: Scenario(workers=2, jobs=1, faults=(fault,), max_faults=1) for fault in SLEEP_FAULTS}
SLEEP_DEPTH = 9
# The exercise's budget: schedules of explore.hunt's portfolio, never seconds, so the answer is the same on
# any machine, however busy.
CHECK_SCHEDULES = 500
# Schedules a shrink replays at most (its time is unbounded): the same witness on any machine.
SHRINK_TRIES = 400
# The text put in place of a statement to learn whether the simulated workers run it.
CANNOT_RUN = "SELECT leaselab_no_such_function()"


@dataclass(frozen=True)
class Step:
    """One statement of one interleaving: who ran it, which (``select``, ``update`` or ``claim``), what it got."""

    worker: str
    kind: str
    job: int | None  # the job it saw or took; None: none
    attempt: int | None = None  # the attempt an update or claim wrote


@dataclass(frozen=True)
class Interleaving:
    """One order of the workers' steps, run: the steps as they went, and which jobs more than one worker took."""

    steps: tuple[Step, ...]
    doubled: tuple[int, ...]  # jobs claimed by two or more workers

    @property
    def bad(self) -> bool:
        return bool(self.doubled)


def orders(workers: int, steps: int) -> Iterator[tuple[int, ...]]:
    """Every order of ``workers`` workers' ``steps`` steps each (worker numbers, each ``steps`` times), each
    worker's own steps in their order: (workers·steps)! / (steps!)^workers of them, in lexicographic order."""
    left = [steps] * workers

    def grow(prefix: list[int]) -> Iterator[tuple[int, ...]]:
        if not any(left):
            yield tuple(prefix)
            return
        for w in range(workers):
            if left[w]:
                left[w] -= 1
                prefix.append(w)
                yield from grow(prefix)
                prefix.pop()
                left[w] += 1

    yield from grow([])


def worker_names(workers: int) -> list[str]:
    """A, B, C, ...: the workers of lesson 2."""
    return [chr(ord("A") + i) for i in range(workers)]


def every_schedule(folder: str | Path, claim: str = "naive", workers: int = 2, jobs: int = 1) -> list[Interleaving]:
    """Run every interleaving of ``workers`` workers' claims on ``jobs`` pending jobs, each on a fresh copy
    of one SQLite file in ``folder``, each worker on its own connection; in ``orders`` order."""
    if claim not in CLAIMS:
        raise ValueError(f"claim must be one of {', '.join(CLAIMS)}; got {claim!r}")
    folder = Path(folder)
    template = folder / f"every-{claim}-{workers}-{jobs}.db"
    template.unlink(missing_ok=True)
    with Queue(template, clock=ManualClock(start=START)) as q:
        q.enqueue_many([f"job {i + 1}" for i in range(jobs)])
    names = worker_names(workers)
    done = []
    for order in orders(workers, len(STEPS[claim])):
        path = folder / "interleaving.db"
        shutil.copyfile(template, path)
        done.append(_run_order(path, claim, names, order))
        path.unlink()
    template.unlink()
    return done


def _run_order(path: Path, claim: str, names: list[str], order: tuple[int, ...]) -> Interleaving:
    clock = ManualClock(start=START)  # the clock stands still: every job is runnable, no lease ends
    taken: dict[int, list[str]] = {}
    steps: list[Step] = []
    if claim == "naive":
        claimers = [NaiveClaimer(path, name, lease=LEASE, clock=clock) for name in names]
        seen: dict[int, int | None] = {}
        try:
            for w in order:
                if w not in seen:  # its first step: look
                    seen[w] = claimers[w].select()
                    steps.append(Step(names[w], "select", seen[w]))
                elif seen[w] is None:  # nothing to take: its second step writes nothing
                    steps.append(Step(names[w], "update", None))
                else:
                    job = claimers[w].update(seen[w])  # type: ignore[arg-type]
                    taken.setdefault(job.id, []).append(names[w])
                    steps.append(Step(names[w], "update", job.id, job.attempts))
        finally:
            for c in claimers:
                c.close()
    else:
        queues = [Queue(path, clock=clock) for _ in names]
        try:
            for w in order:
                got: Job | None = queues[w].claim(names[w], LEASE)
                if got is not None:
                    taken.setdefault(got.id, []).append(names[w])
                steps.append(Step(names[w], "claim", *((got.id, got.attempts) if got else (None, None))))
        finally:
            for q in queues:
                q.close()
    return Interleaving(tuple(steps), tuple(sorted(j for j, who in taken.items() if len(who) > 1)))


def numbered_steps(interleaving: Interleaving, lang: str = "en") -> list[str]:
    """An interleaving as numbered lines in ``lang``: who ran which statement and what it saw or took."""
    lines = []
    for i, s in enumerate(interleaving.steps, 1):
        if s.job is None:
            key = f"l8_{s.kind}_none"
            lines.append(text(key, lang, n=i, worker=s.worker))
        else:
            lines.append(text(f"l8_{s.kind}", lang, n=i, worker=s.worker, job=s.job, attempt=s.attempt))
    return lines


# -- the simulator's runs, as the lesson shows them ---------------------------------------------------------


def story(run: explore.Run, lang: str = "en") -> list[str]:
    """A simulated run as the lesson prints it: its numbered steps in ``lang`` (``report.steps``, which ends
    with the broken promise), or, when every promise held, those steps and a line that says so. Times in
    milliseconds and the promise by its kind's words, so both languages print the same facts, as Russian
    writes them."""
    lines = report.steps(run, lang, ms=True, titled=True)
    if run.violation is None:
        lines.append(text("l8_held", lang))
    return lines


def picture(run: explore.Run) -> Timeline:
    """A simulated run on the lab's timeline: ``report.spans``' attempts, reaps, refusals and faults, in virtual
    seconds. What the lab has no shape for (a call held in flight, a reply lost, the broken promise) is left
    out: ``story`` names them."""
    data = report.spans(run)
    return Timeline(
        lanes=data["lanes"],
        bars=[Bar(**bar) for bar in data["bars"]],
        marks=[Mark(**mark) for mark in data["marks"]],
        faults=[Fault(**fault) for fault in data["faults"]],
        t0=data["t0"],
        t1=data["t1"],
    )


# -- a mutant of the reader's own ------------------------------------------------------------------------


def edited(name: str, copy: str, breaks: str = "the reader's own change") -> Mutant:
    """A mutant that replaces statement ``name`` (of ``leaselab.backends.sqlite.statements``) with ``copy``."""
    original = getattr(statements, name, None)
    if not isinstance(original, str) or not name.isupper():
        raise ValueError(f"no statement named {name!r} in leaselab.backends.sqlite.statements")
    return Mutant(f"edited_{name.lower()}", breaks, (((name,), original, copy),))


def runs_statement(name: str, portfolio: tuple[Scenario, ...] = explore.PORTFOLIO, seed: int = 0) -> bool:
    """True when a simulated run (seed ``seed``) of any scenario of ``portfolio`` runs statement ``name``: with
    its text made one that cannot run, the queue raises, and the simulator reports it."""
    with planted(edited(name, CANNOT_RUN, "a statement that cannot run")):
        for scenario in portfolio:
            try:
                run = explore.run(scenario, seed)
            except LeaselabError:
                return True
            if run.violation is not None and "leaselab_no_such_function" in run.violation.message:
                return True
    return False


def sql_error(copy: str) -> str | None:
    """What SQLite says when it cannot prepare ``copy`` (a syntax error, a column or a function that does not
    exist) on a fresh in-memory queue, with leaselab's schema and functions; None when it can. Nothing runs:
    the statement is only explained."""
    with Queue(":memory:") as q:
        backend: Any = q.backend  # the SQL backends' escape hatch, run(statement, params), as mutants use it
        try:
            backend.run("EXPLAIN " + copy, dict.fromkeys(re.findall(r":(\w+)", copy)))
        except LeaselabError as exc:
            return str(exc)
    return None
