"""The helpers lessons call: scratch folders, language from the folder, waiting, history tables, the claim's plan."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from leaselab import LeaseLost, ManualClock, Queue, lessons
from leaselab.harness import demo
from tests.support.polling import pid_gone, wait_until
from tests.support.servers import IN_PROCESS_BACKENDS

# The history tables and the held demo job read a queue in this process: on every backend, APSW too.
# The claim's plan and its step count are SQLite's (EXPLAIN QUERY PLAN, its virtual machine's steps).
TARGETS = IN_PROCESS_BACKENDS


def test_scratch_makes_a_fresh_folder_and_cleanup_removes_it():
    folder = lessons.scratch("test")
    (folder / "x.db").write_text("x")
    assert folder.is_dir() and folder.name.startswith("leaselab-test-")
    assert lessons.cleanup(folder) is True
    assert not folder.exists()


@pytest.mark.parametrize("folder, lang", [("/a/notebooks/ru", "ru"), ("/a/notebooks/en", "en"), ("/tmp", "en")])
def test_language_is_the_notebook_folder_name_or_english(folder, lang):
    assert lessons.language(folder) == lang


def test_wait_until_returns_the_value_and_times_out_with_a_message():
    calls = iter([0, None, "ready"])
    assert lessons.wait_until(lambda: next(calls), timeout=5, interval=0) == "ready"
    with pytest.raises(TimeoutError, match="the moon"):
        lessons.wait_until(lambda: False, timeout=0.05, interval=0.01, what="the moon")


def test_a_russian_lessons_wait_times_out_wholly_in_russian(tmp_path, monkeypatch):
    what = lessons.text("wait_claim", "ru")
    with pytest.raises(TimeoutError) as raised:
        lessons.wait_until(lambda: False, timeout=0.05, interval=0.01, what=what, lang="ru")
    assert str(raised.value) == "за 0,05 с так и не дождались захвата задачи воркером w1"
    (tmp_path / "ru").mkdir()
    monkeypatch.chdir(tmp_path / "ru")  # a Russian notebook's kernel runs in notebooks/ru
    with pytest.raises(TimeoutError, match="^за 0,05 с так и не дождались захвата"):
        lessons.wait_until(lambda: False, timeout=0.05, interval=0.01, what=what)


def test_history_shows_seconds_since_the_first_event_kind_attempt_and_worker(queue, clock):
    job_id = queue.enqueue("x")
    clock.advance(2.5)
    queue.claim("w1")
    lines = lessons.history(queue.events(job_id)).splitlines()
    assert lines[0].split() == ["0.00s", "job", "1", "enqueued", "attempt", "0", "-"]
    assert lines[1].split() == ["2.50s", "job", "1", "claimed", "attempt", "1", "w1"]
    assert lessons.history([]) == "(no events)"


def test_claim_plan_uses_the_partial_index_without_a_sort(tmp_path):
    q = Queue(tmp_path / "p.db")
    plan = lessons.claim_plan(q)
    assert any("jobs_claim" in step for step in plan)
    assert not any("TEMP B-TREE" in step for step in plan)
    q.close()


def test_cleanup_at_exit_ends_the_workers_and_removes_the_folder_when_the_interpreter_exits(tmp_path):
    import subprocess
    import sys

    script = """
import sys
from leaselab import lessons
from leaselab.harness.fleet import Fleet
folder = lessons.scratch("exit-test")
fleet = Fleet(str(folder / "lab.db"))
fleet.spawn(handler="leaselab.harness.demo:task", lease=2.0)
print(folder, fleet.pid("w1"), flush=True)
lessons.cleanup_at_exit(folder, fleet)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    folder, pid = done.stdout.split()
    wait_until(lambda: pid_gone(int(pid)), 10, message=f"worker {pid} to end with the interpreter")
    assert not Path(folder).exists(), f"{folder} was left behind"


def test_cleanup_at_exit_removes_the_folder_even_when_the_kernel_is_killed(tmp_path):
    import subprocess
    import sys

    script = """
import os, signal
from leaselab import lessons
from leaselab.harness.fleet import Fleet
folder = lessons.scratch("kill-test")
fleet = Fleet(str(folder / "lab.db"))
fleet.spawn(handler="leaselab.harness.demo:task", lease=2.0)
print(folder, fleet.pid("w1"), flush=True)
lessons.cleanup_at_exit(folder, fleet)
os.kill(os.getpid(), signal.SIGKILL)   # as nbval and a hard kernel restart do: no atexit
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    folder, pid = done.stdout.split()
    wait_until(
        lambda: not Path(f"/proc/{pid}").exists(),
        15,
        interval=0.1,
        message=f"worker {pid} to end after its parent was killed",
    )
    wait_until(
        lambda: not Path(folder).exists(),
        15,
        interval=0.1,
        message=f"{folder} to be removed after the kernel was killed",
    )


def test_claim_steps_counts_the_work_of_one_real_claim(tmp_path):
    q = Queue(tmp_path / "s.db", clock=ManualClock())
    assert lessons.claim_steps(q)[1] is None
    q.enqueue("x")
    steps, job = lessons.claim_steps(q, worker="w9")
    assert job.payload == "x" and job.worker == "w9" and q.get(job.id).status == "running"
    empty_steps, nothing = lessons.claim_steps(q)
    assert nothing is None and 0 < empty_steps < steps  # finding nothing is less work than a claim


def test_history_in_russian_says_its_words_and_the_stored_details_in_russian(queue, zombie):
    q = queue
    job_id = q.enqueue("x")
    old, _ = zombie(holder="w1", retake=False)
    with pytest.raises(LeaseLost):
        q.complete(old.id, old.token)
    lines = lessons.history(q.events(job_id), lang="ru").splitlines()
    assert lines[2].split() == ["6,00", "с", "задача", "1", "reaped", "попытка", "1", "w1", "аренда", "истекла"]
    assert lines[3].endswith("complete: отклонено, у задачи уже другой токен")
    # The same stored error, printed on its own, is in the same language as in the table.
    assert lessons.stored_detail(q.get(job_id).last_error, "ru") == "аренда истекла"
    assert lessons.stored_detail(q.get(job_id).last_error, "en") == "lease expired"
    assert lessons.history([], lang="ru") == "(событий нет)"
    with pytest.raises(ValueError, match="lang must be one of en, ru"):
        lessons.history([], lang="fr")


def test_a_held_demo_job_finishes_its_first_attempt_only_once_the_gate_file_exists_and_later_ones_at_once(
    tmp_path, target, clock
):
    """What lets a lesson freeze, kill or cut off the first worker however late it gets to it."""
    gate = tmp_path / "gate"
    with Queue(target, clock=clock) as q:
        job_id = q.enqueue({"seconds": 0, "hold": str(gate)})
        first, results = q.claim("w1", lease=5), []
        thread = threading.Thread(target=lambda: results.append(demo.task(first)))
        thread.start()
        thread.join(0.5)
        assert thread.is_alive() and not results  # held at the gate
        gate.touch()
        thread.join(20)
        assert results == [{"job": job_id, "attempt": 1, "worker": "w1"}]
        gate.unlink()
        clock.advance(6)
        q.reap()
        clock.advance(3600)  # past any backoff
        second = q.claim("w2", lease=5)
        assert second.attempts == 2 and demo.task(second)["attempt"] == 2  # no gate, no wait
