"""The lab: a live dashboard to spawn, pause, kill and resume real workers against one queue file.

``Lab("lab.db", lang="ru")`` shows itself in JupyterLab; it is a thin view over a
``Fleet`` (the processes) and a ``Queue`` (the file). Every button calls a public
method, so lessons and tests can do without clicking::

    lab = Lab("lab.db", lease=2.0)
    lab.enqueue(5, kind="sleep", seconds=2)
    w1 = lab.spawn(); lab.pause(w1); lab.resume(w1); lab.kill(w1)
    lab.hang(w1)           # its handler waits for ever; only a job timeout gives the job back
    lab.refresh()          # what the refresher thread does every ``refresh`` seconds
    lab.timeline()         # a matplotlib Figure of the history so far
    lab.close()            # stop refreshing and end the workers

Tables are HTML built only from ``html.escape``d values: a payload such as
``<img src=x onerror=alert(1)>`` shows as text. The background refresher only sets
widget values (never prints) and starts when the lab is displayed.

Stable CSS classes for browser tests (``widget.add_class``):

- controls: ``leaselab-lab`` (the whole widget), ``leaselab-n``, ``leaselab-priority``,
  ``leaselab-delay``, ``leaselab-kind``, ``leaselab-seconds``, ``leaselab-enqueue``,
  ``leaselab-lease``, ``leaselab-slots``, ``leaselab-timeout`` (the spawned workers' job timeout),
  ``leaselab-spawn``, ``leaselab-pause-all``, ``leaselab-resume-all``, ``leaselab-reap``,
  ``leaselab-refresh``, ``leaselab-timeline``
- views: ``leaselab-counts``, ``leaselab-workers`` (the box of worker rows),
  ``leaselab-jobs``, ``leaselab-actions`` (the log of the last ``SAID_KEPT`` actions, oldest first),
  ``leaselab-message`` (inside it: the newest action's text), ``leaselab-legend``, ``leaselab-log``,
  ``leaselab-log-worker``, ``leaselab-timeline-image`` (hidden until the timeline button is pressed)
- per worker NAME: ``leaselab-worker-NAME`` (its row), ``leaselab-pause-NAME``,
  ``leaselab-resume-NAME``, ``leaselab-kill-NAME``, ``leaselab-hang-NAME``, ``leaselab-stop-NAME``;
  inside the row's HTML the badge is ``<span class="leaselab-state leaselab-state-BADGE">`` where
  BADGE is running, paused, stopping, zombie, lease_expired, hung, waiting, cut_off, killed or exited;
  beside a zombie's badge, ``<span class="leaselab-believed">`` names the job it still believes it holds.
  On a server queue each worker row also has ``leaselab-partition-NAME`` (cut its network)
  and ``leaselab-heal-NAME`` (reconnect it).
"""

from __future__ import annotations

import html
import io
import json
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import ipywidgets as W

from ..backends import is_server_url
from ..errors import DatabaseBusy
from ..harness.fleet import ALIVE, DEFAULT_HANDLER, PAUSED, RUNNING, STOPPING, Fleet, WorkerStatus
from ..job import Job, Status
from ..queue import Queue
from ..words import check_lang
from .i18n import t
from .scenario import KINDS, demo_payload

BADGE_COLOURS = {
    "running": "#2e7d32",  # green: all is well
    "paused": "#f9a825",  # amber: frozen, lease still good
    "stopping": "#1565c0",  # blue: finishing its job
    "zombie": "#c62828",  # red: frozen or cut off, and its job was taken from it
    "lease_expired": "#ef6c00",  # orange: its lease ran out, nobody has reaped the job yet
    "hung": "#ad1457",  # crimson: alive and heartbeating, its handler going nowhere
    "waiting": "#6a1b9a",  # purple: alive, waiting out a locked or full database
    "cut_off": "#00838f",  # teal: alive, cut off the network from the server
    "killed": "#212121",  # black: crashed
    "exited": "#757575",  # grey: left cleanly
}
STATUS_COLOURS = {"pending": "#616161", "running": "#1565c0", "done": "#2e7d32", "dead": "#c62828"}
JOBS_SHOWN = 200
SAID_KEPT = 8  # lines in the lab's log of actions: enough to retell a scenario, short enough to read at a glance
# Pixel widths of the worker columns, shared by the header and every row so they line up;
# wide enough for the Russian "до конца аренды" on one line.
WORKER_COLUMNS = (60, 130, 70, 70, 150)


def esc(value: Any) -> str:
    """Any value as HTML-escaped text; JSON for non-strings, ``-`` for None."""
    if value is None:
        return "-"
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False)
    return html.escape(value, quote=True)


def _short(value: Any, width: int = 60) -> str:
    text = "-" if value is None else (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    return text if len(text) <= width else text[: width - 1] + "…"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}s" if value < 0 else f"{value:.1f}s"


def badge_html(badge: str, lang: str) -> str:
    colour = BADGE_COLOURS[badge]
    return (
        f'<span class="leaselab-state leaselab-state-{esc(badge)}" style="background:{colour};color:white;'
        f'padding:1px 7px;border-radius:9px;font-size:90%">{esc(t(badge, lang))}</span>'
    )


def believed_html(w: WorkerStatus, lang: str) -> str:
    """What a zombie still believes it holds ("job 3"), to stand beside its badge; "" for any other worker."""
    if not w.believed_jobs:
        return ""
    n, jobs = len(w.believed_jobs), ", ".join(map(str, w.believed_jobs))
    return (
        f'<span class="leaselab-believed" title="{esc(t("believed_title", lang, n=n, jobs=jobs))}" '
        f'style="color:{BADGE_COLOURS["zombie"]};font-size:90%">{esc(t("believed_jobs", lang, n=n, jobs=jobs))}</span>'
    )


def worker_row_html(w: WorkerStatus, lang: str) -> str:
    """One worker's cells: name, badge (a zombie's names the job it still believes it holds), pid, job and
    lease left, as escaped HTML. A zombie that holds nothing any more shows its lost job struck out."""
    if w.jobs or not w.believed_jobs:
        job = esc(", ".join(map(str, w.jobs)) if w.jobs else w.job_id)
    else:
        job = f"<s>{esc(', '.join(map(str, w.believed_jobs)))}</s>"
    cells = [
        f"<b>{esc(w.name)}</b>",
        " ".join(filter(None, (badge_html(w.badge, lang), believed_html(w, lang)))),
        esc(w.pid),
        job,
        esc(_seconds(w.lease_left)),
    ]
    widths = WORKER_COLUMNS
    tds = "".join(f'<td style="width:{px}px;padding:2px 6px">{c}</td>' for c, px in zip(cells, widths, strict=True))
    return f'<table style="table-layout:fixed;border-collapse:collapse"><tr>{tds}</tr></table>'


def workers_header_html(lang: str) -> str:
    keys = ("col_worker", "col_state", "col_pid", "col_job", "col_lease_left")
    widths = WORKER_COLUMNS
    ths = "".join(
        f'<th style="width:{px}px;padding:2px 6px;text-align:left">{esc(t(k, lang))}</th>'
        for k, px in zip(keys, widths, strict=True)
    )
    return f'<table style="table-layout:fixed;border-collapse:collapse"><tr>{ths}</tr></table>'


def jobs_html(jobs: list[Job], total: int, now: float, lang: str) -> str:
    """The jobs table, newest first, every value escaped."""
    if not jobs:
        return f"<i>{esc(t('no_jobs', lang))}</i>"
    head = "".join(
        f"<th style='text-align:left;padding:2px 8px'>{esc(t(k, lang))}</th>"
        for k in (
            "col_id",
            "col_status",
            "col_priority",
            "col_attempts",
            "col_worker",
            "col_lease_left",
            "col_payload",
            "col_result",
        )
    )
    rows = []
    for j in jobs:
        if j.damage:  # one damaged row is marked, not allowed to hide the others
            cells = (
                esc(j.id),
                f"<span style='color:{STATUS_COLOURS['dead']};font-weight:600'>{esc(t('damaged', lang))}</span>",
                "",
                "",
                "",
                "",
                "",
                esc(_short(j.damage, 160)),
            )
            rows.append(
                "<tr class='leaselab-damaged'>"
                + "".join(f"<td style='padding:1px 8px'>{c}</td>" for c in cells)
                + "</tr>"
            )
            continue
        status = j.status.value
        left = None if j.lease_until is None else j.lease_until - now
        outcome = j.last_error if status in ("pending", "dead") and j.last_error else j.result
        cells = (
            esc(j.id),
            f"<span style='color:{STATUS_COLOURS[status]};font-weight:600'>{esc(t(status, lang))}</span>",
            esc(j.priority),
            esc(f"{j.attempts}/{j.max_attempts}"),
            esc(j.worker),
            esc(_seconds(left)),
            f"<code>{esc(_short(j.payload))}</code>",
            esc(_short(outcome)),
        )
        rows.append("<tr>" + "".join(f"<td style='padding:1px 8px'>{c}</td>" for c in cells) + "</tr>")
    caption = esc(t("recent_jobs", lang, n=len(jobs), total=total))
    return (
        f"<div style='max-height:320px;overflow-y:auto'><table class='leaselab-jobs-table'>"
        f"<caption style='text-align:left'>{caption}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def counts_html(counts: dict[str, int], lang: str) -> str:
    parts = [
        f"<span style='color:{STATUS_COLOURS[s]};font-weight:600'>{esc(t(s, lang))}: {esc(counts[s])}</span>"
        for s in (status.value for status in Status)
    ]
    return " &nbsp;·&nbsp; ".join(parts)


def legend_html(lang: str) -> str:
    items = "".join(
        f"<div style='margin:2px 0'>{badge_html(b, lang)} {esc(t('legend_' + b, lang))}</div>" for b in BADGE_COLOURS
    )
    return f"<details><summary>{esc(t('legend', lang))}</summary>{items}</details>"


def report_html(report, lang: str) -> str:
    """A checker report as the dashboard shows it: the headline in green (clean) or red, then the
    rest of the report (counts, each anomaly's sentence and witness lines) as plain text."""
    colour = "#2e7d32" if report.clean else "#c62828"
    lines = report.render(lang).split("\n")
    rest = "\n".join(lines[1:]).strip("\n")
    return f"<div class='leaselab-verdict' style='color:{colour};font-weight:bold'>{esc(lines[0])}</div>" + (
        f"<pre style='max-height:260px;overflow:auto;font-size:85%'>{esc(rest)}</pre>" if rest else ""
    )


@dataclass(frozen=True)
class Said:
    """One line of the lab's log of actions: when (the fleet's clock), what, and whether it went wrong."""

    at: float
    text: str
    error: bool = False


def said_html(lines: Iterable[Said]) -> str:
    """The log of actions, oldest first, each line stamped; the newest in full colour and marked
    ``leaselab-message``, the older dimmed. Every value escaped."""
    lines = list(lines)
    rows = []
    for i, line in enumerate(lines):
        newest = i == len(lines) - 1
        colour = "#c62828" if line.error else "#2e7d32"
        mark = " class='leaselab-message'" if newest else ""
        rows.append(
            f"<div style='opacity:{1 if newest else 0.6}'><span style='color:#757575;font-size:90%'>"
            f"{esc(clock_time(line.at))}</span> <span{mark} style='color:{colour}'>{esc(line.text)}</span></div>"
        )
    # Tight lines: eight of them at the widget's usual 28px line height would push the tables off screen.
    return f"<div style='line-height:1.35'>{''.join(rows)}</div>" if rows else ""


def clock_time(at: float) -> str:
    """``at`` (unix seconds) as the local time of day, ``HH:MM:SS``."""
    try:
        return datetime.fromtimestamp(at).strftime("%H:%M:%S")
    except (ValueError, OverflowError, OSError):  # a made-up clock's time no calendar holds: the number
        return f"{at:.1f}"


@dataclass(frozen=True)
class View:
    """Everything one refresh shows: counts, workers, the newest jobs, and when it was read."""

    counts: dict[str, int]
    workers: list[WorkerStatus]
    jobs: list[Job]
    now: float

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def read_view(queue: Queue, fleet: Fleet, jobs_shown: int = JOBS_SHOWN) -> View:
    """Read what the dashboard shows: cheap with any number of jobs (counts, newest N, running)."""
    return View(
        counts=queue.stats(),
        workers=fleet.status(),
        jobs=queue.jobs(limit=jobs_shown, newest_first=True),
        now=fleet.clock(),
    )


class _WorkerRow:
    def __init__(self, lab: Lab, name: str):
        self.cells = W.HTML()
        self.buttons = {}
        # A server queue has a third fault beside freezing and dying: a worker cut off the network.
        actions = ("pause", "resume", "kill", "hang", "stop") + (("partition", "heal") if lab.networked else ())
        for action in actions:
            b = W.Button(description=t(action, lab.lang), layout=W.Layout(width="max-content", flex="0 0 auto"))
            b.add_class(f"leaselab-{action}-{name}")
            b.on_click(lab._callback(getattr(lab, action), name))
            self.buttons[action] = b
        self.cells.layout = W.Layout(flex="0 0 auto")  # never squeezed out of line with the header
        # In a narrow window the buttons wrap below the cells, together, instead of being cut to "П…".
        buttons = W.HBox(list(self.buttons.values()), layout=W.Layout(flex="0 0 auto"))
        self.box = W.HBox([self.cells, buttons], layout=W.Layout(flex_flow="row wrap"))
        self.box.add_class(f"leaselab-worker-{name}")

    def show(self, w: WorkerStatus, lang: str) -> None:
        _set(self.cells, "value", worker_row_html(w, lang))
        _set(self.buttons["pause"], "disabled", w.state not in (RUNNING, STOPPING))
        _set(self.buttons["resume"], "disabled", w.state != PAUSED)
        _set(self.buttons["kill"], "disabled", w.state not in ALIVE)
        _set(self.buttons["stop"], "disabled", w.state not in (RUNNING, PAUSED))
        # One request at a time: until a handler takes it, another click would ask for nothing more.
        _set(self.buttons["hang"], "disabled", w.state != RUNNING or w.hang_asked)
        if "partition" in self.buttons:
            _set(self.buttons["partition"], "disabled", w.state not in ALIVE or w.partitioned)
            _set(self.buttons["heal"], "disabled", w.state not in ALIVE or not w.partitioned)


def _set(widget: W.Widget, trait: str, value: Any) -> None:
    # Only send what changed: a refresh every second must not flood the browser.
    if getattr(widget, trait) != value:
        setattr(widget, trait, value)


class Lab:
    """A dashboard over one queue file: controls, live tables, worker logs and a timeline.

    ``lease``, ``handler`` and ``job_timeout`` (None: no limit) are what spawned workers get; ``refresh`` is the
    refresher's period in seconds (None or 0: refresh only when asked). Pass
    ``fleet`` to drive processes you already own; otherwise the lab makes one and
    ends its workers on ``close()``.
    """

    def __init__(
        self,
        path: str = "leaselab.db",
        lang: str = "en",
        lease: float = 3.0,
        handler: str = DEFAULT_HANDLER,
        refresh: float | None = 1.0,
        *,
        fleet: Fleet | None = None,
        jobs_shown: int = JOBS_SHOWN,
        busy_timeout: float = 5.0,
        job_timeout: float | None = None,
    ):
        self.lang = check_lang(lang)
        self.handler = handler
        self.interval = refresh
        self.jobs_shown = jobs_shown
        # A short busy timeout: a worker paused while holding SQLite's write lock blocks every
        # writer, and a button should say so in seconds rather than hang for the default 30.
        self.fleet = fleet if fleet is not None else Fleet(path, queue=Queue(path, busy_timeout=busy_timeout))
        self._own_fleet = fleet is None
        self.queue = self.fleet.queue
        self.path = self.fleet.path
        self.view: View | None = None
        self.last_report = None  # what "Check this run" found last
        self._said: deque[Said] = deque(maxlen=SAID_KEPT)
        self._rows: dict[str, _WorkerRow] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._build(lease, job_timeout)
        self.refresh()

    # -- widgets ------------------------------------------------------------------

    def _build(self, lease: float, job_timeout: float | None) -> None:
        L = self.lang
        # Labels take the room their words need, so no language gets its labels cut off with an ellipsis;
        # the number box beside a label stays about 70px wide.
        label = {"description_width": "initial"}

        def short(key):
            return W.Layout(width=f"{80 + 8 * len(t(key, L))}px")

        def named(widget, css):
            widget.add_class(css)
            return widget

        self.n_input = named(
            W.BoundedIntText(5, min=1, max=100_000, description=t("n_jobs", L), layout=short("n_jobs"), style=label),
            "leaselab-n",
        )
        self.priority_input = named(
            W.IntText(0, description=t("priority", L), layout=short("priority"), style=label), "leaselab-priority"
        )
        self.delay_input = named(
            W.BoundedFloatText(0.0, min=0, max=3600, description=t("delay", L), layout=short("delay"), style=label),
            "leaselab-delay",
        )
        self.kind_input = named(
            W.Dropdown(
                options=[(t(f"kind_{k}", L), k) for k in KINDS],
                value="sleep",
                description=t("kind", L),
                layout=W.Layout(width="auto"),
                style=label,
            ),
            "leaselab-kind",
        )
        self.seconds_input = named(
            W.BoundedFloatText(2.0, min=0, max=3600, description=t("seconds", L), layout=short("seconds"), style=label),
            "leaselab-seconds",
        )
        self.lease_input = named(
            W.BoundedFloatText(lease, min=0.2, max=3600, description=t("lease", L), layout=short("lease"), style=label),
            "leaselab-lease",
        )
        self.slots_input = named(
            W.BoundedIntText(1, min=1, max=32, description=t("slots", L), layout=short("slots"), style=label),
            "leaselab-slots",
        )
        # 0 is no limit: a worker spawned without --job-timeout, whose hung handler keeps its job for ever.
        self.timeout_input = named(
            W.BoundedFloatText(
                job_timeout or 0.0,
                min=0,
                max=86_400,
                description=t("job_timeout", L),
                layout=short("job_timeout"),
                style=label,
            ),
            "leaselab-timeout",
        )

        def button(key, css, action):
            b = named(W.Button(description=t(key, L), layout=W.Layout(width="max-content", flex="0 0 auto")), css)
            b.on_click(self._callback(action))
            return b

        self.enqueue_button = button("enqueue", "leaselab-enqueue", self._enqueue_from_inputs)
        self.spawn_button = button("spawn", "leaselab-spawn", self._spawn_from_inputs)
        self.pause_all_button = button("pause_all", "leaselab-pause-all", self.pause_all)
        self.resume_all_button = button("resume_all", "leaselab-resume-all", self.resume_all)
        self.reap_button = button("reap", "leaselab-reap", self.reap)
        self.refresh_button = button("refresh", "leaselab-refresh", self.refresh)
        self.timeline_button = button("timeline", "leaselab-timeline", self._show_timeline)
        self.check_button = button("check", "leaselab-check", self.check)

        self.message = named(W.HTML(), "leaselab-actions")
        self.counts = named(W.HTML(), "leaselab-counts")
        self.workers_box = named(W.VBox(), "leaselab-workers")
        self.workers_header = W.HTML(workers_header_html(L))
        self.jobs = named(W.HTML(), "leaselab-jobs")
        self.legend = named(W.HTML(legend_html(L)), "leaselab-legend")
        self.log_worker = named(W.Dropdown(options=[], description=t("log_of", L)), "leaselab-log-worker")
        self.log = named(W.HTML(), "leaselab-log")
        self.log_worker.observe(lambda _: self._show_log(), names="value")
        self.report = named(W.HTML(), "leaselab-report")
        self.timeline_image = named(
            W.Image(format="png", layout=W.Layout(display="none", max_width="100%")), "leaselab-timeline-image"
        )

        # The file's name, not its folder: a lesson's scratch path is long enough to wrap the title;
        # the full path is in the tooltip.
        shown = self.queue.backend.name  # a server URL without its password
        title = W.HTML(
            f"<h3 style='margin:4px 0' title='{esc(shown)}'>{esc(t('title', L, path=os.path.basename(shown)))}</h3>"
        )

        def row(children):
            # Wraps instead of squeezing: a narrow window or longer Russian labels move controls down a line.
            return W.HBox(children, layout=W.Layout(flex_flow="row wrap"))

        jobs_controls = W.VBox(
            [
                W.HTML(f"<b>{esc(t('jobs_box', L))}</b>"),
                row([self.n_input, self.priority_input, self.delay_input]),
                row([self.kind_input, self.seconds_input, self.enqueue_button]),
            ],
            layout=W.Layout(margin="0 24px 0 0"),
        )
        worker_controls = W.VBox(
            [
                W.HTML(f"<b>{esc(t('workers_box', L))}</b>"),
                row([self.lease_input, self.slots_input, self.timeout_input, self.spawn_button]),
                row([self.pause_all_button, self.resume_all_button, self.reap_button, self.refresh_button]),
            ]
        )
        self.widget = named(
            W.VBox(
                [
                    title,
                    row([jobs_controls, worker_controls]),
                    self.message,
                    self.counts,
                    self.workers_header,
                    self.workers_box,
                    self.legend,
                    self.jobs,
                    W.HBox([self.log_worker]),
                    self.log,
                    W.HBox([self.timeline_button, self.check_button]),
                    self.report,
                    self.timeline_image,
                ]
            ),
            "leaselab-lab",
        )

    def _ipython_display_(self) -> None:
        from IPython.display import display

        self.start()
        display(self.widget)

    def _callback(self, action: Callable, *args: Any) -> Callable:
        def run(_button: Any = None) -> None:
            try:
                action(*args)
            except DatabaseBusy:
                self._say(t("busy", self.lang), error=True)
            except Exception as exc:  # a click must end in a message, never a traceback
                self._say(t("error", self.lang, message=str(exc)), error=True)
            else:
                self._refresh_quietly()

        return run

    def _say(self, text: str, error: bool = False) -> None:
        with self._lock:
            self._said.append(Said(self.fleet.clock(), text, error))
            _set(self.message, "value", said_html(self._said))

    @property
    def said(self) -> list[Said]:
        """The lab's log of actions: what its last ``SAID_KEPT`` actions (and errors) said, oldest first."""
        with self._lock:
            return list(self._said)

    # -- actions: one public method per button --------------------------------------

    def enqueue(
        self, n: int = 5, priority: int = 0, delay: float = 0.0, kind: str = "sleep", seconds: float = 2.0
    ) -> list[int]:
        """Add ``n`` demo jobs: ``kind`` sleep (then succeed), fail (every attempt, until dead) or
        crash (kill the worker on the first attempt only, so the job survives after a reap)."""
        payload = demo_payload(kind, seconds)
        ids = self.queue.enqueue_many([payload] * n, priority=priority, delay=delay)
        self._say(t("enqueued", self.lang, n=len(ids)))
        return ids

    def spawn(
        self,
        name: str | None = None,
        lease: float | None = None,
        handler: str | None = None,
        concurrency: int | None = None,
        job_timeout: float | None = None,
    ) -> str:
        """Start a worker process (lease, jobs at once and job timeout from their boxes unless given; a
        timeout of 0 is none) and return its name."""
        lease = self.lease_input.value if lease is None else lease
        concurrency = self.slots_input.value if concurrency is None else concurrency
        job_timeout = self.timeout_input.value if job_timeout is None else job_timeout
        name = self.fleet.spawn(
            handler=handler or self.handler,
            lease=lease,
            name=name,
            concurrency=concurrency,
            job_timeout=job_timeout or None,
        )
        self._say(t("spawned", self.lang, name=name))
        return name

    def pause(self, name: str) -> None:
        """SIGSTOP a worker."""
        self.fleet.pause(name)
        self._say(t("paused_msg", self.lang, name=name))

    def resume(self, name: str) -> None:
        """SIGCONT a paused worker."""
        self.fleet.resume(name)
        self._say(t("resumed", self.lang, name=name))

    @property
    def networked(self) -> bool:
        """True on a server queue whose workers the fleet can cut off the network."""
        return is_server_url(self.fleet.path) and self.fleet.proxies

    def partition(self, name: str) -> None:
        """Cut a worker off the network (server queues): it runs on, its queries hang, its lease runs out."""
        self.fleet.partition(name)
        self._say(t("partitioned_msg", self.lang, name=name))

    def heal(self, name: str) -> None:
        """Reconnect a worker cut off by ``partition``."""
        self.fleet.heal(name)
        self._say(t("healed_msg", self.lang, name=name))

    def kill(self, name: str) -> None:
        """SIGKILL a worker; its log ends with a line saying the lab killed it."""
        self.fleet.kill(name)
        self.fleet.note(name, t("killed_log", self.lang))
        self._say(t("killed_msg", self.lang, name=name))

    def hang(self, name: str) -> None:
        """Make a worker's handler hang (its current one, or its next): alive, heartbeating, stuck."""
        self.fleet.hang(name)
        self._say(t("hang_msg", self.lang, name=name))

    def stop(self, name: str) -> None:
        """SIGTERM a worker: it finishes its job, then exits."""
        self.fleet.stop(name)
        self._say(t("stopping_msg", self.lang, name=name))

    def pause_all(self) -> list[str]:
        """Pause every running worker."""
        names = self.fleet.pause_all()
        self._say(", ".join(t("paused_msg", self.lang, name=n) for n in names) or "-")
        return names

    def resume_all(self) -> list[str]:
        """Resume every paused worker."""
        names = self.fleet.resume_all()
        self._say(", ".join(t("resumed", self.lang, name=n) for n in names) or "-")
        return names

    def reap(self) -> list[int]:
        """Return expired leases to the queue now, instead of waiting for a worker to do it."""
        moved = self.queue.reap()
        self._say(t("reaped", self.lang, n=len(moved)))
        return moved

    def timeline(self, report=None):
        """The history so far as a matplotlib Figure, with this fleet's pauses and kills shaded
        (and, given a checker ``report``, each broken promise marked on its job's lane)."""
        from .timeline import draw, timeline_data

        return draw(
            timeline_data(
                self.queue.events(), self.fleet.actions or None, now=self.fleet.clock(), jobs=self.queue.jobs()
            ),
            lang=self.lang,
            report=report,
        )

    def check(self):
        """Check everything this queue's history holds, now: either every promise held (with the
        counts) or which job broke which promise. Shows the report and the timeline with each
        anomaly on its job's lane, and returns the ``leaselab.check`` report.

        Workers may still be busy, so a job still pending or running is not called lost: only
        what already happened is judged (a lease long expired and never reaped is ``stuck``)."""
        from ..check import check

        # The reaps can be timed only against one lease: the one every worker of this fleet got.
        leases = {w.lease for w in self.fleet.status()}
        report = check(self.path, idle=False, lease=leases.pop() if len(leases) == 1 else None)
        self.last_report = report
        _set(self.report, "value", report_html(report, self.lang))
        self._show_timeline(report)
        return report

    def _enqueue_from_inputs(self) -> None:
        self.enqueue(
            self.n_input.value,
            priority=self.priority_input.value,
            delay=self.delay_input.value,
            kind=self.kind_input.value,
            seconds=self.seconds_input.value,
        )

    def _spawn_from_inputs(self) -> None:
        self.spawn()

    def _show_timeline(self, report=None) -> None:
        # A PNG in an Image widget, not a figure in an Output: it shows the same with or without a
        # frontend capturing output, so tests and the browser see the same thing.
        buffer = io.BytesIO()
        self.timeline(report).savefig(buffer, format="png", dpi=90)
        self.timeline_image.value = buffer.getvalue()
        self.timeline_image.layout.display = None

    # -- refreshing ---------------------------------------------------------------

    def refresh(self) -> View:
        """Read the file and the fleet once and update every view; returns what it read."""
        with self._lock:
            view = read_view(self.queue, self.fleet, self.jobs_shown)
            self.view = view
            _set(self.counts, "value", counts_html(view.counts, self.lang))
            new_rows = False
            for w in view.workers:
                if w.name not in self._rows:
                    self._rows[w.name] = _WorkerRow(self, w.name)
                    new_rows = True
                self._rows[w.name].show(w, self.lang)
            if new_rows:
                self.workers_box.children = tuple(r.box for r in self._rows.values())
            if not view.workers:
                self.workers_box.children = (W.HTML(f"<i>{esc(t('no_workers', self.lang))}</i>"),)
            _set(self.jobs, "value", jobs_html(view.jobs, view.total, view.now, self.lang))
            names = tuple(w.name for w in view.workers)
            if tuple(self.log_worker.options) != names:
                chosen = self.log_worker.value
                self.log_worker.options = names
                self.log_worker.value = chosen if chosen in names else (names[-1] if names else None)
            self._show_log()
            return view

    def _refresh_quietly(self) -> None:
        try:
            self.refresh()
        except Exception as exc:
            self._say(t("error", self.lang, message=str(exc)), error=True)

    def _show_log(self) -> None:
        name = self.log_worker.value
        text = self.fleet.log_tail(name, lines=15) if name else ""
        _set(
            self.log,
            "value",
            f"<pre style='max-height:200px;overflow:auto;font-size:85%'>{esc(text)}</pre>" if text else "",
        )

    def workers_html(self) -> str:
        """Every worker row's HTML as it is now rendered (header first)."""
        return self.workers_header.value + "".join(r.cells.value for r in self._rows.values())

    def row(self, name: str) -> _WorkerRow:
        """The widgets of one worker's row (its cells and its pause/resume/kill/hang/stop buttons)."""
        return self._rows[name]

    def start(self) -> None:
        """Start the background refresher (done by displaying the lab); no-op without an interval."""
        if not self.interval or (self._thread is not None and self._thread.is_alive()):
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="leaselab-refresher", daemon=True)
        self._thread.start()

    @property
    def refreshing(self) -> bool:
        """True while the background refresher runs."""
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._refresh_quietly()  # sets widget values only; a print here would land in a random cell

    def close(self) -> None:
        """Stop the refresher and, if the lab made its fleet, end every worker. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._own_fleet:
            self.fleet.shutdown()
        self.widget.close()
