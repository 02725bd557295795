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
# | 0 | a queue, its workers, the two troubles | (this lesson: seeing them happen) |
# | 1 | lease, heartbeat, reaper, backoff, `dead` | jobs stuck forever behind a dead worker |
# | 2 | claim in a single statement | two workers doing the same job at once |
# | 3 | fencing tokens | a woken "zombie" overwriting a newer result |
# | 4 | at-least-once, idempotent handlers | the damage when a job does run twice |
# | 5 | what one file cannot promise | power cuts, network file systems, clocks that jump |
# | 6 | the same queue on a PostgreSQL server | one host only; a claim safe on one engine and not on another; workers' clocks that disagree |
# | 7 | when the network and the server fail | a worker cut off by the network, a reply lost after its write, a crash that forgets a claim |
# | 8 | your turn: break it, then prove it (`leaselab chaos`, `leaselab check`) | trusting a queue nobody has broken on purpose |
# | 9 | every schedule: each interleaving of two claims, then a simulator on virtual time | bugs that only a rare order of steps shows |
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
# Фоновые очереди трудны из-за двух ситуаций. Ниже обе случаются на настоящих процессах.
#
# 1. **Воркер падает посреди задачи.** Задача в статусе `running`, но её никто не
#    выполняет и никто никогда не выполнит.
# 2. **Воркер замирает**, задачу отдают другому, а потом замерший просыпается, считает
#    задачу по-прежнему своей и записывает результат поверх чужого.
#
# Уроки разбирают их по одной идее на урок:
#
# | урок | идея | от чего спасает |
# |---|---|---|
# | 0 | очередь, воркеры и две беды | (этот урок: увидеть, как они случаются) |
# | 1 | аренда, heartbeat, reaper, отсрочка повтора, `dead` | задачи, навсегда застрявшие за мёртвым воркером |
# | 2 | захват одним оператором | два воркера, выполняющие одну задачу одновременно |
# | 3 | fencing-токены | проснувшийся «зомби», который затирает более новый результат |
# | 4 | at-least-once, идемпотентные обработчики | вред, когда задача всё-таки выполняется дважды |
# | 5 | чего не обещает один файл | отключение питания, сетевые файловые системы, скачки часов |
# | 6 | та же очередь на сервере PostgreSQL | одна машина; захват, безопасный на одной СУБД и опасный на другой; расходящиеся часы воркеров |
# | 7 | когда подводят сеть и сервер | воркер, отрезанный от сети; ответ, потерянный после записи; упавший сервер, забывший захват |
# | 8 | ваш ход: сломайте, потом докажите (`leaselab chaos`, `leaselab check`) | доверие к очереди, которую никто нарочно не ломал |
# | 9 | все расписания: каждый вариант чередования двух захватов, потом симулятор на виртуальном времени | ошибки, которые проявляются только при редком порядке шагов |
#
# Каждый урок сначала показывает поломку, а потом механизм, который от неё спасает.
# Выполняйте ячейки сверху вниз (Shift+Enter).

# %%
from leaselab import lessons
from leaselab.lab import timeline
from leaselab.harness.fleet import Fleet
from leaselab.lab.dashboard import Lab
from leaselab.lab.scenario import Scenario
from leaselab.lab.i18n import t

lang = lessons.language()
say = lessons.speaker(lang)
work = lessons.scratch("00-introduction")

# %% [markdown] tags=["en"]
# ## Trouble 1: a worker dies mid-job
#
# A scenario is a short script of what happens to the workers. Here one worker, `w1`,
# takes a job whose handler kills its own process halfway (`kind=crash`). Leases are
# 3 seconds.

# %% [markdown] tags=["ru"]
# ## Беда первая: воркер умирает посреди задачи
#
# Сценарий — это короткая запись того, что происходит с воркерами. Здесь один воркер,
# `w1`, берёт задачу, обработчик которой на полпути убивает собственный процесс
# (`kind=crash`). Аренда — 3 секунды.

# %% tags=["nbval-ignore-output"]
crash = Fleet(work / "crash.db")
Scenario.parse("""
    spawn w1
    enqueue 1 kind=crash seconds=0.3
""", lease=3).run(crash)
lessons.wait_until(lambda: crash.state("w1") == "killed", what=lessons.text("wait_w1_crash", lang));

# %% tags=["nbval-check-output"]
job = crash.queue.jobs()[0]
say("l0_crashed", state=t(crash.state("w1"), lang), status=job.status, worker=job.worker)

# %% [markdown] tags=["en"]
# That is trouble 1: the job says `running` and names a worker that no longer exists.
# If "running" were all the queue knew, the job would wait forever. leaselab's claim is
# a **lease** that runs out; a worker that finds an expired lease puts the job back.
# Start a second worker and wait:

# %% [markdown] tags=["ru"]
# Это и есть первая беда: задача в статусе `running` и числится за воркером, которого
# больше нет. Если бы очередь знала только «выполняется», задача ждала бы вечно. Но
# захват в leaselab — это **аренда** на ограниченный срок; воркер, нашедший истёкшую аренду,
# возвращает задачу в очередь. Запустим второго воркера и подождём:

# %% tags=["nbval-ignore-output"]
Scenario.parse("""
    spawn w2
    wait idle
""", lease=3).run(crash);

# %% tags=["nbval-check-output"]
job = crash.queue.get(job.id)
say("l0_after", status=job.status, attempts=job.attempts, worker=job.worker)

# %% [markdown] tags=["en"]
# ## Trouble 2: a worker freezes and comes back
#
# Now `w1` takes a 2-second job and we freeze it (`pause` sends `SIGSTOP`; a long
# garbage-collection pause or a suspended laptop stops a process the same way). Once the
# lease has run out, `w2` takes the job and runs it from the start. Then we thaw `w1`.
# The job's first attempt waits at a gate after its 2 seconds (`hold`: a file we create
# only once `w2` is done), so however slow the machine is, `w1` cannot finish before the
# freeze.

# %% [markdown] tags=["ru"]
# ## Беда вторая: воркер замирает и возвращается
#
# Теперь `w1` берёт двухсекундную задачу, и мы его замораживаем (`pause` посылает
# `SIGSTOP`; долгая сборка мусора или уснувший ноутбук останавливают процесс так же).
# Когда аренда истекает, задачу берёт `w2` и выполняет её с самого начала. Потом
# размораживаем `w1`. Первая попытка после своих двух секунд ждёт у шлагбаума (`hold`:
# файл, который мы создаём, только когда `w2` закончит), поэтому, как бы ни тормозила
# машина, `w1` не успеет закончить до заморозки.

# %% tags=["nbval-ignore-output"]
freeze = Fleet(work / "freeze.db")
freeze.queue.enqueue({"seconds": 2, "hold": str(work / "freeze.gate")})  # attempt 1 waits there / попытка 1 ждёт там
Scenario.parse("""
    spawn w1
    wait running=1
    pause w1
    spawn w2
    wait idle
""", lease=3).run(freeze)
(work / "freeze.gate").touch()  # only now may w1's attempt finish, once it is thawed / только теперь попытка w1 может закончиться, когда его разморозят
freeze.resume("w1")
lessons.wait_until(lambda: [e for e in freeze.queue.events() if e.kind == "lease_lost"],
                   what=lessons.text("wait_refused", lang));

# %% tags=["nbval-check-output"]
job = freeze.queue.jobs()[0]
say("l0_result_by", worker=job.result["worker"], attempts=job.attempts)
say("l0_zombie_tried", events=[(e.kind, e.worker) for e in freeze.queue.events() if e.kind == "lease_lost"])

# %% [markdown] tags=["en"]
# The woken `w1` still believed the job was its own. Its first write, a heartbeat, was
# refused (`lease_lost`) because every claim carries a fresh **fencing token** and `w1`'s
# token no longer matched. Its own clock had told it too that the lease may have run
# out, so `w1` did not even send its result: `w2`'s stands. Lesson 3 shows what happens without that
# check. The timeline: one lane per worker, a bar per attempt (inside it, job·attempt),
# the shaded interval is the freeze, the triangle the reap, the cross the refused write.

# %% [markdown] tags=["ru"]
# Проснувшийся `w1` всё ещё считал задачу своей. Его первую запись, heartbeat, отклонили
# (`lease_lost`), потому что каждый захват получает свежий **fencing-токен**, а токен `w1`
# уже не совпадал. Собственные часы `w1` тоже подсказали ему, что аренда, возможно,
# истекла, поэтому `w1` даже не отправил свой результат: в силе результат `w2`. Что бывает без этой проверки, покажет урок 3.
# Временная шкала: своя дорожка у каждого воркера, полоса на каждую попытку (в ней —
# задача·попытка), закрашенный интервал — заморозка, треугольник — возврат задачи в
# очередь, крестик — отклонённая запись.

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(freeze.queue.events(), freeze.actions), lang=lang)

# %% [markdown] tags=["en"]
# ## The two statements everything rests on
#
# Everything above rests on two SQL statements, the whole of them printed below. The
# claim picks a job and grants its lease (`lease_until`, a fresh `token`) in **one**
# `UPDATE`, so no two workers can take the same job. The completion only touches a row
# that is still `running` **with the caller's token**, so a worker that lost its job
# changes nothing. Lessons 1–3 take each piece apart.

# %% [markdown] tags=["ru"]
# ## Два оператора, на которых всё держится
#
# Всё, что было выше, обеспечивают два SQL-оператора; ниже они напечатаны целиком. Захват
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
# each one. The badges tell you what each worker is: *running*, *paused*, *lease expired*
# (paused past its lease, but nobody has taken its job yet, so it may still finish it),
# *zombie* (while it was paused its job was reaped or handed on, and it still thinks the job
# is its own), *killed*. "Draw timeline" plots everything so far. Try to lose a job, or to get one
# done twice. The lessons explain what you see.
#
# The dashboard updates itself every second. It is only alive while the kernel runs; on
# GitHub you see a still picture, or nothing.

# %% [markdown] tags=["ru"]
# ## Песочница
#
# Панель ниже управляет тем же механизмом с помощью кнопок. Ставьте задачи в очередь
# (такие, что спят, падают с ошибкой или роняют своего воркера), запускайте воркеров,
# замораживайте и размораживайте, убивайте и останавливайте каждого. Значки показывают,
# что с воркером: *работает*, *заморожен*, *аренда истекла* (заморожен дольше аренды, но
# задачу у него ещё никто не забрал, так что он может её и закончить), *зомби* (пока он был
# заморожен, его задачу вернули в очередь или отдали другому, а он всё ещё считает её своей),
# *убит*. «Нарисовать временную шкалу» рисует всё, что было до сих пор. Попробуйте потерять задачу или добиться, чтобы
# её выполнили дважды. Что вы увидите, объясняют уроки.
#
# Панель обновляется сама каждую секунду. Она жива, только пока работает ядро; на GitHub
# вы увидите застывшую картинку или ничего.

# %% tags=["nbval-ignore-output"]
lab = Lab(str(work / "playground.db"), lang=lang, lease=3.0)
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
# These use workers of their own, so whatever you clicked in the playground cannot
# change their answers.
#
# **1. Predict.** Freeze the only worker while it holds a job, for one and a half
# leases, then thaw it. Nobody else was there to reap. Does `w1` finish its job, and
# with which attempt? Commit your answer in the box below, then run the cells after it;
# watch the badge the first prints while `w1` is frozen. (The job waits at a gate, as above,
# which the cell opens just before the thaw.)

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
# У упражнений свои воркеры, так что ничего из сделанного в песочнице на их ответы не
# повлияет.
#
# **1. Предскажите.** Заморозьте единственного воркера, пока он держит задачу, на
# полтора срока аренды и разморозьте. Вернуть задачу в очередь было некому. Закончит ли
# `w1` свою задачу и какой попыткой? Зафиксируйте ответ ниже, потом выполните следующие
# ячейки и посмотрите, какой значок напечатает первая, пока `w1` заморожен. (Задача, как и
# выше, ждёт у шлагбаума; ячейка открывает его перед самой разморозкой.)

# %%
guess = lessons.predict("l0_ex1", lang)  # without widgets: lessons.predict("l0_ex1", lang, answer=...) / без виджетов: lessons.predict("l0_ex1", lang, answer=...)
guess

# %% tags=["nbval-check-output"]
with guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    alone = Fleet(work / "exercise-alone.db")
    alone.queue.enqueue({"seconds": 1, "hold": str(work / "exercise-alone.gate")})  # finishes only after the thaw / закончится только после разморозки
    Scenario.parse("""
        spawn w1
        wait running=1
        pause w1
        wait leases=1.5
    """, lease=3).run(alone)
    say("l0_badge", badge=t(alone.status()[0].badge, lang))
    (work / "exercise-alone.gate").touch()
    Scenario.parse("""
        resume w1
        wait idle
    """).run(alone)
    job = alone.queue.jobs()[0]
    say("l0_after", status=job.status, attempts=job.attempts, worker=job.worker)
    guess.reveal("refused" if job.status != "done" else "first" if job.attempts == 1 else "second")

# %% [markdown] tags=["en"]
# <details><summary>Answer</summary>
#
# Yes, as attempt 1. An expired lease alone takes nothing away: until someone runs the
# reaper, the holder's token is still in the job, and its heartbeat and completion are
# accepted. So the badge said *lease expired*, not *zombie*: `w1` was late, but nobody had
# taken its job. Lesson 1 shows the reaper; lesson 3, what happens when it did run.
# </details>
#
# **2. Write code.** Write a scenario in the same small language in which `w1`'s write is
# refused, with `w1` alone: no other worker may ever take its job (the demonstration above
# needed `w2`; the check turns down any scenario in which another worker claims the job).
# Verbs: `spawn NAME`, `enqueue N seconds=S`, `wait running=N`, `pause NAME`,
# `resume NAME`, `reap`, `wait leases=N`, `wait idle`. Think about what exercise 1 says
# takes a job away. The check runs your scenario on fresh workers and reads the job's
# history.

# %% [markdown] tags=["ru"]
# <details><summary>Ответ</summary>
#
# Да, первой попыткой. Истёкшая аренда сама по себе ничего не отнимает: пока кто-нибудь
# не запустит reaper, токен держателя остаётся в задаче, и его heartbeat и завершение
# принимаются. Поэтому на значке было *аренда истекла*, а не *зомби*: `w1` опоздал, но
# задачу у него никто не забрал. Reaper разобран в уроке 1, а что бывает, когда он успел
# сработать, — в уроке 3.
# </details>
#
# **2. Напишите код.** Напишите сценарий на том же маленьком языке, в котором запись
# `w1` отклоняют, хотя `w1` работает один: никакой другой воркер его задачу брать не
# должен (демонстрации выше понадобился `w2`, а проверка не примет ни одного сценария, где
# задачу захватывает кто-то ещё). Команды: `spawn ИМЯ`, `enqueue N seconds=S`,
# `wait running=N`, `pause ИМЯ`, `resume ИМЯ`, `reap`, `wait leases=N`, `wait idle`.
# Вспомните, что, согласно упражнению 1, отнимает у воркера задачу. Проверка запустит
# сценарий на новых воркерах и прочитает историю задачи.

# %%
my_scenario = """
    spawn w1
    enqueue 1 seconds=2
    wait running=1
    pause w1
    wait leases=1.5
    resume w1
    wait idle
"""  # your scenario here / ваш сценарий здесь

# %% [markdown] tags=["en"]
# <details><summary>Show the answer</summary>
#
# The scenario above only freezes and thaws `w1`: nobody takes its job, so nothing is
# refused. Exercise 1 says what would: an expired lease takes nothing away until someone
# runs the reaper. So run it yourself (`reap`: the kernel calls `queue.reap()`) once the
# lease has run out while `w1` is frozen. Its token is gone from the job, so when `w1`
# wakes, its heartbeat and its completion are refused; then `w1` claims the job again
# itself, as attempt 2. (A 3-second job leaves the freeze a margin on a slow machine.)
#
# ```
# spawn w1
# enqueue 1 seconds=3
# wait running=1
# pause w1
# wait leases=1.5
# reap
# resume w1
# wait idle
# ```
# </details>

# %% [markdown] tags=["ru"]
# <details><summary>Показать ответ</summary>
#
# Сценарий выше только замораживает и размораживает `w1`: задачу никто не забирает,
# поэтому и отклонять нечего. Что её отнимает, сказано в упражнении 1: истёкшая аренда сама
# по себе ничего не отнимает, пока кто-нибудь не запустит reaper. Так запустите его сами
# (`reap`: ядро вызывает `queue.reap()`), когда аренда замороженного `w1` уже истекла.
# Токена `w1` в задаче больше нет, поэтому, проснувшись, `w1` получит отказ и на
# heartbeat, и на завершение, а потом сам снова захватит задачу второй попыткой.
# (Трёхсекундная задача оставляет заморозке запас на медленной машине.)
#
# ```
# spawn w1
# enqueue 1 seconds=3
# wait running=1
# pause w1
# wait leases=1.5
# reap
# resume w1
# wait idle
# ```
# </details>

# %% tags=["nbval-check-output"]
from leaselab.lessons import exercises
tried = Fleet(work / "exercise-zombie.db")
Scenario.parse(my_scenario, lease=3).run(tried)
lessons.wait_until(lambda: tried.queue.stats()["running"] == 0, what=lessons.text("wait_done", lang))
print(exercises.check_refused_alone(tried.queue.events, "w1", lang))

# %% [markdown] tags=["en"]
# The last cell ends the workers of the demonstrations and the exercises. The playground
# stays alive, so keep clicking: its workers end and the temporary folder is removed when
# the kernel stops (*Kernel → Shut Down Kernel*, or closing the notebook), or at once
# with `lab.close()`.

# %% [markdown] tags=["ru"]
# Последняя ячейка завершает воркеров демонстраций и упражнений. Песочница остаётся
# живой — играйте дальше: её воркеры завершатся, а временная папка удалится, когда
# остановится ядро (*Kernel → Shut Down Kernel* или закрытие блокнота), либо сразу — по
# `lab.close()`.

# %% tags=["nbval-check-output"]
demos = (crash, freeze, alone, tried)
for fleet in demos:
    fleet.shutdown()
say("l0_alive", names=[s.name for f in demos for s in f.status() if s.state in ("running", "paused", "stopping")])
for fleet in demos:
    fleet.queue.close()
lessons.cleanup_at_exit(work, lab)
