"""The throw-away replicated PostgreSQL server: a primary and streaming standbys, a failover on demand, a standby
held behind, and nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from leaselab.harness.pgreplicas import Replicated
from leaselab.harness.pgserver import PgNotRunning
from tests.support.polling import wait_until
from tests.support.servers import in_memory

psycopg = pytest.importorskip("psycopg")


def _count(url: str) -> int:
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        return conn.execute("SELECT count(*) FROM t").fetchone()[0]


def _insert(url: str, rows: int) -> int:
    """Insert ``rows`` rows, one commit each; the port of the server that took them."""
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS t (x int)")
        for _ in range(rows):
            conn.execute("INSERT INTO t VALUES (1)")
        return conn.info.port


def test_after_an_asynchronous_failover_the_url_finds_the_new_primary_and_what_the_held_standby_lacked_is_gone(bin_dir):
    with Replicated(standbys=1, bin_dir=bin_dir, parent=in_memory()) as servers:
        url = servers.create_database("demo")
        standby = servers.standbys[0]
        assert _insert(url, 5) == servers.primary.port
        servers.catch_up()
        servers.hold(standby)
        _insert(url, 20)  # acknowledged by an asynchronous primary, never sent
        assert _count(url) == 25
        servers.stop_primary()
        servers.promote(standby)
        assert _insert(url, 0) == standby.port  # the multi-host URL skips the dead primary
        assert _count(url) == 5


def test_a_synchronous_standby_has_applied_every_acknowledged_commit_and_keeps_it_through_a_failover(bin_dir):
    with Replicated(standbys=1, synchronous="remote_apply", bin_dir=bin_dir, parent=in_memory()) as servers:
        url = servers.create_database("demo")
        standby = servers.standbys[0]
        _insert(url, 20)
        # No catch_up(): remote_apply acknowledged each commit only once the standby had applied it.
        assert standby.query("SELECT count(*) FROM t", "demo") == ["20"]
        servers.stop_primary()
        servers.promote(standby)
        assert _count(url) == 20


def test_a_standby_with_an_apply_delay_serves_stale_reads_but_a_promotion_applies_what_it_received(bin_dir):
    with Replicated(standbys=1, apply_delay=600, bin_dir=bin_dir, parent=in_memory()) as servers:
        servers.primary.create_database("demo")  # not create_database(): it would wait out the delay
        standby = servers.standbys[0]
        (lsn,) = servers.primary.query("SELECT pg_current_wal_lsn()")
        wait_until(
            lambda: standby.query(f"SELECT pg_last_wal_receive_lsn() >= '{lsn}'::pg_lsn") == ["t"],
            30,
            message="the standby to receive the CREATE DATABASE",
        )
        assert standby.query("SELECT count(*) FROM pg_database WHERE datname = 'demo'") == ["0"]
        servers.stop_primary()
        servers.promote(standby)
        assert standby.query("SELECT count(*) FROM pg_database WHERE datname = 'demo'") == ["1"]


def test_two_standbys_stream_and_each_can_be_promoted(bin_dir):
    with Replicated(standbys=2, synchronous="on", bin_dir=bin_dir, parent=in_memory()) as servers:
        url = servers.create_database("demo")
        _insert(url, 3)
        servers.catch_up()
        assert [s.query("SELECT count(*) FROM t", "demo") for s in servers.standbys] == [["3"], ["3"]]
        servers.stop_primary()
        servers.promote(servers.standbys[1])
        assert _insert(url, 1) == servers.standbys[1].port


STARTER = r"""
from leaselab.harness.pgreplicas import Replicated
from leaselab.harness.pgserver import PgNotRunning
servers = Replicated(standbys=2).start()
print(" ".join(str(s.folder) for s in servers.servers), flush=True)
import sys; sys.stdin.read()  # wait to be killed
"""


def _postmasters(folders: list[str]) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "postgres" in line and any(f in line for f in folders)]


def test_a_replicated_server_whose_starter_is_killed_leaves_no_server_and_no_folder(bin_dir):
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    try:
        folders = starter.stdout.readline().split()
        assert len(folders) == 3 and len(_postmasters(folders)) >= 3
    finally:
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
    wait_until(
        lambda: not _postmasters(folders) and not any(os.path.exists(f) for f in folders),
        30,
        interval=0.2,
        message="the watchdogs to stop the servers and remove their folders",
    )


@pytest.mark.parametrize(
    "options", [{"standbys": 0}, {"standbys": 3}, {"synchronous": "yes"}, {"apply_delay": -1}, {"standbys": True}]
)
def test_a_replicated_server_refuses_bad_options_before_anything_starts(options):
    with pytest.raises(ValueError):
        Replicated(**options)


def test_after_each_failover_a_new_standby_on_the_dead_primarys_port_lets_the_same_url_fail_over_again(bin_dir):
    with Replicated(standbys=1, synchronous="on", bin_dir=bin_dir, parent=in_memory()) as servers:
        url = servers.create_database("demo")
        ports = {s.port for s in servers.servers}
        for round in range(1, 3):
            _insert(url, 10)
            servers.stop_primary()
            servers.promote(servers.standbys[0])
            standby = servers.replace_primary()
            assert {s.port for s in servers.servers} == ports and standby.name == f"standby{round + 1}"
            # The new primary waits for its new standby again: a commit acknowledged is on both.
            assert servers.primary.query("SHOW synchronous_standby_names") == ["*"]
            _insert(url, 1)
            assert standby.query("SELECT count(*) FROM t", "demo") == [str(11 * round)]
        assert _count(url) == 22


def test_a_primary_is_replaced_only_after_it_was_stopped_and_its_standby_promoted(bin_dir):
    with Replicated(standbys=1, bin_dir=bin_dir, parent=in_memory()) as servers:
        with pytest.raises(PgNotRunning, match="promoted"):
            servers.replace_primary()
        servers.promote(servers.standbys[0])
        with pytest.raises(PgNotRunning, match="still runs"):
            servers.replace_primary()
