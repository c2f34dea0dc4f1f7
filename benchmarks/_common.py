"""Shared set-up of the benchmarks: a federated round's client operators, a timer."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from fedlam.data import random_archetypes, sample_examples
from fedlam.operators import hebbian


def client_operators(N: int, K: int, L: int, M_c: int, r: float, seed: int):
    """Archetypes and the L client Hebbian operators of one round (equal exposures)."""
    rng = np.random.default_rng(seed)
    xi = random_archetypes(K, N, rng)
    ops = []
    for _ in range(L):
        X, _ = sample_examples(xi, M_c, r, np.full(K, 1.0 / K), rng)
        ops.append(hebbian(X))
        del X
    return xi, ops


def best_of(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Minimum wall time of each function over ``repeats`` interleaved runs.

    Interleaving and taking the minimum make the ratios robust to the load of a shared
    machine (other processes slow every function alike in the same round of runs).
    """
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: min(v) for k, v in times.items()}
