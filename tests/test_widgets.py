"""Tests of fedlam.widgets (static and interactive explorers) and fedlam.plotting."""

from __future__ import annotations

import re

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest

from fedlam import plotting, widgets
from fedlam.widgets import STATIC_NOTE, Fixed, build_explorer, explorer, resolve_defaults


@pytest.fixture
def ipywidgets():
    """ipywidgets for the interactive tests only; the static and plotting tests never skip."""
    return pytest.importorskip("ipywidgets")


def plot_line(slope: float = 1.0, n: int = 5, kind: str = "line", grid: bool = True) -> None:
    x = np.arange(n)
    fig, ax = plt.subplots()
    ax.plot(x, slope * x, "-" if kind == "line" else "o")
    ax.grid(grid)


def needs_a(a, b=2):  # noqa: ANN001 - a deliberately undocumented positional
    plt.plot([a, b])


# ---------------------------------------------------------------- resolve_defaults


def test_defaults_from_four_tuple_and_signature() -> None:
    got = resolve_defaults(plot_line, slope=(0.0, 2.0, 0.1, 0.5), n=(2, 20, 1), kind=["line", "dots"])
    assert got == {"slope": 0.5, "n": 5, "kind": "line"}


def test_defaults_from_widgets_fixed_bool_and_dict(ipywidgets) -> None:
    got = resolve_defaults(
        plot_line,
        slope=ipywidgets.FloatSlider(min=0, max=3, value=2.5),
        n=Fixed(7),
        grid=False,
        kind={"Line": "line", "Dots": "dots"},
    )
    assert got == {"slope": 2.5, "n": 7, "grid": False, "kind": "line"}
    assert resolve_defaults(plot_line, n=ipywidgets.fixed(3)) == {"n": 3}


@pytest.mark.parametrize(
    ("controls", "message"),
    [
        ({"a": (0, 1)}, "control 'a' needs an explicit default"),
        ({"a": ["x", "y"]}, "control 'a' needs an explicit default"),
        ({"a": (0, 1, 0.1, 2.0)}, "outside [min, max]"),
        ({"a": (1, 0, 0.1, 0.5)}, "need min < max"),
        ({"a": (0, 1, 0, 0.5)}, "step must be > 0"),
        ({"a": 0.5, "b": [1, 3]}, "default 2 is not one of the options"),
        ({"a": 0.5, "zzz": (0, 1, 0.1, 0.5)}, "controls ['zzz'] are not parameters"),
        ({"b": (0, 5, 1, 2)}, "parameters ['a'] of needs_a have neither a control nor a default"),
        ({"a": object()}, "unsupported specification"),
    ],
)
def test_bad_controls_are_named(controls: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        resolve_defaults(needs_a, **controls)


def test_plot_fn_must_be_callable() -> None:
    with pytest.raises(TypeError, match="plot_fn must be callable"):
        resolve_defaults(42, a=(0, 1, 0.1, 0.5))  # type: ignore[arg-type]


# ---------------------------------------------------------------- static mode


def test_static_mode_draws_default_once_then_prints_note(monkeypatch, capsys) -> None:
    monkeypatch.setenv("FEDLAM_WIDGETS", "static")
    calls: list[dict] = []
    shown: list[int] = []

    def plot(r: float = 0.3, M: int = 10) -> None:
        calls.append({"r": r, "M": M})
        plt.figure()
        plt.plot([0, 1], [r, M])
        print("drawn")

    monkeypatch.setattr(plt, "show", lambda *a, **k: shown.append(len(plt.get_fignums())))
    assert explorer(plot, r=(0.0, 1.0, 0.05, 0.8), M=(1, 100, 1)) is None
    assert calls == [{"r": 0.8, "M": 10}]
    assert shown == [1]  # plt.show() ran after plot_fn, with its figure open
    out = capsys.readouterr().out.splitlines()
    assert out == ["drawn", STATIC_NOTE]


def test_static_mode_validates_too(monkeypatch) -> None:
    monkeypatch.setenv("FEDLAM_WIDGETS", "static")
    with pytest.raises(ValueError, match="explicit default"):
        explorer(needs_a, a=(0, 1))


def test_mode_switch(monkeypatch) -> None:
    monkeypatch.setenv("FEDLAM_WIDGETS", "STATIC ")
    assert widgets.is_static()
    monkeypatch.setenv("FEDLAM_WIDGETS", "interactive")
    assert not widgets.is_static()
    monkeypatch.delenv("FEDLAM_WIDGETS")
    assert not widgets.is_static()


def test_notebook_kernels_render_explorers_static() -> None:
    """A Jupyter kernel started the way nbval starts one (inheriting this process's
    environment, which the root conftest.py sets) draws an explorer's default once and prints
    the static note, without any widget."""
    jupyter_client = pytest.importorskip("jupyter_client")
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name="python3")
    try:
        code = (
            "import matplotlib; matplotlib.use('agg')\n"
            "from fedlam import widgets\n"
            "print('static:', widgets.is_static())\n"
            "widgets.explorer(lambda a=0.5: print('drawn', a), a=(0.0, 1.0, 0.1, 0.5))\n"
        )
        out: list[str] = []
        reply = kc.execute_interactive(
            code, timeout=120,
            output_hook=lambda msg: out.append(msg["content"].get("text", "")) if msg["msg_type"] == "stream" else None,
        )
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    text = "".join(out).splitlines()
    assert text == ["static: True", "drawn 0.5", STATIC_NOTE]


# ---------------------------------------------------------------- interactive mode


def test_interactive_starts_at_the_static_defaults(monkeypatch, ipywidgets) -> None:
    monkeypatch.setattr(plt, "show", lambda *a, **k: None)
    w = build_explorer(
        plot_line,
        slope=(-1.0, 3.0, 0.25, 0.5),
        n=(2, 40, 2, 6),
        kind=["line", "dots"],
        grid=False,
    )
    assert isinstance(w, ipywidgets.interactive)
    by_name = {c.description: c for c in w.children if hasattr(c, "description") and c.description}
    assert isinstance(by_name["slope"], ipywidgets.FloatSlider)
    assert isinstance(by_name["n"], ipywidgets.IntSlider)
    assert isinstance(by_name["kind"], ipywidgets.Dropdown)
    assert isinstance(by_name["grid"], ipywidgets.Checkbox)
    values = {k: v.value for k, v in by_name.items()}
    assert values == resolve_defaults(
        plot_line, slope=(-1.0, 3.0, 0.25, 0.5), n=(2, 40, 2, 6), kind=["line", "dots"], grid=False
    )
    assert (by_name["slope"].min, by_name["slope"].max, by_name["slope"].step) == (-1.0, 3.0, 0.25)
    assert w.kwargs == values  # the function already ran once with these


def test_interactive_reruns_on_change(monkeypatch) -> None:
    monkeypatch.setattr(plt, "show", lambda *a, **k: None)
    seen: list[float] = []

    def plot(r: float = 0.5) -> None:
        seen.append(r)

    w = build_explorer(plot, r=(0.0, 1.0, 0.1, 0.5))
    w.children[0].value = 0.7
    assert seen[0] == 0.5 and seen[-1] == pytest.approx(0.7)


def test_interactive_explorer_displays_once(monkeypatch, ipywidgets) -> None:
    monkeypatch.setenv("FEDLAM_WIDGETS", "interactive")
    monkeypatch.setattr(plt, "show", lambda *a, **k: None)
    shown: list[object] = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    assert explorer(plot_line, slope=(0.0, 2.0, 0.1, 1.0)) is None
    assert len(shown) == 1 and isinstance(shown[0], ipywidgets.interactive)


# ---------------------------------------------------------------- plotting


def test_book_style_white_backgrounds() -> None:
    with mpl.rc_context():
        plotting.use_book_style()
        for key in ("figure.facecolor", "axes.facecolor", "savefig.facecolor"):
            assert mpl.rcParams[key] == "white"
        assert mpl.rcParams["font.size"] >= 10
        fig, ax = plt.subplots()
        assert mpl.colors.to_hex(fig.get_facecolor()) == "#ffffff"


def test_archetype_colors_fixed_and_validated() -> None:
    assert plotting.archetype_color(0) == plotting.archetype_color(len(plotting.ARCHETYPE_COLORS))
    with pytest.raises(ValueError, match="mu must be a non-negative integer"):
        plotting.archetype_color(-1)


def test_spectrum_histogram_with_mp_overlay() -> None:
    rng = np.random.default_rng(0)
    N, M = 200, 400
    X = rng.choice([-1.0, 1.0], size=(M, N))
    values = np.linalg.eigvalsh(X.T @ X / M)  # eigenvalues of N·J for white data
    fig, ax = plt.subplots()
    plotting.spectrum_histogram(values, q=N / M, ax=ax, outliers=[3.5])
    low, high = plotting.mp_overlay(ax, N / M, 1.0, scale=0.5, label=None)
    assert (low, high) == pytest.approx((0.5 * (1 - np.sqrt(0.5)) ** 2, 0.5 * (1 + np.sqrt(0.5)) ** 2))
    with pytest.raises(ValueError, match="scale must be > 0"):
        plotting.mp_overlay(ax, 0.5, scale=0.0)
    with pytest.raises(ValueError, match="values must be a non-empty 1-D"):
        plotting.spectrum_histogram(np.zeros((2, 2)))


def test_magnetization_curves_shapes() -> None:
    m = np.random.default_rng(1).random((4, 6, 3))
    fig, ax = plt.subplots()
    plotting.magnetization_curves(m, ax=ax)
    assert len(ax.get_lines()) == 3
    mean0 = ax.get_lines()[0].get_ydata()
    np.testing.assert_allclose(mean0, m[:, :, 0].mean(axis=0))
    plotting.magnetization_curves(m[0], ax=ax, labels=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"m must have shape \(S, T, K\)"):
        plotting.magnetization_curves(np.zeros(5))
    with pytest.raises(ValueError, match="labels must have length K=3"):
        plotting.magnetization_curves(m, labels=["a"])


def test_pattern_grid_and_image_shapes() -> None:
    pats = np.where(np.random.default_rng(2).random((3, 784)) < 0.5, -1, 1).astype(np.int8)
    fig, axes = plotting.pattern_grid(pats, titles=["a", "b", "c"])
    assert axes.shape == (1, 3)
    assert axes[0, 0].get_images()[0].get_array().shape == (28, 28)
    fig, axes = plotting.pattern_grid(np.stack([pats, pats]), row_labels=["true", "found"])
    assert axes.shape == (2, 3)
    _, ax = plt.subplots()
    plotting.pattern_image(np.ones(101), ax=ax)  # prime N: padded near-square grid
    assert ax.get_images()[0].get_array().shape == (11, 11)
    _, ax = plt.subplots()
    assert plotting.pattern_image(np.ones(200), ax=ax).get_images()[0].get_array().shape == (10, 20)
    with pytest.raises(ValueError, match="patterns is empty"):
        plotting.pattern_grid(np.zeros((0, 16)))


def test_save_figure_is_byte_stable(tmp_path) -> None:
    plotting.use_book_style()
    paths = []
    for name in ("a", "b"):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        paths.append(plotting.save_figure(fig, tmp_path / name, formats=("png", "pdf", "svg")))
    for pa, pb in zip(*paths):
        assert pa.read_bytes() == pb.read_bytes(), pa.suffix
