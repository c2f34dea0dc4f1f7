"""Reconstruction metrics: overlaps, magnetization (matched and max), spurious count, FRO.

* :func:`overlaps` -- ``a b^T / N``.
* :func:`match` -- optimal one-to-one matching of reconstructed patterns to archetypes
  (Hungarian algorithm, {cite:p}`kuhn1955`, via ``scipy.optimize.linear_sum_assignment``).
* :func:`magnetization` -- per-archetype |overlap| under that matching.
* :func:`magnetization_max` -- the paper's eq. (3.5) (max over reconstructed patterns).
* :func:`spurious_count` -- reconstructed patterns that match no archetype.
* :func:`frobenius_error` -- the paper's eq. (3.6).

Derived in {ref}`sec-protocol` (metrics) and discussed in {ref}`sec-errata` (why the
max-overlap magnetization hides duplicates and junk).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._validation import check_in_range, check_nonneg_int, check_operator, check_pm1

__all__ = [
    "overlaps",
    "Matching",
    "match",
    "magnetization",
    "magnetization_max",
    "spurious_count",
    "frobenius_error",
    "first_round",
]


def _check_pair(patterns: np.ndarray, archetypes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    check_pm1(patterns, "patterns", ndim=2, allow_empty=True)
    check_pm1(archetypes, "archetypes", ndim=2)
    if archetypes.shape[1] < 2:
        raise ValueError(f"archetypes must have N >= 2 columns, got shape {archetypes.shape}")
    if patterns.shape[1] != archetypes.shape[1]:
        raise ValueError(
            f"patterns and archetypes must have the same N, got patterns {patterns.shape} "
            f"and archetypes {archetypes.shape}"
        )
    return patterns.astype(np.float64), archetypes.astype(np.float64)


def overlaps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Signed overlap matrix ``a b^T / N`` of two sets of +-1 patterns.

    Parameters
    ----------
    a : numpy.ndarray
        (K_a, N) +-1 (K_a = 0 allowed).
    b : numpy.ndarray
        (K_b, N) +-1 (K_b = 0 allowed).

    Returns
    -------
    numpy.ndarray
        float64 (K_a, K_b), entries in [-1, 1].
    """
    check_pm1(a, "a", ndim=2, allow_empty=True)
    check_pm1(b, "b", ndim=2, allow_empty=True)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must have the same N, got a {a.shape} and b {b.shape}")
    N = a.shape[1]
    if N < 1:
        raise ValueError(f"a and b must have N >= 1 columns, got shape {a.shape}")
    return a.astype(np.float64) @ b.astype(np.float64).T / N


@dataclass(frozen=True)
class Matching:
    """Optimal one-to-one matching of reconstructed patterns to archetypes.

    Attributes
    ----------
    pattern_index, archetype_index : numpy.ndarray
        int64 arrays of equal length min(K_hat, K): pattern ``pattern_index[i]`` is matched
        to archetype ``archetype_index[i]``.
    abs_overlap : numpy.ndarray
        float64 |overlap| of each matched pair.
    overlap_matrix : numpy.ndarray
        The full signed (K_hat, K) overlap matrix.
    """

    pattern_index: np.ndarray
    archetype_index: np.ndarray
    abs_overlap: np.ndarray
    overlap_matrix: np.ndarray


def match(patterns: np.ndarray, archetypes: np.ndarray) -> Matching:
    """Match reconstructed patterns to archetypes one-to-one, maximising the total |overlap|.

    Uses ``scipy.optimize.linear_sum_assignment`` (Hungarian algorithm, {cite:p}`kuhn1955`)
    on the (K_hat, K) matrix of absolute overlaps (a pattern and its negative are the same
    memory). With K_hat != K, min(K_hat, K) pairs are formed. Derived in {ref}`sec-protocol`.

    Parameters
    ----------
    patterns : numpy.ndarray
        (K_hat, N) +-1, K_hat = 0 allowed.
    archetypes : numpy.ndarray
        (K, N) +-1, K >= 1.

    Returns
    -------
    Matching
    """
    P, A = _check_pair(patterns, archetypes)
    O = P @ A.T / A.shape[1]
    if P.shape[0] == 0:
        e = np.empty(0, dtype=np.int64)
        return Matching(e, e.copy(), np.empty(0), O)
    from scipy.optimize import linear_sum_assignment  # here: importing metrics stays cheap

    rows, cols = linear_sum_assignment(np.abs(O), maximize=True)
    return Matching(rows.astype(np.int64), cols.astype(np.int64), np.abs(O[rows, cols]), O)


def magnetization(patterns: np.ndarray, archetypes: np.ndarray) -> np.ndarray:
    """Per-archetype magnetization under the optimal one-to-one matching.

    ``m_mu = |xi_hat^{nu(mu)} . xi^mu| / N`` where nu is the matching of :func:`match`;
    archetypes left unmatched (K_hat < K, in particular K_hat = 0) get 0. Unlike the
    paper's eq. (3.5) (:func:`magnetization_max`), one reconstructed pattern cannot
    count for two archetypes. Derived in {ref}`sec-protocol`.

    Parameters
    ----------
    patterns : numpy.ndarray
        (K_hat, N) +-1, K_hat = 0 allowed.
    archetypes : numpy.ndarray
        (K, N) +-1.

    Returns
    -------
    numpy.ndarray
        float64 (K,), entries in [0, 1].
    """
    m = match(patterns, archetypes)
    out = np.zeros(archetypes.shape[0])
    out[m.archetype_index] = m.abs_overlap
    return out


def magnetization_max(patterns: np.ndarray, archetypes: np.ndarray) -> np.ndarray:
    """The paper's magnetization (eq. (3.5)): ``max_nu |xi_hat^nu . xi^mu| / N``.

    The same reconstructed pattern may serve several archetypes (e.g. a mixture state
    with overlap 0.5 on three archetypes scores 0.5 on each). K_hat = 0 gives zeros.
    Derived in {ref}`sec-protocol`.

    Returns
    -------
    numpy.ndarray
        float64 (K,).
    """
    P, A = _check_pair(patterns, archetypes)
    if P.shape[0] == 0:
        return np.zeros(A.shape[0])
    return np.abs(P @ A.T / A.shape[1]).max(axis=0)


def spurious_count(patterns: np.ndarray, archetypes: np.ndarray, threshold: float = 0.5) -> int:
    """Number of reconstructed patterns that do not stand for any archetype.

    A pattern is *genuine* if the optimal one-to-one matching (:func:`match`) pairs it
    with an archetype at |overlap| >= ``threshold``; every other pattern is spurious --
    mixtures, junk, and duplicates beyond the first copy of an archetype (only one copy
    can be matched). So ``spurious_count = K_hat - #genuine``. Derived in {ref}`sec-protocol`.

    Parameters
    ----------
    patterns : numpy.ndarray
        (K_hat, N) +-1.
    archetypes : numpy.ndarray
        (K, N) +-1.
    threshold : float
        |overlap| in (0, 1] needed for a match to count. Default 0.5 (a random pattern
        has |overlap| ~ 1/sqrt(N); a symmetric 3-mixture has 0.5 with each of its parts,
        so it counts as genuine for at most one of them).

    Returns
    -------
    int
    """
    threshold = check_in_range(threshold, "threshold", 0.0, 1.0, low_open=True)
    m = match(patterns, archetypes)
    return int(patterns.shape[0] - np.count_nonzero(m.abs_overlap >= threshold))


def frobenius_error(J: np.ndarray, J_star: np.ndarray) -> float:
    """Normalised Frobenius error ``||J - J*||_F / ||J*||_F`` (paper eq. (3.6)).

    Derived in {ref}`sec-protocol`.

    Parameters
    ----------
    J, J_star : numpy.ndarray
        Finite float (N, N) operators of the same shape; ``J_star`` must not be zero.

    Returns
    -------
    float
    """
    check_operator(J, "J", symmetric=False)
    check_operator(J_star, "J_star", symmetric=False)
    if J.shape != J_star.shape:
        raise ValueError(f"J and J_star must have the same shape, got {J.shape} and {J_star.shape}")
    den = float(np.linalg.norm(J_star))
    if den == 0.0:
        raise ValueError("J_star must be non-zero (the error is relative to ||J_star||_F), got the zero matrix")
    return float(np.linalg.norm(J - J_star)) / den


def first_round(flags: np.ndarray, start: int) -> float:
    """Rounds from ``start`` to the first round ``t >= start`` with ``flags[t]`` true (a latency:
    0 when ``flags[start]`` holds); NaN if no such round.

    Parameters
    ----------
    flags : numpy.ndarray
        (T,) per-round truth values (anything ``astype(bool)`` reads as such).
    start : int
        First round counted, ``0 <= start``.
    """
    check_nonneg_int(start, "start")
    f = np.asarray(flags)
    if f.ndim != 1:
        raise ValueError(f"flags must be a 1-d (T,) array, got shape {f.shape}")
    idx = np.flatnonzero(f.astype(bool)[start:])
    return float(idx[0]) if idx.size else float("nan")
