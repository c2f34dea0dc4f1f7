"""``python -m fedlam.flower local``: bad options fail before any process starts (exit code 2, a
message naming the flag), and a federation whose sites all fail exits non-zero (issue 22 rows 1-3).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("flwr")

from fedlam.flower import deploy, local

BASE = ["local", "--clients", "2", "--rounds", "2", "--N", "20", "--M", "30"]

# (extra arguments, the flag the message must name, a phrase of the real problem)
BAD = [
    (["--privacy", '{"epsilon": -1, "delta": 1e-5}'], "--privacy", "epsilon"),
    (["--privacy", "{bad"], "--privacy", "JSON object"),
    (["--privacy", '{"epsilon": 1}'], "--privacy", "delta"),
    (["--lam-params", '{"bogus": 1}'], "--lam-params", "bogus"),
    (["--defense", "bogus"], "--defense", "bogus"),
    (["--client-options", '{"bogus": 1}'], "--client-options", "bogus"),
    (["--server-options", '{"bogus": 1}'], "--server-options", "bogus"),
    (["--clients", "5", "--server-options", '{"defense": "krum", "defense_params": {"f": 3}}'],
     "--server-options", "2 f + 3"),
    (["--rank", "500"], "--rank", "N = 20"),
    (["--clients", "3", "--min-clients", "10"], "--min-clients", "--clients: 3"),
    (["--kill-node", "0", "--kill-after-round", "-3"], "--kill-after-round", "-3"),
    (["--kill-after-round", "0"], "--kill-after-round", "--kill-node"),
    (["--timeout", "-5"], "--timeout", "-5"),
    (["--timeout", "nan"], "--timeout", "nan"),
    (["--round-timeout", "inf"], "--round-timeout", "inf"),
    (["--seed", "-1"], "--seed", "-1"),
    (["--mixture", "[0.5, 0.7, -0.2]"], "--mixture", "-0.2"),
    (["--mixture", "[0.5, 0.6, 0.1]"], "--mixture", "sum 1.2"),
    (["--behaviour", "1:evil"], "--behaviour", "evil"),
    (["--behaviour", '1:targeted:{"flip_fraction": 0.9}'], "--behaviour", "flip_fraction"),
    (["--behaviour", "7:flip"], "--behaviour", "[0, 2)"),
    (["--controller", "1.5"], "--controller", "1.5"),
    (["--fraction", "0"], "--fraction", "0"),
    (["--archetypes", "silhouettes"], "--archetypes silhouettes", "--N"),
    # client-level DP sends a data-dependent weight in clear with an adaptive rule: refused
    (["--privacy", '{"factory": "fedlam.privacy.ClientLevelMechanism", "clip": 0.5, "epsilon": 2, '
      '"delta": 1e-6}'], "--privacy", "adaptive weight rule"),
]


@pytest.fixture
def no_deploy(monkeypatch):
    """Fails the test if the command reaches the step that starts Flower processes."""
    def refuse(self):
        raise AssertionError("a Flower process was about to start")

    monkeypatch.setattr(deploy.LocalFederation, "__enter__", refuse)


@pytest.mark.parametrize("extra, flag, problem", BAD, ids=[" ".join(b[0])[:40] for b in BAD])
def test_bad_option_exits_2_naming_the_flag_before_any_process(extra, flag, problem, tmp_path, capsys,
                                                               no_deploy):
    out = tmp_path / "out"
    rc = local.main([*BASE, "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2, err
    msg = err.strip().splitlines()[-1]
    assert msg.startswith("python -m fedlam.flower local: error: ") and flag in msg and problem in msg, msg
    assert not out.exists()  # nothing written, nothing started


def test_options_of_synthetic_sites_refused_with_data_files(tmp_path, capsys, no_deploy):
    import numpy as np

    np.save(tmp_path / "a.npy", np.ones((4, 10), dtype=np.int8))
    rc = local.main(["local", "--data", str(tmp_path / "a.npy"), "--clients", "3", "--r", "0.7",
                     "--out", str(tmp_path / "o")])
    msg = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2 and "--clients, --r describe(s) synthetic sites" in msg, msg


def test_good_options_reach_the_deploy_step(tmp_path, no_deploy):
    """The same base command with valid options passes every check (the test above is not vacuous)."""
    with pytest.raises(AssertionError, match="about to start"):
        local.main([*BASE, "--out", str(tmp_path / "o"), "--privacy", '{"epsilon": 4, "delta": 1e-5}',
                    "--defense", "median", "--behaviour", '1:hidden:{"seed": 3}', "--min-clients", "2",
                    "--kill-node", "1", "--kill-after-round", "0", "--rank", "5", "--timeout", "60"])


def test_bad_option_as_a_process_no_flower_child(tmp_path):
    """The real command line: exit code 2, and no flower-superlink/supernode was ever started."""
    import psutil

    cmd = [sys.executable, "-m", "fedlam.flower", *BASE, "--out", str(tmp_path / "o"), "--privacy",
           '{"epsilon": -1, "delta": 1e-5}']
    proc = psutil.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    while proc.poll() is None:
        try:
            seen |= {" ".join(c.cmdline()) for c in proc.children(recursive=True)}
        except psutil.Error:
            pass
    _, err = proc.communicate()
    assert proc.returncode == 2, err
    assert "--privacy" in err and "epsilon" in err
    assert not [c for c in seen if "flower-" in c or "flwr" in c], seen


def _logs_tail(logs, chars: int = 1500) -> str:
    """The last ``chars`` characters of every log of a local federation (for a failure message)."""
    if not logs.is_dir():
        return "\n(no logs directory)"
    return "".join(f"\n--- {f.name} ---\n{f.read_text(errors='replace')[-chars:]}"
                   for f in sorted(logs.iterdir()) if f.is_file())


@pytest.mark.slow
def test_federation_whose_clientapps_all_fail_exits_nonzero(tmp_path, capsys, monkeypatch):
    """Every ClientApp raises (a privacy option that slipped past the checks): the command must
    not print "done" and exit 0; it exits 1 naming the round and the sites' error."""
    plan = local.plan_from_args

    def unchecked_plan(ns):
        rc, nodes = plan(ns)
        rc["client-options"] = json.dumps({"privacy": {"factory": "fedlam.privacy.GaussianMechanism",
                                                       "epsilon": -1, "delta": 1e-5}})
        return rc, nodes

    monkeypatch.setattr(local, "plan_from_args", unchecked_plan)
    feds = []
    enter = deploy.LocalFederation.__enter__

    def recording_enter(self):
        feds.append(self)
        return enter(self)

    monkeypatch.setattr(deploy.LocalFederation, "__enter__", recording_enter)
    out = tmp_path / "out"
    # a finite round-timeout: once (CI, 2026-11-28) a site's error reply never reached the
    # ServerApp, and with the default (wait for every site) the run waited out --timeout
    rc = local.main([*BASE, "--rounds", "1", "--out", str(out), "--no-figures", "--timeout", "600",
                     "--round-timeout", "240"])
    captured = capsys.readouterr()
    why = captured.err + _logs_tail(out / "logs")  # the sites' side too, should this fail again
    assert rc == 1, why
    assert "done" not in captured.out
    assert "round 0 got no upload" in captured.err and "epsilon" in captured.err, why
    rec = json.loads((out / "history.json").read_text())["rounds"][0]
    # no site uploaded; the errors that reached the server all name the bad epsilon
    assert rec["answered"] == [] and rec["lost"] == [0, 1] and rec["errors"], rec
    assert set(rec["errors"]) <= {"0", "1"}, rec
    assert all("epsilon" in e for e in rec["errors"].values()), rec["errors"]
    [fed] = feds
    assert not deploy.processes_with_env("FLWR_HOME", str(fed.home)), "processes outlived the run"


def test_a_stopped_run_says_which_round_waited_for_whom(tmp_path):
    """A run stopped by --timeout while a round waits for uploads: the message names the round,
    the clients asked and what --round-timeout would change."""
    path = tmp_path / "waiting.json"
    assert local._waiting_message(path) is None  # no round waiting
    path.write_text(json.dumps({"t": 3, "asked": [0, 2], "round_timeout": None}))
    msg = local._waiting_message(path)
    assert "round 3" in msg and "[0, 2]" in msg and "--round-timeout 0 waits" in msg
    path.write_text(json.dumps({"t": 1, "asked": [1], "round_timeout": 30.0}))
    assert "--round-timeout was 30 s" in local._waiting_message(path)
    path.write_text("{")  # cut off mid-write
    assert local._waiting_message(path) is None
