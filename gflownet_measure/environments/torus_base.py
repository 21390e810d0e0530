"""What every target on the torus :math:`[0, 2\\pi)^n` shares: the :class:`TorusTarget` record (a reward density w.r.t. Haar
measure and its basins), periodic grid quadrature and the check of a reward on a grid. The named targets are
:mod:`gflownet_measure.environments.torus_targets` (R6, and alanine dipeptide from :mod:`gflownet_measure.environments.alanine`).

Quadrature: the uniform periodic grid :math:`\\theta_j = 2\\pi (j + 1/2) / G` with weights :math:`(2\\pi / G)^n` integrates a
trigonometric polynomial of degree below ``G`` exactly and a smooth periodic function with spectral accuracy (the
trapezoidal rule on a circle); R6 has degree 9, so any ``G >= 10`` gives its normaliser to round-off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

__all__ = ["TWO_PI", "TorusTarget", "periodic_grid", "closed_grid", "grid_log_normaliser", "check_log_reward_grid"]

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
