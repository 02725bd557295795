"""JupyterLab in a sandbox, a notebook driven through it, and the bookkeeping that proves nothing outlives a test.

``LabServer`` starts ``jupyter lab`` on 127.0.0.1 with throw-away config, data,
runtime, settings and temp folders (no token, no browser, no news, update checks
or PyPI extension manager), and stops it so that the server, its kernels and every
worker those kernels spawned are gone afterwards, also when the test failed half-way.
``NotebookPage`` opens a notebook in a Playwright page, runs it the way a reader
would, reads HTML tables and saves screenshots. ``leaselab_workers`` finds live
worker processes in /proc.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from leaselab import lessons

T = TypeVar("T")

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
# Headless, and quiet on the network: the only address the browser talks to is the local server.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--lang=en-US",
]

# Settings a reader would otherwise meet as pop-ups, or that would make the lab reach the internet.
QUIET_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


def chromium_path() -> str | None:
    """The system Chromium to drive, or None. ``$LEASELAB_CHROMIUM``, when set, is the only candidate."""
    chosen = os.environ.get("LEASELAB_CHROMIUM")
    for candidate in [chosen] if chosen else CHROMIUM_CANDIDATES:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    """Call ``condition`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    try:
        return lessons.wait_until(condition, timeout, interval, what=what)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


# -- processes ---------------------------------------------------------------


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:  # the process ended while we looked, or is not ours to read
        return b""


def cmdline(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


def _ppid(pid: int) -> int | None:
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    # The command name in parentheses may hold spaces; the fields after the last ')' are fixed.
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 else None


def process_state(pid: int) -> str | None:
    """The one-letter state in /proc/PID/stat ('R', 'S', 'T' = stopped, 'Z' = zombie), or None when gone."""
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    fields = stat.rpartition(")")[2].split()
    return fields[0] if fields else None


def _alive(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    fields = stat.rpartition(")")[2].split()
    return bool(fields) and fields[0] != "Z"  # a zombie has exited; only its parent's wait is missing


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` in the process tree (a kernel runs in its own session)."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        parent = _ppid(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return {pid for pid in found if _alive(pid)}


def leaselab_workers(under: str | os.PathLike) -> list[int]:
    """Live ``leaselab worker`` processes that belong to a test: their command line or folder is under ``under``."""
    under = os.path.realpath(under)
    found = []
    for pid in _pids():
        line = cmdline(pid)
        if "leaselab" not in line or " worker" not in line or not _alive(pid):
            continue
        try:
            cwd = os.path.realpath(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if under in line or cwd == under or cwd.startswith(under + os.sep):
            found.append(pid)
    return found


def kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# -- the server --------------------------------------------------------------


class LabServer:
    """``jupyter lab`` serving ``root`` on a free local port, with all its state under ``home``.

    ``locale`` is JupyterLab's interface language (``"ru_RU"`` needs the Russian
    language pack). ``extra_args`` go to ``jupyter lab`` after ours.
    """

    def __init__(self, root: Path, home: Path, locale: str = "en", extra_args: Iterable[str] = ()):
        self.root, self.home = Path(root), Path(home)
        self.locale = locale
        self.port = free_port()
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.home / "jupyter.log"
        self._known: set[int] = set()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(self.home / "config"),
            JUPYTER_DATA_DIR=str(self.home / "data"),
            JUPYTER_RUNTIME_DIR=str(self.home / "runtime"),
            IPYTHONDIR=str(self.home / "ipython"),
            # Lessons make scratch folders with tempfile: keep them, and their workers' files, in the test's.
            TMPDIR=str(self.home / "tmp"),
            JUPYTER_PLATFORM_DIRS="1",
            PYTHONUNBUFFERED="1",
        )
        env.pop("JUPYTER_PATH", None)
        return env

    def write_settings(self) -> None:
        settings = dict(QUIET_SETTINGS)
        settings["@jupyterlab/translation-extension/plugin"] = {"locale": self.locale}
        user = self.home / "config" / "lab" / "user-settings"
        for plugin, values in settings.items():
            path = user / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values), encoding="utf-8")

    def command(self) -> list[str]:
        args = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--port-retries=0",
            "--ServerApp.token=",
            "--ServerApp.password=",
            "--ServerApp.disable_check_xsrf=True",
            "--ServerApp.open_browser=False",
            f"--ServerApp.root_dir={self.root}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",  # the default one searches PyPI
            f"--LabApp.workspaces_dir={self.home / 'workspaces'}",
            "--MappingKernelManager.cull_idle_timeout=0",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--allow-root")
        return args + self.extra_args

    def start(self, timeout: float = 90) -> LabServer:
        for sub in ("config", "data", "runtime", "ipython", "workspaces", "tmp"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        self.write_settings()
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.root,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()
        wait_for(self._ready, timeout, f"jupyter lab to answer on {self.base}\n{self.log_tail()}", 0.3)
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
        try:
            return self.get_json("/api/status") is not None
        except (OSError, ValueError):
            return False

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def get(self, path: str, timeout: float = 10) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=timeout) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def get_json(self, path: str):
        status, body = self.get(path)
        return json.loads(body) if status == 200 else None

    def remember_children(self) -> set[int]:
        """Note the processes under the server now (kernels, workers), so ``stop`` can reach them later."""
        if self.proc is not None:
            self._known |= descendants(self.proc.pid)
        return set(self._known)

    def stop(self, timeout: float = 30, kill_leftovers: bool = True) -> None:
        """Shut the server and its kernels down politely, then kill whatever is left of the server.

        With ``kill_leftovers`` every process ever seen under it (kernels, workers) is then killed
        too; a test that checks JupyterLab's own clean-up passes False first, and True in teardown.
        """
        if self.proc is not None:
            self.remember_children()
            if self.proc.poll() is None:
                try:
                    req = urllib.request.Request(self.base + "/api/shutdown", method="POST", data=b"")
                    urllib.request.urlopen(req, timeout=10).close()
                except OSError:
                    pass
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if self.proc.poll() is not None:
                    break
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            self._known.discard(self.proc.pid)
            self.proc = None
        if kill_leftovers:
            # Kernels and workers run in sessions of their own, so the group kill above misses them.
            kill_all(pid for pid in self._known if _alive(pid))


def copy_notebooks(src: Path, dst: Path) -> Path:
    """A copy of the repo's notebooks without checkpoints or databases, so a test never writes into the repo."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "*.db", "*.db-*", "__pycache__"))
    return dst


# -- the page ----------------------------------------------------------------

# Is the notebook's kernel started and idle? Works in any interface language.
_KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && !w.sessionContext.pendingInput;
}"""

# Every code cell up to index ``last`` has a reply (JupyterLab clears the count when a cell starts and
# sets it from the reply) and the kernel is idle; or a cell raised, after which the rest never run.
_RAN_THROUGH = """last => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  if (!k || !w.content) return false;
  if (w.node.querySelector('.jp-RenderedText[data-mime-type="application/vnd.jupyter.error"]')) return true;
  return k.status === 'idle' && w.content.widgets.slice(0, last + 1)
    .every(c => c.model.type !== 'code' || c.model.executionCount !== null);
}"""

# Clear every output, select the first code cell whose source holds ``text``, run all above it, then it.
_RUN_THROUGH = """async text => {
  const app = window.jupyterapp, w = app.shell.currentWidget, cells = w.content.widgets;
  const index = cells.findIndex(c => c.model.type === 'code' && c.model.sharedModel.getSource().includes(text));
  if (index < 0) return -1;
  await app.commands.execute('notebook:clear-all-cell-outputs');
  w.content.activeCellIndex = index;
  if (index > 0) await app.commands.execute('notebook:run-all-above');
  await app.commands.execute('notebook:run-cell');
  return index;
}"""

_ROWS = """el => Array.from(el.querySelectorAll('tr')).map(tr =>
  Array.from(tr.querySelectorAll('th,td')).map(c => c.innerText.trim()))"""


class NotebookPage:
    """One notebook open in JupyterLab in a Playwright page, driven the way a reader would."""

    def __init__(self, page, server: LabServer, shots: Path, prefix: str, focus: str | None = None):
        self.page, self.server, self.focus = page, server, focus
        self.shots, self.prefix = Path(shots), prefix
        self.count = 0
        self.console_errors: list[str] = []
        page.on("pageerror", lambda exc: self.console_errors.append(str(exc)))

    def open(self, path: str, timeout: float = 180) -> None:
        self.page.goto(f"{self.server.base}/lab/tree/{path}?reset", wait_until="domcontentloaded")
        self.page.wait_for_function(_KERNEL_IDLE, timeout=timeout * 1000, polling=500)

    def run_through(self, text: str, timeout: float = 300) -> int:
        """Run the notebook from the top down to the first code cell containing ``text``, as a reader would.

        Through the app's commands, so the interface language does not matter. Stored outputs are
        cleared first: their execution counts would otherwise look like cells that already ran.
        Cells below stay unrun (a lesson's last cell may close what the reader is meant to use).
        """
        index = self.page.evaluate(_RUN_THROUGH, text)
        assert index >= 0, f"no code cell containing {text!r} in the notebook"
        self.page.wait_for_function(_RAN_THROUGH, arg=index, timeout=timeout * 1000, polling=500)
        errors = self.tracebacks()
        if errors:
            self.screenshot("traceback")
            raise AssertionError("a cell raised:\n" + "\n---\n".join(errors))
        return index

    def tracebacks(self) -> list[str]:
        return self.page.locator('.jp-RenderedText[data-mime-type="application/vnd.jupyter.error"]').all_inner_texts()

    def rows(self, css: str) -> list[list[str]]:
        """The rows of the first HTML table inside the element with class ``css``, as cell texts."""
        return self.page.locator(css).first.evaluate(_ROWS)

    def wait_rows(self, css: str, test: Callable[[list[list[str]]], object], what: str, timeout: float = 60):
        """Poll the table until ``test(rows)`` is truthy; the failure shows the last rows seen."""
        seen: list = []

        def check():
            seen[:] = self.rows(css)
            return test(seen)

        try:
            return wait_for(check, timeout, what, interval=0.3)
        except AssertionError as exc:
            self.screenshot("failed")
            raise AssertionError(f"{exc}; the table showed {seen}") from None

    def screenshot(self, step: str) -> Path:
        """Save ``<prefix>-NN-step.png``: the ``focus`` element (the dashboard) when shown, else the window."""
        self.count += 1
        path = self.shots / f"{self.prefix}-{self.count:02d}-{step}.png"
        self.shots.mkdir(parents=True, exist_ok=True)
        target = self.page.locator(self.focus).first if self.focus else None
        if target is not None and target.count() and target.is_visible():
            target.screenshot(path=str(path))
        else:
            self.page.screenshot(path=str(path))
        return path

    def scroll_to(self, css: str) -> None:
        self.page.locator(css).first.scroll_into_view_if_needed()
