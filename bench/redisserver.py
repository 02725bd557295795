"""A throw-away Redis for the audit: Debian's ``redis-server`` in a temp folder, on 127.0.0.1 at a free port.

::

    with RedisServer() as redis:   # raises RedisUnavailable when redis-server is not installed
        redis.url                  # redis://127.0.0.1:PORT/0
    # the server is stopped and its folder removed

Nothing is saved to disk (``--save ''``, no append-only file). The server dies with the
thread that started it (``PR_SET_PDEATHSIG``), so even a SIGKILLed owner leaves none behind,
and the owner also stops it at interpreter exit. Run as root it drops to ``nobody``
(Redis runs as root, but a throw-away server needs no privilege). Standard library only.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1


class RedisUnavailable(RuntimeError):
    """Raised when no ``redis-server`` is on PATH (Debian: apt-get install redis-server)."""


class RedisStartFailed(RuntimeError):
    """Raised when redis-server did not answer PING in time; the message holds its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class RedisServer:
    """One redis-server process and its folder; ``start`` runs it, ``stop`` (or leaving ``with``) ends both."""

    def __init__(self, timeout: float = 30.0):
        self.timeout = timeout
        self.port = 0
        self.folder: Path | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisUnavailable("redis-server is not installed (Debian: apt-get install redis-server)")
        self.folder = Path(tempfile.mkdtemp(prefix="audit-redis-"))
        self.port = free_port()
        user = None
        if os.geteuid() == 0:
            user = pwd.getpwnam("nobody")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
        cmd = [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.folder),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
        ]
        log = open(self.folder / "redis.log", "wb")
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
                user=user.pw_uid if user else None,
                group=user.pw_gid if user else None,
                start_new_session=True,
            )
        finally:
            log.close()
        atexit.register(self.stop)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.ask(b"PING") == b"+PONG":
                return self
            time.sleep(0.05)
        text = (self.folder / "redis.log").read_text(errors="replace")
        self.stop()
        raise RedisStartFailed(f"redis-server on port {self.port} did not answer PING:\n{text[-2000:]}")

    def ask(self, command: bytes) -> bytes | None:
        """Send one inline command; its first reply line, or None when the server is not answering."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(command + b"\r\n")
                return s.recv(512).split(b"\r\n")[0]
        except OSError:
            return None

    def flush(self) -> None:
        """Empty every database: each scenario starts on a clean server."""
        if self.ask(b"FLUSHALL") != b"+OK":
            raise RedisStartFailed(f"redis-server on port {self.port} refused FLUSHALL")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
