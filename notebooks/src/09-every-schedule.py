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
# # Lesson 9. Every schedule
#
# Lessons 1–8 made bugs happen with real processes: a worker killed, frozen, cut off, its
# clock moved. A real fault lands where the machine's timing puts it, so a run shows the
# schedules it happened to hit, and says nothing of the others.
#
# This lesson turns the question around: not "what happened this time?" but "what can happen
# in *any* order?". First we run every interleaving of lesson 2's two-statement claim, all of
# them, and count the ones that give a job to two workers. Then we hand the real queue to a
# simulator that plays thousands of schedules on virtual time, and watch it find the zombie of
# lesson 3 the moment the fence is taken away, shrink what it found to a few steps, and draw
# it. Then you plant a bug of your own and see whether it is caught. The lesson ends with what
# a simulation cannot show, which is why the other lessons use real processes.

# %% [markdown] tags=["ru"]
# # Урок 9. Все расписания до одного
#
# В уроках 1–8 ошибки вызывали настоящие процессы: воркера убивали, замораживали, отрезали от
# сети, сдвигали ему часы. Настоящий сбой попадает туда, куда его ставят тайминги машины,
# поэтому прогон показывает те расписания, которые случились, и ничего не говорит об
# остальных.
#
# В этом уроке вопрос ставится наоборот: не «что случилось на этот раз?», а «что может
# случиться при *любом* порядке шагов?». Сначала переберём все варианты чередования шагов
# двухоператорного захвата из урока 2, все до одного, и посчитаем те, в которых задача
# достаётся двоим. Потом отдадим настоящую очередь симулятору, который проигрывает тысячи
# расписаний на виртуальном времени, и посмотрим, как он находит зомби из урока 3, стоит
# только убрать fencing, сжимает найденное до нескольких шагов и рисует его. Затем вы
# подбросите собственную ошибку и проверите, поймают ли её. В конце — о том, чего симуляция
# показать не может и почему остальные уроки работают с настоящими процессами.

# %%
import math

from leaselab import lessons
from leaselab.backends.sqlite import statements
from leaselab.lab import timeline
from leaselab.lessons import exercises, schedules
from leaselab.sim import explore
from leaselab.sim.mutants import planted

lang = lessons.language()
say = lessons.speaker(lang)
work = lessons.scratch("09-every-schedule")

# %% [markdown] tags=["en"]
# ## Every interleaving of two claims
#
# Lesson 2's naive claim is two statements: a `SELECT` that finds a pending job, then an
# `UPDATE` that marks it running. Two workers, A and B, each run their two statements in
# order, but nothing orders A's statements against B's. With two steps each there are
# (2·2)! / (2!·2!) orders: every arrangement of the four steps that keeps each worker's own two
# in their order; with three workers, (3·2)! / (2!·2!·2!).
#
# `schedules.every_schedule` runs each order for real: a fresh copy of one SQLite file per
# order, one connection per worker, each step one statement in autocommit mode, and the queue's
# clock standing still, so that only the order differs. Then it counts the orders in which
# some job was claimed by two workers. The same is done for leaselab's claim, which is one
# statement, so each worker has only one step to interleave.

# %% [markdown] tags=["ru"]
# ## Все варианты чередования двух захватов
#
# Наивный захват из урока 2 — это два оператора: `SELECT` находит задачу в статусе pending,
# `UPDATE` помечает её как running. Два воркера, A и B, выполняют каждый свои два оператора
# по порядку, но между операторами A и операторами B никакого порядка нет. При двух шагах у
# каждого вариантов (2·2)! / (2!·2!): это все расстановки четырёх шагов, в которых два шага
# каждого воркера идут в своём порядке; при трёх воркерах — (3·2)! / (2!·2!·2!).
#
# `schedules.every_schedule` выполняет каждый вариант по-настоящему: для каждого берётся
# свежая копия одного файла SQLite, у каждого воркера своё соединение, каждый шаг — один
# оператор в режиме автофиксации, а часы очереди стоят на месте, так что варианты
# различаются только порядком. Потом он считает варианты, в которых какую-то задачу
# захватили двое. То же самое проделывается с захватом leaselab — это один оператор, так что
# у каждого воркера в чередовании всего один шаг.

# %% tags=["nbval-check-output"]
for claim in schedules.CLAIMS:
    for workers, jobs in ((2, 1), (3, 1), (3, 2)):
        runs = schedules.every_schedule(work, claim, workers, jobs)
        bad = sum(r.bad for r in runs)
        say("l8_count", what=lessons.text(f"l8_{claim}", lang), workers=workers, jobs=jobs, n=len(runs), bad=bad)

# %% [markdown] tags=["en"]
# The output above counts, for each claim and each scope, the orders and how many of them give
# a job to two workers. With two workers and one job, the bad orders are exactly those in which
# both `SELECT`s come before the first `UPDATE`. With three workers and one job, the only safe
# orders are those that start with one worker's `SELECT` followed at once by its `UPDATE`.
# leaselab's claim has no bad order at all. Here is the first bad order, step by step; it is
# the order lesson 2 chose by hand.

# %% [markdown] tags=["ru"]
# Вывод выше считает для каждого захвата и каждого масштаба все варианты и те из них, в
# которых задача достаётся двоим. При двух воркерах и одной задаче плохие варианты — ровно те,
# где оба `SELECT` идут раньше первого `UPDATE`. При трёх воркерах и одной задаче безопасны
# только варианты, которые начинаются с `SELECT` одного воркера, сразу за которым идёт его же
# `UPDATE`. У захвата leaselab плохих вариантов нет вовсе. Вот первый плохой вариант по шагам;
# именно этот порядок урок 2 выбрал вручную.

# %% tags=["nbval-check-output"]
runs = schedules.every_schedule(work, "naive", 2, 1)
first_bad = next(r for r in runs if r.bad)
say("l8_first_bad", job=first_bad.doubled[0])
print("\n".join(schedules.numbered_steps(first_bad, lang)))

# %% [markdown] tags=["en"]
# Counting every order is a proof for this scope, not a sample: no order of these statements
# was left out. It interleaves whole statements and does not look inside one. That one
# statement runs as a unit is SQLite's promise (one writer at a time, and a write that would act
# on a stale read fails with "database is locked" instead), and lesson 2's race of real processes
# put that promise to the test.

# %% [markdown] tags=["ru"]
# Перебор всех порядков для этого масштаба — доказательство, а не выборка: ни один порядок
# этих операторов не пропущен. Чередуются целые операторы, внутрь одного оператора перебор
# не заглядывает. То, что оператор выполняется как единое целое, обещает SQLite (пишет только
# один, а запись по устаревшему чтению вместо того, чтобы выполниться, падает с «database is
# locked»), и гонка настоящих процессов в уроке 2 это обещание проверила.

# %% [markdown] tags=["en"]
# ## The zombie, with the fence and without
#
# The simulator in `leaselab.sim` runs the real `Queue` on a real SQLite database (in memory),
# with its real statements, and workers that make the real worker's decisions (when a lease is
# lost on the worker's own clock, what to do with a finished attempt) by calling the very code
# the real `Worker` calls. What it adds is virtual time, and faults as steps of a schedule: a
# worker crashes, pauses, is cut off, or a call it sends is held in the network and arrives
# later. After every step it compares the queue's rows with a specification: a small model, in
# plain Python, of what the queue promises.
#
# Our scope is the zombie of lesson 3 at its smallest: two workers, one job, a lease of one
# second, and at most one fault, a call held in flight. `explore.search` runs random schedules
# from a seed: the same seed gives the same schedules, step for step. First the real queue:

# %% [markdown] tags=["ru"]
# ## Зомби с fencing и без него
#
# Симулятор из `leaselab.sim` запускает настоящий `Queue` на настоящей базе SQLite (в памяти)
# с её настоящими операторами, а его воркеры принимают решения настоящего воркера (когда
# аренда потеряна по собственным часам воркера, что делать с законченной попыткой),
# вызывая тот самый код, который вызывает настоящий `Worker`. От себя симулятор добавляет
# виртуальное время и сбои как шаги расписания: воркер падает, замирает, теряет связь, или
# отправленный им вызов застревает в сети и доходит позже. После каждого шага он сверяет
# строки очереди со спецификацией — небольшой моделью на обычном Python того, что очередь
# обещает.
#
# Масштаб у нас — зомби из урока 3 в самом малом виде: два воркера, одна задача, аренда на
# одну секунду и не больше одного сбоя — застрявшего в пути вызова. `explore.search`
# прогоняет случайные расписания начиная с заданного seed: один и тот же seed даёт одни и те
# же расписания, шаг в шаг. Сначала настоящая очередь:

# %% tags=["nbval-check-output"]
scope = schedules.ZOMBIE
found, tried, steps = explore.search(scope, seed=0, schedules=schedules.ZOMBIE_SCHEDULES)
say("l8_clean", what=lessons.text("l8_real", lang), n=tried, steps=steps)

# %% [markdown] tags=["en"]
# The output above says how many schedules and steps ran, and that not one of them broke a
# promise. Now the same search with a mutant planted: `unfenced_complete` removes
# `AND token = :token` from the completion, for the length of the `with` block, in this process
# only. The search stops at the first schedule that breaks a promise, and `explore.shrink` then
# drops every action it can (and makes each fault as mild as it can) while the same promise
# still breaks. It replays at most `schedules.SHRINK_TRIES` candidate schedules, a count and not
# a time, so the witness is the same on any machine, however busy.

# %% [markdown] tags=["ru"]
# Вывод выше говорит, сколько прошло расписаний и шагов, и что ни одно из них не нарушило ни
# одного обещания. Теперь тот же поиск с подброшенным мутантом: `unfenced_complete` убирает из
# завершения условие `AND token = :token` — только на время блока `with` и только в этом
# процессе. Поиск останавливается на первом расписании, которое нарушает обещание, а
# `explore.shrink` затем выбрасывает из него всё, без чего то же обещание всё равно
# нарушается (а каждый сбой делает как можно мягче). Он проигрывает не больше
# `schedules.SHRINK_TRIES` расписаний-кандидатов — это число попыток, а не время, поэтому
# результат одинаков на любой машине, как бы она ни была загружена.

# %% tags=["nbval-check-output"]
with planted("unfenced_complete") as mutant:
    found, tried, steps = explore.search(scope, seed=0, schedules=schedules.ZOMBIE_SCHEDULES)
    witness = explore.shrink(found, budget=math.inf, tries=schedules.SHRINK_TRIES)
say("l8_found", what=lessons.text("l8_planted", lang, name=mutant.name), n=tried)
say("l8_shrunk", before=len(found.actions), after=len(witness.actions))
print("\n".join(schedules.story(witness, lang)))

# %% [markdown] tags=["en"]
# Read it as a story (the second column is virtual time, in milliseconds). One worker, the zombie to
# be, holds the job, and the fault is armed: its next call will be held in flight. Its handler
# returns well inside the lease, and it sends the completion; the network holds it. The lease
# ends, the other worker's reaper takes the job back, and the other worker claims it again.
# Then the held completion arrives, and without the token in its `WHERE` the queue takes it: a
# result from an attempt that no longer holds the job, written over the live attempt. The simulator stops at that very step, the first at which the queue
# and the specification disagree, and names the promise broken. This is the in-flight write of
# Kleppmann's fencing argument: sent while the lease was valid, applied after it was not. No
# check on the worker's side can stop it, because the worker checked in time; only the
# receiver, comparing tokens, can.
#
# Now the very same schedule on the real queue, replayed action by action with `explore.run`:

# %% [markdown] tags=["ru"]
# Прочитаем это как историю (во втором столбце — виртуальное время в миллисекундах). Один воркер,
# будущий зомби, держит задачу, и сбой уже взведён: его следующий вызов застрянет в сети. Его
# обработчик возвращает результат задолго до конца аренды, и воркер отправляет завершение, а
# сеть его задерживает. Аренда кончается, reaper другого воркера возвращает задачу в очередь,
# и другой воркер захватывает её снова. Тут задержанное завершение доходит, и очередь, у
# которой в `WHERE` нет токена, его принимает: результат попытки, которой задача уже не
# принадлежит, записан поверх живой попытки.
# Симулятор останавливается ровно на этом шаге — первом, на котором очередь разошлась со
# спецификацией, — и называет нарушенное обещание. Это та самая запись «в пути» из рассуждения
# Клеппмана о fencing: отправлена, пока аренда действовала, применена, когда аренды уже не
# было. Никакая проверка на стороне воркера её не остановит — воркер проверил вовремя;
# остановить её может только получатель, сравнив токены.
#
# А теперь то же самое расписание на настоящей очереди — `explore.run` воспроизводит его
# действие за действием:

# %% tags=["nbval-check-output"]
fenced = explore.run(scope, witness.seed, actions=witness.actions)
print("\n".join(schedules.story(fenced, lang)))

# %% [markdown] tags=["en"]
# The same late completion arrives at the same instant and is refused: its token no longer
# holds the job. The new attempt runs on and completes, and every promise holds. Both runs on
# the lab's timeline, drawn from their steps (`leaselab.sim.report.spans`): without the fence on
# top, with it below. In both, the zombie's attempt ends where the reaper took the job back. The
# run without the fence stops at the broken promise, the instant the job was claimed again, so
# the new attempt is only a sliver at the end; with the fence, the zombie's lane is marked where
# its completion was refused, and the new attempt runs to its completion. The lab has no shape for a call held in
# flight or for the broken promise itself: the steps above name them.

# %% [markdown] tags=["ru"]
# То же запоздалое завершение приходит в тот же момент и отклоняется: его токен задачу уже не
# держит. Новая попытка продолжается и завершается, и все обещания сдержаны. Оба прогона на
# временной шкале лаборатории, нарисованные по их шагам (`leaselab.sim.report.spans`): сверху
# без fencing, снизу с ним. В обоих попытка зомби кончается там, где reaper вернул задачу в
# очередь. Прогон без fencing останавливается на нарушенном обещании — в тот миг, когда задачу
# захватили снова, — поэтому от новой попытки в конце остаётся лишь узкая полоска; с fencing на
# дорожке зомби отмечено, где его завершение отклонено, а новая попытка доходит до
# завершения. Для вызова, застрявшего в сети, и для самого нарушенного обещания у лаборатории
# нет своих значков: их называют шаги выше.

# %% tags=["nbval-ignore-output"]
import matplotlib.pyplot as plt

fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 4.6), layout="constrained")
timeline.draw(schedules.picture(witness), lang=lang, ax=top)
timeline.draw(schedules.picture(fenced), lang=lang, ax=bottom)
plt.close(fig)
fig

# %% [markdown] tags=["en"]
# Why did lesson 8's chaos not show this? On a SQLite file, chaos kills and freezes whole worker
# processes; its network faults need a server between the worker and its queue. A killed worker
# sends nothing. A frozen one, when it thaws, first asks its own clock (lesson 7) and drops a
# result whose lease may be gone. To make this bug show, a freeze would have to land in the
# microseconds between the worker's last look at its clock and its `COMPLETE` statement, and
# stay past the lease: a window random faults almost never hit. The simulator has a fault for
# exactly this (a call held in flight), and a random schedule may strike it at any step:
# every schedule tries it somewhere else.

# %% [markdown] tags=["ru"]
# Почему хаос из урока 8 этого не показал? На файле SQLite хаос убивает и замораживает
# процессы воркеров целиком, а его сетевым сбоям нужен сервер между воркером и очередью.
# Убитый воркер ничего не отправит. Замороженный, когда его разморозят, сначала сверяется со своими часами
# (урок 7) и отбрасывает результат, если аренда могла кончиться. Чтобы эта ошибка проявилась,
# заморозка должна попасть в те микросекунды, что проходят между последним взглядом воркера на
# часы и его оператором `COMPLETE`, и продлиться дольше аренды, — в окно, куда случайные сбои
# почти никогда не попадают. У симулятора для этого есть отдельный сбой (вызов, застрявший в
# пути), и случайное расписание может нанести его на любом шаге: каждое новое расписание
# пробует его в другом месте.

# %% [markdown] tags=["en"]
# ### A host that sleeps
#
# What hid the missing fence from every freeze is the worker's own deadline: a frozen process's
# clock goes on counting, so when it thaws it sees that its lease may be gone. That guard is only
# as good as the clock it reads. leaselab's worker counts its deadline on Linux's
# `CLOCK_BOOTTIME`, which goes on counting while the host is suspended; where the clock a worker
# reads stops while the machine sleeps (`time.monotonic` does on some platforms), a worker woken
# after its lease ended still believes it holds the job. The simulator has that fault too,
# `suspend`: the worker stops, and its clock stops with it.
#
# With the fence taken out again, `explore.exhaustive` walks every schedule of two workers, one
# job and one fault, up to nine actions long, skipping any state it has already seen; first with
# a pause, then with a suspend:

# %% [markdown] tags=["ru"]
# ### Хост, который уснул
#
# Ни одна заморозка не выдала, что fencing убран: его отсутствие прикрывал собственный дедлайн
# воркера. Часы замершего процесса продолжают идти, и, разморозившись, воркер видит, что аренда
# могла кончиться.
# Эта защита надёжна ровно настолько, насколько надёжны часы, по которым она сверяется. Воркер
# leaselab считает дедлайн по `CLOCK_BOOTTIME` в Linux, а эти часы идут и пока хост спит. Там,
# где часы воркера во сне машины стоят (так ведёт себя `time.monotonic` на некоторых
# платформах), воркер, проснувшийся после конца аренды, по-прежнему считает задачу своей. В
# симуляторе есть и такой сбой — `suspend`: воркер останавливается, и его часы вместе с ним.
#
# Снова уберём fencing, и пусть `explore.exhaustive` переберёт все расписания для двух
# воркеров, одной задачи и одного сбоя длиной до девяти действий, пропуская уже виденные
# состояния: сначала с паузой, потом со сном хоста.

# %% tags=["nbval-check-output"]
with planted("unfenced_complete"):
    for fault in schedules.SLEEP_FAULTS:
        asleep, states, _ = explore.exhaustive(schedules.SLEEP[fault], depth=schedules.SLEEP_DEPTH)
        said = lessons.text(f"l8_sleep_{fault}", lang)
        if asleep is None:
            say("l8_sleep_clean", fault=said, depth=schedules.SLEEP_DEPTH, states=states)
        else:
            say("l8_sleep_found", fault=said, states=states)
print("\n".join(schedules.story(asleep, lang)))

# %% [markdown] tags=["en"]
# With a pause, no schedule in this scope breaks a promise, fence or no fence: the worker's own
# deadline stops every zombie before it writes. With a suspend, the search meets a broken promise
# after a handful of states: the worker wakes past its lease with a clock that says it is still
# inside it, and its write is taken. This is the argument of lesson 3 in two runs: a lease checked
# by the holder on its own clock protects only while that clock is right, and the fence, checked
# by the database that keeps the job, does not depend on any worker's clock.

# %% [markdown] tags=["ru"]
# С паузой ни одно расписание в этих пределах не нарушает обещаний, с fencing или без: собственный
# дедлайн воркера останавливает каждого зомби раньше, чем тот что-то запишет. Со сном хоста
# поиск натыкается на нарушенное обещание уже через несколько состояний: воркер просыпается после
# конца аренды, а его часы говорят, что аренда ещё идёт, и его запись принимается. Это довод
# урока 3 в двух прогонах: аренда, которую держатель сверяет со своими часами, защищает, лишь
# пока эти часы верны, а fencing проверяет база, в которой хранится задача, и от часов воркеров
# он не зависит.

# %% [markdown] tags=["en"]
# ## Your turn: plant a bug of your own
#
# The statements are named constants in `leaselab.backends.sqlite.statements`. Here is the
# completion:

# %% [markdown] tags=["ru"]
# ## Ваш ход: подбросьте свою ошибку
#
# Операторы — это именованные константы в `leaselab.backends.sqlite.statements`. Вот
# завершение:

# %% tags=["nbval-check-output"]
print(statements.COMPLETE.strip())

# %% [markdown] tags=["en"]
# Edit a copy of one statement in the cell below: `schedules.edited(name, copy)` makes a
# `Mutant` that puts your copy in place of the statement. The check cell first asks whether the
# simulated workers run that statement at all, and whether SQLite can prepare your copy. Then it
# plants the mutant and hunts with `explore.hunt`, as `leaselab simulate` does: a fixed number of
# random schedules, `schedules.CHECK_SCHEDULES`, never a number of seconds, so its answer is the
# same on any machine. The schedules take turns among the scenarios of `explore.PORTFOLIO`: two
# or three workers, one or two jobs at a time each, clocks that run a little apart, jobs that
# fail once or on every attempt, delayed jobs, and up to two faults of any kind (a crash, a
# pause, a cut link, a call held in flight, a lost reply), jobs with a timeout whose handler may
# hang for ever while its worker's heartbeat goes on; with APSW installed, as in the lab, one
# scenario also cuts the power. It says caught, with the shrunk schedule, or not caught.
#
# The worked example keeps the token and drops only `status = 'running'`. The token is still
# checked, so is that safe? Run the check before you read on.

# %% [markdown] tags=["ru"]
# Отредактируйте копию одного оператора в ячейке ниже: `schedules.edited(name, copy)` делает из
# неё `Mutant`, который подставляет вашу копию на место оператора. Проверочная ячейка сначала
# выясняет, выполняют ли симулированные воркеры этот оператор вообще и может ли SQLite
# разобрать вашу копию. Потом она подбрасывает мутанта и ищет ошибку через `explore.hunt`, как
# `leaselab simulate`: заданное число случайных расписаний, `schedules.CHECK_SCHEDULES`, а не
# заданное число секунд, поэтому ответ на любой машине один и тот же. Расписания по очереди
# берут сценарии из `explore.PORTFOLIO`: два или три воркера, у каждого одна или две задачи
# одновременно, часы, которые немного расходятся, задачи, которые падают один раз или при
# каждой попытке, отложенные задачи и до двух сбоев любого вида (падение, пауза, разрыв связи,
# застрявший в сети вызов, потерянный ответ), задачи с тайм-аутом, чей обработчик может
# зависнуть навсегда, пока heartbeat его воркера продолжает продлевать аренду; если установлен
# APSW, как в лаборатории, один сценарий ещё и отключает питание. Ячейка скажет, поймана ошибка —
# и покажет сжатое расписание — или нет.
#
# В готовом примере токен сохранён, а убрано только `status = 'running'`. Токен ведь
# по-прежнему проверяется — значит, безопасно? Запустите проверку, прежде чем читать дальше.

# %%
MY_STATEMENT = "COMPLETE"
MY_COPY = statements.COMPLETE.replace("status = 'running' AND ", "")

# %% tags=["nbval-check-output"]
print(exercises.check_planted(schedules.edited(MY_STATEMENT, MY_COPY), lang))

# %% [markdown] tags=["en"]
# Caught: the reaper sends a job back to `pending` but leaves its last token in the row until
# the next claim writes a new one. A completion that arrives in between, late, finds its own
# token, `status` is no longer checked, and a job that is due to run again is marked done by an
# attempt the queue had already given up on. The token alone is not the fence; the token *of a
# running job* is.
#
# Try your own (replace the two lines above, run both cells): predict first, then check.
#
# - `REAP`: `lease_until < :now` becomes `lease_until <= :now`.
# - `FAIL`: drop ` AND token = :token`.
# - `FAIL`: `:now + leaselab_backoff(attempts)` becomes `:now`.
# - `CLAIM_MANY_OF_ONE`: drop ` AND run_at <= :now`.
# - `COMPLETE`: `finished_at = :now` becomes `finished_at = NULL`.
# - `HEARTBEAT`: drop ` AND token = :token`.

# %% [markdown] tags=["ru"]
# Поймано: reaper возвращает задачу в `pending`, но оставляет в строке её последний токен, пока
# следующий захват не запишет новый. Завершение, которое приходит в этот промежуток с
# опозданием, находит в строке свой токен, `status` больше никто не проверяет, и задачу, которой
# пора выполниться снова, помечает выполненной попытка, от которой очередь уже отказалась.
# Fencing — это не просто токен, а токен *задачи в статусе running*.
#
# Попробуйте свои варианты (замените две строки выше и выполните обе ячейки); сначала
# предскажите, потом проверьте.
#
# - `REAP`: `lease_until < :now` заменить на `lease_until <= :now`.
# - `FAIL`: убрать ` AND token = :token`.
# - `FAIL`: `:now + leaselab_backoff(attempts)` заменить на `:now`.
# - `CLAIM_MANY_OF_ONE`: убрать ` AND run_at <= :now`.
# - `COMPLETE`: `finished_at = :now` заменить на `finished_at = NULL`.
# - `HEARTBEAT`: убрать ` AND token = :token`.

# %% [markdown] tags=["en"]
# <details><summary>What the check says</summary>
#
# - `<=` in `REAP`: caught. A reaper that runs at the very instant a lease ends takes the job,
#   though by the letter of the lease it was still held (lesson 1's safety margin counts on it).
# - `FAIL` without the token: caught. A late failure, from an attempt that no longer holds the
#   job, sends back a job that another worker now holds.
# - `FAIL` without the backoff: caught; the specification says when a failed job may run again.
# - The claim without `run_at <= :now`: caught; a job is taken before its `run_at`, a delayed
#   job or one waiting out its backoff after a failure.
# - `finished_at = NULL`: not caught. The specification says nothing of `finished_at`, so no
#   schedule can break a promise about it. A simulator checks only what its model states.
# - `HEARTBEAT`: the check says the simulated workers never run it. The worker renews every lease
#   it holds in one statement, `HEARTBEAT_MANY`; break that one instead.
# - A typo that SQLite cannot parse: the check says so, with SQLite's own words, before any
#   schedule runs.
# </details>

# %% [markdown] tags=["ru"]
# <details><summary>Что скажет проверка</summary>
#
# - `<=` в `REAP`: поймано. Reaper, запущенный ровно в момент конца аренды, забирает задачу,
#   хотя по букве аренды она ещё занята (на это рассчитан запас прочности из урока 1).
# - `FAIL` без токена: поймано. Запоздавший отчёт об ошибке от попытки, которой задача уже не
#   принадлежит, возвращает в очередь задачу, которую теперь держит другой воркер.
# - `FAIL` без отсрочки: поймано; спецификация говорит, когда упавшая задача может выполниться
#   снова.
# - Захват без `run_at <= :now`: поймано; задачу берут раньше её `run_at` — отложенную или
#   ту, что после ошибки ещё выжидает отсрочку.
# - `finished_at = NULL`: не поймано. Спецификация ничего не говорит о `finished_at`, значит,
#   никакое расписание не нарушит связанного с ним обещания. Симулятор проверяет только то, что
#   записано в его модели.
# - `HEARTBEAT`: проверка ответит, что симулированные воркеры его не выполняют. Воркер продлевает
#   все свои аренды одним оператором, `HEARTBEAT_MANY`; ломайте его.
# - Опечатка, которую SQLite не может разобрать: проверка скажет об этом словами самого SQLite
#   ещё до того, как пойдёт первое расписание.
# </details>

# %% [markdown] tags=["en"]
# ## What a simulation cannot show
#
# The simulator runs the real statements and the real decisions, and nothing else that is real.
#
# - **The kernel.** Its workers are not processes: no scheduler preempts them, no signal arrives
#   in the middle of a statement, no thread of the real worker (its heartbeat, its signal relay)
#   runs. A bug in how the real worker's threads share a lease is out of its sight.
# - **The disk.** The queue is in memory, unless a scenario names the `power` fault (the last of
#   `explore.PORTFOLIO` does, with APSW installed): then it lives on lesson 5's volatile disk, an
#   APSW file system on which a power cut keeps exactly what SQLite synced. That is how the
#   shipped mutant `non_durable_claim`, a claim committed without its sync, is caught. But that
#   disk is a model of a disk too, the worst that one may hold after the reboot. Lesson 5 shows
#   it, and why leaselab syncs what it syncs, beside a real process killed with `SIGKILL`; what a
#   real drive and its cache do with an `fsync` neither the simulator nor these lessons can show.
# - **The network.** A held or lost call is the model's idea of a network: no TCP timeouts,
#   no half-open connections, no PostgreSQL. The server's own locking (`SKIP LOCKED`, its
#   isolation) is lesson 6's, on a real server.
# - **The promises it is not told.** The specification is a second statement of the promises;
#   a change that breaks none of them, like `finished_at`, passes.
#
# That is why lessons 1–8 use real processes: they test what the model leaves out. What the
# simulator can do, they cannot: run every order of a small scope (as in the first part), play
# thousands of schedules a minute, shrink a failure to the few steps that matter, and replay it
# exactly from its seed and actions, every time.

# %% [markdown] tags=["ru"]
# ## Чего симуляция показать не может
#
# Симулятор выполняет настоящие операторы и настоящие решения — и больше ничего настоящего.
#
# - **Ядро.** Его воркеры — не процессы: их не вытесняет планировщик, сигнал не приходит
#   посреди оператора, потоки настоящего воркера (heartbeat, пересылка сигналов) не работают.
#   Ошибка в том, как потоки настоящего воркера делят аренду, ему не видна.
# - **Диск.** Очередь живёт в памяти, если только сценарий не называет сбой `power` (последний
#   сценарий `explore.PORTFOLIO` его называет, когда установлен APSW): тогда она лежит на
#   «забывчивом» диске из урока 5 — файловой системе APSW, на которой при отключении питания
#   остаётся ровно то, что SQLite синхронизировал. Так ловится поставляемый мутант
#   `non_durable_claim` — захват, зафиксированный без синхронизации. Но и этот диск — лишь
#   модель диска: худшее, что на нём может остаться после перезагрузки. Урок 5 показывает его и
#   объясняет, почему leaselab синхронизирует то, что синхронизирует, рядом с настоящим
#   процессом, убитым через `SIGKILL`; а что настоящий накопитель и его кэш делают с `fsync`,
#   не покажут ни симулятор, ни эти уроки.
# - **Сеть.** Застрявший или потерянный вызов — это сеть в представлении модели: ни тайм-аутов
#   TCP, ни полуоткрытых соединений, ни PostgreSQL. Собственные блокировки сервера
#   (`SKIP LOCKED`, его уровень изоляции) — предмет урока 6, на настоящем сервере.
# - **Обещания, о которых ему не сказали.** Спецификация — это те же обещания, записанные ещё
#   раз; изменение, которое ни одного из них не нарушает, как с `finished_at`, проходит.
#
# Вот почему уроки 1–8 работают с настоящими процессами: они проверяют то, что модель
# оставляет за бортом. А симулятор умеет то, чего не умеют они: перебрать все порядки малого
# масштаба (как в первой части), проиграть тысячи расписаний за минуту, сжать сбой до
# нескольких шагов, которые действительно важны, и воспроизвести его точь-в-точь по seed и
# действиям, сколько угодно раз.

# %% [markdown] tags=["en"]
# ## Summary
#
# - Lesson 2's claim in two statements has orders in which two workers both get the job: every
#   order in which both look before either writes. A claim in one statement has nothing to
#   interleave, and no order gives a job to two.
# - The simulator drives the real queue and the real worker's decisions on virtual time, and
#   checks every step against a specification. A fixed seed gives the same schedules every time.
# - With the fence removed, it finds the completion that was sent in time and applied too late,
#   shrinks it to a handful of steps, and on the real queue the same schedule's late completion
#   is refused.
# - A fence is the token of a *running* job: check the token and the status together.
# - A simulator checks only what its model states, and only in the world it models; the kernel,
#   the disk and the network stay with real processes.
#
# Clean up: remove the temporary folder.

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - У захвата из урока 2, двух операторов, есть порядки, в которых задача достаётся обоим
#   воркерам: все те, где оба смотрят раньше, чем кто-нибудь из них пишет. Захвату одним
#   оператором чередоваться не с чем, и ни в одном порядке задача не достаётся двоим.
# - Симулятор гоняет настоящую очередь и решения настоящего воркера на виртуальном времени и
#   сверяет каждый шаг со спецификацией. Один и тот же seed каждый раз даёт одни и те же
#   расписания.
# - Без fencing он находит завершение, отправленное вовремя и применённое слишком поздно, и
#   сжимает его до нескольких шагов, а на настоящей очереди то же запоздалое завершение из того
#   же расписания отклоняется.
# - Fencing — это токен задачи *в статусе running*: проверяйте токен и статус вместе.
# - Симулятор проверяет только то, что записано в его модели, и только в том мире, который
#   она описывает; ядро, диск и сеть остаются за настоящими процессами.
#
# Уберём за собой: удалим временную папку.

# %% tags=["nbval-check-output"]
say("folder_removed", removed=lessons.cleanup(work))
