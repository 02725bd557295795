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
# # Lesson 3. Fencing: the zombie that must not write
#
# Lesson 1 gave every claim a deadline, and that bought us something dangerous. The
# queue cannot tell a dead worker from a *frozen* one: a long garbage-collection pause,
# a swapped-out process, a laptop lid closed, a `SIGSTOP`. Both stop heartbeating, both
# lose their lease, and the job goes to another worker. But the frozen one wakes up. It
# has no idea that time passed; it finishes "its" job and writes the result — on top
# of the result the other worker already wrote. A worker that acts on a lease it no
# longer holds is a **zombie**.
#
# The cure is a **fencing token**: every claim writes a fresh random token into the
# job, and every write a worker makes carries the token it got. A write whose token no
# longer matches changes nothing, and the zombie gets `LeaseLost`.

# %% [markdown] tags=["ru"]
# # Урок 3. Fencing: «зомби», которому нельзя писать
#
# В уроке 1 мы дали каждому захвату срок, и это принесло с собой опасность. Очередь не
# отличает мёртвого воркера от *замершего*: долгая пауза сборщика мусора, процесс,
# вытесненный в swap, закрытая крышка ноутбука, `SIGSTOP`. Оба перестают слать heartbeat,
# оба теряют аренду, и задача уходит другому воркеру. Но замерший просыпается. Он не
# знает, что время прошло, доделывает «свою» задачу и записывает результат — поверх
# результата, который другой воркер уже записал. Воркер, который действует по аренде,
# которой у него больше нет, называется **зомби**.
#
# Лекарство — **fencing-токен**: каждый захват записывает в задачу свежий случайный
# токен, и каждая запись воркера несёт токен, полученный им при захвате. Запись с
# устаревшим токеном ничего не меняет, а зомби получает `LeaseLost`.

# %%
from leaselab import LeaseLost, ManualClock, Queue, lessons
from leaselab.backends.sqlite import statements as sql
from leaselab.lab import timeline
from leaselab.lessons import wrong
from leaselab.lessons.fence import FencedStore
from leaselab.lab.fleet import Fleet

lang = lessons.language()
work = lessons.scratch("03-fencing")

clock = ManualClock()
q = Queue(work / "fence.db", clock=clock)

# %% [markdown] tags=["en"]
# ## The zombie, with the clock in our hands
#
# `w1` claims a job that renders the home page, with a 10-second lease, and freezes.
# The lease expires, the reaper puts the job back, `w2` claims it after the backoff,
# renders the page and completes. All of this is legal and normal.

# %% [markdown] tags=["ru"]
# ## Зомби на ручных часах
#
# `w1` захватывает задачу «отрисовать главную страницу» с арендой на 10 секунд и замирает.
# Аренда истекает, reaper возвращает задачу, после паузы её захватывает `w2`, рисует
# страницу и завершает задачу. Всё это законно и нормально.

# %% tags=["nbval-check-output"]
job_id = q.enqueue({"render": "home"})
zombie = q.claim("w1", lease=10)          # w1 freezes right after this
clock.advance(11)
print("reaped:", q.reap())
clock.advance(q.backoff.delay(1))
fresh = q.claim("w2", lease=10)
q.complete(fresh.id, fresh.token, {"rendered_by": "w2", "version": 2})
print("job", job_id, "is", q.get(job_id).status, "with result", q.get(job_id).result)
print("w1's token still in the job:", q.get(job_id).token == zombie.token)

# %% [markdown] tags=["en"]
# Now `w1` wakes up and reports its old result. `complete` only changes a row
# `WHERE status = 'running' AND token = :token`; here neither is true, so nothing changes
# and the zombie hears about it:

# %% [markdown] tags=["ru"]
# Теперь `w1` просыпается и сообщает свой старый результат. `complete` меняет строку только
# `WHERE status = 'running' AND token = :token`; здесь не выполнено ни то, ни другое,
# поэтому ничего не меняется, и зомби узнаёт об этом:

# %% tags=["nbval-check-output"]
print(sql.COMPLETE.strip())

# %% tags=["nbval-check-output"]
try:
    q.complete(zombie.id, zombie.token, {"rendered_by": "w1", "version": 1})
    print("the zombie's write was accepted")
except LeaseLost as lost:
    print("the zombie got LeaseLost; the job is", lost.status)
print("result:", q.get(job_id).result)

# %% [markdown] tags=["en"]
# The refusal is not silent on the queue's side either: it is in the history as
# `lease_lost`, under the zombie's name and attempt.

# %% [markdown] tags=["ru"]
# Отказ не проходит бесследно и для очереди: он записан в журнал как `lease_lost`, с
# именем зомби и номером его попытки.

# %% tags=["nbval-check-output"]
print(lessons.history(q.events(job_id)))

# %% [markdown] tags=["en"]
# ## The wrong way: a write that checks only the id
#
# The same story once more, but this time the zombie's completion matches the job by its
# id alone, as a lot of real code does (`UPDATE … WHERE id = ?`):

# %% [markdown] tags=["ru"]
# ## Неправильно: запись, которая проверяет только id
#
# Та же история ещё раз, но теперь завершение зомби находит задачу только по id, как
# делает очень много настоящего кода (`UPDATE … WHERE id = ?`):

# %% tags=["nbval-check-output"]
print(wrong.UNFENCED_COMPLETE.strip())

# %% tags=["nbval-check-output"]
bad_id = q.enqueue({"render": "about"})
zombie2 = q.claim("w1", lease=10)
clock.advance(11); q.reap(); clock.advance(q.backoff.delay(1))
fresh2 = q.claim("w2", lease=10)
q.complete(fresh2.id, fresh2.token, {"rendered_by": "w2", "version": 2})
print("before the zombie wakes:", q.get(bad_id).result)
wrong.unfenced_complete(q.path, zombie2.id, {"rendered_by": "w1", "version": 1}, clock=clock)
print("after the zombie wakes: ", q.get(bad_id).result)

# %% [markdown] tags=["en"]
# The newer result is gone, replaced by the stale one, and nothing anywhere reports an
# error. This is the bug fencing exists for.

# %% [markdown] tags=["ru"]
# Новый результат пропал, его заменил устаревший, и нигде никакой ошибки. Именно от этой
# ошибки и защищает fencing.

# %% [markdown] tags=["en"]
# ## A real zombie: `SIGSTOP` and `SIGCONT`
#
# Now with processes. `w1` claims a 2-second job with a 2-second lease and we freeze it
# with `SIGSTOP` (that is what `fleet.pause` does). Its heartbeat thread is frozen too.
# We start `w2`; its reaper finds the expired lease, and `w2` does the job. Then we thaw
# `w1` with `SIGCONT`. Its next heartbeat or its completion carries the old token.

# %% [markdown] tags=["ru"]
# ## Настоящий зомби: `SIGSTOP` и `SIGCONT`
#
# Теперь на процессах. `w1` захватывает двухсекундную задачу с арендой в 2 секунды, и мы
# замораживаем его сигналом `SIGSTOP` (это и делает `fleet.pause`). Его поток heartbeat
# тоже замирает. Запускаем `w2`: его reaper находит истёкшую аренду, и `w2` выполняет
# задачу. Потом размораживаем `w1` сигналом `SIGCONT`. Его ближайший heartbeat или
# завершение придут со старым токеном.

# %% tags=["nbval-ignore-output"]
real = Queue(work / "real.db")
fleet = Fleet(real.path)
real_id = real.enqueue({"seconds": 2})
fleet.spawn(handler="leaselab.lessons.demo:task", lease=2.0, name="w1")
lessons.wait_until(lambda: real.get(real_id).status == "running", what="w1 to claim the job")
fleet.pause("w1")
fleet.spawn(handler="leaselab.lessons.demo:task", lease=2.0, name="w2")
lessons.wait_until(lambda: real.get(real_id).status == "done", what="w2 to finish the job")
fleet.resume("w1")
lessons.wait_until(lambda: [e for e in real.events(real_id) if e.kind == "lease_lost"], what="w1's refusal");

# %% tags=["nbval-check-output"]
print([(e.kind, e.attempt, e.worker) for e in real.events(real_id) if e.kind != "heartbeat"])
lost = [e for e in real.events(real_id) if e.kind == "lease_lost"]
print("the zombie got LeaseLost:", [e.worker for e in lost] == ["w1"])
print("result written by:", real.get(real_id).result["worker"])

# %% [markdown] tags=["en"]
# `w1`'s own log says what happened from its side (the line depends on which of its two
# threads woke first: the heartbeat or the handler):

# %% [markdown] tags=["ru"]
# Журнал самого `w1` рассказывает, как это выглядело с его стороны (строка зависит от
# того, какой из двух его потоков проснулся первым: heartbeat или обработчик):

# %% tags=["nbval-ignore-output"]
print(fleet.log_tail("w1"))

# %% [markdown] tags=["en"]
# On the timeline: the shaded interval is `w1` frozen; the triangle is the reap; the cross
# is the zombie's refused write, after `w2` had already finished.

# %% [markdown] tags=["ru"]
# На временной шкале: закрашенный интервал — `w1` заморожен; треугольник — reaper забрал
# задачу; крестик — отклонённая запись зомби, уже после того, как `w2` всё закончил.

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(real.events(), fleet.actions), lang=lang)

# %% [markdown] tags=["en"]
# > **A pause at the wrong moment.** SQLite's write lock is *not* a lease: it has no
# > expiry. Here `w1` froze while sleeping in its handler, holding nothing. Had the
# > `SIGSTOP` landed in the few microseconds while `w1` was committing, it would have frozen
# > with the file's write lock in its hands, and every other writer (`w2`, the reaper, the
# > dashboard's buttons) would have waited until it was resumed or their busy timeout ran
# > out. Leases protect *jobs* from frozen workers; nothing protects a lock from a frozen
# > process except keeping transactions short, which is why each of leaselab's writes is
# > one statement or one short transaction.

# %% [markdown] tags=["ru"]
# > **Пауза в неудачный момент.** Блокировка записи в SQLite — *не* аренда: срока у неё
# > нет. Здесь `w1` замер, пока спал в обработчике, и ничего не держал. Попади `SIGSTOP` в
# > те несколько микросекунд, когда `w1` фиксировал транзакцию, он застыл бы с блокировкой
# > записи файла, и все остальные пишущие (`w2`, reaper, кнопки панели) ждали бы, пока его
# > не разморозят или пока не истечёт их busy timeout. Аренда защищает *задачи* от
# > замёрзших воркеров; блокировку от замёрзшего процесса не защищает ничто, кроме коротких
# > транзакций, — поэтому каждая запись leaselab — это один оператор или одна короткая
# > транзакция.

# %% [markdown] tags=["en"]
# ## Fencing the world outside the queue
#
# The token protects writes *to the queue*. But a handler usually writes somewhere else
# first: a file, an object in a bucket, a row in another database. The zombie does that
# write *before* it ever talks to the queue, so the queue cannot stop it. The outside
# system has to check a fence itself.
#
# A random token cannot be compared for "newer or older", but `job.fence` can: it is
# `(job id, attempts)`, and `attempts` grows by one with every claim. An outside store
# that remembers the highest fence it has accepted for each key can refuse anything
# older, in one conditional statement:

# %% [markdown] tags=["ru"]
# ## Fencing для мира за пределами очереди
#
# Токен защищает записи *в очередь*. Но обработчик обычно сначала пишет куда-то ещё: в
# файл, в объектное хранилище, в другую базу. Зомби делает эту запись *до* того, как
# вообще обратится к очереди, и очередь помешать ему не может. Внешняя система должна
# проверять fence сама.
#
# Случайный токен нельзя сравнить по «новее или старее», а `job.fence` можно: это
# `(id задачи, attempts)`, и `attempts` растёт на единицу при каждом захвате. Внешнее
# хранилище, которое помнит наибольший принятый fence для каждого ключа, может отказать
# всему, что старше, одним условным оператором:

# %% tags=["nbval-check-output"]
from leaselab.lessons import fence
print(fence.FENCED_WRITE.strip())

# %% tags=["nbval-check-output"]
page_id = q.enqueue({"render": "pricing"})
old = q.claim("w1", lease=10)            # attempt 1, then w1 freezes
clock.advance(11); q.reap(); clock.advance(q.backoff.delay(1))
new = q.claim("w2", lease=10)            # attempt 2
print("fences:", old.fence, "<", new.fence, "=", old.fence < new.fence)

store = FencedStore(work / "pages.db")
print("w2 writes pricing.html:", store.write("pricing.html", "prices v2", fence=new.fence))
print("zombie w1 writes pricing.html:", store.write("pricing.html", "prices v1", fence=old.fence))
print("the page now:", store.read("pricing.html"))

# %% [markdown] tags=["en"]
# And the same two writes into a store that does not check the fence:

# %% [markdown] tags=["ru"]
# И те же две записи в хранилище, которое fence не проверяет:

# %% tags=["nbval-check-output"]
store.write("faq.html", "faq v2", fence=new.fence, check=False)
store.write("faq.html", "faq v1", fence=old.fence, check=False)
print("the page now:", store.read("faq.html"))

# %% [markdown] tags=["en"]
# ## Summary
#
# - A frozen worker loses its lease like a dead one, but it comes back: a **zombie**.
# - Every claim writes a fresh **token**; heartbeat, complete and fail change a row only
#   `WHERE status = 'running' AND token = ?`. Zero rows changed means `LeaseLost`, and the
#   refusal is recorded as a `lease_lost` event.
# - A write that matches only the id silently replaces a newer result with a stale one.
# - For systems outside the queue, pass `job.fence = (job id, attempts)`: it only rises,
#   so the outside system can refuse writes from an older attempt.
#
# ## Exercises
#
# 1. A late worker's *heartbeat* arrives after its lease expired but *before* anyone
#    reaped the job. Is it accepted? Predict, then run the cell. (Hint: read `sql.HEARTBEAT`.)
# 2. Fences `(7, 3)` and `(7, 12)`: which one may overwrite the other's write? Check with
#    the store.

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - Замерший воркер теряет аренду так же, как мёртвый, но возвращается: это **зомби**.
# - Каждый захват пишет свежий **токен**; heartbeat, complete и fail меняют строку только
#   `WHERE status = 'running' AND token = ?`. Ноль изменённых строк означает `LeaseLost`,
#   а отказ записывается в журнал событием `lease_lost`.
# - Запись, которая проверяет только id, молча заменяет новый результат устаревшим.
# - Системам вне очереди передавайте `job.fence = (id задачи, attempts)`: он только
#   растёт, и внешняя система может отвергать записи более старой попытки.
#
# ## Упражнения
#
# 1. Heartbeat опоздавшего воркера приходит после истечения аренды, но *до* того, как
#    reaper забрал задачу. Примут ли его? Предскажите и запустите ячейку. (Подсказка: прочтите
#    `sql.HEARTBEAT`.)
# 2. Fence `(7, 3)` и `(7, 12)`: какой из них может перезаписать запись другого?
#    Проверьте на хранилище.

# %% tags=["nbval-check-output"]
late_id = q.enqueue({"render": "late"})
late = q.claim("w1", lease=10)
clock.advance(15)                        # expired, but nobody has reaped yet
print("heartbeat accepted, lease left:", q.heartbeat(late.id, late.token, lease=10) - clock())

# %% tags=["nbval-check-output"]
print("(7, 12) then (7, 3):", store.write("x", "a", fence=(7, 12)), store.write("x", "b", fence=(7, 3)))
print("(7, 3) then (7, 12):", store.write("y", "a", fence=(7, 3)), store.write("y", "b", fence=(7, 12)))

# %% [markdown] tags=["en"]
# (1: yes. The token still holds the job, so the worker is merely late, not a zombie yet;
# fencing is about who holds the job, not about the clock. 2: only the higher fence,
# `(7, 12)`, may overwrite.)
#
# Clean up: end the workers, close the files, remove the temporary folder.

# %% [markdown] tags=["ru"]
# (1: да. Токен всё ещё держит задачу, значит, воркер просто опоздал, но зомби ещё не
# стал; fencing определяет, кто держит задачу, а не сколько времени прошло. 2: перезаписать
# может только больший fence, `(7, 12)`.)
#
# Уберём за собой: завершим воркеров, закроем файлы, удалим временную папку.

# %% tags=["nbval-check-output"]
fleet.shutdown()
print("workers alive:", [s.name for s in fleet.status() if s.state in ("running", "paused", "stopping")])
for closable in (store, fleet.queue, real, q):
    closable.close()
print("temporary folder removed:", lessons.cleanup(work))
