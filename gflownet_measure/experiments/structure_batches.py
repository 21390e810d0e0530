"""JSP-GFN trained on whole trajectories: the batches of a trajectory objective (``tb``, ``vargrad``) on the DAG x Theta space.

Each update draws ``online`` trajectories :math:`s_0 \\to (G_1, \\#) \\to \\dots \\to (G, \\#) \\to (G, \\theta) \\to \\bot` from the
behaviour policy :math:`(1 - \\epsilon_k) P_F + \\epsilon_k U` (:func:`~gflownet_measure.rollout.sample_forward`; trajectory
balance holds on any trajectory, so the exploring policy changes where the loss is evaluated, not its minimiser) and keeps
their terminal states :math:`(G, \\theta)` in a ring drawn with rank-based priority on :math:`\\log R`
(:class:`~gflownet_measure.experiments.local_search.StateRing`); ``replayed`` terminal states drawn from the ring are walked
back to :math:`s_0` with :math:`P_B` (uniform over the edges of each graph; :func:`~gflownet_measure.rollout.sample_backward`)
and join the batch. The objective scores the whole batch with the current policies, so the terminal term of a
trajectory is JSP-GFN's own :math:`\\log R(G, \\theta) - \\log P_\\phi(\\theta \\mid G)` next to the structure's
:math:`\\sum_t \\log P_F - \\sum_t \\log P_B`.

Unlike eq. 8 of Deleu et al. (2023), whose residuals along one transition are :math:`O(N)` at graphs with few edges and are
cut by the Huber penalty, the trajectory residual weighs the whole path at once: it is zero exactly where
:math:`P_T(G, \\theta) \\propto R(G, \\theta)` (Malkin et al. 2022, eq. 14; Lahlou et al. 2023, eq. 19).
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from gflownet_measure.graph import PointedGraph
from gflownet_measure.objectives import Batch, GFlowNet
from gflownet_measure.rollout import sample_backward, sample_forward
from gflownet_measure.trajectories import cat_trajectories

from .local_search import StateRing

__all__ = ["StructureBatches"]


class StructureBatches(nn.Module):
    """The batches of the module docstring, one per update.

    Args:
        graph: the DAG x Theta space; ``gfn``: the GFlowNet being trained (held, not owned: the checkpoint saves it once).
        online: trajectories drawn forward per update; ``replayed``: terminal states drawn from the ring and walked back.
        exploration: update ``k`` -> :math:`\\epsilon_k`, the probability of a uniform move.
        capacity: terminal states the ring keeps; ``rank_weight``: :math:`k` of its priority :math:`1 / (k n + \\mathrm{rank})`.
    """

    def __init__(self, graph: PointedGraph, gfn: GFlowNet, online: int, replayed: int, exploration: Callable[[int], float], capacity: int, rank_weight: float):
        super().__init__()
        if online < 1 or replayed < 0:
            raise ValueError(f"StructureBatches: online must be >= 1 and replayed >= 0; got {online}, {replayed}")
        self.graph, self.online, self.replayed, self.exploration = graph, online, replayed, exploration
        self._gfn = (gfn,)  # a tuple keeps the GFlowNet out of this module's state
        self.ring = StateRing(capacity, graph.state_dim, rank_weight, graph.source.dtype)

    def forward(self, step: int) -> Batch:
        gfn = self._gfn[0]
        drawn = sample_forward(self.graph, gfn.pf, self.online, self.exploration(step))
        self.ring.add(drawn.terminal, drawn.log_R)
        parts = [drawn]
        if self.replayed:
            parts.append(sample_backward(self.graph, gfn.pb, self.ring.draw(self.replayed)))
        return Batch(self.graph, cat_trajectories(parts) if len(parts) > 1 else drawn)
