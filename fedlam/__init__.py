"""fedlam: federated many-to-one Hopfield memories.

The package behind the executable book. Data flows one way through a federation round::

    examples (client, private) -> Hebbian operator J_c -> [wire] -> server mean J_s
      -> sharpen (dreaming flow) -> spectrum -> K_hat + seeds -> LAM dynamics
      -> candidates -> prune + accept -> archetypes -> broadcast operator -> [wire]
      -> client blend (w_c(t))

and the modules follow that flow: :mod:`fedlam.data`, :mod:`fedlam.operators`,
:mod:`fedlam.rmt` (closed forms), :mod:`fedlam.spectral`, :mod:`fedlam.lam`,
:mod:`fedlam.controller`, :mod:`fedlam.federation`, :mod:`fedlam.metrics`.

The most used functions are re-exported here: :func:`random_archetypes`,
:func:`sample_examples`, :func:`hebbian`, :func:`factorize`, :func:`magnetization`.
Submodules are imported on first use, so ``import fedlam`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = {
    "data",
    "operators",
    "rmt",
    "spectral",
    "lam",
    "controller",
    "federation",
    "metrics",
    "cost",
    "hopfield",
    "plotting",
    "widgets",
    "experiments",
    "reproduce",
    "privacy",
    "participation",
    "flower",
    "baselines",
    "robust",
    "attacks",
}

_FUNCTIONS = {
    "random_archetypes": "data",
    "sample_examples": "data",
    "hebbian": "operators",
    "factorize": "lam",
    "magnetization": "metrics",
}

__all__ = sorted(_SUBMODULES | set(_FUNCTIONS)) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"fedlam.{name}")
    if name in _FUNCTIONS:
        module = importlib.import_module(f"fedlam.{_FUNCTIONS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'fedlam' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
