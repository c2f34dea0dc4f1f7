"""Tests for fedlam.cost (the operation-count model of {ref}`sec-cost`)."""

import numpy as np
import pytest

from fedlam import cost


def _by_name(stages):
    return {s.stage: s for s in stages}


def test_stage_order_and_scaling_exponents():
    small = _by_name(cost.round_cost(200, 100, 3, n_seeds=8))
    big = _by_name(cost.round_cost(400, 100, 3, n_seeds=8))
    # doubling N: client operator x4, eigendecomposition x8, literal dreaming x8,
    # eigenvalue flow x2, subspace LAM ~x2, dense LAM ~x4
    assert big["client operator"].ours / small["client operator"].ours == pytest.approx(4.0)
    assert big["eigendecomposition"].ours / small["eigendecomposition"].ours == pytest.approx(8.0)
    assert big["sharpening (dreaming)"].literal / small["sharpening (dreaming)"].literal == pytest.approx(8.0)
    assert big["sharpening (dreaming)"].ours / small["sharpening (dreaming)"].ours == pytest.approx(2.0)
    assert big["LAM dynamics"].ours / small["LAM dynamics"].ours == pytest.approx(2.0, rel=0.05)
    assert big["LAM dynamics"].literal / small["LAM dynamics"].literal == pytest.approx(4.0, rel=0.05)


def test_linear_in_M_and_dream_steps():
    a = _by_name(cost.round_cost(300, 100, 3))
    b = _by_name(cost.round_cost(300, 300, 3, dream_steps=600))
    assert b["client operator"].ours == pytest.approx(3 * a["client operator"].ours)
    assert b["sharpening (dreaming)"].literal == pytest.approx(3 * a["sharpening (dreaming)"].literal)


def test_eigendecomposition_is_the_floor_of_ours_at_scale():
    stages = cost.round_cost(1000, 800, 6)
    server = [s for s in stages if s.where == "server"]
    top = max(server, key=lambda s: s.ours)
    assert top.stage == "eigendecomposition"
    assert cost.total_cost(stages, "literal") > 30 * cost.total_cost(stages, "ours") / 2


def test_k_hat_zero_has_no_lam_cost():
    st = _by_name(cost.round_cost(100, 10, 0, n_seeds=5))
    assert st["LAM dynamics"].ours == 0 and st["LAM dynamics"].literal == 0
    assert st["seeding"].ours == 0


def test_default_seeds_match_lam_params_rule():
    st = _by_name(cost.round_cost(100, 10, 6, layers=1, steps=1))
    # s = max(8, 2*6) = 12 runs, ours = 4 s P N K + s P^2 K
    assert st["LAM dynamics"].ours == pytest.approx(4 * 12 * 100 * 6 + 12 * 6)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(N=1, M=10, K_hat=1), ValueError, "N must be >= 2, got 1"),
        (dict(N=10.0, M=10, K_hat=1), TypeError, "N must be an int, got float 10.0"),
        (dict(N=10, M=0, K_hat=1), ValueError, "M must be >= 1, got 0"),
        (dict(N=10, M=10, K_hat=-1), ValueError, "K_hat must be >= 0, got -1"),
        (dict(N=10, M=10, K_hat=1, eigh_constant=0.0), ValueError, "eigh_constant must be > 0"),
        (dict(N=10, M=10, K_hat=1, layers=True), TypeError, "layers must be an int, got bool True"),
    ],
)
def test_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cost.round_cost(**kwargs)


def test_total_cost_validation():
    st = cost.round_cost(50, 10, 2)
    with pytest.raises(ValueError, match="which"):
        cost.total_cost(st, "fast")
    with pytest.raises(TypeError, match="stages"):
        cost.total_cost(list(st))


def test_loglog_slope_recovers_exponent():
    x = np.array([100.0, 200.0, 400.0, 800.0])
    assert cost.loglog_slope(x, 3.0 * x**2.5) == pytest.approx(2.5)
    with pytest.raises(ValueError, match="need at least 2 points"):
        cost.loglog_slope([1.0], [1.0])
    with pytest.raises(ValueError, match="must be finite and > 0"):
        cost.loglog_slope([1.0, 2.0], [1.0, -1.0])
    with pytest.raises(ValueError, match="sizes must not all be equal"):
        cost.loglog_slope([2.0, 2.0], [1.0, 3.0])


def test_stage_table_rows_and_title():
    stages = cost.round_cost(1000, 800, 3, clients=5)
    table = cost.stage_table(stages, "One round at N = 1000")
    text = repr(table)
    assert text.startswith("**One round at N = 1000**")
    assert "<caption>One round at N = 1000</caption>" in table._repr_html_()
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    assert len(lines) == 1 + len(stages)            # header + one row per stage
    eig = next(ln for ln in lines if ln.startswith("| eigendecomposition "))
    assert "| server | 9.0e+09 | N^3 | 9.0e+09 | N^3 |" in eig
    dream = next(ln for ln in lines if ln.startswith("| sharpening (dreaming) "))
    assert "1.0e+03 | N | 4.0e+11 | I N^3" in dream


@pytest.mark.parametrize("bad", [(), [1], ("stage",), None])
def test_stage_table_bad_input(bad):
    with pytest.raises(TypeError, match="stages must be a non-empty tuple of StageCost"):
        cost.stage_table(bad)


def test_stage_table_bad_title():
    stages = cost.round_cost(1000, 800, 3)
    with pytest.raises(TypeError, match="title must be a non-empty str"):
        cost.stage_table(stages, "")
    with pytest.raises(TypeError, match="title must be a non-empty str"):
        cost.stage_table(stages, None)
