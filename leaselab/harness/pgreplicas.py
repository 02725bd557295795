"""A throw-away replicated PostgreSQL server: a primary and streaming standbys, for failover tests.

::

    with Replicated(standbys=1, synchronous="remote_apply") as servers:
        url = servers.create_database("demo")   # postgresql://leaselab@127.0.0.1:P1,127.0.0.1:P2/demo?…
        ...
        servers.stop_primary()                  # an immediate stop: no checkpoint, connections drop
        servers.promote(servers.standbys[0])    # the standby takes writes; the URL finds it
        servers.replace_primary()               # a new standby of it, on the dead primary's port
    # every server stopped, every folder removed

Each server is a ``PgServer`` (``pgserver``): its own temp folder, port and watchdog, so nothing
outlives the owner however it ends. A standby is a copy of the primary made with
``pg_basebackup -R`` (run by its watchdog, as the server's user), streaming from the primary
on 127.0.0.1 under its own ``application_name`` (``standby1``, ``standby2``).

``synchronous``: ``None`` for asynchronous replication (the primary acknowledges a commit
before any standby has it), or a ``synchronous_commit`` level (``"on"``: the standby has
flushed it; ``"remote_apply"``: the standby has applied it, so a read there sees it) with
``synchronous_standby_names = '*'``: one standby, any, must confirm each commit.

Two ways to make a standby lag, which differ at a failover:

- ``apply_delay`` (``recovery_min_apply_delay``): the standby receives the WAL at once but
  applies each commit that long after; reads on it are stale, yet a promotion applies
  everything it received, so nothing the primary acknowledged is lost by it;
- ``hold(standby)``: the primary's WAL sender for that standby is frozen (SIGSTOP), so what
  the primary commits from then on never leaves it. An asynchronous primary acknowledges it
  anyway, and a failover loses it; a synchronous one acknowledges nothing until ``release``.

Standard library only, as ``pgserver``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from typing import Any

from .pgserver import USER, PgNotRunning, PgServer, PgStartFailed

SYNCHRONOUS_LEVELS = ("on", "remote_write", "remote_apply")
MAX_STANDBYS = 2


class PgPrimary(PgServer):
    """The primary of a ``Replicated``: a ``PgServer`` that streams its WAL, synchronously or not."""

    def __init__(self, synchronous: str | None, **options: Any):
        if synchronous is not None and synchronous not in SYNCHRONOUS_LEVELS:
            raise ValueError(f"synchronous must be None or one of {', '.join(SYNCHRONOUS_LEVELS)}, got {synchronous!r}")
        super().__init__(**options)
        self.synchronous = synchronous

    def _own_settings(self) -> dict[str, str]:
        own = {"wal_level": "replica", "max_wal_senders": "10", "wal_sender_timeout": "0"}
        # wal_sender_timeout 0: a WAL sender held by hold() would otherwise end after a minute, and its
        # standby would reconnect and catch up behind the test's back.
        if self.synchronous is not None:
            own |= {"synchronous_standby_names": "*", "synchronous_commit": self.synchronous}
        return own


class PgStandby(PgServer):
    """A streaming standby of ``primary``, made by ``pg_basebackup -R``; ``promote()`` makes it take writes."""

    def __init__(self, primary: PgServer, name: str, apply_delay: float = 0.0, **options: Any):
        if isinstance(apply_delay, bool) or not isinstance(apply_delay, (int, float)) or not 0 <= apply_delay < 3600:
            raise ValueError(f"apply_delay must be a number of seconds in [0, 3600), got {apply_delay!r}")
        super().__init__(**options)
        self.primary, self.name, self.apply_delay = primary, name, float(apply_delay)
        self.promoted = False

    def _make_data(self) -> None:
        if self.primary.port is None or not self.primary.running:
            raise PgStartFailed(f"cannot copy {self.primary!r} for a standby: it is not running")
        self.run_as_server(
            "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(self.primary.port), "-U", USER),
            *("-D", str(self.data_dir), "-R", "-X", "stream", "-c", "fast", "--no-sync"),
        )

    def _own_settings(self) -> dict[str, str]:
        # No synchronous_standby_names here, even when the primary has it: once promoted, with no
        # standby of its own, every commit would wait for ever.
        return {
            "primary_conninfo": f"host=127.0.0.1 port={self.primary.port} user={USER} application_name={self.name}",
            "hot_standby": "on",
            "recovery_min_apply_delay": f"{int(self.apply_delay * 1000)}ms",
        }

    def promote(self) -> None:
        """End recovery (``pg_ctl promote``) and return once the server takes writes: it replays what it
        received first."""
        if not self.running:
            raise PgNotRunning(f"cannot promote {self!r}: it is not running")
        self._cmd("pg_ctl", "promote", "-w", "-t", str(int(self.timeout)), "-D", str(self.data_dir))
        self.promoted = True


class Replicated:
    """A primary and one or two streaming standbys on 127.0.0.1, started by ``start()`` (or ``with``)."""

    def __init__(
        self,
        standbys: int = 1,
        *,
        synchronous: str | None = None,
        apply_delay: float = 0.0,
        settings: Mapping[str, str | int | float] | None = None,
        **options: Any,
    ):
        if isinstance(standbys, bool) or not isinstance(standbys, int) or not 1 <= standbys <= MAX_STANDBYS:
            raise ValueError(f"standbys must be 1 to {MAX_STANDBYS}, got {standbys!r}")
        self.synchronous, self.apply_delay = synchronous, apply_delay
        self._settings, self._options = settings, options
        self.primary: PgServer = PgPrimary(synchronous, settings=settings, **options)
        self.standbys = [
            PgStandby(self.primary, f"standby{i + 1}", apply_delay, settings=settings, **options)
            for i in range(standbys)
        ]
        self._made = standbys  # standbys made so far, so each new one has a name of its own
        self._held: dict[str, int] = {}  # standby name -> pid of its frozen WAL sender

    @property
    def servers(self) -> list[PgServer]:
        return [self.primary, *self.standbys]

    def start(self) -> Replicated:
        """Start the primary, copy it to each standby, and wait until every standby streams from it."""
        try:
            self.primary.start()
            for standby in self.standbys:
                standby.start()
            self._wait_streaming()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_streaming(self) -> None:
        deadline = time.monotonic() + self.primary.timeout
        names = {s.name for s in self.standbys}
        while set(self._senders()) != names:
            if time.monotonic() > deadline:
                raise PgStartFailed(f"the standbys {sorted(names)} did not stream from {self.primary!r} in time")
            time.sleep(0.05)

    def _senders(self) -> dict[str, int]:
        """The primary's WAL senders that stream: standby name -> pid."""
        rows = self.primary.query("SELECT application_name, pid FROM pg_stat_replication WHERE state = 'streaming'")
        return {name: int(pid) for name, pid in (row.split("|") for row in rows)}

    def url(self, dbname: str = "postgres") -> str:
        """A multi-host URL naming every server, which connects to whichever takes writes
        (``target_session_attrs=read-write``)."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.servers)
        return f"postgresql://{USER}@{hosts}/{dbname}?target_session_attrs=read-write"

    def create_database(self, dbname: str) -> str:
        """Create an empty database on the primary (the standbys replay it) and return the multi-host URL."""
        self.primary.create_database(dbname)
        self.catch_up()
        return self.url(dbname)

    def catch_up(self) -> None:
        """Wait until every standby not held has applied all the primary has written so far."""
        (lsn,) = self.primary.query("SELECT pg_current_wal_lsn()")
        deadline = time.monotonic() + self.primary.timeout + max(s.apply_delay for s in self.standbys)
        for standby in self.standbys:
            if standby.name in self._held or standby.promoted:
                continue
            while standby.query(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn") != ["t"]:
                if time.monotonic() > deadline:
                    raise PgStartFailed(f"{standby.name} did not replay the primary's WAL up to {lsn} in time")
                time.sleep(0.05)

    def hold(self, standby: PgStandby) -> None:
        """Freeze the primary's WAL sender for ``standby``: from now on nothing the primary commits reaches it."""
        pid = self._senders().get(standby.name)
        if pid is None:
            raise PgNotRunning(f"{standby.name} does not stream from the primary: nothing to hold")
        os.kill(pid, signal.SIGSTOP)
        self._held[standby.name] = pid

    def release(self, standby: PgStandby) -> None:
        """Let a held WAL sender go on: the standby catches up."""
        pid = self._held.pop(standby.name, None)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def stop_primary(self) -> None:
        """Stop the primary as a killed server stops (``pg_ctl stop -m immediate``; ``PgServer.crash``).

        A held WAL sender is killed with it, before it could send anything more."""
        for pid in self._held.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._held.clear()
        self.primary.crash()

    def promote(self, standby: PgStandby) -> None:
        """Promote ``standby``: it ends recovery and takes writes; the multi-host URL finds it.

        It waits for no standby of its own until ``replace_primary`` gives it one (a standby made by an
        earlier ``replace_primary`` copied a synchronous primary's ``synchronous_standby_names``, under
        which every commit would wait for a standby that does not exist yet)."""
        standby.promote()
        standby.query("ALTER SYSTEM RESET synchronous_standby_names")
        standby.query("SELECT pg_reload_conf()")

    def replace_primary(self) -> PgStandby:
        """After a failover (``stop_primary``, then ``promote``): the promoted standby becomes ``primary`` and a new
        standby of it is made on the dead primary's port, so the same multi-host URL names both again and another
        failover can follow. Returns the new standby once it streams and has replayed all the primary wrote.

        The dead primary's folder is removed first (its data is what a failover gives up). With synchronous
        replication the new primary acknowledges nothing more until the new standby confirms it, as the first
        primary did. Only with one standby: a second would have to follow the new primary (``pg_rewind``)."""
        promoted = [s for s in self.standbys if s.promoted]
        if len(self.standbys) != 1 or not promoted:
            raise PgNotRunning("replace_primary needs one standby, promoted (stop_primary() and promote() first)")
        if self.primary.running:
            raise PgNotRunning(f"the old primary {self.primary!r} still runs: stop_primary() first")
        dead, primary = self.primary, promoted[0]
        port = dead.port
        dead.stop()
        self._made += 1
        standby = PgStandby(
            primary, f"standby{self._made}", self.apply_delay, settings=self._settings, port=port, **self._options
        )
        standby.start()
        self.primary, self.standbys = primary, [standby]
        self._wait_streaming()
        if self.synchronous is not None:
            primary.query("ALTER SYSTEM SET synchronous_standby_names = '*'")
            primary.query(f"ALTER SYSTEM SET synchronous_commit = '{self.synchronous}'")
            primary.query("SELECT pg_reload_conf()")
            self._wait_synchronous()
        self.catch_up()
        return standby

    def _wait_synchronous(self) -> None:
        """Wait until the primary counts its standby as synchronous: from then on each commit waits for it."""
        deadline = time.monotonic() + self.primary.timeout
        while self.primary.query("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") != ["1"]:
            if time.monotonic() > deadline:
                raise PgStartFailed(f"{self.standbys[0].name} did not become synchronous in time")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop every server and remove its folder. Safe to call twice."""
        for name in list(self._held):
            self.release(self.standbys[[s.name for s in self.standbys].index(name)])
        for server in reversed(self.servers):
            server.stop()

    def __enter__(self) -> Replicated:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Replicated(primary={self.primary!r}, standbys={self.standbys!r})"
