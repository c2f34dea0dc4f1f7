r"""Peer baselines from federated clustering: k-FED and federated k-means on ±1 examples.

The federated-clustering literature answers "what should a client send?" with centroids: K·N
numbers instead of an N×N operator. Two methods, written from their papers:

* **k-FED** (one-shot federated clustering, {cite:p}`dennis2021kfed`): every client runs k-means
  with k′ clusters on its own examples and sends its centroids once; the server clusters the
  received centroids. :func:`kfed`, :func:`kfed_fit`.
* **Federated k-means** (Lloyd's method {cite:p}`lloyd1982` with the sufficient statistics summed
  over clients): the server broadcasts k global centroids, every client assigns its examples to
  the nearest one and sends per-cluster sums and counts, the server divides.
  :func:`federated_kmeans`, :func:`federated_kmeans_fit`.

Both return ±1 patterns: the sign of each final centroid (a zero coordinate gets +1), so the
book's metrics (:func:`fedlam.metrics.magnetization`, :func:`fedlam.metrics.spurious_count`)
apply unchanged. Local and server clustering use scikit-learn's ``KMeans``
{cite:p}`pedregosa2011sklearn` (greedy k-means++ seeding {cite:p}`arthur2007kmeanspp`) with
``random_state`` drawn from the caller's generator.

Unknown K: :func:`select_k` picks K on the pooled centroids by the silhouette criterion
{cite:p}`rousseeuw1987silhouette`, so the clustering baselines get no more information than the
Hebbian server, which estimates K̂ from its spectrum. :func:`upload_bytes` gives what one client
sends per round; :func:`leaked_fraction` measures how many of a client's examples an upload
reveals (a centroid of a one-example cluster *is* that example).

Choices (stated, not hidden; the comparison is in {ref}`sec-exp-baselines-clustering`):

* k-FED's local step: the paper analyses an Awasthi–Sheffet local solver (projection on the top
  k′ singular directions, a constant-factor seeding, Lloyd steps); we use scikit-learn's k-means++
  with ``n_init`` restarts and Lloyd to convergence, the solver a practitioner would use.
* k-FED's k′: the paper's k′ is the number of clusters a device holds (at most k′ per device;
  its analysis gains from heterogeneity when k′ ≤ √k). A client that does not know its support
  can only use the bound k′ = k, our default. A client with fewer distinct examples than k′ sends
  one centroid per distinct example (a client with no examples sends nothing).
* k-FED's server step: the paper seeds the server's k centres with the centroids of one device
  chosen at random and completes them by farthest-point (max–min distance) traversal over all
  received centroids, then takes a Lloyd step on the centroids, unweighted (the server does not
  know the cluster sizes, so clients send centroids only). We keep that seeding and run Lloyd on
  the centroids to convergence (each step can only lower the k-means cost of the centroids). If
  the start device sent more than k centroids (k′ > k, outside the paper's setting), we keep only
  its first centroid and let the traversal pick the rest.
* Federated k-means initialisation: "client first" — round 0 is a k-FED-style upload (k′ local
  centroids *and* their counts); the server seeds k global centroids by count-weighted k-means++
  on them. Later rounds are exact Lloyd steps on the union of the clients' examples. A global
  cluster that receives no example keeps its previous centroid.

Derived in {ref}`sec-exp-baselines-clustering`.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._validation import _describe, as_rng, check_choice, check_nonneg_int, check_pm1, check_positive_int

__all__ = [
    "kfed",
    "kfed_fit",
    "federated_kmeans",
    "federated_kmeans_fit",
    "local_centroids",
    "kfed_server",
    "extend_centroids",
    "grow_centroids",
    "select_k",
    "sign_patterns",
    "upload_bytes",
    "leaked_fraction",
    "LocalCentroids",
    "KFedResult",
    "FedKMeansResult",
    "KSelection",
    "UPLOAD_METHODS",
]

#: Methods known to :func:`upload_bytes`.
UPLOAD_METHODS = ("hebbian", "kfed", "fedkmeans_init", "fedkmeans_round", "raw")

_SEED_HIGH = 2**31 - 1  # scikit-learn's random_state must fit in 32 bits


# ----------------------------------------------------------------------------------------
# validation and small helpers
# ----------------------------------------------------------------------------------------
def _check_clients(client_examples: Any, name: str = "client_examples") -> tuple[list[np.ndarray], int]:
    """A non-empty list of (M_c, N) ±1 arrays with one N; M_c = 0 allowed. Returns (arrays, N)."""
    if isinstance(client_examples, np.ndarray) or not isinstance(client_examples, Sequence) \
            or isinstance(client_examples, (str, bytes)):
        raise TypeError(f"{name} must be a list of (M_c, N) arrays of +-1, one per client, "
                        f"got {_describe(client_examples)}")
    if len(client_examples) == 0:
        raise ValueError(f"{name} must hold at least one client, got an empty list")
    out: list[np.ndarray] = []
    N = None
    for c, X in enumerate(client_examples):
        check_pm1(X, f"{name}[{c}]", ndim=2, allow_empty=True)
        if N is None:
            N = X.shape[1]
        elif X.shape[1] != N:
            raise ValueError(f"{name}[{c}] must have N = {N} columns like {name}[0], got shape {X.shape}")
        out.append(X)
    assert N is not None
    if N < 1:
        raise ValueError(f"{name} arrays must have N >= 1 columns, got N = {N}")
    return out, N


def _check_k(k: Any, available: int, what: str) -> int:
    k = check_positive_int(k, "k")
    if k > available:
        raise ValueError(f"k must be <= the number of {what} ({available}), got k = {k}")
    return k


def _check_k_local(k_local: Any, L: int, default: int) -> list[int]:
    """None -> [default] * L; an int >= 1 -> [k_local] * L; a sequence of L ints >= 1."""
    if k_local is None:
        return [default] * L
    if isinstance(k_local, numbers.Integral) and not isinstance(k_local, (bool, np.bool_)):
        return [check_positive_int(k_local, "k_local")] * L
    if isinstance(k_local, (str, bytes)) or not isinstance(k_local, Sequence):
        raise TypeError(f"k_local must be None, an int >= 1 or a list of {L} ints, got {_describe(k_local)}")
    if len(k_local) != L:
        raise ValueError(f"k_local must have one entry per client (L = {L}), got {len(k_local)}")
    return [check_positive_int(v, f"k_local[{c}]") for c, v in enumerate(k_local)]


def _draw_seed(gen: np.random.Generator) -> int:
    return int(gen.integers(0, _SEED_HIGH))


_THREADPOOLS: list = []


def _one_thread() -> Any:
    """Context limiting OpenMP/BLAS to one thread around scikit-learn calls: these problems
    are small, and on a shared machine its default thread pool is ~10x slower. (The pool
    inspection is done once and cached: it costs ~10 ms per call otherwise.)"""
    if not _THREADPOOLS:
        from threadpoolctl import ThreadpoolController

        _THREADPOOLS.append(ThreadpoolController())
    return _THREADPOOLS[0].limit(limits=1)


def sign_patterns(centroids: np.ndarray) -> np.ndarray:
    """±1 patterns of real centroids: ``sgn`` entrywise, a zero coordinate gives +1.

    Parameters
    ----------
    centroids : numpy.ndarray
        (k, N) finite real array (k = 0 allowed).

    Returns
    -------
    numpy.ndarray
        int8 (k, N).
    """
    if not isinstance(centroids, np.ndarray) or centroids.ndim != 2:
        raise TypeError(f"centroids must be a 2-D numpy array, got {_describe(centroids)}")
    if not np.issubdtype(centroids.dtype, np.number) or centroids.dtype == bool:
        raise TypeError(f"centroids must be numeric, got dtype {centroids.dtype}")
    if not np.all(np.isfinite(centroids)):
        raise ValueError("centroids must be finite")
    return np.where(centroids >= 0, 1, -1).astype(np.int8)


#: Size of the seeded perturbation added to the data scikit-learn sees (never to the results).
_JITTER = 1e-7


def _jittered(A: np.ndarray, seed: int) -> np.ndarray:
    """``A`` (float64) plus a seeded uniform perturbation of size ``_JITTER``.

    ±1 data and means of few of them produce exact ties (equal distances to two centres,
    equal inertia of two partitions). Decided by floating-point rounding, such a tie goes
    one way or the other with the BLAS kernel; the perturbation decides it instead, the same
    way on every machine (its effects, ~1e-7, dwarf rounding, ~1e-13). Only the cluster
    labels are taken from scikit-learn; centroids are recomputed from the unperturbed data.
    """
    gen = np.random.default_rng([seed, 7])
    return A.astype(np.float64) + _JITTER * gen.uniform(-1.0, 1.0, size=A.shape)


def _sums_counts(X: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums (k, N) float64 and counts (k,) int64 of ±1 rows; exact (integer sums)."""
    M = X.shape[0]
    Z = np.zeros((k, M))
    Z[labels, np.arange(M)] = 1.0
    return Z @ X.astype(np.float64), np.bincount(labels, minlength=k).astype(np.int64)


# ----------------------------------------------------------------------------------------
# the client step shared by k-FED, the federated k-means initialisation and select_k
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LocalCentroids:
    """What the clients of a one-shot upload send: their local k-means centroids.

    Attributes
    ----------
    centroids : list of numpy.ndarray
        Per client, float32 (k_c, N): the means of its k_c local clusters, as sent on the wire.
        k_c = 0 for a client without examples.
    counts : list of numpy.ndarray
        Per client, int64 (k_c,): cluster sizes (sent only by the federated k-means
        initialisation; k-FED's server does not use them).
    k_local : tuple of int
        The k_c actually used: ``min(k_local, distinct examples)``.
    N : int
    """

    centroids: list
    counts: list
    k_local: tuple
    N: int

    @property
    def pooled(self) -> np.ndarray:
        """All received centroids stacked, float64 (sum_c k_c, N)."""
        if not self.centroids:
            return np.empty((0, self.N))
        return np.concatenate([C.astype(np.float64) for C in self.centroids], axis=0)

    @property
    def pooled_counts(self) -> np.ndarray:
        """Counts matching :attr:`pooled`, int64."""
        if not self.counts:
            return np.empty(0, dtype=np.int64)
        return np.concatenate(self.counts).astype(np.int64)

    @property
    def owners(self) -> np.ndarray:
        """Client index of each row of :attr:`pooled`."""
        return np.concatenate([np.full(C.shape[0], c, dtype=np.int64) for c, C in enumerate(self.centroids)])

    def __repr__(self) -> str:
        return (f"LocalCentroids(clients={len(self.centroids)}, N={self.N}, k_local={self.k_local}, "
                f"total={int(sum(self.k_local))})")


def _kmeans_client(X: np.ndarray, k: int, seed: int, n_init: int) -> tuple[np.ndarray, np.ndarray]:
    """Local k-means of one client: exact means (k_c, N) float64 and counts, k_c <= k."""
    from sklearn.cluster import KMeans

    uniq, first, mult = np.unique(X, axis=0, return_index=True, return_counts=True)
    if uniq.shape[0] <= k:
        # as many clusters as distinct examples: every centroid is an example (first-seen order)
        order = np.argsort(first, kind="stable")
        return uniq[order].astype(np.float64), mult[order].astype(np.int64)
    with _one_thread():
        km = KMeans(n_clusters=k, init="k-means++", n_init=n_init, random_state=seed)
        labels = km.fit(_jittered(X, seed)).labels_.astype(np.int64)
    sums, counts = _sums_counts(X, labels, k)
    # canonical order (by each cluster's first example), independent of the label permutation
    first_member = np.full(k, X.shape[0])
    np.minimum.at(first_member, labels, np.arange(X.shape[0]))
    keep = [int(j) for j in np.argsort(first_member, kind="stable") if counts[j] > 0]
    return sums[keep] / counts[keep, None], counts[keep]


def local_centroids(client_examples: Sequence[np.ndarray], k_local: int | Sequence[int],
                    rng: np.random.Generator | int, *, n_init: int = 10) -> LocalCentroids:
    """The client step of k-FED: k-means with k′ clusters on each client's own examples.

    Derived in {ref}`sec-exp-baselines-clustering`.

    Parameters
    ----------
    client_examples : list of numpy.ndarray
        One (M_c, N) ±1 array per client (M_c = 0 allowed).
    k_local : int or list of int
        k′ (>= 1) for every client, or one value per client. A client with fewer distinct
        examples than k′ sends each distinct example (with its multiplicity as count).
    rng : numpy.random.Generator or int
        One ``random_state`` per client is drawn from it, in client order (also for empty
        clients, so a client's seed does not depend on the others' sizes).
    n_init : int
        k-means++ restarts per client (scikit-learn keeps the lowest inertia).

    Returns
    -------
    LocalCentroids
    """
    clients, N = _check_clients(client_examples)
    ks = _check_k_local(k_local, len(clients), default=1)
    n_init = check_positive_int(n_init, "n_init")
    gen = as_rng(rng)
    cents, counts, used = [], [], []
    for X, k_c in zip(clients, ks, strict=True):
        seed = _draw_seed(gen)
        if X.shape[0] == 0:
            cents.append(np.empty((0, N), dtype=np.float32))
            counts.append(np.empty(0, dtype=np.int64))
            used.append(0)
            continue
        C, n = _kmeans_client(X, k_c, seed, n_init)
        cents.append(C.astype(np.float32))  # what crosses the wire
        counts.append(n)
        used.append(int(C.shape[0]))
    return LocalCentroids(centroids=cents, counts=counts, k_local=tuple(used), N=N)


# ----------------------------------------------------------------------------------------
# k-FED
# ----------------------------------------------------------------------------------------
def _farthest_point_seeds(C: np.ndarray, owners: np.ndarray, k: int,
                          gen: np.random.Generator) -> tuple[np.ndarray, int]:
    """k-FED's server seeding: one random device's centroids, completed by max-min traversal.

    If that device sent more than k centroids, only its first one is kept (the paper has
    k' <= k; the max-min traversal over all centroids then picks the rest).

    Returns (k distinct row indices into C, the start device). Ties (equal distances) go to
    the lowest index.
    """
    devices = np.unique(owners)
    z0 = int(devices[int(gen.integers(0, devices.size))])
    start = np.flatnonzero(owners == z0)
    def d2_to(idx: int) -> np.ndarray:
        # elementwise differences and numpy's own sum (no BLAS): the same bits on every kernel
        return ((C - C[idx]) ** 2).sum(axis=1)

    chosen: list[int] = [int(start[0])]
    dmin = d2_to(chosen[0])
    # the start device's own centroids first; if it sent more than k (k' > k, outside the
    # paper's setting) only its first one is kept and the traversal runs over all centroids
    if start.size <= k:
        for j in start[1:]:
            chosen.append(int(j))
            dmin = np.minimum(dmin, d2_to(int(j)))
    while len(chosen) < k:
        cand = dmin.copy()
        cand[chosen] = -1.0
        j = int(np.argmax(cand))  # first index among equal maxima
        chosen.append(j)
        dmin = np.minimum(dmin, d2_to(j))
    return np.asarray(chosen, dtype=np.int64), z0


def _kfed_server(upload: LocalCentroids, k: int, gen: np.random.Generator) -> tuple[np.ndarray, int]:
    from sklearn.cluster import KMeans

    C = upload.pooled
    if k > C.shape[0]:
        raise ValueError(
            f"k must be <= the number of centroids the clients sent ({C.shape[0]}; k_local per client "
            f"{upload.k_local}), got k = {k}: raise k_local or lower k")
    seeds, z0 = _farthest_point_seeds(C, upload.owners, k, gen)
    seed = _draw_seed(gen)
    with warnings.catch_warnings(), _one_thread():
        # duplicate centroids (identical clients) may leave fewer distinct points than k
        warnings.filterwarnings("ignore", message="Number of distinct clusters")
        Cj = _jittered(C, seed)
        km = KMeans(n_clusters=k, init=Cj[seeds], n_init=1, random_state=seed).fit(Cj)
    labels = km.labels_.astype(np.int64)
    counts = np.bincount(labels, minlength=k)
    Z = np.zeros((k, C.shape[0]))
    Z[labels, np.arange(C.shape[0])] = 1.0
    centres = Z @ C
    nz = counts > 0
    centres[nz] /= counts[nz, None]
    centres[~nz] = C[seeds[~nz]]  # an empty cluster keeps its seed
    return centres, z0


def extend_centroids(centroids: np.ndarray, candidates: np.ndarray, n_new: int) -> np.ndarray:
    """Add ``n_new`` rows of ``candidates`` to ``centroids`` by farthest-point traversal.

    Each step adds the candidate whose squared distance to the nearest current centroid is
    largest (ties to the lowest index), the completion rule of k-FED's server seeding. Used
    by a stream to grow k without forgetting: old centroids stay, new ones come from the
    round's upload. Derived in {ref}`sec-exp-baselines-clustering`.

    Returns
    -------
    numpy.ndarray
        float64 (k + n_new, N).
    """
    for nm, a in (("centroids", centroids), ("candidates", candidates)):
        if not isinstance(a, np.ndarray) or a.ndim != 2 or not np.issubdtype(a.dtype, np.number) or a.dtype == bool:
            raise TypeError(f"{nm} must be a 2-D numeric numpy array, got {_describe(a)}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{nm} must be finite")
    if centroids.shape[1] != candidates.shape[1]:
        raise ValueError(f"centroids and candidates must have the same N, got {centroids.shape} and {candidates.shape}")
    n_new = check_nonneg_int(n_new, "n_new")
    if n_new > candidates.shape[0]:
        raise ValueError(f"n_new must be <= the number of candidates ({candidates.shape[0]}), got {n_new}")
    cur = centroids.astype(np.float64)
    cand = candidates.astype(np.float64)
    idx = _farthest_indices(cur, cand, n_new)
    return np.concatenate([cur, cand[idx]], axis=0)


def _farthest_indices(cur: np.ndarray, cand: np.ndarray, n_new: int) -> list[int]:
    """Indices of ``n_new`` candidates picked by max-min distance to ``cur`` (ties: lowest index)."""
    if n_new == 0:
        return []
    if cur.shape[0]:
        dmin = np.min([((cand - c) ** 2).sum(axis=1) for c in cur], axis=0)
    else:
        dmin = np.full(cand.shape[0], np.inf)
    taken = np.zeros(cand.shape[0], dtype=bool)
    out: list[int] = []
    for _ in range(n_new):
        j = int(np.argmax(np.where(taken, -1.0, dmin)))
        taken[j] = True
        out.append(j)
        dmin = np.minimum(dmin, ((cand - cand[j]) ** 2).sum(axis=1))
    return out


def kfed_server(upload: LocalCentroids, k: int, rng: np.random.Generator | int) -> np.ndarray:
    """k-FED's server step: cluster the received centroids into k centres.

    Seeding as in the paper (the centroids of one client chosen uniformly at random among those
    that sent any, completed by farthest-point traversal over all received centroids), then
    Lloyd's iterations on the centroids, unweighted (scikit-learn ``KMeans`` with that explicit
    ``init``, ``n_init=1``). The returned centres are recomputed from the final assignment as
    exact means of the received float32 centroids, so their signs do not depend on summation
    order. Derived in {ref}`sec-exp-baselines-clustering`.

    Parameters
    ----------
    upload : LocalCentroids
    k : int
        1 <= k <= number of received centroids.
    rng : numpy.random.Generator or int
        Draws the start client and the ``random_state``.

    Returns
    -------
    numpy.ndarray
        float64 (k, N) centres.
    """
    if not isinstance(upload, LocalCentroids):
        raise TypeError(f"upload must be a LocalCentroids, got {_describe(upload)}")
    k = check_positive_int(k, "k")
    return _kfed_server(upload, k, as_rng(rng))[0]


@dataclass(frozen=True)
class KFedResult:
    """Result of :func:`kfed_fit`.

    Attributes
    ----------
    patterns : numpy.ndarray
        int8 (k, N) ±1 patterns (signs of :attr:`centres`).
    centres : numpy.ndarray
        float64 (k, N) server centres.
    upload : LocalCentroids
        What the clients sent.
    start_client : int
        The client whose centroids seeded the server.
    """

    patterns: np.ndarray
    centres: np.ndarray
    upload: LocalCentroids
    start_client: int = -1

    def __repr__(self) -> str:
        return f"KFedResult(k={self.patterns.shape[0]}, N={self.patterns.shape[1]}, upload={self.upload!r})"


def kfed_fit(client_examples: Sequence[np.ndarray], k: int, rng: np.random.Generator | int,
             k_local: int | Sequence[int] | None = None, *, n_init: int = 10) -> KFedResult:
    """k-FED with everything it sends and computes (see :func:`kfed`)."""
    clients, _ = _check_clients(client_examples)
    total = int(sum(X.shape[0] for X in clients))
    k = _check_k(k, total, "examples available over all clients")
    ks = _check_k_local(k_local, len(clients), default=k)
    gen = as_rng(rng)
    up = local_centroids(clients, ks, gen, n_init=n_init)
    if sum(up.k_local) < k:
        raise ValueError(
            f"k_local is too small: the clients send {sum(up.k_local)} centroids in total "
            f"(k_local per client {up.k_local}) but k = {k} centres are asked for")
    centres, z0 = _kfed_server(up, k, gen)
    return KFedResult(patterns=sign_patterns(centres), centres=centres, upload=up, start_client=z0)


def kfed(client_examples: Sequence[np.ndarray], k: int, rng: np.random.Generator | int,
         k_local: int | Sequence[int] | None = None) -> np.ndarray:
    """k-FED, one-shot federated clustering {cite:p}`dennis2021kfed`, on ±1 examples.

    Every client runs k-means with k′ = ``k_local`` clusters on its own examples and sends its
    centroids once; the server seeds k centres with one random client's centroids plus
    farthest-point traversal and runs Lloyd on the centroids; the result is signed.
    Derived in {ref}`sec-exp-baselines-clustering`.

    Parameters
    ----------
    client_examples : list of numpy.ndarray
        One (M_c, N) ±1 array per client (int8 or any integer/float dtype holding ±1);
        clients with M_c = 0 are allowed (they send nothing).
    k : int
        Number of patterns returned, 1 <= k <= total number of examples.
    rng : numpy.random.Generator or int
        Seed of every random choice (local ``random_state`` per client, the server's start
        device and ``random_state``).
    k_local : int or list of int, optional
        k′ per client; default ``k`` (the only bound valid for a client that does not know
        which clusters it holds). A client with fewer distinct examples sends those.

    Returns
    -------
    numpy.ndarray
        int8 (k, N) ±1 patterns.

    Raises
    ------
    TypeError, ValueError
        Naming the argument: non-±1 or non-2-D input, mismatched N, an empty list, k < 1,
        k above the number of examples or of received centroids.

    Examples
    --------
    >>> from fedlam import data
    >>> xi = data.random_archetypes(2, 64, 0)
    >>> ex = [data.sample_examples(xi, 40, 0.9, np.array([0.5, 0.5]), s)[0] for s in (1, 2)]
    >>> kfed(ex, 2, rng=0).shape
    (2, 64)
    """
    return kfed_fit(client_examples, k, rng, k_local).patterns


# ----------------------------------------------------------------------------------------
# federated k-means
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FedKMeansResult:
    """Result of :func:`federated_kmeans_fit`.

    Every centroid is kept exactly as ``sums / sizes`` (integer sums of ±1 examples over an
    integer count), so assignments and signs never hinge on floating-point rounding.

    Attributes
    ----------
    patterns : numpy.ndarray
        int8 (k, N) signs of the centroids (a zero sum gives +1).
    sums : numpy.ndarray
        int64 (k, N) sum of the examples behind each centroid.
    sizes : numpy.ndarray
        int64 (k,) number of those examples (> 0).
    counts : numpy.ndarray
        int64 (k,) examples assigned to each global cluster in the last round (0: the centroid
        kept its previous value).
    rounds_run : int
        Lloyd rounds performed (stops early when the centroids no longer change).
    init_upload : LocalCentroids or None
        The initialisation upload (None for a warm start).
    first_round_means : list of numpy.ndarray
        Per client, float64 (k_c', N): sum/count of every non-empty cluster of its first Lloyd
        round upload -- what that upload reveals about its examples.
    """

    patterns: np.ndarray
    sums: np.ndarray
    sizes: np.ndarray
    counts: np.ndarray
    rounds_run: int
    init_upload: LocalCentroids | None
    first_round_means: list = field(default_factory=list)

    @property
    def centroids(self) -> np.ndarray:
        """float64 (k, N) centroids ``sums / sizes``."""
        return self.sums / self.sizes[:, None]

    def __repr__(self) -> str:
        return (f"FedKMeansResult(k={self.patterns.shape[0]}, N={self.patterns.shape[1]}, "
                f"rounds_run={self.rounds_run}, warm_start={self.init_upload is None})")


def _upload_sums(up: LocalCentroids) -> tuple[np.ndarray, np.ndarray]:
    """Integer sums and counts behind the pooled float32 centroids (exact: |sum| <= count < 2**24)."""
    C, n = up.pooled, up.pooled_counts
    return np.rint(C * n[:, None]).astype(np.int64), n.astype(np.int64)


def _init_from_upload(up: LocalCentroids, k: int, gen: np.random.Generator,
                      n_init: int) -> tuple[np.ndarray, np.ndarray]:
    """Server seeding of federated k-means: count-weighted k-means++ (scikit-learn) on the
    received local centroids; each seed is then the exact pooled mean of its group."""
    from sklearn.cluster import KMeans

    C = up.pooled
    if k > C.shape[0]:
        raise ValueError(
            f"k must be <= the number of centroids the clients sent ({C.shape[0]}; k_local per client "
            f"{up.k_local}), got k = {k}")
    S_i, n_i = _upload_sums(up)
    seed = _draw_seed(gen)
    with warnings.catch_warnings(), _one_thread():
        warnings.filterwarnings("ignore", message="Number of distinct clusters")
        km = KMeans(n_clusters=k, init="k-means++", n_init=n_init, random_state=seed)
        labels = km.fit(_jittered(C, seed), sample_weight=n_i.astype(np.float64)).labels_.astype(np.int64)
    S = np.zeros((k, C.shape[1]), dtype=np.int64)
    np.add.at(S, labels, S_i)
    n = np.bincount(labels, weights=n_i, minlength=k).astype(np.int64)
    empty = np.flatnonzero(n == 0)
    if empty.size:  # duplicate centroids left a group empty: give it the farthest unused centroid
        full = np.flatnonzero(n > 0)
        pick = _farthest_indices(S[full] / n[full, None], C, empty.size)
        S[empty], n[empty] = S_i[pick], n_i[pick]
    return S, n


def _assign_exact(X: np.ndarray, S: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Nearest centroid ``S_j / n_j`` of every ±1 row of X, in exact integer arithmetic.

    For x in {-1, +1}^N, ``||x - S/n||^2 = N + A_j / n_j^2`` with ``A_j = ||S_j||^2 - 2 n_j x.S_j``;
    candidates are compared as ``A_a n_b^2 < A_b n_a^2``; ties go to the lowest index.
    """
    M, N = X.shape
    k = S.shape[0]
    big = 3 * N * int(n.max()) ** 4 >= 2**62
    Xi, Si, ni = X.astype(np.int64), S.astype(np.int64), n.astype(np.int64)
    if big:  # Python integers: slow, exact, never needed at the book's sizes
        Xi, Si, ni = Xi.astype(object), Si.astype(object), ni.astype(object)
    A = (Si * Si).sum(axis=1)[None, :] - 2 * ni[None, :] * (Xi @ Si.T)
    rows = np.arange(M)
    best = np.zeros(M, dtype=np.int64)
    for j in range(1, k):
        better = A[:, j] * ni[best] ** 2 < A[rows, best] * ni[j] ** 2
        best = np.where(better, j, best)
    return best


def grow_centroids(init: tuple[np.ndarray, np.ndarray], upload: LocalCentroids,
                   n_new: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact centroids ``(sums, sizes)`` plus ``n_new`` of an upload's centroids.

    The new ones are picked by farthest-point traversal from the current centroids
    (:func:`extend_centroids`) and enter with the integer sums and counts behind them. A stream
    uses it to grow k without forgetting. Derived in {ref}`sec-exp-baselines-clustering`.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        int64 (k + n_new, N) sums and (k + n_new,) sizes.
    """
    if not isinstance(upload, LocalCentroids):
        raise TypeError(f"upload must be a LocalCentroids, got {_describe(upload)}")
    S, n = init
    S_i, n_i = _upload_sums(upload)
    n_new = check_nonneg_int(n_new, "n_new")
    if n_new > S_i.shape[0]:
        raise ValueError(f"n_new must be <= the number of uploaded centroids ({S_i.shape[0]}), got {n_new}")
    pick = _farthest_indices(S / n[:, None], upload.pooled, n_new)
    return (np.concatenate([S.astype(np.int64), S_i[pick]]), np.concatenate([n.astype(np.int64), n_i[pick]]))


def federated_kmeans_fit(client_examples: Sequence[np.ndarray], k: int, rng: np.random.Generator | int,
                         rounds: int = 10, *, init: tuple[np.ndarray, np.ndarray] | None = None,
                         k_local: int | Sequence[int] | None = None,
                         upload: LocalCentroids | None = None,
                         n_init: int = 10) -> FedKMeansResult:
    """Federated k-means with everything it sends and computes (see :func:`federated_kmeans`).

    Other Parameters
    ----------------
    init : tuple of numpy.ndarray, optional
        ``(sums, sizes)``: integer (k, N) sums and (k,) positive counts of the centroids to start
        from (a warm start, e.g. the previous round's :attr:`FedKMeansResult.sums` and
        ``sizes``): no initialisation upload.
    k_local : int or list of int, optional
        k′ of the initialisation upload (default k).
    upload : LocalCentroids, optional
        An initialisation upload already made by these clients (e.g. the one :func:`select_k`
        scored); used instead of a new one. Exclusive with ``init``.
    n_init : int
        Restarts of the local and server k-means++ of the initialisation.
    """
    clients, N = _check_clients(client_examples)
    total = int(sum(X.shape[0] for X in clients))
    k = _check_k(k, total, "examples available over all clients")
    rounds = check_positive_int(rounds, "rounds")
    n_init = check_positive_int(n_init, "n_init")
    gen = as_rng(rng)
    up = None
    if init is not None and upload is not None:
        raise ValueError("init and upload are exclusive: give a warm start or an initialisation upload, not both")
    if upload is not None:
        if not isinstance(upload, LocalCentroids) or upload.N != N or len(upload.centroids) != len(clients):
            raise TypeError(f"upload must be the LocalCentroids of these {len(clients)} clients (N = {N}), "
                            f"got {_describe(upload)}")
        up = upload
        S, n = _init_from_upload(up, k, gen, n_init)
    elif init is None:
        ks = _check_k_local(k_local, len(clients), default=k)
        up = local_centroids(clients, ks, gen, n_init=n_init)
        if sum(up.k_local) < k:
            raise ValueError(
                f"k_local is too small: the clients send {sum(up.k_local)} centroids in total "
                f"(k_local per client {up.k_local}) but k = {k} centroids are asked for")
        S, n = _init_from_upload(up, k, gen, n_init)
    else:
        ok = isinstance(init, tuple) and len(init) == 2 and all(isinstance(a, np.ndarray) for a in init)
        if ok:
            S0, n0 = init
            ok = (S0.shape == (k, N) and n0.shape == (k,) and np.issubdtype(S0.dtype, np.integer)
                  and np.issubdtype(n0.dtype, np.integer) and bool(np.all(n0 > 0)))
        if not ok:
            raise ValueError(f"init must be (sums, sizes): integer arrays of shapes ({k}, {N}) and ({k},) "
                             f"with sizes > 0, got {_describe(init)}")
        S, n = init[0].astype(np.int64).copy(), init[1].astype(np.int64).copy()
    first: list[np.ndarray] = []
    counts = np.zeros(k, dtype=np.int64)
    run = 0
    for it in range(rounds):
        S_tot = np.zeros((k, N), dtype=np.int64)
        counts = np.zeros(k, dtype=np.int64)
        for X in clients:
            if X.shape[0] == 0:
                if it == 0:
                    first.append(np.empty((0, N)))
                continue
            lab = _assign_exact(X, S, n)
            s_c, n_c = _sums_counts(X, lab, k)  # sent as float32 sums (exact integers) and counts
            s_c = np.rint(s_c.astype(np.float32).astype(np.float64)).astype(np.int64)
            if it == 0:
                nz = n_c > 0
                first.append(s_c[nz] / n_c[nz, None])
            S_tot += s_c
            counts += n_c
        nz = counts > 0
        S_new, n_new = S.copy(), n.copy()
        S_new[nz], n_new[nz] = S_tot[nz], counts[nz]
        run = it + 1
        # same centroid iff S_new/n_new == S/n exactly
        if np.array_equal(S_new * n[:, None], S * n_new[:, None]):
            S, n = S_new, n_new
            break
        S, n = S_new, n_new
    return FedKMeansResult(patterns=sign_patterns(S.astype(np.float64)), sums=S, sizes=n, counts=counts,
                           rounds_run=run, init_upload=up, first_round_means=first)


def federated_kmeans(client_examples: Sequence[np.ndarray], k: int, rng: np.random.Generator | int,
                     rounds: int = 10) -> np.ndarray:
    """Federated k-means (Lloyd's method with summed cluster statistics) on ±1 examples.

    Round 0 (initialisation, "client first"): every client sends the centroids and sizes of a
    local k-means with k clusters; the server seeds k global centroids by count-weighted
    k-means++ on them. Then ``rounds`` Lloyd rounds: the server broadcasts the centroids, every
    client assigns each example to the nearest one (ties to the lowest index) and sends the
    per-cluster sums (float32) and counts; the server divides (an empty cluster keeps its
    centroid). Stops early when the centroids no longer change. Derived in
    {ref}`sec-exp-baselines-clustering`.

    Parameters
    ----------
    client_examples : list of numpy.ndarray
        One (M_c, N) ±1 array per client (M_c = 0 allowed).
    k : int
        Number of patterns, 1 <= k <= total examples.
    rng : numpy.random.Generator or int
    rounds : int
        Maximum number of Lloyd rounds (>= 1).

    Returns
    -------
    numpy.ndarray
        int8 (k, N) ±1 patterns (signs of the final centroids, zero -> +1).

    Examples
    --------
    >>> from fedlam import data
    >>> xi = data.random_archetypes(2, 64, 0)
    >>> ex = [data.sample_examples(xi, 40, 0.9, np.array([0.5, 0.5]), s)[0] for s in (1, 2)]
    >>> federated_kmeans(ex, 2, rng=0).shape
    (2, 64)
    """
    return federated_kmeans_fit(client_examples, k, rng, rounds).patterns


# ----------------------------------------------------------------------------------------
# K selection
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KSelection:
    """Result of :func:`select_k`.

    Attributes
    ----------
    k : int
        The k with the largest silhouette (ties -> the smaller k).
    ks : numpy.ndarray
        Candidate k values tried.
    scores : numpy.ndarray
        Mean silhouette of each candidate (NaN where undefined).
    """

    k: int
    ks: np.ndarray
    scores: np.ndarray

    def __repr__(self) -> str:
        return f"KSelection(k={self.k}, candidates={self.ks.min()}..{self.ks.max()})"


def select_k(centroids: np.ndarray, rng: np.random.Generator | int, k_max: int = 10, *,
             k_min: int = 2, n_init: int = 10) -> KSelection:
    """Choose K on the pooled centroids by the mean silhouette {cite:p}`rousseeuw1987silhouette`.

    For each k in ``k_min .. min(k_max, n - 1)`` (n = distinct centroids) the centroids are
    clustered by k-means++ (scikit-learn, ``n_init`` restarts) and scored by
    ``sklearn.metrics.silhouette_score``; the best mean silhouette wins (ties to the smaller k).
    The silhouette is undefined for k = 1, so K = 1 cannot be chosen (a documented limit).
    The server sees only centroids, so this is the information the Hebbian server has when it
    estimates K̂ from its spectrum: neither gets the true K. Derived in
    {ref}`sec-exp-baselines-clustering`.

    Parameters
    ----------
    centroids : numpy.ndarray
        (n, N) finite real centroids (e.g. :attr:`LocalCentroids.pooled`), n >= 3 distinct.
    rng : numpy.random.Generator or int
    k_max : int
        Largest k tried (>= k_min).
    k_min : int
        Smallest k tried (>= 2).
    n_init : int
        k-means++ restarts per candidate.

    Returns
    -------
    KSelection
    """
    if not isinstance(centroids, np.ndarray) or centroids.ndim != 2 or not np.issubdtype(centroids.dtype, np.number) \
            or centroids.dtype == bool:
        raise TypeError(f"centroids must be a 2-D numeric numpy array, got {_describe(centroids)}")
    if not np.all(np.isfinite(centroids)):
        raise ValueError("centroids must be finite")
    k_min = check_positive_int(k_min, "k_min", minimum=2)
    k_max = check_positive_int(k_max, "k_max", minimum=k_min)
    n_init = check_positive_int(n_init, "n_init")
    C = centroids.astype(np.float64)
    n_distinct = np.unique(C, axis=0).shape[0]
    hi = min(k_max, n_distinct - 1)
    if hi < k_min:
        raise ValueError(
            f"centroids must hold at least {k_min + 1} distinct rows to score k = {k_min}..{k_max} "
            f"by silhouette, got {n_distinct} distinct of shape {centroids.shape}")
    gen = as_rng(rng)
    # scikit-learn is imported once the arguments are known good (its import takes seconds)
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    ks = np.arange(k_min, hi + 1)
    scores = np.full(ks.size, np.nan)
    for i, k in enumerate(ks):
        seed = _draw_seed(gen)
        with _one_thread():
            labels = KMeans(n_clusters=int(k), init="k-means++", n_init=n_init,
                            random_state=seed).fit(_jittered(C, seed)).labels_
            if np.unique(labels).size >= 2:
                scores[i] = float(silhouette_score(C, labels))
    if np.all(np.isnan(scores)):
        raise ValueError("no candidate k gave two or more clusters; the centroids are too few or identical")
    # round before the argmax: a choice that hinges on the last bits would not be reproducible
    best = int(ks[int(np.nanargmax(np.round(scores, 9)))])
    return KSelection(k=best, ks=ks, scores=scores)


# ----------------------------------------------------------------------------------------
# communication and leakage
# ----------------------------------------------------------------------------------------
def upload_bytes(method: str, N: int, k: int = 0, M: int = 0) -> int:
    """Bytes one client sends to the server in one upload.

    ``"hebbian"``: the symmetric N×N operator as its upper triangle in float32,
    ``N (N + 1) / 2 · 4``. ``"kfed"``: k′ = ``k`` float32 centroids, ``4 k N`` (no counts: the
    server step does not use them). ``"fedkmeans_init"``: ``k`` float32 centroids and int32
    counts, ``4 k (N + 1)``. ``"fedkmeans_round"``: one Lloyd round, ``k`` float32 sums and int32
    counts, ``4 k (N + 1)``. ``"raw"``: ``M`` examples at one bit per ±1 entry,
    ``ceil(M N / 8)`` (what a central server would need). Derived in
    {ref}`sec-exp-baselines-clustering`.

    Returns
    -------
    int
    """
    check_choice(method, "method", UPLOAD_METHODS)
    N = check_positive_int(N, "N")
    k = check_nonneg_int(k, "k")
    M = check_nonneg_int(M, "M")
    if method == "hebbian":
        return N * (N + 1) // 2 * 4
    if method == "kfed":
        return 4 * k * N
    if method in ("fedkmeans_init", "fedkmeans_round"):
        return 4 * k * (N + 1)
    return -(-M * N // 8)


def leaked_fraction(examples: np.ndarray, revealed: np.ndarray, max_bits: int = 0) -> float:
    """Fraction of a client's examples within ``max_bits`` bit flips of a revealed ±1 vector.

    ``revealed`` are the ±1 vectors an observer of one upload can form: the signs of the sent
    centroids (a centroid of a one-example cluster is that example), or the output of an attack
    on a Hebbian upload. A vector and its negative count as the same (a Hebbian operator cannot
    tell them apart). Derived in {ref}`sec-exp-baselines-clustering`.

    Parameters
    ----------
    examples : numpy.ndarray
        (M, N) ±1, the client's examples (M = 0 gives 0.0).
    revealed : numpy.ndarray
        (R, N) ±1 (R = 0 gives 0.0).
    max_bits : int
        Hamming tolerance (>= 0).

    Returns
    -------
    float
    """
    check_pm1(examples, "examples", ndim=2, allow_empty=True)
    check_pm1(revealed, "revealed", ndim=2, allow_empty=True)
    if examples.shape[1] != revealed.shape[1]:
        raise ValueError(f"examples and revealed must have the same N, got {examples.shape} and {revealed.shape}")
    max_bits = check_nonneg_int(max_bits, "max_bits")
    if examples.shape[0] == 0:
        return 0.0
    if revealed.shape[0] == 0:
        return 0.0
    N = examples.shape[1]
    dots = examples.astype(np.float64) @ revealed.astype(np.float64).T  # N - 2 * hamming
    ham = (N - np.abs(dots)) / 2.0
    return float(np.mean(ham.min(axis=1) <= max_bits + 1e-9))
