"""The backend contract, checked by a type checker: the three backends satisfy ``Backend`` (and, with the
defaults they inherit, ``FullBackend``), the tests' minimal backend satisfies ``Backend`` alone, and the
queue calls only what the contract names. Each backend module ends with ``_CONTRACT: type[Backend] = ...``,
which mypy verifies; a class that misses a method or gets a signature wrong fails the same check."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="the type checker is in the test extra: pip install 'leaselab[test]'")

from leaselab.backends import contract  # after the mypy check

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("leaselab/backends", "leaselab/queue.py")


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


def mypy(cache: Path, *targets: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(cache),
            "--no-error-summary",
            "--disable-error-code",
            "empty-body",
            "--follow-imports=silent",
            *targets,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_backends_and_the_queue_type_check_and_every_backend_satisfies_the_contract(mypy_cache):
    out = mypy(mypy_cache, *CHECKED)
    assert out.returncode == 0, out.stdout + out.stderr
    for backend in ("sqlite", "postgres", "apsw"):
        text = (ROOT / "leaselab/backends" / backend / "backend.py").read_text(encoding="utf-8")
        assert "\n_CONTRACT: type[Backend] = " in text  # the line mypy just verified


def test_the_minimal_backend_satisfies_the_required_contract_alone(mypy_cache):
    """tests/support/minimal_backend.py writes only ``Backend``'s members (the fast paths are the mixin's defaults):
    its ``_CONTRACT: type[Backend] = MinimalBackend`` line type checks."""
    text = (ROOT / "tests/support/minimal_backend.py").read_text(encoding="utf-8")
    assert "\n_CONTRACT: type[Backend] = MinimalBackend" in text
    out = mypy(mypy_cache, "tests/support/minimal_backend.py")
    assert out.returncode == 0, out.stdout + out.stderr


def _backend_copy(change=None) -> str:
    """A module with a plain class holding the Protocol's own members, ``change`` applied to its source,
    and the same check the backends make: ``_CONTRACT: type[Backend] = Copy``."""
    source = inspect.getsource(contract.Backend).replace("class Backend(Protocol):", "class Copy:", 1)
    if change is not None:
        source = change(source)
    names = ", ".join(
        n for n in ("Backend", "ByHand", "Claim", "Claimed", "Completing", "Completion", "NewJob", "Refusals", "Tracer")
    )
    return (
        f"from __future__ import annotations\nimport threading\n"
        f"from contextlib import AbstractContextManager\nfrom typing import Callable, Sequence\n"
        f"from leaselab.job import Enqueued, Event, Job, Status\nfrom leaselab.backends.contract import {names}\n\n"
        f"{source}\n\n_CONTRACT: type[Backend] = Copy\n\n\n"
        # The same check on an instance, whose message names the member that does not fit.
        f"def _as_backend(copy: Copy) -> Backend:\n    return copy\n"
    )


def _without(method: str):
    def change(source: str) -> str:
        node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == method)
        lines = source.splitlines(keepends=True)
        return "".join(lines[: node.lineno - 1] + lines[node.end_lineno :])

    return change


def _check(tmp_path: Path, cache: Path, module: str) -> subprocess.CompletedProcess:
    path = tmp_path / "copy_backend.py"
    path.write_text(module, encoding="utf-8")
    return mypy(cache, "--follow-imports=silent", str(path))


def test_a_class_with_every_member_of_the_contract_passes_the_check(tmp_path, mypy_cache):
    out = _check(tmp_path, mypy_cache, _backend_copy())
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_backend_that_misses_a_method_fails_the_check_naming_it(tmp_path, mypy_cache):
    out = _check(tmp_path, mypy_cache, _backend_copy(_without("reap")))
    assert out.returncode == 1, out.stdout + out.stderr
    assert 'variable has type "type[Backend]"' in out.stdout, out.stdout
    assert 'is missing following "Backend" protocol member' in out.stdout and "note:     reap" in out.stdout, out.stdout


def test_a_backend_with_a_wrong_signature_fails_the_check_naming_the_method(tmp_path, mypy_cache):
    wrong = lambda source: source.replace(  # noqa: E731  (the durable flag forgotten)
        "def claim(self, claim: Claim, *, durable: bool)", "def claim(self, claim: Claim)", 1
    )
    assert wrong(inspect.getsource(contract.Backend)) != inspect.getsource(contract.Backend)
    out = _check(tmp_path, mypy_cache, _backend_copy(wrong))
    assert out.returncode == 1, out.stdout + out.stderr
    assert 'variable has type "type[Backend]"' in out.stdout, out.stdout
    assert 'Following member(s) of "Copy" have conflicts' in out.stdout and "claim" in out.stdout, out.stdout
