"""``leaselab chaos``: the command line's side of a chaos run (its arguments come parsed from ``leaselab.cli``).

It prints the seed and the schedule first, then progress on stderr every couple of seconds,
then what the run did and the checker's report; exit 0 when clean, 1 when something broke,
2 on bad input. A clean run none of whose faults hit a running attempt exits 0 too (nothing
broke), but its verdict says it proved nothing about faults. ``--db postgresql`` (no host)
runs on a throw-away server started here, the only kind ``server-crash`` may crash, removed
at the end whatever happens: an error, Ctrl-C or SIGTERM (and, should this process be
SIGKILLed, by the server's own watchdog). ``--faults failover`` on such a URL starts a primary
and a standby instead (``--replication sync``, the default, or ``async``), which the workers
reach by a multi-host URL (``failover`` says what each failover does).
"""

from __future__ import annotations

import argparse
import json
import secrets
import signal
import sys
from pathlib import Path

from ..backends import is_server_url
from ..harness.pgserver import LAZY_WAL_WRITER, PgServer, PgStartFailed, PgUnavailable
from ..words import check_lang
from .failover import REPLICATIONS, replicated
from .run import Progress, run
from .schedule import REPLICATED_FAULTS, Schedule, applicable, parse_faults
from .texts import text

# ``--db`` values that ask for a throw-away server: a PostgreSQL URL with no host.
THROWAWAY = ("postgresql", "postgres", "postgresql://", "postgres://")
EXIT_CLEAN, EXIT_BROKEN, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
THROWAWAY_FOLDER = "leaselab-chaos"  # a throw-away server's run folder, in the current folder


def main(args: argparse.Namespace) -> int:
    lang = check_lang(args.lang)
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise ValueError(f"payload is not valid JSON: {exc}") from None
    own = args.db in THROWAWAY
    failing_over = args.faults is not None and any(f in REPLICATED_FAULTS for f in parse_faults(args.faults))
    replication = args.replication
    if replication is not None and not failing_over:
        raise ValueError("--replication goes with --faults failover, on --db postgresql")
    replication = replication or REPLICATIONS[0]
    if replication not in REPLICATIONS:
        raise ValueError(f"--replication must be one of {', '.join(REPLICATIONS)}, got {replication!r}")
    # Refused before a server is started for nothing.
    applicable(
        args.faults,
        server=own or is_server_url(args.db),
        own_server=own and not failing_over,
        replicated=own and failing_over,
    )
    seed = secrets.randbelow(2**32) if args.seed is None else args.seed
    out = sys.stderr if args.json else sys.stdout

    def on_start(schedule: Schedule) -> None:
        print(schedule.render(lang), file=out, flush=True)
        if server is not None:
            print(text("server", lang, port=server.port), file=out, flush=True)
        if servers is not None:
            print(
                text(
                    "replicated",
                    lang,
                    primary=servers.primary.port,
                    standby=servers.standbys[0].port,
                    replication=text("replication_" + replication, lang),
                    held=text("held", lang) if replication == "async" else "",
                ),
                file=out,
                flush=True,
            )

    def on_progress(p: Progress) -> None:
        print(p.render(lang), file=sys.stderr, flush=True)

    def interrupted(*_: object) -> None:
        # Once: a second Ctrl-C must not cut the clean-up short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, interrupted), signal.signal(signal.SIGTERM, interrupted)
    server = servers = None
    try:
        target, folder = args.db, args.out
        if own and failing_over:
            try:
                servers = replicated(replication).start()
                target = servers.create_database("chaos")
            except (PgUnavailable, PgStartFailed) as exc:
                raise ValueError(f"cannot start a throw-away replicated PostgreSQL server: {exc}") from None
            folder = folder or THROWAWAY_FOLDER
        elif own:
            try:
                server = PgServer(settings=LAZY_WAL_WRITER).start()
            except (PgUnavailable, PgStartFailed) as exc:
                raise ValueError(f"cannot start a throw-away PostgreSQL server: {exc}") from None
            target = server.create_database("chaos")
            folder = folder or THROWAWAY_FOLDER
        lease = {} if args.lease is None else {"lease": args.lease}
        result = run(
            target,
            args.handler,
            workers=args.workers,
            concurrency=args.concurrency,
            jobs=args.jobs,
            payload=payload,
            seconds=args.seconds,
            faults=args.faults,
            seed=seed,
            server=server,
            servers=servers,
            folder=Path(folder) if folder else None,
            on_start=on_start,
            progress=on_progress,
            **lease,
        )
    except KeyboardInterrupt:
        print(text("interrupted", lang), file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    finally:
        # Nothing may cut the server's removal short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            if server is not None:
                server.stop()
            if servers is not None:
                servers.stop()
        finally:
            signal.signal(signal.SIGINT, before[0])
            signal.signal(signal.SIGTERM, before[1])
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False))
    else:
        print(result.render(lang))
    return EXIT_CLEAN if result.clean else EXIT_BROKEN
