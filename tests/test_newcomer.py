"""The newcomer's first command, run as the README writes it, on a fresh clone: it must serve the lessons.

The README's "open the lessons" command is read from the README itself, so the
test follows the README when it changes. It runs in a clone of the committed
tree (what a newcomer gets, not this working copy) inside a throw-away virtual
environment; only Jupyter's configuration is pointed elsewhere, through the
environment, so the command runs verbatim yet listens on a free local port with
no token and opens no browser.

The install step of the command really runs ``pip install -e``: pip builds
leaselab from the clone, which needs ``setuptools`` from the package index when
it is not cached. The packages leaselab depends on are shared from the running
interpreter, so nothing big is downloaded.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from browser_support import descendants, free_port, kill_all, wait_for

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"


def readme_command(what: str) -> str:
    """The command in the README table row whose first cell starts with ``what``."""
    text = README.read_text(encoding="utf-8")
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].lower().startswith(what):
            code = re.findall(r"`([^`]+)`", cells[1])
            if code:
                return code[0]
    pytest.fail(f"README.md has no table row starting {what!r} with a `command` in it")


def fresh_clone(dest: Path) -> Path:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of leaselab to make a fresh clone")
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(dest)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    return dest


def sharing_venv(dest: Path) -> Path:
    """A virtual environment that sees this interpreter's packages (jupyterlab, pip) but not its leaselab."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120)
    python = dest / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # A plain path line: the .pth files over there (this checkout's editable leaselab) are not run.
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "shared-with-test-runner.pth").write_text("\n".join(sorted(ours)) + "\n", encoding="utf-8")
    return dest


def jupyter_home(home: Path, port: int) -> dict[str, str]:
    """Environment that gives Jupyter a private home: this port, no token, no browser, nothing fetched."""
    config = home / "config"
    config.mkdir(parents=True)
    server = {
        "ServerApp": {"ip": "127.0.0.1", "port": port, "port_retries": 0, "open_browser": False,
                      "token": "", "password": "", "allow_root": True},
        "IdentityProvider": {"token": ""},
        "LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
                   "extension_manager": "readonly"},
    }
    (config / "jupyter_server_config.json").write_text(json.dumps(server), encoding="utf-8")
    return {
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        # Where this interpreter keeps JupyterLab's extensions (ipywidgets): the throw-away venv has none.
        "JUPYTER_PATH": str(Path(sys.prefix, "share", "jupyter")),
        "IPYTHONDIR": str(home / "ipython"),
    }


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def test_the_readme_command_to_open_the_lessons_serves_jupyterlab_with_every_lesson(tmp_path):
    command = readme_command("open the lessons")
    clone = fresh_clone(tmp_path / "leaselab")
    lessons = sorted(p.relative_to(clone / "notebooks").as_posix()
                     for p in (clone / "notebooks").glob("*/*.ipynb"))
    assert any(p.startswith("en/") for p in lessons), f"no English lessons committed under notebooks/en: {lessons}"
    assert any(p.startswith("ru/") for p in lessons), f"no Russian lessons committed under notebooks/ru: {lessons}"

    venv = sharing_venv(tmp_path / "venv")
    port = free_port()
    env = {**os.environ, **jupyter_home(tmp_path / "jupyter", port), "VIRTUAL_ENV": str(venv),
           "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    log_path = tmp_path / "lab.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(shlex.split(command), cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    seen: set[int] = set()

    def log_text() -> str:
        return log_path.read_text(errors="replace")[-4000:]

    def answering():
        seen.update(descendants(proc.pid))
        if proc.poll() is not None:
            pytest.fail(f"`{command}` exited with {proc.returncode} before serving:\n{log_text()}")
        try:
            return fetch(base + "/api/status")[0] == 200
        except OSError:
            return False

    try:
        # The first run installs leaselab into the venv before JupyterLab starts.
        wait_for(answering, 240, f"`{command}` to serve JupyterLab on port {port}", interval=0.5)

        status, page = fetch(base + "/lab")
        assert status == 200 and "JupyterLab" in page, f"/lab answered {status}:\n{page[:500]}"
        status, page = fetch(base + "/lab/tree/" + lessons[0])
        assert status == 200, f"/lab/tree/{lessons[0]} answered {status}"

        listed = set()
        for folder in ("en", "ru"):
            status, body = fetch(f"{base}/api/contents/{folder}")
            assert status == 200, f"the server does not list notebooks/{folder}: {status} {body[:300]}"
            listed |= {item["path"] for item in json.loads(body)["content"] if item["type"] == "notebook"}
        assert set(lessons) <= listed, f"lessons not served: {sorted(set(lessons) - listed)}"

        # The kernel JupyterLab starts runs this venv's Python, which must import leaselab from the clone.
        python = venv / "bin" / "python"
        where = subprocess.run([str(python), "-c", "import leaselab; print(leaselab.__file__)"], cwd=venv,
                               capture_output=True, text=True, env=env, timeout=60)
        assert where.returncode == 0, where.stderr
        assert Path(where.stdout.strip()).resolve().is_relative_to(clone.resolve()), where.stdout
    finally:
        seen.update(descendants(proc.pid))
        if proc.poll() is None:
            try:
                urllib.request.urlopen(urllib.request.Request(base + "/api/shutdown", method="POST", data=b""),
                                       timeout=10).close()
                proc.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        kill_all(seen)
