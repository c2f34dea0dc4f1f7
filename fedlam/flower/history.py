r"""The history of a Flower run (``history.json``), its in-process twin, and their comparison.

``history.json`` (written by the ServerApp after every round) holds ``config`` (the run
configuration), ``L``, ``N``, ``K``, ``nodes`` (client index -> Flower node id), ``server`` (its repr),
``participation`` and ``rounds``, one entry per round with

``t``, ``available``, ``asked``, ``answered``, ``lost`` (client indices), ``skipped`` (too few
answers), ``k_hat``, ``n_patterns``, ``patterns`` (the broadcast, K̂ x N of +-1),
``magnetization`` (K, when the archetypes are known) and ``spurious``, ``weights``,
``weights_raw``, ``r_used`` (L, null where a client did not report and in a skipped round, whose
reports are in ``discarded_weights``: as in :class:`fedlam.federation.History`, the weights the
server used), ``top_eigenvalues``,
``bytes_sent`` / ``bytes_received`` (array payload of the round's messages) and ``seconds``
(wall time of the round at the server). The launcher adds ``flower`` (run id, Flower's own
count of network bytes, compute time), ``wall_seconds``, ``run_config`` and ``node_configs``
(what it submitted), ``killed_nodes`` and ``dead_nodes``.

:func:`reference_history` runs :func:`fedlam.federation.run_federation` on the same sites and
seeds; :func:`compare` says round by round whether K̂, the patterns and the magnetizations are
identical. Derived in {ref}`sec-deploy-run`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import config as cfgmod

__all__ = ["load", "reference_history", "compare", "arrays"]


def load(path: str | Path) -> dict:
    """Read a ``history.json`` (a file or the directory holding it)."""
    p = Path(path)
    if p.is_dir():
        p = p / "history.json"
    return json.loads(p.read_text())


def arrays(hist: Mapping[str, Any]) -> dict:
    """Per-round arrays of a history: ``k_hat`` (T,) (-1 = skipped), ``magnetization`` (T, K)
    (NaN when unknown), ``weights`` (T, L), ``seconds`` (T,), ``bytes_sent``/``bytes_received`` (T,),
    ``patterns`` (list of (K̂_t, N) int8)."""
    R = hist["rounds"]
    N, L = int(hist["N"]), int(hist["L"])
    K = hist.get("K") or 0
    out = {
        "k_hat": np.array([-1 if r["k_hat"] is None else r["k_hat"] for r in R], dtype=np.int64),
        "weights": np.array([[np.nan if w is None else w for w in r["weights"]] for r in R],
                            dtype=float).reshape(len(R), L),
        "seconds": np.array([r["seconds"] for r in R], dtype=float),
        "bytes_sent": np.array([r["bytes_sent"] for r in R], dtype=np.int64),
        "bytes_received": np.array([r["bytes_received"] for r in R], dtype=np.int64),
        "patterns": [np.array(r["patterns"], dtype=np.int8).reshape(-1, N) for r in R],
        "answered": [tuple(r["answered"]) for r in R],
    }
    out["magnetization"] = (np.array([r["magnetization"] for r in R], dtype=float) if K
                            else np.full((len(R), 0), np.nan))
    return out


def reference_history(run_config: Mapping[str, Any], node_configs: Sequence[Mapping[str, Any]]) -> Any:
    """:func:`fedlam.federation.run_federation` on the same sites, seeds and options.

    Every site must be synthetic with the same archetypes, and carry its client index
    0..L-1 (the in-process loop has no transport; its clients are the sites). The sites'
    behaviours (node config), the server options and the clients' privacy mechanism are passed
    on (``ClientSpec(behaviour=...)``, ``run_federation(defense=..., privacy=...)``).
    """
    from fedlam import federation

    rc = cfgmod.parse_run_config(run_config)
    sites = [cfgmod.parse_node_config(c) for c in node_configs]
    L = rc.num_clients or len(sites)
    index = [-1 if s.client_index is None else s.client_index for s in sites]  # None is not in 0..L-1
    if sorted(index) != list(range(L)):
        raise ValueError(f"the sites' client-index values must be 0..{L - 1}, got "
                         f"{[s.client_index for s in sites]}")
    by_index = dict(zip(index, sites, strict=True))
    sites = [by_index[c] for c in range(L)]
    if any(s.source != "synthetic" for s in sites):
        raise ValueError("reference_history needs synthetic sites")
    xi = cfgmod.site_archetypes(sites[0])
    for s in sites[1:]:
        if not np.array_equal(cfgmod.site_archetypes(s), xi):
            raise ValueError("reference_history needs every site to draw from the same archetypes")
    if any(s.seed is not None and s.seed != rc.seed for s in sites):
        raise ValueError("reference_history needs the sites to use the run's seed")
    K = xi.shape[0]
    from .site import instantiate

    client_options = {k: instantiate(v) for k, v in rc.client_options.items()}
    unused = sorted(set(client_options) - {"privacy", "behaviour"})
    if unused:
        raise ValueError(f"reference_history cannot reproduce client-options {unused} in process")
    common = client_options.get("behaviour")
    specs = [federation.ClientSpec(r=s.r, M=s.M, kind=s.kind,
                                   mixture=cfgmod.parse_mixture(s.mixture, rc.rounds, K, c, L),
                                   behaviour=s.behaviour if s.behaviour is not None else common)
             for c, s in enumerate(sites)]  # sites[c] has client index c
    # Server(**server-options) and run_federation share the keywords k_rule, secure, defense, defense_params
    kw: dict[str, Any] = {k: instantiate(v) for k, v in rc.server_options.items()}
    if client_options.get("privacy") is not None:
        kw["privacy"] = client_options["privacy"]
    if not rc.participation().is_full:
        kw["participation"] = rc.participation()
    return federation.run_federation(
        xi, specs, rc.rounds, rc.seed, controller=rc.controller, ema_alpha=rc.ema_alpha, w_init=rc.w_init,
        known_r=rc.known_r, controller_params=rc.controller_params or None, lam_params=rc.lam_params or None,
        aggregation=rc.aggregation, n_top=rc.n_top, control_round0=rc.control_round0, **kw)


def compare(hist: Mapping[str, Any], ref: Any, weights_atol: float = 0.0) -> dict:
    """Round-by-round equality of a Flower history and an in-process ``History``.

    Returns ``{"identical": bool, "rounds": [{"t", "k_hat", "patterns", "magnetization",
    "weights"}...]}`` where each entry is True when bit-identical (weights: equal where both
    are defined, NaN matching NaN; or within ``weights_atol`` -- a history recorded on another
    machine or BLAS kernel can differ in the last bits of the controllers' weights while K̂,
    the patterns and the magnetizations agree exactly).
    """
    a = arrays(hist)
    rows = []
    for t in range(len(hist["rounds"])):
        row = {"t": t,
               "k_hat": int(a["k_hat"][t]) == int(ref.k_hat[t]),
               "patterns": np.array_equal(a["patterns"][t], np.asarray(ref.patterns[t], dtype=np.int8)),
               "weights": bool(np.allclose(a["weights"][t], np.asarray(ref.weights[t]), rtol=0.0,
                                           atol=weights_atol, equal_nan=True)) if weights_atol
               else np.array_equal(a["weights"][t], np.asarray(ref.weights[t]), equal_nan=True)}
        if a["magnetization"].size:
            row["magnetization"] = np.array_equal(a["magnetization"][t], ref.magnetization[t])
        rows.append(row)
    identical = all(all(v for k, v in r.items() if k != "t") for r in rows)
    return {"identical": bool(identical), "rounds": rows}
