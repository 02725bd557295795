"""Every line ``leaselab chaos`` prints of its own (the checker's report has its own words), in English and Russian.

``text("seed", "ru", seed=7)`` looks one up; a test checks that both languages have the same keys.
"""

from __future__ import annotations

from ..lab.i18n import check_lang

STRINGS: dict[str, dict[str, str]] = {
    "en": {
        "seed": "chaos seed {seed} (the same faults at the same offsets again: --seed {seed})",
        "schedule": "schedule: {n} faults over {seconds:g}s on {workers} workers, lease {lease:g}s",
        "server": "a throw-away PostgreSQL server on 127.0.0.1:{port}, removed at the end",
        "progress": "{elapsed:6.1f}s  jobs done {done}/{total}  faults {faults}{detail}",
        "draining": "faults over; waiting up to {seconds:g}s for the queue to drain",
        "not_drained": "the queue did not drain within {seconds:g}s: {pending} pending, {running} running",
        "missing": "{n} acknowledged enqueues are missing from the jobs table",
        "summary": "{faults} faults applied{detail}; {workers} worker processes in all, {dropped} replies dropped",
        "missed": "{at:6.2f}s  {fault} {worker}: not applied ({why})",
        "interrupted": "interrupted: every worker stopped, the throw-away server removed",
        "kill": "kill {worker} (SIGKILL; a new worker takes its place)",
        "pause": "pause {worker} for {lasts:.2f}s (SIGSTOP past the lease, then SIGCONT)",
        "partition": "cut {worker} off the server for {lasts:.2f}s, then heal",
        "drop-reply": "drop the reply to {worker}'s next statement (it runs; the answer never comes)",
        "clock": "jump {worker}'s clock by {jump:+.2f}s for {lasts:.2f}s",
        "server-crash": "crash the server, down {lasts:.2f}s, then recover",
        "label_kill": "kill",
        "label_pause": "pause",
        "label_partition": "partition",
        "label_drop-reply": "drop-reply",
        "label_clock": "clock",
        "label_server-crash": "server-crash",
    },
    "ru": {
        "seed": "зерно хаоса {seed} (те же сбои в те же моменты ещё раз: --seed {seed})",
        "schedule": "расписание: {n} сбоев за {seconds:g} с на {workers} воркерах, аренда {lease:g} с",
        "server": "одноразовый сервер PostgreSQL на 127.0.0.1:{port}, в конце он будет удалён",
        "progress": "{elapsed:6.1f} с  выполнено задач {done}/{total}  сбоев {faults}{detail}",
        "draining": "сбои закончились; ждём до {seconds:g} с, пока очередь опустеет",
        "not_drained": "очередь не опустела за {seconds:g} с: ожидают {pending}, выполняются {running}",
        "missing": "{n} подтверждённых постановок в очередь нет в таблице jobs",
        "summary": "применено сбоев: {faults}{detail}; всего процессов-воркеров {workers}, потеряно ответов {dropped}",
        "missed": "{at:6.2f} с  {fault} {worker}: не применён ({why})",
        "interrupted": "прервано: все воркеры остановлены, одноразовый сервер удалён",
        "kill": "убить {worker} (SIGKILL; его место займёт новый воркер)",
        "pause": "заморозить {worker} на {lasts:.2f} с (SIGSTOP дольше аренды, затем SIGCONT)",
        "partition": "отрезать {worker} от сервера на {lasts:.2f} с, затем вернуть связь",
        "drop-reply": "потерять ответ на следующий запрос {worker} (запрос выполнится, ответ не придёт)",
        "clock": "сдвинуть часы {worker} на {jump:+.2f} с на {lasts:.2f} с",
        "server-crash": "обрушить сервер на {lasts:.2f} с, затем поднять",
        "label_kill": "убийство",
        "label_pause": "заморозка",
        "label_partition": "разрыв сети",
        "label_drop-reply": "потерянный ответ",
        "label_clock": "скачок часов",
        "label_server-crash": "падение сервера",
    },
}


def text(key: str, lang: str = "en", **values: object) -> str:
    """The line ``key`` in ``lang``, with ``{placeholders}`` filled from ``values``."""
    line = STRINGS[check_lang(lang)][key]
    return line.format(**values) if values else line
