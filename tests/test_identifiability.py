"""Tests of fedlam.identifiability (chapter 3, identifiability and the in-span search)."""

import itertools
from math import comb

import numpy as np
import pytest

import fedlam
from fedlam import identifiability as idf
from fedlam import operators


def test_random_family_all_pairs_complete():
    xi = fedlam.random_archetypes(5, 300, rng=12)
    assert len(idf.site_types(xi)) == 32
    assert len(idf.complete_pairs(xi)) == 10


def test_missing_types_give_a_third_pm1_vector():
    allowed = np.array([s for s in itertools.product((-1, 1), repeat=3)
                        if s not in ((1, 1, -1), (-1, -1, 1))])
    xi = allowed[np.random.default_rng(5).integers(0, len(allowed), 240)].T.astype(np.int8)
    coef = idf.pm1_in_span(xi)
    assert coef.shape == (8, 3)
    assert idf.complete_pairs(xi) == []
    assert any(np.array_equal(c, [1.0, 1.0, -1.0]) for c in coef)
    # every listed coefficient vector is a +-1 vector of the span
    assert np.all(np.abs(coef @ xi.astype(float)) == 1.0)


def test_hadamard_family_is_not_identifiable():
    res = idf.hadamard_counterexample(N=400, rng=6, seeds=2)
    assert res.rank == 4 and res.max_overlap <= 0.12
    assert res.rotated_is_pm1 and res.operator_difference < 1e-12
    assert res.n_complete_pairs == 0 and res.n_pm1_in_span == 16 and res.half_coefficients
    # factorize returns a +-1 family with the same operator, not necessarily Xi
    assert res.returned_operator_difference < 1e-12
    assert set(res.family_by_seed) <= {"Xi", "O Xi"}
    assert "Two +-1 families" in repr(res) and "<table" in res._repr_html_()


def test_hadamard_rotation_is_orthogonal_and_preserves_operator():
    O = idf.hadamard_rotation()
    np.testing.assert_allclose(O @ O.T, np.eye(4), atol=1e-15)
    xi = idf.hadamard_family(64, 0)
    Y = (O @ xi.astype(float)).astype(np.int8)
    np.testing.assert_allclose(operators.pattern_operator(xi), operators.pattern_operator(Y), atol=1e-15)


@pytest.mark.parametrize("k", [3, 5, 7, 9])
def test_signed_sum_splits_counts(k):
    row = idf.signed_sum_splits((k,)).rows[0]
    assert row.patterns == 2**k
    assert row.pm1 == row.split == 2 * comb(k, (k - 1) // 2)
    assert row.not_all_agree == 2**k - 2
    assert (row.pm1 == row.not_all_agree) == (k == 3)


def test_bad_input():
    with pytest.raises(ValueError, match="odd"):
        idf.signed_sum_splits((4,))
    with pytest.raises(ValueError, match="max_types"):
        idf.pm1_in_span(fedlam.random_archetypes(5, 300, rng=1), max_types=8)
    with pytest.raises(ValueError, match="linearly independent"):
        idf.pm1_in_span(np.array([[1, -1, 1], [1, -1, 1]], dtype=np.int8))
    with pytest.raises(ValueError, match="xi"):
        idf.site_types(np.array([[1, 0, 1]]))
    with pytest.raises((TypeError, ValueError), match="N"):
        idf.hadamard_family(2, 0)
