"""Coordinate families: densities :math:`q_c(u)` over the chart coordinates of a piece (Lahlou et al. 2023, section 4.1).

A head maps raw network outputs to a distribution on ``[0, 1]^k`` w.r.t. ``du``;
:class:`~gflownet_measure.densities.KernelDensity` divides it by the chart's Jacobian.

Every law here clamps its samples and its evaluation points to ``[edge, 1 - edge]``. A Beta with a
concentration below 1 puts mass within float round-off of 0 and 1 (Beta(0.1, 0.1): 13% beyond 1e-6 of
an edge); there a chart's inverse cannot recover ``u`` to the precision its log-density needs (an arc
maps ``u = 1e-30`` and ``u = 0`` to the same float), so ``log_prob`` turns infinite or NaN on sampled
transitions. Clamping both keeps sample and density on the same representable points; the moved mass
is at most :math:`P(u < \\text{edge}) + P(u > 1 - \\text{edge})`.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.distributions import Beta, Dirichlet, Distribution, Independent, constraints

from .densities import gumbel_max

__all__ = ["ClampedBetaProduct", "BetaMixture", "BetaHead", "BetaMixtureHead"]


class _EdgeClamped(Distribution):
    """A law on ``[0, 1]^k`` (batch ``batch_shape``, event ``[k]``) whose samples and evaluation points are clamped to ``[edge, 1 - edge]`` (module docstring)."""

    arg_constraints: dict = {}
    support = constraints.independent(constraints.unit_interval, 1)

    def __init__(self, batch_shape: torch.Size, event_shape: torch.Size, edge: float):
        self.edge = edge
        super().__init__(batch_shape=batch_shape, event_shape=event_shape, validate_args=False)

    def _clamp(self, u: Tensor) -> Tensor:
        return u.clamp(self.edge, 1 - self.edge)


class ClampedBetaProduct(_EdgeClamped):
    """:math:`q(u) = \\prod_{i=1}^k \\mathrm{Beta}(u_i; \\alpha_i, \\beta_i)`, edge-clamped; ``alpha, beta [..., k]``.

    Reparametrisable (``rsample``): torch draws a Beta through its reparametrised Gamma variables.
    """

    has_rsample = True

    def __init__(self, alpha: Tensor, beta: Tensor, edge: float):
        self.betas = Independent(Beta(alpha, beta, validate_args=False), 1)
        super().__init__(self.betas.batch_shape, self.betas.event_shape, edge)

    def rsample(self, sample_shape=torch.Size()) -> Tensor:
        return self._clamp(self.betas.rsample(sample_shape))

    def sample(self, sample_shape=torch.Size()) -> Tensor:
        return self._clamp(self.betas.sample(sample_shape))

    def log_prob(self, value: Tensor) -> Tensor:
        return self.betas.log_prob(self._clamp(value))


class BetaMixture(_EdgeClamped):
    """:math:`q(u) = \\sum_j w_j \\prod_i \\mathrm{Beta}(u_i; \\alpha_{ji}, \\beta_{ji})`, :math:`w = \\mathrm{softmax}(\\ell)`, edge-clamped, built lazily.

    The law of ``MixtureSameFamily(Categorical(logits), Independent(Beta(alpha, beta), 1))``, which a
    rollout would build at every step and whose ``sample`` draws all ``C`` components at every row.
    Here construction stores the parameters (``logits [..., C]`` and ``conc [..., C, k, 2]``, the pairs
    :math:`(\\alpha, \\beta)`); ``sample`` draws the index :math:`j \\sim w` and then the Betas of component
    ``j`` only; ``log_prob`` is the log-sum-exp over components of the Beta log-densities. Both go through
    the library's ``Dirichlet`` on :math:`(u, 1 - u)`, which is what its ``Beta`` does (without stacking
    :math:`\\alpha` and :math:`\\beta` again at every call). Not reparametrisable: the choice of :math:`j` is discrete.
    """

    has_rsample = False

    def __init__(self, logits: Tensor, conc: Tensor, edge: float):
        self.logits, self.conc = logits, conc
        super().__init__(logits.shape[:-1], conc.shape[-2:-1], edge)

    def sample(self, sample_shape=torch.Size()) -> Tensor:
        with torch.no_grad():
            j = gumbel_max(self.logits.expand(*torch.Size(sample_shape), *self.logits.shape))  # [*S, *batch]
            index = j[..., None, None, None].expand(*j.shape, 1, *self.conc.shape[-2:])
            picked = self.conc.expand(*j.shape, *self.conc.shape[-3:]).gather(-3, index).squeeze(-3)  # [*S, *batch, k, 2]
            u = Dirichlet(picked, validate_args=False).sample()[..., 0]
        return self._clamp(u)

    def log_prob(self, value: Tensor) -> Tensor:
        v = self._clamp(value).unsqueeze(-2)  # [..., 1, k]: against every component
        per_component = Dirichlet(self.conc, validate_args=False).log_prob(torch.stack([v, 1 - v], -1)).sum(-1)
        return torch.logsumexp(torch.log_softmax(self.logits, -1) + per_component, -1)


class BetaHead(nn.Module):
    """Product of Betas on ``[0, 1]^k``, concentrations :math:`c_{min} + c_{span}\\,\\mathrm{sigmoid}(\\cdot)`.

    .. math:: q(u) = \\prod_{i=1}^k \\mathrm{Beta}(u_i; \\alpha_i, \\beta_i),\\quad \\alpha_i, \\beta_i \\in [c_{min}, c_{min} + c_{span}]

    A density over chart coordinates (w.r.t. ``du``); :class:`~gflownet_measure.densities.KernelDensity` divides by the chart's
    Jacobian. Coordinates are clamped to ``[edge, 1 - edge]`` (module docstring); ``edge``
    defaults to 1e-6, about the float32 spacing just below 1.
    """

    def __init__(self, k: int, c_min: float = 0.1, c_span: float = 5.0, edge: float = 1e-6):
        super().__init__()
        self.k, self.c_min, self.c_span, self.edge = k, c_min, c_span, edge

    @property
    def n_params(self) -> int:
        return 2 * self.k

    def _concentrations(self, raw: Tensor) -> Tensor:
        """Concentrations :math:`c_{min} + c_{span}\\,\\mathrm{sigmoid}(\\cdot)` of raw outputs, elementwise (same shape)."""
        return self.c_min + self.c_span * torch.sigmoid(raw)

    def forward(self, raw: Tensor) -> ClampedBetaProduct:
        a, b = self._concentrations(raw).chunk(2, -1)  # [..., 2k] -> alpha, beta [..., k]
        return ClampedBetaProduct(a, b, self.edge)


class BetaMixtureHead(BetaHead):
    """A mixture of ``n_components`` products of Betas on ``[0, 1]^k`` (the quarter-disc policies, Lahlou et al. 2023 section 4.1).

    .. math:: q(u) = \\sum_{j=1}^{C} w_j \\prod_{i=1}^k \\mathrm{Beta}(u_i; \\alpha_{ji}, \\beta_{ji}),\\quad w = \\mathrm{softmax}(\\ell)

    Raw outputs: ``C`` mixture logits, then ``2 k C`` concentration pre-activations (all ``alpha``
    then all ``beta``, component-major). Same squashing and edge clamp as :class:`BetaHead`.
    """

    def __init__(self, k: int, n_components: int, c_min: float = 0.1, c_span: float = 5.0, edge: float = 1e-6):
        super().__init__(k, c_min, c_span, edge)
        self.n_components = n_components

    @property
    def n_params(self) -> int:
        return self.n_components * (1 + 2 * self.k)

    def forward(self, raw: Tensor) -> BetaMixture:
        C = self.n_components
        logits, conc = raw[..., :C], raw[..., C:]
        pairs = conc.unflatten(-1, (2, C, self.k)).movedim(-3, -1)  # [..., C, k, 2]: (alpha, beta) of each coordinate
        return BetaMixture(logits, self._concentrations(pairs), self.edge)
