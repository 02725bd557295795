"""A reader of the Russian lessons sees no English sentence in any output, and the lesson texts match."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from leaselab.lessons import texts

RU = Path(__file__).resolve().parents[1] / "notebooks" / "ru"

# A word of prose: letters only, not all capitals (SQL keywords are), at least two letters.
# Identifiers (snake_case, dotted, with digits) and quoted strings are code, not prose.
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"|«[^»\n]*»")
_TOKEN = re.compile(r"\S+")
_WORD = re.compile(r"[A-Za-z][a-z]+[,;:.!?]?")


def english_runs(output: str, length: int = 3) -> list[str]:
    """Runs of ``length`` or more English prose words in a row: the sign of an untranslated sentence."""
    runs = []
    for line in _QUOTED.sub(" ", output).splitlines():
        run: list[str] = []
        for token in _TOKEN.findall(line) + [""]:
            if token and _WORD.fullmatch(token):
                run.append(token)
                if token[-1] in ",;:.!?":  # punctuation ends the run after this word
                    if len(run) >= length:
                        runs.append(" ".join(run))
                    run = []
                continue
            if len(run) >= length:
                runs.append(" ".join(run))
            run = []
    return runs


def test_the_detector_finds_english_prose_and_ignores_code_sql_and_russian():
    assert english_runs("the zombie got LeaseLost; the job is done") == ["the zombie got", "the job is done"]
    assert english_runs("w1: убит | его задача: running | числится за w1") == []
    assert english_runs(" WHERE status = 'running' AND token = :token\nRETURNING lease_until") == []
    assert english_runs("последняя ошибка: lease expired") == []
    assert english_runs("ошибка «database is locked» 3 раза") == []
    assert english_runs("Not yet: write it now") == ["write it now"]
    assert english_runs("misses_tolerated(30, 10) = 1, the queue says 1") == ["the queue says"]


def _outputs(nb) -> list[str]:
    seen = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.outputs:
            data = out.get("data", {})
            if "image/png" in data or "application/vnd.jupyter.widget-view+json" in data:
                continue  # a picture's words come from leaselab.lab.i18n, tested there
            seen.append(out.get("text") or data.get("text/plain", "") or out.get("evalue", ""))
    return seen


@pytest.mark.parametrize("path", sorted(RU.glob("*.ipynb")), ids=lambda p: p.stem)
def test_a_russian_lesson_prints_no_english_sentence(path):
    nb = nbformat.read(path, as_version=4)
    found = [run for out in _outputs(nb) for run in english_runs(out)]
    assert found == []


def test_both_languages_have_the_same_lesson_texts_with_the_same_placeholders():
    en, ru = texts.MESSAGES["en"], texts.MESSAGES["ru"]
    assert sorted(en) == sorted(ru)
    assert {k: texts.placeholders(v) for k, v in en.items()} == {k: texts.placeholders(v) for k, v in ru.items()}


def test_the_russian_lesson_texts_themselves_contain_no_english_sentence():
    assert [v for v in texts.MESSAGES["ru"].values() if english_runs(v)] == []


def test_an_unknown_text_or_language_is_named_in_the_error():
    with pytest.raises(KeyError, match="no lesson text named 'nope'"):
        texts.text("nope", "ru")
    with pytest.raises(ValueError, match="lang must be one of en, ru"):
        texts.speaker("de")


# Words the glossary (notebooks/GLOSSARY.md) retired because they meant two ideas or read wrong.
RETIRED = {
    r"задани[еяюй]": "a job is «задача»",
    r"сбор\w* аренд": "the reaper returns jobs to the queue; it collects no rent",
    r"ручн\w+ час": "a clock we move ourselves, not a wristwatch",
    r"на паузе|приостановлен": "SIGSTOP freezes: «заморожен»",
}


def _russian_words() -> list[str]:
    from leaselab.lab.i18n import STRINGS

    prose = [c.source for p in sorted(RU.glob("*.ipynb")) for c in nbformat.read(p, as_version=4).cells
             if c.cell_type == "markdown"]
    return list(STRINGS["ru"].values()) + list(texts.MESSAGES["ru"].values()) + prose


@pytest.mark.parametrize("pattern", sorted(RETIRED))
def test_the_russian_text_follows_the_glossary(pattern):
    found = [m.group(0) for text in _russian_words() for m in re.finditer(pattern, text, re.IGNORECASE)]
    assert found == [], RETIRED[pattern]


def test_the_glossary_names_each_russian_term_once():
    rows = [line.split("|")[2].strip() for line in (RU.parent / "GLOSSARY.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and not line.startswith("| English")]
    assert len(rows) == len(set(rows)) and len(rows) > 30
