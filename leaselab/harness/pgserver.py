"""A throw-away PostgreSQL server for tests and lessons: ``initdb`` and ``postgres`` in a temp folder.

::

    with PgServer() as server:          # raises PgUnavailable when no PostgreSQL is installed
        url = server.create_database("demo")   # postgresql://leaselab@127.0.0.1:PORT/demo
        ...
    # the server is stopped and its folder removed

No running system service is assumed. Run as root, the server runs as an unprivileged
user (``postgres``, else ``nobody``), since PostgreSQL refuses to run as root. It listens
on 127.0.0.1 at a free port and on a Unix socket inside its folder, trusts local
connections (no password), and runs with ``fsync=off``: its data dies with it anyway
(``PgServer(fsync=True)`` flushes as a production server does, for benchmarks).

For crash tests, ``crash()`` stops the server as a killed process stops (an immediate
shutdown: no checkpoint, every connection drops, what only the server's memory held is
gone) and ``recover()`` starts it again on the same port and data folder, so clients
reconnect to the same URL and find what the WAL replay brings back; ``restart(down_for)``
does both. It is not a power cut: what the server had written reached the operating
system's cache, which survives, so with ``fsync=off`` an acknowledged commit still
outlives a crash. A commit made with ``synchronous_commit = off`` is acknowledged before
its WAL is written at all, and ``settings=LAZY_WAL_WRITER`` makes the server leave it
unwritten long enough for a crash to lose it every time.

Nothing outlives the process that started the server (its owner), however that process
ends: a watchdog process runs the server, and ends it and removes its folder when the owner
ends, even by SIGKILL, with its whole process group or tree; a killed watchdog takes the
server with it (``pgwatchdog`` says how). The owner also stops its servers at interpreter exit.

``LEASELAB_PG_LABEL`` in the owner's environment names its servers (their
``cluster_name``, shown in ``ps`` beside every server process), so a test run can find
any server it started that is still running (``tests/conftest.py``); without it a
server is named after its folder. Standard library only.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .pgwatchdog import Watchdog, WatchdogGone, end_server, remove_folder

USER = "leaselab"  # the cluster's superuser, as in the URLs it hands out
RUN_AS_CANDIDATES = ("postgres", "nobody")
LABEL_VARIABLE = "LEASELAB_PG_LABEL"
_LABEL = re.compile(r"[A-Za-z0-9_.:-]{1,63}")  # a cluster_name: printable ASCII, under NAMEDATALEN
_DB_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SETTING_NAME = re.compile(r"[a-z_][a-z0-9_.]{0,62}")
_SETTING_VALUE = re.compile(r"[A-Za-z0-9_.+-]{1,64}")  # one plain word: nothing a command line could misread
# Set by PgServer itself: the URLs it hands out, the fsync flag and the server's name depend on them.
_OWN_SETTINGS = ("listen_addresses", "port", "unix_socket_directories", "fsync", "full_page_writes", "cluster_name")

# Settings under which a crash loses every commit made with synchronous_commit = off. The
# WAL writer writes such commits every wal_writer_delay (200ms by default), and at once when
# it was asleep after an idle spell (50 rounds of nothing, 10 s by default): a test that
# crashes right after an asynchronous commit lost it or not depending on how long the server
# had been idle. At the largest delay it writes every 10 s and sleeps only after 500 s idle,
# and no timed checkpoint (which writes all the WAL) comes in the way for a day.
LAZY_WAL_WRITER = {"wal_writer_delay": "10s", "checkpoint_timeout": "1d"}
PORT_RETAKE = 10.0  # seconds recover() tries to bind the server's own port again while another program holds it


class PgUnavailable(RuntimeError):
    """Raised when no PostgreSQL server binaries (initdb, postgres) can be found on this machine."""


class PgStartFailed(RuntimeError):
    """Raised when initdb or the server failed to start, or timed out; the message holds the server's own log."""


class PgNotRunning(RuntimeError):
    """Raised when the server is not in the state an operation needs (running, crashed, stopped), or its watchdog is
    gone."""


# Where Debian and Ubuntu's postgresql package (and so Binder's apt.txt) puts the server's
# programs: not on PATH, one folder per major version.
DEBIAN_BIN_DIRS = "/usr/lib/postgresql/*/bin"


def find_bin_dir(debian: str = DEBIAN_BIN_DIRS) -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``: on PATH, else Debian's /usr/lib/postgresql/*/bin (newest)."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(
        glob.glob(os.path.join(debian, "initdb")),
        key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parts[-3].split(".")],
    )
    if versions:
        return Path(versions[-1]).parent
    raise PgUnavailable(
        "no PostgreSQL binaries: initdb is neither on PATH nor in /usr/lib/postgresql/*/bin "
        "(on Debian or Ubuntu: apt-get install postgresql)"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reachable_by(folder: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` may pass through ``folder`` and every folder above it (the x bit that applies)."""
    for part in (folder, *folder.parents):
        try:
            st = part.stat()
        except OSError:
            return False
        if st.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif st.st_gid == user.pw_gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def _parent_for(user: pwd.struct_passwd | None) -> str | None:
    """Where the server's folder goes: the temp folder, unless the server's user cannot reach it.

    As root, the server runs as another user, and a private temp folder (a test runner's, or
    TMPDIR in a home folder) is closed to it; then the system's /tmp, which every user can enter.
    """
    if user is None or reachable_by(Path(tempfile.gettempdir()), user):
        return None
    for shared in ("/tmp", "/var/tmp"):
        if reachable_by(Path(shared), user):
            return shared
    raise PgUnavailable(
        f"the server runs as {user.pw_name}, who cannot enter {tempfile.gettempdir()} "
        "nor /tmp; set TMPDIR to a folder that user can enter"
    )


def _run_as() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in RUN_AS_CANDIDATES:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PgUnavailable("running as root, and there is no unprivileged user (postgres, nobody) to run the server as")


# Every server started in this process and not yet stopped. Holding them here keeps a server
# whose PgServer was dropped without stop() running until the process ends, as a server does
# (its watchdog ends it when its command pipe closes), and lets the exit hook stop them all.
_LIVE: set[PgServer] = set()


@atexit.register
def _stop_at_exit() -> None:
    for server in list(_LIVE):
        if server._owner == os.getpid():  # a forked child that exits leaves its parent's servers alone
            try:
                server.stop()
            except Exception:  # at exit there is no one left to tell; the watchdog ends the server anyway
                pass


class PgServer:
    """One PostgreSQL cluster in a temp folder, started by ``start()`` (or ``with``) and removed by ``stop()``."""

    def __init__(
        self,
        bin_dir: str | os.PathLike | None = None,
        timeout: float = 60.0,
        *,
        fsync: bool = False,
        settings: Mapping[str, str | int | float] | None = None,
        parent: str | os.PathLike | None = None,
        port: int | None = None,
    ):
        if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 1024 <= port <= 65535):
            raise ValueError(f"port must be None or a port number in [1024, 65535], got {port!r}")
        self.bin_dir = Path(bin_dir) if bin_dir is not None else find_bin_dir()
        self.timeout = timeout
        self.fsync = bool(fsync)
        self.settings = _checked_settings(settings or {})
        # Where the server's folder is made: the temp folder by default (or /tmp, for a server user who
        # cannot reach it); a test suite gives a folder in memory, so no other program's writes to the
        # disk can hold up the server's.
        self.parent = Path(parent) if parent is not None else None
        if self.parent is not None and not self.parent.is_dir():
            raise ValueError(f"parent must be an existing folder, got {str(parent)!r}")
        # A port of the caller's choosing: a standby made where a dead primary listened keeps the
        # clients' multi-host URL right (``pgreplicas``); None, a free one.
        self.wanted_port = port
        self.port: int | None = None
        self.folder: Path | None = None
        self._user = _run_as()
        self._owner: int | None = None
        self._watchdog: Watchdog | None = None
        self._lock = threading.Lock()  # one command to the watchdog and its reply at a time

    @property
    def _dir(self) -> Path:
        """The server's folder, which start() makes (a TypeError before, as ``None / "data"`` was)."""
        if self.folder is None:
            raise TypeError(f"{self!r} has no folder: it was never started")
        return self.folder

    @property
    def data_dir(self) -> Path:
        return self._dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self._dir / "socket"

    @property
    def running(self) -> bool:
        """True while the server is up: started and not crashed (or recovered since), not stopped."""
        return self.folder is not None and (self.data_dir / "postmaster.pid").exists()

    @property
    def watchdog_pid(self) -> int | None:
        """The process that runs the server and ends it when this one ends; None when not started."""
        return self._watchdog.pid if self._watchdog is not None else None

    def url(self, dbname: str = "postgres") -> str:
        """The URL of database ``dbname`` on this server (no password: local connections are trusted)."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{dbname}"

    def _cmd(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        kwargs: dict[str, Any] = {}
        if self._user is not None:
            kwargs = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
        done = subprocess.run(
            [str(self.bin_dir / argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            cwd=self.folder,
            env=env,
            timeout=self.timeout,
            **kwargs,
        )
        if check and done.returncode != 0:
            raise PgStartFailed(f"{argv[0]} exited {done.returncode}:\n{done.stdout}{done.stderr}{self._log()}")
        return done

    def _log(self, since: int = 0) -> str:
        try:
            with open(self._dir / "server.log", "rb") as log:
                log.seek(since)
                text = log.read().decode(errors="replace")
        except (OSError, TypeError):
            return ""
        return "\n--- server log ---\n" + text[-4000:]

    def _log_size(self) -> int:
        try:
            return (self._dir / "server.log").stat().st_size
        except OSError:
            return 0

    def start(self) -> PgServer:
        """initdb, start on a free port, and wait until the server accepts connections."""
        if self._watchdog is not None or self.folder is not None:
            raise PgNotRunning(f"cannot start {self!r}: it is started already")
        label = os.environ.get(LABEL_VARIABLE)
        if label is not None and not _LABEL.fullmatch(label):
            raise ValueError(f"{LABEL_VARIABLE} must be up to 63 letters, digits or _.:- , got {label!r}")
        if self.parent is None:
            parent = _parent_for(self._user) or tempfile.gettempdir()
        elif self._user is not None and not reachable_by(self.parent, self._user):
            raise PgUnavailable(f"the server runs as {self._user.pw_name}, who cannot enter {self.parent}")
        else:
            parent = str(self.parent)
        uid, gid = (self._user.pw_uid, self._user.pw_gid) if self._user is not None else (-1, -1)
        self._owner = os.getpid()
        _LIVE.add(self)
        try:
            try:
                self._watchdog = Watchdog(parent, uid, gid, self.timeout)
            except WatchdogGone as exc:
                raise PgStartFailed(str(exc)) from None
            self.folder = self._watchdog.folder
            self._make_data()
            deadline = time.monotonic() + PORT_RETAKE
            for tries in range(1, 1000):  # another process may take the free port before the server binds it
                self.port = self.wanted_port or free_port()
                logged = self._log_size()
                started = self._serve(PgStartFailed)
                if started["ok"]:
                    return self
                if "Address already in use" not in self._log(logged):
                    break
                # A free port: try another, five times. The chosen one: wait for whoever holds it, as recover() does.
                if (self.wanted_port is None and tries >= 5) or time.monotonic() > deadline:
                    break
                if self.wanted_port is not None:
                    time.sleep(0.2)
            raise PgStartFailed(f"the server did not start: {started['error']}{self._log()}")
        except BaseException:
            self.stop()
            raise

    def _make_data(self) -> None:
        """Make the data folder: ``initdb`` here; a standby copies its primary's instead (``pgreplicas``)."""
        self.run_as_server(
            "initdb", "-D", str(self.data_dir), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"
        )

    def run_as_server(self, program: str, *args: str) -> str:
        """Run one of the server's programs (``initdb``, ``pg_basebackup``) as the server's user, through the
        watchdog, so an owner that dies meanwhile leaves nothing behind; its output, or PgStartFailed."""
        made = self._ask(
            {"do": "run", "timeout": self.timeout, "argv": [str(self.bin_dir / program), *args]}, PgStartFailed
        )
        if not made["ok"]:
            raise PgStartFailed(f"{program} failed: {made['error']}")
        if made["code"] != 0:
            raise PgStartFailed(f"{program} exited {made['code']}:\n{made['output']}")
        return made["output"]

    def _own_settings(self) -> dict[str, str]:
        """Settings a kind of server sets for itself (a primary's replication), under the caller's."""
        return {}

    def _serve(self, failure: type[Exception]) -> dict:
        options = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "max_connections": "100",
            "cluster_name": os.environ.get(LABEL_VARIABLE) or self._dir.name,
            "fsync": "on" if self.fsync else "off",
            "full_page_writes": "on" if self.fsync else "off",
            **self._own_settings(),
            **self.settings,
        }
        argv = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir)]
        for name, value in options.items():
            argv += ["-c", f"{name}={value}"]
        return self._ask({"do": "serve", "argv": argv, "timeout": self.timeout}, failure)

    def _ask(self, command: dict, failure: type[Exception] | None = None) -> dict:
        """The watchdog's reply to ``command``; ``failure`` (PgNotRunning unless given) if it is gone."""
        with self._lock:
            if self._watchdog is None:
                raise PgNotRunning(f"{self!r} is not started, or stopped")
            try:
                return self._watchdog.ask(command)
            except WatchdogGone as exc:
                raise (failure or PgNotRunning)(f"{self!r}: {exc}, and the server went with it") from None

    def create_database(self, dbname: str) -> str:
        """Create an empty database and return its URL."""
        if not isinstance(dbname, str) or not _DB_NAME.fullmatch(dbname):
            raise ValueError(f"dbname must be a plain lower-case name, got {dbname!r}")
        self._cmd("createdb", "-h", str(self.socket_dir), "-p", str(self.port), "-U", USER, dbname)
        return self.url(dbname)

    def setting(self, name: str) -> str:
        """What the running server's ``SHOW name`` says (``"on"`` for ``fsync`` on a ``fsync=True`` server, say)."""
        if not isinstance(name, str) or not _SETTING_NAME.fullmatch(name):
            raise ValueError(f"name must be a plain setting name, got {name!r}")
        return "\n".join(self.query(f"SHOW {name}"))

    def query(self, statement: str, dbname: str = "postgres") -> list[str]:
        """The rows ``statement`` returns (psql's unaligned output: one line a row, ``|`` between columns).

        For the harness's own statements, written in its code: nothing a user typed."""
        out = self._cmd(
            "psql", "-h", str(self.socket_dir), "-p", str(self.port), "-U", USER, "-d", dbname, "-XAtc", statement
        ).stdout
        return [line for line in out.splitlines() if line]

    def crash(self) -> None:
        """Stop the server as a killed process stops: no checkpoint, every connection drops, its memory is lost.

        An immediate shutdown (SIGQUIT) whose end does not depend on the clients: a server
        process that does not quit within a second is SIGKILLed, and the postmaster itself
        after ``pgwatchdog.HALT_TIMEOUT`` (``pgwatchdog.end_postmaster`` says why). The data folder
        stays; ``recover()`` starts the server on it again. The watchdog stays too: if this process
        dies before or after ``recover()``, the server is still stopped and its folder removed.
        """
        if not self.running:
            raise PgNotRunning(f"cannot crash {self!r}: it is not running")
        halted = self._ask({"do": "halt", "timeout": self.timeout})
        if not halted["ok"]:
            raise PgNotRunning(f"cannot crash {self!r}: {halted['error']}")

    def recover(self) -> None:
        """Start a crashed server again on the same port and data folder; returns once it accepts connections.

        The server replays its WAL first: a commit that reached it survives, one that
        lived only in its memory (``synchronous_commit = off``) may not.
        """
        if self.folder is None or self.running:
            raise PgNotRunning(f"cannot recover {self!r}: it is " + ("running" if self.running else "stopped"))
        # The port is the clients' address and must stay; a program that took it meanwhile (any
        # outgoing connection may get it as its own local port) usually lets it go in a moment.
        deadline = time.monotonic() + PORT_RETAKE
        while True:
            logged = self._log_size()
            started = self._serve(PgNotRunning)
            if started["ok"]:
                return
            if "Address already in use" not in self._log(logged) or time.monotonic() > deadline:
                raise PgStartFailed(
                    f"the server did not start again on port {self.port} after a crash: "
                    f"{started['error']}{self._log(logged)}"
                )
            time.sleep(0.2)

    def restart(self, down_for: float = 0.0) -> None:
        """``crash()``, stay down for ``down_for`` seconds (clients meet a refused connection), then ``recover()``."""
        if isinstance(down_for, bool) or not isinstance(down_for, (int, float)) or not 0 <= down_for < 3600:
            raise ValueError(f"down_for must be a number of seconds in [0, 3600), got {down_for!r}")
        self.crash()
        time.sleep(down_for)
        self.recover()

    def stop(self) -> None:
        """Stop the server (immediately) and remove its folder. Safe to call twice."""
        if self._watchdog is not None:
            try:
                self._ask({"do": "stop", "timeout": self.timeout})
            except PgNotRunning:
                pass  # the watchdog is gone, and the server with it; what it left goes below
            finally:
                self._watchdog.close()
                self._watchdog = None
        if self.folder is not None and self.folder.exists():
            # Only after the watchdog was killed: its helper removes this too, a moment later.
            end_server(self.data_dir)
            remove_folder(self.folder)
        self.folder = None
        _LIVE.discard(self)

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"PgServer(port={self.port}, folder={str(self.folder)!r})"


def _checked_settings(settings: Mapping) -> dict[str, str]:
    if not isinstance(settings, dict):
        raise ValueError(f"settings must be a dict of setting names to values, got {settings!r}")
    checked = {}
    for name, value in settings.items():
        if not isinstance(name, str) or not _SETTING_NAME.fullmatch(name):
            raise ValueError(f"settings: {name!r} is not a plain setting name")
        if name in _OWN_SETTINGS:
            hint = " (give PgServer(fsync=True) instead)" if name in ("fsync", "full_page_writes") else ""
            raise ValueError(f"settings: {name} is set by PgServer itself{hint}")
        text = str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
        if not _SETTING_VALUE.fullmatch(text):
            raise ValueError(f"settings: the value of {name} must be a plain word or number, got {value!r}")
        checked[name] = text
    return checked
