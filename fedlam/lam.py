"""The L-layer associative memory (LAM) of the server and the factorization ``J -> patterns``.

Pipeline of :func:`factorize` (paper, section "Factorization procedure" and Algorithms 1-2):

1. spectrum of the raw server operator ``J`` (one ``eigh``; only the top part is needed);
2. ``K_hat`` from a scale-aware estimator (:func:`fedlam.spectral.estimate_k`, MP edge by
   default) -- never the true K;
3. seeds: sign-mixtures ``sgn(sum_d c_d v_d)``, ``c ~ N(0, 1)``, of the ``K_hat`` leading
   eigenvectors (paper eq. (2.21));
4. LAM dynamics (paper eqs. (2.9), (2.10), (2.11), (2.12)), all seeds and
   all layers in one (S, L, N) array;
5. acceptance: a score (subspace fraction or the paper's quadratic score), greedy
   de-duplication by absolute overlap in descending score order, removal of *redundant*
   candidates (sign-mixtures of already accepted patterns, whose subspace mass lies in
   their span), at most ``K_hat`` patterns; fresh seeds are drawn (up to ``max_attempts``)
   while fewer than ``K_hat`` are accepted.

The kernel in the fields is, by default, the *projector* ``V V^T`` on the ``K_hat`` detected
eigenvectors: it is the estimate of the pseudo-inverse kernel ``J_KS`` (whose eigenvalues are
1 on the pattern span, 0 elsewhere), and it is applied in ``O(N K_hat)`` per state through
``V^T sigma``. ``kernel="dreamed"`` uses the low-rank ``V f(Lambda) V^T`` with the dreamed
eigenvalues, ``kernel="dense"`` the full dreamed N x N matrix (the paper's literal choice).
:func:`factorize_literal` is the paper's pipeline with its loops, for benchmarks.

Derived in {ref}`sec-lam-fields`, {ref}`sec-lam-seeding` and {ref}`sec-lam-acceptance`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from fedlam import khat
from fedlam import spectral as _sp
from fedlam._eig import _check_spectrum_of, _eig_full, _eig_top, _ensure_vectors, _server_sizes
from fedlam._validation import (
    _describe,
    as_rng,
    check_choice,
    check_count,
    check_in_range,
    check_nonneg_int,
    check_operator,
    check_pm1,
    check_positive_int,
    check_real,
)
from fedlam.data import _check_alloc
from fedlam.robust import memory_span

__all__ = [
    "LAMParams",
    "candidate_floors",
    "noise_flip_bound",
    "Kernel",
    "FactorizeResult",
    "make_kernel",
    "lam_fields",
    "lam_step",
    "noise_schedule",
    "run_lam",
    "seed_mixtures",
    "acceptance_scores",
    "deduplicate",
    "Selection",
    "select",
    "search_span",
    "select_span",
    "hebbian_weights",
    "factorize",
    "factorize_literal",
]

NOISES = ("annealed", "uniform")
EXTERNALS = ("clamped", "state", "none")
KERNELS = ("projector", "dreamed", "dense")
ACCEPTS = ("subspace", "score")
SEARCHES = ("span", "lam")
#: largest number of dynamics / search steps accepted (refused before any work)
MAX_STEPS = 100_000
#: largest number of LAM seeds per attempt (each one an N-vector run through the dynamics)
MAX_SEEDS = 100_000


# ----------------------------------------------------------------------------------------
# parameters
@dataclass(frozen=True)
class LAMParams:
    """Parameters of the LAM factorization (validated on construction).

    Attributes
    ----------
    layers : int
        Number of layers L (default 3, the paper's example). Each seed yields L candidates.
    lam : float
        Anti-imitative inter-layer coupling lambda (paper table: 0.2). Must lie in
        ``[0, 1/(L-1))`` so that the coupling matrix ``g`` of paper eq. (2.7) is positive
        definite.
    beta : float
        Inverse temperature of the ``tanh`` (paper table: 2.5).
    H : float
        Strength of the external field (paper table: 0.1), ``>= 0``.
    steps : int
        Synchronous updates per run (paper table: 50).
    noise : {"annealed", "uniform"}
        ``"uniform"``: ``u ~ U[-1, 1]`` as written in paper eq. (2.12);
        ``"annealed"`` (default): ``u ~ U[-a_t, a_t]`` with ``a_t`` going linearly from
        ``noise_scale`` to ``min_scale`` (the table's ``noise_scale``/``min_scale``).
    noise_scale, min_scale : float
        Initial and final amplitude of the annealed noise, ``0 <= min_scale <= noise_scale``.
        Default 1.0 -> 0.02: start at the paper's ``U[-1, 1]`` and end almost noiseless.
        The table's 0.3 is too small: all layers start at the same seed and feel the same
        field, so only noise can make them differ; in a mixture state
        ``|tanh(beta h)| ~ 0.7 > 0.3`` on almost every spin, the layers never split and the
        anti-imitative term never acts (K = 6, 10 at N = 400: all patterns recovered in one
        attempt in 4/24 runs with 0.3, 23/24 with 1.0; 0 spurious accepted with 1.0).
    external : {"clamped", "state", "none"}
        External field ``h^a``: the seed itself, clamped (the paper's text), the current state
        of the layer, or nothing.
    kernel : {"projector", "dreamed", "dense"}
        Kernel of the fields (see the module docstring).
    dream_time : float
        Flow time of the dreaming (paper: eps = 0.01 x 200 steps = 2).
    k_method : {"mp", "tw", "shuffle", "fixed", "free"}
        K-hat estimator (:func:`fedlam.spectral.estimate_k`). ``"free"`` is the
        heterogeneity-aware edge of an aggregate of client operators
        (:func:`fedlam.spectral.k_hat_free`; pass ``components`` to :func:`factorize`).
    tau : float
        Threshold of ``k_method="fixed"`` and of ``accept="score"`` (paper: 0.5).
    n_seeds : int or None
        Seeds per attempt; None means ``max(8, 2 K_hat)``.
    dedup : float
        Two candidates with ``|overlap| >= dedup`` are duplicates. Default 0.6, above the
        paper's 0.5 (text) and 0.4 (table): real archetypes can overlap more than 0.4 (the
        Caltech silhouettes reach 0.454, and 0.4 merges two of them, losing one), while
        sign-mixtures of accepted patterns are removed by the redundancy part of the
        subspace test below, not by this threshold. Copies of one pattern reached from
        different seeds overlap close to 1.
    accept : {"subspace", "score"}
        ``"subspace"`` (default): fraction ``||V^T zeta||^2 / N >= rho`` of the candidate in
        the detected subspace, and the same fraction ``>= rho`` outside the span of the
        patterns accepted before it (drops many-component mixtures: a 5-mixture overlaps
        each component by 0.375, a 3-mixture by 0.5, both below ``dedup``, and they score
        0.70 and 0.75 > rho); ``"score"``: the
        paper's ``zeta^T J_KS zeta / N >= tau`` with the kernel in use as ``J_KS``.
    rho : float
        Threshold of the subspace test (paper table: 0.6).
    max_attempts : int
        Rounds of fresh seeds while fewer than ``K_hat`` patterns are accepted (LAM search);
        for the in-span search, deflation rounds go on while they accept new patterns and stop
        after ``max_attempts`` rounds in a row without progress.
    search : {"span", "lam"}
        How candidates are found. ``"span"`` (default): the in-span search of
        :func:`search_span` -- sign iterations ``x <- sgn(V V^T x)`` inside the detected
        eigenspace from eigenvector mixtures, whose fixed points include every archetype of a
        linearly independent family, correlated or not (chapter 3) -- followed by
        :func:`select_span` (score order, de-duplication at ``dedup``, a redundancy test that
        asks whether the candidate is the sign of a combination of accepted patterns, and a
        noise-aware in-span floor). ``"lam"``: the paper's LAM dynamics (the fields above)
        with :func:`select` (score threshold ``rho``/``tau``, de-duplication, the
        detected-subspace redundancy test); ``LAMParams(search="lam")`` reproduces the tuned
        LAM of the earlier versions exactly, :func:`factorize_literal` the paper as published.
    n_starts : int or None
        Starts of the in-span search per attempt; None means ``max(64, 8 k)`` with ``k`` the
        dimension still to search (``K_hat`` minus the patterns already accepted).
    span_iters : int
        Largest number of sign iterations per start (a start stops at its fixed point).
    anneal_steps : int
        Soft (``tanh``) steps before the sign iterations of the in-span search (see
        :func:`search_span`; 0 = plain sign iterations).
    span_margin : float or None
        Slack below the predicted in-span fraction ``gamma_min`` of a true archetype (the
        smallest :func:`fedlam.khat.outlier_overlaps` of the detected eigenvectors) for the
        acceptance floor; None means ``4 sqrt((1 - gamma_min) / N)``: four times the
        ``O(N^{-1/2})`` fluctuation of an overlap whose deficit ``1 - gamma`` comes from
        ``(1 - gamma) N`` bulk directions (zero for an exact operator). The floor is never
        below 1/2.

    ``dedup`` is None by default: 0.95 for the in-span search (two *distinct* archetypes may
    overlap up to 0.95; copies of one fixed point overlap 1) and 0.6 for the LAM search.

    Derived in {ref}`sec-lam-fields`, {ref}`sec-lam-identifiability` and {ref}`sec-lam-acceptance`.
    """

    layers: int = 3
    lam: float = 0.2
    beta: float = 2.5
    H: float = 0.1
    steps: int = 50
    noise: str = "annealed"
    noise_scale: float = 1.0
    min_scale: float = 0.02
    external: str = "clamped"
    kernel: str = "projector"
    dream_time: float = 2.0
    k_method: str = "mp"
    tau: float = 0.5
    n_seeds: int | None = None
    dedup: float | None = None
    accept: str = "subspace"
    rho: float = 0.6
    max_attempts: int = 3
    search: str = "span"
    n_starts: int | None = None
    span_iters: int = 50
    span_margin: float | None = None
    anneal_steps: int = 40

    def __post_init__(self) -> None:
        L = check_positive_int(self.layers, "layers")
        lam = check_in_range(self.lam, "lam", 0.0, None)
        if L > 1 and lam >= 1.0 / (L - 1):
            raise ValueError(
                f"lam must lie in [0, 1/(layers-1)) = [0, {1.0 / (L - 1):g}) for layers = {L} "
                f"(positive-definite coupling), got {lam!r}"
            )
        check_in_range(self.beta, "beta", 0.0, None, low_open=True)
        check_in_range(self.H, "H", 0.0, None)
        if check_positive_int(self.steps, "steps") > MAX_STEPS:
            raise ValueError(f"steps must be <= {MAX_STEPS}, got {self.steps}")
        check_choice(self.noise, "noise", NOISES)
        ns = check_in_range(self.noise_scale, "noise_scale", 0.0, None)
        ms = check_in_range(self.min_scale, "min_scale", 0.0, None)
        if ms > ns:
            raise ValueError(f"min_scale must be <= noise_scale = {ns!r}, got {ms!r}")
        check_choice(self.external, "external", EXTERNALS)
        check_choice(self.kernel, "kernel", KERNELS)
        check_in_range(self.dream_time, "dream_time", 0.0, None, low_open=True)
        check_choice(self.k_method, "k_method", _sp.K_METHODS)
        check_real(self.tau, "tau")
        if self.n_seeds is not None:
            check_count(self.n_seeds, "n_seeds", MAX_SEEDS)
        if self.dedup is not None:
            check_in_range(self.dedup, "dedup", 0.0, 1.0, low_open=True)
        check_choice(self.accept, "accept", ACCEPTS)
        check_in_range(self.rho, "rho", 0.0, 1.0)
        check_positive_int(self.max_attempts, "max_attempts")
        check_choice(self.search, "search", SEARCHES)
        if self.n_starts is not None:
            check_positive_int(self.n_starts, "n_starts")
        if check_positive_int(self.span_iters, "span_iters") > MAX_STEPS:
            raise ValueError(f"span_iters must be <= {MAX_STEPS}, got {self.span_iters}")
        if self.anneal_steps > MAX_STEPS:
            raise ValueError(f"anneal_steps must be <= {MAX_STEPS}, got {self.anneal_steps}")
        check_nonneg_int(self.anneal_steps, "anneal_steps")
        if self.span_margin is not None:
            check_in_range(self.span_margin, "span_margin", 0.0, 1.0)

    def replace(self, **changes: Any) -> LAMParams:
        """A copy with some fields changed (validated)."""
        return replace(self, **changes)

    def seeds_for(self, k_hat: int) -> int:
        """Number of seeds per attempt for a given ``K_hat``."""
        return self.n_seeds if self.n_seeds is not None else max(8, 2 * k_hat)

    def starts_for(self, k_hat: int) -> int:
        """Starts of the in-span search per attempt for a given ``K_hat``."""
        return self.n_starts if self.n_starts is not None else max(64, 8 * k_hat)

    @property
    def dedup_threshold(self) -> float:
        """The de-duplication threshold in use (``dedup``, or the search's default)."""
        if self.dedup is not None:
            return float(self.dedup)
        return 0.95 if self.search == "span" else 0.6


_PARAM_NAMES = tuple(f.name for f in fields(LAMParams))


def _make_params(params: LAMParams | None, overrides: dict) -> LAMParams:
    unknown = sorted(set(overrides) - set(_PARAM_NAMES))
    if unknown:
        raise TypeError(f"unknown LAM parameter(s) {unknown}; valid names are {list(_PARAM_NAMES)}")
    if params is None:
        return LAMParams(**overrides)
    if not isinstance(params, LAMParams):
        raise TypeError(f"params must be a LAMParams or None, got {type(params).__name__}")
    return replace(params, **overrides) if overrides else params


# ----------------------------------------------------------------------------------------
# kernels
@dataclass(frozen=True)
class Kernel:
    """A symmetric kernel applied to batches of states.

    Either low-rank, ``V diag(w) V^T`` (``V`` (N, k) orthonormal, ``w`` (k,)), applied in
    ``O(N k)`` per state, or dense (``matrix`` (N, N)), applied in ``O(N^2)``.
    """

    kind: str
    n: int
    V: np.ndarray | None = None
    w: np.ndarray | None = None
    matrix: np.ndarray | None = None

    def apply(self, X: np.ndarray) -> np.ndarray:
        """``K x`` for every row ``x`` of ``X`` (B, N) -> (B, N) float64."""
        if self.matrix is not None:
            return X @ self.matrix
        assert self.V is not None and self.w is not None  # low rank: set whenever matrix is None
        Y = X @ self.V
        return (Y * self.w) @ self.V.T

    def quad(self, X: np.ndarray) -> np.ndarray:
        """``x^T K x / N`` for every row -> (B,)."""
        if self.matrix is not None:
            return np.einsum("bi,bi->b", X @ self.matrix, X) / self.n
        Y = X @ self.V
        return (Y * Y) @ self.w / self.n


def _check_kernel(kernel: Any) -> None:
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a fedlam.lam.Kernel (see make_kernel), got {type(kernel).__name__}")


def make_kernel(
    kind: str,
    spec: _sp.Spectrum,
    k_hat: int,
    dream_time: float = 2.0,
    J: np.ndarray | None = None,
) -> Kernel:
    """Build the LAM kernel from a spectrum of ``J``.

    ``"projector"``: ``V V^T`` on the ``k_hat`` leading eigenvectors (estimate of ``J_KS``);
    ``"dreamed"``: ``V f(Lambda) V^T`` with ``f`` the dreaming flow at ``dream_time``;
    ``"dense"``: the full dreamed matrix (needs the complete spectrum). Derived in
    {ref}`sec-lam-fields`.
    """
    kind = check_choice(kind, "kind", KERNELS)
    if not isinstance(spec, _sp.Spectrum):
        raise TypeError(f"spec must be a Spectrum, got {type(spec).__name__}")
    k_hat = check_nonneg_int(k_hat, "k_hat")
    if k_hat > len(spec):
        raise ValueError(f"k_hat must lie in [0, {len(spec)}], got {k_hat}")
    if kind == "dense":
        if not spec.complete:
            raise ValueError("kernel 'dense' needs the complete spectrum of J")
        f = _sp.dream_eigenvalues(spec.values, dream_time)
        M = (spec.vectors * f) @ spec.vectors.T
        return Kernel("dense", spec.n, matrix=0.5 * (M + M.T))
    V = spec.vectors[:, :k_hat]
    if kind == "projector":
        w = np.ones(k_hat)
    else:
        w = _sp.dream_eigenvalues(spec.values[:k_hat], dream_time)
    return Kernel(kind, spec.n, V=np.ascontiguousarray(V), w=w)


# ----------------------------------------------------------------------------------------
# dynamics
def lam_fields(
    sigma: np.ndarray,
    kernel: Kernel,
    lam: float,
    H: float,
    h: np.ndarray | None,
) -> np.ndarray:
    """Effective fields of every layer of every seed (paper eqs. (2.9), (2.10), (2.11)).

    ``hat h^a = J sigma^a - (lam/N) sum_{b != a} (J sigma^b)(sigma^b^T J sigma^a) + H h^a``.
    The inter-layer term needs only the per-seed L x L Gram matrix
    ``G_ab = sigma^a^T J sigma^b``: ``O(L N)`` per seed once ``J sigma`` is known.
    Derived in {ref}`sec-lam-fields`.

    Parameters
    ----------
    sigma : numpy.ndarray
        (S, L, N) states (+-1, any real dtype).
    kernel : Kernel
    lam, H : float
    h : numpy.ndarray or None
        External field, (S, L, N) or (S, 1, N) (broadcast over layers), or None (no field).

    Returns
    -------
    numpy.ndarray
        float64 (S, L, N).
    """
    _check_kernel(kernel)
    check_pm1(sigma, "sigma", ndim=3)
    S, L, N = sigma.shape
    if N != kernel.n:
        raise ValueError(f"sigma must have N = {kernel.n} neurons (the kernel's), got shape {sigma.shape}")
    lam = check_in_range(lam, "lam", 0.0, None)
    H = check_in_range(H, "H", 0.0, None)
    if h is not None:
        if (not isinstance(h, np.ndarray) or h.ndim != 3 or h.shape[0] != S or h.shape[1] not in (1, L)
                or h.shape[2] != N):
            raise ValueError(f"h must be None or an array of shape ({S}, {L} or 1, {N}), got "
                             f"{getattr(h, 'shape', type(h).__name__)}")
    X = sigma.reshape(S * L, N).astype(np.float64, copy=False)
    JS = kernel.apply(X).reshape(S, L, N)
    out = JS.copy()
    if L > 1 and lam != 0.0:
        G = np.einsum("sai,sbi->sab", sigma.astype(np.float64, copy=False), JS)
        idx = np.arange(L)
        G[:, idx, idx] = 0.0
        out -= (lam / N) * np.einsum("sab,sbi->sai", G, JS)
    if h is not None and H != 0.0:
        out += H * h
    return out


def noise_schedule(params: LAMParams) -> np.ndarray:
    """Noise amplitude ``a_t`` for ``t = 0..steps-1``: 1 (uniform) or a linear anneal."""
    if not isinstance(params, LAMParams):
        raise TypeError(f"params must be a fedlam.lam.LAMParams, got {type(params).__name__} {params!r:.60}")
    if params.noise == "uniform":
        return np.ones(params.steps)
    if params.steps == 1:
        return np.array([params.noise_scale])
    return np.linspace(params.noise_scale, params.min_scale, params.steps)


def lam_step(
    sigma: np.ndarray,
    kernel: Kernel,
    params: LAMParams,
    h: np.ndarray | None,
    a: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """One synchronous update ``sigma <- sgn(tanh(beta hat h) + u)``, ``u ~ U[-a, a]``.

    Ties ``sgn(0)`` give +1. Returns int8 (S, L, N). Derived in {ref}`sec-lam-fields`.
    """
    if not isinstance(params, LAMParams):
        raise TypeError(f"params must be a fedlam.lam.LAMParams, got {type(params).__name__} {params!r:.60}")
    a = check_in_range(a, "a", 0.0, None)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    f = lam_fields(sigma, kernel, params.lam, params.H, h)
    x = np.tanh(params.beta * f)
    if a > 0:
        x += rng.uniform(-a, a, size=x.shape)
    return np.where(x >= 0, 1, -1).astype(np.int8)


def run_lam(
    seeds: np.ndarray,
    kernel: Kernel,
    params: LAMParams,
    rng: np.random.Generator | int,
) -> np.ndarray:
    """Run the LAM from ``seeds`` (S, N): all layers start at the seed. Returns (S, L, N) int8.

    The external field is the clamped seed, the current state or nothing
    (``params.external``). All seeds and layers move together in one array.
    Derived in {ref}`sec-lam-fields`.
    """
    gen = as_rng(rng)
    _check_kernel(kernel)
    if not isinstance(params, LAMParams):
        raise TypeError(f"params must be a LAMParams, got {type(params).__name__}")
    check_pm1(seeds, "seeds", ndim=2)
    _, N = seeds.shape
    if N != kernel.n:
        raise ValueError(f"seeds must have N = {kernel.n} columns (the kernel's), got shape {seeds.shape}")
    L = params.layers
    sigma = np.repeat(seeds[:, None, :].astype(np.int8), L, axis=1)
    clamp = seeds[:, None, :].astype(np.float64) if params.external == "clamped" else None
    for a in noise_schedule(params):
        if params.external == "clamped":
            h = clamp
        elif params.external == "state":
            h = sigma.astype(np.float64)
        else:
            h = None
        sigma = lam_step(sigma, kernel, params, h, float(a), gen)
    return sigma


def seed_mixtures(vectors: np.ndarray, n_seeds: int, rng: np.random.Generator | int) -> np.ndarray:
    """Sign-mixtures of eigenvectors: ``x^alpha = sgn(sum_d c_d v_d)``, ``c ~ N(0, 1)``.

    Paper eq. (2.21) / Algorithm 1. Ties (``0``) give +1, so the result is
    always +-1. Derived in {ref}`sec-lam-seeding`.

    Parameters
    ----------
    vectors : numpy.ndarray
        float (N, K_hat) with K_hat >= 1.
    n_seeds : int
    rng : Generator or int

    Returns
    -------
    numpy.ndarray
        int8 (n_seeds, N).
    """
    if not isinstance(vectors, np.ndarray) or not np.issubdtype(vectors.dtype, np.floating):
        raise TypeError(f"vectors must be a float numpy array (N, K_hat), got {type(vectors).__name__}")
    if vectors.ndim != 2 or vectors.shape[1] < 1 or vectors.shape[0] < 2:
        raise ValueError(f"vectors must have shape (N >= 2, K_hat >= 1), got {vectors.shape}")
    if not np.all(np.isfinite(vectors)):
        raise ValueError("vectors must be finite")
    n_seeds = check_count(n_seeds, "n_seeds", MAX_SEEDS)
    _check_alloc(n_seeds * (vectors.shape[1] + 2 * vectors.shape[0]), 8,
                 f"n_seeds = {n_seeds} seeds of N = {vectors.shape[0]} (coefficients, mixtures and the seeds)")
    gen = as_rng(rng)
    c = gen.standard_normal((vectors.shape[1], n_seeds))
    return np.where((vectors @ c).T >= 0, 1, -1).astype(np.int8)


def acceptance_scores(candidates: np.ndarray, vectors: np.ndarray | None = None,
                      kernel: Kernel | None = None) -> np.ndarray:
    """Scores of candidates (B, N): subspace fraction ``||V^T z||^2 / N`` or ``z^T K z / N``.

    Give exactly one of ``vectors`` (N, K_hat orthonormal) or ``kernel``. A pure pattern
    in the span scores ~1, a sign-mixture of three patterns ~0.75 (its overlaps with the
    three are 1/2), a random state ``K_hat / N``. Derived in {ref}`sec-lam-acceptance`.
    """
    if (vectors is None) == (kernel is None):
        raise ValueError("give exactly one of vectors or kernel")
    check_pm1(candidates, "candidates", ndim=2, allow_empty=True)
    if vectors is not None:
        n = vectors.shape[0]
    else:
        assert kernel is not None  # exactly one of vectors / kernel (checked above)
        n = kernel.n
    if candidates.shape[1] != n:
        raise ValueError(f"candidates must have N = {n} columns, got shape {candidates.shape}")
    X = candidates.astype(np.float64)
    if kernel is not None:
        return kernel.quad(X)
    assert vectors is not None  # exactly one of vectors / kernel (checked above)
    Y = X @ vectors
    return np.einsum("bk,bk->b", Y, Y) / X.shape[1]


def _score_order(scores: np.ndarray) -> np.ndarray:
    """Indices in descending score order; scores equal to 1e-10 are ties kept in input order.

    Exact copies of a pattern score the same up to the last bits of a dot product, and
    those bits can change between runs (numpy's SIMD sums depend on memory alignment);
    rounding first makes the order, and so every count that depends on it, reproducible.
    """
    return np.argsort(-np.round(scores, 10), kind="stable")


def deduplicate(candidates: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    """Greedy de-duplication in descending score order; returns kept indices.

    A candidate is a duplicate of an already kept one when ``|overlap| >= threshold``.
    *Absolute* overlap, because for a Hebbian kernel ``-xi`` is the same memory as ``xi``
    (the energy is even); *score order*, because a pure pattern scores higher than the
    sign-mixtures that contain it (1 vs 0.75 for a 3-mixture) and overlaps them by 1/2:
    processed in input order (Algorithm 2, with a threshold at or below 1/2) a mixture met
    first would be kept and the pure patterns it overlaps discarded; with the package's
    threshold 0.6 the mixture is instead removed later by the redundancy test of
    :func:`select`. Ties in score keep input order. Derived in
    {ref}`sec-lam-acceptance`.

    Parameters
    ----------
    candidates : numpy.ndarray
        (B, N) +-1.
    scores : numpy.ndarray
        (B,) real.
    threshold : float
        In (0, 1].
    """
    check_pm1(candidates, "candidates", ndim=2, allow_empty=True)
    if not isinstance(scores, np.ndarray) or scores.shape != (candidates.shape[0],):
        raise ValueError(f"scores must be a numpy array of shape ({candidates.shape[0]},)")
    threshold = check_in_range(threshold, "threshold", 0.0, 1.0, low_open=True)
    B, N = candidates.shape
    if B == 0:
        return np.empty(0, dtype=np.int64)
    order = _score_order(scores)
    X = candidates.astype(np.float64)
    kept: list[int] = []
    for i in order:
        if kept:
            ov = np.abs(X[kept] @ X[i]) / N
            if ov.max() >= threshold:
                continue
        kept.append(int(i))
    return np.asarray(kept, dtype=np.int64)


# ----------------------------------------------------------------------------------------
# factorize
@dataclass
class FactorizeResult:
    """Output of :func:`factorize`.

    Attributes
    ----------
    patterns : numpy.ndarray
        int8 (K_acc, N) accepted +-1 patterns, in descending score order (``(0, N)`` when
        nothing is detected or accepted).
    k_hat : int
        Number of detected spikes (from ``k_method``).
    scores : numpy.ndarray
        (K_acc,) acceptance scores of the accepted patterns.
    n_candidates, n_duplicates, n_rejected, n_capped : int
        Candidates produced (all attempts), removed as duplicates, failing the acceptance
        threshold, and left out by the cap ``K_acc <= K_hat``.
    n_redundant : int
        Candidates dropped because their detected-subspace mass lies in the span of the
        patterns already accepted (sign-mixtures of them; subspace acceptance only).
    attempts : int
        Seed rounds used.
    values : numpy.ndarray
        Leading eigenvalues of ``J`` (descending; all of them if the spectrum was complete).
    dreamed : numpy.ndarray
        The same eigenvalues after the dreaming flow at ``dream_time``.
    vectors : numpy.ndarray
        (N, k_hat) detected eigenvectors.
    k_result : fedlam.khat.KHatResult
    params : LAMParams
    """

    patterns: np.ndarray
    k_hat: int
    scores: np.ndarray
    n_candidates: int
    n_duplicates: int
    n_rejected: int
    n_capped: int
    attempts: int
    values: np.ndarray
    dreamed: np.ndarray
    vectors: np.ndarray
    k_result: _sp.KHatResult
    params: LAMParams
    n_redundant: int = 0
    extras: dict = field(default_factory=dict)

    @property
    def n_accepted(self) -> int:
        return int(self.patterns.shape[0])


def _remainder_hides_spikes(spec: _sp.Spectrum, max_k: int) -> bool:
    """Could the eigenvalues beyond a partial spectrum be spikes the estimator has not seen?

    The remainder's sum ``s1 = tr J - sum of the computed`` and sum of squares ``s2`` give its
    participation ratio ``s1^2 / s2``: the effective number of its non-zero eigenvalues
    (``N / (1 + q)``, about the rank, for an MP bulk). Exact zeros have none (``s1`` at
    rounding level): the absence of a bulk has been seen. A remainder of fewer than ``max_k``
    effective eigenvalues may be a group of spikes -- e.g. the 24 eigenvalues left after the
    first 16 of the exact operator of 40 archetypes, which the MP rule would otherwise read
    as the bulk of 24 noise examples and report K_hat = 0 -- so the spectrum must grow until
    its end (zeros) or a genuine bulk is in view.
    """
    m = len(spec)
    vals = spec.values
    s1 = spec.trace - float(vals.sum())
    s2 = spec.sum_sq - float(vals @ vals)
    scale = max(float(np.abs(vals).max(initial=0.0)), 1e-300)
    if s1 <= _sp.ZERO_RTOL * scale * (spec.n - m) or s2 <= 0:
        return False
    return s1 * s1 / s2 < max_k


def _server_spectrum(J: np.ndarray, p: LAMParams, rng: np.random.Generator,
                     kw: dict | None = None, start: np.ndarray | None = None) -> tuple[_sp.Spectrum, _sp.KHatResult]:
    """Partial spectrum of ``J`` grown until the K-hat estimate is not limited by its length.

    The top eigenpairs come from the block solver (``fedlam._eig._eig_block``, warm-started
    from ``start``), with the leading K_hat vectors converged for the search.
    """
    N = J.shape[0]
    kw = kw or {}
    if p.kernel == "dense" or p.k_method == "shuffle":
        spec = _eig_full(J)
        if p.k_method == "shuffle":
            kres = _sp.estimate_k(J, "shuffle", rng=rng, spectrum=spec)
        else:
            kres = _sp.estimate_k(spec, p.k_method, dream_time=p.dream_time, tau=p.tau, **kw)
        return spec, kres
    comps = kw.get("components")
    # the K-hat rule's model of the bulk and its count threshold, for the block solver: it
    # relaxes below the edge (noised bulks) and places the values below the threshold
    bulk_edge = threshold = None
    if p.k_method == "free" and comps and all(isinstance(c, _sp.Component) for c in comps):
        edge, s_tw, threshold = khat._model_edge(comps, N, float(kw.get("noise_var", 0.0)), kw.get("margin"),
                                                 kw.get("n_sigma", 4.0))
        bulk_edge = (edge, s_tw)
    m, margin = _server_sizes(N, threshold)
    while True:
        spec = _eig_top(J, m, "server", start=start, bulk_edge=bulk_edge, threshold=threshold)
        kres = _sp.estimate_k(spec, p.k_method, dream_time=p.dream_time, tau=p.tau, **kw)
        if m == N:
            return spec, kres
        limited = kres.k_hat >= m - margin or bool(kres.details.get("truncated", False))
        if p.k_method in ("mp", "tw") and not limited:
            limited = _remainder_hides_spikes(spec, max(1, N // 4))
        if not limited:
            return _ensure_vectors(J, spec, kres.k_hat, threshold), kres
        m = min(N, 4 * m)  # 8 -> 32 -> 128 ... (16 -> 64 -> 256 ... without a threshold)
        start = spec.vectors


@dataclass(frozen=True)
class Selection:
    """Outcome of :func:`select`.

    Attributes
    ----------
    kept : numpy.ndarray
        int64 indices of the accepted candidates, in descending score order (at most K_hat).
    n_rejected, n_duplicates, n_redundant, n_capped : int
        Candidates below the score threshold; within ``dedup`` of an accepted one; with too
        little mass outside the span of the accepted ones; accepted but beyond K_hat.
    """

    kept: np.ndarray
    n_rejected: int
    n_duplicates: int
    n_redundant: int
    n_capped: int


def select(
    candidates: np.ndarray,
    scores: np.ndarray,
    threshold: float,
    k_hat: int,
    dedup: float,
    vectors: np.ndarray | None = None,
) -> Selection:
    """Threshold, de-duplicate in score order, drop redundant mixtures, cap at ``k_hat``.

    Derived in {ref}`sec-lam-acceptance`.

    Parameters
    ----------
    candidates : numpy.ndarray
        (C, N) +-1 candidate patterns.
    scores : numpy.ndarray
        (C,) acceptance scores (:func:`acceptance_scores`).
    threshold : float
        Score threshold (``rho`` for subspace acceptance, ``tau`` for the paper's score).
    k_hat : int
        Largest number of patterns to accept (the spectral count).
    dedup : float
        A candidate within absolute overlap ``>= dedup`` of an accepted one is a duplicate.
    vectors : numpy.ndarray, optional
        (N, K_hat) detected eigenvectors. With them (subspace acceptance) a candidate must
        also bring a *new* direction: the part of its detected-subspace mass
        ``||V^T z||^2 / N`` outside the span of the already accepted patterns (measured in
        the K_hat coordinates ``V^T z``) must be ``>= threshold``.

    Returns
    -------
    Selection

    Notes
    -----
    A sign-mixture of n accepted patterns overlaps each of them by about 1/2 (n = 3),
    3/8 (n = 5), ..., and scores above 0.6, so neither the score nor a de-duplication
    threshold above the largest real overlap removes it; its mass lies in the span of its
    components (novel fraction ~0), so it is dropped as redundant, while a pattern not yet
    accepted keeps novel fraction ~1.
    """
    check_pm1(candidates, "candidates", ndim=2, allow_empty=True)
    if not isinstance(scores, np.ndarray) or scores.shape != (candidates.shape[0],):
        raise ValueError(
            f"scores must be an array of shape ({candidates.shape[0]},), got "
            f"{getattr(scores, 'shape', type(scores).__name__)}"
        )
    check_real(threshold, "threshold")
    check_nonneg_int(k_hat, "k_hat")
    check_in_range(dedup, "dedup", 0.0, 1.0, low_open=True)
    if vectors is not None and (not isinstance(vectors, np.ndarray) or vectors.ndim != 2
                                or vectors.shape[0] != candidates.shape[1]):
        raise ValueError(
            f"vectors must be an (N, K_hat) array with N = {candidates.shape[1]}, got "
            f"{getattr(vectors, 'shape', type(vectors).__name__)}"
        )
    return Selection(*_select(candidates, scores, float(threshold), int(k_hat), float(dedup), vectors))


def _select(
    cands: np.ndarray,
    scores: np.ndarray,
    thr: float,
    k_hat: int,
    dedup: float,
    V: np.ndarray | None = None,
) -> tuple[np.ndarray, int, int, int, int]:
    """Unvalidated core of :func:`select` (used inside :func:`factorize`)."""
    ok = np.flatnonzero(scores >= thr)
    n_rej = cands.shape[0] - ok.size
    order = ok[_score_order(scores[ok])]
    N = cands.shape[1]
    X = cands.astype(np.float64)
    Y = X @ V if V is not None else None
    kept: list[int] = []
    basis = np.zeros((0, 0 if V is None else V.shape[1]))
    n_dup = n_red = 0
    for i in order:
        if kept:
            if np.max(np.abs(X[kept] @ X[i])) / N >= dedup:
                n_dup += 1
                continue
        if Y is not None:
            y = Y[i]
            resid = y - basis.T @ (basis @ y) if basis.shape[0] else y
            if float(resid @ resid) / N < thr:
                n_red += 1
                continue
            nrm = float(np.linalg.norm(resid))
            if nrm > 0:
                basis = np.vstack([basis, resid / nrm])
        kept.append(int(i))
    kept_arr = np.asarray(kept, dtype=np.int64)
    n_cap = max(0, kept_arr.size - k_hat)
    return kept_arr[:k_hat], n_rej, n_dup, n_red, n_cap


def _canonical_sign(X: np.ndarray) -> np.ndarray:
    """Flip each +-1 row so that it has at least as many -1 as +1 entries (ties: first entry -1).

    ``xi`` and ``-xi`` are the same memory of a Hebbian kernel; a fixed convention makes the
    output reproducible and shows images with the package's convention (object +1 on a
    majority background -1, :func:`fedlam.data.structured_archetypes`).
    """
    if X.shape[0] == 0:
        return X
    tot = X.astype(np.int64).sum(axis=1)
    flip = (tot > 0) | ((tot == 0) & (X[:, 0] > 0))
    out = X.copy()
    out[flip] *= -1
    return out


def search_span(
    vectors: np.ndarray,
    n_starts: int,
    rng: np.random.Generator | int,
    *,
    iters: int = 50,
    scales: np.ndarray | None = None,
    avoid: np.ndarray | None = None,
    include_axes: bool = True,
    anneal_steps: int = 0,
) -> np.ndarray:
    """In-span search: fixed points of ``x <- sgn(V V^T x)`` from eigenvector mixtures.

    Each start is ``sgn(V c)`` with ``c ~ N(0, diag(scales^2))`` in the ``K_hat`` coordinates
    (:func:`factorize` passes ``scales = sqrt(lambda_i)``: a start is then the sign of a
    Gaussian vector with covariance ``J`` restricted to the detected space, whose second
    moments are those of the archetypes' own coordinates ``V^T xi / sqrt(N)`` for an exact
    operator -- correlated archetypes share a large component along the top eigenvector, and
    isotropic starts, far from all of them, end in mixtures; with
    ``avoid``: ``c`` drawn in the orthogonal complement of the coordinates ``V^T p`` of the
    patterns already found, so that new starts point away from them), plus, with
    ``include_axes``, the signs of the single eigenvectors ``sgn(v_i)``. The update
    maximises ``x^T V V^T x`` over the hypercube (it never decreases it), so every start ends
    at a fixed point, a local maximum of the in-span fraction ``||V^T x||^2 / N``. For the
    exact projector of a linearly independent family every archetype is such a fixed point,
    and generically the only +-1 vector in the span (chapter 3); mixtures are fixed points
    too but score lower. All starts move together: ``O(S N K_hat)`` per iteration.
    Derived in {ref}`sec-lam-identifiability`.

    Parameters
    ----------
    vectors : numpy.ndarray
        float (N, K_hat) orthonormal columns, K_hat >= 1.
    n_starts : int
        Number of random mixture starts (>= 1).
    rng : Generator or int
    iters : int
        Largest number of sign iterations.
    scales : numpy.ndarray or None
        (K_hat,) non-negative standard deviations of the start coefficients (None: ones).
    avoid : numpy.ndarray or None
        (P, N) +-1 patterns already found: the search then runs in the *deflated* subspace
        ``W``, the part of span ``V`` orthogonal to them, where the remaining archetypes
        (nearly orthogonal to the found ones, or correlated but not in their span) are fewer
        and easier to reach; each end state is then refined in the full span ``V``.
    include_axes : bool
        Also start from ``sgn(v_i)`` for every column.
    anneal_steps : int
        Before the sign iterations, ``anneal_steps`` soft steps
        ``c <- W^T tanh(beta sqrt(N) W c)`` (normalised) with ``beta`` rising geometrically
        from 0.3 to 10: at small ``beta`` this is gradient descent of ``||W c||_4^4`` on the
        sphere, whose minimisers in a random span are the flattest vectors -- the +-1 ones --
        and the rising ``beta`` turns it into the sign iteration. It reaches archetypes from
        starts whose plain sign iteration ends in a mixture (exact operators of 50 random
        archetypes at N = 600: 26 of 50 in one pass against 2 of 50). 0: plain sign
        iterations.

    Returns
    -------
    numpy.ndarray
        int8 (S, N): the final states (fixed points, or the state after ``iters`` steps),
        in canonical sign, duplicates removed (first occurrence kept).
    """
    if not isinstance(vectors, np.ndarray) or not np.issubdtype(vectors.dtype, np.floating):
        raise TypeError(f"vectors must be a float numpy array (N, K_hat), got {type(vectors).__name__}")
    if vectors.ndim != 2 or vectors.shape[1] < 1 or vectors.shape[0] < 2:
        raise ValueError(f"vectors must have shape (N >= 2, K_hat >= 1), got {vectors.shape}")
    if not np.all(np.isfinite(vectors)):
        raise ValueError("vectors must be finite")
    n_starts = check_positive_int(n_starts, "n_starts")
    iters = check_positive_int(iters, "iters")
    if n_starts * vectors.shape[0] > 2**31:
        raise ValueError(f"n_starts * N must be <= 2**31 (memory), got {n_starts} * {vectors.shape[0]}")
    anneal_steps = check_nonneg_int(anneal_steps, "anneal_steps")
    gen = as_rng(rng)
    N, k = vectors.shape
    V = np.asarray(vectors, dtype=np.float64)
    C = gen.standard_normal((k, n_starts))
    if scales is not None:
        if (not isinstance(scales, np.ndarray) or scales.shape != (k,)
                or not np.all(np.isfinite(scales)) or np.any(scales < 0)):
            raise ValueError(f"scales must be a finite non-negative array of shape ({k},), got "
                             f"{getattr(scales, 'shape', type(scales).__name__)}")
        C *= scales[:, None]
    Z = V @ C  # (N, S) start fields
    W = V
    if avoid is not None:
        check_pm1(avoid, "avoid", ndim=2, allow_empty=True)
        if avoid.shape[1] != N:
            raise ValueError(f"avoid must have N = {N} columns, got shape {avoid.shape}")
        if avoid.shape[0]:
            Q = np.linalg.qr(avoid.T.astype(np.float64))[0]
            U, sv, _ = np.linalg.svd(V - Q @ (Q.T @ V), full_matrices=False)
            W = U[:, sv > 1e-6 * max(1.0, float(sv.max(initial=0.0)))]
            Z = Z - Q @ (Q.T @ Z)
    if W.shape[1] > 0:
        # search in the deflated subspace W (all of span V on a first pass)
        Cw = W.T @ Z
        Cw /= np.maximum(np.linalg.norm(Cw, axis=0), 1e-300)
        if anneal_steps:
            Cw = _anneal(W, Cw, anneal_steps)
        X = _sign_fixed_points(np.where((W @ Cw).T >= 0, 1.0, -1.0), W, iters)
    else:
        X = np.empty((0, N))
    if include_axes:
        X = np.vstack([np.where(V.T >= 0, 1.0, -1.0), X])
    # refine every state in the full detected space
    X = _sign_fixed_points(X, V, iters)
    return _unique_rows(_canonical_sign(X.astype(np.int8)))


def _anneal(W: np.ndarray, C: np.ndarray, steps: int) -> np.ndarray:
    """The soft steps of :func:`search_span`: ``c <- W^T tanh(beta sqrt(N) W c)``, normalised,
    for ``beta`` rising geometrically from 0.3 to 10; returns the float64 (k, S) coordinates.

    The steps run in float32. They only choose where the sign iterations start (those run in
    float64 and decide the fixed points), so single precision loses nothing the search reads,
    and ``tanh`` of an (N, S) field -- the cost of the whole search -- is 4-5x cheaper in
    float32 where numpy has no vectorised float64 ``tanh`` (CPUs without AVX-512).
    """
    N = W.shape[0]
    W32 = W.astype(np.float32)
    C32 = C.astype(np.float32)
    for beta in np.geomspace(0.3, 10.0, steps):
        F = W32 @ C32  # the field, scaled and squashed in place (no (N, S) temporaries)
        F *= np.float32(beta * np.sqrt(N))
        C32 = W32.T @ np.tanh(F, out=F)
        C32 /= np.maximum(np.linalg.norm(C32, axis=0), np.float32(1e-30))
    return C32.astype(np.float64)


def _sign_fixed_points(X: np.ndarray, W: np.ndarray, iters: int) -> np.ndarray:
    """``iters`` steps of ``x <- sgn(W W^T x)`` on every row of ``X`` (+-1 floats, changed in place).

    A row that a step leaves unchanged is a fixed point and stays one, so each step multiplies
    only the rows the previous step moved: the same states as stepping all rows ``iters``
    times (or until none moves), at the cost of the rows still moving.
    """
    active = np.arange(X.shape[0])
    for _ in range(iters):
        if active.size == 0:
            break
        Xa = X[active]
        Xn = np.where((Xa @ W) @ W.T >= 0, 1.0, -1.0)
        moved = np.any(Xn != Xa, axis=1)
        active = active[moved]
        X[active] = Xn[moved]
    return X


def _unique_rows(X: np.ndarray) -> np.ndarray:
    """The distinct rows of a C-contiguous 2-D array in order of first occurrence (a dict of
    row bytes: ``O(S N)``, where ``numpy.unique(axis=0)`` sorts structured rows)."""
    X = np.ascontiguousarray(X)
    first: dict[bytes, int] = {}
    keep = [i for i in range(X.shape[0]) if first.setdefault(X[i].tobytes(), i) == i]
    return np.ascontiguousarray(X[keep])


def hebbian_weights(coords: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Non-negative weights ``w`` with ``sum_c w_c y_c y_c^T ~ target`` (least squares).

    ``coords`` (C, k) are candidates' coordinates ``y_c = V^T x_c / sqrt(N)`` in the detected
    eigenbasis and ``target`` (k, k) the operator's signal part in that basis. An exact
    operator is ``sum_mu u_mu u_mu^T`` with ``u_mu = xi^mu / sqrt(N)``: its archetypes get
    weight 1 and any other candidate -- a sign-mixture, or a +-1 vector that happens to lie in
    the span (chapter 3) -- weight 0, because the rank-one matrices ``y y^T`` of a few
    candidates are linearly independent. Solved by :func:`scipy.optimize.nnls` on the
    ``k (k + 1) / 2`` independent entries. Derived in {ref}`sec-lam-identifiability`.

    Parameters
    ----------
    coords : numpy.ndarray
        float (C, k).
    target : numpy.ndarray
        float (k, k) symmetric.

    Returns
    -------
    numpy.ndarray
        float64 (C,) non-negative weights.
    """
    import scipy.optimize

    if not isinstance(coords, np.ndarray) or coords.ndim != 2:
        raise ValueError(f"coords must be a (C, k) array, got {getattr(coords, 'shape', type(coords).__name__)}")
    C, k = coords.shape
    if not isinstance(target, np.ndarray) or target.shape != (k, k):
        raise ValueError(f"target must be a ({k}, {k}) array, got {getattr(target, 'shape', type(target).__name__)}")
    if C == 0:
        return np.empty(0)
    iu = np.triu_indices(k)
    scale = np.where(iu[0] == iu[1], 1.0, np.sqrt(2.0))  # Frobenius norm on the upper triangle
    A = (coords[:, iu[0]] * coords[:, iu[1]] * scale).T  # (k(k+1)/2, C)
    b = target[iu] * scale
    w, _ = scipy.optimize.nnls(A, b, maxiter=50 * max(C, 1))
    return w


def _select_span(
    cands: np.ndarray,
    scores: np.ndarray,
    k_hat: int,
    dedup: float,
    floor: float | np.ndarray,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, int, int, int, int]:
    """Unvalidated core of :func:`select_span` (``floor``: one value, or one per candidate)."""
    N = cands.shape[1]
    floors = np.broadcast_to(np.asarray(floor, dtype=np.float64), scores.shape)
    order = _score_order(scores)
    X = cands.astype(np.float64)
    kept: list[int] = []
    Q = np.zeros((0, N))
    n_rej = n_dup = n_red = 0
    wmax = float(weights.max(initial=0.0)) if weights is not None else 0.0
    for i in order:
        if scores[i] < floors[i]:
            n_rej += 1
            continue
        x = X[i]
        if kept:
            if np.max(np.abs(X[kept] @ x)) / N >= dedup:
                n_dup += 1
                continue
        if weights is not None and weights[i] <= 1e-6 * wmax:
            n_red += 1
            continue
        if kept:
            proj = Q.T @ (Q @ x)
            recon = np.where(proj >= 0, 1.0, -1.0)
            if abs(float(recon @ x)) / N >= dedup:
                n_red += 1
                continue
        kept.append(int(i))
        resid = x - Q.T @ (Q @ x)
        nrm = float(np.linalg.norm(resid))
        if nrm > 1e-9 * np.sqrt(N):
            Q = np.vstack([Q, resid / nrm])
    kept_arr = np.asarray(kept, dtype=np.int64)
    n_cap = max(0, kept_arr.size - k_hat)
    return kept_arr[:k_hat], n_rej, n_dup, n_red, n_cap


def select_span(
    candidates: np.ndarray,
    scores: np.ndarray,
    k_hat: int,
    dedup: float = 0.95,
    floor: float = 0.5,
) -> Selection:
    """Selection of the in-span search: score order, copies, sign-mixtures, floor, cap.

    Candidates are taken in descending in-span score ``||V^T x||^2 / N``. One is dropped

    * below ``floor`` (its predicted in-span fraction is too small for an archetype);
    * as a *duplicate* when ``|overlap| >= dedup`` with a kept one (a copy, or the same
      fixed point with a few bits flipped by noise; distinct archetypes may overlap up to
      ``dedup``);
    * as *redundant* when it is, to within ``dedup``, the sign of a combination of the kept
      patterns: ``|x . sgn(P x)| / N >= dedup`` with ``P`` the projector on their span. This
      is what a sign-mixture of kept patterns is (``sgn(xi^1 + xi^2 + xi^3)`` is the sign of
      its own projection), while an archetype correlated with kept ones is not (its
      projection's sign is a mixture that differs from it on a fraction of sites that does
      not vanish with N).

    At most ``k_hat`` are kept. Derived in {ref}`sec-lam-acceptance`.

    Parameters
    ----------
    candidates : numpy.ndarray
        (C, N) +-1.
    scores : numpy.ndarray
        (C,) in-span scores.
    k_hat : int
        Largest number of patterns.
    dedup : float
        In (0, 1].
    floor : float
        Smallest acceptable score.

    Returns
    -------
    Selection
    """
    check_pm1(candidates, "candidates", ndim=2, allow_empty=True)
    if not isinstance(scores, np.ndarray) or scores.shape != (candidates.shape[0],):
        raise ValueError(
            f"scores must be an array of shape ({candidates.shape[0]},), got "
            f"{getattr(scores, 'shape', type(scores).__name__)}"
        )
    check_nonneg_int(k_hat, "k_hat")
    dedup = check_in_range(dedup, "dedup", 0.0, 1.0, low_open=True)
    floor = check_real(floor, "floor")
    return Selection(*_select_span(candidates, scores, int(k_hat), dedup, floor))


def _k_kwargs(p: LAMParams, components: Any, component_weights: Any, noise_var: float) -> dict:
    """Keyword arguments of the K-hat estimator for the components / noise given to factorize."""
    kw: dict = {}
    if components is not None or component_weights is not None:
        if p.k_method != "free":
            raise ValueError(f"components and component_weights need k_method='free', got k_method={p.k_method!r}")
        if components is None:
            raise ValueError("component_weights given without components")
        if isinstance(components, (np.ndarray, _sp.Spectrum)) or not isinstance(components, Sequence):
            raise TypeError(f"components must be a list of (N, N) operators, BulkComponent or Component, "
                            f"got {type(components).__name__}")
        if components and all(isinstance(c, _sp.Component) for c in components):
            comps: list = list(components)
        else:
            # fit the components once (the partial spectrum of J may be grown below)
            comps = [c if isinstance(c, _sp.BulkComponent) else _sp.fit_component(c) for c in components]
        kw = {"components": comps, "weights": component_weights}
    if noise_var > 0:
        if p.k_method not in ("mp", "free"):
            raise ValueError(f"noise_sigma > 0 needs k_method 'mp' or 'free' (noise-aware edges), "
                             f"got k_method={p.k_method!r}")
        kw["noise_var"] = noise_var
    return kw


def factorize(
    J: np.ndarray,
    rng: np.random.Generator | int | None = None,
    *,
    params: LAMParams | None = None,
    spectrum: _sp.Spectrum | None = None,
    components: Sequence[Any] | None = None,
    component_weights: np.ndarray | None = None,
    noise_sigma: float = 0.0,
    start: np.ndarray | None = None,
    max_k: int | None = None,
    memory: np.ndarray | None = None,
    **overrides: Any,
) -> FactorizeResult:
    """Factorize a server operator into +-1 patterns: spectrum -> K_hat -> search -> accept.

    Parameters
    ----------
    J : numpy.ndarray
        float64 (N, N) symmetric operator (raw: mean of Hebbian operators; an exact
        ``xi^T xi / N`` works too).
    rng : Generator, int or None
        Randomness of the starts/seeds and of the dynamics. None draws a fresh OS-seeded
        generator (not reproducible).
    params : LAMParams or None
        Parameters; keyword ``overrides`` (any LAMParams field) are applied on top.
    spectrum : Spectrum or None
        A spectrum of ``J`` to reuse (complete, or partial from
        :func:`fedlam.spectral.top_spectrum` with enough eigenpairs for the detection).
    components : sequence or None
        Only with ``k_method="free"``: the bulk of ``J = sum_c w_c J_c``, either as
        :class:`fedlam.khat.Component` (scale and ratio from the uploads' scalars,
        :func:`fedlam.khat.components_from_uploads`; no fit) or as the summands ``J_c``
        ((N, N) operators or :class:`fedlam.spectral.BulkComponent`, fitted with
        :func:`fedlam.spectral.fit_component`). None: ``J`` is its own single component.
    component_weights : numpy.ndarray or None
        The weights ``w_c`` of fitted summands (None: equal, ``1/L``; must be None with
        Component objects).
    noise_sigma : float
        Entry standard deviation of symmetric Gaussian noise known to be in ``J`` (a
        differentially private upload, or the mean of noised uploads: ``sqrt(sum_c w_c^2
        sigma_c^2)``). The K-hat edge becomes that of the bulk convolved with a semicircle of
        eigenvalue variance ``N noise_sigma^2``, and the in-span acceptance floor uses the
        eigenvector overlaps lowered by the noise (:func:`fedlam.khat.outlier_overlaps`).
    start : numpy.ndarray or None
        (N, j) approximate leading eigenvectors of ``J`` (e.g. the previous round's
        ``FactorizeResult.vectors``) that warm-start the block eigensolver of the partial
        spectrum (N >= 500). It changes the cost, not the result beyond the solver's
        tolerance (derived in {ref}`sec-cost-block`).
    max_k : int or None
        Upper bound on K-hat from outside the spectrum, e.g. the robust count of a median
        aggregate (``RobustAggregate.max_k`` of :func:`fedlam.robust.aggregate`, derived in
        {ref}`sec-robust-median`); None: no bound.
    memory : numpy.ndarray or None
        float64 (N, N) operator ``xi^T xi / N`` of the patterns the server stored last round
        (its broadcast), or None. A candidate within ``dedup`` of that memory (a stored
        pattern, or a version of one differing in a few bits) passes the in-span floor
        lowered by ``(1 - dedup) / 2``: the most a blend of the stored version and the clients'
        fresh version of one archetype costs the version that dominates it (derived in
        {ref}`sec-lam-memory-floor`). Only with ``search="span"``.

    Returns
    -------
    FactorizeResult
        ``patterns`` (K_acc <= K_hat, N) int8; K_hat = 0 gives an empty (0, N) array.

    Notes
    -----
    Cost: one (partial) symmetric eigendecomposition, plus ``O(attempts * iters * S * N *
    K_hat)`` for the in-span search (default) or ``O(attempts * steps * S * L * N * K_hat)``
    for the LAM dynamics with the projector kernel. The true number of archetypes is never
    used. Derived in {ref}`sec-lam-seeding`, {ref}`sec-lam-identifiability` and
    {ref}`sec-lam-acceptance`.

    Examples
    --------
    Correlated archetypes (overlap about 0.7) from the exact operator, and from one noisy
    operator of 600 examples:

    >>> import numpy as np
    >>> from fedlam import data, operators, metrics
    >>> xi = data.random_archetypes(1, 400, 0).repeat(3, axis=0)
    >>> flips = np.random.default_rng(1).random((3, 400)) < 0.15
    >>> xi = np.where(flips, -xi, xi).astype(np.int8)
    >>> res = factorize(operators.pattern_operator(xi), rng=0)
    >>> res.k_hat, metrics.magnetization(res.patterns, xi).round(2).tolist()
    (3, [1.0, 1.0, 1.0])
    >>> eta, _ = data.sample_examples(xi, 600, 0.8, np.ones(3) / 3, 2)
    >>> res = factorize(operators.hebbian(eta), rng=0)
    >>> res.k_hat, bool(metrics.magnetization(res.patterns, xi).min() >= 0.95)
    (3, True)
    """
    check_operator(J, "J")
    if memory is not None:
        check_operator(memory, "memory")
        if memory.dtype != np.float64:
            raise TypeError(f"memory must be float64 (the server's broadcast), got dtype {memory.dtype}")
        if memory.shape != J.shape:
            raise ValueError(f"memory must be an operator of the shape of J {J.shape}, got {memory.shape}")
    return _factorize(J, rng, params=params, spectrum=spectrum, components=components,
                      component_weights=component_weights, noise_sigma=noise_sigma, start=start, max_k=max_k,
                      memory=memory, **overrides)


def _factorize(
    J: np.ndarray,
    rng: np.random.Generator | int | None = None,
    *,
    params: LAMParams | None = None,
    spectrum: _sp.Spectrum | None = None,
    components: Sequence[Any] | None = None,
    component_weights: np.ndarray | None = None,
    noise_sigma: float = 0.0,
    start: np.ndarray | None = None,
    max_k: int | None = None,
    memory: np.ndarray | None = None,
    spectrum_checked: bool = False,
    **overrides: Any,
) -> FactorizeResult:
    """:func:`factorize` of an operator its caller has validated (the server's entry point).

    ``spectrum_checked``: the caller computed ``spectrum`` from ``J`` itself (the server's
    defences), so it is not checked against ``J`` again (an ``O(N^2 k)`` pass).

    ``max_k`` (server defences only): an upper bound on K-hat the defence derived on its own
    (``RobustAggregate.max_k`` of :func:`fedlam.robust.aggregate`); the count against the bulk is capped by it.
    ``memory`` (servers that keep the uploads): the last broadcast ``xi^T xi / N``; a candidate
    within ``dedup`` of it is accepted down to the floor minus ``(1 - dedup) / 2``
    (:class:`_Memory`).
    """
    if start is not None and (not isinstance(start, np.ndarray) or start.ndim != 2
                              or start.shape[0] != J.shape[0] or not np.issubdtype(start.dtype, np.floating)):
        raise ValueError(f"start must be a float (N, j) array with N = {J.shape[0]}, got "
                         f"{getattr(start, 'shape', type(start).__name__)}")
    if start is not None and not np.all(np.isfinite(start)):
        raise ValueError("start must be finite")
    p = _make_params(params, overrides)
    if memory is not None and p.search != "span":
        raise ValueError(f"memory needs the in-span search (search='span'), got search={p.search!r}")
    gen = np.random.default_rng() if rng is None else as_rng(rng)
    N = J.shape[0]
    noise_sigma = check_in_range(noise_sigma, "noise_sigma", 0.0, None)
    if not np.isfinite(noise_sigma):
        raise ValueError(f"noise_sigma must be finite, got {noise_sigma!r}")
    kw = _k_kwargs(p, components, component_weights, N * noise_sigma**2)
    if max_k is not None:
        max_k = check_nonneg_int(max_k, "max_k")
        if max_k >= 1 and p.k_method == "free":
            kw["max_k"] = min(max_k, max(1, N // 2))  # the spectrum is then not grown past it
    if spectrum is not None:
        if not isinstance(spectrum, _sp.Spectrum):
            raise TypeError(f"spectrum must be a Spectrum or None, got {type(spectrum).__name__}")
        if spectrum.n != N:
            raise ValueError(f"spectrum must be a spectrum of J (N = {N}), got N = {spectrum.n}")
        if not spectrum_checked:
            _check_spectrum_of(spectrum, J)
        if p.kernel == "dense" and not spectrum.complete:
            raise ValueError("kernel='dense' needs a complete spectrum")
        spec = spectrum
        if p.k_method == "shuffle":
            kres = _sp.estimate_k(J, "shuffle", rng=gen, spectrum=spec if spec.complete else None)
        else:
            kres = _sp.estimate_k(spec, p.k_method, dream_time=p.dream_time, tau=p.tau, **kw)
    else:
        spec, kres = _server_spectrum(J, p, gen, kw, start)
    k_hat = int(min(kres.k_hat, len(spec)))
    if max_k is not None and k_hat > max_k:
        k_hat = max_k
    dreamed = _sp.dream_eigenvalues(spec.values, p.dream_time)
    V = spec.vectors[:, :k_hat]
    if k_hat == 0:
        return FactorizeResult(
            patterns=np.empty((0, N), dtype=np.int8), k_hat=0, scores=np.empty(0), n_candidates=0,
            n_duplicates=0, n_rejected=0, n_capped=0, attempts=0, values=spec.values.copy(),
            dreamed=dreamed, vectors=V.copy(), k_result=kres, params=p,
        )
    if p.search == "span":
        return _factorize_span(spec, kres, k_hat, dreamed, p, gen, memory)
    return _factorize_lam(spec, kres, k_hat, dreamed, p, gen)


def _exact_weights(cands: np.ndarray, coords: np.ndarray, scores: np.ndarray, values: np.ndarray,
                   dedup: float, floor: float | np.ndarray) -> np.ndarray:
    """:func:`hebbian_weights` of the candidates that pass the floor (one per group of copies).

    Candidates below the floor, or within ``dedup`` of a better-scoring one, get weight 0
    (:func:`_select_span` drops them anyway). The target is ``diag(lambda)``: the exact
    operator in its own eigenbasis.
    """
    N = cands.shape[1]
    X = cands.astype(np.float64)
    floors = np.broadcast_to(np.asarray(floor, dtype=np.float64), scores.shape)
    reps: list[int] = []
    for i in _score_order(scores):
        if scores[i] < floors[i]:
            continue
        if reps and np.max(np.abs(X[reps] @ X[i])) / N >= dedup:
            continue
        reps.append(int(i))
    w = np.zeros(scores.shape[0])
    if reps:
        w[reps] = hebbian_weights(coords[reps], np.diag(values))
    return w


def _float_array(x: Any, name: str, ndim: int, shape: tuple | None = None) -> np.ndarray:
    """``x`` as a finite float64 array of ``ndim`` dimensions (and ``shape``, None entries free)."""
    ok = isinstance(x, np.ndarray) and x.ndim == ndim and (x.dtype.kind in "fiu")
    if ok and shape is not None:
        ok = all(s is None or s == d for s, d in zip(shape, x.shape, strict=True))
    if not ok or not np.all(np.isfinite(x)):
        want = "x".join("n" if s is None else str(s) for s in shape) if shape else f"{ndim}-d"
        raise ValueError(f"{name} must be a finite real ({want}) numpy array, got {_describe(x)}")
    return np.asarray(x, dtype=np.float64)


def candidate_floors(coords: np.ndarray, gamma: np.ndarray, N: int, margin: float | None = None) -> np.ndarray:
    """In-span acceptance floor of each candidate, from where it lies in the detected span.

    ``coords`` (b, k) are the candidates' coordinates ``V^T x / sqrt(N)`` on the detected
    eigenvectors, ``gamma`` (k,) those eigenvectors' predicted overlaps with the archetypes' span
    (:func:`fedlam.khat.outlier_overlaps`). An archetype with coordinates ``y`` scores
    ``sum_j y_j^2``, and that is ``sum_j gamma_j c_j^2`` with ``c_j^2 = y_j^2 / gamma_j`` its
    coordinates in the span (summing to 1): the ``y^2``-weighted harmonic mean ``H`` of the
    ``gamma_j`` times the de-biased in-span fraction ``D = sum_j y_j^2 / gamma_j``. A true
    archetype has ``D = 1`` and scores ``H``; the floor is ``max(1/2, H - margin)`` with the
    margin ``4 sqrt((1 - H) / N)`` (or ``margin``). With equal overlaps this is the floor of
    {prf:ref}`prop-noisy-span`, ``gamma_min - 4 sqrt((1 - gamma_min) / N)``; otherwise a candidate
    held by the strong spikes needs the score they predict, not the weakest spike's: a sign
    mixture of three strongly detected archetypes (score about 3/4) no longer passes because a
    fourth, weak spike lowered the floor for all. Never below the floor of ``gamma_min``.
    Derived in {ref}`sec-lam-candidate-floor`.
    """
    y = _float_array(coords, "coords", 2)
    g = np.clip(_float_array(gamma, "gamma", 1, (y.shape[1],)), 0.0, 1.0)
    N = check_positive_int(N, "N")
    if margin is not None:
        margin = check_in_range(margin, "margin", 0.0, 1.0)
    y2 = y ** 2
    g_min = float(g.min()) if g.size else 1.0
    score = y2.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        # D = sum_j y_j^2 / gamma_j (inf where a gamma_j = 0 holds mass: H is then gamma_min)
        D = np.where(y2 > 0.0, y2 * (1.0 / g), 0.0).sum(axis=1)
        H = np.where((score > 0.0) & np.isfinite(D), score / D, g_min)
    H = np.clip(H, g_min, 1.0)
    m = 4.0 * np.sqrt((1.0 - H) / N) + 1e-9 if margin is None else float(margin)
    return np.maximum(0.5, H - m)


def noise_flip_bound(X: np.ndarray, vectors: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """Per row of X (+-1 candidates): the bits that noise alone may flip in a fixed point near it.

    ``N q + 4 sqrt(N q (1 - q))`` with ``q = Phi(-sqrt(g / (1 - g)))``, ``g`` the mean of the
    detected eigenvectors' predicted overlaps ``gamma`` weighted by the row's squared
    coordinates on them (``vectors``, (N, k)): a projection ``g p_i + sqrt(g (1 - g)) z_i`` per
    site flips each bit with probability ``q`` (``lam._Memory``, *retention*). Derived in
    {ref}`sec-lam-memory-floor`.
    """
    Xf = _float_array(X, "X", 2)
    N = Xf.shape[1]
    V = _float_array(vectors, "vectors", 2, (N, None))
    g = np.clip(_float_array(gamma, "gamma", 1, (V.shape[1],)), 0.0, 1.0)
    C = (Xf @ V) ** 2
    g = np.einsum("bk,k->b", C, g) / np.maximum(C.sum(axis=1), 1e-300)
    t = np.sqrt(g / np.maximum(1.0 - g, 1e-300))
    q = np.array([0.5 * math.erfc(float(x) / math.sqrt(2.0)) for x in t])   # Phi(-t)
    return N * q + 4.0 * np.sqrt(N * q * (1.0 - q))


class _Memory:
    """What the server's memory (its last broadcast ``A = xi^T xi / N``) changes in the in-span
    search and selection. Derived in {ref}`sec-lam-memory-floor`.

    *Floors* (:meth:`floors`): the in-span floor, lowered by ``(1 - dedup) / 2`` for a candidate
    that lies within ``dedup`` of the memory (in-memory-span fraction at least ``dedup^2``: a
    stored pattern, or a version of one that differs in a few bits). When the stored version
    ``a`` of an archetype and the clients' fresh evidence ``b`` of it disagree on a few bits
    (overlap ``m``), the aggregate's spike is the blend ``alpha a a^T + beta b b^T``, whose top
    eigenvector is no +-1 vector; the version that dominates has squared cosine at least
    ``(1 + m) / 2`` with it, the value at the flip point ``alpha = beta``. With ``m >= dedup``
    (the pair counts as one archetype) the deficit is at most ``(1 - dedup) / 2`` beyond the
    noise deficit the floor already allows; without the allowance neither version passes near
    the flip point and the archetype is lost for a round.

    *Retention* (:meth:`retain`): a candidate within ``dedup`` of a stored pattern ``p`` that
    differs from it in no more bits than noise alone flips is replaced by ``p``. If the
    operator holds ``p`` with predicted eigenvector overlap ``gamma``, the projection of ``p``
    on the detected span is ``gamma p_i + sqrt(gamma (1 - gamma)) z_i`` per site (``z_i``
    about standard normal), so the fixed point near ``p`` flips each bit with probability
    ``q = Phi(-sqrt(gamma / (1 - gamma)))``; ``d <= N q + 4 sqrt(N q (1 - q))`` flips are no
    evidence of a change. Without it, a stored pattern whose spike the noise blurs (a retired
    archetype kept only by the broadcast's echo, under privacy noise) takes a random walk of
    about ``N q`` bits per round. ``gamma`` of a candidate is the mean of the detected
    eigenvectors' predicted overlaps weighted by its squared coordinates on them. Where
    ``N q`` is negligible (bound below one bit) nothing is computed and nothing changes.

    The memory's span is computed once, when a candidate first needs it.
    """

    def __init__(self, memory: np.ndarray | None, dedup: float,
                 vectors: np.ndarray, gamma: np.ndarray) -> None:
        self.memory, self.dedup = memory, dedup
        self.allowance = 0.5 * (1.0 - dedup)
        self.V, self.gamma = vectors, np.clip(gamma, 0.0, 1.0)
        self._span: np.ndarray | None = None

    def span(self) -> np.ndarray:
        if self._span is None:
            self._span = memory_span(self.memory)
        assert self._span is not None
        return self._span

    def _near(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Memory-span coordinates of the rows of X and which rows lie within dedup of it."""
        Y = X @ self.span()
        return Y, np.einsum("bk,bk->b", Y, Y) / X.shape[1] >= self.dedup ** 2

    def floors(self, cands: np.ndarray, scores: np.ndarray, base: np.ndarray) -> np.ndarray:
        """Per candidate: its floor ``base`` (:func:`candidate_floors`), lowered by the allowance
        for one within ``dedup`` of the memory."""
        if self.memory is None:
            return base
        band = np.flatnonzero((scores < base) & (scores >= base - self.allowance))
        if band.size == 0:
            return base
        _, near = self._near(cands[band].astype(np.float64))
        floors = base.copy()
        floors[band[near]] -= self.allowance
        return floors

    def retain(self, X: np.ndarray) -> np.ndarray:
        """X (int8 candidates) with those that differ from a stored pattern by noise alone
        replaced by that pattern (a copy when anything is replaced)."""
        if self.memory is None or X.shape[0] == 0:
            return X
        N = X.shape[1]
        Xf = X.astype(np.float64)
        bound = noise_flip_bound(Xf, self.V, self.gamma)
        rows = np.flatnonzero(bound >= 1.0)
        if rows.size == 0:
            return X
        U = self.span()
        if U.shape[1] == 0:
            return X
        _, near = self._near(Xf[rows])
        rows = rows[near]
        if rows.size == 0:
            return X
        P = _sign_fixed_points(Xf[rows], U, 33)          # sign iterations in the memory's span
        Z = P @ U
        stored = np.einsum("bk,bk->b", Z, Z) / N >= 1.0 - 1e-9     # a +-1 vector of the span: stored
        ov = np.einsum("bn,bn->b", P, Xf[rows])
        flips = 0.5 * (N - np.abs(ov))
        keep = stored & (flips <= bound[rows]) & (flips > 0)
        if not keep.any():
            return X
        out = X.copy()
        out[rows[keep]] = (P[keep] * np.sign(ov[keep])[:, None]).astype(np.int8)
        return out


def _factorize_span(spec: _sp.Spectrum, kres: _sp.KHatResult, k_hat: int, dreamed: np.ndarray,
                    p: LAMParams, gen: np.random.Generator, memory: np.ndarray | None = None) -> FactorizeResult:
    """In-span search and selection (``search="span"``; ``memory``: the server's last broadcast,
    see :class:`_Memory`)."""
    N = spec.n
    V = np.ascontiguousarray(spec.vectors[:, :k_hat])
    gamma = _sp.outlier_overlaps(kres, spec.values[:k_hat], N)
    g_min = float(gamma.min())
    margin = p.span_margin if p.span_margin is not None else 4.0 * np.sqrt((1.0 - g_min) / N) + 1e-9
    floor = max(0.5, g_min - margin)
    dedup = p.dedup_threshold
    mem = _Memory(memory, dedup, V, gamma)
    scales = np.sqrt(np.maximum(spec.values[:k_hat], 0.0))
    # no bulk and no noise: an exact pattern operator (or a sum of broadcasts)
    exact = (not (kres.sigma2 > 0)) and not (kres.details.get("noise_var", 0.0) > 0)
    pool: list[np.ndarray] = []
    kept = np.empty(0, dtype=np.int64)
    n_rej = n_dup = n_red = n_cap = 0
    cands = np.empty((0, N), dtype=np.int8)
    scores = np.empty(0)
    attempts = stalls = 0
    # deflation rounds: go on while they make progress (at most max_attempts in a row without)
    while stalls < p.max_attempts and attempts < k_hat + p.max_attempts:
        n_before = kept.size
        found = cands[kept] if kept.size else None
        X = search_span(V, p.starts_for(k_hat - (0 if found is None else found.shape[0])), gen,
                        iters=p.span_iters, scales=scales, avoid=found, include_axes=attempts == 0,
                        anneal_steps=p.anneal_steps)
        X = mem.retain(X)
        attempts += 1
        pool.append(X)
        cands = _unique_rows(np.concatenate(pool))
        Y = cands.astype(np.float64) @ V
        scores = np.einsum("bk,bk->b", Y, Y) / N
        floors = mem.floors(cands, scores, candidate_floors(Y / np.sqrt(N), gamma, N, p.span_margin))
        weights = _exact_weights(cands, Y / np.sqrt(N), scores, spec.values[:k_hat], dedup, floors) if exact else None
        kept, n_rej, n_dup, n_red, n_cap = _select_span(cands, scores, k_hat, dedup, floors, weights)
        if kept.size >= k_hat:
            break
        stalls = stalls + 1 if kept.size <= n_before else 0
    return FactorizeResult(
        patterns=np.ascontiguousarray(cands[kept]), k_hat=k_hat, scores=scores[kept],
        n_candidates=int(cands.shape[0]), n_duplicates=int(n_dup), n_rejected=int(n_rej),
        n_capped=int(n_cap), n_redundant=int(n_red), attempts=attempts,
        values=spec.values.copy(), dreamed=dreamed, vectors=V.copy(), k_result=kres, params=p,
        extras={"floor": floor, "overlaps": gamma},
    )


def _factorize_lam(spec: _sp.Spectrum, kres: _sp.KHatResult, k_hat: int, dreamed: np.ndarray,
                   p: LAMParams, gen: np.random.Generator) -> FactorizeResult:
    """The LAM dynamics and :func:`select` (``search="lam"``, the tuned LAM of chapter 3)."""
    N = spec.n
    V = spec.vectors[:, :k_hat]
    kernel = make_kernel(p.kernel, spec, k_hat, p.dream_time)
    thr = p.rho if p.accept == "subspace" else p.tau
    n_seeds = p.seeds_for(k_hat)
    pool: list[np.ndarray] = []
    pool_scores: list[np.ndarray] = []
    attempts = 0
    kept = np.empty(0, dtype=np.int64)
    n_rej = n_dup = n_red = n_cap = 0
    cands = np.empty((0, N), dtype=np.int8)
    scores = np.empty(0)
    while attempts < p.max_attempts:
        attempts += 1
        seeds = seed_mixtures(V, n_seeds, gen)
        final = run_lam(seeds, kernel, p, gen).reshape(-1, N)
        sc = acceptance_scores(final, vectors=V) if p.accept == "subspace" else acceptance_scores(final, kernel=kernel)
        pool.append(final)
        pool_scores.append(sc)
        cands = np.concatenate(pool)
        scores = np.concatenate(pool_scores)
        kept, n_rej, n_dup, n_red, n_cap = _select(cands, scores, thr, k_hat, p.dedup_threshold,
                                                   V if p.accept == "subspace" else None)
        if kept.size >= k_hat:
            break
    return FactorizeResult(
        patterns=np.ascontiguousarray(cands[kept]), k_hat=k_hat, scores=scores[kept],
        n_candidates=int(cands.shape[0]), n_duplicates=int(n_dup), n_rejected=int(n_rej),
        n_capped=int(n_cap), n_redundant=int(n_red), attempts=attempts,
        values=spec.values.copy(), dreamed=dreamed,
        vectors=V.copy(), k_result=kres, params=p,
    )


def factorize_literal(
    J: np.ndarray,
    rng: np.random.Generator | int,
    *,
    eps: float = 0.01,
    dream_steps: int = 200,
    k_method: str = "fixed",
    tau: float = 0.5,
    n_seeds: int | None = None,
    layers: int = 3,
    lam: float = 0.2,
    beta: float = 2.5,
    H: float = 0.1,
    steps: int = 50,
    dedup: float = 0.5,
) -> FactorizeResult:
    """The paper's pipeline, literally (Algorithms 1-2): benchmark baseline and oracle.

    ``dream_literal`` (``dream_steps`` dense products), ``numpy.linalg.eigh`` of the result,
    K_hat by ``k_method`` (``"fixed"``: eigenvalues of ``J_KS`` above ``tau``, the paper;
    other methods are applied to the raw eigenvalues of ``J``), Gaussian sign-mixture seeds,
    then for each seed a Python loop over steps and layers of paper eq. (2.12) with the
    dense ``J_KS`` kernel, ``U[-1, 1]`` noise and the clamped seed as external field;
    duplicates removed in input order with the *signed* overlap ``q >= dedup`` (0.5), then
    acceptance ``zeta^T J_KS zeta / N >= tau``. No retries, no cap. Derived in
    {ref}`sec-lam-acceptance`.
    """
    check_operator(J, "J")
    gen = as_rng(rng)
    k_method = check_choice(k_method, "k_method", _sp.K_METHODS)
    # checked here, not through LAMParams: its error would name dream_time = eps * dream_steps
    eps = check_in_range(eps, "eps", 0.0, None, low_open=True)
    dream_steps = check_count(dream_steps, "dream_steps", MAX_STEPS)
    p = LAMParams(layers=layers, lam=lam, beta=beta, H=H, steps=steps, noise="uniform",
                  external="clamped", kernel="dense", dream_time=eps * dream_steps, k_method=k_method,
                  tau=tau, n_seeds=n_seeds, dedup=dedup, accept="score")
    N = J.shape[0]
    Jks = _sp.dream_literal(J, eps, dream_steps)
    w, U = np.linalg.eigh(Jks)
    w, U = w[::-1], U[:, ::-1]
    if k_method == "fixed":
        kres = _sp.k_hat_fixed(w, tau)
    else:
        raw = np.sort(np.linalg.eigvalsh(J))[::-1]
        kres = _sp.estimate_k(J if k_method == "shuffle" else raw, k_method, rng=gen)
    k_hat = int(kres.k_hat)
    V = U[:, :k_hat]
    raw_spec = _sp.Spectrum(w, U, N, float(np.trace(Jks)), float(np.sum(Jks * Jks)))
    if k_hat == 0:
        return FactorizeResult(np.empty((0, N), dtype=np.int8), 0, np.empty(0), 0, 0, 0, 0, 0,
                               raw_spec.values, w, V, kres, p)
    m = p.seeds_for(k_hat)
    cands: list[np.ndarray] = []
    for _alpha in range(m):
        c = gen.standard_normal(k_hat)
        x = np.where(V @ c >= 0, 1.0, -1.0)
        sig = [x.copy() for _ in range(layers)]
        for _t in range(steps):
            JS = [Jks @ sig[a] for a in range(layers)]
            new = []
            for a in range(layers):
                hh = JS[a] + H * x
                for b in range(layers):
                    if b != a:
                        hh = hh - (lam / N) * JS[b] * float(sig[b] @ JS[a])
                u = gen.uniform(-1.0, 1.0, size=N)
                new.append(np.where(np.tanh(beta * hh) + u >= 0, 1.0, -1.0))
            sig = new
        cands.extend(sig)
    kept: list[np.ndarray] = []
    n_dup = 0
    for z in cands:
        if any(float(z @ k) / N >= dedup for k in kept):
            n_dup += 1
            continue
        kept.append(z)
    acc, sc = [], []
    for z in kept:
        s = float(z @ (Jks @ z)) / N
        if s >= tau:
            acc.append(z)
            sc.append(s)
    pats = np.array(acc, dtype=np.int8).reshape(-1, N)
    return FactorizeResult(pats, k_hat, np.asarray(sc), len(cands), n_dup, len(kept) - len(acc), 0, 1,
                           w, w, V, kres, p)
