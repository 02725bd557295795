"""A worker's log as the ``leaselab worker`` command writes it: each line stamped ``HH:MM:SS.mmm``,
shown safe (``printable``), and written whole.

A busy worker writes two lines a job (claimed, completed). ``LineLog`` takes them one at a time
(a ``Log``: any callable of one line) or, from the worker's loop, all the lines of one turn at
once (``lines``): one stamp, one ``write()`` and one flush for the turn instead of one per line.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TextIO

from ..printable import printable

MILLISECONDS = tuple(f".{ms:03d}" for ms in range(1000))  # a format spec per line cost more than the rest


def stamp(t: float | None) -> str:
    """``t`` as the log writes a time (``HH:MM:SS.mmm``, local time), ``-`` for none.

    A time no calendar holds (year 10000, say) is written as the number."""
    if t is None:
        return "-"
    try:
        return datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3]
    except (ValueError, OverflowError, OSError):  # a time no calendar holds (year 10000, say): the number
        return f"{t:.3f}"


class LogStamps:
    """The local time as ``HH:MM:SS.mmm``, as ``datetime.fromtimestamp(t).strftime`` writes it, its
    ``HH:MM:SS`` made once a second: ``strftime`` was the most expensive part of a log line."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._second: tuple[float, str] = (math.nan, "")  # one tuple: the pulse thread logs too

    def __call__(self) -> str:
        # The microseconds as datetime.fromtimestamp rounds them (half to even), carried into the second.
        fraction, whole = math.modf(self._clock())
        micros = round(fraction * 1e6)
        if micros >= 1_000_000:
            whole, micros = whole + 1, micros - 1_000_000
        second, hms = self._second
        if whole != second:
            hms = datetime.fromtimestamp(whole).strftime("%H:%M:%S")
            self._second = (whole, hms)
        return hms + MILLISECONDS[micros // 1000]


class LineLog:
    """Writes log lines to ``stream`` (standard output when None, looked up at each write).

    One line per message, whatever a handler's error or a job's text holds: a newline in it
    would forge a log line of its own, an ESC would drive the reader's terminal. Each call is
    one ``write()`` of whole lines and a flush, so the lines of two threads (the worker's loop
    and its pulse) never interleave within a line.
    """

    def __init__(self, stream: TextIO | None = None, clock: Callable[[], float] = time.time):
        self._stream = stream
        self._stamp = LogStamps(clock)

    def __call__(self, message: str) -> None:
        self._write(f"{self._stamp()} {printable(message)}\n")

    def lines(self, messages: Sequence[str]) -> None:
        """Write ``messages`` in order under one stamp, in one write."""
        stamp = self._stamp()
        self._write("".join([f"{stamp} {printable(message)}\n" for message in messages]))

    def _write(self, text: str) -> None:
        stream = sys.stdout if self._stream is None else self._stream
        stream.write(text)
        stream.flush()
