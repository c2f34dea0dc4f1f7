#!/usr/bin/env bash
# Packaging check: build the sdist and the wheel the way a user or a release would
# (`python -m build`, isolated build environment), `twine check --strict` them, check that both
# ship the silhouettes data (fedlam/datasets/*.npz), install the wheel alone into a clean venv
# (no repository on sys.path, no requirements.txt: only the wheel's own dependencies) and run
# scripts/wheel_smoke.py there: import, load the shipped data, one small federation.
#
# Usage: scripts/check_wheel.sh            (from anywhere; needs .venv with requirements-dev.txt)
#        PYTHON=/path/to/python scripts/check_wheel.sh
# Leaves nothing behind (a temporary directory, removed on exit).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-$ROOT/.venv/bin/python}
"$PY" -c 'import build, twine' 2>/dev/null || {
  echo "check_wheel: $PY lacks build/twine: pip install -r requirements-dev.txt" >&2
  exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/fedlam-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "--- build sdist and wheel (the wheel is built from the sdist)"
"$PY" -m build --outdir "$work/dist" "$ROOT" >"$work/build.log" 2>&1 || {
  tail -40 "$work/build.log"
  exit 1
}
ls -l "$work/dist"

echo "--- twine check --strict"
"$PY" -m twine check --strict "$work"/dist/*

echo "--- contents"
"$PY" - "$work/dist" <<'EOF'
import pathlib, sys, tarfile, zipfile

dist = pathlib.Path(sys.argv[1])
(wheel,) = dist.glob("fedlam-*.whl")
(sdist,) = dist.glob("fedlam-*.tar.gz")
wheel_names = zipfile.ZipFile(wheel).namelist()
with tarfile.open(sdist) as tf:
    sdist_names = ["/".join(n.split("/")[1:]) for n in tf.getnames()]
problems = []
for what, names in (("wheel", wheel_names), ("sdist", sdist_names)):
    npz = [n for n in names if n.endswith(".npz")]
    if not any(n.endswith("fedlam/datasets/caltech101_silhouettes_28.npz") for n in npz):
        problems.append(f"{what} lacks fedlam/datasets/caltech101_silhouettes_28.npz (has {npz})")
    if not any(n.endswith("fedlam/datasets/README.md") for n in names):
        problems.append(f"{what} lacks the data provenance fedlam/datasets/README.md")
    bad = [n for n in names if "__pycache__" in n or n.endswith(".pyc") or "/.ipynb_checkpoints/" in n]
    if bad:
        problems.append(f"{what} ships caches: {bad[:5]}")
    print(f"{what}: {len(names)} files, data: {npz}")
# the wheel holds the package only (no book, tests or notebooks)
stray = [n for n in wheel_names if not n.startswith(("fedlam/", "fedlam-"))]
if stray:
    problems.append(f"wheel ships files outside the package: {stray[:5]}")
if problems:
    sys.exit("\n".join(problems))
EOF

echo "--- install the wheel into a clean venv and run one small round"
wheel=$(ls "$work"/dist/fedlam-*.whl)
version=$(basename "$wheel" | cut -d- -f2)
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel"
cp scripts/wheel_smoke.py "$work/"
# run from the temporary directory: the repository is not on sys.path
(cd "$work" && env -u PYTHONPATH OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
  "$work/venv/bin/python" -I wheel_smoke.py "$version")
echo "check_wheel: OK ($(basename "$wheel"))"
