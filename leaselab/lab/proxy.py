"""A TCP proxy on 127.0.0.1 that can cut the network between one worker and its database server.

On a file, the worst a worker can do is freeze or die. On a server there is a third
fault: the worker runs on but cannot reach the database. ``Fleet`` gives each worker
of a server queue its own ``Proxy``; ``partition()`` stops moving bytes in both
directions (they wait in the kernel's buffers and then nowhere, as packets dropped by
a broken link would: the worker's queries hang, they do not fail), ``heal()`` lets
them flow again. Only the standard library is used.
"""

from __future__ import annotations

import selectors
import socket
import threading
from urllib.parse import parse_qs, urlsplit, urlunsplit

from ..errors import ProxyError

CHUNK = 65536
DEFAULT_PG_PORT = 5432


def server_address(url: str) -> tuple[str, int]:
    """The (host, port) a ``postgresql://`` URL connects to over TCP; ``ProxyError`` for a Unix socket."""
    parts = urlsplit(url)
    query_host = parse_qs(parts.query).get("host", [None])[0]
    host = parts.hostname or query_host or ""
    if not host or host.startswith("/"):
        raise ProxyError(f"the server in {redact(url)} is reached through a Unix socket, "
                         "which a TCP proxy cannot stand in for; give a host and port")
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

    def close(self) -> None:
        """Close every connection and stop listening."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._wake()
        self._thread.join(5)

    def __enter__(self) -> "Proxy":
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
                for key, _ in self._selector.select(timeout=0.5):
                    if key.data == "wake":
                        try:
                            self._wake_r.recv(1024)
                        except OSError:
                            pass
                    elif key.data == "accept":
                        if flowing:
                            self._accept()
                    elif flowing:
                        self._forward(key.fileobj)
        finally:
            self._shutdown()

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
        for sock in (client, upstream):
            self._selector.register(sock, selectors.EVENT_READ, "data")

    def _forward(self, sock: socket.socket) -> None:
        with self._lock:
            other = self._pairs.get(sock)
        if other is None:
            return
        try:
            data = sock.recv(CHUNK)
            if data:
                other.sendall(data)
                return
        except OSError:
            pass
        self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        with self._lock:
            other = self._pairs.pop(sock, None)
            if other is not None:
                self._pairs.pop(other, None)
        for s in (sock, other):
            if s is None:
                continue
            if s in self._selector.get_map():
                self._selector.unregister(s)
            s.close()

    def _shutdown(self) -> None:
        with self._lock:
            sockets = list(self._pairs)
            self._pairs.clear()
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
