"""The lab's TCP proxy: bytes flow through it, stop while it is partitioned (queries hang, not fail), flow again when
healed; they can be slowed down; a reply can be lost on the way back while the request it answers took effect."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from leaselab.harness.errors import ProxyError
from leaselab.harness.proxy import Proxy, server_address, through
from tests.support.polling import wait_until


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


def test_a_delay_slows_each_direction_keeps_the_order_and_ends_with_a_delay_of_zero(echo_server):
    with Proxy(echo_server) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as sock:
        proxy.delay(0.3)
        assert proxy.latency == 0.3
        started = time.monotonic()
        assert roundtrip(sock, b"slow", 5) == b"slow"
        assert time.monotonic() - started >= 0.6  # 0.3 there, 0.3 back
        sock.settimeout(5)
        for i in range(50):  # many small chunks, each waiting on its own: none overtakes another
            sock.sendall(b"%03d," % i)
        expected = b"".join(b"%03d," % i for i in range(50))
        got = b""
        while len(got) < len(expected):
            got += sock.recv(4096)
        assert got == expected
        proxy.delay(0)
        started = time.monotonic()
        assert roundtrip(sock, b"fast", 5) == b"fast"
        assert time.monotonic() - started < 0.3


def test_a_delayed_connection_does_not_hold_up_the_others(echo_server):
    with Proxy(echo_server) as proxy:
        proxy.delay(0.5)
        socks = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(3)]
        try:
            started = time.monotonic()
            for sock in socks:
                sock.sendall(b"ping")
            for sock in socks:
                sock.settimeout(5)
                assert sock.recv(10) == b"ping"
            elapsed = time.monotonic() - started
            assert 1.0 <= elapsed < 2.5, elapsed  # three round trips one after another would take 3 s
        finally:
            for sock in socks:
                sock.close()


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), "1", True])
def test_a_delay_that_is_not_a_finite_number_of_seconds_is_refused(echo_server, seconds):
    with Proxy(echo_server) as proxy:
        with pytest.raises(ValueError, match="seconds"):
            proxy.delay(seconds)
        with pytest.raises(ValueError, match="seconds"):
            proxy.drop_replies(seconds)
        assert proxy.latency == 0


def test_a_closed_proxy_refuses_to_delay_or_drop(echo_server):
    proxy = Proxy(echo_server)
    proxy.close()
    for fault in (lambda: proxy.delay(1), proxy.drop_next_reply, lambda: proxy.drop_replies(1)):
        with pytest.raises(ProxyError, match="closed"):
            fault()


# Dropped replies, through a real PostgreSQL server: the request lands, its answer does not.


@pytest.fixture
def counter(pg_url):
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL)")
        conn.execute("INSERT INTO counter VALUES (1, 0)")
    return pg_url


def counted(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT n FROM counter WHERE id = 1").fetchone()[0]


def test_a_dropped_reply_fails_the_client_but_the_update_it_answered_has_committed(counter):
    import psycopg

    with Proxy(server_address(counter)) as proxy:
        with psycopg.connect(through(counter, proxy.port), autocommit=True, connect_timeout=10) as conn:
            assert conn.execute("UPDATE counter SET n = n + 1 RETURNING n").fetchone() == (1,)
            proxy.drop_next_reply()
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError):
                conn.execute("UPDATE counter SET n = n + 1 RETURNING n")
            assert time.monotonic() - started < 5  # the connection is cut: the client does not hang
            assert conn.closed
        assert proxy.replies_dropped == 1 and proxy.connections == 0
    assert counted(counter) == 2  # the second UPDATE ran; only its answer was lost


def test_a_lost_reply_to_commit_hides_a_transaction_that_did_commit(counter):
    import psycopg

    with Proxy(server_address(counter)) as proxy:
        with psycopg.connect(through(counter, proxy.port), connect_timeout=10) as conn:
            conn.execute("UPDATE counter SET n = n + 10")
            proxy.drop_next_reply()
            with pytest.raises(psycopg.OperationalError):
                conn.commit()
        assert proxy.replies_dropped == 1
    assert counted(counter) == 10


def test_a_reply_lost_inside_a_transaction_leaves_nothing_committed(counter):
    import psycopg

    with Proxy(server_address(counter)) as proxy:
        with psycopg.connect(through(counter, proxy.port), connect_timeout=10) as conn:
            conn.execute("UPDATE counter SET n = n + 1")
            proxy.drop_next_reply()
            with pytest.raises(psycopg.OperationalError):
                conn.execute("UPDATE counter SET n = n + 1")
    assert counted(counter) == 0
    with psycopg.connect(counter, autocommit=True) as direct:  # the cut ended the session: its row lock is gone
        direct.execute("SET lock_timeout = '10s'")
        direct.execute("UPDATE counter SET n = 5")
    assert counted(counter) == 5


def test_a_long_dropped_reply_is_followed_to_its_end_so_what_the_request_did_still_commits(counter):
    """A big result leaves the server in many pieces, before the rest of the request has run: a cut
    at the first piece would make the server fail to send the next and roll the whole request back."""
    import psycopg

    with Proxy(server_address(counter)) as proxy:
        with psycopg.connect(through(counter, proxy.port), autocommit=True, connect_timeout=10) as conn:
            proxy.drop_next_reply()
            with pytest.raises(psycopg.OperationalError):  # one request, one implicit transaction
                conn.execute("SELECT repeat('x', 20000) FROM generate_series(1, 400); UPDATE counter SET n = n + 1")
    assert counted(counter) == 1


def test_only_the_next_request_loses_its_reply_and_other_connections_carry_on(counter):
    import psycopg

    with Proxy(server_address(counter)) as proxy:
        url = through(counter, proxy.port)
        with psycopg.connect(url, autocommit=True) as first, psycopg.connect(url, autocommit=True) as second:
            proxy.drop_next_reply()
            with pytest.raises(psycopg.OperationalError):
                first.execute("UPDATE counter SET n = n + 1")
            assert second.execute("UPDATE counter SET n = n + 1 RETURNING n").fetchone() == (2,)
            assert second.execute("SELECT n FROM counter").fetchone() == (2,)
        assert proxy.replies_dropped == 1


def test_while_replies_are_dropped_for_a_while_no_one_can_connect_and_afterwards_everyone_can(counter):
    import psycopg

    with Proxy(server_address(counter)) as proxy:
        url = through(counter, proxy.port)
        proxy.drop_replies(1.5)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, autocommit=True, connect_timeout=10)
        assert proxy.replies_dropped >= 1
        time.sleep(1.6)
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            assert conn.execute("SELECT n FROM counter").fetchone() == (0,)


def test_a_dropped_reply_under_a_delay_still_lets_the_request_land(counter):
    import psycopg

    with Proxy(server_address(counter)) as proxy:
        with psycopg.connect(through(counter, proxy.port), autocommit=True, connect_timeout=10) as conn:
            proxy.delay(0.2)
            started = time.monotonic()
            assert conn.execute("SELECT 1").fetchone() == (1,)
            assert time.monotonic() - started >= 0.4
            proxy.drop_next_reply()
            with pytest.raises(psycopg.OperationalError):
                conn.execute("UPDATE counter SET n = n + 1")
    assert counted(counter) == 1


def test_a_client_closing_its_connection_does_not_use_up_the_drop_armed_for_the_next_request(counter):
    """A Terminate gets no reply: a drop taken on it throws nothing away, so it is given back for the next request.
    (A worker closes a connection as it starts; a drop armed a moment before vanished, now and then.)"""
    import psycopg

    with Proxy(server_address(counter)) as proxy:
        url = through(counter, proxy.port)
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as other:
            closing = psycopg.connect(url, autocommit=True, connect_timeout=10)
            proxy.drop_next_reply()
            closing.close()
            wait_until(lambda: proxy.connections == 1, message="the closed connection to be gone from the proxy")
            with pytest.raises(psycopg.OperationalError):
                other.execute("UPDATE counter SET n = n + 1")
        assert proxy.replies_dropped == 1
    assert counted(counter) == 1


def test_a_request_abandoned_before_any_reply_gives_the_drop_back_for_the_next_one(counter):
    import psycopg

    with Proxy(server_address(counter)) as proxy:
        url = through(counter, proxy.port)
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as other:
            abandoning = psycopg.connect(url, autocommit=True, connect_timeout=10)
            proxy.drop_next_reply()
            abandoning.pgconn.send_query(b"SELECT pg_sleep(3)")  # taken by the drop; its client leaves at once
            abandoning.close()
            wait_until(lambda: proxy.connections == 1, message="the abandoned connection to be gone from the proxy")
            assert proxy.replies_dropped == 0  # nothing came back to be thrown away
            with pytest.raises(psycopg.OperationalError):
                other.execute("UPDATE counter SET n = n + 1")
        assert proxy.replies_dropped == 1
    assert counted(counter) == 1


def test_a_reply_the_server_cuts_short_counts_as_dropped(counter):
    import psycopg

    with Proxy(server_address(counter)) as proxy, psycopg.connect(counter, autocommit=True) as direct:
        victim = psycopg.connect(through(counter, proxy.port), autocommit=True, connect_timeout=10)
        try:
            pid = victim.info.backend_pid
            proxy.drop_next_reply()
            victim.pgconn.send_query(b"SELECT pg_sleep(30)")  # sent; its reply is never read
            wait_until(
                lambda: (
                    direct.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
                    == ("active",)
                ),
                message="the sleep to start",
            )
            direct.execute("SELECT pg_terminate_backend(%s)", (pid,))  # the server says why (FATAL), then closes
            wait_until(lambda: proxy.replies_dropped == 1, message="the cut-short reply to be counted")
            assert proxy.connections == 0
        finally:
            victim.close()
