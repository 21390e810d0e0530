"""The densities :math:`P_\\phi(\\theta \\mid G)` of JSP-GFN's parameter heads (Deleu et al. 2023, section 3.3 and
appendix; docs/references.md, 'Network') as torch distributions over flat parameter vectors ``theta [..., B, P]``.

The layout of ``theta`` is the CPD model's (:mod:`~gflownet_measure.jsp_gfn.bayesnets.cpds`); ``active [B, P]`` bool marks the
coordinates of :math:`\\Theta_G` for each graph (``model.active(adj)``):

- :class:`DiagNormalTheta` (``lingauss-diag``, ``mlp``): :math:`\\theta_i \\sim \\mathcal N(\\mu_i, \\sigma_i^2)` independently on
  the active coordinates;
- :class:`FullNormalTheta` (``lingauss-full``; linear models, ``P = d^2`` row-major with ``theta[i d + j]`` the weight of
  :math:`i \\to j`): :math:`\\theta_{\\cdot j} \\sim \\mathcal N(\\mu_j, (U_j^\\top U_j)^{-1})` per child ``j`` on its parents,
  with :math:`U_j` an upper-triangular factor of the precision.

Only the active coordinates are random: samples are exactly 0 elsewhere, and ``log_prob`` is a density w.r.t. Lebesgue
measure on the active coordinates only (:class:`~gflownet_measure.jsp_gfn.dag_params.space.ThetaChart`); it reads them alone,
whatever the others hold (NaN included). :math:`\\varepsilon \\sim \\mathcal N(0, I)` of the reparametrised samples
comes from torch's global generator.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.distributions import Distribution, constraints

from gflownet_measure.gaussian import LOG_2PI

__all__ = ["MaskedNormalTheta", "DiagNormalTheta", "FullNormalTheta"]


class _ActiveCoordinates(constraints.Constraint):
    """:math:`\\Theta_G` inside :math:`\\mathbb R^P`: real on the active coordinates ``active [B, P]``, exactly 0 elsewhere."""

    event_dim = 1

    def __init__(self, active: Tensor):
        self.active = active

    def check(self, value: Tensor) -> Tensor:
        return torch.where(self.active, value == value, value == 0).all(-1)


class MaskedNormalTheta(Distribution):
    """:math:`P_\\phi(\\theta \\mid G)` on the graphs of a batch: batch shape ``[B]``, event shape ``[P]``, active coordinates ``active [B, P]``.

    Subclasses give :meth:`_draw`, :meth:`log_prob` and row selection ``dist[rows]`` (the graphs ``rows`` of the
    batch, a slice or a 1-D index). ``sample`` is torch's: ``rsample`` without gradients.
    """

    arg_constraints: dict = {}
    has_rsample = True

    def __init__(self, active: Tensor):
        self.active = active
        super().__init__(batch_shape=active.shape[:-1], event_shape=active.shape[-1:], validate_args=False)

    @property
    def support(self) -> constraints.Constraint:
        """:math:`\\Theta_G` of each graph: real on its active coordinates, 0 elsewhere."""
        return _ActiveCoordinates(self.active)

    def _draw(self, n: int) -> Tensor:
        """``n`` reparametrised samples ``[n, B, P]``."""
        raise NotImplementedError

    def __getitem__(self, rows) -> MaskedNormalTheta:
        """The density of the graphs ``rows`` of the batch (a slice or a 1-D index)."""
        raise NotImplementedError

    def rsample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = torch.Size()) -> Tensor:
        """Reparametrised :math:`\\theta \\sim P_\\phi(\\cdot \\mid G)`, ``[*sample_shape, B, P]``, exactly 0 off the active coordinates."""
        theta = self._draw(math.prod(sample_shape) if sample_shape else 1)
        return theta.reshape(*sample_shape, *theta.shape[1:]) if sample_shape else theta[0]


class DiagNormalTheta(MaskedNormalTheta):
    """:math:`\\theta_i \\sim \\mathcal N(\\mu_i, \\sigma_i^2)` independently on the active coordinates.

    .. math:: \\log P_\\phi(\\theta \\mid G) = \\sum_{i \\in \\Theta_G} \\log \\mathcal N(\\theta_i; \\mu_i, \\sigma_i^2), \\qquad
       \\theta = (\\mu + \\sigma \\varepsilon) \\odot 1_{\\Theta_G}.

    Args:
        loc: ``[B, P]``, :math:`\\mu`.
        scale: ``[B, P]``, :math:`\\sigma > 0` on the active coordinates; any value off them (it is masked here: a scale
            that underflowed to 0 there gives no 0/0).
        active: ``[B, P]`` bool, :math:`\\Theta_G`.
    """

    def __init__(self, loc: Tensor, scale: Tensor, active: Tensor):
        self.loc, self.scale = loc, scale
        super().__init__(active)

    def __getitem__(self, rows) -> DiagNormalTheta:
        return DiagNormalTheta(self.loc[rows], self.scale[rows], self.active[rows])

    @property
    def mean(self) -> Tensor:
        return torch.where(self.active, self.loc, 0.0)

    @property
    def variance(self) -> Tensor:
        """:math:`\\sigma^2` on the active coordinates, 0 elsewhere (the samples are exactly 0 there)."""
        return torch.where(self.active, self.scale.square(), 0.0)

    def _draw(self, n: int) -> Tensor:
        eps = torch.randn((n, *self.loc.shape), dtype=self.loc.dtype, device=self.loc.device)  # [S, B, P]
        return torch.where(self.active, self.loc + self.scale * eps, 0.0)

    def log_prob(self, value: Tensor) -> Tensor:
        """``value [B, P]`` or ``[S, B, P]`` -> ``[B]`` or ``[S, B]``; inactive entries are ignored."""
        loc, on = self.loc, self.active
        theta = torch.where(on, value, loc)  # off the active coordinates theta - loc = 0 exactly
        scale = torch.where(on, self.scale, 1.0)  # off them a scale may have underflowed to 0: no 0/0
        z = (theta - loc) / scale
        return torch.where(on, -0.5 * (z.square() + LOG_2PI) - scale.log(), 0.0).sum(-1)


class FullNormalTheta(MaskedNormalTheta):
    """``lingauss_full``: per child ``j``, :math:`\\theta_{\\cdot j} \\sim \\mathcal N(\\mu_j, (U_j^\\top U_j)^{-1})` on its parents :math:`P_j`.

    With :math:`k_j = |P_j|` and :math:`\\delta_j = \\theta_{\\cdot j} - \\mu_j` masked to the parents,

    .. math:: \\log P_\\phi(\\theta \\mid G) = \\sum_j -\\tfrac12\\Big(k_j \\log 2\\pi - 2 \\sum_{a \\in P_j} \\log (U_j)_{aa} + \\|U_j \\delta_j\\|^2\\Big).

    A non-parent row ``a`` of :math:`U_j` is :math:`e_a^\\top` (unit diagonal, off-diagonals only between parents),
    so it adds :math:`(\\delta_j)_a = 0` to the norm and :math:`\\log 1 = 0` to the log-determinant; the
    parent rows have zeros in non-parent columns. Hence the sum may run over all ``d`` rows and is the
    Gaussian density of the parent block with precision :math:`U_{PP}^\\top U_{PP}`.

    Samples: :math:`\\theta_{\\cdot j} = \\mu_j + U_j^{-1}\\varepsilon_j` (a triangular solve, one per ``(b, j)`` for
    all ``S`` samples at once), since :math:`\\mathrm{Cov}(U^{-1}\\varepsilon) = (U^\\top U)^{-1}`, masked to the edges.
    Values are flat (``theta[i d + j]``, the layout of :class:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian`).

    Args:
        loc: ``[B, d(i), d(j)]``, :math:`\\mu_{ij}`, zero off the edges.
        prec_chol: ``[B, d(child j), d, d]``, :math:`U_j` with :math:`\\Sigma_j^{-1} = U_j^\\top U_j`.
        adj: ``[B, d, d]``, the graphs, float 0/1 in ``loc``'s dtype.
    """

    def __init__(self, loc: Tensor, prec_chol: Tensor, adj: Tensor):
        self.loc, self.prec_chol, self.adj = loc, prec_chol, adj
        super().__init__(adj.flatten(-2) > 0)

    def __getitem__(self, rows) -> FullNormalTheta:
        return FullNormalTheta(self.loc[rows], self.prec_chol[rows], self.adj[rows])

    @property
    def mean(self) -> Tensor:
        return (self.loc * self.adj).flatten(-2)

    @property
    def covariance_matrix(self) -> Tensor:
        """``[B, d^2, d^2]``: :math:`\\mathrm{Cov}(\\theta_{ij}, \\theta_{kl}) = [j = l]\\, ((U_j^\\top U_j)^{-1})_{ik}` on the parents, 0 off the edges."""
        B, d = self.adj.shape[:2]
        inv = torch.linalg.solve_triangular(self.prec_chol, torch.eye(d, dtype=self.prec_chol.dtype).expand_as(self.prec_chol), upper=True)  # U_j^{-1}
        cov = inv @ inv.transpose(-1, -2) * (self.adj.transpose(1, 2)[..., :, None] * self.adj.transpose(1, 2)[..., None, :])  # [B, j, i, k]
        full = torch.einsum("bjik,jl->bijkl", cov, torch.eye(d, dtype=cov.dtype))
        return full.reshape(B, d * d, d * d)

    def _draw(self, n: int) -> Tensor:
        loc = self.loc
        eps = torch.randn((*loc.shape, n), dtype=loc.dtype, device=loc.device)  # [B, d(j), d, S]
        noise = torch.linalg.solve_triangular(self.prec_chol, eps, upper=True)  # [B, j, d(i), S]
        return ((loc + noise.permute(3, 0, 2, 1)) * self.adj).flatten(-2)

    def log_prob(self, value: Tensor) -> Tensor:
        """``value [B, d^2]`` or ``[S, B, d^2]`` -> ``[B]`` or ``[S, B]``; entries off the edges are ignored."""
        loc, adj = self.loc, self.adj
        B, d = adj.shape[:2]
        theta = torch.where(adj > 0, value.reshape(*value.shape[:-1], d, d), loc)  # off the edges theta - loc = 0 exactly
        delta = (theta - loc).reshape(-1, B, d, d)  # [S, B, d(i), d(j)], zero off the edges
        z = torch.einsum("bjac,sbcj->sbja", self.prec_chol, delta)  # [S, B, j, d]: U_j delta_j
        log_det = self.prec_chol.diagonal(dim1=-2, dim2=-1).log().sum((-2, -1))  # [B]; non-parent diagonals are 1
        log_p = -0.5 * (adj.sum((-2, -1)) * LOG_2PI + z.square().sum((-2, -1))) + log_det  # [S, B]
        return log_p.reshape(value.shape[:-1])
