"""Server time per round with many small clients (issue 13): L = 1000 clients x M_c = 5 examples.

The server's K-hat edge comes from per-client scalars (fedlam.khat.components_from_uploads),
so beyond summing the uploads (O(L N^2), unavoidable: the server must read what it receives)
its work is one partial eigendecomposition and the in-span search, whatever L is. Measured in
the same run: one numpy.linalg.eigh of the aggregate, the time to check and sum the uploads as
they arrive (Server.accumulate), and the rest of the server's step (Server.round on the sum).
For comparison, the older per-upload fit (k_rule="fit") at L = 100, which costs one partial
eigendecomposition per upload and fails at this size (an upload of 5 examples has no bulk).

Run:  python benchmarks/bench_cross_device.py [--L 1000] [--M 5] [--N 784]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fedlam import data, khat, operators
from fedlam.federation import Server
from fedlam.metrics import magnetization, spurious_count
from fedlam.protocol import Upload


def uploads(xi: np.ndarray, L: int, M: int, r: float, seed: int):
    """Generate the L clients' round-0 uploads one at a time (they are never all in memory)."""
    rng = np.random.default_rng(seed)
    K = xi.shape[0]
    mix = data.static_mixture(1, L, K)[0]
    for c in range(L):
        eta, _ = data.sample_examples(xi, M, r, mix[c], rng)
        yield Upload(operators.hebbian(eta), M, 1.0, khat.client_noise_var(eta))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--L", type=int, default=1000)
    ap.add_argument("--M", type=int, default=5)
    ap.add_argument("--N", type=int, default=784)
    ap.add_argument("--r", type=float, default=0.8)
    args = ap.parse_args(argv)
    L, M, N, r = args.L, args.M, args.N, args.r
    xi = data.random_archetypes(4, N, 1) if N != 784 else data.structured_archetypes(method="medoid")
    server = Server()
    t_sum = 0.0
    total = None
    seen = []
    for up in uploads(xi, L, M, r, seed=2):
        t0 = time.perf_counter()
        total = server.accumulate(total, up, 1.0 / L)
        t_sum += time.perf_counter() - t0
        seen.append(up.without_operator())
    t0 = time.perf_counter()
    rr = server.round(seen, np.random.default_rng(0), aggregate=total)
    t_round = time.perf_counter() - t0
    t_eigh = min(_time(lambda: np.linalg.eigh(total)) for _ in range(3))
    m = magnetization(rr.patterns, xi)
    print(f"L = {L} clients x M_c = {M} examples, N = {N}, r = {r}, K = {xi.shape[0]}")
    print(f"one numpy.linalg.eigh          : {t_eigh:7.3f} s")
    print(f"check + sum of the uploads     : {t_sum:7.3f} s  ({t_sum / L * 1e3:.2f} ms per upload)")
    print(f"rest of the server round       : {t_round:7.3f} s  = {t_round / t_eigh:.2f} x eigh")
    print(f"server round in all            : {t_sum + t_round:7.3f} s  "
          f"(target: <= 2 x eigh + sum = {2 * t_eigh + t_sum:.3f} s)")
    print(f"  K_hat = {rr.result.k_hat}, accepted = {rr.patterns.shape[0]}, min m = {m.min():.3f}, "
          f"spurious = {spurious_count(rr.patterns, xi)}")
    # the per-upload fit, at a tenth of the clients (its cost grows with L)
    Lf = max(2, L // 10)
    ups = list(uploads(xi, Lf, M, r, seed=3))
    fit = Server(k_rule="fit")
    t0 = time.perf_counter()
    rf = fit.round(ups, np.random.default_rng(0))
    t_fit = time.perf_counter() - t0
    rs = Server().round(ups, np.random.default_rng(0))
    print(f"k_rule='fit' at L = {Lf}: {t_fit:7.3f} s = {t_fit / t_eigh:.1f} x eigh, K_hat = {rf.result.k_hat} "
          f"(scalars: K_hat = {rs.result.k_hat})")


def _time(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
