"""Tests of fedlam.lam: fields, dynamics, seeding, acceptance and factorize.

Example kernels use N = 400, r = 0.8 and M = 2000 examples with equal exposures. The spike
strength of archetype mu for the rescaled operator N J is kappa = N r^2 pi / (1 - r^2)
(DESIGN.md sec. 4.1): with pi = 1/K this is kappa = 400 * 0.64 / (0.36 K) = 237 for K = 3
and 119 for K = 6, against the BBP threshold sqrt(q) = sqrt(400/2000) = 0.45. The eigenvector
overlap gamma = (1 - q/kappa^2)/(1 + q/kappa) is then 0.998-0.999: the spikes are strongly
supercritical and the leading eigenvectors span the archetypes almost exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedlam import lam
from fedlam import spectral as sp
from fedlam.data import random_archetypes, sample_examples
from fedlam.metrics import magnetization, spurious_count
from fedlam.operators import hebbian

N = 400


def _case(K, seed, examples):
    rng = np.random.default_rng(seed)
    xi = random_archetypes(K, N, rng)
    if not examples:
        return xi, xi.T.astype(np.float64) @ xi / N
    X, _ = sample_examples(xi, 2000, 0.8, np.full(K, 1.0 / K), rng)
    return xi, hebbian(X)


@pytest.mark.parametrize("search", ["span", "lam"])
@pytest.mark.parametrize("K", [3, 6])
@pytest.mark.parametrize("examples", [False, True], ids=["exact", "examples"])
def test_factorize_recovers_patterns(K, examples, search):
    xi, J = _case(K, 100 + K, examples)
    res = lam.factorize(J, rng=K, search=search)
    assert res.k_hat == K
    assert res.patterns.shape == (K, N) and res.patterns.dtype == np.int8
    m = magnetization(res.patterns, xi)
    assert np.all(m > 0.95), m
    assert spurious_count(res.patterns, xi) == 0
    assert res.n_candidates >= K and res.attempts >= 1


def test_no_spike_gives_empty_result():
    rng = np.random.default_rng(4)
    X = rng.choice(np.array([-1, 1], dtype=np.int8), size=(2000, N))
    res = lam.factorize(hebbian(X), rng=0)
    assert res.k_hat == 0
    assert res.patterns.shape == (0, N) and res.patterns.dtype == np.int8
    assert res.scores.shape == (0,) and res.n_candidates == 0


@pytest.mark.parametrize("search", ["span", "lam"])
def test_determinism(search):
    xi, J = _case(6, 7, True)
    a = lam.factorize(J, rng=11, search=search)
    b = lam.factorize(J, rng=np.random.default_rng(11), search=search)
    np.testing.assert_array_equal(a.patterns, b.patterns)
    np.testing.assert_array_equal(a.scores, b.scores)


def test_k_hat_larger_than_seeds():
    xi, J = _case(6, 8, False)
    res = lam.factorize(J, rng=1, search="lam", n_seeds=1, layers=2, lam=0.5 - 1e-9, max_attempts=2)
    assert res.k_hat == 6
    assert res.n_candidates == 4  # 1 seed x 2 layers x 2 attempts
    assert res.patterns.shape[0] <= 4 and res.patterns.shape[1] == N


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel="dreamed"),
        dict(kernel="dense", accept="score", tau=0.5),
        dict(noise="uniform"),
        dict(external="state"),
        dict(k_method="tw"),
        dict(k_method="shuffle"),
    ],
)
def test_variants_on_exact_kernel(kw):
    xi, J = _case(3, 9, False)
    res = lam.factorize(J, rng=2, search="lam", **kw)
    assert res.k_hat == 3
    assert np.all(magnetization(res.patterns, xi) > 0.95)
    assert spurious_count(res.patterns, xi) == 0


def test_paper_score_rejects_example_patterns():
    """The paper's score with the dreamed kernel: a true pattern scores ~0.44 < tau = 0.5."""
    xi, J = _case(3, 10, True)
    res = lam.factorize(J, rng=0, search="lam", kernel="dreamed", accept="score", max_attempts=1)
    assert res.k_hat == 3 and res.n_accepted == 0
    assert abs(res.dreamed[0] - 3 * res.values[0] / (1 + 2 * res.values[0])) < 1e-12
    assert res.dreamed[2] < 0.5


def test_factorize_literal_oracle_and_paper_failure():
    rng = np.random.default_rng(12)
    xi = random_archetypes(3, 100, rng)
    Jx = xi.T.astype(np.float64) @ xi / 100
    res = lam.factorize_literal(Jx, 0, steps=20, n_seeds=4)
    assert res.k_hat == 3
    # every archetype is found (U[-1, 1] noise to the end leaves a few flipped spins) ...
    assert np.all(magnetization(res.patterns, xi) > 0.9)
    # ... but the signed de-duplication (q >= 0.5) of Algorithm 2 can keep xi and -xi
    # (with this seed: 4 accepted for K = 3); factorize uses |q| and a cap at K_hat
    assert res.n_accepted >= 3
    ours = lam.factorize(Jx, 0)
    assert ours.n_accepted == 3 and spurious_count(ours.patterns, xi) == 0
    # raw example kernel, K = 6, r = 0.8: signal eigenvalues ~ r^2/6 = 0.11 -> 0.26 after
    # dreaming, below tau = 0.5: the paper's fixed threshold finds nothing
    xi6 = random_archetypes(6, 100, rng)
    X, _ = sample_examples(xi6, 1000, 0.8, np.full(6, 1 / 6), rng)
    assert lam.factorize_literal(hebbian(X), 0, steps=5).k_hat == 0


def test_lam_fields_match_naive_loops():
    rng = np.random.default_rng(3)
    n, S, L = 30, 2, 3
    A = rng.standard_normal((n, n))
    Jd = (A + A.T) / 10
    sigma = rng.choice([-1, 1], size=(S, L, n)).astype(np.int8)
    h = rng.choice([-1.0, 1.0], size=(S, 1, n))
    K = lam.Kernel("dense", n, matrix=Jd)
    got = lam.lam_fields(sigma, K, 0.3, 0.1, h)
    for s in range(S):
        for a in range(L):
            sa = sigma[s, a].astype(float)
            want = Jd @ sa + 0.1 * h[s, 0]
            for b in range(L):
                if b != a:
                    sb = sigma[s, b].astype(float)
                    want -= 0.3 / n * (Jd @ sb) * (sb @ Jd @ sa)
            np.testing.assert_allclose(got[s, a], want, atol=1e-12)
    # low-rank kernel equals its dense form
    V, _ = np.linalg.qr(rng.standard_normal((n, 4)))
    w = np.array([1.0, 0.7, 0.5, 0.2])
    lo = lam.Kernel("dreamed", n, V=V, w=w)
    de = lam.Kernel("dense", n, matrix=(V * w) @ V.T)
    np.testing.assert_allclose(lam.lam_fields(sigma, lo, 0.2, 0.1, h), lam.lam_fields(sigma, de, 0.2, 0.1, h), atol=1e-12)


def test_seed_mixtures_and_ties():
    V = np.zeros((10, 2))
    s = lam.seed_mixtures(V, 3, 0)
    assert s.dtype == np.int8 and s.shape == (3, 10) and np.all(s == 1)
    V, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((50, 3)))
    s = lam.seed_mixtures(V, 5, 1)
    assert set(np.unique(s)) <= {-1, 1}
    np.testing.assert_array_equal(s, lam.seed_mixtures(V, 5, 1))


def test_deduplicate_absolute_overlap_and_score_order():
    rng = np.random.default_rng(0)
    xi = random_archetypes(3, 200, rng)
    mix = np.where(xi.sum(0) >= 0, 1, -1).astype(np.int8)  # overlaps 1/2 with each
    cands = np.stack([mix, xi[0], -xi[0], xi[1], xi[2]])
    scores = np.array([0.75, 1.0, 1.0, 0.99, 0.98])
    kept = lam.deduplicate(cands, scores, 0.4)
    np.testing.assert_array_equal(kept, [1, 3, 4])  # -xi^1 is xi^1; the mixture is dropped
    # input order (the paper's Algorithm 2) would keep the mixture and drop all patterns
    kept_in_order = lam.deduplicate(cands, np.zeros(5), 0.4)
    np.testing.assert_array_equal(kept_in_order, [0])


def test_many_component_mixture_is_redundant():
    """A 5-mixture overlaps each component by ~0.375 (< 0.4, < the paper's 0.5): the overlap
    test keeps it, but it adds no new direction to the accepted span."""
    n = 3000  # large N: the overlaps concentrate at 0.375 +- 0.017
    rng = np.random.default_rng(2)
    xi = random_archetypes(6, n, rng)
    V = np.linalg.qr(xi.T.astype(float))[0]  # orthonormal basis of the pattern span
    mix5 = np.where(xi[:5].sum(0) >= 0, 1, -1).astype(np.int8)
    cands = np.vstack([xi[:5], mix5[None], xi[5:]])
    scores = lam.acceptance_scores(cands, vectors=V)
    assert 0.6 < scores[5] < 0.8  # passes rho = 0.6 on its own
    assert np.max(np.abs(cands[:5].astype(float) @ mix5) / n) < 0.45  # and the overlap test
    sel = lam.select(cands, scores, 0.6, 6, 0.45, V)
    kept, n_rej, n_dup, n_red, n_cap = sel.kept, sel.n_rejected, sel.n_duplicates, sel.n_redundant, sel.n_capped
    assert sorted(kept.tolist()) == [0, 1, 2, 3, 4, 6] and n_red == 1 and n_dup == 0


def test_acceptance_scores():
    rng = np.random.default_rng(1)
    xi = random_archetypes(3, 300, rng)
    S = sp.spectrum(xi.T.astype(float) @ xi / 300)
    V = S.vectors[:, :3]
    mix = np.where(xi.sum(0) >= 0, 1, -1).astype(np.int8)
    sc = lam.acceptance_scores(np.vstack([xi, mix[None]]), vectors=V)
    np.testing.assert_allclose(sc[:3], 1.0, atol=1e-10)
    assert abs(sc[3] - 0.75) < 0.1


def test_params_validation():
    with pytest.raises(ValueError, match="lam must lie in"):
        lam.LAMParams(lam=0.5)
    with pytest.raises(ValueError, match="noise must be one of"):
        lam.LAMParams(noise="gaussian")
    with pytest.raises(ValueError, match="min_scale must be <="):
        lam.LAMParams(noise_scale=0.1, min_scale=0.2)
    with pytest.raises(TypeError, match="layers must be an int"):
        lam.LAMParams(layers=2.0)
    with pytest.raises(ValueError, match="dedup must lie"):
        lam.LAMParams(dedup=0.0)
    with pytest.raises(ValueError, match="k_method must be one of"):
        lam.LAMParams(k_method="oracle")
    p = lam.LAMParams()
    assert p.seeds_for(3) == 8 and p.seeds_for(6) == 12
    with pytest.raises(Exception):
        p.lam = 0.3  # frozen


def test_factorize_bad_inputs():
    xi, J = _case(3, 1, False)
    with pytest.raises(TypeError, match="unknown LAM parameter"):
        lam.factorize(J, 0, K=3)
    A = J.copy()
    A[0, 1] += 0.5
    with pytest.raises(ValueError, match="J must be symmetric"):
        lam.factorize(A, 0)
    B = J.copy()
    B[1, 1] = np.inf
    with pytest.raises(ValueError, match="J must be finite"):
        lam.factorize(B, 0)
    with pytest.raises(TypeError, match="J must have a float dtype"):
        lam.factorize(np.eye(4, dtype=np.int64), 0)
    with pytest.raises(ValueError, match="J must have N >= 2"):
        lam.factorize(np.ones((1, 1)), 0)
    with pytest.raises(TypeError, match="rng must be"):
        lam.factorize(J, "seed")
    with pytest.raises(TypeError, match="params must be a LAMParams"):
        lam.factorize(J, 0, params={"layers": 3})
    K3 = lam.Kernel("projector", 5, V=np.eye(5)[:, :2], w=np.ones(2))
    with pytest.raises(ValueError, match="sigma must be 3-dimensional"):
        lam.lam_fields(np.ones((2, 5), dtype=np.int8), K3, 0.2, 0.1, None)
    with pytest.raises(ValueError, match="sigma must have N = 5"):
        lam.lam_fields(np.ones((1, 2, 4), dtype=np.int8), K3, 0.2, 0.1, None)
    with pytest.raises(TypeError, match="kernel must be a fedlam.lam.Kernel"):
        lam.run_lam(np.ones((1, 5), dtype=np.int8), np.eye(5), lam.LAMParams(), 0)
    with pytest.raises(ValueError, match="seeds must contain only -1 and \\+1"):
        lam.run_lam(np.zeros((1, 5), dtype=np.int8), K3, lam.LAMParams(), 0)
    with pytest.raises(ValueError, match="vectors must have shape"):
        lam.seed_mixtures(np.zeros((5, 0)), 2, 0)
    with pytest.raises(ValueError, match="candidates must contain only -1 and \\+1"):
        lam.deduplicate(np.zeros((2, 4), dtype=np.int8), np.zeros(2), 0.4)


def test_select_validates_its_arguments():
    cands = np.ones((2, 10), dtype=np.int8)
    with pytest.raises(ValueError, match="scores must be an array of shape"):
        lam.select(cands, np.ones(3), 0.6, 2, 0.6)
    with pytest.raises(ValueError, match="dedup must lie in"):
        lam.select(cands, np.ones(2), 0.6, 2, 1.5)
    with pytest.raises(ValueError, match="vectors must be an"):
        lam.select(cands, np.ones(2), 0.6, 2, 0.6, np.ones((9, 2)))
    with pytest.raises(ValueError, match="candidates must contain only"):
        lam.select(np.zeros((2, 10), dtype=np.int8), np.ones(2), 0.6, 2, 0.6)


# --- a stored version and the fresh evidence of one archetype (lam._Memory) -------------

def _blend_case(w: float, seed: int):
    """Memory holds archetypes 0, 1 and a version of archetype 2 with 8 of 400 bits flipped
    (m = 0.96); the fresh evidence (600 examples at r = 0.8) holds the true three; the aggregate
    blends them as an upload does, ``(1 - w) A + w F``, and the K-hat cap is 3 (a defence's)."""
    from fedlam.operators import pattern_operator

    xi = random_archetypes(3, 400, 5)
    stored = xi.copy()
    stored[2, np.random.default_rng(0).choice(400, 8, replace=False)] *= -1
    A = pattern_operator(stored)
    eta, _ = sample_examples(xi, 600, 0.8, np.ones(3) / 3, seed)
    return xi, A, (1.0 - w) * A + w * hebbian(eta)


@pytest.mark.parametrize("w", [0.7, 0.76, 0.8, 0.83])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_stored_version_passes_while_the_fresh_evidence_corrects_it(w, seed):
    """Without the memory neither version of archetype 2 passes the in-span floor while the
    blend of the two is near its flip point (measured: lost for w in [0.7, 0.9) at this size);
    with the memory every archetype is kept, the third as a version within dedup of both."""
    xi, A, J = _blend_case(w, seed)
    plain = lam.factorize(J, rng=seed, max_k=3)
    assert plain.k_hat == 3 and plain.n_accepted == 2
    assert magnetization(plain.patterns, xi)[2] == 0.0
    kept = lam.factorize(J, rng=seed, max_k=3, memory=A)
    m = magnetization(kept.patterns, xi)
    assert kept.n_accepted == 3 and np.all(m[:2] == 1.0) and m[2] >= 0.96 - 1e-12
    assert spurious_count(kept.patterns, xi) == 0


@pytest.mark.parametrize("w", [0.3, 0.93])
def test_memory_changes_nothing_away_from_the_flip_point(w):
    """Far on either side one version passes the plain floor: the memory gives the same result
    (the stored version at low w, the fresh one at high w)."""
    xi, A, J = _blend_case(w, 0)
    plain = lam.factorize(J, rng=0, max_k=3)
    kept = lam.factorize(J, rng=0, max_k=3, memory=A)
    np.testing.assert_array_equal(plain.patterns, kept.patterns)
    assert magnetization(kept.patterns, xi)[2] == pytest.approx(0.96 if w < 0.5 else 1.0)


def test_a_memory_of_other_patterns_lowers_no_floor():
    """The allowance is for candidates within dedup of the memory only: a memory of unrelated
    patterns leaves the flip-point loss as it is."""
    from fedlam.operators import pattern_operator

    xi, _, J = _blend_case(0.8, 0)
    other = pattern_operator(random_archetypes(3, 400, 99))
    plain = lam.factorize(J, rng=0, max_k=3)
    res = lam.factorize(J, rng=0, max_k=3, memory=other)
    np.testing.assert_array_equal(plain.patterns, res.patterns)
    assert res.n_accepted == 2


@pytest.mark.parametrize("m", [0.9, 0.95, 0.99])
def test_blend_costs_the_dominant_version_at_most_half_its_disagreement(m):
    """The geometry of the allowance: for +-1 vectors a, b with overlap m the top eigenvector v of
    alpha a a^T + beta b b^T (alpha >= beta > 0) has cos^2(a, v) >= (1 + m) / 2, with equality
    at the flip point alpha = beta, where sgn(v) switches from a to b."""
    N = 400
    g = np.random.default_rng(3)
    a = np.where(g.random(N) < 0.5, -1.0, 1.0)
    b = a.copy()
    b[: round((1 - m) * N / 2)] *= -1
    assert b @ a / N == pytest.approx(m)
    for alpha, beta in [(1.0, 1.0), (1.0, 0.9), (1.0, 0.5), (1.0, 0.01)]:
        vals, vecs = np.linalg.eigh(alpha * np.outer(a, a) + beta * np.outer(b, b))
        cos2 = (vecs[:, -1] @ a) ** 2 / N
        assert cos2 >= (1 + m) / 2 - 1e-12
        if alpha == beta:
            assert cos2 == pytest.approx((1 + m) / 2, abs=1e-12)
        else:
            assert np.array_equal(np.sign(vecs[:, -1] * np.sign(vecs[:, -1] @ a)), a)


def test_memory_is_validated():
    xi, A, J = _blend_case(0.8, 0)
    with pytest.raises(TypeError, match="memory must be float64"):
        lam.factorize(J, rng=0, memory=A.astype(np.float32))
    with pytest.raises(ValueError, match="memory must be an operator of the shape of J"):
        lam.factorize(J, rng=0, memory=A[:10, :10])
    with pytest.raises(ValueError, match="memory must be"):
        lam.factorize(J, rng=0, memory=np.triu(A))
    with pytest.raises(ValueError, match="memory needs the in-span search"):
        lam.factorize(J, rng=0, memory=A, search="lam")


def _retired_case(seed: int, sigma: float = 0.004):
    """Memory holds three archetypes; the fresh evidence (400 examples at r = 0.85) only the last
    two (the first has left the data); symmetric Gaussian noise of entry std sigma blurs the
    first's echo (predicted eigenvector overlap about 0.87: about one bit in 160 flipped by
    noise alone)."""
    from fedlam.operators import pattern_operator

    xi = random_archetypes(3, 160, 7)
    A = pattern_operator(xi)
    g = np.random.default_rng(seed)
    eta, _ = sample_examples(xi, 400, 0.85, np.array([0.0, 0.5, 0.5]), seed)
    G = g.standard_normal((160, 160))
    return xi, A, 0.15 * A + 0.85 * hebbian(eta) + sigma * (G + G.T) / np.sqrt(2)


def test_a_retired_archetype_is_not_walked_off_by_noise():
    """Without the memory the version found of the retired archetype differs from the stored
    one by a bit in half of the seeds (a random walk over rounds, measured in the scenario
    matrix: m 1.0 -> 0.888 in 8 rounds at epsilon 2.9); with it the stored pattern is kept exactly,
    since one bit is within the noise's own flips (lam._Memory.retain)."""
    walked = 0
    for seed in range(6):
        xi, A, J = _retired_case(seed)
        plain = lam.factorize(J, rng=seed, noise_sigma=0.004, max_k=3)
        kept = lam.factorize(J, rng=seed, noise_sigma=0.004, max_k=3, memory=A)
        walked += magnetization(plain.patterns, xi)[0] < 1.0
        assert kept.n_accepted == 3 and np.all(magnetization(kept.patterns, xi) == 1.0)
        gamma = kept.extras["overlaps"]
        assert 0.8 < gamma.min() < 0.95           # noise predicts flips: N q >= 1 bit for the weakest
    assert walked >= 2


def test_retention_needs_the_noise_to_explain_the_flips():
    """The stored version a of the blend case (8 bits off) is not kept against a clean fresh
    archetype: at this noise level (a bulk of 600 examples at N = 400) noise flips no bit,
    and the fresh version replaces the stored one."""
    xi, A, J = _blend_case(0.93, 0)
    res = lam.factorize(J, rng=0, max_k=3, memory=A)
    assert magnetization(res.patterns, xi)[2] == 1.0


@pytest.mark.parametrize(("N", "K", "S"), [(600, 50, 400), (300, 45, 360), (784, 8, 64)])
def test_anneal_in_float32_ends_where_float64_does(N, K, S):
    """The search's soft steps run in float32 (``lam._anneal``); on exact spans of many random
    archetypes (the hard case of chapter 3) every start still ends at the fixed point it reaches
    when the steps run in float64."""
    rng = np.random.default_rng(1)
    xi = random_archetypes(K, N, rng)
    V = np.linalg.qr(xi.T.astype(np.float64))[0]
    C = rng.standard_normal((K, S))
    C /= np.linalg.norm(C, axis=0)
    C64 = C.copy()
    for beta in np.geomspace(0.3, 10.0, 40):
        C64 = V.T @ np.tanh(beta * np.sqrt(N) * (V @ C64))
        C64 /= np.linalg.norm(C64, axis=0)
    C32 = lam._anneal(V, C, 40)
    assert C32.dtype == np.float64 and C32.shape == (K, S)
    assert np.abs(C32 - C64).max() < 1e-3  # single precision, not another trajectory
    ends = [lam._sign_fixed_points(np.where((V @ c).T >= 0, 1.0, -1.0), V, 50) for c in (C32, C64)]
    assert np.array_equal(ends[0], ends[1])


def test_candidate_floors_follow_the_spikes_a_candidate_lies_on():
    """lam.candidate_floors: with equal overlaps every candidate has the floor of
    prop-noisy-span; a candidate on strong spikes needs their score even when a weak spike
    lowers gamma_min (the drift page's sign mixture: coordinates mostly on three strong spikes,
    score 0.715, floor 0.5 before, now above 0.8); an archetype on the weak spike keeps the
    low floor; never below the gamma_min floor."""
    N = 200
    g = 0.9
    flat = lam.candidate_floors(np.random.default_rng(0).standard_normal((5, 4)) * 0.4, np.full(4, g), N)
    assert np.allclose(flat, max(0.5, g - 4 * np.sqrt((1 - g) / N) - 1e-9), rtol=0, atol=1e-12)
    gamma = np.array([0.9999, 0.9998, 0.9998, 0.609])
    mix = np.sqrt(np.array([[0.591, 0.002, 0.002, 0.12]]))
    weak = np.sqrt(np.array([[0.0, 0.0, 0.0, 0.6]]))
    fl_mix, fl_weak = lam.candidate_floors(np.vstack([mix, weak]), gamma, N)
    assert fl_mix > 0.8 > float((mix**2).sum()) + 0.08
    g_min_floor = max(0.5, 0.609 - 4 * np.sqrt((1 - 0.609) / N) - 1e-9)
    assert abs(fl_weak - g_min_floor) < 1e-12
    rand = lam.candidate_floors(np.random.default_rng(1).standard_normal((50, 4)), gamma, N)
    assert np.all(rand >= g_min_floor - 1e-12)
