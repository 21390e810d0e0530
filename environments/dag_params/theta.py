"""The densities :math:`P_\\phi(\\theta \\mid G)` of JSP-GFN's parameter heads (Deleu et al. 2023, section 3.3 and
appendix; docs/references.md, 'Network') as torch distributions over ``theta [..., B, d, d]``.

``theta[b, i, j]`` is the weight of the edge :math:`i \\to j` of graph ``b`` (``adj [B, d, d]``, float 0/1 in the
parameters' dtype), so column :math:`\\theta_{\\cdot j}` holds the weights of the parents :math:`P_j` of ``X_j``:

- :class:`DiagNormalTheta` (``lingauss_diag``): :math:`\\theta_{ij} \\sim \\mathcal N(\\mu_{ij}, \\sigma_{ij}^2)`
  independently on the edges of ``G``;
- :class:`FullNormalTheta` (``lingauss_full``): :math:`\\theta_{\\cdot j} \\sim \\mathcal N(\\mu_j, (U_j^\\top U_j)^{-1})`
  per child ``j`` on its parents, with :math:`U_j` an upper-triangular factor of the precision.

Only the weights of present edges are random: samples are exactly 0 off the edges, and ``log_prob`` is a density
w.r.t. Lebesgue measure on the *active* coordinates :math:`\\{\\theta_{ij} : A_{ij} = 1\\}` only (dimension
:math:`|E(G)|`, :math:`\\Theta_G` of :class:`~environments.dag_params.space.EdgeWeightsChart`); it reads the edge
entries alone, whatever the others hold (NaN included). :math:`\\varepsilon \\sim \\mathcal N(0, I)` of the
reparametrised samples comes from torch's global generator.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.distributions import Distribution, constraints

from gflownet_measure.gaussian import LOG_2PI

__all__ = ["MaskedNormalTheta", "DiagNormalTheta", "FullNormalTheta"]


class _EdgeWeights(constraints.Constraint):
    """:math:`\\Theta_G` of ``adj [B, d, d]`` inside :math:`\\mathbb R^{d \\times d}`: real on the edges, exactly 0 elsewhere."""

    event_dim = 2

    def __init__(self, adj: Tensor):
        self.adj = adj

    def check(self, value: Tensor) -> Tensor:
        return torch.where(self.adj > 0, value == value, value == 0).flatten(-2).all(-1)


class MaskedNormalTheta(Distribution):
    """:math:`P_\\phi(\\theta \\mid G)` on the graphs ``adj [B, d, d]``: batch shape ``[B]``, event shape ``[d, d]``.

    Subclasses give :meth:`_draw`, :meth:`log_prob` and row selection ``dist[rows]`` (the graphs ``rows`` of the
    batch, a slice or a 1-D index). ``sample`` is torch's: ``rsample`` without gradients.
    """

    arg_constraints: dict = {}
    has_rsample = True

    def __init__(self, loc: Tensor, adj: Tensor):
        self.loc, self.adj = loc, adj
        super().__init__(batch_shape=adj.shape[:-2], event_shape=adj.shape[-2:], validate_args=False)

    @property
    def support(self) -> constraints.Constraint:
        """:math:`\\Theta_G` of each graph: real weights on its edges, 0 elsewhere."""
        return _EdgeWeights(self.adj)

    def _draw(self, n: int) -> Tensor:
        """``n`` reparametrised samples ``[n, B, d, d]``."""
        raise NotImplementedError

    def rsample(self, sample_shape: torch.Size | tuple[int, ...] = torch.Size()) -> Tensor:
        """Reparametrised :math:`\\theta \\sim P_\\phi(\\cdot \\mid G)`, ``[*sample_shape, B, d, d]``, exactly 0 off the edges."""
        theta = self._draw(math.prod(sample_shape) if sample_shape else 1)
        return theta.reshape(*sample_shape, *theta.shape[1:]) if sample_shape else theta[0]


class DiagNormalTheta(MaskedNormalTheta):
    """``lingauss_diag``: :math:`\\theta_{ij} \\sim \\mathcal N(\\mu_{ij}, \\sigma_{ij}^2)` independently on the edges :math:`A_{ij} = 1`.

    .. math:: \\log P_\\phi(\\theta \\mid G) = \\sum_{A_{ij} = 1} \\log \\mathcal N(\\theta_{ij}; \\mu_{ij}, \\sigma_{ij}^2), \\qquad
       \\theta = (\\mu + \\sigma \\varepsilon) \\odot A.

    Args:
        loc: ``[B, d, d]``, :math:`\\mu_{ij}`, zero off the edges.
        scale: ``[B, d, d]``, :math:`\\sigma_{ij} > 0` on the edges; any value off them (it is masked here: a scale
            that underflowed to 0 there gives no 0/0).
        adj: ``[B, d, d]``, the graphs, float 0/1 in ``loc``'s dtype.
    """

    def __init__(self, loc: Tensor, scale: Tensor, adj: Tensor):
        self.scale = scale
        super().__init__(loc, adj)

    def __getitem__(self, rows) -> DiagNormalTheta:
        return DiagNormalTheta(self.loc[rows], self.scale[rows], self.adj[rows])

    def _draw(self, n: int) -> Tensor:
        eps = torch.randn((n, *self.loc.shape), dtype=self.loc.dtype, device=self.loc.device)  # [S, B, d, d]
        return (self.loc + self.scale * eps) * self.adj

    def log_prob(self, value: Tensor) -> Tensor:
        """``value [B, d, d]`` or ``[S, B, d, d]`` -> ``[B]`` or ``[S, B]``; entries off the edges are ignored."""
        loc, adj = self.loc, self.adj
        theta = torch.where(adj > 0, value, loc)  # off the edges theta - loc = 0 exactly
        scale = torch.where(adj > 0, self.scale, 1.0)  # off the edges a scale may have underflowed to 0: no 0/0
        z = (theta - loc) / scale
        return ((-0.5 * (z.square() + LOG_2PI) - scale.log()) * adj).sum((-2, -1))


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

    Args:
        loc: ``[B, d(i), d(j)]``, :math:`\\mu_{ij}`, zero off the edges.
        prec_chol: ``[B, d(child j), d, d]``, :math:`U_j` with :math:`\\Sigma_j^{-1} = U_j^\\top U_j`.
        adj: ``[B, d, d]``, the graphs, float 0/1 in ``loc``'s dtype.
    """

    def __init__(self, loc: Tensor, prec_chol: Tensor, adj: Tensor):
        self.prec_chol = prec_chol
        super().__init__(loc, adj)

    def __getitem__(self, rows) -> FullNormalTheta:
        return FullNormalTheta(self.loc[rows], self.prec_chol[rows], self.adj[rows])

    def _draw(self, n: int) -> Tensor:
        loc = self.loc
        eps = torch.randn((*loc.shape, n), dtype=loc.dtype, device=loc.device)  # [B, d(j), d, S]
        noise = torch.linalg.solve_triangular(self.prec_chol, eps, upper=True)  # [B, j, d(i), S]
        return (loc + noise.permute(3, 0, 2, 1)) * self.adj

    def log_prob(self, value: Tensor) -> Tensor:
        """``value [B, d, d]`` or ``[S, B, d, d]`` -> ``[B]`` or ``[S, B]``; entries off the edges are ignored."""
        loc, adj = self.loc, self.adj
        theta = torch.where(adj > 0, value, loc)  # off the edges theta - loc = 0 exactly
        B, d = adj.shape[:2]
        delta = (theta - loc).reshape(-1, B, d, d)  # [S, B, d(i), d(j)], zero off the edges
        z = torch.einsum("bjac,sbcj->sbja", self.prec_chol, delta)  # [S, B, j, d]: U_j delta_j
        log_det = self.prec_chol.diagonal(dim1=-2, dim2=-1).log().sum((-2, -1))  # [B]; non-parent diagonals are 1
        log_p = -0.5 * (adj.sum((-2, -1)) * LOG_2PI + z.square().sum((-2, -1))) + log_det  # [S, B]
        return log_p.reshape(theta.shape[:-2])
