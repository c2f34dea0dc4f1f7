"""Open a chapter in a real JupyterLab in headless Chromium and check what a reader sees.

Skipped unless ``FEDLAM_JUPYTERLAB=1`` (it starts JupyterLab twice and takes about a minute);
``.ci/run`` sets it in its own stage. The notebook (``book/chapters/05_spiked.ipynb`` by default;
``FEDLAM_JUPYTERLAB_NOTEBOOKS="a.ipynb b.ipynb"`` to choose) is copied twice into a temporary
directory: once processed by ``scripts/notebook_headers.py`` (as the lead applies it to every
notebook) and once as committed before that script existed ("raw", the negative control).

JupyterLab runs on 127.0.0.1 on a free port with a random token, with its own temporary
configuration, runtime, settings and workspace directories (nothing of the user's is read or
written), and with the notebook setting ``windowingMode: none`` so that every cell is rendered.
It is started twice: with jupyterlab-myst (as installed by ``requirements.txt``) and with
jupyterlab-myst disabled (plain JupyterLab, as a front end without the extension renders).

Checked on the processed copy:

* no math error: neither KaTeX's (jupyterlab-myst marks a formula that fails with its message in
  a ``title`` or a ``pre``) nor MathJax's (``mjx-merror``, or the red ``mjx-mtext`` in which
  MathJax's *noundefined* package draws an undefined macro); and math was typeset at all;
* with jupyterlab-myst: every ``{prf:...}`` directive of the source is rendered as a proof
  admonition (``.myst-proof``), not as a code block, and every ``{eq}`` reference whose label
  is defined in the notebook is rendered as a link ``(n)`` to that equation;
* opening the notebook and starting its kernel does not mark it modified;
* no request leaves 127.0.0.1.

The same detectors run on the raw copy and must find the undefined macros and the modified
mark, so the checks above can fail.

Finally (with jupyterlab-myst) a reader's Run All: a third copy of a chapter
(``book/chapters/10_errata.ipynb``, ``FEDLAM_JUPYTERLAB_RUNALL`` to choose), processed and
executed by ``scripts/execute_notebooks.py`` as the committed notebooks are, is run in JupyterLab
with "Run All" and saved (clearing and completion are read from the notebook model, the code
cells' execution counts and states, so folded cells, which show no prompt, count too); with
static widgets and one BLAS thread (set by ``conftest.py`` and inherited by JupyterLab and its
kernel) the saved file must be byte-identical to the executed one, so that a reader who runs the
chapter this way leaves nothing to restore, with one exception that is JupyterLab's design: running
a cell unfolds its output, so the ``hide-output`` cells' ``jupyter.outputs_hidden`` is dropped
(exactly that key, of exactly those cells; see :func:`_as_saved_after_running`).

When the test ends JupyterLab is shut down through its API, then terminated; the test fails if
any of its processes (kernels included) is still alive.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENABLED = os.environ.get("FEDLAM_JUPYTERLAB", "") == "1"
NOTEBOOKS = os.environ.get("FEDLAM_JUPYTERLAB_NOTEBOOKS", "book/chapters/05_spiked.ipynb").split()
RUNALL = os.environ.get("FEDLAM_JUPYTERLAB_RUNALL", "book/chapters/10_errata.ipynb")
START_TIMEOUT_S = 90
PAGE_TIMEOUT_MS = 90_000
LOCAL_HOSTS = {"127.0.0.1", "localhost"}

pytestmark = pytest.mark.skipif(
    not ENABLED, reason="JupyterLab browser check: set FEDLAM_JUPYTERLAB=1 (CI does)"
)

sys.path.insert(0, str(ROOT / "scripts"))
import notebook_headers  # noqa: E402
from _chromium import launch  # noqa: E402  (tests/browser is on sys.path)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stem(path: str) -> str:
    return Path(path).stem


@pytest.fixture(scope="module")
def notebook_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """processed-<stem>.ipynb and raw-<stem>.ipynb for every notebook under test."""
    root = tmp_path_factory.mktemp("jlab-root")
    config = notebook_headers.load_config()
    for rel in NOTEBOOKS:
        src = ROOT / rel
        if not src.is_file():
            pytest.fail(f"FEDLAM_JUPYTERLAB_NOTEBOOKS names a missing notebook: {rel}")
        shutil.copy(src, root / f"raw-{_stem(rel)}.ipynb")
        notebook_headers.strip_headers(root / f"raw-{_stem(rel)}.ipynb")   # the committed ones have them
        shutil.copy(src, root / f"processed-{_stem(rel)}.ipynb")
        notebook_headers.process(root / f"processed-{_stem(rel)}.ipynb", config=config)
    runall = root / f"runall-{_stem(RUNALL)}.ipynb"
    shutil.copy(ROOT / RUNALL, runall)
    notebook_headers.process(runall, config=config)
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "execute_notebooks.py"), str(runall)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, f"execute_notebooks.py {RUNALL}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return root


class JupyterLab:
    def __init__(self, root: Path, work: Path, myst: bool) -> None:
        self.root = root
        self.variant = "myst" if myst else "plain"
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = work / "config"
        (cfg / "labconfig").mkdir(parents=True)
        if not myst:
            (cfg / "labconfig" / "page_config.json").write_text(
                json.dumps({"disabledExtensions": {"jupyterlab-myst": True}})
            )
        settings = work / "settings" / "@jupyterlab" / "notebook-extension"
        settings.mkdir(parents=True)
        # render every cell (the default windowing renders only what is on screen)
        (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(cfg),
            "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
            "IPYTHONDIR": str(work / "ipython"),
            "JUPYTER_PLATFORM_DIRS": "1",
        }
        cmd = [
            sys.executable, "-m", "jupyter", "lab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={root}",
            f"--LabApp.user_settings_dir={work / 'settings'}",
            f"--LabApp.workspaces_dir={work / 'workspaces'}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: Run All, Save
        ]  # fmt: skip
        if os.geteuid() == 0:  # CI runs as root
            cmd.append("--allow-root")
        self.log_path = work / "jupyterlab.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.descendants: dict[int, str] = {}
        self._wait_ready()

    def api(self, path: str, method: str = "GET") -> Any:
        req = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def _wait_ready(self) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < START_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({self.proc.returncode}):\n{self.log()}")
            try:
                self.api("/api/status")
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        raise RuntimeError(f"JupyterLab did not answer within {START_TIMEOUT_S} s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()[-4000:]

    def remember_descendants(self) -> None:
        import psutil

        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.descendants[child.pid] = " ".join(child.cmdline()[:4])
        except psutil.Error:
            pass

    def stop(self) -> list[str]:
        """Shut down (kernels first), then terminate; return what was still alive."""
        import psutil

        self.remember_descendants()
        try:
            self.api("/api/shutdown", method="POST")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log.close()
        survivors = []
        deadline = time.monotonic() + 10
        for pid, cmd in self.descendants.items():
            try:
                p = psutil.Process(pid)
                while p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    if time.monotonic() > deadline:
                        survivors.append(f"{pid} {cmd}")
                        p.kill()
                        break
                    time.sleep(0.2)
            except psutil.NoSuchProcess:
                pass
        return survivors


@pytest.fixture(scope="module", params=["myst", "plain"])
def lab(
    request: pytest.FixtureRequest, notebook_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JupyterLab]:
    work = tmp_path_factory.mktemp(f"jlab-{request.param}")
    server = JupyterLab(notebook_dir, work, myst=request.param == "myst")
    try:
        yield server
    finally:
        survivors = server.stop()
        assert not survivors, f"processes outlived JupyterLab: {survivors}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with launch(pytest.fail) as b:
        yield b


# JavaScript evaluated once the notebook is rendered and its kernel is idle.
_INSPECT = r"""
() => {
  const md = Array.from(document.querySelectorAll('.jp-Notebook .jp-MarkdownCell'));
  const mathErr = /KaTeX parse error|Undefined control sequence|at position \d+:/;
  const katexErrors = [];
  for (const cell of md) {
    for (const el of cell.querySelectorAll('[title], pre, .katex-error')) {
      const own = el.tagName === 'PRE' || el.classList.contains('katex-error');
      const t = (el.getAttribute('title') || '') + ' ' + (own ? el.textContent : '');
      if (mathErr.test(t)) katexErrors.push(t.trim().slice(0, 120));
    }
  }
  const mjxErrors = Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]'))
      .map(e => e.getAttribute('data-mjx-error') || e.textContent);
  const redMacros = Array.from(document.querySelectorAll('mjx-mtext'))
      .filter(e => /color:\s*red/.test(e.getAttribute('style') || '')).length;
  const links = Array.from(document.querySelectorAll('.jp-MarkdownCell a[href^="#"]'))
      .map(a => [a.getAttribute('href').slice(1), a.textContent.trim()]);
  const rendered = md.map(c => c.querySelector('.jp-RenderedMarkdown, .jp-RenderedHTMLCommon, .myst'));
  return {
    nMarkdown: md.length,
    nRendered: rendered.filter(Boolean).length,
    nKatex: document.querySelectorAll('.jp-MarkdownCell .katex').length,
    nMathJax: document.querySelectorAll('.jp-MarkdownCell mjx-container').length,
    katexErrors: katexErrors.slice(0, 8),
    nKatexErrors: katexErrors.length,
    mjxErrors: mjxErrors.slice(0, 8),
    redMacros: redMacros,
    nProofs: document.querySelectorAll('.jp-MarkdownCell [class~="myst-proof"]').length,
    links: links,
    anchors: Array.from(document.querySelectorAll('.jp-MarkdownCell [id]')).map(e => e.id),
    dirty: document.querySelectorAll('.lm-TabBar-tab.jp-mod-dirty').length,
    markdownText: md.map(c => c.innerText).join('\n'),
  };
}
"""


def _settled(page: Any, n_markdown: int) -> None:
    """Wait until every markdown cell is rendered and the math count stops changing."""
    page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
    page.wait_for_function(
        "n => document.querySelectorAll('.jp-Notebook .jp-MarkdownCell').length >= n", arg=n_markdown
    )
    last, stable_since = None, time.monotonic()
    t0 = time.monotonic()
    while time.monotonic() - t0 < PAGE_TIMEOUT_MS / 1000:
        now = page.evaluate(
            "() => [document.querySelectorAll('.katex, mjx-container, [class~=\"myst-proof\"]').length,"
            " document.querySelectorAll('.lm-TabBar-tab.jp-mod-dirty').length]"
        )
        if now != last:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since > 3.0:
            return
        time.sleep(0.25)
    raise AssertionError(f"the notebook did not settle within {PAGE_TIMEOUT_MS} ms (last {last})")


_CACHE: dict[tuple[str, str], dict[str, Any]] = {}


def inspect(lab: JupyterLab, browser: Any, name: str) -> dict[str, Any]:
    key = (lab.url, name)
    if key in _CACHE:
        return _CACHE[key]
    import nbformat

    nb = nbformat.read(lab.root / name, as_version=4)
    n_markdown = sum(c.cell_type == "markdown" for c in nb.cells)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    external: list[str] = []

    def on_route(route: Any) -> None:
        url = route.request.url
        if url.startswith(("data:", "blob:")) or urlparse(url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            external.append(url)
            route.abort()

    context.route("**/*", on_route)
    page = context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    try:
        page.goto(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}", wait_until="load")
        _settled(page, n_markdown)
        info = page.evaluate(_INSPECT)
        lab.remember_descendants()  # the kernel is running now
    finally:
        page.close()
        context.close()
    info["external"] = external
    info["source"] = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    _CACHE[key] = info
    return info


_PRF_DIRECTIVE = re.compile(r"^\s*(?:`{3,}|:{3,})\{prf:([a-z]+)\}", re.M)
_EQ_REF = re.compile(r"\{eq\}`(?:[^`<]*<)?([A-Za-z0-9_:-]+)>?`")
_MATH_LABEL = re.compile(r"^\s*:label:\s*(\S+)", re.M)
_MACRO_NAMES = sorted(notebook_headers.config_macros(notebook_headers.load_config()), key=len, reverse=True)
_MACRO_USE = re.compile(r"\\(" + "|".join(_MACRO_NAMES) + r")(?![A-Za-z])")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=_stem)
def test_processed_notebook_reads_properly(lab: JupyterLab, browser: Any, nb: str) -> None:
    info = inspect(lab, browser, f"processed-{_stem(nb)}.ipynb")
    problems = []
    if info["nRendered"] < info["nMarkdown"]:
        problems.append(f"only {info['nRendered']} of {info['nMarkdown']} markdown cells rendered")
    n_math = info["nKatex"] if lab.variant == "myst" else info["nMathJax"]
    if "$" in info["source"] and n_math == 0:
        problems.append("the notebook has math but none was typeset")
    if info["nKatexErrors"]:
        problems.append(f"{info['nKatexErrors']} KaTeX errors, e.g. {info['katexErrors'][:3]}")
    if info["mjxErrors"]:
        problems.append(f"MathJax errors: {info['mjxErrors'][:3]}")
    if info["redMacros"]:
        problems.append(f"{info['redMacros']} undefined macros drawn in red by MathJax")
    if info["dirty"]:
        problems.append("opening the notebook marked it modified (metadata JupyterLab rewrites)")
    if info["external"]:
        problems.append(f"requests to non-local hosts: {info['external'][:5]}")
    if lab.variant == "myst":
        n_prf = len(_PRF_DIRECTIVE.findall(info["source"]))
        if info["nProofs"] < n_prf:
            problems.append(f"{n_prf} prf directives in the source, {info['nProofs']} rendered as admonitions")
        if "{prf:" in info["markdownText"]:
            problems.append("literal '{prf:' in the rendered text (a directive shown as code)")
        labels = set(_MATH_LABEL.findall(info["source"]))
        refs = [r for r in _EQ_REF.findall(info["source"]) if r in labels]
        links = {(href, text) for href, text in info["links"]}
        for ref in sorted(set(refs)):
            if not any(h == ref and re.fullmatch(r"\(\d+\)", t) for h, t in links):
                problems.append(f"{{eq}}`{ref}` is not rendered as a numbered link")
            if ref not in info["anchors"]:
                problems.append(f"equation {ref} has no anchor")
        if "{eq}`" in info["markdownText"]:
            problems.append("literal {eq} role in the rendered text")
    assert not problems, f"{nb} in JupyterLab ({lab.variant}):\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=_stem)
def test_detectors_find_problems_of_the_raw_notebook(lab: JupyterLab, browser: Any, nb: str) -> None:
    """Negative control: the notebook without its header cells (as before the script ran) fails the checks."""
    info = inspect(lab, browser, f"raw-{_stem(nb)}.ipynb")
    uses_macros = bool(_MACRO_USE.search(info["source"]))
    raw_meta = json.loads((ROOT / nb).read_text())["metadata"]
    if uses_macros:
        n_err = info["nKatexErrors"] if lab.variant == "myst" else info["redMacros"]
        assert n_err > 0, f"{nb}: macros used without definitions, yet no math error was detected"
    if raw_meta.get("kernelspec") != notebook_headers.kernel_metadata()["kernelspec"]:
        assert info["dirty"], f"{nb}: stale kernelspec metadata, yet the tab is not marked modified"
    if not uses_macros and raw_meta.get("kernelspec") == notebook_headers.kernel_metadata()["kernelspec"]:
        pytest.skip(f"{nb}: nothing for the negative control to find")


# The open notebook's model (JupyterLab 4's NotebookPanel.content.model): how many code cells,
# how many carry an execution count, how many are still running, how many have outputs.
# Read from the model because a folded cell (jupyter.source_hidden) shows no input prompt.
_RUNALL_STATE = r"""
name => {
  let panel = null;
  for (const w of window.jupyterapp.shell.widgets('main')) {
    if (w.context && w.context.path === name && w.content && w.content.model) panel = w;
  }
  if (!panel) return {nCode: -1, counted: -1, running: -1, withOutput: -1};
  const code = Array.from(panel.content.model.cells).filter(c => c.type === 'code');
  return {
    nCode: code.length,
    counted: code.filter(c => Number.isInteger(c.executionCount)).length,
    running: code.filter(c => c.executionState === 'running').length,
    withOutput: code.filter(c => c.outputs.length > 0).length,
  };
}
"""
_RUNALL_CURRENT = r"""
name => {
  const w = window.jupyterapp.shell.currentWidget;
  return !!(w && w.context && w.context.path === name);
}
"""


def _dump(nb: Any) -> bytes:
    """A notebook as nbformat (and JupyterLab's server) writes it: the committed files' format."""
    return (json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _as_saved_after_running(executed: bytes) -> tuple[bytes, list[str]]:
    """The executed notebook as JupyterLab 4 saves it after running every cell, and the ids of the
    cells whose folded output it opened.

    Running a cell unfolds its output (``CodeCell.execute`` sets ``outputHidden = false``, which
    deletes ``jupyter.outputs_hidden`` from the cell's metadata; jupyterlab/jupyterlab#4580), so the
    ``hide-output`` cells lose that one key. Everything else must stay byte for byte. Folded sources
    (``jupyter.source_hidden``) are kept.
    """
    nb = json.loads(executed)
    assert _dump(nb) == executed, "the executed notebook is not in nbformat's canonical JSON"
    unfolded = []
    for cell in nb["cells"]:
        meta = cell["metadata"].get("jupyter")
        if cell["cell_type"] == "code" and meta and meta.pop("outputs_hidden", None) is not None:
            unfolded.append(cell.get("id", "?"))
            if not meta:
                del cell["metadata"]["jupyter"]
    return _dump(nb), unfolded


def test_static_run_all_leaves_the_committed_notebook_unchanged(lab: JupyterLab, browser: Any) -> None:
    if lab.variant != "myst":
        pytest.skip("Run All is checked once, with the front end readers get")
    assert os.environ.get("FEDLAM_WIDGETS") == "static", "conftest.py sets FEDLAM_WIDGETS=static"
    name = f"runall-{_stem(RUNALL)}.ipynb"
    path = lab.root / name
    before = path.read_bytes()
    n_code = sum(c["cell_type"] == "code" for c in json.loads(before)["cells"])
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    try:
        page.goto(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}", wait_until="load")
        nb = json.loads(before)
        _settled(page, sum(c["cell_type"] == "markdown" for c in nb["cells"]))
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands")
        page.click(".jp-Notebook .jp-Cell .jp-InputPrompt >> nth=0")  # make the notebook current
        assert page.evaluate(_RUNALL_CURRENT, name), f"{name} is not JupyterLab's current notebook"
        # Read the notebook model, not the DOM: a folded cell (jupyter.source_hidden) has no prompt.
        # Clear: every code cell has no execution count and no output. Run All: every code cell
        # has a count and is idle again.
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
        page.wait_for_function(
            f"name => {{ const s = ({_RUNALL_STATE})(name);"
            " return s.nCode > 0 && s.counted === 0 && s.withOutput === 0; }",
            arg=name,
        )
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        try:
            page.wait_for_function(
                f"([name, n]) => {{ const s = ({_RUNALL_STATE})(name);"
                " return s.nCode === n && s.counted === n && s.running === 0; }",
                arg=[name, n_code],
                timeout=300_000,
            )
        except Exception:
            shot = lab.root.parent / f"runall-failure-{lab.variant}.png"
            page.screenshot(path=str(shot))
            state = page.evaluate(f"name => ({_RUNALL_STATE})(name)", name)
            raise AssertionError(
                f"Run All did not finish within 300 s (model: {state}); screenshot {shot}"
            ) from None
        page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_function("() => !document.querySelector('.lm-TabBar-tab.jp-mod-dirty')")
        lab.remember_descendants()
    finally:
        page.close()
        context.close()
    after = path.read_bytes()
    expected, unfolded = _as_saved_after_running(before)
    if after not in (before, expected):
        import difflib

        diff = difflib.unified_diff(
            expected.decode().splitlines(), after.decode().splitlines(), "expected", "after Run All", lineterm=""
        )
        lines = [ln for ln in diff if '"image/png"' not in ln][:60]
        raise AssertionError(
            f"{RUNALL}: Run All in JupyterLab changed the saved file (beyond unfolding the outputs of "
            f"the {len(unfolded)} cells with jupyter.outputs_hidden):\n" + "\n".join(lines)
        )
