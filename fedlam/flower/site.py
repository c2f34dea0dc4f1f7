r"""The site side of a fedlam Flower federation: one :class:`fedlam.federation.Client` per SuperNode.

Flower starts a fresh ClientApp process for every message, so the client object (its data
source, controller state and random stream) is kept in the SuperNode's ``context.state``
between rounds, pickled into a ``ConfigRecord`` entry. That state stays on the site's machine
(the SuperNode holds it; it is never sent). The client is built on the first round message,
which carries the number of clients L that fixes the site's random stream
``default_rng(seed).spawn(L + 1)[client_index]`` -- the stream :func:`fedlam.federation.run_federation`
gives client ``client_index``, so the same seeds give the same numbers in both.
Derived in {ref}`sec-deploy-run`.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import config as cfgmod
from . import messages, wire

__all__ = ["SiteState", "build_client", "handle", "instantiate"]

_STATE_KEY = "fedlam-site"


class SiteState:
    """What a site keeps between rounds (pickled into ``context.state``)."""

    def __init__(self, client: Any, client_index: int, N: int) -> None:
        self.client = client
        self.client_index = client_index
        self.N = N


def _site_stream(site: cfgmod.SiteConfig, rc: cfgmod.RunConfig, L: int, client_index: int) -> np.random.Generator:
    seed = rc.seed if site.seed is None else site.seed
    return np.random.default_rng(seed).spawn(L + 1)[client_index]


def instantiate(value: Any) -> Any:
    """Build option objects from JSON: a dict with a ``"factory"`` key naming a callable inside
    the ``fedlam`` package (e.g. ``{"factory": "fedlam.privacy.GaussianMechanism", "epsilon": 2.0}``)
    is replaced by ``factory(**rest)``; other values are returned unchanged (recursively for
    dicts and lists). Only ``fedlam.*`` names are accepted.
    """
    import importlib

    if isinstance(value, list):
        return [instantiate(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "factory" not in value:
        return {k: instantiate(v) for k, v in value.items()}
    name = value["factory"]
    if not isinstance(name, str) or not name.startswith("fedlam.") or "." not in name[len("fedlam."):]:
        raise ValueError(f"factory must name a callable inside fedlam (fedlam.module.Name), got {name!r}")
    mod_name, _, attr = name.rpartition(".")
    try:
        fn = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError):
        raise ValueError(f"factory {name!r} cannot be imported") from None
    if not callable(fn):
        raise ValueError(f"factory {name!r} is not callable")
    return fn(**{k: instantiate(v) for k, v in value.items() if k != "factory"})


def build_client(site: cfgmod.SiteConfig, rc: cfgmod.RunConfig, L: int, client_index: int) -> SiteState:
    """The fedlam client of this site, exactly as ``run_federation`` builds client ``client_index``."""
    from fedlam import controller as ctl
    from fedlam import federation

    if not 0 <= client_index < max(L, 1):
        raise ValueError(f"client-index {client_index} must be in [0, L = {L})")
    rng = _site_stream(site, rc, L, client_index)
    is_const = not isinstance(rc.controller, str)
    controller = ctl.make_controller(rc.controller, r=site.r if rc.known_r else None, alpha=rc.ema_alpha,
                                     w_init=rc.w_init, **({} if is_const else rc.controller_params))
    options = {k: instantiate(v) for k, v in rc.client_options.items()}
    from fedlam.protocol import ArraySource

    if site.source == "file":
        assert site.path is not None  # parse_node_config: a file site has a path
        ex, labels = cfgmod.load_examples_file(site.path)
        N = ex.shape[1]
        spec = federation.ClientSpec(r=site.r, M=site.M, kind=site.kind,
                                     source=ArraySource(ex, site.M, labels=labels))
        source = spec.make_source(np.ones((1, N), dtype=np.int8), rc.rounds)
    else:
        archetypes = cfgmod.site_archetypes(site)
        K, N = archetypes.shape
        mixture = cfgmod.parse_mixture(site.mixture, rc.rounds, K, client_index, L)
        spec = federation.ClientSpec(r=site.r, M=site.M, mixture=mixture, kind=site.kind)
        source = spec.make_source(archetypes, rc.rounds)
    r_known = site.r if rc.known_r and site.kind != "noise" else None
    if site.behaviour is not None and options.get("behaviour") is not None:
        raise ValueError("a behaviour is given both in this site's node config and in client-options; "
                         "give it in one place")
    if site.behaviour is not None:
        options["behaviour"] = site.behaviour
    client = federation.Client(source, controller, rng, kind=site.kind, r=r_known, N=N, **options)
    return SiteState(client, client_index, N)


def _site_N(site: cfgmod.SiteConfig) -> int:
    if site.source == "file":
        assert site.path is not None  # parse_node_config: a file site has a path
        ex, _ = cfgmod.load_examples_file(site.path)
        return int(ex.shape[1])
    assert site.N is not None  # parse_node_config: a synthetic site has N (784 for the silhouettes)
    return 784 if site.archetypes == "silhouettes" else int(site.N)


def _load(state: Any) -> SiteState | None:
    if _STATE_KEY not in state:
        return None
    return pickle.loads(state[_STATE_KEY]["pickle"])


def _store(state: Any, st: SiteState) -> None:
    import flwr.app as fa

    state[_STATE_KEY] = fa.ConfigRecord({"pickle": pickle.dumps(st, protocol=pickle.HIGHEST_PROTOCOL)})


def _diagnostics(client: Any, controlled: bool) -> dict:
    last = getattr(client.controller, "last", None) if controlled else None
    if last is None:
        return {"w-raw": None, "r-used": None, "novelty": None}
    return {"w-raw": _f(last.w_raw), "r-used": _f(last.r_used),
            "novelty": _f(last.details.get("novelty", math.nan))}


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def handle(content: Any, node_config: Mapping[str, Any], run_config: Mapping[str, Any], state: Any,
           assigned_index: int | None = None) -> Any:
    """Answer one message of the ServerApp (the ClientApp's whole logic; Flower-free apart
    from the records, so the fake Grid of the tests calls it directly).

    Parameters
    ----------
    content : flwr.app.RecordDict
        The message content.
    node_config, run_config : mapping
        ``context.node_config`` and ``context.run_config``.
    state : flwr.app.RecordDict
        ``context.state`` (persists between the messages of a run on this SuperNode).
    assigned_index : int, optional
        Not used by the apps (reserved for a server-assigned index).
    """
    site = cfgmod.parse_node_config(node_config)
    rc = cfgmod.parse_run_config(run_config)
    op = str(content["fedlam"]["op"])
    if op == "hello":
        N = _site_N(site)
        return messages.hello_reply(site.client_index, N, site.M, site.source)
    if op != "round":
        raise ValueError(f"unknown fedlam operation {op!r}")
    req = messages.read_round_request(content)
    st = _load(state)
    if st is None:
        idx = site.client_index if site.client_index is not None else int(content["fedlam"].get("index", -1))
        if idx < 0:
            raise ValueError("this site has no client-index (set it in --node-config)")
        st = build_client(site, rc, req["L"], idx)
        if st.N != req["N"]:
            raise ValueError(f"this site's examples have N = {st.N}, the federation uses N = {req['N']}")
    client = st.client
    client.observe(req["t"])
    from fedlam import operators

    controlled = req["patterns"] is not None or rc.control_round0
    if req["patterns"] is not None:
        broadcast = operators.pattern_operator(req["patterns"])
    elif rc.control_round0:
        broadcast = np.zeros((st.N, st.N))
    else:
        broadcast = None
    up = client.upload(broadcast)
    scalars = {"batch-size": up.batch_size, "weight": float(up.weight), "noise-var": up.noise_var,
               "dp-sigma": float(up.dp_sigma), **_diagnostics(client, controlled)}
    arrays = wire.encode_operator(np.asarray(up.operator, dtype=np.float64), req["precision"], req["rank"])
    _store(state, st)
    return messages.round_reply(arrays, scalars)
