"""Proving a handler under the nemesis: lesson 8's trials, and the grade of a reader's fix.

A trial runs a payment handler's source on real workers through ``run`` (so under the seeded
schedule too), with one fault put into the handler at the instant that matters
(``leaselab.harness.gates``): ``"after"`` freezes the first attempt of job 1 after its payment
until another attempt has finished the job, ``"before"`` kills it just before. Then the checker
reads the queue and the ledger (the handler's outside world, checked through ``Ledger.effects``).

``grade`` is lesson 8's check cell, as Gossip Glomers grades a challenge: the fix is run, not
read. It is right when, under both faults, the checker finds no anomaly, every account got its
money exactly once, and the run stayed within its budget of attempts. ``check_look_then_pay`` is
the check of the lesson's exercise 2: a fault moved to where a wrong handler breaks.
``check_fault`` is exercise 3's: a fault the reader writes, run against section 2's three handlers.
"""

from __future__ import annotations

import ast
import itertools
import os
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ..check import Report, check
from ..harness.effects import Ledger
from .errors import FaultMissed
from .run import ChaosResult, run
from .texts import text

FAULTS_AT = ("after", "before")
ACCOUNTS = ("a1", "a2", "a3", "a4")
AMOUNT = 10
LEASE = 1.0
SEED = 7
# Every job once, plus the one retry the fault in the handler forces, plus one for each fault of the
# schedule (a pause past the lease may land on a holder): a fix that fails attempts on purpose is over.
BASE_BUDGET = len(ACCOUNTS) + 1
# Lesson 8's section 2, by the names the lesson gives them: the right fix and the two that look right.
SECTION_TWO = ("KEYED", "SKIPS_RETRIES", "KEY_PER_ATTEMPT")
# What exercise 3 asks for in the reader's fault, and the time its trials give the nemesis: less than
# its first gap, so nothing strikes but the reader's fault, and the answer is the same on every run.
FREEZE = "freeze_until_done_by_another"
QUIET_SECONDS = 0.1


def _jobs_of(path: Path):
    from ..queue import Queue

    with Queue(path) as q:
        return q.jobs()


@dataclass(frozen=True)
class Trial:
    """One run of a handler under one fault: what the nemesis did, what the checker found, the money."""

    fault: str
    chaos: ChaosResult
    report: Report
    balances: dict[str, int]

    @property
    def paid_once(self) -> bool:
        """Every account got its amount exactly once."""
        return all(b == AMOUNT for b in self.balances.values())

    @property
    def attempts(self) -> int:
        return self.report.counts.get("attempts", 0)

    @property
    def budget(self) -> int:
        """The attempts this trial may take: every job once, the forced retry, one per fault of the schedule."""
        return BASE_BUDGET + len(self.chaos.schedule.steps)


def trial(source: str, folder: str | os.PathLike, *, fault: str = "after", seed: int = SEED) -> Trial:
    """Run the handler ``source`` (a module that defines ``pay(job)``) under ``fault`` in a new ``folder``."""
    if fault not in FAULTS_AT:
        raise ValueError(f"fault must be one of {', '.join(FAULTS_AT)}; got {fault!r}")
    result = _run(source, Path(folder), fault, seconds=2.0, seed=seed)
    attempts_of_1 = next((j.attempts for j in _jobs_of(Path(folder) / "queue.db") if j.id == 1), 0)
    if attempts_of_1 < 2:
        logs = "\n".join(
            f"{p.name}: {p.read_text(errors='replace')[-1500:]}"
            for p in sorted((Path(folder) / "run" / "logs").glob("*.log"))
        )
        raise FaultMissed(
            f"the fault {fault!r} put into job 1's handler did not strike (job 1 ran {attempts_of_1} "
            f"time(s)); does the handler call gates.fault_point(job, {fault!r})? worker logs:\n{logs}"
        )
    return result


def _run(source: str, folder: Path, fault: str | None, *, seconds: float, seed: int) -> Trial:
    """The handler ``source`` on two workers in a new ``folder``; ``fault`` is the payload's, None for none."""
    if not re.search(r"^def pay\(", source, re.M):
        raise ValueError("the handler's source must define pay(job)")
    folder.mkdir(parents=True, exist_ok=False)
    module = f"pay_{fault or 'own'}_{os.getpid()}_{len(list(folder.parent.iterdir()))}"
    (folder / f"{module}.py").write_text(source, encoding="utf-8")
    ledger = folder / "ledger.db"
    jobs = [
        {"payload": {"ledger": str(ledger), "account": a, "amount": AMOUNT, "fault": fault, "victim": 1}}
        for a in ACCOUNTS
    ]
    sys.path.insert(0, str(folder))  # run() imports the handler here first, so a broken one fails at once
    try:
        result = run(
            folder / "queue.db",
            f"{module}:pay",
            workers=2,
            jobs=jobs,
            seconds=seconds,
            lease=LEASE,
            faults=["pause"],
            seed=seed,
            env={"PYTHONPATH": str(folder)},
            folder=folder / "run",
        )
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(module, None)
    with Ledger(ledger) as book:
        report = check(folder / "queue.db", effects=book.effects, lease=LEASE)
        balances = {a: book.balance(a) for a in ACCOUNTS}
    return Trial(fault or "own", result, report, balances)


def verdict(trials: list[Trial], lang: str = "en") -> str:
    """One line: right, or the first promise the handler broke under which fault."""
    for t in trials:
        where = text(f"proof_{t.fault}", lang)
        if not t.chaos.clean and t.report.clean:
            return text("proof_wrong", lang, detail=text("proof_not_drained", lang, where=where))
        if not t.report.clean:
            a = t.report.anomalies[0]
            return text("proof_wrong", lang, detail=f"{where}: {a.title(lang)}: {a.sentence(lang)}")
        if not t.paid_once:
            account, got = next((acc, b) for acc, b in t.balances.items() if b != AMOUNT)
            return text(
                "proof_wrong",
                lang,
                detail=text("proof_money", lang, where=where, account=account, got=got, want=AMOUNT),
            )
        if t.attempts > t.budget:
            return text(
                "proof_wrong", lang, detail=text("proof_budget", lang, where=where, n=t.attempts, budget=t.budget)
            )
    return text("proof_right", lang, n=len(ACCOUNTS), amount=AMOUNT)


def grade(source: str, folder: str | os.PathLike, lang: str = "en", *, seed: int = SEED) -> str:
    """Lesson 8's check: run the reader's handler under a freeze after the payment and a crash before it."""
    folder = Path(folder)
    return verdict([trial(source, folder / fault, fault=fault, seed=seed) for fault in FAULTS_AT], lang)


def passed(line: str, lang: str = "en") -> bool:
    """Whether a line ``grade`` returned is its verdict of right (lesson 8 compares a reader's guess with it)."""
    return line == text("proof_right", lang, n=len(ACCOUNTS), amount=AMOUNT)


def _first_line(lines: list[str], needle: str, after: int = -1) -> int | None:
    return next((i for i, line in enumerate(lines) if i > after and needle in line), None)


def check_look_then_pay(source: str, folder: str | os.PathLike, lang: str = "en") -> str:
    """Lesson 8, exercise 2: a handler that pays only when its look in the ledger finds no row, with the freeze
    moved between the look and the payment, is run under that freeze: right when account a1 got paid twice.

    Where the freeze stands is read from the source first, so a copy left as it was is told so
    without a run; then the trial runs the handler on real workers, as ``grade`` does.
    """
    lines = source.splitlines()
    look = _first_line(lines, "entries(")
    if look is None:
        return text("proof_wrong", lang, detail=text("proof_look_none", lang))
    freeze = _first_line(lines, 'fault_point(job, "after")')
    pay = _first_line(lines, ".deposit(", after=look)
    if freeze is None or pay is None or not look < freeze < pay:
        return text("proof_wrong", lang, detail=text("proof_look_where", lang))
    got = trial(source, folder, fault="after").balances[ACCOUNTS[0]]  # job 1, the one frozen, pays a1
    if got > AMOUNT:
        return text("proof_look_caught", lang, got=got, want=AMOUNT)
    return text("proof_wrong", lang, detail=text("proof_look_missed", lang, got=got))


# Every answer ``check_fault`` can give: "none", or the handlers a fault broke, in SECTION_TWO's order.
FAULT_ANSWERS = ("none",) + tuple(
    "+".join(names) for n in range(1, len(SECTION_TWO) + 1) for names in itertools.combinations(SECTION_TWO, n)
)


@dataclass(frozen=True)
class FaultCheck:
    """What exercise 3's check found: its lines, and ``broken``, the answer to compare a guess with.

    ``broken`` is one of ``FAULT_ANSWERS``, or None when the check ran nothing (the fault was not
    there yet, or did not strike): then there is no answer to compare with.
    """

    lines: tuple[str, ...]
    broken: str | None

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _reads(fault: ast.AST) -> tuple[bool, bool]:
    """Whether ``fault`` calls the freeze, and whether it reads ``job.attempts`` (to strike one attempt only)."""
    nodes = list(ast.walk(fault))
    freezes = any(
        isinstance(n, ast.Call) and FREEZE in (getattr(n.func, "attr", None), getattr(n.func, "id", None))
        for n in nodes
    )
    return freezes, any(isinstance(n, ast.Attribute) and n.attr == "attempts" for n in nodes)


def _with_fault(handler: str, fault: str, at: str) -> str:
    """``handler`` with the lines of ``fault`` just after its ``gates.fault_point(job, at)``, indented alike."""
    point = f'gates.fault_point(job, "{at}")'
    lines = handler.splitlines()
    where = next((i for i, line in enumerate(lines) if point in line), None)
    if where is None:
        raise ValueError(f"the handler has no {point} to put the fault beside")
    indent = lines[where][: len(lines[where]) - len(lines[where].lstrip())]
    added = [indent + line if line.strip() else "" for line in textwrap.dedent(fault).strip("\n").splitlines()]
    return "\n".join(lines[: where + 1] + added + lines[where + 1 :]) + "\n"


def check_fault(
    fault: str, at: str, handlers: dict[str, str], folder: str | os.PathLike, lang: str = "en"
) -> FaultCheck:
    """Lesson 8, exercise 3: the reader's ``fault`` (code that calls ``gates.freeze_until_done_by_another(job)``)
    put just ``at`` ("before" or "after") the payment of each of section 2's ``handlers``, each run on
    real workers: which paid every account exactly once, and which did not.

    The trials have no fault of the nemesis and none of the payload, so the reader's is the only
    one: the answer does not depend on the machine. A fault that is missing, unreadable, or put
    nowhere the lesson knows is told so without a run; one that never strikes (no job ran twice) is
    told so after it.
    """
    if sorted(handlers) != sorted(SECTION_TWO):
        raise ValueError(f"handlers must be section 2's {', '.join(SECTION_TWO)}; got {', '.join(handlers)}")

    def wrong(key: str, **fields: object) -> FaultCheck:
        return FaultCheck((text("proof_wrong", lang, detail=text(key, lang, **fields)),), None)

    if at not in FAULTS_AT:
        return wrong("proof_fault_at", at=repr(at))
    try:
        freezes, reads_attempts = _reads(ast.parse(textwrap.dedent(fault)))
    except SyntaxError as exc:
        return wrong("proof_fault_syntax", error=f"{exc.msg} (line {exc.lineno})")
    if not freezes:
        return wrong("proof_fault_none")
    if not reads_attempts:  # every attempt frozen until another finishes: none ever would
        return wrong("proof_fault_every")
    folder = Path(folder)
    lines, broken = [], []
    for name in SECTION_TWO:
        t = _run(_with_fault(handlers[name], fault, at), folder / name, None, seconds=QUIET_SECONDS, seed=SEED)
        again = [j.id for j in _jobs_of(folder / name / "queue.db") if j.attempts > 1]
        if not again:
            return wrong("proof_fault_missed", name=name)
        where = ", ".join(map(str, again))
        if t.paid_once:
            lines.append(text("proof_fault_once", lang, name=name, jobs=where, n=len(again), amount=AMOUNT))
            continue
        broken.append(name)
        account, got = next((acc, b) for acc, b in t.balances.items() if b != AMOUNT)
        lines.append(
            text("proof_fault_broken", lang, name=name, jobs=where, n=len(again), account=account, got=got, want=AMOUNT)
        )
    lines.append(
        text("proof_fault_breaks", lang, names=", ".join(broken)) if broken else text("proof_fault_holds", lang)
    )
    return FaultCheck(tuple(lines), "+".join(broken) or "none")
