"""The structured page's tables (issue 17 item 3): one titled table per output, built from a
small run; every number is the result's own, formatted as the page prints it."""

from __future__ import annotations

import numpy as np
import pytest

from fedlam.experiments import structured
from fedlam.experiments._common import TitledTable


@pytest.fixture(scope="module")
def res():
    p = structured.StructuredParams(rs=(0.6,), decorrelated=(False, True), T=2, M_total=60, seeds=1,
                                    Ks=(3, 4), n_subsets=1, examples_per_class=30, fed_subsets=1, fed_T=2,
                                    fed_examples_per_class=10)
    return structured.run(p, 9)


def _rows(table: TitledTable) -> list[str]:
    return [ln for ln in repr(table).splitlines() if ln.startswith("| ")][1:]


def test_setting_and_overlap_tables(res):
    t = structured.setting_table(res.params)
    assert isinstance(t, TitledTable) and "| channel quality r | 0.6 |" in repr(t)
    ov = structured.overlap_table(res)
    rows = _rows(ov)
    assert len(rows) == 6  # three pairs, three surrogates
    assert rows[2] == (f"| bass – motorbike | {res.archetype_overlaps[0][1, 2]:.3f} | "
                       f"{res.archetype_overlaps[1][1, 2]:.3f} |")
    own = (res.archetypes[0].astype(float) * res.archetypes[1]).sum(axis=1) / 784
    assert rows[4] == f"| bass: surrogate with its prototype | — | {own[1]:.3f} |"
    with pytest.raises(TypeError, match="res must be a StructuredResult"):
        structured.overlap_table(res.params)
    with pytest.raises(TypeError, match="params must be a StructuredParams"):
        structured.setting_table(res)


def test_part1_tables(res):
    ex = _rows(structured.example_table(res))
    m = (res.examples[0].astype(float) * res.archetypes[0]).sum(axis=1) / 784
    assert ex == ["| 0.6 | " + " | ".join(f"{x:.3f}" for x in m) + " |"]
    mag = structured.magnetization_table(res)
    assert f"{res.magnetization.min():.3f})" in mag.title and len(_rows(mag)) == 2
    assert len(_rows(structured.reconstruction_table(res))) == 2
    paper = _rows(structured.paper_table(res))
    assert len(paper) == 2 and paper[0].startswith("| 0.6 raw | slower, wider bands | "
                                                  f"{min(res.summary['r=0.6/raw']['final_magnetization_mean']):.2f} | ")
    # numbers only (the reasons are written on the page): the weakest spike N r^2 g_K / (K (1 - r^2))
    g = np.linalg.svd(res.archetypes[0].astype(float) / np.sqrt(784), compute_uv=False) ** 2
    assert paper[0].count(" | ") == 5 and paper[0].endswith(f" | {784 * 0.36 / 0.64 / 3 * g.min():.0f} |")
    assert "why" not in repr(structured.paper_table(res))


def test_part2_tables(res):
    sub = _rows(structured.subset_table(res))
    assert len(sub) == 3 and sub[0].startswith("| 3 (paper) | 3 |")
    s_span, s_lam = res.params.searches.index("span"), res.params.searches.index("lam")
    rec = res.single_recovered[1, :, 0]  # K = 4, exact operator: recovered per subset and search
    omax = res.subset_overlap_max[1]
    assert sub[2].startswith(f"| 4 | 4 | {omax.min():.2f}–{omax.max():.2f} | ")
    sp = res.single_spurious[1, :, 0, s_span].sum()
    assert f" | {rec[:, s_span].sum()}{f' ({sp})' if sp else ''} \\| " in sub[2]
    det = _rows(structured.subset_detail_table(res))
    assert len(det) == 2
    k4 = f"{res.single_recovered[1, 0, 0, s_span]} \\| {res.single_recovered[1, 0, 0, s_lam]}"
    assert det[1].startswith(f"| 4 | 0 | {res.subset_overlap_max[1, 0]:.2f} | {k4} |")
    fed = _rows(structured.federation_table(res))
    assert len(fed) == 2 and fed[0].startswith("| 3 | 0 | 0.6 | 30 | " + " ".join(map(str, res.fed_k_hat[0, 0, 0])))
    assert np.isfinite(res.fed_min_m).all()


def test_mean_structure():
    """The mean component's weight is 1 + (K - 1) q_bar and bounds the top eigenvalue of the exact
    operator; the paper's silhouettes' top eigenvector is the mean pattern's direction."""
    from fedlam import data

    rng = np.random.default_rng(3)
    for xi in (data.structured_archetypes(), rng.choice(np.array([-1, 1], dtype=np.int8), (5, 300))):
        K, N = xi.shape
        s = structured.mean_structure(xi)
        J = xi.T.astype(float) @ xi.astype(float) / N
        w, V = np.linalg.eigh(J)
        assert np.allclose(s["gram_eigenvalues"], w[::-1][:K])
        assert np.isclose(s["mean_weight"], 1 + (K - 1) * s["q_bar"]) and w[-1] >= s["mean_weight"] - 1e-12
        mean = xi.mean(axis=0)
        assert np.isclose(s["cos_top_mean"], abs(V[:, -1] @ mean) / np.linalg.norm(mean))
        assert np.allclose(s["top_share"], (xi @ V[:, -1]) ** 2 / N)
    assert structured.mean_structure(data.structured_archetypes())["cos_top_mean"] > 0.99
    with pytest.raises(ValueError, match="K >= 2"):
        structured.mean_structure(np.ones((1, 10), dtype=np.int8))
