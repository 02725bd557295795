"""The history as a picture: one lane per worker, each attempt a bar, faults shaded, zombie writes marked.

Like a Jepsen timeline: an attempt runs from its claim to its completion, failure
or loss; intervals when the fleet paused or killed a worker are shaded behind the
lanes; reaps and refused (fenced-off) writes are marked. It reads only the events
table, plus the fleet's record of what it did (``<db>.faults.jsonl``) when there is
one, so it works after the fact on any leaselab file::

    fig = draw(path="lab.db", lang="ru")          # a matplotlib Figure
    data = timeline_data(queue.events(), fleet.actions)   # lanes, bars, marks, faults
    fig = draw(data, report=leaselab.check.check("lab.db"))   # each broken promise on its job's lane

Without a fleet record, faults are derived from the events: an attempt that went
silent and was reaped is shaded from its last sign of life to the reap.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..harness.fleet import Action, read_actions
from ..job import Event, Job
from ..periodic import tick_of
from ..words import check_lang
from .i18n import t

OUTCOME_COLOURS = {
    "completed": "#2e7d32",  # green
    "failed": "#f9a825",  # amber
    "dead": "#8e0000",  # dark red
    "reaped": "#9e9e9e",  # grey: the holder went quiet and lost the job
    "lease_lost": "#d84315",  # red-orange: the holder came back and was fenced off
    "timed_out": "#ad1457",  # crimson: given up at its timeout, its handler still stuck
    "released": "#5c6bc0",  # indigo: handed back by a stopping worker
    "running": "#1565c0",  # blue
}
FAULT_COLOURS = {
    "pause": "#ffb300",
    "partition": "#00acc1",
    "hang": "#f06292",
    "kill": "#424242",
    "silent": "#bdbdbd",
}
TICK_COLOUR = "#6a1b9a"  # purple: a periodic schedule's tick, a line across every lane
TICK_JOBS = 10_000  # the jobs load() reads for ticks: a lab's file holds far fewer
ANOMALY_COLOUR = "#d50000"  # a broken promise, as the checker names it
ANOMALY_STYLE: dict[str, Any] = dict(marker="*", color=ANOMALY_COLOUR, markersize=13, markeredgecolor="white")
FAULT_LABELS = {k: f"tl_{k}" for k in FAULT_COLOURS}


@dataclass(frozen=True)
class Bar:
    """One attempt: a worker held ``job_id`` from ``start`` to ``end`` and it ended in ``outcome``."""

    worker: str
    job_id: int
    attempt: int
    start: float
    end: float
    outcome: str  # completed, failed, dead, reaped, lease_lost, timed_out, released or running


@dataclass(frozen=True)
class Mark:
    """A point on a lane: a reap of this worker's attempt, or its refused write (``lease_lost``)."""

    worker: str
    at: float
    kind: str  # reaped or lease_lost
    job_id: int


@dataclass(frozen=True)
class Fault:
    """An interval when a worker could not work: paused, killed, or silent until its lease was reaped."""

    worker: str
    kind: str  # pause, partition, hang, kill or silent
    start: float
    end: float


@dataclass(frozen=True)
class Flag:
    """A broken promise on a lane: the checker's anomaly ``kind`` (titled ``title``) for ``job_id``,
    at the end of that job's last attempt, where the promise was seen broken."""

    worker: str
    at: float
    kind: str
    title: str
    job_id: int


@dataclass(frozen=True)
class Tick:
    """A periodic schedule's tick: at ``at`` its job ``job_id`` fell due (``leaselab.periodic``)."""

    schedule: str
    at: float
    job_id: int


@dataclass
class Timeline:
    """What the picture shows, as data: times are unix seconds; ``t0`` is the first event."""

    lanes: list[str] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)  # periodic ticks within t0..t1, drawn across every lane
    t0: float = 0.0
    t1: float = 0.0


def _natural(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _faults_from_actions(actions: Sequence[Action], end: float) -> list[Fault]:
    faults: list[Fault] = []
    paused: dict[str, float] = {}
    cut: dict[str, float] = {}
    down: dict[str, float] = {}
    hung: dict[str, float] = {}  # from the Hang request (an idle worker's next handler takes it later)
    for a in sorted(actions, key=lambda a: a.at):
        if a.action == "hang":
            hung.setdefault(a.worker, a.at)
        elif a.action in ("kill", "exit", "spawn") and a.worker in hung:
            faults.append(Fault(a.worker, "hang", hung.pop(a.worker), a.at))
        # A cut network is shaded like a pause: the worker could not reach its jobs.
        if a.action == "partition":
            cut.setdefault(a.worker, a.at)
        elif a.action in ("heal", "kill", "exit", "spawn") and a.worker in cut:
            faults.append(Fault(a.worker, "partition", cut.pop(a.worker), a.at))
        if a.action == "pause":
            paused.setdefault(a.worker, a.at)
        elif a.action in ("resume", "kill", "exit", "spawn", "stop") and a.worker in paused:
            if a.action != "stop":
                faults.append(Fault(a.worker, "pause", paused.pop(a.worker), a.at))
        if a.action == "kill" or (a.action == "exit" and (a.detail or "").startswith("signal")):
            down.setdefault(a.worker, a.at)
        elif a.action == "spawn" and a.worker in down:
            faults.append(Fault(a.worker, "kill", down.pop(a.worker), a.at))
    faults += [Fault(w, "pause", s, end) for w, s in paused.items()]
    faults += [Fault(w, "partition", s, end) for w, s in cut.items()]
    faults += [Fault(w, "kill", s, end) for w, s in down.items()]
    faults += [Fault(w, "hang", s, end) for w, s in hung.items()]
    return faults


def timeline_data(
    events: Iterable[Event],
    actions: Sequence[Action] | None = None,
    now: float | None = None,
    jobs: Iterable[Job] = (),
) -> Timeline:
    """Turn events (and, if known, the fleet's actions) into lanes, bars, marks and faults.

    ``now`` closes attempts still running (default: the last event or action).
    With ``actions`` None, faults are derived from the events alone. ``jobs`` (the queue's) give the
    periodic ticks: each job whose key a schedule made (``leaselab.periodic.tick_key``) is a tick.
    """
    events = list(events)
    actions = list(actions or [])
    times = [e.at for e in events] + [a.at for a in actions]
    if not times:
        return Timeline()
    t0, t1 = min(times), max(times) if now is None else max(max(times), now)
    open_: dict[str, dict] = {}  # token -> attempt being drawn
    last_sign: dict[str, float] = {}  # token -> last claim or heartbeat
    reaped: dict[str, dict] = {}  # token -> attempt that was reaped (a zombie may still write)
    bars: list[Bar] = []
    marks: list[Mark] = []
    silent: list[Fault] = []
    for e in events:
        if e.kind == "claimed" and e.worker and e.token:
            open_[e.token] = {"worker": e.worker, "job": e.job_id, "attempt": e.attempt, "start": e.at}
            last_sign[e.token] = e.at
        elif e.kind == "heartbeat" and e.token:
            last_sign[e.token] = e.at
        elif e.kind in ("completed", "failed", "timed_out", "released") and e.token in open_:
            a = open_.pop(e.token)
            bars.append(Bar(a["worker"], a["job"], a["attempt"], a["start"], e.at, e.kind))
        elif e.kind == "dead" and bars and bars[-1].job_id == e.job_id and bars[-1].outcome == "failed":
            last = bars.pop()
            bars.append(Bar(last.worker, last.job_id, last.attempt, last.start, last.end, "dead"))
        elif e.kind == "reaped" and e.token in open_:
            a = open_.pop(e.token)
            a["reaped_at"] = e.at
            reaped[e.token] = a
            marks.append(Mark(a["worker"], e.at, "reaped", e.job_id))
            silent.append(Fault(a["worker"], "silent", last_sign.get(e.token, a["start"]), e.at))
        elif e.kind == "lease_lost":
            gone = reaped.get(e.token) if e.token is not None else None
            worker = e.worker or (gone or {}).get("worker")
            if worker:
                marks.append(Mark(worker, e.at, "lease_lost", e.job_id))
            if gone is not None:
                gone["lost_at"] = e.at  # the zombie was still working until its write was refused
    for a in reaped.values():
        if "lost_at" in a:
            bars.append(Bar(a["worker"], a["job"], a["attempt"], a["start"], a["lost_at"], "lease_lost"))
        else:
            bars.append(Bar(a["worker"], a["job"], a["attempt"], a["start"], a["reaped_at"], "reaped"))
    for a in open_.values():
        bars.append(Bar(a["worker"], a["job"], a["attempt"], a["start"], t1, "running"))
    faults = _faults_from_actions(actions, t1) if actions else silent
    # A killed holder stopped working at the kill, not at the reap that noticed it.
    kills = [f for f in faults if f.kind == "kill"]
    for i, b in enumerate(bars):
        if b.outcome in ("reaped", "running"):
            cut = [f.start for f in kills if f.worker == b.worker and b.start <= f.start < b.end]
            if cut:
                bars[i] = Bar(b.worker, b.job_id, b.attempt, b.start, min(cut), b.outcome)
    names = {b.worker for b in bars} | {m.worker for m in marks} | {f.worker for f in faults}
    names |= {a.worker for a in actions}
    bars.sort(key=lambda b: (b.start, b.worker))
    ticks = sorted(
        (Tick(found[0], found[1], job.id) for job in jobs for found in [tick_of(job.key)] if found is not None),
        key=lambda tick: (tick.at, tick.schedule),
    )
    ticks = [tick for tick in ticks if t0 <= tick.at <= t1]  # missed ticks caught up long after stay off the picture
    return Timeline(lanes=sorted(names, key=_natural), bars=bars, marks=marks, faults=faults, ticks=ticks, t0=t0, t1=t1)


def flags(data: Timeline, report, lang: str = "en") -> list[Flag]:
    """Where each of a checker report's anomalies goes on the picture: one flag per anomalous job
    that has an attempt drawn (a job lost before any claim has no lane; the report lists it)."""
    check_lang(lang)
    out: list[Flag] = []
    seen: set[tuple[str, int]] = set()
    for anomaly in getattr(report, "anomalies", None) or []:
        bars = [b for b in data.bars if b.job_id == anomaly.job]
        if anomaly.job is None or not bars or (anomaly.kind, anomaly.job) in seen:
            continue
        seen.add((anomaly.kind, anomaly.job))
        last = max(bars, key=lambda b: (b.end, b.attempt))
        out.append(Flag(last.worker, last.end, anomaly.kind, anomaly.title(lang), anomaly.job))
    return out


def bar_text(bar: Bar) -> str:
    """What is written inside a bar: its job and attempt, as the legend's title says (``3·2``)."""
    return f"{bar.job_id}·{bar.attempt}"


def load(path: str | os.PathLike) -> Timeline:
    """The timeline of a leaselab file after the fact: its events plus the fleet record beside it, if any."""
    from ..queue import Queue

    with Queue(path) as q:
        events = q.events()
        jobs = q.jobs(limit=TICK_JOBS)
    return timeline_data(events, read_actions(path) or None, jobs=jobs)


def draw(
    data: Timeline | None = None,
    *,
    path: str | os.PathLike | None = None,
    lang: str = "en",
    ax=None,
    width: float = 11.0,
    report=None,
):
    """Draw a timeline as a matplotlib Figure, from ``data`` or from the file at ``path``.

    With ``report`` (a ``leaselab.check`` report) every attempt of a job that broke a promise
    is framed in red and flagged with the anomaly's name on the lane of its last attempt.
    Uses the Agg backend when no display backend was chosen, so it works headless.
    """
    check_lang(lang)
    if data is None:
        if path is None:
            raise TypeError("draw needs timeline data or path= to a leaselab file")
        data = load(path)
    import matplotlib

    if "matplotlib.pyplot" not in __import__("sys").modules and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    lanes = data.lanes
    if ax is None:
        fig, ax = plt.subplots(figsize=(width, 1.4 + 0.7 * max(1, len(lanes))), layout="constrained")
        plt.close(fig)  # owned by the caller; keeps pyplot from showing it twice in a notebook
    else:
        fig = ax.figure
    ax.set_title(t("tl_title", lang))
    ax.set_xlabel(t("tl_time", lang))
    if not lanes:
        ax.text(0.5, 0.5, t("tl_empty", lang), ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        return fig
    row = {name: i for i, name in enumerate(lanes)}
    t0 = data.t0
    for f in data.faults:
        y = row[f.worker]
        hatch = "//" if f.kind == "kill" else ("xx" if f.kind == "silent" else None)
        ax.add_patch(
            matplotlib.patches.Rectangle(
                (f.start - t0, y - 0.45),
                max(f.end - f.start, 0.02),
                0.9,
                facecolor=FAULT_COLOURS[f.kind],
                alpha=0.25 if f.kind != "kill" else 0.18,
                hatch=hatch,
                edgecolor=FAULT_COLOURS[f.kind],
                lw=0,
                zorder=1,
            )
        )
    for b in data.bars:
        y = row[b.worker]
        ax.barh(
            y,
            max(b.end - b.start, 0.02),
            left=b.start - t0,
            height=0.5,
            color=OUTCOME_COLOURS[b.outcome],
            edgecolor="white",
            linewidth=0.8,
            zorder=2,
        )
        if b.end - b.start > 0.03 * max(data.t1 - t0, 1e-9):
            ax.text(
                (b.start + b.end) / 2 - t0,
                y,
                bar_text(b),
                ha="center",
                va="center",
                fontsize=8,
                color="white",
                zorder=3,
                clip_on=True,
            )
    for tick in data.ticks:
        ax.axvline(tick.at - t0, color=TICK_COLOUR, linestyle=":", linewidth=1.2, zorder=1.5)
    styles: dict[str, dict[str, Any]] = {
        "reaped": dict(marker="v", color="black", markersize=9),
        "lease_lost": dict(marker="X", color="#b71c1c", markersize=10, markeredgecolor="white"),
    }
    for m in data.marks:
        ax.plot(
            [m.at - t0],
            [row[m.worker] + (0.38 if m.kind == "reaped" else 0.0)],
            linestyle="none",
            zorder=4,
            **styles[m.kind],
        )
    drawn = flags(data, report, lang) if report is not None else []
    broken = {f.job_id for f in drawn}
    for b in data.bars:
        if b.job_id in broken:
            ax.add_patch(
                matplotlib.patches.Rectangle(
                    (b.start - t0, row[b.worker] - 0.3),
                    max(b.end - b.start, 0.02),
                    0.6,
                    fill=False,
                    edgecolor=ANOMALY_COLOUR,
                    linewidth=2.0,
                    zorder=5,
                )
            )
    labels = []
    for flag in drawn:
        y = row[flag.worker]
        ax.plot([flag.at - t0], [y - 0.36], linestyle="none", zorder=6, **ANOMALY_STYLE)
        labels.append(
            ax.text(
                flag.at - t0,
                y - 0.44,
                f" {flag.job_id}: {flag.title}",
                color=ANOMALY_COLOUR,
                fontsize=8,
                fontweight="bold",
                ha="left",
                va="bottom",
                zorder=6,
                clip_on=False,
                in_layout=False,  # placed inside the axes below, once the layout is known
            )
        )
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_ylim(len(lanes) - 0.5, -0.5 - (0.4 if drawn else 0.0))  # room above the top lane for a flag
    ax.set_xlim(0, max(data.t1 - t0, 1.0) * 1.02)
    ax.grid(axis="x", alpha=0.3)
    used = {b.outcome for b in data.bars}
    handles: list[Artist] = [
        Patch(color=OUTCOME_COLOURS[o], label=t(f"tl_{o}", lang)) for o in OUTCOME_COLOURS if o in used
    ]
    handles += [
        Patch(
            facecolor=FAULT_COLOURS[k], alpha=0.35, hatch="//" if k == "kill" else None, label=t(FAULT_LABELS[k], lang)
        )
        for k in FAULT_COLOURS
        if any(f.kind == k for f in data.faults)
    ]
    for kind, key in (("reaped", "tl_mark_reaped"), ("lease_lost", "tl_mark_lease_lost")):
        if any(m.kind == kind for m in data.marks):
            handles.append(Line2D([], [], linestyle="none", label=t(key, lang), **styles[kind]))
    if data.ticks:
        handles.append(Line2D([], [], color=TICK_COLOUR, linestyle=":", label=t("tl_tick", lang)))
    if drawn:
        handles.append(Line2D([], [], linestyle="none", label=t("tl_anomaly", lang), **ANOMALY_STYLE))
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
        frameon=False,
        title=t("tl_bar_text", lang),
        title_fontsize=8,
    )
    keep_inside(ax, labels)
    return fig


def keep_inside(ax, labels: Sequence[Any], slack: float = 0.1) -> None:
    """End each text in ``labels`` at the right edge of ``ax`` if, starting where it stands, it would run
    past that edge (or come within ``slack`` of its own width of it).

    A flag's label starts at its flag, and a flag near the end of the run would carry it out of the
    axes into the legend beside them. Where that edge lies is known only once the figure is laid out,
    so this lays it out first; a label it moves is anchored to the edge itself (x in axes units), so a
    later ``savefig`` at another dpi, which lays the figure out anew, keeps it inside. The slack covers
    the few per cent a text's width changes against the axes' from one dpi to another.
    """
    if not labels:
        return
    ax.figure.draw_without_rendering()
    edge = ax.get_window_extent().x1
    for label in labels:
        extent = label.get_window_extent()
        if extent.x1 + slack * extent.width > edge:
            label.set_transform(ax.get_yaxis_transform())  # x in axes units, y still the lane's
            label.set_x(1.0)
            label.set_horizontalalignment("right")
