r"""The two configurations of a fedlam Flower federation, parsed and checked.

*Run config* (one per run, ``[tool.flwr.app.config]`` of the app / ``flwr run --run-config``):
what the server does and what every client does. Flat TOML scalars; options with structure
(``lam-params``, ``server-options``, ``client-options``, ``controller-params``) are JSON
strings passed through unchanged as keyword arguments, so a new option of
:class:`fedlam.federation.Server` or :class:`fedlam.federation.Client` needs no change here.

*Node config* (one per SuperNode, ``flower-supernode --node-config``): where the site's data
come from. Either a synthetic source (one line) ::

    source="synthetic" client-index=0 archetype-seed=7 K=3 N=784 r=0.8 M=200 \
        mixture="uniform"

or the site's own file of +-1 examples ::

    source="file" path="/data/site-3.npz" M=200 client-index=3

File format (validated by :func:`load_examples_file`): ``.npy`` holding one 2-D array
``(M_total, N)``, or ``.npz`` holding ``examples`` ``(M_total, N)`` and optionally ``labels``
``(M_total,)`` non-negative ints (used for nothing that leaves the site). Entries must be exactly
-1 or +1 in an integer dtype (int8 is the natural choice, 1 byte per pixel; booleans and floats
are refused rather than cast, as :class:`fedlam.protocol.ArraySource` does); no pickled objects.
Derived in {ref}`sec-deploy-real`.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import _describe, check_choice, check_in_range, check_nonneg_int, check_positive_int

__all__ = [
    "RUN_DEFAULTS",
    "RunConfig",
    "SiteConfig",
    "parse_run_config",
    "parse_node_config",
    "parse_mixture",
    "load_examples_file",
    "node_config_for_site",
    "site_archetypes",
    "reference_archetypes",
    "expected_bytes_per_round",
    "MAX_FILE_BYTES",
]

#: every run-config key with its default (Flower requires each key to be declared)
RUN_DEFAULTS: dict[str, Any] = {
    "rounds": 10,
    "seed": 0,
    "num-clients": 0,          # L used for the client streams; 0 = the clients that say hello
    "N": 0,                    # 0 = taken from the clients' hello
    "precision": "float32",
    "rank": 0,                 # 0 = full upload; k > 0 = top-k eigenpairs
    "controller": "paper",     # "paper" | "novelty" | a constant weight, e.g. "0.5"
    "ema-alpha": 0.5,
    "w-init": 1.0,
    "known-r": False,
    "control-round0": False,
    "controller-params": "{}",
    "aggregation": "equal",
    "lam-params": "{}",
    "server-options": "{}",    # extra keyword arguments of Server (defense, privacy, ...)
    "client-options": "{}",    # extra keyword arguments of Client (behaviour, privacy, ...)
    "fraction": 1.0,
    "min-clients": 1,
    "dropout": 0.0,            # simulated drop-outs (as run_federation's participation model)
    "round-timeout": 0.0,      # seconds to wait for answers (0 = wait for every asked node)
    "skip-empty-rounds": False,  # a round with no upload at all: skipped (true) or the run fails (false)
    "wait-timeout": 120.0,     # seconds to wait for min-clients nodes to connect
    "archetypes": "",          # metrics reference: "" (none), "random", "silhouettes"
    "archetype-seed": 0,       # archetypes="random": random_archetypes(K, N, archetype-seed)
    "K": 0,
    "archetypes-file": "",     # .npy of known archetypes for the metrics (e.g. silhouettes)
    "n-top": 10,
    "out-dir": "",             # where the ServerApp writes history.json ("" = nowhere)
}

MAX_FILE_BYTES = 2 * 1024**3  #: largest examples file a site may load (2 GiB)
MAX_N = 20_000  #: largest pattern dimension accepted from a configuration (an N x N float64 is 3.2 GB)


def _json_dict(text: Any, name: str) -> dict:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a JSON object string, got {_describe(text)}")
    try:
        v = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} must be a JSON object, got {text!r} ({exc.msg})") from None
    if not isinstance(v, dict):
        raise ValueError(f"{name} must be a JSON object, got {text!r}")
    return v


def _controller(v: Any) -> str | float:
    if isinstance(v, str):
        if v in ("paper", "novelty"):
            return v
        try:
            f = float(v)
        except ValueError:
            raise ValueError(f"controller must be 'paper', 'novelty' or a weight in [0, 1], got {v!r}") from None
        return check_in_range(f, "controller", 0.0, 1.0)
    return check_in_range(v, "controller", 0.0, 1.0)


@dataclass(frozen=True)
class RunConfig:
    """The checked run configuration (attribute names are the keys with ``-`` -> ``_``)."""

    rounds: int
    seed: int
    num_clients: int
    N: int
    precision: str
    rank: int | None
    controller: str | float
    ema_alpha: float
    w_init: float
    known_r: bool
    control_round0: bool
    controller_params: dict
    aggregation: str
    lam_params: dict
    server_options: dict
    client_options: dict
    fraction: float
    min_clients: int
    dropout: float
    round_timeout: float | None
    skip_empty_rounds: bool
    wait_timeout: float
    archetypes: str
    archetype_seed: int
    K: int
    archetypes_file: str
    n_top: int
    out_dir: str

    def participation(self) -> Any:
        """The :class:`fedlam.participation.Participation` of this run."""
        from fedlam.participation import Participation

        return Participation(fraction=self.fraction, min_clients=self.min_clients, dropout=self.dropout,
                             timeout=self.round_timeout)

    def to_dict(self) -> dict:
        """JSON-ready dictionary (recorded in history.json)."""
        import dataclasses

        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def parse_run_config(cfg: Mapping[str, Any]) -> RunConfig:
    """Check a run config (Flower's ``context.run_config``); unknown keys are refused."""
    if not isinstance(cfg, Mapping):
        raise TypeError(f"run config must be a mapping, got {_describe(cfg)}")
    unknown = sorted(set(cfg) - set(RUN_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown run-config key(s) {unknown}; valid keys: {sorted(RUN_DEFAULTS)}")
    c = {**RUN_DEFAULTS, **dict(cfg)}

    def b(key: str) -> bool:
        v = c[key]
        if not isinstance(v, bool):
            raise TypeError(f"run config {key} must be true or false, got {_describe(v)}")
        return v

    def s(key: str) -> str:
        v = c[key]
        if not isinstance(v, str):
            raise TypeError(f"run config {key} must be a string, got {_describe(v)}")
        return v

    rank = check_nonneg_int(c["rank"], "rank")
    N = check_nonneg_int(c["N"], "N")
    if N > MAX_N or N == 1:
        raise ValueError(f"N must be 0 (from the clients) or in [2, {MAX_N}], got {N}")
    rt = check_in_range(c["round-timeout"], "round-timeout", 0.0, None)
    out = RunConfig(
        rounds=check_positive_int(c["rounds"], "rounds"),
        seed=check_nonneg_int(c["seed"], "seed"),
        num_clients=check_nonneg_int(c["num-clients"], "num-clients"),
        N=N,
        precision=check_choice(s("precision"), "precision", ("float64", "float32", "float16")),
        rank=rank or None,
        controller=_controller(c["controller"]),
        ema_alpha=check_in_range(c["ema-alpha"], "ema-alpha", 0.0, 1.0),
        w_init=check_in_range(c["w-init"], "w-init", 0.0, 1.0),
        known_r=b("known-r"),
        control_round0=b("control-round0"),
        controller_params=_json_dict(c["controller-params"], "controller-params"),
        aggregation=check_choice(s("aggregation"), "aggregation", ("equal", "batch")),
        lam_params=_json_dict(c["lam-params"], "lam-params"),
        server_options=_json_dict(c["server-options"], "server-options"),
        client_options=_json_dict(c["client-options"], "client-options"),
        fraction=check_in_range(c["fraction"], "fraction", 0.0, 1.0, low_open=True),
        min_clients=check_positive_int(c["min-clients"], "min-clients"),
        dropout=check_in_range(c["dropout"], "dropout", 0.0, 1.0, high_open=True),
        round_timeout=rt if rt > 0 else None,
        skip_empty_rounds=b("skip-empty-rounds"),
        wait_timeout=check_in_range(c["wait-timeout"], "wait-timeout", 0.0, None, low_open=True),
        archetypes=check_choice(s("archetypes"), "archetypes", ("", "random", "silhouettes")),
        archetype_seed=check_nonneg_int(c["archetype-seed"], "archetype-seed"),
        K=check_nonneg_int(c["K"], "K"),
        archetypes_file=s("archetypes-file"),
        n_top=check_positive_int(c["n-top"], "n-top"),
        out_dir=s("out-dir"),
    )
    if out.archetypes == "random" and (out.K < 1 or out.N < 2):
        raise ValueError("archetypes='random' needs K >= 1 and N >= 2 in the run config")
    if out.archetypes and out.archetypes_file:
        raise ValueError("give either archetypes or archetypes-file, not both")
    if out.rounds > 100_000:
        raise ValueError(f"rounds must be <= 100000, got {out.rounds}")
    return out


# --- node config ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SiteConfig:
    """One SuperNode's data source and identity (checked ``--node-config``).

    Attributes
    ----------
    source : {"synthetic", "file"}
    client_index : int or None
        Position of the site in the federation (orders the aggregation and picks the site's
        random stream ``default_rng(seed).spawn(L + 1)[client_index]``, as in
        :func:`fedlam.federation.run_federation`). None: assigned by the server.
    seed : int or None
        The site's own seed (default: the run's seed).
    M : int
        Examples per round.
    r : float or None
        Channel quality (synthetic: required; file: optional "known r" of the controller).
    kind : str
        Client behaviour (``"honest"``, ``"noise"``, ...), as ``ClientSpec.kind``.
    archetypes : {"random", "silhouettes"}
        Synthetic source: ``random_archetypes(K, N, archetype_seed)`` or the paper's three
        Caltech-101 silhouette prototypes (K = 3, N = 784).
    archetype_seed, K, N : int or None
        Synthetic random source parameters.
    mixture : str
        Synthetic source: class mixture per round (:func:`parse_mixture`).
    path : str or None
        File source: the examples file.
    behaviour : fedlam.attacks.Behaviour or None
        What the site sends instead of its honest upload (node-config keys ``behaviour``, a name
        of :data:`fedlam.attacks.BEHAVIOURS`, and ``behaviour-params``, a JSON object of its
        parameters), as ``ClientSpec(behaviour=...)`` in process; None: honest.
    """

    source: str
    client_index: int | None
    seed: int | None
    M: int
    r: float | None
    kind: str
    archetypes: str = "random"
    archetype_seed: int | None = None
    K: int | None = None
    N: int | None = None
    mixture: str = "uniform"
    path: str | None = None
    behaviour: Any = None


_NODE_KEYS = {
    "synthetic": {"source", "client-index", "seed", "M", "r", "kind", "archetypes", "archetype-seed", "K",
                  "N", "mixture", "behaviour", "behaviour-params"},
    "file": {"source", "client-index", "seed", "M", "r", "kind", "path", "behaviour", "behaviour-params"},
}


def _behaviour(cfg: Mapping[str, Any]) -> Any:
    """The site's :class:`fedlam.attacks.Behaviour` from ``behaviour`` / ``behaviour-params`` (None: honest)."""
    from fedlam import attacks

    name = cfg.get("behaviour", "honest")
    if not isinstance(name, str):
        raise TypeError(f"node config behaviour must be a string, got {_describe(name)}")
    if name not in attacks.BEHAVIOURS:
        raise ValueError(f"node config behaviour must be one of {tuple(attacks.BEHAVIOURS)}, got {name!r}")
    params = _json_dict(cfg.get("behaviour-params", "{}"), "node config behaviour-params")
    try:
        b = attacks.make_behaviour(name, **params)
    except TypeError as exc:
        raise TypeError(f"node config behaviour-params {params!r} for behaviour {name!r}: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"node config behaviour-params {params!r} for behaviour {name!r}: {exc}") from None
    return None if name == "honest" else b


def parse_node_config(cfg: Mapping[str, Any]) -> SiteConfig:
    """Check a SuperNode's ``--node-config`` (Flower's ``context.node_config``).

    Raises ``ValueError``/``TypeError`` naming the key, the expected and the received value;
    unknown keys are refused (a typo would otherwise silently fall back to a default).
    """
    if not isinstance(cfg, Mapping):
        raise TypeError(f"node config must be a mapping, got {_describe(cfg)}")
    source = cfg.get("source", "synthetic")
    check_choice(source, "node config source", ("synthetic", "file"))
    unknown = sorted(set(cfg) - _NODE_KEYS[source])
    if unknown:
        raise ValueError(f"unknown node-config key(s) {unknown} for source={source!r}; valid: "
                         f"{sorted(_NODE_KEYS[source])}")
    ci = cfg.get("client-index")
    ci = None if ci is None else check_nonneg_int(ci, "node config client-index")
    seed = cfg.get("seed")
    seed = None if seed is None else check_nonneg_int(seed, "node config seed")
    if "M" not in cfg:
        raise ValueError("node config needs M (examples per round)")
    M = check_nonneg_int(cfg["M"], "node config M")
    if M > 10_000_000:
        raise ValueError(f"node config M must be <= 10000000, got {M}")
    kind = cfg.get("kind", "honest")
    if not isinstance(kind, str):
        raise TypeError(f"node config kind must be a string, got {_describe(kind)}")
    r = cfg.get("r")
    if r is not None:
        r = check_in_range(r, "node config r", 0.0, 1.0, low_open=True)
    behaviour = _behaviour(cfg)
    if source == "file":
        path = cfg.get("path")
        if not isinstance(path, str) or not path:
            raise ValueError(f"node config source='file' needs path=\"/path/to/examples.npz\", got {path!r}")
        return SiteConfig(source, ci, seed, M, r, kind, path=path, behaviour=behaviour)
    arch = cfg.get("archetypes", "random")
    check_choice(arch, "node config archetypes", ("random", "silhouettes"))
    if arch == "silhouettes":
        N, K, aseed = 784, 3, None
        for key, want in (("N", 784), ("K", 3)):
            if key in cfg and cfg[key] != want:
                raise ValueError(f"node config archetypes='silhouettes' has {key} = {want}, got {cfg[key]!r}")
    else:
        for key in ("archetype-seed", "K", "N"):
            if key not in cfg:
                raise ValueError(f"node config source='synthetic' needs {key}")
        N = check_positive_int(cfg["N"], "node config N", minimum=2)
        if N > MAX_N:
            raise ValueError(f"node config N must be <= {MAX_N}, got {N}")
        K = check_positive_int(cfg["K"], "node config K")
        aseed = check_nonneg_int(cfg["archetype-seed"], "node config archetype-seed")
    if r is None and kind in ("honest", "flip"):
        raise ValueError(f"node config needs r for a {kind!r} synthetic site")
    mixture = cfg.get("mixture", "uniform")
    if not isinstance(mixture, str):
        raise TypeError(f"node config mixture must be a string, got {_describe(mixture)}")
    return SiteConfig(source, ci, seed, M, r, kind, archetypes=arch, archetype_seed=aseed, K=K, N=N,
                      mixture=mixture, behaviour=behaviour)


def site_archetypes(site: SiteConfig) -> np.ndarray:
    """The (K, N) archetypes a synthetic site draws its examples from."""
    from fedlam import data

    if site.archetypes == "silhouettes":
        return data.structured_archetypes()
    # parse_node_config sets K, N and archetype_seed for a random-archetype site
    assert site.K is not None and site.N is not None and site.archetype_seed is not None
    return data.random_archetypes(site.K, site.N, site.archetype_seed)


def reference_archetypes(rc: RunConfig) -> np.ndarray | None:
    """The archetypes the server measures against (None when unknown: a real federation)."""
    from fedlam import data

    if rc.archetypes == "random":
        return data.random_archetypes(rc.K, rc.N, rc.archetype_seed)
    if rc.archetypes == "silhouettes":
        return data.structured_archetypes()
    if rc.archetypes_file:
        arr = np.load(rc.archetypes_file, allow_pickle=False)
        from .._validation import check_pm1

        return check_pm1(arr, "archetypes-file", ndim=2).astype(np.int8)
    return None


def parse_mixture(spec: str, T: int, K: int, client_index: int, L: int) -> np.ndarray:
    """The (T, K) class mixture of a synthetic site from its ``mixture`` string.

    ``"uniform"``: 1/K each round; ``"class"``: only class ``client_index mod K`` (one class per
    site); ``"class:k"``: only class k; ``"drift"``: the site's column of
    :func:`fedlam.data.sequential_drift` (T, L, K); or a JSON list of K probabilities (constant)
    or of T lists of K.
    """
    from fedlam import data

    T = check_positive_int(T, "T")
    K = check_positive_int(K, "K")
    if spec == "uniform":
        return np.full((T, K), 1.0 / K)
    if spec == "drift":
        return data.sequential_drift(T, L, K)[:, client_index]
    if spec == "class" or spec.startswith("class:"):
        k = client_index % K if spec == "class" else _int_after(spec, "class:")
        if not 0 <= k < K:
            raise ValueError(f"mixture {spec!r}: class must be in [0, {K}), got {k}")
        out = np.zeros((T, K))
        out[:, k] = 1.0
        return out
    try:
        arr = np.asarray(json.loads(spec), dtype=np.float64)
    except (json.JSONDecodeError, ValueError, TypeError):
        raise ValueError(f"mixture must be 'uniform', 'class', 'class:k', 'drift' or a JSON list, "
                         f"got {spec!r}") from None
    given = arr.shape
    if arr.shape == (K,):
        arr = np.tile(arr, (T, 1))
    if arr.shape != (T, K):
        raise ValueError(f"mixture list must be K = {K} probabilities or (T, K) = ({T}, {K}) rows of them, "
                         f"got shape {given}")
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        t, k = (int(v) for v in np.argwhere(bad)[0])
        where = f"entry {k}" if given == (K,) else f"row {t}, entry {k}"
        raise ValueError(f"mixture probabilities must be finite and >= 0, got {float(arr[t, k])!r} at {where} "
                         f"of {spec}")
    sums = arr.sum(axis=1)
    off = np.flatnonzero(np.abs(sums - 1.0) > 1e-9)
    if off.size:
        t = int(off[0])
        where = "" if given == (K,) else f" (row {t})"
        raise ValueError(f"mixture probabilities must sum to 1, got sum {float(sums[t]):.12g}{where} in {spec}")
    return arr


def _int_after(spec: str, prefix: str) -> int:
    try:
        return int(spec[len(prefix):])
    except ValueError:
        raise ValueError(f"mixture {spec!r}: expected an integer after {prefix!r}") from None


def load_examples_file(path: str | os.PathLike, N: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Load and validate a site's examples file (format in the module notes).

    Returns
    -------
    (examples, labels) : (numpy.ndarray int8 (M_total, N), numpy.ndarray int64 (M_total,) or None)

    Raises
    ------
    ValueError
        Missing or unreadable file, wrong suffix, pickled objects, wrong shape, entries other
        than +-1, N different from the federation's, mismatched labels, file too large.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"examples file {str(p)!r} does not exist (node config path)")
    if p.suffix not in (".npy", ".npz"):
        raise ValueError(f"examples file {str(p)!r} must end in .npy or .npz")
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"examples file {str(p)!r} is {size:,} bytes; the limit is {MAX_FILE_BYTES:,}")
    labels = None
    if p.suffix == ".npz" and not zipfile.is_zipfile(p):
        raise ValueError(f"examples file {str(p)!r} is not a valid .npz file (not a zip archive)")
    try:
        if p.suffix == ".npy":
            ex = np.load(p, allow_pickle=False)
        else:
            with np.load(p, allow_pickle=False) as z:
                if "examples" not in z.files:
                    raise ValueError(f"examples file {str(p)!r} (.npz) must hold an array named "
                                     f"'examples', found {sorted(z.files)}")
                ex = z["examples"]
                labels = z["labels"] if "labels" in z.files else None
    except ValueError as exc:
        if "examples file" in str(exc):
            raise
        raise ValueError(f"examples file {str(p)!r} cannot be read as numpy data without pickle: {exc}") from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"examples file {str(p)!r} is not a valid .npy/.npz file: {exc}") from None
    if ex.ndim != 2 or ex.shape[0] < 1 or ex.shape[1] < 2:
        raise ValueError(f"examples in {str(p)!r} must be a 2-D (M_total >= 1, N >= 2) array, got shape {ex.shape}")
    if not np.issubdtype(ex.dtype, np.integer) or ex.dtype == bool:
        raise ValueError(f"examples in {str(p)!r} must be an integer array of -1/+1 (int8 recommended), "
                         f"got dtype {ex.dtype}")
    bad = (ex != 1) & (ex != -1)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"examples in {str(p)!r} must be exactly -1 or +1; {int(bad.sum())} entries are not "
                         f"(first at row {i}, column {j}: {ex[i, j]!r})")
    if N is not None and ex.shape[1] != N:
        raise ValueError(f"examples in {str(p)!r} have N = {ex.shape[1]} columns, the federation uses N = {N}")
    if labels is not None:
        if labels.shape != (ex.shape[0],) or not np.issubdtype(labels.dtype, np.integer) or np.any(labels < 0):
            raise ValueError(f"labels in {str(p)!r} must be ({ex.shape[0]},) non-negative ints, got "
                             f"{_describe(labels)}")
        labels = labels.astype(np.int64)
    return ex.astype(np.int8), labels


def node_config_for_site(*, client_index: int, M: int, r: float | None = None, kind: str = "honest",
                         archetypes: str = "random", archetype_seed: int | None = None, K: int | None = None,
                         N: int | None = None, mixture: str = "uniform", path: str | None = None,
                         seed: int | None = None, behaviour: str = "honest",
                         behaviour_params: Mapping[str, Any] | None = None) -> dict:
    """A ``--node-config`` dict for one site (what the launcher passes to each SuperNode).

    ``behaviour`` and ``behaviour_params`` name a :class:`fedlam.attacks.Behaviour` and its
    parameters (``node_config_for_site(..., behaviour="hidden", behaviour_params={"seed": 3})``
    is the site of ``ClientSpec(..., behaviour=attacks.Hidden(seed=3))``).
    """
    cfg: dict[str, Any] = {"source": "file" if path else "synthetic", "client-index": client_index, "M": M}
    if seed is not None:
        cfg["seed"] = seed
    if r is not None:
        cfg["r"] = float(r)
    if kind != "honest":
        cfg["kind"] = kind
    if behaviour != "honest" or behaviour_params:
        cfg["behaviour"] = behaviour
        if behaviour_params:
            if not isinstance(behaviour_params, Mapping):
                raise TypeError(f"behaviour_params must be a dict, got {_describe(behaviour_params)}")
            cfg["behaviour-params"] = json.dumps(dict(behaviour_params), sort_keys=True)
    if path:
        cfg["path"] = str(path)
    else:
        if archetypes == "silhouettes":
            cfg.update({"archetypes": "silhouettes", "mixture": mixture})
        else:
            cfg.update({"archetype-seed": archetype_seed, "K": K, "N": N, "mixture": mixture})
    parse_node_config(cfg)  # fail here, not in a SuperNode
    return cfg


def expected_bytes_per_round(N: int, L: int, precision: str, rank: int | None, K_hat: int) -> dict:
    """Payload bytes of one round with L reporting clients (uploads) and a K_hat broadcast."""
    from .wire import operator_nbytes, patterns_nbytes

    up = operator_nbytes(N, precision, rank)
    return {"upload_per_client": up, "uploads": L * up, "broadcast_per_client": patterns_nbytes(K_hat, N),
            "dense_float64_per_client": 8 * N * N, "ratio_dense": 8 * N * N / up if up else math.inf}
