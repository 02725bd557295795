"""Unique jobs under a real race: many processes, each with its own connection, enqueue the same key at
the same moment, on SQLite and on PostgreSQL. Exactly one job is made, and every process is told its id;
exactly one process is told it made it. The unique index decides, so no timing makes two."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from leaselab import Queue

RACERS = 12

# One racer: open the queue, say so, wait at the gate (a file the test creates once every racer is
# ready), enqueue the key, print what it was told.
RACER = textwrap.dedent(
    """
    import json, os, sys, time
    from leaselab import Queue
    target, gate, key = sys.argv[1:4]
    with Queue(target) as q:
        q.stats()  # connected and past the schema check before the start
        print("ready", flush=True)
        while not os.path.exists(gate):
            time.sleep(0.001)
        got = q.enqueue_unique({"from": os.getpid()}, key)
        print(json.dumps({"id": got.id, "new": got.new, "status": got.status}), flush=True)
    """
)


def _race(target: str, gate: str, key: str) -> list[dict]:
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, target, gate, key], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(RACERS)
    ]
    try:
        for racer in racers:  # each says ready before the gate opens: waited on the line, not on a time
            assert racer.stdout is not None
            assert racer.stdout.readline().strip() == "ready", racer.stderr.read() if racer.stderr else ""
        with open(gate, "w"):
            pass
        results = []
        for racer in racers:
            out, err = racer.communicate(timeout=300)
            assert racer.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.wait()


def test_many_processes_enqueueing_one_key_at_once_make_exactly_one_job(target, tmp_path):
    Queue(target).close()  # the schema made once, before the race
    for round_ in range(2):
        key = f"invoice-{round_}"
        results = _race(target, str(tmp_path / f"gate-{round_}"), key)
        with Queue(target) as q:
            keyed = [j for j in q.jobs() if j.key == key]
        assert len(keyed) == 1, keyed
        assert {r["id"] for r in results} == {keyed[0].id}
        assert sum(r["new"] for r in results) == 1
        assert all(r["status"] == "pending" for r in results)
    with Queue(target) as q:
        assert len(q.jobs()) == 2
