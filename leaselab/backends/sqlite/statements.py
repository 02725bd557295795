"""Every statement the queue runs, as named constants with parameters. Nothing is formatted into SQL."""

from __future__ import annotations

from ...job import EVENT_COLUMNS, JOB_COLUMNS

ENQUEUE = """
INSERT INTO jobs (payload, priority, run_at, max_attempts, created_at, updated_at)
VALUES (:payload, :priority, :run_at, :max_attempts, :now, :now)
RETURNING id
"""

# The claim of the article: picking a job and granting its lease are one statement,
# so two workers, in any processes, can never both get the same job.
CLAIM = f"""
UPDATE jobs SET status = 'running', attempts = attempts + 1,
       lease_until = :lease_until, worker = :worker, token = :token, started_at = :now,
       updated_at = :now, last_event = 'claimed'
 WHERE id = (SELECT id FROM jobs
              WHERE status = 'pending' AND run_at <= :now
              ORDER BY priority DESC, run_at ASC, id ASC
              LIMIT 1)
RETURNING {JOB_COLUMNS}
"""

# A batch of the same claim: up to :n runnable jobs in claim order, leased in one statement.
# Each job's token is the call's random :token with the job id after it, so every claim
# still writes a token no other claim ever wrote. RETURNING gives no order; the queue sorts.
CLAIM_MANY = f"""
UPDATE jobs SET status = 'running', attempts = attempts + 1,
       lease_until = :lease_until, worker = :worker, token = :token || '-' || id, started_at = :now,
       updated_at = :now, last_event = 'claimed'
 WHERE id IN (SELECT id FROM jobs
               WHERE status = 'pending' AND run_at <= :now
               ORDER BY priority DESC, run_at ASC, id ASC
               LIMIT :n)
RETURNING {JOB_COLUMNS}
"""

# Fenced writes: only the holder of the current token may change a running job.
HEARTBEAT = """
UPDATE jobs SET lease_until = :lease_until, updated_at = :now, last_event = 'heartbeat'
 WHERE id = :id AND status = 'running' AND token = :token
RETURNING lease_until
"""

# Every lease one worker holds, renewed in one statement: :tokens is a JSON array of tokens
# (each names one claim of one job). A job missing from the result was fenced off.
HEARTBEAT_MANY = """
UPDATE jobs SET lease_until = :lease_until, updated_at = :now, last_event = 'heartbeat'
 WHERE status = 'running' AND token IN (SELECT value FROM json_each(:tokens))
RETURNING id, lease_until
"""

# No RETURNING: how many rows it changed (1, or 0 when fenced off) is the whole answer.
COMPLETE = """
UPDATE jobs SET status = 'done', result = :result, lease_until = NULL, finished_at = :now,
       updated_at = :now, last_event = 'completed'
 WHERE id = :id AND status = 'running' AND token = :token
"""

# leaselab_backoff(attempts) is the queue's Backoff.delay, registered on the connection.
FAIL = """
UPDATE jobs SET status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
       run_at = CASE WHEN attempts >= max_attempts THEN run_at
                     ELSE :now + leaselab_backoff(attempts) END,
       finished_at = CASE WHEN attempts >= max_attempts THEN :now END,
       last_error = :error, lease_until = NULL, updated_at = :now, last_event = 'failed'
 WHERE id = :id AND status = 'running' AND token = :token
RETURNING status
"""

# The reaper: one conditional statement, never read-then-write.
REAP = """
UPDATE jobs SET status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
       run_at = CASE WHEN attempts >= max_attempts THEN run_at
                     ELSE :now + leaselab_backoff(attempts) END,
       finished_at = CASE WHEN attempts >= max_attempts THEN :now END,
       last_error = 'lease expired', lease_until = NULL, updated_at = :now, last_event = 'reaped'
 WHERE status = 'running' AND lease_until < :now
RETURNING id
"""

# A job's history is a linked list: jobs.last_event_id is its newest event and each event's
# prev is the one before, so reading one job's history is one rowid lookup per event, with no
# index on events to keep up on every write. This walks it newest to oldest, down to :after.
# Each step must go to a smaller id, so even a file whose links were damaged into a loop
# ends the walk instead of running forever.
_JOB_CHAIN = """
WITH RECURSIVE chain(id) AS (
    SELECT last_event_id FROM jobs WHERE id = :id
    UNION ALL
    SELECT e.prev FROM events e JOIN chain c ON e.id = c.id WHERE e.prev > :after AND e.prev < e.id
)"""

# A refused (fenced-off) write leaves the job alone but is written into the history, naming
# the worker and attempt that claimed with this token. Zero rows inserted: no such job id.
# LINK_EVENT then makes the new event the head of the job's history, in the same transaction.
RECORD_LEASE_LOST = _JOB_CHAIN + """,
claim AS (SELECT e.worker, e.attempt FROM events e
           WHERE e.id IN (SELECT id FROM chain) AND e.token = :token AND e.kind = 'claimed')
INSERT INTO events (job_id, kind, at, worker, token, attempt, detail, prev)
SELECT j.id, 'lease_lost', :now, (SELECT worker FROM claim), :token,
       COALESCE((SELECT attempt FROM claim), j.attempts), :detail, j.last_event_id
  FROM jobs j WHERE j.id = :id
RETURNING id, (SELECT status FROM jobs WHERE id = :id)
"""

LINK_EVENT = "UPDATE jobs SET last_event_id = :event_id WHERE id = :id"

GET = f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?"

JOB_EXISTS = "SELECT 1 FROM jobs WHERE id = ?"

LIST_JOBS = f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY id LIMIT :limit"

LIST_JOBS_BY_STATUS = f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = :status ORDER BY id LIMIT :limit"

# Newest first: a dashboard shows the latest jobs without reading the whole table (rowid order, no sort).
LIST_JOBS_NEWEST = f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY id DESC LIMIT :limit"

LIST_JOBS_BY_STATUS_NEWEST = f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = :status ORDER BY id DESC LIMIT :limit"

STATS = "SELECT status, count(*) FROM jobs GROUP BY status"

EVENTS = f"SELECT {EVENT_COLUMNS} FROM events WHERE id > :after ORDER BY id"

EVENTS_FOR_JOB = _JOB_CHAIN + f"""
SELECT {EVENT_COLUMNS} FROM events WHERE id IN (SELECT id FROM chain) AND id > :after ORDER BY id
"""

NEXT_RUN_AT = "SELECT min(run_at) FROM jobs WHERE status = 'pending'"

# What the planner is told about jobs_claim, written once when the schema is made. Without
# statistics SQLite walks the index from the top priority down and steps over every job that
# is not yet runnable: 100,000 delayed jobs at a high priority made every claim take 5 ms.
# These figures say what queues are like (many jobs share each of a few priority levels), and
# with them SQLite skip-scans: for each priority level, from the highest, it jumps straight to
# the jobs already runnable (the plan reads "ANY(priority) AND run_at<?"). A real ANALYZE
# replaces them; on a large queue it comes to the same plan. "ANALYZE sqlite_schema" creates
# the statistics table if needed and makes this connection read it again.
CLAIM_STATISTICS: tuple[str, ...] = (
    "ANALYZE sqlite_schema",
    "INSERT INTO sqlite_stat1 (tbl, idx, stat) SELECT 'jobs', 'jobs_claim', '1000000 100000 1 1'"
    " WHERE NOT EXISTS (SELECT 1 FROM sqlite_stat1 WHERE tbl = 'jobs')",
    "ANALYZE sqlite_schema",
)

# Upgrades, by the version a file has; each list runs in one transaction, then schema.sql
# (all IF NOT EXISTS) adds what is new. 1 -> 2: the history becomes a per-job linked list
# (events.prev, jobs.last_event_id) instead of an index on events(job_id); the old index
# still serves the two UPDATEs that build the links, and is dropped after them.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "DROP TRIGGER IF EXISTS jobs_enqueued",
        "DROP TRIGGER IF EXISTS jobs_changed",
        "ALTER TABLE jobs ADD COLUMN last_event_id INTEGER",
        "ALTER TABLE events ADD COLUMN prev INTEGER",
        "UPDATE events SET prev = (SELECT max(e.id) FROM events e"
        " WHERE e.job_id = events.job_id AND e.id < events.id)",
        "UPDATE jobs SET last_event_id = (SELECT max(e.id) FROM events e WHERE e.job_id = jobs.id)",
        "DROP INDEX IF EXISTS events_job",
    ),
}
