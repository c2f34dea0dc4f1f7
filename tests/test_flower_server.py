"""The ServerApp's round loop (fedlam.flower.coordinator) driven by a fake Grid, in-process.

The sites answer through fedlam.flower.site.handle exactly as a SuperNode's ClientApp does
(same records, same pickled client state), so these tests check the protocol, the sampling,
timeouts and minimum counts, and the equality with run_federation without starting processes.
"""

from __future__ import annotations

import json
from unittest import mock

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedlam.flower import config as C
from fedlam.flower import coordinator, history, testing

L, N, K, T, M, R = 3, 48, 3, 3, 60, 0.8


def _setup(seed=3, rounds=T, L=L, mixture="uniform", **run):
    rc = {"rounds": rounds, "seed": seed, "num-clients": L, "N": N, "archetypes": "random",
          "archetype-seed": 7, "K": K, **run}
    nodes = [C.node_config_for_site(client_index=c, M=M, r=R, archetype_seed=7, K=K, N=N, mixture=mixture)
             for c in range(L)]
    return rc, nodes


def _serve(rc, nodes, node_kw=None):
    node_kw = node_kw or {}
    fakes = [testing.FakeNode(1000 + 7 * c, cfg, **node_kw.get(c, {})) for c, cfg in enumerate(nodes)]
    logs = []
    h = coordinator.serve(testing.FakeGrid(fakes, rc), rc, log=logs.append)
    return h, fakes, logs


@pytest.mark.parametrize("seed, mixture", [(3, "uniform"), (4, "class"), (5, "drift")])
def test_bit_identical_to_run_federation_float64(seed, mixture):
    rc, nodes = _setup(seed=seed, mixture=mixture, precision="float64", rounds=4)
    h, _, _ = _serve(rc, nodes)
    cmp = history.compare(h, history.reference_history(rc, nodes))
    assert cmp["identical"], cmp


def test_float32_uploads_measured_against_float64():
    """float32 rounding (relative 2**-24 per entry) is far below the spectral gaps here: the same
    K-hat and magnetizations as the exact run (a regression check of the default precision)."""
    rc64, nodes = _setup(precision="float64")
    rc32, _ = _setup(precision="float32")
    a64 = history.arrays(_serve(rc64, nodes)[0])
    a32 = history.arrays(_serve(rc32, nodes)[0])
    assert np.array_equal(a64["k_hat"], a32["k_hat"])
    assert np.array_equal(a64["magnetization"], a32["magnetization"])
    assert np.all(a32["bytes_received"] == L * (N * (N + 1) // 2 * 4 + 128))  # .npy header 128 bytes


def test_partial_participation_matches_model():
    """fraction 2/3 of 3 sites: 2 asked each round, drawn from the participation stream."""
    from fedlam.participation import Participation

    rc, nodes = _setup(fraction=2 / 3, rounds=4, precision="float64")
    h, fakes, _ = _serve(rc, nodes)
    rng = np.random.default_rng(rc["seed"]).spawn(L + 2)[L + 1]
    p = Participation(fraction=2 / 3)
    for t, r in enumerate(h["rounds"]):
        s = p.sample_round(t, range(L), rng)
        assert r["asked"] == list(s.asked) == r["answered"] and len(s.asked) == 2
        assert all(np.isnan(r["weights"][c]) for c in range(L) if c not in s.asked)
    # a site never asked in a round drew nothing: rounds handled = rounds asked
    for c, f in enumerate(fakes):
        assert [t for t in f.handled if t is not None] == [r["t"] for r in h["rounds"] if c in r["asked"]]


@pytest.mark.parametrize("run", [{"fraction": 2 / 3}, {"fraction": 2 / 3, "min-clients": 2}])
def test_partial_participation_bit_identical_to_run_federation(run):
    """run_federation(participation=...) is the in-process model of the deployment: same
    sampling stream, same clients asked, same uploads used, same memory."""
    rc, nodes = _setup(rounds=5, precision="float64", **run)
    h, _, _ = _serve(rc, nodes)
    ref = history.reference_history(rc, nodes)
    cmp = history.compare(h, ref)
    assert cmp["identical"], cmp
    assert [list(a) for a in ref.answered] == [r["answered"] for r in h["rounds"]]
    assert ref.params["participation"]["fraction"] == pytest.approx(2 / 3)


def test_silent_site_is_dropped_after_timeout_and_run_goes_on():
    rc, nodes = _setup(rounds=4, **{"round-timeout": 0.3, "min-clients": 2})
    h, _, _ = _serve(rc, nodes, {2: {"silent_from_round": 1}})
    assert [r["answered"] for r in h["rounds"]] == [[0, 1, 2], [0, 1], [0, 1], [0, 1]]
    assert [r["lost"] for r in h["rounds"]] == [[], [2], [2], [2]]
    assert all(not r["skipped"] for r in h["rounds"]) and h["completed"]


def test_round_skipped_below_minimum_and_broadcast_kept():
    rc, nodes = _setup(rounds=3, **{"round-timeout": 0.2, "min-clients": 3})
    h, _, logs = _serve(rc, nodes, {1: {"fail_on_round": 1}})
    r0, r1, r2 = h["rounds"]
    assert r1["skipped"] and r1["k_hat"] is None and r1["patterns"] == r0["patterns"]
    # the round used no weight (as run_federation records it); the two reports are kept apart
    assert all(w is None or w != w for w in r1["weights"])
    assert sum(w is not None and w == w for w in r1["discarded_weights"]) == len(r1["answered"]) == 2
    assert not r2["skipped"]
    assert any("simulated failure" in m for m in logs) and any("skipped" in m for m in logs)


def test_late_joiner_enters_when_it_connects():
    rc, nodes = _setup(rounds=8, **{"min-clients": 2, "wait-timeout": 0.5})
    # node 2 becomes visible from the 9th get_node_ids() call: after the server stopped waiting
    # (at most 0.5 s / 0.2 s + 1 = 4 calls) and round 0 started without it
    h, _, _ = _serve(rc, nodes, {2: {"join_call": 8}})
    assert h["rounds"][0]["available"] == [0, 1]
    joined = [r["t"] for r in h["rounds"] if 2 in r["answered"]]
    assert joined and joined == list(range(joined[0], 8))
    # its first upload is a round-0-style local operator blended against the current broadcast
    assert h["rounds"][joined[0]]["weights"][2] == h["rounds"][joined[0]]["weights"][2]  # defined


def test_too_few_sites_fail_clearly():
    rc, nodes = _setup(**{"min-clients": 4, "wait-timeout": 0.3})
    with pytest.raises(coordinator.FederationFailed, match="min-clients = 4"):
        _serve(rc, nodes)


def test_site_with_other_N_or_taken_index_is_not_admitted():
    rc, nodes = _setup(rounds=1, **{"num-clients": 2, "wait-timeout": 0.3})
    other = C.node_config_for_site(client_index=0, M=M, r=R, archetype_seed=7, K=K, N=N, mixture="uniform")
    bigger = C.node_config_for_site(client_index=1, M=M, r=R, archetype_seed=7, K=K, N=N + 2)
    h, _, logs = _serve(rc, [nodes[0], nodes[1], other, bigger])
    assert h["rounds"][0]["answered"] == [0, 1]
    assert any("already taken" in m for m in logs) and any(f"N = {N + 2}" in m for m in logs)


def test_low_rank_uploads_cost_and_effect():
    rc, nodes = _setup(rank=6, precision="float32", rounds=2)
    h, _, _ = _serve(rc, nodes)
    r = h["rounds"][-1]
    assert r["bytes_received"] == L * ((N * 6 * 4 + 128) + (6 * 8 + 128))
    assert r["k_hat"] >= 0  # the server copes with rank-deficient uploads (no crash)


def test_site_rejects_unknown_operation():
    from flwr.app import ConfigRecord, RecordDict

    from fedlam.flower.site import handle

    rc, nodes = _setup()
    with pytest.raises(ValueError, match="unknown fedlam operation"):
        handle(RecordDict({"fedlam": ConfigRecord({"op": "steal"})}), nodes[0], rc, RecordDict())


def test_privacy_option_passes_through_bit_identical():
    """client-options {"privacy": {"factory": ...}} builds the same mechanism as run_federation(privacy=)."""
    import json

    from fedlam import data, federation, privacy

    priv = {"factory": "fedlam.privacy.GaussianMechanism", "epsilon": 8.0, "delta": 1e-5, "rounds": 3}
    rc, nodes = _setup(precision="float64", **{"client-options": json.dumps({"privacy": priv})})
    h, _, _ = _serve(rc, nodes)
    xi = data.random_archetypes(K, N, 7)
    specs = [federation.ClientSpec(r=R, M=M, mixture=np.full((T, K), 1 / K)) for _ in range(L)]
    ref = federation.run_federation(xi, specs, T, rc["seed"],
                                    privacy=privacy.GaussianMechanism(epsilon=8.0, delta=1e-5, rounds=3))
    assert history.compare(h, ref)["identical"]
    assert all(r["k_hat"] is not None for r in h["rounds"])


def test_factory_must_live_in_fedlam():
    from fedlam.flower.site import instantiate

    with pytest.raises(ValueError, match="inside fedlam"):
        instantiate({"factory": "os.system", "command": "true"})
    with pytest.raises(ValueError, match="cannot be imported"):
        instantiate({"factory": "fedlam.nothing.Here"})
    assert instantiate({"a": [1, {"b": 2}]}) == {"a": [1, {"b": 2}]}


def test_file_sources_run(tmp_path):
    """Sites with their own .npz files (no archetypes anywhere): the run completes and finds them."""
    from fedlam import data

    xi = data.random_archetypes(K, N, 1)
    nodes = []
    for c in range(L):
        ex, lab = data.sample_examples(xi, 300, 0.8, np.full(K, 1 / K), np.random.default_rng(c))
        np.savez(tmp_path / f"site{c}.npz", examples=ex, labels=lab)
        nodes.append(C.node_config_for_site(client_index=c, M=M, path=str(tmp_path / f"site{c}.npz")))
    rc = {"rounds": 3, "seed": 0, "num-clients": L, "N": N}
    h, _, _ = _serve(rc, nodes)
    assert "magnetization" not in h["rounds"][-1]  # the server knows no archetypes
    from fedlam import metrics

    pats = np.array(h["rounds"][-1]["patterns"], dtype=np.int8)
    assert h["rounds"][-1]["k_hat"] == K and metrics.magnetization(pats, xi).min() > 0.9


@pytest.mark.parametrize("defense", ["support", "median"])
def test_defense_option_passes_through_bit_identical(defense):
    """server-options {"defense": ...} runs the same robust server as run_federation(defense=),
    including the broadcast the support test removes from each upload."""
    import json

    from fedlam import data, federation

    rc, nodes = _setup(precision="float64", rounds=3, **{"server-options": json.dumps({"defense": defense})})
    h, _, _ = _serve(rc, nodes)
    xi = data.random_archetypes(K, N, 7)
    specs = [federation.ClientSpec(r=R, M=M, mixture=np.full((3, K), 1 / K)) for _ in range(L)]
    ref = federation.run_federation(xi, specs, 3, rc["seed"], defense=defense)
    assert history.compare(h, ref)["identical"]
    assert [r["k_hat"] for r in h["rounds"]] == ref.k_hat.tolist()


@pytest.mark.parametrize("behaviours, defense", [
    ({3: ("poison", {"seed": 2}), 4: ("flip", {})}, None),
    ({3: ("hidden", {"seed": 3, "strength": 0.3}), 4: ("targeted", {"seed": 5, "flip_fraction": 0.1,
                                                                     "hide": True})}, "support"),
])
def test_site_behaviours_in_node_config_bit_identical(behaviours, defense):
    """A site's behaviour is part of its node config: an adversarial federation on the (fake)
    deployment gives the same history as run_federation with ClientSpec(behaviour=...)."""
    import json

    from fedlam import attacks, data, federation

    L5, T3 = 5, 3
    nodes = [C.node_config_for_site(client_index=c, M=M, r=R, archetype_seed=7, K=K, N=N,
                                    behaviour=behaviours.get(c, ("honest", {}))[0],
                                    behaviour_params=behaviours.get(c, ("honest", {}))[1])
             for c in range(L5)]
    run = {"server-options": json.dumps({"defense": defense})} if defense else {}
    rc, _ = _setup(rounds=T3, L=L5, precision="float64", **run)
    h, _, _ = _serve(rc, nodes)
    xi = data.random_archetypes(K, N, 7)
    specs = [federation.ClientSpec(r=R, M=M, mixture=np.full((T3, K), 1 / K),
                                   behaviour=attacks.make_behaviour(*[behaviours[c][0]], **behaviours[c][1])
                                   if c in behaviours else None) for c in range(L5)]
    ref = federation.run_federation(xi, specs, T3, rc["seed"], defense=defense)
    cmp = history.compare(h, ref)
    assert cmp["identical"], cmp
    assert history.compare(h, history.reference_history(rc, nodes))["identical"]
    # the behaviours acted: an all-honest federation with the same seeds differs
    honest = [federation.ClientSpec(r=R, M=M, mixture=np.full((T3, K), 1 / K)) for _ in range(L5)]
    ref_honest = federation.run_federation(xi, honest, T3, rc["seed"], defense=defense)
    assert not np.array_equal(history.arrays(h)["weights"], np.asarray(ref_honest.weights), equal_nan=True)


def test_node_config_behaviour_rejected_clearly():
    with pytest.raises(ValueError, match="behaviour must be one of"):
        C.node_config_for_site(client_index=0, M=M, r=R, archetype_seed=7, K=K, N=N, behaviour="evil")
    with pytest.raises(TypeError, match=r"behaviour-params .* 'hidden'"):
        C.node_config_for_site(client_index=0, M=M, r=R, archetype_seed=7, K=K, N=N, behaviour="hidden",
                               behaviour_params={"bogus": 1})
    with pytest.raises(ValueError, match="flip_fraction"):
        C.node_config_for_site(client_index=0, M=M, r=R, archetype_seed=7, K=K, N=N, behaviour="targeted",
                               behaviour_params={"flip_fraction": 0.7})


def test_round_without_any_upload_fails_the_run_unless_skipping_is_allowed(tmp_path):
    """Every asked site failing a round is a failed federation (issue 22 row 1), reported with the
    sites' reason and recorded in history.json; skip-empty-rounds = true skips the round instead."""
    rc, nodes = _setup(rounds=3, **{"round-timeout": 0.2, "out-dir": str(tmp_path)})
    fail = {c: {"fail_on_round": 1} for c in range(L)}
    waiting = tmp_path / coordinator.WAITING_FILE
    seen = []
    exchange = coordinator._exchange

    def recording_exchange(grid, contents, *a, **k):
        if k.get("errors") is not None:  # a round's exchange (not a hello)
            seen.append(json.loads(waiting.read_text()))
        return exchange(grid, contents, *a, **k)

    with mock.patch.object(coordinator, "_exchange", recording_exchange), \
            pytest.raises(coordinator.FederationFailed, match=r"round 1 got no upload.*site 0: simulated failure"):
        _serve(rc, nodes, fail)
    # written while a round waits (the round and the clients asked), gone once it has its answers
    assert [(w["t"], w["asked"], w["round_timeout"]) for w in seen] == [(0, list(range(L)), 0.2),
                                                                        (1, list(range(L)), 0.2)]
    assert not waiting.exists()
    saved = history.load(tmp_path)
    assert "round 1 got no upload" in saved["failed"] and len(saved["rounds"]) == 2
    assert saved["rounds"][1]["errors"] == {str(c): "simulated failure" for c in range(L)}
    h, _, _ = _serve(dict(rc, **{"skip-empty-rounds": True}), nodes, fail)
    assert [r["skipped"] for r in h["rounds"]] == [False, True, False] and "failed" not in h
    assert not waiting.exists()


@pytest.mark.parametrize("server_kw, passed", [({}, True), ({"defense": "support"}, True),
                                               ({"acceptance": "paper"}, False)])
def test_server_step_passes_the_broadcast_to_every_server_that_reads_uploads(server_kw, passed):
    """The fresh acceptance (the default without a defence) certifies against each upload minus
    the broadcast it blended, as a defence does: the step must hand it the last broadcast (it
    once did so only for a defence, and the default server then took the echo of its own memory
    for fresh evidence)."""
    from unittest import mock

    from fedlam import federation
    from fedlam.data import random_archetypes
    from fedlam.operators import hebbian

    xi = random_archetypes(K, N, 7)
    ops = [hebbian(np.repeat(xi, 20, axis=0)) for _ in range(L)]
    scal = [{"batch-size": 60, "weight": 0.5, "noise-var": 0.36, "dp-sigma": 0.0} for _ in range(L)]
    server = federation.Server(**server_kw)
    seen = {}
    real = server.round

    def spy(uploads, rng, **kw):
        seen.update(kw)
        return real(uploads, rng, **kw)

    with mock.patch.object(server, "round", spy):
        coordinator._server_step(server, ops, scal, np.random.default_rng(0), K, xi.astype(np.int8))
    assert ("broadcast" in seen) is passed
    if passed:
        np.testing.assert_array_equal(seen["broadcast"], federation.Server.broadcast(xi.astype(np.int8)))
