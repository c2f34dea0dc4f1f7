"""The built HTML book the browser tests open: where it is, its TOC pages, a local server."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("FEDLAM_BOOK_ROOT", Path(__file__).resolve().parents[2]))
HTML = ROOT / "_build" / "html"
TOC = ROOT / "_toc.yml"
REQUIRE = os.environ.get("FEDLAM_REQUIRE_HTML", "") == "1"


def unavailable(reason: str) -> None:
    """Skip the test, or fail it under ``FEDLAM_REQUIRE_HTML=1`` (as in ``.ci/run``)."""
    if REQUIRE:
        pytest.fail(f"{reason} (FEDLAM_REQUIRE_HTML=1)")
    pytest.skip(reason)


def toc_pages() -> list[str]:
    """HTML paths (relative to _build/html) of every file listed in _toc.yml, root first."""
    if not TOC.exists():
        return []
    import yaml

    toc = yaml.safe_load(TOC.read_text())
    files: list[str] = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            for key in ("chapters", "sections", "parts"):
                if key in entry:
                    walk(entry[key])

    for key in ("parts", "chapters", "sections"):
        if key in toc:
            walk(toc[key])
    return [re.sub(r"\.(md|ipynb)$", "", f) + ".html" for f in files]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(directory: Path = HTML) -> Iterator[str]:
    """``directory`` over HTTP on a free port of 127.0.0.1, for the duration of the block."""
    if not (directory / "index.html").exists():
        unavailable(f"no built book at {directory} (run `jupyter-book build .` first)")
    handler = functools.partial(_QuietHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
