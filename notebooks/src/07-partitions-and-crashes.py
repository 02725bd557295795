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
# # Lesson 7. When the network and the server fail
#
# Lesson 6 moved the queue onto a PostgreSQL server: the claim became one statement with
# `FOR UPDATE SKIP LOCKED`, and every lease is measured by the server's clock. A server
# brings faults a file never had, and this lesson makes each of them happen: a worker that
# keeps running but can no longer reach the server (a **network partition**), a write that
# committed while its reply was lost, a server that crashes and forgets what it had
# acknowledged, and a primary replaced by its standby. Each time, what saves the result is the fence of lesson 3, and the fence
# holds only as long as the claim is durable (lesson 5).
#
# Like lesson 6, this lesson starts its own throw-away PostgreSQL server in a temporary
# folder (`leaselab.harness.pgserver`) and removes it in the last cell; section 3 starts a
# second one, to crash it, and section 4 a primary and its standby, and removes them too.

# %% [markdown] tags=["ru"]
# # Урок 7. Когда подводят сеть и сервер
#
# В уроке 6 очередь переехала на сервер PostgreSQL: захват стал одним оператором с
# `FOR UPDATE SKIP LOCKED`, а каждая аренда отмеряется по часам сервера. Сервер приносит
# сбои, которых у файла не было, и в этом уроке мы устроим каждый из них: воркер
# продолжает работать, но больше не может достучаться до сервера (**разрыв сети**);
# запись зафиксирована, а ответ на неё потерялся; сервер падает и забывает то, что уже
# подтвердил; место основного сервера занимает реплика. Всякий раз результат спасает fence из урока 3, а fence держится, только
# пока захват хранится надёжно (урок 5).
#
# Как и урок 6, этот урок запускает собственный временный сервер PostgreSQL во временной
# папке (`leaselab.harness.pgserver`) и удаляет его в последней ячейке; в разделе 3 он
# запускает второй сервер, чтобы уронить его, а в разделе 4 — основной сервер с репликой, и
# их тоже удаляет.

# %%
import itertools
import os
import time

from leaselab import LeaseLost, Queue, lessons
from leaselab.backends.postgres import statements as pg_sql
from leaselab.backends.sqlite import statements as sqlite_sql
from leaselab.lab import timeline
from leaselab.lab.dashboard import Lab
from leaselab.harness.fleet import Fleet
from leaselab.lab.i18n import t
from leaselab.harness.pgserver import PgServer

lang = lessons.language()
say = lessons.speaker(lang)
work = lessons.scratch("07-partitions-and-crashes")
lessons.cleanup_at_exit(work)      # if the kernel dies; the server has a watchdog of its own / на случай, если ядро умрёт; у сервера свой сторож
home = os.getcwd()
os.chdir(work)                     # a fleet on a server queue keeps its logs in the current folder / воркеры очереди на сервере пишут журналы в текущую папку
server = PgServer().start()
databases = (server.create_database(f"lesson{n}") for n in itertools.count(1))   # next(databases): a fresh, empty one / next(databases): новая пустая база
say("l6_server", started=server.port is not None)

# %% [markdown] tags=["en"]
# ## 1. A worker cut off by the network
#
# On a file, the worst a worker can do is freeze (`SIGSTOP`) or die (`SIGKILL`). On a
# server there is a third fault, the one Jepsen made famous: the worker keeps running but
# **cannot reach the database**, a **network partition**. `Fleet` runs each worker of a
# server queue through a small proxy of its own on 127.0.0.1, and
# `fleet.partition(name)` cuts that worker off: the proxy holds its bytes, nothing reaches
# the server and nothing comes back, so its calls hang (until the worker itself gives up on
# each, after 0.9 of its lease). `fleet.heal(name)` reconnects it, and what the proxy held
# is delivered. (In the dashboard, `Lab`, these are the **Cut
# network** and **Reconnect** buttons.)
#
# `w1` claims a job that takes 3 seconds, with a 2-second lease, and we cut it off. Once
# its lease has run out, we start `w2`. The first attempt waits at a gate after its 3
# seconds (`hold`: a file we create only once `w2` is done), so however slow the machine
# is, `w1` cannot finish before it is cut off.

# %% [markdown] tags=["ru"]
# ## 1. Воркер, отрезанный от сети
#
# С файлом худшее, что может случиться с воркером, — он замрёт (`SIGSTOP`) или умрёт
# (`SIGKILL`). С сервером появляется третий сбой, тот самый, который прославил Jepsen:
# воркер продолжает работать, но **не может достучаться до базы** — **разрыв сети**.
# `Fleet` пускает каждого воркера очереди на сервере через собственного маленького
# посредника (proxy) на 127.0.0.1, и `fleet.partition(name)` отрезает этого воркера от
# сети: посредник придерживает его байты, до сервера ничего не доходит и ничего не
# возвращается, так что его вызовы повисают (пока сам воркер не бросит каждый из них через
# 0,9 срока аренды). `fleet.heal(name)` возвращает ему сеть, и придержанное доставляется. (На панели `Lab` это кнопки **«Отрезать сеть»** и **«Вернуть сеть»**.)
#
# `w1` захватывает задачу на 3 секунды с арендой на 2 секунды, и мы отрезаем его от сети.
# Когда его аренда истечёт, запустим `w2`. Первая попытка после своих трёх секунд ждёт у
# шлагбаума (`hold`: файл, который мы создаём, только когда `w2` закончит), поэтому, как бы
# ни тормозила машина, `w1` не успеет закончить до того, как его отрежут.

# %% tags=["nbval-check-output"]
cut = Queue(next(databases))
fleet = Fleet(cut.path, queue=cut, log_dir=work / "cut-logs")
fleet.spawn(lease=2.0, name="w1")
job_id = cut.enqueue({"seconds": 3, "hold": str(work / "cut.gate")})  # attempt 1 finishes once the file exists / попытка 1 закончится, когда появится файл
lessons.wait_until(lambda: cut.get(job_id).worker == "w1", what=lessons.text("wait_claim", lang))
first = cut.get(job_id)
fleet.partition("w1")
say("l6_badge", name="w1", badge=t(fleet.status()[0].badge, lang))
lessons.wait_until(lambda: fleet.status()[0].badge == "lease_expired", what=lessons.text("l6_wait_expired", lang))
say("l6_badge", name="w1", badge=t(fleet.status()[0].badge, lang))
fleet.spawn(lease=5.0, name="w2")                           # its reaper finds the expired lease / его reaper находит истёкшую аренду
lessons.wait_until(lambda: cut.get(job_id).status == "done", timeout=30, what=lessons.text("wait_done", lang))
(work / "cut.gate").touch()                                 # only now may w1's handler finish / только теперь обработчик w1 может закончить
done = cut.get(job_id)
say("l6_done_by", worker=done.worker, attempts=done.attempts, result_by=done.result["worker"])

# %% [markdown] tags=["en"]
# `w1`'s heartbeats stopped reaching the server, so to the server `w1` looks exactly like
# a dead worker: its lease ran out, `w2`'s reaper put the job back, and `w2` ran it to the
# end. Meanwhile `w1` is not dead at all: its handler ran on and finished. No heartbeat
# was acknowledged, so by its own clock `w1` knows its lease may be gone (its log says
# "may have run out"), and a handler that asked `lease.check()` would have stopped. This
# one did not ask, and `w1` keeps trying to write its result, waiting out the network:
# only the server can say whether the lease held. Its badge said *lease expired* while
# nobody had taken the job, and *zombie* once `w2`'s reaper had: it is the **zombie** of
# lesson 3, made by the network instead of `SIGSTOP`. Now we reconnect it:

# %% [markdown] tags=["ru"]
# Heartbeat от `w1` перестали доходить до сервера, поэтому для сервера `w1` ничем не
# отличается от мёртвого воркера: его аренда истекла, reaper воркера `w2` вернул задачу в
# очередь, и `w2` выполнил её до конца. А `w1` вовсе не мёртв: его обработчик закончил
# работу. Ни один heartbeat не был подтверждён, поэтому по своим часам `w1` знает, что
# аренды у него, возможно, уже нет (журнал воркера пишется по-английски, и об этом в нём
# строка со словами `may have run out` — «возможно, истекла»),
# и обработчик, который спрашивает `lease.check()`, остановился бы. Этот не спрашивал, и
# `w1` пытается записать результат, пережидая сбой сети: удержалась ли аренда, может
# сказать только сервер. Пока задачу никто не забрал, на его значке было *аренда истекла*,
# а когда reaper воркера `w2` её забрал — *зомби*: это **зомби** из урока 3, только сделанный
# не `SIGSTOP`, а сетью. Вернём ему сеть:

# %% tags=["nbval-check-output"]
fleet.heal("w1")
lessons.wait_until(lambda: "result not written" in fleet.log_tail("w1", lines=50), timeout=30,
                   what=lessons.text("l3_wait_zombie", lang))
say("l6_zombie_refused", refused=any(e.kind == "lease_lost" and e.token == first.token for e in cut.events(job_id)))
say("l6_result_stands", worker=cut.get(job_id).result["worker"])
say("l6_partitioned_now", names=[s.name for s in fleet.status() if s.partitioned])

# %% tags=["nbval-ignore-output"]
print(lessons.history([e for e in cut.events(job_id) if e.kind != "heartbeat"], lang=lang))

# %% [markdown] tags=["en"]
# Once its connection came back, the first of `w1`'s late writes to reach the server carried
# its old token and matched no row. Which write that was is a race: its completion, retried
# until then, or a heartbeat its pulse had sent before that completion. The history above
# names the one refused ("complete refused" or "heartbeat refused"). Either way `w1` got
# `LeaseLost`, its result was not written (its log, `fleet.log_tail("w1")`, says "result
# not written"), and `w2`'s result stands. On the timeline the shaded interval on `w1`'s
# lane is the partition, as a pause is shaded in lesson 3.

# %% [markdown] tags=["ru"]
# Как только подключение вернулось, первый же запоздалый запрос `w1`, дошедший до сервера,
# пришёл со старым токеном и не совпал ни с одной строкой. Каким он окажется, решает гонка:
# завершение, которое `w1` повторял всё это время, или heartbeat, отправленный пульсом
# раньше этого завершения. В истории выше видно, какой из двух запросов отклонили
# (complete или heartbeat).
# В любом случае `w1` получил `LeaseLost`, результат записан не был (в журнале воркера,
# `fleet.log_tail("w1")`, об этом строка со словами `result not written` — «результат не
# записан»), и результат `w2` остался в
# силе. На временной шкале закрашенный интервал на дорожке `w1` — разрыв сети, так же как в
# уроке 3 закрашена заморозка.

# %% tags=["nbval-ignore-output"]
timeline.draw(timeline.timeline_data(cut.events(), fleet.actions), lang=lang)

# %% [markdown] tags=["en"]
# The same workers in the dashboard of lesson 0. On a server queue each worker's row has
# two more buttons, **Cut network** and **Reconnect**, and a cut-off worker's badge reads
# *cut off*, then *lease expired* once its lease has run out, and *zombie* once its job has
# been taken from it. Try it yourself: enqueue one job of 20 seconds, and `w1` or `w2`
# takes it. Cut that worker off while it holds the job. When its lease runs out, the other
# one's reaper (it runs every second on that worker's heartbeat thread, even while it is
# busy) puts the job back with a second's backoff, and the other worker runs it. Then reconnect the first: its next heartbeat is refused,
# and the jobs table shows the job still held by the second.

# %% [markdown] tags=["ru"]
# Те же воркеры в панели из урока 0. На очереди на сервере у строки каждого воркера есть
# ещё две кнопки, **Отрезать сеть** и **Вернуть сеть**. На значке отрезанного воркера
# написано *без сети*, после конца его аренды — *аренда истекла*, а когда задачу у него
# забрали — *зомби*. Попробуйте сами: поставьте в очередь одну задачу на 20 секунд, и её
# возьмёт `w1` или `w2`. Отрежьте этого воркера от сети, пока он держит задачу. Когда его
# аренда истечёт, reaper второго (он срабатывает каждую секунду в потоке heartbeat этого
# воркера, даже пока тот занят) вернёт задачу в очередь с секундной отсрочкой повтора, и её
# выполнит второй воркер. Потом верните
# первому сеть: его следующий heartbeat будет отклонён, а в таблице задача по-прежнему
# числится за вторым.

# %% tags=["nbval-ignore-output"]
lab = Lab(lang=lang, lease=3.0, fleet=fleet)
lab

# %% [markdown] tags=["en"]
# This is lesson 3 again, on the server's side. A partition is the server-side zombie: the
# queue cannot tell a worker that is cut off from one that is dead or frozen, and it must
# not try; it hands the job on when the lease runs out. What saves the result is the
# fence, checked by the storage that takes the write: Martin Kleppmann's argument is that a
# lease alone can never stop a zombie, because the zombie does not know it is one, so the
# check must happen where the write lands. Here that is the `UPDATE … WHERE token = …` on
# the server; for the outside world it is a store that checks `job.fence` (lesson 3).

# %% [markdown] tags=["ru"]
# Это снова урок 3. Разрыв сети даёт того же зомби, только со стороны сервера: очередь не
# может отличить отрезанного от сети воркера от мёртвого или замершего, и не должна
# пытаться; когда аренда истекает, она отдаёт задачу другому. Спасает результат fence,
# который проверяет хранилище, принимающее запись. Аргумент Мартина Клеппмана таков: чтобы
# остановить зомби, одной аренды мало, потому что зомби не знает, что он зомби, и значит,
# проверка должна происходить там, куда попадает запись. Здесь это
# `UPDATE … WHERE token = …` на сервере; для внешнего мира — хранилище, которое
# проверяет `job.fence` (урок 3).

# %% [markdown] tags=["en"]
# ### A cut-off handler that asks
#
# `w1`'s handler never asked whether it still held the job. Here is one that does:
# `leaselab.harness.demo:careful` works for a minute, calls `lease.check()` every tenth of
# a second, and records its side effect only if the lease held to the end. A new worker,
# `w3`, on a queue of its own, claims one such job with a 2-second lease, and we cut it
# off. Nobody will refuse it anything: its heartbeats just hang in the proxy. But the
# worker keeps its own deadline on the lease, on its monotonic clock, which the network
# cannot stop: counted from when it *sent* the last heartbeat the server acknowledged
# (before the server applied it), less a tenth of the lease. Once that passes,
# `lease.lost` is set and the handler's next `check()` raises `LeaseLost`.

# %% [markdown] tags=["ru"]
# ### Отрезанный от сети обработчик, который проверяет аренду
#
# Обработчик `w1` так и не спросил, держит ли он ещё задачу. Вот тот, который спрашивает:
# `leaselab.harness.demo:careful` работает минуту, каждую десятую долю секунды вызывает
# `lease.check()` и записывает свой побочный эффект, только если аренда продержалась до
# конца. Новый воркер `w3` со своей очередью захватывает такую задачу с арендой на 2
# секунды, и мы отрезаем его от сети. Отклонять ему никто ничего не будет: его heartbeat
# просто повисают в посреднике. Но воркер сам следит за сроком аренды по монотонным
# часам, которые сеть остановить не может: отсчитывает его от момента, когда *отправил*
# последний heartbeat, подтверждённый сервером (сервер применил его чуть позже), и
# сдаётся на десятую часть срока раньше. Как только этот срок проходит, воркер
# устанавливает `lease.lost`, и следующий `check()` в обработчике бросает `LeaseLost`.

# %% tags=["nbval-check-output"]
from leaselab.check import read_effects

own = Queue(next(databases))
own_fleet = Fleet(own.path, queue=own, log_dir=work / "own-logs")
own_fleet.spawn(handler="leaselab.harness.demo:careful", lease=2.0, name="w3")
own_effects = work / "own-effects.jsonl"
own_id = own.enqueue({"seconds": 60, "effects": str(own_effects)})
lessons.wait_until(lambda: own.get(own_id).worker == "w3", what=lessons.text("wait_claim", lang))
own_fleet.partition("w3")
lessons.wait_until(lambda: any(e["detail"].get("when") == "stopped" for e in read_effects(own_effects))
                   and "may have run out" in own_fleet.log_tail("w3", lines=50),
                   timeout=30, what=lessons.text("l6_wait_own_stop", lang))
whens = [e["detail"].get("when") for e in read_effects(own_effects)]
say("l6_own_stopped", stopped=whens == ["start", "stopped"])
say("l6_own_effect", done="done" in whens)
say("l6_own_log", said="may have run out" in own_fleet.log_tail("w3", lines=50))
say("l6_own_server", status=own.get(own_id).status, held=own.get(own_id).worker == "w3")
own_fleet.heal("w3")
own_fleet.shutdown()
own.close()

# %% [markdown] tags=["en"]
# The handler stopped by itself, before its side effect, while the server still listed
# the job as running and held by `w3`: nobody told `w3` anything, its own clock did. It
# stops early on purpose: the server counts the same lease from a moment a little later
# (when it applied the heartbeat), and the worker gives it up a tenth of the lease
# sooner still, so its deadline comes first while both clocks run. (That the two tick at
# slightly different rates, a few parts per million, is far inside the tenth of the lease
# it gives up.) A suspend of the host (a laptop's lid, a paused virtual machine) is
# another matter. On Linux the worker counts its own deadline on `CLOCK_BOOTTIME`, which
# keeps counting through a suspend, so a worker that wakes from one longer than its lease
# finds the lease gone by its own count too. Elsewhere it counts on `time.monotonic`,
# which on some platforms stops while the host sleeps: such a worker wakes still finding
# the lease fresh, though the server may have handed the job to another, and only its
# next heartbeat, refused, tells it. What neither deadline can stop is a write already past its
# last check (lesson 3), or made by a worker whose clock misled it: for that write, the
# fence.

# %% [markdown] tags=["ru"]
# Обработчик остановился сам, до побочного эффекта, хотя на сервере задача всё ещё
# числилась за `w3` в статусе `running`: `w3` никто ничего не сообщал, ему подсказали
# его собственные часы. Раньше времени он сдаётся нарочно: сервер отсчитывает ту же аренду от
# чуть более позднего момента (когда применил heartbeat), а воркер отказывается от неё
# ещё на десятую часть аренды раньше, так что его срок наступает первым, пока идут и те,
# и другие часы. (Что они идут с немного разной скоростью, на несколько миллионных долей,
# с запасом покрывает десятая часть аренды.) Другое дело — сон машины (закрытая крышка
# ноутбука, усыплённая виртуальная машина). На Linux воркер отсчитывает свой срок
# по `CLOCK_BOOTTIME`, а эти часы идут и во сне, так что воркер, проспавший дольше
# аренды, и по своему счёту видит, что аренда истекла. На других системах он считает по
# `time.monotonic`, который кое-где стоит, пока машина спит: такой воркер просыпается с
# уверенностью, что аренда ещё действует, хотя сервер мог уже отдать задачу другому, и
# узнаёт правду, только когда отклонят его следующий heartbeat. Чего не остановит ни один срок, так это запись, которая
# уже прошла последнюю проверку (урок 3) или которую сделал воркер, обманутый своими
# часами: против такой записи нужен fence.

# %% [markdown] tags=["en"]
# ## 2. A reply that never came
#
# The network can fail in one more way, after the statement instead of before it: the
# request reaches the server, the statement commits, and the reply is lost on its way
# back. The client gets an error, and the error does not mean that the write failed; it
# means that the client does not know. Jepsen records such an outcome as *info*, beside
# *ok* and *fail*, and a history that writes it down as a failure is false. The proxy does
# this on demand: `drop_next_reply()` lets the next request through, throws its reply
# away and cuts the connection.
#
# A worker, driven here by hand from the kernel, claims a job through a proxy of its own
# (with a long lease: nothing expires in this section), and the reply to its completion
# is dropped:

# %% [markdown] tags=["ru"]
# ## 2. Ответ, который не пришёл
#
# Сеть может подвести ещё одним способом — уже после оператора, а не до него: запрос
# доходит до сервера, оператор фиксируется, а ответ теряется на обратном пути. Клиент
# получает ошибку, но эта ошибка не значит, что запись не удалась; она значит, что клиент
# не знает, удалась ли она. Jepsen записывает такой исход как *info*, наряду с *ok* и
# *fail*, а история, где он записан как отказ, лжёт. Посредник умеет делать это по
# команде: `drop_next_reply()` пропускает следующий запрос к серверу, выбрасывает ответ на
# него и обрывает подключение.
#
# Воркер, которым мы здесь управляем вручную из ядра, захватывает задачу через своего
# посредника (с долгим сроком аренды: в этом разделе ничего не истекает), и ответ на его
# завершение теряется:

# %% tags=["nbval-check-output"]
from leaselab.errors import DatabaseUnreachable
from leaselab.harness.proxy import Proxy, server_address, through

direct = next(databases)
link = Proxy(server_address(direct))
unsure = Queue(through(direct, link.port))
unsure_id = unsure.enqueue({"page": "home"})
unsure_job = unsure.claim("w1", lease=600)
link.drop_next_reply()
try:
    unsure.complete(unsure_job.id, unsure_job.token, {"worker": "w1"})
    say("l6_info_first", error=None)
except DatabaseUnreachable as exc:
    say("l6_info_first", error=type(exc).__name__)
unsure.complete(unsure_job.id, unsure_job.token, {"worker": "w1"})   # the retry: the same write, the same token / повтор: та же запись, тот же токен
say("l6_info_retry", status=unsure.get(unsure_id).status, worker=unsure.get(unsure_id).result["worker"])
say("l6_info_history", kinds=[e.kind for e in unsure.events(unsure_id)])
say("l6_info_refusals", n=sum(e.kind == "lease_lost" for e in unsure.events(unsure_id)))
unsure.close()
link.close()

# %% [markdown] tags=["en"]
# The first try raised `DatabaseUnreachable`: to the worker, the outcome of its completion
# is unknown, and it does not guess. It tries again (a `Worker` does so by itself, until
# the server answers), with the same write and the same token. This time the fenced
# `UPDATE` changes no row, since the job is no longer running; but before it raises
# `LeaseLost`, the queue reads the row and finds the job done under this very token, with
# this very result. A token belongs to one claim, and only its holder completes the job,
# so that row can only be the first try's: the retry is a success, not a lost lease. The
# history holds one completion and no refusal; the server never knew that a reply was
# lost, and nothing false was written into it. A *different* result under the same token
# is refused: that is another write, not the same one again.

# %% [markdown] tags=["ru"]
# Первая попытка закончилась исключением `DatabaseUnreachable`: для воркера исход его
# завершения неизвестен, и гадать он не станет. Он повторяет запрос (`Worker` делает это сам, пока
# сервер не ответит) — ту же запись с тем же токеном. На этот раз `UPDATE` с проверкой
# токена не меняет ни одной строки: задача уже не в статусе `running`. Но прежде чем
# бросить `LeaseLost`, очередь читает строку и видит, что задача выполнена именно с этим
# токеном и именно с этим результатом. Токен принадлежит одному захвату, а завершает
# задачу только его держатель, значит, такая строка могла остаться только от первой
# попытки: повтор — это успех, а не потерянная аренда. В истории одно завершение и ни
# одного отказа: сервер так и не узнал, что ответ потерялся, и ничего ложного в историю
# не попало. *Другой* результат с тем же токеном будет отклонён: это уже другая запись, а
# не повтор той же.

# %% [markdown] tags=["en"]
# ## 3. When the server itself crashes
#
# The fence of lesson 3 rests on one promise: a job's `attempts` only rises, so a newer
# claim always carries a higher fence. Martin Kleppmann's fencing token comes from a
# counter that is **durable and strictly increasing**; a token that a crash can hand out
# again fences nothing. On a server the promise holds only if a claim is on disk before its
# worker acts on it. PostgreSQL can acknowledge a commit before its WAL is written
# (`synchronous_commit = off`): faster, and a crash forgets the last such commits.
# leaselab's `durability="normal"` commits claims that way, and
# `leaselab.lessons.wrong.forgetful_queue` is such a queue, kept for this section.
#
# We start a second throw-away server whose WAL writer is lazy (`LAZY_WAL_WRITER`: it
# writes what is not yet written every 10 seconds instead of every 0.2), so a crash right
# after a claim loses it. Worker A claims a job through the forgetful queue, and at once
# the server crashes, is started again and replays its WAL. It may still have written the
# claim on its own before the crash; `claim_until_a_crash_forgets` then tries again with a
# new job, and says how many crashes it took. Each job is enqueued durably, so only the
# claim can be lost. A itself is alive: as far as it knows, it holds the job, its fence
# and its token.

# %% [markdown] tags=["ru"]
# ## 3. Когда падает сам сервер
#
# Fence из урока 3 держится на одном обещании: `attempts` задачи только растёт, поэтому у
# более нового захвата всегда больший fence. Fencing-токен у Мартина Клеппмана берётся из
# счётчика, который **надёжно хранится и строго возрастает**; токен, который после сбоя
# можно выдать ещё раз, ничего не ограждает. На сервере это обещание выполняется, только
# если захват попадает на диск раньше, чем воркер начинает по нему действовать.
# PostgreSQL умеет подтверждать фиксацию до того, как она записана в файл WAL
# (`synchronous_commit = off`): так быстрее, но при сбое сервера последние такие
# фиксации пропадают. `durability="normal"` в leaselab фиксирует захваты именно так, и
# `leaselab.lessons.wrong.forgetful_queue` — как раз такая очередь, сделанная для этого
# раздела.
#
# Запустим второй временный сервер с ленивым процессом записи WAL (`LAZY_WAL_WRITER`: он
# дописывает незаписанное раз в 10 секунд, а не раз в 0,2 секунды), чтобы сбой сразу
# после захвата этот захват терял. Воркер A захватывает задачу через забывчивую очередь,
# и сервер тут же падает, запускается снова и восстанавливается по файлу WAL. Сервер мог успеть
# записать захват сам ещё до сбоя; тогда `claim_until_a_crash_forgets` повторяет всё с
# новой задачей и сообщает, сколько сбоев для этого понадобилось. Каждую задачу ставят в
# очередь надёжно, так что пропасть может только захват. Сам A жив: насколько ему
# известно, задача, её fence и токен по-прежнему у него.

# %% tags=["nbval-ignore-output"]
from leaselab.lessons import wrong
from leaselab.fencing import FencedStore
from leaselab.harness.pgserver import LAZY_WAL_WRITER

crashable = PgServer(settings=LAZY_WAL_WRITER).start()
crash_db = crashable.create_database("crash")
a_claim, rounds = wrong.claim_until_a_crash_forgets(crashable, crash_db, worker="A", lease=600)
say("l6_crash_rounds", rounds=rounds)

# %% tags=["nbval-check-output"]
after = Queue(crash_db)
say("l6_crash_forgot", status=after.get(a_claim.id).status, attempts=after.get(a_claim.id).attempts,
    attempt=a_claim.attempts)
b_claim = after.claim("B", lease=600)
say("l6_same_fence", attempt=b_claim.attempts, same=b_claim.fence == a_claim.fence, token=b_claim.token == a_claim.token)
with FencedStore(work / "crash-pages.db") as pages:
    a_page = pages.write("home.html", {"worker": "A"}, fence=a_claim.fence, token=a_claim.token)
    b_page = pages.write("home.html", {"worker": "B"}, fence=b_claim.fence, token=b_claim.token)
    say("l6_store_writes", a=a_page, b=b_page, page=pages.read("home.html")[0]["worker"])
try:
    after.complete(a_claim.id, a_claim.token, {"worker": "A"})
    say("l6_queue_after", refused=False, worker=after.get(a_claim.id).result["worker"])
except LeaseLost:
    after.complete(b_claim.id, b_claim.token, {"worker": "B"})
    say("l6_queue_after", refused=True, worker=after.get(a_claim.id).result["worker"])
say("l6_crash_claimers", workers=[e.worker for e in after.events(a_claim.id) if e.kind == "claimed"])

# %% [markdown] tags=["en"]
# The crash took A's claim back: the job is pending with no attempt used, and B's claim
# counts attempt 1 again. One fence, two live claims. The fenced store of lesson 3 keeps
# the first write of a fence and refuses an equal fence from another token, so A's page,
# written first, stands, and B's, the real holder's, is refused. The queue knows only B:
# A's completion is refused with `LeaseLost`, the result is B's, and A's claim is not even
# in the history any more. The store and the queue now disagree about who did the job,
# and no store can settle it: two claims with one fence look the same to anything that
# compares fences, so whichever write the store keeps may be the stale one. (A store that
# let an equal fence through would keep the last writer instead, which is no better.)
#
# Now the same crash with leaselab's default, `durability="full"`: the claim returns
# only once the server has written it to its WAL.

# %% [markdown] tags=["ru"]
# Сбой забрал захват у A: задача снова в `pending`, ни одна попытка не израсходована, и
# захват B снова считается попыткой 1. Один fence — два живых захвата. Хранилище с
# проверкой fence из урока 3 сохраняет первую запись с данным fence и отклоняет такой же
# fence с другим токеном, поэтому осталась страница A, записанная первой, а страница B,
# настоящего держателя, отклонена. Очередь же знает только B: завершение от A отклонено с
# `LeaseLost`, результат записал B, а захвата A нет даже в истории. Теперь хранилище и
# очередь расходятся в том, кто выполнил задачу, и никакое хранилище этого не рассудит:
# для всякого, кто сравнивает fence, два захвата с одним fence неразличимы, так что
# сохранённая запись вполне может оказаться устаревшей. (Хранилище, которое пропускало бы
# равный fence, оставило бы вместо первой записи последнюю, и это ничуть не лучше.)
#
# Теперь тот же сбой с настройкой leaselab по умолчанию, `durability="full"`: захват
# возвращается, только когда сервер записал его в файл WAL.

# %% tags=["nbval-check-output"]
with Queue(crash_db) as durable:
    kept_id = durable.enqueue({"page": "home"})
    held = durable.claim("A", lease=600)
crashable.crash()
crashable.recover()
kept_q = Queue(crash_db)
kept = kept_q.get(kept_id)
say("l6_crash_kept", status=kept.status, attempts=kept.attempts, same=kept.token == held.token)
say("l6_kept_b", nothing=kept_q.claim("B", lease=600) is None)
with FencedStore(work / "kept-pages.db") as pages:
    kept_page = pages.write("home.html", {"worker": "A"}, fence=held.fence, token=held.token)
kept_q.complete(held.id, held.token, {"worker": "A"})
say("l6_kept_writes", written=kept_page, done=kept_q.get(kept_id).status == "done")
kept_q.close(); after.close()
crashed_folder = crashable.folder
crashable.stop()
say("l6_crash_server_removed", removed=not crashed_folder.exists())

# %% [markdown] tags=["en"]
# The claim outlived the crash: the job is still running under A's token, B finds nothing
# to take, and A's page and completion are both accepted. Had A died instead, its lease
# would run out, and the next claim would be attempt 2, with a higher fence. The price is
# one WAL write per claim, before the claim returns (on a production server, with
# `fsync = on`, a flush to the disk).

# %% [markdown] tags=["ru"]
# Захват пережил сбой: задача по-прежнему выполняется с токеном A, захвату B нечего
# взять, а страница и завершение от A приняты. Если бы A вместо этого умер, его аренда
# истекла бы, и следующий захват стал бы попыткой 2, с большим fence. Плата — одна
# запись в файл WAL на каждый захват до того, как он вернётся (на рабочем сервере с
# `fsync = on` — ещё и сброс на диск).

# %% [markdown] tags=["en"]
# ## 4. When a standby takes the primary's place
#
# A claim on the primary's disk outlives the primary's crash, as section 3 showed. It does not
# outlive the primary being replaced: when a standby takes the primary's place, the queue goes on
# from the standby, with only what replication brought it, and a claim that never reached it is
# forgotten as surely as by a server that crashes without syncing. Here it is, live, and then
# its cure.
#
# A PostgreSQL **primary** takes the writes and streams its WAL to a **standby**, which replays
# it and can be **promoted** to take the primary's place. With asynchronous replication the
# primary acknowledges a commit as soon as it is in its own WAL and sends it on afterwards, so
# the standby is always a little behind, usually by milliseconds. `fail_over` starts a primary
# and one standby in a temporary folder, enqueues 300 jobs and waits until the standby has them
# all, then starts 2 worker processes of 2 slots each on a URL that names both servers and
# connects to whichever one takes writes. Each worker keeps a **journal**
# (`leaselab worker --journal DIR`): one line for every claim and every completion the queue
# acknowledged to it, written after the reply came.
#
# A real standby lags briefly, and whether a failure lands in that lag is luck; a lesson cannot
# wait for luck. So the failover is gated on state, not on time, as `leaselab chaos --faults
# failover` does it: the primary's WAL sender to the standby is frozen (`SIGSTOP`), and once the
# journals hold 11 more acknowledged completions than at the freeze (more than the fleet could
# have been told of before it), the primary is stopped at once (`pg_ctl stop -m immediate`) and
# the standby promoted. Whatever was acknowledged after the freeze is certainly not on the
# standby. The workers go on with the promoted server until every job is done. Then the checker
# judges the run twice: from the server alone (`leaselab check URL`) and against the journals
# (`leaselab check URL --journal DIR`). The same is then done with synchronous replication. The
# cell takes about half a minute.

# %% [markdown] tags=["ru"]
# ## 4. Когда место основного сервера занимает реплика
#
# Захват, лежащий на диске основного сервера, переживает его сбой — это показал раздел 3. Но он
# не переживёт замены основного сервера: когда его место занимает реплика, очередь продолжает
# работу с реплики, а на ней есть только то, что успела доставить репликация. Захват, который
# до неё не дошёл, забыт так же верно, как на сервере, упавшем без синхронизации с диском.
# Посмотрим на это вживую, а потом на то, что от этого защищает.
#
# **Основной сервер** PostgreSQL принимает записи и передаёт свой WAL **реплике**; реплика
# воспроизводит его и может быть **повышена**, чтобы занять место основного сервера. При
# асинхронной репликации основной сервер подтверждает фиксацию, как только она попала в его
# собственный WAL, а реплике отправляет её уже потом, так что реплика всегда немного отстаёт —
# обычно на миллисекунды. `fail_over` запускает во временной папке основной сервер и одну
# реплику, ставит в очередь 300 задач, ждёт, пока все они окажутся на реплике, и запускает 2
# процесса-воркера по 2 слота; в адресе очереди названы оба сервера, и подключение идёт к тому
# из них, который принимает записи. Каждый воркер ведёт **журнал подтверждений**
# (`leaselab worker --journal DIR`): по строке на каждый захват и каждое завершение, которые ему
# подтвердила очередь; строка пишется, когда ответ уже пришёл.
#
# Настоящая реплика отстаёт недолго, и попадёт ли сбой в это отставание — дело случая, а урок не
# может ждать случая. Поэтому момент переключения определяется состоянием, а не временем, как в
# `leaselab chaos --faults failover`: процесс, который передаёт WAL реплике, замораживают
# (`SIGSTOP`), и как только в журналах подтверждений окажется на 11 подтверждённых завершений
# больше, чем в момент заморозки (больше, чем воркерам могли сообщить до неё), основной сервер
# немедленно останавливают (`pg_ctl stop -m immediate`) и повышают реплику. Всё, что
# подтвердили после заморозки, на реплику точно не попало. Воркеры продолжают работать с новым
# основным сервером, пока не выполнят все задачи. Затем ревизор проверяет прогон дважды: по
# одному серверу (`leaselab check URL`) и сверяя его с журналами подтверждений
# (`leaselab check URL --journal DIR`). Потом то же самое повторяется с синхронной репликацией.
# Ячейка выполняется около полуминуты.

# %%
from leaselab.lessons.failover import fail_over

failovers = fail_over(work / "failover", lang=lang)   # asynchronous, then synchronous; every server and worker stopped at the end / сначала асинхронная, потом синхронная; в конце все серверы и воркеры остановлены

# %% tags=["nbval-check-output"]
for run in failovers:
    print(run.verdict(lang))

# %% tags=["nbval-ignore-output"]
for run in failovers:
    print(run.tally(lang))

# %% [markdown] tags=["en"]
# With asynchronous replication the checker finds nothing wrong on the server alone, and about the
# server's own history it is right: the claims and completions the standby never received are
# simply not in it. Those jobs were `pending` on the promoted server with the attempts they had
# before the freeze, so the fleet claimed them again, and each new claim counted the same attempt
# as the forgotten one: one fence, two tokens, as after a crash that forgets. The first
# holder had been told that its completion was written; that completion is gone, and the job ran
# a second time. Only the workers saw both claims, so only their journals can show it. This is
# how Jepsen judges a database: by what its clients were told, never by what the database says
# about itself afterwards. (Here the second run is harmless, the handler only sleeps; a fenced
# store of lesson 3 would have kept the first holder's write and refused the second holder's,
# though the queue counts the second as the job's holder.)
#
# With `synchronous_standby_names = '*'` and `synchronous_commit = on`, the primary acknowledges a
# commit only once the standby has written it to its WAL and synced it, so everything a worker
# was told is on the standby when it is promoted: no fence handed out twice, no acknowledged
# completion lost, and the journals agree with the server. `remote_apply` waits longer, until the
# standby has also applied the commit, so a read on the standby sees it too; a queue on such a
# server keeps that level for its acknowledged writes. The price: every acknowledged enqueue,
# claim and completion waits for a round trip to the standby and its sync (with `remote_apply`,
# its replay as well), and while no standby confirms, the primary acknowledges nothing: the queue
# waits rather than loses, and a worker's call gives up at its `call_timeout` with
# `DatabaseUnreachable`. Synchronous replication protects only what waits for it: heartbeats,
# failures and reaps are committed with `synchronous_commit = off` and can be lost in a failover,
# and at `durability="normal"` so is everything, claims included. And it protects
# only a failover to a standby that confirmed: promote one that was not synchronous, and you are
# back in the first run. `docs/durability.md` lists each setting and what it promises.

# %% [markdown] tags=["ru"]
# При асинхронной репликации ревизор по одному серверу не находит ничего плохого, и об истории
# самого сервера он прав: захватов и завершений, не дошедших до реплики, в ней просто нет. На
# новом основном сервере эти задачи были в статусе `pending` с тем числом попыток, что было до
# заморозки, поэтому воркеры захватили их снова, и каждый новый захват получил тот же номер
# попытки, что и забытый: один fence — два токена, как после сбоя, при котором сервер забывает захват.
# Первому владельцу подтвердили, что его завершение записано; этого завершения больше нет, и
# задача выполнилась второй раз. Оба захвата видели только воркеры, поэтому показать это могут
# только их журналы подтверждений. Так Jepsen и судит о базе данных: по тому, что подтвердили её
# клиентам, а не по тому, что база потом рассказывает о себе сама. (Здесь второй запуск безвреден:
# обработчик только спит. Хранилище с проверкой fence из урока 3 сохранило бы запись первого
# владельца и отклонило бы запись второго, хотя очередь считает владельцем задачи именно второго.)
#
# При `synchronous_standby_names = '*'` и `synchronous_commit = on` основной сервер подтверждает
# фиксацию, только когда реплика записала её в свой файл WAL и синхронизировала его, поэтому к
# моменту повышения на реплике есть всё, что сообщили воркерам: ни один fence не выдан дважды, ни
# одно подтверждённое завершение не потеряно, и журналы подтверждений сходятся с сервером.
# `remote_apply` ждёт дольше — пока реплика ещё и применит фиксацию, так что её увидит и чтение на
# реплике; очередь на таком сервере сохраняет этот уровень для своих подтверждённых записей.
# Плата: каждая подтверждённая постановка в очередь, каждый захват и каждое завершение ждут пути
# до реплики и обратно и её синхронизации (при `remote_apply` — ещё и воспроизведения), а пока ни
# одна реплика не отвечает, основной сервер не подтверждает ничего: очередь ждёт, а не теряет, а
# вызов воркера по истечении `call_timeout` перестаёт ждать и бросает `DatabaseUnreachable`.
# Синхронная репликация защищает только то, что её ждёт: heartbeat, `fail` и возвраты в очередь
# фиксируются с `synchronous_commit = off` и при переключении могут пропасть, а при
# `durability="normal"` так фиксируется всё, захваты тоже. И защищает она только при переключении на
# реплику, которая подтверждала фиксации: повысьте реплику, которая не была синхронной, — и вы
# снова в первом прогоне. Все настройки и что каждая обещает — в таблице в `docs/durability.md`.

# %% [markdown] tags=["en"]
# ## 5. What stays the same
#
# Lease, heartbeat, reaper, fencing, at-least-once: the ideas of lessons 1–4 moved to the
# server unchanged, and so did the `Queue` and `Worker` you call. Only the claim statement
# (`FOR UPDATE SKIP LOCKED`) and the clock (the server's) moved (lesson 6), and one promise
# became the server's to keep: a claim is on its disk before the worker acts on it (section 3),
# or the fence is no fence. The fenced completion, for one, is the same statement on both
# backends; only the way parameters are written differs:

# %% [markdown] tags=["ru"]
# ## 5. Что остаётся прежним
#
# Аренда, heartbeat, reaper, fencing, at-least-once: идеи уроков 1–4 переехали на сервер
# без изменений, как и `Queue` и `Worker`, которые вы вызываете. Изменились только
# оператор захвата (`FOR UPDATE SKIP LOCKED`) и часы (теперь это часы сервера; урок 6), а
# одно обещание теперь должен держать сервер: захват лежит у него на диске раньше, чем
# воркер начинает по нему действовать (раздел 3), иначе fence ничего не ограждает.
# Завершение с проверкой fencing-токена, например, — один и тот же оператор на обеих базах;
# отличается только то, как записаны параметры:

# %% tags=["nbval-check-output"]
print(sqlite_sql.COMPLETE.strip())
print()
print(pg_sql.COMPLETE.strip())

# %% [markdown] tags=["en"]
# ## Summary
#
# - A worker cut off by the network is a zombie made by the network: its lease expires, the
#   job goes to another worker, and its late write is refused with `LeaseLost`. The fence,
#   checked where the write lands, is what saves the result. A handler that checks its
#   lease stops by itself once its worker's own deadline passes, even while nothing is
#   refused.
# - A reply lost after its statement committed is an unknown outcome, not a failure: the
#   retry under the same token finds the write already made and counts it a success.
# - A fence is only as good as its durability: a claim a server crash can forget (or a
#   failover to an asynchronous replica) hands one fence to two live workers. Claims must
#   reach the disk before they return, as they do at `durability="full"`.
# - What the move to a server changed is small: the claim statement and the clock
#   (lesson 6), and the promise that a claim is on the server's disk before it returns.
#   Lease, heartbeat, reaper, fencing and at-least-once are the same.
#
# ## Exercises
#
# **1. Predict.** Section 2 lost the reply to a completion. Lose the reply to a *claim*
# instead: `w1` claims through a proxy that drops the reply, so the claim commits on the
# server while `w1` gets `DatabaseUnreachable` and never learns the job's token. Right
# after, `w2`, connected directly, asks for a job; the queue holds only that one. Does `w2`
# get it? Commit your answer below, then run the cell after it.

# %% [markdown] tags=["ru"]
# ## Итоги
#
# - Воркер, отрезанный от сети, — зомби, которого сделала сеть: его аренда истекает,
#   задача уходит другому воркеру, а его запоздалая запись отклоняется с `LeaseLost`.
#   Спасает результат fence, который проверяют там, куда попадает запись. Обработчик,
#   который проверяет свою аренду, останавливается сам, как только истекает собственный
#   срок воркера, даже если никто ничего не отклонял.
# - Ответ, потерянный после того, как оператор зафиксирован, — неизвестный исход, а не
#   отказ: повтор с тем же токеном находит запись уже сделанной и считает её успехом.
# - Fence надёжен ровно настолько, насколько надёжно хранится захват: захват, который
#   может забыть сбой сервера (или переключение на асинхронную реплику), отдаёт один
#   fence двум живым воркерам. Захват должен попасть на диск прежде, чем вернётся, как
#   это и происходит при `durability="full"`.
# - Переезд на сервер изменил немногое: оператор захвата и часы (урок 6) да обещание,
#   что захват лежит на диске сервера раньше, чем вернётся. Аренда, heartbeat, reaper,
#   fencing и at-least-once остались прежними.
#
# ## Упражнения
#
# **1. Предскажите.** В разделе 2 потерялся ответ на завершение. Теперь пусть потеряется
# ответ на *захват*: `w1` захватывает задачу через посредника, который выбрасывает ответ,
# так что на сервере захват зафиксирован, а `w1` получает `DatabaseUnreachable` и так и не
# узнаёт токен задачи. Сразу после этого `w2`, подключённый напрямую, просит задачу; в
# очереди только эта одна. Получит ли её `w2`? Зафиксируйте ответ ниже, потом выполните
# следующую ячейку.

# %%
guess = lessons.predict("l6_ex4", lang)  # without widgets: lessons.predict("l6_ex4", lang, answer=...) / без виджетов: lessons.predict("l6_ex4", lang, answer=...)
guess

# %% tags=["nbval-check-output"]
with guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    blind_db = next(databases)
    blind_link = Proxy(server_address(blind_db))
    blind = Queue(through(blind_db, blind_link.port))
    blind_id = blind.enqueue({"page": "home"})                 # it also reads the server's clock: the next request is the claim / заодно читает часы сервера: следующий запрос — захват
    blind_link.drop_next_reply()
    try:
        blind.claim("w1", lease=600)
        say("l6_ex4_claim", error=None)
    except DatabaseUnreachable as exc:
        say("l6_ex4_claim", error=type(exc).__name__)
    sighted = Queue(blind_db)
    second = sighted.claim("w2", lease=600)
    say("l6_ex4_second", got=second is not None, status=sighted.get(blind_id).status,
        worker=sighted.get(blind_id).worker)
    guess.reveal("yes" if second is not None else "no")
    sighted.close(); blind.close(); blind_link.close()

# %% [markdown] tags=["en"]
# <details><summary>Answer</summary>
#
# No. The claim committed: the job is `running`, held by `w1` under a token that nobody
# outside the server knows. `w1` cannot heartbeat or complete it, and nobody else may claim
# it, until its lease runs out and a reaper puts it back. An unknown outcome of a claim
# costs one lease of waiting, never a double claim: that is one reason not to make leases
# longer than the pauses they must outlast (lesson 5).
# </details>
#
# **2. Predict.** In section 1 the partition outlasted `w1`'s lease. Make it short: a new
# worker, `w4`, claims a 2-second job with a 10-second lease, is cut off for two seconds,
# and is reconnected. What becomes of its job? Commit your answer below first.

# %% [markdown] tags=["ru"]
# <details><summary>Ответ</summary>
#
# Нет. Захват зафиксирован: задача в статусе `running` и числится за `w1` с токеном,
# которого никто, кроме сервера, не знает. `w1` не может ни слать по ней heartbeat, ни
# завершить её, а другим её не захватить, пока аренда не истечёт и reaper не вернёт
# задачу в очередь. Неизвестный исход захвата стоит одной аренды ожидания, но никогда не
# даёт двойного захвата; это ещё одна причина не делать аренду длиннее пауз, которые ей
# нужно пережить (урок 5).
# </details>
#
# **2. Предскажите.** В разделе 1 разрыв сети длился дольше аренды `w1`. Сделаем его
# коротким: новый воркер `w4` захватывает задачу на 2 секунды с арендой на 10 секунд, на
# две секунды остаётся без сети, а потом сеть ему возвращают. Что станет с его задачей?
# Сначала зафиксируйте ответ ниже.

# %%
guess = lessons.predict("l6_ex5", lang)  # without widgets: lessons.predict("l6_ex5", lang, answer=...) / без виджетов: lessons.predict("l6_ex5", lang, answer=...)
guess

# %% tags=["nbval-check-output"]
with guess.folded():  # the run's own lines give the answer away: folded with it / вывод прогона выдаёт ответ, поэтому он свёрнут вместе с ним
    short = Queue(next(databases))
    short_fleet = Fleet(short.path, queue=short, log_dir=work / "short-logs")
    short_fleet.spawn(lease=10.0, name="w4")
    short_id = short.enqueue({"seconds": 2})
    lessons.wait_until(lambda: short.get(short_id).worker == "w4", what=lessons.text("wait_claim", lang))
    short_fleet.partition("w4")
    time.sleep(2)                                              # the partition lasts two seconds / разрыв длится две секунды
    short_fleet.heal("w4")
    lessons.wait_until(lambda: short.get(short_id).status == "done", timeout=60, what=lessons.text("wait_done", lang))
    short_done = short.get(short_id)
    say("l6_ex5_done", worker=short_done.worker, attempts=short_done.attempts,
        refused=sum(e.kind == "lease_lost" for e in short.events(short_id)))
    guess.reveal("kept" if short_done.attempts == 1 else "lost")
    short_fleet.shutdown()
    short.close()

# %% [markdown] tags=["en"]
# <details><summary>Answer</summary>
#
# Nothing. The proxy held `w4`'s heartbeats and, if the job had finished meanwhile, its
# completion; once the network came back, it delivered them, and the lease was still
# alive: the job was done by `w4` at attempt 1, and nothing was refused. A partition
# shorter than the lease (and than the worker's own deadline, 0.9 of it) costs nothing but
# time; only one that outlasts the lease makes a zombie.
# </details>
#
# Clean up: end the workers, close the dashboard and the queues, stop the server and
# remove its folder and ours.

# %% [markdown] tags=["ru"]
# <details><summary>Ответ</summary>
#
# Ничего. Посредник придержал heartbeat от `w4` и, если задача успела закончиться, её
# завершение; когда сеть вернулась, он всё это доставил, а аренда ещё действовала: задачу
# выполнил `w4` с первой попытки, и ничего не отклонили. Разрыв сети короче аренды (и
# короче собственного срока воркера, 0,9 аренды) стоит только времени; зомби получается
# лишь из разрыва, который длится дольше аренды.
# </details>
#
# Уберём за собой: завершим воркеров, закроем панель и очереди, остановим сервер и удалим
# его папку и нашу.

# %% tags=["nbval-check-output"]
lab.close()
fleet.shutdown()
say("workers_alive", names=[s.name for f in (fleet, own_fleet, short_fleet) for s in f.status()
                            if s.state in ("running", "paused", "stopping")])
cut.close()
server_folder = server.folder
server.stop()
say("l6_server_removed", removed=not server_folder.exists())
os.chdir(home)
say("folder_removed", removed=lessons.cleanup(work))
