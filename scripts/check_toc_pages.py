#!/usr/bin/env python3
"""Check that the built HTML book has a page for every entry of _toc.yml.

Jupyter Book 2 silently ignores _config.yml/_toc.yml, and a TOC entry whose file is missing
only warns; this check makes either mistake fail CI.

Usage: python scripts/check_toc_pages.py [BOOK_ROOT]   (default: the repository root)
Exit status 0 if every page exists (and _build/html/index.html too), 1 otherwise.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml


def toc_files(toc: dict) -> list[str]:
    """Every ``file`` of a jb-book TOC (root first), in reading order."""
    files = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            for key in ("parts", "chapters", "sections"):
                walk(entry.get(key, []))

    for key in ("parts", "chapters", "sections"):
        walk(toc.get(key, []))
    return files


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    toc_path = root / "_toc.yml"
    html = root / "_build" / "html"
    toc = yaml.safe_load(toc_path.read_text())
    if toc.get("format") != "jb-book":
        print(f"{toc_path}: expected format jb-book, got {toc.get('format')!r}")
        return 1
    missing = []
    files = toc_files(toc)
    for f in files:
        page = html / (re.sub(r"\.(md|ipynb)$", "", f) + ".html")
        if not page.is_file() or page.stat().st_size == 0:
            missing.append(str(page.relative_to(root)))
    if not (html / "index.html").is_file():
        missing.append(str((html / "index.html").relative_to(root)))
    if missing:
        print(f"{len(missing)} TOC page(s) missing from {html}:")
        for m in missing:
            print(f"  {m}")
        return 1
    print(f"all {len(files)} TOC pages present in {html.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
