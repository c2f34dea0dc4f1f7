r"""Closed forms of random matrix theory for the rescaled Hebbian operator ``N J``.

Every function here is a pure function of numbers. Conventions: ``S = N J`` is the sample
second-moment matrix of M examples in dimension N, ``q = N / M``, bulk variance
``sigma2 = 1 - r^2``, and (see :func:`fedlam.operators.expected_operator`)

    E[N J] = sigma2 I + N r^2 sum_mu pi_mu u_mu u_mu^T,   u_mu = xi^mu / sqrt(N),

so the spike of archetype mu, in units of the bulk variance, is
``kappa_mu = N r^2 pi_mu / (1 - r^2)`` (:func:`spike_strength`). The paper's eq.
``spike_strength_def`` omits the factor N (:func:`paper_spike_strength`).

Contents
--------
* Marchenko-Pastur law: :func:`mp_edges`, :func:`mp_density` (Derived in {ref}`sec-mp`).
* Spikes and BBP: :func:`spike_strength`, :func:`paper_spike_strength`,
  :func:`bbp_threshold` ({ref}`sec-bbp-threshold`), :func:`outlier_location`,
  :func:`kappa_from_outlier` ({ref}`sec-bbp-outlier`), :func:`eigvec_overlap`
  ({ref}`sec-bbp-overlap`).
* Concentration: :func:`bernstein_parameters`, :func:`bernstein_tail`,
  :func:`bernstein_bound` (Derived in {ref}`sec-concentration`).
* Edge fluctuations: :func:`tw1_cdf`, :func:`tw1_quantile`,
  :func:`johnstone_center_scale` (Derived in {ref}`sec-mp`).

Scalars in give floats out; numpy arrays in give arrays out (standard broadcasting
between array arguments of compatible shapes).
"""

from __future__ import annotations

import functools
import numbers
from typing import Any

import numpy as np
from scipy import optimize, special

from ._validation import _describe, check_in_range, check_pm1, check_positive_int, check_prob_vector, check_quality

__all__ = [
    "mp_edges",
    "mp_density",
    "spike_strength",
    "paper_spike_strength",
    "bbp_threshold",
    "outlier_location",
    "eigvec_overlap",
    "kappa_from_outlier",
    "bernstein_parameters",
    "bernstein_tail",
    "bernstein_bound",
    "tw1_cdf",
    "tw1_quantile",
    "TW1_TABLE",
    "johnstone_center_scale",
]


# ----------------------------------------------------------------------------------------
# argument handling: scalars or arrays of reals
# ----------------------------------------------------------------------------------------
def _num(
    x: Any,
    name: str,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    allow_inf: bool = False,
) -> tuple[np.ndarray, bool]:
    """Return (float64 array, is_scalar) after checking type, finiteness and range."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be a real number or a numpy array of reals, got bool {x!r}")
    if isinstance(x, numbers.Real):
        arr, scalar = np.asarray(float(x)), True
    elif isinstance(x, np.ndarray):
        if x.dtype == bool or not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
            raise TypeError(f"{name} must have a real numeric dtype, got dtype {x.dtype}")
        arr, scalar = x.astype(np.float64), False
    else:
        raise TypeError(f"{name} must be a real number or a numpy array of reals, got {_describe(x)}")
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} must not be NaN, got {x!r}"[:200])
    if not allow_inf and np.any(np.isinf(arr)):
        raise ValueError(f"{name} must be finite, got {x!r}"[:200])
    if arr.size:
        if low is not None:
            bad = arr <= low if low_open else arr < low
            if np.any(bad):
                op = ">" if low_open else ">="
                raise ValueError(f"{name} must be {op} {low:g}, got {float(arr[bad].ravel()[0])!r}")
        if high is not None:
            bad = arr >= high if high_open else arr > high
            if np.any(bad):
                op = "<" if high_open else "<="
                raise ValueError(f"{name} must be {op} {high:g}, got {float(arr[bad].ravel()[0])!r}")
    return arr, scalar


def _out(res: np.ndarray, scalar: bool) -> float | np.ndarray:
    return float(res) if scalar else res


# ----------------------------------------------------------------------------------------
# Marchenko-Pastur
# ----------------------------------------------------------------------------------------
def mp_edges(q: float | np.ndarray, sigma2: float | np.ndarray = 1.0) -> tuple[Any, Any]:
    """Edges of the Marchenko-Pastur law {cite:p}`marchenko1967`: ``sigma2 (1 -+ sqrt q)^2``.

    Limits of the smallest non-zero and the largest eigenvalue of a pure-noise ``N J``
    with N/M -> q. Derived in {ref}`sec-mp`.

    Parameters
    ----------
    q : float or numpy.ndarray
        Aspect ratio N / M, > 0.
    sigma2 : float or numpy.ndarray
        Bulk variance, > 0.

    Returns
    -------
    (low, high) : floats or arrays
    """
    qa, s1 = _num(q, "q", low=0.0, low_open=True)
    sa, s2 = _num(sigma2, "sigma2", low=0.0, low_open=True)
    rq = np.sqrt(qa)
    lo = sa * (1.0 - rq) ** 2
    hi = sa * (1.0 + rq) ** 2
    scalar = s1 and s2
    return _out(lo, scalar), _out(hi, scalar)


def mp_density(x: float | np.ndarray, q: float, sigma2: float = 1.0) -> float | np.ndarray:
    """Density of the continuous part of the Marchenko-Pastur law.

    ``rho(x) = sqrt((b - x)(x - a)) / (2 pi sigma2 q x)`` on ``(a, b) = mp_edges(q, sigma2)``,
    0 elsewhere. Derived in {ref}`sec-mp`.

    Parameters
    ----------
    x : float or numpy.ndarray
        Points (any real; 0 is returned outside the support and at x <= 0).
    q : float
        Aspect ratio N / M, > 0.
    sigma2 : float
        Bulk variance, > 0.

    Returns
    -------
    float or numpy.ndarray

    Notes
    -----
    For ``q <= 1`` the density integrates to 1. For ``q > 1`` (fewer examples than
    neurons) ``N J`` has rank M < N: the law has an atom of mass ``1 - 1/q`` at 0, which
    is *not* part of this function, and the continuous part integrates to ``1/q``.
    """
    xa, sx = _num(x, "x")
    q = check_in_range(q, "q", low=0.0, low_open=True)
    sigma2 = check_in_range(sigma2, "sigma2", low=0.0, low_open=True)
    a, b = mp_edges(q, sigma2)
    inside = (xa > a) & (xa < b) & (xa > 0)
    out = np.zeros_like(xa)
    xi = xa[inside]
    out[inside] = np.sqrt((b - xi) * (xi - a)) / (2.0 * np.pi * sigma2 * q * xi)
    return _out(out, sx)


# ----------------------------------------------------------------------------------------
# spikes and BBP
# ----------------------------------------------------------------------------------------
def spike_strength(r: float | np.ndarray, pi: float | np.ndarray, N: int) -> float | np.ndarray:
    """Spike strength ``kappa = N r^2 pi / (1 - r^2)`` of an archetype with exposure pi.

    The corrected version of the paper's eq. ``spike_strength_def`` for the rescaled
    operator ``N J``: ``E[N J] = (1 - r^2) [I + sum_mu kappa_mu u_mu u_mu^T]``. Derived in
    {ref}`sec-spiked`.

    Parameters
    ----------
    r : float or numpy.ndarray
        Quality in (0, 1].
    pi : float or numpy.ndarray
        Exposure (mixture weight) in [0, 1].
    N : int
        Number of neurons, >= 2.

    Returns
    -------
    float or numpy.ndarray
        kappa >= 0. ``r = 1`` (noiseless examples, no bulk) gives ``inf`` when pi > 0;
        ``pi = 0`` gives 0 for every r (no exposure, no spike).
    """
    ra, s1 = _num(r, "r", low=0.0, high=1.0, low_open=True)
    pa, s2 = _num(pi, "pi", low=0.0, high=1.0)
    N = check_positive_int(N, "N", minimum=2)
    ra, pa = np.broadcast_arrays(ra, pa)
    num = N * ra**2 * pa
    den = 1.0 - ra**2
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.where(pa == 0, 0.0, np.where(den > 0, num / np.where(den > 0, den, 1.0), np.inf))
    return _out(np.asarray(k, dtype=np.float64), s1 and s2)


def paper_spike_strength(r: float | np.ndarray, pi: float | np.ndarray) -> float | np.ndarray:
    """The paper's spike strength ``r^2 pi / (1 - r^2)`` (eq. ``spike_strength_def``).

    It is N times too small: the paper writes ``E[N J] = sigma2 I + r^2 sum pi u u^T``
    but the signal term is ``N r^2 sum pi u u^T``. Kept for the errata comparison
    ({ref}`sec-errata`). Same conventions as :func:`spike_strength`.
    """
    ra, s1 = _num(r, "r", low=0.0, high=1.0, low_open=True)
    pa, s2 = _num(pi, "pi", low=0.0, high=1.0)
    ra, pa = np.broadcast_arrays(ra, pa)
    den = 1.0 - ra**2
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.where(pa == 0, 0.0, np.where(den > 0, ra**2 * pa / np.where(den > 0, den, 1.0), np.inf))
    return _out(np.asarray(k, dtype=np.float64), s1 and s2)


def bbp_threshold(q: float | np.ndarray) -> float | np.ndarray:
    """BBP threshold ``sqrt(q)`` {cite:p}`baik2005`: a spike makes an outlier iff kappa > sqrt(q).

    Derived in {ref}`sec-bbp-threshold`.
    """
    qa, s = _num(q, "q", low=0.0, low_open=True)
    return _out(np.sqrt(qa), s)


def outlier_location(
    kappa: float | np.ndarray, q: float | np.ndarray, sigma2: float | np.ndarray = 1.0
) -> float | np.ndarray:
    """Limit location of the eigenvalue of ``N J`` produced by a spike kappa.

    ``lambda_out = sigma2 (1 + kappa)(1 + q / kappa)`` for ``kappa > sqrt(q)``
    {cite:p}`baik2005,paul2007`; for ``kappa <= sqrt(q)`` the spike is invisible and the
    largest eigenvalue sticks to the bulk edge ``sigma2 (1 + sqrt q)^2`` (the value
    returned). The map is continuous and increasing in kappa. ``kappa = inf`` gives
    ``inf``. Derived in {ref}`sec-bbp-outlier`.

    Parameters
    ----------
    kappa : float or numpy.ndarray
        Spike strength >= 0 (``inf`` allowed).
    q : float or numpy.ndarray
        Aspect ratio N / M, > 0.
    sigma2 : float or numpy.ndarray
        Bulk variance, > 0.
    """
    ka, s1 = _num(kappa, "kappa", low=0.0, allow_inf=True)
    qa, s2 = _num(q, "q", low=0.0, low_open=True)
    sa, s3 = _num(sigma2, "sigma2", low=0.0, low_open=True)
    ka, qa, sa = np.broadcast_arrays(ka, qa, sa)
    edge = sa * (1.0 + np.sqrt(qa)) ** 2
    sup = ka > np.sqrt(qa)
    safe_k = np.where(sup, ka, 1.0)
    with np.errstate(invalid="ignore"):
        val = np.where(np.isinf(safe_k), np.inf, sa * (1.0 + safe_k) * (1.0 + qa / safe_k))
    return _out(np.where(sup, val, edge).astype(np.float64), s1 and s2 and s3)


def eigvec_overlap(kappa: float | np.ndarray, q: float | np.ndarray) -> float | np.ndarray:
    """Limit squared overlap ``<v, u>^2`` of the outlier eigenvector with its spike.

    ``gamma = (1 - q / kappa^2) / (1 + q / kappa)`` for ``kappa > sqrt(q)``
    {cite:p}`paul2007,benaychgeorges2011`, and 0 below the threshold (the top eigenvector
    is then delocalised with respect to u). ``kappa = inf`` gives 1. Derived in
    {ref}`sec-bbp-overlap`.
    """
    ka, s1 = _num(kappa, "kappa", low=0.0, allow_inf=True)
    qa, s2 = _num(q, "q", low=0.0, low_open=True)
    ka, qa = np.broadcast_arrays(ka, qa)
    sup = ka > np.sqrt(qa)
    safe_k = np.where(sup, ka, 1.0)
    g = (1.0 - qa / safe_k**2) / (1.0 + qa / safe_k)
    return _out(np.where(sup, g, 0.0).astype(np.float64), s1 and s2)


def kappa_from_outlier(
    lam: float | np.ndarray,
    q: float | np.ndarray,
    sigma2: float | np.ndarray = 1.0,
    below: str = "nan",
) -> float | np.ndarray:
    """Invert :func:`outlier_location` on the supercritical branch (paper eq. ``kappa-inv``).

    With ``x = lam / sigma2``, ``x = (1 + kappa)(1 + q/kappa)`` is the quadratic
    ``kappa^2 - (x - 1 - q) kappa + q = 0``, whose larger root

        kappa = [(x - 1 - q) + sqrt((x - 1 - q)^2 - 4 q)] / 2

    is the one above ``sqrt(q)``. Derived in {ref}`sec-bbp-outlier`.

    Parameters
    ----------
    lam : float or numpy.ndarray
        Eigenvalue(s) of ``N J``, >= 0 (``inf`` gives ``inf``).
    q : float or numpy.ndarray
        Aspect ratio, > 0.
    sigma2 : float or numpy.ndarray
        Bulk variance, > 0.
    below : {"nan", "threshold"}
        What to return for ``lam <= sigma2 (1 + sqrt q)^2`` (at or below the bulk edge,
        where the map is not invertible -- every subcritical kappa lands on the edge):
        ``"nan"`` (default; no spike can be inferred) or ``"threshold"`` (``sqrt(q)``, the
        largest kappa consistent with the observation). At the edge itself the formula
        gives exactly sqrt(q), but the ``below`` rule applies there too.
    """
    if below not in ("nan", "threshold"):
        raise ValueError(f"below must be one of ('nan', 'threshold'), got {below!r}")
    la, s1 = _num(lam, "lam", low=0.0, allow_inf=True)
    qa, s2 = _num(q, "q", low=0.0, low_open=True)
    sa, s3 = _num(sigma2, "sigma2", low=0.0, low_open=True)
    la, qa, sa = np.broadcast_arrays(la, qa, sa)
    x = la / sa
    b = x - 1.0 - qa
    sup = x > (1.0 + np.sqrt(qa)) ** 2
    disc = np.where(sup, b * b - 4.0 * qa, 0.0)
    with np.errstate(invalid="ignore"):
        k = np.where(np.isinf(x), np.inf, (b + np.sqrt(np.maximum(disc, 0.0))) / 2.0)
    fill = np.nan if below == "nan" else np.sqrt(qa)
    return _out(np.where(sup, k, fill).astype(np.float64), s1 and s2 and s3)


# ----------------------------------------------------------------------------------------
# matrix Bernstein for N J
# ----------------------------------------------------------------------------------------
def bernstein_parameters(
    N: int,
    M: int,
    r: float,
    pi: np.ndarray,
    archetypes: np.ndarray | None = None,
) -> tuple[float, float]:
    r"""Variance proxy v and uniform bound L of the matrix Bernstein inequality for ``N J``.

    Derived in {ref}`sec-concentration` (the corrected concentration theorem).

    Step by step. Write ``S = N J = (1/M) sum_a eta_a eta_a^T`` and ``E = E[eta eta^T] =
    (1 - r^2) I + r^2 sum_mu pi_mu xi^mu xi^mu^T`` (PSD, trace N, so its eigenvalues lie in
    [0, N]). Then ``S - E[S] = sum_a X_a`` with independent, mean-zero, symmetric
    ``X_a = (eta_a eta_a^T - E) / M``.

    1. *Uniform bound.* ``eta_a eta_a^T`` and E are PSD with norms N and ||E|| <= N. For
       PSD A, B, ``-B <= A - B <= A`` so ``||A - B|| <= max(||A||, ||B||)``; hence
       ``||X_a|| <= N / M =: L``. (The triangle inequality gives the weaker
       ``(N + ||E||)/M``.)
    2. *Variance.* ``(eta eta^T)^2 = |eta|^2 eta eta^T = N eta eta^T`` because
       ``|eta|^2 = N`` for +-1 vectors, so ``E[(eta eta^T)^2] = N E`` and
       ``E[X_a^2] = (N E - E^2) / M^2``. Summing M terms,
       ``v = ||N E - E^2|| / M = max_{lambda in spec E} lambda (N - lambda) / M``, exactly.
    3. *Spectrum of E.* ``1 - r^2`` (multiplicity >= N - K) and ``1 - r^2 + r^2 g_mu``
       with ``g_mu`` the eigenvalues of the K x K matrix ``D^{1/2} Xi Xi^T D^{1/2}``,
       ``D = diag(pi)``; for orthogonal archetypes ``g_mu = N pi_mu``. Without
       ``archetypes`` the orthogonal case is used (random archetypes are orthogonal up
       to O(sqrt N) in ``g_mu``).

    For clients with different mixtures (same r), use ``pi`` = the round mixture: then
    ``sum_a E[X_a^2] = (N E_bar - mean_a E_a^2)/M <= (N E_bar - E_bar^2)/M`` (operator
    convexity of the square), so v computed here is an upper bound and the tail stays valid.

    Parameters
    ----------
    N, M : int
        Dimension (>= 2) and number of examples (>= 1).
    r : float
        Quality in (0, 1].
    pi : numpy.ndarray
        (K,) mixture.
    archetypes : numpy.ndarray, optional
        (K, N) +-1 archetypes for the exact spectrum of E.

    Returns
    -------
    (v, L) : (float, float)
    """
    N = check_positive_int(N, "N", minimum=2)
    M = check_positive_int(M, "M")
    r = check_quality(r)
    p = check_prob_vector(pi, "pi")
    K = p.size
    if archetypes is None:
        g = N * p
    else:
        check_pm1(archetypes, "archetypes", ndim=2)
        if archetypes.shape != (K, N):
            raise ValueError(f"archetypes must have shape ({K}, {N}) to match pi and N, got {archetypes.shape}")
        X = archetypes.astype(np.float64)
        sq = np.sqrt(p)
        G = (X @ X.T) * np.outer(sq, sq)
        g = np.clip(np.linalg.eigvalsh(G), 0.0, None)
    s2 = 1.0 - r * r
    lams = np.concatenate([[s2], s2 + r * r * g])
    lams = np.clip(lams, 0.0, float(N))
    v = float(np.max(lams * (N - lams))) / M
    return v, float(N) / M


def bernstein_tail(
    t: float | np.ndarray,
    N: int,
    M: int,
    r: float,
    pi: np.ndarray,
    archetypes: np.ndarray | None = None,
) -> float | np.ndarray:
    """Matrix Bernstein bound on ``P(||N J - E[N J]|| >= t)``.

    ``min(1, 2 N exp(-(t^2 / 2) / (v + L t / 3)))`` with v, L from
    :func:`bernstein_parameters` {cite:p}`tropp2012` (Theorem 1.4 there, for the norm of a
    sum of independent, bounded, mean-zero symmetric N x N matrices). Derived in
    {ref}`sec-concentration`.

    Parameters
    ----------
    t : float or numpy.ndarray
        Deviation level(s) of ``N J`` in operator norm, >= 0.
    N, M, r, pi, archetypes
        See :func:`bernstein_parameters`.

    Notes
    -----
    The paper states the bound for J with unspecified universal constants and an
    expectation ``E[J] = sigma2 I + ...`` that should read ``(sigma2 / N) I + ...``; here
    every constant is explicit. Note the scales: for pure noise (pi irrelevant, r -> 0)
    v = (N - 1)/M ~ q, so the bound certifies deviations ~ sqrt(2 q log(2N/delta)) while
    the true deviation is ``(1 + sqrt q)^2 - 1 = 2 sqrt q + q``; with a spike,
    ``v ~ N q r^2 pi (1 - r^2 pi)``, i.e. the bound is dominated by the O(sqrt(N q))
    fluctuation of the outlier itself and says nothing about the bulk edge at scale
    O(1). BBP locations need the finer RMT results, not this inequality.

    Numbers (N = 400, M = 1600, delta = 0.05, five simulated batches each):
    pure noise (r -> 0): t = 3.15 against observed deviations 1.20-1.26 (the MP value
    2 sqrt(q) + q = 1.25); r = 0.8, K = 3 equal mixture (kappa = 237): t = 19.4 against
    3.5-5.8; r = 0.3 (kappa = 13.2): t = 8.9 against 2.0-2.4.
    """
    ta, s = _num(t, "t", low=0.0)
    v, L = bernstein_parameters(N, M, r, pi, archetypes)
    with np.errstate(divide="ignore", invalid="ignore"):
        den = v + L * ta / 3.0
        expo = np.where(den > 0, -(ta**2 / 2.0) / np.where(den > 0, den, 1.0), 0.0)
    tail = np.minimum(1.0, 2.0 * N * np.exp(expo))
    return _out(tail, s)


def bernstein_bound(
    delta: float,
    N: int,
    M: int,
    r: float,
    pi: np.ndarray,
    archetypes: np.ndarray | None = None,
) -> float:
    """Deviation t with ``P(||N J - E[N J]|| >= t) <= delta`` by :func:`bernstein_tail`.

    Setting ``2 N exp(-(t^2/2)/(v + L t/3)) = delta`` and ``ell = log(2 N / delta)``
    gives ``t^2 - (2 L ell / 3) t - 2 v ell = 0``, whose positive root is

        t = L ell / 3 + sqrt((L ell / 3)^2 + 2 v ell).

    Derived in {ref}`sec-concentration`.

    Parameters
    ----------
    delta : float
        Failure probability in (0, 1).
    """
    delta = check_in_range(delta, "delta", 0.0, 1.0, low_open=True, high_open=True)
    v, L = bernstein_parameters(N, M, r, pi, archetypes)
    ell = np.log(2.0 * N / delta)
    a = L * ell / 3.0
    return float(a + np.sqrt(a * a + 2.0 * v * ell))


# ----------------------------------------------------------------------------------------
# Tracy-Widom (beta = 1) and Johnstone's centring and scaling
# ----------------------------------------------------------------------------------------
#: Quantiles of the Tracy-Widom beta = 1 law {cite:p}`tracy1996`, p -> s with F1(s) = p,
#: rounded to 4 decimals. Computed with :func:`tw1_cdf` (Bornemann's quadrature of the
#: Fredholm determinant {cite:p}`bornemann2010`), which reproduces the mean
#: -1.2065335745820 and variance 1.607781034581 of TW1 tabulated by Bornemann (2010) to
#: 12 digits (checked in the tests). The upper quantiles agree with the critical values
#: 0.9793 (p = 0.95) and 2.0234 (p = 0.99) used for PCA significance tests (Patterson,
#: Price & Reich 2006, PLoS Genetics 2:e190); their older values for p = 0.995 and
#: 0.999 (2.4224, 3.2724) are off by 1e-4 and 2e-4.
TW1_TABLE: dict[float, float] = {
    0.01: -3.8954,
    0.05: -3.1804,
    0.10: -2.7824,
    0.30: -1.9104,
    0.50: -1.2686,
    0.70: -0.5923,
    0.90: 0.4501,
    0.95: 0.9793,
    0.975: 1.4538,
    0.99: 2.0234,
    0.995: 2.4223,
    0.999: 3.2722,
}

_TW_NODES = 48
_TW_LENGTH = 16.0


@functools.lru_cache(maxsize=1)
def _gauss_legendre_01() -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    x, w = np.polynomial.legendre.leggauss(_TW_NODES)
    # map [-1, 1] -> [0, _TW_LENGTH]
    return (x + 1.0) * (_TW_LENGTH / 2.0), w * (_TW_LENGTH / 2.0), np.triu_indices(_TW_NODES)


def _tw1_cdf_scalar(s: float) -> float:
    if s > 12.0:
        return 1.0
    if s < -12.0:
        return 0.0
    x, w, iu = _gauss_legendre_01()
    sw = np.sqrt(w)
    A = np.empty((x.size, x.size))
    vals = special.airy(x[iu[0]] + x[iu[1]] + s)[0]  # the kernel is symmetric
    A[iu] = vals
    A[iu[1], iu[0]] = vals
    K = sw[:, None] * A * sw[None, :]
    val = float(np.linalg.det(np.eye(x.size) - K))
    return min(1.0, max(0.0, val))


def tw1_cdf(s: float | np.ndarray) -> float | np.ndarray:
    """Tracy-Widom beta = 1 distribution function F1(s) {cite:p}`tracy1996`.

    Computed as the Fredholm determinant ``F1(s) = det(I - B_s)`` on L^2(0, inf) with
    kernel ``B_s(x, y) = Ai(x + y + s)`` (Ferrari-Spohn form), discretised by
    Gauss-Legendre quadrature on [0, 16] with 48 nodes following Bornemann
    {cite:p}`bornemann2010`; the truncation error is below ``Ai(16)^2 ~ 1e-32`` and the
    quadrature converges exponentially (agrees with a 100-node rule to 2e-14). F1 is set to 0 below
    s = -12 (true value < 1e-30) and 1 above s = 12. Derived in {ref}`sec-mp`.
    """
    sa, scalar = _num(s, "s", allow_inf=True)
    out = np.vectorize(_tw1_cdf_scalar, otypes=[np.float64])(np.clip(sa, -13.0, 13.0)) if sa.size else sa
    return _out(np.asarray(out, dtype=np.float64), scalar)


def tw1_quantile(p: float | np.ndarray) -> float | np.ndarray:
    """Quantile of the Tracy-Widom beta = 1 law: s with ``F1(s) = p``.

    Solved with Brent's method on :func:`tw1_cdf` to 1e-10 (:data:`TW1_TABLE` lists
    rounded values for reference). Used for the Tracy-Widom threshold of
    K_hat: the largest noise eigenvalue of ``N J / sigma2`` exceeds
    ``mu + sigma * tw1_quantile(1 - alpha)`` with probability about alpha
    (:func:`johnstone_center_scale`). Derived in {ref}`sec-mp`.

    Parameters
    ----------
    p : float or numpy.ndarray
        Probabilities in (0, 1); practical range [1e-6, 1 - 1e-10].
    """
    pa, scalar = _num(p, "p", low=0.0, high=1.0, low_open=True, high_open=True)

    def one(pv: float) -> float:
        return float(optimize.brentq(lambda s: _tw1_cdf_scalar(s) - pv, -10.0, 11.0, xtol=1e-10))

    if pa.size == 0:
        return _out(pa, scalar)
    out = np.vectorize(one, otypes=[np.float64])(pa)
    return _out(np.asarray(out, dtype=np.float64), scalar)


def johnstone_center_scale(N: int, M: int, variant: str = "half") -> tuple[float, float]:
    """Centring and scaling of the largest eigenvalue of a white Wishart matrix.

    For M i.i.d. examples in dimension N with identity covariance, the largest
    eigenvalue l of ``N J = eta^T eta / M`` (in units where the bulk variance is 1, so
    divide by sigma2 first) satisfies ``(l - mu) / sigma -> TW1`` {cite:p}`johnstone2001`.
    Derived in {ref}`sec-mp`.

    Parameters
    ----------
    N, M : int
        Dimension and sample size, both >= 2.
    variant : {"half", "johnstone2001"}
        ``"half"`` (default): ``m = M - 1/2, n = N - 1/2``,
        ``mu = (sqrt m + sqrt n)^2 / M``, ``sigma = (sqrt m + sqrt n)(1/sqrt m + 1/sqrt n)^{1/3} / M``
        (the shifts that give the O(N^{-2/3}) rate, Ma 2012, *Bernoulli* 18:322-359).
        ``"johnstone2001"``: the original ``m = M - 1, n = N``.

    Returns
    -------
    (mu, sigma) : (float, float)

    Notes
    -----
    The theorem is for Gaussian data; for +-1 entries the same limit holds by
    universality (sub-Gaussian entries), which the tests check by simulation.
    """
    N = check_positive_int(N, "N", minimum=2)
    M = check_positive_int(M, "M", minimum=2)
    if variant == "half":
        m, n = M - 0.5, N - 0.5
    elif variant == "johnstone2001":
        m, n = M - 1.0, float(N)
    else:
        raise ValueError(f"variant must be one of ('half', 'johnstone2001'), got {variant!r}")
    a = np.sqrt(m) + np.sqrt(n)
    mu = a * a / M
    sigma = a * (1.0 / np.sqrt(m) + 1.0 / np.sqrt(n)) ** (1.0 / 3.0) / M
    return float(mu), float(sigma)
