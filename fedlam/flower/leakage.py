r"""How much of a site's examples an upload gives away: a span-projection attack.

The range of a client's Hebbian operator ``eta^T eta / (N M)`` is the span of its M examples;
for M much smaller than N the only +-1 vectors (close to) that span are the examples
themselves. The attack keeps the top-``k`` eigenvectors ``U`` of the received operator and
iterates ``x <- sign(U U^T x)`` from random +-1 starts; every fixed point that equals an
example (up to its sign) is a recovered example. It measures what a lower precision or a
low-rank encoding of the upload (:mod:`fedlam.flower.wire`) changes for an honest-but-curious
server. Derived in {ref}`sec-deploy-wire`.
"""

from __future__ import annotations

import numpy as np

from .._validation import as_rng, check_pm1, check_positive_int

__all__ = ["span_attack"]


def span_attack(operator: np.ndarray, examples: np.ndarray, k: int, starts: int,
                rng: np.random.Generator | int, iterations: int = 50) -> float:
    """Fraction of ``examples`` recovered exactly (up to sign) from ``operator``.

    Parameters
    ----------
    operator : numpy.ndarray
        (N, N) symmetric: what the server received (decoded).
    examples : numpy.ndarray
        (M, N) +-1: the site's true examples (to score the attack only).
    k : int
        Dimension of the eigenspace the attacker keeps (its guess of M, or the rank sent).
    starts : int
        Random +-1 starting points.
    rng : numpy.random.Generator or int
    iterations : int
        Maximum sign iterations per start.

    Returns
    -------
    float
        Recovered fraction in [0, 1].
    """
    check_pm1(examples, "examples", ndim=2)
    _, N = examples.shape
    if not isinstance(operator, np.ndarray) or operator.shape != (N, N):
        raise ValueError(f"operator must be ({N}, {N}), got shape {getattr(operator, 'shape', None)}")
    k = check_positive_int(k, "k")
    if k > N:
        raise ValueError(f"k must be <= N = {N}, got {k}")
    starts = check_positive_int(starts, "starts")
    gen = as_rng(rng)
    vals, vecs = np.linalg.eigh(operator.astype(np.float64))
    U = vecs[:, np.argsort(vals)[::-1][:k]]
    X = np.where(gen.random((starts, N)) < 0.5, -1.0, 1.0)
    for _ in range(check_positive_int(iterations, "iterations")):
        Y = np.where((X @ U) @ U.T >= 0, 1.0, -1.0)
        if np.array_equal(Y, X):
            break
        X = Y
    ov = np.abs(X @ examples.T.astype(np.float64)) / N  # (starts, M)
    return float(np.mean(ov.max(axis=0) == 1.0))
