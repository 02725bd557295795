"""What a run left behind, read with the raw driver: the jobs table, the events table and the effects.

The queue's file is opened with ``sqlite3`` in ``mode=ro`` (nothing can be created or
written), a server with raw psycopg in one REPEATABLE READ READ ONLY transaction; on both,
the two tables are read in one snapshot, so a worker still writing cannot make them
disagree. Never through ``Queue``: a bug in the library must not be able to hide itself
from its own checker. The rows come back as plain dicts, which is also how a test or a
lesson builds a history by hand.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import check_target, is_server_url, scrub, server_url
from ..errors import DatabaseMissing, DatabaseUnreachable, NotALeaselabDatabase, ServerRefused
from .effects import EffectSource, effects_from

SELECT_JOBS = """
SELECT id, payload, status, priority, run_at, attempts, max_attempts, lease_until, worker, token,
       result, last_error, created_at, updated_at, last_event_id
  FROM jobs ORDER BY id
"""

SELECT_EVENTS = "SELECT id, job_id, kind, at, worker, token, attempt, detail, prev FROM events ORDER BY id"

SERVER_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8 AS now"

# What a server says when it will never let this connection in: no such database, no such
# user, a wrong password. Anything else at connect time is a server that cannot be reached.
_REFUSED_STATES = ("3D000", "28000", "28P01")


@dataclass(frozen=True)
class History:
    """The jobs (by id), the events (by id) and the effects of one run, with the time it was read.

    ``now`` is the queue's clock when the snapshot was taken (the server's on PostgreSQL):
    leases and run times are compared with it.
    """

    jobs: list[dict[str, Any]]
    events: list[dict[str, Any]]
    effects: list[dict[str, Any]] = field(default_factory=list)
    now: float = 0.0
    # The events' ids are the order the queue applied them in: true of a SQLite file (one writer at a
    # time), not of a server, whose ids are handed out as rows are written, before their commits.
    ordered: bool = True


def load(target: str | os.PathLike, *, effects: EffectSource = None, now: float | None = None) -> History:
    """Read ``target`` (a SQLite file path or a ``postgresql://`` URL) and ``effects`` into a ``History``.

    ``now`` replaces the database's clock (a history made on a ``ManualClock``). A missing
    file raises ``DatabaseMissing`` and is not created; a file or database without leaselab's
    tables raises ``NotALeaselabDatabase``.
    """
    target = os.fspath(target)
    check_target(target)
    if is_server_url(target):
        jobs, events, clock = _read_server(server_url(target))
    else:
        jobs, events, clock = _read_file(target)
    for job in jobs:
        job["payload"] = _json(job["payload"])
        job["result"] = None if job["result"] is None else _json(job["result"])
    return History(
        jobs=jobs,
        events=events,
        effects=effects_from(effects),
        now=clock if now is None else now,
        ordered=not is_server_url(target),
    )


def _json(text: Any) -> Any:
    # Another program may have written anything into the file: keep what cannot be read as it is.
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return text


def _read_file(path: str) -> tuple[list[dict], list[dict], float]:
    if not os.path.exists(path):
        raise DatabaseMissing(path)
    if os.path.isdir(path):
        raise NotALeaselabDatabase(f"{path} is a folder, not a queue file")
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0)
    except sqlite3.Error as exc:
        raise NotALeaselabDatabase(f"{path}: cannot be opened to read ({exc})") from None
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("BEGIN")  # both tables from one snapshot
        jobs = [dict(row) for row in conn.execute(SELECT_JOBS)]
        events = [dict(row) for row in conn.execute(SELECT_EVENTS)]
        conn.execute("ROLLBACK")
    except sqlite3.DatabaseError as exc:  # not SQLite at all, or another application's file
        raise NotALeaselabDatabase(f"{path} is not a leaselab queue file ({exc})") from None
    finally:
        conn.close()
    return jobs, events, time.time()


def _read_server(url: str) -> tuple[list[dict], list[dict], float]:
    try:
        import psycopg
        from psycopg.rows import dict_row
    except ImportError as exc:
        raise ImportError(
            f"checking a PostgreSQL queue needs psycopg 3: pip install 'leaselab[postgres]' ({exc})"
        ) from exc
    try:
        conn = psycopg.connect(url, row_factory=dict_row, connect_timeout=10)
    except psycopg.Error as exc:
        message = scrub(str(exc), url)
        if (
            getattr(exc, "sqlstate", None) in _REFUSED_STATES
            or "does not exist" in message
            or "authentication failed" in message
        ):
            raise ServerRefused(f"the server refused the connection ({message})") from None
        raise DatabaseUnreachable(f"cannot reach the server ({message})") from None
    try:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        try:
            jobs = conn.execute(SELECT_JOBS).fetchall()
            events = conn.execute(SELECT_EVENTS).fetchall()
            clock = conn.execute(SERVER_NOW).fetchone()["now"]  # type: ignore[index]  # one row, always
        except psycopg.errors.UndefinedTable as exc:
            raise NotALeaselabDatabase(f"the database holds no leaselab queue ({scrub(str(exc), url)})") from None
        except psycopg.Error as exc:
            raise DatabaseUnreachable(f"the history could not be read ({scrub(str(exc), url)})") from None
        conn.rollback()
    finally:
        conn.close()
    return jobs, events, clock


# -- witness lines: one row of the history each, the same in every language --------------------


def _short(token: Any) -> str:
    return "-" if token is None else str(token)[:8]


def _at(t: Any) -> str:
    return "-" if t is None else f"{t:.3f}"


def event_line(e: dict[str, Any]) -> str:
    """``events#12 job=3 claimed attempt=1 worker=w1 token=1a2b3c4d at=1767225600.000``."""
    line = (
        f"events#{e['id']} job={e['job_id']} {e['kind']} attempt={e['attempt']} worker={e.get('worker') or '-'} "
        f"token={_short(e.get('token'))} at={_at(e.get('at'))}"
    )
    return line + (f" detail={e['detail']!r:.60}" if e.get("detail") else "")


def job_line(j: dict[str, Any]) -> str:
    """``jobs#3 status=running attempts=1/5 worker=w1 token=1a2b3c4d lease_until=1767225630.000``."""
    return (
        f"jobs#{j['id']} status={j['status']} attempts={j['attempts']}/{j['max_attempts']} "
        f"worker={j.get('worker') or '-'} token={_short(j.get('token'))} lease_until={_at(j.get('lease_until'))} "
        f"run_at={_at(j.get('run_at'))}"
    )


def effect_line(x: dict[str, Any]) -> str:
    """``effects#4 job=3 attempt=1 key=- token=1a2b3c4d worker=w1``."""
    return (
        f"effects#{x['n']} job={x['job']} attempt={x['attempt'] if x['attempt'] is not None else '-'} "
        f"key={x['key'] if x['key'] is not None else '-'} token={_short(x.get('token'))} "
        f"worker={x.get('worker') or '-'}"
    )
