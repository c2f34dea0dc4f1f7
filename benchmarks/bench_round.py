"""One full server round at N = 1000, K = 6 vs one numpy.linalg.eigh and vs the paper-literal round.

Round = check and aggregate the L client uploads, K_hat, candidate search, acceptance.
Ours: fedlam.federation.Server.round with its defaults (top eigenpairs by a block solver, K_hat
against the free edge of the uploads' scalars, the fresh acceptance's certification of every
detected direction against each upload, in-span search in the K_hat-dimensional subspace); also
with the paper's acceptance (no certification) and with the tuned LAM dynamics (search="lam")
instead of the in-span search.
Literal: aggregate + fedlam.lam.factorize_literal (200 dense dreaming products, full eigh,
per-seed/per-layer Python loops on the dense kernel). The literal K_hat is taken with the MP
rule: the paper's fixed tau = 0.5 finds K_hat = 0 on this kernel and would skip the dynamics.

Run:  python benchmarks/bench_round.py
"""

from __future__ import annotations

import time

import numpy as np

from fedlam import lam
from fedlam.federation import Server
from fedlam.metrics import magnetization, spurious_count
from fedlam.operators import aggregate
from fedlam.protocol import Upload
from _common import client_operators, best_of

N, K, L, M_c, r = 1000, 6, 3, 1000, 0.8


def main() -> None:
    xi, ops = client_operators(N, K, L, M_c, r, seed=1)
    out = {}

    uploads = [Upload(op, M_c, 1.0, 1 - r**2) for op in ops]

    def ours():  # the server's step: check + aggregate uploads, K-hat from scalars, in-span search
        out["ours"] = Server().round(uploads, np.random.default_rng(0)).result

    def paper_acceptance():  # the same without the default's fresh certification (the paper's acceptance)
        out["paper"] = Server(acceptance="paper").round(uploads, np.random.default_rng(0)).result

    def lam_search():  # the same with the tuned LAM dynamics instead of the in-span search
        out["lam"] = Server(lam_params={"search": "lam"}).round(uploads, np.random.default_rng(0)).result

    def eigh():
        np.linalg.eigh(Js)

    Js = aggregate(ops)
    t = best_of({"ours": ours, "paper": paper_acceptance, "lam": lam_search, "eigh": eigh}, repeats=5)
    t0 = time.perf_counter()
    lit = lam.factorize_literal(aggregate(ops), 0, k_method="mp")
    t_lit = time.perf_counter() - t0
    res = out["ours"]
    q = N / (L * M_c)
    kappa = N * r**2 / K / (1 - r**2)
    print(f"N = {N}, K = {K}, L = {L} clients x M_c = {M_c} examples, r = {r}: q = {q:.3f}, kappa = {kappa:.1f}")
    print(f"one numpy.linalg.eigh   : {t['eigh']:8.3f} s   (best of 5)")
    print(f"our round               : {t['ours']:8.3f} s   (best of 5)  = {t['ours'] / t['eigh']:.2f} x eigh")
    print(f"  paper's acceptance    : {t['paper']:8.3f} s   (best of 5)  = {t['paper'] / t['eigh']:.2f} x eigh; "
          f"the default's fresh certification costs {t['ours'] / t['paper']:.2f} x")
    print(f"round with LAM search   : {t['lam']:8.3f} s   (best of 5)  = {t['lam'] / t['eigh']:.2f} x eigh")
    print(f"paper-literal round     : {t_lit:8.3f} s   (one run)     = {t_lit / t['ours']:.1f} x ours")
    for name, rr in (("ours", res), ("paper", out["paper"]), ("lam", out["lam"]), ("literal", lit)):
        m = magnetization(rr.patterns, xi)
        print(f"  {name:8s}: K_hat = {rr.k_hat}, accepted = {rr.n_accepted}, "
              f"min magnetization = {m.min():.3f}, spurious = {spurious_count(rr.patterns, xi)}, "
              f"candidates = {rr.n_candidates}")


if __name__ == "__main__":
    main()
