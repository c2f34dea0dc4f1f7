"""Dreaming: closed form in the eigenbasis vs the paper's 200-step matrix iteration (N = 1000).

Run:  python benchmarks/bench_dream.py
"""

from __future__ import annotations

import time

import numpy as np

from fedlam import spectral
from _common import client_operators, best_of

N, K, M, r = 1000, 6, 3000, 0.8


def main() -> None:
    _, (J,) = client_operators(N, K, 1, M, r, seed=0)
    t = time.perf_counter()
    lit = spectral.dream_literal(J, 0.01, 200)
    t_lit = time.perf_counter() - t
    fast = spectral.dream(J, 2.0, steps=200)
    rel = np.linalg.norm(fast - lit) / np.linalg.norm(lit)
    t_fast = best_of({"dream": lambda: spectral.dream(J, 2.0, steps=200)}, repeats=3)["dream"]
    flow = spectral.dream(J, 2.0)
    rel_flow = np.linalg.norm(flow - lit) / np.linalg.norm(lit)
    print(f"N = {N}, J = Hebbian of M = {M} examples (K = {K}, r = {r})")
    print(f"dream_literal(J, 0.01, 200): {t_lit:8.3f} s")
    print(f"dream(J, 2.0, steps=200)   : {t_fast:8.3f} s   (best of 3)")
    print(f"speed-up                   : {t_lit / t_fast:8.1f} x")
    print(f"relative Frobenius difference, 200-step eigenvalue map vs literal: {rel:.2e}")
    print(f"relative Frobenius difference, continuous flow t = 2 vs literal  : {rel_flow:.2e}")


if __name__ == "__main__":
    main()
