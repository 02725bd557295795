"""The dashboard driven headless: buttons change the fleet and the rendered tables, in both languages."""

from __future__ import annotations

import html
import re
from dataclasses import replace

import pytest

from leaselab.harness.fleet import WorkerStatus
from leaselab.lab.dashboard import SAID_KEPT, Lab
from leaselab.lab.i18n import STRINGS, t
from leaselab.worker import STARTED
from tests.support.polling import pid_gone, process_state, wait_until
from tests.support.procs import log_of, shut_down

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture
def make_lab(target, tmp_path, monkeypatch):
    """Labs on one fresh queue, on each backend; each is closed (refresher stopped, workers ended) after the test."""
    monkeypatch.chdir(tmp_path)  # a server queue's logs and faults go to the current folder
    labs = []

    def make(**kwargs) -> Lab:
        kwargs.setdefault("lease", 1.5)
        kwargs.setdefault("refresh", None)
        lab = Lab(target, **kwargs)
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        shut_down(lab.fleet)  # idempotent: close() below finds the workers already ended
        lab.close()


def badge(lab: Lab, name: str) -> str:
    lab.refresh()
    html = lab.row(name).cells.value
    return html.split("leaselab-state-", 1)[1].split('"', 1)[0]


def test_clicking_spawn_starts_a_worker_that_appears_running_in_the_table(make_lab):
    lab = make_lab()
    assert "No workers yet" in lab.workers_box.children[0].value
    lab.spawn_button.click()
    assert lab.fleet.names == ["w1"]
    assert badge(lab, "w1") == "running"
    assert "w1" in lab.workers_html()
    assert "spawned w1" in lab.message.value


def test_clicking_pause_freezes_the_process_and_the_badge_turns_zombie_once_its_job_is_reaped(make_lab):
    lab = make_lab(lease=1.0)
    lab.enqueue(1, seconds=30)
    lab.spawn_button.click()
    wait_until(lambda: lab.refresh().counts["running"] == 1, message="w1 to claim")
    lab.row("w1").buttons["pause"].click()
    wait_until(lambda: process_state(lab.fleet.pid("w1")) == "T", message="the OS to report w1 stopped")
    assert badge(lab, "w1") in ("paused", "lease_expired")
    assert lab.row("w1").buttons["pause"].disabled and not lab.row("w1").buttons["resume"].disabled
    wait_until(lambda: badge(lab, "w1") == "lease_expired", message="w1 to be paused past its lease")
    lab.reap_button.click()  # only now is the job taken from it
    assert badge(lab, "w1") == "zombie"
    lab.row("w1").buttons["resume"].click()
    assert process_state(lab.fleet.pid("w1")) != "T"
    assert badge(lab, "w1") in ("running", "lease_expired")


def test_clicking_kill_shows_the_worker_killed_and_disables_its_buttons(make_lab):
    lab = make_lab()
    lab.spawn_button.click()
    pid = lab.fleet.pid("w1")
    lab.row("w1").buttons["kill"].click()
    assert pid_gone(pid)
    assert badge(lab, "w1") == "killed"
    assert all(b.disabled for b in lab.row("w1").buttons.values())


def test_clicking_stop_lets_the_worker_exit_cleanly(make_lab):
    lab = make_lab()
    lab.spawn_button.click()
    lab.row("w1").buttons["stop"].click()
    wait_until(lambda: badge(lab, "w1") == "exited", message="w1 to exit")


def test_pause_all_and_resume_all_reach_every_live_worker(make_lab):
    lab = make_lab()
    lab.spawn_button.click()
    lab.spawn_button.click()
    lab.pause_all_button.click()
    assert {lab.fleet.state(n) for n in ("w1", "w2")} == {"paused"}
    wait_until(lambda: all(process_state(lab.fleet.pid(n)) == "T" for n in ("w1", "w2")), message="both stopped")
    lab.resume_all_button.click()
    assert {lab.fleet.state(n) for n in ("w1", "w2")} == {"running"}


def test_enqueue_button_adds_jobs_from_the_inputs_and_the_counts_show_them(make_lab):
    lab = make_lab()
    lab.n_input.value = 7
    lab.priority_input.value = 3
    lab.kind_input.value = "fail"
    lab.delay_input.value = 60
    lab.enqueue_button.click()
    jobs = lab.queue.jobs()
    assert len(jobs) == 7 and {j.priority for j in jobs} == {3}
    assert jobs[0].payload["fail"] is True
    assert "pending: 7" in lab.counts.value
    assert lab.jobs.value.count("<tr>") == 1 + 7  # header and one row per job


def test_reap_button_returns_a_killed_workers_job_to_pending(make_lab):
    lab = make_lab(lease=1.0)
    lab.enqueue(1, seconds=30)
    lab.spawn_button.click()
    wait_until(lambda: lab.refresh().counts["running"] == 1, message="w1 to claim")
    lab.kill("w1")
    wait_until(lambda: lab.reap() or lab.queue.stats()["pending"] == 1, message="the lease to expire and be reaped")
    lab.reap_button.click()
    assert "pending: 1" in lab.counts.value


def test_a_hostile_payload_renders_as_text_never_as_html(make_lab):
    lab = make_lab()
    lab.queue.enqueue(HOSTILE)
    lab.queue.enqueue({"note": HOSTILE})
    lab.refresh()
    assert "<img" not in lab.jobs.value
    assert "&lt;img src=x onerror=alert(1)&gt;" in lab.jobs.value


def test_a_hostile_error_message_renders_as_text(make_lab):
    lab = make_lab()
    lab._callback(lab.pause, HOSTILE)()
    assert "<img" not in lab.message.value
    assert "&lt;img" in lab.message.value


def test_a_wrong_click_ends_in_a_message_not_a_traceback(make_lab):
    lab = make_lab()
    lab.spawn_button.click()
    lab.row("w1").buttons["kill"].click()
    lab.row("w1").buttons["pause"].click()  # disabled in a browser; a script may still call it
    assert "Error" in lab.message.value and "killed" in lab.message.value


def test_the_russian_lab_renders_russian_labels(make_lab):
    lab = make_lab(lang="ru")
    assert lab.spawn_button.description == "Запустить воркер"
    lab.queue.enqueue({"seconds": 0})
    lab.spawn_button.click()
    wait_until(lambda: lab.refresh().counts["done"] == 1, message="the job to be done")
    assert "готово: 1" in lab.counts.value
    assert "работает" in lab.row("w1").cells.value
    assert "данные" in lab.jobs.value


def test_both_languages_have_exactly_the_same_strings():
    assert set(STRINGS["en"]) == set(STRINGS["ru"])
    assert all(STRINGS["ru"][k] for k in STRINGS["ru"])


def test_an_unknown_language_is_refused_by_name():
    with pytest.raises(ValueError, match="'de'"):
        t("spawn", "de")


def test_browser_hooks_are_on_the_widgets(make_lab):
    lab = make_lab()
    lab.spawn_button.click()
    assert "leaselab-spawn" in lab.spawn_button._dom_classes
    assert "leaselab-workers" in lab.workers_box._dom_classes
    row = lab.row("w1")
    actions = ("pause", "resume", "kill", "hang", "stop") + (("partition", "heal") if lab.networked else ())
    assert {a: f"leaselab-{a}-w1" in row.buttons[a]._dom_classes for a in row.buttons} == {a: True for a in actions}


def test_the_refresher_updates_the_tables_on_its_own_and_stops_when_closed(make_lab):
    lab = make_lab(refresh=0.1)
    lab.start()
    assert lab.refreshing
    lab.queue.enqueue({"seconds": 0})
    wait_until(lambda: "pending: 1" in lab.counts.value, message="the refresher to show the new job")
    lab.close()
    assert not lab.refreshing


def test_the_worker_log_is_shown_escaped(make_lab):
    lab = make_lab()
    lab.spawn_button.click()
    wait_until(lambda: lab.refresh() and STARTED in lab.log.value, message="w1's log in the view")


def test_the_lab_draws_a_timeline_of_what_it_did(make_lab):
    lab = make_lab()
    lab.queue.enqueue({"seconds": 0})
    lab.spawn_button.click()
    wait_until(lambda: lab.refresh().counts["done"] == 1, message="the job to be done")
    fig = lab.timeline()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["w1"]


def test_the_timeline_button_shows_the_picture_in_the_dashboard(make_lab):
    lab = make_lab()
    assert lab.timeline_image.layout.display == "none"
    lab.timeline_button.click()
    assert bytes(lab.timeline_image.value).startswith(b"\x89PNG")
    assert lab.timeline_image.layout.display is None


# SQLite's one write lock for the whole file; a server locks rows, and an enqueue takes none.
@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_a_write_lock_held_elsewhere_ends_a_click_in_a_hint_to_resume_the_paused_worker(make_lab, tmp_path):
    import sqlite3

    lab = make_lab(busy_timeout=0.2)
    holder = sqlite3.connect(lab.fleet.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # as a worker frozen mid-write would hold it
    try:
        lab.enqueue_button.click()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "Resume it" in lab.message.value and "#c62828" in lab.message.value
    assert lab.queue.stats()["pending"] == 0
    lab.enqueue_button.click()  # once the lock is gone the same click works
    assert lab.queue.stats()["pending"] > 0


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_jobs_at_once_box_spawns_a_worker_with_slots_and_its_row_lists_every_job_it_holds(make_lab, lang):
    lab = make_lab(lang=lang, lease=5.0)
    assert lab.slots_input.description == t("slots", lang)
    # Jobs long enough that a loaded machine cannot poll past the time both are held (with 3 s, a
    # newcomer's full run once missed it); the teardown ends the worker without waiting for them.
    ids = lab.queue.enqueue_many([{"seconds": 30}] * 2)
    lab.slots_input.value = 2
    lab.spawn_button.click()
    name = lab.fleet.names[0]
    assert lab.fleet.status()[0].concurrency == 2
    try:
        wait_until(lambda: len(lab.fleet.status()[0].jobs) == 2, message="two jobs held")
    except pytest.fail.Exception:
        pytest.fail(f"two jobs not held at once: {lab.fleet.status()[0]}\n{log_of(lab.fleet, name)}")
    lab.refresh()
    assert f"{ids[0]}, {ids[1]}" in lab.row(name).cells.value


@pytest.mark.parametrize("lang", ["en", "ru"])
@pytest.mark.parametrize("target", ["postgresql"], indirect=True)
def test_on_a_server_queue_each_worker_row_cuts_and_restores_its_network(make_lab, lang):
    lab = make_lab(lang=lang, lease=1.5)
    job_id = lab.queue.enqueue({"seconds": 3})
    lab.spawn(name="w1")
    lab.refresh()
    row = lab.row("w1")
    assert row.buttons["partition"].description == t("partition", lang)
    assert row.buttons["heal"].description == t("heal", lang)
    wait_until(lambda: lab.queue.get(job_id).worker == "w1", message="w1 to claim")
    lab.refresh()
    assert not row.buttons["partition"].disabled and row.buttons["heal"].disabled
    row.buttons["partition"].click()
    assert lab.fleet.status()[0].partitioned
    assert badge(lab, "w1") in ("cut_off", "lease_expired")
    assert row.buttons["partition"].disabled and not row.buttons["heal"].disabled
    wait_until(lambda: badge(lab, "w1") == "lease_expired", message="w1 to be cut off past its lease")
    assert t("lease_expired", lang) in lab.row("w1").cells.value
    lab.reap_button.click()  # the job is taken from it: a zombie made by the network
    assert badge(lab, "w1") == "zombie"
    assert t("zombie", lang) in lab.row("w1").cells.value
    row.buttons["heal"].click()
    assert not lab.fleet.status()[0].partitioned
    assert t("healed_msg", lang, name="w1") in lab.message.value


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_a_file_queue_has_no_network_buttons(make_lab):
    lab = make_lab()
    lab.spawn(name="w1")
    lab.refresh()
    assert set(lab.row("w1").buttons) == {"pause", "resume", "kill", "hang", "stop"}


# -- "Check this run" ------------------------------------------------------------------------------


def _zombie_and_crash(lab: Lab) -> None:
    """What a reader does in the playground: freeze a worker past its lease until another worker has
    done its job, thaw it (its late write is refused), then kill a worker holding a job."""
    job = lab.enqueue(1, seconds=1.0)[0]
    lab.spawn("w1")
    wait_until(lambda: lab.queue.get(job).status == "running", message="w1 to claim")
    lab.pause("w1")
    lab.spawn("w2")
    wait_until(lambda: lab.queue.get(job).status == "done", timeout=60, message="w2 to do the frozen w1's job")
    lab.resume("w1")
    wait_until(
        lambda: any(e.kind == "lease_lost" for e in lab.queue.events(job)),
        timeout=60,
        message="the thawed w1's write to be refused",
    )
    lab.stop("w1")
    crashed = lab.enqueue(1, seconds=60.0)[0]
    wait_until(lambda: lab.queue.get(crashed).status == "running", message="w2 to claim the long job")
    lab.kill("w2")


@pytest.mark.parametrize("lang", ["en", "ru"])
@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_check_this_run_after_a_pause_and_a_kill_says_every_promise_held_with_the_counts(make_lab, lang):
    lab = make_lab(lang=lang, lease=1.0)
    _zombie_and_crash(lab)
    lab.check_button.click()
    report = lab.last_report
    assert report is not None and report.clean, report.render()
    assert report.counts["repeated_runs"] >= 1 and report.counts["refused_zombies"] >= 1
    assert report.headline(lang) in html.unescape(lab.report.value) and "#2e7d32" in lab.report.value
    assert lab.report.value.count("leaselab-verdict") == 1
    assert report.notes == ["no_effects"]  # every worker had the same lease, so the reaps were timed against it
    assert bytes(lab.timeline_image.value).startswith(b"\x89PNG") and lab.timeline_image.layout.display is None
    assert lab.check().clean  # headless, the same


@pytest.mark.parametrize("lang", ["en", "ru"])
@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_check_this_run_names_a_broken_promise_and_marks_it_on_its_jobs_lane(make_lab, lang):
    import sqlite3

    from leaselab.lab import timeline

    lab = make_lab(lang=lang, lease=1.0)
    job = lab.enqueue(1, seconds=0)[0]
    lab.spawn("w1")
    wait_until(lambda: lab.queue.get(job).status == "done", message="w1 to do the job")
    # Another program completes the job a second time, behind the queue's back.
    conn = sqlite3.connect(lab.fleet.path, isolation_level=None)
    try:
        conn.execute(
            "UPDATE jobs SET token = ?, last_event = 'completed' WHERE id = ?", (lab.queue.get(job).token, job)
        )
    finally:
        conn.close()
    report = lab.check()
    assert not report.clean and "completed_twice" in [a.kind for a in report.anomalies]
    shown = html.unescape(lab.report.value)
    assert "#c62828" in lab.report.value and report.headline(lang) in shown
    anomaly = next(a for a in report.anomalies if a.kind == "completed_twice")
    assert anomaly.sentence(lang) in shown and anomaly.title(lang) in shown
    data = timeline.timeline_data(lab.queue.events(), lab.fleet.actions)
    flags = timeline.flags(data, report, lang)
    assert [(f.worker, f.job_id, f.kind) for f in flags if f.kind == "completed_twice"] == [
        ("w1", job, "completed_twice")
    ]
    fig = lab.timeline(report)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert f" {job}: {anomaly.title(lang)}" in texts
    assert t("tl_anomaly", lang) in [x.get_text() for x in fig.axes[0].get_legend().get_texts()]
    assert " 1: " not in "".join(x.get_text() for x in lab.timeline().axes[0].texts)  # no report, no flag


# -- Hang: alive, heartbeating, stuck ------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "ru"])
@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_clicking_hang_shows_the_worker_hung_while_its_lease_is_still_renewed(make_lab, lang):
    lab = make_lab(lang=lang, lease=1.0)
    lab.spawn_button.click()
    row = lab.row("w1")
    assert row.buttons["hang"].description == t("hang", lang) and not row.buttons["hang"].disabled
    row.buttons["hang"].click()
    assert t("hang_msg", lang, name="w1") in html.unescape(lab.message.value)
    assert row.buttons["hang"].disabled  # one request at a time, until a handler takes it
    job_id = lab.queue.enqueue({"seconds": 0})
    wait_until(lambda: badge(lab, "w1") == "hung", message="w1's handler to hang")
    assert t("hung", lang) in lab.row("w1").cells.value and not row.buttons["hang"].disabled
    wait_until(lambda: sum(e.kind == "heartbeat" for e in lab.queue.events(job_id)) >= 3, message="heartbeats go on")
    assert lab.queue.get(job_id).status == "running" and badge(lab, "w1") == "hung"
    assert t("legend_hung", lang) in html.unescape(lab.legend.value)


@pytest.mark.parametrize("lang", ["en", "ru"])
@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_with_the_job_timeout_box_set_a_hung_job_comes_back_and_the_worker_exits_with_status_5(make_lab, lang):
    lab = make_lab(lang=lang, lease=1.0)
    assert lab.timeout_input.value == 0 and lab.timeout_input.description == t("job_timeout", lang)
    lab.timeout_input.value = 1.0
    lab.spawn_button.click()
    lab.row("w1").buttons["hang"].click()
    job_id = lab.queue.enqueue({"seconds": 0})
    wait_until(lambda: badge(lab, "w1") == "exited", message="w1 to exit, its only slot hung")
    assert lab.fleet.status()[0].returncode == 5
    assert [e.kind for e in lab.queue.events(job_id) if e.kind != "heartbeat"] == ["enqueued", "claimed", "timed_out"]
    assert lab.queue.get(job_id).status == "pending"
    assert "every slot holds a handler past its timeout" in html.unescape(lab.log.value)
    lab.spawn(name="w2", job_timeout=0)  # a fresh worker takes the job back and does it
    wait_until(lambda: lab.queue.get(job_id).status == "done", message="w2 to do the job")
    assert lab.queue.get(job_id).attempts == 2


@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_check_this_run_after_a_timeout_names_the_timeout_and_nothing_else(target, tmp_path):
    from leaselab import ManualClock, Queue
    from leaselab.check import check

    path = tmp_path / "timeout.db"
    clock = ManualClock(1000.0)
    with Queue(path, clock=clock) as q:
        job_id = q.enqueue({"seconds": 0})
        first = q.claim("w1", lease=1)
        clock.advance(0.5)
        q.heartbeat(first.id, first.token, lease=1)
        clock.advance(0.6)
        q.time_out(job_id, first.token, "ran past its timeout of 1s")
        clock.advance(q.get(job_id).run_at - clock())
        second = q.claim("w2", lease=1)
        q.complete(second.id, second.token, "ok")
    report = check(path, idle=False, lease=1.0)
    # The specification follows the timeout's backoff (no "claimed before its run_at"); the attempt given
    # up is named, since a handler that ran past its timeout may hang.
    assert [a.kind for a in report.anomalies] == ["timed_out"], report.render()


# -- a lab that remembers ----------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "ru"])
@pytest.mark.parametrize("target", ["sqlite"], indirect=True)
def test_the_lab_keeps_a_log_of_its_last_eight_actions_oldest_first_with_the_newest_marked(make_lab, lang):
    lab = make_lab(lang=lang)
    lab.spawn_button.click()
    lab.row("w1").buttons["pause"].click()
    lab.row("w1").buttons["resume"].click()
    for n in range(1, 7):
        lab.n_input.value = n
        lab.enqueue_button.click()
    lab._callback(lab.pause, "nobody")()  # a wrong click is an action the log keeps too, in red
    assert len(lab.said) == SAID_KEPT == 8
    # The spawn and the pause have fallen off the front; the rest are in the order they were taken.
    assert [s.text for s in lab.said[:-1]] == [t("resumed", lang, name="w1")] + [
        t("enqueued", lang, n=n) for n in range(1, 7)
    ]
    assert lab.said[-1].error and "nobody" in lab.said[-1].text
    assert not any(s.error for s in lab.said[:-1])
    shown = html.unescape(lab.message.value)
    assert t("spawned", lang, name="w1") not in shown and t("paused_msg", lang, name="w1") not in shown
    positions = [shown.index(s.text) for s in lab.said]
    assert positions == sorted(positions)
    # Only the newest line carries the mark a reader's eye (and a browser test) goes to.
    assert lab.message.value.count("leaselab-message") == 1
    newest = lab.message.value.split("leaselab-message", 1)[1]
    assert html.unescape(newest).split(">", 1)[1].startswith(lab.said[-1].text)
    assert "#c62828" in newest.split("</span>", 1)[0]


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_a_zombies_badge_names_the_job_it_still_believes_it_holds(make_lab, lang):
    lab = make_lab(lang=lang, lease=1.0)
    job_id = lab.enqueue(1, seconds=30)[0]
    lab.spawn_button.click()
    wait_until(lambda: lab.queue.get(job_id).worker == "w1", message="w1 to claim")
    lab.row("w1").buttons["pause"].click()
    wait_until(lambda: badge(lab, "w1") == "lease_expired", message="w1 to be paused past its lease")
    assert "leaselab-believed" not in lab.row("w1").cells.value  # its job is still its own
    lab.reap_button.click()
    assert badge(lab, "w1") == "zombie"
    cells = lab.row("w1").cells.value
    believed = cells.split('class="leaselab-believed"', 1)[1].split("</span>", 1)[0]
    assert html.unescape(believed).endswith(">" + t("believed_jobs", lang, n=1, jobs=job_id))
    assert html.unescape(believed).startswith(f' title="{t("believed_title", lang, n=1, jobs=job_id)}"')
    # The job column no longer says "-": the job it lost, struck out.
    assert f"<s>{job_id}</s>" in cells
    lab.row("w1").buttons["resume"].click()  # thawed, it learns the job is gone: no zombie, no belief
    wait_until(lambda: badge(lab, "w1") != "zombie", message="w1 to thaw")
    assert "leaselab-believed" not in lab.row("w1").cells.value


def test_a_worker_cut_off_with_two_jobs_believes_only_in_the_one_taken_from_it():
    cut = WorkerStatus(
        name="w1",
        pid=1,
        state="running",
        job_id=4,
        lease_left=-1.0,
        lease=1.0,
        paused_for=None,
        paused_job=None,
        returncode=None,
        handler="h",
        log_path="w1.log",
        jobs=(4,),
        concurrency=2,
        partitioned_for=3.0,
        partitioned_jobs=(3, 4),
    )
    assert cut.badge == "zombie" and cut.believed_jobs == (3,)
    assert t("believed_jobs", "ru", n=2, jobs="3, 5") == "задачи 3, 5"
    assert t("believed_title", "ru", n=1, jobs="3") == "задача 3 для него всё ещё своя"
    healed = replace(cut, partitioned_for=None, partitioned_jobs=())
    assert healed.believed_jobs == ()


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_a_worker_killed_by_the_lab_has_a_log_that_ends_saying_so(make_lab, lang):
    lab = make_lab(lang=lang)
    lab.spawn_button.click()
    lab.row("w1").buttons["kill"].click()
    last = log_of(lab.fleet, "w1").rstrip("\n").splitlines()[-1]
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3} w1: " + re.escape(t("killed_log", lang)), last), last
    lab.refresh()
    assert html.unescape(lab.log.value).rstrip().removesuffix("</pre>").endswith(t("killed_log", lang))


def test_a_worker_that_crashed_by_itself_has_no_line_saying_the_lab_killed_it(make_lab):
    lab = make_lab()
    lab.enqueue(1, kind="crash")
    lab.spawn_button.click()
    wait_until(lambda: badge(lab, "w1") == "killed", message="w1 to crash on its job")
    assert t("killed_log", "en") not in log_of(lab.fleet, "w1")
