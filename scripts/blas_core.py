"""Print the OpenBLAS kernel ("core") numpy and scipy use, e.g. SkylakeX, Haswell, Sandybridge.

Usage::

    python scripts/blas_core.py                 # print numpy's and scipy's OpenBLAS core
    python scripts/blas_core.py --expect Haswell  # exit 1 unless both use that core
    python scripts/blas_core.py --other           # print a kernel other than the native one

``OPENBLAS_CORETYPE=<core>`` forces another kernel than the one OpenBLAS picks for the CPU;
.ci/run uses this to check that the committed notebook outputs do not depend on it. The kernel
it forces is ``--other``'s: Haswell (AVX2), unless the CPU's own kernel is already Haswell (an
AVX2 CPU without AVX-512, AMD's Zen included), then Sandybridge (AVX). Both run on any CPU with
AVX2; forcing the native kernel would make the check vacuous.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys


def openblas_cores() -> dict[str, str]:
    """{"numpy": core, "scipy": core} from the OpenBLAS libraries the wheels bundle."""
    import numpy
    import scipy

    cores = {}
    for mod in (numpy, scipy):
        libs_dir = os.path.join(os.path.dirname(os.path.dirname(mod.__file__)), f"{mod.__name__}.libs")
        libs = sorted(glob.glob(os.path.join(libs_dir, "libscipy_openblas*.so*")))
        if not libs:
            cores[mod.__name__] = "unknown (no bundled OpenBLAS)"
            continue
        lib = ctypes.CDLL(libs[0])
        for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                cores[mod.__name__] = fn().decode()
                break
        else:
            cores[mod.__name__] = "unknown (no corename symbol)"
    return cores


def other_core(cores: dict[str, str]) -> str:
    """A kernel to force that differs from the native one of every library in ``cores``."""
    return "Sandybridge" if any(v.lower() == "haswell" for v in cores.values()) else "Haswell"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--expect", help="fail unless numpy and scipy use this core")
    parser.add_argument("--other", action="store_true",
                        help="print only a core other than the native one (run without OPENBLAS_CORETYPE)")
    args = parser.parse_args(argv)
    cores = openblas_cores()
    forced = os.environ.get("OPENBLAS_CORETYPE", "")
    if args.other:
        if forced:
            print("--other reads the native core: unset OPENBLAS_CORETYPE", file=sys.stderr)
            return 2
        print(other_core(cores))
        return 0
    print(" ".join(f"{k}={v}" for k, v in cores.items()), f"(OPENBLAS_CORETYPE={forced!r})")
    if args.expect and any(v.lower() != args.expect.lower() for v in cores.values()):
        print(f"expected OpenBLAS core {args.expect}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
