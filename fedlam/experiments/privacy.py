"""Experiment: the privacy-utility frontier of differentially private operator uploads.

``L`` clients each hold ``M`` examples of ``K`` archetypes (quality ``r``, equal exposures) and
upload their Hebbian operator through :func:`fedlam.privacy.gaussian_mechanism` at budget
``(epsilon, delta)`` over ``rounds`` uploads; the server factorizes the mean with the noise-aware
K-hat (:func:`fedlam.privacy.factorize_noised`). For every ``epsilon`` of a log grid we record the archetypes recovered
(magnetization, K-hat, spurious patterns) next to the predicted threshold
:func:`fedlam.privacy.epsilon_threshold`, across ``L`` and ``M``; and what the
example-reconstruction attack (:func:`fedlam.privacy.attack`) recovers from one client's noised
small-batch upload at the same budgets. :func:`attack_curve` measures the attack without noise
against ``M/N`` and ``r``. Theory in {ref}`sec-privacy-leak`, {ref}`sec-privacy-dp` and
{ref}`sec-privacy-frontier`; the notebook is {ref}`sec-exp-privacy`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlam.experiments._common import (
    JsonResult,
    TitledTable,
    check_float_tuple,
    check_in_range,
    check_int_tuple,
    check_positive_int,
    check_quality,
    seed_pairs,
)
from fedlam.experiments._common import (
    make_params as _make_params,
)

__all__ = ["PrivacyParams", "PrivacyResult", "PRESETS", "make_params", "run", "server_factorize",
           "AttackCurve", "attack_curve", "ClientFrontier", "client_frontier", "setting_table",
           "threshold_table", "attack_table", "frontier_table", "attack_curve_table"]


@dataclass(frozen=True)
class PrivacyParams:
    """Parameters of the privacy-utility frontier experiment.

    The paper's own setting (its attacker figure): N = 1000, K = 3, M = 800 examples per client
    per round, r = 0.9; it proposes DP noise as future work and gives no budget, so the
    ``epsilon`` grid, ``delta = 1e-5`` and the cases below are our choices.

    Attributes
    ----------
    N, K : int
        Dimension and number of archetypes.
    r : float
        Channel quality (< 1).
    Ls : tuple of int
        Numbers of clients compared.
    Ms : tuple of int
        Examples per client per round compared.
    epsilons : tuple of float
        Per-upload budgets (log grid), each > 0.
    delta : float
        In (0, 1).
    rounds : int
        Uploads in which one example is used (1: a fresh batch every round).
    attack_Ms : tuple of int
        Small batch sizes whose noised single uploads are attacked.
    attack_epsilons : tuple of float
        Budgets of the attacked uploads (a log grid reaching far beyond useful budgets: the
        span of a batch drowns long before, see :func:`fedlam.privacy.example_critical_noise`).
    attack_restarts : int
        Restarts per round of the attack.
    seeds : int
        Independent repetitions.
    """

    N: int = 1000
    K: int = 3
    r: float = 0.9
    Ls: tuple = (1, 4)
    Ms: tuple = (200, 800)
    epsilons: tuple = (0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0, 10.0)
    delta: float = 1e-5
    rounds: int = 1
    attack_Ms: tuple = (10, 40)
    attack_epsilons: tuple = (1.0, 10.0, 100.0, 1e3, 1e4, 3e4, 1e5, 3e5, 1e6)
    attack_restarts: int = 256
    seeds: int = 4

    def __post_init__(self) -> None:
        check_positive_int(self.N, "N", minimum=10)
        check_positive_int(self.K, "K")
        check_quality(self.r, "r")
        if self.r >= 1.0:
            raise ValueError(f"r must be < 1 (noiseless examples have no bulk), got {self.r!r}")
        check_int_tuple(self.Ls, "Ls")
        check_int_tuple(self.Ms, "Ms")
        eps = check_float_tuple(self.epsilons, "epsilons", 0.0, None, low_open=True)
        if any(b <= a for a, b in itertools.pairwise(eps)):
            raise ValueError(f"epsilons must be strictly increasing, got {self.epsilons!r}")
        check_in_range(self.delta, "delta", 0.0, 1.0, low_open=True, high_open=True)
        check_positive_int(self.rounds, "rounds")
        am = check_int_tuple(self.attack_Ms, "attack_Ms", nonempty=False)
        if any(m > self.N for m in am):
            raise ValueError(f"attack_Ms must be <= N = {self.N}, got {self.attack_Ms!r}")
        aeps = check_float_tuple(self.attack_epsilons, "attack_epsilons", 0.0, None, low_open=True)
        if any(b <= a for a, b in itertools.pairwise(aeps)):
            raise ValueError(f"attack_epsilons must be strictly increasing, got {self.attack_epsilons!r}")
        check_positive_int(self.attack_restarts, "attack_restarts")
        check_positive_int(self.seeds, "seeds")


PRESETS: dict[str, PrivacyParams] = {
    "book": PrivacyParams(N=400, Ms=(100, 400), epsilons=(0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0,
                                                          5.0, 10.0),
                          attack_Ms=(10, 20), attack_restarts=128, seeds=2),
    "full": PrivacyParams(),
}
#: not an experiment of the paper: ``python -m fedlam.reproduce --preset paper`` leaves it out unless
#: named with ``--only``; its ``"paper"`` preset is its ``"full"`` one (the paper's N, M and r)
PRESETS["paper"] = PRESETS["full"]


def make_params(preset: str = "book", **overrides: Any) -> PrivacyParams:
    """Preset ``"book"``, ``"paper"`` or ``"full"`` (see ``PRESETS``) with field overrides (``None`` keeps
    the preset value)."""
    return _make_params(PrivacyParams, PRESETS, preset, **overrides)


def server_factorize(J: np.ndarray, rng: Any, *, r: float, L: int, M: int, noise_sigma: float) -> Any:
    """The server's noise-aware factorization of the mean of ``L`` noised uploads of ``M`` examples.

    Each client reports its batch size and bulk variance ``1 - r^2`` (the per-client scalars of
    the protocol); the components are ``(omega (1 - r^2)/N, N/M)`` with ``omega = 1/L``, and
    :func:`fedlam.privacy.factorize_noised` counts K-hat against their MP ⊞ semicircle edge. (The
    experiment keeps this bridge even once ``fedlam.factorize(..., noise_sigma=)`` exists, so that
    its committed outputs do not depend on when that lands; the tests check the latter.)
    """
    from fedlam import khat, privacy

    N = J.shape[0]
    comps = [khat.Component((1.0 - r * r) / (N * L), N / M) for _ in range(L)]
    return privacy.factorize_noised(J, rng, components=comps, noise_sigma=noise_sigma)


@dataclass(frozen=True)
class PrivacyResult(JsonResult):
    """Arrays of the frontier. Axes: (seed, L, M, epsilon, ...).

    Attributes
    ----------
    params : PrivacyParams
    eps_threshold : (nL, nM) predicted :func:`fedlam.privacy.epsilon_threshold` (pi = 1/K).
    sigma : (nM, E) per-client entry std of the noise.
    magnetization : (S, nL, nM, E, K) matched magnetizations (0 for an unrecovered archetype).
    k_hat, spurious, n_patterns : (S, nL, nM, E).
    attack_recovered : (S, nA, EA) fraction of a noised small batch recovered exactly (EA budgets
        ``attack_epsilons``).
    attack_clean : (S, nA) the same without noise.
    attack_found : (S, nA, EA) number of vectors the attack returned (true or not).
    eps_example : (nA,) budget whose noise equals :func:`fedlam.privacy.example_critical_noise`
        (the span of the batch drowns below it).
    """

    params: PrivacyParams
    eps_threshold: np.ndarray
    sigma: np.ndarray
    magnetization: np.ndarray
    k_hat: np.ndarray
    spurious: np.ndarray
    n_patterns: np.ndarray
    attack_recovered: np.ndarray
    attack_clean: np.ndarray
    attack_found: np.ndarray
    eps_example: np.ndarray
    summary: dict = field(default_factory=dict)


def _recovered(found: np.ndarray, ex: np.ndarray) -> int:
    if found.shape[0] == 0:
        return 0
    ov = np.abs(found.astype(np.int64) @ ex.T.astype(np.int64))
    return int((ov == ex.shape[1]).any(axis=0).sum())


def _run_seed(p: PrivacyParams, seed_xi: int, seed_run: int) -> dict:
    """Every (L, M, epsilon) federation and every attack of one seed pair (one task of :func:`run`).

    Every random draw comes from ``seed_xi`` and ``seed_run``, so the result does not depend on
    where the task runs.
    """
    from fedlam import data, metrics, operators, privacy

    nL, nM, E, K, nA = len(p.Ls), len(p.Ms), len(p.epsilons), p.K, len(p.attack_Ms)
    EA = len(p.attack_epsilons)
    mix = np.full(K, 1.0 / K)
    out = {"mag": np.zeros((nL, nM, E, K)), "kh": np.zeros((nL, nM, E), dtype=np.int64),
           "sp": np.zeros((nL, nM, E), dtype=np.int64), "npat": np.zeros((nL, nM, E), dtype=np.int64),
           "arec": np.zeros((nA, EA)), "afound": np.zeros((nA, EA), dtype=np.int64), "aclean": np.zeros(nA)}
    xi = data.random_archetypes(K, p.N, seed_xi)
    streams = np.random.default_rng(seed_run).spawn(4)
    Lmax, Mmax = max(p.Ls), max(p.Ms)
    # the same client batches for every (L, M): client c's first M examples
    batches = [data.sample_examples(xi, Mmax, p.r, mix, g)[0]
               for g in streams[0].spawn(Lmax)]
    for mi, M in enumerate(p.Ms):
        ops = [operators.hebbian(b[:M]) for b in batches]
        for ei, eps in enumerate(p.epsilons):
            noise_rngs = np.random.default_rng([seed_run, mi, ei]).spawn(Lmax)
            noised = [privacy.gaussian_mechanism(J, M, eps, p.delta, g, p.rounds)
                      for J, g in zip(ops, noise_rngs, strict=True)]
            sig = privacy.noise_scale(M, eps, p.delta, p.rounds, N=p.N)
            for li, L in enumerate(p.Ls):
                Jm = np.mean(noised[:L], axis=0)
                sm = float(np.sqrt(privacy.mean_noise_var([sig] * L)))
                res = server_factorize(Jm, np.random.default_rng([seed_run, mi, ei, li, 1]),
                                       r=p.r, L=L, M=M, noise_sigma=sm)
                pats = res.patterns
                out["kh"][li, mi, ei] = res.k_hat
                out["npat"][li, mi, ei] = pats.shape[0]
                out["mag"][li, mi, ei] = metrics.magnetization(pats, xi)
                out["sp"][li, mi, ei] = metrics.spurious_count(pats, xi) if pats.shape[0] else 0
    for ai, Ma in enumerate(p.attack_Ms):
        ex = data.sample_examples(xi, Ma, p.r, mix, streams[1].spawn(nA)[ai])[0]
        J = operators.hebbian(ex)
        res = privacy.attack(J, Ma, np.random.default_rng([seed_run, ai, 99]), restarts=p.attack_restarts)
        out["aclean"][ai] = _recovered(res.examples, ex) / Ma
        for ei, eps in enumerate(p.attack_epsilons):
            Jn = privacy.gaussian_mechanism(J, Ma, eps, p.delta, np.random.default_rng([seed_run, ai, ei, 7]),
                                            p.rounds)
            sa = privacy.noise_scale(Ma, eps, p.delta, p.rounds, N=p.N)
            res = privacy.attack(Jn, Ma, np.random.default_rng([seed_run, ai, ei, 8]),
                                 restarts=p.attack_restarts, noise_sigma=sa, patience=1)
            out["arec"][ai, ei] = _recovered(res.examples, ex) / Ma
            out["afound"][ai, ei] = res.examples.shape[0]
    return out


def run(params: PrivacyParams, rng: Any, executor: Any = None) -> PrivacyResult:
    """Run the frontier (every L, M, epsilon on the same archetypes per seed) and the attacks.

    ``executor`` (a :class:`concurrent.futures.Executor`, e.g. a Dask client's executor; None:
    serial, or the cluster named by ``FEDLAM_SCHEDULER``) runs the seeds as independent tasks
    (:func:`fedlam.experiments._executor.map_seeds`); the seeds are drawn from ``rng`` up front, so
    the result does not depend on the executor.
    """
    if not isinstance(params, PrivacyParams):
        raise TypeError(f"params must be a PrivacyParams, got {type(params).__name__}")
    from fedlam import privacy
    from fedlam.experiments._executor import map_seeds

    p = params
    K = p.K
    thr = np.array([[privacy.epsilon_threshold(p.r, 1.0 / K, p.N, M, p.delta, L=L, rounds=p.rounds)
                     for M in p.Ms] for L in p.Ls])
    sig = np.array([[privacy.noise_scale(M, e, p.delta, p.rounds, N=p.N) for e in p.epsilons] for M in p.Ms])
    eex = np.array([privacy.privacy_window(p.r, 1.0 / K, p.N, Ma, p.delta, rounds=p.rounds).epsilon_example
                    for Ma in p.attack_Ms])
    outs = map_seeds(_run_seed, [(p, a, b) for a, b in seed_pairs(rng, p.seeds)], executor)
    st = {k: np.stack([o[k] for o in outs]) for k in outs[0]}
    mag, kh, sp, npat = st["mag"], st["kh"], st["sp"], st["npat"]
    arec, afound, aclean = st["arec"], st["afound"], st["aclean"]
    summary: dict = {}
    for li, L in enumerate(p.Ls):
        for mi, M in enumerate(p.Ms):
            ok = (mag[:, li, mi].min(axis=-1) >= 0.9) & (sp[:, li, mi] == 0)
            good = [float(e) for ei, e in enumerate(p.epsilons) if ok[:, ei].all()]
            summary[f"L={L}/M={M}"] = {
                "eps_threshold": float(thr[li, mi]),
                "smallest_eps_all_seeds_all_archetypes_m>=0.9": good[0] if good else None,
                "ratio_to_threshold": (good[0] / float(thr[li, mi])) if good else None,
            }
    summary["attack_max_recovered_fraction_at_eps<=10"] = float(
        arec[:, :, np.asarray(p.attack_epsilons) <= 10].max(initial=0.0)) if arec.size else 0.0
    for ai, Ma in enumerate(p.attack_Ms):
        full = [float(e) for ei, e in enumerate(p.attack_epsilons) if np.all(arec[:, ai, ei] == 1.0)]
        summary[f"attack_M={Ma}"] = {"eps_example": float(eex[ai]),
                                     "smallest_eps_whole_batch_all_seeds": full[0] if full else None}
    summary["attack_clean_mean"] = float(aclean.mean()) if aclean.size else 0.0
    return PrivacyResult(params=p, eps_threshold=thr, sigma=sig, magnetization=mag, k_hat=kh, spurious=sp,
                         n_patterns=npat, attack_recovered=arec, attack_clean=aclean, attack_found=afound,
                         eps_example=eex, summary=summary)


@dataclass(frozen=True)
class AttackCurve(JsonResult):
    """Fraction of a batch the attack recovers, against ``M/N`` and ``r`` (no noise).

    Attributes
    ----------
    N : int
    Ms : (nM,) int
    rs : (nR,) float
    recovered : (S, nR, nM) fraction recovered exactly (up to sign).
    false : (S, nR, nM) vectors returned that are not examples.
    field_evals : (S, nR, nM) the attack's cost in field evaluations.
    restarts : (S, nR, nM) restarts used.
    """

    N: int
    Ms: np.ndarray
    rs: np.ndarray
    recovered: np.ndarray
    false: np.ndarray
    field_evals: np.ndarray
    restarts: np.ndarray


def attack_curve(N: int, Ms: tuple, rs: tuple, seeds: int, rng: Any, K: int = 3,
                 **attack_params: Any) -> AttackCurve:
    """Run :func:`fedlam.privacy.attack` on fresh batches of every size in ``Ms`` and quality in ``rs``.

    Derived in {ref}`sec-privacy-leak`. Each batch draws ``K`` archetypes and ``M`` examples with
    equal exposures.
    """
    from fedlam import data, operators, privacy

    N = check_positive_int(N, "N", minimum=2)
    Ms = check_int_tuple(Ms, "Ms")
    rs = check_float_tuple(rs, "rs", 0.0, 1.0, low_open=True)
    seeds = check_positive_int(seeds, "seeds")
    if any(M > N for M in Ms):
        raise ValueError(f"Ms must be <= N = {N}, got {Ms!r}")
    shape = (seeds, len(rs), len(Ms))
    rec, fal = np.zeros(shape), np.zeros(shape, dtype=np.int64)
    fe, rst = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
    for s, (a, b) in enumerate(seed_pairs(rng, seeds)):
        for ri, r in enumerate(rs):
            for mi, M in enumerate(Ms):
                g = np.random.default_rng([a, ri, mi])
                xi = data.random_archetypes(K, N, g)
                ex = data.sample_examples(xi, M, r, np.full(K, 1.0 / K), g)[0]
                res = privacy.attack(operators.hebbian(ex), M, np.random.default_rng([b, ri, mi]),
                                     **attack_params)
                n = _recovered(res.examples, ex)
                rec[s, ri, mi] = n / M
                fal[s, ri, mi] = res.examples.shape[0] - n
                fe[s, ri, mi] = res.field_evals
                rst[s, ri, mi] = res.restarts
    return AttackCurve(N, np.asarray(Ms), np.asarray(rs, dtype=float), rec, fal, fe, rst)


@dataclass(frozen=True)
class ClientFrontier(JsonResult):
    """Smallest number of clients against the client-level budget: predicted and simulated.

    Attributes
    ----------
    N, M, K : int
    r, delta : float
    epsilons : (nE,) float
        Client-level budgets (one round).
    L_transition, L_recovery : (nE,) int
        :func:`fedlam.privacy.client_level_threshold` without and with ``magnetization=0.95``.
    factors : (nF,) float
        Multiples of ``L_recovery`` simulated.
    min_magnetization : (nE, nF, S) float
        Smallest magnetization over the archetypes, per seed.
    L_simulated : (nE,) int
        Smallest simulated ``L`` (on the grid) at which most seeds keep every archetype at
        ``m >= 0.95`` (-1: none on the grid).
    """

    N: int
    M: int
    K: int
    r: float
    delta: float
    epsilons: np.ndarray
    L_transition: np.ndarray
    L_recovery: np.ndarray
    factors: np.ndarray
    min_magnetization: np.ndarray
    L_simulated: np.ndarray


def client_frontier(N: int, M: int, r: float, epsilons: tuple, rng: Any, *, K: int = 3, delta: float = 1e-6,
                    factors: tuple = (0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.35, 1.5), seeds: int = 3,
                    variant: str = "central") -> ClientFrontier:
    """Simulate one round of ``L`` clients under :class:`fedlam.privacy.ClientLevelMechanism`
    (clip :func:`fedlam.privacy.upload_norm`, constant weight 1) at multiples of the predicted
    recovery threshold, for every budget. Derived in {ref}`sec-privacy-client`."""
    from fedlam import data, federation, privacy

    N = check_positive_int(N, "N", minimum=2)
    M = check_positive_int(M, "M")
    r = check_quality(r)
    epsilons = check_float_tuple(epsilons, "epsilons", 0.0, None, low_open=True)
    factors = check_float_tuple(factors, "factors", 0.0, None, low_open=True)
    seeds = check_positive_int(seeds, "seeds")
    K = check_positive_int(K, "K")
    delta = check_in_range(delta, "delta", 0.0, 1.0, low_open=True, high_open=True)
    clip = privacy.upload_norm(r, 1.0 / K, N, M)
    Lt = np.array([privacy.client_level_threshold(r, 1 / K, N, M, e, delta) for e in epsilons])
    Lr = np.array([privacy.client_level_threshold(r, 1 / K, N, M, e, delta, magnetization=0.95) for e in epsilons])
    mags = np.zeros((len(epsilons), len(factors), seeds))
    pairs = seed_pairs(rng, seeds)
    for ei, e in enumerate(epsilons):
        mech = privacy.ClientLevelMechanism(clip, e, delta, variant=variant)
        for fi, f in enumerate(factors):
            L = max(1, round(f * int(Lr[ei])))
            for s, (a, b) in enumerate(pairs):
                xi = data.random_archetypes(K, N, np.random.default_rng([a, ei, fi]))
                specs = [federation.ClientSpec(r=r, M=M, mixture=np.full((1, K), 1.0 / K)) for _ in range(L)]
                h = federation.run_federation(xi, specs, 1, np.random.default_rng([b, ei, fi]), controller=1.0,
                                              known_r=True, privacy=mech)
                mags[ei, fi, s] = float(h.magnetization[-1].min())
    ok = (mags >= 0.95).sum(axis=2) * 2 > seeds
    Ls = np.array([[max(1, round(f * int(Lr[ei]))) for f in factors] for ei in range(len(epsilons))])
    Lsim = np.array([int(Ls[ei][np.argmax(ok[ei])]) if ok[ei].any() else -1 for ei in range(len(epsilons))])
    return ClientFrontier(N, M, K, float(r), float(delta), np.asarray(epsilons, dtype=float), Lt, Lr,
                          np.asarray(factors, dtype=float), mags, Lsim)


def _check_result(res: Any) -> PrivacyResult:
    if not isinstance(res, PrivacyResult):
        raise TypeError(f"res must be a PrivacyResult, got {type(res).__name__}")
    return res


def setting_table(params: PrivacyParams) -> Any:
    """The frontier experiment's setting as a titled table (one row per parameter group),
    shown in {ref}`sec-exp-privacy`."""
    if not isinstance(params, PrivacyParams):
        raise TypeError(f"params must be a PrivacyParams, got {type(params).__name__}")
    p = params

    def grid(values: tuple) -> str:
        return f"{len(values)} from {min(values):g} to {max(values):g}"

    rows = [
        ("dimension N, archetypes K, channel quality r", f"{p.N}, {p.K}, {p.r:g}"),
        ("clients L", ", ".join(str(v) for v in p.Ls)),
        ("examples per client M", ", ".join(str(v) for v in p.Ms)),
        ("budgets epsilon (server), delta", f"{grid(p.epsilons)}; delta = {p.delta:g}"),
        ("uploads per example (rounds)", f"{p.rounds}"),
        ("attacked batches M", ", ".join(str(v) for v in p.attack_Ms)),
        ("budgets epsilon (attack), restarts", f"{grid(p.attack_epsilons)}; {p.attack_restarts}"),
        ("seeds", f"{p.seeds}"),
    ]
    return TitledTable("Setting", rows, ("parameter", "value"))


def threshold_table(res: PrivacyResult) -> Any:
    """Recovery against the predicted threshold, one row per (L, M), as a titled table.

    Columns: the predicted threshold ``eps*`` (:func:`fedlam.privacy.epsilon_threshold`), the
    smallest budget of the grid at which every seed recovers every archetype with m >= 0.9 and
    no spurious pattern, its ratio to ``eps*``, and how many of the budgets at or above
    ``3 eps*`` (resp. at or below ``eps*/2``) meet that criterion (resp. detect nothing,
    K-hat = 0, in every seed). The frontier of {ref}`sec-privacy-frontier`.
    """
    res = _check_result(res)
    p = res.params
    eps = np.asarray(p.epsilons)
    rows = []
    for li, L in enumerate(p.Ls):
        for mi, M in enumerate(p.Ms):
            thr = float(res.eps_threshold[li, mi])
            hi, lo = eps >= 3 * thr, eps <= 0.5 * thr
            ok = (res.magnetization[:, li, mi].min(axis=-1) >= 0.9) & (res.spurious[:, li, mi] == 0)
            none = res.k_hat[:, li, mi] == 0
            s = res.summary[f"L={L}/M={M}"]
            first = s["smallest_eps_all_seeds_all_archetypes_m>=0.9"]
            rows.append((f"L = {L}, M = {M}", f"{thr:.3g}", f"{first:g}" if first else "none",
                         f"{s['ratio_to_threshold']:.2f}" if first else "-",
                         f"{int(ok[:, hi].all(axis=0).sum())} of {int(hi.sum())}",
                         f"{int(none[:, lo].all(axis=0).sum())} of {int(lo.sum())}"))
    header = ("case", "eps*", "smallest eps", "ratio", "eps >= 3 eps*", "eps <= eps*/2")
    return TitledTable("Recovery against the predicted threshold eps*: the smallest eps of the grid "
                       "at which every seed has m >= 0.9, its ratio to eps*, how many budgets "
                       "eps >= 3 eps* recover, how many eps <= eps*/2 detect nothing (K-hat = 0)",
                       rows, header)


def attack_table(res: PrivacyResult) -> Any:
    """What the attack of {ref}`sec-privacy-leak` reads out of one noised small-batch upload,
    one row per attacked batch size, as a titled table: the fraction recovered without noise,
    the smallest budget of the grid at which every seed gets the whole batch back, the budget
    at which the noise reaches :func:`fedlam.privacy.example_critical_noise` (the span of the
    batch drowns below it) and the ratio of the two."""
    res = _check_result(res)
    rows = []
    for ai, Ma in enumerate(res.params.attack_Ms):
        first = res.summary[f"attack_M={Ma}"]["smallest_eps_whole_batch_all_seeds"]
        drown = float(res.eps_example[ai])
        rows.append((f"{Ma}", f"{res.attack_clean[:, ai].mean():.2f}",
                     f"{first:g}" if first else "never", f"{drown:.3g}",
                     f"{first / drown:.0f}" if first else "-"))
    header = ("batch M", "no noise", "smallest eps", "eps_ex", "ratio")
    return TitledTable("The attack on one noised upload: the fraction of the batch recovered "
                       "without noise, the smallest eps of the grid at which every seed recovers "
                       "the whole batch, the budget eps_ex at which the span drowns, their ratio",
                       rows, header)


def frontier_table(res: PrivacyResult) -> Any:
    """The means over seeds that :func:`fedlam.privacy_plots.plot_frontier` draws, as a titled
    table: one row per budget epsilon, one column per (L, M), each cell "smallest magnetization
    over the archetypes / K-hat / spurious patterns". The frontier of {ref}`sec-privacy-frontier`
    (the predicted thresholds are in :func:`threshold_table`).
    """
    res = _check_result(res)
    p = res.params
    cases = [(li, mi) for li in range(len(p.Ls)) for mi in range(len(p.Ms))]
    mmin = {c: res.magnetization[:, c[0], c[1]].min(axis=-1).mean(axis=0) for c in cases}
    khat = {c: res.k_hat[:, c[0], c[1]].mean(axis=0) for c in cases}
    spur = {c: res.spurious[:, c[0], c[1]].mean(axis=0) for c in cases}
    rows = [(f"{e:g}", *(f"{mmin[c][ei]:.2f} / {khat[c][ei]:.1f} / {spur[c][ei]:.1f}" for c in cases))
            for ei, e in enumerate(p.epsilons)]
    header = ("eps", *(f"L = {p.Ls[li]}, M = {p.Ms[mi]}" for li, mi in cases))
    return TitledTable("Smallest m / K-hat / spurious patterns against the budget (mean over seeds)",
                       rows, header)


def attack_curve_table(res: PrivacyResult) -> Any:
    """The means over seeds that :func:`fedlam.privacy_plots.plot_attack_vs_epsilon` draws, as a
    titled table: the fraction of the batch the attack of {ref}`sec-privacy-leak` recovers, one
    row per budget epsilon (first row: no noise), one column per attacked batch size."""
    res = _check_result(res)
    p = res.params
    n = len(p.attack_Ms)
    rows = [("no noise", *(f"{res.attack_clean[:, ai].mean():.2f}" for ai in range(n)))]
    rows += [(f"{e:g}", *(f"{res.attack_recovered[:, ai, ei].mean():.2f}" for ai in range(n)))
             for ei, e in enumerate(p.attack_epsilons)]
    return TitledTable("Fraction of the batch the attack recovers (mean over seeds)", rows,
                       ("eps", *(f"M = {Ma}" for Ma in p.attack_Ms)))
