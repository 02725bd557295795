"""leaselab: a job queue with leases, a single-statement claim and fencing tokens, on one SQLite file.

What a user of the queue needs is here: ``Queue``, ``Job``, ``Worker``, the ``Lease`` a handler
holds, ``FencedStore`` to fence an outside store, and the errors a caller catches (every other
error of the queue and the worker is in ``leaselab.errors``). Only the standard library is
imported, so a worker process starts fast and small. The package's rooms:

- the core, at the top: the queue, jobs, the clock, the backoff, the errors, ``fencing``;
- ``leaselab.worker``: the worker's loop, its leases and heartbeat, its signals and log lines;
- ``leaselab.backends``: where the jobs live (``sqlite``, or ``postgres`` for a
  ``postgresql://`` URL), each with its own SQL;
- ``leaselab.check`` and ``leaselab.chaos``: the history checker, and real workers under faults;
- ``leaselab.harness``: real processes, servers and faults for the lab, chaos, tests and benchmarks;
- ``leaselab.lab``: the dashboard and the timeline (ipywidgets and matplotlib are imported only
  when you import those);
- ``leaselab.lessons``: what only the notebooks use (the wrong claimer, the exercises' checks, ...).
"""

from .backoff import Backoff
from .clock import ManualClock
from .errors import (
    DatabaseMissing,
    HandlerError,
    InvalidPayload,
    JobNotFound,
    LeaselabError,
    LeaseLost,
    TransientError,
    WrongStatus,
)
from .fencing import FencedStore
from .job import Enqueued, Event, Job, Status
from .queue import Queue
from .worker import Lease, Worker, load_handler

__version__ = "0.1.0"

__all__ = [
    "Backoff",
    "DatabaseMissing",
    "Enqueued",
    "Event",
    "FencedStore",
    "HandlerError",
    "InvalidPayload",
    "Job",
    "JobNotFound",
    "Lease",
    "LeaseLost",
    "LeaselabError",
    "ManualClock",
    "Queue",
    "Status",
    "TransientError",
    "Worker",
    "WrongStatus",
    "load_handler",
]
