"""The handlers' record of what they did to the outside world: one JSON line per effect.

A handler calls ``record_effect(job, key=...)`` right after its effect took hold (the mail
sent, the deposit written). The line names the job, the attempt and the token of the claim
it ran under, the effect's idempotency ``key``, the process and the time, and any ``detail``
the caller gives. Lines of one job with the same key are the same effect: the checker
reports more than one of them as ``effect_repeated``. A job that ran twice but whose store
kept the effect once (a keyed write, a fenced one) shows one line: at-least-once working
as promised.

The file is named by the ``LEASELAB_EFFECTS`` environment variable (or ``path=``), so a
handler needs no argument for it and records nothing when it is unset. A user's own store
is checked instead through a callable that lists the effects it holds as dicts with the
same fields (``job`` and ``attempt`` at least).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Union

from ..printable import printable
from .errors import InvalidEffects

ENV = "LEASELAB_EFFECTS"

# The fields of one line, in the order they are written; ``detail`` holds the caller's own.
FIELDS = ("job", "attempt", "token", "worker", "key", "pid", "time", "detail")

EffectSource = Union[None, str, "os.PathLike[str]", list[dict], tuple[dict, ...], Callable[[], Iterable[dict]]]


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def record_effect(
    job: Any, key: str | None = None, *, path: str | os.PathLike | None = None, **detail: Any
) -> dict[str, Any] | None:
    """Append one line saying ``job``'s effect ``key`` took hold; the line written, or None when no file is named.

    ``job`` is the ``Job`` the handler was given (its ``id``, ``attempts``, ``token`` and
    ``worker`` are written). ``key`` names which effect of the job this is, the idempotency
    key a store would dedupe on; None means the job's one effect. The file is ``path``, else
    ``$LEASELAB_EFFECTS``; with neither, nothing is written. ``detail`` must be JSON.
    """
    target = os.fspath(path) if path is not None else os.environ.get(ENV)
    if not target:
        return None
    job_id, attempt = getattr(job, "id", None), getattr(job, "attempts", None)
    if not (_whole(job_id) and _whole(attempt)):
        raise TypeError(f"job must be the Job the handler was given (with an int id and attempts), got {job!r:.80}")
    if key is not None and not isinstance(key, str):
        raise TypeError(f"key must be a str (the effect's idempotency key) or None, got {key!r:.80}")
    line = {
        "job": job_id,
        "attempt": attempt,
        "token": getattr(job, "token", None),
        "worker": getattr(job, "worker", None),
        "key": key,
        "pid": os.getpid(),
        "time": time.time(),
        "detail": detail,
    }
    try:
        text = json.dumps(line, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"the detail of an effect must be JSON ({exc}): {sorted(detail)}") from None
    # One write() of a line to an O_APPEND file lands whole at the end, between processes too:
    # lines from workers running at once never interleave.
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (text + "\n").encode())
    finally:
        os.close(fd)
    return line


def _shown(text: str) -> str:
    """A line of someone's file as an error quotes it: one line, control characters escaped, cut to 80."""
    text = printable(text.strip())
    return text if len(text) <= 80 else text[:79] + "…"


def read_effects(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The lines ``record_effect`` wrote to ``path``, oldest first; an absent file means no effects yet.

    A line ``record_effect`` could not have written (not JSON, not an object, no ``job`` or ``attempt``, a
    field it never writes) raises ``InvalidEffects`` naming the file, the line's number and its text:
    a file in another format must be refused, not read as effects that every job repeated.
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            lines = list(fh)
    except FileNotFoundError:
        return []
    except IsADirectoryError:
        raise InvalidEffects(f"{path} is a folder, not an effects file") from None
    except UnicodeDecodeError as exc:
        raise InvalidEffects(f"{path} is not an effects file: not UTF-8 text ({exc.reason})") from None
    found = []
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except ValueError as exc:
            raise InvalidEffects(f"{path}, line {number}: not JSON ({exc})") from None
        if not isinstance(line, dict):
            raise InvalidEffects(f"{path}, line {number}: not a JSON object: {_shown(text)}")
        missing = [name for name in ("job", "attempt") if name not in line]
        unknown = sorted(set(line) - set(FIELDS))
        if missing or unknown:
            why = "; ".join(
                ([f"no {' or '.join(missing)}"] if missing else [])
                + ([f"{', '.join(map(repr, unknown))} is no field of it"] if unknown else [])
            )
            raise InvalidEffects(
                f"{path}, line {number}: not an effect line as record_effect writes them ({why}; its fields are "
                f"{', '.join(FIELDS)}): {_shown(text)}"
            )
        found.append(line)
    return found


def effects_from(source: EffectSource) -> list[dict[str, Any]]:
    """Effects from ``source`` (None, an effects file, a callable listing a store's effects, or a list), checked.

    Each comes back as a new dict with every field of ``FIELDS`` (absent ones None) and
    ``n``, its place in the record, for a witness to point at.
    """
    if source is None:
        return []
    items: Sequence[Any]
    if isinstance(source, (str, os.PathLike)):
        where, items = os.fspath(source), read_effects(source)
    elif isinstance(source, (list, tuple)):
        where, items = "the effects given", source
    elif callable(source):
        where = f"the effects {getattr(source, '__qualname__', 'callable')}() listed"
        try:
            items = list(source())
        except TypeError as exc:
            raise InvalidEffects(f"{where}: not an iterable of effect dicts ({exc})") from None
    else:
        raise TypeError(
            f"effects must be None, a path to an effects file, a callable listing effects or a list, got {source!r:.80}"
        )
    return [_effect(item, n, where) for n, item in enumerate(items, 1)]


def _effect(item: Any, n: int, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InvalidEffects(f"{where}, effect {n}: not a dict, got {item!r:.60}")
    job, attempt = item.get("job"), item.get("attempt")
    if not _whole(job):
        raise InvalidEffects(f"{where}, effect {n}: job must be a job id (an int), got {job!r:.40}")
    if attempt is not None and not _whole(attempt):
        raise InvalidEffects(f"{where}, effect {n}: attempt must be an int or absent, got {attempt!r:.40}")
    for name in ("token", "key", "worker"):
        value = item.get(name)
        if value is not None and not isinstance(value, str):
            raise InvalidEffects(f"{where}, effect {n}: {name} must be a str or absent, got {value!r:.40}")
    moment = item.get("time")
    if moment is not None and (
        isinstance(moment, bool) or not isinstance(moment, (int, float)) or not math.isfinite(moment)
    ):
        raise InvalidEffects(f"{where}, effect {n}: time must be a number or absent, got {moment!r:.40}")
    return {**{name: item.get(name) for name in FIELDS}, "n": n}
