"""Figures of a Flower run's history (``DIR/*.png`` of ``python -m fedlam.flower local``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .history import arrays

__all__ = ["history_figure", "save_history_figures"]


def history_figure(hist: Mapping[str, Any]) -> Any:
    """Three panels: K̂ and accepted patterns per round; magnetization per archetype (when the
    archetypes are known); round time and bytes received by the server."""
    import matplotlib.pyplot as plt

    a = arrays(hist)
    T = len(a["k_hat"])
    t = np.arange(T)
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.4), facecolor="white", layout="constrained")
    kh = np.where(a["k_hat"] < 0, np.nan, a["k_hat"])
    ax[0].plot(t, kh, "o-", label=r"$\hat K$")
    ax[0].plot(t, [len(r["answered"]) for r in hist["rounds"]], "s--", label="uploads used")
    ax[0].set(xlabel="round t", ylabel="count", title="K-hat and participation")
    ax[0].legend(frameon=False)
    if a["magnetization"].size:
        for k in range(a["magnetization"].shape[1]):
            ax[1].plot(t, a["magnetization"][:, k], "o-", label=f"archetype {k}")
        ax[1].set(ylim=(-0.05, 1.05), xlabel="round t", ylabel="magnetization", title="recovery")
        ax[1].legend(frameon=False, fontsize=9)
    else:
        ax[1].text(0.5, 0.5, "archetypes unknown\n(real data)", ha="center", va="center",
                   transform=ax[1].transAxes)
        ax[1].set_axis_off()
    ax[2].bar(t, a["seconds"], color="0.6", label="round time")
    ax[2].set(xlabel="round t", ylabel="seconds", title="round time and upload bytes")
    tw = ax[2].twinx()
    tw.plot(t, a["bytes_received"] / 1e6, "o-", color="C3", label="MB received")
    tw.set_ylabel("MB received by the server")
    for x in ax:
        x.set_xticks(t)
    return fig


def save_history_figures(hist: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``history.png`` under ``out_dir``; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig = history_figure(hist)
    p = Path(out_dir) / "history.png"
    fig.savefig(p, dpi=110, facecolor="white")
    plt.close(fig)
    return [p]
