"""The ``leaselab`` command: readable output for every subcommand, and one clear line for bad input."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leaselab import ManualClock, Queue, Status
from leaselab.cli import build_parser, main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_clean_error_line(code: int, out: str, err: str, *words: str) -> None:
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("leaselab")
    assert "error" in lines[0] and "Traceback" not in err
    for word in words:
        assert word in lines[0], lines[0]


def test_enqueue_prints_the_new_ids_and_stores_the_options(capsys, db_path):
    code, out, err = run(capsys, "enqueue", '{"seconds": 2}', "--db", str(db_path))
    assert code == 0 and err == ""
    (first,) = map(int, out.split())
    code, out, _ = run(
        capsys,
        "enqueue",
        '"x"',
        "--db",
        str(db_path),
        "--count",
        "3",
        "--priority",
        "4",
        "--delay",
        "60",
        "--max-attempts",
        "2",
        "--durability",
        "normal",
    )
    ids = list(map(int, out.split()))
    assert code == 0 and len(ids) == 3 and ids[0] > first
    with Queue(db_path) as q:
        assert q.get(first).payload == {"seconds": 2}
        job = q.get(ids[0])
        assert (job.payload, job.priority, job.max_attempts) == ("x", 4, 2)
        assert job.run_at > job.created_at + 59


def test_stats_prints_all_four_statuses_and_json_on_request(capsys, db_path):
    run(capsys, "enqueue", "1", "--db", str(db_path), "--count", "2")
    code, out, _ = run(capsys, "stats", "--db", str(db_path))
    assert code == 0
    table = dict(line.split() for line in out.splitlines())
    assert table == {"pending": "2", "running": "0", "done": "0", "dead": "0"}
    code, out, _ = run(capsys, "stats", "--db", str(db_path), "--json")
    assert json.loads(out) == {"pending": 2, "running": 0, "done": 0, "dead": 0}


def test_jobs_prints_a_table_with_one_row_per_job(capsys, db_path):
    with Queue(db_path) as q:
        done_id = q.enqueue({"name": "first"})
        q.enqueue({"name": "second"}, priority=9)
        # The queue hands out the priority-9 job first; complete the other one by claiming twice.
        second = q.claim("w-one", lease=30)
        first = q.claim("w-one", lease=30)
        assert first.id == done_id
        q.complete(first.id, first.token, {"ok": True})
    code, out, _ = run(capsys, "jobs", "--db", str(db_path))
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3
    assert lines[0].split()[:3] == ["id", "status", "pri"]
    assert "done" in lines[1] and '"first"' in lines[1] and '{"ok": true}' in lines[1]
    assert "running" in lines[2] and "w-one" in lines[2] and lines[2].split()[0] == str(second.id)
    code, out, _ = run(capsys, "jobs", "--db", str(db_path), "--status", "done")
    assert len(out.splitlines()) == 2 and out.splitlines()[1].split()[0] == str(done_id)


def test_events_prints_the_history_in_order(capsys, db_path):
    with Queue(db_path) as q:
        job_id = q.enqueue("x")
        other = q.enqueue("y")
        job = q.claim("w-ev", lease=30)
        q.fail(job.id, job.token, "boom went the handler")
    code, out, _ = run(capsys, "events", "--db", str(db_path))
    rows = out.splitlines()[1:]
    assert code == 0 and [r.split()[2] for r in rows] == ["enqueued", "enqueued", "claimed", "failed"]
    code, out, _ = run(capsys, "events", "--db", str(db_path), "--job", str(job_id))
    rows = out.splitlines()[1:]
    assert [r.split()[2] for r in rows] == ["enqueued", "claimed", "failed"]
    assert "w-ev" in rows[1] and "boom went the handler" in rows[2]
    assert all(r.split()[1] == str(job_id) for r in rows) and str(other) not in {r.split()[1] for r in rows}


def test_reap_moves_expired_leases_and_says_which(capsys, db_path):
    past = ManualClock(start=time.time() - 3600)  # leases granted an hour ago have long expired
    with Queue(db_path, clock=past) as q:
        expired = q.enqueue("x")
        q.claim("gone", lease=10)
    with Queue(db_path) as q:
        q.enqueue("y")
        alive = q.claim("here", lease=600)
    code, out, _ = run(capsys, "reap", "--db", str(db_path))
    assert code == 0 and out.strip() == f"reaped 1: {expired}"
    code, out, _ = run(capsys, "reap", "--db", str(db_path))
    assert out.strip() == "reaped 0"
    with Queue(db_path) as q:
        assert q.get(expired).status is Status.PENDING and q.get(alive.id).status is Status.RUNNING


def test_a_payload_that_is_not_json_is_one_line_exit_2_and_writes_nothing(capsys, db_path):
    assert_one_clean_error_line(*run(capsys, "enqueue", "{seconds: 2}", "--db", str(db_path)), "JSON")
    assert_one_clean_error_line(*run(capsys, "enqueue", "NaN", "--db", str(db_path)), "JSON")
    if db_path.exists():
        with Queue(db_path) as q:
            assert q.stats()["pending"] == 0


@pytest.mark.parametrize("command", [["stats"], ["jobs"], ["events"], ["reap"], ["enqueue", "1"]])
def test_a_file_that_is_not_sqlite_is_one_line_exit_2_and_unchanged(capsys, tmp_path, command):
    path = tmp_path / "notes.txt"
    path.write_text("shopping list\n")
    assert_one_clean_error_line(*run(capsys, *command, "--db", str(path)), str(path))
    assert path.read_text() == "shopping list\n"


@pytest.mark.parametrize(
    "argv, word",
    [
        (["worker", "--handler", "leaselab.harness.demo:task", "--lease", "0"], "lease"),
        (["worker", "--handler", "leaselab.harness.demo:task", "--lease", "nan"], "lease"),
        (["worker", "--handler", "leaselab.harness.demo:task", "--lease", "soon"], "lease"),
        (["enqueue", "1", "--max-attempts", "0"], "--max-attempts"),
        (["enqueue", "1", "--delay", "-5"], "--delay"),
        (["enqueue", "1", "--priority", "high"], "priority"),
        (["jobs", "--status", "sleeping"], "status"),
        (["frobnicate"], "frobnicate"),
        ([], "required"),
    ],
)
def test_bad_arguments_are_one_line_exit_2_and_no_traceback(capsys, db_path, argv, word):
    assert_one_clean_error_line(*run(capsys, *argv, "--db", str(db_path)) if argv else run(capsys), word)


def test_a_missing_folder_is_one_line_exit_2(capsys, tmp_path):
    assert_one_clean_error_line(*run(capsys, "stats", "--db", str(tmp_path / "nope" / "jobs.db")), "nope")
    assert not (tmp_path / "nope").exists()


def test_help_exits_0(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for command in ("enqueue", "worker", "reap", "stats", "jobs", "events", "check"):
        assert command in out


def _console_script() -> str:
    beside = Path(sys.executable).with_name("leaselab")
    found = str(beside) if beside.exists() else shutil.which("leaselab")
    if found is None:
        pytest.skip("the leaselab console script is not installed (pip install -e .)")
    return found


def test_the_module_entry_point_and_the_console_script_run_a_job_end_to_end(tmp_path):
    db = str(tmp_path / "jobs.db")

    def cli(*argv: str, script: bool = False) -> subprocess.CompletedProcess:
        prefix = [_console_script()] if script else [sys.executable, "-m", "leaselab"]
        return subprocess.run(prefix + list(argv), capture_output=True, text=True, timeout=60, cwd=tmp_path)

    enq = cli("enqueue", '{"seconds": 0}', "--db", db, "--count", "3")
    assert enq.returncode == 0, enq.stderr
    work = cli(
        "worker",
        "--db",
        db,
        "--handler",
        "leaselab.harness.demo:task",
        "--name",
        "w-cli",
        "--lease",
        "5",
        "--exit-when-idle",
    )
    assert work.returncode == 0, work.stderr
    assert "completed 3" in work.stdout and work.stderr == ""
    stats = cli("stats", "--db", db, "--json", script=True)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout) == {"pending": 0, "running": 0, "done": 3, "dead": 0}
    for bad in (
        cli("stats", "--db", str(tmp_path), script=True),  # a folder is not a queue file
        cli("worker", "--db", db, "--handler", "no_such_module_xyz:run", "--lease", "5"),
    ):
        assert bad.returncode == 2 and bad.stdout.count("\n") <= 1, bad
        assert len(bad.stderr.splitlines()) == 1 and "Traceback" not in bad.stderr, bad.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["stats"],
        ["jobs"],
        ["events"],
        ["reap"],
        ["worker", "--handler", "leaselab.harness.demo:task", "--exit-when-idle"],
    ],
)
def test_a_mistyped_db_is_one_line_exit_2_naming_the_path_and_the_nearest_queue_and_no_file_is_made(
    capsys, tmp_path, command
):
    (tmp_path / "lab.db").write_bytes(b"")  # any existing .db file is a candidate for "did you mean"
    typo = tmp_path / "lab.bd"
    code, out, err = run(capsys, *command, "--db", str(typo))
    assert_one_clean_error_line(code, out, err, str(typo), f"did you mean {tmp_path / 'lab.db'}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab.db"]


def test_a_missing_db_with_no_queue_nearby_names_only_the_path(capsys, tmp_path):
    code, out, err = run(capsys, "stats", "--db", str(tmp_path / "jobs.db"))
    assert_one_clean_error_line(code, out, err, str(tmp_path / "jobs.db"))
    assert "did you mean" not in err and list(tmp_path.iterdir()) == []


def test_enqueue_creates_the_queue_file_and_then_every_command_reads_it(capsys, tmp_path):
    db = tmp_path / "new.db"
    code, out, err = run(capsys, "enqueue", "1", "--db", str(db))
    assert code == 0 and err == "" and db.exists()
    code, out, _ = run(capsys, "stats", "--db", str(db), "--json")
    assert code == 0 and json.loads(out)["pending"] == 1


@pytest.mark.parametrize("count", ["0", "-1", "two"])
def test_enqueue_with_a_count_below_one_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, count):
    db = tmp_path / "jobs.db"
    assert_one_clean_error_line(*run(capsys, "enqueue", "1", "--db", str(db), "--count", count), "--count", count)
    assert not db.exists()


def test_events_for_a_job_the_file_never_had_is_one_line_exit_2(capsys, db_path):
    run(capsys, "enqueue", "1", "--db", str(db_path))
    assert_one_clean_error_line(*run(capsys, "events", "--db", str(db_path), "--job", "999"), "999")
    code, out, _ = run(capsys, "events", "--db", str(db_path), "--job", "1")
    assert code == 0 and "enqueued" in out


def test_help_is_plain_text_without_restructuredtext_markup(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "``" not in out
    assert "The leaselab command" in out


# -- what a user reads: flags by their names, units, JSON shown as JSON ------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["worker", "--handler", "leaselab.harness.demo:task", "--lease", "abc"],
            "argument --lease: must be a number of seconds > 0, got 'abc'",
        ),
        (
            ["worker", "--handler", "leaselab.harness.demo:task", "--lease", "inf"],
            "argument --lease: must be a number of seconds > 0, got 'inf'",
        ),
        (
            ["worker", "--handler", "leaselab.harness.demo:task", "--poll", "0"],
            "argument --poll: must be a number of seconds > 0, got '0'",
        ),
        (["enqueue", "1", "--max-attempts", "0"], "argument --max-attempts: must be a whole number >= 1, got '0'"),
        (["enqueue", "1", "--max-attempts", "2.5"], "argument --max-attempts: must be a whole number >= 1, got '2.5'"),
        (["enqueue", "1", "--delay", "-1"], "argument --delay: must be a number of seconds >= 0, got '-1'"),
        (["enqueue", "1", "--delay", "nan"], "argument --delay: must be a number of seconds >= 0, got 'nan'"),
        (["enqueue", "1", "--priority", "high"], "argument --priority: must be a whole number, got 'high'"),
        (["enqueue", "1", "--priority", str(2**63)], "argument --priority: must fit in 64 bits"),
        (["jobs", "--limit", "-1"], "argument --limit: must be a whole number >= 0, got '-1'"),
        (["events", "--job", "first"], "argument --job: must be a whole number, got 'first'"),
    ],
)
def test_a_bad_number_is_refused_naming_the_flag_and_what_it_must_be(capsys, db_path, argv, message):
    code, out, err = run(capsys, *argv, "--db", str(db_path))
    assert_one_clean_error_line(code, out, err, message)
    # No Python name leaks out: neither a function of the CLI nor a keyword argument.
    assert not re.search(r"_positive|_float|_int\b|max_attempts|invalid \w+ value", err), err
    assert not db_path.exists()


def test_a_nan_payload_says_what_json_cannot_hold_and_not_that_objects_are_refused(capsys, db_path):
    code, out, err = run(capsys, "enqueue", "NaN", "--db", str(db_path))
    assert_one_clean_error_line(code, out, err, "no NaN or Infinity", "no sets", "no Python objects")
    assert "no objects" not in err
    code, out, _ = run(capsys, "enqueue", '{"an": {"object": [1, 2]}}', "--db", str(db_path))
    assert code == 0 and out.strip().isdigit()


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_option_of_every_command_says_what_it_does(command):
    parser = _subcommands()[command]
    silent = [
        a.option_strings[0] if a.option_strings else a.dest
        for a in parser._actions
        if not (a.help or "").strip() and a.help is not argparse.SUPPRESS
    ]
    assert silent == [], f"leaselab {command}: no help text for {silent}"
    # A value in seconds says so, in its help or its metavar.
    for action in parser._actions:
        if action.option_strings and action.option_strings[0] in (
            "--lease",
            "--delay",
            "--poll",
            "--max-poll",
            "--busy-timeout",
        ):
            assert "second" in action.help.lower() or action.metavar == "SECONDS", (command, action.option_strings)


def test_jobs_shows_a_string_payload_and_result_as_json_and_an_error_as_text(capsys, db_path):
    with Queue(db_path) as q:
        done = q.enqueue("str")
        job = q.claim("w", lease=30)
        q.complete(job.id, job.token, "ok")
        failed = q.enqueue("again")
        job = q.claim("w", lease=30)
        q.fail(job.id, job.token, "smtp timeout")
    code, out, _ = run(capsys, "jobs", "--db", str(db_path))
    rows = {int(line.split()[0]): line for line in out.splitlines()[1:]}
    assert code == 0
    assert '"str"' in rows[done] and rows[done].rstrip().endswith('"ok"'), rows[done]
    assert '"again"' in rows[failed] and rows[failed].rstrip().endswith("smtp timeout"), rows[failed]
    assert '"smtp timeout"' not in rows[failed]


def test_jobs_says_how_long_ago_an_expired_lease_ran_out_never_a_negative_time_left(capsys, db_path):
    past = ManualClock(start=time.time() - 100)
    with Queue(db_path, clock=past) as q:
        expired = q.enqueue("x")
        q.claim("gone", lease=10)  # ran out 90 seconds ago
    with Queue(db_path) as q:
        alive = q.enqueue("y")
        q.claim("here", lease=600)
    code, out, _ = run(capsys, "jobs", "--db", str(db_path))
    rows = {int(line.split()[0]): line for line in out.splitlines()[1:]}
    ago = re.search(r"expired (\d+\.\d)s ago", rows[expired])
    assert ago and 89 <= float(ago.group(1)) <= 200, rows[expired]
    left = re.search(r" (\d+\.\d)s ", rows[alive])
    assert left and 500 <= float(left.group(1)) <= 600, rows[alive]
    assert not re.search(r"-\d+\.\ds", out), out


def test_a_refused_server_connection_reads_as_sentences_not_run_together(capsys):
    pytest.importorskip("psycopg")
    with socket.socket() as s:  # a port nothing listens on: bound, never listened, then released
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out, err = run(capsys, "stats", "--db", f"postgresql://app@127.0.0.1:{port}/jobs")
    assert_one_clean_error_line(code, out, err, f"postgresql://app@127.0.0.1:{port}/jobs", "cannot reach the server")
    assert "Connection refused. Is the server running" in err, err
    assert not re.search(r"[a-z] [A-Z][a-z]+ the server", err), err


def test_the_worker_log_stamps_read_exactly_as_the_events_listing_writes_a_time():
    """The log makes its HH:MM:SS once a second; each stamp is still the one ``_stamp`` writes,
    rounding of the milliseconds and the carry into the next second included."""
    from leaselab.worker.logline import LogStamps
    from leaselab.worker.logline import stamp as _stamp

    base = 1_764_600_000.0
    times = [base + k + f for k in range(3) for f in (0.0, 0.0005, 0.1234565, 0.999, 0.9994999, 0.9999995)]
    times += [base + 7 * i / 1000 for i in range(2000)]
    now = [0.0]
    stamps = LogStamps(clock=lambda: now[0])
    for t in times:
        now[0] = t
        assert stamps() == _stamp(t), t
