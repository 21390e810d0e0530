"""The per-(node, parent set) conditional mode and Laplace local marginal (:mod:`gflownet_measure.jsp_gfn.bayesnets.laplace`), and the
solver head and lookahead that read them.

- The models' node terms add up to their log-likelihood (interventions, a mini-batch of rows).
- On a linear-Gaussian node the objective is quadratic: the mode is the exact conditional mean, the Laplace marginal the
  exact local marginal and the precision diagonal the exact :math:`\\Lambda_{pp}` (JSP-GFN eq. D.24).
- The cache gives the same answer whatever order and batches the keys arrive in.
- The MLP solver head's mean is the cached mode, and ``check_graph`` passes with it.
"""

from __future__ import annotations

import math

import pytest
import torch

from conftest import random_jsp_policies
from gflownet_measure.checks import check_graph
from gflownet_measure.environments import dag_params as dp
from gflownet_measure.gaussian import LOG_2PI
from gflownet_measure.jsp_gfn.bayesnets.cpds import CategoricalMLP, MLPGaussian, ZeroInflatedMLP
from gflownet_measure.jsp_gfn.bayesnets.dags import enumerate_dags
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er, simulate_mlp, simulate_zi
from gflownet_measure.jsp_gfn.bayesnets.laplace import LaplaceCache
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.bayesnets.scores import lookahead_scores
from gflownet_measure.jsp_gfn.dag_params.solver import SolverHead

pytestmark = pytest.mark.usefixtures("one_thread")


class NodeLinearGaussian(LinearGaussian):
    """The linear-Gaussian model with its node term written out, :math:`\\sum_n \\log \\mathcal N(x_{nj}; \\theta_j^\\top x_{n, P}, \\sigma^2)`,
    so that the generic solver runs on a model whose answers are known in closed form (checked against
    ``log_likelihood`` below)."""

    def node_log_likelihood(self, nodes, parents, blocks, rows=None):
        x, scale = self._rows(rows)
        mean = x @ torch.where(parents, blocks.to(torch.float64), 0.0).T  # [M, B]
        terms = -0.5 * (x[:, nodes] - mean).square() / self.obs_var - 0.5 * (LOG_2PI + math.log(self.obs_var))
        intervened = self._intervened(rows)
        if intervened is not None:
            terms = torch.where(intervened[:, nodes], 0.0, terms)
        return terms.sum(0) * scale


def _models(d: int = 4):
    g = torch.Generator().manual_seed(3)
    mask = torch.rand(30, d, generator=g) < 0.2
    return {
        "lingauss": NodeLinearGaussian(simulate_er(d, 1.0, 30, 0, seed=1).train, prior_var=0.5, interventions=mask),
        "mlp": MLPGaussian(simulate_mlp(d, 1.0, 30, 0, seed=1, hidden=3).train, hidden=3, interventions=mask),
        "zi-mlp": ZeroInflatedMLP(simulate_zi(d, 1.0, 30, 0, seed=1, hidden=3).train, hidden=3, interventions=mask),
        "categorical-mlp": CategoricalMLP(torch.randint(0, 3, (30, d), generator=g), hidden=3, interventions=mask),
    }


def _codes(adj: torch.Tensor) -> torch.Tensor:
    return (adj.long() << torch.arange(adj.shape[-1])[:, None]).sum(-2)


@pytest.mark.parametrize("name", ["lingauss", "mlp", "zi-mlp", "categorical-mlp"])
@pytest.mark.parametrize("rows", [None, torch.tensor([0, 3, 4, 7, 11, 20])])
def test_node_terms_add_up_to_the_log_likelihood(name, rows):
    """Sum over the nodes of each graph of node_log_likelihood (each node's block, its parents) = log_likelihood, with
    interventions and on a mini-batch (float64 sums of a few hundred terms: 1e-9 relative)."""
    model = _models()[name]
    adj = enumerate_dags(4)[::37]
    theta = torch.randn(len(adj), model.n_params, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    d = model.d
    nodes = torch.arange(d).repeat(len(adj))
    blocks = theta[:, model.block_index()].flatten(0, 1)  # [B d, block]
    terms = model.node_log_likelihood(nodes, adj.transpose(1, 2).flatten(0, 1), blocks, rows).view(len(adj), d)
    expected = model.log_likelihood(adj, theta, rows)
    assert torch.allclose(terms.sum(1), expected, rtol=1e-9)


@pytest.mark.slow
def test_linear_gaussian_mode_precision_and_laplace_marginal_are_exact():
    """Every (node, parent set) of d = 4: the mode is the conditional posterior mean m_j, the precision diagonal
    (V_j^-1)_pp and the Laplace marginal log P(x_j | X_P) of eq. D.24. Tolerances: the Hessian of a quadratic is exact
    anywhere (1e-9 relative); the search stops where f no longer resolves a step, |f| eps / Lambda ~ (1e3 * 1e-16 /
    3e3)^(1/2), about 1e-6 in theta (measured 7e-7; the posterior's standard deviations are about 0.02), hence 1e-5 on the
    mode and 1e-7 on the marginal (measured 5e-8)."""
    model = _models()["lingauss"]
    d = model.d
    cache = LaplaceCache(model, starts=2, iterations=30)
    nodes = torch.arange(d).repeat_interleave(1 << d)
    codes = torch.arange(1 << d).repeat(d)
    keep = (codes >> nodes) & 1 == 0
    nodes, codes = nodes[keep], codes[keep]
    local = cache(nodes, codes)
    for m, (j, c) in enumerate(zip(nodes.tolist(), codes.tolist())):
        exact = model._local(j, c)
        parents = exact.parents
        assert torch.allclose(local.mode[m, parents], exact.mean, rtol=0, atol=1e-5)
        assert (local.mode[m, [i for i in range(d) if c >> i & 1 == 0]] == 0).all()
        prec = torch.linalg.inv(exact.cov).diagonal() if len(parents) else torch.zeros(0, dtype=torch.float64)
        assert torch.allclose(local.precision[m, parents], prec, rtol=1e-9)
        assert float(local.log_marginal[m]) == pytest.approx(exact.log_marginal, rel=1e-9, abs=1e-7)


@pytest.mark.slow
def test_the_cache_does_not_depend_on_the_order_or_batches_of_its_keys():
    """The keys of a few graphs solved all at once, in reverse order, and graph by graph (partial batches filled with
    repeats): the same numbers. Each key's starts are seeded by the key, no row reads another and every batch has the same
    shapes, but a key's position in its batch changes the batched products' rounding (measured: up to 4e-8 relative after
    40 steps), hence 1e-6 relative rather than bitwise."""
    model = _models()["mlp"]
    adj = enumerate_dags(4)[::53]
    nodes, codes = torch.arange(4).repeat(len(adj)), _codes(adj).flatten()
    runs = []
    forward = torch.arange(len(nodes))
    for orders in ([forward], [forward.flip(0)], forward.split(4)):
        cache = LaplaceCache(model, starts=3, iterations=40, chunk=8)
        for order in orders:
            cache(nodes[order], codes[order])
        runs.append(cache(nodes, codes))
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-9)


def test_mlp_solver_head_mean_is_the_cached_mode_and_lookahead_shares_the_solves():
    """model=mlp theta_head=solver: the head's mean is each node's cached mode (float32 network outputs: 1e-5 relative)
    and its scale at initialisation solver_scale x Lambda_pp^(-1/2) (1, and 0.1 from a head on the same cache); the
    lookahead's local scores are the same cache's marginals."""
    cfg = dp.DagParamsConfig(d=3, hidden=8, model="mlp", theta_head="solver", lookahead="on", solver_iterations=30, n_data=20)
    problem = dp.make_problem(cfg)
    pf, _ = dp.make_policies(dp.make_graph(cfg, problem), cfg, problem)
    head, adj = pf.network.theta_head, enumerate_dags(3)
    mode, precision = head.laplace.for_graphs(adj)
    out = pf.network(adj.float()).theta
    on = problem.model.active(adj)
    assert torch.allclose(out.mean.double()[on], mode[on], rtol=1e-5, atol=1e-5)
    assert torch.allclose(out.scale.double()[on], precision.rsqrt()[on], rtol=1e-5)
    nodes, glob, _, _ = pf.network.trunk(adj.float())
    tenth = SolverHead(head.base, problem.model, head.steps, None, head.laplace, scale=0.1)(nodes, glob, adj.float())
    assert torch.allclose(tenth.scale.double()[on], 0.1 * precision.rsqrt()[on], rtol=1e-5)
    solved = len(head.laplace._index)
    pf.heads(adj)  # the lookahead's gains of every DAG: the keys grown by one parent, most already solved by the head
    assert len(head.laplace._index) > solved
    codes = _codes(adj)
    assert torch.equal(
        lookahead_scores(problem.model, head.laplace)(codes * 3 + torch.arange(3)),
        head.laplace.log_marginal(torch.arange(3).expand_as(codes).flatten(), codes.flatten()).view(codes.shape),
    )


@pytest.mark.slow
def test_check_graph_passes_with_the_mlp_solver_head():
    """The Laplace head's P_phi(theta | G) is a density on Theta_G: Definition 1 and eq. 15-16 at d = 3 with its weights
    randomised (the checks' own tolerances, 128 nodes per piece as for the other heads)."""
    _, graph, pf, pb = random_jsp_policies(dp.DagParamsConfig(d=3, hidden=8, model="mlp", theta_head="solver", solver_iterations=30))
    report = check_graph(graph, pf, pb, n=128, n_functions=4)
    assert report.passed, str(report)
