"""`leaselab pg start|url|stop`: the throw-away PostgreSQL server of ``pgserver``, for a person to try the
queue on, from a shell.

A command ends at once, but a server must outlive it: ``start`` spawns a keeper, this module run as a
program, in a session of its own. The keeper owns a ``PgServer`` (so the server's watchdog removes the
server and its folder whenever the keeper ends, however it ends), makes a database named ``leaselab``,
writes its URL and its own pid into a state file, and then waits for one of two things: a SIGTERM
(``leaselab pg stop``), or the death of its owner, by default the shell that ran ``leaselab pg start``.
Either way it stops the server, removes the state file and exits. One server per user: the state file
is ``leaselab-pg-UID.json`` in the temp folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .errors import PgCommandError

START_TIMEOUT = 120.0  # seconds a keeper may take to initdb and start its server
STOP_TIMEOUT = 30.0
POLL = 0.2  # seconds between looks at the owner, and at a keeper that is stopping
DATABASE = "leaselab"


def state_path() -> Path:
    """Where this user's server is written down: its URL and its keeper's pid."""
    return Path(tempfile.gettempdir()) / f"leaselab-pg-{os.getuid()}.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def running() -> dict[str, Any] | None:
    """The running server's state (``url``, ``pid``, ``owner``), or None: no state file, or its keeper is gone."""
    try:
        state = json.loads(state_path().read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("pid"), int) or not _alive(state["pid"]):
        return None
    return state


def start(owner: int) -> tuple[str, bool]:
    """The URL of this user's server, started now for ``owner`` (a pid) unless one runs; (url, started now)."""
    state = running()
    if state is not None:
        return state["url"], False
    keeper = subprocess.Popen(
        [sys.executable, "-m", __name__, str(owner)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # Ctrl-C in the shell, or its process group killed, does not reach it
        text=True,
    )
    assert keeper.stdout is not None and keeper.stderr is not None
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(keeper.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(START_TIMEOUT)
    line = got[0].strip() if got else ""
    if not line.startswith("postgresql://"):
        keeper.kill()
        why = keeper.stderr.read().strip().splitlines()[-1:] if keeper.poll() is not None else []
        raise PgCommandError(f"the server did not start: {why[0] if why else 'no URL within the time allowed'}")
    keeper.stdout.close()
    keeper.stderr.close()
    return line, True


def stop() -> str | None:
    """Stop this user's server and wait until it is gone; its URL, or None when none was running."""
    state = running()
    if state is None:
        state_path().unlink(missing_ok=True)  # a keeper killed outright leaves its file: it names nothing now
        return None
    os.kill(state["pid"], signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while _alive(state["pid"]) and time.monotonic() < deadline:
        time.sleep(POLL)
    if _alive(state["pid"]):
        raise PgCommandError(f"the server's keeper (pid {state['pid']}) did not stop within {STOP_TIMEOUT:g}s")
    return state["url"]


def _keep(owner: int) -> int:
    """The keeper: start the server, say its URL on stdout, and stop it on SIGTERM or when ``owner`` ends."""
    from .pgserver import PgServer

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = PgServer().start()
    path = state_path()
    try:
        url = server.create_database(DATABASE)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"url": url, "pid": os.getpid(), "owner": owner}), encoding="utf-8")
        temporary.replace(path)  # whole or not at all, for a `pg url` reading it meanwhile
        print(url, flush=True)
        while not stopping.wait(POLL) and _alive(owner):
            pass
    finally:
        server.stop()
        try:
            if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
                path.unlink()
        except (FileNotFoundError, ValueError):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(_keep(int(sys.argv[1])))


def url() -> str:
    """The running server's URL; ``PgCommandError`` when none is running."""
    state = running()
    if state is None:
        raise PgCommandError("no server is running: `leaselab pg start` starts one")
    return state["url"]
