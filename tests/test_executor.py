"""map_seeds: the same results, in task order, whatever runs them (serial, threads, processes, Dask)."""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest

from fedlam.data import random_archetypes
from fedlam.experiments import _executor as E

TASKS = [(3, 20, s) for s in (5, 1, 9, 2)]


def _expected():
    return [random_archetypes(*t) for t in TASKS]


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_serial_threads_processes_agree(monkeypatch):
    monkeypatch.delenv(E.SCHEDULER_ENV, raising=False)
    want = _expected()
    assert _same(E.map_seeds(random_archetypes, TASKS), want)
    with ThreadPoolExecutor(3) as ex:
        assert _same(E.map_seeds(random_archetypes, TASKS, ex), want)
    with ProcessPoolExecutor(2) as ex:
        assert _same(E.map_seeds(random_archetypes, TASKS, ex), want)


def test_bad_executor_named():
    with pytest.raises(TypeError, match="executor"):
        E.map_seeds(random_archetypes, TASKS, executor="dask")
    with pytest.raises(TypeError, match="fn"):
        E.map_seeds(42, TASKS)


@pytest.mark.slow
def test_dask_local_cluster_and_env(monkeypatch):
    distributed = pytest.importorskip("distributed")
    from fedlam.reproduce import start_local_cluster

    cluster = start_local_cluster(2)
    try:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        want = _expected()
        with distributed.Client(cluster) as client:
            assert _same(E.map_seeds(random_archetypes, TASKS, client.get_executor()), want)
        # executor=None picks the cluster up from FEDLAM_SCHEDULER (what reproduce sets for kernels)
        monkeypatch.setenv(E.SCHEDULER_ENV, cluster.scheduler_address)
        assert _same(E.map_seeds(random_archetypes, TASKS), want)
        assert E.resolve_executor(None) is not None
    finally:
        E._close_clients()
        cluster.close()
    monkeypatch.delenv(E.SCHEDULER_ENV)
    assert E.resolve_executor(None) is None
    assert os.environ.get(E.SCHEDULER_ENV) is None


# Every experiment whose run() takes an executor must give the same result with any executor
# (sizes as the TINY parameters of test_experiments.py). Experiments not yet wired are skipped.
_TINY = {
    "bbp": dict(N=40, Ms=(40, 80), seeds=3, pi=(0.6, 0.3, 0.1), n_top=5, r=0.5),
    "drift": dict(N=40, T=4, M=30, seeds=3, controllers=(0.0, "novelty")),
    "novelty": dict(N=40, T=5, t_intro=2, ramp=2, M=30, K_old=2, K_new=1, seeds=3, controllers=("novelty",)),
    "adversarial": dict(N=40, M=40, T=3, n_good=2, attacks=("noise", "poison"), controllers=("paper",), seeds=3),
    "structured": dict(rs=(0.8,), decorrelated=(False,), T=2, M_total=60, seeds=2),
    # two scenarios and the leakage curve (batch sizes <= N: the privacy attack needs M <= N)
    "baselines": dict(scenarios=("drift", "noise"), N=40, T=4, M=30, seeds=2, leak_Ms=(5, 20),
                      attack_starts=50),
    "privacy": dict(N=60, K=2, r=0.9, Ls=(1, 2), Ms=(30,), epsilons=(0.5, 50.0), attack_Ms=(4,),
                    attack_epsilons=(1.0, 1e7), attack_restarts=16, seeds=2),
    # time_rounds=False: the timings are the only fields that depend on where a federation ran
    "cross_device": dict(N=60, K=2, archetypes="random", total=40, Ls=(1, 4, 20), T=2, fit_max_L=4,
                         noise=(False, True), hetero_sizes=(1, 3, 12), hetero_intermittent=5, hetero_noise=8,
                         n_top=4, seeds=2, time_rounds=False),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_TINY))
def test_experiment_results_independent_of_executor(name, monkeypatch):
    import importlib
    import inspect
    import json

    from fedlam.experiments._common import jsonable

    monkeypatch.delenv(E.SCHEDULER_ENV, raising=False)
    mod = importlib.import_module(f"fedlam.experiments.{name}")
    if "executor" not in inspect.signature(mod.run).parameters:
        pytest.skip(f"fedlam.experiments.{name}.run has no executor argument yet")
    p = mod.make_params("book", **_TINY[name])
    serial = json.dumps(jsonable(mod.run(p, 123).to_dict()), sort_keys=True)
    with ProcessPoolExecutor(2) as ex:
        pooled = json.dumps(jsonable(mod.run(p, 123, executor=ex).to_dict()), sort_keys=True)
    assert pooled == serial


# The tasks' results are put back in the serial loop's order: each row of a result is the run of
# its own seeds (checked against runs built directly from the seeds drawn up front), so an
# assembly that mixed up scenarios, seeds, qualities or subsets would fail here even though it
# would be the same with and without an executor.
@pytest.mark.slow
def test_baselines_rows_are_their_seeds_runs(monkeypatch):
    from fedlam import federation
    from fedlam.experiments import baselines
    from fedlam.experiments._common import seed_pairs

    monkeypatch.delenv(E.SCHEDULER_ENV, raising=False)
    # a low quality, so that the runs do not all end at m = 1 and the rows can be told apart
    p = baselines.BaselinesParams(scenarios=("drift", "static"), methods=("federated", "local"), N=40, T=4,
                                  M=20, r=0.35, seeds=2)
    with ProcessPoolExecutor(2) as ex:
        res = baselines.run(p, 5, executor=ex)
    seeds = seed_pairs(np.random.default_rng(5), p.seeds)
    rows = set()
    for name in p.scenarios:
        for s, (seed_xi, seed_fed) in enumerate(seeds):
            xi, specs, T, ctrl = baselines._scenario(p, name, seed_xi)
            h = federation.run_federation(xi, specs, T, seed_fed, controller=ctrl, acceptance=baselines.ACCEPTANCE)
            np.testing.assert_array_equal(res.magnetization[name][s, 0], h.magnetization)
            np.testing.assert_array_equal(res.k_used[name][s, 0], h.k_hat)
            rows.add(res.magnetization[name][s, 0].tobytes())
    assert len(rows) == 4  # the four (scenario, seed) runs differ, so the check can tell them apart


@pytest.mark.slow
def test_structured_rows_are_their_seeds_runs(monkeypatch):
    from fedlam import data, federation
    from fedlam.experiments import structured
    from fedlam.experiments._common import seed_pairs

    monkeypatch.delenv(E.SCHEDULER_ENV, raising=False)
    p = structured.StructuredParams(rs=(0.6, 0.8), decorrelated=(False, True), T=2, M_total=60, seeds=2,
                                    Ks=(3, 4), n_subsets=2, searches=("span",), examples_per_class=30,
                                    fed_subsets=1, fed_T=2, fed_examples_per_class=10)
    with ProcessPoolExecutor(2) as ex:
        res = structured.run(p, 9, executor=ex)
    gen = np.random.default_rng(9)
    seeds = seed_pairs(gen, p.seeds)
    single = seed_pairs(gen, len(p.Ks) * p.n_subsets)
    mix = data.static_mixture(p.T, 1, 3)[:, 0]
    for s, (_, seed_fed) in enumerate(seeds):
        for ri, r in enumerate(p.rs):
            specs = [federation.ClientSpec(r=r, M=p.M, mixture=mix) for _ in range(p.L)]
            for di in range(len(p.decorrelated)):
                h = federation.run_federation(res.archetypes[di], specs, p.T, seed_fed, controller=p.controller)
                np.testing.assert_array_equal(res.magnetization[s, ri, di], h.magnetization)
                np.testing.assert_array_equal(res.k_hat[s, ri, di], h.k_hat)
    assert len({res.magnetization[s, ri, di].tobytes() for s in range(2) for ri in range(2) for di in range(2)}) > 1
    for ki, K in enumerate(p.Ks):
        for s, cls in enumerate(res.subsets[ki]):
            xi = data.structured_archetypes(list(cls), method=p.method)
            assert res.subset_overlap_max[ki, s] == structured.overlap_structure(xi)["max"]
            for ci, r in enumerate([None, *p.rs]):
                one = structured.factorize_subset(cls, r, p.examples_per_class * K,
                                                  np.random.default_rng([single[ki * p.n_subsets + s][0], ci]),
                                                  method=p.method, search="span", archetypes=xi)
                assert res.single_k_hat[ki, s, ci, 0] == one.k_hat
                assert res.single_min_m[ki, s, ci, 0] == float(one.magnetization.min())


# Results published before issue 20: ``to_dict`` at the TINY sizes, computed with the code of
# commit 21b61f3 (tests/data/<name>_before_issue20.json); privacy and cross_device moved their
# loops into tasks without changing a number. Integers, strings and flags must match exactly and
# floats to rtol 1e-9: a hash of the floats' last bits held on the machine that recorded it and
# not on another (cross_device: an AVX2 CPU sums in another order than an AVX-512 one; the
# pre-split code gives the same bits as today's on each machine).
_PUBLISHED = {
    "privacy": (dict(N=60, K=2, r=0.9, Ls=(1, 2), Ms=(30, 60), epsilons=(0.5, 50.0), attack_Ms=(4, 8),
                     attack_epsilons=(1.0, 1e7), attack_restarts=16, seeds=3), 3),
    "cross_device": (dict(_TINY["cross_device"]), 13),
}


def _same_numbers(got, want, path: str = "") -> list[str]:
    """Where two JSON trees differ: structure, non-floats exactly, floats to rtol 1e-9."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return [f"{path}: keys {sorted(got) if isinstance(got, dict) else got!r} != {sorted(want)}"]
        return [d for k in want for d in _same_numbers(got[k], want[k], f"{path}/{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path}: {got!r} != {want!r}"]
        return [d for i, (a, b) in enumerate(zip(got, want, strict=True)) for d in _same_numbers(a, b, f"{path}[{i}]")]
    if isinstance(want, float) and isinstance(got, float):
        ok = (math.isnan(got) and math.isnan(want)) or math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
        return [] if ok else [f"{path}: {got!r} != {want!r}"]
    return [] if (type(got) is type(want) and got == want) else [f"{path}: {got!r} != {want!r}"]


def test_same_numbers_sees_a_change():
    want = {"k": [1, 2.0, "a", None], "x": 0.5}
    assert _same_numbers(want, want) == []
    assert _same_numbers({"k": [1, 2.0 * (1 + 1e-12), "a", None], "x": 0.5}, want) == []
    assert _same_numbers({"k": [1, 2.0001, "a", None], "x": 0.5}, want) == ["/k[1]: 2.0001 != 2.0"]
    assert _same_numbers({"k": [2, 2.0, "a", None], "x": 0.5}, want) == ["/k[0]: 2 != 1"]
    assert _same_numbers({"k": [1, 2.0, "a"], "x": 0.5}, want)
    assert _same_numbers({"k": [1, 2.0, "a", None]}, want)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_PUBLISHED))
def test_executor_split_kept_the_numbers(name, monkeypatch):
    import importlib
    import json
    from pathlib import Path

    from fedlam.experiments._common import jsonable

    monkeypatch.delenv(E.SCHEDULER_ENV, raising=False)
    mod = importlib.import_module(f"fedlam.experiments.{name}")
    kw, rng = _PUBLISHED[name]
    p = type(mod.PRESETS["book"])(**kw)
    got = json.loads(json.dumps(jsonable(mod.run(p, rng).to_dict())))
    want = json.loads((Path(__file__).parent / "data" / f"{name}_before_issue20.json").read_text())
    assert _same_numbers(got, want) == []


@pytest.mark.slow
def test_leakage_curve_parallel_and_its_points(monkeypatch):
    """run_leakage splits into (seed, M) tasks: the same curve on any executor, equal to run()'s, and
    each point is the attack on a batch drawn from that point's own stream."""
    from fedlam import baselines as fb
    from fedlam import data, operators
    from fedlam.experiments import baselines
    from fedlam.experiments._common import seed_pairs

    monkeypatch.delenv(E.SCHEDULER_ENV, raising=False)
    p = baselines.BaselinesParams(scenarios=("static",), methods=("federated", "kfed"), N=40, T=4, M=20,
                                  leak_Ms=(3, 8, 30), attack="range", attack_starts=40, seeds=3)
    serial = baselines.run_leakage(p, 17)
    with ProcessPoolExecutor(2) as ex:
        pooled = baselines.run_leakage(p, 17, executor=ex)
    assert serial.keys() == pooled.keys()
    for k in serial:
        np.testing.assert_array_equal(serial[k], pooled[k])
    full = baselines.run(p, 17)
    for k in serial:
        np.testing.assert_array_equal(full.leakage[k], serial[k])
    # point (s, j) from its own seeds: archetypes from the seed's first integer, the batch from
    # default_rng([second, j]) -- so a point does not depend on which other points ran before it
    seed0 = seed_pairs(np.random.default_rng(17), p.seeds)[0][1]
    pairs = seed_pairs(np.random.default_rng([seed0, 99]), p.seeds)
    for s, (a, b) in enumerate(pairs):
        xi = data.random_archetypes(p.K, p.N, a)
        for j, M in enumerate(p.leak_Ms):
            gen = np.random.default_rng([b, j])
            X, _ = data.sample_examples(xi, M, p.r, np.full(p.K, 1.0 / p.K), gen)
            plain = baselines.range_sign_attack(operators.hebbian(X), gen, starts=p.attack_starts)
            want = fb.leaked_fraction(X, plain, int(p.leak_bits * p.N))
            assert serial["hebbian_range"][s, j] == want == serial["hebbian"][s, j]
    assert serial["hebbian"].shape == (3, 3) == serial["centroids_kmax"].shape
