"""The worker's log as the command writes it: a turn's lines in one write, a wait's line at once."""

from __future__ import annotations

import re
import sqlite3
import threading

from leaselab import Queue, Worker
from leaselab.worker.faults import WAITING
from leaselab.worker.logline import LineLog
from tests.support.servers import IN_PROCESS_BACKENDS

TARGETS = IN_PROCESS_BACKENDS  # the worker in this process, on every backend; the held lock is SQLite's

STAMP = r"\d\d:\d\d:\d\d\.\d\d\d "


class Writes:
    """A stream that keeps each write() apart, and can act on one as it comes."""

    def __init__(self, on_write=None):
        self.writes: list[str] = []
        self.on_write = on_write

    def write(self, text: str) -> int:
        self.writes.append(text)
        if self.on_write is not None:
            self.on_write(text)
        return len(text)

    def flush(self) -> None:
        pass

    def lines(self) -> list[str]:
        return [line for text in self.writes for line in text.splitlines()]


def test_a_one_slot_worker_writes_each_completion_with_the_claim_made_in_the_same_transaction(worker_queue):
    ids = worker_queue.enqueue_many([{"n": n} for n in range(4)])
    out = Writes()
    Worker(worker_queue, lambda job: job.payload, name="w1", exit_when_idle=True, log=LineLog(out)).run()
    jobs = [[re.sub(STAMP, "", line) for line in text.splitlines()] for text in out.writes]
    a, b, c, d = ids
    assert jobs == [
        [f"w1: claimed job {a} (attempt 1/5)"],
        [f"w1: completed job {a}", f"w1: claimed job {b} (attempt 1/5)"],
        [f"w1: completed job {b}", f"w1: claimed job {c} (attempt 1/5)"],
        [f"w1: completed job {c}", f"w1: claimed job {d} (attempt 1/5)"],
        [f"w1: completed job {d}"],
    ]
    for text in out.writes:  # whole lines, one stamp for the turn
        assert text.endswith("\n")
        assert len(set(re.findall(STAMP, text))) == 1


def test_a_worker_with_slots_writes_a_turns_lines_together_and_each_job_claimed_before_completed(worker_queue):
    ids = worker_queue.enqueue_many([{"n": n} for n in range(40)])
    out = Writes()
    stats = Worker(
        worker_queue,
        lambda job: job.payload,
        name="w1",
        concurrency=4,
        exit_when_idle=True,
        poll=0.01,
        log=LineLog(out),
    ).run()
    lines = out.lines()
    assert stats.completed == 40
    assert len(lines) == 80 and len(out.writes) < len(lines)

    def position(text: str) -> int:
        return next(i for i, line in enumerate(lines) if line.endswith(text))

    for n in ids:
        assert position(f"claimed job {n} (attempt 1/5)") < position(f"completed job {n}")


def test_a_wait_that_begins_mid_turn_is_written_at_once_after_the_turns_earlier_lines(tmp_path):
    """The turn's lines are held only while nothing waits: a worker stuck behind a lock says so at
    once (the lab shows it), and that line comes after what the turn did before it."""
    db = tmp_path / "q.db"
    with Queue(db) as q:
        first, second = q.enqueue_many([1, 2])
    holder = sqlite3.connect(db, isolation_level=None)

    def handler(job):
        if job.id == second:
            holder.execute("BEGIN IMMEDIATE")  # from now on every write of the worker times out
        return "done"

    told: list[bool] = []

    def on_write(text: str) -> None:
        if sum(WAITING in t for t in out.writes) == 3 and not told:
            told.append(True)
            worker.stop()  # were the lines held until the turn's end, this would never come

    out = Writes(on_write)
    with Queue(db, busy_timeout=0.05) as q:
        worker = Worker(q, handler, name="w", lease=30, log=LineLog(out))
        give_up = threading.Timer(20, worker.stop)  # a failure, not a hang
        give_up.start()
        stats = worker.run()
        give_up.cancel()
    holder.execute("ROLLBACK")
    holder.close()
    assert told, "the worker's waiting lines were not written while it waited"
    assert (stats.claimed, stats.completed, stats.lost) == (2, 1, 1)
    lines = [re.sub(STAMP, "", line) for line in out.lines()]
    assert lines[:3] == ["w: claimed job 1 (attempt 1/5)", "w: completed job 1", "w: claimed job 2 (attempt 1/5)"]
    assert [WAITING in line for line in lines[3:6]] == [True] * 3
    assert "stopped with job 2's outcome unwritten" in lines[-1]


def test_a_line_log_shows_each_message_on_a_line_of_its_own_whatever_it_holds():
    out = Writes()
    log = LineLog(out, clock=lambda: 0.0)
    log.lines(["job 1 failed: boom\nw9: completed job 1", "\x1b[2Jcleared"])
    log("one\rtwo")
    assert len(out.writes) == 2
    lines = [re.sub(STAMP, "", line) for line in out.lines()]
    assert lines == ["job 1 failed: boom\\nw9: completed job 1", "\\x1b[2Jcleared", "one\\rtwo"]
