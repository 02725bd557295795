"""Errors live with the layer that raises them, under one root, and the top level exports what a queue user catches."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import leaselab
from leaselab.errors import LeaselabError

PACKAGE = Path(leaselab.__file__).resolve().parent
LAYER_ERRORS = (
    "leaselab.errors",
    "leaselab.check.errors",
    "leaselab.harness.errors",
    "leaselab.lab.errors",
    "leaselab.lessons.errors",
    "leaselab.chaos.errors",
)


def _defined() -> dict[str, str]:
    """Each error class of the package, by name, with the module that defines it."""
    found: dict[str, str] = {}
    for name in LAYER_ERRORS:
        for cls_name, obj in vars(importlib.import_module(name)).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                assert cls_name not in found, f"{cls_name} is defined twice"
                found[cls_name] = name
    return found


def _package_of(module: str) -> str:
    return module.rsplit(".", 1)[0]


def test_every_error_of_every_layer_derives_from_the_one_root_and_says_when_it_is_raised():
    for name, module in _defined().items():
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, LeaselabError), f"{module}.{name} is not a LeaselabError"
        doc = inspect.getdoc(cls) or ""
        assert doc.startswith(("Raised ", "Root of")), f"{module}.{name}: docstring must say when it is raised"


def test_no_class_outside_the_errors_modules_is_an_error_of_leaselab():
    # One errors module per layer: a LeaselabError defined anywhere else is one a reader will not find.
    stray = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and path.name != "errors.py":
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)} | {
                    b.attr for b in node.bases if isinstance(b, ast.Attribute)
                }
                if bases & (set(_defined()) | {"LeaselabError"}):
                    stray.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert stray == []


def test_an_error_of_a_layer_is_raised_only_inside_that_layer():
    # The core's errors may be raised anywhere (a backend's TransientError, the worker's HandlerError);
    # an error of the lab, the harness, the lessons, the checker or chaos only in its own folder.
    defined = _defined()
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
                home = defined.get(name or "")
                if home and home != "leaselab.errors" and not module.startswith(_package_of(home) + "."):
                    wrong.append(f"{module} raises {name} of {home}")
    assert wrong == []


def test_the_top_level_exports_what_a_queue_user_needs_and_no_lab_or_chaos_error():
    assert len(leaselab.__all__) < 20
    for name in leaselab.__all__:
        assert hasattr(leaselab, name), name
    layer_only = {name for name, module in _defined().items() if module != "leaselab.errors"}
    assert layer_only & set(leaselab.__all__) == set()
    assert {"Queue", "Worker", "Job", "Lease", "LeaselabError", "LeaseLost", "TransientError"} <= set(leaselab.__all__)
