"""Tests of the wire encoding (fedlam.flower.wire; no Flower needed)."""

from __future__ import annotations

import numpy as np
import pytest

from fedlam import data, operators
from fedlam.flower import wire


@pytest.fixture(scope="module")
def op():
    xi = data.random_archetypes(3, 60, 1)
    ex, _ = data.sample_examples(xi, 80, 0.8, np.full(3, 1 / 3), np.random.default_rng(2))
    B = operators.hebbian(ex)
    A = operators.pattern_operator(xi[:2])
    return operators.blend(B, A, 0.37)


def test_float64_is_exact(op):
    assert np.array_equal(op, op.T)
    enc = wire.encode_operator(op, "float64")
    assert enc["triu"].nbytes == wire.operator_nbytes(60, "float64") == 60 * 61 // 2 * 8
    assert np.array_equal(wire.decode_operator(enc, 60), op)


@pytest.mark.parametrize("precision, eps", [("float32", 2.0**-24), ("float16", 2.0**-11)])
def test_lower_precision_rounding_bound(op, precision, eps):
    dec = wire.decode_operator(wire.encode_operator(op, precision), 60)
    assert np.array_equal(dec, dec.T)
    # round-to-nearest: relative error <= unit roundoff (float16 subnormals: absolute 2**-25)
    err = np.abs(dec - op)
    assert np.all(err <= eps * np.abs(op) + 2.0**-25)
    assert np.any(err > 0)


def test_low_rank_keeps_top_eigenspace(op):
    enc = wire.encode_operator(op, "float64", rank=5)
    assert enc["vectors"].shape == (60, 5) and wire.operator_nbytes(60, "float64", 5) == 60 * 5 * 8 + 40
    dec = wire.decode_operator(enc, 60)
    vals = np.linalg.eigvalsh(op)[::-1]
    dvals = np.linalg.eigvalsh(dec)[::-1]
    assert np.allclose(dvals[:5], vals[:5], atol=1e-12) and np.allclose(dvals[5:], 0, atol=1e-12)


def test_patterns_roundtrip_and_validation():
    p = data.random_archetypes(2, 10, 0)
    enc = wire.encode_patterns(p)
    assert enc.dtype == np.int8 and enc.nbytes == wire.patterns_nbytes(2, 10)
    assert np.array_equal(wire.decode_patterns(enc, 10), p)
    assert wire.decode_patterns(np.zeros((0, 10), np.int8), 10).shape == (0, 10)
    with pytest.raises(ValueError, match="int8"):
        wire.decode_patterns(p.astype(np.int64), 10)
    with pytest.raises(ValueError, match="-1 and \\+1"):
        wire.decode_patterns(np.zeros((1, 10), np.int8), 10)


@pytest.mark.parametrize(
    "payload, match",
    [
        ({"triu": np.zeros(5)}, "triu"),
        ({"triu": np.zeros(55, dtype=np.int64)}, "triu"),
        ({"triu": np.full(55, np.nan)}, "non-finite"),
        ({"values": np.ones(2), "vectors": np.ones((9, 2))}, "low-rank"),
        ({"other": np.ones(2)}, "keys"),
    ],
)
def test_decode_rejects_malformed(payload, match):
    with pytest.raises(ValueError, match=match):
        wire.decode_operator(payload, 10)


def test_encode_rejects_bad_input(op):
    with pytest.raises(ValueError, match="precision"):
        wire.encode_operator(op, "int8")
    with pytest.raises(ValueError, match="rank"):
        wire.encode_operator(op, rank=61)
    with pytest.raises(ValueError, match="square"):
        wire.encode_operator(op[:3])
    with pytest.raises(TypeError, match="float"):
        wire.encode_operator(np.eye(3, dtype=int))


def test_span_attack_recovers_small_batches_and_not_from_low_rank():
    from fedlam.flower.leakage import span_attack

    xi = data.random_archetypes(3, 200, 4)
    ex, _ = data.sample_examples(xi, 8, 0.8, np.full(3, 1 / 3), np.random.default_rng(1))
    B = operators.hebbian(ex)
    assert span_attack(B, ex, 8, 200, 0) == 1.0
    low = wire.decode_operator(wire.encode_operator(B, "float32", rank=2), 200)
    assert span_attack(low, ex, 2, 200, 0) == 0.0
    with pytest.raises(ValueError, match="operator"):
        span_attack(B[:5], ex, 8, 10, 0)


def test_app_subcommand_writes_project(tmp_path, capsys):
    import tomllib

    from fedlam.flower.config import RUN_DEFAULTS
    from fedlam.flower.local import main

    assert main(["app", str(tmp_path / "app")]) == 0
    cfg = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())
    assert cfg["tool"]["flwr"]["app"]["components"]["serverapp"] == "fedlam.flower.server_app:app"
    assert cfg["tool"]["flwr"]["app"]["config"] == RUN_DEFAULTS
    assert main(["app"]) == 2
    assert main(["nothing"]) == 2
