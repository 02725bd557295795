"""Does your queue fence its zombies? The same faults and the same checker, run against leaselab and Python queues
people use.

    ./dev bench audit [--quick] [--readme] [--only QUEUE ...]

For each contender (``audit_contenders``), each scenario enqueues one job whose handler
(``audit_ledger.handle``) records every run in a ledger file outside the queue and puts the
fault into the run itself, so the verdict does not depend on the machine's speed:

- *crash*: the first run SIGKILLs its own worker; a second worker is started (as a
  supervisor would restart it). Does the job come back, after how long?
- *zombie*: the first run SIGSTOPs its own worker; a second worker is started; once the
  second run has finished (or the queue never hands the job out again, within the
  contender's bound), the harness SIGCONTs the first. Do the runs overlap, and does the
  queue accept the zombie's late completion over the newer run's?
- *partition*: the first run keeps going while the harness cuts its worker off from the
  server (leaselab's ``Proxy`` between the two stops every byte); past the lease a second
  worker, connected directly, may take the job; once its run has settled the harness heals the
  network and lets the first run finish. As the zombie, but the worker process runs on. A queue
  in a file has no network to cut: its row says how many TCP connections the worker held while
  it ran the job, counted in /proc.
- *flood*: ``FLOOD_JOBS`` jobs, ``FLOOD_WORKERS`` workers; the first runs of ``FLOOD_KILLS`` of them,
  drawn with a fixed seed, SIGKILL their own process, and a worker that dies is started again (as
  a supervisor would). The harness stops once every job is completed or nothing has happened
  for the contender's wait; lost, duplicated (completed twice) and stuck jobs are counted.

The checker (``audit_ledger.judge``) counts over the ledger and the queue's state: runs,
overlapping runs, stale completions accepted, jobs completed twice, lost, stuck.
``audit(quick=True)`` returns the rows as data, for a notebook. ``--quick``: leaselab on
SQLite, huey and persist-queue (under 2 minutes). ``--readme`` writes the table into
bench/README.md between its audit markers; ``--json`` prints the rows as JSON instead of the
table. Contenders run side by side (``PARALLEL`` at a time, each with its own server and
folders): most of an audit is waiting for leases to run out, and the faults are in the
handlers, so the verdicts do not depend on how busy the machine is. Only 127.0.0.1 and temp
folders are used, and every process started is killed before a scenario returns.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import audit_contenders  # noqa: E402
from audit_contenders import Contender  # noqa: E402
from audit_ledger import Verdict, judge, read, release_file  # noqa: E402
from progress import step  # noqa: E402

SCENARIOS = ("crash", "zombie", "partition", "flood")
START_WAIT = 60.0  # seconds for a fresh worker to claim its first job on a loaded machine
SETTLE_WAIT = 20.0  # seconds for a resumed or healed worker to hand its completion to the queue
FLOOD_JOBS, FLOOD_WORKERS, FLOOD_KILLS, FLOOD_SEED = 12, 3, 3, 21
FLOOD_CAP = 120.0  # seconds a flood may take at most, however busy its queue still is
PARALLEL = 4  # contenders audited at once
README = HERE / "README.md"
BEGIN, END = "<!-- audit:begin -->", "<!-- audit:end -->"


class AuditError(RuntimeError):
    """Raised when a scenario could not be run as written (a worker never started its job)."""


@dataclass(frozen=True)
class Row:
    """One queue in one scenario: what was run, what the checker counted, what a user should do."""

    queue: str
    version: str
    settings: str
    scenario: str
    verdict: Verdict | None
    note: str  # how long the job took to come back, or why the row has no verdict
    advice: str

    @property
    def clean(self) -> bool:
        return self.verdict is not None and self.verdict.clean


def wait_for(what: str, condition: Callable[[], bool], seconds: float) -> bool:
    """Poll ``condition`` until it holds (True) or ``seconds`` pass (False, said on stderr with ``what``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    if condition():
        return True
    step(f"  waited {seconds:g} s, no: {what}")
    return False


def stopped(pid: int | None) -> bool:
    """True when process ``pid`` is stopped by a signal (state T in /proc)."""
    if pid is None:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


class Workers:
    """The worker processes one scenario started, each in its own session, all killed on exit."""

    def __init__(self, contender: Contender, folder: Path):
        self.contender, self.folder = contender, folder
        self.procs: dict[str, subprocess.Popen] = {}
        self.replaced: set[str] = set()

    def start(self, name: str) -> subprocess.Popen:
        cmd, env = self.contender.worker(name)
        log = open(self.log(name), "ab")
        try:
            proc = subprocess.Popen(
                cmd,
                env=env,
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        self.procs[name] = proc
        return proc

    def restart_dead(self) -> list[str]:
        """Start a new worker in place of each one whose process has ended; the names of the dead.

        A dead worker stays in ``procs``, so its pid still names its runs."""
        dead = [name for name, proc in self.procs.items() if proc.poll() is not None and name not in self.replaced]
        for name in dead:
            self.replaced.add(name)
            self.start(f"{name.split('.')[0]}.{len(self.procs)}")
        return dead

    def log(self, name: str) -> Path:
        return self.folder / f"worker-{name}.log"

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs.items()}

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.killpg(proc.pid, sig)
                    except ProcessLookupError:
                        pass
            proc.wait(30)


def runners(ledger: Path, key: str) -> list[int]:
    """The processes that started a run of ``key``, in order: the handler's own process, which may be
    a worker's child (RQ's work horse, Celery's pool process) rather than the worker started."""
    return [line["pid"] for line in read(ledger) if line["job"] == key and line["what"] == "start"]


def runner(ledger: Path, key: str) -> int | None:
    found = runners(ledger, key)
    return found[0] if found else None


def gone(pid: int | None) -> bool:
    """True when ``pid`` names a process that no longer runs (a zombie child awaiting its wait counts as gone)."""
    if pid is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def lines_of(contender: Contender, ledger: Path, workers: Workers) -> list[dict]:
    return read(ledger) + contender.queue_acceptances(workers.pids())


def accepted_from(lines: list[dict], key: str, pid: int) -> bool:
    return any(line["job"] == key and line["pid"] == pid and line["what"] == "accepted" for line in lines)


def crash(contender: Contender, folder: Path, ledger: Path) -> tuple[Verdict, str]:
    contender.enqueue("crash", "crash", ledger)
    with Workers(contender, folder) as workers:
        workers.start("A")
        if not wait_for("the first run killed itself", lambda: gone(runner(ledger, "crash")), START_WAIT):
            raise AuditError(f"{contender.name}: the first worker never ran the job (see {workers.log('A')})")
        killed = time.time()
        workers.start("B")
        wait_for(
            "the job completed again",
            lambda: any(
                line["job"] == "crash" and line["what"] == "accepted" for line in lines_of(contender, ledger, workers)
            ),
            contender.comeback_wait,
        )
        held = contender.held()
        lines = lines_of(contender, ledger, workers)
        where = contender.whereabouts()
    verdict = judge(lines, ["crash"], held)
    if verdict.back_after is not None:
        note = f"back after {verdict.back_after:.1f} s"
    else:
        note = f"not back within {time.time() - killed:.0f} s" + (" (still held by the queue)" if held else "")
    if where and verdict.lost:
        note = f"{note}; {where}"
    return verdict, with_check(note, contender.queue_check(vanished=["A"]))


def zombie(contender: Contender, folder: Path, ledger: Path) -> tuple[Verdict, str]:
    contender.enqueue("zombie", "zombie", ledger)
    with Workers(contender, folder) as workers:
        workers.start("A")
        if not wait_for("the first run stopped itself", lambda: stopped(runner(ledger, "zombie")), START_WAIT):
            raise AuditError(f"{contender.name}: the first worker never ran the job (see {workers.log('A')})")
        zombie_pid = runner(ledger, "zombie")
        paused = time.time()
        if contender.timeout is not None and contender.timeout < audit_contenders.MAX_WAIT:
            time.sleep(contender.timeout + 1.0)  # past the timeout: the fault is a known duration, not a race
        workers.start("B")
        second = wait_for(
            "the second run settled",
            lambda: any(
                contender.settled(workers.log("B"), lines_of(contender, ledger, workers), pid, "zombie")
                for pid in runners(ledger, "zombie")[1:]
            ),
            contender.comeback_wait,
        )
        try:
            os.kill(zombie_pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # its own worker killed it meanwhile (RQ's job_timeout does): no late completion can come
        resumed = time.time()
        held, lines, where = late_settled(contender, ledger, workers, zombie_pid, "zombie")
    return late_verdict(
        contender,
        lines,
        held,
        where,
        zombie_pid,
        "zombie",
        second,
        who="the zombie",
        gone_as="its own worker had killed it",
        away=f"the {resumed - paused:.0f} s the first worker was stopped",
    )


def late_settled(
    contender: Contender, ledger: Path, workers: Workers, pid: int, job: str
) -> tuple[Any, list[dict], str | None]:
    """Wait until worker A's late completion of ``job`` has settled (or A's ``pid`` is gone); then what the
    queue holds, the ledger's lines and where the job is."""
    wait_for(
        "A's late completion settled",
        lambda: gone(pid) or contender.settled(workers.log("A"), lines_of(contender, ledger, workers), pid, job),
        SETTLE_WAIT,
    )
    return contender.held(), lines_of(contender, ledger, workers), contender.whereabouts()


def late_verdict(
    contender: Contender,
    lines: list[dict],
    held: Any,
    where: str | None,
    pid: int,
    job: str,
    second: Any,
    *,
    who: str,
    gone_as: str,
    away: str,
) -> tuple[Verdict, str]:
    """The verdict on a job whose first run (process ``pid``) was held away from its queue, and its note:
    whether it was taken again, and what became of the first run's late completion."""
    verdict = judge(lines, [job], held)
    late = (
        "accepted"
        if accepted_from(lines, job, pid)
        else f"never came: {gone_as}"
        if gone(pid) and not any(line["pid"] == pid and line["what"] == "end" for line in lines)
        else contender.not_taken
    )
    if second:
        note = f"taken again after {verdict.back_after:.1f} s; {who}'s late completion {late}"
    else:
        note = f"not taken again in {away}; its late completion {late}"
    if where and verdict.lost:
        note = f"{note}; {where}"
    return verdict, with_check(note, contender.queue_check(vanished=[]))


def tcp_connections(pid: int) -> int:
    """How many TCP sockets process ``pid`` holds open, its fds matched against /proc/PID/net/tcp{,6}."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = 0
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        found += sum(1 for line in lines if line.split()[9] in inodes)
    return found


def partition(contender: Contender, folder: Path, ledger: Path) -> tuple[Verdict | None, str]:
    address = contender.server_address()
    contender.enqueue("partition", "partition", ledger)
    if address is None:
        return no_network(contender, folder, ledger)
    from leaselab.harness.proxy import Proxy

    with Proxy(address) as proxy, Workers(contender, folder) as workers:
        contender.proxied["A"] = proxy.port
        try:
            workers.start("A")
        finally:
            contender.proxied.clear()
        if not wait_for("the first run started", lambda: runner(ledger, "partition") is not None, START_WAIT):
            raise AuditError(f"{contender.name}: the first worker never ran the job (see {workers.log('A')})")
        proxy.partition()
        holder = runner(ledger, "partition")
        cut = time.time()
        if contender.timeout is not None and contender.timeout < audit_contenders.MAX_WAIT:
            time.sleep(contender.timeout + 1.0)  # past the lease, as the zombie
        workers.start("B")
        second = wait_for(
            "the second run settled",
            lambda: any(
                contender.settled(workers.log("B"), lines_of(contender, ledger, workers), pid, "partition")
                for pid in runners(ledger, "partition")[1:]
            ),
            contender.comeback_wait,
        )
        proxy.heal()
        healed = time.time()
        release_file(ledger, "partition").touch()
        held, lines, where = late_settled(contender, ledger, workers, holder, "partition")
    return late_verdict(
        contender,
        lines,
        held,
        where,
        holder,
        "partition",
        second,
        who="the cut-off worker",
        gone_as="its process had ended",
        away=f"the {healed - cut:.0f} s the worker was cut off",
    )


def no_network(contender: Contender, folder: Path, ledger: Path) -> tuple[None, str]:
    """A queue in a file: run the job, count the worker's TCP connections while it holds it, let it finish."""
    with Workers(contender, folder) as workers:
        workers.start("A")
        if not wait_for("the first run started", lambda: runner(ledger, "partition") is not None, START_WAIT):
            raise AuditError(f"{contender.name}: the first worker never ran the job (see {workers.log('A')})")
        holder = runner(ledger, "partition")
        held_tcp = tcp_connections(holder)
        release_file(ledger, "partition").touch()
        wait_for(
            "the run settled",
            lambda: contender.settled(workers.log("A"), lines_of(contender, ledger, workers), holder, "partition"),
            SETTLE_WAIT,
        )
    if held_tcp:
        return None, f"not run: the worker held {held_tcp} TCP connections, but the queue names no server to cut"
    return None, (
        "cannot be expressed: the worker held 0 TCP connections while it ran the job (counted in /proc); "
        "a queue in a file has no network to cut"
    )


def flood(contender: Contender, folder: Path, ledger: Path) -> tuple[Verdict, str]:
    keys = [f"flood-{i:02d}" for i in range(FLOOD_JOBS)]
    doomed = set(random.Random(FLOOD_SEED).sample(keys, FLOOD_KILLS))
    contender.enqueue_many([(k, "crash" if k in doomed else None) for k in keys], ledger)
    began = time.time()
    vanished: list[str] = []
    with Workers(contender, folder) as workers:
        for n in range(FLOOD_WORKERS):
            workers.start(f"W{n + 1}")
        last_change, seen = time.monotonic(), 0
        while time.monotonic() - last_change < contender.comeback_wait and time.time() - began < FLOOD_CAP:
            vanished += workers.restart_dead()
            lines = lines_of(contender, ledger, workers)
            if len(lines) != seen:
                last_change, seen = time.monotonic(), len(lines)
            if {line["job"] for line in lines if line["what"] == "accepted"} >= set(keys):
                break
            time.sleep(0.2)
        took = time.time() - began
        held = contender.held()
        lines = lines_of(contender, ledger, workers)
        where = contender.whereabouts()
    verdict = judge(lines, keys, held)
    done = len({line["job"] for line in lines if line["what"] == "accepted"})
    note = (
        f"{FLOOD_JOBS} jobs, {FLOOD_WORKERS} workers, {FLOOD_KILLS} runs killed (seed {FLOOD_SEED}), "
        f"{len(vanished)} workers restarted: {done} completed in {took:.0f} s"
    )
    if where and verdict.lost:
        note = f"{note}; {where}"
    return verdict, with_check(note, contender.queue_check(vanished=vanished))


def with_check(note: str, checked: str | None) -> str:
    return note if checked is None else f"{note}; {checked}"


RUNNERS = {"crash": crash, "zombie": zombie, "partition": partition, "flood": flood}


def advice(scenario: str, v: Verdict | None, hint: str = "") -> str:
    """One sentence for a user of that queue, from what was measured (``hint``: the queue's own remedy, named)."""
    if v is None:
        return "-"
    if v.stale_accepted or v.completed_twice:
        return (
            "a run the queue had already handed to another worker still completes: make the handler "
            "idempotent and fence its writes yourself (a version or attempt check)."
        )
    if v.lost:
        return (
            "a job whose process dies mid-run is not run again: re-enqueue it from your own record, "
            "or use a queue that leases jobs" + (f"; {hint}." if hint else ".")
        )
    if v.stuck:
        return "the job stays claimed with no one running it: run a reaper of your own that puts such jobs back."
    if v.rerun_after_done:
        return (
            "a job whose run had finished ran again, its completion lost with the worker that held it: make "
            "the handler idempotent."
        )
    if v.overlapping:
        return (
            "runs overlap once a lease runs out, though the stale result is refused: keep the lease above your "
            "longest job and fence outside effects with the attempt's token."
        )
    if scenario == "zombie" and v.runs == 1:
        return "a paused worker keeps its job for as long as it is paused: nothing else runs it meanwhile."
    if scenario == "partition" and v.runs == 1:
        return "a cut-off worker keeps its job until the network comes back: nothing else runs it meanwhile."
    return "nothing to do for this fault."


def audit(
    quick: bool = True, contenders: list[Contender] | None = None, base: str | os.PathLike | None = None
) -> list[Row]:
    """Run every scenario against every contender and return the rows; ``quick`` picks the short list.

    Each scenario works in a fresh folder under ``base`` (the system's temp folder by default),
    removed when it ends.
    """
    if contenders is None:
        contenders = audit_contenders.quick() if quick else audit_contenders.full()
    # Longest first, so the last contender to start is not the one that keeps the others waiting.
    order = sorted(range(len(contenders)), key=lambda i: -contenders[i].comeback_wait)
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        futures = {i: pool.submit(one, contenders[i], base) for i in order}
        return [row for i in range(len(contenders)) for row in futures[i].result()]


def one(contender: Contender, base: str | os.PathLike | None) -> list[Row]:
    """Every scenario against one contender; a contender that cannot run here gets rows that say why."""
    try:
        version = contender.version()
    except Exception as exc:  # a contender missing here is a row that says why, not a failed audit
        return [
            Row(
                contender.name,
                "-",
                contender.settings,
                scenario,
                None,
                f"not installed: {type(exc).__name__}: {exc}",
                "-",
            )
            for scenario in SCENARIOS
        ]
    try:
        contender.open()
    except Exception as exc:  # a server that cannot start here is a row that says why
        contender.close()
        return [
            Row(
                contender.name,
                version,
                contender.settings,
                scenario,
                None,
                f"could not start: {type(exc).__name__}: {exc}",
                "-",
            )
            for scenario in SCENARIOS
        ]
    try:
        return scenarios(contender, version, base)
    finally:
        contender.close()


def scenarios(contender: Contender, version: str, base: str | os.PathLike | None) -> list[Row]:
    """Each scenario against one opened contender, each in a fresh folder removed when it ends."""
    rows = []
    for scenario in SCENARIOS:
        step(f"{contender.name}, {contender.settings}: {scenario}")
        folder = Path(tempfile.mkdtemp(prefix=f"audit-{scenario}-", dir=base))
        try:
            contender.setup(folder)
            verdict, note = RUNNERS[scenario](contender, folder, folder / "ledger.jsonl")
            rows.append(
                Row(
                    contender.name,
                    version,
                    contender.settings,
                    scenario,
                    verdict,
                    note,
                    advice(scenario, verdict, contender.lost_hint),
                )
            )
        except AuditError as exc:
            rows.append(Row(contender.name, version, contender.settings, scenario, None, str(exc), "-"))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    out = [
        "| queue | version | settings | scenario | runs | overlapping | stale accepted | completed twice "
        "| rerun after done | lost | stuck | measured | advice |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        v = r.verdict
        counts = (
            [
                str(x)
                for x in (
                    v.runs,
                    v.overlapping,
                    v.stale_accepted,
                    v.completed_twice,
                    v.rerun_after_done,
                    v.lost,
                    v.stuck,
                )
            ]
            if v
            else ["-"] * 7
        )
        out.append("| " + " | ".join([r.queue, r.version, r.settings, r.scenario] + counts + [r.note, r.advice]) + " |")
    return "\n".join(out)


def machine() -> str:
    return (
        f"{platform.system()} {platform.release()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )


def write_readme(rows: list[Row], quick: bool) -> None:
    """Replace the audit section of bench/README.md (between its markers) with this run's table."""
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = "\n".join(
        [
            BEGIN,
            f"Measured by `./dev bench audit{' --quick' if quick else ''}` on {when}; {machine()}.",
            "",
            table(rows),
            END,
        ]
    )
    text = README.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## audit.py: does the queue fence its zombies?\n\n" + section + "\n"
    README.write_text(text)


def queue_name(contender: Contender) -> str:
    """The queue a contender is, as ``--only`` names it: its name's first word, in lower case (``leaselab``,
    ``huey``)."""
    return contender.name.split(" (", 1)[0].lower()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="leaselab on SQLite, huey and persist-queue only")
    ap.add_argument("--readme", action="store_true", help="write the table into bench/README.md")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON (one object per row) instead")
    ap.add_argument(
        "--only",
        action="append",
        metavar="QUEUE",
        help="audit only this queue of the list (its name's first word, e.g. leaselab); repeatable",
    )
    args = ap.parse_args(argv)
    contenders = audit_contenders.quick() if args.quick else audit_contenders.full()
    if args.only:
        names = sorted({queue_name(c) for c in contenders})
        unknown = [n for n in args.only if n.lower() not in names]
        if unknown:
            ap.error(f"--only {unknown[0]}: not in this list; it has {', '.join(names)}")
        if args.readme:
            ap.error("--readme writes the whole table: it cannot be given with --only")
        contenders = [c for c in contenders if queue_name(c) in {n.lower() for n in args.only}]
    began = time.monotonic()
    rows = audit(quick=args.quick, contenders=contenders)
    step(f"audit done in {time.monotonic() - began:.0f} s")
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
        return 0
    print(f"{machine()}\n")
    print(table(rows))
    if args.readme:
        write_readme(rows, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
