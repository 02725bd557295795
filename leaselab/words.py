"""Filling a sentence in English or Russian: numbers as each language writes them, and plurals.

Every string leaselab prints to a reader (the lab's, the lessons', the checker's) goes
through ``render``. A template is ``str.format`` text with two additions:

- ``{n|job|jobs}`` is the word for ``n`` in the right number: English takes two forms
  (one, other), Russian three (one, few, many: ``{n|задача|задачи|задач}`` gives
  «1 задача», «3 задачи», «5 задач», «21 задача», «11 задач»). The number itself is a
  separate ``{n}``, so a template reads ``"{n} {n|job|jobs} done"``. The forms are given
  in the case the sentence needs: ``"из {n} {n|задачи|задач|задач}"``.
- In Russian a number is written with a decimal comma (``0,11``), and a format that asks
  for grouping (``{rate:,.0f}``) groups by thin no-break spaces only from five digits on
  (``10 000``, but ``5000``), as Russian typography does; English keeps ``10,000`` and ``0.11``.
  A number without a format spec (a job id, a pid) is printed as it is.
- ``True`` and ``False`` read as words (``yes``, ``да``), and ``None`` as ``nothing`` (``ничего``);
  a list of numbers given a format spec (``{delays:g}``) reads ``1, 2.5, 4`` (``1; 2,5; 4``),
  each number as the language writes it.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

LANGS = ("en", "ru")  # every language leaselab speaks: the lessons', the lab's, the checker's, chaos's


def check_lang(lang: Any) -> str:
    """``lang`` if leaselab speaks it (``LANGS``); else ``ValueError`` naming the choices."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}; got {lang!r}")
    return lang


# A no-break space: a grouped number never wraps across lines.
RU_GROUP = "\u00a0"

_PLURAL = re.compile(r"\{(\w+)\|([^{}]*)\}")


def plural(n: int | float, forms: Sequence[str], lang: str) -> str:
    """The form of a word for ``n``: two forms in English (one, other), three in Russian (one, few, many)."""
    if check_lang(lang) == "en":
        if len(forms) != 2:
            raise ValueError(f"English takes two plural forms (one, other), got {list(forms)!r}")
        return forms[0] if n == 1 else forms[1]
    if len(forms) != 3:
        raise ValueError(f"Russian takes three plural forms (one, few, many), got {list(forms)!r}")
    if n != int(n):
        return forms[1]  # a fraction takes the genitive singular: «1,5 секунды», «0,5 задачи»
    n = abs(int(n))
    if n % 10 == 1 and n % 100 != 11:
        return forms[0]
    if 2 <= n % 10 <= 4 and not 12 <= n % 100 <= 14:
        return forms[1]
    return forms[2]


def number(value: int | float, spec: str = "", lang: str = "en") -> str:
    """``format(value, spec)`` as ``lang`` writes numbers (see the module's docstring)."""
    text = format(value, spec)
    if lang != "ru":
        return text
    sign = "-" if text.startswith("-") else ""
    digits = text[len(sign) :]
    whole, dot, fraction = digits.partition(".")
    if "," in whole:
        bare = whole.replace(",", "")
        if len(bare) >= 5:
            groups: list[str] = []
            while len(bare) > 3:
                bare, tail = bare[:-3], bare[-3:]
                groups.insert(0, tail)
            whole = RU_GROUP.join([bare, *groups])
        else:
            whole = bare
    return sign + whole + ("," + fraction if dot else "")


class _Formatter(string.Formatter):
    def __init__(self, lang: str):
        super().__init__()
        self.lang = lang

    def format_field(self, value: Any, format_spec: str) -> str:
        if isinstance(value, bool) and not format_spec:  # a reader's words, not Python's True and False
            return YES_NO[self.lang][value]
        if value is None and not format_spec:  # a claim that found nothing, say: a word, not Python's None
            return NOTHING[self.lang]
        if isinstance(value, (int, float)):
            return number(value, format_spec, self.lang)
        if format_spec and isinstance(value, (list, tuple)) and all(_plain_number(v) for v in value):
            # numbers in a row, each as the language writes it: "1, 2, 4", not Python's [1.0, 2.0, 4.0];
            # Russian parts them with semicolons, since its decimal comma would make "1, 2,5" ambiguous
            return LIST_SEPARATOR[self.lang].join(number(v, format_spec, self.lang) for v in value)
        return super().format_field(value, format_spec)


def _plain_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# How a yes-or-no fact reads in a line of text, in each language.
YES_NO: dict[str, dict[bool, str]] = {"en": {True: "yes", False: "no"}, "ru": {True: "да", False: "нет"}}
# How an absent value (None) reads in a line of text.
NOTHING: dict[str, str] = {"en": "nothing", "ru": "ничего"}
LIST_SEPARATOR: dict[str, str] = {"en": ", ", "ru": "; "}


def line(table: dict[str, dict[str, str]], key: str, lang: str, **values: Any) -> str:
    """``table[lang][key]``, rendered with ``values`` in ``lang`` (as written when there are none):
    how every layer's table of texts is read, the one lookup; ``KeyError`` names an unknown key."""
    try:
        template = table[check_lang(lang)][key]
    except KeyError:
        raise KeyError(f"no text named {key!r}") from None
    return render(template, lang, **values) if values else template


def render(template: str, lang: str, **values: Any) -> str:
    """``template`` filled from ``values`` in ``lang``: plural forms chosen, numbers written as ``lang`` does."""
    check_lang(lang)

    def form(match: re.Match) -> str:
        name, forms = match.group(1), match.group(2).split("|")
        if name not in values:
            raise KeyError(name)
        return plural(values[name], forms, lang).replace("{", "{{").replace("}", "}}")

    return _Formatter(lang).format(_PLURAL.sub(form, template), **values)


def placeholders(template: str) -> set[str]:
    """The names a template needs: its ``{fields}`` and the numbers its plurals follow."""
    names = set(m.group(1) for m in _PLURAL.finditer(template))
    bare = _PLURAL.sub("", template)
    names.update(name for _, name, _, _ in string.Formatter().parse(bare) if name)
    return names


def plural_forms(template: str) -> list[list[str]]:
    """The plural forms a template gives, in order (a test checks each language gives its own count)."""
    return [m.group(2).split("|") for m in _PLURAL.finditer(template)]
