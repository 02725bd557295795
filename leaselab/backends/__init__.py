"""Where a queue keeps its jobs. One package per backend, each holding its SQL, schema, connection and errors.

``open_backend(target)`` picks one: a ``postgresql://`` or ``postgres://`` URL is a
server, anything else is a SQLite file. Every backend offers the same small surface
to ``leaselab.queue``: ``statements`` (the named SQL constants), ``run``,
``changed``, ``transaction``, ``clock`` (the database's own clock, or None),
``wait_for_work``, ``connection``, ``name``, ``kind``, ``tracer`` and ``close``.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from ..backoff import Backoff

SERVER_SCHEMES = ("postgresql://", "postgres://")


def is_server_url(target: Any) -> bool:
    """True for a PostgreSQL connection URL, False for a file path."""
    return isinstance(target, str) and target.startswith(SERVER_SCHEMES)


def open_backend(
    target: str | os.PathLike,
    *,
    busy_timeout: float,
    backoff: Backoff,
    tracer: Callable[[str, Any], None] | None = None,
    create: bool = True,
):
    """Open the backend ``target`` names. Only the chosen backend's driver is imported."""
    if is_server_url(target):
        try:
            from .postgres import PostgresBackend
        except ImportError as exc:
            raise ImportError(f"a PostgreSQL queue needs psycopg 3: pip install 'leaselab[postgres]' ({exc})") from exc
        return PostgresBackend(target, busy_timeout=busy_timeout, backoff=backoff, tracer=tracer, create=create)
    from .sqlite import SqliteBackend

    return SqliteBackend(os.fspath(target), busy_timeout=busy_timeout, backoff=backoff, tracer=tracer,
                         create=create)
