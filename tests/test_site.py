"""The web edition as a reader gets it: built by web/build.py, served as static files, read in Chromium.

The site is built once for this module from the stored lessons (nothing is executed), served from
127.0.0.1 by a plain static file server, and every page of both languages is opened in the
system's Chromium through Playwright: it loads with no console error and nothing fetched from
anywhere but that server, every picture has loaded, every link inside the site leads to a page
(and to an anchor on it) that exists, the language switch leads to the same page in the other
language, each lesson has its Binder button, the dashboards show their static view, search finds
pages in both languages, and a phone-sized screen reads a lesson without scrolling sideways.

Screenshots of one lesson per language, on a desktop and on a phone, go to ``artifacts/site/``.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from leaselab.lab.i18n import t
from tests.support.browser_support import CHROMIUM_ARGS, CHROMIUM_CANDIDATES, chromium_path, free_port

pytestmark = pytest.mark.site

REPO = Path(__file__).resolve().parent.parent
SHOTS = REPO / "artifacts" / "site"
LANGS = ("en", "ru")
OTHER = {"en": "ru", "ru": "en"}
LESSONS = sorted(p.stem for p in (REPO / "notebooks" / "en").glob("[0-9][0-9]-*.ipynb"))
PAGES = ["index", "glossary", "search", "genindex", *LESSONS]
DASHBOARD_LESSON = LESSONS[0]  # the playground: its dashboard is stored as widget state
SHOWN_LESSON = "01-lease"  # the lesson whose screenshots a person looks at
PHONE = {"width": 390, "height": 844}
# A word each language's search must find, and a page it must find it on.
SEARCH = {"en": ("heartbeat", "01-lease"), "ru": ("аренда", "01-lease")}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    try:
        import jupyter_book  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("Jupyter Book is not installed (./dev site, or pip install -e '.[site]')")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, str(REPO / "web" / "build.py"), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert f"{out / 'html'}/index.html" in done.stdout, done.stdout
    return out / "html"


@pytest.fixture(scope="module")
def server(site):
    """A plain static file server on 127.0.0.1, as any web host would serve the folder."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), functools.partial(Quiet, directory=site))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture(scope="module")
def chromium():
    path = chromium_path()
    if path is None:
        where = os.environ.get("LEASELAB_CHROMIUM") or " or ".join(CHROMIUM_CANDIDATES)
        pytest.skip(f"no Chromium at {where} (apt-get install chromium): the site's browser tests cannot run")
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


class Reader:
    """A page in Chromium that records console errors, uncaught exceptions and requests that leave the server."""

    def __init__(self, browser, server: str, viewport: dict[str, int] | None = None) -> None:
        self.context = browser.new_context(viewport=viewport or {"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.server = server
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.route("**/*", self.only_local)

    def only_local(self, route) -> None:
        url = route.request.url
        if url.startswith((self.server + "/", "data:")):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def open(self, path: str):
        response = self.page.goto(f"{self.server}/{path}", wait_until="load")
        assert response is not None and response.status == 200, f"{path}: {response and response.status}"
        return self.page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def reader(chromium, server):
    opened: list[Reader] = []

    def make(viewport: dict[str, int] | None = None) -> Reader:
        opened.append(Reader(chromium, server, viewport))
        return opened[-1]

    yield make
    for r in opened:
        r.close()


def target_exists(server: str, href: str, cache: dict[str, str]) -> str | None:
    """None when ``href`` (absolute, on ``server``) is a file the server has, with its #anchor; else why not."""
    url, _, anchor = href.partition("#")
    if url not in cache:
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                cache[url] = response.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as exc:
            cache[url] = f"\0HTTP {exc.code}"
    body = cache[url]
    if body.startswith("\0"):
        return body[1:]
    if anchor and f'id="{urllib.parse.unquote(anchor)}"' not in body:
        return f"no anchor #{anchor}"
    return None


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("lang", LANGS)
def test_every_page_loads_whole_with_its_pictures_and_links_and_nothing_from_outside(reader, server, lang, page):
    r = reader()
    p = r.open(f"{lang}/{page}.html")
    p.wait_for_load_state("networkidle")
    assert p.evaluate("document.documentElement.lang") == lang
    broken = p.evaluate("[...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")
    assert broken == [], f"{lang}/{page}: pictures that did not load: {[b[:80] for b in broken]}"
    hrefs = p.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.href)")
    cache: dict[str, str] = {}
    dead = {}
    for href in set(hrefs):
        if href.startswith(server + "/"):
            why = target_exists(server, href, cache)
            if why:
                dead[href.removeprefix(server)] = why
    assert dead == {}, f"{lang}/{page}: links that lead nowhere: {dead}"
    assert "VBox(children=" not in p.inner_text("body"), "a widget's Python repr shown instead of its static view"
    # The same page on a phone: long lines, tables and the dashboard scroll inside their blocks.
    p.set_viewport_size(PHONE)
    width = p.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{lang}/{page} is {width}px wide on a {PHONE['width']}px screen"
    assert r.errors == [], f"{lang}/{page}: console errors: {r.errors}"
    assert r.outside == [], f"{lang}/{page}: fetched from outside the site: {r.outside}"


@pytest.mark.parametrize("page", ["index", "glossary", *LESSONS])
@pytest.mark.parametrize("lang", LANGS)
def test_the_language_switch_leads_to_the_same_page_in_the_other_language(reader, lang, page):
    r = reader()
    p = r.open(f"{lang}/{page}.html")
    switch = p.locator("a.leaselab-lang")
    assert switch.count() == 1
    switch.click()
    p.wait_for_load_state("load")
    assert p.url.endswith(f"/{OTHER[lang]}/{page}.html"), p.url
    assert p.evaluate("document.documentElement.lang") == OTHER[lang]
    assert r.errors == []


@pytest.mark.parametrize("lang", LANGS)
def test_each_lesson_has_a_binder_button_that_opens_the_readers_copy_of_that_lesson(reader, lang):
    r = reader()
    for lesson in LESSONS:
        p = r.open(f"{lang}/{lesson}.html")
        links = p.evaluate("[...document.querySelectorAll('a[href*=\"mybinder.org\"]')].map(a => a.href)")
        assert links == [
            f"https://mybinder.org/v2/gh/leaselab/leaselab/HEAD?urlpath=lab/tree/my-lessons/{lang}/{lesson}.ipynb"
        ], f"{lang}/{lesson}: {links}"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"https://mybinder.org/v2/gh/leaselab/leaselab/HEAD?urlpath=lab/tree/my-lessons/{lang}/" in readme


@pytest.mark.parametrize("lang", LANGS)
def test_the_dashboard_shows_its_static_view_in_the_lessons_language(reader, lang):
    r = reader()
    p = r.open(f"{lang}/{DASHBOARD_LESSON}.html")
    view = p.locator(".leaselab-static").first
    view.scroll_into_view_if_needed()
    assert view.is_visible()
    buttons = view.locator("button").all_inner_texts()
    assert t("spawn", lang) in buttons, buttons
    assert all(b.is_disabled() for b in view.locator("button").all())
    assert view.locator(".leaselab-counts").count() == 1  # the job counts the dashboard showed
    SHOTS.mkdir(parents=True, exist_ok=True)
    view.screenshot(path=str(SHOTS / f"{lang}-dashboard.png"))


@pytest.mark.parametrize("lang", LANGS)
def test_a_predict_exercises_answer_stays_folded_until_the_reader_opens_it(reader, lang):
    # The stored lesson ran with nobody guessing: the page must not show the run's answer before a guess.
    from leaselab.lessons.texts import text as lesson_text

    r = reader()
    p = r.open(f"{lang}/{SHOWN_LESSON}.html")  # exercise 2, l1_ex2, ends with guess.reveal(...)
    summary = p.locator("details > summary", has_text=lesson_text("predict_show", lang)).first
    summary.scroll_into_view_if_needed()
    answer = summary.locator("xpath=..").locator("p")
    assert summary.is_visible() and not answer.is_visible()
    summary.click()
    assert answer.is_visible()
    assert answer.inner_text().startswith(lesson_text("predict_none", lang, actual="").split(":")[0])
    assert r.errors == []


@pytest.mark.parametrize("lang", LANGS)
def test_search_finds_a_lesson_in_each_language(reader, lang):
    word, page = SEARCH[lang]
    r = reader()
    p = r.open(f"{lang}/search.html?q={urllib.parse.quote(word)}")
    found = p.locator(f"#search-results a[href*='{page}.html']")
    found.first.wait_for(timeout=30_000)
    assert r.errors == []


def test_the_start_page_offers_both_languages(reader):
    r = reader()
    p = r.open("index.html")
    for lang in LANGS:
        p.locator(f"a[hreflang='{lang}']").click()
        p.wait_for_load_state("load")
        assert p.url.endswith(f"/{lang}/index.html")
        assert p.locator(f"a[href='{LESSONS[0]}.html']").count() >= 1  # the start page leads to lesson 0
        p.go_back()
    assert r.errors == [] and r.outside == []


def test_the_glossary_is_a_page_in_each_language(reader):
    for lang in LANGS:
        p = reader().open(f"{lang}/glossary.html")
        table = p.locator("table").first.inner_text()
        assert "lease" in table and "аренда" in table
        # Its English paragraph keeps its apostrophe in the Russian book too (no Russian smart quotes).
        assert re.search(r"the lessons['’] printed lines", p.inner_text("article")), lang


@pytest.mark.parametrize("lang", LANGS)
def test_a_phone_reads_a_lesson_without_scrolling_sideways(reader, lang):
    SHOTS.mkdir(parents=True, exist_ok=True)
    desktop = reader().open(f"{lang}/{SHOWN_LESSON}.html")
    desktop.screenshot(path=str(SHOTS / f"{lang}-{SHOWN_LESSON}-desktop.png"))
    r = reader(PHONE)
    p = r.open(f"{lang}/{SHOWN_LESSON}.html")
    p.screenshot(path=str(SHOTS / f"{lang}-{SHOWN_LESSON}-phone.png"))
    width = p.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page is {width}px wide on a {PHONE['width']}px screen"
    main = p.locator("main, article").first.bounding_box()
    assert main is not None and main["x"] >= 0 and main["x"] + main["width"] <= PHONE["width"] + 1, main
    size = p.evaluate("parseFloat(getComputedStyle(document.querySelector('article p')).fontSize)")
    assert size >= 14, f"body text {size}px"
    # The whole lesson is there to read: its last section, and a picture, within the page.
    assert p.locator("article img").count() >= 1
    assert p.locator(".leaselab-lang").is_visible(), "the language switch is hidden on a phone"
    assert r.errors == []
