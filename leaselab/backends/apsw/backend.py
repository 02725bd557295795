"""The APSW backend: ``SqliteBackend`` with APSW's driver in place of ``sqlite3``.

The engine, the file format, the schema, the statements and the strategy are the SQLite backend's:
this class inherits them and changes only how the connection is made (a URI naming a VFS, SQLite's
own open flags) and how APSW's errors read. ``Connection`` gives an APSW connection the few habits
of ``sqlite3`` that the SQLite backend uses (a cursor with ``rowcount``, ``description`` and
``fetchall``, ``create_function``, ``in_transaction``, ``Error``), so no statement and no
transaction step is written twice. Transactions are the SQLite backend's ``BEGIN IMMEDIATE`` …
``COMMIT``, not APSW's ``with connection:``, whose savepoint begins a deferred transaction: a
claim that read before it wrote could then fail at once on a lock instead of waiting for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import apsw

from ...errors import DatabaseMissing, LeaselabError
from ..contract import Backend, FullBackend
from ..sqlite.backend import SqliteBackend, prepare, translate

_OPEN = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_URI


class Cursor:
    """What one statement gave, read to its end as ``sqlite3`` would be asked: its rows, their
    description (None for a statement that returned no row) and the rows it changed."""

    __slots__ = ("rows", "description", "rowcount")

    def __init__(self, rows: list[tuple], description: Any, rowcount: int):
        self.rows, self.description, self.rowcount = rows, description, rowcount

    def fetchall(self) -> list[tuple]:
        return self.rows

    def fetchone(self) -> tuple | None:
        return self.rows[0] if self.rows else None

    def __iter__(self) -> Iterator[tuple]:
        return iter(self.rows)


class Connection:
    """An APSW connection with the ``sqlite3`` habits the SQLite backend relies on; ``apsw`` is the connection
    itself."""

    Error = apsw.Error

    def __init__(self, connection: apsw.Connection):
        self.apsw = connection

    def execute(self, statement: str, params: Any = ()) -> Cursor:
        # APSW runs a statement as its rows are read and keeps no rowcount: read them all here, then
        # ask changes(), which counts the rows that statement changed (not its triggers) as rowcount
        # does, but still holds the last write's count after a read: hence the total before and after.
        before = self.apsw.total_changes()
        cursor = self.apsw.execute(statement, params)
        try:
            description = cursor.getdescription()
        except apsw.ExecutionCompleteError:  # done already: it returned no row
            description = None
        rows = cursor.fetchall()
        return Cursor(rows, description, self.apsw.changes() if self.apsw.total_changes() != before else 0)

    def create_function(self, name: str, narg: int, func: Callable[..., Any], *, deterministic: bool = False) -> None:
        self.apsw.create_scalar_function(name, func, narg, deterministic=deterministic)

    @property
    def in_transaction(self) -> bool:
        return self.apsw.in_transaction

    def close(self) -> None:
        self.apsw.close()


class ApswBackend(SqliteBackend):
    """A SQLite queue file opened through APSW: ``target`` is a ``file:`` URI, usually naming a VFS.

    ``connection`` is a ``Connection`` (its ``apsw`` the APSW connection): an escape hatch, as the
    SQLite backend's is. ``create=False`` opens without SQLite's create flag, so a missing file is
    ``DatabaseMissing`` whatever file system the VFS keeps it on. Its ``kind`` is ``"sqlite"``: the
    engine and the file are SQLite's, only the binding differs.
    """

    driver_error: type[Exception] = apsw.Error
    sqlite_version_info = tuple(int(n) for n in apsw.sqlite_lib_version().split("."))

    def _open(self, path: str, busy_timeout: float, create: bool) -> Any:  # a Connection, in sqlite3.Connection's place
        # The URI's vfs also passed by name, so that the connection says which it is on (open_vfs):
        # a VFS defined in Python finds the connections opened on it by that.
        vfs = parse_qs(urlsplit(path).query).get("vfs", [None])[-1]
        try:
            raw = apsw.Connection(path, flags=_OPEN | (apsw.SQLITE_OPEN_CREATE if create else 0), vfs=vfs)
        except apsw.CantOpenError as exc:
            if not create:
                raise DatabaseMissing(path) from exc
            raise self._translate(exc) from exc
        except apsw.Error as exc:
            raise self._translate(exc) from exc
        raw.set_busy_timeout(int(busy_timeout * 1000))
        return prepare(Connection(raw), path, busy_timeout, self._translate)

    def _translate(self, exc: Exception) -> LeaselabError:
        code = getattr(exc, "extendedresult", None)  # an apsw.Error's code is here, not in sqlite_errorcode
        name = (
            None
            if code is None
            else (apsw.mapping_extended_result_codes.get(code) or apsw.mapping_result_codes.get(code & 0xFF))
        )
        return translate(exc, self.path, code, None if name is None else str(name))


# The type checker proves this class satisfies the contract (tests/test_types.py runs it).
_CONTRACT: type[Backend] = ApswBackend
_FULL: type[FullBackend] = ApswBackend  # with every fast path: its own, or a default from BackendDefaults
