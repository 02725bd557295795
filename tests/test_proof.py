"""Lesson 8's grade: a payment handler run, not read, under a freeze after its payment and a crash before it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from leaselab import Queue
from leaselab.chaos import proof
from leaselab.chaos.texts import text
from leaselab.check.texts import TITLES
from tests.support.polling import process_state, wait_until

PLAIN = """
from leaselab.harness import effects, gates

def pay(job):
    with effects.Ledger(job.payload["ledger"]) as ledger:
        gates.fault_point(job, "before")
        ledger.deposit(job.payload["account"], job.payload["amount"], job=job)
        gates.fault_point(job, "after")
    return "paid"
"""
KEYED = PLAIN.replace("job=job)", 'job=job, key=f"pay-{job.id}")')
# A wrong fix: skip the payment on a retry. The freeze after the payment cannot catch it; the crash
# before the payment does (the retry never pays).
SKIPS_RETRIES = PLAIN.replace("        ledger.deposit", "        if job.attempts == 1:\n            ledger.deposit")
# Another wrong fix: a key per attempt is a new key every time.
KEYED_PER_ATTEMPT = PLAIN.replace("job=job)", 'job=job, key=f"pay-{job.id}-{job.attempts}")')


def test_the_plain_payment_repeats_its_effect_under_the_freeze_after_it(tmp_path):
    t = proof.trial(PLAIN, tmp_path / "t", fault="after")
    assert [(a.kind, a.job) for a in t.report.anomalies] == [("effect_repeated", 1)]
    assert t.balances["a1"] == 2 * proof.AMOUNT and not t.paid_once
    assert t.chaos.clean  # the queue itself kept every promise: at-least-once, as promised


def test_lesson_7s_timeline_flags_the_repeated_payment_without_covering_its_legend(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from leaselab.lab import timeline

    t = proof.trial(PLAIN, tmp_path / "t", fault="after")
    with Queue(tmp_path / "t" / "queue.db") as q:
        events = q.events()
    for lang in ("en", "ru"):
        # As lesson 8 draws it (notebooks/src/08-your-turn.py), and as a notebook saves it.
        fig = timeline.draw(timeline.timeline_data(events), report=t.report, lang=lang)
        fig.savefig(tmp_path / f"timeline-{lang}.png")
        ax = fig.axes[0]
        labels = [text for text in ax.texts if text.get_color() == timeline.ANOMALY_COLOUR]
        assert [label.get_text().strip() for label in labels] == [f"1: {TITLES[lang]['effect_repeated']}"]
        legend = ax.get_legend().get_window_extent()
        assert not labels[0].get_window_extent().overlaps(legend), lang


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_a_key_per_job_is_graded_right(tmp_path, lang):
    assert proof.grade(KEYED, tmp_path, lang) == text("proof_right", lang, n=len(proof.ACCOUNTS), amount=proof.AMOUNT)


def test_skipping_retries_is_caught_by_the_crash_before_the_payment(tmp_path):
    line = proof.grade(SKIPS_RETRIES, tmp_path, "en")
    assert line == text(
        "proof_wrong",
        "en",
        detail=text("proof_money", "en", where=text("proof_before", "en"), account="a1", got=0, want=proof.AMOUNT),
    )


def test_a_key_per_attempt_is_caught_by_the_freeze_after_the_payment(tmp_path):
    line = proof.grade(KEYED_PER_ATTEMPT, tmp_path, "ru")
    assert line.startswith(text("proof_wrong", "ru", detail=text("proof_after", "ru")))
    # Two different keys of one job are two effects, each once: the checker sees no repeat, the money does.
    assert "a1" in line and "20" in line


def test_a_source_without_pay_or_an_unknown_fault_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"must define pay\(job\)"):
        proof.trial("def handle(job):\n    pass\n", tmp_path / "x")
    with pytest.raises(ValueError, match="fault must be one of after, before"):
        proof.trial(PLAIN, tmp_path / "y", fault="during")


def test_a_fix_that_fails_every_first_attempt_on_purpose_is_over_its_budget_of_attempts(tmp_path):
    # Right in money (the key keeps the payment to once) but each job now costs two attempts.
    wasteful = KEYED.replace(
        "def pay(job):\n", "def pay(job):\n    if job.attempts == 1:\n        raise RuntimeError('not yet')\n"
    )
    line = proof.grade(wasteful, tmp_path, "en")
    assert line.startswith(text("proof_wrong", "en", detail=text("proof_after", "en"))) and "over the budget" in line


# A worker whose other thread takes the queue's write lock again and again, on one CPU shared with
# two spinning processes: when its handler freezes, it is runnable but seldom running.
BUSY_VICTIM = r"""
import os, sqlite3, sys, threading, time
from types import SimpleNamespace
from leaselab.harness import gates

db, cpu = sys.argv[1], int(sys.argv[2])
os.sched_setaffinity(0, {cpu})  # the threads and the watcher process started below inherit it

def write_again_and_again():
    conn = sqlite3.connect(db, timeout=60, isolation_level=None)
    while True:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO side VALUES (1)")
        conn.execute("COMMIT")
        time.sleep(0.001)  # as a heartbeat, the lock is free most of the time (the watcher gets it)

threading.Thread(target=write_again_and_again, daemon=True).start()
os.environ["LEASELAB_DB"] = db
print("ready", flush=True)
sys.stdin.readline()  # once the spinners run
gates.freeze_until_done_by_another(SimpleNamespace(id=1, attempts=1))
"""
SPIN = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def test_the_freeze_after_the_payment_stops_the_worker_holding_no_write_lock(tmp_path):
    """kill(SIGSTOP) returns once the signal is queued, and a worker waiting for a CPU runs on: the
    watcher keeps the write lock until the kernel shows the worker stopped, so it is never frozen
    inside a write, which would stall every other worker of the file."""
    db = tmp_path / "q.db"
    with Queue(db) as q:
        q.enqueue({"n": 1})
    sqlite3.connect(db, isolation_level=None).execute("CREATE TABLE side (x)")
    cpu = min(os.sched_getaffinity(0))
    victim = subprocess.Popen(
        [sys.executable, "-c", BUSY_VICTIM, str(db), str(cpu)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    spinners: list[subprocess.Popen] = []
    try:
        assert victim.stdout.readline().strip() == "ready"
        spinners += [subprocess.Popen([sys.executable, "-c", SPIN, str(cpu)]) for _ in range(2)]
        victim.stdin.write("go\n")
        victim.stdin.flush()
        wait_until(lambda: process_state(victim.pid) == "T", 30, message="the frozen worker to be stopped")
        # The watcher stays in the worker's session, so a kernel that schedules sessions as groups
        # (autogroup) never weighs it alone against the spinners, and leaves the worker's process
        # group, so a Ctrl-C sent to that group cannot kill it and leave the worker stopped for good.
        with open(f"/proc/{victim.pid}/task/{victim.pid}/children") as fh:
            (watcher,) = [int(pid) for pid in fh.read().split()]
        assert os.getsid(watcher) == os.getsid(victim.pid) and os.getpgid(watcher) != os.getpgid(victim.pid)
        other = sqlite3.connect(db, timeout=3, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # raises "database is locked" if the worker froze inside a write
            other.execute("UPDATE jobs SET status = 'done', attempts = 2 WHERE id = 1")  # the watcher ends
            other.execute("COMMIT")
        finally:
            other.close()
    finally:
        for proc in spinners + [victim]:
            proc.kill()
            proc.wait()


# Lesson 8, exercise 2: pay only when a look in the ledger finds no row of the job. The grade's two
# faults miss it; a freeze between the look and the payment does not.
LOOKS = PLAIN.replace(
    '        ledger.deposit(job.payload["account"], job.payload["amount"], job=job)',
    '        paid = any(row["job_id"] == job.id for row in ledger.entries())\n'
    "        if not paid:\n"
    '            ledger.deposit(job.payload["account"], job.payload["amount"], job=job)',
)
FROZEN_BETWEEN = LOOKS.replace('        gates.fault_point(job, "after")\n', "").replace(
    "        if not paid:\n", '        gates.fault_point(job, "after")\n        if not paid:\n'
)


def test_looking_before_paying_is_graded_right_though_it_is_wrong_and_passed_says_so(tmp_path):
    line = proof.grade(LOOKS, tmp_path, "ru")
    assert proof.passed(line, "ru") and not proof.passed(line, "en")
    assert not proof.passed(proof.grade(KEYED_PER_ATTEMPT, tmp_path / "per-attempt", "en"), "en")


@pytest.mark.parametrize("lang", ["en", "ru"])
def test_a_freeze_between_the_look_and_the_payment_makes_the_look_then_pay_handler_pay_twice(tmp_path, lang):
    assert proof.check_look_then_pay(FROZEN_BETWEEN, tmp_path / "between", lang) == text(
        "proof_look_caught", lang, got=2 * proof.AMOUNT, want=proof.AMOUNT
    )


def test_the_look_then_pay_check_names_a_freeze_left_after_the_payment_or_a_handler_that_never_looks(tmp_path):
    assert proof.check_look_then_pay(LOOKS, tmp_path / "left", "en") == text(
        "proof_wrong", "en", detail=text("proof_look_where", "en")
    )
    assert proof.check_look_then_pay(PLAIN, tmp_path / "plain", "ru") == text(
        "proof_wrong", "ru", detail=text("proof_look_none", "ru")
    )
    assert not (tmp_path / "left").exists()  # told from the source, without a run


def test_a_keyed_handler_frozen_between_its_look_and_its_payment_is_told_it_paid_once(tmp_path):
    keyed_between = FROZEN_BETWEEN.replace("job=job)", 'job=job, key=f"pay-{job.id}")')
    assert proof.check_look_then_pay(keyed_between, tmp_path / "keyed", "en") == text(
        "proof_wrong", "en", detail=text("proof_look_missed", "en", got=proof.AMOUNT)
    )
