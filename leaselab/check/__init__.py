"""TEMPORARY shim: ``leaselab.check`` as the checker's branch will provide it, wrapping ``tests/history.py``.

Only so that ``leaselab.chaos`` can run before the real ``leaselab.check`` lands; drop this
commit at the merge. The interface is the agreed one::

    report = check(target, *, effects=None, lease=None, idle=True)
    report.clean, report.anomalies (.kind, .job, .witness, .sentence(lang)), report.counts
    report.render(lang="en"), report.to_json()
    record_effect(job, key=None, **detail)   # appends to $LEASELAB_EFFECTS (no-op when unset)
    read_effects(path)

The sentences are the English ones of ``tests/history.py``; the Russian rendering names the
anomaly in Russian and keeps the English detail (the real module translates it all).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

EFFECTS_ENV = "LEASELAB_EFFECTS"

_HISTORY = Path(__file__).resolve().parents[2] / "tests" / "history.py"


def _history():
    spec = importlib.util.spec_from_file_location("leaselab_check_shim_history", _HISTORY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record_effect(job: Any, key: str | None = None, **detail: Any) -> None:
    """Append one line to the file named by ``$LEASELAB_EFFECTS``: this job's outside effect happened."""
    path = os.environ.get(EFFECTS_ENV)
    if not path:
        return
    line = json.dumps({"job": job.id, "attempt": job.attempts, "token": job.token, "worker": job.worker,
                       "key": key, "pid": os.getpid(), **detail})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_effects(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The lines ``record_effect`` wrote, oldest first (an absent file: none)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


_RU = {"lost": "потеряна", "stale_write_accepted": "принята запись устаревшего токена",
       "history_disagrees": "история расходится с таблицей", "fence_reused": "fence выдан дважды",
       "false_loss": "ложная потеря", "overlapping_leases": "аренды перекрываются",
       "effect_repeated": "внешний эффект повторён"}


@dataclass(frozen=True)
class Anomaly:
    kind: str
    job: int | None
    witness: tuple[str, ...]
    text: str

    def sentence(self, lang: str = "en") -> str:
        if lang == "ru":
            return f"задача {self.job}: {_RU.get(self.kind, self.kind)} ({self.text})"
        return self.text


@dataclass
class Report:
    anomalies: list[Anomaly] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not self.anomalies

    def render(self, lang: str = "en") -> str:
        facts = ", ".join(f"{k} {v}" for k, v in self.counts.items())
        if self.clean:
            head = "все обещания выполнены" if lang == "ru" else "every promise held"
            return f"{head}: {facts}"
        head = "нарушений" if lang == "ru" else "anomalies"
        return "\n".join([f"{len(self.anomalies)} {head} ({facts}):"]
                         + [f"  {a.kind}: {a.sentence(lang)}" for a in self.anomalies])

    def to_json(self) -> dict:
        return {"clean": self.clean, "counts": self.counts,
                "anomalies": [{"kind": a.kind, "job": a.job, "witness": list(a.witness), "sentence": a.text}
                              for a in self.anomalies]}


_JOB = re.compile(r"job (\d+)")


def _anomalies(kind: str, sentences: list[str]) -> list[Anomaly]:
    out = []
    for s in sentences:
        m = _JOB.search(s)
        out.append(Anomaly(kind, int(m.group(1)) if m else None, (s,), s))
    return out


def check(target: str | os.PathLike, *, effects: str | os.PathLike | Callable[[], list] | None = None,
          lease: float | None = None, idle: bool = True) -> Report:
    """Every rule of ``tests/history.py`` that needs no handler-run record, and repeated effects."""
    h = _history()
    jobs, events, _ = h.load(str(target))
    lines = (effects() if callable(effects) else read_effects(effects)) if effects is not None else []
    found = []
    if idle:
        found += _anomalies("lost", h.check_final_states(jobs))
    found += _anomalies("stale_write_accepted", h.check_fencing(events))
    found += _anomalies("history_disagrees", h.check_attempts(jobs, events) + h.check_events_agree(jobs, events)
                        + h.check_links(jobs, events))
    found += _anomalies("fence_reused", h.check_fences(events, []))
    found += _anomalies("false_loss", h.check_false_losses(events))
    if lease is not None:
        found += _anomalies("overlapping_leases", h.check_reaps(events, lease))
    applied = Counter((line["job"], line.get("key")) for line in lines)
    for (job, key), n in sorted(applied.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        if n > 1:
            witness = tuple(json.dumps(line) for line in lines if line["job"] == job and line.get("key") == key)
            found.append(Anomaly("effect_repeated", job, witness,
                                 f"job {job}: its outside effect (key {key!r}) was applied {n} times"))
    facts = h.summary(jobs, events, [])
    counts = {"jobs": facts["jobs"], "attempts": facts.get("events_claimed", 0),
              "repeated_runs": sum(1 for j in jobs if j["attempts"] > 1),
              "reaps": facts.get("events_reaped", 0), "refused_zombies": facts.get("events_lease_lost", 0),
              "effects": len(lines)}
    return Report(found, counts)
