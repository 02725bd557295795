"""Which handler runs a job: a worker serves one or more named queues, each with its handler.

``Worker(q, handler)`` serves the default queue; ``Worker(q, handler, queues=["a", "b"])`` serves the
queues named with that one handler; ``Worker(q, queues={"emails": send, "sms": "tasks:text"})`` gives
each queue its own (and a ``handler`` beside it serves the default queue). ``leaselab worker`` builds
the same table from ``--handler`` and its ``--queue`` options.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..arguments import queue_name, queue_names
from ..errors import HandlerError
from ..job import DEFAULT_QUEUE, Job
from .lease import Lease, wants_lease

# What serves a queue: a callable, or its import path ``module:function``.
Served = Callable[..., Any] | str
Queues = Mapping[str, Served] | Iterable[str] | str


def handlers_by_queue(handler: Served | None, queues: Queues | None) -> dict[str, Served]:
    """{queue name: handler}, from a worker's ``handler`` and ``queues`` (see the module's docstring); every
    name checked (``InvalidQueueName``), a queue given two handlers or none refused."""
    if queues is None:
        if handler is None:
            raise HandlerError("a worker needs a handler, or queues={name: handler, ...}")
        return {DEFAULT_QUEUE: handler}
    if isinstance(queues, Mapping):
        table = {queue_name(name): served for name, served in queues.items()}
        if handler is not None:
            if DEFAULT_QUEUE in table:
                raise ValueError(
                    f"the {DEFAULT_QUEUE!r} queue is given two handlers: handler= serves it, and queues= names it too"
                )
            table = {DEFAULT_QUEUE: handler, **table}
        if not table:
            raise ValueError("queues must name at least one queue")
        return table
    if handler is None:
        raise HandlerError("queues= names the queues that handler= serves: give a handler, or queues={name: handler}")
    return {name: handler for name in queue_names(queues)}


class ByQueue:
    """The one handler a worker's slots call when its queues have different handlers: it calls the handler
    of the job's queue, with the lease when that handler takes one."""

    def __init__(self, handlers: Mapping[str, Callable[..., Any]]):
        self._handlers = {name: (handler, wants_lease(handler)) for name, handler in handlers.items()}

    def __call__(self, job: Job, lease: Lease) -> Any:
        try:
            handler, with_lease = self._handlers[job.queue]
        except KeyError:  # a claim takes only the queues served: a row changed by hand since
            raise HandlerError(
                f"job {job.id} is in queue {job.queue!r}, which this worker has no handler for"
            ) from None
        return handler(job, lease) if with_lease else handler(job)
