r"""The content of the messages between the fedlam ServerApp and ClientApps (Flower records).

Every message is a Flower ``QUERY`` whose ``RecordDict`` holds a ``ConfigRecord`` named
``"fedlam"`` (the operation and its scalars) and, where there are arrays, an ``ArrayRecord``:

* ``hello``: the server sends ``op``; the site answers ``client-index`` (-1: none), ``N``,
  ``M`` and ``source``.
* ``round``: the server sends ``op``, ``t``, ``L``, ``N``, ``precision``, ``rank`` and
  ``has-broadcast``, and, when ``has-broadcast``, an ``ArrayRecord`` ``"broadcast"`` with
  ``patterns`` (K̂, N) int8. The site answers an ``ArrayRecord`` ``"upload"`` (the encoded
  operator, :mod:`fedlam.flower.wire`) and a ``MetricRecord`` ``"scalars"``: the per-client
  scalars of the upload (``batch-size``, ``weight``, ``noise-var``, ``dp-sigma``) and the
  controller's diagnostics (``w-raw``, ``r-used``, ``novelty``).

Nothing else leaves a site: no examples, labels, archetypes or random state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import wire

__all__ = ["hello_request", "hello_reply", "round_request", "round_reply", "read_round_request",
           "read_round_reply", "payload_bytes", "UPLOAD_SCALARS"]

#: per-client scalars that travel with an upload (NaN = undefined; a missing key = None)
UPLOAD_SCALARS = ("batch-size", "weight", "noise-var", "dp-sigma", "w-raw", "r-used", "novelty")


def _flwr() -> Any:
    import flwr.app as fa

    return fa


def hello_request() -> Any:
    """The server's first message to a new SuperNode."""
    fa = _flwr()
    return fa.RecordDict({"fedlam": fa.ConfigRecord({"op": "hello"})})


def hello_reply(client_index: int | None, N: int, M: int, source: str) -> Any:
    """A site's answer to ``hello``: its client index (-1: none), N, M and kind of source."""
    fa = _flwr()
    return fa.RecordDict({"fedlam": fa.ConfigRecord({
        "op": "hello", "client-index": -1 if client_index is None else int(client_index),
        "N": int(N), "M": int(M), "source": str(source)})})


def round_request(t: int, L: int, N: int, precision: str, rank: int | None,
                  patterns: np.ndarray | None) -> Any:
    """The round-``t`` message: the broadcast patterns (None before the first broadcast)."""
    fa = _flwr()
    content = {"fedlam": fa.ConfigRecord({
        "op": "round", "t": int(t), "L": int(L), "N": int(N), "precision": precision,
        "rank": 0 if rank is None else int(rank), "has-broadcast": patterns is not None})}
    if patterns is not None:
        content["broadcast"] = fa.ArrayRecord({"patterns": fa.Array(wire.encode_patterns(patterns))})
    return fa.RecordDict(content)


def read_round_request(content: Any) -> dict:
    """Parse (and check) a round message on the site."""
    cfg = content["fedlam"]
    N = int(cfg["N"])
    out = {"t": int(cfg["t"]), "L": int(cfg["L"]), "N": N, "precision": str(cfg["precision"]),
           "rank": int(cfg["rank"]) or None, "patterns": None}
    if bool(cfg["has-broadcast"]):
        out["patterns"] = wire.decode_patterns(content["broadcast"]["patterns"].numpy(), N)
    return out


def round_reply(arrays: Mapping[str, np.ndarray], scalars: Mapping[str, float | int | None]) -> Any:
    """A site's upload: encoded operator arrays and its per-client scalars."""
    fa = _flwr()
    metrics = {}
    for k, v in scalars.items():
        if k not in UPLOAD_SCALARS:
            raise ValueError(f"unknown upload scalar {k!r}; known: {UPLOAD_SCALARS}")
        if v is None:
            continue  # None (e.g. unknown noise variance) = key absent
        metrics[k] = int(v) if k == "batch-size" else float(v)
    return fa.RecordDict({
        "upload": fa.ArrayRecord({k: fa.Array(np.ascontiguousarray(a)) for k, a in arrays.items()}),
        "scalars": fa.MetricRecord(metrics),
    })


def read_round_reply(content: Any, N: int) -> tuple[np.ndarray, dict]:
    """Decode a site's upload on the server: (operator float64 (N, N), scalars dict).

    Raises ``ValueError`` on a malformed reply (the server then treats the site as not
    having answered)."""
    arrs = {k: v.numpy() for k, v in content["upload"].items()}
    op = wire.decode_operator(arrs, N)
    raw = dict(content["scalars"])
    scal: dict[str, Any] = {k: raw.get(k) for k in UPLOAD_SCALARS}
    if scal["batch-size"] is None or int(scal["batch-size"]) < 0:
        raise ValueError(f"upload scalar batch-size must be a non-negative int, got {scal['batch-size']!r}")
    scal["batch-size"] = int(scal["batch-size"])
    for k in UPLOAD_SCALARS[1:]:
        v = scal[k]
        if v is not None:
            v = float(v)
            if k in ("noise-var", "dp-sigma") and (not math.isfinite(v) or v < 0):
                raise ValueError(f"upload scalar {k} must be finite and >= 0, got {v!r}")
            scal[k] = v
    if scal["weight"] is None:
        scal["weight"] = float("nan")
    if scal["dp-sigma"] is None:
        scal["dp-sigma"] = 0.0
    return op, scal


def payload_bytes(content: Any) -> int:
    """Bytes of the arrays of a record dict (serialized .npy data, as Flower sends them)."""
    n = 0
    for name in content.keys():
        rec = content[name]
        if rec.__class__.__name__ == "ArrayRecord":
            n += sum(len(a.data) for a in rec.values())
    return n
