"""The measurable pointed graph (Lahlou et al. 2023, Definition 1, eq. 1-7)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from .contract_error import ContractError, require, shape_of
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

    def with_reward_floor(self, floor: float) -> PointedGraph:
        """This graph with the reward :math:`\\max(R, r_0)`, :math:`r_0` = ``floor`` > 0: where :math:`R = 0`
        (:math:`\\log R = -\\infty`, which the theory allows) every trajectory objective's residual is infinite, and the
        floor makes those states trainable. The sampler then targets :math:`\\max(R, r_0)`, whose extra mass is at most
        :math:`r_0\\,\\nu(\\{R < r_0\\})` (docs/tutorial.md): score it against the true :math:`R` (this graph), train it
        on the floored one."""
        if not (math.isfinite(floor) and floor > 0):
            raise ValueError(f"with_reward_floor: floor must be finite and > 0; got {floor!r}")
        log_floor, log_reward = math.log(floor), self.log_reward
        return dataclasses.replace(self, log_reward=lambda x: log_reward(x).clamp_min(log_floor))

    def checked_log_reward(self, x: Tensor) -> Tensor:
        """``log_reward(x)`` ``[B]`` at terminal states ``x [B, D]``, or a one-line
        :class:`~gflownet_measure.contract_error.ContractError` (a ``ValueError``) where its shape is not ``[B]`` or a
        value is NaN or ``+inf``: the log-reward's shape contract (:mod:`gflownet_measure.contracts`).

        A ``[B, 1]`` would broadcast against ``[B]`` terms into a ``[B, B]`` residual and train silently to a wrong log Z;
        a NaN or ``+inf`` is no log-density (``-inf``, a zero reward, is one)."""
        log_r = self.log_reward(x)
        require(
            isinstance(log_r, Tensor) and log_r.shape == x.shape[:1],
            f"{self.name}: log_reward returned {shape_of(log_r)} for {len(x)} states; expected a tensor of shape [{len(x)}], one log-reward per state (squeeze a trailing dimension)",
        )
        require(log_r.is_floating_point(), f"{self.name}: log_reward returned dtype {log_r.dtype}; expected a floating-point tensor")
        bad = torch.isnan(log_r) | (log_r == math.inf)
        if bad.any():
            i = int(bad.nonzero()[0])
            if not torch.isfinite(x[i]).all():  # the reward was handed a broken state: blame what made it
                raise ContractError(
                    f"{self.name}: a terminal state is non-finite, x={x[i].tolist()} ({int(bad.sum())} of {len(x)} states; log_reward {log_r[i].item()} there): the policy or a kernel chart produced it (a diverged policy: lower the learning rate)"
                )
            raise ContractError(
                f"{self.name}: log_reward is {log_r[i].item()} at x={x[i].tolist()} ({int(bad.sum())} of {len(x)} states); a log-reward must be finite or -inf"
            )
        return log_r
