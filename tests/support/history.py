"""The chaos suite's use of ``leaselab.check``: the product's rules, plus the demo handler's own contract.

``leaselab.check`` holds every rule about the queue's promises. What stays here is what
only ``leaselab.harness.demo:task`` promises: it records its run (unkeyed: it is not
idempotent on purpose) at the start of every run, fails only when its payload asks, and
returns its attempt in the result. The ``check_*`` names are the ones the suites call;
each returns sentences (an empty list is a clean history).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from leaselab.check import History, check_history, rules
from leaselab.check import load as load_history
from leaselab.check.effects import effects_from

# At the end of time every job that is not done or dead is stuck: the old "every job ended
# done or dead" rule, whatever the jobs' run times.
END_OF_TIME = math.inf


def load(db_path: str, effects_path: str | None = None) -> tuple[list[dict], list[dict], list[dict]]:
    """The jobs, the events (in id order) and the effect lines, read by ``leaselab.check``."""
    h = load_history(str(db_path), effects=effects_path)
    return h.jobs, h.events, h.effects


def _said(anomalies) -> list[str]:
    return [f"{a.kind}: {a.sentence('en')}" for a in anomalies]


def _history(jobs=(), events=(), effects=()) -> History:
    return History(jobs=list(jobs), events=list(events), effects=effects_from(list(effects)), now=END_OF_TIME)


def check_final_states(jobs: list[dict]) -> list[str]:
    """Every job ended ``done`` or ``dead``."""
    return _said(rules.unfinished(_history(jobs), idle=True))


def check_fencing(events: list[dict]) -> list[str]:
    return _said(rules.fencing(_history(events=events)))


def check_attempts(jobs: list[dict], events: list[dict]) -> list[str]:
    return _said(rules.attempts(_history(jobs, events)))


def check_events_agree(jobs: list[dict], events: list[dict]) -> list[str]:
    return _said(rules.lost_jobs(_history(jobs, events)) + rules.events_agree(_history(jobs, events)))


def check_links(jobs: list[dict], events: list[dict]) -> list[str]:
    return _said(rules.links(_history(jobs, events)))


def _fails_on_purpose(payload: Any, attempt: int) -> bool:
    """Mirror of ``leaselab.harness.demo`` rules: does the payload ask this attempt to fail?"""
    rule = payload.get("fail", False) if isinstance(payload, dict) else False
    if isinstance(rule, bool):
        return rule
    if isinstance(rule, int):
        return attempt <= rule
    return False


def check_demo(jobs: list[dict], events: list[dict]) -> list[str]:
    """The demo handler's contract: no attempt failed that its payload did not ask to, and a done
    job's result came from the attempt that held the lease."""
    bad = []
    grouped = rules.by_job(events)
    for j in jobs:
        for e in grouped.get(j["id"], []):
            if e["kind"] == "failed" and not _fails_on_purpose(j["payload"], e["attempt"]):
                bad.append(
                    f"job {j['id']}: attempt {e['attempt']} failed ({e['detail']!r}) "
                    "although its payload did not ask it to"
                )
        result = j["result"]
        if j["status"] == "done" and isinstance(result, dict) and result.get("attempt", j["attempts"]) != j["attempts"]:
            bad.append(
                f"job {j['id']}: stored result came from attempt {result['attempt']}, "
                f"but attempt {j['attempts']} held the lease"
            )
    return bad


def check_all(
    jobs: list[dict],
    events: list[dict],
    effects: list[dict],
    *,
    lease: float | None = None,
    vanished: Iterable[str] = (),
    ordered: bool = True,
) -> list[str]:
    """Every rule of ``leaselab.check`` and the demo's own; an empty list is a history with every promise kept.

    ``ordered``: the events' ids are their commit order (a SQLite file), so the specification may judge
    them; not on a server, whose ids are taken before commit and whose claims skip locked rows.

    The demo records each run unkeyed, so every re-run repeats its "effect": at-least-once as
    promised. Keyed here by the claim, a repeat is what would be wrong: one claim running its
    handler twice. ``lease`` times the reaps; ``vanished`` names the workers that were killed.
    """
    runs = [dict(line, key=f"attempt {line.get('attempt')} token {line.get('token')}") for line in effects]
    history = dataclasses.replace(_history(jobs, events, runs), ordered=ordered)
    report = check_history(history, lease=lease, idle=True, runs_recorded=True, vanished=vanished)
    return _said(report.anomalies) + check_demo(jobs, events)


def summary(jobs: list[dict], events: list[dict], effects: list[dict]) -> dict[str, int]:
    """Counts worth printing after a chaos run: how hard the faults actually hit."""
    counts = rules.counts(_history(jobs, events, effects), idle=False)
    kinds: dict[str, int] = {}
    for e in events:
        kinds[f"events_{e['kind']}"] = kinds.get(f"events_{e['kind']}", 0) + 1
    return {
        **counts,
        **{f"status_{s}": counts[s] for s in ("pending", "running", "done", "dead") if counts[s]},
        **dict(sorted(kinds.items())),
        "handler_runs": len(effects),
        "handler_reruns": len(effects) - len({line["job"] for line in effects}),
    }
