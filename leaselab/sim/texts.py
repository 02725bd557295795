"""Every line ``leaselab simulate`` prints, in English and Russian: its report, its errors, and each step of a
schedule (the world's trace, read back by ``leaselab.sim.report`` and said again in the reader's language).

``text("found", "ru", ...)`` looks one up; a test checks that both languages have the same keys.
"""

from __future__ import annotations

from typing import Any

from .. import words

STRINGS: dict[str, dict[str, str]] = {
    "en": {
        "error": "error",
        # the report
        "scenario": "scenario: {workers} {workers|worker|workers}, {jobs} {jobs|job|jobs}, lease {lease:g} s, "
        "faults {faults} (at most {most} per schedule), seed {seed}",
        "portfolio": "{n} scenarios take turns (schedule i runs scenario i mod {n}, with seed {seed} + i):",
        "scenario_each": "  {workers} {workers|worker|workers} with {slots} {slots|slot|slots} each, {jobs} "
        "{jobs|job|jobs}, {clocks}, lease {lease:g} s, {attempts} {attempts|attempt|attempts} a job, faults "
        "{faults} (at most {most} per schedule)",
        "clocks_apart": "clocks apart by up to {skew:g}%",
        "clocks_even": "clocks that agree",
        "no_faults": "none",
        "mutant": "planted mutant: {name}",
        "handler": "your handler {spec} runs {work:g} lease-seconds of virtual time per job; its effects are recorded",
        "clean": "every promise held: {schedules:,} {schedules|schedule|schedules}, {steps:,} {steps|step|steps}, "
        "{virtual:,.1f} s of virtual time simulated in {elapsed:.1f} s",
        "clean_exhaustive": "every promise held: {states:,} distinct {states|state|states} explored in {schedules:,} "
        "{schedules|schedule|schedules} ({elapsed:.1f} s)",
        "exhaustive_whole": "that is every schedule of this scope",
        "exhaustive_cut": "stopped at the limit of {limit:,} distinct {limit|state|states}: not every schedule of this "
        "scope was explored (raise it with --schedules)",
        "found": "found: {title}, in schedule {schedules:,} ({elapsed:.1f} s)",
        "found_exhaustive": "found: {title}, after {states:,} distinct {states|state|states} ({elapsed:.1f} s)",
        "shrunk": "shrunk to {actions} {actions|action|actions} with {faults} {faults|fault|faults} "
        "(from {before} {before|action|actions})",
        "steps": "steps:",
        "broken": "broken: {message}",
        "at_ms": "{ms:6d} ms",
        "timeline": "timeline (virtual seconds, one row per worker):",
        "legend": "[1·2] job 1, attempt 2   X crash   P pause   C link cut   D call held in flight   L reply lost   "
        "! the promise broken",
        "saved": "witness saved to {path}; replay it with: leaselab simulate --replay {path}",
        "replaying": "replaying the witness {path} (saved by leaselab {version})",
        "replay_fails": "it still fails: {title}",
        "replay_fixed": "it no longer fails: every promise held, so the bug is fixed",
        "replay_same": "the trace is the saved one, step for step",
        "replay_differs": "the trace differs from the saved one: the code changed since the witness was saved",
        "progress": "{elapsed:5.1f} s  {schedules:,} {schedules|schedule|schedules}  {steps:,} {steps|step|steps}",
        "mutants": "the shipped mutants (plant one with --mutant NAME):",
        # usage errors
        "bad_whole": "{option} must be a whole number of at least {least}, got '{value}'",
        "bad_seconds": "{option} must be a number of seconds above 0, got '{value}'",
        "unknown_fault": "--faults: no fault named '{fault}'; the faults are {known}",
        "needs_apsw": "--faults: a power cut needs APSW (pip install 'leaselab[lab]'): the queue goes on a disk "
        "that forgets what was not synced",
        "together": "{first} and {second} cannot be given together",
        "unknown_mutant": "no mutant named '{name}'; the mutants are {known}",
        "replay_missing": "no witness file at {path}",
        "replay_unreadable": "cannot read the witness file {path}: it is a folder, or not readable text",
        "replay_not_json": "{path} is not a witness file: not JSON (line {line})",
        "replay_field": "{path} is not a witness file: its field '{field}' is missing or malformed",
        "replay_format": "{path} is a witness of format {got}; this leaselab reads format {want}",
        "handler_form": "--handler must look like module:function, got '{spec}'",
        "handler_import": "--handler {spec}: {error}",
        # a violation's kind, as a heading
        "kind": "the promise '{kind}' broken",
        "kind_rows": "the queue holds other jobs than the specification",
        "kind_wrong_status": "a job's status differs from the specification",
        "kind_wrong_attempts": "a job's attempt count differs from the specification",
        "kind_wrong_token": "a job's token differs from the specification",
        "kind_wrong_worker": "a job's worker differs from the specification",
        "kind_wrong_priority": "a job's priority changed",
        "kind_wrong_max_attempts": "a job's max_attempts changed",
        "kind_wrong_run_at": "a job's run_at differs from the specification (the backoff or the delay)",
        "kind_wrong_lease_until": "a lease ends at another time than the specification says",
        "kind_wrong_result": "a job holds another result than the one written",
        "kind_wrong_outcome": "a job completed by an attempt whose handler did not return",
        "kind_token": "a claim wrote a token that is not its own",
        "kind_token_reused": "one token written by two claims",
        "kind_claim_order": "a claim took a job out of order, or one not yet due",
        "kind_held_by": "a retried claim did not find the jobs its first try took",
        "kind_refused_completion": "a completion refused though its token held the job",
        "kind_refused_failure": "a failure refused though its token held the job",
        "kind_refused_heartbeat": "a heartbeat refused though its token held the job",
        "kind_reap": "the reaper took back other jobs than those whose leases had ended",
        "kind_queue_error": "the queue raised an error on a call the specification allows",
        "kind_lost_on_power_cut": "an acknowledged write lost in a power cut",
        "kind_effect_repeated": "effect repeated (the handler is not idempotent)",
        "kind_fence": "a write accepted from a token that no longer held the job",
        "kind_stuck": "a job stuck, neither done nor dead",
        "kind_effect_without_lease": "an effect written after its lease had ended",
        "kind_needless_rerun": "a job run again though no fault hit its attempt",
        "kind_reaped_own_job": "a live worker's job taken back by its own reaper",
        # a step of the trace: the world's own words, read back (report.STEP_PATTERNS)
        "step_start": "{w} starts",
        "step_hold": "{w} holds job {job} (attempt {attempt})",
        "step_drop": "{w} drops job {job}'s outcome: its lease is lost",
        "step_lease_gone": "{w}'s handler of job {job} finds its lease gone on its own clock",
        "step_raises": "{w}'s handler of job {job} raises",
        "step_returns": "{w}'s handler of job {job} returns",
        "step_completed": "{w}: job {job} completed",
        "step_refused": "{w}: job {job} refused: lease lost",
        "step_failed": "{w}: job {job} failed -> {status}",
        "step_fail_refused": "{w}: job {job}'s failure refused: lease lost",
        "step_beat_refused": "{w}: heartbeat refused for job {job}",
        "step_beat_failed": "{w}: heartbeat failed: {why}",
        "step_reaped": "{w} reaped jobs [{jobs}]",
        "step_transient": "{w}: {call} met a transient fault, retrying in {wait:g}s",
        "step_held": "{w}: {call} sent; held in the network",
        "step_reply_lost": "{w}: the reply to {call} is lost",
        "step_arrives": "{w}: {call} arrives",
        "step_crash": "{w} crashes",
        "step_power": "the power fails: every worker dies and the disk keeps only what was synced",
        "step_pause": "{w} pauses for {seconds:g}s",
        "step_cut": "{w}'s link is cut for {seconds:g}s",
        "step_armed_delay": "{w}'s next call will be held in flight",
        "step_armed_lose": "{w}'s next call will be answered into the void",
        "call_claim": "claim",
        "call_complete": "complete",
        "call_fail": "fail",
        "call_beat": "beat",
        "call_reap": "reap",
        "why_link cut": "link cut",
        "why_reply lost": "reply lost",
    },
    "ru": {
        "error": "ошибка",
        "scenario": "сценарий: {workers} {workers|воркер|воркера|воркеров}, {jobs} {jobs|задача|задачи|задач}, "
        "аренда {lease:g} с, сбои: {faults} (не больше {most} за расписание), зерно {seed}",
        "portfolio": "сценарии идут по очереди ({n}: расписание i берёт сценарий i по модулю {n}, зерно {seed} + i):",
        "scenario_each": "  {workers} {workers|воркер|воркера|воркеров} по {slots} {slots|слоту|слота|слотов}, {jobs} "
        "{jobs|задача|задачи|задач}, {clocks}, аренда {lease:g} с, {attempts} {attempts|попытка|попытки|попыток} "
        "на задачу, сбои: {faults} (не больше {most} за расписание)",
        "clocks_apart": "часы расходятся до {skew:g}%",
        "clocks_even": "часы идут вровень",
        "no_faults": "нет",
        "mutant": "внедрён мутант: {name}",
        "handler": "ваш обработчик {spec} работает {work:g} срока аренды виртуального времени на задачу; его "
        "действия записываются",
        "clean": "все обещания сдержаны: {schedules:,} {schedules|расписание|расписания|расписаний}, {steps:,} "
        "{steps|шаг|шага|шагов}, {virtual:,.1f} с виртуального времени за {elapsed:.1f} с",
        "clean_exhaustive": "все обещания сдержаны: изучено {states:,} {states|различное состояние|различных "
        "состояния|различных состояний} в {schedules:,} {schedules|расписании|расписаниях|расписаниях} "
        "({elapsed:.1f} с)",
        "exhaustive_whole": "это все расписания в этих пределах",
        "exhaustive_cut": "остановлено на пределе в {limit:,} {limit|состояние|состояния|состояний}: изучены не "
        "все расписания в этих пределах (предел поднимает --schedules)",
        "found": "найдено: {title}, в расписании № {schedules:,} ({elapsed:.1f} с)",
        "found_exhaustive": "найдено: {title}, после {states:,} {states|различного состояния|различных состояний|"
        "различных состояний} ({elapsed:.1f} с)",
        "shrunk": "сокращено до {actions} {actions|действия|действий|действий}, из них {faults} "
        "{faults|сбой|сбоя|сбоев} (было {before})",
        "steps": "шаги:",
        "broken": "нарушено: {message}",
        "at_ms": "{ms:6d} мс",
        "timeline": "временная шкала (виртуальные секунды, по дорожке на воркер):",
        "legend": "[1·2] задача 1, попытка 2   X падение   P пауза   C связь отрезана   D вызов задержан в сети   "
        "L ответ потерян   ! обещание нарушено",
        "saved": "свидетельство сохранено в {path}; повторить его: leaselab simulate --replay {path}",
        "replaying": "повтор свидетельства {path} (сохранено leaselab {version})",
        "replay_fails": "ошибка воспроизводится: {title}",
        "replay_fixed": "ошибка больше не воспроизводится: все обещания сдержаны, значит, ошибка исправлена",
        "replay_same": "ход выполнения совпадает с сохранённым шаг в шаг",
        "replay_differs": "ход выполнения отличается от сохранённого: код изменился после сохранения свидетельства",
        "progress": "{elapsed:5.1f} с  {schedules:,} {schedules|расписание|расписания|расписаний}  {steps:,} "
        "{steps|шаг|шага|шагов}",
        "mutants": "мутанты в поставке (внедрить один: --mutant ИМЯ):",
        "bad_whole": "{option} должно быть целым числом не меньше {least}, а не «{value}»",
        "bad_seconds": "{option} должно быть числом секунд больше 0, а не «{value}»",
        "unknown_fault": "--faults: сбоя «{fault}» нет; есть такие сбои: {known}",
        "needs_apsw": "--faults: отключению питания нужен APSW (pip install 'leaselab[lab]'): очередь кладётся на "
        "диск, который забывает всё несинхронизированное",
        "together": "{first} и {second} нельзя указать вместе",
        "unknown_mutant": "мутанта «{name}» нет; есть такие мутанты: {known}",
        "replay_missing": "файла свидетельства {path} нет",
        "replay_unreadable": "не удалось прочитать файл свидетельства {path}: это папка или не текст",
        "replay_not_json": "{path} не файл свидетельства: это не JSON (строка {line})",
        "replay_field": "{path} не файл свидетельства: поля «{field}» нет или оно искажено",
        "replay_format": "{path} — свидетельство в формате {got}; этот leaselab читает формат {want}",
        "handler_form": "--handler задаётся как модуль:функция, а не «{spec}»",
        "handler_import": "--handler {spec}: {error}",
        "kind": "нарушено обещание «{kind}»",
        "kind_rows": "в очереди не те задачи, что в спецификации",
        "kind_wrong_status": "статус задачи расходится со спецификацией",
        "kind_wrong_attempts": "число попыток расходится со спецификацией",
        "kind_wrong_token": "токен задачи расходится со спецификацией",
        "kind_wrong_worker": "воркер задачи расходится со спецификацией",
        "kind_wrong_priority": "у задачи изменился приоритет",
        "kind_wrong_max_attempts": "у задачи изменился max_attempts",
        "kind_wrong_run_at": "run_at задачи расходится со спецификацией (отсрочка или задержка)",
        "kind_wrong_lease_until": "аренда кончается не тогда, когда велит спецификация",
        "kind_wrong_result": "у задачи не тот результат, что был записан",
        "kind_wrong_outcome": "задачу завершила попытка, чей обработчик не вернул результат",
        "kind_token": "захват записал чужой токен",
        "kind_token_reused": "один токен записан двумя захватами",
        "kind_claim_order": "захват взял задачу не по порядку или раньше её срока",
        "kind_held_by": "повторный захват не нашёл задач, взятых первой попыткой",
        "kind_refused_completion": "завершение отвергнуто, хотя токен держал задачу",
        "kind_refused_failure": "запись о неудачной попытке отвергнута, хотя токен держал задачу",
        "kind_refused_heartbeat": "heartbeat отвергнут, хотя токен держал задачу",
        "kind_reap": "reaper вернул не те задачи, чьи аренды истекли",
        "kind_queue_error": "очередь ответила ошибкой на вызов, который спецификация допускает",
        "kind_lost_on_power_cut": "подтверждённая запись пропала при отключении питания",
        "kind_effect_repeated": "действие повторилось (обработчик не идемпотентен)",
        "kind_fence": "принята запись от токена, который задачу уже не держал",
        "kind_stuck": "задача застряла: она не выполнена и не мертва",
        "kind_effect_without_lease": "действие записано после окончания аренды",
        "kind_needless_rerun": "задачу выполнили снова, хотя ни один сбой не задел её попытку",
        "kind_reaped_own_job": "reaper живого воркера вернул в очередь его же задачу",
        "step_start": "{w} запускается",
        "step_hold": "{w} захватил задачу {job} (попытка {attempt})",
        "step_drop": "{w} отбрасывает результат задачи {job}: аренда потеряна",
        "step_lease_gone": "обработчик {w} для задачи {job} видит по своим часам, что аренды уже нет",
        "step_raises": "обработчик {w} для задачи {job} выбрасывает исключение",
        "step_returns": "обработчик {w} для задачи {job} вернул результат",
        "step_completed": "{w}: задача {job} выполнена",
        "step_refused": "{w}: завершение задачи {job} отклонено: аренда потеряна",
        "step_failed": "{w}: задача {job} не удалась -> {status}",
        "step_fail_refused": "{w}: запись ошибки задачи {job} отклонена: аренда потеряна",
        "step_beat_refused": "{w}: heartbeat для задачи {job} отклонён",
        "step_beat_failed": "{w}: heartbeat не прошёл: {why}",
        "step_reaped": "{w} вернул в очередь задачи [{jobs}]",
        "step_transient": "{w}: временный сбой при вызове «{call}», повтор через {wait:g} с",
        "step_held": "{w}: вызов «{call}» отправлен и задержан в сети",
        "step_reply_lost": "{w}: ответ на вызов «{call}» потерян",
        "step_arrives": "{w}: вызов «{call}» дошёл",
        "step_crash": "{w} падает",
        "step_power": "отключается питание: все воркеры гибнут, на диске остаётся только то, что было синхронизировано",
        "step_pause": "{w} замирает на {seconds:g} с",
        "step_cut": "связь {w} с очередью отрезана на {seconds:g} с",
        "step_armed_delay": "следующий вызов {w} будет задержан в сети",
        "step_armed_lose": "ответ на следующий вызов {w} потеряется",
        "call_claim": "захват",
        "call_complete": "завершение",
        "call_fail": "запись ошибки",
        "call_beat": "heartbeat",
        "call_reap": "возврат в очередь",
        "why_link cut": "связь отрезана",
        "why_reply lost": "ответ потерян",
    },
}


def text(key: str, lang: str, **values: Any) -> str:
    """The line ``key`` in ``lang``, filled from ``values`` (numbers and plurals as ``lang`` writes them)."""
    return words.line(STRINGS, key, lang, **values)


def has(key: str) -> bool:
    """True when there is a line named ``key``."""
    return key in STRINGS["en"]
