"""The single-layer Hopfield memory: energy, retrieval dynamics and a capacity experiment.

This is the baseline model of the book's first chapter, kept separate from the federated
pipeline. Conventions follow the source paper: the energy is
``E(sigma) = - sum_ij J_ij sigma_i sigma_j`` (no factor 1/2) and Hebb's rule stores ``K``
patterns as ``J = xi^T xi / N`` (so ``J_ii = K / N``; the classical capacity analysis uses
the same matrix with its diagonal removed).

Ties (a local field exactly 0) keep the current spin in every update rule below, so a state
never changes without lowering the energy (asynchronous) or the two-time Lyapunov function
(synchronous). A computed field counts as a tie when it lies within the worst-case rounding
error of its floating-point dot product, ``|h_i| <= gamma_N sum_j |J_ij|`` with
``gamma_N = N u / (1 - N u)`` and ``u`` the unit roundoff (Higham, *Accuracy and Stability
of Numerical Algorithms*, eq. 3.4): below that bound the sign of the exact field is not
determined by the computed one. Hebbian couplings make exact ties common (every field is a
multiple of 1/N, and an even number of patterns can cancel), and without this rule their
computed sign would depend on the BLAS kernel's summation order. Outside the bound the
computed sign is the exact sign, so the dynamics is that of exact arithmetic.

Derived in {ref}`sec-hopfield`; Hebb's rule in {ref}`sec-hebb`; capacity in
{ref}`sec-capacity`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedlam._validation import (
    as_rng,
    check_choice,
    check_in_range,
    check_operator,
    check_pm1,
    check_positive_int,
)
from fedlam.data import _check_alloc

__all__ = [
    "energy",
    "hebbian_patterns",
    "sync_step",
    "async_sweep",
    "retrieve",
    "RetrievalResult",
    "corrupt",
    "overlap",
    "retrieval_experiment",
    "RetrievalExperiment",
    "capacity_curve",
    "CapacityResult",
]


def _as_states(sigma: np.ndarray, N: int, name: str = "sigma") -> tuple[np.ndarray, bool]:
    """Validate ``sigma`` (N,) or (S, N) of +-1 and return a float64 (S, N) copy and a 1-D flag."""
    check_pm1(sigma, name)
    if sigma.ndim not in (1, 2) or sigma.shape[-1] != N:
        raise ValueError(f"{name} must have shape (N,) or (S, N) with N={N}, got shape {sigma.shape}")
    one_d = sigma.ndim == 1
    S = np.array(sigma, dtype=np.float64, ndmin=2, copy=True)
    return S, one_d


def energy(J: np.ndarray, sigma: np.ndarray) -> float | np.ndarray:
    """Hopfield energy ``E(sigma) = - sigma^T J sigma`` (the paper's convention, no 1/2).

    Derived in {ref}`sec-hopfield`.

    Parameters
    ----------
    J : ndarray (N, N)
        Symmetric float coupling matrix.
    sigma : ndarray (N,) or (S, N)
        One state or a batch of states with entries +-1.

    Returns
    -------
    float or ndarray (S,)
        The energy of each state.
    """
    check_operator(J, "J")
    S, one_d = _as_states(sigma, J.shape[0])
    E = -np.einsum("si,si->s", S @ J, S)
    return float(E[0]) if one_d else E


def hebbian_patterns(patterns: np.ndarray, zero_diagonal: bool = False) -> np.ndarray:
    """Hebb's rule for stored patterns: ``J = xi^T xi / N`` (paper eq. (2.2)).

    Derived in {ref}`sec-hebb`.

    Parameters
    ----------
    patterns : ndarray (K, N)
        Patterns with entries +-1.
    zero_diagonal : bool
        If True set ``J_ii = 0`` (the convention of the classical capacity analysis);
        otherwise ``J_ii = K / N`` as in the paper.

    Returns
    -------
    ndarray (N, N) float64
    """
    check_pm1(patterns, "patterns", ndim=2)
    if not isinstance(zero_diagonal, (bool, np.bool_)):
        raise TypeError(f"zero_diagonal must be a bool, got {type(zero_diagonal).__name__}")
    N = patterns.shape[1]
    _check_alloc(N * N, 8, f"N x N = {N} x {N} (coupling matrix)")
    X = patterns.astype(np.float64)
    J = X.T @ X / N
    if zero_diagonal:
        np.fill_diagonal(J, 0.0)
    return J


_UNIT_ROUNDOFF = float(np.finfo(np.float64).eps) / 2.0


def _tie_tolerance(J: np.ndarray) -> np.ndarray:
    """Per-neuron bound on the rounding error of a computed field ``h_i = sum_j J_ij s_j``.

    ``gamma_N sum_j |J_ij|`` (any summation order, FMA or not), see the module notes.
    """
    n = J.shape[0]
    gamma = n * _UNIT_ROUNDOFF / (1.0 - n * _UNIT_ROUNDOFF)
    return gamma * np.abs(J).sum(axis=0)


def _sign_keep(h: np.ndarray, current: np.ndarray, tol: np.ndarray | float = 0.0) -> np.ndarray:
    """``sgn(h)`` with ties (``|h| <= tol``) resolved by keeping ``current``."""
    out = np.sign(h)
    tie = np.abs(h) <= tol
    out[tie] = current[tie]
    return out


def sync_step(J: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """One synchronous update ``sigma <- sgn(J sigma)`` of every neuron at once.

    Derived in {ref}`sec-hopfield` (it lowers the two-time function ``-||J sigma||_1``,
    and can end in a 2-cycle).

    Parameters
    ----------
    J : ndarray (N, N)
    sigma : ndarray (N,) or (S, N) of +-1

    Returns
    -------
    ndarray, same shape as ``sigma``, int8
    """
    check_operator(J, "J")
    S, one_d = _as_states(sigma, J.shape[0])
    out = _sign_keep(S @ J, S, _tie_tolerance(J)).astype(np.int8)
    return out[0] if one_d else out


def _async_sweep_f(J: np.ndarray, S: np.ndarray, order: np.ndarray, tol: np.ndarray) -> int:
    """In-place asynchronous sweep of float states ``S`` (S, N); returns the number of flips.

    ``tol`` is :func:`_tie_tolerance` of ``J`` (fields within it are ties: keep the spin).
    """
    flips = 0
    for i in order:
        h = S @ J[:, i]
        new = np.sign(h)
        tie = np.abs(h) <= tol[i]
        new[tie] = S[tie, i]
        changed = new != S[:, i]
        if changed.any():
            flips += int(changed.sum())
            S[:, i] = new
    return flips


def async_sweep(J: np.ndarray, sigma: np.ndarray, rng: np.random.Generator | int) -> np.ndarray:
    """One asynchronous sweep: neurons updated one at a time, in a random order.

    Every state of a batch uses the same random order (one order per sweep).
    Derived in {ref}`sec-hopfield` (with ``J_ii >= 0`` each flip strictly lowers the energy).

    Parameters
    ----------
    J : ndarray (N, N)
    sigma : ndarray (N,) or (S, N) of +-1
    rng : Generator or int seed

    Returns
    -------
    ndarray, same shape as ``sigma``, int8
    """
    check_operator(J, "J")
    gen = as_rng(rng)
    S, one_d = _as_states(sigma, J.shape[0])
    _async_sweep_f(J, S, gen.permutation(J.shape[0]), _tie_tolerance(J))
    out = S.astype(np.int8)
    return out[0] if one_d else out


@dataclass(frozen=True)
class RetrievalResult:
    """Outcome of :func:`retrieve`.

    Attributes
    ----------
    states : ndarray int8, shape of the cue
        Final states.
    energies : ndarray (n_sweeps + 1, S)
        Energy of every state after each sweep (row 0: the cue).
    n_sweeps : int
        Sweeps performed.
    converged : bool
        True if the last sweep changed nothing (a fixed point for every state).
    """

    states: np.ndarray
    energies: np.ndarray
    n_sweeps: int
    converged: bool


def retrieve(
    J: np.ndarray,
    cue: np.ndarray,
    rng: np.random.Generator | int,
    max_sweeps: int = 50,
    mode: str = "async",
) -> RetrievalResult:
    """Run zero-temperature Hopfield dynamics from a cue until a fixed point (or ``max_sweeps``).

    Derived in {ref}`sec-hopfield`.

    Parameters
    ----------
    J : ndarray (N, N)
        Symmetric coupling matrix.
    cue : ndarray (N,) or (S, N) of +-1
        Initial state(s); a batch is run in parallel.
    rng : Generator or int seed
        Drives the asynchronous update order (unused for ``mode="sync"``).
    max_sweeps : int
        Upper bound on the number of sweeps (one sweep = N single-neuron updates, or one
        synchronous step).
    mode : {"async", "sync"}

    Returns
    -------
    RetrievalResult
    """
    check_operator(J, "J")
    gen = as_rng(rng)
    max_sweeps = check_positive_int(max_sweeps, "max_sweeps")
    check_choice(mode, "mode", ("async", "sync"))
    S, one_d = _as_states(cue, J.shape[0], "cue")
    energies = [-np.einsum("si,si->s", S @ J, S)]
    tol = _tie_tolerance(J)
    converged = False
    n = 0
    for n in range(1, max_sweeps + 1):  # noqa: B007  (n is read after the loop: the sweep count)
        if mode == "async":
            flips = _async_sweep_f(J, S, gen.permutation(J.shape[0]), tol)
        else:
            new = _sign_keep(S @ J, S, tol)
            flips = int((new != S).sum())
            S = new
        energies.append(-np.einsum("si,si->s", S @ J, S))
        if flips == 0:
            converged = True
            break
    states = S.astype(np.int8)
    return RetrievalResult(
        states=states[0] if one_d else states,
        energies=np.array(energies),
        n_sweeps=n,
        converged=converged,
    )


def corrupt(patterns: np.ndarray, flip_fraction: float, rng: np.random.Generator | int) -> np.ndarray:
    """Flip exactly ``round(flip_fraction * N)`` randomly chosen bits of each pattern.

    Unlike the bit-flip channel of :func:`fedlam.data.flip_channel` (independent flips),
    the number of flipped bits is fixed, so the cue's overlap with its pattern is exactly
    ``1 - 2 * round(flip_fraction * N) / N``. Used in {ref}`sec-hebb`.

    Parameters
    ----------
    patterns : ndarray (N,) or (K, N) of +-1
    flip_fraction : float in [0, 1]
    rng : Generator or int seed

    Returns
    -------
    ndarray int8, same shape as ``patterns``
    """
    check_pm1(patterns, "patterns")
    if patterns.ndim not in (1, 2):
        raise ValueError(f"patterns must have shape (N,) or (K, N), got shape {patterns.shape}")
    p = check_in_range(flip_fraction, "flip_fraction", 0.0, 1.0)
    gen = as_rng(rng)
    X = np.array(patterns, dtype=np.int8, ndmin=2, copy=True)
    K, N = X.shape
    n_flip = round(p * N)
    for k in range(K):
        idx = gen.choice(N, size=n_flip, replace=False)
        X[k, idx] = -X[k, idx]
    return X[0] if patterns.ndim == 1 else X


def overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray | float:
    """Signed overlap ``m = a . b / N`` between +-1 states (row-wise for 2-D inputs of equal shape)."""
    check_pm1(a, "a")
    check_pm1(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {a.shape} and {b.shape}")
    m = np.sum(a.astype(np.float64) * b, axis=-1) / a.shape[-1]
    return float(m) if np.ndim(m) == 0 else m


@dataclass(frozen=True)
class RetrievalExperiment:
    """Outcome of :func:`retrieval_experiment` (one row per stored pattern)."""

    initial_overlap: np.ndarray
    final_overlap: np.ndarray
    n_sweeps: int
    N: int
    K: int
    flip_fraction: float


def retrieval_experiment(
    N: int,
    K: int,
    flip_fraction: float,
    rng: np.random.Generator | int,
    max_sweeps: int = 30,
    zero_diagonal: bool = True,
) -> RetrievalExperiment:
    """Store ``K`` random patterns by Hebb's rule, corrupt each, retrieve, and measure overlaps.

    A pure function of its arguments (used by the chapter's widget). Derived in
    {ref}`sec-hebb`.

    Parameters
    ----------
    N, K : int
        Neurons and stored patterns.
    flip_fraction : float in [0, 1]
        Fraction of bits flipped in each cue.
    rng : Generator or int seed
    max_sweeps : int
    zero_diagonal : bool
        Remove the Hebbian self-couplings (classical convention).

    Returns
    -------
    RetrievalExperiment
    """
    N = check_positive_int(N, "N", minimum=2)
    K = check_positive_int(K, "K")
    _check_alloc(max(N * N, 2 * K * N), 8, f"N = {N}, K = {K} (couplings and patterns)")
    gen = as_rng(rng)
    xi = np.where(gen.random((K, N)) < 0.5, -1, 1).astype(np.int8)
    J = hebbian_patterns(xi, zero_diagonal=zero_diagonal)
    cues = corrupt(xi, flip_fraction, gen)
    res = retrieve(J, cues, gen, max_sweeps=max_sweeps)
    return RetrievalExperiment(
        initial_overlap=np.atleast_1d(overlap(cues, xi)),
        final_overlap=np.atleast_1d(overlap(res.states, xi)),
        n_sweeps=res.n_sweeps,
        N=N,
        K=K,
        flip_fraction=float(flip_fraction),
    )


@dataclass(frozen=True)
class CapacityResult:
    """Outcome of :func:`capacity_curve`.

    Attributes
    ----------
    alphas : ndarray (A,)
        Loads ``K / N`` actually used (``K = round(alpha N)``).
    mean_overlap : ndarray (A,)
        Mean final overlap with the pattern the dynamics started from.
    fraction_retrieved : ndarray (A,)
        Fraction of patterns whose final overlap exceeds ``threshold``.
    N : int
    threshold : float
    """

    alphas: np.ndarray
    mean_overlap: np.ndarray
    fraction_retrieved: np.ndarray
    N: int
    threshold: float


def capacity_curve(
    N: int,
    alphas: np.ndarray,
    rng: np.random.Generator | int,
    n_trials: int = 1,
    max_sweeps: int = 30,
    zero_diagonal: bool = True,
    threshold: float = 0.9,
) -> CapacityResult:
    """Start asynchronous dynamics exactly at each stored pattern and measure where it ends.

    Below the storage capacity ``alpha_c ~ 0.138`` (Amit, Gutfreund and Sompolinsky) the
    patterns sit next to stable states (final overlap ~ 0.97 or higher); above it the
    dynamics wanders away. Derived in {ref}`sec-capacity`.

    Parameters
    ----------
    N : int
        Neurons.
    alphas : ndarray (A,)
        Loads ``K / N`` in (0, 1].
    rng : Generator or int seed
    n_trials : int
        Independent pattern sets per load (results averaged over all patterns of all trials).
    max_sweeps : int
    zero_diagonal : bool
        Remove Hebbian self-couplings (the convention of the classical result).
    threshold : float
        Overlap above which a pattern counts as retrieved.

    Returns
    -------
    CapacityResult
    """
    N = check_positive_int(N, "N", minimum=2)
    n_trials = check_positive_int(n_trials, "n_trials")
    thr = check_in_range(threshold, "threshold", -1.0, 1.0)
    if not isinstance(alphas, np.ndarray) or alphas.ndim != 1 or alphas.size == 0:
        raise ValueError(f"alphas must be a non-empty 1-D numpy array, got {alphas!r}")
    if np.any(~np.isfinite(alphas)) or np.any(alphas <= 0) or np.any(alphas > 1):
        raise ValueError(f"alphas must lie in (0, 1], got {alphas!r}")
    Ks = np.maximum(1, np.rint(alphas * N).astype(int))
    _check_alloc(max(N * N, 2 * int(Ks.max()) * N), 8,
                 f"N = {N}, alpha = {float(alphas.max())} (couplings and patterns)")
    gen = as_rng(rng)
    mean_m = np.empty(Ks.size)
    frac = np.empty(Ks.size)
    for a, K in enumerate(Ks):
        ms = []
        for _ in range(n_trials):
            xi = np.where(gen.random((K, N)) < 0.5, -1, 1).astype(np.int8)
            J = hebbian_patterns(xi, zero_diagonal=zero_diagonal)
            res = retrieve(J, xi, gen, max_sweeps=max_sweeps)
            ms.append(np.atleast_1d(overlap(res.states, xi)))
        m = np.concatenate(ms)
        mean_m[a] = m.mean()
        frac[a] = np.mean(m > thr)
    return CapacityResult(
        alphas=Ks / N, mean_overlap=mean_m, fraction_retrieved=frac, N=N, threshold=thr
    )
