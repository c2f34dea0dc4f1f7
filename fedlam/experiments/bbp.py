"""Experiment 1: the BBP validation panel.

For random ±1 archetypes and Hebbian operators built from noisy examples, compare the spectrum of
the rescaled operator N·J with the closed forms of :mod:`fedlam.rmt`: the Marchenko–Pastur edge,
the BBP threshold κ > √q, the outlier location λ_out(κ, q) and the eigenvector overlap γ(κ, q),
using the corrected spike strength κ = N r² π / (1 − r²) (the paper's κ omits the factor N).
The theory is derived in {ref}`sec-bbp-threshold`, {ref}`sec-bbp-outlier` and
{ref}`sec-bbp-overlap`; the notebook is {ref}`sec-exp-bbp`.

The M examples of a setting are split evenly over ``L`` clients and the server operator is the
equal-weight mean of the client operators; with equal batch sizes that mean equals the Hebbian
operator of the pooled examples, so q = N / M with M the round total.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg

from fedlam._validation import as_rng
from fedlam.experiments._common import (
    JsonResult,
    TitledTable,
    check_in_range,
    check_int_tuple,
    check_mixture_tuple,
    check_positive_int,
)
from fedlam.experiments._common import (
    make_params as _make_params,
)
from fedlam.experiments._executor import map_seeds

__all__ = ["BBPParams", "BBPResult", "PRESETS", "make_params", "run", "r_squared",
           "OutlierLawCheck", "outlier_law_check", "setting_table", "spike_table",
           "detection_table", "outlier_table", "overlap_table", "paper_table", "PAPER_REPORTS"]


@dataclass(frozen=True)
class BBPParams:
    """Parameters of the BBP validation panel.

    Attributes
    ----------
    N : int
        Pattern dimension (paper: 400).
    Ms : tuple of int
        Round totals M (examples pooled over clients); q = N / M. Paper: (400, 1600, 6400).
    L : int
        Number of clients the M examples are split over (M must be divisible by L).
    r : float
        Channel quality in (0, 1). Our choice: 0.2. The paper does not state r for this figure;
        with the corrected κ, r = 0.2 puts the three strong archetypes well above threshold and
        the weak ones genuinely below it at every M (κ_weak = 0.17 < √q_min = 0.25).
    pi : tuple of float
        Mixture over the archetypes, summing to 1. Our choice: three strong archetypes
        (0.5, 0.3, 0.17) and three weak ones (0.01 each). The paper does not give the mixture.
    seeds : int
        Independent trials (fresh archetypes and examples each). Paper: 50.
    n_top : int
        Number of leading eigenvalues recorded per trial (paper's panel A shows 10).
    """

    N: int = 400
    Ms: tuple[int, ...] = (400, 1600, 6400)
    L: int = 1
    r: float = 0.2
    pi: tuple[float, ...] = (0.5, 0.3, 0.17, 0.01, 0.01, 0.01)
    seeds: int = 50
    n_top: int = 10

    def __post_init__(self) -> None:
        check_positive_int(self.N, "N", minimum=10)
        check_int_tuple(self.Ms, "Ms", minimum=2)
        check_positive_int(self.L, "L")
        for i, M in enumerate(self.Ms):
            if M % self.L:
                raise ValueError(f"Ms[{i}] must be divisible by L={self.L}, got {M}")
        check_in_range(self.r, "r", 0.0, 1.0, low_open=True, high_open=True)
        check_mixture_tuple(self.pi, "pi")
        check_positive_int(self.seeds, "seeds")
        check_positive_int(self.n_top, "n_top")
        if self.n_top > self.N:
            raise ValueError(f"n_top must be <= N={self.N}, got {self.n_top}")
        if len(self.pi) > self.n_top:
            raise ValueError(
                f"n_top must be >= the number of archetypes len(pi)={len(self.pi)}, got {self.n_top}"
            )

    @property
    def K(self) -> int:
        """Number of archetypes (length of ``pi``)."""
        return len(self.pi)


PRESETS: dict[str, BBPParams] = {
    "book": BBPParams(seeds=10),
    "paper": BBPParams(seeds=50),
}
PRESETS["full"] = PRESETS["paper"]  # the panel is the paper's figure, nothing to add


def make_params(preset: str = "book", **overrides: Any) -> BBPParams:
    """Preset ``"book"``, ``"paper"`` or ``"full"`` (see ``PRESETS``) with field overrides (``None`` keeps
    the preset value)."""
    return _make_params(BBPParams, PRESETS, preset, **overrides)


def r_squared(observed: np.ndarray, predicted: np.ndarray) -> float:
    """Coefficient of determination of ``observed`` around the line observed = predicted.

    R² = 1 − Σ(obs − pred)² / Σ(obs − mean obs)²: no regression is fitted, so R² = 1 only when
    the theory is exact. NaN entries are dropped pairwise.
    """
    o = np.asarray(observed, dtype=np.float64).ravel()
    p = np.asarray(predicted, dtype=np.float64).ravel()
    ok = np.isfinite(o) & np.isfinite(p)
    o, p = o[ok], p[ok]
    if o.size < 2:
        return float("nan")
    ss_tot = float(np.sum((o - o.mean()) ** 2))
    if ss_tot == 0.0:
        return float("nan")
    return 1.0 - float(np.sum((o - p) ** 2)) / ss_tot


@dataclass(frozen=True)
class BBPResult(JsonResult):
    """Arrays of the BBP panel. Axis order: (seed, M index, ...); archetypes in ``pi`` order.

    Attributes
    ----------
    params : BBPParams
    q, edge_low, edge_high : (nM,) aspect ratios and MP edges σ²(1 ∓ √q)² of N·J.
    kappa : (K,) corrected spike strengths N r² π / (1 − r²); ``kappa_paper`` : (K,) the paper's.
    supercritical : (nM, K) bool, κ > √q.
    rank : (K,) index of the eigenvalue attributed to each archetype (order of decreasing κ).
    lambda_theory, gamma_theory : (nM, K) λ_out and γ (NaN where subcritical).
    top_values : (S, nM, n_top) leading eigenvalues of N·J.
    attributed_values : (S, nM, K) eigenvalue number ``rank[mu]`` of N·J.
    overlap : (S, nM, K) squared overlap ⟨v_rank(μ), u_μ⟩² (per eigenvector).
    subspace_overlap : (S, nM, K) Σ_i ⟨v_i, u_μ⟩² over the predicted supercritical eigenvectors.
    n_detected : (S, nM) number of eigenvalues above the MP upper edge.
    """

    params: BBPParams
    q: np.ndarray
    edge_low: np.ndarray
    edge_high: np.ndarray
    kappa: np.ndarray
    kappa_paper: np.ndarray
    supercritical: np.ndarray
    rank: np.ndarray
    lambda_theory: np.ndarray
    gamma_theory: np.ndarray
    top_values: np.ndarray
    attributed_values: np.ndarray
    overlap: np.ndarray
    subspace_overlap: np.ndarray
    n_detected: np.ndarray
    summary: dict = field(default_factory=dict)


def _summarise(res: dict, sup: np.ndarray, n_sup: np.ndarray) -> dict:
    lam_emp = res["attributed_values"]  # (S, nM, K)
    lam_th = res["lambda_theory"]  # (nM, K)
    mean_emp = lam_emp.mean(axis=0)
    r2_mean = r_squared(mean_emp[sup], lam_th[sup])
    per_seed = [r_squared(lam_emp[s][sup], lam_th[sup]) for s in range(lam_emp.shape[0])]
    gap_vec = np.abs(res["overlap"].mean(axis=0) - res["gamma_theory"])[sup]
    gap_sub = np.abs(res["subspace_overlap"].mean(axis=0) - res["gamma_theory"])[sup]
    expected = n_sup[None, :]
    return {
        "r2_trial_mean": r2_mean,
        "r2_per_trial_min": float(np.nanmin(per_seed)),
        "r2_per_trial_max": float(np.nanmax(per_seed)),
        "r2_per_trial_median": float(np.nanmedian(per_seed)),
        "overlap_gap_median": float(np.median(gap_vec)),
        "overlap_gap_max": float(np.max(gap_vec)),
        "subspace_gap_median": float(np.median(gap_sub)),
        "subspace_gap_max": float(np.max(gap_sub)),
        "detected_equals_predicted_fraction": float(np.mean(res["n_detected"] == expected)),
        "detected_more_than_predicted_fraction": float(np.mean(res["n_detected"] > expected)),
        "n_supercritical_per_M": n_sup.tolist(),
        "paper_kappa_supercritical_any": bool(
            np.any(res["kappa_paper"][None, :] > np.sqrt(res["q"])[:, None])
        ),
    }


def _bbp_seed(params: BBPParams, child: np.random.Generator, rank: np.ndarray, n_sup: np.ndarray,
              edge_high: np.ndarray) -> tuple:
    """One trial of :func:`run` with its own generator: (top, attributed, overlap,
    subspace_overlap, n_detected), each with a leading axis over the batch sizes."""
    from fedlam import data, operators

    N, K, L = params.N, params.K, params.L
    pi = np.array(params.pi, dtype=np.float64)
    Ms = np.array(params.Ms, dtype=np.int64)
    nM, n_top = len(Ms), params.n_top
    n_keep = max(n_top, K)
    top = np.empty((nM, n_top))
    attributed = np.empty((nM, K))
    ov = np.empty((nM, K))
    sub_ov = np.empty((nM, K))
    n_det = np.empty(nM, dtype=np.int64)
    xi = data.random_archetypes(K, N, child)
    U = xi.astype(np.float64).T / np.sqrt(N)  # (N, K) unit archetype directions
    for m, M in enumerate(Ms):
        per_client = int(M) // L
        ops = []
        for _c in range(L):
            ex, _labels = data.sample_examples(xi, per_client, params.r, pi, child)
            ops.append(operators.hebbian(ex))
        J = ops[0] if L == 1 else operators.aggregate(np.stack(ops))
        vals, vecs = scipy.linalg.eigh(N * J, subset_by_index=(N - n_keep, N - 1))
        vals, vecs = vals[::-1], vecs[:, ::-1]
        top[m] = vals[:n_top]
        proj2 = (vecs.T @ U) ** 2  # (n_keep, K)
        attributed[m] = vals[rank]
        ov[m] = proj2[rank, np.arange(K)]
        sub_ov[m] = proj2[: n_sup[m]].sum(axis=0)
        n_det[m] = int(np.sum(vals > edge_high[m]))
    return top, attributed, ov, sub_ov, n_det


def run(params: BBPParams, rng: Any, executor: Any = None) -> BBPResult:
    """Run the BBP panel.

    Parameters
    ----------
    params : BBPParams
        Validated parameters (see ``PRESETS``).
    rng : numpy.random.Generator or int
        Master seed; trial ``s`` uses the ``s``-th child of ``rng.spawn`` so the first trials do
        not depend on the total number of trials.
    executor : concurrent.futures.Executor, optional
        Where the trials run (:func:`fedlam.experiments._executor.map_seeds`; None: serial, or
        the Dask cluster of ``FEDLAM_SCHEDULER``). The result does not depend on it.

    Returns
    -------
    BBPResult
    """
    if not isinstance(params, BBPParams):
        raise TypeError(f"params must be a BBPParams, got {type(params).__name__}")
    gen = as_rng(rng)
    from fedlam import rmt

    N, K = params.N, params.K
    pi = np.array(params.pi, dtype=np.float64)
    Ms = np.array(params.Ms, dtype=np.int64)
    sigma2 = 1.0 - params.r**2
    q = N / Ms.astype(np.float64)
    lows, highs = zip(*(rmt.mp_edges(float(qq), sigma2) for qq in q), strict=True)
    edge_low, edge_high = np.array(lows, dtype=float), np.array(highs, dtype=float)
    kappa = np.array([rmt.spike_strength(params.r, float(p), N) for p in pi], dtype=float)
    kappa_paper = np.array([rmt.paper_spike_strength(params.r, float(p)) for p in pi], dtype=float)
    sup = kappa[None, :] > np.sqrt(q)[:, None]  # (nM, K)
    n_sup = sup.sum(axis=1)
    rank = np.empty(K, dtype=np.int64)
    rank[np.argsort(-kappa, kind="stable")] = np.arange(K)

    lam_th = np.full((len(Ms), K), np.nan)
    gam_th = np.full((len(Ms), K), np.nan)
    for m in range(len(Ms)):
        for mu in range(K):
            if sup[m, mu]:
                lam_th[m, mu] = rmt.outlier_location(float(kappa[mu]), float(q[m]), sigma2)
                gam_th[m, mu] = rmt.eigvec_overlap(float(kappa[mu]), float(q[m]))

    S, nM, n_top = params.seeds, len(Ms), params.n_top
    top = np.empty((S, nM, n_top))
    attributed = np.empty((S, nM, K))
    ov = np.empty((S, nM, K))
    sub_ov = np.empty((S, nM, K))
    n_det = np.empty((S, nM), dtype=np.int64)
    tasks = [(params, child, rank, n_sup, edge_high) for child in gen.spawn(S)]
    for s, (t_, a_, o_, so_, d_) in enumerate(map_seeds(_bbp_seed, tasks, executor)):
        top[s], attributed[s], ov[s], sub_ov[s], n_det[s] = t_, a_, o_, so_, d_

    fields = dict(
        q=q, edge_low=edge_low, edge_high=edge_high, kappa=kappa, kappa_paper=kappa_paper,
        supercritical=sup, rank=rank, lambda_theory=lam_th, gamma_theory=gam_th,
        top_values=top, attributed_values=attributed, overlap=ov, subspace_overlap=sub_ov,
        n_detected=n_det,
    )
    summary = _summarise(fields, sup, n_sup)
    return BBPResult(params=params, summary=summary, **fields)



# The page's tables ({ref}`sec-exp-bbp`): one call per visible cell.


@dataclass(frozen=True)
class OutlierLawCheck:
    """The trial-mean outliers against the outlier law, for the spikes with κ > 2√q.

    One entry per checked (M, archetype) pair, in the order of the batch sizes and then of
    the archetypes.

    Attributes
    ----------
    m, mu : (n,) int
        Index of the batch size and of the archetype.
    mean : (n,) float
        Trial mean of the eigenvalue attributed to the archetype.
    law : (n,) float
        λ_out(κ, q) of {eq}`eq-bbp-outlier`.
    sd : (n,) float
        Standard deviation of one trial from the fluctuation law (:func:`fedlam.rmt.outlier_covariance`).
    bias : (n,) float
        Second-order bias from the overlaps of random archetypes,
        σ² Σ_ν κ_μ κ_ν / (N |κ_μ − κ_ν|) over the other checked spikes ν.
    n_trials : int
        Number of trials averaged.
    """

    m: np.ndarray
    mu: np.ndarray
    mean: np.ndarray
    law: np.ndarray
    sd: np.ndarray
    bias: np.ndarray
    n_trials: int

    @property
    def z(self) -> np.ndarray:
        """(mean − law) / standard error of the trial mean."""
        return (self.mean - self.law) / (self.sd / np.sqrt(self.n_trials))

    @property
    def tolerance(self) -> np.ndarray:
        """Four standard errors of the trial mean plus twice the bias."""
        return 4 * self.sd / np.sqrt(self.n_trials) + 2 * self.bias


def outlier_law_check(res: BBPResult) -> OutlierLawCheck:
    """The trial-mean outliers of ``res`` against λ_out, with their standard errors.

    Only spikes with κ > 2√q are checked: within a factor 2 of the threshold the finite-N
    transition window (width of order N^(-1/3)) makes the limit law inaccurate at small N.
    The standard deviation of one trial is the fluctuation law of the outliers with the class
    labels' Bernoulli factor (derived in {ref}`sec-bbp-fluctuations`); the bias term accounts
    for the random archetypes' overlaps, E⟨u_μ, u_ν⟩² = 1/N.

    Parameters
    ----------
    res : BBPResult
        A result of :func:`run`.

    Returns
    -------
    OutlierLawCheck
    """
    if not isinstance(res, BBPResult):
        raise TypeError(f"res must be a BBPResult, got {type(res).__name__}")
    from fedlam import rmt

    p = res.params
    s2 = 1.0 - p.r**2
    pi = np.array(p.pi, dtype=np.float64)
    emp = res.attributed_values.mean(axis=0)
    cols: dict[str, list] = {k: [] for k in ("m", "mu", "mean", "law", "sd", "bias")}
    for m, M in enumerate(p.Ms):
        sup = np.flatnonzero(res.kappa > 2 * np.sqrt(res.q[m]))
        if sup.size == 0:
            continue
        cov = rmt.outlier_covariance(res.kappa[sup], pi[sup], float(res.q[m]), int(M), s2)
        k = res.kappa[sup]
        dk = np.abs(k[:, None] - k[None, :]) + np.eye(k.size)
        off = 1 - np.eye(k.size)
        cols["m"].append(np.full(sup.size, m))
        cols["mu"].append(sup)
        cols["mean"].append(emp[m, sup])
        cols["law"].append(res.lambda_theory[m, sup])
        cols["sd"].append(np.sqrt(np.diag(cov)))
        cols["bias"].append(s2 * (k[:, None] * k[None, :] / dk * off).sum(axis=1) / p.N)
    arr = {k: (np.concatenate(v) if v else np.empty(0)) for k, v in cols.items()}
    return OutlierLawCheck(m=arr["m"].astype(np.int64), mu=arr["mu"].astype(np.int64),
                           mean=arr["mean"], law=arr["law"], sd=arr["sd"], bias=arr["bias"],
                           n_trials=int(res.attributed_values.shape[0]))


def _check_result(res: Any) -> BBPResult:
    if not isinstance(res, BBPResult):
        raise TypeError(f"res must be a BBPResult, got {type(res).__name__}")
    return res


def setting_table(params: BBPParams) -> Any:
    """The panel's setting as a titled table (one row per parameter)."""
    if not isinstance(params, BBPParams):
        raise TypeError(f"params must be a BBPParams, got {type(params).__name__}")
    p = params
    q = ", ".join(f"{p.N / M:.4g}" for M in p.Ms)
    rows = [
        ("neurons N", f"{p.N}"),
        ("round sizes M (q = N/M)", ", ".join(str(M) for M in p.Ms) + f" (q = {q})"),
        ("clients L per round", f"{p.L}"),
        ("archetypes K, mixture π", f"{p.K}, (" + ", ".join(f"{x:g}" for x in p.pi) + ")"),
        ("channel quality r (bulk variance σ² = 1 − r²)", f"{p.r:g} ({1 - p.r**2:.4g})"),
        ("independent trials", f"{p.seeds}"),
        ("leading eigenvalues recorded", f"{p.n_top}"),
    ]
    return TitledTable("Setting", rows, ("parameter", "value"))


def spike_table(res: BBPResult) -> Any:
    """Spike strengths per archetype, corrected and as the paper writes them, against √q."""
    res = _check_result(res)
    p = res.params
    rows = []
    for mu in range(p.K):
        rows.append((f"{mu + 1}", f"{p.pi[mu]:g}", f"{res.kappa[mu]:.3f}",
                     f"{res.kappa_paper[mu]:.4f}",
                     *("yes" if res.supercritical[m, mu] else "no" for m in range(len(p.Ms)))))
    header = ("archetype", "π", "κ", "paper's κ", *(f"√q = {np.sqrt(q):.3g}" for q in res.q))
    return TitledTable("Spike strengths against the BBP threshold: κ = N r² π / (1 − r²), the "
                       "paper's κ without the factor N, and whether κ > √q at each round size",
                       rows, header)


def detection_table(res: BBPResult) -> Any:
    """Per batch size: the MP edge, the predicted and the detected number of outliers."""
    res = _check_result(res)
    n_sup = res.supercritical.sum(axis=1)
    rows = []
    for m, M in enumerate(res.params.Ms):
        det = res.n_detected[:, m]
        rows.append((f"{M}", f"{res.q[m]:.4g}", f"{res.edge_high[m]:.3f}", f"{n_sup[m]}",
                     f"{det.mean():.2f}", f"{det.min()}–{det.max()}",
                     f"{np.mean(det == n_sup[m]):.0%}"))
    return TitledTable("Eigenvalues of N·J above the MP edge σ²(1+√q)²: predicted, detected "
                       "(mean and range over the trials) and the trials where the two agree",
                       rows, ("M", "q", "edge", "predicted", "detected", "range", "agree"))


def _supercritical_pairs(res: BBPResult) -> Iterator[tuple[int, int, int]]:
    """``(m, M, mu)`` for every supercritical (batch size, archetype) pair, in table order."""
    for m, M in enumerate(res.params.Ms):
        for mu in np.flatnonzero(res.supercritical[m]):
            yield m, int(M), int(mu)


def outlier_table(res: BBPResult) -> Any:
    """Per supercritical (M, archetype): λ_out against the trial mean, and the error in
    standard errors where the outlier law is checked (:func:`outlier_law_check`)."""
    res = _check_result(res)
    chk = outlier_law_check(res)
    z = {(int(a), int(b)): v for a, b, v in zip(chk.m, chk.mu, chk.z, strict=True)}
    mean = res.attributed_values.mean(axis=0)
    std = res.attributed_values.std(axis=0)
    rows = []
    for m, M, mu in _supercritical_pairs(res):
        lam = res.lambda_theory[m, mu]
        zz = z.get((m, mu))
        rows.append((f"{M}", f"{mu + 1}", f"{res.kappa[mu]:.3f}", f"{lam:.3f}",
                     f"{mean[m, mu]:.3f} ± {std[m, mu]:.3f}", f"{(mean[m, mu] - lam) / lam:+.2%}",
                     "—" if zz is None else f"{zz:+.2f}"))
    return TitledTable("Outlier locations: λ_out(κ, q) against the trial mean (± one trial's std)",
                       rows, ("M", "archetype", "κ", "λ_out", "measured", "relative error",
                              "error / std. error"))


def overlap_table(res: BBPResult) -> Any:
    """Per supercritical (M, archetype): γ(κ, q) against the per-eigenvector and the subspace
    squared overlaps (trial means)."""
    res = _check_result(res)
    ov = res.overlap.mean(axis=0)
    sub = res.subspace_overlap.mean(axis=0)
    rows = [(f"{M}", f"{mu + 1}", f"{res.kappa[mu]:.3f}", f"{res.gamma_theory[m, mu]:.4f}",
             f"{ov[m, mu]:.4f}", f"{sub[m, mu]:.4f}") for m, M, mu in _supercritical_pairs(res)]
    return TitledTable("Squared overlaps with the archetype: γ(κ, q) against the trial mean",
                       rows, ("M", "archetype", "κ", "γ(κ, q)", "per eigenvector ⟨v, u⟩²",
                              "signal subspace Γ"))


PAPER_REPORTS: dict[str, str] = {
    "outliers": "3 strong, no weak",
    "r2": "0.955–0.977",
    "gap_median": "0.0163",
    "gap_max": "0.0486",
}
"""What the caption of the paper's BBP validation figure reports: the 3 strong archetypes detected
and the weak ones not; the range of R² over 50 trials at N = 400; the median and the largest gap
between overlap and γ (the largest for the weakest archetype)."""


def paper_table(res: BBPResult) -> Any:
    """The paper's reported numbers (:data:`PAPER_REPORTS`) next to ours."""
    res = _check_result(res)
    sm = res.summary
    rows = [
        ("outliers: detected = predicted", PAPER_REPORTS["outliers"],
         f"{sm['detected_equals_predicted_fraction']:.0%} "
         f"(more: {sm['detected_more_than_predicted_fraction']:.0%})"),
        ("R² of the outlier locations", PAPER_REPORTS["r2"],
         f"{sm['r2_trial_mean']:.4f} ({sm['r2_per_trial_min']:.3f}–{sm['r2_per_trial_max']:.3f})"),
        ("median |overlap − γ|", PAPER_REPORTS["gap_median"],
         f"{sm['overlap_gap_median']:.4f} ({sm['subspace_gap_median']:.4f})"),
        ("largest |overlap − γ|", PAPER_REPORTS["gap_max"],
         f"{sm['overlap_gap_max']:.4f} ({sm['subspace_gap_max']:.4f})"),
    ]
    return TitledTable("Paper versus measured. Outliers: the paper detects the 3 strong archetypes "
                       "and none of the weak ones; we give the share of (trial, M) where detected = "
                       "predicted (and where more are detected). R²: the paper's range over 50 "
                       "trials at N = 400; ours on the trial means (range per trial). Overlap gaps "
                       "per eigenvector (on the signal subspace); the paper's largest is the "
                       "weakest archetype's", rows, ("quantity", "paper", "measured"))
