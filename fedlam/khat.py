"""How many archetypes does an operator hold? The K-hat machinery of the server.

``K_hat`` is the number of eigenvalues of the server operator ``J`` that stand out of its
noise bulk. The bulk of one client's Hebbian operator ``eta^T eta / (N M)`` is ``(1 - r^2)/N``
times a Marchenko-Pastur (MP) law of ratio ``q = N/M`` while a signal eigenvalue sits near
``r^2 pi_mu``, so any fixed threshold on an unnormalised spectrum is wrong by a scale; the
estimators here are scale-aware. Derived in {ref}`sec-mp` and {ref}`sec-bbp-threshold`.

Single operators
    :func:`k_hat_mp` (MP edge of the bulk estimated from the spectrum itself, the default of
    :func:`fedlam.lam.factorize`), :func:`k_hat_tw` (Tracy-Widom test), :func:`k_hat_shuffle`
    (the paper's shuffle null, corrected), :func:`k_hat_fixed` (the paper's fixed ``tau`` on
    the dreamed spectrum, kept to show that it detects nothing on raw example kernels).

Aggregates of many clients
    The server's ``J = sum_c omega_c U_c`` mixes clients whose bulks differ (an honest client
    at r = 0.9 has bulk variance 0.19, a pure-noise client 1, a client that uploads the
    broadcast none) and whose batches may be tiny (rank-deficient uploads, ``q_c >> 1``). Its
    bulk is the *free additive convolution* of the clients' scaled MP laws -- and, when the
    clients add Gaussian noise for privacy, of a semicircle. :func:`free_edge` returns the
    right edge of that law from one :class:`Component` (scale, ratio) per client plus the
    noise variance; :func:`components_from_uploads` builds them from per-client *scalars*
    (batch size, blend weight, the client's bulk variance, its privacy noise) that cross the
    wire with every upload (:class:`fedlam.protocol.Upload`), so the server's cost does not
    grow with the number of clients beyond summing the uploads, and the rule also works when
    the server sees only the sum (secure aggregation). :func:`k_hat_components` counts the
    eigenvalues above that edge plus a Tracy-Widom margin. :func:`k_hat_free` is the older
    rule that fits each upload's bulk from its own top eigenvalues (:func:`fit_component`):
    it needs every upload and fails for uploads of a few examples, which have no bulk to fit.

Conventions: eigenvalues are float64 in *descending* order; eigenvalues below
``ZERO_RTOL * max|lam|`` (:data:`fedlam.dreaming.ZERO_RTOL`) are exact zeros at rounding
level, never spikes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg  # scipy.optimize / scipy.sparse.linalg load on first use (a Flower site needs neither)

from fedlam._eig import Spectrum, _as_spectrum, _check_spectrum_of, _check_values, _eig_full, _top_values_spectrum
from fedlam._validation import (
    as_rng,
    check_choice,
    check_count,
    check_in_range,
    check_operator,
    check_pm1,
    check_positive_int,
    check_real,
)
from fedlam.dreaming import ZERO_RTOL, dream_eigenvalues

__all__ = [
    "K_METHODS",
    "KHatResult",
    "bulk_moments",
    "k_hat_mp",
    "k_hat_tw",
    "k_hat_fixed",
    "k_hat_shuffle",
    "Component",
    "free_edge",
    "free_tw_scale",
    "free_mp_edge",
    "free_mp_tw_scale",
    "k_hat_components",
    "components_from_uploads",
    "client_noise_var",
    "pm1_kurtosis",
    "kurtosis_edge_shift",
    "outlier_overlaps",
    "BulkComponent",
    "fit_component",
    "k_hat_free",
    "estimate_k",
]

K_METHODS = ("mp", "fixed", "shuffle", "tw", "free")

#: Largest number of shuffles of :func:`k_hat_shuffle` (each one an eigenvalue computation).
MAX_NULL = 10_000

#: Bulk scales ``|a_c| q_c`` and ``a_c^2 q_c`` of a Component must lie within
#: ``[1/_COMPONENT_RANGE, _COMPONENT_RANGE]``: the edge's root search works in ``G ~ 1/(a q)``
#: and would under- or overflow beyond (rescale the operator instead).
_COMPONENT_RANGE = 1e250


# K-hat estimators
@dataclass(frozen=True)
class KHatResult:
    """Result of a K-hat estimator.

    Attributes
    ----------
    k_hat : int
        Number of eigenvalues detected above the noise.
    threshold : float
        The cut, in the units of the eigenvalues it was applied to (raw ``J`` for
        mp/tw/shuffle, dreamed values for fixed).
    sigma2 : float
        Estimated bulk variance of the rescaled operator ``N J`` (``1 - r^2`` for a
        Hebbian operator of examples); NaN when not estimated.
    q : float
        Estimated effective aspect ratio ``N / M``; NaN when not estimated.
    method : str
    details : dict
        Method-specific extras (margin, null samples, edge, ...).
    """

    k_hat: int
    threshold: float
    sigma2: float
    q: float
    method: str
    details: dict = field(default_factory=dict)


def bulk_moments(spec: Spectrum, k: int) -> tuple[float, float]:
    """Mean and variance of the N - k eigenvalues left after removing the top ``k``.

    Uses ``trace`` and ``sum_sq`` of the whole operator, so a partial spectrum suffices.
    Zero eigenvalues (rank deficiency, ``M < N``) belong to the bulk: the Marchenko-Pastur
    law with ratio ``q > 1`` has an atom ``1 - 1/q`` at zero, and with it its mean is
    ``sigma^2`` and its variance ``sigma^4 q`` for every ``q``. Derived in {ref}`sec-mp`.
    """
    if not isinstance(spec, Spectrum):
        raise TypeError(f"spec must be a Spectrum, got {type(spec).__name__}")
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if k < 0 or k >= spec.n or k > len(spec):
        raise ValueError(f"k must lie in [0, min(N - 1, {len(spec)})] for this spectrum, got {k}")
    m, v = _bulk_profile(spec, int(k))
    return float(m[k]), float(v[k])


def _bulk_profile(spec: Spectrum, kmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Bulk mean and variance for k = 0..kmax (vectorised :func:`bulk_moments`).

    With a complete spectrum the suffix sums of the eigenvalues themselves are used (no
    cancellation); with a partial one, ``trace`` and ``sum_sq`` minus the top ones. A bulk
    whose mean is below ``ZERO_RTOL * max|lam|`` is numerically empty (exact zeros up to
    rounding) and gets mean and variance 0.
    """
    n = spec.n - np.arange(kmax + 1)
    if spec.complete:
        tail = spec.values[::-1]
        s1 = np.cumsum(tail)[::-1][: kmax + 1]
        s2 = np.cumsum(tail * tail)[::-1][: kmax + 1]
    else:
        vals = spec.values[:kmax]
        s1 = spec.trace - np.concatenate([[0.0], np.cumsum(vals)])
        s2 = spec.sum_sq - np.concatenate([[0.0], np.cumsum(vals * vals)])
    m = s1 / n
    v = np.maximum(s2 / n - m * m, 0.0)
    tiny = ZERO_RTOL * max(float(np.abs(spec.values).max(initial=0.0)), 1e-300)
    empty = m <= tiny
    return np.where(empty, 0.0, m), np.where(empty, 0.0, v)


def _tw_rel_scale(n: float, q: np.ndarray) -> np.ndarray:
    """Johnstone's Tracy-Widom scale divided by the MP edge, for N = n and M = n / q.

    ``mu = (sqrt M + sqrt N)^2 / M``, ``s = (sqrt M + sqrt N)(1/sqrt M + 1/sqrt N)^{1/3} / M``
    give ``s / mu = (1/sqrt M + 1/sqrt N)^{1/3} / (sqrt M + sqrt N)``.
    """
    q = np.maximum(q, 1e-12)
    sm = np.sqrt(n / q)
    sn = math.sqrt(n)
    return (1.0 / sm + 1.0 / sn) ** (1.0 / 3.0) / (sm + sn)


def _largest_passing(vals: np.ndarray, thr: np.ndarray) -> int:
    """Largest k >= 1 with vals[k-1] > thr[k] (thr[k] from the bulk without the top k), else 0."""
    kk = np.arange(1, vals.shape[0] + 1)
    ok = vals > thr[kk]
    return int(kk[ok].max()) if ok.any() else 0


def _default_kmax(n: int, max_k: int | None) -> int:
    if max_k is None:
        return max(1, n // 4)
    max_k = check_positive_int(max_k, "max_k")
    if max_k > max(1, n // 2):
        # with fewer than N/2 eigenvalues left the bulk's mean and variance no longer estimate
        # the noise: scanning k up to N - 1 reads any spectrum as N - 1 outliers
        raise ValueError(f"max_k must be <= N // 2 = {max(1, n // 2)} (the bulk must keep at least half "
                         f"of the N = {n} eigenvalues), got {max_k}")
    return max_k


#: max|lam| outside [2**-_SAFE_EXP, 2**_SAFE_EXP]: the bulk moments (squares of eigenvalues)
#: would under- or overflow, and the estimators rescale by an exact power of two first.
_SAFE_EXP = 200


def _pow2_scaled(spec: Spectrum) -> tuple[Spectrum, float]:
    """``(spec / s, s)`` with ``s = 2**e`` bringing max|lam| into [0.5, 1) when it lies outside
    ``2**(+-_SAFE_EXP)``; ``(spec, 1.0)`` otherwise (no change for ordinary operators).

    A power of two is exact in floating point, so K-hat is the same at every scale."""
    top = float(np.abs(spec.values).max(initial=0.0))
    e = math.frexp(top)[1]
    if top == 0.0 or abs(e) <= _SAFE_EXP:
        return spec, 1.0
    sc = math.ldexp(1.0, e)
    vals = spec.values / sc
    sum_sq = float(vals @ vals) if spec.complete else spec.sum_sq / sc / sc
    return Spectrum(vals, spec.vectors, spec.n, spec.trace / sc, sum_sq), sc


def _unscaled(res: KHatResult, sc: float) -> KHatResult:
    """A K-hat result computed on ``spec / sc`` expressed in the units of ``spec``."""
    details = dict(res.details)
    if "edge" in details:
        details["edge"] = details["edge"] * sc
    if "noise_var" in details:
        details["noise_var"] = details["noise_var"] * sc * sc
    return dataclasses.replace(res, threshold=res.threshold * sc, sigma2=res.sigma2 * sc, details=details)


def k_hat_mp(
    values: Any,
    q: float | None = None,
    margin: float | None = None,
    max_k: int | None = None,
    n_sigma: float = 4.0,
    noise_var: float = 0.0,
) -> KHatResult:
    """K-hat from the Marchenko-Pastur edge of an estimated bulk (scale-free).

    For each candidate ``k`` the bulk is the ``N - k`` eigenvalues left after removing the
    top ``k`` (zeros included). Its mean ``m`` estimates ``sigma^2/N`` and, because the MP law
    has variance ``sigma^4 q``, its variance ``v`` gives the effective aspect ratio
    ``q_hat = v / m^2`` (unless ``q`` is given). The edge is ``m (1 + sqrt q_hat)^2`` and the
    k-th eigenvalue is an outlier if it exceeds ``edge (1 + margin)``. ``K_hat`` is the
    largest ``k <= max_k`` passing this test: spikes left in the bulk inflate its variance
    and hide each other (with ``K`` exact patterns the bulk at ``k = 0`` has ``q_hat ~ N/K``
    and an edge above 1), so scanning from the top and stopping at the first failure would
    miss them; with the spikes removed the bulk statistics are those of the noise. (The
    fixed-point iteration ``k <- #{lam > edge(bulk without the top k)}`` started at
    ``k = 0`` stops at the *smallest* fixed point, which is 0 for an exact Hebbian kernel;
    scanning every ``k <= max_k`` finds the largest consistent one. On pure Wishart noise
    ``lam_k / edge_k`` stays below ~1.03 for every k up to N/4 at N = 400, q = 0.2 and 2.)

    Eigenvalues below ``1e-8 max|lam|`` are exact zeros and never outliers. An exact
    Hebbian kernel ``xi^T xi / N`` has no bulk at all: K_hat is then its rank R (if
    ``R <= max_k``). The same holds for the Hebbian operator of R < N/4 pure-noise examples:
    ``eta^T eta / (N R)`` *is*, up to the factor 1/R, the Hebbian kernel of R random
    patterns, and no spectral rule can tell the two apart. With ``R > max_k`` (default
    ``N/4``) a rank-deficient operator is read as noise. Derived in {ref}`sec-mp` and {ref}`sec-bbp-threshold`.

    Parameters
    ----------
    values : numpy.ndarray or Spectrum
        Eigenvalues of the raw operator ``J`` (any order) or a (partial) Spectrum.
    q : float or None
        Known aspect ratio ``N / M``; None estimates it from the bulk (needed after
        blending/aggregation, where ``N / M`` is not the effective ratio).
    margin : float or None
        Relative safety margin above the edge. None: ``n_sigma`` Tracy-Widom scales
        (Johnstone 2001) at the estimated ``q``, about 2.6 % at N = 400, q = 0.2 and 5.8 %
        at N = 400, q = 2 -- the finite-N fluctuation of the largest bulk eigenvalue.
    max_k : int or None
        Largest K considered (default ``N // 4``; a rank-deficient noise operator with rank
        above this is read as noise).
    n_sigma : float
        Width of the automatic margin in Tracy-Widom scales (default 4).
    noise_var : float
        Eigenvalue variance of symmetric Gaussian noise known to be in the operator
        (``N sigma^2`` for entry std ``sigma``, e.g. a differentially private upload). The
        bulk is then ``MP ⊞ semicircle``: free cumulants add, so the MP part has the bulk's
        mean and its variance minus ``noise_var``, and the edge is :func:`free_edge` of the
        two with the Tracy-Widom margin of its curvature.

    Returns
    -------
    KHatResult
        ``sigma2`` and ``q`` are the bulk estimates at ``k = k_hat`` (of the MP part).
    """
    spec = _as_spectrum(values, "values")
    if q is not None:
        q = check_in_range(q, "q", 0.0, None, low_open=True)
    if margin is not None:
        margin = check_in_range(margin, "margin", 0.0, None)
    n_sigma = check_in_range(n_sigma, "n_sigma", 0.0, None)
    nv = check_in_range(noise_var, "noise_var", 0.0, None)
    if math.isinf(nv):
        raise ValueError(f"noise_var must be finite, got {noise_var!r}")
    spec, sc = _pow2_scaled(spec)
    if sc != 1.0:
        return _unscaled(k_hat_mp(spec, q, margin, max_k, n_sigma, nv / sc / sc), sc)
    kmax = min(_default_kmax(spec.n, max_k), spec.n - 1, len(spec))
    m, v = _bulk_profile(spec, kmax)
    if nv > 0:
        v = np.maximum(v - nv, 0.0)  # the semicircle's variance adds to the MP part's
    with np.errstate(divide="ignore", invalid="ignore"):
        qh = np.where(m > 0, v / np.maximum(m * m, 1e-300), 0.0) if q is None else np.full_like(m, q)
    if nv > 0:
        edge = np.empty_like(m)
        rel = np.empty_like(m)
        for i in range(m.shape[0]):
            e, _, x2 = _free_edge(np.array([m[i]]), np.array([max(qh[i], 1e-12)]), nv)
            edge[i] = e
            rel[i] = n_sigma * _tw_scale_from_curvature(x2, spec.n) / e if (margin is None and e > 0) else (
                margin if margin is not None else 0.0)
    else:
        edge = m * (1.0 + np.sqrt(qh)) ** 2
        rel = _tw_rel_scale(spec.n, qh) * n_sigma if margin is None else np.full_like(m, margin)
    floor = ZERO_RTOL * max(float(np.abs(spec.values).max(initial=0.0)), 1e-300)
    thr = np.maximum(edge * (1.0 + rel), floor)
    k = _largest_passing(spec.values[:kmax], thr)
    return KHatResult(
        k_hat=k,
        threshold=float(thr[k]),
        sigma2=float(m[k] * spec.n),
        q=float(qh[k]),
        method="mp",
        details={"edge": float(edge[k]), "margin": float(rel[k]), "max_k": kmax, "noise_var": nv},
    )


def _johnstone_float(n: int, M: float) -> tuple[float, float]:
    """Johnstone's centring and scaling (``"half"`` variant of
    :func:`fedlam.rmt.johnstone_center_scale`) at a real-valued sample size ``M >= 2``.

    The formulas are smooth in ``M``; an *effective* sample size estimated from the bulk
    (``N / q_hat``, e.g. 7.11) is used as it is instead of being rounded to an int.
    """
    M = max(2.0, M)
    m, nn = M - 0.5, n - 0.5
    a = math.sqrt(m) + math.sqrt(nn)
    return a * a / M, a * (1.0 / math.sqrt(m) + 1.0 / math.sqrt(nn)) ** (1.0 / 3.0) / M


def k_hat_tw(
    values: Any,
    N: int | None = None,
    M_eff: float | None = None,
    alpha: float = 0.05,
    max_k: int | None = None,
) -> KHatResult:
    """K-hat from a Tracy-Widom test on the largest remaining eigenvalue (Johnstone 2001).

    For each candidate ``k`` the bulk mean ``m`` (top ``k`` removed) sets the noise scale,
    and eigenvalue ``k`` is an outlier when ``lam_k / m`` exceeds Johnstone's centring plus
    the ``1 - alpha`` quantile of TW1 times his scaling, for an ``N x M_eff`` white Wishart
    (in units of ``N J / sigma^2``, from :func:`fedlam.rmt.johnstone_center_scale`).
    ``M_eff`` defaults to ``N / q_hat`` with ``q_hat`` the moment estimate of
    :func:`k_hat_mp`. K_hat is the largest passing ``k <= max_k`` (see :func:`k_hat_mp` for
    why). Derived in {ref}`sec-bbp-threshold`.

    Parameters
    ----------
    values : numpy.ndarray or Spectrum
        Eigenvalues of ``J`` or a Spectrum.
    N : int or None
        Dimension (defaults to the spectrum's).
    M_eff : float or None
        Effective number of examples, a real number > 0 (not necessarily an integer: after
        aggregation or blending it is an effective sample size); None estimates it as
        ``N / q_hat``. Johnstone's centring and scaling are evaluated at this real value
        (values below 2 are raised to 2).
    alpha : float
        Test level in (0, 1).
    max_k : int or None
        Largest K considered (default ``N // 4``).
    """
    from fedlam import rmt

    spec = _as_spectrum(values, "values")
    if N is not None:
        N = check_positive_int(N, "N", minimum=2)
        if N != spec.n:
            raise ValueError(f"N must equal the dimension of the spectrum ({spec.n}), got {N}")
    alpha = check_in_range(alpha, "alpha", 0.0, 1.0, low_open=True, high_open=True)
    if M_eff is not None:
        M_eff = check_in_range(M_eff, "M_eff", 0.0, None, low_open=True)
    spec, sc = _pow2_scaled(spec)
    if sc != 1.0:
        return _unscaled(k_hat_tw(spec, N, M_eff, alpha, max_k), sc)
    kmax = min(_default_kmax(spec.n, max_k), spec.n - 1, len(spec))
    m, v = _bulk_profile(spec, kmax)
    x = float(rmt.tw1_quantile(1.0 - alpha))
    if M_eff is None:
        qh = np.where(m > 0, v / np.maximum(m * m, 1e-300), 0.0)
        Ms = np.where(qh > 0, spec.n / np.maximum(qh, 1e-300), np.inf)
    else:
        Ms = np.full_like(m, M_eff)
    cut = np.empty_like(m)
    for i, Mi in enumerate(Ms):
        if not np.isfinite(Mi) or Mi > 1e12:
            cut[i] = 1.0  # no bulk spread: the noise is a multiple of the identity (or zero)
        else:
            mu, s = _johnstone_float(spec.n, float(Mi))
            cut[i] = mu + s * x
    floor = ZERO_RTOL * max(float(np.abs(spec.values).max(initial=0.0)), 1e-300)
    thr = np.maximum(m * cut, floor)
    k = _largest_passing(spec.values[:kmax], thr)
    return KHatResult(
        k_hat=k,
        threshold=float(thr[k]),
        sigma2=float(m[k] * spec.n),
        q=float(spec.n / Ms[k]) if np.isfinite(Ms[k]) else 0.0,
        method="tw",
        details={"alpha": alpha, "tw_quantile": x, "M_eff": float(Ms[k]), "max_k": kmax},
    )


def k_hat_fixed(values_dreamed: Any, tau: float = 0.5) -> KHatResult:
    """The paper's rule: count dreamed eigenvalues above a fixed ``tau`` (paper eq. (B.5)).

    Not scale-aware. A raw example kernel has signal eigenvalues ``~ r^2 pi_mu`` (0.21 for
    r = 0.8, K = 3), about 0.44 after the default flow ``t = 2``: below ``tau = 0.5``, so
    K_hat = 0 although the spikes are far above the BBP threshold. It works on exact
    Hebbian kernels (eigenvalues ~ 1). Derived in {ref}`sec-dreaming-stop`.

    Parameters
    ----------
    values_dreamed : numpy.ndarray or Spectrum
        Eigenvalues *after* dreaming (see :func:`fedlam.dreaming.dream_eigenvalues`).
    tau : float
        Threshold (paper: 0.5).
    """
    if isinstance(values_dreamed, Spectrum):
        vals = values_dreamed.values
    else:
        vals = _check_values(values_dreamed, "values_dreamed")
        if vals.size == 0:
            raise ValueError("values_dreamed must hold at least one eigenvalue, got an empty array")
    tau = check_real(tau, "tau")
    return KHatResult(int(np.sum(vals > tau)), tau, float("nan"), float("nan"), "fixed", {})


def _shuffle_offdiag(J: np.ndarray, iu: tuple[np.ndarray, np.ndarray], gen: np.random.Generator) -> np.ndarray:
    vals = J[iu]
    S = np.zeros_like(J)
    S[iu] = gen.permutation(vals)
    S = S + S.T
    S[np.diag_indices_from(S)] = np.diag(J)
    return S


def _top_eigenvalue(S: np.ndarray, gen: np.random.Generator) -> float:
    """Largest eigenvalue by Lanczos (``O(N^2)`` per iteration; v0 from ``gen``)."""
    N = S.shape[0]
    if N <= 3:
        return float(np.linalg.eigvalsh(S)[-1])
    w = scipy.sparse.linalg.eigsh(S, k=1, which="LA", v0=gen.standard_normal(N), tol=1e-10,
                                  return_eigenvectors=False)
    return float(w[0])


def k_hat_shuffle(
    J: np.ndarray,
    rng: np.random.Generator | int,
    n_null: int = 20,
    alpha: float = 0.01,
    mp_correction: bool = True,
    max_iter: int = 5,
    spectrum: Spectrum | None = None,
    margin: float | None = None,
    n_sigma: float = 4.0,
) -> KHatResult:
    """K-hat from a shuffle null: top eigenvalue of symmetric permutations of the off-diagonal.

    The paper's null (App. ``app:threshold``): permute the off-diagonal entries of ``J``
    (keeping symmetry and the diagonal), take the ``1 - alpha`` quantile of the largest
    eigenvalue over ``n_null`` shuffles as the cut. A shuffled matrix is a *Wigner*-type
    matrix (independent entries): its edge is ``d + 2 sqrt(N v)`` (``d`` the mean diagonal,
    ``v`` the off-diagonal variance), while a Wishart bulk ends at
    ``d (1 + sqrt q)^2 = d (1 + 2 sqrt q + q)`` with ``sqrt q = sqrt(N v) / d``. The plain
    shuffle cut is therefore too low by ``d q = N v / d`` (for pure noise at N = 400,
    q = 0.2 it cuts at 1.89 sigma^2 against an MP edge of 2.09 sigma^2 and reports several
    false spikes). With ``mp_correction`` (default) the cut is raised by ``N v / d``, and
    the null is recomputed on the operator with the detected spikes deflated (their
    eigenvalues replaced by the bulk mean) until K_hat is stable, because the spikes
    themselves inflate ``v`` (the first deflation uses the :func:`k_hat_mp` count as a
    starting point, the null then decides). The shuffled matrices fluctuate like a Wigner edge, less than
    the largest eigenvalue of a Wishart bulk (at N = 400, q = 0.2 the null maxima spread by
    about 0.5 % while the top bulk eigenvalue sits 0.8 % above the MP edge in a typical
    draw), so the corrected cut also gets the relative ``margin`` of :func:`k_hat_mp`
    (default: ``n_sigma`` Tracy-Widom scales). ``mp_correction=False`` is the paper's
    literal rule (one pass, no correction, no margin). Costs ``n_null`` extra
    top-eigenvalue computations per pass.
    Derived in {ref}`sec-mp`.

    Parameters
    ----------
    J : numpy.ndarray
        float (N, N) symmetric operator (the raw one: shuffling needs the entries).
    rng : numpy.random.Generator or int
    n_null : int
        Number of shuffles.
    alpha : float
        Level; the cut is the ``1 - alpha`` empirical quantile.
    mp_correction : bool
        Add the Wishart-vs-Wigner shift and iterate with deflation (see above).
    max_iter : int
        Maximum deflation passes.
    spectrum : Spectrum or None
        A complete spectrum of ``J`` to reuse.
    margin : float or None
        Relative margin added to the corrected cut (None: ``n_sigma`` TW scales).
    n_sigma : float
        See :func:`k_hat_mp`.
    """
    check_operator(J, "J")
    gen = as_rng(rng)
    n_null = check_count(n_null, "n_null", MAX_NULL, why="each null sample is one eigenvalue computation")
    alpha = check_in_range(alpha, "alpha", 0.0, 1.0, low_open=True, high_open=True)
    if not isinstance(mp_correction, (bool, np.bool_)):
        raise TypeError(f"mp_correction must be a bool, got {type(mp_correction).__name__}")
    max_iter = check_positive_int(max_iter, "max_iter")
    if margin is not None:
        margin = check_in_range(margin, "margin", 0.0, None)
    n_sigma = check_in_range(n_sigma, "n_sigma", 0.0, None)
    N = J.shape[0]
    if spectrum is not None:
        if not isinstance(spectrum, Spectrum):
            raise TypeError(f"spectrum must be a Spectrum of J or None, got {type(spectrum).__name__} {spectrum!r:.60}")
        if spectrum.n != N:
            raise ValueError(f"spectrum must be the spectrum of J (N = {N}), got N = {spectrum.n}")
        _check_spectrum_of(spectrum, J)
    if spectrum is None or not spectrum.complete:
        spec = _eig_full(J)
    else:
        if spectrum.n != N:
            raise ValueError(f"spectrum must be the spectrum of J (N = {N}), got N = {spectrum.n}")
        spec = spectrum
    iu = np.triu_indices(N, 1)
    # start the deflation from the MP count: strong spikes inflate the off-diagonal
    # variance of the undeflated operator so much that its null hides them all (an exact
    # Hebbian kernel would give K_hat = 0 at the first pass)
    k = k_hat_mp(spec).k_hat if mp_correction else 0
    floor = ZERO_RTOL * max(float(np.abs(spec.values).max(initial=0.0)), 1e-300)
    thr = float("inf")
    nulls = np.empty(0)
    shift = 0.0
    for _ in range(max_iter if mp_correction else 1):
        if k == 0:
            R = J
        else:
            m, _v = bulk_moments(spec, k)
            Vk = spec.vectors[:, :k]
            R = J + (Vk * (m - spec.values[:k])) @ Vk.T
            R = 0.5 * (R + R.T)
        nulls = np.empty(n_null)
        for i in range(n_null):
            S = _shuffle_offdiag(R, iu, gen)
            nulls[i] = _top_eigenvalue(S, gen)
        thr = float(np.quantile(nulls, 1.0 - alpha))
        if mp_correction:
            d = float(np.mean(np.diag(R)))
            off = R[iu]
            v = float(np.mean(off * off) - np.mean(off) ** 2)
            shift = N * v / d if d > 0 else 0.0
            rel = margin if margin is not None else (
                float(_tw_rel_scale(N, np.array(N * v / (d * d) if d > 0 else 0.0))) * n_sigma)
            thr = (thr + shift) * (1.0 + rel)
        thr = max(thr, floor)
        k_new = int(np.sum(spec.values > thr))
        if k_new == k:
            break
        k = k_new
    k = int(np.sum(spec.values > thr))
    m, v = bulk_moments(spec, min(k, N - 1))
    return KHatResult(
        k_hat=k,
        threshold=thr,
        sigma2=float(m * N),
        q=float(v / (m * m)) if m > 0 else float("nan"),
        method="shuffle",
        details={"null_max": nulls, "alpha": alpha, "mp_shift": shift, "mp_correction": bool(mp_correction)},
    )


# ----------------------------------------------------------------------------------------

# heterogeneous bulks: the free additive convolution of scaled Marchenko-Pastur laws
def _check_component_arrays(scales: Any, ratios: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``scales`` (real: 0 = no bulk, < 0 = a negated component) and ``ratios`` (> 0), same length."""
    out = []
    for x, name in ((scales, "scales"), (ratios, "ratios")):
        if isinstance(x, (bool, np.bool_)):
            raise TypeError(f"{name} must be a real number or a 1-D float array, got bool {x!r}")
        if isinstance(x, (int, float, np.integer, np.floating)):
            arr = np.array([float(x)])
        elif isinstance(x, np.ndarray):
            if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
                raise TypeError(f"{name} must have a real dtype, got dtype {x.dtype}")
            if x.ndim != 1 or x.size == 0:
                raise ValueError(f"{name} must be a non-empty 1-D array, got shape {x.shape}")
            arr = x.astype(np.float64)
        else:
            raise TypeError(f"{name} must be a real number or a 1-D float array, got {type(x).__name__}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite")
        out.append(arr)
    a, q = out
    if a.shape != q.shape:
        raise ValueError(f"scales and ratios must have the same length, got {a.size} and {q.size}")
    if np.any(q <= 0):
        raise ValueError(f"ratios must be > 0, got min {float(q.min())!r}")
    return a, q


def _free_edge(a: np.ndarray, q: np.ndarray, v: float = 0.0) -> tuple[float, float, float]:
    """Right edge ``x(G*)``, the critical point ``G*`` and the curvature ``x''(G*)``.

    ``x(G) = 1/G + sum_c a_c / (1 - a_c q_c G) + v G`` (``v``: variance of an added
    semicircle, whose R-transform is ``v G``); ``G*`` is the first zero of ``x'`` on
    ``(0, 1 / max(a_c q_c))`` (unique when every ``a_c > 0``; a negative component, e.g. a
    negated upload, makes ``x'`` non-monotone, hence the scan for the first sign change).
    Components with ``a_c = 0`` have no bulk and are ignored. Without any positive component
    and without noise the bulk lies in ``(-inf, 0]`` and the edge returned is 0 (``G*``,
    curvature NaN); with noise only, the semicircle edge ``2 sqrt(v)``.

    Cached on the exact values of ``(a, q, v)``: a server round asks for the same model many
    times (the K-hat rule, the solver's bulk edge, each upload's threshold with its kurtosis
    shift and Tracy-Widom scale), and again in the next round; each is a root finding.
    """
    return _free_edge_of(tuple(map(float, a)), tuple(map(float, q)), float(v))


@functools.lru_cache(maxsize=1024)
def _free_edge_of(a_t: tuple[float, ...], q_t: tuple[float, ...], v: float) -> tuple[float, float, float]:
    """:func:`_free_edge` of exact values (the cached root finding)."""
    a, q = np.array(a_t, dtype=np.float64), np.array(q_t, dtype=np.float64)
    keep = a != 0
    a, q = a[keep], q[keep]
    b = a * q
    c = a * a * q
    if not np.any(b > 0):
        if v <= 0:
            return 0.0, float("nan"), float("nan")
        # no pole on G > 0: x' -> v > 0 as G -> inf, so the scan needs a finite bracket
        gmax = 4.0 / math.sqrt(v)
        while True:
            d_end = -1.0 / gmax**2 + float(np.sum(c / (1.0 - b * gmax) ** 2)) + v
            if d_end > 0:
                break
            gmax *= 4.0
    else:
        gmax = 1.0 / float(b.max())

    def d1(G: Any) -> Any:
        G = np.asarray(G, dtype=np.float64)
        return -1.0 / (G * G) + np.sum(c / (1.0 - np.multiply.outer(G, b)) ** 2, axis=-1) + v

    # below G_lo the -1/G^2 term dominates (x' < 0); near the pole (or, without one, at gmax) x' > 0
    g_lo = min(1e-12 * gmax, 1e-3 / math.sqrt(float(np.sum(np.abs(c))) + v + 1e-300))
    grid = np.concatenate([np.geomspace(g_lo, 0.5 * gmax, 200), gmax * (1.0 - np.geomspace(0.5, 1e-12, 160)[1:])])
    d = d1(grid)
    i = int(np.argmax(d >= 0))
    G = float(scipy.optimize.brentq(lambda g: float(d1(g)), grid[i - 1], grid[i],
                                    xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=200))
    x = 1.0 / G + float(np.sum(a / (1.0 - b * G))) + v * G
    x2 = 2.0 / G**3 + float(np.sum(2.0 * c * b / (1.0 - b * G) ** 3))
    return x, G, x2


def _tw_scale_from_curvature(x2: float, N: int) -> float:
    """``(sqrt(2 / x'') N)^(-2/3)``: Tracy-Widom scale of a soft edge (see :func:`free_mp_tw_scale`)."""
    if not np.isfinite(x2) or x2 <= 0:
        return 0.0
    return float((math.sqrt(2.0 / x2) * N) ** (-2.0 / 3.0))


def free_mp_edge(scales: Any, ratios: Any) -> float:
    """Right edge of the free additive convolution of scaled Marchenko-Pastur laws.

    Component ``c`` is the law of ``a_c W_c`` with ``W_c`` a white Wishart matrix of aspect
    ratio ``q_c`` (``M_c`` samples in dimension N, ``q_c = N / M_c``): mean ``a_c``,
    variance ``a_c^2 q_c``. The sum of independent, rotation-invariant such matrices (the
    server's aggregate of client operators built from independent batches) has, as
    ``N -> inf``, the free convolution of the component laws as its spectrum, whose right
    edge this returns. One component gives ``a (1 + sqrt q)^2``, the MP edge of
    :func:`fedlam.rmt.mp_edges`. Derived in {ref}`sec-mp` and {ref}`sec-bbp-threshold`.

    Parameters
    ----------
    scales : float or numpy.ndarray
        ``a_c``: the bulk scale of component ``c`` *as it enters the sum* (the aggregation
        weight included), e.g. ``w_c sigma_c^2`` for ``w_c N J_c`` with bulk variance
        ``sigma_c^2``. Zero means no bulk (ignored); a negative value is a negated component.
    ratios : float or numpy.ndarray
        ``q_c > 0``, same length.

    Returns
    -------
    float
        The right edge (0 when no component has a positive scale).

    Notes
    -----
    A scaled MP law is a *free Poisson* law: its R-transform (the free analogue of the
    cumulant generating function, additive under free convolution) is
    ``R_c(z) = (1/q_c) (a_c q_c) / (1 - a_c q_c z) = a_c / (1 - a_c q_c z)``: rate ``1/q_c``,
    jump ``a_c q_c``. Its expansion ``a_c + a_c^2 q_c z + ...`` gives the first two free
    cumulants, mean ``a_c`` and variance ``a_c^2 q_c``, the moments of the MP law. For
    the sum, ``R = sum_c R_c``. The Cauchy transform ``G(x) = mean of 1/(x - lambda)`` is, for
    ``x`` right of the spectrum, real and decreasing from ``+inf`` to 0, and it is the
    functional inverse of ``x(G) = 1/G + R(G)``. So ``x(G)`` decreases from ``+inf`` as ``G``
    grows from 0 until the spectrum is reached, where the inverse stops being single-valued:
    the edge is ``x(G*)`` at the first critical point ``x'(G*) = 0`` (the minimum of ``x`` on
    ``(0, 1 / max_c a_c q_c)`` when all ``a_c > 0``). For one component, ``x' = 0`` at
    ``G* = 1 / (a sqrt q (1 + sqrt q))`` and ``x(G*) = a (1 + sqrt q)^2``.

    Why it matters: a mixture of clients with bulk variances 0.19 and 1 is *not* an MP law
    with the mixture's mean and variance (moment matching). Its density has a longer right
    tail and its edge lies above the moment-matched edge ``m (1 + sqrt(v / m^2))^2``, which
    therefore counts bulk eigenvalues as spikes.
    """
    a, q = _check_component_arrays(scales, ratios)
    return _free_edge(a, q)[0]


def free_mp_tw_scale(scales: Any, ratios: Any, N: int) -> float:
    """Tracy-Widom scale of the largest bulk eigenvalue at the edge of :func:`free_mp_edge`.

    Near a soft edge ``E`` the density is ``rho(x) ~ (C / pi) sqrt(E - x)`` with
    ``C = sqrt(2 / x''(G*))`` (expand ``x(G)`` to second order around ``G*``); matching it to
    the GOE edge gives fluctuations of the largest of N eigenvalues of order
    ``s = (C N)^{-2/3}``, i.e. ``lambda_max ~ E + s TW1``. For one component this is
    Johnstone's scale ``a (1 + sqrt q)(1/sqrt M + 1/sqrt N)^{1/3} / sqrt M`` up to
    ``O(1/N)`` corrections (:func:`fedlam.rmt.johnstone_center_scale`).
    Derived in {ref}`sec-bbp-threshold`.

    Parameters
    ----------
    scales, ratios : float or numpy.ndarray
        See :func:`free_mp_edge`.
    N : int
        Dimension (number of eigenvalues), >= 2.

    Returns
    -------
    float
        ``s`` in the units of the eigenvalues (0 when there is no positive bulk).
    """
    a, q = _check_component_arrays(scales, ratios)
    N = check_positive_int(N, "N", minimum=2)
    _, _, x2 = _free_edge(a, q)
    return _tw_scale_from_curvature(x2, N)


@dataclass(frozen=True)
class Component:
    """One free-Poisson (scaled Marchenko-Pastur) summand of an aggregate's noise bulk.

    The noise of ``M`` examples with per-entry variance ``s2`` in the Hebbian operator
    ``eta^T eta / (N M)`` has an MP spectrum of mean ``s2 / N`` and ratio ``q = N / M``
    (``q > 1``: rank ``M < N``, an atom ``1 - 1/q`` at zero); entering the server's sum with
    weight ``omega`` (aggregation weight times the client's blend weight) it contributes the
    component ``(scale, ratio) = (omega s2 / N, N / M)``. Derived in {ref}`sec-bbp-threshold`.

    Attributes
    ----------
    scale : float
        Mean of the component's bulk eigenvalues as it enters the sum (J units), signed: a
        negated upload has a negative scale; 0 means no bulk (e.g. a broadcast ``xi^T xi / N``).
    ratio : float
        Aspect ratio ``q = N / M > 0``.
    kurtosis : float
        Excess kurtosis ``E z^4 / s2^2 - 3`` of the noise entries (0: Gaussian; +-1 data with
        bulk variance ``s2``: ``4 / s2 - 6``, see :func:`pm1_kurtosis`). It moves the edge of a
        finite-N aggregate at first order in ``1 / N`` (:func:`kurtosis_edge_shift`).
    """

    scale: float
    ratio: float
    kurtosis: float = 0.0

    def __post_init__(self) -> None:
        check_real(self.scale, "scale")
        check_in_range(self.ratio, "ratio", 0.0, None, low_open=True)
        if math.isinf(float(self.ratio)):
            raise ValueError(f"ratio must be finite, got {self.ratio!r}")
        check_in_range(self.kurtosis, "kurtosis", -2.0, None)


def _component_arrays(components: Any, noise_var: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """Validate a sequence of :class:`Component` and a noise variance; arrays (a, q) and v."""
    if isinstance(components, Component) or not isinstance(components, Sequence):
        raise TypeError(f"components must be a list of fedlam.khat.Component, got {type(components).__name__}")
    for i, c in enumerate(components):
        if not isinstance(c, Component):
            raise TypeError(f"components[{i}] must be a fedlam.khat.Component, got {type(c).__name__}")
    v = check_in_range(noise_var, "noise_var", 0.0, None)
    if math.isinf(v):
        raise ValueError(f"noise_var must be finite, got {noise_var!r}")
    if v > _COMPONENT_RANGE:
        raise ValueError(f"noise_var must be <= {_COMPONENT_RANGE:g} (rescale the operator), got {v!r}")
    a = np.array([float(c.scale) for c in components], dtype=np.float64)
    q = np.array([float(c.ratio) for c in components], dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        lo, hi = 1.0 / _COMPONENT_RANGE, _COMPONENT_RANGE
        for j in np.flatnonzero(a):
            i = int(j)
            b, cc = abs(a[i]) * q[i], a[i] * a[i] * q[i]
            if not (lo <= b <= hi and lo <= cc <= hi):
                raise ValueError(
                    f"components[{i}] = Component(scale={a[i]!r}, ratio={q[i]!r}) is out of range: "
                    f"|scale| ratio and scale^2 ratio must lie in [1e-250, 1e250] (got {b:.3g} and "
                    f"{cc:.3g}); rescale the operator")
    return a, q, v


def _kurtosis_of(components: Sequence[Component]) -> np.ndarray:
    return np.array([float(c.kurtosis) for c in components], dtype=np.float64)


def _edge_shift(a: np.ndarray, q: np.ndarray, k: np.ndarray, v: float, N: int) -> float:
    """First-order edge shift from the entries' fourth cumulants (see :func:`kurtosis_edge_shift`)."""
    pos = a > 0
    if not np.any(pos & (k != 0)):
        return 0.0
    edge, G, _ = _free_edge(a, q, v)
    if not (edge > 0) or not np.isfinite(G):
        return 0.0
    a, q, k = a[pos], q[pos], k[pos]
    th = a * q
    d = 1.0 - th * G
    num = 2.0 * G / N * float(np.sum(k * a * th / d**3))
    den = 1.0 + float(np.sum(a / d**2)) / edge
    return num / den


def free_edge(components: Sequence[Component], noise_var: float = 0.0) -> float:
    """Right edge of ``MP_1 ⊞ ... ⊞ MP_L ⊞ SC(noise_var)``: the noise bulk of an aggregate.

    Free additive convolution of the components' scaled MP laws (see :func:`free_mp_edge`)
    and, when the uploads carry symmetric Gaussian noise, of a semicircle law whose
    eigenvalue variance is ``noise_var`` (``N sigma^2`` for entry standard deviation
    ``sigma``; the R-transform of the semicircle is ``noise_var * G``, so it adds to the
    components' R-transforms). Pure noise gives the semicircle edge ``2 sqrt(noise_var)``;
    no component and no noise gives 0. Derived in {ref}`sec-bbp-threshold`.

    Parameters
    ----------
    components : sequence of Component
        Possibly empty.
    noise_var : float
        Eigenvalue variance ``>= 0`` of the added Gaussian noise (J units).

    Returns
    -------
    float

    Examples
    --------
    >>> round(free_edge([Component(1.0, 0.25)]), 12)  # one MP law: (1 + sqrt q)^2
    2.25
    >>> round(free_edge([], noise_var=0.25), 12)      # a semicircle of variance 1/4
    1.0
    """
    a, q, v = _component_arrays(components, noise_var)
    return _free_edge(a, q, v)[0]


def free_tw_scale(components: Sequence[Component], N: int, noise_var: float = 0.0) -> float:
    """Tracy-Widom scale of the largest bulk eigenvalue at :func:`free_edge` (see
    :func:`free_mp_tw_scale`; the semicircle term is linear in ``G`` and leaves the curvature
    formula unchanged). Derived in {ref}`sec-bbp-threshold`."""
    a, q, v = _component_arrays(components, noise_var)
    N = check_positive_int(N, "N", minimum=2)
    return _tw_scale_from_curvature(_free_edge(a, q, v)[2], N)


def kurtosis_edge_shift(components: Sequence[Component], kurtosis: Any = None, N: int | None = None,
                        noise_var: float = 0.0) -> tuple[float, float]:
    """Free edge of the components and its first-order shift from the entries' fourth cumulant.

    The free edge (:func:`free_edge`) is the limit law's. For entries with excess kurtosis
    ``k_c`` (+-1 data: ``4 / s2_c - 6``; -2 for uniform +-1) the edge of the finite-N aggregate
    moves by

    ``delta = (2 G / N) sum_c k_c a_c theta_c / (1 - theta_c G)^3 / (1 + sum_c a_c / (1 - theta_c G)^2 / edge)``

    with ``a_c`` the components' scales, ``theta_c = a_c q_c`` their jumps and ``G`` the
    critical point of the edge (first order in ``k / N``; from the fourth-cumulant term of the
    self-consistent equation of the linearised sample covariance). One component gives
    ``edge sqrt(q) k / N`` -- at r = 0.9 (k = 15), N = 300, q = 0.5 about three Tracy-Widom
    scales, which a K-hat margin of four cannot absorb; identical components give the pooled
    law's shift. With Gaussian noise in the aggregate (``noise_var > 0``, zero excess
    kurtosis) the same expression is evaluated at the critical point of the full edge.
    Derived in {ref}`sec-many-clients`.

    Parameters
    ----------
    components : sequence of Component
        Positive scales only.
    kurtosis : float, sequence of float or None
        Excess kurtosis per component (or one for all), each >= -2; None: the components' own
        ``kurtosis`` fields.
    N : int
        Dimension.
    noise_var : float
        Eigenvalue variance of added Gaussian noise.

    Returns
    -------
    (edge, shift) : tuple of float
    """
    if isinstance(components, Component) or not isinstance(components, Sequence) or not components:
        raise TypeError(f"components must be a non-empty list of fedlam.khat.Component, "
                        f"got {type(components).__name__}")
    a, q, v = _component_arrays(components, noise_var)
    N = check_positive_int(N, "N", minimum=2)
    if np.any(a <= 0):
        raise ValueError("components must have positive scales")
    if kurtosis is None:
        k = _kurtosis_of(components)
    else:
        k = np.broadcast_to(np.asarray(kurtosis, dtype=np.float64), a.shape) if np.ndim(kurtosis) == 0 \
            else np.asarray(kurtosis, dtype=np.float64)
        if k.shape != a.shape or not np.all(np.isfinite(k)) or np.any(k < -2.0):
            raise ValueError(f"kurtosis must be one number or {a.size} numbers, each >= -2, got {kurtosis!r}")
    edge = _free_edge(a, q, v)[0]
    return float(edge), float(_edge_shift(a, q, k, v, N))


def pm1_kurtosis(s2: float) -> float:
    """Excess kurtosis ``4 / s2 - 6`` of the noise of a +-1 entry with bulk variance ``s2``.

    A +-1 entry with conditional mean ``m`` has noise ``z = eta - m`` of variance
    ``s2 = 1 - m^2`` and fourth moment ``E z^4 = s2 (1 + 3 m^2)``, so
    ``E z^4 / s2^2 - 3 = (1 + 3 (1 - s2)) / s2 - 3 = 4 / s2 - 6``: 15 at r = 0.9, -2 for
    uniform noise. Derived in {ref}`sec-many-clients`.
    """
    s2 = check_in_range(s2, "s2", 0.0, 1.0, low_open=True)
    return 4.0 / s2 - 6.0


def _edge_and_scale(a: np.ndarray, q: np.ndarray, v: float, k: np.ndarray | None,
                    N: int) -> tuple[float, float, float]:
    """(edge with its kurtosis shift, the shift, Tracy-Widom scale) of the free model ``(a, q, v)``."""
    edge, _, x2 = _free_edge(a, q, v)
    shift = _edge_shift(a, q, k, v, N) if k is not None else 0.0
    return edge + shift, shift, _tw_scale_from_curvature(x2, N)


def _relative_margin(edge: float, s: float, margin: float | None, n_sigma: float) -> float:
    """The edge rules' relative margin: the count threshold is ``edge (1 + margin)``, by default
    (``margin`` None) ``n_sigma`` Tracy-Widom scales ``s`` above the edge."""
    return margin if margin is not None else (n_sigma * s / edge if edge > 0 else 0.0)


def _model_edge(components: Sequence[Component], N: int, noise_var: float = 0.0, margin: float | None = None,
                n_sigma: float = 4.0) -> tuple[float, float, float]:
    """(edge, Tracy-Widom scale, count threshold) of the bulk the K-hat rule of ``components``
    and ``noise_var`` assumes (:func:`k_hat_components`, with ``margin`` and ``n_sigma``): what
    the server's block solver relaxes below (``fedlam._eig._eig_block``'s ``bulk_edge`` and
    ``threshold``). The rule's threshold is this one or, when larger, the rounding floor of
    the spectrum it counts in."""
    a, q, v = _component_arrays(components, noise_var)
    edge, _, s = _edge_and_scale(a, q, v, _kurtosis_of(components), N)
    return float(edge), float(s), float(edge * (1.0 + _relative_margin(edge, s, margin, n_sigma)))


def _k_hat_edge(spec: Spectrum, a: np.ndarray, q: np.ndarray, v: float, margin: float | None,
                n_sigma: float, max_k: int | None, method: str, k: np.ndarray | None = None) -> KHatResult:
    """Count the eigenvalues above the free edge of ``(a, q, v)`` plus a Tracy-Widom margin."""
    N = spec.n
    edge, shift, s = _edge_and_scale(a, q, v, k, N)
    rel = _relative_margin(edge, s, margin, n_sigma)
    floor = ZERO_RTOL * max(float(np.abs(spec.values).max(initial=0.0)), 1e-300)
    thr = max(edge * (1.0 + rel), floor)
    kmax = min(_default_kmax(N, max_k), N - 1, len(spec))
    count = int(np.sum(spec.values[:kmax] > thr))
    pos = a > 0
    m_tot = float(a[pos].sum())
    v_tot = float(np.sum(a[pos] * a[pos] * q[pos]))
    q_eff = v_tot / (m_tot * m_tot) if m_tot > 0 else 0.0
    edge_mp = m_tot * (1.0 + math.sqrt(q_eff)) ** 2 if m_tot > 0 else 0.0
    # the partial spectrum may end above the threshold: the count could be limited by it
    truncated = bool(len(spec) < N and len(spec) > 0 and spec.values[len(spec) - 1] > thr
                     and count < _default_kmax(N, max_k))
    return KHatResult(
        k_hat=count,
        threshold=float(thr),
        sigma2=float(m_tot * N),
        q=float(q_eff),
        method=method,
        details={"edge": float(edge), "edge_mp": float(edge_mp), "margin": float(rel), "tw_scale": s,
                 "scales": a, "ratios": q, "noise_var": float(v), "max_k": kmax, "truncated": truncated,
                 "kurtosis_shift": float(shift)},
    )


def k_hat_components(
    values: Any,
    components: Sequence[Component],
    noise_var: float = 0.0,
    margin: float | None = None,
    n_sigma: float = 4.0,
    max_k: int | None = None,
) -> KHatResult:
    """K-hat against a noise bulk known from per-client scalars (no fit on the spectrum).

    ``K_hat`` is the number of eigenvalues of ``J`` above ``edge (1 + margin)``, the edge of
    :func:`free_edge` and by default ``n_sigma`` Tracy-Widom scales (:func:`free_tw_scale`)
    as margin. The threshold does not depend on ``J``'s own spectrum, so a partial spectrum
    suffices once its last eigenvalue is below the threshold (``details["truncated"]`` says
    when it is not). Eigenvalues at rounding level (below ``ZERO_RTOL max|lam|``) never count:
    an aggregate of exact broadcasts (every client at ``w = 0``) has no bulk at all, and its
    K_hat is the rank of the broadcast. Derived in {ref}`sec-bbp-threshold`.

    Parameters
    ----------
    values : numpy.ndarray or Spectrum
        The aggregate ``J`` (N, N), its (partial) Spectrum, or its eigenvalues.
    components : sequence of Component
        The bulk components (see :func:`components_from_uploads`); may be empty (no bulk:
        refused, with ``noise_var = 0``, when ``max_k`` or more eigenvalues are non-zero).
    noise_var : float
        Eigenvalue variance of Gaussian noise in ``J`` (``N sum_c omega_c^2 sigma_c^2``).
    margin : float or None
        Relative margin above the edge; None: ``n_sigma`` Tracy-Widom scales.
    n_sigma : float
        Width of the automatic margin (default 4).
    max_k : int or None
        Largest K considered (default ``N // 4``).

    Returns
    -------
    KHatResult
        ``method="components"``; ``details`` holds ``edge``, ``margin``, ``tw_scale``,
        ``scales``, ``ratios``, ``noise_var``, ``edge_mp`` (the moment-matched MP edge of the
        positive components, for comparison), ``truncated``.

    Examples
    --------
    >>> import numpy as np
    >>> from fedlam import data, operators
    >>> xi = data.random_archetypes(3, 400, 0)
    >>> eta, _ = data.sample_examples(xi, 1200, 0.8, np.ones(3) / 3, 1)
    >>> J = operators.hebbian(eta)
    >>> k_hat_components(J, [Component((1 - 0.8**2) / 400, 400 / 1200)]).k_hat
    3
    """
    res = _k_hat_components(values, components, noise_var, margin, n_sigma, max_k)
    if len(components) == 0 and res.details["noise_var"] == 0.0 and res.k_hat >= res.details["max_k"]:
        # no bulk: every eigenvalue above rounding counts, which is right for an aggregate of
        # exact broadcasts (low rank) and wrong for an operator with noise
        raise ValueError(
            f"components is empty and noise_var = 0 (no noise bulk: every non-zero eigenvalue counts), "
            f"but the operator has at least max_k = {res.details['max_k']} non-zero eigenvalues; describe "
            "its noise by components (see components_from_uploads) or noise_var; got components=[]")
    return res


def _k_hat_components(values: Any, components: Sequence[Component], noise_var: float = 0.0,
                      margin: float | None = None, n_sigma: float = 4.0, max_k: int | None = None) -> KHatResult:
    """:func:`k_hat_components`, also for an empty bulk (an aggregate of exact broadcasts: every
    eigenvalue above rounding counts, K-hat is the rank); used by the server's defences."""
    spec = _as_spectrum(values, "values")
    a, q, v = _component_arrays(components, noise_var)
    if margin is not None:
        margin = check_in_range(margin, "margin", 0.0, None)
    n_sigma = check_in_range(n_sigma, "n_sigma", 0.0, None)
    return _k_hat_edge(spec, a, q, v, margin, n_sigma, max_k, method="components", k=_kurtosis_of(components))


def components_from_uploads(
    uploads: Sequence[Any],
    weights: np.ndarray | None = None,
    N: int | None = None,
) -> tuple[list[Component], float]:
    """Bulk components and noise variance of ``sum_c omega_c U_c`` from the uploads' scalars.

    Each upload (:class:`fedlam.protocol.Upload`) reports its batch size ``M_c``, the blend
    weight ``w_c`` it used (``U_c = w_c B_c + (1 - w_c) A``, the broadcast ``A`` has no bulk),
    its bulk variance estimate ``s2_c`` (None: unknown; 1 is used, an upper bound because
    ``tr(N B_c) = N`` is split between spikes and bulk) and the entry standard deviation
    ``sigma_c`` of the Gaussian noise it added. Component ``c`` is then
    ``(sign_c omega_c w_c s2_c / N, N / M_c)`` with the excess kurtosis of +-1 data
    (:func:`pm1_kurtosis`, which moves the finite-N edge, :func:`kurtosis_edge_shift`), with
    ``sign_c`` the sign of ``tr U_c`` when
    the operator is available (a negated upload) and +1 otherwise (secure aggregation: the
    server never sees ``U_c``); uploads with ``M_c = 0``, ``w_c = 0`` or an undefined weight
    (a client that does not blend, e.g. a poisoner) contribute no bulk. The Gaussian noises
    are independent, so the mean's noise has entry variance ``sum_c omega_c^2 sigma_c^2``
    and eigenvalue variance ``N`` times that. Cost ``O(L)`` (plus ``O(N)`` per trace).
    Derived in {ref}`sec-bbp-threshold`.

    Parameters
    ----------
    uploads : sequence
        Objects with attributes ``batch_size``, ``weight``, ``noise_var``, ``dp_sigma`` and
        optionally ``operator`` (None allowed).
    weights : numpy.ndarray or None
        Aggregation weights ``omega_c >= 0`` (None: ``1/L``).
    N : int or None
        Dimension; needed when no upload carries its operator.

    Returns
    -------
    (list of Component, float)
    """
    if not isinstance(uploads, Sequence) or isinstance(uploads, (str, bytes)) or len(uploads) == 0:
        raise TypeError(f"uploads must be a non-empty list of fedlam.protocol.Upload, got {type(uploads).__name__}")
    L = len(uploads)
    if weights is None:
        om = np.full(L, 1.0 / L)
    else:
        if not isinstance(weights, np.ndarray) or weights.shape != (L,):
            raise ValueError(f"weights must be an array of shape ({L},), got "
                             f"{getattr(weights, 'shape', type(weights).__name__)}")
        om = weights.astype(np.float64)
        if not np.all(np.isfinite(om)) or np.any(om < 0):
            raise ValueError("weights must be finite and >= 0")
    if N is None:
        ops = [getattr(u, "operator", None) for u in uploads]
        dims = {op.shape[0] for op in ops if isinstance(op, np.ndarray)}
        if not dims:
            raise ValueError("N must be given when no upload carries its operator")
        N = dims.pop()
    N = check_positive_int(N, "N", minimum=2)
    comps: list[Component] = []
    noise = 0.0
    for i, u in enumerate(uploads):
        M = getattr(u, "batch_size", None)
        w = getattr(u, "weight", None)
        s2 = getattr(u, "noise_var", None)
        sig = getattr(u, "dp_sigma", 0.0)
        if isinstance(M, (bool, np.bool_)) or not isinstance(M, (int, np.integer)) or M < 0:
            raise TypeError(f"uploads[{i}].batch_size must be an int >= 0, got {M!r}")
        if w is None or isinstance(w, (bool, np.bool_)) or not isinstance(w, (int, float, np.integer, np.floating)):
            raise TypeError(f"uploads[{i}].weight must be a real number (NaN: not blended), got {w!r}")
        sig = check_in_range(sig, f"uploads[{i}].dp_sigma", 0.0, None)
        noise += float(om[i]) ** 2 * sig * sig
        if M == 0 or not math.isfinite(float(w)) or float(w) == 0.0 or om[i] == 0.0:
            continue
        s2 = 1.0 if s2 is None else check_in_range(s2, f"uploads[{i}].noise_var", 0.0, 1.0)
        op = getattr(u, "operator", None)
        sign = -1.0 if isinstance(op, np.ndarray) and float(np.trace(op)) < 0 else 1.0
        if s2 > 0:
            comps.append(Component(sign * float(om[i]) * float(w) * s2 / N, N / int(M), pm1_kurtosis(s2)))
    return comps, float(N * noise)


def client_noise_var(examples: np.ndarray, min_bulk_rank: int = 8) -> float | None:
    """A client's estimate of the bulk variance ``s2 = 1 - r^2`` of its examples, or None.

    The client fits the bulk of its own ``N B = eta^T eta / M`` from its leading spectrum
    (:func:`fedlam.controller.fit_bulk`: the trace identity corrected for the bulk mass the
    outliers take, ``s2 = (tr - sum_i lambda_i) / (N - k - q (k + sum_i 1 / kappa_i))``; the
    plain bulk mean after removing the outliers is low by about ``k q / N``). With fewer than
    ``min_bulk_rank`` bulk eigenvalues (``min(M, N)`` minus the outliers, e.g. a batch of 10
    examples of 4 archetypes) there is no bulk to fit and the client reports None (the server
    then uses the upper bound 1). Cost: one ``min(M, N)``-sized eigenproblem on the client.
    Derived in {ref}`sec-bbp-threshold`.

    Parameters
    ----------
    examples : numpy.ndarray
        The client's (M, N) +-1 batch.
    min_bulk_rank : int
        Smallest number of non-zero bulk eigenvalues for a fit.
    """
    from fedlam import controller as ctl

    check_pm1(examples, "examples", ndim=2)
    min_bulk_rank = check_positive_int(min_bulk_rank, "min_bulk_rank")
    M, N = examples.shape
    if M < 2 or min(M, N) <= min_bulk_rank:
        return None
    fit = ctl.fit_bulk(ctl.local_spectrum(examples))
    if not (fit.sigma2 > 0) or min(M, N) - fit.n_outliers < min_bulk_rank:
        return None
    return float(min(fit.sigma2, 1.0))


def outlier_overlaps(result: KHatResult, values: Any, N: int | None = None) -> np.ndarray:
    """Predicted squared overlap of each outlier eigenvector with the signal subspace.

    For an eigenvalue ``lam`` above the edge of the bulk that ``result`` describes (its
    moment-matched MP part ``(sigma2, q)`` and the Gaussian noise ``details["noise_var"]``):

    * without noise, ``lam`` is the outlier of a spiked covariance: ``kappa`` from
      :func:`fedlam.rmt.kappa_from_outlier` and ``gamma = (1 - q/kappa^2)/(1 + q/kappa)``
      (:func:`fedlam.rmt.eigvec_overlap`);
    * with noise of eigenvalue variance ``v``, subordination ``omega(z) = z - v G_H(z)`` maps
      the outlier of ``H = W + noise`` to the outlier ``ell = lam - v G_H(lam)`` of the data
      part ``W``, and the residues of the two resolvents give
      ``gamma_H = gamma_W(ell) / omega'(lam)``, ``omega' = 1 - v / x_H'(G_H(lam)) > 1``.
      For a pure additive spike ``theta`` on a semicircle this is ``1 - v / theta^2``.

    For an aggregate of heterogeneous clients the MP part is the moment-matched one, an
    approximation. With no data bulk (an exact pattern operator) ``gamma = 1``. An
    archetype lies in the signal subspace, so its in-span fraction ``||V^T xi||^2 / N`` is
    at least the smallest ``gamma`` of the detected eigenvectors (up to ``O(N^{-1/2})``
    fluctuations): the acceptance floor of :func:`fedlam.lam.factorize`. Derived in
    {ref}`sec-bbp-overlap` and {ref}`sec-lam-acceptance`.

    Parameters
    ----------
    result : KHatResult
        From :func:`k_hat_mp`, :func:`k_hat_free` or :func:`k_hat_components`.
    values : numpy.ndarray
        Eigenvalues (J units) of the detected outliers.
    N : int or None
        Dimension (default: inferred from nothing -- required).

    Returns
    -------
    numpy.ndarray
        float64, same length as ``values``, in [0, 1]; 0 at or below the edge.
    """
    from fedlam import rmt

    if not isinstance(result, KHatResult):
        raise TypeError(f"result must be a KHatResult, got {type(result).__name__}")
    vals = _check_values(np.atleast_1d(np.asarray(values, dtype=np.float64)), "values")
    N = check_positive_int(N, "N", minimum=2)
    s2 = float(result.sigma2) if np.isfinite(result.sigma2) else 0.0
    q = float(result.q) if np.isfinite(result.q) else 0.0
    v = float(result.details.get("noise_var", 0.0))
    a = max(s2, 0.0) / N
    qq = max(q, 1e-12)
    out = np.zeros(vals.shape[0])
    if v > 0:
        edge, gstar, _ = _free_edge(np.array([a]), np.array([qq]), v)
    for i, lam in enumerate(vals):
        omega_p = 1.0
        ell = float(lam)
        if v > 0:
            if lam <= edge:
                continue

            def x_h(g: float) -> float:
                return 1.0 / g + (a / (1.0 - a * qq * g) if a > 0 else 0.0) + v * g

            g = float(scipy.optimize.brentq(lambda g, lam=lam: x_h(g) - lam, gstar * 1e-12, gstar,
                                            xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=200))
            ell = lam - v * g
            xp = -1.0 / g**2 + (a * a * qq / (1.0 - a * qq * g) ** 2 if a > 0 else 0.0) + v
            omega_p = 1.0 - v / xp
        if a > 0:
            kappa = rmt.kappa_from_outlier(ell * N, qq, s2)
            gw = float(rmt.eigvec_overlap(kappa, qq)) if np.isfinite(kappa) else 0.0
        else:
            gw = 1.0 if ell > 0 else 0.0
        out[i] = min(1.0, max(0.0, gw / omega_p))
    return out


@dataclass(frozen=True)
class BulkComponent:
    """Bulk statistics of one summand of an aggregate (from :func:`fit_component`).

    Attributes
    ----------
    mean : float
        Mean of the bulk eigenvalues of the component operator (its top outliers removed,
        zeros included), signed: negative for a negated operator; 0 when it has no bulk
        (an exactly low-rank operator such as a broadcast ``xi^T xi / N``).
    q : float
        Effective aspect ratio ``variance / mean^2`` of that bulk (0 without bulk).
    n_outliers : int
        Eigenvalues removed as outliers (above the component's own MP edge).
    trace : float
        ``tr J_c`` (signed), used to check that the weights reproduce the aggregate.
    n : int
        Dimension N.
    """

    mean: float
    q: float
    n_outliers: int
    trace: float
    n: int

def fit_component(J_c: Any, k: int = 16, n_sigma: float = 4.0) -> BulkComponent:
    """Bulk mean and effective aspect ratio of one operator, its outliers removed.

    The top ``k`` eigenvalues (block Krylov, three passes over the matrix, see the Notes)
    plus the exact ``tr J_c`` and ``||J_c||_F^2`` give the mean and variance of the
    remaining eigenvalues;
    the outliers are those of :func:`k_hat_mp` (the component's own MP edge with its
    Tracy-Widom margin, scanning every ``k``). ``k`` is raised (x4) while the count could be
    limited by it. A negated operator (negative trace, e.g. a ``"flip"`` client) is fitted
    on ``-J_c`` and returned with a negative mean. Derived in {ref}`sec-mp`.

    Parameters
    ----------
    J_c : numpy.ndarray or Spectrum
        float (N, N) symmetric operator, or a (partial) Spectrum of a positive one.
    k : int
        Leading eigenvalues computed (default 16; take at least ``2 K + 8`` when the
        operator contains ``K`` known spikes, e.g. a blended broadcast of rank ``K``).
    n_sigma : float
        Margin of the outlier test (see :func:`k_hat_mp`).

    Returns
    -------
    BulkComponent

    Notes
    -----
    For ``N >= 200`` the top eigenvalues come from a two-step block Krylov Rayleigh-Ritz
    with block size ``k`` (cost ``~5 k N^2`` flops, about 9 ms at N = 1000, k = 16, against
    ~0.14 s for a full ``eigh``). Outliers well above the bulk are exact to ~1e-10; Ritz values
    inside the bulk are low by ~10 %, so they are never taken for outliers. An outlier barely
    above the edge may be missed and left in the bulk, which raises the fitted variance
    slightly (a conservative edge).
    """
    k = check_positive_int(k, "k")
    if isinstance(J_c, BulkComponent):
        return J_c
    n_sigma = check_in_range(n_sigma, "n_sigma", 0.0, None)
    if isinstance(J_c, np.ndarray) and J_c.ndim == 2:
        check_operator(J_c, "J_c")
        return _fit_operator(J_c, k, n_sigma)
    spec = _as_spectrum(J_c, "J_c")
    if spec.trace < 0:
        raise ValueError(
            f"J_c must have a non-negative trace when given as a spectrum, got {spec.trace!r}; "
            "pass the operator itself (a negated operator is fitted on -J_c)"
        )
    res = k_hat_mp(spec, n_sigma=n_sigma)
    return BulkComponent(mean=res.sigma2 / spec.n, q=float(res.q), n_outliers=int(res.k_hat),
                         trace=spec.trace, n=spec.n)


def _fit_operator(J_c: np.ndarray, k: int = 16, n_sigma: float = 4.0) -> BulkComponent:
    """:func:`fit_component` of an operator without argument checks (for validated callers)."""
    N = J_c.shape[0]
    tr = float(np.trace(J_c))
    sign = -1.0 if tr < 0 else 1.0
    X = J_c if sign > 0 else -J_c
    kk = min(k, N)
    while True:
        spec = _top_values_spectrum(X, kk)
        res = k_hat_mp(spec, n_sigma=n_sigma)
        if kk >= N or res.k_hat < kk - 8:
            break
        kk = min(N, 4 * kk)
    return BulkComponent(mean=sign * res.sigma2 / N, q=float(res.q), n_outliers=int(res.k_hat),
                         trace=tr, n=N)


def k_hat_free(
    values: Any,
    components: Sequence[Any] | None = None,
    weights: Any = None,
    margin: float | None = None,
    max_k: int | None = None,
    n_sigma: float = 4.0,
    component_k: int = 16,
    noise_var: float = 0.0,
) -> KHatResult:
    """K-hat for an aggregate of operators with different noise levels (heterogeneity-aware edge).

    The server's ``J = sum_c w_c J_c`` mixes clients whose bulks differ (an honest client at
    ``r = 0.9`` has bulk variance 0.19, a pure-noise client 1). The bulk of ``J`` is then the
    *free convolution* of the clients' scaled MP bulks, not an MP law: its edge
    (:func:`free_mp_edge`) lies above the edge of the moment-matched MP law used by
    :func:`k_hat_mp`, which therefore reads the top of the bulk as spikes (4 honest
    ``r = 0.9`` clients and one noise client, N = 400, M = 300 each: ``k_hat_mp`` gives
    K-hat = 4-6 on pure noise). Here each component's bulk mean and aspect ratio are
    fitted with its own outliers removed (:func:`fit_component`: top-``component_k``
    Lanczos plus exact trace and Frobenius norm); ``K_hat`` is the number of eigenvalues of
    ``J`` above ``edge (1 + margin)`` with the Tracy-Widom margin of
    :func:`free_mp_tw_scale`. Components without bulk (an upload equal to the broadcast,
    ``w = 0``; a poison client's rank-one operator) drop out. With a single component this
    is :func:`k_hat_mp` with the bulk fitted once. Components given as :class:`Component`
    (scale and ratio already known, e.g. from the uploads' scalars,
    :func:`components_from_uploads`) are used as they are, without any fit (then ``weights``
    must be None: a Component's scale already includes its weight); this is
    :func:`k_hat_components`. Derived in {ref}`sec-bbp-threshold`.

    Parameters
    ----------
    values : numpy.ndarray or Spectrum
        The aggregate ``J`` (N, N), its (partial) Spectrum, or its eigenvalues.
    components : sequence or None
        The summands ``J_c``: (N, N) operators, Spectra or :class:`BulkComponent`
        (precomputed with :func:`fit_component`). None: ``J`` itself is the only component
        (then ``values`` must be the operator or a Spectrum).
    weights : numpy.ndarray or None
        ``w_c >= 0`` with ``J = sum_c w_c J_c``; None means ``1/L`` (the equal mean).
        Checked against the traces (ValueError if ``sum_c w_c tr J_c != tr J``).
    margin : float or None
        Relative margin above the edge; None: ``n_sigma`` Tracy-Widom scales at the edge.
    max_k : int or None
        Largest K considered (default ``N // 4``).
    n_sigma : float
        Width of the automatic margin (default 4, as in :func:`k_hat_mp`); also used in the
        component fits.
    component_k : int
        Leading eigenvalues computed per component operator (see :func:`fit_component`).
    noise_var : float
        Eigenvalue variance of Gaussian noise added to ``J`` (see :func:`free_edge`).

    Returns
    -------
    KHatResult
        ``sigma2`` is ``N sum_c w_c mean_c`` (bulk mean of ``N J``), ``q`` the moment-matched
        ratio of the aggregate bulk; ``details`` holds ``edge``, ``edge_mp`` (the
        moment-matched MP edge, for comparison), ``margin``, ``tw_scale``, the per-component
        ``scales``, ``ratios`` and ``n_outliers``.
    """
    spec = _as_spectrum(values, "values")
    N = spec.n
    if margin is not None:
        margin = check_in_range(margin, "margin", 0.0, None)
    n_sigma = check_in_range(n_sigma, "n_sigma", 0.0, None)
    component_k = check_positive_int(component_k, "component_k")
    if (isinstance(components, Sequence) and not isinstance(components, (str, bytes)) and components
            and all(isinstance(c, Component) for c in components)):
        if weights is not None:
            raise ValueError("weights must be None when components are Component objects "
                             "(their scale already includes the weight)")
        a, q, v = _component_arrays(components, noise_var)
        return _k_hat_edge(spec, a, q, v, margin, n_sigma, max_k, method="free", k=_kurtosis_of(components))
    v = check_in_range(noise_var, "noise_var", 0.0, None)
    if components is None:
        components = [spec]
    if isinstance(components, (np.ndarray, Spectrum)) or not isinstance(components, Sequence) or not components:
        raise TypeError(
            f"components must be a non-empty list of (N, N) operators, Spectra or BulkComponent, "
            f"got {type(components).__name__}"
        )
    fits = []
    for i, c in enumerate(components):
        if not isinstance(c, (np.ndarray, Spectrum, BulkComponent)):
            raise TypeError(f"components[{i}] must be an (N, N) operator, a Spectrum or a BulkComponent "
                            f"(or every component a Component), got {type(c).__name__}")
        f = fit_component(c, component_k, n_sigma)
        if f.n != N:
            raise ValueError(f"components[{i}] must have dimension N = {N}, got {f.n}")
        fits.append(f)
    L = len(fits)
    if weights is None:
        w = np.full(L, 1.0 / L)
    else:
        if not isinstance(weights, np.ndarray) or weights.ndim != 1 or weights.shape[0] != L:
            raise ValueError(f"weights must be a 1-D array of length {L}, got "
                             f"{weights.shape if isinstance(weights, np.ndarray) else type(weights).__name__}")
        if not np.issubdtype(weights.dtype, np.floating) and not np.issubdtype(weights.dtype, np.integer):
            raise TypeError(f"weights must be real, got dtype {weights.dtype}")
        w = weights.astype(np.float64)
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("weights must be finite and >= 0")
    tr_c = np.array([f.trace for f in fits])
    scale_tr = float(np.sum(np.abs(w * tr_c))) + abs(spec.trace) + 1e-300
    if abs(float(w @ tr_c) - spec.trace) > 1e-6 * scale_tr:
        raise ValueError(
            f"weights must reproduce the aggregate: sum_c w_c tr J_c = {float(w @ tr_c):.6g} "
            f"but tr J = {spec.trace:.6g}"
        )
    a = w * np.array([f.mean for f in fits])
    # q = 0 with a non-zero mean is a bulk without spread (a multiple of the identity): a shift
    q = np.maximum(np.array([f.q for f in fits]), 1e-12)
    res = _k_hat_edge(spec, a, q, v, margin, n_sigma, max_k, method="free")
    res.details["n_outliers"] = np.array([f.n_outliers for f in fits])
    return res


def estimate_k(
    J_or_spectrum: Any,
    method: str = "mp",
    *,
    rng: np.random.Generator | int | None = None,
    dream_time: float = 2.0,
    tau: float = 0.5,
    **kw: Any,
) -> KHatResult:
    """Estimate the number of archetypes visible in an operator.

    Parameters
    ----------
    J_or_spectrum : numpy.ndarray or Spectrum
        The raw server operator ``J`` (N, N), or its Spectrum (not for ``"shuffle"``).
    method : {"mp", "fixed", "shuffle", "tw", "free"}
        ``"mp"`` (default): :func:`k_hat_mp`; ``"tw"``: :func:`k_hat_tw`; ``"shuffle"``:
        :func:`k_hat_shuffle` (needs ``J`` and ``rng``); ``"fixed"``: the paper's
        :func:`k_hat_fixed` on the spectrum dreamed for ``dream_time``; ``"free"``:
        :func:`k_hat_free`, the heterogeneity-aware edge of an aggregate (pass
        ``components=`` the summands and optionally ``weights=``; without them ``J`` is its
        own single component).
    rng : Generator, int or None
        Only for ``"shuffle"``.
    dream_time, tau : float
        Only for ``"fixed"``.
    **kw
        Passed to the estimator (e.g. ``margin``, ``q``, ``alpha``, ``n_null``,
        ``components``, ``weights``).

    Derived in {ref}`sec-bbp-threshold`.
    """
    method = check_choice(method, "method", K_METHODS)
    # checked whatever the method, so that a wrong value is named even where it is not used
    if rng is not None:
        rng = as_rng(rng)
    if not check_real(dream_time, "dream_time", finite=False) >= 0.0:  # as dream_eigenvalues: t >= 0, inf allowed
        raise ValueError(f"dream_time must be a real >= 0, got {dream_time!r}")
    tau = check_real(tau, "tau")
    if method == "shuffle":
        if not isinstance(J_or_spectrum, np.ndarray) or J_or_spectrum.ndim != 2:
            raise TypeError("J_or_spectrum must be the (N, N) operator for method='shuffle' "
                            "(the null shuffles its entries)")
        if rng is None:
            raise ValueError("rng must be given for method='shuffle' (a Generator or an int seed)")
        return k_hat_shuffle(J_or_spectrum, rng, **kw)
    spec = _as_spectrum(J_or_spectrum, "J_or_spectrum")
    if method == "mp":
        return k_hat_mp(spec, **kw)
    if method == "tw":
        return k_hat_tw(spec, **kw)
    if method == "free":
        return k_hat_free(spec, **kw)
    if kw:
        raise TypeError(f"method='fixed' takes no extra arguments, got {sorted(kw)}")
    return k_hat_fixed(dream_eigenvalues(spec.values, dream_time), tau)
