"""Experiment 2: adversarial clients against the server's defences.

Four good clients (r = 0.9) and one adversary -- the paper's pure-noise client (``"noise"``),
a poisoner uploading the operator of a fake pattern (``"poison"``), a sign-flipped upload
(``"flip"``), a poisoner hiding its fake in an honest-looking upload (``"hidden"``), ``k``
colluding poisoners with one fake (``"collude"``), a poisoner uploading a corrupted copy of a
stored archetype (``"targeted"``) -- or none (``"none"``). Every attack runs against every
server defence under both weight rules: ``"none"`` (the paper's server: the plain mean and the
paper's acceptance, ``acceptance="paper"``), ``"voted"`` (the library's default server: the
plain mean and the voted acceptance, leave-one-out voters, {ref}`sec-robust-privacy`),
``"fresh"`` (the fresh acceptance, single-upload votes, {ref}`sec-robust-fresh`), ``"support"``, ``"median"``,
``"trimmed"``, ``"krum"`` (:mod:`fedlam.robust`). Optionally a legitimately new
archetype appears mid-run at one good client and spreads to the others one by one, so that
the table also shows how long each defence delays it. The paper's version of the noise-client
experiment is its figure "client_aware_adaptive_weight".

A second experiment, :func:`run_tradeoff`, measures the price of each defence on honest
federations (heterogeneous supports, drift, a spreading novelty) and how the support
threshold ``s`` trades colluders withstood against archetypes lost.

Theory in {ref}`sec-robust`, {ref}`sec-controller` and {ref}`sec-noise-floor`; the notebook
is {ref}`sec-exp-adversarial`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlam.experiments._common import (
    JsonResult,
    check_bool,
    check_choice,
    check_controllers,
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
from fedlam.experiments._executor import map_seeds
from fedlam.metrics import first_round

__all__ = [
    "ATTACKS",
    "DEFENSES",
    "DEFAULT_DEFENSES",
    "DEFENSE_LABELS",
    "SCENARIOS",
    "defense_label",
    "AdversarialParams",
    "AdversarialResult",
    "TradeoffParams",
    "TradeoffResult",
    "PRESETS",
    "TRADEOFF_PRESETS",
    "make_params",
    "make_tradeoff_params",
    "run",
    "run_tradeoff",
    "spreading_novelty",
    "first_round",
    "NoiseClientRule",
    "paper_rule_on_noise",
    "NearCopySweep",
    "near_copy_sweep",
    "setting_table",
    "noise_client_table",
    "noise_rule_table",
    "grid_table",
    "support_table",
    "tradeoff_table",
    "choice_of_s_table",
    "paper_table",
    "near_copy_table",
]

ATTACKS = ("none", "noise", "poison", "flip", "hidden", "collude", "targeted")
DEFENSES = ("none", "voted", "fresh", "support", "median", "trimmed", "krum")
#: the defences the experiments compare by default: the paper's server, the library's default
#: and the defences of :mod:`fedlam.robust` (``"fresh"`` on request)
DEFAULT_DEFENSES = ("none", "voted", "support", "median", "trimmed", "krum")
#: how the tables name a defence (the others by their name)
DEFENSE_LABELS = {"none": "paper (mean)", "voted": "voted (default)"}
SCENARIOS = ("iid", "three_of_five", "two_of_five", "one_of_five", "drift", "novelty")
_MEMORY_M = 0.95  # an archetype is "in memory" when its magnetization reaches this


def _check_names(x: Any, name: str, choices: tuple) -> tuple:
    if not isinstance(x, tuple) or len(x) == 0:
        raise TypeError(f"{name} must be a non-empty tuple of {choices}, got {x!r}")
    for i, a in enumerate(x):
        check_choice(a, f"{name}[{i}]", choices)
    if len(set(x)) != len(x):
        raise ValueError(f"{name} must not repeat entries, got {x!r}")
    return x


def _check_optional_round(x: Any, name: str, T: int) -> int | None:
    if x is None:
        return None
    v = check_positive_int(x, name, minimum=0)
    if v >= T:
        raise ValueError(f"{name} must be None or a round in [0, T) = [0, {T}), got {v}")
    return v


def spreading_novelty(T: int, L: int, K_old: int, t_new: int, spread: int, pi_new: float) -> np.ndarray:
    """(T, L, K_old + 1) mixtures: a new archetype (index ``K_old``) seen first by client 0.

    Client ``c`` sees the new archetype from round ``t_new + c * spread`` on, with share
    ``pi_new`` of its batch (the old archetypes share the rest equally); before that it sees the
    old archetypes only. ``spread >= T`` keeps the archetype at client 0 alone.
    """
    T = check_positive_int(T, "T")
    L = check_positive_int(L, "L")
    K_old = check_positive_int(K_old, "K_old")
    t_new = check_positive_int(t_new, "t_new", minimum=0)
    spread = check_positive_int(spread, "spread")
    pi_new = check_in_range(pi_new, "pi_new", 0.0, 1.0, low_open=True, high_open=True)
    mix = np.zeros((T, L, K_old + 1))
    mix[:, :, :K_old] = 1.0 / K_old
    for c in range(L):
        start = t_new + c * spread
        if start < T:
            mix[start:, c, :K_old] = (1.0 - pi_new) / K_old
            mix[start:, c, K_old] = pi_new
    return mix


def defense_label(name: str) -> str:
    """How the tables name a defence of ``DEFENSES``: ``"none"`` is the paper's server (plain
    mean, paper's acceptance), ``"voted"`` the library's default (plain mean, voted acceptance)."""
    check_choice(name, "name", DEFENSES)
    return DEFENSE_LABELS.get(name, name)


def _defense_kwargs(name: str, params: dict | None = None) -> dict:
    """``run_federation`` keywords of a defence.

    ``"none"`` is the paper's server, the plain mean with ``acceptance="paper"`` (explicit: the
    library's default is the voted acceptance); ``"voted"`` the plain mean with
    ``acceptance="voted"``, the library's default; ``"fresh"`` the plain mean with
    ``acceptance="fresh"`` ({ref}`sec-robust-fresh`); the others a defence of
    :mod:`fedlam.robust` with the acceptance the library resolves for it.
    """
    if name == "none":
        return {"acceptance": "paper"}
    if name in ("voted", "fresh"):
        return {"acceptance": name}
    return {"defense": name, "defense_params": params}


# ----------------------------------------------------------------------------------------
# the attack x defence x rule table
@dataclass(frozen=True)
class AdversarialParams:
    """Parameters of the adversarial-client experiment.

    Paper (caption of its attacker figure): N = 1000, K = 3, L = 5 (4 good + 1 attacker), T = 10,
    M = 800 examples per client per round, r = 0.9 for good clients, alpha_EMA = 0.5, S = 20 seeds;
    the paper preset keeps all of these. The attacks other than ``"noise"``, the defences and the
    new archetype are our additions.

    Attributes
    ----------
    N, K, T, M : int
        Pattern dimension, (old) archetypes, rounds, examples per client per round.
    n_good : int
        Honest clients.
    r_good : float
        Their channel quality (also the quality of the attackers' own data).
    attacks : tuple of str
        Adversaries compared, each in ``ATTACKS`` (``"none"``: the good clients alone).
    defenses : tuple of str
        Server defences compared, each in ``DEFENSES`` (``"none"``: the paper's server, the plain
        mean with the paper's acceptance; ``"voted"``: the plain mean with the voted acceptance,
        the library's default; ``"fresh"``: the fresh acceptance; default ``DEFAULT_DEFENSES``).
    controllers : tuple
        Weight rules compared (``"paper"``, ``"novelty"`` or constant floats).
    ema_alpha : float
        EMA coefficient.
    known_r : bool
        True (default, as in the paper's rule): good clients use r_good.
    attacker_r : float or None
        The quality the noise client plugs into its weight rule: None (default) -- it estimates
        it from its spectrum (the paper rule clamps it at ``r_min = 0.1``); a number -- its own
        stated r (e.g. 0.01: the paper's "r ~ 0").
    s : int
        Support threshold of ``"support"`` (clients that must hold a pattern).
    trim : float
        Trimming fraction of ``"trimmed"``.
    n_colluders : int
        Poisoners of ``"collude"`` (they push one fake).
    flip_fraction : float
        Bits the ``"targeted"`` attacker flips in the archetype it corrupts.
    t_new : int or None
        Round at which a new archetype appears at good client 0 (it reaches good client ``c`` at
        ``t_new + c * spread``); None (default): no new archetype, as in the paper (and its preset);
        the book and full presets set it (2 and 3).
    spread, pi_new
        See :func:`spreading_novelty`.
    seeds : int
        Independent repetitions.
    """

    N: int = 1000
    K: int = 3
    T: int = 10
    M: int = 800
    n_good: int = 4
    r_good: float = 0.9
    attacks: tuple = ATTACKS
    defenses: tuple = DEFAULT_DEFENSES
    controllers: tuple = ("paper", "novelty")
    ema_alpha: float = 0.5
    known_r: bool = True
    attacker_r: float | None = None
    s: int = 2
    trim: float = 0.2
    n_colluders: int = 2
    flip_fraction: float = 0.15
    t_new: int | None = None
    spread: int = 2
    pi_new: float = 0.25
    seeds: int = 20

    def __post_init__(self) -> None:
        check_positive_int(self.N, "N", minimum=10)
        check_positive_int(self.K, "K")
        check_positive_int(self.T, "T", minimum=2)
        check_positive_int(self.M, "M")
        check_positive_int(self.n_good, "n_good")
        check_quality(self.r_good, "r_good")
        _check_names(self.attacks, "attacks", ATTACKS)
        _check_names(self.defenses, "defenses", DEFENSES)
        check_controllers(self.controllers)
        check_in_range(self.ema_alpha, "ema_alpha", 0.0, 1.0)
        check_bool(self.known_r, "known_r")
        if self.attacker_r is not None:
            check_quality(self.attacker_r, "attacker_r")
        check_positive_int(self.n_colluders, "n_colluders")
        check_positive_int(self.s, "s")
        if self.s > self.n_good:
            raise ValueError(f"s must be <= n_good = {self.n_good} (honest clients that can support a "
                             f"pattern), got {self.s}")
        check_in_range(self.trim, "trim", 0.0, 0.5, high_open=True)
        check_in_range(self.flip_fraction, "flip_fraction", 0.0, 0.5, low_open=True, high_open=True)
        _check_optional_round(self.t_new, "t_new", self.T)
        check_positive_int(self.spread, "spread")
        check_in_range(self.pi_new, "pi_new", 0.0, 1.0, low_open=True, high_open=True)
        check_positive_int(self.seeds, "seeds")

    @property
    def L(self) -> int:
        """Clients in a run with one adversary (good ones + 1)."""
        return self.n_good + 1

    @property
    def L_max(self) -> int:
        """Largest number of clients in a run (the colluders' run)."""
        return self.n_good + (self.n_colluders if "collude" in self.attacks else 1)

    @property
    def K_total(self) -> int:
        """Archetypes tracked by the metrics (K, plus the new one if ``t_new`` is set)."""
        return self.K + (0 if self.t_new is None else 1)


#: ``"paper"`` is the paper's experiment (its figure "client_aware_adaptive_weight"): four good
#: clients and one pure-noise client, the paper's server (``"none"``: the plain mean, the paper's
#: acceptance), N = 1000, K = 3, T = 10, M = 800, 20 seeds, under the paper's rule and ours.
#: ``"full"`` adds our attack x defence grid (7 attacks x 6 defences, the library's default
#: ``"voted"`` included) and a new archetype spreading from round 3, at the same sizes and seeds
#: (about 1700 federations at N = 1000). ``"book"`` is the full grid at a small size.
PRESETS: dict[str, AdversarialParams] = {
    "book": AdversarialParams(N=200, M=200, T=8, t_new=2, seeds=2),
    "paper": AdversarialParams(attacks=("noise",), defenses=("none",), t_new=None),
    "full": AdversarialParams(t_new=3),
}


def make_params(preset: str = "book", **overrides: Any) -> AdversarialParams:
    """Preset ``"book"``, ``"paper"`` or ``"full"`` (see ``PRESETS``) with field overrides (``None`` keeps
    the preset value)."""
    return _make_params(AdversarialParams, PRESETS, preset, **overrides)


@dataclass(frozen=True)
class AdversarialResult(JsonResult):
    """Per-round arrays. Axes: (seed, attack, defence, controller, round, ...).

    Attributes
    ----------
    params : AdversarialParams
    weights : (S, A, D, C, T, L_max) w_c(t); adversaries are the last clients (NaN columns when a
        run has fewer clients; NaN entries for poisoners, which do not blend). A run that cannot
        exist (Krum with fewer than three clients) is NaN everywhere (zeros in the int arrays).
    magnetization : (S, A, D, C, T, K_total); the new archetype (if any) is the last column.
    k_hat, spurious, n_patterns : (S, A, D, C, T).
    fake_in_memory : (S, A, D, C, T) 1.0 / 0.0 whether the adversary's fake is stored
        (:func:`fedlam.attacks.fake_in_memory`), NaN for attacks without a fake.
    latency : (S, A, D, C) rounds from the new archetype's first appearance to the first round
        with magnetization >= 0.95 (NaN: not within T, or no new archetype).
    summary : dict
        Per ``"attack/defence/controller"``: final mean magnetization of the old archetypes and
        its minimum, spurious patterns (final mean, maximum over rounds), fake stored (fraction
        of seeds at the final round and in any round), latency, weights.
    """

    params: AdversarialParams
    weights: np.ndarray
    magnetization: np.ndarray
    k_hat: np.ndarray
    spurious: np.ndarray
    n_patterns: np.ndarray
    fake_in_memory: np.ndarray
    latency: np.ndarray
    summary: dict = field(default_factory=dict)


def _attacker_seed(seed_fed: int) -> int:
    return int(seed_fed % (2**31 - 1))


def _adversary_specs(p: AdversarialParams, attack: str, mix_attacker: np.ndarray, seed_a: int,
                     xi_old: np.ndarray) -> tuple[list, np.ndarray | None]:
    """Specs of the adversarial clients and the fake they push (None if there is none)."""
    from fedlam import attacks, federation

    def spec(behaviour: Any = None, kind: str = "honest") -> Any:
        """A client with honest data (the attackers are compromised clients) and a behaviour."""
        if behaviour is None:
            return federation.ClientSpec(r=p.r_good, M=p.M, mixture=mix_attacker, kind=kind)
        return federation.ClientSpec(r=p.r_good, M=p.M, mixture=mix_attacker, kind=kind, behaviour=behaviour)

    if attack == "none":
        return [], None
    if attack == "noise":
        return [federation.ClientSpec(r=p.attacker_r, M=p.M, kind="noise")], None
    if attack == "flip":
        return [spec(kind="flip")], None
    if attack in ("poison", "collude"):
        poison = attacks.Poison(seed=seed_a)
        k = p.n_colluders if attack == "collude" else 1
        return [spec(poison) for _ in range(k)], poison.fake(p.N)
    if attack == "hidden":
        hidden = attacks.Hidden(seed=seed_a)
        return [spec(hidden)], hidden.fake(p.N)
    targeted = attacks.Targeted(seed=seed_a, flip_fraction=p.flip_fraction)
    return [spec(targeted)], targeted.fake_for(xi_old)[0]


def _defense_params(p: AdversarialParams, dname: str, L: int) -> dict | None:
    """Parameters of one defence for a run with L clients (Krum assumes f = 1 attacker when
    L >= 5, f = 0 for the good clients alone)."""
    if dname == "support":
        return {"s": p.s}
    if dname == "trimmed":
        return {"trim": p.trim}
    if dname == "krum":
        return {"f": max(0, min(1, (L - 3) // 2))}
    return None


def _run_seed(p: AdversarialParams, seed_xi: int, seed_fed: int) -> dict:
    """Every (attack, defence, controller) run of one seed pair (module level: picklable)."""
    from fedlam import attacks, data, federation

    A, D, C, T, Kt = len(p.attacks), len(p.defenses), len(p.controllers), p.T, p.K_total
    xi = data.random_archetypes(Kt, p.N, seed_xi)
    xi_old = xi[: p.K]
    if p.t_new is None:
        good_mix = np.broadcast_to(data.static_mixture(T, 1, p.K)[:, 0][:, None, :], (T, p.n_good, p.K))
    else:
        good_mix = spreading_novelty(T, p.n_good, p.K, p.t_new, p.spread, p.pi_new)
    mix_attacker = np.zeros((T, Kt))
    mix_attacker[:, : p.K] = 1.0 / p.K
    good = [federation.ClientSpec(r=p.r_good, M=p.M, mixture=np.ascontiguousarray(good_mix[:, c]))
            for c in range(p.n_good)]
    seed_a = _attacker_seed(seed_fed)
    out = {
        "weights": np.full((A, D, C, T, p.L_max), np.nan),
        "magnetization": np.full((A, D, C, T, Kt), np.nan),
        "k_hat": np.zeros((A, D, C, T), dtype=np.int64),
        "spurious": np.zeros((A, D, C, T), dtype=np.int64),
        "n_patterns": np.zeros((A, D, C, T), dtype=np.int64),
        "fake": np.full((A, D, C, T), np.nan),
        "latency": np.full((A, D, C), np.nan),
    }
    for ai, attack in enumerate(p.attacks):
        adv, fake = _adversary_specs(p, attack, mix_attacker, seed_a, xi_old)
        specs = good + adv
        for di, dname in enumerate(p.defenses):
            dparams = _defense_params(p, dname, len(specs))
            if dname == "krum" and len(specs) < 3:
                continue  # Krum needs L - f - 2 >= 1 neighbours: not defined for two clients (NaN)
            for ci, ctrl in enumerate(p.controllers):
                h = federation.run_federation(
                    xi, specs, T, seed_fed, controller=ctrl, ema_alpha=p.ema_alpha, known_r=p.known_r,
                    **_defense_kwargs(dname, dparams),
                )
                out["weights"][ai, di, ci, :, : len(specs)] = h.weights
                out["magnetization"][ai, di, ci] = h.magnetization
                out["k_hat"][ai, di, ci] = h.k_hat
                out["spurious"][ai, di, ci] = h.spurious
                out["n_patterns"][ai, di, ci] = h.n_patterns
                if fake is not None:
                    out["fake"][ai, di, ci] = [float(attacks.fake_in_memory(pt, fake, xi)) for pt in h.patterns]
                if p.t_new is not None:
                    out["latency"][ai, di, ci] = first_round(h.magnetization[:, -1] >= _MEMORY_M, p.t_new)
    return out


def run(params: AdversarialParams, rng: Any, executor: Any = None) -> AdversarialResult:
    """Run every (attack, defence, controller) triple on the same archetypes and client seeds.

    ``executor`` (optional, a :class:`concurrent.futures.Executor` or a Dask client's executor;
    None: serial, or the Dask cluster of ``FEDLAM_SCHEDULER``) maps the seeds in parallel; the
    results are the same as with the plain loop.
    """
    if not isinstance(params, AdversarialParams):
        raise TypeError(f"params must be an AdversarialParams, got {type(params).__name__}")
    p = params
    outs = map_seeds(_run_seed, [(p, a, b) for a, b in seed_pairs(rng, p.seeds)], executor)
    st = {k: np.stack([o[k] for o in outs]) for k in outs[0]}
    return AdversarialResult(params=p, weights=st["weights"], magnetization=st["magnetization"],
                             k_hat=st["k_hat"], spurious=st["spurious"], n_patterns=st["n_patterns"],
                             fake_in_memory=st["fake"], latency=st["latency"], summary=_summary(p, st))


def _summary(p: AdversarialParams, st: dict) -> dict:
    out: dict = {}
    T = p.T
    for ai, attack in enumerate(p.attacks):
        n_adv = 0 if attack == "none" else (p.n_colluders if attack == "collude" else 1)
        L = p.n_good + n_adv
        for di, dname in enumerate(p.defenses):
            for ci, ctrl in enumerate(p.controllers):
                m = st["magnetization"][:, ai, di, ci]
                w = st["weights"][:, ai, di, ci]
                e = {
                    "m_final": float(m[:, -1, : p.K].mean()),
                    "m_min_final": float(m[:, -1, : p.K].min()),
                    "spurious_final_mean": float(st["spurious"][:, ai, di, ci, -1].mean()),
                    "spurious_max": int(st["spurious"][:, ai, di, ci].max()),
                    "k_hat_final_mean": float(st["k_hat"][:, ai, di, ci, -1].mean()),
                    "good_weight_final_mean": float(np.nanmean(w[:, -1, : p.n_good])),
                }
                fk = st["fake"][:, ai, di, ci]
                if np.isfinite(fk).all():
                    e["fake_final_fraction"] = float(fk[:, -1].mean())
                    e["fake_any_fraction"] = float(fk.max(axis=1).mean())
                if attack in ("noise", "flip"):
                    e["attacker_weight_final_mean"] = float(np.nanmean(w[:, -1, L - 1]))
                    e["attacker_weight_last_half_mean"] = float(np.nanmean(w[:, T // 2:, L - 1]))
                if p.t_new is not None:
                    lat = st["latency"][:, ai, di, ci]
                    e["new_accepted_fraction"] = float(np.isfinite(lat).mean())
                    e["latency_mean"] = float(np.nanmean(lat)) if np.isfinite(lat).any() else float("nan")
                out[f"{attack}/{dname}/{ctrl}"] = e
    return out


# ----------------------------------------------------------------------------------------
# the price of the defences on honest federations, and the choice of s
@dataclass(frozen=True)
class TradeoffParams:
    """Parameters of the trade-off experiment (honest federations, no attacker, plus a sweep of s).

    Attributes
    ----------
    N, M, T, L, K : int
        Dimension, examples per client per round, rounds, clients, archetypes.
    r : float
        Channel quality of every client.
    controller : str or float
        Weight rule of every client.
    scenarios : tuple of str
        Each in ``SCENARIOS``: ``"iid"`` (every client sees every archetype),
        ``"three_of_five"`` / ``"two_of_five"`` / ``"one_of_five"`` (each archetype held by 3, 2,
        1 of the clients: client c holds archetypes c, c+1, ... mod K; needs L = K),
        ``"drift"`` (archetypes dominate one after another, :func:`fedlam.data.sequential_drift`),
        ``"novelty"`` (a new archetype seen first by one client, :func:`spreading_novelty`).
    defenses : tuple of str
        Each in ``DEFENSES`` (``"none"``: the paper's server; ``"voted"``: the library's default).
    s_values : tuple of int
        Support thresholds of the sweep.
    colluders : tuple of int
        Numbers of colluding poisoners (added to the L honest clients, iid data) in the sweep.
    t_new, spread, pi_new
        The ``"novelty"`` scenario (see :func:`spreading_novelty`).
    seeds : int
    """

    N: int = 1000
    M: int = 800
    T: int = 10
    L: int = 5
    K: int = 5
    r: float = 0.9
    controller: Any = "novelty"
    scenarios: tuple = SCENARIOS
    defenses: tuple = DEFAULT_DEFENSES
    s_values: tuple = (1, 2, 3)
    colluders: tuple = (1, 2, 3)
    t_new: int = 2
    spread: int = 2
    pi_new: float = 0.25
    seeds: int = 20

    def __post_init__(self) -> None:
        check_positive_int(self.N, "N", minimum=10)
        check_positive_int(self.M, "M")
        check_positive_int(self.T, "T", minimum=2)
        check_positive_int(self.L, "L")
        check_positive_int(self.K, "K")
        check_quality(self.r, "r")
        check_controllers((self.controller,), "controller")
        _check_names(self.scenarios, "scenarios", SCENARIOS)
        _check_names(self.defenses, "defenses", DEFENSES)
        check_int_tuple(self.s_values, "s_values")
        if max(self.s_values) > self.L:
            raise ValueError(f"s_values must be <= L = {self.L}, got {self.s_values!r}")
        check_int_tuple(self.colluders, "colluders")
        if any(sc.endswith("_of_five") for sc in self.scenarios) and self.L != self.K:
            raise ValueError(f"scenarios with fixed holders need L = K, got L = {self.L}, K = {self.K}")
        if "three_of_five" in self.scenarios and self.K < 3:
            raise ValueError(f"scenario 'three_of_five' needs K >= 3, got K = {self.K}")
        if "krum" in self.defenses and self.L < 5:
            raise ValueError(f"defense 'krum' needs L >= 5 clients (f = 1), got L = {self.L}")
        _check_optional_round(self.t_new, "t_new", self.T)
        check_positive_int(self.spread, "spread")
        check_in_range(self.pi_new, "pi_new", 0.0, 1.0, low_open=True, high_open=True)
        check_positive_int(self.seeds, "seeds")


#: The trade-off sweep is ours (the paper has no defence): ``"full"`` runs it at the paper's sizes
#: (N = 1000, M = 800, 20 seeds: about 1080 federations); ``"paper"`` keeps the book's small sweep, so
#: that the notebook runs unchanged at the paper preset.
TRADEOFF_PRESETS: dict[str, TradeoffParams] = {
    "book": TradeoffParams(N=200, M=200, T=8, seeds=1),
    "paper": TradeoffParams(N=200, M=200, T=8, seeds=1),
    "full": TradeoffParams(),
}


def make_tradeoff_params(preset: str = "book", **overrides: Any) -> TradeoffParams:
    """Preset of :class:`TradeoffParams` with field overrides (``None`` keeps the preset value)."""
    return _make_params(TradeoffParams, TRADEOFF_PRESETS, preset, **overrides)


@dataclass(frozen=True)
class TradeoffResult(JsonResult):
    """Outcome of :func:`run_tradeoff`.

    Attributes
    ----------
    params : TradeoffParams
    magnetization : (S, Sc, D, T, K') per scenario and defence (K' = K, or K + 1 for novelty;
        arrays padded with NaN to the largest K').
    spurious : (S, Sc, D, T).
    latency : (S, D) rounds until the new archetype of ``"novelty"`` is stored (NaN: not within T).
    holders_recovered : (S, len(s_values), 3) fraction of archetypes stored at the final round under
        ``"support"`` with each s, for 1, 2, 3 holders per archetype.
    fake_stored : (S, len(s_values), len(colluders)) whether k colluding poisoners' fake is stored at
        the final round under ``"support"`` with each s.
    holders_recovered_voted, fake_stored_voted : the same with leave-out voters
        (``defense_params={"groups": "leave-out", "s": s}``; at s = 2 the library's default, the
        voted acceptance).
    summary : dict
    """

    params: TradeoffParams
    magnetization: np.ndarray
    spurious: np.ndarray
    latency: np.ndarray
    holders_recovered: np.ndarray
    fake_stored: np.ndarray
    holders_recovered_voted: np.ndarray
    fake_stored_voted: np.ndarray
    summary: dict = field(default_factory=dict)


def _scenario(p: TradeoffParams, name: str) -> tuple[int, np.ndarray]:
    """(number of archetypes, (T, L, K') mixtures) of a scenario."""
    from fedlam import data

    T, L, K = p.T, p.L, p.K
    if name == "iid":
        return K, data.static_mixture(T, L, K)
    if name.endswith("_of_five"):
        h = {"three_of_five": 3, "two_of_five": 2, "one_of_five": 1}[name]
        return K, data.heterogeneous_supports(T, L, K, [[(c + j) % K for j in range(h)] for c in range(L)])
    if name == "drift":
        return K, data.sequential_drift(T, L, K)
    return K + 1, spreading_novelty(T, L, K, p.t_new, p.spread, p.pi_new)


def _specs(p: TradeoffParams, mix: np.ndarray) -> list:
    from fedlam import federation

    return [federation.ClientSpec(r=p.r, M=p.M, mixture=np.ascontiguousarray(mix[:, c])) for c in range(mix.shape[1])]


def _run_tradeoff_seed(p: TradeoffParams, seed_xi: int, seed_fed: int) -> dict:
    from fedlam import attacks, data, federation, robust

    Sc, D, T = len(p.scenarios), len(p.defenses), p.T
    Kmax = p.K + (1 if "novelty" in p.scenarios else 0)
    xi_all = data.random_archetypes(Kmax, p.N, seed_xi)
    mag = np.full((Sc, D, T, Kmax), np.nan)
    spur = np.zeros((Sc, D, T), dtype=np.int64)
    lat = np.full(D, np.nan)
    for si, sc in enumerate(p.scenarios):
        Ks, mix = _scenario(p, sc)
        xi = xi_all[:Ks]
        specs = _specs(p, mix)
        for di, dname in enumerate(p.defenses):
            h = federation.run_federation(xi, specs, T, seed_fed, controller=p.controller, known_r=True,
                                          **_defense_kwargs(dname))
            mag[si, di, :, :Ks] = h.magnetization
            spur[si, di] = h.spurious
            if sc == "novelty":
                lat[di] = first_round(h.magnetization[:, -1] >= _MEMORY_M, p.t_new)
    # the support threshold: archetypes held by 1, 2, 3 clients; k colluders; single-upload votes
    # (v = 0) and leave-out voters (v = 1, the default's voters)
    hold = np.full((2, len(p.s_values), 3), np.nan)
    fake = np.zeros((2, len(p.s_values), len(p.colluders)))
    xi = xi_all[: p.K]
    iid = _specs(p, data.static_mixture(T, p.L, p.K))
    mix_a = data.static_mixture(T, 1, p.K)[:, 0]
    beh = attacks.Poison(seed=_attacker_seed(seed_fed))
    fk = beh.fake(p.N)
    for vi, groups in enumerate((None, robust.LEAVE_OUT)):
        for ii, s in enumerate(p.s_values):
            kw: dict[str, Any] = {"defense": "support", "defense_params": {"s": s, "groups": groups}}
            for hi, h_ in enumerate((1, 2, 3)):
                if h_ > p.K or p.L != p.K:
                    continue
                mix = data.heterogeneous_supports(T, p.L, p.K, [[(c + j) % p.K for j in range(h_)] for c in range(p.L)])
                hh = federation.run_federation(xi, _specs(p, mix), T, seed_fed, controller=p.controller,
                                               known_r=True, **kw)
                hold[vi, ii, hi] = float(np.mean(hh.magnetization[-1] >= _MEMORY_M))
            for ki, k in enumerate(p.colluders):
                adv = [federation.ClientSpec(r=p.r, M=p.M, mixture=mix_a, behaviour=beh) for _ in range(k)]
                hh = federation.run_federation(xi, iid + adv, T, seed_fed, controller=p.controller,
                                               known_r=True, **kw)
                fake[vi, ii, ki] = float(attacks.fake_in_memory(hh.patterns[-1], fk, xi))
    return {"magnetization": mag, "spurious": spur, "latency": lat, "hold": hold[0], "fake": fake[0],
            "hold_voted": hold[1], "fake_voted": fake[1]}


def run_tradeoff(params: TradeoffParams, rng: Any, executor: Any = None) -> TradeoffResult:
    """Honest federations under every defence, and the sweep of the support threshold ``s``
    (single-upload votes and leave-out voters)."""
    if not isinstance(params, TradeoffParams):
        raise TypeError(f"params must be a TradeoffParams, got {type(params).__name__}")
    p = params
    outs = map_seeds(_run_tradeoff_seed, [(p, a, b) for a, b in seed_pairs(rng, p.seeds)], executor)
    st = {k: np.stack([o[k] for o in outs]) for k in outs[0]}
    summary: dict = {}
    for si, sc in enumerate(p.scenarios):
        Ks = p.K + (1 if sc == "novelty" else 0)
        for di, dname in enumerate(p.defenses):
            m = st["magnetization"][:, si, di, :, :Ks]
            e = {
                "recovered_final": float(np.mean(m[:, -1] >= _MEMORY_M)),
                "m_min_final": float(m[:, -1].min()),
                "m_time_avg": float(m.mean()),
                "spurious_max": int(st["spurious"][:, si, di].max()),
                "spurious_final_mean": float(st["spurious"][:, si, di, -1].mean()),
            }
            if sc == "novelty":
                lat = st["latency"][:, di]
                e["new_accepted_fraction"] = float(np.isfinite(lat).mean())
                e["latency_mean"] = float(np.nanmean(lat)) if np.isfinite(lat).any() else float("nan")
            summary[f"{sc}/{dname}"] = e
    for ii, s in enumerate(p.s_values):
        for key, suffix in (("", ""), ("_voted", "/voted")):
            summary[f"s={s}{suffix}"] = {
                "recovered_by_holders": {str(h): float(np.nanmean(st["hold" + key][:, ii, hi]))
                                         for hi, h in enumerate((1, 2, 3))},
                "fake_stored_by_colluders": {str(k): float(st["fake" + key][:, ii, ki].mean())
                                             for ki, k in enumerate(p.colluders)},
            }
    return TradeoffResult(params=p, magnetization=st["magnetization"], spurious=st["spurious"],
                          latency=st["latency"], holders_recovered=st["hold"], fake_stored=st["fake"],
                          holders_recovered_voted=st["hold_voted"], fake_stored_voted=st["fake_voted"],
                          summary=summary)


# ----------------------------------------------------------------------------------------
# the paper's attacker statement
@dataclass(frozen=True)
class NoiseClientRule(JsonResult):
    """The paper's entropy rule evaluated for a pure-noise batch, as a function of the r it is given.

    Attributes
    ----------
    N, M, K : int
    r_values : numpy.ndarray
        (R,) qualities plugged into the rule.
    one_minus_h_ab : numpy.ndarray
        (S,) ``1 - H_AB`` of S noise batches against a broadcast of K random archetypes.
    w_raw : numpy.ndarray
        (S, R) the rule ``max(0, (H_AB - H_min(r)) / (1 - H_min(r)))`` before smoothing.
    r_star : float
        The r at which ``1 - H_min(r)`` equals the mean of ``1 - H_AB``: below it the rule gives
        0 (the attacker collapses), above it close to 1.
    r_star_pred : float
        Its prediction ``(2 (1 - P0) / (N (N - 1)))^(1/4)`` (``P0``: probability that an entry of
        the noise operator is exactly 0, even M).
    mean_pred : float
        Predicted mean of ``1 - H_AB``: ``(1 - P0) / (ln 2 N (N - 1))``.
    """

    N: int
    M: int
    K: int
    r_values: np.ndarray
    one_minus_h_ab: np.ndarray
    w_raw: np.ndarray
    r_star: float
    r_star_pred: float
    mean_pred: float


def paper_rule_on_noise(N: int, M: int, K: int, r_values: np.ndarray, n_batches: int, rng: Any) -> NoiseClientRule:
    """How the paper's rule treats a noise client, depending on the ``r`` it is fed.

    A noise batch agrees in sign with the broadcast on a fraction ``p = 1/2 + O(1/N)`` of the
    entries, so ``1 - H_AB ~ (2/ln 2)(p - 1/2)^2``, whose mean is ``(1 - P0)/(ln 2 N (N - 1))``;
    the noise floor is ``1 - H_min(r) ~ r^4 / (2 ln 2)``. The rule is 0 for ``r`` below
    ``r* ~ (2 / N^2)^(1/4) = 2^(1/4) / sqrt(N)`` and close to 1 above: the attacker collapses only
    if it is given (or states) an ``r`` below ``r*``, i.e. if its near-zero quality is known.
    Derived in {ref}`sec-noise-floor`; used in {ref}`sec-exp-adversarial`.

    The predicted mean is exact up to the quadratic expansion of ``h2``, whatever N, M and K:
    the signs of a noise operator are pairwise independent (for pairs ``(i, j)`` and ``(i, k)``
    that share a neuron, the products ``x_i x_j`` and ``x_i x_k`` of every example are
    independent fair coins; likewise for the archetypes of ``A``), so for distinct pairs
    ``E[s_ij s_kl] = E[sgn A_ij sgn A_kl] E[sgn B_ij sgn B_kl] = 0`` and
    ``E (p - 1/2)^2 = Var p = (1 - P0) / (2 N (N - 1))`` (``1 / (4 n_pairs)`` per non-zero sign,
    as :func:`fedlam.controller.sign_agreement_moments` at ``r -> 0``). M enters only through
    ``P0``; nothing is averaged over the M examples as in the floor ``H_min(r)``. ``p - 1/2`` is
    close to normal (a sum of ``n_pairs`` weakly dependent terms), so each batch's
    ``(1 - H_AB) / mean_pred`` is close to a chi-square with one degree of freedom and the mean
    of ``n_batches`` batches scatters around 1 with standard deviation ``sqrt(2 / n_batches)``:
    0.5 for 8 batches, whose mean falls outside a factor 3 of the prediction with probability
    0.049 (``chi2_8``), 1e-7 for 64 batches. Measured with 800 batches: mean ratio
    0.993 +- 0.051 at N = M = 200, 1.011 +- 0.051 at N = 1000, M = 800.
    """
    from fedlam import controller, data, operators
    from fedlam._validation import as_rng

    N = check_positive_int(N, "N", minimum=10)
    M = check_positive_int(M, "M")
    K = check_positive_int(K, "K")
    n_batches = check_positive_int(n_batches, "n_batches")
    if not isinstance(r_values, np.ndarray) or r_values.ndim != 1 or r_values.size == 0:
        raise TypeError(f"r_values must be a non-empty 1-D array, got {type(r_values).__name__}")
    for i, rv in enumerate(r_values):
        check_quality(float(rv), f"r_values[{i}]")
    gen = as_rng(rng)
    hm = np.array([controller.h_min(float(rv)) for rv in r_values])
    om = np.empty(n_batches)
    w = np.empty((n_batches, r_values.size))
    for b in range(n_batches):
        A = operators.pattern_operator(data.random_archetypes(K, N, gen))
        B = operators.hebbian(gen.choice(np.array([-1, 1], dtype=np.int8), size=(M, N)))
        h = controller.binary_entropy(controller.sign_agreement(A, B))
        om[b] = 1.0 - h
        w[b] = np.maximum(0.0, (h - hm) / (1.0 - hm))
    p0 = math.comb(M, M // 2) / 2.0**M if M % 2 == 0 else 0.0
    mean_pred = (1.0 - p0) / (math.log(2.0) * N * (N - 1))
    r_star_pred = (2.0 * (1.0 - p0) / (N * (N - 1))) ** 0.25
    target = float(om.mean())
    lo, hi = 1e-6, 1.0
    for _ in range(200):  # 1 - H_min(r) increases with r
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if 1.0 - controller.h_min(mid) < target else (lo, mid)
    return NoiseClientRule(N=N, M=M, K=K, r_values=r_values.astype(np.float64), one_minus_h_ab=om, w_raw=w,
                           r_star=hi, r_star_pred=r_star_pred, mean_pred=mean_pred)



# ----------------------------------------------------------------------------------------
# a near-copy of an archetype against the support test, swept in its overlap m
@dataclass(frozen=True)
class NearCopySweep(JsonResult):
    """Outcome of :func:`near_copy_sweep`. Axes: (m value, seed, archetype).

    Attributes
    ----------
    m_values : numpy.ndarray
        (V,) overlaps of the copy with its archetype actually realised (``1 - 2 flips / N``).
    one_shot : numpy.ndarray
        (V, S, K) magnetization of each archetype after one round (four honest uploads, one
        rank-one upload of the copy of archetype 0).
    one_shot_copy : numpy.ndarray
        (V, S) bool, the copy itself is stored (never counted when ``m = 1``: it is the archetype).
    federation : numpy.ndarray
        (V, S, K) magnetization of each archetype at the last round of a federation with a
        ``"targeted"`` attacker (:class:`fedlam.attacks.Targeted`) under ``defense="support"``
        (or the voted or fresh acceptance: ``params["defense"]``).
    federation_min : numpy.ndarray
        (V, S) smallest magnetization of any archetype over the rounds after the first.
    federation_copy : numpy.ndarray
        (V, S) bool, the attacker's copy stored in any round.
    params : dict
    """

    m_values: np.ndarray
    one_shot: np.ndarray
    one_shot_copy: np.ndarray
    federation: np.ndarray
    federation_min: np.ndarray
    federation_copy: np.ndarray
    params: dict = field(default_factory=dict)


def _stored(patterns: np.ndarray, x: np.ndarray) -> bool:
    return bool(np.any(np.all(patterns == x, axis=1) | np.all(patterns == -x, axis=1)))


def near_copy_sweep(m_values: tuple = (0.7, 0.8, 0.9, 0.95, 0.97, 0.99, 1.0), *, N: int = 400, M: int = 400,
                    r: float = 0.9, K: int = 3, n_good: int = 4, T: int = 8, N_fed: int = 200,
                    controller: Any = "novelty", seeds: int = 3, rng: int = 0,
                    defense: str = "support") -> NearCopySweep:
    """A corrupted copy of an archetype (overlap ``m``) against ``defense="support"`` (s = 2), or
    (``defense="voted"``) against the voted acceptance, the library's default server, or
    (``defense="fresh"``) against the fresh acceptance ({ref}`sec-robust-fresh`).

    One shot (issue 18's setting, N = M = 400, r = 0.9, K = 3): ``n_good`` honest uploads and
    one rank-one upload of archetype 0 with ``round((1 - m) N / 2)`` bits flipped. Over a
    federation (``N_fed = M``, ``T`` rounds, ``controller``): ``n_good`` honest clients and one
    :class:`fedlam.attacks.Targeted` client flipping the same number of bits (per ``N_fed``) in
    the pattern it recovers from the broadcast. Derived in {ref}`sec-robust-support`
    (:prf:ref:`thm-robust-support`, part 3).
    """
    check_choice(defense, "defense", ("support", "voted", "fresh"))
    server_kw: dict = ({"defense": "support", "defense_params": {"s": 2}} if defense == "support"
                       else {"acceptance": defense})
    from fedlam import attacks, data, federation, metrics, operators
    from fedlam.protocol import Upload

    ms = check_float_tuple(m_values, "m_values", 0.0, 1.0)
    for name, v in (("N", N), ("M", M), ("K", K), ("n_good", n_good), ("T", T), ("N_fed", N_fed), ("seeds", seeds)):
        check_positive_int(v, name)
    check_quality(r, "r")
    V, S = len(ms), int(seeds)
    out = {"m": np.zeros(V), "one": np.zeros((V, S, K)), "one_copy": np.zeros((V, S), dtype=bool),
           "fed": np.zeros((V, S, K)), "fed_min": np.zeros((V, S)), "fed_copy": np.zeros((V, S), dtype=bool)}
    pi = np.ones(K) / K
    for vi, m in enumerate(ms):
        n_flip = round((1.0 - m) * N / 2)
        out["m"][vi] = 1.0 - 2.0 * n_flip / N
        for si in range(S):
            seed = int(rng) * 1000 + si
            xi = data.random_archetypes(K, N, seed)
            ups = [Upload(operators.hebbian(data.sample_examples(xi, M, r, pi, rng=seed * 100 + c)[0]), M, 1.0,
                          1.0 - r * r) for c in range(n_good)]
            x = xi[0].copy()
            x[np.random.default_rng(seed + 1000).permutation(N)[:n_flip]] *= -1
            ups.append(Upload(operators.pattern_operator(x[None]), M, float("nan"), 1.0 - r * r))
            pats = federation.Server(**server_kw).round(ups, np.random.default_rng(seed)).patterns
            out["one"][vi, si] = metrics.magnetization(pats, xi)
            out["one_copy"][vi, si] = n_flip > 0 and _stored(pats, x)
            # the federation: the attacker corrupts what it recovers, flipping n_flip_fed bits
            n_fed = round((1.0 - m) * N_fed / 2)
            xi_f = data.random_archetypes(K, N_fed, seed)
            mix = data.static_mixture(T, 1, K)[:, 0]
            good = [federation.ClientSpec(r=r, M=M, mixture=mix) for _ in range(n_good)]
            beh = attacks.Targeted(seed=seed, flip_fraction=(n_fed + 0.5) / N_fed)
            specs = good + [federation.ClientSpec(r=r, M=M, mixture=mix, behaviour=beh)]
            h = federation.run_federation(xi_f, specs, T, seed, controller=controller, known_r=True, **server_kw)
            out["fed"][vi, si] = h.magnetization[-1]
            out["fed_min"][vi, si] = h.magnetization[1:].min()
            if n_fed:
                fake = beh.fake_for(xi_f)[0]
                out["fed_copy"][vi, si] = any(_stored(pt, fake) for pt in h.patterns)
    params = {"m_values": ms, "N": N, "M": M, "r": r, "K": K, "n_good": n_good, "T": T, "N_fed": N_fed,
              "controller": controller, "seeds": S, "rng": int(rng), "defense": defense}
    return NearCopySweep(m_values=out["m"], one_shot=out["one"], one_shot_copy=out["one_copy"],
                         federation=out["fed"], federation_min=out["fed_min"], federation_copy=out["fed_copy"],
                         params=params)


# ----------------------------------------------------------------------------------------
# the page's tables ({ref}`sec-exp-adversarial`): one titled table per output
def _check_result(res: Any, cls: type, name: str = "res") -> Any:
    if not isinstance(res, cls):
        raise TypeError(f"{name} must be a {cls.__name__}, got {type(res).__name__}")
    return res


def _pct(x: float | None) -> str:
    return "—" if x is None or np.isnan(x) else f"{100 * x:.0f}%"


def _latency(s: dict) -> str:
    if "latency_mean" not in s:
        return "—"
    lat = "—" if np.isnan(s["latency_mean"]) else f"{s['latency_mean']:.1f}"
    return f"{lat} ({_pct(s['new_accepted_fraction'])})"


def setting_table(params: AdversarialParams) -> Any:
    """The attack x defence experiment's setting as a titled table (one short row per quantity)."""
    from fedlam.experiments._common import TitledTable, controller_label

    p = _check_result(params, AdversarialParams, "params")
    r_adv = "estimated" if p.attacker_r is None else f"stated, {p.attacker_r}"
    rows = [
        ("N, K, T", f"{p.N}, {p.K}, {p.T}"),
        ("good clients, r, M", f"{p.n_good}, {p.r_good}, {p.M}"),
        ("attacks", ", ".join(p.attacks)),
        ("defences", ", ".join(defense_label(d) for d in p.defenses)),
        ("weight rules", ", ".join(controller_label(c) for c in p.controllers)),
        ("EMA coefficient", f"{p.ema_alpha}"),
        ("r: good / noise client", f"{'stated' if p.known_r else 'estimated'} / {r_adv}"),
        ("support s, trimming", f"{p.s}, {p.trim}"),
        ("colluders", f"{p.n_colluders}"),
        ("targeted: bits flipped", f"{p.flip_fraction}"),
    ]
    if p.t_new is None:
        rows.append(("new archetype", "none"))
    else:
        rows += [("new archetype from", f"round {p.t_new}, client 0"),
                 ("then one more client", f"every {p.spread} rounds")]
    rows.append(("seeds", f"{p.seeds}"))
    title = ("Setting (N dimension, K archetypes, T rounds, M examples per client and round; "
             "an estimated r comes from the client's spectrum)")
    return TitledTable(title, rows, ("parameter", "value"))


def noise_client_table(res: AdversarialResult) -> Any:
    """The paper's noise client against the plain mean: final weights and memory per rule."""
    from fedlam.experiments._common import TitledTable, controller_label

    p = _check_result(res, AdversarialResult).params
    rows = []
    for c in p.controllers:
        s = res.summary[f"noise/none/{c}"]
        rows.append((controller_label(c), f"{s['good_weight_final_mean']:.3f}",
                     f"{s['attacker_weight_final_mean']:.3f}", f"{s['m_final']:.3f}",
                     f"{s['k_hat_final_mean']:.2f}", f"{s['spurious_final_mean']:.2f}"))
    return TitledTable("The noise client against the plain mean (final round, mean over seeds; "
                       "w: weight of the good clients and of the noise client)", rows,
                       ("rule", "w good", "w noise", "mean m", "K-hat", "spurious"))


def noise_rule_table(rule: NoiseClientRule, w_own: np.ndarray, w_clamp: np.ndarray, T: int) -> Any:
    """The paper's rule on noise batches (:func:`paper_rule_on_noise`) and the attacker's final
    weight in whole federations: with its own stated r = 0.01 (``w_own``, per seed) and with its
    r estimated and clamped at 0.1 (``w_clamp``), after ``T`` rounds. Derived in
    {ref}`sec-noise-floor`."""
    from scipy import stats

    from fedlam import controller
    from fedlam.experiments._common import TitledTable

    rule = _check_result(rule, NoiseClientRule, "rule")
    rs, n = rule.r_values, rule.w_raw.shape[0]
    w_mean = rule.w_raw.mean(axis=0)
    all_zero = np.flatnonzero(np.all(rule.w_raw == 0, axis=0))
    zero_txt = (f"all, r ≤ {rs[all_zero[-1]]:.3f}" if all_zero.size
                else f"{np.sum(rule.w_raw[:, 0] == 0)} of {n}, r = {rs[0]:.3f}")
    q_raw = stats.chi2.cdf((1.0 - controller.h_min(0.01)) / rule.mean_pred, 1)
    rows = [
        ("mean 1 - H_AB", f"{rule.one_minus_h_ab.mean():.3g}", f"{rule.mean_pred:.3g}"),
        ("r* (from the mean)", f"{rule.r_star:.4f}", f"{rule.r_star_pred:.4f}"),
        (f"rule at r = {rs[0]:.3f}, 0.1, {rs[-1]:.1f}",
         f"{w_mean[0]:.3f}, {w_mean[np.argmin(abs(rs - 0.1))]:.3f}, {w_mean[-1]:.3f}", ""),
        ("batches with rule 0", zero_txt, ""),
        ("mean rule ≥ 0.9 from", f"r = {rs[np.flatnonzero(w_mean >= 0.9)[0]]:.3f}", ""),
        ("w, own r = 0.01", " ".join(f"{x:.4f}" for x in np.round(w_own, 4)), f"{0.5 ** (T - 1):.4f}"),
        ("seeds ending w > 0.1", f"{np.sum(w_own > 0.1)} of {w_own.size}", f"p = {q_raw:.3f} a round"),
        ("w, r clamped at 0.1", " ".join(f"{x:.3f}" for x in np.round(w_clamp, 3)), ""),
    ]
    title = (f"The paper's rule on a noise client, N = {rule.N}, M = {rule.M} ({n} noise batches; "
             f"rule: mean over batches; w: the attacker's weight after T = {T} rounds per seed, "
             "predicted for an EMA of zeros; seeds ending w > 0.1 with its own r = 0.01, predicted: "
             "probability of a raw weight > 0 in a round)")
    return TitledTable(title, rows, ("quantity", "measured", "predicted"))


def grid_table(res: AdversarialResult, controller: Any) -> Any:
    """Every attack against every defence under one weight rule (final round, means over seeds):
    magnetization of the old archetypes (mean, minimum), spurious patterns (final mean, maximum
    over rounds), the fake in memory (final / any round) and the new archetype's latency."""
    from fedlam.experiments._common import TitledTable, controller_label

    p = _check_result(res, AdversarialResult).params
    if controller not in p.controllers:
        raise ValueError(f"controller must be one of {p.controllers}, got {controller!r}")
    rows = []
    for a in p.attacks:
        for d in p.defenses:
            s = res.summary[f"{a}/{d}/{controller}"]
            fake = (f"{_pct(s['fake_final_fraction'])} / {_pct(s['fake_any_fraction'])}"
                    if "fake_final_fraction" in s else "—")
            rows.append((a, defense_label(d), f"{s['m_final']:.2f} ({s['m_min_final']:.2f})",
                         f"{s['spurious_final_mean']:.1f} ({s['spurious_max']})", fake, _latency(s)))
    title = (f"{controller_label(controller)}: {len(rows)} runs, {p.seeds} seeds (final round, means "
             "over seeds: m of the old archetypes (minimum); spurious patterns (maximum over rounds); "
             "fake stored at the final / any round; the new archetype's latency in rounds "
             "(% of seeds storing it))")
    return TitledTable(title, rows, ("attack", "defence", "m (min)", "spurious", "fake", "latency"))


def support_table(res: AdversarialResult) -> Any:
    """The single poisoners (poison, hidden, targeted) against the support test, per rule, then
    under the default and the fresh acceptance and the paper's server (``"voted"``, ``"fresh"``,
    ``"none"``: the worse of the
    rules); ``None`` if ``"support"`` was not run."""
    from fedlam.experiments._common import TitledTable

    p = _check_result(res, AdversarialResult).params
    if "support" not in p.defenses:
        return None
    D, C = p.defenses.index("support"), {c: i for i, c in enumerate(p.controllers)}
    single = [a for a in ("poison", "hidden", "targeted") if a in p.attacks]
    rows = []
    for c in p.controllers:
        for a in single:
            s = res.summary[f"{a}/support/{c}"]
            sp = int(res.spurious[:, p.attacks.index(a), D, C[c]].max())
            rows.append(("support", a, str(c), f"{100 * s['fake_any_fraction']:.0f}%",
                         str(sp), f"{s['m_min_final']:.2f}"))
    for d in ("voted", "fresh", "none"):
        if d not in p.defenses:
            continue
        for a in single:
            f = max(res.summary[f"{a}/{d}/{c}"]["fake_any_fraction"] for c in p.controllers)
            sp = int(res.spurious[:, p.attacks.index(a), p.defenses.index(d)].max())
            mm = min(res.summary[f"{a}/{d}/{c}"]["m_min_final"] for c in p.controllers)
            rows.append((defense_label(d), a, "either", f"{100 * f:.0f}%", str(sp), f"{mm:.2f}"))
    return TitledTable("Single poisoners: the support test, the voted acceptance (the library's "
                       "default) and the paper's server (rule: weight rule, paper = the paper's "
                       "entropy rule, novelty = ours, either: the worse of the two; fake: stored in "
                       "% of seeds, any round; spurious: maximum)", rows,
                       ("defence", "attack", "rule", "fake", "spurious", "min m"))


def tradeoff_table(tres: TradeoffResult) -> Any:
    """The price of each defence on honest federations (:func:`run_tradeoff`), per scenario."""
    from fedlam.experiments._common import TitledTable, controller_label

    p = _check_result(tres, TradeoffResult, "tres").params
    rows = []
    for sc in p.scenarios:
        for d in p.defenses:
            s = tres.summary[f"{sc}/{d}"]
            rows.append((sc, defense_label(d), f"{100 * s['recovered_final']:.0f}%", f"{s['m_min_final']:.2f}",
                         str(s["spurious_max"]), _latency(s)))
    title = (f"Honest federations (N = {p.N}, M = {p.M}, T = {p.T}, L = {p.L}, K = {p.K}; "
             f"{controller_label(p.controller)}; seeds: {p.seeds}; stored: archetypes with "
             "m ≥ 0.95; spurious: maximum; latency of the new archetype in rounds (% of seeds "
             "storing it))")
    return TitledTable(title, rows, ("scenario", "defence", "stored", "min m", "spurious", "latency"))


def choice_of_s_table(tres: TradeoffResult) -> Any:
    """The support threshold s: fakes stored against colluders, archetypes stored against
    holders (% of seeds), per s, with single-upload votes and with leave-out voters."""
    from fedlam.experiments._common import TitledTable

    p = _check_result(tres, TradeoffResult, "tres").params
    rows = []
    for name, fk, hd in (("uploads", tres.fake_stored, tres.holders_recovered),
                         ("leave-out", tres.fake_stored_voted, tres.holders_recovered_voted)):
        fake = np.round(100 * fk.mean(axis=0), 0)
        hold = np.round(100 * np.nanmean(hd, axis=0), 0)
        rows += [(f"{s}", name, *(f"{x:.0f}%" for x in fake[i]), *(f"{x:.0f}%" for x in hold[i]))
                 for i, s in enumerate(p.s_values)]
    header = ("s", "voters", *(f"fake, k = {k}" for k in p.colluders), *(f"h = {h}" for h in (1, 2, 3)))
    return TitledTable("The support threshold s (% of seeds): a fake stored against k colluders; "
                       "an archetype stored when h clients hold it; voters: single uploads (the "
                       "support test) or leave-out means (s = 2: the default)", rows, header)


def paper_table(res: AdversarialResult, w_own: np.ndarray) -> Any:
    """Paper versus measured, with ``w_own`` the noise client's final weight (per seed) when it
    states its own r = 0.01."""
    from fedlam.experiments._common import TitledTable

    p = _check_result(res, AdversarialResult).params
    c = "paper" if "paper" in p.controllers else p.controllers[0]
    rows = []
    if "noise" in p.attacks and "none" in p.defenses:
        s = res.summary[f"noise/none/{c}"]
        rows.append(("attacker's w, r estimated", "→ 0 in ~10 rounds",
                     f"{s['attacker_weight_final_mean']:.2f}"))
        rows.append(("attacker's w, own r = 0.01", "→ 0 in ~10 rounds", f"{np.mean(w_own):.4f}"))
        rows.append(("good clients' w", "0.4–0.6", f"{s['good_weight_final_mean']:.2f}"))
        rows.append(("mean m, noise client", "≳ 0.7 / > 0.8", f"{s['m_final']:.2f}"))
    for a in ("poison", "hidden", "collude", "targeted"):
        if a in p.attacks and "none" in p.defenses:
            s = res.summary[f"{a}/none/{c}"]
            line = f"{100 * s['fake_any_fraction']:.0f}%"
            for d in ("support", "voted", "fresh"):
                if d in p.defenses:
                    line += f" / {100 * res.summary[f'{a}/{d}/{c}']['fake_any_fraction']:.0f}%"
            rows.append((f"fake stored, {a}", "robust", line))
    names = {"support": "the support test", "voted": "the voted acceptance", "fresh": "the fresh acceptance"}
    under = " / ".join(["the paper's server"] + [names[d] for d in ("support", "voted", "fresh") if d in p.defenses])
    title = ("Paper versus measured (the paper's entropy rule, last round; w: weight, the attacker's "
             "r estimated from its spectrum and clamped at 0.1, or its own; mean m: caption / text "
             f"of the paper; fake stored: % of seeds, any round, under {under}; "
             "the paper's robustness claim covers only the noise client)")
    return TitledTable(title, rows, ("quantity", "paper", "measured"))


def near_copy_table(sweep: NearCopySweep) -> Any:
    """Per overlap m of the copy (:func:`near_copy_sweep`, support test, voted or fresh acceptance): the
    smallest magnetization of any archetype (one shot; federation at the last round and over
    rounds 1 to T - 1) and whether the copy was ever stored."""
    from fedlam.experiments._common import TitledTable

    sweep = _check_result(sweep, NearCopySweep, "sweep")

    def yes(x: Any) -> str:
        return "yes" if bool(x.any()) else "no"

    rows = [(f"{m:.3f}", f"{sweep.one_shot[i].min():.3f}", yes(sweep.one_shot_copy[i]),
             f"{sweep.federation[i].min():.3f}", f"{sweep.federation_min[i].min():.3f}",
             yes(sweep.federation_copy[i]))
            for i, m in enumerate(sweep.m_values)]
    against = {"support": "the support test", "voted": "the voted acceptance (the default)",
               "fresh": "the fresh acceptance"}[sweep.params.get("defense", "support")]
    return TitledTable(f"A near-copy of archetype 0 against {against} (smallest "
                       "magnetization of any archetype: one shot, in the federation at the last "
                       "round and over rounds; stored: the copy, in any round)", rows,
                       ("copy's m", "one shot", "stored", "federation", "over rounds", "stored"))
