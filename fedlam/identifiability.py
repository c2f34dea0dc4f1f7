"""Which +-1 families an exact operator determines: site types, complete pairs, counterexamples.

The measurements of the book's identifiability section ({ref}`sec-lam-identifiability`):
the *type* of a site is the column ``(xi^1_i, ..., xi^K_i)`` of a family; a vector
``x = sum_mu c_mu xi^mu`` is +-1 iff ``c . s = +-1`` for every type ``s`` that occurs
({prf:ref}`lem-span-types`). :func:`complete_pairs` tests the sufficient condition of
{prf:ref}`thm-span-identifiable`; :func:`pm1_in_span` lists every +-1 vector of a span with
few types; :func:`hadamard_counterexample` builds a family that no method can recover from
its operator; :func:`signed_sum_splits` counts when a sum of k signed +-1 terms is +-1.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from fedlam._validation import check_pm1, check_positive_int

__all__ = [
    "site_types",
    "complete_pairs",
    "pm1_in_span",
    "HADAMARD_4",
    "hadamard_rotation",
    "hadamard_family",
    "HadamardCounterexample",
    "hadamard_counterexample",
    "SignedSumRow",
    "SignedSumTable",
    "signed_sum_splits",
]

#: The 4 x 4 Sylvester-Hadamard matrix (orthogonal columns of +-1 entries).
HADAMARD_4 = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]], dtype=np.int8)


def _family(xi: np.ndarray, name: str = "xi") -> np.ndarray:
    check_pm1(xi, name, ndim=2)
    return xi


def site_types(xi: np.ndarray) -> set[tuple[int, ...]]:
    """The set of types (distinct columns) of a (K, N) +-1 family.

    Derived in {ref}`sec-lam-identifiability`.
    """
    X = _family(xi)
    return {tuple(int(v) for v in col) for col in X.T}


def complete_pairs(xi: np.ndarray) -> list[tuple[int, int]]:
    """Pairs ``(mu, nu)`` with a complete square of types.

    A pair is complete if some type ``s`` has ``s``, ``s`` flipped at ``mu``, at ``nu`` and at
    both among the family's types. If every pair is complete the span holds no +-1 vector but
    ``+-xi^mu`` ({prf:ref}`thm-span-identifiable`, a sufficient condition only).
    """
    T = site_types(xi)
    K = xi.shape[0]

    def flip(s: tuple[int, ...], idx: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(-v if j in idx else v for j, v in enumerate(s))

    out = []
    for mu, nu in itertools.combinations(range(K), 2):
        if any(flip(s, (mu,)) in T and flip(s, (nu,)) in T and flip(s, (mu, nu)) in T for s in T):
            out.append((mu, nu))
    return out


def pm1_in_span(xi: np.ndarray, max_types: int = 16) -> np.ndarray:
    """Coefficients ``c`` of every +-1 vector ``sum_mu c_mu xi^mu`` of the family's span.

    Exhaustive over the ``2^n`` sign choices of the ``n`` types ({prf:ref}`lem-span-types`),
    so only for families with few types. The family must be linearly independent.

    Parameters
    ----------
    xi : numpy.ndarray
        (K, N) +-1 family of rank K.
    max_types : int
        Refuse families with more types than this (the search doubles with each type).

    Returns
    -------
    numpy.ndarray
        (C, K) float64 coefficient vectors, sorted lexicographically, both signs included.
    """
    X = _family(xi)
    max_types = check_positive_int(max_types, "max_types")
    T = np.array(sorted(site_types(X)), dtype=float)
    if T.shape[0] > max_types:
        raise ValueError(f"xi has {T.shape[0]} site types, more than max_types={max_types}")
    if np.linalg.matrix_rank(X.astype(float)) != X.shape[0]:
        raise ValueError(f"xi must be linearly independent (rank {X.shape[0]}), got rank "
                         f"{np.linalg.matrix_rank(X.astype(float))}")
    sols = set()
    for eps in itertools.product((-1.0, 1.0), repeat=T.shape[0]):
        c = np.asarray(np.linalg.lstsq(T, np.array(eps), rcond=None)[0], dtype=float)
        if np.allclose(T @ c, eps, atol=1e-9):
            sols.add(tuple(float(v) + 0.0 for v in np.round(c, 9)))
    return np.array(sorted(sols), dtype=float).reshape(-1, X.shape[0])


def hadamard_rotation() -> np.ndarray:
    """``O = (1 1^T - 2 I) / 2`` (4 x 4): symmetric, orthogonal, maps +-Hadamard columns to +-them."""
    return (np.ones((4, 4)) - 2.0 * np.eye(4)) / 2.0


def hadamard_family(N: int, rng: np.random.Generator | int) -> np.ndarray:
    """A (4, N) +-1 family whose every site type is +- a column of :data:`HADAMARD_4`.

    Column and sign drawn uniformly and independently at each site.
    """
    N = check_positive_int(N, "N", minimum=4)
    gen = np.random.default_rng(rng)
    cols = gen.integers(0, 4, N)
    signs = gen.choice(np.array([-1, 1], dtype=np.int8), N)
    return (HADAMARD_4[:, cols] * signs).astype(np.int8)


@dataclass(frozen=True)
class HadamardCounterexample:
    """Result of :func:`hadamard_counterexample` (its repr is the book's table)."""

    N: int
    rank: int
    max_overlap: float
    rotated_is_pm1: bool
    operator_difference: float
    n_types: int
    n_complete_pairs: int
    n_pm1_in_span: int
    half_coefficients: bool
    k_hat: int
    m_to_xi: np.ndarray = field(repr=False)
    m_to_rotated: np.ndarray = field(repr=False)
    returned_operator_difference: float = 0.0
    family_by_seed: tuple[str, ...] = ()

    @property
    def m_returned(self) -> float:
        """Smallest magnetization of the returned patterns with the family they match best."""
        return float(max(self.m_to_xi.min(), self.m_to_rotated.min()))

    @property
    def m_other(self) -> float:
        """Smallest magnetization of the returned patterns with the other family."""
        return float(min(self.m_to_xi.min(), self.m_to_rotated.min()))

    def rows(self) -> list[tuple[str, str]]:
        def tiny(x: float) -> str:
            return "< 1e-12" if x < 1e-12 else f"{x:.1e}"

        return [
            ("family Xi", f"K = 4, N = {self.N}, rank {self.rank}, largest overlap {self.max_overlap:.3f}"),
            ("site types / complete pairs", f"{self.n_types} of 16 / {self.n_complete_pairs} of 6"),
            ("+-1 vectors in the span", f"{self.n_pm1_in_span} (coefficients +-1/2 occur: "
                                         f"{self.half_coefficients})"),
            ("O Xi, O = (11^T - 2I)/2", f"+-1 family: {self.rotated_is_pm1}"),
            ("largest abs. entry of J(Xi) - J(O Xi)", tiny(self.operator_difference)),
            ("factorize(J(Xi), rng=0)", f"K_hat {self.k_hat}; m = {self.m_returned:.3f} to one family, "
                                         f"{self.m_other:.3f} to the other"),
            ("largest abs. entry of J(returned) - J(Xi)", tiny(self.returned_operator_difference)),
            (f"seeds 0..{len(self.family_by_seed) - 1} returning Xi or O Xi",
             f"{sum(f != 'other' for f in self.family_by_seed)} of {len(self.family_by_seed)}"),
        ]

    def _repr_html_(self) -> str:
        from fedlam.experiments._common import Table

        return ("<p><strong>Two ±1 families, one operator</strong></p>"
                + Table(self.rows(), ("quantity", "value"))._repr_html_())

    def __repr__(self) -> str:
        from fedlam.experiments._common import markdown_table

        return "Two +-1 families, one operator\n" + markdown_table(self.rows(), ("quantity", "value"))


def hadamard_counterexample(N: int = 400, rng: np.random.Generator | int = 6,
                            seeds: int = 4) -> HadamardCounterexample:
    """A linearly independent, weakly correlated family that its exact operator cannot identify.

    Every site type of ``Xi`` (:func:`hadamard_family`) is +- a Hadamard column, so ``O Xi``
    (:func:`hadamard_rotation`) is another +-1 family with the same operator
    ``J = Xi^T Xi / N``. :func:`fedlam.lam.factorize` is run on ``J`` with ``seeds`` seeds.
    Which of the two families it returns is not determined by ``J``; it can change with the
    eigensolver's rounding (BLAS kernel), so the table reports it symmetrically.
    Derived in {ref}`sec-lam-identifiability`.
    """
    from fedlam import lam, metrics, operators

    seeds = check_positive_int(seeds, "seeds")
    xi = hadamard_family(N, rng)
    X = xi.astype(float)
    Nn = xi.shape[1]
    O = hadamard_rotation()
    Y = O @ X
    rotated_is_pm1 = bool(np.all(np.abs(Y) == 1.0))
    xi_rot = Y.astype(np.int8)
    J = operators.pattern_operator(xi)
    J_rot = operators.pattern_operator(xi_rot)
    coef = pm1_in_span(xi)
    res = lam.factorize(J, rng=0)
    names = []
    for s in range(seeds):
        P = lam.factorize(J, rng=s).patterns
        if P.shape[0] == 4 and metrics.magnetization(P, xi).min() == 1.0:
            names.append("Xi")
        elif P.shape[0] == 4 and metrics.magnetization(P, xi_rot).min() == 1.0:
            names.append("O Xi")
        else:
            names.append("other")
    J_ret = operators.pattern_operator(res.patterns) if res.patterns.shape[0] else np.zeros_like(J)
    ov = np.abs(X @ X.T / Nn)[np.triu_indices(4, 1)]
    return HadamardCounterexample(
        N=Nn,
        rank=int(np.linalg.matrix_rank(X)),
        max_overlap=float(ov.max()),
        rotated_is_pm1=rotated_is_pm1,
        operator_difference=float(np.abs(J - J_rot).max()),
        n_types=len(site_types(xi)),
        n_complete_pairs=len(complete_pairs(xi)),
        n_pm1_in_span=int(coef.shape[0]),
        half_coefficients=bool(np.any(np.isclose(np.abs(coef), 0.5))),
        k_hat=int(res.k_hat),
        m_to_xi=metrics.magnetization(res.patterns, xi),
        m_to_rotated=metrics.magnetization(res.patterns, xi_rot),
        returned_operator_difference=float(np.abs(J_ret - J).max()),
        family_by_seed=tuple(names),
    )


@dataclass(frozen=True)
class SignedSumRow:
    """One k of :func:`signed_sum_splits`."""

    k: int
    patterns: int
    pm1: int
    not_all_agree: int
    split: int


@dataclass(frozen=True)
class SignedSumTable:
    """Result of :func:`signed_sum_splits` (its repr is the book's table)."""

    rows: tuple[SignedSumRow, ...]

    def _cells(self) -> list[tuple]:
        return [(r.k, r.patterns, r.pm1, r.not_all_agree, r.split,
                 "yes" if r.pm1 == r.not_all_agree else "no") for r in self.rows]

    _HEADER = ("k", "sign patterns", "sum is +-1", "not all agree", "(k+-1)/2 split",
               "+-1 iff not all agree")

    def _repr_html_(self) -> str:
        from fedlam.experiments._common import Table

        return ("<p><strong>When is a sum of k signed ±1 terms ±1?</strong></p>"
                + Table(self._cells(), self._HEADER)._repr_html_())

    def __repr__(self) -> str:
        from fedlam.experiments._common import markdown_table

        return ("When is a sum of k signed +-1 terms +-1?\n"
                + markdown_table(self._cells(), self._HEADER))


def signed_sum_splits(ks: tuple[int, ...] = (3, 5, 7, 9)) -> SignedSumTable:
    """Count, over all ``2^k`` sign patterns of k terms ``c_mu s_mu = +-1``, when the sum is +-1.

    The sum is +-1 iff the +1 terms number ``(k - 1)/2`` or ``(k + 1)/2``; "the terms do not all
    agree" is the same condition only for k = 3. Derived in {ref}`sec-lam-identifiability`.
    """
    rows = []
    for k in ks:
        k = check_positive_int(k, "k")
        if k % 2 == 0:
            raise ValueError(f"k must be odd (an even sum of +-1 terms is never +-1), got {k}")
        P = np.array(list(itertools.product((-1, 1), repeat=k)))
        total = P.sum(axis=1)
        n_plus = (P == 1).sum(axis=1)
        rows.append(SignedSumRow(
            k=k,
            patterns=len(P),
            pm1=int(np.sum(np.abs(total) == 1)),
            not_all_agree=int(np.sum(np.abs(total) != k)),
            split=int(np.sum((n_plus == (k - 1) // 2) | (n_plus == (k + 1) // 2))),
        ))
    return SignedSumTable(tuple(rows))
