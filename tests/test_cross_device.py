"""fedlam.experiments.cross_device: parameters, run() shapes and determinism, the timed round loop
against run_federation, the closed forms of the many-clients derivation, and the issue-13
must-hold not covered by tests/test_khat.py (1000 clients x 5 examples at N = 784)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from fedlam import data, khat, operators, rmt
from fedlam import federation as F
from fedlam.experiments import cross_device as xdev
from fedlam.protocol import Upload

TINY = dict(N=60, K=2, archetypes="random", total=40, Ls=(1, 4, 20), T=2, fit_max_L=4, noise=(False, True),
            hetero_sizes=(1, 3, 12), hetero_intermittent=5, hetero_noise=8, n_top=4, seeds=1)
TIMING = ("t_sum", "t_rest", "t_eigh")
TW1_MEAN = -1.2065335745820  # mean of the Tracy-Widom (beta = 1) law, Bornemann (2010)


def test_presets_and_make_params():
    assert set(xdev.PRESETS) == {"book", "paper", "full"}
    assert xdev.PRESETS["paper"] == xdev.PRESETS["full"]  # not a paper experiment: one scale
    for p in xdev.PRESETS.values():
        dataclasses.replace(p)  # re-validates
    assert xdev.PRESETS["book"] != xdev.PRESETS["paper"]
    assert xdev.make_params("paper") == xdev.PRESETS["paper"]
    assert xdev.make_params("book", seeds=None) == xdev.PRESETS["book"]
    assert xdev.make_params("book", Ls=[1, 10]).Ls == (1, 10)  # papermill passes lists
    assert xdev.PRESETS["paper"].n_archetypes == 3 and xdev.PRESETS["book"].n_archetypes == 4
    with pytest.raises(TypeError, match="not_a_field"):
        xdev.make_params("book", not_a_field=1)
    with pytest.raises(ValueError, match="preset"):
        xdev.make_params("huge")


@pytest.mark.parametrize(
    "field, value, exc",
    [
        ("N", 5, ValueError),
        ("N", 400, ValueError),            # silhouettes need N = 784
        ("archetypes", "faces", ValueError),
        ("r", 1.0, ValueError),
        ("r", 0.0, ValueError),
        ("total", 0, ValueError),
        ("Ls", (10, 1), ValueError),
        ("Ls", [1, 10], TypeError),
        ("Ls", (1, 3), ValueError),        # 3 does not divide 5000
        ("Ls", (1, 10_000), ValueError),   # more clients than MAX_CLIENTS
        ("T", 0, ValueError),
        ("rules", ("scalars", "guess"), ValueError),
        ("rules", ("fit", "fit"), ValueError),
        ("rules", (), TypeError),
        ("fit_max_L", 0, ValueError),
        ("noise", (0,), TypeError),
        ("noise", (True, True), ValueError),
        ("controller", "magic", ValueError),
        ("controller", 1.5, ValueError),
        ("hetero_sizes", (1, 0), ValueError),
        ("hetero_intermittent", -1, ValueError),
        ("hetero_noise", 2.5, TypeError),
        ("aggregations", ("equal", "median"), ValueError),
        ("n_top", 10_000, ValueError),
        ("time_rounds", 1, TypeError),
        ("seeds", 0, ValueError),
    ],
)
def test_bad_fields_named(field, value, exc):
    with pytest.raises(exc, match=field):
        xdev.CrossDeviceParams(**{field: value})


def test_random_archetypes_bounded():
    with pytest.raises(ValueError, match="K must be <="):
        xdev.CrossDeviceParams(N=40, K=11, archetypes="random", total=40, Ls=(1,))


def test_run_shapes_determinism_and_json():
    p = xdev.make_params("book", **TINY)
    res = xdev.run(p, rng=3)
    S, nR, nN, nL, T = 1, 2, 2, 3, 2
    assert res.k_hat.shape == (S, nR, nN, nL, T) and res.magnetization.shape == (S, nR, nN, nL, T, 2)
    assert res.top.shape == (S, nR, nN, nL, T, 4)
    np.testing.assert_array_equal(res.Mc, [40, 10, 2])
    # the fit rule is not run above fit_max_L: -1 / NaN there, real values elsewhere
    assert np.all(res.k_hat[:, 1, :, 2] == -1) and np.all(np.isnan(res.magnetization[:, 1, :, 2]))
    assert np.all(res.k_hat[:, 0] >= 0) and np.all(res.k_hat[:, 1, :, :2] >= 0)
    assert np.all(np.isnan(res.t_eigh[:, 1, :, 2])) and np.all(res.t_eigh[:, 0] > 0)
    # heterogeneous part: 3 sizes + intermittent + noise client; the intermittent one is empty in round 0
    assert res.h_sizes.shape == (5, T)
    np.testing.assert_array_equal(res.h_sizes[:, 0], [1, 3, 12, 0, 8])
    np.testing.assert_array_equal(res.h_sizes[:, 1], [1, 3, 12, 5, 8])
    assert res.h_k_hat.shape == (S, 2, T) and res.h_weights.shape == (S, 2, T, 5)
    assert np.all(res.h_weights[:, :, 0, 3] == 0.0)  # empty batch: weight 0
    honest = np.array([1, 3, 12])
    assert math.isclose(res.h_m_eff[0, 0], 9 / np.sum(1 / honest))  # equal weights: L^2 / sum 1/M
    assert math.isclose(res.h_m_eff[1, 0], honest.sum())  # batch weights: pooled
    again = xdev.run(p, rng=3)
    d1, d2 = res.to_dict(), again.to_dict()
    for name in TIMING:
        d1.pop(name), d2.pop(name)
    d1.pop("summary"), d2.pop("summary")  # holds timing ratios
    assert d1 == d2
    json.dumps(res.to_dict())
    assert "CrossDeviceResult(N=60" in repr(res)
    untimed = xdev.run(dataclasses.replace(p, time_rounds=False, noise=(False,), rules=("scalars",),
                                           hetero_sizes=()), rng=3)
    assert np.all(untimed.t_eigh == 0.0) and untimed.h_k_hat.shape == (1, 0, T)
    np.testing.assert_array_equal(untimed.k_hat[:, 0, 0], res.k_hat[:, 0, 0])
    with pytest.raises(TypeError, match="params must be a CrossDeviceParams"):
        xdev.run({"N": 60}, rng=0)


@pytest.mark.parametrize("k_rule", ["scalars", "fit"])
@pytest.mark.parametrize("aggregation", ["equal", "batch"])
def test_federate_is_run_federation(k_rule, aggregation):
    """The timed loop reproduces run_federation exactly (sizes 1 to 60, an empty client, noise)."""
    N, K, T = 80, 3, 3
    xi = data.random_archetypes(K, N, 1)
    sizes = [1, 3, 10, 40, 0, 60]
    mix = data.static_mixture(T, len(sizes), K)
    specs = [F.ClientSpec(r=0.8, M=m, mixture=mix[:, c]) for c, m in enumerate(sizes)]
    specs.append(F.ClientSpec(M=20, kind="noise"))
    h = F.run_federation(xi, specs, T, 5, controller="novelty", k_rule=k_rule, aggregation=aggregation)
    log = xdev.federate(xi, specs, T, 5, k_rule=k_rule, aggregation=aggregation, time_rounds=False)
    np.testing.assert_array_equal(log.k_hat, h.k_hat)
    np.testing.assert_array_equal(log.n_patterns, h.n_patterns)
    np.testing.assert_array_equal(log.spurious, h.spurious)
    np.testing.assert_array_equal(log.magnetization, h.magnetization)
    np.testing.assert_array_equal(log.weights, h.weights)
    np.testing.assert_allclose(log.top[:, :4], N * h.top_eigenvalues[:, :4], rtol=1e-12)
    assert np.all(log.t_sum == 0.0)
    assert np.all(log.threshold >= log.edge)
    with pytest.raises(ValueError, match="k_rule"):
        xdev.federate(xi, specs, T, 5, k_rule="mp")


def test_effective_sample_size():
    sizes = np.array([1, 2, 5, 500])
    assert math.isclose(xdev.effective_sample_size(sizes), 16 / np.sum(1 / sizes))
    assert math.isclose(xdev.effective_sample_size(sizes, sizes / sizes.sum()), sizes.sum())
    assert math.isclose(xdev.effective_sample_size([10] * 7), 70)
    # empty clients and zero weights carry no example
    assert math.isclose(xdev.effective_sample_size([0, 4, 4]), 8)
    assert xdev.effective_sample_size([0, 0]) == 0.0
    with pytest.raises(ValueError, match="sizes"):
        xdev.effective_sample_size([1.5, 2])
    with pytest.raises(ValueError, match="weights"):
        xdev.effective_sample_size([1, 2], [1.0])


def test_effective_sample_size_is_the_spectrum_variance():
    """Equal mean of pure-noise uploads of unequal sizes: Var of the spectrum of N J = (N-1)/M_eff."""
    N, sizes = 120, (1, 3, 10, 60)
    rng = np.random.default_rng(0)
    pm1 = np.array([-1, 1], dtype=np.int8)
    v = np.array([np.linalg.eigvalsh(N * operators.aggregate(
        [operators.hebbian(rng.choice(pm1, size=(m, N))) for m in sizes])).var() for _ in range(40)])
    pred = (N - 1) / xdev.effective_sample_size(sizes)
    assert abs(v.mean() - pred) < 4 * v.std() / math.sqrt(v.size)


def test_spectrum_variance_closed_form_and_simulation():
    N, M, r = 60, 90, 0.9
    s2 = 1 - r * r
    k = 4 / s2 - 6
    assert math.isclose(xdev.spectrum_variance(N, M, s2, 0.0), s2**2 * N / M * (1 + 1 / N - 2 / N**2))
    rng = np.random.default_rng(1)
    for kk, draw in ((k, lambda: np.where(rng.random((M, N)) < (1 + r) / 2, 1.0, -1.0) - r),
                     (0.0, lambda: rng.standard_normal((M, N)) * math.sqrt(s2))):
        v = np.array([np.linalg.eigvalsh(Z.T @ Z / M).var() for Z in (draw() for _ in range(300))])
        assert abs(v.mean() - xdev.spectrum_variance(N, M, s2, kk)) < 4 * v.std() / math.sqrt(v.size)
    with pytest.raises(ValueError, match="kurtosis"):
        xdev.spectrum_variance(N, M, s2, -3.0)
    with pytest.raises(ValueError, match="s2"):
        xdev.spectrum_variance(N, M, 0.0, 0.0)


def test_kurtosis_edge_shift_closed_forms():
    N, s2, q, k = 300, 0.19, 0.5, 15.0
    edge, shift = khat.kurtosis_edge_shift([khat.Component(s2, q)], k, N)
    assert math.isclose(edge, s2 * (1 + math.sqrt(q)) ** 2, rel_tol=1e-10)
    assert math.isclose(shift, edge * math.sqrt(q) * k / N, rel_tol=1e-8)
    # L identical components: the pooled law's shift (sqrt of the pooled ratio)
    L, Mc = 50, 12
    e_L, s_L = khat.kurtosis_edge_shift([khat.Component(s2 / (L * N), N / Mc)] * L, k, N)
    qp = N / (L * Mc)
    assert math.isclose(s_L, e_L * math.sqrt(qp) * k / N, rel_tol=1e-7)
    # batch weights: any split is the pooled law, shift included
    sizes = np.array([1, 4, 30, 200])
    comps = [khat.Component(s2 * m / (sizes.sum() * N), N / m) for m in sizes]
    e_b, s_b = khat.kurtosis_edge_shift(comps, k, N)
    assert math.isclose(s_b, e_b * math.sqrt(N / sizes.sum()) * k / N, rel_tol=1e-7)
    assert khat.kurtosis_edge_shift([khat.Component(s2, q)], 0.0, N)[1] == 0.0
    with pytest.raises(ValueError, match="kurtosis"):
        khat.kurtosis_edge_shift([khat.Component(s2, q)] * 2, [1.0, 2.0, 3.0], N)
    with pytest.raises(TypeError, match="components"):
        khat.kurtosis_edge_shift(khat.Component(s2, q), k, N)
    with pytest.raises(ValueError, match="positive scales"):
        khat.kurtosis_edge_shift([khat.Component(0.0, q)], k, N)


def test_kurtosis_edge_shift_places_the_top_of_pooled_pm1_noise():
    """50 clients x 8 examples at r = 0.9 (k = 15), N = 200: the top eigenvalue of the pooled noise, in
    Tracy-Widom scales t above the server's edge (components from the uploads' scalars), has the TW1
    mean plus Johnstone's finite-size centring only with the kurtosis shift; the free edge and the
    variance-matched MP edge (ratio q (1 + k/N)) are rejected. Gaussian noise of the same variance sits
    at the free edge. Tolerance: four standard errors of the mean."""
    N, L, Mc, r, n = 200, 50, 8, 0.9, 100
    M, s2 = L * Mc, 1 - r * r
    comps, v = khat.components_from_uploads([Upload(None, Mc, 1.0, s2) for _ in range(L)], N=N)
    assert v == 0.0 and all(c.kurtosis == khat.pm1_kurtosis(s2) for c in comps)
    edge, shift = khat.kurtosis_edge_shift(comps, N=N)
    t = khat.free_tw_scale(comps, N)
    edge_vm = khat.free_edge([khat.Component(s2 / N, N / M * (1 + khat.pm1_kurtosis(s2) / N))])
    mu, sg = rmt.johnstone_center_scale(N, M)
    centre = (s2 / N * mu - edge) / t + TW1_MEAN * s2 / N * sg / t
    rng = np.random.default_rng(2)
    top_pm, top_g = np.empty(n), np.empty(n)
    for i in range(n):
        Z = np.where(rng.random((M, N)) < (1 + r) / 2, 1.0, -1.0) - r
        top_pm[i] = np.linalg.eigvalsh(Z.T @ Z / (N * M))[-1]
        G = rng.standard_normal((M, N)) * math.sqrt(s2)
        top_g[i] = np.linalg.eigvalsh(G.T @ G / (N * M))[-1]

    def off(top, e):
        z = (top - e) / t
        return abs(z.mean() - centre), 4 * z.std() / math.sqrt(n)

    d, tol = off(top_g, edge)
    assert d < tol
    d, tol = off(top_pm, edge + shift)
    assert d < tol
    for e in (edge, edge_vm):
        d, tol = off(top_pm, e)
        assert d > tol


def test_fit_rule_fails_on_small_uploads_scalars_do_not():
    """One round of 60 clients x 6 examples (N = 200, K = 3): a 6-example upload has no bulk, the
    per-upload fit reads it as 6 spikes and K-hat hits the cap N/4 (with the paper's acceptance);
    the scalar edge gives K. The default fresh acceptance certifies every detected direction against
    the uploads and keeps only the K archetypes' even after the fit rule's over-count."""
    N, K, L, Mc = 200, 3, 60, 6
    xi = data.random_archetypes(K, N, 7)
    specs = [F.ClientSpec(r=0.8, M=Mc, mixture=m) for m in np.swapaxes(data.static_mixture(1, L, K), 0, 1)]
    fit = xdev.federate(xi, specs, 1, 2, k_rule="fit", time_rounds=False, acceptance="paper")
    for acc in ("paper", None):
        sc = xdev.federate(xi, specs, 1, 2, k_rule="scalars", time_rounds=False, acceptance=acc)
        assert sc.k_hat[0] == K and sc.spurious[0] == 0 and sc.magnetization.min() >= 0.95
    assert fit.k_hat[0] == N // 4 and fit.edge[0] == 0.0
    fresh = xdev.federate(xi, specs, 1, 2, k_rule="fit", time_rounds=False)
    assert fresh.k_hat[0] == K and fresh.spurious[0] == 0 and fresh.magnetization.min() >= 0.95


@pytest.mark.slow
def test_thousand_phones_at_784_finish():
    """Issue 13 must-hold: 1000 clients x 5 examples at N = 784 (the silhouettes) finish; the server
    detects and recovers the three archetypes without a spurious pattern."""
    xi = data.structured_archetypes(method="medoid")
    L, K = 1000, xi.shape[0]
    mix = data.static_mixture(1, L, K)
    specs = [F.ClientSpec(r=0.8, M=5, mixture=mix[:, c]) for c in range(L)]
    log = xdev.federate(xi, specs, 1, 0, time_rounds=False)
    assert log.k_hat[0] == K and log.spurious[0] == 0 and log.magnetization.min() >= 0.95


def test_notebook_tables():
    p = xdev.make_params("book", **TINY)
    res = xdev.run(dataclasses.replace(p, time_rounds=False), rng=3)
    split = xdev.split_table(res)
    # rows: every (rule, noise, L) that was run -- the fit rule only up to fit_max_L
    n_run = sum(int(np.all(res.k_hat[:, ri, ni, li] >= 0)) for ri in range(2) for ni in range(2)
                for li in range(len(p.Ls)))
    assert len(split.table.rows) == n_run < 2 * 2 * len(p.Ls)
    assert split._repr_html_().startswith('<table class="fedlam-comparison"><caption>K-hat')
    assert split._repr_markdown_().startswith("**K-hat, recovery")
    het = xdev.hetero_table(res)
    assert len(het.table.rows) == len(p.aggregations) * p.T
    assert het.table.rows[0][2] == f"{res.h_m_eff[0, 0]:.0f}"
    assert ("dimension N, archetypes", "60, 2 (random)") in xdev.setting_table(p).table.rows
    empty = xdev.run(dataclasses.replace(p, time_rounds=False, hetero_sizes=(), hetero_intermittent=0,
                                         hetero_noise=0, rules=("scalars",)), rng=3)
    assert xdev.hetero_table(empty).table.rows == []
    with pytest.raises(TypeError, match="res must be a CrossDeviceResult"):
        xdev.split_table(p)
    with pytest.raises(TypeError, match="title must be a non-empty str"):
        xdev.TitledTable("", [], ("a",))


def test_pm1_bulk_tops():
    xi = data.random_archetypes(2, 40, 0)
    a = xdev.pm1_bulk_tops(40, 80, 0.9, xi, 3, np.random.default_rng(1))
    b = xdev.pm1_bulk_tops(40, 80, 0.9, xi, 3, 1)
    assert set(a) == {"noise pm1", "noise gauss", "examples pm1", "examples gauss"}
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert a[k].shape == (3,) and np.all(a[k] > 0)
    # the K = 2 spikes are skipped: the examples' bulk top is far below their outliers
    assert a["examples pm1"].max() < 3 * a["noise pm1"].max()
    with pytest.raises(ValueError, match="archetypes must be a"):
        xdev.pm1_bulk_tops(40, 80, 0.9, xi[:, :10], 3, 1)
    with pytest.raises(ValueError, match="r must be a float in"):
        xdev.pm1_bulk_tops(40, 80, 1.0, xi, 3, 1)
    with pytest.raises(TypeError, match="n_draws"):
        xdev.pm1_bulk_tops(40, 80, 0.9, xi, 2.0, 1)
