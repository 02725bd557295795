"""Every word the checker's report says, in English and Russian.

A sentence is a template filled from an anomaly's facts. A fact named in ``WORDS`` (a
status, a kind of write, a field) is shown in the reader's language; a placeholder named
in ``COUNTED`` is a number with its noun in the right plural (Russian has three forms:
1 задача, 2 задачи, 5 задач). A test checks that both languages have the same keys.
"""

from __future__ import annotations

from typing import Any

from ..words import number, plural

# The name of each anomaly kind, as a report's heading shows it. ``KINDS`` is this dict's keys.
TITLES: dict[str, dict[str, str]] = {
    "en": {
        "lost": "lost",
        "stuck": "stuck",
        "fence_reused": "fence reused",
        "stale_write_accepted": "stale write accepted",
        "overlapping_leases": "overlapping leases",
        "completed_twice": "completed twice",
        "claimed_after_completion": "claimed after completion",
        "false_loss": "false loss",
        "effect_repeated": "effect repeated",
        "history_disagrees": "history disagrees",
        "live_holder_reaped": "live holder reaped",
        "attempts_exceeded": "attempts exceeded",
        "dead_unrun": "dead, never run",
        "specification": "specification broken",
        "timed_out": "timed out",
        "hung": "hung",
        "fence_handed_twice": "fence handed out twice (workers' journals)",
        "acknowledged_lost": "acknowledged outcome lost",
        "split_brain": "split brain: two servers took writes at once (workers' journals)",
    },
    "ru": {
        "lost": "задача потеряна",
        "stuck": "задача застряла",
        "fence_reused": "попытка выдана дважды",
        "stale_write_accepted": "принята устаревшая запись",
        "overlapping_leases": "аренды перекрылись",
        "completed_twice": "двойное завершение",
        "claimed_after_completion": "захват после завершения",
        "false_loss": "ложная потеря аренды",
        "effect_repeated": "действие повторилось",
        "history_disagrees": "история расходится с таблицей",
        "live_holder_reaped": "задачу отняли у живого владельца",
        "attempts_exceeded": "превышено число попыток",
        "dead_unrun": "задача умерла, так и не запустившись",
        "specification": "нарушена спецификация",
        "timed_out": "попытка снята по тайм-ауту",
        "hung": "обработчик завис",
        "fence_handed_twice": "попытка выдана дважды (по журналам подтверждений)",
        "acknowledged_lost": "подтверждённый итог потерян",
        "split_brain": "раздвоение: записи принимали сразу два сервера (по журналам подтверждений)",
    },
}

SENTENCES: dict[str, dict[str, str]] = {
    "en": {
        "lost.gone": "job {job} is gone: its history shows it enqueued, but the jobs table has no row for it",
        "lost.effect_of_gone": "job {job} is gone: a handler recorded an effect for it, but the jobs table has no row "
        "for it",
        "lost.abandoned": (
            "job {job} is still running under a lease that runs {left} s more, though the workers "
            "were idle: no worker is doing it"
        ),
        "stuck.expired": "job {job} is still running under a lease that ran out {ago} s ago: no one took it back",
        "stuck.runnable": "job {job} could run for {ago} s but was never claimed, though the workers were idle",
        "stuck.runnable_again": (
            "job {job} went back to the queue and could run for {ago} s, but was never claimed "
            "again, though the workers were idle"
        ),
        "fence_reused": "job {job}: attempt {attempt} was handed to {claims} (tokens {tokens}): one fence, two holders",
        "journal.fence_twice": (
            "job {job}: the workers' journals show attempt {attempt} handed to {claims} (tokens {tokens}), "
            "and the server's history {server}: one fence, two holders"
        ),
        "journal.completion_lost": (
            "job {job}: worker {worker} was told its completion (attempt {attempt}, token {token}) was written, "
            "but the server has the job {status}"
        ),
        "journal.completion_other": (
            "job {job}: worker {worker} was told its completion (attempt {attempt}, token {token}) was written, "
            "but the server has it completed by token {holder}"
        ),
        "journal.split_brain": (
            "job {job}: the holders of attempt {attempt} (tokens {tokens}) were each told their outcome was "
            "written while the other held it ({overlap} s of overlap): two servers took the queue's writes at once"
        ),
        "stale.token": "job {job}: the queue accepted a {write} from token {token} while token {holder} held the job",
        "stale.unheld": "job {job}: the queue accepted a {write} from token {token} while no one held the job",
        "stale.after_end": "job {job}: the queue accepted a {write} from token {token} after the job was {ended}",
        "overlap.held": "job {job} was claimed by token {token} while token {holder} still held it: two holders at "
        "once",
        "overlap.timed": (
            "job {job}: attempt {attempt} was claimed {early} s before the lease of attempt {prev} ran "
            "out: two holders at once"
        ),
        "completed_twice": "job {job} was completed twice: by token {first}, then again by token {token}",
        "claimed_after.claim": "job {job} was claimed again (attempt {attempt}) after it was {ended}",
        "claimed_after.effect": (
            "job {job}: attempt {attempt} recorded an effect, but attempt {done_by} had already completed the job"
        ),
        "false_loss": (
            "job {job}: a lost lease was recorded for token {token}, yet its attempt {attempt} "
            "{finished}: the history says it lost what it had finished"
        ),
        "effect.repeated": (
            "job {job}: its effect happened {times} (attempts {attempts}); fix: let the store keep it once per "
            "idempotency key (write it under {code}, insert-if-absent), or refuse an older attempt's write"
        ),
        "effect.repeated_key": (
            'job {job}: the effect "{key}" happened {times} (attempts {attempts}); fix: let the store keep the key '
            '"{key}" once (insert-if-absent), or refuse an older attempt\'s write'
        ),
        "disagree.field": "job {job}: its events say the {field} is {expected}, the jobs table says {actual}",
        "disagree.start": "job {job}: its history does not begin with its enqueue",
        "disagree.enqueued_twice": "job {job}: its history enqueues it twice",
        "disagree.numbering": "job {job}: its claims are numbered {claims}, not 1 to {n}",
        "disagree.links": "job {job}: its linked history walks events {walked}, but its events are {expected}",
        "disagree.link_missing": "job {job}: its history links to event {event}, which does not exist",
        "disagree.release_unheld": "job {job} was taken back to the queue (event {event}) while no one held it",
        "disagree.reaped_after_end": "job {job} was taken back to the queue (event {event}) after it was {ended}",
        "disagree.retried_not_dead": "job {job} was retried by hand (event {event}) while it was {was}: "
        "only a dead job can be",
        "disagree.effect_unclaimed": "job {job}: a handler recorded an effect as attempt {attempt}, which was never "
        "claimed",
        "disagree.done_unrun": (
            "job {job} was completed by attempt {attempt}, but that attempt's handler recorded no run"
        ),
        "reaped.live": (
            "job {job}: attempt {attempt} was taken back {early} s before the lease its last renewal wrote ran out"
        ),
        "attempts.row": "job {job} has {attempts} attempts, more than its max_attempts of {max}",
        "attempts.event": "job {job}: event {event} records attempt {attempt}, beyond its max_attempts of {max}",
        "dead_unrun": (
            "job {job} died after {after_attempts}, but its handler never ran (claimed by {workers}, "
            "none of them killed)"
        ),
        "timed_out.timeout": (
            "job {job}: attempt {attempt} ran past its timeout of {seconds} s, and its worker gave it up: its "
            "handler may hang"
        ),
        "timed_out.progress": (
            "job {job}: attempt {attempt} reported no progress for {seconds} s, and its worker gave it up: its "
            "handler may hang"
        ),
        "hung.running": (
            "job {job} has been running attempt {attempt} for {ago} s ({beats}), longer than the {max_run} s "
            "allowed: its worker lives, but its handler may hang; give the job a timeout"
        ),
    },
    "ru": {
        "lost.gone": "задача {job} пропала: по истории её поставили в очередь, а в таблице задач её нет",
        "lost.effect_of_gone": "задача {job} пропала: обработчик записал для неё действие, а в таблице задач её нет",
        "lost.abandoned": (
            "задача {job} всё ещё числится в работе (аренда истечёт через {left} с), хотя воркеры "
            "простаивали: её никто не выполняет"
        ),
        "stuck.expired": (
            "задача {job} всё ещё числится в работе, хотя её аренда истекла {ago} с назад: "
            "её так и не вернули в очередь"
        ),
        "stuck.runnable": (
            "задачу {job} можно было запускать уже {ago} с, но её так и не захватили, хотя воркеры простаивали"
        ),
        "stuck.runnable_again": (
            "задача {job} вернулась в очередь, и её можно было запускать уже {ago} с, но повторно "
            "её так и не захватили, хотя воркеры простаивали"
        ),
        "fence_reused": (
            "задача {job}: попытку {attempt} получили {claims} (токены {tokens}) — один номер попытки у двух владельцев"
        ),
        "journal.fence_twice": (
            "задача {job}: по журналам подтверждений попытку {attempt} получили {claims} (токены {tokens}), "
            "а в истории сервера {server} — один номер попытки у двух владельцев"
        ),
        "journal.completion_lost": (
            "задача {job}: воркеру {worker} подтвердили запись завершения (попытка {attempt}, токен {token}), "
            "но на сервере задача в статусе «{status}»"
        ),
        "journal.completion_other": (
            "задача {job}: воркеру {worker} подтвердили запись завершения (попытка {attempt}, токен {token}), "
            "но на сервере её завершил токен {holder}"
        ),
        "journal.split_brain": (
            "задача {job}: обоим владельцам попытки {attempt} (токены {tokens}) подтвердили запись итога, "
            "пока ею владел другой (перекрытие {overlap} с): два сервера принимали записи очереди одновременно"
        ),
        "stale.token": "задача {job}: очередь приняла {write} от токена {token}, хотя задачей владел токен {holder}",
        "stale.unheld": "задача {job}: очередь приняла {write} от токена {token}, когда задачей никто не владел",
        "stale.after_end": "задача {job}: очередь приняла {write} от токена {token}, когда задача уже {ended}",
        "overlap.held": (
            "задачу {job} захватил токен {token}, пока ею ещё владел токен {holder}: у задачи два владельца сразу"
        ),
        "overlap.timed": (
            "задача {job}: попытку {attempt} захватили за {early} с до конца аренды попытки {prev}: "
            "у задачи два владельца сразу"
        ),
        "completed_twice": "задачу {job} завершили дважды: сначала токен {first}, затем ещё раз токен {token}",
        "claimed_after.claim": "задачу {job} захватили снова (попытка {attempt}), хотя она уже {ended}",
        "claimed_after.effect": (
            "задача {job}: попытка {attempt} записала действие, когда попытка {done_by} уже завершила задачу"
        ),
        "false_loss": (
            "задача {job}: для токена {token} записана потеря аренды, хотя его попытка {attempt} "
            "{finished}: история утверждает, что он потерял то, что сам довёл до конца"
        ),
        "effect.repeated": (
            "задача {job}: её действие выполнено {times} (попытки {attempts}); как исправить: пусть хранилище "
            "принимает действие один раз на ключ идемпотентности (записывайте его с ключом {code}, вставкой "
            "только при отсутствии) или отклоняет запись устаревшей попытки"
        ),
        "effect.repeated_key": (
            "задача {job}: действие с ключом «{key}» выполнено {times} (попытки {attempts}); как исправить: пусть "
            "хранилище принимает ключ «{key}» один раз (вставка только при отсутствии) или отклоняет запись "
            "устаревшей попытки"
        ),
        "disagree.field": "задача {job}: по событиям {field} — «{expected}», а в таблице задач — «{actual}»",
        "disagree.start": "задача {job}: её история начинается не с постановки в очередь",
        "disagree.enqueued_twice": "задача {job}: в её истории две постановки в очередь",
        "disagree.numbering": "задача {job}: захваты пронумерованы {claims}, а не от 1 до {n}",
        "disagree.links": "задача {job}: связанная история проходит события {walked}, а события задачи — {expected}",
        "disagree.link_missing": "задача {job}: её история ссылается на событие {event}, которого нет",
        "disagree.release_unheld": "задачу {job} вернули в очередь (событие {event}), когда ею никто не владел",
        "disagree.reaped_after_end": "задачу {job} вернули в очередь (событие {event}), когда она уже {ended}",
        "disagree.retried_not_dead": "задачу {job} запустили повторно вручную (событие {event}), хотя она {was}: "
        "так можно только с мёртвой задачей",
        "disagree.effect_unclaimed": (
            "задача {job}: обработчик записал действие от имени попытки {attempt}, которую никто не захватывал"
        ),
        "disagree.done_unrun": (
            "задача {job} завершена попыткой {attempt}, но обработчик этой попытки не записал ни одного запуска"
        ),
        "reaped.live": (
            "задача {job}: попытку {attempt} вернули в очередь за {early} с до того, как истекла аренда, "
            "записанная её последним продлением"
        ),
        "attempts.row": "задача {job}: попыток {attempts}, а допустимо не больше {max}",
        "attempts.event": "задача {job}: событие {event} записано для попытки {attempt}, а допустимо не больше {max}",
        "dead_unrun": (
            "задача {job} умерла после {after_attempts}, но её обработчик так и не запускался "
            "(захватывали: {workers}; никого из них не убивали)"
        ),
        "timed_out.timeout": (
            "задача {job}: попытка {attempt} вышла за тайм-аут в {seconds} с, и воркер её снял: "
            "возможно, обработчик зависает"
        ),
        "timed_out.progress": (
            "задача {job}: попытка {attempt} {seconds} с не сообщала о продвижении, и воркер её снял: "
            "возможно, обработчик зависает"
        ),
        "hung.running": (
            "задача {job} выполняется уже {ago} с (попытка {attempt}, {beats}), дольше допустимых {max_run} с: "
            "воркер жив, но обработчик, похоже, завис; задайте задаче тайм-аут"
        ),
    },
}

# -- the specification's judge of the history (leaselab.sim.judge): one sentence per rule it names ----------

SPEC_SENTENCES: dict[str, dict[str, str]] = {
    "en": {
        "spec.claim_not_pending": (
            "job {job} was claimed (attempt {attempt}) while the specification has it {status}: only a pending "
            "job may be claimed"
        ),
        "spec.claim_before_run_at": "job {job} was claimed (attempt {attempt}) {early} s before its run_at",
        "spec.claim_order": (
            "a claim took jobs {taken} but passed over job {passed}, runnable and ahead of them in claim order "
            "(priority, then run_at, then id)"
        ),
        "spec.claim_attempt": "job {job} was claimed as attempt {attempt}; the specification says attempt {expected}",
        "spec.token_reused": "job {job} was claimed under token {token}, which another claim had already written",
        "spec.write_without_token": "job {job}: the queue accepted a {write} from token {token}, which did not hold it",
        "spec.reap_unheld": "job {job} was taken back by the reaper under token {token}, which did not hold it",
        "spec.reap_early": "job {job}: attempt {attempt} was taken back {early} s before its lease ran out",
        "spec.not_dead": (
            "job {job} used its last attempt ({attempts} of {max}) but went back to the queue instead of dying"
        ),
        "spec.dead_early": "job {job} died after attempt {attempts} of {max}, with attempts left",
        "spec.refused_holder": "job {job}: a write from token {token} was refused while that token still held the job",
        "spec.retried_not_dead": "job {job} was retried by hand while it was {status}: only a dead job can be",
        "spec.cancelled_finished": (
            "job {job} was cancelled after it was {status}: only a pending or running job can be"
        ),
        "spec.table": "job {job}: the jobs table says the {field} is {actual}, the specification says {expected}",
    },
    "ru": {
        "spec.claim_not_pending": (
            "задачу {job} захватили (попытка {attempt}), хотя по спецификации её статус — «{status}»: захватить "
            "можно только ждущую задачу"
        ),
        "spec.claim_before_run_at": "задачу {job} захватили (попытка {attempt}) за {early} с до её времени запуска",
        "spec.claim_order": (
            "захват взял задачи {taken}, но пропустил задачу {passed}: она была готова к запуску и шла раньше них "
            "в порядке захвата (приоритет, затем время запуска, затем номер)"
        ),
        "spec.claim_attempt": "задачу {job} захватили как попытку {attempt}, а по спецификации это попытка {expected}",
        "spec.token_reused": "задачу {job} захватили с токеном {token}, который уже записал другой захват",
        "spec.write_without_token": (
            "задача {job}: очередь приняла {write} от токена {token}, хотя задача ему не принадлежала"
        ),
        "spec.reap_unheld": "задачу {job} вернули в очередь по токену {token}, хотя задача ему не принадлежала",
        "spec.reap_early": "задача {job}: попытку {attempt} вернули в очередь за {early} с до конца её аренды",
        "spec.not_dead": (
            "задача {job} исчерпала попытки ({attempts} из {max}), но вместо того чтобы умереть, вернулась в очередь"
        ),
        "spec.dead_early": "задача {job} умерла после попытки {attempts} из {max}, хотя попытки ещё оставались",
        "spec.refused_holder": (
            "задача {job}: запись от токена {token} отклонена, хотя задача всё ещё принадлежала этому токену"
        ),
        "spec.retried_not_dead": (
            "задачу {job} запустили повторно вручную, когда её статус был «{status}»: так можно только с мёртвой"
        ),
        "spec.cancelled_finished": (
            "задачу {job} отменили, когда её статус был «{status}»: отменить можно только ждущую или работающую"
        ),
        "spec.table": "задача {job}: в таблице задач {field} — «{actual}», а по спецификации — «{expected}»",
    },
}
for _lang, _sentences in SPEC_SENTENCES.items():
    SENTENCES[_lang].update(_sentences)

# Facts shown in the reader's language: fact name -> its value -> the words.
WORDS: dict[str, dict[str, dict[str, str]]] = {
    "en": {
        "write": {
            "heartbeat": "heartbeat",
            "completed": "completion",
            "failed": "failure",
            "timed_out": "timeout",
            "released": "hand-back",
            "reaped": "reap",
            "claimed": "claim",
            "cancelled": "cancel",
        },
        "ended": {"completed": "done", "dead": "dead", "cancelled": "cancelled"},
        "was": {"running": "running", "pending": "pending", "completed": "done"},
        "finished": {
            "completed": "completed the job",
            "failed": "failed the job",
            "timed_out": "gave the job up at its timeout",
            "released": "handed the job back",
        },
        "field": {
            "status": "status",
            "attempts": "attempt count",
            "token": "token",
            "worker": "worker",
            "run_at": "run_at",
        },
        "status": {"pending": "pending", "running": "running", "done": "done", "dead": "dead", "gone": "gone"},
        "server": {
            "none": "shows no claim of it",
            "one": "shows only one of them",
            "both": "shows them all",
        },
    },
    "ru": {
        "write": {
            "heartbeat": "продление аренды",
            "completed": "завершение",
            "failed": "сообщение о сбое",
            "timed_out": "снятие по тайм-ауту",
            "released": "возврат задачи владельцем",
            "reaped": "возврат в очередь",
            "claimed": "захват",
            "cancelled": "отмену",
        },
        "ended": {"completed": "была выполнена", "dead": "была признана мёртвой", "cancelled": "была отменена"},
        "was": {"running": "была в работе", "pending": "ждала запуска", "completed": "была выполнена"},
        "finished": {
            "completed": "успешно завершила задачу",
            "failed": "сама закончила задачу сбоем",
            "timed_out": "была снята по тайм-ауту",
            "released": "закончилась возвратом задачи в очередь",
        },
        "field": {
            "status": "статус",
            "attempts": "число попыток",
            "token": "токен",
            "worker": "воркер",
            "run_at": "время запуска",
        },
        "status": {"pending": "ждёт", "running": "в работе", "done": "готово", "dead": "мёртвая", "gone": "удалена"},
        "server": {
            "none": "нет ни одного её захвата",
            "one": "есть только один из них",
            "both": "есть они все",
        },
    },
}

# Numbers said with their noun: placeholder -> (fact, forms). English forms: (one, many);
# Russian: (one, few, many), as in 1 задача, 2 задачи, 5 задач.
COUNTED: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {
    "en": {
        "times": ("n", ("time", "times")),
        "claims": ("n", ("claim", "claims")),
        "after_attempts": ("attempts", ("attempt", "attempts")),
        "jobs": ("jobs", ("job", "jobs")),
        "repeated_runs": ("repeated_runs", ("repeated run", "repeated runs")),
        "refused_zombies": ("refused_zombies", ("zombie refused", "zombies refused")),
        "anomalies": ("anomalies", ("anomaly", "anomalies")),
        "waiting": ("waiting", ("job still waits for its time", "jobs still wait for their time")),
        "more_shown": ("more", ("more of this kind is", "more of this kind are")),
        "beats": ("beats", ("heartbeat", "heartbeats")),
    },
    "ru": {
        "times": ("n", ("раз", "раза", "раз")),
        "claims": ("n", ("разный захват", "разных захвата", "разных захватов")),
        "after_attempts": ("attempts", ("попытки", "попыток", "попыток")),  # после 1 попытки, после 2 попыток
        "jobs": ("jobs", ("задача", "задачи", "задач")),
        "repeated_runs": ("repeated_runs", ("повторный запуск", "повторных запуска", "повторных запусков")),
        "refused_zombies": ("refused_zombies", ("зомби получил отказ", "зомби получили отказ", "зомби получили отказ")),
        "anomalies": ("anomalies", ("аномалия", "аномалии", "аномалий")),
        "waiting": (
            "waiting",
            ("задача ещё ждёт своего времени", "задачи ещё ждут своего времени", "задач ещё ждут своего времени"),
        ),
        "more_shown": (
            "more",
            ("аномалия этого вида не показана", "аномалии этого вида не показаны", "аномалий этого вида не показано"),
        ),
        "beats": ("beats", ("продление аренды", "продления аренды", "продлений аренды")),
    },
}

# The report's own lines.
REPORT: dict[str, dict[str, str]] = {
    "en": {
        "clean": "every promise held: {tally}",
        "tally": "{jobs}, {repeated_runs}, {refused_zombies}",
        "broken": "{anomalies} in {jobs}",
        "counts": "attempts {attempts}, reaps {reaps}, refused writes {refused_writes}, effects {effects}",
        "absorbed": "repeated runs whose effect happened once: {repeats_absorbed}",
        "waiting": "{waiting}",
        "lease_unknown": "reaps and overlapping leases were not timed: the lease the workers used is unknown",
        "no_effects": "no effects were recorded, so repeated effects were not looked for",
        "unchecked_broken": "{verdict}; repeated effects were not checked either: no effect was recorded",
        "unchecked": (
            "{verdict}; but repeated effects were NOT checked: no effect was recorded (call "
            "leaselab.check.record_effect(job, key=...) in the handler once its effect took hold, and give "
            "check --effects FILE; chaos names the file in $LEASELAB_EFFECTS)"
        ),
        "spec_unordered": (
            "the specification did not judge the history: a server numbers its events as they are written, not "
            "as they commit"
        ),
        "job_none": "no job",
        "by_kind": "by kind: {kinds}",
        "kind_total": "{title} {n}",
        "more": "… {more_shown} not shown ({title}; leaselab check --all shows every one)",
        "spec_too_long": (
            "the specification did not judge the history: it reads a history whole, in order, and this one is "
            "too long for that"
        ),
    },
    "ru": {
        "clean": "все обещания сдержаны: {tally}",
        "tally": "{jobs}, {repeated_runs}, {refused_zombies}",
        "broken": "найдено аномалий: {anomalies_n} (всего {jobs})",
        "counts": "попыток: {attempts}, возвратов в очередь: {reaps}, отклонённых записей: {refused_writes}, "
        "записанных действий: {effects}",
        "absorbed": "повторных запусков, чьё действие случилось один раз: {repeats_absorbed}",
        "waiting": "{waiting}",
        "lease_unknown": (
            "возвраты в очередь и перекрытие аренд не проверены по времени: неизвестно, "
            "с какой арендой работали воркеры"
        ),
        "no_effects": "действия обработчиков не записывались, поэтому их повторы не искали",
        "unchecked_broken": "{verdict}; повторы действий тоже не проверялись: ни одно действие не записано",
        "unchecked": (
            "{verdict}; но повторы действий НЕ проверялись: ни одно действие не записано (вызывайте "
            "leaselab.check.record_effect(job, key=...) в обработчике сразу после действия и передайте check "
            "--effects ФАЙЛ; chaos называет файл в $LEASELAB_EFFECTS)"
        ),
        "spec_unordered": (
            "историю не сверяли со спецификацией: сервер нумерует события по мере записи, а не в порядке фиксации"
        ),
        "job_none": "без задачи",
        "by_kind": "по видам: {kinds}",
        "kind_total": "{title} — {n}",
        "more": "… ещё {more_shown} ({title}; все покажет leaselab check --all)",
        "spec_too_long": (
            "историю не сверяли со спецификацией: спецификация читает историю целиком и по порядку, "
            "а эта история для этого слишком длинная"
        ),
    },
}


def counted(lang: str, n: int, forms: tuple[str, ...]) -> str:
    """``n`` with its noun: ``counted("ru", 3, ("задача", "задачи", "задач"))`` is ``"3 задачи"``."""
    return f"{n} {plural(n, forms, lang)}"


def fill(template: str, lang: str, facts: dict[str, Any]) -> str:
    """``template`` with ``facts`` put in: words translated, numbers counted, seconds to one decimal."""
    values: dict[str, Any] = {}
    for name, value in facts.items():
        # A status compared between the events and the table is a status word too.
        words = (
            WORDS[lang]["status"]
            if name in ("expected", "actual") and facts.get("field") == "status"
            else WORDS[lang].get(name)
        )
        if words is not None and value in words:
            value = words[value]
        elif isinstance(value, float):
            value = number(value, ".1f" if abs(value) >= 0.1 or value == 0 else ".3f", lang)
        elif isinstance(value, (list, tuple)):
            value = ", ".join(map(str, value))
        values[name] = value
    for placeholder, (fact, forms) in COUNTED[lang].items():
        if fact in facts and isinstance(facts[fact], int):
            values[placeholder] = counted(lang, facts[fact], forms)
    return template.format(**values)
