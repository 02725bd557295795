"""What the checker found: named anomalies with their witnesses, and the counts of a run.

``Report.render(lang)`` is for a person (a first line that says clean or not, then each
anomaly with the history lines that prove it); ``Report.to_json()`` is for a program.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..printable import printable
from ..words import LANGS, check_lang
from .texts import REPORT, SENTENCES, TITLES, fill

# The stable machine names of every anomaly, in the order a report lists them.
KINDS = tuple(TITLES["en"])

# Notes a report may carry: a check it could not make, and why.
NOTES = ("lease_unknown", "no_effects", "spec_unordered")


@dataclass(frozen=True)
class Anomaly:
    """One broken promise: its ``kind`` (one of ``KINDS``), the ``job`` it broke, and the ``witness`` lines.

    ``what`` names the sentence that says it (a key of ``texts.SENTENCES``), ``facts`` fill it in.
    """

    kind: str
    job: int | None
    witness: list[str]
    what: str
    facts: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {self.kind!r}")
        if self.what not in SENTENCES["en"]:
            raise ValueError(f"what must name one of the checker's sentences; got {self.what!r}")

    def sentence(self, lang: str = "en") -> str:
        """The anomaly in one plain sentence, in ``lang`` ("en" or "ru")."""
        return fill(SENTENCES[check_lang(lang)][self.what], lang, {"job": self.job, **self.facts})

    def title(self, lang: str = "en") -> str:
        """The kind's name in ``lang``: "stale write accepted", "принята устаревшая запись"."""
        return TITLES[check_lang(lang)][self.kind]


@dataclass(frozen=True)
class Report:
    """The anomalies found (none: ``clean``), the run's ``counts``, and ``notes`` on checks not made."""

    anomalies: list[Anomaly]
    counts: dict[str, int]
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when no promise was broken."""
        return not self.anomalies

    def tally(self, lang: str = "en") -> str:
        """What a clean headline counts: "40 jobs, 3 repeated runs, 2 zombies refused" (a caller's own verdict may
        end with it, as chaos's does when no fault hit a running attempt)."""
        return fill(REPORT[check_lang(lang)]["tally"], lang, self.counts)

    def headline(self, lang: str = "en") -> str:
        """The first line: "every promise held: 40 jobs, 3 repeated runs, 2 zombies refused", or how many broke."""
        words = REPORT[check_lang(lang)]
        if self.clean:
            return fill(words["clean"], lang, {"tally": self.tally(lang)})
        facts = {**self.counts, "anomalies": len(self.anomalies), "anomalies_n": len(self.anomalies)}
        return fill(words["broken"], lang, facts)

    def render(self, lang: str = "en") -> str:
        """The report for a person, in ``lang``: the headline, the counts, then each anomaly and its witness."""
        words = REPORT[check_lang(lang)]
        lines = [self.headline(lang), "  " + fill(words["counts"], lang, self.counts)]
        if self.counts.get("repeats_absorbed"):
            lines.append("  " + fill(words["absorbed"], lang, self.counts))
        if self.counts.get("waiting"):
            lines.append("  " + fill(words["waiting"], lang, self.counts))
        lines += ["  " + words[note] for note in self.notes]
        for anomaly in self.anomalies:
            lines += ["", f"{anomaly.title(lang)}: {anomaly.sentence(lang)}"]
            lines += ["    " + line for line in anomaly.witness]
        # Worker names, keys and details are whatever some program wrote: shown escaped, one line each.
        return "\n".join(printable(line) for line in lines)

    def to_json(self) -> dict[str, Any]:
        """The report for a program: plain dicts, lists, strings and numbers, ready for ``json.dumps``."""
        return {
            "clean": self.clean,
            "counts": dict(self.counts),
            "notes": list(self.notes),
            "anomalies": [
                {
                    "kind": a.kind,
                    "job": a.job,
                    "what": a.what,
                    "facts": dict(a.facts),
                    "witness": list(a.witness),
                    "sentence": {lang: a.sentence(lang) for lang in LANGS},
                }
                for a in self.anomalies
            ],
        }
