"""Figures and the interactive explorer of the privacy chapter and experiment.

Nothing here computes anything the book relies on: the figures draw arrays produced by
:mod:`fedlam.privacy` and :mod:`fedlam.experiments.privacy`, and every plotting function prints the
numbers it draws (nbval compares text, not images) unless ``show_numbers=False``, where the book shows
them as titled tables instead (:func:`noised_spectrum_table` for the explorer).
:func:`noised_spectrum_view` is the plot function of the explorer with ``epsilon`` and ``M`` sliders
(``fedlam.widgets.explorer(noised_spectrum_view, ...)``); it wraps
:func:`fedlam.privacy.gaussian_mechanism`, :func:`fedlam.privacy.factorize_noised` and the closed
forms of {ref}`sec-privacy-frontier`.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from fedlam import plotting

__all__ = ["plot_frontier", "plot_attack_vs_epsilon", "noised_spectrum_view", "noised_spectrum_table",
           "plot_client_frontier"]

_CASE_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00")


def _check_flag(show_numbers: Any) -> None:
    if not isinstance(show_numbers, bool):
        raise TypeError(f"show_numbers must be a bool, got {type(show_numbers).__name__} {show_numbers!r}")


def plot_frontier(res: Any, ncols: int = 3, *, show_numbers: bool = True) -> Any:
    """Three panels against epsilon: smallest magnetization over archetypes, K-hat, spurious
    patterns; mean +- std over seeds for every (L, M), with each case's predicted threshold as a
    dashed vertical line of the same colour. Prints the plotted means unless ``show_numbers``
    is False (the book shows them as :func:`fedlam.experiments.privacy.frontier_table`).

    ``ncols`` panels per row: 3 (default) draws one strip 14 in wide; 2 a 9 in wide grid of two
    rows (the fourth cell left empty), which the book's column shows at full size; 1 a column.
    """
    _check_flag(show_numbers)
    if isinstance(ncols, bool) or not isinstance(ncols, (int, np.integer)) or ncols not in (1, 2, 3):
        raise ValueError(f"ncols must be 1, 2 or 3, got {ncols!r}")
    p = res.params
    eps = np.asarray(p.epsilons)
    nrows = -(-3 // int(ncols))
    size = {3: (14.0, 3.8), 2: (9.0, 6.6), 1: (6.4, 9.6)}[int(ncols)]
    fig, grid = plt.subplots(nrows, int(ncols), figsize=size, squeeze=False)
    for ax in grid.ravel()[3:]:
        ax.axis("off")
    axes = grid.ravel()[:3]
    k = 0
    if show_numbers:
        print("eps grid:", " ".join(f"{e:g}" for e in eps))
    for li, L in enumerate(p.Ls):
        for mi, M in enumerate(p.Ms):
            col = _CASE_COLORS[k % len(_CASE_COLORS)]
            k += 1
            lab = f"L = {L}, M = {M}"
            mmin = res.magnetization[:, li, mi].min(axis=-1)
            plotting.mean_std_band(eps, mmin, ax=axes[0], color=col, label=lab)
            plotting.mean_std_band(eps, res.k_hat[:, li, mi].astype(float), ax=axes[1], color=col)
            plotting.mean_std_band(eps, res.spurious[:, li, mi].astype(float), ax=axes[2], color=col)
            for ax in axes:
                ax.axvline(res.eps_threshold[li, mi], color=col, ls="--", lw=1.2)
            if not show_numbers:
                continue
            print(f"{lab}: eps* = {res.eps_threshold[li, mi]:.3g}; min m = "
                  + " ".join(f"{v:.2f}" for v in mmin.mean(axis=0))
                  + "; K-hat = " + " ".join(f"{v:.1f}" for v in res.k_hat[:, li, mi].mean(axis=0))
                  + "; spurious = " + " ".join(f"{v:.1f}" for v in res.spurious[:, li, mi].mean(axis=0)))
    axes[0].set_ylabel("smallest magnetization over archetypes")
    axes[1].set_ylabel("K-hat")
    axes[1].axhline(p.K, color="grey", lw=0.8)
    axes[2].set_ylabel("spurious patterns")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel(f"per-upload budget epsilon (delta = {p.delta:g})")
    axes[0].set_ylim(-0.03, 1.03)
    axes[0].legend(fontsize=9, loc="lower right")
    plotting.label_panels(axes)
    return fig


def plot_attack_vs_epsilon(res: Any, *, show_numbers: bool = True) -> Any:
    """Fraction of a small batch the attack recovers from one noised upload, against epsilon, with
    the budget at which the span of the batch drowns (:func:`fedlam.privacy.example_critical_noise`)
    dashed. Prints the plotted means unless ``show_numbers`` is False (the book shows them as
    :func:`fedlam.experiments.privacy.attack_curve_table`)."""
    _check_flag(show_numbers)
    p = res.params
    eps = np.asarray(p.attack_epsilons)
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    if show_numbers:
        print("attack eps grid:", " ".join(f"{e:g}" for e in eps))
    for ai, Ma in enumerate(p.attack_Ms):
        col = _CASE_COLORS[ai % len(_CASE_COLORS)]
        plotting.mean_std_band(eps, res.attack_recovered[:, ai], ax=ax, color=col, label=f"M = {Ma}")
        ax.axvline(res.eps_example[ai], color=col, ls="--", lw=1.2)
        if not show_numbers:
            continue
        print(f"M = {Ma}: no noise {res.attack_clean[:, ai].mean():.2f}; noised: "
              + " ".join(f"{v:.2f}" for v in res.attack_recovered[:, ai].mean(axis=0))
              + f"; span drowns below eps = {res.eps_example[ai]:.3g}")
    ax.set_xscale("log")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel(f"per-upload budget epsilon (delta = {p.delta:g})")
    ax.set_ylabel("fraction of the batch recovered")
    ax.legend(fontsize=9)
    return fig


def _noised_spectrum(epsilon: float, M: int, N: int, r: float, K: int, delta: float,
                     seed: int) -> dict[str, Any]:
    """The numbers :func:`noised_spectrum_view` draws and :func:`noised_spectrum_table` lists."""
    from fedlam import data, khat, metrics, operators, privacy

    M, N, K = int(M), int(N), int(K)
    rng = np.random.default_rng(seed)
    xi = data.random_archetypes(K, N, rng)
    ex, _ = data.sample_examples(xi, M, r, np.full(K, 1.0 / K), rng)
    J = operators.hebbian(ex)
    sigma = privacy.noise_scale(M, epsilon, delta, N=N)
    Jn = privacy.gaussian_mechanism(J, M, epsilon, delta, seed + 1)
    vals = np.linalg.eigvalsh(Jn)[::-1]
    s2 = N * sigma * sigma
    res = privacy.factorize_noised(Jn, seed + 2, components=[khat.Component((1 - r * r) / N, N / M)],
                                   noise_sigma=sigma)
    n_att = 0
    if M <= N // 4:
        found = privacy.reconstruct_examples(Jn, M, seed + 3, noise_sigma=sigma, restarts=64, patience=1)
        if found.shape[0]:
            n_att = int((np.abs(found.astype(np.int64) @ ex.T.astype(np.int64)) == N).any(axis=0).sum())
    return {"M": M, "N": N, "K": K, "sigma": sigma, "vals": vals,
            "edge": privacy.noisy_edge(r, N, M, s2), "out": privacy.noisy_outlier(r, 1.0 / K, N, M, s2),
            "eps_star": privacy.epsilon_threshold(r, 1.0 / K, N, M, delta), "k_hat": res.k_hat,
            "m": metrics.magnetization(res.patterns, xi), "n_att": n_att}


def noised_spectrum_view(epsilon: float = 2.0, M: int = 400, N: int = 400, r: float = 0.7, K: int = 3,
                         delta: float = 1e-5, seed: int = 0, *, show_numbers: bool = True) -> Any:
    """One client's upload through the Gaussian mechanism: its spectrum against the predictions.

    Histogram of the eigenvalues of the noised operator, the predicted edge of the MP ⊞
    semicircle bulk and the predicted outliers (:func:`fedlam.privacy.noisy_outlier`), and in
    the title what the server recovers (K-hat, magnetizations) and what the attack recovers.
    Prints the same numbers unless ``show_numbers`` is False (then
    :func:`noised_spectrum_table` lists them).
    """
    _check_flag(show_numbers)
    d = _noised_spectrum(epsilon, M, N, r, K, delta, seed)
    M, N, K = d["M"], d["N"], d["K"]
    vals, edge, out, m = d["vals"], d["edge"], d["out"], d["m"]
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    ax.hist(vals, bins=80, color="#999999")
    ax.axvline(edge, color="black", ls="--", lw=1.2, label=f"predicted bulk edge {edge:.3g}")
    if out[1] > 0:
        ax.axvline(out[0], color=plotting.COLORS.get("ours", "#0072B2"), lw=1.5,
                   label=f"predicted outlier {out[0]:.3g} (overlap$^2$ {out[1]:.2f})")
    ax.set_yscale("log")
    ax.set_xlabel("eigenvalue of the noised upload (J units)")
    ax.set_ylabel("count")
    ax.set_title(f"eps = {epsilon:g} (threshold {d['eps_star']:.3g}): K-hat = {d['k_hat']}, "
                 f"m = {' '.join(f'{v:.2f}' for v in m)}", fontsize=10)
    ax.legend(fontsize=9)
    if show_numbers:
        top = " ".join(f"{v:.4f}" for v in vals[: K + 1])
        print(f"sigma = {d['sigma']:.3g}; top eigenvalues {top}; predicted edge {edge:.4f}, outlier "
              f"{out[0]:.4f}; K-hat = {d['k_hat']}; attack recovers {d['n_att']} of {M} examples"
              + ("" if M <= N // 4 else " (attack not run for M > N/4)"))
    return fig


def noised_spectrum_table(epsilon: float = 2.0, M: int = 400, N: int = 400, r: float = 0.7, K: int = 3,
                          delta: float = 1e-5, seed: int = 0) -> Any:
    """The numbers of :func:`noised_spectrum_view` at the same arguments, as a titled table.

    Rows: the K + 1 leading eigenvalues of the noised upload, the predicted outlier and bulk
    edge (:func:`fedlam.privacy.noisy_outlier`, :func:`fedlam.privacy.noisy_edge`), the server's
    K-hat and magnetizations, and how many examples the attack recovers (run only for
    M <= N/4). Derived in {ref}`sec-privacy-frontier`.
    """
    from fedlam.experiments._common import TitledTable

    d = _noised_spectrum(epsilon, M, N, r, K, delta, seed)
    M, N, K = d["M"], d["N"], d["K"]
    rows = [
        (f"leading eigenvalues (K + 1 = {K + 1})", " ".join(f"{v:.4f}" for v in d["vals"][: K + 1])),
        ("predicted outlier, bulk edge", f"{d['out'][0]:.4f}, {d['edge']:.4f}"),
        ("server: K-hat; m", f"{d['k_hat']}; " + " ".join(f"{v:.2f}" for v in d["m"])),
        ("attack: examples recovered",
         f"{d['n_att']} of {M}" if M <= N // 4 else "not run (M > N/4)"),
    ]
    title = (f"One noised upload at eps = {epsilon:g}, M = {M} (sigma = {d['sigma']:.3g}, "
             f"threshold eps* = {d['eps_star']:.3g})")
    return TitledTable(title, rows, ("quantity", "value"))


def plot_client_frontier(res: Any, *, show_numbers: bool = True) -> Any:
    """Smallest number of clients against the client-level budget (log-log): the noisy-BBP
    transition and the recovery threshold (lines), the simulated smallest L (points).
    Prints the plotted numbers unless ``show_numbers`` is False (the book's privacy chapter
    lists them in a table, {ref}`sec-privacy-client`)."""
    _check_flag(show_numbers)
    eps = np.asarray(res.epsilons)
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot(eps, res.L_transition, "--", color="grey", label="transition (archetype visible)")
    ax.plot(eps, res.L_recovery, "-", color=plotting.COLORS["theory"], label="predicted, recovery at m = 0.95")
    sim = np.asarray(res.L_simulated)
    ok = sim > 0
    ax.plot(eps[ok], sim[ok], "o", color=plotting.COLORS["ours"], label="simulated smallest L (m >= 0.95)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"client-level budget epsilon (one round, delta = {res.delta:g})")
    ax.set_ylabel("clients L")
    ax.legend(fontsize=9)
    if not show_numbers:
        return fig
    print("epsilon:      " + " ".join(f"{e:7.2f}" for e in eps))
    print("L transition: " + " ".join(f"{v:7d}" for v in res.L_transition))
    print("L recovery:   " + " ".join(f"{v:7d}" for v in res.L_recovery))
    print("L simulated:  " + " ".join(f"{v:7d}" for v in sim))
    return fig
