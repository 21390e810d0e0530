"""The JSP-GFN forward policy as a density w.r.t. the DAG x Theta kernel (Deleu et al. 2023, eq. 9-12).

At an intermediate state :math:`(G, \\#)`, with the backbone's stop logit ``s`` and edge logits
:math:`u_i \\cdot v_j` (:mod:`~gflownet_measure.jsp_gfn.dag_params.network`):

.. math:: P_F(G + (i \\to j) \\mid G) = \\sigma(-s)\\, \\frac{M_{ij} e^{u_i \\cdot v_j}}{\\sum_{kl} M_{kl} e^{u_k \\cdot v_l}}, \\qquad
   P_F((G, \\theta) \\mid G) = \\sigma(s)\\, P_\\phi(\\theta \\mid G)

w.r.t. counting measure on the valid edges (mask ``M``) and Lebesgue measure on :math:`\\Theta_G`
(:class:`~gflownet_measure.jsp_gfn.dag_params.space.ThetaChart`, log-Jacobian 0, the chart's coordinates the flat parameters themselves). Where no edge can be added,
:math:`P(\\text{stop} \\mid G) = 1`. :math:`P_\\phi(\\theta | G)` is the diagonal or full-covariance Normal of the
network's parameter head (:mod:`~gflownet_measure.jsp_gfn.dag_params.theta`). At :math:`(G, \\theta)` the only move is the sink, with probability one.

:func:`action_log_probs` is the one place these probabilities are formed: the kernel density of
:class:`JSPPolicy` (rollouts, checks) and the transition loss of :mod:`~gflownet_measure.jsp_gfn.dag_params.objective` both call it.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gflownet_measure.densities import Policy
from gflownet_measure.jsp_gfn.bayesnets.dags import transitive_closure, valid_edges
from gflownet_measure.jsp_gfn.dag_params.network import JSPNetwork, JSPOutputs
from gflownet_measure.jsp_gfn.dag_params.space import DagKernel
from gflownet_measure.jsp_gfn.dag_params.states import split
from gflownet_measure.jsp_gfn.dag_params.theta import MaskedNormalTheta

__all__ = ["action_log_probs", "JSPPolicy"]


def action_log_probs(
    edge_logits: Tensor, stop_logit: Tensor, valid: Tensor, scale: float = 1.0, gains: Tensor | None = None, n_edges: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``(log P(G + (i -> j) | G) [B, d, d], log P(stop | G) [B])`` (eq. 9-10); invalid edges get ``-inf``.

    .. math:: \\log P(\\text{stop}|G) = \\log\\sigma(c\\, s) \\;(0 \\text{ if no edge is valid}),\\quad
       \\log P(i \\to j | G) = \\log\\sigma(-c\\, s) + \\log\\mathrm{softmax}_{M}(c\\, u \\cdot v)_{ij}

    with ``scale`` :math:`c` (the public code uses the training-set size ``N``: log-rewards differ by
    :math:`O(N)` between graphs and the loss divides residuals by ``N``, so unit changes of the network's
    outputs then move the policy on the scale of the loss).

    With ``gains`` :math:`g_{ij} = \\log R(G + (i \\to j)) - \\log R(G)` ``[B, d, d]`` (the one-step lookahead of a
    marginal reward, :meth:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian.edge_gains`), the logits are shifted by it,

    .. math:: c\\, u_i \\cdot v_j + g_{ij}, \\qquad c\\, s - \\Big(\\mathrm{LSE}_{e \\in M}\\, g_e - \\log(|E(G)| + 1)\\Big),

    a one-step reward lookahead: at :math:`u \\cdot v = s = 0` the policy is the flow
    :math:`F(G) \\approx R(G) + \\sum_e R(G + e) P_B(G | G + e)` of one step ahead, edges drawn in proportion to
    :math:`R(G + e)` and the stop in proportion to :math:`R(G)`; the network learns the rest. With gains of hundreds of
    nats (d = 20, N = 100) that start is a greedy search, not a posterior sampler. It is *not* the forward-looking
    GFlowNet of Pan et al. (2023), which re-parametrises the state flow inside detailed balance as
    :math:`\\log F(s) = \\log \\tilde R(s) + f(s)`: here a fixed function of :math:`G` shifts the policy's logits, and the
    objective's fixed point is unchanged.
    ``n_edges [B]``: :math:`|E(G)|`, given with ``gains``.
    """
    B, d, _ = valid.shape
    flat = valid.flatten(1)
    any_valid = flat.any(1)
    ninf = torch.tensor(float("-inf"), dtype=edge_logits.dtype)
    logits = torch.where(flat, scale * edge_logits.flatten(1), ninf)
    stop_logit = scale * stop_logit
    if gains is not None:
        g = torch.where(flat, gains.flatten(1).to(logits.dtype), ninf)
        logits = logits + g
        assert n_edges is not None, "action_log_probs: gains come with n_edges"
        lookahead = torch.where(any_valid, torch.logsumexp(g, 1), torch.zeros_like(stop_logit)) - torch.log1p(n_edges.to(logits.dtype))
        stop_logit = stop_logit - lookahead
    edges = torch.log_softmax(torch.where(any_valid[:, None], logits, torch.zeros_like(logits)), 1) + F.logsigmoid(-stop_logit)[:, None]
    edges = torch.where(flat, edges, ninf)
    stop = torch.where(any_valid, F.logsigmoid(stop_logit), torch.zeros_like(stop_logit))
    return edges.reshape(B, d, d), stop


def _theta_rows(head, nodes: Tensor, glob: Tensor, adj: Tensor, rows: Tensor) -> MaskedNormalTheta:
    """:math:`P_\\phi(\\theta \\mid G)` of the graphs ``rows`` alone (a solver head's cost is per graph)."""
    return head(nodes[rows], glob[rows], adj[rows])


class JSPPolicy(Policy):
    """:math:`P_F` of the module docstring on :class:`~gflownet_measure.jsp_gfn.dag_params.space.DagKernel` (one backbone call per batch of states);
    ``logit_scale`` multiplies the edge and stop logits (:func:`action_log_probs`).

    ``calibrate``: a learned offset :math:`b_{|E(G)|}` of the stop logit per edge count, zero at the start. The one-step
    reward lookahead's stop term compares :math:`R(G)` with the rewards one edge away and ignores the completions further
    ahead, whose number grows with the edges still to come; one number per size of graph carries that correction at its
    own fast learning rate, where the network's weights at the structure policy's rate would move it by nats only over
    tens of thousands of updates. (A learned temperature of the gains was tried beside it and left out: it drifted down,
    to 0.4-0.6 in 1,500-2,000 updates at d = 20, and lower temperatures make the start worse, ELBO 5-460 nats lower at
    0.3-0.03; docs/results/jsp-gfn-d20.md.)
    """

    kernel: DagKernel  # (or a Materialised wrapper of one, which passes its attributes through)

    def __init__(
        self, kernel: DagKernel, network: JSPNetwork, logit_scale: float = 1.0, gains: Callable[[Tensor], Tensor] | None = None, calibrate: bool = False
    ):
        super().__init__(kernel)
        self.network, self.logit_scale, self.gains = network, logit_scale, gains
        d = kernel.d
        self.stop_offsets = nn.Parameter(torch.zeros(d * (d - 1) // 2 + 1)) if calibrate else None

    def _log_probs(self, adj: Tensor, edge_logits: Tensor, stop_logit: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
        """:func:`action_log_probs` at graphs ``adj [B, d, d]`` bool, with the lookahead when the policy has ``gains``."""
        n_edges = adj.flatten(1).sum(1)
        if self.stop_offsets is not None:
            stop_logit = stop_logit + self.stop_offsets.to(stop_logit.dtype)[n_edges] / self.logit_scale
        if self.gains is None:
            return action_log_probs(edge_logits, stop_logit, valid, self.logit_scale)
        return action_log_probs(edge_logits, stop_logit, valid, self.logit_scale, self.gains(adj), n_edges)

    def heads(self, adj: Tensor, valid: Tensor | None = None) -> tuple[JSPOutputs, Tensor, Tensor]:
        """The network outputs and :func:`action_log_probs` at graphs ``adj [B, d, d]`` (``valid``: the addable edges, by default from the closure)."""
        adj = adj > 0.5 if adj.dtype != torch.bool else adj
        out = self.network(adj.to(self.network_dtype))
        if valid is None:
            valid = valid_edges(adj, transitive_closure(adj), self.kernel.max_parents)
        return (out, *self._log_probs(adj, out.edge_logits, out.stop_logit, valid))

    @property
    def network_dtype(self) -> torch.dtype:
        return next(self.network.parameters()).dtype

    def parameters_at(self, s, measure):
        """Edge, sink and stop logits; the parameter head runs only on the rows that stop (a coordinate family of the core)."""
        d = self.kernel.d
        graphs, _, _ = split(s, d)
        adj = graphs.to(self.network_dtype)
        nodes, glob, edge_logits, stop_logit = self.network.trunk(adj)
        log_edge, log_stop = self._log_probs(graphs, edge_logits, stop_logit, measure.atoms.mask[:, : d * d].reshape(-1, d, d))  # the kernel's edge atoms
        logits = torch.cat([log_edge.flatten(1), torch.zeros(len(s), 1, dtype=log_stop.dtype), log_stop[:, None]], 1)  # edges, sink, Theta_G
        return logits, [functools.partial(_theta_rows, self.network.theta_head, nodes, glob, adj)]
