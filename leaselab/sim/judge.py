"""The specification judges a real history: the events a queue's triggers wrote, fed through ``model.Model``
in the order they were committed, with the queue's own timestamps and tokens.

``judge(jobs, events, backoff=..., lease_of=...)`` returns the first event at which the history and
the specification disagree, as a ``Disagreement`` (the rule, the event, the job, the facts) with the
ids of the events that led there; or None. The simulator checks every call it makes; this checks
what a run of real processes left behind, where the history records enough to say.

What the history records: each job's enqueue, every claim (time, worker, token, attempt), every
renewal, completion, failure and reap (time, token), each death, and each write the fence refused;
the jobs table gives each job's priority, max_attempts, and its *last* ``run_at``. So the judge
decides, at each event: a claim took only pending jobs whose ``run_at`` had come, in claim order, under
a token no claim wrote before, as the next attempt; a renewal, completion or failure came from the
token that held the job; a reap took a running job whose lease had ended (when the lease is known);
a failure or reap made the job dead exactly when its attempts were spent, and otherwise due again
after ``backoff.delay(attempts)``; a refused write was one whose token no longer held the job; and at
the end the jobs table says what the specification says.

What it cannot judge, said plainly:

- how many jobs a claim asked for: a claim that took fewer than it could is not seen (a claim that
  took none left no event at all);
- reaps and heartbeats that changed nothing, and what a reaper was asked to keep: a reaper that
  missed an expired lease, or took back a live worker's job it should have kept, is not seen here
  (an early reap is, when the lease is known);
- a job's first ``run_at`` once the job was retried (the jobs table keeps only the last): its first
  claim is not judged against a delay;
- a job's ``max_attempts`` before its last retry by hand (each retry raises it, and the table keeps
  the last): until then, its deaths are taken as the history says; a retry by hand is judged to take
  only a dead job, a cancel only a pending or running one;
- results and errors as the workers sent them (the events do not carry them);
- the retry delays when the backoff is unknown (``backoff=None``); with jitter, only their least;
- a server's history: its event ids are handed out as rows are inserted, not as transactions
  commit, so id order is not the order the queue applied them (``load`` marks such a history).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..backoff import Backoff
from ..job import CANCELLED, HOLDER_RELEASES, RELEASES, RETRIED
from .model import Model, Violation

# Seconds: two readings of one clock stored in two REAL columns, or a lease derived by subtraction.
SLACK = 1e-6
RULES = (
    "claim_not_pending",
    "claim_before_run_at",
    "claim_order",
    "claim_attempt",
    "token_reused",
    "write_without_token",
    "reap_unheld",
    "reap_early",
    "not_dead",
    "dead_early",
    "refused_holder",
    "retried_not_dead",
    "cancelled_finished",
    "table",
)  # every rule a Disagreement may name, each a sentence in leaselab.check.texts
WITNESS = 8  # events shown, at most: the disagreeing one and those before it that led there


@dataclass(frozen=True)
class Disagreement:
    """The first event where the history breaks the specification: which ``rule``, at which ``event`` (its id;
    None for the final table), on which ``job``; ``facts`` fill the rule's sentence; ``led`` are the ids of
    the events that led there, oldest first."""

    rule: str
    event: int | None
    job: int
    facts: dict[str, Any] = field(default_factory=dict)
    led: list[int] = field(default_factory=list)


class _Found(Exception):
    def __init__(self, rule: str, event: dict | None, job: int, **facts: Any):
        self.rule, self.event, self.job, self.facts = rule, event, job, facts


def _base(token: str | None) -> str:
    return (token or "").split("-")[0]


def judge(
    jobs: list[dict[str, Any]],
    events: list[dict[str, Any]],
    *,
    backoff: Backoff | None = None,
    lease_of: Callable[[str | None], float | None] = lambda worker: None,
) -> Disagreement | None:
    """The first disagreement between the history (``jobs`` rows and ``events`` rows as dicts, as
    ``leaselab.check.load`` reads them) and the specification, or None.

    ``backoff``: the queue's (None: retry delays are not judged). ``lease_of(worker)``: the lease that
    worker used, or None (its reaps are not timed)."""
    # Below its least delay a retry is surely early; jitter only adds.
    model = Model(replace(backoff, jitter=0.0) if backoff is not None else Backoff(base=0.0, cap=0.0))
    rows = {j["id"]: j for j in jobs}
    ordered = sorted(events, key=lambda e: e["id"])
    retried = {e["job_id"] for e in ordered if e["kind"] in RELEASES or e["kind"] == RETRIED}
    # Retries by hand still to come, per job: until its last, a job's max_attempts is not the table's.
    by_hand: dict[int, int] = {}
    for e in ordered:
        if e["kind"] == RETRIED:
            by_hand[e["job_id"]] = by_hand.get(e["job_id"], 0) + 1
    unknown_run_at: set[int] = set()
    lease_known: dict[str, bool] = {}  # token -> its lease_until in the model is a real one
    seen: list[int] = []
    try:
        i = 0
        while i < len(ordered):
            e = ordered[i]
            group = [e]
            if e["kind"] == "claimed":  # one claim statement: consecutive claims under one token (or its batch)
                while (
                    i + len(group) < len(ordered)
                    and ordered[i + len(group)]["kind"] == "claimed"
                    and _base(ordered[i + len(group)]["token"]) == _base(e["token"])
                    and ordered[i + len(group)]["at"] == e["at"]
                ):
                    group.append(ordered[i + len(group)])
            for g in group:
                seen.append(g["id"])
            nxt = ordered[i + len(group)] if i + len(group) < len(ordered) else None
            _step(model, rows, group, nxt, unknown_run_at, retried, by_hand, lease_known, lease_of, backoff is not None)
            i += len(group)
        _final(model, rows, backoff is not None and backoff.jitter == 0.0, unknown_run_at)
    except _Found as found:
        event = found.event["id"] if found.event is not None else None
        mine = [x for x in seen if any(e["id"] == x and e["job_id"] == found.job for e in ordered)]
        led = [x for x in mine if event is None or x <= event][-WITNESS:]
        return Disagreement(found.rule, event, found.job, found.facts, led)
    return None


def _step(
    model: Model,
    rows: dict[int, dict],
    group: list[dict],
    nxt: dict | None,
    unknown_run_at: set[int],
    retried: set[int],
    by_hand: dict[int, int],
    lease_known: dict[str, bool],
    lease_of: Callable[[str | None], float | None],
    backoff_known: bool,
) -> None:
    e = group[0]
    job_id, now, token = e["job_id"], e["at"], str(e.get("token"))
    kind = e["kind"]
    if kind == "enqueued":
        row = rows.get(job_id)
        if row is None:
            return  # a job whose row is gone: the checker's "lost" says so
        # The row keeps the last run_at: the enqueue's own while the job was never sent back.
        run_at = row["run_at"] if job_id not in retried else math.inf
        if job_id in retried:
            unknown_run_at.add(job_id)
        model.enqueue(job_id, row["priority"], run_at, row["max_attempts"])
        return
    job = model.jobs.get(job_id)
    if job is None:
        return  # no enqueue in the history (or no row): the checker's own rules name it
    if kind == "claimed":
        _claim(model, group, unknown_run_at, lease_known, lease_of)
        return
    if kind in ("heartbeat", "completed", *HOLDER_RELEASES):
        if job.status != "running" or job.token != token:
            raise _Found("write_without_token", e, job_id, write=kind, token=_short(token), holder=_holder(job))
        lease = lease_of(e.get("worker"))
        if kind == "heartbeat":
            model.heartbeat([(job_id, token)], lease if lease is not None else -math.inf, now)
            lease_known[token] = lease is not None
        elif kind == "completed":
            model.complete(job_id, token, None)
        else:
            _release(model, e, nxt, backoff_known, at_once=kind == "released", max_known=job_id not in by_hand)
        return
    if kind == "reaped":
        if job.status != "running" or job.token != token:
            raise _Found("reap_unheld", e, job_id, token=_short(token), holder=_holder(job))
        if lease_known.get(token) and job.lease_until is not None and job.lease_until >= now + SLACK:
            raise _Found("reap_early", e, job_id, early=job.lease_until - now, attempt=job.attempts)
        _release(model, e, nxt, backoff_known, max_known=job_id not in by_hand)
        return
    if kind == RETRIED:  # by hand: a dead job back to pending, runnable now, its attempts kept
        if job.status != "dead":
            raise _Found("retried_not_dead", e, job_id, status=job.status)
        by_hand[job_id] -= 1
        max_attempts = job.max_attempts
        if not by_hand[job_id]:  # the last retry: the table's max_attempts is the one it set
            del by_hand[job_id]
            max_attempts = rows[job_id]["max_attempts"]
        model.jobs[job_id] = replace(job, status="pending", run_at=now, lease_until=None, max_attempts=max_attempts)
        unknown_run_at.discard(job_id)
        return
    if kind == CANCELLED:  # by hand: dead at once, its holder's token holding nothing from here on
        if job.status not in ("pending", "running"):
            raise _Found("cancelled_finished", e, job_id, status=job.status)
        model.jobs[job_id] = replace(job, status="dead", lease_until=None)
        return
    if kind == "lease_lost":
        if job.status == "running" and job.token == token:
            raise _Found("refused_holder", e, job_id, token=_short(token))
        return
    if kind == "dead" and job.status != "dead":
        # A death with no failure or reap before it: a schema upgrade's repair of a damaged row.
        model.jobs[job_id] = replace(job, status="dead", lease_until=None)


def _claim(
    model: Model,
    group: list[dict],
    unknown_run_at: set[int],
    lease_known: dict[str, bool],
    lease_of: Callable[[str | None], float | None],
) -> None:
    now = group[0]["at"]
    for e in group:
        job = model.jobs.get(e["job_id"])
        if job is None:
            continue
        if job.status != "pending":
            raise _Found("claim_not_pending", e, job.id, status=job.status, attempt=e["attempt"])
        if e["attempt"] != job.attempts + 1:
            raise _Found("claim_attempt", e, job.id, attempt=e["attempt"], expected=job.attempts + 1)
        if job.id not in unknown_run_at and job.run_at > now + SLACK:
            raise _Found("claim_before_run_at", e, job.id, early=job.run_at - now, attempt=e["attempt"])
    got = {e["job_id"]: e["token"] for e in group if e["job_id"] in model.jobs}
    lease = lease_of(group[0].get("worker"))
    # A job whose run_at the history lost has no place in claim order: a claim that took it is not
    # judged on order (every other pending job is held back for it), only on the rest.
    held_back: dict[int, float] = {}
    if unknown_run_at & set(got):
        for job in list(model.jobs.values()):
            if job.status == "pending":
                if job.id in got:
                    model.jobs[job.id] = replace(job, run_at=now)
                else:
                    held_back[job.id] = job.run_at
                    model.jobs[job.id] = replace(job, run_at=math.inf)
    try:
        model.claim(
            len(got),
            group[0].get("worker") or "",
            lease if lease is not None else -math.inf,
            _base(group[0]["token"]),
            now,
            got,
        )
    except Violation as broken:
        first = group[0]
        if broken.kind == "token_reused":
            reused = next(
                e for e in group if e["token"] in model.tokens or [x["token"] for x in group].count(e["token"]) > 1
            )
            raise _Found("token_reused", reused, reused["job_id"], token=_short(reused["token"])) from None
        if broken.kind == "claim_order":
            want = [j.id for j in model.runnable(now)[: len(got)]]
            passed = next(j for j in want if j not in got)
            raise _Found("claim_order", first, first["job_id"], taken=sorted(got), passed=passed) from None
        raise _Found("token_reused", first, first["job_id"], token=_short(first["token"])) from None
    finally:
        for job_id, run_at in held_back.items():
            model.jobs[job_id] = replace(model.jobs[job_id], run_at=run_at)
    for e in group:
        lease_known[e["token"]] = lease is not None
    for job_id in unknown_run_at & set(got):
        unknown_run_at.discard(job_id)


def _release(
    model: Model, e: dict, nxt: dict | None, backoff_known: bool, at_once: bool = False, max_known: bool = True
) -> None:
    """A failure, a timeout or a reap (or, ``at_once``, a holder's hand-back, with no backoff): the job's
    attempts decide dead or pending again (a reap ends a job as a failure does, so the model's failure
    carries both); a death is written as the very next event. Without ``max_known`` (a job retried by
    hand later, which raised its max_attempts) the history's word on its death is taken."""
    job_id = e["job_id"]
    job = model.jobs[job_id]
    token, now = job.token or "", e["at"]
    status = model.release(job_id, token, now) if at_once else model.fail(job_id, token, now)
    died = nxt is not None and nxt["kind"] == "dead" and nxt["job_id"] == job_id
    if not max_known and died and status != "dead":  # its max_attempts then was below the table's
        model.jobs[job_id] = replace(model.jobs[job_id], status="dead", lease_until=None)
        return
    if status == "dead" and not died:
        raise _Found("not_dead", e, job_id, attempts=job.attempts, max=job.max_attempts)
    if status != "dead" and died:
        raise _Found("dead_early", e, job_id, attempts=job.attempts, max=job.max_attempts)


def _final(model: Model, rows: dict[int, dict], run_at_exact: bool, unknown_run_at: set[int]) -> None:
    for job_id, want in sorted(model.jobs.items()):
        row = rows[job_id]
        for name in ("status", "attempts", "token"):
            if name == "token" and want.attempts == 0:
                continue
            if row[name] != getattr(want, name):
                raise _Found("table", None, job_id, field=name, expected=getattr(want, name), actual=row[name])
        if run_at_exact and want.status == "pending" and job_id not in unknown_run_at:
            if abs(row["run_at"] - want.run_at) > SLACK:
                raise _Found("table", None, job_id, field="run_at", expected=want.run_at, actual=row["run_at"])


def _holder(job: Any) -> str:
    return _short(job.token) if job.status == "running" else job.status


def _short(token: str | None) -> str:
    return "-" if token is None else str(token)[:8]
