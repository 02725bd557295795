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
# # Lesson 0. A job queue, and the two ways it goes wrong
#
# A web request should answer in milliseconds, but some work takes seconds or minutes:
# sending an email, resizing a photo, building a report. So the request writes a note —
# a **job** — into a **queue** and answers at once, and separate **worker** processes
# take jobs from the queue and do them in the background.
#
# leaselab is such a queue, small enough to read in one sitting: all of it lives in
# **one SQLite file**, and workers are ordinary processes on your machine. In these
# lessons you will start real workers, freeze them, kill them, and watch what the queue
# does about it.
#
# Two situations make background queues hard. Both are below, happening for real.
#
# 1. **A worker crashes in the middle of a job.** The job says `running`, but nobody is
#    running it, and nobody ever will.
# 2. **A worker freezes**, the job is handed to someone else, and then the frozen worker
#    wakes up, believes the job is still its own, and writes over the other's result.
#
# The lessons take these apart one idea at a time:
#
# | lesson | idea | what it saves you from |
# |---|---|---|
# | 1 | lease, heartbeat, reaper, backoff, `dead` | jobs stuck forever behind a dead worker |
# | 2 | claim in a single statement | two workers doing the same job at once |
# | 3 | fencing tokens | a woken "zombie" overwriting a newer result |
# | 4 | at-least-once, idempotent handlers | the damage when a job does run twice |
#
# Each lesson shows the failure first and the mechanism second. Run the cells from top
# to bottom (Shift+Enter).

# %% [markdown] tags=["ru"]
# # Урок 0. Очередь задач и две беды, которые с ней случаются
#
# Веб-запрос должен отвечать за миллисекунды, а некоторая работа занимает секунды и
# минуты: отправить письмо, уменьшить фотографию, собрать отчёт. Поэтому запрос
# записывает заметку — **задачу** — в **очередь** и сразу отвечает, а отдельные
# процессы-**воркеры** берут задачи из очереди и выполняют их в фоне.
#
# leaselab — такая очередь, и она настолько мала, что её можно прочитать за один присест:
# вся она живёт в **одном файле SQLite**, а воркеры — обычные процессы на вашей машине. В
# этих уроках вы будете запускать настоящих воркеров, замораживать их, убивать и
# смотреть, что с этим делает очередь.
#
# Фоновые очереди трудны из-за двух ситуаций. Обе показаны ниже, по-настоящему.
#
# 1. **Воркер падает посреди задачи.** Задача в статусе `running`, но её никто не
#    выполняет и никто никогда не выполнит.
# 2. **Воркер замирает**, задачу отдают другому, а потом замерший просыпается, считает
#    задачу по-прежнему своей и записывает результат поверх чужого.
#
# Уроки разбирают это по одной идее за раз:
#
# | урок | идея | от чего спасает |
# |---|---|---|
# | 1 | аренда, heartbeat, reaper, backoff, `dead` | задачи, навсегда застрявшие за мёртвым воркером |
# | 2 | захват одним оператором | два воркера, делающие одну задачу одновременно |
# | 3 | fencing-токены | проснувшийся «зомби», затирающий более новый результат |
# | 4 | at-least-once, идемпотентные обработчики | вред, когда задача всё-таки выполняется дважды |
#
# Каждый урок сначала показывает поломку, а потом механизм, который от неё спасает.
# Выполняйте ячейки сверху вниз (Shift+Enter).

# %%
from leaselab import Queue, lessons
from leaselab.lab import timeline
from leaselab.lab.fleet import Fleet
from leaselab.lab.dashboard import Lab
from leaselab.lab.scenario import Scenario

lang = lessons.language()
work = lessons.scratch("00-introduction")

# %% [markdown] tags=["en"]
# ## Trouble 1: a worker dies mid-job
#
# A scenario is a short script of what happens to the workers. Here one worker, `w1`,
# takes a job whose handler kills its own process halfway (`kind=crash`). Leases are
# 2 seconds.

# %% [markdown] tags=["ru"]
# ## Беда первая: воркер умирает посреди задачи
#
# Сценарий — это короткая запись того, что происходит с воркерами. Здесь один воркер,
# `w1`, берёт задачу, обработчик которой на полпути убивает собственный процесс
# (`kind=crash`). Аренда — 2 секунды.

# %% tags=["nbval-ignore-output"]
crash = Fleet(work / "crash.db")
Scenario.parse("""
    spawn w1
    enqueue 1 kind=crash seconds=0.3
""", lease=2).run(crash)
lessons.wait_until(lambda: crash.state("w1") == "killed", what="w1 to crash");

# %% tags=["nbval-check-output"]
job = crash.queue.jobs()[0]
print("w1 is", crash.state("w1"), "| its job is", job.status, "| held by", job.worker)

# %% [markdown] tags=["en"]
# That is trouble 1: the job says `running` and names a worker that no longer exists.
# If "running" were all the queue knew, the job would wait forever. leaselab's claim is
# a **lease** that runs out; a worker that finds an expired lease puts the job back.
# Start a second worker and wait:

# %% [markdown] tags=["ru"]
# Это и есть первая беда: задача в статусе `running` и числится за воркером, которого
# больше нет. Если бы очередь знала только «выполняется», задача ждала бы вечно. Но
# захват в leaselab — это **аренда** с концом срока; воркер, нашедший истёкшую аренду,
# возвращает задачу в очередь. Запустим второго воркера и подождём:

# %% tags=["nbval-ignore-output"]
Scenario.parse("""
    spawn w2
    wait idle
""", lease=2).run(crash);

# %% tags=["nbval-check-output"]
job = crash.queue.get(job.id)
print("status:", job.status, "| attempts:", job.attempts, "| done by:", job.worker)

# %% [markdown] tags=["en"]
# ## Trouble 2: a worker freezes and comes back
#
# Now `w1` takes a 2-second job and we freeze it (`pause` sends `SIGSTOP`, as a long
# garbage-collection pause or a suspended laptop would). `w2` takes the job over once the
# lease has run out and finishes it. Then we thaw `w1`.

# %% [markdown] tags=["ru"]
# ## Беда вторая: воркер замирает и возвращается
#
# Теперь `w1` берёт двухсекундную задачу, и мы его замораживаем (`pause` посылает
# `SIGSTOP`, как сделала бы долгая сборка мусора или уснувший ноутбук). Когда аренда
# истекает, задачу подхватывает `w2` и доделывает. Потом размораживаем `w1`.

# %% tags=["nbval-ignore-output"]
freeze = Fleet(work / "freeze.db")
Scenario.parse("""
    spawn w1
    enqueue 1 seconds=2
    wait running=1
    pause w1
    spawn w2
    wait idle
    resume w1
""", lease=2).run(freeze)
lessons.wait_until(lambda: [e for e in freeze.queue.events() if e.kind == "lease_lost"], what="w1's refused write");

# %% tags=["nbval-check-output"]
job = freeze.queue.jobs()[0]
print("result written by:", job.result["worker"], "| attempts:", job.attempts)
print("what w1 tried after waking:", [(e.kind, e.worker) for e in freeze.queue.events() if e.kind == "lease_lost"])

# %% [markdown] tags=["en"]
# The woken `w1` still believed the job was its own. Its write was refused
# (`lease_lost`) because every claim carries a fresh **fencing token** and `w1`'s token
# no longer matched: `w2`'s result stands. Lesson 3 shows what happens without that
# check. The timeline: one lane per worker, the shaded interval is the freeze, the
# triangle the reap, the cross the refused write.

# %% [markdown] tags=["ru"]
# Проснувшийся `w1` всё ещё считал задачу своей. Его запись отклонили (`lease_lost`),
# потому что каждый захват получает свежий **fencing-токен**, а токен `w1` уже не
# совпадал: результат `w2` остался на месте. Что бывает без этой проверки, покажет урок 3.
# Временная шкала: своя дорожка у каждого воркера, закрашенный интервал — заморозка,
# треугольник — reaper, крестик — отклонённая запись.

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(freeze.queue.events(), freeze.actions), lang=lang)

# %% [markdown] tags=["en"]
# ## The two statements behind both rescues
#
# Everything above rests on two SQL statements, the whole of them printed below. The
# claim picks a job and grants its lease (`lease_until`, a fresh `token`) in **one**
# `UPDATE`, so no two workers can take the same job. The completion only touches a row
# that is still `running` **with the caller's token**, so a worker that lost its job
# changes nothing. Lessons 1–3 take each piece apart.

# %% [markdown] tags=["ru"]
# ## Два оператора, на которых держатся оба спасения
#
# Всё, что было выше, держится на двух SQL-операторах; ниже они напечатаны целиком. Захват
# выбирает задачу и выдаёт аренду (`lease_until`, свежий `token`) **одним** `UPDATE`,
# поэтому два воркера не могут взять одну задачу. Завершение меняет только строку, которая
# всё ещё `running` **с токеном вызывающего**, поэтому воркер, потерявший задачу, ничего не
# испортит. Уроки 1–3 разбирают каждую часть.

# %% tags=["nbval-check-output"]
from leaselab.backends.sqlite import statements as sql

print(sql.CLAIM.strip())
print()
print(sql.COMPLETE.strip())

# %% [markdown] tags=["en"]
# ## The playground
#
# The dashboard below runs the same machinery with buttons. Enqueue jobs (ones that
# sleep, fail, or crash their worker), spawn workers, and pause, resume, kill or stop
# each one. The badges tell you what each worker is: *running*, *paused*, *zombie*
# (paused past its lease: it still thinks it holds a job the queue may give away),
# *killed*. "Draw timeline" plots everything so far. Try to lose a job, or to get one
# done twice. The lessons explain what you see.
#
# The dashboard updates itself every second. It is only alive while the kernel runs; on
# GitHub you see a still picture, or nothing.

# %% [markdown] tags=["ru"]
# ## Песочница
#
# Панель ниже запускает тот же механизм кнопками. Ставьте задачи в очередь (которые спят,
# падают или роняют своего воркера), запускайте воркеров, ставьте каждого на паузу,
# продолжайте, убивайте или останавливайте. Значки показывают, что с воркером:
# *работает*, *на паузе*, *зомби* (на паузе дольше аренды: он всё ещё считает задачу
# своей, а очередь может отдать её другому), *убит*. «Нарисовать временную шкалу» — всё, что
# было до сих пор. Попробуйте потерять задачу или добиться, чтобы её выполнили дважды. Что вы
# увидите, объясняют уроки.
#
# Панель обновляется сама каждую секунду. Она жива, только пока работает ядро; на GitHub
# вы увидите застывшую картинку или ничего.

# %% tags=["nbval-ignore-output"]
lab = Lab(str(work / "playground.db"), lang=lang, lease=2.0)
lab

# %% [markdown] tags=["en"]
# ## Summary
#
# - A background queue hands jobs to separate worker processes; here, all of it is one
#   SQLite file.
# - A worker can die mid-job: the queue must notice and give the job out again (lease).
# - A worker can freeze and come back: the queue must refuse its stale writes (fencing).
#
# ## Exercises
#
# 1. Freeze the only worker while it holds a job, for one and a half leases, then thaw it.
#    Nobody else was there to reap. Predict: does `w1` finish its job, and with which
#    attempt? The cell below plays it on the dashboard; watch `w1`'s badge turn to
#    *zombie* meanwhile.
# 2. In the playground: with one worker and a job that crashes it, how long does the job
#    stay `running`? What changes when you press "Reap now"?

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - Фоновая очередь раздаёт задачи отдельным процессам-воркерам; здесь вся она — один
#   файл SQLite.
# - Воркер может умереть посреди задачи: очередь должна это заметить и снова выдать
#   задачу (аренда).
# - Воркер может замереть и вернуться: очередь должна отклонить его устаревшие записи
#   (fencing).
#
# ## Упражнения
#
# 1. Заморозьте единственного воркера, пока он держит задачу, на полторы длины аренды и
#    разморозьте. Забрать задачу было некому. Предскажите: закончит ли `w1` свою задачу и
#    какой попыткой? Ячейка ниже разыгрывает это на панели; посмотрите, как значок `w1`
#    тем временем становится *зомби*.
# 2. В песочнице: один воркер и задача, которая его роняет. Сколько задача пробудет в
#    `running`? Что изменится, если нажать «Собрать просроченные»?

# %% tags=["nbval-check-output"]
Scenario.parse("""
    spawn w1
    enqueue 1 seconds=1
    wait running=1
    pause w1
    wait leases=1.5
""", lease=2).run(lab)
print("w1's badge while frozen:", lab.fleet.status()[0].badge)
Scenario.parse("""
    resume w1
    wait idle
""").run(lab)
job = lab.queue.jobs()[0]
print("status:", job.status, "| attempts:", job.attempts, "| done by:", job.worker)

# %% [markdown] tags=["en"]
# (1: yes, as attempt 1. An expired lease alone takes nothing away: until someone runs
# the reaper, the holder's token is still in the job, and its heartbeat and completion
# are accepted. Lesson 1 shows the reaper; lesson 3, what happens when it did run.)
#
# The last cell ends the workers of the two demonstrations above. The playground stays
# alive, so keep clicking: its workers end and the temporary folder is removed when the
# kernel stops (*Kernel → Shut Down Kernel*, or closing the notebook), or at once with
# `lab.close()`.

# %% [markdown] tags=["ru"]
# (1: да, первой попыткой. Истёкшая аренда сама по себе ничего не отнимает: пока кто-то
# не запустит reaper, токен держателя остаётся в задаче, и его heartbeat и завершение
# принимаются. Reaper разбирается в уроке 1, а что бывает, когда он успел сработать, — в
# уроке 3.)
#
# Последняя ячейка завершает воркеров двух демонстраций выше. Песочница остаётся живой —
# играйте дальше: её воркеры завершатся, а временная папка удалится, когда остановится ядро
# (*Kernel → Shut Down Kernel* или закрытие блокнота), либо сразу — по `lab.close()`.

# %% tags=["nbval-check-output"]
for fleet in (crash, freeze):
    fleet.shutdown()
print("demonstration workers alive:", [s.name for f in (crash, freeze) for s in f.status()
                                       if s.state in ("running", "paused", "stopping")])
for fleet in (crash, freeze):
    fleet.queue.close()
lessons.cleanup_at_exit(work, lab)
