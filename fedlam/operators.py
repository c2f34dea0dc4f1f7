"""Synaptic operators: client Hebbian kernels, broadcast kernels, aggregation, blending.

Normalisation (used everywhere in fedlam): ``J = eta^T eta / (N M)``, so ``J_ii = 1/N`` and
``N J`` is the sample second-moment matrix of the examples, with

    E[N J] = (1 - r^2) I + N r^2 sum_mu pi_mu u_mu u_mu^T,   u_mu = xi^mu / sqrt(N).

* :func:`hebbian` -- paper eq. (2.5) (Derived in {ref}`sec-hebb`).
* :func:`pattern_operator` -- ``xi^T xi / N``, paper eq. (2.2) (Derived in {ref}`sec-hopfield`).
* :func:`pseudo_inverse_kernel` -- the Kanter-Sompolinsky projector (Derived in {ref}`sec-pseudo-inverse`).
* :func:`aggregate` -- server mean, paper eq. (3.2) (Derived in {ref}`sec-protocol`).
* :func:`blend` -- client convex combination, paper eq. (3.4) (Derived in {ref}`sec-protocol`).
* :func:`expected_operator` -- ``E[J]`` in closed form (Derived in {ref}`sec-spiked`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._validation import (
    _describe,
    check_in_range,
    check_operator,
    check_pm1,
    check_prob_vector,
    check_quality,
)
from .data import _check_alloc

__all__ = [
    "hebbian",
    "pattern_operator",
    "pseudo_inverse_kernel",
    "aggregate",
    "blend",
    "expected_operator",
]

# float32 holds every integer of magnitude <= 2**24 exactly.
_F32_EXACT = 2**24


def hebbian(examples: np.ndarray) -> np.ndarray:
    """Client Hebbian operator ``J = eta^T eta / (N M)`` (paper eq. (2.5)).

    Derived in {ref}`sec-hebb`.

    Parameters
    ----------
    examples : numpy.ndarray
        (M, N) array of +-1 (int8 recommended), ``M >= 1``, ``N >= 2``.

    Returns
    -------
    numpy.ndarray
        float64 (N, N), symmetric, diagonal exactly 1/N.

    Notes
    -----
    Computed as one BLAS product. The examples are converted once to float32 when
    ``M <= 2**24`` (otherwise float64): every entry of ``eta^T eta`` is a sum of M terms
    +-1, and every partial sum is an integer of magnitude <= M <= 2**24, which float32
    represents exactly -- so the float32 product is exact whatever the summation order
    of the BLAS, and the result is exactly symmetric. The integer matrix is then converted
    to float64 and divided by N M (one rounding per entry).

    An empty batch (M = 0) has no Hebbian operator: a ``ValueError`` is raised and the
    caller (a federation client) decides what an empty round means.
    """
    check_pm1(examples, "examples", ndim=2, allow_empty=True)
    M, N = examples.shape
    if N < 2:
        raise ValueError(f"examples must have N >= 2 columns, got shape {examples.shape}")
    if M == 0:
        raise ValueError(f"examples is an empty batch (M = 0 rows, shape {examples.shape}); "
                         "the Hebbian operator needs at least one example")
    dtype = np.float32 if M <= _F32_EXACT else np.float64
    isz = np.dtype(dtype).itemsize
    # peak: the converted examples, the Gram matrix in that dtype, its float64 copy and the result
    _check_alloc(M * N * isz + N * N * (isz + 16), 1,
                 f"examples of shape (M, N) = ({M}, {N}) (the examples as floats and three N x N matrices)")
    X: np.ndarray = examples.astype(dtype)
    G = X.T @ X
    return G.astype(np.float64) / (float(N) * float(M))


def pattern_operator(patterns: np.ndarray) -> np.ndarray:
    """Broadcast operator ``xi^T xi / N`` of a set of +-1 patterns (paper eq. (2.2)).

    Derived in {ref}`sec-hopfield`.

    Parameters
    ----------
    patterns : numpy.ndarray
        (K, N) +-1 array. K = 0 (shape (0, N)) is allowed and gives the zero matrix.

    Returns
    -------
    numpy.ndarray
        float64 (N, N).
    """
    check_pm1(patterns, "patterns", ndim=2, allow_empty=True)
    K, Nn = patterns.shape
    if Nn < 2:
        raise ValueError(f"patterns must have N >= 2 columns, got shape {patterns.shape}")
    # peak: the patterns as float64 (twice) and the result
    _check_alloc(8 * (2 * K * Nn + Nn * Nn), 1,
                 f"patterns of shape (K, N) = ({K}, {Nn}) (the patterns as floats and one N x N matrix)")
    if K == 0:
        return np.zeros((Nn, Nn))
    X = patterns.astype(np.float64)
    # X.T @ X of one buffer would go to SYRK and a transposed copy of its triangle; two buffers
    # go to GEMM. The products are exact integers, so dividing in place gives the same numbers
    # as (X.T @ X) / N without a second (N, N) array (about half the time at N = 10,000).
    G = X.T @ X.copy()
    G /= Nn
    return G


def pseudo_inverse_kernel(patterns: np.ndarray, rtol: float = 1e-10) -> np.ndarray:
    """Kanter-Sompolinsky (pseudo-inverse) kernel ``J_KS = Xi^T C^{-1} Xi / N``.

    ``C = Xi Xi^T / N`` is the (K, K) overlap matrix; ``J_KS`` is the orthogonal projector
    onto the span of the patterns (paper eq. (2.15)). Derived in {ref}`sec-pseudo-inverse`.

    Parameters
    ----------
    patterns : numpy.ndarray
        (K, N) +-1 array; K = 0 gives the zero matrix.
    rtol : float
        Eigenvalues of C below ``rtol * max eigenvalue`` are treated as zero (linearly
        dependent patterns, e.g. duplicates): the result is then the projector onto the
        span, computed with the pseudo-inverse of C.

    Returns
    -------
    numpy.ndarray
        float64 (N, N), symmetric, idempotent.

    Notes
    -----
    Computed as ``A^T A`` with ``A = Lambda^{-1/2} V^T Xi / sqrt(N)`` from the eigen
    decomposition ``C = V Lambda V^T`` (only a K x K eigenproblem), which is symmetric by
    construction.
    """
    check_pm1(patterns, "patterns", ndim=2, allow_empty=True)
    K, N = patterns.shape
    if N < 2:
        raise ValueError(f"patterns must have N >= 2 columns, got shape {patterns.shape}")
    rtol = check_in_range(rtol, "rtol", 0.0, 1.0, low_open=True)
    if K == 0:
        return np.zeros((N, N))
    X = patterns.astype(np.float64)
    C = X @ X.T / N
    w, V = np.linalg.eigh(C)
    keep = w > rtol * w[-1]
    A = (V[:, keep] / np.sqrt(w[keep])).T @ X / np.sqrt(N)
    return A.T @ A


def _as_operator_stack(operators: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    if isinstance(operators, np.ndarray):
        if operators.ndim != 3:
            raise ValueError(f"operators must be an (L, N, N) array or a list of (N, N) arrays, "
                             f"got shape {operators.shape}")
        mats = [operators[i] for i in range(operators.shape[0])]
    elif isinstance(operators, Sequence) and not isinstance(operators, (str, bytes)):
        mats = list(operators)
    else:
        raise TypeError(f"operators must be an (L, N, N) array or a list of (N, N) arrays, got {_describe(operators)}")
    if len(mats) == 0:
        raise ValueError("operators must contain at least one operator, got none")
    shape = None
    for i, m in enumerate(mats):
        check_operator(m, f"operators[{i}]")
        if shape is None:
            shape = m.shape
        elif m.shape != shape:
            raise ValueError(f"operators must all have the same shape; operators[0] is {shape}, "
                             f"operators[{i}] is {m.shape}")
    return mats


def aggregate(
    operators: np.ndarray | Sequence[np.ndarray],
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """Server aggregation: the mean (paper eq. (3.2)) or a weighted mean.

    Derived in {ref}`sec-protocol`.

    Parameters
    ----------
    operators : (L, N, N) numpy.ndarray or list of (N, N) arrays
        Symmetric, finite float operators.
    weights : numpy.ndarray, optional
        (L,) non-negative weights summing to 1 (e.g. ``M_c / sum M_c`` to weight clients
        by batch size). ``None``: equal weights 1/L, as in the paper.

    Returns
    -------
    numpy.ndarray
        float64 (N, N).
    """
    mats = _as_operator_stack(operators)
    L = len(mats)
    w = None if weights is None else check_prob_vector(weights, "weights", size=L)
    return _aggregate(mats, w)


def _aggregate(mats: Sequence[np.ndarray], w: np.ndarray | None) -> np.ndarray:
    """:func:`aggregate` of validated operators (no checks; ``w`` None means equal weights)."""
    L = len(mats)
    if w is None:
        w = np.full(L, 1.0 / L)
    out = np.zeros(mats[0].shape, dtype=np.float64)
    # out += w * m in row blocks of about 1 MB, every operator's block while the block of the
    # sum is in cache: the same numbers (the same additions in the same order) in one pass over
    # the sum, without an (N, N) temporary (a round's peak memory counts it)
    n = len(out)
    step = max(1, 2**17 // max(1, n))
    terms = [(float(wi), m) for wi, m in zip(w, mats, strict=True) if wi != 0.0]
    for a in range(0, n, step):
        block = out[a : a + step]
        for wi, m in terms:
            block += wi * m[a : a + step]
    return out


def blend(local: np.ndarray, server: np.ndarray, w: float) -> np.ndarray:
    """Client convex combination ``w * local + (1 - w) * server`` (paper eq. (3.4)).

    Derived in {ref}`sec-protocol`.

    Parameters
    ----------
    local, server : numpy.ndarray
        Symmetric float operators of the same shape (N, N).
    w : float
        Plasticity weight in [0, 1] (1 = keep only the fresh local operator).

    Returns
    -------
    numpy.ndarray
        float64 (N, N).
    """
    check_operator(local, "local")
    check_operator(server, "server")
    if local.shape != server.shape:
        raise ValueError(f"local and server must have the same shape, got {local.shape} and {server.shape}")
    w = check_in_range(w, "w", 0.0, 1.0)
    return _blend(local, server, w)


def _blend(local: np.ndarray, server: np.ndarray, w: float) -> np.ndarray:
    """:func:`blend` of validated operators (no checks)."""
    out = np.multiply(local, w, dtype=np.float64)
    out += (1.0 - w) * server
    return out


def expected_operator(archetypes: np.ndarray, r: float, pi: np.ndarray) -> np.ndarray:
    """Exact expectation ``E[J]`` of the Hebbian operator of examples drawn i.i.d. from pi.

    ``E[J] = ((1 - r^2) I + r^2 sum_mu pi_mu xi^mu xi^mu^T) / N``: off the diagonal
    ``E[eta_i eta_j] = r^2 xi_i xi_j`` (independent flips), on the diagonal
    ``eta_i^2 = 1``, so ``E[J]_ii = 1/N`` exactly. Equivalently ``E[N J] = (1 - r^2) I +
    N r^2 sum_mu pi_mu u_mu u_mu^T`` with unit vectors ``u_mu = xi^mu / sqrt(N)`` -- the
    factor N the paper's eq. (4.1) omits. Derived in {ref}`sec-spiked`.

    Parameters
    ----------
    archetypes : numpy.ndarray
        (K, N) +-1.
    r : float
        Quality in (0, 1].
    pi : numpy.ndarray
        (K,) probability vector (the mixture of the batch).

    Returns
    -------
    numpy.ndarray
        float64 (N, N).

    Notes
    -----
    E[J] is linear in pi, so for a server mean of L clients with equal r and equal batch
    sizes, ``E[J_s] = expected_operator(archetypes, r, pi_t)`` with ``pi_t`` the client
    average of the mixtures (paper eq. (2.23)). This is the teacher
    operator J* of the Frobenius error for a synthetic round.
    """
    check_pm1(archetypes, "archetypes", ndim=2)
    K, N = archetypes.shape
    if N < 2:
        raise ValueError(f"archetypes must have N >= 2 columns, got shape {archetypes.shape}")
    r = check_quality(r)
    p = check_prob_vector(pi, "pi", size=K)
    # peak: the archetypes as float64, their weighted transpose, the product and the result
    _check_alloc(8 * (2 * K * N + 2 * N * N), 1,
                 f"archetypes of shape (K, N) = ({K}, {N}) (two K x N float copies and two N x N matrices)")
    X = archetypes.astype(np.float64)
    E = (X.T * (r * r * p)) @ X
    E[np.diag_indices(N)] = 1.0  # (1 - r^2) + r^2 sum_mu pi_mu = 1
    return E / N
