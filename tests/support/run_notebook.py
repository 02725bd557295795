"""Run one notebook from its first cell to its last in a kernel of the Python that runs this script, as
Run All does, and write it with its outputs: ``python run_notebook.py NOTEBOOK [--in FOLDER] [--out PATH]``.

A program, not a module the tests import: the tests run it with the Python of another environment
(a fresh clone's), which has nbclient but not this test suite. The kernel
works in ``FOLDER`` (the notebook's own by default: lessons read their language from its name);
the result goes to ``PATH`` (the notebook itself by default). A cell's timeout only bounds a failure.
"""

import argparse
from pathlib import Path

import nbformat
from nbclient import NotebookClient

CELL_TIMEOUT = 600


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebook", type=Path)
    ap.add_argument("--in", dest="folder", type=Path, help="the kernel's working folder (default: the notebook's)")
    ap.add_argument("--out", type=Path, help="where the run notebook is written (default: over the notebook)")
    args = ap.parse_args()
    nb = nbformat.read(args.notebook, as_version=4)
    folder = args.folder or args.notebook.parent
    NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    ).execute()
    nbformat.write(nb, args.out or args.notebook)


if __name__ == "__main__":
    main()
