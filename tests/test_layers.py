"""The package's layers: the core imports no lab, no lesson and no heavy library; each layer imports only downward."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "leaselab"

CORE_MODULES = ("leaselab", "leaselab.queue", "leaselab.worker", "leaselab.cli", "leaselab.job",
                "leaselab.errors", "leaselab.clock", "leaselab.backoff", "leaselab.checks", "leaselab.words")
FORBIDDEN_FOR_CORE = ("leaselab.lab", "leaselab.lessons", "pandas", "ipywidgets", "matplotlib", "psycopg")


def test_importing_the_core_and_opening_a_file_queue_imports_neither_the_lab_nor_the_lessons_nor_a_driver(tmp_path):
    code = (f"import sys, {', '.join(CORE_MODULES)}; q = leaselab.Queue({str(tmp_path / 'q.db')!r}); "
            "q.enqueue(1); q.close(); "
            f"print(__import__('json').dumps(sorted(m for m in sys.modules if m.startswith({FORBIDDEN_FOR_CORE!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_a_worker_running_a_lesson_handler_imports_no_widget_plot_or_table_library():
    code = ("import sys, leaselab.worker; leaselab.worker.load_handler('leaselab.lessons.demo:task'); "
            "leaselab.worker.load_handler('leaselab.lessons.effects:deposit'); "
            "print(__import__('json').dumps(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('pandas', 'ipywidgets', 'matplotlib', 'psycopg') or m.startswith('leaselab.lab'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def _imports(path: Path) -> set[str]:
    """Absolute names of the leaselab modules that ``path`` imports."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if module.endswith(".__init__"):
        module = module[: -len(".__init__")]
        package = module
    else:
        package = module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {n for n in found if n.split(".")[0] == "leaselab"}


def _layer(module: str) -> str:
    parts = module.split(".")
    if module in ("leaselab.cli", "leaselab.__main__"):
        return "cli"
    if len(parts) > 1 and parts[1] in ("lab", "lessons", "backends", "check", "chaos"):
        return parts[1]
    return "core"


# Which layer may import which: the core sees the backends (to open one), the backends see the core's plain parts (errors, job, backoff), the lessons
# and the lab see the core and the checker. The checker sees the core and, of the backends,
# only their package (how a target is told apart and a password scrubbed): never a backend's
# own SQL or connection, so a bug there cannot hide itself from the checker.
ALLOWED = {
    "core": {"core", "backends"},
    "backends": {"core", "backends"},
    "lessons": {"core", "backends", "lessons", "check"},
    "lab": {"core", "lab", "check"},
    "check": {"core", "check", "backends"},
    # chaos is the top layer: it drives the lab's fleet, the lessons' servers, and calls the checker.
    "chaos": {"core", "backends", "check", "lab", "lessons", "chaos"},
    # The command line reaches every command; it loads a layer above the core only inside that command.
    "cli": {"core", "backends", "check", "chaos", "cli"},
}
CHECK_MAY_IMPORT_OF_THE_BACKENDS = {"leaselab.backends"}


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_module_imports_only_from_the_layers_beneath_it(path):
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    layer = _layer(module)
    wrong = sorted(n for n in _imports(path) if _layer(n) not in ALLOWED[layer]
                   or (layer == "check" and _layer(n) == "backends"
                       and n.rsplit(".", 1)[0] not in CHECK_MAY_IMPORT_OF_THE_BACKENDS
                       and n not in CHECK_MAY_IMPORT_OF_THE_BACKENDS))
    assert wrong == [], f"{module} ({layer}) imports {wrong}"


def test_checking_a_file_imports_no_backend_of_the_queue_nor_the_lab_nor_the_lessons_nor_a_driver(tmp_path):
    # (leaselab's own __init__ imports Queue's module; the checker never opens a backend through it.)
    db = str(tmp_path / "q.db")
    make = f"import leaselab; q = leaselab.Queue({db!r}); q.enqueue(1); q.close()"
    assert subprocess.run([sys.executable, "-c", make], capture_output=True, timeout=60).returncode == 0
    code = (f"import sys, leaselab.check; r = leaselab.check.check({db!r}, idle=False); "
            "print(__import__('json').dumps(sorted(m for m in sys.modules if m.startswith(("
            "'leaselab.backends.', 'leaselab.lab', 'leaselab.lessons', "
            "'psycopg', 'pandas', 'ipywidgets', 'matplotlib')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_private_name_of_another(path):
    private = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("leaselab")):
            private += [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert private == []
