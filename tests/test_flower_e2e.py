"""End-to-end: the fedlam federation on Flower's Deployment Engine over loopback.

A SuperLink and 3 SuperNodes on 127.0.0.1 (separate processes, --insecure, no runtime
dependency installation) run 2 rounds at N = 64; the result must be bit-identical to
run_federation with the same seeds (float64 uploads). A second run kills a SuperNode mid-run:
the federation finishes with the remaining ones (min-clients = 2). After each test no process
started by it may be alive (checked in /proc and with psutil). Each test prints its time.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

pytest.importorskip("flwr")

from fedlam.flower import config as C
from fedlam.flower import history
from fedlam.flower.deploy import FlowerError, LocalFederation, processes_with_env
from fedlam.flower.local import run

N, K, M, R, SEED = 64, 3, 80, 0.8, 11


def _plan(L=3, T=2, **run_cfg):
    rc = {"rounds": T, "seed": SEED, "num-clients": L, "N": N, "archetypes": "random",
          "archetype-seed": 5, "K": K, "precision": "float64", **run_cfg}
    nodes = [C.node_config_for_site(client_index=c, M=M, r=R, archetype_seed=5, K=K, N=N) for c in range(L)]
    return rc, nodes


def _flower_children() -> list:
    import psutil

    names = ("flower-", "flwr-")
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if any(n in cmd for n in names):
            out.append((p.pid, cmd[:80]))
    return out


@pytest.fixture
def no_leftovers(capsys):
    """Fails the test if any Flower process it started is still alive afterwards."""
    feds: list = []
    orig_enter = LocalFederation.__enter__

    def enter(self):
        feds.append(self)
        return orig_enter(self)

    LocalFederation.__enter__ = enter
    t0 = time.monotonic()
    try:
        yield
    finally:
        LocalFederation.__enter__ = orig_enter
    homes = [str(f.home) for f in feds if getattr(f, "home", None) is not None]
    left = [pid for h in homes for pid in processes_with_env("FLWR_HOME", h)]
    assert homes, "no federation was started"
    assert not left, f"processes outlived the test: {left}"
    assert not _flower_children(), _flower_children()
    with capsys.disabled():
        print(f"\n[flower e2e] {os.environ.get('PYTEST_CURRENT_TEST', '').split(' ')[0]}: "
              f"{time.monotonic() - t0:.1f} s", flush=True)


@pytest.mark.slow
def test_loopback_federation_bit_identical(tmp_path, no_leftovers):
    rc, nodes = _plan()
    hist = run(rc, nodes, tmp_path, timeout=600, figures=True, echo=lambda *_: None)
    assert hist["flower"]["status"] == "finished:completed"
    assert [r["answered"] for r in hist["rounds"]] == [[0, 1, 2], [0, 1, 2]]
    cmp = history.compare(hist, history.reference_history(rc, nodes))
    assert cmp["identical"], cmp
    # what crossed the wire: 3 float64 upper triangles up each round; K-hat x N int8 down in round 1
    tri = N * (N + 1) // 2 * 8 + 128
    assert [r["bytes_received"] for r in hist["rounds"]] == [3 * tri, 3 * tri]
    k0 = hist["rounds"][0]["n_patterns"]
    assert hist["rounds"][1]["bytes_sent"] == 3 * (k0 * N + 128)
    assert hist["flower"]["network-traffic"]["inbound-bytes"] >= 2 * 3 * tri
    assert (tmp_path / "history.png").is_file() and (tmp_path / "logs" / "supernode-2.log").is_file()


@pytest.mark.slow
def test_killed_supernode_does_not_stop_the_federation(tmp_path, no_leftovers):
    rc, nodes = _plan(T=4, **{"min-clients": 2, "round-timeout": 30.0, "precision": "float32"})
    hist = run(rc, nodes, tmp_path, timeout=900, kill_node=2, kill_after_round=0, figures=False,
               echo=lambda *_: None)
    assert hist["killed_nodes"] == [2]
    R = hist["rounds"]
    [done] = hist["killed_after_rounds"]  # rounds completed when the launcher saw round 0 and killed
    assert done >= 1 and R[0]["answered"] == [0, 1, 2]
    # the round running at the kill may or may not have node 2's upload, and under load it can
    # lose a survivor's too (seen once in CI, wall time 250 s: node 2's reply object was gone
    # from the SuperLink and node 0's came after round-timeout, so that round was skipped);
    # every round before it ran, and every later round goes on with the two others (after
    # waiting round-timeout for the dead one)
    later = R[done + 1:]
    assert later, "the kill came too late to test anything"
    assert all(not r["skipped"] for r in R[:done])
    assert all(r["answered"] == [0, 1] and not r["skipped"] for r in later)
    assert R[-1]["magnetization"] == [1.0, 1.0, 1.0]


def test_port_clash_is_reported(tmp_path, no_leftovers):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        fed = LocalFederation([], tmp_path / "logs", startup_timeout=60, superlink_port=port)
        with pytest.raises(FlowerError, match="already in use"):
            with fed:
                pass


def test_bad_data_file_fails_before_any_process(tmp_path, capsys):
    import numpy as np

    from fedlam.flower.local import main

    np.save(tmp_path / "bad.npy", np.zeros((4, 10), dtype=np.int8))
    rc = main(["local", "--data", str(tmp_path / "bad.npy"), "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "exactly -1 or +1" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
