"""The checks a change must pass before anything runs: ruff's lint and format, and mypy over the whole
package, each as configured in pyproject.toml (``[tool.ruff]``, ``[tool.mypy]``). A failure prints
what the tool printed, so the message is the list of what to fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(tool: str, *argv: str) -> subprocess.CompletedProcess:
    pytest.importorskip(tool, reason=f"{tool} is in the quick extra: pip install -e '.[quick]'")
    return subprocess.run([sys.executable, "-m", tool, *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_to_fix():
    out = run("ruff", "check", "--no-fix", "--output-format", "concise")
    assert out.returncode == 0, f"ruff check (ruff check --fix fixes the [*] ones):\n{out.stdout}{out.stderr}"


def test_the_code_is_as_ruff_formats_it():
    out = run("ruff", "format", "--check", "--diff")
    assert out.returncode == 0, f"ruff format would change these (run ruff format):\n{out.stdout}{out.stderr}"


def test_the_whole_package_type_checks():
    out = run("mypy")  # the files and settings are pyproject.toml's [tool.mypy]
    assert out.returncode == 0, f"mypy:\n{out.stdout}{out.stderr}"
