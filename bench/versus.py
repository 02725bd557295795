"""This checkout's leaselab beside an earlier commit's, on the same workloads, in turn, in one run.

    ./dev bench versus --rev REV [--jobs 5000] [--rounds 5] [--only sqlite-full-1,...] [--data DIR]

The other versions' ``leaselab/`` is taken from git (``git archive REV``) into a temporary folder, and
every measurement is a process of its own started the same way for both (``python -m leaselab
worker`` with the earlier tree or this one first on ``PYTHONPATH``), so nothing but the package
differs. Rounds alternate which side goes first (A B, then B A), and the ratio is taken round by
round, then its median printed: pairing keeps a ratio meaningful when a shared machine's speed
drifts. Each row prints jobs per second for both sides, the median ratio (this checkout ÷ REV; above
1 is faster) and the CPU seconds the worker process used per 1,000 jobs (user + system, the kernel's
own accounting of the finished child), which a busy machine disturbs less than the wall clock.
Both trees are byte-compiled first, as pip compiles an installed package. A run includes the
process's start: with a few thousand jobs that is a tenth of it, so a package that imports more
shows it here; ``--jobs 20000`` weighs the steady state.

Rows (``--only`` picks some):

- ``sqlite-{full,normal}-{1,8}``: one worker process drains N no-op jobs from a file already
  holding them, with one slot or eight, at that durability, until ``--exit-when-idle`` ends it;
- ``calls-normal``: the queue calls the one-slot worker makes per job (``complete_and_claim`` in
  a loop, no handler, no log), in a process of its own;
- ``postgres-{1,8}``: the worker on a throw-away PostgreSQL server (fsync on) this script starts
  and removes, each run in a fresh database.

Files live in ``bench/.data`` (a real disk, not tmpfs) unless ``--data`` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from progress import step

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

HANDLER = "def noop(job):\n    return None\n"

FILL = """
import sys
from leaselab import Queue
target, jobs, durability = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with Queue(target, durability=durability) as q:
    for start in range(0, jobs, 1000):
        q.enqueue_many([{"n": n} for n in range(start, min(jobs, start + 1000))])
"""

CALLS = """
import sys
from leaselab import Queue
with Queue(sys.argv[1], durability=sys.argv[2]) as q:
    job = q.claim("bench")
    while job is not None:
        job = q.complete_and_claim(job.id, job.token, job.payload, "bench")
"""

COUNT_DONE = """
import sys
from leaselab import Queue
with Queue(sys.argv[1]) as q:
    print(q.stats().get("done", 0))
"""


@dataclass(frozen=True)
class Side:
    name: str
    root: Path  # the folder holding this side's leaselab/ package

    def env(self, handlers: Path) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.root), str(handlers)])
        # Run from the handlers' folder: python -m and -c put the working folder first on sys.path,
        # and this checkout's own leaselab/ there would shadow the earlier one.
        env["VERSUS_CWD"] = str(handlers)
        env.pop("LEASELAB_DB", None)
        return env


@dataclass
class Sample:
    wall: float
    cpu: float


def export(rev: str, into: Path) -> Path:
    """``REV:leaselab/`` unpacked into ``into``; the commit is named as git resolved it."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "leaselab"], check=True, capture_output=True
    ).stdout
    tar = into / "leaselab.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    tar.unlink()
    return into


def run_child(cmd: list[str], env: dict[str, str]) -> Sample:
    """Wall and CPU seconds of one process, the CPU from the kernel's accounting of that child alone."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=env["VERSUS_CWD"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"versus: {' '.join(cmd[:4])}... exited {proc.returncode}:\n{err[-2000:]}")
    return Sample(wall, usage.ru_utime + usage.ru_stime)


def python(side: Side, handlers: Path, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, *args], env=side.env(handlers), cwd=handlers, check=True, capture_output=True, text=True
    )
    return out.stdout


def worker_cmd(target: str, slots: int, durability: str) -> list[str]:
    return [
        sys.executable, "-m", "leaselab", "worker", "--db", target, "--handler", "versus_handler:noop",
        "--name", "bench", "--exit-when-idle", "--concurrency", str(slots), "--durability", durability,
        "--poll", "0.01", "--max-poll", "0.05",
    ]  # fmt: skip


class Targets:
    """A fresh queue for each run: a new file, or a new database on the one server."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0
        self.server = None

    def sqlite(self) -> str:
        self.count += 1
        return str(self.folder / f"q{self.count}.db")

    def postgres(self) -> str:
        if self.server is None:
            from leaselab.harness.pgserver import PgServer  # this checkout's harness serves both sides

            self.server = PgServer(fsync=True)
            self.server.__enter__()
        self.count += 1
        return self.server.create_database(f"versus{self.count}")

    def close(self) -> None:
        if self.server is not None:
            self.server.__exit__(None, None, None)


def row_worker(kind: str, durability: str, slots: int) -> Callable[[Side, Targets, Path, int], Sample]:
    def run(side: Side, targets: Targets, handlers: Path, jobs: int) -> Sample:
        target = targets.postgres() if kind == "postgres" else targets.sqlite()
        python(side, handlers, "-c", FILL, target, str(jobs), durability)
        sample = run_child(worker_cmd(target, slots, durability), side.env(handlers))
        done = int(python(side, handlers, "-c", COUNT_DONE, target).strip())
        if done != jobs:
            raise SystemExit(f"versus: {side.name} finished {done} of {jobs} jobs")
        return sample

    return run


def row_calls(side: Side, targets: Targets, handlers: Path, jobs: int) -> Sample:
    target = targets.sqlite()
    python(side, handlers, "-c", FILL, target, str(jobs), "normal")
    return run_child([sys.executable, "-c", CALLS, target, "normal"], side.env(handlers))


ROWS: dict[str, Callable[[Side, Targets, Path, int], Sample]] = {
    "sqlite-full-1": row_worker("sqlite", "full", 1),
    "sqlite-normal-1": row_worker("sqlite", "normal", 1),
    "sqlite-full-8": row_worker("sqlite", "full", 8),
    "sqlite-normal-8": row_worker("sqlite", "normal", 8),
    "calls-normal": row_calls,
    "postgres-1": row_worker("postgres", "full", 1),
    "postgres-8": row_worker("postgres", "full", 8),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", required=True, help="the commit to compare with (a hash, a branch, HEAD~3)")
    ap.add_argument("--jobs", type=int, default=5000, help="jobs per run (default 5000)")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each side per row (default 5)")
    ap.add_argument("--only", default="", help="comma-separated rows: " + ", ".join(ROWS))
    ap.add_argument("--data", type=Path, default=HERE / ".data")
    args = ap.parse_args(argv)
    rows = [r for r in args.only.split(",") if r] or list(ROWS)
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"no row {', '.join(unknown)}; there are: {', '.join(ROWS)}")
    if args.jobs < 1 or args.rounds < 1:
        ap.error("--jobs and --rounds must be at least 1")
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.rev], capture_output=True, text=True
    ).stdout.strip()
    if not commit:
        ap.error(f"git does not know the commit {args.rev!r}")

    args.data.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="versus-", dir=args.data))
    targets = Targets(work)
    try:
        handlers = work / "handlers"
        handlers.mkdir()
        (handlers / "versus_handler.py").write_text(HANDLER)
        base = Side(commit, export(args.rev, Path(tempfile.mkdtemp(prefix="rev-", dir=work))))
        here = Side("here", ROOT)
        for side in (here, base):
            # Compiled first, as an installed package is (pip compiles on install): with
            # PYTHONDONTWRITEBYTECODE set, as on some CI machines, every start would compile the
            # whole package again, and the bigger tree would pay more for it at each run.
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(side.root / "leaselab")], check=True)
            # Each side's processes must load that side's package, not the other's.
            loaded = Path(python(side, handlers, "-c", "import leaselab; print(leaselab.__file__)").strip())
            if not loaded.is_relative_to(side.root):
                raise SystemExit(f"versus: the {side.name} side loads {loaded}, not its own tree {side.root}")
        print(f"this checkout ({describe()}) against {commit}; {args.jobs} jobs a run, {args.rounds} rounds")
        print(f"| row | here jobs/s | {commit} jobs/s | ratio | spread | CPU s/1k jobs here | CPU s/1k jobs {commit} |")
        print("|---|---|---|---|---|---|---|")
        for name in rows:
            run = ROWS[name]
            ours: list[Sample] = []
            theirs: list[Sample] = []
            for r in range(args.rounds):
                step(f"{name}: round {r + 1} of {args.rounds}")
                order = (here, base) if r % 2 == 0 else (base, here)
                for side in order:
                    (ours if side is here else theirs).append(run(side, targets, handlers, args.jobs))
            ratios = [t.wall / o.wall for o, t in zip(ours, theirs, strict=True)]
            rate = lambda s: args.jobs / statistics.median(x.wall for x in s)  # noqa: E731
            cpu = lambda s: 1000 * statistics.median(x.cpu for x in s) / args.jobs  # noqa: E731
            print(
                f"| {name} | {rate(ours):.0f} | {rate(theirs):.0f} | {statistics.median(ratios):.3f}"
                f" | {min(ratios):.3f}–{max(ratios):.3f} | {cpu(ours):.3f} | {cpu(theirs):.3f} |",
                flush=True,
            )
    finally:
        targets.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def describe() -> str:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "leaselab"], capture_output=True, text=True
    )
    return head.stdout.strip() + (" with changes" if dirty.stdout.strip() else "")


if __name__ == "__main__":
    sys.exit(main())
