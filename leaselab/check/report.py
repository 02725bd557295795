"""What the checker found: named anomalies with their witnesses, and the counts of a run.

``Report.render(lang)`` is for a person (a first line that says clean or not, how many of
each kind, then the first few anomalies of each kind with the history lines that prove them);
``Report.to_json()`` is for a program.
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
NOTES = ("lease_unknown", "no_effects", "spec_unordered", "spec_too_long")

# Anomalies of one kind a report shows with their witnesses unless asked for all: the rest are counted.
SHOWN = 3


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
    """The anomalies found (none: ``clean``), the run's ``counts``, and ``notes`` on checks not made.

    ``anomalies`` are those the report holds with their witnesses, by kind (in ``KINDS`` order) then
    by job; ``totals`` counts every anomaly found by kind, held or not (a check with ``keep`` holds
    the first few of each kind). Made without ``totals``, a report counts its ``anomalies``.
    """

    anomalies: list[Anomaly]
    counts: dict[str, int]
    notes: list[str] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.totals and self.anomalies:
            totals = {kind: sum(a.kind == kind for a in self.anomalies) for kind in KINDS}
            object.__setattr__(self, "totals", {kind: n for kind, n in totals.items() if n})

    @property
    def clean(self) -> bool:
        """True when no promise was broken."""
        return not self.totals

    @property
    def found(self) -> int:
        """How many anomalies were found, held with their witnesses or only counted."""
        return sum(self.totals.values())

    def tally(self, lang: str = "en") -> str:
        """What a clean headline counts: "40 jobs, 3 repeated runs, 2 zombies refused" (a caller's own verdict may
        end with it, as chaos's does when no fault hit a running attempt)."""
        return fill(REPORT[check_lang(lang)]["tally"], lang, self.counts)

    def headline(self, lang: str = "en") -> str:
        """The first line: "every promise held: 40 jobs, 3 repeated runs, 2 zombies refused", or how many broke;
        either one said with ``unchecked`` when no effect was recorded."""
        words = REPORT[check_lang(lang)]
        if self.clean:
            verdict = fill(words["clean"], lang, {"tally": self.tally(lang)})
        else:
            verdict = fill(words["broken"], lang, {**self.counts, "anomalies": self.found, "anomalies_n": self.found})
        return self.unchecked(verdict, lang)

    def unchecked(self, verdict: str, lang: str = "en") -> str:
        """``verdict``, and, when no effect was recorded, in the same line that repeated effects were not checked
        and how to record them: a footnote under "every promise held" would be read past."""
        if "no_effects" not in self.notes:
            return verdict
        # A clean verdict is the one a reader trusts: it says how to record effects; a broken one is read anyway.
        return REPORT[check_lang(lang)]["unchecked" if self.clean else "unchecked_broken"].format(verdict=verdict)

    def render(self, lang: str = "en", shown: int | None = SHOWN) -> str:
        """The report for a person, in ``lang``: the headline, the counts, how many anomalies of each kind,
        then the first ``shown`` of each kind (None: every one held) with their witnesses."""
        words = REPORT[check_lang(lang)]
        lines = [self.headline(lang), "  " + fill(words["counts"], lang, self.counts)]
        if self.counts.get("repeats_absorbed"):
            lines.append("  " + fill(words["absorbed"], lang, self.counts))
        if self.counts.get("waiting"):
            lines.append("  " + fill(words["waiting"], lang, self.counts))
        if len(self.totals) > 1 or self.found > (shown if shown is not None else self.found):
            kinds = ", ".join(
                fill(words["kind_total"], lang, {"title": TITLES[lang][kind], "n": n})
                for kind, n in self.totals.items()
            )
            lines.append("  " + fill(words["by_kind"], lang, {"kinds": kinds}))
        lines += ["  " + words[note] for note in self.notes if note != "no_effects"]  # that one is in the headline
        for kind, total in self.totals.items():
            held = [a for a in self.anomalies if a.kind == kind]
            for anomaly in held if shown is None else held[:shown]:
                lines += ["", f"{anomaly.title(lang)}: {anomaly.sentence(lang)}"]
                lines += ["    " + line for line in anomaly.witness]
            more = total - (len(held) if shown is None else min(shown, len(held)))
            if more:
                lines.append("  " + fill(words["more"], lang, {"more": more, "title": TITLES[lang][kind]}))
        # Worker names, keys and details are whatever some program wrote: shown escaped, one line each.
        return "\n".join(printable(line) for line in lines)

    def to_json(self) -> dict[str, Any]:
        """The report for a program: plain dicts, lists, strings and numbers, ready for ``json.dumps``.

        ``totals`` counts every anomaly found by kind; ``anomalies`` are those the report holds."""
        return {
            "clean": self.clean,
            "counts": dict(self.counts),
            "notes": list(self.notes),
            "totals": dict(self.totals),
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
