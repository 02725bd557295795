"""Replication faults that are not a failover, on a real primary and standby: the link to a synchronous standby cut,
and a synchronous standby that applies minutes late. Neither may end in a silent loss: the queue's write is never
acknowledged, and the call raises a typed error (``DatabaseUnreachable``) within its call timeout. Opening a queue
waits for no standby: its schema is committed on the primary alone, since a schema lost in a failover is made
again by the next open, and every acknowledged write after it waits for the standby to hold it too. (Cut under
asynchronous replication, the link loses nothing until a failover, and then the workers' journals name what was
lost: ``tests/test_chaos_failover.py``.)"""

from __future__ import annotations

import threading

import pytest

from leaselab import Queue
from leaselab.errors import DatabaseUnreachable
from leaselab.harness.pgreplicas import Replicated
from tests.support.servers import in_memory

psycopg = pytest.importorskip("psycopg")

CALL_TIMEOUT = 2.0


def _visible_jobs(servers: Replicated) -> int:
    (n,) = servers.primary.query("SELECT count(*) FROM jobs", "demo")
    return int(n)


def test_with_the_link_to_a_synchronous_standby_cut_an_enqueue_is_never_acknowledged_and_raises(bin_dir):
    with Replicated(standbys=1, synchronous="on", bin_dir=bin_dir, parent=in_memory()) as servers:
        url = servers.create_database("demo")
        with Queue(url, call_timeout=CALL_TIMEOUT) as q:
            q.enqueue({"n": 1})
            servers.hold(servers.standbys[0])
            with pytest.raises(DatabaseUnreachable, match="no reply within the call timeout"):
                q.enqueue({"n": 2})
            # The primary wrote it but shows it to no one until a standby confirms it: nothing half-acknowledged.
            assert _visible_jobs(servers) == 1
            servers.release(servers.standbys[0])


def test_a_synchronous_standby_that_applies_minutes_late_delays_no_open_and_the_first_enqueue_raises_unacknowledged(
    bin_dir,
):
    with Replicated(
        standbys=1, synchronous="remote_apply", apply_delay=600, bin_dir=bin_dir, parent=in_memory()
    ) as servers:
        # Made without waiting for the standby (synchronous_commit = local for this one session), or it would wait.
        with psycopg.connect(servers.primary.url(), autocommit=True, options="-c synchronous_commit=local") as conn:
            conn.execute("CREATE DATABASE demo")
        opened = threading.Event()
        raised: list[BaseException] = []

        def open_and_enqueue() -> None:
            try:
                with Queue(servers.url("demo"), call_timeout=CALL_TIMEOUT) as q:
                    opened.set()
                    q.enqueue({"n": 1})
            except BaseException as exc:  # judged on the test's thread
                raised.append(exc)

        worker = threading.Thread(target=open_and_enqueue, daemon=True)
        worker.start()
        # A bound, not a measure: ten call timeouts on a loaded machine. The server's stop ends the wait.
        worker.join(10 * CALL_TIMEOUT)
        # The schema asks the standby for nothing (it promises no client anything), so the open does not wait ...
        assert opened.is_set()
        # ... and the first acknowledged write waits for the standby, runs out of time and is never acknowledged.
        assert not worker.is_alive() and raised and isinstance(raised[0], DatabaseUnreachable), raised
        assert _visible_jobs(servers) == 0
