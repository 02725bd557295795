"""A guess before the answer: a lesson's "Predict" exercise takes the reader's guess, keeps it, then compares.

``guess = lessons.predict("l1_ex2", lang)`` shows a box (a number) or radio buttons (a choice)
and a Commit button; once committed, the guess is kept in the object and in ``GUESSES_FILE``
in the notebook's folder, so a restarted kernel still has it, and it cannot be changed. The
cell that runs the experiment ends with ``guess.reveal(actual)``, which shows the reader's
guess beside the run's answer and whether it was right. A reader without widgets commits in
code: ``lessons.predict("l1_ex2", lang, answer=139)``.

A run with nobody at the keyboard (the build, nbval) commits nothing, so ``reveal`` shows
the same line every time: the answer, and that no guess was committed. The stored notebooks and
the web edition show what that run showed, to a reader who has not guessed yet; so in a notebook
the line is folded (``Revealed``: an HTML ``<details>``, closed unless a guess was committed), and
its plain text, which nbval compares and a terminal prints, is the line itself. What the experiment
prints gives the answer away as well, so an answer cell runs it under ``with guess.folded():`` and
its lines are folded with the verdict.
"""

from __future__ import annotations

import dataclasses
import html
import io
import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..words import check_lang, number
from .errors import GuessAlreadyCommitted, NotAnOption
from .texts import text

GUESSES_FILE = ".leaselab-guesses.json"  # in the notebook's folder, beside the reader's copy of the lesson


@dataclass(frozen=True)
class Question:
    """What a predict exercise asks: a number (right within ``tolerance``) or one of ``options``.

    ``options`` are the values a guess may take; each has a line ``<key>_<value>`` in texts.py
    that the radio buttons and ``reveal`` show.
    """

    options: tuple[str, ...] = ()
    tolerance: float = 0.0

    @property
    def is_number(self) -> bool:
        return not self.options


# Every predict exercise of the lessons, by lesson and exercise number. A key keeps the number its lesson had
# when the key was made: lesson 6 was later split in two, so lesson 7's keys are l6_, 8's l7_ and 9's l8_.
QUESTIONS: dict[str, Question] = {
    "l0_ex1": Question(options=("first", "second", "refused")),
    "l1_ex2": Question(tolerance=0.5),
    "l2_ex2": Question(options=("same", "more")),
    "l2_ex3": Question(options=("xyz", "xzy", "yxz", "yzx", "zxy", "zyx")),
    "l3_ex2": Question(options=("accepted", "refused")),
    "l3_ex3": Question(options=("higher_wins", "higher_refused", "later_wins", "later_refused")),
    "l4_ex2": Question(tolerance=0.5),
    "l6_ex2": Question(options=("1", "2", "none")),
    "l6_ex3": Question(options=("yes", "no")),
    "l6_ex4": Question(options=("yes", "no")),  # lesson 7's exercises: lesson 6's prefix, as all its lines
    "l6_ex5": Question(options=("kept", "lost")),
    "l7_ex2": Question(options=("right", "not_yet")),
    # Which of lesson 8's section-2 handlers a fault of the reader's breaks: every answer
    # leaselab.chaos.proof.check_fault can give (tests/test_proof.py holds the two lists together).
    "l7_ex3": Question(
        options=(
            "none",
            "KEYED",
            "SKIPS_RETRIES",
            "KEY_PER_ATTEMPT",
            "KEYED+SKIPS_RETRIES",
            "KEYED+KEY_PER_ATTEMPT",
            "SKIPS_RETRIES+KEY_PER_ATTEMPT",
            "KEYED+SKIPS_RETRIES+KEY_PER_ATTEMPT",
        )
    ),
}


def _parse_number(raw: Any) -> float:
    """A number from what a reader typed: ``139``, ``0.5`` or ``0,5`` (the Russian decimal comma)."""
    if isinstance(raw, bool):
        raise ValueError(f"a guess must be a number, got {raw!r}")
    if isinstance(raw, (int, float)):
        value = float(raw)
    else:
        value = float(str(raw).strip().replace(",", "."))
    if not math.isfinite(value):
        raise ValueError(f"a guess must be a finite number, got {raw!r}")
    return value


@dataclass(frozen=True)
class Revealed:
    """What ``reveal`` shows: the verdict line, folded under ``summary`` unless ``open`` (a guess was committed).

    Its plain text is the line alone, so nbval compares it and ``print`` shows it; a notebook and
    the web edition render the HTML, where a reader who has not guessed sees only the summary.
    ``summary`` None means there is no answer to hide (the check ran nothing): the line is shown as is.
    """

    line: str
    summary: str | None
    open: bool
    run: str = ""  # what the experiment printed before the verdict (``Prediction.folded``), folded with it

    @property
    def text(self) -> str:
        """The whole plain text: what the run printed, then the verdict line."""
        return self.run + self.line

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        run = f"<pre>{html.escape(self.run.rstrip(chr(10)), quote=False)}</pre>" if self.run else ""
        line = f"{run}<p>{html.escape(self.line, quote=False)}</p>"
        if self.summary is None:
            return line
        opened = " open" if self.open else ""
        return f"<details{opened}><summary>{html.escape(self.summary, quote=False)}</summary>{line}</details>"


class Prediction:
    """One reader's guess for one exercise: open until committed, then fixed.

    The object owns the state; ``view()`` is a thin view over it.
    """

    def __init__(self, key: str, lang: str = "en", folder: str | os.PathLike | None = None) -> None:
        if key not in QUESTIONS:
            raise KeyError(f"no predict exercise {key!r}; the lessons have: {', '.join(QUESTIONS)}")
        self.key = key
        self.lang = check_lang(lang)
        self.question = QUESTIONS[key]
        self.path = Path(folder if folder is not None else os.getcwd()) / GUESSES_FILE
        self.guess: float | str | None = _load(self.path).get(key)
        self._view: Any = None
        self._held: io.StringIO | None = None  # inside folded(): what the block prints
        self._shown: Revealed | None = None  # inside folded(): the verdict reveal made, shown at the end

    @property
    def committed(self) -> bool:
        return self.guess is not None

    def _value(self, raw: Any) -> float | str:
        if self.question.is_number:
            return _parse_number(raw)
        value = str(raw)
        if value not in self.question.options:
            raise NotAnOption(f"{self.key}: {raw!r} is not one of {', '.join(self.question.options)}")
        return value

    def commit(self, raw: Any) -> float | str:
        """Keep ``raw`` as the guess (here and in the file); ``GuessAlreadyCommitted`` once another guess is kept.

        Committing the kept guess again changes nothing, so a cell that commits in code may run twice.
        """
        value = self._value(raw)
        if self.guess == value:
            return value
        if self.committed:
            raise GuessAlreadyCommitted(text("predict_already", self.lang, guess=self.say(self.guess)))
        kept = _load(self.path)
        kept[self.key] = value
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(kept, ensure_ascii=False, indent=1), encoding="utf-8")
        os.replace(tmp, self.path)  # never a half-written file of guesses
        self.guess = value
        if self._view is not None:
            self._view.show_committed()
        return value

    def say(self, value: Any) -> str:
        """A guess or an answer as the lesson's language writes it."""
        if self.question.is_number:
            return number(float(value), "g", self.lang)
        return text(f"{self.key}_{value}", self.lang)

    def right(self, actual: Any) -> bool:
        """Whether the kept guess matches ``actual`` (a number within the question's tolerance)."""
        if self.guess is None:
            return False
        if self.question.is_number:
            return abs(float(self.guess) - float(actual)) <= self.question.tolerance
        return self.guess == actual

    def verdict(self, actual: Any) -> str:
        """The line ``reveal`` shows: the run's answer, the kept guess and whether it was right.

        ``actual`` None means the run gave no answer (a check that ran nothing): nothing to compare.
        """
        if actual is None:
            return text("predict_no_run", self.lang)
        truth = self.say(actual if self.question.is_number else self._value(actual))
        if self.guess is None:
            return text("predict_none", self.lang, actual=truth)
        key = "predict_right" if self.right(actual) else "predict_wrong"
        return text(key, self.lang, actual=truth, guess=self.say(self.guess))

    def revealed(self, actual: Any) -> Revealed:
        """What ``reveal`` shows for ``actual``: folded until asked when no guess was committed."""
        summary = None if actual is None else text("predict_show", self.lang)
        return Revealed(self.verdict(actual), summary, open=self.committed)

    @contextmanager
    def folded(self) -> Iterator[None]:
        """Hold back what the experiment prints inside the block and show it folded with the verdict.

        An experiment's own lines give its answer away as surely as the verdict does ("account a1:
        20"), so a cell runs it as ``with guess.folded(): ...; guess.reveal(actual)``, and the stored
        notebook shows one folded answer. The block must call ``reveal`` (a ``ValueError`` otherwise);
        if it raises, what it printed is printed at once and the exception goes on.
        """
        if self._held is not None:
            raise ValueError(f"{self.key}: already inside folded()")
        self._held = held = io.StringIO()
        self._shown = None
        try:
            with redirect_stdout(held):
                yield
        except BaseException:
            print(held.getvalue(), end="")
            raise
        finally:
            self._held = None
        if self._shown is None:
            print(held.getvalue(), end="")
            raise ValueError(f"{self.key}: the block under folded() never called reveal(actual)")
        self._show(dataclasses.replace(self._shown, run=held.getvalue()))

    def reveal(self, actual: Any) -> None:
        """Show the run's answer beside the kept guess; the notebook's answer cell ends with this.

        In a notebook it is displayed (folded unless a guess was committed), wherever in the cell
        it is called; elsewhere its line is printed. Inside ``folded()`` it is shown when the block
        ends, below what the block printed.
        """
        shown = self.revealed(actual)
        if self._held is not None:
            self._shown = shown
            return
        self._show(shown)

    def _show(self, shown: Revealed) -> None:
        try:
            from IPython import get_ipython
        except ImportError:  # a plain Python without IPython: the line is all there is
            get_ipython = None
        if get_ipython is None or get_ipython() is None:
            print(shown.text)
            return
        from IPython.display import display

        display(shown)

    def view(self) -> PredictionView:
        """The box or radio buttons and the Commit button over this guess (ipywidgets, imported only here)."""
        if self._view is None:
            self._view = PredictionView(self)
        return self._view

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.view().box)


class PredictionView:
    """The widgets of one ``Prediction``: they only call it and show what it kept."""

    def __init__(self, prediction: Prediction) -> None:
        import ipywidgets as w

        self.prediction = prediction
        lang, question = prediction.lang, prediction.question
        if question.is_number:
            self.entry: Any = w.Text(placeholder=text("predict_placeholder", lang))
        else:
            labels = [(text(f"{prediction.key}_{o}", lang), o) for o in question.options]
            self.entry = w.RadioButtons(options=labels, value=None, layout=w.Layout(width="max-content"))
        self.button = w.Button(description=text("predict_commit", lang), button_style="primary")
        self.status = w.HTML()
        self.button.on_click(self.click)
        self.box = w.VBox([self.entry, w.HBox([self.button, self.status])])
        if prediction.committed:
            self.show_committed()

    def click(self, _button: Any = None) -> None:
        lang = self.prediction.lang
        if self.entry.value in (None, ""):
            self.status.value = text("predict_empty", lang)
            return
        try:
            self.prediction.commit(self.entry.value)
        except (ValueError, GuessAlreadyCommitted) as exc:  # say it beside the button, not as a traceback
            self.status.value = str(exc) if isinstance(exc, GuessAlreadyCommitted) else text("predict_bad", lang)

    def show_committed(self) -> None:
        p = self.prediction
        if p.question.is_number:
            self.entry.value = p.say(p.guess)
        else:
            self.entry.value = p.guess
        self.entry.disabled = True
        self.button.disabled = True
        self.status.value = text("predict_kept", p.lang, guess=p.say(p.guess))


def _load(path: Path) -> dict[str, Any]:
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return kept if isinstance(kept, dict) else {}


def predict(key: str, lang: str = "en", answer: Any = None, folder: str | os.PathLike | None = None) -> Prediction:
    """The predict exercise ``key`` in ``lang``; with ``answer``, commit it at once (a reader without widgets).

    The guess is kept in ``GUESSES_FILE`` in ``folder`` (the notebook's folder by default).
    Shown as a cell's last expression, it is the guess box and a Commit button.
    """
    prediction = Prediction(key, lang, folder)
    if answer is not None:
        prediction.commit(answer)
    return prediction
