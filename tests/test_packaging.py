"""The wheel a host that runs workers installs holds every module and schema of the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_module_and_schema_under_leaselab(tmp_path):
    # Built from a copy, so the build's own folders never land in the checkout.
    src = tmp_path / "src"
    shutil.copytree(
        REPO,
        src,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "build", "*.egg-info", "__pycache__", "notebooks", "my-lessons", "artifacts", ".hypothesis"
        ),
    )
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("leaselab-*.whl")
    held = set(zipfile.ZipFile(wheel).namelist())
    on_disk = {
        p.relative_to(REPO).as_posix()
        for p in (REPO / "leaselab").rglob("*")
        if p.suffix in (".py", ".sql") and "__pycache__" not in p.parts
    }
    assert sorted(on_disk - held) == []
