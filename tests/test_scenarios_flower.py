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


def _private_groups_plan(T: int, groups: int | str = 2):
    """Row 1's federation (random archetypes, drift, a noise client) with what a private, defended
    deployment combines: example-level DP at 4 x the mean's epsilon threshold, the novelty weight
    rule, half the clients asked with 20 % dropouts, and the support defence voting in two groups
    (``defense_params={"groups": 2}``, or ``groups`` given); the Flower plan and the in-process
    keywords."""
    import json

    from _scenarios import DELTA, K, L, M, N_RANDOM, R

    from fedlam import privacy
    from fedlam.participation import Participation

    row = dict(ROWS[1], weight="novelty", privacy="none", participation="half-asked-20%-dropout")
    xi, specs, _, kw = build_row(row, T=T)
    pi_min = float(np.linalg.eigvalsh(xi.astype(float) @ xi.T.astype(float) / (K * N_RANDOM)).min())
    eps = 4 * privacy.epsilon_threshold(R, pi_min, N_RANDOM, M, DELTA, L=L)
    rc, nodes = flower_plan(row, 101, T)
    rc["server-options"] = json.dumps({"defense": "support", "defense_params": {"groups": groups}})
    rc["client-options"] = json.dumps({"privacy": {"factory": "fedlam.privacy.GaussianMechanism",
                                                   "epsilon": eps, "delta": DELTA}})
    kw.update(defense="support", defense_params={"groups": groups},
              privacy=privacy.GaussianMechanism(epsilon=eps, delta=DELTA))
    assert kw["participation"] == Participation(fraction=0.5, min_clients=2, dropout=0.2)
    return xi, specs, kw, rc, nodes


@pytest.mark.parametrize("groups", [2, "leave-out"])
def test_flower_plan_with_privacy_and_voting_groups(groups):
    """The plan of a private federation whose server votes in groups (or with leave-out voters)
    rebuilds, in process, the run_federation history bit for bit (the groups reach the server
    through its options)."""
    from fedlam.flower import history

    xi, specs, kw, rc, nodes = _private_groups_plan(6, groups)
    ref = history.reference_history(rc, nodes)
    direct = federation.run_federation(xi, specs, 6, 101, **kw)
    assert np.array_equal(ref.k_hat, direct.k_hat)
    assert all(np.array_equal(a, b) for a, b in zip(ref.patterns, direct.patterns, strict=True))
    assert np.array_equal(ref.weights, direct.weights, equal_nan=True)


@pytest.mark.slow
@pytest.mark.parametrize("groups", [2, "leave-out"])
def test_private_groups_on_flower(tmp_path, groups):
    """Its first rounds on Flower (127.0.0.1) give the in-process history, with groups and with
    leave-out voters (whose server also refreshes the stored patterns from the voters)."""
    pytest.importorskip("flwr")
    from fedlam.flower import history
    from fedlam.flower.local import run

    _, _, _, rc, nodes = _private_groups_plan(3, groups)
    hist = run(rc, nodes, tmp_path, timeout=900, figures=False, echo=lambda *_: None)
    assert hist["flower"]["status"] == "finished:completed"
    cmp = history.compare(hist, history.reference_history(rc, nodes))
    assert cmp["identical"], cmp
