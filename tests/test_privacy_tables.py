"""The privacy experiment page's tables and its frontier figure in rows (issue 17)."""

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pytest

from fedlam.experiments import privacy as X
from fedlam.privacy_plots import plot_frontier


@pytest.fixture(scope="module")
def small():
    p = X.PrivacyParams(N=60, K=2, r=0.9, Ls=(1, 2), Ms=(30,), epsilons=(0.5, 50.0, 5000.0),
                        attack_Ms=(4,), attack_epsilons=(1.0, 1e7), attack_restarts=16, seeds=1)
    return X.run(p, 3)


def _md(table):
    return table._repr_markdown_()


def test_setting_table_lists_the_parameters(small):
    md = _md(X.setting_table(small.params))
    assert md.startswith("**Setting**")
    assert "| dimension N, archetypes K, channel quality r | 60, 2, 0.9 |" in md
    assert "| clients L | 1, 2 |" in md
    assert "3 from 0.5 to 5000; delta = 1e-05" in md
    assert "2 from 1 to 1e+07; 16" in md
    with pytest.raises(TypeError, match="params must be a PrivacyParams"):
        X.setting_table(small)


def test_threshold_table_counts_the_grid(small):
    t = X.threshold_table(small)
    md = _md(t)
    assert md.startswith("**Recovery against the predicted threshold eps*: ")
    eps = np.asarray(small.params.epsilons)
    for li, L in enumerate(small.params.Ls):
        thr = small.eps_threshold[li, 0]
        s = small.summary[f"L={L}/M=30"]
        hi, lo = eps >= 3 * thr, eps <= 0.5 * thr
        ok = (small.magnetization[:, li, 0].min(axis=-1) >= 0.9) & (small.spurious[:, li, 0] == 0)
        none = small.k_hat[:, li, 0] == 0
        first = s["smallest_eps_all_seeds_all_archetypes_m>=0.9"]
        row = (f"| L = {L}, M = 30 | {thr:.3g} | {first:g} | {s['ratio_to_threshold']:.2f} | "
               f"{int(ok[:, hi].all(axis=0).sum())} of {int(hi.sum())} | "
               f"{int(none[:, lo].all(axis=0).sum())} of {int(lo.sum())} |")
        assert row in md, (row, md)
    with pytest.raises(TypeError, match="res must be a PrivacyResult"):
        X.threshold_table(small.params)


def test_attack_table_rows(small):
    md = _md(X.attack_table(small))
    assert md.startswith("**The attack on one noised upload: ")
    drown = small.eps_example[0]
    clean = small.attack_clean[:, 0].mean()
    assert small.summary["attack_M=4"]["smallest_eps_whole_batch_all_seeds"] is None
    assert f"| 4 | {clean:.2f} | never | {drown:.3g} | - |" in md
    # a batch recovered from some budget on: that budget and its ratio to the drowning budget
    summary = {**small.summary, "attack_M=4": {"eps_example": float(drown),
                                               "smallest_eps_whole_batch_all_seeds": 1e7}}
    md = _md(X.attack_table(dataclasses.replace(small, summary=summary)))
    assert f"| 4 | {clean:.2f} | 1e+07 | {drown:.3g} | {1e7 / drown:.0f} |" in md
    with pytest.raises(TypeError, match="res must be a PrivacyResult"):
        X.attack_table(None)


def test_plot_frontier_rows_draw_the_same_numbers(small, capsys):
    fig3 = plot_frontier(small)
    out3 = capsys.readouterr().out
    fig2 = plot_frontier(small, ncols=2)
    out2 = capsys.readouterr().out
    assert out2 == out3 and "eps grid: 0.5 50 5000" in out3
    assert tuple(fig3.get_size_inches()) == (14.0, 3.8)
    assert tuple(fig2.get_size_inches()) == (9.0, 6.6)
    visible = [ax for ax in fig2.axes if ax.axison]
    assert len(visible) == 3 and len(fig2.axes) == 4
    for a, b in zip(fig3.axes, visible, strict=True):
        for la, lb in zip(a.get_lines(), b.get_lines(), strict=True):
            np.testing.assert_array_equal(la.get_xydata(), lb.get_xydata())
    plt.close("all")
    for bad in (0, 4, 2.0, True):
        with pytest.raises(ValueError, match="ncols must be 1, 2 or 3"):
            plot_frontier(small, ncols=bad)


def test_frontier_table_lists_what_the_figure_prints(small, capsys):
    """frontier_table holds the numbers plot_frontier prints, one row per budget; with
    show_numbers=False the figure is the same and nothing is printed (issue 17 item 3)."""
    fig = plot_frontier(small)
    printed = capsys.readouterr().out.splitlines()[1:]
    md = _md(X.frontier_table(small))
    assert md.startswith("**Smallest m / K-hat / spurious patterns against the budget")
    assert "| eps | L = 1, M = 30 | L = 2, M = 30 |" in md
    cells = {}
    for line in printed:                         # "L = 1, M = 30: eps* = ..; min m = .. ; ..."
        case, rest = line.split(": eps* = ")
        parts = rest.split("; ")
        cells[case] = [p.split(" = ")[1].split() for p in parts[1:]]
    for ei, e in enumerate(small.params.epsilons):
        row = [f"{e:g}"] + [" / ".join(v[ei] for v in cells[f"L = {L}, M = 30"]) for L in (1, 2)]
        assert "| " + " | ".join(row) + " |" in md, (row, md)
    quiet = plot_frontier(small, show_numbers=False)
    assert capsys.readouterr().out == ""
    for a, b in zip(fig.axes, quiet.axes, strict=True):
        for la, lb in zip(a.get_lines(), b.get_lines(), strict=True):
            np.testing.assert_array_equal(la.get_xydata(), lb.get_xydata())
    plt.close("all")
    with pytest.raises(TypeError, match="show_numbers must be a bool"):
        plot_frontier(small, show_numbers=1)
    with pytest.raises(TypeError, match="res must be a PrivacyResult"):
        X.frontier_table(small.params)


def test_attack_curve_table_lists_what_the_figure_prints(small, capsys):
    from fedlam.privacy_plots import plot_attack_vs_epsilon

    plot_attack_vs_epsilon(small)
    line = capsys.readouterr().out.splitlines()[1]          # "M = 4: no noise x; noised: ..."
    clean = line.split("no noise ")[1].split(";")[0]
    noised = line.split("noised: ")[1].split(";")[0].split()
    md = _md(X.attack_curve_table(small))
    assert md.startswith("**Fraction of the batch the attack recovers")
    assert f"| no noise | {clean} |" in md
    for e, v in zip(small.params.attack_epsilons, noised, strict=True):
        assert f"| {e:g} | {v} |" in md
    plot_attack_vs_epsilon(small, show_numbers=False)
    assert capsys.readouterr().out == ""
    plt.close("all")
    with pytest.raises(TypeError, match="res must be a PrivacyResult"):
        X.attack_curve_table(None)


def test_noised_spectrum_table_matches_the_view(capsys):
    from fedlam.privacy_plots import noised_spectrum_table, noised_spectrum_view

    for M in (20, 60):                              # attack run (M <= N/4) and not run
        noised_spectrum_view(epsilon=50.0, M=M, N=120, r=0.8, K=2, seed=1)
        line = capsys.readouterr().out
        noised_spectrum_view(epsilon=50.0, M=M, N=120, r=0.8, K=2, seed=1, show_numbers=False)
        assert capsys.readouterr().out == ""
        md = _md(noised_spectrum_table(epsilon=50.0, M=M, N=120, r=0.8, K=2, seed=1))
        top = line.split("top eigenvalues ")[1].split(";")[0]
        edge = line.split("predicted edge ")[1].split(",")[0]
        out = line.split("outlier ")[1].split(";")[0]
        k_hat = line.split("K-hat = ")[1].split(";")[0]
        sigma = line.split("sigma = ")[1].split(";")[0]
        assert f"(sigma = {sigma}, threshold eps* = " in md
        assert f"| leading eigenvalues (K + 1 = 3) | {top} |" in md
        assert f"| predicted outlier, bulk edge | {out}, {edge} |" in md
        assert f"| server: K-hat; m | {k_hat}; " in md
        if M <= 30:
            n_att = line.split("attack recovers ")[1].split(" of")[0]
            assert f"| attack: examples recovered | {n_att} of {M} |" in md
        else:
            assert "attack not run" in line and "| not run (M > N/4) |" in md
    plt.close("all")
    with pytest.raises(TypeError, match="show_numbers must be a bool"):
        noised_spectrum_view(epsilon=50.0, M=20, N=120, r=0.8, K=2, show_numbers="no")


def test_plot_client_frontier_show_numbers(capsys):
    from fedlam.privacy_plots import plot_client_frontier

    fr = X.client_frontier(60, 20, 0.9, (50.0,), 1, factors=(0.5, 1.5), seeds=1)
    loud = plot_client_frontier(fr)
    out = capsys.readouterr().out
    assert out.startswith("epsilon:") and f"{fr.L_recovery[0]:7d}" in out
    quiet = plot_client_frontier(fr, show_numbers=False)
    assert capsys.readouterr().out == ""
    for la, lb in zip(loud.axes[0].get_lines(), quiet.axes[0].get_lines(), strict=True):
        np.testing.assert_array_equal(la.get_xydata(), lb.get_xydata())
    plt.close("all")
    with pytest.raises(TypeError, match="show_numbers must be a bool"):
        plot_client_frontier(fr, show_numbers=None)
