"""Bounds on the log-density of a GFlowNet's terminal marginal at data points (Zhang et al. 2023a; Burda et al. 2016).

For terminal states ``x`` and trajectories :math:`\\tau_k \\sim P_B(\\cdot | x)`, ``k = 1..K``, with
:math:`w_k = \\log P_F(\\tau_k) - \\log P_B(\\tau_k | x)` (densities w.r.t. the kernels, so :math:`P_T` is w.r.t.
:math:`\\kappa_b(\\bot, \\cdot)`):

.. math:: \\log P_T(x) \\;\\ge\\; \\mathbb E\\Big[\\log \\tfrac1K \\sum_k e^{w_k}\\Big] \\;\\ge\\; \\mathbb E[w_1],

the importance-weighted bound (Burda et al. 2016), which increases with ``K`` to :math:`\\log P_T(x)`, and the evidence
lower bound (``K = 1``), since :math:`\\mathbb E_{P_B(\\tau|x)}[e^{w}] = P_T(x)`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .densities import Policy
from .graph import PointedGraph
from .losses import neg_elbo
from .rollout import log_densities, sample_backward

__all__ = ["log_likelihood_bounds"]


def log_likelihood_bounds(graph: PointedGraph, pf: Policy, pb: Policy, x: Tensor, K: int, chunk: int = 4096) -> tuple[Tensor, Tensor]:
    """``(elbo [N], iw [N])`` in float64 at terminal states ``x [N, D]`` from ``K`` backward trajectories each.

    ``elbo``: the mean of :math:`w_k` over the ``K`` trajectories (an unbiased estimate of the evidence lower bound);
    ``iw``: :math:`\\log \\frac1K \\sum_k e^{w_k}` (a draw of the ``K``-sample importance-weighted bound). The walks run
    ``chunk`` trajectories at a time, without gradients.
    """
    per = max(1, chunk // K)
    elbo, iw = [], []
    with torch.no_grad():
        for i in range(0, len(x), per):
            xs = x[i : i + per]
            rep = xs.repeat_interleave(K, 0)  # [n K, D]: point-major
            traj = sample_backward(graph, pb, rep)
            w = -neg_elbo(*log_densities(traj, pf, pb), traj.mask).double().view(len(xs), K)
            elbo.append(w.mean(1))
            iw.append(torch.logsumexp(w, 1) - math.log(K))
    return torch.cat(elbo), torch.cat(iw)
