"""Experiment: cross-device federations, many clients with a handful of examples each.

The same total number of examples per round is split over ``L`` clients (``L = 1, 10, 100,
1000``: one hospital, ..., a thousand phones with five examples each). For each split the
federation runs under the server's two K-hat rules -- per-client scalars (``k_rule="scalars"``,
the default) and the older per-upload fit (``k_rule="fit"``, only up to ``fit_max_L`` clients:
it keeps every upload and costs one partial eigendecomposition per client) -- with and without
one pure-noise client. A second part mixes batch sizes from 1 to 500 in one federation (plus,
optionally, a client that is empty every other round and a noise client) under the paper's
equal mean and under batch-size weights. Recorded per round: K-hat, matched magnetizations,
spurious patterns, the server's edge and leading eigenvalues, and the server's time split into
checking and summing the uploads versus the rest of its step, next to one ``numpy.linalg.eigh``
of the aggregate measured in the same round.

The round loop is :func:`fedlam.federation.run_federation`'s (same clients, streams, server),
written out here only to time the server's parts; a test checks that both give the same
history. Two closed forms of the derivation ({ref}`sec-many-clients`) that only the notebook and
the tests use are here too: :func:`effective_sample_size` and :func:`spectrum_variance`. The
first-order edge shift of +-1 data that the server applies lives in the package
(:func:`fedlam.khat.kurtosis_edge_shift`). The notebook is {ref}`sec-exp-cross-device`.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlam._validation import _describe, as_rng
from fedlam.experiments._common import (
    JsonResult,
    TitledTable,  # re-exported (tables of the book pages)
    check_bool,
    check_choice,
    check_in_range,
    check_int_tuple,
    check_nonneg_int,
    check_positive_int,
    check_quality,
    seed_pairs,
)
from fedlam.experiments._common import (
    make_params as _make_params,
)

__all__ = ["CrossDeviceParams", "CrossDeviceResult", "PRESETS", "RULES", "AGGREGATIONS", "ARCHETYPES",
           "make_params", "run", "federate", "RoundLog", "effective_sample_size", "spectrum_variance",
           "TitledTable", "setting_table", "split_table", "hetero_table", "pm1_bulk_tops"]

RULES = ("scalars", "fit")
AGGREGATIONS = ("equal", "batch")
ARCHETYPES = ("random", "silhouettes")
#: largest number of clients a run may hold (every client is simulated in this process)
MAX_CLIENTS = 5000


@dataclass(frozen=True)
class CrossDeviceParams:
    """Parameters of the cross-device experiment.

    The paper {cite:p}`paper` runs L = 3 to 5 clients with hundreds of examples each and says
    nothing about many small clients; every choice below is ours. The issue that asked for it
    used N = 400, K = 4, r = 0.8 and 1000 examples per round split over 10 to 100 clients.

    Attributes
    ----------
    N : int
        Dimension (must be 784 for ``archetypes="silhouettes"``).
    K : int
        Random archetypes (ignored for silhouettes: the paper's three classes).
    archetypes : {"random", "silhouettes"}
        Random +-1 patterns, or the paper's Caltech-101 silhouettes (medoids, correlated).
    r : float
        Channel quality of the honest clients, in (0, 1).
    total : int
        Examples per round over all honest clients; split evenly, ``M_c = total / L``.
    Ls : tuple of int
        Numbers of honest clients, increasing; each must divide ``total``.
    T : int
        Rounds.
    rules : tuple of str
        K-hat rules compared (subset of ``RULES``).
    fit_max_L : int
        The ``"fit"`` rule is run only for ``L <= fit_max_L`` (it holds all L uploads in memory
        and fits each one).
    noise : tuple of bool
        Without (False) and/or with (True) one extra pure-noise client of ``M_c`` examples.
    controller : str or float
        Weight rule of every client (``"novelty"``, ``"paper"`` or a constant in [0, 1]).
    hetero_sizes : tuple of int
        Batch sizes of the heterogeneous federation (empty: skip that part).
    hetero_intermittent : int
        Batch size of one more client that has data only in odd rounds (0: none).
    hetero_noise : int
        Batch size of one pure-noise client added to the heterogeneous federation (0: none).
    aggregations : tuple of str
        Server aggregations compared in the heterogeneous part (subset of ``AGGREGATIONS``).
    n_top : int
        Leading eigenvalues of the aggregate recorded per round.
    time_rounds : bool
        Measure the server's time (and one eigh per round); False leaves the time arrays 0.
    seeds : int
        Independent repetitions.
    """

    N: int = 784
    K: int = 3
    archetypes: str = "silhouettes"
    r: float = 0.8
    total: int = 5000
    Ls: tuple = (1, 10, 100, 1000)
    T: int = 3
    rules: tuple = ("scalars", "fit")
    fit_max_L: int = 100
    noise: tuple = (False, True)
    controller: Any = "novelty"
    hetero_sizes: tuple = (1, 2, 5, 10, 20, 50, 100, 200, 500)
    hetero_intermittent: int = 40
    hetero_noise: int = 100
    aggregations: tuple = ("equal", "batch")
    n_top: int = 8
    time_rounds: bool = True
    seeds: int = 2

    def __post_init__(self) -> None:
        check_positive_int(self.N, "N", minimum=10)
        check_positive_int(self.K, "K")
        check_choice(self.archetypes, "archetypes", ARCHETYPES)
        if self.archetypes == "silhouettes" and self.N != 784:
            raise ValueError(f"N must be 784 for archetypes='silhouettes', got {self.N}")
        if self.archetypes == "random" and self.K > self.N // 4:
            raise ValueError(f"K must be <= N // 4 = {self.N // 4}, got {self.K}")
        check_quality(self.r, "r")
        if self.r >= 1.0:
            raise ValueError(f"r must be < 1 (noiseless examples have no bulk), got {self.r!r}")
        check_positive_int(self.total, "total")
        Ls = check_int_tuple(self.Ls, "Ls")
        if any(b <= a for a, b in itertools.pairwise(Ls)):
            raise ValueError(f"Ls must be strictly increasing, got {self.Ls!r}")
        if Ls[-1] > MAX_CLIENTS:
            raise ValueError(f"Ls must be <= {MAX_CLIENTS}, got {Ls[-1]}")
        bad = [L for L in Ls if self.total % L]
        if bad:
            raise ValueError(f"Ls must divide total = {self.total} (even split), got {bad}")
        check_positive_int(self.T, "T")
        if not isinstance(self.rules, tuple) or not self.rules:
            raise TypeError(f"rules must be a non-empty tuple of {RULES}, got {_describe(self.rules)}")
        for i, x in enumerate(self.rules):
            check_choice(x, f"rules[{i}]", RULES)
        if len(set(self.rules)) != len(self.rules):
            raise ValueError(f"rules must not repeat entries, got {self.rules!r}")
        check_positive_int(self.fit_max_L, "fit_max_L")
        if not isinstance(self.noise, tuple) or not self.noise:
            raise TypeError(f"noise must be a non-empty tuple of bools, got {_describe(self.noise)}")
        for i, x in enumerate(self.noise):
            check_bool(x, f"noise[{i}]")
        if len(set(self.noise)) != len(self.noise):
            raise ValueError(f"noise must not repeat entries, got {self.noise!r}")
        if isinstance(self.controller, str):
            check_choice(self.controller, "controller", ("paper", "novelty"))
        else:
            check_in_range(self.controller, "controller", 0.0, 1.0)
        sizes = check_int_tuple(self.hetero_sizes, "hetero_sizes", nonempty=False)
        if len(sizes) + 2 > MAX_CLIENTS:
            raise ValueError(f"hetero_sizes must hold at most {MAX_CLIENTS - 2} clients, got {len(sizes)}")
        check_nonneg_int(self.hetero_intermittent, "hetero_intermittent")
        check_nonneg_int(self.hetero_noise, "hetero_noise")
        if not isinstance(self.aggregations, tuple) or not self.aggregations:
            raise TypeError(f"aggregations must be a non-empty tuple of {AGGREGATIONS}, "
                            f"got {_describe(self.aggregations)}")
        for i, x in enumerate(self.aggregations):
            check_choice(x, f"aggregations[{i}]", AGGREGATIONS)
        if len(set(self.aggregations)) != len(self.aggregations):
            raise ValueError(f"aggregations must not repeat entries, got {self.aggregations!r}")
        check_positive_int(self.n_top, "n_top")
        if self.n_top > self.N:
            raise ValueError(f"n_top must be <= N = {self.N}, got {self.n_top}")
        check_bool(self.time_rounds, "time_rounds")
        check_positive_int(self.seeds, "seeds")

    @property
    def n_archetypes(self) -> int:
        """K of the run (3 for the silhouettes)."""
        return 3 if self.archetypes == "silhouettes" else int(self.K)


PRESETS: dict[str, CrossDeviceParams] = {
    "book": CrossDeviceParams(N=400, K=4, archetypes="random", total=1000, Ls=(1, 10, 100, 500), T=2,
                              hetero_sizes=(1, 2, 5, 10, 20, 50, 100, 200, 500), seeds=1),
    "full": CrossDeviceParams(),
}
#: not an experiment of the paper: ``python -m fedlam.reproduce --preset paper`` leaves it out unless
#: named with ``--only``; its ``"paper"`` preset is its ``"full"`` one
PRESETS["paper"] = PRESETS["full"]


def make_params(preset: str = "book", **overrides: Any) -> CrossDeviceParams:
    """Preset ``"book"``, ``"paper"`` or ``"full"`` (see ``PRESETS``) with field overrides (``None`` keeps
    the preset value)."""
    return _make_params(CrossDeviceParams, PRESETS, preset, **overrides)


# ---------------------------------------------------------------------------------------------
# closed forms of the derivation (sec-many-clients)

def effective_sample_size(sizes: Any, weights: Any = None) -> float:
    """Effective number of examples of ``sum_c omega_c B_c`` (``B_c`` the Hebbian operator of ``M_c``).

    Every example of client ``c`` enters with weight ``omega_c / M_c``, so the aggregate is a
    weighted sample covariance whose effective size is ``(sum_c omega_c)^2 / sum_c omega_c^2 / M_c``:
    the pooled ``sum_c M_c`` under batch weights ``omega_c = M_c / sum M``, and ``L`` times the
    harmonic mean of the batch sizes, ``L^2 / sum_c 1 / M_c``, under the paper's equal mean.
    Clients with ``M_c = 0`` (or weight 0) carry no example and are left out. Derived in
    {ref}`sec-many-clients`.

    Parameters
    ----------
    sizes : sequence of int
        Batch sizes ``M_c >= 0``.
    weights : sequence of float or None
        Aggregation weights ``omega_c >= 0`` (None: equal).
    """
    M = np.asarray(sizes)
    if M.ndim != 1 or M.size == 0 or not np.issubdtype(M.dtype, np.integer) or np.any(M < 0):
        raise ValueError(f"sizes must be a non-empty 1-D sequence of ints >= 0, got {_describe(sizes)}")
    om = np.ones(M.size) if weights is None else np.asarray(weights, dtype=np.float64)
    if om.shape != M.shape or not np.all(np.isfinite(om)) or np.any(om < 0):
        raise ValueError(f"weights must be {M.size} finite numbers >= 0, got {_describe(weights)}")
    keep = (M > 0) & (om > 0)
    if not keep.any():
        return 0.0
    om, M = om[keep], M[keep].astype(np.float64)
    return float(om.sum() ** 2 / np.sum(om * om / M))


def spectrum_variance(N: int, M: int, s2: float, kurtosis: float) -> float:
    """Expected variance of the eigenvalues of ``Z^T Z / M`` (exact at finite N and M).

    ``Z`` is (M, N) with independent entries of mean 0, variance ``s2`` and excess kurtosis
    ``kurtosis`` (``E z^4 = s2^2 (3 + kurtosis)``). The result is
    ``s2^2 q (1 + (1 + kurtosis) / N - (2 + kurtosis) / N^2)`` with ``q = N / M``: the MP
    variance ``s2^2 q`` plus a ``1/N`` term that Gaussian entries have too (``kurtosis = 0``)
    and the kurtosis adds to. For +-1 examples of quality ``r`` (noise of an archetype's
    examples) ``s2 = 1 - r^2`` and ``kurtosis = 4 / s2 - 6``. Derived in {ref}`sec-many-clients`.
    """
    N = check_positive_int(N, "N", minimum=2)
    M = check_positive_int(M, "M")
    s2 = check_in_range(s2, "s2", 0.0, None, low_open=True)
    k = check_in_range(kurtosis, "kurtosis", -2.0, None)
    return float(s2 * s2 * (N / M) * (1.0 + (1.0 + k) / N - (2.0 + k) / (N * N)))


# ---------------------------------------------------------------------------------------------
# the round loop, timed

@dataclass(frozen=True)
class RoundLog:
    """What :func:`federate` records, per round (T rows).

    Attributes
    ----------
    k_hat, n_patterns, spurious : numpy.ndarray
        (T,) int.
    magnetization : numpy.ndarray
        (T, K) matched magnetizations.
    weights : numpy.ndarray
        (T, L) blend weights of the clients (NaN where undefined).
    edge, threshold : numpy.ndarray
        (T,) the server's noise edge and K-hat cut, in units of ``N J``.
    top : numpy.ndarray
        (T, n_top) leading eigenvalues of ``N J_s``.
    t_sum, t_rest, t_eigh : numpy.ndarray
        (T,) seconds: checking and summing the uploads; the rest of the server's step; one
        ``numpy.linalg.eigh`` of the aggregate (zeros when not timed).
    """

    k_hat: np.ndarray
    n_patterns: np.ndarray
    spurious: np.ndarray
    magnetization: np.ndarray
    weights: np.ndarray
    edge: np.ndarray
    threshold: np.ndarray
    top: np.ndarray
    t_sum: np.ndarray
    t_rest: np.ndarray
    t_eigh: np.ndarray


def federate(archetypes: np.ndarray, specs: Sequence[Any], T: int, rng: Any, *, controller: Any = "novelty",
             k_rule: str = "scalars", aggregation: str = "equal", n_top: int = 8,
             time_rounds: bool = True, acceptance: str | None = None) -> RoundLog:
    """:func:`fedlam.federation.run_federation` (default options) with the server's step timed.

    Same clients, child streams and server calls as ``run_federation(archetypes, specs, T, rng,
    controller=controller, k_rule=k_rule, aggregation=aggregation, acceptance=acceptance)``,
    so the K-hat, patterns
    and weights are identical (tested). With ``k_rule="scalars"`` the server sums the uploads as
    they arrive (:meth:`fedlam.federation.Server.accumulate`, timed as ``t_sum``) and
    ``t_rest`` is :meth:`~fedlam.federation.Server.round` on the sum; with ``"fit"`` or the
    default fresh acceptance (:func:`fedlam.federation.default_acceptance`) the server needs
    every upload, ``Server.round`` does the checks, the sum and the rest, and ``t_sum`` is
    the time the same checks and sum take when timed apart (so ``t_rest = round - t_sum``).
    ``t_eigh`` is the best of two ``numpy.linalg.eigh`` of the aggregate in the same round.
    """
    from fedlam import controller as ctl
    from fedlam import federation as F
    from fedlam import metrics

    check_choice(k_rule, "k_rule", RULES)
    check_choice(aggregation, "aggregation", AGGREGATIONS)
    T = check_positive_int(T, "T")
    time_rounds = check_bool(time_rounds, "time_rounds")
    K, N = archetypes.shape
    L = len(specs)
    gen = as_rng(rng)
    streams = gen.spawn(L + 1)
    server = F.Server(aggregation, None, k_rule=k_rule, acceptance=acceptance)
    clients = [F.Client(s.make_source(archetypes, T), ctl.make_controller(controller, r=None, alpha=0.5, w_init=1.0),
                        streams[c], kind=s.kind, r=None, privacy=None, N=N) for c, s in enumerate(specs)]
    out = {n: np.zeros(T, dtype=np.int64) for n in ("k_hat", "n_patterns", "spurious")}
    mag = np.zeros((T, K))
    wts = np.full((T, L), np.nan)
    edge = np.zeros(T)
    thr = np.zeros(T)
    top = np.full((T, n_top), np.nan)
    ts = {n: np.zeros(T) for n in ("t_sum", "t_rest", "t_eigh")}
    broadcast = None
    k_broadcast = 0
    start = None  # the last round's detected eigenvectors warm-start the next spectrum, as in run_federation
    memory: Any = None   # the last RoundResult: its stored patterns and their precision
    stream = server.k_rule == "scalars" and not server.needs_uploads
    clock = time.perf_counter
    for t in range(T):
        for client in clients:
            client.observe(t)
        sizes = np.array([cl.batch_size for cl in clients], dtype=np.float64)
        om = server.weights(L, sizes)
        uploads = []
        total = None
        t_sum = 0.0
        for c, client in enumerate(clients):
            up = client.upload(broadcast)
            wts[t, c] = up.weight
            if stream:
                t0 = clock()
                total = server.accumulate(total, up, 1.0 / L if om is None else float(om[c]))
                t_sum += clock() - t0
                up = up.without_operator()
            uploads.append(up)
        if not stream and time_rounds:  # the checks and the sum Server.round does, timed apart
            t0 = clock()
            probe = None
            for c, up in enumerate(uploads):
                probe = server.accumulate(probe, up, 1.0 / L if om is None else float(om[c]))
            t_sum = clock() - t0
            del probe
        t0 = clock()
        kw = {"broadcast": broadcast} if server.needs_broadcast else {}
        if memory is not None and memory.precision is not None:   # the stored patterns' precision
            kw.update(stored=memory.patterns, precision=memory.precision)
        rr = server.round(uploads, streams[L], broadcast_rank=k_broadcast, aggregate=total, start=start, **kw)
        t_round = clock() - t0
        memory = rr
        start = rr.warm_start
        if time_rounds:
            ts["t_sum"][t] = t_sum
            ts["t_rest"][t] = t_round if stream else max(t_round - t_sum, 0.0)
            best = math.inf
            for _ in range(2):
                t0 = clock()
                np.linalg.eigh(rr.aggregate)
                best = min(best, clock() - t0)
            ts["t_eigh"][t] = best
        res = rr.result
        out["k_hat"][t] = int(res.k_hat)
        out["n_patterns"][t] = rr.patterns.shape[0]
        mag[t] = metrics.magnetization(rr.patterns, archetypes)
        out["spurious"][t] = metrics.spurious_count(rr.patterns, archetypes)
        det = res.k_result.details
        edge[t] = N * float(det.get("edge", np.nan))
        thr[t] = N * float(res.k_result.threshold)
        vals = np.sort(np.asarray(res.values, dtype=np.float64))[::-1]
        top[t, : min(n_top, vals.size)] = N * vals[:n_top]
        k_broadcast = rr.patterns.shape[0]
        broadcast = rr.broadcast
    return RoundLog(out["k_hat"], out["n_patterns"], out["spurious"], mag, wts, edge, thr, top,
                    ts["t_sum"], ts["t_rest"], ts["t_eigh"])


# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CrossDeviceResult(JsonResult):
    """Arrays of the experiment.

    Split part, axes (seed, rule, noise, L, round, ...); entries of runs not made (the fit rule
    above ``fit_max_L``) are -1 (ints) or NaN (floats):

    Attributes
    ----------
    params : CrossDeviceParams
    Mc : (nL,) examples per honest client.
    k_hat, n_patterns, spurious : (S, nR, nN, nL, T) int.
    magnetization : (S, nR, nN, nL, T, K).
    edge, threshold : (S, nR, nN, nL, T) the server's noise edge and cut (``N J`` units).
    top : (S, nR, nN, nL, T, n_top) leading eigenvalues of ``N J_s``.
    t_sum, t_rest, t_eigh : (S, nR, nN, nL, T) seconds (0 when not timed; NaN when not run).
    h_sizes : (Lh, T) batch sizes of the heterogeneous federation's clients (noise client last).
    h_k_hat, h_n_patterns, h_spurious : (S, nA, T) int, per aggregation.
    h_magnetization : (S, nA, T, K).
    h_edge, h_threshold : (S, nA, T); h_top : (S, nA, T, n_top).
    h_weights : (S, nA, T, Lh) blend weights.
    h_m_eff : (nA, T) effective sample size of the honest examples (:func:`effective_sample_size`).
    summary : dict
    """

    params: CrossDeviceParams
    Mc: np.ndarray
    k_hat: np.ndarray
    n_patterns: np.ndarray
    spurious: np.ndarray
    magnetization: np.ndarray
    edge: np.ndarray
    threshold: np.ndarray
    top: np.ndarray
    t_sum: np.ndarray
    t_rest: np.ndarray
    t_eigh: np.ndarray
    h_sizes: np.ndarray
    h_k_hat: np.ndarray
    h_n_patterns: np.ndarray
    h_spurious: np.ndarray
    h_magnetization: np.ndarray
    h_edge: np.ndarray
    h_threshold: np.ndarray
    h_top: np.ndarray
    h_weights: np.ndarray
    h_m_eff: np.ndarray
    summary: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        p = self.params
        return (f"CrossDeviceResult(N={p.N}, K={p.n_archetypes}, Ls={p.Ls}, rules={p.rules}, noise={p.noise}, "
                f"T={p.T}, seeds={p.seeds}, hetero clients={self.h_sizes.shape[0]})")


def _archetypes(p: CrossDeviceParams, seed: int) -> np.ndarray:
    from fedlam import data

    if p.archetypes == "silhouettes":
        return data.structured_archetypes(method="medoid")
    return data.random_archetypes(p.K, p.N, seed)


def hetero_specs(p: CrossDeviceParams, K: int) -> tuple[list, np.ndarray]:
    """The heterogeneous federation: its ClientSpecs and (L_h, T) batch sizes (noise client last)."""
    from fedlam import data
    from fedlam import federation as F

    sizes = [np.full(p.T, m, dtype=np.int64) for m in p.hetero_sizes]
    if p.hetero_intermittent:
        sizes.append(np.where(np.arange(p.T) % 2 == 1, p.hetero_intermittent, 0).astype(np.int64))
    n_honest = len(sizes)
    mix = data.static_mixture(p.T, max(n_honest, 1), K)
    specs = [F.ClientSpec(r=p.r, M=m, mixture=mix[:, c]) for c, m in enumerate(sizes)]
    if p.hetero_noise:
        specs.append(F.ClientSpec(M=p.hetero_noise, kind="noise"))
        sizes.append(np.full(p.T, p.hetero_noise, dtype=np.int64))
    return specs, np.array(sizes, dtype=np.int64).reshape(len(sizes), p.T)


#: the server's acceptance in this experiment: the paper's. The experiment compares K-hat rules
#: and aggregation weights, and the default fresh acceptance certifies every detected direction
#: against the uploads, which would hide what a rule over-counts (60 clients x 6 examples:
#: the per-upload fit counts N/4 spikes, the fresh acceptance keeps the K archetypes'; tested)
ACCEPTANCE = "paper"


def _split_task(p: CrossDeviceParams, xi: np.ndarray, seed_run: int, li: int, ni: int, ri: int) -> RoundLog:
    """One federation of the split part (L = ``p.Ls[li]`` clients, noise client ``p.noise[ni]``,
    K-hat rule ``p.rules[ri]``): one task of :func:`run`, seeded by ``(seed_run, li, ni)`` alone."""
    from fedlam import data
    from fedlam import federation as F

    L, K, T = p.Ls[li], xi.shape[0], p.T
    Mc = p.total // L
    mix = data.static_mixture(T, L, K)
    specs = [F.ClientSpec(r=p.r, M=Mc, mixture=mix[:, c]) for c in range(L)]
    if p.noise[ni]:
        specs.append(F.ClientSpec(M=Mc, kind="noise"))
    return federate(xi, specs, T, np.random.default_rng([seed_run, li, ni]), controller=p.controller,
                    k_rule=p.rules[ri], n_top=p.n_top, time_rounds=p.time_rounds, acceptance=ACCEPTANCE)


def _hetero_task(p: CrossDeviceParams, xi: np.ndarray, seed_run: int, ai: int) -> RoundLog:
    """The heterogeneous federation under aggregation ``p.aggregations[ai]`` (one task of :func:`run`)."""
    specs, _ = hetero_specs(p, xi.shape[0])
    return federate(xi, specs, p.T, np.random.default_rng([seed_run, 999]), controller=p.controller,
                    aggregation=p.aggregations[ai], n_top=p.n_top, time_rounds=False, acceptance=ACCEPTANCE)


def _call(fn: Any, *args: Any) -> Any:
    """``fn(*args)``: lets one :func:`map_seeds` call run tasks of several module-level functions."""
    return fn(*args)


def run(params: CrossDeviceParams, rng: Any, executor: Any = None) -> CrossDeviceResult:
    """Run every split (rule x noise x L) and the heterogeneous federation, per seed.

    ``executor`` (a :class:`concurrent.futures.Executor`, e.g. a Dask client's executor; None:
    serial, or the cluster named by ``FEDLAM_SCHEDULER``) runs every federation as an independent
    task (:func:`fedlam.experiments._executor.map_seeds`); the seeds are drawn from ``rng`` up
    front, so the result does not depend on the executor (the timings aside: ``time_rounds``
    measures each round where it runs).
    """
    if not isinstance(params, CrossDeviceParams):
        raise TypeError(f"params must be a CrossDeviceParams, got {type(params).__name__}")
    from fedlam.experiments._executor import map_seeds

    p = params
    S, nR, nN, nL, T = p.seeds, len(p.rules), len(p.noise), len(p.Ls), p.T
    K = p.n_archetypes
    Mc = np.array([p.total // L for L in p.Ls], dtype=np.int64)
    shape = (S, nR, nN, nL, T)
    ints = {n: np.full(shape, -1, dtype=np.int64) for n in ("k_hat", "n_patterns", "spurious")}
    flt = {n: np.full(shape, np.nan) for n in ("edge", "threshold", "t_sum", "t_rest", "t_eigh")}
    mag = np.full(shape + (K,), np.nan)
    top = np.full(shape + (p.n_top,), np.nan)
    nA = len(p.aggregations) if p.hetero_sizes else 0
    h_specs, h_sizes = hetero_specs(p, K) if p.hetero_sizes else ([], np.zeros((0, T), dtype=np.int64))
    Lh = len(h_specs)
    h_ints = {n: np.zeros((S, nA, T), dtype=np.int64) for n in ("k_hat", "n_patterns", "spurious")}
    h_flt = {n: np.zeros((S, nA, T)) for n in ("edge", "threshold")}
    h_mag = np.zeros((S, nA, T, K))
    h_top = np.full((S, nA, T, p.n_top), np.nan)
    h_w = np.full((S, nA, T, Lh), np.nan)
    keys: list[tuple] = []  # ("split", (s, ri, ni, li)) or ("hetero", (s, ai)), in task order
    tasks: list[tuple] = []
    for s, (seed_xi, seed_run) in enumerate(seed_pairs(rng, S)):
        xi = _archetypes(p, seed_xi)
        for li, L in enumerate(p.Ls):
            for ni in range(nN):
                for ri, rule in enumerate(p.rules):
                    if rule == "fit" and L > p.fit_max_L:
                        continue
                    keys.append(("split", (s, ri, ni, li)))
                    tasks.append((_split_task, p, xi, seed_run, li, ni, ri))
        for ai in range(nA):
            keys.append(("hetero", (s, ai)))
            tasks.append((_hetero_task, p, xi, seed_run, ai))
    logs = map_seeds(_call, tasks, executor)
    for (kind, idx), log in zip(keys, logs, strict=True):
        if kind == "split":
            for n in ints:
                ints[n][idx] = getattr(log, n)
            for n in flt:
                flt[n][idx] = getattr(log, n)
            mag[idx] = log.magnetization
            top[idx] = log.top
        else:
            for n in h_ints:
                h_ints[n][idx] = getattr(log, n)
            for n in h_flt:
                h_flt[n][idx] = getattr(log, n)
            h_mag[idx] = log.magnetization
            h_top[idx] = log.top
            h_w[idx] = log.weights
    n_h = h_sizes.shape[0] - (1 if p.hetero_noise else 0)
    h_m_eff = np.zeros((nA, T))
    for ai, agg in enumerate(p.aggregations if p.hetero_sizes else ()):
        for t in range(T):
            sz = h_sizes[:, t]
            om = None if agg == "equal" or sz.sum() == 0 else sz / sz.sum()
            om_h = (np.ones(sz.size) if om is None else om)[:n_h]
            h_m_eff[ai, t] = effective_sample_size(sz[:n_h], om_h)
    summary = _summary(p, ints, mag, flt, h_ints, h_mag, K)
    return CrossDeviceResult(p, Mc, ints["k_hat"], ints["n_patterns"], ints["spurious"], mag, flt["edge"],
                             flt["threshold"], top, flt["t_sum"], flt["t_rest"], flt["t_eigh"], h_sizes,
                             h_ints["k_hat"], h_ints["n_patterns"], h_ints["spurious"], h_mag, h_flt["edge"],
                             h_flt["threshold"], h_top, h_w, h_m_eff, summary)


def _summary(p: CrossDeviceParams, ints: dict, mag: np.ndarray, flt: dict, h_ints: dict, h_mag: np.ndarray,
             K: int) -> dict:
    out: dict = {}
    for ri, rule in enumerate(p.rules):
        for ni, noisy in enumerate(p.noise):
            for li, L in enumerate(p.Ls):
                kh = ints["k_hat"][:, ri, ni, li]
                if np.all(kh < 0):
                    continue
                key = f"{rule}/{'noise' if noisy else 'clean'}/L={L}"
                entry = {"k_hat_all_rounds_equal_K": bool(np.all(kh == K)),
                         "k_hat_max": int(kh.max()),
                         "min_m_last_round": float(np.nanmin(mag[:, ri, ni, li, -1])),
                         "spurious_max": int(ints["spurious"][:, ri, ni, li].max())}
                if p.time_rounds:
                    e = flt["t_eigh"][:, ri, ni, li]
                    entry["server_over_eigh_median"] = float(np.median((flt["t_sum"][:, ri, ni, li]
                                                                        + flt["t_rest"][:, ri, ni, li]) / e))
                    entry["rest_over_eigh_median"] = float(np.median(flt["t_rest"][:, ri, ni, li] / e))
                out[key] = entry
    for ai, agg in enumerate(p.aggregations if p.hetero_sizes else ()):
        out[f"hetero/{agg}"] = {"k_hat": h_ints["k_hat"][:, ai].tolist(),
                                "spurious_max": int(h_ints["spurious"][:, ai].max()),
                                "min_m_last_round": float(h_mag[:, ai, -1].min())}
    return out


# ---------------------------------------------------------------------------------------------
# Tables the notebook displays ({ref}`sec-exp-cross-device-run`): one call per visible cell.

_RULE_NAMES = {"scalars": "scalars", "fit": "per-upload fit"}


def setting_table(params: CrossDeviceParams) -> TitledTable:
    """The experiment's setting as a table (one row per parameter group)."""
    if not isinstance(params, CrossDeviceParams):
        raise TypeError(f"params must be a CrossDeviceParams, got {type(params).__name__}")
    p = params
    splits = ", ".join(f"{L} x {p.total // L}" for L in p.Ls)
    rows = [
        ("dimension N, archetypes", f"{p.N}, {p.n_archetypes} ({p.archetypes})"),
        ("channel quality r", f"{p.r}"),
        ("examples per round (honest)", f"{p.total}"),
        ("splits: clients x examples", splits),
        ("rounds T, seeds", f"{p.T}, {p.seeds}"),
        ("K-hat rules", ", ".join(_RULE_NAMES[r] for r in p.rules)
         + (f" (fit up to L = {p.fit_max_L})" if "fit" in p.rules else "")),
        ("noise client", " / ".join("with" if n else "without" for n in p.noise)),
        ("weight rule", f"{p.controller}"),
        ("heterogeneous batch sizes", ", ".join(str(m) for m in p.hetero_sizes) or "none"),
        ("intermittent client, noise client", f"{p.hetero_intermittent}, {p.hetero_noise}"),
        ("aggregations", ", ".join(p.aggregations)),
    ]
    return TitledTable("Setting", rows, ("parameter", "value"))


def split_table(res: CrossDeviceResult) -> TitledTable:
    """K-hat per round, last-round recovery and spurious patterns of every split that was run."""
    if not isinstance(res, CrossDeviceResult):
        raise TypeError(f"res must be a CrossDeviceResult, got {type(res).__name__}")
    p = res.params
    rows = []
    for ri, rule in enumerate(p.rules):
        for ni, noisy in enumerate(p.noise):
            for li, L in enumerate(p.Ls):
                kh = res.k_hat[:, ri, ni, li]
                if np.all(kh < 0):
                    continue
                rows.append((_RULE_NAMES[rule], "yes" if noisy else "no", f"{L} x {res.Mc[li]}",
                             " / ".join(" ".join(str(x) for x in s) for s in kh),
                             f"{np.nanmin(res.magnetization[:, ri, ni, li, -1]):.2f}",
                             str(int(res.spurious[:, ri, ni, li].max()))))
    return TitledTable(f"K-hat, recovery and spurious patterns per split: the K-hat rule, with or "
                       f"without the noise client, L clients x M_c examples, K-hat per round (seeds "
                       f"separated by /), the smallest m in round {p.T - 1} and the largest number "
                       f"of spurious patterns", rows,
                       ("K-hat rule", "noise", "L x M_c", "K-hat", "min m", "spurious"))


def hetero_table(res: CrossDeviceResult) -> TitledTable:
    """Per aggregation and round of the heterogeneous federation (first seed): M_eff, edge,
    leading eigenvalues, K-hat, recovery and spurious patterns."""
    if not isinstance(res, CrossDeviceResult):
        raise TypeError(f"res must be a CrossDeviceResult, got {type(res).__name__}")
    p = res.params
    K = p.n_archetypes
    rows = []
    for ai, agg in enumerate(p.aggregations[:res.h_k_hat.shape[1]]):   # none without hetero_sizes
        for t in range(p.T):
            rows.append((agg, str(t), f"{res.h_m_eff[ai, t]:.0f}", f"{res.h_edge[0, ai, t]:.2f}",
                         " ".join(f"{v:.1f}" for v in res.h_top[0, ai, t, :K + 2]),
                         str(res.h_k_hat[0, ai, t]), f"{res.h_magnetization[0, ai, t].min():.2f}",
                         str(res.h_spurious[0, ai, t])))
    return TitledTable("Batch sizes 1 to 500 in one federation (first seed)", rows,
                       ("weights", "round", "M_eff", "edge of N J_s", "leading eigenvalues",
                        "K-hat", "min m", "spurious"))


def pm1_bulk_tops(N: int, M: int, r: float, archetypes: np.ndarray, n_draws: int,
                  rng: Any) -> dict[str, np.ndarray]:
    """Top bulk eigenvalue of +-1 data against Gaussian data of the same variance, per draw.

    Per draw, four ``M x N`` matrices ``X`` give the top bulk eigenvalue of ``X^T X / (N M)``:
    the noise ``z = eta - r`` of +-1 entries of mean ``r`` and Gaussian noise of variance
    ``1 - r^2`` (largest eigenvalue), and examples of the ``K`` archetypes, +-1 and Gaussian
    (eigenvalue ``K + 1``: the ``K`` spikes are skipped). The measurement of {ref}`sec-many-clients-pm1`.

    Parameters
    ----------
    N, M : int
        Dimension and number of examples (positive).
    r : float
        Channel quality in (0, 1).
    archetypes : (K, N) array of +-1
        Archetypes of the examples, drawn uniformly per example.
    n_draws : int
        Independent draws (positive).
    rng : numpy.random.Generator or int
        Consumed in draw order.

    Returns
    -------
    dict of str to (n_draws,) array
        Keys ``"noise pm1"``, ``"noise gauss"``, ``"examples pm1"``, ``"examples gauss"``.
    """
    check_positive_int(N, "N")
    check_positive_int(M, "M")
    check_positive_int(n_draws, "n_draws")
    if not isinstance(r, (int, float)) or not 0.0 < float(r) < 1.0:
        raise ValueError(f"r must be a float in (0, 1), got {_describe(r)}")
    xi = np.asarray(archetypes)
    if xi.ndim != 2 or xi.shape[1] != N:
        raise ValueError(f"archetypes must be a (K, N={N}) array, got shape {xi.shape}")
    gen = as_rng(rng)
    K = xi.shape[0]
    s2 = 1.0 - r * r
    top = {k: np.empty(n_draws) for k in ("noise pm1", "noise gauss", "examples pm1", "examples gauss")}
    for d in range(n_draws):
        Zp = np.where(gen.random((M, N)) < (1 + r) / 2, 1.0, -1.0) - r            # archetype entry +1
        Zg = gen.standard_normal((M, N)) * math.sqrt(s2)
        mean_e = r * xi[gen.integers(0, K, size=M)]
        Ep = np.where(gen.random((M, N)) < (1 + mean_e) / 2, 1.0, -1.0)
        Eg = mean_e + gen.standard_normal((M, N)) * math.sqrt(s2)
        for key, X, idx in (("noise pm1", Zp, -1), ("noise gauss", Zg, -1),
                            ("examples pm1", Ep, -K - 1), ("examples gauss", Eg, -K - 1)):
            top[key][d] = np.linalg.eigvalsh(X.T @ X / (N * M))[idx]
    return top
