"""Server defences (fedlam.robust): argument checks, estimators, bulk edges, the support test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.integrate
import scipy.stats

from fedlam import attacks, data, khat, lam, operators, robust
from fedlam.protocol import Upload


def honest_uploads(xi, M, r, L, seed, pi=None, weight=1.0, broadcast=None):
    K = xi.shape[0]
    pi = np.ones(K) / K if pi is None else pi
    out = []
    for c in range(L):
        pc = pi[c] if pi.ndim == 2 else pi
        B = operators.hebbian(data.sample_examples(xi, M, r, pc, rng=seed * 100 + c)[0])
        U = B if broadcast is None else weight * B + (1 - weight) * broadcast
        out.append(Upload(U, M, weight, 1 - r * r))
    return out


def poison_upload(fake, M, r):
    return Upload(operators.pattern_operator(fake[None]), M, float("nan"), 1 - r * r)


def fake_of(seed, N):
    return np.random.default_rng(seed).choice(np.array([-1, 1], dtype=np.int8), size=N)


# ----------------------------------------------------------------------------------------
# argument checks
def test_check_defense_defaults_and_none():
    assert robust.check_defense(None) == (None, {})
    name, p = robust.check_defense("support", None, 5)
    assert name == "support" and p["s"] == 2 and p["n_sigma"] == 4.0
    assert robust.check_defense("trimmed", {"trim": 0.0}, 5)[1]["trim"] == 0.0
    assert robust.check_defense("krum", None, 5)[1] == {"f": 1, "m": None}


@pytest.mark.parametrize("bad", ["mean", "Median", "support ", ""])
def test_unknown_defense(bad):
    with pytest.raises(ValueError, match="defense must be None or one of"):
        robust.check_defense(bad)


def test_defense_type():
    with pytest.raises(TypeError, match="defense must be None or one of"):
        robust.check_defense(3)


@pytest.mark.parametrize("s", [0, -1, 6])
def test_support_s_range(s):
    with pytest.raises(ValueError, match=r"defense_params\['s'\] must lie in \[1, L\] = \[1, 5\]"):
        robust.check_defense("support", {"s": s}, 5)


def test_support_s_type():
    with pytest.raises(TypeError, match=r"defense_params\['s'\] must be an int"):
        robust.check_defense("support", {"s": 2.0}, 5)


@pytest.mark.parametrize("trim", [0.5, 0.7, -0.01])
def test_trim_range(trim):
    with pytest.raises(ValueError, match=r"defense_params\['trim'\] must lie in \[0, 0.5\)"):
        robust.check_defense("trimmed", {"trim": trim}, 5)


def test_unknown_param_and_params_without_defense():
    with pytest.raises(TypeError, match="unknown key"):
        robust.check_defense("median", {"s": 2})
    with pytest.raises(ValueError, match="defense_params must be empty"):
        robust.check_defense(None, {"s": 2})


def test_krum_needs_enough_clients():
    with pytest.raises(ValueError, match="needs L >= 2 f \\+ 3"):
        robust.check_defense("krum", {"f": 1}, 4)
    with pytest.raises(ValueError, match=r"defense_params\['m'\] must be <= L - f"):
        robust.check_defense("krum", {"f": 1, "m": 5}, 5)


def test_aggregate_bad_inputs():
    xi = data.random_archetypes(2, 40, 0)
    ups = honest_uploads(xi, 60, 0.8, 3, 0)
    with pytest.raises(TypeError, match="uploads must be a non-empty list"):
        robust.aggregate([])
    with pytest.raises(ValueError, match="weights must be"):
        robust.aggregate(ups, np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="unweighted estimator"):
        robust.aggregate(ups, np.array([0.5, 0.25, 0.25]), "median")
    with pytest.raises(ValueError, match="broadcast must be None or a float64"):
        robust.aggregate(ups, None, "support", broadcast=np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"\[1, L\] = \[1, 3\]"):
        robust.aggregate(ups, None, "support", {"s": 4})
    bad = [Upload(np.zeros((40, 40), dtype=np.float32), 10, 1.0, None)]
    with pytest.raises(TypeError, match="must be float64"):
        robust.aggregate(bad)


# ----------------------------------------------------------------------------------------
# entrywise estimators
@pytest.mark.parametrize("L", [1, 2, 3, 4, 5, 7, 9, 12])
def test_entrywise_median_matches_numpy(L):
    rng = np.random.default_rng(L)
    ops = [rng.standard_normal((37, 37)) for _ in range(L)]
    assert np.array_equal(robust.entrywise_median(ops), np.median(np.stack(ops), axis=0))


@pytest.mark.parametrize("L,trim", [(5, 0.2), (5, 0.1), (7, 0.3), (10, 0.25), (3, 0.49)])
def test_entrywise_trimmed_matches_scipy(L, trim):
    rng = np.random.default_rng(10 + L)
    ops = [rng.standard_normal((23, 23)) for _ in range(L)]
    ref = scipy.stats.trim_mean(np.stack(ops), trim, axis=0)
    np.testing.assert_allclose(robust.entrywise_trimmed_mean(ops, trim), ref, rtol=0, atol=1e-14)


def test_entrywise_blocks(monkeypatch):
    """Row blocks give the same result as one block."""
    rng = np.random.default_rng(3)
    ops = [rng.standard_normal((50, 50)) for _ in range(5)]
    full = robust.entrywise_median(ops)
    monkeypatch.setattr(robust, "_BLOCK_ELEMS", 50 * 5 * 3)
    assert np.array_equal(robust.entrywise_median(ops), full)


def _median_var_exact(L):
    k = (L - 1) // 2
    c = math.factorial(L) / (math.factorial(k) ** 2)
    f = lambda x: x * x * c * scipy.stats.norm.cdf(x) ** k * scipy.stats.norm.sf(x) ** k * scipy.stats.norm.pdf(x)
    return scipy.integrate.quad(f, -12, 12, epsabs=1e-13)[0]


@pytest.mark.parametrize("L", [3, 5, 7])
def test_gaussian_efficiency_median_exact(L):
    exact = L * _median_var_exact(L)
    # Monte Carlo with 2^20 draws: the relative standard error of a variance is about
    # sqrt(2 / n) * (kurtosis factor ~1) = 0.14 %; allow 5 standard errors.
    assert robust.gaussian_efficiency(L, "median") == pytest.approx(exact, rel=5 * math.sqrt(2 / 2**20))


def test_gaussian_efficiency_trimmed_between_mean_and_median():
    e_med = robust.gaussian_efficiency(5, "median")
    e_tr = robust.gaussian_efficiency(5, "trimmed", 0.2)
    assert 1.0 < e_tr < e_med
    assert robust.gaussian_efficiency(5, "trimmed", 0.1) == 1.0  # floor(0.1 * 5) = 0: the mean
    # trim 0.4 at L = 5 cuts two per side: the median
    assert robust.gaussian_efficiency(5, "trimmed", 0.4) == pytest.approx(e_med, rel=1e-12)


@pytest.mark.parametrize("defense", ["median", "trimmed"])
def test_robust_edge_on_pure_noise(defense):
    """The derived bulk of the median / trimmed mean of pure-noise uploads (mean's MP bulk plus
    the semicircle of variance (e - 1) x the mean's) matches the largest eigenvalue; the MP
    edge of the mean alone is far below it."""
    N, M, L = 300, 300, 5
    zs, zs_mp = [], []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        ups = [Upload(operators.hebbian(np.where(rng.random((M, N)) < 0.5, 1, -1).astype(np.int8)), M, 1.0, 1.0)
               for _ in range(L)]
        ra = robust.aggregate(ups, None, defense)
        comps, v = ra.details["derived_components"], ra.details["derived_noise_var"]
        top = float(np.linalg.eigvalsh(ra.operator)[-1])
        edge, tw = khat.free_edge(comps, v), khat.free_tw_scale(comps, N, v)
        zs.append((top - edge) / tw)
        mp_edge = khat.free_edge(comps, 0.0)
        zs_mp.append((top - mp_edge) / tw)
    # TW1 has mean -1.21 and sd 1.27: the mean of 4 draws lies in [-3.8, 1.4] with 4-sd margin
    # (the +-1 entries sit a little lower than the Gaussian edge, chapter 7)
    assert -3.8 <= np.mean(zs) <= 1.4, zs
    if defense == "median":  # e_5 = 1.43: the mean's edge alone is several scales too low
        assert min(zs_mp) > 3.0, zs_mp


@pytest.mark.parametrize("L", [3, 6])
def test_median_round0_counts_the_archetypes_only(L):
    """Issue 18: round 0 of a federation under the median, L honest clients, N = 160, M = 200,
    r = 0.85, K = 3. The median operator has a genuine fourth outlier along the triple product
    xi_0 * xi_1 * xi_2 (the cubic part of the entrywise median, sec-robust-median); counted against
    a Marchenko-Pastur law fitted to the median's own moments it gave K-hat = 4 and a spurious
    pattern (seeds 0-2 at L = 3, 0-1 at L = 6). The median of the uploads' own counts gives 3."""
    from fedlam import federation
    xi = data.random_archetypes(3, 160, 7)
    mix = data.static_mixture(1, L, 3)
    specs = [federation.ClientSpec(r=0.85, M=200, mixture=mix[:, c]) for c in range(L)]
    for seed in range(5):
        h = federation.run_federation(xi, specs, 1, seed, defense="median")
        assert int(h.k_hat[0]) == 3 and int(h.spurious[0]) == 0, (seed, h.k_hat, h.spurious)
        assert np.all(h.magnetization[0] >= 0.95), (seed, h.magnetization[0])


def test_median_triple_product_is_an_outlier_of_the_operator():
    """Why no bulk law fixes the median's count: E[median | x] of the entries is an odd symmetric
    function of x_k = xi^k_i xi^k_j, alpha sum_k x_k + beta x_0 x_1 x_2, and the beta term is a
    rank-one spike along xi_0 * xi_1 * xi_2 -- a real outlier of the operator (absent from the
    mean), which the uploads' own counts do not see."""
    xi = data.random_archetypes(3, 160, 7)
    trip = (xi[0].astype(float) * xi[1] * xi[2]) / math.sqrt(160)
    ups = honest_uploads(xi, 200, 0.85, 3, 0)
    ra = robust.aggregate(ups, None, "median")
    w, V = np.linalg.eigh(ra.operator)
    w, V = w[::-1], V[:, ::-1]
    ov = (V[:, :8].T @ trip) ** 2
    j = int(np.argmax(ov))
    assert j == 3 and ov[j] > 0.2, (j, ov)                       # the first eigenvalue after the spikes
    mean = robust.mean_aggregate([u.operator for u in ups], None)
    _, Vm = np.linalg.eigh(mean)
    assert float(np.max((Vm[:, -8:].T @ trip) ** 2)) < 0.1       # not an outlier of the mean
    # its eigenvalue is above the bulk edge of the mean's MP plus the measured semicircle
    edge = khat.free_edge(ra.components, ra.noise_var)
    assert w[3] > edge
    assert ra.max_k == 3 and ra.details["upload_counts"].tolist() == [3, 3, 3]


def test_upload_count_does_not_count_a_stored_copy_twice():
    """A stored pattern at m = 0.95 with its archetype: the blended upload w B + (1 - w) A has the
    difference of the two as an extra outlier (about (1 - w) w r^2 pi (1 - m^2), far above the
    edge), which the whole-upload count takes for a direction of its own. The count of the stored
    patterns plus the fresh spikes outside their span is 3; a new archetype adds one."""
    N, M, r = 160, 200, 0.85
    xi = data.random_archetypes(4, N, 7)
    stored = xi[:3].copy()
    stored[0, :4] *= -1                                     # m = 1 - 2 * 4 / 160 = 0.95
    A = operators.pattern_operator(stored)
    ups = honest_uploads(xi[:3], M, r, 3, 2, weight=0.5, broadcast=A)
    whole = [int(np.sum(np.linalg.eigvalsh(u.operator) > robust.upload_threshold(u, N))) for u in ups]
    assert min(whole) >= 4, whole
    k, counts = robust.median_spike_count(ups, N, broadcast=A)
    assert k == 3 and counts.tolist() == [3, 3, 3]
    # a new archetype in the fresh data is counted on top of the memory
    ups4 = honest_uploads(xi, M, r, 3, 3, weight=0.5, broadcast=A)
    assert robust.median_spike_count(ups4, N, broadcast=A)[0] == 4
    # without fresh evidence (w = 0) an upload holds the memory only
    assert robust.upload_spike_count(Upload(A.copy(), M, 0.0, 1 - r * r), N, broadcast=A) == 3


@pytest.mark.parametrize("defense", ["median", "trimmed"])
def test_median_count_ignores_a_minority_poisoner(defense):
    """Three honest uploads and a rank-one fake: the median still moves every entry towards the
    fake (a spike of the median operator, sec-robust-median), but the lower median of the counts
    [3, 3, 3, 1] is 3 and the three archetypes, far above the fake, are what is kept."""
    xi = data.random_archetypes(3, 160, 7)
    fake = fake_of(5, 160)
    ups = honest_uploads(xi, 200, 0.85, 3, 1) + [poison_upload(fake, 200, 0.85)]
    params = {"trim": 0.25} if defense == "trimmed" else None
    ra = robust.aggregate(ups, None, defense, params)
    assert sorted(ra.details["upload_counts"].tolist()) == [1, 3, 3, 3]
    assert ra.max_k == 3
    res = lam.factorize(ra.operator, 0, k_method="free", components=ra.components,
                        noise_sigma=math.sqrt(ra.noise_var / 160))
    assert res.k_hat >= 4            # without the robust count the fake's spike counts
    w = np.linalg.eigvalsh(ra.operator)[::-1]
    fake_dir = fake.astype(float) / math.sqrt(160)
    assert float(fake_dir @ ra.operator @ fake_dir) < w[2]   # below the three archetypes


@pytest.mark.parametrize("defense", ["median", "trimmed"])
def test_median_count_is_what_a_majority_holds(defense):
    """Issue 18: five uploads, five archetypes, each held by three of the five clients (client c
    holds c, c+1, c+2 mod 5; the adversarial experiment's `three_of_five`). Every upload holds 3
    and so does the lower median of their counts, which capped K-hat at 3 and lost archetypes;
    the entrywise median follows the majority and holds all five, and so does the count of the
    directions a strict majority (3 of 5) certifies."""
    N, M, r, K = 200, 200, 0.9, 5
    xi = data.random_archetypes(K, N, 3)
    pi = np.zeros((K, K))
    for c in range(K):
        pi[c, [(c + j) % K for j in range(3)]] = 1 / 3
    ups = honest_uploads(xi, M, r, K, 4, pi=pi)
    params = {"trim": 0.2} if defense == "trimmed" else None
    ra = robust.aggregate(ups, None, defense, params)
    assert ra.details["upload_counts"].tolist() == [3] * 5 and ra.details["k_hat_median"] == 3
    assert ra.details["quorum"] == 3 and robust.majority_quorum(5) == 3
    assert ra.max_k == 5 and ra.details["k_hat_robust"] == 5
    # over a federation (the LAM of one round finds three or four of five spikes at N = 200; the
    # broadcast brings the rest in) all five are stored, none spurious; with the lower median's
    # cap of 3 one or two were (the experiment's 20 %)
    from fedlam import federation
    mix = data.heterogeneous_supports(6, K, K, [[(c + j) % K for j in range(3)] for c in range(K)])
    specs = [federation.ClientSpec(r=r, M=M, mixture=mix[:, c]) for c in range(K)]
    for seed in range(2):
        h = federation.run_federation(xi, specs, 6, seed, controller="novelty", known_r=True, defense=defense,
                                      defense_params=params)
        assert np.all(h.magnetization[-1] >= 0.95) and int(h.spurious.max()) == 0, (seed, h.magnetization[-1])
        assert h.k_hat.tolist() == [5] * 6, (seed, h.k_hat)


def test_majority_count_stops_at_an_unsupported_leading_direction():
    """Two uploads, one honest (the three stored archetypes blended in) and one rank-one poisoner:
    the median of two is their mean, whose leading direction is the fake (strength 1/2). The stored
    patterns have the quorum (2 of 2) as memory, but the LAM takes the operator's leading
    directions: the count ends at the first one a majority does not hold, here the first (0),
    instead of letting the fake in with a cap of 3. Three honest uploads and the poisoner: the
    quorum is 3 of 4, the fake has one vote and ranks below the archetypes (count 3)."""
    N, M, r = 160, 200, 0.85
    xi = data.random_archetypes(3, N, 7)
    A = operators.pattern_operator(xi)
    fake = fake_of(5, N)
    two = honest_uploads(xi, M, r, 1, 2, weight=0.5, broadcast=A) + [poison_upload(fake, M, r)]
    k, res = robust.majority_spike_count(robust.entrywise_median([u.operator for u in two]), two, broadcast=A)
    assert res.params["s"] == 2 and res.memory_dims == 3 and res.supported.shape[1] == 3
    assert k == 0
    four = honest_uploads(xi, M, r, 3, 2, weight=0.5, broadcast=A) + [poison_upload(fake, M, r)]
    k4, res4 = robust.majority_spike_count(robust.entrywise_median([u.operator for u in four]), four, broadcast=A)
    assert res4.params["s"] == 3 and k4 == 3


def test_majority_count_retains_the_weakest_stored_silhouette():
    """Retention under the median: the three stored silhouettes span a direction along which the
    broadcast is weak (eigenvalue 0.46 < 1/2), and when the clients' data hold only silhouette 0
    no fresh part certifies it. It is still memory (its squared cosine with the stored span is
    1): the count keeps all three stored patterns. With the broadcast's Rayleigh test as the
    memory (as before 2026-11-27) the memory had two dimensions and the count 2, so one stored
    silhouette was dropped from the cap of K-hat."""
    xi = data.structured_archetypes()
    N = xi.shape[1]
    A = operators.pattern_operator(xi)
    assert float(np.linalg.eigvalsh(xi.astype(float) @ xi.T.astype(float) / N).min()) < 0.5
    pi = np.zeros((5, 3))
    pi[:, 0] = 1.0
    for seed in range(2):
        ups = honest_uploads(xi, 200, 0.85, 5, seed, pi=pi, weight=0.5, broadcast=A)
        k, res = robust.majority_spike_count(robust.entrywise_median([u.operator for u in ups]), ups, broadcast=A)
        assert res.memory_dims == 3 and k == 3, (seed, k, res.memory_dims)


def test_majority_count_bad_input():
    xi = data.random_archetypes(2, 40, 1)
    ups = honest_uploads(xi, 50, 0.9, 3, 0)
    with pytest.raises(ValueError, match="operator must be"):
        robust.majority_spike_count(np.eye(30), ups)
    with pytest.raises(ValueError, match="upload_counts"):
        robust.majority_spike_count(robust.entrywise_median([u.operator for u in ups]), ups,
                                    upload_counts=np.array([1.0, 2.0, 2.0]))
    with pytest.raises(ValueError, match="n_uploads"):
        robust.majority_quorum(0)


# ----------------------------------------------------------------------------------------
# plain mean and Krum
def test_mean_aggregate_and_components():
    xi = data.random_archetypes(3, 60, 1)
    ups = honest_uploads(xi, 100, 0.8, 4, 1)
    w = np.array([0.1, 0.2, 0.3, 0.4])
    ra = robust.aggregate(ups, w)
    np.testing.assert_allclose(ra.operator, sum(wi * u.operator for wi, u in zip(w, ups)), atol=1e-15)
    comps, v = khat.components_from_uploads(ups, w, 60)
    assert ra.components == comps and ra.noise_var == v and ra.details == {"defense": None}


def test_krum_rejects_rank_one_poisoner():
    N, M, r = 200, 200, 0.9
    xi = data.random_archetypes(3, N, 2)
    ups = honest_uploads(xi, M, r, 4, 2) + [poison_upload(fake_of(5, N), M, r)]
    ra = robust.aggregate(ups, None, "krum")
    assert 4 not in ra.details["selected"] and ra.details["selected"].size == 4
    ra1 = robust.aggregate(ups, None, "krum", {"f": 1, "m": 1})
    assert ra1.details["selected"].size == 1 and ra1.details["selected"][0] != 4


def test_krum_scores_hand_computed():
    ops = [np.full((2, 2), float(x)) for x in (0.0, 1.0, 3.0, 7.0, 8.0)]
    # squared Frobenius distances 4 (x - y)^2; L - f - 2 = 2 nearest with f = 1
    d = lambda a, b: 4 * (a - b) ** 2
    vals = [0, 1, 3, 7, 8]
    exp = [sum(sorted(d(a, b) for b in vals if b != a)[:2]) for a in vals]
    np.testing.assert_allclose(robust.krum_scores(ops, 1), exp)


# ----------------------------------------------------------------------------------------
# the support test
def test_fresh_operator_removes_broadcast():
    xi = data.random_archetypes(2, 50, 3)
    A = operators.pattern_operator(xi)
    B = operators.hebbian(data.sample_examples(xi, 80, 0.8, np.ones(2) / 2, rng=1)[0])
    u = Upload(0.3 * B + 0.7 * A, 80, 0.3, 0.36)
    np.testing.assert_allclose(robust.fresh_operator(u, A), 0.3 * B, atol=1e-15)
    assert robust.fresh_operator(Upload(B, 80, float("nan"), None), A) is B


def test_upload_threshold_single_mp():
    N, M = 400, 200
    t = robust.upload_threshold(Upload(np.zeros((N, N)), M, 0.5, 0.36), N, n_sigma=0.0)
    # MP edge of the fresh part, moved by the +-1 entries' kurtosis 4 / s2 - 6: edge sqrt(q) k / N
    edge = 0.5 * 0.36 / N * (1 + math.sqrt(N / M)) ** 2
    assert t == pytest.approx(edge * (1 + math.sqrt(N / M) * (4 / 0.36 - 6) / N), rel=1e-6)
    assert math.isnan(robust.upload_threshold(Upload(np.zeros((N, N)), 0, 1.0, 0.36), N))
    assert math.isnan(robust.upload_threshold(Upload(np.zeros((N, N)), 10, 0.0, 0.36), N))
    # unknown bulk variance: the upper bound 1 (uniform +-1 entries, kurtosis -2)
    assert robust.upload_threshold(Upload(np.zeros((N, N)), M, 1.0, None), N, 0.0) == pytest.approx(
        (1 + math.sqrt(N / M)) ** 2 / N * (1 - 2 * math.sqrt(N / M) / N), rel=1e-6)


def test_pure_noise_certifies_nothing_even_in_its_own_top_directions():
    """Uniform false alarm: the basis is the upload's own top eigenvectors (the worst case for a
    Rayleigh-quotient test), yet nothing exceeds the edge plus 4 Tracy-Widom scales."""
    N, M = 300, 300
    for seed in range(5):
        rng = np.random.default_rng(40 + seed)
        B = operators.hebbian(np.where(rng.random((M, N)) < 0.5, 1, -1).astype(np.int8))
        V = np.linalg.eigh(B)[1][:, -6:]
        res = robust.support_test(None, [Upload(B, M, 1.0, 1.0)], {"s": 1}, basis=V)
        assert res.n_certified[0] == 0


def _cleaned(ups, s=2, broadcast=None):
    ra = robust.aggregate(ups, None, "support", {"s": s}, broadcast=broadcast)
    kr = khat.k_hat_components(ra.spectrum, ra.components, ra.noise_var)
    return ra, kr


def test_support_removes_single_poisoner_keeps_archetypes():
    N, M, r = 300, 300, 0.9
    xi = data.random_archetypes(3, N, 4)
    fake = fake_of(9, N)
    ups = honest_uploads(xi, M, r, 4, 4) + [poison_upload(fake, M, r)]
    plain = robust.aggregate(ups)
    assert khat.k_hat_components(plain.operator, plain.components, plain.noise_var).k_hat == 4
    ra, kr = _cleaned(ups)
    assert ra.details["removed"] == 1 and kr.k_hat == 3
    uf = fake / math.sqrt(N)
    assert uf @ plain.operator @ uf > 0.15 and uf @ ra.operator @ uf < 0.01
    res = lam.factorize(ra.operator, rng=0, spectrum=ra.spectrum)
    assert res.n_accepted == 3
    assert np.all(np.abs(res.patterns.astype(float) @ xi.T.astype(float)).max(axis=0) / N == 1.0)
    np.testing.assert_array_equal(ra.details["n_certified"], [3, 3, 3, 3, 1])


def test_support_spectrum_matches_operator():
    N, M, r = 250, 250, 0.9
    xi = data.random_archetypes(3, N, 5)
    ups = honest_uploads(xi, M, r, 4, 5) + [poison_upload(fake_of(1, N), M, r)]
    ra = robust.aggregate(ups, None, "support")
    full = np.linalg.eigvalsh(ra.operator)[::-1]
    k = len(ra.spectrum)
    np.testing.assert_allclose(ra.spectrum.values[:k - 2], full[:k - 2], atol=1e-10)
    assert ra.spectrum.trace == pytest.approx(np.trace(ra.operator))
    V = ra.spectrum.vectors[:, :3]
    np.testing.assert_allclose(ra.operator @ V, V * ra.spectrum.values[:3], atol=1e-9)


@pytest.mark.parametrize("k,s,removed", [(2, 2, 0), (2, 3, 1), (3, 3, 0), (3, 4, 1)])
def test_support_colluders_need_s_above_k(k, s, removed):
    N, M, r = 250, 250, 0.9
    xi = data.random_archetypes(2, N, 6)
    fake = fake_of(3, N)
    # 8 clients: 8 - k >= s honest holders, so only the fake can lose its support
    ups = honest_uploads(xi, M, r, 8 - k, 6) + [poison_upload(fake, M, r) for _ in range(k)]
    ra, kr = _cleaned(ups, s)
    assert ra.details["removed"] == removed
    assert kr.k_hat == 2 + (1 - removed)


@pytest.mark.parametrize("holders,s,kept", [(2, 2, True), (1, 2, False), (1, 1, True), (2, 3, False)])
def test_support_holders_versus_s(holders, s, kept):
    """An archetype held by h clients survives iff h >= s (honest federation, L = 5)."""
    N, M, r, L = 250, 250, 0.9, 5
    xi = data.random_archetypes(2, N, 7)
    pi = np.tile([1.0, 0.0], (L, 1))
    pi[:holders] = [0.5, 0.5]                 # archetype 1 only at the first `holders` clients
    ups = honest_uploads(xi, M, r, L, 7, pi=pi)
    ra, kr = _cleaned(ups, s)
    assert kr.k_hat == (2 if kept else 1)
    assert ra.details["removed"] == (0 if kept else 1)


def test_support_keeps_memory_without_fresh_evidence():
    """Clients that upload only the broadcast (w = 0) abstain; the memory stays."""
    N, r = 200, 0.9
    xi = data.random_archetypes(3, N, 8)
    A = operators.pattern_operator(xi)
    ups = [Upload(A.copy(), 100, 0.0, 1 - r * r) for _ in range(5)]
    ra, kr = _cleaned(ups, 2, broadcast=A)
    assert ra.details["removed"] == 0 and kr.k_hat == 3
    assert np.array_equal(ra.details["n_certified"], np.zeros(5, dtype=np.int64))
    assert ra.details["memory_dims"] == 3


def test_support_no_spikes_is_identity():
    N, M = 200, 200
    rng = np.random.default_rng(2)
    ups = [Upload(operators.hebbian(np.where(rng.random((M, N)) < 0.5, 1, -1).astype(np.int8)), M, 1.0, 1.0)
           for _ in range(3)]
    ra = robust.aggregate(ups, None, "support")
    assert ra.details["k_hat_mean"] == 0 and ra.details["removed"] == 0
    np.testing.assert_array_equal(ra.operator, robust.aggregate(ups).operator)


def _targeted_fake(xi, N, frac, seed):
    flips = np.random.default_rng(seed).permutation(N)[: int(frac * N)]
    x = xi[0].copy()
    x[flips] *= -1
    return x


def test_support_targeted_fake_needs_the_archetype_in_the_basis():
    """A corrupted archetype (overlap 0.7) borrows the honest uploads' Rayleigh quotient: with the
    archetype in the basis it is rejected, with only the candidates it passes (support_filter's Notes)."""
    N, M, r = 250, 250, 0.9
    xi = data.random_archetypes(3, N, 9)
    xf = _targeted_fake(xi, N, 0.15, 1)
    ups = honest_uploads(xi, M, r, 4, 9) + [poison_upload(xf, M, r)]
    V = robust.aggregate(ups, None, "support").spectrum.vectors[:, :3]
    plain = robust.aggregate(ups)
    V4 = np.linalg.eigh(plain.operator)[1][:, -4:]
    cands = np.vstack([xf, xi[1], xi[2]]).astype(np.int8)
    mask_cands = robust.support_filter(cands, ups)                 # basis = the candidates only
    mask_v = robust.support_filter(cands, ups, basis=V4)            # basis = detected eigenvectors
    assert mask_cands.tolist() == [True, True, True]
    assert mask_v.tolist() == [False, True, True]
    # the aggregate-level defence recovers the archetype itself
    ra = robust.aggregate(ups, None, "support")
    res = lam.factorize(ra.operator, rng=0, spectrum=ra.spectrum)
    ov = np.abs(res.patterns.astype(float) @ xi.T.astype(float)) / N
    assert np.allclose(ov.max(axis=0), 1.0) and V.shape == (N, 3)


def test_support_filter_votes_and_counts():
    N, M, r = 250, 250, 0.9
    xi = data.random_archetypes(2, N, 10)
    fake = fake_of(4, N)
    ups = honest_uploads(xi, M, r, 4, 10) + [poison_upload(fake, M, r)]
    V = np.linalg.eigh(robust.aggregate(ups).operator)[1][:, -3:]
    cands = np.vstack([xi, fake[None]]).astype(np.int8)
    res = robust.support_test(cands, ups, basis=V)
    assert res.accepted.tolist() == [True, True, False]
    # a random pattern has squared overlap ~1/N with each archetype direction (K / N = 0.008)
    assert np.all(res.votes[:2, :4] > 0.99) and np.all(res.votes[2, :4] < 0.05) and res.votes[2, 4] > 0.99
    assert res.counts.tolist() == [4, 4, 1]
    # the poisoner's direction was examined and has one vote; the archetypes' have four
    assert sorted(res.direction_votes.tolist())[-1] == 4


def test_support_memory_counts_s_votes():
    N, M, r = 200, 200, 0.9
    xi = data.random_archetypes(2, N, 12)
    A = operators.pattern_operator(xi[:1])            # archetype 0 in memory, nobody holds it now
    pi = np.tile([0.0, 1.0], (3, 1))
    ups = honest_uploads(xi, M, r, 3, 12, pi=pi)
    res = robust.support_test(xi.astype(np.int8), ups, {"s": 3}, broadcast=A,
                              basis=np.linalg.qr(xi.T.astype(float))[0])
    assert res.memory_dims == 1 and res.counts.tolist() == [3, 3] and res.accepted.all()


def test_support_ritz_values_are_rayleigh_quotients():
    """Ritz values in a one-dimensional basis are the Rayleigh quotient of the fresh part, which
    for an archetype is w (pi_hat r^2 + (1 - r^2)/N + sum_nu pi_hat_nu r^2 m_nu^2) (chapter 12)."""
    N, M, r, w = 200, 300, 0.8, 0.4
    xi = data.random_archetypes(2, N, 11)
    A = operators.pattern_operator(xi[:1])
    eta, labels = data.sample_examples(xi, M, r, np.ones(2) / 2, rng=5)
    up = Upload(w * operators.hebbian(eta) + (1 - w) * A, M, w, 1 - r * r)
    u = xi[1].astype(float) / math.sqrt(N)
    res = robust.support_test(None, [up], {"s": 1}, broadcast=A, basis=u[:, None])
    F = robust.fresh_operator(up, A)
    assert res.ritz[0][0] == pytest.approx(u @ F @ u, rel=1e-12)
    pi_hat = np.bincount(labels, minlength=2) / M
    m01 = float(xi[0].astype(float) @ xi[1]) / N
    pred = w * (pi_hat[1] * r * r + (1 - r * r) / N + pi_hat[0] * r * r * m01 ** 2)
    # relative sd of the class-1 term ~ 2 sqrt((1 - r^2) / (N r^2 M_1)) ~ 0.5 %; allow 3 %
    assert res.ritz[0][0] == pytest.approx(pred, rel=0.03)


# ----------------------------------------------------------------------------------------
# additive spikes (the poisoner's fake) on a free-convolution bulk
def test_additive_spike_single_mp_closed_form():
    """One MP component of scale a and ratio q: G* = 1/(a sqrt(q)(1 + sqrt(q))), so
    theta_c = a sqrt(q)(1 + sqrt(q)); at theta_c the outlier is the edge a (1 + sqrt q)^2."""
    a, q = 0.3, 0.25
    comps = [khat.Component(a, q)]
    tc = robust.critical_strength(comps)
    assert tc == pytest.approx(a * math.sqrt(q) * (1 + math.sqrt(q)), rel=1e-9)
    z, ov = robust.additive_spike_outlier(tc * (1 + 1e-9), comps)
    assert z == pytest.approx(khat.free_edge(comps), rel=1e-6) and ov == pytest.approx(0.0, abs=1e-6)
    assert robust.additive_spike_outlier(0.5 * tc, comps) == (pytest.approx(khat.free_edge(comps)), 0.0)
    # semicircle only (noise_var v): R(G) = v G, theta_c = sqrt(v), z = theta + v / theta
    z, ov = robust.additive_spike_outlier(2.0, [], noise_var=1.0)
    assert z == pytest.approx(2.5) and ov == pytest.approx(1 - 1 / 4)
    assert robust.critical_strength([], 1.0) == pytest.approx(1.0)


def test_additive_spike_matches_simulation():
    N, M, s2 = 300, 300, 0.19
    rng = np.random.default_rng(7)
    ops = [s2 * operators.hebbian(np.where(rng.random((M, N)) < 0.5, 1, -1).astype(np.int8)) for _ in range(4)]
    u = fake_of(2, N).astype(float) / math.sqrt(N)
    comps = [khat.Component(s2 / N / 5, N / M)] * 4
    theta = 10 * robust.critical_strength(comps)
    J = sum(ops) / 5 + theta * np.outer(u, u)
    vals, vecs = np.linalg.eigh(J)
    z, ov = robust.additive_spike_outlier(theta, comps)
    assert vals[-1] == pytest.approx(z, rel=0.02) and (vecs[:, -1] @ u) ** 2 == pytest.approx(ov, abs=0.05)


def test_r_transform_derivative():
    comps = [khat.Component(0.2, 0.5), khat.Component(0.05, 2.0)]
    G, h = 1.3, 1e-6
    R, dR = robust.r_transform(G, comps, 0.1)
    assert dR == pytest.approx((robust.r_transform(G + h, comps, 0.1)[0] - robust.r_transform(G - h, comps, 0.1)[0]) / (2 * h), rel=1e-6)
    with pytest.raises(TypeError, match="components"):
        robust.r_transform(1.0, khat.Component(0.2, 0.5))


def test_support_keeps_whole_memory_when_clients_hold_part_of_it():
    """Drift: five patterns in memory, the clients' fresh data hold two of them; the memory's basis
    is an arbitrary rotation inside its span, and the whole span stays."""
    N, M, r, w = 300, 300, 0.9, 0.2
    xi = data.random_archetypes(5, N, 13)
    A = operators.pattern_operator(xi)
    pi = np.zeros((5, 5))
    pi[:, 3:] = 0.5
    ups = honest_uploads(xi, M, r, 5, 13, pi=pi, weight=w, broadcast=A)
    ra = robust.aggregate(ups, None, "support", {"s": 2}, broadcast=A)
    assert ra.details["memory_dims"] == 5 and ra.details["removed"] == 0
    res = lam.factorize(ra.operator, rng=0, spectrum=ra.spectrum)
    assert np.all(metrics_magnetization(res.patterns, xi) == 1.0)


def metrics_magnetization(patterns, xi):
    from fedlam import metrics

    return metrics.magnetization(patterns, xi)


# ----------------------------------------------------------------------------------------
# issue 18 item 3: a near-copy of an archetype must not cost it under the support defence
def _near_copy_round(seed, n_flip, N=400, M=400, r=0.9, K=3, groups=None):
    xi = data.random_archetypes(K, N, seed)
    ups = honest_uploads(xi, M, r, 4, seed)
    x = xi[0].copy()
    x[np.random.default_rng(seed + 1000).permutation(N)[:n_flip]] *= -1
    ups.append(poison_upload(x, M, r))
    from fedlam import federation

    rr = federation.Server(defense="support", defense_params={"groups": groups}).round(ups, np.random.default_rng(seed))
    return xi, x, rr.patterns


@pytest.mark.parametrize("groups", [None, 2, "leave-out"])
@pytest.mark.parametrize("n_flip", [60, 20, 10, 6, 2, 0])   # m = 0.7, 0.9, 0.95, 0.97, 0.99, 1.0
def test_support_near_copy_never_costs_an_archetype(n_flip, groups):
    """N = M = 400, r = 0.9, K = 3: four honest uploads and a rank-one copy of archetype 0 with
    n_flip bits flipped. Before the fix (directions ranked by votes) the copy's vote put the mean
    of its direction and an honest one first, and the server kept 1, 0, 1 of 3 archetypes at m = 0.95.
    Voting in two groups (the copy averaged with two honest uploads in group 0), or with
    leave-one-out voters (the copy in all but one of them), changes nothing."""
    N = 400
    for seed in range(3):
        xi, x, pats = _near_copy_round(seed, n_flip, groups=groups)
        ov = np.abs(pats.astype(float) @ xi.T.astype(float)) / N
        assert pats.shape[0] == 3, (seed, pats.shape)
        assert np.all(ov.max(axis=0) >= 0.99), (seed, ov.max(axis=0))
        if n_flip:   # the copy is not stored in the archetype's place
            assert not np.any(np.all(pats == x, axis=1) | np.all(pats == -x, axis=1)), seed


def test_stored_patterns_recovers_the_broadcast_patterns():
    """The +-1 vectors of the stored span are the stored patterns (up to sign and order), also for
    a near-duplicate pair (overlap 0.9), and nothing for an empty memory."""
    from fedlam import data, operators

    xi = data.random_archetypes(3, 300, 11)
    dup = xi[0].copy()
    dup[np.random.default_rng(2).choice(300, 15, replace=False)] *= -1
    P = np.vstack([xi, dup[None]])
    got = robust.stored_patterns(robust.memory_span(operators.pattern_operator(P)))
    ov = np.abs(got.astype(float) @ P.T.astype(float)) / 300
    assert got.shape == (4, 300) and np.array_equal(np.sort(ov.argmax(axis=1)), np.arange(4))
    assert np.all(ov.max(axis=1) == 1.0)
    assert robust.stored_patterns(np.zeros((300, 0))).shape == (0, 300)


# ----------------------------------------------------------------------------------------
# voting groups: certification under example-level privacy
def _private_setting(factor):
    """K = 3 archetypes at N = 160 and the Gaussian mechanism at ``factor`` x the epsilon threshold
    of the mean of six clients (M = 200, r = 0.85) for the weakest direction of the family."""
    from fedlam import privacy

    K, N, M, r, L, delta = 3, 160, 200, 0.85, 6, 1e-5
    xi = data.random_archetypes(K, N, 7)
    pi_min = float(np.linalg.eigvalsh(xi.astype(float) @ xi.T.astype(float) / (K * N)).min())
    eps = factor * privacy.epsilon_threshold(r, pi_min, N, M, delta, L=L)
    return xi, privacy.GaussianMechanism(epsilon=eps, delta=delta)


def _private_uploads(xi, M, r, L, seed, mech):
    """L uploads of balanced batches (example streams ``100 seed + c``), each through ``mech``
    (None: no privacy) with noise drawn from ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    out = []
    for c in range(L):
        X, _ = data.sample_examples(xi, M, r, np.ones(xi.shape[0]) / xi.shape[0], rng=seed * 100 + c)
        Z, sig = operators.hebbian(X), 0.0
        if mech is not None:
            Z, sig = mech.apply(Z, M, rng)
        out.append(Upload(Z, M, 1.0, 1 - r * r, dp_sigma=sig))
    return out


def test_voting_groups_partition_the_round():
    assert robust.voting_groups(7, 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert robust.voting_groups(2, 3) == [[0], [1]]                 # fewer uploads than groups
    assert robust.voting_groups(3, None) == [[0], [1], [2]]         # each upload alone
    with pytest.raises(ValueError, match="n_uploads"):
        robust.voting_groups(0, 2)
    with pytest.raises(TypeError, match="groups"):
        robust.voting_groups(4, 1.5)


def test_leave_out_voters():
    """groups="leave-out": one voter per set of s - 1 uploads left out, and every voter must certify."""
    assert robust.voting_groups(4, "leave-out") == [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]
    assert robust.voting_groups(4, "leave-out", 3) == [[2, 3], [1, 3], [1, 2], [0, 3], [0, 2], [0, 1]]
    assert robust.voting_groups(4, "leave-out", 1) == [[0, 1, 2, 3]]     # the plain mean alone
    assert robust.voting_groups(1, "leave-out") == [[0]]                 # a lone upload votes alone
    assert robust.voting_quorum(6, "leave-out", 2) == 6 and robust.voting_quorum(6, 3, 2) == 2
    with pytest.raises(ValueError, match="groups"):
        robust.voting_groups(4, "leave-one")


@pytest.mark.parametrize("seed", range(3))
def test_leave_out_voters_certify_near_the_means_threshold(seed):
    """Example-level DP at 3 x the mean's epsilon threshold (N = 160, K = 3, six clients with
    M = 200 at r = 0.85) and a poisoner's seventh upload. The paper's acceptance stores the fake;
    two voting groups of three or four certify only some archetypes (each group has a third of the
    mean's evidence); leave-one-out voters, each the mean of six of the seven uploads, keep all
    three archetypes and never the fake: the one voter without the poisoner holds no fake. They
    are what the default server runs on noised uploads (acceptance "voted")."""
    from fedlam import metrics
    from fedlam.federation import Server

    K, N, M, r, L = 3, 160, 200, 0.85, 6
    xi, mech = _private_setting(3)
    fake = fake_of(5, N)
    ups = _private_uploads(xi, M, r, L, seed, mech) + [poison_upload(fake, M, r)]

    paper = Server(acceptance="paper").round(ups, np.random.default_rng(0))
    assert attacks.fake_in_memory(paper.patterns, fake, xi)
    groups = Server(defense="support", defense_params={"groups": 2}).round(ups, np.random.default_rng(0))
    assert groups.result.k_hat < K and not attacks.fake_in_memory(groups.patterns, fake, xi)
    loo = Server(defense="support", defense_params={"groups": "leave-out"}).round(ups, np.random.default_rng(0))
    assert loo.result.k_hat == K and not attacks.fake_in_memory(loo.patterns, fake, xi)
    assert np.all(metrics.magnetization(loo.patterns, xi) >= 0.95) and metrics.spurious_count(loo.patterns, xi) == 0
    default = Server().round(ups, np.random.default_rng(0))
    assert default.result.k_hat == K and np.array_equal(default.patterns, loo.patterns)


@pytest.mark.parametrize("with_poisoner", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_leave_out_voters_keep_the_whole_stored_span(seed, with_poisoner):
    """A round of a private, partially answered federation (measured on the scenario matrix's
    leave-out row on silhouettes under drift, rounds 29-30): the three silhouettes are stored
    (broadcast eigenvalues 0.46, 0.95, 1.59), two clients answer with data of archetypes 1 and 2
    only (archetype 0 retired), blending the broadcast with weight 0.9, under example-level DP at
    epsilon 11.4 (2 x one upload's threshold), with or without a poisoner's third upload. Each
    leave-out voter is then one or two uploads, and none certifies the weakest stored direction;
    when the memory was only the broadcast's directions above 1/2 (the plain support test's rule),
    that direction was flattened and the LAM found no stored silhouette in what was left: the
    memory emptied (0 patterns in every seed, with and without the poisoner). The whole stored span
    is memory under leave-out voters (robust.memory_span), so all three stay, the fake does not
    enter."""
    from fedlam import metrics, privacy
    from fedlam.federation import Server

    xi = data.structured_archetypes()
    N = xi.shape[1]
    A = operators.pattern_operator(xi)
    assert np.linalg.eigvalsh(A)[-3] < 0.5                      # a stored direction below 1/2
    mech = privacy.GaussianMechanism(epsilon=11.4, delta=1e-5)
    ups = []
    for c in range(2):
        X, _ = data.sample_examples(xi, 200, 0.85, np.array([0.0, 0.5, 0.5]), rng=100 * seed + c)
        B, sig = mech.apply(operators.hebbian(X), 200, np.random.default_rng(1000 * seed + c))
        ups.append(Upload(0.1 * B + 0.9 * A, 200, 0.1, 1 - 0.85 ** 2, dp_sigma=sig))
    fake = fake_of(5, N)
    if with_poisoner:
        ups.append(poison_upload(fake, 200, 0.85))
    rr = Server(defense="support", defense_params={"groups": "leave-out"}).round(
        ups, np.random.default_rng(seed), broadcast=A)
    assert rr.patterns.shape[0] == 3
    assert np.all(metrics.magnetization(rr.patterns, xi) == 1.0)
    assert not attacks.fake_in_memory(rr.patterns, fake, xi)


def _colluders_round(factor, seed):
    """One round: six honest clients (N = 200, K = 4, M = 200, r = 0.8), under the Gaussian
    mechanism at ``factor`` x the mean's epsilon threshold (None: no privacy), and two poisoners
    sending the same fake, against the support defence with leave-two-out voters (s = 3)."""
    from fedlam import privacy
    from fedlam.federation import Server

    N, K, L, M, r = 200, 4, 6, 200, 0.8
    xi = data.random_archetypes(K, N, 3)
    fake = fake_of(5, N)
    mech = None if factor is None else privacy.GaussianMechanism(
        epsilon=factor * privacy.epsilon_threshold(r, 1 / K, N, M, 1e-5, L=L), delta=1e-5)
    ups = _private_uploads(xi, M, r, L, seed, mech) + [poison_upload(fake, M, r) for _ in range(2)]
    rr = Server(defense="support", defense_params={"groups": "leave-out", "s": 3}).round(
        ups, np.random.default_rng(0))
    has_fake = attacks.fake_in_memory(rr.patterns, fake, xi)
    exact = rr.patterns.shape[0] == K and bool(np.all(np.abs(rr.patterns.astype(float) @ xi.T.astype(float)).max(0) == N))
    return has_fake, exact


@pytest.mark.parametrize("factor", [None, 12, 6, 3])
def test_leave_two_out_voters_keep_two_colluders_out(factor):
    """s = 3 with leave-out voters (each the mean of all uploads but two): the two colluders are
    both missing from one voter, so their fake never has every vote, down to 3 x the mean's
    epsilon threshold. Until a direction's residual had to pass every voter itself, the fake was
    stored at 3 x in all three seeds: a direction mixing it into an archetype direction passed, and
    its residual (fake fraction 0.61) entered the supported basis although the voter without the
    colluders held it at 0.55 (robust._support_in_basis)."""
    for seed in range(3):
        has_fake, exact = _colluders_round(factor, seed)
        assert not has_fake, seed
        if factor is None or factor >= 6:
            assert exact, seed


@pytest.mark.xfail(strict=True, reason=(
    "measured 2026-11-28: at 3 x the mean's threshold the fake stays out but archetypes are lost "
    "(best overlaps [0.1, 0.17, 0.96, 0.96], nothing stored, [1.0, 0.06, 0.08, 0.03] in seeds 0-2): "
    "the 15 voters that leave out two honest clients hold the colluders' fake at 1/3 and certify only "
    "three of the four archetype dimensions, and a direction needs every voter"))
def test_leave_two_out_voters_keep_the_archetypes_next_to_two_colluders_near_the_threshold():
    assert all(_colluders_round(3, seed)[1] for seed in range(3))


def test_group_threshold_is_the_edge_of_a_mean_of_noise_uploads():
    """The threshold of a group of g uploads is the edge of the mean of their fresh parts: g
    uploads of uniform +-1 examples (no archetype) plus Gaussian privacy noise, 30 draws; the
    mean's largest eigenvalue sits at the edge minus about 1.2 Tracy-Widom scales (the mean of
    TW1 is -1.21), and no draw reaches the 4-scale threshold. One upload's threshold is higher."""
    N, M, g = 160, 200, 3
    rng = np.random.default_rng(0)
    for sig in (0.0, 3.0 / N):
        tops = []
        for _ in range(30):
            ups = []
            for _ in range(g):
                B = operators.hebbian(np.where(rng.random((M, N)) < 0.5, 1, -1).astype(np.int8))
                if sig:
                    Z = np.triu(rng.standard_normal((N, N)) * sig, 1)
                    B = B + Z + Z.T
                ups.append(Upload(B, M, 1.0, 1.0, dp_sigma=sig))
            tops.append(np.linalg.eigvalsh(sum(u.operator for u in ups) / g)[-1])
        edge, thr = robust.group_threshold(ups, N, 0.0), robust.group_threshold(ups, N, 4.0)
        tw = (thr - edge) / 4.0
        z = (np.mean(tops) - edge) / tw
        assert -3.0 < z < 1.0, (sig, z)
        assert max(tops) < thr
        assert thr < robust.upload_threshold(ups[0], N, 4.0)


def test_group_threshold_members():
    """A group of one is the upload's own threshold; members without fresh evidence are left out."""
    xi = data.random_archetypes(2, 60, 1)
    ups = honest_uploads(xi, 80, 0.8, 3, 0)
    assert robust.group_threshold(ups[:1], 60) == robust.upload_threshold(ups[0], 60)
    idle = Upload(ups[1].operator, 80, 0.0, 0.36)                    # w = 0: no fresh evidence
    assert robust.group_threshold([ups[0], idle], 60) == robust.upload_threshold(ups[0], 60)
    assert math.isnan(robust.group_threshold([idle], 60))
    assert robust.group_threshold(ups, 60) < robust.upload_threshold(ups[0], 60)


def test_groups_bad_params():
    with pytest.raises(ValueError, match=r"defense_params\['groups'\] must be >= s = 2"):
        robust.check_defense("support", {"groups": 1})
    for bad in (True, 2.0):
        with pytest.raises(TypeError, match=r"defense_params\['groups'\]"):
            robust.check_defense("support", {"groups": bad})
    with pytest.raises(ValueError, match=r"defense_params\['groups'\] must be None, an int or 'leave-out'"):
        robust.check_defense("support", {"groups": "2"})
    assert robust.check_defense("support", {"groups": "leave-out", "s": 3})[1]["groups"] == "leave-out"
    assert robust.check_defense("support", {"groups": 3, "s": 3})[1]["groups"] == 3
    assert robust.check_defense("support")[1]["groups"] is None


def test_groups_certify_under_privacy_what_single_uploads_cannot():
    """Example-level DP at 4 x the mean's epsilon threshold (N = 160, K = 3, six clients with M =
    200 at r = 0.85): one upload's noise hides the archetypes from its own test, so the support
    defence keeps at most one direction and recovers none; voting in two groups of three, each
    group's mean has sqrt(3) less noise and certifies them, and the defence keeps all three. A
    poisoner (a seventh upload, in group 0) still has one vote: its fake is not stored."""
    from fedlam import metrics
    from fedlam.federation import Server

    K, N, M, r, L = 3, 160, 200, 0.85, 6
    xi, mech = _private_setting(4)
    fake = fake_of(5, N)
    for seed in range(3):
        ups = _private_uploads(xi, M, r, L, seed, mech)
        alone = Server(defense="support").round(ups, np.random.default_rng(0))
        assert alone.result.k_hat <= 1 and not np.any(metrics.magnetization(alone.patterns, xi) >= 0.95)
        for extra in ([], [poison_upload(fake, M, r)]):
            res = Server(defense="support", defense_params={"groups": 2}).round(ups + extra, np.random.default_rng(0))
            assert res.result.k_hat == K, (seed, len(extra), res.result.k_hat)
            assert np.all(metrics.magnetization(res.patterns, xi) >= 0.95)
            assert metrics.spurious_count(res.patterns, xi) == 0
            assert not attacks.fake_in_memory(res.patterns, fake, xi)


def test_private_defended_federation_votes_in_groups():
    """One federation combining example-level DP (4 x the mean's epsilon threshold), the novelty
    weight rule, partial participation (half asked, 20 % dropouts), a poisoner and the support
    defence, 20 rounds: voting alone, no upload certifies anything and the memory ends empty;
    voting in two groups, all three archetypes are stored by the end, nothing spurious is ever
    stored and the poisoner's fake never is."""
    from fedlam import federation, privacy
    from fedlam.participation import Participation

    K, N, M, r, L, delta, T = 3, 160, 200, 0.85, 6, 1e-5, 20
    xi = data.random_archetypes(K, N, 7)
    pi_min = float(np.linalg.eigvalsh(xi.astype(float) @ xi.T.astype(float) / (K * N)).min())
    eps = 4 * privacy.epsilon_threshold(r, pi_min, N, M, delta, L=L)
    sched = data.static_mixture(T, L, K)
    poison = attacks.Poison(seed=3)
    specs = [federation.ClientSpec(r=r, M=M, mixture=sched[:, c]) for c in range(L)]
    specs.append(federation.ClientSpec(r=r, M=M, mixture=sched[:, 0], behaviour=poison))
    kw = dict(controller="novelty", privacy=privacy.GaussianMechanism(epsilon=eps, delta=delta),
              participation=Participation(fraction=0.5, min_clients=2, dropout=0.2), defense="support")
    alone = federation.run_federation(xi, specs, T, 11, **kw)
    grouped = federation.run_federation(xi, specs, T, 11, defense_params={"groups": 2}, **kw)
    assert not np.any(alone.magnetization[-1] >= 0.95)
    assert np.all(grouped.magnetization[-1] >= 0.95) and grouped.k_hat[-1] == K
    assert int(grouped.spurious.max()) == 0 and int(grouped.k_hat.max()) <= K
    assert not any(attacks.fake_in_memory(p, poison.fake(N), xi) for p in grouped.patterns)


def test_private_federation_with_a_poisoner_keeps_the_fake_out_with_leave_out_voters():
    """Example-level DP at 3 x the mean's epsilon threshold (N = 200, K = 4, six clients, M = 200,
    r = 0.8), the novelty rule and a poisoning seventh client, 5 rounds. The refresh acceptance
    (the default under privacy until 2026-11-28) stores the poisoner's fake in every round; the
    support defence with leave-one-out voters never does, and keeps the four archetypes at
    m >= 0.95 with K-hat never above 4; the default ("voted") is that defence's history."""
    from fedlam import federation, privacy

    N, K, L, M, r, T = 200, 4, 6, 200, 0.8, 5
    xi = data.random_archetypes(K, N, 3)
    pi = data.static_mixture(T, L, K)
    specs = [federation.ClientSpec(r=r, M=M, mixture=pi[:, c]) for c in range(L)]
    specs.append(federation.ClientSpec(M=M, kind="poison"))
    mech = privacy.GaussianMechanism(epsilon=3 * privacy.epsilon_threshold(r, 1 / K, N, M, 1e-5, L=L), delta=1e-5)
    refreshed = federation.run_federation(xi, specs, T, 0, controller="novelty", privacy=mech, acceptance="refresh")
    assert np.all(refreshed.spurious == 1)
    loo = federation.run_federation(xi, specs, T, 0, controller="novelty", privacy=mech, defense="support",
                                    defense_params={"groups": "leave-out"})
    assert np.all(loo.spurious == 0) and loo.k_hat.max() <= K
    assert np.all(loo.magnetization[-1] >= 0.95)
    default = federation.run_federation(xi, specs, T, 0, controller="novelty", privacy=mech)
    assert np.array_equal(default.k_hat, loo.k_hat)
    assert all(np.array_equal(a, b) for a, b in zip(default.patterns, loo.patterns, strict=True))


# ----------------------------------------------------------------------------------------
# many leave-out voters (cross-device): O(L) shortcuts
def test_shared_leave_out_threshold_bounds_every_voters_own():
    """Beyond LEAVE_OUT_EXACT leave-out voters share one threshold: the group threshold of every
    fresh upload at a voter's scale. It is at least each voter's own threshold (so it certifies no
    more than the exact test), and within 2 % of it at L = 80 heterogeneous uploads."""
    rng = np.random.default_rng(5)
    N, L = 200, 80
    op = np.eye(N) / N
    ups = [Upload(op, int(rng.integers(3, 12)), float(rng.uniform(0.3, 1.0)), float(rng.uniform(0.2, 0.6)),
                  dp_sigma=float(rng.uniform(0.0, 1e-3))) for _ in range(L)]
    ups[7] = Upload(op, 0, 1.0, 0.36)          # no fresh evidence: in no threshold
    own = [robust.upload_threshold(u, N, 4.0) for u in ups]
    parts = robust.voting_groups(L, robust.LEAVE_OUT, 2)
    shared = robust._shared_thresholds(ups, own, parts, N, 4.0)
    assert sorted(shared) == [L - 2, L - 1]     # the voter leaving out upload 7 has L - 1 fresh members
    for v in parts[::7]:
        fresh = [c for c in v if np.isfinite(own[c])]
        exact = robust.group_threshold([ups[c] for c in fresh], N)
        assert exact <= shared[len(fresh)] <= 1.02 * exact


def test_many_leave_out_voters_match_the_exact_test():
    """The shortcuts do not change the decisions: one voted round of 100 phones x 5 examples at
    N = 200 certifies the same directions and gives the same patterns as with every voter's own
    threshold and every pair intersected (LEAVE_OUT_EXACT raised above L)."""
    from unittest import mock

    from fedlam import federation as F

    xi = data.random_archetypes(3, 200, 4)
    L = 100
    specs = [F.ClientSpec(r=0.8, M=5, mixture=data.static_mixture(2, L, 3)[:, c]) for c in range(L)]
    h = F.run_federation(xi, specs, 2, 0, acceptance="voted")
    with mock.patch.object(robust, "LEAVE_OUT_EXACT", 10_000):
        exact = F.run_federation(xi, specs, 2, 0, acceptance="voted")
    assert np.array_equal(h.k_hat, exact.k_hat) and np.all(h.k_hat == 3)
    assert all(np.array_equal(a, b) for a, b in zip(h.patterns, exact.patterns, strict=True))
    assert np.all(h.magnetization[-1] >= 0.95) and np.all(h.spurious == 0)


def test_span_products_reuse_the_support_tests_passes_exactly():
    """The refresh reads a stored pattern's products from the support test's pass over [Q, span]
    (robust.SpanProducts) and the broadcast through its compression span M span^T: the same
    products to rounding, and the same refreshed patterns, as multiplying every operator again."""
    from fedlam import refresh

    rng = np.random.default_rng(3)
    N = 300
    xi = data.random_archetypes(4, N, rng)
    A = operators.pattern_operator(xi)
    ups = [Upload(0.5 * operators.hebbian(data.sample_examples(xi, 300, 0.8, np.ones(4) / 4, rng)[0]) + 0.5 * A,
                  300, 0.5, 1 - 0.8**2) for _ in range(3)]
    ra = robust.aggregate(ups, None, "support", {"groups": "leave-out", "s": 2}, broadcast=A)
    pr = ra.products
    assert isinstance(pr, robust.SpanProducts) and pr.span.shape == (N, 4) and sorted(pr.of_upload) == [0, 1, 2]
    assert pr.compression is not None
    P = np.hstack([xi.T.astype(np.float64), rng.standard_normal((N, 1))])    # 4 in the span, 1 outside
    _, inside = pr.in_span(P)
    assert inside.tolist() == [True] * 4 + [False]
    for c, u in enumerate(ups):
        direct = u.operator @ P
        assert np.abs(pr.times(c, P) - direct).max() <= 1e-12 * np.abs(direct).max()
    assert np.abs(pr.times(None, P) - A @ P).max() <= 1e-12 * np.abs(A @ P).max()
    voters = robust.voting_groups(3, robust.LEAVE_OUT, 2)
    stale = xi.copy()
    stale[0, :6] *= -1
    a = refresh.refresh_voted(ups, A, stale, voters)
    b = refresh.refresh_voted(ups, A, stale, voters, products=pr)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[1][0] == 6
    # products of other operators (a copy of an upload, another broadcast) are refused
    other = [Upload(ups[0].operator.copy(), 300, 0.5, 1 - 0.8**2), *ups[1:]]
    with pytest.raises(ValueError, match="products must be None or the SpanProducts"):
        refresh.refresh_voted(other, A, stale, voters, products=pr)
    with pytest.raises(ValueError, match="products must be None or the SpanProducts"):
        refresh.refresh_voted(ups, A.copy(), stale, voters, products=pr)


def test_broadcast_compression_only_for_an_operator_of_its_span():
    N = 200
    xi = data.random_archetypes(3, N, np.random.default_rng(0))
    A = operators.pattern_operator(xi)
    U, M = robust._span_and_compression(A)
    X = np.random.default_rng(1).standard_normal((N, 5))
    assert U.shape == (N, 3) and np.abs(U @ (M @ (U.T @ X)) - A @ X).max() < 1e-12
    B = A.copy()
    B[0, 1] += 1e-3                                 # not symmetric: no compression
    assert robust._span_and_compression(B)[1] is None
    B = A.copy()
    B[4, 5] = np.inf
    with pytest.raises(ValueError, match="broadcast"):
        robust.memory_span(B)


def test_voter_means_are_the_weighted_means_of_their_live_members():
    """robust.VoterMeans: a leave-out voter's 'total minus the left-out' equals the direct weighted
    mean of its live members; one member gives its own part; no live member or zero total weight
    gives None (no say)."""
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((7, 3)) for _ in range(5)]
    live = [True, True, False, True, True]
    w = np.array([0.1, 0.4, 0.2, 0.3, 0.0])
    vm = robust.VoterMeans(lambda c: parts[c], live, w)
    for members in robust.voting_groups(5, robust.LEAVE_OUT, 2):
        m = [c for c in members if live[c]]
        direct = sum(w[c] * parts[c] for c in m) / w[m].sum()
        assert np.allclose(vm.mean(members), direct, rtol=0, atol=1e-14)
    assert np.array_equal(vm.mean([4]), parts[4]) and vm.mean([4]) is not parts[4]
    assert vm.mean([2]) is None and vm.mean([2, 4, 4]) is None       # dead member; weight 0 only
    eq = robust.VoterMeans(lambda c: parts[c], [True] * 5, None, leave_out=False)
    assert np.allclose(eq.mean([0, 1, 3]), (parts[0] + parts[1] + parts[3]) / 3, rtol=0, atol=1e-14)


def test_stored_span_from_the_patterns_is_the_sketchs_span():
    """robust._span_and_compression with the stored patterns: the same span (projectors equal to
    1e-12) and the same action of the broadcast as the range finder's sketch, from one probe; a
    broadcast that is not their operator falls back to the sketch."""
    N = 300
    xi = data.random_archetypes(4, N, np.random.default_rng(2))
    A = operators.pattern_operator(xi)
    U0, M0 = robust._span_and_compression(A)
    U1, M1 = robust._span_and_compression(A, xi)
    assert U1.shape == U0.shape == (N, 4) and M0 is not None and M1 is not None
    assert np.abs(U1 @ U1.T - U0 @ U0.T).max() < 1e-12
    X = np.random.default_rng(3).standard_normal((N, 3))
    assert np.abs(U1 @ (M1 @ (U1.T @ X)) - A @ X).max() < 1e-12
    other = operators.pattern_operator(xi[:3])                  # not the operator of xi
    U2, _ = robust._span_and_compression(other, xi)
    U3, _ = robust._span_and_compression(other)
    assert np.array_equal(U2, U3) and U2.shape[1] == 3
