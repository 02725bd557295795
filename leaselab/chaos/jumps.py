"""A worker process whose clock can jump: ``time.time`` reads a shift that the nemesis sets while it runs.

As lesson 6's skewed worker (``leaselab.harness.skew``), the shift is put into ``time.time``
before leaselab loads, so everything in that process that asks the operating system for the
wall-clock time gets it shifted; unlike that one, the shift changes while the worker runs:
the nemesis writes a number of seconds into the worker's clock file and sends it SIGUSR1,
and from that moment its clock is that far off (0: right again). The monotonic clock, on
which a worker keeps its own lease, does not move. Standard library only.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from ..arguments import number

CLOCK_FILE_ENV = "LEASELAB_CLOCK_FILE"

# The handler is in place before leaselab is even imported, so a jump sent once the worker has
# said it started can never meet SIGUSR1's default action (which ends the process).
JUMPING_WORKER = r"""
import os, signal, sys, time
path = os.environ["LEASELAB_CLOCK_FILE"]
shift = 0.0
def reread(*_):
    global shift
    try:
        with open(path) as fh:
            shift = float(fh.read().strip() or 0)
    except (OSError, ValueError):
        pass
real = time.time
time.time = lambda: real() + shift
signal.signal(signal.SIGUSR1, reread)
from leaselab.cli import main
sys.exit(main(sys.argv[1:]))
"""

LAUNCHER = (sys.executable, "-c", JUMPING_WORKER)


def environment(clock_file: str | os.PathLike) -> dict[str, str]:
    """What a jumping worker needs in its environment: the file its clock's shift is read from."""
    return {CLOCK_FILE_ENV: os.fspath(clock_file)}


def jump(pid: int, clock_file: str | os.PathLike, seconds: float) -> None:
    """Set the worker's clock ``seconds`` off the true time (0: back to true), now."""
    seconds = number("seconds", seconds)
    Path(clock_file).write_text(repr(seconds), encoding="ascii")
    os.kill(pid, signal.SIGUSR1)
