r"""Closed forms of random matrix theory for the rescaled Hebbian operator ``N J``.

Every function here is a pure function of numbers. Conventions: ``S = N J`` is the sample
second-moment matrix of M examples in dimension N, ``q = N / M``, bulk variance
``sigma2 = 1 - r^2``, and (see :func:`fedlam.operators.expected_operator`)

    E[N J] = sigma2 I + N r^2 sum_mu pi_mu u_mu u_mu^T,   u_mu = xi^mu / sqrt(N),

so the spike of archetype mu, in units of the bulk variance, is
``kappa_mu = N r^2 pi_mu / (1 - r^2)`` (:func:`spike_strength`). The paper's eq.
(4.2) omits the factor N (:func:`paper_spike_strength`).

Contents
--------
* Marchenko-Pastur law: :func:`mp_edges`, :func:`mp_density` (Derived in {ref}`sec-mp`).
* Spikes and BBP: :func:`spike_strength`, :func:`paper_spike_strength`,
  :func:`bbp_threshold` ({ref}`sec-bbp-threshold`), :func:`outlier_location`,
  :func:`kappa_from_outlier` ({ref}`sec-bbp-outlier`), :func:`eigvec_overlap`
  ({ref}`sec-bbp-overlap`).
* Fluctuations of the outliers (class labels a Bernoulli factor): :func:`outlier_variance`,
  :func:`outlier_covariance` ({ref}`sec-bbp-fluctuations`).
* Outliers on a heterogeneous bulk (free convolution of the clients' bulks):
  :func:`free_bulk_edge`, :func:`free_bbp_criterion`, :func:`free_outlier_location`
  ({ref}`sec-bbp-free`).
* The blended upload ``(1 - w) A + w B``: :func:`blend_spectrum` ({ref}`sec-ctrl-blend`).
* Concentration: :func:`bernstein_parameters`, :func:`bernstein_tail`,
  :func:`bernstein_bound`, :func:`weyl_sufficient_kappa` (Derived in {ref}`sec-concentration`).
* Fewer examples than neurons (``q > 1``): every closed form here holds for ``q > 1`` too;
  ``N J`` then has ``N - M`` zero eigenvalues and its non-zero bulk fills
  ``[sigma2 (sqrt q - 1)^2, sigma2 (1 + sqrt q)^2]`` ({ref}`sec-bbp-q-large`).
* Edge fluctuations: :func:`tw1_cdf`, :func:`tw1_quantile`,
  :func:`johnstone_center_scale` (Derived in {ref}`sec-mp`).

Scalars in give floats out; numpy arrays in give arrays out (standard broadcasting
between array arguments of compatible shapes; incompatible shapes raise a ValueError naming
the arguments).
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy  # scipy.optimize / scipy.special load on first use: a Flower site never needs them

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
    "outlier_variance",
    "outlier_covariance",
    "free_bulk_edge",
    "free_bbp_criterion",
    "free_outlier_location",
    "BlendSpectrum",
    "blend_spectrum",
    "bernstein_parameters",
    "bernstein_tail",
    "bernstein_bound",
    "weyl_sufficient_kappa",
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


def _broadcast(**named: np.ndarray) -> list[np.ndarray]:
    """Broadcast array arguments against each other, naming them if their shapes clash.

    numpy's own message ("operands could not be broadcast together") names no argument.
    """
    try:
        return list(np.broadcast_arrays(*named.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {np.shape(v)}" for k, v in named.items())
        raise ValueError(
            f"{', '.join(named)} must broadcast to a common shape (equal or length-1 axes), got shapes {shapes}"
        ) from None


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
    qa, sa = _broadcast(q=qa, sigma2=sa)
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

    The corrected version of the paper's eq. (4.2) for the rescaled
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
    ra, pa = _broadcast(r=ra, pi=pa)
    num = N * ra**2 * pa
    den = 1.0 - ra**2
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.where(pa == 0, 0.0, np.where(den > 0, num / np.where(den > 0, den, 1.0), np.inf))
    return _out(np.asarray(k, dtype=np.float64), s1 and s2)


def paper_spike_strength(r: float | np.ndarray, pi: float | np.ndarray) -> float | np.ndarray:
    """The paper's spike strength ``r^2 pi / (1 - r^2)`` (paper eq. (4.2)).

    It is N times too small: the paper writes ``E[N J] = sigma2 I + r^2 sum pi u u^T``
    but the signal term is ``N r^2 sum pi u u^T``. Kept for the errata comparison
    ({ref}`sec-errata`). Same conventions as :func:`spike_strength`.
    """
    ra, s1 = _num(r, "r", low=0.0, high=1.0, low_open=True)
    pa, s2 = _num(pi, "pi", low=0.0, high=1.0)
    ra, pa = _broadcast(r=ra, pi=pa)
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
    ka, qa, sa = _broadcast(kappa=ka, q=qa, sigma2=sa)
    edge = sa * (1.0 + np.sqrt(qa)) ** 2
    sup = ka > np.sqrt(qa)
    safe_k = np.where(sup, ka, 1.0)
    with np.errstate(invalid="ignore"):
        val = np.where(np.isinf(safe_k), np.inf, sa * (1.0 + safe_k) * (1.0 + qa / safe_k))
    return _out(np.where(sup, val, edge).astype(np.float64), s1 and s2 and s3)


def _noisy_outlier_location(kappa: Any, q: Any, noise_var: Any, scale: Any = 1.0) -> Any:
    """Outlier of a spike ``kappa`` (> sqrt q) in ``MP(scale, q) ⊞ SC(noise_var)``, unchecked.

    ``l_W + v g`` with ``l_W = scale (1 + kappa)(1 + q/kappa)`` the noiseless outlier and
    ``g = 1/(scale (kappa + q))`` the MP Cauchy transform there (subordination of the free
    additive convolution). Derived in {ref}`sec-privacy-frontier`; shared by
    :func:`fedlam.privacy.noisy_outlier` and the controller's noise-aware bulk fit.
    """
    g = 1.0 / (scale * (kappa + q))
    return scale * (1.0 + kappa) * (1.0 + q / kappa) + noise_var * g


def _noisy_critical_std(kappa: Any, q: Any, scale: Any = 1.0) -> Any:
    """Eigenvalue std ``s_c = scale (kappa + q) sqrt(1 - q/kappa^2)`` of added semicircle noise
    at which the outlier of ``kappa`` (> sqrt q) merges into the edge, unchecked.

    Derived in {ref}`sec-privacy-frontier`; shared by :func:`fedlam.privacy.critical_noise`
    and the controller's noise-aware bulk fit.
    """
    # (the maximum only guards kappa = sqrt q, where rounding may leave -1e-16 under the root)
    return scale * (kappa + q) * np.sqrt(np.maximum(1.0 - q / (kappa * kappa), 0.0))


def eigvec_overlap(kappa: float | np.ndarray, q: float | np.ndarray) -> float | np.ndarray:
    """Limit squared overlap ``<v, u>^2`` of the outlier eigenvector with its spike.

    ``gamma = (1 - q / kappa^2) / (1 + q / kappa)`` for ``kappa > sqrt(q)``
    {cite:p}`paul2007,benaychgeorges2011`, and 0 below the threshold (the top eigenvector
    is then delocalised with respect to u). ``kappa = inf`` gives 1. Derived in
    {ref}`sec-bbp-overlap`.
    """
    ka, s1 = _num(kappa, "kappa", low=0.0, allow_inf=True)
    qa, s2 = _num(q, "q", low=0.0, low_open=True)
    ka, qa = _broadcast(kappa=ka, q=qa)
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
    """Invert :func:`outlier_location` on the supercritical branch (paper eq. (B.8)).

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
    la, qa, sa = _broadcast(lam=la, q=qa, sigma2=sa)
    x = la / sa
    b = x - 1.0 - qa
    sup = x > (1.0 + np.sqrt(qa)) ** 2
    disc = np.where(sup, b * b - 4.0 * qa, 0.0)
    with np.errstate(invalid="ignore"):
        k = np.where(np.isinf(x), np.inf, (b + np.sqrt(np.maximum(disc, 0.0))) / 2.0)
    fill = np.nan if below == "nan" else np.sqrt(qa)
    return _out(np.where(sup, k, fill).astype(np.float64), s1 and s2 and s3)


# ----------------------------------------------------------------------------------------
# fluctuations of the outliers (class labels are a Bernoulli factor)
# ----------------------------------------------------------------------------------------
def _outlier_var_units(ka: np.ndarray, qa: np.ndarray, pa: np.ndarray | None) -> np.ndarray:
    """``M Var(lambda) / sigma2^2`` on the supercritical branch (NaN below the threshold)."""
    sup = ka > np.sqrt(qa)
    k = np.where(sup, ka, 1.0)
    g = 1.0 - qa / k**2
    ell = 1.0 + k
    if pa is None:
        v_quad = 2.0 * ell**2
    else:
        p = np.where(pa > 0, pa, 1.0)
        v_quad = k**2 * (1.0 - p) / p + 4.0 * k + 2.0
    out = 2.0 * ell**2 * g * (1.0 - g) + g**2 * v_quad
    return np.where(sup, out, np.nan)


def outlier_variance(
    kappa: float | np.ndarray,
    q: float | np.ndarray,
    M: int,
    sigma2: float | np.ndarray = 1.0,
    exposure: float | np.ndarray | None = None,
) -> float | np.ndarray:
    r"""Variance of an outlier eigenvalue of ``N J`` around :func:`outlier_location`, to order 1/M.

    Write an example's component along the spike direction as ``s = <u, eta>`` and the
    rest as noise. The outlier is, to first order, ``g`` times the sample mean of ``s^2``
    plus a noise part, with ``g = d lambda_out / d(sigma2 (1 + kappa)) = 1 - q / kappa^2``:

        M Var(lambda) / sigma2^2 = 2 (1 + kappa)^2 g (1 - g) + g^2 Var(s^2) / sigma2^2.

    For a Gaussian spike ``Var(s^2) = 2 sigma2^2 (1 + kappa)^2`` and the formula is the
    classical ``2 (1 + kappa)^2 (1 - q / kappa^2)`` of Paul (2007, Thm. 3)
    {cite:p}`paul2007`. In the Hebbian model the class label is a Bernoulli factor,
    ``s = sqrt(N) r B + e`` with ``B ~ Bernoulli(pi)`` and ``e`` of variance ``sigma2``, so

        Var(s^2) / sigma2^2 = kappa^2 (1 - pi) / pi + 4 kappa + 2,

    larger than the Gaussian value when ``pi < 1/3`` and smaller when ``pi > 1/3`` (a single
    class, ``pi = 1``, fluctuates only through its channel noise). Derived in
    {ref}`sec-bbp-fluctuations`.

    Parameters
    ----------
    kappa : float or numpy.ndarray
        Spike strength(s), >= 0; ``kappa <= sqrt(q)`` (no outlier) gives NaN.
    q : float or numpy.ndarray
        Aspect ratio N / M, > 0.
    M : int
        Number of examples, >= 1.
    sigma2 : float or numpy.ndarray
        Bulk variance, > 0.
    exposure : float or numpy.ndarray, optional
        Class weight pi in (0, 1] of the spike (Hebbian model); ``None`` = Gaussian spike.

    Returns
    -------
    float or numpy.ndarray
        Variance of the eigenvalue (units of ``N J``).
    """
    ka, s1 = _num(kappa, "kappa", low=0.0)
    qa, s2 = _num(q, "q", low=0.0, low_open=True)
    sa, s3 = _num(sigma2, "sigma2", low=0.0, low_open=True)
    M = check_positive_int(M, "M")
    if exposure is None:
        ka, qa, sa = _broadcast(kappa=ka, q=qa, sigma2=sa)
        pa, s4 = None, True
    else:
        pa, s4 = _num(exposure, "exposure", low=0.0, high=1.0, low_open=True)
        ka, qa, sa, pa = _broadcast(kappa=ka, q=qa, sigma2=sa, exposure=pa)
    out = sa**2 * _outlier_var_units(ka, qa, pa) / M
    return _out(out, s1 and s2 and s3 and s4)


def outlier_covariance(
    kappa: np.ndarray, exposure: np.ndarray, q: float, M: int, sigma2: float = 1.0
) -> np.ndarray:
    r"""Covariance matrix of the K outlier eigenvalues of one class mixture, to order 1/M.

    The diagonal is :func:`outlier_variance` with the Bernoulli label factor. The class
    counts of a batch are multinomial, ``Cov(B_mu, B_nu) = -pi_mu pi_nu``, so two outliers
    move in opposite directions:

        M Cov(lambda_mu, lambda_nu) / sigma2^2 = - g_mu g_nu kappa_mu kappa_nu,   mu != nu,

    with ``g = 1 - q / kappa^2``; the noise parts of distinct spikes are independent at this
    order. (Check: with ``kappa_mu = c pi_mu`` the label parts of the sum of the outliers
    cancel, as they must, since ``sum_mu B_mu = 1``.) Spikes below the threshold get NaN
    rows and columns. Derived in {ref}`sec-bbp-fluctuations`.

    Parameters
    ----------
    kappa : numpy.ndarray
        (K,) spike strengths >= 0.
    exposure : numpy.ndarray
        (K,) class weights in (0, 1], summing to at most 1.
    q : float
        Aspect ratio N / M, > 0.
    M : int
        Number of examples, >= 1.
    sigma2 : float
        Bulk variance, > 0.

    Returns
    -------
    numpy.ndarray
        (K, K) covariance (units of ``N J`` squared).
    """
    if not isinstance(kappa, np.ndarray) or kappa.ndim != 1 or kappa.size == 0:
        raise ValueError(f"kappa must be a non-empty 1-D numpy array, got {_describe(kappa)}")
    if not isinstance(exposure, np.ndarray) or exposure.shape != kappa.shape:
        raise ValueError(
            f"exposure must be a numpy array of the same shape as kappa {kappa.shape}, got {_describe(exposure)}"
        )
    ka, _ = _num(kappa, "kappa", low=0.0)
    pa, _ = _num(exposure, "exposure", low=0.0, high=1.0, low_open=True)
    if pa.sum() > 1.0 + 1e-9:
        raise ValueError(f"exposure must sum to at most 1 (classes of one mixture), got sum {pa.sum()!r}")
    q = check_in_range(q, "q", low=0.0, low_open=True)
    sigma2 = check_in_range(sigma2, "sigma2", low=0.0, low_open=True)
    M = check_positive_int(M, "M")
    sup = ka > np.sqrt(q)
    k = np.where(sup, ka, 1.0)
    g = 1.0 - q / k**2
    cov = -np.outer(g * k, g * k)
    np.fill_diagonal(cov, _outlier_var_units(ka, np.full_like(ka, q), pa))
    cov[~sup, :] = np.nan
    cov[:, ~sup] = np.nan
    return sigma2**2 * cov / M


# ----------------------------------------------------------------------------------------
# outliers on a heterogeneous (free-convolution) bulk
# ----------------------------------------------------------------------------------------
def _free_components(scales: Any, ratios: Any) -> tuple[np.ndarray, np.ndarray]:
    for name, x in (("scales", scales), ("ratios", ratios)):
        if not isinstance(x, np.ndarray) or x.ndim != 1 or x.size == 0:
            raise ValueError(f"{name} must be a non-empty 1-D numpy array, got {_describe(x)}")
    if scales.shape != ratios.shape:
        raise ValueError(f"scales and ratios must have the same shape, got {scales.shape} and {ratios.shape}")
    a, _ = _num(scales, "scales", low=0.0)
    c, _ = _num(ratios, "ratios", low=0.0, low_open=True)
    if not np.any(a > 0):
        raise ValueError("scales must contain at least one positive entry (an all-zero bulk has no edge)")
    return a, c


def _free_edge_G(a: np.ndarray, c: np.ndarray) -> float:
    """Minimiser G_e of ``x(G) = 1/G + sum a / (1 - a c G)`` on (0, 1 / max(a c))."""
    live = a > 0
    a, c = a[live], c[live]
    top = float(np.max(a * c))

    def dx(G: float) -> float:
        return -1.0 / G**2 + float(np.sum(a * a * c / (1.0 - a * c * G) ** 2))

    lo, hi = 1e-9 / top, (1.0 - 1e-12) / top
    while dx(lo) > 0:  # pragma: no cover - only for absurd dynamic ranges
        lo /= 1e3
    return float(scipy.optimize.brentq(dx, lo, hi, xtol=1e-15 / top, rtol=1e-14, maxiter=500))


def _free_x(G: float, a: np.ndarray, c: np.ndarray) -> float:
    return 1.0 / G + float(np.sum(a / (1.0 - a * c * G)))


def free_bulk_edge(scales: np.ndarray, ratios: np.ndarray) -> float:
    r"""Right edge of the free additive convolution of scaled Marchenko-Pastur laws.

    Component c is the bulk of ``a_c`` times a white sample covariance of ratio ``q_c``
    (R-transform ``a_c / (1 - a_c q_c G)``); the edge is the minimum over
    ``0 < G < 1 / max_c a_c q_c`` of ``x(G) = 1/G + sum_c a_c / (1 - a_c q_c G)``. One
    component gives ``a (1 + sqrt q)^2``. An implementation independent of
    :func:`fedlam.spectral.free_mp_edge` (which fits the components from uploads); the
    tests check that they agree. Derived in {ref}`sec-bbp-free`.

    Parameters
    ----------
    scales : numpy.ndarray
        (C,) bulk scales ``a_c >= 0`` (eigenvalue units of the sum; at least one > 0).
    ratios : numpy.ndarray
        (C,) aspect ratios ``q_c = N / M_c > 0``.

    Returns
    -------
    float
    """
    a, c = _free_components(scales, ratios)
    live = a > 0
    return _free_x(_free_edge_G(a, c), a[live], c[live])


def _free_strengths(strengths: Any, C: int) -> tuple[np.ndarray, bool]:
    if not isinstance(strengths, np.ndarray) or strengths.ndim not in (1, 2) or strengths.shape[-1] != C:
        raise ValueError(
            f"strengths must be a numpy array of shape (C,) or (K, C) with C = {C} components, "
            f"got {_describe(strengths)}"
        )
    t, _ = _num(strengths, "strengths", low=0.0)
    return np.atleast_2d(t), strengths.ndim == 1


def free_bbp_criterion(strengths: np.ndarray, scales: np.ndarray, ratios: np.ndarray) -> float | np.ndarray:
    r"""BBP criterion of a spike on a heterogeneous bulk: an outlier exists iff the value exceeds 1.

    Component c contributes a bulk of scale ``a_c`` and ratio ``q_c`` and, along the
    spike direction, a population excess ``t_c = a_c kappa_c`` (for client c of a server
    mean of L uploads with blend weight ``w_c``: ``a_c = w_c (1 - r_c^2) / L`` and
    ``t_c = w_c N r_c^2 pi_c / L``). The outlier solves ``1/G = sum_c t_c / (1 - a_c q_c G)``,
    which has a root below the edge point ``G_e`` iff

        sum_c t_c G_e / (1 - a_c q_c G_e) > 1.

    One component gives ``kappa / sqrt(q)``: the classical threshold. Derived in
    {ref}`sec-bbp-free`.

    Parameters
    ----------
    strengths : numpy.ndarray
        (C,) or (K, C) excesses ``t_c >= 0`` of one spike (or K spikes) per component.
    scales, ratios : numpy.ndarray
        (C,) components, see :func:`free_bulk_edge`.

    Returns
    -------
    float or numpy.ndarray (K,)
    """
    a, c = _free_components(scales, ratios)
    t, one = _free_strengths(strengths, a.size)
    Ge = _free_edge_G(a, c)
    val = (t / (1.0 - a * c * Ge)).sum(axis=1) * Ge
    return float(val[0]) if one else val


def free_outlier_location(strengths: np.ndarray, scales: np.ndarray, ratios: np.ndarray) -> float | np.ndarray:
    r"""Location of the outlier a spike produces on a heterogeneous (free-convolution) bulk.

    With ``G*`` the root of ``1/G = sum_c t_c / (1 - a_c q_c G)`` on ``(0, G_e)``, the outlier
    sits at ``x(G*) = 1/G* + sum_c a_c / (1 - a_c q_c G*)``; below the criterion of
    :func:`free_bbp_criterion` the spike makes no outlier and the bulk edge is returned
    (as :func:`outlier_location` does). One component gives
    ``a (1 + kappa)(1 + q / kappa)``. Derived in {ref}`sec-bbp-free` (Schur complement on the
    spike direction and the companion resolvent of the weighted sample covariance).

    Parameters
    ----------
    strengths : numpy.ndarray
        (C,) or (K, C) excesses ``t_c >= 0``, see :func:`free_bbp_criterion`.
    scales, ratios : numpy.ndarray
        (C,) components, see :func:`free_bulk_edge`.

    Returns
    -------
    float or numpy.ndarray (K,)
    """
    a, c = _free_components(scales, ratios)
    t, one = _free_strengths(strengths, a.size)
    Ge = _free_edge_G(a, c)
    live = a > 0
    edge = _free_x(Ge, a[live], c[live])
    out = np.empty(t.shape[0])
    for k, tk in enumerate(t):

        def F(G: float, tk: np.ndarray = tk) -> float:
            return 1.0 / G - float(np.sum(tk / (1.0 - a * c * G)))

        if F(Ge) >= 0.0:
            out[k] = edge
            continue
        lo = Ge
        while F(lo) <= 0.0:
            lo /= 2.0
        G = float(scipy.optimize.brentq(F, lo, Ge, xtol=1e-15 * Ge, rtol=1e-14, maxiter=500))
        out[k] = _free_x(G, a[live], c[live])
    return float(out[0]) if one else out


# ----------------------------------------------------------------------------------------
# the blended upload (1 - w) A + w B
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlendSpectrum:
    """Predicted spectrum of ``N J_c`` for a blended upload (see :func:`blend_spectrum`).

    Attributes
    ----------
    held : numpy.ndarray
        Eigenvalues along the K_held broadcast directions.
    new : numpy.ndarray
        Outliers of the novel spikes (the bulk edge where a spike is subcritical).
    edge : float
        Right edge of the bulk.
    low_edge : float
        Left edge of the non-zero bulk.
    diagonal : float
        Every diagonal entry of ``N J_c`` (exact): ``(1 - w) K_held + w``.
    """

    held: np.ndarray
    new: np.ndarray
    edge: float
    low_edge: float
    diagonal: float


def blend_spectrum(
    w: float,
    N: int,
    M: int,
    sigma2: float,
    kappa_held: np.ndarray | None = None,
    kappa_new: np.ndarray | None = None,
) -> BlendSpectrum:
    r"""Spectrum of the blended upload ``N J_c = (1 - w) N A + w N B`` (paper eq. (3.4)).

    ``A = X^T X / N`` is the broadcast of K_held orthogonal +-1 patterns (``N A`` has the
    eigenvalue N on their span), ``B`` the client's Hebbian operator of M examples of bulk
    variance ``sigma2``, with spike strengths ``kappa_held`` along the broadcast directions
    (0 for a held class absent from the batch) and ``kappa_new`` along directions
    orthogonal to them. With ``P`` the projector off the broadcast span:

    * the compression ``P N B P`` is exactly ``sigma2`` times a white sample covariance in
      dimension ``N - K_held`` plus the novel spikes, so the bulk is ``w sigma2`` times a
      Marchenko-Pastur law of ratio ``q' = (N - K_held)/M`` and a novel spike makes the
      outlier ``w lambda_out(kappa, q', sigma2)`` iff ``kappa > sqrt(q')``: blending scales
      spike and bulk alike and does not change what one upload can show;
    * along a held direction u (second-order perturbation, valid when ``(1 - w) N`` is large
      against ``w ||N B||``): ``(1 - w) N + w sigma2 (1 + kappa) + w^2 sigma2^2 (1 + kappa)
      q' / ((1 - w) N)``;
    * exactly, every diagonal entry is ``(1 - w) K_held + w``.

    ``w = 1`` is B alone (held spikes become ordinary BBP outliers of ratio N / M). Derived
    in {ref}`sec-ctrl-blend`.

    Parameters
    ----------
    w : float
        Blend weight in [0, 1].
    N, M : int
        Neurons (>= 2) and batch size (>= 1).
    sigma2 : float
        Bulk variance of the batch, > 0.
    kappa_held, kappa_new : numpy.ndarray, optional
        1-D spike strengths >= 0 (default: none).

    Returns
    -------
    BlendSpectrum
    """
    w = check_in_range(w, "w", 0.0, 1.0)
    N = check_positive_int(N, "N", minimum=2)
    M = check_positive_int(M, "M")
    sigma2 = check_in_range(sigma2, "sigma2", low=0.0, low_open=True)
    kh: list[np.ndarray] = []
    kn: list[np.ndarray] = []
    for name, x, dest in (("kappa_held", kappa_held, kh), ("kappa_new", kappa_new, kn)):
        if x is None:
            dest.append(np.empty(0))
            continue
        if not isinstance(x, np.ndarray) or x.ndim != 1:
            raise ValueError(f"{name} must be a 1-D numpy array, got {_describe(x)}")
        dest.append(_num(x, name, low=0.0)[0])
    kh_a, kn_a = kh[0], kn[0]
    if kh_a.size + kn_a.size >= N:
        raise ValueError(f"kappa_held and kappa_new must hold fewer than N = {N} spikes, got {kh_a.size + kn_a.size}")
    if w == 1.0:
        q1 = N / M
        held = np.asarray(outlier_location(kh_a, q1, sigma2), dtype=np.float64)
        qp = q1
    else:
        qp = (N - kh_a.size) / M
        held = (1.0 - w) * N + w * sigma2 * (1.0 + kh_a) + w**2 * sigma2**2 * (1.0 + kh_a) * qp / ((1.0 - w) * N)
    new = w * np.asarray(outlier_location(kn_a, qp, sigma2), dtype=np.float64)
    lo, hi = mp_edges(qp, w * sigma2) if w > 0 else (0.0, 0.0)
    return BlendSpectrum(held=held, new=new, edge=float(hi), low_edge=float(lo),
                         diagonal=(1.0 - w) * kh_a.size + w)


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


def weyl_sufficient_kappa(N: int, M: int, delta: float = 0.05, sigma2: float = 1.0) -> float:
    r"""Smallest spike strength that concentration alone certifies as visible (Weyl's inequality).

    By Weyl's inequality every eigenvalue of ``N J`` lies within ``||N J - E[N J]||`` of
    the matching eigenvalue of ``E[N J]``; a spike whose gap ``sigma2 kappa`` exceeds twice
    the Bernstein deviation :func:`bernstein_bound` therefore stands out of the bulk with
    probability >= 1 - delta. The deviation itself grows with the spike: the variance proxy
    contains ``lambda_1 (N - lambda_1) / M`` with ``lambda_1 = sigma2 (1 + kappa)``. So the
    condition is the self-consistent ``sigma2 kappa >= 2 t_delta(kappa)``, solved here for
    one spike along an archetype direction (orthogonal case), i.e. with

        v(kappa) = max(sigma2 (N - sigma2), lambda_1 (N - lambda_1)) / M,
        t_delta = q ell / 3 + sqrt((q ell / 3)^2 + 2 v ell),   ell = log(2 N / delta).

    Compare with the BBP threshold ``sqrt(q)``. Derived in {ref}`sec-concentration`.

    Parameters
    ----------
    N, M : int
        Dimension (>= 2) and number of examples (>= 1).
    delta : float
        Failure probability in (0, 1).
    sigma2 : float
        Bulk variance in (0, 1] (``1 - r^2``).

    Returns
    -------
    float
        The smallest such kappa (``inf`` if even the largest possible spike is not certified).
    """
    N = check_positive_int(N, "N", minimum=2)
    M = check_positive_int(M, "M")
    delta = check_in_range(delta, "delta", 0.0, 1.0, low_open=True, high_open=True)
    sigma2 = check_in_range(sigma2, "sigma2", 0.0, 1.0, low_open=True)
    q = N / M
    ell = float(np.log(2.0 * N / delta))
    a = q * ell / 3.0

    def gap(k: float) -> float:
        lam1 = min(sigma2 * (1.0 + k), float(N))
        v = max(sigma2 * (N - sigma2), lam1 * (N - lam1)) / M
        return sigma2 * k - 2.0 * (a + np.sqrt(a * a + 2.0 * v * ell))

    k_max = N / sigma2 - 1.0
    grid = np.geomspace(1e-6, k_max, 2000)
    vals = np.array([gap(float(k)) for k in grid])
    ok = np.flatnonzero(vals >= 0)
    if ok.size == 0:
        return float("inf")
    i = int(ok[0])
    if i == 0:
        return float(grid[0])
    return float(scipy.optimize.brentq(gap, float(grid[i - 1]), float(grid[i]), xtol=1e-12, rtol=1e-12))


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
    vals = scipy.special.airy(x[iu[0]] + x[iu[1]] + s)[0]  # the kernel is symmetric
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
        return float(scipy.optimize.brentq(lambda s: _tw1_cdf_scalar(s) - pv, -10.0, 11.0, xtol=1e-10))

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
    mu, sigma = _center_scale(m, n, M)
    return float(mu), float(sigma)


def _center_scale(m: Any, n: Any, M: Any) -> tuple[Any, Any]:
    """The formula of :func:`johnstone_center_scale` for shifted sizes ``m``, ``n`` (scalars or
    arrays, e.g. the block solver's bulk fits for every spike count at once)."""
    a = np.sqrt(m) + np.sqrt(n)
    return a * a / M, a * (1.0 / np.sqrt(m) + 1.0 / np.sqrt(n)) ** (1.0 / 3.0) / M
