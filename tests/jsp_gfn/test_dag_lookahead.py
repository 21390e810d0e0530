"""The one-step lookahead of the marginal reward in JSP-GFN's edge and stop logits (``lookahead=true``,
:func:`gflownet_measure.jsp_gfn.dag_params.policy.action_log_probs`)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gflownet_measure.environments import dag_params as dp
from gflownet_measure.jsp_gfn.bayesnets.cpds import CategoricalMLP, MLPGaussian
from gflownet_measure.jsp_gfn.bayesnets.dags import enumerate_dags, transitive_closure, valid_edges
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er
from gflownet_measure.jsp_gfn.bayesnets.laplace import LaplaceCache
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.bayesnets.scores import BDEU_ESS, LocalScores, bdeu_local_scores, lookahead_scores

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("graph_prior", ["uniform", "erdos_renyi"])
def test_edge_gains_are_differences_of_the_log_joint(graph_prior):
    """g_ij = log P(G + i -> j, D) - log P(G, D) on every DAG of d = 4 and every absent edge, against two calls of
    log_joint_graph (float64, the same cached local terms: 1e-9)."""
    model = LinearGaussian(simulate_er(4, 1.0, 30, 0, seed=4).train, graph_prior=graph_prior, edges_per_node=1.0)
    dags = enumerate_dags(4)
    gains = model.edge_gains(dags)
    base = model.log_joint_graph(dags)
    absent = ~dags & ~torch.eye(4, dtype=torch.bool)
    b, i, j = absent.nonzero().unbind(1)
    grown = dags[b].clone()
    grown[torch.arange(len(b)), i, j] = True
    assert torch.allclose(gains[b, i, j], model.log_joint_graph(grown) - base[b], atol=1e-9)


def test_lookahead_policy_at_zero_outputs_is_the_one_step_flow():
    """With the network's edge and stop outputs at 0, P(stop | G) = R(G) / (R(G) + sum_e R(G + e) / (|E(G)| + 1)) and
    P(G + e | G) = R(G + e) / (|E(G)| + 1) / (same), R(G) = P(G, D): the policy of the one-step reward lookahead."""
    cfg = dp.DagParamsConfig(d=3, hidden=8, lookahead="on", n_data=20)
    problem = dp.make_problem(cfg)
    pf, _ = dp.make_policies(dp.make_graph(cfg, problem), cfg, problem)
    for net in (pf.network.senders, pf.network.receivers, pf.network.stop):
        nn.init.zeros_(net[-1].weight)
        nn.init.zeros_(net[-1].bias)
    model, dags = problem.model, enumerate_dags(3)
    _, log_edge, log_stop = pf.heads(dags)
    log_R = model.log_joint_graph(dags)
    valid = valid_edges(dags, transitive_closure(dags))
    k = dags.flatten(1).sum(1).double()
    child = log_R[:, None, None] + model.edge_gains(dags) - torch.log1p(k)[:, None, None]
    child = torch.where(valid, child, torch.tensor(float("-inf"), dtype=torch.float64))
    log_F = torch.logaddexp(log_R, child.flatten(1).logsumexp(1))
    has = valid.flatten(1).any(1)
    assert torch.allclose(log_stop.double()[has], (log_R - log_F)[has], atol=1e-4)  # float32 network outputs
    assert torch.allclose(log_edge.double()[valid], (child - log_F[:, None, None])[valid], atol=1e-4)
    assert (log_stop[~has] == 0).all()


def test_auto_follows_the_model_and_on_takes_a_surrogate_without_a_closed_form():
    assert dp.DagParamsConfig(d=3, model="lingauss-diag", lookahead="auto").uses_lookahead
    assert not dp.DagParamsConfig(d=3, model="mlp", lookahead="auto").uses_lookahead
    assert dp.DagParamsConfig(d=3, model="mlp", lookahead="on").uses_lookahead


def _polya_log_marginal(child: torch.Tensor, config: torch.Tensor, n_states: int, n_configs: int, ess: float) -> float:
    """log P(x_j | X_P) of the Dirichlet-categorical model as a product of sequential predictive probabilities (the
    Polya urn): an independent route to the Gamma-function closed form of BDeu."""
    counts = torch.zeros(n_configs, n_states, dtype=torch.float64)
    a = ess / (n_configs * n_states)
    total = 0.0
    for k, s in zip(config.tolist(), child.tolist()):
        total += math.log((a + counts[k, s]) / (n_states * a + counts[k].sum()))
        counts[k, s] += 1
    return total


def test_bdeu_local_score_is_the_polya_urn_marginal_and_drops_intervened_rows():
    """Every parent set of node 2 of a d = 3, 3-state data set, with and without interventions on node 2 (float64 sums
    of a few hundred logs: 1e-9)."""
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, 3, (60, 3), generator=g)
    data[:, 2] = (data[:, 0] + torch.randint(0, 2, (60,), generator=g)) % 3  # node 2 depends on node 0
    intervened = torch.zeros(60, 3, dtype=torch.bool)
    intervened[:15, 2] = True
    for interventions in (None, intervened):
        score = bdeu_local_scores(data, 3, interventions, ess=BDEU_ESS)
        rows = torch.arange(60) if interventions is None else torch.arange(15, 60)
        for code, parents in ((0, []), (1, [0]), (2, [1]), (3, [0, 1])):
            config = sum(data[rows, p] * 3**k for k, p in enumerate(parents)) if parents else torch.zeros(len(rows), dtype=torch.long)
            expected = _polya_log_marginal(data[rows, 2], config, 3, 3 ** len(parents), BDEU_ESS)
            assert float(score(torch.tensor([2]), torch.tensor([code]))[0]) == pytest.approx(expected, abs=1e-9)
    cache = LocalScores(3, bdeu_local_scores(data, 3))
    gains = cache.edge_gains(torch.zeros(1, 3, 3, dtype=torch.bool))
    assert gains[0, 0, 2] > gains[0, 1, 2] + 5  # the dependent parent gains more than a noise column


def test_the_lookahead_of_a_model_without_a_closed_form_is_its_surrogate_s():
    """A categorical MLP gets the BDeu gains of its states; an MLP Gaussian the gains of its own Laplace local marginal
    (jsp_gfn/bayesnets/laplace.py; the solves are deterministic functions of the key, so two caches agree: 1e-6 relative, the
    rounding of a key's position in its batch)."""
    states = torch.randint(0, 3, (40, 3), generator=torch.Generator().manual_seed(1))
    categorical = CategoricalMLP(states)
    adj = enumerate_dags(3)
    expected = LocalScores(3, bdeu_local_scores(states, 3)).edge_gains(adj)
    assert torch.equal(lookahead_scores(categorical).edge_gains(adj), expected)
    mlp = MLPGaussian(simulate_er(3, 1.0, 30, 0, seed=2).train, hidden=2)
    expected = LocalScores(3, LaplaceCache(mlp, starts=1, iterations=20).log_marginal).edge_gains(adj)
    assert torch.allclose(lookahead_scores(mlp, LaplaceCache(mlp, starts=1, iterations=20)).edge_gains(adj), expected, rtol=1e-6)
