"""Sphinx extension: drop duplicate <script> entries from every HTML page.

With jupyter-book 1.0.4 (Sphinx 7.4, sphinx-thebe 0.3.1, sphinx-togglebutton 0.4.5) the
inline configuration scripts of sphinx-thebe and sphinx-togglebutton are emitted twice in
every page. The second ``const THEBE_JS_URL = ...`` then throws "Identifier 'THEBE_JS_URL'
has already been declared" in the browser console. This hook keeps the first occurrence of
each script (same file, same inline body), which preserves the order the page relies on.
The browser test (tests/browser/test_html.py) checks that the console stays clean.
"""

from __future__ import annotations

from typing import Any


def _key(script: Any) -> tuple[str, str]:
    filename = str(getattr(script, "filename", script) or "")
    attrs = getattr(script, "attributes", {}) or {}
    return filename, str(attrs.get("body", ""))


def _dedupe_scripts(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple[str, str]] = set()
    unique = []
    for script in scripts:
        key = _key(script)
        if key in seen:
            continue
        seen.add(key)
        unique.append(script)
    context["script_files"] = unique


def setup(app: Any) -> dict[str, Any]:
    # run after the theme and the extensions have filled the page context
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
