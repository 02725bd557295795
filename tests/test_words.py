"""Numbers and plurals as each language writes them, and every template that uses them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leaselab import words
from leaselab.chaos.texts import STRINGS as CHAOS
from leaselab.lab.i18n import STRINGS
from leaselab.lessons.texts import MESSAGES


@pytest.mark.parametrize(
    "n, form",
    [
        (0, "задач"),
        (1, "задача"),
        (2, "задачи"),
        (4, "задачи"),
        (5, "задач"),
        (11, "задач"),
        (12, "задач"),
        (14, "задач"),
        (21, "задача"),
        (22, "задачи"),
        (101, "задача"),
        (111, "задач"),
        (522, "задачи"),
        (1.5, "задачи"),
    ],
)
def test_russian_takes_one_few_or_many_by_the_last_digits(n, form):
    assert words.plural(n, ("задача", "задачи", "задач"), "ru") == form


@pytest.mark.parametrize("n, form", [(0, "jobs"), (1, "job"), (2, "jobs"), (1.0, "job"), (1.5, "jobs")])
def test_english_takes_one_or_other(n, form):
    assert words.plural(n, ("job", "jobs"), "en") == form


def test_a_template_fills_the_number_and_its_word():
    assert words.render("{n} {n|job|jobs} done", "en", n=1) == "1 job done"
    assert words.render("{n} {n|job|jobs} done", "en", n=3) == "3 jobs done"
    assert words.render("готово {n} {n|задача|задачи|задач}", "ru", n=522) == "готово 522 задачи"
    assert words.render("через {s:g} {s|секунду|секунды|секунд}", "ru", s=1) == "через 1 секунду"


@pytest.mark.parametrize(
    "value, spec, en, ru",
    [
        (0.11, "", "0.11", "0,11"),
        (10000, ",", "10,000", "10\u00a0000"),
        (5000, ",", "5,000", "5000"),
        (1234567.5, ",.1f", "1,234,567.5", "1\u00a0234\u00a0567,5"),
        (-12000, ",", "-12,000", "-12\u00a0000"),
        (938.4, ".0f", "938", "938"),
        (10000, "", "10000", "10000"),  # no spec, no grouping: a job id or a pid stays as it is
    ],
)
def test_numbers_are_written_as_each_language_writes_them(value, spec, en, ru):
    assert words.number(value, spec, "en") == en
    assert words.number(value, spec, "ru") == ru
    assert words.render(f"{{x:{spec}}}" if spec else "{x}", "ru", x=value) == ru


def test_a_wrong_count_of_forms_or_an_unknown_language_is_refused():
    with pytest.raises(ValueError, match="three plural forms"):
        words.plural(2, ("задача", "задачи"), "ru")
    with pytest.raises(ValueError, match="two plural forms"):
        words.plural(2, ("job", "jobs", "jobz"), "en")
    with pytest.raises(ValueError, match="lang must be one of"):
        words.render("{n}", "de", n=1)
    with pytest.raises(KeyError):
        words.render("{n|a|b}", "en")


def test_placeholders_name_the_number_a_plural_follows():
    assert words.placeholders("{a} of {n} {n|job|jobs}") == {"a", "n"}
    assert words.placeholders("{k|job|jobs}") == {"k"}


def _templates():
    for table_name, table in (("lab", STRINGS), ("lessons", MESSAGES), ("chaos", CHAOS)):
        for lang, strings in table.items():
            for key, text in strings.items():
                yield table_name, lang, key, text


def test_every_plural_in_every_template_gives_its_language_s_number_of_forms():
    wrong = [
        f"{table} {lang} {key!r}: {forms!r}"
        for table, lang, key, text in _templates()
        for forms in words.plural_forms(text)
        if len(forms) != {"en": 2, "ru": 3}[lang]
    ]
    assert sum(1 for t in _templates() if words.plural_forms(t[3])) >= 10  # the templates do use plurals
    assert wrong == []


def test_the_plural_rule_and_the_lookup_of_a_text_are_written_once_in_words():
    # One way to translate: every layer's texts are read through words.line and counted through
    # words.plural; a second copy of Russian's one-few-many rule would drift from the first.
    package = Path(words.__file__).resolve().parent
    rule = re.compile(r"%\s*100")
    lookups = re.compile(r"(MESSAGES|STRINGS)\[lang\]")
    copies = [
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if p.name != "words.py"
        and (rule.search(p.read_text(encoding="utf-8")) or lookups.search(p.read_text(encoding="utf-8")))
    ]
    assert copies == []


def test_none_and_yes_or_no_read_as_words_and_a_list_of_numbers_as_the_language_writes_them():
    assert words.render("w2 gets: {job}", "en", job=None) == "w2 gets: nothing"
    assert words.render("w2 получает: {job}", "ru", job=None) == "w2 получает: ничего"
    assert words.render("{ok}", "ru", ok=True) == "да"
    assert words.render("{delays:g}", "ru", delays=[1.0, 2.5, 60]) == "1; 2,5; 60"
    assert words.render("{delays:g}", "en", delays=(1.0, 2.5, 60)) == "1, 2.5, 60"
    assert words.render("{rows}", "en", rows=[1.0, 2.0]) == "[1.0, 2.0]"  # without a spec, as Python prints it
