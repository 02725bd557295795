"""Run a command while a stall injector freezes its lesson kernels at random: the lessons' checked
outputs must not depend on a kernel reacting within a few seconds.

    python tests/support/stall.py [--stall 2.5] [--every 4] [--seed 1] -- python -m pytest -n 0 notebooks/en

Every ``--every`` seconds on average (exponentially spaced, seeded) one live Jupyter kernel below the
command is stopped with SIGSTOP for ``--stall`` seconds, then continued: a machine that stops
scheduling the notebook for a moment, while the workers the lesson started run on. The workers
themselves are never stopped, so what a lesson shows is what it would show on a slow machine. Prints
each stall on stderr and exits with the command's code.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kernels(root: int) -> list[int]:
    found = []
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if any(b"ipykernel_launcher" in a or b"ipykernel" == a for a in argv):
            found.append(pid)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stall", type=float, default=2.5, help="seconds a kernel stays stopped (default 2.5)")
    parser.add_argument("--every", type=float, default=4.0, help="mean seconds between stalls (default 4)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    rng = random.Random(args.seed)
    child = subprocess.Popen(command)
    done = threading.Event()
    stalls = 0

    def inject() -> None:
        nonlocal stalls
        while not done.wait(rng.expovariate(1.0 / args.every)):
            live = kernels(child.pid)
            if not live:
                continue
            pid = rng.choice(live)
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            stalls += 1
            print(f"stall: kernel {pid} stopped for {args.stall:g} s", file=sys.stderr, flush=True)
            time.sleep(args.stall)
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    injector = threading.Thread(target=inject, daemon=True)
    injector.start()
    code = child.wait()
    done.set()
    injector.join(args.stall + 1)
    print(f"stall: {stalls} stalls of {args.stall:g} s injected; the command exited {code}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
