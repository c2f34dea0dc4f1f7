r"""Privacy of operator uploads: what one upload reveals, and a differential-privacy defence.

A client uploads ``J_c = eta^T eta / (N M)`` instead of its examples ``eta`` (M, N). This module
measures and bounds what that reveals, in three parts.

**The leak** (Derived in {ref}`sec-privacy-leak`). The range of ``J_c`` is the span of the M
examples; for ``M`` well below ``N`` the only +-1 vectors in that span are +-the examples
{cite:p}`odlyzko1988`, and :func:`reconstruct_examples` finds them. A later-round upload
``U = w B + (1 - w) A`` (``A`` the public broadcast) gives the raw operator ``B`` back exactly
(:func:`unblend`).

**The defence** (Derived in {ref}`sec-privacy-dp`). Under *replace-one* neighbouring (two batches
of the same public size M differing in one example), the upper triangle of ``J_c`` has L2
sensitivity ``2 sqrt(floor(N/2) ceil(N/2)) / (N M) <= 1/M`` (:func:`sensitivity`); its diagonal is
the constant ``1/N`` and needs no noise. :func:`gaussian_mechanism` adds symmetric Gaussian noise
of entry std :func:`noise_scale` to the off-diagonal entries; composition over the rounds in
which an example is used is exact for Gaussian mechanisms (a ``T``-fold composition of Gaussian
mechanisms with sensitivity ``Delta`` and std ``sigma`` is one Gaussian mechanism with
sensitivity ``sqrt(T) Delta``), and :func:`epsilon_delta` evaluates it with the analytic Gaussian
mechanism {cite:p}`balle2018` or, for comparison, with Google's ``dp-accounting`` PLD and RDP
accountants.

**The cost** (Derived in {ref}`sec-privacy-frontier`). The noise is a semicircle of eigenvalue
variance ``s^2 = N sigma^2`` added to the spiked Marchenko-Pastur spectrum of the aggregate. By
subordination, a spike whose noiseless outlier sits at ``l_W`` (where the Cauchy transform of
the bulk is ``g = 1 / (a (kappa + q))``) keeps an outlier iff ``s^2 < s_c^2 = a^2 (kappa + q)^2
(1 - q / kappa^2)`` (:func:`critical_noise`); the outlier moves to ``l_W + s^2 g`` and its squared
eigenvector overlap shrinks by the factor ``1 - s^2 / s_c^2`` (:func:`noisy_outlier`).
:func:`epsilon_threshold` turns ``s_c`` into the smallest ``epsilon`` that keeps an archetype
visible; :func:`example_critical_noise` gives the noise that drowns the span of the examples, and
:func:`privacy_window` the window between the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, special

from fedlam import rmt
from fedlam._validation import (
    _describe,
    as_float_array,
    as_rng,
    check_choice,
    check_in_range,
    check_operator,
    check_positive_int,
    check_quality,
    check_real,
)

__all__ = [
    "AttackResult",
    "attack",
    "reconstruct_examples",
    "unblend",
    "sensitivity",
    "epsilon_delta",
    "noise_scale",
    "add_symmetric_noise",
    "gaussian_mechanism",
    "mean_noise_var",
    "critical_noise",
    "noisy_outlier",
    "noisy_edge",
    "example_critical_noise",
    "epsilon_for_noise",
    "epsilon_threshold",
    "PrivacyWindow",
    "privacy_window",
    "ACCOUNTANTS",
    "factorize_noised",
    "GaussianMechanism",
    "CLIENT_VARIANTS",
    "upload_norm",
    "client_noise_multiplier",
    "clip_operator",
    "add_client_noise",
    "ClientLevelMechanism",
    "client_level_threshold",
]

ACCOUNTANTS = ("analytic", "pld", "rdp")
_EPS = np.finfo(np.float64).eps


# ----------------------------------------------------------------------------------------
# argument checks specific to this module
def _check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    v = check_real(epsilon, name, finite=False)
    if math.isnan(v) or not v > 0 or math.isinf(v):
        raise ValueError(f"{name} must be a finite real > 0, got {epsilon!r}")
    return v


def _check_delta(delta: Any, name: str = "delta") -> float:
    v = check_real(delta, name, finite=False)
    if math.isnan(v) or not (0.0 < v < 1.0):
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {delta!r}")
    return v


def _check_sigma(sigma: Any, name: str = "sigma", allow_zero: bool = True) -> float:
    v = check_real(sigma, name)
    if v < 0 or (v == 0 and not allow_zero):
        rel = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {rel}, got {sigma!r}")
    return v


# ----------------------------------------------------------------------------------------
# the leak: example reconstruction from one operator
@dataclass(frozen=True)
class AttackResult:
    """Outcome of :func:`attack`.

    Attributes
    ----------
    examples : numpy.ndarray
        int8 (M', N) recovered +-1 vectors, each with first entry +1 (an operator cannot tell
        ``x`` from ``-x``), in order of discovery.
    residuals : numpy.ndarray
        (M',) ``1 - ||P x||^2 / N`` of each against the range it was found in (0 for an exact
        member of the range, up to rounding).
    multiplicities : numpy.ndarray
        (M',) float ``N M / (x^T J^+ x)``: for an exact operator and a true example, the number
        of times it occurs in the batch (1.0 up to rounding). Necessary, not sufficient: most
        +-1 vectors of the span that are not examples give a non-integer, but some give an
        integer (``(x_1 + x_2 + x_3 + x_4)/2`` for four examples split 3:1 at every site has 1,
        see {ref}`sec-privacy-leak`).
    tol : float
        Range tolerance used (see :func:`attack`).
    rank : int
        Dimension of the range attacked (``min(M, numerical rank)``).
    rounds : int
        Restart rounds run (each followed by deflation of what it found).
    restarts : int
        Total number of restarts (starting states).
    field_evals : int
        Total number of (state, step) field evaluations; each costs ``O(N r)`` with ``r`` the
        dimension of the current range (the attack's cost, independent of the machine).
    n_non_examples : int
        +-1 vectors found in the range whose multiplicity is not an integer (signed combinations
        of nearly equal examples, exact operators only): dropped.
    """

    examples: np.ndarray
    residuals: np.ndarray
    multiplicities: np.ndarray
    tol: float
    rank: int
    rounds: int
    restarts: int
    field_evals: int
    n_non_examples: int = 0

    def __repr__(self) -> str:
        return (f"AttackResult(found={self.examples.shape[0]}, N={self.examples.shape[1]}, "
                f"rank={self.rank}, tol={self.tol:.3g}, rounds={self.rounds}, "
                f"restarts={self.restarts}, field_evals={self.field_evals})")


def _range_tolerance(N: int, r: int, lam_max: float, lam_min: float, noise_sigma: float) -> float:
    """Largest residual ``1 - ||P x||^2 / N`` accepted for a member of the range.

    An exact member ``x`` of the range of ``J`` has residual ``||(I - P_hat) x||^2 / N <=
    sin^2 Theta`` for the computed projector ``P_hat``. Davis-Kahan bounds ``sin Theta <= ||E|| /
    gap`` with ``E`` the perturbation of ``J`` and ``gap = lam_min`` (the smallest kept eigenvalue;
    the next one is 0 for an exact operator): rounding in ``eigh`` gives ``||E|| <= N eps
    lam_max``; added noise of entry std ``sigma`` gives ``||E|| ~ 2 sigma sqrt(N)`` (the semicircle
    edge), which also shrinks the gap to ``lam_min - 2 sigma sqrt(N)``. The nearest +-1 vectors
    that are *not* in the range are one bit away from a member and have residual
    ``4 (1 - P_ii) / N ~ 4 (1 - r/N) / N``; the tolerance is the Davis-Kahan bound, floored at
    ``1e-9``, and capped at half of that one-bit residual (beyond which an example cannot be
    told from its one-bit neighbours by the range alone).
    """
    one_bit = 4.0 * (1.0 - r / N) / N
    e = N * _EPS * lam_max + 2.0 * noise_sigma * math.sqrt(N)
    gap = lam_min - 2.0 * noise_sigma * math.sqrt(N)
    dk = (e / gap) ** 2 if gap > 0 else math.inf
    return float(min(max(dk, 1e-9), 0.5 * one_bit))


def attack(
    J: np.ndarray,
    M: int,
    rng: np.random.Generator | int | None = None,
    *,
    restarts: int = 512,
    steps: int = 120,
    temperature: float = 0.5,
    self_coupling: float = 1.25,
    max_rounds: int = 60,
    patience: int = 3,
    tol: float | None = None,
    noise_sigma: float = 0.0,
    deflate: bool = True,
) -> AttackResult:
    r"""Reconstruct the examples of a batch from its Hebbian operator (the strongest attack here).

    Derived in {ref}`sec-privacy-leak`. The attacker knows ``J`` (an upload, or a later-round
    upload passed through :func:`unblend`) and the batch size ``M`` (public under replace-one
    neighbouring). Steps:

    1. the top-``M`` eigenvectors ``U`` of ``J`` span its range ``= span(examples)``;
    2. ``restarts`` random +-1 states run an annealed, zero-diagonal Hopfield dynamics with the
       projector ``P = U U^T`` as couplings (Kanter-Sompolinsky: removing the self-coupling
       ``P_ii x_i`` enlarges the basins of the stored vectors), ``x <- sgn(P x - c diag(P) x
       + T_t z)``, ``z ~ N(0, I)``, ``T_t`` decreasing linearly from ``temperature`` to 0 over
       the first 70 % of ``steps``;
    3. a final state is kept if it lies in the range up to ``tol``
       (``1 - ||U^T x||^2 / N <= tol``);
    4. certificate (exact operators): ``J = sum_m w_m x_m x_m^T`` over the distinct examples with
       ``w_m = (copies of x_m) / (N M)``, so ``N M / (x^T J^+ x)`` is a positive integer for an
       example and usually a fraction for another +-1 vector of the span (e.g. 1/3 for
       ``x_a - x_b + x_c``, which is +-1 when three examples nearly coincide); non-integers are
       dropped. The test is necessary, not sufficient (a combination with ``sum_j c_j^2 = 1``,
       e.g. ``(x_1 + ... + x_4)/2`` for four examples split 3:1 at every site, passes it);
    5. deflation: each kept ``x`` is removed from the operator *exactly*, ``J <- J - t x x^T``
       with ``t = 1 / (x^T J^+ x)``, the largest ``t`` keeping ``J`` positive semi-definite; for
       ``J = sum_m w_m x_m x_m^T`` with independent ``x_m`` this is ``t = w_m`` (``1/(N M)`` per
       copy), so the range shrinks to the span of the examples not yet found, and the next
       round attacks a smaller problem;
    6. rounds repeat until the range is exhausted, ``patience`` rounds in a row find nothing,
       or ``max_rounds`` is reached.

    Everything after the first ``eigh`` works in the ``M``-dimensional coordinates of the range
    (``O(restarts * steps * N * M)`` per round).

    Parameters
    ----------
    J : numpy.ndarray
        (N, N) symmetric float operator (a client upload, possibly noised).
    M : int
        Batch size, ``1 <= M <= N``.
    rng : Generator, int or None
        Randomness of the starts and of the annealing noise (None: fresh OS-seeded).
    restarts, steps : int
        Starting states per round; dynamics steps per restart.
    temperature : float
        Initial annealing noise ``T_0 >= 0`` (fields of a stored vector are ~``1 - M/N``).
    self_coupling : float
        ``c``: multiple of ``diag(P)`` removed from the field (0 = plain projector dynamics
        ``sgn(P x)``; 1 = Kanter-Sompolinsky zero diagonal).
    max_rounds, patience : int
        Bounds on the restart rounds.
    tol : float or None
        Range tolerance; None derives it (Davis-Kahan: the rounding of ``eigh`` and the noise,
        floored at 1e-9 and capped at half the residual of a vector one bit away from the range).
    noise_sigma : float
        Entry std of Gaussian noise known to be in ``J`` (enters the derived tolerance; the
        deflation then uses the known weight ``1/(N M)`` per example since a noised operator
        is not positive semi-definite).
    deflate : bool
        Deflate after each round (False: one round of restarts only, the plain attack).

    Returns
    -------
    AttackResult
    """
    check_operator(J, "J")
    N = J.shape[0]
    M = check_positive_int(M, "M")
    if M > N:
        raise ValueError(f"M must be <= N = {N} (the range of J has dimension <= N), got {M}")
    gen = np.random.default_rng() if rng is None else as_rng(rng)
    restarts = check_positive_int(restarts, "restarts")
    steps = check_positive_int(steps, "steps")
    temperature = check_in_range(temperature, "temperature", 0.0, None)
    self_coupling = check_in_range(self_coupling, "self_coupling", 0.0, None)
    max_rounds = check_positive_int(max_rounds, "max_rounds")
    patience = check_positive_int(patience, "patience")
    noise_sigma = _check_sigma(noise_sigma, "noise_sigma")
    if not isinstance(deflate, (bool, np.bool_)):
        raise TypeError(f"deflate must be a bool, got {_describe(deflate)}")
    if tol is not None:
        tol = check_in_range(tol, "tol", 0.0, 1.0, low_open=True)
    if restarts * N > 2**27:
        raise ValueError(f"restarts * N must be <= 2**27 (memory of the state batch), got {restarts * N}")

    w, V = np.linalg.eigh(J)
    order = np.argsort(w)[::-1]
    w, V = w[order], V[:, order]
    lam_max = float(max(w[0], 0.0))
    noiseless = noise_sigma == 0.0
    floor = (N * _EPS * lam_max) if noiseless else 2.0 * noise_sigma * math.sqrt(N)
    rank = min(M, int(np.sum(w > max(floor, 1e-300))))
    empty = AttackResult(np.empty((0, N), dtype=np.int8), np.empty(0), np.empty(0),
                         float(tol) if tol is not None else 0.0, rank, 0, 0, 0)
    if rank == 0:
        return empty
    U = V[:, :rank]
    lam = w[:rank]
    if tol is None:
        tol = _range_tolerance(N, rank, lam_max, float(lam[-1]), noise_sigma)
    C = np.diag(lam)  # J restricted to the range, in the basis U
    unit = 1.0 / (N * M)
    found: list[np.ndarray] = []
    resid: list[float] = []
    mult: list[float] = []
    n_restarts = field_evals = n_rejected = 0
    rounds = idle = 0
    cool = max(1, round(0.7 * steps))
    while rounds < max_rounds and idle < patience:
        ev, W = np.linalg.eigh(C)
        keep = ev > max(floor, 1e-12 * max(float(ev.max(initial=0.0)), 1e-300))
        if not keep.any():
            break
        B = U @ W[:, keep]  # (N, m) orthonormal basis of the remaining range
        d = np.einsum("ij,ij->i", B, B)
        rounds += 1
        X = gen.choice(np.array([-1.0, 1.0]), size=(restarts, N))
        for s in range(steps):
            H = (X @ B) @ B.T - self_coupling * d * X
            T = temperature * max(0.0, 1.0 - s / cool)
            if T > 0:
                H = H + T * gen.standard_normal(X.shape)
            X = np.where(H >= 0.0, 1.0, -1.0)
        n_restarts += restarts
        field_evals += restarts * steps
        Y = X @ B
        res = 1.0 - np.einsum("ij,ij->i", Y, Y) / N
        new = 0
        for i in np.flatnonzero(res <= tol):
            x = X[i] * (1.0 if X[i, 0] > 0 else -1.0)
            if any(abs(float(f @ x)) == N for f in found):
                continue
            c = U.T @ x
            ev2, W2 = np.linalg.eigh(C)
            k2 = ev2 > max(floor, 1e-12 * max(float(ev2.max(initial=0.0)), 1e-300))
            pr = W2[:, k2].T @ c
            if (float(c @ c) - float(pr @ pr)) / N > tol:
                # found in this round's range but outside what is left after this round's
                # deflations (a combination involving examples already removed)
                n_rejected += 1
                continue
            xjx = float(np.sum(pr * pr / ev2[k2]))
            t = 1.0 / xjx if xjx > 0 else math.inf
            k = t / unit
            if noiseless and not (math.isfinite(k) and 0.5 <= k <= M + 0.5 and abs(k - round(k)) <= 1e-6 * max(1.0, k)):
                # a +-1 vector of the span that is not an example: J = sum_m w_m x_m x_m^T with
                # w_m = (copies)/(N M), so an example has an integer multiplicity; a signed
                # combination such as x_a - x_b + x_c (possible when examples nearly coincide)
                # gets 1/3. Neither reported nor deflated.
                n_rejected += 1
                continue
            found.append(x)
            resid.append(float(res[i]))
            mult.append(t / unit)
            new += 1
            if deflate:
                C = C - (t if noiseless else unit) * np.outer(c, c)
                C = 0.5 * (C + C.T)
        idle = 0 if new else idle + 1
        if not deflate or len(found) >= rank:
            break
    ex = np.array(found, dtype=np.int8).reshape(-1, N)
    return AttackResult(ex, np.asarray(resid), np.asarray(mult), float(tol), rank, rounds,
                        n_restarts, field_evals, n_rejected)


def reconstruct_examples(
    J: np.ndarray, M: int, rng: np.random.Generator | int | None = None, **params: Any
) -> np.ndarray:
    """Recovered +-1 examples of the batch behind the operator ``J`` (int8, (M', N)).

    The example-reconstruction attack of :func:`attack` (which documents ``params`` and returns
    the cost and the certificates too). Each row has first entry +1: an operator determines its
    examples only up to sign. Derived in {ref}`sec-privacy-leak`.
    """
    return attack(J, M, rng, **params).examples


def unblend(U: np.ndarray, A: np.ndarray, *, atol: float = 1e-9) -> tuple[np.ndarray, float]:
    r"""Recover the raw operator ``B`` and the weight ``w`` from a blended upload ``U = w B + (1 - w) A``.

    Derived in {ref}`sec-privacy-unblend`. ``A = xi_hat^T xi_hat / N`` is the public broadcast of
    ``K_hat`` patterns (so ``diag A = K_hat / N``) and ``B`` a Hebbian operator (``diag B = 1/N``).

    * ``K_hat != 1``: ``tr U = w + (1 - w) K_hat`` gives ``w = (K_hat - tr U) / (K_hat - 1)``
      (``K_hat = 0``, nothing broadcast, gives ``w = tr U``).
    * ``K_hat = 1``: the trace is 1 whatever ``w``. Then ``U - c A`` has the rank of ``B`` only
      for ``c = 1 - w``: with ``a = xi_hat / sqrt(N)`` outside the range of ``B``,
      ``U`` has rank ``rank(B) + 1`` and ``1 - w = 1 / (a^T U^+ a)`` (the largest ``c`` keeping
      ``U - c a a^T`` positive semi-definite); ``a`` outside the range of ``U`` means ``w = 1``.
      This needs ``rank(B) < N`` and a noiseless
      ``B``; otherwise ``w`` is not identifiable from ``U`` and ``A`` and a ``ValueError`` is
      raised.

    Then ``B = (U - (1 - w) A) / w``.

    Parameters
    ----------
    U, A : numpy.ndarray
        (N, N) symmetric float operators.
    atol : float
        Tolerance of the consistency checks (``tr A`` an integer, ``w`` in [0, 1]).

    Returns
    -------
    B : numpy.ndarray
        float64 (N, N).
    w : float

    Raises
    ------
    ValueError
        When ``w = 0`` (the upload carries no fresh operator), when ``w`` is not identifiable
        (``K_hat = 1`` with a full-rank upload), or when ``U``/``A`` are inconsistent with a blend.
    """
    check_operator(U, "U")
    check_operator(A, "A")
    if U.shape != A.shape:
        raise ValueError(f"U and A must have the same shape, got {U.shape} and {A.shape}")
    atol = check_in_range(atol, "atol", 0.0, None, low_open=True)
    N = U.shape[0]
    trA = float(np.trace(A))
    K = round(trA)
    if abs(trA - K) > atol * max(1.0, abs(trA)) or K < 0:
        raise ValueError(f"A must be a broadcast xi^T xi / N with integer trace K_hat >= 0, got tr A = {trA!r}")
    trU = float(np.trace(U))
    if K != 1:
        w = (K - trU) / (K - 1)
    else:
        vals, vecs = np.linalg.eigh(U)
        top = float(max(abs(vals[0]), abs(vals[-1]), 1e-300))
        keep = vals > 1e3 * N * _EPS * top
        if vals.min() < -1e3 * N * _EPS * top or keep.sum() >= N:
            raise ValueError(
                "w is not identifiable: the broadcast has K_hat = 1 (tr U = 1 whatever w) and U is "
                f"full-rank or indefinite (rank {int(keep.sum())} of N = {N}), so no rank drop "
                "fixes w (a noised or M >= N upload)"
            )
        av, aV = np.linalg.eigh(A)
        a = aV[:, -1] * math.sqrt(max(av[-1], 0.0))
        pr = vecs[:, keep].T @ a
        resid = float(a @ a - pr @ pr)
        if resid > 1e-6 * float(a @ a):
            w = 1.0  # no component along the broadcast: U = B (w = 1, e.g. a fresh client)
        else:
            w = 1.0 - 1.0 / float(np.sum(pr * pr / vals[keep]))
    if not (-atol <= w <= 1.0 + atol):
        raise ValueError(f"U is not a blend w B + (1 - w) A of a Hebbian B (diag 1/N): got w = {w!r}")
    w = min(max(w, 0.0), 1.0)
    if w <= atol:
        raise ValueError(f"w = {w:.3g}: the upload equals the broadcast and carries no fresh operator")
    B = (U - (1.0 - w) * A) / w
    return B, float(w)


# ----------------------------------------------------------------------------------------
# the defence: sensitivity, accounting, the Gaussian mechanism
def sensitivity(M: int, N: int | None = None) -> float:
    r"""L2 sensitivity of the upper triangle of ``J_c`` under replacing one example.

    Derived in {ref}`sec-privacy-dp`. Replacing ``eta`` by ``eta'`` changes entry ``(i, j)`` by
    ``(eta'_i eta'_j - eta_i eta_j) / (N M) in {0, +-2/(N M)}``; it changes iff exactly one of
    ``i, j`` is among the ``d`` flipped coordinates, i.e. for ``d (N - d)`` pairs ``i < j``. The
    diagonal never changes (``eta_i^2 = 1``). So ``Delta_2 = 2 sqrt(max_d d (N - d)) / (N M) =
    2 sqrt(floor(N/2) ceil(N/2)) / (N M)``: ``1/M`` for even N, ``sqrt(1 - 1/N^2) / M`` for odd N.

    Parameters
    ----------
    M : int
        Batch size (public), >= 1.
    N : int or None
        Dimension; None gives the bound ``1/M`` valid for every N.
    """
    M = check_positive_int(M, "M")
    if N is None:
        return 1.0 / M
    N = check_positive_int(N, "N", minimum=2)
    return 2.0 * math.sqrt((N // 2) * (N - N // 2)) / (N * M)


def _log_delta_gaussian(mu: float, eps: float) -> float:
    """``log delta(eps)`` of the Gaussian mechanism with ``mu = Delta / sigma`` (Balle & Wang eq. 6).

    ``delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)``, computed in log space.
    """
    a = special.log_ndtr(mu / 2.0 - eps / mu)
    b = eps + special.log_ndtr(-mu / 2.0 - eps / mu)
    if b >= a:
        return -math.inf
    return float(a + np.log1p(-math.exp(b - a)))


def epsilon_delta(
    sigma: float, M: int, epsilon: float, rounds: int = 1, *, N: int | None = None,
    accountant: str = "analytic",
) -> float:
    r"""``delta`` such that ``rounds`` uploads noised with entry std ``sigma`` are ``(epsilon, delta)``-DP.

    Derived in {ref}`sec-privacy-dp`. With ``mu = sqrt(rounds) Delta / sigma`` (``Delta`` from
    :func:`sensitivity`) the privacy loss of the composition is exactly that of one Gaussian
    mechanism with ratio ``mu`` {cite:p}`dong2022`, whose tight ``delta`` is
    ``Phi(mu/2 - epsilon/mu) - e^epsilon Phi(-mu/2 - epsilon/mu)`` {cite:p}`balle2018`
    (``accountant="analytic"``). ``"pld"`` and ``"rdp"`` ask Google's ``dp-accounting`` (privacy
    loss distributions, exact up to discretisation; Renyi DP, an upper bound) for the same
    composition.
    """
    sigma = _check_sigma(sigma, "sigma", allow_zero=False)
    epsilon = _check_epsilon(epsilon)
    rounds = check_positive_int(rounds, "rounds")
    accountant = check_choice(accountant, "accountant", ACCOUNTANTS)
    z = sigma / sensitivity(M, N)  # noise multiplier per round
    if accountant == "analytic":
        return float(math.exp(_log_delta_gaussian(math.sqrt(rounds) / z, epsilon)))
    acc = _dp_accountant(accountant)
    import dp_accounting

    ev = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), rounds)
    return float(acc.compose(ev).get_delta(epsilon))


def _dp_accountant(name: str) -> Any:
    try:
        from dp_accounting.pld import pld_privacy_accountant
        from dp_accounting.rdp import rdp_privacy_accountant
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"accountant={name!r} needs the 'dp-accounting' package (pip install dp-accounting); "
            "accountant='analytic' needs nothing beyond scipy"
        ) from exc
    if name == "pld":
        return pld_privacy_accountant.PLDAccountant()
    return rdp_privacy_accountant.RdpAccountant()


def noise_scale(
    M: int, epsilon: float, delta: float, rounds: int = 1, *, N: int | None = None,
    accountant: str = "analytic",
) -> float:
    r"""Entry std ``sigma`` of the symmetric Gaussian noise making an upload ``(epsilon, delta)``-DP.

    Derived in {ref}`sec-privacy-dp`. Neighbouring relation: two batches of the same public size
    ``M`` that differ in one example (replace-one). The noise is added to each off-diagonal entry
    of the upper triangle (and mirrored); the diagonal (constant ``1/N``) is released exactly.
    ``rounds`` is the number of uploads in which one example is used: 1 when every round draws
    a fresh batch (disjoint batches compose in parallel), ``T`` when a site reuses its data every
    round. The smallest ``sigma`` with :func:`epsilon_delta` ``<= delta`` is found by bisection
    (Brent) on ``log sigma``.

    Parameters
    ----------
    M : int
        Batch size, >= 1.
    epsilon : float
        > 0.
    delta : float
        In (0, 1).
    rounds : int
        >= 1.
    N : int or None
        Dimension (exact sensitivity for odd N); None uses the bound ``1/M``.
    accountant : {"analytic", "pld", "rdp"}
        See :func:`epsilon_delta` (the dp-accounting ones take ~0.1-1 s per evaluation).

    Returns
    -------
    float
        ``sigma > 0``.
    """
    M = check_positive_int(M, "M")
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    rounds = check_positive_int(rounds, "rounds")
    accountant = check_choice(accountant, "accountant", ACCOUNTANTS)
    Delta = sensitivity(M, N)
    # in units of Delta * sqrt(rounds): one Gaussian mechanism with ratio mu = 1 / z (exact)
    fa = lambda lz: _log_delta_gaussian(math.exp(-lz), epsilon) - math.log(delta)  # noqa: E731
    lo, hi = -8.0, 2.0
    while fa(lo) < 0:
        lo -= 4.0
    while fa(hi) > 0:
        hi += 4.0
    lz = optimize.brentq(fa, lo, hi, xtol=1e-13, rtol=4 * _EPS, maxiter=300)
    z = math.exp(lz) * math.sqrt(rounds)  # noise multiplier sigma / Delta per round
    if accountant != "analytic":
        # bracket around the exact answer (the accountants' grids explode for tiny noise)
        f = lambda lz: math.log(max(epsilon_delta(  # noqa: E731
            math.exp(lz) * Delta, M, epsilon, rounds, N=N, accountant=accountant), 1e-300)) - math.log(delta)
        lo, hi = math.log(z) - 0.05, math.log(z) + 0.5
        while f(lo) < 0:
            lo -= 0.2
        while f(hi) > 0:
            hi += 0.5
        z = math.exp(optimize.brentq(f, lo, hi, xtol=1e-6, maxiter=100))
    return float(z * Delta)


def add_symmetric_noise(J: np.ndarray, sigma: float, rng: np.random.Generator | int) -> np.ndarray:
    """``J + Z`` with ``Z`` symmetric, ``Z_ij = Z_ji ~ N(0, sigma^2)`` for ``i < j``, ``Z_ii = 0``.

    The upper triangle is drawn row-major from one ``(N, N)`` standard normal block (the lower
    part of the block is discarded), so the noise depends only on ``rng`` and ``N``.
    Eigenvalue variance of ``Z``: ``N sigma^2`` (semicircle of radius ``2 sigma sqrt(N)``).
    """
    check_operator(J, "J")
    sigma = _check_sigma(sigma)
    gen = as_rng(rng)
    N = J.shape[0]
    G = gen.standard_normal((N, N))
    Z = np.triu(G, 1)
    Z += Z.T
    Z *= sigma
    Z += J
    return Z


def gaussian_mechanism(
    J: np.ndarray, M: int, epsilon: float, delta: float, rng: np.random.Generator | int,
    rounds: int = 1, *, accountant: str = "analytic", atol: float = 1e-12,
) -> np.ndarray:
    r"""The ``(epsilon, delta)``-DP release of a client's Hebbian operator ``J = eta^T eta / (N M)``.

    Derived in {ref}`sec-privacy-dp`. Adds symmetric Gaussian noise of entry std
    :func:`noise_scale` ``(M, epsilon, delta, rounds, N=N)`` to the off-diagonal entries; the
    diagonal (the constant ``1/N``) is released as is. ``J`` must be a raw Hebbian operator
    (diagonal ``1/N``): the sensitivity is derived for it. A client that blends must noise ``B``
    first and blend the *noised* operator, with a weight computed from the noised operator and
    public broadcasts only (post-processing keeps the guarantee); noising a blended upload is
    refused because its weight ``w`` (readable from the diagonal, :func:`unblend`) would be an
    unprotected function of the data.

    Parameters
    ----------
    J : numpy.ndarray
        (N, N) symmetric Hebbian operator with diagonal ``1/N``.
    M : int
        Its batch size.
    epsilon, delta, rounds, accountant
        See :func:`noise_scale`.
    rng : Generator or int
        Noise randomness.
    atol : float
        Tolerance of the diagonal check.

    Returns
    -------
    numpy.ndarray
        float64 (N, N) symmetric.
    """
    check_operator(J, "J")
    N = J.shape[0]
    diag = np.diagonal(J)
    if not np.all(np.abs(diag - 1.0 / N) <= atol):
        raise ValueError(
            f"J must be a raw Hebbian operator with diagonal 1/N = {1.0 / N:.6g} (noise before blending); "
            f"got diagonal in [{float(diag.min()):.6g}, {float(diag.max()):.6g}]"
        )
    sigma = noise_scale(M, epsilon, delta, rounds, N=N, accountant=accountant)
    return add_symmetric_noise(J, sigma, rng)


@dataclass(frozen=True)
class GaussianMechanism:
    r"""A client's privacy mechanism for :func:`fedlam.federation.run_federation` (``privacy=``).

    Implements the ``apply(operator, batch_size, rng) -> (noised, sigma)`` protocol of
    :class:`fedlam.federation.PrivacyMechanism`: symmetric Gaussian noise of entry std
    :func:`noise_scale` ``(batch_size, epsilon, delta, rounds, N=N)`` on the off-diagonal
    entries. Derived in {ref}`sec-privacy-dp`.

    On a raw Hebbian operator (diagonal ``1/N``) this is :func:`gaussian_mechanism`: the release is
    ``(epsilon, delta)``-DP per example (the protected unit is one example of the batch; for one
    client's whole data see :class:`ClientLevelMechanism`). ``fedlam.federation.Client`` applies
    it to its fresh operator ``B`` *before* anything else: the weight ``w`` (any controller: the
    paper's entropy rule, the spectral-novelty rule, a constant), the blend
    ``w (B + Z) + (1 - w) A`` and the scalars it reports are computed from the noised operator,
    the declared noise and the public broadcast only. The controllers' bulk fit knows the
    declared noise (``fedlam.controller.local_spectrum(..., noise_sigma=)``: the bulk
    ``MP ⊞ semicircle``, {ref}`sec-privacy-weight`), so ``w`` is post-processing of the noised
    operator and the guarantee covers the whole upload, diagonal (which reveals ``w``,
    :func:`unblend`) included. A reported bulk variance is the declared ``1 - r^2`` or none
    (the server then uses the bound 1), never an estimate from the raw examples.

    An empty batch (``batch_size = 0``: the upload is the public broadcast) is passed through
    with ``sigma = 0``.

    Attributes
    ----------
    epsilon : float
        > 0, per example over ``rounds`` uploads.
    delta : float
        In (0, 1).
    rounds : int
        Uploads in which one example is used (1: a fresh batch every round).
    accountant : {"analytic", "pld", "rdp"}
    """

    epsilon: float
    delta: float
    rounds: int = 1
    accountant: str = "analytic"

    def __post_init__(self) -> None:
        _check_epsilon(self.epsilon)
        _check_delta(self.delta)
        check_positive_int(self.rounds, "rounds")
        check_choice(self.accountant, "accountant", ACCOUNTANTS)

    def sigma(self, batch_size: int, N: int | None = None) -> float:
        """Entry std of the noise for a batch of ``batch_size`` examples in dimension ``N``."""
        return noise_scale(batch_size, self.epsilon, self.delta, self.rounds, N=N, accountant=self.accountant)

    def apply(self, operator: np.ndarray, batch_size: int, rng: np.random.Generator | int) -> tuple[np.ndarray, float]:
        """Noised copy of ``operator`` and the entry std used (0 for an empty batch)."""
        check_operator(operator, "operator")
        M = check_positive_int(batch_size, "batch_size", minimum=0)
        if M == 0:
            return operator.copy(), 0.0
        sigma = self.sigma(M, operator.shape[0])
        return add_symmetric_noise(operator, sigma, rng), float(sigma)


def mean_noise_var(sigmas: Any, weights: Any = None, blend: Any = None) -> float:
    r"""Entry variance of the noise in the server's weighted mean of noised uploads.

    Derived in {ref}`sec-privacy-frontier`. Client ``c`` uploads ``U_c = w_c (B_c + Z_c) + (1 - w_c)
    A`` with independent ``Z_c`` of entry std ``sigma_c``; the server forms ``sum_c omega_c U_c``,
    whose noise ``sum_c omega_c w_c Z_c`` has entry variance ``sum_c omega_c^2 w_c^2 sigma_c^2``
    (independent Gaussians add their variances). Equal weights ``omega_c = 1/L``, ``w_c = 1``
    and equal ``sigma`` give ``sigma^2 / L``: the std shrinks by ``sqrt(L)``.

    Parameters
    ----------
    sigmas : array-like of float
        Per-client entry std, >= 0.
    weights : array-like or None
        Aggregation weights ``omega_c`` (None: ``1/L``).
    blend : array-like or None
        Blend weights ``w_c`` (None: 1, round 0).
    """
    s = as_float_array(sigmas, "sigmas")
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(f"sigmas must be a non-empty 1-D array of finite values >= 0, got {sigmas!r}")
    L = s.size
    om = np.full(L, 1.0 / L) if weights is None else as_float_array(weights, "weights")
    wc = np.ones(L) if blend is None else as_float_array(blend, "blend")
    for arr, name in ((om, "weights"), (wc, "blend")):
        if arr.shape != (L,) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"{name} must be a 1-D array of {L} finite values >= 0, got {arr!r}")
    return float(np.sum(om * om * wc * wc * s * s))


# ----------------------------------------------------------------------------------------
# the cost: BBP in the free convolution of the spiked MP law with the semicircle of the noise
def _check_model(r: Any, pi: Any, N: Any, M_total: Any) -> tuple[float, float, int, float]:
    r = check_quality(r)
    if r >= 1.0:
        raise ValueError(f"r must be < 1 (r = 1 has no bulk), got {r!r}")
    pi = check_in_range(pi, "pi", 0.0, 1.0, low_open=True)
    N = check_positive_int(N, "N", minimum=2)
    Mt = check_real(M_total, "M")
    if Mt <= 0:
        raise ValueError(f"M must be > 0, got {M_total!r}")
    return r, pi, N, float(Mt)


def _bulk(r: float, pi: float, N: int, Mt: float) -> tuple[float, float, float]:
    """``a = (1 - r^2)/N`` (bulk scale, J units), ``kappa = N r^2 pi/(1 - r^2)``, ``q = N/M``."""
    return (1.0 - r * r) / N, N * r * r * pi / (1.0 - r * r), N / Mt


def critical_noise(r: float, pi: float, N: int, M: float) -> float:
    r"""Critical eigenvalue std ``s_c`` of added symmetric noise for an archetype's outlier (J units).

    Derived in {ref}`sec-privacy-frontier`. ``J`` built from ``M`` examples (all clients of the
    mean together: ``M = L M_c``) is a spiked Wishart matrix with bulk scale ``a = (1 - r^2)/N``,
    ratio ``q = N/M`` and spike ``kappa = N r^2 pi / (1 - r^2)``; its outlier sits at
    ``l_W = a (1 + kappa)(1 + q/kappa)`` where the Cauchy transform of the MP bulk is
    ``g = 1 / (a (kappa + q))``. Adding noise with eigenvalue variance ``s^2`` keeps an outlier
    iff ``g`` stays below the critical point of ``x(g) = 1/g + a/(1 - a q g) + s^2 g``, i.e. iff
    ``s^2 < 1/g^2 - a^2 q / (1 - a q g)^2``:

        s_c = a (kappa + q) sqrt(1 - q / kappa^2)  =  (r^2 pi + a q) sqrt(1 - q / kappa^2).

    Returns 0 when ``kappa <= sqrt(q)`` (no outlier even without noise).
    """
    r, pi, N, Mt = _check_model(r, pi, N, M)
    a, k, q = _bulk(r, pi, N, Mt)
    if k <= math.sqrt(q):
        return 0.0
    return float(rmt._noisy_critical_std(k, q, a))


def noisy_edge(r: float, N: int, M: float, noise_var: float) -> float:
    r"""Right edge of the (MP ⊞ semicircle) bulk: ``x(g*)`` with ``x'(g*) = 0`` (J units).

    ``x(g) = 1/g + a/(1 - a q g) + s^2 g``, ``a = (1 - r^2)/N``, ``q = N/M``, ``s^2 =`` ``noise_var``
    (eigenvalue variance, ``N sigma^2``). ``x'`` increases on ``(0, 1/(a q))``, so ``g*`` is its
    unique zero there. Derived in {ref}`sec-privacy-frontier`.
    """
    r, _, N, Mt = _check_model(r, 0.5, N, M)
    s2 = _check_sigma(noise_var, "noise_var")
    a, q = (1.0 - r * r) / N, N / Mt
    g = _edge_g(a, q, s2)
    return float(1.0 / g + a / (1.0 - a * q * g) + s2 * g)


def _edge_g(a: float, q: float, s2: float) -> float:
    gmax = 1.0 / (a * q)
    d1 = lambda g: -1.0 / (g * g) + a * a * q / (1.0 - a * q * g) ** 2 + s2  # noqa: E731
    lo = 1e-14 * gmax
    while d1(lo) >= 0:  # pragma: no cover - 1/g^2 dominates for tiny g
        lo *= 1e-3
    return float(optimize.brentq(d1, lo, gmax * (1.0 - 1e-15), xtol=1e-300, rtol=4 * _EPS, maxiter=500))


def noisy_outlier(r: float, pi: float, N: int, M: float, noise_var: float) -> tuple[float, float]:
    r"""Location and squared eigenvector overlap of an archetype's outlier after adding noise.

    Derived in {ref}`sec-privacy-frontier`. With ``g = 1/(a (kappa + q))`` and ``s^2 =``
    ``noise_var``: location ``l_W + s^2 g``; squared overlap of the outlier eigenvector with the
    archetype ``gamma(kappa, q) (1 - s^2 / s_c^2)``, where ``gamma = (1 - q/kappa^2)/(1 + q/kappa)``
    is the noiseless one (:func:`fedlam.rmt.eigvec_overlap`) and the factor ``1/omega'`` comes from
    the subordination function ``omega(z) = z - s^2 G(z)``. Below the transition (no outlier)
    the edge (:func:`noisy_edge`) and 0 are returned.
    """
    r, pi, N, Mt = _check_model(r, pi, N, M)
    s2 = _check_sigma(noise_var, "noise_var")
    a, k, q = _bulk(r, pi, N, Mt)
    sc = critical_noise(r, pi, N, Mt)
    if s2 >= sc * sc:
        return noisy_edge(r, N, Mt, s2), 0.0
    loc = rmt._noisy_outlier_location(k, q, s2, a)
    gamma = (1.0 - q / (k * k)) / (1.0 + q / k)
    return float(loc), float(gamma * (1.0 - s2 / (sc * sc)))


def example_critical_noise(r: float, N: int, M: int) -> float:
    r"""Eigenvalue std of added noise above which the span of one batch drowns (J units).

    Derived in {ref}`sec-privacy-frontier`. For ``M < N`` the bulk of ``J_c`` is an atom at 0
    (mass ``1 - M/N``, the complement of the span) plus ``M`` eigenvalues around
    ``theta = (1 - r^2)/M``: each example's own direction has strength ~``theta``. After adding
    noise the two parts stay separated (the top ``M`` eigenvectors still span a perturbation of
    the batch's span) iff ``x(g) = 1/g + a/(1 - a q g) + s^2 g`` decreases somewhere on
    ``g > 1/(a q)``, i.e. iff ``s^2 < max_{y>1} theta^2 [1/y^2 - 1/(q (y-1)^2)]``, which gives

        s_ex = theta (1 - q^{-1/3})^{3/2},   q = N/M,

    (``-> theta`` for ``M << N``, 0 at ``M = N``). Returns 0 for ``M >= N``.
    """
    r = check_quality(r)
    N = check_positive_int(N, "N", minimum=2)
    M = check_positive_int(M, "M")
    if M >= N or r >= 1.0:
        return 0.0
    q = N / M
    return float((1.0 - r * r) / M * (1.0 - q ** (-1.0 / 3.0)) ** 1.5)


def epsilon_for_noise(
    sigma: float, M: int, delta: float, rounds: int = 1, *, N: int | None = None,
    accountant: str = "analytic",
) -> float:
    """Smallest ``epsilon`` for which entry std ``sigma`` gives ``(epsilon, delta)``-DP (inverse of
    :func:`noise_scale`). Derived in {ref}`sec-privacy-dp`."""
    sigma = _check_sigma(sigma, "sigma", allow_zero=False)
    M = check_positive_int(M, "M")
    delta = _check_delta(delta)
    rounds = check_positive_int(rounds, "rounds")
    accountant = check_choice(accountant, "accountant", ACCOUNTANTS)
    f = lambda le: math.log(max(epsilon_delta(sigma, M, math.exp(le), rounds, N=N,  # noqa: E731
                                              accountant=accountant), 1e-300)) - math.log(delta)
    lo, hi = -6.0, 1.0
    if f(lo) <= 0:
        while f(lo) <= 0 and lo > -60:
            lo -= 4.0
        if f(lo) <= 0:
            return 0.0
    while f(hi) > 0:
        hi += 2.0
    return float(math.exp(optimize.brentq(f, lo, hi, xtol=1e-13, rtol=4 * _EPS, maxiter=300)))


def epsilon_threshold(
    r: float, pi: float, N: int, M: int, delta: float, L: int = 1, rounds: int = 1, *,
    accountant: str = "analytic",
) -> float:
    r"""Smallest ``epsilon`` at which an archetype of weight ``pi`` stays spectrally visible.

    Derived in {ref}`sec-privacy-frontier`. ``L`` clients each release ``M`` examples per round
    through :func:`gaussian_mechanism` at ``(epsilon, delta)`` over ``rounds``; the server's equal
    mean is a spiked Wishart operator of ``L M`` examples plus noise of entry variance
    ``sigma^2 / L`` (:func:`mean_noise_var`), i.e. eigenvalue variance ``s^2 = N sigma^2 / L``.
    The archetype keeps an outlier iff ``s < s_c`` (:func:`critical_noise` with ``M -> L M``), so
    the threshold is the ``epsilon`` whose per-client noise is ``sigma_c = s_c sqrt(L / N)``
    (:func:`epsilon_for_noise`). Larger ``epsilon`` (less noise) keeps the archetype.

    Returns ``inf`` when the archetype is invisible even without noise (``kappa <= sqrt(q)``).
    """
    r, pi, N, _ = _check_model(r, pi, N, 1.0)
    M = check_positive_int(M, "M")
    delta = _check_delta(delta)
    L = check_positive_int(L, "L")
    rounds = check_positive_int(rounds, "rounds")
    sc = critical_noise(r, pi, N, L * M)
    if sc <= 0:
        return math.inf
    sigma_c = sc * math.sqrt(L / N)
    return epsilon_for_noise(sigma_c, M, delta, rounds, N=N, accountant=accountant)


@dataclass(frozen=True)
class PrivacyWindow:
    """Noise levels (eigenvalue std, J units) and budgets between which archetypes survive and
    examples drown. See :func:`privacy_window`.

    Attributes
    ----------
    s_archetype : float
        :func:`critical_noise` of the server's mean (``L M`` examples): archetypes visible below.
    s_example : float
        :func:`example_critical_noise` of one upload (``M`` examples, what an eavesdropper on one
        client sees): the span of the batch drowns above.
    sigma_archetype, sigma_example : float
        The same as per-client entry std (``s sqrt(L/N)`` and ``s / sqrt(N)``).
    epsilon_archetype, epsilon_example : float
        The budgets with those per-client noises (``epsilon_threshold`` and the largest epsilon
        that still drowns the span); ``inf``/0 at the ends.
    exists : bool
        ``sigma_example < sigma_archetype``.
    """

    s_archetype: float
    s_example: float
    sigma_archetype: float
    sigma_example: float
    epsilon_archetype: float
    epsilon_example: float
    exists: bool
    details: dict = field(default_factory=dict)


def privacy_window(
    r: float, pi: float, N: int, M: int, delta: float, L: int = 1, rounds: int = 1
) -> PrivacyWindow:
    r"""The window of per-client noise in which population spikes survive while examples drown.

    Derived in {ref}`sec-privacy-frontier`. Per client, the noise must exceed
    ``s_ex / sqrt(N)`` (entry std; :func:`example_critical_noise`) for its own upload's span to
    drown, and stay below ``s_c sqrt(L / N)`` (:func:`critical_noise` of the mean of ``L``
    uploads) for the archetype to stay visible in the server's mean. With ``theta = (1 - r^2)/M``:
    ``s_c = (r^2 pi + theta / L) sqrt(1 - q_L / kappa^2)`` (``q_L = N / (L M)``) and
    ``s_ex = theta (1 - q^{-1/3})^{3/2} < theta``, so in entry-std units the window exists
    whenever the archetype is clearly supercritical (``kappa >> sqrt(q_L)``); it closes only
    near the BBP threshold. The DP noise of any useful budget is far above ``s_ex`` (chapter 11
    computes both), so in practice the question is only whether ``epsilon > epsilon_threshold``.
    """
    r, pi, N, _ = _check_model(r, pi, N, 1.0)
    M = check_positive_int(M, "M")
    delta = _check_delta(delta)
    L = check_positive_int(L, "L")
    rounds = check_positive_int(rounds, "rounds")
    s_a = critical_noise(r, pi, N, L * M)
    s_e = example_critical_noise(r, N, M)
    sig_a = s_a * math.sqrt(L / N)
    sig_e = s_e / math.sqrt(N)
    eps_a = epsilon_for_noise(sig_a, M, delta, rounds, N=N) if sig_a > 0 else math.inf
    eps_e = epsilon_for_noise(sig_e, M, delta, rounds, N=N) if sig_e > 0 else 0.0
    return PrivacyWindow(s_a, s_e, sig_a, sig_e, eps_a, eps_e, bool(sig_e < sig_a),
                         {"r": r, "pi": pi, "N": N, "M": M, "L": L, "delta": delta, "rounds": rounds})


# ----------------------------------------------------------------------------------------
# the server on noised operators
def factorize_noised(
    J: np.ndarray,
    rng: np.random.Generator | int,
    *,
    components: Any,
    noise_sigma: float,
    params: Any = None,
    **overrides: Any,
) -> Any:
    r"""Factorize an operator that contains symmetric Gaussian noise of known entry std.

    Derived in {ref}`sec-privacy-frontier`. The server's :func:`fedlam.lam.factorize` with
    ``k_method="free"``, the bulk given by per-client ``components`` (``fedlam.khat.Component``:
    batch size and bulk variance from the uploads' scalars, no fit on the noised spectrum) and
    ``noise_sigma``: K_hat is counted against the edge of ``MP_1 ⊞ ... ⊞ MP_L ⊞ SC(N sigma^2)``
    instead of a bulk fitted to the spectrum (the semicircle is not an MP law, and the default
    estimator reads its top as ~100 spikes), and the acceptance uses the eigenvector overlaps
    lowered by the noise (squared overlap times ``1 - s^2/s_c^2``, :func:`noisy_outlier`).

    Parameters
    ----------
    J : numpy.ndarray
        (N, N) symmetric operator (e.g. the mean of noised uploads).
    rng : Generator or int
    components : sequence of fedlam.khat.Component
        Bulk components of ``J`` (``fedlam.khat.components_from_uploads``).
    noise_sigma : float
        Entry std of the Gaussian noise in ``J`` (the mean's: :func:`mean_noise_var`).
    params, **overrides
        :class:`fedlam.lam.LAMParams` and field overrides (``k_method`` is set to ``"free"``).

    Returns
    -------
    fedlam.lam.FactorizeResult
    """
    from fedlam import lam

    check_operator(J, "J")
    noise_sigma = _check_sigma(noise_sigma, "noise_sigma")
    overrides = {**overrides, "k_method": "free"}
    return lam.factorize(J, as_rng(rng), params=params, components=list(components),
                         noise_sigma=noise_sigma, **overrides)


# ----------------------------------------------------------------------------------------
# client-level differential privacy: one client's whole data is the protected unit
CLIENT_VARIANTS = ("central", "distributed")


def upload_norm(r: float, pi: float, N: int, M: int) -> float:
    r"""Expected Frobenius norm of an honest client's Hebbian operator ``B = eta^T eta / (N M)``.

    Derived in {ref}`sec-privacy-client`. ``diag B = 1/N`` contributes ``1/N``; an off-diagonal
    entry is ``(1/(N M)) sum_a eta_i^a eta_j^a``, whose square has mean
    ``(M + M (M - 1) E[eta_i eta_j]^2) / (N M)^2``; summed over ``i != j`` with ``K = 1/pi``
    equally likely random archetypes (``sum_{i != j} (xi_i^mu xi_j^mu xi_i^nu xi_j^nu) ~ N^2 delta_{mu nu}``)
    this gives ``||B||_F^2 ~ 1/N + 1/M + r^4 pi`` (to O(1/N) relative). The default clip of
    :func:`client_level_threshold`.
    """
    r, pi, N, _ = _check_model(r, pi, N, 1.0)
    M = check_positive_int(M, "M")
    return float(math.sqrt(1.0 / N + 1.0 / M + r**4 * pi))


def client_noise_multiplier(epsilon: float, delta: float, rounds: int = 1, *, accountant: str = "analytic") -> float:
    r"""Noise multiplier ``z = s / Delta`` of the client-level mechanism (per round).

    Derived in {ref}`sec-privacy-client`. The same accountant as the example-level mechanism
    (:func:`noise_scale` with sensitivity 1): ``rounds`` Gaussian releases of sensitivity
    ``Delta`` and std ``s = z Delta`` compose exactly into one with ``mu = sqrt(rounds) / z``.
    """
    return noise_scale(1, epsilon, delta, rounds, accountant=accountant)


def clip_operator(U: np.ndarray, clip: float) -> tuple[np.ndarray, float]:
    """``U min(1, clip / ||U||_F)`` and the factor used (Derived in {ref}`sec-privacy-client`).

    Idempotent: an operator already clipped (norm within rounding, ``1e-12`` relative, of
    ``clip``) is returned unchanged, so a server that clips again changes nothing.
    """
    check_operator(U, "U")
    clip = check_in_range(clip, "clip", 0.0, None, low_open=True)
    nrm = float(np.linalg.norm(U))
    c = 1.0 if nrm <= clip * (1.0 + 1e-12) else clip / nrm
    return (U * c if c < 1.0 else U.copy()), float(c)


def add_client_noise(J: np.ndarray, s: float, rng: np.random.Generator | int) -> np.ndarray:
    r"""``J + Z``, ``Z`` symmetric with ``Z_ii ~ N(0, s^2)`` and ``Z_ij = Z_ji ~ N(0, s^2 / 2)``.

    Isotropic noise of std ``s`` on the vector ``(U_ii, sqrt(2) U_ij for i < j)``, whose Euclidean
    norm is ``||U||_F``: the Gaussian mechanism for a query bounded in Frobenius norm. The
    off-diagonal entry std is ``s / sqrt(2)`` (a GOE matrix: eigenvalue variance ``N s^2 / 2``).
    Derived in {ref}`sec-privacy-client`.
    """
    check_operator(J, "J")
    s = _check_sigma(s, "s")
    gen = as_rng(rng)
    N = J.shape[0]
    G = gen.standard_normal((N, N))
    Z = np.triu(G, 1) * (s / math.sqrt(2.0))
    Z += Z.T
    Z[np.diag_indices(N)] = s * np.diagonal(G)
    return J + Z


@dataclass(frozen=True)
class ClientLevelMechanism:
    r"""Client-level differential privacy for :func:`fedlam.federation.run_federation` (``privacy=``).

    Derived in {ref}`sec-privacy-client`. The protected unit is one client's whole data:
    neighbouring federations differ in the data of one client (*replace-one client*: the set of
    clients and the number that report are public). Each round:

    1. every client clips its upload ``U_c`` to Frobenius norm ``clip``
       (``U_c min(1, clip / ||U_c||_F)``); replacing one client's data moves the sum of the
       clipped uploads by at most ``Delta = 2 clip``;
    2. Gaussian noise of std ``s = z Delta`` on the vector ``(U_ii, sqrt(2) U_ij)``
       (:func:`add_client_noise`), ``z`` from the same accountant as the example-level mechanism
       over ``rounds`` releases (:func:`client_noise_multiplier`: a client that reports in
       ``rounds`` rounds, whether or not its batches are fresh);

       * ``variant="central"``: the server adds it to the sum (a trusted aggregator; the mean
         of ``n`` reports then carries ``s / n``);
       * ``variant="distributed"``: each client adds a share of std ``s / sqrt(min_clients)`` to
         its clipped upload, so any ``n >= min_clients`` reports carry at least ``s`` (dropouts
         and partial participation never leave less than the target noise); the server refuses
         a round with fewer reports. Against the server this needs secure aggregation
         (otherwise it sees each upload with only its share); against any other observer of the
         mean it holds as is.

    The guarantee covers the operators. The scalars an upload carries (batch size, blend weight)
    are sent in clear: they are covered only when they are public, i.e. a fixed batch size and a
    constant weight, so :func:`fedlam.federation.run_federation` refuses an adaptive weight rule
    with this mechanism; the reported bulk variance is the declared one or none. Clipping also
    caps what one client can do to the mean (a rank-one poisoner's norm 1 is cut to ``clip``).

    Attributes
    ----------
    clip : float
        Frobenius bound > 0 (e.g. :func:`upload_norm` of an honest batch).
    epsilon, delta : float
        Client-level budget over ``rounds`` releases.
    rounds : int
        Rounds in which a client reports.
    min_clients : int
        Smallest number of reports a round may have (the distributed shares are calibrated to it).
    variant : {"central", "distributed"}
    accountant : {"analytic", "pld", "rdp"}
    """

    clip: float
    epsilon: float
    delta: float
    rounds: int = 1
    min_clients: int = 1
    variant: str = "central"
    accountant: str = "analytic"
    #: marks the mechanism as client-level for fedlam.federation (clip the whole upload)
    level = "client"

    def __post_init__(self) -> None:
        check_in_range(self.clip, "clip", 0.0, None, low_open=True)
        if not math.isfinite(float(self.clip)):
            raise ValueError(f"clip must be finite, got {self.clip!r}")
        _check_epsilon(self.epsilon)
        _check_delta(self.delta)
        check_positive_int(self.rounds, "rounds")
        check_positive_int(self.min_clients, "min_clients")
        check_choice(self.variant, "variant", CLIENT_VARIANTS)
        check_choice(self.accountant, "accountant", ACCOUNTANTS)

    @property
    def sensitivity(self) -> float:
        """``2 clip``: the largest change of the sum of clipped uploads when one client's data change."""
        return 2.0 * float(self.clip)

    @property
    def noise_std(self) -> float:
        """``s``: std of the noise on the sum (per coordinate of ``(U_ii, sqrt(2) U_ij)``)."""
        return client_noise_multiplier(self.epsilon, self.delta, self.rounds, accountant=self.accountant) \
            * self.sensitivity

    def share_std(self) -> float:
        """Std of one client's share (distributed) or 0 (central)."""
        return self.noise_std / math.sqrt(self.min_clients) if self.variant == "distributed" else 0.0

    def check_reports(self, n: int) -> int:
        """Refuse a round with fewer than ``min_clients`` reports (the noise would fall short)."""
        n = check_positive_int(n, "n")
        if n < self.min_clients:
            raise ValueError(f"client-level DP needs at least min_clients = {self.min_clients} reports "
                             f"per round, got {n}")
        return n

    def client_release(self, upload: np.ndarray, rng: np.random.Generator | int) -> tuple[np.ndarray, float]:
        """A client's release: its clipped upload (plus its share, distributed variant) and the
        off-diagonal entry std of the noise in it."""
        U, _ = clip_operator(upload, self.clip)
        sh = self.share_std()
        if sh == 0.0:
            return U, 0.0
        return add_client_noise(U, sh, rng), sh / math.sqrt(2.0)

    def server_release(self, mean: np.ndarray, n: int, rng: np.random.Generator | int) -> tuple[np.ndarray, float]:
        """The server's step on the equal mean of ``n`` releases: central noise ``s / n`` added
        (distributed: nothing); returns the mean and the off-diagonal entry std it added."""
        n = self.check_reports(n)
        if self.variant == "distributed":
            return mean, 0.0
        s = self.noise_std / n
        return add_client_noise(mean, s, rng), s / math.sqrt(2.0)

    def mean_noise_sigma(self, n: int) -> float:
        """Off-diagonal entry std of the noise in the equal mean of ``n >= min_clients`` releases."""
        n = self.check_reports(n)
        if self.variant == "central":
            return self.noise_std / n / math.sqrt(2.0)
        return self.share_std() * math.sqrt(n) / n / math.sqrt(2.0)

    def apply(self, operator: np.ndarray, batch_size: int, rng: np.random.Generator | int) -> tuple[np.ndarray, float]:
        """Not an example-level step: a client-level mechanism acts on the whole upload
        (:meth:`client_release`) and on the sum (:meth:`server_release`)."""
        raise TypeError("ClientLevelMechanism acts on whole uploads and on the sum "
                        "(client_release / server_release), not on a batch operator; "
                        "pass it as run_federation(privacy=...)")


def client_level_threshold(
    r: float, pi: float, N: int, M: int, epsilon: float, delta: float, rounds: int = 1, *,
    clip: float | None = None, magnetization: float | None = None, accountant: str = "analytic",
    max_L: int = 10**9,
) -> int:
    r"""Smallest number of clients ``L`` at which an archetype of weight ``pi`` stays visible
    under client-level DP.

    Derived in {ref}`sec-privacy-client`. ``L`` clients report ``M`` examples each (weight 1) through
    :class:`ClientLevelMechanism` with Frobenius bound ``clip`` (default :func:`upload_norm`, the
    norm of an honest operator, so that honest uploads are not shrunk). The equal mean is a spiked
    Wishart operator of ``L M`` examples plus GOE noise of off-diagonal std
    ``sigma_L = z 2 clip / (sqrt(2) L)``, eigenvalue std ``s_L = sqrt(N) sigma_L``: the noise falls
    like ``1/L`` while the spike ``r^2 pi`` does not. The archetype keeps an outlier iff
    ``s_L < s_c(r, pi, N, L M)`` (:func:`critical_noise`, which grows with ``L``), so the answer
    is the smallest such ``L`` (monotone: found by doubling and bisection). Returns
    ``max_L + 1`` when even ``max_L`` clients do not suffice (an archetype invisible without noise).

    Visible is not recovered: at the transition the outlier's overlap vanishes. With
    ``magnetization=m`` the criterion is recovery at magnetization ``m`` instead. Near the
    archetype the dynamics sets each site by the sign of its field, whose signal is ``~ r^2 pi``
    (``~ s_c`` with the bulk's share) and whose noise is ``N(0, s_L^2)`` (row ``i`` of the noise
    times a +-1 vector). At a state of magnetization ``m`` the signal is ``m s_c``, so a fraction
    ``Phi(-m s_c / s_L)`` of the sites is wrong and the fixed point solves
    ``m = 1 - 2 Phi(-m s_c / s_L)``: recovery at ``m`` needs ``s_L <= m s_c / Phi^{-1}((1 + m)/2)``
    (2.06 times less noise than the transition for ``m = 0.95``). A heuristic for the dynamics,
    checked against simulation in {ref}`sec-privacy-client`.
    """
    r, pi, N, _ = _check_model(r, pi, N, 1.0)
    M = check_positive_int(M, "M")
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    rounds = check_positive_int(rounds, "rounds")
    max_L = check_positive_int(max_L, "max_L")
    C = upload_norm(r, pi, N, M) if clip is None else check_in_range(clip, "clip", 0.0, None, low_open=True)
    z = client_noise_multiplier(epsilon, delta, rounds, accountant=accountant)
    margin = 1.0
    if magnetization is not None:
        m = check_in_range(magnetization, "magnetization", 0.0, 1.0, low_open=True, high_open=True)
        margin = float(special.ndtri((1.0 + m) / 2.0)) / m

    def ok(L: int) -> bool:
        s_L = math.sqrt(N) * z * 2.0 * C / (math.sqrt(2.0) * L)
        return margin * s_L < critical_noise(r, pi, N, L * M)

    hi = 1
    while not ok(hi):
        if hi >= max_L:
            return max_L + 1
        hi = min(2 * hi, max_L)
    lo = hi // 2  # ok(lo) is False (or lo = 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
