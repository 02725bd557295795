"""Data in and out of the command, and what an operator does by hand: ``enqueue --file`` (JSON lines, a
bad line refused with its number), ``--json`` for programs, ``jobs --wide``, ``show``, ``retry`` and
``cancel``, on every backend."""

from __future__ import annotations

import io
import json

import pytest

from leaselab import Queue, Worker
from leaselab.cli import main
from tests.test_cli import assert_one_clean_error_line, run


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_enqueue_file_makes_one_job_a_line_and_prints_their_ids_as_json(capsys, tmp_path, target):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"to": "a@example.org"}\n\n"plain"\n[1, 2]\n', encoding="utf-8")  # a blank line holds no job
    code, out, err = run(capsys, "enqueue", "--db", target, "--file", str(jobs), "--json", "--priority", "3")
    assert (code, err) == (0, "")
    ids = json.loads(out)
    with Queue(target) as q:
        assert [(q.get(i).payload, q.get(i).priority) for i in ids] == [
            ({"to": "a@example.org"}, 3),
            ("plain", 3),
            ([1, 2], 3),
        ]


def test_enqueue_reads_standard_input_given_a_dash(capsys, monkeypatch, target):
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(f'{{"n": {n}}}\n' for n in range(25_000))))
    code, out, _ = run(capsys, "enqueue", "--db", target, "--file", "-")
    ids = list(map(int, out.split()))
    assert code == 0 and len(ids) == 25_000 and ids == sorted(ids)  # more than one batch, in order
    with Queue(target) as q:
        assert q.get(ids[-1]).payload == {"n": 24_999} and q.stats()["pending"] == 25_000


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"ok": 1}\n{"ok": 2}\n{oops\n', ("jobs.jsonl, line 3", "not valid JSON")),
        ('{"ok": 1}\n\n"x"\nNaN\n', ("jobs.jsonl, line 4",)),  # Python reads NaN; strict JSON does not
        ('{"ok": 1}\n' + "[" * 150 + "]" * 150 + "\n", ("jobs.jsonl, line 2", "deep")),
    ],
)
def test_a_bad_line_is_refused_with_its_number_and_nothing_is_written(capsys, tmp_path, target, text, words):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(text, encoding="utf-8")
    run(capsys, "enqueue", '"first"', "--db", target)
    assert_one_clean_error_line(*run(capsys, "enqueue", "--db", target, "--file", str(jobs)), *words)
    with Queue(target) as q:
        assert q.stats()["pending"] == 1


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("enqueue",), ("payload", "--file")),
        (("enqueue", '"x"', "--file", "-"), ("not both",)),
        (("enqueue", "--file", "-", "--count", "3"), ("--count",)),
        (("enqueue", "--file", "no-such.jsonl"), ("no file at no-such.jsonl",)),
        (("retry",), ("--dead",)),
        (("retry", "1", "--dead"), ("--dead",)),
        (("retry", "1", "--attempts", "0"), ("--attempts",)),
        (("cancel",), ("ID",)),
        (("show", "x"), ("ID", "'x'")),
    ],
)
def test_bad_words_are_one_error_line_and_write_nothing(capsys, tmp_path, argv, words):
    db = tmp_path / "q.db"
    Queue(db).close()
    assert_one_clean_error_line(*run(capsys, *argv, "--db", str(db)), *words)
    with Queue(db) as q:
        assert q.stats()["pending"] == 0


def test_jobs_and_events_json_give_every_field_one_object_a_line(capsys, target):
    with Queue(target) as q:
        job_id = q.enqueue({"to": "a@example.org"}, max_attempts=2)
    code, out, _ = run(capsys, "jobs", "--db", target, "--json")
    (job,) = _lines(out)
    assert code == 0 and (job["id"], job["payload"], job["status"], job["max_attempts"]) == (
        job_id,
        {"to": "a@example.org"},
        "pending",
        2,
    )
    code, out, _ = run(capsys, "events", "--db", target, "--json", "--job", str(job_id))
    assert code == 0 and [(e["job_id"], e["kind"]) for e in _lines(out)] == [(job_id, "enqueued")]


def test_jobs_wide_cuts_no_payload_and_no_error(capsys, target):
    long = "x" * 300
    with Queue(target) as q:
        job_id = q.enqueue({"note": long}, max_attempts=1)
        held = q.claim("w1")
        q.fail(job_id, held.token, "E" * 200)
    _, narrow, _ = run(capsys, "jobs", "--db", target)
    assert long not in narrow and "E" * 200 not in narrow and "…" in narrow
    _, wide, _ = run(capsys, "jobs", "--db", target, "--wide")
    assert long in wide and "E" * 200 in wide and "…" not in wide


def _failed_by_a_real_worker(target: str) -> int:
    """A job whose only attempt raised inside a real worker: its last error holds the traceback."""

    def send(job):
        raise ConnectionError("smtp.example.org:25 refused")

    with Queue(target, call_timeout=20) as q:  # a worker's calls end before its lease (30 s)
        job_id = q.enqueue({"to": "a@example.org"}, max_attempts=1)
        Worker(q, send, name="w1", exit_when_idle=True, signals=False).run()
    return job_id


def test_show_prints_the_job_its_whole_traceback_and_its_history(capsys, target):
    job_id = _failed_by_a_real_worker(target)
    code, out, err = run(capsys, "show", str(job_id), "--db", target)
    assert (code, err) == (0, "")
    assert out.startswith(f"job {job_id}\n") and "status:       dead" in out and "attempts:     1 of 1" in out
    error = out.split("  last error:\n", 1)[1].split("history:\n", 1)[0]
    assert error.startswith("    ConnectionError: smtp.example.org:25 refused\n")
    assert "    Traceback (most recent call last):\n" in error and "in send\n" in error
    history = out.split("history:\n", 1)[1]
    assert [line.split()[1] for line in history.splitlines()[1:]] == ["enqueued", "claimed", "failed", "dead"]
    code, out, _ = run(capsys, "show", str(job_id), "--db", target, "--json")
    shown = json.loads(out)
    assert shown["job"]["status"] == "dead" and "Traceback" in shown["job"]["last_error"]
    assert [e["kind"] for e in shown["events"]][-2:] == ["failed", "dead"]
    assert shown["events"][-2]["detail"] == shown["job"]["last_error"]  # the failed event keeps it whole


def test_jobs_shows_a_failed_attempts_exception_line_and_wide_its_whole_traceback(capsys, target):
    job_id = _failed_by_a_real_worker(target)
    _, out, _ = run(capsys, "jobs", "--db", target)
    (row,) = [line for line in out.splitlines() if line.split()[0] == str(job_id)]
    assert row.endswith("ConnectionError: smtp.example.org:25 re…") and "Traceback" not in row
    _, out, _ = run(capsys, "jobs", "--db", target, "--wide")
    (row,) = [line for line in out.splitlines() if line.split()[0] == str(job_id)]
    assert "refused\\n\\nTraceback (most recent call last):" in row  # one line: its newlines shown escaped


def test_show_of_an_unknown_job_is_one_error_line(capsys, target):
    Queue(target).close()
    assert_one_clean_error_line(*run(capsys, "show", "42", "--db", target), "no job with id 42")


def test_retry_and_cancel_from_the_command_line(capsys, target):
    dead = _failed_by_a_real_worker(target)
    with Queue(target) as q:
        waiting = q.enqueue("later")
    assert_one_clean_error_line(
        *run(capsys, "retry", str(dead), str(waiting), "--db", target), f"job {waiting} is pending", "Nothing"
    )
    assert run(capsys, "retry", str(dead), "--db", target, "--attempts", "3") == (0, f"retried 1: {dead}\n", "")
    with Queue(target) as q:
        assert (q.get(dead).status.value, q.get(dead).max_attempts) == ("pending", 4)
    code, out, _ = run(capsys, "cancel", str(dead), str(waiting), "--db", target, "--reason", "not needed", "--json")
    assert code == 0 and json.loads(out) == sorted([dead, waiting])
    assert_one_clean_error_line(*run(capsys, "cancel", str(dead), "--db", target), f"job {dead} is dead")
    assert_one_clean_error_line(*run(capsys, "cancel", "999", "--db", target), "no job with id 999")
    code, out, _ = run(capsys, "retry", "--dead", "--db", target, "--json")
    assert code == 0 and json.loads(out) == sorted([dead, waiting])
    assert main(["check", "--db", target]) == 0  # the history a retry and a cancel leave keeps every promise
