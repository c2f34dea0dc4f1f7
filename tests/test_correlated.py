"""Tests of fedlam.correlated (chapter 3, quality against cost)."""

import numpy as np
import pytest

from fedlam import correlated


def test_correlated_family_overlaps_and_rank():
    X = correlated.correlated_family(6, 2000, 0.5, np.random.default_rng(0)).astype(float)
    ov = (X @ X.T / 2000)[np.triu_indices(6, 1)]
    assert np.linalg.matrix_rank(X) == 6
    assert abs(ov.mean() - 0.5) < 0.05 and ov.max() <= 0.8


def test_compare_factorizations_small():
    res = correlated.compare_factorizations(Ks=(3,), overlaps=(0.4,), n_subsets=1)
    assert set(res.n_archetypes.values()) == {3}
    d = correlated.METHODS[0]
    for (fam, op), q in res.quality.items():
        assert q[d] == [3, 0, 1], (fam, op, q[d])          # the default recovers the small families
        assert len(res.cost[fam, op][d]) == 1
    # the paper's pipeline is not run at N = 784
    assert res.cost["silhouette subsets, N = 784", "exact"][correlated.METHODS[2]] == []
    text = repr(res.quality_table())
    assert text.startswith("Archetypes recovered") and "not run" in text
    # short column names and cells (the family sets and methods in full in the title)
    assert "| method | correlated, exact | correlated, noisy | silhouette, exact | silhouette, noisy |" in text
    assert "| in-span | " + " | ".join(["3/3, 0, 1/1"] * 4) + " |" in text
    assert "correlated families, N = 300; silhouette subsets, N = 784" in text
    assert all(f"{short}: {m}" in text for m, short in correlated.SHORT_NAMES.items())
    assert "<table" in res.cost_table()._repr_html_()


def test_bad_input():
    with pytest.raises(TypeError, match="rng"):
        correlated.correlated_family(3, 100, 0.5, 0)
    with pytest.raises(ValueError, match="overlap"):
        correlated.correlated_family(3, 100, 1.5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="r"):
        correlated.compare_factorizations(Ks=(3,), r=2.0)
