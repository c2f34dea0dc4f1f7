#!/usr/bin/env bash
# Lint and type-check the package: ruff (fedlam/ and scripts/) and mypy (fedlam/), configured in
# pyproject.toml ([tool.ruff], [tool.mypy]); tools pinned in requirements-dev.txt.
#
# Usage: scripts/lint.sh            fail on any finding (CI)
#        scripts/lint.sh --report   never fail; print the number of findings per file and tool
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(dirname "${PYTHON:-.venv/bin/python}")
for tool in ruff mypy; do
  [ -x "$BIN/$tool" ] || { echo "lint: no $BIN/$tool: pip install -r requirements-dev.txt" >&2; exit 1; }
done
RUFF_PATHS=(fedlam scripts)

if [ "${1:-}" = "--report" ]; then
  echo "--- ruff: findings per file"
  "$BIN/ruff" check --no-cache --output-format concise "${RUFF_PATHS[@]}" 2>/dev/null \
    | grep -E '^[^ ]+\.py:[0-9]+:' | cut -d: -f1 | sort | uniq -c | sort -rn || true
  echo "--- mypy: errors per file"
  "$BIN/mypy" --no-incremental 2>/dev/null | grep -E '^[^ ]+\.py:[0-9]+: error' | cut -d: -f1 \
    | sort | uniq -c | sort -rn || true
  exit 0
fi

echo "--- $("$BIN/ruff" --version): ${RUFF_PATHS[*]}"
"$BIN/ruff" check --no-cache "${RUFF_PATHS[@]}"
echo "--- $("$BIN/mypy" --version)"
"$BIN/mypy" --no-incremental
echo "lint: OK"
