"""Small conveniences the lessons call, so notebook cells only show and never hide logic.

A scratch folder per lesson, waiting for a condition with a deadline, the history
of a job as a plain table, the claim's query plan and the work one claim does, and the
notebook's language.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from ..backends.sqlite import statements as sql
from ..job import DEFAULT_QUEUE, Event, Job
from ..queue import Queue
from ..words import LANGS, check_lang, number, render

T = TypeVar("T")

LANGUAGES = LANGS  # the lessons speak every language leaselab speaks


def scratch(lesson: str) -> Path:
    """A fresh temporary folder for one lesson's databases; remove it with ``cleanup``."""
    return Path(tempfile.mkdtemp(prefix=f"leaselab-{lesson}-"))


def cleanup(folder: Path) -> bool:
    """Delete a folder made by ``scratch``; True once it is gone."""
    shutil.rmtree(folder, ignore_errors=True)
    return not Path(folder).exists()


# Runs beside a kernel and removes a folder once the kernel is gone, however it went:
# nbval and a hard restart kill the kernel, so its atexit handlers never run.
_JANITOR = """
import os, shutil, sys, time
parent, folder = int(sys.argv[1]), sys.argv[2]
while os.getppid() == parent:
    time.sleep(0.25)
time.sleep(2.0)  # the folder's workers see the same death within half a second and exit
shutil.rmtree(folder, ignore_errors=True)
"""


def cleanup_at_exit(folder: Path, *closers: object) -> None:
    """When the kernel ends, ``close()`` or ``shutdown()`` each of ``closers``, then remove ``folder``.

    For a playground that must outlive "Run All": nothing is left behind once the
    reader is done and the kernel stops, even when the kernel is killed rather than
    shut down (then the workers exit on their own and a small watcher removes the folder).
    """

    def run() -> None:
        for closer in closers:
            for method in ("close", "shutdown"):
                try:
                    getattr(closer, method, lambda: None)()
                except Exception:  # at exit there is no one left to tell
                    pass
        cleanup(folder)

    atexit.register(run)
    subprocess.Popen(
        [sys.executable, "-c", _JANITOR, str(os.getpid()), str(folder)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def language(folder: str | os.PathLike | None = None) -> str:
    """The lesson's language: the name of the notebook's folder (``en`` or ``ru``), ``en`` elsewhere."""
    name = Path(folder if folder is not None else os.getcwd()).name
    return name if name in LANGUAGES else "en"


# What a lesson says when a wait runs out; ``what`` is a lesson text in the same language
# (in Russian, in the genitive: «захвата задачи воркером w1»).
TIMED_OUT = {"en": "waited {timeout:g} s for {what}", "ru": "за {timeout:g} с так и не дождались {what}"}


def wait_until(
    condition: Callable[[], T],
    timeout: float = 90.0,  # a waiting lesson must hold on a loaded machine: the kernel decides, not the clock
    interval: float = 0.05,
    what: str = "the condition",
    lang: str | None = None,
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that; ``TimeoutError`` after ``timeout``.

    The error is in ``lang``; by default in the lesson's language (``language()``, the
    notebook's folder), so a Russian lesson's timeout reads wholly in Russian.
    """
    lang = language() if lang is None else lang
    check_lang(lang)
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(render(TIMED_OUT[lang], lang, timeout=timeout, what=what))
        time.sleep(interval)


HISTORY_WORDS = {"en": ("job", "attempt", "(no events)", "s"), "ru": ("задача", "попытка", "(событий нет)", " с")}
# The details the queue stores in English, as a Russian lesson says them.
STORED_DETAILS_RU = (
    (re.compile(r"^(\w+) refused: token no longer holds the job$"), r"\1: отклонено, у задачи уже другой токен"),
    (re.compile(r"^lease expired$"), "аренда истекла"),
    # Whole seconds, as the lessons set them: a fraction would keep its point (0.5 с).
    (re.compile(r"^ran past its timeout of (\d+)s$"), r"не уложилась в тайм-аут \1 с"),
    (
        re.compile(r"^reported no progress for (\d+)s \(its beat_timeout\)$"),
        r"\1 с не сообщала о продвижении (её beat_timeout)",
    ),
)


def stored_detail(detail: str | None, lang: str = "en") -> str | None:
    """A detail the queue stores in English (an event's, a job's ``last_error``), as ``lang`` says it.

    The history table and any line that prints a stored error use this, so a Russian lesson
    shows one stored error in one language. Details it does not know stay as stored.
    """
    check_lang(lang)
    if lang == "ru" and detail:
        for pattern, russian in STORED_DETAILS_RU:
            detail = pattern.sub(russian, detail)
    return detail


def history(events: Iterable[Event], start: float | None = None, times: bool = True, lang: str = "en") -> str:
    """The events as a table: seconds since ``start`` (the first event by default), job, kind, attempt, worker.

    Event kinds and worker names are the database's own words; the rest is in ``lang``,
    numbers too (``0,50 с`` in Russian).
    """
    check_lang(lang)
    job_word, attempt_word, empty, seconds = HISTORY_WORDS[lang]
    events = list(events)
    if not events:
        return empty
    t0 = events[0].at if start is None else start
    lines = []
    for e in events:
        when = f"{number(e.at - t0, '7.2f', lang)}{seconds}  " if times else ""
        detail = f"  {stored_detail(e.detail, lang)}" if e.detail else ""
        lines.append(
            f"{when}{job_word} {e.job_id:<3} {e.kind:<10} {attempt_word} {e.attempt}  {e.worker or '-'}{detail}"
        )
    return "\n".join(lines)


def claim_plan(queue: Queue) -> list[str]:
    """What SQLite plans to do for the claim (``EXPLAIN QUERY PLAN``), one line per step."""
    params = {"now": 0.0, "lease_until": 0.0, "worker": "plan", "token": "plan", "queue": DEFAULT_QUEUE}
    with sqlite3.connect(queue.path) as conn:
        rows = conn.execute("EXPLAIN QUERY PLAN " + sql.CLAIM, params).fetchall()
    conn.close()
    return [row[-1] for row in rows]


def claim_steps(queue: Queue, worker: str = "lesson", lease: float = 30.0) -> tuple[int, Job | None]:
    """Claim one job and count the SQLite virtual-machine steps it took: work done, not time, so it is
    the same on any machine with the same SQLite build (another version may plan or count otherwise).
    Returns (steps, the claimed job or None)."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0  # carry on

    conn = queue.backend.connection  # type: ignore[attr-defined]  # a SQLite queue's; the claim must run on the queue's own connection to be the real one
    conn.set_progress_handler(count, 1)
    try:
        job = queue.claim(worker, lease)
    finally:
        conn.set_progress_handler(None, 1)
    return steps, job
