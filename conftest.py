"""How the suite is scheduled when it runs side by side (``./dev test`` runs it under pytest-xdist),
and its quick tier (``./dev test --quick``).

Two rules, for any number of workers:

- A lesson's cells share one kernel, so every cell of one notebook goes to the same worker, in order:
  ``--dist loadscope`` sends each module (a test file, a notebook) to one worker, as nbval's README asks.
- The longest tests start first (``LONGEST_FIRST``), so the run ends when the sum of the short ones
  does and not one long test after the others finished. Within a tier, collection order is kept.

Without xdist (``pytest -n 0``, or pytest alone) the order is the same.
"""

from __future__ import annotations

import os

import pytest

# Markers and files, longest first: what a worker should take before anything else. A test's tier is
# the first entry that matches it; everything else keeps its place after them.
LONGEST_FIRST = (
    "binder",  # makes the environment binder/ installs (a minute), which the lessons run in
    "tests/test_browser.py",  # JupyterLab in Chromium, in both languages
    "tests/test_site.py",  # the web edition built, then every page of it in Chromium (3 minutes)
    "chaos",  # fault-injection runs with real processes
    "tests/test_newcomer.py",  # a clone, a venv, the README line by line
    "tests/test_server_lesson.py",
    "build",
    # One group per lesson, each a minute or so, after the two above: a lesson's kernel needs the
    # binder's environment, which the binder test is making meanwhile (a worker taking a lesson
    # sooner waited for it, idle: 148 s in a run of five workers).
    "notebooks/",
)


# ./dev test --quick: the library and the backend contract on every backend, in one process: no worker
# processes, no lessons, no browser, no fault injection. What to run after each edit; the full suite
# runs these too.
QUICK = (
    "tests/test_contract_queue.py",
    "tests/test_named_queues.py",
    "tests/test_unique_jobs.py",
    "tests/test_sqlite_file.py",
    "tests/test_sqlite_plans.py",
    "tests/test_sqlite_sync_levels.py",
    "tests/test_contract_bad_calls.py",
    "tests/test_contract_backend.py",
    "tests/test_apsw.py",
    "tests/test_bad_input.py",
    "tests/test_batch.py",
    "tests/test_worker.py",
    "tests/test_pulse.py",
    "tests/test_decisions.py",
    "tests/test_backoff.py",
    "tests/test_fence.py",
    "tests/test_effects.py",
    "tests/test_check.py",
    "tests/test_history.py",
    "tests/test_timeline.py",
    "tests/test_words.py",
    "tests/test_layers.py",
    "tests/test_lint.py",
)


def pytest_addoption(parser):
    parser.addoption(
        "--quick",
        action="store_true",
        help="only the library and the backend contract (conftest.QUICK): under a minute",
    )


def pytest_configure(config):
    # The run's first process names the run: its xdist workers inherit the variable, and what they share
    # (the binder's environment: tests/support/binder_env.py) is named by it. A pytest run inside a test is a
    # run of its own.
    if not hasattr(config, "workerinput"):
        from tests.support.binder_env import RUN_OWNER

        os.environ[RUN_OWNER] = str(os.getpid())


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        from tests.support.binder_env import remove_own

        remove_own()


def pytest_ignore_collect(collection_path, config):
    # With --quick, the other modules and the lessons are not even read: collecting them (their
    # imports, nbval parsing every notebook) took a tenth of the quick tier's time.
    if not config.getoption("quick") or collection_path.is_dir():
        return None
    if collection_path.suffix not in (".py", ".ipynb") or collection_path.name == "conftest.py":
        return None
    try:
        relative = collection_path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return None
    return True if relative not in QUICK else None


def _tier(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    for rank, entry in enumerate(LONGEST_FIRST):
        if ("/" in entry and path.startswith(entry)) or item.get_closest_marker(entry) is not None:
            return rank
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    if config.getoption("quick"):
        deselected = [item for item in items if item.nodeid.split("::", 1)[0] not in QUICK]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if item.nodeid.split("::", 1)[0] in QUICK]
    # A module goes to one worker whole, so it takes the tier of its longest test.
    module_tier: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        module_tier[module] = min(module_tier.get(module, len(LONGEST_FIRST)), _tier(item))
    items.sort(key=lambda item: module_tier[item.nodeid.split("::", 1)[0]])  # stable: order within a module kept
