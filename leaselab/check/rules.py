"""The checker's rules: one function per promise, each over one job's row and events, each returning the
``Anomaly``s it saw.

The events are the queue's own record, written by triggers in the same transaction as each
change; the effects are the handlers' record of the outside world. A rule trusts neither
the jobs table nor the library: it rebuilds what must have happened from the events and
compares. Witnesses are the few rows that prove an anomaly, in history order.

Every rule but the specification looks at one job at a time (``j``: its row, None when the
row is gone; ``events``: its events, oldest first; ``effects``: its effect lines), so the
checker (``walk``) streams a history of any size and keeps only one job's rows. The
specification reads the history in the order it was applied, across jobs.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ..backoff import Backoff
from ..job import CANCELLED, HOLDER_RELEASES, REAPER_RELEASES, RELEASES, RETRIED
from ..sim.judge import judge
from .history import History, effect_line, event_line, in_memory, job_line
from .report import Anomaly
from .shapes import PlainCount

WRITES = ("heartbeat", "completed") + HOLDER_RELEASES  # what a holder writes, each fenced by its token
FINISHES = ("completed",) + HOLDER_RELEASES  # a holder's last word on its attempt
RENEWALS = ("claimed", "heartbeat")  # each writes a lease from its own time

# Seconds: a renewal's time and its lease are two readings of the queue's clock.
REAP_SLACK = 1e-3

# Seconds a lease may have run out before a running job counts as stuck while workers may
# still be busy: their reapers run every poll, so a minute is far past any of them.
STUCK_AFTER = 60.0

Row = dict[str, Any]
EventOf = Callable[[int], "Row | None"]


def by_job(events: Iterable[dict]) -> dict[int, list[dict]]:
    """Each job's events, oldest first."""
    grouped: dict[int, list[dict]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e["id"]):
        grouped[e["job_id"]].append(e)
    return grouped


def _first_last(history: list[dict]) -> list[str]:
    picked = history[:1] + history[-1:] if len(history) > 1 else history
    return [event_line(e) for e in picked]


def _token(e: dict) -> str:
    return "-" if e.get("token") is None else str(e["token"])[:8]


# -- one job at a time ---------------------------------------------------------------------------------


def gone(job_id: int, events: list[Row]) -> list[Anomaly]:
    """lost: a job whose events exist but whose row is gone: an acknowledged enqueue lost."""
    return [Anomaly("lost", job_id, _first_last(events), "lost.gone")] if events else []


def effects_of_gone(job_id: int, effects: list[Row]) -> list[Anomaly]:
    """lost: a job with effects recorded but neither a row nor an event."""
    return [Anomaly("lost", job_id, [effect_line(x) for x in effects[:3]], "lost.effect_of_gone")] if effects else []


def unfinished_job(j: Row, events: list[Row], now: float, idle: bool) -> list[Anomaly]:
    """stuck and lost: a job neither done nor dead that nothing will move on.

    Running under a lease that ran out (with ``idle``, at all; otherwise ``STUCK_AFTER`` ago)
    is stuck: no reaper took it back. With ``idle``, running under a lease still valid is
    lost (no idle worker is doing it), and pending and due is stuck (no idle worker claimed
    it). A pending job whose time has not come is waiting, which is no anomaly; without
    ``idle``, neither is a pending job that is due: a queue may simply have no worker yet.
    """
    status = j["status"]
    if status == "running" and j["lease_until"] is not None:
        ago = now - j["lease_until"]
        if ago > (0 if idle else STUCK_AFTER):
            return [Anomaly("stuck", j["id"], _job_witness(j, events), "stuck.expired", {"ago": ago})]
        if idle:
            return [Anomaly("lost", j["id"], _job_witness(j, events), "lost.abandoned", {"left": -ago})]
    elif status == "pending" and idle and j["run_at"] <= now:
        what = "stuck.runnable_again" if j["attempts"] else "stuck.runnable"
        return [Anomaly("stuck", j["id"], _job_witness(j, events), what, {"ago": now - j["run_at"]})]
    return []


# What a worker writes as the detail of a timed_out event (leaselab.worker.decisions.overdue), read back.
_TIMED_OUT = (
    (re.compile(r"ran past its timeout of ([\d.e+-]+)s"), "timed_out.timeout"),
    (re.compile(r"reported no progress for ([\d.e+-]+)s"), "timed_out.progress"),
)


def timeouts_job(j: Row | None, events: list[Row], now: float, max_run: float | None) -> list[Anomaly]:
    """timed out and hung: a worker's heartbeat proves it lives, not that its job moves.

    Every attempt a worker gave up at its timeout (a ``timed_out`` event) is named: the queue kept
    its promise, but the handler may hang. With ``max_run``, so is a job still running an attempt
    claimed longer ago than that, however many heartbeats renewed it.
    """
    found = []
    claims: dict[str | None, Row] = {}
    for e in events:
        if e["kind"] == "claimed":
            claims[e.get("token")] = e
        elif e["kind"] == "timed_out":
            what, seconds = "timed_out.timeout", None
            for pattern, key in _TIMED_OUT:
                match = pattern.search(e.get("detail") or "")
                if match is not None:
                    what, seconds = key, float(match.group(1))
                    break
            claim = claims.get(e.get("token"))
            witness = ([event_line(claim)] if claim is not None else []) + [event_line(e)]
            found.append(
                Anomaly("timed_out", e["job_id"], witness, what, {"attempt": e["attempt"], "seconds": seconds or 0.0})
            )
    if max_run is not None and j is not None and j["status"] == "running":
        claim = claims.get(j.get("token"))
        if claim is not None and now - claim["at"] > max_run:
            beats = sum(1 for e in events if e["kind"] == "heartbeat" and e.get("token") == j.get("token"))
            found.append(
                Anomaly(
                    "hung",
                    j["id"],
                    [event_line(claim)] + [event_line(e) for e in events[-1:] if e is not claim],
                    "hung.running",
                    {"attempt": claim["attempt"], "ago": now - claim["at"], "beats": beats, "max_run": float(max_run)},
                )
            )
    return found


def _job_witness(j: Row, events: list[Row]) -> list[str]:
    return [job_line(j)] + [event_line(e) for e in events[-1:]]


def fencing_job(job_id: int, events: list[Row]) -> list[Anomaly]:
    """Every accepted write came from the token that held the lease, and nothing moved a finished job.

    Walks the job's events holding who has the lease: a claim while another token holds it
    (overlapping leases), a heartbeat, completion or failure from a token not holding it
    (stale write accepted), a claim, write or reap after ``completed`` or ``dead``
    (claimed after completion, completed twice, stale write, history disagrees).
    """
    found = []
    holder: dict | None = None  # the claim whose lease is held
    ended: dict | None = None  # the completed or dead event that finished the job
    for e in events:
        kind = e["kind"]
        if kind in ("enqueued", "lease_lost"):
            continue
        if kind == RETRIED:  # by hand: only a dead job comes back, and its next claim is a new attempt
            if ended is None or ended["kind"] not in ("dead", CANCELLED):
                was = "running" if holder is not None else ended["kind"] if ended is not None else "pending"
                found.append(
                    Anomaly(
                        "history_disagrees",
                        job_id,
                        [event_line(x) for x in (ended or holder, e) if x is not None],
                        "disagree.retried_not_dead",
                        {"event": e["id"], "was": was},
                    )
                )
            ended, holder = None, None
            continue
        if ended is not None:
            if kind == "dead":  # the trigger's second row after a last release, or a death repeated
                continue
            facts = {
                "ended": ended["kind"],
                "token": _token(e),
                "attempt": e["attempt"],
                "event": e["id"],
                "write": kind,
            }
            witness = [event_line(ended), event_line(e)]
            if kind == "claimed":
                found.append(Anomaly("claimed_after_completion", job_id, witness, "claimed_after.claim", facts))
            elif kind == "completed" and ended["kind"] == "completed":
                found.append(
                    Anomaly(
                        "completed_twice",
                        job_id,
                        witness,
                        "completed_twice",
                        {"first": _token(ended), "token": _token(e)},
                    )
                )
            elif kind in REAPER_RELEASES:
                found.append(Anomaly("history_disagrees", job_id, witness, "disagree.reaped_after_end", facts))
            else:
                found.append(Anomaly("stale_write_accepted", job_id, witness, "stale.after_end", facts))
            continue
        if kind == "claimed":
            if holder is not None:
                found.append(
                    Anomaly(
                        "overlapping_leases",
                        job_id,
                        [event_line(holder), event_line(e)],
                        "overlap.held",
                        {"token": _token(e), "holder": _token(holder)},
                    )
                )
            holder = e
        elif kind in WRITES:
            if holder is None:
                found.append(
                    Anomaly(
                        "stale_write_accepted",
                        job_id,
                        [event_line(e)],
                        "stale.unheld",
                        {"write": kind, "token": _token(e)},
                    )
                )
            elif e["token"] != holder["token"]:
                found.append(
                    Anomaly(
                        "stale_write_accepted",
                        job_id,
                        [event_line(holder), event_line(e)],
                        "stale.token",
                        {"write": kind, "token": _token(e), "holder": _token(holder)},
                    )
                )
            if kind == "completed":
                ended, holder = e, None
            elif kind in RELEASES:
                holder = None
        elif kind in REAPER_RELEASES:  # no token of its own to fence
            if holder is None:
                found.append(
                    Anomaly("history_disagrees", job_id, [event_line(e)], "disagree.release_unheld", {"event": e["id"]})
                )
            holder = None
        elif kind in ("dead", CANCELLED):  # a cancel ends the job under its holder: its later writes are stale
            ended, holder = e, None
    return found


def attempts_job(j: Row, events: list[Row]) -> list[Anomaly]:
    """Attempts stay within ``max_attempts``, and claims number them 1, 2, 3, ... with no gap.

    A number claimed twice under two tokens is left to ``fences`` (fence reused).
    """
    found = []
    if j["attempts"] > j["max_attempts"]:
        found.append(
            Anomaly(
                "attempts_exceeded",
                j["id"],
                [job_line(j)],
                "attempts.row",
                {"attempts": j["attempts"], "max": j["max_attempts"]},
            )
        )
    over = next((e for e in events if e["attempt"] > j["max_attempts"]), None)
    if over is not None:
        found.append(
            Anomaly(
                "attempts_exceeded",
                j["id"],
                [job_line(j), event_line(over)],
                "attempts.event",
                {"event": over["id"], "attempt": over["attempt"], "max": j["max_attempts"]},
            )
        )
    claims = [e for e in events if e["kind"] == "claimed"]
    numbers = list(dict.fromkeys(e["attempt"] for e in claims))  # in order, each once
    same_claim_twice = len({(e["attempt"], e["token"]) for e in claims}) < len(claims)
    if numbers != list(range(1, len(numbers) + 1)) or same_claim_twice:
        found.append(
            Anomaly(
                "history_disagrees",
                j["id"],
                [event_line(e) for e in claims[:4]],
                "disagree.numbering",
                {"claims": [e["attempt"] for e in claims], "n": len(numbers)},
            )
        )
    return found


def replay(history: list[dict]) -> dict:
    """What the jobs row should say, rebuilt from the job's events alone."""
    state: dict = {"status": None, "attempts": 0, "token": None, "worker": None}
    for e in history:
        kind = e["kind"]
        if kind == "enqueued":
            state["status"] = "pending"
        elif kind == "claimed":
            state.update(status="running", attempts=e["attempt"], token=e["token"], worker=e.get("worker"))
        elif kind == "completed":
            state["status"] = "done"
        elif kind in RELEASES or kind == RETRIED:
            state["status"] = "pending"  # a following 'dead' event overrides
        elif kind in ("dead", CANCELLED):
            state["status"] = "dead"
    return state


def events_agree_job(j: Row, events: list[Row]) -> list[Anomaly]:
    """history disagrees: replaying a job's events gives its row (status, attempts, last token and worker),
    and its history starts with one enqueue."""
    found = []
    if not events or events[0]["kind"] != "enqueued":
        found.append(Anomaly("history_disagrees", j["id"], [job_line(j)] + _first_last(events)[:1], "disagree.start"))
    twice = [e for e in events if e["kind"] == "enqueued"]
    if len(twice) > 1:
        found.append(
            Anomaly("history_disagrees", j["id"], [event_line(e) for e in twice[:2]], "disagree.enqueued_twice")
        )
    state = replay(events)
    for name in ("status", "attempts", "token", "worker"):
        if state[name] != j[name]:
            shown = (lambda v: "-" if v is None else str(v)[:8]) if name == "token" else (lambda v: v)
            found.append(
                Anomaly(
                    "history_disagrees",
                    j["id"],
                    [job_line(j)] + _first_last(events)[1:],
                    "disagree.field",
                    {"field": name, "expected": shown(state[name]), "actual": shown(j[name])},
                )
            )
    return found


def links_job(j: Row, events: list[Row], event_of: EventOf) -> list[Anomaly]:
    """history disagrees: the job's linked history (``last_event_id``, then ``prev``, ...) is exactly its events.

    The queue reads one job's history, and finds the claim behind a zombie's token, by walking
    these links; a link lost or crossed between jobs would hide events from both. A link out of
    the job's own events is looked up with ``event_of``; the walk stops a few steps past the
    job's own length, by which it already disagrees (a cycle ends there too).
    """
    mine = {e["id"]: e for e in events}
    walked: list[int] = []
    at, missing = j.get("last_event_id"), None
    while at is not None and len(walked) <= len(events) + 8:
        event = mine.get(at)
        if event is None:
            event = event_of(at)
        if event is None:
            missing = at
            break
        walked.append(event["id"])
        at = event.get("prev")
    expected = [e["id"] for e in reversed(events)]
    if missing is not None:
        return [Anomaly("history_disagrees", j["id"], [job_line(j)], "disagree.link_missing", {"event": missing})]
    if walked != expected:
        return [
            Anomaly(
                "history_disagrees",
                j["id"],
                [job_line(j)],
                "disagree.links",
                {"walked": walked[:8], "expected": expected[:8]},
            )
        ]
    return []


def fences_job(job_id: int, events: list[Row], effects: list[Row]) -> list[Anomaly]:
    """fence reused: each ``(job, attempt)`` belongs to one token, in the claims and in the effects.

    An outside store trusts the fence; a claim lost in a server crash takes its own
    ``claimed`` event with it, so the effects that carry a token are what still show the
    first holder.
    """
    tokens: dict[int, dict[str, Row]] = defaultdict(dict)  # attempt -> token -> its first claim or effect
    for e in events:
        if e["kind"] == "claimed" and e.get("token") is not None:
            tokens[e["attempt"]].setdefault(e["token"], e)
    for x in effects:
        if x.get("token") is not None and x["attempt"] is not None:
            tokens[x["attempt"]].setdefault(x["token"], x)
    return [
        Anomaly(
            "fence_reused",
            job_id,
            [event_line(r) if "kind" in r else effect_line(r) for r in list(held.values())[:4]],
            "fence_reused",
            {"attempt": attempt, "n": len(held), "tokens": sorted(t[:8] for t in held)},
        )
        for attempt, held in sorted(tokens.items())
        if len(held) > 1
    ]


def false_losses_job(job_id: int, events: list[Row]) -> list[Anomaly]:
    """false loss: no ``lease_lost`` for a token whose completion (or failure) went through.

    A token that finished the job held it until then, and its worker stops renewing before it
    finishes; a refusal recorded for it can only be its own retried completion, after a lost
    reply, taken for a loss: a history falsified.
    """
    finished = {e["token"]: e for e in events if e["kind"] in FINISHES}
    found = []
    for e in events:
        if e["kind"] == "lease_lost" and e["token"] in finished:
            done = finished[e["token"]]
            found.append(
                Anomaly(
                    "false_loss",
                    job_id,
                    [event_line(done), event_line(e)],
                    "false_loss",
                    {"token": _token(e), "attempt": e["attempt"], "finished": done["kind"]},
                )
            )
    return found


def lease_shown(j: Row, events: list[Row]) -> float | None:
    """The lease a running job's holder used, as its history shows it: the lease's end minus its last renewal."""
    if j["status"] != "running" or j["lease_until"] is None or j.get("worker") is None:
        return None
    renewals = [e for e in events if e["kind"] in RENEWALS and e["token"] == j["token"]]
    return j["lease_until"] - renewals[-1]["at"] if renewals else None


def reaps_judged(events: list[Row]) -> bool:
    """Whether ``reaps_job`` has anything to time in these events: a reap of a token that renewed."""
    renewed = set()
    for e in events:
        if e["kind"] in RENEWALS:
            renewed.add(e["token"])
        elif e["kind"] in REAPER_RELEASES and e["token"] in renewed:
            return True
    return False


def reaps_job(job_id: int, events: list[Row], lease_of: Callable[[str | None], float | None]) -> list[Anomaly]:
    """live holder reaped, and overlapping leases in time: a reap comes after the holder's lease ran out.

    The events hold each renewal's time (``at`` of its ``claimed`` or ``heartbeat``), not the
    lease it wrote, so ``lease_of(worker)`` (that worker's lease, or None when unknown: the
    reap is not judged) rebuilds it. A reap stamped earlier took the job from a holder whose
    lease still ran; if the next claim came before that lease ran out too, two workers held
    the job at once.
    """
    found = []
    renewed: dict[str, dict] = {}
    for i, e in enumerate(events):
        if e["kind"] in RENEWALS:
            renewed[e["token"]] = e
        elif e["kind"] in REAPER_RELEASES and e["token"] in renewed:
            last = renewed[e["token"]]
            lease = lease_of(last.get("worker"))
            if lease is None:
                continue
            until = last["at"] + lease
            if e["at"] >= until - REAP_SLACK:
                continue
            claim = next((c for c in events[i + 1 :] if c["kind"] == "claimed"), None)
            if claim is not None and claim["at"] < until - REAP_SLACK:
                found.append(
                    Anomaly(
                        "overlapping_leases",
                        job_id,
                        [event_line(last), event_line(e), event_line(claim)],
                        "overlap.timed",
                        {"attempt": claim["attempt"], "prev": e["attempt"], "early": until - claim["at"]},
                    )
                )
            else:
                found.append(
                    Anomaly(
                        "live_holder_reaped",
                        job_id,
                        [event_line(last), event_line(e)],
                        "reaped.live",
                        {"attempt": e["attempt"], "early": until - e["at"]},
                    )
                )
    return found


def effects_repeated_job(job_id: int, effects: list[Row]) -> list[Anomaly]:
    """effect repeated: one job's effect with one key recorded more than once.

    A job that ran twice with its effect recorded once (a keyed or fenced store kept it once)
    is at-least-once working as promised, and no anomaly.
    """
    groups: dict[str | None, list[dict]] = defaultdict(list)
    for x in effects:
        groups[x["key"]].append(x)
    found = []
    for key, lines in sorted(groups.items(), key=lambda item: str(item[0])):
        if len(lines) > 1:
            facts = {"n": len(lines), "attempts": [x["attempt"] if x["attempt"] is not None else "-" for x in lines]}
            if key is not None:
                facts["key"] = key
            else:  # the fix the sentence gives: an idempotency key the store keeps once
                facts["code"] = f'key="job-{job_id}"'
            found.append(
                Anomaly(
                    "effect_repeated",
                    job_id,
                    [effect_line(x) for x in lines[:4]],
                    "effect.repeated" if key is None else "effect.repeated_key",
                    facts,
                )
            )
    return found


def effects_agree_job(j: Row, events: list[Row], effects: list[Row]) -> list[Anomaly]:
    """Each effect belongs to a claim of its attempt, and none came after the attempt that completed the job."""
    found = []
    claimed = {e["attempt"] for e in events if e["kind"] == "claimed"}
    seen: set[str] = set()
    for x in effects:
        if x["attempt"] is None:
            continue
        if x["attempt"] not in claimed and "unclaimed" not in seen:
            seen.add("unclaimed")
            found.append(
                Anomaly(
                    "history_disagrees",
                    j["id"],
                    [effect_line(x)],
                    "disagree.effect_unclaimed",
                    {"attempt": x["attempt"]},
                )
            )
        if j["status"] == "done" and x["attempt"] > j["attempts"] and "after" not in seen:
            seen.add("after")
            done = [e for e in events if e["kind"] == "completed"][-1:]
            found.append(
                Anomaly(
                    "claimed_after_completion",
                    j["id"],
                    [event_line(e) for e in done] + [effect_line(x)],
                    "claimed_after.effect",
                    {"attempt": x["attempt"], "done_by": j["attempts"]},
                )
            )
    return found


def runs_job(j: Row, events: list[Row], effects: list[Row], vanished: set[str]) -> list[Anomaly]:
    """With a handler that records an effect in every run: the job's last attempt ran if it is done, and it did
    not die with its handler never run, unless every worker that claimed it was killed (``vanished``).

    A worker runs every job it learns it claimed, so an attempt can end unrun only if its
    worker died in between, or never learned of its claim (a lost reply it did not look into
    by its token).
    """
    ran = {x["attempt"] for x in effects}
    found = []
    if j["status"] == "done" and j["attempts"] not in ran:
        done = [e for e in events if e["kind"] == "completed"][-1:]
        found.append(
            Anomaly(
                "history_disagrees",
                j["id"],
                [job_line(j)] + [event_line(e) for e in done],
                "disagree.done_unrun",
                {"attempt": j["attempts"]},
            )
        )
    if j["status"] == "dead" and not effects:
        claims = [e for e in events if e["kind"] == "claimed"]
        survivors = sorted({e.get("worker") or "-" for e in claims} - vanished)
        if survivors or not claims:
            found.append(
                Anomaly(
                    "dead_unrun",
                    j["id"],
                    [job_line(j)] + [event_line(e) for e in claims[:3]],
                    "dead_unrun",
                    {"attempts": j["attempts"], "workers": survivors or ["-"]},
                )
            )
    return found


def plainly_clean(j: Row, events: list[Row], now: float, idle: bool) -> bool:
    """True for the two commonest histories of a job with no effects, recognised in one look: enqueued and
    still waiting, or claimed once and completed by that claim, with its row and its links just as those
    events leave them. Every per-job rule finds nothing in such a job (a test runs both on each shape), so
    the checker skips them; anything else, however slightly different, goes through every rule."""
    n = len(events)
    if n == 1:
        (e,) = events
        return (
            e["kind"] == "enqueued"
            and j["status"] == "pending"
            and (not idle or j["run_at"] > now)
            and j["attempts"] == 0
            and j["token"] is None
            and j["worker"] is None
            and e["attempt"] <= j["max_attempts"]
            and e["prev"] is None
            and j["last_event_id"] == e["id"]
        )
    if n == 3:
        e, c, d = events
        token = c["token"]
        return (
            e["kind"] == "enqueued"
            and c["kind"] == "claimed"
            and d["kind"] == "completed"
            and j["status"] == "done"
            and c["attempt"] == 1 == j["attempts"] <= j["max_attempts"]
            and token is not None
            and d["token"] == token == j["token"]
            and j["worker"] == c["worker"]
            and e["attempt"] <= j["max_attempts"]
            and d["attempt"] <= j["max_attempts"]
            and e["prev"] is None
            and c["prev"] == e["id"]
            and d["prev"] == c["id"]
            and j["last_event_id"] == d["id"]
        )
    return False


class Counts:
    """What a run did, for the report's first lines, added up one job at a time: how hard the faults hit
    and what the queue refused."""

    def __init__(self, now: float, idle: bool):
        self.now, self.idle = now, idle
        self.statuses: dict[str, int] = defaultdict(int)
        self.kinds: dict[str, int] = defaultdict(int)
        self.jobs = self.waiting = self.repeated_runs = self.zombies = self.absorbed = 0
        self.effects = self.events = 0

    def add(self, j: Row | None, events: list[Row], effects: list[Row]) -> None:
        """Count one job: its row (None when gone), its events and its effects."""
        kinds = self.kinds
        claims = 0
        zombies = set()
        for e in events:
            kind = e["kind"]
            kinds[kind] += 1
            if kind == "claimed":
                claims += 1
            elif kind == "lease_lost":
                zombies.add(e["token"])
        self.events += len(events)
        self.effects += len(effects)
        self.zombies += len(zombies)
        if claims > 1:
            self.repeated_runs += claims - 1
            keys = [x["key"] for x in effects]
            if keys and len(set(keys)) == len(keys):
                self.absorbed += 1
        if j is not None:
            self.jobs += 1
            self.statuses[j["status"]] += 1
            if self.idle and j["status"] == "pending" and j["run_at"] > self.now:
                self.waiting += 1

    def add_plain(self, status: str, counted: PlainCount) -> None:
        """Count the jobs of one ``status`` the database found plain (``shapes``): no refusal, no reap, no
        effect among them, so only their number, events and claims."""
        self.jobs += counted.jobs
        self.statuses[status] += counted.jobs
        self.events += counted.events
        self.kinds["claimed"] += counted.claims
        self.repeated_runs += counted.repeated
        if self.idle and status == "pending":  # a plain pending job counted with idle workers is not due yet
            self.waiting += counted.jobs

    def result(self) -> dict[str, int]:
        """The counts, by name."""
        return {
            "jobs": self.jobs,
            **{s: self.statuses[s] for s in ("pending", "running", "done", "dead")},
            "waiting": self.waiting,
            "attempts": self.kinds["claimed"],
            "repeated_runs": self.repeated_runs,
            "reaps": sum(self.kinds[k] for k in REAPER_RELEASES),
            "refused_writes": self.kinds["lease_lost"],
            "refused_zombies": self.zombies,
            "effects": self.effects,
            "repeats_absorbed": self.absorbed,
            "events": self.events,
        }


# -- across jobs -----------------------------------------------------------------------------------------


def specification(
    jobs: list[Row],
    events: list[Row],
    backoff: Backoff | None,
    lease_of: Callable[[str | None], float | None],
) -> list[Anomaly]:
    """specification: the history fed in order through the simulator's reference model (``leaselab.sim.judge``);
    the first event where they disagree, with the job's events that led there. What the history cannot show
    (a claim's size, reaps that changed nothing, results) is listed in that module."""
    found = judge(jobs, events, backoff=backoff, lease_of=lease_of)
    if found is None:
        return []
    by_id = {e["id"]: e for e in events}
    witness = [event_line(by_id[i]) for i in found.led]
    if found.event is None:
        witness += [job_line(j) for j in jobs if j["id"] == found.job]
    return [Anomaly("specification", found.job, witness, f"spec.{found.rule}", found.facts)]


# -- a whole History at once: the rules as the chaos suite and the lessons call them -----------------------


def _each(h: History) -> Iterable[tuple[Row | None, int, list[Row]]]:
    return in_memory(h).per_job()


def lost_jobs(h: History) -> list[Anomaly]:
    """lost: every job whose events (or effects) exist but whose row is gone."""
    seen: set[int] = set()
    found: list[Anomaly] = []
    for j, job_id, events in _each(h):
        seen.add(job_id)
        if j is None:
            found += gone(job_id, events)
    orphans: dict[int, list[dict]] = defaultdict(list)
    for x in h.effects:
        if x["job"] not in seen:
            orphans[x["job"]].append(x)
    return found + [a for job_id, lines in sorted(orphans.items()) for a in effects_of_gone(job_id, lines)]


def unfinished(h: History, idle: bool) -> list[Anomaly]:
    """stuck and lost, over every job (``unfinished_job``)."""
    return [a for j, _, events in _each(h) if j is not None for a in unfinished_job(j, events, h.now, idle)]


def fencing(h: History) -> list[Anomaly]:
    """Fenced writes, over every job (``fencing_job``)."""
    return [a for _, job_id, events in _each(h) for a in fencing_job(job_id, events)]


def attempts(h: History) -> list[Anomaly]:
    """Attempts within bounds and numbered, over every job (``attempts_job``)."""
    return [a for j, _, events in _each(h) if j is not None for a in attempts_job(j, events)]


def events_agree(h: History) -> list[Anomaly]:
    """The events replay to the row, over every job (``events_agree_job``)."""
    return [a for j, _, events in _each(h) if j is not None for a in events_agree_job(j, events)]


def links(h: History) -> list[Anomaly]:
    """Each job's linked history is its events, over every job (``links_job``)."""
    view = in_memory(h)
    return [a for j, _, events in view.per_job() if j is not None for a in links_job(j, events, view.event)]


def counts(h: History, idle: bool) -> dict[str, int]:
    """What a run did, for the report's first lines (``Counts``)."""
    tally = Counts(h.now, idle)
    effects: dict[int, list[Row]] = defaultdict(list)
    for x in h.effects:
        effects[x["job"]].append(x)
    seen = set()
    for j, job_id, events in _each(h):
        seen.add(job_id)
        tally.add(j, events, effects.get(job_id, []))
    for job_id, lines in effects.items():
        if job_id not in seen:
            tally.add(None, [], lines)
    return tally.result()
