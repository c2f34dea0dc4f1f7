"""Tests of ``python -m fedlam.reproduce``: argument validation and a tiny end-to-end run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fedlam import reproduce


def test_resolve_names():
    assert reproduce.resolve_names(None) == list(reproduce.NOTEBOOKS)
    assert reproduce.resolve_names(None, "full") == list(reproduce.NOTEBOOKS)
    # the paper preset selects the paper's own experiments; a notebook outside it runs when named
    assert reproduce.resolve_names(None, "paper") == list(reproduce.PAPER_NOTEBOOKS)
    assert reproduce.resolve_names(["privacy"], "paper") == ["privacy"]
    assert reproduce.resolve_names(["drift", "bbp"]) == ["bbp_panel", "drift"]
    with pytest.raises(ValueError, match="unknown experiment 'nope'"):
        reproduce.resolve_names(["nope"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--preset", "huge"], "--preset"),
        (["--only", "nothing"], "unknown experiment"),
        (["--jobs", "0"], "--jobs"),
        (["--jobs", "two"], "--jobs"),
        (["--timeout", "-1"], "--timeout"),
        (["--only", "bbp", "--param", "seeds"], "FIELD=VALUE"),
        (["--only", "bbp", "--param", "seeds=0"], "seeds"),
        (["--only", "bbp", "--param", "bogus=1"], "bogus"),
        (["--only", "bbp", "--notebooks", "/nonexistent/dir"], "notebooks not found"),
    ],
)
def test_parse_args_rejects(argv, message):
    with pytest.raises(ValueError, match=message):
        reproduce.parse_args(argv)


def test_out_must_not_be_a_file(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ValueError, match="--out"):
        reproduce.parse_args(["--out", str(f)])


def test_main_returns_2_before_any_work(tmp_path, capsys):
    out = tmp_path / "never"
    assert reproduce.main(["--only", "drift", "--jobs", "0", "--out", str(out)]) == 2
    assert not out.exists()
    assert "error: --jobs" in capsys.readouterr().err


def test_parse_args_defaults(tmp_path):
    plan = reproduce.parse_args(["--out", str(tmp_path), "--param", "seeds=3"])
    assert plan.preset == "book" and plan.jobs == 1
    assert plan.names == tuple(reproduce.NOTEBOOKS)
    assert dict(plan.overrides) == {"seeds": 3}


def test_save_helpers_are_noops_without_out_dir(tmp_path):
    reproduce.save_results({"a": 1}, None)
    reproduce.save_results({"a": 1}, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text()) == {"a": 1}


@pytest.mark.slow
def test_end_to_end_tiny_bbp(tmp_path):
    """One notebook through papermill at a tiny size: executed notebook, figures and JSON written."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fedlam.reproduce", "--only", "bbp", "--out", str(out),
           "--param", "seeds=1", "--param", "N=60", "--param", "Ms=[60, 120]"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["preset"] == "book" and summary["finished"] and summary["pending"] == []
    assert summary["not_run"] == [n for n in reproduce.NOTEBOOKS if n != "bbp_panel"]
    assert summary["load_average_start"] is None or len(summary["load_average_start"]) == 3
    [rec] = summary["notebooks"]
    assert rec["status"] == "ok" and rec["seconds"] > 0
    nb_dir = out / "bbp_panel"
    assert (nb_dir / "bbp_panel.ipynb").is_file()
    results = json.loads((nb_dir / "results.json").read_text())
    assert results["params"]["N"] == 60 and results["params"]["Ms"] == [60, 120]
    for stem in ("bbp_panel_A", "bbp_panel_B", "bbp_panel_C"):
        assert (nb_dir / f"{stem}.png").is_file() and (nb_dir / f"{stem}.pdf").is_file()


# --- bad input caught before any work (issue 8 §4), and the Dask scheduler option --------------

@pytest.mark.parametrize(
    "param, name",
    [("seeds=100000", "seeds"), ("N=10000000", "N"), ("Ms=[60, 1e12]", "Ms"), ("T=1000000", "T")],
)
def test_sizes_bounded_before_work(tmp_path, capsys, param, name):
    out = tmp_path / "never"
    assert reproduce.main(["--only", "bbp", "--param", param, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--param {name}=" in err and "must be <=" in err
    assert not out.exists()


def test_out_under_a_file_is_refused(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        reproduce.parse_args(["--out", str(f / "sub" / "dir")])


def test_out_unwritable_gives_clear_error(capsys):
    # /proc refuses new directories even for root: no traceback, exit code 2
    assert reproduce.main(["--only", "drift", "--out", "/proc/fedlam-reproduce-test"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "not writable" in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["nohost", "tcp://:80", "http://x:1", "tcp://x:port"])
def test_scheduler_address_validated(value):
    with pytest.raises(ValueError, match="--scheduler"):
        reproduce.parse_args(["--scheduler", value])


def test_scheduler_parsed(tmp_path):
    plan = reproduce.parse_args(["--out", str(tmp_path), "--scheduler", "127.0.0.1:8786"])
    assert plan.scheduler == "tcp://127.0.0.1:8786"
    plan = reproduce.parse_args(["--out", str(tmp_path), "--scheduler", "local", "--workers", "3"])
    assert plan.scheduler == "local" and plan.workers == 3
    assert reproduce.parse_args(["--out", str(tmp_path), "--scheduler", "local"]).workers == 2
    with pytest.raises(ValueError, match="--workers"):
        reproduce.parse_args(["--scheduler", "local", "--workers", "0"])


@pytest.mark.parametrize("extra", [[], ["--scheduler", "127.0.0.1:8786"]])
def test_workers_without_a_local_cluster_refused(extra, tmp_path):
    """--workers only means something for --scheduler local; elsewhere it was silently ignored."""
    with pytest.raises(ValueError, match="--workers sets the worker processes of --scheduler local"):
        reproduce.parse_args(["--out", str(tmp_path), "--workers", "2", *extra])


def test_unreachable_scheduler_clear_error(tmp_path, capsys):
    pytest.importorskip("distributed")
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = reproduce.main(["--only", "drift", "--out", str(tmp_path / "o"),
                         "--scheduler", f"tcp://127.0.0.1:{port}"])
    assert rc == 2
    assert "cannot reach a Dask scheduler" in capsys.readouterr().err


@pytest.mark.slow
def test_end_to_end_tiny_on_local_dask_cluster(tmp_path):
    """--scheduler local: a LocalCluster on 127.0.0.1 serves the notebook's seeds; the result
    equals the serial run's and no worker outlives the command."""
    pytest.importorskip("distributed")
    import psutil

    base = ["--only", "drift", "--param", "seeds=2", "--param", "N=40", "--param", "T=4",
            "--param", "M=30", "--param", 'controllers=[0.0, "novelty"]']
    outs = {}
    for name, extra in (("serial", []), ("dask", ["--scheduler", "local", "--workers", "2"])):
        out = tmp_path / name
        proc = subprocess.run([sys.executable, "-m", "fedlam.reproduce", *base, "--out", str(out), *extra],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        summary = json.loads((out / "summary.json").read_text())
        assert summary["scheduler"] == (None if name == "serial" else "local")
        outs[name] = json.loads((out / "drift" / "results.json").read_text())
    assert outs["serial"] == outs["dask"]
    assert not [p for p in psutil.Process().children(recursive=True) if "distributed" in " ".join(p.cmdline())]


# --- presets (issue 20): paper = the paper's experiments at its sizes and seeds; full = everything -------

def test_every_experiment_has_every_preset():
    import importlib

    from fedlam.experiments import adversarial

    assert reproduce.PRESET_NAMES == ("book", "paper", "full")
    for name, module in reproduce.NOTEBOOKS.items():
        mod = importlib.import_module(f"fedlam.experiments.{module}")
        assert set(mod.PRESETS) == set(reproduce.PRESET_NAMES), name
        for preset in reproduce.PRESET_NAMES:
            assert mod.make_params(preset) == mod.PRESETS[preset]
    assert set(adversarial.TRADEOFF_PRESETS) == set(reproduce.PRESET_NAMES)
    assert set(reproduce.PAPER_NOTEBOOKS) < set(reproduce.NOTEBOOKS)


def test_paper_presets_are_the_papers_experiments():
    """Sizes and seeds as stated in paper.tex (captions of the BBP, attacker, novelty and structured
    figures), and nothing beyond them in the paper preset of the adversarial experiment."""
    from fedlam.experiments import adversarial, bbp, novelty, structured

    b = bbp.make_params("paper")
    assert (b.N, b.seeds) == (400, 50)  # "averaged over 50 trials", N = 400
    a = adversarial.make_params("paper")
    assert (a.N, a.K, a.n_good, a.T, a.M, a.r_good, a.ema_alpha, a.seeds) == (1000, 3, 4, 10, 800, 0.9, 0.5, 20)
    assert a.attacks == ("noise",) and a.defenses == ("none",) and a.t_new is None and a.L == 5
    n = novelty.make_params("paper")
    assert (n.N, n.T, n.t_intro, n.ramp, n.K_old, n.K_new, n.L, n.r, n.seeds) == (400, 24, 12, 4, 3, 3, 3, 0.8, 30)
    s = structured.make_params("paper")
    assert (s.T, s.M_total, s.L, s.rs, s.controller, s.seeds) == (12, 4000, 3, (0.6, 0.8), 0.6, 10)
    # the grid and the sweep beyond the paper are the full preset's, at the same sizes and seeds
    f = adversarial.make_params("full")
    assert f.attacks == adversarial.ATTACKS and f.defenses == adversarial.DEFAULT_DEFENSES and f.seeds == 20
    assert (f.N, f.M, f.T) == (a.N, a.M, a.T)
    assert adversarial.make_tradeoff_params("full").seeds == 20
    assert adversarial.make_tradeoff_params("paper") == adversarial.make_tradeoff_params("book")
    assert structured.make_params("full").n_subsets > s.n_subsets


def test_help_states_each_presets_size_and_time(capsys):
    with pytest.raises(SystemExit):
        reproduce._build_parser().parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for preset in reproduce.PRESET_NAMES:
        assert f"{preset}:" in out
    assert "1400 federations" in out and "20 seeds" in out
    assert "_TIME" not in out  # no placeholder left
    import re

    for preset in ("paper", "full"):  # each states a time, estimated or measured
        part = out.split(f"{preset}:")[1].split("full:")[0] if preset == "paper" else out.split("full:")[1]
        assert re.search(r"(measured|estimated).*\d+(\.\d+)? (min|hours)", part), part


def test_paper_preset_plan(tmp_path):
    plan = reproduce.parse_args(["--preset", "paper", "--out", str(tmp_path)])
    assert plan.names == reproduce.PAPER_NOTEBOOKS
    plan = reproduce.parse_args(["--preset", "full", "--out", str(tmp_path)])
    assert plan.names == tuple(reproduce.NOTEBOOKS)
