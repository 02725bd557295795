"""How a worker behaves as a process: SIGTERM finishes the jobs it holds and stops, handing back
whatever is still running when the grace runs out; a first Ctrl-C does the same and says which jobs it
is finishing; a second SIGTERM or Ctrl-C hands the jobs back and quits at once; a worker whose parent
is gone exits, and so does one whose every slot holds a handler past its timeout.

``leaselab worker`` and ``Worker.run()`` called on a program's main thread both run inside a
``ProcessControl``, so a worker behaves the same whichever way it was started. The signals act on a
relay thread, never inside the main thread's wait (``signals.Relay``), and the handlers that were in
place before are back when the control ends: a worker may run inside a longer-lived program.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .logline import stamp
from .signals import Action, Relay

if TYPE_CHECKING:
    from .loop import Worker

EXIT_INTERRUPTED = 130  # what a shell reports for a program ended by Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # ... and by SIGTERM (128 + SIGTERM): a second SIGTERM quits at once
EXIT_ORPHANED = 3  # the process that started the worker is gone
EXIT_FILE_GONE = 4  # the queue file was deleted, renamed or replaced under the worker
EXIT_HUNG = 5  # every slot holds a handler past its timeout: restart the worker to get them back
PARENT_CHECK = 0.5  # seconds between two looks at the parent
QUIT_WAIT = 5.0  # seconds a second stop signal waits for the jobs to be handed back before it exits anyway


def say(line: str) -> None:
    """Write one line straight to stdout, past ``sys.stdout``'s buffer: said before an ``os._exit()``, it stays said."""
    data = line.encode(errors="replace") + b"\n"
    try:
        while data:
            data = data[os.write(sys.stdout.fileno(), data) :]
    except (OSError, ValueError):  # output closed or gone: the stop itself matters more than saying so
        pass


def jobs_phrase(ids: list[int]) -> tuple[str, str]:
    """("job 12", "it") or ("jobs 12, 13", "them")."""
    if len(ids) == 1:
        return f"job {ids[0]}", "it"
    return "jobs " + ", ".join(map(str, ids)), "them"


def watch_parent(parent: int, done: threading.Event, interval: float = PARENT_CHECK) -> None:
    """Exit the moment the process that started us is gone, so no worker outlives a killed kernel;
    return once ``done`` is set (the worker finished, and the program it ran in goes on)."""
    while not done.wait(interval):
        if os.getppid() != parent:
            os._exit(EXIT_ORPHANED)


class ProcessControl:
    """SIGTERM, Ctrl-C (once, then again) and the parent's death, for one worker process.

    Enter it before the worker exists (opening a queue takes a while, and a stop asked for then must
    still be clean), then ``attach`` the worker. ``log`` gets the lines it says; with
    ``ignore_sigint`` Ctrl-C is ignored (the lab's workers: a notebook's Interrupt reaches the whole
    process group). Only the main thread can install signal handlers, so enter it there.
    """

    active = False  # one control per process: Worker.run() inside the command's control adds none

    def __init__(self, log: Callable[[str], Any], *, ignore_sigint: bool = False, parent_watch: bool = True):
        self.log = log
        self.ignore_sigint = ignore_sigint or signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        self.parent_watch = parent_watch
        self.stop_asked = threading.Event()
        self.worker: Worker | None = None
        self._interrupts = 0
        self._terms = 0
        self._held: list[int] | None = None  # the jobs being finished after a first Ctrl-C, once known
        self._announcer: threading.Thread | None = None
        # Held by interrupted() from its stop to the announcer's start, and by the run's end to look
        # for that announcer: a run ended by this very stop always finds it (and joins it) then.
        self._announcing = threading.Lock()
        self._relay: Relay | None = None
        self._done = threading.Event()
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> ProcessControl:
        actions: dict[int, Action] = {
            signal.SIGINT: signal.SIG_IGN if self.ignore_sigint else self._interrupted,
            signal.SIGTERM: self._terminated,
        }
        self._relay = Relay(actions, name="worker-signals").__enter__()
        ProcessControl.active = True
        parent = os.getppid()
        if self.parent_watch and parent > 1:  # a worker waiting for its server must not outlive who started it
            self._watcher = threading.Thread(
                target=watch_parent, args=(parent, self._done), daemon=True, name="parent-watch"
            )
            self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.finish_announcing()
        finally:
            ProcessControl.active = False
            self._done.set()
            if self._watcher is not None:
                self._watcher.join()
            if self._relay is not None:
                self._relay.__exit__(*exc)

    def attach(self, worker: Worker) -> None:
        """From now on a stop reaches ``worker``; one asked for before it existed reaches it at once."""
        self.worker = worker
        worker.on_file_gone = self.file_gone
        worker.on_hung = self.hung
        worker.on_grace_out = self.grace_out
        if self.stop_asked.is_set():
            worker.stop()

    def finish_announcing(self) -> None:
        """Wait for the line that says which jobs are being finished: it reads the queue, so before it closes."""
        with self._announcing:
            started = self._announcer
        if started is not None:
            started.join()

    @property
    def how_to_stop(self) -> str:
        return f"ignoring Ctrl-C; stop it with: kill {os.getpid()}" if self.ignore_sigint else "Ctrl-C to stop"

    def stop(self) -> None:
        self.stop_asked.set()
        if self.worker is not None:
            self.worker.stop()

    def _announce(self) -> None:
        # Asked of the queue, on a thread of its own: a busy file must not hold up a second Ctrl-C,
        # and with several slots no single attribute knows every job this worker holds.
        worker = self.worker
        assert worker is not None
        try:
            ids = sorted(j.id for j in worker.queue.jobs(status="running", limit=100_000) if j.worker == worker.name)
        except Exception:  # a busy file, or a worker that finished and closed it meanwhile
            self.log("stopping, Ctrl-C again to quit at once")
            return
        self._held = ids
        if ids:
            what, pronoun = jobs_phrase(ids)
            self.log(f"finishing {what}, Ctrl-C again to hand {pronoun} back and quit")
        else:
            self.log("no job running: stopping")

    def _terminated(self) -> None:
        """SIGTERM: the first stops the worker (it finishes its jobs within its grace); a second stops now."""
        self._terms += 1
        if self._terms > 1:
            self._quit_now(EXIT_TERMINATED)
        self.stop()

    def _quit_now(self, status: int) -> None:
        """Hand back the jobs still held (fenced, at once), say so, and end the process with ``status``.

        The hand-back gets ``QUIT_WAIT`` seconds on a thread of its own: a database that does not answer
        (a lock held for a minute, a server gone) must not keep a process asked twice to stop. Whatever it
        did or did not do, the process ends; a job not handed back comes back when its lease runs out."""
        worker = self.worker
        released: dict[int, str] = {}

        def hand_back() -> None:
            try:
                released.update(worker.release_held("stopped at once") if worker is not None else {})
            except BaseException as exc:  # noqa: BLE001  (the stop itself matters more than why this failed)
                say(f"{stamp(time.time())} could not hand the jobs back ({type(exc).__name__}: {exc})")

        helper = threading.Thread(target=hand_back, name="hand-back", daemon=True)
        helper.start()
        helper.join(QUIT_WAIT)
        if not released:
            say(f"{stamp(time.time())} stopped at once")
        os._exit(status)

    def hung(self, ids: list[int]) -> None:
        """Every slot holds a handler past its timeout (jobs ``ids``, already given up and back in the
        queue): Python cannot stop those threads, so the process ends, for its supervisor to start a
        fresh worker (status 5)."""
        what, _ = jobs_phrase(ids)
        say(
            f"{stamp(time.time())} exiting: every slot holds a handler past its timeout ({what}); "
            f"start a new worker (exit status {EXIT_HUNG})"
        )
        os._exit(EXIT_HUNG)

    def grace_out(self, released: dict[int, str]) -> None:
        """The grace ran out with handlers still running, their jobs handed back: the stop is done."""
        say(f"{stamp(time.time())} exiting: the grace ran out, the unfinished jobs are back in the queue")
        os._exit(0)

    def file_gone(self, exc: Exception) -> None:
        """The queue file is gone (deleted, renamed or replaced): nothing the worker holds can be written
        any more, and a handler may run for ever, so the process ends now, saying why (status 4)."""
        say(f"{stamp(time.time())} exiting: {exc}")
        os._exit(EXIT_FILE_GONE)

    def _interrupted(self) -> None:
        self._interrupts += 1
        if self._interrupts > 1:
            self._quit_now(EXIT_INTERRUPTED)
        with self._announcing:
            self.stop()
            if self.worker is None:
                say(f"{stamp(time.time())} stopping before the first job, Ctrl-C again to quit at once")
            else:
                self._announcer = threading.Thread(target=self._announce, name="ctrl-c")
                self._announcer.start()
