"""fedlam's round on Flower against Flower's own floor and the in-process round (N = 784, L = 5).

One invocation, one Flower set-up: a SuperLink and five SuperNodes on 127.0.0.1 (separate
processes, ``fedlam.flower.deploy.LocalFederation``) run, one after the other,

1. ``echo``: a minimal app (``flower_echo_app.py``: the ServerApp sends one message per site and
   round, the ClientApp -- which never imports fedlam -- replies at once with nothing);
2. ``echo+upload``: the same, the reply carrying a float32 array of the size of fedlam's upload
   (N(N+1)/2 entries, 1.2 MB): Flower's floor including the transfer;
3. ``fedlam``: the silhouettes federation (N = 784, K = 3, r = 0.8, M = 200, one class per site,
   float32 uploads), and, with ``--precisions float32,float16``, the same with float16 uploads.

All rounds are timed at the ServerApp from pushing the round's messages to the last reply (and,
for fedlam, the end of the server step); the figure per app is the median of rounds 1..T-1
(round 0 also installs the app bundle). The in-process round is ``run_federation`` on the same
sites (best of 3, mean per round). Reported: echo, echo+upload, fedlam and in-process rounds,
fedlam's overhead = fedlam round - echo round, and the target "overhead <= 1.5 x in-process
round + 0.5 s". Then where the overhead goes, measured on the client side in fresh processes:
the import time of ``flwr.clientapp`` alone (the echo ClientApp's imports) and with fedlam's
ClientApp and its first round (imports the site needs), and one round's client work once imported.
The load average of the shared machine is printed before and after.

Run:  python benchmarks/bench_flower.py [--rounds R] [--precisions float32,float16]
"""

from __future__ import annotations

import os

# one BLAS thread, as in the Flower processes (fedlam.flower.deploy.flower_environment) and the
# tests: both sides of the comparison use the same setting
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from fedlam.flower import config as C  # noqa: E402
from fedlam.flower import history, wire  # noqa: E402
from fedlam.flower.deploy import LocalFederation  # noqa: E402

L, M, R_QUALITY, N = 5, 200, 0.8, 784
HERE = Path(__file__).resolve().parent
ECHO_COMPONENTS = {"serverapp": "flower_echo_app:server", "clientapp": "flower_echo_app:client"}

# fresh-process probes of the client side (each prints seconds)
_PROBE_SITE = r"""
import pickle, sys, time
clock = time.perf_counter if sys.argv[2] == "wall" else time.process_time
t0 = clock()
import flwr.clientapp, flwr.app
t1 = clock()
from fedlam.flower.client_app import app
from fedlam.flower.site import handle
req, node, rc, state = pickle.load(open(sys.argv[1], "rb"))
t2 = clock()
handle(req, node, rc, state)     # first round in this process: imports what the site needs
t3 = clock()
handle(req, node, rc, state)     # the same round again: the work alone
t4 = clock()
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3)
"""


def _median_after_first(secs: list[float]) -> float:
    a = np.asarray(secs, dtype=float)
    return float(np.median(a[1:])) if a.size > 1 else float(a[0])


def _site_probe_input(path: Path, nodes: list, rc: dict) -> None:
    """A round-1 request and site 0's state after round 0 (pickled for the probe)."""
    import pickle

    from fedlam.flower import coordinator, messages, testing

    fakes = [testing.FakeNode(100 + c, cfg) for c, cfg in enumerate(nodes)]
    h = coordinator.serve(testing.FakeGrid(fakes, rc), dict(rc, rounds=1), log=lambda _m: None)
    pats = np.array(h["rounds"][0]["patterns"], dtype=np.int8)
    req = messages.round_request(1, L, N, "float32", 0, pats)
    path.write_bytes(pickle.dumps((req, nodes[0], rc, fakes[0].state)))


def _probe(code: list[str], repeats: int = 3) -> list[float]:
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, *code], capture_output=True, text=True, check=True).stdout
        runs.append([float(v) for v in out.split()])
    return np.min(np.array(runs), axis=0).tolist()  # best of the repeats, per column


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--precisions", default="float32", help="comma-separated upload precisions of the fedlam runs")
    args = ap.parse_args()
    T = args.rounds
    precisions = args.precisions.split(",")
    nodes = [C.node_config_for_site(client_index=c, M=M, r=R_QUALITY, archetypes="silhouettes", mixture="class")
             for c in range(L)]
    rc = {"rounds": T, "seed": 0, "num-clients": L, "N": N, "archetypes": "silhouettes"}
    load = {"start": os.getloadavg()}
    print(f"load average at the start: {load['start']}", flush=True)

    # in-process round
    history.reference_history(dict(rc, rounds=1), nodes)  # warm-up: imports, data set
    best = []
    for _ in range(3):
        t0 = time.perf_counter()
        ref = history.reference_history(rc, nodes)
        best.append((time.perf_counter() - t0) / T)
    t_inproc = min(best)
    print(f"in-process round: {t_inproc:.3f} s (best of 3 runs of {T} rounds)", flush=True)

    # Flower: echo, echo with an upload-sized reply, fedlam -- on the same SuperLink and SuperNodes
    triu = N * (N + 1) // 2
    echo_text = (HERE / "flower_echo_app.py").read_text()
    rounds: dict[str, list[float]] = {}
    same = {}
    bytes_up = {}
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        t0 = time.perf_counter()
        with LocalFederation(nodes, out / "logs") as fed:
            print(f"SuperLink + {L} SuperNodes up in {time.perf_counter() - t0:.1f} s", flush=True)
            for tag, payload in (("echo", 0), ("echo+upload", triu)):
                run_id = fed.submit({"rounds": T, "num-clients": L, "payload": payload, "tag": tag,
                                     "out-dir": str(out)}, ECHO_COMPONENTS,
                                    files={"flower_echo_app.py": echo_text}, name="fedlam-echo")
                fed.wait(run_id, 1800, poll=1.0)
                rounds[tag] = json.loads((out / f"echo-{tag}.json").read_text())["seconds"]
                print(f"{tag}: {np.round(rounds[tag], 2).tolist()} s, load {os.getloadavg()[0]:.1f}", flush=True)
            for prec in precisions:
                run_dir = out / f"fedlam-{prec}"
                run_id = fed.submit(dict(rc, precision=prec, **{"out-dir": str(run_dir)}))
                fed.wait(run_id, 1800, poll=1.0)
                hist = history.load(run_dir)
                tag = f"fedlam {prec}"
                rounds[tag] = [r["seconds"] for r in hist["rounds"]]
                same[tag] = history.compare(hist, ref)["identical"] if prec == "float64" else \
                    bool(np.array_equal(history.arrays(hist)["k_hat"], ref.k_hat)
                         and np.array_equal(history.arrays(hist)["magnetization"], ref.magnetization))
                bytes_up[tag] = hist["rounds"][-1]["bytes_received"] // L
                print(f"{tag}: {np.round(rounds[tag], 2).tolist()} s, load {os.getloadavg()[0]:.1f}", flush=True)
    load["flower-end"] = os.getloadavg()

    # the client side in fresh processes: imports and one round's work
    with tempfile.TemporaryDirectory() as d:
        pk = Path(d) / "site.pkl"
        _site_probe_input(pk, nodes, dict(rc, precision="float32"))
        probes = {clock: _probe(["-c", _PROBE_SITE, str(pk), clock]) for clock in ("wall", "cpu")}
    load["end"] = os.getloadavg()

    echo = _median_after_first(rounds["echo"])
    echo_up = _median_after_first(rounds["echo+upload"])
    print()
    print(f"| quantity (N = {N}, L = {L}, median of rounds 1..{T - 1}) | seconds |")
    print("|---|---|")
    print(f"| in-process round (`run_federation`, best of 3) | {t_inproc:.3f} |")
    print(f"| echo round (empty reply) | {echo:.3f} |")
    print(f"| echo round with an upload-sized reply ({triu * 4 / 1e6:.2f} MB float32 per site) | {echo_up:.3f} |")
    target = 1.5 * t_inproc + 0.5
    for prec in precisions:
        tag = f"fedlam {prec}"
        f = _median_after_first(rounds[tag])
        print(f"| fedlam round, {prec} uploads ({bytes_up[tag] / 1e6:.2f} MB per site; K-hat and magnetizations "
              f"{'identical to' if same[tag] else 'DIFFERENT from'} in-process) | {f:.3f} |")
        print(f"| overhead = fedlam {prec} round - echo round | {f - echo:.3f} |")
        print(f"| target: overhead <= 1.5 x {t_inproc:.3f} + 0.5 = {target:.3f} | "
              f"**{'met' if f - echo <= target else 'not met'}** |")
    print()
    print("Client side, one fresh process each (best of 3; wall and CPU seconds of that process):")
    print("| step | wall | CPU |")
    print("|---|---|---|")
    (w_flwr, w_app, w_first, w_again), (c_flwr, c_app, c_first, c_again) = probes["wall"], probes["cpu"]
    print(f"| `import flwr.clientapp, flwr.app` (what the echo ClientApp imports too) | {w_flwr:.3f} | {c_flwr:.3f} |")
    print(f"| fedlam's ClientApp modules (`fedlam.flower.client_app`, `site`) | {w_app:.3f} | {c_app:.3f} |")
    print(f"| first round in the process (imports `fedlam.federation` and what a site uses, then the work) "
          f"| {w_first:.3f} | {c_first:.3f} |")
    print(f"| the same round again (the work alone: batch, controller, blend, encoding) | {w_again:.3f} | "
          f"{c_again:.3f} |")
    imp_w, imp_c = w_app + w_first - w_again, c_app + c_first - c_again
    print(f"| fedlam's import cost per ClientApp process (modules + first round - work) | {imp_w:.3f} | {imp_c:.3f} |")
    extra = L * (imp_c + c_again)
    print(f"| what fedlam's ClientApps add per round beyond the echo app: L x (imports + work) = {L} x "
          f"({imp_c:.3f} + {c_again:.3f}) CPU s; wall on 2 idle cores >= | {extra / 2:.3f} | {extra:.3f} |")
    print()
    sizes = {f"{p}{'' if not k else f' top-{k}'}": wire.operator_nbytes(N, p, k or None)
             for p, k in (("float64", 0), ("float32", 0), ("float16", 0), ("float32", 20), ("float32", 6))}
    print("upload per site on the wire: " + ", ".join(f"{k} {v / 1e6:.3f} MB" for k, v in sizes.items()))
    print(f"all rounds: { {k: np.round(v, 2).tolist() for k, v in rounds.items()} }")
    print(f"load average: {load}")


if __name__ == "__main__":
    main()
