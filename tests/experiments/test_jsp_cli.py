"""Smoke tests of `gflownet-measure run jsp-gfn` and `jsp-table` (tiny settings; the run-folder contract, docs/references.md)."""
import json

import numpy as np
import pytest

from conftest import check_contract
from gflownet_measure.experiments.cli import main
from gflownet_measure.jsp_gfn.dag_params import objective as jsp_objective

TINY = ["steps=6", "eval_every=3", "prefill=10", "batch_size=8", "theta_samples=2", "hidden=8", "posterior_samples=50"]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("extra", [["model=lingauss-diag", "baseline=gibbs", "mcmc_steps=200", "mcmc_chains=5"], ["model=lingauss-full", "penalty=true", "batch_size_data=20", "graph_prior=erdos_renyi", "d=4", "edges_per_node=1", "ema=0"], ["max_parents=1", "baseline=mh", "mcmc_steps=200", "mcmc_burn_in=0.001", "mh_theta_step=0.001"]])
@pytest.mark.slow
def test_run_writes_the_contract(tmp_path, extra):
    out = tmp_path / "run"
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *TINY, *extra]) == 0
    check_contract(out, "graphs,thetas")
    m = json.loads((out / "metrics.json").read_text())
    d = m["d"]
    with np.load(out / "samples.npz") as z:
        g, t = z["graphs"], z["thetas"]
    assert g.shape == (50, d, d) and g.dtype == np.uint8 and t.shape == (50, d * d)  # the linear model's flat weights, row-major
    assert (t[g.reshape(50, d * d) == 0] == 0).all()  # weights only on edges
    assert 0 <= m["edge_rmse"] <= 1 and m["graph_kl"] >= -1e-9 and np.isfinite(m["theta_nll"]) and np.isfinite(m["theta_nll_exact"])
    assert 0 <= m["mean_field_edge_rmse"] <= 1 and m["mean_field_graph_kl"] >= -1e-12
    # the beam (128) holds every order of up to 5 edges; only the 6-edge DAGs of d = 4 (720 orders) leave an importance-
    # sampling term, whose 1,000 orders put it within a few percent (2e-4 nats on average measured on this run)
    assert 0 <= m["log_pt_estimate_abs_error"] < 0.05
    assert m["heldout_nll_bma"] <= m["heldout_nll"] and m["heldout_nll_bma_exact"] <= m["heldout_nll_exact"]  # the 100 held-out rows (Jensen)
    assert 0 <= m["edge_rmse_samples"] <= 1 and m["edge_rmse_samples"] != m["edge_rmse"]  # the papers' estimator, from the 50 samples
    if "ema=0" in extra:  # the last iterate is the sampler
        assert "last_edge_rmse" not in m and "last_edge_rmse_samples" not in m
    else:  # the weight average is the sampler, the last iterate is scored beside it, exactly and on 50 samples of its own
        assert 0 <= m["last_edge_rmse"] <= 1 and m["last_graph_kl"] >= -1e-9 and m["last_edge_rmse"] != m["edge_rmse"]
        assert 0 <= m["last_edge_rmse_samples"] <= 1 and m["last_edge_rmse_samples"] != m["last_edge_rmse"]
    assert (out / "posterior.png").exists() and (out / "edge_rmse.png").exists()
    for name in ("gibbs", "mh"):
        if f"baseline={name}" in extra:
            assert f"{name}_edge_rmse" in m and 0 <= m[f"{name}_acceptance"] <= 1 and f"{name}_heldout_nll" in m
            assert json.loads((out / "baselines.json").read_text()) == {name: "ran"}
            assert m[f"{name}_samples"] == (50 if "mcmc_chains=5" in extra else 48)  # 50 samples over 5 chains of 10, or 4 of 12
    if "max_parents=1" in extra:  # scored against the posterior over the DAGs the kernel reaches: a finite KL
        assert (g.sum(1) <= 1).all() and 0 <= m["graph_kl"] < float("inf")
    assert main(["run", "jsp-gfn", "--out", str(out), "--resume"]) == 0  # the replay buffer comes back with the checkpoint


class Interrupt(Exception):
    pass


@pytest.mark.slow
def test_resume_continues_the_uninterrupted_run(tmp_path, monkeypatch):
    """Killed after its step-4 checkpoint (eval_every 4, here an exception at the 6th update), then resumed: the same
    history and final metrics as a run never stopped, to the bit (one thread). This needs the checkpoint to hold the
    replay buffer and the graphs the environments are building, besides the weights, optimiser and RNG states."""
    args = ["--threads", "1", "--set", "steps=8", "eval_every=4", "prefill=10", "batch_size=8", "theta_samples=2", "hidden=8", "posterior_samples=50", "num_envs=4"]
    assert main(["run", "jsp-gfn", "--out", str(tmp_path / "full"), *args]) == 0
    real, calls = jsp_objective.transition_loss, []  # called by the registered objective undirected_subtb

    def failing(*a, **k):
        calls.append(1)
        if len(calls) == 6:
            raise Interrupt
        return real(*a, **k)

    monkeypatch.setattr(jsp_objective, "transition_loss", failing)
    with pytest.raises(Interrupt):
        main(["run", "jsp-gfn", "--out", str(tmp_path / "cut"), *args])
    monkeypatch.setattr(jsp_objective, "transition_loss", real)
    assert main(["run", "jsp-gfn", "--out", str(tmp_path / "cut"), "--resume"]) == 0

    def rows(run):
        return [{k: v for k, v in json.loads(r).items() if k != "seconds"} for r in (tmp_path / run / "history.jsonl").read_text().splitlines()]

    assert rows("cut") == rows("full")
    full, cut = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("full", "cut"))
    assert {k: v for k, v in cut.items() if "seconds" not in k} == {k: v for k, v in full.items() if "seconds" not in k}


def test_user_csv_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3,x\n")
    assert main(["run", "jsp-gfn", "--out", str(tmp_path / "r"), "--set", f"data={bad}"]) == 2
    err = capsys.readouterr().err
    assert "non-numeric" in err and "'x'" in err


def test_user_csv_runs(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 3))
    x[:, 2] += 0.8 * x[:, 0]
    csv = tmp_path / "data.csv"
    csv.write_text("a,b,c\n" + "\n".join(",".join(f"{v:.5f}" for v in row) for row in x) + "\n")
    out = tmp_path / "run"
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *TINY, f"data={csv}"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["d"] == 3 and "expected_shd" not in m and "heldout_nll" not in m  # no true graph and no held-out rows for a user's data


@pytest.mark.slow
def test_table_runs_and_prints_the_paper(tmp_path):
    out = tmp_path / "table"
    assert main(["run", "jsp-table", "--out", str(out), "--threads", "1", "--set", *TINY, "dims=3", "datasets=2"]) == 0
    check_contract(out, "graphs,thetas")
    table = (out / "table.txt").read_text()
    assert "edge_rmse" in table and "0.015" in table  # the paper's d = 3 value beside ours
    assert "mean_field_edge_rmse" in table
    assert (out / "table_d3.png").stat().st_size > 0  # the per-dataset figure beside the table
    m = json.loads((out / "metrics.json").read_text())
    assert "edge_rmse/d3/mean" in m and m["datasets"] == 2
    runs = [json.loads((out / "d3" / f"data{k}" / "metrics.json").read_text())["seconds"] for k in range(2)]
    assert m["seconds/d3/mean"] == pytest.approx(np.mean(runs)) and "seconds" in table  # the training time per dataset
    assert main(["run", "jsp-table", "--out", str(out), "--resume"]) == 0


@pytest.mark.parametrize("model, d1", [("lingauss-full", "0.019 ± 0.007"), ("lingauss-diag", "0.018 ± 0.005")])
def test_the_papers_values_stand_beside_the_sample_based_rows(tmp_path, monkeypatch, model, d1):
    """Both papers estimate marginals from K sampled graphs: their values are printed on the *_samples rows, never on
    the exact-P_T ones, and Table D.1's row is that of the theta density trained. Sub-runs faked (no training)."""
    import gflownet_measure.experiments.jsp_gfn as jsp

    def fake_runs(run_fn, jobs, resume, *args, **kwargs):
        for job in jobs:
            job.out.mkdir(parents=True)
            np.savez(job.out / "samples.npz", graphs=np.zeros((2, 5, 5), np.uint8))
        keys = jsp.TABLE_KEYS + tuple(f"gibbs_{k}" for k in jsp.BASELINE_KEYS[True])
        return [{key: 0.5 + 0.01 * k for key in keys} for k in range(len(jobs))]

    monkeypatch.setattr(jsp, "run_many", fake_runs)
    out = tmp_path / "table"
    assert main(["run", "jsp-table", "--out", str(out), "--set", "dims=5", "datasets=2", f"model={model}", "baseline=gibbs"]) == 0
    rows = {line.split()[0]: line for line in (out / "table.txt").read_text().splitlines() if line.strip()}
    assert d1 in rows["edge_rmse_samples"] and "0.018 " in rows["edge_rmse_samples"]  # D.1's row, Lahlou et al.'s Table 3 (d = 5)
    assert "0.998" in rows["edge_r_samples"] and "0.999" in rows["edge_r_samples"]  # the Pearson r of D.1 and Table 3
    assert rows["edge_rmse"].split()[1:] == ["0.505", "±", "0.0098"] and rows["edge_r"].split()[1:] == ["0.505", "±", "0.0098"]  # ours alone
    assert "0.357 ± 0.022" in rows["gibbs_edge_rmse"] and rows["gibbs_edge_r"].split()[-1] == "0.028"  # D.1's Gibbs-MC3 row
    assert f"paper (Deleu D.1, {model.split('-')[1]})" in (out / "table.txt").read_text()


@pytest.mark.slow
def test_a_table_of_one_dataset_has_no_spread_keys(tmp_path):
    """The quick preset's table has one dataset: no CI to report, and none written as NaN (the contract's finite numbers)."""
    out = tmp_path / "table"
    assert main(["run", "jsp-table", "--out", str(out), "--threads", "1", "--set", *TINY, "dims=3", "datasets=1"]) == 0
    check_contract(out, "graphs,thetas")
    m = json.loads((out / "metrics.json").read_text())
    assert "edge_rmse/d3/mean" in m and not any(k.endswith("/ci95") for k in m)


@pytest.mark.slow
def test_table_jobs_in_parallel_processes_give_the_same_runs(tmp_path):
    """jobs=2 trains the datasets in two spawned processes; each run is seeded on its own, so the results are the sequential ones."""
    args = ["--threads", "1", "--set", *TINY, "dims=3", "datasets=2"]
    assert main(["run", "jsp-table", "--out", str(tmp_path / "seq"), *args]) == 0
    assert main(["run", "jsp-table", "--out", str(tmp_path / "par"), *args, "jobs=2"]) == 0
    for k in range(2):
        seq, par = (json.loads((tmp_path / side / "d3" / f"data{k}" / "metrics.json").read_text()) for side in ("seq", "par"))
        assert par.keys() == seq.keys()
        assert all(par[key] == seq[key] for key in seq if "seconds" not in key)
    assert (tmp_path / "par" / "table.txt").exists()


@pytest.mark.parametrize("fraction", [0.5, 0.25])
def test_exploration_decays_over_the_anneal_fraction(fraction):
    """Uniform moves: probability 1 at the first update, linear down to min_exploration at anneal_fraction x steps, flat after."""
    from gflownet_measure.experiments.jsp_gfn import SETTINGS, JspGfnRun, exploration
    from gflownet_measure.experiments.settings import build, resolve

    settings = build(JspGfnRun, resolve(SETTINGS, {"steps": 1000, "anneal_fraction": fraction, "min_exploration": 0.1}))
    end = int(1000 * fraction)
    assert exploration(settings, 0) == 1.0
    assert exploration(settings, end // 2) == pytest.approx(0.55)
    assert exploration(settings, end) == pytest.approx(0.1) and exploration(settings, 999) == pytest.approx(0.1)


@pytest.mark.parametrize("model, n_params, head, fitted", [
    ("mlp", 8 * (5 * 8 + 11), ["fit_budget=0"], 4),
    ("lingauss-diag", 8 * 8, ["fit_budget=0"], 4),
    ("mlp", 8 * (5 * 8 + 11), ["theta_head=solver", "solver_steps=2", "solver_starts=1", "solver_iterations=10", "lookahead=auto", "fit_budget=0"], 4),  # a short L-BFGS: the run is the subject, not the modes
    # the default fit_budget: 4 updates allow 4 x 4 x (2 x 4 + 2) = 160 policy evaluations, under one graph's bound |E| (128 + 10)
    ("lingauss-diag", 8 * 8, ["theta_head=solver", "lookahead=auto", "fit_orders=10"], 2),
])
@pytest.mark.slow
def test_d20_runs_without_the_exact_posterior(tmp_path, model, n_params, head, fitted):
    """Beyond d = 5 nu is not enumerated: a run trains through the core's walkers on the sampled reference measures and
    reports the sample metrics (held-out NLL, E-SHD, AUROC) and the RANSAC fit of log P_T on log R; a linear model adds
    its graphs scored with exact conditional parameters (conditional_theta_metrics), the MLP has no closed form for them.
    The d20 preset's solver head and lookahead (auto: on for the linear model, off for the MLP) run the same way; the
    fit takes fit_samples samples with fit_budget=0, and the first few that the default budget allows otherwise."""
    out = tmp_path / "run"
    args = ["steps=4", "eval_every=2", "prefill=4", "batch_size=4", "theta_samples=2", "hidden=8", "posterior_samples=8", "eval_samples=4", "fit_samples=4", "num_envs=2"]
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *args, *head, "d=8", f"model={model}", "edges_per_node=2"]) == 0
    check_contract(out, "graphs,thetas")
    m = json.loads((out / "metrics.json").read_text())
    assert m["d"] == 8 and m["n_params"] == n_params and "edge_rmse" not in m
    assert np.isfinite(m["heldout_nll"]) and m["heldout_nll_bma"] <= m["heldout_nll"] and 0 <= m["auroc"] <= 1 and m["expected_shd"] >= 0
    assert m["fit_samples"] == fitted and "log_pt_vs_log_r_r" in m
    if model == "mlp":
        assert "heldout_nll_exact_theta" not in m and "graph_log_joint" not in m
    else:
        assert m["heldout_nll_bma_exact_theta"] <= m["heldout_nll_exact_theta"]
        assert np.isfinite(m["graph_log_joint"]) and np.isfinite(m["graph_log_joint_true"])
    with np.load(out / "samples.npz") as z:
        assert z["graphs"].shape == (8, 8, 8) and z["thetas"].shape == (8, m["n_params"])
    assert (out / "posterior.png").exists()


@pytest.mark.parametrize("objective", ["tb", "vargrad"])
@pytest.mark.slow
def test_trajectory_objectives_report_their_balance_beside_the_start(tmp_path, objective):
    """objective=tb (or vargrad) trains on whole trajectories (forward ones and ones walked back from the ring): the run
    reports the on-policy log-weight summary of the sampler and of its untrained start (start_*, measured before training
    and kept in start.json, so a resumed run reads the same), tb its learned log Z, started at the start's IW estimate."""
    out = tmp_path / "run"
    args = ["steps=6", "eval_every=3", "batch_size=4", "replayed=2", "hidden=8", "posterior_samples=20", "weight_samples=20", f"objective={objective}"]
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *args]) == 0
    check_contract(out, "graphs,thetas")
    m = json.loads((out / "metrics.json").read_text())
    for prefix in ("", "start_"):
        assert np.isfinite(m[prefix + "elbo"]) and m[prefix + "log_weight_sd"] >= 0 and 0 < m[prefix + "ess"] <= 1
        assert m[prefix + "iw_log_Z"] >= m[prefix + "elbo"] - 1e-9  # log-mean-exp >= mean (Jensen)
        assert 0 <= m[prefix + "edge_rmse"] <= 1
    assert ("log_Z" in m) == (objective == "tb")
    start = json.loads((out / "start.json").read_text())
    assert np.asarray(start["edge_marginals"]).shape == (3, 3) and start["elbo"] == m["start_elbo"]
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert all("log_weight_sd" in h for h in history)
    assert main(["run", "jsp-gfn", "--out", str(out), "--resume"]) == 0
    assert json.loads((out / "metrics.json").read_text())["start_elbo"] == m["start_elbo"]


@pytest.mark.slow
def test_a_gold_standard_scores_the_sampler_and_its_start_beyond_enumeration(tmp_path):
    """d = 8 (no exact posterior) with reference=mc3-collapsed: the sampler's and its untrained start's edge and path
    marginals against the collapsed MC3 gold standard, with the chains' diagnostics and the expected edge counts."""
    out = tmp_path / "run"
    args = ["d=8", "edges_per_node=2", "objective=tb", "steps=4", "eval_every=2", "batch_size=4", "hidden=8", "posterior_samples=20"]
    args += ["eval_samples=4", "weight_samples=8", "fit_samples=4", "fit_budget=0", "reference=mc3-collapsed", "reference_chains=2", "reference_steps=4000"]
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *args]) == 0
    m = json.loads((out / "metrics.json").read_text())
    for key in ("edge_rmse_reference", "path_rmse_reference", "start_edge_rmse_reference", "start_path_rmse_reference"):
        assert 0 <= m[key] <= 1
    assert m["reference_rhat"] > 0 and 0 <= m["reference_chain_spread"] <= 1 and 0 < m["reference_expected_edges"] < 28
    assert 0 <= m["expected_edges"] <= 28 and 0 <= m["start_expected_edges"] <= 28


@pytest.mark.parametrize(
    "setting, message",
    [
        ("exact=on d=8", "exact=on"),
        ("baseline=gibbs,foo", "unknown foo"),
        ("model=categorical-mlp", "categorical data"),
        ("objective=tb batch_size_data=20", "batch_size_data=20"),
        ("objective=tb replayed=50 ring_capacity=10", "ring_capacity=10"),
        ("objective=db", "objective"),
        ("reference=mc3-collapsed", "beyond the exact posterior"),
        ("reference=mc3-collapsed d=8 model=mlp", "closed-form"),
    ],
)
def test_bad_jsp_settings_are_one_line(tmp_path, capsys, setting, message):
    assert main(["run", "jsp-gfn", "--out", str(tmp_path / "r"), "--set", *setting.split()]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_a_baseline_that_is_not_installed_is_skipped_and_recorded(tmp_path, monkeypatch):
    """A table runs what is installed: a missing package is a line in baselines.json and the table, not a crash."""
    from gflownet_measure.jsp_gfn.baselines import structure

    monkeypatch.setattr(structure, "available", lambda name: (False, "causal-learn is not installed: pip install 'gflownet-measure[baselines]'"))
    out = tmp_path / "table"
    assert main(["run", "jsp-table", "--out", str(out), "--threads", "1", "--set", *TINY, "dims=3", "datasets=1", "baseline=b-ges"]) == 0
    assert json.loads((out / "d3" / "data0" / "baselines.json").read_text()) == {"b-ges": "skipped: causal-learn is not installed: pip install 'gflownet-measure[baselines]'"}
    assert "b-ges: skipped: causal-learn is not installed" in (out / "table.txt").read_text()


@pytest.mark.slow
def test_bcd_runs_beside_jsp_gfn_and_is_skipped_beyond_its_enumeration(tmp_path):
    """baseline=bcd (BCD Nets, gflownet_measure/jsp_gfn/baselines/bcd.py): scored like the other baselines at d = 3; at d = 8 its permanent over
    the d! orders is not enumerated, which baselines.json records instead of crashing."""
    out = tmp_path / "d3"
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *TINY, "d=3", "baseline=bcd", "bcd_steps=5"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert 0 <= m["bcd_edge_rmse"] <= 1 and m["bcd_samples"] == 50 and m["bcd_discarded"] == 0 and "bcd_theta_nll" in m
    assert json.loads((out / "baselines.json").read_text()) == {"bcd": "ran"}
    out = tmp_path / "d8"
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *TINY, "d=8", "baseline=bcd", "bcd_steps=5"]) == 0
    assert json.loads((out / "baselines.json").read_text()) == {"bcd": "skipped: BCD Nets here is a linear-Gaussian SEM whose permanent is enumerated: linear models with d <= 7 only"}


@pytest.mark.slow
def test_vbg_runs_beside_jsp_gfn_and_is_skipped_on_mlp_cpds(tmp_path):
    """baseline=vbg (VBG, gflownet_measure/jsp_gfn/baselines/vbg.py): scored like the other baselines at d = 3, its settings reaching it;
    on MLP CPDs, which its closed-form q(theta) cannot take, baselines.json records why."""
    out = tmp_path / "linear"
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *TINY, "d=3", "baseline=vbg", "vbg_steps=4", "vbg_rounds=2"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert 0 <= m["vbg_edge_rmse"] <= 1 and m["vbg_samples"] == 50 and m["vbg_discarded"] == 0 and "vbg_theta_nll" in m
    assert json.loads((out / "baselines.json").read_text()) == {"vbg": "ran"}
    out = tmp_path / "mlp"
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *TINY, "d=3", "model=mlp", "baseline=vbg", "vbg_steps=4"]) == 0
    assert json.loads((out / "baselines.json").read_text()) == {"vbg": "skipped: VBG draws theta from the linear-Gaussian posterior: linear models only"}
