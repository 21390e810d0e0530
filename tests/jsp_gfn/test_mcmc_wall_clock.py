"""MCMC baselines run for a wall-clock budget (``seconds=``; ``jsp-gfn --set mcmc_budget=matched``): the even thinning
of a chain of unknown length, the three MCMC baselines under a budget, and the bad values they refuse.

Problems: ``simulate_er(d, 1, N = 100, seed = 0)`` with the settings of ``make_problem`` (noise std 0.1,
:math:`\\sigma^2 = 0.01`, :math:`\\sigma_0^2 = 1`), enumerated exactly by :class:`ExactPosterior` at d = 4.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gflownet_measure.experiments.cli import main
from gflownet_measure.jsp_gfn.baselines.collapsed_mc3 import collapsed_mc3
from gflownet_measure.jsp_gfn.baselines.mcmc import gibbs_mc3, mh_mc3
from gflownet_measure.jsp_gfn.baselines.samples import Clock, EvenThinning
from gflownet_measure.jsp_gfn.bayesnets.cpds import make_model
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er
from gflownet_measure.jsp_gfn.bayesnets.exact_posterior import ExactPosterior
from gflownet_measure.jsp_gfn.bayesnets.structure_metrics import sample_features

torch.set_num_threads(1)


def _linear(d: int):
    sim = simulate_er(d, 1.0, 100, 0, seed=0, obs_std=0.1)
    return make_model("lingauss", sim.train, obs_var=0.01, prior_var=1.0)


@pytest.mark.parametrize("n_steps", [1, 7, 40, 41, 1000, 12345])
def test_even_thinning_keeps_evenly_spaced_states_of_any_run(n_steps):
    kept = EvenThinning(10)
    for t in range(1, n_steps + 1):
        if kept.due(t):
            kept.keep(t, t)
    assert len(kept.states) < 10 and kept.states == kept.steps  # at most capacity - 1 after a halving
    assert kept.steps == list(range(kept.thin, n_steps + 1, kept.thin))  # every multiple of thin: evenly spaced
    taken = kept.take(3, n_steps // 4)
    assert all(t > n_steps // 4 for t in taken) or taken == kept.states[-1:]  # after the burn-in (or the last state)
    assert len(taken) == min(3, len([t for t in kept.steps if t > n_steps // 4]) or 1)


def test_a_clock_stopped_at_its_least_steps_leaves_n_states_after_the_burn_in():
    """The guarantee :func:`sample_chains` and the collapsed chains rely on, for every stop at a kept state past ``least``."""
    for fraction in (0.0, 0.2, 0.5, 0.9):
        budget = Clock(1.0, fraction)
        kept = budget.thinning(25)
        for t in range(1, 5000):
            if kept.due(t):
                kept.keep(t, t)
                if t >= budget.least(25):
                    assert len(kept.take(25, int(fraction * t))) == 25, (fraction, t)


@pytest.mark.slow  # the chains run for their clock: about 2 s
def test_collapsed_mc3_under_a_clock_runs_its_time_and_matches_the_exact_posterior():
    model = _linear(4)
    out = collapsed_mc3(model, n_samples=500, n_chains=4, seed=0, seconds=2.0)
    assert out.graphs.shape == (2000, 4, 4) and out.thetas is not None and out.seconds >= 2.0
    # 4 chains x 0.5 s are hundreds of thousands of steps at d = 4 (the machine-independent floor: a chain of 2,000
    # kept states after thinning has ESS of hundreds); an edge marginal from 2,000 states has standard error at most
    # 0.5 / sqrt(ESS ~ 500) = 0.022, so RMSE 0.05 is a failure of the chains, not noise
    exact = ExactPosterior(model).features()["edge"]
    assert float((sample_features(out.graphs)["edge"] - exact).pow(2).mean().sqrt()) < 0.05


@pytest.mark.parametrize("fn", [gibbs_mc3, mh_mc3])
def test_gibbs_and_mh_under_a_clock_keep_n_samples_per_chain(fn):
    out = fn(_linear(3), n_samples=20, n_chains=3, seed=0, seconds=0.5)
    assert out.graphs.shape == (60, 3, 3) and out.thetas.shape == (60, 9) and out.seconds >= 0.5 and 0 <= out.acceptance <= 1


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"seconds": 0}, "seconds must be None"),
        ({"seconds": float("nan")}, "seconds must be None"),
        ({"seconds": -1.0}, "seconds must be None"),
        ({"seconds": 1.0, "burn_in_fraction": 1.0}, r"burn_in_fraction must be in \[0, 1\)"),
    ],
)
@pytest.mark.parametrize("fn", [collapsed_mc3, gibbs_mc3, mh_mc3])
def test_bad_clocks_are_one_line_errors(fn, kw, match):
    with pytest.raises(ValueError, match=match) as e:
        fn(_linear(3), **kw)
    assert "\n" not in str(e.value) and fn.__name__ in str(e.value)


@pytest.mark.slow
def test_jsp_gfn_matched_budget_gives_each_mcmc_baseline_the_training_wall_clock(tmp_path, one_thread):
    out = tmp_path / "run"
    tiny = ["steps=6", "eval_every=3", "prefill=10", "batch_size=8", "theta_samples=2", "hidden=8", "posterior_samples=24"]
    assert main(["run", "jsp-gfn", "--out", str(out), "--threads", "1", "--set", *tiny, "baseline=mh,mc3-collapsed", "mcmc_budget=matched"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    for name in ("mh", "mc3_collapsed"):
        assert m[f"{name}_seconds"] >= m["seconds"] and m[f"{name}_samples"] == 24  # 4 chains of 6, thinned evenly
        assert np.isfinite(m[f"{name}_edge_rmse"])
