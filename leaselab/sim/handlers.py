"""A user's handler in the simulated world: loaded by its ``module:function`` name, run in an outside world
of its own for each schedule, its effects recorded through leaselab's effects API and checked for repeats.

The handler is called as a worker calls it, with the ``Job`` (its ``id``, ``attempts``, ``token`` and
``worker``; the payload is the simulator's own), once its simulated running time is over. While it runs,
the current folder is a scratch folder emptied before every schedule, and ``$LEASELAB_EFFECTS`` names an
effects file in it, so ``record_effect(job, key=...)`` (``leaselab.check.effects``) records each effect
that took hold and a store the handler keeps in the current folder (a ``Ledger``, a ``FencedStore``)
starts empty with every schedule. The same job's effect with the same key recorded twice in one schedule
is ``effect_repeated``: the handler is not idempotent, and the schedule that led there is the witness.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..check.effects import ENV, read_effects
from ..errors import HandlerError
from ..worker import load_handler
from .errors import BadHandler
from .model import Violation

# Where the scratch folder goes: in memory when the system has a RAM disk, since a handler's store may
# sync every write and the simulator runs thousands of schedules.
RAM_DISK = "/dev/shm"


def load(spec: str) -> Callable[..., Any]:
    """The function ``spec`` (``module:function``) names; ``BadHandler`` says why it cannot be had."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise BadHandler("handler_form", spec=spec)
    try:
        return load_handler(spec)
    except HandlerError as exc:
        raise BadHandler("handler_import", spec=spec, error=str(exc)) from None


class Recorded:
    """A handler as the simulated world calls it: ``start()`` before each schedule, then ``handler(job)``."""

    def __init__(self, fn: Callable[..., Any], spec: str, folder: str):
        self.fn, self.spec, self.folder = fn, spec, folder
        self.effects_file = os.path.join(folder, "effects.jsonl")
        self.seen: dict[tuple[int, str | None], dict[str, Any]] = {}
        self.lines = 0  # lines of the effects file already judged

    def start(self) -> None:
        """A new schedule: an empty outside world, no effect recorded yet."""
        for name in os.listdir(self.folder):
            path = os.path.join(self.folder, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        self.seen.clear()
        self.lines = 0

    def __call__(self, job: Any) -> Any:
        before_env, before_cwd = os.environ.get(ENV), os.getcwd()
        os.environ[ENV] = self.effects_file
        os.chdir(self.folder)
        try:
            return self.fn(job)
        finally:
            os.chdir(before_cwd)
            if before_env is None:
                del os.environ[ENV]
            else:
                os.environ[ENV] = before_env
            self.judge()  # an effect that took hold counts even when the handler raised after it

    def judge(self) -> None:
        """Raise ``Violation("effect_repeated")`` for the first new effect whose job and key were recorded before."""
        lines = read_effects(self.effects_file)
        new, self.lines = lines[self.lines :], len(lines)
        for line in new:
            key = (line.get("job"), line.get("key"))
            first = self.seen.setdefault(key, line)  # type: ignore[arg-type]
            if first is not line:
                which = f"effect {line.get('key')!r}" if line.get("key") is not None else "effect"
                raise Violation(
                    "effect_repeated",
                    f"job {line.get('job')}'s {which} took hold twice: in attempt {first.get('attempt')} on "
                    f"{first.get('worker')} and again in attempt {line.get('attempt')} on {line.get('worker')}; "
                    f"{self.spec} is not idempotent (give the effect an idempotency key, or write it in the "
                    f"completion's transaction)",
                )


@contextmanager
def recorded(spec: str) -> Iterator[Recorded]:
    """The handler ``spec`` names, ready for the simulator; its scratch folder is removed when the block ends."""
    fn = load(spec)
    folder = tempfile.mkdtemp(prefix="leaselab-sim-", dir=RAM_DISK if os.path.isdir(RAM_DISK) else None)
    try:
        yield Recorded(fn, spec, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
