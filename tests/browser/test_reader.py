"""The reader test: every TOC page, opened as a reader opens it, within the book's limits.

Each page listed in ``_toc.yml`` is opened in headless Chromium at 1400 x 900 (the built HTML
in ``_build/html``, served on 127.0.0.1 as in ``test_html.py``) and measured once:

==========================  ===========================================================
limit                       what is measured
==========================  ===========================================================
``screens``                 page height / 900 <= 20 (API pages <= 60)
``code_lines``              visible code-cell lines <= 60 (cells folded behind "Show code
                            cell source" or removed are not visible)
``cell_lines``              no visible code cell longer than 15 lines
``checks_visible``          no visible ``assert`` line and no visible ``glue(`` line
``long_lines``              no visible code line over 88 characters (it would scroll)
``figures_captioned``       every visible output image sits in a figure with a caption
``figures_scale``           every visible output image is shown at >= 0.6 of its pixel width
``figure_text``             a 9 pt font in every visible output image is >= 9 px on screen:
                            shown width / pixel width x the dpi the PNG was saved at (its
                            ``pHYs`` chunk; an image without one fails) / 72 x 9 >= 9. That
                            no figure sets a font below 9 pt is ``tests/test_plotting.py``'s
                            (the style and the package; notebooks that still do are listed
                            there: this limit does not see them)
``tables_unwrapped``        no table cell wraps its text onto a second line (below)
``paper_labels``            no paper equation cited by its LaTeX label (labels from
                            ``book/_data/paper_equations.json``)
``no_nd``                   no "n.d." (a reference without a year)
``no_placeholder``          no visible "placeholder"
``summary_exercises``       a "Summary" and an "Exercises" section (chapters but the errata)
==========================  ===========================================================

Wrapped table cells. Every ``td``/``th`` of the page body is measured with its folds
(``<details>``) opened, as a reader who opens them sees it: its content's height as laid out,
and again with ``white-space: nowrap`` on it (one reflow for the whole page); a cell wraps when
the first is taller by more than 4 px. An inline formula cannot break (MathJax 3 does not break
inline math), so a cell with math wraps only where its text does. The rule:

* a table of results (in a code cell's output): no cell may wrap;
* a table written in the prose (markdown): a cell of at most :data:`MAX_SHORT_CELL_WORDS` words
  (a formula counts as one word) - a number, a name, a formula, a short label - may not wrap;
  a longer cell is prose and wraps like the text around it (the errata's list of errors, the
  API index's descriptions).

Pages being restructured are listed in :data:`KNOWN_NONCOMPLIANT`, per (page, limit): those
tests are ``xfail(strict=True)``, so a page that becomes compliant fails the run until its
entry is removed. Every other (page, limit) must pass. :func:`test_limits_catch_a_bad_page`
is the negative control on a synthetic page; ``tests/test_reader_layout.py`` checks the code
limits on the chapter 3 of before the layout pass (a real page that broke them). Run
``python tests/browser/test_reader.py`` to print the measurements.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _book import HTML, serve, toc_pages, unavailable
from _chromium import launch

EQUATIONS = Path(__file__).resolve().parents[2] / "book" / "_data" / "paper_equations.json"
VIEWPORT = {"width": 1400, "height": 900}

MAX_SCREENS = 20
MAX_SCREENS_API = 60
MAX_CODE_LINES = 60
MAX_CELL_LINES = 15
MAX_LINE_CHARS = 88
MIN_IMAGE_SCALE = 0.6
MIN_FONT_PT = 9.0  # the smallest font a figure may set (tests/test_plotting.py)
MIN_TEXT_PX = 9.0  # ... and the smallest it may be on screen
MAX_SHORT_CELL_WORDS = 3  # a prose table's cell this short must not wrap
WRAP_TOLERANCE_PX = 4
NO_SUMMARY_NEEDED = {"book/chapters/10_errata.html"}

LIMITS = (
    "screens",
    "code_lines",
    "cell_lines",
    "checks_visible",
    "long_lines",
    "figures_captioned",
    "figures_scale",
    "figure_text",
    "tables_unwrapped",
    "paper_labels",
    "no_nd",
    "no_placeholder",
    "summary_exercises",
)

_CH = "book/chapters/"
_EX = "book/experiments/"
# (page, limit) pairs that fail on this build, because their page is being restructured
# (issue 17); a page listed here is a strict xfail, so an entry must go as soon as its page
# complies. Every page meets the layout limits since the layout pass. The tables check came
# later: the counts below are wrapped cells measured on the book of the commit that added it
# (Chromium, 1400 x 900); mostly headers and labels of result tables wider than the column,
# to be fixed with shorter headers and labels or split tables (the package's table helpers
# and the notebooks that build the rows, then re-executed), as chapters 1, 3a, 6, 8 and 9 were.
_LAYOUT = ("code_lines", "cell_lines", "checks_visible", "long_lines")
_TABLES = ("tables_unwrapped",)
KNOWN_NONCOMPLIANT: dict[str, tuple[str, ...]] = {
}


def known(page: str, limit: str) -> bool:
    return limit in KNOWN_NONCOMPLIANT.get(page, ())


PAGES = toc_pages()


def paper_label_patterns() -> list[str]:
    """Regex sources (for JavaScript) that find a paper equation cited by its label.

    A citation is "eq." / "eqs." / "equation(s)" followed by one or more labels (with or
    without ``eq:``), e.g. "eq. HamHam_quad_only_J" or "eqs. net_field, intra, inter"; a
    label used as a symbol's name (``H_min(r) = ...``) is not a citation.
    """
    labels = json.loads(EQUATIONS.read_text())["equations"]
    names = sorted({lab.split(":", 1)[-1] for lab in labels}, key=len, reverse=True)
    one = r"(?:eq:)?(?:" + "|".join(re.escape(n) for n in names) + r")(?![\w-])"
    sep = r"\s*(?:,\s*and|,|and|/|–|-)\s*"
    return [rf"\b[Ee]q(?:uation)?s?\.?\s+{one}(?:{sep}{one})*"]


# Runs in the page once MathJax has typeset it. Everything measured is what a reader sees.
_MEASURE = r"""
(args) => {
  const [maxChars, labelPatterns] = args;
  const visible = (el) => el.getClientRects().length > 0 &&
      el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true});
  const lines = (pre) => {
    const ls = pre.innerText.replace(/\n+$/, '').split('\n');
    return ls.length === 1 && ls[0] === '' ? [] : ls;
  };
  const article = document.querySelector('article') || document.body;
  // code cells (MyST-NB): .cell_input; folded ones sit in a closed <details>
  const cells = Array.from(article.querySelectorAll('.cell_input pre')).filter(visible);
  const cellLines = cells.map(lines);
  const codeLines = cellLines.flat();
  // every visible literal block that is not an output or an API signature
  const blocks = Array.from(article.querySelectorAll('pre'))
      .filter(p => visible(p) && !p.closest('.cell_output, .output'));
  const longLines = blocks.flatMap(lines).filter(l => l.length > maxChars);
  const checks = codeLines.filter(l => /^\s*assert\b/.test(l) || /\bglue\(/.test(l));
  // output images
  const imgs = Array.from(article.querySelectorAll('.cell_output img, .output img'))
      .filter(visible).map(img => {
        const fig = img.closest('figure');
        const cap = fig ? fig.querySelector('figcaption') : null;
        return {src: (img.getAttribute('src') || '').slice(-60),
                captioned: !!(cap && cap.innerText.trim().length > 0),
                scale: img.naturalWidth ? img.getBoundingClientRect().width / img.naturalWidth : 0};
      });
  // prose (and printed outputs) without code and API signatures
  const clone = article.cloneNode(true);
  clone.querySelectorAll('.cell_input, script, style, .sig, mjx-container')
       .forEach(e => e.remove());
  const text = clone.innerText || '';
  const labelHits = [];
  for (const src of labelPatterns) {
    const rx = new RegExp(src, 'g');
    for (const m of text.matchAll(rx)) labelHits.push(m[0]);
  }
  const heads = Array.from(article.querySelectorAll('h1, h2, h3'))
      .map(h => h.innerText.replace(/[#¶]/g, '').replace(/^[\d.]+\s*/, '').trim());
  const bodyText = document.body.innerText || '';
  return {
    screens: document.documentElement.scrollHeight / window.innerHeight,
    codeLines: codeLines.length,
    maxCellLines: Math.max(0, ...cellLines.map(c => c.length)),
    nCells: cells.length,
    checks: checks.slice(0, 5), nChecks: checks.length,
    longLines: longLines.slice(0, 3).map(l => l.slice(0, 100)), nLongLines: longLines.length,
    images: imgs,
    labelHits: labelHits.slice(0, 5), nLabelHits: labelHits.length,
    nd: (bodyText.match(/\bn\.\s?d\./g) || []).length,
    placeholder: (bodyText.match(/placeholder/gi) || []).length,
    summary: heads.some(h => /^Summary\b/i.test(h)),
    exercises: heads.some(h => /^Exercises?\b/i.test(h)),
  };
}
"""


# Runs after _MEASURE (it opens and closes folds and restyles tables for a moment): the dpi
# each visible output image was saved at, and the table cells that wrap.
_MEASURE_FIGURES_TABLES = r"""
async (args) => {
  const [tolerance, maxShortWords] = args;
  const article = document.querySelector('article') || document.body;
  const visible = (el) => el.getClientRects().length > 0 &&
      el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true});
  // the dpi in a PNG's pHYs chunk (pixels per metre), or null (not a PNG, no pHYs before IDAT)
  const pngDpi = async (src) => {
    try {
      const buf = new Uint8Array(await (await fetch(src)).arrayBuffer());
      const sig = [137, 80, 78, 71, 13, 10, 26, 10];
      if (buf.length < 8 || !sig.every((b, i) => buf[i] === b)) return null;
      const dv = new DataView(buf.buffer);
      for (let off = 8; off + 8 <= buf.length; ) {
        const len = dv.getUint32(off);
        const type = String.fromCharCode(...buf.slice(off + 4, off + 8));
        if (type === 'pHYs') return buf[off + 16] === 1 ? dv.getUint32(off + 8) * 0.0254 : null;
        if (type === 'IDAT' || type === 'IEND') return null;
        off += 12 + len;
      }
    } catch (e) { return null; }
    return null;
  };
  const figures = [];
  for (const img of Array.from(article.querySelectorAll('.cell_output img, .output img')).filter(visible)) {
    figures.push({src: (img.getAttribute('src') || '').slice(-60),
                  scale: img.naturalWidth ? img.getBoundingClientRect().width / img.naturalWidth : 0,
                  dpi: await pngDpi(img.currentSrc || img.src)});
  }
  const closed = Array.from(article.querySelectorAll('details:not([open])'));
  closed.forEach(d => { d.open = true; });
  const cells = Array.from(article.querySelectorAll('table td, table th')).filter(visible);
  const height = (c) => {
    const r = document.createRange();
    r.selectNodeContents(c);
    return r.getBoundingClientRect().height;
  };
  const laidOut = cells.map(height);
  const nowrap = document.createElement('style');
  nowrap.textContent = 'table td, table th, table td *, table th * {white-space: nowrap !important}';
  document.head.appendChild(nowrap);
  const oneLine = cells.map(height);
  nowrap.remove();
  closed.forEach(d => { d.open = false; });
  const wrapped = [];
  cells.forEach((c, i) => {
    if (laidOut[i] - oneLine[i] <= tolerance) return;
    const k = c.cloneNode(true);
    k.querySelectorAll('mjx-container').forEach(m => m.replaceWith(' $ '));
    const text = (k.textContent || '').trim().replace(/\s+/g, ' ');
    const words = text ? text.split(' ').length : 0;
    const result = !!c.closest('.cell_output, .output');
    if (result || words <= maxShortWords) {
      wrapped.push({result, words, lines: Math.round(laidOut[i] / Math.max(oneLine[i], 1) * 10) / 10,
                    text: text.slice(0, 50)});
    }
  });
  return {figures, nTableCells: cells.length, wrapped};
}
"""


def measure_page(page, labels: list[str]) -> dict:
    """The measurements of the page loaded in ``page`` (a Playwright page)."""
    has_mathjax = page.evaluate("() => typeof window.MathJax !== 'undefined'")
    if has_mathjax:
        page.wait_for_function(
            "() => window.MathJax && window.MathJax.startup && window.MathJax.startup.promise"
        )
        page.evaluate("() => window.MathJax.startup.promise.then(() => true)")
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
    m = page.evaluate(_MEASURE, [MAX_LINE_CHARS, labels])
    m.update(page.evaluate(_MEASURE_FIGURES_TABLES, [WRAP_TOLERANCE_PX, MAX_SHORT_CELL_WORDS]))
    return m


def figure_text_px(image: dict) -> float | None:
    """On-screen size in px of a ``MIN_FONT_PT`` font in an output image (None: dpi unknown)."""
    if not image["dpi"]:
        return None
    return image["scale"] * image["dpi"] / 72.0 * MIN_FONT_PT


def violations(page_path: str, m: dict) -> dict[str, str]:
    """Limit -> what is wrong, for every limit the measurements ``m`` break ({} if none)."""
    out: dict[str, str] = {}
    max_screens = MAX_SCREENS_API if page_path.startswith("book/api/") else MAX_SCREENS
    if m["screens"] > max_screens:
        out["screens"] = f"{m['screens']:.1f} screens > {max_screens}"
    if m["codeLines"] > MAX_CODE_LINES:
        out["code_lines"] = f"{m['codeLines']} visible code lines > {MAX_CODE_LINES}"
    if m["maxCellLines"] > MAX_CELL_LINES:
        out["cell_lines"] = f"a visible cell of {m['maxCellLines']} lines > {MAX_CELL_LINES}"
    if m["nChecks"]:
        out["checks_visible"] = f"{m['nChecks']} visible assert/glue( lines, e.g. {m['checks']}"
    if m["nLongLines"]:
        out["long_lines"] = f"{m['nLongLines']} visible lines > {MAX_LINE_CHARS} chars: {m['longLines']}"
    uncaptioned = [i["src"] for i in m["images"] if not i["captioned"]]
    if uncaptioned:
        out["figures_captioned"] = f"{len(uncaptioned)} output images without a caption: {uncaptioned[:3]}"
    small = [(i["src"], round(i["scale"], 2)) for i in m["images"] if i["scale"] < MIN_IMAGE_SCALE]
    if small:
        out["figures_scale"] = f"{len(small)} images shown below {MIN_IMAGE_SCALE}: {small[:3]}"
    tiny = [(f["src"], None if figure_text_px(f) is None else round(figure_text_px(f), 1))
            for f in m["figures"] if (figure_text_px(f) or 0.0) < MIN_TEXT_PX]
    if tiny:
        out["figure_text"] = (f"{len(tiny)} images where {MIN_FONT_PT:g} pt text is below {MIN_TEXT_PX:g} px "
                              f"(None: no dpi in the PNG): {tiny[:3]}")
    if m["wrapped"]:
        n_res = sum(w["result"] for w in m["wrapped"])
        eg = [(w["text"], w["lines"]) for w in m["wrapped"][:3]]
        out["tables_unwrapped"] = (f"{len(m['wrapped'])} table cells wrap ({n_res} in result tables, "
                                   f"{len(m['wrapped']) - n_res} short prose-table cells), e.g. {eg}")
    if m["nLabelHits"]:
        out["paper_labels"] = f"{m['nLabelHits']} paper equations cited by label: {m['labelHits']}"
    if m["nd"]:
        out["no_nd"] = f'{m["nd"]} "n.d."'
    if m["placeholder"]:
        out["no_placeholder"] = f'{m["placeholder"]} visible "placeholder"'
    is_chapter = page_path.startswith("book/chapters/") and page_path not in NO_SUMMARY_NEEDED
    if is_chapter and not (m["summary"] and m["exercises"]):
        missing = [s for s, ok in (("Summary", m["summary"]), ("Exercises", m["exercises"])) if not ok]
        out["summary_exercises"] = f"no {' and no '.join(missing)} section"
    return out


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serve(HTML) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with launch(unavailable) as b:
        yield b


def measure_all(server: str, browser) -> dict[str, dict]:
    """Every TOC page measured once (offline: requests to other hosts are aborted)."""
    labels = paper_label_patterns()
    context = browser.new_context(viewport=VIEWPORT)
    context.route(
        "**/*",
        lambda route: route.continue_()
        if route.request.url.startswith((server, "data:", "blob:"))
        else route.abort(),
    )
    out: dict[str, dict] = {}
    try:
        for page_path in PAGES:
            page = context.new_page()
            page.set_default_timeout(30_000)
            try:
                response = page.goto(f"{server}/{page_path}", wait_until="load")
                assert response is not None and response.status == 200, page_path
                out[page_path] = measure_page(page, labels)
            finally:
                page.close()
    finally:
        context.close()
    return out


@pytest.fixture(scope="module")
def measurements(server: str, browser) -> dict[str, dict]:
    return measure_all(server, browser)


def _cases() -> list:
    cases = []
    for page_path in PAGES:
        for limit in LIMITS:
            marks = []
            if known(page_path, limit):
                marks.append(pytest.mark.xfail(strict=True, reason="page not yet restructured"))
            cases.append(pytest.param(page_path, limit, id=f"{page_path}::{limit}", marks=marks))
    return cases


@pytest.mark.parametrize(("page_path", "limit"), _cases())
def test_reader_limits(measurements: dict[str, dict], page_path: str, limit: str) -> None:
    broken = violations(page_path, measurements[page_path])
    assert limit not in broken, f"{page_path}: {broken[limit]}"


def test_known_list_names_real_pages_and_limits() -> None:
    """A stale entry (a page no longer in the TOC, a misspelt limit) would hide nothing."""
    for page_path, limits in KNOWN_NONCOMPLIANT.items():
        assert page_path in PAGES, f"{page_path} is not a TOC page"
        assert set(limits) <= set(LIMITS), set(limits) - set(LIMITS)


_BAD_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<article style="width: 800px">
<h1>A bad chapter</h1>
<p>As in [Alessandrelli et al., n.d.], eq. <em>HamHam_quad_only_J</em> and eq. hebb. A placeholder.</p>
<div class="cell"><div class="cell_input"><pre>{code}</pre></div>
<div class="cell_output"><img src="data:image/png;base64,{png}" width="{w}">
<table style="width: 120px"><tr><th>a header that wraps</th><td>0.1234 0.5678</td></tr></table></div></div>
<div style="height: 30000px"></div>
</article></body></html>
"""


def test_limits_catch_a_bad_page(browser) -> None:
    """Negative control: a synthetic page that breaks every limit is caught on every limit."""
    import base64
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 2), dpi=100)
    ax.plot([0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    code_lines = [f"x{i} = {i}" for i in range(70)]
    code_lines[3] = "assert x1 == 1"
    code_lines[4] = 'glue("x", x1)'
    code_lines[5] = "y = " + " + ".join(["x1"] * 40)
    html = _BAD_PAGE.format(code="\n".join(code_lines), png=base64.b64encode(buf.getvalue()).decode(), w=100)
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.set_content(html)
        m = measure_page(page, paper_label_patterns())
    finally:
        context.close()
    broken = violations("book/chapters/99_bad.html", m)
    assert set(broken) == set(LIMITS), set(LIMITS) - set(broken)


_TABLES_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<article style="width: 800px">
<table style="width: 300px"><tr><th>what</th><th>note</th></tr>
<tr><td>E1</td><td>a sentence of prose long enough to need several lines in this column</td></tr>
<tr><td>E2</td><td>short</td></tr></table>
<table style="width: 90px"><tr><td>every upload here</td><td>x</td></tr></table>
<details><summary>folded output</summary><div class="cell_output">
<table style="width: 90px"><tr><td>0.1 0.2 0.3 0.4</td></tr></table></div></details>
<div class="cell_output"><table><tr><th>alpha</th><td>0.040</td></tr></table></div>
</article></body></html>
"""


def test_wrapped_cells_rule(browser) -> None:
    """Prose cells of a markdown table may wrap; its short cells may not, nor any cell of a table of
    results (also one in a closed fold); cells that fit are not reported."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.set_content(_TABLES_PAGE)
        m = measure_page(page, paper_label_patterns())
        folded_again = page.evaluate("() => !document.querySelector('details').open")
    finally:
        context.close()
    found = sorted((w["text"], w["result"]) for w in m["wrapped"])
    assert found == [("0.1 0.2 0.3 0.4", True), ("every upload here", False)], m["wrapped"]
    assert folded_again, "the measurement must close the folds it opened"
    assert m["nTableCells"] == 11, m["nTableCells"]


def main() -> None:
    """Print the measurements of every TOC page (needs the built book and Chromium)."""
    with serve(HTML) as url, launch(sys.exit) as b:
        res = measure_all(url, b)
    print("| page | screens | visible code lines | longest visible cell | limits broken |")
    print("| --- | ---: | ---: | ---: | --- |")
    for page_path, m in res.items():
        broken = violations(page_path, m)
        print(f"| {page_path} | {m['screens']:.1f} | {m['codeLines']} | {m['maxCellLines']} | "
              f"{', '.join(broken) or '-'} |")
    print(json.dumps({p: sorted(violations(p, m)) for p, m in res.items()}))
    for p, m in res.items():
        for limit, why in violations(p, m).items():
            print(f"{p} {limit}: {why}", file=sys.stderr)


if __name__ == "__main__":
    main()
