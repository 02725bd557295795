"""The fast path of `leaselab check`: the common histories judged inside the database say exactly what every rule
in Python says (``--thorough``), on every anomaly the checker knows and on healthy jobs beside them.

Each planted case of ``tests/test_check.py`` (its bad history and its good one), with a few healthy jobs of
every common shape added, is written into a real SQLite file and a real PostgreSQL database, and checked
both ways: the reports must be the same, word for word, and the healthy jobs must have been counted by the
database, not read (else the comparison would prove nothing). No timings: bench/check_scale.py measures.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from leaselab import ManualClock, Queue
from leaselab.check import check
from leaselab.check.history import snapshot
from leaselab.cli import main
from leaselab.errors import LeaseLost
from tests.test_check import CASES, T0, Build

# The tables as the checker reads them, without the queue's triggers and CHECKs: a planted anomaly
# is a row the real schema would refuse. Only the key's type differs (a SQLite rowid, a server bigint).
TABLES = (
    """CREATE TABLE jobs (id {key}, payload text NOT NULL, status text NOT NULL, priority bigint NOT NULL,
       run_at float8 NOT NULL, attempts bigint NOT NULL, max_attempts bigint NOT NULL, lease_until float8,
       worker text, token text, result text, last_error text, created_at float8 NOT NULL,
       updated_at float8 NOT NULL, last_event_id bigint)""",
    """CREATE TABLE events (id {key}, job_id bigint NOT NULL, kind text NOT NULL, at float8 NOT NULL,
       worker text, token text, attempt bigint NOT NULL, detail text, prev bigint)""",
)
JOB_COLUMNS = (
    "id, payload, status, priority, run_at, attempts, max_attempts, lease_until, worker, token, result, "
    "last_error, created_at, updated_at, last_event_id"
)
EVENT_COLUMNS = "id, job_id, kind, at, worker, token, attempt, detail, prev"
HEALTHY = tuple(range(101, 109))


@pytest.fixture(params=["sqlite", "postgresql"])
def place(request, tmp_path) -> str:
    """An empty SQLite file's path, or an empty PostgreSQL database's URL."""
    return str(tmp_path / "h.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")


def write(place: str, b: Build) -> None:
    """``b``'s rows and events into ``place``, replacing what it held, as another program would write them."""
    jobs = [
        tuple(json.dumps(r[c]) if c == "payload" else r[c] for c in JOB_COLUMNS.split(", "))
        for _, r in sorted(b.rows.items())
    ]
    events = [tuple(e[c] for c in EVENT_COLUMNS.split(", ")) for e in b.events]
    if place.startswith("postgresql"):
        import psycopg

        with psycopg.connect(place) as conn:
            conn.execute("DROP TABLE IF EXISTS jobs, events")
            for ddl in TABLES:
                conn.execute(ddl.format(key="bigint PRIMARY KEY"))
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES ({', '.join(['%s'] * 15)})", jobs)
                cur.executemany(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES ({', '.join(['%s'] * 9)})", events)
        return
    conn = sqlite3.connect(place)
    with conn:
        conn.execute("DROP TABLE IF EXISTS jobs")
        conn.execute("DROP TABLE IF EXISTS events")
        for ddl in TABLES:
            conn.execute(ddl.format(key="INTEGER PRIMARY KEY"))
        conn.executemany(f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES ({', '.join(['?'] * 15)})", jobs)
        conn.executemany(f"INSERT INTO events ({EVENT_COLUMNS}) VALUES ({', '.join(['?'] * 9)})", events)
    conn.close()


def healthy(b: Build) -> Build:
    """Beside whatever ``b`` holds, a job of every common shape, each as a working queue leaves it."""
    t = T0 - 1000  # retries a hundred seconds apart: past any backoff the specification judges
    b.enqueue(101, at=t, run_at=b.now + 60)  # waiting for its time
    b.enqueue(102, at=t).claim(102, "f" * 32, t + 1).complete(102, "f" * 32, t + 2)
    b.enqueue(103, at=t).claim(103, "g" * 32, t + 1).beat(103, "g" * 32, t + 2).beat(103, "g" * 32, t + 3)
    b.complete(103, "g" * 32, t + 4)
    b.enqueue(104, at=t).claim(104, "h" * 32, t + 1).fail(104, "h" * 32, t + 2)
    b.claim(104, "i" * 32, t + 100, worker="w2").complete(104, "i" * 32, t + 101)
    b.enqueue(105, at=t, max_attempts=2).claim(105, "j" * 32, t + 1).fail(105, "j" * 32, t + 2)
    b.claim(105, "k" * 32, t + 100).beat(105, "k" * 32, t + 101).fail(105, "k" * 32, t + 102)  # dead
    b.enqueue(106, at=t).claim(106, "l" * 32, t + 1).fail(106, "l" * 32, b.now - 0.5)  # after every other claim
    b.rows[106]["run_at"] = b.now + 0.5  # between attempts, its retry (a backoff of 1 s) not due yet
    b.enqueue(107, at=t).claim(107, "m" * 32, t + 1).fail(107, "m" * 32, t + 2).claim(107, "n" * 32, t + 100)
    b.fail(107, "n" * 32, t + 101).claim(107, "o" * 32, t + 200).complete(107, "o" * 32, t + 201)
    b.enqueue(108, at=t + 400)  # due: with idle workers, stuck (then read, not counted)
    return b


def both(place: str, b: Build, options: dict) -> tuple:
    """The report of the fast path and of the thorough walk, and what the database counted and left to read
    (None where the fast path is not taken: with effects, or a handler that records every run)."""
    effects = {"effects": list(b.effects)} if b.effects else {}
    fast = check(place, now=b.now, **effects, **options, **b.judged())
    thorough = check(place, now=b.now, **effects, **options, **b.judged(), thorough=True)
    if b.effects or options.get("runs_recorded"):
        return fast, thorough, None  # every job is read: the effects are judged beside each job's events
    with snapshot(place, now=b.now) as view:
        plain = view.plain(options.get("idle", True))
    assert plain is not None
    return fast, thorough, plain


def same(fast, thorough) -> None:
    assert fast.to_json() == thorough.to_json()
    assert fast.render() == thorough.render() and fast.render("ru", shown=None) == thorough.render("ru", shown=None)


@pytest.mark.parametrize("side", ["bad", "good"])
def test_every_planted_anomaly_and_its_clean_twin_get_the_same_report_from_the_fast_path_as_from_every_rule(
    place, side
):
    for case, (bad, good, options, kind, job) in CASES.items():
        b = Build()
        (bad if side == "bad" else good)(b)
        healthy(b)
        write(place, b)
        fast, thorough, plain = both(place, b, options)
        same(fast, thorough)
        if side == "bad" and not (kind == "specification" and place.startswith("postgresql")):  # ids unordered
            assert any(a.kind == kind and a.job == job for a in fast.anomalies), case
        if plain is None:
            continue
        # The healthy jobs were counted by the database, not read (but the one due with idle workers).
        counted = set(HEALTHY) - set(plain.rest)
        idle = options.get("idle", True)
        assert counted == set(HEALTHY) - ({108} if idle else set()), case
        # And every job some rule of the walk names was read: the database counted none of them.
        named = {a.job for a in thorough.anomalies if not a.what.startswith(("spec.", "journal."))}
        assert not named & counted, case


def mutants() -> dict:
    """Healthy histories, each changed in one small way the shapes' SQL looks at: each must be read, and judged
    as every rule judges it."""

    def done(b: Build, job: int = 1) -> Build:
        return b.enqueue(job).claim(job, "c" * 32, T0 + 1).beat(job, "c" * 32, T0 + 2).complete(job, "c" * 32, T0 + 3)

    def ev(b: Build, kind: str) -> dict:
        return next(e for e in b.events if e["kind"] == kind)

    def extra(b: Build, kind: str, at: float, token: str | None = None) -> None:
        """One more event of job 1 as a trigger would link it, its row otherwise untouched."""
        row = b.rows[1]
        e = {"id": len(b.events) + 1, "job_id": 1, "kind": kind, "at": at, "worker": row["worker"], "token": token,
             "attempt": row["attempts"], "detail": None, "prev": row["last_event_id"]}  # fmt: skip
        b.events.append(e)
        row["last_event_id"] = e["id"]

    def interleaved(b: Build, other: str = "d" * 32) -> Build:
        """Jobs 1 and 2 written turn about (job 2 under the token ``other``): job 1's events are 1, 3, 5, 7 and
        job 2's 2, 4, 6, 8."""
        b.enqueue(1).enqueue(2).claim(1, "c" * 32, T0 + 1).claim(2, other, T0 + 1)
        b.beat(1, "c" * 32, T0 + 2).beat(2, other, T0 + 2)
        return b.complete(1, "c" * 32, T0 + 3).complete(2, other, T0 + 3)

    return {
        "row token forged": lambda b: (done(b), b.rows[1].update(token="forged")),
        "row worker changed": lambda b: (done(b), b.rows[1].update(worker="w9")),
        "row attempts off by one": lambda b: (done(b), b.rows[1].update(attempts=2)),
        "row status running": lambda b: (done(b), b.rows[1].update(status="running", lease_until=T0 + 4)),
        "row max_attempts below the attempts": lambda b: (done(b), b.rows[1].update(max_attempts=0)),
        "heartbeat by another token": lambda b: (done(b), ev(b, "heartbeat").update(token="x" * 32)),
        "heartbeat by another worker": lambda b: (done(b), ev(b, "heartbeat").update(worker="w7")),
        "completion of another attempt": lambda b: (done(b), ev(b, "completed").update(attempt=2)),
        "claim numbered 2 first": lambda b: (done(b), ev(b, "claimed").update(attempt=2)),
        "claim without a token": lambda b: (done(b), ev(b, "claimed").update(token=None)),
        "enqueue of attempt 1": lambda b: (done(b), ev(b, "enqueued").update(attempt=1)),
        "enqueue with a token": lambda b: (done(b), ev(b, "enqueued").update(token="t" * 32)),
        "time going back": lambda b: (done(b), ev(b, "completed").update(at=T0)),
        "a link skipping an event": lambda b: (done(b), ev(b, "completed").update(prev=ev(b, "claimed")["id"])),
        "a link to another job's event": lambda b: (
            done(b),
            done(b, 2),
            ev(b, "completed").update(prev=[e for e in b.events if e["kind"] == "heartbeat"][1]["id"]),
        ),
        "two links crossed to another job's claim of the same token, their sum kept": lambda b: (
            interleaved(b, "c" * 32),
            b.events[4].update(prev=4),  # job 1's heartbeat (5) now follows job 2's claim (4), not its own (3)
            b.events[6].update(prev=4),  # and its completion (7) too, not its heartbeat (5): 4 + 4 = 3 + 5
        ),
        "interleaved and untouched, with job 3 forged beside them": lambda b: (
            interleaved(b),
            b.enqueue(3).rows[3].update(token="forged"),
        ),
        "a second root": lambda b: (done(b), ev(b, "heartbeat").update(prev=None)),
        "last_event_id short of the last event": lambda b: (done(b), b.rows[1].update(last_event_id=3)),
        "a row with no events": lambda b: (
            done(b),
            b.rows.__setitem__(3, {**b.rows[1], "id": 3, "last_event_id": None}),
        ),
        "a row whose last event is another job's": lambda b: (
            done(b),
            b.rows.__setitem__(3, {**b.rows[1], "id": 3}),
        ),
        "events whose row is gone": lambda b: (done(b), b.rows.pop(1)),
        "a second enqueue": lambda b: (done(b), extra(b, "enqueued", T0 + 5)),
        "a claim after completion": lambda b: (done(b), b.claim(1, "d" * 32, T0 + 5)),
        "a death after a completion": lambda b: (done(b), extra(b, "dead", T0 + 5, "c" * 32)),
        "dead twice": lambda b: (
            b.enqueue(1, max_attempts=1).claim(1, "c" * 32, T0 + 1).fail(1, "c" * 32, T0 + 2),
            extra(b, "dead", T0 + 3, "c" * 32),
        ),
        "failed, its attempts spent, with no death": lambda b: (
            b.enqueue(1, max_attempts=1).claim(1, "c" * 32, T0 + 1).fail(1, "c" * 32, T0 + 2),
            b.events.pop(),
            b.rows[1].update(last_event_id=b.events[-1]["id"]),
        ),
        "a refused write": lambda b: (done(b), b.refuse(1, "c" * 32, T0 + 4)),
        "a reap": lambda b: (
            b.enqueue(1).claim(1, "c" * 32, T0 + 1).reap(1, T0 + 7).claim(1, "d" * 32, T0 + 8),
            b.complete(1, "d" * 32, T0 + 9),
        ),
        "a timeout": lambda b: (
            b.enqueue(1).claim(1, "c" * 32, T0 + 1).time_out(1, "c" * 32, T0 + 7).claim(1, "d" * 32, T0 + 8),
            b.complete(1, "d" * 32, T0 + 9),
        ),
    }


MUTANTS = mutants()


def test_a_healthy_history_changed_in_any_way_the_shapes_look_at_is_read_and_judged_as_every_rule_judges_it(place):
    for name, mutate in MUTANTS.items():
        for idle in (True, False):
            b = Build()
            mutate(b)
            healthy(b)
            write(place, b)
            fast, thorough, plain = both(place, b, {"idle": idle})
            same(fast, thorough)
            read = set(plain.rest)
            assert read & {1, 2, 3}, name  # the changed job was read, not counted
            assert set(HEALTHY) - read == set(HEALTHY) - ({108} if idle else set()), name


def test_the_unchanged_history_the_mutants_start_from_is_counted_by_the_database_and_clean(place):
    b = Build()
    b.enqueue(1).claim(1, "c" * 32, T0 + 1).beat(1, "c" * 32, T0 + 2).complete(1, "c" * 32, T0 + 3)
    write(place, healthy(b))
    fast, thorough, plain = both(place, b, {"idle": False})
    same(fast, thorough)
    assert fast.clean and plain.rest == []
    assert sum(c.jobs for c in plain.counts.values()) == fast.counts["jobs"] == 9
    assert {s: c.jobs for s, c in plain.counts.items()} == {"pending": 3, "done": 5, "dead": 1}


def test_a_real_run_with_retries_a_reap_and_a_refused_zombie_gets_the_same_report_both_ways(target):
    clock = ManualClock()
    with Queue(target, clock=clock) as q:
        ids = q.enqueue_many(list(range(30)), max_attempts=2)
        q.enqueue("later", delay=3600)
        for n in range(20):
            job = q.claim(f"w{n % 3}", 30)
            assert job is not None
            q.heartbeat(job.id, job.token, 30)
            if n % 4 == 0:
                q.fail(job.id, job.token, "boom")
            else:
                q.complete(job.id, job.token, None)
        zombie = q.claim("w9", 30)
        clock.advance(31)
        q.reap()
        q.claim("w8", 30)
        with pytest.raises(LeaseLost):  # the refusal is the point: it writes lease_lost
            q.complete(zombie.id, zombie.token, None)
    for idle in (True, False):
        fast = check(target, now=clock(), idle=idle, lease=30)
        thorough = check(target, now=clock(), idle=idle, lease=30, thorough=True)
        same(fast, thorough)
        with snapshot(target, now=clock()) as view:
            plain = view.plain(idle)
        assert plain is not None and zombie.id in plain.rest
        assert sum(c.jobs for c in plain.counts.values()) >= 15  # most jobs never reached Python
    assert len(ids) == 30


def test_check_thorough_prints_the_report_the_default_prints(capsys, tmp_path):
    b = Build()
    b.enqueue(1).claim(1, "c" * 32, T0 + 1).complete(1, "c" * 32, T0 + 2)
    b.rows[1]["token"] = "forged"
    db = str(tmp_path / "h.db")
    write(db, healthy(b))
    outs = []
    for extra in ([], ["--thorough"]):
        code = main(["check", "--db", db, "--json", *extra])
        outs.append((code, json.loads(capsys.readouterr().out)))
    assert outs[0] == outs[1] and outs[0][0] == 1
    assert {a["what"] for a in outs[0][1]["anomalies"]} >= {"disagree.field"}


def test_thorough_must_be_a_bool(tmp_path):
    db = tmp_path / "q.db"
    Queue(db).close()
    with pytest.raises(TypeError, match="thorough"):
        check(db, thorough="yes")  # type: ignore[arg-type]
