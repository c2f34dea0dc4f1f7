"""Client behaviours (fedlam.attacks): what each attacker sends, deterministically."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedlam import attacks, data, operators
from fedlam.protocol import Upload


def honest_view(N=120, M=150, r=0.9, seed=0, w=1.0, broadcast=None, t=0):
    xi = data.random_archetypes(3, N, seed)
    B = operators.hebbian(data.sample_examples(xi, M, r, np.ones(3) / 3, rng=seed + 1)[0])
    U = B if broadcast is None else w * B + (1 - w) * broadcast
    return xi, attacks.HonestView(Upload(U, M, w, 1 - r * r), B, broadcast, t)


def test_fake_pattern_deterministic_and_shared():
    a, b = attacks.fake_pattern(7, 50), attacks.fake_pattern(7, 50)
    assert a.dtype == np.int8 and np.array_equal(a, b) and set(np.unique(a)) <= {-1, 1}
    assert not np.array_equal(a, attacks.fake_pattern(8, 50))
    # colluders with one seed push one fake
    _, view = honest_view()
    ups = [attacks.Poison(seed=3).apply(view) for _ in range(2)]
    assert np.array_equal(ups[0].operator, ups[1].operator)


def test_honest_and_flip():
    _, view = honest_view()
    assert attacks.Honest().apply(view) is view.upload
    f = attacks.Flip().apply(view)
    assert np.array_equal(f.operator, -view.upload.operator) and f.batch_size == view.upload.batch_size
    assert not attacks.Honest().is_attacker and attacks.Flip().is_attacker


def test_poison_is_rank_one_and_does_not_blend():
    _, view = honest_view(N=100)
    up = attacks.Poison(seed=4).apply(view)
    x = attacks.fake_pattern(4, 100).astype(float)
    np.testing.assert_allclose(up.operator, np.outer(x, x) / 100)
    assert math.isnan(up.weight) and up.batch_size == view.upload.batch_size
    assert up.noise_var == view.upload.noise_var and up.dp_sigma == 0.0


def test_frobenius_norms_of_poison_and_honest():
    """A PSD operator of trace 1 has Frobenius norm <= 1, with equality iff rank one: the fake's
    norm (1) exceeds an honest upload's (chapter 12 corrects the opposite statement)."""
    _, view = honest_view(N=200, M=200)
    honest = np.linalg.norm(view.upload.operator)
    assert np.trace(view.upload.operator) == pytest.approx(1.0)
    assert np.linalg.norm(attacks.Poison(seed=1).apply(view).operator) == pytest.approx(1.0)
    assert honest < 1.0


def test_hidden_looks_honest():
    N = 150
    xi, view = honest_view(N=N, M=200)
    up = attacks.Hidden(seed=2).apply(view)
    U = up.operator
    np.testing.assert_allclose(np.diag(U), 1.0 / N, atol=1e-15)   # diagonal 1/N like a Hebbian operator
    assert np.trace(U) == pytest.approx(1.0)
    assert up.weight == 1.0
    a = float(np.linalg.eigvalsh(view.batch_operator)[-1])
    u = attacks.fake_pattern(2, N).astype(float) / math.sqrt(N)
    # the fake's Rayleigh quotient is a (plus (1 - a) times an honest bulk value ~ 1/N)
    assert u @ U @ u == pytest.approx(a, abs=3.0 / N)
    # its Frobenius norm stays within 10 % of the honest batch operator's
    assert np.linalg.norm(U) == pytest.approx(np.linalg.norm(view.batch_operator), rel=0.1)
    fixed = attacks.Hidden(seed=2, strength=0.1).apply(view)
    assert u @ fixed.operator @ u == pytest.approx(0.1, abs=2.0 / N)


def test_hidden_without_batch_sends_rank_one():
    _, view = honest_view(N=60)
    empty = attacks.HonestView(view.upload, None, None, 0)
    up = attacks.Hidden(seed=1).apply(empty)
    assert np.linalg.matrix_rank(up.operator) == 1


@pytest.mark.parametrize("frac", [0.1, 0.15, 0.2])
def test_targeted_corrupts_the_stored_archetype(frac):
    N = 200
    xi, _ = honest_view(N=N)
    A = operators.pattern_operator(xi)
    _, view = honest_view(N=N, w=0.5, broadcast=A, t=2)
    beh = attacks.Targeted(seed=11, flip_fraction=frac)
    up = beh.apply(view)
    fake, target = beh.fake_for(xi)
    np.testing.assert_allclose(up.operator, operators.pattern_operator(fake[None]))
    ov = float(fake.astype(float) @ xi[target]) / N
    assert abs(ov) == pytest.approx(1 - 2 * math.floor(frac * N) / N)
    assert math.isnan(up.weight)
    hid = attacks.Targeted(seed=11, flip_fraction=frac, hide=True).apply(view)
    assert hid.weight == 1.0 and np.trace(hid.operator) == pytest.approx(1.0)


def test_targeted_round0_uses_own_batch_and_empty_memory():
    N = 200
    xi, view = honest_view(N=N, M=400, r=0.9)
    beh = attacks.Targeted(seed=5)
    up = beh.apply(view)                       # no broadcast: recovers from its own batch
    fake, target = beh.fake_for(xi)
    np.testing.assert_allclose(up.operator, operators.pattern_operator(fake[None]))
    nothing = attacks.HonestView(view.upload, None, np.zeros((N, N)), 1)
    assert beh.apply(nothing) is view.upload   # nothing stored, no batch: stays honest


def test_fake_in_memory():
    N = 100
    xi = data.random_archetypes(3, N, 2)
    fake = attacks.fake_pattern(1, N)
    assert attacks.fake_in_memory(np.vstack([xi, fake[None]]), fake, xi)
    assert not attacks.fake_in_memory(xi, fake, xi)
    assert not attacks.fake_in_memory(np.empty((0, N), dtype=np.int8), fake, xi)
    # a faithful copy of the archetype a targeted fake was made from does not count
    t = xi[0].copy()
    t[:15] *= -1
    assert not attacks.fake_in_memory(xi, t, xi)
    assert attacks.fake_in_memory(np.vstack([t[None], xi[1:]]), t, xi)


def test_make_behaviour():
    assert isinstance(attacks.make_behaviour("poison", seed=3), attacks.Poison)
    b = attacks.Hidden(seed=1)
    assert attacks.make_behaviour(b) is b
    with pytest.raises(ValueError, match="data source"):
        attacks.make_behaviour("noise")
    with pytest.raises(ValueError, match="behaviour must be one of"):
        attacks.make_behaviour("evil")
    with pytest.raises(TypeError):
        attacks.make_behaviour(b, seed=2)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        attacks.Poison(seed=-1)
    with pytest.raises(ValueError, match="flip_fraction must lie in"):
        attacks.Targeted(flip_fraction=0.5)
    with pytest.raises(ValueError, match="strength must lie in"):
        attacks.Hidden(strength=1.5)
