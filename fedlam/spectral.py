"""Spectral tools of the server: spectra, the dreaming flow, K-hat, the spectral gap.

The server holds a symmetric operator ``J`` (the mean of the clients' Hebbian operators
``eta^T eta / (N M)``, possibly blended with broadcast pattern operators). Everything the
pipeline needs from ``J`` is spectral. This module is the public face of three topics, each
in a module of its own (the names below are re-exported here, so ``fedlam.spectral.X`` keeps
working):

* spectra: :func:`spectrum`, :func:`top_spectrum`, :class:`Spectrum` (reproducible
  eigenvector signs), :func:`spectral_gap`;
* the dreaming flow, :mod:`fedlam.dreaming`: :func:`dream`, :func:`dream_eigenvalues`,
  :func:`dream_literal` (derived in {ref}`sec-dreaming-flow`);
* K-hat, :mod:`fedlam.khat`: :func:`estimate_k` and the estimators it dispatches to, the
  free-convolution edge of heterogeneous aggregates (derived in {ref}`sec-mp` and
  {ref}`sec-bbp-threshold`).

Conventions: eigenvalues are float64 in *descending* order, eigenvectors are the matching
columns of an (N, k) array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedlam._eig import Spectrum, _check_values, _eig_full, _eig_top
from fedlam._validation import check_choice, check_operator, check_positive_int
from fedlam.dreaming import ZERO_RTOL, dream, dream_eigenvalues, dream_literal
from fedlam.khat import (
    K_METHODS,
    BulkComponent,
    Component,
    KHatResult,
    bulk_moments,
    client_noise_var,
    components_from_uploads,
    estimate_k,
    fit_component,
    free_edge,
    free_mp_edge,
    free_mp_tw_scale,
    free_tw_scale,
    k_hat_components,
    k_hat_fixed,
    k_hat_free,
    k_hat_mp,
    k_hat_shuffle,
    k_hat_tw,
    kurtosis_edge_shift,
    outlier_overlaps,
    pm1_kurtosis,
)

__all__ = [
    "Spectrum",
    "KHatResult",
    "spectrum",
    "top_spectrum",
    "dream_eigenvalues",
    "dream",
    "dream_literal",
    "bulk_moments",
    "k_hat_fixed",
    "k_hat_mp",
    "k_hat_shuffle",
    "k_hat_tw",
    "Component",
    "free_edge",
    "free_tw_scale",
    "free_mp_edge",
    "free_mp_tw_scale",
    "k_hat_components",
    "components_from_uploads",
    "client_noise_var",
    "outlier_overlaps",
    "kurtosis_edge_shift",
    "pm1_kurtosis",
    "BulkComponent",
    "fit_component",
    "k_hat_free",
    "estimate_k",
    "spectral_gap",
    "K_METHODS",
    "ZERO_RTOL",
]


def spectrum(J: np.ndarray) -> Spectrum:
    """Full eigendecomposition of a symmetric operator (one ``scipy.linalg.eigh`` call, driver evd).

    Parameters
    ----------
    J : numpy.ndarray
        float (N, N) symmetric, finite, N >= 2.

    Returns
    -------
    Spectrum
        All N eigenpairs, eigenvalues in descending order.
    """
    check_operator(J, "J")
    return _eig_full(J)



def top_spectrum(J: np.ndarray, k: int, method: str = "auto") -> Spectrum:
    """The ``k`` largest eigenpairs, with ``trace`` and ``sum_sq`` of the whole operator.

    ``trace`` and ``sum_sq`` make the bulk estimators (:func:`k_hat_mp`, :func:`k_hat_tw`)
    exact on a partial spectrum: the mean and variance of the eigenvalues left after the
    top ``k`` follow from them.

    Parameters
    ----------
    J : numpy.ndarray
        float (N, N) symmetric.
    k : int
        Number of leading eigenpairs, ``1 <= k <= N`` (``k = N`` gives the full spectrum).
    method : {"auto", "evr", "lanczos", "block"}
        ``"evr"``: ``scipy.linalg.eigh`` with ``subset_by_index`` (one tridiagonal reduction,
        ``~N^3``, plus ``O(N^2 k)``). ``"lanczos"``: ``scipy.sparse.linalg.eigsh`` (implicitly
        restarted Lanczos, ``O(N^2)`` per iteration, a few hundred matrix-vector products),
        with a fixed start vector so that results are reproducible; falls back to evr if it
        does not converge. ``"block"``: the server's block Krylov solver (a few products of
        ``J`` with ``N x (k + 8)`` blocks), which converges the vectors of the spikes to
        ``1e-10`` and the other values to a fraction of a Tracy-Widom scale of the bulk's
        edge -- what the K-hat rules read -- and reports ``residuals``; it falls back to
        Lanczos when it does not converge within its cap (derived in {ref}`sec-cost-block`).
        ``"auto"``: Lanczos when ``N >= 500`` and ``k <= N / 10``, else evr (every pair to
        rounding).
    """
    check_operator(J, "J")
    N = J.shape[0]
    k = check_positive_int(k, "k")
    method = check_choice(method, "method", ("auto", "evr", "lanczos", "block"))
    if k > N:
        raise ValueError(f"k must be <= N = {N}, got {k}")
    return _eig_top(J, k, method)



def spectral_gap(values: Any, k: int) -> float:
    """Relative gap ``(lam_k - lam_{k+1}) / lam_k`` after the ``k``-th largest eigenvalue.

    Parameters
    ----------
    values : numpy.ndarray or Spectrum
        Eigenvalues (any order; sorted descending here).
    k : int
        ``0 <= k < len(values)``; ``k = 0`` (nothing detected) returns NaN.
    """
    if isinstance(values, Spectrum):
        vals = values.values
    else:
        vals = np.sort(_check_values(values))[::-1]
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    k = int(k)
    if k < 0 or k >= vals.shape[0]:
        raise ValueError(f"k must lie in [0, {vals.shape[0] - 1}], got {k}")
    if k == 0:
        return float("nan")
    a, b = float(vals[k - 1]), float(vals[k])
    if a == 0:
        return float("nan")
    return (a - b) / a
