"""Which planted bug each hunter catches: the simulator and ``leaselab chaos``, mutant by mutant.

    ./dev bench mutants [--only NAME[,NAME]] [--no-chaos] [--sim-seconds 60] [--chaos-seconds 20]

For every mutant in ``leaselab.sim.mutants.MUTANTS`` (the list itself, so a mutant added there is
measured without editing this file), and first for no mutant at all (the control row: both must
stay clean on today's code):

- **the simulator**: random schedules with the mutant planted in this process, until one breaks a
  promise or ``--sim-seconds`` pass (if ``leaselab.sim.explore`` has a ``hunt``, it is used; else
  ``search`` over the small scenarios in ``SIM_SCENARIOS``, each given an equal share of the
  time); then ``shrink`` reduces the witness, whose size is given as the schedule's actions (of
  which faults) and the lines of its trace, drain included.
- **chaos**: ``python -m leaselab chaos`` on real worker processes, bounded by ``--chaos-seconds``
  of faults (and killed if the whole run passes ``CHAOS_TIMEOUT``). The mutant goes into every
  process it starts through a ``sitecustomize.py`` in a temporary folder put first on
  ``PYTHONPATH``, which enters ``planted(os.environ["LEASELAB_MUTANT"])`` as the interpreter starts
  and writes one line per process into a proof file; the table's *planted in* column counts those
  processes against the worker processes chaos reports, so a mutant that never reached the workers
  cannot pass for one chaos missed. Before the table, ``failures_completed`` is planted the same
  way in one ``leaselab worker`` process whose handler always raises: its job must end done, not
  dead, or the run stops (the planting would prove nothing).

Chaos's own verdict includes every rule of ``leaselab check``, the specification's judge of the
history among them. Prints a markdown table on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from leaselab.sim import explore, mutants  # noqa: E402
from leaselab.sim.world import FAULTS  # noqa: E402
from progress import step  # noqa: E402
from throughput import machine  # noqa: E402

SHRINK_BUDGET = 30.0
CHAOS_WORKERS, CHAOS_JOBS, CHAOS_LEASE = 4, 200, 1.0
# Every job sleeps a little and fails its first attempt, so retries, backoffs and deaths happen.
CHAOS_PAYLOAD = {"seconds": 0.1, "fail": 1}
CHAOS_TIMEOUT = 240.0  # seconds a whole chaos run may take, drain and check included, before it is stopped

SITECUSTOMIZE = """\
import os

if os.environ.get("LEASELAB_MUTANT"):
    from leaselab.sim.mutants import planted

    _planted = planted(os.environ["LEASELAB_MUTANT"])
    _planted.__enter__()  # for the life of this process
    with open(os.environ["LEASELAB_MUTANT_PROOF"], "a") as _proof:
        _proof.write(f"{os.getpid()} {os.environ['LEASELAB_MUTANT']}\\n")
"""


def planting_env(folder: Path, name: str | None) -> dict[str, str]:
    """The environment that plants ``name`` in every Python process started with it (None: nothing)."""
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    env.pop("LEASELAB_MUTANT", None)
    if name is not None:
        env["LEASELAB_MUTANT"] = name
        env["LEASELAB_MUTANT_PROOF"] = str(folder / "proof.txt")
    return env


def prove_planting(folder: Path) -> None:
    """Plant ``failures_completed`` in a real ``leaselab worker`` whose handler always raises: its job must end done."""
    db = folder / "proof.db"
    env = planting_env(folder, "failures_completed")
    env["LEASELAB_DB"] = str(db)
    subprocess.run(
        [sys.executable, "-m", "leaselab", "enqueue", '{"fail": true}'],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )
    subprocess.run(
        [sys.executable, "-m", "leaselab", "worker", "--handler", "leaselab.harness.demo:task", "--exit-when-idle"],
        env=env,
        check=True,
        timeout=120,
        capture_output=True,
    )
    with sqlite3.connect(db) as conn:
        status = conn.execute("SELECT status FROM jobs").fetchone()[0]
    if status != "done":
        sys.exit(f"mutants: the planting did not reach the worker process (its failing job ended {status}, not done)")
    step("planting proven: a worker process with failures_completed planted completed a job whose handler raised")


def hunt_in_sim(name: str | None, seconds: float) -> dict[str, Any]:
    """The simulator against mutant ``name`` (None: the code as it is): ``explore.hunt`` over its portfolio,
    as ``leaselab simulate`` runs it; found or not, the time it took (shrinking included), schedules, witness."""
    start = time.monotonic()
    try:
        with mutants.planted(name) if name is not None else contextlib.nullcontext():
            answer = explore.hunt(seconds=seconds, shrink_seconds=SHRINK_BUDGET)
    except Exception as exc:  # a bug that breaks the world itself is a finding of its own
        return {"caught": None, "seconds": time.monotonic() - start, "schedules": 0, "error": repr(exc)[:120]}
    if answer.run is None or answer.found is None:
        return {"caught": False, "seconds": answer.seconds, "schedules": answer.schedules}
    shrunk = answer.run
    faults = sum(1 for a in shrunk.actions if a[0] in FAULTS)
    return {
        "caught": True,
        "seconds": answer.seconds,
        "schedules": answer.schedules,
        "kind": shrunk.violation.kind if shrunk.violation else "?",
        "actions": len(shrunk.actions),
        "faults": faults,
        "lines": len(shrunk.trace),
        "workers": shrunk.scenario.workers,
        "jobs": shrunk.scenario.jobs,
    }


def hunt_in_chaos(name: str | None, seconds: float, seed: int) -> dict[str, Any]:
    """``leaselab chaos`` with mutant ``name`` planted in every process: caught or not, time, processes planted."""
    with tempfile.TemporaryDirectory(prefix="leaselab-mutants-") as tmp:
        folder = Path(tmp)
        env = planting_env(folder, name)
        command = [
            sys.executable,
            "-m",
            "leaselab",
            "chaos",
            "--db",
            str(folder / "chaos.db"),
            "--out",
            str(folder / "run"),
            "--handler",
            "leaselab.harness.demo:task",
            "--workers",
            str(CHAOS_WORKERS),
            "--jobs",
            str(CHAOS_JOBS),
            "--seconds",
            str(seconds),
            "--lease",
            str(CHAOS_LEASE),
            "--seed",
            str(seed),
            "--payload",
            json.dumps(CHAOS_PAYLOAD),
            "--json",
        ]
        start = time.monotonic()
        # A session of its own, so a run past its bound is stopped with every worker it started.
        proc = subprocess.Popen(
            command,
            env=env,
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=CHAOS_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)  # chaos stops its workers on SIGTERM
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
            return {"caught": None, "seconds": time.monotonic() - start, "error": f"stopped after {CHAOS_TIMEOUT:g} s"}
        took = time.monotonic() - start
        proof = folder / "proof.txt"
        planted = len(set(proof.read_text().split("\n")) - {""}) if proof.exists() else 0
        try:
            result = json.loads(out)
        except ValueError:
            return {"caught": None, "seconds": took, "error": f"exit {proc.returncode}: {err.strip()[-160:]}"}
        kinds = sorted({a["kind"] for a in result["report"]["anomalies"]})
        extra = [k for k, bad in (("not drained", not result["drained"]), ("missing", result["missing"])) if bad]
        return {
            "caught": not result["clean"],
            "seconds": took,
            "kinds": kinds + extra,
            "workers": result["workers"],
            "planted": planted,
            "overlapping": result["faults_overlapping_attempts"],
        }


def sim_cells(r: dict[str, Any]) -> list[str]:
    if r["caught"] is None:
        return ["error", f"{r['seconds']:.1f}", str(r["schedules"]), r["error"]]
    if not r["caught"]:
        return ["no", f"{r['seconds']:.1f}", f"{r['schedules']:,}", "–"]
    faults = f"{r['faults']} fault" + ("" if r["faults"] == 1 else "s")
    witness = f"{r['actions']} actions ({faults}), {r['lines']} lines; `{r['kind']}`"
    return ["**yes**", f"{r['seconds']:.1f}", f"{r['schedules']:,}", witness]


def chaos_cells(r: dict[str, Any] | None) -> list[str]:
    if r is None:
        return ["–", "–", "–"]
    if r["caught"] is None:
        return ["error", f"{r['seconds']:.0f}", r["error"]]
    what = ", ".join(f"`{k}`" for k in r["kinds"]) or "clean"
    planted = f"; planted in {r['planted']} processes ({r['workers']} workers + chaos)" if r["planted"] else ""
    return ["**yes**" if r["caught"] else "no", f"{r['seconds']:.0f}", what + planted]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--only", default=None, help="comma-separated mutant names (default: every one, and the control)"
    )
    parser.add_argument("--no-chaos", action="store_true", help="the simulator only")
    parser.add_argument("--sim-seconds", type=float, default=60.0, help="the simulator's time per mutant (default 60)")
    parser.add_argument("--chaos-seconds", type=float, default=20.0, help="chaos's faults per mutant (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="chaos's seed, the same for every mutant (default 1)")
    args = parser.parse_args()
    names: list[str | None] = [None, *(m.name for m in mutants.MUTANTS)]
    if args.only:
        wanted = args.only.split(",")
        for name in wanted:
            mutants.find(name)  # an unknown name is refused with the list
        names = [n for n in names if n in wanted]
    if not args.no_chaos:
        with tempfile.TemporaryDirectory(prefix="leaselab-proof-") as tmp:
            step("proving the planting reaches a worker process")
            prove_planting(Path(tmp))
    rows = []
    for name in names:
        label = name or "(none: the control)"
        step(f"{label}: the simulator, up to {args.sim_seconds:g} s")
        sim = hunt_in_sim(name, args.sim_seconds)
        chaos = None
        if not args.no_chaos:
            step(f"{label}: leaselab chaos, {args.chaos_seconds:g} s of faults")
            chaos = hunt_in_chaos(name, args.chaos_seconds, args.seed)
        rows.append((label, sim, chaos))
    print(f"machine: {machine()}")
    print(
        f"simulator: up to {args.sim_seconds:g} s a mutant, witness shrunk for up to {SHRINK_BUDGET:g} s; chaos: "
        f"{CHAOS_WORKERS} workers, {CHAOS_JOBS} jobs, payload {json.dumps(CHAOS_PAYLOAD)}, lease {CHAOS_LEASE:g} s, "
        f"{args.chaos_seconds:g} s of faults, seed {args.seed}"
    )
    print()
    print("| mutant | simulator | s | schedules | witness (shrunk) | chaos | s | chaos found |")
    print("|---|---|---|---|---|---|---|---|")
    for label, sim, chaos in rows:
        print(
            "| "
            + " | ".join([f"`{label}`" if not label.startswith("(") else label, *sim_cells(sim), *chaos_cells(chaos)])
            + " |"
        )
    caught = sum(1 for label, sim, _ in rows if not label.startswith("(") and sim["caught"])
    total = sum(1 for label, _, _ in rows if not label.startswith("("))
    line = f"\nthe simulator caught {caught} of {total} mutants"
    if not args.no_chaos:
        by_chaos = sum(1 for label, _, c in rows if not label.startswith("(") and c and c["caught"])
        line += f"; chaos caught {by_chaos} of {total}"
    print(line)


if __name__ == "__main__":
    main()
