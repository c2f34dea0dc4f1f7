"""Tests for fedlam.metrics: matched magnetization, the paper's max version, spurious count, FRO."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlam import data, metrics


def test_overlaps():
    xi = data.random_archetypes(3, 50, 0)
    O = metrics.overlaps(xi, xi)
    assert O.shape == (3, 3) and O.dtype == np.float64
    np.testing.assert_allclose(np.diag(O), 1.0)
    assert metrics.overlaps(xi[:0], xi).shape == (0, 3)
    with pytest.raises(ValueError, match="same N"):
        metrics.overlaps(xi, xi[:, :10])


def test_magnetization_permuted_and_signed():
    xi = data.random_archetypes(4, 100, 0)
    pat = np.stack([-xi[2], xi[0], xi[3], -xi[1]])
    m = metrics.magnetization(pat, xi)
    assert m.shape == (4,) and m.dtype == np.float64
    np.testing.assert_allclose(m, 1.0)


def test_magnetization_empty_and_partial():
    xi = data.random_archetypes(3, 64, 0)
    assert np.array_equal(metrics.magnetization(np.empty((0, 64), dtype=np.int8), xi), np.zeros(3))
    assert np.array_equal(metrics.magnetization_max(np.empty((0, 64), dtype=np.int8), xi), np.zeros(3))
    m = metrics.magnetization(xi[1:2], xi)
    assert m[1] == 1.0 and m[0] == 0.0 and m[2] == 0.0  # unmatched archetypes get 0


def _construct_greedy_trap(N=400, seed=0):
    """Two orthogonal archetypes and two patterns where greedy max-first matching fails.

    a2 = a1 flipped on a set D of N/2 bits (exact overlap 0). p1 = a1 outside D, and in D
    follows a1 on 110 bits and a2 on 90: overlaps (0.55, 0.45). p2 = a1 flipped on 50 bits
    of D and 50 bits outside D: overlaps (0.50, 0.00).
    """
    rng = np.random.default_rng(seed)
    a1 = data.random_archetypes(1, N, rng)[0]
    perm = rng.permutation(N)
    D, out = perm[: N // 2], perm[N // 2 :]
    a2 = a1.copy()
    a2[D] *= -1
    p1 = a1.copy()
    p1[D[110:]] *= -1
    p2 = a1.copy()
    p2[D[:50]] *= -1
    p2[out[:50]] *= -1
    return np.stack([a1, a2]), np.stack([p1, p2])


def test_matching_beats_greedy_max_overlap():
    arch, pat = _construct_greedy_trap()
    O = np.abs(metrics.overlaps(pat, arch))
    np.testing.assert_allclose(O, [[0.55, 0.45], [0.50, 0.0]], atol=1e-12)
    m = metrics.magnetization(pat, arch)
    np.testing.assert_allclose(m, [0.50, 0.45], atol=1e-12)  # p2 -> a1, p1 -> a2
    greedy_total = O[0, 0] + O[1, 1]  # largest entry first: p1 -> a1, then p2 -> a2
    assert np.isclose(m.sum() - greedy_total, 0.40)  # 0.95 vs 0.55
    # the paper's max version counts p1 for a1 and for nothing else it does not own
    np.testing.assert_allclose(metrics.magnetization_max(pat, arch), [0.55, 0.45], atol=1e-12)


def test_max_version_hides_missing_archetypes():
    xi = data.random_archetypes(3, 201, 1)
    mix = np.sign(xi.sum(axis=0)).astype(np.int8)  # symmetric 3-mixture (N odd: no zeros)
    mm = metrics.magnetization_max(mix[None, :], xi)
    m = metrics.magnetization(mix[None, :], xi)
    assert np.all(mm > 0.3)  # the paper's metric credits all three archetypes
    assert np.count_nonzero(m) == 1  # one pattern can stand for one archetype only


@settings(max_examples=30, deadline=None)
@given(K=st.integers(1, 4), Kh=st.integers(0, 5), seed=st.integers(0, 10_000))
def test_matching_is_optimal(K, Kh, seed):
    N = 16
    rng = np.random.default_rng(seed)
    arch = data.random_archetypes(K, N, rng)
    pat = data.random_archetypes(Kh, N, rng) if Kh else np.empty((0, N), dtype=np.int8)
    total = metrics.magnetization(pat, arch).sum()
    O = np.abs(metrics.overlaps(pat, arch))
    best = 0.0
    n = min(K, Kh)
    for rows in itertools.permutations(range(Kh), n):
        for cols in itertools.combinations(range(K), n):
            best = max(best, sum(O[r, c] for r, c in zip(rows, cols)))
    assert np.isclose(total, best)
    assert np.all(metrics.magnetization(pat, arch) <= metrics.magnetization_max(pat, arch) + 1e-12)


def test_spurious_count():
    xi = data.random_archetypes(3, 400, 2)
    junk = data.random_archetypes(1, 400, 99)
    pat = np.vstack([xi[0], xi[0], -xi[1], junk])  # duplicate and junk are spurious
    assert metrics.spurious_count(pat, xi) == 2
    assert metrics.spurious_count(xi, xi) == 0
    assert metrics.spurious_count(np.empty((0, 400), dtype=np.int8), xi) == 0
    # more patterns than archetypes: at most K can be genuine
    assert metrics.spurious_count(np.vstack([xi, xi]), xi) == 3
    with pytest.raises(ValueError, match="threshold"):
        metrics.spurious_count(xi, xi, threshold=0.0)


def test_match_object():
    xi = data.random_archetypes(3, 50, 0)
    res = metrics.match(xi[[2, 0]], xi)
    assert sorted(zip(res.pattern_index.tolist(), res.archetype_index.tolist())) == [(0, 2), (1, 0)]
    np.testing.assert_allclose(res.abs_overlap, 1.0)


def test_frobenius_error():
    J = np.eye(4) / 4
    assert metrics.frobenius_error(J, J) == 0.0
    assert np.isclose(metrics.frobenius_error(2 * J, J), 1.0)
    with pytest.raises(ValueError, match="J_star.*non-zero"):
        metrics.frobenius_error(J, np.zeros((4, 4)))
    with pytest.raises(ValueError, match="same shape"):
        metrics.frobenius_error(J, np.eye(3))
    with pytest.raises(ValueError, match="J.*finite"):
        metrics.frobenius_error(J * np.nan, J)


@pytest.mark.parametrize("fn", [metrics.magnetization, metrics.magnetization_max, metrics.spurious_count, metrics.match])
def test_bad_patterns(fn):
    xi = data.random_archetypes(2, 10, 0)
    with pytest.raises(ValueError, match="patterns"):
        fn(xi * 0, xi)
    with pytest.raises(ValueError, match="archetypes"):
        fn(xi, xi * 3)
    with pytest.raises(ValueError, match="same N"):
        fn(xi[:, :5], xi)
    with pytest.raises(ValueError, match="archetypes.*empty"):
        fn(xi, xi[:0])


def test_first_round():
    assert metrics.first_round(np.array([0, 0, 1, 1], dtype=bool), 1) == 1.0
    assert metrics.first_round(np.array([False, True, False, True]), 2) == 1.0
    assert metrics.first_round(np.array([True, False]), 0) == 0.0
    assert np.isnan(metrics.first_round(np.array([True, False, False]), 1))
    assert np.isnan(metrics.first_round(np.array([True]), 5))        # start past the end: no round
    with pytest.raises(ValueError, match="start"):
        metrics.first_round(np.array([True]), -1)
    with pytest.raises(ValueError, match="flags"):
        metrics.first_round(np.ones((2, 2), dtype=bool), 0)
