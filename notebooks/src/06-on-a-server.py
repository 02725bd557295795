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
# # Lesson 6. Past one file: the same queue on a server
#
# Lesson 5 ended at a wall: every worker of a SQLite queue runs on the machine that holds
# the file. To spread workers over many machines, the queue moves to a **database
# server**, here PostgreSQL. The ideas of lessons 1–4 make the move unchanged, but two
# things do not: the claim statement, and whose clock a lease is measured by. The faults a
# network and a server bring (a worker cut off, a reply lost, a server that crashes) are
# lesson 7's.
#
# This lesson starts its own throw-away PostgreSQL server in a temporary folder (the same
# helper the tests use, `leaselab.harness.pgserver`) and removes it in the last cell.

# %% [markdown] tags=["ru"]
# # Урок 6. За пределами одного файла: та же очередь на сервере
#
# Урок 5 упёрся в стену: все воркеры очереди SQLite работают на той машине, где лежит
# файл. Чтобы разнести воркеров по многим машинам, очередь переезжает на **сервер базы
# данных**, у нас — PostgreSQL. Идеи уроков 1–4 переезжают без изменений, а две вещи —
# нет: оператор захвата и часы, по которым отмеряется аренда. Сбоям, которые приносят
# сеть и сервер (воркер, отрезанный от сети, потерянный ответ, упавший сервер), посвящён
# урок 7.
#
# Урок запускает собственный временный сервер PostgreSQL во временной папке (тем же
# помощником, что и тесты, `leaselab.harness.pgserver`) и удаляет его в последней ячейке.

# %%
import itertools
import os
import time

from leaselab import LeaseLost, Queue, lessons
from leaselab.harness.fleet import Fleet
from leaselab.lessons import exercises
from leaselab.harness import skew
from leaselab.harness.pgserver import PgServer
from leaselab.lessons.race import CLAIM, NAIVE_CLAIM, ServerRace, server_race

lang = lessons.language()
say = lessons.speaker(lang)
work = lessons.scratch("06-on-a-server")
lessons.cleanup_at_exit(work)      # if the kernel dies; the server has a watchdog of its own / на случай, если ядро умрёт; у сервера свой сторож
home = os.getcwd()
os.chdir(work)                     # a fleet on a server queue keeps its logs in the current folder / воркеры очереди на сервере пишут журналы в текущую папку
server = PgServer().start()
databases = (server.create_database(f"lesson{n}") for n in itertools.count(1))   # next(databases): a fresh, empty one / next(databases): новая пустая база
say("l6_server", started=server.port is not None)

# %% [markdown] tags=["en"]
# ## 1. Why leave the file
#
# SQLite lets one writer at a time change the file, and its WAL coordinates processes on
# one host only (lesson 5). A server takes connections from anywhere on the network, and
# many of its transactions can change different rows at once. The queue's URL is all that
# changes: `Queue("postgresql://…")` instead of `Queue("jobs.db")`.
#
# How does that look in jobs per second? We measure on this machine: 1 and then 4 worker
# processes, on each backend, drain the same 300 small jobs (the handler returns its
# payload and does nothing else), and we time from the first claim to the last completion
# in the queue's own history. The workers connect to the server directly, without the
# proxy that lesson 7 puts between a worker and the server.

# %% [markdown] tags=["ru"]
# ## 1. Зачем уходить из файла
#
# SQLite позволяет менять файл только одному пишущему одновременно, а его WAL согласует процессы
# только на одной машине (урок 5). Сервер принимает подключения откуда угодно из сети, и
# многие его транзакции могут одновременно менять разные строки. Меняется только адрес
# очереди: `Queue("postgresql://…")` вместо `Queue("jobs.db")`.
#
# Как это выглядит в задачах в секунду? Измерим на этой машине: 1, а потом 4
# процесса-воркера на каждой из двух баз разбирают одни и те же 300 маленьких задач
# (обработчик возвращает свои входные данные и больше ничего не делает), а время
# отсчитываем от первого захвата до последнего завершения по истории самой очереди.
# Воркеры подключаются к серверу напрямую, без посредника, которого урок 7 ставит
# между воркером и сервером.

# %%
def drain(name, target, workers, jobs=300):
    """Start `workers` worker processes, enqueue `jobs` jobs, wait until all are done; (jobs per second, claims)."""
    queue = Queue(target)
    fleet = Fleet(target, queue=queue, log_dir=work / f"{name}-logs", proxies=False)
    for _ in range(workers):
        fleet.spawn(handler="leaselab.harness.demo:echo", lease=30, poll=0.01, max_poll=0.05)
    queue.enqueue_many([{"n": n} for n in range(jobs)])
    lessons.wait_until(lambda: queue.stats()["done"] == jobs, timeout=300, what=lessons.text("l6_wait_drained", lang))
    fleet.shutdown()
    events = queue.events()
    claims = [e.job_id for e in events if e.kind == "claimed"]
    seconds = max(e.at for e in events if e.kind == "completed") - min(e.at for e in events if e.kind == "claimed")
    queue.close()
    return jobs / seconds, claims

runs = {(backend, workers): drain(f"{backend}-{workers}", work / f"drain-{workers}.db" if backend == "SQLite"
                                 else next(databases), workers)
        for backend in ("SQLite", "PostgreSQL") for workers in (1, 4)}

# %% tags=["nbval-ignore-output"]
for (backend, workers), (rate, _claims) in runs.items():
    say("l6_rate", backend=backend, workers=workers, rate=rate)

# %% tags=["nbval-check-output"]
say("l6_drained", ok=all(sorted(claims) == list(range(1, 301)) for _, claims in runs.values()))

# %% [markdown] tags=["en"]
# Read your own numbers, not ours; on a laptop with many cores they look different from a
# shared two-core machine, and each comparison can fall either way. One worker: every job
# on SQLite is a transaction on a local file, with no network in between, while each call
# to the server is a round trip over a socket; but the server does its part of the work in
# processes of its own, on another core if there is one. So one worker on the server may
# be *slower* than one on the file, or faster. The server in this lesson also runs with
# `fsync=off` (its data dies with it anyway), while the SQLite file syncs every completion
# (`durability="full"`, lesson 5): that gives the server a head start. Four workers: on
# SQLite their writes take turns on the file's one write lock, and a worker that finds it
# taken sleeps before it tries again (SQLite's busy handler waits 1, 2, 5, 10 ms and
# longer), so the lock can sit free while the waiters sleep, and four workers may finish
# *fewer* jobs per second than one. On the server their claims skip each other's rows and
# run side by side, as far as the cores allow: four may be faster than one, or not, when
# four workers and the server share two cores. The real gain of the server is not in this
# table: its workers can sit on other machines.

# %% [markdown] tags=["ru"]
# Смотрите на свои числа, а не на наши: на ноутбуке с многими ядрами они выглядят иначе,
# чем на общей двухъядерной машине, и каждое сравнение может выйти в любую сторону. Один
# воркер: каждая задача в SQLite — транзакция над локальным файлом, без сети посередине, а
# каждый вызов сервера — путь туда и обратно через сокет; зато свою часть работы сервер
# делает в собственных процессах, на другом ядре, если оно есть. Поэтому один воркер на
# сервере может оказаться *медленнее* одного воркера на файле, а может и быстрее. К тому
# же сервер в этом уроке работает с `fsync=off` (его данные всё равно умирают вместе с
# ним), а файл SQLite синхронизирует каждое завершение (`durability="full"`, урок 5): это
# даёт серверу фору. Четыре воркера: в SQLite их записи по очереди проходят через
# единственную блокировку записи файла, а воркер, который застал её занятой, засыпает
# перед новой попыткой (обработчик занятости SQLite ждёт 1, 2, 5, 10 мс и дольше), так что
# блокировка может простаивать, пока ждущие спят, и четыре воркера могут выполнить в
# секунду *меньше* задач, чем один. На сервере их захваты перешагивают через чужие строки
# и выполняются параллельно, насколько позволяют ядра: четыре воркера могут оказаться быстрее
# одного, а могут и нет, когда четыре воркера и сервер делят два ядра. Главный выигрыш
# сервера в эту таблицу не попадает: его воркеры могут работать на других машинах.

# %% [markdown] tags=["en"]
# ## 2. The claim of lesson 2 double-claims on PostgreSQL
#
# Lesson 2 made the claim one statement: the subquery picks the next pending job, the
# `UPDATE` takes it. On SQLite that is safe because the whole statement runs under the
# file's one write lock: nothing can change between the pick and the take. Here is the
# same statement on PostgreSQL, run by two connections, A and B, one step at a time, as
# lesson 2 did for SELECT-then-UPDATE. The queue holds two jobs.

# %% [markdown] tags=["ru"]
# ## 2. Захват из урока 2 на PostgreSQL захватывает дважды
#
# В уроке 2 захват стал одним оператором: подзапрос выбирает следующую задачу в статусе
# `pending`, `UPDATE` её забирает. В SQLite это безопасно, потому что весь оператор
# выполняется под единственной блокировкой записи файла: между выбором и захватом ничего
# не может измениться. Вот тот же оператор на PostgreSQL, его выполняют два подключения,
# A и B, шаг за шагом, как урок 2 делал это для SELECT, а затем UPDATE. В очереди две
# задачи.

# %% tags=["nbval-check-output"]
print(NAIVE_CLAIM.strip())

# %% tags=["nbval-check-output"]
naive = ServerRace(next(databases), NAIVE_CLAIM)
say("l6_isolation", level=naive.isolation())
say("l6_a_claims", id=naive.a_claims())
say("l6_b_waits", waits=naive.b_claims())
naive.a_commits()
say("l6_a_commits")
say("l6_b_gets", id=naive.b_result())
say("l6_claims", claims=naive.claims())
naive.close()

# %% [markdown] tags=["en"]
# Job 1 was claimed twice, and job 2 by nobody. What happened, step by step:
#
# 1. A's subquery picks job 1, and A's `UPDATE` changes that row and locks it until A
#    commits.
# 2. B's subquery runs on B's snapshot, in which A's change is not visible yet: job 1 is
#    still `pending`, so B's subquery picks job 1 too. B's `UPDATE` reaches the row and
#    must wait for A's lock.
# 3. A commits. Under **READ COMMITTED**, PostgreSQL's default isolation, B does not start
#    over. It takes the newest version of the row, the one A wrote, and re-checks the
#    `UPDATE`'s own `WHERE` against it (the documentation describes this re-check under
#    READ COMMITTED in "Transaction Isolation"; in the executor's source it is called
#    EvalPlanQual). That `WHERE`
#    is `id = <the id the subquery chose>`; the subquery is not run again, and its
#    `status = 'pending'` is never checked against the new row. `id = 1` still holds.
# 4. B overwrites A's claim: attempt 2, B's token. A is now a zombie and does not know it
#    yet.
#
# Fencing would refuse A's writes later (lesson 3), but both workers run the handler: one
# job, two runs, on every such collision. Here A's transaction was held open by hand; how
# often does it happen when nobody holds anything? We see it after the fix.
#
# The fix is one clause in the subquery: `FOR UPDATE SKIP LOCKED`. The subquery now locks
# the row it picks, and **skips** rows that another transaction has locked instead of
# waiting for them. That is the claim leaselab runs on PostgreSQL:

# %% [markdown] tags=["ru"]
# Задачу 1 захватили дважды, а задачу 2 — никто. Что произошло, по шагам:
#
# 1. Подзапрос A выбирает задачу 1, и `UPDATE` у A меняет эту строку и блокирует её до
#    фиксации транзакции A.
# 2. Подзапрос B выполняется на снимке данных B, в котором изменения A ещё не видно:
#    задача 1 всё ещё `pending`, и подзапрос B тоже выбирает задачу 1. `UPDATE` у B
#    добирается до строки и вынужден ждать блокировку A.
# 3. A фиксирует транзакцию. На уровне изоляции **READ COMMITTED**, который в PostgreSQL
#    действует по умолчанию, B не начинает заново. Он берёт самую новую версию строки —
#    ту, что записал A, — и перепроверяет на ней `WHERE` самого `UPDATE` (документация
#    описывает эту перепроверку в разделе о READ COMMITTED, «Transaction Isolation»; в
#    исходниках исполнителя запросов она называется EvalPlanQual). Этот `WHERE` — `id = <id, который выбрал подзапрос>`;
#    подзапрос заново не выполняется, и его условие `status = 'pending'` на новой версии
#    строки никто не проверяет. `id = 1` по-прежнему верно.
# 4. B записывает свой захват поверх захвата A: попытка 2, токен B. A теперь зомби и пока
#    об этом не знает.
#
# Fencing потом отклонит записи A (урок 3), но обработчик выполнят оба воркера: одна
# задача, два запуска при каждом таком столкновении. Здесь транзакцию A мы держали
# открытой сами; часто ли это случается, когда никто ничего не держит? Это мы увидим
# после исправления.
#
# Исправление — одна конструкция в подзапросе: `FOR UPDATE SKIP LOCKED`. Теперь подзапрос
# блокирует выбранную строку и **пропускает** строки, заблокированные другой транзакцией,
# вместо того чтобы их ждать. Именно этот захват leaselab выполняет на PostgreSQL:

# %% tags=["nbval-check-output"]
print(CLAIM.strip())

# %% tags=["nbval-check-output"]
safe = ServerRace(next(databases), CLAIM)
say("l6_a_claims", id=safe.a_claims())
say("l6_b_waits", waits=safe.b_claims())
safe.a_commits()
say("l6_a_commits")
say("l6_b_gets", id=safe.b_result())
say("l6_claims", claims=safe.claims())
safe.close()

# %% [markdown] tags=["en"]
# B did not wait at all: its subquery stepped over job 1, locked by A, and took job 2.
#
# Step by step proves the double claim exists; a race shows how often it happens, as in
# lesson 2. `server_race` enqueues 200 jobs in a fresh database and starts 4 worker
# processes that wait at a starting line, then claim as fast as they can until the queue
# is empty, each claim in autocommit: one statement, one transaction, committed at once,
# with no pause anywhere. Then it counts, from the history, the claims of a job someone
# had already claimed. Every claimer asks for the first pending job, so they all aim at
# the same row, and a double claim needs only that one starts its statement before
# another's commit.

# %% [markdown] tags=["ru"]
# B вообще не ждал: его подзапрос перешагнул через задачу 1, заблокированную A, и взял
# задачу 2.
#
# Пошаговый разбор доказывает, что двойной захват бывает; гонка показывает, как часто он
# случается, как в уроке 2. `server_race` ставит 200 задач в новую базу и запускает 4
# процесса-воркера: они ждут на линии старта, а потом захватывают задачи так быстро, как
# могут, пока очередь не опустеет, и каждый захват идёт в режиме autocommit — один
# оператор, одна транзакция, сразу зафиксированная, и никаких пауз. Затем по истории
# считается, сколько захватов пришлось на задачу, которую кто-то уже захватил. Все воркеры
# просят первую задачу в статусе `pending`, то есть целятся в одну и ту же строку, и для
# двойного захвата достаточно, чтобы один начал свой оператор до того, как другой
# зафиксировал свой.

# %% tags=["nbval-ignore-output"]
naive_race = server_race(next(databases), "naive", workers=4, jobs=200)
safe_race = server_race(next(databases), "single", workers=4, jobs=200)
for what, r in (("l6_race_naive", naive_race), ("l6_race_single", safe_race)):
    say("l6_race", what=lessons.text(what, lang), claims=r.claims, jobs=r.jobs, dups=r.duplicates)

# %% tags=["nbval-check-output"]
say("l6_race_facts", naive=naive_race.duplicates > 0, single=safe_race.duplicates)

# %% [markdown] tags=["en"]
# Read your own numbers. In the runs we made on the shared two-core machine that built
# this lesson, the claim of lesson 2 gave between 15 and 70 duplicates per 100 jobs, and
# never none. How many depends on the cores, the load and the scheduler; a run whose
# claimers never overlapped would show none, and that would prove nothing about the next
# run. A double claim needs no held transaction, no pause and no slow network: two
# statements that overlap are enough, and under load they overlap all the time.
# leaselab's claim gives none, however the statements overlap: a row another claim has
# locked is skipped, and a row claimed and committed in the meantime fails the re-check of
# `status = 'pending'` that locking it makes, so it is skipped too.
#
# This is the lesson's headline: **the same SQL can be safe on one engine and unsafe on
# another.** SQLite was safe because it has one writer at a time; a server runs writers
# side by side, and what a statement sees then depends on the isolation level and on the
# locks it takes. Run your concurrency tests on the engine you deploy on.

# %% [markdown] tags=["ru"]
# Смотрите на свои числа. В наших прогонах на общей двухъядерной машине, на которой
# собран этот урок, захват из урока 2 давал от 15 до 70 дублей на сотню задач и ни разу
# не дал ноль. Сколько их будет, зависит от ядер, нагрузки и планировщика; в прогоне, где
# захваты ни разу не пересеклись бы, дублей не было бы вовсе, и это ничего не доказало бы
# о следующем прогоне. Двойному захвату не нужны ни открытая транзакция, ни пауза, ни
# медленная сеть: достаточно, чтобы два оператора пересеклись во времени, а под нагрузкой
# они пересекаются постоянно. У захвата leaselab дублей нет, как бы ни пересекались
# операторы: строку, заблокированную другим захватом, он пропускает, а строка, которую
# тем временем захватили и зафиксировали, не проходит перепроверку `status = 'pending'`,
# которую делает её блокировка, и тоже пропускается.
#
# Это главный вывод урока: **один и тот же SQL может быть безопасен на одной
# СУБД и опасен на другой.** SQLite был безопасен, потому что в нём пишет только один;
# сервер пускает пишущих одновременно, и что увидит оператор, зависит от уровня изоляции
# и от блокировок, которые он берёт. Проверяйте конкурентный код на той СУБД, на которой
# он будет работать.

# %% [markdown] tags=["en"]
# ## 3. Whose clock
#
# A lease is a deadline written by one process and compared with "now" by another
# (lesson 5). On one host every worker reads the same clock. Workers on many machines read
# many clocks, and they disagree. Suppose each worker took "now" from its own machine,
# and two machines are a minute off in each direction. A job `held` has a live 30-second
# lease; a job `abandoned` was claimed with a 1-second lease by a worker that died.

# %% [markdown] tags=["ru"]
# ## 3. Чьи часы
#
# Аренда — это срок, который один процесс записывает, а другой сравнивает с «сейчас»
# (урок 5). На одной машине все воркеры смотрят на одни часы. Воркеры на многих машинах
# смотрят на многие часы, и те расходятся. Допустим, каждый воркер брал бы «сейчас» со
# своей машины, а часы двух машин ушли на минуту в разные стороны. У задачи `held`
# действующая аренда на 30 секунд; задачу `abandoned` захватил с арендой на 1 секунду
# воркер, который потом умер.

# %% tags=["nbval-check-output"]
local = next(databases)
honest = Queue(local, clock=time.time)                      # a worker whose clock is right / воркер с верными часами
held_id, abandoned_id = honest.enqueue("held"), honest.enqueue("abandoned")
held = honest.claim("holder", lease=30)
abandoned = honest.claim("crashed", lease=1)                # its worker dies at once / её воркер сразу умирает
time.sleep(1.5)                                             # the abandoned lease has run out / аренда брошенной задачи истекла
fast = Queue(local, clock=lambda: time.time() + 60)         # a worker whose clock is a minute fast / воркер, чьи часы спешат на минуту
slow = Queue(local, clock=lambda: time.time() - 60)         # and one whose clock is a minute slow / и воркер, чьи часы на минуту отстают
say("l6_slow_reaps", ids=slow.reap())
say("l6_fast_reaps", ids=fast.reap())
say("l6_held_now", status=honest.get(held_id).status, attempts=honest.get(held_id).attempts)
try:
    honest.heartbeat(held.id, held.token, lease=30)         # the healthy holder beats on time / здоровый держатель аренды вовремя шлёт heartbeat
    say("l6_holder_beats", accepted=True)
except LeaseLost:
    say("l6_holder_beats", accepted=False)
for q in (honest, fast, slow):
    q.close()

# %% [markdown] tags=["en"]
# The slow worker saw nothing to reap: to it the dead worker's lease is good for almost
# another minute. The fast one reaped both, the abandoned job and the held one: it took a
# live lease from a healthy worker, whose next heartbeat is refused; the job goes back to
# `pending` and will run a second time while the first run is still going.
#
# With a server there is one clock every worker can share: the server's. A
# `Queue("postgresql://…")` without a `clock` takes its time from the server: it reads
# `clock_timestamp()` at most every 30 seconds and, between reads, carries that reading
# forward on a clock of its own host that never jumps when a wall clock is set
# (`leaselab.clock.elapsed`). So every lease is written and compared on the server's time
# as each worker carries it, however wrong the workers' wall clocks are. The carried time
# is not exact, for three reasons:
#
# - The reading: the server's answer comes back half a round trip after it was read, more
#   or less; the queue places it at the midpoint of the round trip, so it may be off by up
#   to half of that round trip (well under a millisecond on a local network).
# - The rate: two hosts' clocks tick at slightly different rates. While NTP disciplines
#   both, they part by microseconds over 30 seconds; an undisciplined quartz may be off by
#   tens of parts per million, a millisecond or two over 30 seconds.
# - A suspend: `time.monotonic` stops while its host is suspended (a laptop's lid, a
#   paused virtual machine), and a time carried on it would then lag the server's by the
#   whole suspend, so a claim could write a lease already in the server's past. So on
#   Linux the queue carries it on `CLOCK_BOOTTIME`, which counts a suspend; on platforms
#   without such a clock it falls back to `time.monotonic`, and a worker that wakes runs
#   behind the server until its next read.
#
# To show that the workers' wall clocks no longer matter, `leaselab.harness.skew.spawn`
# starts a real worker process whose `time.time`, its wall clock, is shifted by a minute
# (its other clocks are not). Same two jobs, now with
# two such workers, a minute fast and a minute slow, with the default clock:

# %% [markdown] tags=["ru"]
# Отстающий воркер не нашёл ничего для возврата в очередь: для него аренда мёртвого
# воркера действительна ещё почти минуту. Спешащий вернул в очередь обе задачи — и
# брошенную, и `held`: он отнял действующую аренду у здорового воркера, чей следующий
# heartbeat отклоняют; задача вернулась в `pending` и выполнится второй раз, пока первый
# запуск ещё идёт.
#
# С сервером появляются общие для всех воркеров часы — часы сервера.
# `Queue("postgresql://…")` без `clock` берёт время у сервера: читает `clock_timestamp()`
# не чаще раза в 30 секунд, а между чтениями отсчитывает время от последнего показания по
# часам своей машины, которые не прыгают, когда переставляют настенные
# (`leaselab.clock.elapsed`). Так что каждая аренда записывается и сравнивается по
# времени сервера, каким его ведёт каждый воркер, как бы ни врали настенные часы самих
# воркеров. Точным это время не будет, и причин три:
#
# - Чтение: ответ сервера приходит примерно через половину обращения к серверу после
#   того, как сервер прочитал свои часы; очередь относит показание к середине обращения,
#   так что ошибка может достигать половины его длительности (в локальной сети — много
#   меньше миллисекунды).
# - Ход: часы двух машин идут с немного разной скоростью. Пока обе подводит NTP, за
#   30 секунд они расходятся на микросекунды; кварц без подстройки может ошибаться на
#   десятки миллионных долей, то есть на миллисекунду-другую за 30 секунд.
# - Сон машины: `time.monotonic` стоит, пока машина спит (закрытая крышка ноутбука,
#   усыплённая виртуальная машина), и время, отсчитанное по нему, отстало бы от
#   сервера на весь сон, так что захват мог бы записать аренду, которая по часам сервера
#   уже в прошлом. Поэтому на Linux очередь отсчитывает время по `CLOCK_BOOTTIME`, который
#   сон учитывает; там, где таких часов нет, она берёт `time.monotonic`, и проснувшийся
#   воркер отстаёт от сервера до следующего чтения.
#
# Чтобы показать, что настенные часы воркеров больше ни на что не влияют,
# `leaselab.harness.skew.spawn` запускает настоящий процесс-воркер, у которого
# `time.time`, настенные часы, сдвинут на минуту (остальные его часы не сдвинуты). Те же две
# задачи, но теперь с двумя такими воркерами — один спешит на минуту, другой на минуту
# отстаёт — и часами по умолчанию:

# %% tags=["nbval-check-output"]
shared = next(databases)
q = Queue(shared)                                           # the server's clock / часы сервера
held_id, abandoned_id = q.enqueue("held"), q.enqueue("abandoned")
held = q.claim("holder", lease=30)
abandoned = q.claim("crashed", lease=1)
skewed = [skew.spawn(shared, +60, "fast", work / "fast.log"), skew.spawn(shared, -60, "slow", work / "slow.log")]
later = q.enqueue("later")                                  # done once a skewed worker has run its loop, reaper included / выполнена, когда воркер со сбитыми часами прошёл свой цикл, вместе с reaper
lessons.wait_until(lambda: q.get(later).status == "done" and q.get(abandoned_id).status == "done",
                   what=lessons.text("wait_done", lang))
time.sleep(1.5)                                             # and a few more reaps, at least one a second / и ещё несколько возвратов в очередь, не реже раза в секунду
say("l6_held_now", status=q.get(held_id).status, attempts=q.get(held_id).attempts)
say("l6_holder_beats", accepted=q.heartbeat(held.id, held.token, lease=30) > q.clock())
say("l6_abandoned_now", status=q.get(abandoned_id).status, attempts=q.get(abandoned_id).attempts,
    kinds=[e.kind for e in q.events(abandoned_id)][:3])
for p in skewed:
    p.terminate(); p.wait()

# %% [markdown] tags=["en"]
# Neither skewed worker stole the live lease, and the abandoned job was reaped and done
# on time. The price is a round trip to the server now and then to learn its time (the
# queue reads it at most every 30 seconds, not on every call).
#
# What the server's clock does *not* fix: a worker that is paused (garbage collection,
# swap, `SIGSTOP`) still misses its heartbeats, and lesson 5's sizing of the lease still
# applies. And the one shared clock can still jump: if the *server's* clock steps forward
# an hour, every lease expires at once (lesson 5's jump, now for everyone). Keep NTP on
# the server slewing, not stepping.

# %% [markdown] tags=["ru"]
# Ни один из воркеров со сбитыми часами не отнял действующую аренду, а брошенную задачу
# вовремя вернули в очередь и выполнили. Плата — иногда сходить к серверу за его временем
# (очередь спрашивает его раз в 30 секунд, а не при каждом вызове).
#
# Чего часы сервера *не* исправляют: замерший воркер (сборка мусора, swap, `SIGSTOP`)
# по-прежнему пропускает heartbeat, и выбор срока аренды из урока 5 остаётся в силе. И
# единственные общие часы всё ещё могут прыгнуть: если *часы сервера* скакнут на час
# вперёд, все аренды истекут разом (скачок из урока 5, теперь для всех сразу). Пусть NTP
# на сервере подводит часы плавно, а не переставляет скачком.

# %% [markdown] tags=["en"]
# ## Summary
#
# - A SQLite file has one writer at a time and one host; a server lets workers on many
#   machines share one queue. Measure before you expect speed: one worker pays a network
#   round trip per call.
# - The claim of lesson 2, `UPDATE … WHERE id = (SELECT … LIMIT 1)`, is safe on SQLite and
#   claims one job twice on PostgreSQL under READ COMMITTED: the second claim waits on
#   the first one's row lock, then re-checks only the outer `WHERE id = …` on the new row.
#   `FOR UPDATE SKIP LOCKED` in the subquery makes it lock its pick and step over locked
#   rows. The same SQL can be safe on one engine and not on another.
# - Workers on many machines disagree about the time. Measured by the workers' clocks, a
#   fast one steals live leases and a slow one keeps dead ones; measured by the server's
#   clock, neither does. The server's time a worker carries is off by up to half the round
#   trip that read it, and by how far the two clocks part between reads (microseconds under
#   NTP); on Linux it counts a suspend of the host, elsewhere it lags by one until the next
#   read. A pause is still a pause, and the server's own clock can still jump.
# - Next, lesson 7: what the network between a worker and the server, and the server
#   itself, can do to a lease.
#
# ## Exercises
#
# **1. Write code.** A worker that runs several jobs at once claims them in one round
# trip. Write `my_batch_claim`: one statement, in the same `%(name)s` style as `CLAIM`, that
# claims up to `%(n)s` runnable jobs in claim order and returns a row for each (the
# parameters are `CLAIM`'s and `n`). Two batches must never share a job, and one must not
# wait for another's locks. The check races A and B as above, on a fresh database of four
# jobs with `n = 2`: A claims and keeps its transaction open, B claims meanwhile, and
# each must get two jobs of its own, B without waiting. The stub is `CLAIM`, which takes
# one.

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - У файла SQLite один пишущий и одна машина; сервер позволяет воркерам на многих
#   машинах делить одну очередь. Не ждите скорости, не измерив: один воркер платит за
#   каждый вызов путём по сети туда и обратно.
# - Захват из урока 2, `UPDATE … WHERE id = (SELECT … LIMIT 1)`, безопасен в SQLite и на
#   PostgreSQL при READ COMMITTED захватывает одну задачу дважды: второй захват ждёт
#   блокировку строки, взятую первым, а потом перепроверяет на новой версии строки только
#   внешний `WHERE id = …`. `FOR UPDATE SKIP LOCKED` в подзапросе заставляет его
#   блокировать свой выбор и перешагивать через заблокированные строки. Один и тот же SQL
#   может быть безопасен на одной СУБД и опасен на другой.
# - Воркеры на многих машинах расходятся во времени. По часам воркеров спешащий отнимает
#   действующие аренды, а отстающий держит мёртвые; по часам сервера — ни то ни другое.
#   Время сервера, которое ведёт воркер, ошибается на половину обращения, в котором его
#   прочитали, и на то, насколько двое часов разойдутся между чтениями (при NTP — на
#   микросекунды); на Linux оно учитывает сон машины, на других системах отстаёт на время
#   сна до следующего чтения. Пауза остаётся паузой, а часы самого сервера всё ещё могут
#   прыгнуть.
# - Дальше, в уроке 7: что с арендой могут сделать сеть между воркером и сервером и сам
#   сервер.
#
# ## Упражнения
#
# **1. Напишите код.** Воркер, который выполняет несколько задач сразу, захватывает их за
# одно обращение к серверу. Напишите `my_batch_claim`: один оператор в том же стиле
# `%(name)s`, что и `CLAIM`, который захватывает до `%(n)s` готовых задач в порядке
# захвата и возвращает по строке на каждую (параметры — те же, что у `CLAIM`, и ещё `n`).
# Две пачки никогда не должны делить задачу, и одна не должна ждать блокировок другой.
# Проверка устроит гонку A и B, как выше, на свежей базе с четырьмя задачами и `n = 2`: A
# захватывает и держит транзакцию открытой, B тем временем захватывает сам, и каждый
# должен получить две свои задачи, а B — не ждать. Заготовка — `CLAIM`, который берёт одну.

# %%
my_batch_claim = CLAIM   # your statement here / ваш оператор здесь

# %% [markdown] tags=["en"]
# <details><summary>Show the answer</summary>
#
# The outer `WHERE` takes every id the subquery picks (`IN` instead of `=`), and the
# subquery picks up to `n`, still locking what it picks and skipping what others locked:
#
# ```python
# my_batch_claim = CLAIM.replace("WHERE id = (", "WHERE id IN (").replace("LIMIT 1", "LIMIT %(n)s")
# ```
#
# With `=` the server refuses a subquery that returns more than one row. Without
# `SKIP LOCKED` B would wait on A's rows and then re-check only `id IN (…)`, the double
# claim of this section once per row. leaselab's batch claim is this statement, except
# that it gives each job of the batch a token of its own (the call's token with the job id
# after it), so that every claim still writes a token no other claim ever wrote.
# </details>

# %% [markdown] tags=["ru"]
# <details><summary>Показать ответ</summary>
#
# Внешний `WHERE` берёт все id, которые выбрал подзапрос (`IN` вместо `=`), а подзапрос
# выбирает до `n` строк, по-прежнему блокируя выбранные и пропуская заблокированные чужими:
#
# ```python
# my_batch_claim = CLAIM.replace("WHERE id = (", "WHERE id IN (").replace("LIMIT 1", "LIMIT %(n)s")
# ```
#
# С `=` сервер ответит ошибкой: подзапрос вернул больше одной строки. Без `SKIP LOCKED`
# B ждал бы строк A, а потом перепроверил бы только `id IN (…)` — двойной захват из этого
# раздела, по разу на строку. Пакетный захват leaselab — тот же оператор, только каждой
# задаче пачки он даёт собственный токен (токен вызова, а за ним id задачи), чтобы каждый
# захват по-прежнему записывал токен, которого не писал ни один другой захват.
# </details>

# %% tags=["nbval-check-output"]
print(exercises.check_server_batch_claim(my_batch_claim, next(databases), lang))

# %% [markdown] tags=["en"]
# **2. Predict.** Another fix people try: keep the subquery as it is, and add
# `AND status = 'pending'` to the outer `WHERE`, so that the re-check after the wait sees
# the job is taken. Under the same interleaving, which job does B get? Commit your answer
# below, then run the cell after it.

# %% [markdown] tags=["ru"]
# **2. Предскажите.** Другое исправление, которое часто пробуют: подзапрос оставить как
# есть, а во внешний `WHERE` добавить `AND status = 'pending'`, чтобы перепроверка после
# ожидания увидела, что задачу уже взяли. Какую задачу при том же чередовании получит B?
# Зафиксируйте ответ ниже, потом выполните следующую ячейку.

# %%
guess = lessons.predict("l6_ex2", lang)  # without widgets: lessons.predict("l6_ex2", lang, answer=...) / без виджетов: lessons.predict("l6_ex2", lang, answer=...)
guess

# %% tags=["nbval-check-output"]
with guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    outer = ServerRace(next(databases), NAIVE_CLAIM.replace(" WHERE id = (", " WHERE status = 'pending' AND id = ("))
    say("l6_a_claims", id=outer.a_claims())
    say("l6_b_waits", waits=outer.b_claims())
    outer.a_commits()
    say("l6_a_commits")
    b = outer.b_result()
    if b is None:
        say("l6_b_gets_nothing")
    else:
        say("l6_b_gets", id=b)
    guess.reveal("none" if b is None else str(b))
    outer.close()

# %% [markdown] tags=["en"]
# <details><summary>Answer</summary>
#
# No job at all. The re-check now fails, so B updates no row: no double claim, but B comes back
# empty-handed although job 2 was pending all along, and it still waited for A's lock.
# Under load, workers keep colliding on the same first row and claim nothing. `SKIP LOCKED`
# is better on both counts: no wait, and the next job.
# </details>
#
# **3. Predict.** Does the server's clock help a worker frozen by `SIGSTOP` for longer
# than its lease? (Hint: what would its heartbeat thread be doing?) The cell starts two
# workers of its own, `w6` and `w7`, on a fresh database, freezes the one that claims the
# job, and waits for the job's second attempt. Commit your answer below first.

# %% [markdown] tags=["ru"]
# <details><summary>Ответ</summary>
#
# Никакую. Теперь перепроверка не проходит, и B не меняет ни одной строки: двойного
# захвата нет, но B уходит ни с чем, хотя задача 2 всё это время ждала в `pending`, а сам
# B ещё и ждал, пока A снимет блокировку. Под нагрузкой воркеры раз за разом
# сталкиваются на одной и той же первой строке и ничего не захватывают. `SKIP LOCKED` лучше по обоим пунктам: ни
# ожидания, ни пустых рук — берётся следующая задача.
# </details>
#
# **3. Предскажите.** Помогут ли часы сервера воркеру, которого `SIGSTOP` заморозил
# дольше, чем длится его аренда? (Подсказка: что в это время делает его поток heartbeat?)
# Ячейка запускает двух собственных воркеров, `w6` и `w7`, на свежей базе, замораживает
# того, кто захватит задачу, и ждёт второй попытки этой задачи. Сначала зафиксируйте ответ
# ниже.

# %%
guess = lessons.predict("l6_ex3", lang)  # without widgets: lessons.predict("l6_ex3", lang, answer=...) / без виджетов: lessons.predict("l6_ex3", lang, answer=...)
guess

# %% tags=["nbval-check-output"]
with guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    pausing = Queue(next(databases))                         # workers of its own, not the dashboard's / свои воркеры, не те, что на панели
    pausing_fleet = Fleet(pausing.path, queue=pausing, log_dir=work / "pausing-logs", proxies=False)
    for name in ("w6", "w7"):
        pausing_fleet.spawn(lease=2.0, name=name)
    frozen_id = pausing.enqueue({"seconds": 1, "hold": str(work / "pausing.gate")})  # attempt 1 waits at the gate / попытка 1 ждёт у шлагбаума
    frozen = lessons.wait_until(lambda: pausing.get(frozen_id).worker, what=lessons.text("wait_claim", lang))
    pausing_fleet.pause(frozen)                              # w6 or w7, on the server's clock / w6 или w7, по часам сервера
    lessons.wait_until(lambda: pausing.get(frozen_id).attempts == 2, timeout=30,
                       what=lessons.text("l6_wait_expired", lang))
    say("l6_frozen_reaped", other=pausing.get(frozen_id).worker != frozen, attempts=pausing.get(frozen_id).attempts)
    guess.reveal("no" if pausing.get(frozen_id).worker != frozen else "yes")

# %% [markdown] tags=["en"]
# <details><summary>Answer</summary>
#
# No. The frozen worker sends no heartbeat, whatever clock the lease is measured by; its
# lease runs out and the job goes to the other worker. The server's clock fixes disagreement between
# clocks, not pauses: size the lease for your pauses (lesson 5).
# </details>
#
# Clean up: end the workers, close the queues, stop the server and remove its folder and
# ours.

# %% [markdown] tags=["ru"]
# <details><summary>Ответ</summary>
#
# Нет. Замерший воркер не шлёт heartbeat, по каким бы часам ни отмерялась аренда;
# аренда истекает, и задача уходит другому воркеру. Часы сервера исправляют расхождение часов, а не
# паузы: выбирайте срок аренды под свои паузы (урок 5).
# </details>
#
# Уберём за собой: завершим воркеров, закроем очереди, остановим сервер и удалим его
# папку и нашу.

# %% tags=["nbval-check-output"]
pausing_fleet.resume(frozen)
(work / "pausing.gate").touch()
pausing_fleet.shutdown()
say("workers_alive", names=[s.name for s in pausing_fleet.status() if s.state in ("running", "paused", "stopping")])
pausing.close(); q.close()
server_folder = server.folder
server.stop()
say("l6_server_removed", removed=not server_folder.exists())
os.chdir(home)
say("folder_removed", removed=lessons.cleanup(work))
