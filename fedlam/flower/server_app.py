"""The fedlam ServerApp (Flower Message API): ``fedlam.flower.server_app:app``.

Runs :func:`fedlam.flower.coordinator.serve` with the run's configuration. Imports Flower, so
import it only where Flower is installed (``pip install 'fedlam[flower]'``).
"""

from __future__ import annotations

from logging import INFO

from flwr.app import Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from .coordinator import serve

__all__ = ["app"]

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the federation of ``context.run_config`` over the connected SuperNodes."""
    serve(grid, dict(context.run_config), log=lambda msg: log(INFO, "fedlam: %s", msg))
