"""scripts/notebook_headers.py: the header cells a reader in Jupyter needs (see its docstring).

Runs on copies of the book's notebooks in a temporary directory; the repository's notebooks are
never touched. The JupyterLab rendering itself is checked in tests/browser/test_jupyterlab.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import notebook_headers as nh  # noqa: E402

CONFIG = nh.load_config()
MACROS = nh.config_macros(CONFIG)
PIP_URL = nh.repository_pip_url(CONFIG)
NOTEBOOKS = nh.book_notebooks()


@pytest.fixture
def copies(tmp_path: Path) -> list[Path]:
    """Copies of the book's notebooks without their header cells (the committed ones have them)."""
    out = []
    for p in NOTEBOOKS:
        dst = tmp_path / p.relative_to(ROOT)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dst)
        nh.strip_headers(dst)
        out.append(dst)
    return out


def test_committed_notebooks_are_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    assert nh.main(["--check", *map(str, NOTEBOOKS)]) == 0, capsys.readouterr()


def test_book_has_notebooks() -> None:
    assert len(NOTEBOOKS) >= 10, NOTEBOOKS


def test_macros_come_from_config() -> None:
    raw = CONFIG["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]
    assert set(MACROS) == set(raw) and len(MACROS) >= 5
    assert MACROS["J"] == (r"\boldsymbol{J}", 0)


def test_every_notebook_gets_headers_and_keeps_its_cells(copies: list[Path]) -> None:
    for path in copies:
        before = nbformat.read(path, as_version=4)
        assert nh.process(path, config=CONFIG) is True, f"{path.name}: nothing to do on the committed notebook?"
        after = nbformat.read(path, as_version=4)
        nbformat.validate(after)
        ids = [c.id for c in after.cells[:3]]
        assert ids == list(nh.HEADER_IDS), (path.name, ids)
        assert [c.cell_type for c in after.cells[:3]] == ["markdown", "markdown", "code"]
        for cell in after.cells[:3]:
            assert nh.HIDE_TAG in cell.metadata["tags"], (path.name, cell.id)
        assert after.cells[2].outputs == []
        # everything else is untouched, in order
        old = [c for c in before.cells if c.get("id") not in nh.HEADER_IDS]
        assert [dict(c) for c in after.cells[3:]] == [dict(c) for c in old], path.name
        assert after.metadata["kernelspec"] == {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        }
        li = after.metadata["language_info"]
        assert li["name"] == "python" and li["pygments_lexer"] == "ipython3"
        assert li["version"] == ".".join(map(str, sys.version_info[:3]))


def test_idempotent_and_check_mode(copies: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(p) for p in copies]
    # before: --check fails and changes nothing
    digests = [p.read_bytes() for p in copies]
    assert nh.main(["--check", *args]) == 1
    assert [p.read_bytes() for p in copies] == digests
    # apply, then a second run and --check change nothing (same bytes, same mtime)
    assert nh.main(args) == 0
    once = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in copies}
    capsys.readouterr()
    assert nh.main(args) == 0
    assert capsys.readouterr().out.count("up to date") == len(copies)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in copies} == once
    assert nh.main(["--check", *args]) == 0


def test_command_line(copies: list[Path]) -> None:
    script = [sys.executable, str(ROOT / "scripts" / "notebook_headers.py")]
    r = subprocess.run([*script, "--check", str(copies[0])], capture_output=True, text=True)
    assert r.returncode == 1 and "out of date" in r.stderr, r.stdout + r.stderr
    r = subprocess.run([*script, str(copies[0].with_suffix(".txt"))], capture_output=True, text=True)
    assert r.returncode == 2 and "not a notebook file" in r.stderr


def test_written_like_jupyter(copies: list[Path]) -> None:
    """Same JSON layout as nbformat/JupyterLab (indent 1, sorted keys, trailing newline)."""
    path = copies[0]
    nh.process(path, config=CONFIG)
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def test_header_cells_are_updated_moved_and_deduplicated(tmp_path: Path) -> None:
    path = tmp_path / "nb.ipynb"
    shutil.copy(NOTEBOOKS[0], path)
    nh.process(path, config=CONFIG)
    nb = nbformat.read(path, as_version=4)
    # a stale macro cell, moved to the end; the install cell lost its tag
    macro, tex, install = nb.cells[:3]
    macro.source = "stale"
    install.metadata["tags"] = ["other"]
    nb.cells = [tex, install, *nb.cells[3:], macro]
    nbformat.write(nb, path)
    assert nh.process(path, config=CONFIG) is True
    nb2 = nbformat.read(path, as_version=4)
    assert [c.id for c in nb2.cells[:3]] == list(nh.HEADER_IDS)
    assert sum(c.id in nh.HEADER_IDS for c in nb2.cells) == 3
    assert nb2.cells[0].source == nh.macro_cell_source(MACROS)
    assert nb2.cells[2].metadata["tags"] == ["other", nh.HIDE_TAG]
    # a changed configuration rewrites the cells
    cfg = json.loads(json.dumps(CONFIG))
    cfg["sphinx"]["config"]["mathjax3_config"]["tex"]["macros"]["newmacro"] = [r"\mathrm{#1}", 1]
    assert nh.process(path, config=cfg) is True
    nb3 = nbformat.read(path, as_version=4)
    assert r"'\newmacro': '\mathrm{#1}'" in nb3.cells[0].source
    assert r"\def\newmacro#1{\mathrm{#1}}" in nb3.cells[1].source
    # the execution count of the install cell survives (a re-executed notebook stays stable)
    nb3.cells[2].execution_count = 1
    nbformat.write(nb3, path)
    assert nh.process(path, config=cfg) is False


def test_macro_cells_parse_back_to_the_config() -> None:
    src = nh.macro_cell_source(MACROS)
    assert src.startswith("```yaml\nmath:\n")  # jupyterlab-myst: the cell's first node
    block = src.split("```yaml\n", 1)[1].split("\n```", 1)[0]
    assert yaml.safe_load(block) == {"math": {"\\" + k: body for k, (body, _) in MACROS.items()}}
    tex = nh.tex_cell_source(MACROS)
    line = tex.splitlines()[0]
    assert line.startswith("$") and line.endswith("$") and line.count("$") == 2
    for name, (body, _) in MACROS.items():
        assert f"\\def\\{name}{{{body}}}" in line
    # the note is an HTML comment (invisible in every front end)
    for s in (src, tex):
        assert s.rstrip().endswith("-->") and "<!--" in s


def test_yaml_quoting_survives_quotes_and_backslashes() -> None:
    macros = {"q": ("\\text{it's}", 0), "b": ("\\\\", 0)}
    block = nh.macro_cell_source(macros).split("```yaml\n", 1)[1].split("\n```", 1)[0]
    assert yaml.safe_load(block)["math"] == {"\\q": "\\text{it's}", "\\b": "\\\\"}


@pytest.mark.parametrize(
    ("macros", "match"),
    [
        ({"bad name": "x"}, "letters only"),
        ({"\\J": "x"}, "letters only"),
        ({"f": ["x", 1, "default"]}, "optional-argument"),
        ({"f": ["x", 10]}, "n_args"),
        ({"f": 3}, "expected a string"),
        ({"f": "a\nb"}, "one line"),
        ({}, "non-empty"),
    ],
)
def test_bad_macro_config_is_refused(macros: object, match: str) -> None:
    cfg = {"sphinx": {"config": {"mathjax3_config": {"tex": {"macros": macros}}}}}
    with pytest.raises(ValueError, match=match):
        nh.config_macros(cfg)


def test_missing_macro_config_is_refused() -> None:
    with pytest.raises(ValueError, match=r"mathjax3_config\.tex\.macros"):
        nh.config_macros({"sphinx": {}})


@pytest.mark.parametrize(
    ("repo", "match"),
    [
        ({"url": "http://x"}, "https URL"),
        ({"url": 3}, "https URL"),
        ({"url": "https://x", "branch": "a b"}, "plain ref"),
    ],
)
def test_bad_repository_is_refused(repo: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        nh.repository_pip_url({"repository": repo})


# the mechanism with a repository URL set (the book's config may leave it empty)
SET_URL = "git+https://example.org/owner/fedlam@main"


@pytest.mark.parametrize("repo", [{}, {"url": ""}, {"url": "  "}, {"url": None}])
def test_empty_repository_means_no_pip_url(repo: dict) -> None:
    assert nh.repository_pip_url({"repository": repo}) is None


def test_pip_url_comes_from_config() -> None:
    repo = CONFIG["repository"]
    if repo.get("url"):
        assert PIP_URL == f"git+{repo['url']}@{repo['branch']}"
    else:
        assert PIP_URL is None
    assert nh.repository_pip_url({"repository": {"url": "https://example.org/owner/fedlam"}}) == SET_URL
    assert f'"{SET_URL}"' in nh.install_cell_source(SET_URL)
    with pytest.raises(ValueError, match="quotes"):
        nh.install_cell_source('git+https://x"; import os')


def _run_install_cell(
    monkeypatch: pytest.MonkeyPatch, fedlam_importable: bool, pip_url: str | None = SET_URL
) -> tuple[str, list]:
    import fedlam

    calls: list = []

    def fake_run(cmd: list[str], check: bool = False, **kw: object) -> subprocess.CompletedProcess:
        calls.append((cmd, check))
        monkeypatch.setitem(sys.modules, "fedlam", fedlam)  # "installed" now
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    if not fedlam_importable:
        monkeypatch.setitem(sys.modules, "fedlam", None)  # import fedlam -> ImportError
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        exec(compile(nh.install_cell_source(pip_url), "<install cell>", "exec"), {})
    return out.getvalue(), calls


@pytest.mark.parametrize("pip_url", [SET_URL, None])
def test_install_cell_is_silent_when_fedlam_is_installed(
    monkeypatch: pytest.MonkeyPatch, pip_url: str | None
) -> None:
    out, calls = _run_install_cell(monkeypatch, fedlam_importable=True, pip_url=pip_url)
    assert out == "" and calls == []


def test_install_cell_installs_when_fedlam_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    _, calls = _run_install_cell(monkeypatch, fedlam_importable=False)
    assert calls == [([sys.executable, "-m", "pip", "install", "--quiet", SET_URL], True)]


def test_install_cell_without_repository_explains(monkeypatch: pytest.MonkeyPatch) -> None:
    """No repository URL: nothing is installed from nowhere; the error says what to do."""
    with pytest.raises(ImportError, match=r"pip install -r requirements.txt -e \."):
        _run_install_cell(monkeypatch, fedlam_importable=False, pip_url=None)
    assert "git+" not in nh.install_cell_source(None)


def test_myst_nb_drops_the_header_cells(copies: list[Path]) -> None:
    """The HTML book never sees the header cells (MyST-NB skips cells tagged remove-cell)."""
    from markdown_it.renderer import RendererHTML
    from myst_nb.core.nb_to_tokens import notebook_to_tokens
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    path = copies[0]
    nh.process(path, config=CONFIG)
    nb = nbformat.read(path, as_version=4)
    parser = create_md_parser(MdParserConfig(enable_extensions={"dollarmath", "colon_fence"}), RendererHTML)
    tokens = notebook_to_tokens(nb, parser, {}, logging.getLogger("myst-nb-test"))
    indices = {t.meta["index"] for t in tokens if t.meta and "index" in t.meta}
    assert indices and min(indices) == 3, sorted(indices)[:5]


def test_nbval_passes_on_a_processed_notebook(tmp_path: Path) -> None:
    """nbval re-executes the header cells: the install cell prints nothing (and nbval would see it)."""
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("import fedlam\nprint(fedlam.__name__)")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="fedlam\n")]
    code.execution_count = 1
    nb.cells = [nbformat.v4.new_markdown_cell(r"The operator $\J$ and $\E[\xib]$."), code]
    good, bad = tmp_path / "good.ipynb", tmp_path / "bad.ipynb"
    nbformat.write(nb, good)
    nh.process(good, config=CONFIG)
    # the negative control: a committed output in the install cell
    nb_bad = nbformat.read(good, as_version=4)
    assert nb_bad.cells[2].id == nh.INSTALL_CELL_ID
    nb_bad.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="installing\n")]
    nbformat.write(nb_bad, bad)
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\n")
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ini), "-p", "no:cacheprovider", "-rA", "--nbval",
         "--nbval-current-env", "--nbval-sanitize-with", str(ROOT / "nbval_sanitize.cfg"),
         str(good), str(bad)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    summary = r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 failed, 3 passed" in r.stdout, summary
    assert "FAILED bad.ipynb::Cell 0" in r.stdout, summary  # the install cell, nothing else
