"""What the lab writes beside its database is git-ignored: docs/lab.md's lab, run inside a repository,
leaves ``git status`` clean."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from leaselab import Queue
from leaselab.harness.fleet import faults_path, logs_path
from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parent.parent
PG_URL = "postgresql://app@db.example:5432/jobs"  # docs/postgres.md's example server; nothing connects to it


def git(repo: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *argv],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A git repository holding leaselab's .gitignore, committed, as the current folder."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    folder = tmp_path / "repo"
    folder.mkdir()
    git(folder, "init", "-q")
    shutil.copy(REPO / ".gitignore", folder / ".gitignore")
    git(folder, "add", ".gitignore")
    git(folder, "commit", "-q", "-m", "ignore")
    monkeypatch.chdir(folder)
    return folder


def untracked(repo: Path) -> str:
    return git(repo, "status", "--porcelain", "--untracked-files=all").stdout


def test_the_readmes_lab_leaves_only_ignored_files_beside_its_database(repo):
    pytest.importorskip("ipywidgets")
    from leaselab.lab import Lab

    lab = Lab("lab.db", lang="en", lease=3.0, refresh=None)  # docs/lab.md's snippet, without the refresher
    try:
        lab.enqueue(2, kind="sleep", seconds=0.05)
        name = lab.spawn()
        wait_until(lambda: lab.queue.stats()["done"] == 2, message="the lab's worker to finish both jobs")
        lab.pause(name)
        lab.resume(name)
        lab.kill(name)
    finally:
        lab.close()
    # It did write its side files, there, by the names the fleet's own functions give them.
    assert faults_path("lab.db").resolve() == (repo / "lab.db.faults.jsonl").resolve()
    assert faults_path("lab.db").exists() and any(logs_path("lab.db").iterdir())
    assert untracked(repo) == "", f"the lab left files git does not ignore:\n{untracked(repo)}"


@pytest.mark.parametrize("db", ["lab.db", "sub/queue.db", PG_URL])
def test_every_side_file_a_fleet_names_is_ignored_by_git(repo, db):
    paths = [faults_path(db), logs_path(db) / "w1.log"]
    if db != PG_URL:
        paths += [Path(f"{db}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")]  # SQLite's own
    for path in paths:
        relative = Path(path).resolve().relative_to(repo.resolve()) if Path(path).is_absolute() else Path(path)
        done = git(repo, "check-ignore", "--no-index", "-q", str(relative), check=False)
        assert done.returncode == 0, f"{relative} is not git-ignored"


def test_a_queue_file_and_its_wal_beside_it_are_ignored_too(repo):
    with Queue("jobs.db") as q:
        q.enqueue(1)
        assert untracked(repo) == ""
