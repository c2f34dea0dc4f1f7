"""Smoke test of an installed fedlam (run by scripts/check_wheel.sh inside a clean venv).

Usage::

    python wheel_smoke.py EXPECTED_VERSION

Run it from a directory outside the repository, with the venv's python: it checks that
``fedlam`` is the installed copy (not a source tree on ``sys.path``), that the shipped
silhouettes data loads, and that one small federation runs and recovers its archetypes.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    expected_version = argv[0]

    import numpy as np

    import fedlam
    from fedlam import data, federation

    where = Path(fedlam.__file__).resolve()
    prefix = Path(sys.prefix).resolve()
    assert prefix in where.parents, f"fedlam imported from {where}, not from the venv {prefix}"
    assert "site-packages" in where.parts, f"fedlam is not an installed copy: {where}"
    assert fedlam.__version__ == expected_version, (fedlam.__version__, expected_version)

    # the data file shipped in the wheel
    images, labels, names = data.load_silhouettes()
    assert images.shape == (8671, 784) and labels.shape == (8671,) and len(names) == 101, (
        images.shape, labels.shape, len(names)
    )
    xi_s = data.structured_archetypes()
    assert xi_s.shape == (3, 784) and set(np.unique(xi_s)) <= {-1, 1}, xi_s.shape

    # one small federation: 2 honest clients, 3 random archetypes, 2 rounds
    K, N, T, L = 3, 200, 2, 2
    xi = data.random_archetypes(K, N, 0)
    pi = data.static_mixture(T, L, K)
    specs = [federation.ClientSpec(r=0.9, M=300, mixture=pi[:, c]) for c in range(L)]
    h1 = federation.run_federation(xi, specs, T, 0, controller="novelty")
    h2 = federation.run_federation(xi, specs, T, 0, controller="novelty")
    assert h1.k_hat.shape == (T,) and h1.magnetization.shape == (T, K)
    assert np.array_equal(h1.magnetization, h2.magnetization), "same seed, different result"
    m = h1.magnetization[-1]
    assert np.all(m >= 0.9), f"the installed wheel does not recover the archetypes: m = {m}"
    print(
        f"fedlam {fedlam.__version__} from {where.parent}: silhouettes {images.shape}, "
        f"k_hat {h1.k_hat.tolist()}, final magnetization {np.round(m, 3).tolist()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
