"""What the lessons need and the library must not: the deliberately wrong claimer (``wrong``),
side effects that survive a retry (``effects``), a store that checks fencing tokens
(``fence``), handlers for the demonstrations (``demo``), what the lessons print in each
language (``texts``: ``say = lessons.speaker(lang)``), the exercises' checks
(``exercises``), lesson 7's live run of the audit of other queues (``peers``), a disk that forgets unsynced writes (``powercut``, lesson 5, needs
APSW), a throw-away PostgreSQL server (``pgserver``), two claims on a server interleaved by
hand (``race``, lesson 6, needs psycopg), a worker whose clock is off (``skew``), and the
notebooks' small conveniences (``notebook``, whose functions are also here:
``lessons.scratch(...)``).

Everything here but ``powercut`` and ``race`` imports only the standard library and
leaselab's core, so a worker process that runs a demonstration handler stays small.
"""

from .notebook import (
    LANGUAGES,
    claim_plan,
    claim_steps,
    cleanup,
    cleanup_at_exit,
    history,
    language,
    scratch,
    stored_detail,
    wait_until,
)
from .texts import speaker, text

__all__ = [
    "LANGUAGES", "claim_plan", "claim_steps", "cleanup", "cleanup_at_exit", "history", "language",
    "scratch", "speaker", "stored_detail", "text", "wait_until",
]
