"""The watchdog of a throw-away PostgreSQL server (``pgserver``): nothing outlives the process that started it.

The process that starts a server (its owner) does not run the server: a watchdog does, this
module run as a script (``python -I pgwatchdog.py CONFIG``, standard library only), which the
owner drives through ``Watchdog``. The watchdog

- forks once more as it starts, so it is nobody's descendant but init's, in a session of its
  own: what kills a process tree (a test's teardown that kills every descendant of a kernel,
  psutil's ``children(recursive=True)``) or a process group (``kill -- -PGID``, pytest-timeout,
  nbval and JupyterLab killing a kernel) does not take it along;
- watches the owner through a pidfd (Linux; elsewhere it polls the pid) and through the pipe
  the owner sends its commands on, so it learns of any end of the owner (SIGKILL, an exit that
  skipped ``stop()``) within a fraction of a second, and then ends the server (SIGQUIT, an
  immediate shutdown, which frees the port) and removes the folder;
- makes the folder itself, and is the parent of ``initdb`` and of the postmaster, which it
  starts with ``PR_SET_PDEATHSIG`` (Linux): a killed watchdog takes them with it at once
  (SIGKILL for initdb, SIGQUIT for the postmaster), so the server never outlives its watchdog,
  and an owner that dies while the server starts leaves no half-made folder;
- forks a helper, in a session of its own too, which waits for the watchdog to end and then
  removes what is left: the folder of a watchdog killed with SIGKILL.

What can still leave something behind: killing both the watchdog and its helper leaves the
folder (and, off Linux, where there is no ``PR_SET_PDEATHSIG``, the server); killing every
process at once (a container stopped) leaves a folder in a temp folder that goes with it.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
CHILDREN_GRACE = 1.0  # seconds a server's children have to act on SIGQUIT before they are SIGKILLed
HALT_TIMEOUT = 10.0  # seconds an immediate shutdown may take before the postmaster is SIGKILLed too


class WatchdogGone(RuntimeError):
    """Raised when a server's watchdog has ended (killed), or did not answer in time and was killed: the server ended
    with it."""


class Watchdog:
    """The owner's end of one watchdog: start it, send it commands, read its replies."""

    def __init__(self, parent: str, uid: int, gid: int, timeout: float):
        """Start a watchdog that makes a server's folder in ``parent`` (owned by ``uid``/``gid`` when they are >= 0)."""
        config = {"owner": os.getpid(), "parent": parent, "uid": uid, "gid": gid}
        # "-I": the watchdog needs nothing but the standard library, whatever PYTHONPATH or the
        # current folder hold. It runs as this process's user (the server's user may not even
        # reach this Python) and runs the server's programs as the server's user.
        first = subprocess.Popen(
            [sys.executable, "-I", str(Path(__file__).resolve()), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
            start_new_session=True,
        )
        # The pipes outlive ``first``, which leaves at once: its child is the watchdog.
        assert first.stdin is not None and first.stdout is not None  # both asked for as pipes
        self._to: int | None
        self._from: int | None
        self._to, self._from = os.dup(first.stdin.fileno()), os.dup(first.stdout.fileno())
        first.stdin.close()
        first.stdout.close()
        self._replies = b""
        self.pid: int | None = None
        try:
            hello = self._reply(timeout)
        except WatchdogGone:
            self.close()
            raise WatchdogGone(
                f"the watchdog did not start: python -I {Path(__file__).name} exited {_reaped(first, timeout)}"
            ) from None
        _reaped(first, timeout)
        self.pid, self.folder = hello["pid"], Path(hello["folder"])

    def ask(self, command: dict) -> dict:
        """Send one command (``do``: run, serve, halt, stop; ``timeout`` in seconds) and return the reply."""
        if self._to is None:
            raise WatchdogGone("the watchdog was let go (stop() was called)")
        line = json.dumps(command).encode() + b"\n"
        try:
            while line:
                line = line[os.write(self._to, line) :]
        except OSError as exc:
            raise WatchdogGone(f"the watchdog (pid {self.pid}) is gone") from exc
        return self._reply(command["timeout"] + 30)

    def _reply(self, timeout: float) -> dict:
        assert self._from is not None  # let go only with _to, which ask() checked
        deadline = time.monotonic() + timeout
        while b"\n" not in self._replies:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from], [], [], left)[0]:
                self.kill()
                raise WatchdogGone(f"the watchdog (pid {self.pid}) did not answer within {timeout:g}s; it is killed")
            chunk = os.read(self._from, 65536)
            if not chunk:
                raise WatchdogGone(f"the watchdog (pid {self.pid}) is gone")
            self._replies += chunk
        line, self._replies = self._replies.split(b"\n", 1)
        return json.loads(line)

    def kill(self) -> None:
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Let the watchdog go: it ends the server, if it still runs one, and exits."""
        for fd in (self._to, self._from):
            if fd is not None:
                os.close(fd)
        self._to = self._from = None


def _reaped(process: subprocess.Popen, timeout: float) -> int:
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


# -- ending a server, from any process -------------------------------------------------------------------------


def postmasters(data_dir: str | os.PathLike) -> list[int]:
    """The live ``postgres -D data_dir`` processes (a postmaster: its other processes end when it does)."""
    data = os.fsencode(str(data_dir))
    if not os.path.isdir("/proc"):  # no /proc: the pid the server wrote, if it answers
        try:
            pid = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        return [pid] if _alive(pid) else []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if any(a == b"-D" and b == data for a, b in pairwise(argv)) and _alive(int(entry)):
            found.append(int(entry))
    return found


def end_server(data_dir: str | os.PathLike, grace: float = 5.0) -> None:
    """End every server running on ``data_dir``: ``grace`` seconds to end on its own, then ``end_postmaster``."""
    left = _wait_gone(postmasters(data_dir), grace)  # a watchdog just killed: PR_SET_PDEATHSIG is ending it
    for pid in left:
        end_postmaster(pid, lambda wait, pid=pid: not _wait_gone([pid], wait), 10.0)  # type: ignore[misc]  # pid bound
    if left:
        Path(data_dir, "postmaster.pid").unlink(missing_ok=True)  # a SIGKILLed postmaster's, if one was


def end_postmaster(pid: int, ended: Callable[[float], bool], timeout: float) -> bool:
    """An immediate shutdown of postmaster ``pid`` that ends within ``timeout`` seconds, whatever its children do.

    SIGQUIT first (``pg_ctl stop -m immediate``): the postmaster tells its children to quit
    and exits once they have, removing its shared memory and its pid file. A child that
    does not act on SIGQUIT (one stopped, say) gets SIGKILL from the postmaster only after
    5 s, and only once; a client that connects in the meantime gets a "dead-end" child,
    which the postmaster then waits for, and which waits up to ``authentication_timeout``
    (60 s) for a startup packet that a client cut off from the network never sends. So
    after ``CHILDREN_GRACE`` every child still there is SIGKILLed, again each round, and
    after ``timeout`` the postmaster too. ``ended(wait)`` says whether it has ended,
    waiting up to ``wait`` seconds. True if it ended on SIGQUIT, without being SIGKILLed.
    """
    start = time.monotonic()
    _signal(pid, signal.SIGQUIT)
    while not ended(0.1):
        waited = time.monotonic() - start
        if waited > timeout:
            _signal(pid, signal.SIGSTOP)  # it forks no child while its children are listed and ended
            children = _children(pid)
            _signal(pid, signal.SIGKILL)
            for child in children:
                _signal(child, signal.SIGKILL)
            ended(5.0)
            _wait_gone(children, 5.0)
            return False
        if waited > CHILDREN_GRACE:
            for child in _children(pid):
                _signal(child, signal.SIGKILL)
    return True


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc; none where there is no /proc)."""
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if len(fields) > 1 and fields[1] == str(pid).encode():
            found.append(int(entry))
    return found


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def remove_folder(folder: str | os.PathLike, timeout: float = 5.0) -> None:
    """Remove ``folder``, again while a process that is ending still writes into it."""
    deadline = time.monotonic() + timeout
    while True:
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.lexists(folder) or time.monotonic() > deadline:
            return
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: it exists and is no zombie (which has ended; only its parent's wait is missing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True  # no /proc: the pid answered


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        pids = [pid for pid in pids if _alive(pid)]
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


# -- the watchdog process --------------------------------------------------------------------------------------


class _OwnerGone(Exception):
    """Raised inside the watchdog when the process that started the server has ended."""


class _WatchdogProcess:
    """What runs in the watchdog: one server for its owner, ended with the owner (see the module's docstring)."""

    def __init__(self, owner: int, owner_fd: int | None, uid: int, gid: int):
        self.owner, self.owner_fd = owner, owner_fd
        self.uid, self.gid = uid, gid
        self.pid = os.getpid()
        self.user: dict[str, Any] = {"user": uid, "group": gid, "extra_groups": []} if uid >= 0 else {}
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
        self.prctl = _libc_prctl()
        self.folder: Path | None = None
        self.server: subprocess.Popen | None = None  # the postmaster
        self.child: subprocess.Popen | None = None  # initdb, while it runs
        self.commands = b""

    def owner_gone(self, wait: float = 0.0) -> bool:
        if self.owner_fd is not None:  # a pidfd turns readable when its process ends
            return bool(select.select([self.owner_fd], [], [], wait)[0])
        time.sleep(wait)
        return not _alive(self.owner)

    def run(self, parent: str) -> None:
        to_helper = self.start_helper()
        self.folder = Path(tempfile.mkdtemp(prefix="leaselab-pg-", dir=parent))
        os.write(to_helper, os.fsencode(str(self.folder)) + b"\n")
        self.folder.chmod(0o755)  # the unprivileged server user must reach its folders
        (self.folder / "socket").mkdir()
        if self.uid >= 0:
            os.chown(self.folder, self.uid, self.gid)
            os.chown(self.folder / "socket", self.uid, self.gid)
        self.reply({"ok": True, "pid": self.pid, "folder": str(self.folder)})
        watched = [0] + ([self.owner_fd] if self.owner_fd is not None else [])
        while True:
            ready = select.select(watched, [], [], 0.5)[0]
            if self.owner_fd in ready or (self.owner_fd is None and self.owner_gone()):
                return
            if 0 in ready:
                chunk = os.read(0, 65536)
                if not chunk:  # the owner's end closed: it has ended, or let the server go
                    return
                self.commands += chunk
                while b"\n" in self.commands:
                    line, self.commands = self.commands.split(b"\n", 1)
                    command = json.loads(line)
                    if command["do"] == "stop":
                        self.finish()
                        self.reply({"ok": True})
                        return
                    try:
                        self.reply(getattr(self, "do_" + command["do"])(command))
                    except (OSError, subprocess.SubprocessError) as exc:
                        self.reply({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
            if self.server is not None and self.server.poll() is not None:
                self.server = None  # it ended on its own, and is reaped: no zombie stays

    def reply(self, message: dict) -> None:
        line = json.dumps(message).encode() + b"\n"
        while line:
            line = line[os.write(1, line) :]

    def start_helper(self) -> int:
        """Fork the helper that removes what this process leaves if it is killed; return the pipe to it."""
        read, write = os.pipe()
        if os.fork() == 0:
            try:
                os.close(write)
                os.setsid()  # not in this process's group: a kill of that group spares it
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1):  # so the owner sees the watchdog's end as the end of its reply pipe
                    os.dup2(devnull, fd)
                if self.owner_fd is not None:
                    os.close(self.owner_fd)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _help(read)
            finally:
                os._exit(0)
        os.close(read)
        return write

    def spawn(self, argv: list[str], death_signal: signal.Signals, **streams) -> subprocess.Popen:
        """Start one of the server's programs as the server's user, sent ``death_signal`` when this process ends."""
        prctl, me = self.prctl, self.pid

        def tie_to_watchdog() -> None:  # in the child, once it is the server's user (a later change would untie it)
            if prctl is not None:
                prctl(_PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0)
            if os.getppid() != me:  # the watchdog ended before the tie was made
                os._exit(1)

        # A session of its own: a kill of this process's group leaves it to the SIGQUIT above,
        # a clean immediate shutdown, rather than a SIGKILL that leaves shared memory behind.
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            cwd=self.folder,
            env=self.env,
            start_new_session=True,
            preexec_fn=tie_to_watchdog,
            **self.user,
            **streams,
        )

    def do_run(self, command: dict) -> dict:
        self.child = self.spawn(command["argv"], signal.SIGKILL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + command["timeout"]
        while True:
            try:
                output, _ = self.child.communicate(timeout=0.1)  # called again after a timeout: no output is lost
                break
            except subprocess.TimeoutExpired:
                if self.owner_gone():
                    raise _OwnerGone from None
                if time.monotonic() > deadline:
                    self.child.kill()
                    self.child.communicate()
                    self.child = None
                    return {
                        "ok": False,
                        "error": f"{Path(command['argv'][0]).name} did not finish within {command['timeout']:g}s",
                    }
        code, self.child = self.child.returncode, None
        return {"ok": True, "code": code, "output": output.decode(errors="replace")}

    def do_serve(self, command: dict) -> dict:
        if self.server is not None and self.server.poll() is None:
            return {"ok": False, "error": "the server is running already"}
        assert self.folder is not None  # made by run() before it reads any command
        with open(self.folder / "server.log", "ab") as log:
            self.server = self.spawn(command["argv"], signal.SIGQUIT, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + command["timeout"]
        while True:
            if self.server.poll() is not None:
                code, self.server = self.server.returncode, None
                return {"ok": False, "error": f"the server exited with code {code} before it accepted connections"}
            if _ready(self.folder / "data" / "postmaster.pid", self.server.pid):
                return {"ok": True, "pid": self.server.pid}
            if time.monotonic() > deadline:
                self.halt()
                return {"ok": False, "error": f"the server did not accept connections within {command['timeout']:g}s"}
            if self.owner_gone(0.05):
                raise _OwnerGone

    def do_halt(self, command: dict) -> dict:
        ran = self.halt(min(command["timeout"], HALT_TIMEOUT))
        return {"ok": True} if ran else {"ok": False, "error": "it is not running"}

    def halt(self, timeout: float = HALT_TIMEOUT) -> bool:
        """An immediate shutdown that ends within ``timeout`` seconds (``end_postmaster``); False if none ran."""
        server, self.server = self.server, None
        if server is None or server.poll() is not None:
            return False

        def ended(wait: float) -> bool:
            try:
                server.wait(wait)
            except subprocess.TimeoutExpired:
                return False
            return True

        if not end_postmaster(server.pid, ended, timeout) and self.folder is not None:
            # SIGKILLed, it left its pid file: a new postmaster would take a pid used again since for its own.
            (self.folder / "data" / "postmaster.pid").unlink(missing_ok=True)
        return True

    def finish(self) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait()
        self.halt()
        if self.folder is not None:
            remove_folder(self.folder)
            self.folder = None


def _ready(pid_file: Path, pid: int) -> bool:
    """Whether postmaster ``pid`` says in its pid file that it accepts connections (as ``pg_ctl -w`` reads it)."""
    try:
        lines = pid_file.read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[0].strip() == str(pid) and lines[7].strip() == "ready"


def _libc_prctl():
    """libc's prctl on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _help(read: int) -> None:
    """The helper: wait for the watchdog to end (its pipe's end), then end the server and remove the folder it named."""
    received = b""
    while chunk := os.read(read, 65536):
        received += chunk
    folder = os.fsdecode(received.strip())
    if folder:
        end_server(os.path.join(folder, "data"))
        remove_folder(folder)


def main(config: dict) -> int:
    """The watchdog's life, from ``Watchdog``'s start to the end of its server."""
    owner = config["owner"]
    try:
        owner_fd = os.pidfd_open(owner)  # the owner is this process's parent now: the pid cannot be another's
    except (AttributeError, OSError):
        owner_fd = None
    if os.getppid() != owner:  # it ended before it could be watched; nothing is made yet
        return 0
    if os.fork() > 0:  # leave, so that the watchdog is nobody's descendant but init's
        os._exit(0)
    watchdog = _WatchdogProcess(owner, owner_fd, config["uid"], config["gid"])

    def terminated(*_: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, terminated)  # a watchdog asked to end ends its server first
    try:
        watchdog.run(config["parent"])
    except (_OwnerGone, BrokenPipeError):  # BrokenPipeError: the owner ended before it read a reply
        pass
    finally:
        watchdog.finish()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -I pgwatchdog.py CONFIG (leaselab.harness.pgserver starts it)")
    sys.exit(main(json.loads(sys.argv[1])))
