"""What a failed attempt leaves in the queue (``last_error``, and its ``failed`` event's detail): the
exception's one line first, what every listing shows when it cuts an error to its width, then its whole
traceback, so the line that raised it is never lost; bounded, the traceback's last lines kept."""

from __future__ import annotations

import traceback

from ..queue import MAX_ERROR

# The one line may itself be long (a message quoting a payload): a listing needs only its start.
SUMMARY_SHARE = 4  # at most a quarter of the bound goes to the summary when the text must be cut


def summary(error: BaseException) -> str:
    """``KeyError: 'x'``: the exception's class and message, as the worker's log shows it."""
    try:
        message = str(error)
    except Exception:  # a broken __str__ must not stop the failure being written
        message = "<exception str() failed>"
    return f"{type(error).__name__}: {message}"


def described(error: BaseException, limit: int = MAX_ERROR) -> str:
    """The summary, a blank line, and ``traceback.format_exception(error)``, at most ``limit`` characters:
    past it the traceback's first lines give way to a line saying how many characters were cut, so the
    frames nearest the raise (and the exception's own line) are kept."""
    head = summary(error)
    trace = "".join(traceback.format_exception(error)).rstrip("\n")
    text = f"{head}\n\n{trace}"
    if len(text) <= limit:
        return text
    head = head[: limit // SUMMARY_SHARE]
    room = limit - len(head) - 100  # the cut's own line, with room to spare
    tail = trace[-room:] if room > 0 else ""
    newline = tail.find("\n")
    if 0 <= newline < len(tail) - 1:  # start the kept part at a whole line
        tail = tail[newline + 1 :]
    cut = len(trace) - len(tail)
    return f"{head}\n\n[... {cut} characters of the traceback cut ...]\n{tail}"[:limit]
