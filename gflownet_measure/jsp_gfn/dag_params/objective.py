"""JSP-GFN's objective (Deleu et al. 2023, eq. 8): the transition loss on replayed edge transitions, registered as
``undirected_subtb`` in the core's objective registry.

:func:`transition_loss`: for replayed transitions :math:`G \\to G'`, fresh :math:`\\theta_j \\sim P_\\phi(\\cdot|G)` and
:math:`\\theta'_i \\sim P_\\phi(\\cdot|G')` (``S`` each), the undirected-path SubTB residual of the core
(:func:`~gflownet_measure.losses.undirected_subtb_residual`, eq. 6) on all ``S x S`` pairs, scaled by
:math:`1/N` and penalised with Huber (eq. 8); optionally the length-2 penalty of eq. C.21, path-wise.
The reward difference and the :math:`\\theta` at which eq. 8 evaluates :math:`P_\\phi` carry no gradient.
The transitions come from the core's :class:`~gflownet_measure.walkers.Walkers` (Algorithm 1's parallel environments).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, cast

import torch
from torch import Tensor

from gflownet_measure.densities import Policy
from gflownet_measure.jsp_gfn.dag_params.policy import JSPPolicy
from gflownet_measure.jsp_gfn.dag_params.states import split
from gflownet_measure.losses import huber, length2_penalty, undirected_subtb_residual
from gflownet_measure.objectives import GFlowNet, Objective, register

__all__ = ["Transitions", "transition_loss", "UNDIRECTED_SUBTB"]


def _sampled_terms(log_reward: Callable, out, adj: Tensor, log_stop: Tensor, n_samples: int, with_penalty: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(log R(G, theta_s), log P_F((G, theta_s) | G), pen(G) or None)``, ``[S, B]``, ``[S, B]``, ``[B]``, for fresh ``theta_s ~ P_phi(.|G)``.

    Eq. 8's terms read :math:`\\mathrm{sg}(\\theta_s)`: gradients reach :math:`\\phi` through the density only. The penalty of
    eq. C.21 is path-wise, as in the public JSP-GFN code: :math:`\\theta_s = \\mu + \\sigma \\varepsilon_s` keeps its graph, so
    :math:`\\nabla_\\theta[\\log R - \\log P_\\phi]` at :math:`\\theta_s` moves :math:`\\phi` both through the density and through the
    point where it is evaluated."""
    with torch.set_grad_enabled(with_penalty):
        theta = out.theta.rsample((n_samples,))  # [S, B, P], differentiable in phi for the penalty only
    log_R = log_reward(adj, theta).to(log_stop.dtype)  # [S, B]: the graphs broadcast, their active coordinates found once
    pen = None
    if with_penalty:
        (g,) = torch.autograd.grad((log_R - out.theta.log_prob(theta)).sum(), theta, create_graph=True)
        on = out.theta.active
        pen = length2_penalty(torch.where(on, g, torch.zeros_like(g)), on.sum(1))
    log_q = out.theta.log_prob(theta.detach())  # [S, B]
    return log_R.detach(), log_stop + log_q, pen


def transition_loss(
    policy: JSPPolicy, pb: Policy, log_reward: Callable, s: Tensor, s_next: Tensor, n_samples: int, scale: float, delta: float = 1.0, penalty: bool = False
) -> Tensor:
    """Eq. 8 of JSP-GFN on transitions ``s -> s_next`` (intermediate states ``[B, D]``), averaged over transitions and pairs.

    .. math:: \\mathcal L = \\frac{1}{B S^2} \\sum_b \\sum_{i, j} \\mathrm{Huber}_\\delta(\\Delta_{ij} / N)
       \\;\\big[+\\; \\tfrac12 (\\mathrm{pen}(G) + \\mathrm{pen}(G'))\\big]

    with :math:`\\Delta_{ij}` the residual of :func:`~gflownet_measure.losses.undirected_subtb_residual` for
    :math:`\\theta_j` at :math:`G` and :math:`\\theta'_i` at :math:`G'`, ``scale`` = :math:`N`, and
    :math:`\\log P_B(G | G')` from ``pb`` (uniform over the edges of :math:`G'`). ``log_reward(adj [B, d, d], theta [S, B, P]) -> [S, B]``
    (broadcasting as a CPD model's :meth:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel.log_reward` does; a mini-batch estimate when the data are sub-sampled: the same rows for both ends).
    """
    d = policy.kernel.d
    adj, _, _ = split(s, d)
    adj_next, _, _ = split(s_next, d)
    B = adj.shape[0]
    out, log_edge, log_stop = policy.heads(torch.cat([adj, adj_next]))
    here, there = out.rows(slice(0, B)), out.rows(slice(B, 2 * B))
    added = (adj_next & ~adj).flatten(1).to(torch.int8).argmax(1)
    log_pf_edge = log_edge[:B].flatten(1).gather(1, added[:, None])[:, 0]
    log_pb_edge = pb(s_next).log_prob(s, torch.zeros(B, dtype=torch.bool)).to(log_pf_edge.dtype)
    log_R, log_pf_stop, pen = _sampled_terms(log_reward, here, adj, log_stop[:B], n_samples, penalty)
    log_R_next, log_pf_stop_next, pen_next = _sampled_terms(log_reward, there, adj_next, log_stop[B:], n_samples, penalty)
    delta_ij = undirected_subtb_residual(log_R[None], log_pf_stop[None], log_pf_edge, log_pb_edge, log_R_next[:, None], log_pf_stop_next[:, None])  # [S', S, B]
    loss = huber(delta_ij / scale, delta).mean()
    if penalty:
        assert pen is not None and pen_next is not None  # _sampled_terms returns the penalty when asked for it
        loss = loss + 0.5 * (pen + pen_next).mean()
    return loss


class Transitions(NamedTuple):
    """A batch of replayed edge transitions :math:`G \\to G'` (intermediate states ``[B, D]``) and what scores them:
    ``log_reward(adj [B, d, d], theta [S, B, P]) -> [S, B]`` (broadcasting) and ``scale`` = :math:`N`, the :math:`1/N` of eq. 8."""

    s: Tensor
    s_next: Tensor
    log_reward: Callable[[Tensor, Tensor], Tensor]
    scale: float


def _undirected_subtb(gfn: GFlowNet, batch: Transitions, theta_samples: int, delta: float, penalty: bool) -> Tensor:
    """:func:`transition_loss` of ``gfn``'s :math:`P_F` (a :class:`~.policy.JSPPolicy`) and :math:`P_B` on ``batch``."""
    # the objective is the DAG space's: its P_F is a JSPPolicy (GFlowNet types it Policy)
    return transition_loss(cast(JSPPolicy, gfn.pf), gfn.pb, batch.log_reward, batch.s, batch.s_next, theta_samples, batch.scale, delta, penalty)


UNDIRECTED_SUBTB = register(
    Objective(
        "undirected_subtb",
        _undirected_subtb,
        "JSP-GFN: SubTB on the undirected paths of replayed edge transitions, S x S fresh theta pairs, Huber (Deleu et al. 2023, eq. 8)",
        batch="transitions",
        log_Z=None,
        hyper={"theta_samples": 16, "delta": 1.0, "penalty": False},
    )
)
"""The registered objective of JSP-GFN (no state flow, no log Z: the undirected paths cancel both)."""
