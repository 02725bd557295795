"""The common histories, judged inside the database: only counts for them, and the ids of every other job.

Most jobs of a healthy run have a history no rule can fault, and reading each of their rows into
Python is what a check of a million jobs spends its time on. ``PLAIN`` (one statement, the same on
SQLite and PostgreSQL but for its parameters) finds, in one grouped pass over the events, every job
whose whole history is one of these shapes, with its row just as those events leave it:

    enqueued                                                    (pending: waiting, or due and no worker idle)
    enqueued, claimed, heartbeat*, completed                    (done)
    enqueued, (claimed, heartbeat*, failed)+                    (pending, between attempts, as above)
    enqueued, (claimed, heartbeat*, failed)+, dead              (dead: its attempts spent)
    ... any number of failed attempts before a completion or a death

where each claim numbers its attempt one past the last, carries a token, and every write of that
attempt carries the same token and worker; the events are linked ``prev`` to the one before in id
order (checked without an ordered pass: every link points to an earlier event of the same job, one
event has none, and the links add up to the ids' sum less the last, which only the chain in id
order does); times never go back; no attempt passes ``max_attempts``; and the row's status,
attempts, token, worker and ``last_event_id`` are what replaying the events gives. For such a job
every per-job rule of ``rules`` finds nothing (``tests/test_check_fast.py`` runs both on every
anomaly the checker knows), so the checker only counts it; every other job (running, reaped,
refused, timed out, retried, cancelled, anything damaged, events whose row is gone, a row with no
history of its own) is returned by id, and its rows go through every rule as before.

The statement returns ``(plain, status, id, jobs, events, claims, repeated, with_row)``: with ``plain`` 1, one
row per status of the plain jobs (``id`` None); with 0, one row per job the rules must read (``status`` None).
A job row with no event of its own is in no group: ``COUNT_JOBS`` tells whether there is one, and only then
``ROWS_WITHOUT_HISTORY`` finds them (a million probes saved on every healthy history).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Each job's events in one grouped pass, each beside the event its ``prev`` names: is each step one a
# known-good history takes, and do the links make the chain in id order (see the module's docstring)?
# Then the job's row and its last event: does the row say what the events leave it saying?
# Parameters: ``idle`` (a pending job that is due counts only when the workers were not idle) and ``now``.
_PLAIN = """
WITH shapes AS (
  SELECT job_id, count(*) AS n, sum(bad) AS bad, coalesce(sum(prev), 0) - sum(id) + max(id) AS gap, max(id) AS last_id
    FROM (
  SELECT e.job_id AS job_id, e.id AS id, e.prev AS prev,
         CASE
           WHEN e.id < 1 THEN 1
           WHEN e.kind = 'enqueued' THEN
                CASE WHEN e.prev IS NULL AND e.attempt = 0 AND e.token IS NULL THEN 0 ELSE 1 END
           WHEN p.id IS NULL OR p.job_id <> e.job_id OR p.id >= e.id OR p.at > e.at THEN 1
           WHEN e.kind = 'claimed' THEN
                CASE WHEN p.kind IN ('enqueued', 'failed') AND e.attempt = p.attempt + 1 AND e.token IS NOT NULL
                     THEN 0 ELSE 1 END
           WHEN e.kind IN ('heartbeat', 'completed', 'failed') THEN
                CASE WHEN p.kind IN ('claimed', 'heartbeat') AND e.token = p.token AND e.attempt = p.attempt
                          AND (e.worker = p.worker OR (e.worker IS NULL AND p.worker IS NULL)) THEN 0 ELSE 1 END
           WHEN e.kind = 'dead' THEN
                CASE WHEN p.kind = 'failed' AND e.token = p.token AND e.attempt = p.attempt
                          AND (e.worker = p.worker OR (e.worker IS NULL AND p.worker IS NULL)) THEN 0 ELSE 1 END
           ELSE 1 END AS bad
    FROM events e LEFT JOIN events p ON p.id = e.prev
   -- A limit no table reaches keeps SQLite from merging this into the grouping: the sort then holds four
   -- numbers an event, not the event and its predecessor (measured: a third less time on a million jobs).
   LIMIT 9223372036854775807) AS steps
   GROUP BY job_id
),
judged AS (
  SELECT s.job_id AS job_id, j.status AS status, s.n AS n, j.attempts AS claims,
         CASE WHEN j.id IS NULL THEN 0 ELSE 1 END AS has_row,
         CASE WHEN j.id IS NOT NULL AND l.id IS NOT NULL
                   AND s.bad = 0 AND s.gap = 0 AND j.last_event_id = s.last_id
                   AND j.attempts = l.attempt AND j.attempts <= j.max_attempts
                   AND (j.token = l.token OR (j.token IS NULL AND l.token IS NULL))
                   AND (j.worker = l.worker OR (j.worker IS NULL AND l.worker IS NULL))
                   AND CASE l.kind
                         WHEN 'completed' THEN j.status = 'done'
                         WHEN 'dead' THEN j.status = 'dead'
                         WHEN 'enqueued' THEN j.status = 'pending' AND (NOT :idle OR j.run_at > :now)
                         WHEN 'failed' THEN j.status = 'pending' AND (NOT :idle OR j.run_at > :now)
                         ELSE FALSE END
              THEN 1 ELSE 0 END AS plain
    FROM shapes s LEFT JOIN jobs j ON j.id = s.job_id LEFT JOIN events l ON l.id = s.last_id
)
SELECT plain, CASE WHEN plain = 1 THEN status END, CASE WHEN plain = 0 THEN job_id END,
       count(*), sum(n), sum(claims), sum(CASE WHEN claims > 1 THEN claims - 1 ELSE 0 END), sum(has_row)
  FROM judged GROUP BY 1, 2, 3
"""

# How many rows the jobs table holds: more than PLAIN saw with events means some row has none of its own.
COUNT_JOBS = "SELECT count(*) FROM jobs"

# The rows with no history of their own, then: each such row's last event is not its own (nor is that of
# a row whose links were cut, already among the rest). Run only when COUNT_JOBS says there are some.
ROWS_WITHOUT_HISTORY = """
SELECT j.id FROM jobs j
 WHERE j.last_event_id IS NULL
    OR NOT EXISTS (SELECT 1 FROM events l WHERE l.id = j.last_event_id AND l.job_id = j.id)
"""

# The same statement in each driver's parameter style (the one text above, its two names renamed).
PLAIN_FILE = _PLAIN
PLAIN_SERVER = _PLAIN.replace(":idle", "%(idle)s").replace(":now", "%(now)s")

# The rest's rows, by the ids PLAIN returned: a JSON array on SQLite, an array on PostgreSQL.
REST_JOBS_FILE = """
SELECT id, status, priority, run_at, attempts, max_attempts, lease_until, worker, token, last_event_id
  FROM jobs WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id
"""
REST_EVENTS_FILE = """
SELECT id, job_id, kind, at, worker, token, attempt, detail, prev
  FROM events WHERE job_id IN (SELECT value FROM json_each(?)) ORDER BY job_id, id
"""
REST_JOBS_SERVER = """
SELECT id, status, priority, run_at, attempts, max_attempts, lease_until, worker, token, last_event_id
  FROM jobs WHERE id = ANY(%s) ORDER BY id
"""
REST_EVENTS_SERVER = """
SELECT id, job_id, kind, at, worker, token, attempt, detail, prev
  FROM events WHERE job_id = ANY(%s) ORDER BY job_id, id
"""


@dataclass(frozen=True)
class Plain:
    """What ``PLAIN`` found: per status, the plain jobs' counts; the ids of every other job, in order; and how
    many job rows it saw with events of their own."""

    counts: dict[str, PlainCount]
    rest: list[int]
    with_history: int = 0


@dataclass(frozen=True)
class PlainCount:
    """The plain jobs of one status: how many, their events, their claims, and their claims past the first."""

    jobs: int
    events: int
    claims: int
    repeated: int


def plain_from(rows: Iterable[tuple]) -> Plain:
    """``PLAIN``'s rows as a ``Plain``."""
    counts: dict[str, PlainCount] = {}
    rest: list[int] = []
    seen = 0
    for plain, status, job_id, jobs, events, claims, repeated, with_row in rows:
        seen += int(with_row)
        if plain:
            counts[status] = PlainCount(int(jobs), int(events), int(claims), int(repeated))
        else:
            rest.append(int(job_id))
    return Plain(counts=counts, rest=sorted(rest), with_history=seen)
