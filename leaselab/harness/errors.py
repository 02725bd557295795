"""The harness's errors: a fleet asked about workers it cannot act on, a proxy that cannot serve.

Each derives from ``leaselab.errors.LeaselabError``, the one root of every error leaselab raises on purpose."""

from __future__ import annotations

from ..errors import LeaselabError


class UnknownWorker(LeaselabError, LookupError):
    """Raised when a fleet is asked about a worker name it never spawned."""


class WorkerExists(LeaselabError, ValueError):
    """Raised when a fleet is asked to spawn a worker under the name of one that is still alive."""


class WorkerNotRunning(LeaselabError):
    """Raised when a worker that was killed or has exited is asked to pause, resume, stop or be killed."""


class PartitionUnsupported(LeaselabError):
    """Raised when a fleet is asked to cut a worker off the network and there is none to cut (a SQLite file)."""


class HangUnsupported(LeaselabError):
    """Raised when a fleet is asked to hang a worker whose handler does not read hang requests (not a demo's)."""


class ProxyError(LeaselabError):
    """Raised when the lab's network proxy cannot listen, or is used after it was closed."""


class SignalsUnsupported(LeaselabError):
    """Raised by pause and resume on a platform without SIGSTOP and SIGCONT (such as Windows)."""


class PgCommandError(LeaselabError):
    """Raised when ``leaselab pg`` cannot do what it was asked: no server is running, or one failed to start."""


class KeyReused(LeaselabError, ValueError):
    """Raised when an idempotency key still remembered arrives with a different payload: a new request, not a repeat."""
