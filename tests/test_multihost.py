"""A URL naming a primary and its standbys (``postgresql://h1:p1,h2:p2/db?target_session_attrs=read-write``):
the queue, the CLI and the checker find the primary, wait out a failover, never write to a standby, and never
print a password."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from leaselab import Queue
from leaselab.backends import primary_only
from leaselab.errors import DatabaseUnreachable, NoPrimary
from leaselab.harness.pgreplicas import Replicated
from tests.support.servers import in_memory, pg_bin_dir

pytest.importorskip("psycopg")
from leaselab.backends.postgres.backend import display_name  # needs psycopg, checked above

PASSWORD = "hunter2secret"


def test_a_multi_host_url_is_named_host_by_host_with_each_port():
    assert display_name(f"postgresql://bob:{PASSWORD}@h1:5432,h2:6543/db") == "postgresql://bob@h1:5432,h2:6543/db"
    assert display_name("postgresql://bob@h1,h2:7000/db") == "postgresql://bob@h1:5432,h2:7000/db"
    assert display_name("postgresql://bob@h1,h2/db") == "postgresql://bob@h1:5432,h2:5432/db"


def test_only_a_url_of_several_hosts_that_asks_for_no_session_kind_is_made_to_ask_for_a_primary():
    assert primary_only("postgresql://u@h1:1,h2:2/db") == {"target_session_attrs": "read-write"}
    assert primary_only("postgresql://u@h1:1/db") == {}
    assert primary_only("postgresql://u@h1:1,h2:2/db?target_session_attrs=any") == {}


@pytest.fixture(scope="module")
def replicated():
    with Replicated(standbys=1, synchronous="remote_apply", bin_dir=pg_bin_dir(), parent=in_memory()) as servers:
        servers.create_database("demo")
        Queue(servers.url("demo")).close()  # the schema, on the standby too (remote_apply)
        yield servers


def _standby_only(servers: Replicated, params: str = "?target_session_attrs=read-write") -> str:
    return f"postgresql://leaselab:{PASSWORD}@127.0.0.1:{servers.standbys[0].port},127.0.0.1:1/demo{params}"


def test_a_url_whose_hosts_are_all_standbys_or_down_raises_no_primary_naming_each_host_and_no_password(replicated):
    with pytest.raises(NoPrimary) as raised:
        Queue(_standby_only(replicated))
    message = str(raised.value)
    assert isinstance(raised.value, DatabaseUnreachable)  # transient: a worker waits it out
    assert f"127.0.0.1:{replicated.standbys[0].port}: session is read-only" in message
    assert "127.0.0.1:1: Connection refused" in message
    assert PASSWORD not in message and "\n" not in message


@pytest.mark.parametrize("command", [["stats"], ["check"], ["enqueue", "{}"]])
def test_the_cli_on_a_url_with_no_primary_says_so_in_one_line_without_the_password(replicated, command):
    done = subprocess.run(
        [sys.executable, "-m", "leaselab", command[0], "--db", _standby_only(replicated, ""), *command[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert done.returncode != 0
    assert PASSWORD not in done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "no server takes writes now" in done.stderr


def test_a_url_listing_the_standby_first_writes_to_the_primary(replicated):
    standby, primary = replicated.standbys[0], replicated.primary
    url = f"postgresql://leaselab@127.0.0.1:{standby.port},127.0.0.1:{primary.port}/demo"  # no session kind given
    with Queue(url) as q:
        job = q.enqueue({"n": 1})
    assert primary.query(f"SELECT count(*) FROM jobs WHERE id = {job}", "demo") == ["1"]


def test_a_queue_waits_out_a_failover_and_goes_on_on_the_promoted_standby(bin_dir):
    with Replicated(standbys=1, synchronous="remote_apply", bin_dir=bin_dir, parent=in_memory()) as servers:
        url = servers.create_database("demo")
        with Queue(url) as q:
            before = q.enqueue({"n": 1})
            servers.stop_primary()
            with pytest.raises(DatabaseUnreachable):
                q.enqueue({"n": 2})
            with pytest.raises(NoPrimary):  # the primary down, the standby not yet promoted
                q.enqueue({"n": 2})
            servers.promote(servers.standbys[0])
            after = q.enqueue({"n": 3})
            assert q.get(before).payload == {"n": 1}  # remote_apply: what was acknowledged is there
        assert servers.standbys[0].query(f"SELECT count(*) FROM jobs WHERE id = {after}", "demo") == ["1"]
