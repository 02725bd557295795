"""What mybinder.org would build works: binder/ installs into a fresh virtual environment, and the lessons run there.

The environment is made once per run (``binder_env.ensure``, shared by pytest-xdist's workers), and
nbval runs every English lesson in a kernel of it (``notebooks/conftest.py``): each lesson's code is
proved on what Binder installs. The Russian lessons share every code cell with the English ones
(``test_notebooks_sync.py``) and are not run a second time. Here: the kernel nbval is told to start is
that environment's, and leaselab comes from its install, not from this checkout. Marked ``binder``
(the install takes a minute).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
import tomllib
from nbclient import NotebookClient

from tests.support import binder_env

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
NBVAL_LANGUAGES = {"en", "ru"}  # every lesson runs under nbval in both languages

pytestmark = pytest.mark.binder

PROBE = "import sys, leaselab\nprint(sys.prefix)\nprint(leaselab.__file__)"


def test_nbval_runs_the_lessons_in_both_languages_and_in_the_binder_kernel():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    under_nbval = {p.removeprefix("notebooks/") for p in options["testpaths"] if p.startswith("notebooks")}
    languages = {p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir() and list(p.glob("*.ipynb"))}
    assert under_nbval == NBVAL_LANGUAGES == languages, (under_nbval, languages)
    assert f"--nbval-kernel-name={binder_env.KERNEL}" in options["addopts"].split()
    assert "--nbval-current-env" not in options["addopts"], "the lessons would run in the tests' own environment"


def test_runtime_pins_a_python_and_requirements_install_the_project_with_the_russian_pack():
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert runtime.startswith("python-3.") and runtime.count(".") == 1
    lines = [line.split("#")[0].strip() for line in (BINDER / "requirements.txt").read_text().splitlines()]
    lines = [line for line in lines if line]
    assert ".[lab]" in lines
    assert "jupyterlab-language-pack-ru-RU" in lines


def test_the_kernel_the_lessons_run_in_is_the_fresh_environment_made_only_from_binder(monkeypatch):
    want = (BINDER / "runtime.txt").read_text().strip().removeprefix("python-")
    if f"{sys.version_info[0]}.{sys.version_info[1]}" != want:
        pytest.skip(f"binder/runtime.txt asks for Python {want}; this is {sys.version.split()[0]}")
    folder = binder_env.ensure()
    shown = binder_env.run_python(folder, "-m", "pip", "show", "jupyterlab-language-pack-ru-RU", "leaselab")
    assert "Name: jupyterlab-language-pack-ru-RU" in shown.stdout and "Name: leaselab" in shown.stdout, shown.stderr

    # The kernel nbval starts, found as nbval finds it, in the folder nbval starts it in (the lessons'),
    # with this checkout on PYTHONPATH as a developer may have it: it must still import the installed leaselab.
    for name, value in binder_env.kernel_lookup(folder).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    probe = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE)])
    NotebookClient(
        probe,
        timeout=120,
        kernel_name=binder_env.KERNEL,
        resources={"metadata": {"path": str(ROOT / "notebooks" / "ru")}},
    ).execute()
    prefix, module = probe.cells[0].outputs[0]["text"].split()
    venv = (folder / "venv").resolve()
    assert Path(prefix).resolve() == venv, "the kernel did not run in the fresh environment"
    assert Path(module).resolve().is_relative_to(venv), f"leaselab was not imported from the install: {module}"
