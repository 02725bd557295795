"""The backend contract itself: each backend's typed answers, run on every backend; the SQL said once,
the placeholder style converted mechanically; the statements the lessons print unchanged; and a
queue that names no dialect and asks its backend nothing outside the contract."""

from __future__ import annotations

import ast
import json
import re
import sqlite3
from pathlib import Path

import pytest

from leaselab import Job, Queue
from leaselab.backends import contract, sql
from leaselab.backends.contract import ByHand, Claim, Completion, NewJob, Outcome, Unreadable
from leaselab.backends.sqlite import statements as sqlite_sql
from tests.support.servers import IN_PROCESS_BACKENDS

ROOT = Path(__file__).resolve().parents[1]
TARGETS = IN_PROCESS_BACKENDS  # the contract on the third backend too: a new folder, nothing else


def _claim(token: str, now: float = 1000.0) -> Claim:
    return Claim(worker="w", token=token, now=now, lease_until=now + 30)


def _job(payload: str = '"x"', run_at: float = 0.0) -> NewJob:
    return NewJob(payload=payload, priority=0, run_at=run_at, max_attempts=3)


# -- the contract, on every backend (the queue fixture runs each test on SQLite, PostgreSQL and APSW) -


def test_a_claim_answers_a_job_and_an_empty_queue_answers_none(queue):
    backend = queue.backend
    assert backend.claim(_claim("t0"), durable=False) is None
    job_id = backend.enqueue(_job('{"n": 1}'), 1.0, durable=False)
    job = backend.claim(_claim("t1"), durable=False)
    assert isinstance(job, Job) and (job.id, job.payload, job.token, job.attempts) == (job_id, {"n": 1}, "t1", 1)


def test_enqueue_many_answers_the_ids_in_order_and_claim_many_tokens_each_job(queue):
    backend = queue.backend
    ids = backend.enqueue_many([_job(), _job(), _job()], 1.0, durable=True)
    assert ids == sorted(ids) and len(set(ids)) == 3
    jobs = backend.claim_many(2, _claim("batch"), durable=False)
    assert sorted((j.id, j.token) for j in jobs) == [(i, f"batch-{i}") for i in ids[:2]]
    assert sorted(j.id for j in backend.held_by("batch")) == ids[:2]


def test_a_row_whose_payload_cannot_be_read_is_claimed_as_unreadable_with_the_reason(queue):
    backend = queue.backend
    job_id = backend.enqueue(_job("not json"), 1.0, durable=False)
    (claimed,) = backend.claim_many(5, _claim("bad"), durable=False)
    assert isinstance(claimed, Unreadable) and (claimed.id, claimed.token) == (job_id, f"bad-{job_id}")
    assert "not JSON" in claimed.reason


def test_complete_and_claim_answers_whether_it_completed_and_claims_only_if_it_did(queue):
    backend = queue.backend
    first, second = backend.enqueue_many([_job(), _job()], 1.0, durable=False)
    held = backend.claim(_claim("a"), durable=False)
    assert backend.complete_and_claim(Completion(held.id, "not-a", '"r"'), _claim("b"), durable=False) == (False, None)
    assert backend.get(second).status == "pending"  # refused: nothing claimed
    completed, job = backend.complete_and_claim(Completion(first, "a", '"r"'), _claim("b"), durable=True)
    assert completed and job.id == second and job.token == "b"
    assert backend.get(first).result == "r"


def test_complete_many_answers_the_ids_that_completed_and_its_claim_does_not_wait_on_them(queue):
    backend = queue.backend
    ids = backend.enqueue_many([_job() for _ in range(4)], 1.0, durable=False)
    held = backend.claim_many(2, _claim("k"), durable=False)
    done = [Completion(j.id, j.token, "1") for j in held] + [Completion(ids[2], "nobody", "1")]
    completed, claimed = backend.complete_many_and_claim(done, 5, _claim("m"), durable=False)
    assert sorted(completed) == sorted(j.id for j in held)
    assert sorted(j.id for j in claimed) == ids[2:]
    assert backend.complete_many([Completion(ids[2], "nobody", "1")], 2.0, durable=False) == []


def test_fenced_writes_answer_none_or_false_when_the_token_no_longer_holds_the_job(queue, clock):
    backend = queue.backend
    job_id = backend.enqueue(_job(), 1.0, durable=False)
    backend.claim(_claim("mine", clock()), durable=False)
    assert backend.heartbeat(job_id, "other", 30.0, clock()) is None
    assert backend.heartbeat_many(["other"], 30.0, clock()) == {}
    assert backend.complete(Completion(job_id, "other", "1"), clock(), durable=False) is False
    assert backend.fail(job_id, "other", "boom", clock()) is None
    # A renewal is dated by the queue's clock as it is applied (on SQLite, leaselab_now() reads it).
    assert backend.heartbeat_many(["mine"], 30.0, clock()) == {job_id: clock() + 30}
    assert backend.fail(job_id, "mine", "boom", clock()) == "pending"


def test_a_job_keeps_its_timeouts_and_a_timed_out_attempt_is_a_fenced_failure_of_its_own_kind(queue, clock):
    backend = queue.backend
    job_id = backend.enqueue(NewJob('"x"', 0, 0.0, 2, timeout=5.0, beat_timeout=1.5), 1.0, durable=False)
    no_limit = backend.enqueue(_job(), 1.0, durable=False)
    assert (backend.get(job_id).timeout, backend.get(job_id).beat_timeout) == (5.0, 1.5)
    assert (backend.get(no_limit).timeout, backend.get(no_limit).beat_timeout) == (None, None)
    claimed = backend.claim(_claim("t1", clock()), durable=False)
    assert (claimed.id, claimed.timeout, claimed.beat_timeout) == (job_id, 5.0, 1.5)  # the worker learns them
    assert backend.fail(job_id, "other", "timed out", clock(), "timed_out") is None
    assert backend.fail(job_id, "t1", "ran past its timeout of 5s", clock(), "timed_out") == "pending"
    last = backend.events(job_id, 0)[-1]
    assert (last.kind, last.token, last.detail) == ("timed_out", "t1", "ran past its timeout of 5s")
    with backend.refusals() as refusals:
        assert refusals.failed(job_id, "t1", "ran past its timeout of 5s", "timed_out")
        assert not refusals.failed(job_id, "t1", "ran past its timeout of 5s", "failed")


def test_release_hands_back_the_jobs_its_tokens_hold_at_once_or_dead_and_leaves_others_alone(queue, clock):
    backend = queue.backend
    first, last_try, others = backend.enqueue_many(
        [NewJob('"a"', 0, 0.0, 3), NewJob('"b"', 0, 0.0, 1), NewJob('"c"', 0, 0.0, 3)], 1.0, durable=False
    )
    backend.claim_many(3, _claim("stop", clock()), durable=False)
    backend.fail(others, f"stop-{others}", "boom", clock())  # no longer held by the stopping claim
    backend.claim(_claim("another", clock() + 100), durable=False)  # claimed again (the backoff has passed)
    released = backend.release([f"stop-{first}", f"stop-{last_try}", f"stop-{others}"], clock())
    assert released == {first: "pending", last_try: "dead"}
    job = backend.get(first)
    assert (job.status, job.run_at, job.attempts, job.token) == ("pending", clock(), 1, f"stop-{first}")
    assert [e.kind for e in backend.events(first, 0)][-1] == "released"
    assert [e.kind for e in backend.events(last_try, 0)][-2:] == ["released", "dead"]
    assert backend.get(others).token == "another" and backend.get(others).status == "running"


def test_retry_and_cancel_change_every_job_named_or_none_and_say_why(queue, clock):
    backend = queue.backend
    dead, running, pending = backend.enqueue_many([NewJob('"a"', 0, 0.0, 1), _job(), _job()], 1.0, durable=False)
    backend.claim(_claim("d", clock()), durable=False)
    backend.fail(dead, "d", "boom", clock())
    backend.claim(_claim("r", clock()), durable=False)
    # One job named may not be changed: nothing is, and each such job's status (None: unknown) is said.
    assert backend.retry([dead, pending], 3, clock(), durable=False) == ByHand([], {pending: "pending"})
    assert backend.cancel([pending, dead, 999], "x", clock(), durable=False) == ByHand([], {dead: "dead", 999: None})
    assert backend.get(pending).status == "pending" and backend.get(dead).status == "dead"
    cancelled = backend.cancel([pending, running], "stop", clock(), durable=True)
    assert sorted(cancelled.changed) == [running, pending] and cancelled.refused == {}  # in any order
    assert backend.fail(running, "r", "late", clock()) is None  # its holder's token holds nothing now
    retried = backend.retry(None, 2, clock() + 1, durable=False)
    assert sorted(retried.changed) == [dead, running, pending] and retried.refused == {}
    job = backend.get(dead)
    assert (job.status, job.attempts, job.max_attempts, job.run_at) == ("pending", 1, 3, clock() + 1)
    assert [e.kind for e in backend.events(running, 0)][-3:] == ["cancelled", "dead", "retried"]
    assert backend.events(running, 0)[-3].detail == "stop"


def test_refusals_read_the_outcome_and_write_a_refusal_into_the_history(queue):
    backend = queue.backend
    job_id = backend.enqueue(_job(), 1.0, durable=False)
    backend.claim(_claim("mine"), durable=False)
    assert backend.complete(Completion(job_id, "mine", '"r"'), 1001.0, durable=False)
    with backend.refusals() as refusals:
        assert refusals.outcome(job_id) == Outcome("done", "mine", "completed", '"r"', None)
        assert refusals.outcome(job_id + 100) is None
        assert refusals.record(job_id, "mine", 1002.0, "complete refused: test") == "done"
        assert refusals.record(job_id + 100, "mine", 1002.0, "complete refused: test") is None
    last = backend.events(job_id, 0)[-1]
    assert (last.kind, last.worker, last.detail) == ("lease_lost", "w", "complete refused: test")


def test_reap_keeps_the_tokens_it_is_told_to_keep(queue):
    backend = queue.backend
    kept, reaped = backend.enqueue_many([_job(), _job()], 1.0, durable=False)
    backend.claim(_claim("keep-me"), durable=False)
    backend.claim(_claim("reap-me"), durable=False)
    assert backend.reap(5000.0, ["keep-me"]) == [reaped]
    assert backend.get(kept).status == "running" and backend.get(reaped).status == "pending"


def test_the_reads_answer_typed_values(queue):
    backend = queue.backend
    job_id = backend.enqueue(_job(run_at=7.0), 1.0, durable=False)
    assert backend.get(job_id + 1) is None
    assert [j.id for j in backend.jobs(None, 10, False)] == [job_id]
    assert backend.stats() == {"default": {"pending": 1}}
    assert [e.kind for e in backend.events(None, 0)] == ["enqueued"]
    assert backend.next_run_at() == 7.0


def test_completing_rolls_the_callers_block_back_with_a_refused_completion(queue):
    backend = queue.backend
    job_id = backend.enqueue(_job(), 1.0, durable=False)
    backend.claim(_claim("mine"), durable=False)
    with backend.completing(Completion(job_id, "other", "1"), lambda: 1001.0, durable=False) as handle:
        handle.connection.execute("UPDATE jobs SET priority = 9")
    assert (handle.completed, handle.now) == (False, 1001.0)
    assert backend.get(job_id).priority == 0 and backend.get(job_id).status == "running"
    with backend.completing(Completion(job_id, "mine", "1"), lambda: 1002.0, durable=False) as handle:
        handle.connection.execute("UPDATE jobs SET priority = 9")
    assert handle.completed and backend.get(job_id).priority == 9 and backend.get(job_id).status == "done"


# -- SQL said once ---------------------------------------------------------------------------------


def test_pyformat_turns_each_name_into_psycopgs_style_and_leaves_casts_and_literals_alone():
    assert sql.pyformat("x = :a AND y = :b_2::float8 AND z LIKE '50%' AND t = '12:30'") == (
        "x = %(a)s AND y = %(b_2)s::float8 AND z LIKE '50%%' AND t = '12:30'"
    )


def test_the_statements_the_dialects_share_are_one_text_with_the_placeholders_converted():
    postgres_sql = pytest.importorskip("leaselab.backends.postgres.statements")
    shared = [
        n
        for n in dir(sql)
        if n.isupper()
        and not n.startswith("_")
        and isinstance(getattr(sql, n), str)
        and n not in ("COMPLETED", "JOB_CHAIN", "JOB_COLUMNS", "EVENT_COLUMNS", "SERVES_ONE")
    ]  # parts
    assert len(shared) >= 14
    for name in shared:
        assert getattr(sqlite_sql, name) is getattr(sql, name), name
        assert getattr(postgres_sql, name) == sql.pyformat(getattr(sql, name)), name


def test_the_retry_or_dead_rule_is_written_once():
    sources = [
        (ROOT / "leaselab/backends" / p).read_text(encoding="utf-8")
        for p in ("sql.py", "sqlite/statements.py", "postgres/statements.py")
    ]
    assert sum(s.count("CASE WHEN attempts >= max_attempts THEN 'dead'") for s in sources) == 1


def test_the_postgres_backend_recognises_no_statement_by_its_text():
    text = (ROOT / "leaselab/backends/postgres/backend.py").read_text(encoding="utf-8")
    assert not re.search(r"\bstatement\s+(not\s+)?in\s+sql\.", text)
    assert "WITH_BACKOFF" not in text and "JSON_TOKENS" not in text


def _printed_statements() -> list[tuple[str, str, str]]:
    """(lesson, module, constant) for each ``print(alias.NAME.strip())`` in the lessons' sources."""
    found = []
    for path in sorted((ROOT / "notebooks/src").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {
            a.asname or a.name: f"{node.module}.{a.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for a in node.names
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.isupper()
                and aliases[node.value.id].endswith("statements")
            ):
                found.append((path.stem, aliases[node.value.id], node.attr))
    return sorted(set(found))


def test_every_statement_a_lesson_prints_is_still_the_text_its_stored_output_shows():
    import importlib

    printed = _printed_statements()
    assert {(m.rsplit(".", 2)[1], n) for _, m, n in printed} >= {
        ("sqlite", "CLAIM"),
        ("sqlite", "COMPLETE"),
        ("sqlite", "HEARTBEAT"),
        ("sqlite", "REAP"),
        ("postgres", "COMPLETE"),
    }
    for lesson, module, name in printed:
        statement = getattr(importlib.import_module(module), name).strip()
        for lang in ("en", "ru"):
            notebook = json.loads((ROOT / "notebooks" / lang / f"{lesson}.ipynb").read_text(encoding="utf-8"))
            shown = "".join(
                "".join(out.get("text", "")) for cell in notebook["cells"] for out in cell.get("outputs", [])
            )
            assert statement in shown, f"{lang}/{lesson}: {module}.{name} is not what the lesson shows"


def test_the_naive_claim_of_lesson_6_is_still_the_claim_without_its_row_locking():
    race = pytest.importorskip("leaselab.lessons.race")
    assert race.NAIVE_CLAIM != race.CLAIM and "SKIP LOCKED" not in race.NAIVE_CLAIM
    assert sql.pyformat("\n" + sql.claim(lock="") + "\n") == race.NAIVE_CLAIM


# -- the queue: no dialect, only the contract --------------------------------------------------------


def test_the_queue_names_no_dialect_no_statement_and_nothing_of_its_backend_outside_the_contract():
    tree = ast.parse((ROOT / "leaselab/queue.py").read_text(encoding="utf-8"))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
    }
    assert not {n for n in names if re.search(r"sqlite|postgres|psycopg|statements|_sql", n, re.I)}
    assert not names & {n for n in dir(sqlite_sql) if n.isupper()}
    # The contract: the required members, and the optional fast paths (the backend's own or the defaults).
    members = set(contract.Backend.__dict__) | set(contract.Backend.__annotations__) | set(contract.FastPaths.__dict__)
    used = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "backend"
    }
    assert used and used <= members, sorted(used - members)


def test_a_queue_on_a_file_is_a_sqlite_backend_behind_the_contract(tmp_path):
    with Queue(tmp_path / "q.db") as q:
        assert q.backend.kind == "sqlite"
        assert isinstance(q.backend.connection, sqlite3.Connection)  # the lessons' escape hatch, not the contract


def test_a_file_uri_naming_a_vfs_is_the_apsw_backend_with_the_sqlite_backends_statements(tmp_path):
    from leaselab.backends.apsw import ApswBackend
    from leaselab.backends.sqlite import SqliteBackend

    with Queue(f"file:{tmp_path / 'a.db'}?vfs=unix") as q:  # SQLite's own VFS, named: the APSW backend
        assert type(q.backend) is ApswBackend and q.backend.kind == "sqlite"
        assert q.backend.statements is sqlite_sql  # a new folder, no statement of its own
        q.enqueue("x")
    with Queue(tmp_path / "a.db") as q:  # the same file, through sqlite3
        assert type(q.backend) is SqliteBackend and [j.payload for j in q.jobs()] == ["x"]


# -- the required part is enough: the minimal backend ------------------------------------------------


def test_the_minimal_backend_writes_no_fast_path_so_the_suite_runs_it_on_the_defaults():
    from leaselab.backends.defaults import BackendDefaults
    from tests.support.minimal_backend import MinimalBackend

    optional = {name for name in contract.FastPaths.__dict__ if not name.startswith("_")}
    assert optional == set(contract.FAST_PATHS)
    assert not optional & set(MinimalBackend.__dict__)  # it defines none of them
    assert all(getattr(MinimalBackend, name) is getattr(BackendDefaults, name) for name in optional)
    required = {name for name in contract.Backend.__dict__ if not name.startswith("_")}
    assert required - {"name", "kind", "clock", "use_clock"} <= set(MinimalBackend.__dict__)


def test_a_backend_without_the_mixin_gets_the_defaults_it_lacks_and_keeps_its_own(tmp_path):
    from leaselab.backends.defaults import BackendDefaults, with_defaults
    from leaselab.backoff import Backoff
    from tests.support.minimal_backend import MinimalBackend

    plain = type(
        "Plain", (), {k: v for k, v in MinimalBackend.__dict__.items() if k not in ("__dict__", "__weakref__")}
    )
    own = []
    plain.complete_many = lambda self, done, now, *, durable: own.append(done) or []  # a fast path of its own
    backend = plain(str(tmp_path / "p.db"), busy_timeout=5.0, backoff=Backoff(), tracer=None, create=True)
    full = with_defaults(backend)
    assert full is not backend and not isinstance(backend, BackendDefaults)
    full.use_clock(lambda: 1000.0)
    full.tracer = print  # set on the backend itself
    assert backend.tracer is print
    full.tracer = None
    ids = full.enqueue_many([_job(), _job()], 1.0, durable=False)  # the default
    completed, job = full.complete_and_claim(Completion(ids[0], "t", "1"), _claim("a"), durable=False)
    assert (completed, job) == (False, None)
    assert full.complete_many_and_claim([Completion(ids[0], "t", "1")], 1, _claim("b"), durable=False)[0] == []
    assert own  # the backend's own complete_many, called by the default that builds on it
    assert (
        with_defaults(
            MinimalBackend(str(tmp_path / "m.db"), busy_timeout=5.0, backoff=Backoff(), tracer=None, create=True)
        ).__class__
        is MinimalBackend
    )
