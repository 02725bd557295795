"""Every statement the queue runs on PostgreSQL, as named constants with psycopg's ``%(name)s``
parameters. The same names as ``leaselab.backends.sqlite.statements``. Each is written with
``:name`` parameters, the shared ones once in ``leaselab.backends.sql``, and converted by
``pyformat`` here, at import; no value is ever formatted into SQL.
"""

from __future__ import annotations

from importlib import resources

from ...job import JOB_COLUMNS
from .. import sql
from ..sql import pyformat

ENQUEUE = pyformat(sql.ENQUEUE)
ENQUEUE_UNIQUE = pyformat(sql.ENQUEUE_UNIQUE)
HOLDING_KEY = pyformat(sql.HOLDING_KEY)
SCHEDULE_LAST = pyformat(sql.SCHEDULE_LAST)
SCHEDULE_START = pyformat(sql.SCHEDULE_START)
SCHEDULE_ADVANCE = pyformat(sql.SCHEDULE_ADVANCE)
COMPLETE = pyformat(sql.COMPLETE)
LINK_EVENT = pyformat(sql.LINK_EVENT)
GET = pyformat(sql.GET)
OUTCOME = pyformat(sql.OUTCOME)
FAILED_BY = pyformat(sql.FAILED_BY)

# After a call whose reply never came, the session that ran it may still be at it: the client's end
# was cut (the call timeout, a dropped network), not the server's, and a statement still on its way
# there may yet run and commit. Before the queue reads any outcome (held_by after a lost claim, say)
# that session is ended and waited for (PostgreSQL 14's two-argument pg_terminate_backend), so what
# it did is committed or rolled back for good. Its start time tells it from a later session that
# was given the same pid. SESSION names a new connection's own session for that.
SESSION = "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
END_SESSION = """
SELECT pg_terminate_backend(pid, %(wait_ms)s) FROM pg_stat_activity
 WHERE pid = %(pid)s AND backend_start = %(started)s
"""
HELD_BY = pyformat(sql.HELD_BY)
LIST_JOBS = pyformat(sql.LIST_JOBS)
LIST_JOBS_BY_STATUS = pyformat(sql.LIST_JOBS_BY_STATUS)
LIST_JOBS_NEWEST = pyformat(sql.LIST_JOBS_NEWEST)
LIST_JOBS_BY_STATUS_NEWEST = pyformat(sql.LIST_JOBS_BY_STATUS_NEWEST)
STATS = pyformat(sql.STATS)
EVENTS = pyformat(sql.EVENTS)
EVENTS_FOR_JOB = pyformat(sql.EVENTS_FOR_JOB)
NEXT_RUN_AT = pyformat(sql.NEXT_RUN_AT)

# The claim of the article, with one change a server needs. Under READ COMMITTED, a second
# claim that waits on the first one's row lock is not re-planned when the first commits: its
# subquery already chose that id, the outer WHERE id = ... still matches, and the job would
# be claimed twice. FOR UPDATE SKIP LOCKED makes the subquery lock its pick and step over
# rows another transaction holds, so a concurrent claim takes the next job at once.
_SKIP_LOCKED = "\n              FOR UPDATE SKIP LOCKED"

CLAIM = pyformat("\n" + sql.claim(_SKIP_LOCKED) + "\n")

# A worker serving several named queues: :queues is a JSON array of their names. Each statement that
# claims has a twin ending in _SEVERAL that serves them (sql.SERVES_ONE says why two).
# Each queue's first {limit} runnable jobs come from jobs_claim (a LATERAL seek per queue), locked
# there (SKIP LOCKED) so that rows another claim holds make way for the next of that queue.
SERVES_SEVERAL = (
    "\n               AND id IN (SELECT c.id FROM jsonb_array_elements_text(:queues::jsonb) AS q (name)"
    "\n                   CROSS JOIN LATERAL (SELECT id FROM jobs"
    "\n                    WHERE status = 'pending' AND run_at <= :now AND queue = q.name"
    "\n                    ORDER BY priority DESC, run_at ASC, id ASC LIMIT {limit} FOR UPDATE SKIP LOCKED) AS c)"
)
CLAIM_SEVERAL = pyformat("\n" + sql.claim(_SKIP_LOCKED, serves=SERVES_SEVERAL) + "\n")

# A renewal's lease runs from when the server applied it, not from when it was sent: a beat that
# waited on another transaction's lock (shorter than the busy timeout, so no error) would otherwise
# write a lease that had already run out. The rows are locked first (FOR UPDATE in the CTE), and
# the new lease is computed for each row only once the join hands it over, that is after the lock
# was granted; clock_timestamp() is the time then (now() would be the transaction's start).
# :now is NULL when the queue keeps the server's clock, and a number from an injected clock.
_RENEWED = """UPDATE jobs
   SET lease_until = COALESCE(:now::float8, extract(epoch FROM clock_timestamp())::float8) + :lease::float8,
       updated_at = COALESCE(:now::float8, extract(epoch FROM clock_timestamp())::float8),
       last_event = 'heartbeat'
  FROM (SELECT id FROM jobs WHERE status = 'running' AND {fenced} FOR UPDATE) AS held
 WHERE jobs.id = held.id"""

# Every lease one worker holds, renewed in one statement: :tokens is a JSON array of tokens.
HEARTBEAT_MANY = pyformat(
    "\n"
    + _RENEWED.format(fenced="token IN (SELECT jsonb_array_elements_text(:tokens::jsonb))")
    + """
RETURNING jobs.id, jobs.lease_until
"""
)

# Fenced writes: only the holder of the current token may change a running job.
HEARTBEAT = pyformat(
    "\n"
    + _RENEWED.format(fenced="id = :id AND token = :token")
    + """
RETURNING jobs.lease_until
"""
)


# -- a worker's batches: statements that write their own history -----------------------------------
# The triggers of schema.sql write a job's history for any statement that changes it, but each row
# costs a plpgsql call with an INSERT of its own. The statements a worker with slots sends for
# every batch write the events themselves instead, in the same statement: lock the rows (the
# fence, or SKIP LOCKED), insert one event per row linked to the job's newest (one INSERT,
# completions first, so the ids keep the order the triggers gave), then update the rows with
# last_event_id set to the new event, which tells the trigger (its WHEN) that the history is
# already written. Same events, same links, same transaction. Counted on the server (callgrind),
# a batch of 8 costs 16 % fewer instructions per job this way; one job at a time the larger
# statement costs 2-3 % more than the two trigger calls it saves, so the one-job statements below
# (COMPLETE_AND_CLAIM, COMPLETE_ONE_AND_CLAIM) keep the triggers (bench/README).
_RETURNING_JOB = ", ".join(f"jobs.{column.strip()}" for column in JOB_COLUMNS.split(","))

# The jobs still held under their tokens, locked, with the result each completion writes: :done is
# a JSON array of {"id", "token", "result"} objects, each fenced by its own token. A job given twice
# is completed once, by the first (one event, one result; the queue refuses the second), as an
# UPDATE ... FROM did; DISTINCT ON comes after the lock, since FOR UPDATE cannot go with it.
_HELD_MANY = """fenced AS (
    SELECT j.id, j.worker, j.token, j.attempts, j.last_event_id AS prev, d.result, d.n
      FROM ROWS FROM (jsonb_to_recordset(:done::jsonb) AS (id bigint, token text, result text))
           WITH ORDINALITY AS d (id, token, result, n)
      JOIN jobs j ON j.id = d.id
     WHERE j.status = 'running' AND j.token = d.token
       FOR UPDATE OF j
), held AS (
    SELECT DISTINCT ON (id) id, worker, token, attempts, prev, result FROM fenced ORDER BY id, n
)"""


def _pending(limit: str, serves: str) -> str:
    """The runnable jobs the claim takes, in claim order, locked (SKIP LOCKED), as CLAIM picks them."""
    return f"""pending AS (
    SELECT id, attempts + 1 AS attempt, last_event_id AS prev FROM jobs
     WHERE status = 'pending' AND run_at <= :now{serves.format(limit=limit)}
     ORDER BY priority DESC, run_at ASC, id ASC
     LIMIT {limit}{_SKIP_LOCKED}
)"""


_COMPLETED_EVENTS = "SELECT 1 AS step, id, 'completed' AS kind, worker, token, attempts AS attempt, prev FROM held"


def _claimed_events(token: str) -> str:
    return (
        f"SELECT 2 AS step, id, 'claimed' AS kind, :worker AS worker, {token.format(id='id')} AS token,"
        " attempt, prev FROM pending"
    )


def _logged(*events: str) -> str:
    """One INSERT of the statement's events, in order (completions, then claims), each linked to its job's newest."""
    union = "\n        UNION ALL\n        ".join(events)
    return f"""logged AS (
    INSERT INTO events (job_id, kind, at, worker, token, attempt, detail, prev)
    SELECT id, kind, :now, worker, token, attempt, NULL, prev FROM (
        {union}
    ) AS e ORDER BY step, id
    RETURNING id, job_id
)"""


# The completion: COMPLETE's columns, and the head of the job's history.
_COMPLETED = f"""completed AS ({sql.COMPLETED.format(result="held.result")}, last_event_id = logged.id
      FROM held JOIN logged ON logged.job_id = held.id
     WHERE jobs.id = held.id
    RETURNING jobs.id
)"""


def _claimed(token: str) -> str:
    """The claim: CLAIM's columns (``token`` with ``{id}`` for the job id), and the head of the job's history."""
    return f"""claimed AS (
    UPDATE jobs SET status = 'running', attempts = attempts + 1,
           lease_until = :lease_until, worker = :worker, token = {token.format(id="jobs.id")}, started_at = :now,
           updated_at = :now, last_event = 'claimed', last_event_id = logged.id
      FROM pending JOIN logged ON logged.job_id = pending.id
     WHERE jobs.id = pending.id
    RETURNING {_RETURNING_JOB}
)"""


# A batch of claims: up to :n runnable jobs, each token the call's :token, a dash and the job id.
_BATCH_TOKEN = sql.batch_token(job_id="{id}")


def _claim_many(serves: str) -> str:
    return pyformat(f"""
WITH {_pending(":n", serves)},
{_logged(_claimed_events(_BATCH_TOKEN))},
{_claimed(_BATCH_TOKEN)}
SELECT * FROM claimed
""")


CLAIM_MANY = _claim_many(sql.SERVES_ONE)
CLAIM_MANY_SEVERAL = _claim_many(SERVES_SEVERAL)

# A worker's hot path in one statement, one round trip: complete the job it holds (fenced by its
# token), and only if that changed a row, claim the next job exactly as CLAIM does. Always one
# row: how many jobs were completed (0 or 1), then the claimed job's columns, NULL when none.
# The two UPDATEs touch different rows (the completed job is running, the claim takes a pending
# one), and the claim waits for the completion through EXISTS, so it never runs after a refusal.
# Sent as BEGIN, COMPLETE, CLAIM, COMMIT it took four round trips, and lost to two autocommit calls.


def _complete_and_claim(serves: str) -> str:
    return pyformat(f"""
WITH completed AS ({sql.COMPLETE}RETURNING id
), claimed AS (
{sql.claim(_SKIP_LOCKED, token=":next_token", also=" AND EXISTS (SELECT 1 FROM completed)", serves=serves)}
)
SELECT (SELECT count(*) FROM completed), claimed.* FROM (VALUES (1)) AS one (row) LEFT JOIN claimed ON true
""")


COMPLETE_AND_CLAIM = _complete_and_claim(sql.SERVES_ONE)
COMPLETE_AND_CLAIM_SEVERAL = _complete_and_claim(SERVES_SEVERAL)

# Many completions in one statement, one round trip. A job missing from what it returns was
# refused; the queue records those refusals afterwards.
COMPLETE_MANY = pyformat(f"""
WITH {_HELD_MANY},
{_logged(_COMPLETED_EVENTS)},
{_COMPLETED}
SELECT id FROM completed
""")

# A worker with slots refills what finished: COMPLETE_MANY and CLAIM_MANY in one statement, one
# round trip. Always at least one row: the ids completed (an array, NULL for none), then one
# claimed job's columns per row (NULL when none was claimed). The claim does not wait for the
# completions: a refused job frees its slot as a completed one does.


def _complete_many_and_claim(serves: str) -> str:
    return pyformat(f"""
WITH {_HELD_MANY},
{_pending(":n", serves)},
{_logged(_COMPLETED_EVENTS, _claimed_events(_BATCH_TOKEN))},
{_COMPLETED},
{_claimed(_BATCH_TOKEN)}
SELECT (SELECT array_agg(id) FROM completed), claimed.* FROM (VALUES (1)) AS one (row) LEFT JOIN claimed ON true
""")


COMPLETE_MANY_AND_CLAIM = _complete_many_and_claim(sql.SERVES_ONE)
COMPLETE_MANY_AND_CLAIM_SEVERAL = _complete_many_and_claim(SERVES_SEVERAL)

# The same with one completion, what a one-slot worker sends for every job: the job's id, token and
# result as parameters, not a JSON array the server unpacks (jsonb_to_recordset) for each job.
# The claims' token is :next_token here, since :token is the completion's fence.


def _complete_one_and_claim(serves: str) -> str:
    return pyformat(f"""
WITH completed AS ({sql.COMPLETE}RETURNING id
), claimed AS (
{sql.claim(_SKIP_LOCKED, token=sql.batch_token(":next_token"), pick="IN", limit=":n", serves=serves)}
)
SELECT (SELECT array_agg(id) FROM completed), claimed.* FROM (VALUES (1)) AS one (row) LEFT JOIN claimed ON true
""")


COMPLETE_ONE_AND_CLAIM = _complete_one_and_claim(sql.SERVES_ONE)
COMPLETE_ONE_AND_CLAIM_SEVERAL = _complete_one_and_claim(SERVES_SEVERAL)

# The queue's Backoff.delay(attempts), in SQL: base * 2**(attempts-1), stretched by up to
# jitter, capped at cap. The backend adds base, cap and jitter to the statement's parameters.
# PostgreSQL raises on a float overflow where Python gives inf, so an attempt count already
# past the cap (2**(attempts-1) > 2 * cap / base) is answered with the cap before any power,
# and the power is taken in two halves (each below 2**1024; multiplying by a power of two is
# exact, so the delay is the very float Python computes).
_BACKOFF = """
CASE WHEN attempts < 1 OR :backoff_base::float8 = 0 THEN 0
     WHEN attempts - 1 > (ln(:backoff_cap::float8) - ln(NULLIF(:backoff_base::float8, 0))) / ln(2.0) + 1
          THEN :backoff_cap::float8
     ELSE LEAST(:backoff_cap::float8,
                :backoff_base::float8 * power(2.0::float8, (attempts - 1) / 2)
                * power(2.0::float8, (attempts - 1) - (attempts - 1) / 2)
                * (1 + :backoff_jitter::float8 * random())) END"""

FAIL = pyformat(sql.fail(_BACKOFF))

# :tokens (a JSON array) are the claims the stopping worker holds.
RELEASE = pyformat(sql.release(held="token IN (SELECT jsonb_array_elements_text(:tokens::jsonb))"))

# :ids (a JSON array) are the jobs an operator names.
_LISTED = "id IN (SELECT jsonb_array_elements_text(:ids::jsonb)::bigint)"
RETRY = pyformat(sql.retry(_LISTED))
RETRY_DEAD = pyformat(sql.RETRY_DEAD)
CANCEL = pyformat(sql.cancel(_LISTED))
STATUSES = pyformat(sql.statuses(_LISTED))

# The reaper steps over rows another transaction holds (SKIP LOCKED): a holder frozen mid-write
# (SIGSTOP) must not stall every worker's reaper behind its row lock; the next reap takes that
# row if it is still expired. :keep (a JSON array) are the tokens of the worker that reaps: it
# is alive, so its own jobs are not a crashed worker's, whatever a freeze did to their leases; a
# batch claim's own token keeps every job it took (their tokens are it, a dash and the id).
REAP = pyformat(
    sql.reap(
        _BACKOFF,
        expired="""\
 WHERE id IN (SELECT id FROM jobs WHERE status = 'running' AND lease_until < :now
                AND token NOT IN (SELECT jsonb_array_elements_text(:keep::jsonb))
                AND split_part(token, '-', 1) NOT IN (SELECT jsonb_array_elements_text(:keep::jsonb))
              FOR UPDATE SKIP LOCKED)""",
    )
)

# The job's row is locked first (FOR UPDATE): see sql.RECORD_LEASE_LOST.
RECORD_LEASE_LOST = pyformat(sql.record_lease_lost(lock=" FOR UPDATE OF j"))

# -- the backend's own statements ------------------------------------------------------------

# The server's clock, in unix seconds: clock_timestamp() is the time now, not the
# transaction's start as now() would be.
SERVER_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"

# Whether this database already holds tables named jobs and events, and the mark on each.
# to_regclass follows the search_path, as the queue's own statements do.
SCHEMA_MARKS = """
SELECT t.name, c.oid IS NOT NULL, obj_description(c.oid, 'pg_class')
  FROM (VALUES ('jobs'), ('events')) AS t(name)
  LEFT JOIN pg_class c ON c.oid = to_regclass(t.name)
"""

# Creating the schema is serialized by a transaction-level advisory lock, so sixteen
# processes opening a new database at once create it exactly once. The key is a constant.
SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(%(key)s)"
# The schema's transaction waits for no synchronous standby: a schema is no promise to a client (one a
# failover loses is made again by the next open), and each acknowledged write after it waits for the
# standby to hold everything before it, the schema too. So a lagging standby holds up no open.
SCHEMA_COMMITS_LOCALLY = "SET LOCAL synchronous_commit = local"

LISTEN = "LISTEN leaselab_jobs"

# -- upgrades --------------------------------------------------------------------------------

# Upgrades, by the version a database has: it runs MIGRATIONS[v] for each version v from its own
# up to the newest, in the transaction that holds SCHEMA_LOCK, so concurrent openers upgrade once.
# 1 -> 2: the CHECKs of SQLite's schema 3 (see schema.sql), and attempts (jobs) and attempt
# (events) become bigint, as max_attempts is. A row another program wrote that breaks a CHECK
# is repaired as SQLite's upgrade to schema 3 repairs it: the job keeps its id and history,
# a time that is not finite is replaced by the upgrade's time (a start, finish or lease by
# none), and a job that was pending or running becomes dead, its last_error and a 'dead' event
# naming every bad value. A finished job keeps its status; its last_error names what was repaired.
# The tables are locked first, so no write can slip in between the repair and the CHECKs.
_FINITE = "({0} > '-Infinity' AND {0} < 'Infinity')"


# schema.sql, read once: the migrations below take some of its statements as they are.
SCHEMA = resources.files(__package__).joinpath("schema.sql").read_text(encoding="utf-8")


def _schema_statement(start: str) -> str:
    """The statement of schema.sql that begins with ``start`` (a function's whole definition, to its ``$$;``)."""
    begin = SCHEMA.index(start)
    return SCHEMA[begin : SCHEMA.index("$$;", begin) + len("$$")]


def _schema_statement_to(start: str, end: str) -> str:
    """The statement of schema.sql that begins with ``start``, to the first ``end`` after it."""
    begin = SCHEMA.index(start)
    return SCHEMA[begin : SCHEMA.index(end, begin) + len(end)]


_UPGRADE_NOW = "extract(epoch FROM now())::float8"  # one time for the whole upgrade: its transaction's
_TIMES = ("run_at", "lease_until", "created_at", "started_at", "finished_at", "updated_at")

# The reason text, '' for a sound row. A NULL time is fine (the NOT NULLs were already enforced):
# NOT (NULL > ...) is NULL, the CASE gives NULL, and concat() skips it.
_DAMAGE_REASONS = (
    "concat("
    + ", ".join(
        [f"CASE WHEN NOT {_FINITE.format(c)} THEN '; {c} was ' || {c} END" for c in _TIMES]
        + [
            "CASE WHEN status = 'running' AND (lease_until IS NULL OR token IS NULL)"
            " THEN '; running with no lease or no token' END",
            "CASE WHEN status = 'pending' AND attempts >= max_attempts THEN '; pending with no attempt left' END",
        ]
    )
    + ")"
)

# One statement: find the damage, write the 'dead' events of the active jobs (linked to each
# job's history), and repair the rows. It sets no last_event, so the history trigger stays quiet
# and the job's history gains exactly the one 'dead' event, as on SQLite.
_REPAIR = f"""
WITH damage AS (
    SELECT id, status IN ('pending', 'running') AS active,
           'damaged in the database, found by the upgrade to schema 2: ' || substr(reasons, 3) AS reason
      FROM (SELECT id, status, {_DAMAGE_REASONS} AS reasons FROM jobs) AS j
     WHERE reasons <> ''
), ended AS (
    INSERT INTO events (job_id, kind, at, worker, token, attempt, detail, prev)
    SELECT j.id, 'dead', {_UPGRADE_NOW}, j.worker, j.token, j.attempts, d.reason, j.last_event_id
      FROM jobs j JOIN damage d ON d.id = j.id
     WHERE d.active
    RETURNING id, job_id
)
UPDATE jobs SET
       status = CASE WHEN d.active THEN 'dead' ELSE jobs.status END,
       run_at = CASE WHEN {_FINITE.format("run_at")} THEN run_at ELSE {_UPGRADE_NOW} END,
       lease_until = CASE WHEN NOT d.active AND {_FINITE.format("lease_until")} THEN lease_until END,
       created_at = CASE WHEN {_FINITE.format("created_at")} THEN created_at ELSE {_UPGRADE_NOW} END,
       started_at = CASE WHEN {_FINITE.format("started_at")} THEN started_at END,
       finished_at = CASE WHEN d.active THEN {_UPGRADE_NOW}
                          WHEN {_FINITE.format("finished_at")} THEN finished_at END,
       updated_at = {_UPGRADE_NOW},
       last_error = d.reason,
       last_event_id = COALESCE(e.id, jobs.last_event_id)
  FROM damage d LEFT JOIN ended e ON e.job_id = d.id
 WHERE jobs.id = d.id
"""

# The domains of schema 7, each with the jobs columns of its type (events.kind is leaselab_event_kind).
DOMAINS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leaselab_time", _TIMES),
    ("leaselab_status", ("status",)),
    ("leaselab_attempts", ("attempts",)),
    ("leaselab_max_attempts", ("max_attempts",)),
    ("leaselab_seconds", ("timeout", "beat_timeout")),
    ("leaselab_queue_name", ("queue",)),
    ("leaselab_key", ("key",)),
    ("leaselab_event_kind", ()),
)
# The jobs CHECKs of schema 6 that the domains replace: unnamed ones by the names PostgreSQL gave them.
_ONE_COLUMN_CHECKS = (
    *(f"jobs_{c}_finite" for c in _TIMES),
    *(f"jobs_{c}_check" for c in ("status", "attempts", "max_attempts", "timeout", "beat_timeout", "queue", "key")),
)

MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "LOCK TABLE jobs, events IN ACCESS EXCLUSIVE MODE",
        _REPAIR,
        "ALTER TABLE jobs ALTER COLUMN attempts TYPE bigint, "
        + ", ".join(f"ADD CONSTRAINT jobs_{c}_finite CHECK ({c} > '-Infinity' AND {c} < 'Infinity')" for c in _TIMES)
        + ", ADD CONSTRAINT jobs_running_has_a_lease"
        " CHECK (status <> 'running' OR (lease_until IS NOT NULL AND token IS NOT NULL))"
        ", ADD CONSTRAINT jobs_pending_has_an_attempt_left CHECK (status <> 'pending' OR attempts < max_attempts)",
        "ALTER TABLE events ALTER COLUMN attempt TYPE bigint",
        "COMMENT ON TABLE jobs IS 'leaselab queue, schema 2'",
        "COMMENT ON TABLE events IS 'leaselab queue, schema 2'",
    ),
    # 2 -> 3: the history trigger skips a row whose statement wrote its own event (schema.sql), so a
    # worker's batch statements can write theirs. Nothing else changes: the tables and the rows stay.
    2: (
        "DROP TRIGGER jobs_changed ON jobs",
        "CREATE TRIGGER jobs_changed BEFORE UPDATE OF last_event ON jobs"
        " FOR EACH ROW WHEN (NEW.last_event_id IS NOT DISTINCT FROM OLD.last_event_id)"
        " EXECUTE FUNCTION leaselab_job_changed()",
        "COMMENT ON TABLE jobs IS 'leaselab queue, schema 3'",
        "COMMENT ON TABLE events IS 'leaselab queue, schema 3'",
    ),
    # 3 -> 4: jobs gain timeout and beat_timeout (NULL: no limit), the history four kinds
    # ('timed_out', 'released', and 'retried' and 'cancelled' for what an operator does by hand), and
    # the history trigger keeps their reason as it keeps a failure's: its function is taken from
    # schema.sql as it is, so an upgraded database runs the very code a new one does.
    3: (
        "LOCK TABLE jobs, events IN ACCESS EXCLUSIVE MODE",
        "ALTER TABLE jobs ADD COLUMN timeout double precision CHECK (timeout > 0 AND timeout < 'Infinity'),"
        " ADD COLUMN beat_timeout double precision CHECK (beat_timeout > 0 AND beat_timeout < 'Infinity')",
        "ALTER TABLE events DROP CONSTRAINT events_kind_check, ADD CONSTRAINT events_kind_check CHECK (kind IN"
        " ('enqueued', 'claimed', 'heartbeat', 'completed', 'failed', 'reaped', 'dead', 'lease_lost',"
        " 'timed_out', 'released', 'retried', 'cancelled'))",
        _schema_statement("CREATE OR REPLACE FUNCTION leaselab_job_changed()"),
        "COMMENT ON TABLE jobs IS 'leaselab queue, schema 4'",
        "COMMENT ON TABLE events IS 'leaselab queue, schema 4'",
    ),
    # 4 -> 5: jobs gain queue (every job so far in 'default') and key (NULL: not a unique job), the claim's
    # index is built anew with the queue first, jobs_key keeps one pending or running job per key, and
    # the wake-up trigger counts only the new jobs' queues (its function taken from schema.sql as it is).
    4: (
        "LOCK TABLE jobs, events IN ACCESS EXCLUSIVE MODE",
        "ALTER TABLE jobs ADD COLUMN queue text NOT NULL DEFAULT 'default' CHECK (length(queue) BETWEEN 1 AND 64),"
        " ADD COLUMN key text CHECK (length(key) BETWEEN 1 AND 200)",
        "DROP INDEX jobs_claim",
        "CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at, id) WHERE status = 'pending'",
        "CREATE UNIQUE INDEX jobs_key ON jobs (key) WHERE key IS NOT NULL AND status IN ('pending', 'running')",
        _schema_statement("CREATE OR REPLACE FUNCTION leaselab_notify_enqueued()"),
        "COMMENT ON TABLE jobs IS 'leaselab queue, schema 5'",
        "COMMENT ON TABLE events IS 'leaselab queue, schema 5'",
    ),
    # 5 -> 6: periodic schedules' last ticks get their table (schema.sql's statement as it is); no row changes.
    5: (
        _schema_statement_to("CREATE TABLE schedules (", ");"),
        "COMMENT ON TABLE jobs IS 'leaselab queue, schema 6'",
        "COMMENT ON TABLE events IS 'leaselab queue, schema 6'",
    ),
    # 6 -> 7: each one-column rule becomes its column's domain (schema.sql's CREATE DOMAINs, as they are),
    # and its CHECK goes: the same rules, read once per session instead of in every statement. Changing a
    # column to a domain with a rule checks every row against it, so the rows are known to keep them.
    6: (
        "LOCK TABLE jobs, events IN ACCESS EXCLUSIVE MODE",
        *(_schema_statement_to(f"CREATE DOMAIN {name} ", ");") for name, _ in DOMAINS),
        "ALTER TABLE jobs "
        + ", ".join(f"DROP CONSTRAINT IF EXISTS {check}" for check in _ONE_COLUMN_CHECKS)
        + ", "
        + ", ".join(f"ALTER COLUMN {column} TYPE {name}" for name, columns in DOMAINS for column in columns),
        "ALTER TABLE events DROP CONSTRAINT IF EXISTS events_kind_check, ALTER COLUMN kind TYPE leaselab_event_kind",
        "COMMENT ON TABLE jobs IS 'leaselab queue, schema 7'",
        "COMMENT ON TABLE events IS 'leaselab queue, schema 7'",
    ),
}
