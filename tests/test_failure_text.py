"""A failed attempt's text: its one line first, then the whole traceback, bounded with its last lines kept."""

from __future__ import annotations

from leaselab.queue import MAX_ERROR
from leaselab.worker.failure import described, summary


def _raised(error: BaseException, cause: BaseException | None = None) -> BaseException:
    try:
        raise error from cause
    except BaseException as caught:
        return caught


def _chained(n: int) -> BaseException:
    """An error caused by ``n`` others before it: a long traceback Python does not fold."""
    cause = None
    for i in range(n):
        cause = _raised(ValueError(f"step {i}"), cause)
    return _raised(ConnectionError("smtp.example.org:25 refused"), cause)


def test_a_short_traceback_is_kept_whole_after_its_summary():
    error = _raised(ValueError("bad"))
    text = described(error)
    assert text.startswith("ValueError: bad\n\nTraceback (most recent call last):")
    assert text.endswith("ValueError: bad") and "_raised" in text


def test_a_long_traceback_keeps_its_last_lines_and_says_how_much_was_cut():
    error = _chained(300)
    full = described(error, limit=10**9)
    text = described(error)
    assert len(full) > MAX_ERROR >= len(text)
    assert text.startswith("ConnectionError: smtp.example.org:25 refused\n\n[... ")
    kept = text.split("characters of the traceback cut ...]\n", 1)[1]
    assert full.endswith("\n" + kept)  # the traceback's last lines, from the start of a line
    assert text.endswith("ConnectionError: smtp.example.org:25 refused")  # the raise itself is never cut


def test_a_huge_message_still_fits_the_bound_and_leaves_room_for_the_traceback():
    text = described(_raised(RuntimeError("x" * 50_000)))
    assert len(text) <= MAX_ERROR and text.startswith("RuntimeError: xxx") and "traceback cut" in text


def test_an_exception_whose_str_fails_is_still_described():
    class Broken(Exception):
        def __str__(self):
            raise RuntimeError("no")

    error = _raised(Broken())
    assert summary(error) == "Broken: <exception str() failed>"
    assert described(error).startswith("Broken: <exception str() failed>\n\nTraceback")
