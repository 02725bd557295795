"""What a SQLite queue file says of itself, read with raw ``sqlite3``, not through the code it checks:
its marks (application_id, user_version) and its integrity check."""

from __future__ import annotations

import sqlite3


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
