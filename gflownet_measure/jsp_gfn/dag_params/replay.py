"""JSP-GFN's batch source (Deleu et al. 2023, Algorithm 1): graphs grown by walkers, their edge moves replayed.

:class:`EdgeReplay` keeps ``n`` graphs under construction (the core's :class:`~gflownet_measure.walkers.Walkers`), moves
each once per update under the behaviour policy :math:`(1 - \\epsilon) P_\\phi + \\epsilon U`, and stores the moves between
two intermediate states :math:`G \\to G'` (an added edge; not the stop, not the step into the sink) in a FIFO buffer of
graphs (:class:`~gflownet_measure.buffers.TransitionBuffer`: :math:`\\theta` is 0 at an intermediate state, so the
adjacency is the whole state). A call draws the update's transitions uniformly from the buffer, with the reward that
scores them: the full-data :math:`\\log R(G, \\theta)`, or the mini-batch estimate of eq. 13 on ``data_rows`` fresh rows
(the same rows at both ends of every transition of the update).

It is the batch of the ``transitions`` objectives (:data:`~gflownet_measure.jsp_gfn.dag_params.objective.UNDIRECTED_SUBTB`): pass it
as ``batches`` to :func:`gflownet_measure.experiments.common.train_gflownet`. A module whose buffers are the walkers' graphs and the
replay, so a checkpoint of a run restores both and a resumed run continues the interrupted one.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from gflownet_measure.buffers import TransitionBuffer
from gflownet_measure.densities import Policy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.jsp_gfn.bayesnets.cpd_base import CPDModel
from gflownet_measure.jsp_gfn.dag_params.objective import Transitions
from gflownet_measure.jsp_gfn.dag_params.space import dag_kernel
from gflownet_measure.jsp_gfn.dag_params.states import join, split
from gflownet_measure.walkers import Walkers

__all__ = ["EdgeReplay", "log_reward_estimate", "uniform_move_probability"]


def uniform_move_probability(step: int, steps: int, anneal_fraction: float, min_exploration: float) -> float:
    """The behaviour policy's :math:`\\epsilon` at update ``step`` of ``steps``: :math:`1 - \\min(1, k / (fK))\\,(1 - \\epsilon_{min})`,
    uniform moves decaying linearly from 1 to ``min_exploration`` over the first ``anneal_fraction`` :math:`f` of the updates."""
    return 1.0 - min(1.0, step / max(1.0, steps * anneal_fraction)) * (1.0 - min_exploration)


def log_reward_estimate(model: CPDModel, data_rows: int) -> Callable[[Tensor, Tensor], Tensor]:
    """``(adj, theta) -> log R`` for one update: the full-data reward, or (``0 < data_rows < N``) the estimate of eq. 13 on
    ``data_rows`` rows drawn afresh without replacement, :math:`\\log P(G) + \\log P(\\theta | G) + \\frac{N}{M} \\sum_{m \\in B} \\log P(x_m | G, \\theta)`."""
    rows = torch.randperm(model.n)[:data_rows] if 0 < data_rows < model.n else None
    return lambda adj, theta: model.log_reward(adj, theta.double(), rows)


class EdgeReplay(nn.Module):
    """The replayed edge transitions of Algorithm 1 (module docstring), ``batch_size`` per call.

    Args:
        graph: the DAG space's pointed graph; ``pf``: the policy the walkers follow (held, not owned: the checkpoint
            saves it once, with the GFlowNet).
        model: the CPD model whose reward scores the transitions; ``data_rows``: rows per reward estimate (0 = all).
        capacity: transitions kept; ``walkers``: graphs grown in parallel, one move each per call.
        batch_size: transitions per call; ``exploration``: update ``k`` -> :math:`\\epsilon_k`, the probability of a uniform move.
    """

    def __init__(
        self,
        graph: PointedGraph,
        pf: Policy,
        model: CPDModel,
        data_rows: int,
        capacity: int,
        walkers: int,
        batch_size: int,
        exploration: Callable[[int], float],
    ):
        super().__init__()
        self.d, self.model, self.data_rows, self.batch_size, self.exploration = dag_kernel(graph).d, model, data_rows, batch_size, exploration
        self._pf = (pf,)  # a tuple keeps the policy out of this module's state
        self.walkers = Walkers(graph, walkers)
        self.replay = TransitionBuffer(capacity, self.d * self.d)

    def collect(self, epsilon: float) -> None:
        """One move of every walker; the edge moves (neither the stop nor the step into the sink) enter the replay."""
        s, x, sink = self.walkers.step(self._pf[0], epsilon)
        adj, _, _ = split(s, self.d)
        adj_next, _, stopped = split(x, self.d)
        edge = ~sink & ~stopped
        self.replay.add(adj[edge].flatten(1), adj_next[edge].flatten(1))

    def prefill(self, moves: int) -> None:
        """``moves`` moves of every walker under the uniform policy, before training."""
        for _ in range(moves):
            self.collect(1.0)

    def forward(self, step: int) -> Transitions:
        """The transitions of update ``step``: one move of every walker at :math:`\\epsilon` = ``exploration(step)``, then
        ``batch_size`` transitions drawn from the replay, with this update's reward."""
        self.collect(self.exploration(step))
        adj, adj_next = self.replay.sample(self.batch_size)
        P = self.model.n_params
        s, s_next = join(adj.view(-1, self.d, self.d), P), join(adj_next.view(-1, self.d, self.d), P)
        return Transitions(s, s_next, log_reward_estimate(self.model, self.data_rows), self.model.n)
