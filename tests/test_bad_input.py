"""Bad input through the Python API: the rows of issue 22, one parametrised test per row.

Every call runs in a forked child with a time and an address-space cap (``_capped``), so a
call that would hang or allocate gigabytes fails its test instead of the run. A refused
call must raise ValueError or TypeError naming the argument; a valid edge case must give the
correct result. Notation as in the issue: ``R`` a non-symmetric N(0, 1) 60 x 60 matrix,
``J``/``J2`` Hebbian operators of 240 examples, ``spec = spectrum(J)``, ``ops = [J, J2, J, J2, J]``.
(Rows 1-3 are the Flower command line, tested with it.)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from _capped import assert_refused, run_capped

from fedlam import attacks, controller, data, dreaming, khat, lam, operators, participation, robust, spectral
from fedlam.federation import Client, ClientSpec, run_federation
from fedlam.participation import Participation
from fedlam.protocol import ArraySource, Upload

N, M, R_QUAL = 60, 240, 0.8
XI = data.random_archetypes(3, N, 0)
PI = np.ones(3) / 3
ETA, _ = data.sample_examples(XI, M, R_QUAL, PI, 1)
ETA2, _ = data.sample_examples(XI, M, R_QUAL, PI, 2)
J = operators.hebbian(ETA)
J2 = operators.hebbian(ETA2)
R = np.random.default_rng(3).standard_normal((N, N))
SPEC = spectral.spectrum(J)
SPEC2 = spectral.spectrum(J2)
OPS = [J, J2, J, J2, J]
K_TRUE = spectral.estimate_k(J).k_hat
R_HAT = controller.estimate_quality(J, M=M)


def test_fixture_is_what_the_rows_assume():
    assert K_TRUE == 3
    assert abs(R_HAT - R_QUAL) < 0.05


# ----------------------------------------------------------------------------------------
# row 4: the symmetry tolerance is relative to the matrix's scale
@pytest.mark.parametrize("call", [
    lambda: spectral.spectrum(R * 1e-12),
    lambda: lam.factorize(R * 1e-12, 0),
    lambda: spectral.spectrum(R * 1e-3),
], ids=["spectrum", "factorize", "spectrum-1e-3"])
def test_row04_symmetry_tolerance_is_relative(call):
    assert_refused(call, "J", "symmetric")


def test_row04_scaled_symmetric_operator_still_accepted():
    for s in (1e-12, 1e12):
        assert spectral.estimate_k(J * s).k_hat == K_TRUE


# ----------------------------------------------------------------------------------------
# rows 5-6: bulk moments and the quality estimate do not under/overflow
@pytest.mark.parametrize("scale", [1e-150, 1e-160, 1e-250, 1e160, 1e250])
def test_row05_estimate_k_is_scale_free(scale):
    out = run_capped(lambda: spectral.estimate_k(J * scale).k_hat)
    assert out.kind == "ok" and out.value == str(K_TRUE), str(out)


@pytest.mark.parametrize("scale", [1e-150, 1e160])
def test_row05_k_hat_tw_is_scale_free(scale):
    out = run_capped(lambda: spectral.estimate_k(J * scale, "tw").k_hat)
    assert out.kind == "ok" and out.value == str(spectral.estimate_k(J, "tw").k_hat), str(out)


@pytest.mark.parametrize("scale", [1e12, 1e-12, 2.0])
def test_row06_estimate_quality_of_a_scaled_operator(scale):
    # r_hat assumes tr B = 1 (the batch operator eta^T eta / (N M)); another scale is refused
    assert_refused(lambda: controller.estimate_quality(J * scale, M=M), "B_or_spectrum", "tr")


# ----------------------------------------------------------------------------------------
# row 7: max_k is capped (or refused) near N
def test_row07_max_k_near_n():
    out = run_capped(lambda: khat.k_hat_mp(SPEC, max_k=10**9).k_hat)
    if out.kind == "ok":
        assert out.value == str(K_TRUE), str(out)
    else:
        assert_refused(lambda: khat.k_hat_mp(SPEC, max_k=10**9), "max_k")


# ----------------------------------------------------------------------------------------
# row 8: a hand-built Spectrum is validated
def _spec(**changes):
    base = {"values": SPEC.values, "vectors": SPEC.vectors, "n": SPEC.n, "trace": SPEC.trace,
            "sum_sq": SPEC.sum_sq}
    base.update(changes)
    return spectral.Spectrum(**base)


@pytest.mark.parametrize("changes, name", [
    ({"values": np.where(np.arange(N) == 0, np.nan, SPEC.values)}, "values"),
    ({"values": SPEC.values[::-1].copy()}, "values"),
    ({"vectors": SPEC.vectors[:50]}, "vectors"),
    ({"vectors": SPEC.vectors[:, :10]}, "vectors"),
    ({"values": SPEC.values.astype(np.int64)}, "values"),
    ({"values": list(SPEC.values)}, "values"),
    ({"n": 0}, "n"),
    ({"n": 60.0}, "n"),
    ({"trace": float("nan")}, "trace"),
    ({"sum_sq": -1.0}, "sum_sq"),
], ids=["nan", "ascending", "vectors-N", "vectors-k", "int-values", "list", "n0", "n-float",
        "trace-nan", "sum_sq-neg"])
def test_row08_spectrum_post_init(changes, name):
    assert_refused(lambda: _spec(**changes), name)


def test_row08_partial_spectrum_still_valid():
    top = spectral.top_spectrum(J, 5)
    assert len(top) == 5 and not top.complete


# ----------------------------------------------------------------------------------------
# row 9: k_hat_shuffle checks its spectrum= against J
@pytest.mark.parametrize("spec, name", [(SPEC2, "spectrum"), ("spec", "spectrum")], ids=["other", "str"])
def test_row09_k_hat_shuffle_spectrum_of_another_matrix(spec, name):
    assert_refused(lambda: khat.k_hat_shuffle(J, 0, n_null=3, spectrum=spec), name)


# ----------------------------------------------------------------------------------------
# row 10: an empty component list is refused
def test_row10_k_hat_components_empty():
    assert_refused(lambda: khat.k_hat_components(SPEC, []), "components")


# ----------------------------------------------------------------------------------------
# row 11: min_clients above the number of clients
def test_row11_min_clients_above_L():
    specs = [ClientSpec(r=0.8, M=100, mixture=np.tile(PI, (2, 1)))] * 2
    assert_refused(lambda: run_federation(XI, specs, 2, 0, participation=Participation(min_clients=5)),
                   "min_clients", "5", "2")


# ----------------------------------------------------------------------------------------
# row 12: an Upload's operator is finite and symmetric
J_NAN = J.copy()
J_NAN[0, 1] = J_NAN[1, 0] = np.nan


@pytest.mark.parametrize("op", [J_NAN, R * 0.01, J * np.inf], ids=["nan", "nonsymmetric", "inf"])
def test_row12_upload_operator(op):
    assert_refused(lambda: Upload(op, 240, 1.0), "operator")


# ----------------------------------------------------------------------------------------
# row 13: the public helpers of fedlam.robust check their arguments
UP = Upload(J, 240, 1.0, 0.36)
COMP = khat.Component(0.36 / N, N / M)


@pytest.mark.parametrize("call, name", [
    (lambda: robust.entrywise_median([]), "ops"),
    (lambda: robust.entrywise_median([J, J2[:50, :50]]), "ops"),
    (lambda: robust.entrywise_median([J, "x"]), "ops"),
    (lambda: robust.entrywise_trimmed_mean(OPS, 0.9), "trim"),
    (lambda: robust.entrywise_trimmed_mean(OPS, -0.5), "trim"),
    (lambda: robust.entrywise_trimmed_mean(OPS, float("nan")), "trim"),
    (lambda: robust.entrywise_trimmed_mean([], 0.2), "ops"),
    (lambda: robust.krum_scores(OPS, -5), "f"),
    (lambda: robust.krum_scores(OPS, 1.5), "f"),
    (lambda: robust.krum_scores([J, J2 * np.nan, J, J2, J], 1), "ops"),
    (lambda: robust.krum_select(OPS, 1, -1), "m"),
    (lambda: robust.krum_select(OPS, 1, 0), "m"),
    (lambda: robust.krum_select(OPS, 1, 5), "m"),
    (lambda: robust.robust_noise_var([COMP], -1.0, 1.2), "noise_var"),
    (lambda: robust.robust_noise_var([COMP], 0.0, float("nan")), "efficiency"),
    (lambda: robust.robust_noise_var("abc", 0.0, 1.2), "components"),
    (lambda: robust.r_transform("abc", [COMP]), "G"),
    (lambda: robust.r_transform(float("nan"), [COMP]), "G"),
    (lambda: robust.upload_threshold(UP, 0), "N"),
    (lambda: robust.upload_threshold(UP, N, float("nan")), "n_sigma"),
    (lambda: robust.fresh_operator(UP, np.ones((50, 50))), "broadcast"),
    (lambda: robust.fresh_operator("x", None), "upload"),
    (lambda: robust.mean_aggregate([J, J2], np.array([0.5])), "weights"),
    (lambda: robust.mean_aggregate([J, J2], np.array([0.5, np.nan])), "weights"),
    (lambda: robust.mean_aggregate([], np.array([])), "ops"),
    (lambda: robust.gaussian_efficiency(5, "bogus"), "defense"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_row13_robust_helpers(call, name):
    assert_refused(call, name)


def test_row13_valid_helpers_unchanged():
    np.testing.assert_array_equal(robust.entrywise_median(OPS), np.median(np.stack(OPS), axis=0))
    np.testing.assert_allclose(robust.mean_aggregate([J, J2], np.array([0.5, 0.5])), (J + J2) / 2)
    assert list(robust.krum_select(OPS, 1, 2)) == [0, 2]


# ----------------------------------------------------------------------------------------
# row 14: memory guards count the temporaries and refuse before allocating
BIG = 10**6


@pytest.mark.parametrize("call, name", [
    (lambda: operators.hebbian(np.ones((2, BIG), np.int8)), "examples"),
    (lambda: operators.pattern_operator(np.ones((2, BIG), np.int8)), "patterns"),
    (lambda: operators.expected_operator(np.ones((2, BIG), np.int8), 0.8, np.array([0.5, 0.5])), "archetypes"),
    (lambda: data.random_archetypes(3, 10**9, 0), "N"),
], ids=["hebbian", "pattern_operator", "expected_operator", "random_archetypes"])
def test_row14_memory_guard(call, name):
    out = assert_refused(call, name, timeout=10)
    assert "GiB" in out.message


# ----------------------------------------------------------------------------------------
# rows 15-16: caps on counts; the hypergeometric through lgamma
@pytest.mark.parametrize("call, name", [
    (lambda: lam.factorize(J, 0, n_seeds=10**9, search="lam"), "n_seeds"),
    (lambda: run_federation(XI, [ClientSpec(r=0.8, M=100, mixture=np.tile(PI, (1, 1)))], 1, 0,
                            lam_params={"n_seeds": 10**9, "search": "lam"}), "n_seeds"),
    (lambda: lam.seed_mixtures(SPEC.vectors[:, :3], 10**9, 0), "n_seeds"),
    (lambda: khat.k_hat_shuffle(J, 0, n_null=10**9), "n_null"),
    (lambda: robust.gaussian_efficiency(10**5), "L"),
    (lambda: attacks.fake_pattern(0, 10**12), "N"),
    (lambda: dreaming.dream_eigenvalues(0.5, 2.0, steps=10**12), "steps"),
    (lambda: dreaming.dream_literal(J, 0.01, 10**9), "steps"),
    (lambda: data.random_supports(10**9, 3, 2, 0), "L"),
], ids=["factorize", "run_federation", "seed_mixtures", "k_hat_shuffle", "gaussian_efficiency",
        "fake_pattern", "dream_eigenvalues", "dream_literal", "random_supports"])
def test_row15_16_counts_are_capped(call, name):
    assert_refused(call, name, timeout=15)


def test_row16_absent_probability_large_L():
    out = run_capped(lambda: participation.absent_probability(10**9, 10**8, 10**8), timeout=5)
    assert out.kind == "ok", str(out)
    # C(L - h, n) / C(L, n) ~ (1 - h/L)^n = 0.9^1e8 underflows to 0
    assert float(out.value) == 0.0


@pytest.mark.parametrize("L, h, n", [(10, 3, 4), (50, 7, 20), (200, 1, 199), (60, 0, 30), (5, 5, 0),
                                     (5000, 10, 300), (20000, 3, 19000), (1001, 1000, 1)])
def test_row16_absent_probability_matches_comb(L, h, n):
    import math
    exact = math.comb(L - h, n) / math.comb(L, n) if n <= L - h else 0.0
    # exact integers up to L = 1000, lgamma beyond (relative error ~ L * 1e-16)
    assert participation.absent_probability(L, h, n) == pytest.approx(exact, rel=1e-12 if L <= 1000 else 1e-9)


# ----------------------------------------------------------------------------------------
# row 17: overflow-safe formulas or range checks
def test_row17_dream_eigenvalues_huge_t():
    out = run_capped(lambda: dreaming.dream_eigenvalues(np.array([0.5, 2.0]), 1e308).tolist())
    if out.kind == "ok":
        assert out.value == "[1.0, 1.0]", str(out)
    else:
        assert_refused(lambda: dreaming.dream_eigenvalues(np.array([0.5, 2.0]), 1e308), "t")


def test_row17_free_edge_huge_components():
    out = run_capped(lambda: khat.free_edge([khat.Component(1e200, 1e200)]))
    if out.kind == "ok":
        v = float(out.value)
        assert np.isfinite(v) and v > 0, str(out)
    else:
        assert_refused(lambda: khat.free_edge([khat.Component(1e200, 1e200)]), "components")


# ----------------------------------------------------------------------------------------
# row 18: N mismatches and types
@pytest.mark.parametrize("call, name", [
    (lambda: attacks.fake_in_memory(XI, XI[0, :50]), "fake"),
    (lambda: attacks.fake_in_memory(XI, XI[0], XI[:, :50]), "archetypes"),
    (lambda: attacks.fake_in_memory(XI, XI[0], threshold="a"), "threshold"),
    (lambda: lam.make_kernel("projector", SPEC, "3"), "k_hat"),
    (lambda: lam.make_kernel("projector", SPEC, 2.5), "k_hat"),
    (lambda: lam.noise_schedule("params"), "params"),
], ids=["fake", "archetypes", "threshold", "k_hat-str", "k_hat-float", "noise_schedule"])
def test_row18_mismatch_and_types(call, name):
    assert_refused(call, name)


# ----------------------------------------------------------------------------------------
# row 19: misleading, contradictory or ignored arguments
SRC = ArraySource(ETA, 100)


@pytest.mark.parametrize("call, name", [
    (lambda: lam.factorize_literal(J, 0, eps=-0.01), "eps"),
    (lambda: lam.factorize_literal(J, 0, dream_steps=0), "dream_steps"),
    (lambda: spectral.estimate_k(J, "mp", rng="x"), "rng"),
    (lambda: spectral.estimate_k(J, "mp", tau="x"), "tau"),
    (lambda: Client(SRC, controller.make_controller("paper"), 0, N=50), "N"),
    (lambda: controller.novelty_weight(operators.pattern_operator(XI), J, 240,
                                       spectrum=controller.local_spectrum(ETA2)), "spectrum"),
], ids=["eps", "dream_steps", "rng", "tau", "client-N", "novelty-B-and-spectrum"])
def test_row19_contradictions(call, name):
    assert_refused(call, name)


def test_row19_estimate_k_checks_unused_arguments_but_keeps_their_range():
    assert spectral.estimate_k(J, "mp", rng=0).k_hat == K_TRUE  # an int seed is still fine
    assert spectral.estimate_k(J, "fixed", dream_time=0).k_hat == 0  # t = 0: raw eigenvalues < tau
    assert_refused(lambda: spectral.estimate_k(J, "mp", dream_time=-1.0), "dream_time")


def test_row19_memory_keeps_accepts_r_1():
    assert participation.memory_keeps(0.5, 1.0, 0.5, 60) is True
    assert participation.memory_keeps(1.0, 1.0, 0.5, 60) is False
    assert participation.memory_keeps(0.5, 0.9, 0.5, 60) is True


def test_upload_replace_still_validates():
    with pytest.raises(ValueError, match="operator"):
        dataclasses.replace(UP, operator=J_NAN)
