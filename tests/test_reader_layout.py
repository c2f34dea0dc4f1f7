"""scripts/reader_layout.py: the code a reader sees, from the cell tags, without a build.

Every notebook whose page the reader test (tests/browser/test_reader.py) does not list as
breaking a code-layout limit must meet the limits here too, so a visible assert or a long cell
fails the README's test command before the book is built; and the script must catch each kind
of violation (negative controls on a synthetic notebook).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "browser"))
import reader_layout  # noqa: E402
from test_reader import _LAYOUT, KNOWN_NONCOMPLIANT  # noqa: E402

NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if "_build" not in p.parts)


def _page(nb: Path) -> str:
    return str(nb.relative_to(ROOT).with_suffix(".html"))


def _within(r: dict[str, int]) -> bool:
    return r["code_lines"] <= 60 and not (r["cells_over_15"] or r["checks"] or r["lines_over_88"])


@pytest.mark.parametrize("nb", [p for p in NOTEBOOKS
                                if not set(_LAYOUT) & set(KNOWN_NONCOMPLIANT.get(_page(p), ()))],
                         ids=lambda p: p.name)
def test_restructured_pages_meet_the_layout_limits(nb: Path) -> None:
    r = reader_layout.report(nb)
    assert _within(r), f"{nb.name}: {r}"


def _notebook(tmp_path: Path, cells: list) -> Path:
    nb = nbformat.v4.new_notebook(cells=cells)
    path = tmp_path / "t.ipynb"
    path.write_text(json.dumps(nb))
    return path


@pytest.mark.parametrize(("source", "key"), [
    ("x = 1\n" * 16, "cells_over_15"),
    ("assert x == 1", "checks"),
    ("glue('a', 1, display=False)", "checks"),
    ("y = " + "1 + " * 30 + "1", "lines_over_88"),
])
def test_each_violation_is_caught(tmp_path: Path, source: str, key: str) -> None:
    bad = _notebook(tmp_path, [nbformat.v4.new_code_cell(source)])
    assert reader_layout.report(bad)[key] >= 1
    hidden = nbformat.v4.new_code_cell(source, metadata={"tags": ["remove-input"]})
    assert _within(reader_layout.report(_notebook(tmp_path, [hidden])))


def test_folded_solutions_do_not_count_towards_the_page(tmp_path: Path) -> None:
    def code() -> nbformat.NotebookNode:
        return nbformat.v4.new_code_cell("x = 1\n" * 12)

    md = nbformat.v4.new_markdown_cell
    page = [code() for _ in range(5)]
    page += [md("```{solution-start} ex\n```"), code(), md("```{solution-end}\n```")]
    assert reader_layout.report(_notebook(tmp_path, page))["code_lines"] == 60
    assert reader_layout.report(_notebook(tmp_path, [*page, code()]))["code_lines"] == 72


def test_the_chapter_3_of_before_the_layout_pass_breaks_every_code_limit() -> None:
    """Negative control on a real page: chapter 3 as it was before issue 17 (one page; its
    sources kept, outputs stripped, in ``tests/data``) breaks each code-layout limit."""
    r = reader_layout.report(ROOT / "tests" / "data" / "ch03_before_issue17.json")
    assert not _within(r)
    assert r["code_lines"] > 60 and r["cells_over_15"] and r["checks"] and r["lines_over_88"], r


def test_a_hide_cell_fold_counts_as_visible(tmp_path: Path) -> None:
    """Only the tags DESIGN.md section 10 names hide code; ``hide-cell`` shows its fold."""
    cell = nbformat.v4.new_code_cell("x = 1\n" * 16, metadata={"tags": ["hide-cell"]})
    assert reader_layout.report(_notebook(tmp_path, [cell]))["cells_over_15"] == 1


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_jupyterlab_folds_what_the_book_hides(nb: Path) -> None:
    """Issue 17 item 1: in JupyterLab the same cells are collapsed as in the book (the errata
    included, since the Run All check reads the notebook model instead of the input prompts)."""
    assert not reader_layout.unfolded_in_jupyterlab(nb), reader_layout.unfolded_in_jupyterlab(nb)[:5]


@pytest.mark.parametrize(("tags", "jupyter", "missing"), [
    (["remove-input"], {}, "source_hidden"),
    (["hide-input"], {"outputs_hidden": True}, "source_hidden"),
    (["remove-cell"], {"source_hidden": False}, "source_hidden"),
    (["hide-input", "hide-output"], {"source_hidden": True}, "outputs_hidden"),
    (["hide-output"], {}, "outputs_hidden"),
])
def test_an_unfolded_hidden_cell_is_caught(tmp_path: Path, tags: list, jupyter: dict, missing: str) -> None:
    meta = {"tags": tags, **({"jupyter": jupyter} if jupyter else {})}
    cell = nbformat.v4.new_code_cell("x = 1", metadata=meta)
    found = reader_layout.unfolded_in_jupyterlab(_notebook(tmp_path, [cell]))
    assert len(found) == 1 and missing in found[0], found
    assert reader_layout.report(_notebook(tmp_path, [cell]))["unfolded_in_lab"] == 1
    folded = {"source_hidden": True} if set(tags) - {"hide-output"} else {}
    if "hide-output" in tags:
        folded["outputs_hidden"] = True
    ok = nbformat.v4.new_code_cell("x = 1", metadata={"tags": tags, "jupyter": folded})
    assert not reader_layout.unfolded_in_jupyterlab(_notebook(tmp_path, [ok]))


def test_the_generated_install_cell_is_left_as_the_header_script_writes_it(tmp_path: Path) -> None:
    from notebook_headers import INSTALL_CELL_ID

    cell = nbformat.v4.new_code_cell("pass", metadata={"tags": ["remove-cell"]})
    cell["id"] = INSTALL_CELL_ID
    assert not reader_layout.unfolded_in_jupyterlab(_notebook(tmp_path, [cell]))
