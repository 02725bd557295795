"""The audit's contenders: how each queue is filled, how its own worker starts, and what its state says is in flight.

Each is driven through its public API and its own worker or consumer, as its documentation
runs it; none is patched or subclassed. ``settings`` names what differs from its defaults.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MAX_WAIT = 60.0  # seconds: the longest the harness waits for a job to come back
SLACK = 15.0  # seconds past a lease or timeout that a job may take to come back on a loaded machine
# A documented timeout longer than MAX_WAIT (RQ's 180 s, Celery's hour) is not waited out: this
# long shows the job is not back sooner, and the settings column gives the timeout itself.
LONG_WAIT = 20.0


def wait_past(timeout: float) -> float:
    """How long the harness waits for a job to come back when the queue's timeout is ``timeout`` seconds."""
    return timeout + SLACK if timeout + SLACK <= MAX_WAIT else LONG_WAIT


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a worker process: bench/ and this checkout importable first."""
    path = os.pathsep.join(
        [str(HERE), str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    )
    return dict(os.environ, PYTHONPATH=path, **extra)


@dataclass
class Contender:
    """One queue under audit, set up in ``folder``."""

    name: str
    settings: str
    folder: Path = field(default=Path("."))
    # How long the harness waits for a job to come back after a fault before it says "never":
    # the documented bound (the lease) plus ample slack for a loaded machine.
    comeback_wait: float = 30.0
    # The contender's own documented remedy for a job its dying process takes with it, named but not measured.
    lost_hint: str = ""
    # What a late completion the queue did not take means for this queue (leaselab: its fence refused it).
    not_taken: str = "refused"
    # The lease or visibility timeout in seconds (None: the queue has none). The zombie stays stopped
    # past it before the second worker starts: Celery's Redis transport puts unacked messages back
    # only when a consumer starts, so starting one earlier would measure the start, not the timeout.
    timeout: float | None = None
    # Worker name -> the port of the proxy it reaches the server through (the partition scenario).
    proxied: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.comeback_wait = min(self.comeback_wait, MAX_WAIT)

    def version(self) -> str:
        raise NotImplementedError

    def open(self) -> None:
        """Start what the contender needs for all its scenarios (a server); ``close`` stops it."""

    def close(self) -> None:
        """Stop whatever ``open`` started; safe to call when ``open`` failed half-way."""

    def setup(self, folder: Path) -> None:
        self.folder = folder

    def enqueue(self, key: str, fault: str | None, ledger: Path) -> None:
        raise NotImplementedError

    def enqueue_many(self, items: list[tuple[str, str | None]], ledger: Path) -> None:
        """Enqueue ``(key, fault)`` pairs in order (the flood); contenders that enqueue from a
        subprocess do it in one."""
        for key, fault in items:
            self.enqueue(key, fault, ledger)

    def server_address(self) -> tuple[str, int] | None:
        """The (host, port) the workers reach their queue's server at; None for a queue in a file."""
        return None

    def via(self, url: str, name: str) -> str:
        """``url`` for worker ``name``: through its proxy when the partition scenario gave it one."""
        if name not in self.proxied:
            return url
        from leaselab.harness.proxy import through

        return through(url, self.proxied[name])

    def worker(self, name: str) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def held(self) -> set[str]:
        """The keys the queue still shows in flight (claimed, unacknowledged)."""
        return set()

    def settled(self, log: Path, ledger_lines: list[dict], pid: int, key: str) -> bool:
        """True once the worker ``pid`` has handed its completion of ``key`` to the queue and the queue answered."""
        return any(
            line["job"] == key and line["pid"] == pid and line["what"] in ("accepted", "refused")
            for line in ledger_lines
        )

    def queue_acceptances(self, pids: dict[str, int]) -> list[dict]:
        """Ledger lines for completions the queue's own record shows (for queues whose worker says so only there)."""
        return []

    def queue_check(self, vanished: list[str]) -> str | None:
        """What a checker of the queue's own history says (None: the queue keeps no history to check)."""
        return None

    def whereabouts(self) -> str | None:
        """Where the queue's own state puts a job that did not complete (None: nowhere it says)."""
        return None


class Leaselab(Contender):
    def __init__(self, lease: float | None, backend: str = "sqlite"):
        settings = "defaults (lease 30 s)" if lease is None else f"lease {lease:g} s (short, to be reached)"
        super().__init__(
            f"leaselab ({'SQLite' if backend == 'sqlite' else 'PostgreSQL'})",
            settings,
            comeback_wait=wait_past(30.0 if lease is None else lease),
        )
        self.lease, self.backend = lease, backend
        self.timeout = 30.0 if lease is None else lease
        self.server = None
        self.target = ""
        self.databases = 0

    def version(self) -> str:
        import leaselab

        return leaselab.__version__

    def open(self):
        if self.backend == "postgres":
            from leaselab.harness.pgserver import PgServer

            self.server = PgServer().start()

    def close(self):
        if self.server is not None:
            self.server.stop()
            self.server = None

    def setup(self, folder):
        super().setup(folder)
        if self.server is None:
            self.target = str(folder / "leaselab.db")
        else:
            self.databases += 1
            self.target = self.server.create_database(f"audit{self.databases}")

    def enqueue(self, key, fault, ledger):
        from leaselab import Queue

        with Queue(self.target) as q:
            q.enqueue({"key": key, "fault": fault, "ledger": str(ledger)})

    def enqueue_many(self, items, ledger):
        from leaselab import Queue

        with Queue(self.target) as q:
            for key, fault in items:
                q.enqueue({"key": key, "fault": fault, "ledger": str(ledger)})

    def server_address(self):
        if self.server is None:
            return None
        from leaselab.harness.proxy import server_address

        return server_address(self.target)

    def worker(self, name):
        target = self.target if self.server is None else self.via(self.target, name)
        cmd = [
            sys.executable,
            "-m",
            "leaselab",
            "worker",
            "--db",
            target,
            "--handler",
            "audit_handlers:leaselab_job",
            "--name",
            name,
            "--poll",
            "0.05",
            "--max-poll",
            "0.2",
        ]
        if self.lease is not None:
            cmd += ["--lease", str(self.lease)]
        return cmd, child_env()

    def _rows(self, sql: str) -> list[tuple]:
        if self.server is not None:
            import psycopg

            with psycopg.connect(self.target) as conn:
                return conn.execute(sql).fetchall()
        conn = sqlite3.connect(self.target)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def held(self):
        import json

        return {json.loads(p)["key"] for (p,) in self._rows("SELECT payload FROM jobs WHERE status = 'running'")}

    # What the worker logs once it has written a job's outcome or knows it may not: not the pulse's
    # "lease lost ... heartbeat refused", which a thawed worker logs before its handler has ended.
    OUTCOMES = ("completed job", "result not written", "ended without its lease")

    def settled(self, log, ledger_lines, pid, key):
        text = log.read_text() if log.exists() else ""
        ended = any(line["job"] == key and line["pid"] == pid and line["what"] == "end" for line in ledger_lines)
        return ended and any(outcome in text for outcome in self.OUTCOMES)

    def queue_acceptances(self, pids):
        import json

        rows = self._rows(
            "SELECT e.worker, e.at, j.payload FROM events e JOIN jobs j ON j.id = e.job_id "
            "WHERE e.kind = 'completed' ORDER BY e.id"
        )
        # The worker is named, not numbered, in leaselab's events: name the run by the pid that ran it.
        return [
            {"job": json.loads(payload)["key"], "pid": pids[worker], "what": "accepted", "t": float(at)}
            for worker, at, payload in rows
            if worker in pids
        ]

    def queue_check(self, vanished):
        from leaselab.check import check

        report = check(self.target, lease=30.0 if self.lease is None else self.lease, vanished=vanished)
        return "leaselab check: " + report.headline()


class Huey(Contender):
    def __init__(self):
        super().__init__(
            "huey (SqliteHuey)", "defaults (no lease: a task is deleted when dequeued)", comeback_wait=10.0
        )

    def version(self) -> str:
        import huey

        return huey.__version__

    def _env(self):
        return child_env(AUDIT_HUEY_DB=str(self.folder / "huey.db"))

    def enqueue(self, key, fault, ledger):
        self.enqueue_many([(key, fault)], ledger)

    def enqueue_many(self, items, ledger):
        import subprocess

        calls = "; ".join(f"a.job({key!r}, {fault!r}, {str(ledger)!r})" for key, fault in items)
        subprocess.run([sys.executable, "-c", f"import audit_huey_app as a; {calls}"], check=True, env=self._env())

    def worker(self, name):
        return [sys.executable, "-m", "huey.bin.huey_consumer", "audit_huey_app.huey"], self._env()


class PersistQueue(Contender):
    def __init__(self):
        super().__init__(
            "persist-queue (SQLiteAckQueue)",
            "defaults (no visibility timeout; auto_resume: opening the queue puts unacked items back)",
            comeback_wait=10.0,
        )

    def version(self) -> str:
        from importlib.metadata import version

        return version("persist-queue")

    @property
    def path(self) -> Path:
        return self.folder / "persist"

    def enqueue(self, key, fault, ledger):
        from persistqueue import SQLiteAckQueue

        q = SQLiteAckQueue(str(self.path))
        q.put({"key": key, "fault": fault, "ledger": str(ledger)})

    def worker(self, name):
        ledger = self.folder / "ledger.jsonl"
        code = f"import audit_handlers; audit_handlers.persist_consumer({str(self.path)!r}, {str(ledger)!r})"
        return [sys.executable, "-c", code], child_env()

    def held(self):
        import glob
        import pickle

        found = set()
        for db in glob.glob(str(self.path / "*.db")) or [str(self.path / "data.db")]:
            if not os.path.exists(db):
                continue
            conn = sqlite3.connect(db)
            try:
                tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
                for table in tables:
                    cols = [c[1] for c in conn.execute(f'PRAGMA table_info("{table}")')]
                    if "status" in cols and "data" in cols:
                        # persist-queue's AckStatus.unack is '2'; the item is pickled by its default serializer.
                        for (data,) in conn.execute(f"SELECT data FROM \"{table}\" WHERE status IN (2, '2')"):
                            found.add(pickle.loads(data)["key"])
            finally:
                conn.close()
        return found


class LiteQueue(Contender):
    def __init__(self, stale_after: int | None):
        settings = (
            "defaults (no timeout: a locked message stays locked)"
            if stale_after is None
            else f"consumer retries messages locked over {stale_after} s (README's list_locked + retry)"
        )
        super().__init__("litequeue", settings, comeback_wait=10.0 if stale_after is None else wait_past(stale_after))
        self.stale_after = stale_after
        self.timeout = None if stale_after is None else float(stale_after)

    def version(self) -> str:
        from importlib.metadata import version

        return version("litequeue")

    @property
    def db(self) -> Path:
        return self.folder / "litequeue.db"

    def enqueue(self, key, fault, ledger):
        import json

        from litequeue import LiteQueue as LQ

        q = LQ(str(self.db))
        q.put(json.dumps({"key": key, "fault": fault, "ledger": str(ledger)}))
        q.close()

    def worker(self, name):
        ledger = self.folder / "ledger.jsonl"
        code = (
            f"import audit_handlers; audit_handlers.litequeue_consumer({str(self.db)!r}, {str(ledger)!r}, "
            f"{self.stale_after!r})"
        )
        return [sys.executable, "-c", code], child_env()

    def held(self):
        import json

        from litequeue import LiteQueue as LQ

        q = LQ(str(self.db))
        try:
            return {json.loads(m.data)["key"] for m in q.list_locked(0)}
        finally:
            q.close()


class RedisBacked(Contender):
    """A contender whose broker is a throw-away Redis, started once and emptied before each scenario."""

    redis = None

    def open(self):
        from redisserver import RedisServer

        self.redis = RedisServer().start()

    def close(self):
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def setup(self, folder):
        super().setup(folder)
        self.redis.flush()

    def server_address(self):
        return ("127.0.0.1", self.redis.port)


class Rq(RedisBacked):
    def __init__(self, job_timeout: int | None):
        settings = (
            "defaults (job_timeout 180 s)"
            if job_timeout is None
            else f"job_timeout {job_timeout} s (short, to be reached)"
        )
        timeout = 180.0 if job_timeout is None else float(job_timeout)
        super().__init__(
            "RQ (Redis)",
            settings,
            comeback_wait=wait_past(timeout),
            lost_hint="RQ documents Retry(max=...) on enqueue for failed jobs (not measured here)",
        )
        self.job_timeout = job_timeout
        self.timeout = timeout

    def version(self) -> str:
        import rq

        return rq.__version__

    def enqueue(self, key, fault, ledger):
        from redis import Redis
        from rq import Queue as RQueue

        import audit_rq_jobs

        q = RQueue(connection=Redis.from_url(self.redis.url))
        kwargs = {} if self.job_timeout is None else {"job_timeout": self.job_timeout}
        q.enqueue(audit_rq_jobs.job, key, fault, str(ledger), on_success=audit_rq_jobs.succeeded, **kwargs)

    def worker(self, name):
        return [
            sys.executable,
            "-m",
            "rq.cli",
            "worker",
            "--url",
            self.via(self.redis.url, name),
            "--name",
            f"{name}-{os.getpid()}",
        ], child_env()

    def whereabouts(self):
        from redis import Redis
        from rq import Queue as RQueue

        failed = RQueue(connection=Redis.from_url(self.redis.url)).failed_job_registry
        return f"{failed.count} in RQ's FailedJobRegistry, not retried" if failed.count else None


class Celery(RedisBacked):
    def __init__(self, visibility: int | None):
        settings = (
            "acks_late, defaults (Redis visibility_timeout 3600 s)"
            if visibility is None
            else f"acks_late, Redis visibility_timeout {visibility} s (short, to be reached)"
        )
        timeout = 3600.0 if visibility is None else float(visibility)
        super().__init__(
            "Celery (Redis)",
            settings,
            comeback_wait=wait_past(timeout),
            lost_hint="Celery documents task_reject_on_worker_lost=True for this (not measured here)",
        )
        self.visibility = visibility
        self.timeout = timeout

    def version(self) -> str:
        import celery

        return celery.__version__

    def _env(self, name: str = ""):
        return child_env(
            AUDIT_REDIS_URL=self.via(self.redis.url, name),
            AUDIT_VISIBILITY="" if self.visibility is None else str(self.visibility),
        )

    def enqueue(self, key, fault, ledger):
        self.enqueue_many([(key, fault)], ledger)

    def enqueue_many(self, items, ledger):
        import subprocess

        calls = "; ".join(f"a.job.delay({key!r}, {fault!r}, {str(ledger)!r})" for key, fault in items)
        subprocess.run([sys.executable, "-c", f"import audit_celery_app as a; {calls}"], check=True, env=self._env())

    def worker(self, name):
        return [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "audit_celery_app",
            "worker",
            "-c",
            "1",
            "-n",
            f"{name}@audit",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "warning",
        ], self._env(name)


class PgQueuer(Contender):
    def __init__(self, heartbeat_timeout: float | None):
        settings = (
            "defaults (heartbeat_timeout 30 s, dequeue_timeout 30 s)"
            if heartbeat_timeout is None
            else f"heartbeat_timeout {heartbeat_timeout:g} s, dequeue_timeout 1 s (short, to be reached)"
        )
        super().__init__(
            "PgQueuer (PostgreSQL)",
            settings,
            comeback_wait=wait_past(30.0 if heartbeat_timeout is None else heartbeat_timeout),
            not_taken=(
                "not logged: the newer run had already deleted the job's row (the completion "
                "matches the job id alone, so it is not a fence)"
            ),
        )
        self.heartbeat_timeout = heartbeat_timeout
        self.timeout = 30.0 if heartbeat_timeout is None else heartbeat_timeout
        self.server = None
        self.url = ""
        self.databases = 0
        self.keys: dict[int, str] = {}  # the queue's job id -> the ledger's key

    def version(self) -> str:
        from importlib.metadata import version

        return version("pgqueuer")

    def server_address(self):
        from leaselab.harness.proxy import server_address

        return server_address(self.url)

    def open(self):
        from leaselab.harness.pgserver import PgServer

        self.server = PgServer().start()

    def close(self):
        if self.server is not None:
            self.server.stop()
            self.server = None

    def setup(self, folder):
        import asyncio

        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        Contender.setup(self, folder)
        self.databases += 1
        self.url = self.server.create_database(f"pgq{self.databases}")
        self.keys = {}

        async def install() -> None:
            conn = await asyncpg.connect(self.url)
            try:
                await Queries(AsyncpgDriver(conn)).install()
            finally:
                await conn.close()

        asyncio.run(install())

    def enqueue(self, key, fault, ledger):
        self.enqueue_many([(key, fault)], ledger)

    def enqueue_many(self, items, ledger):
        import asyncio
        import json

        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        async def put() -> None:
            conn = await asyncpg.connect(self.url)
            try:
                queries = Queries(AsyncpgDriver(conn))
                for key, fault in items:
                    payload = json.dumps({"key": key, "fault": fault, "ledger": str(ledger)}).encode()
                    (job_id,) = await queries.enqueue("audit", payload, 0)
                    self.keys[int(job_id)] = key
            finally:
                await conn.close()

        asyncio.run(put())

    def _succeeded(self) -> list[tuple[str, float]]:
        """(key, when) for each completion the queue logged, oldest first."""
        import psycopg

        with psycopg.connect(self.url) as conn:
            return [
                (self.keys[job_id], created.timestamp())
                for job_id, created in conn.execute(
                    "SELECT job_id, created FROM pgqueuer_log WHERE status = 'successful' ORDER BY id"
                )
                if job_id in self.keys
            ]

    def queue_acceptances(self, pids):
        # The log names the job but no worker: a completion is the run of that job that ended last before it.
        from audit_ledger import read, runs

        ended = [r for r in runs(read(self.folder / "ledger.jsonl")) if r.end is not None]
        found = []
        for key, t in self._succeeded():
            before = [r for r in ended if r.job == key and r.end <= t + 0.5]
            if before:
                r = max(before, key=lambda r: r.end)
                found.append({"job": r.job, "pid": r.pid, "what": "accepted", "t": t})
        return found

    def settled(self, log, ledger_lines, pid, key):
        # PgQueuer answers a completion with nothing a worker sees: settled once the run ended and its buffer flushed.
        ends = [
            line["t"] for line in ledger_lines if line["pid"] == pid and line["job"] == key and line["what"] == "end"
        ]
        return bool(ends) and time.time() > ends[-1] + 3.0

    def held(self):
        import json

        import psycopg

        with psycopg.connect(self.url) as conn:
            return {
                json.loads(bytes(p))["key"]
                for (p,) in conn.execute("SELECT payload FROM pgqueuer WHERE status = 'picked'")
            }

    def worker(self, name):
        code = (
            f"import audit_handlers; audit_handlers.pgqueuer_consumer({self.via(self.url, name)!r}, "
            f"{self.heartbeat_timeout!r})"
        )
        return [sys.executable, "-c", code], child_env()


class Procrastinate(PgQueuer):
    """Procrastinate: at its defaults a stalled job is retried only by a task the user writes, so none is there;
    with ``stalled_after`` the app carries its documentation's "retry stalled jobs" periodic task."""

    def __init__(self, stalled_after: float | None = None):
        settings = (
            "defaults (workers heartbeat; stalled jobs are retried only by the user's own task)"
            if stalled_after is None
            else f"the documented retry_stalled_jobs periodic task, every second, seconds_since_heartbeat "
            f"{stalled_after:g} s; worker heartbeat every 0.5 s (short, to be reached)"
        )
        Contender.__init__(
            self,
            "Procrastinate (PostgreSQL)",
            settings,
            comeback_wait=15.0 if stalled_after is None else wait_past(stalled_after + 1.0),
            not_taken=(
                "not logged: the newer run had already finished the job (the completion "
                "matches the job id and a 'doing' status, not the attempt, so it is not a "
                "fence)"
            ),
        )
        self.heartbeat_timeout = None
        self.stalled_after = stalled_after
        self.timeout = stalled_after
        self.server = None
        self.url = ""
        self.databases = 0
        self.keys = {}

    def version(self) -> str:
        from importlib.metadata import version

        return version("procrastinate")

    def _env(self, name: str = ""):
        return child_env(
            AUDIT_PG_URL=self.via(self.url, name),
            AUDIT_STALLED="" if self.stalled_after is None else str(self.stalled_after),
        )

    def setup(self, folder):
        import subprocess

        Contender.setup(self, folder)
        self.databases += 1
        self.url = self.server.create_database(f"pro{self.databases}")
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import audit_procrastinate_app as a\nwith a.app.open(): a.app.schema_manager.apply_schema()",
            ],
            check=True,
            env=self._env(),
        )

    def enqueue_many(self, items, ledger):
        import subprocess

        calls = "\n".join(
            f"    a.job.defer(key={key!r}, fault={fault!r}, ledger={str(ledger)!r})" for key, fault in items
        )
        subprocess.run(
            [sys.executable, "-c", f"import audit_procrastinate_app as a\nwith a.app.open():\n{calls}"],
            check=True,
            env=self._env(),
        )

    def worker(self, name):
        return [sys.executable, "-m", "procrastinate", "--app=audit_procrastinate_app.app", "worker"], self._env(name)

    def _succeeded(self):
        import psycopg

        with psycopg.connect(self.url) as conn:
            return [
                (args["key"], at.timestamp())
                for args, at in conn.execute(
                    "SELECT j.args, e.at FROM procrastinate_events e JOIN procrastinate_jobs j ON j.id = e.job_id "
                    "WHERE e.type = 'succeeded' AND j.task_name = 'audit' ORDER BY e.id"
                )
            ]

    def held(self):
        import psycopg

        with psycopg.connect(self.url) as conn:
            return {
                args["key"]
                for (args,) in conn.execute(
                    "SELECT args FROM procrastinate_jobs WHERE status = 'doing' AND task_name = 'audit'"
                )
            }


def quick() -> list[Contender]:
    """``--quick``: leaselab on SQLite with a lease short enough to be reached, huey and persist-queue."""
    return [Leaselab(lease=2.0), Huey(), PersistQueue()]


def full() -> list[Contender]:
    """The whole audit: each contender at its defaults, then with its lease short enough to be reached."""
    return [
        Leaselab(lease=None),
        Leaselab(lease=2.0),
        Leaselab(lease=2.0, backend="postgres"),
        Huey(),
        PersistQueue(),
        LiteQueue(stale_after=None),
        LiteQueue(stale_after=2),
        PgQueuer(heartbeat_timeout=None),
        PgQueuer(heartbeat_timeout=2.0),
        Procrastinate(),
        Procrastinate(stalled_after=2.0),
        Rq(job_timeout=None),
        Rq(job_timeout=3),
        Celery(visibility=None),
        Celery(visibility=3),
    ]
