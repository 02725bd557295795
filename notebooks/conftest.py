"""nbval runs the lessons as tests. A lesson that starts its own PostgreSQL server (lesson 6) skips,
with the reason, on a machine without PostgreSQL or psycopg, except in CI (``CI`` set), which
must run them all, as ``tests/conftest.py`` does for the PostgreSQL tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NEEDS_A_SERVER = "PgServer("  # what a lesson that starts its own server has in a code cell


def _why_no_server() -> str | None:
    try:
        import psycopg  # noqa: F401  (the postgres extra)

        from leaselab.lessons.pgserver import PgUnavailable, find_bin_dir
    except ImportError as exc:
        return f"lesson needs psycopg (pip install 'leaselab[postgres]'): {exc}"
    try:
        find_bin_dir()
    except PgUnavailable as exc:
        return f"lesson starts a PostgreSQL server: {exc}"
    return None


def pytest_collection_modifyitems(config, items):
    lessons = {Path(str(item.fspath)) for item in items if str(item.fspath).endswith(".ipynb")}
    needing = {path for path in lessons if NEEDS_A_SERVER in path.read_text(encoding="utf-8")}
    if not needing or os.environ.get("CI"):
        return
    reason = _why_no_server()
    if reason is None:
        return
    for item in items:
        if Path(str(item.fspath)) in needing:
            item.add_marker(pytest.mark.skip(reason=reason))
