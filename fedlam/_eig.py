"""Private home of the eigensolvers shared by the spectral modules.

:class:`Spectrum` (public, re-exported by :mod:`fedlam.spectral`), the full and partial
symmetric eigendecompositions with reproducible eigenvector signs, and the approximate
top-``k`` eigenvalues used for bulk statistics. Nothing here validates its input: the public
entry points (:func:`fedlam.spectral.spectrum`, :func:`fedlam.spectral.top_spectrum`) do.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
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
    residuals : numpy.ndarray or None
        ``||J v_i - lambda_i v_i||`` of each pair as measured by the block solver
        (:func:`fedlam.spectral.top_spectrum` with ``method="block"``); None when a direct
        or ARPACK solver produced the pairs (converged to rounding).

    A partial spectrum (from :func:`top_spectrum`) keeps ``trace`` and ``sum_sq`` of the
    whole operator, which is all the bulk estimators need: the mean and the variance of the
    eigenvalues left after removing the top ``k`` follow from them exactly.
    """

    values: np.ndarray
    vectors: np.ndarray
    n: int
    trace: float
    sum_sq: float
    residuals: np.ndarray | None = field(default=None, repr=False, compare=False)

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

def _eig_top(J: np.ndarray, k: int, method: str = "auto", start: np.ndarray | None = None,
             n_vectors: int | None = None, bulk_edge: tuple[float, float] | None = None,
             threshold: float | None = None) -> Spectrum:
    """:func:`top_spectrum` without argument checks (for callers that validated ``J``).

    ``method="block"``: :func:`_eig_block` (warm-started from ``start``, leading ``n_vectors``
    pairs to vector accuracy), falling back to ARPACK, then ``eigh``, when it does not converge
    within its cap. ``"auto"``: ARPACK (``"lanczos"``) when ``N >= 500`` and ``10 k <= N``,
    else ``"evr"``; ``"server"``: the same switch with ``"block"`` in place of ARPACK (the
    server's spectrum: :func:`fedlam.lam.factorize`, the support defence). ``bulk_edge``: the
    caller's (edge, Tracy-Widom scale) of the bulk, ``threshold`` its count threshold, for
    :func:`_eig_block`.
    """
    N = J.shape[0]
    if k == N:
        return _eig_full(J)
    large = N >= BLOCK_MIN_N and 10 * k <= N
    if method == "auto":
        method = "lanczos" if large else "evr"
    elif method == "server":
        # the server's callers converge the vectors of the K-hat spikes they detect
        # (_ensure_vectors): the solver itself needs none
        method = "block" if large else "evr"
        n_vectors = 0 if n_vectors is None else n_vectors
    if method == "block" and 2 * (k + 8) <= N:  # else the block would be half the matrix: evr
        out = _eig_block(J, k, start=start, n_vectors=n_vectors, bulk_edge=bulk_edge, threshold=threshold)
        if out is not None:
            return out
        method = "lanczos"  # the fallback: the solver before the block method
    elif method == "block":
        method = "evr"
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


# ----------------------------------------------------------------------------------------
# the block solver
#: relative residual ``||J v - theta v|| / |theta_1|`` of a pair whose vector is needed
VEC_RTOL = 1e-10
#: eigenvalue accuracy of the other pairs, in Tracy-Widom scales of the bulk's edge
VALUE_TW_FRACTION = 0.1
#: operator size from which ``precision="auto"`` iterates in mixed precision (``J`` of 32 MB:
#: beyond the caches, a product is a pass over main memory)
MIXED_MIN_N = 2000


#: the server's spectrum comes from the block solver from this ``N`` on (and ``10 k <= N``)
BLOCK_MIN_N = 500


def _server_sizes(N: int, threshold: float | None) -> tuple[int, int]:
    """(first size ``m``, margin) of the server's growing partial spectrum.

    The server asks its solver for ``m`` values and counts K-hat among them; the count may be
    limited by ``m`` -- the spectrum grows 4x -- while ``K_hat >= m - margin``. The block solver
    (from :data:`BLOCK_MIN_N` on) under a count threshold places every value below it there (a
    lower bound whose eigenvalue lies below, :func:`_eig_block`), and the rule reads each value
    only as above or below: two computed values below the threshold prove the count
    (``margin = 1``), so it starts from 8 values, and every value it is asked for costs columns
    in every product. Otherwise (LAPACK's subset solver below :data:`BLOCK_MIN_N`, whose extra
    values cost next to nothing; the bulk-fitting rules, which read the values after K-hat) it
    starts from 16 and keeps 8 values past the count. Derived in {ref}`sec-cost-block`.
    """
    if threshold is not None and N >= BLOCK_MIN_N:
        return 8, 1
    return min(N, 16), 8


def _float32_rtol(N: int) -> float:
    """Relative residual at which the float32 pass of the block solver takes a vector as
    converged: 8 times ``sqrt(N) u`` (``u = 2^-24``), the typical rounding error of a float32
    product with an N x N matrix (a residual cannot be measured below it); the float64 pass
    then brings the vector to :data:`VEC_RTOL`."""
    return 8.0 * math.sqrt(N) * 2.0**-24


def _svqb(W: np.ndarray, Q: np.ndarray | None = None, drop: float = 1e-10) -> np.ndarray:
    """Orthonormal basis of the part of ``span W`` orthogonal to the orthonormal ``Q``.

    Two passes of block Gram-Schmidt against ``Q`` and of SVQB (Stathopoulos and Wu 2002):
    ``G = W^T W`` scaled to unit diagonal, ``W <- W D U S^{-1/2}`` from ``eigh(G)``, columns
    with ``S < drop`` (relative) dropped. Only matrix products and one small ``eigh``: BLAS-3,
    and a rank-deficient ``W`` (converged residuals) loses columns instead of failing.
    """
    for sweep in range(2):
        d0 = np.sqrt(np.einsum("ij,ij->j", W, W))
        if Q is not None and Q.shape[1]:
            W = W - Q @ (Q.T @ W)
        d = np.sqrt(np.einsum("ij,ij->j", W, W))
        keep = d > 1e-300
        if not keep.all():
            W, d, d0 = W[:, keep], d[keep], d0[keep]
        if W.shape[1] == 0:
            return W
        W = W / d
        s, U = np.linalg.eigh(W.T @ W)
        ok = s > drop * max(float(s[-1]), 1e-300)
        W = W @ (U[:, ok] / np.sqrt(s[ok]))
        # "twice is enough" (Parlett and Kahan): one sweep already leaves W orthonormal and
        # orthogonal to Q to rounding when no column lost more than half its square norm to
        # the projection and the Gram matrix was well conditioned (SVQB's error ~ u cond(G))
        if sweep == 0 and np.all(d * d >= 0.5 * d0 * d0) and float(s[ok][0]) >= 1e-2 * float(s[-1]):
            break
    return W


def _bulk_scales(theta: np.ndarray, n_max: int, N: int, trace: float,
                 sum_sq: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Marchenko-Pastur fits of the eigenvalues left after the top ``n_out``, for every
    ``n_out = 0 .. n_max``: arrays (edge, TW scale, spread) of length ``n_max + 1``.

    Mean ``m`` and variance ``v`` of the remaining ``N - n_out`` eigenvalues from ``trace`` and
    ``sum_sq``; ``q = v / m^2``; edge ``m (1 + sqrt q)^2``; Tracy-Widom scale ``m sigma`` with
    ``sigma`` of :func:`fedlam.rmt.johnstone_center_scale` at ``M = N / q`` (its formula,
    vectorised); spread = edge minus the lower edge ``m (1 - sqrt q)^2`` (0 when ``q >= 1``:
    the bulk reaches the zeros). All three are 0 where ``m <= 0`` or ``v <= 0``.
    """
    from fedlam.rmt import _center_scale

    top = theta[:n_max]
    n_out = np.arange(n_max + 1)
    nb = N - n_out
    m = (trace - np.concatenate([[0.0], np.cumsum(top)])) / nb
    v = (sum_sq - np.concatenate([[0.0], np.cumsum(top * top)])) / nb - m * m
    ok = (m > 0) & (v > 0)
    m_ok = np.where(ok, m, 1.0)
    q = np.where(ok, v, 1.0) / (m_ok * m_ok)
    rq = np.sqrt(q)
    edge = m_ok * (1.0 + rq) ** 2
    M = np.minimum(np.maximum(2.0, np.round(N / q)), 1e12)
    s = m_ok * _center_scale(M - 0.5, N - 0.5, M)[1]
    lower = np.where(q < 1, m_ok * (1.0 - rq) ** 2, 0.0)
    zero = np.zeros(n_max + 1)
    return np.where(ok, edge, zero), np.where(ok, s, zero), np.where(ok, edge - lower, zero)


def _krylov_blocks(gamma: float, tol: float, tan0: float = 1e3) -> int:
    """Block products for a Ritz value to reach relative accuracy ``tol`` at relative gap ``gamma``.

    Derived in {ref}`sec-cost-block`: after ``t`` block-Krylov steps the angle of the
    eigenvector with the subspace is at most ``tan0 / T_t(1 + 2 gamma)`` (Chebyshev
    polynomial), and the Ritz value's error the square of it, so
    ``t >= arccosh(tan0 / sqrt(tol)) / arccosh(1 + 2 gamma)``.
    """
    gamma = max(float(gamma), 1e-12)
    need = max(tan0 / math.sqrt(max(tol, 1e-300)), 1.0)
    return math.ceil(math.acosh(need) / math.acosh(1.0 + 2.0 * gamma))


def _eig_block(J: np.ndarray, k: int, start: np.ndarray | None = None, n_vectors: int | None = None,
               *, value_fraction: float = VALUE_TW_FRACTION, depth_fraction: float = 0.25,
               vec_rtol: float = VEC_RTOL, oversample: int | None = None, max_blocks: int | None = None,
               basis_factor: int = 4, bulk_edge: tuple[float, float] | None = None,
               seed: int = 0, precision: str = "auto", threshold: float | None = None,
               info: dict | None = None) -> Spectrum | None:
    """Top-``k`` eigenpairs by thick-restarted block Krylov with Rayleigh-Ritz and soft locking.

    A block of ``b = k + p`` vectors (``start``, e.g. the previous round's eigenvectors,
    completed by a fixed random block, seed ``seed``) is extended by the residuals
    ``J y - theta y`` of its unconverged Ritz pairs -- the next block of the block Krylov
    space ``[B, J B, J^2 B, ...]`` -- with one product ``J W`` per step (BLAS-3: the matrix
    is read once per step, whatever the width of ``W``); Rayleigh-Ritz on the whole basis
    after each step; when the basis would exceed ``basis_factor * b`` columns it restarts
    from the ``b`` leading Ritz vectors, whose images are kept (no product). Converged pairs
    are locked: their residuals no longer enter the next block.

    Convergence is tied to what the callers read:

    * the leading ``n_vectors`` pairs (default: the spikes, the values above the
      Marchenko-Pastur edge fitted to the rest plus two Tracy-Widom scales) need their
      vectors (the LAM searches their span): residual ``||J y - theta y|| <= vec_rtol
      |theta_1|``, i.e. an eigenvector angle below ``vec_rtol |theta_1| / gap``;
    * every other value needs to be right to ``value_fraction`` Tracy-Widom scales ``s``
      when it lies within ``4 s`` of the fitted edge (the K-hat rules compare it with a
      threshold a few ``s`` above the edge, and the support test reads the last one), and
      to ``depth_fraction`` of its distance below that band deeper in the bulk. A Ritz value
      is a lower bound, and its error is estimated by ``10 ||r||^2 / delta`` with ``delta``
      its distance to the first Ritz value beyond the block (the top of what the basis has
      not captured; the factor 10 covers the underestimate right after a restart).

    The number of steps follows from the gap (derived in {ref}`sec-cost-block`): with a
    block of ``b`` vectors, subspace iteration shrinks the angle of the ``i``-th eigenvector
    with the subspace like ``(lambda_{b+1} / lambda_i)^t``, and the block Krylov space of
    depth ``t`` like ``1 / T_t(1 + 2 gamma_i)`` (``T_t`` the Chebyshev polynomial,
    ``gamma_i = (lambda_i - lambda_{b+1}) / (lambda_{b+1} - lambda_min)``), about
    ``exp(-2 t sqrt(gamma_i))`` -- the error of a Ritz value is the square of it. A spike at
    ``kappa`` times the bulk's scale has ``gamma`` of order one and converges in a few steps;
    the bulk values near the edge, ``lambda_j ~ edge - s (3 pi j / 2)^{2/3}``, have
    ``gamma ~ s / spread`` and set the count (:func:`_krylov_blocks`). The cap is twice that
    count for the ``k``-th value plus 8, set once the fit of the bulk has settled (64 steps
    if it never does); reaching it returns None (the caller falls back to ARPACK, then
    ``eigh``).

    When the bulk is not Marchenko-Pastur (the fit's edge lies far above the values: the
    semicircle of differentially private noise), ``bulk_edge = (edge, tw_scale)`` -- the edge
    and Tracy-Widom scale of the caller's model of the bulk, e.g. the server's free edge of the
    uploads' components and their noise (``fedlam.khat._model_edge``) -- gives the edge in the
    fit's place (the scale ``s`` stays the measured square-root-edge one), and the values deeper
    than ``4 s`` below it are relaxed as below a fitted edge. A relaxed value ``theta`` with
    error at most ``0.25 depth + 0.1 s`` stays below ``edge - 4 s``: a K-hat threshold above the
    edge is decided the same way. Without it such a bulk gets no relaxation.

    ``threshold``: the count threshold of the caller's K-hat rule (the server's: the free
    edge plus ``n_sigma`` Tracy-Widom scales, ``fedlam.khat._model_edge``). The rule reads a
    value below it only as "below", so a value more than ``4 s`` below it needs only to be
    placed below it: a Ritz value is a lower bound of its eigenvalue, and ``theta + e <=
    threshold`` places the eigenvalue below the threshold, however far below it lies. The
    estimate ``e`` is then the gap-based one alone (``10 ||r||^2 / delta``), held to half the
    distance: ``||r||`` bounds the distance to *some* eigenvalue, which inside the bulk need not
    be this one, and early in the iteration a Ritz value far below an eigenvalue above the
    threshold that the basis has not captured yet can have ``||r||`` under its distance to it
    (a Gaussian-mechanism operator of chapter 11 did: K-hat 0 for 2). The values above the
    threshold are the ones the rule counts, and the caller reads their vectors: they get vector
    accuracy. The values placed below it are lower bounds (several TW scales low in the book's
    examples), not estimates to ``value_fraction``. Derived in {ref}`sec-cost-block`.

    ``precision``: ``"float64"``; ``"mixed"``: iterate with a float32 copy of ``J`` (half the
    memory traffic per product) until every criterion above holds with the vectors' tolerance
    relaxed to the float32 rounding level (:func:`_float32_rtol`), then go on in float64 from
    that pass's whole basis: the float64 pass applies the criteria above unchanged, so the
    answer meets the same tolerances (the float32 pass only supplies its start; derived in
    {ref}`sec-cost-block`); ``"auto"``: ``"mixed"`` from ``N >=`` :data:`MIXED_MIN_N` on
    without a ``threshold``, else ``"float64"`` (under a threshold the float64 pass has the
    values near it to re-converge, and measured no faster than float64 alone). The float32
    copy is half an ``N x N`` float64 array, freed before the float64 pass.

    ``info`` (a dict) receives ``blocks`` (products with ``J``, float32 ones included),
    ``products`` (columns multiplied), ``cap``, ``n_vectors``, ``tw_scale``, ``converged``, and
    ``blocks_float32`` (products with the float32 copy; 0 in float64).
    """
    N = J.shape[0]
    if precision == "auto":
        # under a threshold the float64 pass re-converges the values near it in float64 (13
        # float32 + 6 float64 products at N = 10,000, against 12 float64 ones alone): no gain
        precision = "mixed" if N >= MIXED_MIN_N and threshold is None else "float64"
    if precision not in ("float64", "mixed"):
        raise ValueError(f"precision must be 'auto', 'float64' or 'mixed', got {precision!r}")
    trace = float(np.trace(J))
    sum_sq = float(np.einsum("ij,ij->", J, J))
    opts: dict[str, Any] = dict(value_fraction=value_fraction, depth_fraction=depth_fraction, oversample=oversample,
                max_blocks=max_blocks, basis_factor=basis_factor, bulk_edge=bulk_edge, seed=seed,
                threshold=threshold)
    blocks32 = products32 = 0
    if precision == "mixed":
        J32 = J.astype(np.float32)

        def apply32(W: np.ndarray) -> np.ndarray:
            return _sym_matmul(J32, W.astype(np.float32)).astype(np.float64)

        rough: dict = {}
        spec32, basis, fit = _block_krylov(apply32, N, k, trace, sum_sq, start, n_vectors, vec_rtol=vec_rtol,
                                           spike_rtol=max(vec_rtol, _float32_rtol(N)), info=rough,
                                           want_basis=True, **opts)
        del J32
        blocks32, products32 = int(rough["blocks"]), int(rough["products"])
        # the float64 pass starts from the float32 pass's whole basis (its Ritz vectors): one
        # product rebuilds the Rayleigh quotient in float64, and with the bulk's fit carried over
        # the criteria can be met on that first step. A capped float32 pass still gives the start.
        start = basis
        if spec32 is None:
            fit = None
        if n_vectors == 0:
            # in float64 alone the spikes' vectors converge along with the bulk values; after a
            # float32 pass they sit at its rounding level, and the caller (the server) would
            # restart the solver for them (_ensure_vectors): converge them here, from the whole basis
            n_vectors = None
    else:
        fit = None
    out, _, _ = _block_krylov(lambda W: _sym_matmul(J, W), N, k, trace, sum_sq, start, n_vectors, vec_rtol=vec_rtol,
                              info=info, fit=fit, whole_start=precision == "mixed", **opts)
    if info is not None:
        info["blocks"] += blocks32
        info["products"] += products32
        info["blocks_float32"] = blocks32
    return out


def _sym_matmul(J: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``J @ W`` for a symmetric ``J``, computed as ``(W^T J)^T`` (an F-ordered result).

    The same product, but OpenBLAS runs a skinny-times-square GEMM faster with the skinny
    factor on the left: 0.5-0.6x the time of ``J @ W`` at N = 10,000 with 8-16 columns,
    0.8-0.9x at N = 1000, on the two-core machine (benchmarks/README.md, issue 21).
    """
    return (W.T @ J).T


def _block_krylov(apply: Any, N: int, k: int, trace: float, sum_sq: float, start: np.ndarray | None,
                  n_vectors: int | None, *, value_fraction: float, depth_fraction: float, vec_rtol: float,
                  oversample: int | None, max_blocks: int | None, basis_factor: int,
                  bulk_edge: tuple[float, float] | None, seed: int, info: dict | None,
                  threshold: float | None = None, fit: tuple[int, float] | None = None, whole_start: bool = False,
                  want_basis: bool = False, spike_rtol: float | None = None,
                  ) -> tuple[Spectrum | None, np.ndarray | None, tuple[int, float] | None]:
    """The iteration of :func:`_eig_block` with products ``apply(W) = J W``.

    Returns (the spectrum, or None when the cap is reached; with ``want_basis`` the Ritz
    vectors of the last basis, descending, else None; the bulk's last fit ``(n_out, tw_scale)``).
    ``spike_rtol``: the relative residual at which the leading ``n_vectors`` pairs count as
    converged (default ``vec_rtol``, which still floors every value's tolerance).
    ``whole_start``: ``start`` is such a basis, taken whole (up to the largest basis) instead
    of its first ``b`` columns; ``fit``: the fit of a previous pass on the same operator,
    against which the first step's fit counts as stable. The other arguments: see
    :func:`_eig_block`.
    """
    p = oversample if oversample is not None else 8
    b = min(k + p, N // 2)
    m_max = basis_factor * b
    if whole_start and start is not None and start.shape[1] > b:
        X = np.array(start[:, :m_max], dtype=np.float64)
    else:
        X = np.random.default_rng(seed).standard_normal((N, b))
        if start is not None and start.shape[1]:
            j = min(start.shape[1], b)
            X[:, :j] = start[:, :j]
    # the basis Q, its image J Q and the Rayleigh quotient H = Q^T J Q live in buffers of the
    # largest basis: a step appends columns and the new blocks of H (no copy of the basis, no
    # product of the whole basis with itself)
    Qb = np.empty((N, m_max))
    AQb = np.empty((N, m_max))
    Hb = np.empty((m_max, m_max))
    Q0 = _svqb(X)
    m = Q0.shape[1]
    Qb[:, :m] = Q0
    AQb[:, :m] = apply(Q0)
    Hb[:m, :m] = Q0.T @ AQb[:, :m]
    blocks, products = 1, m
    cap = max_blocks
    last_fit = fit
    out = None
    if info is not None:
        info.clear()
    while True:
        Q, AQ, H = Qb[:, :m], AQb[:, :m], Hb[:m, :m]
        theta, Z = np.linalg.eigh(0.5 * (H + H.T))
        theta, Z = theta[::-1], Z[:, ::-1]
        nb = min(b, theta.shape[0])
        Y = Q @ Z[:, :nb]
        AY = AQ @ Z[:, :nb]
        R = AY - Y * theta[:nb]
        rn = np.sqrt(np.einsum("ij,ij->j", R, R))
        scale = max(float(np.abs(theta).max(initial=0.0)), 1e-300)
        # the spikes: above the edge of the bulk left without them (+ 2 TW scales) and
        # apart from the next value by more than 2 TW scales (a bulk whose shape is not
        # Marchenko-Pastur, e.g. shifted, can have its fitted edge below its top values;
        # those are packed at the bulk's spacing, a spike is isolated)
        n_top = min(k, nb - 1)
        edges, scales, spreads = _bulk_scales(theta, n_top, N, trace, sum_sq)
        tw2 = 2.0 * scales[1:]
        spike = (theta[:n_top] > edges[1:] + tw2) & (theta[:n_top] - theta[1 : n_top + 1] > tw2)
        n_out = int(np.nonzero(spike)[0][-1]) + 1 if spike.any() else 0
        edge, s_tw, spread = float(edges[n_out]), float(scales[n_out]), float(spreads[n_out])
        # a bulk that is not Marchenko-Pastur (the semicircle of differentially private
        # noise, a shift) makes the fit meaningless: its edge lies far above the values. Then
        # use the scale of a square-root edge of the same variance, sqrt(v) N^{-2/3} (exact
        # for a semicircle, 2-4 times smaller than Johnstone's for an MP bulk: conservative),
        # and no relaxation below the edge (whose place is then unknown) -- unless the caller
        # knows the bulk's edge and Tracy-Widom scale (``bulk_edge``, the server's noise-aware
        # model): then the values below it are relaxed as below a fitted MP edge.
        nb_out = N - n_out
        m_b = (trace - float(theta[:n_out].sum())) / nb_out
        v_b = max((sum_sq - float(theta[:n_out] @ theta[:n_out])) / nb_out - m_b * m_b, 0.0)
        s_gen = math.sqrt(v_b) * N ** (-2.0 / 3.0)
        top_bulk = float(theta[n_out]) if n_out < nb else edge
        fit_ok = s_tw > 0 and edge <= top_bulk + 20.0 * s_tw
        if not fit_ok:
            # the spikes, if any, are then the leading values set apart from the next one by
            # more than 10 such scales (the bulk's values are packed at about one)
            big = np.nonzero(theta[: min(k, nb - 1)] - theta[1 : min(k, nb - 1) + 1] > 10.0 * s_gen)[0]
            n_out = int(big[-1]) + 1 if big.size else 0
            edge, s_tw = top_bulk, s_gen
            if bulk_edge is not None:  # the caller's model of the bulk (e.g. MP + the DP semicircle)
                # its edge only: the scale stays the one measured on the values, which moves
                # until the spikes are resolved and so keeps the values unconverged until then
                edge = float(bulk_edge[0])
            spread = max(spread, 4.0 * math.sqrt(v_b)) if spread > 0 else 4.0 * math.sqrt(v_b)
        nv = n_out if n_vectors is None else min(int(n_vectors), k)
        if threshold is not None:
            # the caller counts the values above ``threshold`` and reads their vectors
            nv = max(nv, int(np.count_nonzero(theta[: min(k, nb)] > threshold)))
        vec_tol = vec_rtol * scale
        # values within 4 TW scales of the fitted edge (where the K-hat thresholds lie) to
        # value_fraction TW; deeper ones relative to their distance below that band
        relax = fit_ok or bulk_edge is not None
        depth = np.maximum(edge - 4.0 * s_tw - theta[:nb], 0.0) if relax else np.zeros(nb)
        val_tol = np.maximum(value_fraction * s_tw + depth_fraction * depth, vec_tol)
        # error of a Ritz value ~ ||r||^2 / (gap to the eigenvalues the basis has not
        # captured): the residual lies in the uncaptured part, whose top the first Ritz value
        # beyond the block approximates; a safety factor 10 covers its underestimate
        # right after a restart (measured in the tests)
        if theta.shape[0] > nb:
            delta = theta[:nb] - theta[nb]
        else:
            delta = np.zeros(nb)
        with np.errstate(divide="ignore", invalid="ignore"):
            err = np.minimum(rn, np.where(delta > 0, 10.0 * rn * rn / delta, rn))
        conv = np.zeros(nb, dtype=bool)
        conv[:nv] = rn[:nv] <= (vec_tol if spike_rtol is None else spike_rtol * scale)
        conv[nv:] = err[nv:] <= val_tol[nv:]
        if threshold is not None:
            # a value more than 4 TW scales below the caller's threshold needs only to be placed
            # below it: theta <= lambda <= theta + err <= threshold (nearer ones keep the
            # tolerance above). The error is then the gap-based estimate alone, held to half the
            # distance: ||r|| bounds the distance to *some* eigenvalue, which inside a cluster (the
            # bulk) need not be this one -- early on, a Ritz value far below an uncaptured
            # eigenvalue above the threshold can have ||r|| under its distance to it
            with np.errstate(divide="ignore", invalid="ignore"):
                gap_err = np.where(delta > 0, 10.0 * rn * rn / delta, np.inf)
            dist = threshold - theta[:nb]
            placed = (dist >= 4.0 * s_tw) & (gap_err <= 0.5 * dist)
            conv[nv:] |= placed[nv:]
        # the fit (edge, TW scale) is only as good as the top values removed from trace and
        # sum_sq: a random start block has not resolved the spikes yet, and their missing
        # mass inflates the fitted bulk. Take values as converged only once the fit is
        # stable: the same number of spikes and the TW scale within 1 % of the last step's.
        stable = (last_fit is not None and last_fit[0] == n_out
                  and abs(s_tw - last_fit[1]) <= 0.01 * max(s_tw, 1e-300))
        last_fit = (n_out, s_tw)
        if not stable:
            conv[nv:] = False
        if info is not None:
            info.update(blocks=blocks, products=products, cap=cap, n_vectors=nv, tw_scale=s_tw,
                        converged=int(conv[:k].sum()))
        if conv[:k].all():
            out = Spectrum(values=np.ascontiguousarray(theta[:k]), vectors=np.ascontiguousarray(Y[:, :k]),
                           n=N, trace=trace, sum_sq=sum_sq, residuals=rn[:k].copy())
            break
        if cap is None and blocks >= 64:
            break  # the fit never settled (not a spectrum the solver is made for)
        if cap is None and stable:
            # gap of the k-th value to the (b+1)-th, from the soft edge's eigenvalue spacing
            # (computed once the fit has settled: before that the scale is not the bulk's)
            kb = max(k - n_out, 1)
            gap = s_tw * ((1.5 * math.pi * (b + 1 - n_out)) ** (2 / 3) - (1.5 * math.pi * kb) ** (2 / 3))
            gamma = gap / spread if spread > 0 else 1.0
            cap = 2 * _krylov_blocks(gamma, value_fraction * s_tw / max(spread, 1e-300)) + 8
        if cap is not None and blocks >= cap:
            break
        active = np.nonzero(~conv)[0]
        if m + active.size > m_max:  # thick restart from the leading Ritz vectors
            m = nb
            Qb[:, :m] = Y
            AQb[:, :m] = AY
            Hb[:m, :m] = Y.T @ AY
            Q, AQ = Qb[:, :m], AQb[:, :m]
            Z = np.eye(m)  # the new basis is its own Ritz vectors (the basis returned below)
        W = _svqb(R[:, active], Q)
        a = W.shape[1]
        if a == 0:
            break
        AW = apply(W)
        C = Q.T @ AW
        Qb[:, m : m + a] = W
        AQb[:, m : m + a] = AW
        Hb[:m, m : m + a] = C
        Hb[m : m + a, :m] = C.T
        Hb[m : m + a, m : m + a] = W.T @ AW
        m += a
        blocks += 1
        products += a
    return out, (Q @ Z if want_basis else None), last_fit


def _ensure_vectors(J: np.ndarray, spec: Spectrum, n: int, threshold: float | None = None) -> Spectrum:
    """``spec`` with its leading ``n`` eigenvectors converged to :data:`VEC_RTOL`.

    A block spectrum has its vectors converged for the pairs it took as spikes; a caller that
    detects more (its K-hat rule reads a different edge) needs those too: the block solver
    is re-run warm-started from ``spec``'s vectors (one or two products), falling back to
    ARPACK. Spectra from direct solvers (``residuals`` None) are returned as they are.
    """
    n = min(int(n), len(spec))
    if spec.residuals is None or n == 0 or spec.vectors.shape[1] < n:
        return spec
    tol = VEC_RTOL * max(float(np.abs(spec.values).max(initial=0.0)), 1e-300)
    if np.all(spec.residuals[:n] <= tol):
        return spec
    k = len(spec)
    # the start is converged (float64); ``threshold``: the caller's count threshold, as in the first solve
    out = _eig_block(J, k, start=spec.vectors, n_vectors=n, precision="float64", threshold=threshold)
    return out if out is not None else _eig_top(J, k, "lanczos")


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
    its leading eigenpairs must satisfy ``J v = lambda v`` (O(N^2 k)) -- to ``1e-6 ||J||_F``,
    or to the residuals a block spectrum reports for its bulk pairs."""
    tr = float(np.trace(J))
    fro = float(np.einsum("ij,ij->", J, J))
    scale = max(fro, 1e-300)
    bad = (abs(spec.trace - tr) > 1e-8 * (abs(tr) + np.sqrt(scale) * J.shape[0] ** 0.5)
           or abs(spec.sum_sq - fro) > 1e-8 * scale)
    if not bad and spec.vectors.shape[1]:
        k = min(spec.vectors.shape[1], 8)
        V = spec.vectors[:, :k]
        resid = np.linalg.norm(J @ V - V * spec.values[:k], axis=0)
        allowed = np.full(k, 1e-6 * np.sqrt(scale))
        if spec.residuals is not None:  # a block spectrum: the bulk pairs are as accurate as they claim
            allowed = np.maximum(allowed, 1.01 * spec.residuals[:k] + 1e-12 * np.sqrt(scale))
        bad = bool(np.any(resid > allowed))
    if bad:
        raise ValueError("spectrum must be a spectrum of J (its trace, Frobenius norm or eigenpairs "
                         "do not match this operator)")
