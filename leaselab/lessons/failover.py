"""The crash lesson's failover, live: a primary replaced by its standby under real workers, asynchronous then
synchronous, judged by the checker from the server alone and again with the workers' journals.

::

    runs = fail_over(work / "failover")          # [async, sync], every server stopped and removed
    for run in runs:
        print(run.verdict(lang))                 # yes/no facts: the same in every run
        print(run.tally(lang))                   # the counts: they vary from run to run

Each run starts a primary and one streaming standby (``leaselab.chaos.failover.replicated``), enqueues
``jobs`` jobs durably and lets the standby replay them all, then starts ``workers`` real worker processes
(``leaselab.harness.fleet``) that journal what the queue tells them. The failover is the one
``leaselab chaos --faults failover`` strikes (``leaselab.chaos.failover.Failover``): with ``async`` the
standby's WAL sender is frozen first, and the primary is stopped at once only after the journals hold
more acknowledged completions than the fleet could have been told before the freeze. So the promoted
standby certainly lacks some acknowledged completions, and the claims behind them, however the machine
is loaded: every yes and no the lesson prints is forced by the gate, never by timing. With ``sync``
(``synchronous_commit = on``) the same gate makes the failover land on a busy fleet, and nothing
acknowledged can be lost. The fleet then drains on the promoted server, and the checker judges it.
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..arguments import integer
from ..chaos.failover import WITNESSES, Failover, acknowledged, replicated
from ..check import Anomaly, Report, check
from ..harness import demo
from ..harness.fleet import Fleet
from ..queue import Queue
from ..worker import handler_path
from .notebook import wait_until
from .texts import text

MODES = ("async", "sync")  # what the lesson shows, in its order: the loss first, then the cure
JOBS = 300
WORKERS = 2
CONCURRENCY = 2
LEASE = 2.0  # short, so the jobs the promoted server still thinks running are reaped soon after
HANDLER = handler_path(demo.sleepy)
PAYLOAD = {"seconds": 0.02}
WARM = 20  # completions journaled before the failover begins: the fleet is running, not starting
TIMEOUT = 600.0  # seconds any one wait may take on a loaded machine: a bound, never a measure
# What the journals judge: the anomalies a failover can leave that the server's history cannot show.
JOURNAL_KINDS = ("fence_handed_twice", "acknowledged_lost")


@dataclass(frozen=True)
class FailoverRun:
    """One replication mode's failover: the checker's report from the server alone and with the journals."""

    replication: str  # "async" or "sync" (``MODES``)
    alone: Report  # ``leaselab check URL``: the promoted server's history and jobs
    judged: Report  # ``leaselab check URL --journal DIR``: the same, against what the workers were told
    told: int  # completions the journals say the workers were told of
    jobs: int

    def count(self, kind: str) -> int:
        """How many anomalies of ``kind`` the check with the journals found."""
        return self.judged.totals.get(kind, 0)

    def witness(self, kind: str) -> Anomaly | None:
        """The first anomaly of ``kind`` the check with the journals holds, or None."""
        return next((a for a in self.judged.anomalies if a.kind == kind), None)

    def verdict(self, lang: str = "en") -> str:
        """Yes-or-no facts only, the same in every run of this mode: what a stored lesson checks."""
        return text(
            "fo_verdict",
            lang,
            replication=text(f"fo_{self.replication}", lang),
            alone=self.alone.clean,
            twice=self.count("fence_handed_twice") > 0,
            lost=self.count("acknowledged_lost") > 0,
            other=any(k not in JOURNAL_KINDS for k in self.judged.totals),
        )

    def tally(self, lang: str = "en") -> str:
        """The counts, which vary from run to run, and one anomaly of each kind the journals found, with the
        journal lines that witness it."""
        lines = [
            text(
                "fo_tally",
                lang,
                replication=text(f"fo_{self.replication}", lang),
                jobs=self.jobs,
                told=self.told,
                twice=self.count("fence_handed_twice"),
                lost=self.count("acknowledged_lost"),
            )
        ]
        for kind in JOURNAL_KINDS:
            anomaly = self.witness(kind)
            if anomaly is not None:
                lines += [f"  {anomaly.title(lang)}: {anomaly.sentence(lang)}"]
                # The journals' own lines: the clients' evidence. The server's lines carry its times as
                # raw floats, which a Russian lesson would print the English way.
                lines += [f"      {line}" for line in anomaly.witness if line.startswith("journal ")]
        return "\n".join(lines)


def fail_over_once(
    replication: str,
    folder: str | os.PathLike,
    *,
    jobs: int = JOBS,
    workers: int = WORKERS,
    concurrency: int = CONCURRENCY,
    lang: str = "en",
    **server_options: Any,
) -> FailoverRun:
    """One failover under a real fleet on a primary and standby in ``replication`` (``MODES``); the workers'
    logs and journals go to ``folder`` (made if missing; what an earlier run left there is removed first).
    Every server and worker is stopped, and each server's folder removed, before this returns or raises.
    ``server_options`` go to the servers (``parent``, say); ``lang`` is the language of a wait's timeout."""
    if replication not in MODES:
        raise ValueError(f"replication must be one of {', '.join(MODES)}, got {replication!r}")
    slots = integer("workers", workers, 1) * integer("concurrency", concurrency, 1)
    # Fewer jobs than the warm-up and the gate's margin (``chaos.failover``) need, and no failover would come.
    integer("jobs", jobs, WARM + 2 * slots + WITNESSES + 1)
    folder = Path(folder)
    journal = folder / "journal"
    # A cell run again reuses its folder: journals of an earlier run, judged against this run's new database
    # (the same job ids, other tokens), would read as completions it lost.
    for earlier in (journal, folder / "logs"):
        shutil.rmtree(earlier, ignore_errors=True)
    (folder / "actions.jsonl").unlink(missing_ok=True)
    journal.mkdir(parents=True)
    with replicated(replication, **server_options) as servers:
        url = servers.create_database("failover")
        with Queue(url) as q:
            q.enqueue_many([PAYLOAD] * jobs)
        servers.catch_up()  # every job on the standby: what a failover loses is claims and outcomes only
        fleet = Fleet(url, log_dir=folder / "logs", actions_file=folder / "actions.jsonl", proxies=False)
        try:
            for _ in range(workers):
                fleet.spawn(HANDLER, lease=LEASE, concurrency=concurrency, journal=journal)
            warm = text("fo_wait_warm", lang)
            wait_until(lambda: acknowledged(journal) >= WARM, timeout=TIMEOUT, what=warm, lang=lang)
            strike = Failover(servers, journal, slots, gate_timeout=TIMEOUT)
            missed = strike.strike(threading.Lock())
            if missed is not None:
                raise TimeoutError(text("fo_missed", lang, why=missed))
            with Queue(url) as q:
                wait_until(lambda: _drained(q), timeout=TIMEOUT, what=text("fo_wait_drained", lang), lang=lang)
        finally:
            fleet.shutdown()
            fleet.queue.close()
        alone = check(url, lease=LEASE, idle=True)
        judged = check(url, lease=LEASE, idle=True, journal=journal)
    return FailoverRun(replication, alone, judged, acknowledged(journal), jobs)


def fail_over(folder: str | os.PathLike, **options: Any) -> list[FailoverRun]:
    """``fail_over_once`` for each of ``MODES`` in turn, each in a folder of its own under ``folder``."""
    return [fail_over_once(mode, Path(folder) / mode, **options) for mode in MODES]


def _drained(q: Queue) -> bool:
    stats = q.stats()
    return stats.get("pending", 0) + stats.get("running", 0) == 0
