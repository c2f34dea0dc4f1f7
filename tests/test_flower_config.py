"""Run/node configuration of the Flower apps and the examples-file format (no Flower needed)."""

from __future__ import annotations

import numpy as np
import pytest

from fedlam.flower import config as C


def test_run_defaults_parse():
    rc = C.parse_run_config({})
    assert rc.precision == "float32" and rc.rank is None and rc.round_timeout is None
    assert rc.participation().is_full


@pytest.mark.parametrize(
    "cfg, exc, match",
    [
        ({"bogus": 1}, ValueError, "bogus"),
        ({"rounds": 0}, ValueError, "rounds"),
        ({"precision": "int8"}, ValueError, "precision"),
        ({"controller": "magic"}, ValueError, "controller"),
        ({"controller": "1.5"}, ValueError, "controller"),
        ({"lam-params": "[1]"}, ValueError, "lam-params"),
        ({"server-options": "{oops"}, ValueError, "server-options"),
        ({"known-r": 1}, TypeError, "known-r"),
        ({"fraction": 0.0}, ValueError, "fraction"),
        ({"N": 1}, ValueError, "N"),
        ({"N": 10**6}, ValueError, "N"),
        ({"archetypes": "random", "K": 0}, ValueError, "K >= 1"),
        ({"archetypes": "mnist"}, ValueError, "archetypes"),
    ],
)
def test_run_config_rejects(cfg, exc, match):
    with pytest.raises(exc, match=match):
        C.parse_run_config(cfg)


def test_node_config_synthetic_and_file(tmp_path):
    s = C.parse_node_config({"client-index": 2, "archetype-seed": 1, "K": 3, "N": 50, "r": 0.7, "M": 10})
    assert s.source == "synthetic" and s.client_index == 2 and s.mixture == "uniform"
    f = C.parse_node_config({"source": "file", "path": "x.npz", "M": 5})
    assert f.path == "x.npz" and f.r is None
    sil = C.parse_node_config({"archetypes": "silhouettes", "r": 0.8, "M": 5})
    assert (sil.N, sil.K) == (784, 3)


@pytest.mark.parametrize(
    "cfg, match",
    [
        ({"source": "ftp", "M": 1}, "source"),
        ({"M": 5, "K": 3, "N": 50, "r": 0.7}, "archetype-seed"),
        ({"archetype-seed": 1, "K": 3, "N": 50, "r": 0.7}, "needs M"),
        ({"archetype-seed": 1, "K": 3, "N": 50, "M": 5}, "needs r"),
        ({"archetype-seed": 1, "K": 3, "N": 50, "M": 5, "r": 0.7, "typo": 1}, "typo"),
        ({"source": "file", "M": 5}, "path"),
        ({"archetypes": "silhouettes", "N": 100, "r": 0.8, "M": 5}, "784"),
        ({"archetype-seed": 1, "K": 3, "N": 50, "M": -1, "r": 0.7}, "M"),
    ],
)
def test_node_config_rejects(cfg, match):
    with pytest.raises((ValueError, TypeError), match=match):
        C.parse_node_config(cfg)


def test_mixtures():
    assert np.allclose(C.parse_mixture("uniform", 4, 2, 0, 3), 0.5)
    one = C.parse_mixture("class", 3, 3, 4, 5)
    assert np.array_equal(one[:, 1], np.ones(3)) and one.sum() == 3
    assert C.parse_mixture("class:2", 2, 3, 0, 1)[0, 2] == 1
    assert np.allclose(C.parse_mixture("[0.2, 0.8]", 3, 2, 0, 1), [[0.2, 0.8]] * 3)
    d = C.parse_mixture("drift", 6, 3, 1, 3)
    assert d.shape == (6, 3) and np.allclose(d.sum(axis=1), 1)
    for bad in ("class:7", "[0.5, 0.6]", "zigzag", "class:x"):
        with pytest.raises(ValueError, match="mixture"):
            C.parse_mixture(bad, 3, 3, 0, 1)


def _ex(M=20, N=30, seed=0):
    return np.random.default_rng(seed).choice(np.array([-1, 1], dtype=np.int8), size=(M, N))


def test_examples_file_formats(tmp_path):
    ex = _ex()
    np.save(tmp_path / "a.npy", ex)
    np.savez(tmp_path / "b.npz", examples=ex.astype(np.int64), labels=np.arange(20) % 3)
    got, lab = C.load_examples_file(tmp_path / "a.npy", 30)
    assert got.dtype == np.int8 and np.array_equal(got, ex) and lab is None
    got, lab = C.load_examples_file(tmp_path / "b.npz")
    assert np.array_equal(got, ex) and lab.dtype == np.int64


def test_examples_file_rejections(tmp_path):
    ex = _ex()
    cases = {}
    bad = ex.copy()
    bad[3, 4] = 0
    np.save(tmp_path / "zero.npy", bad)
    cases["zero.npy"] = "row 3, column 4"
    np.save(tmp_path / "vec.npy", ex[0])
    cases["vec.npy"] = "2-D"
    np.save(tmp_path / "bool.npy", ex > 0)
    cases["bool.npy"] = "dtype bool"
    np.save(tmp_path / "float.npy", ex.astype(np.float32))
    cases["float.npy"] = "dtype float32"
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    cases["obj.npy"] = "without pickle"
    np.savez(tmp_path / "nokey.npz", data=ex)
    cases["nokey.npz"] = "'examples'"
    np.savez(tmp_path / "badlab.npz", examples=ex, labels=np.arange(3))
    cases["badlab.npz"] = "labels"
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    cases["junk.npz"] = "not a valid"
    (tmp_path / "x.csv").write_text("1,2")
    cases["x.csv"] = ".npy or .npz"
    cases["missing.npy"] = "does not exist"
    for name, match in cases.items():
        with pytest.raises(ValueError, match=match):
            C.load_examples_file(tmp_path / name)
    np.save(tmp_path / "ok.npy", ex)
    with pytest.raises(ValueError, match="N = 30 columns"):
        C.load_examples_file(tmp_path / "ok.npy", N=40)


def test_bytes_per_round():
    b = C.expected_bytes_per_round(784, 5, "float32", None, 3)
    assert b["upload_per_client"] == 784 * 785 // 2 * 4
    assert b["broadcast_per_client"] == 3 * 784
    assert abs(b["ratio_dense"] - 8 * 784 * 784 / (784 * 785 / 2 * 4)) < 1e-12


def test_free_port_never_hands_out_a_port_twice(monkeypatch):
    """The OS may hand a released port out again at once; SuperNodes started without waiting
    then clashed (a CI run gave two of seven SuperNodes the same port). The port finder skips the
    ports already handed out."""
    import socket

    from fedlam.flower import deploy

    ports = iter([5001, 5001, 5001, 5002])

    class FakeSocket:
        def __init__(self, *a):
            self.port = None

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

        def bind(self, addr):
            self.port = next(ports)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(socket, "socket", FakeSocket)
    assert deploy.free_port() == 5001
    assert deploy.free_port(exclude={5001}) == 5002
    with pytest.raises(TypeError, match="exclude"):
        deploy.free_port(exclude=7)
