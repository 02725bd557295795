"""Every line ``leaselab chaos`` prints of its own (the checker's report has its own words), in English and Russian.

``text("seed", "ru", seed=7)`` looks one up; a test checks that both languages have the same keys.
"""

from __future__ import annotations

from .. import words

STRINGS: dict[str, dict[str, str]] = {
    "en": {
        "seed": "chaos seed {seed} (the same faults at the same offsets again: --seed {seed})",
        "schedule": "schedule: {n} {n|fault|faults} over {seconds:g}s on {workers} {workers|worker|workers}, lease "
        "{lease:g}s",
        "server": "a throw-away PostgreSQL server on 127.0.0.1:{port}, removed at the end",
        "progress": "{elapsed:6.1f}s  jobs done {done}/{total}  faults {faults}{detail}",
        "draining": "faults over; waiting up to {seconds:g}s for the queue to drain",
        "not_drained": "the queue did not drain within {seconds:g}s: {pending} pending, {running} running",
        "missing": "{n} acknowledged {n|enqueue is|enqueues are} missing from the jobs table",
        "summary": "{faults} {faults|fault|faults} applied{detail}; {workers} worker {workers|process|processes} in "
        "all, {dropped} {dropped|reply|replies} dropped",
        "hits": "of {faults} {faults|fault|faults}, {hit} hit a running attempt",
        "toothless": "every promise held, but no fault hit a running attempt: this run proved nothing about faults "
        "({tally})",
        "toothless_no_faults": "every promise held, but no fault was applied: this run proved nothing about faults "
        "({tally})",
        "missed": "{at:6.2f}s  {fault} {worker}: not applied ({why})",
        "interrupted": "interrupted: every worker stopped, the throw-away server removed",
        "kill": "kill {worker} (SIGKILL; a new worker takes its place)",
        "pause": "pause {worker} for {lasts:.2f}s (SIGSTOP past the lease, then SIGCONT)",
        "partition": "cut {worker} off the server for {lasts:.2f}s, then heal",
        "drop-reply": "drop the reply to {worker}'s next statement (it runs; the answer never comes)",
        "clock": "jump {worker}'s clock by {jump:+.2f}s for {lasts:.2f}s",
        "server-crash": "crash the server, down {lasts:.2f}s, then recover",
        "failover": "fail over once the workers were told of more: stop the primary at once, promote the standby, "
        "copy a new standby",
        "replicated": "a throw-away PostgreSQL primary on 127.0.0.1:{primary} and its standby on 127.0.0.1:{standby}, "
        "{replication} replication{held}, removed at the end",
        "replication_sync": "synchronous",
        "replication_async": "asynchronous",
        "held": " (the standby held behind before each failover)",
        "proof_after": "under a freeze after the payment",
        "proof_before": "under a crash before the payment",
        "proof_right": (
            "Right: under a freeze after the payment and a crash before it the checker found no "
            "anomaly, and each of the {n} {n|account|accounts} got {amount} exactly once"
        ),
        "proof_wrong": "Not yet: {detail}",
        "proof_money": "{where}, account {account} got {got}, not {want}",
        "proof_budget": "{where}, the jobs took {n} {n|attempt|attempts}, over the budget of {budget}",
        "proof_not_drained": "{where}, the queue did not drain: the handler never finishes some job",
        "proof_look_none": "the handler does not look in the ledger (ledger.entries()) before it pays",
        "proof_look_where": (
            'the freeze, gates.fault_point(job, "after"), must come after the look (ledger.entries()) '
            "and before the payment (ledger.deposit); in your copy it does not"
        ),
        "proof_look_caught": (
            "Right: frozen between its look and its payment, attempt 1 paid after attempt 2 had paid and "
            "finished the job: account a1 got {got}, not {want}. Neither of the grade's faults strikes there, "
            "which is why the grade called this handler right"
        ),
        "proof_look_missed": (
            "frozen between its look and its payment, the handler still paid account a1 {got} in all: "
            "does it pay only when the look found no row?"
        ),
        "proof_fault_at": 'MY_FAULT_AT must be "before" or "after" (the payment), not {at}',
        "proof_fault_syntax": "Python cannot read your fault: {error}",
        "proof_fault_none": "your fault does not call gates.freeze_until_done_by_another(job): write it in MY_FAULT",
        "proof_fault_every": (
            "your fault does not look at job.attempts, so it would freeze every attempt and none could finish "
            "the job: let it strike the first attempt only (job.attempts == 1)"
        ),
        "proof_fault_missed": (
            "with {name} your fault never struck: no job ran a second attempt. Does it freeze the first "
            "attempt of a job the trial has (jobs 1 to 4)?"
        ),
        "proof_fault_once": "{name}: {n|job|jobs} {jobs} ran again, and each account got {amount} exactly once",
        "proof_fault_broken": "{name}: {n|job|jobs} {jobs} ran again, and account {account} got {got}, not {want}",
        "proof_fault_breaks": "Your fault breaks: {names}",
        "proof_fault_holds": "Your fault breaks none of them",
        "label_kill": "kill",
        "label_pause": "pause",
        "label_partition": "partition",
        "label_drop-reply": "drop-reply",
        "label_clock": "clock",
        "label_server-crash": "server-crash",
        "label_failover": "failover",
    },
    "ru": {
        "seed": "зерно хаоса {seed} (те же сбои в те же моменты ещё раз: --seed {seed})",
        "schedule": "расписание: {n} {n|сбой|сбоя|сбоев} за {seconds:g} с на {workers} "
        "{workers|воркере|воркерах|воркерах}, аренда {lease:g} с",
        "server": "одноразовый сервер PostgreSQL на 127.0.0.1:{port}, в конце он будет удалён",
        "progress": "{elapsed:6.1f} с  выполнено задач {done}/{total}  сбоев {faults}{detail}",
        "draining": "сбои закончились; ждём до {seconds:g} с, пока очередь опустеет",
        "not_drained": "очередь не опустела за {seconds:g} с: ожидают {pending}, выполняются {running}",
        "missing": "в таблице jobs нет подтверждённых постановок в очередь: {n}",
        "summary": "применено сбоев: {faults}{detail}; всего процессов-воркеров {workers}, потеряно ответов {dropped}",
        "hits": "из {faults} {faults|сбоя|сбоев|сбоев} на выполняющуюся попытку {hit|пришёлся|пришлись|пришлось} {hit}",
        "toothless": "все обещания сдержаны, но ни один сбой не пришёлся на выполняющуюся попытку: о сбоях этот "
        "прогон ничего не доказал ({tally})",
        "toothless_no_faults": "все обещания сдержаны, но не было применено ни одного сбоя: о сбоях этот прогон "
        "ничего не доказал ({tally})",
        "missed": "{at:6.2f} с  {fault} {worker}: не применён ({why})",
        "interrupted": "прервано: все воркеры остановлены, одноразовый сервер удалён",
        "kill": "убить {worker} (SIGKILL; его место займёт новый воркер)",
        "pause": "заморозить {worker} на {lasts:.2f} с (SIGSTOP дольше аренды, затем SIGCONT)",
        "partition": "отрезать {worker} от сервера на {lasts:.2f} с, затем вернуть связь",
        "drop-reply": "потерять ответ на следующий запрос {worker} (запрос выполнится, ответ не придёт)",
        "clock": "сдвинуть часы {worker} на {jump:+.2f} с на {lasts:.2f} с",
        "server-crash": "обрушить сервер на {lasts:.2f} с, затем поднять",
        "failover": "переключиться на реплику, когда воркерам сообщат ещё о чём-то: немедленно остановить основной "
        "сервер, повысить реплику, скопировать новую",
        "replicated": "одноразовый основной сервер PostgreSQL на 127.0.0.1:{primary} и его реплика на "
        "127.0.0.1:{standby}, репликация {replication}{held}, в конце они будут удалены",
        "replication_sync": "синхронная",
        "replication_async": "асинхронная",
        "held": " (перед каждым переключением реплика отстаёт)",
        "proof_after": "при заморозке после платежа",
        "proof_before": "при падении перед платежом",
        "proof_right": (
            "Верно: и при заморозке после платежа, и при падении перед ним ревизор не нашёл "
            "аномалий, и каждый из {n} {n|счёта|счетов|счетов} получил {amount} ровно один раз"
        ),
        "proof_wrong": "Пока нет: {detail}",
        "proof_money": "{where} счёт {account} получил {got}, а не {want}",
        "proof_budget": "{where} на задачи ушло {n} {n|попытка|попытки|попыток} при бюджете {budget}",
        "proof_not_drained": "{where} очередь не опустела: какую-то задачу обработчик так и не завершает",
        "proof_look_none": "обработчик не ищет строку в реестре (ledger.entries()), прежде чем платить",
        "proof_look_where": (
            'заморозка, gates.fault_point(job, "after"), должна стоять после поиска (ledger.entries()) '
            "и перед платежом (ledger.deposit), а в вашей копии это не так"
        ),
        "proof_look_caught": (
            "Верно: попытка 1, замороженная между поиском и платежом, заплатила уже после того, как "
            "попытка 2 заплатила и завершила задачу: счёт a1 получил {got}, а не {want}. Ни один из сбоев "
            "proof.grade сюда не бьёт, поэтому он и признал обработчик верным"
        ),
        "proof_look_missed": (
            "даже при заморозке между поиском и платежом счёт a1 получил всего {got}: платит ли "
            "обработчик только тогда, когда поиск не нашёл строки?"
        ),
        "proof_fault_at": 'MY_FAULT_AT должно быть "before" или "after" (перед платежом или после), а не {at}',
        "proof_fault_syntax": "Python не может прочитать ваш сбой: {error}",
        "proof_fault_none": "ваш сбой не вызывает gates.freeze_until_done_by_another(job): впишите его в MY_FAULT",
        "proof_fault_every": (
            "ваш сбой не смотрит на job.attempts, значит, он заморозит каждую попытку и ни одна не сможет "
            "завершить задачу: пусть он бьёт только по первой попытке (job.attempts == 1)"
        ),
        "proof_fault_missed": (
            "с {name} ваш сбой так и не сработал: ни одна задача не дошла до второй попытки. Замораживает ли "
            "он первую попытку задачи, которая есть в испытании (с 1 по 4)?"
        ),
        "proof_fault_once": (
            "{name}: повторная попытка была у {n|задачи|задач|задач} {jobs}, и каждый счёт получил {amount} "
            "ровно один раз"
        ),
        "proof_fault_broken": (
            "{name}: повторная попытка была у {n|задачи|задач|задач} {jobs}, и счёт {account} получил {got}, "
            "а не {want}"
        ),
        "proof_fault_breaks": "Ваш сбой ломает: {names}",
        "proof_fault_holds": "Ваш сбой не ломает ни один из них",
        "label_kill": "убийство",
        "label_pause": "заморозка",
        "label_partition": "разрыв сети",
        "label_drop-reply": "потерянный ответ",
        "label_clock": "скачок часов",
        "label_server-crash": "падение сервера",
        "label_failover": "переключение на реплику",
    },
}


def text(key: str, lang: str = "en", **values: object) -> str:
    """The line ``key`` in ``lang``, with ``{placeholders}`` filled from ``values``."""
    return words.line(STRINGS, key, lang, **values)
