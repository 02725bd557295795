"""How many test functions run on every backend: a pytest plugin for a collection run.

    python -m pytest --collect-only -q -p tests.support.count_backends [PATHS]

After collection it prints, per test function (a node id without its parameters), which backends its
``target`` parameter takes, and the totals: functions on all three (SQLite, APSW, PostgreSQL), on
SQLite and PostgreSQL (a module without ``TARGETS = IN_PROCESS_BACKENDS``), on one, and on none (no
``target``). ``LEASELAB_COUNT_LIST=1`` lists the functions of each group.
"""

from __future__ import annotations

import os
from collections import defaultdict

ALL = frozenset({"sqlite", "apsw", "postgresql"})


def pytest_collection_finish(session) -> None:
    backends: dict[str, set[str]] = {}
    for item in session.items:
        function = item.nodeid.split("[", 1)[0]
        callspec = getattr(item, "callspec", None)
        target = callspec.params.get("target") if callspec is not None else None
        backends.setdefault(function, set())  # every function is counted, with a target or not
        if isinstance(target, str) and target in ALL:
            backends[function].add(target)
    groups: dict[str, list[str]] = defaultdict(list)
    for function, seen in backends.items():
        if seen == ALL:
            groups["all three backends"].append(function)
        elif seen >= {"sqlite", "postgresql"}:
            groups["sqlite and postgresql"].append(function)
        elif seen:
            groups["one backend: " + ",".join(sorted(seen))].append(function)
        else:
            groups["no target parameter"].append(function)
    print(f"\ntest functions: {len(backends)}")
    for name in sorted(groups):
        print(f"  {name}: {len(groups[name])}")
        if os.environ.get("LEASELAB_COUNT_LIST"):
            for function in sorted(groups[name]):
                print(f"    {function}")
