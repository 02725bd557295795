"""What only the lessons need: the deliberately wrong claimer (``wrong``), what the lessons print
in each language (``texts``: ``say = lessons.speaker(lang)``), the exercises' checks
(``exercises``), lesson 8's live run of the audit of other queues (``peers``), two claims on a
server interleaved by hand (``race``, lesson 6, needs psycopg), a primary replaced by its standby (lesson 7)
under real workers, asynchronous then synchronous, judged with and without the workers' journals
(``failover``), and the notebooks' small conveniences (``notebook``, whose functions are also
here: ``lessons.scratch(...)``), and the guess a reader commits before a "Predict" exercise runs
(``predict``: ``lessons.predict(...)``).

Nothing but the notebooks imports this package: the real processes, servers and faults the
lessons drive are in ``leaselab.harness``, shared with ``leaselab chaos``, the tests and the
benchmarks.
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
from .predict import predict
from .texts import speaker, text

__all__ = [
    "LANGUAGES",
    "claim_plan",
    "claim_steps",
    "cleanup",
    "cleanup_at_exit",
    "history",
    "language",
    "predict",
    "scratch",
    "speaker",
    "stored_detail",
    "text",
    "wait_until",
]
