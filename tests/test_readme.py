"""The README, the manual in docs/ and bench/README.md agree with the code: the errors
docs/errors.md lists (walked from the package itself, not read from one file), the files
docs/layout.md names, the install commands docs/postgres.md gives, the schema versions the
figures and docs/durability.md name, and what a test run shows of its skips (docs/development.md)."""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import pkgutil
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
DOCS = REPO / "docs"


def doc(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


ALL_DOCS = "\n".join([README] + [p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md"))])
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a whole line), up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    match = re.search(rf"^{re.escape(heading)}\n(.*?)(?=^#{{1,{len(level)}}} |\Z)", text, flags=re.M | re.S)
    assert match, f"no section {heading!r}"
    return match.group(1)


# -- the errors --------------------------------------------------------------------------------------

# What a missing optional driver may keep from importing: only these, and only when truly absent.
OPTIONAL = {"psycopg", "apsw", "ipywidgets", "matplotlib", "IPython", "numpy"}
# The errors' own modules of the layers above the core. While they are being made, an error of
# theirs may still live in leaselab.errors; once a module exists, the catalogue must match it exactly.
LAYER_ERRORS = {
    "leaselab.harness.errors",
    "leaselab.lab.errors",
    "leaselab.lessons.errors",
    "leaselab.check.errors",
    "leaselab.chaos.errors",
}


def every_module() -> list[str]:
    """Import every module of the package; the names of those imported."""
    names = []
    for info in pkgutil.walk_packages(leaselab.__path__, "leaselab."):
        if info.name.endswith(".__main__"):
            continue  # `python -m leaselab`: importing it runs the command
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            root = (exc.name or "").split(".")[0]
            if root in OPTIONAL and importlib.util.find_spec(root) is None:
                continue
            raise
        names.append(info.name)
    return names


def every_error() -> dict[str, type]:
    """Every subclass of LeaselabError the package defines, by name, found by walking the classes."""
    every_module()
    found, todo = {}, [errors.LeaselabError]
    while todo:
        cls = todo.pop()
        if cls.__module__.split(".")[0] == "leaselab":
            assert found.setdefault(cls.__name__, cls) is cls, f"two errors named {cls.__name__}"
        todo += cls.__subclasses__()
    return found


def catalogue() -> list[tuple[str, str]]:
    """(module, error) for each error docs/errors.md lists: the bullets under each '## From `module`'."""
    listed = []
    for match in re.finditer(r"^## From `([\w.]+)`\n(.*?)(?=^## |\Z)", doc("errors.md"), flags=re.M | re.S):
        for name in re.findall(r"^- `([A-Z]\w+)`", match.group(2), flags=re.M):
            listed.append((match.group(1), name))
    assert listed, "docs/errors.md lists no errors under '## From `module`' headings"
    return listed


def imported_from(module: str, name: str) -> type:
    """The error ``name`` as a user imports it from ``module``."""
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module or module not in LAYER_ERRORS:
            raise
        found = errors  # that layer's errors module is not made yet: the error must still be here
    assert hasattr(found, name), f"docs/errors.md lists {name} under {module}, which has no such name"
    return getattr(found, name)


def test_every_error_the_catalogue_lists_is_importable_from_the_module_it_is_listed_under():
    walked = every_error()
    for module, name in catalogue():
        cls = imported_from(module, name)
        assert cls is walked.get(name), f"docs/errors.md: {module}.{name} is not leaselab's {name}"
        if module == "leaselab":
            assert name in leaselab.__all__, f"docs/errors.md lists {name} under leaselab, which does not export it"
        elif module in LAYER_ERRORS and importlib.util.find_spec(module) is not None:
            assert cls.__module__ == module, f"docs/errors.md lists {name} under {module}; it is in {cls.__module__}"


def test_every_class_the_docs_name_anywhere_is_one_of_leaselabs_or_pythons():
    """An error (or any class) named in backticks, anywhere in the README or docs/, still exists: a
    renamed or removed one fails here, wherever the docs mention it."""
    every_error()  # imports every module
    ours = {
        name
        for module in list(sys.modules.values())
        if getattr(module, "__name__", "").startswith("leaselab")
        for name, obj in vars(module).items()
        if isinstance(obj, type) and obj.__module__.startswith("leaselab")
    }
    named = set(re.findall(r"`([A-Z][a-z][A-Za-z]*)`", ALL_DOCS))  # CamelCase: not `SIGSTOP`
    python = {n for n in named if hasattr(builtins, n)}  # RecursionError, None
    assert sorted(named - ours - python) == [], "the docs name classes that neither leaselab nor Python has"
    assert {"LeaseLost", "Queue", "FencedStore"} <= named


def test_every_error_of_leaselab_is_in_the_catalogue_once():
    listed = [name for _, name in catalogue()]
    assert sorted(n for n in set(listed) if listed.count(n) > 1) == [], "docs/errors.md lists an error twice"
    missing = sorted(set(every_error()) - set(listed))
    assert missing == [], f"the package defines {missing}, which docs/errors.md leaves out"
    extra = sorted(set(listed) - set(every_error()))
    assert extra == [], f"docs/errors.md lists {extra}, which the package does not define"


# -- the layout table --------------------------------------------------------------------------------


def layout_rows() -> list[tuple[list[str], list[str]]]:
    rows = []
    for line in section(doc("layout.md"), "# Layout").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows.append((re.findall(r"`([^`]+)`", cells[0]), re.findall(r"`([^`]+)`", cells[1])))
    assert rows, "docs/layout.md has no table"
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
    modules = {
        p.relative_to(REPO).as_posix()
        for p in package.rglob("*")
        if p.suffix in (".py", ".sql") and p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    packages = {p.parent.relative_to(REPO).as_posix() for p in package.rglob("__init__.py")} - {"leaselab"}
    covered_folders = folders | {str(Path(f).parent) for f in files}
    assert sorted(modules - files) == [], "docs/layout.md's table leaves these out"
    assert sorted(packages - covered_folders) == [], "docs/layout.md's table names no row for these folders"


def test_the_layout_table_names_no_file_or_folder_that_is_gone():
    files, folders = layout_names()
    gone = sorted(p for p in files | folders if not (REPO / p).exists())
    assert gone == [], f"docs/layout.md's table names {gone}, which are not in the repository"


# -- what a test run shows ---------------------------------------------------------------------------


def test_a_test_run_ends_with_the_reason_of_every_skip_and_expected_failure(tmp_path):
    """docs/development.md says a skipped browser test shows its reason: pyproject's pytest options make it so."""
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\n"
        "def test_skipped():\n    pytest.skip('no Chromium here (apt-get install chromium)')\n\n"
        "@pytest.mark.xfail(reason='a known limit', strict=True)\ndef test_limit():\n    assert False\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(REPO / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_skips.py"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(
        r"^SKIPPED \[1\] .*test_skips\.py:\d+: no Chromium here \(apt-get install chromium\)$", done.stdout, flags=re.M
    ), done.stdout
    assert re.search(r"^XFAIL .*test_limit - a known limit$", done.stdout, flags=re.M), done.stdout
    assert "the reason of every skip" in doc("development.md")


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


def test_every_install_command_in_the_docs_installs_something_that_exists_with_extras_it_has():
    """leaselab is not on PyPI: a command must install from a clone (``.``), a wheel it builds, or a
    git URL, never ``leaselab`` by name from the index; and every extra it asks for must exist."""
    commands = install_commands(ALL_DOCS)
    assert commands, "neither README.md nor docs/ gives a pip install command"
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    version = PYPROJECT["project"]["version"]
    wheels = {f"dist/leaselab-{version}-py3-none-any.whl"}
    for words in commands:
        specs = [w for w in words[words.index("install") + 1 :] if not w.startswith("-")]
        assert specs, words
        for spec in specs:
            where, url, wanted = requirement(spec)
            assert wanted <= extras, (
                f"`{' '.join(words)}` asks for extras {sorted(wanted - extras)}; pyproject.toml has {sorted(extras)}"
            )
            if where == "leaselab":
                assert url.startswith("git+https://"), f"`{' '.join(words)}`: leaselab is not on PyPI"
            elif where.endswith(".whl"):
                assert where in wheels, f"`{' '.join(words)}` names a wheel `pip wheel` would not make: {wheels}"
            else:
                assert where == ".", f"`{' '.join(words)}` installs {where!r}"
    # The repository it names is the one the Binder badges open.
    repos = set(re.findall(r"git\+https://github\.com/([\w.-]+/[\w.-]+)", ALL_DOCS))
    badges = set(re.findall(r"mybinder\.org/v2/gh/([\w.-]+/[\w.-]+)/", README))
    assert repos and repos == badges, (repos, badges)


def test_the_postgres_docs_install_commands_cover_a_clone_and_the_other_hosts():
    lines = [" ".join(words) for words in install_commands(doc("postgres.md"))]
    assert "pip install -e .[postgres]" in lines, lines
    assert any("@ git+https://" in line for line in lines) and any(".whl[postgres]" in line for line in lines), lines
    assert "pip wheel --no-deps -w dist ." in doc("postgres.md")


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
        assert f"the code's current schema, version {SCHEMA_VERSION}" in text, (
            f"bench/README.md's figures are of schema {measured.group(1)}, the code is at {SCHEMA_VERSION}: say so"
        )


def test_the_docs_upgrade_promise_names_every_older_schema_version():
    from leaselab.backends.sqlite import SCHEMA_VERSION

    text = " ".join(doc("durability.md").split())  # a sentence may wrap anywhere
    listed = re.search(r"\(schema version ([\d, ]+(?:or \d+)?)\) is upgraded in place", text)
    assert listed, "docs/durability.md no longer says which older files are upgraded"
    assert f"This is schema version {SCHEMA_VERSION}." in text, "docs/durability.md names another current schema"
    assert sorted(map(int, re.findall(r"\d+", listed.group(1)))) == list(range(1, SCHEMA_VERSION))
