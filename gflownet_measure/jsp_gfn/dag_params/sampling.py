"""Posterior samples :math:`(G, \\theta) \\sim P_T` of a JSP-GFN policy: pure-policy rollouts of the core.

Each sample is one trajectory :math:`s_0 = (\\emptyset, \\#) \\to (G_1, \\#) \\to \\dots \\to (G, \\#) \\to (G, \\theta) \\to \\bot` drawn
by :func:`~gflownet_measure.rollout.sample_forward` with :math:`\\epsilon = 0` (Deleu et al. 2023, eq. 9-12): under
``torch.inference_mode``, unscored (no :math:`P_B`, no log-densities), on the kernel's fast path
(:meth:`~gflownet_measure.kernels.Kernel.outline`: one child state per walker and step, not the ``d^2`` atoms of a
materialised kernel), so its memory is the trajectories' states, :math:`T \\times n \\times D` numbers for ``T`` steps.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gflownet_measure.graph import PointedGraph
from gflownet_measure.jsp_gfn.dag_params.policy import JSPPolicy
from gflownet_measure.jsp_gfn.dag_params.space import dag_kernel
from gflownet_measure.jsp_gfn.dag_params.states import split
from gflownet_measure.rollout import sample_forward

__all__ = ["posterior_samples"]


def posterior_samples(graph: PointedGraph, pf: JSPPolicy, n: int, numbers: int = 2**24) -> tuple[Tensor, Tensor]:
    """``n`` pure-policy rollouts: ``(graphs [n, d, d] bool, thetas [n, P])``, in chunks of rollouts whose states over
    ``d`` steps (``D`` numbers each; a dense d = 20 sample takes 30-40) stay near ``numbers``: 1,992 rollouts at d = 20."""
    if n < 1:
        raise ValueError(f"n={n}: ask for at least one sample")
    d, D = dag_kernel(graph).d, graph.state_dim
    chunk = max(1, min(n, numbers // (d * D)))
    gs, ts = [], []
    for k in range(0, n, chunk):
        adj, theta, _ = split(sample_forward(graph, pf, min(chunk, n - k)).terminal, d)
        gs.append(adj)
        ts.append(theta)
    return torch.cat(gs), torch.cat(ts)
