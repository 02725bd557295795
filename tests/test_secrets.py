"""A password in a queue's target is never printed nor written to disk."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leaselab import LeaselabError, Queue
from leaselab.backends import scrub
from leaselab.errors import InvalidTarget

REPO = Path(__file__).resolve().parent.parent


def leaselab(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m leaselab …`` as a user would run it, in folder ``cwd``."""
    inherited = {k: v for k, v in os.environ.items() if k != "LEASELAB_DB"}
    env = {
        **inherited,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "leaselab", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


# -- a password in --db ------------------------------------------------------------------------

# Each with its password split in two ("s3c" + "r3t"): no piece of it may be shown.
BAD_TARGETS = {
    "unclosed IPv6 bracket": "postgresql://app:s3cr3t@[::1/jobs",
    "empty IPv6 brackets": "postgresql://app:s3cr3t@[]/jobs",
    "bad percent escape in the password": "postgresql://app:s3c%zzr3t@127.0.0.1/jobs",
    "unescaped @ in the password": "postgresql://app:s3c@r3t@127.0.0.1/jobs",
    "no @ before the host": "postgresql://app:s3cr3t/jobs",
    "one slash after the scheme": "postgresql:/app:s3cr3t@127.0.0.1/jobs",
    "another scheme": "mysql://app:s3cr3t@127.0.0.1/jobs",
    "libpq key=value string": "host=127.0.0.1 port=1 dbname=jobs user=app password=s3cr3t",
}


@pytest.mark.parametrize("how", ["--db", "LEASELAB_DB"])
@pytest.mark.parametrize("target", BAD_TARGETS.values(), ids=BAD_TARGETS.keys())
def test_a_bad_target_is_refused_in_one_line_with_no_piece_of_its_password_and_no_file_left(target, how, tmp_path):
    argv, env = (["--db", target], None) if how == "--db" else ([], {"LEASELAB_DB": target})
    done = leaselab("enqueue", '{"seconds": 0}', *argv, cwd=tmp_path, env=env)
    shown = done.stdout + done.stderr
    assert done.returncode == 2, shown
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, shown
    assert "s3c" not in shown and "r3t" not in shown, shown
    assert sorted(os.listdir(tmp_path)) == [], "a file named after the target"


def test_a_libpq_key_value_string_is_refused_by_name_with_an_error_a_program_can_catch(tmp_path):
    with pytest.raises(InvalidTarget, match="libpq key=value connection string") as caught:
        Queue("host=127.0.0.1 dbname=jobs password='s3c r3t'")
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, LeaselabError)
    assert "s3c" not in str(caught.value) and "r3t" not in str(caught.value)


def test_a_fleet_given_a_key_value_string_refuses_it_before_making_a_file(tmp_path, monkeypatch):
    from leaselab.harness.fleet import Fleet

    monkeypatch.chdir(tmp_path)  # the fleet makes a relative target absolute before it opens it
    with pytest.raises(InvalidTarget) as caught:
        Fleet("host=127.0.0.1 dbname=jobs password=s3cr3t")
    assert "s3cr3t" not in str(caught.value)
    assert os.listdir(tmp_path) == []


def test_an_upper_case_scheme_is_a_server_url_not_a_file_name(pg_url, tmp_path):
    for scheme in ("POSTGRESQL://", "Postgres://"):
        done = leaselab("enqueue", '{"seconds": 0}', "--db", scheme + pg_url.split("://", 1)[1], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert os.listdir(tmp_path) == []
    with Queue(pg_url) as q:
        assert q.stats()["pending"] == 2


def test_a_driver_error_names_the_server_and_never_the_password_in_any_of_its_forms(tmp_path):
    from leaselab.harness.pgserver import free_port

    port = free_port()  # nothing listens there: the driver's own connection error
    done = leaselab("stats", "--db", f"POSTGRESQL://app:s3c%40r3t@127.0.0.1:{port}/jobs", cwd=tmp_path)
    assert done.returncode == 2
    assert f"postgresql://app@127.0.0.1:{port}/jobs: cannot reach the server" in done.stderr
    assert "s3c" not in done.stderr and "r3t" not in done.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "url, message, left",
    [
        ("postgresql://u:s3c%zzr3t@h/db", 'invalid percent-encoded token: "s3c%zzr3t"', 'token: "***"'),
        ("postgresql://u:s3c@r3t@h/db", "failed to resolve host 'r3t@h'", "host '***@h'"),
        ("postgresql://u:s3c%40r3t@h/db", "password s3c@r3t or s3c%40r3t", "password *** or ***"),
        ("postgresql://u@h/db?password=s3cr3t", 'in URI: "postgresql://u@h/db?password=s3cr3t"', "password=***"),
        ("host=h password='s3c\\'r3t'", "password 's3c\\'r3t' means s3c'r3t", "password *** means ***"),
    ],
)
def test_the_scrubber_finds_the_password_in_text_the_driver_could_not_parse(url, message, left):
    assert left in scrub(message, url)
    assert "s3c" not in scrub(message, url) and "r3t" not in scrub(message, url)


def _password_role(pg_url: str, password: str) -> str:
    """A role that must give ``password`` over TCP, owning ``pg_url``'s database; its URL, without the password.

    The session's server trusts every local connection: a rule for this role alone, put first in
    pg_hba.conf, makes the server ask, so no other test's connections change.
    """
    import psycopg
    from psycopg import sql

    role = f"pw_{os.getpid()}_{pg_url.rsplit('/', 1)[1]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
        conn.execute(
            sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                sql.Identifier(pg_url.rsplit("/", 1)[1]), sql.Identifier(role)
            )
        )
        hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
        hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        conn.execute("SELECT pg_reload_conf()")
    url = pg_url.replace("://leaselab@", f"://{role}@")
    for _ in range(100):  # the reload is a signal to the postmaster: wait until it asks
        try:
            psycopg.connect(url, connect_timeout=5).close()
        except psycopg.OperationalError:
            return url
        time.sleep(0.05)
    pytest.fail("the server never started asking for the role's password")


def test_a_password_file_keeps_the_password_out_of_argv_and_a_wrong_password_is_refused_without_it(pg_url, tmp_path):
    url = _password_role(pg_url, "s3cr3t-pw")
    host_port_db = re.match(r"postgresql://[^@]+@([^:]+):(\d+)/(\w+)", url).groups()
    role = url.split("://", 1)[1].split("@", 1)[0]
    passfile = tmp_path / "pgpass"
    passfile.write_text(":".join([*host_port_db, role, "s3cr3t-pw"]) + "\n")
    passfile.chmod(0o600)  # libpq ignores a password file others can read
    work = tmp_path / "work"
    work.mkdir()

    done = leaselab("enqueue", '{"seconds": 0}', cwd=work, env={"LEASELAB_DB": url, "PGPASSFILE": str(passfile)})
    assert done.returncode == 0 and done.stdout.split() == ["1"], done.stderr

    wrong = url.replace(f"://{role}@", f"://{role}:wr0ng-pw@")
    done = leaselab("stats", "--db", wrong, cwd=work, env={"PGPASSFILE": os.devnull})
    assert done.returncode == 2
    assert "the server refused the connection" in done.stderr and "wr0ng" not in done.stderr
    assert os.listdir(work) == []
