"""The paper preset on a local Dask cluster: python -m fedlam.reproduce --scheduler local.

Starts a LocalCluster on 127.0.0.1 with 2 single-threaded worker processes (through
fedlam.reproduce), runs every experiment notebook at the paper preset with their seeds spread
over the workers, and prints the time per notebook and in total against the 20-minute target.
Reports which experiments' run() accept an executor (the others run their seeds serially in
the notebook's kernel) and the machine's load average (the machine is shared).

Run:  python benchmarks/bench_cluster.py [--workers 2] [--only NAME ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fedlam.reproduce import NOTEBOOKS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", nargs="+", default=None)
    ap.add_argument("--out", default=None)
    ns = ap.parse_args()
    names = ns.only or list(NOTEBOOKS)
    for n in names:
        mod = importlib.import_module(f"fedlam.experiments.{NOTEBOOKS[n]}")
        spread = "executor" in inspect.signature(mod.run).parameters
        seeds = mod.make_params("paper").seeds
        print(f"{n:12s} paper preset seeds = {seeds:3d}; run() spreads seeds over the cluster: {spread}")
    print(f"load average before: {os.getloadavg()}")
    out = Path(ns.out or tempfile.mkdtemp(prefix="fedlam-cluster-"))
    cmd = [sys.executable, "-m", "fedlam.reproduce", "--preset", "paper", "--scheduler", "local",
           "--workers", str(ns.workers), "--out", str(out), "--only", *names]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # run outside the source tree: `python -m` puts the working directory first on sys.path
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    print(proc.stdout[-3000:])
    if proc.returncode != 0:
        print(proc.stderr[-3000:])
    summary = json.loads((out / "summary.json").read_text())
    for r in summary["notebooks"]:
        print(f"{r['name']:12s} {r['status']:7s} {r['seconds']:8.1f} s")
    print(f"total {wall:.1f} s = {wall / 60:.1f} min with {ns.workers} local Dask workers; "
          f"target <= 20 min: {'met' if wall <= 1200 else 'NOT met'}")
    print(f"CPU time of every process of the run (kernels, scheduler, workers): {cpu:.0f} s; on an idle "
          f"machine with {ns.workers} cores the wall time cannot go below {cpu / ns.workers / 60:.1f} min")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
