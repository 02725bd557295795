"""Process helpers for the tests: run a check as an unprivileged user, read a worker's whole log, and tear a
test's fleet down leaving no worker behind."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from tests.support.polling import pid_gone

# A program, run by the Python of another environment (a fresh clone's): one notebook, Run All.
RUN_NOTEBOOK = Path(__file__).resolve().parent / "run_notebook.py"

NOBODY = 65534  # uid and gid of "nobody": a user the permission bits apply to (root ignores them)


def as_nobody(fn: Callable[[], str]) -> str:
    """Return ``fn()``, run as uid/gid 65534 in a forked child when this process is root.

    Forking (not a fresh interpreter) because this interpreter may live where that user cannot
    read. An exception in the child comes back as "unexpected <type>: <message>".
    """
    if os.geteuid() != 0:
        return fn()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, try, report, and leave without running pytest's clean-up
        code = 0
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = fn()
        except BaseException as exc:  # noqa: BLE001 - everything must reach the parent
            out, code = f"unexpected {type(exc).__name__}: {exc}", 1
        os.write(write, out.encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        out = fh.read().decode()
    os.waitpid(pid, 0)
    return out


# A test is over when its teardown runs: its workers get a moment to take SIGTERM, not the fleet's
# grace (5 s by default, which a worker in the middle of a long job would use to the end).
TEARDOWN_GRACE = 0.5


def shut_down(fleet) -> None:
    """A test fleet's teardown: ``shutdown()`` with ``TEARDOWN_GRACE``, then SIGKILL any worker that outlived it."""
    pids = [fleet.pid(n) for n in fleet.names]
    fleet.shutdown(grace=TEARDOWN_GRACE)
    for pid in pids:
        if not pid_gone(pid):  # pragma: no cover - shutdown failed; do not leave it running
            os.kill(pid, signal.SIGKILL)


def log_of(fleet, name: str) -> str:
    """Everything worker ``name`` of ``fleet`` wrote so far, stdout and stderr (``fleet.log_tail`` gives its end)."""
    return Path(fleet.log_path(name)).read_text(errors="replace")
