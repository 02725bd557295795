"""SQLite: the queue in one file, for one host. The default backend and the lessons' own."""

from . import statements
from .backend import (
    APPLICATION_ID,
    MIN_SQLITE,
    PAGE_SIZE,
    SCHEMA_VERSION,
    SqliteBackend,
    require_sqlite,
    schema_statements,
    translate,
)

__all__ = [
    "APPLICATION_ID",
    "MIN_SQLITE",
    "PAGE_SIZE",
    "SCHEMA_VERSION",
    "SqliteBackend",
    "require_sqlite",
    "schema_statements",
    "statements",
    "translate",
]
