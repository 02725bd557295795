"""Procrastinate's side of the audit: an App on psycopg and one task; the worker is its own CLI.

    procrastinate --app=audit_procrastinate_app.app worker

At its defaults (``AUDIT_STALLED`` empty) nothing retries a stalled job. With
``AUDIT_STALLED=SECONDS`` the app carries the periodic task of Procrastinate's guide
"Retry stalled jobs" (``get_stalled_jobs`` then ``retry_job``), run every second with
``seconds_since_heartbeat=SECONDS``, and its workers beat every 0.5 s (``worker_defaults``).
"""

import os

import procrastinate

from audit_ledger import handle

STALLED = float(os.environ["AUDIT_STALLED"]) if os.environ.get("AUDIT_STALLED") else None

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["AUDIT_PG_URL"]),
    worker_defaults={} if STALLED is None else {"update_heartbeat_interval": 0.5, "stalled_worker_timeout": STALLED},
)


@app.task(name="audit")
def job(key, fault, ledger):
    return handle(key, fault, ledger)


if STALLED is not None:
    # The guide's recipe, as written there but for the schedule: cron's sixth field is seconds.
    @app.periodic(cron="* * * * * *")
    @app.task(queueing_lock="retry_stalled_jobs", pass_context=True)
    async def retry_stalled_jobs(context, timestamp):
        stalled_jobs = await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=STALLED)
        for job in stalled_jobs:
            await app.job_manager.retry_job(job)
