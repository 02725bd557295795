"""Every statement the queue runs, as named constants with parameters. Nothing is formatted into SQL."""

from __future__ import annotations

from .job import EVENT_COLUMNS, JOB_COLUMNS

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

# Fenced writes: only the holder of the current token may change a running job.
HEARTBEAT = """
UPDATE jobs SET lease_until = :lease_until, updated_at = :now, last_event = 'heartbeat'
 WHERE id = :id AND status = 'running' AND token = :token
RETURNING lease_until
"""

COMPLETE = """
UPDATE jobs SET status = 'done', result = :result, lease_until = NULL, finished_at = :now,
       updated_at = :now, last_event = 'completed'
 WHERE id = :id AND status = 'running' AND token = :token
RETURNING id
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

# A refused (fenced-off) write leaves the job alone but is written into the history.
# Zero rows inserted means the job id does not exist at all.
RECORD_LEASE_LOST = """
INSERT INTO events (job_id, kind, at, worker, token, attempt, detail)
SELECT j.id, 'lease_lost', :now,
       (SELECT e.worker FROM events e WHERE e.job_id = :id AND e.token = :token AND e.kind = 'claimed'),
       :token,
       COALESCE((SELECT e.attempt FROM events e
                  WHERE e.job_id = :id AND e.token = :token AND e.kind = 'claimed'), j.attempts),
       :detail
  FROM jobs j WHERE j.id = :id
RETURNING (SELECT status FROM jobs WHERE id = :id)
"""

GET = f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?"

JOB_EXISTS = "SELECT 1 FROM jobs WHERE id = ?"

LIST_JOBS = f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY id LIMIT :limit"

LIST_JOBS_BY_STATUS = f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = :status ORDER BY id LIMIT :limit"

# Newest first: a dashboard shows the latest jobs without reading the whole table (rowid order, no sort).
LIST_JOBS_NEWEST = f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY id DESC LIMIT :limit"

LIST_JOBS_BY_STATUS_NEWEST = f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = :status ORDER BY id DESC LIMIT :limit"

STATS = "SELECT status, count(*) FROM jobs GROUP BY status"

EVENTS = f"SELECT {EVENT_COLUMNS} FROM events WHERE id > :after ORDER BY id"

EVENTS_FOR_JOB = f"SELECT {EVENT_COLUMNS} FROM events WHERE job_id = :job_id AND id > :after ORDER BY id"

NEXT_RUN_AT = "SELECT min(run_at) FROM jobs WHERE status = 'pending'"
