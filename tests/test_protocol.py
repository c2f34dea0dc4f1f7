"""fedlam.protocol: uploads, synthetic sources and a site's own examples."""

from __future__ import annotations

import numpy as np
import pytest

from fedlam import data
from fedlam import federation as F
from fedlam.protocol import ArraySource, DataSource, SyntheticSource, Upload


def test_upload_validation_and_views():
    op = np.eye(4) / 4
    u = Upload(op, 10, 0.5, 0.36, 0.01)
    assert u.n == 4 and u.scalars() == {"batch_size": 10, "weight": 0.5, "noise_var": 0.36, "dp_sigma": 0.01}
    assert u.without_operator().operator is None and u.without_operator().scalars() == u.scalars()
    assert "4x4" in repr(u) and len(repr(u)) < 120
    assert np.isnan(Upload(op, 0, float("nan")).weight)
    with pytest.raises(ValueError, match="weight must lie in"):
        Upload(op, 1, 1.5)
    with pytest.raises(TypeError, match="weight must be a real number"):
        Upload(op, 1, True)
    with pytest.raises(ValueError, match="operator must be an \\(N, N\\) array"):
        Upload(np.ones(4), 1, 1.0)
    with pytest.raises(TypeError, match="operator must have a float dtype"):
        Upload(np.eye(4, dtype=int), 1, 1.0)
    with pytest.raises(ValueError, match="noise_var must lie in"):
        Upload(op, 1, 1.0, 1.5)
    with pytest.raises(ValueError, match="batch_size must be"):
        Upload(op, -1, 1.0)


def test_synthetic_source():
    xi = data.random_archetypes(3, 50, 0)
    mix = data.static_mixture(2, 1, 3)[:, 0]
    src = SyntheticSource(xi, 7, r=0.8, mixture=mix)
    assert isinstance(src, DataSource) and src.N == 50
    X, y = src.batch(1, np.random.default_rng(0))
    assert X.shape == (7, 50) and y.shape == (7,)
    X2, y2 = src.batch(1, np.random.default_rng(0))
    np.testing.assert_array_equal(X, X2)
    Xn, yn = SyntheticSource(xi, np.array([0, 4]), kind="noise").batch(1, np.random.default_rng(1))
    assert Xn.shape == (4, 50) and yn is None
    with pytest.raises(ValueError, match="r is required"):
        SyntheticSource(xi, 7, mixture=mix)
    with pytest.raises(ValueError, match=r"t must lie in \[0, 1\]"):
        src.batch(2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="M must be <= "):
        SyntheticSource(xi, 10**9, kind="noise")


def test_array_source_and_files(tmp_path):
    X = data.random_archetypes(10, 20, 0)
    s = ArraySource(X, 4)
    np.testing.assert_array_equal(s.batch(0, None)[0], X[:4])
    np.testing.assert_array_equal(s.batch(2, None)[0], X[[8, 9, 0, 1]])  # wraps around
    r = ArraySource(X, np.array([3, 0, 5]), order="sample")
    b, lab = r.batch(2, np.random.default_rng(0))
    assert b.shape == (5, 20) and lab is None and len({row.tobytes() for row in b}) == 5
    assert r.batch(1, np.random.default_rng(0))[0].shape == (0, 20)
    np.save(tmp_path / "site.npy", X.astype(np.int16))
    np.savez(tmp_path / "site.npz", examples=X, labels=np.arange(10))
    f = ArraySource.from_file(tmp_path / "site.npy", 3)
    assert f.examples.dtype == np.int8 and f.N == 20
    g = ArraySource.from_file(tmp_path / "site.npz", 3)
    np.testing.assert_array_equal(g.batch(1, None)[1], [3, 4, 5])
    np.save(tmp_path / "bad.npy", np.zeros((3, 20)))
    with pytest.raises(ValueError, match="integer array of -1/\\+1"):
        ArraySource.from_file(tmp_path / "bad.npy", 1)
    np.save(tmp_path / "bad2.npy", np.zeros((3, 20), dtype=np.int8))
    with pytest.raises(ValueError, match="only -1 and \\+1"):
        ArraySource.from_file(tmp_path / "bad2.npy", 1)
    np.savez(tmp_path / "bad3.npz", x=X)
    with pytest.raises(ValueError, match="must hold an 'examples' array"):
        ArraySource.from_file(tmp_path / "bad3.npz", 1)
    (tmp_path / "junk.npy").write_bytes(b"not an array")
    with pytest.raises(ValueError, match="not a readable numpy file"):
        ArraySource.from_file(tmp_path / "junk.npy", 1)
    with pytest.raises(ValueError, match="no such file"):
        ArraySource.from_file(tmp_path / "missing.npy", 1)
    with pytest.raises(ValueError, match="must end in .npy or .npz"):
        (tmp_path / "x.csv").write_text("1,-1")
        ArraySource.from_file(tmp_path / "x.csv", 1)
    with pytest.raises(ValueError, match="M must be <= the number of examples"):
        ArraySource(X, 11, order="sample")


def test_federation_of_sites_with_their_own_files(tmp_path):
    """Clients that hold files of examples (no archetypes anywhere on the client side): the
    federation recovers the archetypes the metrics know about."""
    xi = data.random_archetypes(3, 200, 3)
    rng = np.random.default_rng(4)
    specs = []
    for c in range(3):
        X, _ = data.sample_examples(xi, 900, 0.8, np.ones(3) / 3, rng)
        path = tmp_path / f"site{c}.npy"
        np.save(path, X)
        specs.append(F.ClientSpec(source=ArraySource.from_file(path, 300)))
    h = F.run_federation(xi, specs, 3, 0, controller="novelty")
    np.testing.assert_array_equal(h.k_hat, 3)
    assert h.magnetization.min() >= 0.95 and h.spurious.max() == 0
    np.testing.assert_array_equal(h.exposure, 0.0)  # labels unknown: no exposure recorded
    with pytest.raises(ValueError, match="source must have N = 200"):
        F.run_federation(xi, [F.ClientSpec(source=ArraySource(xi[:, :50], 2))], 2, 0)
    with pytest.raises(TypeError, match="source must be a fedlam.protocol.DataSource"):
        F.ClientSpec(source=xi)
