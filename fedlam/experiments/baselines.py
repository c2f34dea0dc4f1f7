"""Experiment 6: baselines beyond the paper — what do federation and the LAM add?

For three scenarios (exposure drift, novelty, structured silhouettes) we compare four ways of
recovering the archetypes, round by round:

``federated``
    The full pipeline (:func:`fedlam.federation.run_federation`: clients blend, server factorizes
    with the LAM).
``spectral``
    The same federation, but the server's reconstruction is the sign of its K̂ leading
    eigenvectors (K̂ from the server's own estimator, as in ``federated``), no LAM. It runs
    the same clients and data streams as ``federated`` (same seed), so the difference is the
    reconstruction alone.
``local``
    No communication: every client runs the pipeline on its own data (a federation of one);
    we report the mean over clients.
``oracle``
    A central server that sees every example of every client from every round so far
    (pooled Hebbian operator, full replay, no privacy) and factorizes it with the LAM.

The notebook is {ref}`sec-exp-baselines`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlam._validation import as_rng
from fedlam.experiments._common import (
    JsonResult,
    check_choice,
    check_controllers,
    check_positive_int,
    check_quality,
    make_params as _make_params,
    seed_pairs,
)

__all__ = ["BaselinesParams", "BaselinesResult", "PRESETS", "METHODS", "SCENARIOS", "make_params",
           "run", "signed_eigenvectors"]

METHODS = ("federated", "spectral", "local", "oracle")
SCENARIOS = ("drift", "novelty", "structured")


@dataclass(frozen=True)
class BaselinesParams:
    """Parameters of the baselines comparison (all values are our choices; no paper figure).

    Attributes
    ----------
    scenarios : tuple of str
        Subset of ``SCENARIOS``.
    methods : tuple of str
        Subset of ``METHODS``.
    N, T, M, L : int
        Random-pattern scenarios: dimension, rounds, examples per client per round, clients.
    r : float
        Channel quality of the random-pattern scenarios.
    controller : str or float
        Weight rule of the random-pattern scenarios (default our novelty rule).
    K : int
        Archetypes of the drift scenario; the novelty scenario uses K_old = K_new = K, new ones
        entering at round T // 2 with a three-round ramp.
    structured_r : float
        Quality of the silhouette scenario (anchor, bass, Motorbikes 16; N = 784, w = 0.6).
    structured_T, structured_M_total : int
        Rounds and total example budget of the silhouette scenario (M_c = ceil(M_total/(L T))).
    seeds : int
        Independent repetitions.
    """

    scenarios: tuple = SCENARIOS
    methods: tuple = METHODS
    N: int = 400
    T: int = 24
    M: int = 200
    L: int = 3
    r: float = 0.8
    controller: Any = "novelty"
    K: int = 3
    structured_r: float = 0.8
    structured_T: int = 12
    structured_M_total: int = 4000
    seeds: int = 10

    def __post_init__(self) -> None:
        for fname, allowed in (("scenarios", SCENARIOS), ("methods", METHODS)):
            val = getattr(self, fname)
            if not isinstance(val, tuple) or len(val) == 0:
                raise TypeError(f"{fname} must be a non-empty tuple drawn from {allowed}, got {val!r}")
            for i, v in enumerate(val):
                check_choice(v, f"{fname}[{i}]", allowed)
            if len(set(val)) != len(val):
                raise ValueError(f"{fname} must not repeat entries, got {val!r}")
        check_positive_int(self.N, "N", minimum=10)
        check_positive_int(self.T, "T", minimum=4)
        check_positive_int(self.M, "M")
        check_positive_int(self.L, "L")
        check_quality(self.r)
        check_controllers((self.controller,), "controller")
        check_positive_int(self.K, "K")
        check_quality(self.structured_r, "structured_r")
        check_positive_int(self.structured_T, "structured_T")
        check_positive_int(self.structured_M_total, "structured_M_total")
        check_positive_int(self.seeds, "seeds")


PRESETS: dict[str, BaselinesParams] = {
    "book": BaselinesParams(N=200, T=14, M=100, structured_T=8, seeds=2),
    "paper": BaselinesParams(),
}


def make_params(preset: str = "book", **overrides: Any) -> BaselinesParams:
    """Preset ``"book"`` or ``"paper"`` with field overrides (``None`` keeps the preset value)."""
    return _make_params(BaselinesParams, PRESETS, preset, **overrides)


def signed_eigenvectors(result: Any) -> np.ndarray:
    """Spectral-only server stage for :func:`fedlam.federation.run_federation`'s
    ``reconstruct`` hook: the signs of the round's K̂ detected eigenvectors (the same K̂
    and spectrum the LAM would use; a zero entry gets +1). Returns int8 (K̂, N)."""
    V = np.asarray(result.vectors)
    return np.where(V.T >= 0, 1, -1).astype(np.int8)


def _oracle(archetypes: np.ndarray, sched: np.ndarray, M: int, r: float, seed: int) -> np.ndarray:
    """Central oracle: factorize the Hebbian operator of all examples seen so far."""
    from fedlam import data, lam, metrics

    T, L, K = sched.shape
    N = archetypes.shape[1]
    gen = as_rng(seed)
    G = np.zeros((N, N))
    count = 0
    mag = np.zeros((T, K))
    for t in range(T):
        for c in range(L):
            ex, _ = data.sample_examples(archetypes, M, r, sched[t, c], gen)
            X = ex.astype(np.float64)
            G += X.T @ X
            count += M
        J = G / (N * count)
        res = lam.factorize(J, rng=gen)
        mag[t] = metrics.magnetization(res.patterns, archetypes)
    return mag


@dataclass(frozen=True)
class BaselinesResult(JsonResult):
    """Per scenario: magnetization arrays (S, n_methods, T_scenario, K_scenario).

    Attributes
    ----------
    params : BaselinesParams
    magnetization : dict scenario -> (S, n_methods, T, K) array (methods in ``params.methods``
        order; for ``local`` the mean over clients).
    local_best : dict scenario -> (S, T, K) the best single client's magnetization.
    summary : dict of final and time-averaged mean magnetizations per scenario and method.
    """

    params: BaselinesParams
    magnetization: dict
    local_best: dict
    summary: dict = field(default_factory=dict)


def _scenario(p: BaselinesParams, name: str) -> tuple[np.ndarray | None, np.ndarray, int, float, Any, int]:
    """(fixed archetypes or None, schedule (T, L, K), M, r, controller, N) of a scenario."""
    from fedlam import data

    if name == "drift":
        return None, data.sequential_drift(p.T, p.L, p.K), p.M, p.r, p.controller, p.N
    if name == "novelty":
        sched = data.novelty_ramp(p.T, p.L, p.K, p.K, p.T // 2, 3)
        return None, sched, p.M, p.r, p.controller, p.N
    xi = data.structured_archetypes()
    T = p.structured_T
    M = math.ceil(p.structured_M_total / (p.L * T))
    return xi, data.static_mixture(T, p.L, xi.shape[0]), M, p.structured_r, 0.6, xi.shape[1]


def run(params: BaselinesParams, rng: Any) -> BaselinesResult:
    """Run every method on every scenario and seed."""
    if not isinstance(params, BaselinesParams):
        raise TypeError(f"params must be a BaselinesParams, got {type(params).__name__}")
    from fedlam import data, federation

    p = params
    seeds = seed_pairs(rng, p.seeds)
    mags: dict[str, np.ndarray] = {}
    best: dict[str, np.ndarray] = {}
    summary: dict = {}
    for name in p.scenarios:
        fixed, sched, M, r, ctrl, N = _scenario(p, name)
        T, L, K = sched.shape
        out = np.zeros((p.seeds, len(p.methods), T, K))
        lb = np.zeros((p.seeds, T, K))
        for s, (seed_xi, seed_fed) in enumerate(seeds):
            xi = fixed if fixed is not None else data.random_archetypes(K, N, seed_xi)
            specs = [federation.ClientSpec(r=r, M=M, mixture=sched[:, c]) for c in range(L)]
            for mi, method in enumerate(p.methods):
                if method == "federated":
                    out[s, mi] = federation.run_federation(xi, specs, T, seed_fed, controller=ctrl).magnetization
                elif method == "spectral":
                    out[s, mi] = federation.run_federation(
                        xi, specs, T, seed_fed, controller=ctrl, reconstruct=signed_eigenvectors
                    ).magnetization
                elif method == "local":
                    per = np.stack([
                        federation.run_federation(xi, [specs[c]], T, seed_fed + c + 1, controller=ctrl).magnetization
                        for c in range(L)
                    ])
                    out[s, mi] = per.mean(axis=0)
                    lb[s] = per[np.argmax(per[:, -1].mean(axis=1))]
                else:
                    out[s, mi] = _oracle(xi, sched, M, r, seed_fed)
        mags[name], best[name] = out, lb
        summary[name] = {
            method: {
                "final_mean_magnetization": float(out[:, mi, -1].mean()),
                "final_min_archetype_mean": float(out[:, mi, -1].min(axis=1).mean()),
                "time_avg_magnetization": float(out[:, mi].mean()),
            }
            for mi, method in enumerate(p.methods)
        }
    return BaselinesResult(params=p, magnetization=mags, local_best=best, summary=summary)
