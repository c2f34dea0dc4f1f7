"""Session set-up shared by the unit tests and nbval.

* ``FEDLAM_WIDGETS=static``: every :func:`fedlam.widgets.explorer` renders its default
  figure plus one line of text, exactly as in the committed notebook outputs. It is set here,
  at import time, so the kernels that nbval starts later inherit it.
* The matplotlib font cache is built now, in this process: otherwise the first notebook
  kernel may print "Matplotlib is building the font cache" on stderr and that line would
  become a spurious cell output.
* The unit tests draw with the non-interactive Agg backend. ``MPLBACKEND`` is deliberately
  *not* exported: notebook kernels must keep their inline backend so figures are captured.
"""

from __future__ import annotations

import os

os.environ["FEDLAM_WIDGETS"] = "static"

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.font_manager  # noqa: E402,F401  (builds the font cache once)
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every figure a test opened (keeps memory flat and warnings away)."""
    yield
    plt.close("all")
