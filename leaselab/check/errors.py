"""The checker's errors: what it raises when what it is asked to read is not what it can read.

Each derives from ``leaselab.errors.LeaselabError``, the one root of every error leaselab raises on purpose."""

from __future__ import annotations

from ..errors import LeaselabError


class InvalidEffects(LeaselabError, ValueError):
    """Raised when a record of handlers' effects (a file's line, or an item a store listed) is not an effect the checker
    can read."""
