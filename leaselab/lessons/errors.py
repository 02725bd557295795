"""The lessons' errors: a demonstration whose fault did not show what it was meant to, a guess changed once committed.

Each derives from ``leaselab.errors.LeaselabError``, the one root of every error leaselab raises on purpose."""

from __future__ import annotations

from ..errors import LeaselabError


class CrashKeptTheClaim(LeaselabError):
    """Raised when ``lessons.wrong.claim_until_a_crash_forgets`` crashed its server every round and no crash forgot the
    claim (a server not started with ``LAZY_WAL_WRITER``)."""


class GuessAlreadyCommitted(LeaselabError):
    """Raised when a predict exercise is given a second, different guess after one was committed."""


class NotAnOption(LeaselabError, ValueError):
    """Raised when a guess for a choice exercise is not one of its options."""
