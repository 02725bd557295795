"""The README's commands, run as the README writes them, on a fresh clone: they serve the lessons, run
leaselab and the benchmarks, and reading a lesson leaves ``git status`` clean.

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

import http.cookiejar
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.browser_support import descendants, free_port, kill_all, wait_for
from tests.support.procs import RUN_NOTEBOOK

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
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(dest)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=120,
    )
    return dest


def sharing_venv(dest: Path) -> Path:
    """A virtual environment that sees this interpreter's packages (jupyterlab, pip) but not its leaselab."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120)
    python = dest / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # A plain path line: the .pth files over there (this checkout's editable leaselab) are not run.
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "shared-with-test-runner.pth").write_text("\n".join(sorted(ours)) + "\n", encoding="utf-8")
    return dest


def private_app_dir(dest: Path) -> Path:
    """JupyterLab's application folder with this interpreter's built app, but settings of its own.

    ``./dev lab`` writes its quiet defaults into the application folder's settings; here that
    must not be the test runner's.
    """
    from jupyterlab.commands import get_app_dir

    dest.mkdir(parents=True)
    for part in Path(get_app_dir()).iterdir():
        if part.name != "settings":
            (dest / part.name).symlink_to(part)
    return dest


def jupyter_home(home: Path, port: int) -> dict[str, str]:
    """Environment that gives Jupyter a private home: this port, no token, no browser, nothing fetched."""
    config = home / "config"
    config.mkdir(parents=True)
    server = {
        "ServerApp": {
            "ip": "127.0.0.1",
            "port": port,
            "port_retries": 0,
            "open_browser": False,
            "token": "",
            "password": "",
            "allow_root": True,
        },
        "IdentityProvider": {"token": ""},
        "LabApp": {
            "news_url": None,
            "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
            "extension_manager": "readonly",
        },
    }
    (config / "jupyter_server_config.json").write_text(json.dumps(server), encoding="utf-8")
    return {
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        # Where this interpreter keeps JupyterLab's extensions (ipywidgets): the throw-away venv has none.
        "JUPYTER_PATH": str(Path(sys.prefix, "share", "jupyter")),
        "IPYTHONDIR": str(home / "ipython"),
        "JUPYTERLAB_DIR": str(private_app_dir(home / "app")),
    }


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def git_status(clone: Path) -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=clone,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout


class Api:
    """JupyterLab's REST API as the browser uses it: the _xsrf cookie from a page load goes back as a header."""

    def __init__(self, base: str):
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.opener.open(base + "/lab", timeout=30).close()

    def call(self, method: str, path: str, body: object | None = None) -> tuple[int, object]:
        xsrf = next((c.value for c in self.jar if c.name == "_xsrf"), "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "X-XSRFToken": xsrf},
        )
        try:
            with self.opener.open(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")


def run_and_save(api: Api, python: Path, root: Path, lesson: str, env: dict[str, str], scratch: Path) -> dict:
    """Open ``lesson`` from the server, Run All in a kernel of the clone's Python in its folder, add a note, Save."""
    status, model = api.call("GET", f"/api/contents/{lesson}?content=1")
    assert status == 200, f"GET {lesson}: {status} {model}"
    path = scratch / "lesson.ipynb"
    path.write_text(json.dumps(model["content"]), encoding="utf-8")
    done = subprocess.run(
        [str(python), str(RUN_NOTEBOOK), str(path), "--in", str(root / Path(lesson).parent)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"running {lesson} failed:\n{done.stderr[-3000:]}"
    content = json.loads(path.read_text(encoding="utf-8"))
    content["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "My notes: the lease came back."})
    status, saved = api.call(
        "PUT", f"/api/contents/{lesson}", {"type": "notebook", "format": "json", "content": content}
    )
    assert status == 200, f"saving {lesson}: {status} {saved}"
    return content


def test_the_readme_command_to_open_the_lessons_serves_jupyterlab_with_every_lesson(tmp_path):
    command = readme_command("open the lessons")
    clone = fresh_clone(tmp_path / "leaselab")
    lessons = sorted(p.relative_to(clone / "notebooks").as_posix() for p in (clone / "notebooks").glob("*/*.ipynb"))
    assert any(p.startswith("en/") for p in lessons), f"no English lessons committed under notebooks/en: {lessons}"
    assert any(p.startswith("ru/") for p in lessons), f"no Russian lessons committed under notebooks/ru: {lessons}"

    venv = sharing_venv(tmp_path / "venv")
    port = free_port()
    env = {
        **os.environ,
        **jupyter_home(tmp_path / "jupyter", port),
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env.pop("PYTHONPATH", None)
    env["TMPDIR"] = str(tmp_path / "tmp")  # the lessons' scratch folders and their workers' files
    (tmp_path / "tmp").mkdir()
    log_path = tmp_path / "lab.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            shlex.split(command),
            cwd=clone,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
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
        where = subprocess.run(
            [str(python), "-c", "import leaselab; print(leaselab.__file__)"],
            cwd=venv,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert where.returncode == 0, where.stderr
        assert Path(where.stdout.strip()).resolve().is_relative_to(clone.resolve()), where.stdout

        # No news or update pop-up over the lessons: the lab's own settings say so.
        status, body = fetch(base + "/lab/api/settings/@jupyterlab/apputils-extension:notification")
        assert status == 200, body[:300]
        plugin = json.loads(body)  # overrides arrive as the schema's defaults; the browser merges the user's
        effective = {**{k: v.get("default") for k, v in plugin["schema"]["properties"].items()}, **plugin["settings"]}
        assert (effective["fetchNews"], effective["checkForUpdates"]) == ("false", False), effective

        # A reader opens lesson 0, runs it and saves it: the repository stays as it was.
        assert git_status(clone) == "", "the clone was not clean before the lesson ran"
        runtime = [json.loads(p.read_text()) for p in (tmp_path / "jupyter" / "runtime").glob("jpserver-*.json")]
        root = Path(runtime[0]["root_dir"])
        lesson = "en/00-introduction.ipynb"
        assert lesson in listed
        saved = run_and_save(Api(base), python, root, lesson, env, tmp_path)
        on_disk = json.loads((root / lesson).read_text(encoding="utf-8"))
        assert "".join(on_disk["cells"][-1]["source"]) == saved["cells"][-1]["source"], "the save missed the disk"
        assert any(c.get("outputs") for c in on_disk["cells"]), "the saved lesson has no outputs: it did not run"
        assert git_status(clone) == "", f"reading a lesson changed the repository:\n{git_status(clone)}"
    finally:
        seen.update(descendants(proc.pid))
        if proc.poll() is None:
            try:
                urllib.request.urlopen(
                    urllib.request.Request(base + "/api/shutdown", method="POST", data=b""), timeout=10
                ).close()
                proc.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        kill_all(seen)


# -- the README's other commands -------------------------------------------------------------------

BENCH_README = REPO / "bench" / "README.md"
# Small sizes for each benchmark in bench/README.md, so the commands run in seconds here.
SMALL_BENCH_ARGS = {
    "throughput": "--jobs 100 --repeat 1 --procs 1",
    "scale": "--small 100 --big 1000 --reap 100",
    "breakdown": "--jobs 100 --repeat 1",
    "lab_refresh": "--jobs 200 --repeat 2 --workers 1",
    "consumers": "--jobs 200 --repeat 1 --threads 2 --no-strace",
    "postgres": "--jobs 40 --repeat 1 --procs 1 --slots 2",
    "postgres_breakdown": "--jobs 40 --repeat 1",
    "postgres_cpu": "--jobs 40 --repeat 1 --slots 2",
    "audit": "--quick --only leaselab",  # the README command runs; test_audit runs the peers
    "simulate": "--schedules 5 --repeat 2 --rev HEAD",  # --rev: both sides, each going first once
    "mutants": "--only unfenced_complete --no-chaos --sim-seconds 30",
    "check_scale": "--jobs 2000",
    "enqueue_file": "--lines 500",
    "failover": "--runs 1 --seconds 3",
    "versus": "--rev HEAD --jobs 50 --rounds 1 --only sqlite-normal-1,calls-normal",
}
BENCHMARKS_AT_ONCE = 3


def shell_blocks(text: str) -> list[str]:
    """The command lines of every ```sh block, in order."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        lines += [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return lines


def newcomer_shell(tmp_path: Path):
    """A fresh clone and a function running one command line in it with bash, as a newcomer's terminal would."""
    clone = fresh_clone(tmp_path / "leaselab")
    venv = sharing_venv(tmp_path / "venv")
    (tmp_path / "tmp").mkdir()
    env = {
        **os.environ,
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "TMPDIR": str(tmp_path / "tmp"),
    }
    env.pop("PYTHONPATH", None)

    def sh(command: str, timeout: float = 600) -> subprocess.CompletedProcess:
        # A terminal's SIGINT is at its default, whatever this runner inherited (a CI script started in
        # the background runs it with SIGINT ignored, and bash cannot reset what it was started ignoring).
        return subprocess.run(
            ["bash", "-c", command],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )

    return clone, venv, sh


def test_every_other_readme_command_works_as_written_from_a_fresh_clone(tmp_path):
    clone, venv, sh = newcomer_shell(tmp_path)

    # ./dev run: the first run says what it installs and lets pip show it; the next starts at once.
    command = readme_command("run the `leaselab` command")
    first = sh(command)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "The leaselab command" in first.stdout and "``" not in first.stdout
    assert "dev: installing leaselab and JupyterLab into" in first.stderr and "(first run only)" in first.stderr
    assert "Successfully installed leaselab" in first.stderr, "pip's own report is hidden"
    again = sh(command)
    assert again.returncode == 0 and again.stderr == "", again.stderr

    # The command-line block, line by line as written.
    outputs = []
    for line in shell_blocks(README.read_text(encoding="utf-8")):
        done = sh(line, timeout=120)
        assert done.returncode == 0, f"`{line}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        outputs.append((line, done.stdout))
    text = dict(outputs)
    enqueue = next(out for line, out in outputs if " enqueue " in line)
    worker = next(out for line, out in outputs if " worker " in line)
    stats = next(out for line, out in outputs if " stats " in line)
    assert len(enqueue.split()) == 5, enqueue
    assert "Ctrl-C to stop" in worker and "completed 5" in worker, worker
    assert dict(row.split() for row in stats.splitlines())["done"] == "5", stats
    assert any(" events " in line and "completed" in out for line, out in text.items())

    # The README's promise about a mistyped --db, and the activated environment.
    typo = sh("./dev run leaselab stats --db lab.bd")
    assert typo.returncode == 2 and typo.stderr.strip().endswith("no queue file at lab.bd (did you mean lab.db?)")
    assert not (clone / "lab.bd").exists()
    activated = sh(f"source {venv}/bin/activate && leaselab stats --db lab.db --json")
    assert activated.returncode == 0 and json.loads(activated.stdout)["done"] == 5, activated.stderr

    # ./dev bench: the README's example as written, then each script bench/README.md lists, small.
    command = readme_command("run a benchmark")
    done = sh(command)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Lab.refresh" in done.stdout and "] filling a file with" in done.stderr
    bench_readme = BENCH_README.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([^`]*bench[^`]*)` \|", bench_readme, flags=re.M)
    assert rows and all(row.startswith("./dev bench ") for row in rows), f"not runnable from a fresh clone: {rows}"
    listed = re.findall(r"^\| `(\./dev bench (\w+))[^`]*` \|", bench_readme, flags=re.M)
    assert sorted(name for _, name in listed) == sorted(SMALL_BENCH_ARGS), listed
    # Side by side: they wait on their own processes and servers more than they compute, and what is
    # checked here is that each runs and reports, not its figures.
    with ThreadPoolExecutor(BENCHMARKS_AT_ONCE) as pool:
        runs = list(pool.map(lambda row: sh(f"{row[0]} {SMALL_BENCH_ARGS[row[1]]}"), listed))
    for (command, _), done in zip(listed, runs, strict=True):
        assert done.returncode == 0, f"{command}: {done.stderr[-3000:]}"
        steps = [line for line in done.stderr.splitlines() if re.match(r"\[\s*[\d.]+ s\] ", line)]
        assert steps, f"{command} said nothing while it ran:\n{done.stderr}"
        assert "|" in done.stdout or "ms" in done.stdout, done.stdout
    unknown = sh("./dev bench nosuch")
    assert unknown.returncode == 2 and "throughput" in unknown.stderr

    # ./dev test passes its words to pytest; ./dev build reaches notebooks/build.py.
    # -n 0: one process for one small module, not a pool of workers each collecting it.
    done = sh(readme_command("run every test") + " -n 0 -q -p no:cacheprovider tests/test_backoff.py")
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    done = sh(readme_command("rebuild the lessons") + " --help")
    assert done.returncode == 0 and "--no-execute" in done.stdout, done.stderr[-3000:]


def test_binder_prepares_the_copies_its_badges_open_and_the_reader_keeps_their_work(tmp_path):
    clone, venv, sh = newcomer_shell(tmp_path)
    app = private_app_dir(tmp_path / "app")
    done = sh(f"JUPYTERLAB_DIR={app} binder/postBuild")
    assert done.returncode == 0, done.stderr
    badges = re.findall(r"mybinder\.org/v2/gh/[^)\s]*\?urlpath=lab/tree/([^)\s]+)", README.read_text(encoding="utf-8"))
    assert len(badges) == 2, badges
    for path in badges:
        lang = Path(path).parent.name
        assert (clone / path).read_bytes() == (clone / "notebooks" / lang / Path(path).name).read_bytes(), path
    quiet = json.loads((app / "settings" / "overrides.d" / "leaselab.json").read_text())
    assert quiet["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false", "checkForUpdates": False}
    assert git_status(clone) == ""

    # A copy the reader changed survives the next start; a deleted one comes back as stored.
    mine, gone = clone / badges[0], clone / badges[1]
    mine.write_text("my own work", encoding="utf-8")
    gone.unlink()
    assert sh(f"JUPYTERLAB_DIR={app} ./dev prepare-lab python").returncode == 0
    assert mine.read_text(encoding="utf-8") == "my own work"
    assert gone.read_bytes() == (clone / "notebooks" / "ru" / gone.name).read_bytes()
    assert git_status(clone) == ""
