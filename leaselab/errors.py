"""The errors of the queue and the worker, under the one root of every error leaselab raises on purpose:
``LeaselabError``.

The lab, the harness, the lessons, the checker and chaos keep their own errors beside them (``errors.py`` in
each folder), each a subclass of ``LeaselabError``.
"""

from __future__ import annotations


class LeaselabError(Exception):
    """Root of every error leaselab raises on purpose."""


class TransientError(LeaselabError):
    """Raised for a fault that may pass (a lock held too long, a full disk, a lost server): retrying later can
    succeed."""


class LeaseLost(LeaselabError):
    """Raised when a heartbeat, complete or fail carries a token that no longer holds the job."""

    def __init__(self, job_id: int, token: str | None = None, status: str | None = None):
        self.job_id = job_id
        self.token = token
        self.status = status
        where = f" (job is now {status})" if status else ""
        super().__init__(f"lease lost on job {job_id}: token {token!r} no longer holds it{where}")


class JobNotFound(LeaselabError, LookupError):
    """Raised when a job id does not exist in the queue file."""

    def __init__(self, job_id: object):
        self.job_id = job_id
        super().__init__(f"no job with id {job_id!r}")


class WrongStatus(LeaselabError, ValueError):
    """Raised when a job named to retry or cancel is not in a status that allows it (only a dead job is
    retried; only a pending or running one is cancelled); nothing of the call was written."""

    def __init__(self, action: str, statuses: dict[int, str], allowed: str):
        self.action, self.statuses = action, dict(statuses)
        named = ", ".join(f"job {job_id} is {status}" for job_id, status in sorted(statuses.items()))
        super().__init__(f"cannot {action}: {named}; only {allowed} can be. Nothing was changed")


class InvalidPayload(LeaselabError, ValueError):
    """Raised when a payload or result cannot be stored as strict JSON (NaN or Infinity, a set, a Python object, too
    deep or too big)."""


class InvalidQueueName(LeaselabError, ValueError):
    """Raised when a queue's name is not 1 to 64 letters, digits, '_', '-', '.' or ':' beginning with a letter or a
    digit; the message names the bad name."""

    def __init__(self, name: object, what: str = "queue"):
        self.name = name
        super().__init__(
            f"{what} name {name!r} is not valid: use 1 to 64 letters, digits, '_', '-', '.' or ':', "
            "beginning with a letter or a digit"
        )


class InvalidKey(LeaselabError, ValueError):
    """Raised when a unique job's key is not a non-empty text of at most 200 characters without NUL."""


class InvalidSchedule(LeaselabError, ValueError):
    """Raised when a periodic job's schedule is malformed: its name, its period or cron expression, its catch-up
    policy, or a schedule file's line."""


class KeyHeld(LeaselabError, ValueError):
    """Raised when a dead job is retried by hand while another pending or running job holds its unique key;
    nothing of the call was written."""


class InvalidTarget(LeaselabError, ValueError):
    """Raised when a queue's target is neither a SQLite file path nor a postgresql:// URL that can be parsed; the
    message never repeats it."""


class NotALeaselabDatabase(LeaselabError):
    """Raised when the file is not SQLite, is damaged, or is a SQLite file of some other application."""


class DatabaseMissing(LeaselabError, FileNotFoundError):
    """Raised when a queue is opened with ``create=False`` and no file exists at its path."""

    def __init__(self, path: str, nearest: str | None = None):
        self.path = path
        self.nearest = nearest
        hint = f" (did you mean {nearest}?)" if nearest else ""
        super().__init__(f"no queue file at {path}{hint}")


class QueueFileGone(LeaselabError):
    """Raised when the queue file a queue opened is no longer at its path: deleted, renamed away, or
    replaced by another file. Writes would go on into a file no one can open again, so the queue
    stops writing; a worker exits (``leaselab worker``: exit status 4)."""

    def __init__(self, path: str, replaced: bool):
        self.path, self.replaced = path, replaced
        what = "was replaced by another file" if replaced else "was deleted or renamed"
        super().__init__(f"the queue file {path} {what} while this queue had it open: nothing more is written to it")


class SchemaTooNew(LeaselabError):
    """Raised when the file was written by a newer leaselab whose schema this version does not know."""


class DatabaseUnwritable(LeaselabError):
    """Raised when the file or its folder cannot be written (read-only file, missing or locked-down folder)."""


class DatabaseBusy(TransientError):
    """Raised only when another process held the write lock for longer than the busy timeout."""


class DiskFull(TransientError):
    """Raised when the disk holding the queue file is full (SQLite's SQLITE_FULL); ``path`` names the file."""

    def __init__(self, path: str, detail: str = "database or disk is full"):
        self.path = path
        super().__init__(
            f"{path}: the disk holding the queue file is full ({detail}); nothing of the refused write was kept"
        )


class DatabaseUnreachable(TransientError):
    """Raised when the database server cannot be reached or the connection to it dropped; the next call reconnects."""


class TooManyClients(TransientError):
    """Raised when the database server refuses a new connection because every connection slot it allows is taken
    (PostgreSQL's "too many clients", SQLSTATE 53300); a later try may find one free."""


class NoPrimary(DatabaseUnreachable):
    """Raised when every server a PostgreSQL URL names that answered is a standby or read-only, so none takes the
    queue's writes: a failover may be under way, and retrying later can succeed."""


class ServerRefused(LeaselabError):
    """Raised when the database server refuses the connection for good: no such database, or a wrong user or
    password."""


class UnsupportedSQLite(LeaselabError):
    """Raised when the linked SQLite library is older than 3.37 and so has no STRICT tables."""


class CallTimeoutTooLong(LeaselabError, ValueError):
    """Raised when a worker is given a queue on a server whose calls may outlast the worker's lease: no
    ``call_timeout``, or one not below the lease."""


class HandlerError(LeaselabError):
    """Raised when a handler path like ``module:function`` cannot be imported or is not callable."""
