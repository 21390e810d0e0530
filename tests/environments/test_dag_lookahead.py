"""The one-step lookahead of the marginal reward in JSP-GFN's edge and stop logits (``lookahead=true``,
:func:`environments.dag_params.policy.action_log_probs`)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from environments import dag_params as dp
from environments.dag_params.bayesnet import LinearGaussian, simulate_er
from environments.dag_params.dags import enumerate_dags, transitive_closure, valid_edges

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
    P(G + e | G) = R(G + e) / (|E(G)| + 1) / (same), R(G) = P(G, D): the forward-looking policy of one step ahead."""
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


def test_lookahead_needs_a_closed_form_marginal_and_auto_follows_the_model():
    with pytest.raises(ValueError, match="lookahead=on needs the closed-form marginal"):
        dp.DagParamsConfig(d=3, model="mlp", lookahead="on")
    assert dp.DagParamsConfig(d=3, model="lingauss-diag", lookahead="auto").uses_lookahead
    assert not dp.DagParamsConfig(d=3, model="mlp", lookahead="auto").uses_lookahead
