"""The checker's rules: one function per promise, each over a ``History``, each returning the ``Anomaly``s it saw.

The events are the queue's own record, written by triggers in the same transaction as each
change; the effects are the handlers' record of the outside world. A rule trusts neither
the jobs table nor the library: it rebuilds what must have happened from the events and
compares. Witnesses are the few rows that prove an anomaly, in history order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from ..backoff import Backoff
from ..sim.judge import judge
from .history import History, effect_line, event_line, job_line
from .report import Anomaly

# The ways a holder ends an attempt without completing it, each fenced by its token: a failure, a
# timeout its worker gave up at, a hand-back when its worker stopped.
GIVEN_UP = ("failed", "timed_out", "released")
# The only ways a running job goes back to pending (or on to dead): the reaper, or its holder giving up.
RELEASES = ("reaped", *GIVEN_UP)
WRITES = ("heartbeat", "completed", *GIVEN_UP)  # what a holder writes, each fenced by its token

# Seconds: a renewal's time and its lease are two readings of the queue's clock.
REAP_SLACK = 1e-3

# Seconds a lease may have run out before a running job counts as stuck while workers may
# still be busy: their reapers run every poll, so a minute is far past any of them.
STUCK_AFTER = 60.0


def by_job(events: Iterable[dict]) -> dict[int, list[dict]]:
    """Each job's events, oldest first."""
    grouped: dict[int, list[dict]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e["id"]):
        grouped[e["job_id"]].append(e)
    return grouped


def _first_last(history: list[dict]) -> list[str]:
    picked = history[:1] + history[-1:] if len(history) > 1 else history
    return [event_line(e) for e in picked]


def lost_jobs(h: History) -> list[Anomaly]:
    """lost: a job whose events (or effects) exist but whose row is gone: an acknowledged enqueue lost."""
    known = {j["id"] for j in h.jobs}
    grouped = by_job(h.events)
    found = [
        Anomaly("lost", job_id, _first_last(grouped[job_id]), "lost.gone") for job_id in sorted(grouped.keys() - known)
    ]
    orphans: dict[int, list[dict]] = defaultdict(list)
    for x in h.effects:
        if x["job"] not in known and x["job"] not in grouped:
            orphans[x["job"]].append(x)
    found += [
        Anomaly("lost", job_id, [effect_line(x) for x in lines[:3]], "lost.effect_of_gone")
        for job_id, lines in sorted(orphans.items())
    ]
    return found


def unfinished(h: History, idle: bool) -> list[Anomaly]:
    """stuck and lost: a job neither done nor dead that nothing will move on.

    Running under a lease that ran out (with ``idle``, at all; otherwise ``STUCK_AFTER`` ago)
    is stuck: no reaper took it back. With ``idle``, running under a lease still valid is
    lost (no idle worker is doing it), and pending and due is stuck (no idle worker claimed
    it). A pending job whose time has not come is waiting, which is no anomaly.
    """
    found = []
    grouped = by_job(h.events)
    for j in h.jobs:
        witness = [job_line(j)] + [event_line(e) for e in grouped.get(j["id"], [])[-1:]]
        if j["status"] == "running" and j["lease_until"] is not None:
            ago = h.now - j["lease_until"]
            if ago > (0 if idle else STUCK_AFTER):
                found.append(Anomaly("stuck", j["id"], witness, "stuck.expired", {"ago": ago}))
            elif idle:
                found.append(Anomaly("lost", j["id"], witness, "lost.abandoned", {"left": -ago}))
        elif j["status"] == "pending" and idle and j["run_at"] <= h.now:
            what = "stuck.runnable_again" if j["attempts"] else "stuck.runnable"
            found.append(Anomaly("stuck", j["id"], witness, what, {"ago": h.now - j["run_at"]}))
    return found


def waiting(h: History) -> int:
    """How many jobs are pending with their time still to come."""
    return sum(j["status"] == "pending" and j["run_at"] > h.now for j in h.jobs)


def fencing(h: History) -> list[Anomaly]:
    """Every accepted write came from the token that held the lease, and nothing moved a finished job.

    Walks each job's events holding who has the lease: a claim while another token holds it
    (overlapping leases), a heartbeat, completion or failure from a token not holding it
    (stale write accepted), a claim, write or reap after ``completed`` or ``dead``
    (claimed after completion, completed twice, stale write, history disagrees).
    """
    found = []
    for job_id, history in by_job(h.events).items():
        holder: dict | None = None  # the claim whose lease is held
        ended: dict | None = None  # the completed or dead event that finished the job
        for e in history:
            kind = e["kind"]
            if kind in ("enqueued", "lease_lost"):
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
                elif kind == "reaped":
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
                elif kind in GIVEN_UP:
                    holder = None
            elif kind == "reaped":
                if holder is None:
                    found.append(
                        Anomaly(
                            "history_disagrees", job_id, [event_line(e)], "disagree.release_unheld", {"event": e["id"]}
                        )
                    )
                holder = None
            elif kind == "dead":
                ended = e
    return found


def _token(e: dict) -> str:
    return "-" if e.get("token") is None else str(e["token"])[:8]


def attempts(h: History) -> list[Anomaly]:
    """Attempts stay within ``max_attempts``, and claims number them 1, 2, 3, ... with no gap.

    A number claimed twice under two tokens is left to ``fences`` (fence reused).
    """
    found = []
    grouped = by_job(h.events)
    for j in h.jobs:
        history = grouped.get(j["id"], [])
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
        over = next((e for e in history if e["attempt"] > j["max_attempts"]), None)
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
        claims = [e for e in history if e["kind"] == "claimed"]
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
        elif kind in RELEASES:
            state["status"] = "pending"  # a following 'dead' event overrides
        elif kind == "dead":
            state["status"] = "dead"
    return state


def events_agree(h: History) -> list[Anomaly]:
    """history disagrees: replaying a job's events gives its row (status, attempts, last token and worker),
    and its history starts with one enqueue."""
    found = []
    grouped = by_job(h.events)
    for j in h.jobs:
        history = grouped.get(j["id"], [])
        if not history or history[0]["kind"] != "enqueued":
            found.append(
                Anomaly("history_disagrees", j["id"], [job_line(j)] + _first_last(history)[:1], "disagree.start")
            )
        twice = [e for e in history if e["kind"] == "enqueued"]
        if len(twice) > 1:
            found.append(
                Anomaly("history_disagrees", j["id"], [event_line(e) for e in twice[:2]], "disagree.enqueued_twice")
            )
        state = replay(history)
        for name in ("status", "attempts", "token", "worker"):
            if state[name] != j[name]:
                shown = (lambda v: "-" if v is None else str(v)[:8]) if name == "token" else (lambda v: v)
                found.append(
                    Anomaly(
                        "history_disagrees",
                        j["id"],
                        [job_line(j)] + _first_last(history)[1:],
                        "disagree.field",
                        {"field": name, "expected": shown(state[name]), "actual": shown(j[name])},
                    )
                )
    return found


def links(h: History) -> list[Anomaly]:
    """history disagrees: each job's linked history (``last_event_id``, then ``prev``, ...) is exactly its events.

    The queue reads one job's history, and finds the claim behind a zombie's token, by walking
    these links; a link lost or crossed between jobs would hide events from both.
    """
    found = []
    by_id = {e["id"]: e for e in h.events}
    grouped = by_job(h.events)
    for j in h.jobs:
        walked: list[int] = []
        at, missing = j.get("last_event_id"), None
        while at is not None and len(walked) <= len(h.events):
            event = by_id.get(at)
            if event is None:
                missing = at
                break
            walked.append(event["id"])
            at = event.get("prev")
        expected = [e["id"] for e in reversed(grouped.get(j["id"], []))]
        if missing is not None:
            found.append(
                Anomaly("history_disagrees", j["id"], [job_line(j)], "disagree.link_missing", {"event": missing})
            )
        elif walked != expected:
            found.append(
                Anomaly(
                    "history_disagrees",
                    j["id"],
                    [job_line(j)],
                    "disagree.links",
                    {"walked": walked[:8], "expected": expected[:8]},
                )
            )
    return found


def fences(h: History) -> list[Anomaly]:
    """fence reused: each ``(job, attempt)`` belongs to one token, in the claims and in the effects.

    An outside store trusts the fence; a claim lost in a server crash takes its own
    ``claimed`` event with it, so the effects that carry a token are what still show the
    first holder.
    """
    tokens: dict[tuple[int, int], dict[str, str]] = defaultdict(dict)  # fence -> token -> a witness line
    for e in h.events:
        if e["kind"] == "claimed" and e.get("token") is not None:
            tokens[(e["job_id"], e["attempt"])].setdefault(e["token"], event_line(e))
    for x in h.effects:
        if x.get("token") is not None and x["attempt"] is not None:
            tokens[(x["job"], x["attempt"])].setdefault(x["token"], effect_line(x))
    return [
        Anomaly(
            "fence_reused",
            job_id,
            list(held.values())[:4],
            "fence_reused",
            {"attempt": attempt, "n": len(held), "tokens": sorted(t[:8] for t in held)},
        )
        for (job_id, attempt), held in sorted(tokens.items())
        if len(held) > 1
    ]


def false_losses(h: History) -> list[Anomaly]:
    """false loss: no ``lease_lost`` for a token whose completion (or failure) went through.

    A token that finished the job held it until then, and its worker stops renewing before it
    finishes; a refusal recorded for it can only be its own retried completion, after a lost
    reply, taken for a loss: a history falsified.
    """
    found = []
    for job_id, history in by_job(h.events).items():
        finished = {e["token"]: e for e in history if e["kind"] in ("completed", *GIVEN_UP)}
        for e in history:
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


def derived_leases(h: History) -> dict[str, float]:
    """The lease each worker used, as far as the history shows it: a running job's lease end minus its last renewal."""
    found: dict[str, float] = {}
    grouped = by_job(h.events)
    for j in h.jobs:
        if j["status"] != "running" or j["lease_until"] is None or j.get("worker") is None:
            continue
        renewals = [
            e for e in grouped.get(j["id"], []) if e["kind"] in ("claimed", "heartbeat") and e["token"] == j["token"]
        ]
        if renewals:
            found.setdefault(j["worker"], j["lease_until"] - renewals[-1]["at"])
    return found


def reaps(h: History, lease_of: Callable[[str | None], float | None]) -> list[Anomaly]:
    """live holder reaped, and overlapping leases in time: a reap comes after the holder's lease ran out.

    The events hold each renewal's time (``at`` of its ``claimed`` or ``heartbeat``), not the
    lease it wrote, so ``lease_of(worker)`` (that worker's lease, or None when unknown: the
    reap is not judged) rebuilds it. A reap stamped earlier took the job from a holder whose
    lease still ran; if the next claim came before that lease ran out too, two workers held
    the job at once.
    """
    found = []
    for job_id, history in by_job(h.events).items():
        renewed: dict[str, dict] = {}
        for i, e in enumerate(history):
            if e["kind"] in ("claimed", "heartbeat"):
                renewed[e["token"]] = e
            elif e["kind"] == "reaped" and e["token"] in renewed:
                last = renewed[e["token"]]
                lease = lease_of(last.get("worker"))
                if lease is None:
                    continue
                until = last["at"] + lease
                if e["at"] >= until - REAP_SLACK:
                    continue
                claim = next((c for c in history[i + 1 :] if c["kind"] == "claimed"), None)
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


def effects_repeated(h: History) -> list[Anomaly]:
    """effect repeated: one job's effect with one key recorded more than once.

    A job that ran twice with its effect recorded once (a keyed or fenced store kept it once)
    is at-least-once working as promised, and no anomaly.
    """
    groups: dict[tuple[int, str | None], list[dict]] = defaultdict(list)
    for x in h.effects:
        groups[(x["job"], x["key"])].append(x)
    found = []
    for (job_id, key), lines in sorted(groups.items(), key=lambda item: (item[0][0], str(item[0][1]))):
        if len(lines) > 1:
            facts = {"n": len(lines), "attempts": [x["attempt"] if x["attempt"] is not None else "-" for x in lines]}
            if key is not None:
                facts["key"] = key
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


def effects_agree(h: History) -> list[Anomaly]:
    """Each effect belongs to a claim of its attempt, and none came after the attempt that completed the job."""
    found = []
    grouped = by_job(h.events)
    rows = {j["id"]: j for j in h.jobs}
    seen: set[tuple[int, str]] = set()
    for x in h.effects:
        j = rows.get(x["job"])
        if j is None or x["attempt"] is None:
            continue
        history = grouped.get(x["job"], [])
        claimed = {e["attempt"] for e in history if e["kind"] == "claimed"}
        if x["attempt"] not in claimed and (x["job"], "unclaimed") not in seen:
            seen.add((x["job"], "unclaimed"))
            found.append(
                Anomaly(
                    "history_disagrees",
                    x["job"],
                    [effect_line(x)],
                    "disagree.effect_unclaimed",
                    {"attempt": x["attempt"]},
                )
            )
        if j["status"] == "done" and x["attempt"] > j["attempts"] and (x["job"], "after") not in seen:
            seen.add((x["job"], "after"))
            done = [e for e in history if e["kind"] == "completed"][-1:]
            found.append(
                Anomaly(
                    "claimed_after_completion",
                    x["job"],
                    [event_line(e) for e in done] + [effect_line(x)],
                    "claimed_after.effect",
                    {"attempt": x["attempt"], "done_by": j["attempts"]},
                )
            )
    return found


def runs(h: History, vanished: Iterable[str] = ()) -> list[Anomaly]:
    """With a handler that records an effect in every run: each done job's last attempt ran, and no job
    died with its handler never run, unless every worker that claimed it was killed (``vanished``).

    A worker runs every job it learns it claimed, so an attempt can end unrun only if its
    worker died in between, or never learned of its claim (a lost reply it did not look into
    by its token).
    """
    vanished = set(vanished)
    ran: dict[int, set] = defaultdict(set)
    for x in h.effects:
        ran[x["job"]].add(x["attempt"])
    grouped = by_job(h.events)
    found = []
    for j in h.jobs:
        claims = [e for e in grouped.get(j["id"], []) if e["kind"] == "claimed"]
        if j["status"] == "done" and j["attempts"] not in ran.get(j["id"], set()):
            done = [e for e in grouped.get(j["id"], []) if e["kind"] == "completed"][-1:]
            found.append(
                Anomaly(
                    "history_disagrees",
                    j["id"],
                    [job_line(j)] + [event_line(e) for e in done],
                    "disagree.done_unrun",
                    {"attempt": j["attempts"]},
                )
            )
        if j["status"] == "dead" and j["id"] not in ran:
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


def counts(h: History, idle: bool) -> dict[str, int]:
    """What a run did, for the report's first lines: how hard the faults hit and what the queue refused."""
    claims: dict[int, int] = defaultdict(int)
    kinds: dict[str, int] = defaultdict(int)
    zombies = set()
    for e in h.events:
        kinds[e["kind"]] += 1
        if e["kind"] == "claimed":
            claims[e["job_id"]] += 1
        elif e["kind"] == "lease_lost":
            zombies.add((e["job_id"], e["token"]))
    statuses: dict[str, int] = defaultdict(int)
    for j in h.jobs:
        statuses[j["status"]] += 1
    keys: dict[int, list] = defaultdict(list)
    for x in h.effects:
        keys[x["job"]].append(x["key"])
    absorbed = sum(
        1 for job_id, n in claims.items() if n > 1 and keys.get(job_id) and len(set(keys[job_id])) == len(keys[job_id])
    )
    return {
        "jobs": len(h.jobs),
        **{s: statuses[s] for s in ("pending", "running", "done", "dead")},
        "waiting": waiting(h) if idle else 0,
        "attempts": kinds["claimed"],
        "repeated_runs": sum(n - 1 for n in claims.values() if n > 1),
        "reaps": kinds["reaped"],
        "refused_writes": kinds["lease_lost"],
        "refused_zombies": len(zombies),
        "effects": len(h.effects),
        "repeats_absorbed": absorbed,
        "events": len(h.events),
    }


def specification(h: History, backoff: Backoff | None, lease_of: Callable[[str | None], float | None]) -> list[Anomaly]:
    """specification: the history fed in order through the simulator's reference model (``leaselab.sim.judge``);
    the first event where they disagree, with the job's events that led there. What the history cannot show
    (a claim's size, reaps that changed nothing, results) is listed in that module."""
    found = judge(h.jobs, h.events, backoff=backoff, lease_of=lease_of)
    if found is None:
        return []
    by_id = {e["id"]: e for e in h.events}
    witness = [event_line(by_id[i]) for i in found.led]
    if found.event is None:
        witness += [job_line(j) for j in h.jobs if j["id"] == found.job]
    return [Anomaly("specification", found.job, witness, f"spec.{found.rule}", found.facts)]
