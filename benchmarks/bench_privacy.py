"""What privacy adds to a round at N = 1000: noising the L uploads and the noise-aware K_hat.

The claim to check (issue 9): noising an upload (``fedlam.privacy.gaussian_mechanism``: the
calibration plus one symmetric N x N Gaussian draw) and counting K_hat against the MP + semicircle
edge (``fedlam.khat.k_hat_components`` with ``noise_var``) add at most one ``numpy.linalg.eigh`` of
an N x N matrix to a round. Measured in the same run, best of 5 interleaved repeats:

* ``eigh``: one ``numpy.linalg.eigh`` of the server mean;
* ``noise``: ``gaussian_mechanism`` on each of the L = 3 client operators;
* ``khat``: the noise-aware K_hat on the (partial) spectrum the round computes anyway;
* ``round_clean``: ``lam.factorize`` of the clean mean (the round without privacy);
* ``round_private``: noising + mean + ``privacy.factorize_noised`` (the whole private round).

Run:  python benchmarks/bench_privacy.py
"""

from __future__ import annotations

import numpy as np

from fedlam import khat, lam, privacy, spectral
from fedlam.metrics import magnetization, spurious_count
from fedlam.operators import aggregate
from _common import best_of, client_operators

N, K, L, M_c, r = 1000, 3, 3, 800, 0.9
EPS, DELTA = 1.0, 1e-5


def main() -> None:
    xi, ops = client_operators(N, K, L, M_c, r, seed=1)
    sigma = privacy.noise_scale(M_c, EPS, DELTA, N=N)
    sigma_mean = float(np.sqrt(privacy.mean_noise_var([sigma] * L)))
    comps = [khat.Component((1 - r * r) / (N * L), N / M_c) for _ in range(L)]
    noised = [privacy.gaussian_mechanism(J, M_c, EPS, DELTA, 10 + c) for c, J in enumerate(ops)]
    Jn = aggregate(noised)
    spec = spectral.top_spectrum(Jn, 16)
    out = {}

    def eigh():
        np.linalg.eigh(Jn)

    def noise():
        for c, J in enumerate(ops):
            privacy.gaussian_mechanism(J, M_c, EPS, DELTA, 10 + c)

    def k_hat():
        khat.k_hat_components(spec, comps, N * sigma_mean**2)

    def round_clean():
        lam.factorize(aggregate(ops), rng=0)

    def round_private():
        J = aggregate([privacy.gaussian_mechanism(Jc, M_c, EPS, DELTA, 10 + c) for c, Jc in enumerate(ops)])
        out["res"] = privacy.factorize_noised(J, 0, components=comps, noise_sigma=sigma_mean)

    t = best_of({"eigh": eigh, "noise": noise, "khat": k_hat, "round_clean": round_clean,
                 "round_private": round_private}, repeats=5)
    added = t["noise"] + t["khat"]
    print(f"N = {N}, K = {K}, L = {L} x M_c = {M_c}, r = {r}, eps = {EPS}, delta = {DELTA}: "
          f"sigma = {sigma:.3g} per client, {sigma_mean:.3g} in the mean; "
          f"eps threshold {privacy.epsilon_threshold(r, 1 / K, N, M_c, DELTA, L=L):.3f}")
    print(f"one numpy.linalg.eigh          : {t['eigh']:8.4f} s")
    print(f"noising the {L} uploads          : {t['noise']:8.4f} s = {t['noise'] / t['eigh']:.2f} x eigh "
          f"({t['noise'] / L / t['eigh']:.2f} x per upload)")
    print(f"noise-aware K_hat              : {t['khat']:8.4f} s = {t['khat'] / t['eigh']:.3f} x eigh")
    print(f"added by privacy               : {added:8.4f} s = {added / t['eigh']:.2f} x eigh  (claim: <= 1)")
    print(f"clean round (factorize)        : {t['round_clean']:8.4f} s = {t['round_clean'] / t['eigh']:.2f} x eigh")
    print(f"private round (noise + factorize_noised): {t['round_private']:8.4f} s = "
          f"{t['round_private'] / t['eigh']:.2f} x eigh")
    res = out["res"]
    print(f"private round recovers K_hat = {res.k_hat}, m = {np.round(magnetization(res.patterns, xi), 3)}, "
          f"spurious = {spurious_count(res.patterns, xi) if res.patterns.shape[0] else 0}")


if __name__ == "__main__":
    main()
