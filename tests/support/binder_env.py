"""The environment mybinder.org would build, made once per test run and shared by all its processes.

repo2docker runs ``pip install -r binder/requirements.txt`` from the repository root; ``ensure`` does
the same into a fresh virtual environment (in memory when there is room: ``servers.in_memory``), once
for the whole run. The first process that needs it builds it under a lock; the others (pytest-xdist's
workers) wait for it, then use it. nbval runs every lesson in a kernel of this environment
(``KERNEL``, see ``notebooks/conftest.py``), so each lesson's code is proved on what Binder installs
and on nothing the tests installed beside it; ``tests/test_binder.py`` checks the environment itself.

The run is named by its first process (``RUN_OWNER``, set by the root ``conftest.py``), which
removes the environment when the run ends (``remove_own``); one left by a run that was killed is
removed by the next run that builds one.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

from tests.support.polling import pid_gone
from tests.support.servers import in_memory

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = "binder/requirements.txt"  # as repo2docker reads it: from the repository root
KERNEL = "leaselab-binder"  # the kernel nbval starts (addopts in pyproject.toml)
RUN_OWNER = "LEASELAB_TEST_RUN_OWNER"  # the pid of the run's first process, inherited by its workers
PREFIX = "leaselab-binder-"
INSTALL_TIMEOUT = 900
# What the lessons' kernels import: ipykernel itself, leaselab's lesson and lab layers, and what the
# lessons use beside them (apsw: lesson 5's disk; psycopg: lesson 6's server; huey, persist-queue: lesson 8).
LESSON_IMPORTS = (
    "import ipykernel.kernelapp, leaselab.lessons, leaselab.lab, leaselab.harness.powercut, "
    "ipywidgets, pandas, matplotlib.pyplot, psycopg, apsw, huey, persistqueue"
)


class BinderEnvFailed(RuntimeError):
    """binder/requirements.txt did not install: pip's own words, for every process that waited on it."""


def home() -> Path:
    """This run's folder: the environment (``venv``), its kernel's spec (``jupyter``), the lessons' scratch."""
    owner = os.environ.get(RUN_OWNER) or str(os.getpid())
    return (in_memory() or Path(tempfile.gettempdir())) / f"{PREFIX}{owner}"


def python(folder: Path) -> Path:
    return folder / "venv" / "bin" / "python"


def clean_environment(folder: Path) -> dict[str, str]:
    """What a process of the fresh environment sees: its own bin first, no path into this checkout
    (PYTHONPATH), and Jupyter's user folders of its own, so no kernel the machine has is found."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "JUPYTER_PATH")}
    env.update(
        PATH=f"{folder / 'venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(folder / "venv"),
        JUPYTER_DATA_DIR=str(folder / "jupyter-data"),
        JUPYTER_CONFIG_DIR=str(folder / "jupyter-config"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return env


def kernel_lookup(folder: Path) -> dict[str, str]:
    """The variable under which Jupyter finds ``KERNEL``'s spec (kept ahead of the others it searches)."""
    others = os.environ.get("JUPYTER_PATH")
    return {"JUPYTER_PATH": str(folder / "jupyter") + (os.pathsep + others if others else "")}


def ensure() -> Path:
    """This run's environment, built now if no process of the run has built it; its folder.

    Raises ``BinderEnvFailed`` with pip's output if the install failed, in this process or in the one
    that built it (the install is not tried again in the same run)."""
    folder = home()
    if (folder / "ready").exists():
        return folder
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its holder dies
        if (folder / "ready").exists():
            return folder
        if (folder / "failed").exists():
            raise BinderEnvFailed((folder / "failed").read_text(encoding="utf-8"))
        _sweep(folder.parent)
        shutil.rmtree(folder, ignore_errors=True)  # half made by a process killed while it built
        _build(folder)
    return folder


def _build(folder: Path) -> None:
    folder.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True, timeout=300)
    # Nothing is compiled ahead (every module of JupyterLab and its dependencies, CPU the rest of the
    # suite shares): the kernels compile what they import.
    install = subprocess.run(
        [str(python(folder)), "-m", "pip", "install", "-q", "--no-compile", "-r", REQUIREMENTS],
        cwd=ROOT,
        env=clean_environment(folder),
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
    )
    if install.returncode != 0:
        _failed(folder, f"pip install -r {REQUIREMENTS} exited {install.returncode}:\n{install.stderr[-3000:]}")
    # What a lesson's kernel imports, once, in one process: the lessons' packages are there (else
    # every lesson would fail on its first cell), and the kernels that start side by side find them
    # compiled instead of each compiling them again.
    warm = run_python(folder, "-c", LESSON_IMPORTS)
    if warm.returncode != 0:
        _failed(folder, f"{REQUIREMENTS} installs no {LESSON_IMPORTS!r}:\n{warm.stderr[-3000:]}")
    spec = folder / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    env = clean_environment(folder)
    # The kernel inherits the test process's variables, then these: "" unsets PYTHONPATH for it.
    kernel = {
        "argv": [str(python(folder)), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (binder/requirements.txt)",
        "language": "python",
        "env": {"PATH": env["PATH"], "VIRTUAL_ENV": env["VIRTUAL_ENV"], "PYTHONPATH": ""},
    }
    (spec / "kernel.json").write_text(json.dumps(kernel, indent=1), encoding="utf-8")
    (folder / "ready").write_text("", encoding="utf-8")


def _sweep(parent: Path) -> None:
    """Remove what runs that were killed left: their owner's pid is in the name."""
    for left in parent.glob(f"{PREFIX}*"):
        owner = left.name.removeprefix(PREFIX).removesuffix(".lock")
        if owner.isdigit() and pid_gone(int(owner)):
            if left.is_dir():
                shutil.rmtree(left, ignore_errors=True)
            else:
                left.unlink(missing_ok=True)


def _failed(folder: Path, said: str) -> NoReturn:
    """Say why the build failed, to this process and to every other one of the run that waits on it."""
    (folder / "failed").write_text(said, encoding="utf-8")
    raise BinderEnvFailed(said)


def remove_own() -> None:
    """At the end of a run, in its first process: remove the run's environment, if one was made."""
    if os.environ.get(RUN_OWNER) != str(os.getpid()):
        return
    folder = home()
    shutil.rmtree(folder, ignore_errors=True)
    Path(f"{folder}.lock").unlink(missing_ok=True)


def run_python(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the environment's Python with ``args``, as a process of that environment (``clean_environment``)."""
    return subprocess.run(
        [str(python(folder)), *args], env=clean_environment(folder), capture_output=True, text=True, timeout=300
    )
