"""How fast the simulator explores: schedules per minute and simulated time per real second, on one core.

    ./dev bench simulate [--schedules 300] [--repeat 3] [--seed 0] [--rev REV]

The scenario is the speed target's (issue 39, item 8): four workers, fifty jobs, a one-second
lease (``Scenario(workers=4, jobs=50, lease=1.0)``, every fault the world has), random schedules
from ``--seed`` on, each drained to the end as ``leaselab simulate`` runs them. The process is
pinned to one core where the system allows it, so the figure is what one core does.

Beside it, in the same rounds, the *bare queue calls*: for each schedule the simulator ran, a fresh
``Queue(":memory:")`` that enqueues as many jobs as that schedule claimed and drains them with
``claim`` + ``complete``, in a loop, with nothing around them. The simulator makes those same calls
on the same real statements (and heartbeats, failures, reaps besides), so simulator ÷ bare calls
says what the simulator itself adds: the model it checks every step against, the rows it reads back
after each call, the workers' decisions and the faults. A third pass runs the same schedules with every
public ``Queue`` method timed: the time inside the queue's own calls is the simulator's floor (what
is left with nothing of the simulator's around them). Rounds interleave the three; each figure is
the median of the rounds. The machines these run on are shared: the CPU-time row says what the
process itself used, which another program's load on the same core moves less than the real time.

With ``--rev REV`` the same schedules also run on that commit's simulator (its ``leaselab/``, taken
from git, imported beside this checkout's under another name: the package imports itself only
relatively), in the same process, the two taking turns round by round (which goes first alternates):
a shared machine's load then falls on both alike, and the ratio of each round, then their median,
says what the change between them did. Both must give the same traces (``tests/test_sim_traces.py``
pins them); the script checks the first schedule's.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from leaselab import Queue  # noqa: E402
from leaselab.sim import explore  # noqa: E402
from leaselab.sim.world import Scenario  # noqa: E402
from progress import step  # noqa: E402
from throughput import machine  # noqa: E402
from versus import export  # noqa: E402

SCENARIO = Scenario(workers=4, jobs=50, lease=1.0)
TARGET_PER_MINUTE = 1000.0  # schedules a minute on one core
TARGET_SPEEDUP = 100.0  # simulated seconds per real second


def one_core() -> str:
    """Pin this process to one core, if the system lets a process choose; say which."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity here)"
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[0]})
    return f"pinned to core {cores[0]}"


def earlier(rev: str, into: Path) -> tuple[Any, Any]:
    """REV's ``leaselab/`` as the package ``leaselab_rev``: (its ``sim.explore``, its scenario like ``SCENARIO``)."""
    export(rev, into)
    (into / "leaselab").rename(into / "leaselab_rev")
    sys.path.insert(0, str(into))
    explore_rev = importlib.import_module("leaselab_rev.sim.explore")
    world_rev = importlib.import_module("leaselab_rev.sim.world")
    return explore_rev, world_rev.Scenario(workers=SCENARIO.workers, jobs=SCENARIO.jobs, lease=SCENARIO.lease)


def simulate(
    schedules: int, seed: int, runner: Any = explore, scenario: Any = SCENARIO
) -> tuple[float, float, float, list[int], int]:
    """Run ``schedules`` schedules from ``seed``: (real seconds, CPU seconds, simulated seconds, claims per
    schedule, steps).

    A schedule that breaks a promise stops nothing here: on today's code none should, and a
    broken one is counted like any other (its run ended at the violation)."""
    claims, virtual, steps = [], 0.0, 0
    start, cpu = time.perf_counter(), time.process_time()
    for n in range(schedules):
        run = runner.run(scenario, seed + n)
        virtual += run.virtual
        steps += run.steps
        claims.append(sum(1 for line in run.trace if " holds job " in line))
        if run.failed:
            print(f"note: seed {seed + n} broke a promise: {run.violation}", file=sys.stderr)
    return time.perf_counter() - start, time.process_time() - cpu, virtual, claims, steps


def queue_share(schedules: int, seed: int) -> tuple[float, float]:
    """The same schedules again, every public ``Queue`` method timed (the outermost call only: one that calls
    another is counted once): (seconds inside the queue's calls, seconds in all). The first is the floor: the
    real statements and the backend's path to them, which the simulator exists to run, with nothing of its
    own around them. The timers add a little to both."""
    inside, depth = 0.0, 0
    saved = {name: value for name, value in vars(Queue).items() if not name.startswith("_") and callable(value)}

    def timed(method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            nonlocal inside, depth
            depth += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                depth -= 1
                if depth == 0:
                    inside += time.perf_counter() - start

        return call

    for name, method in saved.items():
        setattr(Queue, name, timed(method))
    try:
        start = time.perf_counter()
        for n in range(schedules):
            explore.run(SCENARIO, seed + n)
        return inside, time.perf_counter() - start
    finally:
        for name, method in saved.items():
            setattr(Queue, name, method)


def bare_calls(claims: list[int]) -> float:
    """The same claims as real ``Queue(":memory:")`` calls, claim + complete, one queue per schedule: seconds."""
    start = time.perf_counter()
    for count in claims:
        queue = Queue(":memory:")
        for _ in range(count):
            queue.enqueue({"work": 0.4})
        while (job := queue.claim("w1", 1.0)) is not None:
            queue.complete(job.id, job.token, {"job": job.id})  # type: ignore[arg-type]  # a claimed job has a token
        queue.close()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schedules", type=int, default=300, help="schedules per round (default 300)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="the first schedule's seed (default 0)")
    parser.add_argument("--rev", help="also run the same schedules on this commit's simulator, in turn (e.g. main)")
    args = parser.parse_args()
    if args.schedules < 1 or args.repeat < 1:
        parser.error("--schedules and --repeat must be at least 1")
    pinned = one_core()
    rev = None
    if args.rev:
        folder = tempfile.TemporaryDirectory(prefix="leaselab-rev-")
        try:
            rev = earlier(args.rev, Path(folder.name))
        except subprocess.CalledProcessError as exc:
            parser.error(f"--rev {args.rev}: git cannot take leaselab/ from it: {exc.stderr.decode().strip()}")
        if rev[0].run(rev[1], args.seed).trace != explore.run(SCENARIO, args.seed).trace:
            sys.exit(f"{args.rev}'s simulator gives another trace for seed {args.seed}: not the same simulation")
    rounds = []
    for r in range(args.repeat):
        step(f"round {r + 1}/{args.repeat}: {args.schedules} schedules of {SCENARIO}")
        before = None
        if rev is not None and r % 2 == 0:  # which side goes first alternates
            step(f"round {r + 1}/{args.repeat}: the same on {args.rev}'s simulator")
            before = simulate(args.schedules, args.seed, *rev)
        real, cpu, virtual, claims, steps = simulate(args.schedules, args.seed)
        if rev is not None and r % 2 == 1:
            step(f"round {r + 1}/{args.repeat}: the same on {args.rev}'s simulator")
            before = simulate(args.schedules, args.seed, *rev)
        step(f"round {r + 1}/{args.repeat}: the bare queue calls, {sum(claims)} claims + completions")
        bare = bare_calls(claims)
        step(f"round {r + 1}/{args.repeat}: the same schedules, the queue's own calls timed")
        inside, whole = queue_share(args.schedules, args.seed)
        rounds.append(
            {
                "per_minute": args.schedules / real * 60,
                "per_cpu_minute": args.schedules / cpu * 60,
                "speedup": virtual / real,
                "ratio": real / bare,
                "steps_per_s": steps / real,
                "claims": sum(claims) / args.schedules,
                "virtual": virtual / args.schedules,
                "bare_per_minute": args.schedules / bare * 60,
                "queue_share": inside / whole,
                "queue_per_minute": args.schedules / inside * 60,
                **(
                    {}
                    if before is None
                    else {
                        "rev_per_minute": args.schedules / before[0] * 60,
                        "rev_per_cpu_minute": args.schedules / before[1] * 60,
                        "rev_ratio": before[0] / real,
                        "rev_cpu_ratio": before[1] / cpu,
                    }
                ),
            }
        )

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    def verdict(value: float, target: float) -> str:
        return "**met**" if value >= target else f"not met ({value / target:.2f} of the target)"

    print(f"machine: {machine()}, {pinned}")
    print(
        f"scenario: {SCENARIO.workers} workers, {SCENARIO.jobs} jobs, lease {SCENARIO.lease:g} s, "
        f"faults {', '.join(SCENARIO.faults)} (at most {SCENARIO.max_faults} a schedule); "
        f"{args.schedules} schedules a round from seed {args.seed}, {args.repeat} rounds, medians"
    )
    print(
        f"a schedule: {med('virtual'):.1f} s simulated, {med('claims'):.0f} claims, "
        f"{med('steps_per_s'):,.0f} steps a real second"
    )
    print()
    print("| measure | target | measured | verdict |")
    print("|---|---|---|---|")
    print(
        f"| schedules a minute, one core | ≥ {TARGET_PER_MINUTE:,.0f} | {med('per_minute'):,.0f} | "
        f"{verdict(med('per_minute'), TARGET_PER_MINUTE)} |"
    )
    print(
        f"| schedules a minute of this process's CPU time | ≥ {TARGET_PER_MINUTE:,.0f} | "
        f"{med('per_cpu_minute'):,.0f} | "
        f"{verdict(med('per_cpu_minute'), TARGET_PER_MINUTE)} |"
    )
    print(
        f"| simulated seconds per real second | ≥ {TARGET_SPEEDUP:g} | {med('speedup'):.0f} | "
        f"{verdict(med('speedup'), TARGET_SPEEDUP)} |"
    )
    print(
        f'| the same claims + completions as bare `Queue(":memory:")` calls, schedules\' worth a minute | – | '
        f"{med('bare_per_minute'):,.0f} | the floor under the first row |"
    )
    print(f"| simulator ÷ bare queue calls, real time | – | {med('ratio'):.1f}× | what the simulator adds |")
    print(
        f"| the queue calls inside the simulator alone, schedules' worth a minute | – | "
        f"{med('queue_per_minute'):,.0f} | the floor: {med('queue_share'):.0%} of a schedule's time |"
    )
    if rev is not None:
        print(
            f"| {args.rev}'s simulator: schedules a minute, one core (CPU time) | – | "
            f"{med('rev_per_minute'):,.0f} ({med('rev_per_cpu_minute'):,.0f}) | the same schedules, in turn |"
        )
        print(
            f"| this checkout ÷ {args.rev}, schedules a minute: real time (CPU time) | – | "
            f"{med('rev_ratio'):.2f}× ({med('rev_cpu_ratio'):.2f}×) | the median of the rounds' ratios |"
        )


if __name__ == "__main__":
    main()
