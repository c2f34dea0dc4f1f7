"""Print the OpenBLAS kernel ("core") numpy and scipy use, e.g. SkylakeX, Haswell, Sandybridge.

Usage::

    python scripts/blas_core.py                 # print numpy's and scipy's OpenBLAS core
    python scripts/blas_core.py --expect Haswell  # exit 1 unless both use that core

``OPENBLAS_CORETYPE=Haswell`` forces another kernel than the one OpenBLAS picks for the CPU;
.ci/run uses this to check that the committed notebook outputs do not depend on it.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--expect", help="fail unless numpy and scipy use this core")
    args = parser.parse_args(argv)
    cores = openblas_cores()
    forced = os.environ.get("OPENBLAS_CORETYPE", "")
    print(" ".join(f"{k}={v}" for k, v in cores.items()), f"(OPENBLAS_CORETYPE={forced!r})")
    if args.expect and any(v.lower() != args.expect.lower() for v in cores.values()):
        print(f"expected OpenBLAS core {args.expect}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
