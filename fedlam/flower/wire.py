r"""What crosses the wire: encoding of uploaded operators and broadcast patterns.

Pure numpy (no Flower import), so the same code is measured in chapter 13 and used by the
Flower apps. Derived in {ref}`sec-deploy-wire`.

An upload is a symmetric N x N operator. It is sent as its upper triangle (diagonal
included, ``N (N + 1) / 2`` numbers, row-major ``numpy.triu_indices`` order) in one of three
precisions:

* ``"float64"``: exact (the decoded operator equals the client's bit for bit, because the
  protocol's operators -- Hebbian, blended, broadcast, Gaussian-noised -- are exactly
  symmetric);
* ``"float32"`` (the default of :mod:`fedlam.flower`): half the bytes; relative rounding
  ``2**-24`` per entry;
* ``"float16"``: a quarter of the bytes; relative rounding ``2**-11`` per entry (and a
  range of +-65504, far above any operator entry, which lies in [-1, 1]).

or, with ``rank=k``, as its top-k eigenpairs (``k`` eigenvalues in float64 and an
``(N, k)`` eigenvector block in the chosen precision): ``N k`` numbers instead of
``N (N + 1) / 2``, at the cost of dropping everything outside the top-k eigenspace (the bulk the
server's K-hat rule measures).

The broadcast is the list of accepted patterns, ``(K_hat, N)`` int8 +-1, not the N x N
operator ``xi^T xi / N`` (which every client rebuilds exactly with
:func:`fedlam.operators.pattern_operator`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .._validation import _describe, check_choice, check_pm1, check_positive_int

__all__ = [
    "PRECISIONS",
    "encode_operator",
    "decode_operator",
    "operator_nbytes",
    "patterns_nbytes",
    "encode_patterns",
    "decode_patterns",
]

PRECISIONS: tuple[str, ...] = ("float64", "float32", "float16")
_NP = {"float64": np.float64, "float32": np.float32, "float16": np.float16}


def _check_square(op: object, name: str = "operator") -> np.ndarray:
    if not isinstance(op, np.ndarray) or op.ndim != 2 or op.shape[0] != op.shape[1] or op.shape[0] < 2:
        raise ValueError(f"{name} must be a square (N, N) array with N >= 2, got {_describe(op)}")
    if not np.issubdtype(op.dtype, np.floating):
        raise TypeError(f"{name} must be a float array, got {_describe(op)}")
    if not np.all(np.isfinite(op)):
        raise ValueError(f"{name} must be finite")
    return op


def encode_operator(op: np.ndarray, precision: str = "float32", rank: int | None = None) -> dict[str, np.ndarray]:
    """Encode a symmetric operator for the wire.

    Parameters
    ----------
    op : numpy.ndarray
        (N, N) symmetric float operator.
    precision : {"float64", "float32", "float16"}
    rank : int or None
        None: the full upper triangle. ``k`` in [1, N]: the top-k eigenpairs (largest
        eigenvalues).

    Returns
    -------
    dict of str to numpy.ndarray
        ``{"triu": (N(N+1)/2,)}`` or ``{"values": (k,) float64, "vectors": (N, k)}``.
    """
    op = _check_square(op)
    check_choice(precision, "precision", PRECISIONS)
    N = op.shape[0]
    dt = _NP[precision]
    if rank is None:
        iu = np.triu_indices(N)
        return {"triu": np.ascontiguousarray(op[iu].astype(dt))}
    k = check_positive_int(rank, "rank")
    if k > N:
        raise ValueError(f"rank must be <= N = {N}, got {k}")
    vals, vecs = np.linalg.eigh(op.astype(np.float64))
    idx = np.argsort(vals)[::-1][:k]
    return {"values": vals[idx].astype(np.float64), "vectors": np.ascontiguousarray(vecs[:, idx].astype(dt))}


def decode_operator(arrays: Mapping[str, np.ndarray], N: int) -> np.ndarray:
    """Rebuild the float64 (N, N) symmetric operator from :func:`encode_operator` output.

    Raises ``ValueError`` on a malformed payload (wrong keys, sizes, dtypes or non-finite
    entries), naming what was expected and received.
    """
    N = check_positive_int(N, "N", minimum=2)
    if not isinstance(arrays, Mapping):
        raise TypeError(f"arrays must be a mapping of name to array, got {_describe(arrays)}")
    keys = set(arrays)
    if keys == {"triu"}:
        tri = np.asarray(arrays["triu"])
        n_tri = N * (N + 1) // 2
        if tri.shape != (n_tri,) or tri.dtype.name not in PRECISIONS:
            raise ValueError(f"upload 'triu' must be a ({n_tri},) float16/32/64 array for N = {N}, "
                             f"got {_describe(tri)}")
        if not np.all(np.isfinite(tri)):
            raise ValueError("upload 'triu' has non-finite entries")
        out = np.zeros((N, N), dtype=np.float64)
        iu = np.triu_indices(N)
        out[iu] = tri.astype(np.float64)
        il = (iu[1], iu[0])
        out[il] = out[iu]
        return out
    if keys == {"values", "vectors"}:
        vals = np.asarray(arrays["values"])
        vecs = np.asarray(arrays["vectors"])
        if vals.ndim != 1 or vals.dtype != np.float64 or vecs.ndim != 2 or vecs.shape != (N, vals.size) \
                or vecs.dtype.name not in PRECISIONS or vals.size < 1:
            raise ValueError(f"low-rank upload must be values (k,) float64 and vectors ({N}, k), got "
                             f"values {_describe(vals)} and vectors {_describe(vecs)}")
        if not (np.all(np.isfinite(vals)) and np.all(np.isfinite(vecs))):
            raise ValueError("low-rank upload has non-finite entries")
        V = vecs.astype(np.float64)
        out = (V * vals) @ V.T
        return 0.5 * (out + out.T)
    raise ValueError(f"upload must hold either 'triu' or 'values' and 'vectors', got keys {sorted(keys)}")


def operator_nbytes(N: int, precision: str = "float32", rank: int | None = None) -> int:
    """Payload bytes of one encoded upload (array data only, no framing)."""
    N = check_positive_int(N, "N", minimum=2)
    check_choice(precision, "precision", PRECISIONS)
    item = np.dtype(_NP[precision]).itemsize
    if rank is None:
        return N * (N + 1) // 2 * item
    k = check_positive_int(rank, "rank")
    return N * k * item + 8 * k


def patterns_nbytes(K_hat: int, N: int) -> int:
    """Payload bytes of a broadcast of ``K_hat`` int8 patterns of length N."""
    return int(K_hat) * int(N)


def encode_patterns(patterns: np.ndarray) -> np.ndarray:
    """The broadcast: accepted patterns as a C-contiguous int8 (K_hat, N) array."""
    p = check_pm1(patterns, "patterns", ndim=2, allow_empty=True)
    return np.ascontiguousarray(p.astype(np.int8))


def decode_patterns(arr: np.ndarray, N: int) -> np.ndarray:
    """Validate a received broadcast: int8 (K_hat, N) with entries +-1."""
    N = check_positive_int(N, "N", minimum=2)
    if not isinstance(arr, np.ndarray) or arr.dtype != np.int8 or arr.ndim != 2 or arr.shape[1] != N:
        raise ValueError(f"broadcast must be an int8 (K_hat, {N}) array, got {_describe(arr)}")
    return check_pm1(arr, "broadcast", ndim=2, allow_empty=True)
