"""Trajectories advanced one transition at a time: the parallel environments of replay-buffer training.

Deleu et al. 2023 (Algorithm 1) keep ``n`` graphs under construction and move each of them once per gradient update,
restarting a graph from :math:`s_0` when it stops, so that the replay buffer receives a steady stream of transitions drawn
from the current behaviour policy. :class:`Walkers` does this on any pointed graph with the core's sampler
(:meth:`~gflownet_measure.densities.KernelDensity.sample`): the behaviour policy is
:math:`(1 - \\epsilon) \\tilde P_F + \\epsilon U` as in :func:`~gflownet_measure.rollout.rollout`, ``U`` the reference
proposal of :func:`~gflownet_measure.densities.uniform_density` (uniform over the components; on an unbounded chart its
box's Gaussian proposal). Over a whole trajectory each walker draws exactly what a rollout would; the difference is only
that the policy may change between two of its steps.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from .densities import Policy
from .graph import PointedGraph

__all__ = ["Step", "Walkers"]


class Step(NamedTuple):
    """One move of every walker: from ``s [n, D]`` to ``x [n, D]``, ``sink [n]`` where the move was into the sink."""

    s: Tensor
    x: Tensor
    sink: Tensor


class Walkers(nn.Module):
    """``n`` trajectories of ``graph``, each at its current state (a buffer, so that a checkpoint holding the walkers restores
    the trajectories in progress and a resumed run continues the interrupted one).

    Raises ``RuntimeError`` when a trajectory has made ``graph.max_length`` moves without reaching the sink (eq. 7).
    """

    states: Tensor  # registered buffers (nn.Module's __getattr__ would type them Tensor | Module)
    moves: Tensor

    def __init__(self, graph: PointedGraph, n: int):
        super().__init__()
        if n < 1:
            raise ValueError(f"Walkers needs at least one walker, got n={n}")
        self.graph = graph
        self.register_buffer("states", graph.source.expand(n, -1).clone())
        self.register_buffer("moves", torch.zeros(n, dtype=torch.long))

    @torch.no_grad()
    def step(self, pf: Policy, epsilon: float = 0.0, noise: float = 0.0) -> Step:
        """Move every walker once under the behaviour policy; walkers that moved into the sink restart from :math:`s_0`."""
        s = self.states.clone()
        density = pf(s)
        x, sink = (density.widened(noise) if noise > 0 else density).sample(epsilon)
        x = x.to(s.dtype)
        self.moves += 1
        if bool((self.moves[~sink] >= self.graph.max_length).any()):
            raise RuntimeError(f"{self.graph.name}: a trajectory made {self.graph.max_length} moves without reaching the sink (eq. 7)")
        self.states.copy_(torch.where(sink[:, None], self.graph.source.to(s.dtype), x))
        self.moves.masked_fill_(sink, 0)
        return Step(s, x, sink)
