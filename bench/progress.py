"""One line on stderr as each step of a benchmark starts, so a long run is never silent and stdout stays the table."""

from __future__ import annotations

import sys
import time

_START = time.monotonic()


def step(what: str) -> None:
    """Say what is being measured now, with the seconds since the script started."""
    print(f"[{time.monotonic() - _START:7.1f} s] {what}", file=sys.stderr, flush=True)
