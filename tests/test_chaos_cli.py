"""``leaselab chaos``: a seeded, replayable schedule; real runs that come out clean; a broken handler caught; bad input
refused."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from leaselab import Queue
from leaselab.chaos import FAULTS, Progress, applicable, plan, run
from leaselab.chaos.errors import FaultNotApplicable, ServerNotRecovered, UnknownFault
from leaselab.chaos.jumps import LAUNCHER, environment, jump
from leaselab.chaos.run import ProgressLines
from leaselab.chaos.texts import STRINGS
from leaselab.harness.pgserver import PgServer
from tests.support.polling import pid_gone, wait_until
from tests.support.servers import fresh_database, in_memory, needs_postgres

REPO = Path(__file__).resolve().parents[1]


def memory_tmpdir() -> dict[str, str]:
    """TMPDIR for a ``leaselab chaos`` run: in memory when there is room, so the throw-away server it
    starts and crashes there waits on no disk (``servers.in_memory``)."""
    memory = in_memory()
    return {"TMPDIR": str(memory)} if memory is not None else {}


def chaos(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m leaselab chaos ARGS`` in ``tmp_path``, with the tests' handlers importable."""
    env = dict(os.environ, PYTHONPATH=str(REPO), **memory_tmpdir())
    return subprocess.run(
        [sys.executable, "-m", "leaselab", "chaos", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another():
    kw = dict(seconds=20, workers=4, lease=1.0, faults=FAULTS)
    first, again, other = plan(7, **kw), plan(7, **kw), plan(8, **kw)
    assert first == again and first.render() == again.render()
    assert first.steps != other.steps
    assert {s.fault for s in first.steps} == set(FAULTS)
    assert all(0 < s.at < 20 for s in first.steps)
    # A slot never gets a second lasting fault before its first one ends; pauses outlast the lease.
    for slot in ("w1", "w2", "w3", "w4"):
        lasting = [s for s in first.steps if s.worker == slot and s.fault in ("pause", "partition", "clock")]
        assert all(a.at + a.lasts <= b.at for a, b in pairwise(lasting))
    assert all(s.lasts > 1.0 for s in first.steps if s.fault in ("pause", "partition"))


def test_the_schedule_prints_every_step_in_either_language():
    schedule = plan(3, seconds=5, workers=2, lease=1.0, faults=("kill", "pause"))
    en, ru = schedule.render("en").splitlines(), schedule.render("ru").splitlines()
    assert en[0].startswith("chaos seed 3") and ru[0].startswith("зерно хаоса 3")
    assert len(en) == len(ru) == 2 + len(schedule.steps)
    assert not re.search(r"\b(kill|pause|for|the|worker)\b", "\n".join(ru))
    assert STRINGS["en"].keys() == STRINGS["ru"].keys()


def test_faults_a_queue_cannot_have_are_refused_by_name():
    with pytest.raises(UnknownFault, match="'explode'.*kill, pause"):
        applicable("kill,explode", server=False, own_server=False)
    with pytest.raises(FaultNotApplicable, match="'partition'.*SQLite"):
        applicable(["partition"], server=False, own_server=False)
    with pytest.raises(FaultNotApplicable, match="'server-crash'.*not started by chaos"):
        applicable(["server-crash"], server=True, own_server=False)
    assert applicable(None, server=False, own_server=False) == ("kill", "pause")
    assert applicable(None, server=True, own_server=True) == tuple(f for f in FAULTS if f != "failover")


def test_a_jumping_worker_reads_a_clock_off_by_the_jump_so_on_a_file_it_reaps_a_live_lease(tmp_path, fleet_on):
    # On a file queue each worker's clock is the queue's: a minute fast, a live lease looks expired.
    fleet = fleet_on(tmp_path / "q.db")
    held_id = fleet.queue.enqueue("held")
    held = fleet.queue.claim("holder", lease=30)
    clock = tmp_path / "w1.clock"
    name = fleet.spawn("leaselab.harness.demo:echo", lease=5.0, env=environment(clock), launcher=LAUNCHER)
    later = fleet.queue.enqueue("later")
    wait_until(lambda: fleet.queue.get(later).status == "done", message="a job done on the true clock")
    assert fleet.queue.get(held_id).attempts == 1
    jump(fleet.pid(name), clock, 60.0)
    wait_until(
        lambda: fleet.queue.get(held_id).attempts == 2 or fleet.queue.get(held_id).status == "done",
        message="the live lease to be reaped by the fast clock",
    )
    assert held.token != fleet.queue.get(held_id).token


def test_a_short_run_on_sqlite_with_the_demo_task_is_clean_and_shows_progress(tmp_path):
    done = chaos(
        tmp_path,
        "--db",
        str(tmp_path / "q.db"),
        "--handler",
        "leaselab.harness.demo:task",
        "--workers",
        "3",
        "--jobs",
        "150",
        "--seconds",
        "5",
        "--seed",
        "11",
        "--payload",
        '{"seconds": 0.02}',
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("chaos seed 11") and lines[1].startswith("schedule: ")
    assert plan(11, seconds=5, workers=3, lease=1.0, faults=("kill", "pause")).render() in done.stdout
    assert "every promise held" in done.stdout
    progress = [line for line in done.stderr.splitlines() if re.search(r"jobs done \d+/150 +faults \d+", line)]
    assert len(progress) >= 2, done.stderr
    assert progress[-1].split("jobs done ")[1].startswith("150/150")
    assert (tmp_path / "q.db.chaos" / "logs" / "w1.log").exists()


def test_the_closing_progress_line_is_dropped_only_when_it_repeats_the_last_one_not_for_following_it_closely():
    # A CI run ended on "149/150" with every job done: the closing line was dropped for coming
    # within 0.5 s of one printed a moment before the last job finished.
    shown: list[Progress] = []
    lines = ProgressLines(shown.append)
    lines.show(Progress(4.9, 149, 150, 7, {"kill": 2, "pause": 5}))
    lines.show(Progress(4.95, 150, 150, 7, {"kill": 2, "pause": 5}), last=True)
    assert [p.render() for p in shown] == [
        "   4.9s  jobs done 149/150  faults 7 (kill 2, pause 5)",
        "   5.0s  jobs done 150/150  faults 7 (kill 2, pause 5)",
    ]
    lines.show(Progress(5.0, 150, 150, 7, {"kill": 2, "pause": 5}), last=True)  # says the same: dropped
    lines.show(Progress(5.1, 150, 150, 7, {"kill": 2, "pause": 5}))  # a line on its period is not
    assert [p.elapsed for p in shown] == [4.9, 4.95, 5.1]
    ProgressLines(None).show(Progress(1.0, 1, 2, 0, {}), last=True)  # no one listening: nothing to do


def test_a_handler_whose_outside_effect_repeats_under_pauses_is_caught_with_exit_1(tmp_path):
    done = chaos(
        tmp_path,
        "--db",
        str(tmp_path / "q.db"),
        "--handler",
        "tests.support.chaos_handlers:transfer",
        "--workers",
        "2",
        "--jobs",
        "20",
        "--seconds",
        "4",
        "--faults",
        "pause",
        "--seed",
        "5",
        "--payload",
        '{"freeze_job": 1}',
        "--json",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert [(a["kind"], a["job"]) for a in result["report"]["anomalies"]] == [("effect_repeated", 1)]
    assert result["faults"]["pause"] >= 1
    assert "chaos seed 5" in done.stderr  # with --json the schedule goes to stderr, stdout stays JSON


def test_the_same_handler_kept_to_one_effect_by_its_key_passes_the_same_run(tmp_path):
    done = chaos(
        tmp_path,
        "--db",
        str(tmp_path / "q.db"),
        "--handler",
        "tests.support.chaos_handlers:transfer_once",
        "--workers",
        "2",
        "--jobs",
        "20",
        "--seconds",
        "4",
        "--faults",
        "pause",
        "--seed",
        "5",
        "--payload",
        '{"freeze_job": 1}',
        "--json",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["report"]["clean"] and result["stats"]["done"] == 20
    runs = [e for e in result["report"]["anomalies"]]
    assert runs == []
    # The handler did run twice for job 1: at-least-once, working as promised.
    with Queue(tmp_path / "q.db") as q:
        assert q.get(1).attempts == 2


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_short_run_on_a_throw_away_server_with_partitions_dropped_replies_and_crashes_is_clean(tmp_path):
    needs_postgres()
    seed, seconds = 4, 8
    wanted = plan(seed, seconds=seconds, workers=4, lease=1.0, faults=FAULTS).counts()
    assert {"partition", "drop-reply", "server-crash"} <= wanted.keys()
    done = chaos(
        tmp_path,
        "--db",
        "postgresql",
        "--handler",
        "leaselab.harness.demo:task",
        "--jobs",
        "200",
        "--seconds",
        str(seconds),
        "--seed",
        str(seed),
        "--payload",
        '{"seconds": 0.02}',
        "--json",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["report"]["clean"] and result["drained"] and result["stats"]["done"] == 200
    assert {"partition", "drop-reply", "server-crash"} <= result["faults"].keys()
    port = int(re.search(r"127\.0\.0\.1:(\d+)", done.stderr).group(1))
    assert not _listening(port), "the throw-away server outlived the run"
    assert (tmp_path / "leaselab-chaos" / "logs").is_dir()


class SquattedServer(PgServer):
    """A throw-away server whose port another program takes as soon as it crashes, and keeps: it cannot start again."""

    squatter: socket.socket | None = None

    def crash(self) -> None:
        super().crash()
        self.squatter = socket.socket()
        self.squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.squatter.bind(("127.0.0.1", self.port))
        self.squatter.listen()

    def stop(self) -> None:
        if self.squatter is not None:
            self.squatter.close()
        super().stop()


def test_a_server_that_does_not_come_back_after_a_crash_ends_the_run_with_an_error_that_says_so(tmp_path):
    """Not the feeder's "connection refused", nor a drain that times out: the crash that the server
    did not survive, and why (its port taken, here, for longer than recover() waits for it)."""
    needs_postgres()
    with SquattedServer(parent=in_memory()) as server:
        url = fresh_database(server, "squatted")
        with pytest.raises(
            ServerNotRecovered, match=r"crashed at \d+\.\ds did not start again: PgStartFailed"
        ) as raised:
            run(
                url,
                "leaselab.harness.demo:task",
                workers=1,
                jobs=20,
                seconds=6,
                lease=1.0,
                seed=3,
                server=server,
                faults=("server-crash",),
                folder=tmp_path / "run",
            )
        assert "Address already in use" in str(raised.value)
        assert not server.running


@pytest.mark.parametrize(
    "args, message",
    [
        (("--faults", "kill,explode"), "unknown fault 'explode'"),
        (("--faults", "partition"), "fault 'partition' needs a network"),
        (("--faults", "server-crash"), "fault 'server-crash' crashes a server that chaos started itself"),
        (("--lang", "fr"), "invalid choice: 'fr'"),
        (("--payload", "{oops"), "payload is not valid JSON"),
        (("--handler", "no_such_module:run"), "cannot import handler module 'no_such_module'"),
        (("--workers", "500"), "workers must be at most 32"),
        (("--faults", "failover"), "chaos fails over only a replicated server it started itself"),
        (("--replication", "async"), "--replication goes with --faults failover"),
        (("--faults", "failover", "--replication", "semi"), "--replication must be one of sync, async"),
    ],
)
def test_bad_input_is_refused_with_exit_2_and_a_message_naming_it(tmp_path, args, message):
    argv = ["--db", str(tmp_path / "q.db"), "--handler", "leaselab.harness.demo:task", "--seconds", "1", *args]
    done = chaos(tmp_path, *argv)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert not (tmp_path / "q.db.chaos" / "logs").exists()  # refused before any worker started


def test_a_crash_of_a_server_chaos_did_not_start_is_refused_before_connecting(tmp_path):
    done = chaos(
        tmp_path,
        "--db",
        "postgresql://someone@127.0.0.1:1/theirs",
        "--handler",
        "leaselab.harness.demo:task",
        "--faults",
        "kill,server-crash",
    )
    assert done.returncode == 2 and "this server was not started by chaos" in done.stderr


def test_a_queue_that_already_holds_jobs_is_refused(tmp_path):
    with Queue(tmp_path / "q.db") as q:
        q.enqueue({})
    done = chaos(tmp_path, "--db", str(tmp_path / "q.db"), "--handler", "leaselab.harness.demo:task")
    assert done.returncode == 2 and "already holds 1 jobs" in done.stderr


def test_ctrl_c_stops_every_worker_and_removes_the_throw_away_server(tmp_path):
    needs_postgres()
    env = dict(os.environ, PYTHONPATH=str(REPO), **memory_tmpdir())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leaselab",
            "chaos",
            "--db",
            "postgresql",
            "--handler",
            "leaselab.harness.demo:task",
            "--seconds",
            "120",
            "--payload",
            '{"seconds": 0.05}',
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Gated on the run's own word: the first progress line comes once workers are running.
        first = proc.stderr.readline()
        assert "jobs done" in first, first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "interrupted" in err
    port = int(re.search(r"127\.0\.0\.1:(\d+)", out).group(1))
    assert not _listening(port), "the throw-away server outlived Ctrl-C"
    actions = [json.loads(line) for line in (tmp_path / "leaselab-chaos" / "actions.jsonl").read_text().splitlines()]
    spawned = [a["pid"] for a in actions if a["action"] == "spawn"]
    assert spawned and all(pid_gone(pid) for pid in spawned), "a worker outlived Ctrl-C"
