"""The book's experiments, one module per notebook of ``book/experiments``.

Each module has a frozen parameters dataclass (validated on construction: bad values raise
``ValueError``/``TypeError`` naming the field before any work), ``PRESETS = {"book": ..., "paper":
..., "full": ...}`` (the book's small sizes; the paper's experiments at the paper's sizes and seeds;
the paper's sizes for everything, our additions included), ``make_params(preset, **overrides)``,
a pure ``run(params, rng)`` returning a result dataclass of arrays with ``to_dict()``, and nothing
plotting-related (figures are drawn in the notebooks with :mod:`fedlam.plotting`).

- :mod:`fedlam.experiments.bbp` — BBP validation panel ({ref}`sec-exp-bbp`)
- :mod:`fedlam.experiments.adversarial` — noise, poisoning and sign-flipped clients
  ({ref}`sec-exp-adversarial`)
- :mod:`fedlam.experiments.drift` — exposure drift and the plasticity weight ({ref}`sec-exp-drift`)
- :mod:`fedlam.experiments.novelty` — archetypes emerging mid-training ({ref}`sec-exp-novelty`)
- :mod:`fedlam.experiments.structured` — Caltech-101 silhouettes ({ref}`sec-exp-structured`)
- :mod:`fedlam.experiments.baselines` — spectral-only, local-only and central-oracle baselines
  ({ref}`sec-exp-baselines`)
- :mod:`fedlam.experiments.privacy` — the privacy-utility frontier of DP uploads ({ref}`sec-exp-privacy`)
- :mod:`fedlam.experiments.cross_device` — many clients with a handful of examples each
  ({ref}`sec-exp-cross-device`)

``python -m fedlam.reproduce`` runs the notebooks at any preset (see :mod:`fedlam.reproduce`).
Submodules are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

EXPERIMENTS: tuple[str, ...] = ("bbp", "adversarial", "drift", "novelty", "structured", "baselines",
                                 "privacy", "cross_device")

__all__ = list(EXPERIMENTS) + ["EXPERIMENTS"]


def __getattr__(name: str) -> Any:
    if name in EXPERIMENTS:
        return importlib.import_module(f"fedlam.experiments.{name}")
    raise AttributeError(f"module 'fedlam.experiments' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
