"""``leaselab chaos --faults failover`` on a real primary and standby: the primary stopped at once, the standby
promoted, a new standby copied, again and again, while real workers run on the multi-host URL and journal what
they were told. Synchronous replication keeps every promise; asynchronous, with the standby held behind before each
failover, loses acknowledged outcomes, and the report names them from the journals.

Each failover waits for the workers to be told of more (``chaos.failover``), never for a duration: the loss under
asynchronous replication is forced, not lucky."""

from __future__ import annotations

import pytest

from leaselab.chaos import plan, run
from leaselab.chaos.errors import FaultNotApplicable
from leaselab.chaos.failover import WITNESSES, replicated
from leaselab.chaos.schedule import applicable
from tests.support.servers import in_memory

pytest.importorskip("psycopg")

HANDLER = "leaselab.harness.demo:sleepy"
JOBS = 1000
PAYLOAD = {"seconds": 0.05}  # slow enough that a backlog stays through the faults: each failover's wait ends


def _seed_with(failovers: int, seconds: float) -> int:
    """The first seed whose schedule has exactly ``failovers`` failovers in ``seconds``: a property of the seed."""
    return next(
        seed
        for seed in range(1000)
        if len(plan(seed, seconds=seconds, workers=2, lease=1.0, faults=["failover"]).steps) == failovers
    )


def _chaos(tmp_path, replication, bin_dir, failovers, seconds):
    seed = _seed_with(failovers, seconds)
    with replicated(replication, bin_dir=bin_dir, parent=in_memory()) as servers:
        url = servers.create_database("chaos")
        ports = {s.port for s in servers.servers}
        result = run(
            url,
            HANDLER,
            workers=2,
            concurrency=2,
            jobs=JOBS,
            payload=PAYLOAD,
            seconds=seconds,
            faults="failover",
            seed=seed,
            servers=servers,
            folder=tmp_path / "run",
            drain_timeout=300,
        )
        assert {s.port for s in servers.servers} == ports  # the URL named the same two hosts throughout
    return result


@pytest.mark.chaos
def test_chaos_fails_a_synchronous_primary_over_again_and_again_and_every_promise_holds(tmp_path, bin_dir):
    result = _chaos(tmp_path, "sync", bin_dir, failovers=3, seconds=9.0)
    assert [a.missed for a in result.applied] == [None, None, None]
    assert result.fault_counts() == {"failover": 3}
    assert result.report.totals.get("fence_handed_twice", 0) == 0
    assert result.report.totals.get("acknowledged_lost", 0) == 0
    assert result.clean and result.drained, result.render()
    assert "3 faults applied (failover 3)" in result.render()


@pytest.mark.chaos
def test_chaos_failing_over_to_an_asynchronous_standby_held_behind_names_the_acknowledged_outcomes_lost(
    tmp_path, bin_dir
):
    result = _chaos(tmp_path, "async", bin_dir, failovers=1, seconds=3.0)
    assert result.fault_counts() == {"failover": 1}, result.render()
    lost = result.report.totals.get("acknowledged_lost", 0)
    assert lost >= WITNESSES, result.render()
    assert result.report.totals.get("split_brain", 0) == 0  # one primary at a time: a failover, not a split brain
    assert not result.clean
    text = result.render()
    assert "the workers' journals" in text or "journal" in text, text
    witnesses = [a for a in result.report.anomalies if a.kind == "acknowledged_lost"]
    assert witnesses and all(a.witness[0].startswith("journal ") for a in witnesses)


def test_failover_goes_only_with_a_replicated_server_chaos_started_and_without_proxied_faults():
    with pytest.raises(FaultNotApplicable, match="replicated server it started"):
        applicable(["failover"], server=True, own_server=True)
    for other in ("partition", "drop-reply", "server-crash"):
        with pytest.raises(FaultNotApplicable, match="does not go with failover"):
            applicable(["failover", other], server=True, own_server=True, replicated=True)
    assert applicable(None, server=True, own_server=False, replicated=True) == ("kill", "pause", "clock", "failover")
    assert "failover" not in applicable(None, server=True, own_server=True)


@pytest.mark.chaos
def test_the_command_starts_a_primary_and_a_standby_fails_over_and_exits_1_naming_the_lost_outcomes(tmp_path):
    from tests.test_chaos_cli import chaos

    seed = _seed_with(1, 3.0)
    done = chaos(
        tmp_path,
        *("--db", "postgresql", "--faults", "failover", "--replication", "async", "--handler", HANDLER),
        *("--payload", '{"seconds": 0.05}', "--jobs", "600", "--seconds", "3", "--workers", "2"),
        *("--concurrency", "2", "--seed", str(seed)),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "asynchronous replication (the standby held behind before each failover)" in done.stdout
    assert "1 fault applied (failover 1)" in done.stdout
    assert "acknowledged outcome lost" in done.stdout
    assert list((tmp_path / "leaselab-chaos" / "journal").glob("w1-*.jsonl"))
