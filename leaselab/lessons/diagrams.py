"""Pictures of the protocol, not of one run: the job's state machine and the zombie's sequence diagram.

Both are drawn by code from the real thing, never by hand. ``lifecycle`` draws ``leaselab.lifecycle``'s
table, which a test makes happen row by row on every backend. ``zombie`` runs the story on a real queue
(in memory, on a clock moved by hand, so it is the same every time) and draws the calls it made and the
answers it got: a claim, a heartbeat, a freeze past the lease, the reap, the next claim, the zombie's
completion refused under its old token, the new holder's accepted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..backoff import Backoff
from ..clock import ManualClock
from ..errors import LeaseLost
from ..job import Event, Status
from ..lifecycle import ATTEMPTS_LEFT, ATTEMPTS_SPENT, edges
from ..queue import Queue
from .texts import text

# Where each status sits in the state diagram (x, y), and the dot a job starts from.
PLACES: dict[Status | None, tuple[float, float]] = {
    None: (0.0, 2.0),
    Status.PENDING: (2.4, 2.0),
    Status.RUNNING: (6.4, 2.0),
    Status.DONE: (10.2, 2.0),
    Status.DEAD: (6.4, -0.9),
}
STATUS_COLOURS = {
    Status.PENDING: "#e3f2fd",
    Status.RUNNING: "#fff8e1",
    Status.DONE: "#e8f5e9",
    Status.DEAD: "#eceff1",
}
# How each arrow bends (matplotlib's arc3 radius) and where its label sits, by (source, target).
BENDS: dict[tuple[Status | None, Status], tuple[float, tuple[float, float]]] = {
    (None, Status.PENDING): (0.0, (1.2, 2.35)),
    (Status.PENDING, Status.RUNNING): (-0.25, (4.4, 3.05)),
    (Status.RUNNING, Status.RUNNING): (0.0, (6.4, 3.75)),
    (Status.RUNNING, Status.DONE): (0.0, (8.3, 2.35)),
    (Status.RUNNING, Status.PENDING): (-0.25, (5.1, 1.05)),
    (Status.RUNNING, Status.DEAD): (0.0, (7.8, 0.3)),
    (Status.PENDING, Status.DEAD): (0.3, (2.7, -0.6)),
    (Status.DEAD, Status.PENDING): (0.0, (5.0, -0.2)),
}
FENCED_MARK = "*"
LEASE = 9.0  # the zombie story's lease, in seconds of its hand-moved clock
TOKENS = {"A": "a1" * 16, "B": "b2" * 16}  # given, not drawn at random: the picture is the same every time


def _pyplot():
    import matplotlib

    if "matplotlib.pyplot" not in __import__("sys").modules and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _arrow_label(rows: list, lang: str) -> str:
    """The calls of one arrow, one line per condition: ``fail* · reap`` and when it applies."""
    lines = []
    for when in ("", ATTEMPTS_LEFT, ATTEMPTS_SPENT):
        calls = [r.call + (FENCED_MARK if r.fenced else "") for r in rows if r.when == when]
        if calls:
            unique = list(dict.fromkeys(calls))
            said = "\n".join(" · ".join(unique[i : i + 2]) for i in range(0, len(unique), 2))
            lines.append(said + (f"\n({text('dg_' + when.replace(' ', '_'), lang)})" if when else ""))
    return "\n".join(lines)


def lifecycle(lang: str = "en", width: float = 10.5):
    """The job's state machine as a matplotlib Figure: every status, and every arrow named by the calls
    that make it (``*``: fenced, it applies only under the attempt's token)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(width, width * 0.52), layout="constrained")
    plt.close(fig)
    ax.set_axis_off()
    ax.set_xlim(-0.6, 11.4)
    ax.set_ylim(-2.1, 4.4)
    ax.set_title(text("dg_lifecycle_title", lang))
    boxes = {}
    for status, (x, y) in PLACES.items():
        if status is None:
            ax.plot([x], [y], "o", color="#263238", markersize=10, zorder=3)
            continue
        boxes[status] = ax.text(
            x,
            y,
            status.value,
            ha="center",
            va="center",
            fontsize=12,
            fontweight="bold",
            family="monospace",
            bbox={"boxstyle": "round,pad=0.6", "facecolor": STATUS_COLOURS[status], "edgecolor": "#455a64"},
            zorder=3,
        )
    for (source, target), rows in edges().items():
        bend, (lx, ly) = BENDS[(source, target)]
        (x0, y0), (x1, y1) = PLACES[source], PLACES[target]
        if source == target:  # the heartbeat: a loop over the box
            ax.annotate(
                "",
                xy=(x0 + 0.35, y0 + 0.45),
                xytext=(x0 - 0.35, y0 + 0.45),
                arrowprops={"arrowstyle": "-|>", "connectionstyle": "arc3,rad=-1.6", "color": "#37474f"},
            )
        else:
            ax.annotate(
                "",
                xy=(x1, y1),
                xytext=(x0, y0),
                arrowprops={
                    "arrowstyle": "-|>",
                    "connectionstyle": f"arc3,rad={bend}",
                    "color": "#37474f",
                    "shrinkA": 10 if source is None else 34,
                    "shrinkB": 34,
                    "lw": 1.3,
                },
                zorder=2,
            )
        ax.text(lx, ly, _arrow_label(rows, lang), ha="center", va="center", fontsize=9, family="monospace")
    ax.text(-0.5, -1.95, text("dg_fenced", lang, mark=FENCED_MARK), ha="left", va="bottom", fontsize=9, wrap=True)
    return fig


@dataclass(frozen=True)
class Call:
    """One call of the zombie story: who made it, at what second, what it was, what came back."""

    at: float
    who: str
    call: str
    answer: str
    refused: bool = False


def zombie_story(lang: str = "en") -> tuple[list[Call], list[Event], tuple[float, float]]:
    """Run the zombie story on a real in-memory queue, on a clock moved by hand: (the calls with their
    answers, the job's history as the queue wrote it, (start, end) of the freeze in seconds)."""
    clock = ManualClock()
    start = clock()
    calls: list[Call] = []

    def now() -> float:
        return round(clock() - start, 3)

    with Queue(":memory:", clock=clock, backoff=Backoff(base=1, cap=1)) as q:
        job_id = q.enqueue({"report": "monthly"}, max_attempts=3)
        a = q.claim("A", lease=LEASE, token=TOKENS["A"])
        assert a is not None
        calls.append(
            Call(now(), "A", "claim", text("dg_got", lang, job=job_id, token=TOKENS["A"][:4], attempt=a.attempts))
        )
        clock.advance(LEASE / 3)
        q.heartbeat(job_id, TOKENS["A"], lease=LEASE)
        calls.append(Call(now(), "A", f"heartbeat({TOKENS['A'][:4]})", text("dg_renewed", lang, until=now() + LEASE)))
        clock.advance(1)
        frozen_from = now()
        clock.advance(LEASE + 1)
        reaped = q.reap()
        calls.append(Call(now(), "reaper", "reap", text("dg_reaped", lang, ids=", ".join(map(str, reaped)))))
        clock.advance(2)  # past the backoff of one second
        b = q.claim("B", lease=LEASE, token=TOKENS["B"])
        assert b is not None and b.id == job_id
        calls.append(
            Call(now(), "B", "claim", text("dg_got", lang, job=job_id, token=TOKENS["B"][:4], attempt=b.attempts))
        )
        clock.advance(2)
        frozen_to = now()
        try:
            q.complete(job_id, TOKENS["A"], {"by": "A"})
        except LeaseLost:
            calls.append(Call(now(), "A", f"complete({TOKENS['A'][:4]})", text("dg_refused", lang), refused=True))
        else:  # pragma: no cover  (the fence is the point: a test fails if it ever lets this through)
            calls.append(Call(now(), "A", f"complete({TOKENS['A'][:4]})", "ok"))
        clock.advance(2)
        q.complete(job_id, TOKENS["B"], {"by": "B"})
        calls.append(Call(now(), "B", f"complete({TOKENS['B'][:4]})", text("dg_accepted", lang)))
        return calls, q.events(job_id), (frozen_from, frozen_to)


def zombie(lang: str = "en", width: float = 10.5) -> tuple[Any, list[Event]]:
    """The zombie and its fence as a sequence diagram, drawn from ``zombie_story``'s real calls:
    (the matplotlib Figure, the job's history as the queue wrote it)."""
    plt = _pyplot()
    from matplotlib.patches import Rectangle

    calls, history, (frozen_from, frozen_to) = zombie_story(lang)
    lanes = {"A": 0.0, "queue": 4.6, "reaper": 7.0, "B": 9.4}
    names = {
        "A": text("dg_worker", lang, name="A"),
        "queue": text("dg_queue", lang),
        "reaper": text("dg_reaper", lang),
        "B": text("dg_worker", lang, name="B"),
    }
    end = calls[-1].at + 1.5
    fig, ax = plt.subplots(figsize=(width, width * 0.62), layout="constrained")
    plt.close(fig)
    ax.set_axis_off()
    ax.set_xlim(-1.6, 10.8)
    ax.set_ylim(end + 0.8, -2.0)  # time runs down the page
    ax.set_title(text("dg_zombie_title", lang))
    for lane, x in lanes.items():
        ax.plot([x, x], [-0.9, end], color="#90a4ae", lw=1, zorder=1)
        ax.text(
            x,
            -1.2,
            names[lane],
            ha="center",
            va="center",
            fontsize=10,
            fontweight="bold",
            bbox={"boxstyle": "round,pad=0.4", "facecolor": "#eceff1", "edgecolor": "#607d8b"},
        )
    ax.add_patch(
        Rectangle(
            (-0.35, frozen_from),
            0.7,
            frozen_to - frozen_from,
            facecolor="#b3e5fc",
            edgecolor="#0277bd",
            hatch="..",
            alpha=0.6,
            zorder=2,
        )
    )
    ax.text(
        -0.5,
        (frozen_from + frozen_to) / 2,
        text("dg_frozen", lang),
        ha="right",
        va="center",
        fontsize=9,
        color="#01579b",
        rotation=90,
    )
    lease_end = calls[1].at + LEASE
    ax.plot([-0.9, 10.2], [lease_end, lease_end], color="#d50000", lw=0.8, ls=":", zorder=1)
    ax.text(
        10.2,
        lease_end - 0.15,
        text("dg_lease_ends", lang, at=lease_end),
        ha="right",
        va="bottom",
        fontsize=8,
        color="#d50000",
    )
    for call in calls:
        x0, x1 = lanes[call.who], lanes["queue"]
        colour = "#d50000" if call.refused else "#263238"
        ax.annotate(
            "",
            xy=(x1, call.at),
            xytext=(x0, call.at),
            arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 1.3},
            zorder=3,
        )
        ax.annotate(
            "",
            xy=(x0, call.at + 0.45),
            xytext=(x1, call.at + 0.45),
            arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 0.9, "ls": "--"},
            zorder=3,
        )
        middle = (x0 + x1) / 2
        ax.text(
            middle,
            call.at - 0.12,
            f"{call.call}",
            ha="center",
            va="bottom",
            fontsize=9,
            family="monospace",
            color=colour,
        )
        ax.text(middle, call.at + 0.57, call.answer, ha="center", va="top", fontsize=8, color=colour)
        ax.text(
            -1.5, call.at, text("dg_seconds", lang, at=call.at), ha="left", va="center", fontsize=8, color="#607d8b"
        )
    return fig, history
