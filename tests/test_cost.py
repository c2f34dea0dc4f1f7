"""Tests for fedlam.cost (the operation-count model of {ref}`sec-cost`)."""

import numpy as np
import pytest

from fedlam import cost


def _by_name(stages):
    return {s.stage: s for s in stages}


def test_stage_order_and_scaling_exponents():
    small = _by_name(cost.round_cost(200, 100, 3, n_seeds=8))
    big = _by_name(cost.round_cost(400, 100, 3, n_seeds=8))
    # doubling N: client operator x4, literal dense eigh x8, literal dreaming x8,
    # eigenvalue flow x2, subspace LAM ~x2, dense LAM ~x4
    assert big["client operator"].ours / small["client operator"].ours == pytest.approx(4.0)
    assert big["spectrum"].literal / small["spectrum"].literal == pytest.approx(8.0)
    assert big["sharpening (dreaming)"].literal / small["sharpening (dreaming)"].literal == pytest.approx(8.0)
    assert big["sharpening (dreaming)"].ours / small["sharpening (dreaming)"].ours == pytest.approx(2.0)
    assert big["LAM dynamics"].ours / small["LAM dynamics"].ours == pytest.approx(2.0, rel=0.05)
    assert big["LAM dynamics"].literal / small["LAM dynamics"].literal == pytest.approx(4.0, rel=0.05)


def test_spectrum_below_block_min_n_is_lapack_subset():
    # N < 500: the server asks LAPACK for the top 16 pairs, 4/3 N^3 + 2 N^2 k
    st = _by_name(cost.round_cost(400, 100, 3))
    assert st["spectrum"].ours == pytest.approx(4 / 3 * 400**3 + 2 * 400**2 * 16)
    assert st["spectrum"].ours_order == "N^3"
    assert st["spectrum"].literal == pytest.approx(9 * 400**3)
    # all N pairs (top_k = N): one full eigendecomposition
    assert _by_name(cost.round_cost(100, 10, 3, top_k=100))["spectrum"].ours == pytest.approx(9e6)


def test_linear_in_M_and_dream_steps():
    a = _by_name(cost.round_cost(300, 100, 3))
    b = _by_name(cost.round_cost(300, 300, 3, dream_steps=600))
    assert b["client operator"].ours == pytest.approx(3 * a["client operator"].ours)
    assert b["sharpening (dreaming)"].literal == pytest.approx(3 * a["sharpening (dreaming)"].literal)


def _johnstone_scale(N, M):
    """Johnstone's Tracy-Widom scale (the 'half' variant), written out for the test."""
    m, n = M - 0.5, N - 0.5
    return (np.sqrt(m) + np.sqrt(n)) * (1 / np.sqrt(m) + 1 / np.sqrt(n)) ** (1 / 3) / M


def test_block_solver_cost_formula_by_hand():
    # N = 1200, q = 1/3 (M = 3600), 5 spikes, k = 16, b = 24, no threshold: every bulk value
    # i = 6..16 gets t_i = 1 + ceil(arccosh(tan0/sqrt(eps)) / arccosh(1 + 2 gamma)); the
    # prediction is the largest
    N, q, K = 1200, 1 / 3, 5
    s = _johnstone_scale(N, 3600)
    spread = 4 * np.sqrt(q)
    pos = lambda j: (1.5 * np.pi * j) ** (2 / 3)  # noqa: E731
    ts = []
    for i in range(K + 1, 17):
        j = i - K
        gamma = s * (pos(25 - K) - pos(j)) / spread
        eps = (0.1 * s + 0.25 * s * max(pos(j) - 4, 0)) / spread
        tan0 = np.sqrt(N / (24 - i + 1))
        ts.append(1 + int(np.ceil(np.arccosh(tan0 / np.sqrt(eps)) / np.arccosh(1 + 2 * gamma))))
    est = cost.block_solver_cost(N, q, K, k=16, n_sigma=None)
    assert est.blocks == max(ts) and est.limiting == K + 1 + int(np.argmax(ts))
    assert est.block_size == 24 and est.columns == 24 * est.blocks
    assert est.product_flops == pytest.approx(2 * N**2 * 24 * est.blocks)
    assert est.rayleigh_ritz_flops == pytest.approx(28 * N * 24**2 * est.blocks)
    assert est.flops == pytest.approx(est.product_flops + est.rayleigh_ritz_flops)
    # under the threshold tau = edge + 4 s every bulk value lies >= 4 s below tau: half the distance
    ts_thr = []
    for i in range(K + 1, 17):
        j = i - K
        gamma = s * (pos(25 - K) - pos(j)) / spread
        eps = 0.5 * s * (4 + pos(j)) / spread
        ts_thr.append(1 + int(np.ceil(np.arccosh(np.sqrt(N / (25 - i)) / np.sqrt(eps))
                                      / np.arccosh(1 + 2 * gamma))))
    assert cost.block_solver_cost(N, q, K, k=16).blocks == max(ts_thr)
    # by default the server's size: 8 pairs under the threshold (b = 16), 16 without (b = 24)
    assert cost.block_solver_cost(N, q, K).block_size == 16
    assert cost.block_solver_cost(N, q, K, n_sigma=None).block_size == 24


def test_block_solver_cost_scaling_and_monotonicity():
    Ns = np.array([1e3, 1e4, 1e5, 1e6]).astype(int)
    t = np.array([cost.block_solver_cost(int(n), 1 / 3, 5).blocks for n in Ns])
    slope = cost.loglog_slope(Ns, t)
    # N^{1/3} times a logarithm: above 1/3, well below 1/2
    assert 1 / 3 < slope < 0.5
    # the threshold only relaxes; a wider gap (more oversampling) needs fewer products
    for n in (1000, 10000):
        assert cost.block_solver_cost(n, 0.25, 3).blocks <= cost.block_solver_cost(n, 0.25, 3, n_sigma=None).blocks
        assert (cost.block_solver_cost(n, 0.25, 3, oversample=24).blocks
                < cost.block_solver_cost(n, 0.25, 3).blocks)
    # q >= 1: the bulk reaches the zeros, spread = edge
    assert cost.block_solver_cost(2000, 2.0, 3).blocks >= 2


def test_round_cost_spectrum_is_the_block_solver():
    stages = cost.round_cost(1000, 800, 3, clients=5)
    st = _by_name(stages)
    est = cost.block_solver_cost(1000, 1000 / (5 * 800), 3)
    assert st["spectrum"].ours == pytest.approx(est.flops)
    assert st["spectrum"].ours_order == "b t N^2"
    assert st["spectrum"].literal == pytest.approx(9e9)
    # a few passes over J: far below one eigh, and the largest server stage of fedlam's round
    assert st["spectrum"].ours < 0.2 * st["spectrum"].literal
    server = [s for s in stages if s.where == "server"]
    assert max(server, key=lambda s: s.ours).stage == "spectrum"
    # the threshold switch and the oversampling reach the model
    no_thr = _by_name(cost.round_cost(1000, 800, 3, clients=5, n_sigma=None))["spectrum"].ours
    assert no_thr == pytest.approx(cost.block_solver_cost(1000, 0.25, 3, n_sigma=None).flops)
    # K_hat >= 7 under the threshold: the server computes 32 pairs; without one, 64 from K_hat = 8
    st8 = _by_name(cost.round_cost(1000, 800, 8, clients=5))
    assert st8["spectrum"].ours == pytest.approx(cost.block_solver_cost(1000, 0.25, 8, k=32).flops)
    st8n = _by_name(cost.round_cost(1000, 800, 8, clients=5, n_sigma=None))
    assert st8n["spectrum"].ours == pytest.approx(cost.block_solver_cost(1000, 0.25, 8, k=64, n_sigma=None).flops)


def test_server_top_k_rule():
    # under the count threshold: 8, grown 4x while fewer than two computed values lie below it
    assert cost.server_top_k(1000, 0) == 8 and cost.server_top_k(1000, 6) == 8
    assert cost.server_top_k(1000, 7) == 32 and cost.server_top_k(1000, 30) == 32
    assert cost.server_top_k(1000, 31) == 128 and cost.server_top_k(100, 60) == 100
    # without one (the bulk-fitting rules): 16, grown while K_hat >= k - 8
    assert cost.server_top_k(1000, 7, threshold=False) == 16 and cost.server_top_k(1000, 8, threshold=False) == 64
    assert cost.server_top_k(1000, 56, threshold=False) == 256
    assert cost.server_top_k(10, 3) == 10 and cost.server_top_k(10, 3, threshold=False) == 10
    with pytest.raises(TypeError, match="threshold"):
        cost.server_top_k(1000, 3, threshold=1)


def test_server_top_k_is_the_size_the_server_solves():
    """The cost model's rule is the one the server's spectrum follows (lam._server_spectrum)."""
    from fedlam import data, operators
    from fedlam.federation import Server
    from fedlam.protocol import Upload

    rng = np.random.default_rng(5)
    for K in (6, 7):
        xi = data.random_archetypes(K, 600, rng)
        ups = [Upload(operators.hebbian(data.sample_examples(xi, 1200, 0.9, np.full(K, 1 / K), rng)[0]),
                      1200, 1.0, 1 - 0.9**2) for _ in range(2)]
        res = Server().round(ups, np.random.default_rng(0)).result
        assert res.k_hat == K
        assert len(res.values) == cost.server_top_k(600, K) == (8 if K == 6 else 32)


def test_literal_dreaming_is_44_dense_eighs_and_far_above_ours():
    stages = cost.round_cost(1000, 800, 6)
    st = _by_name(stages)
    assert st["sharpening (dreaming)"].literal / st["spectrum"].literal == pytest.approx(400 / 9)
    assert cost.total_cost(stages, "literal") > 100 * cost.total_cost(stages, "ours")


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
        (dict(N=1000, M=10, K_hat=3, top_k=3), ValueError, "top_k must satisfy K_hat < top_k <= N"),
        (dict(N=1000, M=10, K_hat=3, top_k=2000), ValueError, "top_k must satisfy"),
        (dict(N=1000, M=10, K_hat=3, top_k=16.0), TypeError, "top_k must be an int"),
        (dict(N=1000, M=10, K_hat=3, oversample=0), ValueError, "oversample must be >= 1"),
        (dict(N=1000, M=10, K_hat=3, n_sigma="4"), TypeError, "n_sigma must be a real number"),
        (dict(N=100, M=10, K_hat=3, n_sigma="4"), TypeError, "n_sigma must be a real number"),
        (dict(N=1000, M=10, K_hat=3, n_sigma=-1.0), ValueError, "n_sigma must be >= 0 or None"),
    ],
)
def test_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cost.round_cost(**kwargs)


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        ((40, 0.5), {}, ValueError, "N must be >= 48"),
        ((1000, 0.0), {}, ValueError, "q must be > 0"),
        ((1000, float("inf")), {}, ValueError, "q must be finite"),
        ((1000, "0.5"), {}, TypeError, "q must be a real number"),
        ((1000, 0.5, 16), dict(k=16), ValueError, "K_hat must be < k = 16"),
        ((1000, 0.5, -1), {}, ValueError, "K_hat must be >= 0"),
        ((1000, 0.5), dict(k=0), ValueError, "k must be >= 1"),
        ((1000, 0.5), dict(value_fraction=0.0), ValueError, "value_fraction must be > 0"),
        ((1000, 0.5), dict(depth_fraction=-0.1), ValueError, "depth_fraction must be >= 0"),
    ],
)
def test_block_solver_cost_bad_input(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cost.block_solver_cost(*args, **kwargs)


def test_random_start_tangent_matches_the_derived_constant():
    # tan of v_i with a Gaussian N x b block, v_1 .. v_{i-1} cancelled: about sqrt(N / (b - i + 1))
    for N, i in ((800, 1), (800, 16), (3200, 6)):
        tan = cost.random_start_tangent(N, 24, i)
        assert 0.7 < tan / np.sqrt(N / (24 - i + 1)) < 1.4
    with pytest.raises(ValueError, match="index must be <= block = 24"):
        cost.random_start_tangent(800, 24, 25)
    with pytest.raises(ValueError, match="N must be >= 25"):
        cost.random_start_tangent(24, 24, 1)


def test_measure_block_counts_below_the_prediction():
    bc = cost.measure_block_counts((400, 640))
    assert bc.sizes == (400, 640) and bc.k_hat == (5, 5)
    for measured, predicted in ((bc.measured, bc.predicted), (bc.measured_threshold, bc.predicted_threshold)):
        assert all(0.5 * p <= m <= p for m, p in zip(measured, predicted))
    assert all(c <= 24 * m for c, m in zip(bc.columns, bc.measured))
    text = repr(bc)
    assert text.startswith("**Block products of the solver") and "| 400 | 5 |" in text
    assert "<caption>" in bc._repr_html_()
    with pytest.raises(TypeError, match="sizes must be a non-empty tuple"):
        cost.measure_block_counts([400])
    with pytest.raises(ValueError, match=r"sizes\[\] must be >= 160"):
        cost.measure_block_counts((100,))
    with pytest.raises(ValueError, match="n_archetypes must be < k = 16"):
        cost.measure_block_counts((400,), n_archetypes=16)
    with pytest.raises(ValueError, match="r must be in"):
        cost.measure_block_counts((400,), r=1.0)


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
    spec = next(ln for ln in lines if ln.startswith("| spectrum "))
    flops = cost.block_solver_cost(1000, 0.25, 3).flops
    assert f"| server | {flops:.1e} | b t N^2 | 9.0e+09 | N^3 |" in spec
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
