"""``leaselab simulate``: the command line's side of the simulator (its arguments come parsed from ``leaselab.cli``).

It always tests the installed leaselab's own statements and worker decisions (``--mutant NAME`` plants one
shipped bug on purpose, to show a catch). Exit 0 when every promise held, with what was covered; 1 with the
shrunk witness (numbered steps, a timeline, the file it was saved to) when one broke, or when a replayed
witness still fails; 2 on a usage error, said in the reader's language. Progress goes to stderr about once a
second once a run has gone on for a couple of seconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..queue import DURABILITIES
from . import explore, mutants, report
from .errors import BadOption, SimulateUsageError
from .explore import Run
from .handlers import load, recorded
from .texts import text
from .world import DEFAULT_FAULTS, FAULTS, HANG_TIMEOUT, NEEDS_TIMEOUT, ON_DISK, Scenario

EXIT_CLEAN, EXIT_FOUND, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_SECONDS = 10.0  # a random search's length when neither --seconds nor --schedules is given
DEFAULT_STATES = 500  # --exhaustive's limit on distinct states when --schedules is not given
SHRINK_BUDGET = 20.0  # seconds spent shrinking a witness at most
DEFAULT_SAVE = "leaselab-witness.json"
PROGRESS_AFTER, PROGRESS_EVERY = 2.0, 1.0  # seconds: a short run prints no progress at all
REPLAY_EXCLUDES = (
    "seed",
    "seconds",
    "schedules",
    "exhaustive",
    "workers",
    "jobs",
    "faults",
    "durability",
    "mutant",
    "handler",
)


@dataclass
class Covered:
    """What a search covered: schedules run, steps taken, virtual seconds simulated, and the failing run if any."""

    found: Run | None = None
    schedules: int = 0
    steps: int = 0
    virtual: float = 0.0


class Progress:
    """Prints a progress line on stderr about once a second, from ``PROGRESS_AFTER`` seconds into a run on."""

    def __init__(self, lang: str):
        self.lang, self.start, self.last = lang, time.monotonic(), -math.inf

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def __call__(self, schedules: int, steps: int) -> None:
        now = self.elapsed()
        if now >= PROGRESS_AFTER and now - self.last >= PROGRESS_EVERY:
            self.last = now
            line = text("progress", self.lang, elapsed=now, schedules=schedules, steps=steps)
            print(line, file=sys.stderr, flush=True)


def _whole(option: str, value: str | None, least: int, default: int) -> int:
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        raise BadOption("bad_whole", option=option, least=least, value=value) from None
    if n < least:
        raise BadOption("bad_whole", option=option, least=least, value=value)
    return n


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise BadOption("bad_seconds", option="--seconds", value=value)
    return seconds


def _faults(value: str | None) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_FAULTS
    named = tuple(f.strip() for f in value.split(",") if f.strip())
    for fault in named:
        if fault not in FAULTS:
            raise BadOption("unknown_fault", fault=fault, known=", ".join(FAULTS))
    if any(f in ON_DISK for f in named) and importlib.util.find_spec("apsw") is None:
        raise BadOption("needs_apsw")
    return named


def _durability(value: str | None, faults: tuple[str, ...]) -> str:
    if value is None:
        return Scenario.durability
    if value not in DURABILITIES:
        raise BadOption("bad_durability", known=", ".join(DURABILITIES), value=value)
    if not any(f in ON_DISK for f in faults):  # in memory, nothing is ever synced or lost
        raise BadOption("durability_needs_power")
    return value


@contextmanager
def _planted(mutant: str | None, handler: str | None) -> Iterator[Any]:
    """The mutant planted (if any) and the handler loaded and recorded (if any) for the block."""
    with ExitStack() as stack:
        if mutant is not None:
            stack.enter_context(mutants.planted(mutant))
        yield None if handler is None else stack.enter_context(recorded(handler))


def _check_mutant(name: str | None) -> None:
    if name is not None and name not in mutants.NAMES:
        raise BadOption("unknown_mutant", name=name, known=", ".join(mutants.NAMES))


def main(args: argparse.Namespace) -> int:
    lang = args.lang
    try:
        return _main(args, lang)
    except SimulateUsageError as exc:
        print(f"leaselab simulate: {text('error', lang)}: {exc.render(lang)}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _main(args: argparse.Namespace, lang: str) -> int:
    if args.list_mutants or args.mutant == "list":
        print(text("mutants", lang))
        width = max(len(m.name) for m in mutants.MUTANTS)
        for m in mutants.MUTANTS:
            print(f"  {m.name:<{width}}  {m.breaks}" if lang == "en" else f"  {m.name}")
        return EXIT_CLEAN
    if args.replay is not None:
        for name in REPLAY_EXCLUDES:
            if getattr(args, name) not in (None, False):
                raise BadOption("together", first="--replay", second=f"--{name}")
        return _replay(args, lang)
    if args.seconds is not None and args.schedules is not None and not args.exhaustive:
        raise BadOption("together", first="--seconds", second="--schedules")
    if args.exhaustive and args.seconds is not None:
        raise BadOption("together", first="--exhaustive", second="--seconds")
    seed = _whole("--seed", args.seed, -(2**62), 0)
    seconds = _seconds(args.seconds)
    schedules = None if args.schedules is None else _whole("--schedules", args.schedules, 1, 0)
    workers = _whole("--workers", args.workers, 1, Scenario.workers)
    jobs = _whole("--jobs", args.jobs, 1, Scenario.jobs)
    faults = _faults(args.faults)
    durability = _durability(args.durability, faults)
    _check_mutant(args.mutant)
    if args.handler is not None:
        load(args.handler)  # a bad --handler is said before anything is printed
    scenario = Scenario(
        workers=workers,
        jobs=jobs,
        faults=faults,
        max_faults=Scenario.max_faults if faults else 0,
        # A hung handler holds its job for ever unless the job has a timeout: that is what one is for.
        timeout=HANG_TIMEOUT if any(f in NEEDS_TIMEOUT for f in faults) else None,
        durability=durability,
    )
    chosen = args.workers is not None or args.jobs is not None or args.faults is not None
    portfolio = _portfolio(scenario) if chosen or args.exhaustive else explore.PORTFOLIO
    if args.exhaustive:
        portfolio = (scenario,)
    if not args.json:
        _preamble(portfolio, seed, args, lang)
    progress = Progress(lang)
    result: dict[str, Any] = {"mode": "exhaustive" if args.exhaustive else "random"}
    with _planted(args.mutant, args.handler) as handler:
        if args.exhaustive:
            limit = DEFAULT_STATES if schedules is None else schedules
            found, states, tried = explore.exhaustive(scenario, handler=handler, limit=limit)
            covered = Covered(found, tried)
            result.update(states=states, complete=states < limit, limit=limit)
        else:
            budget = DEFAULT_SECONDS if seconds is None and schedules is None else seconds
            hunted = explore.hunt(
                seed=seed,
                seconds=budget,
                schedules=schedules,
                handler=handler,
                progress=progress,
                portfolio=portfolio,
                shrink_seconds=SHRINK_BUDGET,
            )
            covered = Covered(hunted.found, hunted.schedules, hunted.steps, hunted.virtual)
        elapsed = progress.elapsed()
        shrunk = None
        if covered.found is not None:
            shrunk = (
                hunted.run
                if not args.exhaustive
                else explore.shrink(covered.found, handler=handler, budget=SHRINK_BUDGET)
            )
    result.update(
        scenario=_scenario_json(scenario),
        scenarios=[_scenario_json(one) for one in portfolio],
        seed=seed,
        mutant=args.mutant,
        handler=args.handler,
        schedules=covered.schedules,
        steps=covered.steps,
        virtual_seconds=round(covered.virtual, 3),
        elapsed_seconds=round(elapsed, 3),
        found=shrunk is not None,
    )
    if shrunk is None:
        result["violation"] = None
        if args.json:
            print(json.dumps(result, ensure_ascii=False))
        elif args.exhaustive:
            print(text("clean_exhaustive", lang, states=result["states"], schedules=covered.schedules, elapsed=elapsed))
            print(
                text("exhaustive_cut", lang, limit=result["limit"])
                if not result["complete"]
                else text("exhaustive_whole", lang)
            )
        else:
            print(
                text(
                    "clean",
                    lang,
                    schedules=covered.schedules,
                    steps=covered.steps,
                    virtual=covered.virtual,
                    elapsed=elapsed,
                )
            )
        return EXIT_CLEAN
    assert covered.found is not None and shrunk.violation is not None
    path = DEFAULT_SAVE if args.save is None else args.save
    report.save(report.witness(shrunk, args.mutant, args.handler), path)
    kind = shrunk.violation.kind
    if args.json:
        result.update(_failure_json(shrunk, len(covered.found.actions)), saved=path)
        print(json.dumps(result, ensure_ascii=False))
        return EXIT_FOUND
    heading = report.title(kind, lang)
    if args.exhaustive:
        print(text("found_exhaustive", lang, title=heading, states=result["states"], elapsed=elapsed))
    else:
        print(text("found", lang, title=heading, schedules=covered.schedules, elapsed=elapsed))
    faults_taken = sum(1 for a in shrunk.actions if a[0] in FAULTS)
    print(text("shrunk", lang, actions=len(shrunk.actions), faults=faults_taken, before=len(covered.found.actions)))
    _show(shrunk, lang)
    print(text("saved", lang, path=path))
    return EXIT_FOUND


def _portfolio(scenario: Scenario) -> tuple[Scenario, ...]:
    """The scenarios a search of the reader's own takes turns with: theirs, with two slots a worker, and with
    clocks that run a little apart (as ``explore.PORTFOLIO`` varies its own)."""
    return (scenario, replace(scenario, slots=2), replace(scenario, skew=0.03))


def _preamble(portfolio: tuple[Scenario, ...], seed: int, args: argparse.Namespace, lang: str) -> None:
    if len(portfolio) > 1:
        print(text("portfolio", lang, n=len(portfolio), seed=seed))
    for scenario in portfolio:
        faults = ", ".join(scenario.faults) or text("no_faults", lang)
        print(
            text(
                "scenario" if len(portfolio) == 1 else "scenario_each",
                lang,
                workers=scenario.workers,
                jobs=scenario.jobs,
                slots=scenario.slots,
                clocks=text("clocks_apart", lang, skew=scenario.skew * 100)
                if scenario.skew
                else text("clocks_even", lang),
                attempts=scenario.max_attempts,
                lease=scenario.lease,
                faults=faults,
                most=scenario.max_faults,
                seed=seed,
            )
        )
    if args.faults is not None and any(f in ON_DISK for f in portfolio[0].faults):  # the reader's own power cut
        print(text("on_disk", lang, durability=portfolio[0].durability))
    if args.mutant is not None:
        print(text("mutant", lang, name=args.mutant))
    if args.handler is not None:
        print(text("handler", lang, spec=args.handler, work=portfolio[0].work))


def _show(run: Run, lang: str) -> None:
    print(text("steps", lang))
    for line in report.steps(run, lang):
        print(line)
    print(text("timeline", lang))
    for line in report.drawing(run, lang):
        print(line)
    print(text("legend", lang))


def _scenario_json(scenario: Scenario) -> dict[str, Any]:
    fields = asdict(scenario)
    fields["faults"] = list(scenario.faults)
    return fields


def _failure_json(run: Run, before: int) -> dict[str, Any]:
    assert run.violation is not None
    return {
        "violation": {"kind": run.violation.kind, "message": run.violation.message},
        "witness": {
            "seed": run.seed,
            "actions": [list(a) for a in run.actions],
            "faults": sum(1 for a in run.actions if a[0] in FAULTS),
            "shrunk_from": before,
            "trace": list(run.trace),
            "timeline": report.spans(run),
        },
    }


def _replay(args: argparse.Namespace, lang: str) -> int:
    saved = report.load(args.replay)
    _check_mutant(saved.mutant)
    with _planted(saved.mutant, saved.handler) as handler:
        run = explore.run(saved.scenario, saved.seed, actions=list(saved.actions), handler=handler)
    same = run.trace == saved.trace
    if args.json:
        result: dict[str, Any] = {
            "mode": "replay",
            "scenario": _scenario_json(saved.scenario),
            "seed": saved.seed,
            "mutant": saved.mutant,
            "handler": saved.handler,
            "found": run.failed,
            "fixed": not run.failed,
            "same_trace": same,
            "violation": None,
        }
        if run.failed:
            result.update(_failure_json(run, len(saved.actions)))
        print(json.dumps(result, ensure_ascii=False))
        return EXIT_FOUND if run.failed else EXIT_CLEAN
    print(text("replaying", lang, path=args.replay, version=saved.leaselab or "?"))
    if saved.mutant is not None:
        print(text("mutant", lang, name=saved.mutant))
    if run.failed:
        assert run.violation is not None
        print(text("replay_fails", lang, title=report.title(run.violation.kind, lang)))
        _show(run, lang)
    else:
        print(text("replay_fixed", lang))
    print(text("replay_same" if same else "replay_differs", lang))
    return EXIT_FOUND if run.failed else EXIT_CLEAN
