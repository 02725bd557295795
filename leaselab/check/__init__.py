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
from collections.abc import Iterable
from typing import Any

from ..arguments import positive
from ..backoff import Backoff
from ..words import LANGS
from . import rules
from .effects import ENV, EffectSource, effects_from, read_effects, record_effect
from .history import History, load
from .report import KINDS, NOTES, Anomaly, Report

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
    "check",
    "check_history",
    "load",
    "read_effects",
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
    A missing file raises ``DatabaseMissing`` and is not created.
    """
    _options(lease, idle, runs_recorded)
    return check_history(
        load(target, effects=effects, now=now),
        lease=lease,
        idle=idle,
        runs_recorded=runs_recorded,
        vanished=vanished,
        backoff=backoff,
    )


def check_history(
    history: History,
    *,
    lease: float | None = None,
    idle: bool = True,
    runs_recorded: bool = False,
    vanished: Iterable[str] = (),
    backoff: Backoff | None = QUEUE_BACKOFF,
) -> Report:
    """Every rule over ``history`` (read by ``load``, or built by hand as dicts); the options are ``check``'s."""
    _options(lease, idle, runs_recorded)
    names = None if isinstance(vanished, str) else list(vanished)  # one name alone is a slip: say so
    if names is None or not all(isinstance(name, str) for name in names):
        raise TypeError(f"vanished must be worker names (strs), got {names!r:.80}")
    if backoff is not None and not isinstance(backoff, Backoff):
        raise TypeError(f"backoff must be a leaselab.Backoff or None, got {backoff!r:.60}")
    h = History(
        jobs=history.jobs,
        events=history.events,
        effects=effects_from(list(history.effects)),
        now=history.now,
        ordered=history.ordered,
    )
    derived = rules.derived_leases(h)

    def lease_of(worker: str | None) -> float | None:
        return lease if lease is not None else derived.get(worker) if worker is not None else None

    found = (
        rules.lost_jobs(h)
        + rules.unfinished(h, idle)
        + rules.fencing(h)
        + rules.attempts(h)
        + rules.events_agree(h)
        + rules.links(h)
        + rules.fences(h)
        + rules.false_losses(h)
        + rules.reaps(h, lease_of)
        + rules.effects_repeated(h)
        + rules.effects_agree(h)
        + (rules.runs(h, names) if runs_recorded else [])
    )
    # The model's verdict is the first event that breaks the specification; a job another rule has
    # already named is not reported twice, so the model adds what the symptoms did not show.
    named = {a.job for a in found}
    found += [a for a in (rules.specification(h, backoff, lease_of) if h.ordered else []) if a.job not in named]
    found.sort(key=lambda a: (a.job if a.job is not None else -1, KINDS.index(a.kind)))
    notes = []
    reaped = any(e["kind"] == "reaped" for e in h.events)
    if lease is None and reaped and any(e["kind"] == "reaped" and e.get("worker") not in derived for e in h.events):
        notes.append("lease_unknown")
    if not h.effects:
        notes.append("no_effects")
    if not h.ordered:
        notes.append("spec_unordered")
    return Report(anomalies=found, counts=rules.counts(h, idle), notes=notes)


def _options(lease: Any, idle: Any, runs_recorded: Any) -> None:
    if lease is not None:
        positive("lease", lease)
    for name, value in (("idle", idle), ("runs_recorded", runs_recorded)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r:.40}")
