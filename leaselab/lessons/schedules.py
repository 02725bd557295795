"""Lesson 8's props: every interleaving of two claims, and the simulator's findings as a reader sees them.

``every_schedule`` runs every order in which a few workers' claim steps can interleave, each step
one real SQLite statement on its own connection to a fresh copy of one file, and says which orders
gave a job to two workers: lesson 2's naive claim (a SELECT, then an UPDATE) against leaselab's
claim (one statement). ``steps`` and ``verdict`` print a simulated run in the lesson's language;
``timeline_of`` replays a run to draw it with the lab's timeline; ``edited`` makes a ``Mutant`` of
a reader's copy of one statement, and ``runs_statement`` says whether the simulated workers run a
statement at all.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..backends.sqlite import statements
from ..clock import ManualClock
from ..job import Job
from ..lab.timeline import Timeline, timeline_data
from ..queue import Queue
from ..sim import explore
from ..sim.model import Violation
from ..sim.mutants import Mutant, planted
from ..sim.world import Scenario, World
from ..words import check_lang, number
from .texts import text
from .wrong import NaiveClaimer

CLAIMS = ("naive", "single")  # lesson 2's two-statement claim, and leaselab's one statement
STEPS = {"naive": ("select", "update"), "single": ("claim",)}  # one real statement each
START = 1_000.0  # the queue's clock, the same for the enqueue and every step
LEASE = 30.0  # long enough that no lease ends during an interleaving: only the order matters

# The zombie of lesson 3 in the smallest scope that holds it: two workers, one job, and one fault,
# a call held in the network (sent while the lease is valid, applied later).
ZOMBIE = Scenario(workers=2, jobs=1, faults=("delay",), max_faults=1)
# The exercise's scope: two workers, two jobs (one fails once), every fault the world has, two at most.
CHECK = Scenario(workers=2, jobs=2)
CHECK_SCHEDULES = 1000
# shrink() stops at a wall-clock budget; these witnesses shrink to their fixed point long before it.
SHRINK_BUDGET = 300.0


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


# -- the simulator's runs, in the lesson's language ---------------------------------------------------------

# Each line the simulated world writes into a trace, as Russian says it. A line no pattern knows stays
# as the simulator wrote it (tests/test_lesson_schedules.py checks every line of the lesson's runs is known).
CALLS_RU = {
    "claim": "захват",
    "complete": "завершение",
    "fail": "отчёт об ошибке",
    "beat": "heartbeat",
    "reap": "вызов reaper",
}
ERRORS_RU = {"link cut": "связь разорвана", "reply lost": "ответ потерян"}
_W = r"(?P<w>w\d+)"
_CALL = r"(?P<call>" + "|".join(CALLS_RU) + ")"
TRACE_RU: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), russian)
    for pattern, russian in (
        (rf"^{_W} starts$", "{w} запускается"),
        (rf"^{_W} holds job (?P<job>\d+) \(attempt (?P<n>\d+)\)$", "{w} держит задачу {job} (попытка {n})"),
        (
            rf"^{_W} drops job (?P<job>\d+)'s outcome: its lease is lost$",
            "{w} отбрасывает итог задачи {job}: аренда потеряна",
        ),
        (
            rf"^{_W}'s handler of job (?P<job>\d+) finds its lease gone on its own clock$",
            "обработчик задачи {job} у {w} видит по своим часам, что аренды больше нет",
        ),
        (rf"^{_W}'s handler of job (?P<job>\d+) raises$", "обработчик задачи {job} у {w} выбрасывает исключение"),
        (rf"^{_W}'s handler of job (?P<job>\d+) returns$", "обработчик задачи {job} у {w} возвращает результат"),
        (rf"^{_W}: job (?P<job>\d+) refused: lease lost$", "{w}: завершение задачи {job} отклонено, аренда потеряна"),
        (rf"^{_W}: job (?P<job>\d+) completed$", "{w}: задача {job} завершена"),
        (rf"^{_W}: job (?P<job>\d+) failed -> (?P<status>\w+)$", "{w}: ошибка задачи {job} записана, статус {status}"),
        (
            rf"^{_W}: job (?P<job>\d+)'s failure refused: lease lost$",
            "{w}: отчёт об ошибке задачи {job} отклонён, аренда потеряна",
        ),
        (rf"^{_W}: heartbeat refused for job (?P<job>\d+)$", "{w}: heartbeat по задаче {job} отклонён"),
        (rf"^{_W}: heartbeat failed: (?P<error>.+)$", "{w}: heartbeat не прошёл ({error})"),
        (rf"^{_W} reaped jobs (?P<ids>\[[\d, ]*\])$", "reaper воркера {w} возвращает в очередь задачи {ids}"),
        (
            rf"^{_W}: {_CALL} met a transient fault, retrying in (?P<s>[\d.]+)s$",
            "{w}: {call} натыкается на временный сбой, повтор через {s} с",
        ),
        (rf"^{_W}: {_CALL} sent; held in the network$", "{w} отправляет {call}, и вызов застревает в сети"),
        (rf"^{_W}: the reply to {_CALL} is lost$", "{w}: ответ на {call} потерян"),
        (rf"^{_W}: {_CALL} arrives$", "{w}: {call} доходит до очереди"),
        (rf"^{_W} crashes$", "{w} падает"),
        (rf"^{_W} pauses for (?P<s>[\d.]+)s$", "{w} замирает на {s} с"),
        (rf"^{_W}'s link is cut for (?P<s>[\d.]+)s$", "связь {w} с очередью разорвана на {s} с"),
        (rf"^{_W}'s next call will be held in flight$", "следующий вызов {w} застрянет в пути"),
        (rf"^{_W}'s next call will be answered into the void$", "ответ на следующий вызов {w} пропадёт"),
    )
)
_NUMBERED = re.compile(r"^(?P<i>\s*\d+)\.\s+(?P<t>\d+\.\d+)  (?P<line>.*)$")


def trace_line(line: str, lang: str = "en") -> str:
    """One line of a simulated trace (without its time) in ``lang``; a line no pattern knows stays as it is."""
    if check_lang(lang) == "en":
        return line
    for pattern, russian in TRACE_RU:
        found = pattern.match(line)
        if found:
            values = found.groupdict()
            if "call" in values:
                values["call"] = CALLS_RU[values["call"]]
            if "error" in values:
                values["error"] = ERRORS_RU.get(values["error"], values["error"])
            if "s" in values:
                values["s"] = number(float(values["s"]), "g", lang)
            return russian.format(**values)
    return line


def steps(run: explore.Run, lang: str = "en") -> list[str]:
    """A simulated run as numbered steps (``explore.numbered``) in ``lang``: number, virtual time in
    milliseconds, what happened. Milliseconds, because «1,202» (seconds to three places) would read
    as an English thousand in Russian prose, and both languages state the same numbers."""
    check_lang(lang)
    lines = []
    for line in explore.numbered(run):
        found = _NUMBERED.match(line)
        if found is None:
            lines.append(line)
            continue
        ms = number(float(found["t"]) * 1000, "6.0f", lang)
        lines.append(f"{found['i']}. {ms} {text('l8_ms', lang)}  {trace_line(found['line'], lang)}")
    return lines


# What each promise the simulator checks is, in each language: the same words whatever the run, so the
# two lessons state the same facts (the simulator's own message, with its times and tokens, is ``run.violation``).
VIOLATIONS_EN = {
    "fence": "a write was accepted, though the token it came under no longer held the job",
    "refused_completion": "a completion was refused, though its token held the job",
    "refused_failure": "a failure was refused, though its token held the job",
    "refused_heartbeat": "a heartbeat was refused, though its token held the job",
    "reap": "the reaper took back the wrong jobs: leases that had not ended (or left ones that had)",
    "claim_order": "a claim took jobs out of the order the queue promises",
    "token": "a claim wrote a token that is not its own",
    "token_reused": "a claim wrote a token an earlier claim had written",
    "held_by": "a retried claim found the wrong jobs by its token",
    "wrong_status": "a job's status differs from the specification",
    "wrong_outcome": "a job was completed by an attempt whose handler did not return",
    "effect_without_lease": "a handler made its outside effect after its lease had ended",
    "reaped_own_job": "a live worker's reaper took back that worker's own job",
    "needless_rerun": "a job was run again though no fault hit its last attempt",
    "stuck": "a job is neither done nor dead, though the faults are over and the workers run",
    "effect_repeated": "a handler's outside effect was made twice",
    "rows": "the queue holds other jobs than the specification",
}
VIOLATIONS_RU = {
    "fence": "запись принята, хотя токен, под которым она пришла, уже не держал задачу",
    "refused_completion": "завершение отклонено, хотя его токен держал задачу",
    "refused_failure": "отчёт об ошибке отклонён, хотя его токен держал задачу",
    "refused_heartbeat": "heartbeat отклонён, хотя его токен держал задачу",
    "reap": "reaper вернул в очередь не те задачи: аренда вернувшихся ещё не кончилась (или кончилась у других)",
    "claim_order": "захват взял задачи не в том порядке, который обещает очередь",
    "token": "захват записал задаче чужой токен",
    "token_reused": "захват записал токен, который уже выдавал раньше",
    "held_by": "повторный захват нашёл по своему токену не те задачи",
    "wrong_status": "статус задачи разошёлся со спецификацией",
    "wrong_outcome": "задачу завершила попытка, чей обработчик не вернул результат",
    "effect_without_lease": "обработчик сделал внешнее действие, когда его аренда уже кончилась",
    "reaped_own_job": "reaper живого воркера вернул в очередь его собственную задачу",
    "needless_rerun": "задачу взяли снова, хотя прошлую попытку не задел ни один сбой",
    "stuck": "задача не завершена и не мертва, хотя сбои кончились и воркеры работают",
    "effect_repeated": "внешнее действие обработчика повторилось",
    "rows": "в очереди не те задачи, что в спецификации",
}


def verdict(run: explore.Run, lang: str = "en") -> str:
    """What a run found, in ``lang``: the promise it broke (its kind, and what it promises), or that every
    promise held."""
    check_lang(lang)
    found = run.violation
    if found is None:
        return text("l8_held", lang, steps=run.steps)
    kind = found.kind
    how = (VIOLATIONS_EN if lang == "en" else VIOLATIONS_RU).get(kind)
    if how is None and kind.startswith("wrong_"):
        how = text("l8_wrong_field", lang, field=kind[len("wrong_") :])
    return text("l8_broken", lang, kind=kind, how=how or text("l8_unnamed", lang))


def timeline_of(run: explore.Run) -> Timeline:
    """The lab's timeline of a simulated run: the run replayed on a fresh world (the same seed, the same
    actions, then the same drain as ``explore.run``) to read its queue's history before it is closed.

    Times are virtual seconds; the picture's faults are those the history shows (an attempt that went
    silent until it was reaped), as for any leaselab file without a fleet record.
    """
    world = World(run.scenario, seed=run.seed)
    try:
        try:
            for action in run.actions:
                if action in world.enabled():
                    world.step(action)
            for _ in range(len(run.trace) * 10 + 100):  # the drain, as explore.run does it; bounded
                if world.settled() and not any(w.loop or w.pulse for w in world.workers.values() if w.alive):
                    break
                enabled = [a for a in world.enabled() if not world.is_fault(a)]
                if not enabled:
                    break
                world.step(min(enabled, key=lambda a: explore.DRAIN_ORDER.index(a[0])))
        except Violation:
            pass  # the run broke a promise here: its history so far is the picture
        return timeline_data(world.queue.events())
    finally:
        world.close()


# -- a mutant of the reader's own ------------------------------------------------------------------------


def edited(name: str, copy: str, breaks: str = "the reader's own change") -> Mutant:
    """A mutant that replaces statement ``name`` (of ``leaselab.backends.sqlite.statements``) with ``copy``."""
    original = getattr(statements, name, None)
    if not isinstance(original, str) or not name.isupper():
        raise ValueError(f"no statement named {name!r} in leaselab.backends.sqlite.statements")
    return Mutant(f"edited_{name.lower()}", breaks, (((name,), original, copy),))


def runs_statement(name: str, scenario: Scenario = CHECK, seed: int = 0) -> bool:
    """True when a simulated run of ``scenario`` (seed ``seed``) runs statement ``name``: with its text made
    invalid SQL, the run ends in an error."""
    broken = edited(name, "SELECT leaselab_no_such_function()", "a statement that cannot run")
    with planted(broken):
        try:
            explore.run(scenario, seed)
        except Exception:  # any error from the broken text means the statement ran
            return True
    return False
