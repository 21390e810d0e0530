"""Batches of trajectories, time-major, with the sink as a mask (no sentinel states)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .measures import SupportPoint

__all__ = ["Trajectories", "cat_trajectories"]


class Trajectories(NamedTuple):
    """Trajectories :math:`s_0 \\to s_1 \\to \\dots \\to s_{n-1} = x \\to \\bot`.

    Attributes:
        states: ``[T + 1, B, D]``; at and after the sink's position rows repeat the terminal state
            ``x`` and are flagged in ``sink``.
        sink: ``[T + 1, B]`` bool, position ``t`` is the sink (or past it).
        log_R: ``[B]`` log-reward of the terminal state w.r.t. :math:`\\kappa_b(\\bot, \\cdot)`.
        draw: for trajectories a forward rollout sampled, where each transition landed in the forward
            kernel (component and chart coordinates, in the order of ``states[:-1][mask]``), so that
            :func:`~gflownet_measure.rollout.score` evaluates :math:`P_F` there without inverting the
            charts; ``None`` otherwise (buffers, backward walks), and ``score`` then locates the transitions.
    """

    states: Tensor
    sink: Tensor
    log_R: Tensor
    draw: SupportPoint | None = None

    @property
    def mask(self) -> Tensor:
        """``[T, B]`` bool: transition ``t`` exists (its origin is not the sink)."""
        return ~self.sink[:-1]

    @property
    def length(self) -> Tensor:
        """``[B]`` long: number of transitions, i.e. the position ``n`` of the sink."""
        return self.mask.sum(0)

    @property
    def terminal(self) -> Tensor:
        """``[B, D]``: the terminal states ``x = s_{n-1}``."""
        return self.states[self.length - 1, torch.arange(self.states.shape[1], device=self.states.device)]

    def trimmed(self) -> "Trajectories":
        """The same batch with trailing all-sink positions removed (``T = max length``)."""
        T = int(self.length.max())
        return Trajectories(self.states[: T + 1], self.sink[: T + 1], self.log_R, self.draw)  # the transitions, and so the draw, are unchanged


def cat_trajectories(batches: list[Trajectories]) -> Trajectories:
    """The trajectories of ``batches`` side by side, ``[T + 1, B_1 + B_2 + ..., D]`` with ``T`` the longest: a shorter
    batch is padded at the end with its terminal rows, flagged as sink (the layout of :class:`Trajectories`). The
    result has no ``draw``: :func:`~gflownet_measure.rollout.log_densities` locates its transitions."""
    if not batches:
        raise ValueError("cat_trajectories needs at least one batch")
    T1 = max(b.states.shape[0] for b in batches)

    def padded(b: Trajectories) -> tuple[Tensor, Tensor]:
        pad = T1 - b.states.shape[0]
        if pad == 0:
            return b.states, b.sink
        return torch.cat([b.states, b.states[-1:].expand(pad, -1, -1)]), torch.cat([b.sink, b.sink.new_ones(pad, b.sink.shape[1])])

    states, sink = zip(*(padded(b) for b in batches))
    return Trajectories(torch.cat(states, 1), torch.cat(sink, 1), torch.cat([b.log_R for b in batches]))
