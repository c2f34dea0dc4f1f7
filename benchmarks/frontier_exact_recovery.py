"""How many random archetypes does the default factorization recover exactly from their exact operator?

For N in (300, 600, 1000) and K on a grid of K/N, three random families (seeds 1000, 1001,
1002) of K independent uniform +-1 archetypes; the exact operator xi^T xi / N is factorized by
fedlam.lam.factorize with its defaults (in-span search, rng = family index). A family is
recovered exactly when K patterns are accepted, all with magnetization 1. Prints one JSON line
per (N, K): K-hat, accepted, exact matches, spurious, search rounds per family, and the time.
Not a timing benchmark: a measurement too long for the notebooks (chapter 3, section "The
in-span search", asserts the two ends at N = 300 and quotes this script's table).

Run:  python benchmarks/frontier_exact_recovery.py            (all sizes, ~10 min on one core)
      python benchmarks/frontier_exact_recovery.py 300         (one N)
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from fedlam import data, lam, metrics, operators  # noqa: E402

GRID = {
    300: (30, 40, 50, 60, 70, 80),
    600: (40, 50, 60, 70, 80, 90, 100),
    1000: (66, 75, 83, 90, 100, 110),
}


def main(sizes: list[int]) -> None:
    for N in sizes:
        for K in GRID[N]:
            t0 = time.perf_counter()
            runs = []
            for s in range(3):
                xi = data.random_archetypes(K, N, 1000 + s)
                r = lam.factorize(operators.pattern_operator(xi), rng=s)
                m = metrics.magnetization(r.patterns, xi)
                runs.append({"k_hat": int(r.k_hat), "accepted": r.n_accepted, "exact": int(np.sum(m == 1.0)),
                             "spurious": metrics.spurious_count(r.patterns, xi), "rounds": r.attempts})
            ok = sum(int(x["accepted"] == K and x["exact"] == K) for x in runs)
            print(json.dumps({"N": N, "K": K, "K/N": round(K / N, 3), "recovered_exactly": f"{ok}/3",
                              "runs": runs, "seconds": round(time.perf_counter() - t0, 1)}), flush=True)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]] or sorted(GRID)
    bad = [a for a in args if a not in GRID]
    if bad:
        raise SystemExit(f"N must be one of {sorted(GRID)}, got {bad}")
    main(args)
