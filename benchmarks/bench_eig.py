"""The server round with the block eigensolver (issue 21): the three targets, ratios in one run.

1. A round at N = 1000, K = 6 (3 clients x 1000 examples, r = 0.8) against one
   ``numpy.linalg.eigh`` of the aggregate, without a defence and with ``defense="support"``;
   the same rounds with the previous solver (ARPACK, forced by making the block solver give up)
   are timed alongside.
2. The same round when every client noises its upload with
   ``fedlam.privacy.GaussianMechanism(epsilon, delta)`` (the noise-aware K-hat), with the
   acceptance the server defaults to under example-level DP (``"voted"``, the support test with
   leave-one-out voters; ``federation.default_acceptance``), against the round without noise
   with the paper's acceptance (and against the default round).
3. A round at N = 10,000 (2 clients x 1500 examples): wall time, and the peak memory the round
   allocates on top of its inputs (tracemalloc), in N x N float64 arrays; the round as it runs
   (the solver in float64: under the K-hat threshold ``precision="auto"`` keeps float64) and
   with the solver forced to mixed precision; the block solver alone, against the round's
   K-hat threshold in mixed precision and in float64, and mixed without the threshold.

Times are the best of ``repeats`` interleaved runs (benchmarks/_common.best_of). The load
average is printed before and after: the machine may be shared.

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/bench_eig.py          (all three)
      OPENBLAS_NUM_THREADS=1 python benchmarks/bench_eig.py 1000     (1 and 2 only)
"""

from __future__ import annotations

import contextlib
import os
import sys
import tracemalloc
from unittest import mock

import numpy as np
from _common import best_of, client_operators

import fedlam._eig as E
from fedlam.cost import server_top_k
from fedlam.federation import Server, default_acceptance
from fedlam.metrics import magnetization, spurious_count
from fedlam.operators import aggregate
from fedlam.privacy import GaussianMechanism
from fedlam.protocol import Upload


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def small(repeats: int = 7) -> None:
    N, K, L, M_c, r = 1000, 6, 3, 1000, 0.8
    xi, ops = client_operators(N, K, L, M_c, r, seed=1)
    ups = [Upload(op, M_c, 1.0, 1 - r**2) for op in ops]
    mech = GaussianMechanism(epsilon=4.0, delta=1e-5)
    rng = np.random.default_rng(7)
    noised = []
    for op in ops:
        Z, sig = mech.apply(op, M_c, rng)
        noised.append(Upload(Z, M_c, 1.0, 1 - r**2, dp_sigma=sig))
    Js = aggregate(ops)
    out: dict = {}

    def rnd(name, uploads, defense=None, arpack=False, acceptance=None):
        def f():
            # ARPACK: the block solver gives up at once, so every spectrum takes the fallback
            with mock.patch.object(E, "_eig_block", lambda *a, **k: None) if arpack else contextlib.nullcontext():
                out[name] = Server(defense=defense, acceptance=acceptance).round(uploads, np.random.default_rng(0))
        return f

    # under example-level DP the server's default acceptance is "voted" (federation.default_acceptance):
    # the private round is timed with it, and against the plain round with the paper's acceptance
    # as well as against the default plain round
    dp_acceptance = default_acceptance(privacy=mech)

    fns = {
        "eigh": lambda: np.linalg.eigh(Js),
        "round": rnd("round", ups),
        "round_support": rnd("round_support", ups, "support"),
        "round_paper": rnd("round_paper", ups, acceptance="paper"),
        "round_dp": rnd("round_dp", noised, acceptance=dp_acceptance),
        "round_arpack": rnd("round_arpack", ups, arpack=True),
        "round_support_arpack": rnd("round_support_arpack", ups, "support", arpack=True),
        "round_paper_arpack": rnd("round_paper_arpack", ups, arpack=True, acceptance="paper"),
        "round_dp_arpack": rnd("round_dp_arpack", noised, arpack=True, acceptance=dp_acceptance),
    }
    print(f"N = {N}, K = {K}, L = {L} x M_c = {M_c}, r = {r}; {_load()}")
    t = best_of(fns, repeats)
    e = t["eigh"]
    print(f"one numpy.linalg.eigh             : {e:.4f} s")
    for name in ("round", "round_support", "round_paper", "round_dp"):
        print(f"{name:20s} block solver : {t[name]:.4f} s = {t[name] / e:.3f} x eigh   "
              f"(ARPACK: {t[name + '_arpack']:.4f} s = {t[name + '_arpack'] / e:.3f} x eigh)")
    print(f"round under the Gaussian mechanism ({dp_acceptance!r} acceptance, the default under DP) / round "
          f"without: {t['round_dp'] / t['round_paper']:.2f} (paper's acceptance), "
          f"{t['round_dp'] / t['round']:.2f} (the default round)")
    for name in ("round", "round_support", "round_paper", "round_dp"):
        a, b = out[name].result, out[name + "_arpack"].result
        m = magnetization(out[name].patterns, xi)
        same = a.k_hat == b.k_hat and np.array_equal(out[name].patterns, out[name + "_arpack"].patterns)
        print(f"  {name:14s}: K_hat = {a.k_hat}, min m = {m.min():.3f}, spurious = "
              f"{spurious_count(out[name].patterns, xi)}, identical to the ARPACK round: {same}, "
              f"max |value difference| = {np.abs(a.values - b.values).max():.2e}")
    print(f"after: {_load()}")


def large(repeats: int = 3) -> None:
    N, K, L, M_c, r = 10000, 6, 2, 1500, 0.8
    xi, ops = client_operators(N, K, L, M_c, r, seed=2)
    ups = [Upload(op, M_c, 1.0, 1 - r**2) for op in ops]
    unit = 8.0 * N * N
    print(f"N = {N}, K = {K}, L = {L} x M_c = {M_c}, r = {r}; {_load()}")
    out: dict = {}

    real_block = E._eig_block

    def mixed_block(*a, **k):  # the server's solves in mixed precision ("auto" keeps float64 under a threshold)
        k.setdefault("precision", "mixed")
        return real_block(*a, **k)

    def rnd(name, mixed=False):
        def f():
            with mock.patch.object(E, "_eig_block", mixed_block) if mixed else contextlib.nullcontext():
                out[name] = Server().round(ups, np.random.default_rng(0))
        return f

    t = best_of({"round": rnd("round"), "round_mixed": rnd("round_mixed", True)}, repeats)
    rr = out["round"]
    tracemalloc.start()
    tracemalloc.reset_peak()
    Server().round(ups, np.random.default_rng(0))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # the solver as the round calls it: against the K-hat rule's threshold (the bulk values
    # below it placed, not converged), and without it (every value to 0.1 TW scale)
    thr = rr.result.k_result.threshold
    k_srv = server_top_k(N, rr.result.k_hat)   # the values the server asks for (8 here)
    k_all = server_top_k(N, rr.result.k_hat, threshold=False)   # and without a threshold (16)
    info: dict = {}
    E._eig_block(rr.aggregate, k_srv, n_vectors=0, threshold=thr, info=info, precision="mixed")
    info64: dict = {}
    E._eig_block(rr.aggregate, k_srv, n_vectors=0, threshold=thr, info=info64, precision="float64")
    info_all: dict = {}
    E._eig_block(rr.aggregate, k_all, n_vectors=0, info=info_all)
    solver = best_of({"mixed": lambda: E._eig_block(rr.aggregate, k_srv, n_vectors=0, threshold=thr,
                                                    precision="mixed"),
                      "float64": lambda: E._eig_block(rr.aggregate, k_srv, n_vectors=0, threshold=thr,
                                                      precision="float64"),
                      "no_threshold": lambda: E._eig_block(rr.aggregate, k_all, n_vectors=0)},
                     repeats)
    m = magnetization(rr.patterns, xi)
    same = (rr.result.k_hat == out["round_mixed"].result.k_hat
            and np.array_equal(rr.patterns, out["round_mixed"].patterns))
    print(f"round: {t['round']:.2f} s (solver forced to mixed precision: {t['round_mixed']:.2f} s), "
          f"best of {repeats}; "
          f"peak {peak / 2**20:.0f} MiB = {peak / unit:.2f} N x N float64 arrays (inputs: {L} operators, "
          "not counted)")
    print(f"  block solver alone, k = {k_srv}: mixed {solver['mixed']:.2f} s ({info['blocks_float32']} float32 + "
          f"{info['blocks'] - info['blocks_float32']} float64 products), float64 {solver['float64']:.2f} s "
          f"({info64['blocks']} products): {solver['float64'] / solver['mixed']:.2f}x; mixed without the "
          f"threshold (k = {k_all}) {solver['no_threshold']:.2f} s ({info_all['blocks_float32']} float32 + "
          f"{info_all['blocks'] - info_all['blocks_float32']} float64 products)")
    print(f"  K_hat = {rr.result.k_hat}, min m = {m.min():.3f}, spurious = {spurious_count(rr.patterns, xi)}, "
          f"identical to the round with the mixed solver: {same}")
    print(f"after: {_load()}")


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:]] or [1000, 10000]
    if 1000 in sizes:
        small()
    if 10000 in sizes:
        large()
