"""Hostile files and bad input from outside the API: each gets a clear error, writes nothing, and
leaves the file valid. Facts of the SQLite file and the command line.

The command line refusing a bad handler or text that is not JSON; files that are not a healthy
leaselab queue (the open or first read fails with a named error and the file's bytes stay as they
were); files the process may not write; then payloads that look like SQL or code, which must be
stored and returned literally and never run, and stored payloads damaged outside leaselab. Bad
arguments to the queue's own calls are the contract's, run on every backend: ``test_contract_bad_calls.py``.
"""

from __future__ import annotations

import ast
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest

from leaselab import InvalidPayload, LeaseLost, Queue
from leaselab.errors import DatabaseUnwritable, NotALeaselabDatabase, SchemaTooNew
from tests.support.procs import as_nobody
from tests.support.servers import IN_PROCESS_BACKENDS
from tests.support.sqlite_marks import integrity, marks

TARGETS = IN_PROCESS_BACKENDS  # payloads that look like SQL: on every backend, APSW too


@pytest.fixture
def queue_file(tmp_path) -> str:
    """A small queue file with a pending, a running and a done job."""
    path = str(tmp_path / "q.db")
    with Queue(path) as q:
        q.enqueue_many([{"n": i} for i in range(3)])
        q.claim("w1", lease=600)
        done = q.claim("w2", lease=600)
        q.complete(done.id, done.token, {"ok": True})
    return path


def snapshot(path: str) -> tuple[list, list, tuple]:
    conn = sqlite3.connect(path)
    try:
        # Everything but the head of each job's history list, which a recorded refusal moves.
        columns = [r[1] for r in conn.execute("PRAGMA table_info(jobs)") if r[1] != "last_event_id"]
        jobs = conn.execute(f"SELECT {', '.join(columns)} FROM jobs ORDER BY id").fetchall()
        events = conn.execute("SELECT * FROM events ORDER BY id").fetchall()
    finally:
        conn.close()
    return jobs, events, marks(path)


def test_the_worker_command_with_a_handler_that_does_not_import_exits_2_with_one_line(queue_file):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaselab",
            "worker",
            "--db",
            queue_file,
            "--handler",
            "no_such_module_xyz:run",
            "--exit-when-idle",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "cannot import handler module 'no_such_module_xyz'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_worker_command_with_an_async_handler_exits_2_with_one_line_and_claims_nothing(queue_file, tmp_path):
    (tmp_path / "asynchandlers.py").write_text("async def work(job):\n    return job.payload\n")
    before = snapshot(queue_file)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaselab",
            "worker",
            "--db",
            queue_file,
            "--handler",
            "asynchandlers:work",
            "--exit-when-idle",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert "handler asynchandlers:work is asynchronous (async def)" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert snapshot(queue_file) == before


def test_the_enqueue_command_refuses_text_that_is_not_json_and_writes_nothing(queue_file):
    before = snapshot(queue_file)
    proc = subprocess.run(
        [sys.executable, "-m", "leaselab", "enqueue", "{'single': 'quotes'}", "--db", queue_file],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "not valid JSON" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(queue_file) == before


# -- hostile files --------------------------------------------------------------------------------


def leaselab_file(path: Path, jobs: int = 300) -> None:
    """A real queue file with its WAL folded in, so every byte lives in the main file."""
    with Queue(path) as q:
        q.enqueue_many([{"n": i, "pad": "x" * 200} for i in range(jobs)])
        job = q.claim("w")
        q.complete(job.id, job.token, {"ok": True})
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def root_page(path: Path, table: str) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        page = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        return page, conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def text_file(p: Path) -> None:
    p.write_text("id,payload\n1,hello\n")


def random_bytes(p: Path) -> None:
    p.write_bytes(bytes(range(256)) * 64)


def other_app(p: Path) -> None:
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()


def other_application_id(p: Path) -> None:
    conn = sqlite3.connect(p)
    conn.execute("PRAGMA application_id = 1234")
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()


def truncated_to_half(p: Path) -> None:
    leaselab_file(p)
    os.truncate(p, os.path.getsize(p) // 2)


def truncated_to_header(p: Path) -> None:
    leaselab_file(p)
    os.truncate(p, 100)


def jobs_root_page_wiped(p: Path) -> None:
    leaselab_file(p)
    page, size = root_page(p, "jobs")
    overwrite(p, (page - 1) * size, b"\xff" * size)


def schema_page_wiped(p: Path) -> None:
    leaselab_file(p)
    overwrite(p, 100, b"\xa5" * 3000)


def newer_schema(p: Path) -> None:
    leaselab_file(p, jobs=3)
    conn = sqlite3.connect(p)
    conn.execute("PRAGMA user_version = 99")
    conn.close()


def a_folder(p: Path) -> None:
    p.mkdir()


def a_few_bytes_flipped_in_an_index(p: Path) -> None:
    leaselab_file(p)
    page, size = root_page(p, "jobs_claim")
    overwrite(p, (page - 1) * size + 8, b"\xff\xff\xff\xff")


HOSTILE: list[tuple[str, Callable[[Path], None], type]] = [
    ("a text file", text_file, NotALeaselabDatabase),
    ("random bytes", random_bytes, NotALeaselabDatabase),
    ("a SQLite file of another application", other_app, NotALeaselabDatabase),
    ("a SQLite file with another application_id", other_application_id, NotALeaselabDatabase),
    ("a leaselab file truncated to half", truncated_to_half, NotALeaselabDatabase),
    ("a leaselab file truncated to its header", truncated_to_header, NotALeaselabDatabase),
    ("a leaselab file whose jobs table page is wiped", jobs_root_page_wiped, NotALeaselabDatabase),
    ("a leaselab file whose schema page is garbage", schema_page_wiped, NotALeaselabDatabase),
    ("a leaselab file with a newer schema version", newer_schema, SchemaTooNew),
    ("a folder instead of a file", a_folder, NotALeaselabDatabase),
    pytest.param(
        "a leaselab file with four bytes flipped in an index page",
        a_few_bytes_flipped_in_an_index,
        NotALeaselabDatabase,
        id="a leaselab file with four bytes flipped in an index page",
        marks=pytest.mark.xfail(
            strict=True,
            reason=(
                "known limit: leaselab runs no PRAGMA quick_check when opening (it costs a full scan), so damage "
                "inside a page that no statement touches goes unnoticed until SQLite reads it"
            ),
        ),
    ),
]


def file_bytes(p: Path) -> bytes | None:
    return p.read_bytes() if p.is_file() else None


@pytest.mark.parametrize(
    "what, make, error", HOSTILE, ids=[row[0] if isinstance(row, tuple) else None for row in HOSTILE]
)
def test_a_hostile_file_gets_a_named_error_at_open_or_first_read_and_is_not_modified(tmp_path, what, make, error):
    path = tmp_path / "hostile.db"
    make(path)
    before = file_bytes(path)
    with pytest.raises(error) as caught:
        with Queue(path) as q:  # some damage is only found when a page is read
            q.stats()
            q.jobs(limit=100_000)
            q.events()
            q.claim("w")
    assert str(path) in str(caught.value), f"{what}: the message should name the file: {caught.value}"
    assert file_bytes(path) == before, f"{what}: leaselab changed the file it refused"


# -- files this process may not write --------------------------------------------------------------


def try_to_use(path: Path) -> str:
    try:
        with Queue(path) as q:
            q.enqueue({"should": "not be written"})
        return "opened and wrote"
    except DatabaseUnwritable as exc:
        return f"DatabaseUnwritable: {exc}"
    except Exception as exc:  # noqa: BLE001 - any other type is the failure we report
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize(
    "file_mode, folder_mode",
    [(0o444, 0o777), (0o666, 0o755)],
    ids=["a read-only file", "a writable file in a read-only folder"],
)
def test_a_file_that_cannot_be_written_gets_database_unwritable_and_keeps_its_jobs(open_dir, file_mode, folder_mode):
    path = open_dir / "q.db"
    leaselab_file(path, jobs=5)
    before = path.read_bytes()
    path.chmod(file_mode)
    open_dir.chmod(folder_mode)
    try:
        outcome = as_nobody(lambda: try_to_use(path))
    finally:
        open_dir.chmod(0o755)
    assert outcome.startswith("DatabaseUnwritable"), outcome
    assert str(path) in outcome
    assert path.read_bytes() == before and integrity(str(path)) == "ok"
    assert snapshot(str(path))[0] and len(snapshot(str(path))[0]) == 5


# -- payloads that look like SQL or code -------------------------------------------------------------

INJECTIONS = [
    "'); DROP TABLE jobs; --",
    "1; DELETE FROM events WHERE 1=1",
    '" OR ""="',
    "Robert'); UPDATE jobs SET status='done';--",
    "\x00nul inside",
    "__import__('os').system('touch pwned')",
]


@pytest.mark.parametrize("text", INJECTIONS)
def test_sql_looking_payloads_worker_names_and_errors_are_stored_literally(request, tmp_path, target, text):
    if "\x00" in text and request.node.callspec.params["target"] == "postgresql":
        # A finding of the move to every backend: PostgreSQL text cannot hold NUL. The payload (jsonb) keeps it,
        # but claim() refuses such a worker name with ValueError ("worker contains a NUL character"), and
        # fail() stores such an error with the NUL turned into the two characters backslash and 0.
        request.applymarker(
            pytest.mark.xfail(strict=True, raises=ValueError, reason="PostgreSQL text holds no NUL: the worker name")
        )
    with Queue(target) as q:
        other = q.enqueue({"keep": "me"}, priority=-1)
        job_id = q.enqueue({"text": text, text: [text]})
        job = q.claim(text, lease=60)
        assert job.id == job_id and job.worker == text and job.payload == {"text": text, text: [text]}
        q.fail(job.id, job.token, text)
        assert q.get(job_id).last_error == text
        assert q.get(other).payload == {"keep": "me"} and q.get(other).status == "pending"
        assert q.stats() == {"pending": 2, "running": 0, "done": 0, "dead": 0}
        assert [e.kind for e in q.events(job_id)] == ["enqueued", "claimed", "failed"]
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_importing_leaselab_does_not_import_pickle_or_any_deserializer_that_runs_code():
    code = (
        "import sys, leaselab, leaselab.queue, leaselab.worker, leaselab.cli, leaselab.harness.demo; "
        "print(sorted(m for m in ('pickle', '_pickle', 'shelve', 'marshal', 'dill', 'cloudpickle') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    # marshal is built in and always loaded by the interpreter itself; the rest must stay out.
    assert out.returncode == 0 and json.loads(out.stdout.replace("'", '"')) in ([], ["marshal"]), out


CORE = (
    "queue.py",
    "backends/__init__.py",
    "backends/contract.py",
    "backends/base.py",
    "backends/sql.py",
    "backends/sqlite/backend.py",
    "backends/sqlite/statements.py",
    "job.py",
    "worker/__init__.py",
    "worker/loop.py",
    "worker/lease.py",
    "worker/pulse.py",
    "worker/faults.py",
    "worker/signals.py",
    "worker/logline.py",
    "cli.py",
    "harness/demo.py",
    "errors.py",
    "backoff.py",
    "clock.py",
    "arguments.py",
    "fencing.py",
)


@pytest.mark.parametrize("module", CORE)
def test_the_core_never_imports_pickle_nor_calls_eval_or_exec(module):
    tree = ast.parse(resources.files("leaselab").joinpath(module).read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not imported & {"pickle", "shelve", "marshal", "dill", "cloudpickle"}
    assert not called & {"eval", "exec", "compile", "__import__"}


def test_a_pickle_planted_in_the_file_is_refused_and_never_run(tmp_path):
    import pickle  # only the test builds one: the file's attacker

    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "q.db"
    with Queue(path) as q:
        job_id = q.enqueue({"fine": True})
    conn = sqlite3.connect(path)
    # Protocol 0 is text: a STRICT table takes no blob in payload, but this pickle is still a str.
    conn.execute(
        "UPDATE jobs SET payload = ? WHERE id = ?", (pickle.dumps(Exploit(), protocol=0).decode("latin-1"), job_id)
    )
    conn.commit()
    conn.close()
    with Queue(path) as q:
        with pytest.raises(ValueError):  # the payload is read as JSON only, so a pickle is just bad text
            q.get(job_id)
    assert not marker.exists()


def _plant(path, job_id, payload) -> None:
    conn = sqlite3.connect(path)
    conn.execute("UPDATE jobs SET payload = ? WHERE id = ?", (payload, job_id))
    conn.commit()
    conn.close()


def test_claiming_a_job_whose_stored_payload_is_damaged_fails_that_attempt_instead_of_leaving_it_running(tmp_path):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        job_id = q.enqueue({"fine": True}, max_attempts=1)
    _plant(path, job_id, "\x80\x04not json")
    with Queue(path) as q:
        with pytest.raises(InvalidPayload, match=f"job {job_id}"):
            q.claim("w1")
        job = q.backend.run("SELECT status, last_error FROM jobs WHERE id = ?", (job_id,))[0]
        assert job[0] == "dead" and "not JSON" in job[1]


@pytest.mark.parametrize("damaged", [0, 1], ids=["first, met by a claim", "second, met by complete_and_claim"])
def test_a_worker_skips_a_damaged_job_and_goes_on_with_the_rest(tmp_path, damaged):
    from leaselab import Worker

    path = tmp_path / "q.db"
    with Queue(path) as q:
        ids = q.enqueue_many([1, 2, 3], max_attempts=1)
    _plant(path, ids[damaged], "{not json")
    with Queue(path) as q:
        stats = Worker(q, "leaselab.harness.demo:echo", name="w1", exit_when_idle=True).run()
        assert stats.completed == 2
        statuses = [q.backend.run("SELECT status FROM jobs WHERE id = ?", (i,))[0][0] for i in ids]
        assert statuses == ["dead" if i == damaged else "done" for i in range(3)]


def test_complete_and_claim_keeps_the_completion_when_the_next_job_is_damaged(tmp_path):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        good, bad = q.enqueue_many([1, 2], max_attempts=1)
    _plant(path, bad, "{not json")
    with Queue(path) as q:
        job = q.claim("w1")
        assert q.complete_and_claim(job.id, job.token, "ok", worker="w1") is None
        rows = dict(q.backend.run("SELECT id, status FROM jobs"))
        assert rows == {good: "done", bad: "dead"}


def test_a_history_whose_links_were_damaged_into_a_loop_is_still_read_to_an_end(tmp_path):
    path = tmp_path / "loop.db"
    with Queue(path) as q:
        job_id = q.enqueue("x")
        job = q.claim("w")
        q.heartbeat(job.id, job.token)
    conn = sqlite3.connect(path)
    ids = [r[0] for r in conn.execute("SELECT id FROM events WHERE job_id = ? ORDER BY id", (job_id,))]
    conn.execute("UPDATE events SET prev = ? WHERE id = ?", (ids[-1], ids[0]))  # the oldest points at the newest
    conn.commit()
    conn.close()
    with Queue(path) as q:
        budget = iter(range(10_000))  # ~10 million SQLite steps, then interrupt: a loop fails, it does not hang
        q.backend.connection.set_progress_handler(lambda: next(budget, None) is None, 1000)
        assert [e.kind for e in q.events(job_id)] == ["enqueued", "claimed", "heartbeat"]
        with pytest.raises(LeaseLost):  # the lookup behind a refusal walks the same links
            q.complete(job_id, "not-the-token")
