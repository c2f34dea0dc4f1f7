"""Tests of the block eigensolver of fedlam._eig (issue 21) against scipy.linalg.eigh."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg

import fedlam._validation as val
import fedlam.federation as fed
from fedlam import _eig, lam, robust
from fedlam import spectral as sp
from fedlam.data import random_archetypes, sample_examples
from fedlam.federation import Server
from fedlam.operators import aggregate, hebbian, pattern_operator
from fedlam.protocol import Upload


def _spiked(N, M, K, r, seed, L=1):
    """Mean of L Hebbian operators of M/L examples of K archetypes (a spiked Wishart)."""
    rng = np.random.default_rng(seed)
    xi = random_archetypes(K, N, rng)
    ops = []
    for _ in range(L):
        X, _ = sample_examples(xi, M // L, r, np.full(K, 1.0 / K), rng)
        ops.append(hebbian(X))
    return aggregate(ops), xi, ops


@pytest.fixture(scope="module")
def spiked():
    J, xi, ops = _spiked(600, 1800, 5, 0.8, 3, L=3)
    w, V = scipy.linalg.eigh(J)
    return J, xi, ops, w[::-1], V[:, ::-1]


@pytest.mark.parametrize(("N", "M", "K", "r", "seed"), [(600, 1800, 5, 0.8, 3), (700, 400, 3, 0.7, 4),
                                                          (500, 2500, 8, 0.6, 5)])
def test_block_matches_eigh_on_spiked_matrices(N, M, K, r, seed):
    J, _, _ = _spiked(N, M, K, r, seed)
    w, V = scipy.linalg.eigh(J)
    w, V = w[::-1], V[:, ::-1]
    info: dict = {}
    spec = _eig._eig_block(J, 16, info=info)
    assert spec is not None
    s = info["tw_scale"]
    assert s > 0
    assert info["n_vectors"] >= K  # the spikes (and at most a value at the edge) get their vectors
    k = K
    # spikes: values to rounding, vectors to 1e-10 (sign convention of Spectrum: the same as eigh's)
    ref = _eig._eig_full(J)
    np.testing.assert_allclose(spec.values[:k], w[:k], rtol=1e-12)
    assert np.abs(spec.vectors[:, :k] - ref.vectors[:, :k]).max() < 1e-8
    assert np.all(spec.residuals[:k] <= _eig.VEC_RTOL * w[0])
    # bulk values: lower bounds (Ritz), within a fraction of a Tracy-Widom scale near the edge
    err = w[k:16] - spec.values[k:]
    assert np.all(err >= -1e-12 * w[0])
    near = spec.values[k:] >= w[k] - 4 * s
    assert np.all(err[near] <= _eig.VALUE_TW_FRACTION * s)
    assert np.all(err <= 0.25 * (w[k] - w[k:16]) + _eig.VALUE_TW_FRACTION * s)
    # exact trace and Frobenius norm, descending order
    assert spec.trace == pytest.approx(w.sum(), rel=1e-12)
    assert spec.sum_sq == pytest.approx(w @ w, rel=1e-12)
    assert np.all(np.diff(spec.values) <= 0)


def test_block_exact_pattern_operator_has_no_bulk():
    xi = random_archetypes(7, 600, np.random.default_rng(0))
    J = pattern_operator(xi)
    spec = _eig._eig_block(J, 16)
    w = scipy.linalg.eigh(J, eigvals_only=True)[::-1]
    assert spec is not None
    np.testing.assert_allclose(spec.values, w[:16], atol=1e-12)


def test_warm_start_reduces_iterations(spiked):
    J, xi, _, _, _ = spiked
    cold: dict = {}
    spec = _eig._eig_block(J, 16, info=cold)
    assert spec is not None
    # the next round's aggregate: the clients blend the broadcast of the K_hat patterns found
    J2 = 0.7 * J + 0.3 * pattern_operator(xi) / 600 * 20
    cold2: dict = {}
    ref = _eig._eig_block(J2, 16, info=cold2)
    warm: dict = {}
    out = _eig._eig_block(J2, 16, start=spec.vectors, info=warm)
    assert ref is not None and out is not None
    assert warm["blocks"] < cold2["blocks"]
    np.testing.assert_allclose(out.values[:5], ref.values[:5], rtol=1e-12)
    # started from the exact answer: at most two products
    again: dict = {}
    _eig._eig_block(J, 16, start=spec.vectors, info=again)
    assert again["blocks"] <= 2 < cold["blocks"]


def test_fallback_when_the_cap_is_reached(spiked, monkeypatch):
    J, _, _, w, _ = spiked
    assert _eig._eig_block(J, 16, max_blocks=2) is None  # cap reached: no answer
    calls = []

    def capped(*args, **kwargs):
        calls.append(1)
        return None

    monkeypatch.setattr(_eig, "_eig_block", capped)
    spec = _eig._eig_top(J, 16, "block")
    assert calls  # the block solver was tried, then ARPACK answered
    assert spec.residuals is None
    np.testing.assert_allclose(spec.values, w[:16], rtol=1e-10)
    # the server's method goes the same way
    spec_s = _eig._eig_top(J, 16, "server")
    np.testing.assert_allclose(spec_s.values, w[:16], rtol=1e-10)


def test_cap_follows_the_gap():
    assert _eig._krylov_blocks(1.0, 1e-10) < _eig._krylov_blocks(0.01, 1e-10) < _eig._krylov_blocks(1e-4, 1e-10)
    assert _eig._krylov_blocks(0.01, 1e-4) < _eig._krylov_blocks(0.01, 1e-10)


def test_ensure_vectors_converges_more_pairs(spiked):
    J, _, _, w, _ = spiked
    spec = _eig._eig_block(J, 16)
    assert spec is not None
    n = 8  # more than the 5 spikes: a caller whose K-hat edge is lower
    out = _eig._ensure_vectors(J, spec, n)
    assert out.residuals is not None
    assert np.all(out.residuals[:n] <= _eig.VEC_RTOL * w[0])
    resid = np.linalg.norm(J @ out.vectors[:, :n] - out.vectors[:, :n] * out.values[:n], axis=0)
    assert np.all(resid <= 1.01 * _eig.VEC_RTOL * w[0])


def test_top_spectrum_block_method_and_bad_input(spiked):
    J, _, _, w, _ = spiked
    spec = sp.top_spectrum(J, 16, method="block")
    assert spec.residuals is not None
    np.testing.assert_allclose(spec.values[:5], w[:5], rtol=1e-12)
    assert sp.top_spectrum(J, 16).residuals is None  # "auto" stays ARPACK (every pair to rounding)
    with pytest.raises(ValueError, match="method must be one of"):
        sp.top_spectrum(J, 16, method="blocks")
    small = J[:40, :40]
    np.testing.assert_allclose(sp.top_spectrum(small, 30, method="block").values,
                               scipy.linalg.eigh(small, eigvals_only=True)[::-1][:30], atol=1e-12)


def test_start_is_checked(spiked):
    J, _, ops, _, _ = spiked
    with pytest.raises(ValueError, match="start must be a float"):
        lam.factorize(J, rng=0, start=np.ones((599, 3)))
    with pytest.raises(ValueError, match="start must be finite"):
        lam.factorize(J, rng=0, start=np.full((600, 3), np.nan))
    ups = [Upload(op, 600, 1.0, 0.36) for op in ops]
    with pytest.raises(ValueError, match="start must be a float"):
        Server(acceptance="paper").round(ups, np.random.default_rng(0), start=np.ones(600))
    with pytest.raises(ValueError, match="start must be a finite float"):
        Server().round(ups, np.random.default_rng(0), start=np.ones(600))  # the fresh acceptance
    with pytest.raises(ValueError, match="start must be a finite float"):
        robust.aggregate(ups, defense="support", start=np.ones((5, 2)))


def test_factorize_same_with_and_without_warm_start(spiked):
    J, _, ops, _, _ = spiked
    a = lam.factorize(J, rng=0)
    b = lam.factorize(J, rng=0, start=a.vectors)
    assert a.k_hat == b.k_hat == 5
    assert np.array_equal(a.patterns, b.patterns)
    ups = [Upload(op, 600, 1.0, 0.36) for op in ops]
    for d in (None, "support"):
        r1 = Server(defense=d).round(ups, np.random.default_rng(1))
        r2 = Server(defense=d).round(ups, np.random.default_rng(1), start=r1.result.vectors)
        assert np.array_equal(r1.patterns, r2.patterns)
        assert r1.result.k_hat == r2.result.k_hat


def test_round_validates_once_and_names_the_bad_upload(spiked, monkeypatch):
    _, _, ops, _, _ = spiked
    ups = [Upload(op, 600, 1.0, 0.36) for op in ops]

    calls = []
    real = val.check_operator

    def counting(X, name="J", *a, **kw):
        calls.append(name)
        return real(X, name, *a, **kw)

    monkeypatch.setattr(fed, "check_operator", counting)
    monkeypatch.setattr(lam, "check_operator", counting)
    monkeypatch.setattr(robust, "check_operator", counting)
    for server in (Server(acceptance="paper"), Server(), Server(defense="support")):
        server.round(ups, np.random.default_rng(0))
        assert calls == ["aggregate"], server  # one O(N^2) check per round, at the entry point
        calls.clear()
    bad = ops[1].copy()
    bad[3, 5] += 1e-3
    nan = ops[2].copy()
    nan[0, 0] = np.nan
    # Upload refuses both at construction (issue 22, row 12) ...
    with pytest.raises(ValueError, match=r"operator must be symmetric"):
        Upload(bad, 600, 1.0, 0.36)
    with pytest.raises(ValueError, match=r"operator must be finite"):
        Upload(nan, 600, 1.0, 0.36)

    def tampered(op):  # ... so only an upload altered after construction reaches the server
        up = Upload(ops[0].copy(), 600, 1.0, 0.36)
        object.__setattr__(up, "operator", op)
        return up

    with pytest.raises(ValueError, match=r"uploads\[1\]\.operator must be symmetric"):
        Server().round([ups[0], tampered(bad), ups[2]], np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"uploads\[2\]\.operator must be finite"):
        Server().round([ups[0], ups[1], tampered(nan)], np.random.default_rng(0))
    # an upload with weight 0 is not in the aggregate and is checked on its own
    s0 = Server(aggregation=np.array([0.5, 0.5, 0.0]))
    with pytest.raises(ValueError, match=r"uploads\[2\]\.operator must be finite"):
        s0.round([ups[0], ups[1], tampered(nan)], np.random.default_rng(0))


def test_check_spectrum_of_accepts_block_spectrum_and_rejects_others(spiked):
    J, _, _, _, _ = spiked
    spec = _eig._eig_block(J, 16)
    assert spec is not None
    _eig._check_spectrum_of(spec, J)  # its bulk pairs are as accurate as it claims
    other = _eig._eig_top(J + 1e-3 * np.eye(600), 16, "block")
    with pytest.raises(ValueError, match="spectrum must be a spectrum of J"):
        _eig._check_spectrum_of(other, J)


@pytest.mark.parametrize("sigma", [1e-3, 4e-3])
def test_block_on_a_noised_operator(sigma):
    """A differentially private aggregate: MP bulk + Gaussian noise (not an MP shape)."""
    from fedlam.privacy import add_symmetric_noise

    J, _, _ = _spiked(600, 1800, 5, 0.8, 3, L=3)
    J = add_symmetric_noise(J, sigma, np.random.default_rng(1))
    w = scipy.linalg.eigh(J, eigvals_only=True)[::-1]
    info: dict = {}
    spec = _eig._eig_block(J, 16, info=info)
    assert spec is not None
    err = w[:16] - spec.values
    assert np.all(err >= -1e-12 * w[0])
    assert np.all(err <= _eig.VALUE_TW_FRACTION * info["tw_scale"])  # no model of the bulk: no relaxation
    # given the bulk's edge and scale (the server passes its noise-aware model's), values deeper
    # than 4 scales below the edge are relaxed to a quarter of their depth, as below an MP edge
    # (so a K-hat threshold above the edge is decided alike), in fewer block products
    k = int(np.sum(w[:16] - w[1:17] > 10 * info["tw_scale"]))  # the spikes the solver set apart
    edge, s = float(w[k]), info["tw_scale"]
    hinted: dict = {}
    spec2 = _eig._eig_block(J, 16, info=hinted, bulk_edge=(edge, s))
    assert spec2 is not None
    err2 = w[:16] - spec2.values
    assert np.all(err2 >= -1e-12 * w[0])
    assert np.all(err2 <= 0.25 * np.maximum(edge - 4 * s - w[:16], 0.0) + _eig.VALUE_TW_FRACTION * s)
    assert hinted["blocks"] <= info["blocks"]
    # the noise's semicircle (radius 2 sigma sqrt N) sets the scale: sigma sqrt(N) N^{-2/3}, not the spikes'
    assert info["tw_scale"] < 2.0 * sigma * 600**0.5 * 600 ** (-2 / 3)


def test_rounds_identical_to_the_arpack_rounds(spiked, monkeypatch):
    """K_hat, patterns and magnetizations of a round are those of the previous solver (ARPACK)."""
    from fedlam.metrics import magnetization

    _, xi, ops, _, _ = spiked
    ups = [Upload(op, 600, 1.0, 0.36) for op in ops]
    block = {d: Server(defense=d).round(ups, np.random.default_rng(2)) for d in (None, "support")}
    monkeypatch.setattr(_eig, "_eig_block", lambda *a, **k: None)  # every spectrum takes the fallback
    for d, rb in block.items():
        ra = Server(defense=d).round(ups, np.random.default_rng(2))
        assert rb.result.k_hat == ra.result.k_hat == 5
        assert np.array_equal(rb.patterns, ra.patterns)
        np.testing.assert_array_equal(magnetization(rb.patterns, xi), magnetization(ra.patterns, xi))


# ----------------------------------------------------------------------------------------
# mixed precision (a float32 pass, then float64 from its basis)
@pytest.mark.parametrize(("N", "M", "K", "r", "seed"), [(600, 1800, 5, 0.8, 3), (700, 400, 3, 0.7, 4)])
def test_mixed_precision_meets_the_float64_contract(N, M, K, r, seed):
    """The float64 pass applies the same criteria: spikes to 1e-10, bulk values to 0.1 TW scale."""
    J, _, _ = _spiked(N, M, K, r, seed)
    w = scipy.linalg.eigh(J, eigvals_only=True)[::-1]
    ref = _eig._eig_full(J)
    info64: dict = {}
    _eig._eig_block(J, 16, precision="float64", info=info64)
    info: dict = {}
    spec = _eig._eig_block(J, 16, precision="mixed", info=info)
    assert spec is not None
    s = info["tw_scale"]
    np.testing.assert_allclose(spec.values[:K], w[:K], rtol=1e-12)
    assert np.abs(spec.vectors[:, :K] - ref.vectors[:, :K]).max() < 1e-8
    assert np.all(spec.residuals[:K] <= _eig.VEC_RTOL * w[0])
    resid = np.linalg.norm(J @ spec.vectors[:, :K] - spec.vectors[:, :K] * spec.values[:K], axis=0)
    assert np.all(resid <= 1.01 * _eig.VEC_RTOL * w[0])  # measured in float64, not taken from the float32 pass
    err = w[K:16] - spec.values[K:]
    assert np.all(err >= -1e-12 * w[0])
    near = spec.values[K:] >= w[K] - 4 * s
    assert np.all(err[near] <= _eig.VALUE_TW_FRACTION * s)
    assert np.all(err <= 0.25 * (w[K] - w[K:16]) + _eig.VALUE_TW_FRACTION * s)
    # most products are float32 ones: the float64 pass starts from the float32 basis and needs few
    assert info["blocks_float32"] >= 1
    assert info["blocks"] - info["blocks_float32"] < info64["blocks"]
    assert info64["blocks_float32"] == 0


def test_precision_auto_switches_at_the_size_and_bad_precision_is_refused(spiked, monkeypatch):
    J = spiked[0]
    info: dict = {}
    _eig._eig_block(J, 16, info=info)
    assert info["blocks_float32"] == 0  # N = 600 < MIXED_MIN_N
    monkeypatch.setattr(_eig, "MIXED_MIN_N", 600)
    _eig._eig_block(J, 16, info=info)
    assert info["blocks_float32"] >= 1
    _eig._eig_block(J, 16, threshold=float(np.linalg.eigvalsh(J)[-6]), info=info)
    assert info["blocks_float32"] == 0  # under a K-hat threshold "auto" keeps float64
    with pytest.raises(ValueError, match="precision must be 'auto', 'float64' or 'mixed', got 'single'"):
        _eig._eig_block(J, 16, precision="single")
    # the float32 pass's tolerance sits at its rounding level, never below the float64 one
    assert _eig._float32_rtol(10) == pytest.approx(8 * 10**0.5 * 2.0**-24)
    assert _eig._float32_rtol(10_000) > _eig._float32_rtol(1000) > _eig.VEC_RTOL


def _forced_mixed(real):
    """The block solver in mixed precision wherever its caller leaves the precision to it (the
    server's calls run under the K-hat threshold, where ``"auto"`` keeps float64)."""
    def solver(*a, **k):
        k.setdefault("precision", "mixed")
        return real(*a, **k)
    return solver


@pytest.mark.parametrize("defense", [None, "support"])
def test_rounds_identical_with_the_mixed_solver(spiked, monkeypatch, defense):
    """K_hat, patterns and magnetizations of a round do not depend on the solver's precision,
    with the default acceptance, the support defence and under the Gaussian mechanism."""
    from fedlam.metrics import magnetization
    from fedlam.privacy import GaussianMechanism

    _, xi, ops, _, _ = spiked
    mech = GaussianMechanism(epsilon=4.0, delta=1e-5)
    rng = np.random.default_rng(5)
    noised = []
    for op in ops:
        Z, sig = mech.apply(op, 600, rng)
        noised.append(Upload(Z, 600, 1.0, 0.36, dp_sigma=sig))
    calls: list = []
    real = _eig._block_krylov

    def spy(apply, *a, **k):
        calls.append(apply)
        return real(apply, *a, **k)

    for ups in ([Upload(op, 600, 1.0, 0.36) for op in ops], noised):
        ref = Server(defense=defense).round(ups, np.random.default_rng(2))
        assert ref.result.k_hat == 5
        calls.clear()
        with monkeypatch.context() as m:
            m.setattr(_eig, "_eig_block", _forced_mixed(_eig._eig_block))
            m.setattr(_eig, "_block_krylov", spy)
            mixed = Server(defense=defense).round(ups, np.random.default_rng(2))
        assert len(calls) >= 2  # a float32 pass and a float64 pass ran
        assert mixed.result.k_hat == ref.result.k_hat
        assert np.array_equal(mixed.patterns, ref.patterns)
        np.testing.assert_array_equal(magnetization(mixed.patterns, xi), magnetization(ref.patterns, xi))


def test_a_round_at_the_mixed_size_matches_the_float64_round(monkeypatch):
    """At N = MIXED_MIN_N, with the mixed path forced in the server's solver (under its K-hat
    threshold ``"auto"`` keeps float64), K_hat and patterns are those of the float64 solver,
    over two rounds (the second warm-started, with a broadcast)."""
    from fedlam.metrics import magnetization

    N = _eig.MIXED_MIN_N
    _, xi, ops = _spiked(N, 2 * N, 4, 0.8, 11, L=2)
    ups = [Upload(op, N, 1.0, 0.36) for op in ops]

    def two_rounds():
        s = Server()
        r0 = s.round(ups, np.random.default_rng(3))
        blended = [Upload(0.6 * op + 0.4 * r0.broadcast, N, 0.6, 0.36) for op in ops]
        r1 = s.round(blended, np.random.default_rng(4), broadcast=r0.broadcast, start=r0.warm_start)
        return r0, r1

    used = []
    real = _eig._block_krylov

    def spy(apply, *a, **k):
        used.append(k.get("whole_start", False))
        return real(apply, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(_eig, "_eig_block", _forced_mixed(_eig._eig_block))
        m.setattr(_eig, "_block_krylov", spy)
        mixed = two_rounds()
    assert any(used)  # the float64 pass after a float32 one ran
    with monkeypatch.context() as m:
        m.setattr(_eig, "MIXED_MIN_N", 10**9)
        ref = two_rounds()
    for a, b in zip(mixed, ref, strict=True):
        assert a.result.k_hat == b.result.k_hat == 4
        assert np.array_equal(a.patterns, b.patterns)
        assert magnetization(a.patterns, xi).min() == 1.0


# ----------------------------------------------------------------------------------------
# the K-hat rule's threshold: the values below it are placed below it, not converged
@pytest.mark.parametrize("precision", ["float64", "mixed"])
@pytest.mark.parametrize(("N", "M", "K", "r", "seed"), [(600, 1800, 5, 0.8, 3), (700, 1200, 3, 0.7, 4),
                                                          (500, 2500, 8, 0.6, 5)])
def test_threshold_places_the_values_below_it(N, M, K, r, seed, precision):
    J, _, ops = _spiked(N, M, K, r, seed, L=3)
    w, V = scipy.linalg.eigh(J)
    w, V = w[::-1], V[:, ::-1]
    thr = sp.k_hat_free(w, components=ops).threshold
    n_above = int(np.sum(w[:16] > thr))
    assert 1 <= n_above <= K
    info: dict = {}
    spec = _eig._eig_block(J, 16, precision=precision, threshold=thr, info=info)
    assert spec is not None
    s = info["tw_scale"]
    # the count the rule makes is LAPACK's; every value is a lower bound of its eigenvalue
    assert int(np.sum(spec.values > thr)) == n_above
    assert np.all(w[:16] - spec.values >= -1e-12 * w[0])
    # a value below the threshold: its eigenvalue lies below it with 0.1 TW scale to spare
    below = spec.values < thr
    assert np.all(w[:16][below] <= thr - _eig.VALUE_TW_FRACTION * s)
    # the counted values get their vectors (the caller's LAM reads them)
    assert info["n_vectors"] >= n_above
    assert np.all(spec.residuals[:n_above] <= _eig.VEC_RTOL * w[0])
    assert np.abs(np.abs(np.sum(spec.vectors[:, :n_above] * V[:, :n_above], axis=0)) - 1).max() < 1e-12


def test_threshold_above_every_value_and_fewer_products(spiked):
    J, _, ops, w, _ = spiked
    info_all: dict = {}
    _eig._eig_block(J, 16, info=info_all)
    info: dict = {}
    thr = sp.k_hat_free(w, components=ops).threshold
    _eig._eig_block(J, 16, threshold=thr, info=info)
    assert info["blocks"] < info_all["blocks"]  # the bulk values deep below it are not waited for
    # nothing above the threshold (K-hat = 0): no vector is needed, every value placed below it
    top = 2.0 * w[0]
    info0: dict = {}
    spec0 = _eig._eig_block(J, 16, n_vectors=0, threshold=top, info=info0)
    assert spec0 is not None and info0["n_vectors"] == 0
    assert np.all(spec0.values < top) and np.all(w[:16] <= top - _eig.VALUE_TW_FRACTION * info0["tw_scale"])


@pytest.mark.parametrize("defense", [None, "support"])
def test_server_passes_its_k_hat_threshold(spiked, monkeypatch, defense):
    """The server's spectra are solved against the threshold its free-edge K-hat rule counts with."""
    _, _, ops, _, _ = spiked
    ups = [Upload(op, 600, 1.0, 0.36) for op in ops]
    seen = []
    orig = _eig._eig_block

    def spy(*a, **k):
        seen.append(k.get("threshold"))
        return orig(*a, **k)

    monkeypatch.setattr(_eig, "_eig_block", spy)
    rr = Server(defense=defense).round(ups, np.random.default_rng(2))
    assert seen and all(t is not None for t in seen)
    assert seen[-1] == pytest.approx(rr.result.k_result.threshold, rel=1e-12)
    assert rr.result.k_hat == 5


def test_svqb_one_sweep_only_when_it_is_enough():
    """_svqb skips its second sweep ("twice is enough") only when the first leaves the block
    orthonormal and orthogonal to Q to rounding: residual-like blocks (tiny norms, a large share
    along Q, nearly dependent columns) come out orthonormal to 1e-14."""
    rng = np.random.default_rng(0)
    N = 800
    Q = np.linalg.qr(rng.standard_normal((N, 60)))[0]
    worst = 0.0
    for trial in range(150):
        W = rng.standard_normal((N, 20)) * 10.0 ** rng.uniform(-12, 0, 20)
        W += Q @ rng.standard_normal((60, 20)) * 10.0 ** rng.uniform(-16, 0)
        if trial % 3 == 0:
            W[:, 1] = W[:, 0] + 1e-7 * W[:, 1]
        X = _eig._svqb(W, Q)
        B = np.hstack([Q, X])
        worst = max(worst, float(np.abs(B.T @ B - np.eye(B.shape[1])).max()))
    assert worst < 1e-14


@pytest.mark.parametrize("f", [1.2, 1.5, 2.0, 3.0])
def test_threshold_placement_in_a_noised_bulk(f):
    """Chapter 11's Gaussian-mechanism operator (N = 500, M = 400, r = 0.7, K = 3) at f times its
    epsilon threshold, with the server's model of the bulk: the solver's count above the rule's
    threshold, and above thresholds half a TW scale from each leading eigenvalue, is LAPACK's.
    (A first version took ||r|| as a value's error below the threshold and stopped after two
    products with K-hat 0 where LAPACK counts 2, at f = 1.5.)"""
    from fedlam import data, khat, operators, privacy

    r, N, M, K, d = 0.7, 500, 400, 3, 1e-5
    rng = np.random.default_rng(31)
    xi = data.random_archetypes(K, N, rng)
    J = operators.hebbian(data.sample_examples(xi, M, r, np.ones(K) / K, rng)[0])
    comp = [khat.Component((1 - r * r) / N, N / M)]
    eps = f * privacy.epsilon_threshold(r, 1 / K, N, M, d)
    sig = privacy.noise_scale(M, eps, d, N=N)
    Jn = privacy.gaussian_mechanism(J, M, eps, d, 4)
    edge, s, thr0 = khat._model_edge(comp, N, N * sig * sig)
    w = np.linalg.eigvalsh(Jn)[::-1]
    for thr in [thr0] + [w[j] + x * s for j in range(K + 1) for x in (-0.5, 0.5)]:
        spec = _eig._eig_block(Jn, 16, n_vectors=0, threshold=thr, bulk_edge=(edge, s))
        assert spec is not None
        assert int(np.sum(spec.values > thr)) == int(np.sum(w[:16] > thr)), thr
    res = privacy.factorize_noised(Jn, 5, components=comp, noise_sigma=sig)
    assert res.k_hat == int(np.sum(w[:16] > res.k_result.threshold))


def test_sym_matmul_is_the_product_with_a_symmetric_operator():
    # the block solver's and the certification's products, (W^T J)^T for symmetric J: the same
    # numbers as J @ W to rounding, for float64 and float32, C- and F-ordered W, one column too
    rng = np.random.default_rng(3)
    A = rng.standard_normal((300, 300))
    J = A + A.T
    for W in (rng.standard_normal((300, 12)), np.asfortranarray(rng.standard_normal((300, 5))),
              rng.standard_normal((300, 1))):
        out = _eig._sym_matmul(J, W)
        assert out.shape == W.shape and out.dtype == np.float64
        np.testing.assert_allclose(out, J @ W, rtol=0, atol=1e-12 * np.abs(J).sum(axis=1).max())
    out32 = _eig._sym_matmul(J.astype(np.float32), W.astype(np.float32))
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, J @ W, rtol=0, atol=1e-4 * np.abs(J).sum(axis=1).max())
    # a non-symmetric matrix gives J^T W, not J W: the helper is only for symmetric operators
    B = rng.standard_normal((300, 300))
    assert not np.allclose(_eig._sym_matmul(B, W), B @ W)
