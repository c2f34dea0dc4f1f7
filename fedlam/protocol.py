"""What a client holds and what crosses the wire: data sources and uploads.

A real site has *data*, not archetypes. The client side of the protocol therefore holds a
:class:`DataSource` -- a simulation's generator of noisy examples from hidden archetypes
(:class:`SyntheticSource`), or a site's own file of +-1 examples (:class:`ArraySource`) -- and
knows nothing else about the world; the archetypes of a simulation live only in its sources
and in the metrics. Each round the client sends one :class:`Upload`: its (blended, optionally
noised) operator and a handful of scalars the server's K-hat rule needs
(:func:`fedlam.khat.components_from_uploads`). The in-process loop
(:func:`fedlam.federation.run_federation`) and the Flower app run the same client and server
code over these objects; only the transport differs. Derived in {ref}`sec-protocol`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fedlam import data
from fedlam._validation import (
    _describe,
    check_choice,
    check_in_range,
    check_nonneg_int,
    check_operator,
    check_pm1,
    check_prob_vector,
    check_quality,
)

__all__ = ["Upload", "DataSource", "SyntheticSource", "ArraySource", "SOURCE_KINDS", "MAX_EXAMPLES"]

SOURCE_KINDS = ("honest", "noise")
#: largest number of examples one batch may hold (refused before allocating)
MAX_EXAMPLES = 10_000_000


@dataclass(frozen=True, repr=False)
class Upload:
    """One client's message to the server in one round.

    Attributes
    ----------
    operator : numpy.ndarray or None
        float64 (N, N) symmetric: the operator the client sends (None only after a secure
        aggregator has summed the operators and kept the scalars).
    batch_size : int
        ``M_c`` of this round's fresh batch (0: no fresh evidence).
    weight : float
        Blend weight ``w_c`` used, ``U = w B + (1 - w) A`` (1 at round 0 of the paper's
        protocol; NaN for a client that does not blend, e.g. a poisoner).
    noise_var : float or None
        The client's estimate of its examples' bulk variance ``1 - r^2`` (None: unknown; the
        server then uses the upper bound 1).
    dp_sigma : float
        Entry standard deviation of the symmetric Gaussian noise the client added to the
        operator (0: none).

    What the scalars reveal is discussed in the privacy chapter: the batch size and the
    weight are protocol metadata; ``noise_var`` is the client's channel quality.
    """

    operator: np.ndarray | None
    batch_size: int
    weight: float
    noise_var: float | None = None
    dp_sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.operator is not None:
            op = self.operator
            if not isinstance(op, np.ndarray) or op.ndim != 2 or op.shape[0] != op.shape[1]:
                raise ValueError(f"operator must be an (N, N) array or None, got {_describe(op)}")
            if not np.issubdtype(op.dtype, np.floating):
                raise TypeError(f"operator must have a float dtype, got dtype {op.dtype}")
            if op.shape[0] >= 2:
                check_operator(op, "operator")  # finite and symmetric (the server relies on both)
            elif not np.all(np.isfinite(op)):  # a 1 x 1 placeholder (the scalars are what count)
                raise ValueError(f"operator must be finite, got {op!r}")
        check_nonneg_int(self.batch_size, "batch_size")
        if (isinstance(self.weight, (bool, np.bool_))
                or not isinstance(self.weight, (int, float, np.integer, np.floating))):
            raise TypeError(f"weight must be a real number (NaN: not blended), got {_describe(self.weight)}")
        w = float(self.weight)
        if not math.isnan(w) and not 0.0 <= w <= 1.0:
            raise ValueError(f"weight must lie in [0, 1] or be NaN, got {self.weight!r}")
        if self.noise_var is not None:
            check_in_range(self.noise_var, "noise_var", 0.0, 1.0)
        check_in_range(self.dp_sigma, "dp_sigma", 0.0, None)
        if math.isinf(float(self.dp_sigma)):
            raise ValueError(f"dp_sigma must be finite, got {self.dp_sigma!r}")

    @property
    def n(self) -> int | None:
        """Dimension N (None without operator)."""
        return None if self.operator is None else int(self.operator.shape[0])

    def scalars(self) -> dict[str, Any]:
        """The per-client scalars (what a secure aggregator passes on besides the sum)."""
        return {"batch_size": int(self.batch_size), "weight": float(self.weight),
                "noise_var": None if self.noise_var is None else float(self.noise_var),
                "dp_sigma": float(self.dp_sigma)}

    def without_operator(self) -> Upload:
        """The same scalars without the operator (the server's view under secure aggregation)."""
        return Upload(None, self.batch_size, self.weight, self.noise_var, self.dp_sigma)

    def __repr__(self) -> str:
        op = ("None" if self.operator is None
              else f"<{self.operator.shape[0]}x{self.operator.shape[1]} {self.operator.dtype}>")
        nv = "None" if self.noise_var is None else f"{self.noise_var:.4g}"
        return (f"Upload(operator={op}, batch_size={self.batch_size}, weight={float(self.weight):.4g}, "
                f"noise_var={nv}, dp_sigma={float(self.dp_sigma):.4g})")


@runtime_checkable
class DataSource(Protocol):
    """What a client draws its examples from.

    ``N`` is the pattern dimension; ``batch(t, rng)`` returns the round's examples, an int8
    (M, N) +-1 array (M = 0 allowed), and their labels (int64 (M,), for metrics only) or None
    when unknown (a site's own data).
    """

    @property
    def N(self) -> int:  # read-only: frozen dataclasses (SyntheticSource, ArraySource) qualify
        ...

    def batch(self, t: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
        ...


def _batch_sizes(M: Any, T: int | None, name: str = "M") -> np.ndarray | int:
    if isinstance(M, np.ndarray):
        if M.ndim != 1 or not np.issubdtype(M.dtype, np.integer):
            raise ValueError(f"{name} must be an int or a 1-D int array (one size per round), got {_describe(M)}")
        if T is not None and M.shape != (T,):
            raise ValueError(f"{name} must have shape ({T},), got {M.shape}")
        if np.any(M < 0):
            raise ValueError(f"{name} must be >= 0, got min {int(M.min())}")
        if np.any(M > MAX_EXAMPLES):
            raise ValueError(f"{name} must be <= {MAX_EXAMPLES} per round, got max {int(M.max())}")
        return M.astype(np.int64)
    m = check_nonneg_int(M, name)
    if m > MAX_EXAMPLES:
        raise ValueError(f"{name} must be <= {MAX_EXAMPLES} per round, got {m}")
    return m


def _size_at(M: np.ndarray | int, t: int) -> int:
    if isinstance(M, np.ndarray):
        if not 0 <= t < M.shape[0]:
            raise ValueError(f"t must lie in [0, {M.shape[0] - 1}] for this source, got {t}")
        return int(M[t])
    return int(M)


@dataclass(frozen=True, repr=False)
class SyntheticSource:
    """Noisy examples of hidden archetypes (the simulation's world seen by one client).

    ``kind="honest"``: each example is an archetype drawn from the round's class mixture,
    passed through the bit-flip channel of quality ``r`` (:func:`fedlam.data.sample_examples`).
    ``kind="noise"``: uniform +-1 examples (the paper's attacker, ``r = 0``).

    Attributes
    ----------
    archetypes : numpy.ndarray
        (K, N) +-1.
    M : int or numpy.ndarray
        Batch size, or a (T,) int array of per-round sizes.
    r : float or None
        Channel quality (required for honest sources).
    mixture : numpy.ndarray or None
        (T, K) class mixture per round (required for honest sources).
    kind : {"honest", "noise"}
    """

    archetypes: np.ndarray
    M: int | np.ndarray
    r: float | None = None
    mixture: np.ndarray | None = None
    kind: str = "honest"
    N: int = field(init=False)

    def __post_init__(self) -> None:
        check_choice(self.kind, "kind", SOURCE_KINDS)
        check_pm1(self.archetypes, "archetypes", ndim=2)
        K, N = self.archetypes.shape
        object.__setattr__(self, "N", int(N))
        T = None
        if self.kind == "honest":
            if self.r is None:
                raise ValueError("r is required for an honest source, got None")
            check_quality(self.r)
            mix = self.mixture
            if not isinstance(mix, np.ndarray) or mix.ndim != 2 or mix.shape[1] != K:
                raise ValueError(f"mixture must be a (T, K = {K}) array for an honest source, got {_describe(mix)}")
            for t in range(mix.shape[0]):
                check_prob_vector(mix[t], f"mixture[{t}]", size=K)
            T = mix.shape[0]
        object.__setattr__(self, "M", _batch_sizes(self.M, T))

    def batch(self, t: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
        """Round ``t``'s examples and labels (labels None for a noise source)."""
        M = _size_at(self.M, t)
        if self.kind == "noise":
            return rng.choice(np.array([-1, 1], dtype=np.int8), size=(M, self.N)), None
        mixture, r = self.mixture, self.r
        assert mixture is not None and r is not None  # required for an honest source (__post_init__)
        if not 0 <= t < mixture.shape[0]:
            raise ValueError(f"t must lie in [0, {mixture.shape[0] - 1}] (the mixture's rounds), got {t}")
        return data.sample_examples(self.archetypes, M, r, mixture[t], rng)

    def __repr__(self) -> str:
        K, N = self.archetypes.shape
        M = self.M if isinstance(self.M, int) else "per-round"
        return f"SyntheticSource(kind={self.kind!r}, K={K}, N={N}, r={self.r}, M={M})"


@dataclass(frozen=True, repr=False)
class ArraySource:
    """A site's own +-1 examples, served ``M`` per round.

    ``order="stream"`` serves consecutive blocks of the array (round ``t`` gets the next
    ``M_t`` rows, wrapping around at the end: a site that keeps collecting data);
    ``order="sample"`` draws ``M_t`` rows without replacement with the round's generator.

    Attributes
    ----------
    examples : numpy.ndarray
        int8 (n, N) +-1 (n >= 1).
    M : int or numpy.ndarray
        Batch size, or per-round sizes.
    order : {"stream", "sample"}
    labels : numpy.ndarray or None
        Optional (n,) int64 labels (metrics only).

    File format (:meth:`from_file`): a ``.npy`` file holding the (n, N) array, or a ``.npz``
    file with an ``examples`` entry (and optionally ``labels``); values must be exactly -1
    and +1 (any integer dtype; booleans and floats are refused rather than cast).
    """

    examples: np.ndarray
    M: int | np.ndarray
    order: str = "stream"
    labels: np.ndarray | None = None
    N: int = field(init=False)

    def __post_init__(self) -> None:
        check_pm1(self.examples, "examples", ndim=2)
        n, N = self.examples.shape
        if n < 1 or N < 2:
            raise ValueError(f"examples must have at least one row and N >= 2 columns, got shape {self.examples.shape}")
        object.__setattr__(self, "examples", np.ascontiguousarray(self.examples, dtype=np.int8))
        object.__setattr__(self, "N", int(N))
        check_choice(self.order, "order", ("stream", "sample"))
        M = _batch_sizes(self.M, None)
        object.__setattr__(self, "M", M)
        if self.order == "sample" and np.max(M) > n:
            raise ValueError(f"M must be <= the number of examples ({n}) with order='sample', got {int(np.max(M))}")
        if self.labels is not None:
            lab = self.labels
            if not isinstance(lab, np.ndarray) or lab.shape != (n,) or not np.issubdtype(lab.dtype, np.integer):
                raise ValueError(f"labels must be an int array of shape ({n},) or None, got {_describe(lab)}")

    @classmethod
    def from_file(cls, path: str | os.PathLike, M: int | np.ndarray, order: str = "stream") -> ArraySource:
        """Load a site's examples from ``.npy`` or ``.npz`` (see the class notes for the format)."""
        p = os.fspath(path)
        if not os.path.isfile(p):
            raise ValueError(f"path must be an existing .npy or .npz file, got {p!r} (no such file)")
        labels = None
        try:
            if p.endswith(".npz"):
                with np.load(p, allow_pickle=False) as z:
                    if "examples" not in z.files:
                        raise ValueError(f"{p!r}: a .npz file must hold an 'examples' array, found {sorted(z.files)}")
                    X = z["examples"]
                    labels = z["labels"] if "labels" in z.files else None
            elif p.endswith(".npy"):
                X = np.load(p, allow_pickle=False)
            else:
                raise ValueError(f"path must end in .npy or .npz, got {p!r}")
        except (OSError, EOFError, ValueError) as exc:
            if str(exc).startswith(repr(p)):  # our own message about the file's content
                raise
            # truncated, not an array file, or object arrays (never unpickled)
            raise ValueError(f"{p!r} is not a readable numpy file of -1/+1 integers: {exc}") from None
        if not isinstance(X, np.ndarray) or not np.issubdtype(X.dtype, np.integer) or X.dtype == np.bool_:
            raise ValueError(f"{p!r}: examples must be an integer array of -1/+1, "
                             f"got dtype {getattr(X, 'dtype', None)}")
        if X.ndim != 2:
            raise ValueError(f"{p!r}: examples must be 2-D (n, N), got shape {X.shape}")
        if not np.all((X == 1) | (X == -1)):
            raise ValueError(f"{p!r}: examples must contain only -1 and +1")
        return cls(X.astype(np.int8), M, order=order, labels=None if labels is None else labels.astype(np.int64))

    def batch(self, t: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
        """Round ``t``'s examples (and labels if known)."""
        n = self.examples.shape[0]
        M = _size_at(self.M, t)
        if self.order == "sample":
            idx = np.sort(rng.choice(n, size=M, replace=False)) if M else np.empty(0, dtype=np.int64)
        else:
            if isinstance(self.M, np.ndarray):
                start = int(self.M[:t].sum())
            else:
                start = int(self.M) * int(t)
            idx = (start + np.arange(M)) % n
        lab = None if self.labels is None else self.labels[idx]
        return self.examples[idx], lab

    def __repr__(self) -> str:
        n, N = self.examples.shape
        M = self.M if isinstance(self.M, int) else "per-round"
        return f"ArraySource(n={n}, N={N}, M={M}, order={self.order!r})"
