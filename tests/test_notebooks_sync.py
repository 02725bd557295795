"""The lessons stay in step: one source per lesson, the same code in both languages, committed notebooks current and
run."""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

from leaselab.lessons.texts import text as lessons_text

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

_spec = importlib.util.spec_from_file_location("lesson_build", NOTEBOOKS / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

SOURCES = build.sources()
STEMS = [s.stem for s in SOURCES]


def _read(lang: str, stem: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / lang / f"{stem}.ipynb", as_version=4)


def test_there_are_lessons_zero_to_nine_with_sortable_names():
    assert [s[:2] for s in STEMS] == [f"{n:02d}" for n in range(10)]


@pytest.mark.parametrize("lang", build.LANGUAGES)
def test_every_notebook_in_a_language_has_a_source_and_every_source_a_notebook(lang):
    committed = sorted(p.stem for p in (NOTEBOOKS / lang).glob("*.ipynb"))
    assert committed == STEMS


@pytest.mark.parametrize("stem", STEMS)
def test_both_languages_of_a_lesson_share_every_code_cell(stem):
    assert build.drift(_read("en", stem), _read("ru", stem)) == []


@pytest.mark.parametrize("stem", STEMS)
@pytest.mark.parametrize("lang", build.LANGUAGES)
def test_the_committed_notebook_is_what_its_source_builds(stem, lang):
    assert build.stale(build.SRC / f"{stem}.py", lang, _read(lang, stem)) == []


@pytest.mark.parametrize("stem", STEMS)
@pytest.mark.parametrize("lang", build.LANGUAGES)
def test_the_committed_notebook_was_run_to_the_end_without_errors(stem, lang):
    code = [c for c in _read(lang, stem).cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "some cells were never run"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert errors == []
    last = code[-1].source
    if "lessons.cleanup_at_exit(work" in last:
        # The playground outlives Run All; its folder goes when the kernel does (test_lesson_helpers).
        assert code[-1].outputs and ": []" in code[-1].outputs[-1].get("text", "")
    else:
        assert "lessons.cleanup(work)" in last, "the last cell must remove the lesson's temporary folder"
        said = code[-1].outputs[-1].get("text", "") if code[-1].outputs else ""
        removed = lessons_text("folder_removed", lang, removed=True)  # "yes" in the reader's words
        assert removed in said, said


def _checked(lang: str, stem: str) -> list[str]:
    return [
        "".join(o.get("text") or o.get("data", {}).get("text/plain", "") for o in c.outputs)
        for c in _read(lang, stem).cells
        if c.cell_type == "code" and "nbval-check-output" in c.metadata.get("tags", [])
    ]


# The facts a checked line states: numbers, booleans, None, and the words the database itself stores.
FACT = re.compile(r"-?\d+(?:\.\d+)?|\b(?:True|False|None|pending|running|done|dead)\b")


@pytest.mark.parametrize("stem", STEMS)
def test_the_facts_a_lesson_checks_are_printed_and_the_same_in_both_languages(stem):
    en, ru = _checked("en", stem), _checked("ru", stem)
    assert len(en) >= 3 and all(out.strip() for out in en + ru)
    # Word order differs between the languages; the facts themselves may not.
    # Russian writes 0,11 and 10 000 (words.render): the same fact as 0.11 and 10000.
    ru = [re.sub(r"(?<=\d)\u00a0(?=\d{3})", "", re.sub(r"(?<=\d),(?=\d)", ".", out)) for out in ru]
    en = [re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", out) for out in en]  # and English 10,000 is 10000
    assert [sorted(FACT.findall(out)) for out in en] == [sorted(FACT.findall(out)) for out in ru]


def test_drift_is_caught_when_a_code_cell_or_the_cell_count_differs():
    en = _read("en", STEMS[1])
    ru = copy.deepcopy(_read("ru", STEMS[1]))
    first_code = next(c for c in ru.cells if c.cell_type == "code")
    first_code.source += "\nprint('only in Russian')"
    assert build.drift(en, ru)
    ru = copy.deepcopy(_read("ru", STEMS[1]))
    ru.cells.pop()
    assert any("cells in en" in p for p in build.drift(en, ru))


def test_a_notebook_edited_by_hand_is_reported_as_out_of_date():
    nb = copy.deepcopy(_read("en", STEMS[1]))
    nb.cells[0].source += "\nA sentence added in JupyterLab and not in the source."
    assert build.stale(SOURCES[1], "en", nb)


def test_a_code_cell_tagged_with_a_language_is_refused(tmp_path):
    src = tmp_path / "09-bad.py"
    src.write_text('# %% tags=["ru"]\nprint("code for one language only")\n', encoding="utf-8")
    with pytest.raises(build.SourceError, match="only prose"):
        build.split(src)


def test_a_prose_cell_without_a_language_is_refused(tmp_path):
    src = tmp_path / "09-bad.py"
    src.write_text("# %% [markdown]\n# Which language am I?\n", encoding="utf-8")
    with pytest.raises(build.SourceError, match="no language tag"):
        build.split(src)


def test_a_bilingual_comment_reads_in_each_notebook_s_language_and_the_code_stays_shared(tmp_path):
    src = tmp_path / "09-comments.py"
    src.write_text(
        '# %% [markdown] tags=["en"]\n# Hello\n\n# %% [markdown] tags=["ru"]\n# Привет\n\n'
        '# %%\nx = "a / b"  # attempt 1 waits there / попытка 1 ждёт там\ny = 2  # just a / slash\n',
        encoding="utf-8",
    )
    books = build.split(src)
    en, ru = (next(c for c in books[lang].cells if c.cell_type == "code").source for lang in ("en", "ru"))
    assert en == 'x = "a / b"  # attempt 1 waits there\ny = 2  # just a / slash'
    assert ru == 'x = "a / b"  # попытка 1 ждёт там\ny = 2  # just a / slash'
    assert build.drift(books["en"], books["ru"]) == []


def test_no_code_comment_in_a_russian_lesson_is_english_alone():
    english = re.compile(r"[A-Za-z]{3,}")
    found = []
    for stem in STEMS:
        for cell in _read("ru", stem).cells:
            if cell.cell_type != "code":
                continue
            for token in build.code_comments(cell.source) or []:
                words = token.string.lstrip("#")
                if english.search(words) and not re.search("[\u0400-\u04ff]", words):
                    found.append(f"{stem}: {token.string}")
    assert found == []
