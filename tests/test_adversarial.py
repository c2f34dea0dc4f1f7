"""Issue 10, must hold: defences in whole federations (run_federation(defense=..., behaviour per client)).

* With ``defense="support"`` one poisoner among five (every poisoner kind of fedlam.attacks) never
  gets its fake accepted (no spurious pattern in any round, any seed tried) and the honest
  archetypes keep m >= 0.95; the same runs on the paper's server (no defence, the paper's
  acceptance) store the fake (the attack is real).
* Heterogeneous supports, each archetype held by 2 of 5 clients: every archetype recovered with
  m >= 0.95 under "support" with s = 2.
* Bad input (unknown defence, s outside [1, L], trimming fraction outside [0, 0.5)) is rejected
  before round 0 with a ValueError naming the argument.
* The experiment module: shapes, determinism, the executor option, the trade-off run; its
  ``"none"`` is the paper's server and ``"voted"`` the library's default (issue 18).
"""

from __future__ import annotations

import inspect
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fedlam import attacks, data, federation
from fedlam.experiments import adversarial

if "defense" not in inspect.signature(federation.run_federation).parameters:  # pragma: no cover
    pytest.skip("run_federation(defense=...) is not wired yet (see the issue 10 report)", allow_module_level=True)

N, K, M, R, T = 200, 3, 200, 0.9, 5
SEEDS = (0, 1, 2)


def _poisoners(seed):
    return {
        "poison": attacks.Poison(seed=seed + 100),
        "hidden": attacks.Hidden(seed=seed + 100),
        "targeted": attacks.Targeted(seed=seed + 100, flip_fraction=0.15),
    }


def _run(xi, behaviour, seed, defense, controller="paper", acceptance=None):
    mix = data.static_mixture(T, 1, K)[:, 0]
    specs = [federation.ClientSpec(r=R, M=M, mixture=mix) for _ in range(4)]
    specs.append(federation.ClientSpec(r=R, M=M, mixture=mix, behaviour=behaviour))
    return federation.run_federation(xi, specs, T, seed, controller=controller, known_r=True, defense=defense,
                                     acceptance=acceptance)


def _fake(beh, xi):
    return beh.fake_for(xi)[0] if isinstance(beh, attacks.Targeted) else beh.fake(xi.shape[1])


@pytest.mark.parametrize("kind", ["poison", "hidden", "targeted"])
def test_support_keeps_every_poisoner_out(kind):
    for seed in SEEDS:
        xi = data.random_archetypes(K, N, 50 + seed)
        beh = _poisoners(seed)[kind]
        fake = _fake(beh, xi)
        plain = _run(xi, beh, seed, None, acceptance="paper")   # the paper's server
        assert any(attacks.fake_in_memory(p, fake, xi) for p in plain.patterns), (kind, seed)
        h = _run(xi, beh, seed, "support")
        assert not any(attacks.fake_in_memory(p, fake, xi) for p in h.patterns), (kind, seed)
        assert np.all(h.spurious == 0), (kind, seed, h.spurious)
        assert np.all(h.magnetization >= 0.95), (kind, seed, h.magnetization.min())


def test_support_under_the_novelty_rule_too():
    xi = data.random_archetypes(K, N, 60)
    beh = attacks.Hidden(seed=7)
    h = _run(xi, beh, 3, "support", controller="novelty")
    assert not any(attacks.fake_in_memory(p, beh.fake(N), xi) for p in h.patterns)
    assert np.all(h.spurious == 0) and np.all(h.magnetization >= 0.95)


def test_two_of_five_supports_recovered_with_s2():
    Kh, L = 5, 5
    supports = [[c, (c + 1) % Kh] for c in range(L)]
    mix = data.heterogeneous_supports(T, L, Kh, supports)
    for seed in SEEDS:
        xi = data.random_archetypes(Kh, N, 70 + seed)
        specs = [federation.ClientSpec(r=R, M=M, mixture=np.ascontiguousarray(mix[:, c])) for c in range(L)]
        h = federation.run_federation(xi, specs, T, seed, controller="paper", known_r=True,
                                      defense="support", defense_params={"s": 2})
        assert np.all(h.magnetization[-1] >= 0.95), (seed, h.magnetization[-1])
        assert np.all(h.spurious == 0)


def test_one_of_five_is_the_price():
    """An archetype held by a single client is what s = 2 gives up (and s = 1 keeps)."""
    Kh, L = 5, 5
    mix = data.heterogeneous_supports(T, L, Kh, [[c] for c in range(L)])
    xi = data.random_archetypes(Kh, N, 80)
    specs = [federation.ClientSpec(r=R, M=M, mixture=np.ascontiguousarray(mix[:, c])) for c in range(L)]
    h2 = federation.run_federation(xi, specs, T, 0, controller="paper", known_r=True, defense="support")
    h1 = federation.run_federation(xi, specs, T, 0, controller="paper", known_r=True, defense="support",
                                   defense_params={"s": 1})
    assert h2.n_patterns[-1] == 0 and np.all(h1.magnetization[-1] >= 0.95)


@pytest.mark.parametrize(
    "defense, params, match",
    [
        ("medoid", None, "defense must be None or one of"),
        ("support", {"s": 0}, r"defense_params\['s'\] must lie in \[1, L\] = \[1, 5\]"),
        ("support", {"s": 6}, r"defense_params\['s'\] must lie in \[1, L\] = \[1, 5\]"),
        ("trimmed", {"trim": 0.5}, r"defense_params\['trim'\] must lie in \[0, 0.5\)"),
        ("trimmed", {"trim": -0.1}, r"defense_params\['trim'\] must lie in \[0, 0.5\)"),
    ],
)
def test_bad_defense_rejected_before_round0(defense, params, match):
    xi = data.random_archetypes(K, 40, 0)
    mix = data.static_mixture(2, 1, K)[:, 0]
    specs = [federation.ClientSpec(r=R, M=30, mixture=mix) for _ in range(5)]
    with pytest.raises(ValueError, match=match):
        federation.run_federation(xi, specs, 2, 0, defense=defense, defense_params=params)


# ----------------------------------------------------------------------------------------
# the experiment module
TINY = dict(N=40, M=40, T=4, n_good=4, attacks=("none", "poison", "targeted"), defenses=("none", "support"),
            controllers=("paper",), t_new=1, spread=1, seeds=1)


def test_adversarial_shapes_and_summary():
    p = adversarial.AdversarialParams(**TINY)
    res = adversarial.run(p, 0)
    assert res.weights.shape == (1, 3, 2, 1, p.T, p.L_max)
    assert res.magnetization.shape == (1, 3, 2, 1, p.T, p.K + 1)
    assert res.latency.shape == (1, 3, 2, 1)
    assert np.isnan(res.fake_in_memory[:, 0]).all() and np.isfinite(res.fake_in_memory[:, 1:]).all()
    assert set(res.summary) == {f"{a}/{d}/paper" for a in p.attacks for d in p.defenses}
    assert "fake_final_fraction" in res.summary["poison/none/paper"]
    assert "fake_final_fraction" not in res.summary["none/none/paper"]


def test_adversarial_executor_matches_loop():
    p = adversarial.AdversarialParams(**{**TINY, "attacks": ("poison",), "seeds": 2})
    a = adversarial.run(p, 5)
    with ThreadPoolExecutor(max_workers=2) as ex:
        b = adversarial.run(p, 5, executor=ex)
    np.testing.assert_array_equal(a.magnetization, b.magnetization)
    np.testing.assert_array_equal(a.fake_in_memory, b.fake_in_memory)
    with pytest.raises(TypeError, match=r"executor must be None or a concurrent\.futures\.Executor"):
        adversarial.run(p, 5, executor=object())


def test_adversarial_params_validation():
    with pytest.raises(ValueError, match="attacks"):
        adversarial.AdversarialParams(attacks=("noise", "virus"))
    with pytest.raises(ValueError, match="defenses"):
        adversarial.AdversarialParams(defenses=("none", "mean"))
    with pytest.raises(ValueError, match="s must be <= n_good"):
        adversarial.AdversarialParams(s=5, n_good=4)
    with pytest.raises(ValueError, match="t_new"):
        adversarial.AdversarialParams(T=5, t_new=5)
    with pytest.raises(ValueError, match="trim"):
        adversarial.AdversarialParams(trim=0.5)


def test_tradeoff_shapes():
    p = adversarial.TradeoffParams(N=40, M=40, T=4, scenarios=("two_of_five", "novelty"), defenses=("none", "support"),
                                   s_values=(1, 2), colluders=(1,), t_new=1, spread=1, seeds=1, controller="paper")
    res = adversarial.run_tradeoff(p, 0)
    assert res.magnetization.shape == (1, 2, 2, p.T, p.K + 1)
    assert res.holders_recovered.shape == (1, 2, 3) and res.fake_stored.shape == (1, 2, 1)
    assert res.holders_recovered_voted.shape == (1, 2, 3) and res.fake_stored_voted.shape == (1, 2, 1)
    assert set(res.summary) >= {"two_of_five/support", "novelty/none", "s=1", "s=2", "s=1/voted", "s=2/voted"}
    with pytest.raises(ValueError, match="L = K"):
        adversarial.TradeoffParams(L=4, K=5)


def test_spreading_novelty_and_first_round():
    mix = adversarial.spreading_novelty(6, 3, 2, 1, 2, 0.25)
    assert mix.shape == (6, 3, 3) and np.allclose(mix.sum(axis=2), 1.0)
    assert mix[0, 0, 2] == 0 and mix[1, 0, 2] == 0.25 and mix[2, 1, 2] == 0 and mix[3, 1, 2] == 0.25
    assert np.all(mix[:5, 2, 2] == 0) and mix[5, 2, 2] == 0.25       # third client: from round 5
    assert adversarial.first_round(np.array([0, 0, 1, 1], dtype=bool), 1) == 1.0
    assert np.isnan(adversarial.first_round(np.array([1, 0, 0], dtype=bool), 1))


def test_paper_rule_on_noise_collapse_needs_the_attackers_own_r():
    res = adversarial.paper_rule_on_noise(200, 200, 3, np.array([0.01, 0.2]), 8, 0)
    # below r* the rule is 0, far above it close to 1: at r = 0.2, 1 - H_min = 1.15e-3 against a
    # mean 1 - H_AB of 3.4e-5 whose chi-square(1) fluctuations stay below 9 x the mean (p = 0.003)
    assert res.r_star_pred == pytest.approx((2 * (1 - 0.0563) / (200 * 199)) ** 0.25, rel=1e-2)
    assert np.all(res.w_raw[:, 1] > 0.7) and np.mean(res.w_raw[:, 0] == 0.0) >= 0.5
    # mean of 1 - H_AB: chi-square with 1 degree of freedom per batch, sd of the mean of 8 ~ 0.5
    assert 0.3 < res.one_minus_h_ab.mean() / res.mean_pred < 2.0


@pytest.mark.parametrize(("N", "M", "n_batches", "lo", "hi"), [
    (200, 200, 64, 0.5, 2.0),    # book sizes (even M: P0 = 0.056)
    (200, 51, 64, 0.5, 2.0),     # odd M (P0 = 0): M enters only through P0
    (1000, 800, 32, 1 / 3, 3.0),  # paper sizes (the notebook's failing case, 8 batches: 0.268)
])
def test_paper_rule_on_noise_mean_prediction_at_both_sizes(N, M, n_batches, lo, hi):
    # each batch's (1 - H_AB) / mean_pred is ~ chi-square(1); the mean of n batches falls outside
    # [lo, hi] with probability P(chi2_n < n lo) + P(chi2_n > n hi): 2.8e-4 (64, [1/2, 2]) and
    # 1.4e-4 (32, [1/3, 3]). A prediction that changed with M other than through P0 (M = 51 vs 200)
    # by more than a factor 2 fails here.
    res = adversarial.paper_rule_on_noise(N, M, 3, np.array([0.1]), n_batches, 0)
    p0 = math.comb(M, M // 2) / 2.0**M if M % 2 == 0 else 0.0
    assert res.mean_pred == pytest.approx((1 - p0) / (math.log(2) * N * (N - 1)), rel=1e-12)
    assert lo < res.one_minus_h_ab.mean() / res.mean_pred < hi


def test_page_tables_one_titled_table_each():
    from fedlam.experiments._common import TitledTable

    p = adversarial.AdversarialParams(**{**TINY, "attacks": ("none", "noise", "poison"),
                                         "controllers": ("paper", "novelty")})
    res = adversarial.run(p, 0)
    setting = adversarial.setting_table(p)
    assert isinstance(setting, TitledTable) and "| attacks | none, noise, poison |" in repr(setting)
    noise = repr(adversarial.noise_client_table(res))
    s = res.summary["noise/none/paper"]
    assert f"| paper's entropy rule | {s['good_weight_final_mean']:.3f} |" in noise
    grid = repr(adversarial.grid_table(res, "novelty"))
    assert grid.startswith("**our novelty rule: 6 runs, 1 seeds (final round") and grid.count("\n| ") == 7
    with pytest.raises(ValueError, match="controller must be one of"):
        adversarial.grid_table(res, 0.5)
    sup = repr(adversarial.support_table(res))
    assert "| support | poison | paper |" in sup and "| paper (mean) | poison | either |" in sup
    assert adversarial.support_table(adversarial.run(
        adversarial.AdversarialParams(**{**TINY, "defenses": ("none",)}), 0)) is None
    paper = repr(adversarial.paper_table(res, np.array([0.0078, 0.0078])))
    assert "| attacker's w, own r = 0.01 | → 0 in ~10 rounds | 0.0078 |" in paper
    with pytest.raises(TypeError, match="res must be a AdversarialResult"):
        adversarial.grid_table(p, "paper")
    with pytest.raises(TypeError, match="params must be a AdversarialParams"):
        adversarial.setting_table(res)


def test_tradeoff_and_rule_tables():
    p = adversarial.TradeoffParams(N=40, M=40, T=4, scenarios=("two_of_five",), defenses=("none", "support"),
                                   s_values=(1, 2), colluders=(1,), t_new=1, spread=1, seeds=1, controller="paper")
    tres = adversarial.run_tradeoff(p, 0)
    t = repr(adversarial.tradeoff_table(tres))
    assert "| two_of_five | support |" in t and "seeds: 1" in t
    s = repr(adversarial.choice_of_s_table(tres))
    assert s.count("\n| ") == 5 and "| s | voters | fake, k = 1 | h = 1 | h = 2 | h = 3 |" in s
    assert "| 2 | uploads |" in s and "| 2 | leave-out |" in s
    rs = np.geomspace(0.005, 0.5, 5)
    rule = adversarial.paper_rule_on_noise(40, 40, 3, rs, 4, rng=1)
    r = repr(adversarial.noise_rule_table(rule, np.array([0.0078, 0.2]), np.array([0.9, 0.95]), 8))
    assert "| w, own r = 0.01 | 0.0078 0.2000 | 0.0078 |" in r and "after T = 8 rounds" in r
    assert "| seeds ending w > 0.1 | 1 of 2 |" in r
    with pytest.raises(TypeError, match="rule must be a NoiseClientRule"):
        adversarial.noise_rule_table(tres, np.zeros(1), np.zeros(1), 8)


def test_near_copy_table():
    sweep = adversarial.near_copy_sweep((0.9, 1.0), N=40, M=40, N_fed=40, T=3, seeds=1, rng=0)
    t = repr(adversarial.near_copy_table(sweep))
    assert t.startswith("**A near-copy of archetype 0 against the support test (") and t.count("\n| ") == 3


# ----------------------------------------------------------------------------------------
# the paper's server ("none") and the library's default ("voted") side by side (issue 18)
def _one_poison_run(p, rng, **kwargs):
    """The experiment's ``poison`` federation of seed 0, rebuilt from run_federation directly."""
    from fedlam.experiments._common import seed_pairs

    seed_xi, seed_fed = seed_pairs(rng, 1)[0]
    xi = data.random_archetypes(p.K, p.N, seed_xi)
    mix = data.static_mixture(p.T, 1, p.K)[:, 0]
    good = [federation.ClientSpec(r=p.r_good, M=p.M, mixture=mix) for _ in range(p.n_good)]
    beh = attacks.Poison(seed=int(seed_fed % (2**31 - 1)))
    specs = good + [federation.ClientSpec(r=p.r_good, M=p.M, mixture=mix, behaviour=beh)]
    h = federation.run_federation(xi, specs, p.T, seed_fed, controller="paper", ema_alpha=p.ema_alpha,
                                  known_r=True, **kwargs)
    return h, beh.fake(p.N), xi


def test_none_is_the_papers_server_and_voted_the_default():
    p = adversarial.AdversarialParams(N=60, M=60, T=3, attacks=("poison",), defenses=("none", "voted"),
                                      controllers=("paper",), t_new=None, seeds=1)
    res = adversarial.run(p, 4)
    paper, fake, xi = _one_poison_run(p, 4, acceptance="paper")
    default, _, _ = _one_poison_run(p, 4)          # no keyword: the library's default
    for di, h in enumerate((paper, default)):
        np.testing.assert_array_equal(res.magnetization[0, 0, di, 0], h.magnetization)
        np.testing.assert_array_equal(res.spurious[0, 0, di, 0], h.spurious)
        np.testing.assert_array_equal(res.fake_in_memory[0, 0, di, 0],
                                      [float(attacks.fake_in_memory(pt, fake, xi)) for pt in h.patterns])
    # the two servers differ: the paper's stores the lone poisoner's fake, the default does not
    assert res.fake_in_memory[0, 0, 0, 0].max() == 1.0 and res.fake_in_memory[0, 0, 1, 0].max() == 0.0
    assert adversarial.defense_label("none") == "paper (mean)"
    assert adversarial.defense_label("voted") == "voted (default)"
    assert adversarial.defense_label("fresh") == "fresh"
    assert adversarial.defense_label("support") == "support"
    with pytest.raises(ValueError, match="name"):
        adversarial.defense_label("mean")


@pytest.mark.parametrize("certified", ["voted", "fresh"])
def test_certified_acceptances_keep_a_lone_poisoners_fake_out(certified):
    """Every single poisoner against the voted (default) and the fresh acceptance: its fake never
    in memory, no spurious pattern at the last round, the archetypes kept; the paper's server
    stores every fake."""
    p = adversarial.AdversarialParams(N=60, M=60, T=4, attacks=("poison", "hidden", "targeted"),
                                      defenses=("none", certified), controllers=("paper", "novelty"),
                                      t_new=None, seeds=2)
    res = adversarial.run(p, 3)
    assert np.all(res.fake_in_memory[:, :, 0].max(axis=-1) == 1.0)     # the attack is real
    assert np.all(res.fake_in_memory[:, :, 1] == 0.0)
    assert np.all(res.spurious[:, :, 1, :, -1] == 0)
    assert np.all(res.magnetization[:, :, 1, :, -1] >= 0.95)


def test_presets_and_tables_show_both_servers():
    assert adversarial.DEFAULT_DEFENSES[:2] == ("none", "voted")
    assert set(adversarial.DEFAULT_DEFENSES) | {"fresh"} == set(adversarial.DEFENSES)
    assert adversarial.PRESETS["paper"].defenses == ("none",)
    for preset in ("book", "full"):
        assert adversarial.PRESETS[preset].defenses == adversarial.DEFAULT_DEFENSES
        assert adversarial.TRADEOFF_PRESETS[preset].defenses == adversarial.DEFAULT_DEFENSES
    p = adversarial.AdversarialParams(**{**TINY, "attacks": ("poison",), "defenses": ("none", "voted", "support")})
    res = adversarial.run(p, 0)
    grid = repr(adversarial.grid_table(res, "paper"))
    assert "| poison | paper (mean) |" in grid and "| poison | voted (default) |" in grid
    sup = repr(adversarial.support_table(res))
    assert "| voted (default) | poison | either |" in sup and "| paper (mean) | poison | either |" in sup
    assert "paper (mean), voted (default), support" in repr(adversarial.setting_table(p))
    paper = repr(adversarial.paper_table(res, np.array([0.0078])))
    s = {d: res.summary[f"poison/{d}/paper"]["fake_any_fraction"] for d in ("none", "support", "voted")}
    assert (f"| fake stored, poison | robust | {100 * s['none']:.0f}% / {100 * s['support']:.0f}% / "
            f"{100 * s['voted']:.0f}% |") in paper


@pytest.mark.parametrize("defense, against", [("voted", "the voted acceptance (the default)"),
                                              ("fresh", "the fresh acceptance")])
def test_near_copy_sweep_against_the_certified_acceptances(defense, against):
    sweep = adversarial.near_copy_sweep((0.9,), N=40, M=40, N_fed=40, T=3, seeds=1, rng=0, defense=defense)
    assert sweep.params["defense"] == defense
    t = repr(adversarial.near_copy_table(sweep))
    assert t.startswith(f"**A near-copy of archetype 0 against {against} (")
    with pytest.raises(ValueError, match="defense"):
        adversarial.near_copy_sweep((0.9,), N=40, M=40, N_fed=40, T=3, seeds=1, defense="median")
