"""The history checker: did a run keep every promise? Named anomalies, each with its job and its witness.

``check("lab.db")`` (or a ``postgresql://`` URL) reads what the run left behind (the
``jobs`` table, the ``events`` the triggers wrote, and optionally the handlers' effects)
with the raw driver, never through ``Queue``, and returns a ``Report``::

    report = check("lab.db", effects="effects.jsonl", lease=5)
    report.clean                  # True when no promise was broken
    print(report.render("ru"))    # "все обещания сдержаны: 40 задач, ..."

Handlers record their outside effects with ``record_effect(job, key=...)``; a user's own
store is checked through a callable that lists the effects it holds. The modules:
``history`` (the raw read), ``rules`` (one function per promise), ``effects`` (the effect
record), ``report`` and ``texts`` (what a person or a program is told).
This layer imports only leaselab's core, and psycopg only for a server URL.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from ..arguments import integer, positive
from ..backoff import Backoff
from ..words import LANGS
from .effects import ENV, EffectSource, effects_from, read_effects, record_effect
from .history import History, Snapshot, in_memory, load, snapshot
from .journal import JournalSource, journal_anomalies, read_journal, with_journal
from .report import KINDS, NOTES, SHOWN, Anomaly, Report
from .walk import walk

# What a queue made without a backoff of its own uses, as every ``leaselab worker`` does.
QUEUE_BACKOFF = Backoff()

__all__ = [
    "Anomaly",
    "ENV",
    "History",
    "KINDS",
    "LANGS",
    "NOTES",
    "Report",
    "SHOWN",
    "check",
    "check_history",
    "load",
    "read_effects",
    "snapshot",
    "record_effect",
]


def check(
    target: str | os.PathLike,
    *,
    effects: EffectSource = None,
    lease: float | None = None,
    idle: bool = True,
    now: float | None = None,
    runs_recorded: bool = False,
    vanished: Iterable[str] = (),
    backoff: Backoff | None = QUEUE_BACKOFF,
    keep: int | None = None,
    max_run: float | None = None,
    journal: JournalSource = None,
    thorough: bool = False,
) -> Report:
    """Check the run that ``target`` (a SQLite file path or a ``postgresql://`` URL) holds.

    ``effects``: None, an effects file, or a callable returning the effect dicts a store
    holds. ``lease``: the lease in seconds the workers used, to time the reaps (None: what
    the history shows, else those checks are skipped and the report says so). ``idle``: the
    run ended with the workers idle, so a job neither done nor dead is lost or stuck.
    ``now`` replaces the database's clock. ``runs_recorded``: the handler records an effect
    in every run (as ``leaselab.harness.demo:task`` does), so a done or dead job with no run
    of its own is an anomaly; ``vanished`` names the workers killed, whose claims may end
    unrun. ``backoff``: the queue's, by which the specification judges when a retried job may run again
    (default: a queue's own default, as ``leaselab worker`` has it; None: those delays are not judged).
    ``keep``: how many anomalies of each kind the report holds with their witnesses (the first by job;
    None: all); the report counts every one either way. The history is streamed, one job at a time,
    in one read transaction: a run of a million jobs is checked in the memory of a few.
    Every attempt a worker gave up at its timeout is named (``timed_out``); with ``max_run`` (seconds),
    so is a job still running an attempt claimed longer ago than that (``hung``), whatever its heartbeats.
    A missing file raises ``DatabaseMissing`` and is not created. ``journal``: the workers' journals
    (a folder, ``leaselab worker --journal``), judged against the history (``check.journal``).
    Without effects, the jobs whose whole history is a common one no rule can fault (``check.shapes``) are
    judged and counted inside the database, and only the others are read; ``thorough`` reads and judges
    every job in Python instead: the same report, slower (for a check of the fast path itself).
    """
    _options(lease, idle, runs_recorded, keep)
    if not isinstance(thorough, bool):
        raise TypeError(f"thorough must be True or False, got {thorough!r:.40}")
    _max_run(max_run)
    names = _vanished(vanished)
    _backoff(backoff)
    entries = read_journal(journal)
    with snapshot(target, now=now) as view:
        report = _report(
            view, effects_from(effects), lease, idle, runs_recorded, names, backoff, keep, max_run, thorough
        )
    return _journal(report, lambda: load(target, now=now), entries, keep) if journal is not None else report


def check_history(
    history: History,
    *,
    lease: float | None = None,
    idle: bool = True,
    runs_recorded: bool = False,
    vanished: Iterable[str] = (),
    backoff: Backoff | None = QUEUE_BACKOFF,
    keep: int | None = None,
    max_run: float | None = None,
    journal: JournalSource = None,
) -> Report:
    """Every rule over ``history`` (read by ``load``, or built by hand as dicts); the options are ``check``'s."""
    _options(lease, idle, runs_recorded, keep)
    _max_run(max_run)
    names = _vanished(vanished)
    _backoff(backoff)
    view = in_memory(History(jobs=history.jobs, events=history.events, now=history.now, ordered=history.ordered))
    effects = effects_from(list(history.effects))
    report = _report(view, effects, lease, idle, runs_recorded, names, backoff, keep, max_run)
    return _journal(report, lambda: history, read_journal(journal), keep) if journal is not None else report


def _journal(report: Report, history: Callable[[], History], entries: list[dict], keep: int | None) -> Report:
    """``report`` with what the journals' ``entries`` say the server forgot (read by ``history()``)."""
    found, totals = list(report.anomalies), dict(report.totals)
    with_journal(found, totals, journal_anomalies(history(), entries), keep)
    return Report(anomalies=found, counts=report.counts, notes=report.notes, totals=totals)


def _report(
    view: Snapshot,
    effects: list[dict],
    lease: float | None,
    idle: bool,
    runs_recorded: bool,
    vanished: list[str],
    backoff: Backoff | None,
    keep: int | None,
    max_run: float | None = None,
    thorough: bool = False,
) -> Report:
    found = walk(
        view,
        effects,
        lease=lease,
        idle=idle,
        runs_recorded=runs_recorded,
        vanished=vanished,
        backoff=backoff,
        keep=keep,
        max_run=max_run,
        thorough=thorough,
    )
    return Report(anomalies=found.anomalies, counts=found.counts, notes=found.notes, totals=found.totals)


def _max_run(max_run: Any) -> None:
    if max_run is not None and not (
        isinstance(max_run, (int, float)) and not isinstance(max_run, bool) and 0 < max_run < float("inf")
    ):
        raise ValueError(f"max_run must be a positive number of seconds or None, got {max_run!r:.60}")


def _vanished(vanished: Iterable[str]) -> list[str]:
    names = None if isinstance(vanished, str) else list(vanished)  # one name alone is a slip: say so
    if names is None or not all(isinstance(name, str) for name in names):
        raise TypeError(f"vanished must be worker names (strs), got {names!r:.80}")
    return names


def _backoff(backoff: Any) -> None:
    if backoff is not None and not isinstance(backoff, Backoff):
        raise TypeError(f"backoff must be a leaselab.Backoff or None, got {backoff!r:.60}")


def _options(lease: Any, idle: Any, runs_recorded: Any, keep: Any) -> None:
    if lease is not None:
        positive("lease", lease)
    if keep is not None:
        integer("keep", keep, 0)
    for name, value in (("idle", idle), ("runs_recorded", runs_recorded)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r:.40}")
