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
# the attempts run out, the job is marked **`dead`** instead of looping forever. A
# lease is 30 seconds unless the worker asks for another length.
#
# First we look at each piece with a clock we move by hand: exact and instant. Then we
# kill a real worker process in the middle of a job and watch the job come back. Last, the
# case a lease alone does not cover: a live process that does nothing.

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
# (**heartbeat**, продление аренды). Если срок прошёл, а продлений не было, **reaper**
# возвращает задачу в очередь, и после **отсрочки повтора** (backoff) её может взять
# кто-то другой. Когда попытки кончаются, задача получает статус **`dead`**, а не
# крутится по кругу вечно. Если воркер не попросил другого срока, аренда длится 30 секунд.
#
# Сначала разберём каждую деталь на часах, которые мы сами переводим вперёд: точно и
# мгновенно.
# Потом убьём настоящий процесс-воркер посреди задачи и посмотрим, как задача вернётся. А в
# конце возьмёмся за случай, от которого одна аренда не спасает: процесс жив, но ничего не делает.

# %%
from leaselab import Backoff, ManualClock, Queue, lessons
from leaselab.backends.sqlite import statements as sql
from leaselab.lab import timeline
from leaselab.lab.i18n import t
from leaselab.harness.fleet import Fleet

lang = lessons.language()          # "en" or "ru": the folder this notebook lives in / "en" или "ru": папка, в которой лежит этот блокнот
say = lessons.speaker(lang)         # print() in the notebook's language / print() на языке блокнота
work = lessons.scratch("01-lease")  # a temporary folder; the last cell removes it / временная папка; последняя ячейка её удаляет

clock = ManualClock()
q = Queue(work / "lease.db", clock=clock, backoff=Backoff(base=1, cap=60))

# %% [markdown] tags=["en"]
# ## A job's whole life on one page
#
# Before the pieces, the map. A job is in one of four statuses, and only the queue's own
# calls move it between them. The picture below is drawn from `leaselab.lifecycle`, a table
# of every move the queue makes, which the project's tests make happen one by one on every
# backend; so it cannot say something the code does not do. This lesson is about the top
# half: `claim`, the `heartbeat` loop, and `reap`, which puts a job whose lease ran out back
# to `pending`, or to `dead` when its attempts are spent. The calls marked `*` are made by
# the worker that holds the job, and they are fenced: lesson 3 is about that star.

# %% [markdown] tags=["ru"]
# ## Вся жизнь задачи на одной странице
#
# Прежде чем разбирать детали, посмотрим на карту. Задача всегда находится в одном из
# четырёх статусов, и переводят её между ними только вызовы самой очереди. Схему ниже
# рисует `leaselab.lifecycle` — таблица всех переходов, которые делает очередь; тесты
# проекта проделывают каждый из них по очереди на каждом бэкенде, так что схема не может
# утверждать того, чего нет в коде. Этот урок — о верхней половине схемы: `claim`, петля
# `heartbeat` и `reap`, который возвращает задачу с истёкшей арендой в `pending`, а если
# попытки кончились, переводит её в `dead`. Вызовы со звёздочкой делает воркер, которому
# задача принадлежит, и у них есть fencing-токен: этой звёздочке посвящён урок 3.

# %%
from leaselab.lessons import diagrams

diagrams.lifecycle(lang)

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
say("l1_claim", status=job.status, attempt=job.attempts, holder=job.worker)
say("l1_lease_left", seconds=job.lease_until - clock())

# %% [markdown] tags=["en"]
# While the lease lasts, nobody else can take the job, even though `w1` has done
# nothing since. That is the point: the queue cannot tell a slow worker from a dead one.

# %% [markdown] tags=["ru"]
# Пока аренда не кончилась, никто другой задачу взять не может, даже если `w1` с тех пор
# не подавал признаков жизни. В этом и смысл: очередь не умеет отличать медленного
# воркера от мёртвого.

# %% tags=["nbval-check-output"]
say("l1_w2_gets", job=q.claim("w2", lease=30))

# %% [markdown] tags=["en"]
# ## The heartbeat pushes the deadline
#
# A live worker renews its lease every third of it: with a 30-second lease, every
# 10 seconds. One missed beat is not fatal: the next one, at 20 s, still lands inside
# the lease. Two missed beats are: the third one is due at 30 s, exactly when the lease
# ends. By the letter of the reaper's statement (below, `lease_until < :now`) a beat at
# that very instant still wins, but an instant later any worker's reaper may take the job,
# and no beat is ever exactly on time. So we keep a safety margin and count only beats
# that land strictly inside the lease: a beat every third of the lease tolerates **one**
# missed beat, not two. The renewal is a single
# fenced statement (fencing is lesson 3). In it, `leaselab_now()` is the queue's clock, read
# as the statement runs, once SQLite has given it the write lock: a beat that had to wait
# for another writer still gets a whole lease.

# %% [markdown] tags=["ru"]
# ## Heartbeat отодвигает срок
#
# Живой воркер продлевает аренду каждую треть её срока: при аренде на 30 секунд это
# раз в 10 секунд. Один пропущенный heartbeat не страшен: следующий, на 20-й секунде,
# ещё успевает до конца аренды. Два пропуска уже опасны: третий heartbeat должен прийти
# на 30-й секунде, ровно когда аренда кончается. По букве оператора reaper (он ниже,
# `lease_until < :now`) heartbeat, пришедший в это самое мгновение, ещё успевает, но
# мгновением позже задачу может забрать reaper любого воркера, а точно вовремя heartbeat
# не приходит никогда. Поэтому мы оставляем запас прочности и считаем только те heartbeat, что
# приходят строго внутри аренды: продление каждую треть срока выдерживает **один**
# пропуск, а не два. Продление — один оператор с проверкой токена (о ней урок 3).
# `leaselab_now()` в нём — часы очереди; их читают во время выполнения оператора, когда
# SQLite уже отдал ему блокировку записи, так что heartbeat, которому пришлось подождать
# другого пишущего, всё равно получает аренду на полный срок.

# %% tags=["nbval-check-output"]
print(sql.HEARTBEAT.strip())

# %% tags=["nbval-check-output"]
clock.advance(10)
new_deadline = q.heartbeat(job.id, job.token, lease=30)
say("l1_after_beat", seconds=new_deadline - clock())

# %% [markdown] tags=["en"]
# ## The worker dies; the reaper takes the job back
#
# Now `w1` "dies": we simply stop calling heartbeat. The reaper is one statement that
# returns every running job whose lease has expired to `pending` (or to `dead` when its
# attempts are spent), with a backoff delay in `run_at`. It leaves alone the tokens in
# `:keep`: a worker running the reaper passes its own, since it is plainly alive, even if a
# freeze let its leases run out; another worker's reaper decides about those.

# %% [markdown] tags=["ru"]
# ## Воркер умер, reaper забирает задачу
#
# Теперь `w1` «умирает»: мы просто перестаём вызывать heartbeat. Reaper — это один
# оператор. Он возвращает в `pending` каждую задачу в статусе `running` с истёкшей
# арендой (или переводит в `dead`, если попытки кончились) и записывает в `run_at`
# отсрочку повтора. Токены из `:keep` он не трогает: воркер, который запускает reaper,
# передаёт туда свои, ведь он явно жив, даже если из-за заморозки его аренды истекли;
# о них решит reaper другого воркера.

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
say("l1_reaped_at", at=29, ids=q.reap())
clock.advance(2)
say("l1_reaped_at", at=31, ids=q.reap())
job = q.get(job_id)
say("l1_reaped_status", status=job.status, attempts=job.attempts, error=lessons.stored_detail(job.last_error, lang))
say("l1_run_again", seconds=job.run_at - clock())

# %% [markdown] tags=["en"]
# ## Backoff: wait before the next attempt
#
# The job is `pending` again but not claimable yet: `run_at` is one second away. If
# something outside is broken (a database, an API), retrying at once only hammers it.
# The delay doubles with each attempt, up to a cap. (The error is what the database
# stores, the words `lease expired`.)

# %% [markdown] tags=["ru"]
# ## Отсрочка повтора: не повторять сразу
#
# Задача снова `pending`, но взять её пока нельзя: до `run_at` ещё секунда. Если сломано
# что-то снаружи (база, внешний API), немедленный повтор только добавит ему нагрузки.
# Отсрочка удваивается с каждой попыткой, пока не упрётся в потолок. (В базе ошибка
# хранится по-английски, `lease expired`; урок печатает её по-русски, как и в истории
# ниже.)

# %% tags=["nbval-check-output"]
say("l1_delays", delays=[q.backoff.delay(n) for n in range(1, 8)])
say("l1_w2_now", job=q.claim("w2", lease=30))
clock.advance(1)
job = q.claim("w2", lease=30)
say("l1_w2_later", id=job.id, attempt=job.attempts)

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
say("l1_reaped_to", ids=q.reap(), status=q.get(job_id).status)
clock.advance(q.backoff.delay(2))
job = q.claim("w3", lease=30)
say("l1_w3_takes", attempt=job.attempts, max=job.max_attempts)
clock.advance(31)
say("l1_reaped_to", ids=q.reap(), status=q.get(job_id).status)
say("l1_attempts", attempts=q.get(job_id).attempts)

# %% [markdown] tags=["en"]
# The whole story is in the job's history. The `events` table is written by triggers in
# the same transaction as each change, so it cannot disagree with the job. With the
# manual clock the times are exact:

# %% [markdown] tags=["ru"]
# Вся жизнь задачи видна в её истории. Таблицу `events` пишут триггеры в той же
# транзакции, что и само изменение, поэтому история не может разойтись с задачей. Часы
# мы двигаем сами, так что время в ней точное:

# %% tags=["nbval-check-output"]
print(lessons.history(q.events(job_id), lang=lang))

# %% [markdown] tags=["en"]
# The same history as a timeline: one lane per worker, one bar per attempt (inside it,
# the job and the attempt number), a triangle where the reaper took the job back,
# hatching where a worker went silent.

# %% [markdown] tags=["ru"]
# Та же история на временной шкале: своя дорожка у каждого воркера, полоса на каждую
# попытку (в полосе — номер задачи и номер попытки), треугольник там, где reaper вернул
# задачу в очередь, штриховка там, где воркер замолчал.

# %%
timeline.draw(timeline.timeline_data(q.events()), lang=lang)

# %% [markdown] tags=["en"]
# ## Now with real processes
#
# Time for a real worker on a real clock. The fleet starts `python -m leaselab worker`
# processes; each heartbeats every third of its lease and, on the same thread, runs the
# reaper every second, even while its handler is busy.
# The lease is 3 seconds, the job 2. As soon as `w1` has claimed the job we kill it
# with `SIGKILL`: no clean-up, no goodbye. Then we start `w2`. The job's first attempt
# waits at a gate after its 2 seconds (`hold`: a file it waits for, which we never
# create), so however slow the machine is today, `w1` cannot finish before the kill.
#
# `SIGKILL` is a crash of the *process*, not of the machine. Everything the process
# committed is already in the operating system's hands and stays in the file; only work
# in progress is lost. A power cut is harsher: a commit made at `synchronous=NORMAL` may
# not have reached the disk yet, and after the cut it rolls back. leaselab's default,
# `durability="full"`, syncs every enqueue, claim and completion before it returns; at
# `durability="normal"` (see the README) a power cut can take back the last of those
# too. Lesson 5 cuts the power for real.

# %% [markdown] tags=["ru"]
# ## Теперь на настоящих процессах
#
# Пора взять настоящего воркера и настоящие часы. Fleet запускает процессы
# `python -m leaselab worker`; каждый продлевает аренду раз в треть срока и в том же
# потоке раз в секунду запускает reaper, даже пока его обработчик занят. Аренда — 3 секунды, задача — 2. Как только `w1` захватил задачу,
# убиваем его сигналом `SIGKILL`: без уборки и без прощаний. Затем запускаем `w2`.
# Первая попытка после своих двух секунд ждёт у шлагбаума (`hold`: файл, появления
# которого она ждёт, а мы его так и не создадим), поэтому, как бы ни тормозила сегодня
# машина, `w1` не успеет закончить до того, как его убьют.
#
# `SIGKILL` роняет *процесс*, а не машину. Всё, что процесс успел зафиксировать, уже
# передано операционной системе и останется в файле; пропадает только незаконченная
# работа. Отключение питания суровее: транзакция, зафиксированная при
# `synchronous=NORMAL`, может ещё не дойти до диска и после сбоя откатиться. По умолчанию leaselab
# работает с `durability="full"` и до возврата из вызова сбрасывает на диск каждую
# постановку в очередь, каждый захват и каждое завершение; при `durability="normal"` (см. README)
# отключение питания может отменить и последние из них. В уроке 5 мы отключим питание
# по-настоящему.

# %% tags=["nbval-ignore-output"]
real = Queue(work / "real.db")
fleet = Fleet(real.path)
real_id = real.enqueue({"seconds": 2, "hold": str(work / "real.gate")})  # attempt 1 waits there: no gate, no finish / попытка 1 ждёт там: нет шлагбаума — нет и конца
fleet.spawn(handler="leaselab.harness.demo:task", lease=3.0, name="w1")
lessons.wait_until(lambda: real.get(real_id).status == "running", what=lessons.text("wait_claim", lang))
fleet.kill("w1")
fleet.spawn(handler="leaselab.harness.demo:task", lease=3.0, name="w2")
lessons.wait_until(lambda: real.get(real_id).status == "done", what=lessons.text("wait_done", lang));

# %% tags=["nbval-check-output"]
done = real.get(real_id)
say("l1_real", status=done.status, attempts=done.attempts, worker=done.worker)
say("l1_w1_after_kill", state=t(fleet.state("w1"), lang))
say("l1_story", events=[(e.kind, e.attempt, e.worker) for e in real.events(real_id) if e.kind != "heartbeat"])

# %% [markdown] tags=["en"]
# The job was not lost: `w1` claimed it and died, nobody renewed the lease, `w2`'s reaper
# took the job back once the lease ran out, and after a one-second backoff `w2` did it
# as attempt 2. On the timeline `w1`'s bar ends at the kill (so soon after the claim that
# it may be only a sliver), where the light grey hatching begins ("killed / down" in the legend: the time `w1` was dead);
# the triangle, about a lease after `w1`'s last heartbeat, is the reap.

# %% [markdown] tags=["ru"]
# Задача не потерялась: `w1` её захватил и умер, аренду никто не продлил, reaper в `w2`
# вернул задачу в очередь, как только аренда истекла, и после секундной отсрочки `w2`
# выполнил её второй попыткой. На шкале полоса `w1` обрывается в момент SIGKILL (так
# скоро после захвата, что от неё может остаться лишь узкая черта), и там же начинается светло-серая штриховка («убит / не
# работает» в легенде — время, когда `w1` был мёртв); треугольник примерно через
# срок аренды после последнего heartbeat от `w1` — возврат задачи в очередь.

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(real.events(), fleet.actions), lang=lang)

# %% [markdown] tags=["en"]
# ## A live process that does nothing
#
# The lease answers a worker that dies. It has no answer for one that lives on and does
# nothing: a handler waiting on a lock nobody will release, reading from a socket that has
# no timeout, blocked behind somebody's long transaction. The heartbeat does not come from
# the handler. It comes from the worker's pulse, a thread of its own, which renews the
# lease as long as the process runs, whatever the handler is doing. So a heartbeat proves
# that the process is alive; it says nothing about whether the job is moving.
#
# Let us watch it happen. With `"hang": true` in its payload the demo handler waits for
# ever. The lease is one second, so `w1` beats three times a second; we wait for six
# heartbeats, two whole leases, and look at the job.

# %% [markdown] tags=["ru"]
# ## Процесс жив, но ничего не делает
#
# Аренда выручает, когда воркер умирает. Но против воркера, который жив и при этом стоит
# на месте, она бессильна. Обработчик может навсегда застрять: ждать блокировку, которую
# никто не отпустит, читать из сокета без тайм-аута, стоять за чужой долгой транзакцией.
# Heartbeat шлёт не обработчик, а пульс воркера — отдельный поток, и он продлевает аренду,
# пока жив процесс, чем бы ни был занят обработчик. Значит, heartbeat доказывает только то,
# что процесс жив, и ничего не говорит о том, движется ли задача.
#
# Проверим на деле. Если в данных задачи есть `"hang": true`, демонстрационный
# обработчик ждёт вечно. Аренда — одна секунда, значит `w1` продлевает её трижды в
# секунду. Дождёмся шести продлений, то есть двух полных сроков аренды, и посмотрим на
# задачу.

# %% tags=["nbval-ignore-output"]
BEATS = 6
stuck = Queue(work / "stuck.db")
stuck_fleet = Fleet(stuck.path)
stuck_id = stuck.enqueue({"hang": True})  # the handler never returns / обработчик никогда не вернётся
stuck_fleet.spawn(handler="leaselab.harness.demo:task", lease=1.0, name="w1")
lessons.wait_until(lambda: sum(e.kind == "heartbeat" for e in stuck.events(stuck_id)) >= BEATS,
                   what=lessons.text("wait_beats", lang, n=BEATS));

# %% tags=["nbval-check-output"]
job = stuck.get(stuck_id)
say("l1_hung_beats", beats=BEATS, status=job.status, attempt=job.attempts, holder=job.worker)
say("l1_hung_alive", alive=stuck_fleet.state("w1") == "running")
say("l1_story", events=[(e.kind, e.attempt, e.worker) for e in stuck.events(stuck_id) if e.kind != "heartbeat"])

# %% [markdown] tags=["en"]
# Two leases have gone by and the job is still `running`, attempt 1, held by `w1`; the
# fleet sees a healthy worker. Nothing in the queue will ever change that: the reaper takes
# back expired leases, and this one is renewed three times a second. More heartbeats would
# only make the history longer. Only a person who notices would end it, by killing `w1`
# (the next cell does, and nothing in this lesson looks at `stuck.db` again).
#
# ## A timeout gives the job back
#
# A job can carry a limit of its own: `enqueue(..., timeout=2)`, or `leaselab enqueue
# --timeout 2`; a worker can set one for every job that has none (`Worker(job_timeout=...)`,
# `leaselab worker --job-timeout`). Past it, the worker's pulse stops renewing that job's
# lease and writes a `timed_out` event, fenced by the token like any other write of the
# worker's: the job is `pending` again after its backoff, or `dead` if that was its last
# attempt. It does not wait for the lease to run out.
#
# What the worker cannot do is stop the handler. Python has no way to kill a thread from
# outside it; the handler goes on waiting, and holds its slot. So the worker takes that
# slot out of service, and a worker whose every slot holds such a handler (with one slot,
# at once) exits with status 5, for whatever started it (systemd, Kubernetes, the lab's
# fleet) to start a fresh process. If the stuck handler ever returns, its result is not
# written: that attempt was given up.
#
# This time the job hangs on its first attempt only (`"hang": 1`), as a dropped connection
# would, and may run two seconds at most.

# %% [markdown] tags=["ru"]
# Прошло два срока аренды, а задача всё так же `running`, попытка 1, за `w1`, и fleet
# считает воркер совершенно здоровым. Сама очередь этого никогда не изменит: reaper
# забирает задачи с истёкшей арендой, а эту продлевают трижды в секунду. Новые heartbeat
# лишь удлинят историю. Положить этому конец может только человек, если заметит и убьёт `w1`
# (следующая ячейка так и делает; к `stuck.db` урок больше не вернётся).
#
# ## Тайм-аут возвращает задачу
#
# У задачи может быть собственный предел: `enqueue(..., timeout=2)` или `leaselab enqueue
# --timeout 2`. Воркер может задать предел и для всех задач, у которых своего нет
# (`Worker(job_timeout=...)`, `leaselab worker --job-timeout`). Когда время вышло, пульс
# воркера перестаёт продлевать аренду этой задачи и записывает событие `timed_out`, с
# проверкой токена, как и любую другую запись воркера. Задача после отсрочки повтора снова
# `pending` или, если попытка была последней, `dead`. Ждать, пока истечёт аренда, не нужно.
#
# А вот остановить сам обработчик воркер не может: в Python нельзя убить поток снаружи.
# Обработчик так и ждёт и не отдаёт свой слот. Поэтому воркер выводит этот слот из работы,
# а когда такими обработчиками заняты все слоты (при одном слоте — сразу же), завершается с
# кодом 5. Дальше дело того, кто его запустил (systemd, Kubernetes, fleet лаборатории):
# поднять свежий процесс. Если застрявший обработчик когда-нибудь всё же вернётся, его
# результат записан не будет: от этой попытки уже отказались.
#
# Теперь задача зависает только на первой попытке (`"hang": 1`), как бывает при оборванном
# соединении, и выполняться может не дольше двух секунд.

# %% tags=["nbval-ignore-output"]
stuck_fleet.kill("w1")  # without a timeout, nobody else would / без тайм-аута этого не сделает никто другой
late = Queue(work / "timeout.db")
late_fleet = Fleet(late.path)
late_id = late.enqueue({"hang": 1}, timeout=2)  # attempt 1 hangs; any attempt may run 2 s at most / попытка 1 зависает; любая попытка может идти не дольше 2 с
late_fleet.spawn(handler="leaselab.harness.demo:task", lease=1.0, name="w2")
lessons.wait_until(lambda: late_fleet.state("w2") == "exited", what=lessons.text("wait_exit", lang, name="w2"));

# %% tags=["nbval-check-output"]
job = late.get(late_id)
[given_up] = [e for e in late.events(late_id) if e.kind == "timed_out"]
say("l1_timed_out", status=job.status, attempts=job.attempts, detail=lessons.stored_detail(given_up.detail, lang))
said = "exiting: every slot holds a handler past its timeout" in late_fleet.log_tail("w2")
say("l1_w2_exit", code=late_fleet.status()[0].returncode, said=said)

# %% [markdown] tags=["en"]
# The job is `pending` again with one attempt used, and `w2` has left, saying why (its log's
# last line: `exiting: every slot holds a handler past its timeout (job 1); start a new
# worker (exit status 5)`). A new worker takes the job after its one-second backoff:

# %% [markdown] tags=["ru"]
# Задача снова `pending`, одна попытка израсходована, а `w2` ушёл и объяснил почему:
# последняя строка его журнала — `exiting: every slot holds a handler past its timeout (job
# 1); start a new worker (exit status 5)`. Новый воркер возьмёт задачу после секундной
# отсрочки повтора:

# %% tags=["nbval-ignore-output"]
late_fleet.spawn(handler="leaselab.harness.demo:task", lease=1.0, name="w3")
lessons.wait_until(lambda: late.get(late_id).status == "done", what=lessons.text("wait_done", lang));

# %% tags=["nbval-check-output"]
say("l1_story", events=[(e.kind, e.attempt, e.worker) for e in late.events(late_id) if e.kind != "heartbeat"])

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(late.events(), late_fleet.actions), lang=lang)

# %% [markdown] tags=["en"]
# On the timeline `w2`'s bar ends at the timeout, not at a reap: no lease ran out. `w3`'s
# bar is the second attempt.
#
# ## Progress, not only life: `lease.beat()`
#
# A timeout is one number for the longest a job may take, and it must cover the slowest
# honest run: a report of ten rows and one of ten million get the same limit, and a hung
# job waits all of it out. A handler can do better by saying that it moves. A handler that
# takes a second parameter gets its `Lease`, and calls `lease.beat()` after each step:
#
# ```python
# def export(job, lease):
#     for batch in batches(job.payload):
#         write(batch)
#         lease.beat()  # progress, not only life
# ```
#
# With a `beat_timeout` (`enqueue(..., beat_timeout=30)`, `Worker(beat_timeout=...)`,
# `--beat-timeout`), the worker keeps renewing the lease only while `beat()` comes at least
# that often; after that long without one, it gives the attempt up exactly as at a timeout,
# with a `timed_out` event (its detail says "reported no progress"). A long job that keeps
# moving runs as long as it needs; a stuck one is given up within `beat_timeout`.
# `beat()` also raises `LeaseLost` when the lease may be gone, as `lease.check()` does
# (lesson 3).

# %% [markdown] tags=["ru"]
# На шкале полоса `w2` обрывается в момент тайм-аута, а не при возврате reaper'ом: аренда
# так и не истекла. Полоса `w3` — вторая попытка.
#
# ## Не только жив, но и движется: `lease.beat()`
#
# Тайм-аут — это одно число на самую долгую задачу, и его приходится выбирать с запасом
# на самый медленный честный прогон: отчёт на десять строк и отчёт на десять миллионов
# получают один и тот же предел, а зависшая задача выжидает его целиком. Точнее выйдет,
# если обработчик сам сообщает, что продвигается. Обработчик со вторым параметром получает
# свой `Lease` и вызывает `lease.beat()` после каждого шага:
#
# ```python
# def export(job, lease):
#     for batch in batches(job.payload):
#         write(batch)
#         lease.beat()  # задача движется, а не просто процесс жив
# ```
#
# С `beat_timeout` (`enqueue(..., beat_timeout=30)`, `Worker(beat_timeout=...)`,
# `--beat-timeout`) воркер продлевает аренду лишь до тех пор, пока `beat()` приходит не
# реже этого срока. Если вызова не было дольше, попытку снимают так же, как по тайм-ауту,
# событием `timed_out`; его пояснение воркер пишет по-английски: `reported no progress`
# («не сообщал о ходе работы»). Длинная задача,
# которая движется, работает сколько нужно, а застрявшую снимут не позже чем через
# `beat_timeout`. Кроме того, `beat()`, как и `lease.check()` (урок 3), выбрасывает
# `LeaseLost`, если аренда, возможно, уже потеряна.

# %% [markdown] tags=["en"]
# ## Summary
#
# - A claim is a **lease** with a deadline, `lease_until` (30 s unless the worker asks
#   otherwise), not ownership for good.
# - A live worker **heartbeats** every third of the lease. That tolerates **one** missed
#   beat: after two, the third is due exactly at `lease_until`, one instant from losing to
#   the reaper, and a safety margin counts it out.
# - The **reaper** is one `UPDATE`: expired leases go back to `pending`, with **backoff**
#   in `run_at`, or to **`dead`** when `attempts` reached `max_attempts`.
# - `SIGKILL` loses only work in progress; a power cut can also roll back the last
#   commits that were not synced (lesson 5).
# - A heartbeat comes from a thread of the worker's own: it proves the process lives, not
#   that the job moves. A hung handler keeps its job for ever unless the job has a
#   **timeout** (`enqueue(timeout=)`, `--job-timeout`): then it is `timed_out` and retried.
#   The thread cannot be killed, so its slot is out of service, and a worker with every slot
#   hung exits with status 5 for its supervisor to restart. `lease.beat()` with a
#   `beat_timeout` asks for progress instead of a fixed limit.
# - The price: a slow worker that misses its lease looks exactly like a dead one. What
#   happens when it wakes up is lesson 3; why its job may run twice is lesson 4.
#
# ## Exercises
#
# **1. Write code.** Write `misses_tolerated(lease, every)`: how many heartbeats in a row
# a worker that beats every `every` seconds may miss, so that the next beat still
# lands strictly inside a lease of `lease` seconds. Keep the lesson's safety margin: a
# beat due exactly at `lease_until` would still win by the letter of REAP, but only at
# that one instant, so count it out. The check cell runs a real queue's reaper just after
# each beat is due, for several leases, and tells you whether you are right.

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - Захват — это **аренда** со сроком `lease_until` (30 с, если воркер не попросил
#   другого), а не владение навсегда.
# - Живой воркер шлёт **heartbeat** каждую треть срока. Это выдерживает **один**
#   пропуск: после двух пропусков третий heartbeat должен прийти ровно в `lease_until`, за
#   мгновение до того, как задачу может забрать reaper, и запас прочности его не считает.
# - **Reaper** — это один `UPDATE`: истёкшие аренды возвращаются в `pending` с
#   **отсрочкой повтора** в `run_at` или уходят в **`dead`**, когда `attempts` дошло до
#   `max_attempts`.
# - `SIGKILL` теряет только незаконченную работу; отключение питания может откатить и
#   последние транзакции, которые не успели сбросить на диск (урок 5).
# - Heartbeat шлёт отдельный поток воркера: он доказывает, что процесс жив, но не что задача
#   движется. Зависший обработчик держит задачу вечно, если у неё нет **тайм-аута**
#   (`enqueue(timeout=)`, `--job-timeout`); с ним попытку снимают (`timed_out`) и задачу
#   повторяют. Поток убить нельзя, поэтому его слот выходит из работы, а воркер, у которого
#   зависли все слоты, завершается с кодом 5, чтобы супервизор запустил новый. `lease.beat()`
#   с `beat_timeout` требует не укладываться в жёсткий срок, а подавать признаки продвижения.
# - Цена: медленный воркер, пропустивший срок, неотличим от мёртвого. Что будет, когда он
#   проснётся, — урок 3; почему его задача может выполниться дважды, — урок 4.
#
# ## Упражнения
#
# **1. Напишите код.** Напишите `misses_tolerated(lease, every)`: сколько heartbeat
# подряд может пропустить воркер, который шлёт их каждые `every` секунд, чтобы
# следующий ещё пришёл строго внутри аренды сроком `lease` секунд. Сохраните запас
# прочности из урока: heartbeat, который должен прийти ровно в `lease_until`, по букве
# REAP ещё успел бы, но лишь в это единственное мгновение, поэтому не считайте его.
# Проверочная ячейка для нескольких сроков аренды запустит reaper настоящей очереди сразу
# после каждого heartbeat и скажет, верен ли ответ.

# %%
def misses_tolerated(lease, every):
    ...  # your code here / ваш код здесь

# %% [markdown] tags=["en"]
# <details><summary>Show the answer</summary>
#
# Beats arrive at `every`, `2·every`, …; the ones strictly before `lease` are the beats
# that count, and all of them but the last may be missed:
#
# ```python
# import math
#
# def misses_tolerated(lease, every):
#     return math.ceil(lease / every) - 2
# ```
#
# For a 30 s lease and a beat every 10 s that is 1.
# </details>

# %% [markdown] tags=["ru"]
# <details><summary>Показать ответ</summary>
#
# Heartbeat приходят в моменты `every`, `2·every`, …; в счёт идут те, что строго раньше
# `lease`, и пропустить можно все, кроме последнего из них:
#
# ```python
# import math
#
# def misses_tolerated(lease, every):
#     return math.ceil(lease / every) - 2
# ```
#
# Для аренды 30 с и heartbeat раз в 10 с это 1.
# </details>

# %% tags=["nbval-check-output"]
from leaselab.lessons import exercises
print(exercises.check_misses(misses_tolerated, lang))

# %% [markdown] tags=["en"]
# **2. Predict.** A job with `max_attempts=5` is claimed by a worker that never
# heartbeats, over and over. With `Backoff(base=1)`, how many seconds pass between the
# first expiry of the lease and the moment the job is `dead`? (Leases are 30 s here;
# expiries are found 1 s late.) Type your number in the box below and press *Commit*; then
# run the cell after it, which compares your guess with the run.

# %% [markdown] tags=["ru"]
# **2. Предскажите.** Задачу с `max_attempts=5` раз за разом захватывает воркер, который
# ни разу не продлевает аренду. Сколько секунд пройдёт при `Backoff(base=1)` от первого
# истечения аренды до момента, когда задача станет `dead`? (Аренда здесь 30 с; истечение
# замечают с опозданием в 1 с.) Впишите своё число в поле ниже и нажмите
# «Зафиксировать», потом выполните следующую ячейку: она сравнит прогноз с запуском.

# %%
guess = lessons.predict("l1_ex2", lang)  # without widgets: lessons.predict("l1_ex2", lang, answer=...) / без виджетов: lessons.predict("l1_ex2", lang, answer=...)
guess

# %% tags=["nbval-check-output"]
with guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    ex = Queue(work / "exercise.db", clock=ManualClock(), backoff=Backoff(base=1))
    ex_id = ex.enqueue("poison", max_attempts=5)
    first_expiry = None
    while ex.get(ex_id).status != "dead":
        ex.clock.advance(max(0.0, ex.get(ex_id).run_at - ex.clock()))
        ex.claim("doomed", lease=30)
        ex.clock.advance(31)
        ex.reap()
        first_expiry = first_expiry or ex.clock()
    say("l1_ex_dead_after", seconds=ex.clock() - first_expiry)
    guess.reveal(ex.clock() - first_expiry)
    ex.close()

# %% [markdown] tags=["en"]
# <details><summary>Why that number</summary>
#
# After each of the first four expiries the job waits its backoff (1, 2, 4, 8 s), then
# is claimed and held for 31 s more: 4 × 31 + 15 = 139 s. The fifth expiry makes it `dead`.
# </details>
#
# **3. Think.** Why does the worker heartbeat every *third* of the lease and not once
# per lease?
#
# <details><summary>Answer</summary>
#
# With one beat per lease, each beat would be due exactly at `lease_until`: every beat
# would have no margin at all, and a single late one (a GC pause, a busy disk) would lose
# the job.
# With three per lease, one beat may be missed.
# </details>
#
# Finally, clean up: stop every worker, close the files and remove the temporary folder.

# %% [markdown] tags=["ru"]
# <details><summary>Откуда это число</summary>
#
# После каждого из первых четырёх истечений задача ждёт отсрочку повтора (1, 2, 4, 8 с),
# потом её захватывают и держат ещё 31 с: 4 × 31 + 15 = 139 с. Пятое истечение делает её
# `dead`.
# </details>
#
# **3. Подумайте.** Почему воркер продлевает аренду каждую *треть* срока, а не раз за срок?
#
# <details><summary>Ответ</summary>
#
# При одном heartbeat за срок каждый должен был бы прийти ровно в `lease_until`, без
# всякого запаса, и одно-единственное опоздание (пауза сборщика мусора, занятый диск)
# стоило бы задачи. При трёх за срок один пропустить можно.
# </details>
#
# Напоследок уберём за собой: остановим всех воркеров, закроем файлы и удалим временную папку.

# %% tags=["nbval-check-output"]
fleets = (fleet, stuck_fleet, late_fleet)
for f in fleets:
    f.shutdown()
say("workers_alive", names=[s.name for f in fleets for s in f.status() if s.state in ("running", "paused", "stopping")])
for f in fleets:
    f.queue.close()
for queue in (real, stuck, late, q):
    queue.close()
say("folder_removed", removed=lessons.cleanup(work))
