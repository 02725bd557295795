"""``./dev``: a mistyped command says so before anything is made, the usage lists every benchmark
in bench/, and ``./dev lab`` as root gives JupyterLab the ``--allow-root`` it would refuse to start
without.

Each test runs this checkout's ``dev`` from a copy of the few files it reads, so nothing it
creates (``.venv``, ``my-lessons/``) lands in the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import pytest

from tests.support.browser_support import descendants, free_port, kill_all, wait_for

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def checkout(tmp_path) -> Path:
    """``dev`` with what it reads: pyproject.toml, bench/'s scripts and one lesson per language."""
    clone = tmp_path / "leaselab"
    (clone / "bench").mkdir(parents=True)
    shutil.copy2(REPO / "dev", clone / "dev")
    shutil.copy2(REPO / "pyproject.toml", clone / "pyproject.toml")
    for script in (REPO / "bench").glob("*.py"):
        shutil.copy2(script, clone / "bench" / script.name)
    for lang in ("en", "ru"):
        (clone / "notebooks" / lang).mkdir(parents=True)
        lesson = sorted((REPO / "notebooks" / lang).glob("*.ipynb"))[0]
        shutil.copy2(lesson, clone / "notebooks" / lang / lesson.name)
    return clone


def dev(
    clone: Path, *argv: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(clone / "dev"), *argv],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def benchmarks() -> list[str]:
    """bench/'s scripts that run as programs, read here from the files, not from dev."""
    return sorted(
        p.stem for p in (REPO / "bench").glob("*.py") if 'if __name__ == "__main__"' in p.read_text(encoding="utf-8")
    )


def test_an_unknown_command_says_so_before_the_usage_exits_2_and_creates_nothing(checkout):
    done = dev(checkout, "nosuch")
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0] == "dev: unknown command 'nosuch'", done.stderr
    assert any(line.lstrip().startswith("./dev lab") for line in lines[1:]), done.stderr
    assert not (checkout / ".venv").exists(), "a mistyped command made a virtual environment"


def test_dev_alone_prints_the_usage_listing_every_benchmark_and_exits_2(checkout):
    done = dev(checkout)
    assert done.returncode == 2 and "unknown command" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "./dev bench NAME" in line]
    listed = line.split("(", 1)[1].split(")", 1)[0].split(", ")
    assert sorted(listed) == benchmarks() and len(listed) >= 6, line
    assert "progress" not in listed  # the benchmarks' helper, not a benchmark
    assert not (checkout / ".venv").exists()


def test_a_new_benchmark_is_listed_without_editing_dev(checkout):
    (checkout / "bench" / "newone.py").write_text('if __name__ == "__main__":\n    pass\n', encoding="utf-8")
    done = dev(checkout, "bench", "nosuch")
    assert done.returncode == 2 and "newone" in done.stderr and "throughput" in done.stderr, done.stderr
    assert not (checkout / ".venv").exists()


# -- ./dev lab as root ---------------------------------------------------------------------------


def ready_venv(clone: Path, dest: Path) -> Path:
    """A virtual environment that sees this interpreter's packages (JupyterLab) and that ``dev``
    takes as already installed for this clone, so ``./dev lab`` starts at once."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120)
    purelib = subprocess.run(
        [str(dest / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "shared-with-test-runner.pth").write_text("\n".join(sorted(ours)) + "\n", encoding="utf-8")
    old = (clone / "pyproject.toml").stat().st_mtime - 60
    os.utime(clone / "pyproject.toml", (old, old))
    (dest / ".leaselab-dev-lab").write_text(f"{clone}\n", encoding="utf-8")
    return dest


def lab_env(tmp_path: Path, venv: Path, port: int) -> dict[str, str]:
    """Jupyter in private folders on ``port``, without a token or a browser, and with no
    allow_root of its own: only ``dev`` may add that."""
    from jupyterlab.commands import get_app_dir

    home = tmp_path / "jupyter"
    (home / "config").mkdir(parents=True)
    (home / "config" / "jupyter_server_config.json").write_text(
        json.dumps(
            {
                "ServerApp": {
                    "ip": "127.0.0.1",
                    "port": port,
                    "port_retries": 0,
                    "open_browser": False,
                    "token": "",
                    "password": "",
                },
                "IdentityProvider": {"token": ""},
            }
        ),
        encoding="utf-8",
    )
    app = home / "app"  # this interpreter's built JupyterLab, with settings of its own for dev to write
    app.mkdir()
    for part in Path(get_app_dir()).iterdir():
        if part.name != "settings":
            (app / part.name).symlink_to(part)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        {
            "VIRTUAL_ENV": str(venv),
            "JUPYTER_CONFIG_DIR": str(home / "config"),
            "JUPYTER_DATA_DIR": str(home / "data"),
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
            "JUPYTER_PATH": str(Path(sys.prefix, "share", "jupyter")),
            "IPYTHONDIR": str(home / "ipython"),
            "JUPYTERLAB_DIR": str(app),
        }
    )
    return env


@pytest.fixture
def lab_setup(checkout, tmp_path):
    pytest.importorskip("jupyterlab")
    venv = ready_venv(checkout, tmp_path / "venv")
    return checkout, lab_env(tmp_path, venv, free_port())


ROOT_LINE = "dev: running as root, so JupyterLab gets --allow-root"


def test_dev_lab_says_it_adds_allow_root_only_as_root_and_only_when_not_given(lab_setup):
    clone, env = lab_setup
    done = dev(clone, "lab", "--version", env=env)
    assert done.returncode == 0 and done.stdout.strip()[:1].isdigit(), done.stdout + done.stderr
    assert (ROOT_LINE in done.stderr) == (os.geteuid() == 0), done.stderr
    given = dev(clone, "lab", "--allow-root", "--version", env=env)
    assert given.returncode == 0 and ROOT_LINE not in given.stderr, given.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="JupyterLab refuses only root: run as root (a container) to test it")
def test_dev_lab_as_root_serves_the_lessons_instead_of_refusing_root(lab_setup):
    clone, env = lab_setup
    port = json.loads(Path(env["JUPYTER_CONFIG_DIR"], "jupyter_server_config.json").read_text())["ServerApp"]["port"]
    base = f"http://127.0.0.1:{port}"
    log = open(clone.parent / "lab.log", "wb")
    proc = subprocess.Popen(
        [str(clone / "dev"), "lab"],
        cwd=clone,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    seen: set[int] = set()

    def answering() -> bool:
        seen.update(descendants(proc.pid))
        if proc.poll() is not None:
            pytest.fail(f"./dev lab exited {proc.returncode}:\n{(clone.parent / 'lab.log').read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(base + "/api/status", timeout=10) as resp:
                return resp.status == 200
        except OSError:
            return False

    try:
        wait_for(answering, 240, f"./dev lab as root to serve on port {port}", interval=0.5)
        assert ROOT_LINE in (clone.parent / "lab.log").read_text()
    finally:
        seen.update(descendants(proc.pid))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()
        kill_all(seen)
