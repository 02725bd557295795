"""The README and bench/README.md agree with the code: the errors it lists, the files its layout
table names, the install commands it gives, the schema version its figures were measured on, and
what a test run shows of its skips."""

from __future__ import annotations

import inspect
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import leaselab
from leaselab import errors

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a whole line), up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    match = re.search(rf"^{re.escape(heading)}\n(.*?)(?=^#{{1,{len(level)}}} |\Z)", text, flags=re.M | re.S)
    assert match, f"no section {heading!r}"
    return match.group(1)


# -- the errors --------------------------------------------------------------------------------------

def readme_errors() -> set[str]:
    bullet = re.search(r"^- Every error derives from `LeaselabError`.*?(?=^- |^$)", README, flags=re.M | re.S)
    assert bullet, "README.md has no bullet 'Every error derives from `LeaselabError`'"
    return set(re.findall(r"`([A-Z][a-z][A-Za-z]*)`", bullet.group(0)))  # CamelCase: not `SIGSTOP`


def public_errors() -> set[str]:
    return {name for name, obj in vars(errors).items()
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == errors.__name__
            and not name.startswith("_")}


def test_every_error_the_readme_lists_is_an_exception_importable_from_leaselab():
    for name in sorted(readme_errors()):
        assert name in leaselab.__all__, f"README lists {name}, which leaselab does not export"
        assert issubclass(getattr(leaselab, name), errors.LeaselabError), name


def test_every_error_the_readme_names_anywhere_is_importable_from_leaselab():
    named = set(re.findall(r"`([A-Z][a-z][A-Za-z]*)`", README)) & public_errors()
    assert sorted(n for n in named if n not in leaselab.__all__) == []


def test_every_public_error_of_leaselab_is_in_the_readmes_list():
    missing = sorted(public_errors() - readme_errors())
    assert missing == [], f"leaselab.errors defines {missing}, which README.md's list of errors leaves out"


# -- the layout table --------------------------------------------------------------------------------

def layout_rows() -> list[tuple[list[str], list[str]]]:
    rows = []
    for line in section(README, "## Layout").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows.append((re.findall(r"`([^`]+)`", cells[0]), re.findall(r"`([^`]+)`", cells[1])))
    assert rows, "README.md's Layout section has no table"
    return rows


def layout_names() -> tuple[set[str], set[str]]:
    """The files and the folders the layout table names, as paths from the repository's root.

    A row's first path sets its folder: the names after it in the first cell are beside it, and a
    folder row's second cell names files inside that folder (``schema.sql``, ``fleet.py``)."""
    files, folders = set(), set()
    for first, second in layout_rows():
        lead = first[0]
        folder = lead.rstrip("/") if lead.endswith("/") else str(Path(lead).parent)
        for name in first:
            path = name if "/" in name else f"{folder}/{name}"
            (folders if path.endswith("/") else files).add(path.rstrip("/"))
        if lead.endswith("/"):
            files |= {f"{folder}/{name}" for name in second if re.fullmatch(r"[\w/]+\.(py|sql)", name)}
    return files, folders


def test_the_layout_table_names_every_module_of_the_package_and_every_folder():
    files, folders = layout_names()
    package = REPO / "leaselab"
    modules = {p.relative_to(REPO).as_posix() for p in package.rglob("*") if p.suffix in (".py", ".sql")
               and p.name != "__init__.py" and "__pycache__" not in p.parts}
    packages = {p.parent.relative_to(REPO).as_posix() for p in package.rglob("__init__.py")} - {"leaselab"}
    covered_folders = folders | {str(Path(f).parent) for f in files}
    assert sorted(modules - files) == [], "README.md's layout table leaves these out"
    assert sorted(packages - covered_folders) == [], "README.md's layout table names no row for these folders"


def test_the_layout_table_names_no_file_or_folder_that_is_gone():
    files, folders = layout_names()
    gone = sorted(p for p in files | folders if not (REPO / p).exists())
    assert gone == [], f"README.md's layout table names {gone}, which are not in the repository"


# -- what a test run shows ---------------------------------------------------------------------------

def test_a_test_run_ends_with_the_reason_of_every_skip_and_expected_failure(tmp_path):
    """The README says a skipped browser test shows its reason: pyproject's pytest options make it so."""
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\n"
        "def test_skipped():\n    pytest.skip('no Chromium here (apt-get install chromium)')\n\n"
        "@pytest.mark.xfail(reason='a known limit', strict=True)\ndef test_limit():\n    assert False\n",
        encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir",
                           str(tmp_path), "-p", "no:cacheprovider", str(tmp_path / "test_skips.py")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^SKIPPED \[1\] .*test_skips\.py:\d+: no Chromium here \(apt-get install chromium\)$",
                     done.stdout, flags=re.M), done.stdout
    assert re.search(r"^XFAIL .*test_limit - a known limit$", done.stdout, flags=re.M), done.stdout
    assert "with the reason" in README or "the reason of every skip" in README


# -- installing ----------------------------------------------------------------------------------------

def install_commands(text: str) -> list[list[str]]:
    """Every ``pip install …`` command in ``text``, in code blocks or inline code, as words."""
    found = []
    for code in re.findall(r"```\w*\n(.*?)```", text, flags=re.S) + re.findall(r"`([^`\n]+)`", text):
        for line in code.splitlines():
            command = line.split("#", 1)[0].strip()
            if re.match(r"(python3? -m )?pip install ", command):
                found.append(shlex.split(command))
    return found


def requirement(spec: str) -> tuple[str, str, set[str]]:
    """``(name or path, what comes after an @, extras)`` of a pip requirement or a path with extras."""
    match = re.fullmatch(r"([^\[\]@ ]+)(?:\[([\w,\- ]+)\])?\s*(?:@\s*(\S+))?", spec)
    assert match, f"cannot read {spec!r} as a requirement"
    extras = {e.strip() for e in (match.group(2) or "").split(",") if e.strip()}
    return match.group(1), match.group(3) or "", extras


def test_every_install_command_in_the_readme_installs_something_that_exists_with_extras_it_has():
    """leaselab is not on PyPI: a command must install from a clone (``.``), a wheel it builds, or a
    git URL, never ``leaselab`` by name from the index; and every extra it asks for must exist."""
    commands = install_commands(README)
    assert commands, "README.md gives no pip install command"
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    version = PYPROJECT["project"]["version"]
    wheels = {f"dist/leaselab-{version}-py3-none-any.whl"}
    for words in commands:
        specs = [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
        assert specs, words
        for spec in specs:
            where, url, wanted = requirement(spec)
            assert wanted <= extras, f"`{' '.join(words)}` asks for extras {sorted(wanted - extras)}; " \
                                     f"pyproject.toml has {sorted(extras)}"
            if where == "leaselab":
                assert url.startswith("git+https://"), f"`{' '.join(words)}`: leaselab is not on PyPI"
            elif where.endswith(".whl"):
                assert where in wheels, f"`{' '.join(words)}` names a wheel `pip wheel` would not make: {wheels}"
            else:
                assert where == ".", f"`{' '.join(words)}` installs {where!r}"
    # The repository it names is the one the Binder badges open.
    repos = set(re.findall(r"git\+https://github\.com/([\w.-]+/[\w.-]+)", README))
    badges = set(re.findall(r"mybinder\.org/v2/gh/([\w.-]+/[\w.-]+)/", README))
    assert repos and repos == badges, (repos, badges)


def test_the_readmes_install_commands_cover_a_clone_and_the_other_hosts():
    lines = [" ".join(words) for words in install_commands(section(README, "### Past one machine: PostgreSQL"))]
    assert "pip install -e .[postgres]" in lines, lines
    assert any("@ git+https://" in line for line in lines) and any(".whl[postgres]" in line for line in lines), lines
    assert "pip wheel --no-deps -w dist ." in README


def test_the_missing_driver_message_asks_for_the_same_psycopg_as_pyproject():
    from leaselab.backends import PSYCOPG

    assert PYPROJECT["project"]["optional-dependencies"]["postgres"] == [PSYCOPG]


# -- bench/README.md's schema version ------------------------------------------------------------------

def test_the_benchmark_figures_say_which_schema_they_were_measured_on_and_that_the_code_has_moved_on():
    from leaselab.backends.sqlite import SCHEMA_VERSION

    text = (REPO / "bench" / "README.md").read_text(encoding="utf-8")
    measured = re.search(r"leaselab files here are schema version (\d+)", text)
    assert measured, "bench/README.md does not say which schema version its figures were measured on"
    if int(measured.group(1)) != SCHEMA_VERSION:
        assert f"the code's current schema, version {SCHEMA_VERSION}" in text, \
            f"bench/README.md's figures are of schema {measured.group(1)}, the code is at {SCHEMA_VERSION}: say so"


def test_the_readmes_upgrade_promise_names_every_older_schema_version():
    from leaselab.backends.sqlite import SCHEMA_VERSION

    listed = re.search(r"\(schema version ([\d, ]+(?:or \d+)?)\) is upgraded in place", README)
    assert listed, "README.md no longer says which older files are upgraded"
    assert sorted(map(int, re.findall(r"\d+", listed.group(1)))) == list(range(1, SCHEMA_VERSION))
