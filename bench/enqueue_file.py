"""`leaselab enqueue --file`: how long N different payloads, one a line, take to enqueue, against the
baseline measured in the same run: `leaselab enqueue --count N` of one payload (the same batches, no
file to read). Each is the real command, run in-process on a fresh queue; SQLite always, and a
throw-away PostgreSQL server when this machine has one. The ratio is what to read: the seconds move
with the machine.

    ./dev bench enqueue_file              # 100,000 lines
    ./dev bench enqueue_file --lines 20000
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from leaselab.cli import main
from progress import step


def _timed(argv: list[str]) -> float:
    """Seconds the command takes; its printed ids are swallowed (and checked to be there)."""
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"leaselab {' '.join(argv[:1])} exited {code}")
    return seconds


def _targets(folder: Path) -> Iterator[tuple[str, Iterator[str]]]:
    """(backend, a fresh target each time it is asked) for SQLite, and PostgreSQL where one can start."""

    def files() -> Iterator[str]:
        n = 0
        while True:
            n += 1
            yield str(folder / f"q{n}.db")

    yield "sqlite", files()
    try:
        from leaselab.harness.pgserver import PgServer

        server = PgServer(fsync=True).start()
    except Exception as exc:  # no PostgreSQL binaries here: SQLite alone is measured
        step(f"no PostgreSQL server ({type(exc).__name__}): SQLite only")
        return
    try:  # stopped and removed at the end

        def databases() -> Iterator[str]:
            n = 0
            while True:
                n += 1
                yield server.create_database(f"bench{n}")

        yield "postgresql", databases()
    finally:
        server.stop()


def run(lines: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="leaselab-bench-") as tmp:
        folder = Path(tmp)
        jobs = folder / "jobs.jsonl"
        with jobs.open("w", encoding="utf-8") as out:
            for n in range(lines):
                out.write(json.dumps({"to": f"user{n}@example.org", "template": "welcome", "n": n}) + "\n")
        payload = json.dumps({"to": "user0@example.org", "template": "welcome", "n": 0})
        for backend, fresh in _targets(folder):
            step(f"{backend}: --count {lines} (the baseline)")
            baseline = _timed(["enqueue", payload, "--count", str(lines), "--db", next(fresh)])
            step(f"{backend}: --file with {lines} lines")
            from_file = _timed(["enqueue", "--file", str(jobs), "--db", next(fresh)])
            rows.append({"backend": backend, "lines": lines, "file_s": from_file, "count_s": baseline})
    return rows


def main_bench(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000, help="lines in the file (default 100,000)")
    args = parser.parse_args(argv)
    # A Markdown table, as the other benchmarks print: it pastes into bench/README.md as it is.
    print(f"| {'backend':<11} | {'lines':>8} | {'--file s':>9} | {'--count s':>10} | {'ratio':>6} | jobs/s (--file) |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in run(args.lines):
        print(
            f"| {row['backend']:<11} | {row['lines']:>8} | {row['file_s']:>9.2f} | {row['count_s']:>10.2f} | "
            f"{row['file_s'] / row['count_s']:>6.2f} | {row['lines'] / row['file_s']:>15,.0f} |"
        )


if __name__ == "__main__":
    main_bench()
