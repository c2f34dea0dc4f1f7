"""Shared plumbing of the experiment modules: field checks, presets, JSON summaries.

Nothing here computes anything scientific; it keeps the six experiment modules short and makes
them behave the same way (one frozen parameters dataclass per experiment, validated before any
work, ``PRESETS = {"book": ..., "paper": ..., "full": ...}``, a pure ``run(params, rng)`` and a result object
with a JSON-serialisable ``to_dict()``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedlam._validation import (
    _describe,
    check_choice,
    check_in_range,
    check_nonneg_int,
    check_positive_int,
    check_quality,
)

__all__ = [
    "JsonResult",
    "check_int_tuple",
    "check_float_tuple",
    "check_mixture_tuple",
    "check_bool",
    "make_params",
    "jsonable",
    "write_json",
    "mean_std",
    "check_positive_int",
    "check_nonneg_int",
    "check_in_range",
    "check_quality",
    "check_choice",
]



def check_bool(x: Any, name: str) -> bool:
    """Check a genuine ``bool`` (not an int, not a string)."""
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {_describe(x)}")
    return bool(x)


def check_int_tuple(x: Any, name: str, minimum: int = 1, nonempty: bool = True) -> tuple[int, ...]:
    """Check a tuple of ints, each >= ``minimum``; lists are rejected (parameters are frozen)."""
    if not isinstance(x, tuple):
        raise TypeError(f"{name} must be a tuple of ints, got {_describe(x)}")
    if nonempty and len(x) == 0:
        raise ValueError(f"{name} must not be empty")
    return tuple(check_positive_int(v, f"{name}[{i}]", minimum=minimum) for i, v in enumerate(x))


def check_float_tuple(
    x: Any, name: str, low: float | None = None, high: float | None = None,
    low_open: bool = False, nonempty: bool = True,
) -> tuple[float, ...]:
    """Check a tuple of real numbers in an interval."""
    if not isinstance(x, tuple):
        raise TypeError(f"{name} must be a tuple of real numbers, got {_describe(x)}")
    if nonempty and len(x) == 0:
        raise ValueError(f"{name} must not be empty")
    return tuple(
        check_in_range(v, f"{name}[{i}]", low, high, low_open=low_open) for i, v in enumerate(x)
    )


def check_mixture_tuple(x: Any, name: str, atol: float = 1e-9) -> tuple[float, ...]:
    """Check a tuple of non-negative weights summing to 1."""
    vals = check_float_tuple(x, name, 0.0, 1.0)
    s = math.fsum(vals)
    if abs(s - 1.0) > atol:
        raise ValueError(f"{name} must sum to 1, got sum {s!r}")
    return vals


def make_params(cls: type, presets: Mapping[str, Any], preset: str = "book", **overrides: Any) -> Any:
    """Build a parameters object from a named preset plus field overrides.

    ``None`` overrides are ignored, so a notebook's ``parameters`` cell can hold ``None`` for
    "keep the preset's value" and papermill can inject real values. Unknown field names raise a
    :class:`TypeError` naming them; bad values raise from the dataclass validation.
    """
    check_choice(preset, "preset", tuple(presets))
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise TypeError(
            f"unknown parameter(s) {unknown} for {cls.__name__}; valid fields: {sorted(names)}"
        )
    base = presets[preset]
    changes = {}
    for k, v in overrides.items():
        if v is None:
            continue
        if isinstance(v, list):  # papermill/JSON cannot carry tuples
            v = tuple(tuple(e) if isinstance(e, list) else e for e in v)
        changes[k] = v
    return dataclasses.replace(base, **changes)


class JsonResult:
    """Mixin for the experiments' result dataclasses: :meth:`to_dict` gives a
    JSON-serialisable dictionary of every field (arrays as nested lists)."""

    def to_dict(self) -> dict:
        """JSON-serialisable dictionary of every field (arrays as nested lists)."""
        if not dataclasses.is_dataclass(self):
            raise TypeError(f"JsonResult is a mixin for dataclasses; {type(self).__name__} is not one")
        return jsonable({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})


def jsonable(x: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and dataclasses into JSON-ready Python objects.

    Non-finite floats become ``None`` (JSON has no NaN).
    """
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: jsonable(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        v = float(x)
        return v if math.isfinite(v) else None
    if x is None or isinstance(x, str):
        return x
    return str(x)


def write_json(obj: Any, path: str | Path) -> Path:
    """Write ``jsonable(obj)`` to ``path`` (parents created), sorted keys, 2-space indent."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(jsonable(obj), indent=2, sort_keys=True) + "\n")
    return p


def mean_std(x: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population standard deviation over ``axis`` (the seeds axis by convention)."""
    x = np.asarray(x, dtype=np.float64)
    return x.mean(axis=axis), x.std(axis=axis)


def seed_pairs(rng: Any, n: int) -> list[tuple[int, int]]:
    """``n`` pairs of independent int seeds (archetypes, federation) drawn from ``rng``.

    Every condition of an experiment (controller, attack, ...) within seed ``s`` reuses the same
    pair, so conditions are compared on the same archetypes and the same client data streams.
    """
    from fedlam._validation import as_rng

    gen = as_rng(rng)
    raw = gen.integers(0, 2**62, size=(n, 2))
    return [(int(a), int(b)) for a, b in raw]


def check_controllers(x: Any, name: str = "controllers") -> tuple:
    """A non-empty tuple of controllers: ``"paper"``, ``"novelty"`` or a float weight in [0, 1]."""
    if not isinstance(x, tuple) or len(x) == 0:
        raise TypeError(f"{name} must be a non-empty tuple of 'paper', 'novelty' or floats in [0, 1], "
                        f"got {_describe(x)}")
    for i, c in enumerate(x):
        if isinstance(c, str):
            check_choice(c, f"{name}[{i}]", ("paper", "novelty"))
        else:
            check_in_range(c, f"{name}[{i}]", 0.0, 1.0)
    if len(set(x)) != len(x):
        raise ValueError(f"{name} must not repeat entries, got {x!r}")
    return x


def controller_label(c: Any) -> str:
    """Human-readable name of a controller entry."""
    if c == "paper":
        return "paper's entropy rule"
    if c == "novelty":
        return "our novelty rule"
    return f"w = {float(c):g}"


def check_lam_params(x: Any, name: str = "lam_params") -> dict | None:
    """``None`` or a dict of :class:`fedlam.lam.LAMParams` overrides (validated now)."""
    if x is None:
        return None
    if not isinstance(x, dict):
        raise TypeError(f"{name} must be None or a dict of LAMParams fields, got {_describe(x)}")
    from fedlam.lam import LAMParams

    names = {f.name for f in dataclasses.fields(LAMParams)}
    unknown = sorted(set(x) - names)
    if unknown:
        raise TypeError(f"{name} has unknown LAMParams field(s) {unknown}")
    LAMParams(**x)  # validates the values
    return x


def markdown_table(rows: list, header: tuple = ("quantity", "paper reports", "we measure",
                                                 "why they differ")) -> str:
    """A Markdown table (for the notebooks' paper-versus-measurement comparisons).

    ``|`` inside cells is escaped.
    """
    def cell(x: Any) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"each row must have {len(header)} cells, got {len(row)}: {row!r}")
        lines.append("| " + " | ".join(cell(c) for c in row) + " |")
    return "\n".join(lines)


class Table:
    """A small table that displays as HTML in the book and in Jupyter, and as Markdown text.

    Jupyter Book renders ``text/markdown`` outputs as CommonMark, which has no tables, so the
    notebooks display this object: its ``text/html`` representation is what the book shows,
    ``text/markdown``/``text/plain`` carry the same content as a Markdown table.
    """

    def __init__(self, rows: list, header: tuple = ("quantity", "paper reports", "we measure",
                                                     "why they differ")) -> None:
        self.header = tuple(str(h) for h in header)
        self.rows = [tuple(str(c) for c in r) for r in rows]
        self._md = markdown_table(self.rows, self.header)  # validates row lengths

    def _repr_markdown_(self) -> str:
        return self._md

    def _repr_html_(self) -> str:
        import html

        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.rows
        )
        return (f'<table class="fedlam-comparison"><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>")

    def __repr__(self) -> str:
        return self._md


def comparison_table(rows: list, header: tuple | None = None) -> Table:
    """The notebooks' paper-versus-measurement table (see :class:`Table`)."""
    return Table(rows) if header is None else Table(rows, header)


class TitledTable:
    """A table with a title above it: HTML (``<caption>``) in the book, Markdown as text.

    Parameters
    ----------
    title : str
        Shown above the table.
    rows : list of tuple
        Cells, converted with ``str``.
    header : tuple of str
        Column names; every row must have as many cells.
    """

    def __init__(self, title: str, rows: list, header: tuple) -> None:
        if not isinstance(title, str) or not title:
            raise TypeError(f"title must be a non-empty str, got {_describe(title)}")
        self.title = title
        self.table = Table(rows, header)

    def _repr_markdown_(self) -> str:
        return f"**{self.title}**\n\n{self.table._repr_markdown_()}"

    def _repr_html_(self) -> str:
        import html

        body = self.table._repr_html_()
        cap = f"<caption>{html.escape(self.title)}</caption>"
        return body.replace("<thead>", cap + "<thead>", 1)

    def __repr__(self) -> str:
        return self._repr_markdown_()


#: the acceptances that certify against the uploads' fresh parts (the default is the first)
CERTIFIED = ("voted", "fresh")


def check_acceptance_pair(res: Any, default: Any, result_type: type[Any],
                          names: tuple[str, str] = ("res", "default")) -> tuple[Any, Any]:
    """The params of two runs of one setting under ``acceptance="paper"`` (``res``) and a
    certifying acceptance (``default``: ``"voted"``, the library's default, or ``"fresh"``);
    only their controllers may differ. Errors name the arguments ``names``."""
    for name, r in zip(names, (res, default), strict=True):
        if not isinstance(r, result_type):
            raise TypeError(f"{name} must be a {result_type.__name__}, got {type(r).__name__}")
    p, pf = res.params, default.params
    if p.acceptance != "paper" or pf.acceptance not in CERTIFIED:
        raise ValueError(f"{names[0]} and {names[1]} must run acceptance='paper' and one of {CERTIFIED}, got "
                         f"{p.acceptance!r} and {pf.acceptance!r}")
    if dataclasses.replace(pf, controllers=p.controllers, acceptance="paper") != p:
        raise ValueError(f"{names[1]} must have the setting of {names[0]} (only controllers and acceptance "
                         f"may differ), got {pf} against {p}")
    return p, pf


def acceptance_table(res: Any, default: Any, result_type: type[Any], final_m: Any, final_m_label: str) -> Any:
    """The paper's acceptance beside the default acceptance, one row per rule and acceptance.

    Shared by :func:`fedlam.experiments.drift.acceptance_table` and
    :func:`fedlam.experiments.novelty.acceptance_table`. ``res`` and ``default`` are results of
    ``result_type`` with ``acceptance="paper"`` and a certifying one (:data:`CERTIFIED`), the same
    setting and seeds;
    the rules of one must be among the other's, and the table has a pair of rows for each rule
    of the run with fewer rules (in its order), e.g. the adaptive rules of a paper-acceptance
    run beside a default run of every rule. ``final_m(mag)`` formats the final
    magnetizations ``mag`` (seeds, K) of one rule, described in the title by ``final_m_label``.
    The certifying acceptances are derived in {ref}`sec-robust-fresh`.
    """
    p, pf = check_acceptance_pair(res, default, result_type)
    shown = min(pf.controllers, p.controllers, key=len)
    other = p.controllers if shown is pf.controllers else pf.controllers
    missing = [c for c in shown if c not in other]
    if missing:
        raise ValueError(f"the rules of one of res and default must be among the other's, got "
                         f"{p.controllers} and {pf.controllers}")
    rows = []
    for c in shown:
        for r in (res, default):
            i = r.params.controllers.index(c)
            sp, mag = r.spurious[:, i, -1], r.magnetization[:, i]
            rows.append((controller_label(c), r.params.acceptance,
                         f"{sp.mean():.2f} ({sp.max()})", f"{r.k_hat[:, i, -1].mean():.2f}",
                         final_m(mag[:, -1]), f"{mag[:, -1].min(axis=1).mean():.2f}", f"{mag.mean():.3f}"))
    return TitledTable(f"The paper's acceptance and the {pf.acceptance} acceptance: final spurious patterns "
                       f"(mean over seeds, most in one seed), final K-hat, {final_m_label}, "
                       "final lowest m and time-averaged m (means over seeds)", rows,
                       ("rule", "acceptance", "spurious", "K-hat", "final m", "min m",
                        "time-avg. m"))
