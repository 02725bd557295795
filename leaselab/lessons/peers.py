"""Lesson 8's audit of other queues: ``bench/audit.py --quick`` run live, its rows read in the lesson's language.

The audit is one of the repository's benchmark scripts, not part of the package: it drives
queues (huey, persist-queue) a leaselab user need not have installed, so it runs as a
process of its own (``--json``) and this module only reads what it printed::

    rows = peers.run()                 # about a minute: leaselab, huey and persist-queue
    print(peers.table(rows, lang))     # every count, and how long a job took to come back
    print(peers.facts(rows, lang))     # the verdicts alone: the same on every run

``facts`` prints only what the faults decide, never a time: each fault is put into the
handler (``bench/audit_ledger.py``), so a slow machine changes how long a verdict takes, not
the verdict. Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .texts import text

AUDIT = Path("bench") / "audit.py"  # in leaselab's repository, beside notebooks/ and my-lessons/
TIMEOUT = 110.0  # seconds: under the lessons' cell timeout, twice what the quick audit takes here
COUNTS = ("runs", "overlapping", "stale_accepted", "completed_twice", "rerun_after_done", "lost", "stuck")


def find_script(folder: str | os.PathLike | None = None) -> Path:
    """``bench/audit.py`` of the repository the lesson runs in.

    The audit ships with leaselab's repository, not with its package: on Binder leaselab is
    installed into site-packages, while the lesson runs in ``<repository>/my-lessons/<lang>/``
    (or ``notebooks/<lang>/``). So it is looked for two folders above the lesson's, then beside
    an editable install's package."""
    here = Path(folder if folder is not None else os.getcwd()).resolve()
    for repository in (here.parent.parent, Path(__file__).resolve().parents[2]):
        if (repository / AUDIT).is_file():
            return repository / AUDIT
    raise FileNotFoundError(
        f"no {AUDIT} two folders above {here} nor beside leaselab's package: "
        "run the lessons from a clone of leaselab's repository"
    )


def run(script: str | os.PathLike | None = None, timeout: float = TIMEOUT) -> list[dict]:
    """Run the quick audit and return its rows: dicts with ``queue``, ``scenario``, ``verdict`` (counts or None)."""
    script = find_script() if script is None else Path(script)
    if not script.is_file():
        raise FileNotFoundError(f"{script} is not here: run the lessons from a clone of leaselab's repository")
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--json"], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} --quick failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def verdict(row: dict) -> str:
    """What the checker decided for one row, as a text key: the fault's outcome, not its timing."""
    v, scenario = row["verdict"], row["scenario"]
    if v is None:
        # The audit counts the worker's TCP connections; only a count of 0 means there is no network.
        return "l7_audit_no_network" if scenario == "partition" and "held 0 TCP" in row["note"] else "l7_audit_not_run"
    if scenario == "flood":
        return "l7_audit_flood"
    if v["stale_accepted"]:
        return "l7_audit_stale"
    if v["lost"]:
        return "l7_audit_lost_job"
    if v["stuck"]:
        return "l7_audit_stuck_job"
    if scenario == "crash":
        return "l7_audit_back"
    return "l7_audit_kept" if v["runs"] == 1 else "l7_audit_refused"


def table(rows: list[dict], lang: str) -> str:
    """Every row's counts in columns, with how long the job took to come back (this part varies by run)."""
    head = (
        [text("l7_audit_queue", lang), text("l7_audit_scenario", lang)]
        + [text(f"l7_audit_{c}", lang) for c in COUNTS]
        + [text("l7_audit_back_after", lang)]
    )
    body = []
    for row in rows:
        v = row["verdict"]
        cells = [row["queue"], text(f"l7_scenario_{row['scenario']}", lang)]
        if v is None:
            cells += ["-"] * (len(COUNTS) + 1)
        else:
            cells += [str(v[c]) for c in COUNTS]
            cells.append("-" if v["back_after"] is None else text("l7_audit_seconds", lang, s=v["back_after"]))
        body.append(cells)
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head] + body]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def facts(rows: list[dict], lang: str) -> str:
    """The verdicts that the faults decide, one line a row, and leaselab's stale completions over every scenario."""
    ours = [r for r in rows if r["queue"].startswith("leaselab") and r["verdict"] is not None]
    lines = [
        text("l7_audit_leaselab_stale", lang, n=sum(r["verdict"]["stale_accepted"] for r in ours), scenarios=len(ours))
    ]
    for row in rows:
        v = row["verdict"] or {}
        lines.append(
            text(
                "l7_audit_fact",
                lang,
                queue=row["queue"],
                scenario=text(f"l7_scenario_{row['scenario']}", lang),
                verdict=text(verdict(row), lang, lost=v.get("lost", 0), stuck=v.get("stuck", 0), jobs=v.get("jobs", 0)),
            )
        )
    return "\n".join(lines)
