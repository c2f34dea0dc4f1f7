"""Tests of fedlam.baselines (k-FED, federated k-means, K selection, bytes, leakage) and of the
clustering side of fedlam.experiments.baselines (batches equal to the federation's, attack)."""

from __future__ import annotations

import numpy as np
import pytest

from fedlam import baselines as B
from fedlam import data, metrics, operators

# The must-hold setting: N = 320, K = 4, r = 0.75, five clients; we give each client
# M = 200 examples (about 50 per archetype), all from the uniform static mixture.
N0, K0, R0, L0, M0 = 320, 4, 0.75, 5, 200
SEEDS = range(6)


def _clients(seed: int, L: int = L0, M: int = M0, N: int = N0, K: int = K0, r: float = R0):
    gen = np.random.default_rng(seed)
    xi = data.random_archetypes(K, N, gen)
    ex = [data.sample_examples(xi, M, r, np.full(K, 1.0 / K), gen)[0] for _ in range(L)]
    return xi, ex


def _noise(gen: np.random.Generator, M: int, N: int) -> np.ndarray:
    return gen.choice(np.array([-1, 1], dtype=np.int8), size=(M, N))


# ---------------------------------------------------------------------------------------
# must hold: the baselines are implemented well, not handicapped
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_kfed_recovers_static_archetypes_with_true_k(seed):
    xi, ex = _clients(seed)
    P = B.kfed(ex, K0, rng=seed)
    assert P.shape == (K0, N0) and P.dtype == np.int8
    m = metrics.magnetization(P, xi)
    assert m.min() >= 0.95, m
    assert metrics.spurious_count(P, xi) == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_federated_kmeans_recovers_static_archetypes_with_true_k(seed):
    xi, ex = _clients(seed)
    P = B.federated_kmeans(ex, K0, rng=seed, rounds=10)
    assert P.shape == (K0, N0) and P.dtype == np.int8
    assert metrics.magnetization(P, xi).min() >= 0.95


def test_sign_of_a_cluster_mean_matches_the_majority_vote_theory():
    """With the true K the recovered pattern of archetype mu is the bitwise majority of the
    ~M L / K examples of mu, so its overlap has the closed form 1 - 2 P(majority wrong); at
    r = 0.75 and ~250 examples that is 1 to 1e-15. A lower measured value would mean the
    clustering mixed examples of different archetypes."""
    from scipy.stats import binom

    n = L0 * M0 // K0
    p_flip = (1 - R0) / 2
    p_wrong = binom.sf(n // 2, n, p_flip)
    assert 1 - 2 * p_wrong > 1 - 1e-12
    xi, ex = _clients(11)
    for P in (B.kfed(ex, K0, 11), B.federated_kmeans(ex, K0, 11)):
        assert np.all(metrics.magnetization(P, xi) == 1.0)


def test_select_k_finds_true_k_on_pooled_centroids():
    for seed in (0, 1, 2):
        xi, ex = _clients(seed)
        up = B.local_centroids(ex, 10, rng=seed)
        assert up.k_local == (10,) * L0
        sel = B.select_k(up.pooled, rng=seed, k_max=10)
        assert sel.k == K0, sel.scores
        assert sel.ks[0] == 2 and sel.ks[-1] == 10
        assert np.nanargmax(sel.scores) == K0 - 2


# ---------------------------------------------------------------------------------------
# determinism
# ---------------------------------------------------------------------------------------
def test_same_seed_same_patterns():
    xi, ex = _clients(3)
    np.testing.assert_array_equal(B.kfed(ex, K0, 7), B.kfed(ex, K0, 7))
    np.testing.assert_array_equal(B.kfed(ex, K0, 7), B.kfed(ex, K0, np.random.default_rng(7)))
    np.testing.assert_array_equal(B.federated_kmeans(ex, K0, 7), B.federated_kmeans(ex, K0, 7))
    up1, up2 = B.local_centroids(ex, 8, 5), B.local_centroids(ex, 8, 5)
    for a, b in zip(up1.centroids, up2.centroids):
        np.testing.assert_array_equal(a, b)
    s1, s2 = B.select_k(up1.pooled, 5, 8), B.select_k(up2.pooled, 5, 8)
    assert s1.k == s2.k
    np.testing.assert_array_equal(s1.scores, s2.scores)


# ---------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [B.kfed, B.federated_kmeans], ids=["kfed", "fedkmeans"])
def test_bad_input_is_named(fn):
    xi, ex = _clients(0, L=2, M=20, N=30, K=2)
    bad = ex[1].copy()
    bad[0, 0] = 0
    with pytest.raises(ValueError, match=r"client_examples\[1\].*-1 and \+1"):
        fn([ex[0], bad], 2, 0)
    with pytest.raises(TypeError, match=r"client_examples\[0\].*dtype"):
        fn([ex[0] > 0, ex[1]], 2, 0)
    with pytest.raises(ValueError, match=r"client_examples\[1\].*N = 30"):
        fn([ex[0], ex[1][:, :20]], 2, 0)
    with pytest.raises(ValueError, match=r"client_examples\[0\].*2-dimensional"):
        fn([ex[0][0], ex[1]], 2, 0)
    with pytest.raises(ValueError, match="client_examples.*empty list"):
        fn([], 2, 0)
    with pytest.raises(TypeError, match="client_examples.*list"):
        fn(np.stack(ex), 2, 0)
    with pytest.raises(ValueError, match="k must be >= 1"):
        fn(ex, 0, 0)
    with pytest.raises(TypeError, match="k must be an int"):
        fn(ex, 2.0, 0)
    with pytest.raises(ValueError, match=r"k must be <= the number of examples.*\(40\)"):
        fn(ex, 41, 0)
    with pytest.raises(TypeError, match="rng"):
        fn(ex, 2, "seed")


def test_bad_rounds_and_k_local_are_named():
    xi, ex = _clients(0, L=2, M=20, N=30, K=2)
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        B.federated_kmeans(ex, 2, 0, rounds=0)
    with pytest.raises(TypeError, match="rounds must be an int"):
        B.federated_kmeans(ex, 2, 0, rounds=2.5)
    with pytest.raises(ValueError, match="k_local must be >= 1"):
        B.kfed(ex, 2, 0, k_local=0)
    with pytest.raises(ValueError, match="k_local must have one entry per client"):
        B.kfed(ex, 2, 0, k_local=[2])
    # one centroid per client cannot give three centres
    with pytest.raises(ValueError, match="k_local is too small.*2 centroids"):
        B.kfed(ex, 3, 0, k_local=1)
    with pytest.raises(ValueError, match="init must be"):
        B.federated_kmeans_fit(ex, 2, 0, init=np.zeros((3, 30)))
    with pytest.raises(ValueError, match="init must be"):
        B.federated_kmeans_fit(ex, 2, 0, init=(np.zeros((2, 30), dtype=np.int64), np.zeros(2, dtype=np.int64)))
    with pytest.raises(ValueError, match="k_max must be >= 2"):
        B.select_k(np.eye(5), 0, k_max=1)
    with pytest.raises(ValueError, match="at least 3 distinct"):
        B.select_k(np.ones((6, 4)), 0)
    with pytest.raises(ValueError, match="method must be one of"):
        B.upload_bytes("zip", 10, 2)


# ---------------------------------------------------------------------------------------
# edge cases: empty clients, too few examples, a pure-noise client
# ---------------------------------------------------------------------------------------
def test_clients_without_examples_send_nothing_and_do_not_hurt():
    xi, ex = _clients(4, L=3)
    empty = np.empty((0, N0), dtype=np.int8)
    clients = [empty, ex[0], empty, ex[1], ex[2]]
    fit = B.kfed_fit(clients, K0, 4)
    assert fit.upload.k_local == (0, K0, 0, K0, K0)
    assert fit.upload.centroids[0].shape == (0, N0)
    assert fit.start_client in (1, 3, 4)
    assert metrics.magnetization(fit.patterns, xi).min() >= 0.95
    fk = B.federated_kmeans_fit(clients, K0, 4)
    assert metrics.magnetization(fk.patterns, xi).min() >= 0.95
    assert fk.first_round_means[0].shape == (0, N0)
    with pytest.raises(ValueError, match=r"k must be <= the number of examples.*\(0\)"):
        B.kfed([empty, empty], 1, 0)


def test_fewer_examples_than_k_local_sends_the_examples():
    xi = data.random_archetypes(3, 50, 0)
    ex, _ = data.sample_examples(xi, 3, 0.8, np.full(3, 1 / 3), 1)
    dup = np.concatenate([ex, ex[:1]])  # 3 distinct rows, 4 examples
    up = B.local_centroids([dup], 5, 0)
    assert up.k_local == (3,)
    np.testing.assert_array_equal(up.centroids[0], ex.astype(np.float32))  # first-seen order
    np.testing.assert_array_equal(up.counts[0], [2, 1, 1])
    # these centroids are the examples themselves: everything leaks
    assert B.leaked_fraction(dup, B.sign_patterns(up.centroids[0])) == 1.0


def test_pure_noise_client_breaks_kfed_only_when_it_seeds_the_server():
    """k-FED's server seeding takes one client's centroids as they are. A pure-noise client's
    centroids (means of random ±1 vectors) sit near the origin, roughly equidistant from every
    archetype, so when it is drawn as the start client Lloyd on the centroids merges archetypes;
    with an honest start the noise centroids just join the nearest archetype and the signs
    survive. Federated k-means weights by counts and is unaffected."""
    ok_start, bad_start = 0, 0
    for seed in range(12):
        gen = np.random.default_rng(seed)
        xi = data.random_archetypes(K0, N0, gen)
        ex = [data.sample_examples(xi, M0, R0, np.full(K0, 0.25), gen)[0] for _ in range(4)]
        ex.append(_noise(gen, M0, N0))
        fit = B.kfed_fit(ex, K0, seed)
        m = metrics.magnetization(fit.patterns, xi)
        if fit.start_client == 4:
            bad_start += 1
            assert m.min() < 0.5, m  # at least one archetype lost
        else:
            ok_start += 1
            assert m.min() >= 0.95, m
        assert metrics.magnetization(B.federated_kmeans(ex, K0, seed), xi).min() >= 0.95
    assert ok_start > 0 and bad_start > 0  # both branches exercised


def test_kfed_server_is_a_lloyd_fixed_point_on_the_centroids():
    xi, ex = _clients(5)
    up = B.local_centroids(ex, 6, 5)
    C = up.pooled
    centres = B.kfed_server(up, K0, 5)
    d = ((C[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
    lab = d.argmin(axis=1)
    for j in range(K0):
        np.testing.assert_allclose(centres[j], C[lab == j].mean(axis=0), atol=1e-12)


def test_farthest_point_seeding_and_extension():
    C = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 0.0], [0.0, 3.0], [5.0, 0.2]])
    owners = np.array([0, 0, 1, 1, 2])
    seeds, z0 = B._farthest_point_seeds(C, owners, 3, np.random.default_rng(0))
    # the start client's centroids come first, then the farthest remaining one
    assert set(seeds[: np.count_nonzero(owners == z0)].tolist()) <= set(np.flatnonzero(owners == z0).tolist())
    assert len(set(seeds.tolist())) == 3
    ext = B.extend_centroids(C[:1], C[1:], 2)
    np.testing.assert_array_equal(ext, C[[0, 4, 3]])  # (5, 0.2) is farthest, then (0, 3)
    with pytest.raises(ValueError, match="n_new"):
        B.extend_centroids(C[:1], C[1:], 5)


def test_warm_start_keeps_a_centroid_without_examples():
    xi, ex = _clients(6, L=2, K=2, N=100, M=60)
    sums = np.vstack([xi[0], xi[1], -xi[0]]).astype(np.int64)  # third centroid far from all data
    fit = B.federated_kmeans_fit(ex, 3, 0, rounds=3, init=(sums, np.ones(3, dtype=np.int64)))
    np.testing.assert_array_equal(fit.centroids[2], -xi[0])
    assert fit.counts[2] == 0 and fit.sizes[2] == 1 and fit.init_upload is None
    # the kept centroids are exact means of the examples assigned to them
    allx = np.concatenate(ex).astype(np.int64)
    for j in range(2):
        assert fit.sizes[j] == fit.counts[j]
    assert int(fit.sizes[:2].sum()) == allx.shape[0]
    # growing k keeps the old centroids and adds uploaded ones
    up = B.local_centroids(ex, 2, 0)
    S, n = B.grow_centroids((fit.sums[:2], fit.sizes[:2]), up, 1)
    assert S.shape == (3, 100) and np.array_equal(S[:2], fit.sums[:2])


def test_exact_assignment_breaks_ties_to_the_lowest_index():
    x = np.array([[1, 1, -1, -1]], dtype=np.int8)
    # x is equidistant from (1, 1, 1, -1) and (1, 1, -1, 1); the second has a larger count
    S = np.array([[3, 3, 3, -3], [5, 5, -5, 5]], dtype=np.int64)
    n = np.array([3, 5], dtype=np.int64)
    assert B._assign_exact(x, S, n).tolist() == [0]
    assert B._assign_exact(x, S[::-1], n[::-1]).tolist() == [0]
    # and a strict winner wins whatever its index
    S2 = np.array([[3, 3, 3, 3], [1, 1, -1, -1]], dtype=np.int64)
    assert B._assign_exact(x, S2, np.array([3, 1])).tolist() == [1]


# ---------------------------------------------------------------------------------------
# bytes and leakage
# ---------------------------------------------------------------------------------------
def test_upload_bytes_closed_forms():
    assert B.upload_bytes("hebbian", 320) == 320 * 321 // 2 * 4
    assert B.upload_bytes("kfed", 320, 4) == 4 * 4 * 320
    assert B.upload_bytes("fedkmeans_round", 320, 4) == 4 * 4 * 321
    assert B.upload_bytes("fedkmeans_init", 320, 4) == 4 * 4 * 321
    assert B.upload_bytes("raw", 320, M=200) == 200 * 320 // 8
    assert B.upload_bytes("raw", 3, M=3) == 2  # 9 bits round up
    # the ratio the comparison rests on: (N + 1) / (2 k)
    assert B.upload_bytes("hebbian", 320) / B.upload_bytes("kfed", 320, 4) == pytest.approx(321 / 8)


def test_leaked_fraction_counts_within_tolerance_and_sign():
    gen = np.random.default_rng(0)
    ex = gen.choice(np.array([-1, 1], dtype=np.int8), size=(4, 40))
    rev = ex[:2].copy()
    rev[0, :3] *= -1  # 3 bits away
    rev[1] *= -1  # the negative of example 1
    assert B.leaked_fraction(ex, rev, 0) == 0.25
    assert B.leaked_fraction(ex, rev, 3) == 0.5
    assert B.leaked_fraction(ex, np.empty((0, 40), dtype=np.int8)) == 0.0
    assert B.leaked_fraction(np.empty((0, 40), dtype=np.int8), rev) == 0.0
    with pytest.raises(ValueError, match="same N"):
        B.leaked_fraction(ex, rev[:, :10])


def test_sign_patterns_ties_go_to_plus_one():
    C = np.array([[0.0, -0.0, -1e-300, 2.0]])
    np.testing.assert_array_equal(B.sign_patterns(C), [[1, 1, -1, 1]])
    with pytest.raises(ValueError, match="finite"):
        B.sign_patterns(np.array([[np.nan]]))


# ---------------------------------------------------------------------------------------
# the comparison's data path: the federation's own batches
# ---------------------------------------------------------------------------------------
def test_client_batches_equal_the_federations_private_batches():
    from fedlam import controller as ctl
    from fedlam import federation
    from fedlam.experiments import baselines as EB

    xi = data.random_archetypes(3, 40, 1)
    T = 4
    sched = data.sequential_drift(T, 2, 3)
    specs = [federation.ClientSpec(r=0.8, M=np.array([5, 0, 7, 3]), mixture=sched[:, 0]),
             federation.ClientSpec(r=0.7, M=6, mixture=sched[:, 1]),
             federation.ClientSpec(r=None, M=4, kind="noise"),
             federation.ClientSpec(M=5, kind="poison")]
    seed = 2024
    got = EB.client_batches(xi, specs, T, seed)
    streams = np.random.default_rng(seed).spawn(len(specs) + 1)
    # the federation's own clients, built exactly as run_federation builds them
    clients = [federation.Client(s.make_source(xi, T), ctl.make_controller("paper"), streams[c], kind=s.kind,
                                 N=xi.shape[1]) for c, s in enumerate(specs)]
    for t in range(T):
        for c, cl in enumerate(clients):
            cl.observe(t)
            ex = cl._Client__examples  # test-only look at the private batch
            if specs[c].kind == "poison":
                op = cl.upload(None).operator
                fake = got.fakes[c]
                np.testing.assert_allclose(op, operators.pattern_operator(fake))
                np.testing.assert_array_equal(got.examples[t][c], np.repeat(fake, specs[c].batch_sizes(T)[t], 0))
            else:
                np.testing.assert_array_equal(got.examples[t][c], ex)
                if specs[c].kind == "honest":
                    np.testing.assert_array_equal(np.bincount(got.labels[t][c], minlength=3), cl.label_counts(3))
    # and the whole federation consumes nothing else from the client streams: same history
    h1 = federation.run_federation(xi, specs, T, seed)
    h2 = federation.run_federation(xi, specs, T, seed)
    np.testing.assert_array_equal(h1.magnetization, h2.magnetization)


def test_range_sign_attack_recovers_a_small_batch():
    from fedlam.experiments import baselines as EB

    xi = data.random_archetypes(2, 200, 3)
    ex, _ = data.sample_examples(xi, 8, 0.6, np.array([0.5, 0.5]), 4)
    cand = EB.range_sign_attack(operators.hebbian(ex), 5, starts=300)
    assert B.leaked_fraction(ex, cand, 0) == 1.0
    # many examples: the range is most of the space and the attack finds none of them
    ex2, _ = data.sample_examples(xi, 150, 0.6, np.array([0.5, 0.5]), 4)
    cand2 = EB.range_sign_attack(operators.hebbian(ex2), 5, starts=300)
    assert B.leaked_fraction(ex2, cand2, 0) == 0.0


def test_experiment_with_clustering_methods_is_deterministic_and_consistent():
    import json

    from fedlam.experiments import baselines as EB

    p = EB.BaselinesParams(scenarios=("static", "poison"), methods=EB.ALL_METHODS, N=40, T=4, M=30, seeds=1,
                           k_max=5, attack_starts=50, leak_Ms=(4, 30))
    a, b = EB.run(p, 3), EB.run(p, 3)
    da, db = a.to_dict(), b.to_dict()
    assert da == db and "wall_time" not in da
    json.dumps(a.to_dict(include_timings=True), allow_nan=False)
    i = {m: j for j, m in enumerate(p.methods)}
    for s in p.scenarios:
        assert a.magnetization[s].shape == (1, 8, 4, 3)
        assert a.spurious[s].shape == a.k_used[s].shape == a.bytes_sent[s].shape == (1, 8, 4)
        assert a.leak[s].shape == (1, 8, 2) and a.wall_time[s].shape == (1, 8)
        assert np.all(a.bytes_sent[s][:, i["federated"]] == B.upload_bytes("hebbian", 40))
        assert np.all(a.bytes_sent[s][:, i["local"]] == 0)
        assert np.all(a.leak[s][:, i["oracle"]] == 1.0)
    # the poisoner holds one distinct pattern: it sends one centroid; honest clients send k' = K
    assert np.allclose(a.bytes_sent["poison"][:, i["kfed"]], (3 * 4 * 3 * 40 + 4 * 40) / 4)
    # a client with M <= k_max distinct examples sends them all
    assert a.leakage["centroids_kmax"][0, 0] == 1.0


def test_runs_over_scenario_subsets_combine_into_one_run():
    import dataclasses

    from fedlam.experiments import baselines as EB

    p = EB.BaselinesParams(scenarios=("static", "noise"), methods=("federated", "kfed", "fedkmeans_auto"), N=40,
                           T=4, M=30, seeds=1, k_max=5, attack_starts=50, leak_Ms=(4, 30))
    whole = EB.run(p, 8)
    parts = [EB.run(dataclasses.replace(p, scenarios=(s,)), 8, leakage=False) for s in p.scenarios]
    joined = EB.combine(parts, leakage=EB.run_leakage(p, 8))
    assert joined.to_dict() == whole.to_dict()
    with pytest.raises(ValueError, match="repeats"):
        EB.combine([parts[0], parts[0]])
    with pytest.raises(ValueError, match="other parameters"):
        EB.combine([parts[0], EB.run(dataclasses.replace(p, scenarios=("noise",), M=20), 8, leakage=False)])
    with pytest.raises(TypeError, match="parts"):
        EB.combine(parts[0])
