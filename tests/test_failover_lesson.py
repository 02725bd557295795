"""The crash lesson's failover prop (``leaselab.lessons.failover``) on real servers and real workers: asynchronous
replication hands a fence to two tokens and loses acknowledged completions, which only the journals show;
synchronous loses nothing; the lines the lesson stores are the same whatever the timing; nothing is left running.

Every wait in the prop is on a state (completions journaled, the queue drained), bounded generously, so these
hold with both cores busy."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from leaselab.lessons import failover
from tests.support.servers import in_memory, processes_naming, wait_nothing_left

pytest.importorskip("psycopg")

ASYNC_EN = (
    "asynchronous replication: the checker on the server alone: every promise held: yes | with the journals: "
    "a fence handed to two tokens: yes; an acknowledged completion lost: yes; anything else: no"
)
SYNC_EN = (
    "synchronous replication (synchronous_commit = on): the checker on the server alone: every promise held: yes "
    "| with the journals: a fence handed to two tokens: no; an acknowledged completion lost: no; anything else: no"
)
ASYNC_RU = (
    "асинхронная репликация: ревизор по одному серверу — все обещания сдержаны: да | с журналами подтверждений — "
    "fence выдан двум токенам: да; подтверждённое завершение потеряно: да; что-то ещё: нет"
)
SYNC_RU = (
    "синхронная репликация (synchronous_commit = on): ревизор по одному серверу — все обещания сдержаны: да | "
    "с журналами подтверждений — fence выдан двум токенам: нет; подтверждённое завершение потеряно: нет; "
    "что-то ещё: нет"
)


@pytest.fixture
def servers_parent():
    """A folder of this test's own for the servers' folders, in memory when there is room, that the server's
    user may enter: what is left in it afterwards was left by the prop."""
    parent = Path(tempfile.mkdtemp(prefix="failover-lesson-", dir=in_memory()))
    parent.chmod(0o755)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


def _left(servers_parent: Path, work: Path) -> list[str]:
    return (
        [str(p) for p in servers_parent.iterdir()]
        + processes_naming(str(servers_parent))
        + processes_naming(str(work))  # a worker names its journal folder in its argv
    )


def test_the_failover_lesson_shows_async_losing_what_only_the_journals_see_and_sync_losing_nothing(
    tmp_path, bin_dir, servers_parent
):
    runs = failover.fail_over(tmp_path / "work", bin_dir=bin_dir, parent=servers_parent)
    wait_nothing_left(lambda: _left(servers_parent, tmp_path / "work"))

    assert [r.replication for r in runs] == ["async", "sync"]
    (held_behind, synchronous) = runs
    assert [r.verdict("en") for r in runs] == [ASYNC_EN, SYNC_EN]
    assert [r.verdict("ru") for r in runs] == [ASYNC_RU, SYNC_RU]

    # The server alone: a consistent story, every job done; the journals: what it forgot.
    assert held_behind.alone.clean and held_behind.alone.counts["jobs"] == failover.JOBS
    assert held_behind.count("fence_handed_twice") >= 1 and held_behind.count("acknowledged_lost") >= 1
    assert set(held_behind.judged.totals) == {"fence_handed_twice", "acknowledged_lost"}
    twice, lost = held_behind.witness("fence_handed_twice"), held_behind.witness("acknowledged_lost")
    assert twice is not None and sum(w.startswith("journal ") for w in twice.witness) == 2
    assert lost is not None and lost.witness[0].startswith("journal ")
    tally = held_behind.tally("en")
    assert f"jobs {failover.JOBS};" in tally and twice.sentence("en") in tally and lost.sentence("en") in tally
    assert lost.sentence("ru") in held_behind.tally("ru")
    assert f"      {lost.witness[0]}\n" in tally + "\n" and "events#" not in tally and "jobs#" not in tally

    # Synchronous: every completion the workers were told of is on the promoted server, once each.
    assert synchronous.alone.clean and synchronous.judged.clean
    assert synchronous.told == failover.JOBS
    assert synchronous.witness("acknowledged_lost") is None
    assert "journal " not in synchronous.tally("en")


def test_a_failover_run_that_fails_midway_leaves_nothing_running_and_a_run_again_judges_only_its_own_journals(
    tmp_path, bin_dir, servers_parent, monkeypatch
):
    def strike_fails(self, lock):
        raise RuntimeError("the failover broke")

    # The servers and the workers are all running when the strike comes: everything must go with the error.
    monkeypatch.setattr(failover.Failover, "strike", strike_fails)
    with pytest.raises(RuntimeError, match="the failover broke"):
        failover.fail_over_once("async", tmp_path / "work", bin_dir=bin_dir, parent=servers_parent)
    assert list((tmp_path / "work" / "journal").glob("*.jsonl")), "the workers never ran: nothing was tested"
    wait_nothing_left(lambda: _left(servers_parent, tmp_path / "work"))

    # The cell run again in the same folder: the broken run's journals are not judged against the new database.
    monkeypatch.undo()
    again = failover.fail_over_once("sync", tmp_path / "work", bin_dir=bin_dir, parent=servers_parent)
    assert again.verdict("en") == SYNC_EN, again.tally("en")
    wait_nothing_left(lambda: _left(servers_parent, tmp_path / "work"))


@pytest.mark.parametrize(
    "args, options, error, match",
    [
        (("semi",), {}, ValueError, "replication must be one of async, sync, got 'semi'"),
        (("async",), {"jobs": 10}, ValueError, "jobs must be >= "),
        (("sync",), {"workers": 0}, ValueError, "workers must be >= 1, got 0"),
        (("sync",), {"concurrency": 1.5}, TypeError, "concurrency must be an int, got 1.5"),
    ],
)
def test_a_failover_run_refuses_bad_input_before_starting_or_touching_anything(tmp_path, args, options, error, match):
    with pytest.raises(error, match=match):
        failover.fail_over_once(*args, tmp_path / "work", **options)
    assert not (tmp_path / "work").exists()
