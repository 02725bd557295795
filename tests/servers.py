"""Throw-away PostgreSQL servers for the tests, and where a queue lives.

A module of its own, not conftest: ``notebooks/conftest.py`` shares that module name, and a
test module's ``from conftest import ...`` may get the lessons' one.
"""

from __future__ import annotations

import os

import pytest

BACKENDS = ("sqlite", "postgresql")


def start_pg_server(**options):
    """A throw-away PostgreSQL cluster. Without PostgreSQL the test that needs it skips with the
    reason, except in CI (``CI`` set), where it fails: CI must run them all."""
    from leaselab.lessons.pgserver import PgServer, PgUnavailable

    try:
        import psycopg  # noqa: F401  (the postgres extra)
        return PgServer(**options).start()
    except (ImportError, PgUnavailable) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL tests cannot run in CI: {exc}")
        pytest.skip(f"PostgreSQL tests need psycopg and the server binaries: {exc}")


def fresh_database(server, prefix: str) -> str:
    """The URL of a new, empty database on ``server``, its name unique in this run."""
    fresh_database.count += 1
    return server.create_database(f"{prefix}{os.getpid()}_{fresh_database.count}")


fresh_database.count = 0
