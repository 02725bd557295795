"""Split brain on a real primary and standby: the standby promoted while the old primary still runs, two servers
taking the queue's claims and completions at once. Each server's history is consistent on its own; the workers'
journals show one fence held by two tokens, each told of its completion while the other held it, and the checker
names it ``split_brain``. The steps run in a fixed order in this process, so nothing depends on timing."""

from __future__ import annotations

import pytest

from leaselab import Queue
from leaselab.check import check
from leaselab.harness.pgreplicas import Replicated
from leaselab.worker.journal import Journal
from tests.support.servers import in_memory

pytest.importorskip("psycopg")

JOBS = 3


def test_two_primaries_taking_claims_at_once_are_named_split_brain_from_the_journals(tmp_path, bin_dir):
    folder = tmp_path / "journal"
    with Replicated(standbys=1, bin_dir=bin_dir, parent=in_memory()) as servers:
        url = servers.create_database("demo")
        with Queue(url) as q:
            q.enqueue_many([{"n": n} for n in range(JOBS)])
        servers.catch_up()
        standby = servers.standbys[0]
        servers.promote(standby)  # the old primary is never stopped: both take writes now
        old, new = Queue(servers.primary.url("demo")), Queue(standby.url("demo"))
        left, right = Journal(folder, "w1"), Journal(folder, "w2")
        try:
            held = []
            for queue, journal, name in ((old, left, "w1"), (new, right, "w2")):
                jobs = [queue.claim(name, lease=60) for _ in range(JOBS)]
                journal.claimed([(j.id, j.attempts, j.token) for j in jobs])
                held.append((queue, journal, jobs))
            # Each server acknowledges its own holder's completions, each while the other's holder holds the fence.
            for queue, journal, jobs in held:
                for job in jobs:
                    queue.complete(job.id, job.token)
                    journal.outcome("completed", job.id, job.attempts, job.token)
        finally:
            for closing in (old, new, left, right):
                closing.close()
        on_new = check(standby.url("demo"), journal=folder)
        on_old = check(servers.primary.url("demo"), journal=folder)
        # Judged without the journals, each server's history keeps every promise: only the clients see two primaries.
        assert check(standby.url("demo")).clean and check(servers.primary.url("demo")).clean
    for report in (on_new, on_old):
        assert report.totals.get("split_brain") == JOBS, report.render()
        assert report.totals.get("fence_handed_twice") == JOBS
        assert report.totals.get("acknowledged_lost") == JOBS  # the other server's completions
    assert "split brain: two servers took writes at once" in on_new.render()
