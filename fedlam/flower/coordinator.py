r"""The server side of a fedlam Flower federation: the round loop over a Flower ``Grid``.

:func:`serve` is the whole ServerApp: it greets the SuperNodes (``hello``), then every round
samples the clients to ask (:class:`fedlam.participation.Participation`), sends them the last
broadcast, waits for their uploads (at most ``round-timeout`` seconds), runs the same
:class:`fedlam.federation.Server` step as :func:`fedlam.federation.run_federation` on the uploads
that arrived (ordered by client index, so the aggregate's floating-point sums are identical), and
broadcasts the accepted patterns. It uses only ``get_node_ids``, ``push_messages`` and
``pull_messages`` of the Grid, so a fake Grid can drive it in unit tests. Derived in
{ref}`sec-deploy-run` and {ref}`sec-deploy-participation`.

The loop polls for replies every 50 ms (Flower's own ``send_and_receive`` sleeps 3 s between
polls, which would add up to 3 s to every round).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import config as cfgmod
from . import messages

__all__ = ["serve", "FederationFailed", "POLL_SECONDS"]

POLL_SECONDS = 0.05
#: beside history.json while a round waits for its uploads: the round and the clients asked
WAITING_FILE = "waiting.json"


class FederationFailed(RuntimeError):
    """The federation cannot go on (too few sites connected, every round failing)."""


def _message(content: Any, node_id: int, group: str) -> Any:
    from flwr.app import Message, MessageType

    return Message(content, dst_node_id=int(node_id), message_type=MessageType.QUERY, group_id=group)


def _exchange(grid: Any, contents: Mapping[int, Any], timeout: float | None, log: Callable,
              group: str = "", errors: dict[int, str] | None = None) -> dict:
    """Send ``contents[node]`` to each node, collect replies until all arrived or ``timeout``.

    Returns ``{node_id: reply_content}`` for nodes that replied without error; errors are logged
    and, when ``errors`` is given, stored there (``{node_id: reason}``).
    """
    if not contents:
        return {}
    msgs = [_message(c, n, group) for n, c in contents.items()]
    ids = list(grid.push_messages(msgs))
    # not strict: a Flower grid may return fewer ids than messages (none at all on a push error)
    pending = {mid: int(n) for mid, n in zip(ids, contents, strict=False) if mid}
    out: dict[int, Any] = {}
    t_end = None if timeout is None else time.monotonic() + timeout
    while pending:
        for rep in grid.pull_messages(list(pending)):
            mid = rep.metadata.reply_to_message_id
            node = pending.pop(mid, None)
            if node is None:
                continue
            if rep.has_error():
                log(f"site {node} answered with an error: {rep.error.reason}")
                if errors is not None:
                    errors[node] = str(rep.error.reason)
            else:
                out[node] = rep.content
        if not pending or (t_end is not None and time.monotonic() >= t_end):
            break
        time.sleep(POLL_SECONDS)
    return out


class _Sites:
    """The SuperNodes known to the server: node id <-> client index."""

    def __init__(self, N: int, log: Callable) -> None:
        self.N = N
        self.index_of: dict[int, int] = {}
        self.rejected: set[int] = set()
        self.log = log

    def greet(self, grid: Any, node_ids: list[int], timeout: float) -> None:
        new = [n for n in node_ids if n not in self.index_of and n not in self.rejected]
        if not new:
            return
        replies = _exchange(grid, {n: messages.hello_request() for n in new}, timeout, self.log, "hello")
        pending_auto = []
        for n in sorted(replies):
            cfg = replies[n]["fedlam"]
            idx, N = int(cfg["client-index"]), int(cfg["N"])
            if self.N and N != self.N:
                self.log(f"site {n} has N = {N}, the federation uses N = {self.N}: not admitted")
                self.rejected.add(n)
                continue
            self.N = self.N or N
            if idx < 0:
                pending_auto.append(n)
            elif idx in self.index_of.values():
                self.log(f"site {n} claims client-index {idx}, already taken: not admitted")
                self.rejected.add(n)
            else:
                self.index_of[n] = idx
        for n in pending_auto:  # sites without an index: the next free ones, in node-id order
            self.index_of[n] = max(self.index_of.values(), default=-1) + 1

    def available(self, node_ids: list[int]) -> dict[int, int]:
        """client index -> node id, for the known sites among ``node_ids``."""
        live = set(node_ids)
        return {i: n for n, i in self.index_of.items() if n in live}


def _server_step(server: Any, ops: list, scal: list, rng: np.random.Generator,
                 k_broadcast: int, patterns: np.ndarray | None = None,
                 precision: np.ndarray | None = None,
                 start: np.ndarray | None = None) -> tuple[np.ndarray, Any, np.ndarray, Any]:
    """One :class:`fedlam.federation.Server` step on the received uploads (ordered by client
    index): (patterns, factorize result, aggregate, the round's ``RoundResult``). ``patterns`` is the
    last broadcast: a server that reads every upload (a defence, or the fresh acceptance:
    ``Server.needs_uploads``) removes its operator from the uploads, as ``run_federation`` does;
    with ``precision`` (the last round's) the voted acceptance merges refined versions into the
    stored ones (``Server.round``'s ``stored``/``precision``); ``start`` (the last round's
    detected eigenvectors, ``RoundResult.warm_start``) warm-starts the block eigensolver, as in
    ``run_federation``."""
    from fedlam.protocol import Upload

    uploads = [Upload(op, s["batch-size"], s["weight"], s["noise-var"], s["dp-sigma"])
               for op, s in zip(ops, scal, strict=True)]
    kw = {}
    if server.needs_broadcast and patterns is not None:
        kw["broadcast"] = server.broadcast(patterns)
    if patterns is not None and precision is not None:
        kw.update(stored=patterns, precision=precision)
    rr = server.round(uploads, rng, broadcast_rank=k_broadcast, start=start, **kw)
    return np.asarray(rr.patterns, dtype=np.int8), rr.result, rr.aggregate, rr


def _write_json(path: Path, obj: Any) -> None:
    from fedlam.experiments._common import jsonable

    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(jsonable(obj), indent=1) + "\n")
    os.replace(tmp, path)


def serve(grid: Any, run_config: Mapping[str, Any], log: Callable[[str], None] = print) -> dict:
    """Run the federation over ``grid`` and return its history (also written to ``out-dir``).

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        Flower's Grid (or a fake with ``get_node_ids``, ``push_messages``, ``pull_messages``).
    run_config : mapping
        The run configuration (:data:`fedlam.flower.config.RUN_DEFAULTS` keys).
    log : callable
        Progress messages.

    Returns
    -------
    dict
        The history (see :mod:`fedlam.flower.history`).
    """
    from fedlam import federation, metrics

    rc = cfgmod.parse_run_config(run_config)
    part = rc.participation()
    xi = cfgmod.reference_archetypes(rc)
    out_path = Path(rc.out_dir) / "history.json" if rc.out_dir else None
    # waiting.json: a small record of the round in progress (history.json is rewritten once a round)
    wait_path = out_path.with_name(WAITING_FILE) if out_path is not None else None
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    sites = _Sites(rc.N, log)
    want = max(rc.num_clients, rc.min_clients)
    t0 = time.monotonic()
    while True:  # wait for the sites of round 0
        sites.greet(grid, list(grid.get_node_ids()), timeout=30.0)
        if len(sites.index_of) >= want:
            break
        if time.monotonic() - t0 > rc.wait_timeout:
            if len(sites.index_of) >= rc.min_clients:
                break
            raise FederationFailed(f"only {len(sites.index_of)} site(s) connected within wait-timeout = "
                                   f"{rc.wait_timeout:g} s; need min-clients = {rc.min_clients}")
        time.sleep(0.2)
    L = rc.num_clients or len(sites.index_of)
    N = sites.N
    if any(i >= L for i in sites.index_of.values()):
        raise FederationFailed(f"client indices {sorted(sites.index_of.values())} do not fit L = {L} "
                               "(num-clients)")
    log(f"{len(sites.index_of)} site(s) connected, L = {L}, N = {N}, waited {time.monotonic() - t0:.1f} s")
    streams = np.random.default_rng(rc.seed).spawn(L + 2)
    rng_server, rng_part = streams[L], streams[L + 1]
    from .site import instantiate

    server_kw = {k: instantiate(v) for k, v in rc.server_options.items()}
    if server_kw.get("acceptance") is None:
        # as run_federation: the clients' example-level privacy decides the default acceptance
        server_kw["acceptance"] = federation.default_acceptance(
            secure=server_kw.get("secure", False), defense=server_kw.get("defense"),
            client_privacy=server_kw.get("client_privacy"),
            privacy=rc.client_options.get("privacy"))   # its presence decides, not its values
    server = federation.Server(rc.aggregation, rc.lam_params, **server_kw)
    T = rc.rounds
    hist: dict[str, Any] = {
        "config": rc.to_dict(), "L": L, "N": N, "K": None if xi is None else int(xi.shape[0]),
        "nodes": {}, "rounds": [], "server": repr(server), "participation": part.to_dict(),
    }
    patterns = None  # the last broadcast (None: none yet)
    precision: np.ndarray | None = None   # its patterns' precision (the voted acceptance keeps one)
    start: np.ndarray | None = None       # the last round's detected eigenvectors (warm start)
    k_broadcast = 0
    for t in range(T):
        t_round = time.monotonic()
        node_ids = list(grid.get_node_ids())
        sites.greet(grid, node_ids, timeout=10.0)
        avail = {i: n for i, n in sites.available(node_ids).items() if i < L}
        hist["nodes"] = {str(i): str(n) for n, i in sites.index_of.items()}
        sample = part.sample_round(t, sorted(avail), rng_part)
        reqs = {avail[i]: messages.round_request(t, L, N, rc.precision, rc.rank, patterns) for i in sample.asked}
        sent = sum(messages.payload_bytes(c) for c in reqs.values())
        node_errors: dict[int, str] = {}
        if wait_path is not None:  # who the round waits for, should the run be stopped while it waits
            _write_json(wait_path, {"t": t, "asked": list(sample.asked), "round_timeout": rc.round_timeout})
        replies = _exchange(grid, reqs, rc.round_timeout, log, str(t), errors=node_errors)
        if wait_path is not None:
            wait_path.unlink(missing_ok=True)
        received = sum(messages.payload_bytes(c) for c in replies.values())
        uploads: dict[int, tuple] = {}
        for i in sample.answered:  # simulated drop-outs are discarded here, as in run_federation
            n = avail[i]
            if n in replies:
                try:
                    uploads[i] = messages.read_round_reply(replies[n], N)
                except (ValueError, KeyError, TypeError) as exc:
                    log(f"round {t}: upload of client {i} rejected: {exc}")
        order = sorted(uploads)
        index_of_node = {n: i for i, n in avail.items()}
        rec: dict[str, Any] = {
            "t": t, "available": sorted(avail), "asked": list(sample.asked), "answered": order,
            "lost": sorted(set(sample.asked) - set(order)),
            "errors": {str(index_of_node[n]): _short(e) for n, e in sorted(node_errors.items())},
            "bytes_sent": sent, "bytes_received": received,
        }
        if not order and not rc.skip_empty_rounds:
            hist["failed"] = _empty_round_message(t, list(sample.asked), rec["errors"])
            hist["rounds"].append(rec)
            if out_path is not None:
                _write_json(out_path, hist)
            raise FederationFailed(hist["failed"])
        weights = [math.nan] * L
        w_raw = [math.nan] * L
        r_used = [math.nan] * L
        for i, (_, s) in uploads.items():
            weights[i], w_raw[i], r_used[i] = s["weight"], _nan(s["w-raw"]), _nan(s["r-used"])
        if len(order) >= rc.min_clients:
            rec.update({"weights": weights, "weights_raw": w_raw, "r_used": r_used})
            ops = [uploads[i][0] for i in order]
            scal = [uploads[i][1] for i in order]
            patterns, result, J, rr = _server_step(server, ops, scal, rng_server, k_broadcast, patterns,
                                                   precision, start)
            precision, start = rr.precision, rr.warm_start
            k_broadcast = patterns.shape[0]
            vals = np.sort(np.asarray(federation._server_values(result, J)))[::-1]
            rec.update({"skipped": False, "k_hat": int(result.k_hat), "n_patterns": int(k_broadcast),
                        "top_eigenvalues": vals[: rc.n_top].tolist()})
        else:
            log(f"round {t}: {len(order)} upload(s), min-clients = {rc.min_clients}: round skipped")
            # the weights of a history are those the server used (run_federation's record): a
            # skipped round used none; what the answering clients reported is kept apart
            unused = [math.nan] * L
            rec.update({"weights": unused, "weights_raw": unused, "r_used": unused, "discarded_weights": weights})
            rec.update({"skipped": True, "k_hat": None,
                        "n_patterns": None if patterns is None else int(patterns.shape[0])})
        pats = patterns if patterns is not None else np.zeros((0, N), dtype=np.int8)
        rec["patterns"] = pats.tolist()
        if xi is not None:
            rec["magnetization"] = metrics.magnetization(pats, xi).tolist()
            rec["spurious"] = int(metrics.spurious_count(pats, xi))
        rec["seconds"] = round(time.monotonic() - t_round, 3)
        hist["rounds"].append(rec)
        log(f"round {t}: asked {list(sample.asked)}, {len(order)} upload(s), K-hat "
            f"{rec['k_hat']}, {rec['seconds']:.2f} s")
        if out_path is not None:
            _write_json(out_path, hist)
    hist["seconds"] = round(time.monotonic() - t0, 3)
    hist["completed"] = True
    if out_path is not None:
        _write_json(out_path, hist)
    return hist


def _short(reason: str, limit: int = 600) -> str:
    """A site's error reason for the history (the last ``limit`` characters of a traceback)."""
    reason = reason.strip()
    return reason if len(reason) <= limit else "..." + reason[-limit:]


def _empty_round_message(t: int, asked: list[int], errors: Mapping[str, str]) -> str:
    """Why round ``t`` got no upload, for the history and the command's error message."""
    if not asked:
        why = "no site was available to ask"
    else:
        why = f"none of the {len(asked)} site(s) asked ({asked}) sent an upload"
        if errors:
            first = next(iter(errors.items()))
            last_line = first[1].strip().splitlines()[-1] if first[1].strip() else "(no reason)"
            why += (f"; {len(errors)} answered with an error, e.g. site {first[0]}: {last_line}")
        else:
            why += " (no answer within round-timeout, or dropped out)"
    return (f"round {t} got no upload: {why}. The federation stops here (run config "
            "skip-empty-rounds = false; on the command line, give --min-clients to allow skipping "
            "rounds)")


def _nan(v: Any) -> float:
    return math.nan if v is None else float(v)
