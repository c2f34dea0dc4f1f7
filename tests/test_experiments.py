"""Tests of fedlam.experiments: parameter validation, presets, determinism and shapes of run()."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from fedlam.experiments import adversarial, baselines, bbp, drift, novelty, structured
from fedlam.experiments._common import jsonable, make_params, markdown_table

MODULES = [bbp, adversarial, drift, novelty, structured, baselines]

TINY = {
    bbp: dict(N=40, Ms=(40, 80), seeds=2, pi=(0.6, 0.3, 0.1), n_top=5, r=0.5),
    drift: dict(N=40, T=4, M=30, seeds=1, controllers=(0.0, "novelty")),
    novelty: dict(N=40, T=5, t_intro=2, ramp=2, M=30, K_old=2, K_new=1, seeds=1, controllers=("novelty",)),
    adversarial: dict(N=40, M=40, T=3, n_good=4, attacks=("noise", "flip"), defenses=("none",),
                      controllers=("paper",), t_new=None, seeds=1),
    structured: dict(rs=(0.8,), decorrelated=(False,), T=2, M_total=60, seeds=1, Ks=(3,), n_subsets=1,
                     examples_per_class=80, searches=("span",), fed_subsets=1, fed_T=1, fed_examples_per_class=30),
    baselines: dict(scenarios=("drift",), N=40, T=4, M=30, seeds=1),
}


def _params_cls(mod):
    return type(mod.PRESETS["book"])


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.split(".")[-1])
def test_presets_are_valid_and_distinct(mod):
    assert set(mod.PRESETS) == {"book", "paper", "full"}
    cls = _params_cls(mod)
    for p in mod.PRESETS.values():
        assert isinstance(p, cls)
        dataclasses.replace(p)  # re-validates
    assert mod.PRESETS["book"] != mod.PRESETS["paper"]
    assert mod.make_params("paper") == mod.PRESETS["paper"]


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.split(".")[-1])
def test_make_params_overrides_and_rejects(mod):
    p = mod.make_params("book", seeds=4)
    assert p.seeds == 4
    assert mod.make_params("book", seeds=None) == mod.PRESETS["book"]
    with pytest.raises(TypeError, match="not_a_field"):
        mod.make_params("book", not_a_field=1)
    with pytest.raises(ValueError, match="preset"):
        mod.make_params("huge")
    with pytest.raises(ValueError, match="seeds"):
        mod.make_params("book", seeds=0)
    with pytest.raises(TypeError, match="seeds"):
        mod.make_params("book", seeds=2.5)


@pytest.mark.parametrize(
    "cls, field, value, exc",
    [
        (bbp.BBPParams, "r", 1.0, ValueError),
        (bbp.BBPParams, "pi", (0.5, 0.6), ValueError),
        (bbp.BBPParams, "Ms", [400], TypeError),
        (bbp.BBPParams, "N", 5, ValueError),
        (drift.DriftParams, "controllers", ("paper", "magic"), ValueError),
        (drift.DriftParams, "controllers", (1.5,), ValueError),
        (drift.DriftParams, "known_r", 1, TypeError),
        (drift.DriftParams, "r", 0.0, ValueError),
        (drift.DriftParams, "acceptance", "support", ValueError),
        (drift.DriftParams, "acceptance", None, TypeError),
        (novelty.NoveltyParams, "t_intro", 99, ValueError),
        (novelty.NoveltyParams, "ramp", 0, ValueError),
        (novelty.NoveltyParams, "acceptance", "median", ValueError),
        (novelty.NoveltyParams, "acceptance", 2, TypeError),
        (adversarial.AdversarialParams, "attacks", ("noise", "virus"), ValueError),
        (adversarial.AdversarialParams, "r_good", 2.0, ValueError),
        (structured.StructuredParams, "rs", (0.6, 1.2), ValueError),
        (structured.StructuredParams, "decorrelated", (0,), TypeError),
        (structured.StructuredParams, "method", "median", ValueError),
        (structured.StructuredParams, "Ks", (1, 3), ValueError),
        (structured.StructuredParams, "Ks", (3, 3), ValueError),
        (structured.StructuredParams, "Ks", (3, 41), ValueError),
        (structured.StructuredParams, "Ks", [3, 5], TypeError),
        (structured.StructuredParams, "searches", ("span", "greedy"), ValueError),
        (structured.StructuredParams, "searches", ("span", "span"), ValueError),
        (structured.StructuredParams, "searches", "span", TypeError),
        (structured.StructuredParams, "fed_subsets", 11, ValueError),
        (structured.StructuredParams, "examples_per_class", 10**6, ValueError),
        (structured.StructuredParams, "fed_examples_per_class", 0, ValueError),
        (structured.StructuredParams, "subset_seed", -1, ValueError),
        (baselines.BaselinesParams, "methods", ("federated", "ensemble"), ValueError),
        (baselines.BaselinesParams, "scenarios", ("drift", "drift"), ValueError),
    ],
)
def test_bad_fields_named(cls, field, value, exc):
    with pytest.raises(exc, match=field):
        cls(**{field: value})


def test_make_params_turns_lists_into_tuples():
    p = make_params(bbp.BBPParams, bbp.PRESETS, "book", Ms=[100, 200])
    assert p.Ms == (100, 200)


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.split(".")[-1])
def test_run_rejects_wrong_params_type(mod):
    with pytest.raises(TypeError, match="params"):
        mod.run(object(), 0)


@pytest.mark.parametrize("mod", MODULES, ids=lambda m: m.__name__.split(".")[-1])
def test_run_tiny_is_deterministic_and_serialisable(mod):
    p = _params_cls(mod)(**TINY[mod])
    a = mod.run(p, 3)
    b = mod.run(p, np.random.default_rng(3))
    da, db = a.to_dict(), b.to_dict()
    assert da == db
    json.dumps(da, allow_nan=False)  # strictly JSON (NaN -> null)
    json.dumps(jsonable(a.summary), allow_nan=False)


def test_bbp_shapes_and_theory():
    p = bbp.BBPParams(**TINY[bbp])
    res = bbp.run(p, 0)
    S, nM, K = p.seeds, len(p.Ms), p.K
    assert res.top_values.shape == (S, nM, p.n_top)
    assert res.overlap.shape == res.subspace_overlap.shape == res.attributed_values.shape == (S, nM, K)
    assert res.n_detected.shape == (S, nM)
    assert np.all(np.diff(res.top_values, axis=2) <= 1e-12)
    assert np.all((res.overlap >= 0) & (res.overlap <= 1 + 1e-12))
    # theory is NaN exactly where the spike is subcritical
    assert np.array_equal(np.isnan(res.lambda_theory), ~res.supercritical)
    np.testing.assert_allclose(res.kappa, p.N * p.r**2 * np.array(p.pi) / (1 - p.r**2))


def test_bbp_tables_and_outlier_check():
    p = bbp.BBPParams(**TINY[bbp])
    res = bbp.run(p, 0)
    n_sup = int(res.supercritical.sum())
    assert len(bbp.spike_table(res).table.rows) == p.K
    assert len(bbp.detection_table(res).table.rows) == len(p.Ms)
    assert len(bbp.outlier_table(res).table.rows) == n_sup
    assert len(bbp.overlap_table(res).table.rows) == n_sup
    assert len(bbp.paper_table(res).table.rows) == 4
    assert bbp.setting_table(p).title == "Setting"
    chk = bbp.outlier_law_check(res)
    checked = res.kappa[chk.mu] > 2 * np.sqrt(res.q[chk.m])
    assert checked.all() and chk.mu.size == int((res.kappa[None, :] > 2 * np.sqrt(res.q)[:, None]).sum())
    np.testing.assert_allclose(chk.law, res.lambda_theory[chk.m, chk.mu])
    np.testing.assert_allclose(chk.mean, res.attributed_values.mean(axis=0)[chk.m, chk.mu])
    assert np.all(chk.sd > 0) and np.all(chk.bias >= 0) and np.all(np.isfinite(chk.z))
    for fn in (bbp.spike_table, bbp.outlier_table, bbp.outlier_law_check, bbp.paper_table):
        with pytest.raises(TypeError, match="res must be a BBPResult"):
            fn(p)
    with pytest.raises(TypeError, match="params must be a BBPParams"):
        bbp.setting_table(res)


def test_r_squared():
    x = np.array([1.0, 2.0, 3.0])
    assert bbp.r_squared(x, x) == 1.0
    assert bbp.r_squared(x, x + 1) < 1.0
    assert np.isnan(bbp.r_squared(np.array([1.0]), np.array([1.0])))


def test_drift_shapes():
    p = drift.DriftParams(**TINY[drift])
    res = drift.run(p, 0)
    C = len(p.controllers)
    assert res.magnetization.shape == (p.seeds, C, p.T, p.K)
    assert res.weights.shape == (p.seeds, C, p.T, p.L)
    assert res.pi.shape == (p.T, p.K)
    np.testing.assert_allclose(res.pi.sum(axis=1), 1.0)
    # the constant controller really is constant after round 0
    np.testing.assert_allclose(res.weights[:, 0, 1:], 0.0)


@pytest.mark.parametrize("params_cls", [drift.DriftParams, novelty.NoveltyParams], ids=["drift", "novelty"])
@pytest.mark.parametrize("value", ["support", 1])
def test_acceptance_refused_as_run_federation_refuses(params_cls, value):
    from fedlam import federation

    with pytest.raises((TypeError, ValueError)) as ref:
        federation.Server(acceptance=value)
    with pytest.raises(ref.type, match="acceptance") as got:
        params_cls(acceptance=value)
    assert str(got.value) == str(ref.value)


def test_drift_acceptance_reaches_the_server_and_table():
    p = drift.DriftParams(**{**TINY[drift], "controllers": (0.0, "paper", "novelty"), "seeds": 2,
                             "acceptance": "paper"})
    assert drift.DriftParams().acceptance == "voted"  # the default
    res = drift.run(p, 5)
    pf = dataclasses.replace(p, controllers=("novelty",), acceptance="fresh")
    fresh = drift.run(pf, 5)
    # the option reaches run_federation: the same seed under the fresh acceptance
    from fedlam import data, federation

    (a, b), = drift.seed_pairs(5, 1)
    xi = data.random_archetypes(p.K, p.N, a)
    sched = data.sequential_drift(p.T, p.L, p.K)
    specs = [federation.ClientSpec(r=p.r, M=p.M, mixture=sched[:, c]) for c in range(p.L)]
    h = federation.run_federation(xi, specs, p.T, b, controller="novelty", acceptance="fresh")
    np.testing.assert_array_equal(fresh.magnetization[0, 0], h.magnetization)
    np.testing.assert_array_equal(fresh.spurious[0, 0], h.spurious)
    tab = drift.acceptance_table(res, fresh)
    rows = tab.table.rows
    assert [r[:2] for r in rows] == [("our novelty rule", "paper"), ("our novelty rule", "fresh")]
    for row, r, i in ((rows[0], res, 2), (rows[1], fresh, 0)):
        sp = r.spurious[:, i, -1]
        assert row[2] == f"{sp.mean():.2f} ({sp.max()})"
        assert row[3] == f"{r.k_hat[:, i, -1].mean():.2f}"
        assert row[5] == f"{r.magnetization[:, i, -1].min(axis=1).mean():.2f}"
        assert row[6] == f"{r.magnetization[:, i].mean():.3f}"
    # the other way round (the book's pages): a default run of every rule beside a paper run
    # of fewer rules shows the paper run's rules, with the same rows
    all_fresh = drift.run(dataclasses.replace(p, acceptance="fresh"), 5)
    res_nov = drift.run(dataclasses.replace(p, controllers=("novelty",)), 5)
    assert drift.acceptance_table(res_nov, all_fresh).table.rows == rows
    with pytest.raises(ValueError, match="acceptance"):
        drift.acceptance_table(fresh, res)
    with pytest.raises(ValueError, match="setting"):
        drift.acceptance_table(res, drift.run(dataclasses.replace(pf, r=0.7), 5))
    with pytest.raises(ValueError, match="rules"):
        drift.acceptance_table(drift.run(dataclasses.replace(p, controllers=("paper",)), 5), fresh)
    with pytest.raises(TypeError, match="res"):
        drift.acceptance_table(object(), fresh)
    # the comparison the drift page reads, against the arrays it summarises
    cmp = drift.acceptance_comparison(res_nov, all_fresh)
    j = all_fresh.params.controllers.index("novelty")
    assert cmp.rules == ("novelty",)
    np.testing.assert_array_equal(cmp.spurious_paper, res_nov.spurious[None, :, 0, -1])
    np.testing.assert_array_equal(cmp.spurious_default, all_fresh.spurious[None, :, j])
    assert cmp.min_final_m == all_fresh.magnetization[:, j, -1].min()
    assert cmp.transient_seeds == int(np.any(all_fresh.spurious[:, j] > 0, axis=1).sum())
    assert cmp.tavg_cost == pytest.approx(res_nov.magnetization[:, 0].mean() - all_fresh.magnetization[:, j].mean())
    for s in range(p.seeds):
        def entry(mag):
            hit = np.flatnonzero(mag[:, p.K - 1] >= 0.9)
            return hit[0] if hit.size else np.nan
        d = entry(all_fresh.magnetization[s, j]) - entry(res_nov.magnetization[s, 0])
        assert (np.isnan(d) and np.isnan(cmp.delay[0, s])) or d == cmp.delay[0, s]
    held = np.maximum.accumulate(all_fresh.magnetization[:, [j]] >= 0.9, axis=2)
    np.testing.assert_array_equal(cmp.lost, held & (all_fresh.magnetization[:, [j]] < 0.5))
    assert cmp.lost_seeds == int(cmp.lost.any(axis=(1, 2, 3)).sum())
    with pytest.raises(ValueError, match="acceptance"):
        drift.acceptance_comparison(all_fresh, res_nov)
    with pytest.raises(ValueError, match="adaptive rules"):
        drift.acceptance_comparison(res_nov, fresh.__class__(**{**vars(fresh), "params": dataclasses.replace(
            fresh.params, controllers=(0.0,))}))
    with pytest.raises(ValueError, match="setting"):
        drift.acceptance_comparison(res_nov, drift.run(dataclasses.replace(pf, r=0.7), 5))
    with pytest.raises(TypeError, match="paper"):
        drift.acceptance_comparison(object(), fresh)


def test_novelty_shapes_and_latency_helper():
    p = novelty.NoveltyParams(**TINY[novelty])
    res = novelty.run(p, 0)
    assert res.magnetization.shape == (p.seeds, 1, p.T, p.K)
    assert res.gap_old.shape == res.k_hat.shape == (p.seeds, 1, p.T)
    assert res.latency_k.shape == (p.seeds, 1)
    assert novelty.first_round(np.array([False, True, False, True]), 2) == 1.0
    assert np.isnan(novelty.first_round(np.array([True, False]), 1))


def test_novelty_acceptance_reaches_the_server_and_table():
    p = novelty.NoveltyParams(**{**TINY[novelty], "controllers": ("paper", "novelty"), "seeds": 2,
                                 "acceptance": "paper"})
    assert novelty.NoveltyParams().acceptance == "voted"  # the default
    res = novelty.run(p, 5)
    pf = dataclasses.replace(p, controllers=("novelty",), acceptance="fresh")
    fresh = novelty.run(pf, 5)
    from fedlam import data, federation

    (a, b), = novelty.seed_pairs(5, 1)
    xi = data.random_archetypes(p.K, p.N, a)
    sched = data.novelty_ramp(p.T, p.L, p.K_old, p.K_new, p.t_intro, p.ramp)
    specs = [federation.ClientSpec(r=p.r, M=p.M, mixture=sched[:, c]) for c in range(p.L)]
    h = federation.run_federation(xi, specs, p.T, b, controller="novelty", n_top=10,
                                  acceptance="fresh")
    np.testing.assert_array_equal(fresh.magnetization[0, 0], h.magnetization)
    np.testing.assert_array_equal(fresh.k_hat[0, 0], h.k_hat)
    rows = novelty.acceptance_table(res, fresh).table.rows
    assert [r[:2] for r in rows] == [("our novelty rule", "paper"), ("our novelty rule", "fresh")]
    Ko = p.K_old
    for row, r, i in ((rows[0], res, 1), (rows[1], fresh, 0)):
        sp, m = r.spurious[:, i, -1], r.magnetization[:, i]
        assert row[2] == f"{sp.mean():.2f} ({sp.max()})"
        assert row[3] == f"{r.k_hat[:, i, -1].mean():.2f}"
        assert row[4] == f"{m[:, -1, :Ko].mean():.2f}/{m[:, -1, Ko:].mean():.2f}"
        assert row[5] == f"{m[:, -1].min(axis=1).mean():.2f}" and row[6] == f"{m.mean():.3f}"
    all_fresh = novelty.run(dataclasses.replace(p, acceptance="fresh"), 5)
    res_nov = novelty.run(dataclasses.replace(p, controllers=("novelty",)), 5)
    assert novelty.acceptance_table(res_nov, all_fresh).table.rows == rows
    with pytest.raises(ValueError, match="acceptance"):
        novelty.acceptance_table(fresh, res)
    with pytest.raises(ValueError, match="setting"):
        novelty.acceptance_table(res, novelty.run(dataclasses.replace(pf, r=0.7), 5))
    with pytest.raises(ValueError, match="rules"):
        novelty.acceptance_table(novelty.run(dataclasses.replace(p, controllers=("paper",)), 5),
                                 fresh)
    with pytest.raises(TypeError, match="default"):
        novelty.acceptance_table(res, object())


def test_adversarial_shapes():
    p = adversarial.AdversarialParams(**TINY[adversarial])
    res = adversarial.run(p, 0)
    assert res.weights.shape == (p.seeds, 2, 1, 1, p.T, p.L)
    assert np.isnan(res.fake_in_memory).all()  # noise and flip push no fake pattern
    assert np.isnan(res.latency).all()         # no new archetype
    # (attacks against the defences: tests/test_adversarial.py)


def test_structured_shapes():
    p = structured.StructuredParams(**TINY[structured])
    res = structured.run(p, 0)
    assert res.archetypes.shape == (1, 3, 784)
    assert res.magnetization.shape == (1, 1, 1, p.T, 3)
    assert res.reconstructions.shape == (1, 1, 3, 784)
    assert res.examples.shape == (1, 3, 784)
    assert set(np.unique(res.reconstructions)) <= {-1, 0, 1}
    assert p.M == 10  # ceil(60 / (3 * 2))
    # part 2: one subset of K = 3, conditions (exact, r = 0.8), one search
    assert res.subsets == ((structured.random_class_subsets(3, 1, p.subset_seed)[0],),)
    for name in ("single_k_hat", "single_accepted", "single_recovered", "single_spurious", "single_min_m"):
        assert getattr(res, name).shape == (1, 1, 2, 1), name
    for name in ("paper_single_k_hat", "paper_single_recovered", "paper_single_spurious", "paper_single_min_m"):
        assert getattr(res, name).shape == (2, 1), name
    for name in ("fed_k_hat", "fed_recovered", "fed_spurious", "fed_min_m"):
        assert getattr(res, name).shape == (1, 1, 1, p.fed_T), name
    assert res.subset_overlap_max.shape == res.subset_overlap_mean.shape == res.subset_min_eig.shape == (1, 1)
    assert 0 < res.subset_overlap_mean[0, 0] <= res.subset_overlap_max[0, 0] < 1
    # the exact operators of three silhouettes (a random subset and the paper's): every archetype, nothing else
    assert res.single_recovered[0, 0, 0, 0] == 3 and res.single_spurious[0, 0, 0, 0] == 0
    assert res.paper_single_recovered[0, 0] == 3 and res.paper_single_min_m[0, 0] == 1.0
    assert np.all(res.single_recovered <= 3) and np.all(res.fed_recovered <= 3)
    assert res.summary["K=3/exact/span"] == {"subsets_all_recovered": 1, "recovered": 3, "of": 3, "spurious": 0}
    assert "subsets" in res.to_dict() and "StructuredResult(part 1" in repr(res)


def test_structured_without_federations_or_lam():
    p = structured.StructuredParams(**{**TINY[structured], "fed_subsets": 0, "searches": ("lam", "span")})
    res = structured.run(p, 1)
    assert res.fed_k_hat.shape == (1, 0, 1, 1)
    assert res.single_k_hat.shape == (1, 1, 2, 2)
    assert "K=3/federation" not in res.summary


def test_random_class_subsets():
    a = structured.random_class_subsets(5, 4, seed=7)
    b = structured.random_class_subsets(5, 2, seed=7)
    assert a[:2] == b  # the first subsets do not depend on n
    assert structured.random_class_subsets(5, 4, seed=8) != a
    for cls in a:
        assert len(cls) == 5 == len(set(cls)) and all(0 <= c < structured.N_CLASSES for c in cls)
    with pytest.raises(ValueError, match="K must be <= n_classes"):
        structured.random_class_subsets(102, 1)
    with pytest.raises(ValueError, match="n"):
        structured.random_class_subsets(3, 0)


def test_overlap_structure():
    H = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1]], dtype=np.int8)  # orthogonal rows
    o = structured.overlap_structure(H)
    assert o == {"max": 0.0, "mean": 0.0, "min_eig": pytest.approx(1.0)}
    o2 = structured.overlap_structure(np.vstack([H[:2], H[:1]]))  # a repeated row: dependent family
    assert o2["max"] == 1.0 and o2["min_eig"] == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="patterns"):
        structured.overlap_structure(np.zeros((2, 4)))


def test_factorize_subset_and_validation():
    run_ = structured.factorize_subset(("anchor", "bass", "Motorbikes 16"), rng=0)
    assert run_.r is None and run_.M == 0 and run_.recovered == 3 and run_.spurious == 0
    assert run_.names == ("anchor", "bass", "Motorbikes 16") and run_.reconstructions.shape == (3, 784)
    np.testing.assert_array_equal(np.abs(run_.reconstructions), 1)
    assert "exact operator" in repr(run_)
    with pytest.raises(ValueError, match="M must be"):
        structured.factorize_subset([0, 1, 2], r=0.8, M=0)
    with pytest.raises(ValueError, match="M must be <="):
        structured.factorize_subset([0, 1, 2], r=0.8, M=10**6)
    with pytest.raises(ValueError, match="search"):
        structured.factorize_subset([0, 1, 2], search="greedy")
    with pytest.raises(ValueError, match="unknown class name"):
        structured.factorize_subset(["anchor", "unicorn"])
    with pytest.raises(ValueError, match="distinct"):
        structured.factorize_subset([4, 4])
    with pytest.raises(ValueError, match="one row per class"):
        structured.factorize_subset([0, 1, 2], archetypes=np.ones((2, 784), dtype=np.int8))


@pytest.mark.slow
def test_explore_every_parameter_matters():
    """The structured explorer's function is not inert: K, the subset, r and M each change the result."""
    def key(out):
        return (out.classes, out.k_hat, out.n_accepted, tuple(np.round(out.magnetization, 3)))

    base = structured.explore(K=4, subset=0, r=0.5, M=400)
    assert base.recovered == 4 and base.k_hat == 4
    assert key(structured.explore(K=5, subset=0, r=0.5, M=400)) != key(base)   # K: other images
    assert structured.explore(K=4, subset=1, r=0.5, M=400).classes != base.classes
    low_r = structured.explore(K=4, subset=0, r=0.25, M=400)  # weak examples: archetypes not recovered exactly
    assert key(low_r) != key(base) and low_r.magnetization.min() < 1.0
    few = structured.explore(K=4, subset=0, r=0.5, M=150)     # M < N/4: read as the exact operator of 150 examples
    assert few.k_hat == 150 and few.recovered == 0
    with pytest.raises(ValueError, match="K must be <="):
        structured.explore(K=41)


def test_sign_gram_schmidt():
    xi = structured.factorize_subset(("anchor", "bass", "Motorbikes 16"), rng=0).archetypes
    np.testing.assert_array_equal(structured.sign_gram_schmidt(xi), xi)  # sums of |q| below 1: unchanged
    np.testing.assert_array_equal(structured.sign_gram_schmidt(xi[:2][::-1]), xi[:2][::-1])  # K = 2: always unchanged
    rng = np.random.default_rng(0)
    parent = rng.choice(np.array([-1, 1], dtype=np.int8), 400)
    fam = np.where(rng.random((6, 400)) < 0.1, -parent, parent).astype(np.int8)  # overlaps ~0.64
    out = structured.sign_gram_schmidt(fam)
    assert out.dtype == np.int8 and set(np.unique(out)) <= {-1, 1}
    X, O = fam.astype(float), out.astype(float)
    for mu in range(6):  # a sign can change only where sum_{nu < mu} |q| >= 1
        qsum = float(np.abs(O[:mu] @ X[mu] / 400).sum())
        if qsum < 1:
            np.testing.assert_array_equal(out[mu], fam[mu])
    assert not np.array_equal(out, fam)
    with pytest.raises(ValueError, match="patterns"):
        structured.sign_gram_schmidt(np.zeros((2, 3)))


def test_baselines_shapes_and_loop_matches_federation():
    from fedlam import data, federation

    p = baselines.BaselinesParams(**TINY[baselines])
    res = baselines.run(p, 0)
    assert res.magnetization["drift"].shape == (p.seeds, 4, p.T, p.K)
    xi = data.random_archetypes(3, 60, 0)
    sched = data.sequential_drift(4, 2, 3)
    specs = [federation.ClientSpec(r=0.8, M=50, mixture=sched[:, c]) for c in range(2)]
    ref = federation.run_federation(xi, specs, 4, 7, controller="novelty")
    # the hook returning the LAM's own patterns reproduces the default run exactly
    same = federation.run_federation(xi, specs, 4, 7, controller="novelty", reconstruct=lambda res: res.patterns)
    np.testing.assert_array_equal(ref.magnetization, same.magnetization)
    # the spectral-only stage broadcasts exactly K-hat signed eigenvectors
    spec_only = federation.run_federation(xi, specs, 4, 7, controller="novelty",
                                          reconstruct=baselines.signed_eigenvectors)
    assert all(p.shape == (k, 60) for p, k in zip(spec_only.patterns, spec_only.k_hat))
    with pytest.raises(ValueError, match="reconstruct"):
        federation.run_federation(xi, specs, 4, 7, reconstruct=lambda res: np.zeros((1, 60), dtype=np.int8))


def test_signed_eigenvectors_recovers_a_single_spike():
    from fedlam import data, lam, operators

    xi = data.random_archetypes(1, 80, 1)
    ex, _ = data.sample_examples(xi, 400, 0.9, np.array([1.0]), 2)
    pats = baselines.signed_eigenvectors(lam.factorize(operators.hebbian(ex), rng=0))
    assert pats.shape == (1, 80)
    assert abs(float(pats[0].astype(float) @ xi[0].astype(float))) / 80 > 0.95


def test_markdown_table():
    t = markdown_table([("a|b", "1", "2", "3")])
    assert "a\\|b" in t and t.count("\n") == 2
    with pytest.raises(ValueError, match="cells"):
        markdown_table([("only", "three", "cells")])


def test_comparison_table_html_and_markdown():
    from fedlam.experiments._common import comparison_table

    t = comparison_table([("κ <b>", "1", "2", "3")])
    html = t._repr_html_()
    assert html.count("<tr>") == 2 and "&lt;b&gt;" in html
    assert t._repr_markdown_() == repr(t) and "| κ <b> |" in repr(t)
    t2 = comparison_table([("a", "b")], header=("x", "y"))
    assert "<th>x</th>" in t2._repr_html_()


def test_drift_duplicate_eigenvalues_match_eigh():
    from fedlam import data

    xi = data.random_archetypes(1, 60, 3)
    for flips in (1, 3, 12):
        y = drift.flip_bits(xi[0], flips, flips)
        m = float(xi[0].astype(float) @ y) / 60
        assert m == 1 - 2 * flips / 60
        for alpha, beta, c in ((0.2, 0.7, 0.01), (0.9, 0.7, 0.0), (0.5, 0.5, -0.1)):
            lp, lm = drift.duplicate_eigenvalues(m, alpha, beta, c)
            ev = np.linalg.eigvalsh(drift.copy_operator(xi[0], y, alpha, beta, c))[::-1]
            np.testing.assert_allclose(ev[:2], [lp, lm], rtol=0, atol=1e-12)
            np.testing.assert_allclose(ev[2:], c, rtol=0, atol=1e-12)
            # the small-gap approximation of the second eigenvalue
            assert abs(lm - c - alpha * beta / (alpha + beta) * (1 - m * m)) < 2 * (1 - m * m) ** 2
    # one version alone, or two identical ones: no second direction
    assert drift.duplicate_eigenvalues(0.8, 0.0, 0.7, 0.01)[1] == 0.01
    assert drift.duplicate_eigenvalues(1.0, 0.3, 0.7, 0.0) == (1.0, 0.0)
    with pytest.raises(ValueError, match="m"):
        drift.duplicate_eigenvalues(1.5, 0.3, 0.7)
    with pytest.raises(ValueError, match="alpha"):
        drift.duplicate_eigenvalues(0.5, -0.3, 0.7)
    with pytest.raises(ValueError, match="y"):
        drift.copy_operator(xi[0], xi[0][:10], 0.3, 0.7)
    with pytest.raises(ValueError, match="flips"):
        drift.flip_bits(xi[0], 61, 0)
    with pytest.raises(ValueError, match="x"):
        drift.flip_bits(np.zeros(5), 1, 0)
    np.testing.assert_array_equal(drift.flip_bits(xi[0], 4, 9), drift.flip_bits(xi[0], 4, 9))


def test_drift_copy_uploads_and_duplicate_table():
    from fedlam import data, operators

    xi = data.random_archetypes(2, 120, 4)
    copy = drift.flip_bits(xi[0], 8, 5)
    ups, A = drift.copy_uploads(xi, copy[None], 0.25, 0.8, 90, 2, 6)
    np.testing.assert_array_equal(A, operators.pattern_operator(copy[None]))
    assert len(ups) == 2 and all(u.batch_size == 90 and u.weight == 0.25 for u in ups)
    for u in ups:  # the fresh part is w times a Hebbian operator: diagonal w / N
        np.testing.assert_allclose(np.diag(u.operator - 0.75 * A), 0.25 / 120)
    with pytest.raises(ValueError, match="stored"):
        drift.copy_uploads(xi, copy[None, :60], 0.25, 0.8, 90, 2, 6)
    with pytest.raises(ValueError, match="w"):
        drift.copy_uploads(xi, copy[None], 1.5, 0.8, 90, 2, 6)
    xi4 = data.random_archetypes(2, 400, 7)
    tab, out = drift.duplicate_table(xi4, drift.flip_bits(xi4[0], 20, 8), 0.3, 0.8, 400, 3, 9)
    names = ("copy stored", "both stored", "both stored, 1 absent")
    accs = ("paper", "voted", "fresh")
    assert [r[:2] for r in tab.table.rows] == [(a, b) for a in names for b in accs]
    for row in tab.table.rows:
        o = out[row[0], row[1]]
        assert row[2] == str(o["k_hat"]) and row[3] == str(len(o["near"]))
    # the derivation's claims: the copy stored, x enters beside it under every acceptance;
    assert all(len(out["copy stored", a]["near"]) == 2 for a in accs)
    # both stored, the paper's and the voted acceptance keep the pair (to the fresh data the
    # copy is a stored pattern they no longer hold, like a retired correlated archetype, which
    # the voted memory keeps whole); the fresh acceptance flattens e_- and keeps the archetype
    for a in ("paper", "voted"):
        assert len(out["both stored", a]["near"]) == 2 and len(out["both stored, 1 absent", a]["near"]) == 2
    assert out["both stored", "fresh"]["k_hat"] == out["both stored", "paper"]["k_hat"] - 1
    np.testing.assert_allclose(out["both stored", "fresh"]["near"], [[1.0, 0.9]])
    # ... also once archetype 0 has left the data: one version is kept, not both, not none
    assert len(out["both stored, 1 absent", "fresh"]["near"]) == 1
    with pytest.raises(ValueError, match=r"acceptances\[0\]"):
        drift.duplicate_table(xi4, drift.flip_bits(xi4[0], 20, 8), 0.3, 0.8, 400, 3, 9, acceptances=("mean",))
