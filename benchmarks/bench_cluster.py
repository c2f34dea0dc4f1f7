"""Scale-out of one experiment on a Dask LocalCluster: 1 worker against 2 workers, same run.

Starts a ``dask.distributed.LocalCluster`` on 127.0.0.1 (single-threaded worker processes, one
BLAS thread each) with 1 and then with 2 workers, runs the same experiment ``run(params, rng,
executor=client.get_executor())`` on each, and reports the wall times, the speed-up and whether
the two results are identical (they must be: the seeds are drawn up front). Before timing, every
worker imports fedlam and runs one warm-up task, so the times compare the experiment, not the
start of the processes. Records the load average (the machine may be shared) and the CPU time of
the worker processes (in total and of the busiest worker: on idle cores the run would end when the
busiest worker is done, so the ratio of those CPU times is the speed-up two idle cores would give,
whatever the load when measuring). No process outlives the script: each cluster is closed and the script
checks that none of its children is left.

Run:  python benchmarks/bench_cluster.py [--experiment novelty] [--preset paper] [--seeds 8]
      [--workers 1 2]

Target (issue 20): speed-up >= 1.7 with 2 workers on two idle cores.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import time

import psutil

from fedlam.experiments import EXPERIMENTS
from fedlam.experiments._common import jsonable


def _warm() -> str:
    """Runs on a worker: import what an experiment task needs (the first task would otherwise pay it)."""
    import fedlam.federation
    import fedlam.lam  # noqa: F401

    return "ok"


def _worker_cpu(client) -> dict:
    """User + system CPU seconds of each of the cluster's worker processes so far."""
    return client.run(lambda: sum(psutil.Process().cpu_times()[:2]))


def run_once(name: str, params, rng: int, workers: int) -> dict:
    from distributed import Client

    from fedlam.reproduce import start_local_cluster

    mod = importlib.import_module(f"fedlam.experiments.{name}")
    cluster = start_local_cluster(workers)
    try:
        with Client(cluster) as client:
            client.wait_for_workers(workers)
            client.run(_warm)
            cpu0 = _worker_cpu(client)
            load0 = os.getloadavg()
            t0 = time.perf_counter()
            res = mod.run(params, rng, executor=client.get_executor())
            wall = time.perf_counter() - t0
            cpu1 = _worker_cpu(client)
            per_worker = [cpu1[w] - cpu0.get(w, 0.0) for w in cpu1]
            load1 = os.getloadavg()
    finally:
        cluster.close()
    digest = hashlib.sha256(json.dumps(jsonable(res.to_dict()), sort_keys=True).encode()).hexdigest()[:16]
    return {"workers": workers, "wall": wall, "cpu": sum(per_worker), "cpu_max": max(per_worker), "hash": digest,
            "load_before": load0, "load_after": load1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", default="novelty", choices=EXPERIMENTS)
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--seeds", type=int, default=8, help="seeds of the run (the tasks spread over the workers)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rng", type=int, default=41)
    ns = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    mod = importlib.import_module(f"fedlam.experiments.{ns.experiment}")
    params = mod.make_params(ns.preset, seeds=ns.seeds)
    print(f"{ns.experiment}, preset {ns.preset}, {ns.seeds} seeds: {params}")
    print(f"cores: {os.cpu_count()}; load average before: {os.getloadavg()}")
    rows = [run_once(ns.experiment, params, ns.rng, w) for w in ns.workers]
    base = rows[0]
    print(f"| workers | wall | worker CPU (sum / busiest) | speed-up vs {base['workers']}: wall | "
          "idle-core projection | load average before / after | hash |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        # on idle cores each worker has a core of its own: the run ends when the busiest worker has
        # done its CPU work, so CPU(one worker) / CPU(busiest worker) is the speed-up they would give
        print(f"| {r['workers']} | {r['wall']:.1f} s | {r['cpu']:.1f} s / {r['cpu_max']:.1f} s | "
              f"{base['wall'] / r['wall']:.2f}x | {base['cpu_max'] / r['cpu_max']:.2f}x | "
              f"{r['load_before'][0]:.1f} / {r['load_after'][0]:.1f} | {r['hash']} |")
    same = len({r["hash"] for r in rows}) == 1
    print(f"results identical across worker counts: {same}")
    # multiprocessing's resource tracker (started by the first spawned worker) is a child of this
    # process until it exits with it; anything else still running would have outlived its cluster
    left = [p for p in psutil.Process().children(recursive=True)
            if p.is_running() and "multiprocessing.resource_tracker" not in " ".join(p.cmdline())]
    print(f"processes left after closing the clusters (besides multiprocessing's resource tracker): "
          f"{[' '.join(p.cmdline())[:80] for p in left]}")
    if not same or left:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
