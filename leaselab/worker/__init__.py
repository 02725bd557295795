"""The worker: everything a process needs to run jobs from a queue and keep its promises.

- ``loop``: the one loop for any number of slots (``Worker``), handler loading, and the
  retries through transient faults (``outlast``);
- ``lease``: what a handler holds while it runs (``Lease``), and the worker's own deadline on it;
- ``pulse``: the heartbeat that renews every lease a worker holds;
- ``latency``: the histogram of the heartbeats' round trips (``WorkerStats.heartbeat_latencies``);
- ``faults``: how long a worker waits on a transient fault, and the words it logs;
- ``signals``: signals acted on from a relay thread, never inside a wait;
- ``logline``: the log's line format.

It imports only the standard library and leaselab's core, so a worker process starts fast.
"""

from .latency import Histogram
from .lease import Lease
from .loop import (
    CALL_TIMEOUT_SHARE,
    DEFAULT_GRACE,
    STARTED,
    STOPPED,
    Worker,
    WorkerStats,
    handler_path,
    load_handler,
    outlast,
)

__all__ = [
    "CALL_TIMEOUT_SHARE",
    "DEFAULT_GRACE",
    "Histogram",
    "Lease",
    "STARTED",
    "STOPPED",
    "Worker",
    "WorkerStats",
    "handler_path",
    "load_handler",
    "outlast",
]
