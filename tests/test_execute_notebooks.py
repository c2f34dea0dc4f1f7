"""scripts/execute_notebooks.py writes notebooks as JupyterLab saves them after Run All."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import execute_notebooks as ex  # noqa: E402
import notebook_headers as nh  # noqa: E402


def _stream(name: str, text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_output("stream", name=name, text=text)


def test_consecutive_streams_are_merged_like_jupyterlab() -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    image = nbformat.v4.new_output("display_data", data={"text/plain": "<Figure>"})
    cell.outputs = [
        _stream("stdout", "a\n"), _stream("stdout", "b\n"),  # merged
        _stream("stderr", "e\n"),                            # another stream: kept apart
        _stream("stdout", "c\n"), image, _stream("stdout", "d\n"),  # not consecutive
        _stream("stdout", "p\r"), _stream("stdout", "q\n"),  # carriage return: left alone
    ]  # fmt: skip
    nb.cells = [cell, nbformat.v4.new_markdown_cell("text")]
    ex.merge_streams(nb)
    got = [(o.output_type, o.get("name"), o.get("text")) for o in nb.cells[0].outputs]
    assert got == [
        ("stream", "stdout", "a\nb\n"),
        ("stream", "stderr", "e\n"),
        ("stream", "stdout", "c\n"),
        ("display_data", None, None),
        ("stream", "stdout", "d\n"),
        ("stream", "stdout", "p\r"),
        ("stream", "stdout", "q\n"),
    ]


def test_execution_timestamps_are_dropped() -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.metadata["execution"] = {"iopub.execute_input": "2026-01-01T00:00:00Z"}
    cell.metadata["tags"] = ["keep"]
    nb.cells = [cell]
    ex.strip_volatile(nb)
    assert nb.cells[0].metadata == {"tags": ["keep"]}


def test_kernelspec_is_jupyterlabs() -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    ex.jupyterlab_metadata(nb)
    assert nb.metadata["kernelspec"] == nh.kernel_metadata()["kernelspec"]
