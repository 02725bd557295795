"""Build the lessons: one source per lesson in ``src/`` becomes ``en/`` and ``ru/`` notebooks, run, with outputs.

A source is a jupytext percent-format script. Code cells are shared by both
languages; every markdown cell carries the tag ``en`` or ``ru`` and goes only to
that language. So the two notebooks of a lesson have the same code cells, in the
same order, and differ only in prose and in the words of code comments: a comment
written ``# in English / по-русски`` reads ``# in English`` in the English notebook
and ``# по-русски`` in the Russian one.

    python notebooks/build.py              # build and run every lesson whose inputs changed
    python notebooks/build.py 02 03        # rebuild these lessons, changed or not
    python notebooks/build.py --force      # rebuild every lesson
    python notebooks/build.py --no-execute # write the cells without running them

A notebook is rebuilt only when its inputs changed since it was built, so building an
unchanged checkout executes nothing and leaves every file as it was. Its inputs are
its own cells as the source makes them (code, prose in its language, tags), the
leaselab package (every ``.py`` and ``.sql`` file under ``leaselab/``) and this
script; their digest is stored in the notebook's metadata (``leaselab.built_from``).
Not inputs: the versions of Python, Jupyter and matplotlib, and PostgreSQL's
binaries. After upgrading those, ``--force`` rebuilds everything.

Each notebook runs in a fresh kernel whose working folder is the notebook's own
folder, as in JupyterLab and under nbval; lessons keep their databases in a
temporary folder and remove it in their last cell. What a run stores is made to be
the same on every run where it can be: widget model ids are numbered in order, and
the random parts of a run's temporary folder and server port are masked. What can
only vary (timings, race counts, timelines of real processes) is in cells that nbval
does not compare.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import sys
import tokenize
import uuid
from pathlib import Path

import jupytext
import nbformat

from leaselab.words import LANGS as LANGUAGES  # a lesson is built in every language leaselab speaks

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
PACKAGE = HERE.parent / "leaselab"
PACKAGE_SUFFIXES = (".py", ".sql")  # what the package is made of; test_build checks no other kind is tracked
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
CELL_TIMEOUT = 120
STAMP = "leaselab"  # the notebook metadata key under which the build records its inputs' digest
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_REF = re.compile(r"IPY_MODEL_([0-9a-f]{32})")
# What a run prints that is random by construction and means nothing to a reader, with what is
# stored instead. Each occurs only in outputs nbval does not compare (the dashboards' headers).
RUN_SPECIFIC = (
    # tempfile.mkdtemp's eight random characters after lessons.scratch's prefix
    (re.compile(r"(leaselab-\d\d-[a-z0-9-]+-)[a-z0-9_]{8}(?![a-z0-9_])"), r"\1XXXXXXXX"),
    # the port a throw-away PostgreSQL server (harness.pgserver) was given by the system
    (re.compile(r"(postgresql://[^\s@/'\"]+@127\.0\.0\.1:)\d+"), r"\1PORT"),
)


class SourceError(ValueError):
    """A lesson source breaks the rules that keep the languages in step."""


def sources(folder: Path = SRC) -> list[Path]:
    """Every lesson source in ``folder``, in lesson order."""
    return sorted(Path(folder).glob("[0-9][0-9]-*.py"))


def cell_language(cell) -> str | None:
    """``en`` or ``ru`` for a prose cell of one language; None for a cell both languages share."""
    langs = [t for t in cell.metadata.get("tags", []) if t in LANGUAGES]
    if len(langs) > 1:
        raise SourceError(f"a cell is tagged with more than one language: {cell.source[:60]!r}")
    if langs and cell.cell_type != "markdown":
        raise SourceError(f"only prose may be language-specific; a {cell.cell_type} cell is tagged {langs[0]}")
    return langs[0] if langs else None


# A code comment in both languages: the English words, " / ", then the Russian (which has Cyrillic
# letters, the English none: so a comment that only happens to hold a slash is left alone).
BILINGUAL_COMMENT = re.compile(r"#(?P<space>\s*)(?P<en>[^\u0400-\u04ff]*?)\s+/\s+(?P<ru>.*[\u0400-\u04ff].*)$")


def code_comments(code: str) -> list[tokenize.TokenInfo] | None:
    """The comment tokens of ``code``, or None if it is not plain Python (a cell magic, say)."""
    try:
        return [t for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):
        return None


def in_language(code: str, lang: str) -> str:
    """``code`` with each bilingual comment (``# English / русский``) in ``lang`` alone."""
    comments = code_comments(code)
    if not comments:
        return code
    lines = code.split("\n")
    for token in reversed(comments):  # from the end, so earlier positions stay valid
        m = BILINGUAL_COMMENT.fullmatch(token.string)
        if m is None:
            continue
        row, col = token.start[0] - 1, token.start[1]
        words = m.group("en") if lang == "en" else m.group("ru")
        line = lines[row]
        lines[row] = line[:col] + "#" + m.group("space") + words + line[col + len(token.string) :]
    return "\n".join(lines)


def _code(source: str) -> tuple:
    """What a code cell does, without its comments: the same in every language."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return (source,)
    return tuple((t.type, t.string) for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL))


def split(source: Path) -> dict[str, nbformat.NotebookNode]:
    """The lesson's notebook in each language, without outputs."""
    nb = jupytext.read(source)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell_language(cell) is None:
            raise SourceError(f"{source.name}: a prose cell has no language tag: {cell.source[:60]!r}")
    out = {}
    for lang in LANGUAGES:
        cells = []
        for cell in nb.cells:
            if cell_language(cell) not in (None, lang):
                continue
            cell = nbformat.from_dict(dict(cell))
            tags = [t for t in cell.metadata.get("tags", []) if t not in LANGUAGES]
            cell.metadata = {"tags": tags} if tags else {}
            cell.id = f"{source.stem[:2]}-{len(cells):03d}"
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
                cell.source = in_language(cell.source, lang)
            cells.append(cell)
        book = nbformat.v4.new_notebook(cells=cells)
        book.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
        out[lang] = book
    return out


def _shape(cell) -> tuple:
    """What must match between two notebooks of a lesson: the type of a cell, and a code cell's code and
    tags (its comments are in its notebook's language)."""
    if cell.cell_type == "code":
        return ("code", _code(cell.source), tuple(cell.metadata.get("tags", [])))
    return (cell.cell_type,)


def drift(en: nbformat.NotebookNode, ru: nbformat.NotebookNode) -> list[str]:
    """How the two languages of one lesson differ beyond their prose; empty when they are in step."""
    problems = []
    if len(en.cells) != len(ru.cells):
        problems.append(f"{len(en.cells)} cells in en, {len(ru.cells)} in ru")
    for i, (a, b) in enumerate(zip(en.cells, ru.cells, strict=False)):
        if _shape(a) != _shape(b):
            problems.append(f"cell {i} differs: en {_shape(a)[:2]!r} vs ru {_shape(b)[:2]!r}")
    return problems


def stale(source: Path, lang: str, committed: nbformat.NotebookNode) -> list[str]:
    """How a committed notebook differs from what its source builds (cells, not outputs); empty when current."""
    fresh = split(source)[lang]
    problems = []
    if len(fresh.cells) != len(committed.cells):
        problems.append(f"{lang}/{source.stem}: source has {len(fresh.cells)} cells, notebook {len(committed.cells)}")
    for i, (a, b) in enumerate(zip(fresh.cells, committed.cells, strict=False)):
        if (a.cell_type, a.source, a.metadata.get("tags", [])) != (b.cell_type, b.source, b.metadata.get("tags", [])):
            problems.append(f"{lang}/{source.stem}: cell {i} differs from the source; run notebooks/build.py")
    return problems


def target(source: Path, lang: str, out: Path = HERE) -> Path:
    return out / lang / (source.stem + ".ipynb")


def package_files(package: Path = PACKAGE) -> list[Path]:
    """The files of the leaselab package that a lesson's outputs depend on, in a stable order."""
    return sorted(
        p for p in package.rglob("*") if p.suffix in PACKAGE_SUFFIXES and p.is_file() and "__pycache__" not in p.parts
    )


def digest(nb: nbformat.NotebookNode, package: Path = PACKAGE) -> str:
    """The digest of everything a built notebook depends on: its unexecuted cells, the package and this script."""
    h = hashlib.sha256()

    def part(name: str, data: bytes) -> None:
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)

    part("notebook", nbformat.writes(nb).encode())
    part("build.py", Path(__file__).read_bytes())
    for path in package_files(package):
        part(path.relative_to(package).as_posix(), path.read_bytes())
    return h.hexdigest()


def built_from(path: Path) -> str | None:
    """The digest a notebook was built from, or None if it is missing, unreadable or was never run by this build."""
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return None
    return nb.metadata.get(STAMP, {}).get("built_from")


def _kernel_config():
    """Kernel manager settings: provision CurveZMQ keys where the kernel says it supports them.

    ipykernel 7.4 warns on every start, on stderr, that a kernel on TCP without encryption can be
    overheard; the kernelspec it installs says it supports CurveZMQ, and jupyter_client 8.10's
    ``transport_encryption`` then hands it keys. A jupyter_client without the setting is left as it is.
    """
    from jupyter_client.manager import KernelManager
    from traitlets.config import Config

    config = Config()
    if KernelManager.class_traits().get("transport_encryption") is not None:
        config.KernelManager.transport_encryption = "auto"
    return config


def execute(nb: nbformat.NotebookNode, folder: Path) -> None:
    """Run every cell in a fresh kernel started in ``folder``; a failing cell raises."""
    from nbclient import NotebookClient

    from leaselab.lessons.predict import GUESSES_FILE

    guesses = folder / GUESSES_FILE
    if guesses.exists():  # a reader's guesses would be printed into the stored lessons
        raise SystemExit(f"build: {guesses} holds guesses committed while running the lessons here; remove it")
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(folder)}},
        config=_kernel_config(),
    )
    client.execute()
    nb.metadata["kernelspec"] = dict(KERNELSPEC)  # keep it stable whatever the local kernel calls itself


def coalesce_streams(nb: nbformat.NotebookNode) -> None:
    """Merge consecutive writes to the same stream, which the kernel may flush in pieces at random."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        merged = []
        for out in cell.outputs:
            if (
                out.output_type == "stream"
                and merged
                and merged[-1].output_type == "stream"
                and merged[-1].name == out.name
            ):
                merged[-1].text += out.text
            else:
                merged.append(out)
        cell.outputs = merged


def _widget_order(nb: nbformat.NotebookNode) -> list[str]:
    """The notebook's widget model ids in an order that does not depend on the random ids themselves:
    the displayed widgets in cell order, each followed depth-first by the models it refers to."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    order: list[str] = []

    def visit(model_id: str) -> None:
        if model_id in state and model_id not in order:
            order.append(model_id)
            for ref in WIDGET_REF.findall(json.dumps(state[model_id], sort_keys=True)):
                visit(ref)

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get("application/vnd.jupyter.widget-view+json")
            if view:
                visit(view["model_id"])
    # Models no output shows (created but never displayed): by their content with the ids masked.
    rest = sorted(
        (m for m in state if m not in order),
        key=lambda m: WIDGET_REF.sub("IPY_MODEL_", json.dumps(state[m], sort_keys=True)),
    )
    for model_id in rest:
        visit(model_id)
    return order


def stabilize(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """The run's notebook with what is random by construction made the same on every run.

    Widget model ids (random UUIDs) become ids derived from ``name`` and their order; the random
    parts of ``RUN_SPECIFIC`` are masked. Cell sources are never changed.
    """
    text = nbformat.writes(nb)
    for n, model_id in enumerate(_widget_order(nb)):
        text = text.replace(model_id, uuid.uuid5(uuid.NAMESPACE_URL, f"leaselab:{name}#{n}").hex)
    for pattern, replacement in RUN_SPECIFIC:
        text = pattern.sub(replacement, text)
    stable = nbformat.reads(text, as_version=4)
    if [c.source for c in stable.cells] != [c.source for c in nb.cells]:
        raise SourceError(f"{name}: a cell's source contains what looks like a run's random id or port")
    return stable


def build(source: Path, run: bool = True, force: bool = False, out: Path = HERE) -> list[tuple[Path, str]]:
    """Build both languages of one lesson into ``out``; for each notebook, its path and what happened to it.

    What happened is ``current`` (its inputs are unchanged since its last build: not run, not touched),
    ``written`` or ``same`` (rebuilt, and every byte came out as before, so the file was left alone).
    """
    done = []
    for lang, nb in split(source).items():
        path = target(source, lang, out)
        inputs = digest(nb)
        if run and not force and built_from(path) == inputs:
            done.append((path, "current"))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if run:
            execute(nb, path.parent)
            coalesce_streams(nb)
            nb = stabilize(nb, f"{lang}/{path.name}")
            nb.metadata[STAMP] = {"built_from": inputs}
        nbformat.validate(nb)
        text = nbformat.writes(nb)
        text += "" if text.endswith("\n") else "\n"  # as nbformat.write ends a file
        if path.exists() and path.read_text(encoding="utf-8") == text:
            done.append((path, "same"))
            continue
        path.write_text(text, encoding="utf-8")
        done.append((path, "written"))
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "lessons",
        nargs="*",
        help="lesson name prefixes, e.g. 01 or 02-claim; a lesson named is rebuilt even if unchanged",
    )
    parser.add_argument("--force", action="store_true", help="rebuild every chosen lesson, changed or not")
    parser.add_argument("--no-execute", action="store_true", help="write the cells without running them")
    parser.add_argument("--src", type=Path, default=SRC, help="the folder of lesson sources (default: %(default)s)")
    parser.add_argument(
        "--out", type=Path, default=HERE, help="the folder that holds en/ and ru/ (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    if not args.src.is_dir():
        parser.error(f"--src {args.src}: no such folder")
    chosen = [s for s in sources(args.src) if not args.lessons or any(s.stem.startswith(p) for p in args.lessons)]
    if not chosen:
        parser.error(f"no lesson source in {args.src} matches {args.lessons}")
    current = 0
    for source in chosen:
        for path, what in build(source, run=not args.no_execute, force=args.force or bool(args.lessons), out=args.out):
            if what == "current":
                current += 1
                continue
            shown = path.relative_to(HERE.parent) if path.is_relative_to(HERE.parent) else path
            print(f"{'wrote' if what == 'written' else 'rebuilt, unchanged:'} {shown}", flush=True)
    if current:
        print(
            f"{current} notebook{'s' if current != 1 else ''} already built from the current sources and "
            "leaselab, left as they are (--force or naming a lesson rebuilds it)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
