"""Rows another program wrote into a queue file: none crashes a reader, sticks a job, or hides the others.

The four rows of issue 15's first table, each reproduced on the file as it is now
(STRICT tables refuse them outright) and on a version 2 file, which holds them and is
upgraded in place: the damaged jobs end dead with the reason, every other job and
every event is kept, and the history still satisfies the chaos checker.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from leaselab import InvalidPayload, Job, Queue, Status, Worker
from leaselab.backends.sqlite import SCHEMA_VERSION
from leaselab.job import MAX_JSON_DEPTH
from tests.support import history
from tests.support.sqlite_marks import old_file

DEEP = "[" * 200_000 + "]" * 200_000  # the payload of the issue: Python's decoder recursed into a RecursionError


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def raw(path: Path, statement: str, params: tuple = ()) -> None:
    """Write as another program would: plain sqlite3, no leaselab."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(statement, params)
        conn.commit()
    finally:
        conn.close()


def rows(path: Path, statement: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(statement).fetchall()
    finally:
        conn.close()


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "leaselab", *args], capture_output=True, text=True, timeout=timeout)


# -- bounded JSON ---------------------------------------------------------------------------


def test_a_payload_nested_to_the_limit_is_stored_and_one_level_deeper_is_invalid_payload(tmp_path):
    with Queue(tmp_path / "q.db") as q:
        job_id = q.enqueue(nested(MAX_JSON_DEPTH))
        assert q.get(job_id).payload == nested(MAX_JSON_DEPTH)
        for too_deep in (nested(MAX_JSON_DEPTH + 1), {"a": nested(MAX_JSON_DEPTH)}, nested(5_000)):
            with pytest.raises(
                InvalidPayload, match=f"payload nests arrays or objects more than {MAX_JSON_DEPTH} deep"
            ):
                q.enqueue(too_deep)
        assert q.enqueue("[" * 10_000) == job_id + 1  # brackets inside a string are text, not nesting
        assert q.stats()["pending"] == 2


def test_a_payload_nested_past_pythons_recursion_limit_is_invalid_payload_not_recursion_error(tmp_path):
    with Queue(tmp_path / "q.db") as q:
        with pytest.raises(InvalidPayload, match="nests"):
            q.enqueue(nested(sys.getrecursionlimit() * 3))
        with pytest.raises(InvalidPayload, match="nests"):
            q.enqueue_many([1, nested(100_000)])
        assert q.stats()["pending"] == 0


def test_a_handler_result_nested_too_deep_fails_the_attempt_with_the_reason(tmp_path):
    with Queue(tmp_path / "q.db") as q:
        job_id = q.enqueue(1, max_attempts=1)
        stats = Worker(q, lambda job: nested(10_000), name="w", exit_when_idle=True).run()
        assert (stats.failed, stats.completed) == (1, 0)
        job = q.get(job_id)
        assert job.status is Status.DEAD and "nests arrays or objects" in job.last_error


def test_a_stored_payload_200000_deep_is_failed_by_the_claim_and_listed_as_damaged(tmp_path):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        bad, good = q.enqueue_many([1, 2], max_attempts=1)
    raw(path, "UPDATE jobs SET payload = ? WHERE id = ?", (DEEP, bad))
    with Queue(path) as q:
        with pytest.raises(InvalidPayload, match=f"job {bad}: the stored payload nests"):
            q.claim("w")
        listed = q.jobs()
        assert [j.id for j in listed] == [bad, good]
        assert listed[0].damage is not None and f"job {bad}" in listed[0].damage and listed[0].payload is None
        assert listed[0].status is Status.DEAD and "nests" in listed[0].last_error
        assert listed[1].damage is None and listed[1].payload == 2


# JSON as other programs write it: the reader has a quick path for the text leaselab writes itself
# (one value, nothing around it), and every other text must read exactly as json.loads reads it.
OTHER_JSON = [
    " 7 ",
    '{"a": [1, 2]}\n',
    "\t[true, null]",
    "1 2",
    '{"a": 1} {"b": 2}',
    "\ufeff1",
    "[1, 2",
    "'a'",
    '"x" ,',
    "00",
    "-",
    "",
]


@pytest.mark.parametrize("text", OTHER_JSON, ids=repr)
def test_a_stored_payload_another_program_wrote_reads_as_json_loads_reads_it(tmp_path, text):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        job_id = q.enqueue(0, max_attempts=1)
    raw(path, "UPDATE jobs SET payload = ? WHERE id = ?", (text, job_id))
    try:
        expected = json.loads(text)
    except ValueError as exc:
        with Queue(path) as q:
            with pytest.raises(InvalidPayload, match=f"job {job_id}: the stored payload is not JSON") as caught:
                q.claim("w")
            assert str(exc) in str(caught.value)  # json.loads's own words for the fault
            [listed] = q.jobs()
            assert listed.status is Status.DEAD and str(exc) in listed.damage
        return
    with Queue(path) as q:
        assert q.claim("w").payload == expected
        assert q.get(job_id).payload == expected


def test_a_worker_process_outlives_a_200000_deep_payload_and_jobs_lists_it_marked(tmp_path):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        bad, good = q.enqueue_many([1, 2], max_attempts=2)
    raw(path, "UPDATE jobs SET payload = ? WHERE id = ?", (DEEP, bad))
    done = cli(
        "worker",
        "--db",
        str(path),
        "--handler",
        "leaselab.harness.demo:echo",
        "--exit-when-idle",
        "--poll",
        "0.01",
        "--max-poll",
        "0.05",
    )
    assert done.returncode == 0 and "Traceback" not in done.stdout + done.stderr
    assert rows(path, "SELECT id, status FROM jobs ORDER BY id") == [(bad, "dead"), (good, "done")]
    listing = cli("jobs", "--db", str(path))
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert any(line.split()[:2] == [str(bad), "DAMAGED"] and f"job {bad}" in line for line in lines)
    assert any(line.split()[:2] == [str(good), "done"] for line in lines)


# -- the database refuses wrong types --------------------------------------------------------

REFUSED = {
    "lease_until = 'soon' on a running job": "UPDATE jobs SET lease_until = 'soon' WHERE id = 1",
    "run_at = 'tomorrow'": "UPDATE jobs SET run_at = 'tomorrow' WHERE id = 2",
    "payload as a blob": "UPDATE jobs SET payload = x'00ff' WHERE id = 2",
    "worker as a blob": "UPDATE jobs SET worker = x'01' WHERE id = 1",
    "result as a blob": "UPDATE jobs SET result = x'01' WHERE id = 2",
    "run_at infinite": "UPDATE jobs SET run_at = 9e999 WHERE id = 2",
    "a running job with no lease": "UPDATE jobs SET lease_until = NULL WHERE id = 1",
    "priority as text": "UPDATE jobs SET priority = 'high' WHERE id = 2",
    "attempts below zero": "UPDATE jobs SET attempts = -1 WHERE id = 2",
    "a pending job with no attempt left": "UPDATE jobs SET attempts = max_attempts WHERE id = 2",
    "an event at 'noon'": "UPDATE events SET at = 'noon' WHERE id = 1",
}


@pytest.mark.parametrize("statement", REFUSED.values(), ids=REFUSED.keys())
def test_a_current_file_refuses_a_value_of_the_wrong_type_and_keeps_the_row(tmp_path, statement):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        q.enqueue_many([1, 2])
        q.claim("w")
    before = rows(path, "SELECT * FROM jobs ORDER BY id")
    with pytest.raises(sqlite3.IntegrityError, match="cannot store|CHECK constraint failed"):
        raw(path, statement)
    assert rows(path, "SELECT * FROM jobs ORDER BY id") == before


# -- version 2 files: upgraded in place, damaged rows repaired and their jobs ended ------------


def version_2_file(path: Path) -> None:
    """A file as leaselab's schema version 2 wrote it (untyped tables), with a finished, a running and pending jobs."""
    conn = old_file(path, 2)
    for n in range(6):
        conn.execute(
            "INSERT INTO jobs (payload, run_at, created_at, updated_at, max_attempts) VALUES (?, 1, 1, 1, 3)",
            (json.dumps({"n": n}),),
        )
    for job_id, token in ((1, "a"), (2, "b"), (1, "c")):  # job 1 is claimed twice, reaped in between
        conn.execute(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, worker = 'old', token = ?, "
            "lease_until = 1e10, updated_at = 2, last_event = 'claimed' WHERE id = ?",
            (token, job_id),
        )
        if token == "a":
            conn.execute(
                "UPDATE jobs SET status = 'pending', lease_until = NULL, last_error = 'lease expired', "
                "updated_at = 2, last_event = 'reaped' WHERE id = 1"
            )
    conn.execute(
        "UPDATE jobs SET status = 'done', result = '1', lease_until = NULL, updated_at = 3, "
        "last_event = 'completed' WHERE id = 2"
    )
    conn.close()


def history_of(path: Path) -> list[tuple]:
    return rows(path, "SELECT id, job_id, kind, at, worker, token, attempt, detail FROM events ORDER BY id")


def assert_history_holds(path: Path) -> None:
    jobs, events, _ = history.load(str(path))
    assert history.check_fencing(events) == []
    assert history.check_attempts(jobs, events) == []
    assert history.check_events_agree(jobs, events) == []


def test_a_version_2_file_is_upgraded_in_place_and_keeps_every_job_and_its_history(tmp_path):
    path = tmp_path / "v2.db"
    version_2_file(path)
    jobs_before = rows(path, "SELECT * FROM jobs ORDER BY id")
    events_before = history_of(path)
    with Queue(path) as q:
        assert q.stats() == {"pending": 4, "running": 1, "done": 1, "dead": 0}
        q.complete(1, "c", "late but fine")  # the running job's holder finishes after the upgrade
        assert [e.kind for e in q.events(1)] == ["enqueued", "claimed", "reaped", "claimed", "completed"]
    after = rows(path, "SELECT * FROM jobs WHERE id > 1 ORDER BY id")
    assert [row[: len(jobs_before[0])] for row in after] == jobs_before[1:]  # schema 4's columns come last
    assert history_of(path)[: len(events_before)] == events_before
    assert rows(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert {r[1]: r[5] for r in rows(path, "PRAGMA table_list")}.keys() >= {"jobs", "events"}
    assert all(r[5] == 1 for r in rows(path, "PRAGMA table_list") if r[1] in ("jobs", "events"))
    assert rows(path, "SELECT name FROM sqlite_master WHERE name LIKE '%v2%'") == []
    assert rows(path, "PRAGMA integrity_check") == [("ok",)]
    assert_history_holds(path)


HOSTILE_V2 = {  # job id -> what another program wrote into a version 2 file, and what the reason names
    1: ("UPDATE jobs SET lease_until = 'soon' WHERE id = 1", "lease_until was text 'soon'"),
    3: ("UPDATE jobs SET run_at = 'tomorrow' WHERE id = 3", "run_at was text 'tomorrow'"),
    4: ("UPDATE jobs SET payload = x'00ff', worker = x'01' WHERE id = 4", "payload was blob X'00FF'"),
    5: ("UPDATE jobs SET priority = 'high', attempts = 'x' WHERE id = 5", "priority was text 'high'"),
}


def test_a_version_2_file_holding_hostile_rows_is_upgraded_and_those_jobs_end_dead_with_the_reason(tmp_path):
    path = tmp_path / "v2.db"
    version_2_file(path)
    raw(path, "UPDATE jobs SET result = x'01' WHERE id = 2")  # a finished job keeps its status
    for statement, _ in HOSTILE_V2.values():
        raw(path, statement)
    events_before = history_of(path)
    with Queue(path) as q:
        jobs = {j.id: j for j in q.jobs()}
        for job_id, (_, reason) in HOSTILE_V2.items():
            assert jobs[job_id].status is Status.DEAD, job_id
            assert "found by the upgrade to schema 3" in jobs[job_id].last_error and reason in jobs[job_id].last_error
            assert q.events(job_id)[-1].kind == "dead" and reason in q.events(job_id)[-1].detail
        assert jobs[2].status is Status.DONE and "result was blob" in jobs[2].last_error
        assert jobs[4].payload == "00FF"  # the blob's bytes are kept, as hex text
        assert jobs[6].status is Status.PENDING and jobs[6].last_error is None
        assert Worker(q, "leaselab.harness.demo:echo", name="w", exit_when_idle=True).run().completed == 1
        assert q.stats() == {"pending": 0, "running": 0, "done": 2, "dead": 4}
    assert history_of(path)[: len(events_before)] == events_before
    assert_history_holds(path)


def test_a_current_file_whose_tables_were_made_untyped_by_hand_is_rebuilt_and_repaired(tmp_path):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        q.enqueue_many([1, 2])
        q.claim("w", lease=600)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema = ON")  # what "altered by hand" can mean: STRICT taken off
    conn.execute("UPDATE sqlite_schema SET sql = replace(sql, ') STRICT', ')') WHERE name IN ('jobs', 'events')")
    conn.commit()
    conn.close()
    raw(path, "UPDATE jobs SET lease_until = 'soon' WHERE id = 1")
    with Queue(path) as q:
        one, two = q.jobs()
        assert one.status is Status.DEAD and "lease_until was text 'soon'" in one.last_error
        assert two.status is Status.PENDING
    assert all(r[5] == 1 for r in rows(path, "PRAGMA table_list") if r[1] in ("jobs", "events"))


# -- one damaged row hides nothing ---------------------------------------------------------


def test_jobs_lists_every_readable_job_and_marks_a_damaged_one_with_its_id(tmp_path):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        ids = q.enqueue_many(["a", "b", "c", "d"])
        done = q.claim("w")
        q.complete(done.id, done.token, "ok")
    raw(path, "UPDATE jobs SET payload = '{not json' WHERE id = ?", (ids[1],))
    raw(path, "UPDATE jobs SET result = '[' WHERE id = ?", (ids[0],))
    with Queue(path) as q:
        listed = q.jobs()
        assert [j.id for j in listed] == ids
        assert [j.damage is not None for j in listed] == [True, True, False, False]
        assert "stored result is not JSON" in listed[0].damage and listed[0].payload == "a"
        assert f"job {ids[1]}" in listed[1].damage and listed[1].payload is None and listed[1].priority == 0
        assert [j.id for j in q.jobs(newest_first=True, limit=3)] == ids[:0:-1]
        assert [j.id for j in q.jobs(status="pending")] == ids[1:]
        damaged = listed[1]
        assert isinstance(damaged, Job) and damaged != q.jobs()[2]
        with pytest.raises(AttributeError):
            damaged.damage = None  # frozen like any Job
        with pytest.raises(InvalidPayload):
            q.get(ids[1])  # one job asked for by id is read in full or refused
        assert q.stats() == {"pending": 3, "running": 0, "done": 1, "dead": 0}


def test_the_dashboard_table_shows_a_damaged_job_marked_and_the_others_as_usual(tmp_path):
    from leaselab.lab.dashboard import jobs_html

    path = tmp_path / "q.db"
    with Queue(path) as q:
        ids = q.enqueue_many(["fine", "<b>also fine</b>"])
    raw(path, "UPDATE jobs SET payload = ? WHERE id = ?", (DEEP, ids[0]))
    with Queue(path) as q:
        for lang, word in (("en", "damaged"), ("ru", "повреждено")):
            html = jobs_html(q.jobs(newest_first=True), 2, 0.0, lang)
            assert "leaselab-damaged" in html and word in html and f"job {ids[0]}" in html
            assert "&lt;b&gt;also fine&lt;/b&gt;" in html


def test_the_timeline_draws_a_file_with_a_damaged_job(tmp_path):
    from leaselab.lab.timeline import timeline_data

    path = tmp_path / "q.db"
    with Queue(path) as q:
        ids = q.enqueue_many([1, 2], max_attempts=1)
    raw(path, "UPDATE jobs SET payload = ? WHERE id = ?", (DEEP, ids[0]))
    with Queue(path) as q:
        Worker(q, "leaselab.harness.demo:echo", name="w", exit_when_idle=True).run()
        data = timeline_data(q.events())
    assert {(b.job_id, b.outcome) for b in data.bars} == {(ids[0], "dead"), (ids[1], "completed")}
