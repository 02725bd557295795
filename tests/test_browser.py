"""The lab as a reader sees it: JupyterLab in headless Chromium, the playground run, buttons clicked.

Each test serves a temporary copy of the lessons with ``jupyter lab`` on
127.0.0.1 (private config, no token, nothing fetched from the internet), opens the
playground (``notebooks/<lang>/00-*.ipynb``) in the system's Chromium through
Playwright, runs it from the top down to the cell that shows the dashboard (its
last cell closes the lab again), and then only clicks and reads what is on the
screen: a worker is spawned and seen
running, paused and seen paused (and stopped for real, in /proc), killed and seen
killed, and its job is seen to come back after its lease and be taken by the next
worker. The English playground runs in an English JupyterLab, the Russian one in a
Russian JupyterLab, with the Russian labels checked.

Screenshots of every step go to ``artifacts/browser/`` (``en-01-opened.png``, ...).
Without Chromium or Playwright the tests are skipped with the reason shown.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from leaselab.check.texts import REPORT
from leaselab.lab.i18n import t
from tests.support.browser_support import (
    CHROMIUM_ARGS,
    CHROMIUM_CANDIDATES,
    LabServer,
    NotebookPage,
    chromium_path,
    copy_notebooks,
    kill_all,
    leaselab_workers,
    process_state,
    wait_for,
)

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parent.parent
SHOTS = REPO / "artifacts" / "browser"
LEASE = 3.0  # short, so the killed worker's job comes back quickly
# The clean report's first words, as leaselab.check.texts says them in each language.
CHECK_CLEAN = {lang: REPORT[lang]["clean"].split("{", 1)[0] for lang in ("en", "ru")}
JOB_SECONDS = 60  # longer than the whole test needs, so the job is still running when the worker dies
JOB_PRIORITY = 9  # ahead of anything the playground itself enqueued
# The reader runs the playground from the top down to the cell that shows the dashboard.
LAB_CELL = "Lab("
# JupyterLab's own menu bar: proves the interface language, not only the lab's.
MENU_FILE = {"en": "File", "ru": "Файл"}


@pytest.fixture(scope="module")
def chromium():
    path = chromium_path()
    if path is None:
        where = os.environ.get("LEASELAB_CHROMIUM") or " or ".join(CHROMIUM_CANDIDATES)
        pytest.skip(f"no Chromium at {where} (apt-get install chromium): the browser tests cannot run")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright Python package is not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def lab_server(tmp_path):
    """Start JupyterLab on a copy of the lessons; at teardown nothing it started is left running."""
    servers: list[LabServer] = []

    def start(locale: str) -> LabServer:
        root = copy_notebooks(REPO / "notebooks", tmp_path / "notebooks")
        server = LabServer(root, tmp_path / "jupyter", locale=locale)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()
    # Workers outlive nothing: the kernel's fleet ends them, else they notice their parent died.
    # Should either fail, they must still not outlive the test.
    kill_all(leaselab_workers(tmp_path))


def playground(root: Path, lang: str) -> str:
    found = sorted(root.glob(f"{lang}/00-*.ipynb"))
    assert found, f"no playground notebook notebooks/{lang}/00-*.ipynb"
    return found[0].relative_to(root).as_posix()


def worker_names(lab) -> list[str]:
    """The worker rows on screen, by the name in their CSS class (leaselab-worker-NAME)."""
    return lab.locator(".leaselab-workers [class*='leaselab-worker-']").evaluate_all(
        "els => els.flatMap(e => Array.from(e.classList)"
        ".filter(c => c.startsWith('leaselab-worker-')).map(c => c.slice('leaselab-worker-'.length)))"
    )


def worker_row(lab, name: str) -> list[str]:
    """The cells of one worker's row: name, state, pid, job, lease left."""
    cells = lab.locator(f".leaselab-worker-{name} td").all_inner_texts()
    return [c.strip() for c in cells]


def job_row(nb: NotebookPage, job_id: str) -> dict[str, str] | None:
    """One job's row in the jobs table as {column header: cell text}, or None while it is not shown."""
    rows = nb.rows(".leaselab-jobs")
    header = next((r for r in rows if r and r[0] and not r[0].isdigit()), None)
    for row in rows:
        if row and row[0] == job_id and header:
            return dict(zip(header, row, strict=False))
    return None


def see_message(lab, expected: str, mentions: str) -> None:
    """The dashboard's message line says ``expected``, which names what was acted on."""
    message = lab.locator(".leaselab-message")
    seen = [""]

    def shown():
        seen[0] = message.inner_text().strip()
        return seen[0] == expected

    try:
        wait_for(shown, 30, f"the message {expected!r}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the dashboard said {seen[0]!r}") from None
    assert mentions in seen[0], f"the message {seen[0]!r} does not say which ({mentions!r}) it is about"


def truncated_labels(lab) -> list[str]:
    """Buttons and labels of the dashboard whose text is cut off (shown with an ellipsis)."""
    return lab.evaluate("""root => Array.from(
        root.querySelectorAll('button, .widget-label, .widget-label-basic, label, option'))
        .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
        .map(e => e.innerText.trim() || e.getAttribute('title') || e.className)""")


def fill(lab, css: str, value) -> None:
    box = lab.locator(f"{css} input").first
    box.fill(str(value))
    box.press("Tab")  # ipywidgets' number boxes send their value on blur or Enter


def enqueue_one(nb: NotebookPage, lab, seconds: int) -> list[str]:
    """Enqueue one job of ``seconds`` at JOB_PRIORITY through the dashboard; its row once the table shows it."""
    fill(lab, ".leaselab-n", 1)
    fill(lab, ".leaselab-priority", JOB_PRIORITY)
    fill(lab, ".leaselab-seconds", seconds)
    lab.locator(".leaselab-enqueue").click()

    def ours():
        for row in nb.rows(".leaselab-jobs"):
            if len(row) > 6 and row[2] == str(JOB_PRIORITY) and f'"seconds": {seconds}' in row[6]:
                return row
        return None

    return nb.wait_rows(".leaselab-jobs", lambda rows: ours(), "the enqueued job in the jobs table")


@pytest.mark.parametrize("lang, locale", [("en", "en"), ("ru", "ru_RU")])
def test_a_reader_spawns_pauses_and_kills_a_worker_and_sees_its_job_come_back(
    chromium, lab_server, tmp_path, lang, locale
):
    for old in SHOTS.glob(f"{lang}-*.png"):
        old.unlink()
    server = lab_server(locale)
    context = chromium.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
    outside: list[str] = []

    def local_only(route):
        # The lab must work offline: anything not served by our JupyterLab is refused and noted.
        if route.request.url.startswith((server.base + "/", "ws://127.0.0.1:", "data:", "blob:")):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", local_only)
    page = context.new_page()
    nb = NotebookPage(page, server, SHOTS, lang, focus=".leaselab-lab")
    try:
        _walk_through(nb, page, server, lang)
    finally:
        context.close()
        # Only JupyterLab's own shutdown here; the fixture's teardown kills whatever this leaves.
        server.stop(kill_leftovers=False)
    assert not outside, f"the page tried to reach beyond the local JupyterLab: {outside}"
    # The second worker was still busy with its 60 s job: shutting JupyterLab down ended the kernel,
    # and the kernel's fleet (or the worker's watch on its parent) ended every worker.
    left: list[int] = []

    def all_gone():
        left[:] = leaselab_workers(tmp_path)
        return not left

    try:
        wait_for(all_gone, 20, "every leaselab worker to be gone after JupyterLab shut down")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still running: {left}") from None


def _walk_through(nb: NotebookPage, page, server: LabServer, lang: str) -> None:
    path = playground(server.root, lang)
    nb.open(path)
    assert page.locator(".lm-MenuBar").first.inner_text().split()[0] == MENU_FILE[lang]
    nb.run_through(LAB_CELL)
    # Everything below happens in the first dashboard on the page.
    lab = page.locator(".leaselab-lab").first
    spawn = lab.locator(".leaselab-spawn")
    spawn.wait_for(timeout=60_000)
    assert spawn.inner_text().strip() == t("spawn", lang)
    assert lab.locator(".leaselab-enqueue").inner_text().strip() == t("enqueue", lang)
    lab.scroll_into_view_if_needed()
    nb.screenshot("opened")
    assert not truncated_labels(lab), f"labels cut off on the dashboard: {truncated_labels(lab)}"

    # One long job, ahead of anything else in the queue, with a short lease for the worker.
    fill(lab, ".leaselab-lease", LEASE)
    row = enqueue_one(nb, lab, JOB_SECONDS)
    pending = t("pending", lang)
    job_id = row[0]
    assert row[1] == pending, row
    nb.screenshot("enqueued")

    before = set(worker_names(lab))
    spawn.click()
    name = wait_for(
        lambda: next(iter(set(worker_names(lab)) - before), None), 30, "a new worker row after clicking Spawn worker"
    )
    running = lab.locator(f".leaselab-worker-{name} .leaselab-state-running")
    running.wait_for(timeout=30_000)
    assert running.inner_text().strip() == t("running", lang)
    nb.wait_rows(
        ".leaselab-jobs",
        lambda rows: (
            (job_row(nb, job_id) or {}).get(t("col_worker", lang)) == name
            and job_row(nb, job_id).get(t("col_status", lang)) == t("running", lang)
        ),
        f"job {job_id} running on {name}",
    )
    pid = int(worker_row(lab, name)[2])
    see_message(lab, t("spawned", lang, name=name), name)
    nb.screenshot("spawned-running")

    lab.locator(f".leaselab-pause-{name}").click()
    # Paused past its lease, the badge turns to "lease expired" (then "zombie" once its job is reaped):
    # any of them is the truth on screen.
    paused = lab.locator(
        f".leaselab-worker-{name} :is(.leaselab-state-paused, .leaselab-state-lease_expired, .leaselab-state-zombie)"
    )
    paused.wait_for(timeout=30_000)
    assert paused.inner_text().strip() in (t("paused", lang), t("lease_expired", lang), t("zombie", lang))
    assert process_state(pid) == "T", f"worker {name} (pid {pid}) is shown paused but is not stopped"
    see_message(lab, t("paused_msg", lang, name=name), name)
    nb.screenshot("paused")

    lab.locator(f".leaselab-kill-{name}").click()
    killed = lab.locator(f".leaselab-worker-{name} .leaselab-state-killed")
    killed.wait_for(timeout=30_000)
    assert killed.inner_text().strip() == t("killed", lang)
    assert process_state(pid) in (None, "Z"), f"worker {name} (pid {pid}) is shown killed but still runs"
    see_message(lab, t("killed_msg", lang, name=name), name)
    nb.screenshot("killed")

    # With no worker alive to reap it, the job stays "running" until its lease runs out on screen;
    # then the reader presses "Reap now" and sees it back in the queue.
    def lease_shown_expired():
        job = job_row(nb, job_id) or {}
        return job.get(t("col_lease_left", lang), "").startswith("-") and job.get(t("col_lease_left", lang)) != "-"

    nb.wait_rows(
        ".leaselab-jobs",
        lambda rows: lease_shown_expired(),
        f"job {job_id}'s lease to show as expired",
        timeout=LEASE * 10 + 20,
    )
    nb.screenshot("lease-expired")
    lab.locator(".leaselab-reap").click()
    see_message(lab, t("reaped", lang, n=1), "1")
    job = nb.wait_rows(
        ".leaselab-jobs",
        lambda rows: (job_row(nb, job_id) or {}).get(t("col_status", lang)) == pending and job_row(nb, job_id),
        f"job {job_id} back to {pending!r} after the reap",
    )
    assert job[t("col_attempts", lang)].startswith("1/"), job
    nb.screenshot("job-returned")

    spawn.click()
    second = wait_for(lambda: next(iter(set(worker_names(lab)) - before - {name}), None), 30, "a second worker row")
    job = nb.wait_rows(
        ".leaselab-jobs",
        lambda rows: (job_row(nb, job_id) or {}).get(t("col_worker", lang)) == second and job_row(nb, job_id),
        f"job {job_id} taken again by {second}",
    )
    assert job[t("col_attempts", lang)].startswith("2/"), job
    assert job[t("col_status", lang)] == t("running", lang), job
    nb.screenshot("job-retried")

    # "Check this run" after the pause and the kill: every promise held, said in the reader's
    # language, and the timeline drawn under the report.
    lab.locator(".leaselab-check").click()
    verdict = lab.locator(".leaselab-report .leaselab-verdict")
    verdict.wait_for(timeout=60_000)
    clean = CHECK_CLEAN[lang]
    assert verdict.inner_text().strip().startswith(clean), verdict.inner_text()
    assert "rgb(46, 125, 50)" in verdict.evaluate("e => getComputedStyle(e).color")
    lab.locator(".leaselab-timeline-image").wait_for(state="visible", timeout=60_000)
    nb.screenshot("checked")
    page.screenshot(path=str(SHOTS / f"{lang}-page.png"), full_page=True)
    # A laptop screen with the file browser open: the dashboard must still be readable.
    page.set_viewport_size({"width": 1100, "height": 800})
    lab.scroll_into_view_if_needed()
    nb.screenshot("narrow-window")
    assert not truncated_labels(lab), f"labels cut off in a narrower window: {truncated_labels(lab)}"
    assert not nb.console_errors, f"errors in the page: {nb.console_errors}"
    # The second worker is still running its 60 s job: shutting JupyterLab down must end it.


# -- lesson 7: the network buttons of a server queue -------------------------------------------------

SERVER_LAB_CELL = "Lab(lang=lang, lease=3.0, fleet=fleet)"
CUT_JOB_SECONDS = 20


def server_lesson(root: Path, lang: str) -> str:
    found = sorted(root.glob(f"{lang}/07-*.ipynb"))
    assert found, f"no lesson notebooks/{lang}/07-*.ipynb"
    return found[0].relative_to(root).as_posix()


@pytest.mark.parametrize("lang, locale", [("en", "en"), ("ru", "ru_RU")])
def test_a_reader_cuts_a_worker_off_the_network_and_reconnects_it_in_lesson_7(
    chromium, lab_server, tmp_path, pg_server, lang, locale
):
    """Lesson 7 runs down to its dashboard (its own server, its fleet of w1 and w2 behind proxies);
    the reader enqueues a job, cuts its holder off, sees the badges and the job go to the other
    worker, and reconnects the first. ``pg_server`` only brings the skip (or, in CI, the failure)
    when PostgreSQL is not installed: the lesson starts a server of its own."""
    for old in SHOTS.glob(f"{lang}7-*.png"):
        old.unlink()
    server = lab_server(locale)
    context = chromium.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
    page = context.new_page()
    nb = NotebookPage(page, server, SHOTS, f"{lang}7", focus=".leaselab-lab")
    try:
        nb.open(server_lesson(server.root, lang))
        nb.run_through(SERVER_LAB_CELL)
        lab = page.locator(".leaselab-lab").first
        lab.locator(".leaselab-partition-w1").wait_for(timeout=60_000)
        for name in ("w1", "w2"):
            assert lab.locator(f".leaselab-partition-{name}").inner_text().strip() == t("partition", lang)
            assert lab.locator(f".leaselab-heal-{name}").inner_text().strip() == t("heal", lang)
            assert lab.locator(f".leaselab-heal-{name}").is_disabled()  # nobody is cut off yet
        lab.scroll_into_view_if_needed()
        nb.screenshot("opened")
        assert not truncated_labels(lab), f"labels cut off on the dashboard: {truncated_labels(lab)}"

        job_id = enqueue_one(nb, lab, CUT_JOB_SECONDS)[0]
        held = nb.wait_rows(
            ".leaselab-jobs",
            lambda rows: (
                (job_row(nb, job_id) or {}).get(t("col_status", lang)) == t("running", lang) and job_row(nb, job_id)
            ),
            f"job {job_id} taken by w1 or w2",
        )
        holder = held[t("col_worker", lang)]
        other = {"w1": "w2", "w2": "w1"}[holder]

        lab.locator(f".leaselab-partition-{holder}").click()
        cut_off = lab.locator(
            f".leaselab-worker-{holder} :is(.leaselab-state-cut_off, .leaselab-state-lease_expired,"
            " .leaselab-state-zombie)"
        )
        cut_off.wait_for(timeout=30_000)
        assert cut_off.inner_text().strip() in (t("cut_off", lang), t("lease_expired", lang), t("zombie", lang))
        see_message(lab, t("partitioned_msg", lang, name=holder), holder)
        assert lab.locator(f".leaselab-heal-{holder}").is_enabled()
        assert lab.locator(f".leaselab-partition-{holder}").is_disabled()
        nb.screenshot("cut-off")

        # Its lease runs out on the server; the other worker's reaper hands the job on and it runs it.
        zombie = lab.locator(f".leaselab-worker-{holder} .leaselab-state-zombie")
        zombie.wait_for(timeout=30_000)
        assert zombie.inner_text().strip() == t("zombie", lang)
        job = nb.wait_rows(
            ".leaselab-jobs",
            lambda rows: (job_row(nb, job_id) or {}).get(t("col_worker", lang)) == other and job_row(nb, job_id),
            f"job {job_id} taken over by {other}",
            timeout=60,
        )
        assert job[t("col_attempts", lang)].startswith("2/"), job
        nb.screenshot("taken-over")

        lab.locator(f".leaselab-heal-{holder}").click()
        see_message(lab, t("healed_msg", lang, name=holder), holder)
        back = lab.locator(f".leaselab-worker-{holder} :is(.leaselab-state-running, .leaselab-state-waiting)")
        back.wait_for(timeout=30_000)
        assert lab.locator(f".leaselab-partition-{holder}").is_enabled()
        # The reconnected zombie's write was fenced off: the job is still the other worker's.
        job = job_row(nb, job_id)
        assert job[t("col_worker", lang)] == other and job[t("col_attempts", lang)].startswith("2/"), job
        nb.screenshot("reconnected")
        assert not nb.console_errors, f"errors in the page: {nb.console_errors}"
    finally:
        context.close()
        server.stop(kill_leftovers=False)


HANG_TIMEOUT = 20  # the spawned worker's job timeout: long enough to see the hang, short enough to see it end


@pytest.mark.parametrize("lang, locale", [("en", "en"), ("ru", "ru_RU")])
def test_a_reader_hangs_a_worker_sees_it_hung_and_then_its_job_come_back_at_the_timeout(
    chromium, lab_server, tmp_path, lang, locale
):
    server = lab_server(locale)
    context = chromium.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
    page = context.new_page()
    nb = NotebookPage(page, server, SHOTS, f"hang-{lang}", focus=".leaselab-lab")
    try:
        nb.open(playground(server.root, lang))
        nb.run_through(LAB_CELL)
        lab = page.locator(".leaselab-lab").first
        lab.locator(".leaselab-spawn").wait_for(timeout=60_000)
        lab.scroll_into_view_if_needed()
        fill(lab, ".leaselab-lease", LEASE)
        fill(lab, ".leaselab-timeout", HANG_TIMEOUT)
        before = set(worker_names(lab))
        lab.locator(".leaselab-spawn").click()
        name = wait_for(lambda: next(iter(set(worker_names(lab)) - before), None), 30, "a new worker row")
        lab.locator(f".leaselab-worker-{name} .leaselab-state-running").wait_for(timeout=30_000)
        hang = lab.locator(f".leaselab-hang-{name}")
        assert hang.inner_text().strip() == t("hang", lang)
        hang.click()
        see_message(lab, t("hang_msg", lang, name=name), name)
        job_id = enqueue_one(nb, lab, 0)[0]  # a job that would be done at once, but for the hang
        hung = lab.locator(f".leaselab-worker-{name} .leaselab-state-hung")
        hung.wait_for(timeout=60_000)
        assert hung.inner_text().strip() == t("hung", lang)
        assert not truncated_labels(lab), f"labels cut off on the dashboard: {truncated_labels(lab)}"
        nb.screenshot("hung")
        exited = lab.locator(f".leaselab-worker-{name} .leaselab-state-exited")
        exited.wait_for(timeout=(HANG_TIMEOUT + 60) * 1000)
        row = nb.wait_rows(
            ".leaselab-jobs",
            lambda rows: (r := job_row(nb, job_id)) and r[t("col_status", lang)] == t("pending", lang) and r,
            "the hung job pending again",
        )
        assert f"ran past its timeout of {HANG_TIMEOUT}s" in row[t("col_result", lang)], row
        nb.screenshot("timed-out")
    finally:
        context.close()
        server.stop(kill_leftovers=False)
