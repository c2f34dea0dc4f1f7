"""The headless Chromium the browser tests drive (Debian's package; override with FEDLAM_CHROMIUM)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("FEDLAM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.contextmanager
def launch(missing: Callable[[str], object]) -> Iterator[Any]:
    """Headless Chromium through Playwright for the duration of the block; ``missing(reason)``
    is called (it skips or fails the test) when Playwright or the browser is not installed."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (requirements.txt)")
        raise
    if not Path(CHROMIUM).exists():
        missing(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
