"""What a reader sees of each notebook's code, from its cell tags (no build needed).

Usage::

    python scripts/reader_layout.py book/chapters/01_hopfield.ipynb ...   (or --all)

A code cell is visible unless tagged ``remove-cell``, ``remove-input`` or ``hide-input``, the
tags DESIGN.md section 10 names (a ``hide-cell`` cell still shows its fold and counts as
visible, as in the project's quick checks). For each notebook it prints the visible code
lines (limit 60; code in folded exercise solutions not counted), the visible cells over 15
lines, the visible ``assert``/``glue(`` lines and the visible lines over 88 characters
(limits 0): the limits of DESIGN.md section 10 and issue 17, which
``tests/browser/test_reader.py`` measures on the built HTML. It also counts the cells JupyterLab
would show unfolded although the book hides them (column ``fold``, limit 0): every code cell
tagged ``remove-cell``, ``remove-input`` or ``hide-input`` needs ``"jupyter": {"source_hidden":
true}`` and every ``hide-output`` cell ``"outputs_hidden": true`` (the generated header cells of
``scripts/notebook_headers.py`` excepted), so a reader in JupyterLab sees the same page. Exit
status 1 when a notebook breaks one of them.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from notebook_headers import HEADER_IDS  # noqa: E402

HIDDEN = {"remove-cell", "remove-input", "hide-input"}
CHECK = re.compile(r"^\s*(assert\b|glue\()|[^\w.]glue\(")


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def visible_cells(path: pathlib.Path) -> list[tuple[list[str], bool]]:
    """Source lines of every visible code cell, and whether it sits in a folded solution
    (between ``{solution-start}`` and ``{solution-end}``: shown only when the reader opens it)."""
    nb = json.loads(path.read_text())
    out = []
    folded = False
    for cell in nb["cells"]:
        src = _source(cell)
        if cell["cell_type"] == "markdown":
            if "{solution-start}" in src:
                folded = True
            if "{solution-end}" in src:
                folded = False
            continue
        if cell["cell_type"] != "code" or HIDDEN & set(cell["metadata"].get("tags", [])):
            continue
        out.append((src.rstrip("\n").split("\n") if src.strip() else [], folded))
    return out


def unfolded_in_jupyterlab(path: pathlib.Path) -> list[str]:
    """Code cells the book hides but JupyterLab would show: ``"<cell id>: <what is missing>"``.

    A source the book hides (tags in :data:`HIDDEN`) needs ``jupyter.source_hidden``; an output
    it folds (``hide-output``) needs ``jupyter.outputs_hidden``. The header cells that
    ``scripts/notebook_headers.py`` generates (:data:`notebook_headers.HEADER_IDS`) are left as
    that script writes them.
    """
    nb = json.loads(path.read_text())
    out = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or cell.get("id") in HEADER_IDS:
            continue
        tags = set(cell["metadata"].get("tags", []))
        lab = cell["metadata"].get("jupyter", {})
        name = cell.get("id", f"cell {i}")
        if HIDDEN & tags and lab.get("source_hidden") is not True:
            out.append(f"{name}: {sorted(HIDDEN & tags)} without jupyter.source_hidden")
        if "hide-output" in tags and lab.get("outputs_hidden") is not True:
            out.append(f"{name}: hide-output without jupyter.outputs_hidden")
    return out


def report(path: pathlib.Path) -> dict[str, int]:
    both = visible_cells(path)
    cells = [c for c, _ in both]
    lines = [ln for c in cells for ln in c]
    return {
        # folded solutions do not count towards the page's code (the other limits hold there too)
        "code_lines": sum(len(c) for c, folded in both if not folded),
        "cells_over_15": sum(len(c) > 15 for c in cells),
        "checks": sum(bool(CHECK.search(ln)) for ln in lines),
        "lines_over_88": sum(len(ln) > 88 for ln in lines),
        "unfolded_in_lab": len(unfolded_in_jupyterlab(path)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=pathlib.Path)
    ap.add_argument("--all", action="store_true", help="every notebook under book/")
    ns = ap.parse_args(argv)
    paths = sorted((ROOT / "book").rglob("*.ipynb")) if ns.all else ns.notebooks
    paths = [p for p in paths if "_build" not in p.parts and ".ipynb_checkpoints" not in p.parts]
    bad = 0
    print(f"{'notebook':48} {'code':>5} {'>15':>4} {'chk':>4} {'>88':>4} {'fold':>4}")
    for p in paths:
        r = report(p)
        broken = (r["code_lines"] > 60 or r["cells_over_15"] or r["checks"] or r["lines_over_88"]
                  or r["unfolded_in_lab"])
        bad += bool(broken)
        name = str(p.resolve().relative_to(ROOT)) if p.resolve().is_relative_to(ROOT) else str(p)
        print(f"{name:48} {r['code_lines']:5} {r['cells_over_15']:4} {r['checks']:4} "
              f"{r['lines_over_88']:4} {r['unfolded_in_lab']:4}{'  <-' if broken else ''}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
