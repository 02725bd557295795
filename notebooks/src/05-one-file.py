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
# # Lesson 5. What one file cannot promise
#
# Lessons 1–4 survived crashed, frozen and duplicated workers. All of those are faults of
# a *process*. This lesson is about the things a queue in one SQLite file cannot make
# right by itself: the machine losing power, the file living on another machine, and the
# clock that every lease is measured against. It ends with how to size a lease for the
# pauses your workers really have.

# %% [markdown] tags=["ru"]
# # Урок 5. Чего не обещает один файл
#
# Уроки 1–4 справились с воркерами, которые падают, замирают и берут одну задачу вдвоём.
# Всё это сбои *процесса*. Этот урок — о том, чего очередь в одном файле SQLite сама исправить не
# может: машина теряет питание, файл лежит на другой машине, а часы, по которым
# отмеряется каждая аренда, врут. В конце разберём, как выбрать срок аренды под те паузы,
# которые действительно бывают у ваших воркеров.

# %%
import statistics
import threading
import time

from leaselab import ManualClock, Queue, Worker, lessons
from leaselab.lessons import exercises

from leaselab.harness import powercut
lang = lessons.language()
say = lessons.speaker(lang)
work = lessons.scratch("05-one-file")

# %% [markdown] tags=["en"]
# ## A power cut, for real
#
# When SQLite commits, it writes to the file, and the operating system keeps the new
# pages in memory and writes them to the disk later. Only a **sync** (`fsync`) makes the
# disk hold them. A process killed with `SIGKILL` does not matter here: the pages are the
# operating system's, not the process's. A power cut does matter: what was written but
# not yet synced is gone.
#
# SQLite decides when to sync with `synchronous`. In WAL mode at `NORMAL`, a commit is
# not synced; the log is synced at the next checkpoint. At `FULL`, every commit is. The
# README's "Durability" section says what leaselab does: with `durability="full"` (the
# default), every enqueue, every claim and every completion is synced before the call
# returns; heartbeats, failures and reaps are not. With `durability="normal"`, nothing is.
#
# To cut the power without pulling a plug, `powercut.VolatileDisk` is a virtual file
# system for SQLite (through APSW, a Python binding that can define one). Every write
# reaches the file as usual, and every sync records what the file held at that moment.
# `cut()` drops every later write and puts each file back to its last synced content:
# the most a sync promises to keep, and all that may be left after the reboot (a real disk
# may have kept some later writes too, but nothing promises it; and a disk that
# acknowledges a sync it did not make, or tears a page in half, can do worse, which no
# setting above it repairs). A `Session` on that disk runs leaselab's own
# statements, with the durability rule above. The work is the same for both settings:
# three enqueues, a claim and its completion, and one more claim.

# %% [markdown] tags=["ru"]
# ## Отключение питания по-настоящему
#
# При фиксации транзакции SQLite пишет в файл, а операционная система держит новые
# страницы в памяти и записывает их на диск позже. Оказаться на диске их заставляет
# только **синхронизация** (`fsync`). Процесс, убитый сигналом `SIGKILL`, здесь ни на что
# не влияет: страницы принадлежат операционной системе, а не процессу. А отключение
# питания влияет: всё, что записано, но ещё не синхронизировано, пропадает.
#
# Когда синхронизировать, SQLite решает по настройке `synchronous`. В режиме WAL при
# `NORMAL` фиксация транзакции не синхронизируется; файл WAL синхронизируется при
# следующей контрольной точке (checkpoint). При `FULL` синхронизируется каждая фиксация.
# Что делает leaselab, сказано в разделе README «Durability»: при `durability="full"` (по
# умолчанию) каждая постановка в очередь, каждый захват и каждое завершение
# синхронизируются до возврата из вызова, а heartbeat, ошибки и возвраты в очередь — нет.
# При `durability="normal"` не синхронизируется ничего.
#
# Чтобы отключить питание, не выдёргивая вилку, `powercut.VolatileDisk` служит для
# SQLite виртуальной файловой системой (через APSW — обвязку SQLite для Python, которая
# позволяет такую определить). Каждая запись доходит до файла как обычно, а каждая
# синхронизация запоминает, что в этот момент было в файле. `cut()` отбрасывает все
# последующие записи и возвращает каждому файлу содержимое на момент его последней
# синхронизации: ровно то, что синхронизация обещает сохранить, и всё, что может остаться
# после перезагрузки (настоящий диск мог сохранить и часть более поздних записей, но
# этого никто не обещает; а диск, который подтверждает несделанную синхронизацию или
# рвёт страницу пополам, может оставить и меньше, и никакая настройка выше этого не
# исправит). `Session` на этом диске
# выполняет собственные операторы leaselab по правилу долговечности, описанному выше.
# Работа при обеих настройках одна и та же: три постановки в очередь, захват и его
# завершение и ещё один захват.

# %%
def cut_after_workload(durability):
    path = work / f"cut-{durability}.db"
    Queue(path, durability=durability).close()   # an ordinary leaselab file, on the disk before we start / обычный файл leaselab, на диске ещё до начала
    disk = powercut.VolatileDisk()
    powercut.workload(powercut.Session(path, disk, durability=durability))
    disk.cut()
    with Queue(path) as q:                       # after the reboot: read it back with leaselab itself / после перезагрузки: читаем его самим leaselab
        return [(j.id, j.status.value, j.attempts) for j in q.jobs()]

# %% tags=["nbval-check-output"]
for durability in ("normal", "full"):
    say("l5_cut", durability=durability, jobs=cut_after_workload(durability))

# %% [markdown] tags=["en"]
# At `"normal"` every acknowledged write rolled back: the three enqueues the callers were
# told had succeeded, and the completion. Here nothing had been synced since the file was
# made; in a queue that runs for a while, SQLite syncs at each checkpoint (by default
# whenever the WAL file grows past 1000 pages), so what a cut takes is everything since the
# last one. At `"full"` everything survived, the second claim too: job 2 is still
# `running`, at attempt 1. A claim is synced because its fence, `(job id, attempts)`, is
# what an outside store trusts (lesson 3). Had the cut taken the claim back, job 2 would
# be `pending` at 0 attempts, and the next claim would get attempt 1 again: the fence of a
# claim whose worker may already have written with it to an outside store, which could then
# not tell the old claim's write from the new one's.
#
# Now the same work through the real `Queue` in a process of its own, which then kills
# itself with `SIGKILL`, at `durability="normal"`:

# %% [markdown] tags=["ru"]
# При `"normal"` откатились все подтверждённые записи: три постановки в очередь, об
# успехе которых вызывающим уже сообщили, и завершение. Здесь с момента создания файла не
# было ни одной синхронизации; в очереди, которая работает долго, SQLite синхронизирует
# файл WAL при каждой контрольной точке (по умолчанию — когда он вырастает больше 1000
# страниц), так что отключение питания забирает всё, что было после последней из них. При
# `"full"` уцелело всё, и второй захват тоже: задача 2 по-прежнему `running`, попытка 1.
# Захват синхронизируется потому, что его fence, `(id задачи, attempts)`, — то, чему верит
# внешнее хранилище (урок 3). Откати отключение питания этот захват, задача 2 оказалась бы
# `pending` с нулём попыток, и следующий захват снова получил бы попытку 1, то есть fence
# захвата, воркер которого мог уже записать с ним что-то во внешнее хранилище. Отличить
# запись старого захвата от записи нового хранилище тогда не смогло бы.
#
# Теперь та же работа через настоящий `Queue` в отдельном процессе, который потом убивает
# себя сигналом `SIGKILL`, при `durability="normal"`:

# %% tags=["nbval-check-output"]
killed = work / "killed.db"
say("l5_killed_rc", rc=powercut.killed_after_workload(killed, "normal"))
with Queue(killed) as q:
    say("l5_killed", jobs=[(j.id, j.status.value, j.attempts) for j in q.jobs()])

# %% [markdown] tags=["en"]
# Nothing committed was lost, not even the last claim: job 2 is still `running`, and the
# reaper will bring it back when its lease runs out (lesson 1). `SIGKILL` is a crash of
# the process; only a crash of the machine tests `durability`.

# %% [markdown] tags=["ru"]
# Ничего зафиксированного не пропало, даже последний захват: задача 2 всё ещё `running`,
# и reaper вернёт её в очередь, когда истечёт аренда (урок 1). `SIGKILL` роняет процесс;
# проверить `durability` может только падение машины.

# %% [markdown] tags=["en"]
# ## One host
#
# In WAL mode a SQLite file has two more beside it: `-wal`, the log of changes not yet
# copied into the database, and `-shm`, an index into that log which every process maps
# into its memory. The processes that share the file coordinate through `-shm` and through
# file locks, and both work only between processes on **one machine**: the memory of `-shm`
# is shared only by processes of one machine, and the locks of network file systems (NFS,
# SMB, many container volumes) are not reliable enough for SQLite. sqlite.org's page on
# WAL (https://www.sqlite.org/wal.html) says it plainly: all processes using a database
# must be on the same host computer, and WAL does not work over a network filesystem. A leaselab file on a network share, opened by workers on
# several machines, can be corrupted or can give one job to two workers. So every worker
# of a leaselab queue runs on the machine that holds the file. Workers on many machines
# need a database server; lesson 6 puts the same queue on one.

# %% [markdown] tags=["ru"]
# ## Одна машина
#
# В режиме WAL рядом с файлом SQLite лежат ещё два: `-wal`, файл WAL с изменениями, ещё
# не перенесёнными в саму базу, и `-shm`, индекс по файлу WAL, который каждый процесс
# отображает в свою память. Процессы, которые делят файл, договариваются через `-shm` и
# через блокировки файлов, и то и другое работает только между процессами на **одной
# машине**: память из `-shm` общая только для процессов одной машины, а блокировкам сетевых
# файловых систем (NFS, SMB, многие тома контейнеров) SQLite не может доверять. Страница
# sqlite.org о WAL (https://www.sqlite.org/wal.html) говорит об этом прямо: все процессы,
# работающие с базой, должны быть на одной машине, и по сетевой файловой системе WAL не
# работает. Файл leaselab на сетевом диске, открытый
# воркерами с нескольких машин, можно испортить или получить одну задачу у двух воркеров
# сразу. Поэтому все воркеры очереди leaselab работают на той машине, где лежит файл.
# Воркерам на многих машинах нужен сервер базы данных; в уроке 6 мы перенесём на него ту
# же очередь.

# %% tags=["nbval-check-output"]
with Queue(work / "host.db") as q:
    q.enqueue("x")
    say("l5_files", files=sorted(p.name for p in work.glob("host.db*")))

# %% [markdown] tags=["en"]
# ## Clocks
#
# A lease is a point in time, `lease_until`, written by one process and compared with
# "now" by another: the holder's heartbeat writes it, any worker's reaper reads it. So
# leaselab uses wall-clock time (`time.time()`), the one clock whose readings mean the
# same to every process and outlive a reboot. A monotonic clock would not do: Python
# promises only that the difference between two of its readings means something; on
# Linux it counts from the machine's boot, so a deadline written into the file before a
# reboot means nothing after it. The price is that the wall clock can jump: an NTP
# correction, a virtual machine resumed after a night, someone setting the date by hand.
#
# **A jump forward.** Three workers hold three jobs with 30-second leases, heartbeating
# properly. The clock jumps an hour ahead. To every reaper, every lease has expired:

# %% [markdown] tags=["ru"]
# ## Часы
#
# Аренда — это момент времени, `lease_until`: один процесс его записывает, другой
# сравнивает с «сейчас». Heartbeat держателя пишет срок, reaper любого воркера его
# читает. Поэтому leaselab берёт время по настенным часам (`time.time()`) — единственным,
# чьи показания одинаково понимают все процессы и которые переживают перезагрузку.
# Монотонные часы не подойдут: Python обещает лишь, что осмысленна разность двух их
# показаний; в Linux они отсчитываются от загрузки машины, так что срок, записанный в
# файл до перезагрузки, после неё ничего не значит. Плата за это — настенные часы умеют
# прыгать: поправка NTP, виртуальная машина, возобновлённая после ночи простоя, дата,
# выставленная вручную.
#
# **Скачок вперёд.** Три воркера держат три задачи с арендой на 30 секунд и исправно
# продлевают её. Часы прыгают на час вперёд. Для любого reaper все аренды истекли:

# %% tags=["nbval-check-output"]
clock = ManualClock()
q = Queue(work / "clock.db", clock=clock)
q.enqueue_many(["a", "b", "c"])
held = [q.claim(f"w{n}", lease=30) for n in (1, 2, 3)]
clock.advance(10)
for job in held:
    q.heartbeat(job.id, job.token, lease=30)          # everyone is alive and on time / все живы и вовремя
clock.advance(3600)                                    # the clock jumps an hour ahead / часы прыгают на час вперёд
say("l5_jump_reaped", ids=q.reap())
clock.advance(60)
again = [q.claim(f"w{n}", lease=30) for n in (4, 5, 6)]
say("l5_jump_again", pairs=[(j.id, j.attempts) for j in again])

# %% [markdown] tags=["en"]
# Every running job was handed out again while its first handler was still running: each
# handler now runs twice, at once. Fencing keeps the queue's record right (the first
# holders' completions are refused), and idempotent handlers keep the world right
# (lesson 4); nothing can stop the second run.
#
# **A jump backward.** Now a job whose holder died: its lease ran out 70 seconds ago. Then
# the clock is set back an hour. To the reaper, the lease is valid for another 59
# minutes:

# %% [markdown] tags=["ru"]
# Каждую выполнявшуюся задачу выдали снова, пока её первый обработчик ещё работал:
# теперь каждый обработчик выполняется дважды, одновременно. Fencing сохраняет правильной
# запись в очереди (завершения первых держателей отклонят), идемпотентные обработчики
# сохраняют правильным внешний мир (урок 4); второй запуск не остановит ничто.
#
# **Скачок назад.** Теперь задача, держатель которой умер: его аренда истекла 70 секунд
# назад. И тут часы переводят на час назад. Для reaper аренда действительна ещё 59 минут:

# %% tags=["nbval-check-output"]
orphan_id = q.enqueue("orphan")
orphan = q.claim("w7", lease=30)                       # w7 dies at once / w7 сразу умирает
clock.advance(100)
behind = Queue(q.path, clock=ManualClock(clock() - 3600))   # the same file, read by a clock an hour behind / тот же файл, но часы отстают на час
say("l5_back_reaped", ids=behind.reap())
say("l5_back_left", seconds=round(behind.get(orphan_id).lease_until - behind.clock()))
behind.close()

# %% [markdown] tags=["en"]
# The job waits for a dead worker for an hour instead of 30 seconds. Nothing is lost or
# done twice, but nothing is done either. Keep the hosts' clocks synchronized and let NTP
# *slew* (run the clock slightly faster or slower) rather than *step*; and on one host,
# all workers at least read the same clock.

# %% [markdown] tags=["ru"]
# Задача ждёт мёртвого воркера час вместо 30 секунд. Ничего не потеряно и не сделано
# дважды, но и не сделано вовсе. Синхронизируйте часы машин и настройте NTP так, чтобы
# он подводил часы плавно, немного ускоряя или замедляя их, а не переставлял скачком; а
# на одной машине все воркеры хотя бы смотрят на одни и те же часы.

# %% [markdown] tags=["en"]
# ## Sizing the lease
#
# The heartbeat thread stops whenever the whole process stops: a garbage collection, a
# swap-in, a container throttled by its CPU quota, a busy disk. Lesson 1 showed that a
# beat every third of the lease tolerates one missed beat. Put as a pause: the beat due
# at `L/3` after the last one is sent as late as `L/3 + P`. The database needs it before
# `L`, so by the database's view a lease tolerates pauses shorter than `2L/3`. But the
# worker is stricter (lesson 3): it gives the lease up on its own clock at `0.9·L` after
# the last acknowledged beat was *sent*, and from then on its handler's `lease.check()`
# raises. A beat the database still accepts after that is too late: the attempt has
# stopped and its work is wasted. So the rule must use the worker's view: the late beat
# must go out and be acknowledged before `0.9·L`, that is `L/3 + P < 0.9·L`, and a lease
# tolerates pauses shorter than `(0.9 − 1/3)·L ≈ 0.57·L`. Turned around: **the lease must
# be longer than 1.8 times the longest pause** you expect (`P / 0.57`, exactly `30P/17`;
# a beat's round trip comes on top of the pause).
#
# First, measure this kernel: a thread asks to sleep 5 ms, again and again, and records
# how late it wakes up. This is the pause that the heartbeat would see.

# %% [markdown] tags=["ru"]
# ## Как выбрать срок аренды
#
# Поток heartbeat останавливается всякий раз, когда останавливается весь процесс: сборка
# мусора, подкачка из swap, контейнер, упёршийся в квоту процессора, занятый диск. Урок 1
# показал, что heartbeat каждую треть срока выдерживает один пропуск. Если говорить о
# паузах, то heartbeat, который должен уйти через `L/3` после предыдущего, уйдёт через
# `L/3 + P`. Базе данных он нужен до `L`, так что с её точки зрения аренда выдерживает
# паузы короче `2L/3`. Но воркер строже (урок 3): он сам отказывается от аренды по своим
# часам через `0,9·L` после того, как *отправил* последний подтверждённый heartbeat, и с
# этого момента `lease.check()` в его обработчике бросает `LeaseLost`. Heartbeat, который
# база данных примет позже, опоздал: попытка уже остановлена, её работа пропала.
# Поэтому правило должно исходить из того, что видит воркер: запоздалый heartbeat должен
# уйти и получить подтверждение до `0,9·L`, то есть `L/3 + P < 0,9·L`,
# и аренда выдерживает паузы короче `(0,9 − 1/3)·L ≈ 0,57·L`. Отсюда правило: **аренда
# должна быть длиннее самой долгой ожидаемой паузы в 1,8 раза** (`P / 0,57`, а точно —
# `30P/17`; к паузе ещё добавляется время, за которое heartbeat доходит до базы и обратно).
#
# Сначала измерим, что бывает в этом ядре Jupyter: поток раз за разом просит заснуть на
# 5 мс и записывает, на
# сколько позже он просыпается. Именно такую паузу и увидел бы heartbeat.

# %% tags=["nbval-ignore-output"]
late = []
def sleeper():
    for _ in range(300):
        start = time.monotonic()
        time.sleep(0.005)
        late.append(time.monotonic() - start - 0.005)
thread = threading.Thread(target=sleeper)
thread.start(); thread.join()
say("l5_measured", median=statistics.median(late) * 1000, worst=max(late) * 1000)

# %% [markdown] tags=["en"]
# A tenth of a millisecond as a rule; the worst, a few milliseconds on a quiet machine
# and tens of them on a busy one. That is the pause before a beat is sent. The other half
# of the delay is the beat's round trip: a beat sent on time but acknowledged `r` later
# renews the worker's deadline only from when it was sent, so the condition is
# `L/3 + P + r < 0.9·L`. The worker measures `r` itself: every acknowledged heartbeat's round
# trip is counted in a histogram with fixed buckets, `worker.stats.heartbeat_latencies`
# (`leaselab worker` prints it in its last line). Here is a real worker's, on a real queue:
# six half-second jobs with a 0.3-second lease, so a beat every 0.1 s.

# %% [markdown] tags=["ru"]
# Обычно десятые доли миллисекунды; в худшем случае несколько миллисекунд на спокойной
# машине и десятки — на занятой. Это пауза перед отправкой heartbeat. Вторая половина
# задержки — время, за которое heartbeat доходит до базы и возвращается с ответом: heartbeat,
# отправленный вовремя, но подтверждённый через `r`, продлевает срок воркера лишь от момента
# отправки, так что условие принимает вид `L/3 + P + r < 0,9·L`. `r` воркер измеряет сам:
# время ответа на каждый подтверждённый heartbeat попадает в гистограмму с фиксированными
# интервалами, `worker.stats.heartbeat_latencies` (`leaselab worker` печатает её в последней
# строке). Вот гистограмма настоящего воркера на настоящей очереди: шесть задач по полсекунды
# при аренде 0,3 секунды, то есть heartbeat каждые 0,1 с.

# %% tags=["nbval-ignore-output"]
beats_queue = Queue(work / "beats.db")
beats_queue.enqueue_many([{"seconds": 0.5}] * 6)
measuring = Worker(beats_queue, "leaselab.harness.demo:task", name="w1", lease=0.3, exit_when_idle=True, signals=False)
beats = measuring.run().heartbeat_latencies
for bound, count in beats.buckets().items():
    say("l5_beats", bound=bound * 1000, count=count)

# %% [markdown] tags=["en"]
# The worst of each, added, is the delay this machine showed; a lease survives it when
# `L > (P + r) / (0.9 − 1/3)`:

# %% [markdown] tags=["ru"]
# Худшее из каждого ряда, сложенное, — это задержка, которую показала эта машина; аренда её
# переживёт, если `L > (P + r) / (0,9 − 1/3)`:

# %% tags=["nbval-ignore-output"]
worst = max(late) + beats.longest()
say("l5_sized", pause=max(late) * 1000, trip=beats.longest() * 1000, lease=worst / (0.9 - 1 / 3) * 1000)

# %% [markdown] tags=["en"]
# Milliseconds, over a few seconds of one machine. The pauses that matter (a long garbage
# collection, swapping, a container throttled by its CPU quota) are rarer and longer, and you
# see them only by measuring your own workers for days: keep the histogram of every worker,
# take its highest bucket that counted anything, add the longest pause you saw, and size the
# lease from that sum. A bucket's bound is the most a round trip in it took, so the lease
# errs on the long side.

# %% [markdown] tags=["ru"]
# Миллисекунды — за несколько секунд на одной машине. Паузы, которые имеют значение
# (долгая сборка мусора, подкачка из swap, контейнер, упёршийся в квоту процессора), реже и
# длиннее, и увидеть их можно, только измеряя собственных воркеров днями: сохраняйте
# гистограмму каждого воркера, берите самый верхний интервал, в который хоть что-то попало,
# прибавляйте самую долгую замеченную паузу и выбирайте аренду по этой сумме. Граница
# интервала — это самое большее, сколько длился попавший в него ответ, так что ошибиться
# можно только в сторону более долгого срока аренды.

# %% [markdown] tags=["en"]
# Both sides of the choice cost something. A lease **too short** lets a pause look like
# a death: a healthy worker is reaped, its job runs twice, and the first run's writes are
# refused. A lease **too long** makes a real crash expensive. Follow a crashed worker's job
# through the code. Its last heartbeat put `lease_until` at most a lease `L` after the
# crash. Every live worker's pulse runs the reaper every `reap_every` seconds (a second by
# default), on its heartbeat thread, even while its handler is busy, so the first reap
# after `lease_until` comes within `reap_every`. The reap puts the job back with a backoff
# in `run_at` (a second after a first attempt, by default). And an idle worker claims at
# its next poll, at most `max_poll` later (a second by default). So a crashed job runs
# again at most `L + reap_every + backoff + max_poll` after the crash, if a worker is free
# to take it. Say the longest delay you measured over days was 4.5 seconds: an 8-second lease
# survives it (8/3 + 4.5 ≈ 7.17 s, before the worker's 7.2 s). A 7-second lease would not: the
# database would still accept the late beat at 6.83 s, but the worker gave the lease up at
# 6.3 s. And a crashed job waits at most about 8 + 1 + 1 + 1 = 11 seconds.

# %% [markdown] tags=["ru"]
# Ошибиться можно в обе стороны, и обе ошибки дороги. **Слишком короткая** аренда выдаёт
# паузу за смерть: здорового воркера считают мёртвым, его задача выполняется дважды, и
# записи первого запуска отклоняются. **Слишком длинная** аренда делает дорогим настоящее
# падение. Проследим по коду за задачей упавшего воркера. Последний heartbeat отодвинул
# `lease_until` не дальше чем на срок аренды `L` после падения. Пульс каждого живого
# воркера запускает reaper раз в `reap_every` секунд (по умолчанию раз в секунду) в потоке
# heartbeat, даже пока обработчик занят, так что первый возврат в очередь после
# `lease_until` случится не позже чем через `reap_every`. Reaper возвращает задачу с
# отсрочкой повтора в `run_at` (по умолчанию секунда после первой попытки). А свободный
# воркер захватит её при следующем опросе очереди, не позже чем через `max_poll` (по
# умолчанию секунда). Итого задача упавшего воркера снова начнёт выполняться не позже чем
# через `L + reap_every + отсрочка + max_poll` после падения, если есть свободный воркер.
# Пусть самая долгая задержка, измеренная за несколько дней, — 4,5 секунды: аренда в
# 8 секунд её выдерживает (8/3 + 4,5 ≈ 7,17 с, раньше, чем воркер откажется от аренды
# в 7,2 с). Аренда в 7 секунд не выдержала бы: база данных ещё приняла бы запоздалый heartbeat в 6,83 с, но воркер
# отказался от аренды уже в 6,3 с. А задача упавшего воркера ждёт не больше
# 8 + 1 + 1 + 1 = 11 секунд.

# %% [markdown] tags=["en"]
# ## What to do with dead jobs
#
# A job is `dead` when its last attempt failed, timed out or was reaped, or when someone
# cancelled it. The queue never runs a dead job again by itself: that is a person's decision,
# and the `leaselab` command has what it takes.
#
# - **Watch the count.** `leaselab stats` counts jobs by status; a growing number of dead
#   jobs is worth an alert.
# - **Read before acting.** `leaselab jobs --status dead` lists them with their last errors;
#   `leaselab show ID` prints one job's whole last error, traceback included, and its
#   history. The error tells which kind of death it was: a bug in the handler, a service that
#   was down, a payload that can never succeed.
# - **Then decide.** Once the cause is gone (the fix deployed, the service back), `leaselab
#   retry ID` (or `--dead`, every dead job) puts jobs back to `pending` with `--attempts N`
#   fresh attempts, one by default. The attempt count is kept, so the next claim's fence
#   `(job id, attempt)` is new, and a store that accepts only newer fences still refuses the
#   old attempts' writes (lesson 3). A job that can never succeed stays dead, as a record. A
#   pending or running job that must not run any more is stopped with `leaselab cancel ID`:
#   it is dead at once, and its running attempt is fenced off. Retrying every dead job with
#   many attempts only spends workers on the jobs that can never succeed: retry a few, with
#   one attempt each, and watch what happens.
#
# The same through the library, on a clock we move: a letter whose both attempts fail, then
# its retry once the mail server is back.

# %% [markdown] tags=["ru"]
# ## Что делать с мёртвыми задачами
#
# Задача становится `dead`, когда её последняя попытка завершилась ошибкой, превысила
# тайм-аут или была возвращена reaper, а также когда её отменили вручную. Сама очередь
# мёртвую задачу больше не запускает: это решение принимает человек, и у команды `leaselab`
# для этого есть всё нужное.
#
# - **Следите за числом.** `leaselab stats` считает задачи по статусам; растущее число мёртвых
#   задач — повод для оповещения.
# - **Сначала прочитайте.** `leaselab jobs --status dead` перечисляет их с последними
#   ошибками; `leaselab show ID` показывает последнюю ошибку задачи целиком, с трассировкой
#   стека, и её историю. По ошибке видно, от чего задача умерла: ошибка в обработчике,
#   недоступный сервис или данные, с которыми задача не выполнится никогда.
# - **Потом решайте.** Когда причина устранена (исправление выкачено, сервис снова работает),
#   `leaselab retry ID` (или `--dead` — все мёртвые задачи) возвращает задачи в `pending` и
#   даёт им `--attempts N` новых попыток, по умолчанию одну. Счётчик попыток сохраняется,
#   поэтому fence следующего захвата `(id задачи, попытка)` новый, и хранилище, которое
#   принимает только более новые fence, по-прежнему отклоняет записи старых попыток (урок 3).
#   Задача, которая не выполнится никогда, так и остаётся мёртвой, как запись о случившемся.
#   Задачу в `pending` или `running`, которую больше нельзя выполнять, останавливает
#   `leaselab cancel ID`: она сразу становится мёртвой, а её текущую попытку отсекает
#   fencing. Если вернуть в очередь все мёртвые задачи сразу и с многими попытками, воркеры
#   будут тратить время на те, что не выполнятся никогда: возвращайте по несколько, с одной
#   попыткой, и смотрите, что получится.
#
# То же через библиотеку, на часах, которые мы двигаем сами: письмо, обе попытки которого
# заканчиваются ошибкой, и его повтор, когда почтовый сервер снова работает.

# %% tags=["nbval-check-output"]
dead_clock = ManualClock()
dq = Queue(work / "dead.db", clock=dead_clock)
letter = dq.enqueue({"to": "ops@example.org"}, max_attempts=2)
for _ in range(2):                                   # both attempts fail / обе попытки заканчиваются ошибкой
    job = dq.claim("w1", lease=30)
    dq.fail(job.id, job.token, "SMTP 421: service not available")
    dead_clock.advance(60)                           # past the backoff / после отсрочки повтора
dead = dq.get(letter)
say("l5_dead", id=letter, status=dead.status.value, attempts=dead.attempts, error=dead.last_error)
dq.retry([letter])                                   # the mail server is back / почтовый сервер снова работает
again = dq.get(letter)
say("l5_retried", id=letter, status=again.status.value, attempts=again.attempts, max_attempts=again.max_attempts)
dq.close()

# %% [markdown] tags=["en"]
# ## Summary
#
# - `SIGKILL` loses no committed transaction. A power cut loses what was not synced: at
#   `durability="normal"` that is every acknowledged write since the last checkpoint
#   (enqueues, claims, completions, failures); at `"full"` only heartbeats, failures and
#   reaps, which costs a retry. A claim is synced
#   at `"full"`: a fence handed out twice would let a zombie through.
# - WAL's shared memory and file locks work on one machine only: every worker runs where
#   the file is; never put the file on a network file system.
# - Leases are wall-clock deadlines. A jump forward hands every running job out again (a
#   second run of each handler); a jump backward keeps a dead worker's lease alive.
# - The database keeps a lease through pauses shorter than two thirds of it, but the
#   worker gives it up at `0.9·L` after its last acknowledged beat was sent, so the worker
#   keeps it only through pauses shorter than `0.57·L`: pick the lease longer than 1.8
#   times the longest delay you measured (the pause before a beat plus its round trip, which
#   the worker records in `stats.heartbeat_latencies`), and short enough for a crashed job's
#   wait, at most `lease + reap_every + backoff + max_poll`.
# - A dead job waits for a person: count them (`stats`), read why they died (`jobs --status
#   dead`, `show`), and once the cause is gone bring them back with fresh attempts (`retry`);
#   stop what must not run with `cancel`.
#
# ## Exercises
#
# **1. Write code.** Write `choose_lease(pauses)`: the shortest lease in whole seconds
# that survives every delay in a histogram like the worker's above (a dict of seconds to
# counts, as `beats.buckets()` gives), with a heartbeat every third of the lease, by the worker's view: the late
# beat must go out before the worker's own deadline, `0.9·L` after the last one. The
# check tries your function on several histograms against a real queue and a worker's
# own lease.

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - `SIGKILL` не теряет ни одной зафиксированной транзакции. Отключение питания теряет
#   всё, что не синхронизировано: при `durability="normal"` это все подтверждённые записи
#   после последней контрольной точки (постановки в очередь, захваты, завершения, ошибки);
#   при `"full"` — только heartbeat, ошибки и возвраты в очередь, а это стоит лишь
#   повтора. Захват при `"full"` синхронизируется: fence, выданный дважды, пропустил бы
#   зомби.
# - Разделяемая память и блокировки файлов WAL действуют только в пределах одной машины:
#   запускайте все воркеры там, где лежит файл, и никогда не кладите файл на сетевую
#   файловую систему.
# - Сроки аренды отмеряются по настенным часам. Скачок вперёд заново выдаёт все
#   выполняющиеся задачи (каждый обработчик запускается второй раз); скачок назад
#   продлевает жизнь аренде мёртвого воркера.
# - База данных сохраняет аренду при паузах короче двух третей срока, но воркер
#   отказывается от неё через `0,9·L` после отправки последнего подтверждённого heartbeat,
#   так что сам он переживает только паузы короче `0,57·L`. Выбирайте срок в 1,8 раза
#   длиннее самой долгой измеренной задержки (пауза перед heartbeat плюс время ответа на
#   него, которое воркер записывает в `stats.heartbeat_latencies`), но не длиннее, чем
#   позволяет ожидание задачи упавшего воркера: оно доходит до
#   `аренда + reap_every + отсрочка + max_poll`.
# - Мёртвая задача ждёт человека: следите за их числом (`stats`), выясняйте, от чего они
#   умерли (`jobs --status dead`, `show`), а когда причина устранена, возвращайте их в
#   очередь с новыми попытками (`retry`); то, что выполнять больше нельзя, останавливайте
#   командой `cancel`.
#
# ## Упражнения
#
# **1. Напишите код.** Напишите `choose_lease(pauses)`: самую короткую аренду в целых
# секундах, которая переживёт каждую задержку из гистограммы вроде той, что записал воркер
# выше (словарь «секунды → сколько раз», какой возвращает `beats.buckets()`), при heartbeat каждую треть срока и с
# точки зрения воркера: запоздалый heartbeat должен уйти раньше собственного срока
# воркера, `0,9·L` после предыдущего. Проверка испытает вашу функцию на нескольких
# гистограммах против настоящей очереди и аренды самого воркера.

# %%
def choose_lease(pauses):
    ...  # your code here / ваш код здесь

# %% [markdown] tags=["en"]
# <details><summary>Show the answer</summary>
#
# The late beat goes out at `L/3 + P` and must beat the worker's `0.9·L`, so the longest
# pause `P` must be shorter than `(0.9 − 1/3)·L`, that is `L > P / (0.9 − 1/3)`; the
# smallest whole number above that:
#
# ```python
# import math
#
# def choose_lease(pauses):
#     return math.floor(max(pauses) / (0.9 - 1 / 3)) + 1
# ```
#
# The database's view alone, `L > 1.5·P`, gives 7 for a longest delay of 4.5 s: a lease the
# worker gives up during that delay.
# </details>

# %% [markdown] tags=["ru"]
# <details><summary>Показать ответ</summary>
#
# Запоздалый heartbeat уходит в `L/3 + P` и должен опередить срок воркера `0,9·L`, так
# что самая долгая пауза `P` должна быть короче `(0,9 − 1/3)·L`, то есть
# `L > P / (0,9 − 1/3)`; наименьшее целое число больше этого:
#
# ```python
# import math
#
# def choose_lease(pauses):
#     return math.floor(max(pauses) / (0.9 - 1 / 3)) + 1
# ```
#
# Если смотреть только со стороны базы данных, `L > 1,5·P`, для самой долгой задержки
# в 4,5 с получится 7: от такой аренды воркер откажется посреди этой задержки.
# </details>

# %% tags=["nbval-check-output"]
print(exercises.check_lease_size(choose_lease, lang))

# %% [markdown] tags=["en"]
# **2. Write code.** The bound above, `L + reap_every + backoff + max_poll`, was for a
# worker that died on a job's first attempt. Write `worst_wait(lease, attempt, base, cap)`:
# the longest a job can wait, from its worker's death until another worker claims it
# again, when the worker died on attempt `attempt`, the queue's backoff is
# `Backoff(base=base, cap=cap)` (lesson 1), and `reap_every` and `max_poll` are a second
# each, as by default. The check replays each case on a real queue with a clock we move,
# in the worst order: the worker dies right after a heartbeat, the reaper ticks just
# before the lease ends and next a second later, and a free worker polls a second after
# the job becomes runnable. Then it compares your number with the time that took.

# %% [markdown] tags=["ru"]
# **2. Напишите код.** Оценка выше, `L + reap_every + отсрочка + max_poll`, — для воркера,
# который умер на первой попытке задачи. Напишите `worst_wait(lease, attempt, base, cap)`:
# сколько в худшем случае задача ждёт от смерти воркера до того, как её снова захватит
# другой воркер, если воркер умер на попытке `attempt`, отсрочка повтора в очереди —
# `Backoff(base=base, cap=cap)` (урок 1), а `reap_every` и `max_poll` — по секунде, как
# по умолчанию. Проверка разыграет каждый случай на настоящей очереди на часах, которые
# мы двигаем сами, в самом неудачном порядке: воркер умирает сразу после heartbeat,
# reaper срабатывает чуть раньше конца аренды, а в следующий раз — через секунду, свободный
# воркер опрашивает очередь через секунду после того, как задача снова стала доступна. И
# сравнит ваше число с тем, сколько времени на это ушло.

# %%
def worst_wait(lease, attempt, base, cap):
    ...  # your code here / ваш код здесь

# %% [markdown] tags=["en"]
# <details><summary>Show the answer</summary>
#
# The backoff after attempt `n` is `base · 2^(n-1)`, but never more than `cap`:
#
# ```python
# def worst_wait(lease, attempt, base, cap):
#     reap_every = max_poll = 1.0
#     return lease + reap_every + min(cap, base * 2 ** (attempt - 1)) + max_poll
# ```
#
# A job that has crashed workers before waits longer each time: after its eighth attempt,
# with the defaults, its backoff alone would be 128 s, and the cap makes it 60. A
# `Backoff(jitter=...)` stretches each delay by up to that fraction before the cap, so its
# worst case is `min(cap, base · 2^(n-1) · (1 + jitter))`.
# </details>

# %% [markdown] tags=["ru"]
# <details><summary>Показать ответ</summary>
#
# Отсрочка после попытки `n` — `base · 2^(n-1)`, но не больше `cap`:
#
# ```python
# def worst_wait(lease, attempt, base, cap):
#     reap_every = max_poll = 1.0
#     return lease + reap_every + min(cap, base * 2 ** (attempt - 1)) + max_poll
# ```
#
# Задача, на которой воркеры уже падали, с каждым разом ждёт дольше: после восьмой
# попытки при настройках по умолчанию одна только отсрочка была бы 128 с, а потолок
# делает её 60. `Backoff(jitter=...)` растягивает каждую отсрочку ещё на долю до `jitter`,
# но до потолка, так что худший случай тогда — `min(cap, base · 2^(n-1) · (1 + jitter))`.
# </details>

# %% tags=["nbval-check-output"]
print(exercises.check_crash_wait(worst_wait, lang))

# %% [markdown] tags=["en"]
# Clean up: close the files and remove the temporary folder.

# %% [markdown] tags=["ru"]
# Уберём за собой: закроем файлы и удалим временную папку.

# %% tags=["nbval-check-output"]
q.close()
say("folder_removed", removed=lessons.cleanup(work))
