"""The data model: archetypes, the bit-flip channel, class-mixture schedules, exposure.

Everything a client sees is produced here, following the generative model of the paper
(eq. (2.4)): pick an archetype index mu from a mixture pi, then flip every bit of the
archetype independently with probability (1 - r)/2.

* :func:`random_archetypes` -- i.i.d. uniform +-1 patterns (Derived in {ref}`sec-hopfield`).
* :func:`load_silhouettes`, :func:`structured_archetypes`, :func:`decorrelate` -- the
  Caltech-101 silhouettes used in the structured experiment (Derived in {ref}`sec-exp-structured`).
* :func:`flip_channel`, :func:`sample_examples` -- the channel of quality r (Derived in {ref}`sec-hebb`).
* Schedules ``pi[t, c, mu]`` of shape (T, L, K): :func:`static_mixture`,
  :func:`heterogeneous_supports`, :func:`sequential_drift`, :func:`novelty_ramp`
  (Derived in {ref}`sec-protocol`).
* :func:`exposure`, :func:`coverage` (Derived in {ref}`sec-exposure`).
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ._validation import (
    _describe,
    as_rng,
    check_choice,
    check_count,
    check_nonneg_int,
    check_pm1,
    check_positive_int,
    check_prob_vector,
    check_quality,
    check_real,
)

__all__ = [
    "random_archetypes",
    "load_silhouettes",
    "structured_archetypes",
    "decorrelate",
    "flip_channel",
    "sample_examples",
    "static_mixture",
    "heterogeneous_supports",
    "random_supports",
    "sequential_drift",
    "novelty_ramp",
    "exposure",
    "coverage",
    "PAPER_CLASSES",
]

#: The three Caltech-101 silhouette classes of the paper's structured experiment.
PAPER_CLASSES: tuple[str, ...] = ("anchor", "bass", "Motorbikes 16")

_DATA_FILE = Path(__file__).resolve().parent / "datasets" / "caltech101_silhouettes_28.npz"

#: Largest single array (bytes) the data, hopfield, controller and rmt modules allocate
#: before refusing with a ValueError: 8 GiB. Checked before any work is done.
MAX_ARRAY_BYTES = 8 * 2**30


#: Largest number of clients (or archetypes) :func:`random_supports` deals (a Python loop each).
MAX_CLIENTS = 100_000


def _check_alloc(count: int, itemsize: int, what: str) -> None:
    """Refuse to allocate ``count`` items of ``itemsize`` bytes beyond :data:`MAX_ARRAY_BYTES`.

    ``what`` names the arguments that set the size, e.g. ``"M x N = 1000000 x 400"``.
    """
    need = int(count) * int(itemsize)
    if need > MAX_ARRAY_BYTES:
        raise ValueError(
            f"{what} would need an array of {need / 2**30:.1f} GiB, above the limit of "
            f"{MAX_ARRAY_BYTES / 2**30:.0f} GiB (fedlam.data.MAX_ARRAY_BYTES); reduce the sizes"
        )


# ----------------------------------------------------------------------------------------
# archetypes
# ----------------------------------------------------------------------------------------
def random_archetypes(K: int, N: int, rng: np.random.Generator | int) -> np.ndarray:
    """Draw K i.i.d. uniform +-1 archetypes of length N.

    Derived in {ref}`sec-hopfield`.

    Parameters
    ----------
    K : int
        Number of archetypes, ``K >= 1``.
    N : int
        Number of neurons, ``N >= 2``.
    rng : numpy.random.Generator or int
        Random generator or seed.

    Returns
    -------
    numpy.ndarray
        int8 array of shape (K, N) with entries in {-1, +1}.

    Examples
    --------
    >>> xi = random_archetypes(3, 8, rng=0)
    >>> xi.shape, xi.dtype
    ((3, 8), dtype('int8'))
    """
    K = check_positive_int(K, "K")
    N = check_positive_int(N, "N", minimum=2)
    # peak: the int8 bits, 2 * bits, 2 * bits - 1 and the int8 copy (4 bytes per entry)
    _check_alloc(K * N, 4, f"K x N = {K} x {N}")
    gen = as_rng(rng)
    bits = gen.integers(0, 2, size=(K, N), dtype=np.int8)
    return (2 * bits - 1).astype(np.int8)


@functools.lru_cache(maxsize=1)
def _load_npz() -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    with np.load(_DATA_FILE, allow_pickle=False) as d:
        X = np.array(d["X"], dtype=np.uint8)
        y = np.array(d["y"], dtype=np.int64)
        names = tuple(str(s) for s in d["classnames"])
    X.setflags(write=False)
    y.setflags(write=False)
    return X, y, names


def load_silhouettes() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Load the Caltech-101 silhouettes (28 x 28) shipped with fedlam.

    Derived in {ref}`sec-exp-structured`. Data: Marlin et al. (2010), {cite:p}`marlin2010`,
    made from Caltech-101 {cite:p}`feifei2004`; provenance in ``fedlam/datasets/README.md``.

    Returns
    -------
    X : numpy.ndarray
        uint8 array (8671, 784) with values {0, 1}; **1 = background, 0 = object**. Rows are
        C-order 28 x 28 images: ``X[i].reshape(28, 28)`` is upright.
    y : numpy.ndarray
        int64 array (8671,), 0-based class index.
    classnames : list of str
        The 101 class names, ``classnames[y[i]]`` is the class of image i.

    Notes
    -----
    The file is read once and cached; each call returns fresh copies, so callers may
    modify them freely.
    """
    X, y, names = _load_npz()
    return X.copy(), y.copy(), list(names)


def _class_indices(classes: Sequence[str | int], names: Sequence[str]) -> list[int]:
    if isinstance(classes, (str, bytes)) or not isinstance(classes, Sequence):
        raise TypeError(f"classes must be a sequence of class names or indices, got {_describe(classes)}")
    if len(classes) == 0:
        raise ValueError("classes must name at least one class, got an empty sequence")
    out: list[int] = []
    for c in classes:
        if isinstance(c, str):
            if c not in names:
                close = [n for n in names if n.lower().startswith(c.lower()[:4])]
                raise ValueError(f"classes: unknown class name {c!r}; similar names: {close}")
            out.append(names.index(c))
        elif isinstance(c, numbers.Integral) and not isinstance(c, (bool, np.bool_)):
            if not 0 <= int(c) < len(names):
                raise ValueError(f"classes: class index must lie in [0, {len(names) - 1}], got {int(c)}")
            out.append(int(c))
        else:
            raise TypeError(f"classes entries must be str or int, got {_describe(c)}")
    if len(set(out)) != len(out):
        raise ValueError(f"classes must be distinct, got {list(classes)!r}")
    return out


def structured_archetypes(
    classes: Sequence[str | int] = PAPER_CLASSES,
    method: str = "mean",
    foreground: int = 1,
) -> np.ndarray:
    """Class prototypes of the Caltech-101 silhouettes as +-1 archetypes.

    Derived in {ref}`sec-exp-structured`.

    Parameters
    ----------
    classes : sequence of str or int
        Class names (as spelled in the data, e.g. ``"Motorbikes 16"``) or 0-based indices.
        Default: the paper's three classes ``("anchor", "bass", "Motorbikes 16")``.
    method : {"mean", "medoid"}
        ``"mean"``: pixel-wise majority vote over all images of the class (a pixel is object
        if strictly more than half of the class images have object there; an exact tie goes
        to background). ``"medoid"``: the class image closest in Hamming distance to the
        majority-vote prototype (a real silhouette; ties -> lowest index).
    foreground : {+1, -1}
        Sign given to object pixels; background gets ``-foreground``.

    Returns
    -------
    numpy.ndarray
        int8 array (K, 784), K = ``len(classes)``.

    Notes
    -----
    These patterns are strongly correlated (all share a large background and a central
    object blob). For the paper's classes with ``method="mean"`` the mutual overlaps
    ``xi^mu . xi^nu / N`` are 0.332 (anchor-bass), 0.051 (anchor-motorbike) and 0.454
    (bass-motorbike), against the typical 1/sqrt(N) = 0.036 of random patterns; the
    pattern means (fraction object minus fraction background) are -0.686, -0.145 and
    +0.156. With ``method="medoid"``: 0.324, 0.064, 0.429. See :func:`decorrelate`.
    """
    method = check_choice(method, "method", ("mean", "medoid"))
    if isinstance(foreground, (bool, np.bool_)) or foreground not in (1, -1):
        raise ValueError(f"foreground must be +1 or -1, got {foreground!r}")
    X, y, names = _load_npz()
    idx = _class_indices(classes, names)
    rows = []
    for k in idx:
        imgs = X[y == k]  # 1 = background
        obj_frac = 1.0 - imgs.mean(axis=0)
        proto_obj = obj_frac > 0.5
        if method == "medoid":
            dist = np.count_nonzero((imgs == 0) != proto_obj[None, :], axis=1)
            proto_obj = imgs[int(np.argmin(dist))] == 0
        rows.append(np.where(proto_obj, foreground, -foreground))
    return np.asarray(rows, dtype=np.int8)


def decorrelate(
    patterns: np.ndarray,
    method: str = "gram",
    rng: np.random.Generator | int = 0,
    tol: float | None = None,
) -> np.ndarray:
    """Reduce the mutual overlaps of a set of +-1 patterns, keeping them +-1.

    Derived in {ref}`sec-exp-structured`.

    Parameters
    ----------
    patterns : numpy.ndarray
        (K, N) array of +-1, ``K >= 1``, ``N >= 2``.
    method : {"gram", "lowdin"}
        ``"gram"`` (default): drive the Gram (overlap) matrix ``O = X X^T / N`` towards the
        identity with as few bit flips as possible. Greedy descent on
        ``F(X) = sum_{mu < nu} O_{mu nu}^2``: flipping bit i of pattern mu changes F by
        ``4 (K - 1) / N^2 - (4 / N) x_i^mu (O_off X)_{mu i}``, so each step flips the bit
        with the largest ``x_i^mu (O_off X)_{mu i}`` (a bit where mu agrees with the
        patterns it overlaps positively with, or disagrees with those it overlaps
        negatively with). Steps stop when every off-diagonal ``|O_{mu nu}| <= tol`` or no
        flip decreases F. Many bits tie (all pixels with the same column of values, e.g.
        the shared background); ties are broken by a random priority drawn once from
        ``rng``, which spreads the flips uniformly over the tied pixels.
        ``"lowdin"``: the sign of the symmetrically orthogonalised patterns
        ``C^{-1/2} X`` with ``C = O`` (an exact zero keeps the original bit), one sweep.
        This is a pixel-wise map of each column of values, and for a few patterns
        ``C^{-1/2}`` is so close to diagonal that it preserves every sign: it leaves the
        paper's silhouettes unchanged (kept to show that a linear decorrelation followed
        by the sign does not work -- any pixel-wise map sends the whole shared
        background to the same column and cannot decorrelate it).
    rng : numpy.random.Generator or int
        Tie-breaking priorities for ``"gram"`` (default seed 0: deterministic).
    tol : float, optional
        Target max off-diagonal |overlap| for ``"gram"``; default ``1 / sqrt(N)``, the
        typical overlap of independent random patterns.

    Returns
    -------
    numpy.ndarray
        int8 (K, N) +-1 patterns.

    Notes
    -----
    Overlap matrices ``X X^T / N`` for the paper's silhouettes
    (``structured_archetypes()``: anchor, bass, Motorbikes 16; N = 784), computed with
    this function and rounded to 3 decimals::

        before = after "lowdin"      after "gram"
        [[1.    0.332 0.051]         [[1.    0.    0.003]
         [0.332 1.    0.454]          [0.    1.    0.033]
         [0.051 0.454 1.   ]]         [0.003 0.033 1.   ]]

    (mean off-diagonal |overlap| 0.279 -> 0.012). Overlap of each "gram" pattern with its
    original (1 - 2 x fraction of flipped bits): [1.000, 0.643, 0.936] -- the greedy
    descent flips mostly the pattern that overlaps most with the others (bass). The flipped
    bits are scattered over the pixels that the correlated patterns share (mostly background), so each silhouette stays
    recognisable, with salt-and-pepper noise. This changes the experiment: the network
    then stores near-orthogonal surrogates of the images (the regime in which Hebbian
    storage works, as for random patterns), not the correlated images themselves.
    """
    method = check_choice(method, "method", ("gram", "lowdin"))
    check_pm1(patterns, "patterns", ndim=2)
    K, N = patterns.shape
    if N < 2:
        raise ValueError(f"patterns must have N >= 2 columns, got shape {patterns.shape}")
    gen = as_rng(rng)
    if tol is None:
        tol = 1.0 / np.sqrt(N)
    tol = check_real(tol, "tol")
    if tol < 0:
        raise ValueError(f"tol must be >= 0, got {tol!r}")
    X = patterns.astype(np.float64)
    if K == 1:
        return X.astype(np.int8)
    if method == "lowdin":
        if K > N:
            raise ValueError(f"patterns must have K <= N rows for method 'lowdin', got shape {patterns.shape}")
        C = X @ X.T / N
        w, V = np.linalg.eigh(C)
        if w[0] <= 1e-10 * max(w[-1], 1.0):
            raise ValueError(
                "patterns must be linearly independent for method 'lowdin' "
                f"(smallest eigenvalue of the overlap matrix is {w[0]:.3g})"
            )
        Z = ((V / np.sqrt(w)) @ V.T) @ X
        return np.where(Z > 0, 1, np.where(Z < 0, -1, X)).astype(np.int8)

    prio = gen.random((K, N))
    O = X @ X.T / N
    np.fill_diagonal(O, 0.0)
    gain_floor = (K - 1) / N  # a flip lowers F iff score > (K - 1) / N
    for _ in range(K * N):
        if np.max(np.abs(O)) <= tol:
            break
        score = X * (O @ X)  # (K, N)
        best = score.max()
        if best <= gain_floor + 1e-12:
            break
        cand = score >= best - 1e-12
        flat = int(np.argmin(np.where(cand, prio, np.inf)))
        mu, i = divmod(flat, N)
        X[mu, i] = -X[mu, i]
        delta = 2.0 * X[mu, i] * X[:, i] / N  # new x_i^mu times column
        delta[mu] = 0.0
        O[mu, :] += delta
        O[:, mu] += delta
    return X.astype(np.int8)


# ----------------------------------------------------------------------------------------
# the channel
# ----------------------------------------------------------------------------------------
def flip_channel(archetype_rows: np.ndarray, r: float, rng: np.random.Generator | int) -> np.ndarray:
    """Pass +-1 rows through the bit-flip channel of quality r (paper eq. (2.4)).

    Each bit is kept with probability (1 + r)/2 and flipped with probability (1 - r)/2,
    independently, so ``E[eta_i | xi] = r xi_i``. Derived in {ref}`sec-hebb`.

    Parameters
    ----------
    archetype_rows : numpy.ndarray
        (M, N) +-1 array (M = 0 allowed: an empty (0, N) array is returned).
    r : float
        Quality in (0, 1]; r = 1 returns an exact copy (as int8).
    rng : numpy.random.Generator or int

    Returns
    -------
    numpy.ndarray
        int8 (M, N).
    """
    check_pm1(archetype_rows, "archetype_rows", ndim=2, allow_empty=True)
    r = check_quality(r)
    gen = as_rng(rng)
    rows = archetype_rows.astype(np.int8)
    if rows.size == 0:
        return rows.copy()
    _check_alloc(rows.size, 8, f"M x N = {rows.shape[0]} x {rows.shape[1]} (uniform draws of the channel)")
    flips = gen.random(rows.shape) < (1.0 - r) / 2.0
    return np.where(flips, -rows, rows).astype(np.int8)


def sample_examples(
    archetypes: np.ndarray,
    M: int,
    r: float,
    mixture: np.ndarray,
    rng: np.random.Generator | int,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw M examples from the generative model (paper eq. (2.4)).

    Labels are i.i.d. from ``mixture``; each example is its archetype through
    :func:`flip_channel`. Derived in {ref}`sec-hebb`.

    Parameters
    ----------
    archetypes : numpy.ndarray
        (K, N) +-1 array.
    M : int
        Number of examples, ``M >= 0`` (M = 0 returns empty arrays).
    r : float
        Quality in (0, 1].
    mixture : numpy.ndarray
        (K,) probability vector.
    rng : numpy.random.Generator or int

    Returns
    -------
    examples : numpy.ndarray
        int8 (M, N).
    labels : numpy.ndarray
        int64 (M,), the generating archetype of each example.
    """
    check_pm1(archetypes, "archetypes", ndim=2)
    K, N = archetypes.shape
    if N < 2:
        raise ValueError(f"archetypes must have N >= 2 columns, got shape {archetypes.shape}")
    M = check_nonneg_int(M, "M")
    r = check_quality(r)
    p = check_prob_vector(mixture, "mixture", size=K)
    gen = as_rng(rng)
    if M == 0:
        return np.empty((0, N), dtype=np.int8), np.empty((0,), dtype=np.int64)
    _check_alloc(M * N, 8, f"M x N = {M} x {N} (uniform draws of the channel)")
    labels = gen.choice(K, size=M, p=p).astype(np.int64)
    examples = flip_channel(archetypes[labels], r, gen)
    return examples, labels


# ----------------------------------------------------------------------------------------
# schedules pi[t, c, mu]
# ----------------------------------------------------------------------------------------
def _check_TLK(T: int, L: int, K: int) -> tuple[int, int, int]:
    T, L, K = check_positive_int(T, "T"), check_positive_int(L, "L"), check_positive_int(K, "K")
    _check_alloc(T * L * K, 8, f"T x L x K = {T} x {L} x {K}")
    return T, L, K


def static_mixture(T: int, L: int, K: int, pi: np.ndarray | None = None) -> np.ndarray:
    """A mixture that does not change over rounds.

    Derived in {ref}`sec-protocol`.

    Parameters
    ----------
    T, L, K : int
        Rounds, clients, archetypes (all >= 1).
    pi : numpy.ndarray, optional
        ``None``: uniform 1/K for everyone. A (K,) probability vector: the same mixture
        for every client. An (L, K) array whose rows are probability vectors: one mixture
        per client.

    Returns
    -------
    numpy.ndarray
        float64 (T, L, K), every ``[t, c, :]`` sums to 1.
    """
    T, L, K = _check_TLK(T, L, K)
    if pi is None:
        base = np.full((L, K), 1.0 / K)
    else:
        if not isinstance(pi, np.ndarray):
            raise TypeError(f"pi must be a numpy array of shape ({K},) or ({L}, {K}), got {_describe(pi)}")
        if pi.ndim == 1:
            base = np.tile(check_prob_vector(pi, "pi", size=K), (L, 1))
        elif pi.ndim == 2:
            if pi.shape != (L, K):
                raise ValueError(f"pi must have shape ({K},) or ({L}, {K}), got shape {pi.shape}")
            base = np.stack([check_prob_vector(pi[c], f"pi[{c}]", size=K) for c in range(L)])
        else:
            raise ValueError(f"pi must have shape ({K},) or ({L}, {K}), got shape {pi.shape}")
    return np.broadcast_to(base, (T, L, K)).astype(np.float64).copy()


def heterogeneous_supports(
    T: int,
    L: int,
    K: int,
    supports: Sequence[Sequence[int]],
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Per-client supports K_c: client c only ever sees the archetypes in ``supports[c]``.

    Derived in {ref}`sec-protocol` (paper: "effective support" K_c).

    Parameters
    ----------
    T, L, K : int
    supports : sequence of L sequences of int
        ``supports[c]`` lists the archetype indices (in [0, K), distinct, non-empty) of
        client c. The union need not cover all K archetypes (an uncovered archetype then
        has zero exposure -- the paper assumes coverage, we leave it to the caller).
    rng : numpy.random.Generator or int, optional
        ``None``: uniform weights over each support. Given: weights over each support
        drawn once from a flat Dirichlet and kept fixed over the rounds.

    Returns
    -------
    numpy.ndarray
        float64 (T, L, K), zero outside the supports, rows summing to 1.
    """
    T, L, K = _check_TLK(T, L, K)
    if isinstance(supports, (str, bytes)) or not isinstance(supports, Sequence):
        raise TypeError(f"supports must be a sequence of {L} index lists, got {_describe(supports)}")
    if len(supports) != L:
        raise ValueError(f"supports must have one index list per client (L={L}), got {len(supports)}")
    gen = None if rng is None else as_rng(rng)
    base = np.zeros((L, K))
    for c, sup in enumerate(supports):
        arr = np.asarray(sup)
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(f"supports[{c}] must be a non-empty list of archetype indices, got {sup!r}")
        if not np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool:
            raise TypeError(f"supports[{c}] must hold ints, got dtype {arr.dtype}")
        if arr.min() < 0 or arr.max() >= K:
            raise ValueError(f"supports[{c}] indices must lie in [0, {K - 1}], got {arr.tolist()}")
        if np.unique(arr).size != arr.size:
            raise ValueError(f"supports[{c}] indices must be distinct, got {arr.tolist()}")
        if gen is None:
            base[c, arr] = 1.0 / arr.size
        else:
            base[c, arr] = gen.dirichlet(np.ones(arr.size))
    return np.broadcast_to(base, (T, L, K)).copy()


def random_supports(L: int, K: int, size: int, rng: np.random.Generator | int) -> list[list[int]]:
    """Random client supports K_c of ``size`` archetypes each whose union covers all K.

    A random permutation of the K archetypes is dealt round-robin to the clients (so
    every archetype has at least one client, as the paper assumes), then each client's
    support is completed with distinct archetypes drawn uniformly from the rest. Feed
    the result to :func:`heterogeneous_supports`. Derived in {ref}`sec-protocol`.

    Parameters
    ----------
    L, K : int
        Clients and archetypes, >= 1.
    size : int
        Archetypes per client, ``1 <= size <= K`` and ``L * size >= K``.
    rng : numpy.random.Generator or int

    Returns
    -------
    list of L sorted lists of int
    """
    L = check_count(L, "L", MAX_CLIENTS, why="one Python list per client")
    K = check_count(K, "K", MAX_CLIENTS, why="one Python loop step per archetype and client")
    size = check_positive_int(size, "size")
    if size > K:
        raise ValueError(f"size must be <= K = {K}, got {size}")
    if L * size < K:
        raise ValueError(f"L * size must be >= K = {K} so that the supports cover every archetype, "
                         f"got L={L}, size={size}")
    if L * K > MAX_CLIENTS * 100:
        raise ValueError(f"L * K must be <= {MAX_CLIENTS * 100} (a Python loop over archetypes per client), "
                         f"got L = {L}, K = {K}")
    gen = as_rng(rng)
    perm = gen.permutation(K)
    sups: list[set[int]] = [set() for _ in range(L)]
    for j, mu in enumerate(perm):
        sups[j % L].add(int(mu))
    for c in range(L):
        rest = np.array([mu for mu in range(K) if mu not in sups[c]], dtype=np.int64)
        extra: np.ndarray | list[int] = (gen.choice(rest, size=size - len(sups[c]), replace=False)
                                         if size > len(sups[c]) else [])
        sups[c].update(int(mu) for mu in extra)
    return [sorted(s_) for s_ in sups]


def sequential_drift(T: int, L: int, K: int, width: float | None = None) -> np.ndarray:
    """Archetypes dominate one after another (smooth drift of the class mixture).

    Archetype mu has a Gaussian bump centred at ``t_mu = (mu + 1/2) T / K - 1/2`` (rounds
    are 0-based, so the centres split [0, T) into K equal slots) with standard deviation
    ``width`` rounds; the mixture at round t is the normalised bumps. Every client gets
    the same schedule. Derived in {ref}`sec-protocol`.

    Parameters
    ----------
    T, L, K : int
    width : float, optional
        Bump width in rounds, > 0. Default ``T / (2 K)`` (half a slot): at the centre of
        its slot an interior archetype has about 78% of the mass and each neighbour
        9-13%; archetypes two slots away have < 0.1%. Smaller widths give sharper switches.

    Returns
    -------
    numpy.ndarray
        float64 (T, L, K), strictly positive entries, rows summing to 1.
    """
    T, L, K = _check_TLK(T, L, K)
    if width is None:
        width = T / (2.0 * K)
    width = check_real(width, "width")
    if width <= 0:
        raise ValueError(f"width must be > 0 rounds, got {width!r}")
    t = np.arange(T, dtype=np.float64)[:, None]
    centres = (np.arange(K) + 0.5) * T / K - 0.5
    logits = -0.5 * ((t - centres[None, :]) / width) ** 2
    logits -= logits.max(axis=1, keepdims=True)  # stable normalisation
    w = np.exp(logits)
    w /= w.sum(axis=1, keepdims=True)
    return np.broadcast_to(w[:, None, :], (T, L, K)).copy()


def novelty_ramp(T: int, L: int, K_old: int, K_new: int, t_start: int, ramp: int) -> np.ndarray:
    """K_new new archetypes enter at round ``t_start`` and ramp up linearly.

    With rounds 0-based, the ramp fraction is ``f(t) = 0`` for ``t < t_start`` and
    ``f(t) = min(1, (t - t_start + 1) / ramp)`` afterwards. Each new archetype gets
    ``f(t) / K`` and each old one ``(1 - K_new f(t) / K) / K_old``, with ``K = K_old + K_new``:
    before the start the old ones share the mass equally, after ``ramp`` rounds all K
    archetypes have the equal share 1/K. Archetype indices: old ``0..K_old-1``, new
    ``K_old..K-1``. Derived in {ref}`sec-protocol` and {ref}`sec-exp-novelty`.

    Parameters
    ----------
    T, L : int
    K_old, K_new : int
        Both >= 1.
    t_start : int
        First round (0-based, in [0, T-1]) at which new archetypes have positive mass.
    ramp : int
        Number of rounds (>= 1) to reach the equal share; ``ramp = 1`` is a step.

    Returns
    -------
    numpy.ndarray
        float64 (T, L, K_old + K_new), rows summing to 1.
    """
    T = check_positive_int(T, "T")
    L = check_positive_int(L, "L")
    K_old = check_positive_int(K_old, "K_old")
    K_new = check_positive_int(K_new, "K_new")
    t_start = check_nonneg_int(t_start, "t_start")
    if t_start >= T:
        raise ValueError(f"t_start must be < T = {T} (0-based rounds), got {t_start}")
    ramp = check_positive_int(ramp, "ramp")
    K = K_old + K_new
    _check_alloc(T * L * K, 8, f"T x L x K = {T} x {L} x {K}")
    t = np.arange(T, dtype=np.float64)
    f = np.clip((t - t_start + 1.0) / ramp, 0.0, 1.0)
    w = np.empty((T, K))
    w[:, K_old:] = (f / K)[:, None]
    w[:, :K_old] = ((1.0 - K_new * f / K) / K_old)[:, None]
    return np.broadcast_to(w[:, None, :], (T, L, K)).copy()


# ----------------------------------------------------------------------------------------
# exposure and coverage
# ----------------------------------------------------------------------------------------
def exposure(labels_per_client: Sequence[np.ndarray], K: int) -> np.ndarray:
    """Federated exposure e_mu(t) of one round (paper eq. (2.25)).

    ``e_mu = (1/L') sum_c (fraction of client c's batch generated by archetype mu)``,
    where the mean runs over the L' clients with a non-empty batch. Derived in
    {ref}`sec-exposure`.

    Parameters
    ----------
    labels_per_client : sequence of numpy.ndarray
        One 1-D integer array of labels in [0, K) per client (length M_c^t, may be 0).
    K : int
        Number of archetypes.

    Returns
    -------
    numpy.ndarray
        float64 (K,). Sums to 1 if at least one client has examples.

    Notes
    -----
    The paper's formula divides by M_c^t and is undefined for an empty batch. A client
    with no examples contributes no information, so it is skipped in the average (the
    mean is over clients with data); if every batch is empty the exposure is all zeros.
    """
    K = check_positive_int(K, "K")
    if isinstance(labels_per_client, np.ndarray) or not isinstance(labels_per_client, Sequence):
        raise TypeError(
            f"labels_per_client must be a list of 1-D int arrays, got {_describe(labels_per_client)}"
        )
    total = np.zeros(K)
    n = 0
    for c, lab in enumerate(labels_per_client):
        if not isinstance(lab, np.ndarray):
            raise TypeError(f"labels_per_client[{c}] must be a numpy array, got {_describe(lab)}")
        if lab.ndim != 1:
            raise ValueError(f"labels_per_client[{c}] must be 1-D, got shape {lab.shape}")
        if lab.size == 0:
            continue
        if not np.issubdtype(lab.dtype, np.integer) or lab.dtype == bool:
            raise TypeError(f"labels_per_client[{c}] must have an integer dtype, got {lab.dtype}")
        if lab.min() < 0 or lab.max() >= K:
            raise ValueError(
                f"labels_per_client[{c}] must lie in [0, {K - 1}], got range [{lab.min()}, {lab.max()}]"
            )
        total += np.bincount(lab, minlength=K) / lab.size
        n += 1
    return total / n if n else total


def coverage(exposures: np.ndarray) -> np.ndarray:
    """Coverage C(t): archetypes seen at least once up to round t (paper eq. (2.26)).

    Derived in {ref}`sec-exposure`.

    Parameters
    ----------
    exposures : numpy.ndarray
        (T, K) non-negative exposures e_mu(t), one row per round.

    Returns
    -------
    numpy.ndarray
        bool (T, K); ``out[t, mu]`` is True iff ``sum_{s <= t} e_mu(s) > 0``. The set
        C(t) of the paper is ``np.flatnonzero(out[t])``.
    """
    if not isinstance(exposures, np.ndarray):
        raise TypeError(f"exposures must be a (T, K) numpy array, got {_describe(exposures)}")
    if exposures.ndim != 2:
        raise ValueError(f"exposures must be 2-D (T, K), got shape {exposures.shape}")
    if not np.issubdtype(exposures.dtype, np.number) or exposures.dtype == bool:
        raise TypeError(f"exposures must be numeric, got dtype {exposures.dtype}")
    if not np.all(np.isfinite(exposures)):
        raise ValueError("exposures must be finite")
    if np.any(exposures < 0):
        raise ValueError(f"exposures must be non-negative, got min {float(exposures.min())!r}")
    return np.cumsum(exposures, axis=0) > 0
