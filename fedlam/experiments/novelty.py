"""Experiment 4: archetypes emerging mid-training (novelty detection and integration).

The federation starts with ``K_old`` archetypes; ``K_new`` more are ramped in from round
``t_intro`` over ``ramp`` rounds (:func:`fedlam.data.novelty_ramp`). We record K̂(t), old and
new magnetizations, the relative spectral gap at the old boundary and the detection latency.
The paper's version is its figure "novelty_detection". Theory in {ref}`sec-bbp-threshold` and
{ref}`sec-controller-rule`; the notebook is {ref}`sec-exp-novelty`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlam.experiments._common import (
    JsonResult,
    TitledTable,
    check_bool,
    check_choice,
    check_controllers,
    check_in_range,
    check_nonneg_int,
    check_positive_int,
    check_quality,
    controller_label,
    seed_pairs,
)
from fedlam.experiments._common import (
    acceptance_table as _acceptance_table,
)
from fedlam.experiments._common import (
    make_params as _make_params,
)
from fedlam.experiments._executor import map_seeds
from fedlam.metrics import first_round

__all__ = ["NoveltyParams", "NoveltyResult", "PRESETS", "make_params", "run", "first_round",
           "setting_table", "phase_windows", "phase_gap", "detection_table", "gap_table",
           "weight_table", "paper_table", "acceptance_table"]


@dataclass(frozen=True)
class NoveltyParams:
    """Parameters of the novelty experiment.

    The paper's caption gives L = 3, N = 400, T = 24, r = 0.8, K_old = K_new = 3, t_intro = 12, a
    four-round ramp and 30 seeds; it says M_c^t is fixed but not its value (our choice: 200).

    Attributes
    ----------
    N, L, T : int
        Pattern dimension, clients, rounds.
    r : float
        Channel quality of every client.
    K_old, K_new : int
        Archetypes present from the start / introduced mid-training.
    t_intro : int
        First round (0-based) with new archetypes (must be < T).
    ramp : int
        Rounds of the linear ramp to equal shares.
    M : int
        Examples per client per round.
    controllers : tuple
        Weight rules compared (``"paper"``, ``"novelty"`` or constant floats).
    ema_alpha : float
        EMA coefficient of the adaptive rules.
    known_r : bool
        Whether controllers use the true r (False: estimated from the client's spectrum).
    dream_time : float
        Flow time of the sharpening used for the spectral-gap diagnostic (the LAM default, 2).
    seeds : int
        Independent repetitions.
    acceptance : {"voted", "paper", "fresh", "refresh"}
        How the server admits patterns into its memory (``run_federation``'s option):
        ``"voted"`` (default, the library's default, :func:`fedlam.federation.default_acceptance`)
        only directions that every voter (the fresh parts of all uploads but one) certifies,
        ``"paper"`` whatever the factorization accepts. Derived in {ref}`sec-robust-fresh`.
    """

    N: int = 400
    L: int = 3
    T: int = 24
    r: float = 0.8
    K_old: int = 3
    K_new: int = 3
    t_intro: int = 12
    ramp: int = 4
    M: int = 200
    controllers: tuple = ("paper", "novelty")
    ema_alpha: float = 0.5
    known_r: bool = False
    dream_time: float = 2.0
    seeds: int = 30
    acceptance: str = "voted"

    def __post_init__(self) -> None:
        check_positive_int(self.N, "N", minimum=10)
        check_positive_int(self.L, "L")
        check_positive_int(self.T, "T", minimum=2)
        check_quality(self.r)
        check_positive_int(self.K_old, "K_old")
        check_positive_int(self.K_new, "K_new")
        check_nonneg_int(self.t_intro, "t_intro")
        if self.t_intro >= self.T:
            raise ValueError(f"t_intro must be < T = {self.T}, got {self.t_intro}")
        check_positive_int(self.ramp, "ramp")
        check_positive_int(self.M, "M")
        check_controllers(self.controllers)
        check_in_range(self.ema_alpha, "ema_alpha", 0.0, 1.0)
        check_bool(self.known_r, "known_r")
        check_in_range(self.dream_time, "dream_time", 0.0, None, low_open=True)
        check_positive_int(self.seeds, "seeds")
        from fedlam.federation import ACCEPTANCES

        check_choice(self.acceptance, "acceptance", ACCEPTANCES)

    @property
    def K(self) -> int:
        """Total number of archetypes."""
        return self.K_old + self.K_new


PRESETS: dict[str, NoveltyParams] = {
    "book": NoveltyParams(N=200, T=16, t_intro=7, ramp=3, M=100, seeds=3),
    "paper": NoveltyParams(),
}
PRESETS["full"] = PRESETS["paper"]  # the figure is the paper's, nothing to add


def make_params(preset: str = "book", **overrides: Any) -> NoveltyParams:
    """Preset ``"book"``, ``"paper"`` or ``"full"`` (see ``PRESETS``) with field overrides (``None`` keeps
    the preset value)."""
    return _make_params(NoveltyParams, PRESETS, preset, **overrides)


@dataclass(frozen=True)
class NoveltyResult(JsonResult):
    """Per-round arrays. Axes: (seed, controller, round, ...).

    Attributes
    ----------
    params : NoveltyParams
    pi : (T, K) round-level mixture.
    k_hat : (S, C, T) server K̂.
    magnetization : (S, C, T, K) (old archetypes first, then new).
    weights : (S, C, T, L).
    gap_old : (S, C, T) relative gap (λ_Kold − λ_Kold+1)/λ_Kold of the sharpened server spectrum.
    spurious : (S, C, T).
    latency_k : (S, C) rounds from t_intro until K̂ ≥ K_old + K_new (NaN: never).
    latency_m : (S, C) rounds from t_intro until every new archetype has m ≥ 0.8 (NaN: never).
    old_dip : (S, C) mean old magnetization just before t_intro minus its minimum afterwards.
    """

    params: NoveltyParams
    pi: np.ndarray
    k_hat: np.ndarray
    magnetization: np.ndarray
    weights: np.ndarray
    gap_old: np.ndarray
    spurious: np.ndarray
    latency_k: np.ndarray
    latency_m: np.ndarray
    old_dip: np.ndarray
    summary: dict = field(default_factory=dict)


def _novelty_seed(p: NoveltyParams, seed_xi: int, seed_fed: int) -> list:
    """One seed of :func:`run`: per controller (k_hat, magnetization, weights, gap, spurious,
    latency_k, latency_m, dip)."""
    from fedlam import data, federation, spectral

    K, Ko, T = p.K, p.K_old, p.T
    sched = data.novelty_ramp(p.T, p.L, p.K_old, p.K_new, p.t_intro, p.ramp)
    xi = data.random_archetypes(K, p.N, seed_xi)
    specs = [federation.ClientSpec(r=p.r, M=p.M, mixture=sched[:, c]) for c in range(p.L)]
    out = []
    for ctrl in p.controllers:
        h = federation.run_federation(
            xi, specs, T, seed_fed, controller=ctrl, ema_alpha=p.ema_alpha, known_r=p.known_r,
            n_top=max(10, K + 2), acceptance=p.acceptance,
        )
        top = spectral.dream_eigenvalues(np.nan_to_num(h.top_eigenvalues, nan=0.0), p.dream_time)
        lam_k, lam_k1 = top[:, Ko - 1], top[:, Ko]
        with np.errstate(invalid="ignore", divide="ignore"):
            gap = np.where(lam_k > 0, (lam_k - lam_k1) / lam_k, np.nan)
        old = h.magnetization[:, :Ko].mean(axis=1)
        dip = old[p.t_intro - 1] - old[p.t_intro:].min() if p.t_intro > 0 else np.nan
        out.append((h.k_hat, h.magnetization, h.weights, gap, h.spurious,
                    first_round(h.k_hat >= K, p.t_intro),
                    first_round(h.magnetization[:, Ko:].min(axis=1) >= 0.8, p.t_intro), dip))
    return out


def run(params: NoveltyParams, rng: Any, executor: Any = None) -> NoveltyResult:
    """Run the novelty federation for every controller and seed (paired data across controllers).

    ``executor`` (a ``concurrent.futures`` executor, optional) runs the seeds
    (:func:`fedlam.experiments._executor.map_seeds`); the result does not depend on it.
    """
    if not isinstance(params, NoveltyParams):
        raise TypeError(f"params must be a NoveltyParams, got {type(params).__name__}")
    from fedlam import data

    p = params
    K, Ko = p.K, p.K_old
    sched = data.novelty_ramp(p.T, p.L, p.K_old, p.K_new, p.t_intro, p.ramp)
    S, C, T = p.seeds, len(p.controllers), p.T
    kh = np.zeros((S, C, T), dtype=np.int64)
    mag = np.zeros((S, C, T, K))
    w = np.zeros((S, C, T, p.L))
    gap = np.full((S, C, T), np.nan)
    sp = np.zeros((S, C, T), dtype=np.int64)
    lat_k = np.full((S, C), np.nan)
    lat_m = np.full((S, C), np.nan)
    dip = np.full((S, C), np.nan)
    tasks = [(p, a, b) for a, b in seed_pairs(rng, S)]
    for s, per_ctrl in enumerate(map_seeds(_novelty_seed, tasks, executor)):
        for ci, row in enumerate(per_ctrl):
            kh[s, ci], mag[s, ci], w[s, ci], gap[s, ci], sp[s, ci] = row[:5]
            lat_k[s, ci], lat_m[s, ci], dip[s, ci] = row[5:]
    from fedlam import rmt

    pi = sched.mean(axis=1)
    summary: dict = {
        "kappa_new_at_intro": float(rmt.spike_strength(p.r, float(pi[p.t_intro, Ko]), p.N)),
        "sqrt_q": float(np.sqrt(p.N / (p.L * p.M))),
    }
    for ci, ctrl in enumerate(p.controllers):
        summary[str(ctrl)] = {
            "k_hat_before_intro_mean": float(kh[:, ci, max(p.t_intro - 1, 0)].mean()),
            "k_hat_final_mean": float(kh[:, ci, -1].mean()),
            "latency_k_median": float(np.nanmedian(lat_k[:, ci])) if np.isfinite(lat_k[:, ci]).any() else None,
            "latency_k_detected_fraction": float(np.isfinite(lat_k[:, ci]).mean()),
            "latency_m_median": float(np.nanmedian(lat_m[:, ci])) if np.isfinite(lat_m[:, ci]).any() else None,
            "latency_m_acquired_fraction": float(np.isfinite(lat_m[:, ci]).mean()),
            "old_dip_mean": float(np.nanmean(dip[:, ci])),
            "final_old_magnetization_mean": float(mag[:, ci, -1, :Ko].mean()),
            "final_new_magnetization_mean": float(mag[:, ci, -1, Ko:].mean()),
            "final_spurious_mean": float(sp[:, ci, -1].mean()),
        }
    return NoveltyResult(params=p, pi=pi, k_hat=kh, magnetization=mag, weights=w,
                         gap_old=gap, spurious=sp, latency_k=lat_k, latency_m=lat_m, old_dip=dip,
                         summary=summary)


# ---------------------------------------------------------------------------------------------
# Tables the notebook displays ({ref}`sec-exp-novelty`): one call per visible cell.


def _check_result(res: Any) -> NoveltyResult:
    if not isinstance(res, NoveltyResult):
        raise TypeError(f"res must be a NoveltyResult, got {type(res).__name__}")
    return res


def setting_table(params: NoveltyParams) -> Any:
    """The experiment's setting as a titled table (one row per parameter group)."""
    if not isinstance(params, NoveltyParams):
        raise TypeError(f"params must be a NoveltyParams, got {type(params).__name__}")
    p = params
    rows = [
        ("dimension N, clients L", f"{p.N}, {p.L}"),
        ("archetypes: old, new", f"{p.K_old}, {p.K_new}"),
        ("rounds T, examples per client and round M", f"{p.T}, {p.M}"),
        ("new archetypes enter at round t_intro, ramp", f"{p.t_intro}, {p.ramp} rounds"),
        ("channel quality r", f"{p.r} ({'known' if p.known_r else 'estimated'} by the clients)"),
        ("weight rules (EMA coefficient)",
         ", ".join(controller_label(c) for c in p.controllers) + f" ({p.ema_alpha})"),
        ("dreaming time of the gap", f"{p.dream_time}"),
        ("server's acceptance", p.acceptance),
        ("seeds", f"{p.seeds}"),
    ]
    return TitledTable("Setting", rows, ("parameter", "value"))


def phase_windows(params: NoveltyParams) -> tuple[slice, slice, slice]:
    """Rounds before the introduction (the last three), during the ramp, and after it (from two
    rounds after the ramp's end, at least the last round)."""
    if not isinstance(params, NoveltyParams):
        raise TypeError(f"params must be a NoveltyParams, got {type(params).__name__}")
    p = params
    before = slice(max(p.t_intro - 3, 0), p.t_intro)
    during = slice(p.t_intro, p.t_intro + p.ramp)
    after = slice(min(p.t_intro + p.ramp + 2, p.T - 1), p.T)
    return before, during, after


def phase_gap(res: NoveltyResult, ctrl: Any = None) -> tuple[float, float, float]:
    """Mean relative gap at the old boundary before, during and after the ramp
    (:func:`phase_windows`), for one rule or (``ctrl=None``) all rules."""
    res = _check_result(res)
    g = res.gap_old
    if ctrl is not None:
        if ctrl not in res.params.controllers:
            raise ValueError(f"ctrl must be one of {res.params.controllers}, got {ctrl!r}")
        g = g[:, [res.params.controllers.index(ctrl)]]
    return tuple(float(np.nanmean(g[:, :, w])) for w in phase_windows(res.params))  # type: ignore[return-value]


def detection_table(res: NoveltyResult) -> Any:
    """K-hat before and after, detection and acquisition latencies, the old archetypes' dip,
    final magnetizations and spurious patterns of every rule (over seeds)."""
    res = _check_result(res)
    rows = []
    for c in res.params.controllers:
        s = res.summary[str(c)]

        def lat(key: str, frac: str, s: dict = s) -> str:
            v = s[key]
            return "never" if v is None else f"{v:.0f} ({100 * s[frac]:.0f}%)"

        rows.append((controller_label(c),
                     f"{s['k_hat_before_intro_mean']:.1f} -> {s['k_hat_final_mean']:.1f}",
                     lat("latency_k_median", "latency_k_detected_fraction"),
                     lat("latency_m_median", "latency_m_acquired_fraction"),
                     f"{s['old_dip_mean']:.3f}",
                     f"{s['final_old_magnetization_mean']:.2f}/"
                     f"{s['final_new_magnetization_mean']:.2f}",
                     f"{s['final_spurious_mean']:.2f}"))
    return TitledTable("Detection and acquisition of the new archetypes: K-hat before the "
                       "introduction -> final; median detection and acquisition latency in rounds "
                       "(share of seeds that get there); dip of the old archetypes; final m of the "
                       "old/new archetypes; final spurious patterns (means over seeds)", rows,
                       ("rule", "K-hat", "detection", "acquisition", "old dip", "final m",
                        "spurious"))


def gap_table(res: NoveltyResult) -> Any:
    """Mean relative gap at the old boundary before, during and after the ramp, per rule."""
    res = _check_result(res)
    b, d, a = phase_windows(res.params)
    head = (f"before (rounds {b.start}-{b.stop - 1})", f"ramp (rounds {d.start}-{d.stop - 1})",
            f"after (rounds {a.start}-{res.params.T - 1})")
    rows = [(controller_label(c), *(f"{x:.3f}" for x in phase_gap(res, c))) for c in res.params.controllers]
    return TitledTable("Relative gap at the old boundary (mean over seeds and rounds)", rows,
                       ("rule", *head))


def weight_table(res: NoveltyResult) -> Any:
    """Mean weight w_c(t) of every rule in the round before the introduction, in the ramp's
    rounds and in the last round (mean over seeds and clients)."""
    res = _check_result(res)
    p = res.params
    rounds = [p.t_intro - 1, *range(p.t_intro, min(p.t_intro + p.ramp, p.T)), p.T - 1]
    rows = []
    for i, c in enumerate(p.controllers):
        wb = res.weights[:, i].mean(axis=(0, 2))
        rows.append((controller_label(c), *(f"{wb[t]:.2f}" for t in rounds)))
    return TitledTable("Weight w_c(t) around the introduction (mean over seeds and clients)", rows,
                       ("rule", *(f"round {t}" for t in rounds)))


def paper_table(res: NoveltyResult) -> Any:
    """What the paper's novelty figure reports against what this run measures.

    The paper's figure shows K-hat(t) going from 3 to 6 within a few rounds of t_intro, the new
    archetypes acquired during or after the ramp while the old ones dip mildly and recover, and
    the relative gap at the old boundary collapsing during the ramp and stabilizing after.
    """
    res = _check_result(res)
    rows = []
    for c in res.params.controllers:
        s = res.summary[str(c)]
        lk = "never" if s["latency_k_median"] is None else f"{s['latency_k_median']:.0f}"
        name = "paper's rule" if c == "paper" else ("our rule" if c == "novelty" else controller_label(c))
        rows.append((f"K-hat, {name}", "3 -> 6",
                     f"{s['k_hat_before_intro_mean']:.1f} -> {s['k_hat_final_mean']:.1f}"))
        rows.append((f"latency, {name}", "a few rounds", lk))
        rows.append((f"final m old/new, {name}", "recover/acquired",
                     f"{s['final_old_magnetization_mean']:.2f}/{s['final_new_magnetization_mean']:.2f}"))
        rows.append((f"old dip, {name}", "mild", f"{s['old_dip_mean']:.2f}"))
    b, d, a = phase_gap(res)
    rows.append(("gap before/ramp/after", "collapses, stable", f"{b:.2f}/{d:.2f}/{a:.2f}"))
    return TitledTable("Paper versus measured: K-hat before the introduction -> final and the median "
                       "detection latency in rounds; final m of the old/new archetypes and the old "
                       "ones' dip; relative gap at the old boundary before, during and after the "
                       "ramp (all rules). Paper's rule: the entropy rule; our rule: the novelty rule",
                       rows, ("quantity", "paper", "measured"))


def acceptance_table(res: NoveltyResult, default: NoveltyResult) -> Any:
    """The paper's acceptance beside the default acceptance, one row per rule and acceptance.

    Parameters
    ----------
    res : NoveltyResult
        A run with ``acceptance="paper"``.
    default : NoveltyResult
        The same setting and seeds (same ``rng``) with the default acceptance (``"voted"``) or
        another that certifies (``"fresh"``).
        The rules of one run must be among the other's; the table shows the rules of the run
        with fewer rules.

    Returns
    -------
    TitledTable
        Per rule, under each acceptance: the final spurious patterns (mean over seeds, the
        most in one seed), the final K-hat, the final m of the old/new archetypes, the final
        lowest m over the archetypes and the time-averaged m (means over seeds). The voted and
        the fresh acceptance are derived in {ref}`sec-robust-fresh`.
    """
    res = _check_result(res)
    Ko = res.params.K_old
    return _acceptance_table(res, default, NoveltyResult,
                             lambda m: f"{m[:, :Ko].mean():.2f}/{m[:, Ko:].mean():.2f}",
                             "final m of the old/new archetypes")
