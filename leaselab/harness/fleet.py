"""Process control: spawn, pause, resume, kill and stop real worker processes for one queue file.

``Fleet`` owns the processes; the lab's widgets and lesson scenarios only call it::

    fleet = Fleet("lab.db")
    name = fleet.spawn(handler="leaselab.harness.demo:sleepy", lease=3.0)   # "w1"
    fleet.pause(name)     # SIGSTOP: frozen; its lease runs out, and once its job is reaped it is a zombie
    fleet.resume(name)    # SIGCONT
    fleet.kill(name)      # SIGKILL: a crash, no clean-up
    fleet.stop(name)      # SIGTERM: finish the current job, then exit
    fleet.hang(name)      # its handler hangs: alive, heartbeating, stuck (demo handlers only)
    fleet.status()        # one WorkerStatus per worker
    fleet.shutdown()      # every worker ends; also run at interpreter exit

Each worker is ``python -m leaselab worker ...`` started with this interpreter in a
session of its own and with ``--ignore-sigint``, so a notebook's Interrupt (SIGINT to
the kernel's group) neither reaches nor stops it, and it exits by itself if the kernel dies.
Its ``$LEASELAB_HANG`` names ``<log dir>/<name>.hang``, the file ``hang`` creates (``demo.HANG_ENV``).
Its output goes to ``<db>.logs/<name>.log`` (for a PostgreSQL URL, see ``files_prefix``).
What the fleet did to its workers (spawn, pause, resume, kill, stop, hang, and exits it noticed) is
kept in ``fleet.actions`` and appended to ``<db>.faults.jsonl``, so a timeline drawn later from the
file alone can shade them.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..arguments import integer, positive
from ..backends import is_server_url
from ..queue import Queue
from ..worker import STARTED, faults, handler_path, load_handler
from ..worker.logline import LineLog
from . import demo
from .errors import (
    HangUnsupported,
    PartitionUnsupported,
    SignalsUnsupported,
    UnknownWorker,
    WorkerExists,
    WorkerNotRunning,
)
from .proxy import Proxy, server_address, through

RUNNING, PAUSED, STOPPING, KILLED, EXITED = "running", "paused", "stopping", "killed", "exited"
ALIVE = (RUNNING, PAUSED, STOPPING)
DEFAULT_HANDLER = handler_path(demo.task)
# The handlers that hang when asked to (``demo.HANG_ENV``): the others would leave the request unread.
HANGABLE = (DEFAULT_HANDLER, handler_path(demo.sleepy))
DEFAULT_GRACE = 5.0
WATCH_EVERY = 0.02  # seconds between looks for workers that died by themselves
# Names end up in file names and CSS classes (leaselab-pause-w1), so keep them plain.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,40}")


def files_prefix(db: str | os.PathLike) -> str:
    """Where a fleet keeps its files for queue ``db``: beside a queue file, or, for a PostgreSQL
    URL, in the current folder under the server's and database's name (``pg-HOST-PORT-DB``)."""
    db = os.fspath(db)
    if not is_server_url(db):
        return db
    url = urlsplit(db)
    name = f"pg-{url.hostname or 'localhost'}-{url.port or 5432}-{url.path.lstrip('/') or 'postgres'}"
    return os.path.abspath(re.sub(r"[^A-Za-z0-9_.-]+", "_", name))  # never the user or password


def faults_path(db: str | os.PathLike) -> Path:
    """Where a fleet records what it did to its workers: ``<db>.faults.jsonl`` (see ``files_prefix``)."""
    return Path(files_prefix(db) + ".faults.jsonl")


def logs_path(db: str | os.PathLike) -> Path:
    """Where a fleet's workers write their output by default: ``<db>.logs/`` (see ``files_prefix``)."""
    return Path(files_prefix(db) + ".logs")


def read_actions(db: str | os.PathLike) -> list[Action]:
    """The actions recorded next to ``db``, oldest first; none when no fleet ever ran on it."""
    try:
        with open(faults_path(db), encoding="utf-8") as fh:
            lines = [line for line in fh if line.strip()]
    except FileNotFoundError:
        return []
    actions = []
    for line in lines:
        try:
            actions.append(Action(**json.loads(line)))
        except (ValueError, TypeError):
            continue  # a half-written last line from a killed kernel is not worth failing a plot over
    return actions


@dataclass(frozen=True)
class Action:
    """One thing that happened to a worker process: spawn, pause, resume, kill, stop, or exit (noticed)."""

    at: float
    worker: str
    action: str
    pid: int
    detail: str | None = None


@dataclass(frozen=True)
class WorkerStatus:
    """A worker as the fleet sees it now. ``lease_left`` < 0 means its lease has expired."""

    name: str
    pid: int
    state: str  # running, paused, stopping, killed or exited
    job_id: int | None  # the running job whose holder is this worker, if any
    lease_left: float | None  # seconds until that job's lease runs out
    lease: float  # the lease length the worker was started with
    paused_for: float | None  # seconds since the pause, while paused
    paused_job: int | None  # the job it held when it was paused, if any
    returncode: int | None  # negative: killed by that signal
    handler: str
    log_path: str
    fault: str | None = None  # the transient fault it is waiting out (its log's last word on faults)
    jobs: tuple[int, ...] = ()  # every job it holds, in id order (more than one with concurrency > 1)
    concurrency: int = 1  # how many jobs it runs at once
    partitioned_for: float | None = None  # seconds since its network was cut (server queues), while cut
    partitioned_jobs: tuple[int, ...] = ()  # the jobs it held when it was cut off, while cut
    replies_dropped: int = 0  # replies its proxy threw away (``drop_reply``), since it started
    hang_asked: bool = False  # ``hang`` was asked and no handler has taken the request yet
    hung: bool = False  # one of its handlers took a hang request: it waits for ever
    hung_job: int | None = None  # the job that handler was given (known once it has written it)

    @property
    def partitioned(self) -> bool:
        """Cut off from the database server: it runs on, but none of its queries get through."""
        return self.partitioned_for is not None

    @property
    def zombie(self) -> bool:
        """Paused or cut off, and the job it held then is no longer its own: reaped, or handed on.

        It still believes it holds that job, and will act on it when it wakes or is reconnected:
        the zombie of lesson 3. A lease that merely ran out makes no zombie: until a reaper takes
        the job, the holder's token is still in it and its writes are accepted (``lease_expired``).
        """
        if self.state == PAUSED and self.paused_job is not None:
            return self.paused_job not in self.jobs
        if self.partitioned and self.state in ALIVE and self.partitioned_jobs:
            # Cut off, it cannot let go of what it held: it believes it holds those jobs until it
            # is reconnected, even after the queue has handed them to someone else.
            return not set(self.partitioned_jobs) <= set(self.jobs)
        return False

    @property
    def believed_jobs(self) -> tuple[int, ...]:
        """The jobs a zombie still believes it holds that are no longer its own (reaped or handed on),
        in id order; none for a worker that is no zombie."""
        if not self.zombie:
            return ()
        if self.state == PAUSED and self.paused_job is not None:
            return (self.paused_job,)
        return tuple(sorted(set(self.partitioned_jobs) - set(self.jobs)))

    @property
    def lease_expired(self) -> bool:
        """Alive or paused, it still holds a job whose lease has run out, and nobody has reaped it yet."""
        return self.state in ALIVE and self.lease_left is not None and self.lease_left < 0

    @property
    def badge(self) -> str:
        """The state the dashboard shows: the process state, or ``zombie`` / ``lease_expired`` / ``cut_off`` /
        ``hung`` / ``waiting``."""
        if self.zombie:
            return "zombie"
        if self.partitioned and self.state in ALIVE:
            return "lease_expired" if self.lease_expired else "cut_off"
        if self.hung and self.state in (RUNNING, STOPPING):
            # Alive, its heartbeat renewing the lease, its handler going nowhere.
            return "hung"
        if self.state == RUNNING and self.fault is not None:
            return "waiting"
        if self.lease_expired:
            return "lease_expired"
        return self.state


class _Proc:
    def __init__(self, name, popen, handler, lease, log_path, log_file, concurrency=1, hang_path=""):
        self.name, self.popen, self.handler, self.lease = name, popen, handler, lease
        self.hang_path = hang_path  # the file that asks its handler to hang (demo.HANG_ENV)
        self.concurrency = concurrency
        self.proxy = None  # the worker's own TCP proxy to the server (server queues only)
        self.partitioned_at: float | None = None
        self.partitioned_jobs: tuple[int, ...] = ()
        self.log_path, self.log_file = log_path, log_file
        self.paused_at: float | None = None
        self.paused_job: int | None = None
        self.stopping = False
        self.exit_noticed = False

    def state(self) -> str:
        rc = self.popen.poll()  # also reaps the zombie process of a child that died
        if rc is not None:
            return KILLED if rc < 0 else EXITED
        if self.paused_at is not None:
            return PAUSED
        return STOPPING if self.stopping else RUNNING


def _fault(log_path: str, max_bytes: int = 8_000) -> str | None:
    """The fault a worker's log says it is waiting out now, or None (the worker logs each wait and the end)."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - max_bytes))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        if faults.CLEARED in line:
            return None
        if faults.WAITING in line:
            return line.split(faults.WAITING, 1)[1].strip(" :")
    return None


def _hang_state(flag: str) -> tuple[bool, bool, int | None]:
    """(asked and not yet taken, taken by a handler, that handler's job id if written) for a hang request file."""
    asked = os.path.exists(flag)
    try:
        with open(demo.hung_marker(flag), encoding="utf-8") as fh:
            text = fh.read().strip()
    except FileNotFoundError:
        return asked, False, None
    return asked, True, int(text) if text.isdigit() else None  # empty: taken, its job id not written yet


def _signal(name: str) -> int:
    number = getattr(signal, name, None)
    if number is None:
        raise SignalsUnsupported(f"this platform has no {name}; pause and resume need SIGSTOP and SIGCONT")
    return number


def process_state(pid: int) -> str | None:
    """The one-letter state Linux reports in ``/proc/PID/stat`` ('R', 'S', 'T' = stopped, 'Z'...), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split(" ", 1)[0]  # the name in parentheses may hold spaces


# How long pause() waits for the kernel to show a SIGSTOPped worker stopped (a loaded machine may
# take a moment to schedule it) before it carries on anyway.
STOP_TIMEOUT = 5.0


def _wait_stopped(pid: int, timeout: float) -> None:
    """Return once ``pid`` is stopped ('T', or 't' under a tracer), has ended, or ``timeout`` passed
    (also at once where there is no /proc to tell)."""
    deadline = time.monotonic() + timeout
    while process_state(pid) not in ("T", "t", "Z", None) and time.monotonic() < deadline:
        time.sleep(0.001)


class Fleet:
    """Owns the worker processes of one queue file.

        ``log_dir`` defaults to ``<db>.logs`` beside the file; ``grace`` is how long
        ``shutdown`` waits after SIGTERM before SIGKILL; ``spawn`` returns once the worker
    says it started (at most ``start_timeout`` seconds). ``queue`` lets a caller share
        its ``Queue`` (the fleet reads the jobs table for ``status``); otherwise the
        fleet opens its own. Safe to call from several threads (a refresher and buttons).
    """

    def __init__(
        self,
        path: str | os.PathLike = "leaselab.db",
        *,
        log_dir: str | os.PathLike | None = None,
        grace: float = DEFAULT_GRACE,
        start_timeout: float = 20.0,
        queue: Queue | None = None,
        clock: Callable[[], float] = time.time,
        proxies: bool = True,
        actions_file: str | os.PathLike | None = None,
    ):
        # Absolute, so a notebook that changes folder later still finds its workers' files.
        path = os.fspath(path)
        self.path = path if is_server_url(path) else os.path.abspath(path)
        self.queue = queue if queue is not None else Queue(self.path)
        self.log_dir = Path(log_dir) if log_dir is not None else logs_path(self.path)
        self.grace = positive("grace", grace)
        self.start_timeout = positive("start_timeout", start_timeout)
        self.clock = clock
        # On a server queue each worker talks to the server through a proxy of its own, so one
        # worker can be cut off the network (partition) while the others carry on.
        self.proxies = proxies
        # A throw-away server's fleet (leaselab chaos) keeps its record with its run, not in the current folder.
        self.actions_file = Path(actions_file) if actions_file is not None else faults_path(self.path)
        self.actions: list[Action] = []
        self._procs: dict[str, _Proc] = {}
        self._lock = threading.RLock()
        self._counter = 0
        self._closed = False
        self._watcher: threading.Thread | None = None
        _LIVE_FLEETS.add(self)

    def __repr__(self) -> str:
        return f"Fleet({self.queue.backend.name!r}, workers={list(self._procs)})"  # a URL without its password

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- spawning -----------------------------------------------------------

    def _next_name(self) -> str:
        while True:
            self._counter += 1
            name = f"w{self._counter}"
            if name not in self._procs or self._procs[name].state() not in ALIVE:
                return name

    def spawn(
        self,
        handler: str = DEFAULT_HANDLER,
        lease: float = 3.0,
        name: str | None = None,
        *,
        poll: float = 0.05,
        max_poll: float = 0.5,
        exit_when_idle: bool = False,
        busy_timeout: float = 30.0,
        concurrency: int = 1,
        env: dict[str, str] | None = None,
        launcher: tuple[str, ...] | None = None,
        job_timeout: float | None = None,
        journal: str | os.PathLike | None = None,
    ) -> str:
        """Start a worker process and return its name (``w1``, ``w2``, ... unless given).

        The handler is imported here first, so a path that does not import raises
        ``HandlerError`` now instead of in a log nobody reads; a worker that exits
        while starting raises ``WorkerNotRunning`` with the end of its log. A name that belongs
        to a live worker raises ``WorkerExists``; a dead one's name may be reused. A worker
        that waits longer than ``busy_timeout`` for the write lock logs it and tries again
        (its badge says ``waiting``). ``concurrency`` > 1 runs that many jobs at once on
        threads (``leaselab worker --concurrency``). ``env`` adds to the worker's environment;
        ``launcher`` replaces the ``python -m leaselab`` that the worker's arguments follow (a
        program that changes the process before it runs ``leaselab.cli.main``, as a skewed clock does).
        ``job_timeout`` is the longest a job may run (``leaselab worker --job-timeout``): past it the
        worker gives the job up, and a one-slot worker whose handler hangs exits (status 5).
        ``journal`` is a folder where the worker keeps its journal (``leaselab worker --journal``).
        """
        load_handler(handler)
        lease = positive("lease", lease)
        job_timeout = None if job_timeout is None else positive("job_timeout", job_timeout)
        busy_timeout = positive("busy_timeout", busy_timeout)
        concurrency = integer("concurrency", concurrency, 1)
        with self._lock:
            if self._closed:
                raise WorkerNotRunning("this fleet was shut down; make a new Fleet to spawn workers")
            if name is None:
                name = self._next_name()
            elif not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
                raise ValueError(f"name must be 1-40 letters, digits, '_' or '-', got {name!r}")
            elif name in self._procs and self._procs[name].state() in ALIVE:
                raise WorkerExists(f"a worker named {name!r} is still alive (pid {self._procs[name].popen.pid})")
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"{name}.log"
            log_file = open(log_path, "ab", buffering=0)
            # The queue goes by environment, not argv: a server URL may hold a password, and ps shows argv.
            argv = [
                *(launcher or (sys.executable, "-m", "leaselab")),
                "worker",
                "--handler",
                handler,
                "--name",
                name,
                "--lease",
                repr(lease),
                "--poll",
                repr(poll),
                "--max-poll",
                repr(max_poll),
                "--ignore-sigint",
                "--busy-timeout",
                repr(busy_timeout),
            ]
            if exit_when_idle:
                argv.append("--exit-when-idle")
            if concurrency > 1:
                argv += ["--concurrency", str(concurrency)]
            if job_timeout is not None:
                argv += ["--job-timeout", repr(job_timeout)]
            if journal is not None:
                argv += ["--journal", os.fspath(journal)]
            # A name reused after its worker died must not inherit that worker's hang.
            hang_path = str(self.log_dir / f"{name}.hang")
            for stale in (hang_path, demo.hung_marker(hang_path)):
                try:
                    os.remove(stale)
                except FileNotFoundError:
                    pass
            proxy = None
            db = self.path
            if is_server_url(self.path) and self.proxies:
                # Its own proxy, so the fleet can cut this worker off the network and no other.
                proxy = Proxy(server_address(self.path))
                db = through(self.path, proxy.port)
            env = dict(os.environ, **(env or {}), PYTHONUNBUFFERED="1", LEASELAB_DB=db)
            env[demo.HANG_ENV] = hang_path
            # The handler imported here from the notebook's folder must import there too.
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
            try:
                popen = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            except BaseException:
                log_file.close()
                if proxy is not None:
                    proxy.close()
                raise
            proc = _Proc(name, popen, handler, lease, str(log_path), log_file, concurrency, hang_path)
            proc.proxy = proxy
            self._procs[name] = proc
            slots = f" concurrency={concurrency}" if concurrency > 1 else ""
            limit = f" job_timeout={job_timeout:g}s" if job_timeout is not None else ""
            self._record(name, "spawn", popen.pid, f"{handler} lease={lease:g}s{slots}{limit}")
            self._watch()
            self._wait_started(proc, log_path.stat().st_size if log_path.exists() else 0)
            return name

    def _wait_started(self, proc: _Proc, log_start: int) -> None:
        # Until the worker has installed its SIGTERM handler, a stop would kill it outright,
        # and a worker that cannot start at all (a bad file) should fail the spawn, not a log.
        deadline = time.monotonic() + self.start_timeout

        def said_started() -> bool:
            with open(proc.log_path, "rb") as fh:
                fh.seek(log_start)
                return f" {STARTED}".encode() in fh.read()

        while time.monotonic() < deadline:
            if said_started():
                return
            if proc.popen.poll() is not None:
                self._notice_exit(proc)
                if said_started():  # it started, and ended between the read and the poll (a crash handler)
                    return
                tail = self.log_tail(proc.name, lines=5)
                raise WorkerNotRunning(
                    f"worker {proc.name!r} exited at start (code {proc.popen.returncode}); its log ends:\n{tail}"
                )
            time.sleep(0.02)
        # Slow machine: carry on; the worker is alive and will get there.

    # -- signals --------------------------------------------------------------

    def _get(self, name: str) -> _Proc:
        try:
            return self._procs[name]
        except (KeyError, TypeError):
            known = ", ".join(self._procs) or "none yet"
            raise UnknownWorker(f"no worker named {name!r} in this fleet (workers: {known})") from None

    def _alive(self, name: str, verb: str) -> _Proc:
        proc = self._get(name)
        state = proc.state()
        if state not in ALIVE:
            self._notice_exit(proc)
            how = (
                f"killed by signal {-proc.popen.returncode}"
                if state == KILLED
                else f"exited with code {proc.popen.returncode}"
            )
            raise WorkerNotRunning(f"cannot {verb} worker {name!r}: it was {how}")
        return proc

    def pause(self, name: str) -> None:
        """SIGSTOP the worker: it freezes mid-job, heartbeats stop, and its lease runs out."""
        sig = _signal("SIGSTOP")
        with self._lock:
            proc = self._alive(name, "pause")
            if proc.paused_at is None:
                os.kill(proc.popen.pid, sig)
                # kill() returns once the signal is sent, not once it has landed: a worker waiting
                # for a CPU runs on (and may commit a claim) until it is next scheduled.
                _wait_stopped(proc.popen.pid, STOP_TIMEOUT)
                proc.paused_at = self.clock()
                # Read after the stop: a frozen process can no longer claim or let go.
                held = [j.id for j in self.queue.jobs(status="running", limit=10_000) if j.worker == name]
                proc.paused_job = held[0] if held else None
                holding = (
                    None
                    if not held
                    else (
                        f"holding job {held[0]}"
                        if len(held) == 1
                        else "holding jobs " + ", ".join(map(str, sorted(held)))
                    )
                )
                self._record(name, "pause", proc.popen.pid, holding)

    def resume(self, name: str) -> None:
        """SIGCONT a paused worker: it carries on as if no time had passed, and learns otherwise."""
        sig = _signal("SIGCONT")
        with self._lock:
            proc = self._alive(name, "resume")
            if proc.paused_at is not None:
                os.kill(proc.popen.pid, sig)
                proc.paused_at = None
                self._record(name, "resume", proc.popen.pid)

    def partition(self, name: str) -> None:
        """Cut the worker off from the database server: it runs on, but its queries hang unanswered.

        Only for a server queue (each worker then talks to the server through its own proxy);
        a SQLite file has no network to cut. Its heartbeats stop reaching the server, so its
        lease runs out and the job is reaped and handed on, while the worker still believes
        it holds it: the server-side zombie. ``heal`` lets its traffic through again.
        """
        with self._lock:
            proc = self._alive(name, "cut off")
            self._proxy_of(proc).partition()
            if proc.partitioned_at is None:
                proc.partitioned_at = self.clock()
                held = [j.id for j in self.queue.jobs(status="running", limit=10_000) if j.worker == name]
                proc.partitioned_jobs = tuple(sorted(held))
                self._record(
                    name,
                    "partition",
                    proc.popen.pid,
                    None if not held else "holding jobs " + ", ".join(map(str, sorted(held))),
                )

    def heal(self, name: str) -> None:
        """Reconnect a worker cut off by ``partition``: what waited is delivered, and it learns what it lost."""
        with self._lock:
            proc = self._alive(name, "reconnect")
            self._proxy_of(proc).heal()
            if proc.partitioned_at is not None:
                proc.partitioned_at = None
                self._record(name, "heal", proc.popen.pid)

    def drop_reply(self, name: str) -> None:
        """Let the worker's next statement reach the server and run, then throw its reply away and cut it.

        The worker's driver raises, not knowing whether the statement went through (it did):
        the fault a worker must find out by its token, never guess. Server queues only.
        """
        with self._lock:
            proc = self._alive(name, "drop a reply of")
            self._proxy_of(proc).drop_next_reply()
            self._record(name, "drop-reply", proc.popen.pid)

    def _proxy_of(self, proc: _Proc) -> Proxy:
        if proc.proxy is None:
            if not is_server_url(self.path):
                raise PartitionUnsupported(
                    f"worker {proc.name!r} uses the SQLite file {self.path}: there is no network between a worker "
                    "and a file to cut (pause it instead); partitions need a postgresql:// queue"
                )
            raise PartitionUnsupported(f"worker {proc.name!r} was started without a proxy (Fleet(proxies=False))")
        return proc.proxy

    def kill(self, name: str) -> None:
        """SIGKILL the worker: a crash with no clean-up; its job comes back when the lease is reaped."""
        with self._lock:
            proc = self._alive(name, "kill")
            proc.popen.kill()
            proc.popen.wait()
            proc.paused_at = None
            proc.exit_noticed = True
            self._record(name, "kill", proc.popen.pid)

    def stop(self, name: str) -> None:
        """SIGTERM the worker: it finishes its current job, then exits. Returns without waiting."""
        with self._lock:
            proc = self._alive(name, "stop")
            if proc.paused_at is not None:  # a stopped process cannot handle SIGTERM
                self.resume(name)
            proc.popen.terminate()
            proc.stopping = True
            self._record(name, "stop", proc.popen.pid)

    def hang(self, name: str) -> None:
        """Make the worker's current handler hang, or its next one if it is idle: it waits for ever.

        The process stays alive and its heartbeat thread goes on renewing the lease, so no reaper
        ever takes the job: only a timeout does (``spawn(job_timeout=)``, ``enqueue(timeout=)``),
        after which a one-slot worker exits with status 5. The request is a file the demo handlers
        look for (``demo.HANG_ENV``); one request hangs one handler. ``HangUnsupported`` for a
        worker whose handler would not read it.
        """
        with self._lock:
            proc = self._alive(name, "hang")
            if proc.handler not in HANGABLE:
                raise HangUnsupported(
                    f"worker {name!r} runs {proc.handler}, which does not read hang requests; "
                    f"only {' and '.join(HANGABLE)} do"
                )
            with open(proc.hang_path, "w", encoding="utf-8"):
                pass
            self._record(name, "hang", proc.popen.pid)

    def pause_all(self) -> list[str]:
        """Pause every live worker that is not paused yet; returns their names."""
        with self._lock:
            names = [n for n, p in self._procs.items() if p.state() in (RUNNING, STOPPING)]
            for n in names:
                self.pause(n)
            return names

    def resume_all(self) -> list[str]:
        """Resume every paused worker; returns their names."""
        with self._lock:
            names = [n for n, p in self._procs.items() if p.state() == PAUSED]
            for n in names:
                self.resume(n)
            return names

    def wait(self, name: str, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds for the worker to end; its return code, or None if still alive."""
        proc = self._get(name)
        try:
            rc = proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        with self._lock:
            self._notice_exit(proc)
        return rc

    # -- looking ------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Every worker name this fleet has spawned, in spawn order."""
        with self._lock:
            return list(self._procs)

    def pid(self, name: str) -> int:
        """The worker's process id."""
        return self._get(name).popen.pid

    def log_path(self, name: str) -> str:
        """The file the worker's output goes to."""
        return self._get(name).log_path

    def log_tail(self, name: str, lines: int = 30, max_bytes: int = 64_000) -> str:
        """The last ``lines`` lines of the worker's log."""
        path = self._get(name).log_path
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - max_bytes))
                data = fh.read()
        except FileNotFoundError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])

    def note(self, name: str, message: str) -> None:
        """Append ``message`` to the worker's log as a line of the fleet's own, stamped and named as
        the worker's own lines are: what the log cannot say for itself, such as who killed it."""
        path = self._get(name).log_path
        with self._lock, open(path, "a", encoding="utf-8") as fh:
            LineLog(fh, clock=self.clock)(f"{name}: {message}")

    def status(self) -> list[WorkerStatus]:
        """Every worker, in spawn order: state, current job and lease left (read from the jobs table)."""
        with self._lock:
            procs = list(self._procs.values())
            states = {p.name: p.state() for p in procs}
            for p in procs:
                if states[p.name] not in ALIVE:
                    self._notice_exit(p)
        held: dict[str | None, list] = {}
        if procs:
            for job in self.queue.jobs(status="running", limit=10_000):
                held.setdefault(job.worker, []).append(job)
        now = self.clock()
        out = []
        for p in procs:
            mine = held.get(p.name, [])
            hang_asked, hung, hung_job = _hang_state(p.hang_path) if p.hang_path else (False, False, None)
            # The job shown with its lease left is the one whose lease runs out first.
            first = min(mine, key=lambda j: (j.lease_until is None, j.lease_until or 0.0, j.id), default=None)
            out.append(
                WorkerStatus(
                    name=p.name,
                    pid=p.popen.pid,
                    state=states[p.name],
                    job_id=first.id if first else None,
                    lease_left=(first.lease_until - now) if first and first.lease_until is not None else None,
                    lease=p.lease,
                    paused_for=None if p.paused_at is None else now - p.paused_at,
                    paused_job=None if p.paused_at is None else p.paused_job,
                    partitioned_for=None if p.partitioned_at is None else now - p.partitioned_at,
                    partitioned_jobs=() if p.partitioned_at is None else p.partitioned_jobs,
                    returncode=p.popen.returncode,
                    handler=p.handler,
                    log_path=p.log_path,
                    fault=_fault(p.log_path) if states[p.name] in ALIVE else None,
                    jobs=tuple(sorted(j.id for j in mine)),
                    concurrency=p.concurrency,
                    replies_dropped=p.proxy.replies_dropped if p.proxy is not None else 0,
                    hang_asked=hang_asked,
                    hung=hung,
                    hung_job=hung_job,
                )
            )
        return out

    def state(self, name: str) -> str:
        """One worker's state: running, paused, stopping, killed or exited."""
        with self._lock:
            return self._get(name).state()

    # -- the end ----------------------------------------------------------------

    def shutdown(self, grace: float | None = None) -> None:
        """End every worker: SIGCONT the paused, SIGTERM all, SIGKILL what is left after ``grace`` seconds.

        Idempotent; runs by itself at interpreter exit.
        """
        grace = self.grace if grace is None else positive("grace", grace)
        with self._lock:
            self._closed = True
            live = [p for p in self._procs.values() if p.state() in ALIVE]
            for p in live:
                try:
                    if p.paused_at is not None:
                        os.kill(p.popen.pid, _signal("SIGCONT"))
                        p.paused_at = None
                    if p.proxy is not None:  # a worker cut off the network could not finish its job
                        p.proxy.heal()
                    p.popen.terminate()
                except (ProcessLookupError, SignalsUnsupported):
                    pass
            deadline = time.monotonic() + grace
            for p in live:
                try:
                    p.popen.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.popen.kill()
                    p.popen.wait()
            for p in self._procs.values():
                self._notice_exit(p)
                p.log_file.close()
                if p.proxy is not None:
                    p.proxy.close()
            # The queue stays open: status() after shutdown still shows who held what.
            _LIVE_FLEETS.discard(self)

    close = shutdown

    # -- the record -------------------------------------------------------------

    def _watch(self) -> None:
        # A crash is recorded when it happens, not when someone next asks for the status:
        # a timeline must not show a dead worker's attempt running on until the reap.
        if self._watcher is None or not self._watcher.is_alive():
            self._watcher = threading.Thread(target=self._watch_exits, name="fleet-watcher", daemon=True)
            self._watcher.start()

    def _watch_exits(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                for p in self._procs.values():
                    if p.state() not in ALIVE:
                        self._notice_exit(p)
            time.sleep(WATCH_EVERY)

    def _notice_exit(self, proc: _Proc) -> None:
        if proc.exit_noticed or proc.popen.returncode is None:
            return
        proc.exit_noticed = True
        proc.paused_at = None
        proc.partitioned_at = None
        rc = proc.popen.returncode
        self._record(proc.name, "exit", proc.popen.pid, f"signal {-rc}" if rc < 0 else f"code {rc}")

    def _record(self, name: str, action: str, pid: int, detail: str | None = None) -> None:
        entry = Action(at=self.clock(), worker=name, action=action, pid=pid, detail=detail)
        self.actions.append(entry)
        try:
            with open(self.actions_file, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(asdict(entry)) + "\n")
        except OSError:
            pass  # the in-memory record still serves this kernel's timeline


# Strong references: a fleet nobody holds any more must still end its workers at exit.
_LIVE_FLEETS: set[Fleet] = set()


@atexit.register
def _shutdown_all() -> None:
    for fleet in list(_LIVE_FLEETS):
        try:
            fleet.shutdown(grace=2.0)
        except Exception:
            pass
