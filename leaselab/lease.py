"""What a running handler can know about its lease: whether the worker's heartbeat was refused.

A handler that takes a second argument gets a ``Lease``. The worker sets ``lost``
the moment a heartbeat comes back as ``LeaseLost``; ``check()`` raises then. It is as
fresh as the last heartbeat (every third of the lease), so it narrows the window in
which a zombie acts but cannot close it: a store that checks the fence still must.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, Callable

from .errors import LeaseLost
from .job import Job


class Lease:
    """The lease one attempt runs under; ``lost`` is a ``threading.Event`` set when a heartbeat is refused."""

    def __init__(self, job: Job):
        self.job = job
        self.lost = threading.Event()

    @property
    def fence(self) -> tuple[int, int]:
        """The attempt's fence, ``(job id, attempts)``, for a store outside the queue."""
        return self.job.fence

    def check(self) -> None:
        """Raise ``LeaseLost`` if a heartbeat of this attempt has been refused; return otherwise."""
        if self.lost.is_set():
            raise LeaseLost(self.job.id, self.job.token)

    def __repr__(self) -> str:
        return f"Lease(job={self.job.id}, attempt={self.job.attempts}, lost={self.lost.is_set()})"


def wants_lease(handler: Callable[..., Any]) -> bool:
    """True when ``handler`` can be called as ``handler(job, lease)``; a one-argument handler gets only the job."""
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # some builtins have no signature: call them the old way
        return False
    try:
        signature.bind(None, None)
    except TypeError:
        return False
    return True
