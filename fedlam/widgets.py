"""Interactive explorers that degrade to a static figure.

Every explorer in the book is one call::

    from fedlam.widgets import explorer
    explorer(plot_bbp, kappa=(0.0, 4.0, 0.1, 1.5), q=(0.1, 2.0, 0.05, 0.5))

where ``plot_bbp`` is a small function that draws one figure from a pure :mod:`fedlam`
function. Two modes:

* **interactive** (default, in Jupyter): an :class:`ipywidgets.interactive` with one
  control per keyword is displayed; moving a slider re-runs ``plot_fn``.
* **static** (environment variable ``FEDLAM_WIDGETS=static``, set by ``tests/conftest.py``,
  by ``.ci/run`` and when the committed outputs are produced): ``plot_fn`` is called once
  with the default of every control, the figure is shown, and one line of text follows:
  :data:`STATIC_NOTE`. The HTML book therefore shows a real figure where a live widget
  would be, and nbval compares a deterministic output.

**Controls and their defaults.** Every control must have an explicit default, so that the
static figure and the initial state of the sliders are the same, and are visible in the
notebook source. Accepted forms:

``(min, max, step, default)``
    a slider (an ``IntSlider`` if all four are ints, otherwise a ``FloatSlider``);
``(min, max, step)`` or ``(min, max)``
    a slider whose default is ``plot_fn``'s own default for that argument;
a list of options, or a dict ``{label: value}``
    a dropdown; the default is ``plot_fn``'s default for that argument, which must be one of
    the options;
a ``bool``
    a checkbox with that default;
an ``ipywidgets`` value widget (``FloatSlider(value=...)``, ``Dropdown(...)``, ...)
    used as is; its ``value`` is the default;
``ipywidgets.fixed(value)`` or :class:`Fixed`
    passed unchanged, no control.

Anything without a determinable default raises :class:`ValueError` naming the control.
"""

from __future__ import annotations

import inspect
import numbers
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "STATIC_NOTE",
    "ENV_VAR",
    "Fixed",
    "is_static",
    "resolve_defaults",
    "build_explorer",
    "explorer",
]

#: Environment variable selecting the mode; the value ``static`` turns widgets into figures.
ENV_VAR = "FEDLAM_WIDGETS"

#: The line printed under the static figure (the browser test looks for it).
STATIC_NOTE = "Interactive explorer: static default shown; run this notebook to move the sliders."


@dataclass(frozen=True)
class Fixed:
    """A keyword passed to ``plot_fn`` unchanged, without a control (like ``ipywidgets.fixed``)."""

    value: Any


def is_static() -> bool:
    """True when ``FEDLAM_WIDGETS=static`` is set (case-insensitive), or ipywidgets is missing."""
    if os.environ.get(ENV_VAR, "").strip().lower() == "static":
        return True
    try:
        import ipywidgets  # noqa: F401
    except ImportError:  # pragma: no cover - ipywidgets is a book dependency
        return True
    return False


def _is_real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _signature_defaults(plot_fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        sig = inspect.signature(plot_fn)
    except (TypeError, ValueError):  # pragma: no cover - builtins without signature
        return {}
    return {
        name: p.default
        for name, p in sig.parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def _check_callable(plot_fn: Any, controls: Mapping[str, Any]) -> None:
    if not callable(plot_fn):
        raise TypeError(f"plot_fn must be callable, got {type(plot_fn).__name__} {plot_fn!r}")
    try:
        sig = inspect.signature(plot_fn)
    except (TypeError, ValueError):  # pragma: no cover
        return
    params = sig.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(set(controls) - set(params))
    if unknown:
        raise ValueError(
            f"controls {unknown} are not parameters of {getattr(plot_fn, '__name__', plot_fn)}"
            f"; expected a subset of {list(params)}"
        )
    missing = [
        name
        for name, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and name not in controls
    ]
    if missing:
        raise ValueError(
            f"parameters {missing} of {getattr(plot_fn, '__name__', plot_fn)} have neither a "
            "control nor a default"
        )


def _slider_spec(name: str, spec: tuple, fn_defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Parse (min, max[, step[, default]]) into min/max/step/value/is_int."""
    if not all(_is_real(v) for v in spec):
        raise ValueError(f"control {name!r}: slider tuple must hold numbers, got {spec!r}")
    lo, hi = spec[0], spec[1]
    step = spec[2] if len(spec) >= 3 else None
    if len(spec) == 4:
        default = spec[3]
    elif name in fn_defaults:
        default = fn_defaults[name]
    else:
        raise ValueError(
            f"control {name!r} needs an explicit default: give (min, max, step, default) "
            f"or a default value for {name!r} in plot_fn's signature; got {spec!r}"
        )
    if not _is_real(default):
        raise ValueError(f"control {name!r}: default must be a number, got {default!r}")
    if not lo < hi:
        raise ValueError(f"control {name!r}: need min < max, got min={lo!r}, max={hi!r}")
    if step is not None and not step > 0:
        raise ValueError(f"control {name!r}: step must be > 0, got {step!r}")
    if not lo <= default <= hi:
        raise ValueError(
            f"control {name!r}: default {default!r} is outside [min, max] = [{lo!r}, {hi!r}]"
        )
    is_int = all(isinstance(v, numbers.Integral) for v in (lo, hi, default)) and (
        step is None or isinstance(step, numbers.Integral)
    )
    if step is None:
        step = 1 if is_int else (hi - lo) / 100
    return {"min": lo, "max": hi, "step": step, "value": default, "is_int": is_int}


def _options_default(name: str, options: list[Any], fn_defaults: Mapping[str, Any]) -> Any:
    if len(options) == 0:
        raise ValueError(f"control {name!r}: the list of options is empty")
    if name not in fn_defaults:
        raise ValueError(
            f"control {name!r} needs an explicit default: give {name!r} a default in "
            f"plot_fn's signature (one of {options!r})"
        )
    default = fn_defaults[name]
    if not any(default is o or default == o for o in options):
        raise ValueError(
            f"control {name!r}: default {default!r} is not one of the options {options!r}"
        )
    return default


def _widget_value(control: Any) -> tuple[bool, Any]:
    """(True, value) if ``control`` is an ipywidgets value widget or ipywidgets.fixed."""
    try:
        import ipywidgets
    except ImportError:  # pragma: no cover
        return False, None
    if isinstance(control, ipywidgets.fixed):
        return True, control.value
    if isinstance(control, ipywidgets.ValueWidget):
        return True, control.value
    return False, None


def resolve_defaults(plot_fn: Callable[..., Any], **controls: Any) -> dict[str, Any]:
    """Return the keyword arguments ``plot_fn`` is called with in the default state.

    Validates every control (see the module docstring for the accepted forms) and raises
    :class:`ValueError` naming the control when its default cannot be determined or is
    inconsistent (outside the slider range, not among the options).
    """
    _check_callable(plot_fn, controls)
    fn_defaults = _signature_defaults(plot_fn)
    values: dict[str, Any] = {}
    for name, control in controls.items():
        is_widget, value = _widget_value(control)
        if is_widget:
            values[name] = value
        elif isinstance(control, Fixed):
            values[name] = control.value
        elif isinstance(control, bool):
            values[name] = control
        elif isinstance(control, tuple) and 2 <= len(control) <= 4 and all(
            _is_real(v) for v in control
        ):
            values[name] = _slider_spec(name, control, fn_defaults)["value"]
        elif isinstance(control, Mapping):
            opts = list(control.values())
            values[name] = _options_default(name, opts, fn_defaults)
        elif isinstance(control, (list, tuple)):
            values[name] = _options_default(name, list(control), fn_defaults)
        elif _is_real(control) or isinstance(control, str):
            values[name] = control
        else:
            raise ValueError(
                f"control {name!r}: unsupported specification {control!r}; use "
                "(min, max, step, default), a list of options, a bool, a widget or Fixed(value)"
            )
    return values


def _make_widget(name: str, control: Any, default: Any, fn_defaults: Mapping[str, Any]) -> Any:
    import ipywidgets as w

    is_widget, _ = _widget_value(control)
    if is_widget:
        return control
    if isinstance(control, Fixed):
        return w.fixed(control.value)
    style = {"description_width": "initial"}
    if isinstance(control, bool):
        return w.Checkbox(value=control, description=name, style=style)
    if isinstance(control, tuple) and 2 <= len(control) <= 4 and all(_is_real(v) for v in control):
        s = _slider_spec(name, control, fn_defaults)
        cls = w.IntSlider if s["is_int"] else w.FloatSlider
        return cls(
            min=s["min"],
            max=s["max"],
            step=s["step"],
            value=s["value"],
            description=name,
            continuous_update=False,
            style=style,
        )
    if isinstance(control, Mapping):
        return w.Dropdown(options=list(control.items()), value=default, description=name)
    if isinstance(control, (list, tuple)):
        return w.Dropdown(options=list(control), value=default, description=name)
    if isinstance(control, str):
        return w.Text(value=control, description=name, continuous_update=False)
    if isinstance(control, numbers.Integral):
        return w.IntText(value=control, description=name)
    return w.FloatText(value=control, description=name)


def _show_after(plot_fn: Callable[..., Any]) -> Callable[..., None]:
    def run(**kwargs: Any) -> None:
        import matplotlib.pyplot as plt

        plot_fn(**kwargs)
        plt.show()

    run.__name__ = getattr(plot_fn, "__name__", "plot")
    run.__doc__ = getattr(plot_fn, "__doc__", None)
    return run


def build_explorer(plot_fn: Callable[..., Any], **controls: Any) -> Any:
    """Build (without displaying) the :class:`ipywidgets.interactive` for ``plot_fn``.

    The sliders start at the same defaults that :func:`resolve_defaults` returns, so the
    first figure equals the static one.
    """
    import ipywidgets

    defaults = resolve_defaults(plot_fn, **controls)
    fn_defaults = _signature_defaults(plot_fn)
    widgets = {
        name: _make_widget(name, control, defaults[name], fn_defaults)
        for name, control in controls.items()
    }
    return ipywidgets.interactive(_show_after(plot_fn), **widgets)


def explorer(plot_fn: Callable[..., Any], **controls: Any) -> None:
    """Show an interactive explorer of ``plot_fn``, or its static default.

    Parameters
    ----------
    plot_fn : callable
        Draws one figure (with matplotlib's pyplot) from keyword arguments. It should wrap a
        pure :mod:`fedlam` function; ``plt.show()`` is called after it.
    **controls
        One control per keyword argument of ``plot_fn``, each with an explicit default
        (see the module docstring).

    Notes
    -----
    With ``FEDLAM_WIDGETS=static`` the function calls ``plot_fn`` once with the defaults,
    shows the figure and prints :data:`STATIC_NOTE` on the line after it. Otherwise it
    displays an :class:`ipywidgets.interactive` (use :func:`build_explorer` to get the
    widget object without displaying it). Returns None, so a trailing call does not
    display anything twice.
    """
    if is_static():
        defaults = resolve_defaults(plot_fn, **controls)
        _show_after(plot_fn)(**defaults)
        print(STATIC_NOTE)
        return None
    from IPython.display import display

    display(build_explorer(plot_fn, **controls))
    return None
