"""The lab's errors: a scripted scenario that did not see what it waited for.

Each derives from ``leaselab.errors.LeaselabError``, the one root of every error leaselab raises on purpose."""

from __future__ import annotations

from ..errors import LeaselabError


class ScenarioTimeout(LeaselabError, TimeoutError):
    """Raised when a scenario's ``wait idle`` or ``wait running=N`` step did not see that within its timeout."""
