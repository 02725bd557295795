"""The README's and the manual's examples work as written: every ```python block runs, and every
``leaselab`` command line names a real subcommand with real options.

A block that must not run (it needs a server the reader has, say) is marked ```python no-run;
there may be only a few such blocks. Shell blocks are ```sh, ```bash and ```console (where a
command line starts with ``$ `` and the rest is its output); each command line of them that runs
``leaselab`` (bare, through ``./dev run`` or ``python -m leaselab``) is parsed with the command's
own parser, and each ``./dev`` line must name a command ``./dev`` has.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from leaselab.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MOST_NO_RUN = 2  # blocks marked ```python no-run, in all the docs together: use it sparingly
TIMEOUT = 180

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", flags=re.M | re.S)


def blocks(path: Path) -> list[tuple[str, str, int]]:
    """Every fenced block of ``path``: (its info string, its text, the line it starts on)."""
    text = path.read_text(encoding="utf-8")
    return [(m.group(1).strip(), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO)}:{line}"


PYTHON = [
    (where(path, line), info, code)
    for path in DOCS
    for info, code, line in blocks(path)
    if info.split()[:1] == ["python"]
]
SHELL = [
    (where(path, line), info.split()[0], code)
    for path in DOCS
    for info, code, line in blocks(path)
    if info.split()[:1] in (["sh"], ["bash"], ["console"], ["shell"])
]


def test_the_docs_exist_and_have_examples_of_both_kinds():
    assert (REPO / "docs" / "README.md").exists()
    assert len(PYTHON) >= 5 and len(SHELL) >= 3, (len(PYTHON), len(SHELL))
    no_run = [place for place, info, _ in PYTHON if "no-run" in info.split()]
    assert len(no_run) <= MOST_NO_RUN, f"too many python blocks marked no-run: {no_run}"
    unknown = [(place, info) for place, info, _ in PYTHON if set(info.split()[1:]) - {"no-run"}]
    assert unknown == [], f"python blocks with an info string this test does not know: {unknown}"


def test_every_docs_file_is_in_the_index_and_every_link_between_them_resolves():
    index = (REPO / "docs" / "README.md").read_text(encoding="utf-8")
    for path in (REPO / "docs").glob("*.md"):
        if path.name != "README.md":
            assert f"]({path.name})" in index, f"docs/README.md does not list {path.name}"
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            file = target.split("#", 1)[0]
            if file:
                assert (path.parent / file).exists(), f"{path.relative_to(REPO)} links to {target}, which is not there"


@pytest.mark.parametrize("place, info, code", PYTHON, ids=[p for p, _, _ in PYTHON])
def test_every_python_example_runs_as_written(place, info, code, tmp_path):
    if "no-run" in info.split():
        compile(code, place, "exec")  # not run, but still Python
        return
    bin_dir = Path(sys.executable).parent  # this environment's `leaselab` script
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("LEASELAB_DB", None)
    env.pop("LEASELAB_EFFECTS", None)
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"the example at {place} failed:\n{code}\n--- stderr:\n{done.stderr[-3000:]}"


# -- command lines -----------------------------------------------------------------------------------


def command_lines(kind: str, code: str) -> list[str]:
    """The command lines of a shell block: continuation lines joined, comments and output left out."""
    lines, pending = [], ""
    for raw in code.splitlines():
        if kind == "console" and not pending:
            if not raw.startswith("$ "):
                continue  # output
            raw = raw[2:]
        line = pending + raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line.strip())
    assert not pending, f"a command ends with a backslash: {pending!r}"
    return lines


def words_of(line: str) -> list[str]:
    return shlex.split(line, comments=True)


LAUNCHERS = (["./dev", "run"], ["python", "-m"], ["python3", "-m"], ["./dev", "run", "python", "-m"])


def segments(words: list[str]) -> list[list[str]]:
    """The simple commands of a command line (split at ``&&``, ``||``, ``;``, ``|`` and ``&``),
    each without the ``NAME=value`` assignments before it."""
    found, current = [], []
    for word in words + [";"]:
        if word in ("&&", "||", ";", "|", "&"):
            while current and re.fullmatch(r"[A-Za-z_]\w*=.*", current[0]):
                current.pop(0)
            if current:
                found.append(current)
            current = []
        else:
            current.append(word)
    return found


def leaselab_argv(words: list[str]) -> list[str] | None:
    """The arguments after ``leaselab`` if a command of this line runs leaselab, else None."""
    for command in segments(words):
        for launcher in [[], *LAUNCHERS]:
            n = len(launcher)
            if command[:n] == launcher and command[n : n + 1] == ["leaselab"]:
                return command[n + 1 :]
    return None


def parse_error(argv: list[str]) -> str | None:
    """What the command's own parser says against ``argv``; None when it accepts it (or shows --help)."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code in (0, None):
            return None
        return said.getvalue().strip() or f"exit {exc.code}"
    # argparse takes an abbreviation (--effect for --effects): the docs write every option whole.
    options = {option for action in subcommands()[argv[0]]._actions for option in action.option_strings}
    written = {word.split("=", 1)[0] for word in argv[1:] if word.startswith("-") and word != "-"}
    if written - options:
        return f"not an option of leaselab {argv[0]} as written: {sorted(written - options)}"
    return None


def subcommands() -> dict[str, argparse.ArgumentParser]:
    [choices] = [a.choices for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(choices)


def dev_commands() -> set[str]:
    text = (REPO / "dev").read_text(encoding="utf-8")
    case = re.search(r'case "\$what" in\n(.*?)\nesac', text, flags=re.S).group(1)
    names = set()
    for arm in re.findall(r"^\s*([\w|-]+)\)", case, flags=re.M):
        names |= set(arm.split("|"))
    return names


SHELL_LINES = [(place, line) for place, kind, code in SHELL for line in command_lines(kind, code)]


def test_the_docs_show_leaselab_command_lines_of_every_subcommand():
    shown = {argv[0] for _, line in SHELL_LINES if (argv := leaselab_argv(words_of(line)))}
    missing = sorted(set(subcommands()) - shown)
    assert missing == [], f"no command line in the docs runs: {missing}"


@pytest.mark.parametrize("place, line", SHELL_LINES, ids=[f"{p} {text[:60]}" for p, text in SHELL_LINES])
def test_every_command_line_names_a_real_subcommand_and_real_options(place, line):
    words = words_of(line)
    for command in segments(words):
        if command[:1] == ["./dev"]:
            assert command[1:2] and command[1] in dev_commands(), f"{place}: `{line}`: ./dev has no such command"
            if command[1] == "bench":
                assert (REPO / "bench" / f"{command[2]}.py").exists(), f"{place}: `{line}`: no bench/{command[2]}.py"
    argv = leaselab_argv(words)
    if argv is None:
        return
    error = parse_error(argv)
    assert error is None, f"{place}: `{line}`: {error}"


@pytest.mark.parametrize(
    "line",
    [
        "leaselab enqeue '{}'",  # no such subcommand
        "leaselab worker --db lab.db --handler m:f --leese 3",  # no such option
        "leaselab stats --db",  # an option without its value
        "./dev run leaselab worker --db lab.db",  # --handler (or a --queue) is required
        "leaselab jobs --status finished",  # not one of its choices
    ],
)
def test_the_command_line_check_refuses_what_the_parser_refuses(line):
    """The check above is not vacuous: a drifted command line fails it."""
    argv = leaselab_argv(words_of(line))
    assert argv is not None and parse_error(argv) is not None, line


def test_a_drifted_console_block_is_caught():
    block = "$ leaselab check --db lab.db --lease 2 \\\n    --effect effects.jsonl\nsome output\n"
    [line] = command_lines("console", block)
    assert parse_error(leaselab_argv(words_of(line))) is not None
