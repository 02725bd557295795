-- leaselab's schema version 2, as leaselab 0.1 (before STRICT tables) wrote it: the fixture of the 2 -> 3 upgrade test.

CREATE TABLE IF NOT EXISTS jobs (
    id           INTEGER PRIMARY KEY,
    payload      TEXT    NOT NULL,                   -- JSON, never pickle
    status       TEXT    NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'running', 'done', 'dead')),
    priority     INTEGER NOT NULL DEFAULT 0,
    run_at       REAL    NOT NULL,                   -- unix seconds; not claimable before
    attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts INTEGER NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    lease_until  REAL,                               -- set while running
    worker       TEXT,                               -- last holder
    token        TEXT,                               -- the fence of the last claim
    result       TEXT,                               -- JSON
    last_error   TEXT,
    created_at   REAL    NOT NULL,
    started_at   REAL,
    finished_at  REAL,
    updated_at   REAL    NOT NULL,
    last_event   TEXT    NOT NULL DEFAULT 'enqueued', -- what the last statement did; the trigger records it
    last_event_id INTEGER                            -- newest events row of this job: the head of its history
);

-- Serves the claim: WHERE status='pending' AND run_at<=? ORDER BY priority DESC, run_at, id.
-- Partial, so a claimed or finished job leaves the index and the claim never walks over it.
CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (priority DESC, run_at, id) WHERE status = 'pending';

-- Serves the reaper: WHERE status='running' AND lease_until<?.
CREATE INDEX IF NOT EXISTS jobs_lease ON jobs (lease_until) WHERE status = 'running';

CREATE TABLE IF NOT EXISTS events (
    id      INTEGER PRIMARY KEY,
    job_id  INTEGER NOT NULL,
    kind    TEXT    NOT NULL CHECK (kind IN ('enqueued', 'claimed', 'heartbeat', 'completed',
                                             'failed', 'reaped', 'dead', 'lease_lost')),
    at      REAL    NOT NULL,
    worker  TEXT,
    token   TEXT,
    attempt INTEGER NOT NULL,
    detail  TEXT,
    prev    INTEGER                                  -- this job's previous event: a per-job linked list
);
-- No index on events(job_id): a job's history is found by walking prev from jobs.last_event_id,
-- one rowid lookup per event. That keeps every write to one append at the end of the events
-- table instead of an append plus an index entry (about a fifth of a claim + complete).

-- History is written by triggers, in the same transaction as the change itself,
-- so it can never disagree with the jobs table and the claim stays one statement.
CREATE TRIGGER IF NOT EXISTS jobs_enqueued AFTER INSERT ON jobs
BEGIN
    INSERT INTO events (job_id, kind, at, worker, token, attempt, detail, prev)
    VALUES (NEW.id, 'enqueued', NEW.updated_at, NULL, NULL, NEW.attempts, NULL, NULL);
    UPDATE jobs SET last_event_id = last_insert_rowid() WHERE id = NEW.id;
END;

-- Every state change sets last_event; the chain's own update (last_event_id only) does not fire it.
CREATE TRIGGER IF NOT EXISTS jobs_changed AFTER UPDATE OF last_event ON jobs
BEGIN
    INSERT INTO events (job_id, kind, at, worker, token, attempt, detail, prev)
    VALUES (NEW.id, NEW.last_event, NEW.updated_at, NEW.worker, NEW.token, NEW.attempts,
            CASE NEW.last_event WHEN 'failed' THEN NEW.last_error
                                WHEN 'reaped' THEN NEW.last_error END,
            OLD.last_event_id);
    INSERT INTO events (job_id, kind, at, worker, token, attempt, detail, prev)
    SELECT NEW.id, 'dead', NEW.updated_at, NEW.worker, NEW.token, NEW.attempts, NEW.last_error,
           last_insert_rowid()
    WHERE NEW.status = 'dead' AND OLD.status <> 'dead';
    UPDATE jobs SET last_event_id = last_insert_rowid() WHERE id = NEW.id;
END;
