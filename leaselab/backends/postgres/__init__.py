"""PostgreSQL: the same queue on a server, for workers on many hosts. Imported only for a
``postgresql://`` URL, so psycopg is needed only by those who use it (the ``postgres`` extra)."""

from . import statements
from .backend import SCHEMA_VERSION, PostgresBackend, display_name, schema_script, translate

__all__ = ["SCHEMA_VERSION", "PostgresBackend", "display_name", "schema_script", "statements", "translate"]
