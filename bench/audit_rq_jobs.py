"""RQ's side of the audit: the job function, importable by the work horse; which completions RQ took comes from its
``on_success`` callback (RQ's public API), called by the worker once the job's result is saved."""

from audit_ledger import handle, record


def job(key, fault, ledger):
    return handle(key, fault, ledger)


def succeeded(rq_job, connection, result, *args, **kwargs):
    key, _, ledger = rq_job.args
    record(ledger, key, "accepted")
