"""A handler in the user's own file, run by the installed ``leaselab`` command from the user's folder.

``python -m leaselab`` puts the current folder on ``sys.path`` by itself; a console script puts
its own folder (the environment's ``bin/``) there instead. So these tests run the real entry
point pip writes for this checkout, in a virtual environment of their own, from another folder,
with no ``PYTHONPATH``: what a user gets after ``pip install -e .``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from leaselab import Queue

REPO = Path(__file__).resolve().parent.parent


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


@pytest.fixture(scope="module")
def leaselab_command(tmp_path_factory) -> Path:
    """The ``leaselab`` console script that ``pip install -e`` writes for this checkout."""
    if importlib.util.find_spec("pip") is None:
        pytest.skip("needs pip in the test's interpreter to install the console script")
    venv = tmp_path_factory.mktemp("console-script") / "venv"
    # The system's packages (setuptools, if it has one) are visible, this interpreter's leaselab is not.
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    env = _clean_env()
    # Without a setuptools that can build an editable wheel at hand, pip fetches one (build isolation).
    offline = (
        subprocess.run(
            [
                str(python),
                "-c",
                "import setuptools, importlib.util as u, sys; "
                "sys.exit(not (u.find_spec('wheel') or u.find_spec('setuptools.command.bdist_wheel')))",
            ],
            env=env,
            capture_output=True,
            timeout=60,
        ).returncode
        == 0
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "-q",
            *(["--no-build-isolation"] if offline else []),
            "-e",
            str(REPO),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"pip install -e {REPO} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    script = venv / "bin" / "leaselab"
    assert script.is_file(), sorted(p.name for p in (venv / "bin").iterdir())
    where = subprocess.run(
        [str(python), "-c", "import leaselab; print(leaselab.__file__)"],
        cwd=venv,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert Path(where.stdout.strip()).resolve().is_relative_to(REPO), where.stdout + where.stderr
    return script


@pytest.fixture
def project(tmp_path) -> Path:
    """The user's own folder: a handler file, and a neighbour it imports only when a job runs."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "myh.py").write_text(
        "def work(job):\n    import helpers\n    return helpers.double(job.payload)\n", encoding="utf-8"
    )
    (folder / "helpers.py").write_text("def double(x):\n    return {'doubled': x * 2}\n", encoding="utf-8")
    (folder / "pkg").mkdir()
    (folder / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (folder / "pkg" / "jobs.py").write_text("def work(job):\n    return 1\n", encoding="utf-8")
    return folder


def leaselab(script: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(script), *argv],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_the_installed_command_runs_a_handler_from_a_file_in_the_folder_it_is_run_from(leaselab_command, project):
    enq = leaselab(leaselab_command, project, "enqueue", "21", "--db", "a.db")
    assert enq.returncode == 0, enq.stderr
    work = leaselab(
        leaselab_command,
        project,
        "worker",
        "--db",
        "a.db",
        "--handler",
        "myh:work",
        "--lease",
        "10",
        "--exit-when-idle",
    )
    assert work.returncode == 0, work.stdout + work.stderr
    assert "completed 1" in work.stdout and "failed 0" in work.stdout, work.stdout
    with Queue(project / "a.db") as q:
        (job,) = q.jobs()
        assert job.result == {"doubled": 42}  # its neighbour, imported while the job ran, was found too


def test_a_handler_module_that_is_nowhere_is_one_line_naming_the_folders_searched(leaselab_command, project):
    leaselab(leaselab_command, project, "enqueue", "1", "--db", "a.db")
    bad = leaselab(leaselab_command, project, "worker", "--db", "a.db", "--handler", "nosuch:work", "--exit-when-idle")
    assert bad.returncode == 2 and bad.stdout == "", bad
    (line,) = bad.stderr.splitlines()
    assert line.startswith(
        "leaselab worker: error: cannot import handler module 'nosuch': no module named 'nosuch' in "
    )
    searched = line.split(" in ", 1)[1].split(", ")
    assert searched[0] == str(project), searched  # the current folder first, as for python -m
    assert str(leaselab_command.parent) in searched  # where the console script itself lives


@pytest.mark.parametrize(
    "given, dotted",
    [
        ("./myh.py:work", "myh:work"),
        ("myh.py:work", "myh:work"),
        ("pkg/jobs.py:work", "pkg.jobs:work"),
        ("{project}/pkg/jobs.py:work", "pkg.jobs:work"),
    ],
)
def test_a_handler_given_as_a_file_path_is_refused_with_its_dotted_name(leaselab_command, project, given, dotted):
    leaselab(leaselab_command, project, "enqueue", "1", "--db", "a.db")
    given = given.format(project=project)
    bad = leaselab(leaselab_command, project, "worker", "--db", "a.db", "--handler", given, "--exit-when-idle")
    assert bad.returncode == 2 and bad.stdout == "", bad
    (line,) = bad.stderr.splitlines()
    assert given.split(":")[0] in line and line.endswith(f"name its module instead: {dotted}"), line
    with Queue(project / "a.db") as q:
        assert q.stats()["pending"] == 1  # refused before a job was claimed


def test_a_lesson_handler_given_by_its_path_in_the_clone_gets_the_dotted_name(leaselab_command, tmp_path):
    bad = leaselab(
        leaselab_command,
        REPO,
        "worker",
        "--db",
        str(tmp_path / "a.db"),
        "--handler",
        "leaselab/harness/demo.py:task",
        "--exit-when-idle",
    )
    assert bad.returncode == 2 and bad.stderr.strip().endswith("name its module instead: leaselab.harness.demo:task"), (
        bad.stderr
    )
