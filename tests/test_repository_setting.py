"""Nothing that points nowhere: the repository URL is one setting (``repository.url``).

With the URL empty (the default until the book is published) no page shows a repository,
Binder or Colab button, nor the word "placeholder"; with it set, the buttons point to it.

* The theme options the book's own ``_config.yml`` produces are checked through
  :func:`fedlam_html.apply_repository_setting` (fast).
* Two real Jupyter Book builds of a one-notebook book, made from the book's ``_config.yml``
  (its ``html``, ``repository`` and ``launch_buttons`` sections and the ``fedlam_html``
  extension), once with the URL empty and once with it set, are searched for the links.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import fedlam_html  # noqa: E402

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
URL = "https://github.com/example-owner/fedlam-test"


def _theme_options(config: dict) -> dict:
    from jupyter_book.config import yaml_to_sphinx

    return yaml_to_sphinx(config)[0]["html_theme_options"]


def test_the_book_leaves_the_repository_empty() -> None:
    """The committed configuration has no repository yet, and nothing refers to one."""
    assert CONFIG["repository"]["url"] == ""
    text = (ROOT / "_config.yml").read_text()
    assert "placeholder" not in text.lower()
    assert "github.com/fedlam" not in text


def test_empty_url_removes_every_repository_button() -> None:
    opts = fedlam_html.apply_repository_setting(_theme_options(CONFIG))
    assert opts["repository_url"] == ""
    assert not any(opts[k] for k in ("use_repository_button", "use_issues_button", "use_edit_page_button"))
    launch = opts["launch_buttons"]
    assert not any(launch.get(k) for k in ("binderhub_url", "jupyterhub_url", "colab_url", "thebe"))
    assert "Source:" not in opts["extra_footer"]


def test_set_url_keeps_the_buttons_and_names_the_source() -> None:
    config = copy.deepcopy(CONFIG)
    config["repository"]["url"] = URL
    opts = fedlam_html.apply_repository_setting(_theme_options(config))
    assert opts["repository_url"] == URL and opts["use_repository_button"] is True
    assert opts["launch_buttons"]["binderhub_url"] and opts["launch_buttons"]["colab_url"]
    assert f'href="{URL}"' in opts["extra_footer"]


def test_non_https_url_is_refused() -> None:
    with pytest.raises(ValueError, match="https URL"):
        fedlam_html.apply_repository_setting({"repository_url": "git@github.com:x/y.git"})


def _tiny_book(root: Path, url: str) -> Path:
    """A one-notebook book configured like the real one, built with jupyter-book."""
    (root / "_ext").mkdir(parents=True)
    shutil.copy(ROOT / "book" / "_ext" / "fedlam_html.py", root / "_ext")
    config = {
        "title": "repository setting",
        "only_build_toc_files": True,
        "execute": {"execute_notebooks": "off"},
        "html": copy.deepcopy(CONFIG["html"]),
        "repository": {**CONFIG["repository"], "url": url},
        "launch_buttons": copy.deepcopy(CONFIG["launch_buttons"]),
        "sphinx": {"local_extensions": {"fedlam_html": "_ext"}},
    }
    config["html"].pop("favicon", None)
    (root / "_config.yml").write_text(yaml.safe_dump(config))
    (root / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: page\n")
    (root / "intro.md").write_text("# Intro\n\nA page.\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A notebook page"), nbformat.v4.new_code_cell("1 + 1")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "page.ipynb")
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", str(root), "-W", "-n", "-q"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return root / "_build" / "html"


def _visible_text(page: str) -> str:
    """The page's text without tags, scripts and attributes (what a reader can read)."""
    page = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", page)
    return re.sub(r"<[^>]*>", " ", page)


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = {}
    for name, url in (("empty", ""), ("set", URL)):
        html = _tiny_book(tmp_path_factory.mktemp(name), url)
        out[name] = (html / "page.html").read_text() + (html / "intro.html").read_text()
    return out


def test_build_without_url_has_no_button_to_nowhere(builds: dict[str, str]) -> None:
    page = builds["empty"]
    for needle in ("mybinder.org", "colab.research.google.com", "github.com", "repository-button"):
        assert needle not in page, needle
    assert "placeholder" not in _visible_text(page).lower()
    assert "Outputs verified by nbval." in page


def test_build_with_url_points_the_buttons_to_it(builds: dict[str, str]) -> None:
    page = builds["set"]
    owner_repo = URL.removeprefix("https://github.com/")
    assert re.search(rf'href="{re.escape(URL)}/?"', page), "repository button"
    assert f"mybinder.org/v2/gh/{owner_repo}/main" in page
    assert f"colab.research.google.com/github/{owner_repo}/blob/main/page.ipynb" in page
    assert "Source:" in page and "placeholder" not in _visible_text(page).lower()
