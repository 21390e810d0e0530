"""Training objectives: the losses of :mod:`gflownet_measure.losses` applied to a GFlowNet's modules.

Each objective is a function ``(gfn, graph, traj, lam=0.9, penalty=square, scores=None) -> loss``
registered in ``OBJECTIVES``; none of them sees anything environment-specific. ``scores`` are the
log-densities of ``traj``: recorded by a scored :func:`~gflownet_measure.rollout.rollout` while sampling
(one policy call per step; needed when the states are reparametrised), or computed afterwards by
:func:`~gflownet_measure.rollout.score` (one batched call per policy); without them the balance objectives
evaluate the policies once on all transitions (:func:`~gflownet_measure.rollout.log_densities`). The
divergences of section 4.2 need them: their importance weights use the behaviour density ``log q``.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from . import losses
from .policies import Policy
from .rollout import Scores, log_densities
from .trajectories import Trajectories

__all__ = ["GFlowNet", "OBJECTIVES", "DIVERGENCES"]


class GFlowNet(nn.Module):
    """The learned pieces: :math:`P_F`, :math:`P_B`, :math:`\\log Z` and optionally :math:`\\log F` (w.r.t. nu)."""

    def __init__(self, pf: Policy, pb: Policy, log_F: nn.Module | None = None, log_Z: float = 0.0):
        super().__init__()
        self.pf, self.pb, self.log_F = pf, pb, log_F
        self.log_Z = nn.Parameter(torch.tensor(float(log_Z)))

    def flows(self, traj: Trajectories) -> Tensor:
        """``[T + 1, B]``: :math:`\\log Z` at :math:`s_0`, :math:`\\log F(s_t)` inside, :math:`\\log R(x)` at the sink, 0 after."""
        if self.log_F is None:
            raise ValueError("this objective needs a state-flow network log_F")
        T1, B = traj.sink.shape
        pos = torch.arange(T1, device=traj.sink.device)[:, None]
        inner = (~traj.sink) & (pos > 0)
        log_F = self.log_F(traj.states[inner])
        out = torch.zeros(T1, B, dtype=log_F.dtype, device=log_F.device)
        out[inner] = log_F
        out = torch.where(pos == 0, self.log_Z.to(out.dtype).expand(T1, B), out)
        at_sink = traj.sink & ~torch.cat([torch.zeros(1, B, dtype=torch.bool), traj.sink[:-1]])
        return torch.where(at_sink, traj.log_R[None].expand(T1, B), out)


def _densities(gfn, traj, scores: Scores | None) -> tuple[Tensor, Tensor]:
    return (scores.log_pf, scores.log_pb) if scores is not None else log_densities(traj, gfn.pf, gfn.pb)


def _tb(gfn, graph, traj, lam: float = 0.9, penalty=losses.square, scores=None):
    log_pf, log_pb = _densities(gfn, traj, scores)
    return penalty(losses.tb_residual(gfn.log_Z, log_pf, log_pb, traj.log_R, traj.mask)).mean()


def _db(gfn, graph, traj, lam: float = 0.9, penalty=losses.square, scores=None):
    log_pf, log_pb = _densities(gfn, traj, scores)
    return losses.masked_mean(penalty(losses.db_residuals(gfn.flows(traj), log_pf, log_pb)), traj.mask)


def _subtb(gfn, graph, traj, lam: float = 0.9, penalty=losses.square, scores=None):
    log_pf, log_pb = _densities(gfn, traj, scores)
    return losses.subtb_loss(gfn.flows(traj), log_pf, log_pb, traj.length, lam, penalty)


def _path_sums(traj, scores: Scores | None, name: str) -> tuple[Tensor, Tensor, Tensor]:
    """Per-trajectory :math:`\\log P_F`, :math:`\\log q` and :math:`w = \\log R + \\log P_B - \\log P_F` ``[B]``."""
    if scores is None:
        raise ValueError(f"the {name} objective needs the scores of a rollout (the behaviour density log q); sample with rollout(..., pb=...) or score the sampled trajectories with rollout.score(traj, pf, pb, epsilon, noise)")
    m = traj.mask
    log_pf, log_pb, log_q = ((v * m).sum(0) for v in scores)
    return log_pf, log_q, traj.log_R + log_pb - log_pf


def _reverse_kl(gfn, graph, traj, lam: float = 0.9, penalty=losses.square, scores=None):
    """Path-wise :math:`\\mathrm{KL}(P_F \\| P^*)` on reparametrised on-policy trajectories; score-function with importance weights otherwise."""
    log_pf, log_q, log_w = _path_sums(traj, scores, "reverse_kl")
    if traj.states.requires_grad:
        return losses.reverse_kl(log_w)
    return losses.reverse_kl_iw(log_pf, log_q, log_w)


def _forward_kl(gfn, graph, traj, lam: float = 0.9, penalty=losses.square, scores=None):
    log_pf, log_q, log_w = _path_sums(traj, scores, "forward_kl")
    return losses.forward_kl_iw(log_pf, log_q, log_w)


def _fm(gfn, graph, traj, lam: float = 0.9, penalty=losses.square, scores=None):
    """Flow matching at every visited state plus reward matching at its sink edge; the logits of P_F are log edge flows."""
    s = traj.states[~traj.sink]  # visited states, s0 included
    out = gfn.pf(s)
    atoms = out.measure.atoms
    if out.measure.pieces:
        raise ValueError("flow matching needs kernels made of atoms only (the in- and out-flow integrals are sums)")
    has_sink = (atoms.sink & atoms.mask).any(1)
    log_to_sink = out.logits.masked_fill(~atoms.sink, float("-inf")).logsumexp(1)
    rm = losses.rm_residual(log_to_sink[has_sink], graph.checked_log_reward(s[has_sink]))
    inner = ~graph.is_source(s)
    parents = gfn.pb.kernel(s[inner]).atoms  # kappa_b(s, .)
    P = parents.mask.shape[1]
    child = s[inner][:, None].expand(-1, P, -1)[parents.mask]
    flows_in = gfn.pf(parents.x[parents.mask]).log_flow(child, torch.zeros(len(child), dtype=torch.bool))
    log_in = torch.full(parents.mask.shape, float("-inf"), dtype=flows_in.dtype, device=flows_in.device)
    log_in[parents.mask] = flows_in
    fm = losses.fm_residual(log_in, parents.mask, out.logits[inner], atoms.mask[inner])
    return penalty(fm).mean() + penalty(rm).mean()


OBJECTIVES: dict[str, Callable[..., Tensor]] = {"tb": _tb, "db": _db, "subtb": _subtb, "fm": _fm}
"""The balance conditions of Definition 7: zero exactly at a solution."""
DIVERGENCES: dict[str, Callable[..., Tensor]] = {"reverse_kl": _reverse_kl, "forward_kl": _forward_kl}
"""Divergences between the forward and the target path measures (section 4.2): minimised, not zero, at a solution."""
