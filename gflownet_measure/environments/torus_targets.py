"""Targets on the torus :math:`[0, 2\\pi)^n`: reward densities w.r.t. Haar measure, their basins, and periodic grid quadrature.

- ``r6`` (Lahlou et al. 2023, section 4.3; the public code's ``proxy/torus.py`` with ``alpha = 3``, ``beta = 2``):
  :math:`R(\\theta) = \\big(\\sum_{i \\text{ even}} \\sin 3\\theta_i + \\sum_{i \\text{ odd}} \\cos 2\\theta_i + n\\big)^3`, for
  ``n = 2`` the six-mode density :math:`(\\sin 3\\theta_1 + \\cos 2\\theta_2 + 2)^3` (0-based: :math:`\\theta_0` takes the sine).
  Its basins are the cells :math:`|\\theta_i - \\text{mode}| < \\pi/3` (sine) and :math:`< \\pi/2` (cosine) around the
  modes :math:`\\pi/6 + 2\\pi j/3` and :math:`\\pi j`; by symmetry each holds the same mass.
- ``alanine``: the Boltzmann density of alanine dipeptide over its backbone torsions (:mod:`gflownet_measure.environments.alanine`, the
  ``molecule`` extra).

The pieces every target shares (:class:`~gflownet_measure.environments.torus_base.TorusTarget`, the periodic grid
quadrature, the grid check) are :mod:`gflownet_measure.environments.torus_base`, re-exported here; R6 has degree 9, so its
normaliser on any grid of ``G >= 10`` points per angle is exact to round-off.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from gflownet_measure.options import lookup

from . import alanine
from .torus_base import TWO_PI, TorusTarget, check_log_reward_grid, closed_grid, grid_log_normaliser, periodic_grid

__all__ = ["TorusTarget", "TargetSpec", "TARGETS", "get_target", "periodic_grid", "closed_grid", "grid_log_normaliser", "check_log_reward_grid", "r6"]


@dataclass(frozen=True)
class TargetSpec:
    """A registered target: ``validate(config)`` raises a one-line ``ValueError`` for settings it cannot use (cheap),
    ``build(config)`` returns the :class:`~gflownet_measure.environments.torus_base.TorusTarget`."""

    validate: Callable
    build: Callable


def _r6_log_reward(theta: Tensor) -> Tensor:
    """:math:`3 \\log(\\sum_{\\text{even}} \\sin 3\\theta_i + \\sum_{\\text{odd}} \\cos 2\\theta_i + n)` ``[B]`` (module docstring); :math:`-\\infty` on
    the Haar-null set where the sum is 0."""
    theta = theta.double()
    s = torch.sin(3 * theta[:, 0::2]).sum(1) + torch.cos(2 * theta[:, 1::2]).sum(1) + theta.shape[1]
    return 3 * torch.log(s.clamp(min=0.0))  # s >= 0 exactly; round-off may give -1e-16 at the minima: log 0 there


def _r6_region_of(theta: Tensor) -> Tensor:
    """Basin index ``[B]``: per sine coordinate the cell of width :math:`2\\pi/3` around its mode, per cosine coordinate the cell of width :math:`\\pi`, mixed radix."""
    theta = theta.double()
    out = torch.zeros(len(theta), dtype=torch.long)
    for i in range(theta.shape[1]):
        m, first = (3, math.pi / 6) if i % 2 == 0 else (2, 0.0)
        cell = torch.floor(torch.remainder(theta[:, i] - first + math.pi / m, TWO_PI) / (TWO_PI / m)).long().clamp(max=m - 1)
        out = out * m + cell
    return out


def r6(n: int) -> TorusTarget:
    """The R6 family on ``n`` angles (module docstring); ``3^{ceil(n/2)} 2^{floor(n/2)}`` basins of equal mass."""
    count = 3 ** ((n + 1) // 2) * 2 ** (n // 2)
    names = tuple(f"mode{j}" for j in range(count))
    return TorusTarget(f"r6-n{n}", n, _r6_log_reward, _r6_log_reward, names, _r6_region_of)


def _r6_validate(config) -> None:
    pass


TARGETS: dict[str, TargetSpec] = {
    "r6": TargetSpec(_r6_validate, lambda config: r6(config.n_dim)),
    "alanine": TargetSpec(alanine.validate, alanine.target),  # the molecule's module imports openmm lazily: it validates without it
}


@functools.lru_cache(maxsize=8)
def _cached(config) -> TorusTarget:
    return lookup(TARGETS, config.target, "torus target").build(config)


def get_target(config) -> TorusTarget:
    """The :class:`~gflownet_measure.environments.torus_base.TorusTarget` of a torus config (built once per process and config: a frozen dataclass is hashable)."""
    return _cached(config)
