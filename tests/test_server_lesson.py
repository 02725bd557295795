"""The props of lessons 6 and 7: two claims raced by hand on a server, the exercise's check, a worker whose clock is
off, and the lessons' own servers."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from leaselab import LeaseLost, Queue, Status
from leaselab.harness import skew
from leaselab.lessons import exercises
from tests.support.polling import wait_until

pytest.importorskip("psycopg")

from leaselab.lessons.race import CLAIM, NAIVE_CLAIM, ServerRace, server_race  # after the psycopg check

OUTER_RECHECK = NAIVE_CLAIM.replace(" WHERE id = (", " WHERE status = 'pending' AND id = (")


def _race(url: str, statement: str) -> tuple[int | None, bool, int | None, list]:
    race = ServerRace(url, statement)
    try:
        assert race.isolation() == "read committed"
        a, waited = race.a_claims(), race.b_claims()
        race.a_commits()
        return a, waited, race.b_result(), race.claims()
    finally:
        race.close()


def test_the_articles_claim_raced_by_hand_makes_b_wait_then_take_as_job_again(pg_url):
    assert _race(pg_url, NAIVE_CLAIM) == (1, True, 1, [(1, "A"), (1, "B")])


def test_the_skip_locked_claim_raced_by_hand_gives_b_the_next_job_without_a_wait(pg_url):
    assert "FOR UPDATE SKIP LOCKED" in CLAIM and "SKIP LOCKED" not in NAIVE_CLAIM
    assert _race(pg_url, CLAIM) == (1, False, 2, [(1, "A"), (2, "B")])


def test_rechecking_the_status_in_the_outer_where_leaves_b_empty_handed_after_its_wait(pg_url):
    assert _race(pg_url, OUTER_RECHECK) == (1, True, None, [(1, "A")])
    with Queue(pg_url) as q:
        assert q.get(2).status is Status.PENDING


def test_a_race_needs_an_empty_database_and_leaves_a_used_one_untouched(pg_url):
    with Queue(pg_url) as q:
        q.enqueue("mine")
    with pytest.raises(ValueError, match="empty database"):
        ServerRace(pg_url, CLAIM)
    with Queue(pg_url) as q:
        assert [j.payload for j in q.jobs()] == ["mine"]


def test_an_error_in_bs_statement_reaches_the_caller_of_b_result(pg_url):
    import psycopg

    race = ServerRace(pg_url, "SELECT 1 / 0")
    try:
        with pytest.raises(psycopg.errors.DivisionByZero):
            race.a_claims()
        race.a.rollback()
        assert race.b_claims() is False
        with pytest.raises(psycopg.errors.DivisionByZero):
            race.b_result()
    finally:
        race.close()


BATCH_CLAIM = CLAIM.replace("WHERE id = (", "WHERE id IN (").replace("LIMIT 1", "LIMIT %(n)s")


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_the_batch_claim_exercise_wants_two_jobs_each_for_a_and_b_without_a_wait(pg_server, lang):
    n = time.monotonic_ns()
    right = exercises.check_server_batch_claim(BATCH_CLAIM, pg_server.create_database(f"ok_{lang}_{n}"), lang)
    one = exercises.check_server_batch_claim(CLAIM, pg_server.create_database(f"one_{lang}_{n}"), lang)
    unlocked = exercises.check_server_batch_claim(
        NAIVE_CLAIM.replace("WHERE id = (", "WHERE id IN (").replace("LIMIT 1", "LIMIT %(n)s"),
        pg_server.create_database(f"unlocked_{lang}_{n}"),
        lang,
    )
    equals = exercises.check_server_batch_claim(
        CLAIM.replace("LIMIT 1", "LIMIT %(n)s"), pg_server.create_database(f"eq_{lang}_{n}"), lang
    )
    prefix = {"en": ("Right", "Not yet"), "ru": ("Верно", "Пока нет")}[lang]
    assert right.startswith(prefix[0]) and "[1, 2]" in right and "[3, 4]" in right
    assert one.startswith(prefix[1]) and "[1]" in one and "[2]" in one
    assert unlocked.startswith(prefix[1]) and unlocked.endswith(("waited: yes", "ждал: да"))  # B waited on A's rows
    assert equals.startswith(prefix[1]) and "CardinalityViolation" in equals


def test_the_claim_of_lesson_two_raced_in_autocommit_by_processes_gives_duplicates_and_leaselabs_none(pg_server):
    n = time.monotonic_ns()
    naive = server_race(pg_server.create_database(f"race_naive_{n}"), "naive", workers=4, jobs=200)
    single = server_race(pg_server.create_database(f"race_single_{n}"), "single", workers=4, jobs=200)
    assert naive.duplicates > 0 and naive.claims == naive.jobs + naive.duplicates
    assert single.duplicates == 0 and single.claims == single.jobs == 200


def test_a_skewed_worker_really_reads_a_wrong_clock_so_on_a_file_it_steals_a_live_lease(tmp_path):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        q.enqueue("held")
        held = q.claim("holder", lease=30)
        later = q.enqueue("later")
        p = skew.spawn(str(path), +60, "fast", tmp_path / "fast.log")  # the lesson's own helper is the subject
        try:
            wait_until(
                lambda: q.get(later).status is Status.DONE,
                30,
                message=f"the fast worker to do a job (its log: {tmp_path / 'fast.log'})",
            )
            # A file queue reads each worker's own clock: a minute fast, the live lease looks expired.
            assert q.get(held.id).attempts == 2 or q.get(held.id).status is not Status.RUNNING
            with pytest.raises(LeaseLost):
                q.heartbeat(held.id, held.token, lease=30)
        finally:
            p.terminate()
            p.wait(10)


def test_a_skewed_worker_on_a_server_queue_steals_nothing_and_exits_on_terminate(pg_url, tmp_path):
    with Queue(pg_url) as q:
        q.enqueue("held")
        held = q.claim("holder", lease=30)
        later = q.enqueue("later")
        p = skew.spawn(pg_url, +60, "fast", tmp_path / "fast.log")  # the lesson's own helper is the subject
        try:
            wait_until(
                lambda: q.get(later).status is Status.DONE,
                30,
                message=f"the fast worker to do a job (its log: {tmp_path / 'fast.log'})",
            )
            time.sleep(1.5)  # more reaps, at least one a second
            assert (q.get(held.id).status, q.get(held.id).attempts) == (Status.RUNNING, 1)
            q.heartbeat(held.id, held.token, lease=30)
        finally:
            p.terminate()
            assert p.wait(10) == 0


@pytest.mark.parametrize("bad, error", [("soon", TypeError), (math.nan, ValueError), (True, TypeError)])
def test_a_skew_that_is_not_a_finite_number_is_refused_by_name(tmp_path, bad, error):
    with pytest.raises(error, match="skew"):
        skew.spawn(str(tmp_path / "q.db"), bad, "w", tmp_path / "w.log")
    assert not (tmp_path / "w.log").exists()


# -- lessons 6 and 7 leave nothing behind -----------------------------------------------------


def _setup(notebook: Path) -> str:
    return next(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code")


# The lessons that start a throw-away server of their own in their first cell, found by what that
# cell does rather than listed by name.
SERVER_LESSONS = [
    p
    for p in sorted((Path(__file__).resolve().parents[1] / "notebooks" / "en").glob("[0-9][0-9]-*.ipynb"))
    if "PgServer().start()" in _setup(p)
]


@pytest.fixture
def private_tmp():
    """A TMPDIR of the test's own, which the unprivileged server user can enter (pytest's tmp_path is 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="server-lesson-tmp-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _left_behind(folder: Path, timeout: float = 15.0) -> tuple[list[str], list[str]]:
    """What is still in ``folder`` and which processes still name it, once given ``timeout`` to go."""
    # Not wait_until: what is left at the timeout is the answer, which the caller's assertion names.
    deadline = time.monotonic() + timeout
    while True:
        entries = sorted(p.name for p in folder.iterdir())
        procs = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(folder) in cmdline:
                procs.append(cmdline)
        if (not entries and not procs) or time.monotonic() > deadline:
            return entries, procs
        time.sleep(0.2)


# Lessons 6 and 7 run to their end leave no server, process or folder: nbval runs every lesson with a TMPDIR
# of its own and checks exactly that once its kernel has stopped (notebooks/conftest.py).


def test_both_lessons_on_a_server_start_their_own():
    assert [p.name[:2] for p in SERVER_LESSONS] == ["06", "07"]


@pytest.mark.parametrize("notebook", SERVER_LESSONS, ids=lambda p: p.stem)
def test_a_kernel_killed_after_a_lesson_started_its_server_leaves_nothing(private_tmp, notebook):
    setup = _setup(notebook)
    assert "PgServer().start()" in setup and "lessons.cleanup_at_exit(work)" in setup
    script = setup + "\nprint(server.folder, work, flush=True)\nos.kill(os.getpid(), 9)\n"
    env = dict(os.environ, TMPDIR=str(private_tmp))
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=notebook.parent, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -9, done.stderr[-3000:]
    server_folder, work = done.stdout.split()[-2:]
    assert Path(server_folder).parent == private_tmp and Path(work).parent == private_tmp
    assert _left_behind(private_tmp) == ([], [])


# -- lessons 6 and 7 on Binder ---------------------------------------------------------------

BINDER = Path(__file__).resolve().parents[1] / "binder"


def test_binder_installs_postgresql_with_apt_as_repo2docker_reads_apt_txt():
    # repo2docker drops everything from '#' on and skips blank lines, then checks each name.
    packages = [line.partition("#")[0].strip() for line in (BINDER / "apt.txt").read_text().splitlines()]
    assert [p for p in packages if p] == ["postgresql"]


def test_without_initdb_on_path_the_server_comes_from_debians_newest_version_folder(private_tmp, monkeypatch):
    from leaselab.harness.pgserver import PgServer, PgUnavailable, find_bin_dir

    try:
        real = find_bin_dir()
    except PgUnavailable as exc:
        pytest.skip(str(exc))
    debian = private_tmp / "usr" / "lib" / "postgresql"
    (debian / "9.6" / "bin").mkdir(parents=True)
    (debian / "9.6" / "bin" / "initdb").write_text("an old version that must not be picked\n")
    (debian / "13" / "bin").mkdir(parents=True)
    (debian / "13" / "bin" / "initdb").write_text("not the newest either\n")
    newest = debian / "16" / "bin"
    newest.mkdir(parents=True)
    for program in real.iterdir():  # Debian's folder holds the real programs; PATH does not
        (newest / program.name).symlink_to(program)
    monkeypatch.setenv("PATH", str(private_tmp / "nothing-here"))
    found = find_bin_dir(str(debian / "*" / "bin"))
    assert found == newest
    with PgServer(bin_dir=found) as server:
        url = server.create_database("binder")
        with Queue(url) as q:
            assert q.get(q.enqueue("x")).status is Status.PENDING
    with pytest.raises(PgUnavailable, match="apt-get install postgresql"):
        find_bin_dir(str(private_tmp / "no" / "*" / "bin"))


# A machine without PostgreSQL, for one pytest run: this one has it both on PATH and in Debian's folders.
NO_POSTGRESQL_PLUGIN = """
from leaselab.harness import pgserver

def find_bin_dir(*args, **kwargs):
    raise pgserver.PgUnavailable("no PostgreSQL binaries: initdb is neither on PATH nor in /usr/lib/postgresql/*/bin")

pgserver.find_bin_dir = find_bin_dir


def pytest_collection_finish(session):
    skipped = sum(1 for item in session.items if any(item.iter_markers("skip")))
    print(f"marked to skip: {skipped} of {len(session.items)}")
"""


@pytest.mark.parametrize("notebook", SERVER_LESSONS, ids=lambda p: p.stem)
def test_without_postgresql_a_lesson_on_a_server_skips_under_nbval_naming_what_is_missing(private_tmp, notebook):
    (private_tmp / "no_postgresql.py").write_text(NO_POSTGRESQL_PLUGIN)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(private_tmp), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no_postgresql", "-rs", str(notebook)]
    ran = subprocess.run(argv, cwd=notebook.parents[2], env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout[-3000:]
    assert " skipped" in ran.stdout and "passed" not in ran.stdout
    assert "lesson starts a PostgreSQL server: no PostgreSQL binaries" in ran.stdout
    # In CI nothing is skipped: a lesson that cannot start its server must fail there.
    ci = subprocess.run(
        argv + ["--collect-only"],
        cwd=notebook.parents[2],
        env=dict(env, CI="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ci.returncode == 0 and re.search(r"marked to skip: 0 of [1-9]", ci.stdout), ci.stdout[-3000:]
