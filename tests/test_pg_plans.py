"""The claims of the PostgreSQL backend as the server plans them: each walks the claim index in claim
order and stops after its LIMIT, even on a jobs table that has never been analyzed, so a claim's cost
does not grow with the backlog. The SQLite side of the same facts is ``test_sqlite_plans.py``."""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from leaselab import Queue

try:
    import psycopg  # noqa: F401
except ImportError:  # pragma: no cover - the postgres extra is part of the test extra
    if os.environ.get("CI"):
        raise
    pytest.skip("PostgreSQL tests need psycopg (pip install 'leaselab[postgres]')", allow_module_level=True)

from leaselab.backends.postgres import statements as sql  # after the psycopg check

# Every statement that claims: one job, k jobs, and each completion that refills its slots.
CLAIMS = ("CLAIM", "CLAIM_MANY", "COMPLETE_AND_CLAIM", "COMPLETE_ONE_AND_CLAIM", "COMPLETE_MANY_AND_CLAIM")


DOMAIN_CAST = re.compile(r"\((\w+)\)::(?:text|double precision|bigint)")


def plan(q: Queue, statement: str, params: dict) -> list[str]:
    """The server's plan for ``statement`` on the queue's own connection (its session settings), each column
    named bare: a column whose type is a domain (schema 7) is shown cast to its base type, ``(queue)::text``."""
    return [DOMAIN_CAST.sub(r"\1", row[0]) for row in q.backend.run("EXPLAIN " + statement, params)]


@pytest.mark.parametrize("name", CLAIMS)
def test_a_claim_walks_the_claim_index_in_order_even_before_the_table_was_ever_analyzed(pg_url, name):
    with Queue(pg_url) as q:
        # No statistics for the whole test, as in a new database before autovacuum's first pass.
        q.backend.run("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        q.enqueue_many(list(range(3000)))
        for job in q.claim_many(100, "w"):
            q.complete(job.id, job.token)
        held = q.claim_many(8, "w")
        assert q.backend.run(
            "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables WHERE relname = 'jobs'"
        ) == [(None, None)]
        now = time.time()
        params = {
            "now": now,
            "lease_until": now + 30,
            "worker": "w",
            "token": "t",
            "next_token": "u",
            "n": 8,
            "id": held[0].id,
            "result": "null",
            "done": json.dumps([{"id": j.id, "token": j.token, "result": "null"} for j in held]),
            "queue": "default",
        }
        steps = plan(q, getattr(sql, name), params)
    # Guessing a few pending rows, the planner would otherwise read every runnable job with a bitmap
    # scan and sort them all, for each claim.
    assert any("Index Scan using jobs_claim" in step for step in steps), steps
    assert not any("Bitmap" in step for step in steps), steps
    assert not any("Sort Key" in step and "priority" in step for step in steps), steps


@pytest.mark.parametrize("name", [f"{claim}_SEVERAL" for claim in CLAIMS])
def test_a_claim_of_several_named_queues_reads_each_from_the_claim_index(pg_url, name):
    with Queue(pg_url) as q:
        q.backend.run("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        q.enqueue_many(list(range(3000)), queue="bulk")
        q.enqueue_many(list(range(20)), queue="a")
        held = q.claim_many(8, "w", queues="a")
        now = time.time()
        params = {
            "now": now,
            "lease_until": now + 30,
            "worker": "w",
            "token": "t",
            "next_token": "u",
            "n": 8,
            "id": held[0].id,
            "result": "null",
            "done": json.dumps([{"id": j.id, "token": j.token, "result": "null"} for j in held]),
            "queues": json.dumps(["a", "b"]),
        }
        steps = plan(q, getattr(sql, name), params)
    # The queues' names lead the index: the bulk queue's 3000 jobs are never read, whatever the sort after.
    assert any("Index Scan using jobs_claim" in step or "Index Cond: (queue" in step for step in steps), steps
    assert any("queue = " in step and "Index Cond" in step for step in steps), steps


def test_a_claim_of_one_named_queue_names_it_in_the_index_condition(pg_url):
    with Queue(pg_url) as q:
        q.enqueue_many(list(range(100)), queue="a")
        now = time.time()
        steps = plan(q, sql.CLAIM, {"now": now, "lease_until": now + 30, "worker": "w", "token": "t", "queue": "a"})
    assert any("Index Cond: ((queue = " in step for step in steps), steps
    assert not any("Sort" in step for step in steps), steps
