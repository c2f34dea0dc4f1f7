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
