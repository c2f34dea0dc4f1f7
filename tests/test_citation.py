"""CITATION.cff agrees with the BibTeX on the front page, the package and the book's configuration.

Schema validation (cffconvert) runs in scripts/check_citation.sh.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CFF = yaml.safe_load((ROOT / "CITATION.cff").read_text())


def _bibtex_entry(text: str, key: str) -> dict[str, str]:
    m = re.search(r"@\w+\{" + re.escape(key) + r",(.*?)\n\}", text, re.S)
    assert m, f"no BibTeX entry {key}"
    fields = dict(re.findall(r"^\s*(\w+)\s*=\s*\{(.*)\},?\s*$", m.group(1), re.M))
    return {k: re.sub(r"[{}]", "", v) for k, v in fields.items()}


def test_cff_required_fields() -> None:
    assert CFF["cff-version"] == "1.2.0"
    for field in ("message", "title", "authors", "type", "version", "license"):
        assert CFF.get(field), field


def test_cff_matches_the_front_page_bibtex() -> None:
    bib = _bibtex_entry((ROOT / "book" / "intro.md").read_text(), "fedlam_book")
    assert CFF["title"] == bib["title"]
    assert [a["name"] for a in CFF["authors"]] == [bib["author"]]
    assert bib["note"] == f"Version {CFF['version']}"
    url = CFF.get("repository-code")
    if url:
        assert url in bib["howpublished"]
    else:  # no repository yet: the entry names none
        assert "http" not in bib["howpublished"] and "placeholder" not in bib["howpublished"]


def test_cff_matches_package_and_config() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert str(CFF["version"]) == project["version"]
    assert CFF["license"] == project["license"]["text"]
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    # the repository URL is one setting: both empty, or the same URL
    assert CFF.get("repository-code", "") == config["repository"]["url"]


def test_cff_cites_the_source_paper_like_references_bib() -> None:
    bib = _bibtex_entry((ROOT / "book" / "references.bib").read_text(), "paper")
    (paper,) = [r for r in CFF["references"] if "Hopfield" in r["title"]]
    assert paper["title"] == bib["title"]
    authors = [f"{a['family-names']}, {a['given-names']}" for a in paper["authors"]]
    assert authors == [a.strip() for a in bib["author"].split(" and ")]


def test_the_paper_is_cited_with_its_year() -> None:
    """No "n.d." for the source paper: the bibliography and CITATION.cff give the same year."""
    bib = _bibtex_entry((ROOT / "book" / "references.bib").read_text(), "paper")
    (paper,) = [r for r in CFF["references"] if "Hopfield" in r["title"]]
    assert re.fullmatch(r"20\d\d", bib.get("year", "")), bib
    assert paper["year"] == int(bib["year"])
