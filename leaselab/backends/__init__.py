"""Where a queue keeps its jobs. One package per backend, each holding its SQL, schema, connection and errors.

``open_backend(target)`` picks one: a ``postgresql://`` or ``postgres://`` URL (the scheme in
any case) is a server, a SQLite file path is a file, a SQLite ``file:`` URI that names a VFS
(``file:/path/jobs.db?vfs=NAME``) is a file opened through APSW, and anything that looks like neither (a
libpq ``host=… dbname=…`` string, another scheme's URL) is refused with ``InvalidTarget``,
whose message never repeats the target: it may hold a password. What every backend offers
``leaselab.queue`` is written down in ``contract.py``: the ``Backend`` Protocol of the operations
every backend must write and the optional ``FastPaths``, typed values in and out; ``defaults.py``
builds each fast path from the required operations; ``SqlBackend`` (``base.py``) is the plumbing the
SQL backends share, and ``sql.py`` the statements their dialects agree on.

``scrub(message, target)`` removes a target's password from any text; anything that builds
a message from a URL or from a driver's error should pass it through.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ..backoff import Backoff
from ..errors import InvalidTarget
from .contract import Backend, FullBackend

SERVER_SCHEMES = ("postgresql://", "postgres://")
PSYCOPG = "psycopg[binary]>=3.2.10"  # pyproject.toml's postgres extra, which a test keeps equal to this
_SERVER_SCHEME = re.compile(r"postgres(?:ql)?://", re.IGNORECASE)
# libpq's connection keywords (the ones a person writes; libpq knows a few more) at the start of
# the text, after a space, or after a slash: a Fleet makes a relative target absolute before
# opening it, so "host=db password=…" may arrive as "/home/me/host=db password=…".
_CONNINFO = re.compile(
    r"(?:^|[\s/\\])(?:host|hostaddr|port|dbname|user|password|passfile|service|sslmode|"
    r"connect_timeout|options|application_name|target_session_attrs|sslrootcert)\s*=",
    re.IGNORECASE,
)
# A PostgreSQL URL with its slashes mistyped ("postgresql:/…", "postgres:u@h"), or any other
# scheme's URL: as a file path, SQLite would make folders named after it, password and all.
_ALMOST_SERVER = re.compile(r"(?:^|[/\\])\s*postgres(?:ql)?:", re.IGNORECASE)
_OTHER_SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.-]*)://")
_NOT_REPEATED = "(not repeated here: it may hold a password)"


def is_server_url(target: Any) -> bool:
    """True for a PostgreSQL connection URL (``postgresql://`` or ``postgres://``, in any case), False otherwise."""
    return isinstance(target, str) and _SERVER_SCHEME.match(target) is not None


def names_a_vfs(target: str) -> bool:
    """True for a SQLite ``file:`` URI with a ``vfs=`` parameter.

    A VFS defined in Python (the lessons' ``VolatileDisk``) is registered in APSW's SQLite, which
    Python's ``sqlite3`` cannot see: such a target opens through the APSW backend.
    """
    return target.startswith("file:") and "vfs" in parse_qs(urlsplit(target).query)


def server_url(target: str) -> str:
    """The URL with its scheme in lower case: libpq reads ``POSTGRESQL://`` as a broken key=value string."""
    scheme = _SERVER_SCHEME.match(target)
    return scheme.group().lower() + target[scheme.end() :] if scheme else target


def primary_only(url: str) -> dict[str, str]:
    """``{"target_session_attrs": "read-write"}`` for a URL of several hosts (``postgresql://h1:p1,h2:p2/db``,
    a primary and its standbys) that asks for no kind of session, else nothing: libpq's default (any)
    takes the first host that answers, a standby too, where every write fails and every read may be
    stale. Connection options for ``psycopg.connect(url, **primary_only(url))``."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    asked = "target_session_attrs" in parse_qs(parts.query)
    return {"target_session_attrs": "read-write"} if "," in hosts and not asked else {}


# What libpq says of each host it tried for a connection none accepted, and its words for a host that
# answered but is no primary when the URL asks for one (target_session_attrs=read-write or primary).
_HOST_FAILED = re.compile(r'connection to server (?:at|on socket) "([^"]*)"(?:, port (\d+))? failed: ([^\n]*)')
_NOT_PRIMARY = ("session is read-only", "server is in hot standby mode")


def no_primary(error: str, url: str) -> str | None:
    """One line saying that no server of ``url`` takes writes and what each host answered, if the driver's
    ``error`` says so (every host a standby, read-only, or down); None for any other error. No password."""
    if not any(reason in error for reason in _NOT_PRIMARY):
        return None
    said: dict[str, str] = {}
    for host, port, reason in _HOST_FAILED.findall(error):
        said.setdefault(f"{host}:{port}" if port else host, scrub(reason.rstrip(" ."), url))
    hosts = ", ".join(f"{where}: {reason}" for where, reason in said.items())
    return f"no server takes writes now ({hosts}); a failover may be under way"


def check_target(target: str) -> None:
    """Raise ``InvalidTarget`` if ``target`` is neither a server URL nor something SQLite should take as a path."""
    if is_server_url(target) or target.startswith("file:") or target == ":memory:":
        return
    if _CONNINFO.search(target):
        raise InvalidTarget(
            f"the queue target is a libpq key=value connection string {_NOT_REPEATED}; "
            "leaselab takes a postgresql://user@host:port/dbname URL, with the password "
            "in a password file (~/.pgpass or PGPASSFILE)"
        )
    if _ALMOST_SERVER.search(target):
        raise InvalidTarget(
            f"the queue target looks like a PostgreSQL URL but does not start with postgresql:// {_NOT_REPEATED}"
        )
    other = _OTHER_SCHEME.match(target)
    if other:
        raise InvalidTarget(
            f"the queue target is a {other.group(1)}:// URL {_NOT_REPEATED}; leaselab takes a "
            "SQLite file path or a postgresql:// URL"
        )


def secrets_in(target: str) -> set[str]:
    """Every form in which ``target``'s password could appear in a message, found without parsing it.

    A malformed URL is exactly what the driver cannot parse and then quotes in its error, so
    the password is read from the text around it: between ``://user:`` and the first or the
    last ``@`` (an unescaped ``@`` in a password splits it between user and host), each piece
    between ``@`` signs, and any ``password=`` value; each raw and percent-decoded.
    """
    found: set[str] = set()
    scheme = re.search(r"://", target)
    if scheme:
        rest = target[scheme.end() :]
        first, last = rest.find("@"), rest.rfind("@")
        if first >= 0:
            for userinfo in {rest[:first], rest[:last]}:
                password = userinfo.partition(":")[2]
                if password:
                    found.add(password)
                    found.update(password.split("@"))
        else:  # no @: libpq reads "user:password" as "host:port", and may quote the "port"
            port = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition(":")[2]
            if not port.isdigit() and "]" not in port:  # not the end of an IPv6 address
                found.add(port)
    for value in re.findall(r"(?:^|[?&\s])password\s*=\s*('(?:[^'\\]|\\.)*'?|[^&\s]*)", target, re.IGNORECASE):
        found.add(value)
        if value.startswith("'"):
            found.add(re.sub(r"\\(.)", r"\1", value.strip("'")))
    found |= {unquote(s) for s in found}
    return {s for s in found if s}


def scrub(message: str, target: str) -> str:
    """``message`` with every form of ``target``'s password replaced by ``***``."""
    for secret in sorted(secrets_in(target), key=len, reverse=True):
        message = message.replace(secret, "***")
    return message


# Openers of further backends, by the scheme that names them (``register_backend``).
_REGISTERED: dict[str, Callable[..., Backend]] = {}


def server_error(exc: Exception, target: str) -> Exception:
    """The leaselab error a server's driver error means (a refusal, too many clients, a lost server), named by the
    server without its password: for a reader that talks to the server with the raw driver (the checker)."""
    from .postgres import display_name, translate  # psycopg is there: its error is in hand

    return translate(exc, display_name(target), target)  # type: ignore[arg-type]  # a psycopg.Error


def register_backend(scheme: str, opener: Callable[..., Backend]) -> None:
    """Make targets that start with ``scheme:`` open with ``opener(target, busy_timeout=, backoff=, tracer=,
    create=)``: how a backend outside this package (a test's, a plugin's) is given to ``Queue``. It need
    only satisfy ``Backend``: the queue fills in the fast paths it lacks (``defaults.with_defaults``)."""
    if not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme) or scheme in ("file", "postgres", "postgresql"):
        raise ValueError(f"a backend's scheme must be a new lower-case URI scheme, got {scheme!r}")
    _REGISTERED[scheme] = opener


def open_backend(
    target: str | os.PathLike,
    *,
    busy_timeout: float,
    backoff: Backoff,
    tracer: Callable[[str, Any], None] | None = None,
    create: bool = True,
) -> FullBackend:
    """Open the backend ``target`` names, with every fast path: its own, or the default built from its
    primitives (``defaults.with_defaults``; the package's backends derive from ``BackendDefaults``).
    Only the chosen backend's driver is imported."""
    target = os.fspath(target)
    opener = _REGISTERED.get(target.partition(":")[0]) if ":" in target else None
    if opener is not None:
        from .defaults import with_defaults  # here, not at the top: no module that only checks a file loads it

        return with_defaults(opener(target, busy_timeout=busy_timeout, backoff=backoff, tracer=tracer, create=create))
    check_target(target)
    if is_server_url(target):
        try:
            from .postgres import PostgresBackend
        except ImportError as exc:
            raise ImportError(
                f"a PostgreSQL queue needs {PSYCOPG}: pip install '{PSYCOPG}', or in a clone of "
                f"leaselab: pip install -e '.[postgres]' ({exc})"
            ) from exc
        return PostgresBackend(
            server_url(target), busy_timeout=busy_timeout, backoff=backoff, tracer=tracer, create=create
        )
    if names_a_vfs(target):
        try:
            from .apsw import ApswBackend
        except ImportError as exc:
            raise ImportError(f"a file: URI that names a vfs opens through APSW: pip install apsw ({exc})") from exc
        return ApswBackend(target, busy_timeout=busy_timeout, backoff=backoff, tracer=tracer, create=create)
    from .sqlite import SqliteBackend

    return SqliteBackend(target, busy_timeout=busy_timeout, backoff=backoff, tracer=tracer, create=create)
