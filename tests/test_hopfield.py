"""Tests for fedlam.hopfield (the single-layer memory of chapter 1)."""

from __future__ import annotations

import numpy as np
import pytest

from fedlam import hopfield as hp


def _patterns(K: int, N: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.where(rng.random((K, N)) < 0.5, -1, 1).astype(np.int8)


def test_energy_matches_definition_and_batch():
    xi = _patterns(3, 20, 0)
    J = hp.hebbian_patterns(xi)
    s = xi[0]
    E = hp.energy(J, s)
    assert isinstance(E, float)
    expected = -sum(J[i, j] * s[i] * s[j] for i in range(20) for j in range(20))
    assert E == pytest.approx(expected)
    Eb = hp.energy(J, xi)
    assert Eb.shape == (3,)
    assert Eb[0] == pytest.approx(E)


def test_hebbian_patterns_diagonal_conventions():
    xi = _patterns(4, 30, 1)
    J = hp.hebbian_patterns(xi)
    np.testing.assert_allclose(np.diag(J), 4 / 30)
    J0 = hp.hebbian_patterns(xi, zero_diagonal=True)
    np.testing.assert_allclose(np.diag(J0), 0.0)
    np.testing.assert_allclose(J0 + np.eye(30) * 4 / 30, J)


def test_async_dynamics_never_raises_energy():
    xi = _patterns(8, 60, 2)
    J = hp.hebbian_patterns(xi)
    cue = hp.corrupt(xi, 0.3, 3)
    res = hp.retrieve(J, cue, 4, max_sweeps=40)
    assert np.all(np.diff(res.energies, axis=0) <= 1e-12)
    assert res.converged
    # a converged state is a fixed point of the synchronous rule too
    np.testing.assert_array_equal(hp.sync_step(J, res.states), res.states)


def test_sync_lyapunov_and_two_cycle():
    # two neurons coupled ferromagnetically, no self-coupling: (+,-) <-> (-,+) forever
    J = np.array([[0.0, 1.0], [1.0, 0.0]])
    s = np.array([1, -1], dtype=np.int8)
    s1 = hp.sync_step(J, s)
    np.testing.assert_array_equal(s1, [-1, 1])
    np.testing.assert_array_equal(hp.sync_step(J, s1), s)
    # on a random symmetric J the two-time function -||J s||_1 never increases
    rng = np.random.default_rng(5)
    A = rng.normal(size=(40, 40))
    J = (A + A.T) / 2
    s = _patterns(1, 40, 6)[0]
    L = []
    for _ in range(30):
        L.append(-np.abs(J @ s).sum())
        s = hp.sync_step(J, s)
    assert np.all(np.diff(L) <= 1e-9)


def test_corrupt_flips_exact_count_and_is_seeded():
    xi = _patterns(5, 100, 7)
    c = hp.corrupt(xi, 0.2, 8)
    assert c.dtype == np.int8
    np.testing.assert_array_equal((c != xi).sum(axis=1), 20)
    np.testing.assert_array_equal(c, hp.corrupt(xi, 0.2, 8))
    np.testing.assert_allclose(hp.overlap(c, xi), 0.6)


def test_retrieval_from_corrupted_cue_at_low_load():
    res = hp.retrieval_experiment(200, 5, 0.2, 0)
    np.testing.assert_allclose(res.initial_overlap, 0.6)
    assert np.all(res.final_overlap == 1.0)


def test_capacity_curve_drops_past_alpha_c():
    res = hp.capacity_curve(200, np.array([0.05, 0.3]), 0)
    assert res.mean_overlap[0] > 0.99
    assert res.mean_overlap[1] < 0.8
    assert res.fraction_retrieved[0] == 1.0
    again = hp.capacity_curve(200, np.array([0.05, 0.3]), 0)
    np.testing.assert_array_equal(res.mean_overlap, again.mean_overlap)


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: hp.energy(np.eye(3), np.array([1, 0, 1])), ValueError, "sigma must contain only -1 and \\+1"),
        (lambda: hp.energy(np.eye(3), np.array([1, 1])), ValueError, r"sigma must have shape \(N,\) or \(S, N\) with N=3"),
        (lambda: hp.energy(np.eye(3, dtype=int), np.array([1, 1, 1])), TypeError, "J must have a float dtype"),
        (lambda: hp.retrieve(np.eye(3), np.array([1, 1, 1]), 0, mode="fast"), ValueError, "mode must be one of"),
        (lambda: hp.retrieve(np.eye(3), np.array([1, 1, 1]), 0, max_sweeps=0), ValueError, "max_sweeps must be >= 1"),
        (lambda: hp.corrupt(np.array([1, -1]), 1.5, 0), ValueError, r"flip_fraction must lie in \[0, 1\]"),
        (lambda: hp.capacity_curve(50, np.array([0.0]), 0), ValueError, r"alphas must lie in \(0, 1\]"),
        (lambda: hp.retrieve(np.eye(3), np.array([1, 1, 1]), None), TypeError, "rng must be a numpy.random.Generator"),
        (lambda: hp.retrieval_experiment(200_000, 5, 0.1, 0), ValueError, "above the limit of 8 GiB"),
        (lambda: hp.hebbian_patterns(np.ones((1, 40_000), dtype=np.int8)), ValueError, "N x N = 40000 x 40000"),
    ],
)
def test_validation_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_exact_ties_do_not_depend_on_summation_order():
    """Hebbian fields are multiples of 1/N; with two patterns many are exactly 0 and must keep
    the spin whatever the order of the floating-point sum (a BLAS kernel choice)."""
    xi = np.array([[1, 1, -1, -1, -1, -1, 1, 1], [1, -1, 1, 1, 1, 1, 1, -1],
                   [-1, 1, 1, -1, -1, 1, 1, -1], [1, -1, 1, -1, -1, 1, -1, 1]], dtype=np.int8)
    J = hp.hebbian_patterns(xi, zero_diagonal=True)
    s = -np.ones(8, dtype=np.int8)
    X = xi.astype(np.int64)
    h_exact = (X.T @ X - 4 * np.eye(8, dtype=np.int64)) @ s  # N * field, exact integers
    assert np.any(h_exact == 0)
    # perturb the computed fields by a few ulps, as another summation order would
    rng = np.random.default_rng(0)
    for _ in range(20):
        noise = rng.uniform(-4, 4, 8) * np.finfo(float).eps * np.abs(J).sum(axis=0)
        out = hp._sign_keep((J @ s + noise)[None, :], s[None, :].astype(float), hp._tie_tolerance(J))[0]
        np.testing.assert_array_equal(out[h_exact == 0], s[h_exact == 0])
        np.testing.assert_array_equal(out[h_exact != 0], np.sign(h_exact[h_exact != 0]))
    # the tolerance is far below the smallest non-zero |field| 1/N of a Hebbian matrix
    J300 = hp.hebbian_patterns(np.where(np.random.default_rng(1).random((40, 300)) < 0.5, -1, 1).astype(np.int8),
                               zero_diagonal=True)
    assert hp._tie_tolerance(J300).max() < 1e-6 / 300
