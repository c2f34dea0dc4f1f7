"""Sphinx extension for the HTML pages: repository links from one setting, no duplicate scripts.

**Nothing that points nowhere.** The repository URL is one setting, ``repository.url`` in
``_config.yml`` (jupyter-book passes it to the theme as ``html_theme_options["repository_url"]``).
:func:`apply_repository_setting` runs when the configuration is read: with the URL empty it
switches off the repository, issues and edit buttons and every launch button (Binder,
JupyterHub, Colab, Thebe, ...), which would otherwise point to a repository that does not
exist; with the URL set it shows the repository button (jupyter-book refuses the button in
``_config.yml`` while the URL is empty, so the extension switches it on), keeps the launch
buttons and puts "Source: <URL>" in the footer. The two builds
are checked by tests/test_repository_setting.py.

**Duplicate scripts.**
With jupyter-book 1.0.4 (Sphinx 7.4, sphinx-thebe 0.3.1, sphinx-togglebutton 0.4.5) the
inline configuration scripts of sphinx-thebe and sphinx-togglebutton are emitted twice in
every page. The second ``const THEBE_JS_URL = ...`` then throws "Identifier 'THEBE_JS_URL'
has already been declared" in the browser console. This hook keeps the first occurrence of
each script (same file, same inline body), which preserves the order the page relies on.
The browser test (tests/browser/test_html.py) checks that the console stays clean.
"""

from __future__ import annotations

import html
from typing import Any

_REPOSITORY_BUTTONS = ("use_repository_button", "use_issues_button", "use_edit_page_button")
_LAUNCHERS = ("binderhub_url", "jupyterhub_url", "thebe", "colab_url", "deepnote_url", "jupyterlite_url")


def apply_repository_setting(theme_options: dict[str, Any]) -> dict[str, Any]:
    """Theme options with the repository links made consistent with ``repository_url``.

    Returns a new dict. An empty (or missing) ``repository_url`` removes every button that
    needs a repository; a set one must be an https URL and adds it to ``extra_footer``.
    """
    opts = dict(theme_options)
    url = str(opts.get("repository_url") or "").strip()
    if not url:
        opts["repository_url"] = ""
        for key in _REPOSITORY_BUTTONS:
            opts[key] = False
        launch = dict(opts.get("launch_buttons") or {})
        for key in _LAUNCHERS:
            if key in launch:
                launch[key] = False if key == "thebe" else ""
        opts["launch_buttons"] = launch
        return opts
    if not url.startswith("https://"):
        raise ValueError(f"_config.yml repository.url must be empty or an https URL, got {url!r}")
    opts["use_repository_button"] = True
    link = html.escape(url, quote=True)
    source = f'<p>Source: <a href="{link}">{html.escape(url.removeprefix("https://"))}</a></p>'
    opts["extra_footer"] = source + "\n" + str(opts.get("extra_footer") or "")
    return opts


def _config_inited(app: Any, config: Any) -> None:
    config.html_theme_options = apply_repository_setting(config.html_theme_options or {})


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
    # early: before the theme reads its options
    app.connect("config-inited", _config_inited, priority=100)
    # run after the theme and the extensions have filled the page context
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
