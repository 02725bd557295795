"""The timeline on a recorded history: lanes per worker, a bar per attempt, faults shaded, reaps and refused writes
marked."""

from __future__ import annotations

import json
from dataclasses import asdict

import matplotlib
import pytest

from leaselab import LeaseLost, ManualClock, Queue
from leaselab.check.report import KINDS, Anomaly, Report
from leaselab.check.texts import TITLES
from leaselab.harness.fleet import Action, faults_path
from leaselab.lab.timeline import ANOMALY_COLOUR, Bar, Fault, Mark, Timeline, draw, load, timeline_data
from tests.support.servers import IN_PROCESS_BACKENDS

matplotlib.use("Agg")

# The timeline is drawn from the events a queue recorded: on every backend, APSW too.
TARGETS = IN_PROCESS_BACKENDS


@pytest.fixture
def history(target, clock):
    """A zombie story on a manual clock: w1 claims job 1 and freezes; w2 works on; w1's lease is
    reaped; w1 wakes, and its late complete is refused. Returns (target, queue, t0, actions)."""
    q = Queue(target, clock=clock)
    t0 = clock()
    q.enqueue_many([{"n": 1}, {"n": 2}, {"n": 3}])
    a = q.claim("w1", lease=5)  # t0: job 1 to w1
    b = q.claim("w2", lease=5)  # t0: job 2 to w2
    clock.advance(1)
    q.complete(b.id, b.token, "ok")  # t0+1: job 2 done
    c = q.claim("w2", lease=5)  # t0+1: job 3 to w2
    clock.advance(2)
    q.fail(c.id, c.token, "boom")  # t0+3: job 3 failed, back to pending
    clock.advance(7)
    assert q.reap() == [a.id]  # t0+10: w1's lease reaped
    clock.advance(2)
    with pytest.raises(LeaseLost):
        q.complete(a.id, a.token, "late")  # t0+12: the zombie's write is refused
    actions = [Action(t0 + 0.5, "w1", "pause", 111), Action(t0 + 11.5, "w1", "resume", 111)]
    yield target, q, t0, actions
    q.close()


def test_each_worker_gets_a_lane_and_each_attempt_a_bar_ending_in_its_outcome(history):
    _, q, t0, actions = history
    data = timeline_data(q.events(), actions)
    assert data.lanes == ["w1", "w2"]
    assert [(b.worker, b.job_id, b.start - t0, b.end - t0, b.outcome) for b in data.bars] == [
        ("w1", 1, 0.0, 12.0, "lease_lost"),  # the zombie worked on until its write was refused
        ("w2", 2, 0.0, 1.0, "completed"),
        ("w2", 3, 1.0, 3.0, "failed"),
    ]


def test_reaps_and_refused_zombie_writes_are_marked_on_the_holders_lane(history):
    _, q, t0, actions = history
    marks = timeline_data(q.events(), actions).marks
    assert [(m.worker, m.kind, m.at - t0, m.job_id) for m in marks] == [
        ("w1", "reaped", 10.0, 1),
        ("w1", "lease_lost", 12.0, 1),
    ]


def test_the_fleets_pause_is_shaded_as_a_fault_interval(history):
    _, q, t0, actions = history
    faults = timeline_data(q.events(), actions).faults
    assert [(f.worker, f.kind, f.start - t0, f.end - t0) for f in faults] == [("w1", "pause", 0.5, 11.5)]


def test_without_a_fleet_record_the_silence_before_a_reap_is_shaded(history):
    _, q, t0, _ = history
    faults = timeline_data(q.events()).faults
    assert [(f.worker, f.kind, f.start - t0, f.end - t0) for f in faults] == [("w1", "silent", 0.0, 10.0)]


# Where a fleet can run (a file, or a server: its record goes to the current folder); a fleet's
# workers are other processes, which cannot open the APSW backend's in-process disk.
@pytest.mark.parametrize("target", ["sqlite", "postgresql"], indirect=True)
def test_a_file_alone_gives_the_same_timeline_with_the_fault_record_beside_it(history, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, q, t0, actions = history
    with open(faults_path(path), "w") as fh:
        for a in actions:
            fh.write(json.dumps(asdict(a)) + "\n")
        fh.write('{"at": 1, "worker": "w1", "act')  # a kernel killed mid-line must not break the plot
    data = load(path)
    assert data.lanes == ["w1", "w2"]
    assert [f.kind for f in data.faults] == ["pause"]
    assert len(data.bars) == 3 and len(data.marks) == 2


def test_a_killed_holders_attempt_ends_at_the_kill_and_the_down_time_is_shaded(target):
    clock = ManualClock(100.0)
    with Queue(target, clock=clock) as q:
        q.enqueue({"n": 1})
        job = q.claim("w1", lease=5)
        clock.advance(8)
        q.reap()
        events = q.events()
    actions = [Action(102.0, "w1", "kill", 1), Action(104.0, "w1", "spawn", 2)]
    data = timeline_data(events, actions)
    assert data.bars == [Bar("w1", job.id, 1, 100.0, 102.0, "reaped")]
    assert data.faults == [Fault("w1", "kill", 102.0, 104.0)]
    assert data.marks == [Mark("w1", 108.0, "reaped", job.id)]


def test_an_attempt_still_running_reaches_now(target):
    with Queue(target, clock=ManualClock(100.0)) as q:
        q.enqueue({"n": 1})
        q.claim("w1", lease=5)
        assert timeline_data(q.events(), now=103.0).bars[0].end == 103.0


def test_the_picture_has_a_lane_per_worker_and_a_legend_for_what_it_shows(history):
    _, q, _, actions = history
    fig = draw(timeline_data(q.events(), actions))
    ax = fig.axes[0]
    assert [label.get_text() for label in ax.get_yticklabels()] == ["w1", "w2"]
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == [
        "attempt completed",
        "attempt failed",
        "attempt until its refused write",
        "paused (SIGSTOP)",
        "reap",
        "refused zombie write",
    ]
    assert len(ax.patches) >= 3 + 1  # three bars and the shaded pause


def test_the_russian_picture_has_russian_labels(history):
    path, _, _, _ = history
    fig = draw(path=path, lang="ru")
    ax = fig.axes[0]
    assert ax.get_title().startswith("Временная шкала")
    assert "отклонённая запись зомби" in [text.get_text() for text in ax.get_legend().get_texts()]


def test_an_empty_queue_draws_an_empty_picture_that_says_so(target):
    Queue(target).close()
    fig = draw(path=target)
    assert "No attempts recorded yet." in [t.get_text() for t in fig.axes[0].texts]


def test_a_cut_network_is_shaded_like_a_pause_from_partition_to_heal(target):
    with Queue(target, clock=ManualClock(100.0)) as q:
        q.enqueue({"n": 1})
        q.claim("w1", lease=5)
        events = q.events()
    actions = [Action(101.0, "w1", "partition", 1), Action(109.0, "w1", "heal", 1), Action(110.0, "w2", "partition", 2)]
    data = timeline_data(events, actions, now=112.0)
    assert Fault("w1", "partition", 101.0, 109.0) in data.faults
    assert Fault("w2", "partition", 110.0, 112.0) in data.faults  # still cut off: shaded up to now


def test_the_numbers_in_the_bars_are_job_and_attempt_as_the_legend_title_says(history):
    _, q, _, actions = history
    data = timeline_data(q.events(), actions)
    for lang, title in (("en", "in a bar: job·attempt"), ("ru", "в полосе: задача·попытка")):
        ax = draw(data, lang=lang).axes[0]
        assert ax.get_legend().get_title().get_text() == title
        inside = sorted(t.get_text() for t in ax.texts)
        assert inside == sorted(f"{b.job_id}·{b.attempt}" for b in data.bars)


def test_an_attempt_given_up_at_its_timeout_or_handed_back_ends_there_and_a_hang_is_shaded(target):
    clock = ManualClock(100.0)
    with Queue(target, clock=clock) as q:
        hung, stopped = q.enqueue({"n": 1}), q.enqueue({"n": 2})
        a = q.claim("w1", lease=5)
        b = q.claim("w2", lease=5)
        clock.advance(3)
        q.time_out(a.id, a.token, "ran past its timeout of 3s")
        clock.advance(1)
        q.release([(b.id, b.token)])
        events = q.events()
    actions = [Action(101.0, "w1", "hang", 1), Action(103.5, "w1", "exit", 1, "code 5")]
    data = timeline_data(events, actions)
    assert Bar("w1", hung, 1, 100.0, 103.0, "timed_out") in data.bars  # not drawn as running on
    assert Bar("w2", stopped, 1, 100.0, 104.0, "released") in data.bars
    assert data.faults == [Fault("w1", "hang", 101.0, 103.5)]
    for lang, words in (("en", ("given up at its timeout", "hung")), ("ru", ("снята по тайм-ауту", "завис"))):
        labels = [t.get_text() for t in draw(data, lang=lang).axes[0].get_legend().get_texts()]
        assert all(any(word in label for label in labels) for word in words), labels


def _flag_labels(ax) -> list:
    return [text for text in ax.texts if text.get_color() == ANOMALY_COLOUR]


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_a_flag_at_the_end_of_the_run_keeps_its_label_off_the_legend(lang):
    # The longest anomaly title, flagged at the last moment of the run, and another at its start.
    longest = max(KINDS, key=lambda kind: len(TITLES[lang][kind]))
    data = Timeline(
        lanes=["w1", "w2"],
        bars=[Bar("w1", 1, 1, 0.0, 4.0, "lease_lost"), Bar("w2", 1, 2, 5.0, 10.0, "completed")]
        + [Bar("w1", 2, 1, 0.0, 0.5, "completed")],
        t0=0.0,
        t1=10.0,
    )
    anomalies = [Anomaly(longest, 1, [], "journal.fence_twice"), Anomaly(longest, 2, [], "journal.fence_twice")]
    fig = draw(data, report=Report(anomalies, counts={}), lang=lang)
    ax = fig.axes[0]
    labels = _flag_labels(ax)
    assert [label.get_text().strip() for label in labels] == [f"{job}: {TITLES[lang][longest]}" for job in (1, 2)]
    for dpi in (100, 90, 150):  # the lab saves at 90, a notebook at 100 or more: each lays the figure out anew
        fig.set_dpi(dpi)
        fig.draw_without_rendering()
        legend, box = ax.get_legend().get_window_extent(), ax.get_window_extent()
        for label in labels:
            extent = label.get_window_extent()
            assert not extent.overlaps(legend), (dpi, label.get_text(), extent, legend)
            assert box.x0 <= extent.x0 and extent.x1 <= box.x1 + 0.5, (dpi, label.get_text(), extent, box)
    # The early flag's label still starts at its flag: only a label that would run out is moved.
    early = next(label for label in labels if label.get_text().strip().startswith("2:"))
    assert early.get_position()[0] == pytest.approx(0.5)


def test_a_schedules_ticks_are_drawn_across_the_lanes_at_their_times(target, clock):
    from leaselab.lab.timeline import TICK_COLOUR, Tick
    from leaselab.periodic import Schedule

    with Queue(target, clock=clock) as q:
        s = Schedule("beat", every=60)
        q.run_schedule(s)
        ticks = []
        for _ in range(3):
            clock.advance(60)
            (made,) = q.run_schedule(s)
            ticks.append(Tick("beat", q.get(made).run_at, made))
            clock.advance(5)
            job = q.claim("w1")
            q.complete(job.id, job.token)
        q.enqueue("not a tick", key="beat@soon")  # a key of the user's own: no tick
        data = load(target)
    assert data.ticks == ticks
    fig = draw(data)
    ax = fig.axes[0]
    drawn = [line.get_xdata()[0] for line in ax.get_lines() if line.get_color() == TICK_COLOUR and line.get_xdata()]
    assert drawn == [tick.at - data.t0 for tick in ticks]
    assert "a periodic schedule's tick (its job due)" in [t.get_text() for t in ax.get_legend().get_texts()]
    ru = draw(data, lang="ru").axes[0]
    assert "тик периодического расписания (срок его задачи)" in [t.get_text() for t in ru.get_legend().get_texts()]
