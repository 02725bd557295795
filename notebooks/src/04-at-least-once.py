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
# только одному воркеру (урок 2), fencing не даёт зомби писать в очередь (урок 3).
# Остаётся зазор, который не закроет ни одна очередь: воркер делает работу — отправляет
# письмо, переводит деньги — и умирает, *не успев* сообщить очереди «готово». Очередь
# видит лишь истёкшую аренду, поэтому отдаёт задачу снова, и работа делается второй раз.
#
# Поэтому leaselab обещает **at-least-once** («хотя бы один раз»): каждая задача будет
# выполнена, некоторые — больше одного раза. В этом уроке мы вызовем повтор на настоящих
# процессах, разберём два способа сделать повтор безвредным и в конце объясним, почему
# очередь не обещает «ровно один раз».

# %%
from leaselab import LeaseLost, ManualClock, Queue, lessons
from leaselab.lab import timeline
from leaselab.harness import effects
from leaselab.harness.demo import read_effects
from leaselab.harness.fleet import Fleet

lang = lessons.language()
say = lessons.speaker(lang)
work = lessons.scratch("04-at-least-once")

# %% [markdown] tags=["en"]
# ## A crash between the effect and `complete`
#
# The demo handler `leaselab.harness.demo:task` appends one line to an "effects" file when it
# starts: that file is the outside world, where every run leaves a trace. With
# `"crash": 1` the handler kills its own process with `SIGKILL` on the first attempt,
# right after the effect and before the worker can report completion. Two workers,
# 3-second leases.

# %% [markdown] tags=["ru"]
# ## Падение между действием и `complete`
#
# Демонстрационный обработчик `leaselab.harness.demo:task` при старте дописывает строку в файл
# «эффектов»: этот файл — внешний мир, в котором остаётся след каждого запуска. С
# `"crash": 1` на первой попытке обработчик убивает собственный процесс сигналом
# `SIGKILL` сразу после действия и до того, как воркер успеет сообщить о завершении. Два
# воркера, аренда 3 секунды.

# %% tags=["nbval-ignore-output"]
real = Queue(work / "real.db")
fleet = Fleet(real.path)
effects_file = str(work / "effects.jsonl")
job_id = real.enqueue({"seconds": 0.2, "effects": effects_file, "crash": 1})
for name in ("w1", "w2"):
    fleet.spawn(handler="leaselab.harness.demo:task", lease=3.0, name=name)
lessons.wait_until(lambda: real.get(job_id).status == "done", what=lessons.text("wait_done", lang));

# %% tags=["nbval-check-output"]
runs = read_effects(effects_file)
say("l4_status", status=real.get(job_id).status, attempts=real.get(job_id).attempts)
say("l4_ran", n=len(runs), id=job_id, attempts=[r["attempt"] for r in runs])
say("l4_alive", n=sum(s.state == "running" for s in fleet.status()))

# %% [markdown] tags=["en"]
# Nothing went wrong in the queue: attempt 1 died, its lease expired, the surviving
# worker reaped the job and did it as attempt 2, exactly as lesson 1 promised. Yet the
# effect happened twice. On the timeline the first attempt's bar ends at the crash, where
# the light grey hatching ("killed / down" in the legend) begins; the job waits there until the lease runs out and the reaper
# (the triangle) hands it on.

# %% [markdown] tags=["ru"]
# В очереди ничего не сломалось: попытка 1 умерла, её аренда истекла, выживший воркер
# вернул задачу в очередь и выполнил её второй попыткой, ровно как обещал урок 1. И всё же
# действие случилось дважды. На временной шкале полоса первой попытки обрывается в момент
# падения, там же начинается светло-серая штриховка («убит / не работает» в легенде);
# задача ждёт, пока не истечёт аренда и
# reaper (треугольник) не вернёт её в очередь.

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(real.events(), fleet.actions), lang=lang)

# %% [markdown] tags=["en"]
# ## Harmless repeats, way one: an idempotency key
#
# The effect now is a deposit of 10 into an account, in a ledger (a table in its own
# SQLite file, standing for a payment service). The handler `leaselab.harness.effects:deposit`
# deposits, then crashes on the first attempt. Two jobs: Alice's deposit is a plain
# insert; Bob's carries an **idempotency key**, `job-<id>`, and the ledger ignores a key
# it has already seen. Payment APIs offer exactly this: an `Idempotency-Key` header.
# Three workers, because each first attempt kills the worker that runs it.

# %% [markdown] tags=["ru"]
# ## Безвредный повтор, способ первый: ключ идемпотентности
#
# Теперь действие — зачисление 10 на счёт в реестре (таблица в отдельном файле SQLite,
# она изображает платёжный сервис). Обработчик `leaselab.harness.effects:deposit` зачисляет
# деньги и падает на первой попытке. Две задачи: зачисление Алисе — простая вставка, а у
# зачисления Бобу есть **ключ идемпотентности** `job-<id>`, и реестр игнорирует ключ,
# который уже видел. Платёжные API предлагают ровно это: заголовок `Idempotency-Key`.
# Воркеров три, потому что каждая первая попытка убивает воркера, который её выполняет.

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
    payfleet.spawn(handler="leaselab.harness.effects:deposit", lease=3.0, name=name)
lessons.wait_until(lambda: pay.get(alice).status == pay.get(bob).status == "done",
                   what=lessons.text("wait_done", lang));

# %% tags=["nbval-check-output"]
ledger = effects.Ledger(ledger_file)
say("l4_pay_attempts", alice=pay.get(alice).attempts, bob=pay.get(bob).attempts)
say("l4_alice", balance=ledger.balance("alice"))
say("l4_bob", balance=ledger.balance("bob"))

# %% [markdown] tags=["en"]
# The key must be stable across attempts, so it comes from the job (its id), never from
# the attempt or the clock. And it only helps if the *receiving* side checks it: the key
# moves the duplicate check to where the effect lands.

# %% [markdown] tags=["ru"]
# Ключ должен быть одинаковым во всех попытках, поэтому его берут из задачи (её id), а не
# из номера попытки и не из часов. И помогает он, только если его проверяет *принимающая*
# сторона: ключ переносит проверку на дубль туда, где действие и происходит.

# %% [markdown] tags=["en"]
# ## The key as receivers keep it
#
# The ledger above ignores a key it has seen, forever, whatever came with it. A receiver in
# production does three things more, and `Ledger.deposit_once` does them on the same SQLite file:
#
# - **The key is stored in the same transaction as the effect.** Stored apart, a crash between
#   the two writes leaves a key without its deposit (the retry is taken for a repeat, and the
#   money never moves) or a deposit without its key (the retry moves it again).
# - **The key expires.** A table of every key ever seen only grows, so receivers forget keys
#   after a while: Stripe's API documents that it may prune a key once it is at least 24 hours
#   old, and that a key reused after that starts a new request. Every retry must therefore
#   arrive within the key's lifetime: here, a job's last attempt must reach the ledger within
#   a day of the first deposit.
# - **The same key with a different request is refused, not taken for a repeat.** The
#   receiver keeps a hash of the request the key came with; Stripe compares the incoming
#   parameters with the original request's and returns an error if they differ. Taking the
#   second request for a repeat would drop it without a word: a caller whose keys collide
#   (a counter that started again from 1, say) would lose payments and never know.
#
# The statement that takes the key writes it only if it is new or its time has run out; the
# deposit follows in the same transaction:

# %% [markdown] tags=["ru"]
# ## Ключ, каким его хранит получатель
#
# Реестр выше игнорирует уже виденный ключ навсегда, что бы с ним ни пришло. Получатель в
# реальной системе делает ещё три вещи, и `Ledger.deposit_once` делает их в том же файле SQLite:
#
# - **Ключ записывается в той же транзакции, что и действие.** Если писать их порознь, падение
#   между двумя записями оставит либо ключ без зачисления (повтор примут за дубль, и деньги так
#   и не придут), либо зачисление без ключа (повтор зачислит деньги ещё раз).
# - **Срок хранения ключа ограничен.** Таблица всех когда-либо виденных ключей только растёт,
#   поэтому получатели со временем их забывают: в документации API Stripe сказано, что ключи
#   старше 24 часов могут удаляться и что запрос с удалённым ключом считается новым. Значит,
#   каждый повтор должен прийти, пока ключ ещё помнят: здесь последняя попытка задачи должна
#   дойти до реестра в пределах суток после первого зачисления.
# - **Тот же ключ с другим запросом отклоняется, а не принимается за повтор.** Получатель
#   хранит хеш запроса, с которым пришёл ключ; Stripe сравнивает параметры нового запроса с
#   параметрами исходного и при расхождении возвращает ошибку. Если принять второй запрос за
#   повтор, он молча пропадёт: вызывающая сторона, у которой ключи совпали (скажем, счётчик
#   снова начался с 1), будет терять платежи и не узнает об этом.
#
# Оператор, который занимает ключ, записывает его, только если ключ новый или его срок
# истёк; зачисление идёт следом в той же транзакции:

# %% tags=["nbval-check-output"]
print(effects.TAKE_KEY.strip())

# %% [markdown] tags=["en"]
# Frank's order 7 arrives, then its repeat, then a request for 100 under the same key; a day
# later, the first request once more. The clock is one we move ourselves.

# %% [markdown] tags=["ru"]
# Приходит заказ 7 Фрэнка, потом его повтор, потом запрос на 100 с тем же ключом; через сутки —
# снова первый запрос. Часы мы двигаем сами.

# %% tags=["nbval-check-output"]
from leaselab.harness.errors import KeyReused

keyclock = ManualClock()
bank = effects.Ledger(work / "keys.db", clock=keyclock, key_ttl=24 * 3600)   # a key is kept for a day / ключ хранится сутки
for amount in (10, 10, 100):
    try:
        outcome = bank.deposit_once("frank", amount, key="order-7").value
    except KeyReused:
        outcome = "reused"
    say(f"l4_key_{outcome}", amount=amount, balance=bank.balance("frank"))
keyclock.advance(24 * 3600)                     # a day later the key is forgotten / через сутки ключ забыт
outcome = bank.deposit_once("frank", 10, key="order-7").value
say(f"l4_key_{outcome}", amount=10, balance=bank.balance("frank"))
bank.close()

# %% [markdown] tags=["en"]
# The last line is the price of expiry: a repeat that comes after the key was forgotten moves
# the money again. The key's lifetime is part of the contract, as the lease is.

# %% [markdown] tags=["ru"]
# Последняя строка — плата за ограниченный срок: повтор, пришедший после того, как ключ
# забыли, снова переводит деньги. Срок хранения ключа — такая же часть договора, как срок
# аренды.

# %% [markdown] tags=["en"]
# ## Way two: the effect in the same transaction as the completion
#
# When the effect is a change to data in the same SQLite file as the queue, there is a
# stronger answer: write the effect and the fenced completion in **one transaction**.
# Then they happen together or not at all. `effects.completing(queue, job)` opens the
# transaction; you run the effect inside the `with` block; on leaving it runs the fenced
# `complete` and commits only if the token still holds the job.
#
# Mind the price: the block runs inside a write transaction, and SQLite has one write
# lock for the whole file. While your block runs, no other worker can claim, heartbeat
# or complete. Keep the block to a few quick statements; never call a network service or
# sleep in it.
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
# выполняется `complete` с проверкой токена, и транзакция фиксируется, только если в
# задаче всё ещё записан токен этой попытки.
#
# Помните о цене: блок выполняется внутри пишущей транзакции, а блокировка записи у
# SQLite одна на весь файл. Пока работает ваш блок, ни один другой воркер не может ни
# захватить задачу, ни продлить аренду, ни завершить задачу. Держите в блоке несколько
# быстрых операторов; никаких обращений к сетевым сервисам и никаких `sleep` в нём.
#
# Разыграем это на часах, которые мы двигаем сами. Попытка 1 (`w1`) зачисляет деньги и умирает до COMMIT:
# падение изображает исключение, и настоящее падение даёт то же самое, ведь SQLite
# выбрасывает транзакцию, которую так и не зафиксировали. Попытка 2 (`w2`) замирает и
# теряет аренду. Попытка 3 (`w3`) зачисляет деньги и завершает задачу. Потом замерший
# `w2` просыпается и пытается зафиксировать своё зачисление.

# %% tags=["nbval-check-output"]
clock = ManualClock()
q = Queue(work / "together.db", clock=clock)
ledger_here = effects.Ledger(q.path)          # the ledger table lives in the queue's own file / таблица реестра лежит в файле самой очереди
pay_id = q.enqueue({"account": "carol", "amount": 10})

first = q.claim("w1", lease=10)
try:
    with effects.completing(q, first, result="paid") as tx:
        effects.record_deposit(tx, "carol", 10, job=first)
        raise SystemExit("w1 dies before COMMIT")
except SystemExit:
    say("l4_attempt1", balance=ledger_here.balance("carol"))

clock.advance(11); q.reap(); clock.advance(q.backoff.delay(1))
second = q.claim("w2", lease=10)               # w2 freezes here / здесь w2 замирает
clock.advance(11); q.reap(); clock.advance(q.backoff.delay(2))
third = q.claim("w3", lease=10)
clock.advance(2)                               # w3 works for two seconds / w3 работает две секунды
with effects.completing(q, third, result="paid") as tx:
    effects.record_deposit(tx, "carol", 10, job=third)
say("l4_attempt3", status=q.get(pay_id).status, balance=ledger_here.balance("carol"))

try:
    with effects.completing(q, second, result="paid") as tx:
        effects.record_deposit(tx, "carol", 10, job=second)
except LeaseLost:
    say("l4_attempt2", balance=ledger_here.balance("carol"))
say("l4_ledger", entries=[(e["account"], e["amount"], e["attempt"]) for e in ledger_here.entries()])

# %% [markdown] tags=["en"]
# Three attempts ran the handler; the money moved once, and the ledger row names the
# attempt that completed the job. Here the job's history tells the same story:

# %% [markdown] tags=["ru"]
# Обработчик запускался три раза, а деньги переведены один раз, и строка реестра называет
# ту попытку, которая завершила задачу. История задачи говорит то же самое:

# %% tags=["nbval-check-output"]
print(lessons.history(q.events(pay_id), lang=lang))

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(q.events()), lang=lang)

# %% [markdown] tags=["en"]
# ## Outbox and inbox
#
# The two ways above have names in the literature on messaging.
#
# - **Inbox**: the receiver records the id (the key) of each message it has handled in a table,
#   in the same transaction as the effect, and skips a message whose id is already there. The
#   `idempotency_keys` table of `deposit_once` is an inbox; so is the ledger's `key` column.
# - **Outbox**: the sender cannot put a message to another system into its own transaction,
#   so it writes the message as a row of an *outbox* table in the same transaction as its data
#   change, and a separate relay sends the rows later and marks them sent. The message then
#   leaves if and only if the change committed. The relay itself is at-least-once (it may die
#   between sending and marking), so the receiver still needs an inbox. Way two above is the
#   same move in the other direction: the effect joins the transaction that completes the job.
#
# ## The same ideas in SQS, Celery and Kafka
#
# - **Amazon SQS.** A received message stays in the queue, invisible to other consumers for
#   the *visibility timeout* (30 seconds unless set otherwise): the lease. A consumer that
#   needs longer extends it with `ChangeMessageVisibility`: the heartbeat. It deletes the
#   message with `DeleteMessage` when done: the completion. A message not deleted in time
#   becomes visible again and can be received again: the reaper. Each receipt comes with its own
#   *receipt handle*, different every time the message is received, like leaselab's token
#   for each claim. But it is no fence: AWS documents that `DeleteMessage` with an older
#   handle still succeeds, while the message might not be deleted, so a zombie is not told it
#   was one. And a standard queue may deliver a message even after it was deleted, so AWS asks
#   for idempotent consumers.
# - **Celery.** By default a worker acknowledges a task's message just before it runs the task
#   (*early acknowledgment*): a worker killed mid-task loses the task, which is at-most-once.
#   With `acks_late` it acknowledges after the task has run, so the message is delivered again
#   if the machine loses power or the worker is killed mid-task: at-least-once, and the task
#   must be idempotent. What plays the lease depends on the broker: over AMQP an unacknowledged
#   message comes back when the worker's connection closes; over Redis and SQS, after the
#   transport's `visibility_timeout`. One more thing Celery's documentation states: if the
#   child process running the task is itself terminated (by a signal, or by the task calling
#   `sys.exit`), the message is acknowledged even with `acks_late`.
# - **Kafka.** A consumer does not acknowledge messages one by one; it commits an *offset*,
#   its position in a partition. Committed after processing, it gives at-least-once: a consumer
#   that dies before the commit leaves the records after the last committed offset to be read
#   and processed again. Committed before processing, it gives at-most-once. A consumer that
#   does not call `poll()` within `max.poll.interval.ms` is taken out of its group and its
#   partitions go to another member; its late commit then fails with `CommitFailedException`.
#   That is a fence, on the offset only: whatever the late consumer wrote elsewhere stays
#   written.
#
# In all three, as here, the queue's side can bring a message back and refuse a late
# acknowledgment at best; making the repeat harmless is the receiver's job.

# %% [markdown] tags=["ru"]
# ## Outbox и inbox
#
# У обоих способов выше есть названия, принятые в литературе об обмене сообщениями.
#
# - **Inbox** («входящие»): получатель записывает id (ключ) каждого обработанного сообщения в
#   таблицу в той же транзакции, что и действие, и пропускает сообщение, id которого там уже
#   есть. Таблица `idempotency_keys` у `deposit_once` — это inbox, как и столбец `key` реестра.
# - **Outbox** («исходящие»): отправитель не может включить в свою транзакцию отправку
#   сообщения в другую систему, поэтому записывает сообщение строкой таблицы *outbox* в той же
#   транзакции, что и изменение своих данных, а отдельный процесс-ретранслятор позже отправляет строки и
#   помечает их отправленными. Тогда сообщение уходит в том и только в том случае, если
#   изменение зафиксировано. Сам ретранслятор работает по принципу at-least-once (он может
#   умереть между отправкой и пометкой), так что без inbox у получателя всё равно не обойтись.
#   Способ второй выше — тот же приём в обратную сторону: действие входит в транзакцию,
#   которая завершает задачу.
#
# ## Те же идеи в SQS, Celery и Kafka
#
# - **Amazon SQS.** Полученное сообщение остаётся в очереди, но другие потребители не видят
#   его в течение *visibility timeout* (30 секунд, если не задано иное): это аренда.
#   Потребитель, которому нужно больше времени, продлевает его вызовом
#   `ChangeMessageVisibility`: это heartbeat. Закончив, он удаляет сообщение вызовом
#   `DeleteMessage`: это завершение. Сообщение, которое не удалили вовремя, снова становится
#   видимым, и его можно получить ещё раз: это reaper. Каждое получение приносит свой *receipt handle*,
#   новый при каждом получении сообщения, как токен у каждого захвата в leaselab. Но это не
#   fence: по документации AWS, `DeleteMessage` со старым receipt handle
#   завершается успешно, а сообщение при этом может остаться в очереди, так что зомби не
#   узнает, что он зомби. А стандартная очередь может выдать сообщение даже после удаления,
#   поэтому AWS советует делать потребителей идемпотентными.
# - **Celery.** По умолчанию воркер подтверждает сообщение задачи непосредственно перед её
#   запуском (*раннее подтверждение*): если воркер убьют посреди задачи, она пропадёт, и это
#   at-most-once. С `acks_late` воркер подтверждает сообщение после выполнения задачи, поэтому
#   оно придёт снова, если машина потеряет питание или воркер убьют посреди задачи: это
#   at-least-once, и задача должна быть идемпотентной. Что играет роль аренды, зависит от
#   брокера: в AMQP неподтверждённое сообщение возвращается, когда закрывается соединение
#   воркера, в Redis и SQS — по истечении `visibility_timeout` транспорта. И ещё одно, о чём
#   прямо говорит документация Celery: если завершается сам дочерний процесс, выполняющий
#   задачу (по сигналу или потому, что задача вызвала `sys.exit`), сообщение подтверждается
#   даже с `acks_late`.
# - **Kafka.** Потребитель не подтверждает сообщения по одному, а фиксирует *offset* — свою
#   позицию в разделе (partition). Если фиксировать offset после обработки, получится
#   at-least-once: когда потребитель умирает до фиксации, записи после последнего
#   зафиксированного offset прочитают и обработают снова. Если до обработки — at-most-once.
#   Потребителя, который не вызывает `poll()` в течение `max.poll.interval.ms`, исключают из
#   группы, а его разделы отдают другому участнику; его запоздалая фиксация offset тогда
#   завершается ошибкой `CommitFailedException`. Это fence, но только для offset: всё, что
#   запоздавший потребитель успел записать в другие места, так и останется записанным.
#
# Во всех трёх системах, как и здесь, сторона очереди в лучшем случае может вернуть
# сообщение и отклонить запоздалое подтверждение; сделать повтор безвредным — дело
# получателя.

# %% [markdown] tags=["en"]
# ## Why not exactly once?
#
# Look at where the trouble was: between doing the effect and recording that it was
# done. If the effect is recorded first and the process dies before doing it, the job is
# lost: at-most-once. If it is done first and the process dies before recording, it is
# repeated: at-least-once. Some moment always separates the two unless they become one
# atomic step, and that takes the receiving side. When the effect is data in the queue's
# own database, one transaction does it (way two above). Across systems, a distributed
# transaction can, if every side takes part in it (two-phase commit, XA). And a receiver
# that honours an idempotency key does not prevent the repeat but makes it harmless
# (way one). An email, or an HTTP call to a service that offers neither, cannot take part
# in any of these. The queue alone cannot provide exactly once; the receiver has to take
# part. So the queue chooses the side that never loses a job, and the handler and the
# receiver together make the repeat harmless.

# %% [markdown] tags=["ru"]
# ## Почему не «ровно один раз»?
#
# Посмотрите, где была беда: между «сделать действие» и «записать, что оно сделано».
# Если сначала записать, а процесс умрёт, не успев сделать, задача потеряна: это
# at-most-once. Если сначала сделать, а процесс умрёт, не успев записать, будет повтор:
# это at-least-once. Между этими двумя шагами всегда есть момент, если только они не
# станут одним атомарным шагом, а для этого нужна принимающая сторона. Когда действие —
# данные в базе самой очереди, это делает одна транзакция (способ второй). Между разными
# системами это может сделать распределённая транзакция, если в ней участвуют все стороны
# (двухфазная фиксация, XA). А получатель, который соблюдает ключ идемпотентности, повтор
# не предотвращает, но делает безвредным (способ первый). Письмо или HTTP-запрос к
# сервису, который не умеет ни того, ни другого, ни в чём из этого участвовать не могут.
# Одна очередь «ровно один раз» обеспечить не может: нужно, чтобы участвовал получатель.
# Поэтому очередь выбирает сторону, на которой задачи не теряются, а обработчик вместе с
# получателем делают повтор безвредным.

# %% [markdown] tags=["en"]
# ## Summary
#
# - A worker that dies after its effect and before `complete` makes the handler run
#   again: leaselab is **at-least-once**, by design.
# - An **idempotency key** taken from the job (not the attempt) lets the receiving side
#   ignore the repeat.
# - A receiver keeps the key **in the same transaction as the effect**, with a hash of the
#   request, **for a limited time**, and **refuses** the same key with a different request
#   instead of taking it for a repeat. That is the *inbox*; the sender's side has the
#   *outbox*. SQS's visibility timeout and receipt handle, Celery's `acks_late` and Kafka's
#   offsets committed after processing are the same at-least-once, and need the same
#   idempotent receiver.
# - When the effect is data in the queue's own file, write it **in the same transaction**
#   as the fenced completion: a crash rolls both back, a zombie's commit is refused. Keep
#   that transaction short: it holds the file's one write lock.
# - An effect done exactly once across a crash needs the receiver to take part: the
#   effect in one transaction with the completion, a two-phase commit the receiver joins,
#   or an idempotency key it honours. The queue alone cannot provide it.
#
# ## Exercises
#
# **1. Write code.** A job that moves money makes *two* writes: `my_transfer(ledger, job)`
# moves 10 from alice to bob as two deposits, `-10` to alice and `10` to bob. Make it
# idempotent: whichever attempts of a job run, and wherever one of them dies, alice loses
# the job's 10 once and bob gets it once. The check takes the jobs from a real queue on a
# clock we move: job 1's first attempt dies between its two deposits (the second one never
# happens), its second attempt makes both deposits but dies before it can complete, so a
# third runs them all again; job 2 runs once. Then alice must have `-20` and bob `20`.
# The stub has no keys.

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - Воркер, умерший после действия и до `complete`, приводит к повторному запуску
#   обработчика: leaselab — это **at-least-once**, так задумано.
# - **Ключ идемпотентности**, взятый из задачи (а не из попытки), позволяет принимающей
#   стороне проигнорировать повтор.
# - Получатель хранит ключ **в той же транзакции, что и действие**, вместе с хешем запроса и
#   **ограниченное время**, а тот же ключ с другим запросом **отклоняет**, а не принимает за
#   повтор. Это *inbox*; на стороне отправителя ему соответствует *outbox*. Visibility
#   timeout и receipt handle в SQS, `acks_late` в Celery и offset в Kafka, зафиксированный
#   после обработки, — это тот же at-least-once, и получатель там нужен такой же
#   идемпотентный.
# - Если действие — данные в файле самой очереди, пишите его **в той же транзакции**, что
#   и завершение с проверкой токена: падение откатит и то и другое, а фиксацию зомби
#   отклонят. Транзакция должна быть короткой: она держит единственную блокировку записи
#   на файл.
# - Чтобы при падениях действие выполнялось ровно один раз, в этом должен участвовать
#   получатель: действие в одной транзакции с завершением, двухфазная фиксация, в которой
#   он участвует, или ключ идемпотентности, который он соблюдает. Одна очередь этого
#   обеспечить не может.
#
# ## Упражнения
#
# **1. Напишите код.** Задача, которая переводит деньги, делает *две* записи:
# `my_transfer(ledger, job)` переводит 10 от Алисы Бобу двумя зачислениями: `-10` на счёт
# `alice` и `10` на счёт `bob`. Сделайте перевод идемпотентным: какие бы попытки задачи ни
# выполнялись и где бы ни умерла одна из них, Алиса теряет 10 этой задачи один раз, а Боб
# получает их один раз. Проверка берёт задачи из настоящей очереди на часах, которые мы
# двигаем сами: первая попытка задачи 1 умирает между двумя зачислениями (второго так и не
# случается), вторая делает оба зачисления, но умирает, не успев сообщить о завершении, и
# третья выполняет их все заново; задача 2 выполняется один раз. После этого у Алисы должно быть `-20`, у Боба
# `20`. В заготовке ключей нет.

# %%
def my_transfer(ledger, job):
    ledger.deposit("alice", -10, job=job)
    ledger.deposit("bob", 10, job=job)

# %% [markdown] tags=["en"]
# <details><summary>Show the answer</summary>
#
# One key per write, each the same for every attempt of the job:
#
# ```python
# def my_transfer(ledger, job):
#     ledger.deposit("alice", -10, job=job, key=f"job-{job.id}-from")
#     ledger.deposit("bob", 10, job=job, key=f"job-{job.id}-to")
# ```
#
# The lesson's key, `f"job-{job.id}"`, on both writes would lose bob's money: the ledger
# takes his deposit for a repeat of alice's and ignores it. A key with `job.attempts` in
# it is new on every attempt, and the money moves again each time. And after the crash
# the ledger is, for a while, wrong: alice has paid, bob has nothing, until the next
# attempt makes the second write. Keys make a repeat harmless; they do not make two writes
# one. For that, put both in one transaction (the ledger's file) or make them one write.
# </details>

# %% [markdown] tags=["ru"]
# <details><summary>Показать ответ</summary>
#
# По ключу на каждую запись, и каждый одинаков для всех попыток задачи:
#
# ```python
# def my_transfer(ledger, job):
#     ledger.deposit("alice", -10, job=job, key=f"job-{job.id}-from")
#     ledger.deposit("bob", 10, job=job, key=f"job-{job.id}-to")
# ```
#
# Ключ из урока, `f"job-{job.id}"`, на обеих записях оставил бы Боба без денег: реестр
# примет его зачисление за повтор зачисления Алисы и проигнорирует. Ключ, в котором есть
# `job.attempts`, на каждой попытке новый, и деньги снова переводятся каждый раз. И ещё:
# после падения реестр какое-то время неверен — Алиса уже заплатила, а у Боба ничего нет,
# пока следующая попытка не сделает вторую запись. Ключи делают повтор безвредным, но две
# записи одной не делают. Для этого нужна одна транзакция на обе (в файле реестра) или
# одна запись вместо двух.
# </details>

# %% tags=["nbval-check-output"]
from leaselab.lessons import exercises
print(exercises.check_idempotent_transfer(my_transfer, work / "exercise-ledger.db", lang))

# %% [markdown] tags=["en"]
# **2. Predict.** A monthly fee's handler keys its deposit by the account:
# `key=f"fee-{account}"`. January's fee job runs twice (its first attempt is retried),
# February's once, and each attempt deposits 10 to dave. What is dave's balance? Commit your
# number below, then run the cell after it.

# %% [markdown] tags=["ru"]
# **2. Предскажите.** Обработчик ежемесячной платы строит ключ зачисления из счёта:
# `key=f"fee-{account}"`. Январская задача выполняется дважды (её первую попытку
# повторяют), февральская — один раз, и каждая попытка зачисляет Дэйву 10. Сколько будет
# на счёте Дэйва? Зафиксируйте число ниже, потом выполните следующую ячейку.

# %%
guess = lessons.predict("l4_ex2", lang)  # without widgets: lessons.predict("l4_ex2", lang, answer=...) / без виджетов: lessons.predict("l4_ex2", lang, answer=...)
guess

# %% tags=["nbval-check-output"]
with guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    account = "dave"
    with effects.Ledger(work / "exercise.db") as ex:
        for _month in ("january", "january", "february"):  # January's job ran twice / январская задача выполнилась дважды
            ex.deposit(account, 10, key=f"fee-{account}")
        say("l4_ex_fee", balance=ex.balance(account))
        guess.reveal(ex.balance(account))

# %% [markdown] tags=["en"]
# <details><summary>Answer</summary>
#
# 10. January's repeat is dropped, as it should be, but so is February's fee: a new payment
# under a key the ledger has seen looks exactly like a repeat, and `deposit` drops it without a
# word (it returns `False`). The key must name the one effect, not who receives it: the job
# (`fee-{job.id}`) or the month (`fee-dave-2026-02`). A key too broad loses money silently; a
# key too narrow (one with `job.attempts` in it, exercise 1) pays twice.
# </details>
#
# Clean up: end the workers, close the files, remove the temporary folder.

# %% [markdown] tags=["ru"]
# <details><summary>Ответ</summary>
#
# 10. Январский повтор отброшен, как и должно быть, но отброшена и февральская плата:
# новый платёж с ключом, который реестр уже видел, ничем не отличается от повтора, и
# `deposit` молча его пропускает (возвращает `False`). Ключ должен называть одно конкретное
# действие, а не получателя: задачу (`fee-{job.id}`) или месяц (`fee-dave-2026-02`). Слишком
# широкий ключ молча теряет деньги, слишком узкий (с `job.attempts`, упражнение 1) платит
# дважды.
# </details>
#
# Уберём за собой: завершим воркеров, закроем файлы, удалим временную папку.

# %% tags=["nbval-check-output"]
fleet.shutdown()
payfleet.shutdown()
say("workers_alive", names=[s.name for f in (fleet, payfleet) for s in f.status() if s.state in ("running", "paused", "stopping")])
for closable in (ledger, ledger_here, fleet.queue, payfleet.queue, real, pay, q):
    closable.close()
say("folder_removed", removed=lessons.cleanup(work))
