"""Every statement the queue runs on SQLite, as named constants with ``:name`` parameters. Those the
dialects share are written once in ``leaselab.backends.sql`` and are SQLite's text as they are;
this module fills in the parts SQLite says its own way. Nothing is formatted into SQL but fixed
fragments, at import.
"""

from __future__ import annotations

from .. import sql
from ..sql import (  # noqa: F401  (re-exported: the statements both dialects run as they are)
    COMPLETE,
    ENQUEUE,
    ENQUEUE_UNIQUE,
    EVENTS,
    EVENTS_FOR_JOB,
    FAILED_BY,
    GET,
    HELD_BY,
    HOLDING_KEY,
    LINK_EVENT,
    LIST_JOBS,
    LIST_JOBS_BY_STATUS,
    LIST_JOBS_BY_STATUS_NEWEST,
    LIST_JOBS_NEWEST,
    NEXT_RUN_AT,
    OUTCOME,
    SCHEDULE_ADVANCE,
    SCHEDULE_LAST,
    SCHEDULE_START,
    STATS,
)

# One writer at a time holds the whole file: the claim needs no row locking.
CLAIM = "\n" + sql.claim(lock="") + "\n"

CLAIM_MANY = "\n" + sql.claim_many(lock="") + "\n"

# A worker serving several named queues: :queues is a JSON array of their names. For each, a correlated
# subquery seeks its first {limit} runnable jobs through jobs_claim (sql.SERVES_ONE says why).
SERVES_SEVERAL = (
    "\n               AND id IN (SELECT c.id FROM json_each(:queues) AS q JOIN jobs AS c ON c.id IN ("
    "\n                   SELECT id FROM jobs WHERE status = 'pending' AND run_at <= :now AND queue = q.value"
    "\n                    ORDER BY priority DESC, run_at ASC, id ASC LIMIT {limit}))"
)
CLAIM_SEVERAL = "\n" + sql.claim(lock="", serves=SERVES_SEVERAL) + "\n"
CLAIM_MANY_SEVERAL = "\n" + sql.claim_many(lock="", serves=SERVES_SEVERAL) + "\n"

# A batch of one (a one-slot worker's claims and refills, a slot freed on its own): the batch's
# tokens, picked with = instead of IN. For IN, SQLite fills a temporary table with the subquery's
# ids and probes it; = reads the one id as a scalar. 52k instructions a claim of 279k (callgrind,
# bench/README "Throughput, fourth round").
CLAIM_MANY_OF_ONE = "\n" + sql.claim(lock="", token=sql.batch_token()) + "\n"

# A renewal's lease runs from when SQLite applied it, not from when it was asked for:
# leaselab_now() is the queue's clock, registered on the connection and read as the statement
# runs, after SQLite granted it the write lock. A beat that waited for the lock (less than the
# busy timeout, so no error) still gets a whole lease.
HEARTBEAT = """
UPDATE jobs SET lease_until = leaselab_now() + :lease, updated_at = leaselab_now(), last_event = 'heartbeat'
 WHERE id = :id AND status = 'running' AND token = :token
RETURNING lease_until
"""

# Every lease one worker holds, renewed in one statement: :tokens is a JSON array of tokens
# (each names one claim of one job). A job missing from the result was fenced off.
HEARTBEAT_MANY = """
UPDATE jobs SET lease_until = leaselab_now() + :lease, updated_at = leaselab_now(), last_event = 'heartbeat'
 WHERE status = 'running' AND token IN (SELECT value FROM json_each(:tokens))
RETURNING id, lease_until
"""

# leaselab_backoff(attempts) is the queue's Backoff.delay, registered on the connection.
FAIL = sql.fail(backoff="leaselab_backoff(attempts)")

# :tokens (a JSON array) are the claims the stopping worker holds.
RELEASE = sql.release(held="token IN (SELECT value FROM json_each(:tokens))")

# :ids (a JSON array) are the jobs an operator names.
_LISTED = "id IN (SELECT value FROM json_each(:ids))"
RETRY = sql.retry(_LISTED)
RETRY_DEAD = sql.RETRY_DEAD
CANCEL = sql.cancel(_LISTED)
STATUSES = sql.statuses(_LISTED)

# :keep (a JSON array) are the tokens of the worker that reaps: it is alive, so its own jobs are
# not a crashed worker's, whatever a freeze did to their leases. A token in :keep also keeps every
# job a batch claim took with it (their tokens are it, a dash and the id): a worker keeps the
# claim it has sent before it knows which jobs that claim took.
REAP = sql.reap(
    backoff="leaselab_backoff(attempts)",
    expired=(
        " WHERE status = 'running' AND lease_until < :now AND token NOT IN (SELECT value FROM json_each(:keep))\n"
        "   AND substr(token, 1, instr(token || '-', '-') - 1) NOT IN (SELECT value FROM json_each(:keep))"
    ),
)

# The one writer of the file already holds every row: nothing to lock.
RECORD_LEASE_LOST = sql.record_lease_lost(lock="")

# What the planner is told about jobs_claim, written once when the schema is made. Without
# statistics SQLite walks the index from the top priority down and steps over every job that
# is not yet runnable: 100,000 delayed jobs at a high priority made every claim take 5 ms.
# These figures say what queues are like (many jobs share each of a few priority levels, spread
# over a few named queues), and with them SQLite skip-scans: for each priority level, from the
# highest, it jumps straight to the queue's jobs already runnable (the plan reads "ANY(priority)
# AND queue=? AND run_at<?"). A real ANALYZE replaces them; on a large queue it comes to the same
# plan. "ANALYZE sqlite_schema" creates the statistics table if needed and makes this connection
# read it again.
CLAIM_STATISTICS: tuple[str, ...] = (
    "ANALYZE sqlite_schema",
    "INSERT INTO sqlite_stat1 (tbl, idx, stat) SELECT 'jobs', 'jobs_claim', '1000000 100000 20000 1 1'"
    " WHERE NOT EXISTS (SELECT 1 FROM sqlite_stat1 WHERE tbl = 'jobs' AND idx = 'jobs_claim')",
    "ANALYZE sqlite_schema",
)

# Upgrades, by the version a file has, in order: the file runs MIGRATIONS[v] for each version v
# from its own up to the newest, then schema.sql's tables (all IF NOT EXISTS), then REFILLS[v]
# for each v, then the rest of schema.sql (indexes, triggers); all in one transaction.
# 1 -> 2: the history becomes a per-job linked list
# (events.prev, jobs.last_event_id) instead of an index on events(job_id); the old index
# still serves the two UPDATEs that build the links, and is dropped after them.
# 2 -> 3: the tables become STRICT, which SQLite can only do by building them anew: the old
# ones are renamed away, repaired, copied into the new ones and dropped. A row that another
# program wrote with a value of the wrong type (text in a number column, a blob, a running job
# without a lease) cannot go into a STRICT table as it is: each bad value is replaced by a
# harmless one (a blob by its hex text), the job keeps its id and history, and a job that
# was pending or running becomes dead, its last_error and a 'dead' event naming every bad value.
# A finished job keeps its status; its last_error names what was repaired.
# 4 -> 5: jobs gain queue (every job so far in 'default') and key (NULL: not a unique job); jobs_claim
# is built anew with the queue in it, so its old statistics go (CLAIM_STATISTICS writes the new ones),
# and jobs_key is made by schema.sql.
# 5 -> 6: periodic schedules' last ticks get their table, made by schema.sql; nothing else changes.
# 3 -> 4: jobs gain timeout and beat_timeout (NULL: no limit), and the history four kinds,
# 'timed_out' and 'released', and 'retried' and 'cancelled' for what an operator does by hand;
# the jobs table gains two columns, and the events table's new CHECK comes with step 6.
# 6 -> 7: the CHECKs on a job's status and an event's kind say each value with = and OR instead of
# IN (...), which made SQLite build a temporary b-tree for the list in every statement that checked
# it (schema.sql). A CHECK cannot be changed in place, so both tables are built anew and their rows
# copied, ids and links as they were (a million jobs with their history take seconds, once). A file
# from 3 to 5 takes this step too: it is where its events table gets step 3's kinds.
_FINITE = "typeof({0}) IN ('integer', 'real') AND abs({0}) < 9e999"
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_AS_TEXT = "iif(typeof({0}) IN ('text', 'null'), {0}, hex({0}))"
# A damaged worker or token is taken back from the job's history: the last claim wrote both.
_LAST_CLAIM = (
    "SELECT e.{0} FROM events_v2 e WHERE e.job_id = jobs_v2.id AND e.kind = 'claimed' ORDER BY e.id DESC LIMIT 1"
)


def _bad(column: str, condition: str) -> str:
    """The reason text for one column: empty when ``condition`` (the column is fine) holds."""
    return f"iif({condition}, '', '; ' || '{column} was ' || typeof({column}) || ' ' || substr(quote({column}), 1, 40))"


_DAMAGE_REASONS = " || ".join(
    [
        _bad("payload", "typeof(payload) = 'text'"),
        _bad("priority", "typeof(priority) = 'integer'"),
        _bad("run_at", _FINITE.format("run_at")),
        _bad("attempts", "typeof(attempts) = 'integer' AND attempts >= 0"),
        _bad("max_attempts", "typeof(max_attempts) = 'integer' AND max_attempts >= 1"),
        _bad("lease_until", "lease_until IS NULL OR " + _FINITE.format("lease_until")),
        _bad("worker", "typeof(worker) IN ('text', 'null')"),
        _bad("token", "typeof(token) IN ('text', 'null')"),
        _bad("result", "typeof(result) IN ('text', 'null')"),
        _bad("last_error", "typeof(last_error) IN ('text', 'null')"),
        _bad("created_at", _FINITE.format("created_at")),
        _bad("started_at", "started_at IS NULL OR " + _FINITE.format("started_at")),
        _bad("finished_at", "finished_at IS NULL OR " + _FINITE.format("finished_at")),
        _bad("updated_at", _FINITE.format("updated_at")),
        _bad("last_event", "typeof(last_event) = 'text'"),
        _bad("last_event_id", "typeof(last_event_id) IN ('integer', 'null')"),
        "iif(status <> 'running' OR (lease_until IS NOT NULL AND token IS NOT NULL), '',"
        " '; running with no lease or no token')",
        "iif(status <> 'pending' OR attempts < max_attempts, '', '; pending with no attempt left')",
    ]
)

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "DROP TRIGGER IF EXISTS jobs_enqueued",
        "DROP TRIGGER IF EXISTS jobs_changed",
        "ALTER TABLE jobs ADD COLUMN last_event_id INTEGER",
        "ALTER TABLE events ADD COLUMN prev INTEGER",
        "UPDATE events SET prev = (SELECT max(e.id) FROM events e WHERE e.job_id = events.job_id AND e.id < events.id)",
        "UPDATE jobs SET last_event_id = (SELECT max(e.id) FROM events e WHERE e.job_id = jobs.id)",
        "DROP INDEX IF EXISTS events_job",
    ),
    2: (
        "DROP TRIGGER IF EXISTS jobs_enqueued",
        "DROP TRIGGER IF EXISTS jobs_changed",
        "DROP INDEX IF EXISTS jobs_claim",
        "DROP INDEX IF EXISTS jobs_lease",
        "ALTER TABLE jobs RENAME TO jobs_v2",
        "ALTER TABLE events RENAME TO events_v2",
        "CREATE TEMP TABLE upgrade_damage AS"
        " SELECT id, 'damaged in the file, found by the upgrade to schema 3: ' || substr(reasons, 3) AS reason,"
        " status IN ('pending', 'running') AS active"
        f" FROM (SELECT id, status, {_DAMAGE_REASONS} AS reasons FROM jobs_v2) WHERE reasons <> ''",
        f"""UPDATE jobs_v2 SET
            payload = iif(typeof(payload) = 'text', payload, json_quote(hex(payload))),
            status = iif(d.active, 'dead', status),
            priority = iif(typeof(priority) = 'integer', priority, 0),
            run_at = iif({_FINITE.format("run_at")}, run_at, {_NOW}),
            attempts = iif(typeof(attempts) = 'integer' AND attempts >= 0, attempts,
                           (SELECT count(*) FROM events_v2 e WHERE e.job_id = jobs_v2.id AND e.kind = 'claimed')),
            lease_until = iif(d.active OR NOT ({_FINITE.format("lease_until")}), NULL, lease_until),
            worker = iif(typeof(worker) IN ('text', 'null'), worker, ({_LAST_CLAIM.format("worker")})),
            token = iif(typeof(token) IN ('text', 'null'), token, ({_LAST_CLAIM.format("token")})),
            result = iif(typeof(result) IN ('text', 'null'), result, json_quote(hex(result))),
            last_error = d.reason,
            created_at = iif({_FINITE.format("created_at")}, created_at, {_NOW}),
            started_at = iif({_FINITE.format("started_at")}, started_at, NULL),
            finished_at = iif(d.active, {_NOW}, iif({_FINITE.format("finished_at")}, finished_at, NULL)),
            updated_at = {_NOW},
            last_event = iif(typeof(last_event) = 'text', last_event, 'failed'),
            last_event_id = (SELECT max(e.id) FROM events_v2 e WHERE e.job_id = jobs_v2.id)
          FROM upgrade_damage d WHERE d.id = jobs_v2.id""",
        "UPDATE jobs_v2 SET max_attempts = max(1, attempts)"
        " WHERE typeof(max_attempts) <> 'integer' OR max_attempts < 1",
        "INSERT INTO events_v2 (job_id, kind, at, worker, token, attempt, detail, prev)"
        " SELECT j.id, 'dead', j.updated_at, j.worker, j.token, j.attempts, j.last_error, j.last_event_id"
        " FROM jobs_v2 j JOIN upgrade_damage d ON d.id = j.id WHERE d.active",
        "UPDATE jobs_v2 SET last_event_id = (SELECT max(e.id) FROM events_v2 e WHERE e.job_id = jobs_v2.id)"
        " WHERE id IN (SELECT id FROM upgrade_damage WHERE active)",
    ),
    3: (
        "DROP TRIGGER IF EXISTS jobs_enqueued",
        "DROP TRIGGER IF EXISTS jobs_changed",
        "ALTER TABLE jobs ADD COLUMN timeout REAL CHECK (timeout > 0 AND timeout < 9e999)",
        "ALTER TABLE jobs ADD COLUMN beat_timeout REAL CHECK (beat_timeout > 0 AND beat_timeout < 9e999)",
    ),
    4: (
        "DROP INDEX IF EXISTS jobs_claim",
        "ALTER TABLE jobs ADD COLUMN queue TEXT NOT NULL DEFAULT 'default' CHECK (length(queue) BETWEEN 1 AND 64)",
        "ALTER TABLE jobs ADD COLUMN key TEXT CHECK (length(key) BETWEEN 1 AND 200)",
        "ANALYZE sqlite_schema",
        "DELETE FROM sqlite_stat1 WHERE tbl = 'jobs' AND idx = 'jobs_claim'",
    ),
    6: (
        "DROP TRIGGER IF EXISTS jobs_enqueued",
        "DROP TRIGGER IF EXISTS jobs_changed",
        # A renamed table keeps its indexes under their names, and schema.sql's would then not be made.
        "DROP INDEX IF EXISTS jobs_claim",
        "DROP INDEX IF EXISTS jobs_key",
        "DROP INDEX IF EXISTS jobs_lease",
        "ALTER TABLE jobs RENAME TO jobs_v6",
        "ALTER TABLE events RENAME TO events_v6",
    ),
}

# Steps 1 and 2 end by building both tables anew from schema.sql: a file at version 2 or below
# stops its steps there (the later ones alter tables it no longer has; the new ones are current).
REBUILT_BY = 2

_JOBS_ALL = (
    "id, payload, status, priority, run_at, attempts, max_attempts, lease_until, worker, token, result,"
    " last_error, created_at, started_at, finished_at, updated_at, last_event, last_event_id"
)
_JOBS_LATER = "timeout, beat_timeout, queue, key"  # the columns versions 4 and 5 added

REFILLS: dict[int, tuple[str, ...]] = {
    2: (
        f"INSERT INTO jobs ({_JOBS_ALL}) SELECT {_JOBS_ALL} FROM jobs_v2",
        # The history is copied as it is; a value of the wrong type in it is made readable.
        f"""INSERT INTO events (id, job_id, kind, at, worker, token, attempt, detail, prev)
            SELECT id, CAST(job_id AS INTEGER), kind, iif({_FINITE.format("at")}, at, 0.0),
                   {_AS_TEXT.format("worker")}, {_AS_TEXT.format("token")},
                   iif(typeof(attempt) = 'integer', attempt, CAST(attempt AS INTEGER)),
                   {_AS_TEXT.format("detail")}, iif(typeof(prev) = 'integer', prev, NULL)
              FROM events_v2""",
        "DROP TABLE jobs_v2",
        "DROP TABLE events_v2",
        "DROP TABLE temp.upgrade_damage",
    ),
    6: (
        f"INSERT INTO jobs ({_JOBS_ALL}, {_JOBS_LATER}) SELECT {_JOBS_ALL}, {_JOBS_LATER} FROM jobs_v6",
        "INSERT INTO events (id, job_id, kind, at, worker, token, attempt, detail, prev)"
        " SELECT id, job_id, kind, at, worker, token, attempt, detail, prev FROM events_v6",
        "DROP TABLE jobs_v6",
        "DROP TABLE events_v6",
    ),
}
