"""Trajectory balance on the DAG x Theta space (``jsp-gfn --set objective=tb``): the core's TB on JSP-GFN's trajectories
:math:`s_0 \\to (G_1, \\#) \\to \\dots \\to (G, \\#) \\to (G, \\theta) \\to \\bot`, its batches, and its balance at the exact policy."""

from __future__ import annotations

import math

import pytest
import torch
from test_dag_space import _exact_policy, _model, _random_policies

from conftest import random_jsp_policies
from gflownet_measure.environments import dag_params as dp
from gflownet_measure.experiments.common import balance_metrics
from gflownet_measure.experiments.structure_batches import StructureBatches
from gflownet_measure.jsp_gfn.bayesnets.exact_posterior import ExactPosterior
from gflownet_measure.jsp_gfn.dag_params.space import make_space
from gflownet_measure.jsp_gfn.dag_params.states import split
from gflownet_measure.objectives import Batch, GFlowNet, get_objective
from gflownet_measure.rollout import log_densities, sample_forward
from gflownet_measure.trajectories import cat_trajectories

pytestmark = pytest.mark.usefixtures("one_thread")


def _hand_tb(pf, log_Z, traj, d: int) -> torch.Tensor:
    """:math:`\\frac1B \\sum_b (\\log Z + \\sum_t \\log P_F - \\log R - \\sum_t \\log P_B)^2` written out step by step: an added
    edge :math:`i \\to j` has :math:`P_F` from the edge logits of :meth:`JSPPolicy.heads` and :math:`P_B = 1 / |E(G')|`
    (uniform over the edges of the child); the stop has :math:`P_F = P(\\text{stop} | G)\\, P_\\phi(\\theta | G)`, :math:`P_B = 1`;
    the step into the sink has both 1."""
    losses = []
    for b in range(traj.states.shape[1]):
        n = int(traj.length[b])
        adj, theta, stopped = split(traj.states[:n, b], d)
        log_pf = log_pb = 0.0
        for t in range(n - 1):  # the last state is (G, theta): its only move is the sink
            out, log_edge, log_stop = pf.heads(adj[t : t + 1])
            if stopped[t + 1]:
                log_pf = log_pf + log_stop[0] + out.theta.log_prob(theta[t + 1 : t + 2].to(log_stop.dtype))[0]
            else:
                i, j = (adj[t + 1] & ~adj[t]).nonzero()[0]
                log_pf = log_pf + log_edge[0, i, j]
                log_pb = log_pb - math.log(int(adj[t + 1].sum()))
        losses.append((log_Z + log_pf - traj.log_R[b] - log_pb) ** 2)
    return torch.stack(losses).mean()


def test_tb_on_the_dag_space_is_the_hand_computed_loss_and_gradient():
    """The registered ``tb`` on sampled trajectories (random network weights, 8 trajectories, d = 3) against the loss written
    out transition by transition: equal values and gradients in every network weight and in log Z (float32 arithmetic in a
    different order: 1e-4 relative)."""
    graph, pf, pb = _random_policies(3)
    torch.manual_seed(1)
    traj = sample_forward(graph, pf, 8)
    gfn = GFlowNet(pf, pb, log_Z=1.7)
    params = [gfn.log_Z, *pf.network.parameters()]
    core = get_objective("tb")(gfn, Batch(graph, traj))
    hand = _hand_tb(pf, gfn.log_Z, traj, 3)
    assert torch.allclose(core, hand.to(core.dtype), rtol=1e-4)
    g_core = torch.autograd.grad(core, params, allow_unused=True)
    g_hand = torch.autograd.grad(hand, params, allow_unused=True)
    for a, b in zip(g_core, g_hand):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b.to(a.dtype), rtol=1e-4, atol=1e-5 * float(b.abs().max()))


@pytest.mark.parametrize("perturb", [0.0, 1.0])
def test_the_exact_policy_balances_every_trajectory(perturb):
    """The policy built from the exact posterior (exact flows under the uniform P_B, theta from the exact conditional
    Gaussian) has log-weight w = log R + sum log P_B - sum log P_F equal to log Z = log of the evidence on every sampled
    trajectory: sd 0 and ESS 1 up to the float32 the space's states and rewards are held in (log R near 50 nats, whose
    float32 spacing is 4e-6: 1e-4 nats). Adding 1 nat to node 0's out-edge logits breaks it by orders of magnitude more."""
    model = _model(3)
    pf, pb = _exact_policy(model, perturb)
    graph = make_space(model)
    torch.manual_seed(0)
    m = balance_metrics(graph, pf, pb, 64, chunk=32)
    log_Z = float(ExactPosterior(model).log_normaliser())
    if perturb == 0:
        assert m["log_weight_sd"] < 1e-4 and abs(m["ess"] - 1) < 1e-8 and abs(m["elbo"] - log_Z) < 1e-4 and abs(m["iw_log_Z"] - log_Z) < 1e-4
    else:
        assert m["log_weight_sd"] > 0.1 and m["ess"] < 0.99 and m["elbo"] < log_Z - 1e-3  # a KL gap opens


def test_structure_batches_join_forward_and_replayed_trajectories():
    """An update of :class:`StructureBatches`: ``online`` forward trajectories, their terminal states added to the ring,
    then ``replayed`` trajectories walked back from ring states, padded into one batch that TB scores; a replayed
    trajectory starts at s0 and ends at one of the states seen."""
    graph, pf, pb = _random_policies(3)
    gfn = GFlowNet(pf, pb)
    torch.manual_seed(0)
    batches = StructureBatches(graph, gfn, online=6, replayed=4, exploration=lambda step: 0.5, capacity=32, rank_weight=0.01)
    first = batches(0)
    assert first.traj.states.shape[1] == 10 and len(batches.ring) == 6
    seen = batches.ring.x[:6]
    replayed = first.traj.terminal[6:]
    assert all((replayed[k] == seen).all(1).any() for k in range(4))
    assert graph.is_source(first.traj.states[0]).all()
    log_pf, log_pb = log_densities(first.traj, pf, pb)
    assert torch.isfinite((log_pf * first.traj.mask).sum(0)).all() and torch.isfinite(get_objective("tb")(gfn, first))


def test_cat_trajectories_pads_the_shorter_batch_with_its_terminal_rows():
    graph, pf, _ = _random_policies(3)
    torch.manual_seed(2)
    a, b = sample_forward(graph, pf, 3), sample_forward(graph, pf, 2)
    both = cat_trajectories([a, b])
    assert both.states.shape[1] == 5 and torch.equal(both.length, torch.cat([a.length, b.length]))
    assert torch.equal(both.terminal, torch.cat([a.terminal, b.terminal])) and torch.equal(both.log_R, torch.cat([a.log_R, b.log_R]))
    with pytest.raises(ValueError, match="at least one"):
        cat_trajectories([])


def test_the_stop_offsets_are_neutral_at_the_start_and_learn():
    """calibrate=true adds an offset of the stop logit per edge count, 0 at the start: the policy's log-probabilities are
    those of the uncalibrated one to the bit; TB's gradient reaches the offsets of the edge counts the batch visits only,
    and a raised offset raises the stop probability of graphs of that size."""
    cfg = dict(d=4, hidden=8, lookahead="on", theta_head="solver")
    _, graph, plain, pb = random_jsp_policies(dp.DagParamsConfig(**cfg))
    _, _, calibrated, _ = random_jsp_policies(dp.DagParamsConfig(**cfg, calibrate=True))
    assert calibrated.stop_offsets.shape == (4 * 3 // 2 + 1,)
    torch.manual_seed(3)
    traj = sample_forward(graph, plain, 8)
    a, b = log_densities(traj, plain, pb), log_densities(traj, calibrated, pb)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    loss = get_objective("tb")(GFlowNet(calibrated, pb, log_Z=5.0), Batch(graph, traj))
    (grad,) = torch.autograd.grad(loss, [calibrated.stop_offsets])
    visited = torch.zeros(7, dtype=torch.bool)
    adj = split(traj.states[:-1][traj.mask], 4)[0]
    visited[adj.flatten(1).sum(1).unique()] = True
    assert grad[visited].abs().sum() > 0 and (grad[~visited] == 0).all()
    empty = torch.zeros(1, 4, 4, dtype=torch.bool)
    with torch.no_grad():
        calibrated.stop_offsets[0] = 2.0
        assert calibrated.heads(empty)[2] > plain.heads(empty)[2]
