r"""Server defences against clients that write their own patterns into the shared memory.

The paper's server takes the plain mean of the uploads (``defense=None``, the default, so its
protocol stays reproducible). One client that uploads the rank-one operator
``xi_f xi_f^T / N`` of a fake pattern puts a spike of strength ``1/L`` into that mean, above
every honest archetype's ``r^2 pi (L - 1)/L`` for typical ``r, pi``, and the server stores
it ({ref}`sec-robust-spike`). This module holds the defences the server can run instead:

``"support"``
    A direction of the aggregate survives only if it is a *supercritical spike of at least*
    ``s`` *clients' own fresh evidence* (default ``s = 2``). For every upload the server
    removes the broadcast it sent (``F_c = U_c - (1 - w_c) A``, the client's new evidence),
    compresses ``F_c`` onto the detected eigenvectors ``V`` of the aggregate and keeps the
    Ritz directions whose Rayleigh quotients exceed the upload's *own* bulk edge plus
    ``n_sigma`` Tracy-Widom scales; by Cauchy interlacing each kept direction certifies an
    outlier of ``F_c`` itself, with a false-alarm rate set by the Tracy-Widom tail whatever
    ``V`` is. A direction is *supported* when at least ``s`` clients certify it (a fraction
    ``>= rho`` of it lies in their certified subspaces); the supported directions are found
    among the pairwise intersections of the clients' certified subspaces. The other detected
    directions are removed from the aggregate before the LAM runs; directions of the server's
    current memory are kept (they passed when they entered). Derived in
    {ref}`sec-robust-support`. :func:`support_filter` is the same test for individual patterns.
    Under example-level privacy one upload's noise can hide what the mean shows: with
    ``defense_params={"groups": G}`` the uploads vote in ``G`` fixed groups, each with the
    mean of its members' fresh parts against that mean's edge (:func:`voting_groups`,
    :func:`group_threshold`; {ref}`sec-robust-privacy`); with ``{"groups": "leave-out"}`` the
    voters are the means that leave out ``s - 1`` uploads each, and a direction needs all of
    them (about the mean's noise, and ``k < s`` attackers all miss one voter); the whole stored
    span is then memory (:func:`memory_span`), since a voter of one or two uploads certifies no
    weak stored direction (the weakest of three stored silhouettes, broadcast eigenvalue 0.46).
``"median"`` / ``"trimmed"``
    Entrywise median / trimmed mean of the uploads (Yin et al. 2018). The estimator is not
    linear, and its operator has outliers no upload has: ``E[median | x]`` of an entry is an odd
    symmetric function of ``x_k = xi^k_i xi^k_j``, whose cubic part ``x_1 x_2 x_3`` is a
    rank-one spike along the product ``xi^1 * xi^2 * xi^3`` of three archetypes. Its K-hat is
    therefore capped by the *number of directions a strict majority of the uploads certifies*
    (:func:`majority_spike_count`: the support test with the quorum ``floor(L/2) + 1`` in the
    span of the median operator's leading eigenvectors, each upload's fresh part against its
    own noise-aware edge, stored patterns kept), counted along the operator's leading
    directions: the entrywise median follows a majority of the uploads, so the directions it
    can be trusted to hold are those a majority holds, and a minority of attackers cannot reach
    the quorum. The LAM takes the operator's top K-hat directions. The bulk given to the
    factorization is the honest mean's Marchenko-Pastur law plus a semicircle whose variance is
    the measured excess spread of the operator's bulk (the Gaussian ``(e_L - 1)`` share of
    :func:`robust_noise_var` misses the cross terms ``r xi_i z_j`` of the +-1 entries, a factor
    about ``(1 + r^2)/(1 - r^2)``).
    They bound each entry's deviation, but a bounded shift of every entry in the direction of
    ``xi_f xi_f^T`` adds up to a rank-one spike of strength ``c / sqrt(M)`` (J units), about
    ``sqrt(N)`` times above their noise edge: a fake is an outlier of the median operator; the
    robust count keeps it out while it lies below the archetypes that the majority holds (and
    stops at it when it leads the spectrum, e.g. one attacker among two uploads).
    Derived in {ref}`sec-robust-median`.
``"krum"``
    (Multi-)Krum (Blanchard et al. 2017): the ``m`` uploads with the smallest sum of squared
    Frobenius distances to their ``L - f - 2`` nearest neighbours are averaged. It rejects
    far-away uploads, including honest clients whose archetypes differ from the majority's.
    Derived in {ref}`sec-robust-krum`.

:func:`aggregate` is the entry point of the server (``Server(defense=...)``): it returns the
operator to factorize, the bulk components that set its K-hat edge
(:func:`fedlam.khat.k_hat_components`) and, for ``"support"``, a partial spectrum of the
cleaned operator that :func:`fedlam.lam.factorize` can reuse. Uploads are objects with the
attributes of :class:`fedlam.protocol.Upload` (``operator``, ``batch_size``, ``weight``,
``noise_var``, ``dp_sigma``).

Which defences survive secure aggregation (the server sees only the sum): ``"support"``
needs, per client, only the ``K_hat x K_hat`` certified projector, and the support operator
is their *sum*; the median, the trimmed mean and Krum need every upload
({ref}`sec-robust-privacy`).
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedlam import khat, operators
from fedlam._eig import Spectrum, _eig_top, _ensure_vectors, _server_sizes, _sym_matmul, _top_values_spectrum
from fedlam._validation import (
    _describe,
    check_count,
    check_in_range,
    check_nonneg_int,
    check_operator,
    check_operator_list,
    check_pm1,
    check_positive_int,
    check_real,
)

#: ``defense_params["groups"]`` of the support test whose voters leave out ``s - 1`` uploads each
LEAVE_OUT = "leave-out"
#: leave-out voters up to which every voter's threshold is its own group threshold and every pair
#: of voters is intersected; beyond (a cross-device federation of hundreds of uploads), the voters
#: share one conservative threshold and only pairs with voter 0 are intersected
#: (:func:`_certify`, :func:`_candidate_directions`): O(L) work instead of O(L^2)
LEAVE_OUT_EXACT = 64

__all__ = [
    "DEFENSES",
    "DEFAULT_PARAMS",
    "r_transform",
    "critical_strength",
    "additive_spike_outlier",
    "RobustAggregate",
    "SpanProducts",
    "SupportResult",
    "check_defense",
    "aggregate",
    "mean_aggregate",
    "entrywise_median",
    "entrywise_trimmed_mean",
    "gaussian_efficiency",
    "robust_noise_var",
    "upload_spike_count",
    "median_spike_count",
    "majority_quorum",
    "majority_spike_count",
    "krum_scores",
    "krum_select",
    "fresh_operator",
    "upload_threshold",
    "support_test",
    "support_filter",
    "FRESH_QUORUM",
    "fresh_quorum",
    "fresh_aggregate",
    "memory_span",
    "stored_patterns",
    "group_threshold",
    "voting_groups",
    "voting_quorum",
    "LEAVE_OUT",
]

#: Defences selectable by name (``None`` is the paper's plain mean).
DEFENSES: tuple[str, ...] = ("support", "median", "trimmed", "krum")

#: Default parameters of each defence (``defense_params`` override them).
DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    "support": {"s": 2, "n_sigma": 4.0, "rho": 0.9, "groups": None},
    "median": {},
    "trimmed": {"trim": 0.2},
    "krum": {"f": 1, "m": None},
}

# rows per block of the entrywise order statistics: L * _BLOCK_ELEMS floats in flight
_BLOCK_ELEMS = 1 << 21


# ----------------------------------------------------------------------------------------
# argument checks
def check_defense(defense: Any, params: Mapping[str, Any] | None = None,
                  L: int | None = None) -> tuple[str | None, dict[str, Any]]:
    """Validate a defence name and its parameters; return ``(name, params with defaults)``.

    Parameters
    ----------
    defense : None or str
        ``None`` (the paper's plain mean) or one of :data:`DEFENSES`.
    params : mapping or None
        Overrides of :data:`DEFAULT_PARAMS` for that defence. Keys:

        - ``"support"``: ``s`` (int, ``1 <= s <= L``: clients whose fresh evidence must hold a
          direction), ``n_sigma`` (float >= 0: Tracy-Widom margin of the per-upload test),
          ``rho`` (float in (0, 1]: a client votes for a direction when at least this fraction
          of it lies in the client's certified subspace; the squared cosine below which a
          pattern counts as different from an archetype, 0.9 is an overlap of 0.95),
          ``groups`` (None, or an int ``>= s``: the uploads vote in that many groups, upload
          ``c`` of a round in group ``c mod groups``, each group certifying the mean of its
          members' fresh parts; see :func:`group_threshold`; or ``"leave-out"``: the voters are
          the means of the fresh parts that leave out ``s - 1`` uploads, every one of them must
          certify a direction, :func:`voting_groups`);
        - ``"trimmed"``: ``trim`` (float in [0, 0.5): fraction cut from each end, as
          :func:`scipy.stats.trim_mean`: ``floor(trim L)`` uploads per side);
        - ``"krum"``: ``f`` (int >= 0: attackers tolerated, needs ``L >= 2 f + 3``), ``m``
          (None or int in ``[1, L - f]``: uploads averaged; None gives ``L - f``,
          Multi-Krum; 1 is Krum).
    L : int or None
        Number of clients, when known (checks ``s <= L``, ``L >= 2 f + 3``, ``m <= L - f``).

    Raises
    ------
    ValueError
        Unknown defence; a parameter out of range (the message names it).
    TypeError
        Unknown parameter names; wrong types.
    """
    if defense is None:
        if params:
            raise ValueError(f"defense_params must be empty without a defense (defense=None), got {dict(params)!r}")
        return None, {}
    if not isinstance(defense, str):
        raise TypeError(f"defense must be None or one of {DEFENSES}, got {_describe(defense)}")
    if defense not in DEFENSES:
        raise ValueError(f"defense must be None or one of {DEFENSES}, got {defense!r}")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"defense_params must be a dict or None, got {_describe(params)}")
    out = dict(DEFAULT_PARAMS[defense])
    given = dict(params or {})
    unknown = sorted(set(given) - set(out))
    if unknown:
        raise TypeError(f"defense_params has unknown key(s) {unknown} for defense={defense!r}; "
                        f"valid keys: {sorted(out)}")
    out.update(given)
    if L is not None:
        L = check_positive_int(L, "L")
    if defense == "support":
        s = out["s"]
        if isinstance(s, (bool, np.bool_)) or not isinstance(s, numbers.Integral):
            raise TypeError(f"defense_params['s'] must be an int, got {_describe(s)}")
        s = int(s)
        if s < 1 or (L is not None and s > L):
            where = f"lie in [1, L] = [1, {L}]" if L is not None else "be >= 1"
            raise ValueError(f"defense_params['s'] must {where} (clients that must support a "
                             f"pattern), got {s}")
        out["s"] = s
        out["n_sigma"] = check_in_range(out["n_sigma"], "defense_params['n_sigma']", 0.0, None)
        out["rho"] = check_in_range(out["rho"], "defense_params['rho']", 0.0, 1.0, low_open=True)
        g = out["groups"]
        if isinstance(g, str):
            if g != LEAVE_OUT:
                raise ValueError(f"defense_params['groups'] must be None, an int or {LEAVE_OUT!r}, got {g!r}")
        elif g is not None:
            if isinstance(g, (bool, np.bool_)) or not isinstance(g, numbers.Integral):
                raise TypeError(f"defense_params['groups'] must be None, an int or {LEAVE_OUT!r}, "
                                f"got {_describe(g)}")
            g = int(g)
            if g < s:
                raise ValueError(f"defense_params['groups'] must be >= s = {s} (groups that must "
                                 f"support a pattern), got {g}")
            out["groups"] = g
    elif defense == "trimmed":
        out["trim"] = check_in_range(out["trim"], "defense_params['trim']", 0.0, 0.5, high_open=True)
    elif defense == "krum":
        f = out["f"]
        if isinstance(f, (bool, np.bool_)) or not isinstance(f, numbers.Integral) or f < 0:
            raise ValueError(f"defense_params['f'] must be an int >= 0, got {f!r}")
        out["f"] = int(f)
        if L is not None and L < 2 * out["f"] + 3:
            raise ValueError(f"defense_params['f'] = {out['f']} needs L >= 2 f + 3 = {2 * out['f'] + 3} "
                             f"clients (Krum), got L = {L}")
        m = out["m"]
        if m is not None:
            if isinstance(m, (bool, np.bool_)) or not isinstance(m, numbers.Integral) or m < 1:
                raise ValueError(f"defense_params['m'] must be None or an int >= 1, got {m!r}")
            if L is not None and m > L - out["f"]:
                raise ValueError(f"defense_params['m'] must be <= L - f = {L - out['f']}, got {m}")
            out["m"] = int(m)
    return defense, out


def _check_uploads(uploads: Any) -> tuple[list[np.ndarray], int]:
    """Operators of the uploads (checked for shape and dtype; symmetry is the Upload's job)."""
    if isinstance(uploads, (str, bytes)) or not isinstance(uploads, Sequence) or len(uploads) == 0:
        raise TypeError(f"uploads must be a non-empty list of fedlam.protocol.Upload, got {_describe(uploads)}")
    ops = []
    N = None
    for i, u in enumerate(uploads):
        op = getattr(u, "operator", None)
        if not isinstance(op, np.ndarray) or op.ndim != 2 or op.shape[0] != op.shape[1]:
            raise TypeError(f"uploads[{i}].operator must be a square numpy array, got {_describe(op)}")
        if op.dtype != np.float64:
            raise TypeError(f"uploads[{i}].operator must be float64, got dtype {op.dtype}")
        if N is None:
            N = op.shape[0]
        elif op.shape[0] != N:
            raise ValueError(f"uploads[{i}].operator must be ({N}, {N}) like uploads[0], got {op.shape}")
        ops.append(op)
    if N is None or N < 2:
        raise ValueError(f"uploads must have dimension N >= 2, got N = {N}")
    return ops, int(N)


def _check_weights(weights: Any, L: int) -> np.ndarray:
    if weights is None:
        return np.full(L, 1.0 / L)
    if not isinstance(weights, np.ndarray) or weights.shape != (L,):
        raise ValueError(f"weights must be None or an array of shape ({L},), got {_describe(weights)}")
    w = weights.astype(np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0) or abs(float(w.sum()) - 1.0) > 1e-9:
        raise ValueError(f"weights must be finite, >= 0 and sum to 1, got {weights!r}")
    return w


def _check_broadcast(broadcast: Any, N: int) -> np.ndarray | None:
    if broadcast is None:
        return None
    if not isinstance(broadcast, np.ndarray) or broadcast.shape != (N, N) or broadcast.dtype != np.float64:
        raise ValueError(f"broadcast must be None or a float64 ({N}, {N}) operator, got {_describe(broadcast)}")
    return broadcast


#: Largest L of :func:`gaussian_efficiency` (its Monte Carlo holds 2^16 x L normals at once).
MAX_EFFICIENCY_L = 1000


# ----------------------------------------------------------------------------------------
# result
@dataclass(frozen=True)
class RobustAggregate:
    """What the server factorizes under a defence (see :func:`aggregate`).

    Attributes
    ----------
    operator : numpy.ndarray
        float64 (N, N) symmetric operator passed to :func:`fedlam.lam.factorize`.
    components : list of fedlam.khat.Component
        Bulk components of ``operator`` for :func:`fedlam.khat.k_hat_components`.
    noise_var : float
        Eigenvalue variance of the semicircle part of its bulk (J units): the clients'
        privacy noise, plus for the median / trimmed mean the extra variance of the estimator.
    spectrum : fedlam.spectral.Spectrum or None
        A partial spectrum (top eigenpairs, exact trace and Frobenius norm) of ``operator``
        when the defence computed one (``"support"``): pass it as
        ``lam.factorize(operator, spectrum=...)`` to skip a second eigendecomposition.
    details : dict
        Defence-specific diagnostics (see :func:`aggregate`).
    max_k : int or None
        Upper bound on K-hat set by the defence itself (the median / trimmed mean: the number of
        the operator's leading directions a strict majority of the uploads certifies,
        :func:`majority_spike_count`); the factorization keeps at most this many spikes (None:
        no bound).
    products : SpanProducts or None
        The uploads' and the broadcast's products with the stored span, kept by the support test
        with leave-out voters for :func:`fedlam.refresh.refresh_voted` (None: not kept).
    """

    operator: np.ndarray
    components: list
    noise_var: float
    spectrum: Spectrum | None = None
    details: dict = field(default_factory=dict)
    max_k: int | None = None
    products: SpanProducts | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        keys = ", ".join(sorted(self.details))
        return (f"RobustAggregate(N={self.operator.shape[0]}, defense={self.details.get('defense')!r}, "
                f"components={len(self.components)}, noise_var={self.noise_var:.3g}, details=[{keys}])")


@dataclass(frozen=True)
class SupportResult:
    """Outcome of the support test (:func:`support_test`).

    Attributes
    ----------
    basis : numpy.ndarray
        (N, d) orthonormal basis ``Q`` in which the test ran.
    supported : numpy.ndarray
        (d, k) orthonormal coordinates (in ``basis``) of the supported subspace.
    unsupported : numpy.ndarray
        (d, d - k) coordinates of its complement in ``basis``.
    directions : numpy.ndarray
        (d, n) the candidate directions examined (memory directions, pairwise intersections of
        the clients' certified subspaces, and for ``s = 1`` every certified direction).
    direction_votes : numpy.ndarray
        (n,) int, votes of each candidate direction (memory counts ``s``).
    n_certified : numpy.ndarray
        (L,) int, directions each upload certifies (0 for abstaining uploads). With
        ``params["groups"]`` set, this and the next three fields are per voting group
        (:func:`voting_groups`) instead of per upload.
    thresholds : numpy.ndarray
        (L,) per-upload thresholds ``edge_c + n_sigma tw_c`` (J units; NaN when abstaining;
        :func:`group_threshold` for a group).
    ritz : list of numpy.ndarray
        Per upload, its Ritz values in ``basis`` (descending; empty when abstaining).
    votes : numpy.ndarray or None
        (C, L) fraction ``||P_c y||^2`` of each candidate pattern in each upload's certified
        subspace (None when no candidates were given).
    counts : numpy.ndarray or None
        (C,) int, clients voting for each candidate (fraction ``>= rho``), plus ``s`` when the
        pattern is in the server's memory.
    accepted : numpy.ndarray or None
        (C,) bool, ``counts >= s``.
    memory_dims : int
        Directions of ``basis`` in the server's memory (the broadcast).
    params : dict
    """

    basis: np.ndarray
    supported: np.ndarray
    unsupported: np.ndarray
    directions: np.ndarray
    direction_votes: np.ndarray
    n_certified: np.ndarray
    thresholds: np.ndarray
    ritz: list
    votes: np.ndarray | None
    counts: np.ndarray | None
    accepted: np.ndarray | None
    memory_dims: int
    params: dict

    def __repr__(self) -> str:
        acc = None if self.accepted is None else f"{int(self.accepted.sum())}/{self.accepted.size}"
        return (f"SupportResult(d={self.basis.shape[1]}, supported={self.supported.shape[1]}, "
                f"certified={self.n_certified.tolist()}, accepted={acc})")


# ----------------------------------------------------------------------------------------
# additive spikes on a free-convolved bulk (the poisoner's fake)
def _bulk_arrays(components: Sequence[khat.Component], noise_var: float) -> tuple[np.ndarray, np.ndarray, float]:
    if isinstance(components, khat.Component) or not isinstance(components, Sequence):
        raise TypeError(f"components must be a list of fedlam.khat.Component, got {_describe(components)}")
    for i, c in enumerate(components):
        if not isinstance(c, khat.Component):
            raise TypeError(f"components[{i}] must be a fedlam.khat.Component, got {_describe(c)}")
    v = check_in_range(noise_var, "noise_var", 0.0, None)
    a = np.array([float(c.scale) for c in components])
    q = np.array([float(c.ratio) for c in components])
    return a, q, v


def r_transform(G: float, components: Sequence[khat.Component], noise_var: float = 0.0) -> tuple[float, float]:
    """``R(G)`` and ``R'(G)`` of the bulk ``MP_1 ⊞ ... ⊞ MP_L ⊞ SC(noise_var)``.

    ``R(G) = sum_c a_c / (1 - a_c q_c G) + v G`` (free Poisson components and a semicircle),
    the R-transform whose inverse relation ``x(G) = 1/G + R(G)`` places the bulk edge
    (:func:`fedlam.khat.free_edge`). Derived in {ref}`sec-robust-spike`.
    """
    G = check_real(G, "G")
    a, q, v = _bulk_arrays(components, noise_var)
    den = 1.0 - a * q * G
    return float(np.sum(a / den) + v * G), float(np.sum(a * a * q / den**2) + v)


def critical_strength(components: Sequence[khat.Component], noise_var: float = 0.0) -> float:
    """Smallest strength ``theta_c = 1 / G*`` of an additive rank-one spike ``theta u u^T`` that
    leaves the bulk (``G*``: the critical point of ``x(G)`` at the edge). Derived in
    {ref}`sec-robust-spike`."""
    a, q, v = _bulk_arrays(components, noise_var)
    _, Gs, _ = khat._free_edge(a, q, v)
    return 0.0 if not math.isfinite(Gs) else float(1.0 / Gs)


def additive_spike_outlier(theta: float, components: Sequence[khat.Component],
                           noise_var: float = 0.0) -> tuple[float, float]:
    """Outlier location and squared eigenvector overlap of ``X + theta u u^T``.

    ``X`` has the bulk of ``components`` and ``noise_var`` and is rotation invariant, ``u`` a
    fixed unit vector. For ``theta > theta_c`` (:func:`critical_strength`) the outlier is
    ``z = theta + R(1/theta)`` and ``<v, u>^2 = 1 - R'(1/theta) / theta^2``
    (Benaych-Georges and Nadakuditi 2011); otherwise the outlier sticks to the edge and the
    overlap vanishes: ``(edge, 0)``. Derived in {ref}`sec-robust-spike`.
    """
    theta = check_in_range(theta, "theta", 0.0, None, low_open=True)
    a, q, v = _bulk_arrays(components, noise_var)
    edge, Gs, _ = khat._free_edge(a, q, v)
    if math.isfinite(Gs) and theta <= 1.0 / Gs:
        return float(edge), 0.0
    R, dR = r_transform(1.0 / theta, components, noise_var)
    return float(theta + R), float(max(0.0, 1.0 - dR / theta**2))


# ----------------------------------------------------------------------------------------
# plain mean
def mean_aggregate(ops: Sequence[np.ndarray], weights: np.ndarray) -> np.ndarray:
    """``sum_c weights_c ops_c`` (the paper's aggregation, eq. (3.2)); ``weights`` a
    probability vector over the L operators (None: equal weights)."""
    ops = check_operator_list(ops, "ops")
    weights = _check_weights(weights, len(ops))
    return operators._aggregate(ops, weights)


def _checked_mean(ops: Sequence[np.ndarray], om: np.ndarray) -> np.ndarray:
    """:func:`mean_aggregate` of operators already checked for shape and dtype
    (:func:`_check_uploads`), validated once (DESIGN section 9.2): finiteness and symmetry of the
    mean in one ``O(N^2)`` pass. A NaN or inf in an upload with a non-zero weight reaches the
    mean; only when the mean fails are the uploads checked one by one, to name the culprit.
    Uploads with weight 0 do not enter the mean and are checked on their own (the support test
    still reads them)."""
    J = operators._aggregate(ops, om)
    for c, op in enumerate(ops):
        if om[c] == 0.0:
            check_operator(op, f"uploads[{c}].operator")
    try:
        check_operator(J, "aggregate")
    except ValueError:
        for c, op in enumerate(ops):
            check_operator(op, f"uploads[{c}].operator")
        raise
    return J


# ----------------------------------------------------------------------------------------
# entrywise order statistics
def _sorted_block(ops: Sequence[np.ndarray], r0: int, r1: int) -> list[np.ndarray]:
    """Rows r0:r1 of the L operators, sorted entrywise (odd-even transposition network for
    small L: L rounds of vectorised compare-exchange; ``np.sort`` along the client axis else)."""
    L = len(ops)
    if L <= 8:
        X = [op[r0:r1].copy() for op in ops]
        for rnd in range(L):
            for i in range(rnd % 2, L - 1, 2):
                lo = np.minimum(X[i], X[i + 1])
                np.maximum(X[i], X[i + 1], out=X[i + 1])
                X[i] = lo
        return X
    S = np.sort(np.stack([op[r0:r1] for op in ops], axis=-1), axis=-1)
    return [S[..., i] for i in range(L)]


def _entrywise(ops: Sequence[np.ndarray], lo: int, hi: int) -> np.ndarray:
    """Mean of the order statistics ``lo..hi-1`` (0-based) of every entry, in row blocks."""
    N = ops[0].shape[0]
    L = len(ops)
    out = np.empty((N, N))
    rows = max(1, _BLOCK_ELEMS // (N * L))
    for r0 in range(0, N, rows):
        r1 = min(N, r0 + rows)
        X = _sorted_block(ops, r0, r1)
        acc = X[lo].copy()
        for i in range(lo + 1, hi):
            acc += X[i]
        if hi - lo > 1:
            acc /= hi - lo
        out[r0:r1] = acc
    return out


def entrywise_median(ops: Sequence[np.ndarray]) -> np.ndarray:
    """Entrywise median of L operators (the mean of the two middle values for even L), as
    :func:`numpy.median` along the client axis, in row blocks with bounded memory.
    Derived in {ref}`sec-robust-median`."""
    ops = check_operator_list(ops, "ops")
    L = len(ops)
    return _entrywise(ops, (L - 1) // 2, L // 2 + 1)


def _trim_count(L: int, trim: float) -> int:
    return math.floor(trim * L)


def entrywise_trimmed_mean(ops: Sequence[np.ndarray], trim: float) -> np.ndarray:
    """Entrywise trimmed mean: ``floor(trim L)`` smallest and largest values of every entry
    removed (the convention of :func:`scipy.stats.trim_mean`), the rest averaged.
    Derived in {ref}`sec-robust-median`."""
    ops = check_operator_list(ops, "ops")
    trim = check_in_range(trim, "trim", 0.0, 0.5, high_open=True)  # as check_defense
    L = len(ops)
    k = _trim_count(L, trim)
    return _entrywise(ops, k, L - k)


@functools.lru_cache(maxsize=64)
def gaussian_efficiency(L: int, defense: str = "median", trim: float = 0.2) -> float:
    """``e_L = L Var(T)`` for the estimator ``T`` of L independent standard normals.

    ``T`` is the median (``defense="median"``), the trimmed mean (``"trimmed"`` with ``trim``)
    or the mean (``e_L = 1``). It is the factor by which the entrywise estimator inflates the
    noise variance of the mean. Computed once per argument by Monte Carlo with a fixed seed
    (2^20 draws; relative standard error about 0.2 %); e.g. ``e_3 = 1.346`` and ``e_5 = 1.434``
    for the median (the exact values are 1.3457 and 1.4340). Derived in {ref}`sec-robust-median`.
    """
    L = check_count(L, "L", MAX_EFFICIENCY_L, why="Monte Carlo of 2^20 draws of L normals; e_L is "
                    "within 0.2 % of its limit pi/2 (median) well before")
    if defense not in ("median", "trimmed", "mean"):
        raise ValueError(f"defense must be 'median', 'trimmed' or 'mean', got {defense!r}")
    trim = check_in_range(trim, "trim", 0.0, 0.5, high_open=True)
    if defense == "mean" or L <= 2 or (defense == "trimmed" and _trim_count(L, trim) == 0):
        return 1.0
    if defense == "median":
        lo, hi = (L - 1) // 2, L // 2 + 1
    else:
        k = _trim_count(L, trim)
        lo, hi = k, L - k
    gen = np.random.default_rng(20261201)
    n, chunk = 1 << 20, 1 << 16
    acc = 0.0
    for _ in range(n // chunk):
        g = np.sort(gen.standard_normal((chunk, L)), axis=1)
        t = g[:, lo:hi].mean(axis=1)
        acc += float(t @ t)
    return L * acc / n  # E[T] = 0 by symmetry


def robust_noise_var(components: Sequence[khat.Component], noise_var: float, efficiency: float) -> float:
    """Semicircle variance of an entrywise median / trimmed mean (J units).

    For Gaussian entries the estimator minus the mean is independent of the mean (Basu's
    theorem: it is location-invariant, the mean is complete sufficient), so the estimator's
    noise is the mean's noise -- free Poisson components plus the privacy semicircle -- plus an
    independent entrywise noise of variance ``(e - 1)`` times the mean's entry variance, whose
    spectrum is a semicircle. The mean's noise has eigenvalue variance ``sum_c a_c^2 q_c``
    (second free cumulant of the components) ``+ noise_var``; the result is
    ``noise_var + (e - 1) (sum_c a_c^2 q_c + noise_var)``. Derived in {ref}`sec-robust-median`.
    """
    _, _, noise_var = _bulk_arrays(components, noise_var)
    if check_real(efficiency, "efficiency") < 1.0:
        raise ValueError(f"efficiency must be >= 1, got {efficiency!r}")
    v_mp = float(sum(c.scale * c.scale * c.ratio for c in components))
    return float(noise_var + (efficiency - 1.0) * (v_mp + noise_var))


def _memory_span(broadcast: np.ndarray | None, N: int) -> np.ndarray:
    """:func:`memory_span` with an (N, 0) basis for ``broadcast=None`` (nothing stored)."""
    span = memory_span(broadcast)
    return np.zeros((N, 0)) if span is None else span


def upload_spike_count(upload: Any, N: int, n_sigma: float = 4.0, *, broadcast: np.ndarray | None = None,
                       memory: np.ndarray | None = None) -> int:
    """Number of directions one upload holds: the stored patterns plus its fresh spikes outside them.

    The upload's fresh evidence ``F_c = U_c - (1 - w_c) A`` (:func:`fresh_operator`) has the
    bulk of its declared scalars; its eigenvalues above :func:`upload_threshold` (the
    noise-aware edge with ``n_sigma`` Tracy-Widom scales, privacy noise included) are its
    spikes. The count is ``k_m`` (the stored directions the upload holds: the rank of the
    broadcast ``A`` when it blended ``A`` in, ``w_c < 1``; none for an upload that ignores it,
    e.g. a rank-one poisoner, whose fake would otherwise count twice, once through its small
    overlap with the memory) plus the number of fresh spike directions whose larger part lies
    outside the memory's span (singular values of ``(I - P_m) V_f`` above ``1/sqrt 2``).
    Counting the whole upload ``U_c`` instead would count
    the difference between a stored pattern and its archetype's fresh spike (eigenvalue about
    ``(1 - w) w r^2 pi (1 - m^2)``, far above the edge at ``m = 0.95``) as a direction of its
    own, and feed it back through the broadcast. A stored pattern is kept (retention: a client
    need not see it again in its data), a fresh spike that is already stored counts once. An
    upload without fresh evidence (``M_c = 0`` or ``w_c = 0``) counts its memory directions
    only. Derived in {ref}`sec-robust-median`.
    """
    U = getattr(upload, "operator", None)
    if not isinstance(U, np.ndarray) or U.ndim != 2 or U.shape != (N, N):
        raise TypeError(f"upload must be a fedlam.protocol.Upload with an ({N}, {N}) operator, got {_describe(upload)}")
    broadcast = _check_broadcast(broadcast, N)
    Qm = _memory_span(broadcast, N) if memory is None else memory
    thr = upload_threshold(upload, N, n_sigma)
    # the stored directions this upload holds: all of them when it blended the broadcast in
    k_m = int(Qm.shape[1]) if _fresh_weight(upload) < 1.0 else 0
    if not math.isfinite(thr):
        return k_m
    F = fresh_operator(upload, broadcast)
    k = min(N, 16)
    while True:
        spec = _eig_top(F, k, "server")
        count = int(np.sum(spec.values > thr))
        if k == N or count < k - 8:
            break
        k = min(N, 4 * k)
    if count == 0:
        return k_m
    V = _ensure_vectors(F, spec, count).vectors[:, :count]
    if k_m:
        V = V - Qm @ (Qm.T @ V)
    sv = np.linalg.svd(V, compute_uv=False)
    return k_m + int(np.sum(sv * sv > 0.5))


def median_spike_count(uploads: Sequence[Any], N: int, n_sigma: float = 4.0, *,
                       broadcast: np.ndarray | None = None) -> tuple[int, np.ndarray]:
    """The lower median of the uploads' own spike counts (:func:`upload_spike_count`), and
    those counts: the count of the *typical* upload.

    With ``L`` uploads of which ``f < L / 2`` are an attacker's, the lower median of the ``L``
    counts lies between two honest counts (a minority cannot move it past the honest ones),
    whereas the median operator's own outliers include a fake's spike (the entrywise median
    still moves every entry towards it, {ref}`sec-robust-median`) and spikes no upload has (odd
    products of the archetypes). But it counts the typical upload, not the directions a
    majority holds: five uploads that each hold three of five archetypes, every archetype held
    by three, give 3 while the median operator holds all five. :func:`aggregate` therefore caps
    K-hat with :func:`majority_spike_count`; this count is kept as a diagnostic
    (``details["k_hat_median"]``) and its per-upload counts size that test's basis. Derived in
    {ref}`sec-robust-median`.
    """
    _, N0 = _check_uploads(uploads)
    if N0 != N:
        raise ValueError(f"N must be the uploads' dimension {N0}, got {N!r}")
    broadcast = _check_broadcast(broadcast, N)
    Qm = _memory_span(broadcast, N)
    counts = np.array([upload_spike_count(u, N, n_sigma, broadcast=broadcast, memory=Qm) for u in uploads],
                      dtype=np.int64)
    return int(np.sort(counts)[(len(counts) - 1) // 2]), counts


def majority_quorum(n_uploads: int) -> int:
    """The quorum of the median / trimmed mean's count: a strict majority ``floor(n/2) + 1`` of the
    ``n_uploads`` uploads. Derived in {ref}`sec-robust-median`."""
    n_uploads = check_positive_int(n_uploads, "n_uploads")
    return n_uploads // 2 + 1


def majority_spike_count(operator: np.ndarray, uploads: Sequence[Any], n_sigma: float = 4.0, *,
                         broadcast: np.ndarray | None = None,
                         upload_counts: np.ndarray | None = None) -> tuple[int, SupportResult]:
    """The robust spike count of an entrywise median / trimmed mean: the number of directions a
    strict majority of the uploads certifies, and the support test that found them.

    The entrywise median follows a majority of the uploads: an entry is moved by what more than
    half of them agree on, so the directions its operator can be trusted to hold are those a
    majority holds -- not the count of the typical upload (:func:`median_spike_count`). Five
    uploads that each hold three of five archetypes, every archetype held by three of them, give
    a median operator with all five archetypes as spikes, while each upload, and so the median
    of their counts, holds three. This count is the support test (:func:`support_test`, the
    same code as ``defense="support"``) with the quorum ``s =`` :func:`majority_quorum` ``(n)``
    for ``n`` uploads, run in the span of the median operator's leading eigenvectors: a
    direction counts when the fresh parts of at least ``s`` uploads certify it (each against its
    own noise-aware edge, :func:`upload_threshold`), or when it is stored (it passed when it
    entered: a stored archetype is retained without fresh votes).

    *Stored* here means a squared cosine above 1/2 with the stored patterns' span
    (:func:`memory_span`), not the support defence's Rayleigh quotient above 1/2 in the broadcast.
    Correlated stored patterns make the broadcast weak along part of their span: the paper's three
    silhouettes have broadcast eigenvalues 0.46, 0.95 and 1.59. When the clients' data hold only
    one of them (drift), no fresh part certifies that weakest direction, and the Rayleigh test
    dropped it from the count, and a stored silhouette with it (count 2 for 3 stored). With
    partial participation the same gap let a weakly certified direction, tilted onto the
    difference between a stored silhouette and its fresh version (overlap 0.985), be counted as a
    fourth (the scenario matrix's row 5, seed 1005, round 27).

    Why it is robust: ``f < n/2`` attackers are fewer than the quorum, so what they alone
    certify (a fake, the difference between a near-copy and its archetype) gets at most ``f <
    s`` votes and is not counted ({prf:ref}`thm-robust-support`, part 1 with ``s`` a majority);
    the odd products of archetypes that the entrywise median makes (outliers no upload has) are
    certified by no upload at all (Cauchy interlacing, :func:`support_test`).

    The count caps the factorization's K-hat (``RobustAggregate.max_k``), and the LAM takes the
    operator's *leading* K-hat directions, so the count runs along them: it is the number of
    leading eigenvectors, in order, whose larger part (a fraction above 1/2) lies in the
    supported subspace, stopping at the first that does not (and at most that subspace's
    dimension). A supported direction ranked below an unsupported one is not counted: were it
    counted, the LAM would take the unsupported one. This matters when no honest majority
    exists: one attacker among two uploads (partial participation) makes the median their mean,
    whose leading direction is the fake; the stored patterns still have the quorum (memory), but
    the count stops at the fake and is 0, so nothing is written that round (and a server told its
    stored patterns keeps them: ``federation.Server._majority_memory``).

    The basis holds the operator's leading ``d`` eigenvectors, ``d`` the stored span's rank
    plus ``ceil(sum_c k_c / s) + 8`` (``k_c`` the uploads' own counts, ``upload_counts``, computed
    with :func:`upload_spike_count` when None): a direction with ``s`` votes takes at least ``s``
    of the ``sum_c k_c`` certified directions, the 8 leave room for the odd-product spikes
    ranked among the archetypes; at most ``N // 2``. Derived in {ref}`sec-robust-median`.

    Parameters
    ----------
    operator : numpy.ndarray
        (N, N) the median / trimmed-mean operator (:func:`entrywise_median`).
    uploads : sequence of Upload
        The round's uploads.
    n_sigma : float
        Tracy-Widom scales above each upload's edge.
    broadcast : numpy.ndarray or None
        The server's last broadcast (None in round 0).
    upload_counts : numpy.ndarray or None
        (L,) each upload's own count (:func:`median_spike_count`'s second value).

    Returns
    -------
    (int, SupportResult)
        The count and the support test's result (``basis``: the leading eigenvectors, in
        order; ``supported``: the directions with the quorum).
    """
    ops, N = _check_uploads(uploads)
    J = check_operator_list([operator], "operator")[0]
    if J.shape != (N, N):
        raise ValueError(f"operator must be ({N}, {N}) like the uploads, got shape {J.shape}")
    broadcast = _check_broadcast(broadcast, N)
    s = majority_quorum(len(ops))
    _, p = check_defense("support", {"s": s, "n_sigma": n_sigma}, len(ops))
    Qm = _memory_span(broadcast, N)
    if upload_counts is None:
        upload_counts = np.array([upload_spike_count(u, N, n_sigma, broadcast=broadcast, memory=Qm)
                                  for u in uploads], dtype=np.int64)
    elif (not isinstance(upload_counts, np.ndarray) or upload_counts.shape != (len(ops),)
          or not np.issubdtype(upload_counts.dtype, np.integer) or np.any(upload_counts < 0)):
        raise ValueError(f"upload_counts must be None or an int array of {len(ops)} counts >= 0, "
                         f"got {_describe(upload_counts)}")
    d = min(N // 2, int(Qm.shape[1]) + math.ceil(int(np.sum(upload_counts)) / s) + 8)
    spec = _ensure_vectors(J, _eig_top(J, d, "server"), d)
    Q = np.ascontiguousarray(spec.vectors[:, :d])
    # the memory is the whole stored span (not the broadcast's directions above 1/2, as for the
    # support defence): see the docstring
    res = _support_in_basis(Q, None, uploads, ops, broadcast, N, p, _StoredSpan(Qm, whole=True))
    # the LAM takes the operator's leading directions: count them in order while the larger part
    # of each lies in the supported subspace (the first that does not ends the count)
    frac = np.einsum("ij,ij->i", res.supported, res.supported)
    bad = np.flatnonzero(frac <= 0.5)
    k = int(bad[0]) if bad.size else d
    return min(k, int(res.supported.shape[1])), res


# ----------------------------------------------------------------------------------------
# Krum
def krum_scores(ops: Sequence[np.ndarray], f: int) -> np.ndarray:
    """Krum score of every upload: the sum of its squared Frobenius distances to its
    ``L - f - 2`` nearest other uploads (Blanchard et al. 2017). Cost ``O(L^2 N^2)``
    through the Gram matrix. Derived in {ref}`sec-robust-krum`."""
    ops = check_operator_list(ops, "ops")
    f = check_nonneg_int(f, "f")
    L = len(ops)
    n_near = L - f - 2
    if n_near < 1:
        raise ValueError(f"Krum needs L - f - 2 >= 1 neighbours, got L = {L}, f = {f}")
    X = np.stack([op.ravel() for op in ops])
    G = X @ X.T
    d = np.diag(G)
    D = np.maximum(d[:, None] + d[None, :] - 2.0 * G, 0.0)
    np.fill_diagonal(D, np.inf)
    return np.sort(D, axis=1)[:, :n_near].sum(axis=1)


def krum_select(ops: Sequence[np.ndarray], f: int, m: int) -> np.ndarray:
    """Indices of the ``m`` uploads with the smallest Krum scores (ties by index), sorted."""
    m = check_positive_int(m, "m")
    if isinstance(ops, (list, tuple)) and check_nonneg_int(f, "f") <= len(ops) and m > len(ops) - f:
        raise ValueError(f"m must lie in [1, L - f] = [1, {len(ops) - f}], got {m}")
    sc = krum_scores(ops, f)
    order = np.lexsort((np.arange(sc.size), sc))
    return np.sort(order[:m])


# ----------------------------------------------------------------------------------------
# support: per-upload certification
def _fresh_weight(u: Any) -> float:
    """Blend weight of an upload's fresh evidence: NaN (a client that does not blend) -> 1."""
    w = getattr(u, "weight", None)
    if w is None:
        return 1.0
    w = float(w)
    return 1.0 if not math.isfinite(w) else w


def fresh_operator(upload: Any, broadcast: np.ndarray | None) -> np.ndarray:
    """The client's fresh evidence ``F_c = U_c - (1 - w_c) A``: its upload without the broadcast.

    An honest upload is ``w_c B_c + (1 - w_c) A`` (plus privacy noise), so ``F_c = w_c B_c``
    (plus that noise): the broadcast ``A`` the server itself sent carries no evidence and would
    otherwise let every stored pattern, a fake one included, vote for itself. A client that
    does not blend (weight NaN) or the first round (``A`` None) gives ``F_c = U_c``.
    Derived in {ref}`sec-robust-support`.
    """
    U = getattr(upload, "operator", None)
    if not isinstance(U, np.ndarray) or U.ndim != 2 or U.shape[0] != U.shape[1]:
        raise TypeError(f"upload must be a fedlam.protocol.Upload with an (N, N) operator, got {_describe(upload)}")
    broadcast = _check_broadcast(broadcast, U.shape[0])
    w = _fresh_weight(upload)
    if broadcast is None or w == 1.0:
        return U
    return U - (1.0 - w) * broadcast


def upload_threshold(upload: Any, N: int, n_sigma: float = 4.0) -> float:
    """The upload's own bulk edge plus ``n_sigma`` Tracy-Widom scales, from its scalars (J units).

    The fresh part ``w_c B_c`` of an honest upload has the bulk ``w_c s2_c / N`` times a
    Marchenko-Pastur law of ratio ``N / M_c`` (``s2_c`` its declared bulk variance, 1 when
    unknown), plus the semicircle of its privacy noise (eigenvalue variance ``N sigma_c^2``):
    :func:`fedlam.khat.free_edge` of that one component, moved by the finite-N shift of +-1
    entries (:func:`fedlam.khat.kurtosis_edge_shift`), and :func:`fedlam.khat.free_tw_scale`.
    No largest eigenvalue of the bulk exceeds it except with probability about
    ``1 - F_TW1(n_sigma)`` (2.2e-4 at 4). NaN for an upload without fresh evidence
    (``M_c = 0`` or ``w_c = 0``). Derived in {ref}`sec-robust-support`.
    """
    M = getattr(upload, "batch_size", None)
    if isinstance(M, (bool, np.bool_)) or not isinstance(M, numbers.Integral) or M < 0:
        raise TypeError(f"upload.batch_size must be an int >= 0, got {M!r}")
    N = check_positive_int(N, "N", minimum=2)
    n_sigma = check_real(n_sigma, "n_sigma")
    w = _fresh_weight(upload)
    if M == 0 or w <= 0.0:
        return float("nan")
    s2 = getattr(upload, "noise_var", None)
    s2 = 1.0 if s2 is None else check_in_range(s2, "upload.noise_var", 0.0, None)
    sig = getattr(upload, "dp_sigma", 0.0) or 0.0
    sig = check_in_range(sig, "upload.dp_sigma", 0.0, None)
    v = N * sig * sig
    if s2 > 0:
        # the free edge plus the first-order shift of the +-1 entries' fourth cumulant (excess
        # kurtosis 4 / s2 - 6: 15 at r = 0.9, about three Tracy-Widom scales at N = 300)
        comps = [khat.Component(w * s2 / N, N / int(M), khat.pm1_kurtosis(min(s2, 1.0)))]
        edge, shift = khat.kurtosis_edge_shift(comps, N=N, noise_var=v)
        edge += shift
    else:
        comps = []
        edge = khat.free_edge(comps, noise_var=v)
    tw = khat.free_tw_scale(comps, N, noise_var=v)
    return float(edge + n_sigma * tw)


def group_threshold(uploads: Sequence[Any], N: int, n_sigma: float = 4.0) -> float:
    """:func:`upload_threshold` of the mean of several uploads' fresh parts (a voting group).

    The mean of the fresh parts ``F_c = w_c B_c + Z_c`` of the ``g`` members with fresh evidence
    has the bulk of the free convolution of their Marchenko-Pastur components, each scaled by
    ``1 / g`` (``w_c s2_c / (g N)``, ratio ``N / M_c``), with the semicircle of the averaged
    privacy noise (eigenvalue variance ``N sum_c sigma_c^2 / g^2``): the edge of
    :func:`fedlam.khat.free_edge` moved by the ``+-1`` entries' kurtosis shift, plus ``n_sigma``
    Tracy-Widom scales. A spike of strength ``lambda`` held by every member stays at ``lambda``
    in the mean while the noise's scale falls like ``1 / sqrt(g)``: under example-level privacy,
    whose noise dominates one upload's bulk, a group of ``g`` certifies spikes about
    ``sqrt(g)`` times weaker than one upload. NaN when no member has fresh evidence; for one
    such member, :func:`upload_threshold` itself. Derived in {ref}`sec-robust-privacy`.
    """
    if isinstance(uploads, (str, bytes, np.ndarray)) or not isinstance(uploads, Sequence) or len(uploads) == 0:
        raise TypeError(f"uploads must be a non-empty list of fedlam.protocol.Upload, got {_describe(uploads)}")
    N = check_positive_int(N, "N", minimum=2)
    n_sigma = check_real(n_sigma, "n_sigma")
    own = [upload_threshold(u, N, n_sigma) for u in uploads]
    fresh = [u for u, t in zip(uploads, own, strict=True) if math.isfinite(t)]
    if len(fresh) <= 1:
        return next((t for t in own if math.isfinite(t)), float("nan"))
    return _group_threshold(fresh, N, n_sigma)


def _group_threshold(fresh: Sequence[Any], N: int, n_sigma: float, g: int | None = None,
                     shares: np.ndarray | None = None) -> float:
    """:func:`group_threshold` of two or more validated members, all with fresh evidence: each
    member's part scaled by ``1 / g`` (``g`` default their number), or by its share ``shares[c]``
    of a weighted mean (component ``w s2 a_c / N``, noise ``N sum a_c^2 sigma_c^2``)."""
    g = len(fresh) if g is None else g
    comps, v = [], 0.0
    for c, u in enumerate(fresh):
        s2 = getattr(u, "noise_var", None)
        s2 = 1.0 if s2 is None else float(s2)
        sig = float(getattr(u, "dp_sigma", 0.0) or 0.0)
        if shares is None:
            v += N * sig * sig / (g * g)
            scale = _fresh_weight(u) * s2 / (g * N)
        else:
            a = float(shares[c])
            v += N * sig * sig * a * a
            scale = _fresh_weight(u) * s2 * a / N
        if s2 > 0:
            comps.append(khat.Component(scale, N / int(u.batch_size),
                                        khat.pm1_kurtosis(min(s2, 1.0))))
    if comps:
        edge, shift = khat.kurtosis_edge_shift(comps, N=N, noise_var=v)
        edge += shift
    else:
        edge = khat.free_edge(comps, noise_var=v)
    return float(edge + n_sigma * khat.free_tw_scale(comps, N, noise_var=v))


def _shared_thresholds(uploads: Sequence[Any], own: Sequence[float], parts: Sequence[Sequence[int]], N: int,
                       n_sigma: float, weights: np.ndarray | None = None) -> dict[int, float]:
    """One threshold per voter size ``g`` for many leave-out voters: the group threshold of *every*
    upload with fresh evidence at the scale of a voter of ``g`` members (components ``w s2 / (g N)``,
    noise ``N sum sigma^2 / g^2``). A voter's own members are a subset of these, and adding a
    positive Marchenko-Pastur component or noise variance moves the free edge up, so the shared
    threshold is at least each voter's own (checked in the tests): it certifies no more than the
    exact test, at a cost of O(L) instead of O(L^2) (a voter leaves out ``s - 1`` of ``L`` uploads,
    so the two differ by O(1/L)). With ``weights`` (a weighted mean), every upload's share is its
    weight over the smallest total weight of a voter of that size (the largest share any voter
    gives it)."""
    idx = [c for c, t in enumerate(own) if math.isfinite(t)]
    fresh = [uploads[c] for c in idx]
    sizes: dict[int, float] = {}
    for v in parts:
        f = [c for c in v if math.isfinite(own[c])]
        tw = float(len(f)) if weights is None else float(sum(weights[c] for c in f))
        sizes[len(f)] = min(sizes.get(len(f), math.inf), tw)
    out: dict[int, float] = {}
    for g in sorted(x for x in sizes if x > 1):
        if weights is None:
            out[g] = _group_threshold(fresh, N, n_sigma, g=g)
        else:
            out[g] = _group_threshold(fresh, N, n_sigma, shares=weights[idx] / sizes[g])
    return out


def voting_groups(n_uploads: int, groups: int | str | None, s: int = 2) -> list[list[int]]:
    """The voters of the support test: each upload alone (``groups`` None), or the uploads in
    ``min(groups, n_uploads)`` groups, upload ``c`` (in the round's order) in group
    ``c mod groups``. The server fixes the partition before it reads the uploads, so ``k``
    attackers sit in at most ``k`` groups and add at most ``k`` votes, as without groups.

    ``groups="leave-out"``: one voter per set of ``s - 1`` uploads left out (``C(n, s - 1)``
    voters, each the other ``n - s + 1`` uploads; the plain mean alone for ``s = 1`` or a single
    upload), and a direction needs *every* voter (:func:`voting_quorum`). ``k < s`` attackers
    are all left out of one voter, whose mean holds only honest evidence: a fake they alone hold
    fails there. Each voter averages nearly every upload, so its privacy noise is about the mean's,
    and the test certifies near the mean's own threshold, where single uploads or small groups
    show nothing. Derived in {ref}`sec-robust-privacy`."""
    n = check_positive_int(n_uploads, "n_uploads")
    s = check_positive_int(s, "s")
    groups = _check_groups(groups)
    if groups is None:
        return [[c] for c in range(n)]
    if groups == LEAVE_OUT:
        out = min(s - 1, n - 1)
        return [[c for c in range(n) if c not in gone] for gone in itertools.combinations(range(n), out)]
    G = min(int(groups), n)
    return [list(range(g, n, G)) for g in range(G)]


def voting_quorum(n_voters: int, groups: int | str | None, s: int) -> int:
    """Votes a direction needs: ``s``, or every voter with ``groups="leave-out"``."""
    n = check_positive_int(n_voters, "n_voters")
    s = check_positive_int(s, "s")
    return n if _check_groups(groups) == LEAVE_OUT else s


def _check_groups(groups: Any) -> int | str | None:
    """``groups`` of :func:`voting_groups` checked: None, a positive int or ``"leave-out"``."""
    if isinstance(groups, str):
        if groups != LEAVE_OUT:
            raise ValueError(f"groups must be None, an int or {LEAVE_OUT!r}, got {groups!r}")
        return groups
    return None if groups is None else check_positive_int(groups, "groups")


def _orth(X: np.ndarray, rtol: float = 1e-8) -> np.ndarray:
    """Orthonormal basis of the column span of X (columns dropped below ``rtol`` of the largest)."""
    if X.shape[1] == 0:
        return X.copy()
    U, sv, _ = np.linalg.svd(X, full_matrices=False)
    keep = sv > rtol * max(float(sv[0]), 1e-300)
    return np.ascontiguousarray(U[:, keep])


def memory_span(broadcast: np.ndarray | None) -> np.ndarray | None:
    """(N, r) orthonormal basis of the range of the broadcast: the span of the stored patterns.

    The broadcast ``xi^T xi / N`` of ``K_b`` stored +-1 patterns has rank at most ``K_b`` and
    trace exactly ``K_b``; its range comes from its products with ``K_b + 8`` fixed Gaussian
    vectors (a randomized range finder, exact for an operator of that rank), or from a full
    eigendecomposition when that sketch is of full rank (an operator that is not a pattern
    operator). None for None; an (N, 0) basis for the zero broadcast (nothing stored).
    Derived in {ref}`sec-robust-fresh`.
    """
    return None if broadcast is None else _span_and_compression(broadcast)[0]


def _span_and_compression(broadcast: np.ndarray, patterns: np.ndarray | None = None
                          ) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`memory_span`'s basis ``U`` and, where the broadcast is ``U M U^T`` (a symmetric
    operator of that range), the (r, r) compression ``M``, so that ``broadcast @ X`` is
    ``U (M (U^T X))`` without a pass over the (N, N) matrix (None where it is not).

    From the sketch ``Y = B G``: if ``B = U M U^T`` then ``U^T Y = M (U^T G)``, and ``U^T G``
    (r x k, r < k Gaussian) has full row rank, so ``M = (U^T Y)(U^T G)^+``; the identity is
    checked on the sketch (to 1e-12 of its norm) and on M's symmetry, else None.

    With ``patterns`` ((S, N) +-1, the patterns the server stored: the broadcast should be
    ``patterns^T patterns / N``) and the broadcast equal to their operator on one Gaussian probe
    (to 1e-12 of its norm): ``U`` is an orthonormal basis of their span and
    ``M = (P U)^T (P U) / N``, with one matrix-vector product over the broadcast instead of the
    sketch's ``K_b + 8``. Otherwise (another operator) the sketch as above."""
    if not isinstance(broadcast, np.ndarray) or broadcast.ndim != 2 or broadcast.shape[0] != broadcast.shape[1] \
            or broadcast.dtype != np.float64:
        raise ValueError(f"broadcast must be None or a finite float64 (N, N) operator, got {_describe(broadcast)}")
    N = broadcast.shape[0]
    if isinstance(patterns, np.ndarray) and patterns.ndim == 2 and patterns.shape[1] == N and patterns.shape[0]:
        P = patterns.astype(np.float64)
        g = np.random.default_rng(1).standard_normal(N)
        y = broadcast @ g
        z = P.T @ (P @ g) / N
        ny = float(np.linalg.norm(y))
        if math.isfinite(ny) and float(np.linalg.norm(y - z)) <= 1e-12 * max(ny, 1e-300):
            U = _orth(P.T / math.sqrt(N))
            C = P @ U
            M = C.T @ C / N
            return U, 0.5 * (M + M.T)
    tr = float(np.trace(broadcast))
    G = np.random.default_rng(0).standard_normal((N, min(N, max(0, math.ceil(tr)) + 8) if math.isfinite(tr) else 1))
    Y = broadcast @ G
    # a non-finite entry of the broadcast reaches its row of the Gaussian sketch (x * g with g != 0)
    if not math.isfinite(tr) or not np.all(np.isfinite(Y)):
        raise ValueError(f"broadcast must be None or a finite float64 (N, N) operator, got {_describe(broadcast)}")
    k = G.shape[1]
    U = _orth(Y)
    if U.shape[1] == k and k < N:
        vals, vecs = np.linalg.eigh(0.5 * (broadcast + broadcast.T))
        top = float(np.max(np.abs(vals)))
        keep = np.abs(vals) > 1e-8 * max(top, 1e-300)
        U = np.ascontiguousarray(vecs[:, keep])
        sym = np.array_equal(broadcast, broadcast.T)
        return U, (np.diag(vals[keep]) if sym else None)
    if U.shape[1] == 0:
        return U, np.zeros((0, 0))
    UG, UY = U.T @ G, U.T @ Y
    M = UY @ np.linalg.pinv(UG)
    scale = max(float(np.linalg.norm(Y)), 1e-300)
    asym = float(np.linalg.norm(M - M.T)) > 1e-12 * max(float(np.linalg.norm(M)), 1e-300)
    if asym or np.linalg.norm(M @ UG - UY) > 1e-12 * scale:
        return U, None
    return U, 0.5 * (M + M.T)


def _weak_memory_basis(Q: np.ndarray, span: np.ndarray, Gm: np.ndarray) -> np.ndarray:
    """Orthonormal coordinates (in Q) of the stored span's directions that the broadcast's
    Rayleigh test misses: principal vectors of span Q and ``span`` with squared cosine above 1/2,
    minus the strong memory ``Gm`` (coordinates, orthonormal; empty: all such principal vectors)."""
    d = Q.shape[1]
    if d == 0 or span.shape[1] == 0:
        return np.zeros((d, 0))
    C = span.T @ Q
    H = C.T @ C
    if Gm.shape[1]:
        Pm = np.eye(d) - Gm @ Gm.T
        H = Pm @ H @ Pm
    vals, G = np.linalg.eigh(0.5 * (H + H.T))
    return G[:, vals > 0.5]


def _memory_basis(Q: np.ndarray, broadcast: np.ndarray | None, stored: np.ndarray | None = None) -> np.ndarray:
    """Orthonormal coordinates (in Q) of the directions of span Q stored in the broadcast.

    The broadcast ``xi^T xi / N`` has eigenvalue ~1 on the stored patterns' span and 0 off it;
    directions of ``Q`` with Rayleigh quotient above 1/2 in it are memory. With ``stored`` (an
    orthonormal basis of the stored span, :func:`memory_span`): the directions of ``Q`` whose
    squared cosine with that span exceeds 1/2 (principal vectors), however weak the broadcast
    is along them (see :func:`majority_spike_count`)."""
    d = Q.shape[1]
    if broadcast is None or d == 0:
        return np.zeros((d, 0))
    if stored is not None:
        return _weak_memory_basis(Q, stored, np.zeros((d, 0)))  # the principal vectors, nothing excluded
    H = Q.T @ (broadcast @ Q)
    vals, G = np.linalg.eigh(0.5 * (H + H.T))
    return G[:, vals > 0.5]


class VoterMeans:
    """The fresh means of a round's voters (:func:`voting_groups`), from per-upload fresh parts.

    A voter's mean is that of its members' fresh parts ``part(c)`` (members without fresh
    evidence, ``live[c]`` False, left out), with the server's aggregation ``weights``
    renormalised over them (None: the equal mean); a voter of one upload is that upload's own
    part. Leave-out voters (``leave_out``) that hold most uploads take the sum of every part
    minus the few they leave out (computed once, when first needed): ``O(L)`` parts per round
    instead of ``O(L^2)``. Used by the support test's certification (:func:`_certify`) and the
    voted refresh (:func:`fedlam.refresh.refresh_voted`). Derived in {ref}`sec-robust-support`.
    """

    def __init__(self, part: Callable[[int], np.ndarray], live: Sequence[bool], weights: np.ndarray | None,
                 *, leave_out: bool = True) -> None:
        self._part, self._live, self._om, self._leave_out = part, list(live), weights, leave_out
        self._total: np.ndarray | None = None

    def _weighted(self, c: int) -> np.ndarray:
        Y = self._part(c)
        return Y if self._om is None else self._om[c] * Y

    def mean(self, members: Sequence[int]) -> np.ndarray | None:
        """The voter's fresh mean (a new array), or None when it has no say: no member with
        fresh evidence, or several members of total weight 0."""
        fresh = [c for c in members if self._live[c]]
        if not fresh:
            return None
        if len(fresh) == 1:
            return np.array(self._part(fresh[0]), dtype=np.float64)
        om, n = self._om, len(self._live)
        tw = len(fresh) if om is None else float(om[fresh].sum())
        if tw <= 0.0:
            return None
        if self._leave_out and 2 * len(members) > n:
            if self._total is None:
                for c in range(n):
                    if self._live[c]:
                        Yc = self._weighted(c)
                        self._total = np.array(Yc, dtype=np.float64) if self._total is None else self._total + Yc
            assert self._total is not None  # a live member exists
            inside = set(members)
            Y = self._total.copy()
            for c in range(n):
                if c not in inside and self._live[c]:
                    Y -= self._weighted(c)
        else:
            Y = np.array(self._weighted(fresh[0]), dtype=np.float64)
            for c in fresh[1:]:
                Y += self._weighted(c)
        Y /= tw
        return Y


def _certify(uploads: Sequence[Any], ops: Sequence[np.ndarray], Q: np.ndarray, broadcast: np.ndarray | None,
             N: int, n_sigma: float, groups: int | str | None = None,
             s: int = 2, weights: np.ndarray | None = None,
             kept: SpanProducts | None = None) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, list[np.ndarray]]:
    """Per voter (an upload, or a group of them with ``groups``: :func:`voting_groups`): the
    certified Ritz directions of its fresh part in span Q (coordinates). A group's fresh part is
    the mean of its members' (members without fresh evidence left out) with the server's
    aggregation ``weights`` renormalised over them (None or uniform: the equal mean), tested
    against :func:`group_threshold` of the same weights; a voter of one upload is that upload's
    own test. With ``kept`` (:class:`SpanProducts`), every product with ``Q`` also multiplies the
    stored span (one pass over each operator for both) and the span's part is kept."""
    d = Q.shape[1]
    # the basis, and with ``kept`` the stored span beside it: one pass over each operator for both
    keeper = kept if kept is not None and d and kept.span.shape[1] else None
    QS = Q if keeper is None else np.hstack([Q, keeper.span])
    AQ = None
    if broadcast is not None and d and kept is not None and kept.compression is not None:
        AQ = kept.times(None, Q)      # the broadcast is span M span^T: no pass over it
    elif broadcast is not None and d:
        AQS = _sym_matmul(broadcast, QS)
        AQ = AQS[:, :d]
        if keeper is not None:
            keeper.of_broadcast = AQS[:, d:]
    own = [upload_threshold(u, N, n_sigma) for u in uploads]
    parts = voting_groups(len(ops), groups, s)
    P, n_cert, thr, ritz = [], np.zeros(len(parts), dtype=np.int64), np.full(len(parts), np.nan), []
    products: dict[int, np.ndarray] = {}   # ops[c] @ Q, once per upload (leave-out voters share them)

    def prod(c: int) -> np.ndarray:
        if c not in products:
            Y = _sym_matmul(ops[c], QS)
            products[c] = Y[:, :d]
            if keeper is not None:
                keeper.of_upload[c] = Y[:, d:]
        return products[c]

    # the voters' means use the server's weights (a batch-weighted mean: a 1-example upload must
    # not weigh as much in a voter as a 500-example one); equal weights keep the equal mean
    om = None if weights is None or np.all(weights == weights[0]) else np.asarray(weights, dtype=np.float64)
    leave_out = _check_groups(groups) == LEAVE_OUT
    shared = (_shared_thresholds(uploads, own, parts, N, n_sigma, om)
              if leave_out and len(parts) > LEAVE_OUT_EXACT else None)

    def fresh_part(c: int) -> np.ndarray:
        Y = prod(c).copy()
        w = _fresh_weight(uploads[c])
        if AQ is not None and w != 1.0:
            Y -= (1.0 - w) * AQ
        return Y

    means = VoterMeans(fresh_part, [math.isfinite(t) for t in own], om, leave_out=leave_out)
    for j, members in enumerate(parts):
        fresh = [c for c in members if math.isfinite(own[c])]
        share = None if om is None or len(fresh) < 2 or om[fresh].sum() <= 0 else om[fresh] / om[fresh].sum()
        if shared is not None and len(fresh) > 1:
            thr[j] = shared[len(fresh)]
        elif len(fresh) > 1:
            thr[j] = _group_threshold([uploads[c] for c in fresh], N, n_sigma, shares=share)
        elif fresh:
            thr[j] = own[fresh[0]]
        Y = means.mean(members) if d else None
        if Y is None:   # no member with fresh evidence, or members of weight 0 only: no vote
            P.append(np.zeros((d, 0)))
            ritz.append(np.empty(0))
            continue
        H = Q.T @ Y
        vals, G = np.linalg.eigh(0.5 * (H + H.T))
        keep = vals > thr[j]
        P.append(G[:, keep])
        n_cert[j] = int(keep.sum())
        ritz.append(vals[::-1].copy())
    return P, n_cert, thr, ritz


def support_test(
    candidates: np.ndarray | None,
    uploads: Sequence[Any],
    params: Mapping[str, Any] | None = None,
    *,
    broadcast: np.ndarray | None = None,
    basis: np.ndarray | None = None,
) -> SupportResult:
    """The support test: which directions (and candidate patterns) do at least ``s`` clients hold?

    1. Basis: ``Q`` = an orthonormal basis of ``[basis, candidates / sqrt(N)]`` (``basis``:
       e.g. the detected eigenvectors of the aggregate; the candidates alone are *not* enough
       against a pattern that overlaps a real archetype, see Notes).
    2. Per upload ``c`` with fresh evidence (:func:`fresh_operator`): the Ritz pairs of
       ``F_c`` in ``Q``; the *certified* directions are those whose Ritz value exceeds
       :func:`upload_threshold`. By Cauchy interlacing the k-th Ritz value is at most the
       k-th eigenvalue of ``F_c``, so the number of certified directions never exceeds the
       number of eigenvalues of ``F_c`` above its bulk edge plus margin: for any ``Q``
       (chosen by anyone), an upload without outliers certifies nothing except with the
       Tracy-Widom tail probability.
    3. Votes: client ``c`` votes for a unit direction ``y`` of ``span Q`` when
       ``||P_c y||^2 >= rho`` (``P_c`` the projector on its certified directions); a direction
       in the server's memory (the broadcast) gets ``s`` votes (it passed when it entered). The
       supported subspace is spanned by the directions with at least ``s`` votes, searched
       among the memory directions and the pairwise intersections of the certified subspaces
       (principal vectors with squared cosine ``>= rho``; for ``s = 1``, every certified
       direction): a direction held by ``s >= 2`` clients lies in the intersection of any two
       of them.
    4. A candidate pattern is accepted iff it has at least ``s`` votes itself.

    Derived in {ref}`sec-robust-support`.

    Parameters
    ----------
    candidates : numpy.ndarray or None
        (C, N) +-1 patterns to test (None or (0, N): only the subspace is computed).
    uploads : sequence of Upload
        The round's uploads (operators and scalars).
    params : dict or None
        ``s``, ``n_sigma``, ``rho`` (see :func:`check_defense`).
    broadcast : numpy.ndarray or None
        The server's last broadcast ``A`` (None in round 0).
    basis : numpy.ndarray or None
        (N, k) directions to test in addition to the candidates.

    Returns
    -------
    SupportResult

    Notes
    -----
    Why the basis matters: a pattern ``xi_f`` with overlap ``m`` with an archetype ``xi`` has
    Rayleigh quotient ``~ m^2 r^2 pi`` in every honest upload holding ``xi`` -- far above their
    edges. If ``xi`` is in ``Q``, the honest certified direction is ``xi`` and ``xi_f`` has
    only the fraction ``m^2`` in it; if ``xi`` is not, the honest direction in ``Q`` *is*
    ``xi_f``'s and it is certified. An archetype's own certified directions in two clients agree
    to ``O(M^{-1/2})``; a corrupted copy at overlap ``m`` has squared cosine ``m^2`` with them and
    gets their votes only if ``m^2 >= rho``.
    """
    ops, N = _check_uploads(uploads)
    _, p = check_defense("support", params, len(ops))
    broadcast = _check_broadcast(broadcast, N)
    cols = []
    if basis is not None:
        if not isinstance(basis, np.ndarray) or basis.ndim != 2 or basis.shape[0] != N:
            raise ValueError(f"basis must be None or an (N, k) array with N = {N}, got {_describe(basis)}")
        cols.append(basis.astype(np.float64))
    C = 0
    if candidates is not None:
        check_pm1(candidates, "candidates", ndim=2, allow_empty=True)
        if candidates.shape[1] != N:
            raise ValueError(f"candidates must be (C, {N}), got shape {candidates.shape}")
        C = candidates.shape[0]
        if C:
            cols.append(candidates.T.astype(np.float64) / math.sqrt(N))
    Q = _orth(np.hstack(cols)) if cols else np.zeros((N, 0))
    return _support_in_basis(Q, candidates if C else None, uploads, ops, broadcast, N, p)


def _candidate_directions(P: Sequence[np.ndarray], Gm: np.ndarray, s: int, rho: float, d: int,
                          every_voter: bool = False) -> np.ndarray:
    """Unit directions (columns, Q coordinates) that could have ``s`` votes.

    ``every_voter`` (leave-out voters, a direction needs them all) with more than
    :data:`LEAVE_OUT_EXACT` voters: the intersections of voter 0 with each other voter only
    (a direction every voter holds lies in each of them), ``O(L)`` pairs instead of ``O(L^2)``."""
    cols = [Gm]
    if s == 1:
        cols.extend(Pc for Pc in P if Pc.shape[1])
    live = [Pc for Pc in P if Pc.shape[1]]
    first_only = every_voter and len(P) > LEAVE_OUT_EXACT
    for i in range(1 if first_only else len(live)):
        for j in range(i + 1, len(live)):
            U, sv, Wt = np.linalg.svd(live[i].T @ live[j], full_matrices=False)
            keep = sv * sv >= rho
            if keep.any():
                x = live[i] @ U[:, keep] + live[j] @ Wt.T[:, keep]   # mean of the two principal vectors
                cols.append(x / np.linalg.norm(x, axis=0, keepdims=True))
    return np.hstack(cols) if cols else np.zeros((d, 0))


def _mem_fraction(G: np.ndarray | None, Y: np.ndarray, nrm: np.ndarray) -> np.ndarray:
    if G is None or not G.shape[1]:
        return np.zeros(Y.shape[1])
    return np.einsum("ij,ij->j", G.T @ Y, G.T @ Y) / nrm


def _vote_counts(Y: np.ndarray, P: Sequence[np.ndarray], Gm: np.ndarray, s: int,
                 rho: float, Gw: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per column of Y (normalised in-span parts): fractions ``||P_c y||^2`` (n, L) and vote counts
    (the memory ``Gm`` counts ``s``; the weak memory ``Gw``, with ``Gm``, ``s - 1``)."""
    nrm = np.einsum("ij,ij->j", Y, Y)
    nrm = np.where(nrm > 0, nrm, 1.0)
    frac = np.stack([np.einsum("ij,ij->j", Pc.T @ Y, Pc.T @ Y) / nrm for Pc in P], axis=1) \
        if P else np.zeros((Y.shape[1], 0))
    mem = _mem_fraction(Gm, Y, nrm)
    counts = np.sum(frac >= rho, axis=1) + s * (mem >= rho)
    if Gw is not None:
        weak = mem + _mem_fraction(Gw, Y, nrm)
        counts = counts + (s - 1) * ((weak >= rho) & (mem < rho))
    return frac, counts.astype(np.int64)


def _sth_fraction(frac: np.ndarray, X: np.ndarray, Gm: np.ndarray, s: int,
                  Gw: np.ndarray | None = None) -> np.ndarray:
    """Per column of X: the s-th largest of the clients' fractions and, s times, the memory's
    (with a weak memory ``Gw``: the memory's once and, s - 1 times, that of ``Gm`` and ``Gw``)."""
    n = X.shape[1]
    nrm = np.einsum("ij,ij->j", X, X)
    nrm = np.where(nrm > 0, nrm, 1.0)
    mem = _mem_fraction(Gm, X, nrm)
    if Gw is None:
        allf = np.hstack([frac, np.repeat(mem[:, None], s, axis=1)])
    else:
        weak = mem + _mem_fraction(Gw, X, nrm)
        allf = np.hstack([frac, mem[:, None], np.repeat(weak[:, None], s - 1, axis=1)])
    if allf.shape[1] < s:
        return np.zeros(n)
    return -np.sort(-allf, axis=1)[:, s - 1]


def _residual_fractions(x: np.ndarray, P: Sequence[np.ndarray], basis: Sequence[np.ndarray],
                        rho: float) -> np.ndarray:
    """Per voter: the fraction of the unit direction ``x`` (orthogonal to ``basis``, the directions
    kept so far) that lies in the part of the voter's certified span ``P_c`` outside ``basis``.

    That part is spanned by the left singular vectors of ``(I - B B^T) P_c`` (``B`` = ``basis``)
    whose squared singular value exceeds ``1 - rho``: a certified direction with at least the
    fraction ``1 - rho`` of its mass outside the kept span, the same floor a new direction's
    residual must clear. A certified direction that is (nearly) a kept one contributes nothing,
    so its noise cannot vote for ``x``. Derived in {ref}`sec-robust-support`."""
    B = np.column_stack(basis) if len(basis) else None
    out = np.zeros(len(P))
    for c, Pc in enumerate(P):
        if not Pc.shape[1]:
            continue
        R = Pc - B @ (B.T @ Pc) if B is not None else Pc
        U, sv, _ = np.linalg.svd(R, full_matrices=False)
        U = U[:, sv * sv > 1.0 - rho]
        out[c] = float(np.sum((U.T @ x) ** 2))
    return out


class SpanProducts:
    """Products of a round's operators with the stored span, kept for the refresh to reuse.

    The support test multiplies every upload and the broadcast by its basis; with a stored span
    ``span`` ((N, r) orthonormal, :func:`memory_span`) it multiplies them by ``[Q, span]`` in the
    same pass and keeps ``op_c @ span`` and ``broadcast @ span``. A stored pattern ``p`` lies in
    that span, so the refresh's ``op_c @ p`` is ``(op_c @ span) (span^T p)`` without another pass
    over the (N, N) operator (:func:`fedlam.refresh.refresh_voted`); only a pattern outside the
    span (one that entered this round) needs its own products. Derived in {ref}`sec-robust-privacy`.
    """

    def __init__(self, span: np.ndarray, ops: Sequence[np.ndarray], broadcast: np.ndarray | None,
                 compression: np.ndarray | None = None) -> None:
        self.span = span
        self.ops = list(ops)
        self.broadcast = broadcast
        #: (r, r) ``M`` with ``broadcast = span M span^T`` (None: not of that form, or unknown)
        self.compression = compression
        #: upload index -> ops[c] @ span
        self.of_upload: dict[int, np.ndarray] = {}
        self.of_broadcast: np.ndarray | None = None

    def in_span(self, P: np.ndarray, rtol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
        """Coefficients ``C = span^T P`` and which columns of ``P`` lie in the span (residual at
        most ``rtol`` of the column's norm)."""
        C = self.span.T @ P
        R = P - self.span @ C
        inside = np.sqrt(np.einsum("ij,ij->j", R, R)) <= rtol * np.sqrt(np.einsum("ij,ij->j", P, P))
        return C, inside

    def belongs_to(self, ops: Sequence[Any], broadcast: Any) -> bool:
        """Whether these products were taken of exactly these operators and this broadcast."""
        return broadcast is self.broadcast and len(ops) == len(self.ops) \
            and all(a is b for a, b in zip(ops, self.ops, strict=True))

    def times(self, c: int | None, P: np.ndarray) -> np.ndarray:
        """``op @ P`` for the ``c``-th upload's operator (the broadcast for ``c=None``), from the
        kept products for the columns of ``P`` in the span (the broadcast through its
        compression when it has one)."""
        if c is None and self.compression is not None:
            return self.span @ (self.compression @ (self.span.T @ P))
        op = self.broadcast if c is None else self.ops[c]
        assert op is not None  # a broadcast's products are asked for only when there is one
        kept = self.of_broadcast if c is None else self.of_upload.get(c)
        if kept is None or self.span.shape[1] == 0:
            return op @ P
        C, inside = self.in_span(P)
        if not inside.any():
            return op @ P
        out = kept @ C
        if not inside.all():
            out[:, ~inside] = op @ P[:, ~inside]
        return out


@dataclass(frozen=True)
class _StoredSpan:
    """How the support test counts the stored patterns' span ``span`` ((N, r), :func:`memory_span`).

    ``whole=True``: the whole span is memory (leave-out voters and the upload-count rule, where
    every voter must hold a direction and a weak stored direction would otherwise be flattened);
    ``whole=False``: the fresh acceptance's rule -- the broadcast's directions above 1/2 are
    memory, the rest of the span counts ``s - 1`` votes, and merged groups of stored patterns are
    snapped back to one of them (:func:`_snap_to_stored`).
    """

    span: np.ndarray
    whole: bool
    #: where the support test keeps its products with the span for the refresh (None: not kept)
    products: SpanProducts | None = None

    @classmethod
    def of(cls, broadcast: np.ndarray | None, whole: bool, ops: Sequence[np.ndarray] | None = None,
           patterns: np.ndarray | None = None) -> _StoredSpan | None:
        """The rule for the broadcast's stored span (None without a broadcast); with ``ops``, the
        products with the span are kept (:class:`SpanProducts`); ``patterns``: the stored patterns,
        whose span it is (:func:`_span_and_compression`)."""
        if broadcast is None:
            return None
        span, M = _span_and_compression(broadcast, patterns)
        return cls(span, whole, None if ops is None else SpanProducts(span, ops, broadcast, M))

    @property
    def whole_span(self) -> np.ndarray | None:
        """The span when it counts as memory as a whole, else None."""
        return self.span if self.whole else None

    @property
    def weak_span(self) -> np.ndarray | None:
        """The span under the fresh acceptance's weak rule, else None."""
        return None if self.whole else self.span


def _support_in_basis(Q: np.ndarray, candidates: np.ndarray | None, uploads: Sequence[Any],
                      ops: Sequence[np.ndarray], broadcast: np.ndarray | None, N: int,
                      p: dict, stored: _StoredSpan | None = None,
                      weights: np.ndarray | None = None) -> SupportResult:
    d = Q.shape[1]
    s, rho = p["s"], p["rho"]
    P, n_cert, thr, ritz = _certify(uploads, ops, Q, broadcast, N, p["n_sigma"], p.get("groups"), s, weights,
                                    kept=None if stored is None else stored.products)
    s = voting_quorum(len(P), p.get("groups"), s)
    Gm = _memory_basis(Q, broadcast, None if stored is None else stored.whole_span)
    # the fresh acceptance (s >= 2): the rest of the stored span counts s - 1 votes
    weak = None if stored is None else stored.weak_span
    Gw = _weak_memory_basis(Q, weak, Gm) if (weak is not None and broadcast is not None and s >= 2) else None
    X = _candidate_directions(P if Gw is None or not Gw.shape[1] else [*P, Gw], Gm, s, rho, d,
                              every_voter=p.get("groups") == LEAVE_OUT)
    dfrac, dvotes = _vote_counts(X, P, Gm, s, rho, Gw)
    # rank the candidates by their s-th largest fraction (the memory counting s times): it is
    # >= rho exactly when the direction has s votes, and it is largest for the direction the s
    # best-agreeing clients hold most precisely. Ranking by the number of votes instead lets one
    # near-copy of an archetype (squared cosine m^2 >= rho with it) add its vote to the mean of
    # its own and an honest principal vector, which then outranks the honest clients' direction
    # and enters the basis in its place (tilted by the copy: a fraction (1 + m)/2 of the archetype).
    key = _sth_fraction(dfrac, X, Gm, s, Gw)
    order = np.lexsort((np.arange(key.size), -key))
    # the memory is supported as a whole (every direction in its span has s votes); its basis
    # vectors are an arbitrary rotation inside that span, so they enter together
    basis: list[np.ndarray] = [Gm[:, j] for j in range(Gm.shape[1])]
    every_voter = p.get("groups") == LEAVE_OUT
    for i in order:
        if key[i] < rho:
            break
        # span of the kept directions: a direction within squared cosine rho of the span so far is a
        # copy of one already kept (several pairs find the same archetype); otherwise its residual
        # is a new direction (e.g. a pattern overlapping an archetype by m, residual 1 - m^2)
        x = X[:, i] - sum(b * float(b @ X[:, i]) for b in basis) if basis else X[:, i].copy()
        res2 = float(x @ x)
        if res2 > 1.0 - rho:
            x = x / math.sqrt(res2)
            # leave-out voters: the residual itself needs every voter. The residual of a direction
            # that passes can be mostly another one's: two colluders' fake, mixed into an archetype
            # direction that every voter holds, left a residual of fake fraction 0.6 that the voter
            # without them held at 0.55 (tests/test_robust.py, two colluders against s = 3). A voter
            # holds the residual when it lies in what the voter certifies *beyond* the directions
            # kept so far (:func:`_residual_fractions`): measured against the certified directions
            # themselves, a new archetype correlated with stored ones was refused by the voter
            # whose certified span mixed it with them (four silhouettes under drift: the fourth never
            # entered, held at 0.87 < rho by one voter).
            if every_voter and not np.all(_residual_fractions(x, P, basis, rho) >= rho):
                continue
            basis.append(x)
    sup = np.column_stack(basis) if basis else np.zeros((d, 0))
    uns = _complement(sup, d)
    votes = counts = acc = None
    if candidates is not None:
        Y = Q.T @ (candidates.T.astype(np.float64) / math.sqrt(N))  # (d, C)
        votes, counts = _vote_counts(Y, P, Gm, s, rho, Gw)
        acc = counts >= s
    return SupportResult(basis=Q, supported=sup, unsupported=uns, directions=X, direction_votes=dvotes,
                         n_certified=n_cert, thresholds=thr, ritz=ritz, votes=votes, counts=counts,
                         accepted=acc, memory_dims=int(Gm.shape[1]), params=dict(p))


def support_filter(candidates: np.ndarray, uploads: Sequence[Any], params: Mapping[str, Any] | None = None,
                   *, broadcast: np.ndarray | None = None, basis: np.ndarray | None = None) -> np.ndarray:
    """(C,) bool mask: which candidate patterns are supported by at least ``s`` clients.

    :func:`support_test` on ``candidates``; pass ``basis`` = the detected eigenvectors of the
    aggregate (``FactorizeResult.vectors``) and ``broadcast`` = the server's last broadcast.
    Used after the factorization this is a check, not a repair: when a fake pattern overlaps an
    archetype and displaced it in the LAM's de-duplication, masking the fake does not bring the
    archetype back; :func:`aggregate` with ``defense="support"`` removes unsupported directions
    *before* the LAM. Derived in {ref}`sec-robust-support`.
    """
    if candidates is None:
        raise TypeError("candidates must be a (C, N) array of +-1 patterns, got None")
    acc = support_test(candidates, uploads, params, broadcast=broadcast, basis=basis).accepted
    assert acc is not None  # candidates were given
    return acc


def _top_spectrum_for(J: np.ndarray, comps: list, noise_var: float, n_sigma: float,
                      start: np.ndarray | None = None) -> tuple[Spectrum, int]:
    """Top eigenpairs of J (grown while the count could be limited) and the K-hat of the components.

    The server's block solver (warm-started from ``start``), with the K-hat leading vectors
    converged: the support test works in their span.
    """
    N = J.shape[0]
    bulk_edge = threshold = None
    if comps:
        edge, s_tw, threshold = khat._model_edge(comps, N, noise_var, n_sigma=n_sigma)
        bulk_edge = (edge, s_tw)
    m, margin = _server_sizes(N, threshold)
    while True:
        spec = _eig_top(J, m, "server", start=start, bulk_edge=bulk_edge, threshold=threshold)
        k = khat._k_hat_components(spec, comps, noise_var, n_sigma=n_sigma).k_hat
        if m == N or k < m - margin:
            return _ensure_vectors(J, spec, int(k), threshold), int(k)
        m = min(N, 4 * m)
        start = spec.vectors


def stored_patterns(span: np.ndarray) -> np.ndarray:
    """(n, N) int8: the +-1 patterns of a stored span (:func:`memory_span`), up to sign.

    The span of the stored patterns ``xi`` is the range of the broadcast ``xi^T xi / N``; its
    +-1 vectors are the stored patterns themselves (generically the only ones, chapter 3), and
    each is a fixed point of the in-span search (:func:`fedlam.lam.search_span`) with in-span
    fraction 1. Seeded (``rng = 0``): the same span gives the same patterns.
    Derived in {ref}`sec-robust-fresh`.
    """
    from . import lam

    if not isinstance(span, np.ndarray) or span.ndim != 2 or span.dtype != np.float64 \
            or span.shape[1] > span.shape[0] or span.shape[0] < 2 or not np.all(np.isfinite(span)):
        raise ValueError(f"span must be a finite float64 (N, r) array with 2 <= N and r <= N "
                         f"(memory_span of a broadcast), got {_describe(span)}")
    N, r = span.shape
    if r == 0:
        return np.zeros((0, N), dtype=np.int8)
    X = lam.search_span(span, 8 * r + 8, 0)
    frac = np.einsum("ij,ij->i", X @ span, X @ span) / N
    X = X[frac >= 1.0 - 1e-9]
    out: list[np.ndarray] = []
    for x in X:
        if not any(abs(int(x.astype(np.int64) @ y)) == N for y in out):
            out.append(x.astype(np.int8))
    return np.array(out, dtype=np.int8).reshape(len(out), N)


def _snap_to_stored(Gs: np.ndarray, Gu: np.ndarray, V: np.ndarray, span: np.ndarray, uploads: Sequence[Any],
                    ops: Sequence[np.ndarray], broadcast: np.ndarray | None,
                    rho: float) -> tuple[np.ndarray, np.ndarray]:
    """Supported coordinates (in V) with every merged group of stored patterns represented by
    one of them, and the complement (see :func:`fresh_aggregate`, *merging*).

    When two stored patterns ``x``, ``y`` (overlap ``m``) lose their difference direction, the
    supported span keeps their normalised sum ``u``, whose sign pattern is neither: each has the
    fraction ``(1 + m)/2`` in it, and the factorization accepts neither when that is below its
    in-span threshold. The direction of the supported span nearest a group is replaced by the
    member the clients' fresh parts hold most (the largest sum of Rayleigh quotients
    ``p^T F_c p / N``, :func:`fresh_operator`; the first stored on a tie, e.g. when the data no
    longer hold either), so the memory merges the pair into one of its patterns.
    """
    d = V.shape[1]
    P = stored_patterns(span)
    if P.shape[0] == 0:
        return Gs, Gu
    N = V.shape[0]
    Y = V.T @ (P.T.astype(np.float64) / math.sqrt(N))               # (d, n) coordinates
    inside = np.einsum("ij,ij->j", Y, Y)                               # fraction of each in span V
    proj = Gs @ (Gs.T @ Y)                                             # their parts in the supported span
    fs = np.einsum("ij,ij->j", proj, proj)
    # the fresh parts' Rayleigh quotients of every stored pattern, without forming F_c
    Pf = P.T.astype(np.float64)

    def quad(X: np.ndarray) -> np.ndarray:
        return np.einsum("ij,ij->j", Pf, X @ Pf) / N

    mem = quad(broadcast) if broadcast is not None else np.zeros(P.shape[0])
    fresh = np.sum([quad(U) - (1.0 - _fresh_weight(u)) * mem for U, u in zip(ops, uploads, strict=True)], axis=0)
    ray = np.round(fresh, 12)                                      # ties (no fresh evidence) -> first
    done = np.zeros(P.shape[0], dtype=bool)
    swapped = False
    for j in np.argsort(-ray, kind="stable"):
        if done[j] or inside[j] < rho or fs[j] < rho * inside[j]:
            continue
        v = proj[:, j] / math.sqrt(fs[j])
        # the group: stored patterns whose supported part is (nearly) the same direction v
        group = [i for i in range(P.shape[0]) if fs[i] > 0 and (v @ proj[:, i]) ** 2 >= rho * fs[i]]
        done[group] = True
        if fs[j] >= (1.0 - 0.1 * (1.0 - rho)) * inside[j]:
            continue                       # the pattern itself is (nearly) in the supported span
        r = Y[:, j] / math.sqrt(inside[j])
        # swap v for the pattern's direction: (S minus v) plus r
        rest = Gs - np.outer(v, v @ Gs)
        U, sv, _ = np.linalg.svd(rest, full_matrices=False)
        keep = U[:, sv > 1e-8]
        r = r - keep @ (keep.T @ r)
        Gs = np.column_stack([keep, r / math.sqrt(float(r @ r))])
        swapped = True
        proj = Gs @ (Gs.T @ Y)
        fs = np.einsum("ij,ij->j", proj, proj)
    return (Gs, _complement(Gs, d)) if swapped else (Gs, Gu)


def _complement(G: np.ndarray, d: int) -> np.ndarray:
    """Orthonormal basis of the complement of the orthonormal columns G in R^d."""
    if G.shape[1] == 0:
        return np.eye(d)
    return np.linalg.svd(np.eye(d) - G @ G.T)[0][:, : d - G.shape[1]]


def _support_clean(J: np.ndarray, uploads: Sequence[Any], ops: Sequence[np.ndarray], comps: list,
                   noise_var: float, broadcast: np.ndarray | None, N: int,
                   p: dict, start: np.ndarray | None = None,
                   stored: _StoredSpan | None = None,
                   weights: np.ndarray | None = None) -> tuple[np.ndarray, Spectrum, dict]:
    """Remove the unsupported detected directions of J (see :func:`aggregate`; ``stored``: how
    the stored span counts, :class:`_StoredSpan`; ``weights``: the mean's, which the voters
    of several uploads use too)."""
    spec, k = _top_spectrum_for(J, comps, noise_var, p["n_sigma"], start)
    details: dict = {"k_hat_mean": k, "removed": 0, "floor": float(spec.values[-1])}
    if k == 0:
        details.update(n_certified=np.zeros(len(ops), dtype=np.int64), direction_votes=np.empty(0, dtype=np.int64),
                       memory_dims=0)
        return J, spec, details
    V = spec.vectors[:, :k]
    res = _support_in_basis(V, None, uploads, ops, broadcast, N, p, stored, weights)
    details.update(n_certified=res.n_certified, thresholds=res.thresholds, direction_votes=res.direction_votes,
                   memory_dims=res.memory_dims)
    Gu = res.unsupported
    nu = Gu.shape[1]
    details["removed"] = int(nu)
    if nu == 0:
        return J, spec, details
    lam_k = spec.values[:k]
    floor = float(spec.values[-1])
    # In the eigenbasis V, J restricted to span V is diag(lam_k). Keep its compression on the
    # supported subspace (projector Ps), put the bulk level on the unsupported one (Pu), and
    # drop the cross terms: H' = Ps diag(lam_k) Ps + floor Pu; outside span V nothing changes.
    Gs = res.supported
    weak = None if stored is None else stored.weak_span
    if weak is not None and weak.shape[1] and Gs.shape[1]:
        Gs, Gu = _snap_to_stored(Gs, Gu, V, weak, uploads, ops, broadcast, p["rho"])
    Ps = Gs @ Gs.T
    Pu = Gu @ Gu.T
    Hk = Ps @ (lam_k[:, None] * Ps) + floor * Pu
    Hk = 0.5 * (Hk + Hk.T)
    J2 = J + V @ (Hk - np.diag(lam_k)) @ V.T
    J2 = 0.5 * (J2 + J2.T)
    vk, Rk = np.linalg.eigh(Hk)
    vals = np.concatenate([vk, spec.values[k:]])
    vecs = np.hstack([V @ Rk, spec.vectors[:, k:]])
    order = np.lexsort((np.arange(vals.size), -vals))
    resid = None
    if spec.residuals is not None:
        # A block spectrum's pairs are accurate to their residuals e_j = ||J v_j - lam_j v_j||; the
        # rotated pairs of H' inherit at most ||E||_F over the first k, the bulk pairs their own
        # (J2 - J vanishes outside span V). Without these, the bulk pairs would be taken as
        # exact eigenpairs and the spectrum refused by the factorization's consistency check.
        head = np.full(k, float(np.sqrt(np.sum(spec.residuals[:k] ** 2))))
        resid = np.ascontiguousarray(np.concatenate([head, spec.residuals[k:]])[order])
    spec2 = Spectrum(values=np.ascontiguousarray(vals[order]), vectors=np.ascontiguousarray(vecs[:, order]),
                     n=N, trace=float(np.trace(J2)), sum_sq=float(np.einsum("ij,ij->", J2, J2)),
                     residuals=resid)
    Hu = Gu.T @ (lam_k[:, None] * Gu)
    details["removed_values"] = np.sort(np.linalg.eigvalsh(0.5 * (Hu + Hu.T)))[::-1]
    return J2, spec2, details


# ----------------------------------------------------------------------------------------
# entry point
def aggregate(
    uploads: Sequence[Any],
    weights: np.ndarray | None = None,
    defense: str | None = None,
    params: Mapping[str, Any] | None = None,
    *,
    broadcast: np.ndarray | None = None,
    start: np.ndarray | None = None,
    stored_patterns: np.ndarray | None = None,
) -> RobustAggregate:
    """The operator the server factorizes under a defence, with the bulk that sets its K-hat.

    Parameters
    ----------
    uploads : sequence of Upload
        This round's uploads (``operator``, ``batch_size``, ``weight``, ``noise_var``,
        ``dp_sigma``).
    weights : numpy.ndarray or None
        Aggregation weights (None: equal). The median and the trimmed mean are unweighted
        estimators: non-uniform weights raise ValueError (declared batch sizes are what an
        attacker would inflate). Krum renormalises them over the selected uploads.
    defense : None or str
        None (the paper's mean), ``"support"``, ``"median"``, ``"trimmed"``, ``"krum"``.
    params : dict or None
        Defence parameters (:func:`check_defense`).
    broadcast : numpy.ndarray or None
        The server's last broadcast (``"support"`` removes it from the uploads to get the
        clients' fresh evidence, ``"median"``/``"trimmed"`` count the fresh spikes outside
        the stored patterns' span; None in round 0).
    start : numpy.ndarray or None
        (N, j) approximate leading eigenvectors of the mean (the previous round's detected
        ones) that warm-start the block eigensolver of ``"support"``; ignored otherwise.
    stored_patterns : numpy.ndarray or None
        (S, N) +-1: the patterns whose operator the broadcast is. With leave-out voters their
        span is the stored span (checked on one probe of the broadcast; otherwise the range
        finder's sketch of the broadcast); ignored otherwise.

    Returns
    -------
    RobustAggregate
        ``details["defense"]`` is the defence name; further keys:

        - ``"support"``: ``k_hat_mean`` (spikes of the mean), ``removed`` (directions
          removed), ``removed_values`` (their eigenvalues), ``n_certified`` (per upload),
          ``thresholds``, ``direction_votes`` (votes of the candidate directions examined),
          ``memory_dims``;
        - ``"median"``/``"trimmed"``: ``efficiency`` (``e_L``), ``trimmed`` (uploads cut per
          side), ``upload_counts`` (each upload's spikes, :func:`upload_spike_count`),
          ``k_hat_median`` (their lower median, for comparison), ``quorum`` (``floor(L/2) + 1``),
          ``n_certified`` (directions each upload certifies in the operator's leading
          eigenvectors), ``k_hat_robust`` (the directions a majority certifies,
          :func:`majority_spike_count`, also ``max_k``), ``count_cut`` (True when the count
          stopped at an unsupported leading direction with supported ones below it: an undecided
          round, in which ``federation.Server.round`` keeps the stored patterns), ``excess_noise_var`` (the
          semicircle variance of the bulk), ``derived_components``/``derived_noise_var`` (the
          Gaussian model of :func:`robust_noise_var`, for comparison);
        - ``"krum"``: ``scores``, ``selected``.

    Notes
    -----
    ``"support"`` computes the top eigenpairs of the mean (block solver), counts its spikes with
    :func:`fedlam.khat.k_hat_components` (the bulk from the uploads' scalars), runs
    :func:`support_test` in the span ``V`` of the detected eigenvectors and replaces the
    aggregate's restriction to the unsupported directions of ``V`` by the bulk level (the
    smallest computed eigenvalue), so that the LAM cannot reach them; ``spectrum`` is the
    matching partial spectrum. Cost on top of the mean: ``L + 1`` products ``(N, N) x (N,
    K_hat)`` and ``K_hat x K_hat`` eigenproblems (the partial spectrum replaces the factorization's
    own when the spectrum is passed on). ``"median"``/``"trimmed"`` count each upload's spikes
    (``L`` top-eigenvalue solves, ``O(L N^2 k)``), then run the support test with the majority
    quorum in the operator's leading ``d`` eigenvectors (one more solve and ``L`` products
    ``(N, N) x (N, d)``) and set ``max_k`` to the directions a majority certifies.
    Derived in {ref}`sec-robust-support`, {ref}`sec-robust-median` and {ref}`sec-robust-krum`.
    """
    ops, N = _check_uploads(uploads)
    L = len(ops)
    name, p = check_defense(defense, params, L)
    om = _check_weights(weights, L)
    broadcast = _check_broadcast(broadcast, N)
    _check_start(start, N)
    if name is None or name == "support":
        if name is None:
            comps, v = khat.components_from_uploads(list(uploads), om, N)
            return RobustAggregate(_checked_mean(ops, om), comps, v, None, {"defense": None})
        # leave-out voters need every voter: the whole stored span is memory (as for the median's
        # majority count), not only the directions the broadcast's Rayleigh test finds
        # (their products with the stored span are kept for the refresh: RobustAggregate.products)
        stored = (_StoredSpan.of(broadcast, whole=True, ops=ops, patterns=stored_patterns)
                  if p.get("groups") == LEAVE_OUT else None)
        ra = _supported_mean(uploads, ops, om, broadcast, N, p, start, stored, defense="support")
        return ra if stored is None else replace(ra, products=stored.products)
    if name in ("median", "trimmed"):
        if not np.allclose(om, 1.0 / L, rtol=0.0, atol=1e-12):
            raise ValueError(f"defense={name!r} is an unweighted estimator: weights must be None or uniform, "
                             f"got {weights!r}")
        if name == "median":
            J = entrywise_median(ops)
            e = gaussian_efficiency(L, "median")
            det = {"defense": name, "efficiency": e}
        else:
            J = entrywise_trimmed_mean(ops, p["trim"])
            e = gaussian_efficiency(L, "trimmed", p["trim"])
            det = {"defense": name, "efficiency": e, "trimmed": _trim_count(L, p["trim"])}
        comps, v = _robust_components(uploads, N)
        det["derived_components"] = comps
        det["derived_noise_var"] = robust_noise_var(comps, v, e)
        k_med, counts = median_spike_count(uploads, N, broadcast=broadcast)
        k_rob, sres = majority_spike_count(J, uploads, broadcast=broadcast, upload_counts=counts)
        # the count stopped at an unsupported leading direction before the supported ones were
        # all counted (no honest majority among the answers, e.g. one attacker of two): an
        # undecided round, in which the server keeps its stored patterns (federation.Server.round)
        det.update(upload_counts=counts, k_hat_median=k_med, k_hat_robust=k_rob,
                   quorum=int(sres.params["s"]), n_certified=sres.n_certified,
                   count_cut=bool(k_rob < int(sres.supported.shape[1])))
        v_ex = _median_excess_var(J, comps, k_rob)
        det["excess_noise_var"] = v_ex
        return RobustAggregate(J, comps, v_ex, None, det, max_k=k_rob)
    # krum
    f = p["f"]
    m = p["m"] if p["m"] is not None else L - f
    sc = krum_scores(ops, f)
    sel = np.sort(np.lexsort((np.arange(L), sc))[:m])
    ws = om[sel]
    ws = ws / ws.sum() if ws.sum() > 0 else np.full(sel.size, 1.0 / sel.size)
    J = mean_aggregate([ops[i] for i in sel], ws)
    comps, v = khat.components_from_uploads([uploads[i] for i in sel], ws, N)
    return RobustAggregate(J, comps, v, None, {"defense": "krum", "scores": sc, "selected": sel})


#: Quorum of the fresh acceptance (:func:`fresh_aggregate`): uploads whose fresh parts must
#: certify a direction before it enters the memory (every upload when fewer answer).
FRESH_QUORUM = 2


def fresh_quorum(n_uploads: int) -> int:
    """The fresh acceptance's quorum for ``n_uploads`` uploads: ``min(FRESH_QUORUM, n_uploads)``.

    Derived in {ref}`sec-robust-fresh`."""
    n_uploads = check_positive_int(n_uploads, "n_uploads")
    return min(FRESH_QUORUM, n_uploads)


def fresh_aggregate(
    uploads: Sequence[Any],
    weights: np.ndarray | None = None,
    *,
    broadcast: np.ndarray | None = None,
    start: np.ndarray | None = None,
) -> RobustAggregate:
    """The aggregate of the fresh acceptance (``federation.Server(acceptance="fresh")``).

    The support test of ``defense="support"`` (the same code: :func:`support_test`'s votes,
    ranking and cleaning) with the quorum ``s =`` :func:`fresh_quorum`, 2 when at least two
    uploads answer and 1 for a lone upload. A detected direction of the mean survives when it
    has ``s`` votes; the others are flattened to the bulk level before the LAM runs. Votes:

    - each upload whose fresh part (the upload minus the broadcast it blended,
      :func:`fresh_operator`) certifies the direction: one;
    - a stored direction (Rayleigh quotient above 1/2 in the broadcast, as for the support
      defence): ``s``. It passed when it entered, so an archetype that stops appearing in the
      data is not forgotten;
    - any other direction of the stored patterns' span (:func:`memory_span`): ``s - 1``. These
      are the directions along which stored patterns nearly coincide: two stored patterns with
      overlap ``m`` span the difference direction with broadcast eigenvalue ``1 - m``. A
      noisy duplicate of an archetype (``m`` 0.8) then stays only while a client's fresh data
      still certify that difference, which they do not: it is flattened and the duplicate merges
      into the archetype. Correlated archetypes that are all genuine (the paper's three
      silhouettes: broadcast eigenvalues 0.46, 0.95, 1.59) keep their weakest direction while a
      single client certifies it: the support defence's Rayleigh test alone would drop it in a
      round where one honest upload and a poisoner answer (measured on the scenario matrix's row
      7: the memory emptied in its rounds 20 and 25), this rule keeps it.

    So the memory keeps what it holds as with ``s = 1`` (a stored direction needs no fresh vote,
    one along which stored patterns nearly coincide needs one), and the quorum applies to what
    enters: a direction outside the stored span.

    *Merging.* When the difference of two stored patterns ``x``, ``y`` (overlap ``m``) is
    flattened, what is left of them is their normalised sum, and neither pattern is a sign
    pattern of it: each has the in-span fraction ``(1 + m)/2``, below the factorization's
    acceptance for ``m < 0.9``, so both would be lost for a round (and for good if the data no
    longer hold the archetype). The supported direction along the sum is therefore swapped for
    one member of the pair: the one the clients' fresh parts hold most (the largest sum of
    Rayleigh quotients), the first stored when no fresh part holds either. The stored patterns
    are recovered from the broadcast's span (:func:`stored_patterns`). On the drift experiment
    (book preset, 3 seeds) the pair is then stored for the single round in which it is born, and
    no archetype is lost after its entry (without the swap: spurious patterns in two rounds and
    archetype 3 lost for one round in one seed).

    Why a quorum of 2 and not 1 (derived in {ref}`sec-robust-fresh`):

    - *a lone poisoner*: with ``s = 1`` one upload certifies whatever it holds as a supercritical
      spike, the rank-one upload of a fake first of all, and once stored the fake keeps its
      votes as memory; with ``s = 2`` it has one vote (its own) and is removed
      ({prf:ref}`thm-robust-support`, part 1, ``k = 1 < s``);
    - *a near-copy* of an archetype (overlap ``m`` with ``m^2 >= rho``, e.g. 10 of 400 bits
      flipped, ``m = 0.95``): with ``s = 1`` every certified direction has its own upload's
      fraction 1 and ranks first, the copy's direction included, and the honest clients'
      fractions ``m^2 >= rho`` vote for it too, so the copy may enter in the archetype's place;
      with ``s = 2`` the candidates are ranked by their second largest fraction, largest for the
      direction two honest holders agree on, and the copy's remainder ``1 - m^2 <= 1 - rho`` is
      a duplicate of it (part 3, ``h >= s > k``).

    The price is paid by a new archetype that few clients hold. Measured on the scenario
    matrix's setting (random archetypes, N = 160, six clients with M = 200 at r = 0.85, novelty
    rule, ``data.novelty_ramp`` from round 10 in ``c`` of the six clients, the others on the two
    old archetypes; first round with m >= 0.95, seeds 0-2): without privacy it enters in round
    10 with either quorum for ``c = 2, 3, 6``; under the Gaussian mechanism at 3 x its epsilon
    threshold in rounds 13-14 with ``s = 2`` against 12-14 with ``s = 1`` (at most one round
    later); held by one client (``c = 1``) it enters in round 10 with ``s = 1`` (no privacy)
    and not within 30 rounds with ``s = 2``, until a second client certifies it. In a round
    where only one honest upload and an attacker answer, nothing new enters.
    ``defense="support"`` with ``defense_params={"s": 1}`` is the acceptance with ``s = 1``.

    Parameters
    ----------
    uploads : sequence of Upload
        This round's uploads (operators and scalars).
    weights : numpy.ndarray or None
        Aggregation weights (None: equal).
    broadcast : numpy.ndarray or None
        The server's last broadcast (None in round 0: nothing stored).
    start : numpy.ndarray or None
        Warm start of the block eigensolver (as :func:`aggregate`).

    Returns
    -------
    RobustAggregate
        ``details`` as for ``"support"`` in :func:`aggregate`, with ``defense`` None,
        ``acceptance`` ``"fresh"`` and ``s`` the quorum used.
    """
    ops, N = _check_uploads(uploads)
    s = fresh_quorum(len(ops))
    _, p = check_defense("support", {"s": s}, len(ops))
    om = _check_weights(weights, len(ops))
    broadcast = _check_broadcast(broadcast, N)
    _check_start(start, N)
    return _supported_mean(uploads, ops, om, broadcast, N, p, start, _StoredSpan.of(broadcast, whole=False),
                           defense=None, acceptance="fresh", s=s)


def _median_excess_var(J: np.ndarray, comps: Sequence[khat.Component], k: int) -> float:
    """Semicircle variance of an entrywise median / trimmed mean fitted to its bulk's spread.

    The estimator is its linear part -- the mean of the honest uploads, whose bulk is the
    Marchenko-Pastur law of ``comps`` -- plus a nonlinear residual with (nearly) independent
    entries, a semicircle ({ref}`sec-robust-median`). The residual's variance is not the Gaussian
    ``(e_L - 1)`` share of the mean's bulk (:func:`robust_noise_var`): the entries of an upload
    also carry the cross terms ``r xi_i z_j`` and the spike of its own class counts, low-rank in
    the mean but not in the median (and a privacy noise enters it the same way). So it is
    measured: the eigenvalue variance of ``J`` without its ``k`` spikes (exact trace and Frobenius
    norm minus the top ``k`` eigenvalues) minus the Marchenko-Pastur part's ``sum_c a_c^2 q_c``.
    """
    N = J.shape[0]
    top = _top_values_spectrum(J, min(N, max(16, k + 8))).values[:k] if k else np.empty(0)
    tr = float(np.trace(J)) - float(top.sum())
    ss = float(np.einsum("ij,ij->", J, J)) - float(top @ top)
    n_b = N - k
    var = ss / n_b - (tr / n_b) ** 2
    v_mp = float(sum(c.scale * c.scale * c.ratio for c in comps))
    return max(0.0, var - v_mp)


def _check_start(start: Any, N: int) -> None:
    """Refuse a warm start that is not a finite float (N, j) array."""
    if start is not None and (not isinstance(start, np.ndarray) or start.ndim != 2 or start.shape[0] != N
                              or not np.issubdtype(start.dtype, np.floating) or not np.all(np.isfinite(start))):
        raise ValueError(f"start must be a finite float (N, j) array with N = {N}, got {_describe(start)}")


def _supported_mean(uploads: Sequence[Any], ops: Sequence[np.ndarray], om: np.ndarray,
                    broadcast: np.ndarray | None, N: int, p: dict[str, Any], start: np.ndarray | None,
                    stored: _StoredSpan | None, **details: Any) -> RobustAggregate:
    """The weighted mean with the directions the support test does not carry flattened: the
    aggregate of ``defense="support"`` and of the fresh acceptance (``stored``: how the stored
    span counts, :class:`_StoredSpan`; None: only the broadcast's directions above 1/2 are
    memory); ``details`` are added to the cleaning's details."""
    comps, v = khat.components_from_uploads(list(uploads), om, N)
    J2, spec, det = _support_clean(_checked_mean(ops, om), uploads, ops, comps, v, broadcast, N, p, start,
                                   stored, om)
    det.update(details)
    return RobustAggregate(J2, comps, v, spec, det)


def _robust_components(uploads: Sequence[Any], N: int) -> tuple[list, float]:
    """Bulk of the 'typical' upload for the median / trimmed mean.

    The entrywise estimator follows the majority of the uploads, so its noise is that of the
    mean of the uploads that have a bulk (a client that sends a rank-one operator, or the
    broadcast, has none), with equal weights; a negated upload is outvoted entrywise and is
    counted with a positive scale (an upper bound: a conservative edge).
    """
    has = []
    for u in uploads:
        w = getattr(u, "weight", None)
        w = float("nan") if w is None else float(w)
        if getattr(u, "batch_size", 0) and math.isfinite(w) and w > 0:
            has.append(u)
    if not has:
        return [], 0.0
    n = len(has)
    comps, v = khat.components_from_uploads(has, np.full(n, 1.0 / n), N)
    return [khat.Component(abs(c.scale), c.ratio, c.kurtosis) for c in comps], v
