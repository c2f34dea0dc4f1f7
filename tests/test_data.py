"""Tests for fedlam.data: archetypes, channel, sampling, schedules, exposure, silhouettes.

Statistical tolerances are 5 standard errors of the quantity tested (two-sided
probability of a false failure < 6e-7 for a Gaussian statistic); every seed is fixed,
so the tests are deterministic anyway.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedlam import data
from fedlam.metrics import overlaps

Z = 5.0  # number of standard errors allowed


# ---------------------------------------------------------------- random archetypes
def test_random_archetypes_shape_dtype_values():
    xi = data.random_archetypes(4, 50, rng=0)
    assert xi.shape == (4, 50) and xi.dtype == np.int8
    assert set(np.unique(xi)) <= {-1, 1}


def test_random_archetypes_deterministic_and_generator():
    a = data.random_archetypes(3, 100, 7)
    b = data.random_archetypes(3, 100, np.random.default_rng(7))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, data.random_archetypes(3, 100, 8))


def test_random_archetypes_unbiased():
    K, N = 10, 2000
    xi = data.random_archetypes(K, N, 1)
    # each entry is +-1 with prob 1/2: mean 0, sd of the mean 1/sqrt(K N)
    assert abs(xi.mean()) < Z / np.sqrt(K * N)


@pytest.mark.parametrize(
    "K,N,exc,match",
    [(0, 10, ValueError, "K"), (2, 1, ValueError, "N"), (2.0, 10, TypeError, "K"), (2, True, TypeError, "N")],
)
def test_random_archetypes_bad(K, N, exc, match):
    with pytest.raises(exc, match=match):
        data.random_archetypes(K, N, 0)


def test_bad_rng():
    with pytest.raises(TypeError, match="rng"):
        data.random_archetypes(2, 10, "seed")
    with pytest.raises(ValueError, match="rng"):
        data.random_archetypes(2, 10, -1)


# ---------------------------------------------------------------- channel and sampling
def test_flip_channel_rate():
    rows = np.ones((200, 500), dtype=np.int8)
    r = 0.6
    out = data.flip_channel(rows, r, 3)
    assert out.dtype == np.int8 and out.shape == rows.shape
    p = (1 - r) / 2
    n = rows.size
    frac = np.mean(out == -1)
    assert abs(frac - p) < Z * np.sqrt(p * (1 - p) / n)


def test_flip_channel_r1_identity_and_empty():
    xi = data.random_archetypes(5, 30, 0)
    assert np.array_equal(data.flip_channel(xi, 1.0, 0), xi)
    e = data.flip_channel(np.empty((0, 30), dtype=np.int8), 0.5, 0)
    assert e.shape == (0, 30) and e.dtype == np.int8


@pytest.mark.parametrize("r", [0.0, -0.1, 1.5, float("nan")])
def test_flip_channel_bad_r(r):
    with pytest.raises(ValueError, match="r"):
        data.flip_channel(np.ones((2, 3), dtype=np.int8), r, 0)


def test_flip_channel_bad_rows():
    with pytest.raises(ValueError, match="archetype_rows"):
        data.flip_channel(np.zeros((2, 3), dtype=np.int8), 0.5, 0)
    with pytest.raises(ValueError, match="archetype_rows"):
        data.flip_channel(np.ones(3, dtype=np.int8), 0.5, 0)
    with pytest.raises(TypeError, match="archetype_rows"):
        data.flip_channel([[1, -1]], 0.5, 0)


def test_sample_examples_shapes_and_determinism():
    xi = data.random_archetypes(3, 40, 0)
    pi = np.array([0.2, 0.3, 0.5])
    ex, lab = data.sample_examples(xi, 100, 0.7, pi, 5)
    assert ex.shape == (100, 40) and ex.dtype == np.int8
    assert lab.shape == (100,) and lab.dtype == np.int64
    ex2, lab2 = data.sample_examples(xi, 100, 0.7, pi, np.random.default_rng(5))
    assert np.array_equal(ex, ex2) and np.array_equal(lab, lab2)


def test_sample_examples_statistics():
    K, N, M, r = 3, 200, 3000, 0.5
    xi = data.random_archetypes(K, N, 0)
    pi = np.array([0.5, 0.5, 0.0])
    ex, lab = data.sample_examples(xi, M, r, pi, 1)
    assert not np.any(lab == 2)  # zero mixture weight is never drawn
    f0 = np.mean(lab == 0)
    assert abs(f0 - 0.5) < Z * np.sqrt(0.25 / M)
    # E[eta_i xi_i^mu | mu] = r: the mean agreement over all M N bits
    agree = np.mean(ex * xi[lab])
    assert abs(agree - r) < Z * np.sqrt((1 - r**2) / (M * N))


def test_sample_examples_empty():
    xi = data.random_archetypes(2, 10, 0)
    ex, lab = data.sample_examples(xi, 0, 0.5, np.array([0.5, 0.5]), 0)
    assert ex.shape == (0, 10) and ex.dtype == np.int8
    assert lab.shape == (0,) and lab.dtype == np.int64


@pytest.mark.parametrize(
    "mixture,exc,match",
    [
        (np.array([0.5, 0.6]), ValueError, "mixture.*sum to 1"),
        (np.array([1.5, -0.5]), ValueError, "mixture.*non-negative"),
        (np.array([1.0]), ValueError, "mixture.*length 2"),
        (np.array([[0.5, 0.5]]), ValueError, "mixture"),
        ([0.5, 0.5], TypeError, "mixture"),
        (np.array([np.nan, 1.0]), ValueError, "mixture"),
    ],
)
def test_sample_examples_bad_mixture(mixture, exc, match):
    xi = data.random_archetypes(2, 10, 0)
    with pytest.raises(exc, match=match):
        data.sample_examples(xi, 5, 0.5, mixture, 0)


def test_sample_examples_bad_other():
    xi = data.random_archetypes(2, 10, 0)
    pi = np.array([0.5, 0.5])
    with pytest.raises(ValueError, match="M"):
        data.sample_examples(xi, -1, 0.5, pi, 0)
    with pytest.raises(ValueError, match="r"):
        data.sample_examples(xi, 5, 0.0, pi, 0)
    with pytest.raises(ValueError, match="archetypes"):
        data.sample_examples(xi * 2, 5, 0.5, pi, 0)
    with pytest.raises(ValueError, match="archetypes"):
        data.sample_examples(xi[:, :1], 5, 0.5, pi, 0)


# ---------------------------------------------------------------- schedules
def _check_schedule(s, T, L, K):
    assert s.shape == (T, L, K) and s.dtype == np.float64
    assert np.all(s >= 0)
    np.testing.assert_allclose(s.sum(axis=2), 1.0, rtol=0, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(T=st.integers(1, 20), L=st.integers(1, 4), K=st.integers(1, 6))
def test_schedules_sum_to_one(T, L, K):
    _check_schedule(data.static_mixture(T, L, K), T, L, K)
    _check_schedule(data.sequential_drift(T, L, K), T, L, K)
    supports = [list(range(c % K, K)) for c in range(L)]
    _check_schedule(data.heterogeneous_supports(T, L, K, supports), T, L, K)
    _check_schedule(data.heterogeneous_supports(T, L, K, supports, rng=1), T, L, K)
    _check_schedule(data.novelty_ramp(T, L, K, 2, T // 2, 3), T, L, K + 2)


def test_static_mixture_options():
    s = data.static_mixture(4, 2, 3, np.array([0.2, 0.3, 0.5]))
    assert np.array_equal(s[3, 1], [0.2, 0.3, 0.5])
    per = np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]])
    s = data.static_mixture(2, 2, 3, per)
    assert np.array_equal(s[1], per)
    with pytest.raises(ValueError, match="pi"):
        data.static_mixture(2, 2, 3, np.ones((3, 3)) / 3)
    with pytest.raises(ValueError, match=r"pi\[1\]"):
        data.static_mixture(2, 2, 3, np.array([[1.0, 0, 0], [0.5, 0.6, 0]]))
    with pytest.raises(ValueError, match="T"):
        data.static_mixture(0, 2, 3)


def test_heterogeneous_supports_zero_outside():
    sup = [[0, 1], [2], [1, 3]]
    s = data.heterogeneous_supports(3, 3, 4, sup)
    assert np.array_equal(s[0, 0], [0.5, 0.5, 0, 0])
    assert np.array_equal(s[2, 1], [0, 0, 1, 0])
    r = data.heterogeneous_supports(3, 3, 4, sup, rng=0)
    assert np.all(r[:, 0, 2:] == 0) and np.all(r[:, 2, [0, 2]] == 0)
    assert np.array_equal(r, data.heterogeneous_supports(3, 3, 4, sup, rng=0))
    assert np.array_equal(r[0], r[2])  # fixed over rounds


@pytest.mark.parametrize(
    "sup,exc,match",
    [
        ([[0], [4]], ValueError, r"supports\[1\].*\[0, 3\]"),
        ([[0], []], ValueError, r"supports\[1\]"),
        ([[0, 0], [1]], ValueError, r"supports\[0\].*distinct"),
        ([[0]], ValueError, "supports.*L=2"),
        ([[0.5], [1]], TypeError, r"supports\[0\]"),
        ("ab", TypeError, "supports"),
    ],
)
def test_heterogeneous_supports_bad(sup, exc, match):
    with pytest.raises(exc, match=match):
        data.heterogeneous_supports(2, 2, 4, sup)


@settings(max_examples=30, deadline=None)
@given(L=st.integers(1, 6), K=st.integers(1, 8), size=st.integers(1, 8), seed=st.integers(0, 100))
def test_random_supports_cover(L, K, size, seed):
    if size > K or L * size < K:
        with pytest.raises(ValueError, match="size"):
            data.random_supports(L, K, size, seed)
        return
    sup = data.random_supports(L, K, size, seed)
    assert len(sup) == L and all(len(s) == size and len(set(s)) == size for s in sup)
    assert set().union(*map(set, sup)) == set(range(K))
    assert sup == data.random_supports(L, K, size, seed)
    _check_schedule(data.heterogeneous_supports(2, L, K, sup), 2, L, K)


def test_sequential_drift_dominance_order():
    T, K = 40, 4
    s = data.sequential_drift(T, 2, K)
    dominant = s[:, 0, :].argmax(axis=1)
    assert np.all(np.diff(dominant) >= 0)  # archetypes dominate one after another
    assert set(dominant) == set(range(K))
    centres = ((np.arange(K) + 0.5) * T / K - 0.5).round().astype(int)
    assert np.array_equal(dominant[centres], np.arange(K))
    assert np.array_equal(s[:, 0], s[:, 1])
    with pytest.raises(ValueError, match="width"):
        data.sequential_drift(T, 2, K, width=0.0)


def test_novelty_ramp_values():
    T, K_old, K_new, t0, ramp = 10, 2, 1, 3, 4
    s = data.novelty_ramp(T, 2, K_old, K_new, t0, ramp)
    K = K_old + K_new
    assert np.all(s[:t0, :, K_old:] == 0)
    np.testing.assert_allclose(s[:t0, 0, :K_old], 0.5)
    # linear ramp to the equal share 1/K, reached at round t0 + ramp - 1
    expected_new = np.array([min(1.0, (t - t0 + 1) / ramp) / K if t >= t0 else 0.0 for t in range(T)])
    np.testing.assert_allclose(s[:, 1, 2], expected_new, atol=1e-15)
    np.testing.assert_allclose(s[t0 + ramp - 1 :, 0], 1.0 / K, atol=1e-15)


@pytest.mark.parametrize(
    "args,match",
    [((10, 1, 2, 1, 10, 2), "t_start"), ((10, 1, 2, 1, 2, 0), "ramp"), ((10, 1, 0, 1, 2, 2), "K_old"), ((10, 1, 2, 0, 2, 2), "K_new")],
)
def test_novelty_ramp_bad(args, match):
    with pytest.raises(ValueError, match=match):
        data.novelty_ramp(*args)


# ---------------------------------------------------------------- exposure and coverage
def test_exposure_hand_made():
    labs = [np.array([0, 0, 1, 1]), np.array([2]), np.array([], dtype=np.int64)]
    e = data.exposure(labs, 4)
    np.testing.assert_allclose(e, [0.25, 0.25, 0.5, 0.0])  # empty client skipped
    assert e.dtype == np.float64


def test_exposure_all_empty_and_bad():
    e = data.exposure([np.array([], dtype=np.int64)] * 2, 3)
    assert np.array_equal(e, np.zeros(3))
    with pytest.raises(ValueError, match=r"labels_per_client\[0\].*\[0, 2\]"):
        data.exposure([np.array([3])], 3)
    with pytest.raises(TypeError, match=r"labels_per_client\[0\]"):
        data.exposure([np.array([0.0])], 3)
    with pytest.raises(ValueError, match=r"labels_per_client\[0\]"):
        data.exposure([np.zeros((2, 2), dtype=int)], 3)
    with pytest.raises(TypeError, match="labels_per_client"):
        data.exposure(np.array([0, 1]), 3)


def test_exposure_matches_mixture_in_expectation():
    xi = data.random_archetypes(3, 20, 0)
    pi = np.array([0.6, 0.3, 0.1])
    M = 4000
    labs = [data.sample_examples(xi, M, 0.5, pi, seed)[1] for seed in range(3)]
    e = data.exposure(labs, 3)
    se = np.sqrt(pi * (1 - pi) / (3 * M))
    assert np.all(np.abs(e - pi) < Z * se)


def test_coverage_hand_made():
    e = np.array([[1.0, 0, 0], [0.5, 0.5, 0], [1.0, 0, 0]])
    c = data.coverage(e)
    assert c.dtype == bool
    assert np.array_equal(c, [[1, 0, 0], [1, 1, 0], [1, 1, 0]])
    with pytest.raises(ValueError, match="exposures"):
        data.coverage(np.array([[-0.1, 1.1]]))
    with pytest.raises(ValueError, match="exposures"):
        data.coverage(np.ones(3))


# ---------------------------------------------------------------- silhouettes
def test_load_silhouettes():
    X, y, names = data.load_silhouettes()
    assert X.shape == (8671, 784) and X.dtype == np.uint8
    assert y.shape == (8671,) and y.dtype == np.int64 and len(names) == 101
    corners = X.reshape(-1, 28, 28)[:, [0, 0, -1, -1], [0, -1, 0, -1]]
    assert np.all(corners == 1)  # 1 = background
    counts = {n: int(np.sum(y == names.index(n))) for n in data.PAPER_CLASSES}
    assert counts == {"anchor": 42, "bass": 54, "Motorbikes 16": 798}
    X[0, 0] = 7  # copies: the cache is not affected
    assert data.load_silhouettes()[0][0, 0] == 1


def test_structured_archetypes():
    xi = data.structured_archetypes()
    assert xi.shape == (3, 784) and xi.dtype == np.int8 and set(np.unique(xi)) == {-1, 1}
    X, y, names = data.load_silhouettes()
    imgs = X[y == names.index("bass")]
    obj_majority = (imgs == 0).mean(axis=0) > 0.5
    assert np.array_equal(xi[1] == 1, obj_majority)
    neg = data.structured_archetypes(foreground=-1)
    assert np.array_equal(neg, -xi)
    med = data.structured_archetypes(("anchor",), method="medoid")
    anchors = X[y == names.index("anchor")]
    assert np.any(np.all((anchors == 0) == (med[0] == 1), axis=1))  # a real image
    assert np.array_equal(data.structured_archetypes((6, 9, 4)), xi)


@pytest.mark.parametrize(
    "kw,exc,match",
    [
        ({"classes": ("Motorbikes",)}, ValueError, "classes.*Motorbikes 16"),
        ({"classes": (101,)}, ValueError, "classes"),
        ({"classes": ()}, ValueError, "classes"),
        ({"classes": "anchor"}, TypeError, "classes"),
        ({"classes": ("bass", "bass")}, ValueError, "distinct"),
        ({"method": "median"}, ValueError, "method"),
        ({"foreground": 0}, ValueError, "foreground"),
    ],
)
def test_structured_archetypes_bad(kw, exc, match):
    with pytest.raises(exc, match=match):
        data.structured_archetypes(**kw)


def _mean_offdiag(P):
    O = np.abs(overlaps(P, P))
    K = O.shape[0]
    return (O.sum() - K) / (K * (K - 1))


def test_decorrelate_reduces_overlaps():
    xi = data.structured_archetypes()
    d = data.decorrelate(xi)
    assert d.dtype == np.int8 and set(np.unique(d)) <= {-1, 1}
    N = xi.shape[1]
    assert _mean_offdiag(xi) > 0.25
    O = np.abs(overlaps(d, d) - np.eye(3))
    assert O.max() <= 1 / np.sqrt(N)  # the documented stopping rule
    assert _mean_offdiag(d) < _mean_offdiag(xi) / 10
    # still close to the originals (each keeps > 0.6 overlap)
    assert np.all(np.diag(overlaps(d, xi)) > 0.6)
    assert np.array_equal(d, data.decorrelate(xi))


def test_decorrelate_lowdin_is_identity_on_silhouettes():
    # documented negative result: the sign of C^{-1/2} Xi keeps every bit here
    xi = data.structured_archetypes()
    assert np.array_equal(data.decorrelate(xi, method="lowdin"), xi)


def test_decorrelate_bad():
    with pytest.raises(ValueError, match="method"):
        data.decorrelate(data.random_archetypes(2, 10, 0), method="pca")
    with pytest.raises(ValueError, match="patterns"):
        data.decorrelate(np.zeros((2, 10), dtype=np.int8))
    with pytest.raises(ValueError, match="linearly independent"):
        xi = data.random_archetypes(1, 10, 0)
        data.decorrelate(np.vstack([xi, xi]), method="lowdin")


# ---------------------------------------------------------------- sizes refused before allocating
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: data.random_archetypes(100_000, 100_000, 0), r"K x N = 100000 x 100000 would need"),
        (lambda: data.sample_examples(np.ones((1, 100_000), dtype=np.int8), 20_000, 0.5, np.ones(1), 0),
         r"M x N = 20000 x 100000"),
        (lambda: data.flip_channel(np.broadcast_to(np.ones(1, dtype=np.int8), (40_000, 40_000)), 0.5, 0),
         r"M x N = 40000 x 40000"),
        (lambda: data.static_mixture(10**6, 1000, 200), r"T x L x K = 1000000 x 1000 x 200"),
        (lambda: data.novelty_ramp(10**6, 1000, 100, 100, 0, 1), r"T x L x K = 1000000 x 1000 x 200"),
    ],
)
def test_sizes_are_bounded_before_allocating(call, match):
    with pytest.raises(ValueError, match=match) as err:
        call()
    assert "fedlam.data.MAX_ARRAY_BYTES" in str(err.value)
