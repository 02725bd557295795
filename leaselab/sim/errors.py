"""The simulator's errors, each a subclass of ``leaselab.errors.LeaselabError``, the one root of every error
leaselab raises on purpose."""

from __future__ import annotations

from ..errors import LeaselabError
from .texts import text


class SimulationError(LeaselabError):
    """Raised when a simulation cannot be run as asked (a bad scenario, a replay file that cannot be read)."""


class UnknownMutant(SimulationError, ValueError):
    """Raised for a mutant name the simulator does not ship."""


class MutantStale(SimulationError):
    """Raised when a mutant's change no longer applies: the statement it edits was rewritten."""


class SimulateUsageError(SimulationError, ValueError):
    """Raised when ``leaselab simulate`` is asked for something it cannot do; ``key`` and ``facts`` name the
    problem, so the command says it in the reader's language (``leaselab.sim.texts``)."""

    def __init__(self, key: str, **facts: object):
        self.key, self.facts = key, facts
        super().__init__(text(key, "en", **facts))

    def render(self, lang: str) -> str:
        return text(self.key, lang, **self.facts)


class BadOption(SimulateUsageError):
    """Raised for an option of ``leaselab simulate`` with a value it cannot use (a count below one, an unknown
    fault, options that exclude each other)."""


class BadReplayFile(SimulateUsageError):
    """Raised when a witness file given to ``--replay`` cannot be read, is not JSON, or lacks a field a replay needs."""


class BadHandler(SimulateUsageError):
    """Raised when ``--handler`` names a function that cannot be imported or called."""
