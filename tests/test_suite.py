"""How the suite itself is run: its order for side-by-side workers and its quick tier (``conftest.py``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def collected(*args: str) -> list[str]:
    """The node ids a run of the whole suite with ``args`` would run, in order (no xdist: ``-n 0``)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


@pytest.fixture(scope="module")
def suite() -> list[str]:
    return collected()


def module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def test_the_longest_tests_come_first_and_each_module_and_lesson_stays_in_one_piece_in_its_order(suite):
    modules = [module(n) for n in suite]
    assert modules[0] == "tests/test_binder.py", modules[:3]
    # A module's tests are contiguous: --dist loadscope hands it to one worker whole, in this order.
    seen, previous = [], None
    for name in modules:
        if name != previous:
            assert name not in seen, f"{name} is split into two runs of the order"
            seen.append(name)
            previous = name
    # A lesson's cells keep the notebook's order (they share one kernel), and every lesson runs in both languages.
    for lang in ("en", "ru"):
        lesson = [n for n in suite if module(n) == f"notebooks/{lang}/01-lease.ipynb"]
        numbers = [int(n.rsplit(" ", 1)[1]) for n in lesson]
        assert lesson and numbers == sorted(numbers), lang
    stored = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").glob("*/*.ipynb"))
    assert sorted({m for m in modules if m.endswith(".ipynb")}) == stored
    # The browser walks and the lessons start before the library's many short tests.
    assert seen.index("tests/test_browser.py") < seen.index("tests/test_contract_queue.py")
    assert seen.index("notebooks/en/00-introduction.ipynb") < seen.index("tests/test_contract_queue.py")


def test_quick_runs_only_the_library_and_contract_modules_and_each_of_them(suite):
    # The root conftest.py, read from its file: "conftest" in sys.modules may be another folder's.
    spec = importlib.util.spec_from_file_location("suite_schedule", ROOT / "conftest.py")
    schedule = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(schedule)
    QUICK = schedule.QUICK
    quick = collected("--quick")
    assert sorted({module(n) for n in quick}) == sorted(QUICK)
    assert set(quick) < set(suite)
    slow = (
        "tests/test_browser.py",
        "tests/test_binder.py",
        "tests/test_chaos.py",
        "tests/test_fleet.py",
        "tests/test_processes.py",
        "notebooks/",
    )
    assert not [n for n in quick if n.startswith(slow)]


def test_the_stall_injector_stops_and_continues_a_kernel_below_its_command_and_keeps_the_exit_code():
    # A stand-in kernel: a grandchild whose command line names ipykernel_launcher, that prints the
    # longest it went without running (a SIGSTOP of 1 s shows as a gap of about 1 s). Its loop is the
    # measurement, for a fixed 4 s: not a wait for a condition.
    kernel = (
        "import time\nend = time.monotonic() + 4; last = time.monotonic(); gap = 0\n"
        "while time.monotonic() < end:\n    time.sleep(0.02); now = time.monotonic()\n"
        "    gap = max(gap, now - last); last = now\nprint(round(gap, 2))"
    )
    parent = (
        "import subprocess, sys; "
        f"p = subprocess.run([sys.executable, '-c', {kernel!r}, 'ipykernel_launcher']); sys.exit(3)"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "support" / "stall.py"),
            "--stall",
            "1",
            "--every",
            "0.3",
            "--",
            sys.executable,
            "-c",
            parent,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    stalls = [line for line in done.stderr.splitlines() if line.startswith("stall: kernel ")]
    assert stalls and f"stall: {len(stalls)} stalls of 1 s injected; the command exited 3" in done.stderr
    assert float(done.stdout.split()[-1]) >= 0.9, "the kernel was never stopped for the stall's length"
