"""Three rows of the scenario matrix (issue 18 item 4) on Flower: the plan rebuilds the row in
process, and the deployment gives the same history (``_scenarios.FLOWER_ROWS``)."""

from __future__ import annotations

import numpy as np
import pytest
from _scenarios import FLOWER_ROWS, ROWS, T_FLOWER, build_row, flower_plan, label

from fedlam import federation


@pytest.mark.parametrize("i", FLOWER_ROWS, ids=label)
def test_flower_plan_is_the_in_process_row(i):
    """The Flower plan of a row rebuilds, in process, the row's federation bit for bit."""
    from fedlam.flower import history

    rc, nodes = flower_plan(ROWS[i], 100 + i, 6)
    ref = history.reference_history(rc, nodes)
    xi, specs, _, kw = build_row(ROWS[i], T=6)
    direct = federation.run_federation(xi, specs, 6, 100 + i, **kw)
    assert np.array_equal(ref.k_hat, direct.k_hat)
    assert all(np.array_equal(a, b) for a, b in zip(ref.patterns, direct.patterns, strict=True))
    assert np.array_equal(ref.weights, direct.weights, equal_nan=True)


@pytest.mark.slow
@pytest.mark.parametrize("i", FLOWER_ROWS, ids=label)
def test_row_on_flower(i, tmp_path):
    """The row's first rounds on Flower (SuperLink and SuperNodes on 127.0.0.1) give the
    in-process history bit for bit; no Flower process outlives the run."""
    pytest.importorskip("flwr")
    import psutil

    from fedlam.flower import history
    from fedlam.flower.local import run

    rc, nodes = flower_plan(ROWS[i], 100 + i, T_FLOWER)
    hist = run(rc, nodes, tmp_path, timeout=900, figures=False, echo=lambda *_: None)
    assert hist["flower"]["status"] == "finished:completed"
    cmp = history.compare(hist, history.reference_history(rc, nodes))
    assert cmp["identical"], cmp
    left = [p.pid for p in psutil.Process().children(recursive=True)
            if any(n in " ".join(p.cmdline()) for n in ("flower-", "flwr-"))]
    assert not left, left
