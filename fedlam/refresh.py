r"""Refreshing stored patterns from the fresh part of the mean (the default under privacy).

Under example-level privacy the server's acceptance is the paper's (single noised uploads
certify nothing, :func:`fedlam.federation.default_acceptance`). That acceptance stores an
archetype in the first round the mean detects it, while its spike is still weak and a few of
its bits are wrong; the clients then blend that stored version ``a`` back into every upload,
and while their mean weight stays below :func:`fedlam.controller.correction_weight` the
version ``a`` is a fixed point of the sign step: the memory keeps the noisy bits for good.

The server can see past its own echo. Every honest upload is ``w_c B_c + (1 - w_c) A`` plus
noise, so the mean ``J = sum_c omega_c U_c`` minus ``c A`` with ``c = sum_c omega_c (1 - w_c)``
(scalars every upload declares, available under secure aggregation too) is the *fresh mean*
``F = sum_c omega_c w_c B_c`` plus noise: the evidence of this round alone. Along the stored
patterns ``P`` (rows ``a_k``) with Gram matrix ``G = P P^T / N``,

    U = F P^T G^{-1},   column k = s_k xi_k + noise   when ``F = sum_k s_k xi_k xi_k^T / N``
    and the stored patterns are the archetypes,

so the correlated archetypes' cross-talk cancels (the pseudo-inverse of the paper's dreaming
operator, applied to the stored patterns only). The sign of column ``k`` is the archetype that
the fresh data hold along ``a_k``. It replaces ``a_k`` only when it is *certain*: the expected
number of wrong signs ``N Phi(-mean|u| / std|u|)`` (a Gaussian noise of the column) is below
``max_flips``, it agrees with ``a_k`` on at least three quarters of the sites (overlap >= 0.5)
and it is nearer to ``a_k`` than to every other stored pattern (no two stored patterns merge).
An archetype that stops appearing in the data has ``s_k = 0``: its column is noise, the test
fails and the stored version stays (retention, the point of the drift experiment).
Derived in {ref}`sec-privacy-weight`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.linalg

from ._validation import _describe, check_in_range, check_operator_shape, check_pm1

__all__ = ["echo_weight", "refresh_patterns"]


def echo_weight(uploads: Sequence[Any], weights: np.ndarray | None = None) -> float:
    """The share ``c = sum_c omega_c (1 - w_c)`` of the broadcast in the mean of the uploads.

    ``w_c`` is each upload's declared blend weight (NaN, a client that did not blend, counts
    as 1), ``omega_c`` the aggregation weights (None: equal). Derived in {ref}`sec-privacy-weight`.
    """
    from .robust import _fresh_weight

    L = len(uploads)
    if L == 0:
        raise ValueError("uploads must hold at least one upload")
    om = np.full(L, 1.0 / L) if weights is None else np.asarray(weights, dtype=np.float64)
    if om.shape != (L,):
        raise ValueError(f"weights must have shape ({L},), got {_describe(weights)}")
    return float(sum(float(o) * (1.0 - _fresh_weight(u)) for o, u in zip(om, uploads, strict=True)))


def refresh_patterns(J: np.ndarray, broadcast: np.ndarray, patterns: np.ndarray, echo: float, *,
                     max_flips: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Replace every stored pattern by the sign of the fresh mean along it, where that sign is certain.

    Parameters
    ----------
    J : numpy.ndarray
        (N, N) mean of the uploads.
    broadcast : numpy.ndarray
        (N, N) the broadcast ``A`` the clients blended into their uploads.
    patterns : numpy.ndarray
        (K', N) +-1 patterns the server is about to store.
    echo : float
        ``c`` of :func:`echo_weight`, in [0, 1]: the fresh mean is ``J - c A``.
    max_flips : float
        Largest expected number of wrong signs (``N Phi(-SNR)``) of a replacement.

    Returns
    -------
    patterns : numpy.ndarray
        (K', N) int8, the refreshed patterns (the input's values where nothing was certain).
    changed : numpy.ndarray
        (K',) int, number of sites each pattern changed.

    Derived in {ref}`sec-privacy-weight`.
    """
    check_operator_shape(J, "J")
    N = J.shape[0]
    check_operator_shape(broadcast, "broadcast")
    if broadcast.shape != J.shape:
        raise ValueError(f"broadcast must have shape {J.shape} like J, got {broadcast.shape}")
    check_pm1(patterns, "patterns", ndim=2, allow_empty=True)
    if patterns.shape[1] != N:
        raise ValueError(f"patterns must be (K', {N}), got shape {patterns.shape}")
    check_in_range(echo, "echo", 0.0, 1.0)
    check_in_range(max_flips, "max_flips", 0.0, None, low_open=True)
    K = patterns.shape[0]
    out = np.array(patterns, dtype=np.int8)
    changed = np.zeros(K, dtype=np.int64)
    if K == 0:
        return out, changed
    P = out.T.astype(np.float64)                      # (N, K')
    U = J @ P - echo * (broadcast @ P)                # F P^T
    G = P.T @ P / N
    try:
        U = scipy.linalg.solve(G, U.T, assume_a="pos").T   # F P^T G^{-1}
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
        pass                                          # singular Gram: the plain projections
    overlaps = P.T @ np.where(U >= 0.0, 1.0, -1.0) / N   # (K', K'): stored j vs candidate k
    for k in range(K):
        u = U[:, k]
        x = np.where(u > 0.0, 1, np.where(u < 0.0, -1, out[k])).astype(np.int8)
        au = np.abs(u)
        spread = float(au.std())
        snr = float(au.mean()) / spread if spread > 0.0 else math.inf
        flips = N * 0.5 * math.erfc(snr / math.sqrt(2.0))
        d = int(np.count_nonzero(x != out[k]))
        own = overlaps[k, k]
        others = np.delete(np.abs(overlaps[:, k]), k)
        if d and flips < max_flips and own >= 0.5 and (others.size == 0 or others.max() < own):
            out[k] = x
            changed[k] = d
    return out, changed
