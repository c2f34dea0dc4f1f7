# Proposed .ci/run stages from the infra helper (issue 8, sections 5 and 6). Not run by itself:
# the lead pastes the functions into .ci/run (they use its conventions: the repository root as
# working directory, .venv made by the `install` stage, chromium installed by the `chromium`
# stage) and extends the stage list, e.g.
#
#   ONLY=" ${FEDLAM_CI_STAGES:-readme install dev-tools chromium fonts headers tests blas-haswell
#          book toc-pages browser jupyterlab wheel workflows lint citation} "
#   run dev-tools dev_tools
#   run headers notebook_headers_check   # once the headers are applied to every notebook
#   run blas-haswell notebooks_haswell
#   run jupyterlab jupyterlab
#   run wheel wheel
#   run workflows workflows
#   run lint lint                        # after the final lint pass over fedlam/
#   run citation citation
#
# Times measured on this 2-core machine on 2026-11-26 while other helpers were running
# (load average 8-15, so expect them shorter on a quiet CI run), one stage at a time:
#   dev-tools          ~10 s  (pip, packages cached)
#   headers             ~6 s
#   blas-haswell     ~390 s  (every notebook under book/ once more; 1 failure today, see report)
#   jupyterlab       ~125 s  (two JupyterLab starts, five page loads, one chapter executed twice)
#   wheel             ~70 s  (isolated build, clean venv with numpy+scipy, one small round)
#   workflows          ~3 s  (+ ~10 s once for apt-get install shellcheck)
#   lint              ~30 s  (ruff < 1 s, mypy ~25 s without a cache)
#   citation          ~15-25 s (cffconvert in a throwaway venv)
# (This file is sourced, not executed.)
# shellcheck shell=bash disable=SC1091

dev_tools() {
  # build, twine, ruff, mypy, zizmor, actionlint (requirements-dev.txt; not part of the
  # README's install command, which stays what a reader needs)
  .venv/bin/pip install -r requirements-dev.txt
}

notebook_headers_check() {
  # every notebook carries the macro cells and install cell generated from _config.yml and the
  # metadata JupyterLab writes (scripts/notebook_headers.py; fix with: ... --all)
  .venv/bin/python scripts/notebook_headers.py --check --all
}

notebooks_haswell() {
  # The committed outputs must not depend on the BLAS kernel: run every notebook again with
  # OpenBLAS forced to another kernel than the CPU's own (this machine picks SkylakeX).
  # blas_core.py fails if the variable has no effect, so the stage cannot pass vacuously.
  . .venv/bin/activate
  OPENBLAS_CORETYPE=Haswell python scripts/blas_core.py --expect Haswell
  OPENBLAS_CORETYPE=Haswell python -m pytest book/
}

jupyterlab() {
  # JupyterLab on 127.0.0.1 in headless Chromium: macros, {prf:} admonitions, {eq} links,
  # opening does not mark the notebook modified, a static Run All saves the same bytes;
  # no process outlives the test
  . .venv/bin/activate
  FEDLAM_JUPYTERLAB=1 python -m pytest tests/browser/test_jupyterlab.py
}

wheel() { scripts/check_wheel.sh; }

workflows() { scripts/check_workflows.sh; }

lint() { scripts/lint.sh; }

citation() { scripts/check_citation.sh; }

# Optional, not proposed for every run (about 9 minutes under load, mostly pip): the Binder
# files and the notebooks' install cell, each followed in a fresh venv.
binder_install() {
  . .venv/bin/activate
  FEDLAM_VENV_TESTS=1 python -m pytest tests/test_binder.py
}
