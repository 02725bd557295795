"""A worker process whose own clock is wrong (lesson 6): ``time.time`` is shifted before leaselab loads.

Everything in that process that asks the operating system for the time gets it ``skew``
seconds off, as on a machine whose clock has drifted. The worker is the ordinary
``leaselab worker`` command; the queue goes by the environment (``LEASELAB_DB``), so a
server URL never shows in ``ps``. Standard library only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..arguments import number, positive
from ..worker import handler_path
from . import demo

SKEWED_WORKER = r"""
import sys, time
skew = float(sys.argv[1])
real = time.time
time.time = lambda: real() + skew
from leaselab.cli import main
sys.exit(main(sys.argv[2:]))
"""


def spawn(
    db: str,
    skew: float,
    name: str,
    log: str | os.PathLike,
    *,
    lease: float = 5.0,
    handler: str = handler_path(demo.echo),
) -> subprocess.Popen:
    """Start ``leaselab worker`` for ``db`` with its clock ``skew`` seconds off; its output goes to ``log``.

    End it with ``terminate()`` (it finishes its job and exits) and ``wait()``.
    """
    skew = number("skew", skew)
    lease = positive("lease", lease)
    env = dict(os.environ, LEASELAB_DB=db, PYTHONUNBUFFERED="1")
    with open(Path(log), "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-c",
                SKEWED_WORKER,
                repr(skew),
                "worker",
                "--handler",
                handler,
                "--name",
                name,
                "--lease",
                repr(lease),
                "--poll",
                "0.05",
                "--max-poll",
                "0.2",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
