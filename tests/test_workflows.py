"""The Pages workflow builds the book as CI does (same commands, same Python), with pinned actions.

The linters (actionlint, zizmor) run in scripts/check_workflows.sh; this checks what they cannot:
that .github/workflows/pages.yml and .ci/run do not drift apart.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / ".github" / "workflows" / "pages.yml"
INSTALL = "python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt -e ."
BUILD = "jupyter-book build . -n -W --keep-going"


def _workflow() -> dict:
    wf = yaml.safe_load(PAGES.read_text())
    # YAML 1.1 reads the key `on` as True
    assert "jobs" in wf and (True in wf or "on" in wf), wf.keys()
    return wf


def _run_steps() -> list[str]:
    return [s["run"] for s in _workflow()["jobs"]["build"]["steps"] if "run" in s]


def test_same_commands_as_ci_and_readme() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert BUILD in ci, "the CI build command changed: update pages.yml and this test"
    assert INSTALL in readme and INSTALL in ci
    runs = _run_steps()
    assert any(r.strip() == INSTALL for r in runs), runs
    assert any(r.strip().endswith(BUILD) for r in runs), runs
    assert any("scripts/check_toc_pages.py" in r for r in runs), runs


def test_same_python_as_ci() -> None:
    steps = _workflow()["jobs"]["build"]["steps"]
    (setup,) = [s for s in steps if str(s.get("uses", "")).startswith("actions/setup-python@")]
    version = str(setup["with"]["python-version"])
    assert re.fullmatch(r"3\.\d+\.\d+", version), f"pin an exact Python, got {version!r}"
    # CI runs on this machine's python3; the binder runtime names the same minor version
    assert version.rsplit(".", 1)[0] == "{}.{}".format(*sys.version_info[:2]), version
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert runtime == "python-" + version.rsplit(".", 1)[0], (runtime, version)


def test_actions_pinned_to_commits_with_their_tag() -> None:
    uses = re.findall(r"^\s*(?:-\s*)?uses:\s*(\S+)(.*)$", PAGES.read_text(), re.M)
    assert len(uses) >= 4, uses
    for ref, comment in uses:
        name, _, sha = ref.partition("@")
        assert re.fullmatch(r"[0-9a-f]{40}", sha), f"{name} is not pinned to a commit SHA: {ref}"
        assert re.fullmatch(r"\s*# v\d+\.\d+\.\d+", comment), f"{ref}: add '# vX.Y.Z' (the tag of that commit)"


def test_permissions_are_per_job_and_minimal() -> None:
    wf = _workflow()
    assert wf["permissions"] == {}, wf["permissions"]
    assert wf["jobs"]["build"]["permissions"] == {"contents": "read"}
    assert wf["jobs"]["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    checkout = [s for s in wf["jobs"]["build"]["steps"] if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert checkout and checkout[0]["with"]["persist-credentials"] is False
