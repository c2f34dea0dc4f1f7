"""map_seeds: the same results, in task order, whatever runs them (serial, threads, processes, Dask)."""

from __future__ import annotations

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
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


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
    "baselines": dict(scenarios=("drift",), N=40, T=4, M=30, seeds=2),
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
