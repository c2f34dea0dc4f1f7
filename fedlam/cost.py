"""Operation-count model of one federation round, stage by stage.

Derived in {ref}`sec-cost`. The model counts floating-point operations (one multiply
and one add count as two, the usual GEMM convention ``2 m n k``) at leading order for

* **fedlam's pipeline**: one symmetric eigendecomposition per round, the dreaming flow
  applied to the eigenvalues, K̂ read off the spectrum, and the LAM dynamics run in the
  K̂-dimensional subspace of the leading eigenvectors;
* **the paper-literal pipeline** {cite:p}`paper`: the dreaming iteration applied to the dense
  matrix for ``dream_steps`` steps (one N×N matrix square per step), then an
  eigendecomposition, then LAM dynamics with the dense N×N kernel.

Both pipelines share the client side (one Hebbian product per client, one blend) and the
server's aggregation and broadcast. The counts are a model, not a measurement: the book
checks their exponents against measured log-log slopes (:func:`loglog_slope`), and shows the
stages of a round as a table (:func:`stage_table`).

Nothing here is random and nothing is timed; every function is a pure function of numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fedlam._validation import _describe, as_float_array, check_nonneg_int, check_positive_int, check_real

__all__ = [
    "EIGH_FLOPS_PER_N3",
    "StageCost",
    "round_cost",
    "total_cost",
    "stage_table",
    "loglog_slope",
]

#: Leading constant of a dense symmetric eigendecomposition with eigenvectors, in flops
#: per N³ (Householder tridiagonalisation ``4/3 N³`` plus the eigenvector work; the
#: textbook estimate for the symmetric QR algorithm with vectors is about ``9 N³``).
EIGH_FLOPS_PER_N3: float = 9.0


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
        Number of clients ``L`` (enters the aggregation cost only: clients run in parallel,
        so the client stages are reported per client).
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
        Flops per N³ of one symmetric eigendecomposition with eigenvectors.

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
    >>> [s.stage for s in stages][:3]
    ['client operator', 'aggregation', 'sharpening (dreaming)']
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

    n, m, k = float(N), float(M), float(K_hat)
    runs = float(s * P)  # layer states evolved in parallel
    stages = (
        StageCost("client operator", "client", 2 * m * n**2, 2 * m * n**2, "M N^2", "M N^2"),
        StageCost("aggregation", "server", L * n**2, L * n**2, "L N^2", "L N^2"),
        StageCost("sharpening (dreaming)", "server", n, 2.0 * I * n**3, "N", "I N^3"),
        StageCost("eigendecomposition", "server", c_eig * n**3, c_eig * n**3, "N^3", "N^3"),
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
