"""How many promises does a failover break? ``leaselab chaos --faults failover``, synchronous beside asynchronous.

    ./dev bench failover [--runs 4] [--seconds 22] [--workers 2] [--concurrency 2]

Each run is one ``leaselab.chaos.run`` on a throw-away primary and standby
(``leaselab.chaos.failover.replicated``, in a folder in memory when there is room): real workers
on the multi-host URL, journaling what they are told, 0.05 s jobs, and the nemesis failing the
primary over every 3 to 6 s (each failover waits for a few more acknowledged outcomes, stops the
primary at once, promotes the standby and copies a new one onto the dead primary's port). With
``async`` the standby is held behind from the moment each failover begins, so what the workers are
told meanwhile never reaches it. The runs of a mode use the same seeds as the other mode's, so
both get the same failovers at the same offsets. The report judges the server's history and the
journals; the table sums the runs of each mode: failovers applied, outcomes the workers were told
of, fences the journals show handed to two tokens, acknowledged outcomes the promoted server lacks,
and runs that came out clean. Counts, not times: nothing here is a speed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from leaselab.chaos import plan, run
from leaselab.chaos.failover import REPLICATIONS, replicated
from progress import step

HANDLER = "leaselab.harness.demo:sleepy"
PAYLOAD = {"seconds": 0.05}
JOBS_PER_SECOND = 120  # enqueued per second of faults: more than the fleet drains, so a backlog outlasts them


def _memory() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


def _told(folder: Path) -> int:
    return sum(
        json.loads(line)["kind"] in ("completed", "failed")
        for path in (folder / "journal").glob("*.jsonl")
        for line in path.read_text().splitlines()
        if line.endswith("}")
    )


def one(replication: str, seed: int, args: argparse.Namespace, folder: Path) -> dict:
    with replicated(replication, parent=_memory()) as servers:
        url = servers.create_database("chaos")
        result = run(
            url,
            HANDLER,
            workers=args.workers,
            concurrency=args.concurrency,
            jobs=int(args.seconds * JOBS_PER_SECOND),
            payload=PAYLOAD,
            seconds=args.seconds,
            faults="failover",
            seed=seed,
            servers=servers,
            folder=folder,
            drain_timeout=600,
        )
    totals = result.report.totals
    return {
        "failovers": result.fault_counts().get("failover", 0),
        "missed": sum(a.missed is not None for a in result.applied),
        "told": _told(folder),
        "fence_handed_twice": totals.get("fence_handed_twice", 0),
        "acknowledged_lost": totals.get("acknowledged_lost", 0),
        "clean": int(result.clean),
        "anomalies": sum(totals.values()),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=4, help="runs of each mode (default 4)")
    parser.add_argument("--seconds", type=float, default=22.0, help="seconds of faults per run (default 22)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args(argv)
    seeds = list(range(1, args.runs + 1))
    planned = sum(
        len(plan(s, seconds=args.seconds, workers=args.workers, lease=1.0, faults=["failover"]).steps) for s in seeds
    )
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(
        f"# {args.runs} runs a mode, seeds {seeds[0]}..{seeds[-1]}, {planned} failovers planned a mode; commit {commit}"
    )
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for mode in REPLICATIONS:
                step(f"{mode} replication, seed {seed}: {args.seconds:g} s of failovers, then the drain")
                got = one(mode, seed, args, Path(tmp) / f"{mode}-{seed}")
                print(f"  {mode} seed {seed}: {got}", file=sys.stderr, flush=True)
                rows[mode] = {k: rows.get(mode, {}).get(k, 0) + v for k, v in got.items()}
    print(
        "| replication | failovers (missed) | outcomes the workers were told of | fences handed out twice "
        "| acknowledged outcomes lost | other anomalies | clean runs |"
    )
    print("|---|---|---|---|---|---|---|")
    names = {"sync": "synchronous (`on`)", "async": "asynchronous, standby held behind"}
    for mode, r in rows.items():
        other = r["anomalies"] - r["fence_handed_twice"] - r["acknowledged_lost"]
        print(
            f"| {names[mode]} | {r['failovers']} ({r['missed']}) | {r['told']:,} | {r['fence_handed_twice']:,} "
            f"| {r['acknowledged_lost']:,} | {other:,} | {r['clean']}/{args.runs} |"
        )


if __name__ == "__main__":
    main()
