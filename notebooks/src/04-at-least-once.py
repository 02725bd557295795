# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] tags=["en"]
# # Lesson 4. At-least-once: the handler may run twice
#
# Leases bring every job back after a crash (lesson 1), the single statement gives each
# job to one worker at a time (lesson 2), and fencing keeps zombies from writing to the
# queue (lesson 3). What is left is the gap that no queue can close: a worker that does
# the work — sends the email, moves the money — and dies *before* it tells the queue
# "done". The queue sees only an expired lease, so it gives the job out again, and the
# work is done a second time.
#
# So leaselab promises **at-least-once**: every job is done, some may be done more than
# once. This lesson makes the repeat happen with real processes, then shows two ways to
# make a repeat harmless, and ends with why "exactly once" is not on offer.

# %% [markdown] tags=["ru"]
# # Урок 4. At-least-once: обработчик может выполниться дважды
#
# Аренда возвращает каждую задачу после падения (урок 1), один оператор отдаёт задачу
# только одному воркеру за раз (урок 2), fencing не даёт зомби писать в очередь (урок 3).
# Остаётся зазор, который не закроет ни одна очередь: воркер делает работу — отправляет
# письмо, переводит деньги — и умирает *до того*, как сообщил очереди «готово». Очередь
# видит лишь истёкшую аренду, поэтому отдаёт задачу снова, и работа делается второй раз.
#
# Поэтому leaselab обещает **at-least-once** («хотя бы один раз»): каждая задача будет
# выполнена, некоторые — больше одного раза. В этом уроке мы вызовем повтор на настоящих
# процессах, разберём два способа сделать повтор безвредным и закончим тем, почему
# «ровно один раз» нам не предлагают.

# %%
from leaselab import LeaseLost, ManualClock, Queue, lessons
from leaselab.lab import timeline
from leaselab.lessons import effects
from leaselab.lessons.demo import read_effects
from leaselab.lab.fleet import Fleet

lang = lessons.language()
work = lessons.scratch("04-at-least-once")

# %% [markdown] tags=["en"]
# ## A crash between the effect and `complete`
#
# The demo handler `leaselab.lessons.demo:task` appends one line to an "effects" file when it
# starts: that file is the outside world, where every run leaves a trace. With
# `"crash": 1` the handler kills its own process with `SIGKILL` on the first attempt,
# right after the effect and before the worker can report completion. Two workers,
# 2-second leases.

# %% [markdown] tags=["ru"]
# ## Падение между действием и `complete`
#
# Демонстрационный обработчик `leaselab.lessons.demo:task` при старте дописывает строку в файл
# «эффектов»: этот файл — внешний мир, в котором остаётся след каждого запуска. С
# `"crash": 1` на первой попытке обработчик убивает собственный процесс сигналом
# `SIGKILL` сразу после действия и до того, как воркер успеет сообщить о завершении. Два
# воркера, аренда 2 секунды.

# %% tags=["nbval-ignore-output"]
real = Queue(work / "real.db")
fleet = Fleet(real.path)
effects_file = str(work / "effects.jsonl")
job_id = real.enqueue({"seconds": 0.2, "effects": effects_file, "crash": 1})
for name in ("w1", "w2"):
    fleet.spawn(handler="leaselab.lessons.demo:task", lease=2.0, name=name)
lessons.wait_until(lambda: real.get(job_id).status == "done", what="the job to be done");

# %% tags=["nbval-check-output"]
runs = read_effects(effects_file)
print("status:", real.get(job_id).status, "| attempts:", real.get(job_id).attempts)
print("the handler ran", len(runs), "times for job", job_id, "- attempts", [r["attempt"] for r in runs])
print("workers still alive:", sum(s.state == "running" for s in fleet.status()))

# %% [markdown] tags=["en"]
# Nothing went wrong in the queue: attempt 1 died, its lease expired, the surviving
# worker reaped the job and did it as attempt 2, exactly as lesson 1 promised. Yet the
# effect happened twice. The timeline shows the first attempt cut short by the crash.

# %% [markdown] tags=["ru"]
# В очереди ничего не сломалось: попытка 1 умерла, её аренда истекла, выживший воркер
# забрал задачу и выполнил её второй попыткой, ровно как обещал урок 1. И всё же действие
# случилось дважды. На временной шкале видно, как первую попытку оборвало падение.

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(real.events(), fleet.actions), lang=lang)

# %% [markdown] tags=["en"]
# ## Harmless repeats, way one: an idempotency key
#
# The effect now is a deposit of 10 into an account, in a ledger (a table in its own
# SQLite file, standing for a payment service). The handler `leaselab.lessons.effects:deposit`
# deposits, then crashes on the first attempt. Two jobs: Alice's deposit is a plain
# insert; Bob's carries an **idempotency key**, `job-<id>`, and the ledger ignores a key
# it has already seen. Payment APIs offer exactly this: an `Idempotency-Key` header.
# Three workers, because each first attempt takes a worker down with it.

# %% [markdown] tags=["ru"]
# ## Безвредный повтор, способ первый: ключ идемпотентности
#
# Теперь действие — зачисление 10 на счёт в реестре (таблица в отдельном файле SQLite,
# она изображает платёжный сервис). Обработчик `leaselab.lessons.effects:deposit` зачисляет
# деньги и падает на первой попытке. Две задачи: зачисление Алисе — простая вставка, а у
# зачисления Бобу есть **ключ идемпотентности** `job-<id>`, и реестр игнорирует ключ,
# который уже видел. Платёжные API предлагают ровно это: заголовок `Idempotency-Key`.
# Воркеров три, потому что каждая первая попытка забирает воркера с собой.

# %% tags=["nbval-check-output"]
print(effects.DEPOSIT.strip())
print()
print(effects.DEPOSIT_ONCE.strip())

# %% tags=["nbval-ignore-output"]
pay = Queue(work / "pay.db")
payfleet = Fleet(pay.path)
ledger_file = str(work / "ledger.db")
alice = pay.enqueue({"ledger": ledger_file, "account": "alice", "amount": 10, "keyed": False, "crash": 1})
bob = pay.enqueue({"ledger": ledger_file, "account": "bob", "amount": 10, "keyed": True, "crash": 1})
for name in ("w3", "w4", "w5"):
    payfleet.spawn(handler="leaselab.lessons.effects:deposit", lease=2.0, name=name)
lessons.wait_until(lambda: pay.get(alice).status == pay.get(bob).status == "done", what="both deposits");

# %% tags=["nbval-check-output"]
ledger = effects.Ledger(ledger_file)
print("attempts: alice", pay.get(alice).attempts, "| bob", pay.get(bob).attempts)
print("alice's balance:", ledger.balance("alice"), "(deposited twice)")
print("bob's balance:  ", ledger.balance("bob"), "(the repeat was ignored)")

# %% [markdown] tags=["en"]
# The key must be stable across attempts, so it comes from the job (its id), never from
# the attempt or the clock. And it only helps if the *receiving* side checks it: the key
# moves the duplicate check to where the effect lands.

# %% [markdown] tags=["ru"]
# Ключ должен быть одинаковым во всех попытках, поэтому его берут из задачи (её id), а не
# из номера попытки и не из часов. И помогает он, только если его проверяет *принимающая*
# сторона: ключ переносит проверку на дубль туда, где действие и происходит.

# %% [markdown] tags=["en"]
# ## Way two: the effect in the same transaction as the completion
#
# When the effect is a change to data in the same SQLite file as the queue, there is a
# stronger answer: write the effect and the fenced completion in **one transaction**.
# Then they happen together or not at all. `effects.completing(queue, job)` opens the
# transaction; you run the effect inside the `with` block; on leaving it runs the fenced
# `complete` and commits only if the token still holds the job.
#
# We play it with the manual clock. Attempt 1 (`w1`) deposits and then dies before the
# commit; we raise an exception to stand for the crash, and a real crash does the same,
# since SQLite throws away a transaction that was never committed. Attempt 2 (`w2`)
# freezes and loses its lease. Attempt 3 (`w3`) deposits and completes. Then the frozen
# `w2` wakes and tries to commit its deposit.

# %% [markdown] tags=["ru"]
# ## Способ второй: действие в той же транзакции, что и завершение
#
# Если действие — это изменение данных в том же файле SQLite, где живёт очередь, есть
# ответ надёжнее: записать действие и завершение с проверкой токена **одной транзакцией**.
# Тогда они случаются вместе или не случаются вовсе. `effects.completing(queue, job)`
# открывает транзакцию; действие выполняется внутри блока `with`; на выходе из блока
# выполняется `complete` с проверкой токена, и транзакция фиксируется, только если токен
# всё ещё держит задачу.
#
# Разыграем это на ручных часах. Попытка 1 (`w1`) зачисляет деньги и умирает до COMMIT:
# падение изображает исключение, и настоящее падение даёт то же самое, ведь SQLite
# выбрасывает транзакцию, которую так и не зафиксировали. Попытка 2 (`w2`) замирает и
# теряет аренду. Попытка 3 (`w3`) зачисляет деньги и завершает задачу. Потом замерший
# `w2` просыпается и пытается зафиксировать своё зачисление.

# %% tags=["nbval-check-output"]
clock = ManualClock()
q = Queue(work / "together.db", clock=clock)
ledger_here = effects.Ledger(q.path)          # the ledger table lives in the queue's own file
pay_id = q.enqueue({"account": "carol", "amount": 10})

first = q.claim("w1", lease=10)
try:
    with effects.completing(q, first, result="paid") as tx:
        effects.record_deposit(tx, "carol", 10, job=first)
        raise SystemExit("w1 dies before COMMIT")
except SystemExit as crash:
    print("attempt 1:", crash, "| carol has", ledger_here.balance("carol"))

clock.advance(11); q.reap(); clock.advance(q.backoff.delay(1))
second = q.claim("w2", lease=10)               # w2 freezes here
clock.advance(11); q.reap(); clock.advance(q.backoff.delay(2))
third = q.claim("w3", lease=10)
clock.advance(2)                               # w3 works for two seconds
with effects.completing(q, third, result="paid") as tx:
    effects.record_deposit(tx, "carol", 10, job=third)
print("attempt 3: job", q.get(pay_id).status, "| carol has", ledger_here.balance("carol"))

try:
    with effects.completing(q, second, result="paid") as tx:
        effects.record_deposit(tx, "carol", 10, job=second)
except LeaseLost:
    print("attempt 2 wakes up: LeaseLost, its deposit rolled back | carol has", ledger_here.balance("carol"))
print("ledger:", [(e["account"], e["amount"], e["attempt"]) for e in ledger_here.entries()])

# %% [markdown] tags=["en"]
# Three attempts ran the handler; the money moved once, and the ledger row names the
# attempt that completed the job. Here the job's history tells the same story:

# %% [markdown] tags=["ru"]
# Обработчик запускался три раза, а деньги переведены один раз, и строка реестра называет
# ту попытку, которая завершила задачу. Журнал задачи рассказывает ту же историю:

# %% tags=["nbval-check-output"]
print(lessons.history(q.events(pay_id)))

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(q.events()), lang=lang)

# %% [markdown] tags=["en"]
# ## Why not exactly once?
#
# Look at where the trouble was: between doing the effect and recording that it was
# done. If the effect is recorded first and the process dies before doing it, the job is
# lost: at-most-once. If it is done first and the process dies before recording, it is
# repeated: at-least-once. Some moment always separates the two, unless both live in the
# same transaction, which is possible only when the effect is data in the same database.
# An email, an HTTP call to a bank, a message to another service cannot join a SQLite
# transaction. So the queue chooses the side that never loses a job, and the handler
# makes the repeat harmless: with a key the receiver honours, or with the effect
# committed together with the completion.

# %% [markdown] tags=["ru"]
# ## Почему не «ровно один раз»?
#
# Посмотрите, где была беда: между «сделать действие» и «записать, что оно сделано».
# Если сначала записать, а процесс умрёт, не успев сделать, задача потеряна: это
# at-most-once. Если сначала сделать, а процесс умрёт, не успев записать, будет повтор:
# это at-least-once. Между этими двумя шагами всегда есть момент, если только оба не
# живут в одной транзакции, а это возможно, лишь когда действие — данные в той же базе.
# Письмо, HTTP-запрос в банк, сообщение другому сервису в транзакцию SQLite не войдут.
# Поэтому очередь выбирает сторону, на которой задачи не теряются, а обработчик делает
# повтор безвредным: ключом, который соблюдает получатель, или действием, записанным
# вместе с завершением.

# %% [markdown] tags=["en"]
# ## Summary
#
# - A worker that dies after its effect and before `complete` makes the handler run
#   again: leaselab is **at-least-once**, by design.
# - An **idempotency key** taken from the job (not the attempt) lets the receiving side
#   ignore the repeat.
# - When the effect is data in the queue's own file, write it **in the same transaction**
#   as the fenced completion: a crash rolls both back, a zombie's commit is refused.
# - Exactly-once delivery across a crash would need the effect and the record of it to be
#   one atomic step; for anything outside the database that step does not exist.
#
# ## Exercises
#
# 1. The same keyed deposit arrives three times, and a plain one three times. Predict
#    both balances, then run the cell.
# 2. Why must the idempotency key not be `f"job-{job.id}-{job.attempts}"`? Change the
#    key in the cell and see.

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - Воркер, умерший после действия и до `complete`, приводит к повторному запуску
#   обработчика: leaselab — это **at-least-once**, так задумано.
# - **Ключ идемпотентности**, взятый из задачи (а не из попытки), позволяет принимающей
#   стороне проигнорировать повтор.
# - Если действие — данные в файле самой очереди, пишите его **в той же транзакции**, что
#   и завершение с проверкой токена: падение откатит и то и другое, а фиксацию зомби
#   отклонят.
# - Ровно-один-раз при падениях требовал бы, чтобы действие и запись о нём были одним
#   атомарным шагом; для всего, что вне базы, такого шага не существует.
#
# ## Упражнения
#
# 1. Одно и то же зачисление с ключом приходит три раза, и простое — тоже три раза.
#    Предскажите оба баланса и запустите ячейку.
# 2. Почему ключ идемпотентности не должен быть `f"job-{job.id}-{job.attempts}"`?
#    Поменяйте ключ в ячейке и посмотрите.

# %% tags=["nbval-check-output"]
with effects.Ledger(work / "exercise.db") as ex:
    for attempt in (1, 2, 3):
        ex.deposit("dave", 10, key="job-42")
        ex.deposit("erin", 10)
    print("dave (keyed):", ex.balance("dave"), "| erin (plain):", ex.balance("erin"))

# %% [markdown] tags=["en"]
# (2: a key that changes with every attempt is a new key every time, so the receiver
# never sees a repeat, and the money moves once per attempt again.)
#
# Clean up: end the workers, close the files, remove the temporary folder.

# %% [markdown] tags=["ru"]
# (2: ключ, который меняется с каждой попыткой, каждый раз новый, и получатель ни разу не
# увидит повтора: деньги снова переводятся на каждой попытке.)
#
# Уберём за собой: завершим воркеров, закроем файлы, удалим временную папку.

# %% tags=["nbval-check-output"]
fleet.shutdown()
payfleet.shutdown()
print("workers alive:", [s.name for f in (fleet, payfleet) for s in f.status() if s.state in ("running", "paused", "stopping")])
for closable in (ledger, ledger_here, fleet.queue, payfleet.queue, real, pay, q):
    closable.close()
print("temporary folder removed:", lessons.cleanup(work))
