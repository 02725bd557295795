"""What mybinder.org would build works: binder/ installs into a fresh virtual environment and the lessons run there.

Each lesson runs once per language per suite: nbval runs the English ones (``testpaths`` in
``pyproject.toml``), and this test runs the Russian ones in the fresh environment, comparing the same
facts nbval compares. Their code cells are identical by construction (``test_notebooks_sync.py``), so
the fresh environment is proved on every lesson's code. Slow (a pip install of JupyterLab into memory,
then eight lessons, three at a time): marked ``binder``; deselect with ``-m "not binder"``, and
``pytest notebooks/ru`` runs them under nbval.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from polling import wait_until
from procs import RUN_NOTEBOOK

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
LANGS = ("ru",)  # the languages nbval does not run (testpaths): see the docstring

pytestmark = pytest.mark.binder

# Lessons at once, each in its own kernel and process: they wait on their workers far more than they
# compute, and each makes its own scratch folders, ports and servers, as under nbval side by side.
LESSONS_AT_ONCE = 3

PROBE = "import sys, leaselab\nprint(sys.prefix)\nprint(leaselab.__file__)"


def _facts(nb: nbformat.NotebookNode) -> list[str]:
    """The printed text of every cell whose output the lesson checks (nbval-check-output)."""
    return ["".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in c.outputs)
            for c in nb.cells
            if c.cell_type == "code" and "nbval-check-output" in c.metadata.get("tags", [])]


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and "leaselab" in cmdline and int(proc.name) != os.getpid():
            found.append(cmdline)
    return found


def test_every_language_of_the_lessons_runs_once_either_under_nbval_or_in_the_fresh_environment():
    import tomllib

    testpaths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    under_nbval = {p.removeprefix("notebooks/") for p in testpaths if p.startswith("notebooks/")}
    languages = {p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir() and list(p.glob("*.ipynb"))}
    assert "notebooks" not in testpaths, "nbval would run every language, and this test one of them again"
    assert under_nbval and not under_nbval & set(LANGS), (under_nbval, LANGS)
    assert under_nbval | set(LANGS) == languages


def test_runtime_pins_a_python_and_requirements_install_the_project_with_the_russian_pack():
    runtime = (BINDER / "runtime.txt").read_text().strip()
    assert runtime.startswith("python-3.") and runtime.count(".") == 1
    lines = [l.split("#")[0].strip() for l in (BINDER / "requirements.txt").read_text().splitlines()]
    lines = [l for l in lines if l]
    assert ".[lab]" in lines
    assert "jupyterlab-language-pack-ru-RU" in lines


def test_the_lessons_run_in_a_fresh_environment_made_only_from_binder(memory_path):
    want = (BINDER / "runtime.txt").read_text().strip().removeprefix("python-")
    if f"{sys.version_info[0]}.{sys.version_info[1]}" != want:
        pytest.skip(f"binder/runtime.txt asks for Python {want}; this is {sys.version.split()[0]}")
    venv = memory_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               JUPYTER_DATA_DIR=str(memory_path / "jupyter-data"),   # no user-level kernels
               JUPYTER_CONFIG_DIR=str(memory_path / "jupyter-config"),
               PIP_DISABLE_PIP_VERSION_CHECK="1",
               TMPDIR=str(memory_path / "tmp"))            # where lessons make their scratch folders
    (memory_path / "tmp").mkdir()
    # As repo2docker does: from the repository root, exactly the requirements file. Nothing is compiled
    # ahead (every module of JupyterLab and its dependencies, CPU the rest of the suite shares): the kernels
    # compile what they import.
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-compile", "-r", "binder/requirements.txt"],
                             cwd=ROOT, env=env, capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-3000:]
    shown = subprocess.run([str(python), "-m", "pip", "show", "jupyterlab-language-pack-ru-RU", "leaselab"],
                           env=env, capture_output=True, text=True)
    assert "Name: jupyterlab-language-pack-ru-RU" in shown.stdout and "Name: leaselab" in shown.stdout

    copies = []
    for lang in LANGS:
        folder = memory_path / "run" / lang
        folder.mkdir(parents=True)
        for nb in sorted((ROOT / "notebooks" / lang).glob("*.ipynb")):
            copies.append(Path(shutil.copy(nb, folder / nb.name)))
    # As in the repository, bench/ is two folders above a lesson: lesson 7 runs bench/audit.py from there.
    (memory_path / "bench").symlink_to(ROOT / "bench", target_is_directory=True)
    probe = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE)])
    probe.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(probe, memory_path / "run" / "probe.ipynb")

    def execute(notebook: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(python), str(RUN_NOTEBOOK), str(notebook), "--out", str(notebook.with_suffix(".out.ipynb"))],
                              cwd=memory_path / "run", env=env, capture_output=True, text=True, timeout=1200)

    # Last lesson first: the later lessons run longest (7 runs the audit, 6 a server), so the last to start is short.
    order = sorted(copies, reverse=True) + [memory_path / "run" / "probe.ipynb"]
    with ThreadPoolExecutor(LESSONS_AT_ONCE) as pool:
        runs = dict(zip(order, pool.map(execute, order)))
    failed = {nb.name: run.stderr[-3000:] for nb, run in runs.items() if run.returncode != 0}
    assert not failed, failed

    # The lessons leave nothing behind once their kernels have stopped: no scratch folder (lesson 6's
    # server lives in one, leaselab-pg-*), and no process naming this folder (a worker, or that
    # server's postmaster, whose -D is there).
    assert not [p.name for p in (memory_path / "tmp").glob("leaselab-*")], "a lesson left its scratch folder"
    # A lesson's janitor (lessons.cleanup_at_exit) outlives its kernel by 2 s on purpose; give it 10.
    wait_until(lambda: not _processes_mentioning(str(memory_path)), 10, interval=0.25,
               message="every process naming the folder to end (a lesson left a worker process running)")

    printed = nbformat.read(memory_path / "run" / "probe.out.ipynb", as_version=4).cells[0].outputs[0]["text"]
    prefix, module = printed.split()
    assert Path(prefix).resolve() == venv.resolve(), "the kernel did not run in the fresh environment"
    assert Path(module).resolve().is_relative_to(venv.resolve()), "leaselab was not imported from the install"

    for copy in copies:
        committed = nbformat.read(ROOT / "notebooks" / copy.parent.name / copy.name, as_version=4)
        ran = nbformat.read(copy.with_suffix(".out.ipynb"), as_version=4)
        assert _facts(ran) == _facts(committed), f"{copy.parent.name}/{copy.name} taught different facts"
