"""Experiment 5: structured archetypes (Caltech-101 silhouettes).

Three class prototypes of the Caltech-101 silhouettes (anchor, bass, "Motorbikes 16"; N = 784)
are the archetypes; noisy examples come from the same bit-flip channel as for random patterns.
The federation (L = 3 clients, constant weight w = 0.6 as in the paper) runs at two qualities,
r = 0.6 and r = 0.8, with the raw (strongly correlated) prototypes and with decorrelated
surrogates (:func:`fedlam.data.decorrelate`). The paper's version is its figure
"structured_results". The notebook is {ref}`sec-exp-structured`.
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
    check_positive_int,
    make_params as _make_params,
    seed_pairs,
)

__all__ = ["StructuredParams", "StructuredResult", "PRESETS", "make_params", "run"]


@dataclass(frozen=True)
class StructuredParams:
    """Parameters of the structured-data experiment.

    Paper (caption of its structured figure): N = 784, L = 3, K = 3, T = 12, M_total = 4000,
    w = 0.6, r ∈ {0.6, 0.8}, 10 seeds. The paper does not say how M_total is split; we use
    M_c = ceil(M_total / (L T)) examples per client per round (the paper's complexity appendix
    uses the same split). Decorrelation is our addition.

    Attributes
    ----------
    classes : tuple of str
        Silhouette classes used as archetypes.
    method : {"mean", "medoid"}
        Prototype construction (:func:`fedlam.data.structured_archetypes`).
    rs : tuple of float
        Channel qualities compared.
    decorrelated : tuple of bool
        Run with the raw prototypes (False) and/or decorrelated ones (True).
    L, T, M_total : int
        Clients, rounds and total example budget.
    controller : str or float
        Weight rule (paper: the constant 0.6).
    seeds : int
        Independent repetitions (fresh examples; the archetypes are fixed images).
    """

    classes: tuple = ("anchor", "bass", "Motorbikes 16")
    method: str = "mean"
    rs: tuple = (0.6, 0.8)
    decorrelated: tuple = (False, True)
    L: int = 3
    T: int = 12
    M_total: int = 4000
    controller: Any = 0.6
    seeds: int = 10

    def __post_init__(self) -> None:
        if not isinstance(self.classes, tuple) or len(self.classes) < 1:
            raise TypeError(f"classes must be a non-empty tuple of class names, got {self.classes!r}")
        check_choice(self.method, "method", ("mean", "medoid"))
        check_float_tuple(self.rs, "rs", 0.0, 1.0, low_open=True)
        if not isinstance(self.decorrelated, tuple) or len(self.decorrelated) == 0:
            raise TypeError(f"decorrelated must be a non-empty tuple of bools, got {self.decorrelated!r}")
        for i, d in enumerate(self.decorrelated):
            check_bool(d, f"decorrelated[{i}]")
        check_positive_int(self.L, "L")
        check_positive_int(self.T, "T")
        check_positive_int(self.M_total, "M_total")
        check_controllers((self.controller,), "controller")
        check_positive_int(self.seeds, "seeds")

    @property
    def M(self) -> int:
        """Examples per client per round, ceil(M_total / (L T))."""
        return math.ceil(self.M_total / (self.L * self.T))


PRESETS: dict[str, StructuredParams] = {
    "book": StructuredParams(seeds=2),
    "paper": StructuredParams(),
}


def make_params(preset: str = "book", **overrides: Any) -> StructuredParams:
    """Preset ``"book"`` or ``"paper"`` with field overrides (``None`` keeps the preset value)."""
    return _make_params(StructuredParams, PRESETS, preset, **overrides)


@dataclass(frozen=True)
class StructuredResult(JsonResult):
    """Arrays. Axes: (seed, quality r, decorrelation, round, ...).

    Attributes
    ----------
    params : StructuredParams
    archetypes : (D, K, 784) int8, the targets (raw and/or decorrelated).
    archetype_overlaps : (D, K, K) mutual overlaps ξ^μ·ξ^ν / N.
    examples : (R, K, 784) int8, one noisy example of each archetype at each r (raw prototypes).
    magnetization : (S, R, D, T, K) optimal one-to-one matching.
    magnetization_max : (S, R, D, T, K) the paper's max-overlap metric.
    k_hat, spurious : (S, R, D, T).
    reconstructions : (R, D, K, 784) int8, final patterns of seed 0 matched to the archetypes and
        sign-aligned (0 rows where no pattern was matched).
    """

    params: StructuredParams
    archetypes: np.ndarray
    archetype_overlaps: np.ndarray
    examples: np.ndarray
    magnetization: np.ndarray
    magnetization_max: np.ndarray
    k_hat: np.ndarray
    spurious: np.ndarray
    reconstructions: np.ndarray
    summary: dict = field(default_factory=dict)


def _matched(patterns: np.ndarray, archetypes: np.ndarray) -> np.ndarray:
    from fedlam import metrics

    K, N = archetypes.shape
    out = np.zeros((K, N), dtype=np.int8)
    if patterns.shape[0] == 0:
        return out
    m = metrics.match(patterns, archetypes)
    for pi, ai in zip(m.pattern_index, m.archetype_index):
        sign = 1 if m.overlap_matrix[pi, ai] >= 0 else -1
        out[ai] = sign * patterns[pi]
    return out


def run(params: StructuredParams, rng: Any) -> StructuredResult:
    """Run the structured federation for every (r, decorrelation) pair and seed."""
    if not isinstance(params, StructuredParams):
        raise TypeError(f"params must be a StructuredParams, got {type(params).__name__}")
    from fedlam import data, federation

    p = params
    raw = data.structured_archetypes(classes=p.classes, method=p.method)
    K, N = raw.shape
    arch = np.stack([data.decorrelate(raw) if d else raw for d in p.decorrelated])
    overl = np.einsum("dkn,dln->dkl", arch.astype(float), arch.astype(float)) / N
    R, D, S, T = len(p.rs), len(p.decorrelated), p.seeds, p.T
    mix = data.static_mixture(T, 1, K)[:, 0]
    seeds = seed_pairs(rng, S)
    ex_rng = np.random.default_rng(seeds[0][0])
    examples = np.stack([data.flip_channel(raw, r, ex_rng) for r in p.rs])
    mag = np.zeros((S, R, D, T, K))
    mmax = np.zeros((S, R, D, T, K))
    kh = np.zeros((S, R, D, T), dtype=np.int64)
    sp = np.zeros((S, R, D, T), dtype=np.int64)
    rec = np.zeros((R, D, K, N), dtype=np.int8)
    for s, (_seed_xi, seed_fed) in enumerate(seeds):
        for ri, r in enumerate(p.rs):
            specs = [federation.ClientSpec(r=r, M=p.M, mixture=mix) for _ in range(p.L)]
            for di in range(D):
                h = federation.run_federation(arch[di], specs, T, seed_fed, controller=p.controller)
                mag[s, ri, di], mmax[s, ri, di] = h.magnetization, h.magnetization_max
                kh[s, ri, di], sp[s, ri, di] = h.k_hat, h.spurious
                if s == 0:
                    rec[ri, di] = _matched(h.patterns[-1], arch[di])
    summary: dict = {"M_per_client_round": p.M, "archetype_overlaps": overl.round(3).tolist()}
    for ri, r in enumerate(p.rs):
        for di, d in enumerate(p.decorrelated):
            key = f"r={r:g}/{'decorrelated' if d else 'raw'}"
            summary[key] = {
                "final_magnetization_mean": mag[:, ri, di, -1].mean(axis=0).tolist(),
                "final_magnetization_std": mag[:, ri, di, -1].std(axis=0).tolist(),
                "final_magnetization_max_metric_mean": mmax[:, ri, di, -1].mean(axis=0).tolist(),
                "final_k_hat_mean": float(kh[:, ri, di, -1].mean()),
                "final_spurious_mean": float(sp[:, ri, di, -1].mean()),
            }
    return StructuredResult(params=p, archetypes=arch, archetype_overlaps=overl, examples=examples,
                            magnetization=mag, magnetization_max=mmax, k_hat=kh, spurious=sp,
                            reconstructions=rec, summary=summary)
