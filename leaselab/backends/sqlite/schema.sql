-- leaselab schema, version 7. The queue lives in two tables (jobs, events); periodic jobs add a third.
-- STRICT (SQLite 3.37+): a column holds only its own type, so no program writing into the
-- file can put text where the claim and the reaper compare numbers ('soon' sorts above every
-- number, so such a lease would never expire). The CHECKs keep times finite (9e999 is
-- SQLite's infinity) and every running job reapable. A CHECK that lists values says each one with =
-- and OR, never IN (...): SQLite builds a temporary b-tree for an IN list of more than two constants
-- each time a statement checks it, which was a fifth of a claim + complete's work (version 7).
-- New files use 1 KiB pages (set by the Queue before this script runs): a job row, its
-- index entries and its history rows are small, and every commit writes each page it
-- touched into the WAL whole, so smaller pages mean less to checksum, copy and sync.

CREATE TABLE IF NOT EXISTS jobs (
    id           INTEGER PRIMARY KEY,
    payload      TEXT    NOT NULL,                   -- JSON, never pickle
    status       TEXT    NOT NULL DEFAULT 'pending'
                 CONSTRAINT known_status
                 CHECK (status = 'pending' OR status = 'running' OR status = 'done' OR status = 'dead'),
    priority     INTEGER NOT NULL DEFAULT 0,
    run_at       REAL    NOT NULL CHECK (abs(run_at) < 9e999), -- unix seconds; not claimable before
    attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts INTEGER NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    lease_until  REAL    CHECK (abs(lease_until) < 9e999), -- set while running
    worker       TEXT,                               -- last holder
    token        TEXT,                               -- the fence of the last claim
    result       TEXT,                               -- JSON
    last_error   TEXT,
    created_at   REAL    NOT NULL CHECK (abs(created_at) < 9e999),
    started_at   REAL    CHECK (abs(started_at) < 9e999),
    finished_at  REAL    CHECK (abs(finished_at) < 9e999),
    updated_at   REAL    NOT NULL CHECK (abs(updated_at) < 9e999),
    last_event   TEXT    NOT NULL DEFAULT 'enqueued', -- what the last statement did; the trigger records it
    last_event_id INTEGER,                           -- newest events row of this job: the head of its history
    timeout      REAL    CHECK (timeout > 0 AND timeout < 9e999),           -- longest one attempt may run, s
    beat_timeout REAL    CHECK (beat_timeout > 0 AND beat_timeout < 9e999), -- longest without Lease.beat(), s
    -- Version 5: the named queue a job waits in (only a worker serving it claims it), and a unique
    -- job's key (jobs_key: one pending or running job per key). After the others, where ALTER TABLE
    -- puts them in an upgrade. The name's rule is the queue's (leaselab.arguments.queue_name).
    queue        TEXT    NOT NULL DEFAULT 'default' CHECK (length(queue) BETWEEN 1 AND 64),
    key          TEXT    CHECK (length(key) BETWEEN 1 AND 200),
    -- A running job always has a lease that can run out and a token to fence with: without
    -- them the reaper could never bring it back.
    CHECK (status <> 'running' OR (lease_until IS NOT NULL AND token IS NOT NULL)),
    -- A pending job always has an attempt left (failures and the reaper make it dead otherwise),
    -- so a claim's attempts + 1 never passes max_attempts nor overflows.
    CHECK (status <> 'pending' OR attempts < max_attempts)
) STRICT;

-- Serves the claim: WHERE status='pending' AND run_at<=? AND queue=? ORDER BY priority DESC, run_at, id.
-- Partial, so a claimed or finished job leaves the index and the claim never walks over it. The
-- queue after the priority: SQLite skip-scans the priority levels (CLAIM_STATISTICS) and, in each,
-- seeks straight to the queue's runnable jobs, already in run_at, id order: no sort for one queue,
-- and for several only the jobs of one level are sorted ("TEMP B-TREE FOR RIGHT PART OF ORDER BY").
CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (priority DESC, queue, run_at, id) WHERE status = 'pending';

-- One pending or running job per key: what makes a unique job's enqueue race-free (ENQUEUE_UNIQUE's
-- ON CONFLICT names it). A job done or dead leaves it, and its key may be enqueued again.
CREATE UNIQUE INDEX IF NOT EXISTS jobs_key ON jobs (key) WHERE key IS NOT NULL AND status IN ('pending', 'running');

-- Serves the reaper: WHERE status='running' AND lease_until<?.
CREATE INDEX IF NOT EXISTS jobs_lease ON jobs (lease_until) WHERE status = 'running';

-- Version 6: each periodic schedule's last handled tick (leaselab.periodic). A scheduler enqueues a
-- tick's job in the same transaction as it moves last_tick past that tick with a compare-and-set, so a
-- tick is enqueued once however many schedulers race, and long after its job finished. An upgrade
-- from 5 only adds this table.
CREATE TABLE IF NOT EXISTS schedules (
    name      TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    last_tick REAL NOT NULL CHECK (abs(last_tick) < 9e999)   -- unix seconds
) STRICT;

CREATE TABLE IF NOT EXISTS events (
    id      INTEGER PRIMARY KEY,
    job_id  INTEGER NOT NULL,
    kind    TEXT    NOT NULL CONSTRAINT known_kind
                    CHECK (kind = 'enqueued' OR kind = 'claimed' OR kind = 'heartbeat' OR kind = 'completed'
                           OR kind = 'failed' OR kind = 'reaped' OR kind = 'dead' OR kind = 'lease_lost'
                           OR kind = 'timed_out' OR kind = 'released' OR kind = 'retried' OR kind = 'cancelled'),
    at      REAL    NOT NULL,
    worker  TEXT,
    token   TEXT,
    attempt INTEGER NOT NULL,
    detail  TEXT,
    prev    INTEGER                                  -- this job's previous event: a per-job linked list
) STRICT;
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
            -- A simple CASE, not IN (...): this runs on every change of every job, and SQLite may
            -- build a small table for an IN list each time.
            CASE NEW.last_event WHEN 'failed' THEN NEW.last_error
                                WHEN 'reaped' THEN NEW.last_error
                                WHEN 'timed_out' THEN NEW.last_error
                                WHEN 'released' THEN NEW.last_error
                                WHEN 'cancelled' THEN NEW.last_error END,
            OLD.last_event_id);
    INSERT INTO events (job_id, kind, at, worker, token, attempt, detail, prev)
    SELECT NEW.id, 'dead', NEW.updated_at, NEW.worker, NEW.token, NEW.attempts, NEW.last_error,
           last_insert_rowid()
    WHERE NEW.status = 'dead' AND OLD.status <> 'dead';
    UPDATE jobs SET last_event_id = last_insert_rowid() WHERE id = NEW.id;
END;
