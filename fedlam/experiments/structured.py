"""Experiment 5: structured archetypes (Caltech-101 silhouettes), the paper's three and beyond.

Part 1, the paper's experiment: three class prototypes of the Caltech-101 silhouettes
(anchor, bass, "Motorbikes 16"; N = 784) are the archetypes; noisy examples come from the same
bit-flip channel as for random patterns. The federation (L = 3 clients, constant weight
w = 0.6 as in the paper) runs at two qualities, r = 0.6 and r = 0.8, with the raw (correlated)
prototypes and with decorrelated surrogates (:func:`fedlam.data.decorrelate`). The paper's
version is its figure "structured_results".

Part 2, beyond three classes: random class subsets of K = 3, 5, 8, 10 classes (seeded), their
overlap structure, and the factorization of one operator per subset -- the exact operator
``xi^T xi / N`` and one Hebbian operator of ``examples_per_class * K`` noisy examples at each r
-- by the default in-span search and, for comparison, the tuned LAM (``search="lam"``); then
federations (L clients, the paper's constant weight) on the first subsets of each K.

:func:`explore` (one operator of one random subset: K, subset, r, M) is the pure function
behind the notebook's explorer; :func:`sign_gram_schmidt` is the authors' preprocessing
(their draft's eq. ``struct_decorr``), written from the formula. The notebook is
{ref}`sec-exp-structured`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlam._validation import as_rng, check_pm1
from fedlam.experiments._common import (
    JsonResult,
    check_bool,
    check_choice,
    check_controllers,
    check_float_tuple,
    check_int_tuple,
    check_nonneg_int,
    check_positive_int,
    check_quality,
    seed_pairs,
)
from fedlam.experiments._common import (
    make_params as _make_params,
)

__all__ = [
    "StructuredParams",
    "StructuredResult",
    "SubsetRun",
    "PRESETS",
    "SEARCHES",
    "N_CLASSES",
    "make_params",
    "run",
    "random_class_subsets",
    "overlap_structure",
    "mean_structure",
    "factorize_subset",
    "explore",
    "sign_gram_schmidt",
    "setting_table",
    "overlap_table",
    "example_table",
    "magnetization_table",
    "reconstruction_table",
    "paper_table",
    "subset_table",
    "subset_detail_table",
    "federation_table",
]

#: number of classes in the Caltech-101 silhouettes shipped with fedlam
N_CLASSES = 101
#: factorization searches compared on single operators
SEARCHES = ("span", "lam")
#: a reconstruction counts as recovering an archetype at magnetization >= this
RECOVERED = 0.95
#: largest number of classes in one subset and largest example count (refused before any work)
MAX_K = 40
MAX_EXAMPLES = 20_000


@dataclass(frozen=True)
class StructuredParams:
    """Parameters of the structured-data experiment.

    Paper (caption of its structured figure): N = 784, L = 3, K = 3, T = 12, M_total = 4000,
    w = 0.6, r ∈ {0.6, 0.8}, 10 seeds. The paper does not say how M_total is split; we use
    M_c = ceil(M_total / (L T)) examples per client per round (the paper's complexity appendix
    uses the same split). Decorrelation and everything beyond three classes are our additions.

    Attributes
    ----------
    classes : tuple of str
        The paper's silhouette classes (part 1).
    method : {"mean", "medoid"}
        Prototype construction (:func:`fedlam.data.structured_archetypes`), both parts.
    rs : tuple of float
        Channel qualities compared (both parts).
    decorrelated : tuple of bool
        Part 1: run with the raw prototypes (False) and/or decorrelated ones (True).
    L, T, M_total : int
        Part 1: clients, rounds and total example budget. ``L`` clients also in part 2.
    controller : str or float
        Weight rule (paper: the constant 0.6), both parts.
    seeds : int
        Part 1: independent repetitions (fresh examples; the archetypes are fixed images).
    Ks : tuple of int
        Part 2: numbers of classes of the random subsets (each in [2, 40]).
    n_subsets : int
        Part 2: random class subsets per K (:func:`random_class_subsets`).
    subset_seed : int
        Seed of the class draws (the subsets of a smaller ``n_subsets`` are the first ones of a
        larger one).
    examples_per_class : int
        Part 2, single operators: ``M = examples_per_class * K`` examples, equal exposures.
    searches : tuple of str
        Part 2, single operators: factorization searches compared (``"span"``, the default of
        :func:`fedlam.lam.factorize`, and ``"lam"``, the tuned LAM).
    fed_subsets : int
        Part 2: federations run on the first ``fed_subsets`` subsets of each K (0: none).
    fed_T : int
        Part 2: rounds of each federation.
    fed_examples_per_class : int
        Part 2: examples per client per round, ``fed_examples_per_class * K``.
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
    Ks: tuple = (3, 5, 8, 10)
    n_subsets: int = 10
    subset_seed: int = 2024
    examples_per_class: int = 120
    searches: tuple = SEARCHES
    fed_subsets: int = 3
    fed_T: int = 12
    fed_examples_per_class: int = 40

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
        Ks = check_int_tuple(self.Ks, "Ks", minimum=2)
        if max(Ks) > MAX_K:
            raise ValueError(f"Ks entries must be <= {MAX_K}, got {self.Ks!r}")
        if len(set(Ks)) != len(Ks):
            raise ValueError(f"Ks must not repeat entries, got {self.Ks!r}")
        check_positive_int(self.n_subsets, "n_subsets")
        check_nonneg_int(self.subset_seed, "subset_seed")
        epc = check_positive_int(self.examples_per_class, "examples_per_class")
        if epc * max(Ks) > MAX_EXAMPLES:
            raise ValueError(f"examples_per_class * max(Ks) must be <= {MAX_EXAMPLES}, got "
                             f"{epc} * {max(Ks)}")
        if not isinstance(self.searches, tuple) or len(self.searches) == 0:
            raise TypeError(f"searches must be a non-empty tuple of {SEARCHES}, got {self.searches!r}")
        for i, s in enumerate(self.searches):
            check_choice(s, f"searches[{i}]", SEARCHES)
        if len(set(self.searches)) != len(self.searches):
            raise ValueError(f"searches must not repeat entries, got {self.searches!r}")
        fs = check_nonneg_int(self.fed_subsets, "fed_subsets")
        if fs > self.n_subsets:
            raise ValueError(f"fed_subsets must be <= n_subsets = {self.n_subsets}, got {fs}")
        check_positive_int(self.fed_T, "fed_T")
        fe = check_positive_int(self.fed_examples_per_class, "fed_examples_per_class")
        if fe * max(Ks) > MAX_EXAMPLES:
            raise ValueError(f"fed_examples_per_class * max(Ks) must be <= {MAX_EXAMPLES}, got "
                             f"{fe} * {max(Ks)}")

    @property
    def M(self) -> int:
        """Examples per client per round in part 1, ceil(M_total / (L T))."""
        return math.ceil(self.M_total / (self.L * self.T))


#: ``"paper"``: part 1 (the paper's three classes) at the paper's sizes and 10 seeds; part 2 (our
#: class subsets K = 3-10) at the book's size. ``"full"``: part 2 too at its full size (10 subsets
#: per K, federations on 3 of them over 12 rounds).
PRESETS: dict[str, StructuredParams] = {
    "book": StructuredParams(seeds=1, n_subsets=3, fed_subsets=1, fed_T=3),
    "paper": StructuredParams(n_subsets=3, fed_subsets=1, fed_T=3),
    "full": StructuredParams(),
}


def make_params(preset: str = "book", **overrides: Any) -> StructuredParams:
    """Preset ``"book"``, ``"paper"`` or ``"full"`` (see ``PRESETS``) with field overrides (``None`` keeps
    the preset value)."""
    return _make_params(StructuredParams, PRESETS, preset, **overrides)


# ----------------------------------------------------------------------------------------
# class subsets and one operator per subset
def random_class_subsets(K: int, n: int, seed: int = 2024, n_classes: int = N_CLASSES) -> list[tuple[int, ...]]:
    """``n`` random subsets of ``K`` distinct class indices out of ``n_classes``.

    Subset ``s`` is drawn from ``numpy.random.default_rng([seed, K, s])``, so the first subsets
    do not depend on ``n`` (the book's subsets are the first of the paper preset's).
    Derived in {ref}`sec-exp-structured-subsets`.

    Returns
    -------
    list of tuple of int
        Each tuple in draw order.
    """
    K = check_positive_int(K, "K")
    n = check_positive_int(n, "n")
    seed = check_nonneg_int(seed, "seed")
    n_classes = check_positive_int(n_classes, "n_classes")
    if K > n_classes:
        raise ValueError(f"K must be <= n_classes = {n_classes}, got {K}")
    return [tuple(int(c) for c in np.random.default_rng([seed, K, s]).choice(n_classes, K, replace=False))
            for s in range(n)]


def overlap_structure(patterns: np.ndarray) -> dict[str, float]:
    """Largest and mean absolute pairwise overlap and the smallest eigenvalue of ``X X^T / N``.

    The smallest eigenvalue of the overlap matrix measures how close the family is to linear
    dependence (0: dependent; 1: orthogonal). Derived in {ref}`sec-exp-structured-subsets`.
    """
    check_pm1(patterns, "patterns", ndim=2)
    K, N = patterns.shape
    X = patterns.astype(np.float64)
    O = X @ X.T / N
    off = np.abs(O[~np.eye(K, dtype=bool)])
    return {
        "max": float(off.max()) if K > 1 else 0.0,
        "mean": float(off.mean()) if K > 1 else 0.0,
        "min_eig": float(np.linalg.eigvalsh(O)[0]),
    }


def mean_structure(patterns: np.ndarray) -> dict[str, Any]:
    """The mean component of a +-1 family and the spectrum of its exact operator.

    With the mean pattern ``m = sum_mu xi^mu / K`` the exact operator splits as
    ``J = K m m^T / N + sum_mu d^mu d^mu^T / N`` (``d^mu = xi^mu - m``, the cross terms cancel),
    and ``K |m|^2 / N = 1 + (K - 1) q_bar`` with ``q_bar`` the mean signed pairwise overlap, a
    lower bound on the top eigenvalue of ``J``. Derived in {ref}`sec-exp-structured`.

    Returns
    -------
    dict
        ``q_bar`` (mean signed pairwise overlap), ``mean_weight`` (``K |m|^2 / N``),
        ``gram_eigenvalues`` (eigenvalues of ``X X^T / N``, descending; the non-zero spectrum of
        ``J``), ``cos_top_mean`` (|cosine| between the top eigenvector of ``J`` and ``m``),
        ``top_share`` (each archetype's squared share ``(v_1 . xi^mu)^2 / N`` along the top
        eigenvector) and ``sign_top_overlaps`` (``|sgn(v_1) . xi^mu| / N``).
    """
    check_pm1(patterns, "patterns", ndim=2)
    K, N = patterns.shape
    if K < 2:
        raise ValueError(f"patterns must hold K >= 2 patterns, got shape {patterns.shape}")
    X = patterns.astype(np.float64)
    G = X @ X.T / N
    g, A = np.linalg.eigh(G)
    v1 = X.T @ A[:, -1]  # the top eigenvector of X^T X / N, from the K x K problem
    v1 /= np.linalg.norm(v1)
    mean = X.mean(axis=0)
    return {
        "q_bar": float(G[np.triu_indices(K, 1)].mean()),
        "mean_weight": float(K * (mean @ mean) / N),
        "gram_eigenvalues": g[::-1].copy(),
        "cos_top_mean": float(abs(v1 @ mean) / np.linalg.norm(mean)) if mean.any() else 0.0,
        "top_share": (X @ v1) ** 2 / N,
        "sign_top_overlaps": np.abs(X @ np.where(v1 >= 0, 1.0, -1.0)) / N,
    }


@dataclass(frozen=True)
class SubsetRun:
    """One operator of one class subset, factorized (:func:`factorize_subset`).

    Attributes
    ----------
    classes : tuple of int
    names : tuple of str
    archetypes : (K, 784) int8
    r : float or None
        Channel quality of the examples (None: the exact operator ``xi^T xi / N``).
    M : int
        Number of examples (0 for the exact operator).
    search : str
    k_hat, n_accepted, recovered, spurious : int
        Detected spikes, accepted patterns, archetypes with ``m >= 0.95``, spurious patterns
        (:func:`fedlam.metrics.spurious_count`).
    magnetization : (K,) float
        Optimal one-to-one matching.
    reconstructions : (K, 784) int8
        Accepted patterns matched to the archetypes, sign-aligned (0 rows where unmatched).
    overlaps : dict
        :func:`overlap_structure` of the archetypes.
    """

    classes: tuple
    names: tuple
    archetypes: np.ndarray
    r: float | None
    M: int
    search: str
    k_hat: int
    n_accepted: int
    recovered: int
    spurious: int
    magnetization: np.ndarray
    reconstructions: np.ndarray
    overlaps: dict

    def __repr__(self) -> str:  # arrays capped
        op = "exact operator" if self.r is None else f"r = {self.r:g}, M = {self.M}"
        return (f"SubsetRun(K={len(self.classes)}, {op}, search={self.search!r}, k_hat={self.k_hat}, "
                f"accepted={self.n_accepted}, recovered={self.recovered}, spurious={self.spurious}, "
                f"min m={float(self.magnetization.min()):.3f})")


def _matched(patterns: np.ndarray, archetypes: np.ndarray) -> np.ndarray:
    from fedlam import metrics

    K, N = archetypes.shape
    out = np.zeros((K, N), dtype=np.int8)
    if patterns.shape[0] == 0:
        return out
    m = metrics.match(patterns, archetypes)
    for pi, ai in zip(m.pattern_index, m.archetype_index, strict=True):
        sign = 1 if m.overlap_matrix[pi, ai] >= 0 else -1
        out[ai] = sign * patterns[pi]
    return out


def factorize_subset(
    classes: Sequence[str | int],
    r: float | None = None,
    M: int = 0,
    rng: Any = 0,
    *,
    method: str = "mean",
    search: str = "span",
    archetypes: np.ndarray | None = None,
) -> SubsetRun:
    """Factorize one operator built from the prototypes of ``classes``.

    ``r=None``: the exact operator ``xi^T xi / N`` (``M`` ignored); otherwise the Hebbian
    operator of ``M`` examples with equal exposures through the bit-flip channel of quality
    ``r``. :func:`fedlam.lam.factorize` with ``search`` (the true K is never used). Derived in
    {ref}`sec-exp-structured-subsets`.

    Parameters
    ----------
    classes : sequence of str or int
    r : float or None
    M : int
        Examples (>= 1 when ``r`` is given, at most 20000).
    rng : Generator or int
        Examples and the factorization's starts.
    method : {"mean", "medoid"}
    search : {"span", "lam"}
    archetypes : numpy.ndarray or None
        The prototypes of ``classes`` if already computed (saves loading the data again).
    """
    from fedlam import data, lam, metrics, operators

    search = check_choice(search, "search", SEARCHES)
    gen = as_rng(rng)
    all_names = _class_names()
    idx = _class_indices(classes)
    xi = data.structured_archetypes(idx, method=method) if archetypes is None else archetypes
    check_pm1(xi, "archetypes", ndim=2)
    if xi.shape[0] != len(idx):
        raise ValueError(f"archetypes must have one row per class ({len(idx)}), got shape {xi.shape}")
    K = xi.shape[0]
    if r is None:
        J = operators.pattern_operator(xi)
        M = 0
    else:
        r = check_quality(r, "r")
        M = check_positive_int(M, "M")
        if M > MAX_EXAMPLES:
            raise ValueError(f"M must be <= {MAX_EXAMPLES}, got {M}")
        eta, _ = data.sample_examples(xi, M, r, np.full(K, 1.0 / K), gen)
        J = operators.hebbian(eta)
    res = lam.factorize(J, rng=gen, search=search)
    m = metrics.magnetization(res.patterns, xi)
    return SubsetRun(
        classes=tuple(idx), names=tuple(all_names[i] for i in idx), archetypes=xi,
        r=None if r is None else float(r), M=int(M), search=search, k_hat=int(res.k_hat),
        n_accepted=res.n_accepted, recovered=int(np.count_nonzero(m >= RECOVERED)),
        spurious=metrics.spurious_count(res.patterns, xi), magnetization=m,
        reconstructions=_matched(res.patterns, xi), overlaps=overlap_structure(xi),
    )


@functools.lru_cache(maxsize=1)
def _names_cached() -> tuple[str, ...]:
    from fedlam import data

    return tuple(data.load_silhouettes()[2])


def _class_names() -> list[str]:
    return list(_names_cached())


def _class_indices(classes: Sequence[str | int]) -> list[int]:
    """Class names or indices -> indices (validated; distinct)."""
    names = _names_cached()
    if isinstance(classes, (str, bytes)) or not isinstance(classes, Sequence) or len(classes) == 0:
        raise TypeError(f"classes must be a non-empty sequence of class names or indices, got {classes!r}")
    out = []
    for c in classes:
        if isinstance(c, str):
            if c not in names:
                raise ValueError(f"classes: unknown class name {c!r}")
            out.append(names.index(c))
        elif isinstance(c, (int, np.integer)) and not isinstance(c, (bool, np.bool_)):
            if not 0 <= int(c) < len(names):
                raise ValueError(f"classes: class index must lie in [0, {len(names) - 1}], got {int(c)}")
            out.append(int(c))
        else:
            raise TypeError(f"classes entries must be str or int, got {type(c).__name__}")
    if len(set(out)) != len(out):
        raise ValueError(f"classes must be distinct, got {list(classes)!r}")
    return out


def explore(K: int = 8, subset: int = 0, r: float = 0.6, M: int = 480, seed: int = 0,
            subset_seed: int = 2024, search: str = "span") -> SubsetRun:
    """The notebook's explorer: one operator of ``M`` examples at quality ``r`` of random subset
    number ``subset`` of ``K`` classes (:func:`random_class_subsets`), factorized.

    Every parameter changes the result: K and subset pick the images, r and M the noise. Below
    ``M = N/4 = 196`` examples the operator is rank-deficient and is read as the exact operator
    of its own examples (K-hat = M, {ref}`sec-lam-identifiability`); a weak (small-eigenvalue)
    direction of a correlated family needs more examples than a random one. Derived in
    {ref}`sec-exp-structured-explorer`.
    """
    K = check_positive_int(K, "K", minimum=2)
    if K > MAX_K:
        raise ValueError(f"K must be <= {MAX_K}, got {K}")
    subset = check_nonneg_int(subset, "subset")
    classes = random_class_subsets(K, subset + 1, subset_seed)[subset]
    return factorize_subset(classes, r, M, seed, search=search)


def sign_gram_schmidt(patterns: np.ndarray) -> np.ndarray:
    """The authors' decorrelation of structured archetypes: projection, then sign, one by one.

    For ``mu = 1..K``: ``v^mu = x^mu - sum_{nu < mu} (<xi^nu, x^mu> / N) xi^nu`` and
    ``xi^mu = sgn(v^mu)`` (``sgn 0 = +1``), with ``x`` the input and ``xi`` the output patterns
    (eq. ``struct_decorr`` of the authors' draft; not in the paper). At a site ``i``,
    ``v^mu_i = x^mu_i - sum_nu q_nu xi^nu_i`` with ``|x^mu_i| = 1``: the sign can change only
    where ``sum_{nu<mu} |q_nu| >= 1``. Derived in {ref}`sec-exp-structured-authors`.

    Parameters
    ----------
    patterns : numpy.ndarray
        (K, N) +-1.

    Returns
    -------
    numpy.ndarray
        int8 (K, N).
    """
    check_pm1(patterns, "patterns", ndim=2)
    X = patterns.astype(np.float64)
    K, N = X.shape
    out = np.zeros_like(X)
    for mu in range(K):
        v = X[mu].copy()
        for nu in range(mu):
            v -= (out[nu] @ X[mu]) / N * out[nu]
        out[mu] = np.where(v >= 0.0, 1.0, -1.0)
    return out.astype(np.int8)


# ----------------------------------------------------------------------------------------
# the experiment
@dataclass(frozen=True)
class StructuredResult(JsonResult):
    """Arrays. Part 1 axes: (seed, quality r, decorrelation, round, ...). Part 2 axes:
    (K, subset, condition, search) with conditions ``("exact",) + rs``.

    Attributes
    ----------
    params : StructuredParams
    archetypes : (D, K, 784) int8, the part-1 targets (raw and/or decorrelated).
    archetype_overlaps : (D, K, K) mutual overlaps ξ^μ·ξ^ν / N.
    examples : (R, K, 784) int8, one noisy example of each archetype at each r (raw prototypes).
    magnetization : (S, R, D, T, K) optimal one-to-one matching.
    magnetization_max : (S, R, D, T, K) the paper's max-overlap metric.
    k_hat, spurious : (S, R, D, T).
    reconstructions : (R, D, K, 784) int8, final patterns of seed 0 matched to the archetypes and
        sign-aligned (0 rows where no pattern was matched).
    subsets : tuple, per K a tuple of ``n_subsets`` class-index tuples (part 2).
    subset_overlap_max, subset_overlap_mean, subset_min_eig : (nK, n_subsets)
        :func:`overlap_structure` of each subset.
    single_k_hat, single_accepted, single_recovered, single_spurious : (nK, n_subsets, 1 + R, nS) int
    single_min_m : (nK, n_subsets, 1 + R, nS) float
        One operator per subset and condition (exact, then each r), factorized by each search.
    paper_single_* : (1 + R, nS)
        The same for the paper's three classes.
    fed_k_hat, fed_recovered, fed_spurious : (nK, fed_subsets, R, fed_T) int
    fed_min_m : (nK, fed_subsets, R, fed_T) float
        Federations on the first subsets of each K, every round.
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
    subsets: tuple = ()
    subset_overlap_max: np.ndarray = field(default_factory=lambda: np.empty(0))
    subset_overlap_mean: np.ndarray = field(default_factory=lambda: np.empty(0))
    subset_min_eig: np.ndarray = field(default_factory=lambda: np.empty(0))
    single_k_hat: np.ndarray = field(default_factory=lambda: np.empty(0))
    single_accepted: np.ndarray = field(default_factory=lambda: np.empty(0))
    single_recovered: np.ndarray = field(default_factory=lambda: np.empty(0))
    single_spurious: np.ndarray = field(default_factory=lambda: np.empty(0))
    single_min_m: np.ndarray = field(default_factory=lambda: np.empty(0))
    paper_single_k_hat: np.ndarray = field(default_factory=lambda: np.empty(0))
    paper_single_recovered: np.ndarray = field(default_factory=lambda: np.empty(0))
    paper_single_spurious: np.ndarray = field(default_factory=lambda: np.empty(0))
    paper_single_min_m: np.ndarray = field(default_factory=lambda: np.empty(0))
    fed_k_hat: np.ndarray = field(default_factory=lambda: np.empty(0))
    fed_recovered: np.ndarray = field(default_factory=lambda: np.empty(0))
    fed_spurious: np.ndarray = field(default_factory=lambda: np.empty(0))
    fed_min_m: np.ndarray = field(default_factory=lambda: np.empty(0))
    summary: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        p = self.params
        return (f"StructuredResult(part 1: K={self.archetypes.shape[1]}, rs={p.rs}, seeds={p.seeds}; "
                f"part 2: Ks={p.Ks}, n_subsets={p.n_subsets}, fed_subsets={p.fed_subsets})")


def _part1_setup(p: StructuredParams, seeds: list[tuple[int, int]]) -> dict:
    """Part 1's fixed arrays: archetypes (raw and/or decorrelated), their overlaps, example images."""
    from fedlam import data

    raw = data.structured_archetypes(classes=p.classes, method=p.method)
    N = raw.shape[1]
    arch = np.stack([data.decorrelate(raw) if d else raw for d in p.decorrelated])
    overl = np.einsum("dkn,dln->dkl", arch.astype(float), arch.astype(float)) / N
    ex_rng = np.random.default_rng(seeds[0][0])
    examples = np.stack([data.flip_channel(raw, r, ex_rng) for r in p.rs])
    return dict(archetypes=arch, archetype_overlaps=overl, examples=examples)


def _part1_task(p: StructuredParams, xi: np.ndarray, r: float, seed_fed: int) -> tuple:
    """One part-1 federation (archetypes ``xi``, quality ``r``, seed ``seed_fed``): the
    magnetizations (both metrics), K̂, spurious counts per round and the final patterns matched
    to ``xi``. One task of :func:`run`."""
    from fedlam import data, federation

    K, T = xi.shape[0], p.T
    mix = data.static_mixture(T, 1, K)[:, 0]
    specs = [federation.ClientSpec(r=r, M=p.M, mixture=mix) for _ in range(p.L)]
    h = federation.run_federation(xi, specs, T, seed_fed, controller=p.controller)
    return h.magnetization, h.magnetization_max, h.k_hat, h.spurious, _matched(h.patterns[-1], xi)


def _part1(p: StructuredParams, setup: dict, seeds: list[tuple[int, int]], results: list) -> dict:
    """Assemble part 1 from the results of the ``_part1_task`` tasks in (seed, r, decorrelation) order."""
    arch = setup["archetypes"]
    D, K, N = arch.shape
    R, S, T = len(p.rs), p.seeds, p.T
    mag = np.zeros((S, R, D, T, K))
    mmax = np.zeros((S, R, D, T, K))
    kh = np.zeros((S, R, D, T), dtype=np.int64)
    sp = np.zeros((S, R, D, T), dtype=np.int64)
    rec = np.zeros((R, D, K, N), dtype=np.int8)
    it = iter(results)
    for s in range(S):
        for ri in range(R):
            for di in range(D):
                mag[s, ri, di], mmax[s, ri, di], kh[s, ri, di], sp[s, ri, di], final = next(it)
                if s == 0:
                    rec[ri, di] = final
    return dict(setup, magnetization=mag, magnetization_max=mmax, k_hat=kh, spurious=sp, reconstructions=rec)


def _single_grid(p: StructuredParams, xi: np.ndarray, classes: tuple, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(1 + R, nS, 4) array of (k_hat, accepted, recovered, spurious) and a (1 + R, nS) min m."""
    conds: list[float | None] = [None, *p.rs]
    K = xi.shape[0]
    ints = np.zeros((len(conds), len(p.searches), 4), dtype=np.int64)
    mins = np.zeros((len(conds), len(p.searches)))
    for ci, r in enumerate(conds):
        for si, search in enumerate(p.searches):
            # every search sees the same examples (same seed); starts differ only by the search
            run_ = factorize_subset(classes, r, p.examples_per_class * K, np.random.default_rng([seed, ci]),
                                    method=p.method, search=search, archetypes=xi)
            ints[ci, si] = (run_.k_hat, run_.n_accepted, run_.recovered, run_.spurious)
            mins[ci, si] = float(run_.magnetization.min())
    return ints, mins


def _subset_task(p: StructuredParams, ki: int, s: int, classes: tuple, seed_single: int,
                 seed_fed: int) -> tuple:
    """Part 2 on one class subset (the ``s``-th of ``K = p.Ks[ki]``): its overlap structure, the
    single-operator grid and, for ``s < fed_subsets``, the federations at each r. One task of
    :func:`run`."""
    from fedlam import data, federation

    K = p.Ks[ki]
    R, Tf = len(p.rs), p.fed_T
    xi = data.structured_archetypes(list(classes), method=p.method)
    o = overlap_structure(xi)
    ints, mins = _single_grid(p, xi, classes, seed_single)
    fed = None
    if s < p.fed_subsets:
        fed = (np.zeros((R, Tf), dtype=np.int64), np.zeros((R, Tf), dtype=np.int64),
               np.zeros((R, Tf), dtype=np.int64), np.zeros((R, Tf)))
        mix = data.static_mixture(Tf, p.L, K)
        for ri, r in enumerate(p.rs):
            specs = [federation.ClientSpec(r=r, M=p.fed_examples_per_class * K, mixture=mix[:, c])
                     for c in range(p.L)]
            h = federation.run_federation(xi, specs, Tf, seed_fed, controller=p.controller)
            fed[0][ri], fed[2][ri] = h.k_hat, h.spurious
            fed[1][ri] = np.count_nonzero(h.magnetization >= RECOVERED, axis=1)
            fed[3][ri] = h.magnetization.min(axis=1)
    return (o["max"], o["mean"], o["min_eig"]), ints, mins, fed


def _paper_grid_task(p: StructuredParams, seed_single: int) -> tuple:
    """Part 2's single-operator grid on the paper's three classes. One task of :func:`run`."""
    from fedlam import data

    paper_xi = data.structured_archetypes(classes=p.classes, method=p.method)
    return _single_grid(p, paper_xi, tuple(_class_indices(p.classes)), seed_single)


def _part2_tasks(p: StructuredParams, gen: np.random.Generator) -> tuple[tuple, list]:
    """Part 2's subsets and tasks (every seed drawn here, up front, in the order of the serial loop)."""
    nsub = p.n_subsets
    subsets = tuple(tuple(random_class_subsets(K, nsub, p.subset_seed)) for K in p.Ks)
    single_seeds = seed_pairs(gen, len(p.Ks) * nsub)
    paper_seed = seed_pairs(gen, 1)[0]
    tasks: list[tuple] = [(_subset_task, p, ki, s, cls, *single_seeds[ki * nsub + s])
                          for ki in range(len(p.Ks)) for s, cls in enumerate(subsets[ki])]
    tasks.append((_paper_grid_task, p, paper_seed[0]))
    return subsets, tasks


def _part2(p: StructuredParams, subsets: tuple, results: list) -> dict:
    """Assemble part 2 from the results of :func:`_part2_tasks`' tasks (in their order)."""
    nK, nsub, R, nS = len(p.Ks), p.n_subsets, len(p.rs), len(p.searches)
    C = 1 + R
    ov_max = np.zeros((nK, nsub))
    ov_mean = np.zeros((nK, nsub))
    ov_eig = np.zeros((nK, nsub))
    ints = np.zeros((nK, nsub, C, nS, 4), dtype=np.int64)
    mins = np.zeros((nK, nsub, C, nS))
    F, Tf = p.fed_subsets, p.fed_T
    fk = np.zeros((nK, F, R, Tf), dtype=np.int64)
    frec = np.zeros((nK, F, R, Tf), dtype=np.int64)
    fsp = np.zeros((nK, F, R, Tf), dtype=np.int64)
    fmin = np.zeros((nK, F, R, Tf))
    for ki in range(nK):
        for s in range(nsub):
            o, ints[ki, s], mins[ki, s], fed = results[ki * nsub + s]
            ov_max[ki, s], ov_mean[ki, s], ov_eig[ki, s] = o
            if s < F:
                fk[ki, s], frec[ki, s], fsp[ki, s], fmin[ki, s] = fed
    pints, pmins = results[nK * nsub]
    return dict(
        subsets=subsets, subset_overlap_max=ov_max, subset_overlap_mean=ov_mean, subset_min_eig=ov_eig,
        single_k_hat=ints[..., 0], single_accepted=ints[..., 1], single_recovered=ints[..., 2],
        single_spurious=ints[..., 3], single_min_m=mins,
        paper_single_k_hat=pints[..., 0], paper_single_recovered=pints[..., 2],
        paper_single_spurious=pints[..., 3], paper_single_min_m=pmins,
        fed_k_hat=fk, fed_recovered=frec, fed_spurious=fsp, fed_min_m=fmin,
    )


def _call(fn: Any, *args: Any) -> Any:
    """``fn(*args)``: lets one :func:`map_seeds` call run tasks of several module-level functions."""
    return fn(*args)


def run(params: StructuredParams, rng: Any, executor: Any = None) -> StructuredResult:
    """Run part 1 (the paper's three classes, federations) and part 2 (random class subsets).

    ``executor`` (a :class:`concurrent.futures.Executor`, e.g. a Dask client's executor; None:
    serial, or the cluster named by ``FEDLAM_SCHEDULER``) runs the independent tasks -- each
    part-1 federation (seed, r, decorrelation), each part-2 class subset, the paper classes'
    single-operator grid -- through :func:`fedlam.experiments._executor.map_seeds`. Every seed is
    drawn from ``rng`` up front, so the result does not depend on the executor.
    """
    from fedlam.experiments._executor import map_seeds

    if not isinstance(params, StructuredParams):
        raise TypeError(f"params must be a StructuredParams, got {type(params).__name__}")
    p = params
    gen = as_rng(rng)
    seeds = seed_pairs(gen, p.seeds)
    setup = _part1_setup(p, seeds)
    tasks1 = [(_part1_task, p, setup["archetypes"][di], r, seed_fed)
              for _seed_xi, seed_fed in seeds for r in p.rs for di in range(len(p.decorrelated))]
    subsets, tasks2 = _part2_tasks(p, gen)
    results = map_seeds(_call, tasks1 + tasks2, executor)
    one = _part1(p, setup, seeds, results[:len(tasks1)])
    two = _part2(p, subsets, results[len(tasks1):])
    summary: dict = {"M_per_client_round": p.M, "archetype_overlaps": one["archetype_overlaps"].round(3).tolist()}
    mag, mmax, kh, sp = one["magnetization"], one["magnetization_max"], one["k_hat"], one["spurious"]
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
    conds = ["exact"] + [f"r={r:g}" for r in p.rs]
    for ki, K in enumerate(p.Ks):
        for ci, c in enumerate(conds):
            for si, search in enumerate(p.searches):
                rec = two["single_recovered"][ki, :, ci, si]
                summary[f"K={K}/{c}/{search}"] = {
                    "subsets_all_recovered": int(np.count_nonzero(rec == K)),
                    "recovered": int(rec.sum()), "of": int(K * p.n_subsets),
                    "spurious": int(two["single_spurious"][ki, :, ci, si].sum()),
                }
        if p.fed_subsets:
            summary[f"K={K}/federation"] = {
                f"r={r:g}": {"final_recovered": two["fed_recovered"][ki, :, ri, -1].tolist(),
                             "min_m_all_rounds": float(two["fed_min_m"][ki, :, ri].min()),
                             "max_spurious": int(two["fed_spurious"][ki, :, ri].max())}
                for ri, r in enumerate(p.rs)
            }
    return StructuredResult(params=p, **one, **two, summary=summary)


# ----------------------------------------------------------------------------------------
# the page's tables ({ref}`sec-exp-structured`): one titled table per output
def _check_result(res: Any) -> StructuredResult:
    if not isinstance(res, StructuredResult):
        raise TypeError(f"res must be a StructuredResult, got {type(res).__name__}")
    return res


def _short_names(p: StructuredParams) -> list[str]:
    """Display names of the part-1 classes ("Motorbikes 16" -> "motorbike")."""
    short = {"Motorbikes 16": "motorbike"}
    return [short.get(c, c) for c in p.classes]


def _target_labels(p: StructuredParams) -> list[str]:
    return ["raw prototypes" if not d else "decorrelated" for d in p.decorrelated]


def _overlaps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise overlaps a_k . b_k / N of two (K, N) arrays."""
    return np.einsum("kn,kn->k", a.astype(float), b.astype(float)) / a.shape[1]


def setting_table(params: StructuredParams) -> Any:
    """The experiment's setting as a titled table (one row per parameter group)."""
    from fedlam.experiments._common import TitledTable, controller_label

    if not isinstance(params, StructuredParams):
        raise TypeError(f"params must be a StructuredParams, got {type(params).__name__}")
    p = params
    rows = [
        ("part 1: classes (prototypes by the pixel-wise " + p.method + ")", ", ".join(p.classes)),
        ("part 1: clients L, rounds T, examples in all", f"{p.L}, {p.T}, {p.M_total}"),
        ("part 1: examples per client and round", f"{p.M}"),
        ("part 1: targets", ", ".join(_target_labels(p))),
        ("channel quality r", ", ".join(f"{r:g}" for r in p.rs)),
        ("weight rule", controller_label(p.controller)),
        ("part 1: seeds", f"{p.seeds}"),
        ("part 2: classes K per subset, subsets per K", f"{', '.join(map(str, p.Ks))}; {p.n_subsets}"),
        ("part 2: examples per class (one operator), searches",
         f"{p.examples_per_class}; {', '.join(p.searches)}"),
        ("part 2: federated subsets per K, rounds", f"{p.fed_subsets}, {p.fed_T}"),
        ("part 2: examples per class and client (federations)", f"{p.fed_examples_per_class}"),
    ]
    return TitledTable("Setting", rows, ("parameter", "value"))


def overlap_table(res: StructuredResult) -> Any:
    """Mutual overlaps of the part-1 targets (raw and decorrelated) and the overlap of each
    decorrelated surrogate with its raw prototype."""
    from fedlam.experiments._common import TitledTable

    res = _check_result(res)
    p, names = res.params, _short_names(res.params)
    labs = _target_labels(p)
    K = res.archetypes.shape[1]
    rows = [(f"{names[i]} – {names[j]}", *(f"{res.archetype_overlaps[d][i, j]:.3f}" for d in range(len(labs))))
            for i in range(K) for j in range(i + 1, K)]
    if False in p.decorrelated and True in p.decorrelated:
        raw, dec = p.decorrelated.index(False), p.decorrelated.index(True)
        own = _overlaps(res.archetypes[raw], res.archetypes[dec])
        rows += [(f"{names[k]}: surrogate with its prototype",
                  *("—" if d == raw else f"{own[k]:.3f}" for d in range(len(labs)))) for k in range(K)]
    return TitledTable("Overlaps of the three targets", rows, ("pair", *labs))


def example_table(res: StructuredResult) -> Any:
    """Overlap of each shown noisy example with its raw prototype, per r (close to r)."""
    from fedlam.experiments._common import TitledTable

    res = _check_result(res)
    p = res.params
    raw = res.archetypes[p.decorrelated.index(False)] if False in p.decorrelated else res.archetypes[0]
    rows = [(f"{r:g}", *(f"{x:.3f}" for x in _overlaps(res.examples[ri], raw))) for ri, r in enumerate(p.rs)]
    return TitledTable("Overlap of each shown example with its prototype", rows,
                       ("r", *_short_names(p)))


def magnetization_table(res: StructuredResult) -> Any:
    """Part 1 at the final round (mean over seeds): magnetization per archetype (optimal
    matching and the paper's max-overlap metric), K-hat and spurious patterns."""
    from fedlam.experiments._common import TitledTable

    res = _check_result(res)
    rows = []
    for key, s in res.summary.items():
        if not key.startswith("r="):
            continue
        rows.append((key, " ".join(f"{x:.3f}" for x in np.round(s["final_magnetization_mean"], 3)),
                     " ".join(f"{x:.3f}" for x in np.round(s["final_magnetization_max_metric_mean"], 3)),
                     f"{s['final_k_hat_mean']:.2f}", f"{s['final_spurious_mean']:.2f}"))
    title = (f"Final round, mean over seeds (smallest m over seeds, rounds and archetypes: "
             f"{res.magnetization.min():.3f})")
    return TitledTable(title, rows, ("run", "final m", "paper's max-overlap metric", "K-hat", "spurious"))


def reconstruction_table(res: StructuredResult) -> Any:
    """Overlap of each final reconstruction of seed 0 with its archetype."""
    from fedlam.experiments._common import TitledTable

    res = _check_result(res)
    p = res.params
    rows = []
    for ri, r in enumerate(p.rs):
        for di in range(len(p.decorrelated)):
            ov = _overlaps(res.reconstructions[ri, di], res.archetypes[di])
            rows.append((f"{r:g}", _target_labels(p)[di], *(f"{x:.3f}" for x in ov)))
    return TitledTable("Final reconstructions of seed 0: overlap with the archetype", rows,
                       ("r", "targets", *_short_names(p)))


def paper_table(res: StructuredResult) -> Any:
    """Part 1, paper versus measured, numbers only: the smallest final magnetization over the
    archetypes (matched, and the paper's max-overlap metric; means over seeds), the round from
    which every seed holds all three at m >= 0.9,
    and the weakest effective spike ``kappa_K = N r^2 g_K / (K (1 - r^2))`` (``g_K`` the
    smallest eigenvalue of the overlap matrix) against sqrt(q) of the round-0 server mean,
    in the title. The reasons for the differences are written in {ref}`sec-exp-structured`."""
    from fedlam.experiments._common import TitledTable

    res = _check_result(res)
    p, names = res.params, _short_names(res.params)
    Nn = res.archetypes.shape[2]
    sqrt_q = np.sqrt(Nn / (p.L * p.M))  # round-0 aggregate of L clients
    rows = []
    for ri, r in enumerate(p.rs):
        for di, d in enumerate(p.decorrelated):
            s = res.summary[f"r={r:g}/{'decorrelated' if d else 'raw'}"]
            fm = f"{min(s['final_magnetization_mean']):.2f}"
            fx = f"{min(s['final_magnetization_max_metric_mean']):.2f}"
            if d:
                paper = "—"
            else:
                paper = "> 0.9, fast, stable" if r >= 0.8 else "slower, wider bands"
            ov = res.archetype_overlaps[di]
            # weakest spike: kappa = N r^2 pi / (1 - r^2) times the smallest eigenvalue of the overlaps
            kmin = Nn * r**2 / (1 - r**2) / len(names) * np.linalg.eigvalsh(ov)[0]
            mm = res.magnetization[:, ri, di]  # (seeds, T, K)
            ok = np.all(mm >= 0.9, axis=(0, 2))
            held = np.flip(np.logical_and.accumulate(np.flip(ok)))  # ok from round t to the end
            t_all = str(int(np.argmax(held))) if held.any() else "never"
            rows.append((f"{r:g} {'decorrelated' if d else 'raw'}", paper, fm, fx, t_all, f"{kmin:.0f}"))
    title = ("Part 1, paper versus measured: what the paper reports (— not studied); smallest final m "
             "over the archetypes, mean over seeds (matched, and by the paper's max-overlap metric); "
             "round from which every seed holds all three at m ≥ 0.9; weakest spike κ "
             f"(√q of the round-0 server mean: {sqrt_q:.2f})")
    return TitledTable(title, rows, ("r, targets", "paper", "min m", "max-overlap", "≥ 0.9 from", "min κ"))


def _cell(rec: Any, sp: Any) -> str:
    return f"{rec}" + (f" ({sp})" if sp else "")


def subset_table(res: StructuredResult) -> Any:
    """Part 2: archetypes recovered (of those present) from one operator per subset and
    condition, by the in-span search and by the tuned LAM, per K, with the overlap structure."""
    from fedlam.experiments._common import TitledTable

    res = _check_result(res)
    P = res.params
    conds = ["exact"] + [f"r = {r:g}" for r in P.rs]
    S_SPAN, S_LAM = P.searches.index("span"), P.searches.index("lam")
    header = ("K", "of", "max q", "mean q", "min eig.", *conds)
    ov_paper = overlap_structure(res.archetypes[0])
    rows = [("3 (paper)", "3", f"{ov_paper['max']:.2f}", f"{ov_paper['mean']:.2f}", f"{ov_paper['min_eig']:.2f}")
            + tuple(" | ".join(_cell(res.paper_single_recovered[ci, si], res.paper_single_spurious[ci, si])
                               for si in (S_SPAN, S_LAM)) for ci in range(len(conds)))]
    for ki, K in enumerate(P.Ks):
        omax, omean, oeig = res.subset_overlap_max[ki], res.subset_overlap_mean[ki], res.subset_min_eig[ki]
        struct = (f"{omax.min():.2f}–{omax.max():.2f}", f"{omean.mean():.2f}", f"{oeig.min():.2f}–{oeig.max():.2f}")
        cells = tuple(" | ".join(_cell(res.single_recovered[ki, :, ci, si].sum(),
                                       res.single_spurious[ki, :, ci, si].sum()) for si in (S_SPAN, S_LAM))
                      for ci in range(len(conds)))
        rows.append((f"{K}", f"{K * P.n_subsets}", *struct) + cells)
    title = ("Archetypes recovered from one operator, in-span search | tuned LAM, of those present "
             "(spurious patterns in brackets), for the paper's three classes and "
             f"{P.n_subsets} random subsets per K; their largest and mean overlap q and the smallest "
             "eigenvalue of the overlap matrix (ranges over the subsets, mean of the means)")
    return TitledTable(title, rows, header)


def subset_detail_table(res: StructuredResult) -> Any:
    """Part 2 per subset: largest overlap and archetypes recovered (in-span search | tuned LAM)
    in each condition."""
    from fedlam.experiments._common import TitledTable

    res = _check_result(res)
    P = res.params
    conds = ["exact"] + [f"r = {r:g}" for r in P.rs]
    S_SPAN, S_LAM = P.searches.index("span"), P.searches.index("lam")
    rows = []
    for ki, K in enumerate(P.Ks):
        for s in range(len(res.subsets[ki])):
            rows.append((f"{K}", f"{s}", f"{res.subset_overlap_max[ki, s]:.2f}",
                         *(f"{res.single_recovered[ki, s, ci, S_SPAN]} | {res.single_recovered[ki, s, ci, S_LAM]}"
                           for ci in range(len(conds)))))
    return TitledTable("Per subset: archetypes recovered (in-span search | tuned LAM)", rows,
                       ("K", "subset", "max overlap", *conds))


def federation_table(res: StructuredResult) -> Any:
    """Part 2 federations: K-hat and archetypes recovered per round, smallest magnetization and
    most spurious patterns over the rounds."""
    from fedlam.experiments._common import TitledTable

    res = _check_result(res)
    P = res.params
    rows = []
    for ki, K in enumerate(P.Ks):
        for s in range(P.fed_subsets):
            for ri, r in enumerate(P.rs):
                rows.append((f"{K}", f"{s}", f"{r:g}", f"{P.fed_examples_per_class * K}",
                             " ".join(map(str, res.fed_k_hat[ki, s, ri].tolist())),
                             " ".join(map(str, res.fed_recovered[ki, s, ri].tolist())),
                             f"{res.fed_min_m[ki, s, ri].min():.3f}", f"{res.fed_spurious[ki, s, ri].max()}"))
    title = (f"Federations on the subsets ({P.L} clients, {P.fed_T} rounds): M examples per client and "
             "round; K-hat and archetypes recovered per round; smallest m and most spurious patterns "
             "over the rounds")
    return TitledTable(title, rows, ("K", "subset", "r", "M", "K-hat", "recovered", "min m", "spur."))
