"""A simulated run as a reader sees it: numbered steps in either language, a timeline drawn in text, the spans
the lab's timeline draws, JSON, and the witness file that ``leaselab simulate --replay`` runs again.

The world writes its trace in English, one line per step (``world.World.note``). ``STEP_PATTERNS`` reads
each line back into what happened (who, which job, which fault), so the steps can be said in Russian
too and the attempts and faults can be drawn; a line no pattern knows is shown as the world wrote it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ..queue import DURABILITIES
from ..words import number
from .errors import BadReplayFile
from .explore import Run
from .texts import has, text
from .world import Action, Scenario

FORMAT = 1  # the witness file's format; a file of another format is refused, not guessed at
WIDTH = 64  # the text timeline's width, in columns of time

_W = r"(?P<w>\S+)"
_JOB = r"(?P<job>\d+)"
_CALL = r"(?P<call>\w+)"
# Each line of the world's trace, by what it says (``texts``' "step_<key>" says it in either language).
STEP_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (key, re.compile(pattern))
    for key, pattern in (
        ("start", rf"{_W} starts"),
        ("hold", rf"{_W} holds job {_JOB} \(attempt (?P<attempt>\d+)\)"),
        ("drop", rf"{_W} drops job {_JOB}'s outcome: its lease is lost"),
        ("lease_gone", rf"{_W}'s handler of job {_JOB} finds its lease gone on its own clock"),
        ("raises", rf"{_W}'s handler of job {_JOB} raises"),
        ("returns", rf"{_W}'s handler of job {_JOB} returns"),
        ("completed", rf"{_W}: job {_JOB} completed"),
        ("refused", rf"{_W}: job {_JOB} refused: lease lost"),
        ("failed", rf"{_W}: job {_JOB} failed -> (?P<status>\w+)"),
        ("fail_refused", rf"{_W}: job {_JOB}'s failure refused: lease lost"),
        ("beat_refused", rf"{_W}: heartbeat refused for job {_JOB}"),
        ("beat_failed", rf"{_W}: heartbeat failed: (?P<why>link cut|reply lost)"),
        ("reaped", rf"{_W} reaped jobs? (?P<jobs>\d+(?:, \d+)*)"),
        ("transient", rf"{_W}: {_CALL} met a transient fault, retrying in (?P<wait>[\d.e+-]+)s"),
        ("held", rf"{_W}: {_CALL} sent; held in the network"),
        ("reply_lost", rf"{_W}: the reply to {_CALL} is lost"),
        ("arrives", rf"{_W}: {_CALL} arrives"),
        ("crash", rf"{_W} crashes"),
        ("power", r"the power fails: every worker dies and the disk keeps only what was synced"),
        ("pause", rf"{_W} pauses for (?P<seconds>[\d.e+-]+)s"),
        ("cut", rf"{_W}'s link is cut for (?P<seconds>[\d.e+-]+)s"),
        ("armed_delay", rf"{_W}'s next call will be held in flight"),
        ("armed_lose", rf"{_W}'s next call will be answered into the void"),
        ("give_up", rf"{_W} gives job {_JOB} up: it ran past its timeout of (?P<seconds>[\d.e+-]+)s"),
        ("timed_out", rf"{_W}: job {_JOB} timed out -> (?P<status>\w+)"),
        ("timeout_unwritten", rf"{_W}: job {_JOB}'s timeout not written: (?P<why>link cut|reply lost)"),
        ("hang", rf"{_W}'s handler of job {_JOB} hangs: its pulse goes on"),
        ("suspend", rf"{_W}'s host suspends for (?P<seconds>[\d.e+-]+)s: its monotonic clock stands still"),
        ("jump", rf"{_W}'s clock jumps (?P<seconds>[\d.e+-]+)s forward"),
        (
            "zombie_effect",
            rf"{_W}'s handler of job {_JOB} writes its effect after its lease ended: "
            r"its clock did not count the suspend",
        ),
        ("out_of_service", rf"{_W} exits: every slot holds a handler past its timeout"),
    )
)
_NUMBERS = ("wait", "seconds")  # facts that are numbers of seconds, written as the reader's language writes them
_TRACE_LINE = re.compile(r"\s*(?P<t>[\d.]+)  (?P<what>.*)")


@dataclass(frozen=True)
class Step:
    """One line of a trace, read back: at virtual time ``t``, ``key`` (a ``STEP_PATTERNS`` name, or None for a line
    no pattern knows, kept as ``line``) with its ``facts``."""

    t: float
    key: str | None
    facts: dict[str, str]
    line: str

    def render(self, lang: str) -> str:
        if self.key is None:
            return self.line
        facts: dict[str, Any] = dict(self.facts)
        for name in _NUMBERS:
            if name in facts:
                facts[name] = float(facts[name])
        if "call" in facts and has(f"call_{facts['call']}"):
            facts["call"] = text(f"call_{facts['call']}", lang)
        if "why" in facts:
            facts["why"] = text(f"why_{facts['why']}", lang)
        if "jobs" in facts:  # the trace's list of ids ("1, 2"), read as words: "job 1", "задачи 1, 2"
            facts["count"] = len(facts["jobs"].split(","))
        return text(f"step_{self.key}", lang, **facts)


def read_step(line: str) -> Step:
    """One trace line read back into a ``Step``."""
    found = _TRACE_LINE.fullmatch(line)
    if found is None:
        return Step(math.nan, None, {}, line)
    t, what = float(found.group("t")), found.group("what")
    for key, pattern in STEP_PATTERNS:
        matched = pattern.fullmatch(what)
        if matched:
            return Step(t, key, matched.groupdict(), what)
    return Step(t, None, {}, what)


def title(kind: str, lang: str) -> str:
    """A violation's kind as a heading: its own words where there are some, else the kind's name."""
    return text(f"kind_{kind}", lang) if has(f"kind_{kind}") else text("kind", lang, kind=kind)


def steps(run: Run, lang: str = "en", *, ms: bool = False, titled: bool = False) -> list[str]:
    """The run's trace as numbered steps in ``lang``, the broken promise last (its message in English, its kind's
    words in Russian: the message is the specification's own sentence).

    ``ms``: virtual time in whole milliseconds, with the unit («1202 мс»), for Russian prose, where seconds to three
    places («1,202») read like an English thousand. ``titled``: the broken promise by its kind's words in English
    too, so the two languages state the same facts (the message names tokens and times)."""

    def when(t: float) -> str:
        if math.isnan(t):
            return ""
        return text("at_ms", lang, ms=round(t * 1000)) if ms else number(t, "8.3f", lang)

    lines = []
    for i, step in enumerate((read_step(line) for line in run.trace), 1):
        lines.append(f"{i:3d}. {when(step.t)}  {step.render(lang)}")
    if run.violation is not None:
        said = run.violation.message if lang == "en" and not titled else title(run.violation.kind, lang)
        lines.append(f"{len(lines) + 1:3d}. {when(run.virtual)}  ! {text('broken', lang, message=said)}")
    return lines


# -- the attempts and faults, for drawing ---------------------------------------------------------------


def spans(run: Run) -> dict[str, Any]:
    """Per worker, its attempts and faults, in the shape ``leaselab.lab.timeline`` draws (``Timeline``'s fields:
    ``lanes``; ``bars`` with ``worker, job_id, attempt, start, end, outcome``; ``faults`` with ``worker, kind,
    start, end``, kinds ``pause`` (a suspended host too), ``partition`` (a cut link) and ``kill`` (a crash);
    ``marks`` with ``worker, at, kind, job_id``; ``t0`` and ``t1`` in virtual seconds). ``points`` adds what the lab
    has no shape for: a call held in flight (``delay``) or answered into the void (``lose``), a hung handler
    (``hang``), a suspend's stopped clock (``suspend``), a clock's jump (``jump``), and the broken promise
    (``broken``)."""
    end = max(run.virtual, 1e-9)
    lanes: list[str] = []
    bars: list[dict[str, Any]] = []
    faults: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    points: list[dict[str, Any]] = []
    open_bars: dict[int, dict[str, Any]] = {}  # job id -> the bar of its attempt still under way

    def close(job: int, at: float, outcome: str) -> None:
        bar = open_bars.pop(job, None)
        if bar is not None:
            bars.append({**bar, "end": at, "outcome": outcome})

    for step in map(read_step, run.trace):
        f, t = step.facts, step.t
        w = f.get("w")
        if w is not None and w not in lanes and step.key is not None:
            lanes.append(w)
        if step.key == "hold":
            close(int(f["job"]), t, "reaped")
            open_bars[int(f["job"])] = {"worker": w, "job_id": int(f["job"]), "attempt": int(f["attempt"]), "start": t}
        elif step.key == "completed":
            close(int(f["job"]), t, "completed")
        elif step.key in ("failed", "timed_out"):
            close(int(f["job"]), t, "dead" if f["status"] == "dead" else "failed")
        elif step.key in ("refused", "fail_refused", "drop"):
            job = int(f["job"])
            if open_bars.get(job, {}).get("worker") == w:
                close(job, t, "lease_lost")
            marks.append({"worker": w, "at": t, "kind": "lease_lost", "job_id": job})
        elif step.key == "reaped":
            for job in (int(j) for j in f["jobs"].split(",")):
                holder = open_bars.get(job, {}).get("worker")
                close(job, t, "reaped")
                if holder is not None:
                    marks.append({"worker": holder, "at": t, "kind": "reaped", "job_id": job})
        elif step.key == "crash":
            faults.append({"worker": w, "kind": "kill", "start": t, "end": end})
        elif step.key in ("pause", "cut", "suspend"):  # a suspended host is paused, as the lab draws it
            kind = "partition" if step.key == "cut" else "pause"
            faults.append({"worker": w, "kind": kind, "start": t, "end": min(t + float(f["seconds"]), end)})
            if step.key == "suspend":
                points.append({"worker": w, "at": t, "kind": "suspend"})
        elif step.key == "jump":
            points.append({"worker": w, "at": t, "kind": "jump"})
        elif step.key == "hang":
            points.append({"worker": w, "at": t, "kind": "hang"})
        elif step.key in ("armed_delay", "armed_lose"):
            points.append({"worker": w, "at": t, "kind": step.key.removeprefix("armed_")})
    for job in list(open_bars):
        close(job, end, "running")
    if run.violation is not None:
        named = re.search(r"\b(w\d+)\b", run.violation.message)
        who = named.group(1) if named and named.group(1) in lanes else (lanes[0] if lanes else "")
        points.append({"worker": who, "at": run.virtual, "kind": "broken"})
    lanes.sort(key=lambda name: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)])
    return {"lanes": lanes, "bars": bars, "faults": faults, "marks": marks, "points": points, "t0": 0.0, "t1": end}


_FAULT_LETTERS = {
    "kill": "X",
    "pause": "P",
    "partition": "C",
    "delay": "D",
    "lose": "L",
    "hang": "H",
    "suspend": "S",
    "jump": "J",
    "broken": "!",
}


def drawing(run: Run, lang: str = "en", width: int = WIDTH) -> list[str]:
    """The run's timeline in text: a row per worker, each attempt a bar ``[job·attempt===]``, faults as letters
    (a pause or a cut drawn ``~`` for as long as it lasts), the broken promise ``!``, and a time axis."""
    data = spans(run)
    t1 = data["t1"]

    def col(t: float) -> int:
        return min(width - 1, max(0, round(t / t1 * (width - 1))))

    label = max((len(lane) for lane in data["lanes"]), default=2)
    rows = []
    for lane in data["lanes"]:
        cells = [" "] * width
        for fault in (f for f in data["faults"] if f["worker"] == lane and f["kind"] != "kill"):
            for c in range(col(fault["start"]), col(fault["end"]) + 1):
                cells[c] = "~"
        for bar in (b for b in data["bars"] if b["worker"] == lane):
            a, b = col(bar["start"]), col(bar["end"])
            for c in range(a, b + 1):
                cells[c] = "="
            cells[a] = "["
            if bar["outcome"] != "running":
                cells[b] = "]"
            tag = f"{bar['job_id']}·{bar['attempt']}"
            for i, ch in enumerate(tag):
                if a + 1 + i < b:
                    cells[a + 1 + i] = ch
        for fault in (f for f in data["faults"] if f["worker"] == lane):
            cells[col(fault["start"])] = _FAULT_LETTERS[fault["kind"]]
            if fault["kind"] == "kill":
                for c in range(col(fault["start"]) + 1, width):
                    cells[c] = " "
        for point in (p for p in data["points"] if p["worker"] == lane):
            cells[col(point["at"])] = _FAULT_LETTERS[point["kind"]]
        rows.append(f"{lane:>{label}} |{''.join(cells).rstrip()}")
    ticks = [" "] * width
    axis = [" "] * (width + 8)
    for i in range(5):
        c = round(i * (width - 1) / 4)
        ticks[c] = "+"
        mark = number(t1 * i / 4, ".2f", lang)
        start = max(0, min(c - len(mark) // 2, width + 8 - len(mark)))
        axis[start : start + len(mark)] = mark
    rows.append(f"{'':>{label}}  {''.join(ticks).replace(' ', '-')}")
    rows.append(f"{'':>{label}}  {''.join(axis).rstrip()}")
    return rows


# -- the witness file -------------------------------------------------------------------------------------


def leaselab_version() -> str:
    try:
        return version("leaselab")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


@dataclass(frozen=True)
class Witness:
    """A failing schedule, all a replay needs: the scenario, the seed, the actions, the mutant and the handler
    it ran with, and what it broke and how it went (the trace), to compare the replay with."""

    scenario: Scenario
    seed: int
    actions: list[Action]
    kind: str
    message: str
    trace: list[str]
    mutant: str | None = None
    handler: str | None = None
    leaselab: str = ""

    def to_json(self) -> dict[str, Any]:
        fields = dataclasses.asdict(self.scenario)
        fields["faults"] = list(self.scenario.faults)
        return {
            "format": FORMAT,
            "leaselab": self.leaselab or leaselab_version(),
            "scenario": fields,
            "seed": self.seed,
            "actions": [list(a) for a in self.actions],
            "mutant": self.mutant,
            "handler": self.handler,
            "violation": {"kind": self.kind, "message": self.message},
            "trace": self.trace,
        }


def witness(run: Run, mutant: str | None = None, handler: str | None = None) -> Witness:
    """The witness of a failing ``run``."""
    assert run.violation is not None, "only a failing run has a witness"
    return Witness(
        run.scenario,
        run.seed,
        list(run.actions),
        run.violation.kind,
        run.violation.message,
        list(run.trace),
        mutant,
        handler,
        leaselab_version(),
    )


def save(found: Witness, path: str | os.PathLike) -> None:
    """Write ``found`` to ``path`` as JSON."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(found.to_json(), indent=2, ensure_ascii=False) + "\n")


def load(path: str | os.PathLike) -> Witness:
    """The witness saved at ``path``; ``BadReplayFile`` names what is wrong with a file that is not one."""
    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as fh:
            body = json.load(fh)
    except FileNotFoundError:
        raise BadReplayFile("replay_missing", path=where) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError):
        raise BadReplayFile("replay_unreadable", path=where) from None
    except json.JSONDecodeError as exc:
        raise BadReplayFile("replay_not_json", path=where, line=exc.lineno) from None

    def field(name: str, kind: Any, within: dict[str, Any] | None = None) -> Any:
        holder = body if within is None else within
        value = holder.get(name) if isinstance(holder, dict) else None
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise BadReplayFile("replay_field", path=where, field=name)
        return value

    if not isinstance(body, dict):
        raise BadReplayFile("replay_field", path=where, field="format")
    if body.get("format") != FORMAT:
        if isinstance(body.get("format"), int):
            raise BadReplayFile("replay_format", path=where, got=body["format"], want=FORMAT)
        raise BadReplayFile("replay_field", path=where, field="format")
    fields = field("scenario", dict)
    known = {f.name: f for f in dataclasses.fields(Scenario)}
    given: dict[str, Any] = {}
    for name, value in fields.items():
        default = known[name].default if name in known else None
        if name == "faults" and isinstance(value, list) and all(isinstance(x, str) for x in value):
            given[name] = tuple(value)
        elif name == "timeout" and (value is None or type(value) in (int, float)):
            given[name] = None if value is None else float(value)
        elif name == "durability" and value in DURABILITIES:
            given[name] = value
        elif name in known and isinstance(default, float) and type(value) in (int, float):
            given[name] = float(value)
        elif name in known and isinstance(default, int) and type(value) is int:
            given[name] = value
        else:
            raise BadReplayFile("replay_field", path=where, field=f"scenario.{name}")
    actions = field("actions", list)
    if not all(isinstance(a, list) and a and isinstance(a[0], str) for a in actions):
        raise BadReplayFile("replay_field", path=where, field="actions")
    violation = field("violation", dict)
    trace = field("trace", list)
    if not all(isinstance(line, str) for line in trace):
        raise BadReplayFile("replay_field", path=where, field="trace")
    for name in ("mutant", "handler"):
        if body.get(name) is not None and not isinstance(body.get(name), str):
            raise BadReplayFile("replay_field", path=where, field=name)
    return Witness(
        Scenario(**given),
        field("seed", int),
        [tuple(a) for a in actions],
        field("kind", str, violation),
        field("message", str, violation),
        trace,
        body.get("mutant"),
        body.get("handler"),
        str(body.get("leaselab", "")),
    )
