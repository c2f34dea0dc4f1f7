"""Tests of fedlam.controller: the paper's entropy rule, its failure on noise, our novelty rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedlam import controller as C
from fedlam.data import random_archetypes, sample_examples
from fedlam.operators import hebbian, pattern_operator

N, K, M, R = 400, 3, 300, 0.9


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(1234)
    xi = random_archetypes(K + 1, N, rng)  # last one is "new"
    old = xi[:K]
    honest, _ = sample_examples(old, M, R, np.full(K, 1.0 / K), rng)
    noise = rng.choice(np.array([-1, 1], dtype=np.int8), size=(M, N))
    shift, _ = sample_examples(xi, M, R, np.array([0.2, 0.2, 0.2, 0.4]), rng)
    return {
        "xi": xi,
        "A": pattern_operator(old),
        "honest": honest,
        "noise": noise,
        "shift": shift,
    }


# ---------------------------------------------------------------- entropy, floor, agreement
def test_binary_entropy_values():
    assert C.binary_entropy(0.5) == 1.0
    assert C.binary_entropy(0.0) == 0.0 and C.binary_entropy(1.0) == 0.0
    p = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    h = C.binary_entropy(p)
    np.testing.assert_allclose(h, h[::-1], rtol=0, atol=1e-15)
    np.testing.assert_allclose(h[0], -(0.1 * math.log2(0.1) + 0.9 * math.log2(0.9)), rtol=1e-14)


def test_h_min_values():
    assert C.h_min(1.0) == 0.0
    assert C.h_min(0.0) == 1.0
    # (1 + 0.81)/2 = 0.905
    expected = -(0.905 * math.log2(0.905) + 0.095 * math.log2(0.095))
    assert abs(C.h_min(0.9) - expected) < 1e-14
    assert abs(C.h_min(0.9) - 0.452942548) < 1e-8
    r = np.array([0.0, 0.5, 1.0])
    np.testing.assert_allclose(C.h_min(r), [1.0, C.h_min(0.5), 0.0])
    # decreasing in r
    assert np.all(np.diff(C.h_min(np.linspace(0, 1, 11))) < 0)


def test_sign_agreement_basic(world):
    A = world["A"]
    assert C.sign_agreement(A, A) == 1.0
    assert C.sign_agreement(A, -A) == pytest.approx(0.0, abs=0.0)
    assert C.sign_agreement(np.zeros((N, N)), A) == 0.5


def test_sign_agreement_ties_count_half():
    # A from K_hat = 2 patterns: off-diagonal entries are 0 where the patterns disagree
    xi = np.array([[1, 1, 1, -1], [1, -1, 1, 1]], dtype=np.int8)
    A = pattern_operator(xi)
    B = np.ones((4, 4))
    off = ~np.eye(4, dtype=bool)
    n_zero = int(np.sum(A[off] == 0))
    n_agree = int(np.sum(A[off] > 0))
    assert n_zero > 0
    assert C.sign_agreement(A, B) == pytest.approx((n_agree + 0.5 * n_zero) / 12, abs=1e-15)
    # the diagonal is ignored
    B2 = B.copy()
    np.fill_diagonal(B2, -1.0)
    assert C.sign_agreement(A, B2) == C.sign_agreement(A, B)


# ---------------------------------------------------------------- pure-noise client
def _deficit_exact(x: float) -> float:
    """1 - h2(1/2 + x) in bits, straight from the definition (no shared code)."""
    p = 0.5 + x
    return 1.0 + p * math.log2(p) + (1 - p) * math.log2(1 - p)


def test_noise_bound_dominates_the_exact_rule():
    """The bound of noise_client_paper_bound is >= the exact 1 - w at the deviation it allows,
    and within its own factor 1/(1 - 4 delta^2) of the leading-order (2 delta)^2 term."""
    for n, r, ns in ((400, 0.9, 10.0), (100, 0.5, 3.0), (1000, 0.8, 5.0)):
        bound = C.noise_client_paper_bound(n, r, n_sigma=ns)
        delta = ns / (2 * math.sqrt(n * (n - 1) / 2))
        exact = _deficit_exact(delta) / _deficit_exact((r * r) / 2)  # 1 - w at p = 1/2 + delta
        assert exact <= bound <= exact / (1 - 4 * delta**2) ** 2 + 1e-15
        assert C.paper_weight(0.5 + delta, r) == pytest.approx(1 - exact, abs=1e-12)


def test_paper_rule_trusts_pure_noise(world):
    """The paper's rule with an honest client's quality gives a pure-noise client w ~ 1."""
    B = hebbian(world["noise"])
    bound = C.noise_client_paper_bound(N, R, n_sigma=10.0)
    terms = C.paper_terms(world["A"], B, R)
    delta = terms["p"] - 0.5
    sd = 1 / (2 * math.sqrt(N * (N - 1) / 2))
    assert abs(delta) <= 10 * sd
    assert terms["w"] >= 1.0 - bound
    assert C.entropy_weight(world["A"], B, R) == terms["w"]


@pytest.mark.slow
def test_noise_bound_holds_across_batches():
    """Chebyshev allows a fraction 1/n_sigma^2 of batches below 1 - bound; p is a mean of
    1770 nearly independent pair scores, so the fraction is ~2 Phi(-3) = 0.0027 at n_sigma = 3.
    200 batches: P(count >= 5 | 0.0027) < 0.002."""
    rng = np.random.default_rng(17)
    n, m, r = 60, 80, 0.9
    A = pattern_operator(random_archetypes(3, n, 5))
    bound = C.noise_client_paper_bound(n, r, n_sigma=3.0)
    low = sum(C.entropy_weight(A, hebbian(rng.choice(np.array([-1, 1], dtype=np.int8), size=(m, n))), r) < 1 - bound
              for _ in range(200))
    assert low <= 4


def test_paper_rule_with_own_quality_collapses(world):
    """The attacker collapse: the rule with the client's own r ~ 0 gives w = 0 (limit r -> 0+)."""
    B = hebbian(world["noise"])
    p = C.sign_agreement(world["A"], B)
    assert p != 0.5
    assert C.entropy_weight(world["A"], B, 0.0) == 0.0
    assert C.paper_terms(world["A"], B, 0.0)["w_unclipped"] == -math.inf
    assert C.paper_weight(0.5, 0.0) == 1.0  # the limit at p = 1/2 exactly
    # leading order: 1 - w = (2 delta)^2 / r^4 (1 + O(r^4 + delta^2)); exact to 1e-3 here
    for r in (0.2, 0.1):
        w = C.paper_weight(p, r)
        lead = (2 * (p - 0.5)) ** 2 / r**4
        assert (1 - w) == pytest.approx(lead, rel=1e-3)
    # below r ~ n_pairs^(-1/4) * sqrt(|2 delta| sqrt(n_pairs)) the weight is clipped to 0
    r_star = math.sqrt(2 * abs(p - 0.5))
    assert C.paper_weight(p, 0.99 * r_star) == 0.0 and C.paper_weight(p, 1.01 * r_star) > 0.0
    # the stable evaluation agrees with the textbook formula where that is accurate
    for pp in (0.3, 0.62, 0.9):
        for rr in (0.3, 0.7, 0.95):
            naive = max(0.0, min(1.0, (C.binary_entropy(pp) - C.h_min(rr)) / (1 - C.h_min(rr))))
            assert C.paper_weight(pp, rr) == pytest.approx(naive, abs=1e-12)
    # the controller: with r_min = 0.1 (default) the estimated r_hat = 0 is clamped and the
    # noise client keeps a high weight; with r_min = 0 ten rounds at alpha = 0.5 give 0.5^10
    ctrl = C.PaperController(r=None, alpha=1.0)
    w_est = ctrl.update(world["A"], B, M)
    assert ctrl.last.details["r_hat"] < 0.05 and ctrl.last.r_used == 0.1
    assert w_est == pytest.approx(C.paper_weight(p, 0.1), abs=1e-15)
    own = C.PaperController(r=None, alpha=0.5, r_min=0.0)
    rng = np.random.default_rng(3)
    for _ in range(10):
        Bn = hebbian(rng.choice(np.array([-1, 1], dtype=np.int8), size=(M, N)))
        w_own = own.update(world["A"], Bn, M)
    assert w_own == 0.5**10


def test_docstring_table_is_reproduced():
    """The numbers in the module docstring of fedlam.controller (seed 2024)."""
    rng = np.random.default_rng(2024)
    n, m, k, r = 400, 300, 3, 0.9
    xi4 = random_archetypes(k + 1, n, rng)
    A = pattern_operator(xi4[:k])
    noise = hebbian(np.where(rng.random((m, n)) < 0.5, 1, -1).astype(np.int8))
    honest = hebbian(sample_examples(xi4[:k], m, r, np.full(k, 1 / k), rng)[0])
    shift = hebbian(sample_examples(xi4, m, r, np.array([0.2, 0.2, 0.2, 0.4]), rng)[0])
    only_new = hebbian(sample_examples(xi4[k:], m, r, np.ones(1), rng)[0])
    p = C.sign_agreement(A, noise)
    assert round(p, 5) == 0.49835 and round(C.paper_weight(p, 0.9), 5) == 0.99999
    assert [round(C.paper_weight(p, rr), 3) for rr in (0.1, 0.05, 0.0)] == [0.891, 0.0, 0.0]
    assert C.novelty_weight(A, noise, m) == 0.0
    assert C.sign_agreement(A, honest) == 1.0 and C.entropy_weight(A, honest, r) == 0.0
    a = C.novelty_assessment(A, honest, m)
    assert round(a.novelty, 3) == 0.0 and round(a.w, 3) == 0.1
    assert round(C.sign_agreement(A, shift), 3) == 0.624 and round(C.entropy_weight(A, shift, r), 3) == 0.919
    a = C.novelty_assessment(A, shift, m)
    assert (round(a.novelty, 3), round(a.w, 3)) == (0.422, 0.48)
    assert round(C.entropy_weight(A, only_new, r), 5) == 0.99998 and round(C.novelty_weight(A, only_new, m), 3) == 1.0
    Z = np.zeros((n, n))
    assert [C.entropy_weight(Z, honest, r), C.entropy_weight(Z, noise, r)] == [1.0, 1.0]
    assert [C.novelty_weight(Z, honest, m), C.novelty_weight(Z, noise, m)] == [1.0, 0.0]
    assert round(C.estimate_quality(honest, m), 3) == 0.901 and C.estimate_quality(noise, m) == 0.0


def test_novelty_rule_rejects_pure_noise(world):
    spec = C.local_spectrum(world["noise"])
    a = C.novelty_assessment(world["A"], spectrum=spec)
    assert not a.detected and a.w == 0.0
    assert C.novelty_weight(world["A"], hebbian(world["noise"]), M) == 0.0
    ctrl = C.NoveltyController()
    assert ctrl.update(world["A"], hebbian(world["noise"]), M, spec) == 0.0
    assert ctrl.state == 1.0  # gate does not move the smoothed state


@pytest.mark.slow
def test_noise_false_detection_rate():
    """0.999 Tracy-Widom margin: false detections on 3000 pure-noise batches (N = 60, M = 120).

    At the nominal rate 1e-3 the count is Poisson(3); at 1e-2 it would be Poisson(30).
    Accept at most 9: P(count >= 10 | 3) = 0.0011, P(count <= 9 | 30) < 1e-5.
    """
    rng = np.random.default_rng(7)
    n, m = 60, 120
    hits = 0
    for _ in range(3000):
        X = rng.choice(np.array([-1, 1], dtype=np.int8), size=(m, n))
        hits += C.fit_bulk(C.local_spectrum(X)).n_outliers > 0
    assert hits <= 9


# ---------------------------------------------------------------- honest client
def test_quality_estimate(world):
    r_hat = C.estimate_quality(C.local_spectrum(world["honest"]))
    # bulk variance from ~N*M entries: relative error of sigma2 << 1%
    assert abs(r_hat - R) < 0.01
    assert C.estimate_quality(hebbian(world["honest"]), M) == pytest.approx(r_hat, abs=1e-10)
    assert C.estimate_quality(C.local_spectrum(world["noise"])) < 0.1


def test_gram_path_matches_operator_path(world):
    X = world["honest"]
    s1 = C.local_spectrum(X)  # M < N: Gram matrix
    s2 = C.local_spectrum(B=hebbian(X), M=M)
    np.testing.assert_allclose(s1.values, s2.values, rtol=1e-9, atol=1e-9)
    ov = np.abs(np.sum(s1.vectors[:, :K] * s2.vectors[:, :K], axis=0))
    np.testing.assert_allclose(ov, 1.0, atol=1e-8)


def test_consolidated_client_sits_at_floor(world):
    B = hebbian(world["honest"])
    a = C.novelty_assessment(world["A"], spectrum=C.local_spectrum(world["honest"]), w_floor=0.1)
    assert a.detected and a.n_outliers == K
    assert a.novelty < 0.02
    assert 0.1 <= a.w < 0.12
    # the paper's rule: B (M examples) agrees with A far above the one-example floor -> w = 0
    t = C.paper_terms(world["A"], B, R)
    assert t["p"] > (1 + R**2) / 2 and t["w"] == 0.0


def test_shift_raises_novelty_weight(world):
    spec = C.local_spectrum(world["shift"])
    a = C.novelty_assessment(world["A"], spectrum=spec, w_floor=0.1)
    assert a.detected and a.n_outliers == K + 1
    # the new archetype holds 40% of the mixture, hence ~40% of the signal energy
    assert 0.3 < a.novelty < 0.5
    assert a.w > 0.1 + 0.9 * 0.3
    # a batch made only of the new archetype: w -> 1
    rng = np.random.default_rng(5)
    X, _ = sample_examples(world["xi"][K:], M, R, np.ones(1), rng)
    assert C.novelty_weight(world["A"], spectrum=C.local_spectrum(X)) > 0.95
    # EMA: from the floor, a shift moves the smoothed weight up
    ctrl = C.NoveltyController(w_init=0.1, alpha=0.5)
    w0 = ctrl.update(world["A"], hebbian(world["honest"]), M)
    w1 = ctrl.update(world["A"], hebbian(world["shift"]), M, spec)
    assert w0 == pytest.approx(0.1, abs=0.01) and w1 > w0 + 0.1


# ---------------------------------------------------------------- edge cases
def test_zero_broadcast(world):
    Z = np.zeros((N, N))
    B = hebbian(world["honest"])
    assert C.entropy_weight(Z, B, R) == 1.0  # every tie counts 1/2 -> p = 1/2, H = 1
    assert C.novelty_weight(Z, spectrum=C.local_spectrum(world["honest"])) == 1.0
    assert C.novelty_weight(Z, spectrum=C.local_spectrum(world["noise"])) == 0.0


def test_empty_batch(world):
    A = world["A"]
    for ctrl in (C.PaperController(r=R), C.NoveltyController(), C.ConstantController(0.6)):
        state = ctrl.state
        assert ctrl.update(A, None, 0) == 0.0
        assert ctrl.state == state
        assert math.isnan(ctrl.last.w_raw)
    assert C.novelty_weight(A, None, 0) == 0.0
    with pytest.raises(ValueError, match="B is required"):
        C.NoveltyController().update(A, None, 5)


def test_ema_and_controller_smoothing(world):
    assert C.ema(0.0, 1.0, 0.5) == 0.5
    assert C.ema(0.3, 0.7, 1.0) == 0.3
    ctrl = C.NoveltyController(alpha=0.5, w_init=1.0, w_floor=0.1)
    B = hebbian(world["honest"])
    spec = C.local_spectrum(world["honest"])
    ws = [ctrl.update(world["A"], B, M, spec) for _ in range(3)]
    raw = ctrl.last.w_raw
    np.testing.assert_allclose(ws, [0.5 * raw + 0.5, 0.75 * raw + 0.25, 0.875 * raw + 0.125], rtol=1e-12)
    const = C.make_controller(0.6)
    assert const.update(world["A"], B, M) == 0.6


def test_make_controller():
    assert isinstance(C.make_controller("paper"), C.PaperController)
    assert isinstance(C.make_controller("novelty", w_floor=0.2), C.NoveltyController)
    assert isinstance(C.make_controller(0.3), C.ConstantController)
    with pytest.raises(ValueError, match="controller must be"):
        C.make_controller("entropy")


# ---------------------------------------------------------------- bad inputs
def test_bad_inputs(world):
    A = world["A"]
    B = hebbian(world["honest"])
    asym = A.copy()
    asym[0, 1] += 1.0
    with pytest.raises(ValueError, match="A must be symmetric"):
        C.sign_agreement(asym, B)
    with pytest.raises(ValueError, match="A and B must have the same shape"):
        C.sign_agreement(A, B[:10, :10])
    with pytest.raises(TypeError, match="B must be a numpy array"):
        C.sign_agreement(A, B.tolist())
    nanB = B.copy()
    nanB[0, 0] = np.nan
    with pytest.raises(ValueError, match="B must be finite"):
        C.entropy_weight(A, nanB, R)
    with pytest.raises(ValueError, match="r must lie in"):
        C.entropy_weight(A, B, -0.1)
    with pytest.raises(ValueError, match="r_min must lie in"):
        C.PaperController(r_min=1.5)
    with pytest.raises(ValueError, match="r must lie in"):
        C.h_min(1.5)
    with pytest.raises(ValueError, match="p must lie in"):
        C.binary_entropy(1.2)
    with pytest.raises(ValueError, match="alpha must lie in"):
        C.ema(0.5, 0.5, 2.0)
    with pytest.raises(ValueError, match="old must lie in"):
        C.ema(0.5, -0.1, 0.5)
    with pytest.raises(ValueError, match="w_floor must lie in"):
        C.NoveltyController(w_floor=1.5)
    with pytest.raises(ValueError, match="w_init must lie in"):
        C.PaperController(w_init=-1.0)
    with pytest.raises(ValueError, match="M \\(batch size\\) is required"):
        C.local_spectrum(B=B)
    with pytest.raises(ValueError, match="examples must contain only -1 and \\+1"):
        C.local_spectrum(np.zeros((5, N), dtype=np.int8))
    with pytest.raises(TypeError, match="spectrum must be a LocalSpectrum"):
        C.novelty_assessment(A, spectrum=B)
    with pytest.raises(ValueError, match="spectrum has N"):
        C.novelty_assessment(np.zeros((10, 10)), spectrum=C.local_spectrum(world["honest"]))


def test_expected_sign_agreement_closed_form_matches_simulation_and_limits():
    r, K = 0.9, 3
    pi = np.full(K, 1 / K)
    # one example, one archetype: the paper's (1 + r^2)/2
    assert C.expected_sign_agreement(r, 1, np.array([1.0])) == pytest.approx((1 + r * r) / 2)
    # empty memory: every sign of A is a tie
    assert C.expected_sign_agreement(r, 50, pi, memory=0) == 0.5
    # grows towards 1 with M for a client whose archetypes are all in memory
    vals = [C.expected_sign_agreement(r, M, pi) for M in (1, 10, 100)]
    assert vals[0] < vals[1] < vals[2] <= 1.0
    # simulation: the labels of a batch are shared by all its pairs, so batch-to-batch spread
    # is large (a balanced batch agrees ~0.99, an unbalanced one ~0.8); average 300 batches
    # (standard error < 0.004). At N = 100 the 8 sign patterns of the pairs deviate from
    # uniform by about 1/sqrt(4950 / 8) = 4 %, shifting the mean by < 0.01: allow 0.02.
    xi = random_archetypes(K, 100, 4)
    A = pattern_operator(xi)
    rng = np.random.default_rng(11)
    for M in (3, 30):
        sims = [C.sign_agreement(A, hebbian(sample_examples(xi, M, r, pi, rng)[0])) for _ in range(300)]
        assert abs(np.mean(sims) - C.expected_sign_agreement(r, M, pi)) < 0.02
    # the paper's rule applied to the prediction equals the rule on matrices' agreement
    p = C.expected_sign_agreement(r, 1, pi)
    assert C.paper_weight(p, r) == pytest.approx(
        max(0.0, (C.binary_entropy(p) - C.h_min(r)) / (1 - C.h_min(r))))
    with pytest.raises(ValueError, match="memory must be <= K"):
        C.expected_sign_agreement(r, 5, pi, memory=4)
    with pytest.raises(ValueError, match="pi must sum to 1"):
        C.expected_sign_agreement(r, 5, np.array([0.5, 0.6]))
    with pytest.raises(ValueError, match="p must lie in"):
        C.paper_weight(1.5, r)


# ---------------------------------------------------------------- variance of the agreement
def test_sign_agreement_moments_limits():
    # pure noise limit: var = (1 - P(S = 0)) / (4 n_pairs), nothing from the labels; a tie
    # S = 0 (possible for even M) scores 1/2 and removes variance
    n = 200
    mom = C.sign_agreement_moments(1e-4, 101, np.full(3, 1 / 3), n)
    assert mom.var_labels < 1e-20
    assert mom.variance == pytest.approx(1 / (4 * n * (n - 1) / 2), rel=1e-6)
    p0 = math.comb(100, 50) / 2**100
    mom = C.sign_agreement_moments(1e-4, 100, np.full(3, 1 / 3), n)
    assert mom.variance == pytest.approx((1 - p0) / (4 * n * (n - 1) / 2), rel=1e-6)
    assert mom.sd == pytest.approx(math.sqrt(mom.variance))
    # mean is the exact closed form
    assert mom.mean == C.expected_sign_agreement(1e-4, 100, np.full(3, 1 / 3))
    with pytest.raises(ValueError, match="at most 6 archetypes"):
        C.sign_agreement_moments(0.5, 10, np.full(7, 1 / 7), 50)
    with pytest.raises(ValueError, match="N must be >= 3"):
        C.sign_agreement_moments(0.5, 10, np.full(2, 0.5), 2)
    with pytest.raises(ValueError, match="memory must be <= K"):
        C.sign_agreement_moments(0.5, 10, np.full(2, 0.5), 20, memory=3)


@pytest.mark.slow
@pytest.mark.parametrize(
    "r,Mb,pi,memory",
    [
        (0.9, 100, np.full(4, 0.25), 3),   # ties m(s) = 0: the labels dominate
        (0.5, 31, np.full(3, 1 / 3), None),  # the pairs dominate (shared neurons matter)
        (0.7, 50, np.array([0.5, 0.3, 0.2]), None),
    ],
)
def test_sign_agreement_moments_match_simulation(r, Mb, pi, memory):
    """sd of p over 300 batches (fixed archetypes, N = 100) within 4 standard errors of the
    prediction (sd of a sample sd: 1/sqrt(2 (n - 1)) relative). The model of independent
    pairs, sd = sqrt(mean rho (1 - rho) / n_pairs), must be rejected in every case."""
    n, reps = 100, 300
    rng = np.random.default_rng(23)
    K = pi.size
    xi = random_archetypes(K, n, rng)
    A = pattern_operator(xi[: (memory or K)])
    ps = np.array([C.sign_agreement(A, hebbian(sample_examples(xi, Mb, r, pi, rng)[0])) for _ in range(reps)])
    mom = C.sign_agreement_moments(r, Mb, pi, n, memory)
    tol = 4 / np.sqrt(2 * (reps - 1))
    assert abs(ps.std(ddof=1) / mom.sd - 1) < tol
    assert abs(ps.mean() - mom.mean) < 5 * mom.sd / np.sqrt(reps) + 0.01  # 0.01: O(1/N) pattern frequencies
    indep = math.sqrt(mom.mean * (1 - mom.mean) / (n * (n - 1) / 2))
    assert abs(ps.std(ddof=1) / indep - 1) > tol


# ---------------------------------------------------------------- a noised batch (privacy)
def test_noised_bulk_fit_knows_the_declared_noise():
    """A batch operator noised by a privacy mechanism (entry std sigma, zero diagonal): the fit
    against MP(s2, q) ⊞ SC(N (N sigma)^2) finds the archetypes' outliers, the bulk variance and
    the spike strengths of the raw batch, and lowers the overlaps by 1 - v / s_c^2; the plain
    fit counts the semicircle as outliers."""
    from fedlam import privacy

    rng = np.random.default_rng(5)
    Nn, Kn, Mn, r = 400, 4, 400, 0.75
    xi = random_archetypes(Kn, Nn, rng)
    ex, _ = sample_examples(xi, Mn, r, np.full(Kn, 1.0 / Kn), rng)
    B = hebbian(ex)
    raw = C.fit_bulk(C.local_spectrum(B=B, M=Mn))
    for sigma in (2.2e-3, 7e-4):
        Bn = privacy.add_symmetric_noise(B, sigma, rng)
        spec = C.local_spectrum(B=Bn, M=Mn, noise_sigma=sigma)
        assert spec.noise_var == pytest.approx(Nn * (Nn * sigma) ** 2) and not spec.complete
        fit = C.fit_bulk(spec)
        assert fit.n_outliers == Kn
        assert fit.sigma2 == pytest.approx(1 - r * r, rel=0.02)
        # each noised outlier fluctuates by ~ sqrt(v / N) (a few % of kappa at sigma = 2.2e-3)
        np.testing.assert_allclose(np.sort(fit.kappa), np.sort(raw.kappa), rtol=0.1)
        assert fit.kappa.sum() == pytest.approx(raw.kappa.sum(), rel=0.05)
        ov = np.sort(np.max((xi @ spec.vectors[:, :Kn]) ** 2 / Nn, axis=0))
        # the archetypes' near-equal exposures rotate the outlier eigenvectors among themselves
        # (single overlaps scatter), so the sum is compared with the predicted sum
        sub = np.sum((xi @ spec.vectors[:, :Kn]) ** 2 / Nn)
        assert abs(sub - fit.gamma.sum()) < 0.1 * Kn
        assert np.all(fit.gamma < raw.gamma) and ov.size == Kn
        with pytest.raises(ValueError, match="all are outliers"):
            C.fit_bulk(C.local_spectrum(B=Bn, M=Mn))  # the noise ignored: the old failure
    with pytest.raises(ValueError, match="noise_sigma"):
        C.local_spectrum(ex, noise_sigma=1e-3)
    with pytest.raises(ValueError, match="noise_sigma"):
        C.local_spectrum(B=B, M=Mn, noise_sigma=-1.0)
    # no noise: the fit is the one of the raw batch, bit for bit
    assert C.local_spectrum(B=B, M=Mn).noise_var == 0.0
    again = C.fit_bulk(C.local_spectrum(B=B, M=Mn, noise_sigma=0.0))
    assert again.sigma2 == raw.sigma2 and np.array_equal(again.kappa, raw.kappa)


def test_noised_client_is_rejected_as_noise():
    """A pure-noise batch under the same declared noise: the novelty rule detects nothing (w = 0)."""
    from fedlam import privacy

    rng = np.random.default_rng(9)
    X = rng.choice(np.array([-1, 1], dtype=np.int8), size=(400, 400))
    sigma = 2.2e-3
    spec = C.local_spectrum(B=privacy.add_symmetric_noise(hebbian(X), sigma, rng), M=400, noise_sigma=sigma)
    a = C.novelty_assessment(pattern_operator(random_archetypes(3, 400, 1)), spectrum=spec)
    assert not a.detected and a.w == 0.0


@pytest.mark.parametrize("factor, kept", [(0.9, True), (1.1, False)])
def test_correction_weight_is_where_the_sign_step_leaves_a_stored_version(factor, kept):
    # a stored version a of archetype b (15 of 300 bits flipped, m = 0.9) blended with the
    # Hebbian operator of 20,000 sampled examples (b at share 0.6): below the bound one sign
    # step from a returns a, above it the flipped sites take b's signs (bulk and sampling
    # fluctuations included, which the leading-order bound leaves out)
    n, r, pi = 300, 0.8, 0.6
    rng = np.random.default_rng(5)
    xi = random_archetypes(3, n, rng)
    b = xi[0].astype(np.float64)
    a = b.copy()
    flip = rng.choice(n, 15, replace=False)
    a[flip] *= -1
    m = float(a @ b) / n
    ex, _ = sample_examples(xi, 20_000, r, np.array([pi, 0.2, 0.2]), rng)
    w = factor * C.correction_weight(r, pi, m)
    J = w * hebbian(ex) + (1.0 - w) * pattern_operator(a[None].astype(np.int8))
    step = np.sign(J @ a)
    assert m == pytest.approx(0.9) and C.correction_weight(r, pi, m) == pytest.approx(1 / (1 + 0.64 * 0.6 * 0.9))
    if kept:
        assert np.array_equal(step, a)
    else:
        assert np.array_equal(step, b)


def test_correction_weight_edges_and_bad_input():
    assert C.correction_weight(0.8, 0.0, 0.9) == 1.0 and C.correction_weight(1.0, 1.0, 1.0) == 0.5
    for kw, name in [({"r": 1.5}, "r"), ({"pi": -0.1}, "pi"), ({"m": 2.0}, "m")]:
        args = {"r": 0.8, "pi": 0.5, "m": 0.9, **kw}
        with pytest.raises(ValueError, match=name):
            C.correction_weight(**args)
    with pytest.raises(TypeError, match="r"):
        C.correction_weight("0.8", 0.5, 0.9)
