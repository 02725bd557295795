"""The guess a reader commits before a lesson's "Predict" exercise runs (leaselab.lessons.predict)."""

from __future__ import annotations

import json
import queue
import sys

import pytest

from leaselab import lessons
from leaselab.errors import LeaselabError
from leaselab.lessons.errors import GuessAlreadyCommitted, NotAnOption
from leaselab.lessons.predict import GUESSES_FILE, QUESTIONS, Prediction
from leaselab.lessons.texts import MESSAGES, text


def test_typing_a_number_and_clicking_commit_keeps_the_guess_and_locks_the_box(tmp_path):
    guess = lessons.predict("l1_ex2", "en", folder=tmp_path)
    view = guess.view()
    view.entry.value = "139"
    view.button.click()
    assert guess.guess == 139.0
    assert view.entry.disabled and view.button.disabled
    assert view.status.value == "Committed: 139. Now run the next cell."


def test_a_russian_reader_may_type_a_decimal_comma_and_is_answered_in_russian(tmp_path):
    guess = lessons.predict("l1_ex2", "ru", folder=tmp_path)
    view = guess.view()
    assert view.button.description == "Зафиксировать"
    view.entry.value = "138,5"
    view.button.click()
    assert guess.guess == 138.5
    assert view.status.value == "Прогноз зафиксирован: 138,5. Теперь выполните следующую ячейку."


def test_a_choice_is_made_with_radio_buttons_labelled_in_the_lessons_language(tmp_path):
    guess = lessons.predict("l3_ex2", "ru", folder=tmp_path)
    view = guess.view()
    assert [label for label, _ in view.entry.options] == ["примут", "отклонят: аренда уже истекла"]
    view.entry.value = "refused"
    view.button.click()
    assert guess.guess == "refused" and view.entry.disabled


def test_clicking_commit_with_nothing_chosen_or_not_a_number_commits_nothing(tmp_path):
    guess = lessons.predict("l1_ex2", "en", folder=tmp_path)
    view = guess.view()
    view.button.click()
    assert view.status.value == "Choose or type a guess first."
    view.entry.value = "about a minute"
    view.button.click()
    assert view.status.value.startswith("That is not a number")
    assert not guess.committed and not (tmp_path / GUESSES_FILE).exists()


def test_a_committed_guess_cannot_be_changed_in_code_or_through_the_widget(tmp_path):
    guess = lessons.predict("l1_ex2", "en", answer=120, folder=tmp_path)
    with pytest.raises(GuessAlreadyCommitted, match="already committed: 120") as caught:
        guess.commit(139)
    assert isinstance(caught.value, LeaselabError)
    view = guess.view()
    assert view.entry.value == "120" and view.entry.disabled
    view.entry.value = "139"  # a reader who re-enables the box in the browser's tools
    view.button.click()
    assert guess.guess == 120.0
    assert "cannot be changed" in view.status.value
    assert guess.commit(120) == 120.0  # the same guess again changes nothing: a cell may run twice


def test_the_guess_is_kept_in_the_notebooks_folder_so_a_new_kernel_still_has_it(tmp_path):
    lessons.predict("l2_ex3", "en", answer="zxy", folder=tmp_path)
    lessons.predict("l1_ex2", "en", answer=139, folder=tmp_path)
    assert json.loads((tmp_path / GUESSES_FILE).read_text(encoding="utf-8")) == {"l2_ex3": "zxy", "l1_ex2": 139.0}
    again = Prediction("l2_ex3", "en", tmp_path)  # as after a restart
    assert again.guess == "zxy"
    assert again.view().entry.disabled
    with pytest.raises(GuessAlreadyCommitted):
        lessons.predict("l2_ex3", "en", answer="xyz", folder=tmp_path)


def test_reveal_prints_the_truth_the_guess_and_the_verdict_in_each_language(tmp_path, capsys):
    (tmp_path / "en").mkdir()
    (tmp_path / "ru").mkdir()
    lessons.predict("l1_ex2", "en", answer=139, folder=tmp_path / "en").reveal(139)
    lessons.predict("l4_ex2", "en", answer=20, folder=tmp_path / "en").reveal(0)
    lessons.predict("l3_ex2", "ru", answer="refused", folder=tmp_path / "ru").reveal("accepted")
    lessons.predict("l1_ex2", "ru", answer="139,4", folder=tmp_path / "ru").reveal(139)
    assert capsys.readouterr().out.splitlines() == [
        "The run says: 139. Your guess: 139. Right.",
        "The run says: 0. Your guess: 20. Not this time: the answer below says why.",
        "Правильный ответ: примут. Ваш прогноз: отклонят: аренда уже истекла. "
        "На этот раз мимо; почему — в ответе ниже.",
        "Правильный ответ: 139. Ваш прогноз: 139,4. Угадали.",  # within the half-second the exercise allows
    ]


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_with_no_guess_committed_reveal_still_prints_the_truth_and_says_so(tmp_path, capsys, lang):
    lessons.predict("l2_ex3", lang, folder=tmp_path).reveal("zxy")
    want = {
        "en": "The run says: z, x, y. No guess was committed: a guess counts only when committed before the run.",
        "ru": "Правильный ответ: z, x, y. Прогноз не был зафиксирован, а засчитывается только прогноз, "
        "зафиксированный до запуска.",
    }
    assert capsys.readouterr().out.strip() == want[lang]
    assert not (tmp_path / GUESSES_FILE).exists()


def test_bad_guesses_and_unknown_exercises_are_named(tmp_path):
    with pytest.raises(NotAnOption, match="'maybe' is not one of accepted, refused"):
        lessons.predict("l3_ex2", "en", answer="maybe", folder=tmp_path)
    with pytest.raises(ValueError, match="finite"):
        lessons.predict("l1_ex2", "en", answer=float("nan"), folder=tmp_path)
    with pytest.raises(KeyError, match="no predict exercise 'l9_ex1'"):
        lessons.predict("l9_ex1", "en", folder=tmp_path)
    with pytest.raises(ValueError, match="lang must be one of"):
        lessons.predict("l1_ex2", "de", folder=tmp_path)
    with pytest.raises(NotAnOption):
        lessons.predict("l3_ex2", "en", folder=tmp_path).reveal("late")  # a lesson's own slip is caught too
    assert not (tmp_path / GUESSES_FILE).exists()


def test_every_choice_has_its_label_in_every_language():
    for key, question in QUESTIONS.items():
        for option in question.options:
            for lang in MESSAGES:
                assert text(f"{key}_{option}", lang)


ANSWER_CELL = "for _ in range(1):\n    guess.reveal(139)"  # reveal inside a block, as lesson 4 calls it


def _run_unattended(folder, commit: str = "", answer_cell: str = ANSWER_CELL) -> list[str | dict]:
    """What a fresh kernel started in ``folder`` shows for a predict cell and its answer cell, as nbval runs them.

    Streams are kept as their text, a widget as "widget", any other display as its data by MIME type.
    """
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3", cwd=str(folder))
    shown: list[str | dict] = []

    def keep(msg) -> None:
        if msg["msg_type"] == "stream":
            shown.append(msg["content"]["text"])
        elif msg["msg_type"] in ("display_data", "execute_result"):
            data = msg["content"]["data"]
            shown.append("widget" if "application/vnd.jupyter.widget-view+json" in data else data)
        elif msg["msg_type"] == "error":
            shown.append("error: " + msg["content"]["evalue"])

    try:
        for cell in (
            f"from leaselab import lessons\nguess = lessons.predict('l1_ex2', 'en'{commit})\nguess",
            answer_cell,
        ):
            reply = client.execute_interactive(cell, output_hook=keep, timeout=120)
            assert reply["content"]["status"] == "ok", shown
    except queue.Empty:  # pragma: no cover
        pytest.fail("the kernel did not answer within two minutes")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    return shown


UNATTENDED = "The run says: 139. No guess was committed: a guess counts only when committed before the run."


def test_an_unattended_run_shows_the_box_and_the_same_answer_every_time_folded_until_asked(tmp_path):
    first, second = _run_unattended(tmp_path), _run_unattended(tmp_path)
    assert first == second
    assert first[0] == "widget" and len(first) == 2
    shown = first[1]
    assert isinstance(shown, dict)
    # The plain text, which nbval compares and a terminal prints, is the line as it always was.
    assert shown["text/plain"] == UNATTENDED
    # The stored notebook and the web edition render the HTML: the answer folded under a summary.
    assert shown["text/html"] == (f"<details><summary>Show the run's answer</summary><p>{UNATTENDED}</p></details>")
    assert not (tmp_path / GUESSES_FILE).exists(), sys.executable


def test_a_reader_who_committed_a_guess_sees_the_answer_unfolded(tmp_path):
    shown = _run_unattended(tmp_path, commit=", answer=139")[-1]
    assert isinstance(shown, dict)
    assert shown["text/plain"] == "The run says: 139. Your guess: 139. Right."
    assert shown["text/html"].startswith("<details open><summary>")


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_folded_answer_is_escaped_and_its_summary_is_in_the_lessons_language(tmp_path, lang):
    folded = lessons.predict("l3_ex3", lang, folder=tmp_path).revealed("higher_refused")
    assert folded.summary == {"en": "Show the run's answer", "ru": "Показать правильный ответ"}[lang]
    assert not folded.open and folded._repr_html_().startswith(f"<details><summary>{folded.summary}</summary>")
    assert "(7, 12)" in folded.line and str(folded) == repr(folded) == folded.line
    hostile = type(folded)("<b>a & b</b>", "<i>", open=False)._repr_html_()
    assert hostile == "<details><summary>&lt;i&gt;</summary><p>&lt;b&gt;a &amp; b&lt;/b&gt;</p></details>"


FOLDED_CELL = "with guess.folded():\n    print('dead after 139 s')\n    guess.reveal(139)"


def test_under_folded_what_the_run_prints_is_held_back_and_shown_folded_with_the_verdict(tmp_path):
    shown = _run_unattended(tmp_path, answer_cell=FOLDED_CELL)
    # No stream: the experiment's own line, which gives the answer away, is inside the fold.
    assert shown[0] == "widget" and len(shown) == 2 and isinstance(shown[1], dict), shown
    assert shown[1]["text/plain"] == "dead after 139 s\n" + UNATTENDED
    assert shown[1]["text/html"] == (
        f"<details><summary>Show the run's answer</summary><pre>dead after 139 s</pre><p>{UNATTENDED}</p></details>"
    )


def test_folded_outside_a_notebook_prints_the_run_then_the_verdict_once_the_block_ends(tmp_path, capsys):
    guess = lessons.predict("l1_ex2", "en", folder=tmp_path, answer=139)
    with guess.folded():
        print("dead after 139 s")
        assert capsys.readouterr().out == ""  # held back while the block runs
        guess.reveal(139)
    assert capsys.readouterr().out == "dead after 139 s\nThe run says: 139. Your guess: 139. Right.\n"


def test_a_folded_block_that_never_reveals_or_raises_still_prints_what_it_printed(tmp_path, capsys):
    guess = lessons.predict("l1_ex2", "en", folder=tmp_path)
    with pytest.raises(ValueError, match="never called reveal"), guess.folded():
        print("half a run")
    assert capsys.readouterr().out == "half a run\n"
    with pytest.raises(ZeroDivisionError), guess.folded():
        print("before the fault")
        1 / 0  # noqa: B018
    assert capsys.readouterr().out == "before the fault\n"
    with guess.folded():  # usable again after both
        guess.reveal(3)
    assert capsys.readouterr().out.startswith("The run says: 3.")
