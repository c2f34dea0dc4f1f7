"""Tests for fedlam.operators: Hebbian kernels, the exact E[J], aggregation, blending."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedlam import data, operators as ops, rmt

Z = 5.0  # standard errors allowed in statistical checks


# ---------------------------------------------------------------- hebbian
def test_hebbian_exact_and_symmetric():
    ex, _ = data.sample_examples(data.random_archetypes(2, 50, 0), 300, 0.6, np.array([0.5, 0.5]), 1)
    J = ops.hebbian(ex)
    M, N = ex.shape
    assert J.shape == (N, N) and J.dtype == np.float64
    ref = (ex.astype(np.int64).T @ ex.astype(np.int64)).astype(np.float64) / (N * M)
    assert np.array_equal(J, ref)  # float32 product of +-1 is exact
    assert np.array_equal(J, J.T)
    assert np.all(np.diag(J) == 1.0 / N)


@settings(max_examples=25, deadline=None)
@given(hnp.arrays(np.int8, hnp.array_shapes(min_dims=2, max_dims=2, min_side=2, max_side=12), elements=st.sampled_from([-1, 1])))
def test_hebbian_properties(ex):
    J = ops.hebbian(ex)
    M, N = ex.shape
    assert np.array_equal(J, J.T)
    np.testing.assert_allclose(np.diag(J), 1.0 / N)
    assert np.linalg.eigvalsh(J).min() > -1e-12  # PSD
    np.testing.assert_allclose(np.trace(J), 1.0)


def test_hebbian_accepts_float_pm1():
    ex = np.array([[1.0, -1.0, 1.0]])
    np.testing.assert_allclose(ops.hebbian(ex), np.outer(ex[0], ex[0]) / 3)


@pytest.mark.parametrize(
    "ex,exc,match",
    [
        (np.empty((0, 5), dtype=np.int8), ValueError, "examples.*empty batch"),
        (np.ones(5, dtype=np.int8), ValueError, "examples.*2-dimensional"),
        (np.zeros((3, 5), dtype=np.int8), ValueError, "examples.*-1 and \\+1"),
        (np.ones((3, 1), dtype=np.int8), ValueError, "examples.*N >= 2"),
        (np.ones((3, 5), dtype=bool), TypeError, "examples"),
        ([[1, -1]], TypeError, "examples"),
    ],
)
def test_hebbian_bad(ex, exc, match):
    with pytest.raises(exc, match=match):
        ops.hebbian(ex)


# ---------------------------------------------------------------- expected operator
def test_expected_operator_exact_enumeration():
    """E[J] against the exact average over every flip pattern (N = 6, K = 2)."""
    N, r = 6, 0.4
    xi = data.random_archetypes(2, N, 3)
    pi = np.array([0.3, 0.7])
    keep = (1 + r) / 2
    E = np.zeros((N, N))
    for mu in range(2):
        for flips in itertools.product([0, 1], repeat=N):
            f = np.array(flips)
            prob = np.prod(np.where(f == 1, 1 - keep, keep))
            eta = xi[mu] * (1 - 2 * f)
            E += pi[mu] * prob * np.outer(eta, eta)
    np.testing.assert_allclose(ops.expected_operator(xi, r, pi), E / N, atol=1e-14)


def test_expected_NJ_has_factor_N_by_simulation():
    """u^T (N J) u against the corrected E[N J] (with the factor N), CLT tolerance.

    ``u^T (N J) u = (1/M) sum_a s_a`` with i.i.d. ``s_a = (eta_a . u)^2``; its standard
    error is the sample sd of s over sqrt(M). The paper's E[N J] (no factor N) is
    rejected by the same statistic.
    """
    K, N, M, r = 3, 200, 2000, 0.5
    xi = data.random_archetypes(K, N, 0)
    pi = np.array([0.5, 0.3, 0.2])
    ex, _ = data.sample_examples(xi, M, r, pi, 1)
    u = xi[0] / np.sqrt(N)
    s = (ex @ u) ** 2
    stat, se = s.mean(), s.std(ddof=1) / np.sqrt(M)
    J = ops.hebbian(ex)
    assert np.isclose(stat, u @ (N * J) @ u)
    predicted = u @ (N * ops.expected_operator(xi, r, pi)) @ u
    # closed form for (near-)orthogonal archetypes: (1 - r^2) + N r^2 pi_0 (+ cross terms)
    ov = xi.astype(float) @ xi[0] / N
    assert np.isclose(predicted, (1 - r**2) + N * r**2 * np.sum(pi * ov**2))
    assert abs(stat - predicted) < Z * se
    paper = (1 - r**2) + r**2 * np.sum(pi * ov**2)
    assert abs(stat - paper) > 4 * Z * se  # rejected at 20 standard errors (observed ~40)
    # and the spike strength of the corrected model
    assert np.isclose((predicted - (1 - r**2)) / (1 - r**2), rmt.spike_strength(r, pi[0], N), rtol=0.05)


def test_expected_operator_bad():
    xi = data.random_archetypes(2, 10, 0)
    with pytest.raises(ValueError, match="pi"):
        ops.expected_operator(xi, 0.5, np.array([0.5, 0.4]))
    with pytest.raises(ValueError, match="r"):
        ops.expected_operator(xi, 1.2, np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="archetypes"):
        ops.expected_operator(xi * 0, 0.5, np.array([0.5, 0.5]))


# ---------------------------------------------------------------- pattern kernels
def test_pattern_operator():
    xi = data.random_archetypes(3, 20, 0)
    P = ops.pattern_operator(xi)
    np.testing.assert_allclose(P, xi.T.astype(float) @ xi / 20)
    assert np.array_equal(ops.pattern_operator(np.empty((0, 20), dtype=np.int8)), np.zeros((20, 20)))
    with pytest.raises(ValueError, match="patterns"):
        ops.pattern_operator(np.ones((2, 1), dtype=np.int8))


def test_pseudo_inverse_kernel_is_projector():
    xi = data.random_archetypes(4, 30, 1)
    P = ops.pseudo_inverse_kernel(xi)
    np.testing.assert_allclose(P @ P, P, atol=1e-12)
    np.testing.assert_allclose(P, P.T, atol=0)
    np.testing.assert_allclose(P @ xi.T, xi.T, atol=1e-12)
    np.testing.assert_allclose(np.trace(P), 4, atol=1e-12)
    # duplicates: projector onto the span (rank 4), not an error
    P2 = ops.pseudo_inverse_kernel(np.vstack([xi, xi[:1]]))
    np.testing.assert_allclose(P2, P, atol=1e-10)
    assert np.array_equal(ops.pseudo_inverse_kernel(np.empty((0, 30), dtype=np.int8)), np.zeros((30, 30)))


# ---------------------------------------------------------------- aggregate and blend
def _ops(L=3, N=8, seed=0):
    xi = data.random_archetypes(2, N, seed)
    return [ops.hebbian(data.sample_examples(xi, 20, 0.5, np.array([0.5, 0.5]), seed + c)[0]) for c in range(L)]


def test_aggregate_mean_and_weighted():
    mats = _ops()
    np.testing.assert_allclose(ops.aggregate(mats), np.mean(mats, axis=0), atol=1e-15)
    np.testing.assert_allclose(ops.aggregate(np.stack(mats)), np.mean(mats, axis=0), atol=1e-15)
    w = np.array([0.5, 0.5, 0.0])
    np.testing.assert_allclose(ops.aggregate(mats, w), (mats[0] + mats[1]) / 2, atol=1e-15)


@pytest.mark.parametrize(
    "weights,match",
    [(np.array([0.5, 0.6, -0.1]), "weights.*non-negative"), (np.array([0.5, 0.4, 0.0]), "weights.*sum to 1"), (np.array([0.5, 0.5]), "weights.*length 3")],
)
def test_aggregate_bad_weights(weights, match):
    with pytest.raises(ValueError, match=match):
        ops.aggregate(_ops(), weights)


def test_aggregate_bad_operators():
    mats = _ops()
    bad = mats[0].copy()
    bad[0, 1] += 1.0
    with pytest.raises(ValueError, match=r"operators\[1\].*symmetric"):
        ops.aggregate([mats[0], bad])
    nan = mats[0].copy()
    nan[2, 2] = np.nan
    with pytest.raises(ValueError, match=r"operators\[0\].*finite"):
        ops.aggregate([nan])
    with pytest.raises(ValueError, match="same shape"):
        ops.aggregate([mats[0], np.eye(3)])
    with pytest.raises(ValueError, match="at least one"):
        ops.aggregate([])
    with pytest.raises(ValueError, match="operators"):
        ops.aggregate(np.eye(3))
    with pytest.raises(TypeError, match=r"operators\[0\]"):
        ops.aggregate([np.eye(3, dtype=int)])


def test_blend():
    a, b = _ops(L=2)
    np.testing.assert_array_equal(ops.blend(a, b, 1.0), a)
    np.testing.assert_array_equal(ops.blend(a, b, 0.0), b)
    np.testing.assert_allclose(ops.blend(a, b, 0.25), 0.25 * a + 0.75 * b)
    with pytest.raises(ValueError, match="w"):
        ops.blend(a, b, 1.5)
    with pytest.raises(ValueError, match="local and server"):
        ops.blend(a, np.eye(3), 0.5)
    with pytest.raises(TypeError, match="w"):
        ops.blend(a, b, None)
