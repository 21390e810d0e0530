"""``data=pgmpy:NAME`` (gflownet_measure/jsp_gfn/bayesnets/datasets/pgmpy_networks.py): categorical rows simulated from pgmpy's bundled networks.

pgmpy is an optional extra: without it the data source is a one-line error naming the extra (tested everywhere), with
it the simulated rows follow the network (tested where pgmpy is installed)."""
import json
import sys

import numpy as np
import pytest
import torch

from gflownet_measure.environments import dag_params as env
from gflownet_measure.experiments.cli import main
from gflownet_measure.experiments.settings import build

pytestmark = pytest.mark.usefixtures("one_thread")


def _problem(**settings):
    return env.make_problem(build(env.DagParamsConfig, {"model": "categorical-mlp"} | settings))


def test_without_pgmpy_the_source_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pgmpy", None)  # an import of pgmpy now fails as if it were not installed
    with pytest.raises(ValueError, match=r"pip install -e '\.\[pgmpy\]'"):
        _problem(data="pgmpy:sachs")


def test_a_continuous_model_is_refused_before_simulating():
    with pytest.raises(ValueError, match="use model=categorical-mlp"):
        _problem(data="pgmpy:sachs", model="lingauss-diag")


def test_the_setting_keeps_the_prefix_as_given():
    """``pgmpy:sachs`` is not a file: the path setting does not make it absolute."""
    assert build(env.DagParamsConfig, {"data": "pgmpy:sachs"}).data == "pgmpy:sachs"


def test_sachs_network_rows_follow_its_root_distribution():
    """The 3-state Sachs network (11 variables, 17 edges): rows are state codes 0..2, seeded, and a root variable's
    frequencies over 4,000 rows match its CPD within 4 standard errors (sqrt(p (1 - p) / N) <= 0.008 each), which
    fails if the states were coded in another order than the network lists them."""
    pytest.importorskip("pgmpy")
    from pgmpy.readwrite import BIFReader

    from gflownet_measure.jsp_gfn.bayesnets.datasets.pgmpy_networks import _bundled, simulate_pgmpy

    sim = simulate_pgmpy("sachs", 3000, 1000, seed=3)
    assert sim.train.shape == (3000, 11) and sim.valid.shape == (1000, 11) and sim.train.dtype == torch.int64
    assert int(sim.adj.sum()) == 17 and not sim.adj.diagonal().any()
    assert set(torch.cat([sim.train, sim.valid]).unique().tolist()) <= {0, 1, 2}
    assert torch.equal(simulate_pgmpy("sachs", 3000, 1000, seed=3).train, sim.train)
    network = BIFReader(string=_bundled("sachs")).get_model()
    roots = [v for v in sim.names if not network.get_parents(v)]
    assert roots
    rows = torch.cat([sim.train, sim.valid])
    for v in roots:
        j = sim.names.index(v)
        cpd = network.get_cpds(v)
        p = np.asarray(cpd.values, dtype=float).reshape(-1)
        freq = np.bincount(rows[:, j].numpy(), minlength=len(p)) / len(rows)
        assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / len(rows)) + 1e-12), (v, freq, p)
        assert list(cpd.state_names[v]) == list(sim.states[j])


def test_the_networks_own_heldout_nll_against_pgmpy():
    """``valid_nll`` is -sum of log P(row) over the held-out rows; pgmpy's get_state_probability gives P(row) for a
    full assignment by its own route (the product of its CPD entries looked up by state name)."""
    pytest.importorskip("pgmpy")
    from pgmpy.readwrite import BIFReader

    from gflownet_measure.jsp_gfn.bayesnets.datasets.pgmpy_networks import _bundled, simulate_pgmpy

    sim = simulate_pgmpy("sachs", 50, 30, seed=1)
    network = BIFReader(string=_bundled("sachs")).get_model()
    rows = sim.valid.tolist()
    direct = -sum(np.log(network.get_state_probability({v: sim.states[j][r[j]] for j, v in enumerate(sim.names)})) for r in rows)
    assert sim.valid_nll == pytest.approx(direct, rel=1e-10)


def test_unknown_network_lists_the_valid_names():
    pytest.importorskip("pgmpy")
    with pytest.raises(ValueError, match="ships no network 'nope'; valid: .*sachs"):
        _problem(data="pgmpy:nope")


def test_jsp_gfn_runs_on_pgmpy_sachs(tmp_path):
    """End to end (tiny): the known graph gives E-SHD and AUROC, the held-out rows a held-out NLL."""
    pytest.importorskip("pgmpy")
    out = tmp_path / "run"
    args = ["data=pgmpy:sachs", "model=categorical-mlp", "n_data=40", "n_valid=20", "steps=2", "eval_every=2", "prefill=4", "batch_size=4", "theta_samples=2", "hidden=8", "posterior_samples=6", "fit_samples=2", "eval_samples=2", "num_envs=2"]
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *args]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["d"] == 11 and m["n_params"] == 6545 and m["heldout_nll_truth"] > 0
    assert np.isfinite(m["heldout_nll"]) and 0 <= m["auroc"] <= 1 and m["expected_shd"] >= 0
