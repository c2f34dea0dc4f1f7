"""The headless Chromium both browser tests drive (Debian's package; override with FEDLAM_CHROMIUM)."""

from __future__ import annotations

import os

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
