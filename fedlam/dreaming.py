"""The dreaming (unlearning) flow on a symmetric operator.

The paper's iteration (eq. (2.17)) ``J_{k+1} = J_k + eps/(1+eps k) (J_k - J_k^2)`` acts
on each eigenvalue separately, ``lam -> lam + eps_k lam (1 - lam)``. It is a forward-Euler
discretisation of the logistic flow in the log-time ``s = log(1 + t)``, whose exact solution
is ``lam(t) = (1 + t) lam / (1 + t lam)``; ``eps = 0.01`` for 200 steps is the flow time
``t = 2``. One symmetric eigendecomposition therefore gives the result exactly
(:func:`dream`); the matrix iteration is kept as :func:`dream_literal` (test oracle and
benchmark baseline). Run to convergence the iteration sends *every* positive eigenvalue to 1,
bulk noise included: ``dream(J, inf)`` is the orthogonal projector on the span of all the
examples, so the flow time must stay finite and be chosen. Derived in
{ref}`sec-dreaming-flow` and {ref}`sec-dreaming-stop`. Re-exported by :mod:`fedlam.spectral`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedlam._eig import Spectrum, _check_spectrum_of, _eig_full
from fedlam._validation import check_count, check_in_range, check_operator, check_real

__all__ = ["ZERO_RTOL", "dream_eigenvalues", "dream", "dream_literal"]

#: eigenvalues below ``ZERO_RTOL * max(|lam|)`` are treated as exact zeros (rank deficiency).
ZERO_RTOL = 1e-8

#: Largest number of discrete dreaming steps (the paper uses 200; a step of
#: :func:`dream_literal` is a dense N x N product). Refused before any work.
MAX_DREAM_STEPS = 100_000


# dreaming
def _check_time(t: Any, allow_inf: bool) -> float:
    v = check_real(t, "t", finite=False)
    if math.isnan(v) or v < 0 or (math.isinf(v) and not allow_inf):
        raise ValueError(f"t must be a real >= 0{' (inf allowed)' if allow_inf else ' and finite'}, got {t!r}")
    return v


def dream_eigenvalues(lam: Any, t: float, steps: int | None = None) -> np.ndarray:
    """The dreaming map on eigenvalues.

    ``steps=None``: the exact continuous flow ``(1 + t) lam / (1 + t lam)``. ``t = inf`` is
    the converged limit: 1 for every positive eigenvalue, 0 for a zero one (the projector on
    the range), which is why the flow time must stay finite.

    ``steps=n``: the exact result of the paper's n-step iteration (eq. (2.17)) with
    ``eps = t / n``, i.e. ``lam <- lam + eps/(1 + eps k) (lam - lam^2)`` for
    ``k = 0..n-1``. Applied in the eigenbasis this is *identical* to the matrix iteration,
    because every ``J_k`` is a polynomial in ``J``.

    Derived in {ref}`sec-dreaming-flow`.

    Parameters
    ----------
    lam : float or numpy.ndarray
        Eigenvalue(s); must satisfy ``1 + t lam > 0`` for the closed form (true for a
        positive semi-definite operator).
    t : float
        Flow time ``>= 0`` (the paper's default ``eps = 0.01``, 200 steps is ``t = 2``).
    steps : int or None
        Number of discrete steps, or None for the continuous flow.

    Returns
    -------
    numpy.ndarray
        float64 array of the same shape as ``lam``.

    Examples
    --------
    >>> round(float(dream_eigenvalues(0.2, 2.0)), 6)  # raw signal eigenvalue ~ r^2 pi
    0.428571
    """
    if isinstance(lam, (bool, np.bool_)):
        raise TypeError(f"lam must be a real number or a float array, got bool {lam!r}")
    arr = np.asarray(lam)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"lam must be real, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError("lam must be finite")
    if steps is None:
        t = _check_time(t, allow_inf=True)
        if math.isinf(t):
            tol = ZERO_RTOL * max(float(np.max(np.abs(arr), initial=0.0)), 1e-300)
            if np.any(arr < -tol):
                raise ValueError("lam must be >= 0 for t = inf (negative eigenvalues diverge)")
            return np.where(arr > tol, 1.0, 0.0)
        with np.errstate(over="ignore", invalid="ignore"):
            den = 1.0 + t * arr
            if np.any(den <= 0):
                raise ValueError(f"1 + t*lam must be > 0 (the flow has a pole at lam = -1/t), "
                                 f"got min {float(den.min())!r}")
            out = (1.0 + t) * arr / den
            if not np.all(np.isfinite(out)):  # t * lam overflowed: the same map with 1/t, bounded
                u = 1.0 / t
                out = np.where(np.isfinite(out), out, arr * (1.0 + u) / (u + arr))
        return out
    t = _check_time(t, allow_inf=False)
    n = check_count(steps, "steps", MAX_DREAM_STEPS)
    eps = t / n
    out = arr.copy()
    for k in range(n):
        out = out + (eps / (1.0 + eps * k)) * (out - out * out)
    return out


def dream(J: np.ndarray, t: float, steps: int | None = None, spectrum: Spectrum | None = None) -> np.ndarray:
    """Sharpened operator ``V f(Lambda) V^T`` with ``f`` = :func:`dream_eigenvalues`.

    ``dream(J, 2.0, steps=200)`` equals ``dream_literal(J, 0.01, 200)`` to rounding (about
    1e-13 relative at N = 1000) at the price of one eigendecomposition instead of 200 dense
    matrix products. ``steps=None`` uses the continuous flow, which differs from the
    200-step iteration by ``O(eps)``. Derived in {ref}`sec-dreaming-flow`.

    Parameters
    ----------
    J : numpy.ndarray
        float (N, N) symmetric operator.
    t : float
        Flow time (``inf`` gives the projector on the range of ``J``).
    steps : int or None
        See :func:`dream_eigenvalues`.
    spectrum : Spectrum or None
        A *complete* spectrum of ``J`` to reuse (skips the eigendecomposition).

    Returns
    -------
    numpy.ndarray
        float64 (N, N) symmetric.
    """
    check_operator(J, "J")
    if spectrum is None:
        spec = _eig_full(J)
    else:
        if not isinstance(spectrum, Spectrum):
            raise TypeError(f"spectrum must be a Spectrum or None, got {type(spectrum).__name__}")
        if spectrum.n != J.shape[0] or not spectrum.complete:
            raise ValueError(
                f"spectrum must be the complete spectrum of J (N = {J.shape[0]}), got "
                f"{len(spectrum)} of N = {spectrum.n} eigenpairs"
            )
        _check_spectrum_of(spectrum, J)
        spec = spectrum
    f = dream_eigenvalues(spec.values, t, steps)
    V = spec.vectors
    out = (V * f) @ V.T
    return 0.5 * (out + out.T)


def dream_literal(J: np.ndarray, eps: float, steps: int) -> np.ndarray:
    """The paper's dreaming iteration, literally (paper eq. (2.17)): test oracle and baseline.

    ``J_{k+1} = J_k + eps/(1 + eps k) (J_k - J_k^2)``, ``J_0 = J``, for ``k = 0..steps-1``:
    ``steps`` dense N x N matrix products. Use :func:`dream` instead (same result, one
    eigendecomposition). Derived in {ref}`sec-dreaming-flow`.

    Parameters
    ----------
    J : numpy.ndarray
        float (N, N) symmetric.
    eps : float
        Step ``> 0`` (paper: 0.01). The paper asks ``eps < [(1 + sqrt(tr J / N))^2 - 1]^{-1}``.
    steps : int
        Number of iterations ``>= 1`` (paper: 200).
    """
    check_operator(J, "J")
    eps = check_in_range(eps, "eps", 0.0, None, low_open=True)
    n = check_count(steps, "steps", MAX_DREAM_STEPS)
    X = np.array(J, dtype=np.float64, copy=True)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(n):
            e = eps / (1.0 + eps * k)
            X = (1.0 + e) * X - e * (X @ X)
            if not np.all(np.isfinite(X)):
                bound = 1.0 / ((1.0 + math.sqrt(max(float(np.trace(J)) / J.shape[0], 0.0))) ** 2 - 1.0) \
                    if np.trace(J) > 0 else math.inf
                raise ValueError(
                    f"eps = {eps!r} is too large: the iteration diverged at step {k + 1} (an eigenvalue "
                    f"above 1 + 1/eps grows without bound); the paper asks eps < {bound:.4g}"
                )
    return 0.5 * (X + X.T)


# ----------------------------------------------------------------------------------------
