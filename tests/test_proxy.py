"""The lab's TCP proxy: bytes flow through it, stop while it is partitioned (queries hang, not fail), flow again when healed."""

from __future__ import annotations

import socket
import socketserver
import threading

import pytest

from leaselab.errors import ProxyError
from leaselab.lab.proxy import Proxy, server_address, through


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def echo_server():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address
    server.shutdown()
    server.server_close()


def roundtrip(sock: socket.socket, data: bytes, timeout: float) -> bytes:
    sock.settimeout(timeout)
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def test_bytes_flow_through_the_proxy_both_ways(echo_server):
    with Proxy(echo_server) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        assert roundtrip(sock, b"hello" * 1000, 5) == b"hello" * 1000
        assert proxy.connections == 1 and not proxy.partitioned


def test_a_partition_stalls_an_open_connection_and_a_heal_delivers_what_waited(echo_server):
    with Proxy(echo_server) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        assert roundtrip(sock, b"before", 5) == b"before"
        proxy.partition()
        assert proxy.partitioned
        with pytest.raises(socket.timeout):  # a cut link: no error, no answer
            roundtrip(sock, b"during", 0.5)
        proxy.heal()
        sock.settimeout(5)
        assert sock.recv(100) == b"during"
        assert roundtrip(sock, b"after", 5) == b"after"


def test_a_new_connection_made_during_a_partition_gets_through_only_after_the_heal(echo_server):
    with Proxy(echo_server) as proxy:
        proxy.partition()
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=2)  # the kernel accepts; no one forwards
        try:
            with pytest.raises(socket.timeout):
                roundtrip(sock, b"ping", 0.5)
            proxy.heal()
            sock.settimeout(5)
            assert sock.recv(100) == b"ping"
        finally:
            sock.close()


def test_a_closed_proxy_refuses_to_partition_and_closes_its_connections(echo_server):
    proxy = Proxy(echo_server)
    sock = socket.create_connection(("127.0.0.1", proxy.port))
    assert roundtrip(sock, b"x", 5) == b"x"
    proxy.close()
    sock.settimeout(5)
    assert sock.recv(10) == b""  # the proxy hung up
    sock.close()
    with pytest.raises(ProxyError, match="closed"):
        proxy.partition()


def test_when_the_server_is_down_the_client_sees_its_connection_closed():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    dead = probe.getsockname()
    probe.close()
    with Proxy(dead) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        sock.settimeout(5)
        assert sock.recv(10) == b""


def test_a_server_url_is_pointed_through_the_proxy_keeping_user_password_and_database():
    url = "postgresql://alice:s3cret@db.example:6543/jobs?sslmode=disable&connect_timeout=5"
    assert server_address(url) == ("db.example", 6543)
    assert through(url, 40001) == "postgresql://alice:s3cret@127.0.0.1:40001/jobs?sslmode=disable&connect_timeout=5"
    assert server_address("postgres://bob@host/db") == ("host", 5432)
    assert through("postgres://host/db", 7) == "postgres://127.0.0.1:7/db"


def test_a_unix_socket_url_cannot_go_through_a_tcp_proxy_and_the_error_hides_the_password():
    with pytest.raises(ProxyError, match="Unix socket") as info:
        server_address("postgresql://alice:s3cret@/jobs?host=/tmp/pgsock")
    assert "s3cret" not in str(info.value)
