"""notebooks/build.py rebuilds a notebook only when its inputs changed, and a rebuild stores the same bytes
for the same run: building an unchanged checkout leaves ``git status`` clean."""

from __future__ import annotations

import copy
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "notebooks" / "build.py"
TINY = Path(__file__).resolve().parent / "data" / "lessons" / "90-tiny.py"

_spec = importlib.util.spec_from_file_location("lesson_build", BUILD)
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A folder with the tiny lesson source, and the folder its notebooks are built into."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(TINY, src / TINY.name)
    return src, tmp_path / "out"


def _notebooks(out: Path) -> dict[str, bytes]:
    return {lang: (out / lang / f"{TINY.stem}.ipynb").read_bytes() for lang in build.LANGUAGES}


def _runs(out: Path) -> dict[str, int]:
    """How many times each language's notebook was executed (its first code cell appends a line)."""
    counts = {}
    for lang in build.LANGUAGES:
        log = out / lang / "runs.log"
        counts[lang] = len(log.read_text().splitlines()) if log.exists() else 0
    return counts


def _build(src: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    """The build as ``./dev build`` runs it: its own process, its own kernels, its output captured."""
    return subprocess.run(
        [sys.executable, str(BUILD), "--src", str(src), "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )


def _stamped_as_built(src: Path, out: Path) -> None:
    """Write the tiny lesson's notebooks as a finished build leaves them, without running them."""
    for lang, nb in build.split(src / TINY.name).items():
        nb.metadata[build.STAMP] = {"built_from": build.digest(nb)}
        path = build.target(src / TINY.name, lang, out)
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)


def test_a_build_of_notebooks_already_built_from_these_inputs_runs_nothing_and_writes_nothing(tree, capsys):
    src, out = tree
    _stamped_as_built(src, out)
    before = _notebooks(out)
    assert build.main(["--src", str(src), "--out", str(out)]) == 0
    assert _runs(out) == {"en": 0, "ru": 0}
    assert _notebooks(out) == before
    assert "2 notebooks already built from the current sources" in capsys.readouterr().out


def test_the_digest_of_a_notebook_changes_with_its_cells_their_tags_and_the_package(tree, tmp_path):
    src, _ = tree
    nb = build.split(src / TINY.name)["en"]
    package = tmp_path / "leaselab"
    shutil.copytree(build.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    first = build.digest(nb, package)
    assert build.digest(copy.deepcopy(nb), package) == first
    edited = copy.deepcopy(nb)
    edited.cells[0].source += " (edited)"
    tagged = copy.deepcopy(nb)
    tagged.cells[-1].metadata["tags"] = ["nbval-check-output"]
    assert first not in (build.digest(edited, package), build.digest(tagged, package))
    (package / "queue.py").write_text((package / "queue.py").read_text() + "\n# a change to the library\n")
    library_changed = build.digest(nb, package)
    (package / "backends" / "extra.sql").write_text("select 1;\n")
    assert len({first, library_changed, build.digest(nb, package)}) == 3


def test_every_file_the_package_is_made_of_is_an_input_of_the_build():
    """A tracked file of another kind (package data) would change lessons without making them stale."""
    listed = subprocess.run(["git", "ls-files", "leaselab"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    tracked = {ROOT / line for line in listed.stdout.splitlines()}
    assert tracked and tracked <= set(build.package_files())


def _with_widgets(ids: list[str]) -> nbformat.NotebookNode:
    """A notebook whose one output shows a box holding a slider, under the given model ids (box, slider, layout)."""
    box, slider, layout = ids
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "box",
                outputs=[
                    nbformat.v4.new_output(
                        "display_data",
                        data={
                            "application/vnd.jupyter.widget-view+json": {
                                "model_id": box,
                                "version_major": 2,
                                "version_minor": 0,
                            },
                            "text/plain": "VBox(children=(IntSlider(value=3),))",
                        },
                    )
                ],
            )
        ]
    )
    nb.cells[0].id = "x-000"  # as build.split numbers them
    state = {
        layout: {"model_name": "LayoutModel", "state": {}},
        slider: {"model_name": "IntSliderModel", "state": {"layout": f"IPY_MODEL_{layout}", "value": 3}},
        box: {"model_name": "VBoxModel", "state": {"children": [f"IPY_MODEL_{slider}"]}},
    }
    nb.metadata["widgets"] = {build.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    return nb


def test_widget_model_ids_are_numbered_by_the_widgets_and_not_by_the_random_ids():
    one = _with_widgets(["f" * 32, "0" * 32, "7" * 32])
    other = _with_widgets(["1" * 32, "e" * 32, "3" * 32])
    assert nbformat.writes(one) != nbformat.writes(other)
    stable = build.stabilize(one, "en/x.ipynb")
    assert nbformat.writes(stable) == nbformat.writes(build.stabilize(other, "en/x.ipynb"))
    state = stable.metadata["widgets"][build.WIDGET_STATE]["state"]
    box = stable.cells[0].outputs[0].data["application/vnd.jupyter.widget-view+json"]["model_id"]
    slider = state[box]["state"]["children"][0].removeprefix("IPY_MODEL_")
    assert state[slider]["model_name"] == "IntSliderModel"
    assert state[slider]["state"]["layout"].removeprefix("IPY_MODEL_") in state


def test_a_runs_scratch_folder_name_and_server_port_are_masked_and_nothing_else():
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "lab",
                outputs=[
                    nbformat.v4.new_output(
                        "stream",
                        name="stdout",
                        text="/tmp/leaselab-00-introduction-fow1_xh9/playground.db\n"
                        "postgresql://leaselab@127.0.0.1:52007/lesson7\n"
                        "leaselab-05-one-file is a name, 127.0.0.1:80 an address\n",
                    )
                ],
            )
        ]
    )
    nb.cells[0].id = "x-000"
    text = build.stabilize(nb, "en/x.ipynb").cells[0].outputs[0].text
    assert text == (
        "/tmp/leaselab-00-introduction-XXXXXXXX/playground.db\n"
        "postgresql://leaselab@127.0.0.1:PORT/lesson7\n"
        "leaselab-05-one-file is a name, 127.0.0.1:80 an address\n"
    )


@pytest.mark.build
def test_building_twice_changes_no_byte_and_a_changed_source_rebuilds_only_its_notebook(tree):
    src, out = tree
    first = _build(src, out)
    # ipykernel 7 warned, once per kernel, that its TCP connection was not encrypted.
    assert [line for line in first.stderr.splitlines() if "warn" in line.lower()] == []
    assert _runs(out) == {"en": 1, "ru": 1}
    built = _notebooks(out)

    again = _build(src, out)
    assert "2 notebooks already built" in again.stdout
    assert _runs(out) == {"en": 1, "ru": 1}
    assert _notebooks(out) == built

    # Run again for real: the figure, the widgets' ids and the scratch folder's name come out the same.
    forced = _build(src, out, "--force")
    assert forced.stdout.count("rebuilt, unchanged") == 2, forced.stdout
    assert _runs(out) == {"en": 2, "ru": 2}
    assert _notebooks(out) == built

    source = src / TINY.name
    source.write_text(source.read_text().replace("# # Урок для тестов сборки", "# # Урок для тестов сборки, второй"))
    changed = _build(src, out)
    assert _runs(out) == {"en": 2, "ru": 3}
    assert "1 notebook already built" in changed.stdout
    after = _notebooks(out)
    assert after["en"] == built["en"] and after["ru"] != built["ru"]
    assert "второй".encode() in after["ru"]


@pytest.mark.build
def test_naming_a_lesson_rebuilds_it_even_when_it_is_current(tree):
    src, out = tree
    _stamped_as_built(src, out)
    _build(src, out, TINY.stem[:2])
    assert _runs(out) == {"en": 1, "ru": 1}


@pytest.mark.build
def test_a_build_refuses_a_folder_holding_a_readers_committed_guesses(tree):
    # Guesses committed while running the lessons in notebooks/<lang> (lessons.predict) would be
    # printed by the reveal cells into the stored lessons: the build stops and names the file.
    from leaselab.lessons.predict import GUESSES_FILE

    src, out = tree
    (out / "en").mkdir(parents=True)
    (out / "en" / GUESSES_FILE).write_text("{}")
    done = subprocess.run(
        [sys.executable, str(BUILD), "--src", str(src), "--out", str(out), "--force"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0 and GUESSES_FILE in done.stderr and "remove it" in done.stderr
    assert _runs(out)["en"] == 0
