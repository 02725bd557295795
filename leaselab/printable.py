"""Text another program wrote, made safe to show on one line of a terminal.

A worker name, a handler's error or a payload is written by whoever can reach the queue; a
listing or a log line that printed it raw would let that text move the reader's cursor,
clear the screen, retitle the window (ESC sequences), rewrite the line (CR), ring the bell, or
forge a log line of its own (LF). ``printable`` shows each such character as a visible escape
instead.
"""

from __future__ import annotations

import re

# C0 controls (tab, LF and CR included: every field is shown on one line), DEL, the C1 controls
# (U+0085 is a line break; U+009B is a one-character ESC [), the bidirectional overrides and
# isolates that reorder what follows them, and the Unicode line and paragraph separators.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\r``, ``\\n``, ``\\u202e``).

    Everything else, backslashes included, is left as it is: the result is for a reader's
    eyes, not to be parsed back.
    """
    # str.isprintable() is False for every character the pattern matches (Unicode's Cc, Cf, Zl and Zp),
    # and one C call: most text has nothing to escape, and every worker log line comes through here.
    return text if text.isprintable() else _UNPRINTABLE.sub(_escape, text)


def has_unprintable(text: str) -> bool:
    """True if ``text`` holds a character that ``printable`` would escape."""
    return _UNPRINTABLE.search(text) is not None
