"""Tests of the partial-participation model (fedlam.participation)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedlam.participation import FULL, Participation, RoundSample, sample_round


def test_full_participation_draws_nothing():
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    s = FULL.sample_round(3, [4, 0, 2], rng)
    assert s == RoundSample(t=3, available=(0, 2, 4), asked=(0, 2, 4), answered=(0, 2, 4), proceed=True)
    assert rng.bit_generator.state == state  # no random draw: identical to no participation model
    assert sample_round(None, 0, range(3), 1).asked == (0, 1, 2)


@pytest.mark.parametrize("rho, n, expected", [(0.5, 6, 3), (0.5, 5, 3), (0.3, 10, 3), (0.01, 10, 1),
                                              (1.0, 7, 7), (0.1, 0, 0)])
def test_n_asked(rho, n, expected):
    assert Participation(fraction=rho).n_asked(n) == expected


def test_min_clients_raises_the_count_and_gates_the_round():
    p = Participation(fraction=0.2, min_clients=3)
    assert p.n_asked(10) == 3 and p.n_asked(2) == 2
    s = p.sample_round(0, range(2), 0)
    assert s.asked == (0, 1) and not s.proceed  # too few available: round skipped


def test_sampling_is_uniform_without_replacement():
    """Each client is asked with probability n_t / n; check the counts over many rounds
    against the binomial standard deviation (5 sigma)."""
    p = Participation(fraction=0.3)
    rng = np.random.default_rng(0)
    n, R = 10, 4000
    counts = np.zeros(n)
    for t in range(R):
        s = p.sample_round(t, range(n), rng)
        assert len(s.asked) == 3 == len(set(s.asked))
        counts[list(s.asked)] += 1
    pr = 0.3
    sd = math.sqrt(R * pr * (1 - pr))
    assert np.all(np.abs(counts - R * pr) < 5 * sd), counts


def test_dropout_rate_and_reproducibility():
    p = Participation(fraction=1.0, dropout=0.25)
    a = [p.sample_round(t, range(8), np.random.default_rng(t)) for t in range(500)]
    b = [p.sample_round(t, range(8), np.random.default_rng(t)) for t in range(500)]
    assert a == b
    lost = sum(len(s.dropped) for s in a) / (500 * 8)
    sd = math.sqrt(0.25 * 0.75 / 4000)
    assert abs(lost - 0.25) < 5 * sd
    assert all(set(s.answered) <= set(s.asked) for s in a)


def test_join_and_leave_windows():
    p = Participation(join=(0, 2, 0), leave=(None, None, 3))
    assert p.available(0, 3) == (0, 2)
    assert p.available(2, 3) == (0, 1, 2)
    assert p.available(3, 3) == (0, 1)
    with pytest.raises(ValueError, match="L = 4"):
        p.available(0, 4)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(fraction=0.0), ValueError, "fraction"),
        (dict(fraction=1.5), ValueError, "fraction"),
        (dict(min_clients=0), ValueError, "min_clients"),
        (dict(min_clients=1.5), TypeError, "min_clients"),
        (dict(dropout=1.0), ValueError, "dropout"),
        (dict(timeout=0), ValueError, "timeout"),
        (dict(join=[0, 1]), TypeError, "join"),
        (dict(join=(0, None)), ValueError, "join"),
        (dict(join=(0, 1), leave=(None,)), ValueError, "lengths"),
        (dict(join=(2,), leave=(2,)), ValueError, "leave"),
    ],
)
def test_bad_parameters_named(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Participation(**kwargs)


@pytest.mark.parametrize("clients, exc", [("abc", TypeError), ([0, 0], ValueError), ([-1], ValueError),
                                          ([0.5], ValueError), (5, TypeError)])
def test_bad_clients(clients, exc):
    with pytest.raises(exc, match="clients"):
        FULL.sample_round(0, clients, 0)


def test_empty_availability():
    s = Participation(min_clients=1).sample_round(0, [], 0)
    assert s.asked == () and s.answered == () and not s.proceed
    with pytest.raises(TypeError, match="participation"):
        sample_round("half", 0, [0], 0)


def test_absent_probability_against_enumeration():
    from itertools import combinations

    from fedlam.participation import absent_probability

    for L, h, n in [(6, 2, 2), (9, 3, 4), (5, 1, 5), (7, 0, 3), (4, 4, 1)]:
        subsets = list(combinations(range(L), n))
        frac = sum(all(c >= h for c in s) for s in subsets) / len(subsets)  # holders = 0..h-1
        assert abs(absent_probability(L, h, n) - frac) < 1e-12
    with pytest.raises(ValueError, match="<= L"):
        absent_probability(3, 4, 1)


def test_additive_outlier_formula():
    from fedlam.participation import additive_outlier, additive_threshold, memory_keeps

    s2, q = 0.5, 0.25
    th_c = additive_threshold(s2, q)
    assert th_c == pytest.approx(s2 * (0.5 + 0.25))
    # continuity at the threshold: the outlier starts at the bulk edge
    assert additive_outlier(th_c * (1 + 1e-9), s2, q) == pytest.approx(s2 * (1 + 0.5) ** 2, rel=1e-6)
    assert np.isnan(additive_outlier(0.9 * th_c, s2, q))
    # large theta: lambda ~ theta + sigma^2
    assert additive_outlier(1e6, s2, q) == pytest.approx(1e6 + s2, rel=1e-9)
    assert memory_keeps(0.5, 0.8, 1.0, 200) and not memory_keeps(1.0, 0.8, 1.0, 200)
    assert memory_keeps(0.0, 0.8, 1.0, 200)
    # w just below 1 - O(1/N) still keeps, w above it does not (N = 200, q = 1, r = 0.8)
    w_star = 1 / (1 + 0.36 * 2 / 200)
    assert memory_keeps(w_star - 1e-4, 0.8, 1.0, 200) and not memory_keeps(w_star + 1e-4, 0.8, 1.0, 200)
