"""scripts/blas_core.py: the kernel CI forces for its second notebook run differs from the native one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "blas_core.py"
sys.path.insert(0, str(ROOT / "scripts"))
import blas_core  # noqa: E402


def test_other_core_is_never_the_native_one():
    assert blas_core.other_core({"numpy": "Haswell", "scipy": "Haswell"}) == "Sandybridge"
    assert blas_core.other_core({"numpy": "SkylakeX", "scipy": "SkylakeX"}) == "Haswell"
    assert blas_core.other_core({"numpy": "Zen", "scipy": "Zen"}) == "Haswell"
    # one library on Haswell is enough to pick the other kernel for both
    assert blas_core.other_core({"numpy": "SkylakeX", "scipy": "Haswell"}) == "Sandybridge"


def _run(*args: str, core: str | None = None, script: list[str] | None = None) -> subprocess.CompletedProcess:
    """The script (or ``python -c`` code: ``script``) with OPENBLAS_CORETYPE unset, or set to ``core``."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if core is not None:
        env["OPENBLAS_CORETYPE"] = core
    return subprocess.run([sys.executable, *(script or [str(SCRIPT)]), *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_other_core_on_this_machine_takes_effect():
    """What CI forces is not what OpenBLAS picks here, and forcing it changes the kernel."""
    # the native kernel, read without an OPENBLAS_CORETYPE this process may have inherited
    code = (f"import json, sys; sys.path.insert(0, {str(SCRIPT.parent)!r}); import blas_core; "
            "print(json.dumps(blas_core.openblas_cores()))")
    shown = _run(script=["-c", code])
    assert shown.returncode == 0, shown.stderr
    native = json.loads(shown.stdout)
    if any(v.startswith("unknown") for v in native.values()):
        return  # wheels without a bundled OpenBLAS: nothing to force (the CI stage fails instead)
    other = _run("--other")
    assert other.returncode == 0, other.stderr
    core = other.stdout.strip()
    assert all(v.lower() != core.lower() for v in native.values()), (native, core)
    forced = _run("--expect", core, core=core)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    refused = _run("--other", core=core)
    assert refused.returncode == 2 and "unset OPENBLAS_CORETYPE" in refused.stderr
