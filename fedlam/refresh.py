r"""Refreshing stored patterns from the fresh part of the mean (``acceptance="refresh"``) or from
every leave-one-out voter (the default under example-level privacy, ``acceptance="voted"``).

Under example-level privacy single noised uploads certify nothing
(:func:`fedlam.federation.default_acceptance`), and the paper's acceptance stores an
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

The refresh reads the plain mean, so one client can steer it: a near-copy of an archetype
writes its own bits into the stored version (a test shows it). :func:`refresh_voted` asks
several voters instead -- the leave-out means of the support defence
(``defense_params={"groups": "leave-out"}``, which the server then refreshes with) -- and
replaces a pattern only where all of them give the same certain signs.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.linalg

from ._validation import _describe, check_in_range, check_operator_shape, check_pm1

__all__ = ["echo_weight", "merge_versions", "refresh_patterns", "refresh_voted"]


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
    out = np.array(patterns, dtype=np.int8)
    if out.shape[0] == 0:
        return out, np.zeros(0, dtype=np.int64)
    P = out.T.astype(np.float64)                      # (N, K')
    return _replace(out, [J @ P - echo * (broadcast @ P)], max_flips)


def refresh_voted(uploads: Sequence[Any], broadcast: np.ndarray, patterns: np.ndarray, voters: Sequence[Sequence[int]],
                  *, max_flips: float = 0.05, weights: np.ndarray | None = None,
                  products: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`refresh_patterns` that every voter must agree on: robust to the uploads a voter leaves out.

    Each voter is a list of upload indices (e.g. :func:`fedlam.robust.voting_groups` with
    ``"leave-out"``); its fresh mean is the equal mean of its members' fresh parts
    ``U_c - (1 - w_c) A`` (with ``weights``, the server's aggregation weights renormalised over
    the voter's members: the weighted mean). A pattern is replaced only when every voter's sign along it is certain
    and all give the same pattern: ``k < s`` attackers are all left out of one voter of the
    leave-``(s - 1)``-out family, so a site whose sign they alone turn (a near-copy's bits, a
    fake's cross-talk) is not certain in that voter, or not equal, and stays as stored.

    Parameters
    ----------
    uploads : sequence of Upload
        The round's uploads, each with its (N, N) ``operator`` and its ``weight``.
    broadcast, patterns, max_flips
        As :func:`refresh_patterns`.
    voters : sequence of sequence of int
        The voters' members (non-empty, indices into ``uploads``).
    weights : numpy.ndarray or None
        (L,) non-negative aggregation weights (None: equal).
    products : fedlam.robust.SpanProducts or None
        The round's products with the stored span, kept by the support test
        (``RobustAggregate.products``): a pattern in that span costs no pass over an (N, N)
        operator; the others are multiplied as without it. None: every product computed here.

    Returns
    -------
    patterns, changed
        As :func:`refresh_patterns`.

    Derived in {ref}`sec-robust-privacy`.
    """
    from .robust import SpanProducts, VoterMeans, _fresh_weight

    check_operator_shape(broadcast, "broadcast")
    N = broadcast.shape[0]
    check_pm1(patterns, "patterns", ndim=2, allow_empty=True)
    if patterns.shape[1] != N:
        raise ValueError(f"patterns must be (K', {N}), got shape {patterns.shape}")
    check_in_range(max_flips, "max_flips", 0.0, None, low_open=True)
    if len(uploads) == 0:
        raise ValueError("uploads must hold at least one upload")
    if not voters or any(len(v) == 0 or any(not 0 <= c < len(uploads) for c in v) for v in voters):
        raise ValueError(f"voters must be non-empty lists of upload indices in [0, {len(uploads)}), got {voters!r}")
    om = None
    if weights is not None:
        om = np.asarray(weights, dtype=np.float64)
        if om.shape != (len(uploads),) or not np.all(np.isfinite(om)) or np.any(om < 0):
            raise ValueError(f"weights must be None or ({len(uploads)},) finite non-negative, got {_describe(weights)}")
        if np.all(om == om[0]):
            om = None                      # equal weights: the equal mean
    ops = []
    for c, u in enumerate(uploads):
        op = getattr(u, "operator", None)
        check_operator_shape(op, f"uploads[{c}].operator")
        assert isinstance(op, np.ndarray)  # checked above
        if op.shape != broadcast.shape:
            raise ValueError(f"uploads[{c}].operator must have shape {broadcast.shape}, got {op.shape}")
        ops.append(op)
    if products is not None and not (isinstance(products, SpanProducts) and products.belongs_to(ops, broadcast)):
        raise ValueError("products must be None or the SpanProducts of these uploads' operators and this "
                         f"broadcast (RobustAggregate.products of the same round), got {_describe(products)}")
    out = np.array(patterns, dtype=np.int8)
    if out.shape[0] == 0:
        return out, np.zeros(0, dtype=np.int64)
    P = out.T.astype(np.float64)
    AP = broadcast @ P if products is None else products.times(None, P)
    parts: dict[int, np.ndarray] = {}      # each upload's fresh part, once (voters share them)

    def part(c: int) -> np.ndarray:
        if c not in parts:
            UP = ops[c] @ P if products is None else products.times(c, P)
            parts[c] = UP - (1.0 - _fresh_weight(uploads[c])) * AP
        return parts[c]

    voter_means = VoterMeans(part, [True] * len(uploads), om)
    means = []
    for v in voters:
        Y = voter_means.mean(v)
        if Y is None:
            return out, np.zeros(out.shape[0], dtype=np.int64)   # a voter with no say: nothing certain
        means.append(Y)
    return _replace(out, means, max_flips)


def _replace(out: np.ndarray, products: Sequence[np.ndarray], max_flips: float) -> tuple[np.ndarray, np.ndarray]:
    """Replace ``out[k]`` (in place) where every product ``F P^T`` gives one certain sign pattern."""
    N, K = out.shape[1], out.shape[0]
    P = out.T.astype(np.float64)
    G = P.T @ P / N
    try:
        # G^{-1} once (Cholesky: refuses a singular Gram), then one small product per voter; a
        # solve with N right-hand sides per voter took 3-20 ms after the round's large BLAS calls
        Ginv = scipy.linalg.cho_solve(scipy.linalg.cho_factor(G), np.eye(K))
        Ginv = 0.5 * (Ginv + Ginv.T)
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
        Ginv = None                                            # singular Gram: the plain projections
    candidates, certain = [], np.ones(K, dtype=bool)
    for U in products:
        if Ginv is not None:
            U = U @ Ginv                                       # F P^T G^{-1}
        au = np.abs(U)
        spread = au.std(axis=0)
        snr = np.where(spread > 0.0, au.mean(axis=0) / np.where(spread > 0.0, spread, 1.0), np.inf)
        flips = np.array([N * 0.5 * math.erfc(float(z) / math.sqrt(2.0)) for z in snr])
        certain &= flips < max_flips
        candidates.append(np.where(U > 0.0, 1, np.where(U < 0.0, -1, out.T)).astype(np.int8).T)   # (K', N)
    x = candidates[0]
    agree = [all(np.array_equal(c[k], x[k]) for c in candidates[1:]) for k in range(K)]
    overlaps = P.T @ x.T.astype(np.float64) / N              # (K', K'): stored j vs candidate k
    changed = np.zeros(K, dtype=np.int64)
    for k in range(K):
        d = int(np.count_nonzero(x[k] != out[k]))
        own = overlaps[k, k]
        others = np.delete(np.abs(overlaps[:, k]), k)
        if d and certain[k] and agree[k] and own >= 0.5 and (others.size == 0 or others.max() < own):
            out[k] = x[k]
            changed[k] = d
    return out, changed


def _check_memory(stored: Any, precision: Any, N: int | None = None) -> np.ndarray:
    """Validate a server's stored patterns and their precisions (``Server.round``'s ``stored``
    and ``precision``): ``stored`` (S, N) +-1 (``N`` when given), ``precision`` an (S,) numeric
    array of finite bounds >= 0. Returns the precision as float64."""
    check_pm1(stored, "stored", ndim=2, allow_empty=True)
    if N is not None and stored.shape[1] != N:
        raise ValueError(f"stored must be (S, {N}) patterns like this round's, got shape {stored.shape}")
    S = stored.shape[0]
    if (not isinstance(precision, np.ndarray) or precision.shape != (S,) or precision.dtype == np.bool_
            or not np.issubdtype(precision.dtype, np.number) or not np.all(np.isfinite(precision))
            or np.any(precision < 0)):
        raise ValueError(f"precision must be a ({S},) array of finite bounds >= 0, one per stored pattern, "
                         f"got {_describe(precision)}")
    return precision.astype(np.float64)


def merge_versions(patterns: np.ndarray, bounds: np.ndarray, stored: np.ndarray,
                   precision: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge the versions of one archetype among a round's patterns; return them with their precision.

    Every pattern carries its *precision*: the bits noise may have flipped in it when it was
    found. A stored pattern (equal, up to sign, to a row of ``stored``) keeps the precision it
    was admitted with (``precision``); a new one has its bound this round (``bounds``,
    :func:`fedlam.lam.noise_flip_bound`). Of two patterns that differ in ``d`` bits, the less
    precise one (precision ``b``) is a version of the more precise one when ``d <= b``: its
    differences are what the noise it was found under may have flipped. It leaves, and the more
    precise one stays (the most precise first, greedily). Two patterns farther apart than the
    less precise one's bound are two patterns, and both stay: a retired archetype admitted
    precisely beside a correlated new one is kept. With the retention rule of
    ``lam._Memory`` (a candidate within the *current* noise bound of a stored
    pattern is replaced by it) this is one rule: the more precise version stays.

    Parameters
    ----------
    patterns : numpy.ndarray
        (K', N) +-1 int8: the round's accepted patterns.
    bounds : numpy.ndarray
        (K',) their noise-flip bounds this round (:func:`fedlam.lam.noise_flip_bound`).
    stored : numpy.ndarray
        (S, N) +-1 int8: the patterns the server stored last round.
    precision : numpy.ndarray
        (S,) their precisions (finite, >= 0).

    Returns
    -------
    patterns, precision
        The merged (K'', N) int8 patterns (in their order) and their (K'',) precisions.

    Derived in {ref}`sec-exp-drift-duplicates`.
    """
    check_pm1(patterns, "patterns", ndim=2, allow_empty=True)
    N = patterns.shape[1]
    pr = _check_memory(stored, precision, N)
    b = np.asarray(bounds, dtype=np.float64)
    if b.shape != (patterns.shape[0],) or not np.all(np.isfinite(b)) or np.any(b < 0):
        raise ValueError(f"bounds must be ({patterns.shape[0]},) finite >= 0, got {_describe(bounds)}")
    X = np.array(patterns, dtype=np.int8)
    K = X.shape[0]
    if K == 0:
        return X, b.copy()
    Xf = X.astype(np.float64)
    prec = b.copy()
    if stored.shape[0]:
        same = np.abs(Xf @ stored.T.astype(np.float64)) == N                   # (K', S)
        prec = np.where(same.any(axis=1), np.where(same, pr[None, :], np.inf).min(axis=1), b)
    flips = 0.5 * (N - np.abs(Xf @ Xf.T))                                       # (K', K')
    keep = np.ones(K, dtype=bool)
    for i in np.argsort(prec, kind="stable"):                                  # the most precise first
        if not keep[i]:
            continue
        drop = keep & (prec > prec[i]) & (flips[i] <= prec)
        drop[i] = False
        keep &= ~drop
    return np.ascontiguousarray(X[keep]), prec[keep]
