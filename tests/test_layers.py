"""The package's layers: the core imports no lab, no lesson and no heavy library; each layer imports only downward."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "leaselab"

CORE_MODULES = (
    "leaselab",
    "leaselab.queue",
    "leaselab.cli",
    "leaselab.job",
    "leaselab.errors",
    "leaselab.clock",
    "leaselab.backoff",
    "leaselab.arguments",
    "leaselab.words",
    "leaselab.printable",
    "leaselab.fencing",
    "leaselab.lifecycle",
    "leaselab.worker",
    "leaselab.worker.loop",
    "leaselab.worker.lease",
    "leaselab.worker.pulse",
    "leaselab.worker.faults",
    "leaselab.worker.logline",
    "leaselab.worker.signals",
)
FORBIDDEN_FOR_CORE = (
    "leaselab.lab",
    "leaselab.lessons",
    "leaselab.harness",
    "leaselab.chaos",
    "pandas",
    "ipywidgets",
    "matplotlib",
    "psycopg",
    "apsw",
)  # a driver is imported only for a target that needs it


def test_importing_the_core_and_opening_a_file_queue_imports_neither_the_lab_nor_the_lessons_nor_a_driver(tmp_path):
    code = (
        f"import sys, {', '.join(CORE_MODULES)}; q = leaselab.Queue({str(tmp_path / 'q.db')!r}); "
        "q.enqueue(1); q.close(); "
        f"print(__import__('json').dumps(sorted(m for m in sys.modules if m.startswith({FORBIDDEN_FOR_CORE!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_a_worker_running_a_lesson_handler_imports_no_widget_plot_or_table_library():
    code = (
        "import sys, leaselab.worker; leaselab.worker.load_handler('leaselab.harness.demo:task'); "
        "leaselab.worker.load_handler('leaselab.harness.effects:deposit'); "
        "print(__import__('json').dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('pandas', 'ipywidgets', 'matplotlib', 'psycopg') or m.startswith('leaselab.lab'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


MODULES = {
    ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    for p in PACKAGE.rglob("*.py")
}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path, top_level_only: bool = False) -> set[str]:
    """The leaselab modules that ``path`` imports (``from x import name`` counts as x, or as x.name
    when that is a module); with ``top_level_only``, only those its body imports as it runs."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.update(f"{name}.{a.name}" if f"{name}.{a.name}" in MODULES else name for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {n for n in found if n in MODULES and n != module}


# The package's layers below the top: each a folder; the command line is one of its own. Every
# other module is the core.
LAYERS = ("backends", "worker", "harness", "lab", "lessons", "check", "chaos", "sim")


def _layer(module: str) -> str:
    parts = module.split(".")
    if module in ("leaselab.cli", "leaselab.__main__"):
        return "cli"
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return "core"


# Exactly what each layer may import from outside itself, module by module: the core opens a
# backend through the contract and exports the worker; the backends see only the core's plain
# parts; the worker runs on the core alone. The harness (real processes, servers and faults)
# drives the worker and records effects for the checker. The checker sees, of the backends, only
# their package (how a target is told apart and a password scrubbed): never a backend's own SQL or
# connection, so a bug there cannot hide itself from the checker. The lab is a view over the
# harness's fleet; chaos drives the harness and calls the checker. The lessons show the statements
# of both dialects, pay into the harness's ledger and run the simulator (lesson 9). Nothing imports
# the lessons: only notebooks do. The simulator drives the real SQLite statements and the worker's
# decisions on virtual time, with no process, thread or network of its own. The command line reaches every command.
ALLOWED = {
    "core": {"leaselab.backends", "leaselab.backends.contract", "leaselab.worker"},
    "backends": {"leaselab.backoff", "leaselab.clock", "leaselab.errors", "leaselab.job"},
    "worker": {
        "leaselab.arguments",
        "leaselab.clock",
        "leaselab.errors",
        "leaselab.job",
        "leaselab.periodic",  # a worker runs periodic schedules (worker/scheduler.py)
        "leaselab.printable",
        "leaselab.queue",
    },
    "harness": {
        "leaselab.arguments",
        "leaselab.backends",
        "leaselab.check",
        "leaselab.clock",
        "leaselab.errors",
        "leaselab.fencing",
        "leaselab.job",
        "leaselab.queue",
        "leaselab.worker",
        "leaselab.worker.faults",
        "leaselab.worker.lease",
        "leaselab.worker.logline",  # the fleet's own line in a worker's log ("killed by the lab") is a log line
    },
    "sim": {
        "leaselab.backends.sqlite.backend",
        "leaselab.backends.sqlite.statements",
        "leaselab.backoff",
        "leaselab.check.effects",
        "leaselab.errors",
        "leaselab.harness.effects",
        "leaselab.harness.powercut",
        "leaselab.job",
        "leaselab.queue",
        "leaselab.words",
        "leaselab.worker",
        "leaselab.worker.decisions",
        "leaselab.worker.lease",
    },
    "lessons": {
        "leaselab.arguments",
        "leaselab.backends.postgres.statements",
        "leaselab.backends.sqlite.statements",
        "leaselab.backoff",
        "leaselab.chaos.failover",  # the crash lesson fails over as chaos does, on chaos's own gate
        "leaselab.check",  # and judges it as leaselab check does, alone and with the journals
        "leaselab.clock",
        "leaselab.errors",
        "leaselab.harness.demo",
        "leaselab.harness.effects",
        "leaselab.harness.fleet",  # the real workers that run through that failover
        "leaselab.job",
        "leaselab.lab.timeline",  # lesson 9 draws a simulated run on the lab's timeline
        "leaselab.lifecycle",  # lessons 1 and 3 draw the state machine from the table the tests make happen
        "leaselab.queue",
        "leaselab.sim.explore",  # lesson 9 runs the simulator and plants the reader's mutant
        "leaselab.sim.mutants",
        "leaselab.sim.report",  # and shows its runs as the simulator's own report does, in either language
        "leaselab.sim.world",
        "leaselab.worker",
        "leaselab.worker.lease",  # lesson 5's check asks a worker's own lease when it gives up
        "leaselab.words",
    },
    "lab": {
        "leaselab.periodic",  # the timeline draws a schedule's ticks
        "leaselab.backends",
        "leaselab.check",
        "leaselab.errors",
        "leaselab.harness.fleet",
        "leaselab.job",
        "leaselab.queue",
        "leaselab.words",
    },
    # The checker's specification rule is the simulator's model, judging a real history (leaselab.sim.judge).
    "check": {
        "leaselab.arguments",
        "leaselab.backends",
        "leaselab.backoff",
        "leaselab.errors",
        "leaselab.job",  # the history's kinds of event, named once (HOLDER_RELEASES): data, not the queue's code
        "leaselab.printable",
        "leaselab.sim.judge",
        "leaselab.words",
    },
    "chaos": {
        "leaselab.arguments",
        "leaselab.backends",
        "leaselab.check",
        "leaselab.errors",
        "leaselab.harness.effects",
        "leaselab.harness.errors",
        "leaselab.harness.fleet",
        "leaselab.harness.pgreplicas",  # the primary and standby a failover run starts and fails over
        "leaselab.harness.pgserver",
        "leaselab.queue",
        "leaselab.words",
        "leaselab.worker",
        "leaselab.worker.journal",  # a failover waits on what the workers' journals say they were told
    },
    "cli": {
        "leaselab.periodic",  # worker --schedule FILE
        "leaselab.arguments",  # a queue's name is checked as argparse reads it, by the queue's own rule
        "leaselab.backends",
        "leaselab.backends.sqlite.backend",
        "leaselab.backoff",
        "leaselab.chaos.command",
        "leaselab.check",
        "leaselab.errors",
        "leaselab.harness.pgcommand",
        "leaselab.job",
        "leaselab.printable",
        "leaselab.queue",
        "leaselab.sim.command",
        "leaselab.words",
        "leaselab.worker",
        "leaselab.worker.logline",
        "leaselab.worker.process",
    },
}


def test_nothing_in_the_package_imports_the_lessons():
    # The lessons are the notebooks' props: a command, the lab or chaos that needed one would make
    # the library depend on its teaching kit.
    assert {layer for layer, allowed in ALLOWED.items() if any(_layer(n) == "lessons" for n in allowed)} == set()


def test_default_handlers_are_references_to_functions_not_strings():
    # A handler named in a string is a dependency the layer test cannot see: a default is written
    # as handler_path(module.function), whose import the guard above checks. (Examples in
    # docstrings and help texts are prose, not strings that are only a handler.)
    handler = re.compile(r"leaselab(\.[a-z_]+)+:[a-z_]+")
    found = [
        f"{p.relative_to(PACKAGE)}:{node.lineno}"
        for p in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and handler.fullmatch(node.value)
    ]
    assert found == []


def _crossings() -> dict[str, set[str]]:
    """Per layer, the modules of other layers that its modules import."""
    crossing: dict[str, set[str]] = {layer: set() for layer in ALLOWED}
    for path in PACKAGE.rglob("*.py"):
        layer = _layer(_module(path))
        crossing.setdefault(layer, set()).update(n for n in _imports(path) if _layer(n) != layer)
    return crossing


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_module_imports_only_what_its_layer_may(path):
    module = _module(path)
    layer = _layer(module)
    assert layer in ALLOWED, f"{module}: layer {layer} has no entry in ALLOWED"
    wrong = sorted(n for n in _imports(path) if _layer(n) != layer and n not in ALLOWED[layer])
    assert wrong == [], f"{module} ({layer}) imports {wrong}"


def test_the_guard_lists_no_import_that_no_module_makes():
    # Exact, not merely a ceiling: an allowance nothing uses any more is taken out, so the list
    # says what the layers do depend on.
    crossing = _crossings()
    unused = {layer: sorted(allowed - crossing[layer]) for layer, allowed in ALLOWED.items()}
    assert {layer: names for layer, names in unused.items() if names} == {}


def test_no_modules_import_each_other_in_a_cycle():
    # The imports a module runs as it loads (not those inside a function, which run later, when
    # everything is loaded): a cycle among these leaves one of its modules half-initialised.
    graph = {_module(p): _imports(p, top_level_only=True) for p in PACKAGE.rglob("*.py")}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join(path[path.index(module) :] + (module,))}"
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, path + (module,))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())


def test_checking_a_file_imports_no_backend_of_the_queue_nor_the_lab_nor_the_lessons_nor_a_driver(tmp_path):
    # (leaselab's own __init__ imports Queue's module, and with it the backends' contract: the
    # Protocol and the values that cross it, no SQL and no connection. The checker never opens a
    # backend through it.)
    db = str(tmp_path / "q.db")
    make = f"import leaselab; q = leaselab.Queue({db!r}); q.enqueue(1); q.close()"
    assert subprocess.run([sys.executable, "-c", make], capture_output=True, timeout=60).returncode == 0
    code = (
        f"import sys, leaselab.check; r = leaselab.check.check({db!r}, idle=False); "
        "print(__import__('json').dumps(sorted(m for m in sys.modules if m.startswith(("
        "'leaselab.backends.', 'leaselab.lab', 'leaselab.lessons', "
        "'psycopg', 'apsw', 'pandas', 'ipywidgets', 'matplotlib')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["leaselab.backends.contract"]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_private_name_of_another(path):
    private = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("leaselab")):
            private += [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert private == []
