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
# # Lesson 8. Your turn: break it, then prove it
#
# Lessons 1–7 broke leaselab on purpose and showed what it promises: a job is never lost
# while attempts remain, two workers never hold one lease, a zombie's late write is refused.
# It promises *at least* once, not exactly once: whatever your handler does to the outside
# world, a second attempt may do again. That part is yours, and a promise nobody has tried to
# break is only a hope.
#
# This lesson gives you the tools the course itself was tested with, the way Jepsen tests
# databases: run real code under faults, record what happened, and let a **checker** read the
# record and name each broken promise with its evidence. `leaselab chaos` runs real worker
# processes under a seeded schedule of faults (the same seed gives the same faults at the same
# offsets); `leaselab check` reads what the run left behind, with the raw driver, never through
# the queue it judges. Here you break a handler of your own, prove a fix, and write a rule of
# the checker.
#
# One rule keeps this lesson honest on a slow machine: the fault every checked result depends on
# is put *into the handler*, at the instant that matters, instead of being aimed at it from
# outside by a kernel that may react late. The nemesis's own seeded pauses still run around it.

# %% [markdown] tags=["ru"]
# # Урок 8. Ваш ход: сломайте, потом докажите
#
# В уроках 1–7 мы нарочно ломали leaselab и видели, что он обещает: задача не теряется, пока
# остаются попытки, двое воркеров никогда не держат одну аренду, запоздалая запись зомби
# отклоняется. Обещание — *хотя бы* один раз, а не ровно один: что бы ваш обработчик ни делал
# во внешнем мире, вторая попытка может сделать это снова. Эта часть лежит на вас, а обещание,
# которое никто не пытался нарушить, — пока только надежда.
#
# В этом уроке у вас в руках инструменты, которыми проверяли сам курс, — так Jepsen проверяет
# базы данных: запустить настоящий код под сбоями, записать, что произошло, и дать
# **ревизору** (checker) прочитать запись и назвать каждое нарушенное обещание с
# доказательствами. `leaselab chaos` запускает настоящие процессы-воркеры по расписанию сбоев,
# заданному зерном (то же зерно даёт те же сбои в те же моменты); `leaselab check` читает,
# что после запуска осталось, напрямую через драйвер базы, а не через очередь, которую
# проверяет. Здесь вы сломаете собственный обработчик, докажете исправление и напишете
# правило для ревизора.
#
# Одно правило сохраняет урок честным на медленной машине: сбой, от которого зависит каждый
# проверяемый результат, встроен *в сам обработчик*, в тот момент, который важен, а не
# нацелен на него снаружи из ядра, которое может опоздать. Собственные паузы хаоса по
# расписанию при этом идут своим чередом.

# %%
from leaselab import Queue, lessons
from leaselab.chaos import proof
from leaselab.lab import timeline
from leaselab.lessons import exercises, peers

lang = lessons.language()
say = lessons.speaker(lang)
work = lessons.scratch("08-your-turn")

# %% [markdown] tags=["en"]
# ## A payment, and the fault that repeats it
#
# The handler pays a job's amount into an account, in a ledger: a table in its own SQLite file,
# standing for a payment service outside the queue. The workers are separate processes, so the
# handler is a module they import; here it is its source, which the trial writes to a file.
#
# The two calls to `gates.fault_point` are where this lesson's faults strike, on the first
# attempt of job 1 only: `"before"` kills the worker's own process just before the payment,
# `"after"` freezes it (`SIGSTOP`) just after the payment until another attempt has finished the
# job. That is lesson 3's zombie, placed exactly: the money has moved, the lease runs out, the
# reaper hands the job on, and the second attempt runs the handler again.

# %% [markdown] tags=["ru"]
# ## Платёж и сбой, который его повторяет
#
# Обработчик зачисляет сумму задачи на счёт в реестре — таблице в отдельном файле SQLite,
# которая изображает платёжный сервис вне очереди. Воркеры — отдельные процессы, поэтому
# обработчик — это модуль, который они импортируют; здесь это его исходный текст, а испытание
# запишет его в файл.
#
# Два вызова `gates.fault_point` — места, куда бьют сбои этого урока, и только на первой
# попытке задачи 1: `"before"` убивает собственный процесс воркера перед самым платежом,
# `"after"` замораживает его (`SIGSTOP`) сразу после платежа, пока задачу не завершит другая
# попытка. Это зомби из урока 3, поставленный точно в нужное место: деньги ушли, аренда
# истекает, reaper отдаёт задачу дальше, и вторая попытка снова запускает обработчик.

# %% tags=["nbval-check-output"]
PLAIN = '''
from leaselab.harness import effects, gates

def pay(job):
    with effects.Ledger(job.payload["ledger"]) as ledger:
        gates.fault_point(job, "before")
        ledger.deposit(job.payload["account"], job.payload["amount"], job=job)
        gates.fault_point(job, "after")
    return "paid"
'''
print(PLAIN.strip())

# %% [markdown] tags=["en"]
# The trial: four jobs (accounts `a1`–`a4`, 10 each), two workers with 1-second leases, the
# freeze after the payment, and `leaselab chaos`'s seeded pauses over the first two seconds.
# Then the checker reads the queue's file and the ledger (`Ledger.effects` lists what the store
# holds, so the checker sees the outside world as it is, not as the handler reported it).
# The schedule and the times below differ from run to run of this notebook; the checked facts
# after them do not.

# %% [markdown] tags=["ru"]
# Испытание: четыре задачи (счета `a1`–`a4`, по 10 на каждый), два воркера с арендой
# 1 секунда, заморозка после платежа и паузы `leaselab chaos` по расписанию в первые две
# секунды. Потом ревизор читает файл очереди и реестр (`Ledger.effects` перечисляет то, что
# лежит в хранилище, поэтому ревизор видит внешний мир таким, каков он есть, а не со слов
# обработчика). Расписание и времена ниже от запуска к запуску блокнота меняются, а
# проверяемые факты после них — нет.

# %% tags=["nbval-ignore-output"]
plain = proof.trial(PLAIN, work / "plain", fault="after")
print(plain.chaos.render(lang))
print()
print(plain.report.render(lang))

# %% tags=["nbval-check-output"]
say("l7_queue_clean", clean=plain.chaos.report.clean)
say("l7_repeated", repeated=("effect_repeated", 1) in [(a.kind, a.job) for a in plain.report.anomalies])
say("l7_overpaid", overpaid=plain.balances["a1"] > proof.AMOUNT)

# %% [markdown] tags=["en"]
# Read the two verdicts together. The queue kept every promise it makes: job 1 ran twice, as
# at-least-once allows, and nothing was lost. The ledger did not: the payment of job 1 is in it
# twice (`effect_repeated`), and the report's witness lines are the two ledger rows with their
# attempts and tokens. On the timeline the job is framed in red and flagged on the lane of the
# attempt that repeated it.

# %% [markdown] tags=["ru"]
# Прочитайте оба вердикта вместе. Очередь сдержала все свои обещания: задача 1 выполнилась
# дважды, как и допускает «хотя бы один раз», и ничего не потерялось. Реестр — нет: платёж
# задачи 1 записан в нём дважды (`effect_repeated`), а строки-свидетели в отчёте — это две
# строки реестра с их попытками и токенами. На временной шкале задача обведена красным и
# отмечена на дорожке той попытки, которая платёж повторила.

# %% tags=["nbval-ignore-output"]
with Queue(work / "plain" / "queue.db") as plain_queue:
    plain_events = plain_queue.events()
timeline.draw(timeline.timeline_data(plain_events), report=plain.report, lang=lang)

# %% [markdown] tags=["en"]
# ## A fix, proved under two faults
#
# The fix of lesson 4: an idempotency key, the same for every attempt of a job (`pay-<id>`), so
# the ledger ignores a payment it has already seen. A fix is proved, not argued: `proof.grade`
# runs it under the freeze after the payment *and* under the crash before it, and it is right
# only when the checker finds no anomaly, every account got 10 exactly once, and the jobs took no
# more attempts than the faults forced (a budget: a fix that fails attempts on purpose is over
# it). Two faults, because each catches a different wrong fix.

# %% [markdown] tags=["ru"]
# Исправление из урока 4 — ключ идемпотентности, одинаковый для всех попыток задачи
# (`pay-<id>`), так что реестр проигнорирует платёж, который уже видел. Исправление не
# обосновывают, а доказывают: `proof.grade` запускает его и при заморозке после платежа, *и*
# при падении перед ним, и считает верным, только если ревизор не нашёл аномалий, каждый
# счёт получил 10 ровно один раз, а попыток ушло не больше, чем вынудили сбои (бюджет:
# исправление, которое нарочно проваливает попытки, в него не уложится). Сбоя два, потому что
# каждый ловит своё неверное исправление.

# %% tags=["nbval-check-output"]
KEYED = PLAIN.replace("job=job)", 'job=job, key=f"pay-{job.id}")')
print(proof.grade(KEYED, work / "keyed", lang))

# %% [markdown] tags=["en"]
# Two fixes that look right. The first skips the payment on a retry (`job.attempts > 1`): the
# freeze after the payment cannot tell it from a right one, but a crash *before* the payment
# leaves a retry that never pays. The second builds the key from the attempt: every attempt
# has a key of its own, so the ledger keeps both payments; no row repeats a key, so the checker
# sees two different effects, and only the money shows the damage.

# %% [markdown] tags=["ru"]
# Два исправления, которые выглядят верными. Первое пропускает платёж при повторе
# (`job.attempts > 1`): заморозка после платежа не отличит его от верного, а вот падение
# *перед* платежом оставляет повтор, который так и не заплатит. Второе строит ключ из
# попытки: у каждой попытки свой ключ, и реестр сохраняет оба платежа; ни одна строка не
# повторяет ключ, поэтому ревизор видит два разных действия, и ущерб виден только по
# деньгам.

# %% tags=["nbval-check-output"]
SKIPS_RETRIES = PLAIN.replace("        ledger.deposit", "        if job.attempts == 1:\n            ledger.deposit")
KEY_PER_ATTEMPT = PLAIN.replace("job=job)", 'job=job, key=f"pay-{job.id}-{job.attempts}")')
print(proof.grade(SKIPS_RETRIES, work / "skips", lang))
print(proof.grade(KEY_PER_ATTEMPT, work / "per-attempt", lang))

# %% [markdown] tags=["en"]
# ## Write a rule of the checker
#
# A checker is a set of rules over a history, each a small function. Write one: **overlapping
# leases**. Two claims of one job overlap when the second came while the first claim's lease was
# still running. The lease runs from the claim, or from the holder's latest heartbeat, for
# `lease` seconds; a completion or a failure ends it. A reap does not: a reaper that takes a job
# before the lease has run out is exactly the bug this rule is for.
#
# `overlapping(events, lease)` gets the history as a list of dicts (`job`, `kind`, `at`,
# `worker`, `token`, oldest first) and returns the set of jobs whose leases overlapped. The check
# runs it on a clean history from a real queue on a manual clock, and on a planted copy in which
# two reaps came early: one of them inside a lease only a heartbeat had renewed.

# %% [markdown] tags=["ru"]
# ## Напишите правило ревизора
#
# Ревизор — это набор правил над историей, каждое — небольшая функция. Напишите одно:
# **перекрытие аренд**. Два захвата одной задачи перекрываются, если второй пришёлся на время,
# когда аренда первого ещё шла. Аренда длится `lease` секунд от захвата или от последнего
# heartbeat держателя; завершение или неудача её прекращают. Возврат в очередь — нет: reaper,
# который забирает задачу до конца аренды, — это ровно та ошибка, ради которой правило и
# пишется.
#
# `overlapping(events, lease)` получает историю списком словарей (`job`, `kind`, `at`,
# `worker`, `token`, от старых к новым) и возвращает множество задач, аренды которых
# перекрылись. Проверка запустит функцию на чистой истории настоящей очереди, чьи часы мы
# двигаем сами, и на подброшенной копии, где два возврата в очередь пришли раньше срока, причём один — внутри
# аренды, которую продлил только heartbeat.

# %%
def overlapping(events, lease):
    ...

# %% [markdown] tags=["en"]
# <details><summary>Show the answer</summary>
#
# ```python
# def overlapping(events, lease):
#     held, found = {}, set()          # job -> (token, when its lease runs out)
#     for e in sorted(events, key=lambda e: e["at"]):
#         job, token = e["job"], e["token"]
#         if e["kind"] == "claimed":
#             if job in held and held[job][0] != token and e["at"] < held[job][1]:
#                 found.add(job)
#             held[job] = (token, e["at"] + lease)
#         elif e["kind"] == "heartbeat" and held.get(job, (None,))[0] == token:
#             held[job] = (token, e["at"] + lease)
#         elif e["kind"] in ("completed", "failed", "dead"):
#             held.pop(job, None)
#     return found
# ```
#
# A rule that times the lease from the claim alone finds job 2 and misses job 3: its holder beat
# at 48 s, so its lease ran to 58 s, and the early reap at 55 s was inside it. leaselab's own rule
# (`leaselab.check.rules.reaps`) does the same over the stored history.
# </details>

# %% [markdown] tags=["ru"]
# <details><summary>Показать ответ</summary>
#
# ```python
# def overlapping(events, lease):
#     held, found = {}, set()          # задача -> (токен, когда истекает её аренда)
#     for e in sorted(events, key=lambda e: e["at"]):
#         job, token = e["job"], e["token"]
#         if e["kind"] == "claimed":
#             if job in held and held[job][0] != token and e["at"] < held[job][1]:
#                 found.add(job)
#             held[job] = (token, e["at"] + lease)
#         elif e["kind"] == "heartbeat" and held.get(job, (None,))[0] == token:
#             held[job] = (token, e["at"] + lease)
#         elif e["kind"] in ("completed", "failed", "dead"):
#             held.pop(job, None)
#     return found
# ```
#
# Правило, которое отсчитывает аренду только от захвата, найдёт задачу 2 и пропустит задачу 3:
# её держатель отправил heartbeat на 48-й секунде, аренда продлилась до 58-й, и ранний возврат
# на 55-й пришёлся внутрь неё. Собственное правило leaselab (`leaselab.check.rules.reaps`)
# делает то же над сохранённой историей.
# </details>

# %% tags=["nbval-check-output"]
print(exercises.check_overlap_rule(overlapping, lang))

# %% [markdown] tags=["en"]
# ## The same faults, other queues
#
# A checker earns trust when it also catches a queue that breaks the rules. The repository's
# `bench/audit.py` runs this course's faults against leaselab and the Python queues people use,
# each driven through its own public API and its own worker, never patched, and judges every run
# with one checker over a ledger kept outside the queue. The whole table, with versions, settings,
# the machine and the date, is in `bench/README.md`. Here is its short version, live: leaselab on
# SQLite with a 2-second lease, huey (`SqliteHuey`) and persist-queue (`SQLiteAckQueue`), each at
# its defaults, in four scenarios:
#
# - **crash**: the job's first run kills its own worker (`SIGKILL`); a second worker starts. Does
#   the job come back?
# - **zombie**: the first run freezes itself (`SIGSTOP`) past the lease; a second worker starts,
#   and once its run has finished the first is thawed. Is its late completion accepted over the
#   newer run's?
# - **partition**: the worker is cut off from its server while it runs the job. All three keep
#   their queue in a file, so the audit counts the worker's TCP connections instead, finds none,
#   and says the scenario cannot be run rather than pretend it passed.
# - **flood**: 12 jobs, 3 workers; the first runs of 3 jobs, drawn with a fixed seed, kill their
#   own worker, and a new one is started in its place. How many jobs are lost, completed twice,
#   stuck?
#
# It takes about a minute. The times in the table change from run to run; the verdicts after it
# do not, because each fault is put into the handler.

# %% [markdown] tags=["ru"]
# ## Те же сбои, другие очереди
#
# Ревизору можно доверять, когда он ловит и очередь, которая правила нарушает. Скрипт
# репозитория `bench/audit.py` устраивает сбои этого курса leaselab и очередям на Python, которыми
# пользуются на практике: каждую он запускает через её собственный публичный API и её собственный
# воркер, ничего в ней не меняя, а каждый запуск судит один и тот же ревизор по реестру, который
# ведётся вне очереди. Полная таблица с версиями, настройками, машиной и датой — в
# `bench/README.md`. Здесь её короткая версия, вживую: leaselab на SQLite с арендой 2 секунды,
# huey (`SqliteHuey`) и persist-queue (`SQLiteAckQueue`) с настройками по умолчанию, в четырёх
# сценариях:
#
# - **падение**: первая попытка задачи убивает собственного воркера (`SIGKILL`), запускается
#   второй воркер. Вернётся ли задача?
# - **зомби**: первая попытка замораживает себя (`SIGSTOP`) дольше срока аренды, запускается
#   второй воркер, а когда он закончит, первого размораживают. Примет ли очередь его запоздалое
#   завершение поверх завершения более новой попытки?
# - **разрыв сети**: воркера отрезают от сервера, пока он выполняет задачу. Все три очереди живут
#   в файле, поэтому ревизор вместо этого считает TCP-соединения воркера, не находит ни одного
#   и честно пишет, что сценарий неприменим, а не делает вид, что он пройден.
# - **наплыв задач**: 12 задач, 3 воркера; первые попытки 3 задач, выбранных с фиксированным
#   зерном, убивают своего воркера, и на его место запускается новый. Сколько задач потеряно,
#   сколько завершено дважды, сколько застряло?
#
# Это займёт около минуты. Времена в таблице от запуска к запуску меняются, а вердикты под ней —
# нет, потому что каждый сбой встроен в обработчик.

# %% tags=["nbval-ignore-output"]
audit_rows = peers.run()
print(peers.table(audit_rows, lang))

# %% tags=["nbval-check-output"]
print(peers.facts(audit_rows, lang))

# %% [markdown] tags=["en"]
# Read the verdicts row by row. leaselab accepted no stale completion in any scenario: the frozen
# worker's late result was refused by its token, and in the flood every killed job came back
# once its lease ran out. huey deletes a task as it hands it out (at-most-once): the job whose
# worker was killed is simply gone, in the crash and in the flood alike, and a frozen worker keeps
# its job only because nothing would ever take a job back. persist-queue does bring a killed job
# back, by a rule that fences nothing: opening the queue puts back every unacknowledged item,
# the one a live but frozen worker is still running too, and when that worker thaws, its `ack`
# is taken. That is this course's zombie, counted in the table's *stale accepted* and *completed
# twice*. In the flood the same rule makes those two counts change between runs (they depend on
# which items were unacknowledged when a new worker opened the queue), so only the lost and stuck
# jobs are compared there.
#
# leaselab's rows have overlapping runs too: once a lease runs out, a second run starts while the
# first is frozen. No queue can stop a frozen process from waking up; what a queue can do is
# refuse what that process writes afterwards, and your handler's effects need the same fence
# (lesson 3) or a key (section 2). The full audit adds PostgreSQL, RQ and Celery, where the
# partition can be run: see `bench/README.md`.

# %% [markdown] tags=["ru"]
# Прочитайте вердикты строка за строкой. leaselab ни в одном сценарии не принял устаревшего
# завершения: запоздалый результат замершего воркера отклонён по токену, а при наплыве задач
# каждая убитая задача вернулась, когда истекла её аренда. huey удаляет задачу в тот момент,
# когда выдаёт её воркеру (не более одного раза): задача убитого воркера просто исчезает — и при
# падении, и при наплыве, а замерший воркер сохраняет свою задачу лишь потому, что обратно её не
# забрал бы никто. persist-queue убитую задачу возвращает, но по правилу, которое ничего не
# ограждает: при открытии очередь возвращает все неподтверждённые элементы, в том числе тот,
# который всё ещё выполняет живой, хотя и замерший воркер, а когда этого воркера разморозят, его `ack`
# принимается. Это и есть зомби из нашего курса; таблица считает его в столбцах «принято
# устаревших» и «завершено дважды». При наплыве задач из-за того же правила эти два числа от
# запуска к запуску меняются (они зависят от того, какие элементы не были подтверждены, когда
# новый воркер открыл очередь), поэтому там сравниваются только потерянные и застрявшие задачи.
#
# В строках leaselab перекрытия тоже есть: когда аренда истекает, вторая попытка начинается, пока
# первая заморожена. Никакая очередь не помешает замершему процессу проснуться; очередь может лишь
# отклонить то, что он запишет потом, а действиям вашего обработчика нужен такой же fence
# (урок 3) или ключ (раздел 2). В полном прогоне `bench/audit.py` добавлены PostgreSQL, RQ и Celery, где разрыв
# сети устроить можно: см. `bench/README.md`.

# %% [markdown] tags=["en"]
# ## Summary
#
# - The queue promises at-least-once: a job is not lost while attempts remain, a lease is held
#   by one worker at a time, and a write under a token that no longer holds the job is refused.
# - Your handler must make a repeat harmless: an idempotency key the receiver honours, a fenced
#   write (lesson 3), or the effect in the queue's own transaction (lesson 4).
# - Prove it by running it: `leaselab chaos` for the faults, `leaselab check` for the verdict,
#   and a fault placed where it matters, so the verdict does not depend on luck or on the
#   machine's speed. Check the outside world itself (the ledger), not the handler's account of it.
# - The checker's rules are small functions over a history. `leaselab.check.KINDS` lists the
#   ones it has; `leaselab check --db FILE` runs them on any leaselab file or PostgreSQL database.
# - The same faults and one checker tell queues apart: `bench/audit.py` shows which of them take
#   a zombie's late completion, and which lose a job whose worker died.
#
# ## Exercises
#
# **1. Prove a fix of your own.** The payment service takes at most 5 per call, so `MINE` pays
# the job's 10 in two deposits of 5, with no key. Keep the payment to once per job: which keys
# make both halves survive a retry, and neither repeat? Write them in and run the grade; a wrong
# fix is told which fault broke it and what the money shows.

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - Очередь обещает «хотя бы один раз»: задача не теряется, пока остаются попытки, аренду
#   держит один воркер за раз, а запись под токеном, которому задача уже не принадлежит,
#   отклоняется.
# - Ваш обработчик должен сделать повтор безвредным: ключ идемпотентности, который соблюдает
#   получатель, запись с проверкой fence (урок 3) или действие в транзакции самой очереди
#   (урок 4).
# - Доказывайте это запуском: `leaselab chaos` — для сбоев, `leaselab check` — для вердикта,
#   а сбой ставьте туда, где он важен, чтобы вердикт не зависел ни от удачи, ни от скорости
#   машины. Проверяйте сам внешний мир (реестр), а не то, что о нём сообщил обработчик.
# - Правила ревизора — небольшие функции над историей. `leaselab.check.KINDS` перечисляет
#   те, что есть; `leaselab check --db ФАЙЛ` запускает их на любом файле leaselab или базе
#   PostgreSQL.
# - Одни и те же сбои и один ревизор различают очереди: `bench/audit.py` показывает, какие из
#   них принимают запоздалое завершение зомби, а какие теряют задачу, чей воркер умер.
#
# ## Упражнения
#
# **1. Докажите собственное исправление.** Платёжный сервис принимает не больше 5 за вызов,
# поэтому `MINE` зачисляет 10 задачи двумя платежами по 5, без ключа. Сделайте так, чтобы
# платёж проходил один раз на задачу: с какими ключами обе половины переживут повтор и ни одна
# не повторится? Впишите их и запустите проверку; неверному исправлению она скажет, какой
# сбой его сломал и что показывают деньги.

# %%
MINE = '''
from leaselab.harness import effects, gates

def pay(job):
    half = job.payload["amount"] // 2
    with effects.Ledger(job.payload["ledger"]) as ledger:
        gates.fault_point(job, "before")
        ledger.deposit(job.payload["account"], half, job=job)
        gates.fault_point(job, "after")
        ledger.deposit(job.payload["account"], job.payload["amount"] - half, job=job)
    return "paid"
'''

# %% tags=["nbval-ignore-output"]
print(proof.grade(MINE, work / "mine", lang))

# %% [markdown] tags=["en"]
# **2. Predict.** Without running it: what does the grade say of `LOOKS` below, a handler that
# looks in the ledger for a row of its job (`ledger.entries()`, each with its `job_id`) and pays,
# unkeyed, only when there is none? Which fault could catch it, and where would that fault have
# to strike? Commit your answer in the box, run the grade, then move
# `gates.fault_point(job, "after")` in `MY_LOOKS` to between the look and the payment and run
# the check: it runs your copy under that freeze.

# %% [markdown] tags=["ru"]
# **2. Предскажите.** Не запуская: что скажет `proof.grade` об обработчике `LOOKS` ниже,
# который ищет в реестре строку своей задачи (`ledger.entries()`, у каждой есть `job_id`) и
# платит без ключа, только если такой строки нет? Какой сбой мог бы его поймать и куда этот
# сбой должен был бы ударить? Зафиксируйте ответ, запустите `proof.grade`, потом переставьте
# в `MY_LOOKS` `gates.fault_point(job, "after")` между поиском и платежом и запустите
# проверку: она прогонит вашу копию под этой заморозкой.

# %%
guess = lessons.predict("l7_ex2", lang)  # without widgets: lessons.predict("l7_ex2", lang, answer=...) / без виджетов: lessons.predict("l7_ex2", lang, answer=...)
guess

# %%
LOOKS = '''
from leaselab.harness import effects, gates

def pay(job):
    with effects.Ledger(job.payload["ledger"]) as ledger:
        gates.fault_point(job, "before")
        paid = any(row["job_id"] == job.id for row in ledger.entries())
        if not paid:
            ledger.deposit(job.payload["account"], job.payload["amount"], job=job)
        gates.fault_point(job, "after")
    return "paid"
'''

# %% tags=["nbval-check-output"]
with guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    said = proof.grade(LOOKS, work / "looks", lang)
    print(said)
    guess.reveal("right" if proof.passed(said, lang) else "not_yet")

# %%
MY_LOOKS = '''
from leaselab.harness import effects, gates

def pay(job):
    with effects.Ledger(job.payload["ledger"]) as ledger:
        gates.fault_point(job, "before")
        paid = any(row["job_id"] == job.id for row in ledger.entries())
        if not paid:
            ledger.deposit(job.payload["account"], job.payload["amount"], job=job)
        gates.fault_point(job, "after")
    return "paid"
'''

# %% tags=["nbval-check-output"]
print(proof.check_look_then_pay(MY_LOOKS, work / "my-looks", lang))

# %% [markdown] tags=["en"]
# **3. Write a fault.** `leaselab.harness.gates` has two fault points. Add a third of your own
# with `gates.freeze_until_done_by_another(job)` (for example: freeze the first attempt of job 2
# *before* its payment instead of after), and say which of the three handlers of section 2
# (`KEYED`, `SKIPS_RETRIES`, `KEY_PER_ATTEMPT`) it breaks, and why. Commit your answer in the box
# first. Then write the fault in `MY_FAULT`: the lines the handler runs, with `job` and `gates`
# at hand, striking the first attempt of one job only (`job.attempts == 1`: a freeze on every
# attempt would never let the job finish). `MY_FAULT_AT` says where they go: `"before"` just
# before the payment, `"after"` just after it. The check puts your fault there in each of the
# three handlers and runs each on real workers, with no other fault, so the answer does not depend
# on the machine: which handler paid every account exactly once, and which did not.

# %% [markdown] tags=["ru"]
# **3. Напишите сбой.** В `leaselab.harness.gates` две точки сбоя. Добавьте третью, свою, с
# помощью `gates.freeze_until_done_by_another(job)` (например, заморозьте первую попытку задачи 2
# *перед* платежом, а не после) и скажите, какие из трёх обработчиков раздела 2 (`KEYED`,
# `SKIPS_RETRIES`, `KEY_PER_ATTEMPT`) она ломает и почему. Сначала зафиксируйте ответ. Потом
# впишите сбой в `MY_FAULT`: строки, которые выполнит обработчик (`job` и `gates` в них
# доступны); сбой должен бить только по первой попытке одной задачи (`job.attempts == 1`:
# заморозка каждой попытки не дала бы задаче завершиться никогда). `MY_FAULT_AT` говорит, куда
# они встанут: `"before"` — перед самым платежом, `"after"` — сразу после него. Проверка вставит
# ваш сбой туда в каждом из трёх обработчиков и запустит каждый на настоящих воркерах без других
# сбоев, так что ответ не зависит от машины: какой обработчик заплатил на каждый счёт ровно
# один раз, а какой — нет.

# %%
fault_guess = lessons.predict("l7_ex3", lang)  # without widgets: lessons.predict("l7_ex3", lang, answer=...) / без виджетов: lessons.predict("l7_ex3", lang, answer=...)
fault_guess

# %%
MY_FAULT_AT = "before"  # "before" or "after" the payment / "before" или "after": перед платежом или после
MY_FAULT = '''
'''

# %% tags=["nbval-check-output"]
with fault_guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    found = proof.check_fault(
        MY_FAULT,
        MY_FAULT_AT,
        {"KEYED": KEYED, "SKIPS_RETRIES": SKIPS_RETRIES, "KEY_PER_ATTEMPT": KEY_PER_ATTEMPT},
        work / "my-fault",
        lang,
    )
    print(found)
    fault_guess.reveal(found.broken)

# %% [markdown] tags=["en"]
# <details><summary>Answers</summary>
#
# 1. One key per half, the same for every attempt: `key=f"pay-{job.id}-1"` and
#    `key=f"pay-{job.id}-2"`. One key for both halves (`pay-{job.id}`) keeps the first half and
#    drops the second as a repeat: the account gets 5. A key with the attempt in it repeats the
#    payment on every attempt.
# 2. The grade calls it right: after the freeze the retry finds the row and pays nothing, and
#    after the crash there is no row, so the retry pays. It is still wrong. Looking and paying are
#    two statements, and the zombie can be frozen between them: attempt 1 looks (no row) and
#    freezes, attempt 2 looks (no row), pays and finishes, attempt 1 thaws and pays again. Only a
#    fault in that window catches it, which is why the ledger's key is one statement
#    (`INSERT ... ON CONFLICT DO NOTHING` on a unique key), not a look and then a write.
# 3. One fault that does it, with `MY_FAULT_AT = "before"`:
#
#    ```python
#    MY_FAULT = '''
#    if job.id == 2 and job.attempts == 1:
#        gates.freeze_until_done_by_another(job)
#    '''
#    ```
#
#    It breaks `KEY_PER_ATTEMPT` only. Frozen before the payment, attempt 1 pays after attempt 2
#    has paid and finished, and then its own completion is refused (lease lost), but the ledger
#    has already taken its money. `KEY_PER_ATTEMPT` pays twice (account a2 gets 20), and so would
#    `PLAIN`. `SKIPS_RETRIES` pays once, but only because the zombie paid: attempt 2 skipped.
#    `KEYED` pays once whoever comes first: the key is the only fix that holds at every fault
#    point, because the receiver enforces it. Put after the payment, the same freeze breaks the
#    same handler, for lesson 3's reason: attempt 1 has paid, and attempt 2 pays again under a key
#    of its own. A freeze cannot break `SKIPS_RETRIES`: the frozen first attempt always thaws and
#    pays. Only a crash before the payment, the grade's second fault, leaves a job that nobody pays.
# </details>
#
# Clean up: remove the temporary folder (every worker of the trials has already ended).

# %% [markdown] tags=["ru"]
# <details><summary>Ответы</summary>
#
# 1. По ключу на каждую половину, одинаковому для всех попыток: `key=f"pay-{job.id}-1"` и
#    `key=f"pay-{job.id}-2"`. С одним ключом на обе половины (`pay-{job.id}`) реестр сохранит
#    первую половину, а вторую отбросит как повтор: на счёт придёт 5. Ключ с номером попытки
#    повторяет платёж на каждой попытке.
# 2. Проверка признает его верным: после заморозки повтор найдёт строку и ничего не заплатит, а
#    после падения строки нет, и повтор заплатит. И всё же он неверен. Поиск и платёж — два
#    оператора, и зомби может замереть между ними: попытка 1 ищет (строки нет) и замирает,
#    попытка 2 ищет (строки нет), платит и завершает задачу, попытка 1 продолжает работу и платит ещё
#    раз. Поймать это может только сбой в этом промежутке — поэтому ключ в реестре проверяется
#    одним оператором (`INSERT ... ON CONFLICT DO NOTHING` по уникальному ключу), а не поиском и
#    последующей записью.
# 3. Сбой, который это делает, при `MY_FAULT_AT = "before"`:
#
#    ```python
#    MY_FAULT = '''
#    if job.id == 2 and job.attempts == 1:
#        gates.freeze_until_done_by_another(job)
#    '''
#    ```
#
#    Он ломает только `KEY_PER_ATTEMPT`. Замороженная перед платежом попытка 1 платит уже после
#    того, как попытка 2 заплатила и завершила задачу; её собственное завершение потом
#    отклоняется (аренда потеряна), но реестр деньги уже принял. `KEY_PER_ATTEMPT` платит дважды
#    (счёт a2 получает 20), как и `PLAIN`. `SKIPS_RETRIES` платит один раз, но только потому, что
#    заплатил зомби: попытка 2 платёж пропустила. `KEYED` платит один раз, кто бы ни пришёл
#    первым: ключ — единственное исправление, которое выдерживает любую точку сбоя, потому что
#    соблюдает его сам получатель. Та же заморозка после платежа ломает тот же обработчик, но по
#    причине из урока 3: попытка 1 уже заплатила, а попытка 2 платит снова, со своим ключом.
#    Заморозка вообще не может сломать `SKIPS_RETRIES`: замороженная первая попытка всегда
#    размораживается и платит. Задачу, за которую никто не заплатит, оставляет только падение перед
#    платежом — второй сбой `proof.grade`.
# </details>
#
# Уберём за собой: удалим временную папку (все воркеры испытаний уже завершились).

# %% tags=["nbval-check-output"]
say("folder_removed", removed=lessons.cleanup(work))
