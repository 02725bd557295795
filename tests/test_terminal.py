"""Text that one program wrote into the queue (a worker name, a handler's error) is shown escaped
by every listing and log line, so it cannot drive the reader's terminal or forge a line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from leaselab import Queue
from leaselab.cli import main
from leaselab.printable import has_unprintable, printable

REPO = Path(__file__).resolve().parent.parent
CONTROLS = ("\x1b", "\r", "\x07", "\x9b", "\u202e")


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("plain text, ünïcödé and a \\ backslash", "plain text, ünïcödé and a \\ backslash"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\x1b[2J\x07\x00\x7f", "\\x1b[2J\\x07\\x00\\x7f"),
        ("\x85\x9b31m", "\\x85\\x9b31m"),  # C1: a line break, and a one-character ESC [
        ("\u202eevil\u2066\u2028", "\\u202eevil\\u2066\\u2028"),  # bidi override and isolate, line separator
    ],
)
def test_printable_shows_every_control_character_as_an_escape_and_leaves_the_rest(raw, shown):
    assert printable(raw) == shown


def test_no_character_that_needs_an_escape_passes_through_as_it_is_whatever_text_surrounds_it():
    # printable() hands text back untouched when str.isprintable() says it may: that shortcut must
    # never pass a character the escapes are for, in any of Unicode's 1,114,112 code points.
    needing = [c for c in map(chr, range(sys.maxunicode + 1)) if has_unprintable(c)]
    assert len(needing) > 60 and {"\x1b", "\x85", "\u202e", "\u2029"} <= set(needing)
    for c in needing:
        assert c not in printable(c) and c not in printable(f"claimed job 7{c} (attempt 1/3)"), hex(ord(c))


def leaselab(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m leaselab …`` as a user would run it, in folder ``cwd``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "leaselab", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_jobs_and_events_show_control_characters_in_names_and_errors_escaped(target, capsys):
    with Queue(target) as q:
        q.enqueue({"note": "\u202eevil"}, max_attempts=3)
        job = q.claim("w\x1b]0;owned\x07\r\nx")
        q.fail(job.id, job.token, "boom\x1b[2J\r\x07\x9b31m")
    for command in ("jobs", "events"):
        code, out, err = _run(capsys, command, "--db", target)
        assert code == 0, err
        assert not any(c in out for c in CONTROLS), repr(out)
        assert "\\x1b" in out
    assert len(out.splitlines()) == 4  # the header, then enqueued, claimed and failed: one line each
    assert "boom\\x1b[2J\\r\\x07\\x9b31m" in out


def test_a_worker_name_with_a_newline_is_refused_naming_the_flag(capsys, db_path):
    code, out, err = _run(
        capsys,
        "worker",
        "--db",
        str(db_path),
        "--handler",
        "leaselab.harness.demo:echo",
        "--name",
        "w1\n12:00:00.000 w2: completed job 1",
    )
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "argument --name" in err and "\\n" in err, err


def test_every_worker_log_line_is_one_line_whatever_the_handler_raises(tmp_path, db_path):
    (tmp_path / "hostile.py").write_text(
        "def boom(job):\n    raise RuntimeError('first\\n12:00:00.000 w: completed job 1\\x1b[2J\\x07')\n"
    )
    with Queue(db_path) as q:
        q.enqueue({}, max_attempts=1)
    done = leaselab(
        "worker",
        "--db",
        str(db_path),
        "--handler",
        "hostile:boom",
        "--name",
        "w",
        "--exit-when-idle",
        cwd=tmp_path,
        env={"PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(re.match(r"\d\d:\d\d:\d\d\.\d{3} ", line) for line in lines), lines
    assert not any(line.startswith("12:00:00.000") for line in lines), "a log line forged by the handler"
    assert not any(c in done.stdout for c in CONTROLS)
    assert any(
        "failed job 1: RuntimeError: first\\n12:00:00.000 w: completed job 1\\x1b[2J\\x07" in line for line in lines
    ), lines


def test_an_error_naming_a_path_with_control_characters_shows_them_escaped(capsys, tmp_path):
    code, out, err = _run(capsys, "stats", "--db", str(tmp_path / "\x1b[2Jq.db"))
    assert code == 2 and "\x1b" not in err
    assert err.strip().endswith("no queue file at " + str(tmp_path) + "/\\x1b[2Jq.db")
