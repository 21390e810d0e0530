"""`run jsp-gfn --set data=sachs model=categorical-mlp` end to end (tiny), and its bad input: one line, exit 2, no run folder."""

import json

import numpy as np
import pytest

from conftest import check_contract
from gflownet_measure.experiments.cli import main

TINY = [
    "data=sachs",
    "model=categorical-mlp",
    "sachs_rows=20",
    "steps=4",
    "eval_every=2",
    "prefill=10",
    "batch_size=8",
    "theta_samples=2",
    "hidden=8",
    "batch_size_data=32",
    "posterior_samples=12",
    "fit_samples=4",
    "eval_samples=4",
]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
def test_sachs_run_writes_the_contract_and_the_edge_figure(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *TINY, "baseline=mh,gibbs", "mcmc_steps=8"]) == 0
    check_contract(out, "graphs,thetas")
    m = json.loads((out / "metrics.json").read_text())
    assert m["d"] == 11 and m["n_params"] == 6545 and "edge_rmse" not in m
    assert np.isfinite(m["heldout_nll"]) and 0 <= m["auroc"] <= 1 and m["expected_shd"] >= 0 and "log_pt_vs_log_r_slope" in m
    assert "log_pt_vs_log_r_slope_robust" not in m  # RANSAC only from 1,000 fitted points (jsp_gfn.MIN_ROBUST_FIT)
    assert np.isfinite(m["mh_heldout_nll"]) and 0 <= m["mh_acceptance"] <= 1  # MH-MC3 runs on categorical CPDs
    assert np.isfinite(m["gibbs_heldout_nll"]) and 0 <= m["gibbs_acceptance"] <= 1  # Gibbs-MC3 too, with MALA moves on theta
    assert json.loads((out / "baselines.json").read_text()) == {"mh": "ran", "gibbs": "ran"}
    assert (out / "edge_marginals.png").exists()


@pytest.mark.parametrize(
    "setting, message",
    [
        ("data=sachs model=lingauss-diag", "use model=categorical-mlp"),
        ("data=sachs model=categorical-mlp sachs_heldout=foo", "unknown condition 'foo'"),
        ("data=sachs model=categorical-mlp sachs_heldout=1,2,3,4,5,6,7,8,9", "at most 8"),
        ("data=sachs model=categorical-mlp subsample=9999", "subsample=9999 exceeds"),
        ("data={real} model=categorical-mlp", "integer states"),
        ("data={real} model=mlp bins=3", "leaves state"),
        ("data={real} model=mlp interventions={targets}", "unknown target 'PKC'"),
    ],
)
def test_bad_sachs_and_intervention_input_is_one_line(tmp_path, capsys, setting, message):
    (tmp_path / "real.csv").write_text("a,b\n0.5,1\n0.5,0\n0.5,2\n")
    (tmp_path / "targets.csv").write_text("intervention\n\nPKC\n\n")
    setting = setting.format(real=tmp_path / "real.csv", targets=tmp_path / "targets.csv")
    out = tmp_path / "r"
    assert main(["run", "jsp-gfn", "--out", str(out), "--set", *setting.split()]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())  # nothing written half-way
