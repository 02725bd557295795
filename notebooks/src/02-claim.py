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
# # Lesson 2. The claim in one statement: one job, one worker
#
# Several workers poll the same queue. Each asks for "the next job". If two of them get
# the *same* job, the email goes out twice, the card is charged twice. The obvious code
# for a claim — find a pending job, then mark it as mine — has exactly this bug, and it
# hides well: it works in every test with one worker.
#
# In this lesson we first make the bug happen on purpose, step by step, so you can see
# where it lives. Then we race real processes against one SQLite file and count the
# duplicates: for the naive claim and for leaselab's single statement. At the end we
# look at how SQLite executes the claim and in which order jobs come out.

# %% [markdown] tags=["ru"]
# # Урок 2. Захват одним оператором: одна задача — один воркер
#
# Несколько воркеров опрашивают одну очередь, и каждый просит «следующую задачу». Если
# двое получат *одну и ту же*, письмо уйдёт дважды, а деньги с карты спишутся два раза.
# Очевидный код захвата — найти задачу в статусе pending, потом пометить её своей —
# содержит ровно эту ошибку, и прячется она хорошо: в любом тесте с одним воркером всё
# работает.
#
# В этом уроке мы сначала нарочно вызовем ошибку, шаг за шагом, чтобы было видно, где
# она живёт. Потом устроим гонку настоящих процессов на одном файле SQLite и посчитаем
# дубли: у наивного захвата и у одного оператора leaselab. В конце посмотрим, как SQLite
# выполняет захват и в каком порядке задачи выходят из очереди.

# %%
from leaselab import LeaseLost, ManualClock, Queue, lessons
from leaselab.backends.sqlite import statements as sql
from leaselab.lab import timeline
from leaselab.lessons import wrong
from leaselab.backends.sqlite import schema_statements

lang = lessons.language()
say = lessons.speaker(lang)
work = lessons.scratch("02-claim")

clock = ManualClock()
q = Queue(work / "claim.db", clock=clock)
q.enqueue_many(["send invoice 1", "send invoice 2", "send invoice 3"]);

# %% [markdown] tags=["en"]
# ## The wrong way: SELECT, then UPDATE
#
# The naive claim is two statements. The module `leaselab.lessons.wrong` keeps such wrong ways
# for lessons only; nothing in the library uses it.

# %% [markdown] tags=["ru"]
# ## Неправильно: сначала SELECT, потом UPDATE
#
# Наивный захват — это два оператора. Такие неправильные способы собраны в модуле
# `leaselab.lessons.wrong`: он нужен только для уроков, сама библиотека им не пользуется.

# %% tags=["nbval-check-output"]
print(wrong.NAIVE_SELECT.strip())
print()
print(wrong.NAIVE_UPDATE.strip())

# %% [markdown] tags=["en"]
# Two workers, A and B, each with its own connection to the file, as two processes
# would have. We run their steps in a chosen order: both look first, then both write.
# Between a worker's look and its write there is always *some* time — a context switch,
# a page fault, a network hop — and that is all the bug needs. Each step moves the
# clock by one second so the timeline below is readable.

# %% [markdown] tags=["ru"]
# Два воркера, A и B, у каждого своё соединение с файлом, как было бы у двух процессов.
# Выполним их шаги в выбранном порядке: сначала оба смотрят, потом оба пишут. Между
# «посмотрел» и «записал» у воркера всегда проходит *какое-то* время — переключение
# контекста, отказ страницы (page fault), обращение по сети, — и ошибке больше ничего не
# нужно. Каждый
# шаг сдвигает часы на секунду, чтобы на временной шкале ниже было что разглядеть.

# %% tags=["nbval-check-output"]
a = wrong.NaiveClaimer(q.path, "A", clock=clock)
b = wrong.NaiveClaimer(q.path, "B", clock=clock)

a_pick = a.select();      say("l2_a_looks", id=a_pick)
clock.advance(1)
b_pick = b.select();      say("l2_b_looks", id=b_pick)
clock.advance(1)
a_job = a.update(a_pick); say("l2_marks", step=3, who="A", id=a_job.id, attempt=a_job.attempts)
clock.advance(1)
b_job = b.update(b_pick); say("l2_marks", step=4, who="B", id=b_job.id, attempt=b_job.attempts)

# %% tags=["nbval-check-output"]
claims = [(e.worker, e.attempt) for e in q.events(a_pick) if e.kind == "claimed"]
say("l2_claimed_by", id=a_pick, claims=claims)
say("l2_both_run", same=a_job.id == b_job.id)

# %% [markdown] tags=["en"]
# Both workers believe they own job 1, and both will do it. The job row holds B's token,
# so when A finishes, its write is refused (that is the fencing of lesson 3) — but by
# then the invoice has already been sent twice.

# %% [markdown] tags=["ru"]
# Оба воркера уверены, что задача 1 — их, и оба её выполнят. В строке задачи записан
# токен B, поэтому, когда A закончит, его запись отклонят (это fencing из урока 3), но
# счёт к тому времени уже уйдёт дважды.

# %% tags=["nbval-check-output"]
clock.advance(3)
try:
    q.complete(a_job.id, a_job.token, {"sent_by": "A"})
except LeaseLost:
    say("l2_a_lost")
clock.advance(1)
q.complete(b_job.id, b_job.token, {"sent_by": "B"})
say("l2_b_done", status=q.get(b_job.id).status)
a.close(); b.close()

# %% [markdown] tags=["en"]
# On the timeline, from second 3 both lanes hold job 1 at once: that overlap is the
# duplicate. A's bar never closes properly, because nothing in the queue ended A's
# attempt — B's `UPDATE` simply wrote over it — and the cross marks A's refused write.

# %% [markdown] tags=["ru"]
# На временной шкале с третьей секунды обе дорожки держат задачу 1 одновременно: это
# перекрытие и есть дубль. Полоса A так и не закрывается как следует, потому что очередь
# никак не завершала попытку A — `UPDATE` от B просто записал поверх неё, — а крестик
# отмечает отклонённую запись A.

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(q.events()), lang=lang)

# %% [markdown] tags=["en"]
# ## The right way: one statement
#
# leaselab chooses the job and grants the lease in **one** `UPDATE`, whose `WHERE` picks
# the id with a subquery:

# %% [markdown] tags=["ru"]
# ## Правильно: один оператор
#
# leaselab выбирает задачу и выдаёт аренду **одним** `UPDATE`, а id задачи выбирает
# подзапрос в его `WHERE`:

# %% tags=["nbval-check-output"]
print(sql.CLAIM.strip())

# %% [markdown] tags=["en"]
# Why does this help? SQLite lets one writer at a time into the file, and an `UPDATE`
# takes that write lock *before* it reads anything. So the subquery and the update of one
# claim see the same, latest state of the table, and no other claim can slip in between:
# there is no "between". The second worker simply gets the next job. (Could the two naive
# statements be saved by a transaction around them? Yes, in two ways, measured below.)
#
# There is no way to interleave two single-statement claims by hand, so we just claim
# twice, as A and as B:

# %% [markdown] tags=["ru"]
# Почему это помогает? SQLite пускает в файл только одного пишущего одновременно, а `UPDATE`
# берёт блокировку на запись *до* того, как что-либо прочитать. Поэтому подзапрос и
# обновление одного захвата видят одно и то же, самое свежее состояние таблицы, и
# другой захват не может вклиниться между ними: никакого «между» просто нет. Второй
# воркер получает следующую задачу. (А можно ли спасти два наивных оператора,
# обернув их в транзакцию? Можно, двумя способами; ниже мы их измерим.)
#
# Вручную переплести два захвата одним оператором невозможно, поэтому просто захватим
# дважды, от имени A и от имени B:

# %% tags=["nbval-check-output"]
a_job = q.claim("A", lease=30)
b_job = q.claim("B", lease=30)
say("l2_single_pair", a=a_job.id, b=b_job.id, different=a_job.id != b_job.id)

# %% [markdown] tags=["en"]
# ## A real race between processes
#
# Step by step proves the bug exists; a race shows how often it happens. `wrong.race`
# fills a fresh queue file with 100 jobs and starts 4 worker processes that wait at a
# starting line, then claim as fast as they can until the queue is empty. Afterwards it
# counts, from the history, how many claims went to a job someone had already claimed.
#
# First the naive claim as it is, with nothing between its two statements but a few
# microseconds of Python. We run that race five times:

# %% [markdown] tags=["ru"]
# ## Настоящая гонка процессов
#
# Пошаговый разбор доказывает, что ошибка есть; гонка показывает, как часто она
# случается. `wrong.race` заполняет новый файл очереди 100 задачами и запускает 4
# процесса-воркера: они ждут на линии старта, а потом захватывают задачи так быстро, как
# могут, пока очередь не опустеет. Затем по истории считается, сколько захватов пришлось
# на задачу, которую кто-то уже захватил.
#
# Сначала наивный захват как есть: между двумя его операторами только несколько
# микросекунд работы Python. Проведём такую гонку пять раз:

# %% tags=["nbval-ignore-output"]
honest = [wrong.race(work / f"race-honest-{i}.db", claim="naive", pause=0.0) for i in range(5)]
say("l2_honest", counts=[r.duplicates for r in honest], jobs=100)

# %% [markdown] tags=["en"]
# A few duplicates per hundred jobs: two claimers collide only when the scheduler switches
# between them in exactly that gap. How many depends on the machine: its cores, its load,
# its scheduler; your five numbers may be larger or smaller than ours, and on some machine
# a run may find none. That is the dangerous kind of
# bug: rare enough to pass every test, common enough to charge some customers twice.
# In a real handler the gap is wider: the two statements go over a network to a
# database server, an ORM does work between them, the garbage collector or a busy CPU
# stops the process for a moment. To stand for that, the naive claimers now wait 2 ms
# between their two statements, about one round trip to a database server:

# %% [markdown] tags=["ru"]
# Несколько дублей на сотню задач: два захвата сталкиваются, только если планировщик
# переключится между ними ровно в этом зазоре. Сколько их будет, зависит от машины — от
# числа ядер, нагрузки, планировщика: ваши пять чисел могут оказаться больше или меньше
# наших, а на какой-то машине прогон может не найти ни одного. Такие ошибки
# опаснее всего: они достаточно редки, чтобы пройти все тесты, и достаточно часты, чтобы
# с кого-то из клиентов списать деньги дважды. В настоящем обработчике зазор шире: два
# оператора идут по сети на сервер базы данных, между ними работает ORM, процесс на миг
# останавливают сборщик мусора или загруженный процессор. Чтобы изобразить это, наивные
# воркеры теперь ждут 2 мс между двумя операторами — примерно один сетевой запрос к
# серверу базы данных:

# %% tags=["nbval-ignore-output"]
naive = wrong.race(work / "race-naive.db", claim="naive", workers=4, jobs=100, pause=0.002)
single = wrong.race(work / "race-single.db", claim="single", workers=4, jobs=100)
say("l2_race", what=lessons.text("l2_naive_2ms", lang), claims=naive.claims, dups=naive.duplicates, locked=naive.locked)
say("l2_race", what=lessons.text("l2_single", lang), claims=single.claims, dups=single.duplicates, locked=single.locked)

# %% tags=["nbval-check-output"]
say("l2_naive_has_dups", yes=naive.duplicates > 0)
say("l2_single_dups", dups=single.duplicates)
say("l2_single_once", jobs=single.jobs, once=single.claims == single.jobs)

# %% [markdown] tags=["en"]
# The single statement gives zero, every time: not because it was lucky, but because
# there is no moment at which a second claim could see the job as still pending.
#
# ## Does a transaction around the two statements help?
#
# It does, in SQLite, and it is worth seeing how. A plain `BEGIN` (SQLite calls it
# `DEFERRED`) takes no lock until it needs one: both claimers read job 1 without the
# write lock. The first to write takes the lock. When the second tries to write, SQLite
# refuses it with **"database is locked"**, for one of two reasons. While the first still
# holds the write lock, the refusal (`SQLITE_BUSY`) comes at once: a transaction that has
# already read may not wait for the lock, so the busy timeout is not consulted. Once the
# first has committed, the second's snapshot is older than the file, and a write from it is
# refused too (`SQLITE_BUSY_SNAPSHOT`, with the same message). Either way the loser must
# roll back and try again, and it never gets the job twice. `BEGIN IMMEDIATE` takes the write lock *before* the `SELECT`, so the
# second claimer waits at `BEGIN` and then reads the table as the first one left it.

# %% [markdown] tags=["ru"]
# Один оператор даёт ноль каждый раз, и не потому, что повезло: просто нет такого
# момента, когда второй захват мог бы увидеть задачу ещё свободной.
#
# ## Поможет ли транзакция вокруг двух операторов?
#
# В SQLite поможет, и интересно посмотреть, как именно. Обычный `BEGIN` (в SQLite он
# называется `DEFERRED`) не берёт блокировку, пока она не понадобится: оба воркера читают
# задачу 1 без блокировки на запись. Первый, кто пишет, берёт блокировку. Когда пытается
# писать второй, SQLite отказывает ему с ошибкой **`database is locked`** («база данных
# заблокирована»), и причин у отказа
# две. Пока первый ещё держит блокировку записи, отказ (`SQLITE_BUSY`) приходит сразу:
# транзакции, которая уже читала, ждать блокировку нельзя, и тайм-аут ожидания блокировки
# (`busy_timeout`) даже не учитывается. Когда первый уже зафиксировал транзакцию, снимок
# данных второго старше файла, и запись с него тоже отклоняется (`SQLITE_BUSY_SNAPSHOT`, с
# тем же текстом ошибки). В обоих случаях проигравший должен откатиться и попробовать
# снова, но дважды задачу не получит. `BEGIN IMMEDIATE`
# берёт блокировку на запись *до* `SELECT`, поэтому второй воркер ждёт на `BEGIN` и
# потом читает таблицу уже такой, какой её оставил первый.

# %% tags=["nbval-check-output"]
print(wrong.BEGIN["deferred"], "|", wrong.BEGIN["immediate"])

# %% tags=["nbval-ignore-output"]
deferred = wrong.race(work / "race-deferred.db", claim="naive", pause=0.002, transaction="deferred")
immediate = wrong.race(work / "race-immediate.db", claim="naive", pause=0.002, transaction="immediate")
for what, r in (("l2_deferred", deferred), ("l2_immediate", immediate)):
    say("l2_race", what=lessons.text(what, lang), claims=r.claims, dups=r.duplicates, locked=r.locked)

# %% tags=["nbval-check-output"]
say("l2_deferred_fact", dups=deferred.duplicates, locked=deferred.locked > 0)
say("l2_immediate_fact", dups=immediate.duplicates, locked=immediate.locked)

# %% [markdown] tags=["en"]
# Both are correct. Why, then, is the claim one statement? Because each transaction pays
# for its correctness:
#
# - `DEFERRED` turns duplicates into errors. Every collision is a failed transaction and
#   a retry loop that your code must have; under contention the losers retry many times
#   for each job (count them above).
# - `IMMEDIATE` holds the file's one write lock from its `SELECT` to its `COMMIT`,
#   including whatever happens in between: the 2 ms here, a network hop or a GC pause in
#   real life. Every other writer waits that long: other claims, but also heartbeats and
#   completions.
# - The single statement holds the write lock only while SQLite runs it, needs no retry
#   loop, and is one round trip.
#
# This reasoning is SQLite's, where one writer at a time is the rule. A server database
# lets writers run side by side, and a claim there needs row locks as well
# (`FOR UPDATE SKIP LOCKED` in PostgreSQL).

# %% [markdown] tags=["ru"]
# Оба способа правильные. Почему же тогда захват — один оператор? Потому что каждая
# транзакция платит за свою правильность:
#
# - `DEFERRED` превращает дубли в ошибки. Каждое столкновение — это проваленная
#   транзакция и цикл повторов, который обязан быть в вашем коде; при высокой
#   конкуренции проигравшие повторяют попытку по многу раз на каждую задачу (посчитайте
#   выше).
# - `IMMEDIATE` держит единственную блокировку записи на файл от своего `SELECT` до
#   `COMMIT`, вместе со всем, что происходит между ними: здесь это 2 мс, в жизни — сетевой
#   запрос или пауза сборщика мусора. Все остальные пишущие ждут: и другие захваты, и
#   продления аренды, и завершения задач.
# - Один оператор держит блокировку записи, только пока SQLite его выполняет, не требует
#   цикла повторов и обходится одним обращением к базе.
#
# Всё это рассуждение — про SQLite, где одновременно пишет только один. Серверная база
# данных пускает пишущих параллельно, и захвату там нужны ещё и блокировки строк
# (`FOR UPDATE SKIP LOCKED` в PostgreSQL).

# %% [markdown] tags=["en"]
# ## How SQLite finds the next job
#
# A claim runs every time a worker polls, so it must stay fast however many finished jobs
# pile up. The schema keeps an index right beside the table, in the order the claim sorts,
# and *partial*: only pending jobs are in it, so a claimed or finished job leaves the
# index and the claim never walks over it.

# %% [markdown] tags=["ru"]
# ## Как SQLite находит следующую задачу
#
# Захват выполняется при каждом опросе очереди, поэтому он должен оставаться быстрым,
# сколько бы выполненных задач ни накопилось. В схеме рядом с таблицей лежит индекс в том
# порядке, в каком сортирует захват, и он *частичный*: в нём только задачи в статусе
# pending, так что захваченная или выполненная задача из индекса уходит, и захват её
# никогда не перебирает.

# %% tags=["nbval-check-output"]
index = [s for s in schema_statements() if "jobs_claim" in s][0]
print("\n".join(line for line in index.splitlines() if not line.startswith("--")))  # without its comments / без комментариев

# %% tags=["nbval-ignore-output"]
plan = lessons.claim_plan(q)
print("\n".join(plan))

# %% tags=["nbval-check-output"]
say("l2_uses_index", yes=any("jobs_claim" in step for step in plan))
say("l2_temp_btree", yes=any("TEMP B-TREE" in step for step in plan))

# %% [markdown] tags=["en"]
# Read the plan's last line: `ANY(priority) AND queue=? AND run_at<?`. (A job belongs to a
# named queue, `default` unless it was given another, and a worker claims only from the
# queues it serves; the index keeps the queue's name between the priority and `run_at`.)
# SQLite does not walk the index job by job. For each priority level, from the highest
# down, it jumps straight to the jobs of this queue whose `run_at` has already passed, and
# the first one it meets is the answer. That matters
# when many jobs wait at a high priority for a later `run_at` (scheduled work, or retries
# in backoff): a plain walk would step over every one of them on every claim, while the
# jump costs one seek per priority level. leaselab writes a line of statistics into the
# file when it makes the schema (many jobs share each of a few priority levels), and that
# is what lets SQLite choose the jump.

# %% [markdown] tags=["ru"]
# Посмотрите на последнюю строку плана: `ANY(priority) AND queue=? AND run_at<?`. (Каждая
# задача лежит в именованной очереди — в `default`, если ей не назначили другую, — а воркер
# захватывает задачи только из тех очередей, которые обслуживает; в индексе имя очереди
# стоит между приоритетом и `run_at`.) SQLite не идёт по индексу от задачи к задаче. Для
# каждого уровня приоритета, начиная с высшего, он сразу переходит к задачам этой очереди,
# чей `run_at` уже наступил, и первая встреченная и есть ответ. Это
# важно, когда много задач с высоким приоритетом ждут своего `run_at` (работа по
# расписанию или повторы после ошибок): простой проход перешагивал бы через каждую из них
# при каждом захвате, а переход стоит одного поиска на уровень приоритета. Создавая схему,
# leaselab записывает в файл строку статистики (много задач делят каждый из немногих
# уровней приоритета), и именно она позволяет SQLite выбрать такой переход.

# %% [markdown] tags=["en"]
# See it: put 10 urgent jobs scheduled for an hour from now above one ordinary job that is
# due, claim, then do the same with 10,000 urgent jobs. `lessons.claim_steps` counts the
# steps SQLite's engine takes for one claim: a count of work, not of time, so however
# busy the machine it is the same wherever the same SQLite build runs the claim (another
# version of SQLite may plan the statement or count its steps differently).

# %% [markdown] tags=["ru"]
# Проверим: поставим над одной обычной задачей, которой уже пора, 10 срочных задач,
# назначенных через час, и захватим; потом то же самое с 10 000 срочных задач.
# `lessons.claim_steps` считает шаги, которые движок SQLite делает за один захват: это
# мера работы, а не времени, поэтому, как бы ни была загружена машина, она одна и та же
# везде, где захват выполняет та же сборка SQLite (другая версия SQLite может построить
# другой план запроса или считать шаги иначе).

# %% tags=["nbval-ignore-output"]
def steps_past(delayed: int) -> int:
    d = Queue(work / f"delayed-{delayed}.db", clock=clock)
    d.enqueue_many(list(range(delayed)), priority=9, delay=3600)
    d.enqueue("due now")
    steps, job = lessons.claim_steps(d)
    assert job.payload == "due now"
    d.close()
    return steps


few, many = steps_past(10), steps_past(10_000)
say("l2_steps", n=10, steps=few)
say("l2_steps", n=10_000, steps=many)

# %% tags=["nbval-check-output"]
say("l2_same_work", yes=many <= 1.5 * few)

# %% [markdown] tags=["en"]
# ## Who goes first: priority, then `run_at`, then id
#
# Higher `priority` first; among equals, the one that became runnable earlier; among
# those, the older id. A job whose `run_at` is in the future (a `delay`, or a backoff
# after a failure) is not claimable at all until then.

# %% [markdown] tags=["ru"]
# ## Кто первый: приоритет, потом `run_at`, потом id
#
# Сначала больший `priority`; при равном — та, что раньше стала доступна; если и здесь
# равенство — с меньшим id. Задачу с `run_at` в будущем (из-за `delay` или отсрочки
# повтора после ошибки) до этого момента нельзя захватить вовсе.

# %% tags=["nbval-check-output"]
o = Queue(work / "order.db", clock=clock)
o.enqueue("normal-early", priority=0)
clock.advance(1)
o.enqueue("normal-later", priority=0)
o.enqueue("urgent", priority=10)
o.enqueue("urgent-tomorrow", priority=10, delay=24 * 3600)
say("l2_order_now", order=[o.claim("w").payload for _ in range(3)], then=o.claim("w"))
clock.advance(24 * 3600)
say("l2_order_later", payload=o.claim("w").payload)

# %% [markdown] tags=["en"]
# ## Summary
#
# - "Find a job, then take it" in two statements gives the same job to two workers
#   whenever their steps interleave: a few times per hundred with nothing in between,
#   far more once a network hop or a pause separates them. One worker never shows it.
# - A transaction fixes it in SQLite: `DEFERRED` by failing the loser with "database is
#   locked" (retry it), `IMMEDIATE` by holding the write lock across both statements.
# - leaselab's claim is **one** `UPDATE … WHERE id = (SELECT … LIMIT 1) RETURNING …`.
#   SQLite's single writer makes it atomic: zero duplicates, no retries, the lock held
#   only for the statement.
# - A partial index in the claim's sort order lets SQLite go straight to the first
#   runnable job, level by priority level: no sorting, however long the history grows,
#   and no stepping over jobs that are not due yet.
# - Order: `priority DESC, run_at, id`; a job is invisible until its `run_at`.
#
# ## Exercises
#
# **1. Write code.** Make the naive claim safe *without* a transaction and without
# merging its two statements. Keep step one, `wrong.NAIVE_SELECT`, as it is, and write
# step two: `my_take(conn, job_id, worker)` takes the job `job_id` for `worker` on the
# connection `conn` (in autocommit, as the racers above run) and returns `True` only if
# this worker really got it, `False` if someone else took it since step one. A claimer
# whose take returns `False` simply looks again. The stub is the naive step two, which
# takes the job whoever holds it. The check makes the interleaving that broke the naive
# claim above on a real queue file: A and B both look and see job 1, A takes it, then B
# tries; B must be told it lost, A's claim must stand, and B's second look must get it job 2.

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - «Найти задачу, потом взять» двумя операторами отдаёт одну задачу двум воркерам, как
#   только их шаги переплетутся: несколько раз на сотню, когда между операторами ничего
#   нет, и гораздо чаще, когда их разделяет сетевой запрос или пауза. С одним воркером
#   этого не видно.
# - В SQLite это лечит транзакция: `DEFERRED` — тем, что проигравший получает «database
#   is locked» (и должен повторить), `IMMEDIATE` — тем, что держит блокировку записи на
#   протяжении обоих операторов.
# - Захват в leaselab — **один** `UPDATE … WHERE id = (SELECT … LIMIT 1) RETURNING …`.
#   Атомарным его делает то, что в SQLite пишет только один: ноль дублей, никаких
#   повторов, а блокировка держится только на время оператора.
# - Частичный индекс в порядке сортировки захвата позволяет SQLite сразу перейти к первой
#   готовой задаче, уровень за уровнем приоритета: без сортировки, какой бы длинной ни
#   была история, и без перешагивания через задачи, чьё время ещё не пришло.
# - Порядок: `priority DESC, run_at, id`; до своего `run_at` задача невидима.
#
# ## Упражнения
#
# **1. Напишите код.** Сделайте наивный захват безопасным — *без* транзакции и не
# сливая два его оператора в один. Первый шаг, `wrong.NAIVE_SELECT`, оставьте как есть, а
# второй напишите сами: `my_take(conn, job_id, worker)` берёт задачу `job_id` для
# `worker` через подключение `conn` (в режиме autocommit, как у воркеров в гонках выше) и
# возвращает `True`, только если этот воркер действительно её получил, и `False`, если
# после первого шага её уже кто-то взял. Воркер, у которого `my_take` вернула `False`,
# просто смотрит снова. Заготовка — наивный второй шаг, который забирает задачу, у кого бы
# она ни была. Проверка на настоящем файле очереди разыграет то чередование, на котором
# наивный захват сломался выше: A и B оба смотрят и видят задачу 1, A её берёт, потом
# пробует B. B должен узнать, что проиграл, захват A должен остаться в силе, а посмотрев
# снова, B должен получить задачу 2.

# %%
import secrets
import time

def my_take(conn, job_id, worker):
    now = time.time()
    conn.execute(wrong.NAIVE_UPDATE, {"id": job_id, "now": now, "lease_until": now + 30,
                                      "worker": worker, "token": secrets.token_hex(16)}).fetchone()
    return True   # your code: did this worker get the job? / ваш код: получил ли воркер задачу?

# %% [markdown] tags=["en"]
# <details><summary>Show the answer</summary>
#
# Let the `UPDATE` itself check that the job is still pending, and ask it whether it
# changed a row:
#
# ```python
# TAKE = wrong.NAIVE_UPDATE.replace("WHERE id = :id", "WHERE id = :id AND status = 'pending'")
#
# def my_take(conn, job_id, worker):
#     now = time.time()
#     row = conn.execute(TAKE, {"id": job_id, "now": now, "lease_until": now + 30,
#                               "worker": worker, "token": secrets.token_hex(16)}).fetchone()
#     return row is not None
# ```
#
# This is a compare-and-set: SQLite runs the one `UPDATE` under the write lock, so its
# check and its write cannot be split, and whoever comes second changes no row and learns
# that it lost. It is safe, but it keeps two costs of the naive claim: two statements per
# claim, and under contention the losers look again and again, as `DEFERRED`'s did above.
# The single statement has neither.
# </details>

# %% [markdown] tags=["ru"]
# <details><summary>Показать ответ</summary>
#
# Пусть сам `UPDATE` проверяет, что задача всё ещё в статусе pending, а мы спросим у
# него, изменил ли он строку:
#
# ```python
# TAKE = wrong.NAIVE_UPDATE.replace("WHERE id = :id", "WHERE id = :id AND status = 'pending'")
#
# def my_take(conn, job_id, worker):
#     now = time.time()
#     row = conn.execute(TAKE, {"id": job_id, "now": now, "lease_until": now + 30,
#                               "worker": worker, "token": secrets.token_hex(16)}).fetchone()
#     return row is not None
# ```
#
# Это сравнение с обменом (compare-and-set): SQLite выполняет один `UPDATE` под
# блокировкой записи, поэтому проверку и запись не разорвать, и второй не меняет ни одной
# строки и узнаёт, что проиграл. Так безопасно, но две цены наивного захвата остаются: два
# оператора на захват и, при высокой конкуренции, проигравшие, которые смотрят снова и
# снова, как проигравшие у `DEFERRED` выше. У одного оператора нет ни того ни другого.
# </details>

# %% tags=["nbval-check-output"]
from leaselab.lessons import exercises
print(exercises.check_guarded_take(my_take, lang))

# %% [markdown] tags=["en"]
# **2. Predict.** A queue has done 10,000 jobs, and they stay in its file as `done` rows; one
# job is pending. Does a claim now do more work than on a queue with only that one job?
# Choose below and press *Commit*, then run the cell after it: it counts the claim's steps
# with `lessons.claim_steps`, as above, with none, ten and ten thousand done jobs.

# %% [markdown] tags=["ru"]
# **2. Предскажите.** Очередь выполнила 10 000 задач, и они остались в её файле строками
# со статусом `done`; ждёт одна задача. Делает ли захват теперь больше работы, чем в
# очереди с одной этой задачей? Выберите ответ ниже и нажмите «Зафиксировать», потом
# выполните следующую ячейку: она, как и выше, считает шаги захвата через
# `lessons.claim_steps` — без выполненных задач, с десятью и с десятью тысячами.

# %%
guess = lessons.predict("l2_ex2", lang)  # without widgets: lessons.predict("l2_ex2", lang, answer=...) / без виджетов: lessons.predict("l2_ex2", lang, answer=...)
guess

# %% tags=["nbval-ignore-output"]
def steps_past_done(done: int) -> int:
    d = Queue(work / f"done-{done}.db", clock=clock)
    d.enqueue_many(list(range(done)))
    while held := d.claim_many(500, "w"):
        d.complete_many([(j.id, j.token, None) for j in held])
    d.enqueue("due now")
    steps, job = lessons.claim_steps(d)
    assert job.payload == "due now"
    d.close()
    return steps


done_steps = {n: steps_past_done(n) for n in (0, 10, 10_000)}
for n, steps in done_steps.items():
    say("l2_ex_done_steps", n=n, steps=steps)

# %% tags=["nbval-check-output"]
guess.reveal("same" if done_steps[10_000] <= 1.5 * done_steps[0] else "more")

# %% [markdown] tags=["en"]
# <details><summary>Answer</summary>
#
# The same work. The claim's index, `jobs_claim`, is partial: `WHERE status = 'pending'`
# in its definition (`leaselab/backends/sqlite/schema.sql`) keeps only the jobs that wait,
# so a done job is not in it at all, and the claim never steps over one. An index over every
# row would hold the done jobs too, and a claim would have to look past them to the pending
# ones. Keep the done jobs or delete them: the claim does not care.
# </details>
#
# **3. Predict** the order in which these jobs are claimed: `"x"` (priority 1, delay 5 s),
# `"y"` (priority 0), `"z"` (priority 1), with the clock moved by 10 s before claiming.
# Commit your order below, then run the cell after it.

# %% [markdown] tags=["ru"]
# <details><summary>Ответ</summary>
#
# Столько же. Индекс захвата `jobs_claim` частичный: условие `WHERE status = 'pending'`
# в его определении (`leaselab/backends/sqlite/schema.sql`) оставляет в нём только ждущие
# задачи, так что выполненной задачи в нём нет вовсе и захват никогда через неё не
# перешагивает. Индекс по всем строкам хранил бы и выполненные задачи, и захвату пришлось
# бы просматривать их, чтобы добраться до ждущих. Храните выполненные задачи или удаляйте —
# захвату всё равно.
# </details>
#
# **3. Предскажите** порядок, в котором будут захвачены эти задачи: `"x"` (приоритет 1,
# задержка 5 с), `"y"` (приоритет 0), `"z"` (приоритет 1), а перед захватом часы сдвинуты
# на 10 с. Зафиксируйте порядок ниже, потом выполните следующую ячейку.

# %%
guess = lessons.predict("l2_ex3", lang)  # without widgets: lessons.predict("l2_ex3", lang, answer=...) / без виджетов: lessons.predict("l2_ex3", lang, answer=...)
guess

# %% tags=["nbval-check-output"]
with guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    ex = Queue(work / "exercise.db", clock=ManualClock())
    ex.enqueue("x", priority=1, delay=5)
    ex.enqueue("y", priority=0)
    ex.enqueue("z", priority=1)
    ex.clock.advance(10)
    order = [ex.claim("w").payload for _ in range(3)]
    print(order)
    guess.reveal("".join(order))
    ex.close()

# %% [markdown] tags=["en"]
# <details><summary>Answer</summary>
#
# `z` first (same priority as `x` but runnable 5 s earlier), then `x`, then `y`.
# </details>
#
# Clean up: close the files and remove the temporary folder. `race` has already waited
# for all of its processes.

# %% [markdown] tags=["ru"]
# <details><summary>Ответ</summary>
#
# Первой `z` (приоритет как у `x`, но доступна на 5 с раньше), потом `x`, потом `y`.
# </details>
#
# Уберём за собой: закроем файлы и удалим временную папку. `race` уже дождался всех своих
# процессов.

# %% tags=["nbval-check-output"]
o.close()
q.close()
say("folder_removed", removed=lessons.cleanup(work))
