"""A TCP proxy on 127.0.0.1 that can cut, slow or break the network between one worker and its database server.

On a file, the worst a worker can do is freeze or die. On a server there is a third
fault: the worker runs on but cannot reach the database. ``Fleet`` gives each worker
of a server queue its own ``Proxy``; ``partition()`` stops moving bytes in both
directions (they wait in the kernel's buffers and then nowhere, as packets dropped by
a broken link would: the worker's queries hang, they do not fail), ``heal()`` lets
them flow again.

Two more faults of a real network: ``delay(seconds)`` makes every chunk take that much
longer on its way, in each direction (a round trip is ``2 * seconds`` slower), and
``drop_next_reply()`` lets the next request reach the server but throws its answer
away and then cuts the connection: the client's driver raises, not knowing whether its
statement ran. It did: the connection is cut only once the server has finished
answering, so a test can look on a direct connection and find the outcome the client
never saw. Only the standard library is used.
"""

from __future__ import annotations

import math
import selectors
import socket
import threading
import time
from collections import deque
from urllib.parse import parse_qs, urlsplit, urlunsplit

from .errors import ProxyError

CHUNK = 65536
DEFAULT_PG_PORT = 5432
# How long a server may fall silent in the middle of a reply being dropped before the reply
# counts as over: a reply the scan cannot follow to its end (the answer to an SSL request is
# one bare byte) must still end in a cut, not a client that waits for ever.
REPLY_QUIET = 0.5
# How often the proxy's thread looks at its flags when it has nothing due sooner.
IDLE_TICK = 0.5


def server_address(url: str) -> tuple[str, int]:
    """The (host, port) a ``postgresql://`` URL connects to over TCP; ``ProxyError`` for a Unix socket."""
    parts = urlsplit(url)
    query_host = parse_qs(parts.query).get("host", [None])[0]
    host = parts.hostname or query_host or ""
    if not host or host.startswith("/"):
        raise ProxyError(
            f"the server in {redact(url)} is reached through a Unix socket, "
            "which a TCP proxy cannot stand in for; give a host and port"
        )
    return host, parts.port or DEFAULT_PG_PORT


def through(url: str, port: int, host: str = "127.0.0.1") -> str:
    """The same URL, pointed at ``host:port`` (a proxy) instead of the server; user, password, db kept."""
    parts = urlsplit(url)
    server_address(url)  # refuses a Unix-socket URL
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{host}:{port}" if userinfo else f"{host}:{port}"
    query = "&".join(p for p in parts.query.split("&") if p and not p.startswith(("host=", "port=")))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class _LostReply:
    """A server's reply the proxy is throwing away, read as PostgreSQL messages to see where it ends.

    Every message after the start-up is a type byte and a four-byte length that counts
    itself; the reply to a request ends with ReadyForQuery (``Z``), sent once the
    statement has committed or failed. Only then is the connection cut, so what the
    client could not learn is already settled on the server.
    """

    def __init__(self, armed: bool) -> None:
        self.armed = armed  # taken from ``drop_next_reply``'s count, not from a ``drop_replies`` window
        self.header = b""
        self.skip = 0
        self.complete = False
        self.last_heard: float | None = None

    def heard(self, data: bytes, now: float) -> None:
        self.last_heard = now
        i = 0
        while i < len(data) and not self.complete:
            if self.skip:
                step = min(self.skip, len(data) - i)
                self.skip -= step
                i += step
                continue
            need = 5 - len(self.header)
            self.header += data[i : i + need]
            i += need
            if len(self.header) == 5:
                kind, length = self.header[:1], int.from_bytes(self.header[1:], "big")
                self.header = b""
                self.skip = max(length - 4, 0)
                self.complete = kind == b"Z"

    def over(self, now: float) -> bool:
        return self.complete or (self.last_heard is not None and now - self.last_heard >= REPLY_QUIET)


class Proxy:
    """Forwards every connection made to ``listen_port`` on 127.0.0.1 to ``target`` (host, port)."""

    def __init__(self, target: tuple[str, int], listen_host: str = "127.0.0.1"):
        self.target = target
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._pairs: dict[socket.socket, socket.socket] = {}
        self._clients: set[socket.socket] = set()  # the client's end of each pair
        # Chunks on their way, per socket they go out of, with the time each is due: one
        # queue per direction keeps the order, and the thread never sleeps on one of them.
        self._outbox: dict[socket.socket, deque[tuple[float, bytes]]] = {}
        self._lost: dict[socket.socket, _LostReply] = {}  # by client socket
        self._delay = 0.0
        self._drops_armed = 0
        self._drop_until = 0.0
        self._replies_dropped = 0
        self._wake_r, self._wake_w = socket.socketpair()
        try:
            self._server = socket.create_server((listen_host, 0))
        except OSError as exc:
            raise ProxyError(f"cannot listen on {listen_host}: {exc}") from exc
        self._server.setblocking(False)
        self.port: int = self._server.getsockname()[1]
        self._selector.register(self._server, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._serve, name=f"proxy-{self.port}", daemon=True)
        self._thread.start()

    @property
    def partitioned(self) -> bool:
        """True while no byte moves between the worker and the server."""
        return not self._flowing.is_set()

    @property
    def connections(self) -> int:
        """How many client connections are open through the proxy now."""
        with self._lock:
            return len(self._pairs) // 2

    @property
    def latency(self) -> float:
        """The one-way delay, in seconds, each chunk takes in each direction (0: none)."""
        return self._delay

    @property
    def replies_dropped(self) -> int:
        """How many replies were thrown away (all of them, or what came before their connection
        ended), each cutting its connection, since the proxy started."""
        with self._lock:
            return self._replies_dropped

    def partition(self) -> None:
        """Stop moving bytes both ways, on open connections and on new ones (which are not even accepted)."""
        self._check_open()
        self._flowing.clear()
        self._wake()

    def heal(self) -> None:
        """Let bytes flow again; what waited in the buffers is delivered as a link coming back would."""
        self._check_open()
        self._flowing.set()
        self._wake()

    def delay(self, seconds: float) -> None:
        """Deliver every chunk, each way, ``seconds`` after it arrived (in order); ``delay(0)`` ends it.

        It is one-way: a request and its reply each wait, so a round trip is ``2 * seconds``
        slower. Chunks already on their way keep the time they were given.
        """
        self._check_open()
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
        self._delay = float(seconds)
        self._wake()

    def drop_next_reply(self) -> None:
        """Let the next request (on any connection) reach the server, throw its reply away, then cut that connection.

        The server runs the statement and answers; none of it reaches the client, whose
        connection is closed once the server has finished answering, so its driver raises
        (psycopg's ``OperationalError``) while the statement's outcome already stands on
        the server. Each call arms one more drop. On a connection not yet open, the
        "request" is its start-up, and the client fails to connect. A request whose connection
        ends before any of its reply came back does not use the drop up (a client closing its
        connection sends one that never gets a reply): the drop waits for the next request.
        """
        self._check_open()
        with self._lock:
            self._drops_armed += 1
        self._wake()

    def drop_replies(self, seconds: float) -> None:
        """For the next ``seconds``, do to every request sent (on any connection) what ``drop_next_reply`` does once."""
        self._check_open()
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
        with self._lock:
            self._drop_until = time.monotonic() + seconds
        self._wake()

    def close(self) -> None:
        """Close every connection and stop listening."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._wake()
        self._thread.join(5)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise ProxyError("this proxy was closed")

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _serve(self) -> None:
        try:
            while not self._closed.is_set():
                flowing = self._flowing.is_set()
                self._set_interest(flowing)
                for key, _ in self._selector.select(timeout=self._timeout(flowing)):
                    if key.data == "wake":
                        try:
                            self._wake_r.recv(1024)
                        except OSError:
                            pass
                    elif key.data == "accept":
                        if flowing:
                            self._accept()
                    elif flowing:
                        self._forward(key.fileobj)  # type: ignore[arg-type]  # registered as the socket
                if flowing:
                    self._deliver_due()
                    self._cut_lost_replies()
        finally:
            self._shutdown()

    def _timeout(self, flowing: bool) -> float:
        """Sleep until the next chunk is due or a dropped reply may be over, at most ``IDLE_TICK``."""
        if not flowing:
            return IDLE_TICK
        due = [queue[0][0] for queue in self._outbox.values() if queue]
        due += [lost.last_heard + REPLY_QUIET for lost in self._lost.values() if lost.last_heard is not None]
        if not due:
            return IDLE_TICK
        return min(max(min(due) - time.monotonic(), 0.0), IDLE_TICK)

    def _set_interest(self, flowing: bool) -> None:
        """While partitioned, stop watching the sockets: nothing is read, so nothing is sent on."""
        with self._lock:
            sockets = list(self._pairs)
        for sock in sockets:
            registered = sock in self._selector.get_map()
            if flowing and not registered:
                self._selector.register(sock, selectors.EVENT_READ, "data")
            elif not flowing and registered:
                self._selector.unregister(sock)

    def _accept(self) -> None:
        try:
            client, _ = self._server.accept()
        except BlockingIOError:
            return
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()  # the server is down: the worker sees a refused connection, as it would directly
            return
        for sock in (client, upstream):
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._pairs[client] = upstream
            self._pairs[upstream] = client
            self._clients.add(client)
        for sock in (client, upstream):
            self._selector.register(sock, selectors.EVENT_READ, "data")

    def _forward(self, sock: socket.socket) -> None:
        with self._lock:
            other = self._pairs.get(sock)
        if other is None:
            return
        try:
            data = sock.recv(CHUNK)
        except OSError:
            data = b""
        if not data:
            self._drop(sock)
            return
        now = time.monotonic()
        if sock in self._clients:
            if sock not in self._lost and (armed := self._take_drop(now)) is not None:
                self._lost[sock] = _LostReply(armed)
        elif other in self._lost:
            self._lost[other].heard(data, now)
            return
        queue = self._outbox.setdefault(other, deque())
        if self._delay == 0 and not queue:
            self._send(other, data)
        else:
            queue.append((now + self._delay, data))

    def _take_drop(self, now: float) -> bool | None:
        """Whether to drop the reply to the request just read: True if an armed drop is taken,
        False if a ``drop_replies`` window covers it, None to let the reply through."""
        with self._lock:
            if self._drops_armed:
                self._drops_armed -= 1
                return True
            return False if now < self._drop_until else None

    def _send(self, sock: socket.socket, data: bytes) -> None:
        try:
            sock.sendall(data)
        except OSError:
            self._drop(sock)

    def _deliver_due(self) -> None:
        now = time.monotonic()
        for sock, queue in list(self._outbox.items()):
            while queue and queue[0][0] <= now and sock in self._outbox:
                self._send(sock, queue.popleft()[1])

    def _cut_lost_replies(self) -> None:
        now = time.monotonic()
        for client, lost in list(self._lost.items()):
            if lost.over(now):
                self._drop(client)

    def _drop(self, sock: socket.socket) -> None:
        """Close a pair. A reply being thrown away on it counts as dropped if any of it was;
        if none came (the client gave up first, or its request wants no answer), an armed
        drop is given back for the next request: the fault asked for has not happened yet."""
        with self._lock:
            other = self._pairs.pop(sock, None)
            if other is not None:
                self._pairs.pop(other, None)
            self._clients.discard(sock)
            self._clients.discard(other)
        for s in (sock, other):
            if s is None:
                continue
            self._outbox.pop(s, None)
            lost = self._lost.pop(s, None)
            if lost is not None:
                with self._lock:
                    if lost.last_heard is not None:
                        self._replies_dropped += 1
                    elif lost.armed:
                        self._drops_armed += 1
            if s in self._selector.get_map():
                self._selector.unregister(s)
            s.close()

    def _shutdown(self) -> None:
        with self._lock:
            sockets = list(self._pairs)
            self._pairs.clear()
            self._clients.clear()
        self._outbox.clear()
        self._lost.clear()
        for s in sockets:
            try:
                if s in self._selector.get_map():
                    self._selector.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()
        self._selector.close()
        self._server.close()
        self._wake_r.close()
        self._wake_w.close()
