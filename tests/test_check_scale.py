"""`leaselab check` on a history too big to print: a summary by kind, a few witnesses each, a streamed read.

Small histories only (no timings: bench/check_scale.py measures a million jobs); what is pinned is
what a reader sees and that the streamed check finds exactly what the in-memory one finds.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from leaselab import ManualClock, Queue
from leaselab.check import SHOWN, check, check_history, load
from leaselab.check.report import Report
from leaselab.cli import main
from tests.support.servers import fresh_database

LEASE = 30.0


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def broken_file(path, jobs: int = 8) -> list[int]:
    """A file whose every job's row says it is dead while its events say pending: one anomaly each."""
    with Queue(path) as q:
        ids = q.enqueue_many(list(range(jobs)))
    conn = sqlite3.connect(path)
    conn.execute("UPDATE jobs SET status = 'dead'")  # behind the triggers' back
    conn.commit()
    conn.close()
    return ids


def test_by_default_the_report_shows_three_anomalies_of_a_kind_and_counts_the_rest(capsys, tmp_path):
    db = tmp_path / "q.db"
    ids = broken_file(db)
    code, out, _ = run(capsys, "check", "--db", str(db))
    assert code == 1
    headline = f"{len(ids)} anomalies in {len(ids)} jobs; repeated effects were not checked either"
    assert out.splitlines()[0] == headline + ": no effect was recorded"
    shown = [line for line in out.splitlines() if line.startswith("history disagrees: job")]
    assert {line.split()[3].rstrip(":") for line in shown} == {str(i) for i in ids[:SHOWN]}
    assert len(shown) == SHOWN == 3
    assert f"… {len(ids) - 3} more of this kind are not shown (history disagrees; " in out
    assert "by kind: history disagrees 8" in out


def test_all_shows_every_anomaly_with_its_witness(capsys, tmp_path):
    db = tmp_path / "q.db"
    ids = broken_file(db)
    _, out, _ = run(capsys, "check", "--db", str(db), "--all")
    shown = [line for line in out.splitlines() if line.startswith("history disagrees: job")]
    assert len(shown) == len(ids)
    assert "not shown" not in out
    assert sum(line.strip().startswith(f"jobs#{i} ") for line in out.splitlines() for i in ids) >= len(ids)


def test_the_json_report_counts_every_anomaly_and_carries_the_witnesses_it_keeps(capsys, tmp_path):
    db = tmp_path / "q.db"
    ids = broken_file(db, jobs=5)
    _, out, _ = run(capsys, "check", "--db", str(db), "--json")
    report = json.loads(out)
    assert report["totals"] == {"history_disagrees": 5}
    assert [a["job"] for a in report["anomalies"]] == ids[:3]
    assert all(a["witness"] for a in report["anomalies"])
    _, out, _ = run(capsys, "check", "--db", str(db), "--json", "--all")
    assert [a["job"] for a in json.loads(out)["anomalies"]] == ids


def test_the_russian_report_says_how_many_more_with_the_right_plural(tmp_path):
    db = tmp_path / "q.db"
    for jobs, more in ((4, "ещё 1 аномалия этого вида не показана"), (5, "ещё 2 аномалии этого вида не показаны")):
        for suffix in ("", "-wal", "-shm"):
            (tmp_path / f"q.db{suffix}").unlink(missing_ok=True)
        broken_file(db, jobs=jobs)
        text = check(db, keep=SHOWN).render("ru")
        assert more in text, text
        assert f"найдено аномалий: {jobs}" in text
    broken_file(tmp_path / "many.db", jobs=8)
    assert "ещё 5 аномалий этого вида не показано" in check(tmp_path / "many.db").render("ru")


def test_keep_holds_the_first_jobs_of_each_kind_and_totals_count_them_all(tmp_path):
    db = tmp_path / "q.db"
    ids = broken_file(db, jobs=6)
    report = check(db, keep=2)
    assert [a.job for a in report.anomalies] == ids[:2]
    assert report.totals == {"history_disagrees": 6} and report.found == 6 and not report.clean
    assert [a.job for a in check(db).anomalies] == ids  # the library keeps every one unless told


def test_a_report_made_by_hand_counts_its_own_anomalies(tmp_path):
    db = tmp_path / "q.db"
    broken_file(db, jobs=2)
    found = check(db).anomalies
    assert Report(anomalies=found, counts={"jobs": 2}).totals == {"history_disagrees": 2}
    assert Report(anomalies=[], counts={"jobs": 2}).clean


def test_pending_jobs_with_no_worker_are_not_stuck_unless_the_workers_were_idle(capsys, tmp_path):
    db = tmp_path / "q.db"
    with Queue(db) as q:
        q.enqueue_many([1, 2, 3])
    code, out, _ = run(capsys, "check", "--db", str(db))
    assert code == 0 and out.startswith("every promise held: 3 jobs"), out
    code, out, _ = run(capsys, "check", "--db", str(db), "--still-running")
    assert code == 0, out
    code, out, _ = run(capsys, "check", "--db", str(db), "--idle")
    assert code == 1 and out.splitlines()[0].startswith("3 anomalies in 3 jobs;"), out
    assert "stuck: job 1 could run for" in out


def test_idle_and_still_running_cannot_both_be_said(capsys, tmp_path):
    db = tmp_path / "q.db"
    Queue(db).close()
    code, _, err = run(capsys, "check", "--db", str(db), "--idle", "--still-running")
    assert code == 2 and "not allowed with" in err


def damaged_history(path, clock) -> None:
    """A run with retries, a reap and a refused zombie, then damaged behind the triggers' back in several ways."""
    with Queue(path, clock=clock) as q:
        ids = q.enqueue_many(list(range(12)), max_attempts=3)
        for _ in range(6):
            job = q.claim("w1", LEASE)
            q.complete(job.id, job.token, None)
        job = q.claim("w2", LEASE)
        q.fail(job.id, job.token, "boom")
        clock.advance(LEASE + 1)
        zombie = q.claim("w3", LEASE)
        clock.advance(LEASE + 1)
        q.reap()
        q.claim("w4", LEASE)
        try:
            q.complete(zombie.id, zombie.token, None)
        except Exception:  # noqa: BLE001 - the zombie's refusal is the point: it writes lease_lost
            pass
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM jobs WHERE id = ?", (ids[0],))  # lost
    conn.execute("UPDATE jobs SET token = 'forged' WHERE id = ?", (ids[1],))  # history disagrees
    other = conn.execute("SELECT last_event_id FROM jobs WHERE id = ?", (ids[4],)).fetchone()[0]
    conn.execute("UPDATE jobs SET last_event_id = ? WHERE id = ?", (other, ids[5]))  # links cross to job 5
    conn.execute("UPDATE jobs SET last_event_id = 999999 WHERE id = ?", (ids[6],))  # a link to nothing
    conn.commit()
    conn.close()


def test_the_streamed_check_finds_exactly_what_the_check_of_the_whole_history_in_memory_finds(tmp_path):
    db, clock = tmp_path / "q.db", ManualClock()
    damaged_history(db, clock)
    for idle in (True, False):
        streamed = check(db, now=clock(), idle=idle, lease=LEASE)
        whole = check_history(load(db, now=clock()), idle=idle, lease=LEASE)
        assert not streamed.clean
        assert [(a.kind, a.job, a.what, a.facts, a.witness) for a in streamed.anomalies] == [
            (a.kind, a.job, a.what, a.facts, a.witness) for a in whole.anomalies
        ]
        assert streamed.counts == whole.counts and streamed.notes == whole.notes
    whats = {a.what for a in check(db, now=clock(), lease=LEASE).anomalies}
    assert {"lost.gone", "disagree.field", "disagree.links", "disagree.link_missing"} <= whats


def test_a_server_check_sets_its_own_statement_timeout_so_a_short_database_default_does_not_cut_it_off(
    pg_server,
):
    import psycopg

    url = fresh_database(pg_server, "timeout")
    with Queue(url) as q:
        for _ in range(4):
            q.enqueue_many(list(range(5000)))
    name = url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET statement_timeout = 1')  # 1 ms: an administrator's tight default
    with psycopg.connect(url) as conn:  # the setting is real: a plain read of the history is cut off under it
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(
                "SELECT e.*, j.* FROM events e JOIN jobs j ON j.id = e.job_id ORDER BY e.job_id, e.id, md5(e.kind)"
            ).fetchall()
    report = check(url, idle=False)
    assert report.clean, report.render()
    assert report.counts["jobs"] == 20_000
    assert load(url).jobs[-1]["id"] == 20_000


def test_the_two_shapes_the_checker_passes_at_a_glance_are_ones_every_rule_passes(tmp_path):
    from leaselab.check import rules
    from leaselab.check.history import in_memory

    db, clock = tmp_path / "q.db", ManualClock()
    with Queue(db, clock=clock) as q:
        waiting, done = q.enqueue(1, delay=60), q.enqueue(2)
        job = q.claim("w1", LEASE)
        q.complete(job.id, job.token, None)
    view = in_memory(load(db, now=clock()))
    shapes = {job_id: (j, events) for j, job_id, events in view.per_job()}
    for job_id in (waiting, done):
        j, events = shapes[job_id]
        assert rules.plainly_clean(j, events, view.now, idle=True)
        found = (
            rules.unfinished_job(j, events, view.now, True)
            + rules.fencing_job(job_id, events)
            + rules.attempts_job(j, events)
            + rules.events_agree_job(j, events)
            + rules.links_job(j, events, view.event)
            + rules.fences_job(job_id, events, [])
            + rules.false_losses_job(job_id, events)
            + rules.reaps_job(job_id, events, lambda worker: LEASE)
            + rules.effects_agree_job(j, events, [])
        )
        assert found == []
        # The slightest difference and every rule runs: a forged token, a due job with idle workers, a cut link.
        assert not rules.plainly_clean({**j, "token": "forged"}, events, view.now, idle=True)
        assert not rules.plainly_clean({**j, "last_event_id": None}, events, view.now, idle=True)
    j, events = shapes[waiting]
    assert not rules.plainly_clean(j, events, j["run_at"] + 1, idle=True)
