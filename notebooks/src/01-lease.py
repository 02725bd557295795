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
# # Lesson 1. The lease: a job that cannot get stuck
#
# A worker takes a job, starts on it, and dies: the process is killed, the machine
# reboots, the container runs out of memory. Nobody tells the queue. If "taken" simply
# meant `status = 'running'`, the job would stay running forever and nobody would ever
# do it.
#
# leaselab never gives a job away for good. It **leases** it: the claim writes a
# deadline, `lease_until`. While the worker is alive it keeps pushing that deadline
# forward (the **heartbeat**). When the deadline passes with no heartbeat, the
# **reaper** takes the job back and, after a **backoff**, lets someone else try. When
# the attempts run out, the job is marked **`dead`** instead of looping forever.
#
# First we look at each piece with a clock we move by hand: exact and instant. Then we
# kill a real worker process in the middle of a job and watch the job come back.

# %% [markdown] tags=["ru"]
# # Урок 1. Аренда: задача, которая не может застрять
#
# Воркер берёт задачу, начинает её выполнять и умирает: процесс убили, машина
# перезагрузилась, контейнеру не хватило памяти. Очереди об этом никто не сообщает. Если
# бы «взять задачу» означало просто `status = 'running'`, задача так и висела бы в этом
# статусе, и её бы уже никто никогда не выполнил.
#
# Поэтому leaselab не отдаёт задачу насовсем, а **сдаёт в аренду**: при захвате
# записывается срок `lease_until`. Пока воркер жив, он регулярно отодвигает этот срок
# (**heartbeat**). Если срок прошёл, а продлений не было, **reaper** («жнец») забирает
# задачу обратно и после паузы (**backoff**) даёт попробовать кому-то другому. Когда
# попытки кончаются, задача получает статус **`dead`**, а не крутится по кругу вечно.
#
# Сначала разберём каждую деталь на часах, которые двигаем вручную: точно и мгновенно.
# Потом убьём настоящий процесс-воркер посреди задачи и посмотрим, как задача вернётся.

# %%
from leaselab import Backoff, ManualClock, Queue, lessons
from leaselab.backends.sqlite import statements as sql
from leaselab.lab import timeline
from leaselab.lab.fleet import Fleet

lang = lessons.language()          # "en" or "ru": the folder this notebook lives in
work = lessons.scratch("01-lease")  # a temporary folder; the last cell removes it

clock = ManualClock()
q = Queue(work / "lease.db", clock=clock, backoff=Backoff(base=1, cap=60))

# %% [markdown] tags=["en"]
# ## The claim writes a deadline
#
# We enqueue one job that may be tried at most three times and claim it as worker `w1`
# with a 30-second lease. The job now carries `lease_until`, thirty seconds from now.

# %% [markdown] tags=["ru"]
# ## Захват записывает срок
#
# Поставим в очередь одну задачу, которой разрешено не больше трёх попыток, и захватим её
# воркером `w1` с арендой на 30 секунд. Теперь у задачи есть `lease_until`: через
# тридцать секунд от текущего момента.

# %% tags=["nbval-check-output"]
job_id = q.enqueue({"report": "monthly"}, max_attempts=3)
job = q.claim("w1", lease=30)
print("status:", job.status, "| attempt:", job.attempts, "| holder:", job.worker)
print("lease left:", job.lease_until - clock(), "seconds")

# %% [markdown] tags=["en"]
# While the lease lasts, nobody else can take the job, even though `w1` has done
# nothing since. That is the point: the queue cannot tell a slow worker from a dead one.

# %% [markdown] tags=["ru"]
# Пока аренда не кончилась, никто другой задачу взять не может, даже если `w1` с тех пор
# не подавал признаков жизни. В этом и смысл: очередь не умеет отличать медленного
# воркера от мёртвого.

# %% tags=["nbval-check-output"]
print("w2 gets:", q.claim("w2", lease=30))

# %% [markdown] tags=["en"]
# ## The heartbeat pushes the deadline
#
# A live worker renews its lease every third of it: with a 30-second lease, every
# 10 seconds. One missed beat is not fatal; two more are still left before the lease
# runs out. The renewal is a single fenced statement (fencing is lesson 3):

# %% [markdown] tags=["ru"]
# ## Heartbeat отодвигает срок
#
# Живой воркер продлевает аренду каждую треть её срока: при аренде на 30 секунд это
# раз в 10 секунд. Один пропущенный удар ещё не беда: до конца аренды остаётся запас на
# два. Продление делается одним оператором с проверкой токена (о ней урок 3):

# %% tags=["nbval-check-output"]
print(sql.HEARTBEAT.strip())

# %% tags=["nbval-check-output"]
clock.advance(10)
new_deadline = q.heartbeat(job.id, job.token, lease=30)
print("lease left after the heartbeat:", new_deadline - clock(), "seconds")

# %% [markdown] tags=["en"]
# ## The worker dies; the reaper takes the job back
#
# Now `w1` "dies": we simply stop calling heartbeat. The reaper is one statement that
# returns every running job whose lease has expired to `pending` (or to `dead` when its
# attempts are spent), with a backoff delay in `run_at`:

# %% [markdown] tags=["ru"]
# ## Воркер умер, reaper забирает задачу
#
# Теперь `w1` «умирает»: мы просто перестаём вызывать heartbeat. Reaper — это один
# оператор. Он возвращает в `pending` каждую задачу в статусе running с истёкшей арендой
# (или переводит в `dead`, если попытки кончились) и откладывает её через `run_at`:

# %% tags=["nbval-check-output"]
print(sql.REAP.strip())

# %% [markdown] tags=["en"]
# 29 seconds later the lease still holds and the reaper leaves the job alone. Two seconds
# more and the lease is over:

# %% [markdown] tags=["ru"]
# Через 29 секунд аренда ещё действует, и reaper задачу не трогает. Ещё через две
# секунды аренда истекла:

# %% tags=["nbval-check-output"]
clock.advance(29)
print("reaped at +29 s:", q.reap())
clock.advance(2)
print("reaped at +31 s:", q.reap())
job = q.get(job_id)
print("status:", job.status, "| attempts used:", job.attempts, "| last error:", job.last_error)
print("may run again in:", job.run_at - clock(), "seconds")

# %% [markdown] tags=["en"]
# ## Backoff: not straight back into the fire
#
# The job is `pending` again but not claimable yet: `run_at` is one second away. If
# something outside is broken (a database, an API), retrying at once only hammers it.
# The delay doubles with each attempt, up to a cap:

# %% [markdown] tags=["ru"]
# ## Backoff: не бросаться сразу обратно в огонь
#
# Задача снова `pending`, но взять её пока нельзя: до `run_at` ещё секунда. Если сломано
# что-то снаружи (база, внешний API), мгновенный повтор только добавит нагрузки.
# Пауза удваивается с каждой попыткой, но не больше потолка:

# %% tags=["nbval-check-output"]
print("delays after attempts 1..7:", [q.backoff.delay(n) for n in range(1, 8)])
print("w2 right now gets:", q.claim("w2", lease=30))
clock.advance(1)
job = q.claim("w2", lease=30)
print("one second later w2 gets job", job.id, "as attempt", job.attempts)

# %% [markdown] tags=["en"]
# ## `dead`: when the attempts run out
#
# Suppose every worker that touches this job dies (a job that crashes its worker is a
# real thing: a poisoned input, a memory bomb). Let `w2`'s lease expire, and then a
# third worker's. The third attempt was the last one allowed, so the reaper does not
# put the job back: it is `dead`, and a human should look at it.

# %% [markdown] tags=["ru"]
# ## `dead`: когда попытки кончились
#
# Допустим, умирает каждый воркер, который берётся за эту задачу (такое бывает: битые
# входные данные, задача, съедающая всю память). Дадим истечь аренде `w2`, а потом и
# третьего воркера. Третья попытка была последней разрешённой, поэтому reaper не
# возвращает задачу в очередь: она `dead`, и разбираться с ней должен человек.

# %% tags=["nbval-check-output"]
clock.advance(31)
print("reaped:", q.reap(), "->", q.get(job_id).status)
clock.advance(q.backoff.delay(2))
job = q.claim("w3", lease=30)
print("w3 takes attempt", job.attempts, "of", job.max_attempts)
clock.advance(31)
print("reaped:", q.reap(), "->", q.get(job_id).status)
print("attempts:", q.get(job_id).attempts)

# %% [markdown] tags=["en"]
# The whole story is in the job's history. The `events` table is written by triggers in
# the same transaction as each change, so it cannot disagree with the job. With the
# manual clock the times are exact:

# %% [markdown] tags=["ru"]
# Вся история задачи видна в её журнале. Таблицу `events` пишут триггеры в той же
# транзакции, что и само изменение, поэтому журнал не может разойтись с задачей. На
# ручных часах время точное:

# %% tags=["nbval-check-output"]
print(lessons.history(q.events(job_id)))

# %% [markdown] tags=["en"]
# The same history as a timeline: one lane per worker, one bar per attempt, a triangle
# where the reaper took the job back, hatching where a worker went silent.

# %% [markdown] tags=["ru"]
# Та же история на временной шкале: своя дорожка у каждого воркера, полоса на каждую
# попытку, треугольник там, где reaper забрал задачу, штриховка там, где воркер замолчал.

# %%
timeline.draw(timeline.timeline_data(q.events()), lang=lang)

# %% [markdown] tags=["en"]
# ## Now with real processes
#
# Time for a real worker on a real clock. The fleet starts `python -m leaselab worker`
# processes; each heartbeats every third of its lease and runs the reaper in its loop.
# The lease is 2 seconds, and so is the job. As soon as `w1` has claimed the job we
# kill it with `SIGKILL`: no clean-up, no goodbye, like a power cut. Then we start `w2`.

# %% [markdown] tags=["ru"]
# ## Теперь на настоящих процессах
#
# Пора взять настоящего воркера и настоящие часы. Fleet запускает процессы
# `python -m leaselab worker`; каждый продлевает аренду раз в треть срока и сам вызывает
# reaper в своём цикле. Аренда 2 секунды, задача длится столько же. Как только `w1`
# захватил задачу, убиваем его сигналом `SIGKILL`: без уборки и без прощаний, как при
# отключении питания. Затем запускаем `w2`.

# %% tags=["nbval-ignore-output"]
real = Queue(work / "real.db")
fleet = Fleet(real.path)
real_id = real.enqueue({"seconds": 2})
fleet.spawn(handler="leaselab.lessons.demo:task", lease=2.0, name="w1")
lessons.wait_until(lambda: real.get(real_id).status == "running", what="w1 to claim the job")
fleet.kill("w1")
fleet.spawn(handler="leaselab.lessons.demo:task", lease=2.0, name="w2")
lessons.wait_until(lambda: real.get(real_id).status == "done", what="the job to be done");

# %% tags=["nbval-check-output"]
done = real.get(real_id)
print("status:", done.status, "| attempts:", done.attempts, "| finished by:", done.worker)
print("w1 after the kill:", fleet.state("w1"))
print([(e.kind, e.attempt, e.worker) for e in real.events(real_id) if e.kind != "heartbeat"])

# %% [markdown] tags=["en"]
# The job was not lost: `w1` claimed it and died, nobody renewed the lease, `w2`'s reaper
# took the job back once the lease ran out, and after a one-second backoff `w2` did it
# as attempt 2.
# On the timeline the dark hatching is the time `w1` was dead.

# %% [markdown] tags=["ru"]
# Задача не потерялась: `w1` её захватил и умер, аренду никто не продлил, reaper в `w2`
# вернул задачу в очередь, как только аренда истекла, и после секундной паузы `w2`
# выполнил её второй попыткой. Тёмная штриховка на шкале — время, когда `w1` был мёртв.

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(real.events(), fleet.actions), lang=lang)

# %% [markdown] tags=["en"]
# ## Summary
#
# - A claim is a **lease** with a deadline, `lease_until`, not ownership for good.
# - A live worker **heartbeats** every third of the lease, so a missed beat or two is fine.
# - The **reaper** is one `UPDATE`: expired leases go back to `pending`, with **backoff**
#   in `run_at`, or to **`dead`** when `attempts` reached `max_attempts`.
# - The price: a slow worker that misses its lease looks exactly like a dead one. What
#   happens when it wakes up is lesson 3; why its job may run twice is lesson 4.
#
# ## Exercises
#
# Predict the answer first, then run the cell to check.
#
# 1. A job with `max_attempts=5` is claimed by a worker that never heartbeats, over and
#    over. With `Backoff(base=1)`, how many seconds pass between the first expiry of the
#    lease and the moment the job is `dead`? (Leases are 30 s here; expiries are found
#    1 s late.)
# 2. Why does the worker heartbeat every *third* of the lease and not exactly once per lease?

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - Захват — это **аренда** со сроком `lease_until`, а не владение навсегда.
# - Живой воркер шлёт **heartbeat** каждую треть срока, так что пропустить удар-другой не страшно.
# - **Reaper** — это один `UPDATE`: истёкшие аренды возвращаются в `pending` с паузой
#   (**backoff**) в `run_at` или уходят в **`dead`**, когда `attempts` дошло до `max_attempts`.
# - Цена: медленный воркер, пропустивший срок, неотличим от мёртвого. Что будет, когда он
#   проснётся, — урок 3; почему его задача может выполниться дважды, — урок 4.
#
# ## Упражнения
#
# Сначала предскажите ответ, потом запустите ячейку и проверьте.
#
# 1. Задачу с `max_attempts=5` раз за разом захватывает воркер, который ни разу не
#    продлевает аренду. Сколько секунд пройдёт при `Backoff(base=1)` от первого истечения
#    аренды до момента, когда задача станет `dead`? (Аренда здесь 30 с; истечение
#    замечают с опозданием в 1 с.)
# 2. Почему воркер продлевает аренду каждую *треть* срока, а не ровно раз за срок?

# %% tags=["nbval-check-output"]
ex = Queue(work / "exercise.db", clock=ManualClock(), backoff=Backoff(base=1))
ex_id = ex.enqueue("poison", max_attempts=5)
first_expiry = None
while ex.get(ex_id).status != "dead":
    ex.clock.advance(max(0.0, ex.get(ex_id).run_at - ex.clock()))
    ex.claim("doomed", lease=30)
    ex.clock.advance(31)
    ex.reap()
    first_expiry = first_expiry or ex.clock()
print("seconds from the first expiry to dead:", ex.clock() - first_expiry)
ex.close()

# %% [markdown] tags=["en"]
# (2: with one beat per lease, a single late beat — a GC pause, a busy disk — would lose
# the job. With three per lease, two can be missed.)
#
# Finally, clean up: stop every worker, close the files and remove the temporary folder.

# %% [markdown] tags=["ru"]
# (2: при одном ударе за срок хватило бы одного опоздания — паузы GC, занятого диска, —
# чтобы потерять задачу. При трёх ударах за срок можно пропустить два.)
#
# Напоследок уберём за собой: остановим всех воркеров, закроем файлы и удалим временную папку.

# %% tags=["nbval-check-output"]
fleet.shutdown()
print("workers alive:", [s.name for s in fleet.status() if s.state in ("running", "paused", "stopping")])
fleet.queue.close()
real.close()
q.close()
print("temporary folder removed:", lessons.cleanup(work))
