"""Re-execute book notebooks in place, exactly as nbval will re-run them.

Usage::

    python scripts/execute_notebooks.py book/chapters/02_dreaming.ipynb ...
    python scripts/execute_notebooks.py --all

Each notebook runs top to bottom on a fresh kernel from the repository root's point of view
(working directory = the notebook's folder, as nbval does), with ``FEDLAM_WIDGETS=static``
(explorers render their default figure) and one BLAS thread (the setting of ``conftest.py``).
Volatile cell metadata (execution timestamps) is removed so that a re-run with unchanged
results leaves the file byte-identical. The file is also written as JupyterLab would save it
after "Run All" (with ``FEDLAM_WIDGETS=static`` and one BLAS thread): consecutive stream outputs
merged into one, as JupyterLab's output area does, and the notebook metadata JupyterLab writes
(``kernelspec`` of ipykernel's ``python3``, ``language_info`` as the kernel reported it; see
``scripts/notebook_headers.py``). So opening a re-executed notebook does not mark it modified,
and a reader's static Run All leaves it unchanged.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = {
    "FEDLAM_WIDGETS": "static",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def strip_volatile(nb) -> None:
    """Drop per-cell execution timestamps; keep everything nbval compares."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)


def merge_streams(nb) -> None:
    """Merge consecutive stream outputs of the same name, as JupyterLab's output area does.

    Texts with carriage returns or backspaces are left alone (JupyterLab rewrites those).
    """
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        merged: list = []
        for out in cell.outputs:
            prev = merged[-1] if merged else None
            if (
                prev is not None
                and out.output_type == "stream"
                and prev.output_type == "stream"
                and prev.name == out.name
                and not any(c in prev.text + out.text for c in "\r\b")
            ):
                prev.text += out.text
            else:
                merged.append(out)
        cell.outputs = merged


def jupyterlab_metadata(nb) -> None:
    """kernelspec as JupyterLab writes it; language_info is what nbclient got from the kernel."""
    import nbformat

    sys.path.insert(0, str(ROOT / "scripts"))
    from notebook_headers import kernel_metadata

    nb.metadata["kernelspec"] = nbformat.from_dict(kernel_metadata()["kernelspec"])


def execute(path: pathlib.Path, timeout: int = 600) -> float:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    strip_volatile(nb)
    merge_streams(nb)
    jupyterlab_metadata(nb)
    nbformat.write(nb, path)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path)
    parser.add_argument("--all", action="store_true", help="every notebook under book/")
    args = parser.parse_args(argv)
    paths = sorted((ROOT / "book").rglob("*.ipynb")) if args.all else args.notebooks
    paths = [p for p in paths if ".ipynb_checkpoints" not in p.parts]
    if not paths:
        parser.error("give notebook paths or --all")
    os.environ.update(ENV)
    for p in paths:
        if not p.is_file():
            parser.error(f"not a file: {p}")
        print(f"{p}: {execute(p.resolve()):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
