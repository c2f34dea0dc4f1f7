r"""``python -m fedlam.flower local``: a whole Flower federation on this machine.

Starts a SuperLink and one SuperNode per site on 127.0.0.1 (free ports, ``--insecure``, runtime
dependency installation disabled), runs the fedlam ServerApp/ClientApp, writes
``DIR/history.json`` (:mod:`fedlam.flower.history`), ``DIR/history.png``, the processes' logs in
``DIR/logs/`` and ``DIR/command.txt``, and stops every process it started -- also on an error
or Ctrl-C. Every option is built and checked before any process starts
(:func:`plan_from_args`). Exit codes: 0 done, 1 the federation failed (the message says why; a
round in which no upload arrived is a failure unless ``--min-clients`` is given, which allows
skipping rounds), 2 bad arguments (argparse's convention: the message names the flag), 130
interrupted.

Examples::

    python -m fedlam.flower local --clients 5 --rounds 10 --out run1
    python -m fedlam.flower local --clients 5 --rounds 5 --archetypes silhouettes \
        --mixture class --r 0.8 --M 200 --out run-784 --compare
    python -m fedlam.flower local --data site0.npz site1.npz site2.npz --M 100 --rounds 5 \
        --out mine
    python -m fedlam.flower local --clients 6 --fraction 0.5 --min-clients 2 \
        --round-timeout 60 --kill-node 2 --kill-after-round 1 --out partial
    python -m fedlam.flower local --clients 5 --rounds 5 --defense support \
        --behaviour '4:hidden:{"seed": 3}' --compare --out attacked

``python -m fedlam.flower app DIR`` writes the app project (a ``pyproject.toml`` whose
components are imported from the installed ``fedlam``) that ``flwr run DIR FEDERATION``
submits to a SuperLink on real machines; chapter 13 ({ref}`sec-deploy-real`) gives the steps.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "build_parser", "plan_from_args", "run", "OptionError", "SERVER_OPTIONS", "CLIENT_OPTIONS"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fedlam.flower local",
                                description="Run a fedlam federation on Flower's Deployment Engine on "
                                "127.0.0.1 (one SuperLink, one SuperNode per site).")
    a = p.add_argument
    a("--out", required=True, help="output directory (history.json, history.png, logs/)")
    a("--clients", type=int, default=None, help="number of synthetic sites (default 5)")
    a("--rounds", type=int, default=10, help="rounds T (default 10)")
    a("--N", type=int, default=None, help="pattern dimension of random archetypes (default 200)")
    a("--K", type=int, default=None, help="number of random archetypes (default 3)")
    a("--r", type=float, default=None, help="channel quality of the synthetic sites (default 0.8)")
    a("--M", type=int, default=200, help="examples per site per round (default 200)")
    a("--seed", type=int, default=0, help="seed of the federation's random streams (default 0)")
    a("--archetype-seed", type=int, default=None, help="seed of the random archetypes (default: --seed)")
    a("--archetypes", default=None, choices=("random", "silhouettes"),
      help="random archetypes (default) or the paper's Caltech-101 silhouettes (N = 784, K = 3)")
    a("--mixture", default=None,
      help="class mixture of each site: uniform (default), class (one class per site), class:k, drift, or a "
      "JSON list")
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
    a("--server-options", default="{}", help="JSON keyword arguments of fedlam.federation.Server "
      "(k_rule, secure, defense, defense_params, acceptance)")
    a("--privacy", default=None,
      help="JSON privacy mechanism of every client, e.g. '{\"epsilon\": 2, \"delta\": 1e-5}' (the keyword "
      "arguments of fedlam.privacy.GaussianMechanism, or a \"factory\" naming another fedlam callable)")
    a("--client-options", default="{}", help="JSON keyword arguments of fedlam.federation.Client "
      "(privacy, behaviour)")
    a("--behaviour", action="append", metavar="I:NAME[:JSON]", default=None,
      help="site I behaves as NAME (fedlam.attacks: honest, flip, poison, hidden, targeted) with the JSON "
      "parameters, e.g. 4:hidden:{\"seed\": 3}; repeat for more sites (part of that site's node config)")
    a("--fraction", type=float, default=1.0, help="fraction of available sites asked each round")
    a("--min-clients", type=int, default=None,
      help="minimum number of uploads to run a round (default 1); giving it allows skipping rounds: without "
      "it a round in which no upload arrives fails the command")
    a("--dropout", type=float, default=0.0, help="simulated probability that an asked site's upload is lost")
    a("--round-timeout", type=float, default=0.0, help="seconds to wait for uploads (0 = wait for all)")
    a("--kill-node", type=int, default=None, help="kill this SuperNode after --kill-after-round (a failure demo)")
    a("--kill-after-round", type=int, default=None,
      help="with --kill-node: kill it once this many rounds + 1 are done (default 0)")
    a("--compare", action="store_true",
      help="also run fedlam.federation.run_federation in-process with the same seeds and report whether "
      "K-hat, patterns and magnetizations are bit-identical (compare.json)")
    a("--timeout", type=float, default=1800.0, help="give up after this many seconds (default 1800)")
    a("--no-figures", action="store_true", help="skip history.png")
    return p


class OptionError(ValueError):
    """A bad option of ``python -m fedlam.flower local``; the message names the flag (exit code 2)."""


def _flag(flag: str, fn: Any, *args: Any, **kw: Any) -> Any:
    """``fn(*args, **kw)``, its ValueError/TypeError re-raised as an :class:`OptionError` naming ``flag``."""
    try:
        return fn(*args, **kw)
    except (ValueError, TypeError) as exc:
        raise OptionError(f"{flag}: {exc}") from None


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise OptionError(message)


def _json_object(text: str, flag: str) -> dict:
    try:
        v = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{flag} must be a JSON object, got {text!r} ({exc.msg} at character {exc.pos})") from None
    if not isinstance(v, dict):
        raise OptionError(f"{flag} must be a JSON object ({{...}}), got {text!r}")
    return v


def _finite(x: float) -> bool:
    return math.isfinite(x)


#: keyword options of fedlam.federation.Server that --server-options may set (aggregation and
#: lam_params have their own flags)
SERVER_OPTIONS = ("k_rule", "secure", "defense", "defense_params", "acceptance")
#: keyword options of fedlam.federation.Client that --client-options may set (kind, r and N come
#: from each site's node config)
CLIENT_OPTIONS = ("privacy", "behaviour")


def _parse_behaviours(specs: Sequence[str] | None, L: int) -> dict[int, tuple[str, dict]]:
    """``--behaviour I:NAME[:JSON]`` entries -> {site index: (name, params)}, each checked."""
    from . import config as C

    out: dict[int, tuple[str, dict]] = {}
    for spec in specs or ():
        head, _, params_text = spec.partition(":{")
        idx_text, sep, name = head.partition(":")
        _need(bool(sep) and bool(name), f"--behaviour must be INDEX:NAME or INDEX:NAME:{{JSON}}, got {spec!r}")
        try:
            i = int(idx_text)
        except ValueError:
            raise OptionError(f"--behaviour {spec!r}: the site index must be an integer, got {idx_text!r}") from None
        _need(0 <= i < L, f"--behaviour {spec!r}: the site index must be in [0, {L}), got {i}")
        _need(i not in out, f"--behaviour: site {i} is given twice")
        params = _json_object("{" + params_text, f"--behaviour {spec!r}") if params_text else {}
        name = name.rstrip(":")
        _flag(f"--behaviour {spec!r}", C._behaviour, {"behaviour": name, "behaviour-params": json.dumps(params)})
        out[i] = (name, params)
    return out


def plan_from_args(ns: argparse.Namespace) -> tuple[dict, list[dict]]:
    """(run_config, node_configs) from the parsed arguments.

    Every option is checked here, before any process starts: the numbers, the JSON options, and
    the objects the federation will build are built once (the :class:`fedlam.federation.Server`,
    one :class:`fedlam.federation.Client` with the client options and privacy mechanism, the
    :class:`fedlam.participation.Participation`). Raises :class:`OptionError` (a ValueError)
    naming the flag.
    """
    from fedlam import federation, robust

    from . import config as C
    from .site import build_client, instantiate

    # -- options that do not apply are refused, then the defaults of the synthetic sites -------
    synthetic = {"--clients": ns.clients, "--N": ns.N, "--K": ns.K, "--r": ns.r, "--archetypes": ns.archetypes,
                 "--mixture": ns.mixture, "--archetype-seed": ns.archetype_seed}
    if ns.data:
        unused = [f for f, v in synthetic.items() if v is not None]
        _need(not unused, f"{', '.join(unused)} describe(s) synthetic sites, but --data gives the sites' own "
              "examples: drop one or the other")
    elif ns.archetypes == "silhouettes":
        unused = [f for f in ("--N", "--K", "--archetype-seed") if synthetic[f] is not None]
        _need(not unused, f"--archetypes silhouettes fixes N = 784 and K = 3 (the paper's prototypes); "
              f"drop {', '.join(unused)}")
    ns = argparse.Namespace(**{**vars(ns), **{k: v for k, v in (
        ("clients", 5), ("N", 200), ("K", 3), ("r", 0.8), ("archetypes", "random"), ("mixture", "uniform"))
        if getattr(ns, k) is None}})

    # -- numbers ------------------------------------------------------------------------------
    _need(1 <= ns.rounds <= 100_000, f"--rounds must be in [1, 100000], got {ns.rounds}")
    _need(0 <= ns.M <= 10_000_000, f"--M must be in [0, 10000000], got {ns.M}")
    _need(ns.seed >= 0, f"--seed must be >= 0, got {ns.seed}")
    _need(ns.archetype_seed is None or ns.archetype_seed >= 0,
          f"--archetype-seed must be >= 0, got {ns.archetype_seed}")
    _need(_finite(ns.r) and 0.0 < ns.r <= 1.0, f"--r must lie in (0, 1], got {ns.r}")
    _need(_finite(ns.timeout) and ns.timeout > 0, f"--timeout must be a finite number of seconds > 0, got {ns.timeout}")
    _need(_finite(ns.round_timeout) and ns.round_timeout >= 0,
          f"--round-timeout must be a finite number of seconds >= 0 (0 = wait for all), got {ns.round_timeout}")
    _need(_finite(ns.fraction) and 0.0 < ns.fraction <= 1.0, f"--fraction must lie in (0, 1], got {ns.fraction}")
    _need(_finite(ns.dropout) and 0.0 <= ns.dropout < 1.0, f"--dropout must lie in [0, 1), got {ns.dropout}")
    _need(ns.rank >= 0, f"--rank must be >= 0 (0 = full operator), got {ns.rank}")
    _flag("--controller", C._controller, ns.controller)
    aseed = ns.seed if ns.archetype_seed is None else ns.archetype_seed

    # -- sites --------------------------------------------------------------------------------
    if ns.data:
        sites_flag = "--data"
        L = len(ns.data)
        _need(L <= 64, f"--data: at most 64 sites on one machine (each site is 3 processes), got {L} files")
        nodes = []
        N = None
        for i, f in enumerate(ns.data):
            ex, _ = _flag(f"--data {f}", C.load_examples_file, f, N)  # a bad file fails before any process
            N = int(ex.shape[1])
            nodes.append(C.node_config_for_site(client_index=i, M=ns.M, path=str(Path(f).resolve()),
                                                r=None, seed=None))
        assert N is not None
        archetypes, K = "", 0
    else:
        sites_flag = "--clients"
        L = ns.clients
        _need(1 <= L <= 64, f"--clients must be in [1, 64] on one machine (each site is 3 processes), got {L}")
        if ns.archetypes == "silhouettes":
            N, K = 784, 3
        else:
            _need(2 <= ns.N <= C.MAX_N, f"--N must be in [2, {C.MAX_N}], got {ns.N}")
            _need(ns.K >= 1, f"--K must be >= 1, got {ns.K}")
            N, K = ns.N, ns.K
        for c in range(L):  # mixture strings are checked here, not in a SuperNode
            _flag("--mixture", C.parse_mixture, ns.mixture, ns.rounds, K, c, L)
        nodes = [_flag("--mixture", C.node_config_for_site, client_index=c, M=ns.M, r=ns.r,
                       archetypes=ns.archetypes, archetype_seed=aseed, K=K, N=N, mixture=ns.mixture)
                 for c in range(L)]
        archetypes = ns.archetypes
    behaviours = _parse_behaviours(ns.behaviour, L)
    for i, (name, params) in behaviours.items():
        nodes[i]["behaviour"] = name
        if params:
            nodes[i]["behaviour-params"] = json.dumps(params, sort_keys=True)
    n_flag = "--N" if archetypes == "random" else ("--data" if ns.data else "--archetypes silhouettes")
    _need(ns.rank <= N, f"--rank must be <= N = {N} ({n_flag}), got {ns.rank}")
    min_clients = 1 if ns.min_clients is None else ns.min_clients
    _need(min_clients >= 1, f"--min-clients must be >= 1, got {min_clients}")
    _need(min_clients <= L, f"--min-clients must be <= the number of sites ({sites_flag}: {L}), got {min_clients}")
    if ns.kill_node is not None:
        _need(0 <= ns.kill_node < L, f"--kill-node must be in [0, {L}), got {ns.kill_node}")
        _need(ns.rounds >= 2, f"--kill-node needs --rounds >= 2 (a round after the kill), got {ns.rounds}")
    if ns.kill_after_round is not None:
        _need(ns.kill_node is not None, "--kill-after-round needs --kill-node (which SuperNode to kill)")
        _need(0 <= ns.kill_after_round < ns.rounds - 1,
              f"--kill-after-round must be in [0, --rounds - 1) = [0, {ns.rounds - 1}) so that a round runs "
              f"after the kill, got {ns.kill_after_round}")

    # -- JSON options, and the objects they build -------------------------------------------
    lam_params = _json_object(ns.lam_params, "--lam-params")
    server_options = _json_object(ns.server_options, "--server-options")
    client_options = _json_object(ns.client_options, "--client-options")
    for flag, given, valid in (("--server-options", server_options, SERVER_OPTIONS),
                               ("--client-options", client_options, CLIENT_OPTIONS)):
        unknown = sorted(set(given) - set(valid))
        _need(not unknown, f"{flag}: unknown key(s) {unknown}; valid keys: {list(valid)}")
    if ns.defense is not None:
        _need("defense" not in server_options, "--defense and --server-options '{\"defense\": ...}' both given; "
              "give the defence once")
        _flag("--defense", robust.check_defense, ns.defense, None)
        server_options["defense"] = ns.defense
    if ns.privacy is not None:
        _need("privacy" not in client_options, "--privacy and --client-options '{\"privacy\": ...}' both given; "
              "give the mechanism once")
        privacy = _json_object(ns.privacy, "--privacy")
        privacy.setdefault("factory", "fedlam.privacy.GaussianMechanism")  # the one mechanism fedlam ships
        _flag("--privacy", instantiate, privacy)
        client_options["privacy"] = privacy
    _flag("--lam-params", federation.lam._make_params, None, lam_params)
    server_kw = _flag("--server-options", instantiate, server_options)
    server = _flag("--server-options" if ns.defense is None else "--defense / --server-options",
                   federation.Server, ns.aggregation, lam_params, **server_kw)
    if server.defense is not None:  # parameters that depend on the number of sites (Krum's f, support's s)
        _flag(f"--server-options (defense {server.defense!r} with {L} sites, {sites_flag})",
              robust.check_defense, server.defense, server_kw.get("defense_params"), L)
    rc = {
        "rounds": ns.rounds, "seed": ns.seed, "num-clients": L, "N": N, "precision": ns.precision,
        "rank": ns.rank, "controller": ns.controller, "known-r": ns.known_r, "aggregation": ns.aggregation,
        "lam-params": json.dumps(lam_params), "server-options": json.dumps(server_options),
        "client-options": json.dumps(client_options), "fraction": ns.fraction,
        "min-clients": min_clients, "dropout": ns.dropout, "round-timeout": ns.round_timeout,
        "skip-empty-rounds": ns.min_clients is not None,
        "archetypes": archetypes, "archetype-seed": aseed, "K": K,
    }
    run_config = _flag("run configuration", C.parse_run_config, rc)
    _flag("--fraction / --min-clients / --dropout / --round-timeout", run_config.participation)
    for i in sorted({0, *behaviours}):  # one site's client as the SuperNode will build it (and each attacker)
        flag = "--client-options" if ns.privacy is None else "--client-options / --privacy"
        _flag(flag, build_client, C.parse_node_config(nodes[i]), run_config, L, i)
    return rc, nodes


def run(run_config: dict, node_configs: list[dict], out: Path, timeout: float = 1800.0,
        kill_node: int | None = None, kill_after_round: int = 0, figures: bool = True,
        echo: Any = print) -> dict:
    """Run the federation on loopback and return its history (see the module notes)."""
    from .coordinator import WAITING_FILE
    from .deploy import FlowerError, LocalFederation
    from .history import load

    out.mkdir(parents=True, exist_ok=True)
    rc = dict(run_config, **{"out-dir": str(out.resolve())})
    hist_path, wait_path = out / "history.json", out / WAITING_FILE
    hist_path.unlink(missing_ok=True)
    wait_path.unlink(missing_ok=True)
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
        try:
            status = fed.wait(run_id, timeout, poll=1.0, on_poll=on_poll)
        except FlowerError as exc:
            failed = _failure_in_history(hist_path)
            if failed is None:
                waiting = _waiting_message(wait_path)
                if waiting is None:
                    raise
                raise FlowerError(f"{exc}: {waiting}. The sites' logs are in {out / 'logs'}") from exc
            raise FlowerError(f"{failed}. The sites' logs are in {out / 'logs'}") from exc
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


def _read_record(path: Path) -> dict | None:
    """A JSON record the ServerApp wrote (None if it is missing or unreadable)."""
    from .history import load

    try:
        return load(path) if path.exists() else None
    except (json.JSONDecodeError, OSError):
        return None


def _waiting_message(path: Path) -> str | None:
    """What the ServerApp was waiting for when it was stopped, if its waiting.json says."""
    w = _read_record(path)
    if not w:
        return None
    limit = ("--round-timeout 0 waits for every asked site; a positive --round-timeout ends the "
             "round without the missing ones" if not w.get("round_timeout") else
             f"--round-timeout was {w['round_timeout']:g} s")
    return f"round {w['t']} was still waiting for the uploads of clients {w['asked']} ({limit})"


def _failure_in_history(path: Path) -> str | None:
    """The ServerApp's reason for failing the federation, if it recorded one in history.json."""
    rec = _read_record(path)
    return None if rec is None else rec.get("failed")


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
    except (ValueError, TypeError) as exc:  # argparse's convention: usage, the error, exit code 2
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
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
                   kill_after_round=ns.kill_after_round or 0, figures=not ns.no_figures)
    except FlowerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: every Flower process stopped", file=sys.stderr)
        return 130
    R = hist["rounds"]
    skipped = [r["t"] for r in R if r["skipped"]]
    empty = [r["t"] for r in R if not r["answered"]]
    if skipped:
        print(f"warning: round(s) {skipped} skipped (fewer than --min-clients = {rc['min-clients']} uploads"
              + (f"; no upload at all in {empty}" if empty else "") + ")", file=sys.stderr)
    if len(skipped) == len(R):
        print(f"error: every round was skipped: no round of the federation ran (site logs in {out / 'logs'})",
              file=sys.stderr)
        return 1
    last = [r for r in R if not r["skipped"]][-1]
    print(f"done: {len(R)} rounds ({len(R) - len(skipped)} run) in {hist['wall_seconds']:.1f} s; "
          f"K-hat {last['k_hat']} after round {last['t']}"
          + (f", magnetization {[round(m, 3) for m in last['magnetization']]}" if "magnetization" in last else ""))
    if ns.compare:
        from .history import compare, reference_history

        cmp = compare(hist, reference_history(rc, nodes))
        (out / "compare.json").write_text(json.dumps(cmp, indent=1) + "\n")
        print(f"in-process run_federation with the same seeds: "
              f"{'bit-identical' if cmp['identical'] else 'DIFFERENT'} K-hat, patterns and magnetizations"
              + ("" if rc["precision"] == "float64" else f" (uploads sent as {rc['precision']})"))
    print(f"history in {out / 'history.json'}")
    return 0
