#!/usr/bin/env bash
# Validate CITATION.cff against the Citation File Format schema with cffconvert, installed in a
# throwaway venv: cffconvert 2.0.0 requires jsonschema<4, which the Jupyter stack of
# requirements.txt cannot share. Its consistency with the front page's BibTeX is checked by
# tests/test_citation.py.
#
# Usage: scripts/check_citation.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/fedlam-cff.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check cffconvert==2.0.0
# the validator must be able to fail: a copy without its required 'authors'
grep -v -e '^authors:' -e '^  - name: fedlam developers' CITATION.cff >"$work/broken.cff"
if "$work/venv/bin/cffconvert" --validate -i "$work/broken.cff" >/dev/null 2>&1; then
  echo "check_citation: cffconvert accepted a CITATION.cff without authors" >&2
  exit 1
fi
"$work/venv/bin/cffconvert" --validate -i CITATION.cff
