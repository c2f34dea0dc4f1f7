"""Experiment 3: exposure drift and the plasticity weight w_c(t).

Archetypes become dominant one after another (:func:`fedlam.data.sequential_drift`); the same
federation is run with the memory-driven limit w ≡ 0, the data-driven limit w ≡ 1, the paper's
entropy rule and our novelty rule (:mod:`fedlam.controller`). The paper's version is its figure
"adaptive" (panels A–E). Theory in {ref}`sec-controller` and {ref}`sec-controller-rule`; the
notebook is {ref}`sec-exp-drift`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlam._validation import check_pm1
from fedlam.experiments._common import (
    JsonResult,
    TitledTable,
    check_bool,
    check_choice,
    check_controllers,
    check_in_range,
    check_positive_int,
    check_quality,
    controller_label,
    seed_pairs,
)
from fedlam.experiments._common import (
    acceptance_table as _acceptance_table,
)
from fedlam.experiments._common import (
    check_acceptance_pair as _check_acceptance_pair,
)
from fedlam.experiments._common import (
    make_params as _make_params,
)
from fedlam.experiments._executor import map_seeds

__all__ = ["AcceptanceComparison", "DriftParams", "DriftResult", "PRESETS", "acceptance_comparison", "make_params",
           "run", "setting_table", "weight_curve", "weight_table", "spike_table", "magnetization_table", "paper_table",
           "acceptance_table", "duplicate_eigenvalues", "copy_operator", "flip_bits", "copy_uploads",
           "duplicate_table"]


@dataclass(frozen=True)
class DriftParams:
    """Parameters of the exposure-drift experiment.

    The paper states L = 3 clients and K = 3 archetypes for this figure and nothing else; every
    other value is our choice.

    Attributes
    ----------
    N : int
        Pattern dimension (our choice: 400 at the paper preset).
    K, L : int
        Archetypes and clients (paper: 3 and 3).
    T : int
        Rounds (our choice: 30, ten rounds per dominant archetype).
    M : int
        Examples per client per round (our choice: 200).
    r : float
        Channel quality of every client (our choice: 0.8).
    width : float or None
        Width in rounds of each archetype's bump in the schedule (None: ``T / (2K)``).
    controllers : tuple
        Weight rules compared: floats are constant weights (0 = memory-driven, 1 = data-driven),
        ``"paper"`` the paper's entropy rule, ``"novelty"`` ours.
    ema_alpha : float
        EMA coefficient of the adaptive rules (paper's eq. (4.20); our choice 0.5).
    known_r : bool
        Whether clients' controllers use the true r (False: estimated from their own spectrum).
    seeds : int
        Independent repetitions (our choice: 10 at the paper preset).
    acceptance : {"voted", "paper", "fresh", "refresh"}
        How the server admits patterns into its memory (``run_federation``'s option):
        ``"voted"`` (default, the library's default, :func:`fedlam.federation.default_acceptance`)
        only directions that every voter (the fresh parts of all uploads but one) certifies,
        ``"paper"`` whatever the factorization accepts. Derived in {ref}`sec-robust-fresh`.
    """

    N: int = 400
    K: int = 3
    L: int = 3
    T: int = 30
    M: int = 200
    r: float = 0.8
    width: float | None = None
    controllers: tuple = (0.0, 1.0, "paper", "novelty")
    ema_alpha: float = 0.5
    known_r: bool = False
    seeds: int = 10
    acceptance: str = "voted"

    def __post_init__(self) -> None:
        check_positive_int(self.N, "N", minimum=10)
        check_positive_int(self.K, "K", minimum=2)
        check_positive_int(self.L, "L")
        check_positive_int(self.T, "T", minimum=self.K)
        check_positive_int(self.M, "M")
        check_quality(self.r)
        if self.width is not None:
            check_in_range(self.width, "width", 0.0, None, low_open=True)
        check_controllers(self.controllers)
        check_in_range(self.ema_alpha, "ema_alpha", 0.0, 1.0)
        check_bool(self.known_r, "known_r")
        check_positive_int(self.seeds, "seeds")
        from fedlam.federation import ACCEPTANCES

        check_choice(self.acceptance, "acceptance", ACCEPTANCES)


PRESETS: dict[str, DriftParams] = {
    "book": DriftParams(N=200, T=18, M=100, seeds=3),
    "paper": DriftParams(),
}
PRESETS["full"] = PRESETS["paper"]  # the figure is the paper's, nothing to add


def make_params(preset: str = "book", **overrides: Any) -> DriftParams:
    """Preset ``"book"``, ``"paper"`` or ``"full"`` (see ``PRESETS``) with field overrides (``None`` keeps
    the preset value)."""
    return _make_params(DriftParams, PRESETS, preset, **overrides)


@dataclass(frozen=True)
class DriftResult(JsonResult):
    """Per-round arrays. Axes: (seed, controller, round, ...).

    Attributes
    ----------
    params : DriftParams
    pi : (T, K) the round-level mixture π_t (mean over clients of the schedule).
    exposure : (S, T, K) measured exposure e_μ(t) (identical across controllers: same data).
    magnetization : (S, C, T, K) optimal-matching magnetization.
    weights : (S, C, T, L) w_c(t) used by every client.
    k_hat : (S, C, T) server K̂; ``spurious`` : (S, C, T) accepted patterns matching no archetype.
    summary : dict of per-controller numbers (JSON-ready).
    """

    params: DriftParams
    pi: np.ndarray
    exposure: np.ndarray
    magnetization: np.ndarray
    weights: np.ndarray
    k_hat: np.ndarray
    spurious: np.ndarray
    summary: dict = field(default_factory=dict)


def _drift_seed(p: DriftParams, seed_xi: int, seed_fed: int) -> tuple:
    """One seed of :func:`run`: every controller on the same archetypes and client streams."""
    from fedlam import data, federation

    sched = data.sequential_drift(p.T, p.L, p.K, width=p.width)
    xi = data.random_archetypes(p.K, p.N, seed_xi)
    specs = [federation.ClientSpec(r=p.r, M=p.M, mixture=sched[:, c]) for c in range(p.L)]
    out = []
    for ctrl in p.controllers:
        h = federation.run_federation(
            xi, specs, p.T, seed_fed, controller=ctrl, ema_alpha=p.ema_alpha, known_r=p.known_r,
            acceptance=p.acceptance,
        )
        out.append((h.magnetization, h.weights, h.k_hat, h.spurious, h.exposure))
    return tuple(out)


def run(params: DriftParams, rng: Any, executor: Any = None) -> DriftResult:
    """Run every controller on the same drifting federation for each seed.

    Parameters
    ----------
    params : DriftParams
    rng : numpy.random.Generator or int
        Master seed. Seed ``s`` draws one pair of int seeds (archetypes, federation) shared by
        all controllers, so the controllers see identical data.
    executor : concurrent.futures.Executor, optional
        Where the seeds run (:func:`fedlam.experiments._executor.map_seeds`; None: serial, or
        the Dask cluster of ``FEDLAM_SCHEDULER``). The result does not depend on it.

    Returns
    -------
    DriftResult
    """
    if not isinstance(params, DriftParams):
        raise TypeError(f"params must be a DriftParams, got {type(params).__name__}")
    from fedlam import data

    p = params
    sched = data.sequential_drift(p.T, p.L, p.K, width=p.width)
    pi = sched.mean(axis=1)
    S, C = p.seeds, len(p.controllers)
    mag = np.zeros((S, C, p.T, p.K))
    w = np.zeros((S, C, p.T, p.L))
    kh = np.zeros((S, C, p.T), dtype=np.int64)
    sp = np.zeros((S, C, p.T), dtype=np.int64)
    expo = np.zeros((S, p.T, p.K))
    tasks = [(p, a, b) for a, b in seed_pairs(rng, S)]
    for s, per_ctrl in enumerate(map_seeds(_drift_seed, tasks, executor)):
        for ci, (m_, w_, k_, sp_, e_) in enumerate(per_ctrl):
            mag[s, ci], w[s, ci], kh[s, ci], sp[s, ci] = m_, w_, k_, sp_
            expo[s] = e_
    from fedlam import rmt

    shift = 0.5 * np.abs(np.diff(pi, axis=0)).sum(axis=1)  # total-variation change, rounds 1..T-1
    summary: dict = {
        "kappa_round0": [float(rmt.spike_strength(p.r, float(x), p.N)) for x in pi[0]],
        "sqrt_q_round0": float(np.sqrt(p.N / (p.L * p.M))),
    }
    for ci, ctrl in enumerate(p.controllers):
        m = mag[:, ci]
        wbar = w[:, ci, 1:].mean(axis=(0, 2))
        corr = (float(np.corrcoef(shift, wbar)[0, 1])
                if p.T > 2 and np.std(wbar) > 0 and np.std(shift) > 0 else float("nan"))
        summary[str(ctrl)] = {
            "weight_shift_correlation": corr,
            "final_magnetization_mean": m[:, -1].mean(axis=0).tolist(),
            "final_magnetization_std": m[:, -1].std(axis=0).tolist(),
            "final_min_archetype_mean": float(m[:, -1].min(axis=1).mean()),
            "time_avg_magnetization": float(m.mean()),
            "mean_weight_after_round0": float(np.nanmean(w[:, ci, 1:])),
            "final_spurious_mean": float(sp[:, ci, -1].mean()),
            "final_k_hat_mean": float(kh[:, ci, -1].mean()),
        }
    return DriftResult(params=p, pi=pi, exposure=expo, magnetization=mag, weights=w, k_hat=kh,
                       spurious=sp, summary=summary)


# ---------------------------------------------------------------------------------------------
# Tables the notebook displays ({ref}`sec-exp-drift`): one call per visible cell.


def _check_result(res: Any) -> DriftResult:
    if not isinstance(res, DriftResult):
        raise TypeError(f"res must be a DriftResult, got {type(res).__name__}")
    return res


def setting_table(params: DriftParams) -> Any:
    """The experiment's setting as a titled table (one row per parameter group)."""
    if not isinstance(params, DriftParams):
        raise TypeError(f"params must be a DriftParams, got {type(params).__name__}")
    p = params
    width = f"{p.T / (2 * p.K):g} (T / 2K)" if p.width is None else f"{p.width:g}"
    rows = [
        ("dimension N, archetypes K, clients L", f"{p.N}, {p.K}, {p.L}"),
        ("rounds T, batch M per client", f"{p.T}, {p.M}"),
        ("channel quality r", f"{p.r} ({'known' if p.known_r else 'estimated'} by the clients)"),
        ("schedule", f"archetypes dominate in turn, width {width}"),
        ("weight rules", ", ".join(controller_label(c) for c in p.controllers)),
        ("EMA coefficient, adaptive rules", f"{p.ema_alpha}"),
        ("server's acceptance", p.acceptance),
        ("seeds", f"{p.seeds}"),
    ]
    return TitledTable("Setting (the schedule's bump width in rounds)", rows, ("parameter", "value"))


def weight_curve(res: DriftResult, ctrl: Any) -> np.ndarray:
    """Mean over seeds and clients of the weight w_c(t) of one rule, per round (shape (T,))."""
    res = _check_result(res)
    if ctrl not in res.params.controllers:
        raise ValueError(f"ctrl must be one of {res.params.controllers}, got {ctrl!r}")
    i = res.params.controllers.index(ctrl)
    return res.weights[:, i].mean(axis=(0, 2))


def weight_table(res: DriftResult) -> Any:
    """The weight of every adaptive rule: round 1, its lowest value, its highest value from
    round 2 on, the last round and the mean (mean over seeds and clients; round 0 always uses
    w = 1), and the correlation of w(t) with the mixture change of the round."""
    res = _check_result(res)
    rows = []
    for c in res.params.controllers:
        if not isinstance(c, str):
            continue
        wb = weight_curve(res, c)
        tmin = 1 + int(np.argmin(wb[1:]))
        tmax = 2 + int(np.argmax(wb[2:]))
        s = res.summary[str(c)]
        rows.append((controller_label(c), f"{wb[1]:.2f}", f"{wb[tmin]:.2f} ({tmin})",
                     f"{wb[tmax]:.2f} ({tmax})", f"{wb[-1]:.2f}",
                     f"{s['mean_weight_after_round0']:.2f}",
                     f"{s['weight_shift_correlation']:+.2f}"))
    return TitledTable("Weight w_c(t) of the adaptive rules (mean over seeds and clients): in round "
                       "1, its lowest value (in round t), its highest from round 2 on (in round t), "
                       "in the last round, its mean from round 1 on, and the correlation of w(t) "
                       "with the mixture change of the round", rows,
                       ("rule", "t = 1", "lowest (t)", "highest (t)", "last", "mean", "corr."))


def spike_table(res: DriftResult) -> Any:
    """Spike strength of every archetype in the first and the last round against the BBP
    threshold sqrt(q), next to its final magnetization under the two fixed weights."""
    from fedlam import rmt
    res = _check_result(res)
    p, sm = res.params, res.summary
    k_last = [float(rmt.spike_strength(p.r, float(x), p.N)) for x in res.pi[-1]]
    finals = {c: res.magnetization[:, p.controllers.index(c), -1].mean(axis=0)
              for c in (0.0, 1.0) if c in p.controllers}
    rows = []
    for mu in range(p.K):
        rows.append((f"{mu + 1}", f"{res.pi[0, mu]:.3f}", f"{sm['kappa_round0'][mu]:.2f}",
                     f"{finals[0.0][mu]:.2f}" if 0.0 in finals else "-",
                     f"{res.pi[-1, mu]:.3f}", f"{k_last[mu]:.2f}",
                     f"{finals[1.0][mu]:.2f}" if 1.0 in finals else "-"))
    return TitledTable(f"Spike strength per archetype against sqrt(q) = {sm['sqrt_q_round0']:.2f}: "
                       f"share pi and spike strength kappa in round 0 and in the last round "
                       f"{p.T - 1}, and the final m under the fixed weights w = 0 and w = 1",
                       rows, ("archetype", "pi(0)", "kappa(0)", "m, w = 0", f"pi({p.T - 1})",
                              f"kappa({p.T - 1})", "m, w = 1"))


def magnetization_table(res: DriftResult) -> Any:
    """Final magnetization per archetype, time-averaged magnetization, final K-hat and spurious
    patterns of every rule (means over seeds)."""
    res = _check_result(res)
    rows = []
    for i, c in enumerate(res.params.controllers):
        mf = res.magnetization[:, i, -1].mean(axis=0)
        rows.append((controller_label(c), " ".join(f"{x:.2f}" for x in mf),
                     f"{res.magnetization[:, i].mean():.3f}", f"{res.k_hat[:, i, -1].mean():.2f}",
                     f"{res.spurious[:, i, -1].mean():.2f}"))
    return TitledTable("Magnetizations and patterns under each rule (mean over seeds)", rows,
                       ("rule", "final m per archetype", "time-averaged m", "final K-hat",
                        "final spurious"))


def paper_table(res: DriftResult) -> Any:
    """What the paper's figure reports for each rule against what this run measures."""
    res = _check_result(res)
    sm = res.summary
    reports = {0.0: "m2, m3 near 0", 1.0: "forgets", "paper": "all high; w peaks", "novelty": "-"}
    rows = []
    for c in res.params.controllers:
        s = sm[str(c)]
        fin = " ".join(f"{x:.2f}" for x in s["final_magnetization_mean"])
        adaptive = isinstance(c, str)
        rows.append((controller_label(c), reports.get(c, "-"), fin,
                     f"{s['mean_weight_after_round0']:.2f}" if adaptive else "-",
                     f"{s['final_spurious_mean']:.2f}" if adaptive else "-"))
    return TitledTable("Paper versus measured. The paper reports that w = 0 fails to acquire the "
                       "later archetypes (m2, m3 near 0), that under w = 1 the magnetizations track "
                       "the mixture (forgetting), and that its entropy rule keeps every "
                       "magnetization high with w peaking at the transitions; our novelty rule is "
                       "not in the paper. Measured: the final m per archetype, the mean weight from "
                       "round 1 on and the final spurious patterns of the adaptive rules",
                       rows, ("rule", "paper", "final m", "mean w", "spurious"))


def acceptance_table(res: DriftResult, default: DriftResult) -> Any:
    """The paper's acceptance beside the default acceptance, one row per rule and acceptance.

    Parameters
    ----------
    res : DriftResult
        A run with ``acceptance="paper"``.
    default : DriftResult
        The same setting and seeds (same ``rng``) with the default acceptance (``"voted"``) or
        another that certifies (``"fresh"``).
        The rules of one run must be among the other's; the table shows the rules of the run
        with fewer rules.

    Returns
    -------
    TitledTable
        Per rule, under each acceptance: the final spurious patterns (mean over seeds, the
        most in one seed), the final K-hat, the final m per archetype, the final lowest m over
        the archetypes and the time-averaged m (means over seeds). The certifying acceptances
        are derived in {ref}`sec-robust-fresh`.
    """
    res = _check_result(res)
    return _acceptance_table(res, default, DriftResult,
                             lambda m: " ".join(f"{x:.2f}" for x in m.mean(axis=0)),
                             "final m per archetype")


@dataclass(frozen=True)
class AcceptanceComparison:
    """The two acceptances on the same drift runs (:func:`acceptance_comparison`).

    Axes as in :class:`DriftResult`; ``rule`` runs over :attr:`rules`, the adaptive rules of
    the run with the paper's acceptance.

    Attributes
    ----------
    rules : tuple of str
    spurious_paper : (rule, S) final spurious patterns under the paper's acceptance.
    spurious_default : (rule, S, T) spurious patterns in every round under the default acceptance.
    min_final_m : lowest final magnetization over seeds, rules and archetypes (default).
    transient_seeds : seeds in which the default acceptance stored a spurious pattern in some round.
    delay : (rule, S) rounds by which the last archetype's entry (first round with m >= 0.9;
        NaN: never) comes later under the default acceptance than under the paper's.
    tavg_cost : the largest loss of time-averaged magnetization over the rules (paper - default).
    lost : (S, rule, T, K) bool, default: an archetype held once (m >= 0.9) and below 0.5 now.
    t_peak, w_peak_paper, w_peak_default : the round (from round 2 on) where the paper's rule's
        weight peaks under the paper's acceptance, that weight, and the rule's weight in that
        round under the default acceptance.
    """

    rules: tuple
    spurious_paper: np.ndarray
    spurious_default: np.ndarray
    min_final_m: float
    transient_seeds: int
    delay: np.ndarray
    tavg_cost: float
    lost: np.ndarray
    t_peak: int
    w_peak_paper: float
    w_peak_default: float

    @property
    def lost_seeds(self) -> int:
        """Seeds in which an archetype is lost again after its entry (default)."""
        return int(np.any(self.lost, axis=(1, 2, 3)).sum())

    @property
    def lost_rounds(self) -> int:
        """The most rounds one archetype spends lost in one seed and rule (default)."""
        return int(self.lost.sum(axis=2).max())


def _entry_round(mag: np.ndarray, k: int) -> np.ndarray:
    """(S,) first round archetype ``k`` reaches m >= 0.9 in ``mag`` (S, T, K); NaN: never."""
    m = mag[:, :, k]
    return np.where(m.max(axis=1) >= 0.9, np.argmax(m >= 0.9, axis=1), np.nan)


def acceptance_comparison(paper: DriftResult, default: DriftResult) -> AcceptanceComparison:
    """What the default acceptance changes on the drift experiment, measured on two runs.

    Parameters
    ----------
    paper : DriftResult
        A run with ``acceptance="paper"`` of the adaptive rules (``"paper"``, ``"novelty"``).
    default : DriftResult
        The same setting and seeds with the default acceptance (or ``"fresh"``), holding the same
        rules (and possibly constant weights besides).

    Returns
    -------
    AcceptanceComparison
        Derived on the page of the drift experiment ({ref}`sec-robust-fresh` for the rule).
    """
    p, pf = _check_acceptance_pair(paper, default, DriftResult, ("paper", "default"))
    rules = tuple(c for c in p.controllers if isinstance(c, str))
    if not rules or any(c not in pf.controllers for c in rules):
        raise ValueError(f"paper must run adaptive rules and default must hold them, got {p.controllers} "
                         f"and {pf.controllers}")
    idx = [(paper.params.controllers.index(c), default.params.controllers.index(c)) for c in rules]
    K, T = default.params.K, default.params.T
    sp_p = np.stack([paper.spurious[:, i, -1] for i, _ in idx])
    sp_f = np.stack([default.spurious[:, j] for _, j in idx])
    ad = [j for _, j in idx]
    delay = np.array([_entry_round(default.magnetization[:, j], K - 1) - _entry_round(paper.magnetization[:, i], K - 1)
                      for i, j in idx])
    cost = max(float(paper.magnetization[:, i].mean() - default.magnetization[:, j].mean()) for i, j in idx)
    mag = default.magnetization[:, ad]
    held = np.maximum.accumulate(mag >= 0.9, axis=2)
    w_pp = weight_curve(paper, "paper") if "paper" in rules else np.zeros(T)
    w_fp = weight_curve(default, "paper") if "paper" in rules else np.zeros(T)
    t0 = min(2, T - 1)
    t_pk = t0 + int(np.argmax(w_pp[t0:]))
    return AcceptanceComparison(
        rules=rules, spurious_paper=sp_p, spurious_default=sp_f,
        min_final_m=float(default.magnetization[:, ad, -1].min()),
        transient_seeds=int(np.any(sp_f > 0, axis=(0, 2)).sum()), delay=delay, tavg_cost=cost,
        lost=held & (mag < 0.5), t_peak=t_pk, w_peak_paper=float(w_pp[t_pk]), w_peak_default=float(w_fp[t_pk]))


# ---------------------------------------------------------------------------------------------
# Where the duplicates come from ({ref}`sec-exp-drift-duplicates`).


def duplicate_eigenvalues(m: float, alpha: float, beta: float, c: float = 0.0) -> tuple[float, float]:
    """The two eigenvalues of ``c I + alpha x x^T / N + beta y y^T / N`` in ``span{x, y}``.

    ``x`` and ``y`` are +-1 vectors with overlap ``m = x . y / N`` (e.g. an archetype and a
    stored copy of it a few bits off); in the orthonormal basis ``e_+- = (x +- y) /
    sqrt(2 N (1 +- m))`` the operator restricted to the span is ``c`` plus the 2 x 2 matrix
    ``[[(alpha + beta) a^2, (alpha - beta) a b], [(alpha - beta) a b, (alpha + beta) b^2]]``,
    ``a^2 = (1 + m) / 2``, ``b^2 = (1 - m) / 2``, so

    ``lambda_+- = c + ((alpha + beta) +- sqrt((alpha + beta)^2 - 4 alpha beta (1 - m^2))) / 2``.

    Derived in {ref}`sec-exp-drift-duplicates`.

    Parameters
    ----------
    m : float
        Overlap in [-1, 1].
    alpha, beta : float
        Non-negative weights of the two rank-one terms.
    c : float
        The multiple of the identity (the bulk level).

    Returns
    -------
    tuple of float
        ``(lambda_plus, lambda_minus)``, ``lambda_plus >= lambda_minus``.
    """
    m = check_in_range(m, "m", -1.0, 1.0)
    alpha = check_in_range(alpha, "alpha", 0.0, None)
    beta = check_in_range(beta, "beta", 0.0, None)
    c = check_in_range(c, "c", None, None)
    tr = alpha + beta
    disc = max(tr * tr - 4.0 * alpha * beta * (1.0 - m * m), 0.0)
    root = float(np.sqrt(disc))
    return c + 0.5 * (tr + root), c + 0.5 * (tr - root)


def _check_pm1(x: Any, name: str, N: int | None = None) -> np.ndarray:
    x = check_pm1(x, name, ndim=1)
    if N is not None and x.size != N:
        raise ValueError(f"{name} must have length {N}, got {x.size}")
    return x


def copy_operator(x: np.ndarray, y: np.ndarray, alpha: float, beta: float, c: float = 0.0) -> np.ndarray:
    """The operator ``c I + alpha x x^T / N + beta y y^T / N`` of :func:`duplicate_eigenvalues`.

    With ``alpha = w r^2 pi``, ``beta = 1 - w`` and ``c = w (1 - r^2) / N`` it is the expected
    blend of a client whose fresh batch holds the archetype ``x`` with share ``pi`` at quality
    ``r`` and whose broadcast holds the copy ``y`` (derived in {ref}`sec-exp-drift-duplicates`).
    Returns a float64 (N, N) array.
    """
    x = _check_pm1(x, "x")
    y = _check_pm1(y, "y", x.size)
    alpha = check_in_range(alpha, "alpha", 0.0, None)
    beta = check_in_range(beta, "beta", 0.0, None)
    c = check_in_range(c, "c", None, None)
    N = x.size
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    return c * np.eye(N) + (alpha / N) * np.outer(xf, xf) + (beta / N) * np.outer(yf, yf)


def flip_bits(x: np.ndarray, flips: int, rng: Any) -> np.ndarray:
    """A copy of the +-1 vector ``x`` with ``flips`` distinct entries negated (overlap
    ``1 - 2 flips / N``), chosen by ``rng`` (a ``numpy.random.Generator`` or int seed)."""
    from fedlam import hopfield

    x = _check_pm1(x, "x")
    flips = check_positive_int(flips, "flips")
    if flips > x.size:
        raise ValueError(f"flips must be at most N = {x.size}, got {flips}")
    return hopfield.corrupt(x, flips / x.size, rng)


def copy_uploads(archetypes: np.ndarray, stored: np.ndarray, w: float, r: float, M: int, L: int,
                 rng: Any) -> tuple[list, np.ndarray]:
    """One round's uploads when the server's memory holds ``stored``.

    Each of ``L`` clients draws ``M`` examples of ``archetypes`` (equal shares, quality ``r``,
    :func:`fedlam.data.sample_examples`) and uploads the blend ``w B_c + (1 - w) A`` with the
    broadcast ``A`` of ``stored`` (:func:`fedlam.operators.blend`).

    Parameters
    ----------
    archetypes : numpy.ndarray
        (K, N) +-1, what the clients' data hold.
    stored : numpy.ndarray
        (K', N) +-1, the server's memory (e.g. a copy of an archetype a few bits off).
    w : float
        The clients' weight in [0, 1].
    r : float
        Quality of the examples.
    M, L : int
        Examples per client, clients.
    rng : numpy.random.Generator or int

    Returns
    -------
    (list of fedlam.protocol.Upload, numpy.ndarray)
        The uploads and the broadcast ``A``.
    """
    from fedlam import data, operators
    from fedlam._validation import as_rng
    from fedlam.protocol import Upload

    if not isinstance(archetypes, np.ndarray) or archetypes.ndim != 2:
        raise ValueError(f"archetypes must be a (K, N) array, got {archetypes!r:.60}")
    if not isinstance(stored, np.ndarray) or stored.ndim != 2 or stored.shape[1] != archetypes.shape[1]:
        raise ValueError(f"stored must be a (K', N) array with N = {archetypes.shape[1]}, got "
                         f"{getattr(stored, 'shape', stored)!r:.60}")
    w = check_in_range(w, "w", 0.0, 1.0)
    r = check_quality(r)
    M = check_positive_int(M, "M")
    L = check_positive_int(L, "L")
    gen = as_rng(rng)
    A = operators.pattern_operator(stored)
    K = archetypes.shape[0]
    ups = []
    for _ in range(L):
        X, _ = data.sample_examples(archetypes, M, r, np.full(K, 1.0 / K), rng=gen)
        ups.append(Upload(operators.blend(operators.hebbian(X), A, w), M, w, 1.0 - r * r))
    return ups, A


def duplicate_table(archetypes: np.ndarray, copy: np.ndarray, w: float, r: float, M: int, L: int,
                    rng: Any, acceptances: tuple = ("paper", "voted", "fresh"),
                    copy_precision: float | None = None) -> tuple[Any, dict]:
    """Server steps with a stored copy of archetype 0 under the paper's, the default and the
    fresh acceptance (``acceptances``, each in :data:`fedlam.federation.ACCEPTANCES`).

    Round "copy stored": the memory holds ``copy`` (archetype 0 a few bits off) and the other
    archetypes; round "both stored": it holds archetype 0 as well; round "both stored, 1
    absent": the same memory, and the clients' data no longer hold archetype 0 (only with
    two archetypes or more). Each round's uploads come from :func:`copy_uploads` (the same
    uploads for both acceptances), and one ``federation.Server`` step runs under each
    acceptance.

    Parameters
    ----------
    archetypes : numpy.ndarray
        (K, N) +-1; archetype 0 is the one copied (the table calls it archetype 1).
    copy : numpy.ndarray
        (N,) +-1, the stored copy (e.g. :func:`flip_bits` of archetype 0).
    w, r, M, L, rng
        As for :func:`copy_uploads`.
    acceptances : tuple of str
        The acceptances compared.
    copy_precision : float or None
        With a value, one more row per round, ``"voted, precision"``: the default acceptance told
        the stored patterns and their precisions (``Server.round``'s ``stored``/``precision``),
        the copy's being ``copy_precision`` bits (it was found under that much noise) and the
        others' 0 (:func:`fedlam.refresh.merge_versions`).

    Returns
    -------
    (TitledTable, dict)
        The table (per round and acceptance: K-hat, the patterns stored within overlap 0.5 of
        archetype 0 and their overlaps with it and with the copy) and the same numbers as a
        dict keyed by ``(round, acceptance)``: ``k_hat`` and ``near`` ((n, 2) overlaps with
        archetype 0 and with the copy). Derived in {ref}`sec-exp-drift-duplicates`.
    """
    from fedlam import federation
    from fedlam._validation import as_rng
    from fedlam.federation import ACCEPTANCES

    if not isinstance(acceptances, tuple) or not acceptances:
        raise TypeError(f"acceptances must be a non-empty tuple of {ACCEPTANCES}, got {acceptances!r}")
    for i, a in enumerate(acceptances):
        check_choice(a, f"acceptances[{i}]", ACCEPTANCES)
    x = _check_pm1(archetypes[0] if isinstance(archetypes, np.ndarray) and archetypes.ndim == 2
                   else archetypes, "archetypes[0]")
    copy = _check_pm1(copy, "copy", x.size)
    gen = as_rng(rng)
    N = x.size
    both = np.vstack([archetypes[:1], copy[None], archetypes[1:]])
    rounds = {"copy stored": (np.vstack([copy[None], archetypes[1:]]), archetypes),
              "both stored": (both, archetypes)}
    if archetypes.shape[0] >= 2:
        rounds["both stored, 1 absent"] = (both, archetypes[1:])
    if copy_precision is not None:
        copy_precision = check_in_range(copy_precision, "copy_precision", 0.0, None)
    rows, out = [], {}
    labels = acceptances + (("voted, precision",) if copy_precision is not None else ())
    for name, (stored, held) in rounds.items():
        ups, A = copy_uploads(held, stored, w, r, M, L, gen)
        seed = int(gen.integers(2**62))
        for acc in labels:
            kw: dict = {}
            if acc == "voted, precision":
                is_copy = np.all(stored == copy[None], axis=1)
                kw = {"stored": stored, "precision": np.where(is_copy, float(copy_precision or 0.0), 0.0)}
            rr = federation.Server(acceptance=acc.split(",")[0]).round(
                ups, np.random.default_rng(seed), broadcast=A, broadcast_rank=stored.shape[0], **kw)
            P = rr.patterns.astype(np.float64)
            ov = P @ np.stack([x, copy]).T.astype(np.float64) / N
            near = ov[np.abs(ov[:, 0]) >= 0.5] * np.sign(ov[np.abs(ov[:, 0]) >= 0.5, :1])
            out[(name, acc)] = {"k_hat": int(rr.result.k_hat), "near": near}
            rows.append((name, acc, f"{rr.result.k_hat}", f"{len(near)}",
                         ", ".join(f"{a:.2f}/{b:.2f}" for a, b in near) or "-"))
    m = float(x.astype(np.float64) @ copy.astype(np.float64)) / N
    title = (f"A stored copy of archetype 1 (m = {m:.2f}): K-hat and the "
             "patterns stored near the archetype, with their overlaps archetype/copy")
    return TitledTable(title, rows, ("memory", "acceptance", "K-hat", "near", "overlaps")), out
