"""A Flower round on loopback against the same round in one process (N = 784, L = 5).

Runs the silhouettes federation (N = 784, K = 3, r = 0.8, M = 200, one class per site,
float32 uploads) for R rounds twice: in one process with fedlam.federation.run_federation,
and on Flower's Deployment Engine over 127.0.0.1 (one SuperLink, five SuperNodes, separate
processes: python -m fedlam.flower local). Prints the time per round of each (the Flower
round time is measured by the ServerApp from sending the round's messages to the end of the
server step; process start-up is reported separately), the ratio, and whether the target
"Flower round <= 2 x in-process round + 1 s" holds. Also prints the machine's load average:
the machine is shared, and Flower's per-message ClientApp processes suffer most from load.

Run:  python benchmarks/bench_flower.py [--rounds R]
"""

from __future__ import annotations

import os

# one BLAS thread, as in the Flower processes (fedlam.flower.deploy.flower_environment) and the
# tests: on a shared two-core machine a multi-threaded BLAS is much slower, and both sides of the
# comparison must use the same setting
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import tempfile
import time
from pathlib import Path

import numpy as np  # noqa: E402

from fedlam.flower import config as C  # noqa: E402
from fedlam.flower import history  # noqa: E402
from fedlam.flower.local import run  # noqa: E402

L, M, R_QUALITY = 5, 200, 0.8


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    T = ap.parse_args().rounds
    nodes = [C.node_config_for_site(client_index=c, M=M, r=R_QUALITY, archetypes="silhouettes", mixture="class")
             for c in range(L)]
    rc = {"rounds": T, "seed": 0, "num-clients": L, "N": 784, "archetypes": "silhouettes"}
    print(f"load average before: {os.getloadavg()}")
    history.reference_history(dict(rc, rounds=1), nodes)  # warm-up: imports, data set
    best = []
    for _ in range(3):
        t0 = time.perf_counter()
        ref = history.reference_history(rc, nodes)
        best.append((time.perf_counter() - t0) / T)
    t_inproc = min(best)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        hist = run(rc, nodes, Path(d), timeout=1800, figures=False, echo=lambda *_: None)
        wall = time.perf_counter() - t0
    secs = np.array([r["seconds"] for r in hist["rounds"]])
    t_flower = float(np.median(secs[1:])) if T > 1 else float(secs[0])
    same = history.compare(hist, ref)["identical"]
    print(f"in-process round (run_federation, mean over {T} rounds, best of 3 runs): {t_inproc:.3f} s")
    print(f"Flower round (median of rounds 1..{T - 1} at the ServerApp): {t_flower:.3f} s  "
          f"(all rounds: {np.round(secs, 2).tolist()})")
    print(f"ratio Flower / in-process: {t_flower / t_inproc:.1f}x; "
          f"target <= 2 x {t_inproc:.3f} + 1 = {2 * t_inproc + 1:.3f} s: "
          f"{'met' if t_flower <= 2 * t_inproc + 1 else 'NOT met'}")
    print(f"whole Flower command incl. start-up and shutdown of 1 SuperLink + {L} SuperNodes: {wall:.1f} s")
    print(f"bit-identical to the in-process run: {same}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
