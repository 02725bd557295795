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


# -- numbers as Russian writes them ----------------------------------------------------------
#
# The rule, precisely. In Russian running text a number is written «0,11» and «10 000»
# (words.render does it). A *Latin-script number* is a decimal point between digits (0.11)
# or a comma grouping thousands (10,000). Not counted, because they are code, not prose:
# - anything in quotes ('…', "…", «…»);
# - anything in brackets, (), [] or {}: a Python value as Python prints it (a list, a tuple,
#   a dict), which a reader may paste back into a cell;
# - digits inside a longer token: identifiers, file names, dotted addresses (`w1`,
#   `host.db-wal`, `127.0.0.1`): a number counts only when it stands alone, between spaces or
#   punctuation (so a version such as 3.12 in prose would count: write «3.12» in quotes).
_BRACKETS = re.compile(r"\([^()\n]*\)|\[[^\[\]\n]*\]|\{[^{}\n]*\}")
_LATIN_NUMBER = re.compile(r"(?<![\w.,])(?:\d+\.\d+|\d{1,3}(?:,\d{3})+)(?![\w.]|,\d)")


def _prose(output: str) -> str:
    text = _QUOTED.sub(" ", output)
    while True:  # innermost brackets first, so a list of tuples goes as a whole
        bare = _BRACKETS.sub(" ", text)
        if bare == text:
            return text
        text = bare


def latin_numbers(output: str) -> list[str]:
    """Numbers written the English way (``0.11``, ``10,000``) in Russian prose, outside code (see the rule above)."""
    return _LATIN_NUMBER.findall(_prose(output))


# -- plural forms after a number -------------------------------------------------------------
#
# For the nouns the lessons count: (nominative singular, accusative singular, genitive
# singular, genitive plural). After a number the noun takes, by the number's last digits,
# one (1, 21: «1 задача»), few (2-4, 22: «3 задачи») or many (5-20, 25, 11-14: «5 задач»),
# and a case can move it (after «из»: «из 21 задачи», «из 3 задач»). So only forms that no
# case allows are errors: for «one» the genitive plural («1 секунд»); for «few» the nominative
# or accusative singular («2 задача»), or the genitive plural without a word that asks for the
# genitive («422 раз»); for «many» any singular form («5 задачи», «11 секунду»).
NOUNS = (
    ("задача", "задачу", "задачи", "задач"),
    ("попытка", "попытку", "попытки", "попыток"),
    ("секунда", "секунду", "секунды", "секунд"),
    ("минута", "минуту", "минуты", "минут"),
    ("воркер", "воркера", "воркера", "воркеров"),
    ("процесс", "процесс", "процесса", "процессов"),
    ("дубль", "дубль", "дубля", "дублей"),
    ("захват", "захват", "захвата", "захватов"),
    ("раз", "раз", "раза", "раз"),
    ("шаг", "шаг", "шага", "шагов"),
)
GENITIVE_WORDS = {"из", "до", "от", "около", "для", "без", "после", "более", "менее", "больше", "меньше", "у"}
_COUNTED = re.compile(r"(?<![\w.,\u00a0])(\d{1,3}(?:\u00a0\d{3})+|\d+)(?![\w.,]\d|\w)\s+([а-яё]+)", re.IGNORECASE)
_LAST_WORD = re.compile(r"(\w+)\s*$")


def _number_class(n: int) -> str:
    if n % 10 == 1 and n % 100 != 11:
        return "one"
    if 2 <= n % 10 <= 4 and not 12 <= n % 100 <= 14:
        return "few"
    return "many"


def wrong_plurals(output: str) -> list[str]:
    """Number-and-noun pairs in Russian with a form that no case allows (see the rule above)."""
    found = []
    for line in _QUOTED.sub(" ", output).splitlines():
        for match in _COUNTED.finditer(line):
            digits, word = match.group(1), match.group(2).lower()
            n = int(digits.replace("\u00a0", ""))
            last = _LAST_WORD.search(line[: match.start()])
            before = last.group(1) if last else ""
            for nom, acc, gen, gen_pl in NOUNS:
                kind = _number_class(n)
                if kind == "one":
                    wrong = {gen_pl} - {nom, acc, gen}
                elif kind == "few":
                    wrong = {nom, acc} - {gen, gen_pl}
                    if (before or "").lower() not in GENITIVE_WORDS:
                        wrong |= {gen_pl} - {gen}
                else:
                    wrong = {nom, acc, gen} - {gen_pl}
                if word in wrong:
                    found.append(f"{digits} {word}")
    return found


def test_the_number_detectors_find_latin_numbers_and_wrong_plurals_and_spare_code():
    assert latin_numbers("медиана 0.11 мс, шагов при 10,000 задачах") == ["0.11", "10,000"]
    assert latin_numbers("медиана 0,11 мс, шагов при 10\u00a0000 задачах") == []
    assert latin_numbers("отсрочки после попыток 1..7: [1.0, 2.0, 4.0]") == []
    assert latin_numbers("пауза в секундах: [(0.01, 812331), (4.5, 2)]") == []
    assert latin_numbers("файлы очереди: host.db, host.db-wal; адрес 127.0.0.1") == []
    assert latin_numbers("durability='normal': 'a 0.5 s sleep'") == []
    assert wrong_plurals("5 задачи, 1 секунд, 2 задача, 422 раз, 11 секунду") == [
        "5 задачи",
        "1 секунд",
        "2 задача",
        "422 раз",
        "11 секунду",
    ]
    assert (
        wrong_plurals(
            "522 задачи, 1 секунду, 21 задача, 5 задач, из 21 задачи, из 3 задач, 422 раза, "
            "11 раз, 10\u00a0000 задач, 0,5 секунды, последние 2 из 2 задач"
        )
        == []
    )


def _outputs_of(path: Path) -> list[str]:
    return _outputs(nbformat.read(path, as_version=4))


@pytest.mark.parametrize("path", sorted(RU.glob("*.ipynb")), ids=lambda p: p.stem)
def test_a_russian_lesson_prints_numbers_as_russian_writes_them(path):
    outputs = _outputs_of(path)
    assert [n for out in outputs for n in latin_numbers(out)] == []
    assert [p for out in outputs for p in wrong_plurals(out)] == []


# Numbers a template may meet: each plural class, a teen, a fraction, one to group, a small decimal.
SAMPLES = (1, 2, 5, 11, 12, 21, 22, 25, 111, 1.5, 0.11, 10_000, 522)


def _rendered(templates: dict[str, str], lang: str) -> list[tuple[str, str]]:
    from leaselab import words

    out = []
    for key, template in templates.items():
        names = words.placeholders(template)
        for n in SAMPLES:
            try:
                out.append((key, words.render(template, lang, **{name: n for name in names})))
            except (TypeError, ValueError):  # a field that takes no number (a list, a name): skip this sample
                continue
    return out


def test_every_russian_lesson_and_lab_text_writes_its_numbers_and_plurals_as_russian_does():
    from leaselab.lab.i18n import STRINGS

    rendered = _rendered(texts.MESSAGES["ru"], "ru") + _rendered(STRINGS["ru"], "ru")
    assert len(rendered) > 300
    assert [(key, line) for key, line in rendered if latin_numbers(line)] == []
    assert [(key, line) for key, line in rendered if wrong_plurals(line)] == []


def test_no_english_lesson_or_lab_text_says_1_seconds():
    from leaselab.lab.i18n import STRINGS

    rendered = _rendered(texts.MESSAGES["en"], "en") + _rendered(STRINGS["en"], "en")
    one_plural = re.compile(r"(?<![\d.,])1 (seconds|jobs|times|attempts|workers|duplicates|claims)\b")
    assert [(key, line) for key, line in rendered if one_plural.search(line)] == []


def test_both_languages_have_the_same_lesson_texts_with_the_same_placeholders():
    en, ru = texts.MESSAGES["en"], texts.MESSAGES["ru"]
    assert sorted(en) == sorted(ru)
    assert {k: texts.placeholders(v) for k, v in en.items()} == {k: texts.placeholders(v) for k, v in ru.items()}


def test_the_russian_lesson_texts_themselves_contain_no_english_sentence():
    assert [v for v in texts.MESSAGES["ru"].values() if english_runs(v)] == []


def test_an_unknown_text_or_language_is_named_in_the_error():
    with pytest.raises(KeyError, match="no text named 'nope'"):
        texts.text("nope", "ru")
    with pytest.raises(ValueError, match="lang must be one of en, ru"):
        texts.speaker("de")


# Words the glossary (notebooks/GLOSSARY.md) retired because they meant two ideas or read wrong.
RETIRED = {
    r"задани[еяюй]": "a job is «задача»",
    r"сбор\w* аренд": "the reaper returns jobs to the queue; it collects no rent",
    r"ручн\w+ час": "a clock we move ourselves, not a wristwatch",
    r"на паузе|приостановлен": "SIGSTOP freezes: «заморожен»",
    r"отверг\w*": "a refused write is «отклонённая»: one verb, «отклонить», everywhere",
    r"замёрз\w*": "a stopped worker is «замерший» (what we do to it: «заморозить»)",
    r"длин\w* аренд": "how long a lease lasts is its «срок аренды»",
    r"журнал\w*\s+WAL|WAL-журнал": "the WAL is «файл WAL»; «журнал» is a worker's log",
    r"отрезать воркер(?!а)": "«отрезать воркера от сети»: a worker is animate",
    r"busy timeout": "«тайм-аут ожидания блокировки (`busy_timeout`)»",
    r"переживает\s+(один|\*\*один\*\*)\s+пропуск": "a lease «выдерживает» a missed beat",
    r"захват\w* из статьи": "no lesson introduces an article: «захват из урока 2»",
    r"токен больше не держит": "«у задачи уже другой токен»",
    r"отта[иея]\w*": "what we do to a frozen worker is «разморозить», and it never thaws by itself",
    r"бок о бок|в терминах": "calques: «параллельно», «если говорить о»",
}


def _russian_prose() -> list[str]:
    """The Russian prose of every lesson, from its source (the notebooks are built from it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("lesson_build", RU.parent / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return [c.source for src in build.sources() for c in build.split(src)["ru"].cells if c.cell_type == "markdown"]


def _russian_words() -> list[str]:
    from leaselab.lab.i18n import STRINGS
    from leaselab.lessons.notebook import STORED_DETAILS_RU

    details = [russian for _, russian in STORED_DETAILS_RU]
    return list(STRINGS["ru"].values()) + list(texts.MESSAGES["ru"].values()) + details + _russian_prose()


@pytest.mark.parametrize("pattern", sorted(RETIRED))
def test_the_russian_text_follows_the_glossary(pattern):
    found = [m.group(0) for text in _russian_words() for m in re.finditer(pattern, text, re.IGNORECASE)]
    assert found == [], RETIRED[pattern]


def test_the_glossary_names_each_russian_term_once():
    rows = [
        line.split("|")[2].strip()
        for line in (RU.parent / "GLOSSARY.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| ") and not line.startswith("| English")
    ]
    assert len(rows) == len(set(rows)) and len(rows) > 30
