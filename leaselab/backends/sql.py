"""The SQL both dialects agree on, written once with ``:name`` parameters, and ``pyformat``, which
converts a statement to psycopg's ``%(name)s`` style: one source, the placeholder style changed
mechanically at import. Where the dialects differ in a part (the claim's row locking, the backoff
in the retry-or-dead rule), the statement is a template here and each dialect fills that part in.
Nothing but fixed SQL fragments is ever formatted into a statement; values go as parameters.
"""

from __future__ import annotations

import re

from ..job import EVENT_COLUMNS, JOB_COLUMNS

# A :name parameter: not part of a PostgreSQL cast (x::float8), nor glued to a word or number.
_PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def pyformat(statement: str) -> str:
    """``statement`` with every ``:name`` written ``%(name)s``, and every literal ``%`` doubled, for psycopg."""
    return _PARAMETER.sub(r"%(\1)s", statement.replace("%", "%%"))


ENQUEUE = """
INSERT INTO jobs (payload, priority, run_at, max_attempts, timeout, beat_timeout, queue, key, created_at, updated_at)
VALUES (:payload, :priority, :run_at, :max_attempts, :timeout, :beat_timeout, :queue, :key, :now, :now)
RETURNING id
"""

# A unique job: the same insert, which the partial unique index jobs_key (schema.sql) turns into
# nothing at all while a pending or running job holds the key. The index decides, not a read before
# the write: two enqueues of one key at once, in any processes, make one job (PostgreSQL's second
# insert waits for the first to commit, then does nothing). No row back: HOLDING_KEY says which job won.
ENQUEUE_UNIQUE = (
    ENQUEUE.replace("RETURNING id", "")
    + """ON CONFLICT (key) WHERE key IS NOT NULL AND status IN ('pending', 'running') DO NOTHING
RETURNING id
"""
)

# The job that holds :key now, if any (served by jobs_key).
HOLDING_KEY = "SELECT id, status, queue FROM jobs WHERE key = :key AND status IN ('pending', 'running')"

# Periodic jobs (leaselab.periodic): a schedule's last handled tick, and its compare-and-set. Both
# dialects' row locks make the set race-free: of schedulers that read the same :last, one UPDATE changes
# the row and the others, blocked behind it until it commits, find :last gone and change nothing; the
# ticks are enqueued in that same transaction, so only the winner's jobs ever exist. A first run
# inserts the row, and a racing first insert does nothing (ON CONFLICT on the primary key).
SCHEDULE_LAST = "SELECT last_tick FROM schedules WHERE name = :name"
SCHEDULE_START = "INSERT INTO schedules (name, last_tick) VALUES (:name, :tick) ON CONFLICT (name) DO NOTHING"
SCHEDULE_ADVANCE = "UPDATE schedules SET last_tick = :tick WHERE name = :name AND last_tick = :last"

# The claim of the article: picking a job and granting its lease are one statement, so two
# workers, in any processes, can never both get the same job. A server adds row locking to the
# subquery ({lock}: see the PostgreSQL statements). claim() writes it once for the single claim,
# the batch and the fused statements.
_CLAIMED = (
    """UPDATE jobs SET status = 'running', attempts = attempts + 1,
       lease_until = :lease_until, worker = :worker, token = {token}, started_at = :now,
       updated_at = :now, last_event = 'claimed'
 WHERE id {pick} (SELECT id FROM jobs
              WHERE status = 'pending' AND run_at <= :now{serves}{also}
              ORDER BY priority DESC, run_at ASC, id ASC
              LIMIT {limit}{lock})
RETURNING """
    + JOB_COLUMNS
)


# Which named queues a claim takes from. A worker that serves one queue (every worker that names none
# serves 'default') asks for it with =, and jobs_claim (each dialect's schema.sql) hands its jobs over
# in claim order with no sort. A worker that serves several gives their names as a JSON array, and
# each statements module's SERVES_SEVERAL picks, for each queue, its first {limit} runnable jobs from
# the index (a seek per queue) and lets the claim take the first of those few in claim order: the
# work is (queues x limit) rows, however long any queue's backlog. Asked as one IN over the queues,
# both planners read every runnable job of those queues and sorted them all, on every claim. Two
# statements, not one with an array of one: a planner cannot know an array holds one name.
SERVES_ONE = " AND queue = :queue"


def claim(
    lock: str, token: str = ":token", pick: str = "=", limit: str = "1", also: str = "", serves: str = SERVES_ONE
) -> str:
    """The claim's UPDATE: the dialect's row locking, how the token is made, = or IN, the LIMIT, any further
    condition, and which queues it serves (``SERVES_ONE``, or the dialect's several)."""
    return _CLAIMED.format(token=token, pick=pick, limit=limit, also=also, lock=lock, serves=serves.format(limit=limit))


def batch_token(token: str = ":token", job_id: str = "id") -> str:
    """A batch claim's token for each job: the call's random ``token``, a dash and the job's id, so every
    claim still writes a token no other claim ever wrote (``HELD_BY`` and ``REAP`` read the call's back)."""
    return f"{token} || '-' || {job_id}"


def claim_many(lock: str, serves: str = SERVES_ONE) -> str:
    """A batch of the same claim: up to :n runnable jobs in claim order, leased in one statement.

    Each job's token is ``batch_token()``. RETURNING gives no order; the queue sorts.
    """
    return claim(lock, token=batch_token(), pick="IN", limit=":n", serves=serves)


# A completion: what it writes, with where the result comes from.
COMPLETED = """UPDATE jobs SET status = 'done', result = {result}, lease_until = NULL, finished_at = :now,
       updated_at = :now, last_event = 'completed'"""

# Fenced: only the holder of the current token may change a running job. No RETURNING: how
# many rows it changed (1, or 0 when fenced off) is the whole answer.
COMPLETE = (
    "\n"
    + COMPLETED.format(result=":result")
    + """
 WHERE id = :id AND status = 'running' AND token = :token
"""
)

# A failed attempt, a timed-out one, an expired lease and a released job end alike: back to
# pending after the backoff ({backoff}, the dialect's own expression of the queue's
# Backoff.delay(attempts); none for a release), or dead once the attempts are used up. {error} is
# what last_error says, {event} the history's kind for it (an SQL expression).
_RETRY_OR_DEAD = """
UPDATE jobs SET status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
       run_at = CASE WHEN attempts >= max_attempts THEN run_at
                     ELSE :now + {backoff} END,
       finished_at = CASE WHEN attempts >= max_attempts THEN :now END,
       last_error = {error}, lease_until = NULL, updated_at = :now, last_event = {event}
"""


def fail(backoff: str) -> str:
    """The fenced failure, with the dialect's backoff; :kind is 'failed' or 'timed_out'."""
    return (
        _RETRY_OR_DEAD.format(backoff=backoff, error=":error", event=":kind")
        + """\
 WHERE id = :id AND status = 'running' AND token = :token
RETURNING status
"""
    )


def reap(backoff: str, expired: str) -> str:
    """The reaper, one conditional statement, never read-then-write: ``expired`` is the WHERE that picks
    the expired leases (not those whose token is in :keep, a JSON array), in the dialect's words."""
    return (
        _RETRY_OR_DEAD.format(backoff=backoff, error="'lease expired'", event="'reaped'")
        + expired
        + """
RETURNING id
"""
    )


def release(held: str) -> str:
    """The holder's hand-back, one fenced statement: every running job whose token is in :tokens (a JSON
    array; ``held`` is the dialect's words for that test) goes back at once, with no backoff, or to dead
    when its attempts are spent, as a reaped job would (the attempt counts: its handler ran)."""
    return (
        _RETRY_OR_DEAD.format(backoff="0", error="'released by its worker'", event="'released'")
        + f" WHERE status = 'running' AND {held}\n"
        + "RETURNING id, status\n"
    )


# What an operator does by hand, each one conditional statement over the jobs named in :ids (a JSON
# array; ``listed`` is the dialect's words for that test). A retry puts a dead job back, runnable now,
# with :fresh attempts on top of those it used: attempts only ever rise, so every claim's fence (its
# id and attempt) stays one no claim wrote before. It keeps last_error: the reason it died stays
# readable until a new attempt says otherwise.
_RETRIED = """
UPDATE jobs SET status = 'pending', max_attempts = attempts + :fresh, run_at = :now, finished_at = NULL,
       lease_until = NULL, updated_at = :now, last_event = 'retried'
 WHERE status = 'dead'{which}
RETURNING id
"""


def retry(listed: str) -> str:
    """The retry of the dead jobs in :ids."""
    return _RETRIED.format(which=f" AND {listed}")


# :queue NULL means every queue; a name, that queue's jobs alone (listings, and retrying every dead job).
_OF_QUEUE = "(CAST(:queue AS TEXT) IS NULL OR queue = :queue)"

# Every dead job, however many, of every queue or of :queue: `leaselab retry --dead [--queue Q]`.
RETRY_DEAD = _RETRIED.format(which=f" AND {_OF_QUEUE}")


def cancel(listed: str) -> str:
    """The cancel of the jobs in :ids: a pending one is dead before any worker claims it; a running one
    is dead under its holder, whose token then holds nothing (status is no longer 'running'), so the
    fence refuses its next heartbeat, completion or failure. :reason is the history's detail for it."""
    return f"""
UPDATE jobs SET status = 'dead', finished_at = :now, lease_until = NULL, last_error = :reason,
       updated_at = :now, last_event = 'cancelled'
 WHERE status IN ('pending', 'running') AND {listed}
RETURNING id
"""


def statuses(listed: str) -> str:
    """Each job in :ids that exists, with its status: why a retry or cancel left it alone."""
    return f"SELECT id, status FROM jobs WHERE {listed}"


# A job's history is a linked list: jobs.last_event_id is its newest event and each event's
# prev is the one before, so reading one job's history is one rowid lookup per event, with no
# index on events to keep up on every write. This walks it newest to oldest, down to :after.
# Each step must go to a smaller id, so even a database whose links were damaged into a loop
# ends the walk instead of running forever.
JOB_CHAIN = """
WITH RECURSIVE chain(id) AS (
    SELECT last_event_id FROM jobs WHERE id = :id
    UNION ALL
    SELECT e.prev FROM events e JOIN chain c ON e.id = c.id WHERE e.prev > :after AND e.prev < e.id
)"""

# A refused (fenced-off) write leaves the job alone but is written into the history, naming
# the worker and attempt that claimed with this token. Zero rows inserted: no such job id.
# LINK_EVENT then makes the new event the head of the job's history, in the same transaction.
# {lock} is how the dialect locks the job's row first, so a change committed between this read
# of last_event_id and LINK_EVENT (the new holder's completion, say) cannot be cut out of the list.
_RECORD_LEASE_LOST = (
    JOB_CHAIN
    + """,
claim AS (SELECT e.worker, e.attempt FROM events e
           WHERE e.id IN (SELECT id FROM chain) AND e.token = :token AND e.kind = 'claimed')
INSERT INTO events (job_id, kind, at, worker, token, attempt, detail, prev)
SELECT j.id, 'lease_lost', :now, (SELECT worker FROM claim LIMIT 1), :token,
       COALESCE((SELECT attempt FROM claim LIMIT 1), j.attempts), :detail, j.last_event_id
  FROM jobs j WHERE j.id = :id{lock}
RETURNING id, (SELECT status FROM jobs WHERE id = :id)
"""
)


def record_lease_lost(lock: str) -> str:
    """The refusal's history event, with the dialect's lock on the job's row."""
    return _RECORD_LEASE_LOST.format(lock=lock)


LINK_EVENT = "UPDATE jobs SET last_event_id = :event_id WHERE id = :id"

GET = f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = :id"

# After a write whose reply never came, or one refused: what the job's row says now, so a write that
# went through under this very token (a retry after a lost reply) is told apart from a refusal.
OUTCOME = "SELECT status, token, last_event, result, last_error FROM jobs WHERE id = :id"

# A failure that went through unseen and was then overtaken: the job, put back to pending, was
# claimed again, so its row names another token. Its 'failed' event under this token says so.
FAILED_BY = (
    JOB_CHAIN.replace(":after", "0")
    + """
SELECT count(*) FROM events
 WHERE id IN (SELECT id FROM chain) AND token = :token AND kind = :kind AND detail = :error
"""
)

# The running jobs one claim holds: its token, or (a batch claim) the token, '-' and the job id.
# A worker asks this after a claim whose reply it never saw: the tokens are its own, made before it asked.
HELD_BY = f"""
SELECT {JOB_COLUMNS} FROM jobs
 WHERE status = 'running' AND (token = :token OR substr(token, 1, length(:token) + 1) = :token || '-')
 ORDER BY priority DESC, run_at ASC, id ASC
"""

# A page of jobs: ids above :after, in id order, at most :limit (the primary key's order: no sort).
LIST_JOBS = f"SELECT {JOB_COLUMNS} FROM jobs WHERE id > :after AND {_OF_QUEUE} ORDER BY id LIMIT :limit"

LIST_JOBS_BY_STATUS = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = :status AND id > :after AND {_OF_QUEUE} ORDER BY id LIMIT :limit"
)

# Newest first: a dashboard shows the latest jobs without reading the whole table (no sort: the key's order).
LIST_JOBS_NEWEST = f"SELECT {JOB_COLUMNS} FROM jobs WHERE id > :after AND {_OF_QUEUE} ORDER BY id DESC LIMIT :limit"

LIST_JOBS_BY_STATUS_NEWEST = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = :status AND id > :after AND {_OF_QUEUE}"
    " ORDER BY id DESC LIMIT :limit"
)

STATS = "SELECT queue, status, count(*) FROM jobs GROUP BY queue, status"

# A page of the history: events above :after, oldest first, at most :limit.
EVENTS = f"SELECT {EVENT_COLUMNS} FROM events WHERE id > :after ORDER BY id LIMIT :limit"

EVENTS_FOR_JOB = (
    JOB_CHAIN
    + f"""
SELECT {EVENT_COLUMNS} FROM events WHERE id IN (SELECT id FROM chain) AND id > :after ORDER BY id LIMIT :limit
"""
)

NEXT_RUN_AT = "SELECT min(run_at) FROM jobs WHERE status = 'pending'"
