"""Demo handlers for lessons, the lab and tests. Each reads its instructions from the JSON payload.

Payloads are numbers (seconds to sleep) or objects with any of these keys:
``seconds`` (sleep), ``fail`` (raise on every attempt, or on the first N when a number),
``crash`` (SIGKILL this process on the first N attempts, default every attempt),
``effects`` (a file to append one line per run to: the side effect lessons count; without it,
the file ``$LEASELAB_EFFECTS`` names, if any). The lines are ``leaselab.check``'s effects.
``hold`` (a file path): the first attempt, after its sleep, waits until that file exists before it
goes on, so a lesson that freezes, kills or cuts off the first worker can do so whenever it
gets round to it and open the gate (create the file) afterwards; no stall of the machine can
let the first attempt finish before the fault. Later attempts never wait.
``hang`` (hang on every attempt, or on the first N when a number): the handler waits for ever, as one
stuck on a lock nobody releases or a socket read with no timeout. Its worker's heartbeat thread goes
on renewing the lease: only a timeout (``Queue.enqueue(timeout=)``, ``--job-timeout``) gives the job back.
``publish`` writes a page into a ``FencedStore`` and may first ask its lease whether it still holds the job.
``careful`` asks its lease every tenth of a second and acts only while it still may hold the job.

A worker started with ``$LEASELAB_HANG`` naming a file (the lab's ``Fleet`` does: its Hang button
creates that file) hangs the next handler of ``task`` or ``sleepy`` the same way: the first handler to
see the file, while it sleeps or as it starts, takes it (renames it to ``hung_marker(flag)``, then
writes its job id there) and waits for ever. One request hangs one handler, so a worker with several
slots keeps the others.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from ..check import read_effects, record_effect  # noqa: F401  (lessons read these handlers' effects from here)
from ..errors import LeaseLost
from ..fencing import FencedStore
from ..job import Job
from ..worker.lease import Lease

# The environment variable that names a worker's hang request file (see the module's docstring).
HANG_ENV = "LEASELAB_HANG"
HANG_CHECK_EVERY = 0.05  # seconds between looks for a hang request while a handler sleeps


def hung_marker(flag: str | os.PathLike) -> str:
    """The file a handler that took the hang request ``flag`` leaves behind: its job id, while it hangs."""
    return os.fspath(flag) + ".taken"


def hang_for_ever() -> None:
    """Wait for ever, as a handler stuck on a lock nobody releases: only the process's end ends it."""
    threading.Event().wait()


def _take_hang_request(flag: str, job: Job) -> bool:
    """True if this handler took the hang request ``flag`` (at most one handler takes each)."""
    marker = hung_marker(flag)
    try:
        os.replace(flag, marker)  # atomic: of two slots that saw the file, one takes it
    except FileNotFoundError:
        return False
    with open(marker, "w", encoding="utf-8") as fh:
        fh.write(str(job.id))
    return True


def _sleep(seconds: float, job: Job) -> None:
    """``time.sleep(seconds)``; under a fleet that may ask for a hang (``$LEASELAB_HANG``), in short
    steps, hanging for ever once this handler takes the request."""
    flag = os.environ.get(HANG_ENV)
    if not flag:
        time.sleep(seconds)
        return
    end = time.monotonic() + seconds
    while True:
        if _take_hang_request(flag, job):
            hang_for_ever()
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(HANG_CHECK_EVERY, left))


def _opts(job: Job) -> dict[str, Any]:
    payload = job.payload
    if isinstance(payload, (int, float)) and not isinstance(payload, bool):
        return {"seconds": payload}
    return payload if isinstance(payload, dict) else {}


def _hits(rule: Any, attempt: int) -> bool:
    """True when a fail/crash rule applies to this attempt: True = always, N = first N attempts."""
    if isinstance(rule, bool):
        return rule
    if isinstance(rule, int):
        return attempt <= rule
    return False


def hold(job: Job) -> None:
    """On the first attempt, wait until the file the payload's ``hold`` names exists; else return at once."""
    gate = _opts(job).get("hold")
    if gate and job.attempts == 1:
        while not os.path.exists(gate):
            time.sleep(0.05)


def task(job: Job) -> Any:
    """The all-purpose demo: record the effect, maybe hang, sleep, then maybe crash or fail, else return a result."""
    opts = _opts(job)
    # Unkeyed: a re-run repeats it, as a handler that is not idempotent would. The line's token
    # tells two claims of one attempt apart: a fence handed out twice shows here even when a
    # server crash took the first claim's own row back. Only into the file the payload names:
    # run by `leaselab chaos` without one, the demo has no outside effect to repeat.
    if opts.get("effects"):
        record_effect(job, path=opts["effects"], when="start")
    if _hits(opts.get("hang", False), job.attempts):
        hang_for_ever()
    _sleep(float(opts.get("seconds", 0)), job)
    hold(job)
    if _hits(opts.get("crash", False), job.attempts):
        os.kill(os.getpid(), signal.SIGKILL)
    if _hits(opts.get("fail", False), job.attempts):
        raise RuntimeError(f"job {job.id} failed on purpose (attempt {job.attempts})")
    return {"job": job.id, "attempt": job.attempts, "worker": job.worker}


def sleepy(job: Job) -> Any:
    """Sleep for the payload's seconds, then return what was done."""
    seconds = float(_opts(job).get("seconds", 1))
    _sleep(seconds, job)
    return {"slept": seconds, "worker": job.worker}


def effect(job: Job) -> Any:
    """Record a side effect, then sleep: not idempotent on purpose. The effect goes into the
    payload's ``effects`` file, else into ``$LEASELAB_EFFECTS`` (as ``leaselab chaos`` sets it)."""
    opts = _opts(job)
    record_effect(job, path=opts.get("effects"))
    time.sleep(float(opts.get("seconds", 0)))
    return {"effect": "recorded", "attempt": job.attempts}


def failing(job: Job) -> Any:
    """Always raise: the job goes back with backoff until its attempts run out and it is dead."""
    raise RuntimeError(f"job {job.id} failed on purpose (attempt {job.attempts})")


def crash(job: Job) -> Any:
    """SIGKILL the worker process mid-job: a crash with no clean-up, as a power cut or OOM kill would."""
    os.kill(os.getpid(), signal.SIGKILL)


def echo(job: Job) -> Any:
    """Return the payload as the result."""
    return job.payload


def publish(job: Job, lease: Lease) -> Any:
    """Work for ``seconds`` in short steps, then write the page ``key`` into the ``store`` file.

    Payload: ``{"store": path, "key": "home.html", "seconds": 2, "fenced": false, "check_lease": false}``.
    ``fenced`` makes the store refuse a write from an older attempt; ``check_lease`` makes the
    handler call ``lease.check()`` between steps and before the write, so a worker whose
    heartbeat was refused raises ``LeaseLost`` and writes nothing. ``hold`` holds the first
    attempt after its steps, before that last check and the write (see the module's docstring).
    """
    opts = _opts(job)
    steps = max(1, round(float(opts.get("seconds", 0)) / 0.1))
    for _ in range(steps):
        time.sleep(0.1)
        if opts.get("check_lease"):
            lease.check()
    hold(job)
    if opts.get("check_lease"):
        lease.check()
    value = {"worker": job.worker, "attempt": job.attempts}
    with FencedStore(opts["store"]) as store:
        written = store.write(
            opts.get("key", "page"), value, fence=job.fence, check=bool(opts.get("fenced")), token=job.token
        )
    return {"written": written, "value": value}


def careful(job: Job, lease: Lease) -> Any:
    """Work for ``seconds``, calling ``lease.check()`` every tenth of a second, then record the effect.

    Payload: ``{"seconds": 30, "effects": path}``. Writes a ``when: "start"`` line, then a
    ``when: "done"`` line (the side effect) only if the lease held to the end; on ``LeaseLost``
    it writes ``when: "stopped"`` instead and raises, so the attempt ends without its effect.
    """
    opts = _opts(job)
    # The start and the stop mark a run (one of each per attempt); "done" is the effect itself.
    record_effect(job, f"attempt {job.attempts} start", path=opts["effects"], when="start")
    deadline = time.monotonic() + float(opts.get("seconds", 0))
    try:
        while time.monotonic() < deadline:
            lease.check()
            time.sleep(0.1)
        lease.check()
    except LeaseLost:
        record_effect(job, f"attempt {job.attempts} stopped", path=opts["effects"], when="stopped")
        raise
    record_effect(job, path=opts["effects"], when="done")
    return {"effect": "recorded", "attempt": job.attempts}
