"""Private home of the eigensolvers shared by the spectral modules.

:class:`Spectrum` (public, re-exported by :mod:`fedlam.spectral`), the full and partial
symmetric eigendecompositions with reproducible eigenvector signs, and the approximate
top-``k`` eigenvalues used for bulk statistics. Nothing here validates its input: the public
entry points (:func:`fedlam.spectral.spectrum`, :func:`fedlam.spectral.top_spectrum`) do.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg  # scipy.sparse.linalg loads on first use (a Flower site never needs it)

from fedlam._validation import _describe, check_operator, check_positive_int, check_real


# ----------------------------------------------------------------------------------------
# spectra
@functools.lru_cache(maxsize=8)
def _sign_reference(n: int) -> np.ndarray:
    """A fixed generic unit vector of length n (read-only) that sets eigenvector signs."""
    ref = np.random.default_rng(20261126).standard_normal(n)
    ref /= np.linalg.norm(ref)
    ref.setflags(write=False)
    return ref


@dataclass(frozen=True)
class Spectrum:
    """Eigen-decomposition of a symmetric operator, eigenvalues in descending order.

    Attributes
    ----------
    values : numpy.ndarray
        float64 (k,) eigenvalues, descending (k = N for a complete spectrum).
    vectors : numpy.ndarray
        float64 (N, k), column ``i`` is the unit eigenvector of ``values[i]``.
    n : int
        Dimension N of the operator.
    trace : float
        ``tr J`` (sum of *all* N eigenvalues, also for a partial spectrum).
    sum_sq : float
        ``||J||_F^2`` (sum of the squares of all N eigenvalues).

    A partial spectrum (from :func:`top_spectrum`) keeps ``trace`` and ``sum_sq`` of the
    whole operator, which is all the bulk estimators need: the mean and the variance of the
    eigenvalues left after removing the top ``k`` follow from them exactly.
    """

    values: np.ndarray
    vectors: np.ndarray
    n: int
    trace: float
    sum_sq: float

    def __post_init__(self) -> None:
        _check_spectrum_fields(self)
        # Eigenvectors are defined up to sign, and the sign an eigensolver returns can change
        # between runs (its sums depend on memory alignment). Fix it: every column has a
        # positive inner product with one fixed generic vector, so seeds built from the
        # vectors, and everything downstream, are the same in every run.
        V = self.vectors
        if V.ndim == 2 and V.shape[1] and V.shape[0] == self.n:
            flip = (_sign_reference(self.n) @ V) < 0
            if flip.any():
                V = V.copy()
                V[:, flip] *= -1.0
                object.__setattr__(self, "vectors", V)

    @property
    def complete(self) -> bool:
        """True when all N eigenpairs are present."""
        return self.values.shape[0] == self.n

    def __len__(self) -> int:
        return int(self.values.shape[0])


def _check_spectrum_fields(s: Spectrum) -> None:
    """Validate a Spectrum's fields (a hand-built one included): finite descending float values,
    vectors (N, k) matching them (or empty: no vectors), N >= 1, finite trace, sum_sq >= 0
    (``inf`` allowed: the estimators rescale such a spectrum)."""
    n = check_positive_int(s.n, "n")
    v = s.values
    if not isinstance(v, np.ndarray) or not np.issubdtype(v.dtype, np.floating) or v.ndim != 1:
        raise TypeError(f"values must be a 1-D float numpy array, got {_describe(v)}")
    if v.shape[0] > n:
        raise ValueError(f"values must hold at most n = {n} eigenvalues, got {v.shape[0]}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"values must be finite, found {int((~np.isfinite(v)).sum())} NaN/inf entries")
    if v.shape[0] > 1 and np.any(v[1:] > v[:-1]):
        raise ValueError("values must be in descending order (largest eigenvalue first), "
                         f"got values[{int(np.argmax(v[1:] > v[:-1]))}] < the next one")
    V = s.vectors
    if not isinstance(V, np.ndarray) or not np.issubdtype(V.dtype, np.floating) or V.ndim != 2:
        raise TypeError(f"vectors must be a 2-D float numpy array, got {_describe(V)}")
    if V.size and V.shape != (n, v.shape[0]):
        raise ValueError(f"vectors must have shape (n, len(values)) = ({n}, {v.shape[0]}) or be empty, "
                         f"got shape {V.shape}")
    check_real(s.trace, "trace")
    ss = check_real(s.sum_sq, "sum_sq", finite=False)  # +inf: ||J||_F^2 of a huge operator overflows
    if not ss >= 0.0:
        raise ValueError(f"sum_sq must be >= 0 (||J||_F^2), got {s.sum_sq!r}")


# documented and pickled under its public home
Spectrum.__module__ = "fedlam.spectral"


def _eig_full(J: np.ndarray) -> Spectrum:
    """:func:`spectrum` without argument checks (for callers that validated ``J``)."""
    w, V = scipy.linalg.eigh(J, driver="evd", check_finite=False)
    return Spectrum(
        values=np.ascontiguousarray(w[::-1]),
        vectors=np.ascontiguousarray(V[:, ::-1]),
        n=J.shape[0],
        trace=float(np.trace(J)),
        sum_sq=float(np.einsum("ij,ij->", J, J)),
    )

def _eig_top(J: np.ndarray, k: int, method: str = "auto") -> Spectrum:
    """:func:`top_spectrum` without argument checks (for callers that validated ``J``)."""
    N = J.shape[0]
    if k == N:
        return _eig_full(J)
    if method == "auto":
        method = "lanczos" if (N >= 500 and 10 * k <= N) else "evr"
    w = V = None
    if method == "lanczos" and k < N - 1:
        v0 = np.random.default_rng(0).standard_normal(N)
        try:
            w, V = scipy.sparse.linalg.eigsh(J, k=k, which="LA", v0=v0, tol=1e-12)
        except scipy.sparse.linalg.ArpackError:
            w = V = None
        if w is not None and V is not None:  # both set or both None
            order = np.argsort(w)
            w, V = w[order], V[:, order]
    if w is None or V is None:
        w, V = scipy.linalg.eigh(J, subset_by_index=[N - k, N - 1], driver="evr", check_finite=False)
    return Spectrum(
        values=np.ascontiguousarray(w[::-1]),
        vectors=np.ascontiguousarray(V[:, ::-1]),
        n=N,
        trace=float(np.trace(J)),
        sum_sq=float(np.einsum("ij,ij->", J, J)),
    )


def _check_values(values: Any, name: str = "values") -> np.ndarray:
    if not isinstance(values, np.ndarray):
        raise TypeError(f"{name} must be a 1-D numpy float array of eigenvalues, got {type(values).__name__}")
    if not np.issubdtype(values.dtype, np.floating):
        raise TypeError(f"{name} must have a float dtype, got dtype {values.dtype}")
    if values.ndim != 1:
        raise ValueError(f"{name} must be 1-dimensional, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} must be finite")
    return values.astype(np.float64, copy=False)


def _as_spectrum(J_or_spec: Any, name: str = "J") -> Spectrum:
    if isinstance(J_or_spec, Spectrum):
        return J_or_spec
    if isinstance(J_or_spec, np.ndarray) and J_or_spec.ndim == 1:
        v = np.sort(_check_values(J_or_spec, name))[::-1]
        if v.shape[0] < 2:
            raise ValueError(f"{name} must hold N >= 2 eigenvalues, got {v.shape[0]}")
        return Spectrum(v, np.empty((0, v.shape[0])), v.shape[0], float(v.sum()), float(v @ v))
    if isinstance(J_or_spec, np.ndarray):
        check_operator(J_or_spec, name)
        return _eig_full(J_or_spec)
    raise TypeError(
        f"{name} must be an (N, N) operator, a Spectrum or a 1-D array of eigenvalues, "
        f"got {type(J_or_spec).__name__}"
    )


# ----------------------------------------------------------------------------------------

def _top_values_spectrum(X: np.ndarray, k: int, steps: int = 2) -> Spectrum:
    """Approximate top-``k`` eigenvalues (no vectors) with exact trace and sum_sq, for bulk statistics.

    ``N >= 200`` and ``4 k <= N``: block Krylov Rayleigh-Ritz, the span of
    ``[B, X B, ..., X^steps B]`` for a fixed random (N, k) start block ``B`` (seed 0), i.e.
    ``steps + 1`` products with k columns plus one with ``(steps + 1) k`` columns (BLAS-3,
    the matrix is read a handful of times; a few ms at N = 1000). The Ritz values lie below
    the true eigenvalues (Cauchy interlacing); outliers well above the bulk converge to
    ~1e-10 relative in two steps, values inside the bulk stay ~10 % low, which only makes
    the outlier test of the component conservative. An operator of rank ``<= k`` is
    captured exactly. Otherwise: ``eigh`` with ``subset_by_index`` (exact).
    """
    N = X.shape[0]
    k = min(k, N)
    if N >= 200 and 4 * k <= N:
        B = np.linalg.qr(np.random.default_rng(0).standard_normal((N, k)))[0]
        blocks = [B]
        for _ in range(steps):
            B = np.linalg.qr(X @ B)[0]
            blocks.append(B)
        Q = np.linalg.qr(np.hstack(blocks))[0]
        T = Q.T @ (X @ Q)
        w = scipy.linalg.eigvalsh(0.5 * (T + T.T), check_finite=False)[::-1][:k]
    else:
        w = scipy.linalg.eigh(X, subset_by_index=[N - k, N - 1], eigvals_only=True, driver="evr",
                              check_finite=False)[::-1]
    return Spectrum(values=np.ascontiguousarray(w, dtype=np.float64), vectors=np.empty((N, 0)), n=N,
                    trace=float(np.trace(X)), sum_sq=float(np.einsum("ij,ij->", X, X)))


def _check_spectrum_of(spec: Spectrum, J: np.ndarray) -> None:
    """A Spectrum passed with ``J`` must be one of ``J``: same trace and Frobenius norm, and
    its leading eigenpairs must satisfy ``J v = lambda v`` (O(N^2 k))."""
    tr = float(np.trace(J))
    fro = float(np.einsum("ij,ij->", J, J))
    scale = max(fro, 1e-300)
    bad = (abs(spec.trace - tr) > 1e-8 * (abs(tr) + np.sqrt(scale) * J.shape[0] ** 0.5)
           or abs(spec.sum_sq - fro) > 1e-8 * scale)
    if not bad and spec.vectors.shape[1]:
        k = min(spec.vectors.shape[1], 8)
        V = spec.vectors[:, :k]
        resid = np.linalg.norm(J @ V - V * spec.values[:k], axis=0)
        bad = bool(np.any(resid > 1e-6 * np.sqrt(scale)))
    if bad:
        raise ValueError("spectrum must be a spectrum of J (its trace, Frobenius norm or eigenpairs "
                         "do not match this operator)")
