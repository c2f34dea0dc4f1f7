"""Draw the landing page's pipeline figure: one federation round, client side and server side.

    python scripts/pipeline_figure.py        # writes book/_static/pipeline.png

examples -> client operator -> server mean -> dreaming -> K-hat -> LAM -> broadcast, and back to
the clients' blend. A static PNG (150 dpi, white background, fonts >= 10 pt at a width that fits
the book's column), committed; the output is byte-stable (no date or software metadata).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "book" / "_static" / "pipeline.png"

CLIENT = "#DCEAF7"  # light blue: stays on the client
SERVER = "#FBE3CF"  # light orange: runs on the server
EDGE = "#333333"
W, H = 2.05, 0.95  # box size in data units


def _box(ax, x: float, y: float, title: str, sub: str, color: str) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (x - W / 2, y - H / 2), W, H, boxstyle="round,pad=0.02,rounding_size=0.12",
            facecolor=color, edgecolor=EDGE, linewidth=1.2,
        )
    )
    ax.text(x, y + 0.16, title, ha="center", va="center", fontsize=11.5, fontweight="bold")
    ax.text(x, y - 0.2, sub, ha="center", va="center", fontsize=10.5)


def _arrow(ax, a: tuple[float, float], b: tuple[float, float], label: str = "", **kw) -> None:
    ax.add_patch(
        FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=16, linewidth=1.4, color=EDGE, **kw)
    )
    if label:
        mx, my = (a[0] + b[0]) / 2, (a[1] + b[1]) / 2
        ax.text(mx, my + 0.13, label, ha="center", va="bottom", fontsize=10, style="italic")


def draw() -> plt.Figure:
    fig, ax = plt.subplots(figsize=(8.6, 3.1), dpi=150)
    fig.patch.set_facecolor("white")
    xs = [1.2, 3.95, 6.7, 9.45]
    top, bottom = 2.35, 0.6
    _box(ax, xs[0], top, "examples", r"$\eta$, private", CLIENT)
    _box(ax, xs[1], top, "client operator", r"$J_c$ (Hebbian)", CLIENT)
    _box(ax, xs[2], top, "server mean", r"$J_s$ = mean of the $J_c$", SERVER)
    _box(ax, xs[3], top, "dreaming", r"sharpen $J_s$", SERVER)
    _box(ax, xs[3], bottom, r"$\hat K$", "count the spikes", SERVER)
    _box(ax, xs[2], bottom, "LAM", r"archetypes $\hat\xi$", SERVER)
    _box(ax, xs[1], bottom, "broadcast", r"operator $\hat J_s$", SERVER)
    r = W / 2 + 0.04
    _arrow(ax, (xs[0] + r, top), (xs[1] - r, top))
    _arrow(ax, (xs[1] + r, top), (xs[2] - r, top), "upload")
    _arrow(ax, (xs[2] + r, top), (xs[3] - r, top))
    _arrow(ax, (xs[3], top - H / 2 - 0.03), (xs[3], bottom + H / 2 + 0.03))
    _arrow(ax, (xs[3] - r, bottom), (xs[2] + r, bottom))
    _arrow(ax, (xs[2] - r, bottom), (xs[1] + r, bottom))
    # back to the clients: the blend with weight w_c(t) for the next round
    _arrow(ax, (xs[1], bottom + H / 2 + 0.03), (xs[1], top - H / 2 - 0.03))
    ax.text(xs[1] - 0.12, (top + bottom) / 2, "download; next round\nblends it with weight $w_c(t)$",
            ha="right", va="center", fontsize=10, style="italic")
    ax.text(xs[0] - W / 2, top + H / 2 + 0.2, "client side (each of $L$ clients)", fontsize=10.5,
            color="#1F4E79", fontweight="bold")
    ax.text(xs[2] - W / 2, top + H / 2 + 0.2, "server side", fontsize=10.5, color="#8A4B0F",
            fontweight="bold")
    ax.set_xlim(0, 10.6)
    ax.set_ylim(0, 3.2)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.subplots_adjust(left=0.01, right=0.99, top=0.99, bottom=0.01)
    return fig


def main() -> None:
    fig = draw()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=150, facecolor="white", metadata={"Software": None})
    plt.close(fig)
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
