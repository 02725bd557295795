"""bench/audit.py: the same faults against leaselab and two peers; leaselab's verdict is clean, persist-queue's zombie
is caught.

The whole ``--quick`` audit runs once for the module (about a minute: each fault is in the
handler, so no verdict waits on the machine's speed) and each test reads its rows.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import audit  # noqa: E402
import audit_ledger  # noqa: E402

pytest.importorskip("huey")
pytest.importorskip("persistqueue")


def audit_processes(base: Path) -> list[str]:
    """Command lines of live processes working in a folder under ``base`` (each worker runs in its scenario's
    folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd.startswith(str(base)):
            found.append(f"{entry.name}: {cmd}")
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("audit")
    rows = audit.audit(quick=True, base=base)
    return {"rows": rows, "base": base, "left": audit_processes(base)}


def row(run, queue: str, scenario: str) -> audit.Row:
    (found,) = [r for r in run["rows"] if r.queue.startswith(queue) and r.scenario == scenario]
    return found


def test_quick_audit_covers_leaselab_huey_and_persist_queue_in_every_scenario(run):
    assert {(r.queue.split()[0], r.scenario) for r in run["rows"]} == {
        (q, s) for q in ("leaselab", "huey", "persist-queue") for s in audit.SCENARIOS
    }
    measured = [r for r in run["rows"] if r.scenario != "partition"]
    assert all(r.verdict is not None for r in measured), [r.note for r in measured]


def test_a_queue_in_a_file_cannot_be_partitioned_and_its_row_says_so_from_a_count(run):
    for r in run["rows"]:
        if r.scenario == "partition":
            assert r.verdict is None
            assert "held 0 TCP connections" in r.note, r.note


def test_in_the_flood_leaselab_loses_nothing_and_completes_every_job_once(run):
    flood = row(run, "leaselab", "flood")
    assert flood.clean, flood.note
    v = flood.verdict
    assert (v.lost, v.stuck, v.completed_twice, v.stale_accepted) == (0, 0, 0, 0)
    assert v.runs == audit.FLOOD_JOBS + audit.FLOOD_KILLS
    assert f"{audit.FLOOD_JOBS} completed" in flood.note


def test_in_the_flood_huey_loses_exactly_the_jobs_whose_runs_were_killed(run):
    v = row(run, "huey", "flood").verdict
    assert v.lost == audit.FLOOD_KILLS and v.runs == audit.FLOOD_JOBS


def test_leaselab_brings_a_killed_job_back_and_refuses_its_zombies_late_completion(run):
    crash, zombie = row(run, "leaselab", "crash"), row(run, "leaselab", "zombie")
    assert crash.clean and zombie.clean
    assert crash.verdict.back_after is not None and crash.verdict.runs == 2
    assert zombie.verdict.stale_accepted == 0 and zombie.verdict.completed_twice == 0
    assert "late completion refused" in zombie.note


def test_persist_queue_accepts_the_zombies_late_completion_over_the_newer_run(run):
    zombie = row(run, "persist-queue", "zombie")
    assert not zombie.clean
    assert zombie.verdict.overlapping == 1 and zombie.verdict.stale_accepted == 1
    assert zombie.verdict.completed_twice == 1


def test_huey_loses_the_job_whose_worker_was_killed(run):
    crash = row(run, "huey", "crash")
    assert crash.verdict.lost == 1 and crash.verdict.runs == 1


def test_the_audit_leaves_no_worker_running_and_no_folder_behind(run):
    assert run["left"] == []
    assert list(run["base"].iterdir()) == []


def test_the_table_has_one_line_per_row_and_says_what_was_measured(run):
    lines = audit.table(run["rows"]).splitlines()
    assert len(lines) == 2 + len(run["rows"])
    assert "late completion refused" in lines[3] or "late completion refused" in "\n".join(lines)


def test_the_ledger_rules_count_an_overlap_and_a_stale_completion(tmp_path):
    ledger = tmp_path / "l.jsonl"
    for pid, what, t in (
        (1, "start", 0.0),
        (2, "start", 1.0),
        (2, "end", 2.0),
        (2, "accepted", 2.1),
        (1, "end", 3.0),
        (1, "accepted", 3.1),
    ):
        audit_ledger.record(ledger, "j", what, pid=pid, t=t)
    v = audit_ledger.judge(audit_ledger.read(ledger), ["j", "never"], held=set())
    assert (v.runs, v.overlapping, v.stale_accepted, v.completed_twice, v.lost, v.stuck) == (2, 1, 1, 1, 1, 0)
    assert v.back_after == 1.0


def test_a_ledger_line_of_an_unknown_kind_is_refused_by_name(tmp_path):
    with pytest.raises(audit_ledger.LedgerError, match="'finished'"):
        audit_ledger.record(tmp_path / "l.jsonl", "j", "finished")
    (tmp_path / "bad.jsonl").write_text('{"job": "j"}\n')
    with pytest.raises(audit_ledger.LedgerError, match="bad.jsonl:1"):
        audit_ledger.read(tmp_path / "bad.jsonl")


def test_the_throw_away_redis_answers_on_127_0_0_1_and_leaves_no_process_or_folder_behind():
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server here (apt-get install redis-server)")
    from redisserver import RedisServer

    with RedisServer() as redis:
        assert redis.url.startswith("redis://127.0.0.1:")
        assert redis.ask(b"PING") == b"+PONG"
        pid, folder = redis.proc.pid, redis.folder
        assert folder.is_dir()
    assert not folder.exists()
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]


def test_lesson_7_reads_the_rows_as_json_and_its_compared_facts_hold_verdicts_but_no_time(run):
    import dataclasses
    import json
    import re

    from leaselab.lessons import peers, text

    rows = json.loads(json.dumps([dataclasses.asdict(r) for r in run["rows"]]))  # as `--json` prints them
    verdicts = {(r["queue"].split()[0], r["scenario"]): peers.verdict(r) for r in rows}
    assert verdicts[("leaselab", "zombie")] == "l7_audit_refused"
    assert verdicts[("persist-queue", "zombie")] == "l7_audit_stale"
    assert verdicts[("huey", "crash")] == "l7_audit_lost_job"
    assert {verdicts[(q, "partition")] for q in ("leaselab", "huey", "persist-queue")} == {"l7_audit_no_network"}
    for lang in ("en", "ru"):
        facts = peers.facts(rows, lang)
        ran = sum(1 for r in rows if r["queue"].startswith("leaselab") and r["verdict"] is not None)
        assert facts.splitlines()[0] == text("l7_audit_leaselab_stale", lang, n=0, scenarios=ran), facts
        assert not re.search(r"\d\s*(s|с)\b", facts), facts
        assert len(peers.table(rows, lang).splitlines()) == 2 + len(rows)


def test_the_lesson_finds_the_audit_two_folders_above_its_own_as_on_binder_where_the_package_is_installed(tmp_path):
    from leaselab.lessons import peers

    repository = tmp_path / "clone"
    (repository / "bench").mkdir(parents=True)
    (repository / "bench" / "audit.py").write_text("# the audit\n")
    lesson = repository / "my-lessons" / "ru"
    lesson.mkdir(parents=True)
    assert peers.find_script(lesson) == repository / "bench" / "audit.py"
    # Anywhere else, this checkout's own (an editable install's package sits in its repository).
    assert peers.find_script(tmp_path) == BENCH / "audit.py"
    with pytest.raises(FileNotFoundError, match="clone of leaselab's repository"):
        peers.run(tmp_path / "no-audit.py")


def test_only_names_a_queue_of_the_list_and_a_name_not_in_it_is_refused_with_the_list(capsys):
    import audit_contenders

    assert sorted(audit.queue_name(c) for c in audit_contenders.quick()) == ["huey", "leaselab", "persist-queue"]
    for argv, words in (
        (["--quick", "--only", "sidekiq"], "--only sidekiq: not in this list; it has huey, leaselab, persist-queue"),
        (["--quick", "--only", "huey", "--readme"], "--readme writes the whole table"),
    ):
        with pytest.raises(SystemExit) as exited:
            audit.main(argv)
        assert exited.value.code == 2 and words in capsys.readouterr().err
