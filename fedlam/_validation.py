"""Argument checks shared by every public function.

Every check raises :class:`TypeError` (wrong kind of object) or :class:`ValueError`
(right kind, wrong value) with a message that names the argument, what was expected
and what was received. Nothing is cast or broadcast silently.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = [
    "as_rng",
    "check_pm1",
    "check_operator",
    "check_prob_vector",
    "check_quality",
    "check_positive_int",
    "check_nonneg_int",
    "check_real",
    "check_in_range",
    "check_choice",
    "check_operator_list",
    "check_count",
    "as_float_array",
]


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"array of dtype {x.dtype} and shape {x.shape}"
    return f"{type(x).__name__} {x!r}"[:120]


def as_rng(rng: Any, name: str = "rng") -> np.random.Generator:
    """Return a :class:`numpy.random.Generator` from a Generator or an int seed.

    ``None`` is accepted only where a function documents it (it then means a fresh,
    OS-seeded generator); here it is rejected so that results stay reproducible.
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (bool, np.bool_)):
        raise TypeError(f"{name} must be a numpy.random.Generator or an int seed, got bool {rng!r}")
    if isinstance(rng, numbers.Integral):
        if int(rng) < 0:
            raise ValueError(f"{name} seed must be a non-negative int, got {rng}")
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"{name} must be a numpy.random.Generator or an int seed, got {_describe(rng)}"
    )


def check_pm1(x: Any, name: str, ndim: int | None = None, allow_empty: bool = False) -> np.ndarray:
    """Check that ``x`` is a numeric array holding only -1 and +1 (no casting of values).

    Returns the array unchanged (integer or float dtype); callers convert explicitly.
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array of +-1 values, got {_describe(x)}")
    if x.dtype == bool or not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
        raise TypeError(f"{name} must have an integer or float dtype holding +-1, got dtype {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {x.shape}")
    if x.size == 0:
        if not allow_empty:
            raise ValueError(f"{name} must not be empty, got shape {x.shape}")
        return x
    bad = (x != 1) & (x != -1)
    if bad.any():
        first = x[bad].ravel()[0]
        raise ValueError(
            f"{name} must contain only -1 and +1, found {int(bad.sum())} other entries (e.g. {first!r})"
        )
    return x


def check_operator_shape(J: Any, name: str = "J") -> None:
    """The O(1) part of :func:`check_operator`: a float numpy array, square, N >= 2.

    The server runs it on every upload and the O(N^2) part once per round, on the aggregate.
    """
    if not isinstance(J, np.ndarray):
        raise TypeError(f"{name} must be a numpy array (N, N), got {_describe(J)}")
    if not np.issubdtype(J.dtype, np.floating):
        raise TypeError(f"{name} must have a float dtype, got dtype {J.dtype}")
    if J.ndim != 2 or J.shape[0] != J.shape[1]:
        raise ValueError(f"{name} must be a square (N, N) array, got shape {J.shape}")
    if J.shape[0] < 2:
        raise ValueError(f"{name} must have N >= 2, got shape {J.shape}")


def _abs_max(J: np.ndarray, rows: int = 256) -> float:
    """``max |J|`` read in blocks of rows (no N x N temporary)."""
    return max((float(np.abs(J[i : i + rows]).max()) for i in range(0, J.shape[0], rows)), default=0.0)


def check_operator(J: Any, name: str = "J", symmetric: bool = True, atol: float = 1e-10) -> np.ndarray:
    """Check a square, finite, float operator (symmetric by default). Returns ``J``.

    Symmetry is checked relative to the operator's scale: ``max |J - J^T| <= atol max |J|``
    (an absolute floor would accept any non-symmetric matrix multiplied by ``1e-12``).
    """
    check_operator_shape(J, name)
    # Blocked checks: never allocate an N x N temporary (a round at N = 10,000 keeps a
    # small constant number of N x N arrays; see benchmarks/README.md). Symmetric operators:
    # one pass over square tiles J[a, b] and J[b, a].T with a <= b, which read memory
    # contiguously (a column slice of a C-ordered array does not), for the asymmetry and
    # finiteness; the scale max |J| is read only when the asymmetry is not zero.
    n = J.shape[0]
    scale = asym = 0.0
    finite = True
    if symmetric:
        tile = 256
        # |A - B^T| goes to one tile buffer: a fresh 512 KB temporary per tile pair is a fresh
        # mapping of the allocator, whose page faults doubled the check's time at N = 10,000.
        # Finiteness comes with the asymmetry: a NaN or inf entry makes |A - B^T| non-finite
        # (inf - inf and NaN - x are NaN, on the diagonal too), so a finite maximum means
        # finite entries; an overflow of two huge finite entries is caught by the count below.
        diff = np.empty((min(tile, n), min(tile, n)))
        with np.errstate(invalid="ignore", over="ignore"):
            for a in range(0, n, tile):
                for b in range(a, n, tile):
                    A = J[a : a + tile, b : b + tile]
                    B = A if b == a else J[b : b + tile, a : a + tile]
                    d = diff[: A.shape[0], : A.shape[1]]
                    np.subtract(A, B.T, out=d)
                    t = float(np.abs(d, out=d).max())
                    if not math.isfinite(t):
                        finite = False
                        break
                    asym = max(asym, t)
                if not finite:
                    break
            if finite and asym > 0.0:
                # the scale max |J|, read only when it decides: for a positive semidefinite
                # operator it is the largest diagonal entry (|J_ij| <= sqrt(J_ii J_jj)), a lower
                # bound in general, so asym within the tolerance of it passes; else one more pass
                scale = float(np.abs(np.diagonal(J)).max())
                if asym > atol * scale:
                    scale = _abs_max(J)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            finite = bool(np.isfinite(J.sum()))  # one pass; a NaN/inf (or overflow) makes it non-finite
    if not finite:
        n_bad = 0
        block = max(1, min(n, 2**22 // n))
        for start in range(0, n, block):
            n_bad += int((~np.isfinite(J[start : start + block])).sum())
        if n_bad:  # always after the tiles; the sum of the other path may overflow on finite entries
            raise ValueError(f"{name} must be finite, found {n_bad} NaN/inf entries")
        if symmetric:  # finite entries whose difference overflows: as asymmetric as it gets
            asym, scale = math.inf, _abs_max(J)
    if symmetric and asym > atol * scale:
        raise ValueError(f"{name} must be symmetric, max |J - J.T| = {asym:.3g} "
                         f"(relative {asym / scale:.3g} of max |J| = {scale:.3g}, tolerance {atol:g})")
    return J


def check_real(x: Any, name: str, finite: bool = True) -> float:
    """Check a real scalar (not bool) and return it as float."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {_describe(x)}")
    v = float(x)
    if finite and not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    return v


def check_in_range(
    x: Any,
    name: str,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Check a real scalar lies in an interval; bounds open or closed as flagged."""
    v = check_real(x, name)
    lo_ok = low is None or (v > low if low_open else v >= low)
    hi_ok = high is None or (v < high if high_open else v <= high)
    if not (lo_ok and hi_ok):
        lb = "(" if low_open else "["
        rb = ")" if high_open else "]"
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        raise ValueError(f"{name} must lie in {lb}{lo}, {hi}{rb}, got {v!r}")
    return v


def check_quality(r: Any, name: str = "r") -> float:
    """Check a channel quality r in (0, 1]."""
    return check_in_range(r, name, 0.0, 1.0, low_open=True)


def check_positive_int(x: Any, name: str, minimum: int = 1) -> int:
    """Check an integer (not bool) >= ``minimum``."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {_describe(x)}")
    if int(x) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {int(x)}")
    return int(x)


def check_nonneg_int(x: Any, name: str) -> int:
    """Check an integer >= 0."""
    return check_positive_int(x, name, minimum=0)


def check_prob_vector(p: Any, name: str, size: int | None = None, atol: float = 1e-9) -> np.ndarray:
    """Check a 1-D float probability vector: finite, non-negative, summing to 1."""
    if not isinstance(p, np.ndarray):
        raise TypeError(f"{name} must be a 1-D numpy array of probabilities, got {_describe(p)}")
    if not (np.issubdtype(p.dtype, np.floating) or np.issubdtype(p.dtype, np.integer)) or p.dtype == bool:
        raise TypeError(f"{name} must have a numeric dtype, got dtype {p.dtype}")
    if p.ndim != 1:
        raise ValueError(f"{name} must be 1-dimensional, got shape {p.shape}")
    if size is not None and p.shape[0] != size:
        raise ValueError(f"{name} must have length {size}, got length {p.shape[0]}")
    if p.size == 0:
        raise ValueError(f"{name} must not be empty")
    if not np.all(np.isfinite(p)):
        raise ValueError(f"{name} must be finite, got {p!r}")
    if np.any(p < 0):
        raise ValueError(f"{name} must be non-negative, got min {float(p.min())!r}")
    s = float(p.sum())
    if abs(s - 1.0) > atol:
        raise ValueError(f"{name} must sum to 1, got sum {s!r}")
    return p.astype(np.float64, copy=False)


def check_choice(x: Any, name: str, choices: tuple[str, ...]) -> str:
    """Check a string option among ``choices``."""
    if not isinstance(x, str):
        raise TypeError(f"{name} must be one of {choices}, got {_describe(x)}")
    if x not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {x!r}")
    return x


def as_float_array(x: Any, name: str) -> np.ndarray:
    """Convert a numeric array-like (array, list, scalar) to float64; strings, booleans and
    non-numeric objects are refused (never parsed or cast)."""
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a numeric array-like, got {_describe(x)}")
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as exc:  # ragged nested sequences
        raise TypeError(f"{name} must be a numeric array-like, got {_describe(x)} ({exc})") from None
    if a.dtype == bool or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        raise TypeError(f"{name} must be a numeric array-like, got {_describe(x)} (dtype {a.dtype})")
    return a.astype(np.float64)


def check_count(x: Any, name: str, maximum: int, minimum: int = 1, why: str = "") -> int:
    """Check an integer in ``[minimum, maximum]``: a cap on a count that sets work or memory."""
    v = check_positive_int(x, name, minimum=minimum)
    if v > maximum:
        raise ValueError(f"{name} must be <= {maximum}{' (' + why + ')' if why else ''}, got {v}")
    return v


def check_operator_list(ops: Any, name: str = "ops", symmetric: bool = False) -> list[np.ndarray]:
    """Check a non-empty list of float (N, N) operators of one shape, each finite.

    Symmetry is the producer's job (:class:`fedlam.protocol.Upload` checks it); set
    ``symmetric`` to check it here too.
    """
    if isinstance(ops, (str, bytes, np.ndarray)) or not isinstance(ops, (list, tuple)):
        raise TypeError(f"{name} must be a list of (N, N) float arrays, got {_describe(ops)}")
    if len(ops) == 0:
        raise ValueError(f"{name} must not be empty (at least one (N, N) operator), got 0 operators")
    out = []
    for i, op in enumerate(ops):
        check_operator(op, f"{name}[{i}]", symmetric=symmetric)
        if op.shape != ops[0].shape:
            raise ValueError(f"{name}[{i}] must have the shape {ops[0].shape} of {name}[0], got {op.shape}")
        out.append(op)
    return out
