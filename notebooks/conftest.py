"""nbval runs the lessons as tests, each in a kernel of the environment binder/ installs.

- The kernel (``binder_env.KERNEL``, named in ``addopts``) is the Python of the fresh environment
  ``tests/support/binder_env.py`` makes once per run from ``binder/requirements.txt``: a lesson that passes
  here runs on what mybinder.org installs, and on nothing the tests installed beside it.
- Each lesson's kernel gets a TMPDIR of its own. Once the kernel has stopped, no scratch folder may
  be left in it and no process may name it (a worker, or the server of lesson 6 or 7, whose data folder is
  there): the lesson's last cell fails at teardown otherwise.
- A lesson that starts its own PostgreSQL server (lessons 6 and 7) skips, with the reason, on a machine
  without PostgreSQL or psycopg, except in CI (``CI`` set), which must run them all, as
  ``tests/conftest.py`` does for the PostgreSQL tests.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the suite's helpers
from tests.support import binder_env
from tests.support.polling import wait_until
from tests.support.servers import processes_naming

# A lesson's janitor (lessons.cleanup_at_exit) outlives its kernel by 2 s on purpose.
LEFT_BEHIND_WAIT = 10

NEEDS_A_SERVER = "PgServer("  # what a lesson that starts its own server has in a code cell


def _why_no_server() -> str | None:
    try:
        import psycopg  # noqa: F401  (the postgres extra)

        from leaselab.harness.pgserver import PgUnavailable, find_bin_dir
    except ImportError as exc:
        return f"lesson needs psycopg (pip install 'leaselab[postgres]'): {exc}"
    try:
        find_bin_dir()
    except PgUnavailable as exc:
        return f"lesson starts a PostgreSQL server: {exc}"
    return None


def pytest_collection_modifyitems(config, items):
    lessons = {Path(str(item.fspath)) for item in items if str(item.fspath).endswith(".ipynb")}
    needing = {path for path in lessons if NEEDS_A_SERVER in path.read_text(encoding="utf-8")}
    if not needing or os.environ.get("CI"):
        return
    reason = _why_no_server()
    if reason is None:
        return
    for item in items:
        if Path(str(item.fspath)) in needing:
            item.add_marker(pytest.mark.skip(reason=reason))


def _is_lesson(item: pytest.Item) -> bool:
    return item.path.suffix == ".ipynb"


def _scratch(item: pytest.Item) -> Path:
    return binder_env.home() / "tmp" / f"{item.path.parent.name}-{item.path.stem}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    # Around nbval's own setup, which starts the notebook's kernel at its first cell: the kernel
    # inherits these variables from this process, which gets its own back at once.
    if not _is_lesson(item) or item.get_closest_marker("skip") is not None:
        return (yield)
    folder = binder_env.ensure()
    scratch = _scratch(item)
    scratch.mkdir(parents=True, exist_ok=True)
    saved = {name: os.environ.get(name) for name in ("JUPYTER_PATH", "TMPDIR")}
    os.environ.update(binder_env.kernel_lookup(folder), TMPDIR=str(scratch))
    try:
        return (yield)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    scratch = _scratch(item) if _is_lesson(item) else None
    if scratch is not None and (nextitem is None or nextitem.path != item.path) and scratch.exists():
        # nbval's teardown of the notebook, just done, stopped its kernel.

        def left() -> list[str]:
            return [p.name for p in scratch.iterdir()] + processes_naming(str(scratch))

        try:
            wait_until(lambda: not left(), LEFT_BEHIND_WAIT, interval=0.25, message="the lesson to leave nothing")
        except pytest.fail.Exception:
            pytest.fail(f"{item.path.name} left behind, {LEFT_BEHIND_WAIT} s after its kernel stopped: {left()}")
        shutil.rmtree(scratch, ignore_errors=True)
    return result
