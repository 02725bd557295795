"""Named queues and unique jobs from the command line, on SQLite and PostgreSQL: ``enqueue --queue`` and
``--key``, a real ``worker`` process serving several queues each with its own handler, ``stats`` and
``jobs`` by queue, and one clean error line for a bad name or a worker with no handler for a queue."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from leaselab import Queue
from tests.test_cli import assert_one_clean_error_line, run

HANDLERS = textwrap.dedent(
    """
    def send(job):
        return {"sent": job.payload, "queue": job.queue}

    def text(job, lease):
        return {"texted": job.payload, "queue": job.queue}
    """
)


def _leaselab(cwd, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "leaselab", *argv], capture_output=True, text=True, timeout=180, cwd=cwd
    )


def test_enqueue_puts_a_job_in_a_named_queue_and_a_key_enqueues_once_saying_which_job(capsys, target):
    code, out, err = run(capsys, "enqueue", '{"to": "a"}', "--queue", "emails", "--db", target)
    assert (code, err) == (0, "")
    (mail,) = map(int, out.split())
    code, out, err = run(capsys, "enqueue", '{"invoice": 42}', "--key", "invoice-42", "--db", target)
    assert (code, err) == (0, "")
    (first,) = map(int, out.split())
    code, out, err = run(capsys, "enqueue", '{"invoice": 42}', "--key", "invoice-42", "--db", target, "--json")
    assert code == 0 and json.loads(out) == [first]
    assert err == f"leaselab enqueue: job {first} already pending with key invoice-42\n"
    with Queue(target) as q:
        assert (q.get(mail).queue, q.get(first).key, len(q.jobs())) == ("emails", "invoice-42", 2)


def test_enqueue_refuses_a_bad_queue_name_or_a_key_with_many_jobs_in_one_line_and_writes_nothing(capsys, db_path):
    assert_one_clean_error_line(
        *run(capsys, "enqueue", "{}", "--queue", "no spaces", "--db", str(db_path)), "'no spaces'", "--queue"
    )
    assert_one_clean_error_line(*run(capsys, "enqueue", "{}", "--key", "k", "--count", "2", "--db", str(db_path)))
    assert_one_clean_error_line(*run(capsys, "enqueue", "{}", "--key", "", "--db", str(db_path)), "key")
    assert not db_path.exists() or Queue(db_path).stats()["pending"] == 0


def test_a_worker_serves_several_queues_each_with_its_own_handler_and_leaves_the_rest(tmp_path, target):
    (tmp_path / "tasks.py").write_text(HANDLERS, encoding="utf-8")
    with Queue(target) as q:
        mail = q.enqueue("hi", queue="emails")
        sms = q.enqueue("yo", queue="sms")
        plain = q.enqueue("nobody serves me")
    done = _leaselab(
        tmp_path,
        "worker",
        "--db",
        target,
        "--queue",
        "emails=tasks:send",
        "--queue",
        "sms=tasks:text",
        "--exit-when-idle",
    )
    assert done.returncode == 0, done.stderr
    assert "queues emails=tasks:send, sms=tasks:text" in done.stdout  # the worker logs to standard output
    with Queue(target) as q:
        assert q.get(mail).result == {"sent": "hi", "queue": "emails"}
        assert q.get(sms).result == {"texted": "yo", "queue": "sms"}
        assert q.get(plain).status == "pending"
    # --queue NAME takes --handler's function; plain --handler serves the default queue.
    done = _leaselab(tmp_path, "worker", "--db", target, "--handler", "tasks:send", "--exit-when-idle")
    assert done.returncode == 0, done.stderr
    with Queue(target) as q:
        assert q.get(plain).result == {"sent": "nobody serves me", "queue": "default"}
        other = q.enqueue("late", queue="other")
    done = _leaselab(
        tmp_path, "worker", "--db", target, "--queue", "other", "--handler", "tasks:text", "--exit-when-idle"
    )
    assert done.returncode == 0, done.stderr
    with Queue(target) as q:
        assert q.get(other).result == {"texted": "late", "queue": "other"}


def test_the_worker_command_refuses_a_queue_without_a_handler_or_given_two(capsys, tmp_path):
    db = str(tmp_path / "q.db")
    assert_one_clean_error_line(*run(capsys, "worker", "--db", db, "--queue", "emails"), "--queue emails", "--handler")
    assert_one_clean_error_line(
        *run(capsys, "worker", "--db", db, "--queue", "a=m:f", "--queue", "a=m:g"), "two handlers"
    )
    assert_one_clean_error_line(*run(capsys, "worker", "--db", db, "--queue", "bad name=m:f"), "'bad name'")
    assert_one_clean_error_line(*run(capsys, "worker", "--db", db), "--handler")
    assert not (tmp_path / "q.db").exists()


def test_stats_and_jobs_read_one_queue_or_each(capsys, target):
    with Queue(target) as q:
        q.enqueue_many(["a", "b"], queue="emails")
        q.enqueue("c")
        q.claim("w", queues="emails")
    code, out, _ = run(capsys, "stats", "--db", target, "--queue", "emails", "--json")
    assert code == 0 and json.loads(out) == {"pending": 1, "running": 1, "done": 0, "dead": 0}
    code, out, _ = run(capsys, "stats", "--db", target, "--by-queue", "--json")
    assert json.loads(out) == {
        "default": {"pending": 1, "running": 0, "done": 0, "dead": 0},
        "emails": {"pending": 1, "running": 1, "done": 0, "dead": 0},
    }
    code, out, _ = run(capsys, "stats", "--db", target, "--by-queue")
    assert out.splitlines() == [
        "queue                 pending  running     done     dead",
        "default                     1        0        0        0",
        "emails                      1        1        0        0",
    ]
    code, out, _ = run(capsys, "jobs", "--db", target, "--queue", "emails", "--json")
    assert [(j["payload"], j["queue"]) for j in map(json.loads, out.splitlines())] == [
        ("a", "emails"),
        ("b", "emails"),
    ]
    code, out, _ = run(capsys, "jobs", "--db", target, "--queue", "default", "--status", "pending")
    assert len(out.splitlines()) == 2 and '"c"' in out  # the header and job c


def test_retry_dead_takes_a_queue(capsys, target):
    with Queue(target) as q:
        for name in ("emails", "sms"):
            q.enqueue(name, queue=name, max_attempts=1)
            job = q.claim("w", queues=name)
            q.fail(job.id, job.token, "boom")
    code, out, err = run(capsys, "retry", "--dead", "--queue", "sms", "--db", target, "--json")
    assert (code, err, json.loads(out)) == (0, "", [2])
    assert_one_clean_error_line(*run(capsys, "retry", "1", "--queue", "sms", "--db", target), "--dead")
    with Queue(target) as q:
        assert (q.get(1).status, q.get(2).status) == ("dead", "pending")
