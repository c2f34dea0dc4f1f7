"""Experiment 6: baselines beyond the paper — what do federation and the LAM add, and what
would a federated-clustering method do instead?

For each scenario we compare ways of recovering the archetypes, round by round, on the same
archetypes and (except ``local``) the same client batches:

``federated``
    The full pipeline (:func:`fedlam.federation.run_federation`: clients blend, server factorizes
    with the LAM).
``spectral``
    The same federation, but the server's reconstruction is the sign of its K̂ leading
    eigenvectors (K̂ from the server's own estimator, as in ``federated``), no LAM. It runs
    the same clients and data streams as ``federated`` (same seed), so the difference is the
    reconstruction alone.
``local``
    No communication: every client runs the pipeline on its own data (a federation of one, with
    its own stream); we report the mean over honest clients.
``oracle``
    A central server that sees every example of every client from every round so far
    (pooled Hebbian operator, full replay, no privacy) and factorizes it with the LAM. It pools
    exactly the federation's batches (:func:`client_batches`).
``kfed`` / ``kfed_auto``
    k-FED ({cite:p}`dennis2021kfed`, :func:`fedlam.baselines.kfed_fit`) run on each round's
    batches (it is one-shot, so it keeps no memory between rounds). ``kfed`` is given the truth
    of the round: k = archetypes present in the round's batches and k′_c = archetypes present in
    client c's batch (the paper's setting, where a device knows how many clusters it holds).
    ``kfed_auto`` knows neither: every client sends ``k_max`` local centroids and the server
    picks k by silhouette (:func:`fedlam.baselines.select_k`).
``fedkmeans`` / ``fedkmeans_auto``
    Federated k-means (:func:`fedlam.baselines.federated_kmeans_fit`): up to ``fedkmeans_rounds``
    Lloyd rounds on each round's batches, warm-started from the previous round's centroids (its
    memory: a centroid whose archetype is absent receives no example and stays). ``fedkmeans`` is
    given k = archetypes seen so far; when k grows, new centroids are added from a k-FED-style
    upload by farthest-point traversal (:func:`fedlam.baselines.grow_centroids`).
    ``fedkmeans_auto`` chooses k by silhouette every round on that upload pooled with its previous
    centroids (so it needs the upload every round).

Scenarios: ``static`` (uniform mixture), ``supports`` (each client holds ``support_size`` of
``supports_K`` archetypes: k-FED's favourable regime k′ ≤ √k), ``drift``, ``novelty``,
``structured`` (Caltech silhouettes, correlated archetypes), ``noise`` (the static scenario
plus one pure-noise client) and ``poison`` (plus one poisoner). The poisoner is defined the
same way for every method: it holds M copies of one fake ±1 pattern and follows the protocol.
Its Hebbian upload is then exactly the federation's poison upload ``ξ_f ξ_fᵀ/N``; for k-FED it
sends the single centroid ξ_f; for federated k-means the sum M ξ_f and the count M in the
cluster nearest to ξ_f.

Recorded per method and round: magnetization with optimal matching, spurious patterns, the
k used (estimated or given), bytes each client uploads (:func:`fedlam.baselines.upload_bytes`);
per run: wall time; from round 0: the fraction of each honest client's examples that one upload
reveals within ``leak_bits`` bit flips (signs of sent centroids; for a Hebbian upload, the
output of an attack on it, :func:`hebbian_attack`: by default the privacy chapter's
:func:`fedlam.privacy.reconstruct_examples`), measured on the first honest client.
Separately, :func:`leakage_curve` measures that fraction against the batch size M.

The notebook is {ref}`sec-exp-baselines`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedlam._validation import _describe, as_rng, check_pm1
from fedlam.experiments._common import (
    JsonResult,
    TitledTable,
    check_choice,
    check_controllers,
    check_in_range,
    check_int_tuple,
    check_positive_int,
    check_quality,
    controller_label,
    seed_pairs,
)
from fedlam.experiments._common import (
    make_params as _make_params,
)

__all__ = ["BaselinesParams", "BaselinesResult", "PRESETS", "METHODS", "CLUSTERING_METHODS",
           "ALL_METHODS", "SCENARIOS", "make_params", "run", "signed_eigenvectors", "client_batches",
           "ClientBatches", "range_sign_attack", "hebbian_attack", "leakage_curve", "run_leakage",
           "combine", "setting_table", "quality_table", "hebbian_comparison_table", "bytes_table",
           "side_by_side_table", "unknown_k_table", "streaming_table", "attacker_table", "leak_table",
           "leakage_curve_table", "wall_time_table"]

#: The Hebbian-side methods (the dataclass default, kept for compatibility).
METHODS = ("federated", "spectral", "local", "oracle")
#: The federated-clustering peers.
CLUSTERING_METHODS = ("kfed", "kfed_auto", "fedkmeans", "fedkmeans_auto")
ALL_METHODS = METHODS + CLUSTERING_METHODS
SCENARIOS = ("static", "supports", "drift", "novelty", "structured", "noise", "poison")


@dataclass(frozen=True)
class BaselinesParams:
    """Parameters of the baselines comparison (all values are our choices; no paper figure).

    Attributes
    ----------
    scenarios : tuple of str
        Subset of ``SCENARIOS``.
    methods : tuple of str
        Subset of ``ALL_METHODS`` (default: the four Hebbian-side methods; both presets run all).
    N, T, M, L : int
        Random-pattern scenarios: dimension, rounds, examples per client per round, honest clients
        (the noise and poison scenarios add one client).
    r : float
        Channel quality of the random-pattern scenarios.
    controller : str or float
        Weight rule of the random-pattern scenarios (default our novelty rule).
    K : int
        Archetypes of the static, drift, noise and poison scenarios; the novelty scenario uses
        K_old = K_new = K, new ones entering at round T // 2 with a three-round ramp.
    supports_K, support_size : int
        Supports scenario: ``supports_K`` archetypes, each client holds ``support_size`` of them
        (:func:`fedlam.data.random_supports`, union covering all).
    structured_r : float
        Quality of the silhouette scenario (anchor, bass, Motorbikes 16; N = 784, w = 0.6).
    structured_T, structured_M_total : int
        Rounds and total example budget of the silhouette scenario (M_c = ceil(M_total/(L T))).
    k_max : int
        Largest k tried by the ``_auto`` clustering methods (and their clients' k′).
    fedkmeans_rounds : int
        Lloyd rounds of federated k-means per federation round.
    attack : {"privacy", "range"}
        Attack on a Hebbian upload: ``"privacy"`` the privacy chapter's
        :func:`fedlam.privacy.reconstruct_examples`; ``"range"`` the plain sign iteration inside
        the range of the upload (:func:`range_sign_attack`, always shown for comparison in the
        leakage curve).
    attack_starts : int
        Random starts of the ``"range"`` attack.
    leak_bits : float
        Tolerance of the leak measure as a fraction of N (``floor(leak_bits * N)`` bit flips).
    leak_Ms : tuple of int
        Batch sizes of :func:`leakage_curve` (static mixture, N, K, r of the random scenarios).
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
    supports_K: int = 6
    support_size: int = 2
    structured_r: float = 0.8
    structured_T: int = 12
    structured_M_total: int = 4000
    k_max: int = 10
    fedkmeans_rounds: int = 10
    attack: str = "privacy"
    attack_starts: int = 2000
    leak_bits: float = 0.01
    leak_Ms: tuple = (5, 10, 20, 50, 100, 200)
    seeds: int = 10

    def __post_init__(self) -> None:
        for fname, allowed in (("scenarios", SCENARIOS), ("methods", ALL_METHODS)):
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
        check_positive_int(self.supports_K, "supports_K")
        check_positive_int(self.support_size, "support_size")
        if self.support_size > self.supports_K:
            raise ValueError(f"support_size must be <= supports_K = {self.supports_K}, got {self.support_size}")
        if self.L * self.support_size < self.supports_K:
            raise ValueError(f"support_size must satisfy L * support_size >= supports_K = {self.supports_K} "
                             f"(every archetype held by some client), got L = {self.L}, "
                             f"support_size = {self.support_size}")
        check_quality(self.structured_r, "structured_r")
        check_positive_int(self.structured_T, "structured_T")
        check_positive_int(self.structured_M_total, "structured_M_total")
        check_positive_int(self.k_max, "k_max", minimum=2)
        check_positive_int(self.fedkmeans_rounds, "fedkmeans_rounds")
        check_choice(self.attack, "attack", ("range", "privacy"))
        check_positive_int(self.attack_starts, "attack_starts")
        check_in_range(self.leak_bits, "leak_bits", 0.0, 0.5)
        check_int_tuple(self.leak_Ms, "leak_Ms")
        check_positive_int(self.seeds, "seeds")


PRESETS: dict[str, BaselinesParams] = {
    "book": BaselinesParams(methods=ALL_METHODS, N=200, T=14, M=100, structured_T=8,
                            attack_starts=500, leak_Ms=(5, 10, 20, 50, 100), seeds=2),
    "full": BaselinesParams(methods=ALL_METHODS),
}
#: not an experiment of the paper: ``python -m fedlam.reproduce --preset paper`` leaves it out unless
#: named with ``--only``; its ``"paper"`` preset is its ``"full"`` one (the paper's scale)
PRESETS["paper"] = PRESETS["full"]


def make_params(preset: str = "book", **overrides: Any) -> BaselinesParams:
    """Preset ``"book"``, ``"paper"`` or ``"full"`` (see ``PRESETS``) with field overrides (``None`` keeps
    the preset value)."""
    return _make_params(BaselinesParams, PRESETS, preset, **overrides)


def signed_eigenvectors(result: Any) -> np.ndarray:
    """Spectral-only server stage for :func:`fedlam.federation.run_federation`'s
    ``reconstruct`` hook: the signs of the round's K̂ detected eigenvectors (the same K̂
    and spectrum the LAM would use; a zero entry gets +1). Returns int8 (K̂, N)."""
    V = np.asarray(result.vectors)
    return np.where(V.T >= 0, 1, -1).astype(np.int8)


# ----------------------------------------------------------------------------------------
# the clients' batches, exactly as run_federation draws them
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClientBatches:
    """Every client's batch of every round, as :func:`fedlam.federation.run_federation` draws it.

    Attributes
    ----------
    examples : list of list of numpy.ndarray
        ``examples[t][c]``: int8 (M_c(t), N). A poison client's entry is M_c(t) copies of its
        fake pattern (the data the clustering baselines and the oracle get from it; the
        federation's poison client uploads ``ξ_f ξ_fᵀ/N`` directly).
    labels : list of list of numpy.ndarray
        ``labels[t][c]``: int64 archetype index of each example; -1 for noise and poison rows
        and for sources without labels.
    kinds : tuple of str
    fakes : list of numpy.ndarray or None
        Per client, the poisoner's (1, N) fake pattern, else None.
    """

    examples: list
    labels: list
    kinds: tuple
    fakes: list

    @property
    def T(self) -> int:
        return len(self.examples)

    def __repr__(self) -> str:
        return f"ClientBatches(T={self.T}, kinds={self.kinds})"


def client_batches(archetypes: np.ndarray, specs: Any, T: int, rng: np.random.Generator | int) -> ClientBatches:
    """Reproduce the private batches of :func:`fedlam.federation.run_federation`'s clients.

    ``run_federation(archetypes, specs, T, rng)`` gives client c the child stream
    ``as_rng(rng).spawn(L + 1)[c]`` and the data source ``specs[c].make_source(archetypes, T)``
    (:mod:`fedlam.protocol`); a poison client first draws its fake pattern from its stream,
    every other client draws ``source.batch(t, stream)`` each round. We do the same with the
    same sources, touching only the client streams (not the server's), so the same seed (an
    int, or a fresh Generator in the same state) gives the federation's batches exactly;
    ``tests/test_baselines.py`` checks this against the federation's clients.

    Parameters
    ----------
    archetypes : numpy.ndarray
        (K, N) ±1.
    specs : sequence of fedlam.federation.ClientSpec
    T : int
    rng : numpy.random.Generator or int
        The seed given to ``run_federation`` (a Generator is advanced by ``spawn``).

    Returns
    -------
    ClientBatches
    """
    from fedlam import federation

    check_pm1(archetypes, "archetypes", ndim=2)
    N = archetypes.shape[1]
    T = check_positive_int(T, "T")
    if isinstance(specs, federation.ClientSpec) or not isinstance(specs, (list, tuple)) or len(specs) == 0:
        raise TypeError(f"specs must be a non-empty list of ClientSpec, got {_describe(specs)}")
    for c, s in enumerate(specs):
        if not isinstance(s, federation.ClientSpec):
            raise TypeError(f"specs[{c}] must be a ClientSpec, got {_describe(s)}")
    L = len(specs)
    streams = as_rng(rng).spawn(L + 1)
    pm = np.array([-1, 1], dtype=np.int8)
    sources = [s.make_source(archetypes, T) for s in specs]
    sizes = [s.batch_sizes(T) for s in specs]
    fakes: list = []
    for c, s in enumerate(specs):
        fakes.append(streams[c].choice(pm, size=(1, N)) if s.kind == "poison" else None)
    examples: list[list[Any]] = [[None] * L for _ in range(T)]
    labels: list[list[Any]] = [[None] * L for _ in range(T)]
    for t in range(T):
        for c, s in enumerate(specs):
            if sources[c] is None:  # the poisoner: M copies of its fake pattern
                ex = np.repeat(fakes[c], int(sizes[c][t]), axis=0)
                lab = None
            else:
                ex, lab = sources[c].batch(t, streams[c])
                ex = np.ascontiguousarray(ex, dtype=np.int8)
            if lab is None or s.kind not in ("honest", "flip"):
                lab = np.full(ex.shape[0], -1, dtype=np.int64)
            examples[t][c], labels[t][c] = ex, np.asarray(lab, dtype=np.int64)
    return ClientBatches(examples=examples, labels=labels, kinds=tuple(s.kind for s in specs), fakes=fakes)


# ----------------------------------------------------------------------------------------
# what one Hebbian upload reveals
# ----------------------------------------------------------------------------------------
def range_sign_attack(J: np.ndarray, rng: np.random.Generator | int, starts: int = 2000,
                      max_iter: int = 50, rtol: float = 1e-9) -> np.ndarray:
    """±1 vectors an observer can extract from one Hebbian upload ``J = ηᵀη/(NM)``.

    The range of ``J`` is the span of the client's examples; for M ≪ N the only ±1 vectors in
    it are ± the examples (DESIGN §6). From ``starts`` random ±1 vectors iterate
    ``x ← sgn(U Uᵀ x)`` (U: eigenvectors of the non-zero eigenvalues, eigenvalue > ``rtol`` ×
    the largest; zero entries -> +1) until a fixed point or ``max_iter`` steps, and return the
    distinct end points. This is the plain attack of the design notes; the privacy chapter
    develops stronger ones.

    Returns
    -------
    numpy.ndarray
        int8 (R, N) distinct end points (up to sign).
    """
    J = np.asarray(J, dtype=np.float64)
    if J.ndim != 2 or J.shape[0] != J.shape[1]:
        raise ValueError(f"J must be a square (N, N) operator, got shape {J.shape}")
    starts = check_positive_int(starts, "starts")
    max_iter = check_positive_int(max_iter, "max_iter")
    gen = as_rng(rng)
    N = J.shape[0]
    w, V = np.linalg.eigh(J)
    if w[-1] <= 0:
        return np.empty((0, N), dtype=np.int8)
    U = V[:, w > rtol * w[-1]]
    X = np.where(gen.random((starts, N)) < 0.5, -1.0, 1.0)
    for _ in range(max_iter):
        Y = np.where((X @ U) @ U.T >= 0, 1.0, -1.0)
        if np.array_equal(Y, X):
            break
        X = Y
    X = X * np.where(X[:, :1] >= 0, 1.0, -1.0)  # one representative per ± pair
    return np.unique(X.astype(np.int8), axis=0)


def hebbian_attack(J: np.ndarray, M: int, rng: np.random.Generator | int, attack: str = "range",
                   starts: int = 2000) -> np.ndarray:
    """±1 vectors extracted from one Hebbian upload of a batch of M examples.

    ``attack="range"``: :func:`range_sign_attack` with ``starts`` random starts;
    ``attack="privacy"``: :func:`fedlam.privacy.reconstruct_examples` ``(J, M, rng)`` (the
    privacy chapter's attack).
    """
    check_choice(attack, "attack", ("range", "privacy"))
    if attack == "privacy":
        from fedlam import privacy

        return np.asarray(privacy.reconstruct_examples(J, M, rng), dtype=np.int8)
    return range_sign_attack(J, rng, starts=starts)


_LEAK_KEYS = ("hebbian", "hebbian_range", "centroids_K", "centroids_kmax")


def _leakage_point(N: int, K: int, r: float, M: int, k_max: int, seed_xi: int, seed_data: int, j: int,
                   starts: int, max_bits: int, attack: str) -> tuple[float, float, float, float]:
    """One point of :func:`leakage_curve`: seed pair ``(seed_xi, seed_data)``, batch size ``M``
    (the ``j``-th of the curve). The archetypes come from ``seed_xi`` (the same for every M of a
    seed), the batch and the attacks from ``default_rng([seed_data, j])``: one independent task."""
    from fedlam import baselines, data, operators

    xi = data.random_archetypes(K, N, seed_xi)
    gen = np.random.default_rng([seed_data, j])
    ex, _ = data.sample_examples(xi, M, r, np.full(K, 1.0 / K), gen)
    J = operators.hebbian(ex)
    plain = range_sign_attack(J, gen, starts=starts)
    leak_range = baselines.leaked_fraction(ex, plain, max_bits)
    cand = plain if attack == "range" else hebbian_attack(J, M, gen, attack, starts)
    leak_chosen = baselines.leaked_fraction(ex, cand, max_bits)
    sent = [baselines.sign_patterns(baselines.local_centroids([ex], kk, gen).centroids[0]) for kk in (K, k_max)]
    return (leak_chosen, leak_range, baselines.leaked_fraction(ex, sent[0], max_bits),
            baselines.leaked_fraction(ex, sent[1], max_bits))


def _leakage_tasks(N: int, K: int, r: float, Ms: tuple, k_max: int, rng: Any, seeds: int, starts: int,
                   max_bits: int, attack: str) -> list[tuple]:
    """The (seed, M) tasks of :func:`leakage_curve`, their seeds drawn from ``rng`` up front."""
    return [(_leakage_point, N, K, r, M, k_max, a, b, j, starts, max_bits, attack)
            for a, b in seed_pairs(rng, seeds) for j, M in enumerate(Ms)]


def _leakage_assemble(Ms: tuple, seeds: int, points: list) -> dict:
    arr = np.asarray(points, dtype=np.float64).reshape(seeds, len(Ms), len(_LEAK_KEYS))
    out: dict = {key: arr[:, :, i].copy() for i, key in enumerate(_LEAK_KEYS)}
    out["Ms"] = np.array(Ms)
    return out


def leakage_curve(N: int, K: int, r: float, Ms: tuple, k_max: int, rng: np.random.Generator | int,
                  seeds: int = 2, starts: int = 500, max_bits: int = 0, attack: str = "range",
                  executor: Any = None) -> dict:
    """Fraction of one client's examples revealed by its first upload, against its batch size M.

    For each M in ``Ms`` and seed: K random archetypes, one client's batch from the uniform
    mixture at quality r, and three uploads: its Hebbian operator (attacked with
    :func:`hebbian_attack`, and with the plain :func:`range_sign_attack` for comparison), its
    k-FED centroids with k′ = K, and with k′ = ``k_max`` (what the ``_auto`` methods send).
    Derived in {ref}`sec-exp-baselines-clustering`.

    Every (seed, M) point draws from its own stream: a pair of integer seeds per seed is drawn
    from ``rng`` up front (the archetypes of the seed, and the data of its points), so the points
    are independent tasks and ``executor`` (a :class:`concurrent.futures.Executor`; None: serial,
    or the cluster named by ``FEDLAM_SCHEDULER``) can run them anywhere with the same result.

    Returns
    -------
    dict
        ``"Ms"``, and for ``"hebbian"`` (the chosen attack), ``"hebbian_range"``,
        ``"centroids_K"``, ``"centroids_kmax"`` (S, len(Ms)) arrays of revealed fractions.
    """
    from fedlam.experiments._executor import map_seeds

    Ms = check_int_tuple(Ms, "Ms")
    seeds = check_positive_int(seeds, "seeds")
    check_choice(attack, "attack", ("range", "privacy"))
    tasks = _leakage_tasks(N, K, r, Ms, k_max, as_rng(rng), seeds, starts, max_bits, attack)
    return _leakage_assemble(Ms, seeds, map_seeds(_call, tasks, executor))


# ----------------------------------------------------------------------------------------
# one method on one scenario and seed
# ----------------------------------------------------------------------------------------
@dataclass
class _Trace:
    magnetization: np.ndarray  # (T, K)
    spurious: np.ndarray  # (T,)
    k_used: np.ndarray  # (T,) float (mean over clients for local)
    bytes_sent: np.ndarray  # (T,) mean bytes uploaded per client
    leak_exact: float = float("nan")
    leak_tol: float = float("nan")
    wall_time: float = float("nan")


def _record(patterns: np.ndarray, xi: np.ndarray) -> tuple[np.ndarray, int]:
    from fedlam import metrics

    P = np.asarray(patterns, dtype=np.int8).reshape(-1, xi.shape[1])
    return metrics.magnetization(P, xi), metrics.spurious_count(P, xi)


def _leak_client(batches: ClientBatches) -> int | None:
    """The client whose round-0 upload the leak measure attacks: the first honest one with data."""
    for c, kind in enumerate(batches.kinds):
        if kind in ("honest", "flip") and batches.examples[0][c].shape[0] > 0:
            return c
    return None


def _leak(batches: ClientBatches, revealed_per_client: list, max_bits: int) -> tuple[float, float]:
    """Fraction of that client's round-0 examples revealed (exactly, within ``max_bits``)."""
    from fedlam import baselines

    c = _leak_client(batches)
    if c is None:
        return float("nan"), float("nan")
    X, R = batches.examples[0][c], revealed_per_client[c]
    return baselines.leaked_fraction(X, R, 0), baselines.leaked_fraction(X, R, max_bits)


def _hebbian_leak(batches: ClientBatches, gen: np.random.Generator, p: BaselinesParams,
                  max_bits: int) -> tuple[float, float]:
    """The same measure on that client's round-0 Hebbian upload (one attack per scenario and seed,
    shared by ``federated`` and ``spectral``, whose uploads are the same)."""
    from fedlam import operators

    c = _leak_client(batches)
    if c is None:
        return float("nan"), float("nan")
    ex = batches.examples[0][c]
    revealed = [np.empty((0, ex.shape[1]), dtype=np.int8)] * len(batches.kinds)
    revealed[c] = hebbian_attack(operators.hebbian(ex), ex.shape[0], gen, p.attack, p.attack_starts)
    return _leak(batches, revealed, max_bits)


def _run_oracle(xi: np.ndarray, batches: ClientBatches, gen: np.random.Generator) -> _Trace:
    """Central oracle: factorize the Hebbian operator of all examples seen so far."""
    from fedlam import lam

    T = batches.T
    K, N = xi.shape
    G = np.zeros((N, N))
    count = 0
    tr = _Trace(np.zeros((T, K)), np.zeros(T, dtype=np.int64), np.zeros(T), np.zeros(T))
    for t in range(T):
        sent = []
        for ex in batches.examples[t]:
            X = ex.astype(np.float64)
            G += X.T @ X
            count += ex.shape[0]
            sent.append(-(-ex.size // 8))
        res = lam.factorize(G / (N * max(count, 1)), rng=gen)
        tr.magnetization[t], tr.spurious[t] = _record(res.patterns, xi)
        tr.k_used[t] = int(res.k_hat)
        tr.bytes_sent[t] = float(np.mean(sent))
    tr.leak_exact, tr.leak_tol = 1.0, 1.0  # the oracle receives the examples themselves
    return tr


def _true_ks(batches: ClientBatches, t: int) -> tuple[int, list[int]]:
    """Archetypes present in round t's honest batches, and per client (the paper's k^(z)).

    A noise client gets the global count (it cannot know better); an empty or poison client 1.
    """
    labs = batches.labels[t]
    present: set[int] = set()
    for lab in labs:
        present.update(int(v) for v in np.unique(lab) if v >= 0)
    k = max(len(present), 1)
    per = []
    for c, lab in enumerate(labs):
        n = int(np.unique(lab[lab >= 0]).size)
        per.append(n if n > 0 else (k if batches.kinds[c] == "noise" else 1))
    return k, per


def _run_kfed(xi: np.ndarray, batches: ClientBatches, gen: np.random.Generator, p: BaselinesParams,
              auto: bool, max_bits: int) -> _Trace:
    from fedlam import baselines

    T, (K, N) = batches.T, xi.shape
    tr = _Trace(np.zeros((T, K)), np.zeros(T, dtype=np.int64), np.zeros(T), np.zeros(T))
    for t in range(T):
        ex = batches.examples[t]
        if auto:
            up = baselines.local_centroids(ex, p.k_max, gen)
            k = baselines.select_k(up.pooled, gen, p.k_max).k
        else:
            k, per = _true_ks(batches, t)
            up = baselines.local_centroids(ex, per, gen)
        centres = baselines.kfed_server(up, k, gen)
        tr.magnetization[t], tr.spurious[t] = _record(baselines.sign_patterns(centres), xi)
        tr.k_used[t] = k
        tr.bytes_sent[t] = float(np.mean([baselines.upload_bytes("kfed", N, kc) for kc in up.k_local]))
        if t == 0:
            revealed = [baselines.sign_patterns(C) for C in up.centroids]
            tr.leak_exact, tr.leak_tol = _leak(batches, revealed, max_bits)
    return tr


def _run_fedkmeans(xi: np.ndarray, batches: ClientBatches, gen: np.random.Generator, p: BaselinesParams,
                   auto: bool, max_bits: int) -> _Trace:
    """A stream of federated k-means fits with memory in its centroids.

    k per round: the number of archetypes seen so far (true, cumulative: the memory target of
    the metric) or the silhouette choice on the round's upload pooled with the previous
    centroids. Same k: warm start. Larger k: the previous centroids plus new ones taken from
    the round's upload by farthest-point traversal. Smaller k (or round 0): re-initialise from
    the round's upload (count-weighted k-means++).
    """
    from fedlam import baselines

    T, (K, N) = batches.T, xi.shape
    L = len(batches.kinds)
    tr = _Trace(np.zeros((T, K)), np.zeros(T, dtype=np.int64), np.zeros(T), np.zeros(T))
    prev, k_prev = None, -1
    seen: set = set()
    for t in range(T):
        ex = batches.examples[t]
        sent = np.zeros(L)
        up = None
        if auto:
            up = baselines.local_centroids(ex, p.k_max, gen)
            pool = up.pooled if prev is None else np.concatenate([up.pooled, prev[0] / prev[1][:, None]])
            k = baselines.select_k(pool, gen, p.k_max).k
        else:
            _, per = _true_ks(batches, t)
            for lab in batches.labels[t]:
                seen.update(int(v) for v in np.unique(lab) if v >= 0)
            k = max(len(seen), 1)
        if prev is None or k != k_prev:
            if up is None:
                up = baselines.local_centroids(ex, per, gen)
        if up is not None:
            sent += [baselines.upload_bytes("fedkmeans_init", N, kc) for kc in up.k_local]
        if prev is not None and k == k_prev:
            fit = baselines.federated_kmeans_fit(ex, k, gen, p.fedkmeans_rounds, init=prev)
        elif prev is not None and up is not None and k > k_prev and up.pooled.shape[0] >= k - k_prev:
            init = baselines.grow_centroids(prev, up, k - k_prev)
            fit = baselines.federated_kmeans_fit(ex, k, gen, p.fedkmeans_rounds, init=init)
        else:
            fit = baselines.federated_kmeans_fit(ex, k, gen, p.fedkmeans_rounds, upload=up)
        active = np.array([e.shape[0] > 0 for e in ex])
        sent += active * fit.rounds_run * baselines.upload_bytes("fedkmeans_round", N, k)
        prev, k_prev = (fit.sums, fit.sizes), k
        tr.magnetization[t], tr.spurious[t] = _record(fit.patterns, xi)
        tr.k_used[t] = k
        tr.bytes_sent[t] = float(sent.mean())
        if t == 0 and up is not None:  # round 0 always seeds from an upload
            revealed = [np.concatenate([baselines.sign_patterns(up.centroids[c]),
                                        baselines.sign_patterns(fit.first_round_means[c])])
                        for c in range(L)]
            tr.leak_exact, tr.leak_tol = _leak(batches, revealed, max_bits)
    return tr


#: the server's acceptance in this experiment: the paper's, the method the baselines are compared
#: with. The default fresh acceptance admits a pattern only once the fresh data of two uploads
#: certify it, so in the "supports" scenario (every class held by one client) it keeps none of
#: them (measured: federated and spectral 0.0 against the oracle's 1.0); that trade-off is
#: derived in the robustness chapter, not measured against clustering here
ACCEPTANCE = "paper"


def _run_federation(xi: np.ndarray, specs: list, T: int, seed: int, ctrl: Any, spectral: bool,
                    leak: tuple[float, float]) -> _Trace:
    from fedlam import baselines, federation

    t0 = time.perf_counter()
    h = federation.run_federation(xi, specs, T, seed, controller=ctrl,
                                  reconstruct=signed_eigenvectors if spectral else None, acceptance=ACCEPTANCE)
    wall = time.perf_counter() - t0
    N = xi.shape[1]
    tr = _Trace(h.magnetization.copy(), h.spurious.copy(), h.k_hat.astype(np.float64),
                np.full(T, float(baselines.upload_bytes("hebbian", N))))
    tr.wall_time = wall
    tr.leak_exact, tr.leak_tol = leak
    return tr


def _run_local(xi: np.ndarray, specs: list, T: int, seed: int, ctrl: Any) -> tuple[_Trace, np.ndarray]:
    from fedlam import federation

    K = xi.shape[0]
    honest = [c for c, s in enumerate(specs) if s.kind in ("honest", "flip")]
    hs = [federation.run_federation(xi, [specs[c]], T, seed + c + 1, controller=ctrl, acceptance=ACCEPTANCE)
          for c in honest]
    per = np.stack([h.magnetization for h in hs])
    tr = _Trace(per.mean(axis=0), np.mean([h.spurious for h in hs], axis=0),
                np.mean([h.k_hat for h in hs], axis=0), np.zeros(T))
    tr.leak_exact, tr.leak_tol = 0.0, 0.0  # nothing leaves a client
    best = per[np.argmax(per[:, -1].mean(axis=1))] if len(hs) else np.zeros((T, K))
    return tr, best


# ----------------------------------------------------------------------------------------
# scenarios
# ----------------------------------------------------------------------------------------
def _scenario(p: BaselinesParams, name: str, seed_xi: int) -> tuple[np.ndarray, list, int, Any]:
    """(archetypes, client specs, T, controller) of a scenario for one seed."""
    from fedlam import data, federation

    def honest(sched: np.ndarray, M: int, r: float) -> list:
        return [federation.ClientSpec(r=r, M=M, mixture=sched[:, c]) for c in range(sched.shape[1])]

    if name == "structured":
        xi = data.structured_archetypes()
        T = p.structured_T
        M = math.ceil(p.structured_M_total / (p.L * T))
        return xi, honest(data.static_mixture(T, p.L, xi.shape[0]), M, p.structured_r), T, 0.6
    gen = np.random.default_rng(seed_xi)
    if name == "supports":
        xi = data.random_archetypes(p.supports_K, p.N, gen)
        sup = data.random_supports(p.L, p.supports_K, p.support_size, gen)
        sched = data.heterogeneous_supports(p.T, p.L, p.supports_K, sup)
        return xi, honest(sched, p.M, p.r), p.T, p.controller
    xi = data.random_archetypes(p.K, p.N, gen)
    if name == "drift":
        sched = data.sequential_drift(p.T, p.L, p.K)
    elif name == "novelty":
        xi = data.random_archetypes(2 * p.K, p.N, seed_xi)
        sched = data.novelty_ramp(p.T, p.L, p.K, p.K, p.T // 2, 3)
    else:
        sched = data.static_mixture(p.T, p.L, p.K)
    specs = honest(sched, p.M, p.r)
    if name == "noise":
        specs.append(federation.ClientSpec(r=None, M=p.M, kind="noise"))
    elif name == "poison":
        specs.append(federation.ClientSpec(M=p.M, kind="poison"))
    return xi, specs, p.T, p.controller


@dataclass(frozen=True)
class BaselinesResult(JsonResult):
    """Per scenario arrays; methods in ``params.methods`` order.

    Attributes
    ----------
    params : BaselinesParams
    magnetization : dict scenario -> (S, n_methods, T, K) array (for ``local`` the mean over
        honest clients).
    local_best : dict scenario -> (S, T, K) the best single client's magnetization.
    spurious : dict scenario -> (S, n_methods, T) spurious patterns (:func:`fedlam.metrics.spurious_count`).
    k_used : dict scenario -> (S, n_methods, T) K̂ of the Hebbian methods, k given to or chosen
        by the clustering methods.
    bytes_sent : dict scenario -> (S, n_methods, T) mean bytes uploaded per client in the round.
    leak : dict scenario -> (S, n_methods, 2) fraction of the first honest client's round-0
        examples revealed by its round-0 upload: exactly, and within ``floor(leak_bits N)`` bits.
    wall_time : dict scenario -> (S, n_methods) seconds per run (not reproducible; left out of
        :meth:`to_dict` unless asked for).
    leakage : dict from :func:`leakage_curve`.
    summary : dict of per-scenario, per-method summaries.
    """

    params: BaselinesParams
    magnetization: dict
    local_best: dict
    spurious: dict = field(default_factory=dict)
    k_used: dict = field(default_factory=dict)
    bytes_sent: dict = field(default_factory=dict)
    leak: dict = field(default_factory=dict)
    wall_time: dict = field(default_factory=dict)
    leakage: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)

    def to_dict(self, include_timings: bool = False) -> dict:
        """JSON-serialisable fields; wall times only with ``include_timings=True`` (they differ
        from run to run, everything else is a function of the seed)."""
        d = super().to_dict()
        if not include_timings:
            d.pop("wall_time", None)
            for sc in d.get("summary", {}).values():
                for m in sc.values():
                    m.pop("wall_time_s", None)
        return d


def _summarise(p: BaselinesParams, mag: np.ndarray, spur: np.ndarray, kk: np.ndarray, by: np.ndarray,
               leak: np.ndarray, wall: np.ndarray) -> dict:
    out = {}
    for mi, method in enumerate(p.methods):
        out[method] = {
            "final_mean_magnetization": float(mag[:, mi, -1].mean()),
            "final_min_archetype_mean": float(mag[:, mi, -1].min(axis=1).mean()),
            "time_avg_magnetization": float(mag[:, mi].mean()),
            "final_spurious_mean": float(spur[:, mi, -1].mean()),
            "final_k_mean": float(kk[:, mi, -1].mean()),
            "bytes_per_client_round": float(by[:, mi].mean()),
            "leak_exact": float(leak[:, mi, 0].mean()),
            "leak_tol": float(leak[:, mi, 1].mean()),
            "wall_time_s": float(wall[:, mi].mean()),
        }
    return out


def _run_seed(p: BaselinesParams, name: str, seed_xi: int, seed_fed: int) -> dict:
    """Every method of ``p.methods`` on scenario ``name`` for one seed pair (one task of :func:`run`).

    Returns per-seed arrays: ``mag`` (n_methods, T, K), ``best`` (T, K), ``spur``, ``k``,
    ``bytes`` (n_methods, T), ``leak`` (n_methods, 2), ``wall`` (n_methods,). Every random draw
    comes from ``seed_xi`` and ``seed_fed``, so the result does not depend on where it runs.
    """
    xi, specs, T, ctrl = _scenario(p, name, seed_xi)
    K, N = xi.shape
    max_bits = math.floor(p.leak_bits * N)
    nm = len(p.methods)
    arrs = {"mag": np.zeros((nm, T, K)), "best": np.zeros((T, K)), "spur": np.zeros((nm, T)),
            "k": np.zeros((nm, T)), "bytes": np.zeros((nm, T)), "leak": np.full((nm, 2), np.nan),
            "wall": np.full(nm, np.nan)}
    batches = client_batches(xi, specs, T, seed_fed)
    hebb_leak = (float("nan"), float("nan"))
    if "federated" in p.methods or "spectral" in p.methods:
        hebb_leak = _hebbian_leak(batches, np.random.default_rng([seed_fed, 0]), p, max_bits)
    for mi, method in enumerate(p.methods):
        gen = np.random.default_rng([seed_fed, 1 + ALL_METHODS.index(method)])
        t0 = time.perf_counter()
        if method in ("federated", "spectral"):
            tr = _run_federation(xi, specs, T, seed_fed, ctrl, method == "spectral", hebb_leak)
        elif method == "local":
            tr, arrs["best"] = _run_local(xi, specs, T, seed_fed, ctrl)
        elif method == "oracle":
            tr = _run_oracle(xi, batches, gen)
        elif method.startswith("kfed"):
            tr = _run_kfed(xi, batches, gen, p, method.endswith("auto"), max_bits)
        else:
            tr = _run_fedkmeans(xi, batches, gen, p, method.endswith("auto"), max_bits)
        wall = time.perf_counter() - t0 if np.isnan(tr.wall_time) else tr.wall_time
        arrs["mag"][mi] = tr.magnetization
        arrs["spur"][mi] = tr.spurious
        arrs["k"][mi] = tr.k_used
        arrs["bytes"][mi] = tr.bytes_sent
        arrs["leak"][mi] = (tr.leak_exact, tr.leak_tol)
        arrs["wall"][mi] = wall
    return arrs


def _leakage_tasks_of(p: BaselinesParams, seed_fed0: int) -> list[tuple]:
    """The tasks of the leakage curve of :func:`run` and :func:`run_leakage`: its per-seed streams
    come from ``default_rng([seed_fed0, 99])`` (``seed_fed0``: the first seed pair's federation seed)."""
    return _leakage_tasks(p.N, p.K, p.r, p.leak_Ms, p.k_max, np.random.default_rng([seed_fed0, 99]), p.seeds,
                          p.attack_starts, math.floor(p.leak_bits * p.N), p.attack)


def _call(fn: Any, *args: Any) -> Any:
    """``fn(*args)``: lets one :func:`map_seeds` call run tasks of several module-level functions."""
    return fn(*args)


def run(params: BaselinesParams, rng: Any, *, leakage: bool = True, executor: Any = None) -> BaselinesResult:
    """Run every method on every scenario and seed, and (``leakage=True`` and a clustering
    method among ``params.methods``) the leakage curve.

    The seeds of scenario s depend only on ``rng`` and ``params.seeds``, so runs over disjoint
    subsets of the scenarios with the same ``rng`` can be joined by :func:`combine` into the
    result of one run.

    ``executor`` (a :class:`concurrent.futures.Executor`, e.g. a Dask client's executor; None:
    serial, or the cluster named by ``FEDLAM_SCHEDULER``) runs the (scenario, seed) pairs and the
    leakage curve as independent tasks (:func:`fedlam.experiments._executor.map_seeds`); every
    task draws only from the seeds drawn up front, so the result does not depend on the executor
    (wall times aside)."""
    from fedlam.experiments._executor import map_seeds

    if not isinstance(params, BaselinesParams):
        raise TypeError(f"params must be a BaselinesParams, got {type(params).__name__}")

    p = params
    gen0 = as_rng(rng)
    seeds = seed_pairs(gen0, p.seeds)
    tasks: list[tuple] = [(_run_seed, p, name, seed_xi, seed_fed)
                          for name in p.scenarios for seed_xi, seed_fed in seeds]
    n_runs = len(tasks)
    with_leakage = leakage and any(m in CLUSTERING_METHODS for m in p.methods)
    if with_leakage:
        tasks += _leakage_tasks_of(p, seeds[0][1])
    results = map_seeds(_call, tasks, executor)
    leak_curve: dict = _leakage_assemble(p.leak_Ms, p.seeds, results[n_runs:]) if with_leakage else {}
    results = results[:n_runs]
    out: dict[str, dict] = {k: {} for k in ("mag", "best", "spur", "k", "bytes", "leak", "wall", "summary")}
    for i, name in enumerate(p.scenarios):
        per_seed = results[i * p.seeds:(i + 1) * p.seeds]
        arrs = {key: np.stack([r[key] for r in per_seed])
                for key in ("mag", "best", "spur", "k", "bytes", "leak", "wall")}
        for key, val in arrs.items():
            out[key][name] = val
        out["summary"][name] = _summarise(p, arrs["mag"], arrs["spur"], arrs["k"], arrs["bytes"], arrs["leak"],
                                          arrs["wall"])
    return BaselinesResult(params=p, magnetization=out["mag"], local_best=out["best"], spurious=out["spur"],
                           k_used=out["k"], bytes_sent=out["bytes"], leak=out["leak"], wall_time=out["wall"],
                           leakage=leak_curve, summary=out["summary"])


def run_leakage(params: BaselinesParams, rng: Any, executor: Any = None) -> dict:
    """The leakage curve of ``run(params, rng)`` alone (same seeds), for a notebook that runs
    the scenarios in several cells.

    Its (seed, batch size) points are independent tasks with their own streams, drawn up front
    (see :func:`leakage_curve`); ``executor`` runs them (None: serial, or the cluster named by
    ``FEDLAM_SCHEDULER``) and the result does not depend on it.
    """
    from fedlam.experiments._executor import map_seeds

    if not isinstance(params, BaselinesParams):
        raise TypeError(f"params must be a BaselinesParams, got {type(params).__name__}")
    p = params
    seeds = seed_pairs(as_rng(rng), p.seeds)
    return _leakage_assemble(p.leak_Ms, p.seeds, map_seeds(_call, _leakage_tasks_of(p, seeds[0][1]), executor))


def combine(parts: Any, leakage: dict | None = None) -> BaselinesResult:
    """Join results of :func:`run` over disjoint scenario subsets (same rng and other parameters)
    into one result, with the given leakage curve (default: the first non-empty one)."""
    import dataclasses

    if isinstance(parts, BaselinesResult) or not isinstance(parts, (list, tuple)) or len(parts) == 0:
        raise TypeError(f"parts must be a non-empty list of BaselinesResult, got {_describe(parts)}")
    for i, r in enumerate(parts):
        if not isinstance(r, BaselinesResult):
            raise TypeError(f"parts[{i}] must be a BaselinesResult, got {_describe(r)}")
    base = parts[0].params
    scen: list[str] = []
    for i, r in enumerate(parts):
        if dataclasses.replace(r.params, scenarios=base.scenarios) != base:
            raise ValueError(f"parts[{i}] was run with other parameters than parts[0] (beyond the scenarios)")
        dup = set(scen) & set(r.params.scenarios)
        if dup:
            raise ValueError(f"parts[{i}] repeats scenario(s) {sorted(dup)}")
        scen.extend(r.params.scenarios)
    fields = ("magnetization", "local_best", "spurious", "k_used", "bytes_sent", "leak", "wall_time", "summary")
    merged = {f: {k: v for r in parts for k, v in getattr(r, f).items()} for f in fields}
    if leakage is None:
        leakage = next((r.leakage for r in parts if r.leakage), {})
    return BaselinesResult(params=dataclasses.replace(base, scenarios=tuple(scen)), leakage=leakage, **merged)


# ----------------------------------------------------------------------------------------
# the page's tables ({ref}`sec-exp-baselines`): one titled table per output
def _check_result(res: Any) -> BaselinesResult:
    if not isinstance(res, BaselinesResult):
        raise TypeError(f"res must be a BaselinesResult, got {type(res).__name__}")
    return res


def _idx(res: BaselinesResult) -> dict:
    return {m: i for i, m in enumerate(res.params.methods)}


def _methods(res: BaselinesResult, wanted: Any) -> list:
    if wanted is None:
        return list(res.params.methods)
    wanted = list(wanted)
    for m in wanted:
        if m not in res.params.methods:
            raise ValueError(f"methods must be among {res.params.methods}, got {m!r}")
    return wanted


def setting_table(params: BaselinesParams) -> Any:
    """The experiment's setting as a titled table (one row per parameter group)."""
    if not isinstance(params, BaselinesParams):
        raise TypeError(f"params must be a BaselinesParams, got {type(params).__name__}")
    p = params
    rows = [
        ("scenarios", f"{len(p.scenarios)} (see the title)"),
        ("methods", f"{len(p.methods)} (see the title)"),
        ("random scenarios: N, rounds T, batch M", f"{p.N}, {p.T}, {p.M}"),
        ("honest clients L, archetypes K, quality r", f"{p.L}, {p.K}, {p.r}"),
        ("weight rule", controller_label(p.controller)),
        ("supports: archetypes, held per client", f"{p.supports_K}, {p.support_size}"),
        ("silhouettes: r, rounds, example budget", f"{p.structured_r}, {p.structured_T}, {p.structured_M_total}"),
        ("clustering: k_max, Lloyd rounds", f"{p.k_max}, {p.fedkmeans_rounds}"),
        ("attack, starts, bits tolerated",
         f"{p.attack}, {p.attack_starts}, {100 * p.leak_bits:g} %"),
        ("leakage curve: batch sizes M", ", ".join(map(str, p.leak_Ms))),
        ("seeds", f"{p.seeds}"),
    ]
    return TitledTable(f"Setting. Scenarios: {', '.join(p.scenarios)}. Methods: {', '.join(p.methods)}. "
                       "Clustering: Lloyd rounds per federation round; attack: on a Hebbian upload",
                       rows, ("parameter", "value"))


def quality_table(res: BaselinesResult, methods: Any = None) -> Any:
    """Final mean, final worst-archetype and time-averaged magnetization per scenario and
    method (mean over seeds)."""
    res = _check_result(res)
    ms = _methods(res, methods)
    rows = []
    for name in res.params.scenarios:
        s = res.summary[name]
        rows.append((f"{name}: final mean m", *[f"{s[m]['final_mean_magnetization']:.2f}" for m in ms]))
        rows.append((f"{name}: final worst archetype", *[f"{s[m]['final_min_archetype_mean']:.2f}" for m in ms]))
        rows.append((f"{name}: time-averaged m", *[f"{s[m]['time_avg_magnetization']:.2f}" for m in ms]))
    return TitledTable("Final and time-averaged magnetization (mean over seeds)", rows, ("scenario", *ms))


def hebbian_comparison_table(res: BaselinesResult) -> Any:
    """Drift, novelty and silhouettes: final mean magnetization of the federation, the
    spectral-only reconstruction, local-only clients and the central oracle, with the BBP
    thresholds √q = √(N/M) of one client and √(N/(LM)) of the pooled clients (the page's
    prose interprets them, {ref}`sec-exp-baselines`)."""
    res = _check_result(res)
    params = res.params
    rows = []
    for name in [s for s in params.scenarios if s in ("drift", "novelty", "structured")]:
        s = res.summary[name]

        def f(m: str, s: dict = s) -> str:
            return f"{s[m]['final_mean_magnetization']:.2f}" if m in s else "–"

        if name == "structured":
            Mc, Nn = int(np.ceil(params.structured_M_total / (params.L * params.structured_T))), 784
        else:
            Mc, Nn = params.M, params.N
        ql, qf = np.sqrt(Nn / Mc), np.sqrt(Nn / (params.L * Mc))
        rows.append((name, *(f(m) for m in METHODS), f"{ql:.2f}", f"{qf:.2f}"))
    return TitledTable("Final mean magnetization against the Hebbian-side baselines (no baseline in the paper)",
                       rows, ("scenario", "federated", "spectral only", "local only", "central oracle",
                              "√q one client", "√q pooled"))


def bytes_table(res: BaselinesResult) -> Any:
    """Mean kB uploaded per client and round, per method and scenario."""
    res = _check_result(res)
    idx, sc = _idx(res), res.params.scenarios
    rows = [(m, *[f"{res.bytes_sent[s][:, idx[m]].mean() / 1000:.1f}" for s in sc]) for m in res.params.methods]
    return TitledTable("Upload per client and round (kB)", rows, ("method", *sc))


def side_by_side_table(res: BaselinesResult, part: str = "m") -> Any:
    """Final round, mean over seeds, per method and scenario: ``part="m"`` the mean
    magnetization / the worst archetype's, ``part="k"`` the spurious patterns / the k used."""
    res = _check_result(res)
    if part not in ("m", "k"):
        raise ValueError(f"part must be 'm' or 'k', got {part!r}")
    sc = res.params.scenarios
    rows = []
    for m in res.params.methods:
        cells = []
        for s in sc:
            v = res.summary[s][m]
            if part == "m":
                cells.append(f"{v['final_mean_magnetization']:.2f}/{v['final_min_archetype_mean']:.2f}")
            else:
                cells.append(f"{v['final_spurious_mean']:.1f}/{v['final_k_mean']:.1f}")
        rows.append((m, *cells))
    Ks = ", ".join(f"{res.magnetization[s].shape[3]}" for s in sc)
    what = "m̄/worst archetype's m" if part == "m" else "spurious patterns/k used"
    return TitledTable(f"Final round (mean over seeds): {what} (K = {Ks})", rows, ("method", *sc))


def unknown_k_table(res: BaselinesResult) -> Any:
    """Scenarios whose K does not change: fraction of rounds with k = K for the methods that
    choose k, with the final k and spurious patterns."""
    res = _check_result(res)
    idx, meth = _idx(res), res.params.methods
    fixed_K = [s for s in res.params.scenarios if s not in ("drift", "novelty")]
    kcols = [m for m in ("federated", "kfed_auto", "fedkmeans_auto") if m in meth]
    rows = []
    for s in fixed_K:
        true_K = res.magnetization[s].shape[3]
        cells = [f"{float((res.k_used[s][:, idx[m]] == true_K).mean()):.2f} "
                 f"({res.k_used[s][:, idx[m], -1].mean():.1f}, "
                 f"{res.spurious[s][:, idx[m], -1].mean():.1f})" for m in kcols]
        rows.append((f"{s} (K = {true_K})", *cells))
    return TitledTable("Fraction of rounds with k = K (in parentheses: the final k and the final "
                       "spurious patterns)", rows, ("scenario", *kcols))


def streaming_table(res: BaselinesResult) -> Any:
    """Drift and novelty: the final magnetization of the first drift archetype, final and
    time-averaged mean magnetization, for the federation, the oracle and the clustering peers."""
    res = _check_result(res)
    idx, s = _idx(res), res.summary
    ms = [m for m in ("federated", "oracle", "kfed", "kfed_auto", "fedkmeans", "fedkmeans_auto")
          if m in res.params.methods]
    rows = [(m, f"{res.magnetization['drift'][:, idx[m], -1, 0].mean():.2f}",
             f"{s['drift'][m]['final_mean_magnetization']:.2f}", f"{s['drift'][m]['time_avg_magnetization']:.2f}",
             f"{s['novelty'][m]['final_mean_magnetization']:.2f}", f"{s['novelty'][m]['time_avg_magnetization']:.2f}")
            for m in ms]
    return TitledTable("Streaming, mean over seeds: drift (final m of archetype 1, final m̄, "
                       "time-averaged m̄) and novelty (final m̄, time-averaged m̄)", rows,
                       ("method", "drift m1", "drift m̄", "drift avg", "novelty m̄", "novelty avg"))


def attacker_table(res: BaselinesResult) -> Any:
    """A noise client and a poisoner: final m̄ and worst archetype, fraction of rounds with an
    archetype lost (m < 0.5), spurious patterns (mean over rounds)."""
    res = _check_result(res)
    idx = _idx(res)
    ms = [m for m in ("federated", "oracle", *CLUSTERING_METHODS) if m in res.params.methods]
    rows = []
    for s_ in ("noise", "poison"):
        for m in ms:
            v = res.summary[s_][m]
            bad = float((res.magnetization[s_][:, idx[m]].min(axis=2) < 0.5).mean())
            rows.append((f"{s_}: {m}", f"{v['final_mean_magnetization']:.2f}", f"{v['final_min_archetype_mean']:.2f}",
                         f"{bad:.2f}", f"{float(res.spurious[s_][:, idx[m]].mean()):.2f}"))
    return TitledTable("A noise client and a poisoner (mean over seeds)", rows,
                       ("scenario: method", "final m̄", "final worst", "rounds with an archetype lost",
                        "spurious (mean over rounds)"))


def leak_table(res: BaselinesResult) -> Any:
    """Fraction of the first honest client's round-0 examples revealed by its round-0 upload:
    exactly (within ``leak_bits`` of the bits, in brackets), per method and scenario."""
    res = _check_result(res)
    idx, sc = _idx(res), res.params.scenarios
    rows = [(m, *[f"{res.leak[s][:, idx[m], 0].mean():.2f} ({res.leak[s][:, idx[m], 1].mean():.2f})" for s in sc])
            for m in res.params.methods]
    return TitledTable("Examples revealed by one round-0 upload (within 1 % of the bits)", rows, ("method", *sc))


def leakage_curve_table(res: BaselinesResult) -> Any:
    """The leakage curve (:func:`leakage_curve`): fraction of one client's examples revealed
    against its batch size M, per upload and attack (mean over seeds)."""
    res = _check_result(res)
    p, lk = res.params, res.leakage
    Ms = np.asarray(lk["Ms"])
    labels = {"hebbian": "Hebbian upload, privacy attack", "hebbian_range": "Hebbian upload, plain range attack",
              "centroids_K": f"centroids, k′ = K = {p.K}", "centroids_kmax": f"centroids, k′ = k_max = {p.k_max}"}
    rows = [(lab, *[f"{x:.2f}" for x in np.asarray(lk[k]).mean(axis=0)]) for k, lab in labels.items()]
    return TitledTable(f"Fraction of examples revealed against the batch size (N = {p.N}, K = {p.K}, r = {p.r})",
                       rows, ("upload", *[f"M = {int(m)}" for m in Ms]))


def wall_time_table(res: BaselinesResult) -> Any:
    """Seconds per run (all rounds of one scenario and seed, mean over seeds): not reproducible,
    printed only."""
    res = _check_result(res)
    idx, sc = _idx(res), res.params.scenarios
    rows = [(m, *[f"{res.wall_time[s][:, idx[m]].mean():.2f} s" for s in sc]) for m in res.params.methods]
    return TitledTable("Wall time per run", rows, ("method", *sc))
