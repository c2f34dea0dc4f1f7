"""Peak memory of a server round (tracemalloc), in units of one N x N float64 array, and a
round at N = 10,000.

The client operators are inputs (they arrive over the wire) and are allocated before
tracing starts; the peak counts everything the round allocates on top of them: the
aggregate, validation temporaries, the partial spectrum, the LAM state.

Run:  python benchmarks/bench_memory.py            (N = 1000 and N = 10000)
      python benchmarks/bench_memory.py 1000       (only N = 1000)
"""

from __future__ import annotations

import sys
import time
import tracemalloc

from fedlam import lam
from fedlam.metrics import magnetization, spurious_count
from fedlam.operators import aggregate
from _common import client_operators

CASES = {1000: (6, 3, 1000, 0.8), 10000: (6, 2, 1500, 0.8)}


def round_memory(N: int) -> None:
    K, L, M_c, r = CASES[N]
    xi, ops = client_operators(N, K, L, M_c, r, seed=2)
    unit = 8.0 * N * N
    tracemalloc.start()
    tracemalloc.reset_peak()
    t = time.perf_counter()
    res = lam.factorize(aggregate(ops), rng=0)
    dt = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    m = magnetization(res.patterns, xi)
    print(f"N = {N}, K = {K}, L = {L} x M_c = {M_c}, r = {r}: round {dt:.2f} s, "
          f"peak {peak / 2**20:.1f} MiB = {peak / unit:.2f} N x N float64 arrays "
          f"(inputs: {L} operators = {L * unit / 2**20:.0f} MiB, not counted)")
    print(f"    K_hat = {res.k_hat}, accepted = {res.n_accepted}, min magnetization = {m.min():.3f}, "
          f"spurious = {spurious_count(res.patterns, xi)}")


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [1000, 10000]
    for N in sizes:
        if N not in CASES:
            raise SystemExit(f"N must be one of {sorted(CASES)}, got {N}")
        round_memory(N)


if __name__ == "__main__":
    main()
