"""Open the built HTML book in headless Chromium and check what a reader sees.

For every page listed in ``_toc.yml``:

* the page loads (HTTP 200) and no resource of the page fails (no 404, e.g. the favicon);
* MathJax (served locally by sphinx-mathjax-offline) has finished: every math element was
  typeset into an ``mjx-container``, no MathJax error node (undefined macro, bad TeX) exists,
  and no raw TeX (``\\(``, ``\\[``, ``$$``, ``\\begin{``, ``$\\x$``) is left in the prose;
* every ``<img>`` loaded (``naturalWidth > 0``);
* every static widget explorer note (:data:`fedlam.widgets.STATIC_NOTE`) comes right after
  an image, and no page embeds live widget views (they would be empty boxes offline);
* the console shows no errors (only sphinx-book-theme's benign "Got invalid theme mode" is
  allowed) and no uncaught exceptions;
* no request goes to a host other than the local server (the book must work offline).

The HTML is served from ``<root>/_build/html`` by a local ``http.server`` on a random free
port of 127.0.0.1. ``<root>`` is the repository (or ``$FEDLAM_BOOK_ROOT``). If the build is
missing the tests are skipped, unless ``FEDLAM_REQUIRE_HTML=1`` (as in ``.ci/run``), in which
case they fail. The browser is Debian's ``/usr/bin/chromium`` driven by Playwright (override
with ``$FEDLAM_CHROMIUM``); nothing downloads a browser.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from _book import HTML, TOC, serve, toc_pages, unavailable
from _chromium import launch

STATIC_NOTE = "Interactive explorer: static default shown; run this notebook to move the sliders."
# Console messages known to be harmless (documented in DESIGN.md §3).
BENIGN_CONSOLE = ("Got invalid theme mode",)
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
PAGE_TIMEOUT_MS = 30_000


PAGES = toc_pages()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serve(HTML) as url:
        yield url


@pytest.fixture(scope="module")
def browser(server: str) -> Iterator[object]:
    with launch(unavailable) as b:
        yield b


def test_toc_lists_pages() -> None:
    assert TOC.exists(), f"{TOC} is missing"
    assert len(PAGES) >= 2, f"_toc.yml lists no chapters: {PAGES}"


# JavaScript run in the page once MathJax has finished.
_INSPECT = """
() => {
  const mathEls = Array.from(document.querySelectorAll('.math'));
  const untypeset = mathEls.filter(e => !e.querySelector('mjx-container'))
                           .map(e => e.textContent.trim().slice(0, 80));
  const prose = document.querySelector('article') || document.body;
  const clone = prose.cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, mjx-container, .cell_input, .highlight, .sig, '
                         + 'textarea, .math').forEach(e => e.remove());
  const imgs = Array.from(document.querySelectorAll('img')).map(i => ({
      src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0}));
  // static explorer notes: the element before the note's output must be (or hold) an image
  const notes = [];
  for (const pre of document.querySelectorAll('.cell_output pre')) {
    if (!pre.textContent.includes(NOTE)) continue;
    let out = pre;
    while (out.parentElement && !out.parentElement.classList.contains('cell_output')) {
      out = out.parentElement;
    }
    // the note must be the first line of its stream output, right after the figure
    const firstLine = pre.textContent.trim().split('\\n')[0];
    let prev = out.previousElementSibling;
    const img = prev ? (prev.tagName === 'IMG' ? prev : prev.querySelector('img')) : null;
    notes.push({first: firstLine === NOTE,
                img: !!img && img.complete && img.naturalWidth > 0,
                prev: prev ? prev.outerHTML.slice(0, 120) : null});
  }
  return {
    nMath: mathEls.length,
    nMjx: document.querySelectorAll('mjx-container').length,
    nMerror: document.querySelectorAll(MERR).length,
    merrors: Array.from(document.querySelectorAll(MERR))
                  .slice(0, 5).map(e => e.getAttribute('data-mjx-error') || e.textContent),
    untypeset: untypeset.slice(0, 5),
    text: clone.innerText || clone.textContent,
    imgs: imgs,
    notes: notes,
    widgetViews: document.querySelectorAll(
        'script[type="application/vnd.jupyter.widget-view+json"], .widget-area, .jupyter-widgets'
    ).length,
    favicon: (document.querySelector('link[rel~="icon"]') || {}).href || null,
  };
}
""".replace("NOTE", repr(STATIC_NOTE)).replace("MERR", repr(
    # MathJax error nodes, and undefined macros (MathJax's noundefined package draws the
    # macro name in red instead of failing)
    'mjx-merror, [data-mjx-error], mjx-mtext[style*="color: red"]'
))

_RAW_TEX = [
    (re.compile(r"\\\(|\\\)"), r"\( \)"),
    (re.compile(r"\\\[|\\\]"), r"\[ \]"),
    (re.compile(r"\$\$"), "$$"),
    (re.compile(r"\\begin\{"), r"\begin{"),
    (re.compile(r"\\(frac|sqrt|mathbb|boldsymbol|xib|etab|sigb|Jks|lambda|sigma|kappa)\b"), "TeX macro"),
    (re.compile(r"\$[^$\s][^$\n]{0,80}?\$"), "$...$"),
]


@pytest.mark.parametrize("page_path", PAGES)
def test_page(server: str, browser, page_path: str) -> None:
    context = browser.new_context()
    problems: list[str] = []
    console: list[str] = []

    def on_route(route) -> None:
        host = urlparse(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:")) or host in LOCAL_HOSTS:
            route.continue_()
        else:
            problems.append(f"request to a non-local host: {route.request.url}")
            route.abort()

    context.route("**/*", on_route)
    page = context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    page.on(
        "console",
        lambda msg: console.append(msg.text) if msg.type == "error" else None,
    )
    page.on("pageerror", lambda exc: problems.append(f"uncaught exception: {exc}"))
    page.on(
        "requestfailed",
        lambda req: problems.append(f"request failed: {req.url} ({req.failure})"),
    )
    page.on(
        "response",
        lambda resp: problems.append(f"HTTP {resp.status}: {resp.url}")
        if resp.status >= 400
        else None,
    )
    try:
        response = page.goto(f"{server}/{page_path}", wait_until="load")
        assert response is not None and response.status == 200, (
            f"{page_path}: HTTP {None if response is None else response.status}"
        )
        # MathJax 3: startup.promise resolves after the initial typeset of the page.
        has_mathjax = page.evaluate("() => typeof window.MathJax !== 'undefined'")
        if has_mathjax:
            page.wait_for_function(
                "() => window.MathJax && window.MathJax.startup && window.MathJax.startup.promise"
            )
            page.evaluate("() => window.MathJax.startup.promise.then(() => true)")
        page.wait_for_function(
            "() => Array.from(document.images).every(i => i.complete)"
        )
        info = page.evaluate(_INSPECT)
        if info["favicon"]:
            fav = context.request.get(info["favicon"])
            if fav.status != 200:
                problems.append(f"favicon {info['favicon']}: HTTP {fav.status}")
        else:
            problems.append("no <link rel=icon> (the browser would request /favicon.ico)")
    finally:
        page.close()
        context.close()

    # math
    if info["nMath"] > 0:
        if not has_mathjax:
            problems.append(f"{info['nMath']} math elements but MathJax is not loaded")
        if info["nMjx"] == 0:
            problems.append(f"{info['nMath']} math elements, no mjx-container: MathJax did not run")
    if info["untypeset"]:
        problems.append(f"math not typeset: {info['untypeset']}")
    if info["nMerror"]:
        problems.append(f"{info['nMerror']} MathJax errors, e.g. {info['merrors']}")
    for rx, what in _RAW_TEX:
        m = rx.search(info["text"])
        if m:
            i = m.start()
            problems.append(f"raw TeX ({what}) in the text: ...{info['text'][max(0, i - 40):i + 60]!r}...")
    # images
    broken = [i["src"] for i in info["imgs"] if not i["ok"]]
    if broken:
        problems.append(f"images that did not load: {broken[:5]}")
    # widget fallbacks
    for note in info["notes"]:
        if not (note["img"] and note["first"]):
            problems.append(f"explorer note without a figure right before it (previous: {note['prev']!r})")
    if info["widgetViews"]:
        problems.append(f"{info['widgetViews']} live widget views (empty boxes in static HTML)")
    # console
    errors = [c for c in console if not any(b in c for b in BENIGN_CONSOLE)]
    problems.extend(f"console error: {c}" for c in errors)

    assert not problems, f"{page_path}:\n  " + "\n  ".join(problems)
