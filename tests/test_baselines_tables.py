"""The baselines page's tables (issue 17 item 3): one titled table per output, built from a
small run; every number is the result's own, formatted as the page prints it."""

from __future__ import annotations

import numpy as np
import pytest

from fedlam.experiments import baselines as EB
from fedlam.experiments._common import TitledTable


@pytest.fixture(scope="module")
def res():
    p = EB.BaselinesParams(scenarios=("static", "drift", "novelty", "noise", "poison"), methods=EB.ALL_METHODS,
                           N=40, T=4, M=30, seeds=1, k_max=5, attack_starts=50, leak_Ms=(4, 30))
    return EB.run(p, 3)


def _rows(table: TitledTable) -> list[str]:
    return [ln for ln in repr(table).splitlines() if ln.startswith("| ")][1:]


def test_setting_quality_and_comparison(res):
    assert "| leakage curve: batch sizes M | 4, 30 |" in repr(EB.setting_table(res.params))
    with pytest.raises(TypeError, match="params must be a BaselinesParams"):
        EB.setting_table(res)
    q = EB.quality_table(res, EB.METHODS)
    assert len(_rows(q)) == 3 * 5
    s = res.summary["drift"]["spectral"]
    row = _rows(q)[3]
    assert row.startswith("| drift: final mean m | ") and f"| {s['final_mean_magnetization']:.2f} |" in row
    with pytest.raises(ValueError, match="methods must be among"):
        EB.quality_table(res, ("federated", "svm"))
    with pytest.raises(TypeError, match="res must be a BaselinesResult"):
        EB.quality_table(res.params)
    cmp_rows = _rows(EB.hebbian_comparison_table(res))
    fed, spec = (res.summary["drift"][m]["final_mean_magnetization"] for m in ("federated", "spectral"))
    assert len(cmp_rows) == 2 and cmp_rows[0].startswith(f"| drift | {fed:.2f} | {spec:.2f} |")
    assert cmp_rows[0].endswith(f"| {np.sqrt(40 / 30):.2f} | {np.sqrt(40 / 90):.2f} |")


def test_per_method_tables(res):
    i = {m: j for j, m in enumerate(res.params.methods)}
    b = _rows(EB.bytes_table(res))
    assert b[0] == "| federated | " + " | ".join(["3.3"] * 5) + " |"  # 4 * 40 * 41 / 2 bytes
    side = _rows(EB.side_by_side_table(res))
    assert len(side) == 8 and side[i["local"]].startswith("| local | ")
    v = res.summary["static"]["local"]
    assert side[i["local"]].startswith(
        f"| local | {v['final_mean_magnetization']:.2f}/{v['final_min_archetype_mean']:.2f} |")
    side_k = _rows(EB.side_by_side_table(res, "k"))
    assert side_k[i["local"]].startswith(f"| local | {v['final_spurious_mean']:.1f}/{v['final_k_mean']:.1f} |")
    with pytest.raises(ValueError, match="part must be 'm' or 'k'"):
        EB.side_by_side_table(res, "x")
    uk = _rows(EB.unknown_k_table(res))
    assert [r.split(" |")[0] for r in uk] == ["| static (K = 3)", "| noise (K = 3)", "| poison (K = 3)"]
    st = _rows(EB.streaming_table(res))
    m1 = res.magnetization["drift"][:, i["kfed"], -1, 0].mean()
    assert st[2].startswith(f"| kfed | {m1:.2f} |")
    assert len(_rows(EB.attacker_table(res))) == 12
    leak = _rows(EB.leak_table(res))
    assert leak[i["oracle"]] == "| oracle | " + " | ".join(["1.00 (1.00)"] * 5) + " |"
    curve = _rows(EB.leakage_curve_table(res))
    assert curve[3].startswith("| centroids, k′ = k_max = 5 | 1.00 |")
    wall = _rows(EB.wall_time_table(res))
    assert len(wall) == 8 and all(c.strip().endswith(" s") for c in wall[0].split("|")[2:-1])
    assert np.isfinite(res.wall_time["static"]).all()
