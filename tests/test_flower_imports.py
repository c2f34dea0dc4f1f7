"""A Flower site imports only what it needs (issue 20 item 1).

Flower starts a fresh ClientApp process for every message, so every module a site imports is
paid once per site and round. A site's round needs numpy and scipy.linalg; scipy.optimize,
scipy.sparse, scipy.special, scipy.stats (server-side K-hat, matching, Tracy-Widom tables),
matplotlib and scikit-learn must not be imported by the ClientApp.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedlam import controller, rmt
from fedlam.flower import config as C
from fedlam.flower import coordinator, messages, testing

NOT_ON_A_SITE = ("scipy.optimize", "scipy.sparse", "scipy.special", "scipy.stats", "matplotlib", "sklearn")

_PROBE = r"""
import json, pickle, sys
from fedlam.flower.client_app import app          # what flwr-clientapp loads
from fedlam.flower.site import handle
req, node, rc, state = pickle.load(open(sys.argv[1], "rb"))
reply = handle(req, node, rc, state)               # one round of a site whose state was pickled
print(json.dumps({"modules": sorted(sys.modules), "keys": sorted(reply.keys())}))
"""


def test_tracy_widom_constant_is_the_quantile():
    assert controller._TW1_Q999 == pytest.approx(float(rmt.tw1_quantile(0.999)), abs=1e-12)


@pytest.mark.parametrize("controller_name", ["paper", "novelty"])
def test_site_round_in_a_fresh_process_imports_only_what_it_needs(tmp_path, controller_name):
    L, N, K = 3, 64, 3
    nodes = [C.node_config_for_site(client_index=c, M=80, r=0.8, archetype_seed=1, K=K, N=N) for c in range(L)]
    rc = {"rounds": 2, "seed": 0, "num-clients": L, "N": N, "archetypes": "random", "archetype-seed": 1, "K": K,
          "controller": controller_name}
    fakes = [testing.FakeNode(10 + c, cfg) for c, cfg in enumerate(nodes)]
    h = coordinator.serve(testing.FakeGrid(fakes, rc), dict(rc, rounds=1), log=lambda _m: None)
    pats = np.array(h["rounds"][0]["patterns"], dtype=np.int8)
    assert pats.shape[0] > 0  # round 1 runs the controller against a broadcast
    req = messages.round_request(1, L, N, "float32", 0, pats)
    path = tmp_path / "site.pkl"
    path.write_bytes(pickle.dumps((req, nodes[0], rc, fakes[0].state)))
    out = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "upload" in got["keys"]
    loaded = [m for m in got["modules"] if m.split(".")[0] in ("scipy", "matplotlib", "sklearn")
              and any(m == x or m.startswith(x + ".") for x in NOT_ON_A_SITE)]
    assert not loaded, f"a site's ClientApp imported {sorted({'.'.join(m.split('.')[:2]) for m in loaded})}"
    assert "scipy.linalg" in got["modules"]  # the probe is not vacuous: the site did its eigen-work
