"""Procrastinate's side of the audit: an App on psycopg and one task; the worker is its own CLI, at its defaults.

    procrastinate --app=audit_procrastinate_app.app worker
"""

import os

import procrastinate

from audit_ledger import handle

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ["AUDIT_PG_URL"]))


@app.task(name="audit")
def job(key, fault, ledger):
    return handle(key, fault, ledger)
