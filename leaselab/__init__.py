"""leaselab: a job queue with leases, a single-statement claim and fencing tokens, on one SQLite file.

The core is here, at the top of the package: ``Queue``, ``Job``, the errors, the clock,
the backoff, the worker and the CLI. Only the standard library is imported, so a worker
process starts fast and small. Beside it:

- ``leaselab.backends``: where the jobs live (``sqlite``, or ``postgres`` for a
  ``postgresql://`` URL), each with its own SQL;
- ``leaselab.lab``: real worker processes to pause and kill, the dashboard, the timeline
  (ipywidgets and matplotlib are imported only when you import those);
- ``leaselab.lessons``: the props the notebooks use (the wrong claimer, the ledger, ...).
"""

from .backoff import Backoff
from .clock import ManualClock
from .errors import (
    CrashKeptTheClaim,
    DatabaseBusy,
    DatabaseMissing,
    DatabaseUnreachable,
    DatabaseUnwritable,
    DiskFull,
    FaultMissed,
    FaultNotApplicable,
    HandlerError,
    InvalidEffects,
    InvalidPayload,
    InvalidTarget,
    JobNotFound,
    LeaselabError,
    LeaseLost,
    NotALeaselabDatabase,
    PartitionUnsupported,
    ProxyError,
    QueueNotEmpty,
    ScenarioTimeout,
    SchemaTooNew,
    ServerNotRecovered,
    ServerRefused,
    SignalsUnsupported,
    TransientError,
    UnknownFault,
    UnknownWorker,
    UnsupportedSQLite,
    WorkerExists,
    WorkerNotRunning,
)
from .job import Event, Job, Status
from .queue import Queue
from .worker import Worker, load_handler
from .worker.lease import Lease

__version__ = "0.1.0"

__all__ = [
    "Backoff", "CrashKeptTheClaim", "DatabaseBusy", "DatabaseMissing", "DatabaseUnreachable", "DatabaseUnwritable", "DiskFull", "FaultMissed", "FaultNotApplicable",
    "Event", "HandlerError", "InvalidEffects", "InvalidPayload", "InvalidTarget", "Job", "JobNotFound", "Lease", "LeaseLost",
    "LeaselabError", "ManualClock", "NotALeaselabDatabase", "PartitionUnsupported", "ProxyError", "QueueNotEmpty", "Queue",
    "ScenarioTimeout", "SchemaTooNew", "ServerNotRecovered", "ServerRefused", "SignalsUnsupported", "Status", "TransientError", "UnknownFault",
    "UnknownWorker", "UnsupportedSQLite", "Worker", "WorkerExists", "WorkerNotRunning", "load_handler",
]
