"""Replay-buffer local search (Sendera et al. 2024, section 3; gfn-diffusion's ``--both_ways --local_search``), one mechanism for
every space whose terminal states are a level of coordinates ``x`` plus the step in the last place (the SDE samplers on R^n,
the torus).

Training alternates two kinds of batch: even updates sample ``B`` trajectories from the exploring policy and keep their
terminal states in a buffer; odd updates train on ``B`` states drawn from a second buffer of *refined* states, walked
back to :math:`s_0` with :math:`P_B` (:func:`backward_batch`). Every ``ls_every`` updates ``B`` states drawn from the
first buffer are refined by ``ls_moves`` MALA moves on :math:`\\log R`
(:func:`~gflownet_measure.baselines.smc.mala_chain`, which leaves :math:`R / Z` invariant) and added to the second. Both
buffers draw with rank-based priority (:class:`StateRing`). gfn-diffusion keeps every accepted state after a burn-in of
each chain; this keeps each chain's last state.

On a periodic level (the torus) the chain runs on the unrolled coordinates, where the periodic :math:`R` is a density
with respect to Lebesgue measure and the proposal is translation invariant: its kernel folded onto one period is in
detailed balance with :math:`R` there (sum the unrolled balance over the images :math:`y + 2\\pi k`), so the moves leave
:math:`R / Z` on the torus invariant; ``wrap`` maps the chain's last states back into the period.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from gflownet_measure.baselines.smc import mala_chain
from gflownet_measure.graph import PointedGraph
from gflownet_measure.objectives import Batch, GFlowNet
from gflownet_measure.options import check_options, option, settings_of
from gflownet_measure.rollout import Scores, log_densities, sample_backward

__all__ = ["LocalSearchConfig", "LOCAL_SEARCH_SETTINGS", "StateRing", "backward_batch", "LocalSearchBatches"]


@dataclass(frozen=True)
class LocalSearchConfig:
    """The local search's settings (module docstring), gfn-diffusion's names in parentheses."""

    local_search: bool = option(
        False,
        "replay-buffer local search (Sendera et al. 2024): every other batch is buffered terminal states refined by MALA, walked back with P_B",
        choices=(True, False),
    )
    ls_every: int = option(100, "local search: refine a batch of buffered states by MALA every this many steps (gfn-diffusion's ls_cycle)", low=1)
    ls_moves: int = option(200, "local search: MALA moves per refinement (gfn-diffusion's max_iter_ls)", low=1)
    ls_step: float = option(0.1, "local search: initial MALA step eps^2/2 (gfn-diffusion's ld_step), adapted towards acceptance 0.574", low=1e-8)
    buffer_size: int = option(60000, "local search: capacity of each replay buffer (forward terminal states; refined states)", low=1)
    rank_weight: float = option(
        0.01,
        "local search: rank-prioritised replay, P(i) proportional to 1 / (rank_weight N + rank_i) (gfn-diffusion's); 1000 draws within 0.1% of uniform",
        low=1e-8,
    )

    def __post_init__(self):
        check_options(self)


LOCAL_SEARCH_SETTINGS = settings_of(LocalSearchConfig)


class StateRing(nn.Module):
    """A FIFO ring of at most ``capacity`` terminal states with their log-rewards, drawn with rank-based priority
    :math:`P(i) \\propto 1 / (k N + \\mathrm{rank}_i)` (rank 0 the highest log R, ``k`` = ``rank_weight``; gfn-diffusion's
    ``prioritized="rank"``). Its tensors are module buffers, so a run's checkpoint holds them."""

    def __init__(self, capacity: int, dim: int, rank_weight: float, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.rank_weight = rank_weight
        self.x: Tensor
        self.log_R: Tensor
        self.count: Tensor
        self.register_buffer("x", torch.zeros(capacity, dim, dtype=dtype))
        self.register_buffer("log_R", torch.zeros(capacity))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))  # states ever added

    def __len__(self) -> int:
        return min(int(self.count), len(self.x))

    def add(self, x: Tensor, log_R: Tensor) -> None:
        idx = (int(self.count) + torch.arange(len(x))) % len(self.x)
        self.x[idx], self.log_R[idx] = x.detach().to(self.x.dtype), log_R.detach().to(self.log_R.dtype)
        self.count += len(x)

    def draw(self, n: int) -> Tensor:
        size = len(self)
        rank = torch.argsort(torch.argsort(self.log_R[:size], descending=True))
        idx = torch.multinomial(1.0 / (self.rank_weight * size + rank.double()), n, replacement=True)
        return self.x[idx]


def backward_batch(graph: PointedGraph, gfn: GFlowNet, x: Tensor) -> Batch:
    """Terminal states ``x [B, n]`` (the last level, step ``max_length - 1`` appended) walked back to s0 with P_B, scored
    so that :math:`q = R P_B` (for exact target samples the weights are uniform and log Z = 0)."""
    s = torch.cat([x, torch.full((len(x), 1), float(graph.max_length - 1), dtype=x.dtype)], 1)
    traj = sample_backward(graph, gfn.pb, s)
    log_pf, log_pb = log_densities(traj, gfn.pf, gfn.pb)
    log_q = log_pb.detach().clone()
    last = traj.length - 1
    log_q[last, torch.arange(len(last))] += traj.log_R  # the step into the sink carries log R: sum_t log q = log R + sum_t log P_B
    return Batch(graph, traj, Scores(log_pf, log_pb, log_q))


class LocalSearchBatches(nn.Module):
    """Training batches with replay-buffer local search (module docstring).

    Args:
        gfn, graph: the GFlowNet being trained and its space (states ``[x, t]``, the step last).
        explore: ``step -> Batch`` of ``batch_size`` trajectories of the exploring policy (the even updates).
        log_target: :math:`\\log R` ``[N]`` of coordinates ``x [N, n]``, differentiable (MALA's drift).
        config: the settings.
        wrap: maps the chains' last states into the level's coordinates (the torus: modulo :math:`2\\pi`); identity if None.
        dtype: of the buffered states (the level's: float64 where angles must survive the chart round trip).
    """

    def __init__(
        self,
        gfn: GFlowNet,
        graph: PointedGraph,
        explore: Callable[[int], Batch],
        batch_size: int,
        log_target: Callable[[Tensor], Tensor],
        config: LocalSearchConfig,
        wrap: Callable[[Tensor], Tensor] | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        self.graph, self.explore, self.batch_size, self.log_target, self.config, self.wrap = graph, explore, batch_size, log_target, config, wrap
        self.gfn = [gfn]  # not a submodule: the checkpoint holds the GFlowNet on its own
        dim = graph.source.numel() - 1
        self.visited = StateRing(config.buffer_size, dim, config.rank_weight, dtype)
        self.refined = StateRing(config.buffer_size, dim, config.rank_weight, dtype)

    def forward(self, step: int) -> Batch:
        if step % 2 == 0 or len(self.visited) == 0:
            batch = self.explore(step)
            self.visited.add(batch.traj.terminal[:, :-1], batch.traj.log_R)
            return batch
        if step % self.config.ls_every < 2 or len(self.refined) == 0:
            r = mala_chain(self.log_target, self.visited.draw(self.batch_size), self.config.ls_moves, math.sqrt(2 * self.config.ls_step))
            self.refined.add(r.x if self.wrap is None else self.wrap(r.x), r.log_target)
        return backward_batch(self.graph, self.gfn[0], self.refined.draw(self.batch_size))
