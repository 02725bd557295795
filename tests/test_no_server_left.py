"""No throw-away PostgreSQL server outlives the process that started it, however that process ends (issue 24).

Each test starts a real owner process that starts a ``PgServer``, ends it the hard way, and waits
(bounded, by polling) until no process names the server's folder, the folder is gone and its port
refuses connections; it fails with what was left otherwise.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from leaselab.harness.pgserver import LABEL_VARIABLE, PgNotRunning, PgServer, PgStartFailed
from tests.support.browser_support import descendants
from tests.support.polling import pid_gone, wait_until
from tests.support.servers import labelled_servers, server_leftovers, servers_left_running, wait_nothing_left

# What an owner does: start a server, make a database (a connection's backend), say where it all is.
OWNER = r"""
import json, sys, threading
from leaselab.harness.pgserver import PgServer

said = threading.Event()

def own():
    server = PgServer().start()
    server.create_database("owned")
    postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
    print(json.dumps({"folder": str(server.folder), "port": server.port, "postmaster": postmaster,
                      "watchdog": server.watchdog_pid}), flush=True)
    said.set()
    if "thread" in sys.argv:
        threading.Event().wait()  # a daemon thread that holds the server while the interpreter exits

if "thread" in sys.argv:
    threading.Thread(target=own, daemon=True).start()
    said.wait()
else:
    own()
if "exit" not in sys.argv:
    sys.stdin.read()  # wait to be killed
"""


def owner_env(tmp: Path) -> dict[str, str]:
    """This interpreter's import path (this checkout's leaselab), and a temp folder of the test's own."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TMPDIR=str(tmp))


def start_owner(tmp: Path, *argv: str) -> tuple[subprocess.Popen, dict]:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=owner_env(tmp),
        start_new_session=True,
    )
    line = owner.stdout.readline()
    if not line:
        owner.wait(60)
        pytest.fail(f"the owner died before its server started:\n{owner.stderr.read()}")
    return owner, json.loads(line)


def left_by(server: dict) -> list[str]:
    return server_leftovers(server["folder"], server["port"], server["postmaster"], server["watchdog"])


def kill_tree(root: int) -> None:
    """SIGKILL ``root`` and every process below it at once, as a test's teardown that tracks a kernel's
    descendants does (tests/support/browser_support.py), or psutil's ``children(recursive=True)``."""
    for pid in [root, *descendants(root)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


ENDINGS = {
    "SIGKILL of the owner": lambda owner, server: owner.kill(),
    "SIGKILL of the owner's process group": lambda owner, server: os.killpg(owner.pid, signal.SIGKILL),
    "SIGKILL of the owner and all its descendants": lambda owner, server: kill_tree(owner.pid),
    "SIGKILL of the watchdog, then of the owner": lambda owner, server: (
        os.kill(server["watchdog"], signal.SIGKILL),
        owner.kill(),
    ),
    "SIGKILL of the watchdog's process group, then of the owner": lambda owner, server: (
        os.killpg(os.getpgid(server["watchdog"]), signal.SIGKILL),
        owner.kill(),
    ),
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_server_whose_owner_is_killed_leaves_no_process_no_folder_and_no_port(bin_dir, open_dir, ending):
    owner, server = start_owner(open_dir)
    try:
        assert left_by(server), "the server is up before its owner ends"
        ENDINGS[ending](owner, server)
    finally:
        owner.kill()
        owner.wait(60)
    wait_nothing_left(lambda: left_by(server))
    assert list(open_dir.iterdir()) == []


@pytest.mark.parametrize("holder", ["main", "thread"], ids=["started by the main thread", "held by a daemon thread"])
def test_a_server_whose_owner_exits_without_stopping_it_leaves_nothing(bin_dir, open_dir, holder):
    owner, server = start_owner(open_dir, "exit", holder)
    assert owner.wait(60) == 0, owner.stderr.read()
    wait_nothing_left(lambda: left_by(server))
    assert list(open_dir.iterdir()) == []


# A lesson's first cell, as lessons 6 and 7 start their server.
LESSON_CELL = """
import itertools, json
from leaselab.harness.pgserver import PgServer
server = PgServer().start()
databases = (server.create_database(f"lesson{n}") for n in itertools.count(1))
next(databases)
postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
print(json.dumps({"folder": str(server.folder), "port": server.port, "postmaster": postmaster,
                  "watchdog": server.watchdog_pid}))
"""


@pytest.mark.parametrize(
    "now", [True, False], ids=["killed (nbval, a kernel restart)", "asked to shut down (JupyterLab's Shut down kernel)"]
)
def test_a_kernel_shut_down_after_a_cell_started_a_server_leaves_nothing(bin_dir, open_dir, now):
    manager = pytest.importorskip("jupyter_client").KernelManager(kernel_name="python3")
    manager.start_kernel(env=owner_env(open_dir))
    try:
        client = manager.client()
        client.start_channels()
        client.wait_for_ready(timeout=120)
        printed = []
        reply = client.execute_interactive(
            LESSON_CELL,
            timeout=180,
            output_hook=lambda msg: (
                printed.append(msg["content"].get("text", "")) if msg["msg_type"] == "stream" else None
            ),
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        server = json.loads("".join(printed))
        client.stop_channels()
        manager.shutdown_kernel(now=now)
    finally:
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)
    wait_nothing_left(lambda: left_by(server))
    assert list(open_dir.iterdir()) == []


def test_a_killed_watchdog_takes_its_server_with_it_and_the_owner_hears_so(bin_dir, open_dir, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(open_dir))
    server = PgServer(bin_dir).start()
    try:
        folder, port = server.folder, server.port
        os.kill(server.watchdog_pid, signal.SIGKILL)
        wait_until(lambda: not server.running, message="the server to end with its watchdog")
        with pytest.raises(PgNotRunning, match="not running"):
            server.crash()
        with pytest.raises(PgNotRunning, match="watchdog .* is gone"):
            server.recover()
    finally:
        server.stop()
    assert server_leftovers(folder, port) == []


# -- a start that fails half-way ------------------------------------------------------------------


def fake_initdb(open_dir: Path) -> Path:
    """A bin folder whose initdb writes its pid to ``open_dir/marks/initdb.pid``, then sleeps for ten minutes."""
    bin_dir, marks = open_dir / "bin", open_dir / "marks"
    bin_dir.mkdir(mode=0o755)
    marks.mkdir()
    marks.chmod(0o777)  # the server's user writes there
    (bin_dir / "initdb").write_text(f"#!/bin/sh\necho $$ > {marks}/initdb.pid\nexec sleep 600\n")
    (bin_dir / "initdb").chmod(0o755)
    return bin_dir


def failing_initdb(open_dir: Path) -> Path:
    bin_dir = open_dir / "bin"
    bin_dir.mkdir(mode=0o755)
    (bin_dir / "initdb").write_text(
        "#!/bin/sh\necho 'initdb: could not create directory: No space left on device'\nexit 1\n"
    )
    (bin_dir / "initdb").chmod(0o755)
    return bin_dir


def servers_folders(open_dir: Path) -> list[str]:
    return sorted(p.name for p in open_dir.glob("leaselab-pg-*"))


def initdb_pid(open_dir: Path) -> int:
    mark = open_dir / "marks" / "initdb.pid"
    return int(wait_until(lambda: mark.exists() and mark.read_text().strip(), message="initdb to start"))


def test_a_start_whose_initdb_fails_raises_and_leaves_no_folder(open_dir, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(open_dir))
    with pytest.raises(PgStartFailed, match="initdb exited 1:\ninitdb: could not create directory"):
        PgServer(failing_initdb(open_dir)).start()
    assert servers_folders(open_dir) == []


def test_a_start_whose_initdb_hangs_raises_after_the_timeout_and_leaves_no_folder_nor_initdb(open_dir, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(open_dir))
    with pytest.raises(PgStartFailed, match="initdb did not finish within 2s"):
        PgServer(fake_initdb(open_dir), timeout=2).start()
    assert servers_folders(open_dir) == []
    assert pid_gone(initdb_pid(open_dir))


def test_a_server_that_refuses_to_start_raises_its_own_words_at_once_and_leaves_no_folder(
    bin_dir, open_dir, monkeypatch
):
    monkeypatch.setattr(tempfile, "tempdir", str(open_dir))
    with pytest.raises(PgStartFailed, match="(?s)exited with code 1.*shared_buffers"):
        PgServer(bin_dir, settings={"shared_buffers": "1kB"}).start()
    assert servers_folders(open_dir) == []


def test_an_owner_killed_while_initdb_runs_leaves_no_folder_and_no_initdb(open_dir):
    bin_dir = fake_initdb(open_dir)
    code = f"from leaselab.harness.pgserver import PgServer; PgServer({str(bin_dir)!r}).start()"
    owner = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=owner_env(open_dir),
        start_new_session=True,
    )
    try:
        initdb = initdb_pid(open_dir)
        [folder] = open_dir.glob("leaselab-pg-*")
    finally:
        owner.kill()
        owner.wait(60)
    wait_nothing_left(lambda: server_leftovers(folder, None, initdb))
    assert servers_folders(open_dir) == []


# -- the run's own check ----------------------------------------------------------------------------


def test_the_end_of_run_check_finds_and_ends_a_server_the_run_left_running_and_no_other(bin_dir, open_dir, monkeypatch):
    label = os.environ[LABEL_VARIABLE] + ".check"
    monkeypatch.setenv(LABEL_VARIABLE, label)
    monkeypatch.setattr(tempfile, "tempdir", str(open_dir))
    server = PgServer(bin_dir).start()
    os.kill(server.watchdog_pid, signal.SIGSTOP)  # a watchdog that cannot act: only the check ends the server
    try:
        assert server.setting("cluster_name") == label
        assert labelled_servers(label + "x") == [] and labelled_servers("pytest-0") == []
        left = servers_left_running(label, timeout=0.5)
        assert [data for _, data in left] == [str(server.data_dir)]
        assert not server.folder.exists() and labelled_servers(label) == []
    finally:
        os.kill(server.watchdog_pid, signal.SIGCONT)
        server.stop()
