"""Sphinx extension for the API page: MyST roles inside docstrings.

The package docstrings point back to the book with MyST roles, e.g. "Derived in
{ref}`sec-bbp-outlier`" (the same text reads well in Jupyter's help and in the notebooks).
autodoc parses docstrings as reStructuredText, where that would print "{ref}" literally, so
this hook rewrites ``{role}`target``` to ``:role:`target``` before parsing; the references
then become links (and broken labels fail the nitpicky build).

A "Derived in ..." paragraph written at the end of a docstring, after a numpy section such as
"Parameters", is moved up under the summary before napoleon runs (napoleon would otherwise
read it as one more parameter).

It also escapes ``|`` in running text (norms and absolute values written in plain text,
e.g. "|overlap| > 0.5" or "||E||"), which reStructuredText would read as substitution
references. Text inside backticks, directive bodies (``.. math::``), literal blocks and
doctest lines are left alone.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r"\{([a-z][a-z0-9:_-]*)\}`")
_LITERAL = re.compile(r"(``.*?``|`[^`]*`)")
_LITERAL_DIRECTIVE = re.compile(
    r"\.\. (math|code|code-block|sourcecode|doctest|testcode|testoutput|parsed-literal|"
    r"literalinclude|raw)::"
)


def _escape_bars(line: str) -> str:
    """Escape every ``|`` outside backticks (plain-text norms and absolute values)."""
    parts = _LITERAL.split(line)
    for i in range(0, len(parts), 2):  # even indices: outside backticks
        parts[i] = re.sub(r"(?<!\\)\|", r"\\|", parts[i])
    return "".join(parts)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _process(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    literal_indent: int | None = None  # inside a literal / math / code block
    for i, line in enumerate(lines):
        if "}`" in line:
            line = _ROLE.sub(r":\1:`", line)
        stripped = line.strip()
        if literal_indent is not None:
            if stripped and _indent(line) <= literal_indent:
                literal_indent = None
            else:
                lines[i] = line
                continue
        if "|" in line and not stripped.startswith(("|", "+", ">>>", "...")):
            line = _escape_bars(line)
        if stripped.startswith(".. "):
            if _LITERAL_DIRECTIVE.match(stripped):
                literal_indent = _indent(line)
        elif stripped.endswith("::"):
            literal_indent = _indent(line)
        lines[i] = line


def _is_header(lines: list[str], i: int) -> bool:
    return (
        i + 1 < len(lines)
        and bool(lines[i].strip())
        and not lines[i].startswith(" ")
        and re.fullmatch(r"-{3,}", lines[i + 1].strip() or "x") is not None
    )


def _hoist_derived_in(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Move a "Derived in ..." paragraph written after a numpy section up to the summary.

    napoleon reads everything up to the next section header as part of a section, so a
    closing "Derived in {ref}`...`" line after "Parameters"/"Attributes" would become a
    parameter named "Derived in ...". Runs before napoleon (priority 400).
    """
    first_header = next((i for i in range(len(lines)) if _is_header(lines, i)), None)
    if first_header is None:
        return
    moved: list[str] = []
    i = first_header + 2
    while i < len(lines):
        if lines[i].startswith("Derived in") and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and lines[j].strip() and not _is_header(lines, j):
                j += 1
            moved.extend(lines[i:j])
            del lines[i:j]
            continue
        i += 1
    if not moved:
        return
    while lines and not lines[-1].strip():
        lines.pop()
    summary_end = next((k for k, line in enumerate(lines) if not line.strip()), len(lines))
    lines[summary_end:summary_end] = ["", *moved]


def setup(app: Any) -> dict[str, Any]:
    app.connect("autodoc-process-docstring", _hoist_derived_in, priority=400)
    app.connect("autodoc-process-docstring", _process)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
