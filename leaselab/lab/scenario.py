"""Scripted scenarios: replay the same failure the same way every time, step by step or all at once.

A scenario is a list of small steps, run against a ``Lab`` (the dashboard follows
along) or a bare ``Fleet``::

    s = Scenario([spawn("w1"), spawn("w2"), enqueue(5, seconds=2),
                  pause("w1"), wait_leases(2), resume("w1"), wait_idle()], lease=2)
    s.step(lab)     # run the next step; returns it (None when the scenario is over)
    s.run(lab)      # run the rest

or the same in a tiny text form, one step a line (``#`` starts a comment)::

    s = Scenario.parse('''
        spawn w1
        spawn w2
        enqueue 5 seconds=2
        pause w1
        wait leases=2
        resume w1
        wait idle
    ''', lease=2)

Verbs: ``spawn [NAME] [lease=S] [handler=MOD:FN] [timeout=S]``, ``enqueue N [seconds=S]
[kind=sleep|fail|crash] [priority=P] [delay=S]``, ``pause NAME``, ``resume NAME``, ``kill NAME``,
``hang NAME``, ``stop NAME``,
``pause_all``, ``resume_all``, ``reap``, ``wait SECONDS``, ``wait leases=N``,
``wait running=N [timeout=S]``, ``wait idle [timeout=S]``.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..harness.fleet import DEFAULT_HANDLER
from .errors import ScenarioTimeout

KINDS = ("sleep", "fail", "crash")


def demo_payload(kind: str = "sleep", seconds: float = 2.0) -> dict[str, Any]:
    """The ``leaselab.harness.demo:task`` payload for a job that sleeps, fails on every attempt, or crashes once.

    A crash hits the first attempt only: a job that crashed every worker would take the whole fleet down.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    payload: dict[str, Any] = {"seconds": seconds}
    if kind == "fail":
        payload["fail"] = True
    elif kind == "crash":
        payload["crash"] = 1
    return payload


@dataclass(frozen=True)
class Step:
    """One scenario step: a verb and its arguments. Build them with the functions below."""

    verb: str
    args: tuple = ()
    options: tuple = field(default_factory=tuple)  # (key, value) pairs, kept hashable and ordered

    def __str__(self) -> str:
        parts = [self.verb, *map(str, self.args), *(f"{k}={v}" for k, v in self.options)]
        return " ".join(parts)

    @property
    def kw(self) -> dict[str, Any]:
        return dict(self.options)


def _step(verb: str, *args: Any, **options: Any) -> Step:
    return Step(verb, tuple(args), tuple((k, v) for k, v in options.items() if v is not None))


def spawn(
    name: str | None = None, lease: float | None = None, handler: str | None = None, timeout: float | None = None
) -> Step:
    """Start a worker (the scenario's lease unless given; ``timeout``: its ``--job-timeout``)."""
    return _step("spawn", *([name] if name else []), lease=lease, handler=handler, timeout=timeout)


def enqueue(n: int = 1, seconds: float = 2.0, kind: str = "sleep", priority: int = 0, delay: float = 0.0) -> Step:
    """Add ``n`` demo jobs that sleep ``seconds`` and then succeed, fail or crash once."""
    demo_payload(kind, seconds)  # a bad kind fails when the scenario is written, not halfway through it
    return _step("enqueue", n, seconds=seconds, kind=kind, priority=priority or None, delay=delay or None)


def pause(name: str) -> Step:
    """SIGSTOP a worker."""
    return _step("pause", name)


def resume(name: str) -> Step:
    """SIGCONT a worker."""
    return _step("resume", name)


def kill(name: str) -> Step:
    """SIGKILL a worker."""
    return _step("kill", name)


def hang(name: str) -> Step:
    """Make a worker's handler hang (the current one, or its next): alive, heartbeating, stuck."""
    return _step("hang", name)


def stop(name: str) -> Step:
    """SIGTERM a worker: it finishes its job and exits."""
    return _step("stop", name)


def pause_all() -> Step:
    """Pause every running worker."""
    return _step("pause_all")


def resume_all() -> Step:
    """Resume every paused worker."""
    return _step("resume_all")


def reap() -> Step:
    """Return expired leases to the queue now."""
    return _step("reap")


def wait(seconds: float) -> Step:
    """Let real time pass."""
    return _step("wait", seconds)


def wait_leases(n: float = 1) -> Step:
    """Let ``n`` lease lengths pass: long enough for a paused worker's lease to run out."""
    return _step("wait", leases=n)


def wait_idle(timeout: float = 60.0) -> Step:
    """Wait until no job is pending or running; ``ScenarioTimeout`` after ``timeout`` seconds."""
    return _step("wait", "idle", timeout=timeout)


def wait_running(n: int = 1, timeout: float = 60.0) -> Step:
    """Wait until at least ``n`` jobs are running (say, until w1 holds the job you mean to freeze it on)."""
    return _step("wait", running=n, timeout=timeout)


_BUILDERS: dict[str, Callable[..., Step]] = {
    "spawn": spawn,
    "enqueue": enqueue,
    "pause": pause,
    "resume": resume,
    "kill": kill,
    "hang": hang,
    "stop": stop,
    "pause_all": pause_all,
    "resume_all": resume_all,
    "reap": reap,
}


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_line(line: str) -> Step | None:
    """One line of the text form as a Step; None for a blank line or a comment."""
    words = shlex.split(line, comments=True)
    if not words:
        return None
    verb, rest = words[0], words[1:]
    args = [_value(w) for w in rest if "=" not in w]
    options = {k: _value(v) for k, v in (w.split("=", 1) for w in rest if "=" in w)}
    if verb == "wait":
        if args == ["idle"]:
            return wait_idle(**options)
        if "leases" in options and not args:
            return wait_leases(options["leases"])
        if "running" in options and not args:
            return wait_running(options.pop("running"), **options)
        if len(args) == 1 and not options and isinstance(args[0], (int, float)):
            return wait(args[0])
        raise ValueError(f"wait takes SECONDS, leases=N or idle; got {line.strip()!r}")
    if verb not in _BUILDERS:
        raise ValueError(f"unknown step {verb!r}; known: {', '.join([*_BUILDERS, 'wait'])}")
    try:
        return _BUILDERS[verb](*args, **options)
    except TypeError as exc:
        raise ValueError(f"bad arguments in {line.strip()!r}: {exc}") from None


class Scenario:
    """A list of steps with a cursor. ``lease`` sizes spawns and ``wait leases=N`` (default: the lab's lease, or 3 s).

    ``target`` is a ``Lab`` or a ``Fleet``; give it here or to ``step``/``run``.
    ``history`` holds ``(step, result)`` for every step run so far.
    """

    def __init__(self, steps: list[Step], target: Any = None, lease: float | None = None, poll: float = 0.1):
        for s in steps:
            if not isinstance(s, Step):
                raise TypeError(f"a scenario is a list of steps (spawn(...), pause(...), ...); got {s!r}")
        self.steps = list(steps)
        self.target = target
        self.lease = lease
        self.poll = poll
        self.position = 0
        self.history: list[tuple[Step, Any]] = []

    @classmethod
    def parse(cls, text: str, target: Any = None, lease: float | None = None) -> Scenario:
        """Build a scenario from the text form, one step a line."""
        steps = []
        for number, line in enumerate(text.splitlines(), 1):
            try:
                step = parse_line(line)
            except ValueError as exc:
                raise ValueError(f"line {number}: {exc}") from None
            if step is not None:
                steps.append(step)
        return cls(steps, target, lease)

    def __str__(self) -> str:
        return "\n".join(f"{'→' if i == self.position else ' '} {i + 1:>2}. {s}" for i, s in enumerate(self.steps))

    def __repr__(self) -> str:
        return f"Scenario({len(self.steps)} steps, at {self.position})"

    @property
    def done(self) -> bool:
        """True once every step has run."""
        return self.position >= len(self.steps)

    def step(self, target: Any = None) -> Step | None:
        """Run the next step against ``target`` and return it, or None when there is none left."""
        if self.done:
            return None
        target = self._target(target)
        current = self.steps[self.position]
        result = self._do(current, target)
        self.position += 1
        self.history.append((current, result))
        if hasattr(target, "refresh"):
            target.refresh()
        return current

    def run(self, target: Any = None) -> list[tuple[Step, Any]]:
        """Run every remaining step; returns the history."""
        while self.step(target) is not None:
            pass
        return self.history

    # -- doing a step -------------------------------------------------------------

    def _target(self, target: Any) -> Any:
        target = target if target is not None else self.target
        if target is None:
            raise TypeError("a scenario needs a Lab or a Fleet to run against: step(lab) or Scenario(..., target=lab)")
        return target

    def _lease(self, target: Any) -> float:
        if self.lease is not None:
            return self.lease
        box = getattr(target, "lease_input", None)  # a Lab: what its lease box says
        return float(box.value) if box is not None else 3.0

    def _do(self, step: Step, target: Any) -> Any:
        fleet = getattr(target, "fleet", target)
        queue = fleet.queue
        kw = step.kw
        if step.verb == "spawn":
            name = step.args[0] if step.args else None
            lease = kw.get("lease", self._lease(target))
            timeout = kw.get("timeout")
            if hasattr(target, "fleet"):
                return target.spawn(name=name, lease=lease, handler=kw.get("handler"), job_timeout=timeout)
            return fleet.spawn(handler=kw.get("handler", DEFAULT_HANDLER), lease=lease, name=name, job_timeout=timeout)
        if step.verb == "enqueue":
            n = step.args[0] if step.args else 1
            kind, seconds = kw.get("kind", "sleep"), kw.get("seconds", 2.0)
            priority, delay = kw.get("priority", 0), kw.get("delay", 0.0)
            if hasattr(target, "fleet"):
                return target.enqueue(n, priority=priority, delay=delay, kind=kind, seconds=seconds)
            return queue.enqueue_many([demo_payload(kind, seconds)] * n, priority=priority, delay=delay)
        if step.verb in ("pause", "resume", "kill", "hang", "stop"):
            return getattr(target, step.verb)(step.args[0])
        if step.verb in ("pause_all", "resume_all"):
            return getattr(target, step.verb)()
        if step.verb == "reap":
            return target.reap() if hasattr(target, "fleet") else queue.reap()
        if step.verb == "wait":
            if step.args == ("idle",):
                return self._wait_idle(queue, kw.get("timeout", 60.0))
            if "running" in kw:
                return self._wait_for(
                    queue, lambda c: c["running"] >= kw["running"], kw["timeout"], f"{kw['running']} running jobs"
                )
            seconds = kw["leases"] * self._lease(target) if "leases" in kw else step.args[0]
            time.sleep(seconds)
            return seconds
        raise ValueError(f"unknown step {step.verb!r}")

    def _wait_idle(self, queue: Any, timeout: float) -> dict[str, int]:
        return self._wait_for(queue, lambda c: c["pending"] == 0 and c["running"] == 0, timeout, "idle")

    def _wait_for(self, queue: Any, condition: Any, timeout: float, what: str) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        while True:
            counts = queue.stats()
            if condition(counts):
                return counts
            if time.monotonic() > deadline:
                raise ScenarioTimeout(f"queue not {what} after {timeout:g}s: {counts}")
            time.sleep(self.poll)
