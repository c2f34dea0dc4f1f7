"""fedlam on Flower: the federation as separate processes (a real deployment).

``fedlam.flower`` runs the same :class:`fedlam.federation.Client` and
:class:`fedlam.federation.Server` as the in-process :func:`fedlam.federation.run_federation`,
with Flower's Deployment Engine as the transport: a ``ServerApp``
(:mod:`fedlam.flower.server_app`) on the SuperLink side and a ``ClientApp``
(:mod:`fedlam.flower.client_app`) on every SuperNode, each site keeping its examples. Only
the upload (a symmetric operator, float32 by default, :mod:`fedlam.flower.wire`) and a few
per-client scalars leave a site; the server broadcasts the accepted patterns (K̂ x N int8).

``python -m fedlam.flower local --clients 5 --rounds 10 --out DIR`` starts a SuperLink and the
SuperNodes on 127.0.0.1 and runs a federation (:mod:`fedlam.flower.local`). Chapter 13
({ref}`sec-deploy`) explains the processes, what crosses the wire, and how to run on real
machines.

Flower (``flwr``, the optional extra ``fedlam[flower]``) is imported only by the modules that
need it; ``import fedlam.flower`` and :mod:`fedlam.flower.wire` work without it.
"""

from __future__ import annotations

import importlib
from typing import Any

_SUBMODULES = {"wire", "config", "messages", "site", "coordinator", "server_app", "client_app", "deploy",
               "local", "history", "plots", "testing"}

_FUNCTIONS = {"run_in_process": "testing", "LocalFederation": "deploy"}

__all__ = sorted(_SUBMODULES | set(_FUNCTIONS))


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"fedlam.flower.{name}")
    if name in _FUNCTIONS:
        return getattr(importlib.import_module(f"fedlam.flower.{_FUNCTIONS[name]}"), name)
    raise AttributeError(f"module 'fedlam.flower' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
