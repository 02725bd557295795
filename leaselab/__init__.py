"""leaselab: a job queue on one SQLite file with leases, a single-statement claim and fencing tokens.

Only the standard library is imported here, so a worker process starts fast and small.
The lab (``leaselab.lab``) and plots (``leaselab.timeline``) pull in ipywidgets and
matplotlib only when you import them.
"""

from .backoff import Backoff
from .clock import ManualClock
from .errors import (
    DatabaseBusy,
    DatabaseUnwritable,
    HandlerError,
    InvalidPayload,
    JobNotFound,
    LeaselabError,
    LeaseLost,
    NotALeaselabDatabase,
    ScenarioTimeout,
    SchemaTooNew,
    SignalsUnsupported,
    UnknownWorker,
    UnsupportedSQLite,
    WorkerExists,
    WorkerNotRunning,
)
from .job import Event, Job, Status
from .queue import Queue
from .worker import Worker, load_handler

__version__ = "0.1.0"

__all__ = [
    "Backoff", "DatabaseBusy", "DatabaseUnwritable", "Event", "HandlerError", "InvalidPayload",
    "Job", "JobNotFound", "LeaseLost", "LeaselabError", "ManualClock", "NotALeaselabDatabase",
    "Queue", "ScenarioTimeout", "SchemaTooNew", "SignalsUnsupported", "Status", "UnknownWorker",
    "UnsupportedSQLite", "Worker", "WorkerExists", "WorkerNotRunning", "load_handler",
]
