"""Issue 7: the factorization on real and exact operators -- correlated archetypes, many
archetypes, long runs. Every archetype of a linearly independent family must come back, with
no extra pattern, from the exact operator; noisy operators and federations at the sizes of the
issue likewise (m >= 0.95, no spurious pattern)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlam import data, lam, metrics, operators
from fedlam import federation as F
from fedlam.correlated import correlated_family


def _exact_ok(xi: np.ndarray, rng: int = 1) -> tuple[bool, lam.FactorizeResult]:
    res = lam.factorize(operators.pattern_operator(xi), rng=rng)
    m = metrics.magnetization(res.patterns, xi)
    return bool(res.n_accepted == xi.shape[0] and np.all(m == 1.0)), res


@settings(max_examples=12, deadline=None)
@given(K=st.integers(3, 10), overlap=st.sampled_from([0.2, 0.4, 0.6, 0.75]), seed=st.integers(0, 10**6))
def test_exact_operator_of_correlated_families(K, overlap, seed):
    xi = correlated_family(K, 300, overlap, np.random.default_rng(seed))
    ok, res = _exact_ok(xi)
    assert ok, (res.k_hat, res.n_accepted, metrics.magnetization(res.patterns, xi))
    assert metrics.spurious_count(res.patterns, xi) == 0


@pytest.mark.slow
@pytest.mark.parametrize("K", [3, 5, 8, 10])
@pytest.mark.parametrize("method", ["medoid", "mean"])
def test_exact_operator_of_silhouette_subsets(K, method):
    """Random class subsets of the Caltech silhouettes (overlaps up to ~0.8): all K, no extra."""
    names = data.load_silhouettes()[2]
    for s in range(3):
        cls = np.random.default_rng(7000 + 100 * K + s).choice(len(names), K, replace=False)
        xi = data.structured_archetypes([int(c) for c in cls], method=method)
        ok, res = _exact_ok(xi)
        assert ok, (K, s, method, res.n_accepted, metrics.magnetization(res.patterns, xi))


def test_span_with_an_extra_pm1_vector():
    """Three patterns whose span holds a fourth +-1 vector: x = xi1 + xi2 - xi3 is +-1 wherever
    the types (1, 1, -1) and (-1, -1, 1) never occur. The in-span score cannot tell it from an
    archetype (both are exactly in the span); the exact operator's weights can."""
    rng = np.random.default_rng(5)
    N = 240
    allowed = np.array([s for s in np.ndindex(2, 2, 2)]) * 2 - 1
    allowed = allowed[~((allowed == [1, 1, -1]).all(1) | (allowed == [-1, -1, 1]).all(1))]
    xi = allowed[rng.integers(0, len(allowed), N)].T.astype(np.int8)
    extra = (xi[0].astype(int) + xi[1] - xi[2]).astype(np.int8)
    assert set(np.unique(extra)) <= {-1, 1}  # a fourth +-1 vector in the span
    ok, res = _exact_ok(xi)
    assert ok and res.n_accepted == 3
    w = lam.hebbian_weights(np.vstack([xi, extra]).astype(float) @ res.vectors / np.sqrt(N),
                            np.diag(res.values[:3]))
    np.testing.assert_allclose(w, [1, 1, 1, 0], atol=1e-9)


@pytest.mark.parametrize("N,K", [(500, 17), (500, 20), (300, 20), (600, 40)])
def test_exact_operator_of_many_random_archetypes(N, K):
    """More than 16 patterns (the first partial spectrum): the spectrum grows until its end is
    seen; up to N/15 archetypes are all recovered."""
    xi = data.random_archetypes(K, N, K)
    ok, res = _exact_ok(xi)
    assert res.k_hat == K
    assert ok, (res.n_accepted, int((metrics.magnetization(res.patterns, xi) < 1).sum()))


@pytest.mark.parametrize("c", [1e-12, 1e-3, 1.0, 1e6])
def test_scale_invariance(c):
    xi = data.random_archetypes(3, 200, 0)
    eta, _ = data.sample_examples(xi, 600, 0.8, np.ones(3) / 3, 1)
    for J in (operators.pattern_operator(xi), operators.hebbian(eta)):
        res = lam.factorize(c * J, rng=0)
        assert res.k_hat == 3 and metrics.magnetization(res.patterns, xi).min() >= 0.95


@pytest.mark.slow
@pytest.mark.parametrize("K,M", [(5, 600), (8, 1000)])
def test_noisy_operator_of_silhouettes(K, M):
    """One operator of M examples at r = 0.8 from K random silhouettes: every archetype with
    m >= 0.95, no spurious pattern (several class subsets and draws)."""
    names = data.load_silhouettes()[2]
    for s in range(4):
        cls = np.random.default_rng(500 + 10 * K + s).choice(len(names), K, replace=False)
        xi = data.structured_archetypes([int(c) for c in cls], method="medoid")
        eta, _ = data.sample_examples(xi, M, 0.8, np.full(K, 1.0 / K), s)
        res = lam.factorize(operators.hebbian(eta), rng=s)
        m = metrics.magnetization(res.patterns, xi)
        assert res.k_hat == K and m.min() >= 0.95, (s, res.k_hat, m)
        assert metrics.spurious_count(res.patterns, xi) == 0


@pytest.mark.slow
@pytest.mark.parametrize("r", [0.8, 0.6])
def test_federation_of_silhouettes(r):
    """Three clients (r = 0.8 and 0.6) on five random silhouettes."""
    names = data.load_silhouettes()[2]
    cls = np.random.default_rng(91).choice(len(names), 5, replace=False)
    xi = data.structured_archetypes([int(c) for c in cls], method="medoid")
    T, L = 3, 3
    mix = data.static_mixture(T, L, 5)
    M = 600 if r == 0.8 else 1500
    specs = [F.ClientSpec(r=r, M=M, mixture=mix[:, c]) for c in range(L)]
    h = F.run_federation(xi, specs, T, 3, controller="novelty")
    np.testing.assert_array_equal(h.k_hat, 5)
    assert h.magnetization.min() >= 0.95 and h.spurious.max() == 0


@pytest.mark.slow
@pytest.mark.parametrize("controller", ["paper", "novelty"])
@pytest.mark.parametrize("setting", [(300, 4, 4, 0.7, 150, 5, 11), (400, 6, 5, 0.8, 200, 2, 3)])
def test_forty_round_federations(controller, setting):
    """Long runs: under the paper's rule the honest weights decay to ~1e-12 and every upload is
    (almost) the broadcast; eigenvalues at rounding level must never count as spikes."""
    N, K, L, r, M, seed, arch_seed = setting
    xi = data.random_archetypes(K, N, arch_seed)
    T = 40
    mix = data.static_mixture(T, L, K)
    specs = [F.ClientSpec(r=r, M=M, mixture=mix[:, c]) for c in range(L)]
    h = F.run_federation(xi, specs, T, seed, controller=controller, known_r=True)
    np.testing.assert_array_equal(h.k_hat, K)
    assert h.spurious.max() == 0 and h.magnetization.min() >= 0.95
    if controller == "paper":
        assert h.weights[-1].max() < 1e-9  # the regime that broke the old edge


def test_search_and_selection_units():
    xi = correlated_family(4, 200, 0.5, np.random.default_rng(0))
    J = operators.pattern_operator(xi)
    w, V = np.linalg.eigh(J)
    V = V[:, ::-1][:, :4]
    X = lam.search_span(V, 64, 0, scales=np.sqrt(w[::-1][:4]), anneal_steps=20)
    assert X.dtype == np.int8 and X.shape[1] == 200
    assert np.all(X.astype(int).sum(axis=1) <= 0)  # canonical sign
    scores = np.einsum("bk,bk->b", X @ V, X @ V) / 200
    sel = lam.select_span(X, scores, 4, dedup=0.95, floor=1 - 1e-9)
    np.testing.assert_array_equal(np.sort(metrics.magnetization(X[sel.kept], xi)), 1.0)
    # a sign-mixture of kept patterns is redundant, an archetype is not
    mix = np.where(xi[:3].astype(int).sum(0) >= 0, 1, -1).astype(np.int8)
    sel2 = lam.select_span(np.vstack([xi, mix]), np.r_[np.ones(4), 0.99], 5, floor=0.5)
    assert sel2.kept.tolist() == [0, 1, 2, 3] and sel2.n_redundant == 1
    with pytest.raises(ValueError, match="scales must be"):
        lam.search_span(V, 4, 0, scales=np.ones(3))
    with pytest.raises(ValueError, match="avoid must have N = 200"):
        lam.search_span(V, 4, 0, avoid=xi[:, :10])
    with pytest.raises(ValueError, match="n_starts must"):
        lam.search_span(V, 0, 0)
    with pytest.raises(ValueError, match="scores must be an array of shape"):
        lam.select_span(X, scores[:-1], 4)
    with pytest.raises(ValueError, match="target must be a"):
        lam.hebbian_weights(np.ones((3, 4)), np.eye(3))
    with pytest.raises(ValueError, match="search must be one of"):
        lam.factorize(J, 0, search="greedy")
    with pytest.raises(ValueError, match="span_iters must be <= "):
        lam.LAMParams(span_iters=10**9)
