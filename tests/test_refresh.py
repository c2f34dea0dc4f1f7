"""Refreshing stored patterns from the fresh part of the mean (fedlam.refresh; the default
acceptance under example-level privacy)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from fedlam import data, operators, refresh


def _noisy(x, m, rng):
    """A copy of the +-1 pattern x with overlap m (exactly (1 - m) N / 2 sites flipped)."""
    out = x.copy()
    out[rng.choice(x.size, round((1 - m) * x.size / 2), replace=False)] *= -1
    return out


def _fresh(xi, strengths, sigma, rng):
    """sum_k s_k xi_k xi_k^T / N plus a symmetric Gaussian noise of entry std sigma."""
    N = xi.shape[1]
    F = (xi.T * np.asarray(strengths, dtype=float)) @ xi / N
    Z = rng.normal(0.0, sigma, (N, N))
    return F + (Z + Z.T) / np.sqrt(2)


def _echo_world(seed, xi_seed, strengths, c, N=300):
    """Three archetypes, archetype 0 stored at m = 0.9, and the mean ``F + c A`` of uploads that
    blend the broadcast A with share c into fresh evidence F of the given strengths."""
    rng = np.random.default_rng(seed)
    xi = data.random_archetypes(3, N, xi_seed)
    stored = np.vstack([_noisy(xi[0], 0.9, rng), xi[1], xi[2]])
    A = operators.pattern_operator(stored)
    return xi, stored, A, _fresh(xi, strengths, 0.002, rng) + c * A


def test_a_noisy_stored_version_is_replaced_by_the_archetype_the_fresh_data_hold():
    xi, stored, A, J = _echo_world(0, 1, [0.2, 0.2, 0.2], 0.7)
    c = 0.7
    out, changed = refresh.refresh_patterns(J, A, stored, c)
    assert np.array_equal(out, xi.astype(np.int8))
    assert changed.tolist() == [15, 0, 0]
    # without removing the echo (c = 0) the stored version's own weight keeps its errors
    kept, _ = refresh.refresh_patterns(J, A, stored, 0.0)
    assert np.array_equal(kept[0], stored[0])


def test_a_pattern_the_fresh_data_no_longer_hold_is_kept():
    """Retention: archetype 0 is stored (noisy) and absent from this round's fresh data."""
    xi, stored, A, J = _echo_world(1, 2, [0.0, 0.2, 0.2], 0.5)
    out, changed = refresh.refresh_patterns(J, A, stored, 0.5)
    assert np.array_equal(out, stored) and not changed.any()


def test_correlated_archetypes_are_refreshed_without_cross_talk():
    """Two archetypes with overlap 0.6 (a shared background), both stored with errors (m = 0.92),
    both in the fresh data, the second 5/3 as strong. Projected on the first stored pattern
    alone, the fresh mean is an even mix of the two archetypes (0.3 x 0.92 against
    0.5 x 0.55): on the sites where they differ its sign is noise, and nothing can be corrected;
    through the inverse Gram matrix of the stored patterns each column holds its own archetype
    and both are corrected."""
    rng = np.random.default_rng(2)
    N = 400
    base = data.random_archetypes(1, N, 3)[0]
    xi = np.vstack([base, _noisy(base, 0.6, rng)])
    stored = np.vstack([_noisy(xi[0], 0.92, rng), _noisy(xi[1], 0.92, rng)])
    A = operators.pattern_operator(stored)
    J = _fresh(xi, [0.3, 0.5], 0.001, rng) + 0.4 * A
    out, changed = refresh.refresh_patterns(J, A, stored, 0.4)
    assert np.array_equal(out, xi.astype(np.int8)) and changed.tolist() == [16, 16]
    # the cross-talk the Gram inverse removes: the plain projection of pattern 0 has almost no
    # margin where the two archetypes differ
    plain = np.abs((J - 0.4 * A) @ stored[0].astype(float))
    differ = xi[0] != xi[1]
    assert plain[differ].mean() < 0.1 * plain[~differ].mean()


def test_no_refresh_merges_two_stored_patterns():
    """Two noisy versions of one archetype stored side by side (m = 0.9 and 0.86): the fresh data
    along each show the archetype. Only the nearer version takes it; the other would become
    its copy and stays as it is."""
    rng = np.random.default_rng(3)
    N = 300
    xi = data.random_archetypes(2, N, 4)
    near = _noisy(xi[0], 0.9, rng)
    far = _noisy(xi[0], 0.86, rng)
    stored = np.vstack([near, far, xi[1]])
    A = operators.pattern_operator(stored)
    J = _fresh(xi, [0.3, 0.3], 0.001, rng) + 0.5 * A
    out, changed = refresh.refresh_patterns(J, A, stored, 0.5)
    assert np.array_equal(out[0], xi[0]) and np.array_equal(out[1], far) and changed.tolist() == [15, 0, 0]
    assert len({row.tobytes() for row in out}) == 3


def test_uncertain_signs_are_not_written():
    """A weak fresh spike under strong noise: the predicted number of wrong signs exceeds
    max_flips and nothing changes; a tolerance of 50 expected flips lets the sign through."""
    rng = np.random.default_rng(4)
    N = 300
    xi = data.random_archetypes(2, N, 5)
    stored = np.vstack([_noisy(xi[0], 0.9, rng), xi[1]])
    A = operators.pattern_operator(stored)
    J = _fresh(xi, [0.05, 0.05], 0.002, rng) + 0.5 * A
    out, changed = refresh.refresh_patterns(J, A, stored, 0.5)
    assert np.array_equal(out, stored) and not changed.any()
    _, loose = refresh.refresh_patterns(J, A, stored, 0.5, max_flips=50.0)
    assert loose[0] > 0


def test_edge_cases():
    N = 50
    A = np.zeros((N, N))
    out, changed = refresh.refresh_patterns(np.zeros((N, N)), A, np.zeros((0, N), dtype=np.int8), 0.0)
    assert out.shape == (0, N) and changed.shape == (0,)
    x = data.random_archetypes(1, N, 0)
    out, changed = refresh.refresh_patterns(np.zeros((N, N)), A, x, 0.0)   # a zero operator: nothing certain
    assert np.array_equal(out, x) and changed.tolist() == [0]


def test_bad_input():
    N = 40
    J = np.eye(N)
    x = data.random_archetypes(2, N, 0)
    with pytest.raises(ValueError, match="echo"):
        refresh.refresh_patterns(J, J, x, 1.5)
    with pytest.raises(ValueError, match="max_flips"):
        refresh.refresh_patterns(J, J, x, 0.5, max_flips=0.0)
    with pytest.raises(ValueError, match="broadcast must have shape"):
        refresh.refresh_patterns(J, np.eye(N + 1), x, 0.5)
    with pytest.raises(ValueError, match="patterns"):
        refresh.refresh_patterns(J, J, x[:, :-1], 0.5)
    with pytest.raises(ValueError, match="patterns"):
        refresh.refresh_patterns(J, J, 2 * x, 0.5)
    with pytest.raises(TypeError, match="J"):
        refresh.refresh_patterns(J.astype(int), J, x, 0.5)


def test_echo_weight():
    ups = [types.SimpleNamespace(weight=w) for w in (0.25, float("nan"), 1.0, 0.0)]
    assert refresh.echo_weight(ups) == pytest.approx((0.75 + 0 + 0 + 1) / 4)
    assert refresh.echo_weight(ups, np.array([0.5, 0.5, 0.0, 0.0])) == pytest.approx(0.375)
    with pytest.raises(ValueError, match="weights"):
        refresh.echo_weight(ups, np.ones(3) / 3)
    with pytest.raises(ValueError, match="uploads"):
        refresh.echo_weight([])


def _blend_uploads(ops, A, w=0.5):
    from fedlam.protocol import Upload

    return [Upload(w * op + (1 - w) * A, 200, w, 0.36) for op in ops]


def test_voted_refresh_needs_every_voter():
    """Four honest fresh operators holding archetype 0 (stored at m = 0.9) and a fifth upload, a
    rank-one near-copy of archetype 0 (m = 0.9, other bits). With the honest uploads alone the
    leave-one-out voters agree and the stored version becomes the archetype; with the copy, the
    voters that hold it see the copy's bits, the one that leaves it out does not, and the stored
    version stays. The plain refresh of the five (one voter) writes the copy into the memory."""
    from fedlam import robust

    rng = np.random.default_rng(6)
    N = 300
    xi = data.random_archetypes(2, N, 8)
    stored = np.vstack([_noisy(xi[0], 0.9, rng), xi[1]])
    A = operators.pattern_operator(stored)
    honest = [_fresh(xi, [0.2, 0.2], 0.001, rng) for _ in range(4)]
    copy = _noisy(xi[0], 0.9, rng)
    ups = _blend_uploads(honest, A)
    out, changed = refresh.refresh_voted(ups, A, stored, robust.voting_groups(4, "leave-out"))
    assert np.array_equal(out, xi.astype(np.int8)) and changed[0] == 15
    attacked = ups + _blend_uploads([operators.pattern_operator(copy[None])], A, w=1.0)
    out, changed = refresh.refresh_voted(attacked, A, stored, robust.voting_groups(5, "leave-out"))
    assert np.array_equal(out[0], stored[0]) and changed[0] == 0
    plain, _ = refresh.refresh_voted(attacked, A, stored, [list(range(5))])
    assert np.array_equal(plain[0], copy)


def test_voted_refresh_bad_input():
    N = 40
    x = data.random_archetypes(2, N, 0)
    A = operators.pattern_operator(x)
    ups = _blend_uploads([np.eye(N)], A)
    with pytest.raises(ValueError, match="voters"):
        refresh.refresh_voted(ups, A, x, [])
    with pytest.raises(ValueError, match="voters"):
        refresh.refresh_voted(ups, A, x, [[0, 1]])
    with pytest.raises(ValueError, match="uploads"):
        refresh.refresh_voted([], A, x, [[0]])
    with pytest.raises(ValueError, match=r"uploads\[0\].operator must have shape"):
        refresh.refresh_voted(_blend_uploads([np.eye(N + 1)], np.zeros((N + 1, N + 1))), A, x, [[0]])
    out, changed = refresh.refresh_voted(ups, A, x[:0], [[0]])
    assert out.shape == (0, N) and changed.shape == (0,)


# ----------------------------------------------------------------------------------------
# merging refined versions into the stored ones (refresh.merge_versions)
def test_a_precise_version_within_the_stored_ones_precision_takes_its_place():
    """A stored pattern admitted with precision 8.8 bits and a new version 7 bits off it with
    bound 0: the new one replaces it (precision 0), also when both were stored. Stored
    precisely (0.5 bits), the same new version is another pattern and both stay; a less precise
    new version never replaces a stored one; stored patterns kept keep their precision."""
    rng = np.random.default_rng(0)
    xi = data.random_archetypes(3, 200, 1)
    stale = _noisy(xi[2], 1 - 2 * 7 / 200, rng)                        # 7 bits off
    stored = np.stack([xi[0], xi[1], stale])
    pats = np.stack([xi[0], xi[1], stale, -xi[2]])
    out, prec = refresh.merge_versions(pats, np.zeros(4), stored, np.array([0.0, 0.2, 8.8]))
    assert np.array_equal(out, np.stack([xi[0], xi[1], -xi[2]])) and prec.tolist() == [0.0, 0.2, 0.0]
    # both versions stored, the clean one precisely: the stale one leaves
    both = np.vstack([stored, xi[2:]])
    out, prec = refresh.merge_versions(pats, np.zeros(4), both, np.array([0.0, 0.2, 8.8, 0.0]))
    assert np.array_equal(out, np.stack([xi[0], xi[1], -xi[2]])) and prec.tolist() == [0.0, 0.2, 0.0]
    # admitted precisely: a retired archetype beside a correlated new one -- both stay
    out, prec = refresh.merge_versions(pats, np.zeros(4), stored, np.array([0.0, 0.0, 0.5]))
    assert np.array_equal(out, pats) and prec.tolist() == [0.0, 0.0, 0.5, 0.0]
    # a new version less precise than the stored one and farther than its own bound: both stay
    out, prec = refresh.merge_versions(pats, np.array([0.0, 0.0, 0.0, 6.0]), stored, np.array([0.0, 0.0, 0.5]))
    assert np.array_equal(out, pats) and prec[-1] == 6.0
    # ... within its own bound: it is the version that leaves
    out, prec = refresh.merge_versions(pats, np.array([0.0, 0.0, 0.0, 9.0]), stored, np.array([0.0, 0.0, 0.5]))
    assert np.array_equal(out, pats[:3]) and prec.tolist() == [0.0, 0.0, 0.5]
    # nothing stored: every pattern with its own bound
    out, prec = refresh.merge_versions(pats, np.arange(4.0), stored[:0], np.zeros(0))
    assert np.array_equal(out, pats) and prec.tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize(("kw", "match"), [
    ({"bounds": np.zeros(3)}, "bounds must be"),
    ({"bounds": np.array([0.0, 0.0, np.nan, 0.0])}, "bounds must be"),
    ({"precision": np.array([0.0, -1.0, 0.0])}, "precision must be"),
    ({"precision": np.zeros(2)}, "precision must be"),
    ({"stored": np.ones((3, 199), dtype=np.int8)}, "stored must be"),
])
def test_merge_versions_refuses_bad_input(kw, match):
    xi = data.random_archetypes(4, 200, 1)
    args = {"patterns": xi, "bounds": np.zeros(4), "stored": xi[:3], "precision": np.zeros(3)}
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        refresh.merge_versions(**args)


def test_drift_book_preset_stores_no_duplicate_and_no_mixture_under_the_default():
    """The drift page's book preset (N = 200, K = L = 3, M = 100, 18 rounds), seed 3 of 3: before
    2026-12-02 both adaptive rules stored a sign mixture of the three archetypes in round 7 (a
    weak fourth spike, the stored and the fresh version of archetype 3 disagreeing, lowered the
    in-span floor of every candidate: lam.candidate_floors), and without it the clean version of
    archetype 3 beside the one stored from its weak spike 7 bits off (refresh.merge_versions).
    Now no spurious pattern in any round and every archetype exact at the end."""
    from fedlam import federation
    from fedlam.experiments import drift
    from fedlam.experiments._common import seed_pairs

    p = drift.make_params("book")
    a, b = seed_pairs(31, p.seeds)[2]
    sched = data.sequential_drift(p.T, p.L, p.K, width=p.width)
    xi = data.random_archetypes(p.K, p.N, a)
    specs = [federation.ClientSpec(r=p.r, M=p.M, mixture=sched[:, c]) for c in range(p.L)]
    h = federation.run_federation(xi, specs, p.T, b, controller="novelty", ema_alpha=p.ema_alpha)
    assert np.all(h.spurious == 0) and np.all(h.magnetization[-1] == 1.0) and h.k_hat[-1] == 3
    # the precision travels with the memory: the first round's patterns carry their bounds
    from fedlam.protocol import Upload

    ups = [Upload(operators.hebbian(np.repeat(xi, 30, axis=0)), 90, 1.0, 0.0)] * 3
    rr = federation.Server().round(ups, np.random.default_rng(0))
    assert rr.precision is not None and rr.precision.shape == (rr.patterns.shape[0],)
    with pytest.raises(ValueError, match="stored and precision must be given together"):
        federation.Server().round(ups, np.random.default_rng(0), stored=xi)


def test_server_round_checks_the_stored_patterns_and_their_precision():
    """Server.round's stored/precision: both or neither, and a precision per stored pattern."""
    from fedlam import federation
    from fedlam.protocol import Upload

    xi = data.random_archetypes(3, 200, 2)
    A = operators.pattern_operator(xi)
    ups = [Upload(0.5 * operators.hebbian(np.repeat(xi, 30, axis=0)) + 0.5 * A, 90, 0.5, 0.0)] * 3
    srv = federation.Server()
    with pytest.raises(ValueError, match="stored and precision must be given together"):
        srv.round(ups, np.random.default_rng(0), broadcast=A, precision=np.zeros(3))
    with pytest.raises(ValueError, match="precision must be"):
        srv.round(ups, np.random.default_rng(0), broadcast=A, stored=xi, precision=np.zeros(2))
    rr = srv.round(ups, np.random.default_rng(0), broadcast=A, stored=xi, precision=np.zeros(3))
    assert rr.precision is not None and rr.precision.shape == (rr.patterns.shape[0],)
    assert np.all(np.abs(rr.patterns.astype(float) @ xi.T.astype(float)).max(axis=0) == 200)
