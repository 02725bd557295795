"""The simulator's errors, each a subclass of ``leaselab.errors.LeaselabError``, the one root of every error
leaselab raises on purpose."""

from __future__ import annotations

from ..errors import LeaselabError


class SimulationError(LeaselabError):
    """Raised when a simulation cannot be run as asked (a bad scenario, a replay file that cannot be read)."""


class UnknownMutant(SimulationError, ValueError):
    """Raised for a mutant name the simulator does not ship."""


class MutantStale(SimulationError):
    """Raised when a mutant's change no longer applies: the statement it edits was rewritten."""
