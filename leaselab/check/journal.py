"""The clients' witness: the workers' journals (``leaselab.worker.journal``) against the server's history.

A server that failed over to a standby which lacked its last commits tells a consistent story
of its own: the claims and completions it forgot are simply not in it. Only the workers, who
were told, can say otherwise. Two promises are judged here, each anomaly with both witnesses
(the journal's line, then the server's rows):

- ``fence_handed_twice``: the journals show one attempt of a job (its fence) handed to two
  tokens or more, whatever the server remembers of it;
- ``acknowledged_lost``: a worker was told its completion was written, and the server has no such
  completion (the job not done, gone, or done by another token). A failure is not judged: the queue
  never promises one durable (it is committed without waiting for the disk or a standby, at every
  ``durability``; docs/durability.md), and one lost only leaves its attempt to be reaped and run
  again, as at-least-once allows;
- ``split_brain``: two holders of one fence were each told their outcome was written, and each
  was told it while the other held the fence (from its claim to its outcome, by the journals'
  clocks): two servers took the queue's writes at once. A failover cannot do that, whatever it
  loses: the old primary acknowledged its last outcome before it stopped, the new one its first
  claim after its promotion. Judged by the ``at`` of each line, written just after the worker was
  told, so the journals' clocks must agree (one machine, or synchronised clocks); a worker frozen
  between a reply and its line makes its span look longer than it was.

``read_journal`` takes a folder of ``*.jsonl`` files or a list of entry dicts (a test's). The
history is read whole (``history.load``): the journals of a run are judged in the memory of
that run.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from .history import History, event_line, job_line
from .report import Anomaly

JournalSource = str | os.PathLike | list[dict] | None
# The outcomes whose acknowledgement is a promise, with the events that keep it (a failure is none:
# see the module's docstring).
_OUTCOME_EVENTS = {"completed": ("completed",)}


def read_journal(source: JournalSource) -> list[dict]:
    """Every entry of the journals in folder ``source`` (or the dicts given), each with its ``witness`` line.

    A last line a killed worker left half written is skipped: what it began to say was never
    flushed whole, so the worker cannot have been told it yet."""
    if source is None:
        return []
    if isinstance(source, list):
        return [_entry(dict(e), f"journal[{i}]") for i, e in enumerate(source)]
    folder = Path(source)
    if not folder.is_dir():
        raise ValueError(f"journal must be a folder of worker journals, got {str(source)!r}")
    entries = []
    for path in sorted(folder.glob("*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.endswith("\n"):
                    break
                entries.append(_entry(json.loads(line), f"journal {path.name}:{number}"))
    return entries


def _entry(e: dict, where: str) -> dict:
    for key in ("kind", "job", "attempt", "token"):
        if key not in e:
            raise ValueError(f"{where}: a journal entry needs {key!r}, got {e!r:.120}")
    e["witness"] = (
        f"{where} job={e['job']} {e['kind']} attempt={e['attempt']} worker={e.get('worker') or '-'} "
        f"token={str(e['token'])[:8]}"
    )
    return e


def journal_anomalies(history: History, entries: list[dict]) -> list[Anomaly]:
    """The fences the journals show handed out twice and the acknowledged outcomes the server lacks, by job."""
    jobs = {j["id"]: j for j in history.jobs}
    events: dict[int, list[dict]] = defaultdict(list)
    for e in history.events:
        events[e["job_id"]].append(e)
    found = (
        _fences(entries, jobs, events)
        + _split_brain(entries)
        + [
            a
            for e in entries
            if e["kind"] in _OUTCOME_EVENTS
            if (a := _outcome(e, jobs.get(e["job"]), events[e["job"]]))
        ]
    )
    order = ("fence_handed_twice", "split_brain", "acknowledged_lost")
    return sorted(found, key=lambda a: (order.index(a.kind), a.job or 0))


def _fences(entries: list[dict], jobs: dict[int, dict], events: dict[int, list[dict]]) -> list[Anomaly]:
    claims: dict[tuple[int, int], dict[str, dict]] = defaultdict(dict)
    for e in entries:
        if e["kind"] == "claimed":
            claims[(e["job"], e["attempt"])].setdefault(e["token"], e)
    found = []
    for (job, attempt), held in sorted(claims.items()):
        if len(held) < 2:
            continue
        on_server = [e for e in events[job] if e["kind"] == "claimed" and e["attempt"] == attempt]
        known = set(held) & {e["token"] for e in on_server}
        server = "none" if not known else "both" if len(known) == len(held) else "one"
        witness = [e["witness"] for e in held.values()] + [event_line(e) for e in on_server]
        if job in jobs:
            witness.append(job_line(jobs[job]))
        facts = {"attempt": attempt, "n": len(held), "tokens": sorted(t[:8] for t in held), "server": server}
        found.append(Anomaly("fence_handed_twice", job, witness, "journal.fence_twice", facts))
    return found


def _split_brain(entries: list[dict]) -> list[Anomaly]:
    """The fences two holders were both told outcomes for, each while the other held the fence."""
    spans: dict[tuple[int, int], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for e in entries:
        if e["kind"] == "claimed" or e["kind"] in _OUTCOME_EVENTS:
            spans[(e["job"], e["attempt"])][e["token"]].append(e)
    found = []
    for (job, attempt), by_token in sorted(spans.items()):
        told: list[tuple[dict, dict]] = []
        for lines in by_token.values():
            claim, outcome = _first(lines, "claimed"), _outcome_line(lines)
            if claim is not None and outcome is not None and "at" in claim and "at" in outcome:
                told.append((claim, outcome))
        pair = next(
            (
                (a, b)
                for i, a in enumerate(told)
                for b in told[i + 1 :]
                if a[0]["at"] < b[1]["at"] and b[0]["at"] < a[1]["at"]
            ),
            None,
        )
        if pair is None:
            continue
        (claim_a, told_a), (claim_b, told_b) = pair
        witness = [claim_a["witness"], claim_b["witness"], told_a["witness"], told_b["witness"]]
        facts = {
            "attempt": attempt,
            "tokens": sorted(str(c["token"])[:8] for c in (claim_a, claim_b)),
            "overlap": round(min(told_a["at"], told_b["at"]) - max(claim_a["at"], claim_b["at"]), 3),
        }
        found.append(Anomaly("split_brain", job, witness, "journal.split_brain", facts))
    return found


def _first(lines: list[dict], kind: str) -> dict | None:
    return next((e for e in lines if e["kind"] == kind), None)


def _outcome_line(lines: list[dict]) -> dict | None:
    return next((e for e in lines if e["kind"] in _OUTCOME_EVENTS), None)


def _outcome(e: dict, row: dict | None, events: list[dict]) -> Anomaly | None:
    kinds = _OUTCOME_EVENTS[e["kind"]]
    if any(x["kind"] in kinds and x["token"] == e["token"] for x in events):
        return None
    facts: dict[str, Any] = {"attempt": e["attempt"], "token": str(e["token"])[:8], "worker": e.get("worker") or "-"}
    witness = [e["witness"]] + ([job_line(row)] if row is not None else [f"jobs#{e['job']} (no such row)"])
    done = [x for x in events if x["kind"] == "completed"]
    witness += [event_line(x) for x in done]
    if done:
        holder = str(done[0]["token"])[:8]
        return Anomaly("acknowledged_lost", e["job"], witness, "journal.completion_other", {**facts, "holder": holder})
    status = row["status"] if row is not None else "gone"
    return Anomaly("acknowledged_lost", e["job"], witness, "journal.completion_lost", {**facts, "status": status})


def with_journal(found: list[Anomaly], totals: dict[str, int], journal: list[Anomaly], keep: int | None) -> None:
    """Add ``journal``'s anomalies to a report's ``found`` (the first ``keep`` of each kind) and ``totals``."""
    held: dict[str, int] = defaultdict(int)
    for anomaly in journal:
        totals[anomaly.kind] = totals.get(anomaly.kind, 0) + 1
        if keep is None or held[anomaly.kind] < keep:
            held[anomaly.kind] += 1
            found.append(anomaly)
