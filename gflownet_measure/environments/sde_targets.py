"""Target densities on R^n for the SDE samplers (Lahlou et al. 2023, section 4.2; docs/references.md, 'SDE targets and Table 2').

Each target gives an unnormalised log-density :math:`\\log R(x)` w.r.t. Lebesgue measure, its exact
:math:`\\log Z`, and exact samples (for evaluation and for forward-KL training from data).

- ``gmm9``: :math:`R(x) = \\frac19 \\sum_{m \\in \\{-5,0,5\\}^2} \\mathcal N(x; m, 0.3 I_2)`, :math:`\\log Z = 0`.
- ``funnel``: :math:`x_0 \\sim \\mathcal N(0, \\sigma_0^2)`, :math:`x_i | x_0 \\sim \\mathcal N(0, e^{x_0})`, ``i = 1..9``,
  :math:`\\log Z = 0`, with :math:`\\sigma_0 = 1` as PIS (Zhang & Chen 2022), whose setting the paper follows.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from gflownet_measure.gaussian import LOG_2PI

__all__ = ["GaussianMixture9", "Funnel", "TARGETS"]


class GaussianMixture9:
    """Equal-weight mixture of 9 isotropic Gaussians at :math:`\\{-5, 0, 5\\}^2`, variance 0.3 per coordinate."""

    name, dim, log_Z = "gmm9", 2, 0.0
    variance = 0.3

    def __init__(self):
        side = torch.tensor([-5.0, 0.0, 5.0])
        self.means = torch.cartesian_prod(side, side)  # [9, 2]

    def log_prob(self, x: Tensor) -> Tensor:
        """:math:`\\log R(x)` ``[B]`` for ``x [B, 2]``: a log-sum-exp over the 9 components."""
        d2 = (x[:, None, :] - self.means.to(x)).square().sum(-1)  # [B, 9]
        log_comp = -0.5 * d2 / self.variance - 0.5 * self.dim * (LOG_2PI + math.log(self.variance))
        return torch.logsumexp(log_comp, 1) - math.log(9)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        k = torch.randint(9, (n,), generator=generator)
        return self.means.to(k.device)[k] + math.sqrt(self.variance) * torch.randn(n, self.dim, generator=generator, device=k.device)

    def mode_counts(self, x: Tensor, radius: float = 3.0) -> Tensor:
        """``[9]`` long: samples within ``radius`` standard deviations (Euclidean) of each mean."""
        d = torch.linalg.vector_norm(x[:, None, :].float() - self.means.to(x.device), dim=-1)
        return (d < radius * math.sqrt(self.variance)).sum(0)


class Funnel:
    """Neal's funnel in 10 dimensions: :math:`x_0 \\sim \\mathcal N(0, \\sigma_0^2)`, :math:`x_{1:9} | x_0 \\sim \\mathcal N(0, e^{x_0} I_9)`."""

    name, dim, log_Z = "funnel", 10, 0.0

    def __init__(self, sigma0: float = 1.0):
        self.sigma0 = sigma0

    def log_prob(self, x: Tensor) -> Tensor:
        x0, rest = x[:, 0], x[:, 1:]
        lp0 = -0.5 * (x0 / self.sigma0).square() - 0.5 * LOG_2PI - math.log(self.sigma0)
        lpr = -0.5 * rest.square().sum(1) * torch.exp(-x0) - 0.5 * (self.dim - 1) * (LOG_2PI + x0)
        return lp0 + lpr

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        x0 = self.sigma0 * torch.randn(n, 1, generator=generator)
        return torch.cat([x0, torch.exp(x0 / 2) * torch.randn(n, self.dim - 1, generator=generator)], 1)


TARGETS = {"gmm9": GaussianMixture9(), "funnel": Funnel()}
