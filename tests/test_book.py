"""The book as a reader meets it: built with warnings as errors, then its pages read as HTML and opened in a
real browser (headless Chromium), where a script error, an image that did not load, a request that failed
(a CDN out of reach, say) or a table squeezed narrower than its content fails the test."""

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import yaml
from bs4 import BeautifulSoup

from systems import pipeline, provenance

ROOT = pipeline.ROOT
PIPE_TABLE = re.compile(r"\|\s*:?-{3,}:?\s*\|")  # the separator row of a Markdown table shown as text
NAN = re.compile(r"(?<![\w.])[+-]?nan(?![\w.])")  # a missing number printed as one: "nan", "+nan", "nan×"
# Chapters whose book run predates tables and sentences that say why a value is missing; each leaves the list with
# its next GPU run, and the test fails while a listed page no longer shows "nan".
MACHINE_PATH = re.compile(r"(?<![\w.~/])/(?:home|root|work|tmp|opt|Users|private|mnt|scratch)/[\w.-]+")
BROWSER = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]


def test_every_executed_chapter_is_in_the_toc():
    listed = set(toc_files())
    for path in pipeline.EXECUTED.glob("*.ipynb"):
        assert f"book/executed/{path.stem}" in listed, f"{path.name} is executed but not in _toc.yml"


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> Path:
    """The book built from this checkout, with warnings as errors, as `make book` builds it."""
    out = tmp_path_factory.mktemp("book")
    jb = shutil.which("jupyter-book") or str(Path(sys.executable).parent / "jupyter-book")
    proc = subprocess.run(
        [jb, "build", str(ROOT), "--path-output", str(out), "-n", "-W", "--keep-going"],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out / "_build" / "html"


def pages(html: Path) -> dict[str, BeautifulSoup]:
    return {entry: BeautifulSoup((html / f"{entry}.html").read_text(), "html.parser") for entry in toc_files()}


def chapters(html: Path) -> dict[str, BeautifulSoup]:
    return {k: v for k, v in pages(html).items() if k.startswith("book/executed/")}


@pytest.mark.book
def test_book_builds_every_page(html):
    for entry in toc_files():
        assert (html / f"{entry}.html").exists(), entry


@pytest.mark.book
def test_tables_are_tables_not_pipe_text(html):
    for entry, soup in pages(html).items():
        article = soup.find("article")
        assert not PIPE_TABLE.search(article.get_text()), f"{entry} shows a Markdown table as text"
    for entry, soup in chapters(html).items():
        assert soup.find("article").find("table"), f"{entry} shows no table"


@pytest.mark.book
def test_figures_exist_and_raw_data_is_downloadable(html):
    for entry, soup in pages(html).items():
        page_dir = (html / entry).parent
        for img in soup.find("article").find_all("img"):
            assert (page_dir / img["src"]).is_file(), f"{entry}: figure {img['src']} is missing"
        for link in soup.select("a.download"):
            assert (page_dir / link["href"]).is_file(), f"{entry}: download {link['href']} is missing"


@pytest.mark.book
def test_no_page_shows_nan(html):
    for entry, soup in pages(html).items():
        article = soup.find("article")
        for code in article.select(".cell_input, pre, code"):  # code may say float("nan"); what a reader is told may not
            code.decompose()
        found = NAN.findall(article.get_text())
        assert not found, f"{entry} shows a missing value as {found[:3]}: say why it is missing"


@pytest.mark.book
def test_no_page_shows_a_path_of_the_machine_that_ran_it(html):
    for entry, soup in pages(html).items():
        found = MACHINE_PATH.findall(soup.find("article").get_text())
        assert not found, f"{entry} shows machine paths: {found[:3]}"


@pytest.mark.book
def test_every_chapter_names_its_machine_date_and_an_existing_commit(html):
    for entry, soup in chapters(html).items():
        line = soup.select_one("article .provenance")
        assert line is not None, f"{entry} has no provenance line"
        text = line.get_text(" ", strip=True)
        assert re.search(r"on \d{4}-\d\d-\d\d", text) and ("GPU" in text or "H100" in text or "H200" in text
                                                          or "CPU" in text), f"{entry}: {text}"
        assert "source" in text, f"{entry} does not say whether its source changed since the run: {text}"
        for commit in line.select("code.commit"):
            assert provenance.commit_exists(commit.get_text()) is not False, (
                f"{entry} names commit {commit.get_text()}, which is not in this repository")


def test_every_build_reads_the_executed_chapters_again_for_their_banners():
    # the banner says whether notebooks/NAME.py changed since the run, which Sphinx does not track: a build that
    # read only the documents it saw change kept the banner of the build before
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        from provenance_banner import every_chapter_outdated
    finally:
        sys.path.remove(str(ROOT / "book" / "_ext"))
    env = types.SimpleNamespace(found_docs={"intro", "book/log", "book/executed/20_x", "book/executed/07_y"})
    assert every_chapter_outdated(None, env, set(), set(), set()) == ["book/executed/07_y", "book/executed/20_x"]


@pytest.mark.book
def test_formulas_render_without_the_internet(html):
    with_math = {entry: soup for entry, soup in pages(html).items() if soup.find("article").select(".math")}
    assert with_math, "no page has formulas: this test checks nothing"
    for entry, soup in with_math.items():
        mathjax = [s["src"] for s in soup.find_all("script", src=True) if "mathjax" in s["src"].lower()]
        assert mathjax, f"{entry} has formulas and no MathJax"
        for src in mathjax:
            assert not src.startswith(("http:", "https:", "//")), f"{entry} loads MathJax from the internet: {src}"
            assert ((html / entry).parent / src.split("?")[0]).is_file(), f"{entry}: {src} is missing"


# ---- in a browser -----------------------------------------------------------------------------------

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                 "--disable-background-networking", "--disable-component-update"]

# Per page: messages the browser logged as errors, images that did not load, table cells whose content is
# wider than the cell, and the widest table's overflow of the page's text column (tables in prose pages
# must fit; a result table wider than the column scrolls inside its own box instead).
INSPECT = """() => {
  const article = document.querySelector('article');
  const images = [...article.querySelectorAll('img')].filter(i => !(i.complete && i.naturalWidth > 0))
    .map(i => i.getAttribute('src'));
  const squeezed = [...article.querySelectorAll('table td, table th')]
    .filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.textContent.trim().slice(0, 40));
  const overflow = Math.max(0, ...[...article.querySelectorAll('table')].map(t =>
    t.closest('.cell_output') ? 0 : t.getBoundingClientRect().right - article.getBoundingClientRect().right));
  const math = article.querySelectorAll('.math').length;
  const typeset = article.querySelectorAll('mjx-container').length;
  return {images, squeezed, overflow, math, typeset};
}"""


@pytest.fixture(scope="module")
def served(html):
    """The built book on a local web server, as a reader's browser gets it."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(html)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.book
def test_every_page_loads_cleanly_in_a_real_browser(served):
    if BROWSER is None:
        if os.environ.get("SYSTEMS_REQUIRE_BROWSER"):
            pytest.fail("SYSTEMS_REQUIRE_BROWSER is set but no chromium is installed")
        pytest.skip("no chromium on this machine (CI installs Debian's package and requires it)")
    from playwright.sync_api import sync_playwright

    problems = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=BROWSER, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
        page.on("response", lambda r: errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
        for entry in toc_files():
            errors.clear()
            page.goto(f"{served}/{entry}.html", wait_until="networkidle")
            if page.locator("article .math").count():
                page.wait_for_function("() => document.querySelector('mjx-container') !== null", timeout=15_000)
            seen = page.evaluate(INSPECT)
            for what, bad in (("console errors", errors), ("images not loaded", seen["images"]),
                              ("cells narrower than their content", seen["squeezed"])):
                if bad:
                    problems.append(f"{entry}: {what}: {bad[:4]}")
            if seen["overflow"] > 1:
                problems.append(f"{entry}: a table runs {seen['overflow']:.0f} px past the text column at 1400 px")
            if seen["math"] and seen["typeset"] < seen["math"]:
                problems.append(f"{entry}: {seen['math'] - seen['typeset']} formulas not typeset")
        browser.close()
    assert not problems, "\n".join(problems)
