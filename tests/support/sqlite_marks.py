"""What a SQLite queue file says of itself, read with raw ``sqlite3``, not through the code it checks:
its marks (application_id, user_version) and its integrity check; and a file as an older leaselab wrote it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from leaselab.backends.sqlite import APPLICATION_ID

DATA = Path(__file__).resolve().parents[1] / "data"


def marks(path: str) -> tuple[int, int]:
    """The file's application_id and user_version: whose file it is, and which schema."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA application_id").fetchone() + conn.execute("PRAGMA user_version").fetchone()
    finally:
        conn.close()


def integrity(path: str) -> str:
    """SQLite's ``PRAGMA integrity_check``: "ok" for a healthy file."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def old_file(path: Path, version: int) -> sqlite3.Connection:
    """A new file with schema ``version`` as that leaselab wrote it (``data/schema_v{version}.sql``) and its
    marks, empty; the open connection (autocommit) for the caller to fill it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript((DATA / f"schema_v{version}.sql").read_text())
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {version}")
    return conn
