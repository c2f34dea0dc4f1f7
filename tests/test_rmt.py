"""Tests for fedlam.rmt: closed forms against independent numerics and simulation.

Tolerances: quadrature results to its reported accuracy; simulations to 5 standard
errors of the replicate mean (CLT) or to Tracy-Widom quantile bands at probability
1e-3 (the edge eigenvalues fluctuate on the TW scale, Johnstone 2001).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate
from scipy.sparse import linalg as sparse_linalg

from fedlam import data, operators as ops, rmt

Z = 5.0


def _noise_spectrum(N, M, seed):
    rng = np.random.default_rng(seed)
    X = (2 * rng.integers(0, 2, (M, N), dtype=np.int8) - 1).astype(np.int8)
    return np.linalg.eigvalsh(N * ops.hebbian(X))


# ---------------------------------------------------------------- Marchenko-Pastur
def test_mp_edges_values_and_arrays():
    lo, hi = rmt.mp_edges(0.25, 2.0)
    assert isinstance(lo, float) and np.isclose(lo, 2 * 0.25) and np.isclose(hi, 2 * 2.25)
    lo, hi = rmt.mp_edges(np.array([0.25, 1.0, 4.0]))
    np.testing.assert_allclose(lo, [0.25, 0.0, 1.0])
    np.testing.assert_allclose(hi, [2.25, 4.0, 9.0])


@pytest.mark.parametrize("q", [0.1, 0.5, 1.0, 2.0, 5.0])
def test_mp_density_moments(q):
    s2 = 0.7
    a, b = rmt.mp_edges(q, s2)
    f = lambda x: rmt.mp_density(x, q, s2)  # noqa: E731
    mass, err = integrate.quad(f, a, b, limit=200)
    assert abs(mass - min(1.0, 1.0 / q)) < 1e-6 + 10 * err  # atom 1 - 1/q at 0 for q > 1
    m1 = integrate.quad(lambda x: x * f(x), a, b, limit=200)[0]
    m2 = integrate.quad(lambda x: x * x * f(x), a, b, limit=200)[0]
    # moments of the full law (atom at 0 adds nothing): sigma2 and sigma2^2 (1 + q)
    assert abs(m1 - s2) < 1e-6
    assert abs(m2 - s2**2 * (1 + q)) < 1e-6


def test_mp_density_outside_support_is_zero():
    x = np.array([-1.0, 0.0, 0.01, 3.0, 100.0])
    d = rmt.mp_density(x, 0.25)
    assert np.all(d[[0, 1, 2, 3, 4]] == 0.0)
    assert rmt.mp_density(1.0, 0.25) > 0


def test_mp_edges_match_noise_spectrum():
    """Extreme eigenvalues of pure-noise +-1 examples sit in TW bands around the MP edges."""
    N, M = 200, 800
    ev = _noise_spectrum(N, M, 0)
    lo_q, hi_q = rmt.tw1_quantile(np.array([5e-4, 1 - 5e-4]))
    mu, sig = rmt.johnstone_center_scale(N, M)
    assert lo_q < (ev[-1] - mu) / sig < hi_q
    # smallest eigenvalue (q < 1): reflected TW1 with the analogous centring and scaling
    m, n = M - 0.5, N - 0.5
    mu_min = (np.sqrt(m) - np.sqrt(n)) ** 2 / M
    sig_min = (np.sqrt(m) - np.sqrt(n)) * (1 / np.sqrt(n) - 1 / np.sqrt(m)) ** (1 / 3) / M
    assert lo_q < (mu_min - ev[0]) / sig_min < hi_q
    # and the limits of those centrings are the MP edges
    lo, hi = rmt.mp_edges(N / M)
    assert abs(mu - hi) < 0.01 * hi and abs(mu_min - lo) < 0.01 * lo


def test_mp_density_matches_noise_histogram():
    """Eigenvalue counts in interior bins vs N * integral of the density.

    Eigenvalue counts fluctuate much less than Poisson (rigidity); a Poisson bound of
    5 sqrt(expected) + 1 is conservative.
    """
    N, M = 200, 400
    q = N / M
    ev = _noise_spectrum(N, M, 1)
    a, b = rmt.mp_edges(q)
    edges = np.linspace(a, b, 9)[1:-1]
    counts = np.histogram(ev, bins=edges)[0]
    expected = np.array([integrate.quad(lambda x: rmt.mp_density(x, q), lo, hi)[0] for lo, hi in zip(edges[:-1], edges[1:])]) * N
    assert np.all(np.abs(counts - expected) < Z * np.sqrt(expected) + 1)


# ---------------------------------------------------------------- spikes and BBP
def test_spike_strength():
    assert np.isclose(rmt.spike_strength(0.5, 0.2, 100), 100 * 0.25 * 0.2 / 0.75)
    assert rmt.spike_strength(1.0, 0.3, 10) == np.inf
    assert rmt.spike_strength(1.0, 0.0, 10) == 0.0
    k = rmt.spike_strength(np.array([0.3, 0.6]), np.array([0.5, 0.5]), 50)
    np.testing.assert_allclose(k, 50 * rmt.paper_spike_strength(np.array([0.3, 0.6]), np.array([0.5, 0.5])))
    with pytest.raises(ValueError, match="r"):
        rmt.spike_strength(0.0, 0.5, 10)
    with pytest.raises(ValueError, match="pi"):
        rmt.spike_strength(0.5, 1.5, 10)
    with pytest.raises(ValueError, match="N"):
        rmt.spike_strength(0.5, 0.5, 1)
    with pytest.raises(TypeError, match="r"):
        rmt.spike_strength("0.5", 0.5, 10)


def test_outlier_location_threshold_and_monotone():
    q, s2 = 0.3, 0.8
    edge = rmt.mp_edges(q, s2)[1]
    assert np.isclose(rmt.outlier_location(np.sqrt(q), q, s2), edge)
    assert rmt.outlier_location(0.1, q, s2) == edge
    k = np.linspace(np.sqrt(q), 20, 200)
    lam = rmt.outlier_location(k, q, s2)
    assert np.all(np.diff(lam) > 0)
    assert rmt.outlier_location(np.inf, q) == np.inf
    assert np.isclose(rmt.outlier_location(1e6, q, s2) / (s2 * 1e6), 1.0, rtol=1e-5)  # ~ sigma2 kappa
    assert rmt.bbp_threshold(0.25) == 0.5


@settings(max_examples=60, deadline=None)
@given(q=st.floats(0.01, 10.0), excess=st.floats(1e-3, 100.0), s2=st.floats(0.05, 3.0))
def test_kappa_from_outlier_inverts(q, excess, s2):
    kappa = np.sqrt(q) * (1 + excess)
    lam = rmt.outlier_location(kappa, q, s2)
    assert np.isclose(rmt.kappa_from_outlier(lam, q, s2), kappa, rtol=1e-8)


def test_kappa_from_outlier_below_edge():
    q = 0.25
    edge = rmt.mp_edges(q)[1]
    assert np.isnan(rmt.kappa_from_outlier(edge, q))
    assert np.isnan(rmt.kappa_from_outlier(1.0, q))
    assert rmt.kappa_from_outlier(1.0, q, below="threshold") == 0.5
    out = rmt.kappa_from_outlier(np.array([1.0, 4.0, np.inf]), q)
    assert np.isnan(out[0]) and np.isclose(rmt.outlier_location(out[1], q), 4.0)
    assert np.isclose(out[1], (2.75 + np.sqrt(2.75**2 - 1.0)) / 2)
    assert out[2] == np.inf
    with pytest.raises(ValueError, match="below"):
        rmt.kappa_from_outlier(3.0, q, below="zero")


def test_eigvec_overlap_limits():
    q = 0.5
    assert rmt.eigvec_overlap(np.sqrt(q), q) == 0.0
    assert rmt.eigvec_overlap(0.1, q) == 0.0
    assert rmt.eigvec_overlap(np.inf, q) == 1.0
    assert abs(rmt.eigvec_overlap(1e8, q) - 1.0) < 1e-7
    assert rmt.eigvec_overlap(np.sqrt(q) * (1 + 1e-9), q) < 1e-8  # continuous at threshold
    g = rmt.eigvec_overlap(np.linspace(0.8, 50, 100), q)
    assert np.all(np.diff(g) > 0) and np.all((g > 0) & (g < 1))
    assert abs(rmt.eigvec_overlap(3.0, 1e-10) - 1.0) < 1e-9  # q -> 0: perfect alignment


def test_bbp_single_spike_simulation():
    """One archetype at kappa = 2 sqrt(q) (N = 400, q = 1/4): outlier location and overlap.

    Tolerance: 5 standard errors of the mean over 20 independent replicates.
    """
    N, M, reps = 400, 1600, 20
    q = N / M
    kappa = 2.0 * np.sqrt(q) * 2.0  # = 2
    r = np.sqrt(kappa / (N + kappa))  # solves N r^2 / (1 - r^2) = kappa
    assert np.isclose(rmt.spike_strength(r, 1.0, N), kappa)
    xi = data.random_archetypes(1, N, 1)
    u = xi[0] / np.sqrt(N)
    lam, gam = [], []
    for k in range(reps):
        ex, _ = data.sample_examples(xi, M, r, np.array([1.0]), 100 + k)
        w, V = sparse_linalg.eigsh(N * ops.hebbian(ex), k=1, which="LA", v0=np.ones(N))  # top pair (Lanczos)
        lam.append(w[-1])
        gam.append((V[:, -1] @ u) ** 2)
    lam, gam = np.array(lam), np.array(gam)
    s2 = 1 - r * r
    assert abs(lam.mean() - rmt.outlier_location(kappa, q, s2)) < Z * lam.std(ddof=1) / np.sqrt(reps)
    assert abs(gam.mean() - rmt.eigvec_overlap(kappa, q)) < Z * gam.std(ddof=1) / np.sqrt(reps)
    # the paper's kappa (N times smaller) predicts no outlier at all
    assert rmt.paper_spike_strength(r, 1.0) < rmt.bbp_threshold(q)


@pytest.mark.parametrize(
    "fn,args,exc,match",
    [
        (rmt.mp_edges, (0.0,), ValueError, "q"),
        (rmt.mp_edges, (0.5, -1.0), ValueError, "sigma2"),
        (rmt.mp_edges, (np.array([0.5, np.nan]),), ValueError, "q"),
        (rmt.mp_density, (1.0, -0.5), ValueError, "q"),
        (rmt.outlier_location, (-1.0, 0.5), ValueError, "kappa"),
        (rmt.outlier_location, (1.0, np.inf), ValueError, "q"),
        (rmt.eigvec_overlap, (1.0, 0.0), ValueError, "q"),
        (rmt.kappa_from_outlier, (-1.0, 0.5), ValueError, "lam"),
        (rmt.bbp_threshold, (True,), TypeError, "q"),
        (rmt.bbp_threshold, ([0.5],), TypeError, "q"),
    ],
)
def test_bad_inputs(fn, args, exc, match):
    with pytest.raises(exc, match=match):
        fn(*args)


# ---------------------------------------------------------------- Bernstein
def test_bernstein_variance_exact_small_N():
    """v = ||sum_a E[X_a^2]|| by exact enumeration of all flip patterns (N = 5, K = 2)."""
    import itertools

    N, M, r = 5, 7, 0.6
    xi = data.random_archetypes(2, N, 4)
    pi = np.array([0.4, 0.6])
    keep = (1 + r) / 2
    E = N * ops.expected_operator(xi, r, pi)
    EX2 = np.zeros((N, N))
    for mu in range(2):
        for flips in itertools.product([0, 1], repeat=N):
            f = np.array(flips)
            p = pi[mu] * np.prod(np.where(f == 1, 1 - keep, keep))
            eta = xi[mu] * (1 - 2 * f)
            D = np.outer(eta, eta) - E
            EX2 += p * D @ D
    v_exact = np.linalg.norm(M * EX2 / M**2, 2)
    v, L = rmt.bernstein_parameters(N, M, r, pi, archetypes=xi)
    assert np.isclose(v, v_exact, rtol=1e-12)
    assert L == N / M


def test_bernstein_bound_inverts_tail_and_holds():
    N, M, r = 100, 400, 0.6
    xi = data.random_archetypes(2, N, 0)
    pi = np.array([0.5, 0.5])
    t = rmt.bernstein_bound(0.05, N, M, r, pi)
    assert np.isclose(rmt.bernstein_tail(t, N, M, r, pi), 0.05)
    ts = np.linspace(0, 3 * t, 50)
    tails = rmt.bernstein_tail(ts, N, M, r, pi)
    assert tails[0] == 1.0 and np.all(np.diff(tails) <= 0)
    # the bound holds on simulated operators (it is conservative: all 10 deviations below t)
    E = N * ops.expected_operator(xi, r, pi)
    devs = [np.linalg.norm(N * ops.hebbian(data.sample_examples(xi, M, r, pi, s)[0]) - E, 2) for s in range(10)]
    assert max(devs) < t
    # r = 1 with a single archetype: no randomness at all, v = 0
    v, _ = rmt.bernstein_parameters(N, M, 1.0, np.array([1.0]))
    assert v == 0.0


def test_bernstein_bad():
    with pytest.raises(ValueError, match="delta"):
        rmt.bernstein_bound(1.0, 10, 10, 0.5, np.array([1.0]))
    with pytest.raises(ValueError, match="pi"):
        rmt.bernstein_tail(1.0, 10, 10, 0.5, np.array([0.5]))
    with pytest.raises(ValueError, match="archetypes"):
        rmt.bernstein_parameters(10, 10, 0.5, np.array([1.0]), archetypes=np.ones((2, 10), dtype=np.int8))
    with pytest.raises(ValueError, match="t"):
        rmt.bernstein_tail(-1.0, 10, 10, 0.5, np.array([1.0]))


# ---------------------------------------------------------------- Tracy-Widom
# critical values used in the PCA literature (Patterson, Price & Reich 2006), older numerics
PATTERSON_2006 = {0.95: 0.9793, 0.99: 2.0234, 0.995: 2.4224, 0.999: 3.2724}


def test_tw1_table_consistent_with_cdf():
    for p, s in rmt.TW1_TABLE.items():
        # 4-decimal rounding moves F1 by at most 5e-5 * max density (< 0.4)
        assert abs(rmt.tw1_cdf(s) - p) < 2e-5
    for p, s in PATTERSON_2006.items():
        assert abs(rmt.tw1_quantile(p) - s) < 3e-4


def test_tw1_mean_variance_and_quantiles():
    F = rmt.tw1_cdf
    # E[X] = int_0^inf (1 - F) - int_-inf^0 F ; E[X^2] = 2 int_0^inf s (1 - F) - 2 int_-inf^0 s F
    # (tails beyond |s| = 12 are < 1e-30); Gauss-Legendre, 80 nodes per half line
    x, w = np.polynomial.legendre.leggauss(80)
    pos, neg = 6.0 * (x + 1), -6.0 * (x + 1)
    Fp, Fn = F(pos), F(neg)
    mean = 6.0 * (w @ (1 - Fp) - w @ Fn)
    m2 = 12.0 * (w @ (pos * (1 - Fp)) - w @ (neg * Fn))
    # TW1 mean -1.2065335745820 and variance 1.607781034581 (Bornemann 2010)
    assert abs(mean - (-1.2065335745820)) < 1e-8
    assert abs(m2 - mean**2 - 1.607781034581) < 1e-8
    p = np.array([0.2, 0.975])
    s = rmt.tw1_quantile(p)
    np.testing.assert_allclose(F(s), p, atol=1e-9)
    assert abs(rmt.tw1_quantile(0.95) - 0.9793) < 5e-5
    with pytest.raises(ValueError, match="p"):
        rmt.tw1_quantile(1.0)


def test_johnstone_center_scale():
    mu, sig = rmt.johnstone_center_scale(400, 1600)
    assert abs(mu - rmt.mp_edges(0.25)[1]) < 0.01
    m, n = 1599.5, 399.5
    assert np.isclose(sig, (np.sqrt(m) + np.sqrt(n)) * (1 / np.sqrt(m) + 1 / np.sqrt(n)) ** (1 / 3) / 1600)
    mu0, _ = rmt.johnstone_center_scale(400, 1600, variant="johnstone2001")
    assert np.isclose(mu0, (np.sqrt(1599) + np.sqrt(400)) ** 2 / 1600)
    with pytest.raises(ValueError, match="variant"):
        rmt.johnstone_center_scale(4, 4, variant="x")
    with pytest.raises(ValueError, match="M"):
        rmt.johnstone_center_scale(4, 1)


# ---------------------------------------------------------------- shapes that do not broadcast
@pytest.mark.parametrize(
    "fn,args,names",
    [
        (rmt.outlier_location, (np.array([1.0, 2.0]), np.array([0.5, 0.6, 0.7])), "kappa, q, sigma2"),
        (rmt.eigvec_overlap, (np.array([1.0, 2.0]), np.array([0.5, 0.6, 0.7])), "kappa, q"),
        (rmt.mp_edges, (np.array([0.5, 0.6]), np.array([1.0, 2.0, 3.0])), "q, sigma2"),
        (rmt.spike_strength, (np.array([0.5, 0.6]), np.array([0.1, 0.2, 0.7]), 10), "r, pi"),
        (rmt.kappa_from_outlier, (np.array([5.0, 6.0]), np.array([0.5, 0.6, 0.7])), "lam, q, sigma2"),
        (rmt.outlier_variance, (np.array([2.0, 3.0]), np.array([0.5, 0.6, 0.7]), 100), "kappa, q, sigma2"),
    ],
)
def test_shape_clash_names_the_arguments(fn, args, names):
    with pytest.raises(ValueError, match=f"{names} must broadcast to a common shape") as err:
        fn(*args)
    assert "(2,)" in str(err.value) and "(3,)" in str(err.value)


# ---------------------------------------------------------------- outlier fluctuations
def _orthogonal_archetypes(K: int, N: int, rng: np.random.Generator) -> np.ndarray:
    """K exactly orthogonal +-1 archetypes: rows of a Hadamard matrix times random column signs."""
    from scipy.linalg import hadamard

    rows = rng.choice(np.arange(1, N), size=K, replace=False)
    signs = np.where(rng.random(N) < 0.5, -1, 1)
    return (hadamard(N)[rows] * signs).astype(np.int8)


def test_outlier_variance_closed_forms():
    q, M = 0.5, 400
    kap = np.array([1.0, 2.0, 5.0])
    # Gaussian spike: Paul's 2 (1 + kappa)^2 (1 - q / kappa^2) / M
    np.testing.assert_allclose(rmt.outlier_variance(kap, q, M), 2 * (1 + kap) ** 2 * (1 - q / kap**2) / M)
    # the Bernoulli label factor equals the Gaussian value exactly at pi = 1/3
    np.testing.assert_allclose(rmt.outlier_variance(kap, q, M, exposure=1 / 3), rmt.outlier_variance(kap, q, M))
    # larger below 1/3, smaller above; a single class fluctuates by its channel noise only
    assert np.all(rmt.outlier_variance(kap, q, M, exposure=0.2) > rmt.outlier_variance(kap, q, M))
    assert np.all(rmt.outlier_variance(kap, q, M, exposure=0.5) < rmt.outlier_variance(kap, q, M))
    one = rmt.outlier_variance(5.0, q, M, exposure=1.0)
    g = 1 - q / 25
    assert one == pytest.approx((2 * 36 * g * (1 - g) + g * g * (4 * 5 + 2)) / M)
    # scaling with sigma2^2 / M, NaN below the threshold
    assert rmt.outlier_variance(2.0, q, 100, sigma2=0.5) == pytest.approx(rmt.outlier_variance(2.0, q, 400) * 4 * 0.25)
    assert np.isnan(rmt.outlier_variance(0.5, q, M))
    # covariance: diagonal = variances; the label parts of the sum cancel when kappa ~ pi
    pi = np.array([0.5, 0.3, 0.2])
    kk = 50.0 * pi
    C = rmt.outlier_covariance(kk, pi, 1e-9, M)
    np.testing.assert_allclose(np.diag(C), rmt.outlier_variance(kk, 1e-9, M, exposure=pi))
    gauss_part = np.sum(2 * (1 + kk) ** 2 * 0 + (4 * kk + 2)) / M  # q -> 0: g = 1, only channel terms remain
    assert C.sum() == pytest.approx(gauss_part, rel=1e-6)
    with pytest.raises(ValueError, match="exposure must sum to at most 1"):
        rmt.outlier_covariance(kk, np.array([0.5, 0.5, 0.5]), 0.5, M)
    with pytest.raises(ValueError, match="exposure must be a numpy array of the same shape"):
        rmt.outlier_covariance(kk, pi[:2], 0.5, M)


@pytest.mark.slow
def test_outlier_fluctuations_follow_the_bernoulli_label_law():
    """Variances of the 2 outliers over 400 independent batches (orthogonal archetypes).

    Two well separated spikes (exposures 0.8 and 0.2), so that the leading order applies.
    Sample variance of n near-Gaussian draws: relative standard error sqrt(2/(n-1)) = 0.071;
    each log-ratio simulated/predicted must lie within 4 of them. The Gaussian-spike law
    (Paul 2007) is off by factors 0.27 and 1.6 and must fail.
    """
    rng = np.random.default_rng(2027)
    N, M, reps, r = 128, 256, 400, 0.35
    q, s2 = N / M, 1 - r * r
    pi = np.array([0.8, 0.2])
    kap = rmt.spike_strength(r, pi, N)
    top = np.empty((reps, 2))
    for k in range(reps):
        xi = _orthogonal_archetypes(2, N, rng)
        ex, _ = data.sample_examples(xi, M, r, pi, rng)
        top[k] = np.linalg.eigvalsh(N * ops.hebbian(ex))[::-1][:2]
    v = top.var(axis=0, ddof=1)
    tol = 4 * np.sqrt(2 / (reps - 1))
    bern = rmt.outlier_variance(kap, q, M, s2, exposure=pi)
    gauss = rmt.outlier_variance(kap, q, M, s2)
    assert np.all(np.abs(np.log(v / bern)) < tol), (v, bern)
    assert np.all(np.abs(np.log(v / gauss)) > tol), (v, gauss)
    # means: the outlier law with orthogonal archetypes, to 5 standard errors
    se = np.sqrt(v / reps)
    assert np.all(np.abs(top.mean(axis=0) - rmt.outlier_location(kap, q, s2)) < Z * se + 2.0 / N)
    # the two outliers are negatively correlated (multinomial class counts): the sample
    # correlation of 400 draws has standard error (1 - rho^2)/sqrt(n) <= 0.05
    C = rmt.outlier_covariance(kap, pi, q, M, s2)
    rho_pred = C[0, 1] / np.sqrt(C[0, 0] * C[1, 1])
    assert rho_pred < -0.5
    assert abs(np.corrcoef(top.T)[0, 1] - rho_pred) < 4 * (1 - rho_pred**2) / np.sqrt(reps)


# ---------------------------------------------------------------- heterogeneous (free) bulk
def test_free_bulk_closed_forms_reduce_to_mp():
    for q in (0.2, 1.0, 2.5):
        assert rmt.free_bulk_edge(np.array([0.7]), np.array([q])) == pytest.approx(rmt.mp_edges(q, 0.7)[1], rel=1e-12)
        for kap in (0.5 * np.sqrt(q), 2 * np.sqrt(q), 10.0):
            t = np.array([0.7 * kap])
            assert rmt.free_bbp_criterion(t, np.array([0.7]), np.array([q])) == pytest.approx(kap / np.sqrt(q))
            assert rmt.free_outlier_location(t, np.array([0.7]), np.array([q])) == pytest.approx(
                rmt.outlier_location(kap, q, 0.7), rel=1e-10)
    # two independent half-batches averaged are one batch of all the examples (free Poisson
    # laws add): components (a/2, 2q) + (a/2, 2q) have the edge of (a, q)
    for q in (0.25, 0.5, 3.0):
        assert rmt.free_bulk_edge(np.array([0.35, 0.35]), np.array([2 * q, 2 * q])) == pytest.approx(
            rmt.mp_edges(q, 0.7)[1], rel=1e-10)
        t = np.array([1.4, 1.4])  # the spike of each half; the whole batch has excess 2.8 = 0.7 kappa
        assert rmt.free_outlier_location(t, np.array([0.35, 0.35]), np.array([2 * q, 2 * q])) == pytest.approx(
            rmt.outlier_location(4.0, q, 0.7), rel=1e-10)


def test_free_bulk_edge_matches_khat_implementation():
    from fedlam import spectral

    scales = np.array([0.19 / 5] * 4 + [1.0 / 5])
    ratios = np.array([400 / 300] * 5)
    assert rmt.free_bulk_edge(scales, ratios) == pytest.approx(spectral.free_mp_edge(scales, ratios), rel=1e-8)


def test_free_outlier_on_mixed_bulk_matches_simulation():
    """4 clients with one archetype at r = 0.1 and M_c = 100, one pure-noise client with M_c = 600.

    N = 300, server mean of the 5 uploads. The outlier of N J_s must sit at
    free_outlier_location (5 standard errors over 10 replicates), and a single Marchenko-Pastur
    law with the aggregate's mean bulk variance and total sample size, which puts it at 3.81
    instead of 4.19, must be rejected.
    """
    N, L, reps, r = 300, 5, 10, 0.1
    Ms = np.array([100, 100, 100, 100, 600])
    s2 = 1 - r * r
    rng = np.random.default_rng(31)
    xi = data.random_archetypes(1, N, rng)
    scales = np.array([s2 / L] * 4 + [1.0 / L])
    ratios = N / Ms
    t_spike = np.array([N * r * r / L] * 4 + [0.0])
    pred = rmt.free_outlier_location(t_spike, scales, ratios)
    edge = rmt.free_bulk_edge(scales, ratios)
    assert rmt.free_bbp_criterion(t_spike, scales, ratios) > 1 and pred > edge
    tops, bulk = [], []
    for _ in range(reps):
        ups = [ops.hebbian(data.sample_examples(xi, int(m), r, np.ones(1), rng)[0]) for m in Ms[:4]]
        ups.append(ops.hebbian(np.where(rng.random((int(Ms[4]), N)) < 0.5, 1, -1).astype(np.int8)))
        w = np.linalg.eigvalsh(N * ops.aggregate(ups))
        tops.append(w[-1])
        bulk.append(w[-2])
    tops = np.array(tops)
    se = tops.std(ddof=1) / np.sqrt(reps)
    assert abs(tops.mean() - pred) < Z * se, (tops.mean(), pred, se)
    naive = rmt.outlier_location(float(t_spike.sum() / scales.sum()), N / Ms.sum(), float(scales.sum()))
    assert abs(tops.mean() - naive) > Z * se
    # the largest bulk eigenvalue sits at the free edge (a few percent at N = 300), far above
    # the single-MP edge
    assert abs(np.mean(bulk) / edge - 1) < 0.05
    assert np.mean(bulk) > 1.15 * rmt.mp_edges(N / Ms.sum(), float(scales.sum()))[1]
    # criterion below 1 for a weaker spike: no outlier, location = edge
    weak = t_spike / 20
    assert rmt.free_bbp_criterion(weak, scales, ratios) < 1
    assert rmt.free_outlier_location(weak, scales, ratios) == pytest.approx(edge)


def test_free_bad_inputs():
    with pytest.raises(ValueError, match="scales and ratios must have the same shape"):
        rmt.free_bulk_edge(np.array([1.0, 2.0]), np.array([0.5]))
    with pytest.raises(ValueError, match="at least one positive"):
        rmt.free_bulk_edge(np.zeros(2), np.ones(2))
    with pytest.raises(ValueError, match="ratios must be > 0"):
        rmt.free_bulk_edge(np.ones(2), np.array([0.5, 0.0]))
    with pytest.raises(ValueError, match=r"strengths must be a numpy array of shape \(C,\) or \(K, C\) with C = 2"):
        rmt.free_outlier_location(np.ones(3), np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="scales must be a non-empty 1-D"):
        rmt.free_bbp_criterion(np.ones(1), [1.0], np.ones(1))


# ---------------------------------------------------------------- blended upload
def test_blend_spectrum_matches_simulation():
    """Orthogonal +-1 archetypes (Hadamard), one held by the broadcast and in the batch, one new.

    Held eigenvalue: mean over 10 replicates within 5 standard errors of the formula; novel
    outlier likewise; the first bulk eigenvalue within 5 Tracy-Widom scales of the edge;
    the diagonal exactly (1 - w) K_held + w.
    """
    rng = np.random.default_rng(8)
    N, M, r, w, reps = 256, 512, 0.8, 0.4, 10
    s2 = 1 - r * r
    pi = np.array([0.5, 0.5])
    kap = rmt.spike_strength(r, pi, N)
    held, new, bulk = [], [], []
    for _ in range(reps):
        xi = _orthogonal_archetypes(2, N, rng)
        A = ops.pattern_operator(xi[:1])
        B = ops.hebbian(data.sample_examples(xi, M, r, pi, rng)[0])
        Jc = N * ((1 - w) * A + w * B)
        assert np.allclose(np.diag(Jc), (1 - w) * 1 + w)
        vals = np.linalg.eigvalsh(Jc)[::-1]
        held.append(vals[0]); new.append(vals[1]); bulk.append(vals[2])
    pred = rmt.blend_spectrum(w, N, M, s2, kappa_held=kap[:1], kappa_new=kap[1:])
    assert pred.diagonal == pytest.approx(1 - w + w)
    for sim, p_, var in ((held, pred.held[0], w * w * rmt.outlier_variance(kap[0] + 1e9 * 0, 1e-9, M, s2, exposure=0.5)),
                         (new, pred.new[0], w * w * rmt.outlier_variance(kap[1], (N - 1) / M, M, s2, exposure=0.5))):
        sim = np.array(sim)
        se = max(sim.std(ddof=1), np.sqrt(var)) / np.sqrt(reps)
        assert abs(sim.mean() - p_) < Z * se + 1e-3 * p_, (sim.mean(), p_)
    mu, sd = rmt.johnstone_center_scale(N - 1, M)
    assert abs(np.mean(bulk) - pred.edge) < 5 * w * s2 * sd
    # w = 1 is B alone: held spikes are ordinary BBP outliers; w = 0 is the broadcast alone
    b1 = rmt.blend_spectrum(1.0, N, M, s2, kappa_held=kap[:1])
    assert b1.held[0] == pytest.approx(rmt.outlier_location(kap[0], N / M, s2))
    b0 = rmt.blend_spectrum(0.0, N, M, s2, kappa_held=kap[:1], kappa_new=kap[1:])
    assert b0.held[0] == N and b0.new[0] == 0.0 and b0.edge == 0.0
    with pytest.raises(ValueError, match="w must lie in"):
        rmt.blend_spectrum(1.5, N, M, s2)
    with pytest.raises(ValueError, match="kappa_new must be a 1-D numpy array"):
        rmt.blend_spectrum(0.5, N, M, s2, kappa_new=3.0)


# ---------------------------------------------------------------- Weyl-sufficient spike
def test_weyl_sufficient_kappa_is_self_consistent():
    for N, M in ((200, 800), (400, 1600), (400, 6400)):
        k = rmt.weyl_sufficient_kappa(N, M)
        ell = np.log(2 * N / 0.05)
        a = (N / M) * ell / 3

        def t(kap):
            lam1 = 1 + kap
            v = max(N - 1, lam1 * (N - lam1)) / M
            return a + np.sqrt(a * a + 2 * v * ell)

        assert k == pytest.approx(2 * t(k), rel=1e-9)  # sigma2 kappa = 2 t(kappa) at the root
        assert 0.99 * k < 2 * t(0.99 * k)  # just below: not certified
        # t grows with the spike, so the answer exceeds the pure-noise value 2 t(0)
        assert k > 2 * t(0.0) == pytest.approx(2 * rmt.bernstein_bound(0.05, N, M, 1e-6, np.array([1.0])), rel=1e-6)
    # t(kappa) agrees with bernstein_bound for a one-archetype batch with that kappa
    N, M, r = 200, 800, 0.3
    kap = float(rmt.spike_strength(r, 1.0, N))
    s2 = 1 - r * r
    ell = np.log(2 * N / 0.05)
    a = (N / M) * ell / 3
    lam1 = s2 * (1 + kap)
    v = max(s2 * (N - s2), lam1 * (N - lam1)) / M
    assert a + np.sqrt(a * a + 2 * v * ell) == pytest.approx(rmt.bernstein_bound(0.05, N, M, r, np.array([1.0])))


# ---------------------------------------------------------------- q > 1
def test_bbp_laws_hold_for_q_above_one():
    """M = N/2 examples (q = 2): N - M exact zeros, non-zero bulk in [(sqrt q - 1)^2, (1 + sqrt q)^2]
    sigma2, and the outlier and overlap laws unchanged (5 standard errors over 12 replicates)."""
    N, M, reps = 300, 150, 12
    q = N / M
    kap = 3.0
    r = np.sqrt(kap / (N + kap))
    s2 = 1 - r * r
    xi = data.random_archetypes(1, N, 3)
    u = xi[0] / np.sqrt(N)
    lam, gam, second, smallest = [], [], [], []
    for k in range(reps):
        ex, _ = data.sample_examples(xi, M, r, np.array([1.0]), 50 + k)
        w, V = np.linalg.eigh(N * ops.hebbian(ex))
        assert int(np.sum(np.abs(w) < 1e-8)) == N - M
        lam.append(w[-1]); gam.append((V[:, -1] @ u) ** 2); second.append(w[-2])
        smallest.append(w[np.abs(w) > 1e-8].min())
    lam, gam = np.array(lam), np.array(gam)
    assert abs(lam.mean() - rmt.outlier_location(kap, q, s2)) < Z * lam.std(ddof=1) / np.sqrt(reps)
    assert abs(gam.mean() - rmt.eigvec_overlap(kap, q)) < Z * gam.std(ddof=1) / np.sqrt(reps)
    lo, hi = rmt.mp_edges(q, s2)
    mu, sd = rmt.johnstone_center_scale(N, M)
    assert abs(np.mean(second) - hi) < 5 * s2 * sd
    assert abs(np.mean(smallest) - lo) < 0.1 * lo
