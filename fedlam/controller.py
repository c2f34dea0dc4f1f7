r"""Client-side plasticity controllers: how much a client trusts its fresh batch.

At round ``t >= 1`` client ``c`` uploads the convex blend (paper eq. (3.4))

.. math:: J_c^{(t)} = w_c(t)\, B + (1 - w_c(t))\, A,

with ``B`` the Hebbian operator of its new batch and ``A = xî^T xî / N`` the operator the
server broadcast after round ``t - 1``. This module decides ``w_c(t)``. Derived in
{ref}`sec-controller`; the noise floor in {ref}`sec-noise-floor`; our rule in
{ref}`sec-controller-rule`.

The paper's rule, implemented faithfully (:func:`entropy_weight`)
-----------------------------------------------------------------
``p`` is the sign agreement of ``A`` and ``B`` over off-diagonal entries, ``H_AB = h2(p)``,
``H_min(r) = h2((1 + r^2)/2)`` and ``w = max(0, (H_AB - H_min)/(1 - H_min))`` (clipped to
[0, 1]). What it does:

* **Pure-noise client** (examples uniform +-1). Flipping example column ``j`` flips the
  sign of every ``B_ij`` and of nothing else, so the off-diagonal signs of ``B`` are
  uniform and pairwise independent of each other and of ``A``: ``p = 1/2 + delta`` with
  ``Var(delta) <= 1/(4 n_pairs)``, ``n_pairs = N(N-1)/2``. Because
  ``1 - h2(1/2 + delta) <= (2 delta)^2 / (2 ln 2 (1 - 4 delta^2))``,
  ``1 - w <= (2 delta)^2 / (2 ln 2 (1 - 4 delta^2)(1 - H_min(r)))``. At N = 400, r = 0.9
  (``H_min = 0.4529``) a 10-sigma deviation gives ``1 - w <= 1.7e-3``: **with an honest
  client's quality plugged in, the rule gives the noise client full trust, w ~ 1**.
  **With the client's own quality r ~ 0 it gives w = 0**, the paper's attacker collapse:
  to leading order ``1 - H_AB ~ (2 delta)^2/(2 ln 2)`` and ``1 - H_min(r) ~ r^4/(2 ln 2)``, so
  ``w ~ 1 - (2 delta)^2 / r^4``, clipped to 0 as soon as ``r^2 < 2 |delta|``, i.e. for r below
  about ``n_pairs^(-1/4)`` (0.038 at N = 1000); at ``r = 0`` the limit is ``w = 0`` for every
  ``p != 1/2`` (computed stably here, without cancellation). With ``alpha = 0.5`` the
  smoothed weight is then ``0.5^10 ~ 0.001`` after ten rounds. Two caveats: the collapse
  needs the attacker's own r, i.e. knowing which client is the attacker; and the rule is
  ill-conditioned there, jumping between 1 and 0 as r crosses ``n_pairs^(-1/4)`` with a
  value set by the sampling noise of ``p`` (its variance: :func:`sign_agreement_moments`).
* **Honest consolidated client.** ``H_min`` is the disagreement of *one* example, but ``B``
  averages ``M`` examples: the signs of ``B`` converge to those of ``sum_mu pi_mu xi_i xi_j``,
  ``p -> 1``, ``H_AB < H_min`` and the rule clips to ``w = 0`` (no fresh evidence at all).
  A broadcast that holds only part of the client's classes does not clip: with 2 of 3
  equally likely archetypes held, ``p -> 3/4`` and ``w = 0.655`` at r = 0.9, M = 800
  (:func:`expected_sign_agreement` with ``memory=2``), in the range of the paper's good-client
  weights (0.4-0.6), which an incomplete early memory can therefore produce.
* **Shift.** A batch dominated by an archetype absent from ``A`` has sign-random entries
  relative to ``A``: ``w -> 1``. The rule cannot tell novelty from noise: both look like
  uncorrelated signs.
* **K̂ = 0 broadcast** (``A = 0``): every sign of ``A`` is 0, each tie counts 1/2, ``p = 1/2``,
  ``w = 1``: nothing to keep, the client sends its evidence. Defined, no special case.

Our rule: spectral novelty (:func:`novelty_weight`)
---------------------------------------------------
Noise and novelty differ in *structure*: a new archetype is a low-rank spike in ``N B``,
noise is a Marchenko–Pastur bulk. The client knows ``N`` and its ``M``, hence ``q = N/M``.

1. *Bulk fit.* ``N B`` has trace ``N`` (``B_ii = 1/N``). With ``k`` outliers
   ``lambda_i = s2 (1 + kappa_i)(1 + q/kappa_i)`` (BBP) and a bulk of mean ``s2``, the trace
   identity ``N = s2 (N + sum_i kappa_i)`` gives
   ``s2 = (N - sum_i lambda_i) / (N - k - q (k + sum_i 1/kappa_i))``; iterate with ``k`` and
   ``kappa_i`` (inversion of the BBP location) until stable. For honest data
   ``s2 = 1 - r^2``, so ``r_hat = sqrt(1 - s2)`` (:func:`estimate_quality`).
2. *Detection.* Outlier iff ``lambda > s2 (mu_J + s_TW sigma_J)/M`` with Johnstone's
   centring and scaling of the largest eigenvalue of a white Wishart matrix (M samples, N
   variables) and ``s_TW`` a Tracy–Widom (beta = 1) quantile (default 0.999). No outlier:
   the batch carries nothing the client can show to be signal, ``w = 0`` (it uploads the
   broadcast, i.e. it abstains without changing the server's normalisation).
3. *Novelty.* For outlier ``i`` with unit eigenvector ``v_i`` the spike direction ``u_i``
   satisfies ``v_i = sqrt(gamma_i) u_i + sqrt(1 - gamma_i) z_i`` with
   ``gamma_i = (1 - q/kappa_i^2)/(1 + q/kappa_i)`` and ``z_i`` orthogonal to the signal
   subspace, hence (to O(rank A / N)) outside the range of ``A``. With ``P`` the projector on
   ``range(A)`` and ``nu_i = |(I - P) u_i|^2`` the part of the spike the server does not
   hold, ``E |(I - P) v_i|^2 = gamma_i nu_i + 1 - gamma_i``, so
   ``nu_hat_i = clip((|(I - P) v_i|^2 - (1 - gamma_i)) / gamma_i, 0, 1)``.
4. *Weight.* ``f = sum_i E_i nu_hat_i / sum_i E_i`` with signal energies
   ``E_i = s2 kappa_i gamma_i`` (the reliably estimated part of each spike), and
   ``w = w_floor + (1 - w_floor) f``.

So a pure-noise client gets ``w = 0``; a consolidated honest client (all its spikes inside
``range(A)``) sits at ``w_floor``; a new archetype raises ``f`` by its share of the client's
signal energy; with ``A = 0`` every detected spike is novel and ``w = 1``. Since ``A`` is
exactly low rank, the server's bulk scales with the clients' ``w`` as much as the fresh
spikes do, so a small ``w_floor`` does not hide new archetypes from the server's
scale-free K̂ estimators; it only fixes how fast the memory is refreshed.

Numbers (N = 400, M = 300, K = 3 random archetypes, r = 0.9; one draw, seed 2024)
----------------------------------------------------------------------------------
====================================  ==========================  ===================
client batch vs broadcast ``A``       paper rule                  novelty rule (ours)
====================================  ==========================  ===================
pure noise, r = 0.9 plugged in        p = 0.49835, w = 0.99999     w = 0 (no outlier)
pure noise, r = 0.1 / 0.05 / 0        w = 0.891 / 0 / 0            w = 0
honest, archetypes already in ``A``   p = 1.000, w = 0             f = 0.000, w = 0.100
40 % of the batch from a new one      p = 0.624, w = 0.919         f = 0.422, w = 0.480
batch only from a new archetype       w = 0.99998                  w = 1.000
``A = 0`` (K̂ = 0), honest / noise     w = 1 / 1                    w = 1 / 0
====================================  ==========================  ===================

``r_hat`` of the honest batch is 0.901 (bulk variance 0.188 vs 1 - r^2 = 0.19); of the noise
batch 0. ``tests/test_controller.py`` recomputes this table.

Smoothing
---------
:func:`ema` is the paper's eq. (4.20) with an explicit previous value. Controllers start
from ``w_init`` (default 1: round 0 of the protocol uses local operators only, i.e.
``w_c(0) = 1``). On an empty batch every controller returns 0 (there is nothing to blend)
and leaves its state unchanged. The novelty controller smooths only detected rounds; the
detection test is a gate applied after smoothing (a test result is not a noisy estimate).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg

from . import rmt
from ._validation import (
    _describe,
    check_in_range,
    check_nonneg_int,
    check_operator,
    check_pm1,
    check_positive_int,
    check_prob_vector,
    check_quality,
    check_real,
)
from .data import _check_alloc

__all__ = [
    "sign_agreement",
    "binary_entropy",
    "h_min",
    "entropy_weight",
    "paper_terms",
    "paper_weight",
    "expected_sign_agreement",
    "AgreementMoments",
    "sign_agreement_moments",
    "ema",
    "correction_weight",
    "LocalSpectrum",
    "local_spectrum",
    "BulkFit",
    "fit_bulk",
    "estimate_quality",
    "NoveltyAssessment",
    "novelty_assessment",
    "novelty_weight",
    "noise_client_paper_bound",
    "WeightDecision",
    "WeightController",
    "PaperController",
    "NoveltyController",
    "ConstantController",
    "make_controller",
]

# Tracy-Widom (beta = 1) 0.999 quantile (= 3.2722): the default detection margin in
# Johnstone's scaling (false detection on a pure-noise batch with probability ~ 1e-3).
# A literal (= rmt.tw1_quantile(0.999) to 1e-12, checked in tests/test_flower_imports.py), so that
# importing the controller -- every Flower ClientApp process does, every round -- needs neither
# scipy.optimize nor the Fredholm determinant of the Airy kernel.
_TW1_Q999 = 3.2721960590020904


# ----------------------------------------------------------------------------------------
# the paper's ingredients
# ----------------------------------------------------------------------------------------
def _check_pair_ops(A: Any, B: Any) -> tuple[np.ndarray, np.ndarray]:
    check_operator(A, "A")
    check_operator(B, "B")
    if A.shape != B.shape:
        raise ValueError(f"A and B must have the same shape, got A {A.shape} and B {B.shape}")
    return A, B


def sign_agreement(A: np.ndarray, B: np.ndarray) -> float:
    """Fraction of off-diagonal entries where ``sign(A_ij) = sign(B_ij)`` (paper eq. (4.14)).

    An entry where either sign is 0 counts 1/2: the expected agreement of an undetermined
    sign with a fair coin. Even K̂ makes such ties in ``A = xî^T xî/N``; ``A = 0`` (K̂ = 0)
    gives exactly 1/2. With ``s = sign(A) sign(B)`` in {-1, 0, 1} the rule is
    ``p = 1/2 + mean_{i != j} s_ij / 2``. Derived in {ref}`sec-controller`.

    Parameters
    ----------
    A, B : numpy.ndarray
        Symmetric finite float (N, N) operators, N >= 2.

    Returns
    -------
    float
        p in [0, 1].
    """
    A, B = _check_pair_ops(A, B)
    return _paper_terms(A, B, 1.0)["p"]


def binary_entropy(p: Any) -> Any:
    """Binary entropy in bits, ``h2(p) = -p log2 p - (1-p) log2 (1-p)``, with ``0 log 0 = 0``.

    Derived in {ref}`sec-controller`.

    Parameters
    ----------
    p : float or numpy.ndarray
        Probabilities in [0, 1].

    Returns
    -------
    float or numpy.ndarray
        Same shape as ``p``; values in [0, 1].
    """
    if isinstance(p, np.ndarray):
        if not np.issubdtype(p.dtype, np.floating) and not np.issubdtype(p.dtype, np.integer):
            raise TypeError(f"p must be a float array, got dtype {p.dtype}")
        if p.dtype == bool:
            raise TypeError("p must be a float array, got dtype bool")
        if not np.all(np.isfinite(p)):
            raise ValueError("p must be finite")
        if np.any((p < 0) | (p > 1)):
            raise ValueError(f"p must lie in [0, 1], got range [{p.min()}, {p.max()}]")
        x = p.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.where(x > 0, -x * np.log2(np.where(x > 0, x, 1.0)), 0.0)
            b = np.where(x < 1, -(1 - x) * np.log2(np.where(x < 1, 1 - x, 1.0)), 0.0)
        return a + b
    q = check_in_range(p, "p", 0.0, 1.0)
    out = 0.0
    if 0.0 < q:
        out -= q * math.log2(q)
    if q < 1.0:
        out -= (1.0 - q) * math.log2(1.0 - q)
    return out


def h_min(r: Any) -> Any:
    """The paper's noise floor ``H_min(r) = h2((1 + r^2)/2)`` (paper eq. (4.17)).

    ``(1 + r^2)/2`` is ``P(eta_i eta_j = xi_i xi_j)`` for ONE example; a batch of M examples
    agrees with the archetype far more often (see the module notes). ``r = 0`` gives 1,
    ``r = 1`` gives 0. Derived in {ref}`sec-noise-floor`.

    Parameters
    ----------
    r : float or numpy.ndarray
        Channel quality in [0, 1].

    Returns
    -------
    float or numpy.ndarray
    """
    if isinstance(r, np.ndarray):
        if r.dtype == bool or not np.issubdtype(r.dtype, np.number):
            raise TypeError(f"r must be a float array, got dtype {r.dtype}")
        if not np.all(np.isfinite(r)) or np.any((r < 0) | (r > 1)):
            raise ValueError("r must lie in [0, 1] (finite)")
        return binary_entropy((1.0 + r.astype(np.float64) ** 2) / 2.0)
    rv = check_in_range(r, "r", 0.0, 1.0)
    return binary_entropy((1.0 + rv * rv) / 2.0)


def paper_terms(A: np.ndarray, B: np.ndarray, r: float) -> dict[str, float]:
    """All intermediate quantities of the paper's rule: ``p``, ``H_AB``, ``H_min``, ``w``.

    Derived in {ref}`sec-controller`. See :func:`entropy_weight`.
    """
    r = check_in_range(r, "r", 0.0, 1.0)
    _check_pair_ops(A, B)
    return _paper_terms(A, B, r)


def _paper_terms(A: np.ndarray, B: np.ndarray, r: float) -> dict[str, float]:
    N = A.shape[0]
    sgn = np.sign(A) * np.sign(B)
    p = 0.5 + 0.5 * float(sgn.sum() - np.trace(sgn)) / (N * (N - 1))
    return _paper_rule(p, r)


def _entropy_deficit(x: float) -> float:
    """``1 - h2(1/2 + x)`` for ``|x| <= 1/2``, accurate for tiny ``x`` (no cancellation).

    With ``y = 2|x|``: ``((1 + y) ln(1 + y) + (1 - y) ln(1 - y)) / (2 ln 2)``, whose series is
    ``sum_k y^(2k) / (k (2k - 1)) / (2 ln 2)``; ``1 - h2(1/2) = 0`` exactly.
    """
    y = min(1.0, 2.0 * abs(float(x)))
    if y == 1.0:
        return 1.0
    if y < 1e-3:
        y2 = y * y
        return (y2 + y2 * y2 / 6.0 + y2 * y2 * y2 / 15.0) / (2.0 * math.log(2.0))
    return ((1.0 + y) * math.log1p(y) + (1.0 - y) * math.log1p(-y)) / (2.0 * math.log(2.0))


def _paper_rule(p: float, r: float) -> dict[str, float]:
    """The paper's rule, evaluated stably: ``w = 1 - (1 - H_AB) / (1 - H_min(r))``.

    ``(H_AB - H_min)/(1 - H_min)`` is that ratio; both deficits are computed without
    cancellation (:func:`_entropy_deficit`), so the rule is exact down to ``r ~ 1e-77``.
    At ``r = 0`` (``H_min = 1``) the value is its limit ``r -> 0+``: ``-inf`` unless
    ``p = 1/2`` exactly (then 1), i.e. ``w = 0`` after clipping.
    """
    H = binary_entropy(p)
    Hm = h_min(r)
    num = _entropy_deficit(p - 0.5)  # 1 - H_AB
    den = _entropy_deficit(r * r / 2.0)  # 1 - H_min(r)
    if den > 0.0:
        w = 1.0 - num / den
    else:  # r = 0 (or r^2/2 below the smallest normal number): the limit r -> 0+
        w = 1.0 if num == 0.0 else -math.inf
    return {"p": p, "H_AB": H, "H_min": Hm, "w_unclipped": w, "w": min(1.0, max(0.0, w))}


def paper_weight(p: float, r: float) -> float:
    """The paper's rule as a function of the sign agreement ``p`` alone (clipped to [0, 1]).

    :func:`entropy_weight` is ``paper_weight(sign_agreement(A, B), r)``; this form takes an
    agreement predicted by :func:`expected_sign_agreement`. Derived in {ref}`sec-controller`.
    """
    return _paper_rule(check_in_range(p, "p", 0.0, 1.0), check_in_range(r, "r", 0.0, 1.0))["w"]


def expected_sign_agreement(
    r: float,
    M: int,
    pi: np.ndarray,
    memory: int | None = None,
    normal: bool = False,
) -> float:
    """Expected off-diagonal sign agreement of a client's M-example batch with the server memory.

    Derived in {ref}`sec-noise-floor`. The server operator ``A`` holds the first ``memory``
    archetypes (default: all K); the client draws its M examples from the mixture ``pi``
    over the K archetypes through the channel of quality ``r``. For a pair (i, j) write
    ``s_mu = xi_i^mu xi_j^mu``, uniform on {-1, +1}^K for random archetypes: then
    ``sign(A_ij) = sign(sum_{mu < memory} s_mu)`` (0 on a tie, which counts 1/2), and
    ``M B_ij N`` is a sum of M independent +-1 products with mean ``m = r^2 pi . s``, so the
    agreement is a binomial tail (exactly, or by its normal approximation with
    ``normal=True``), averaged over the ``2^K`` sign patterns. With M = 1 and one archetype
    it is the paper's ``(1 + r^2)/2``; it tends to 1 as M grows for a client whose
    archetypes are all in memory, which is why the paper's noise floor ``H_min(r)`` is not
    what an honest client sees.

    Parameters
    ----------
    r : float
        Channel quality in (0, 1].
    M : int
        Batch size (>= 1).
    pi : numpy.ndarray
        (K,) class mixture of the batch (K <= 16).
    memory : int, optional
        Number of leading archetypes held by the server memory, 0 <= memory <= K.
    normal : bool
        Use the normal approximation of the binomial tail.

    Returns
    -------
    float
        Expected agreement in [0, 1] (exactly 1/2 when ``memory = 0``).
    """
    from scipy import stats

    r = check_quality(r)
    M = check_positive_int(M, "M")
    if M > 10**8:
        raise ValueError(f"M must be <= 1e8 (binomial tails of size M + 1 per sign pattern), got {M}")
    pi = check_prob_vector(pi, "pi")
    K = pi.size
    if K > 16:
        raise ValueError(f"pi must have at most 16 archetypes (2^K sign patterns), got K = {K}")
    memory = K if memory is None else check_nonneg_int(memory, "memory")
    if memory > K:
        raise ValueError(f"memory must be <= K = {K}, got {memory}")
    if not isinstance(normal, bool):
        raise TypeError(f"normal must be a bool, got {type(normal).__name__}")
    k = np.arange(M + 1)
    total = 0.0
    for bits in range(2**K):
        s = np.array([1.0 if (bits >> mu) & 1 else -1.0 for mu in range(K)])
        a = np.sign(s[:memory].sum())
        if a == 0:
            total += 0.5
            continue
        m = r * r * float(pi @ s)
        if normal:
            total += float(stats.norm.cdf(a * m * math.sqrt(M) / math.sqrt(max(1.0 - m * m, 1e-300))))
            continue
        pmf = stats.binom.pmf(k, M, (1.0 + m) / 2.0)
        S = 2 * k - M
        total += float(pmf[a * S > 0].sum() + 0.5 * pmf[S == 0].sum())
    return total / 2**K


@dataclass(frozen=True)
class AgreementMoments:
    """Mean and variance of the sign agreement ``p`` of a batch (see :func:`sign_agreement_moments`).

    Attributes
    ----------
    mean : float
        ``E p`` (exact binomial bookkeeping, :func:`expected_sign_agreement`).
    variance : float
        ``Var p = var_labels + var_pairs`` for fixed random archetypes and a fresh batch.
    var_labels : float
        Variance of ``E[p | class counts]`` over the multinomial class counts of the batch:
        the counts decide the signs of all pairs with the same archetype sign pattern at once.
    var_pairs : float
        Mean over the counts of ``Var(p | counts)``: channel noise of the ``N (N - 1)/2`` pairs,
        including the covariance of pairs that share a neuron.
    """

    mean: float
    variance: float
    var_labels: float
    var_pairs: float

    @property
    def sd(self) -> float:
        """Standard deviation ``sqrt(variance)``."""
        return math.sqrt(self.variance)


def _hermite_grid(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Tensor Gauss-Hermite rule for a standard normal vector in k dimensions."""
    n = {0: 1, 1: 64, 2: 40, 3: 24, 4: 14, 5: 9}[k]
    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()
    if k == 0:
        return np.zeros((1, 0)), np.ones(1)
    grids = np.meshgrid(*([x] * k), indexing="ij")
    wgrids = np.meshgrid(*([w] * k), indexing="ij")
    pts = np.stack([g.ravel() for g in grids], axis=1)
    wts = np.prod(np.stack([g.ravel() for g in wgrids], axis=1), axis=1)
    return pts, wts


def sign_agreement_moments(r: float, M: int, pi: np.ndarray, N: int, memory: int | None = None) -> AgreementMoments:
    r"""Mean and variance of the sign agreement ``p(A, B)`` of an M-example batch with the memory.

    Same setting as :func:`expected_sign_agreement` (K random archetypes, the first
    ``memory`` of them held by ``A``, a batch of M examples from the mixture ``pi`` at quality
    ``r``), for fixed archetypes and a fresh batch. The pairs are not independent, and the
    variance has two parts. Write ``n`` for the class counts of the batch and, for a pair
    with archetype sign pattern ``s``, ``a_s = sgn sum_{mu < memory} s_mu``. Given ``n`` the
    pair's sum ``S = N M B_ij`` has mean ``r^2 s.n`` and variance ``M (1 - r^4)``.

    * **Labels.** ``E[p | n] = 2^{-K} sum_s Phi(a_s r^2 s.n / sqrt(M (1 - r^4)))`` (ties,
      ``a_s = 0``, score 1/2). Every pair with the same pattern shares ``n``, so
      ``var_labels = Var_n E[p | n]`` does not shrink with N: with ``s.pi = 0`` (the mixture
      balances a pattern exactly) the sign of ``s.n`` is a coin flip common to 1/2^K of all
      pairs. Computed with the normal approximation ``n ~ M pi + sqrt(M) z``,
      ``Cov z = diag(pi) - pi pi^T``, by Gauss-Hermite quadrature over z.
    * **Pairs.** A pair's indicator has conditional variance ``Var(I_s) - Var_n E[I_s | n]``,
      with ``Var(I_s)`` exact (binomial tail of M i.i.d. terms, the score 1/2 of ``S = 0``
      included: for even M the lattice of S matters); two pairs
      ``(i, j)``, ``(i, k)`` share the flips of neuron i, so their sums have correlation
      ``r^2 (s.s')_pi / (1 + r^2)`` (with ``(s.s')_pi = sum_mu pi_mu s_mu s'_mu``), and their
      indicators the covariance ``Phi_2(h, h'; c) - Phi(h) Phi(h')`` (bivariate normal,
      Plackett's integral). Disjoint pairs are independent given ``n``. With
      ``n_pairs = N (N - 1)/2`` and averages over independent uniform patterns,

          var_pairs = (mean_s rho_s (1 - rho_s) + 2 (N - 2) mean_{s, s'} cov_{s s'}) / n_pairs.

    For pure noise (``r -> 0``) this is ``(1 - P(S = 0)) / (4 n_pairs)`` (``1 / (4 n_pairs)``
    for odd M). The normal approximations need M of a few tens at least, and p not within
    ~1e-3 of 0 or 1 (where the variance comes from rare tail events). Derived in {ref}`sec-ctrl-variance`.

    Parameters
    ----------
    r : float
        Channel quality in (0, 1).
    M : int
        Batch size, >= 1.
    pi : numpy.ndarray
        (K,) class mixture of the batch, K <= 6.
    N : int
        Number of neurons, >= 3.
    memory : int, optional
        Number of leading archetypes held by the memory (default K).

    Returns
    -------
    AgreementMoments
    """
    from scipy import special, stats

    r = check_in_range(r, "r", 0.0, 1.0, low_open=True, high_open=True)
    M = check_positive_int(M, "M")
    if M > 10**6:
        raise ValueError(f"M must be <= 1e6 (exact binomial tails of size M + 1), got {M}")
    N = check_positive_int(N, "N", minimum=3)
    pi = check_prob_vector(pi, "pi")
    K = pi.size
    if K > 6:
        raise ValueError(f"pi must have at most 6 archetypes (4^K pattern pairs), got K = {K}")
    memory = K if memory is None else check_nonneg_int(memory, "memory")
    if memory > K:
        raise ValueError(f"memory must be <= K = {K}, got {memory}")
    mean = expected_sign_agreement(r, M, pi, memory=memory)
    pats = np.array([[1.0 if (b >> mu) & 1 else -1.0 for mu in range(K)] for b in range(2**K)])
    a = np.sign(pats[:, :memory].sum(axis=1))
    live = a != 0
    scale = r * r / math.sqrt(M * (1.0 - r**4))
    Phi = special.ndtr
    # labels: E[p | n] over the latent normal counts
    cov_pi = np.diag(pi) - np.outer(pi, pi)
    ev, vec = np.linalg.eigh(cov_pi)
    keep = ev > 1e-12 * max(1.0, float(ev.max()))
    L = vec[:, keep] * np.sqrt(ev[keep])
    pts, wts = _hermite_grid(int(keep.sum()))
    d = M * (pats @ pi)[None, :] + math.sqrt(M) * (pts @ L.T) @ pats.T  # (points, patterns)
    rho = np.where(live[None, :], Phi(a[None, :] * d * scale), 0.5)
    cond_mean = rho.mean(axis=1)
    m_lab = float(wts @ cond_mean)
    var_labels = float(wts @ (cond_mean - m_lab) ** 2)
    # pairs: Var(I_s | n) averaged over n = Var(I_s) - Var_n E[I_s | n]; Var(I_s) exactly
    # (lattice of S and the 1/2 score of S = 0 included), from the binomial of M i.i.d. terms
    var_rho_n = wts @ (rho - rho.T @ wts) ** 2           # Var_n E[I_s | n], per pattern
    k = np.arange(M + 1)
    Sk = 2 * k - M
    v_pat = np.zeros(2**K)
    for i in np.flatnonzero(live):
        pmf = stats.binom.pmf(k, M, (1.0 + r * r * float(pats[i] @ pi)) / 2.0)
        score = np.where(a[i] * Sk > 0, 1.0, np.where(Sk == 0, 0.5, 0.0))
        e1 = float(pmf @ score)
        v_pat[i] = max(float(pmf @ score**2) - e1 * e1 - float(var_rho_n[i]), 0.0)
    v_bar = float(np.mean(v_pat))
    h = a * (M * (pats @ pi)) * scale                     # standardised mean of a_s S at n = M pi
    corr = (r * r / (1.0 + r * r)) * (pats * pi) @ pats.T  # corr of S, S' for patterns s, s'
    c = a[:, None] * a[None, :] * corr
    t, tw = np.polynomial.legendre.leggauss(20)
    hh, kk = h[:, None], h[None, :]
    cov = np.zeros_like(c)
    for tj, wj in zip(t, tw, strict=True):
        rho_t = c * (tj + 1.0) / 2.0
        den = 1.0 - rho_t**2
        dens = np.exp(-(hh**2 - 2.0 * rho_t * hh * kk + kk**2) / (2.0 * den)) / (2.0 * np.pi * np.sqrt(den))
        cov += wj * dens * c / 2.0
    both = live[:, None] & live[None, :]
    c_bar = float(np.mean(np.where(both, cov, 0.0)))
    n_pairs = N * (N - 1) / 2.0
    var_pairs = (v_bar + 2.0 * (N - 2) * c_bar) / n_pairs
    return AgreementMoments(mean=mean, variance=var_labels + var_pairs, var_labels=var_labels,
                            var_pairs=var_pairs)


def entropy_weight(A: np.ndarray, B: np.ndarray, r: float) -> float:
    """The paper's entropy rule ``w = max(0, (H_AB - H_min(r)) / (1 - H_min(r)))`` (paper eq. (4.19)).

    Implemented faithfully: ``p`` = off-diagonal sign agreement (:func:`sign_agreement`,
    ties count 1/2), ``H_AB = h2(p)``, ``H_min`` from :func:`h_min`, result clipped to
    [0, 1]. It gives a pure-noise client ``w ~ 1`` and a consolidated honest client with a
    large batch ``w = 0``; see the module notes. Derived in {ref}`sec-controller`.

    Parameters
    ----------
    A : numpy.ndarray
        Broadcast operator (N, N) (the zero matrix when K̂ = 0: then ``w = 1``).
    B : numpy.ndarray
        The client's fresh batch operator (N, N).
    r : float
        Channel quality in [0, 1] used for the noise floor (known, or estimated with
        :func:`estimate_quality`). ``r = 0`` gives the limit ``r -> 0+`` of the rule: 0 unless
        ``p = 1/2`` exactly. Near 0 the rule is ill-conditioned (see the module notes).

    Returns
    -------
    float
        w in [0, 1].
    """
    return paper_terms(A, B, r)["w"]


def noise_client_paper_bound(N: int, r: float, n_sigma: float = 10.0) -> float:
    """Upper bound on ``1 - w`` of the paper's rule for a pure-noise client.

    A pure-noise batch has off-diagonal signs uniform and pairwise independent, so
    ``p = 1/2 + delta`` with ``sd(delta) <= 1/(2 sqrt(N(N-1)/2))``. For
    ``|delta| <= n_sigma sd`` (probability >= 1 - 1/n_sigma^2 by Chebyshev),
    ``1 - w <= (2 delta)^2 / (2 ln 2 (1 - 4 delta^2) (1 - H_min(r)))``.
    Derived in {ref}`sec-controller`.

    Parameters
    ----------
    N : int
        Number of neurons, >= 2.
    r : float
        Quality in (0, 1] plugged into the noise floor.
    n_sigma : float
        Deviation allowed, in standard deviations.

    Returns
    -------
    float
    """
    N = check_positive_int(N, "N", minimum=2)
    r = check_quality(r)
    n_sigma = check_in_range(n_sigma, "n_sigma", 0.0, None, low_open=True)
    delta = n_sigma / (2.0 * math.sqrt(N * (N - 1) / 2.0))
    if delta >= 0.5:
        return 1.0
    x = (2 * delta) ** 2
    return min(1.0, x / (2 * math.log(2) * (1 - x) * (1.0 - h_min(r))))


def ema(new: float, old: float, alpha: float) -> float:
    """Exponential moving average ``alpha * new + (1 - alpha) * old`` (paper eq. (4.20)).

    ``old`` is explicit: the first smoothed value needs an initial weight (controllers use
    ``w_init``). Derived in {ref}`sec-controller`.

    Parameters
    ----------
    new, old : float
        Weights in [0, 1].
    alpha : float
        In [0, 1]; 1 = no smoothing.

    Returns
    -------
    float
    """
    new = check_in_range(new, "new", 0.0, 1.0)
    old = check_in_range(old, "old", 0.0, 1.0)
    alpha = check_in_range(alpha, "alpha", 0.0, 1.0)
    return alpha * new + (1.0 - alpha) * old


def correction_weight(r: float, pi: float, m: float) -> float:
    r"""The mean blend weight above which fresh evidence overturns a stored version of an archetype.

    The server stores a version ``a`` of archetype ``b`` with overlap ``m = a.b / N``. Clients
    whose class share of ``b`` is ``pi`` at quality ``r`` upload ``w B + (1 - w) A``; along the
    two patterns the mean is, to leading order,
    ``(1 - w) a a^T / N + w r^2 pi b b^T / N`` (bulk and privacy noise aside), so one sign
    step from ``a`` gives ``((1 - w) - w r^2 pi m) a_i`` on every site where ``a`` and ``b``
    disagree: ``a`` is a fixed point of the server's dynamics, and the error is kept, while
    ``w < 1 / (1 + r^2 pi m)``. Returns that bound. Derived in {ref}`sec-privacy-weight`.

    Parameters
    ----------
    r : float
        Channel quality in [0, 1].
    pi : float
        The archetype's share of the clients' examples, in [0, 1].
    m : float
        Overlap of the stored version with the archetype, in [0, 1].

    Returns
    -------
    float
        In [1/2, 1]: 1 when the fresh data hold nothing of the archetype (``r pi m = 0``).
    """
    r = check_in_range(r, "r", 0.0, 1.0)
    pi = check_in_range(pi, "pi", 0.0, 1.0)
    m = check_in_range(m, "m", 0.0, 1.0)
    return 1.0 / (1.0 + r * r * pi * m)


# ----------------------------------------------------------------------------------------
# the client's own spectrum
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LocalSpectrum:
    """Leading spectrum of a client's rescaled batch operator ``N B`` (computed locally).

    Attributes
    ----------
    values : numpy.ndarray
        Leading eigenvalues, descending (all ``min(N, M)`` possibly non-zero ones when
        ``complete``).
    vectors : numpy.ndarray
        (N, len(values)) unit eigenvectors, columns matching ``values``.
    N, M : int
        Neurons and batch size (so ``q = N / M`` is known).
    trace : float
        ``tr(N B)`` (= N for +-1 examples); with the trace the bulk variance needs only the
        leading eigenvalues.
    complete : bool
        Whether ``values`` holds every possibly non-zero eigenvalue.
    noise_var : float
        Eigenvalue variance ``v = N (N sigma)^2`` of declared symmetric Gaussian noise of entry
        std ``sigma`` in ``B`` (a privacy mechanism's, added before anything is computed from
        the batch), in the units of ``N B``; 0 for a raw batch. :func:`fit_bulk` then fits the
        bulk ``MP(s2, q) ⊞ SC(v)`` instead of ``MP(s2, q)`` (Derived in {ref}`sec-privacy-weight`).
    """

    values: np.ndarray
    vectors: np.ndarray
    N: int
    M: int
    trace: float
    complete: bool = False
    noise_var: float = 0.0

    def __post_init__(self) -> None:
        N = check_positive_int(self.N, "N", minimum=2)
        check_positive_int(self.M, "M")
        v, V = self.values, self.vectors
        if not isinstance(v, np.ndarray) or not np.issubdtype(v.dtype, np.floating) or v.ndim != 1:
            raise TypeError(f"values must be a 1-D float numpy array, got {_describe(v)}")
        if not np.all(np.isfinite(v)):
            raise ValueError("values must be finite")
        if not isinstance(V, np.ndarray) or not np.issubdtype(V.dtype, np.floating) or V.shape != (N, v.size):
            raise ValueError(f"vectors must be a float (N, len(values)) = ({N}, {v.size}) array, got {_describe(V)}")
        check_real(self.trace, "trace")
        if not isinstance(self.complete, (bool, np.bool_)):
            raise TypeError(f"complete must be a bool, got {_describe(self.complete)}")

    @property
    def q(self) -> float:
        """Aspect ratio ``N / M``."""
        return self.N / self.M


def _top_eigh(S: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k eigenpairs of a symmetric matrix, descending."""
    n = S.shape[0]
    k = min(k, n)
    vals, vecs = scipy.linalg.eigh(S, subset_by_index=[n - k, n - 1])
    return vals[::-1].copy(), np.ascontiguousarray(vecs[:, ::-1])


def local_spectrum(
    examples: np.ndarray | None = None,
    *,
    B: np.ndarray | None = None,
    M: int | None = None,
    n_vectors: int = 32,
    noise_sigma: float = 0.0,
) -> LocalSpectrum:
    """Leading spectrum of ``N B`` from the client's examples (preferred) or its operator ``B``.

    From examples with ``M < N`` the M x M Gram matrix ``eta eta^T / M`` has the same
    non-zero eigenvalues as ``N B = eta^T eta / M`` and eigenvectors map by
    ``v = eta^T g / sqrt(M lambda)``: an M^3 instead of N^3 eigenproblem, and only the
    leading ``n_vectors`` eigenpairs are computed. Derived in {ref}`sec-controller-rule`.

    Parameters
    ----------
    examples : numpy.ndarray, optional
        (M, N) +-1 batch, M >= 1.
    B : numpy.ndarray, optional
        (N, N) batch operator ``eta^T eta/(N M)`` (give exactly one of examples / B).
    M : int, optional
        Batch size; required with ``B``.
    n_vectors : int
        Number of leading eigenpairs computed (must exceed the number of outliers; a client
        sees at most a handful of archetypes).
    noise_sigma : float
        Entry std of the symmetric Gaussian noise declared in ``B`` (only with ``B``: a
        privacy mechanism's noise, :class:`fedlam.privacy.GaussianMechanism`); recorded as
        ``noise_var = N (N noise_sigma)^2`` so that :func:`fit_bulk` fits the noised bulk.

    Returns
    -------
    LocalSpectrum
    """
    n_vectors = check_positive_int(n_vectors, "n_vectors")
    noise_sigma = check_in_range(noise_sigma, "noise_sigma", 0.0, None)
    if not math.isfinite(noise_sigma):
        raise ValueError(f"noise_sigma must be finite, got {noise_sigma!r}")
    if (examples is None) == (B is None):
        raise ValueError("give exactly one of examples or B")
    if examples is not None and noise_sigma > 0:
        raise ValueError(f"noise_sigma applies to a noised operator B, not to raw examples; got "
                         f"noise_sigma={noise_sigma!r} with examples")
    if examples is not None:
        check_pm1(examples, "examples", ndim=2)
        Mv, N = examples.shape
        if N < 2:
            raise ValueError(f"examples must have N >= 2 columns, got shape {examples.shape}")
        side = min(Mv, N)
        _check_alloc(side * side, 8, f"min(M, N)^2 = {side}^2 (Gram or operator matrix)")
        if Mv < N:
            # float32 products of +-1 entries are exact integers (N < 2**24)
            X32 = examples.astype(np.float32)
            G = (X32 @ X32.T).astype(np.float64) / Mv
            vals, g = _top_eigh(G, n_vectors)
            V = examples.T.astype(np.float64) @ g
            # v = eta^T g / sqrt(M lambda); normalise explicitly (robust for lambda ~ 0)
            V /= np.maximum(np.linalg.norm(V, axis=0), 1e-300)
            return LocalSpectrum(vals, V, N, Mv, float(np.trace(G)), vals.size == Mv)
        X = examples.astype(np.float64)
        NB = (X.T @ X) / Mv
    else:
        B = check_operator(B, "B")  # returns B itself (narrows the optional for the type checker)
        if M is None:
            raise ValueError("M (batch size) is required when B is given")
        Mv = check_positive_int(M, "M")
        N = B.shape[0]
        NB = N * B.astype(np.float64)
    if noise_sigma > 0:
        # the noise makes N B full rank: every eigenvalue may be non-zero
        vals, V = _top_eigh(NB, n_vectors)
        return LocalSpectrum(vals, V, N, Mv, float(np.trace(NB)), vals.size == N,
                             float(N * (N * noise_sigma) ** 2))
    vals, V = _top_eigh(NB, min(n_vectors, Mv))
    return LocalSpectrum(vals, V, N, Mv, float(np.trace(NB)), vals.size == min(N, Mv))


def _kappa_gamma(lam: np.ndarray, s2: float, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Spike strengths (BBP inversion, clamped at the threshold) and eigenvector overlaps."""
    if lam.size == 0:
        return np.empty(0), np.empty(0)
    kappa = np.asarray(rmt.kappa_from_outlier(lam, q, s2, below="threshold"), dtype=np.float64)
    return kappa, np.asarray(rmt.eigvec_overlap(kappa, q), dtype=np.float64)


@dataclass(frozen=True)
class BulkFit:
    """Result of :func:`fit_bulk`.

    Attributes
    ----------
    sigma2 : float
        Estimated bulk variance (``1 - r^2`` for honest data).
    n_outliers : int
        Eigenvalues above the detection edge.
    edge : float
        Detection edge (eigenvalue of ``N B``).
    kappa : numpy.ndarray
        Estimated spike strengths of the outliers.
    gamma : numpy.ndarray
        Estimated eigenvector overlaps of the outliers.
    """

    sigma2: float
    n_outliers: int
    edge: float
    kappa: np.ndarray
    gamma: np.ndarray


def fit_bulk(spec: LocalSpectrum, tw_quantile: float = _TW1_Q999, sigma2: float | None = None,
             max_iter: int = 50) -> BulkFit:
    """Bulk variance, BBP outliers and spike strengths of a client spectrum.

    Iterates ``s2 = (tr - sum_i lambda_i) / (N - k - q (k + sum_i 1/kappa_i))`` (trace identity
    corrected for the bulk mass the outliers take, see the module notes) with
    ``k = #{lambda > s2 (mu_J + tw_quantile sd_J)}`` (Johnstone centring and scaling) and
    ``kappa_i`` from inverting ``lambda = s2 (1 + kappa)(1 + q/kappa)``.
    Derived in {ref}`sec-controller-rule`.

    A spectrum of a noised batch (``spec.noise_var > 0``, a privacy mechanism's declared
    Gaussian noise) is fitted against ``MP(s2, q) ⊞ SC(v)`` instead: free edge plus a
    Tracy–Widom margin, outliers at ``l_W + v g``, overlaps lowered by ``1 - v / s_c^2``
    (Derived in {ref}`sec-privacy-weight`), so that every rule built on the fit is a function
    of the noised operator and public quantities only.

    Parameters
    ----------
    spec : LocalSpectrum
    tw_quantile : float
        Margin above Johnstone's centring in Tracy–Widom units (default: 0.999 quantile).
    sigma2 : float, optional
        Known bulk variance (e.g. ``1 - r^2`` for a known r); skips the estimate.
    max_iter : int

    Returns
    -------
    BulkFit
    """
    if not isinstance(spec, LocalSpectrum):
        raise TypeError(f"spec must be a LocalSpectrum, got {_describe(spec)}")
    tw_quantile = check_real(tw_quantile, "tw_quantile")
    N, M, q = spec.N, spec.M, spec.q
    if M < 2:
        raise ValueError(f"spec.M must be >= 2 for a bulk fit, got {M}")
    if spec.noise_var > 0:
        return _fit_noised_bulk(spec, tw_quantile, sigma2, max_iter)
    mu, sd = rmt.johnstone_center_scale(N, M)
    lam = spec.values
    known = sigma2 is not None
    s2 = check_in_range(sigma2, "sigma2", 0.0, None, low_open=True) if known else spec.trace / N
    k = -1
    for _ in range(max_iter):
        edge = s2 * (mu + tw_quantile * sd)
        k_new = min(int(np.sum(lam > edge)), N - 1, lam.size)
        if known:
            break
        kappa, _ = _kappa_gamma(lam[:k_new], s2, q)
        denom = N - k_new - q * (k_new + float(np.sum(1.0 / kappa)))
        s2_new = (spec.trace - float(lam[:k_new].sum())) / denom if denom > 0 else s2
        s2_new = max(s2_new, 1e-12)
        converged = k_new == k and abs(s2_new - s2) <= 1e-12 * max(s2, 1.0)
        k, s2 = k_new, s2_new
        if converged:
            break
    edge = s2 * (mu + tw_quantile * sd)
    k = min(int(np.sum(lam > edge)), N - 1, lam.size)
    if k == lam.size and not spec.complete:
        raise ValueError(
            f"spec holds only {lam.size} leading eigenvalues and all are outliers; "
            "recompute it with a larger n_vectors"
        )
    kappa, gamma = _kappa_gamma(lam[:k], s2, q)
    return BulkFit(float(s2), k, float(edge), kappa, gamma)


def _noisy_kappa_c(s2: float, q: float, v: float) -> float:
    """Spike strength at the noisy BBP transition, ``s2^2 (kappa + q)^2 (1 - q/kappa^2) = v``.

    The left side increases from 0 at ``kappa = sqrt(q)`` (the noiseless threshold), so the
    root is unique; ``v = 0`` gives ``sqrt(q)``.
    """
    k0 = math.sqrt(q)
    if v <= 0:
        return k0
    f = lambda k: rmt._noisy_critical_std(k, q, s2) ** 2 - v  # noqa: E731
    hi = max(2.0 * k0, math.sqrt(v) / s2 + q)
    while f(hi) <= 0:
        hi *= 2.0
    return float(scipy.optimize.brentq(f, k0, hi, xtol=1e-14 * hi, rtol=1e-14, maxiter=200))


def _noisy_location(kappa: float, s2: float, q: float, v: float) -> float:
    """Outlier of ``MP(s2, q) ⊞ SC(v)`` for a spike ``kappa`` (:func:`fedlam.rmt._noisy_outlier_location`)."""
    return float(rmt._noisy_outlier_location(kappa, q, v, s2))


def _noisy_kappa_gamma(lam: np.ndarray, s2: float, q: float, v: float) -> tuple[np.ndarray, np.ndarray]:
    """Spike strengths and squared overlaps of noised outliers (inversion of :func:`_noisy_location`).

    The location increases in ``kappa`` above the noisy transition ``kappa_c``
    (:func:`_noisy_kappa_c`, where its derivative vanishes), so each ``lam`` above the edge
    ``_noisy_location(kappa_c)`` has one preimage there; below it ``kappa_c`` is returned (the
    largest strength consistent with the observation, as ``below="threshold"`` does without
    noise). Overlap: the noiseless one times ``1 - v / s_c^2(kappa)``,
    ``s_c^2(kappa) = s2^2 (kappa + q)^2 (1 - q/kappa^2)`` (:func:`fedlam.privacy.noisy_outlier`).
    """
    if lam.size == 0:
        return np.empty(0), np.empty(0)
    kc = _noisy_kappa_c(s2, q, v)
    edge = _noisy_location(kc, s2, q, v)
    kappa = np.empty(lam.size)
    for i, x in enumerate(lam):
        if not x > edge:
            kappa[i] = kc
            continue
        hi = max(2.0 * kc, float(x) / s2)
        while _noisy_location(hi, s2, q, v) <= x:
            hi *= 2.0
        kappa[i] = scipy.optimize.brentq(lambda k, x=float(x): _noisy_location(k, s2, q, v) - x, kc, hi,
                                         xtol=1e-13 * hi, rtol=1e-13, maxiter=200)
    sc2 = rmt._noisy_critical_std(kappa, q, s2) ** 2
    shrink = np.clip(1.0 - v / np.maximum(sc2, 1e-300), 0.0, 1.0)
    return kappa, np.asarray(rmt.eigvec_overlap(kappa, q), dtype=np.float64) * shrink


def _noised_edge(s2: float, q: float, v: float, N: int, tw_quantile: float) -> float:
    """Detection edge of ``MP(s2, q) ⊞ SC(v)``: its free edge plus ``tw_quantile`` Tracy-Widom scales."""
    from . import khat

    x, _, x2 = khat._free_edge(np.array([s2]), np.array([q]), v)
    return float(x + tw_quantile * khat._tw_scale_from_curvature(x2, N))


def _fit_noised_bulk(spec: LocalSpectrum, tw_quantile: float, sigma2: float | None, max_iter: int) -> BulkFit:
    """:func:`fit_bulk` for a batch operator that carries declared Gaussian noise (``spec.noise_var``).

    The spectrum of ``N (B + Z)`` is the spiked ``MP(s2, q)`` law freely convolved with the
    semicircle ``SC(v)`` of the noise. Detection edge: the free edge of ``MP(s2, q) ⊞ SC(v)``
    plus ``tw_quantile`` Tracy-Widom scales of its curvature. Bulk variance: the noise has zero
    diagonal, so ``tr N (B + Z) = N`` still, and the outliers sit at ``l_W,i + v g_i`` with
    ``g_i = 1/(s2 (kappa_i + q))`` (subordination); the trace identity becomes
    ``s2 = (tr - sum_i lambda_i + v sum_i g_i) / (N - k - q (k + sum_i 1/kappa_i))``, iterated
    with ``k`` and the ``kappa_i`` of :func:`_noisy_kappa_gamma`. Derived in
    {ref}`sec-privacy-weight`.
    """
    N, q, v = spec.N, spec.q, float(spec.noise_var)
    lam = spec.values
    known = sigma2 is not None
    s2 = check_in_range(sigma2, "sigma2", 0.0, None, low_open=True) if known else spec.trace / N
    k = -1
    for _ in range(max_iter):
        if known:
            break
        edge = _noised_edge(s2, q, v, N, tw_quantile)
        k_new = min(int(np.sum(lam > edge)), N - 1, lam.size)
        kappa, _ = _noisy_kappa_gamma(lam[:k_new], s2, q, v)
        denom = N - k_new - q * (k_new + float(np.sum(1.0 / kappa)))
        shift = v * float(np.sum(1.0 / (s2 * (kappa + q))))
        s2_new = (spec.trace - float(lam[:k_new].sum()) + shift) / denom if denom > 0 else s2
        s2_new = max(s2_new, 1e-12)
        converged = k_new == k and abs(s2_new - s2) <= 1e-12 * max(s2, 1.0)
        k, s2 = k_new, s2_new
        if converged:
            break
    edge = _noised_edge(s2, q, v, N, tw_quantile)
    k = min(int(np.sum(lam > edge)), N - 1, lam.size)
    if k == lam.size and not spec.complete:
        raise ValueError(
            f"spec holds only {lam.size} leading eigenvalues and all are outliers; "
            "recompute it with a larger n_vectors"
        )
    kappa, gamma = _noisy_kappa_gamma(lam[:k], s2, q, v)
    return BulkFit(float(s2), k, float(edge), kappa, gamma)


def estimate_quality(B_or_spectrum: np.ndarray | LocalSpectrum, M: int | None = None,
                     tw_quantile: float = _TW1_Q999) -> float:
    """Estimate the channel quality from the client's own batch: ``r_hat = sqrt(max(0, 1 - s2_hat))``.

    ``E[N B] = (1 - r^2) I + N r^2 sum_mu pi_mu u_mu u_mu^T``: the bulk of ``N B`` is
    Marchenko–Pastur with variance ``1 - r^2``. A pure-noise batch gives ``r_hat ~ 0``.
    Derived in {ref}`sec-controller-rule`.

    Parameters
    ----------
    B_or_spectrum : numpy.ndarray or LocalSpectrum
        The batch operator ``B`` (then ``M`` is required) or its :class:`LocalSpectrum`.
    M : int, optional
        Batch size (with ``B``).
    tw_quantile : float
        Outlier margin of :func:`fit_bulk`.

    Returns
    -------
    float
        r_hat in [0, 1].
    """
    spec = _as_spectrum(B_or_spectrum, M)
    tr = spec.trace / spec.N
    if not abs(tr - 1.0) <= 1e-6:
        # the bulk variance 1 - r^2 is in units where tr B = 1 (the +-1 batch operator eta^T eta / (N M))
        raise ValueError(f"B_or_spectrum must be a batch operator eta^T eta / (N M) of +-1 examples, with "
                         f"tr B = 1; got tr B = {tr:.6g} (a rescaled or noisy operator has no quality estimate)")
    s2 = fit_bulk(spec, tw_quantile).sigma2
    return float(math.sqrt(min(1.0, max(0.0, 1.0 - s2))))


def _as_spectrum(B_or_spectrum: Any, M: int | None, name: str = "B_or_spectrum") -> LocalSpectrum:
    if isinstance(B_or_spectrum, LocalSpectrum):
        return B_or_spectrum
    if isinstance(B_or_spectrum, np.ndarray):
        check_operator(B_or_spectrum, name)
        return local_spectrum(B=B_or_spectrum, M=M)
    raise TypeError(f"{name} must be an (N, N) operator or a LocalSpectrum, got {_describe(B_or_spectrum)}")


# ----------------------------------------------------------------------------------------
# our rule
# ----------------------------------------------------------------------------------------
_OMEGA_SEED = 20240611  # fixed test matrix for the range finder (exact for low-rank A)


def _range_basis(A: np.ndarray, rtol: float = 1e-9) -> np.ndarray:
    """Orthonormal basis of ``range(A)`` for a low-rank symmetric ``A`` (randomised range finder).

    ``range(A Omega) = range(A)`` with probability one when ``rank(A) < s`` columns; ``s`` is
    doubled until the numerical rank of ``A Omega`` is below ``s``. Cost O(N^2 s).
    """
    N = A.shape[0]
    scale = float(np.max(np.abs(A))) if A.size else 0.0
    if scale == 0.0:
        return np.zeros((N, 0))
    gen = np.random.default_rng(_OMEGA_SEED)
    s = min(N, 24)
    while True:
        Y = A @ gen.standard_normal((N, s))
        U, sv, _ = np.linalg.svd(Y, full_matrices=False)
        rank = int(np.sum(sv > rtol * sv[0])) if sv.size and sv[0] > 0 else 0
        if rank < s or s == N:
            return U[:, :rank]
        s = min(N, 2 * s)


@dataclass(frozen=True)
class NoveltyAssessment:
    """Everything :func:`novelty_assessment` computed (for plots and the book).

    Attributes
    ----------
    w : float
        Instantaneous weight (0 when nothing is detected).
    detected : bool
        At least one BBP outlier above the client's own edge.
    novelty : float
        f, the energy-weighted fraction of the client's signal outside ``range(A)``.
    n_outliers : int
    sigma2 : float
        Bulk variance (estimated or known).
    r_hat : float
        ``sqrt(max(0, 1 - sigma2))``.
    kappa, gamma, residual, nu : numpy.ndarray
        Per outlier: spike strength, eigenvector overlap, ``|(I - P) v|^2`` and the de-biased
        novel fraction ``nu_hat``.
    rank_A : int
        Dimension of the broadcast subspace (0 when nothing is detected: not computed).
    """

    w: float
    detected: bool
    novelty: float
    n_outliers: int
    sigma2: float
    r_hat: float
    kappa: np.ndarray
    gamma: np.ndarray
    residual: np.ndarray
    nu: np.ndarray
    rank_A: int


def novelty_assessment(
    A: np.ndarray,
    B: np.ndarray | None = None,
    M: int | None = None,
    *,
    spectrum: LocalSpectrum | None = None,
    w_floor: float = 0.1,
    tw_quantile: float = _TW1_Q999,
    sigma2: float | None = None,
) -> NoveltyAssessment:
    """Our spectral-novelty rule with all intermediate quantities.

    ``w = 0`` if the client's ``N B`` has no BBP outlier above its own Marchenko–Pastur edge
    (Johnstone + Tracy–Widom margin), else ``w = w_floor + (1 - w_floor) f`` with ``f`` the
    fraction of the client's signal energy outside the range of the broadcast ``A``,
    de-biased for the finite-sample eigenvector overlap. See the module notes for the
    derivation. Derived in {ref}`sec-controller-rule`.

    Parameters
    ----------
    A : numpy.ndarray
        Broadcast operator (N, N); the zero matrix for K̂ = 0.
    B : numpy.ndarray, optional
        Batch operator (N, N) with batch size ``M`` (or give ``spectrum``).
    M : int, optional
        Batch size; ``M = 0`` (empty batch) gives ``w = 0``.
    spectrum : LocalSpectrum, optional
        Precomputed client spectrum (e.g. from :func:`local_spectrum` on the examples).
    w_floor : float
        Weight of a client whose signal the server already holds, in [0, 1].
    tw_quantile : float
        Detection margin (Tracy–Widom units above Johnstone's centring).
    sigma2 : float, optional
        Known bulk variance ``1 - r^2`` (known-r mode); default: estimated.

    Returns
    -------
    NoveltyAssessment
    """
    check_operator(A, "A")
    w_floor = check_in_range(w_floor, "w_floor", 0.0, 1.0)
    N = A.shape[0]
    empty = np.empty(0)
    if spectrum is None:
        if M is not None and check_nonneg_int(M, "M") == 0:
            return NoveltyAssessment(0.0, False, 0.0, 0, float("nan"), float("nan"),
                                     empty, empty, empty, empty, 0)
        if B is None:
            raise ValueError("give B (with M) or spectrum")
        spectrum = _as_spectrum(B, M, "B")
    elif not isinstance(spectrum, LocalSpectrum):
        raise TypeError(f"spectrum must be a LocalSpectrum, got {_describe(spectrum)}")
    elif B is not None:
        raise ValueError("give B (with M) or spectrum, not both: spectrum would be used and B ignored")
    if spectrum.N != N:
        raise ValueError(f"spectrum has N = {spectrum.N} but A has shape {A.shape}")
    return _novelty(A, spectrum, w_floor, tw_quantile, sigma2)


def _novelty(A: np.ndarray, spectrum: LocalSpectrum, w_floor: float, tw_quantile: float,
             sigma2: float | None) -> NoveltyAssessment:
    """Core of :func:`novelty_assessment` (arguments already validated)."""
    empty = np.empty(0)
    if spectrum.M < 2:  # one example: a rank-one operator, no bulk to test against
        return NoveltyAssessment(0.0, False, 0.0, 0, float("nan"), float("nan"),
                                 empty, empty, empty, empty, 0)
    fit = fit_bulk(spectrum, tw_quantile, sigma2=sigma2)
    r_hat = float(math.sqrt(min(1.0, max(0.0, 1.0 - fit.sigma2))))
    if fit.n_outliers == 0:
        return NoveltyAssessment(0.0, False, 0.0, 0, fit.sigma2, r_hat, empty, empty, empty,
                                 empty, 0)
    Q = _range_basis(A)
    k = fit.n_outliers
    V = spectrum.vectors[:, :k]
    inside = np.sum((Q.T @ V) ** 2, axis=0) if Q.shape[1] else np.zeros(k)
    residual = np.clip(1.0 - inside, 0.0, 1.0)
    kappa, gamma = fit.kappa, fit.gamma
    safe_gamma = np.maximum(gamma, 1e-12)
    nu = np.clip((residual - (1.0 - gamma)) / safe_gamma, 0.0, 1.0)
    energy = kappa * gamma
    f = float(np.sum(energy * nu) / np.sum(energy)) if np.sum(energy) > 0 else 1.0
    w = w_floor + (1.0 - w_floor) * f
    return NoveltyAssessment(float(min(1.0, max(0.0, w))), True, f, fit.n_outliers, fit.sigma2,
                             r_hat, kappa, gamma, residual, nu, Q.shape[1])


def novelty_weight(
    A: np.ndarray,
    B: np.ndarray | None = None,
    M: int | None = None,
    *,
    spectrum: LocalSpectrum | None = None,
    w_floor: float = 0.1,
    tw_quantile: float = _TW1_Q999,
    sigma2: float | None = None,
) -> float:
    """Our spectral-novelty weight (see :func:`novelty_assessment`). Derived in {ref}`sec-controller-rule`.

    Returns
    -------
    float
        0 for a client with no detectable signal (pure noise, empty batch); ``w_floor`` for
        a client whose signal the server already holds; up to 1 for a fully novel signal
        (and exactly 1 for detected signal when ``A = 0``).
    """
    return novelty_assessment(A, B, M, spectrum=spectrum, w_floor=w_floor,
                              tw_quantile=tw_quantile, sigma2=sigma2).w


# ----------------------------------------------------------------------------------------
# stateful controllers
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WeightDecision:
    """One controller step: the weight used and how it came about.

    Attributes
    ----------
    w : float
        Weight used for the blend.
    w_raw : float
        Instantaneous (unsmoothed) value of the rule (NaN on an empty batch).
    r_used : float
        Quality used by the rule (NaN if the rule uses none).
    details : dict
        Rule-specific quantities (p, H_AB, H_min / novelty, n_outliers, ...).
    """

    w: float
    w_raw: float
    r_used: float
    details: dict = field(default_factory=dict)


class WeightController:
    """Base class: a per-client plasticity controller with EMA smoothing.

    Subclasses implement :meth:`raw`. :meth:`update` applies the paper's EMA (eq. (4.20))
    starting from ``w_init``; an empty batch returns 0 and leaves the state unchanged.
    Derived in {ref}`sec-controller`.

    Parameters
    ----------
    alpha : float
        EMA coefficient in [0, 1] (1 = no smoothing).
    w_init : float
        Initial smoothed weight in [0, 1] (default 1 = round 0 of the protocol).
    """

    name = "base"
    #: whether :meth:`.update` uses the client's spectrum (clients then compute it from examples)
    needs_spectrum = False

    def __init__(self, alpha: float = 0.5, w_init: float = 1.0) -> None:
        self.alpha = check_in_range(alpha, "alpha", 0.0, 1.0)
        self.w_init = check_in_range(w_init, "w_init", 0.0, 1.0)
        self.state = self.w_init
        self.last: WeightDecision | None = None

    def reset(self) -> None:
        """Return to the initial state."""
        self.state = self.w_init
        self.last = None

    def raw(self, A: np.ndarray, B: np.ndarray, M: int,
            spectrum: LocalSpectrum | None) -> tuple[float, float, dict, bool]:
        """Instantaneous rule: (w_raw, r_used, details, gate). Subclasses override."""
        raise NotImplementedError

    def update(self, A: np.ndarray, B: np.ndarray | None, M: int,
               spectrum: LocalSpectrum | None = None) -> float:
        """Weight for this round from broadcast ``A`` and batch operator ``B`` (size ``M``).

        Parameters
        ----------
        A : numpy.ndarray
            Broadcast operator (N, N).
        B : numpy.ndarray or None
            Batch operator (N, N); None iff ``M == 0``.
        M : int
            Batch size (0 = empty batch: returns 0, state unchanged).
        spectrum : LocalSpectrum, optional
            Precomputed spectrum of ``N B`` (computed from ``B`` if needed and absent).

        Returns
        -------
        float
            The weight w_c(t) in [0, 1].
        """
        check_operator(A, "A")
        M = check_nonneg_int(M, "M")
        if M == 0:
            if B is not None:
                raise ValueError("B must be None for an empty batch (M = 0)")
            self.last = WeightDecision(0.0, float("nan"), float("nan"), {"reason": "empty batch"})
            return 0.0
        if B is None:
            raise ValueError(f"B is required for a non-empty batch (M = {M})")
        check_operator(B, "B")
        if B.shape != A.shape:
            raise ValueError(f"A and B must have the same shape, got A {A.shape} and B {B.shape}")
        if spectrum is not None and not isinstance(spectrum, LocalSpectrum):
            raise TypeError(f"spectrum must be a LocalSpectrum, got {_describe(spectrum)}")
        w_raw, r_used, details, gate = self.raw(A, B, M, spectrum)
        if not gate:
            self.last = WeightDecision(0.0, w_raw, r_used, details)
            return 0.0
        self.state = ema(w_raw, self.state, self.alpha)
        self.last = WeightDecision(self.state, w_raw, r_used, details)
        return self.state


class PaperController(WeightController):
    """The paper's entropy rule with EMA (paper eqs. (4.19), (4.20)).

    Parameters
    ----------
    r : float, optional
        Known quality in [0, 1]; ``None`` = estimate ``r_hat`` from the batch spectrum
        (:func:`estimate_quality`), clamped to ``[r_min, 1]``.
    r_min : float
        Lower clamp of the estimated quality, in [0, 1]. The rule is evaluated stably down to
        ``r = 0`` (its limit there is ``w = 0``), but below ``r ~ n_pairs^(-1/4)`` its value is
        decided by the sampling noise of ``p`` (see the module notes): the default 0.1 keeps
        an estimated quality out of that range, and so a pure-noise client keeps ``w ~ 1``.
        With ``r_min = 0`` a pure-noise client's ``r_hat ~ 0`` gives ``w = 0``: the paper's
        attacker collapse, which therefore needs the attacker's own quality.
    alpha, w_init : float
        See :class:`WeightController`.

    Derived in {ref}`sec-controller`.
    """

    name = "paper"

    def __init__(self, r: float | None = None, alpha: float = 0.5, w_init: float = 1.0,
                 r_min: float = 0.1) -> None:
        super().__init__(alpha, w_init)
        self.r = None if r is None else check_in_range(r, "r", 0.0, 1.0)
        self.r_min = check_in_range(r_min, "r_min", 0.0, 1.0)
        self.needs_spectrum = self.r is None

    def raw(self, A, B, M, spectrum):
        if self.r is not None:
            r = self.r
            r_hat = float("nan")
        else:
            spec = spectrum if spectrum is not None else local_spectrum(B=B, M=M)
            r_hat = estimate_quality(spec)
            r = max(self.r_min, r_hat)
        t = _paper_terms(A, B, r)
        t["r_hat"] = r_hat
        return t["w"], r, t, True


class NoveltyController(WeightController):
    """Our spectral-novelty rule (:func:`novelty_assessment`) with EMA on detected rounds.

    A round without a detected outlier returns 0 (gate applied after smoothing) and does not
    move the smoothed state. Derived in {ref}`sec-controller-rule`.

    Parameters
    ----------
    r : float, optional
        Known quality (then the bulk variance ``1 - r^2`` is known); ``None`` = estimated.
    w_floor : float
        Weight of a consolidated client.
    tw_quantile : float
        Detection margin.
    alpha, w_init : float
        See :class:`WeightController`.
    """

    name = "novelty"
    needs_spectrum = True

    def __init__(self, r: float | None = None, alpha: float = 0.5, w_init: float = 1.0,
                 w_floor: float = 0.1, tw_quantile: float = _TW1_Q999) -> None:
        super().__init__(alpha, w_init)
        self.r = None if r is None else check_quality(r)
        self.w_floor = check_in_range(w_floor, "w_floor", 0.0, 1.0)
        self.tw_quantile = check_real(tw_quantile, "tw_quantile")

    def raw(self, A, B, M, spectrum):
        spec = spectrum if spectrum is not None else local_spectrum(B=B, M=M)
        s2 = None if self.r is None or self.r >= 1.0 else 1.0 - self.r**2
        if spec.N != A.shape[0]:
            raise ValueError(f"spectrum has N = {spec.N} but A has shape {A.shape}")
        a = _novelty(A, spec, self.w_floor, self.tw_quantile, s2)
        details = {"novelty": a.novelty, "n_outliers": a.n_outliers, "sigma2": a.sigma2,
                   "r_hat": a.r_hat, "rank_A": a.rank_A, "nu": a.nu, "kappa": a.kappa}
        r_used = self.r if self.r is not None else a.r_hat
        return a.w, r_used, details, a.detected


class ConstantController(WeightController):
    """Fixed weight ``w`` (the paper's ``w = 0``, ``w = 1`` limits and ``w = 0.6``).

    Empty batches still give 0. Derived in {ref}`sec-controller`.
    """

    name = "constant"

    def __init__(self, w: float) -> None:
        w = check_in_range(w, "w", 0.0, 1.0)
        super().__init__(alpha=1.0, w_init=w)
        self.w = w

    def raw(self, A, B, M, spectrum):
        return self.w, float("nan"), {}, True


def make_controller(kind: str | float, *, r: float | None = None, alpha: float = 0.5,
                    w_init: float = 1.0, **kwargs: Any) -> WeightController:
    """Build a controller: ``"paper"``, ``"novelty"`` or a float constant weight.

    Parameters
    ----------
    kind : str or float
        ``"paper"`` (:class:`PaperController`), ``"novelty"`` (:class:`NoveltyController`)
        or a number in [0, 1] (:class:`ConstantController`).
    r : float, optional
        Known quality (None = estimated from the client's own spectrum).
    alpha, w_init : float
        EMA coefficient and initial weight.
    **kwargs
        Extra options of the chosen class (``r_min``, ``w_floor``, ``tw_quantile``).

    Returns
    -------
    WeightController
    """
    if isinstance(kind, numbers.Real) and not isinstance(kind, (bool, np.bool_)):
        if kwargs:
            raise TypeError(f"a constant controller takes no options, got {sorted(kwargs)}")
        return ConstantController(check_in_range(kind, "kind: controller", 0.0, 1.0))
    if not isinstance(kind, str):
        raise TypeError(f"kind: controller must be 'paper', 'novelty' or a float in [0, 1], got {_describe(kind)}")
    if kind == "paper":
        return PaperController(r=r, alpha=alpha, w_init=w_init, **kwargs)
    if kind == "novelty":
        return NoveltyController(r=r, alpha=alpha, w_init=w_init, **kwargs)
    raise ValueError(f"kind: controller must be 'paper', 'novelty' or a float in [0, 1], got {_describe(kind)}")
