"""Periodic jobs: the pure decision of which ticks are due (``leaselab.periodic.due``), each missed-tick policy,
and ``Queue.run_schedule`` on every backend, each tick enqueued once, even after its job finished."""

from __future__ import annotations

import json

import pytest

from leaselab import ManualClock, Queue
from leaselab.backends.contract import NewJob
from leaselab.errors import InvalidSchedule
from leaselab.periodic import MAX_CATCH_UP, Due, Schedule, due, load_schedules, next_tick, tick_key, tick_of
from tests.support.servers import IN_PROCESS_BACKENDS

# Run on every backend: SQLite, PostgreSQL, APSW and the minimal one (the required contract alone).
TARGETS = IN_PROCESS_BACKENDS

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a whole hour: ManualClock's start


def hourly(catch_up: str = "latest") -> Schedule:
    return Schedule("digest", every=3600, payload={"kind": "digest"}, catch_up=catch_up)


# -- the pure decision -----------------------------------------------------------------------


def test_a_schedule_never_run_starts_now_and_enqueues_nothing_yet():
    assert due(hourly(), None, T0 + 10) == Due([], T0 + 10)


def test_before_the_next_tick_nothing_is_due():
    assert due(hourly(), T0, T0 + 3599.9) == Due([], None)


def test_a_tick_is_due_from_its_own_time_on():
    assert due(hourly(), T0, T0 + 3600) == Due([T0 + 3600], T0 + 3600)
    assert due(hourly(), T0 + 10, T0 + 3700) == Due([T0 + 3600], T0 + 3600)


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [
        ("latest", Due([T0 + 3 * 3600], T0 + 3 * 3600)),
        ("all", Due([T0 + 3600, T0 + 2 * 3600, T0 + 3 * 3600], T0 + 3 * 3600)),
        ("none", Due([], T0 + 3 * 3600)),
    ],
)
def test_ticks_missed_in_downtime_follow_the_catch_up_policy(catch_up, expected):
    assert due(hourly(catch_up), T0, T0 + 3 * 3600 + 5) == expected


def test_catch_up_none_still_enqueues_a_late_tick_when_no_tick_before_it_was_missed():
    assert due(hourly("none"), T0, T0 + 3600 + 1800) == Due([T0 + 3600], T0 + 3600)


def test_catch_up_all_enqueues_at_most_a_bounded_number_per_call_and_the_rest_next():
    s = Schedule("often", every=1, catch_up="all")
    first = due(s, T0, T0 + 5000)
    assert len(first.ticks) == MAX_CATCH_UP and first.advance_to == T0 + MAX_CATCH_UP
    assert due(s, first.advance_to, T0 + 5000).ticks[0] == T0 + MAX_CATCH_UP + 1


@pytest.mark.parametrize("schedule", [Schedule("often", every=1), Schedule("minutely", cron="* * * * *")])
def test_after_a_long_downtime_latest_is_the_newest_tick_found_without_walking_every_missed_one(schedule):
    month = 30 * 86400
    assert due(schedule, T0, T0 + month + 0.5) == Due([T0 + month], T0 + month)
    assert due(schedule, T0, T0 + month) == Due([T0 + month], T0 + month)  # now itself a tick
    none = Schedule(schedule.name, every=schedule.every, cron=schedule.cron, catch_up="none")
    assert due(none, T0, T0 + month + 0.5) == Due([], T0 + month)


def test_every_ticks_are_aligned_on_start_so_every_scheduler_agrees():
    s = Schedule("offset", every=60, start=T0 + 15)
    assert next(s.ticks_after(T0 + 100)) == T0 + 135
    assert next_tick(s, None, T0 + 100) == T0 + 135
    assert next_tick(s, T0 + 135, T0 + 100) == T0 + 195


def test_a_cron_schedule_ticks_at_its_times_in_utc():
    s = Schedule("five", cron="*/5 * * * *")
    ticks = s.ticks_after(T0 + 1)
    assert [next(ticks) for _ in range(3)] == [T0 + 300, T0 + 600, T0 + 900]
    assert due(s, T0, T0 + 700) == Due([T0 + 600], T0 + 600)


def test_a_ticks_key_is_the_schedules_name_and_the_utc_time():
    assert tick_key("digest", T0 + 3600) == "digest@2026-01-01T01:00:00Z"
    assert tick_key("fast", T0 + 0.25) == "fast@2026-01-01T00:00:00.250000Z"
    assert tick_of("digest@2026-01-01T01:00:00Z") == ("digest", T0 + 3600)
    assert tick_of(tick_key("fast", T0 + 0.25)) == ("fast", T0 + 0.25)
    assert tick_of("invoice-42") is None and tick_of(None) is None and tick_of("x@2026-01-01") is None


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"name": "x"}, "exactly one of every= or cron="),
        ({"name": "x", "every": 1, "cron": "* * * * *"}, "exactly one of every= or cron="),
        ({"name": "x", "cron": "every tuesday"}, "not a cron expression"),
        ({"name": "x", "every": 5, "catch_up": "some"}, "catch_up must be one of latest, all, none"),
        ({"name": "has space", "every": 5}, "name must be"),
        ({"name": "a@b", "every": 5}, "name must be"),
    ],
)
def test_a_malformed_schedule_is_refused_with_what_is_wrong(arguments, says):
    with pytest.raises(InvalidSchedule, match=says):
        Schedule(**arguments)


def test_a_period_that_is_not_a_positive_number_is_refused():
    with pytest.raises(ValueError, match="every must be > 0"):
        Schedule("x", every=0)
    with pytest.raises(TypeError, match="every must be a number"):
        Schedule("x", every="5")


# -- on every backend ------------------------------------------------------------------------


def test_each_tick_is_enqueued_once_with_its_key_and_never_again_after_its_job_finished(target):
    clock = ManualClock(T0 + 10)
    s = hourly()
    with Queue(target, clock=clock) as q:
        assert q.run_schedule(s) == []  # first seen: starts now
        clock.advance(3600)
        (made,) = q.run_schedule(s)
        job = q.get(made)
        assert (job.key, job.payload, job.queue, job.run_at) == (
            "digest@2026-01-01T01:00:00Z",
            {"kind": "digest"},
            "default",
            T0 + 3600,
        )
        assert q.run_schedule(s) == []
        claimed = q.claim("w")
        assert claimed is not None
        q.complete(claimed.id, claimed.token)
        assert q.run_schedule(s) == []  # the job is done and its key free, but the tick was handled
        clock.advance(3600)
        assert len(q.run_schedule(s)) == 1
        assert [j.key for j in q.jobs()] == ["digest@2026-01-01T01:00:00Z", "digest@2026-01-01T02:00:00Z"]


def test_a_scheduler_that_read_a_stale_last_tick_writes_nothing(target):
    clock = ManualClock(T0 + 10)
    s = hourly()
    with Queue(target, clock=clock) as q:
        q.run_schedule(s)
        stale = q.backend.schedule_last("digest")
        clock.advance(3600)
        assert len(q.run_schedule(s)) == 1
        late = NewJob("{}", 0, T0 + 3600, 5, None, None, "default", tick_key("digest", T0 + 3600))
        assert q.backend.advance_schedule("digest", stale, T0 + 3600, [late], clock(), durable=True) is None
        assert q.backend.advance_schedule("digest", None, T0, [late], clock(), durable=True) is None  # row exists
        assert len(q.jobs()) == 1 and q.backend.schedule_last("digest") == T0 + 3600


@pytest.mark.parametrize(
    ("catch_up", "keys"),
    [
        ("latest", ["digest@2026-01-01T04:00:00Z"]),
        ("all", [f"digest@2026-01-01T0{h}:00:00Z" for h in (2, 3, 4)]),
        ("none", []),
    ],
)
def test_after_downtime_the_missed_ticks_are_handled_as_the_policy_says(target, catch_up, keys):
    clock = ManualClock(T0 + 10)
    s = hourly(catch_up)
    with Queue(target, clock=clock) as q:
        q.run_schedule(s)
        clock.advance(3600)
        q.run_schedule(s)  # 01:00, on time
        clock.advance(3 * 3600 + 60)  # down from 01:00:10 to 04:01:10: 02:00, 03:00 and 04:00 missed
        q.run_schedule(s)
        assert [j.key for j in q.jobs()] == ["digest@2026-01-01T01:00:00Z", *keys]
        clock.advance(3600)  # and the next tick is on time again, whatever the policy
        q.run_schedule(s)
        assert q.jobs()[-1].key == "digest@2026-01-01T05:00:00Z"


def test_schedules_are_kept_apart_by_name_and_go_to_their_queue(target):
    clock = ManualClock(T0)
    a = Schedule("a", every=60, payload="a", queue="reports")
    b = Schedule("b", every=120, payload="b")
    with Queue(target, clock=clock) as q:
        q.run_schedule(a), q.run_schedule(b)
        clock.advance(120)
        q.run_schedule(a), q.run_schedule(b)
        assert sorted((j.key, j.queue) for j in q.jobs()) == [
            ("a@2026-01-01T00:02:00Z", "reports"),
            ("b@2026-01-01T00:02:00Z", "default"),
        ]


# -- schedule files ----------------------------------------------------------------------------


def test_a_schedule_file_gives_its_schedules(tmp_path):
    path = tmp_path / "schedules.json"
    path.write_text(
        json.dumps(
            [
                {"name": "digest", "every": 3600, "payload": {"k": 1}},
                {"name": "five", "cron": "*/5 * * * *", "catch_up": "all", "queue": "q"},
            ]
        )
    )
    assert load_schedules(str(path)) == [
        Schedule("digest", every=3600, payload={"k": 1}),
        Schedule("five", cron="*/5 * * * *", catch_up="all", queue="q"),
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not JSON"),
        ("[]", "non-empty JSON list"),
        ('[{"name": "x", "evry": 5}]', "entry 1 must be an object with only .* \\(unknown: evry\\)"),
        ('[{"name": "x", "every": -1}]', "entry 1: every must be > 0"),
        ('[{"name": "x", "every": 5}, {"name": "x", "every": 6}]', "share a name"),
    ],
)
def test_a_bad_schedule_file_is_refused_naming_the_file_and_entry(tmp_path, text, says):
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(InvalidSchedule, match=says):
        load_schedules(str(path))


def test_run_schedule_refuses_what_is_not_a_schedule(db_path):
    with Queue(db_path) as q, pytest.raises(TypeError, match="leaselab.periodic.Schedule"):
        q.run_schedule({"name": "digest", "every": 60})
