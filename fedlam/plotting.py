"""Figure style and small plotting helpers for the book.

Nothing in here computes anything the book relies on: every helper draws arrays that a
pure :mod:`fedlam` function produced. The algorithm modules never import matplotlib; this
module (and :mod:`fedlam.widgets`) are the only places that do.

Call :func:`use_book_style` once in the first code cell of every notebook. It sets a white
figure and axes background (so figures stay readable when the HTML is viewed in dark
mode), readable font sizes, a colour-blind-safe colour cycle and PNG-friendly sizes.

Colours have fixed meanings across chapters (see :data:`COLORS`): the Marchenko--Pastur
bulk and its density are grey/black, theory curves are dashed black, the paper's rule is
orange and our derived rule blue, and archetype ``mu`` always gets ``ARCHETYPE_COLORS[mu]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.rcsetup import cycler
from matplotlib.typing import RcKeyType

__all__ = [
    "COLORS",
    "ARCHETYPE_COLORS",
    "BOOK_RC",
    "use_book_style",
    "archetype_color",
    "spectrum_histogram",
    "mp_overlay",
    "eigenvalue_markers",
    "mean_std_band",
    "magnetization_curves",
    "pattern_grid",
    "pattern_image",
    "label_panels",
    "save_figure",
]

#: Okabe--Ito palette: distinguishable with the common colour-vision deficiencies.
_OKABE_ITO = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#D55E00",  # vermillion
    "#F0E442",  # yellow (last: weak on white)
    "#000000",  # black
)

#: Colours with a fixed meaning in every chapter.
COLORS: dict[str, str] = {
    "theory": "#000000",  # closed forms (dashed)
    "bulk": "#9E9E9E",  # histogram of the Marchenko--Pastur bulk
    "edge": "#555555",  # MP edges and thresholds (dotted)
    "signal": "#D55E00",  # outlier eigenvalues / detected spikes
    "paper": "#E69F00",  # the paper's rule or the paper-literal pipeline
    "ours": "#0072B2",  # the rule or pipeline derived in the book
    "baseline": "#009E73",  # baselines (local only, spectral only, ...)
    "oracle": "#CC79A7",  # central oracle that pools all examples
    "noise": "#7F7F7F",  # pure-noise or adversarial clients
}

#: Colour of archetype ``mu`` (cycled for ``mu >= 8``).
ARCHETYPE_COLORS: tuple[str, ...] = _OKABE_ITO[:6] + ("#7F7F7F", "#8C564B")

#: The rcParams set by :func:`use_book_style`.
BOOK_RC: dict[RcKeyType, Any] = {
    # white everywhere: readable in the dark theme of the HTML book
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "savefig.edgecolor": "white",
    "savefig.transparent": False,
    "legend.facecolor": "white",
    "legend.framealpha": 0.9,
    "legend.edgecolor": "#CCCCCC",
    # sizes: a 6.4 in wide figure rendered at 100 dpi is 640 px, the width of the text column
    "figure.figsize": (6.4, 3.6),
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "figure.constrained_layout.use": True,
    # fonts
    "font.family": "DejaVu Sans",
    "font.size": 11.0,
    "axes.titlesize": 12.0,
    "axes.labelsize": 11.0,
    "xtick.labelsize": 10.0,
    "ytick.labelsize": 10.0,
    "legend.fontsize": 9.5,
    "figure.titlesize": 12.5,
    "mathtext.fontset": "dejavusans",
    # lines and axes
    "lines.linewidth": 1.8,
    "lines.markersize": 5.0,
    "axes.prop_cycle": cycler(color=list(_OKABE_ITO)),
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#333333",
    "axes.labelcolor": "#111111",
    "text.color": "#111111",
    "xtick.color": "#333333",
    "ytick.color": "#333333",
    "axes.grid": True,
    "grid.color": "#E0E0E0",
    "grid.linewidth": 0.7,
    "axes.axisbelow": True,
    "image.interpolation": "nearest",
    "image.cmap": "viridis",
    # byte-stable SVG/PDF output (no dates, fixed hash salt)
    "svg.hashsalt": "fedlam",
    "pdf.compression": 6,
}


def use_book_style() -> None:
    """Apply the book's figure style to matplotlib's global ``rcParams``.

    Idempotent; call it once in the first code cell of each notebook (after the imports).
    It sets white figure/axes/savefig backgrounds, font sizes readable at the text-column
    width, the colour-blind-safe Okabe--Ito colour cycle and ``constrained_layout``.

    Examples
    --------
    >>> from fedlam.plotting import use_book_style
    >>> use_book_style()
    >>> import matplotlib as mpl
    >>> mpl.rcParams["axes.facecolor"]
    'white'
    """
    mpl.rcParams.update(BOOK_RC)


def archetype_color(mu: int) -> str:
    """Return the fixed colour of archetype ``mu`` (0-based, cycled after 8)."""
    if isinstance(mu, bool) or not isinstance(mu, (int, np.integer)) or mu < 0:
        raise ValueError(f"mu must be a non-negative integer, got {mu!r}")
    return ARCHETYPE_COLORS[int(mu) % len(ARCHETYPE_COLORS)]


def _as_1d_float(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(
            f"{name} must be a non-empty 1-D numeric array, got {type(x).__name__} "
            f"with shape {arr.shape}"
        )
    return arr.astype(np.float64, copy=False)


def _ax_or_current(ax: Axes | None) -> Axes:
    return plt.gca() if ax is None else ax


def mp_overlay(
    ax: Axes | None,
    q: float,
    sigma2: float = 1.0,
    scale: float = 1.0,
    *,
    edges: bool = True,
    label: str | None = "Marchenko–Pastur",
    n_points: int = 600,
) -> tuple[float, float]:
    """Draw the Marchenko--Pastur density (and its edges) on ``ax``.

    The density is the one of :func:`fedlam.rmt.mp_density` for the eigenvalues of the
    rescaled operator ``N·J`` (variance ``sigma2``, aspect ratio ``q = N/M``), see
    {ref}`sec-mp`. ``scale`` converts to the unit of the plotted axis: the curve is drawn
    at ``x = scale * lambda`` with density divided by ``scale``, so pass ``scale=1/N`` when
    the histogram shows eigenvalues of ``J`` itself. For ``q > 1`` only the continuous
    part is drawn (the atom at zero of mass ``1 - 1/q`` is not).

    Returns
    -------
    (low, high) : tuple of float
        The bulk edges in the plotted unit.
    """
    from fedlam import rmt  # local import: keeps `import fedlam.plotting` light

    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    ax = _ax_or_current(ax)
    low, high = rmt.mp_edges(q, sigma2)
    lam = np.linspace(low, high, n_points)
    dens = np.asarray(rmt.mp_density(lam, q, sigma2), dtype=np.float64)
    ax.plot(lam * scale, dens / scale, color=COLORS["theory"], lw=1.6, label=label)
    if edges:
        for e in (low, high):
            ax.axvline(e * scale, color=COLORS["edge"], ls=":", lw=1.2)
    return float(low * scale), float(high * scale)


def spectrum_histogram(
    values: Any,
    q: float | None = None,
    sigma2: float = 1.0,
    scale: float = 1.0,
    *,
    ax: Axes | None = None,
    bins: int | Sequence[float] = 60,
    outliers: Sequence[float] | None = None,
    label: str = "eigenvalues",
    xlabel: str = "eigenvalue",
) -> Axes:
    """Histogram of a spectrum with the Marchenko--Pastur density on top.

    Parameters
    ----------
    values : array_like, shape (n,)
        Eigenvalues, in the unit of the x-axis.
    q, sigma2 : float, optional
        Aspect ratio ``N/M`` and bulk variance of the MP law (in units of ``N·J``). If
        ``q`` is None no density is drawn.
    scale : float
        Unit conversion from ``N·J`` to the plotted values (``1/N`` for eigenvalues of
        ``J``); see :func:`mp_overlay`.
    ax : matplotlib Axes, optional
        Where to draw (default: current axes).
    bins : int or sequence
        Histogram bins.
    outliers : sequence of float, optional
        Predicted outlier locations (e.g. :func:`fedlam.rmt.outlier_location`, times
        ``scale``), drawn as dashed vertical lines in the signal colour.

    Returns
    -------
    Axes
        The axes drawn on.
    """
    vals = _as_1d_float(values, "values")
    ax = _ax_or_current(ax)
    ax.hist(vals, bins=bins, density=True, color=COLORS["bulk"], alpha=0.75, label=label)
    if q is not None:
        mp_overlay(ax, q, sigma2, scale)
    if outliers is not None:
        for i, x in enumerate(np.atleast_1d(np.asarray(outliers, dtype=np.float64))):
            ax.axvline(
                x,
                color=COLORS["signal"],
                ls="--",
                lw=1.4,
                label="predicted outlier" if i == 0 else None,
            )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    ax.legend(loc="upper right")
    return ax


def eigenvalue_markers(
    values: Any,
    threshold: float,
    *,
    ax: Axes | None = None,
    x: Any = None,
    color: str | None = None,
    label: str | None = None,
) -> Axes:
    """Plot the top eigenvalues as markers: filled above ``threshold``, empty below.

    Used for the BBP panel ("detected" spikes are filled, eigenvalues inside the bulk are
    hollow), with the threshold drawn as a dotted line.
    """
    vals = _as_1d_float(values, "values")
    xs = np.arange(1, vals.size + 1) if x is None else _as_1d_float(x, "x")
    if xs.shape != vals.shape:
        raise ValueError(f"x must have the shape of values {vals.shape}, got {xs.shape}")
    ax = _ax_or_current(ax)
    c = COLORS["signal"] if color is None else color
    above = vals > threshold
    ax.plot(xs[above], vals[above], "o", color=c, label=label)
    ax.plot(xs[~above], vals[~above], "o", mfc="white", mec=c, label=None)
    ax.axhline(threshold, color=COLORS["edge"], ls=":", lw=1.2)
    return ax


def mean_std_band(
    x: Any,
    samples: Any,
    *,
    ax: Axes | None = None,
    axis: int = 0,
    color: str | None = None,
    label: str | None = None,
    alpha: float = 0.22,
    ls: str = "-",
    marker: str | None = None,
) -> Axes:
    """Plot the mean of ``samples`` over ``axis`` with a ±1 standard deviation band.

    ``samples`` has one more dimension than ``x`` (the seeds, along ``axis``); the std is
    the population std (``ddof=0``) so a single seed gives a zero-width band.
    """
    xs = _as_1d_float(x, "x")
    arr = np.asarray(samples, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"samples must be 2-D (seeds x points), got shape {arr.shape}")
    arr = np.moveaxis(arr, axis, 0)
    if arr.shape[1] != xs.size:
        raise ValueError(
            f"samples must have {xs.size} points along the non-seed axis, got shape {arr.shape}"
        )
    ax = _ax_or_current(ax)
    mean = arr.mean(axis=0)
    std = arr.std(axis=0)
    (line,) = ax.plot(xs, mean, ls=ls, marker=marker, color=color, label=label)
    ax.fill_between(xs, mean - std, mean + std, color=line.get_color(), alpha=alpha, lw=0)
    return ax


def magnetization_curves(
    m: Any,
    t: Any = None,
    *,
    ax: Axes | None = None,
    labels: Sequence[str] | None = None,
    colors: Sequence[str] | None = None,
    ls: str = "-",
    legend: bool = True,
    ylabel: str = "magnetization $m_\\mu(t)$",
) -> Axes:
    """Magnetization of each archetype over rounds, mean ± std over seeds.

    Parameters
    ----------
    m : array_like, shape (S, T, K) or (T, K)
        Magnetizations (e.g. :func:`fedlam.metrics.magnetization` per round) for ``S``
        seeds, ``T`` rounds and ``K`` archetypes. A 2-D array is one seed.
    t : array_like, shape (T,), optional
        Round indices (default ``0..T-1``).
    labels, colors : sequences of length K, optional
        Legend labels (default ``"archetype 1"`` ...) and colours (default
        :func:`archetype_color`).
    """
    arr = np.asarray(m, dtype=np.float64)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise ValueError(f"m must have shape (S, T, K) or (T, K), got {np.shape(m)}")
    _, T, K = arr.shape
    ts = np.arange(T) if t is None else _as_1d_float(t, "t")
    if ts.size != T:
        raise ValueError(f"t must have length T={T}, got {ts.size}")
    if labels is not None and len(labels) != K:
        raise ValueError(f"labels must have length K={K}, got {len(labels)}")
    if colors is not None and len(colors) != K:
        raise ValueError(f"colors must have length K={K}, got {len(colors)}")
    ax = _ax_or_current(ax)
    for mu in range(K):
        mean_std_band(
            ts,
            arr[:, :, mu],
            ax=ax,
            color=archetype_color(mu) if colors is None else colors[mu],
            label=f"archetype {mu + 1}" if labels is None else labels[mu],
            ls=ls,
        )
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("round $t$")
    ax.set_ylabel(ylabel)
    if legend:
        ax.legend(loc="lower right")
    return ax


def _image_shape(n: int) -> tuple[int, int]:
    """A near-square (rows, cols) with rows*cols >= n for drawing a length-n pattern."""
    root = math.isqrt(n)
    for rows in range(root, 0, -1):
        if n % rows == 0 and n // rows <= 4 * rows:
            return rows, n // rows
    side = math.ceil(math.sqrt(n))
    return side, side


def pattern_image(
    pattern: Any,
    shape: tuple[int, int] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Draw one ±1 pattern as an image: +1 black, −1 white (object pixels black).

    ``shape`` defaults to ``(28, 28)`` when ``N = 784`` and to a near-square grid
    otherwise (padded cells, if any, are drawn light grey). Values between −1 and 1
    (e.g. a mean over examples) are drawn in grey levels.
    """
    vec = _as_1d_float(pattern, "pattern")
    n = vec.size
    rows, cols = shape if shape is not None else _image_shape(n)
    if rows * cols < n:
        raise ValueError(f"shape {shape} has fewer than N={n} cells")
    img = np.full(rows * cols, np.nan)
    img[:n] = vec
    cmap = mpl.colormaps["gray_r"].with_extremes(bad="#DDDDDD")
    ax = _ax_or_current(ax)
    ax.imshow(img.reshape(rows, cols), cmap=cmap, vmin=-1.0, vmax=1.0)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(True)
        ax.spines[side].set_color("#999999")
    if title is not None:
        ax.set_title(title, fontsize=10)
    return ax


def pattern_grid(
    patterns: Any,
    shape: tuple[int, int] | None = None,
    *,
    titles: Sequence[str] | None = None,
    ncols: int | None = None,
    panel_size: float = 1.6,
    row_labels: Sequence[str] | None = None,
) -> tuple[Figure, np.ndarray]:
    """Draw patterns (K, N) as a grid of images in a new figure.

    Parameters
    ----------
    patterns : array_like, shape (K, N) or (R, K, N)
        ±1 patterns (int8 or float). A 3-D array draws one row per leading index (e.g.
        archetypes / noisy examples / reconstructions), labelled by ``row_labels``.
    shape : (rows, cols), optional
        Image shape of one pattern (see :func:`pattern_image`).
    titles : sequence of str, optional
        One title per column.
    ncols : int, optional
        Columns for a 2-D input (default: all in one row, at most 8).

    Returns
    -------
    (fig, axes) : Figure and 2-D array of Axes
    """
    arr = np.asarray(patterns)
    if arr.ndim == 2:
        K = arr.shape[0]
        if K == 0:
            raise ValueError("patterns is empty (K = 0): nothing to draw")
        nc = min(K, 8) if ncols is None else ncols
        nr = math.ceil(K / nc)
        flat = list(arr)
        grid_titles: list[str | None] = list(titles) if titles is not None else [None] * K
    elif arr.ndim == 3:
        nr, nc = arr.shape[0], arr.shape[1]
        if nr == 0 or nc == 0:
            raise ValueError(f"patterns is empty (shape {arr.shape}): nothing to draw")
        flat = [arr[i, j] for i in range(nr) for j in range(nc)]
        grid_titles = [None] * (nr * nc)
        if titles is not None:
            grid_titles[:nc] = list(titles)
    else:
        raise ValueError(f"patterns must be 2-D (K, N) or 3-D (R, K, N), got shape {arr.shape}")
    fig, axes = plt.subplots(
        nr, nc, figsize=(panel_size * nc, panel_size * nr + 0.2), squeeze=False
    )
    for idx, ax in enumerate(axes.flat):
        if idx < len(flat):
            pattern_image(flat[idx], shape, ax=ax, title=grid_titles[idx])
        else:
            ax.axis("off")
    if row_labels is not None:
        if len(row_labels) != nr:
            raise ValueError(f"row_labels must have length {nr}, got {len(row_labels)}")
        for i, lab in enumerate(row_labels):
            axes[i, 0].set_ylabel(lab, fontsize=10)
    return fig, axes


def label_panels(axes: Any, *, start: str = "A", fontsize: float = 13.0) -> None:
    """Write panel letters A, B, C, ... in the top-left corner of each axes."""
    for i, ax in enumerate(np.asarray(axes).flat):
        ax.text(
            -0.02,
            1.02,
            chr(ord(start) + i),
            transform=ax.transAxes,
            fontsize=fontsize,
            fontweight="bold",
            va="bottom",
            ha="right",
        )


def save_figure(
    fig: Figure, stem: str | Path, formats: Sequence[str] = ("png", "pdf")
) -> list[Path]:
    """Save ``fig`` as ``stem.png``, ``stem.pdf`` ... (white background); return the paths.

    PDF metadata has no creation date, so repeated runs give identical files.
    """
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = stem.with_suffix(f".{fmt}")
        kwargs: dict[str, Any] = {"facecolor": "white"}
        if fmt == "pdf":
            kwargs["metadata"] = {"CreationDate": None, "ModDate": None}
        elif fmt == "svg":
            kwargs["metadata"] = {"Date": None}
        fig.savefig(path, format=fmt, **kwargs)
        paths.append(path)
    return paths
