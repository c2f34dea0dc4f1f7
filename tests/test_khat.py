"""fedlam.khat: the free edge with a semicircle, scalar components, noise-aware estimators,
predicted overlaps, and the cross-device K-hat rule (issue 13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedlam import data, khat, operators
from fedlam import federation as F
from fedlam.protocol import Upload


def _sym_noise(N: int, sigma: float, rng: np.random.Generator) -> np.ndarray:
    G = np.triu(rng.normal(0.0, sigma, (N, N)))
    return G + np.triu(G, 1).T


def test_free_edge_closed_forms():
    # one MP law: (1 + sqrt q)^2 a; a semicircle: 2 sqrt(v); nothing: 0
    for a, q in [(1.0, 0.25), (0.3, 2.0), (2e-3, 40.0)]:
        assert math.isclose(khat.free_edge([khat.Component(a, q)]), a * (1 + math.sqrt(q)) ** 2, rel_tol=1e-10)
    assert math.isclose(khat.free_edge([], noise_var=0.09), 0.6, rel_tol=1e-12)
    assert khat.free_edge([]) == 0.0
    # L identical rank-deficient components (q_c = N/M_c >> 1) = the pooled MP law of L M_c examples
    L, Mc, N = 100, 10, 400
    comps = [khat.Component(1.0 / (L * N), N / Mc)] * L
    pooled = (1.0 / N) * (1 + math.sqrt(N / (L * Mc))) ** 2
    assert math.isclose(khat.free_edge(comps), pooled, rel_tol=1e-9)
    # the semicircle's TW scale: sqrt(v) N^(-2/3)
    assert math.isclose(khat.free_tw_scale([], 500, noise_var=0.04), 0.2 * 500 ** (-2 / 3), rel_tol=1e-9)


def test_free_edge_against_simulation_with_noise():
    """MP ⊞ semicircle: the largest eigenvalue of W + G sits at the predicted edge (within a few
    Tracy-Widom scales, over several draws)."""
    N, M, sigma = 400, 800, 0.002
    rng = np.random.default_rng(0)
    edge = khat.free_edge([khat.Component(1.0 / N, N / M)], noise_var=N * sigma**2)
    s = khat.free_tw_scale([khat.Component(1.0 / N, N / M)], N, noise_var=N * sigma**2)
    tops = []
    for _ in range(8):
        X = rng.choice(np.array([-1.0, 1.0]), size=(M, N))
        tops.append(np.linalg.eigvalsh(X.T @ X / (N * M) + _sym_noise(N, sigma, rng))[-1])
    z = (np.array(tops) - edge) / s
    assert np.all(np.abs(z) < 5), z  # TW1 has mean -1.2 and sd 1.3


def test_pm1_kurtosis_and_the_edge_shift_in_k_hat():
    """+-1 data at r = 0.9 have excess kurtosis 4/s2 - 6 = 15.05 (checked on samples); the
    scalar K-hat edge includes its first-order shift (a few Tracy-Widom scales here)."""
    r = 0.9
    s2 = 1 - r**2
    z = np.where(np.random.default_rng(1).random(2_000_000) < (1 + r) / 2, 1.0, -1.0) - r
    assert abs((z**4).mean() / s2**2 - 3 - khat.pm1_kurtosis(s2)) < 0.2
    assert khat.pm1_kurtosis(1.0) == -2.0
    N, M = 300, 600
    comp = khat.Component(s2 / N, N / M, khat.pm1_kurtosis(s2))
    edge, shift = khat.kurtosis_edge_shift([comp], N=N)
    assert math.isclose(shift, edge * math.sqrt(N / M) * khat.pm1_kurtosis(s2) / N, rel_tol=1e-8)
    res = khat.k_hat_components(np.r_[1.0, edge, np.full(N - 2, 0.5 * edge)], [comp])
    assert math.isclose(res.details["kurtosis_shift"], shift)
    assert res.details["edge"] == pytest.approx(edge + shift)
    with pytest.raises(ValueError, match="s2 must lie in"):
        khat.pm1_kurtosis(0.0)
    with pytest.raises(ValueError, match="kurtosis must lie in"):
        khat.Component(1.0, 1.0, -3.0)


def test_k_hat_mp_with_noise_and_overlaps():
    """The DESIGN setting N = 500, M = 400, r = 0.7, K = 3 with Gaussian noise at 2x and 1/2x the
    critical level: noise-aware K-hat finds 3 then 0, the plain rule reports ~N/4; predicted
    overlaps follow the measured subspace overlaps."""
    N, M, r = 500, 400, 0.7
    xi = data.random_archetypes(3, N, 0)
    eta, _ = data.sample_examples(xi, M, r, np.ones(3) / 3, 1)
    J = operators.hebbian(eta)
    Q = np.linalg.qr(xi.T.astype(float))[0]
    sig_star = math.sqrt(2 * math.log(1.25 / 1e-5)) / (M * 1.66)
    for factor, expect in ((0.5, 3), (2.0, 0)):
        sig = factor * sig_star
        H = J + _sym_noise(N, sig, np.random.default_rng(5))
        w, V = np.linalg.eigh(H)
        w, V = w[::-1], V[:, ::-1]
        res = khat.k_hat_mp(w, noise_var=N * sig**2)
        assert res.k_hat == expect
        assert khat.k_hat_mp(w).k_hat > 50
        if expect:
            pred = khat.outlier_overlaps(res, w[:3], N)
            obs = np.array([np.sum((Q.T @ V[:, i]) ** 2) for i in range(3)])
            assert np.all(np.abs(pred - obs) < 0.12), (pred, obs)


def test_components_from_uploads():
    N = 100
    A = np.zeros((N, N))
    ups = [Upload(A + np.eye(N) / N, 50, 1.0, 0.36), Upload(A + np.eye(N) / N, 10, 0.5, None, dp_sigma=0.01),
           Upload(-np.eye(N) / N, 20, 1.0, 0.5), Upload(A, 0, 0.0), Upload(A, 5, float("nan"))]
    comps, v = khat.components_from_uploads(ups)
    assert len(comps) == 3
    assert math.isclose(comps[0].scale, 0.2 * 0.36 / N) and math.isclose(comps[0].ratio, N / 50)
    assert math.isclose(comps[0].kurtosis, 4 / 0.36 - 6) and comps[1].kurtosis == -2.0
    assert math.isclose(comps[1].scale, 0.2 * 0.5 * 1.0 / N)  # unknown variance -> 1
    assert comps[2].scale < 0  # a negated upload
    assert math.isclose(v, N * 0.2**2 * 0.01**2)
    comps_s, _ = khat.components_from_uploads([u.without_operator() for u in ups], N=N)
    assert comps_s[2].scale > 0  # secure aggregation cannot see the sign
    with pytest.raises(ValueError, match="N must be given"):
        khat.components_from_uploads([u.without_operator() for u in ups])
    with pytest.raises(ValueError, match="weights must be an array of shape"):
        khat.components_from_uploads(ups, weights=np.ones(2))
    with pytest.raises(TypeError, match="uploads must be a non-empty list"):
        khat.components_from_uploads([])
    with pytest.raises(ValueError, match="noise_var must be finite"):
        khat.free_edge([], noise_var=math.inf)
    with pytest.raises(TypeError, match=r"components\[0\] must be a fedlam.khat.Component"):
        khat.free_edge([(1.0, 2.0)])


def test_client_noise_var():
    xi = data.random_archetypes(4, 300, 0)
    rng = np.random.default_rng(2)
    ests = [khat.client_noise_var(data.sample_examples(xi, 250, 0.9, np.ones(4) / 4, rng)[0]) for _ in range(6)]
    assert abs(np.mean(ests) - 0.19) < 0.01
    assert khat.client_noise_var(data.sample_examples(xi, 10, 0.9, np.ones(4) / 4, rng)[0]) is None
    noise = rng.choice(np.array([-1, 1], dtype=np.int8), size=(300, 300))
    assert abs(khat.client_noise_var(noise) - 1.0) < 0.05


def _cross_device(L: int, Mc: int, noise: bool, T: int = 4, N: int = 400, K: int = 4, seed: int = 0):
    xi = data.random_archetypes(K, N, 1)
    mix = data.static_mixture(T, L, K)
    specs = [F.ClientSpec(r=0.8, M=Mc, mixture=mix[:, c]) for c in range(L)]
    if noise:
        specs.append(F.ClientSpec(M=Mc, kind="noise"))
    return F.run_federation(xi, specs, T, seed, controller="novelty")


@pytest.mark.slow
@pytest.mark.parametrize("L,Mc", [(10, 100), (100, 10), (500, 4)])
@pytest.mark.parametrize("noise", [False, True])
def test_many_small_clients(L, Mc, noise):
    """The same 1000 examples split over more and more clients: K-hat = 4 every round, all
    archetypes, no spurious pattern -- with or without a noise client."""
    h = _cross_device(L, Mc, noise, T=4 if L <= 100 else 2)
    np.testing.assert_array_equal(h.k_hat, 4)
    assert h.magnetization.min() >= 0.95 and h.spurious.max() == 0


def test_heterogeneous_sizes_empty_batches_and_noise():
    """Batch sizes from 1 to 500 in one federation, a client with M = 0 in some rounds, a noise
    client: handled. Weighted by batch size every example counts the same and K-hat = K every
    round. With the paper's equal mean a 1-example client weighs as much as a 500-example one:
    its lone example is a rank-one upload of strength 1/L = 0.11 in the mean, which the edge
    must (and does) include, so a weaker archetype can wait one round -- never a spurious one."""
    N, K, T = 300, 3, 3
    xi = data.random_archetypes(K, N, 4)
    sizes = [1, 2, 5, 10, 50, 200, 500]
    L = len(sizes) + 2
    mix = data.static_mixture(T, L, K)
    specs = [F.ClientSpec(r=0.8, M=m, mixture=mix[:, c]) for c, m in enumerate(sizes)]
    specs.append(F.ClientSpec(r=0.8, M=np.array([0, 40, 0]), mixture=mix[:, len(sizes)]))
    specs.append(F.ClientSpec(M=300, kind="noise"))
    for seed in range(3):
        h = F.run_federation(xi, specs, T, seed, controller="novelty", aggregation="batch")
        np.testing.assert_array_equal(h.k_hat, K)
        assert h.magnetization.min() >= 0.95 and h.spurious.max() == 0
        assert h.weights[0, len(sizes)] == 0.0 and h.weights[2, len(sizes)] == 0.0  # empty batches
        eq = F.run_federation(xi, specs, T, seed, controller="novelty")
        assert eq.k_hat.max() <= K and eq.spurious.max() == 0
        assert eq.magnetization[1:].min() >= 0.95
