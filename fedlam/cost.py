"""Operation-count model of one federation round, stage by stage.

Derived in {ref}`sec-cost`. The model counts floating-point operations (one multiply
and one add count as two, the usual GEMM convention ``2 m n k``) at leading order for

* **fedlam's pipeline**: the top of the spectrum by the server's block eigensolver (a few
  block products with the aggregate, {ref}`sec-cost-block`; LAPACK's subset solver below
  ``N = 500``), the dreaming flow applied to the eigenvalues, K̂ read off the spectrum, and
  the LAM dynamics run in the K̂-dimensional subspace of the leading eigenvectors;
* **the paper-literal pipeline** {cite:p}`paper`: the dreaming iteration applied to the dense
  matrix for ``dream_steps`` steps (one N×N matrix square per step), then a dense
  eigendecomposition, then LAM dynamics with the dense N×N kernel.

Both pipelines share the client side (one Hebbian product per client, one blend) and the
server's aggregation and broadcast. The counts are a model, not a measurement: the book
checks their exponents against measured log-log slopes (:func:`loglog_slope`), the block
solver's predicted number of products (:func:`block_solver_cost`) against the solver's own
count (:func:`measure_block_counts`), and shows the stages of a round as a table
(:func:`stage_table`).

Every function but :func:`measure_block_counts` is a pure function of numbers: nothing
random, nothing timed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fedlam import _eig
from fedlam._validation import _describe, as_float_array, check_nonneg_int, check_positive_int, check_real

__all__ = [
    "EIGH_FLOPS_PER_N3",
    "SUBSET_EIGH_FLOPS_PER_N3",
    "RAYLEIGH_RITZ_FLOPS_PER_NB2",
    "BLOCK_MIN_N",
    "StageCost",
    "BlockSolverCost",
    "BlockCounts",
    "block_solver_cost",
    "server_top_k",
    "measure_block_counts",
    "random_start_tangent",
    "round_cost",
    "total_cost",
    "stage_table",
    "loglog_slope",
]

#: Leading constant of a dense symmetric eigendecomposition with eigenvectors, in flops
#: per N³ (Householder tridiagonalisation ``4/3 N³`` plus the eigenvector work; the
#: textbook estimate for the symmetric QR algorithm with vectors is about ``9 N³``).
EIGH_FLOPS_PER_N3: float = 9.0

#: Leading constant of LAPACK's subset solver (``eigh(..., subset_by_index=...)``), the
#: server's solver below :data:`BLOCK_MIN_N`: the tridiagonal reduction ``4/3 N³``; the ``k``
#: eigenpairs of the tridiagonal matrix and their back-transformation add ``O(N² k)``.
SUBSET_EIGH_FLOPS_PER_N3: float = 4.0 / 3.0

#: Flops of one step of the block solver besides its product with ``J``, per ``N b²``: the
#: Ritz vectors and their images ``Q Z``, ``(J Q) Z`` (``4 N m b``) at the mean basis width
#: ``m = 2.5 b`` of a restart cycle (the basis grows from ``b`` to ``4 b`` columns), and the
#: new block orthogonalised against the basis and its part of the Rayleigh quotient
#: (``6 N m b + 6 N b²`` at the mean width ``2 b`` it is appended to): ``10 + 12 + 6``.
RAYLEIGH_RITZ_FLOPS_PER_NB2: float = 28.0

#: The server's spectrum comes from the block solver from this ``N`` on (and when
#: ``10 k <= N``, ``2 (k + 8) <= N``); below, from LAPACK's subset solver.
BLOCK_MIN_N: int = _eig.BLOCK_MIN_N


@dataclass(frozen=True)
class StageCost:
    """Predicted cost of one stage of a round.

    Attributes
    ----------
    stage : str
        Name of the stage, in the order data flows through a round.
    where : str
        ``"client"`` (runs on every client, in parallel) or ``"server"``.
    ours : float
        Predicted flops of fedlam's implementation of the stage.
    literal : float
        Predicted flops of the paper-literal implementation.
    ours_order, literal_order : str
        The leading-order scaling, as text (e.g. ``"M N^2"``).
    """

    stage: str
    where: str
    ours: float
    literal: float
    ours_order: str
    literal_order: str


@dataclass(frozen=True)
class BlockSolverCost:
    """Predicted work of the server's block eigensolver on one aggregate.

    Derived in {ref}`sec-cost-block` (:func:`block_solver_cost`).

    Attributes
    ----------
    blocks : int
        Predicted block products ``t`` with ``J`` (the product of the start block included).
    block_size : int
        Columns ``b = k + oversample`` of a block.
    columns : int
        ``b t``: an upper bound on the columns multiplied (a locked pair leaves the block).
    limiting : int
        1-based index of the eigenvalue whose accuracy sets ``t``.
    gap : float
        Relative gap ``gamma`` of that eigenvalue (to the ``(b+1)``-th, over the spread).
    tolerance : float
        Its required accuracy, relative to the spread of the bulk.
    start_tangent : float
        ``tan`` of its eigenvector's angle with the random start block.
    product_flops : float
        ``2 N² b t``: the block products.
    rayleigh_ritz_flops : float
        :data:`RAYLEIGH_RITZ_FLOPS_PER_NB2` ``N b² t``: Rayleigh-Ritz and orthogonalisation.
    """

    blocks: int
    block_size: int
    columns: int
    limiting: int
    gap: float
    tolerance: float
    start_tangent: float
    product_flops: float
    rayleigh_ritz_flops: float

    @property
    def flops(self) -> float:
        """Total predicted flops: products plus Rayleigh-Ritz."""
        return self.product_flops + self.rayleigh_ritz_flops


def _airy_position(j: float) -> float:
    """Distance of the ``j``-th eigenvalue below a soft edge, in Tracy-Widom scales."""
    return (1.5 * math.pi * j) ** (2.0 / 3.0)


def block_solver_cost(
    N: int,
    q: float,
    K_hat: int = 0,
    *,
    k: int | None = None,
    oversample: int = 8,
    n_sigma: float | None = 4.0,
    value_fraction: float = 0.1,
    depth_fraction: float = 0.25,
) -> BlockSolverCost:
    """Predicted block products and flops of the block solver, from the gap of the spectrum.

    Derived in {ref}`sec-cost-block`. The aggregate is modelled as ``K_hat`` spikes well above a
    Marchenko-Pastur bulk of ratio ``q`` (mean 1: everything below is relative), edge
    ``(1 + sqrt q)²``, spread ``4 sqrt q`` (``(1 + sqrt q)²`` when ``q >= 1``), Tracy-Widom
    scale ``s`` of Johnstone's formula (:func:`fedlam.rmt.johnstone_center_scale` at
    ``M = N / q``); the ``j``-th bulk value lies ``s (3 pi j / 2)^(2/3)`` below the edge. For
    each bulk value ``i = K_hat + 1 .. k`` of the block of ``b = k + oversample`` vectors:

    * gap ``gamma_i = (lambda_i - lambda_{b+1}) / spread``;
    * accuracy the solver asks of it, ``eps_i`` (relative to the spread): without a threshold
      (``n_sigma=None``) ``value_fraction s`` plus ``depth_fraction`` of its depth below the
      band within ``4 s`` of the edge; under the K-hat rule's threshold ``tau = edge +
      n_sigma s`` (the server's), half its distance to ``tau`` when that is at least ``4 s``
      (the value only needs to be placed below ``tau``), else ``value_fraction s``;
    * start: a Gaussian block of ``b`` columns has a vector with no component on the
      ``i - 1`` eigenvectors above and ``tan`` of its angle with ``v_i`` about
      ``sqrt(N / (b - i + 1))``;
    * Chebyshev bound: after ``t`` products the block Krylov space holds ``T_{t-1}`` of the
      spectrum, so ``t_i = 1 + ceil(arccosh(tan0_i / sqrt eps_i) / arccosh(1 + 2 gamma_i))``.

    The prediction is the largest ``t_i``: a bound (the spikes' vectors, ``gamma = O(1)`` or
    more, converge first; the measured counts lie below it, :func:`measure_block_counts`). It
    grows like ``N^{1/3}`` times a logarithm.

    Parameters
    ----------
    N : int
        Dimension, ``N >= 2 (k + oversample)``.
    q : float
        Aspect ratio ``N / (total examples)`` of the bulk, finite and > 0.
    K_hat : int, default 0
        Spikes above the bulk, ``0 <= K_hat < k``.
    k : int or None, default None
        Eigenpairs computed; None: the server's, :func:`server_top_k` (with the threshold
        when ``n_sigma`` is given).
    oversample : int, default 8
        Extra block columns (the solver's ``b = k + 8``), ``>= 1``.
    n_sigma : float or None, default 4.0
        The count threshold ``edge + n_sigma s`` the server passes (its K-hat rule's);
        None: no threshold (every value to ``value_fraction s`` near the edge).
    value_fraction, depth_fraction : float, default 0.1, 0.25
        The solver's accuracies near the edge (in ``s``) and deeper (of the depth), > 0 and >= 0.

    Returns
    -------
    BlockSolverCost

    Raises
    ------
    TypeError, ValueError
        If an argument has the wrong type or range (the message names it).

    Examples
    --------
    >>> est = block_solver_cost(1000, 1 / 3, 6)
    >>> est.block_size, est.columns == est.block_size * est.blocks
    (16, True)
    """
    if k is None:
        k = server_top_k(check_positive_int(N, "N", minimum=2), check_nonneg_int(K_hat, "K_hat"),
                         threshold=n_sigma is not None)
    k = check_positive_int(k, "k")
    p = check_positive_int(oversample, "oversample")
    b = k + p
    N = check_positive_int(N, "N", minimum=2 * b)
    q = check_real(q, "q")
    if q <= 0:
        raise ValueError(f"q must be > 0, got {q!r}")
    K_hat = check_nonneg_int(K_hat, "K_hat")
    if K_hat >= k:
        raise ValueError(f"K_hat must be < k = {k} (the solver computes k pairs), got {K_hat}")
    if n_sigma is not None:
        n_sigma = check_real(n_sigma, "n_sigma")
        if n_sigma < 0:
            raise ValueError(f"n_sigma must be >= 0 or None, got {n_sigma!r}")
    vf = check_real(value_fraction, "value_fraction")
    if vf <= 0:
        raise ValueError(f"value_fraction must be > 0, got {vf!r}")
    df = check_real(depth_fraction, "depth_fraction")
    if df < 0:
        raise ValueError(f"depth_fraction must be >= 0, got {df!r}")
    from fedlam.rmt import _center_scale

    M = N / q
    s = float(_center_scale(M - 0.5, N - 0.5, M)[1])
    rq = math.sqrt(q)
    spread = 4.0 * rq if q < 1 else (1.0 + rq) ** 2
    far = _airy_position(b + 1 - K_hat)  # the (b+1)-th eigenvalue, below the edge
    best: tuple[int, int, float, float, float] | None = None
    for i in range(K_hat + 1, k + 1):
        a = _airy_position(i - K_hat)
        gamma = s * (far - a) / spread
        if n_sigma is None:
            tol = vf * s + df * s * max(a - 4.0, 0.0)
        else:
            dist = s * (n_sigma + a)
            tol = 0.5 * dist if dist >= 4.0 * s else vf * s
        eps = tol / spread
        tan0 = math.sqrt(N / (b - i + 1))
        t = 1 + math.ceil(math.acosh(max(tan0 / math.sqrt(eps), 1.0)) / math.acosh(1.0 + 2.0 * gamma))
        if best is None or t > best[0]:
            best = (t, i, gamma, eps, tan0)
    assert best is not None  # K_hat < k: at least one bulk value
    t, i, gamma, eps, tan0 = best
    n = float(N)
    return BlockSolverCost(
        blocks=t, block_size=b, columns=b * t, limiting=i, gap=gamma, tolerance=eps, start_tangent=tan0,
        product_flops=2.0 * n * n * b * t, rayleigh_ritz_flops=RAYLEIGH_RITZ_FLOPS_PER_NB2 * n * b * b * t,
    )


def server_top_k(N: int, K_hat: int, *, threshold: bool = True) -> int:
    """Eigenpairs the server computes for ``K_hat`` detected directions.

    Under its K-hat threshold (``threshold=True``, the default free-edge rule) and from
    :data:`BLOCK_MIN_N` on (the block solver) the server asks for 8 and, while
    ``K_hat >= k - 1`` (fewer than two computed values below the threshold: the count may be
    limited by the length of the spectrum), for four times as many (8, 32, 128, ...); without
    one (the bulk-fitting rules), or below :data:`BLOCK_MIN_N`, for 16, growing while
    ``K_hat >= k - 8`` (16, 64, 256, ...); at most ``N`` ({ref}`sec-cost-block`). The
    earlier, shorter solves are not counted by :func:`round_cost`.

    Parameters
    ----------
    N : int
        Dimension, ``>= 2``.
    K_hat : int
        Detected directions, ``>= 0``.
    threshold : bool, default True
        Whether the server's solver works under a count threshold.

    Returns
    -------
    int
    """
    N = check_positive_int(N, "N", minimum=2)
    K_hat = check_nonneg_int(K_hat, "K_hat")
    if not isinstance(threshold, (bool, np.bool_)):
        raise TypeError(f"threshold must be a bool, got {_describe(threshold)}")
    k, margin = _eig._server_sizes(N, 1.0 if threshold else None)
    while k < N and K_hat >= k - margin:
        k = min(N, 4 * k)
    return k


def random_start_tangent(N: int, block: int, index: int, *, draws: int = 9, seed: int = 0) -> float:
    """Median ``tan`` of the angle between an eigenvector and a random start block (measured).

    The check of the start constant of :func:`block_solver_cost` ({ref}`sec-cost-block`): for a
    Gaussian ``N x block`` start ``X`` and orthonormal eigenvectors ``v_1, v_2, ...`` (a Gaussian
    block is rotation invariant, so the unit vectors serve), the smallest ``tan`` of the angle
    with ``v_index`` over the vectors ``x = X c`` with no component on ``v_1 .. v_{index-1}``;
    the model's value is ``sqrt(N / (block - index + 1))``.

    Parameters
    ----------
    N : int
        Dimension, ``N > block``.
    block : int
        Columns of the start block, ``>= 1``.
    index : int
        1-based index of the eigenvector, ``1 <= index <= block``.
    draws : int, default 9
        Independent start blocks; their median is returned.
    seed : int, default 0
        Seed of the draws.

    Returns
    -------
    float
    """
    b = check_positive_int(block, "block")
    N = check_positive_int(N, "N", minimum=b + 1)
    i = check_positive_int(index, "index")
    if i > b:
        raise ValueError(f"index must be <= block = {b}, got {i}")
    n_draws = check_positive_int(draws, "draws")
    rng = np.random.default_rng(check_nonneg_int(seed, "seed"))
    tans = []
    for _ in range(n_draws):
        X = rng.standard_normal((N, b))
        # coefficients c with no component on v_1 .. v_{i-1}: the null space of those rows
        _, _, Vt = np.linalg.svd(X[: i - 1], full_matrices=True) if i > 1 else (None, None, np.eye(b))
        C = Vt[i - 1 :].T
        g = X[i - 1] @ C                        # component along v_i
        R = X[i:] @ C                           # components on the rest
        # min over c of ||R c|| / |g c| = 1 / sqrt(g^T (R^T R)^{-1} g)
        tans.append(1.0 / math.sqrt(float(g @ np.linalg.solve(R.T @ R, g))))
    return float(np.median(tans))


@dataclass(frozen=True)
class BlockCounts:
    """Measured and predicted block products of the server's solver at several sizes.

    Output of :func:`measure_block_counts`; shown as its :meth:`table`.

    Attributes
    ----------
    sizes : tuple of int
        The dimensions ``N``.
    q : tuple of float
        The bulk's ratio ``N / (L M)`` at each size.
    k_hat : tuple of int
        Eigenvalues above the K-hat threshold (the spikes the predictions remove).
    measured, predicted : tuple of int
        Block products without a threshold (every value near the edge to ``0.1 s``):
        the solver's count and :func:`block_solver_cost`'s with ``n_sigma=None``.
    measured_threshold, predicted_threshold : tuple of int
        The same under the K-hat rule's threshold (the server's solve; prediction at
        ``n_sigma = 4``).
    columns, columns_threshold : tuple of int
        Columns the solver multiplied in the two runs.
    """

    sizes: tuple[int, ...]
    q: tuple[float, ...]
    k_hat: tuple[int, ...]
    measured: tuple[int, ...]
    predicted: tuple[int, ...]
    measured_threshold: tuple[int, ...]
    predicted_threshold: tuple[int, ...]
    columns: tuple[int, ...]
    columns_threshold: tuple[int, ...]

    def table(self, title: str = "Block products of the solver: measured and predicted") -> Any:
        """The counts as a titled table, one row per size (see :class:`BlockCounts`)."""
        from fedlam.experiments._common import TitledTable

        rows = [(n, kh, mt, pt, m, p)
                for n, kh, mt, pt, m, p in zip(self.sizes, self.k_hat, self.measured_threshold,
                                               self.predicted_threshold, self.measured, self.predicted,
                                               strict=True)]
        header = ("N", "K_hat", "server's solve", "its bound", "every value to 0.1 s", "its bound")
        return TitledTable(title, rows, header)

    def _repr_markdown_(self) -> str:
        return str(self.table()._repr_markdown_())

    def _repr_html_(self) -> str:
        return str(self.table()._repr_html_())

    def __repr__(self) -> str:
        return self._repr_markdown_()


def measure_block_counts(
    sizes: tuple[int, ...] = (400, 800, 1600, 3200),
    *,
    n_archetypes: int = 5,
    clients: int = 3,
    examples_per_neuron: float = 1.0,
    r: float = 0.8,
    k: int = 16,
    seed: int = 95,
) -> BlockCounts:
    """Run the server's block solver on Hebbian aggregates and count its block products.

    The check of :func:`block_solver_cost` in {ref}`sec-cost-block`. At each ``N``: ``clients``
    Hebbian operators of ``M = round(examples_per_neuron N)`` examples each, drawn at
    correlation ``r`` from ``n_archetypes`` archetypes in equal proportions (seed ``seed``, the
    same at every size), averaged; the solver (``fedlam._eig._eig_block``, float64, one BLAS
    thread, cold random start) computes the top ``k`` pairs twice: with every value near the
    edge to ``0.1 s``, and under the K-hat threshold of the free-edge rule
    (:func:`fedlam.spectral.k_hat_free` with the clients' operators), as the server does.
    The counts are deterministic for a fixed seed (the solver's start is seeded).

    Parameters
    ----------
    sizes : tuple of int, default (400, 800, 1600, 3200)
        Dimensions, each ``>= 2 (k + 8)`` and ``>= 10 k``.
    n_archetypes : int, default 5
        Archetypes, ``1 <= n_archetypes < k``.
    clients : int, default 3
        Operators averaged, ``>= 1``.
    examples_per_neuron : float, default 1.0
        ``M / N`` per client, > 0 (``q = 1 / (clients examples_per_neuron)``).
    r : float, default 0.8
        Correlation of the examples with their archetype, in ``(0, 1)``.
    k : int, default 16
        Eigenpairs computed (16: the server's first solve without a threshold; under one it
        asks for 8 from :data:`BLOCK_MIN_N` on, :func:`server_top_k`).
    seed : int, default 95
        Seed of the data at every size.

    Returns
    -------
    BlockCounts

    Raises
    ------
    TypeError, ValueError
        If an argument has the wrong type or range (the message names it).
    """
    from threadpoolctl import threadpool_limits

    from fedlam import _eig, data, operators
    from fedlam.khat import k_hat_free

    k = check_positive_int(k, "k")
    if not isinstance(sizes, tuple) or not sizes:
        raise TypeError(f"sizes must be a non-empty tuple of int, got {_describe(sizes)}")
    Ns = tuple(check_positive_int(n, "sizes[]", minimum=max(2 * (k + 8), 10 * k)) for n in sizes)
    K = check_positive_int(n_archetypes, "n_archetypes")
    if K >= k:
        raise ValueError(f"n_archetypes must be < k = {k}, got {K}")
    L = check_positive_int(clients, "clients")
    ratio = check_real(examples_per_neuron, "examples_per_neuron")
    if ratio <= 0:
        raise ValueError(f"examples_per_neuron must be > 0, got {ratio!r}")
    r = check_real(r, "r")
    if not 0 < r < 1:
        raise ValueError(f"r must be in (0, 1), got {r!r}")
    seed = check_nonneg_int(seed, "seed")
    out: dict[str, list] = {name: [] for name in ("q", "k_hat", "measured", "predicted", "measured_threshold",
                                                   "predicted_threshold", "columns", "columns_threshold")}
    with threadpool_limits(limits=1, user_api="blas"):
        for N in Ns:
            rng = np.random.default_rng(seed)
            M = max(1, round(ratio * N))
            xi = data.random_archetypes(K, N, rng)
            ops = [operators.hebbian(data.sample_examples(xi, M, r, np.full(K, 1.0 / K), rng)[0])
                   for _ in range(L)]
            J = operators.aggregate(ops)
            info: dict = {}
            spec = _eig._eig_block(J, k, precision="float64", info=info)
            if spec is None:
                raise RuntimeError(f"the block solver reached its cap at N = {N} ({info['blocks']} blocks)")
            thr = k_hat_free(spec, components=ops).threshold
            info_t: dict = {}
            if _eig._eig_block(J, k, precision="float64", threshold=thr, info=info_t) is None:
                raise RuntimeError(f"the block solver reached its cap at N = {N} under the threshold")
            kh = int(np.count_nonzero(spec.values > thr))
            q = N / (L * M)
            out["q"].append(q)
            out["k_hat"].append(kh)
            out["measured"].append(int(info["blocks"]))
            out["columns"].append(int(info["products"]))
            out["measured_threshold"].append(int(info_t["blocks"]))
            out["columns_threshold"].append(int(info_t["products"]))
            kh_model = min(kh, k - 1)
            out["predicted"].append(block_solver_cost(N, q, kh_model, k=k, n_sigma=None).blocks)
            out["predicted_threshold"].append(block_solver_cost(N, q, kh_model, k=k).blocks)
    return BlockCounts(sizes=Ns, **{name: tuple(v) for name, v in out.items()})


def round_cost(
    N: int,
    M: int,
    K_hat: int,
    *,
    clients: int = 3,
    layers: int = 3,
    steps: int = 50,
    n_seeds: int | None = None,
    dream_steps: int = 200,
    eigh_constant: float = EIGH_FLOPS_PER_N3,
    top_k: int | None = None,
    oversample: int = 8,
    n_sigma: float | None = 4.0,
) -> tuple[StageCost, ...]:
    """Predicted flops of each stage of one round, for fedlam and for the literal pipeline.

    Derived in {ref}`sec-cost`.

    Parameters
    ----------
    N : int
        Number of neurons (pattern length), ``N >= 2``.
    M : int
        Examples per client in the round, ``M >= 1``.
    K_hat : int
        Number of detected directions, ``K_hat >= 0`` (the LAM stages cost nothing when 0).
    clients : int, default 3
        Number of clients ``L``: enters the aggregation cost and the bulk's ratio
        ``q = N / (L M)`` that sets the block solver's count (clients run in parallel, so
        the client stages are reported per client).
    layers : int, default 3
        LAM layers ``P``.
    steps : int, default 50
        LAM update steps ``U``.
    n_seeds : int or None, default None
        Seeds (LAM runs) ``s``; ``None`` means ``max(8, 2 K_hat)`` as in
        :class:`fedlam.lam.LAMParams`, and 0 when ``K_hat == 0``.
    dream_steps : int, default 200
        Steps ``I`` of the literal dreaming iteration (the paper's ``prop_iters``).
    eigh_constant : float, default :data:`EIGH_FLOPS_PER_N3`
        Flops per N³ of one symmetric eigendecomposition with eigenvectors (the literal
        pipeline's, and fedlam's when the server needs all ``N`` pairs).
    top_k : int or None, default None
        Eigenpairs fedlam's server computes, ``K_hat < top_k <= N``; None: the server's rule
        (:func:`server_top_k`: from :data:`BLOCK_MIN_N` on under the threshold 8, or 32 when
        ``K_hat >= 7``, ...; else 16, or 64 when ``K_hat >= 8``, ...).
    oversample : int, default 8
        Extra columns of the block solver's block, ``b = top_k + oversample``.
    n_sigma : float or None, default 4.0
        The K-hat threshold the server passes to the block solver, in Tracy-Widom scales above
        the edge; None: no threshold (see :func:`block_solver_cost`).

    Notes
    -----
    fedlam's "spectrum" stage is the server's solver ({ref}`sec-cost-block`): from
    :data:`BLOCK_MIN_N` on (and ``10 top_k <= N``, ``2 (top_k + oversample) <= N``) the block
    solver, :func:`block_solver_cost` at ``q = N / (L M)``, order ``b t N^2``; below, LAPACK's
    subset solver, :data:`SUBSET_EIGH_FLOPS_PER_N3` ``N³ + 2 N² top_k``; ``eigh_constant N³``
    when ``top_k == N``. The literal pipeline's is one dense eigendecomposition.

    Returns
    -------
    tuple of StageCost
        One entry per stage, in the order data flows through a round.

    Raises
    ------
    TypeError, ValueError
        If an argument has the wrong type or range (the message names it).

    Examples
    --------
    >>> stages = round_cost(1000, 800, 3)
    >>> [s.stage for s in stages][:4]
    ['client operator', 'aggregation', 'sharpening (dreaming)', 'spectrum']
    """
    N = check_positive_int(N, "N", minimum=2)
    M = check_positive_int(M, "M")
    K_hat = check_nonneg_int(K_hat, "K_hat")
    L = check_positive_int(clients, "clients")
    P = check_positive_int(layers, "layers")
    U = check_positive_int(steps, "steps")
    I = check_nonneg_int(dream_steps, "dream_steps")
    c_eig = check_real(eigh_constant, "eigh_constant")
    if c_eig <= 0:
        raise ValueError(f"eigh_constant must be > 0, got {c_eig!r}")
    if n_seeds is None:
        s = 0 if K_hat == 0 else max(8, 2 * K_hat)
    else:
        s = check_nonneg_int(n_seeds, "n_seeds")
    if K_hat == 0:
        s = 0  # nothing detected: no seeds, no dynamics (the broadcast is the zero operator)
    if top_k is None:
        k_top = server_top_k(N, K_hat, threshold=n_sigma is not None)
    else:
        k_top = check_positive_int(top_k, "top_k")
        if k_top > N or k_top <= min(K_hat, N - 1):
            raise ValueError(f"top_k must satisfy K_hat < top_k <= N (K_hat = {K_hat}, N = {N}), got {k_top}")
    p_over = check_positive_int(oversample, "oversample")
    q = N / (L * M)
    if k_top == N:
        spec_ours, spec_order = c_eig * float(N) ** 3, "N^3"
    elif N >= BLOCK_MIN_N and 10 * k_top <= N and 2 * (k_top + p_over) <= N and K_hat < k_top:
        est = block_solver_cost(N, q, K_hat, k=k_top, oversample=p_over, n_sigma=n_sigma)
        spec_ours, spec_order = est.flops, "b t N^2"
    else:
        if n_sigma is not None:
            check_real(n_sigma, "n_sigma")
        spec_ours = SUBSET_EIGH_FLOPS_PER_N3 * float(N) ** 3 + 2.0 * float(N) ** 2 * k_top
        spec_order = "N^3"

    n, m, k = float(N), float(M), float(K_hat)
    runs = float(s * P)  # layer states evolved in parallel
    stages = (
        StageCost("client operator", "client", 2 * m * n**2, 2 * m * n**2, "M N^2", "M N^2"),
        StageCost("aggregation", "server", L * n**2, L * n**2, "L N^2", "L N^2"),
        StageCost("sharpening (dreaming)", "server", n, 2.0 * I * n**3, "N", "I N^3"),
        StageCost("spectrum", "server", spec_ours, c_eig * n**3, spec_order, "N^3"),
        StageCost("K_hat from the spectrum", "server", n, n, "N", "N"),
        StageCost("seeding", "server", 2 * s * k * n, 2 * s * k * n, "sKN", "sKN"),
        StageCost(
            "LAM dynamics",
            "server",
            U * (4 * runs * n * k + s * P**2 * k),
            U * (2 * runs * n**2 + s * P**2 * n),
            "UsPNK",
            "UsPN^2",
        ),
        StageCost(
            "de-duplication and acceptance",
            "server",
            runs**2 * n + 4 * runs * n * k,
            runs**2 * n + 2 * runs * n**2,
            "(sP)^2N + sPNK",
            "(sP)^2N + sPN^2",
        ),
        StageCost("broadcast operator", "client", 2 * k * n**2, 2 * k * n**2, "K N^2", "K N^2"),
        StageCost("client blend", "client", 3 * n**2, 3 * n**2, "N^2", "N^2"),
    )
    return stages


def total_cost(stages: tuple[StageCost, ...], which: str = "ours") -> float:
    """Sum the predicted flops of a round (client stages counted once: clients are parallel).

    Derived in {ref}`sec-cost`.

    Parameters
    ----------
    stages : tuple of StageCost
        Output of :func:`round_cost`.
    which : {"ours", "literal"}
        Which pipeline to sum.

    Returns
    -------
    float
        Total predicted flops.
    """
    if which not in ("ours", "literal"):
        raise ValueError(f"which must be one of ('ours', 'literal'), got {which!r}")
    if not isinstance(stages, tuple) or not all(isinstance(s, StageCost) for s in stages):
        raise TypeError(f"stages must be a tuple of StageCost (from round_cost), got {type(stages).__name__}")
    return float(sum(getattr(s, which) for s in stages))


def stage_table(stages: tuple[StageCost, ...], title: str = "Predicted flops of one round") -> Any:
    """The stages of a round as a titled table: one row per stage, both pipelines side by side.

    Derived in {ref}`sec-cost`.

    Parameters
    ----------
    stages : tuple of StageCost
        Output of :func:`round_cost`.
    title : str, default "Predicted flops of one round"
        Shown above the table; a non-empty str.

    Returns
    -------
    TitledTable
        Columns: the stage, where it runs, fedlam's predicted flops and leading order
        (``flops``, ``order``), the paper-literal pipeline's (``literal flops``,
        ``literal order``). Flops are printed with two
        significant digits (``1.6e+09``).

    Raises
    ------
    TypeError
        If ``stages`` is not a non-empty tuple of :class:`StageCost`, or ``title`` is not a
        non-empty str.
    """
    from fedlam.experiments._common import TitledTable

    if not isinstance(stages, tuple) or not stages or not all(isinstance(s, StageCost) for s in stages):
        raise TypeError(f"stages must be a non-empty tuple of StageCost (from round_cost), got {_describe(stages)}")
    rows = [(s.stage, s.where, f"{s.ours:.1e}", s.ours_order, f"{s.literal:.1e}", s.literal_order)
            for s in stages]
    # fedlam's columns unprefixed: with "fedlam" on both the table is wider than the book's column
    header = ("stage", "where", "flops", "order", "literal flops", "literal order")
    return TitledTable(title, rows, header)


def loglog_slope(sizes: npt.ArrayLike, values: npt.ArrayLike) -> float:
    """Least-squares slope of ``log(values)`` against ``log(sizes)``.

    Used in {ref}`sec-cost` to read a scaling exponent off a few measured timings.

    Parameters
    ----------
    sizes, values : array_like of positive floats, same length >= 2

    Returns
    -------
    float
        The fitted exponent ``a`` in ``values ≈ c · sizes**a``.
    """
    x = as_float_array(sizes, "sizes")
    y = as_float_array(values, "values")
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"sizes and values must be 1-D of equal length, got shapes {x.shape} and {y.shape}")
    if x.size < 2:
        raise ValueError(f"need at least 2 points to fit a slope, got {x.size}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))) or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("sizes and values must be finite and > 0")
    if np.ptp(np.log(x)) == 0:
        raise ValueError("sizes must not all be equal")
    lx, ly = np.log(x), np.log(y)
    slope = np.polyfit(lx, ly, 1)[0]
    return float(slope)
