"""The structure-learning baselines (``gflownet_measure.jsp_gfn.baselines.bootstrap``, ``gflownet_measure.jsp_gfn.baselines.dibs``) and their registry (``gflownet_measure.jsp_gfn.baselines.structure``).

Problem: ``simulate_er(d=5, edges_per_node=1, n_train=500, seed=0)``, 4 edges with :math:`|\\theta| \\ge 0.31` and
noise std 0.1, so every true edge has a partial correlation far beyond any test's threshold at N = 500 and is found
on every resample. A non-edge enters a resample's graph when the bootstrap noise pushes its statistic over the
threshold: the resampling adds a second copy of the sampling noise, so the BIC gain of a null edge is about
:math:`2 \\cdot \\chi^2_1 / 2` against the penalty :math:`\\tfrac12 \\log N = 3.1`, i.e. about
:math:`P(\\chi^2_1 > 3.1) = 8\\%` per non-edge (measured 6-18% over 200 resamples; PC at :math:`\\alpha = 0.05`:
2-14%). Hence the recovery check: every true edge in at least 90% of the B = 20 resamples and the majority
skeleton (edges in more than half of them; Friedman et al. 1999's bootstrap confidence) equal to the truth;
an exact skeleton on every resample would be the wrong target.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import SMALL_BUDGET as BUDGET
from gflownet_measure.jsp_gfn.baselines.mcmc import mh_mc3
from gflownet_measure.jsp_gfn.baselines.structure import STRUCTURE_BASELINES, available, load, sample
from gflownet_measure.jsp_gfn.bayesnets.cpds import make_model
from gflownet_measure.jsp_gfn.bayesnets.dags import is_dag
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian

B = 20  # bootstrap resamples per run (about 0.5 s for GES, 0.25 s for PC at d = 5, N = 500)


@pytest.fixture(scope="module")
def problem():
    sim = simulate_er(d=5, edges_per_node=1, n_train=500, n_valid=0, seed=0)
    return sim, LinearGaussian(sim.train)


# ---------------------------------------------------------------- registry


def test_registry_reports_a_missing_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "causallearn", None)  # import causallearn now raises ModuleNotFoundError
    ok, reason = available("b-ges")
    assert not ok and reason == "causal-learn is not installed: pip install 'gflownet-measure[baselines]'"
    with pytest.raises(ImportError, match="b-pc.*causal-learn is not installed"):
        load("b-pc")


def test_registry_rejects_an_unknown_name():
    assert tuple(STRUCTURE_BASELINES) == ("gibbs", "mh", "mc3-collapsed", "b-ges", "b-pc", "dibs", "bcd", "vbg")
    with pytest.raises(ValueError, match="unknown structure baseline 'ges'; choose one of"):
        available("ges")


@pytest.mark.slow  # a fresh interpreter imports torch: about 2.4 s
def test_importing_the_registry_imports_no_baseline_package():
    code = "import sys, gflownet_measure.jsp_gfn.baselines.structure; print(any(m in sys.modules for m in ('causallearn', 'dibs', 'jax')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_sample_runs_a_baseline_with_the_budget_as_its_arguments(problem):
    _, model = problem
    samples, extra = sample("mh", model, BUDGET)
    # 40 samples over 2 chains, thinned 60 // 20 = 3 after 30 steps of burn-in: the same call made by hand
    direct = mh_mc3(model, n_samples=20, burn_in=30, thin=3, n_chains=2, seed=3, theta_step=0.1)
    assert torch.equal(samples.graphs, direct.graphs) and torch.equal(samples.thetas, direct.thetas)
    assert extra == {"acceptance": direct.acceptance}


def test_gibbs_runs_on_a_model_without_a_conjugate_posterior():
    """Gibbs-MC3 moves the MLP's weights by MALA (section 5.2 runs it on MLP CPDs): weights on the sampled graphs' edges only."""
    nonlinear = make_model("mlp", torch.randn(30, 3, generator=torch.Generator().manual_seed(0)))
    samples, extra = sample("gibbs", nonlinear, BUDGET)
    assert samples.graphs.shape == (40, 3, 3) and 0 <= extra["acceptance"] <= 1
    assert not (samples.thetas[~nonlinear.active(samples.graphs)] != 0).any()


def test_sample_says_why_a_baseline_refuses_a_model():
    nonlinear = make_model("mlp", torch.randn(30, 3, generator=torch.Generator().manual_seed(0)))
    assert sample("bcd", nonlinear, BUDGET).startswith("BCD Nets here is a linear-Gaussian SEM")
    wide = LinearGaussian(torch.randn(30, 8, generator=torch.Generator().manual_seed(0)))
    assert sample("bcd", wide, BUDGET) == "BCD Nets here is a linear-Gaussian SEM whose permanent is enumerated: linear models with d <= 7 only"
    assert sample("vbg", nonlinear, BUDGET) == "VBG draws theta from the linear-Gaussian posterior: linear models only"
    with pytest.raises(ValueError, match="unknown structure baseline 'ges'"):
        sample("ges", wide, BUDGET)


# ---------------------------------------------------------------- bootstrap GES / PC


@pytest.mark.parametrize("name", ["b-ges", "b-pc"])
def test_bootstrap_recovers_the_skeleton(problem, name):
    pytest.importorskip("causallearn")
    sim, model = problem
    run = load(name)
    out = run(model, n_samples=B, seed=0)
    d = model.d
    assert out.graphs.shape == (B, d, d) and out.graphs.dtype == torch.bool and out.discarded == 0
    assert is_dag(out.graphs).all()
    assert len(out.thetas) == B and torch.isfinite(out.thetas).all()
    assert (out.thetas.reshape(B, d, d)[~out.graphs] == 0).all()  # [B, d, d] or flat row-major [B, d * d]
    frequency = (out.graphs | out.graphs.mT).double().mean(0)
    truth = sim.adj | sim.adj.T
    assert frequency[truth].min() >= 0.9
    assert torch.equal(frequency > 0.5, truth)
    again = run(model, n_samples=B, seed=0)
    assert torch.equal(again.graphs, out.graphs) and torch.equal(again.thetas, out.thetas)
    assert not torch.equal(run(model, n_samples=B, seed=1).graphs, out.graphs)


def test_bootstrap_rejects_a_model_that_is_not_linear(problem):
    pytest.importorskip("causallearn")
    from gflownet_measure.jsp_gfn.baselines.bootstrap import bootstrap_ges

    with pytest.raises(ValueError, match="model must be a LinearGaussian"):
        bootstrap_ges(object(), n_samples=1)


def _pdag(d: int, directed=(), undirected=()) -> np.ndarray:
    """causal-learn's encoding: ``[j, i] = 1, [i, j] = -1`` is ``i -> j``; ``-1, -1`` is ``i - j``."""
    pdag = np.zeros((d, d), dtype=int)
    for i, j in directed:
        pdag[i, j], pdag[j, i] = -1, 1
    for i, j in undirected:
        pdag[i, j] = pdag[j, i] = -1
    return pdag


@pytest.fixture
def extensions():
    """``extensions(pdag, n)``: the set of edge lists of ``n`` seeded :func:`random_extension` draws, each checked acyclic with the PDAG's skeleton."""
    pytest.importorskip("causallearn")
    from gflownet_measure.jsp_gfn.baselines.bootstrap import random_extension

    def draw(pdag: np.ndarray, n: int) -> set[tuple]:
        rng = np.random.default_rng(0)
        out = set()
        for _ in range(n):
            dag = random_extension(pdag, rng)
            assert is_dag(torch.from_numpy(dag)[None]).all() and ((dag | dag.T) == (pdag != 0)).all()
            out.add(tuple(map(tuple, np.argwhere(dag).tolist())))
        return out

    return draw


def test_random_extension_draws_every_member_of_a_cpdag_and_only_those(extensions):
    # 0 - 1 - 2: its class is 0 -> 1 -> 2, 0 <- 1 <- 2, 0 <- 1 -> 2 (not the collider 0 -> 1 <- 2)
    assert extensions(_pdag(3, undirected=[(0, 1), (1, 2)]), 200) == {((0, 1), (1, 2)), ((1, 0), (2, 1)), ((1, 0), (1, 2))}
    # 0 -> 2 <- 1 - 3: the directed edges stay, and 3 -> 1 would make no new v-structure, so both ways
    assert extensions(_pdag(4, directed=[(0, 2), (1, 2)], undirected=[(1, 3)]), 100) == {((0, 2), (1, 2), (1, 3)), ((0, 2), (1, 2), (3, 1))}


def test_random_extension_of_a_cyclic_pdag_is_a_dag(extensions):
    """PC can return a directed cycle; the fallback still gives DAGs with the same skeleton."""
    assert len(extensions(_pdag(4, directed=[(0, 1), (1, 2), (2, 0)], undirected=[(2, 3)]), 100)) > 1


# ---------------------------------------------------------------- DiBS


def test_dibs_weight_orientation_on_two_nodes():
    """dibs-lib's linear likelihood reads ``W[i, j]`` as the weight of ``i -> j``; :func:`flat_thetas` puts it at ``i * d + j``."""
    pytest.importorskip("dibs")
    import jax.numpy as jnp
    from dibs.models import LinearGaussian as DibsLinearGaussian

    from gflownet_measure.jsp_gfn.baselines.dibs import flat_thetas

    rng = np.random.default_rng(0)
    x0 = rng.normal(size=50)
    x = np.stack([x0, 2.0 * x0 + 0.1 * rng.normal(size=50)], 1)  # 0 -> 1, weight 2
    g = np.array([[0, 1], [0, 0]])
    w = np.array([[0.0, 2.0], [0.0, 0.0]])
    lik = float(
        DibsLinearGaussian(n_vars=2, obs_noise=0.01).log_likelihood(
            x=jnp.asarray(x), theta=jnp.asarray(w), g=jnp.asarray(g), interv_targets=jnp.zeros_like(x, dtype=bool)
        )
    )
    resid = np.stack([x[:, 0], x[:, 1] - 2.0 * x[:, 0]], 1)
    expected = float(np.sum(-0.5 * resid**2 / 0.01 - 0.5 * np.log(2 * np.pi * 0.01)))
    assert lik == pytest.approx(expected, rel=1e-5)
    assert flat_thetas(g[None], w[None]).tolist() == [[0.0, 2.0, 0.0, 0.0]]


def test_dibs_returns_acyclic_graphs(problem):
    pytest.importorskip("dibs")
    _, model = problem
    out = load("dibs")(model, n_samples=4, seed=0, steps=200, edges_per_node=1.0)
    d = model.d
    assert out.graphs.shape[1:] == (d, d) and out.graphs.dtype == torch.bool
    assert len(out.graphs) + out.discarded == 4 and len(out.graphs) >= 1
    assert is_dag(out.graphs).all()
    assert out.thetas.shape == (len(out.graphs), d * d) and out.thetas.dtype == torch.float64
    assert (out.thetas.view(-1, d, d)[~out.graphs] == 0).all()


def test_dibs_rejects_bad_arguments(problem):
    pytest.importorskip("dibs")
    from gflownet_measure.jsp_gfn.baselines.dibs import joint_dibs

    _, model = problem
    with pytest.raises(ValueError, match="the linear model needs a LinearGaussian"):
        joint_dibs(object())
    with pytest.raises(ValueError, match="lacks data, obs_var, prior_var"):
        joint_dibs(object(), nonlinear=True)
    with pytest.raises(ValueError, match="Erdos-Renyi p = 2 k / \\(d - 1\\) in \\(0, 1\\); got k = 2.0 for d = 5"):
        joint_dibs(model, edges_per_node=2.0)
