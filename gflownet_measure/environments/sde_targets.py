"""Target densities on R^n for the SDE samplers (Lahlou et al. 2023, section 4.2; Sendera et al. 2024, Table 1;
docs/references.md, 'SDE targets and Table 2' and 'Diffusion-sampler benchmark').

Each target gives an unnormalised log-density :math:`\\log R(x)` w.r.t. Lebesgue measure, its exact
:math:`\\log Z = \\log \\int R`, exact samples (for evaluation and for forward-KL training from data), the exact CDF of
its first coordinate's marginal (:meth:`cdf0`, for the KS distance of samples) and the log-density of the marginal of
its first two coordinates (:meth:`log_marginal01`, for figures).

- ``gmm9``: :math:`R(x) = \\frac19 \\sum_{m \\in \\{-5,0,5\\}^2} \\mathcal N(x; m, 0.3 I_2)`, :math:`\\log Z = 0`.
- ``gmm25``: :math:`R(x) = \\frac1{25} \\sum_{m \\in \\{-10,-5,0,5,10\\}^2} \\mathcal N(x; m, 0.3 I_2)`, :math:`\\log Z = 0`
  (gfn-diffusion's ``TwentyFiveGaussianMixture``, torchgfn 2.4.1's ``Grid25GaussianMixture``).
- ``funnel``: :math:`x_0 \\sim \\mathcal N(0, \\sigma_0^2)`, :math:`x_i | x_0 \\sim \\mathcal N(0, e^{x_0})`, ``i = 1..9``,
  :math:`\\log Z = 0`, with :math:`\\sigma_0 = 1` as PIS (Zhang & Chen 2022), whose setting Lahlou et al. follow
  (gfn-diffusion's ``EasyFunnel``, torchgfn's ``easy_funnel``).
- ``hard_funnel``: the same with :math:`\\sigma_0 = 3`, the funnel of Sendera et al. 2024, Table 1 (gfn-diffusion's
  ``HardFunnel``, torchgfn's ``hard_funnel``).
- ``many_well``: 16 independent pairs :math:`(x_{2i}, x_{2i+1})`, :math:`\\log R(x) = \\sum_{i<16} -x_{2i}^4 + 6 x_{2i}^2
  + \\tfrac12 x_{2i} - \\tfrac12 x_{2i+1}^2` (Midgley et al. 2022; gfn-diffusion's and torchgfn's ``ManyWell``), not
  normalised: :math:`\\log Z = 16 (\\log Z_1 + \\tfrac12 \\log 2\\pi) = 164.6957`, :math:`Z_1 = \\int e^{-x^4 + 6x^2 + x/2} dx
  = 11784.509` by quadrature (:class:`ManyWell`).
- ``lgcp``: the log-Gaussian Cox process on the Finnish pines (Møller, Syversveen & Waagepetersen 1998; d = 1,600),
  the posterior of the log-intensity on a 40 x 40 grid (:class:`CoxProcess`); its log Z is not known in closed form
  (``log_Z`` is ``None``) and it has no exact sampler: Sendera et al. 2024 report the estimates themselves (log Ẑ).
"""

from __future__ import annotations

import math
from functools import cached_property
from importlib import resources
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from gflownet_measure.gaussian import LOG_2PI

__all__ = ["SDETarget", "GridMixture", "Funnel", "ManyWell", "CoxProcess", "TARGETS"]


class SDETarget(Protocol):
    """What every target here has: a name, the dimension ``n``, :math:`\\log R` ``[B]`` at ``x [B, n]``, and its exact
    :math:`\\log Z` (``None`` where it is not known). Most also sample exactly, give :meth:`cdf0` and :meth:`log_marginal01`
    (module docstring): the classes say which."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def log_Z(self) -> float | None: ...

    def log_prob(self, x: Tensor) -> Tensor: ...


def _normal_cdf(z: Tensor) -> Tensor:
    """:math:`\\Phi(z)`, the standard normal CDF."""
    return 0.5 * torch.erfc(-z / math.sqrt(2.0))


class GridMixture:
    """Equal-weight mixture of isotropic Gaussians at the grid :math:`S^2` (``S`` = ``side``), variance 0.3 per coordinate.

    .. math:: R(x) = \\frac1{|S|^2} \\sum_{m \\in S^2} \\mathcal N(x; m, 0.3\\, I_2), \\qquad \\log Z = 0.
    """

    dim, log_Z = 2, 0.0
    variance = 0.3

    def __init__(self, name: str, side: tuple[float, ...]):
        self.name = name
        s = torch.tensor(side)
        self.means = torch.cartesian_prod(s, s)  # [M, 2]
        self.limits = (-(max(side) + 3.0), max(side) + 3.0)  # for figures

    def log_prob(self, x: Tensor) -> Tensor:
        """:math:`\\log R(x)` ``[B]`` for ``x [B, 2]``: a log-sum-exp over the components."""
        d2 = (x[:, None, :] - self.means.to(x)).square().sum(-1)  # [B, M]
        log_comp = -0.5 * d2 / self.variance - 0.5 * self.dim * (LOG_2PI + math.log(self.variance))
        return torch.logsumexp(log_comp, 1) - math.log(len(self.means))

    log_marginal01 = log_prob

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        k = torch.randint(len(self.means), (n,), generator=generator)
        return self.means.to(k.device)[k] + math.sqrt(self.variance) * torch.randn(n, self.dim, generator=generator, device=k.device)

    def cdf0(self, x0: Tensor) -> Tensor:
        """The exact CDF of :math:`x_0`: :math:`\\frac1{|S|} \\sum_{m \\in S} \\Phi((x_0 - m)/\\sqrt{0.3})`."""
        m = self.means[:, 0].unique().to(x0)
        return _normal_cdf((x0[:, None] - m) / math.sqrt(self.variance)).mean(1)

    def mode_counts(self, x: Tensor, radius: float = 3.0) -> Tensor:
        """``[M]`` long: samples within ``radius`` standard deviations (Euclidean) of each mean."""
        d = torch.linalg.vector_norm(x[:, None, :].float() - self.means.to(x.device), dim=-1)
        return (d < radius * math.sqrt(self.variance)).sum(0)

    def mode_share(self, radius: float = 3.0) -> float:
        """The exact probability that a sample falls where :meth:`mode_counts` counts it for one mode: its weight
        :math:`1/M` times :math:`P(\\chi^2_2 < r^2) = 1 - e^{-r^2/2}` (the mass of one component within ``radius``
        standard deviations; the other components' mass there is below :math:`10^{-17}` at the grids' spacing of
        5 = 9.1 standard deviations)."""
        return (1.0 - math.exp(-0.5 * radius**2)) / len(self.means)


class Funnel:
    """Neal's funnel in ``dim`` dimensions: :math:`x_0 \\sim \\mathcal N(0, \\sigma_0^2)`, :math:`x_{1:d-1} | x_0 \\sim \\mathcal N(0, e^{x_0} I)`.

    .. math:: R(x) = \\mathcal N(x_0; 0, \\sigma_0^2) \\prod_{i=1}^{d-1} \\mathcal N(x_i; 0, e^{x_0}), \\qquad \\log Z = 0.
    """

    log_Z = 0.0

    def __init__(self, name: str = "funnel", sigma0: float = 1.0, dim: int = 10):
        self.name, self.sigma0, self.dim = name, sigma0, dim
        self.limits = (-3.0 * sigma0 - 1.0, 3.0 * sigma0 + 1.0)

    def log_prob(self, x: Tensor) -> Tensor:
        x0, rest = x[:, 0], x[:, 1:]
        lp0 = -0.5 * (x0 / self.sigma0).square() - 0.5 * LOG_2PI - math.log(self.sigma0)
        lpr = -0.5 * rest.square().sum(1) * torch.exp(-x0) - 0.5 * (self.dim - 1) * (LOG_2PI + x0)
        return lp0 + lpr

    def log_marginal01(self, x: Tensor) -> Tensor:
        """:math:`\\log \\mathcal N(x_0; 0, \\sigma_0^2) + \\log \\mathcal N(x_1; 0, e^{x_0})` for ``x [B, 2]``."""
        return Funnel(self.name, self.sigma0, 2).log_prob(x)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        x0 = self.sigma0 * torch.randn(n, 1, generator=generator)
        return torch.cat([x0, torch.exp(x0 / 2) * torch.randn(n, self.dim - 1, generator=generator)], 1)

    def cdf0(self, x0: Tensor) -> Tensor:
        """The exact CDF of :math:`x_0`: :math:`\\Phi(x_0 / \\sigma_0)`."""
        return _normal_cdf(x0 / self.sigma0)


class ManyWell:
    """Many-well (Midgley et al. 2022): ``dim / 2`` independent copies of the 2-D double well.

    .. math:: \\log R(x) = \\sum_{i < d/2} f(x_{2i}) - \\tfrac12 x_{2i+1}^2, \\quad f(x) = -x^4 + 6x^2 + \\tfrac12 x,
       \\qquad \\log Z = \\tfrac d2 \\big(\\log Z_1 + \\tfrac12 \\log 2\\pi\\big), \\quad Z_1 = \\int e^{f(x)} dx.

    :math:`Z_1` is a trapezoid sum of :math:`e^{f}` on ``2 * 10^5`` intervals of ``[-5, 5]`` (:math:`f(\\pm 5) < -470`:
    the tails are below float64 round-off): 11784.509, as gfn-diffusion's and torchgfn's constant 11784.50927;
    ``dim = 32``: :math:`\\log Z = 164.6957`. Exact samples: :math:`x_{2i}` by inverting the piecewise-linear CDF of
    :math:`e^f` on that grid (the error of the interpolated CDF is below ``1e-8``), :math:`x_{2i+1} \\sim \\mathcal N(0, 1)`.
    """

    def __init__(self, name: str = "many_well", dim: int = 32):
        if dim % 2:
            raise ValueError(f"many-well needs an even dimension, got {dim}")
        self.name, self.dim, self.n_pairs = name, dim, dim // 2
        self.grid = torch.linspace(-5.0, 5.0, 200001, dtype=torch.float64)
        f = self.well(self.grid)
        h = float(self.grid[1] - self.grid[0])
        top = float(f.max())
        p = torch.exp(f - top)
        cum = torch.cat([p.new_zeros(1), torch.cumsum(0.5 * h * (p[1:] + p[:-1]), 0)])
        self.log_Z1 = math.log(float(cum[-1])) + top
        self.cdf_grid = cum / cum[-1]
        self.log_Z = self.n_pairs * (self.log_Z1 + 0.5 * LOG_2PI)
        self.limits = (-3.0, 3.0)

    @staticmethod
    def well(x: Tensor) -> Tensor:
        """:math:`f(x) = -x^4 + 6 x^2 + x/2`, the unnormalised log-density of each pair's first coordinate."""
        x2 = x.square()
        return -x2.square() + 6.0 * x2 + 0.5 * x

    def log_prob(self, x: Tensor) -> Tensor:
        return (self.well(x[:, 0::2]) - 0.5 * x[:, 1::2].square()).sum(1)

    def log_marginal01(self, x: Tensor) -> Tensor:
        """The normalised density of one pair, :math:`f(x_0) - \\tfrac12 x_1^2 - \\log Z_1 - \\tfrac12 \\log 2\\pi`, for ``x [B, 2]``."""
        return self.well(x[:, 0]) - 0.5 * x[:, 1].square() - self.log_Z1 - 0.5 * LOG_2PI

    def cdf0(self, x0: Tensor) -> Tensor:
        """The exact CDF of one pair's first coordinate, interpolated on the quadrature grid."""
        xd = x0.double().clamp(-5.0, 5.0)
        i = torch.searchsorted(self.grid, xd).clamp(1, len(self.grid) - 1)
        lo, hi = self.grid[i - 1], self.grid[i]
        a = (xd - lo) / (hi - lo)
        return ((1 - a) * self.cdf_grid[i - 1] + a * self.cdf_grid[i]).to(x0.dtype)

    def sample_well(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> Tensor:
        """Exact samples of :math:`e^{f}/Z_1` by inverse CDF (float64)."""
        u = torch.rand(shape, generator=generator, dtype=torch.float64)
        i = torch.searchsorted(self.cdf_grid, u).clamp(1, len(self.grid) - 1)
        c0, c1 = self.cdf_grid[i - 1], self.cdf_grid[i]
        a = ((u - c0) / (c1 - c0).clamp(min=1e-300)).clamp(0.0, 1.0)
        return self.grid[i - 1] + a * (self.grid[i] - self.grid[i - 1])

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        x = torch.randn(n, self.dim, generator=generator)
        x[:, 0::2] = self.sample_well((n, self.n_pairs), generator).to(x.dtype)
        return x

    def well_mass(self, x: Tensor) -> Tensor:
        """``[d/2]``: the fraction of samples in the right well (:math:`x_{2i} > 0`) of each pair; exact: :meth:`right_mass`."""
        return (x[:, 0::2] > 0).double().mean(0)

    def right_mass(self) -> float:
        """:math:`P(x_{2i} > 0) = 1 - \\mathrm{CDF}(0)`, exact by the quadrature."""
        return 1.0 - float(self.cdf0(torch.zeros(1, dtype=torch.float64)))


class CoxProcess:
    """The log-Gaussian Cox process on the Finnish pines (Møller, Syversveen & Waagepetersen 1998, section 5; the LGCP
    of Arbel et al. 2021, Zhang & Chen 2022 (PIS), Vargas et al. 2023 (DDS) and Sendera et al. 2024, Table 1).

    The 126 trees (``data/finpines.csv``, rescaled to the unit square) are counted on a ``grid`` x ``grid`` lattice of
    cells of area :math:`a = 1/d`, :math:`d` = ``grid``², giving counts :math:`n_i`; cell :math:`i = (r, c)` is row
    ``r`` = ⌊``grid`` x⌋ and column ``c`` = ⌊``grid`` y⌋ (a point on the upper edge joins the last cell), flattened as
    ``r * grid + c``. The latent log-intensity :math:`x \\in \\mathbb R^d` has a Gaussian prior with the exponential
    covariance :math:`K_{ij} = \\sigma^2 \\exp(-\\lVert u_i - u_j \\rVert / (G\\beta))` of the cells' integer indices
    :math:`u`, :math:`\\sigma^2 = 1.91`, :math:`\\beta = 1/33`, :math:`G` = ``grid``, and constant mean
    :math:`\\mu = \\log 126 - \\sigma^2/2`; given :math:`x` the counts are independent Poisson with means :math:`a e^{x_i}`:

    .. math:: \\log R(x) = \\log \\mathcal N(x; \\mu \\mathbf 1, K) + \\sum_i \\big(n_i x_i - a\\, e^{x_i}\\big).

    As in the public codes of those papers the Poisson terms leave out the constants :math:`n_i \\log a - \\log n_i!`
    (:attr:`likelihood_constant`, -941.21 at ``grid = 40``), so the normaliser :math:`Z = \\int R` and its estimates
    compare with their log Ẑ; the posterior itself is unchanged. The prior's precision :math:`K^{-1}` and :math:`\\log\\det K` come from a float64
    Cholesky factor, computed at first use; :math:`\\nabla \\log R(x) = -K^{-1}(x - \\mu) + n - a e^{x}`.
    """

    log_Z = None  # no closed form: the estimates are reported themselves
    signal_variance, length_scale = 1.91, 1.0 / 33.0

    def __init__(self, name: str = "lgcp", grid: int = 40):
        self.name, self.grid, self.dim = name, grid, grid * grid
        with resources.files("gflownet_measure.environments").joinpath("data/finpines.csv").open() as f:
            self.points = torch.from_numpy(np.loadtxt(f, delimiter=",", skiprows=1))  # [126, 2] in the unit square
        cell = torch.floor(self.points * grid).long().clamp(max=grid - 1)
        self.counts = torch.bincount(cell[:, 0] * grid + cell[:, 1], minlength=self.dim).double()  # [d]
        self.area = 1.0 / self.dim
        self.mean = math.log(len(self.points)) - 0.5 * self.signal_variance
        self.likelihood_constant = float((self.counts * math.log(self.area) - torch.lgamma(self.counts + 1)).sum())

    def covariance(self) -> Tensor:
        """``[d, d]`` float64: :math:`K_{ij} = \\sigma^2 \\exp(-\\lVert u_i - u_j \\rVert / (G\\beta))`."""
        g = torch.arange(self.grid, dtype=torch.float64)
        u = torch.cartesian_prod(g, g)  # [d, 2], row-major as the counts
        return self.signal_variance * torch.exp(-torch.cdist(u, u) / (self.grid * self.length_scale))

    @cached_property
    def _prior(self) -> tuple[Tensor, Tensor, float]:
        """The prior's Cholesky factor :math:`L` (:math:`K = LL^\\top`), its precision :math:`K^{-1}` (both float64) and
        the normaliser :math:`-\\tfrac d2 \\log 2\\pi - \\log\\det L`."""
        chol = torch.linalg.cholesky(self.covariance())
        return chol, torch.cholesky_inverse(chol), -0.5 * self.dim * LOG_2PI - float(chol.diagonal().log().sum())

    def log_prob(self, x: Tensor) -> Tensor:
        """:math:`\\log R(x)` ``[B]`` for ``x [B, d]``, in the dtype of ``x``."""
        _, precision, log_norm = self._prior
        diff = x - self.mean
        quadratic = ((diff @ precision.to(x)) * diff).sum(1)
        return log_norm - 0.5 * quadratic + self._log_likelihood(x)

    def _log_likelihood(self, x: Tensor) -> Tensor:
        """:math:`\\sum_i (n_i x_i - a e^{x_i})` ``[B]``: the Poisson log-likelihood of the counts less its constants."""
        return (self.counts.to(x) * x - self.area * torch.exp(x)).sum(1)

    def whitened_log_prob(self, z: Tensor) -> Tensor:
        """The same target in the prior's whitened coordinates, :math:`x = \\mu + Lz`:
        :math:`\\log R(\\mu + Lz) + \\log\\det L = \\log\\mathcal N(z; 0, I) + \\sum_i (n_i x_i - a e^{x_i})`, ``[B]`` for
        ``z [B, d]``. Its normaliser is the same :math:`Z`, and its prior part is the standard normal, so an annealed
        sampler that starts from :math:`\\mathcal N(0, I)` starts from the prior (the LGCP reference of
        :func:`~gflownet_measure.baselines.smc.annealed_smc`)."""
        chol = self._prior[0].to(z)
        x = self.mean + z @ chol.T
        return -0.5 * z.square().sum(1) - 0.5 * self.dim * LOG_2PI + self._log_likelihood(x)

    def field(self, x: Tensor) -> Tensor:
        """``[grid, grid]``: the posterior mean of the intensity :math:`e^{x_i}` per cell from samples ``x [K, d]``."""
        return torch.exp(x.double()).mean(0).reshape(self.grid, self.grid)


TARGETS: dict[str, SDETarget] = {
    "gmm9": GridMixture("gmm9", (-5.0, 0.0, 5.0)),
    "gmm25": GridMixture("gmm25", (-10.0, -5.0, 0.0, 5.0, 10.0)),
    "funnel": Funnel("funnel", 1.0),
    "hard_funnel": Funnel("hard_funnel", 3.0),
    "many_well": ManyWell(),
    "lgcp": CoxProcess(),
}
