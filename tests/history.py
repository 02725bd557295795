"""A history checker for the chaos suite: reads what happened and lists every broken promise.

Run after the faults, over three records that the queue cannot fake for itself:
the ``jobs`` table, the ``events`` table (written by triggers in the same
transaction as each change), and the handlers' own effects file (one line per
handler run, appended by ``leaselab.lessons.demo.task``). Each ``check_*`` function takes
plain dicts and returns a list of violations as sentences; an empty list is a
clean history. The file is read with raw ``sqlite3`` (a server with raw psycopg), not
through leaselab, so a bug in the library cannot hide itself from its own checker.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from typing import Any, Iterable

from leaselab.lessons.demo import read_effects

RELEASES = ("reaped", "failed")  # the only ways a running job goes back to pending (or on to dead)


def load(db_path: str, effects_path: str | None = None) -> tuple[list[dict], list[dict], list[dict]]:
    """The jobs, the events (in id order) and the effect lines, as dicts. ``db_path`` may be a
    PostgreSQL URL, read with raw psycopg in one read-only snapshot."""
    if str(db_path).startswith(("postgresql://", "postgres://")):
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(db_path, row_factory=dict_row) as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            jobs = conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()
            events = conn.execute("SELECT * FROM events ORDER BY id").fetchall()
    else:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        try:
            jobs = [dict(r) for r in conn.execute("SELECT * FROM jobs ORDER BY id")]
            events = [dict(r) for r in conn.execute("SELECT * FROM events ORDER BY id")]
        finally:
            conn.close()
    for job in jobs:
        job["payload"] = json.loads(job["payload"])
        job["result"] = None if job["result"] is None else json.loads(job["result"])
    effects = read_effects(effects_path) if effects_path else []
    return jobs, events, effects


def _by_job(events: Iterable[dict]) -> dict[int, list[dict]]:
    grouped: dict[int, list[dict]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e["id"]):
        grouped[e["job_id"]].append(e)
    return grouped


def _fails_on_purpose(payload: Any, attempt: int) -> bool:
    """Mirror of ``leaselab.lessons.demo`` rules: does the payload ask this attempt to fail?"""
    rule = payload.get("fail", False) if isinstance(payload, dict) else False
    if isinstance(rule, bool):
        return rule
    if isinstance(rule, int):
        return attempt <= rule
    return False


def check_final_states(jobs: list[dict]) -> list[str]:
    """Every job ended ``done`` or ``dead``: none lost, none stuck running or pending."""
    return [f"job {j['id']} ended {j['status']!r}, not done or dead" for j in jobs
            if j["status"] not in ("done", "dead")]


def check_fencing(events: list[dict]) -> list[str]:
    """Every accepted write came from the token holding the lease at that moment.

    A ``completed`` or ``heartbeat`` must carry the token of the latest ``claimed``
    with no release (``reaped``/``failed``) in between; a job is never claimed while
    a lease is held; after ``completed`` or ``dead`` only refused writes (``lease_lost``) follow.
    """
    bad = []
    for job_id, history in _by_job(events).items():
        holder: str | None = None
        finished = None
        for e in history:
            kind = e["kind"]
            if kind in ("enqueued", "lease_lost"):
                continue
            if finished is not None and kind != "dead":
                bad.append(f"job {job_id}: {kind} (event {e['id']}) accepted after it was {finished}")
                continue
            if kind == "claimed":
                if holder is not None:
                    bad.append(f"job {job_id}: claimed again (event {e['id']}) while token {holder[:8]} still held it")
                holder = e["token"]
            elif kind in ("completed", "heartbeat"):
                if holder is None:
                    bad.append(f"job {job_id}: {kind} (event {e['id']}) accepted with no lease held")
                elif e["token"] != holder:
                    bad.append(f"job {job_id}: {kind} (event {e['id']}) written by stale token "
                               f"{str(e['token'])[:8]}, lease held by {holder[:8]}")
                if kind == "completed":
                    finished, holder = "completed", None
            elif kind in RELEASES:
                if holder is None:
                    bad.append(f"job {job_id}: {kind} (event {e['id']}) with no lease held")
                holder = None
            elif kind == "dead":
                finished = "dead"
    return bad


def check_attempts(jobs: list[dict], events: list[dict]) -> list[str]:
    """Attempts never exceed ``max_attempts`` and claims number them 1, 2, 3, ... with no gap."""
    bad = []
    grouped = _by_job(events)
    for j in jobs:
        if j["attempts"] > j["max_attempts"]:
            bad.append(f"job {j['id']}: {j['attempts']} attempts > max_attempts {j['max_attempts']}")
        claims = [e["attempt"] for e in grouped.get(j["id"], []) if e["kind"] == "claimed"]
        if claims != list(range(1, len(claims) + 1)):
            bad.append(f"job {j['id']}: claims numbered {claims}, expected 1..{len(claims)}")
        over = [e["id"] for e in grouped.get(j["id"], []) if e["attempt"] > j["max_attempts"]]
        if over:
            bad.append(f"job {j['id']}: events {over} record an attempt beyond max_attempts {j['max_attempts']}")
    return bad


def replay(history: list[dict]) -> dict[str, Any]:
    """What the jobs row should say, rebuilt from the job's events alone."""
    state: dict[str, Any] = {"status": None, "attempts": 0, "token": None, "worker": None}
    for e in history:
        kind = e["kind"]
        if kind == "enqueued":
            state["status"] = "pending"
        elif kind == "claimed":
            state.update(status="running", attempts=e["attempt"], token=e["token"], worker=e["worker"])
        elif kind == "completed":
            state["status"] = "done"
        elif kind in RELEASES:
            state["status"] = "pending"  # a following 'dead' event overrides
        elif kind == "dead":
            state["status"] = "dead"
    return state


def check_events_agree(jobs: list[dict], events: list[dict]) -> list[str]:
    """Replaying each job's events gives its row: status, attempts, last token and worker; one 'enqueued' first."""
    bad = []
    grouped = _by_job(events)
    known = {j["id"] for j in jobs}
    for job_id in grouped.keys() - known:
        bad.append(f"events name job {job_id}, which is not in the jobs table")
    for j in jobs:
        history = grouped.get(j["id"], [])
        if not history or history[0]["kind"] != "enqueued":
            bad.append(f"job {j['id']}: history does not start with 'enqueued'")
        if sum(e["kind"] == "enqueued" for e in history) > 1:
            bad.append(f"job {j['id']}: enqueued more than once")
        state = replay(history)
        for field in ("status", "attempts", "token", "worker"):
            if state[field] != j[field]:
                bad.append(f"job {j['id']}: events say {field}={state[field]!r}, table says {j[field]!r}")
    return bad


def check_links(jobs: list[dict], events: list[dict]) -> list[str]:
    """Each job's linked history (last_event_id, then prev, prev, ...) is exactly its events, newest first.

    The queue reads one job's history, and finds the claim behind a zombie's token, by walking
    these links; a link lost or crossed between jobs would hide events from both.
    """
    bad = []
    by_id = {e["id"]: e for e in events}
    grouped = _by_job(events)
    for j in jobs:
        walked, at = [], j["last_event_id"]
        while at is not None and len(walked) <= len(events):
            event = by_id.get(at)
            if event is None:
                bad.append(f"job {j['id']}: its history links to event {at}, which does not exist")
                break
            walked.append(event["id"])
            at = event["prev"]
        expected = [e["id"] for e in reversed(grouped.get(j["id"], []))]
        if walked != expected and not (bad and bad[-1].startswith(f"job {j['id']}:")):
            bad.append(f"job {j['id']}: its linked history is {walked}, its events are {expected}")
    return bad


def check_effects(jobs: list[dict], events: list[dict], effects: list[dict]) -> list[str]:
    """The handlers' own record agrees: done jobs ran, and re-runs follow only a reap or a wanted failure.

    - every ``done`` job's handler ran in the attempt that completed it, and the stored
      result came from that attempt;
    - every handler run belongs to a claim of that attempt, and no attempt ran twice;
    - no handler ran after the attempt that completed the job;
    - a run beyond the first follows a ``reaped`` previous attempt, or a ``failed`` one whose
      payload asked it to fail; no attempt failed that was not asked to.
    """
    bad = []
    grouped = _by_job(events)
    runs: dict[int, list[int]] = defaultdict(list)
    for line in effects:
        runs[line["job"]].append(line["attempt"])
    known = {j["id"] for j in jobs}
    for job_id in runs.keys() - known:
        bad.append(f"a handler ran for job {job_id}, which is not in the jobs table")
    for j in jobs:
        job_id, history = j["id"], grouped.get(j["id"], [])
        ran = sorted(runs.get(job_id, []))
        claimed = {e["attempt"] for e in history if e["kind"] == "claimed"}
        if len(set(ran)) != len(ran):
            bad.append(f"job {job_id}: one attempt ran its handler twice (attempts {ran})")
        for attempt in set(ran) - claimed:
            bad.append(f"job {job_id}: handler ran as attempt {attempt}, which was never claimed")
        if j["status"] == "done":
            if j["attempts"] not in ran:
                bad.append(f"job {job_id}: done by attempt {j['attempts']}, but that attempt's handler never ran "
                           f"(runs: {ran})")
            later = [a for a in ran if a > j["attempts"]]
            if later:
                bad.append(f"job {job_id}: handler ran again (attempts {later}) after attempt {j['attempts']} finished it")
            result = j["result"]
            if isinstance(result, dict) and "attempt" in result and result["attempt"] != j["attempts"]:
                bad.append(f"job {job_id}: stored result came from attempt {result['attempt']}, "
                           f"but attempt {j['attempts']} held the lease")
        for e in history:
            if e["kind"] == "failed" and not _fails_on_purpose(j["payload"], e["attempt"]):
                bad.append(f"job {job_id}: attempt {e['attempt']} failed ({e['detail']!r}) "
                           "although its payload did not ask it to")
        # What ended each attempt: the release event after its claim.
        ended_by: dict[int, str] = {}
        current = None
        for e in history:
            if e["kind"] == "claimed":
                current = e["attempt"]
            elif e["kind"] in RELEASES and current is not None:
                ended_by[current] = e["kind"]
                current = None
        for attempt in ran[1:]:
            previous = attempt - 1
            reason = ended_by.get(previous)
            if reason == "reaped":
                continue
            if reason == "failed" and _fails_on_purpose(j["payload"], previous):
                continue
            bad.append(f"job {job_id}: handler re-ran as attempt {attempt}, but attempt {previous} "
                       f"ended {reason or 'without a release'}: not a lost lease nor a wanted failure")
    return bad


def check_fences(events: list[dict], effects: list[dict]) -> list[str]:
    """No fence held by two claims: each (job, attempt) belongs to one token, in the claims and in the runs.

    An outside store trusts the fence (job, attempt); a claim lost in a server crash takes its
    own ``claimed`` event with it, so the handler's record of the token it ran under
    (``effects`` lines that carry one) is what still shows the first holder.
    """
    tokens: dict[tuple[int, int], set[str]] = defaultdict(set)
    for e in events:
        if e["kind"] == "claimed" and e["token"] is not None:
            tokens[(e["job_id"], e["attempt"])].add(e["token"])
    for line in effects:
        if line.get("token") is not None:
            tokens[(line["job"], line["attempt"])].add(line["token"])
    return [f"job {job_id}: fence reused: attempt {attempt} held by {len(held)} claims "
            f"(tokens {', '.join(sorted(t[:8] for t in held))})"
            for (job_id, attempt), held in sorted(tokens.items()) if len(held) > 1]


def check_false_losses(events: list[dict]) -> list[str]:
    """No ``lease_lost`` for a token whose completion (or failure) went through.

    A token that finished the job held it until then, so nothing it sent before was refused,
    and the worker stops renewing before it finishes; a refusal recorded for it can only be its
    own retried completion, after a lost reply, taken for a loss: a history falsified.
    """
    bad = []
    for job_id, history in _by_job(events).items():
        finished = {e["token"]: e["kind"] for e in history if e["kind"] in ("completed", "failed")}
        for e in history:
            if e["kind"] == "lease_lost" and e["token"] in finished:
                bad.append(f"job {job_id}: false loss: lease_lost (event {e['id']}, {e['detail']!r}) for token "
                           f"{e['token'][:8]}, whose attempt {e['attempt']} {finished[e['token']]} the job")
    return bad


def check_dead_ran(jobs: list[dict], events: list[dict], effects: list[dict],
                   vanished: Iterable[str] = ()) -> list[str]:
    """No job ``dead`` whose handler never ran under any of its attempts.

    A job dies by failing (its handler ran and raised) or by its leases running out. A worker
    runs every job it learns it claimed, so an attempt can end unrun only if its worker died
    in between (``vanished``: the names of the workers the nemesis killed) or never learned of
    its claim (a lost reply it did not look into by its token).
    """
    vanished = set(vanished)
    ran = {line["job"] for line in effects}
    grouped = _by_job(events)
    bad = []
    for j in jobs:
        if j["status"] != "dead" or j["id"] in ran:
            continue
        claims = [e for e in grouped.get(j["id"], []) if e["kind"] == "claimed"]
        survivors = sorted({e["worker"] for e in claims} - vanished)
        if survivors or not claims:
            bad.append(f"job {j['id']}: dead after {j['attempts']} attempts, but its handler never ran "
                       f"(claimed by {', '.join(survivors) or 'no one'}, none of them killed)")
    return bad


REAP_SLACK = 1e-3  # seconds: a renewal's time and its lease are two readings of the server's clock


def check_reaps(events: list[dict], lease: float, slack: float = REAP_SLACK) -> list[str]:
    """No live holder reaped: a reap comes after the lease that the token's last renewal wrote ran out.

    The events hold each renewal's time (``at`` of its ``claimed`` or ``heartbeat``), not the
    ``lease_until`` it wrote, so ``lease`` (every worker's lease length) rebuilds it: at + lease.
    A reap stamped earlier took the job from a holder whose lease still ran.
    """
    bad = []
    for job_id, history in _by_job(events).items():
        renewed: dict[str, float] = {}
        for e in history:
            if e["kind"] in ("claimed", "heartbeat"):
                renewed[e["token"]] = e["at"]
            elif e["kind"] == "reaped" and e["token"] in renewed:
                until = renewed[e["token"]] + lease
                if e["at"] < until - slack:
                    bad.append(f"job {job_id}: live holder reaped: attempt {e['attempt']} reaped (event {e['id']}) "
                               f"{until - e['at']:.3f}s before the lease its last renewal wrote ran out")
    return bad


def check_all(jobs: list[dict], events: list[dict], effects: list[dict], *, lease: float | None = None,
              vanished: Iterable[str] = ()) -> list[str]:
    """Every rule above, in order; an empty list is a history with every promise kept.

    ``lease`` (the workers' lease length) turns on the reap rule; ``vanished`` names the workers
    that were killed, whose claims may end without a run.
    """
    return (check_final_states(jobs) + check_fencing(events) + check_attempts(jobs, events)
            + check_events_agree(jobs, events) + check_links(jobs, events) + check_effects(jobs, events, effects)
            + check_fences(events, effects) + check_false_losses(events)
            + check_dead_ran(jobs, events, effects, vanished)
            + (check_reaps(events, lease) if lease is not None else []))


def summary(jobs: list[dict], events: list[dict], effects: list[dict]) -> dict[str, int]:
    """Counts worth printing after a chaos run: how hard the faults actually hit."""
    kinds: dict[str, int] = defaultdict(int)
    for e in events:
        kinds[e["kind"]] += 1
    statuses: dict[str, int] = defaultdict(int)
    for j in jobs:
        statuses[j["status"]] += 1
    reruns = len(effects) - len({line["job"] for line in effects})
    return {"jobs": len(jobs), **{f"status_{k}": v for k, v in sorted(statuses.items())},
            **{f"events_{k}": v for k, v in sorted(kinds.items())}, "handler_runs": len(effects),
            "handler_reruns": reruns}
