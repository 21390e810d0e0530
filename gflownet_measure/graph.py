"""The measurable pointed graph (Lahlou et al. 2023, Definition 1, eq. 1-7)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import Tensor

from .contracts import checked_log_reward
from .kernels import Kernel
from .measures import Measure
from .sampled import SampledMeasure

__all__ = ["PointedGraph"]


@dataclass(frozen=True)
class PointedGraph:
    """:math:`(\\bar S, s_0, \\bot, \\kappa, \\kappa_b, \\nu)` with a reward density and a length bound.

    Attributes:
        name: for reports.
        source: :math:`s_0` ``[D]``.
        kappa: forward reference kernel :math:`\\kappa(s, \\cdot)` on non-sink states.
        kappa_b: backward reference kernel :math:`\\kappa_b(s', \\cdot)` on non-sink states.
        nu: reference measure :math:`\\nu` on the non-sink states (the sink carries a unit atom): a
            :class:`~gflownet_measure.measures.Measure` (atoms and charted pieces, listed), or a
            :class:`~gflownet_measure.sampled.SampledMeasure` (an importance-sampling rule and a support test) where
            the support is too large to list; the theory checks then integrate over it by Monte Carlo.
        terminal: :math:`\\kappa_b(\\bot, \\cdot)`, the measure terminal states are drawn from (a ``Measure`` or a
            ``SampledMeasure``, as ``nu``); eq. 4 at the sink requires
            :math:`\\kappa_b(\\bot, ds) = \\nu(ds)\\,\\kappa(s, \\{\\bot\\})`. The reward is a density w.r.t. it.
        log_reward: :math:`\\log R(x)` ``[B]`` for terminal states ``x [B, D]``, w.r.t. ``terminal``.
        max_length: ``N`` of eq. 7: every trajectory reaches the sink within ``N`` steps.
        encode: features ``[B, F]`` of states for networks and test functions.
    """

    name: str
    source: Tensor
    kappa: Kernel
    kappa_b: Kernel
    nu: Measure | SampledMeasure
    terminal: Measure | SampledMeasure
    log_reward: Callable[[Tensor], Tensor]
    max_length: int
    encode: Callable[[Tensor], Tensor]

    @property
    def state_dim(self) -> int:
        return self.source.shape[0]

    def is_source(self, x: Tensor) -> Tensor:
        """``[B]`` bool: :math:`x = s_0`."""
        return (x == self.source.to(x)).all(-1)

    def checked_log_reward(self, x: Tensor) -> Tensor:
        """``log_reward(x)`` ``[B]``, or a one-line :class:`~gflownet_measure.contracts.ContractError` (a ``ValueError``)
        where its shape is not ``[B]`` or a value is NaN or ``+inf`` (:func:`~gflownet_measure.contracts.checked_log_reward`)."""
        return checked_log_reward(self, x)
