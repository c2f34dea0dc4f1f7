"""The shared argument checks: messages name the argument, nothing is cast silently."""

from __future__ import annotations

import numpy as np
import pytest

from fedlam import _validation as v


def test_as_rng_accepts_generator_and_seed_and_is_deterministic():
    g = np.random.default_rng(3)
    assert v.as_rng(g) is g
    assert np.array_equal(v.as_rng(7).integers(0, 100, 10), v.as_rng(7).integers(0, 100, 10))


@pytest.mark.parametrize("bad, err", [(None, TypeError), (1.5, TypeError), (True, TypeError), (-1, ValueError)])
def test_as_rng_rejects(bad, err):
    with pytest.raises(err, match="rng"):
        v.as_rng(bad)


def test_check_pm1():
    x = np.array([[1, -1], [-1, 1]], dtype=np.int8)
    assert v.check_pm1(x, "patterns", ndim=2) is x
    with pytest.raises(ValueError, match="patterns must contain only -1 and \\+1"):
        v.check_pm1(np.array([[1, 0]], dtype=np.int8), "patterns")
    with pytest.raises(TypeError, match="patterns"):
        v.check_pm1(np.array([[True, False]]), "patterns")
    with pytest.raises(TypeError, match="patterns"):
        v.check_pm1([[1, -1]], "patterns")
    with pytest.raises(ValueError, match="2-dimensional"):
        v.check_pm1(np.array([1, -1]), "patterns", ndim=2)
    with pytest.raises(ValueError, match="empty"):
        v.check_pm1(np.zeros((0, 3), dtype=np.int8), "patterns")


def test_check_operator_blocked_checks_catch_single_entries():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((700, 700))
    J = a + a.T
    assert v.check_operator(J) is J
    bad = J.copy()
    bad[3, 650] += 1e-6
    with pytest.raises(ValueError, match="J must be symmetric"):
        v.check_operator(bad)
    bad = J.copy()
    bad[699, 0] = np.inf
    with pytest.raises(ValueError, match="J must be finite, found 1"):
        v.check_operator(bad)
    with pytest.raises(TypeError, match="float dtype"):
        v.check_operator(np.eye(3, dtype=np.int64))
    with pytest.raises(ValueError, match="square"):
        v.check_operator(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="N >= 2"):
        v.check_operator(np.zeros((1, 1)))



@pytest.mark.parametrize("pos", [(3, 650), (650, 3), (0, 0), (699, 699), (300, 10), (10, 300), (511, 512)])
def test_check_operator_finds_a_nan_in_any_tile_and_reports_the_true_scale(pos):
    """One pass over tile pairs: a NaN on either side of a pair (or on the diagonal, or in the
    last partial tile) is counted, and the symmetry message quotes the exact max |J|."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((700, 700))
    J = a + a.T
    bad = J.copy()
    bad[pos] = np.nan
    with pytest.raises(ValueError, match="J must be finite, found 1 NaN/inf entries"):
        v.check_operator(bad)
    with pytest.raises(ValueError, match="J must be finite, found 1 NaN/inf entries"):
        v.check_operator(bad, symmetric=False)
    asym = J.copy()
    asym[pos] += 1.0 if pos[0] != pos[1] else 0.0
    if pos[0] != pos[1]:
        with pytest.raises(ValueError, match=f"of max \\|J\\| = {np.abs(asym).max():.3g}"):
            v.check_operator(asym)

def test_check_prob_vector():
    p = np.array([0.25, 0.75])
    assert np.array_equal(v.check_prob_vector(p, "mixture", size=2), p)
    with pytest.raises(ValueError, match="mixture must sum to 1"):
        v.check_prob_vector(np.array([0.5, 0.6]), "mixture")
    with pytest.raises(ValueError, match="mixture must be non-negative"):
        v.check_prob_vector(np.array([-0.5, 1.5]), "mixture")
    with pytest.raises(ValueError, match="length 3"):
        v.check_prob_vector(p, "mixture", size=3)


def test_scalar_checks():
    assert v.check_quality(1.0) == 1.0
    for bad in (0.0, 1.2, -0.1):
        with pytest.raises(ValueError, match=r"r must lie in \(0, 1\]"):
            v.check_quality(bad)
    with pytest.raises(TypeError, match="r must be a real number"):
        v.check_quality("0.5")
    with pytest.raises(TypeError, match="K must be an int"):
        v.check_positive_int(2.0, "K")
    with pytest.raises(ValueError, match="K must be >= 1"):
        v.check_positive_int(0, "K")
    with pytest.raises(ValueError, match="noise must be one of"):
        v.check_choice("loud", "noise", ("uniform", "annealed"))
