"""One pass over a snapshot, job by job: every rule, the counts, and the anomalies a report keeps.

``walk(view, effects, ...)`` reads each job's row and events once (``Snapshot.per_job``), runs
every per-job rule on them and forgets them, so its memory is one job's rows, the effects
file, and what it keeps: every anomaly, or with ``keep=k`` the first ``k`` of each kind (by
job) and a count of the rest. Two things need the whole history, and are done after the pass:
the reaps of a worker whose lease only a running job shows (those few jobs' events are held
back until the pass has seen every running job), and the specification, which reads the
history in the order it was applied and so runs only on a history of at most ``SPEC_EVENTS``
events (the report says when it did not).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..backoff import Backoff
from . import rules
from .history import Snapshot
from .report import KINDS, Anomaly

# The specification reads the whole history into memory, in order: up to this many events it is
# judged (a few tens of MB), beyond it the report says it was not.
SPEC_EVENTS = 200_000


@dataclass
class Kept:
    """The anomalies of one kind: how many were found, and the first ``keep`` of them by job (all: None)."""

    keep: int | None
    total: int = 0
    first: list[tuple[int, int, Anomaly]] = field(default_factory=list)  # (job, order found, anomaly)

    def add(self, anomaly: Anomaly, order: int) -> None:
        self.total += 1
        entry = (anomaly.job if anomaly.job is not None else -1, order, anomaly)
        if self.keep is None:
            self.first.append(entry)
        elif len(self.first) < self.keep or entry[:2] < self.first[-1][:2]:
            bisect.insort(self.first, entry, key=lambda x: x[:2])
            del self.first[self.keep :]

    def anomalies(self) -> list[Anomaly]:
        return [a for _, _, a in sorted(self.first, key=lambda x: x[:2])]


@dataclass
class Found:
    """What a walk found: the anomalies kept, by kind in ``KINDS`` order then by job; how many of each
    kind; the counts; and the notes on checks not made."""

    anomalies: list[Anomaly]
    totals: dict[str, int]
    counts: dict[str, int]
    notes: list[str]


def walk(
    view: Snapshot,
    effects: Iterable[dict[str, Any]],
    *,
    lease: float | None,
    idle: bool,
    runs_recorded: bool,
    vanished: list[str],
    backoff: Backoff | None,
    keep: int | None = None,
    max_run: float | None = None,
    thorough: bool = False,
) -> Found:
    """Every rule over ``view`` and ``effects``; the options are ``check``'s.

    Unless ``thorough``, with no effects and no ``runs_recorded``, the jobs whose whole history is a
    common one no rule can fault are only counted, in the database (``Snapshot.plain``), and only the
    others are read; ``thorough`` reads every job (the same report, slower: what the fast path is
    tested against)."""
    kept: dict[str, Kept] = {kind: Kept(keep) for kind in KINDS}
    order = 0
    judged = view.ordered and view.size() <= SPEC_EVENTS
    named: set[int] = set()  # jobs some rule named: only while the specification will run, to skip them

    def found(anomalies: list[Anomaly]) -> None:
        nonlocal order
        for a in anomalies:
            order += 1
            kept[a.kind].add(a, order)
            if judged and a.job is not None:
                named.add(a.job)

    by_job: dict[int, list[dict]] = defaultdict(list)
    for x in effects:
        by_job[x["job"]].append(x)
    gone = set(vanished)
    tally = rules.Counts(view.now, idle)
    derived: dict[str, float] = {}
    held_back: list[tuple[int, list[dict]]] = []  # jobs whose reaps wait for the leases the pass derives
    reapers: set[str | None] = set()  # the workers whose claims were reaped

    def lease_of(worker: str | None) -> float | None:
        return lease if lease is not None else derived.get(worker) if worker is not None else None

    no_effects: list[dict] = []
    now = view.now
    plain = None if thorough or by_job or runs_recorded else view.plain(idle)
    if plain is not None:
        for status, counted in plain.counts.items():
            tally.add_plain(status, counted)
    for j, job_id, events in view.per_job(None if plain is None else plain.rest):
        mine = by_job.pop(job_id, no_effects) if by_job else no_effects
        tally.add(j, events, mine)
        if j is not None and not mine and not runs_recorded and rules.plainly_clean(j, events, now, idle):
            continue
        if j is None:
            found(rules.gone(job_id, events))
        else:
            found(rules.unfinished_job(j, events, view.now, idle))
        found(rules.fencing_job(job_id, events))
        if j is not None:
            found(rules.attempts_job(j, events))
            found(rules.events_agree_job(j, events))
            found(rules.links_job(j, events, view.event))
            shown = rules.lease_shown(j, events)
            if shown is not None:
                derived.setdefault(j["worker"], shown)
        found(rules.fences_job(job_id, events, mine))
        found(rules.false_losses_job(job_id, events))
        found(rules.timeouts_job(j, events, now, max_run))
        reaped = [e.get("worker") for e in events if e["kind"] in rules.REAPER_RELEASES]
        if reaped:
            reapers.update(reaped)
            if lease is None and rules.reaps_judged(events):
                held_back.append((job_id, events))
            else:
                found(rules.reaps_job(job_id, events, lease_of))
        if mine:
            found(rules.effects_repeated_job(job_id, mine))
        if j is not None:
            found(rules.effects_agree_job(j, events, mine))
            if runs_recorded:
                found(rules.runs_job(j, events, mine, gone))
    for job_id, events in held_back:
        found(rules.reaps_job(job_id, events, lease_of))
    for job_id, lines in sorted(by_job.items()):  # effects of jobs with neither a row nor an event
        tally.add(None, [], lines)
        found(rules.effects_of_gone(job_id, lines))
        found(rules.fences_job(job_id, [], lines))
        found(rules.effects_repeated_job(job_id, lines))
    notes = []
    if judged:
        jobs, events = view.whole()
        spec = rules.specification(jobs, events, backoff, lease_of)
        found([a for a in spec if a.job not in named])
    if lease is None and reapers and any(worker not in derived for worker in reapers):
        notes.append("lease_unknown")
    if not tally.effects:
        notes.append("no_effects")
    if not view.ordered:
        notes.append("spec_unordered")
    elif not judged:
        notes.append("spec_too_long")
    return Found(
        anomalies=[a for kind in KINDS for a in kept[kind].anomalies()],
        totals={kind: kept[kind].total for kind in KINDS if kept[kind].total},
        counts=tally.result(),
        notes=notes,
    )
