r"""``python -m fedlam.flower local``: a whole Flower federation on this machine.

Starts a SuperLink and one SuperNode per site on 127.0.0.1 (free ports, ``--insecure``, runtime
dependency installation disabled), runs the fedlam ServerApp/ClientApp, writes
``DIR/history.json`` (:mod:`fedlam.flower.history`), ``DIR/history.png``, the processes' logs in
``DIR/logs/`` and ``DIR/command.txt``, and stops every process it started -- also on an error
or Ctrl-C. Exit codes: 0 done, 1 the federation failed (message says why), 2 bad arguments,
130 interrupted.

Examples::

    python -m fedlam.flower local --clients 5 --rounds 10 --out run1
    python -m fedlam.flower local --clients 5 --rounds 5 --archetypes silhouettes \
        --mixture class --r 0.8 --M 200 --out run-784 --compare
    python -m fedlam.flower local --data site0.npz site1.npz site2.npz --M 100 --rounds 5 \
        --out mine
    python -m fedlam.flower local --clients 6 --fraction 0.5 --min-clients 2 \
        --round-timeout 60 --kill-node 2 --kill-after-round 1 --out partial

``python -m fedlam.flower app DIR`` writes the app project (a ``pyproject.toml`` whose
components are imported from the installed ``fedlam``) that ``flwr run DIR FEDERATION``
submits to a SuperLink on real machines; chapter 13 ({ref}`sec-deploy-real`) gives the steps.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "build_parser", "plan_from_args", "run"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fedlam.flower local",
                                description="Run a fedlam federation on Flower's Deployment Engine on "
                                "127.0.0.1 (one SuperLink, one SuperNode per site).")
    a = p.add_argument
    a("--out", required=True, help="output directory (history.json, history.png, logs/)")
    a("--clients", type=int, default=5, help="number of synthetic sites (default 5)")
    a("--rounds", type=int, default=10, help="rounds T (default 10)")
    a("--N", type=int, default=200, help="pattern dimension of random archetypes (default 200)")
    a("--K", type=int, default=3, help="number of random archetypes (default 3)")
    a("--r", type=float, default=0.8, help="channel quality of the synthetic sites (default 0.8)")
    a("--M", type=int, default=200, help="examples per site per round (default 200)")
    a("--seed", type=int, default=0, help="seed of the federation's random streams (default 0)")
    a("--archetype-seed", type=int, default=None, help="seed of the random archetypes (default: --seed)")
    a("--archetypes", default="random", choices=("random", "silhouettes"),
      help="random archetypes or the paper's Caltech-101 silhouettes (N = 784, K = 3)")
    a("--mixture", default="uniform",
      help="class mixture of each site: uniform, class (one class per site), class:k, drift, or a JSON list")
    a("--data", nargs="+", metavar="FILE", default=None,
      help="one .npy/.npz file of +-1 examples per site (replaces the synthetic sites)")
    a("--precision", default="float32", choices=("float64", "float32", "float16"),
      help="precision of the uploaded operator (default float32)")
    a("--rank", type=int, default=0, help="upload only the top-k eigenpairs (0 = full operator)")
    a("--controller", default="paper", help="paper, novelty, or a constant weight in [0, 1]")
    a("--known-r", action="store_true", help="controllers use the sites' r instead of estimating it")
    a("--aggregation", default="equal", choices=("equal", "batch"))
    a("--lam-params", default="{}", help="JSON options of fedlam.lam.factorize")
    a("--defense", default=None, help="server defence (fedlam.robust), passed as Server(defense=...)")
    a("--server-options", default="{}", help="JSON keyword arguments of fedlam.federation.Server")
    a("--privacy", default=None, help="JSON privacy options of every client (Client(privacy=...))")
    a("--client-options", default="{}", help="JSON keyword arguments of fedlam.federation.Client")
    a("--fraction", type=float, default=1.0, help="fraction of available sites asked each round")
    a("--min-clients", type=int, default=1, help="minimum number of uploads to run a round")
    a("--dropout", type=float, default=0.0, help="simulated probability that an asked site's upload is lost")
    a("--round-timeout", type=float, default=0.0, help="seconds to wait for uploads (0 = wait for all)")
    a("--kill-node", type=int, default=None, help="kill this SuperNode after --kill-after-round (a failure demo)")
    a("--kill-after-round", type=int, default=0)
    a("--compare", action="store_true",
      help="also run fedlam.federation.run_federation in-process with the same seeds and report whether "
      "K-hat, patterns and magnetizations are bit-identical (compare.json)")
    a("--timeout", type=float, default=1800.0, help="give up after this many seconds (default 1800)")
    a("--no-figures", action="store_true", help="skip history.png")
    return p


def plan_from_args(ns: argparse.Namespace) -> tuple[dict, list[dict]]:
    """(run_config, node_configs) from the parsed arguments; raises ValueError on bad values."""
    from . import config as C

    for name in ("clients", "rounds", "M"):
        if getattr(ns, name) < (0 if name == "M" else 1):
            raise ValueError(f"--{name} must be >= {0 if name == 'M' else 1}, got {getattr(ns, name)}")
    if ns.clients > 64:
        raise ValueError(f"--clients must be <= 64 on one machine (each site is 3 processes), got {ns.clients}")
    aseed = ns.seed if ns.archetype_seed is None else ns.archetype_seed
    server_options = json.loads(ns.server_options)
    client_options = json.loads(ns.client_options)
    if not isinstance(server_options, dict) or not isinstance(client_options, dict):
        raise ValueError("--server-options and --client-options must be JSON objects")
    if ns.defense is not None:
        server_options["defense"] = ns.defense
    if ns.privacy is not None:
        client_options["privacy"] = json.loads(ns.privacy)
    if ns.data:
        L = len(ns.data)
        nodes = []
        N = None
        for i, f in enumerate(ns.data):
            ex, _ = C.load_examples_file(f, N)  # validate now: a bad file fails before any process starts
            N = ex.shape[1]
            nodes.append(C.node_config_for_site(client_index=i, M=ns.M, path=str(Path(f).resolve()),
                                                r=None, seed=None))
        archetypes, K = "", 0
    else:
        L = ns.clients
        if ns.archetypes == "silhouettes":
            N, K = 784, 3
        else:
            N, K = ns.N, ns.K
        nodes = [C.node_config_for_site(client_index=c, M=ns.M, r=ns.r, archetypes=ns.archetypes,
                                        archetype_seed=aseed, K=K, N=N, mixture=ns.mixture)
                 for c in range(L)]
        for c in range(L):  # mixture strings are checked here, not in a SuperNode
            C.parse_mixture(ns.mixture, ns.rounds, K, c, L)
        archetypes = ns.archetypes
    rc = {
        "rounds": ns.rounds, "seed": ns.seed, "num-clients": L, "N": N, "precision": ns.precision,
        "rank": ns.rank, "controller": ns.controller, "known-r": ns.known_r, "aggregation": ns.aggregation,
        "lam-params": ns.lam_params, "server-options": json.dumps(server_options),
        "client-options": json.dumps(client_options), "fraction": ns.fraction,
        "min-clients": ns.min_clients, "dropout": ns.dropout, "round-timeout": ns.round_timeout,
        "archetypes": archetypes, "archetype-seed": aseed, "K": K,
    }
    C.parse_run_config(rc)
    if ns.kill_node is not None and not 0 <= ns.kill_node < L:
        raise ValueError(f"--kill-node must be in [0, {L}), got {ns.kill_node}")
    return rc, nodes


def run(run_config: dict, node_configs: list[dict], out: Path, timeout: float = 1800.0,
        kill_node: int | None = None, kill_after_round: int = 0, figures: bool = True,
        echo: Any = print) -> dict:
    """Run the federation on loopback and return its history (see the module notes)."""
    from .deploy import LocalFederation
    from .history import load

    out.mkdir(parents=True, exist_ok=True)
    rc = dict(run_config, **{"out-dir": str(out.resolve())})
    hist_path = out / "history.json"
    if hist_path.exists():
        hist_path.unlink()
    t0 = time.monotonic()
    killed: list[int] = []
    killed_at: list[int] = []

    def on_poll(_st: dict) -> None:
        if kill_node is None or killed or not hist_path.exists():
            return
        try:
            h = load(hist_path)
        except (json.JSONDecodeError, OSError):
            return
        if len(h["rounds"]) > kill_after_round:
            echo(f"killing SuperNode {kill_node} after round {kill_after_round}")
            fed.kill_node(kill_node)
            killed.append(kill_node)
            killed_at.append(len(h["rounds"]))  # rounds completed when the kill happened

    with LocalFederation(node_configs, out / "logs") as fed:
        echo(f"SuperLink on 127.0.0.1:{fed.superlink_port}, {len(node_configs)} SuperNode(s) on ports "
             f"{fed.node_ports} ({time.monotonic() - t0:.1f} s)")
        run_id = fed.submit(rc)
        echo(f"run {run_id} submitted; waiting (logs in {out / 'logs'})")
        status = fed.wait(run_id, timeout, poll=1.0, on_poll=on_poll)
        dead = [i for i in fed.dead_nodes() if i not in killed]
    hist = load(hist_path)
    hist["config"]["out_dir"] = str(out)  # as given (the absolute path was only for the ServerApp)
    hist["run_config"] = dict(run_config)  # what was submitted (without out-dir)
    hist["node_configs"] = [dict(c) for c in node_configs]
    hist["flower"] = {"run-id": run_id, "status": status.get("status"),
                      "network-traffic": status.get("network-traffic"), "compute-time": status.get("compute-time")}
    hist["wall_seconds"] = round(time.monotonic() - t0, 2)
    hist["killed_nodes"] = killed
    hist["killed_after_rounds"] = killed_at
    if dead:
        echo(f"warning: SuperNode(s) {dead} exited during the run (see logs/)")
    hist["dead_nodes"] = dead
    from .coordinator import _write_json

    _write_json(hist_path, hist)
    if figures:
        from .plots import save_history_figures

        save_history_figures(hist, out)
    return hist


def _write_app_command(argv: list[str]) -> int:
    """``python -m fedlam.flower app DIR``: the app project for ``flwr run DIR FEDERATION``."""
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m fedlam.flower app DIR", file=sys.stderr)
        return 2
    from .config import RUN_DEFAULTS
    from .deploy import write_app

    try:
        p = write_app(argv[0], RUN_DEFAULTS)
    except OSError as exc:
        print(f"error: cannot write {argv[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {p}; run it with: flwr run {argv[0]} <federation> --run-config 'rounds=10 ...' --stream")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m fedlam.flower local``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "app":
        return _write_app_command(argv[1:])
    if not argv or argv[0] != "local":
        print("usage: python -m fedlam.flower local --out DIR [options]   (--help for the options)\n"
              "       python -m fedlam.flower app DIR   (write the Flower app for `flwr run DIR ...`)",
              file=sys.stderr)
        return 2
    parser = build_parser()
    ns = parser.parse_args(argv[1:])
    try:
        rc, nodes = plan_from_args(ns)
    except (ValueError, TypeError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        import flwr  # noqa: F401
    except ImportError:
        print("error: Flower is not installed: pip install 'fedlam[flower]'", file=sys.stderr)
        return 2
    out = Path(ns.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "command.txt").write_text("python -m fedlam.flower " + shlex.join(argv) + "\n")
    except OSError as exc:
        print(f"error: --out {str(out)!r} is not writable: {exc.strerror or exc}", file=sys.stderr)
        return 2
    from .deploy import FlowerError

    try:
        hist = run(rc, nodes, out, timeout=ns.timeout, kill_node=ns.kill_node,
                   kill_after_round=ns.kill_after_round, figures=not ns.no_figures)
    except FlowerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: every Flower process stopped", file=sys.stderr)
        return 130
    R = hist["rounds"]
    print(f"done: {len(R)} rounds in {hist['wall_seconds']:.1f} s; final K-hat {R[-1]['k_hat']}"
          + (f", magnetization {[round(m, 3) for m in R[-1]['magnetization']]}" if "magnetization" in R[-1] else ""))
    if ns.compare:
        from .history import compare, reference_history

        cmp = compare(hist, reference_history(rc, nodes))
        (out / "compare.json").write_text(json.dumps(cmp, indent=1) + "\n")
        print(f"in-process run_federation with the same seeds: "
              f"{'bit-identical' if cmp['identical'] else 'DIFFERENT'} K-hat, patterns and magnetizations"
              + ("" if rc["precision"] == "float64" else f" (uploads sent as {rc['precision']})"))
    print(f"history in {out / 'history.json'}")
    return 0
