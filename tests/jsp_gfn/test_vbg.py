"""VBG (``gflownet_measure.jsp_gfn.baselines.vbg``): its two closed forms against independent computations, and its edge marginals
against the exact posterior of a d = 3 linear-Gaussian problem.

Problem: the ``d3_problem`` fixture (``tests/conftest.py``; ``simulate_er(d=3, edges_per_node=1, n_train=100, seed=6)``: the full DAG
0 -> 1, 2 -> 0, 2 -> 1; exact edge marginals 0.94 (0 -> 1), 0.058 (1 -> 0), 1.000 (2 -> 0), 1.000 (2 -> 1), under 0.001
elsewhere). VBG's q(G) q(theta) is a mean-field approximation fitted by reverse KL, so it seeks a mode: the point mass on the
MAP DAG already scores edge RMSE 0.034, and 1,000 updates reach 0.034 (measured). The end-to-end check asks for the MAP
skeleton, the more likely orientation of each of its pairs and an edge RMSE below 0.1 (against 0.48 for 1/2 on every edge),
as for BCD Nets.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from gflownet_measure.checks import check_graph
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.jsp_gfn.baselines.structure import STRUCTURE_BASELINES, available, load
from gflownet_measure.jsp_gfn.baselines.vbg import MeanFieldLinearGaussian, update_q_theta, vbg
from gflownet_measure.jsp_gfn.bayesnets.dags import enumerate_dags, is_dag
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.bayesnets.structure_metrics import feature_metrics
from gflownet_measure.jsp_gfn.dag_params.network import DiagGaussianHead, JSPNetwork
from gflownet_measure.jsp_gfn.dag_params.policy import JSPPolicy
from gflownet_measure.jsp_gfn.dag_params.space import make_space

pytestmark = pytest.mark.usefixtures("one_thread")


def _random_q(mf: MeanFieldLinearGaussian, seed: int) -> None:
    """A q(theta) with correlated weights, so that the covariance term of the expected log-likelihood matters."""
    g = torch.Generator().manual_seed(seed)
    d = mf.d
    mf.mean = torch.randn(d, d, dtype=torch.float64, generator=g)
    factor = 0.3 * torch.randn(d, d, d, dtype=torch.float64, generator=g)
    mf.cov = factor @ factor.mT + 0.05 * torch.eye(d, dtype=torch.float64)


def test_registry_lists_and_loads_vbg():
    assert STRUCTURE_BASELINES["vbg"].requires == ()
    assert available("vbg") == (True, "")
    assert load("vbg") is vbg


@pytest.mark.parametrize("intervened", [False, True])
def test_expected_log_likelihood_is_the_mean_over_q_theta(intervened):
    """The closed form against a Monte Carlo mean over 50,000 weight draws, on every DAG of d = 3, with and without
    interventions (per-node Gram matrices). Tolerance: 5 standard errors of that mean, per graph."""
    g = torch.Generator().manual_seed(0)
    data = torch.randn(40, 3, dtype=torch.float64, generator=g)
    mask = torch.rand(40, 3, generator=g) < 0.2 if intervened else None
    base = LinearGaussian(data, obs_var=0.5, interventions=mask)
    mf = MeanFieldLinearGaussian(base)
    _random_q(mf, 1)
    graphs = enumerate_dags(3)
    theta = mf.mean.T + torch.einsum("jil,kjl->kji", torch.linalg.cholesky(mf.cov), torch.randn(50_000, 3, 3, dtype=torch.float64, generator=g))
    draws = base.log_likelihood(graphs, theta.transpose(-1, -2).flatten(-2)[:, None])  # [K, G]
    closed = mf.log_likelihood(graphs, torch.zeros(len(graphs), 0, dtype=torch.float64))
    se = draws.std(0) / len(draws) ** 0.5
    assert ((closed - draws.mean(0)).abs() <= 5 * se + 1e-9).all()
    assert (closed[1:] < base.log_likelihood(graphs, mf.mean.flatten().expand(len(graphs), 9))[1:]).all()  # Jensen: the variance costs


def test_q_theta_update_on_one_graph_is_the_exact_conditional_posterior(d3_problem):
    """With q(G) a point mass on G the update is Bayesian linear regression: P(theta_G | G, D) on the parents (JSP-GFN eq. D.24)."""
    model, _ = d3_problem
    mf = MeanFieldLinearGaussian(model)
    for adj in enumerate_dags(3):
        update_q_theta(mf, adj.expand(5, 3, 3))
        mean, cov = model.theta_posterior(adj)
        on = adj.flatten()
        assert torch.allclose(mf.mean.flatten()[on], mean[on], rtol=1e-9, atol=1e-12)
        for j in range(3):
            parents = adj[:, j]
            assert torch.allclose(mf.cov[j][parents][:, parents], cov[j][parents][:, parents], rtol=1e-9, atol=1e-15)
            assert torch.allclose(mf.mean[~parents, j], torch.zeros(int((~parents).sum()), dtype=torch.float64))  # no data: the prior's mean


def test_q_theta_update_maximises_the_expected_log_joint(d3_problem):
    """For a mixture of graphs, q*(theta) is Gaussian with mean the maximiser and precision the negative Hessian of
    theta -> mean_k log P(D | G_k, theta) + log N(theta; 0, sigma_0^2 I): both from autograd on the base model."""
    model, _ = d3_problem
    mf = MeanFieldLinearGaussian(model)
    graphs = enumerate_dags(3)[torch.tensor([1, 4, 4, 7, 12, 20, 24])]
    update_q_theta(mf, graphs)

    def objective(flat: torch.Tensor) -> torch.Tensor:
        return model.log_likelihood(graphs, flat.expand(len(graphs), 9)).mean() - 0.5 * flat.square().sum() / model.prior_var

    mu = mf.mean.flatten().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(objective(mu), mu)
    assert grad.abs().max() < 1e-6 * model.n / model.obs_var  # stationary, relative to the curvature's scale N / sigma^2
    hessian = torch.autograd.functional.hessian(objective, mf.mean.flatten())  # [9, 9] over (i, j) row-major
    for j in range(3):
        block = -hessian[j::3][:, j::3]  # node j's column: the weights i -> j
        assert torch.allclose(torch.linalg.inv(mf.cov[j]), block, rtol=1e-9)


def test_the_structure_space_satisfies_the_theory(d3_problem):
    """VBG's q(G) lives on the DAG x Theta space with Theta_G = R^0 for every G: charts of dimension 0. Every condition of
    Definition 1 and eq. 15-16 holds there, as on the space with parameters (the core's checks, quadrature on R^0's one point)."""
    model, _ = d3_problem
    mf = MeanFieldLinearGaussian(model)
    graph = make_space(mf, name="dag")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Initializing zero-element tensors", UserWarning)
        pf = JSPPolicy(graph.kappa, JSPNetwork(3, 16, mf.block_index(), mf.active, DiagGaussianHead))
    report = check_graph(graph, pf, UniformPolicy(graph.kappa_b), n=64)
    assert report.passed, str(report)


@pytest.mark.slow
def test_vbg_recovers_the_exact_posteriors_strong_edges(d3_problem):
    model, exact = d3_problem
    out = vbg(model, n_samples=1000, seed=0, steps=1000, iterations=2, progress=False)
    d = model.d
    assert out.graphs.shape == (1000, d, d) and out.graphs.dtype == torch.bool and out.discarded == 0 and is_dag(out.graphs).all()
    assert out.thetas.shape == (1000, d * d) and out.thetas.dtype == torch.float64
    assert (out.thetas.view(-1, d, d)[~out.graphs] == 0).all() and (out.thetas.view(-1, d, d)[out.graphs] != 0).all()
    edge, true_edge = out.graphs.double().mean(0), exact.features()["edge"]
    skeleton, true_skeleton = edge + edge.T, true_edge + true_edge.T
    upper = torch.triu(torch.ones(d, d, dtype=torch.bool), 1)
    assert torch.equal((skeleton > 0.5)[upper], (true_skeleton > 0.99)[upper])
    assert torch.equal((edge > edge.T)[true_skeleton > 0.99], (true_edge > true_edge.T)[true_skeleton > 0.99])
    assert feature_metrics(out.graphs, {"edge": true_edge})["edge_rmse"] < 0.1


def test_vbg_is_seeded(d3_problem):
    model, _ = d3_problem
    kwargs = {"n_samples": 50, "steps": 4, "iterations": 2, "prefill": 5, "q_samples": 20, "progress": False}
    a, b = (vbg(model, seed=3, **kwargs) for _ in range(2))
    assert torch.equal(a.graphs, b.graphs) and torch.equal(a.thetas, b.thetas)
    assert not torch.equal(vbg(model, seed=4, **kwargs).thetas, a.thetas)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"steps": 0}, "steps must be an integer >= 1"),
        ({"q_samples": 0}, "q_samples must be an integer >= 1"),
        ({"steps": 2, "iterations": 3}, "iterations=3 exceeds steps=2"),
    ],
)
def test_vbg_rejects_bad_settings(d3_problem, kwargs, match):
    with pytest.raises(ValueError, match=match):
        vbg(d3_problem[0], **kwargs)


def test_vbg_rejects_what_it_cannot_model():
    with pytest.raises(ValueError, match="model must be a LinearGaussian"):
        vbg(object())
