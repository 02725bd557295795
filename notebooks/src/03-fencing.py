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
# We first watch a real zombie do that damage. Then the cure: a **fencing token**. Every
# claim writes a fresh random token into the job, and every write a worker makes carries
# the token it got. A write whose token no longer matches changes nothing, and the zombie
# gets `LeaseLost`. Last, the world outside the queue: a store that checks a fence, and a
# handler that asks whether it still holds its lease.

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
# Сначала посмотрим, как настоящий зомби наносит этот вред. Потом лекарство —
# **fencing-токен**: каждый захват записывает в задачу свежий случайный токен, и каждая
# запись воркера несёт токен, полученный им при захвате. Запись с устаревшим токеном
# ничего не меняет, а зомби получает `LeaseLost`. Напоследок — мир за пределами очереди:
# хранилище, которое проверяет fence, и обработчик, который спрашивает, держит ли он ещё
# свою аренду.

# %%
from leaselab import FencedStore, LeaseLost, ManualClock, Queue, fencing, lessons
from leaselab.backends.sqlite import statements as sql
from leaselab.harness.fleet import Fleet
from leaselab.lab import timeline
from leaselab.lessons import wrong

lang = lessons.language()
say = lessons.speaker(lang)
work = lessons.scratch("03-fencing")

# %% [markdown] tags=["en"]
# ## A real zombie overwrites a newer result
#
# The handler `leaselab.harness.demo:publish` works for 3 seconds, then writes a page,
# `home.html`, into a store (a table in its own SQLite file, standing for a bucket or
# another service). The page says which worker and which attempt wrote it. This store
# checks nothing: the last writer wins.
#
# `w1` claims the job with a 3-second lease, and we freeze it with `SIGSTOP` (that is
# what `fleet.pause` does); its heartbeat thread freezes with it. We start `w2`: its
# reaper finds the expired lease, and `w2` runs the job from the start and writes the
# page. Then we thaw `w1` with `SIGCONT`. The first attempt waits at a gate before it
# writes (`hold`: a file we create only once `w2` is done), so however late the freeze
# comes on a slow machine, `w1` cannot have written first.

# %% [markdown] tags=["ru"]
# ## Настоящий зомби затирает более новый результат
#
# Обработчик `leaselab.harness.demo:publish` работает 3 секунды, а потом записывает
# страницу `home.html` в хранилище (таблицу в отдельном файле SQLite, которая изображает
# объектное хранилище или чужой сервис). На странице написано, какой воркер и какой
# попыткой её записал. Это хранилище ничего не проверяет: побеждает последний, кто
# записал.
#
# `w1` захватывает задачу с арендой на 3 секунды, и мы замораживаем его сигналом
# `SIGSTOP` (это и делает `fleet.pause`); его поток heartbeat замирает вместе с ним.
# Запускаем `w2`: его reaper находит истёкшую аренду, `w2` выполняет задачу с самого
# начала и записывает страницу. Потом размораживаем `w1` сигналом `SIGCONT`. Перед
# записью первая попытка ждёт у шлагбаума (`hold`: файл, который мы создаём, только когда
# `w2` закончит), поэтому, как бы поздно ни пришла заморозка на медленной машине, `w1` не
# успеет записать страницу первым.

# %%
def zombie_run(name, **options):
    """w1 claims a publish job and is frozen; w2 does the job; w1 is thawed. Returns the queue and fleet."""
    queue = Queue(work / f"{name}.db")
    fleet = Fleet(queue.path)
    gate = work / f"{name}.gate"  # w1's attempt writes only once this file exists / попытка w1 пишет, только когда этот файл появится
    job_id = queue.enqueue({"store": str(work / f"{name}-pages.db"), "key": "home.html", "seconds": 3,
                            "hold": str(gate), **options})
    fleet.spawn(handler="leaselab.harness.demo:publish", lease=3.0, name="w1")
    lessons.wait_until(lambda: queue.get(job_id).status == "running", what=lessons.text("wait_claim", lang))
    fleet.pause("w1")
    fleet.spawn(handler="leaselab.harness.demo:publish", lease=3.0, name="w2")
    lessons.wait_until(lambda: queue.get(job_id).status == "done", what=lessons.text("wait_done", lang))
    with FencedStore(work / f"{name}-pages.db") as pages:
        say("l3_page_before", **pages.read("home.html")[0])
    gate.touch()
    fleet.resume("w1")
    lessons.wait_until(lambda: any(end in fleet.log_tail("w1") for end in ("without its lease", "not written")),
                       what=lessons.text("l3_wait_zombie", lang))
    return queue, fleet

# %% tags=["nbval-check-output"]
plain, plain_fleet = zombie_run("plain")
with FencedStore(work / "plain-pages.db") as pages:
    say("l3_page_after", **pages.read("home.html")[0])
say("l3_queue_result", **plain.get(1).result["value"])
say("l3_zombie_log", refused="heartbeat refused" in plain_fleet.log_tail("w1"),
    withheld="result not written" in plain_fleet.log_tail("w1"))
lost = [e for e in plain.events() if e.kind == "lease_lost"]
say("l3_zombie_history", lost=len(lost), beats=sum(e.detail.startswith("heartbeat") for e in lost))

# %% [markdown] tags=["en"]
# The page is `w1`'s again: a stale result replaced the newer one, and nothing anywhere
# reported an error. The queue was not fooled: it refused `w1` as soon as `w1` woke. On
# waking, `w1`'s own clock told it first that the lease may have run out (a freeze longer
# than the lease; this clock comes back below), and the first thing it sent, a heartbeat,
# was refused (`w1`'s own log, `plain_fleet.log_tail("w1")`, says both). So when its
# handler returned, the worker withheld the completion: it never sent it, and its log
# says the result was not written. The job's history holds one `lease_lost`, the
# heartbeat's, and the queue kept `w2`'s result. (Had the completion been sent, with its
# old token, the queue would have refused it too, as we see next.) But the page write
# does not pass through the queue, so no refusal could stop it: the handler never asked
# whether it still held the job, and wrote.

# %% [markdown] tags=["ru"]
# На странице снова `w1`: устаревший результат заменил новый, и нигде никакой ошибки.
# Очередь при этом не обманулась: она отказала `w1`, как только тот проснулся. Сразу
# после разморозки собственные часы `w1` сказали ему, что аренда, возможно, истекла
# (заморозка длилась дольше аренды; к этим часам мы ещё вернёмся), а первое, что он отправил,
# heartbeat, отклонили (об обоих событиях говорит журнал самого `w1`,
# `plain_fleet.log_tail("w1")`). Поэтому, когда обработчик вернулся, воркер не стал
# отправлять завершение: в журнале воркера сказано, что результат не записан. В истории задачи одно событие `lease_lost` — от heartbeat, а
# в очереди остался результат `w2`. (Отправь воркер завершение со старым токеном, очередь
# отклонила бы и его — это мы разберём дальше.) Но запись страницы идёт мимо очереди, и
# никакой отказ очереди её остановить не мог: обработчик так и не спросил, держит ли он
# ещё задачу, и записал.

# %% [markdown] tags=["en"]
# On the timeline: the shaded interval is `w1` frozen; the triangle is the reap; the cross
# is the zombie's refused heartbeat, after `w2` had already finished.

# %% [markdown] tags=["ru"]
# На временной шкале: закрашенный интервал — `w1` заморожен; треугольник — возврат задачи
# в очередь; крестик — отклонённый heartbeat зомби, уже после того, как `w2` всё
# закончил.

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(plain.events(), plain_fleet.actions), lang=lang)

# %% [markdown] tags=["en"]
# ## The fence inside the queue
#
# What would the queue have done with the zombie's completion, had the worker sent it?
# We replay the story with a clock we move ourselves, and send every write by hand. `w1` claims a job with a 10-second lease and freezes. The lease expires,
# the reaper puts the job back, `w2` claims it after the backoff and completes.

# %% [markdown] tags=["ru"]
# ## Fencing внутри очереди
#
# Что сделала бы очередь с завершением от зомби, если бы воркер его отправил? Разыграем
# историю ещё раз на часах, которые мы двигаем сами, и отправим каждую запись вручную. `w1` захватывает задачу с арендой на 10 секунд и замирает.
# Аренда истекает, reaper возвращает задачу в очередь, после отсрочки повтора её
# захватывает `w2` и завершает.

# %% tags=["nbval-check-output"]
clock = ManualClock()
q = Queue(work / "fence.db", clock=clock)
job_id = q.enqueue({"render": "home"})
zombie = q.claim("w1", lease=10)          # w1 freezes right after this / w1 замирает сразу после этого
clock.advance(11)
say("l3_reaped", ids=q.reap())
clock.advance(q.backoff.delay(1))
fresh = q.claim("w2", lease=10)
q.complete(fresh.id, fresh.token, {"rendered_by": "w2", "version": 2})
say("l3_job_is", id=job_id, status=q.get(job_id).status, result=q.get(job_id).result)
say("l3_token_still", yes=q.get(job_id).token == zombie.token)

# %% [markdown] tags=["en"]
# Now `w1` wakes up. Each of its three writes (a heartbeat, a completion, a failure)
# changes a row only `WHERE status = 'running' AND token = :token`. Here neither is true,
# so nothing changes, and the zombie hears about it each time:

# %% [markdown] tags=["ru"]
# Теперь `w1` просыпается. Каждая из трёх его записей (heartbeat, завершение, ошибка)
# меняет строку только `WHERE status = 'running' AND token = :token`. Здесь не выполнено
# ни то, ни другое, поэтому ничего не меняется, и зомби каждый раз узнаёт об этом:

# %% tags=["nbval-check-output"]
print(sql.COMPLETE.strip())

# %% tags=["nbval-check-output"]
for write, call in (("heartbeat", lambda: q.heartbeat(zombie.id, zombie.token, lease=10)),
                    ("complete", lambda: q.complete(zombie.id, zombie.token, {"rendered_by": "w1"})),
                    ("fail", lambda: q.fail(zombie.id, zombie.token, "w1 gave up"))):
    try:
        call()
        say("l3_accepted", write=write)
    except LeaseLost as lost:
        say("l3_refused", write=write, status=lost.status)
say("l3_result", result=q.get(job_id).result)

# %% [markdown] tags=["en"]
# The refusals are not silent on the queue's side either: each is in the history as
# `lease_lost`, under the zombie's name and attempt.

# %% [markdown] tags=["ru"]
# Отказы не проходят бесследно и для очереди: каждый записан в историю как `lease_lost`,
# с именем зомби и номером его попытки.

# %% tags=["nbval-check-output"]
print(lessons.history(q.events(job_id), lang=lang))

# %% [markdown] tags=["en"]
# The same story as a sequence diagram, time running down the page. It is not drawn by
# hand: `diagrams.zombie` plays the story on a real queue in memory, on a clock moved by
# hand, and draws the calls it made and the answers it got; below it, the history the
# queue wrote. Worker A here sends its completion whatever happened while it was frozen,
# as a write already in flight would. A real `leaselab` worker that knows its lease may be
# gone by its own clock does not send it at all, as `w1` did not above: the fence is for
# the write whose sender cannot know.

# %% [markdown] tags=["ru"]
# Та же история в виде диаграммы последовательности; время идёт сверху вниз. Её не
# рисовали вручную: `diagrams.zombie` разыгрывает историю на настоящей очереди в памяти,
# на часах, которые переводим мы сами, и рисует сделанные вызовы и полученные ответы, а
# под диаграммой печатает историю, которую записала очередь. Воркер A здесь отправляет
# завершение, что бы ни случилось, пока он был заморожен, — как отправилась бы запись,
# которая уже была в пути. Настоящий воркер `leaselab`, который по своим часам знает, что
# аренда, возможно, истекла, вообще ничего не отправит — как не отправил `w1` выше: fencing
# нужен для записи, отправитель которой знать этого не может.

# %% tags=["nbval-check-output"]
from leaselab.lessons import diagrams

story, story_history = diagrams.zombie(lang)
print(lessons.history(story_history, lang=lang))

# %%
story

# %% [markdown] tags=["en"]
# ## The wrong way: a write that checks only the id
#
# A lot of real code completes a job by its id alone (`UPDATE … WHERE id = ?`). Then the
# queue's own record goes the way of the page above:

# %% [markdown] tags=["ru"]
# ## Неправильно: запись, которая проверяет только id
#
# Очень много настоящего кода завершает задачу по одному лишь id
# (`UPDATE … WHERE id = ?`). Тогда и запись в самой очереди постигает судьба страницы
# выше:

# %% tags=["nbval-check-output"]
print(wrong.UNFENCED_COMPLETE.strip())

# %% tags=["nbval-check-output"]
bad_id = q.enqueue({"render": "about"})
zombie2 = q.claim("w1", lease=10)
clock.advance(11); q.reap(); clock.advance(q.backoff.delay(1))
fresh2 = q.claim("w2", lease=10)
q.complete(fresh2.id, fresh2.token, {"rendered_by": "w2", "version": 2})
say("l3_before_wakes", result=q.get(bad_id).result)
wrong.unfenced_complete(q.path, zombie2.id, {"rendered_by": "w1", "version": 1}, clock=clock)
say("l3_after_wakes", result=q.get(bad_id).result)

# %% [markdown] tags=["en"]
# > **A pause at the wrong moment.** SQLite's write lock is *not* a lease: it has no
# > expiry. Above, `w1` froze while working in its handler, holding nothing. Had the
# > `SIGSTOP` landed while `w1` was committing (at `durability="full"` a commit includes an
# > `fsync`: on a real disk, milliseconds), it would have frozen
# > with the file's write lock in its hands, and every other writer (`w2`, the reaper, the
# > dashboard's buttons) would have waited until it was thawed or their busy timeout ran
# > out. Leases protect *jobs* from frozen workers; nothing protects a lock from a frozen
# > process except keeping transactions short, which is why each of leaselab's writes is
# > one statement or one short transaction.

# %% [markdown] tags=["ru"]
# > **Заморозка в неудачный момент.** Блокировка записи в SQLite — *не* аренда: срока у
# > неё нет. Выше `w1` замер, пока работал в обработчике, и ничего не держал. Попади
# > `SIGSTOP` в тот момент, когда `w1` фиксировал транзакцию (при `durability="full"`
# > фиксация включает `fsync`, а это на настоящем диске миллисекунды), он замер бы с
# > блокировкой записи файла, и все остальные пишущие (`w2`, reaper, кнопки панели) ждали
# > бы, пока его не разморозят или пока не истечёт их тайм-аут ожидания блокировки
# > (`busy_timeout`). Аренда защищает *задачи* от замерших воркеров; блокировку от
# > замершего процесса не защищает ничто,
# > кроме коротких транзакций, — поэтому каждая запись leaselab — это один оператор или
# > одна короткая транзакция.

# %% [markdown] tags=["en"]
# ## Fencing the world outside the queue
#
# The token protects writes *to the queue*. The page write never passed through the queue,
# so the queue could not stop it, although it had already refused the zombie's heartbeat.
# The outside system has to check a fence itself.
#
# A random token cannot be compared for "newer or older", but `job.fence` can: it is
# `(job id, attempts)`, and `attempts` grows by one with every claim. At
# `durability="full"`, the default, the queue syncs a claim to disk before the worker
# learns of it; at `"normal"` a power cut can forget a claim a worker already holds, and
# hand its fence out again (lesson 5). A store that remembers, for each key, the
# highest fence it has accepted, and the token of the claim that wrote it, can refuse
# anything older in one conditional statement. It refuses an equal fence too, unless the
# same claim is writing again: two claims can hold one fence only if a crash made the
# queue hand it out twice, and a store that took either would trust a zombie.

# %% [markdown] tags=["ru"]
# ## Fencing для мира за пределами очереди
#
# Токен защищает записи *в очередь*. Запись страницы через очередь не проходила, и
# очередь помешать ей не могла, хотя heartbeat зомби она уже отклонила. Внешняя система
# должна проверять fence сама.
#
# Случайный токен нельзя сравнить по принципу «новее или старее», а `job.fence` можно:
# это `(id задачи, attempts)`, и `attempts` растёт на единицу при каждом захвате. При
# `durability="full"` (по умолчанию) очередь синхронизирует захват с диском раньше, чем
# воркер о нём узнаёт; при `"normal"` отключение питания может стереть захват, который
# воркер уже получил, и тот же fence будет выдан снова (урок 5). Хранилище, которое помнит
# для каждого ключа наибольший принятый fence и токен захвата, сделавшего эту запись, может
# одним условным оператором отказать всему, что старше. Равный fence оно тоже отклоняет,
# если только пишет не тот же самый захват: один fence может оказаться у двух захватов,
# только если после сбоя очередь выдала его дважды, и хранилище, принявшее любой из них,
# поверило бы зомби.

# %% tags=["nbval-check-output"]
print(fencing.FENCED_WRITE.strip())

# %% [markdown] tags=["en"]
# The same real zombie once more, now writing into a store that checks the fence:

# %% [markdown] tags=["ru"]
# Тот же настоящий зомби ещё раз, но теперь он пишет в хранилище, которое проверяет fence:

# %% tags=["nbval-check-output"]
fenced, fenced_fleet = zombie_run("fenced", fenced=True)
with FencedStore(work / "fenced-pages.db") as pages:
    say("l3_page_after", **pages.read("home.html")[0])

# %% [markdown] tags=["en"]
# A fence is comparable within one job. The store compares `(job id, attempts)` as a pair,
# so across jobs the higher job id wins, whatever the time: a write of job 8 replaces any
# write of job 7 to that key, and job 7 can never write it again. That is right when a
# later job should supersede an earlier one; when unrelated jobs share a key, give each
# job its own key.
#
# ## The handler that asks first
#
# A store that checks fences is the real fix, but many outside systems cannot (an email
# is sent, whatever its fence). The handler can at least stop early. A handler that takes
# a second argument gets its `Lease`: `lease.lost` is a `threading.Event` the worker sets
# the moment a heartbeat is refused, and `lease.check()` raises `LeaseLost` then. The
# worker also sets it without asking anyone: it keeps its own deadline on the lease,
# counted on its monotonic clock from when it sent the last heartbeat the database
# acknowledged, and gives the lease up a tenth of its length before the database could
# reap the job. So a worker whose heartbeats hang, with nothing refused, still learns that
# it may be a zombie (lesson 7 shows one cut off by the network). `publish` with
# `check_lease` calls `lease.check()` between its steps and before the write:

# %% [markdown] tags=["ru"]
# Fence сравним только в пределах одной задачи. Хранилище сравнивает `(id задачи,
# attempts)` как пару, поэтому между разными задачами побеждает больший id, когда бы ни
# пришла запись: запись задачи 8 заменяет любую запись задачи 7 по этому ключу, и задача
# 7 туда больше не напишет. Это правильно, когда более поздняя задача должна вытеснять
# более раннюю; если ключ делят задачи, не связанные между собой, дайте каждой свой ключ.
#
# ## Обработчик, который сначала спрашивает
#
# Хранилище с проверкой fence — настоящее решение, но многие внешние системы так не
# умеют (письмо уходит, какой бы fence у него ни был). Обработчик может хотя бы вовремя
# остановиться. Обработчик, принимающий второй аргумент, получает свою аренду, `Lease`:
# `lease.lost` — это `threading.Event`, который воркер устанавливает, как только
# heartbeat отклонён, а `lease.check()` тогда бросает `LeaseLost`. Устанавливает его воркер
# и сам, ни у кого не спрашивая: он ведёт собственный срок аренды по монотонным часам,
# считая от отправки последнего heartbeat, который база подтвердила, и отказывается от
# аренды за десятую часть её срока до того, как база могла бы вернуть задачу в очередь.
# Поэтому даже воркер, чьи heartbeat просто повисают и никто их не отклоняет, узнаёт, что
# он, возможно, уже зомби (в уроке 7 так узнаёт воркер, отрезанный от сети). `publish` с
# `check_lease` вызывает `lease.check()` между шагами работы и перед записью:

# %% tags=["nbval-check-output"]
careful, careful_fleet = zombie_run("careful", check_lease=True)
with FencedStore(work / "careful-pages.db") as pages:
    say("l3_page_after", **pages.read("home.html")[0])

# %% tags=["nbval-check-output"]
say("l3_careful_log", ended="ended without its lease: LeaseLost" in careful_fleet.log_tail("w1"))

# %% [markdown] tags=["en"]
# The zombie learned it lost the job and wrote nothing, into a store that checks nothing.
# But the check is only as fresh as the last heartbeat: a worker that freezes *after*
# `lease.check()` and *before* its write is a zombie again when it wakes. The check makes
# the window small; only a fence at the receiving end closes it.
#
# What the check can close, then: every case in which the handler is awake when the lease
# goes, whether the database refused a heartbeat or the worker's own deadline passed. What
# it cannot: a pause between the check and the write (a garbage collection, `SIGSTOP`, a
# slow link to the store), after which the write lands with the old fence while the job
# already belongs to someone else. Nothing the handler does can see that pause coming;
# the store that compares the fence refuses that write all the same.

# %% [markdown] tags=["ru"]
# Зомби узнал, что задачу у него забрали, и ничего не записал — в хранилище, которое
# ничего не проверяет. Но проверка свежа ровно настолько, насколько свеж последний
# heartbeat: воркер, замерший *после* `lease.check()` и *до* записи, проснувшись, снова
# окажется зомби. Проверка сужает окно, а закрывает его только fence на принимающей стороне.
#
# Итак, проверка закрывает все случаи, когда аренда пропадает, пока обработчик не спит:
# база отклонила heartbeat или истёк собственный срок воркера. Не закрывает она паузу
# между проверкой и записью (сборку мусора, `SIGSTOP`, медленный канал до хранилища):
# после такой паузы запись приходит со старым fence, хотя задача уже принадлежит другому.
# Заметить такую паузу заранее обработчик не может никак, а хранилище, которое сравнивает
# fence, отклонит эту запись всё равно.

# %% [markdown] tags=["en"]
# ## Summary
#
# - A frozen worker loses its lease like a dead one, but it comes back: a **zombie**,
#   which overwrites newer results wherever nobody checks.
# - Every claim writes a fresh **token**; heartbeat, complete and fail change a row only
#   `WHERE status = 'running' AND token = ?`. Zero rows changed means `LeaseLost`, and the
#   refusal is recorded as a `lease_lost` event.
# - A write that matches only the id silently replaces a newer result with a stale one.
# - For systems outside the queue, pass `job.fence = (job id, attempts)`: it only rises
#   within a job as long as every claim reaches the disk before its worker acts (lesson 7
#   shows a server crash that hands one fence out twice), so the outside system can refuse
#   writes from an older attempt.
# - A handler taking `(job, lease)` can stop before its side effect once `lease.lost` is
#   set, by a refused heartbeat or by the worker's own deadline; that narrows the window,
#   and only the fence closes it: a pause between the check and the write still lets a
#   stale write through to a store that does not compare fences.
#
# ## Exercises
#
# **1. Write code.** Build a fenced store of your own, in plain Python: `MyStore`, with
# `write(key, value, fence, token)`, which returns `True` if it accepted the write and
# `False` if it refused it, and `read(key)`, which gives the value last accepted for the
# key (or `None`). It must refuse what `FencedStore` refuses, and one write more:
# `FencedStore` remembers a fence per key, so a zombie writing a page that the job's new
# holder has not written *yet* gets through. Yours must refuse that too: once it has seen a
# newer claim of a job, on any key, it refuses that job's older claims everywhere. The
# check feeds a fresh `MyStore()` the writes of two real claims of one job, from a real
# queue on a clock we move (`w1`, reaped, then `w2`), with their real fences and tokens:
# `w2` writes, the zombie `w1` writes `home.html` and then `about.html`, `w2` writes
# again, a second claim carrying `w2`'s fence with another token writes (what a crash that
# forgot `w2`'s claim would make), and last a later job writes. The stub accepts everything.

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - Замерший воркер теряет аренду так же, как мёртвый, но возвращается: это **зомби**, и
#   он затирает более новые результаты везде, где никто ничего не проверяет.
# - Каждый захват пишет свежий **токен**; heartbeat, complete и fail меняют строку только
#   `WHERE status = 'running' AND token = ?`. Ноль изменённых строк означает `LeaseLost`,
#   а отказ записывается в историю событием `lease_lost`.
# - Запись, которая проверяет только id, молча заменяет новый результат устаревшим.
# - Системам вне очереди передавайте `job.fence = (id задачи, attempts)`: в пределах
#   задачи он только растёт, пока каждый захват попадает на диск раньше, чем воркер
#   начинает действовать (в уроке 7 сбой сервера выдаёт один fence дважды), и внешняя
#   система может отклонять записи более старой попытки.
# - Обработчик с сигнатурой `(job, lease)` может остановиться до побочного эффекта, как
#   только установлен `lease.lost` — после отклонённого heartbeat или по собственному
#   сроку воркера; это сужает окно, а закрывает его только fence: пауза между проверкой и
#   записью всё равно пропустит устаревшую запись в хранилище, которое fence не сравнивает.
#
# ## Упражнения
#
# **1. Напишите код.** Постройте собственное хранилище с fencing на обычном Python:
# `MyStore` с методами `write(key, value, fence, token)`, который возвращает `True`, если
# принял запись, и `False`, если отклонил её, и `read(key)`, который отдаёт последнее
# принятое по ключу значение (или `None`). Оно должно отклонять всё, что отклоняет
# `FencedStore`, и ещё одну запись: `FencedStore` помнит fence для каждого ключа, поэтому
# зомби, который пишет страницу, которую новый держатель задачи *ещё* не писал, проходит.
# Ваше хранилище должно отклонить и её: увидев более новый захват задачи по любому ключу,
# оно отклоняет более старые захваты этой задачи везде. Проверка подаёт новому `MyStore()`
# записи двух настоящих захватов одной задачи из настоящей очереди на часах, которые мы
# двигаем сами (`w1`, возврат в очередь, потом `w2`), с их настоящими fence и токенами:
# пишет `w2`, зомби `w1` пишет `home.html`, а потом `about.html`, `w2` пишет ещё раз,
# пишет второй захват с fence `w2`, но другим токеном (такой получился бы после сбоя,
# который забыл захват `w2`), и последней пишет более поздняя задача. Заготовка принимает
# всё.

# %%
class MyStore:
    def __init__(self):
        self.pages = {}

    def write(self, key, value, fence, token):
        self.pages[key] = value   # your code: refuse what is stale / ваш код: отклонить устаревшее
        return True

    def read(self, key):
        return self.pages.get(key)

# %% [markdown] tags=["en"]
# <details><summary>Show the answer</summary>
#
# Keep two things: per job, the newest claim seen (its attempt and token), and per key, the
# value with its fence. A write is refused when its job has been seen with a newer
# attempt, or with the same attempt and another token; and, as in `FencedStore`, when the
# key holds a higher fence (a later job's):
#
# ```python
# class MyStore:
#     def __init__(self):
#         self.pages = {}     # key -> (value, fence)
#         self.newest = {}    # job id -> (attempt, token) of its newest claim seen
#
#     def write(self, key, value, fence, token):
#         job, attempt = fence
#         seen = self.newest.get(job)
#         if seen is not None and (attempt, token) != seen and attempt <= seen[0]:
#             return False
#         if key in self.pages and self.pages[key][1] > fence:
#             return False
#         self.newest[job] = (attempt, token)
#         self.pages[key] = (value, fence)
#         return True
#
#     def read(self, key):
#         return self.pages[key][0] if key in self.pages else None
# ```
#
# This is Kleppmann's storage that remembers the highest token it has processed, kept per
# job. It needs the memory of every job it has seen, and it is only as good as the fences
# it is given: a real store would keep both tables on disk, and in one transaction with
# the write.
# </details>

# %% [markdown] tags=["ru"]
# <details><summary>Показать ответ</summary>
#
# Храните две вещи: для каждой задачи — самый новый из виденных захватов (его попытку и
# токен), для каждого ключа — значение вместе с его fence. Запись отклоняется, если её
# задача уже встречалась с более новой попыткой или с той же попыткой, но другим токеном;
# и, как в `FencedStore`, если по ключу лежит больший fence (более поздней задачи):
#
# ```python
# class MyStore:
#     def __init__(self):
#         self.pages = {}     # ключ -> (значение, fence)
#         self.newest = {}    # id задачи -> (попытка, токен) самого нового захвата
#
#     def write(self, key, value, fence, token):
#         job, attempt = fence
#         seen = self.newest.get(job)
#         if seen is not None and (attempt, token) != seen and attempt <= seen[0]:
#             return False
#         if key in self.pages and self.pages[key][1] > fence:
#             return False
#         self.newest[job] = (attempt, token)
#         self.pages[key] = (value, fence)
#         return True
#
#     def read(self, key):
#         return self.pages[key][0] if key in self.pages else None
# ```
#
# Это хранилище Клеппмана, которое помнит наибольший обработанный токен, только помнит
# его для каждой задачи. Ему нужна память обо всех задачах, которые оно видело, и оно
# надёжно ровно настолько, насколько надёжны переданные ему fence: настоящее хранилище
# держало бы обе таблицы на диске и меняло бы их в одной транзакции с записью.
# </details>

# %% tags=["nbval-check-output"]
from leaselab.lessons import exercises
print(exercises.check_store(MyStore, lang))

# %% [markdown] tags=["en"]
# **2. Predict.** A late worker's *heartbeat* arrives after its lease expired but *before*
# anyone reaped the job. Is it accepted? (Hint: read `sql.HEARTBEAT`.) Commit your answer
# below, then run the cell after it.

# %% [markdown] tags=["ru"]
# **2. Предскажите.** Heartbeat опоздавшего воркера приходит после истечения аренды, но
# *до* того, как reaper вернул задачу в очередь. Примут ли его? (Подсказка: прочтите
# `sql.HEARTBEAT`.) Зафиксируйте ответ ниже, потом выполните следующую ячейку.

# %%
guess = lessons.predict("l3_ex2", lang)  # without widgets: lessons.predict("l3_ex2", lang, answer=...) / без виджетов: lessons.predict("l3_ex2", lang, answer=...)
guess

# %% tags=["nbval-check-output"]
with guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    late_id = q.enqueue({"render": "late"})
    late = q.claim("w1", lease=10)
    clock.advance(15)                        # expired, but nobody has reaped yet / аренда истекла, но в очередь задачу ещё никто не вернул
    say("l3_late_beat", seconds=q.heartbeat(late.id, late.token, lease=10) - clock())
    guess.reveal("accepted")                 # a refused heartbeat raises LeaseLost instead / отклонённый heartbeat вместо этого бросает LeaseLost

# %% [markdown] tags=["en"]
# <details><summary>Answer</summary>
#
# Yes. The job still holds this worker's token, so the worker is merely late, not a zombie yet;
# fencing is about who holds the job, not about the clock.
# </details>
#
# **3. Predict.** Fences `(7, 3)` and `(7, 12)`: which one may overwrite the other's
# write? And `(8, 1)` after `(7, 12)`? Commit your answer below, then run the cell after it.

# %% [markdown] tags=["ru"]
# <details><summary>Ответ</summary>
#
# Да. В задаче всё ещё записан токен этого воркера, значит, он просто опоздал, но зомби ещё не стал;
# fencing определяет, кто держит задачу, а не сколько времени прошло.
# </details>
#
# **3. Предскажите.** Fence `(7, 3)` и `(7, 12)`: какой из них может перезаписать запись
# другого? А `(8, 1)` после `(7, 12)`? Зафиксируйте ответ ниже, потом выполните следующую
# ячейку.

# %%
guess = lessons.predict("l3_ex3", lang)  # without widgets: lessons.predict("l3_ex3", lang, answer=...) / без виджетов: lessons.predict("l3_ex3", lang, answer=...)
guess

# %% tags=["nbval-check-output"]
with guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    store = FencedStore(work / "pages.db")
    low_after = (store.write("x", "a", fence=(7, 12)), store.write("x", "b", fence=(7, 3)))
    high_after = (store.write("y", "a", fence=(7, 3)), store.write("y", "b", fence=(7, 12)))
    next_job = (store.write("z", "a", fence=(7, 12)), store.write("z", "b", fence=(8, 1)))
    say("l3_pair", first="(7, 12)", second="(7, 3)", a=low_after[0], b=low_after[1])
    say("l3_pair", first="(7, 3)", second="(7, 12)", a=high_after[0], b=high_after[1])
    say("l3_pair", first="(7, 12)", second="(8, 1)", a=next_job[0], b=next_job[1])
    guess.reveal(("later" if low_after[1] else "higher") + ("_wins" if next_job[1] else "_refused"))

# %% [markdown] tags=["en"]
# <details><summary>Answer</summary>
#
# Only the higher fence, `(7, 12)`, may overwrite. `(8, 1)` is a different job, and the
# store orders by job id first, so it wins: the fence says nothing about time across jobs.
# </details>
#
# Clean up: end the workers, close the files, remove the temporary folder.

# %% [markdown] tags=["ru"]
# <details><summary>Ответ</summary>
#
# Перезаписать может только больший fence, `(7, 12)`. `(8, 1)` — другая задача, а
# хранилище сравнивает сначала id задачи, поэтому она побеждает: о времени между разными
# задачами fence ничего не говорит.
# </details>
#
# Уберём за собой: завершим воркеров, закроем файлы, удалим временную папку.

# %% tags=["nbval-check-output"]
fleets = (plain_fleet, fenced_fleet, careful_fleet)
for f in fleets:
    f.shutdown()
say("workers_alive", names=[s.name for f in fleets for s in f.status() if s.state in ("running", "paused", "stopping")])
for closable in (store, *(f.queue for f in fleets), plain, fenced, careful, q):
    closable.close()
say("folder_removed", removed=lessons.cleanup(work))
