"""``leaselab chaos``'s errors: a fault it cannot make, or a run whose verdict would prove nothing.

Each derives from ``leaselab.errors.LeaselabError``, the one root of every error leaselab raises on purpose."""

from __future__ import annotations

from ..errors import LeaselabError


class UnknownFault(LeaselabError, ValueError):
    """Raised when ``leaselab chaos`` is asked for a fault it does not know; the message lists those it does."""


class FaultNotApplicable(LeaselabError, ValueError):
    """Raised when ``leaselab chaos`` is asked for a fault its queue cannot have (a partition of a SQLite file, a crash
    of a server it did not start)."""


class FaultMissed(LeaselabError, RuntimeError):
    """Raised when a fault a lesson's trial put into a handler never struck, so its verdict would prove nothing."""


class ServerNotRecovered(LeaselabError, RuntimeError):
    """Raised when ``leaselab chaos`` crashed the server it started and could not start it again: the rest of the run
    would prove nothing."""


class QueueNotEmpty(LeaselabError, ValueError):
    """Raised when ``leaselab chaos`` is pointed at a queue that already holds jobs: its checker judges every job
    in it."""
