"""Signal handlers whose work runs on a thread of their own, so a signal cannot deadlock the process.

Python runs a signal's handler on the main thread between two bytecodes, wherever that thread
happens to be, locks held included. ``threading.Event.set()`` takes the lock of the Event's
Condition, and ``Event.wait()`` holds that same lock for a few bytecodes on its way in and out.
A SIGTERM landing there, with a handler that sets the Event, leaves the main thread waiting on
a lock it holds itself, for ever: Python's ``signal`` documentation warns against any lock in a
handler (since gh-144706). A ``leaselab worker`` stopped with SIGTERM hung that way once in CI,
idle in its poll.

And a Python handler runs only when the main thread next runs Python code. The kernel hands a
signal sent to the process to any one of its threads that does not block it: when that is not the
main thread, a main thread asleep in a handler's ``time.sleep(3600)`` (or waiting in C for a busy
file) is not woken, and the handler waits for as long as it sleeps. A worker asked to stop by
SIGTERM then said nothing for minutes, in CI, with both cores busy.

So nothing here waits for the main thread: the relay gives the pipe's write end to
``signal.set_wakeup_fd``, and the interpreter's own C-level handler, on whichever thread the signal
lands, writes the signal's number into the pipe at once (it takes no Python lock). A thread of this
module's own reads the pipe and calls the action; the Python-level handler does nothing.
"""

from __future__ import annotations

import os
import signal
import threading
import traceback
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

# What to do on a signal: a function of no arguments, run on the relay's thread, or SIG_IGN.
Action = Callable[[], None] | signal.Handlers


class Relay:
    """A context manager: from ``__enter__`` to ``__exit__``, each signal in ``actions`` runs its action
    on the relay's own thread (``signal.SIG_IGN`` ignores it); at the exit the handlers that were there
    before are put back. Signals arriving together run their actions one after another, in order.

    Install it on the main thread, as ``signal.signal`` requires.
    """

    def __init__(self, actions: Mapping[int, Action], name: str = "signals"):
        self._actions = dict(actions)
        self._name = name
        self._before: dict[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}
        self._read = self._write = -1
        self._wakeup_before = -1
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Relay:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # a burst that fills the pipe drops signals, never blocks
        self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
        self._thread.start()
        try:
            self._wakeup_before = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
            for signum, action in self._actions.items():
                handler = action if action is signal.SIG_IGN else self._handle
                self._before[signum] = signal.signal(signum, handler)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, before in self._before.items():
            signal.signal(signum, before)
        self._before.clear()
        signal.set_wakeup_fd(self._wakeup_before)  # whoever had it before (asyncio, say) has it again
        self._wakeup_before = -1
        # Handlers are off, so nothing writes any more: closing the write end ends the thread's read.
        os.close(self._write)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        os.close(self._read)

    def _handle(self, signum: int, _frame: object) -> None:
        """The Python-level handler: it must be there for the C-level one to write to the wakeup pipe,
        and has nothing left to do (a full pipe drops the byte: that many queued say the same)."""

    def _serve(self) -> None:
        while data := os.read(self._read, 64):
            for signum in data:
                action = self._actions.get(signum)
                if action is None or action is signal.SIG_IGN:
                    continue  # a signal the program handles itself (it is written to the pipe too)
                try:
                    action()  # type: ignore[operator]
                except Exception:  # a failed action must not end the relay: the next signal still counts
                    traceback.print_exc()
