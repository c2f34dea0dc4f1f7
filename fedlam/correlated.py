"""Correlated families and four factorizations compared on them (quality and cost).

The measurement of the book's "Quality against cost" section ({ref}`sec-lam-span-search`):
the in-span search (``factorize``'s default), the LAM as tuned (``search="lam"``), the paper's
pipeline as published (:func:`fedlam.lam.factorize_literal`) and the signs of the detected
eigenvectors, each on the exact operator and on a Hebbian operator of noisy examples of
correlated random families and of silhouette class subsets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlam._validation import check_in_range, check_positive_int

__all__ = ["METHODS", "SHORT_NAMES", "correlated_family", "FactorizationComparison", "compare_factorizations"]

#: The four factorizations, in the order of the book's table.
METHODS: tuple[str, ...] = ("in-span search (default)", "tuned LAM (search='lam')",
                            "paper as published", "spectral only (signs of eigenvectors)")
#: The methods' short names in the first column of the tables (the full names are in their titles).
SHORT_NAMES: dict[str, str] = dict(zip(METHODS, ("in-span", "tuned LAM", "paper", "signs"), strict=True))
_LEGEND = "Methods: " + "; ".join(f"{SHORT_NAMES[m]}: {m}" for m in METHODS) + "."


def correlated_family(K: int, N: int, overlap: float, rng: np.random.Generator,
                      max_overlap: float = 0.8) -> np.ndarray:
    """K +-1 patterns around a common parent with pairwise overlaps about ``overlap``.

    Each bit of each pattern is the parent's, flipped with probability
    ``p = (1 - sqrt(overlap)) / 2`` (so two patterns overlap ``(1 - 2p)^2 = overlap`` in
    expectation). Families with an overlap above ``max_overlap`` or of rank below K are redrawn.
    Returns int8 (K, N).
    """
    K = check_positive_int(K, "K")
    N = check_positive_int(N, "N", minimum=K)
    overlap = check_in_range(overlap, "overlap", 0.0, 1.0)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    p = (1.0 - np.sqrt(overlap)) / 2.0
    while True:
        parent = rng.choice(np.array([-1, 1], dtype=np.int8), N)
        X = np.where(rng.random((K, N)) < p, -parent, parent).astype(np.int8)
        ov = np.abs(X.astype(float) @ X.T.astype(float)) / N
        np.fill_diagonal(ov, 0.0)
        if ov.max() <= max_overlap and np.linalg.matrix_rank(X.astype(float)) == K:
            return X


@dataclass
class FactorizationComparison:
    """Result of :func:`compare_factorizations`.

    ``quality[(family_set, operator)][method]`` is ``[recovered, spurious, complete]``;
    ``cost[(family_set, operator)][method]`` the list of times relative to one
    ``numpy.linalg.eigh`` of the same operator; ``n_archetypes[family_set]`` the number of
    archetypes of a set; ``incomplete`` the runs of the in-span search that missed an archetype
    or accepted a spurious pattern, as ``(family_set, operator, index, xi, J, result)``.
    """

    quality: dict[tuple[str, str], dict[str, list[int]]]
    cost: dict[tuple[str, str], dict[str, list[float]]]
    n_archetypes: dict[str, int]
    n_families: dict[str, int]
    incomplete: list[tuple[Any, ...]] = field(default_factory=list, repr=False)

    def recovered_fraction(self, method: str, family_set: str, operator: str) -> float:
        return self.quality[family_set, operator][method][0] / self.n_archetypes[family_set]

    def _columns(self, keys: Any) -> tuple[str, ...]:
        """Short column names ("correlated, exact"), the family sets in full in the title."""
        return tuple(f"{fam.split(' ')[0]}, {op}" for fam, op in keys)

    def _sets(self) -> str:
        return "; ".join(dict.fromkeys(fam for fam, _ in self.quality))

    def quality_table(self) -> Any:
        """Archetypes recovered (m >= 0.95), spurious patterns and complete families."""
        from fedlam.experiments._common import Table

        header = ("method",) + self._columns(self.quality)
        rows = []
        for m in METHODS:
            cells = []
            for (fam, op), q in self.quality.items():
                if not self.cost[fam, op][m]:
                    cells.append("not run")
                else:
                    cells.append(f"{q[m][0]}/{self.n_archetypes[fam]}, {q[m][1]}, "
                                 f"{q[m][2]}/{self.n_families[fam]}")
            rows.append((SHORT_NAMES[m], *cells))
        return _Titled("Archetypes recovered, spurious patterns, complete families: each cell "
                       "is recovered archetypes / all, spurious patterns, complete families / all "
                       f"({self._sets()}; exact operator or noisy Hebbian operator). "
                       + _LEGEND, Table(rows, header))

    def cost_table(self) -> Any:
        """Mean time of each method in units of one ``eigh`` of the same operator."""
        from fedlam.experiments._common import Table

        header = ("method",) + self._columns(self.cost)
        rows = [(SHORT_NAMES[m], *("not run" if not t[m] else f"{np.mean(t[m]):.1f}"
                                   for t in self.cost.values())) for m in METHODS]
        return _Titled(f"Cost relative to one numpy.linalg.eigh of the same operator ({self._sets()}). "
                       + _LEGEND, Table(rows, header))

    def __repr__(self) -> str:
        return repr(self.quality_table())

    def _repr_html_(self) -> str:
        return self.quality_table()._repr_html_()


class _Titled:
    """A table with a title line above it (HTML and text)."""

    def __init__(self, title: str, table: Any) -> None:
        self.title, self.table = title, table

    def _repr_html_(self) -> str:
        import html

        return f"<p><strong>{html.escape(self.title)}</strong></p>" + self.table._repr_html_()

    def __repr__(self) -> str:
        return f"{self.title}\n{self.table!r}"


def compare_factorizations(
    Ks: tuple[int, ...] = (3, 5, 8, 10),
    overlaps: tuple[float, ...] = (0.4, 0.7),
    N: int = 300,
    n_subsets: int = 2,
    examples_per_archetype: int = 120,
    r: float = 0.8,
    seed: int = 3,
    literal_max_N: int = 300,
) -> FactorizationComparison:
    """Run the four factorizations of :data:`METHODS` on correlated families, exact and noisy.

    Family sets: one :func:`correlated_family` per ``(K, overlap)`` at ``N`` (drawn in that order
    from ``numpy.random.default_rng(seed)``), and ``n_subsets`` silhouette class subsets per K
    (:func:`fedlam.experiments.structured.random_class_subsets`, N = 784). Each family is
    factorized from its exact operator and from the Hebbian operator of
    ``examples_per_archetype * K`` examples at quality ``r`` (equal exposures, seed ``100 + i``
    for the i-th family of a set); factorization seeds are ``i``. An archetype counts as recovered
    at matched magnetization >= 0.95; a family is complete when all are recovered and no spurious
    pattern is accepted. The paper's pipeline (200 dense dreaming products) is run only up to
    ``literal_max_N``; the spectral baseline reuses the default run's spectrum and is timed as a
    partial spectrum alone. Derived in {ref}`sec-lam-span-search`.
    """
    import fedlam
    from fedlam import lam, metrics, operators, spectral
    from fedlam.experiments.baselines import signed_eigenvectors
    from fedlam.experiments.structured import random_class_subsets

    Ks = tuple(check_positive_int(k, "Ks") for k in Ks)
    examples_per_archetype = check_positive_int(examples_per_archetype, "examples_per_archetype")
    n_subsets = check_positive_int(n_subsets, "n_subsets")
    r = check_in_range(r, "r", 0.0, 1.0)
    rng_f = np.random.default_rng(seed)
    families = {
        f"correlated families, N = {N}": [correlated_family(K_, N, ov_, rng_f) for K_ in Ks for ov_ in overlaps],
        "silhouette subsets, N = 784": [fedlam.data.structured_archetypes(list(cls))
                                        for K_ in Ks for cls in random_class_subsets(K_, n_subsets)],
    }
    quality: dict[tuple[str, str], dict[str, list[int]]] = {}
    cost: dict[tuple[str, str], dict[str, list[float]]] = {}
    incomplete: list[tuple[Any, ...]] = []
    for fam, fl in families.items():
        for op in ("exact", "noisy"):
            q = {m: [0, 0, 0] for m in METHODS}
            t: dict[str, list[float]] = {m: [] for m in METHODS}
            for i, xi_ in enumerate(fl):
                K_, N_ = xi_.shape
                if op == "exact":
                    J_ = operators.pattern_operator(xi_)
                else:
                    eta_, _ = fedlam.sample_examples(xi_, examples_per_archetype * K_, r,
                                                     np.full(K_, 1 / K_), rng=100 + i)
                    J_ = fedlam.hebbian(eta_)
                t0 = time.perf_counter()
                np.linalg.eigh(J_)
                t_eigh = time.perf_counter() - t0
                r_ = None
                for m in METHODS:
                    t0 = time.perf_counter()
                    if m == METHODS[0]:
                        r_ = lam.factorize(J_, rng=i)
                        P_ = r_.patterns
                    elif m == METHODS[1]:
                        P_ = lam.factorize(J_, rng=i, search="lam").patterns
                    elif m == METHODS[2]:
                        if N_ > literal_max_N:
                            continue
                        P_ = lam.factorize_literal(J_, i, k_method="fixed" if op == "exact" else "mp").patterns
                    else:
                        P_ = signed_eigenvectors(r_)
                    dt = time.perf_counter() - t0
                    if m == METHODS[3]:
                        assert r_ is not None
                        t0 = time.perf_counter()
                        spectral.top_spectrum(J_, min(N_, max(16, r_.k_hat + 8)))
                        dt = time.perf_counter() - t0
                    m_ = metrics.magnetization(P_, xi_)
                    sp_ = metrics.spurious_count(P_, xi_)
                    ok = bool(np.all(m_ >= 0.95) and sp_ == 0)
                    q[m][0] += int(np.sum(m_ >= 0.95))
                    q[m][1] += sp_
                    q[m][2] += int(ok)
                    if m == METHODS[0] and not ok:
                        incomplete.append((fam, op, i, xi_, J_, r_))
                    t[m].append(dt / t_eigh)
            quality[fam, op], cost[fam, op] = q, t
    return FactorizationComparison(
        quality=quality, cost=cost,
        n_archetypes={fam: sum(x.shape[0] for x in fl) for fam, fl in families.items()},
        n_families={fam: len(fl) for fam, fl in families.items()},
        incomplete=incomplete,
    )
