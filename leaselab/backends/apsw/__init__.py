"""APSW: the SQLite backend's file, schema and statements through APSW, the binding that lets Python
define a virtual file system (a VFS). Chosen for a ``file:`` URI naming one (``file:/path/jobs.db?vfs=NAME``),
which Python's ``sqlite3`` cannot see; imported only then, so APSW is needed only by those who use it."""

from .backend import ApswBackend, Connection

__all__ = ["ApswBackend", "Connection"]
