"""Targets on the torus :math:`[0, 2\\pi)^n`: reward densities w.r.t. Haar measure, their basins, and periodic grid quadrature.

- ``r6`` (Lahlou et al. 2023, section 4.3; the public code's ``proxy/torus.py`` with ``alpha = 3``, ``beta = 2``):
  :math:`R(\\theta) = \\big(\\sum_{i \\text{ even}} \\sin 3\\theta_i + \\sum_{i \\text{ odd}} \\cos 2\\theta_i + n\\big)^3`, for
  ``n = 2`` the six-mode density :math:`(\\sin 3\\theta_1 + \\cos 2\\theta_2 + 2)^3` (0-based: :math:`\\theta_0` takes the sine).
  Its basins are the cells :math:`|\\theta_i - \\text{mode}| < \\pi/3` (sine) and :math:`< \\pi/2` (cosine) around the
  modes :math:`\\pi/6 + 2\\pi j/3` and :math:`\\pi j`; by symmetry each holds the same mass.
- ``alanine``: the Boltzmann density of alanine dipeptide over its backbone torsions (:mod:`gflownet_measure.environments.alanine`, the
  ``molecule`` extra).

Quadrature: the uniform periodic grid :math:`\\theta_j = 2\\pi (j + 1/2) / G` with weights :math:`(2\\pi / G)^n` integrates a
trigonometric polynomial of degree below ``G`` exactly and a smooth periodic function with spectral accuracy (the
trapezoidal rule on a circle); R6 has degree 9, so any ``G >= 10`` gives its normaliser to round-off.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from gflownet_measure.options import lookup

__all__ = ["TorusTarget", "TargetSpec", "TARGETS", "get_target", "periodic_grid", "closed_grid", "grid_log_normaliser", "check_log_reward_grid", "r6"]

TWO_PI = 2 * math.pi


@dataclass(frozen=True)
class TorusTarget:
    """A reward density on :math:`[0, 2\\pi)^n` w.r.t. Haar measure and a partition of the torus into named basins.

    Attributes:
        log_reward: :math:`\\log R(\\theta)` ``[B]`` (float64) at angles ``[B, n]``, what training sees.
        log_reward_exact: the same density as evaluation computes it (the molecule: exact energies where training reads an
            interpolated grid); ``log_reward`` itself where they agree.
        regions: basin names; ``region_of(theta) [B]`` indexes them (-1: in no basin).
    """

    name: str
    n_dim: int
    log_reward: Callable[[Tensor], Tensor]
    log_reward_exact: Callable[[Tensor], Tensor]
    regions: tuple[str, ...]
    region_of: Callable[[Tensor], Tensor]
    info: tuple[tuple[str, float], ...] = ()  # numbers worth reporting (grid size, interpolation error, ...)


@dataclass(frozen=True)
class TargetSpec:
    """A registered target: ``validate(config)`` raises a one-line ``ValueError`` for settings it cannot use (cheap),
    ``build(config)`` returns the :class:`TorusTarget`."""

    validate: Callable
    build: Callable


def periodic_grid(n: int, G: int) -> Tensor:
    """The ``G^n`` points ``[G^n, n]`` (float64) of the uniform periodic grid :math:`2\\pi (j + 1/2)/G`, first coordinate slowest."""
    side = (torch.arange(G, dtype=torch.float64) + 0.5) * (TWO_PI / G)
    return torch.cartesian_prod(*[side] * n).reshape(-1, n)


def closed_grid(n: int, G: int) -> Tensor:
    """The ``G^n`` points ``[G^n, n]`` (float64) of ``linspace(0, 2 pi, G)`` per angle, first coordinate slowest: the public torus
    code's test grid (``get_grid_terminating_states``; ``G = ceil(1000^{1/n})``, 32 for ``n = 2``), whose end points 0 and
    :math:`2\\pi` are the same angle, so the seam is counted twice. Not a quadrature rule (that is :func:`periodic_grid`)."""
    side = torch.linspace(0.0, TWO_PI, G, dtype=torch.float64)
    return torch.cartesian_prod(*[side] * n).reshape(-1, n)


def grid_log_normaliser(log_R: Tensor, n: int, G: int) -> float:
    """:math:`\\log \\int_{\\mathbb T^n} R\\, d\\lambda \\approx \\log \\sum_j R(\\theta_j) + n \\log(2\\pi / G)` on :func:`periodic_grid` (module docstring)."""
    return float(torch.logsumexp(log_R.double(), 0)) + n * math.log(TWO_PI / G)


def check_log_reward_grid(name: str, log_R: Tensor, points: Tensor) -> None:
    """Raise a one-line ``ValueError`` if :math:`\\log R` is NaN or ``+inf`` anywhere on the grid (a reward that is NaN, negative
    or infinite there) or ``-inf`` everywhere (no mass)."""
    bad = torch.isnan(log_R) | (log_R == math.inf)
    if bad.any():
        i = int(bad.nonzero()[0])
        raise ValueError(
            f"target {name}: the reward is not a finite non-negative number at {int(bad.sum())} of {len(log_R)} grid points (first: theta = {[round(v, 4) for v in points[i].tolist()]})"
        )
    if not bool((log_R > -math.inf).any()):
        raise ValueError(f"target {name}: the reward is zero on the whole grid")


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


def _alanine_validate(config) -> None:
    from . import alanine  # the molecule's module imports openmm lazily; this checks the settings it can without it

    alanine.validate(config)


def _alanine_build(config) -> TorusTarget:
    from . import alanine

    return alanine.target(config)


TARGETS: dict[str, TargetSpec] = {
    "r6": TargetSpec(_r6_validate, lambda config: r6(config.n_dim)),
    "alanine": TargetSpec(_alanine_validate, _alanine_build),
}


@functools.lru_cache(maxsize=8)
def _cached(config) -> TorusTarget:
    return lookup(TARGETS, config.target, "torus target").build(config)


def get_target(config) -> TorusTarget:
    """The :class:`TorusTarget` of a torus config (built once per process and config: a frozen dataclass is hashable)."""
    return _cached(config)
