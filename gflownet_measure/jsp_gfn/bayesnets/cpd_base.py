"""What every CPD model of the DAG x Theta space shares: data checks, the two priors, the reward, the mini-batch rows.

A model scores a graph :math:`G` (``adj [..., d, d]``, ``adj[i, j] = 1`` iff :math:`i \\to j`) and a flat parameter vector
``theta [..., P]`` whose layout it defines (``block_index``); the coordinates of :math:`\\Theta_G` are ``active(adj)``,
the others are 0 in a state and never read. With :math:`\\sigma_0^2` = ``prior_var``:

.. math:: \\log R(G, \\theta) = \\log P(D | G, \\theta) + \\log P(\\theta | G) + \\log P(G),\\qquad
          \\log P(\\theta | G) = \\sum_{p \\in \\Theta_G} \\log \\mathcal N(\\theta_p; 0, \\sigma_0^2)

(Deleu et al. 2023, sections 3 and 5), a density w.r.t. counting measure on DAGs times Lebesgue measure on the active
coordinates. :class:`CPDModel` implements the priors, the reward and the checks once; a model subclasses it and writes
``kind``, ``block``, ``block_index``, ``active`` and ``log_likelihood`` (docs/cpd_models.md).

Perfect interventions (Pearl 2009; Eaton & Murphy 2007; Deleu et al. 2023, section 5.3): with ``interventions [N, d]``
bool, a row :math:`n` that sets node :math:`j` from outside drops node :math:`j`'s CPD term,

.. math:: \\log P(D | G, \\theta) = \\sum_n \\sum_{j : \\neg I_{nj}} \\log P(x_{nj} | x_{n, \\mathrm{Pa}(j)}, \\theta_j),

the interventional likelihood (the intervened values are conditioned on, not modelled). A model that supports it
sets ``interventional = True`` and sums its per-entry terms with :meth:`CPDModel._observed_sum`.
"""

from __future__ import annotations

import abc
import math

import torch
from torch import Tensor

from gflownet_measure.gaussian import LOG_2PI
from gflownet_measure.jsp_gfn.bayesnets.scores import LocalScores

__all__ = ["GRAPH_PRIORS", "CPDModel", "check_variance"]

GRAPH_PRIORS = ("uniform", "erdos_renyi")


def check_variance(owner: str, name: str, value: float) -> None:
    """A one-line ``ValueError`` unless the variance ``value`` is finite and > 0."""
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{owner}: {name} must be finite and > 0; got {value!r}")


class CPDModel(abc.ABC):
    """A CPD model on ``data [N, d]``: the one contract that the DAG x Theta space, its policy and the baselines read.

    Shapes: ``adj [..., d, d]`` bool (``adj[i, j]`` iff :math:`i \\to j`), ``theta [..., P]`` flat, broadcasting against
    each other (``[S, B, P]`` against ``[B, d, d]``); results ``[...]``, in ``theta``'s dtype, differentiable in ``theta``
    and independent of its inactive coordinates (NaN included). The priors, the reward and the checks are written here
    once; a model writes ``kind``, ``block``, ``block_index``, ``active`` and ``log_likelihood``.

    Args:
        data: ``[N, d]`` observations, finite (kept as float64; a categorical model converts them).
        prior_var: :math:`\\sigma_0^2`, the variance of each active coordinate of :math:`\\theta`.
        graph_prior: ``"uniform"`` (:math:`\\log P(G) = 0`) or ``"erdos_renyi"``
            (:math:`\\log P(G) = |E| \\log\\frac{p}{1-p}`, :math:`p = 2k/(d-1)`, unnormalised as in the JSP code).
        edges_per_node: ``k`` of the Erdos-Renyi prior.
        interventions: ``[N, d]`` bool (or 0/1), ``True`` where row ``n`` intervenes on node ``j`` (its CPD term is
            dropped); ``None``: observational data. Only for a model with ``interventional = True``.
    """

    d: int  # variables
    n: int  # data rows N
    data: Tensor  # [N, d]: float64 (continuous) or long (categorical)
    kind: str  # "continuous" or "categorical": the data the model is defined for
    block: int  # parameters per node; n_params = d * block
    interventional = False  # whether the model takes interventions (its log_likelihood uses _observed_sum)
    scores: LocalScores | None = None  # the lookahead's cache of a closed-form local marginal, where the model has one

    def __init__(self, data: Tensor, prior_var: float = 1.0, graph_prior: str = "uniform", edges_per_node: float = 1.0, interventions: Tensor | None = None):
        name = type(self).__name__
        data = torch.as_tensor(data, dtype=torch.float64)
        if data.dim() != 2 or data.shape[0] < 1 or data.shape[1] < 1:
            raise ValueError(f"{name}: data must be [N, d] with N, d >= 1; got shape {tuple(data.shape)}")
        if not torch.isfinite(data).all():
            raise ValueError(f"{name}: data has non-finite values")
        check_variance(name, "prior_var", prior_var)
        if graph_prior not in GRAPH_PRIORS:
            raise ValueError(f"{name}: graph_prior must be one of {GRAPH_PRIORS}; got {graph_prior!r}")
        self.data, self.prior_var, self.graph_prior = data, float(prior_var), graph_prior
        self.n, self.d = data.shape
        self.interventions = None
        if interventions is not None:
            if not self.interventional:
                raise ValueError(f"{name}: this model takes no interventions (its class sets interventional = False)")
            interventions = torch.as_tensor(interventions)
            if interventions.shape != data.shape or not ((interventions == 0) | (interventions == 1)).all():
                raise ValueError(f"{name}: interventions must be a [N, d] = {list(data.shape)} mask of 0/1; got shape {list(interventions.shape)}")
            self.interventions = interventions.bool()
        self.log_edge_odds = 0.0
        if graph_prior == "erdos_renyi":
            p = 2 * edges_per_node / (self.d - 1) if self.d > 1 else math.inf
            if not 0 < p < 1:
                raise ValueError(f"{name}: the erdos_renyi prior needs 0 < p = 2 k / (d - 1) < 1; got p = {p:.4g} for d = {self.d}, k = {edges_per_node}")
            self.log_edge_odds = math.log(p) - math.log1p(-p)

    @property
    def n_params(self) -> int:
        """:math:`P = d \\cdot` ``block``: the length of a flat ``theta``."""
        return self.d * self.block

    # ---------------------------------------------------------------- written by each model

    @abc.abstractmethod
    def block_index(self) -> Tensor:
        """``[d, block]`` long: the positions in a flat ``theta`` of node ``j``'s parameters (disjoint rows covering ``0..P-1``)."""

    @abc.abstractmethod
    def active(self, adj: Tensor) -> Tensor:
        """``[..., P]`` bool: the coordinates of :math:`\\Theta_G` for ``adj [..., d, d]``."""

    @abc.abstractmethod
    def log_likelihood(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> Tensor:
        """:math:`\\log P(D | G, \\theta)` ``[...]``, or with ``rows [M]`` its mini-batch estimate :math:`\\frac{N}{M} \\sum_{n \\in \\text{rows}}` (JSP-GFN eq. 13)."""

    # ---------------------------------------------------------------- shared

    def log_prior_theta(self, adj: Tensor, theta: Tensor) -> Tensor:
        """:math:`\\log P(\\theta | G) = \\sum_{p \\in \\Theta_G} \\log \\mathcal N(\\theta_p; 0, \\sigma_0^2)` ``[...]`` w.r.t. Lebesgue on the active coordinates, in ``theta``'s dtype."""
        self._check_theta(theta)
        active = self.active(adj)
        theta = torch.where(active, theta, 0.0)  # masked before squaring, so a NaN at an inactive coordinate has no gradient either
        log_n = -0.5 * theta.square() / self.prior_var - 0.5 * (LOG_2PI + math.log(self.prior_var))
        return torch.where(active, log_n, 0.0).sum(-1)

    def log_prior_graph(self, adj: Tensor) -> Tensor:
        """:math:`\\log P(G) = |E| \\log\\frac{p}{1-p}` (0 for the uniform prior): ``[...]`` float64."""
        return adj.to(torch.float64).sum((-1, -2)) * self.log_edge_odds

    def log_reward(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> Tensor:
        """:math:`\\log R(G, \\theta) = \\log P(D | G, \\theta) + \\log P(\\theta | G) + \\log P(G)` ``[...]`` in ``theta``'s dtype."""
        ll = self.log_likelihood(adj, theta, rows)
        return ll + self.log_prior_theta(adj, theta) + self.log_prior_graph(adj).to(ll.dtype)

    # ---------------------------------------------------------------- derivatives in theta (the solver head's inputs)

    def log_reward_and_grad(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(log R [...], grad_theta log R [..., P])`` in float64, without a graph to anything upstream of ``theta``
        (autograd; the gradient is 0 at inactive coordinates)."""
        with torch.inference_mode(False), torch.enable_grad():  # also inside an inference-mode rollout: on copies, ordinary tensors
            adj, theta = adj.clone(), theta.detach().to(torch.float64).clone().requires_grad_(True)
            value = self.log_reward(adj, theta, rows)
            (grad,) = torch.autograd.grad(value.sum(), theta)
        return value.detach(), grad

    def log_reward_hvp(self, adj: Tensor, theta: Tensor, v: Tensor, rows: Tensor | None = None) -> Tensor:
        """:math:`-\\nabla^2_\\theta \\log R(G, \\theta)\\, v` ``[..., P]`` float64 (double backward; a model with a closed form overrides it)."""
        with torch.inference_mode(False), torch.enable_grad():
            adj, theta, v = adj.clone(), theta.detach().to(torch.float64).clone().requires_grad_(True), v.detach().clone()
            (grad,) = torch.autograd.grad(self.log_reward(adj, theta, rows).sum(), theta, create_graph=True)
            (hv,) = torch.autograd.grad((grad * v).sum(), theta)
        return -hv

    def curvature(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> Tensor:
        """A positive diagonal :math:`h \\approx \\mathrm{diag}(-\\nabla^2_\\theta \\log R(G, \\theta))` ``[..., P]`` float64:

        .. math:: h_p = 1/\\sigma_0^2 + \\mathrm{diag}(J^\\top F J)_p

        the prior's precision plus the diagonal of the likelihood's Gauss-Newton matrix (:meth:`likelihood_curvature`,
        ``J`` the Jacobian of the CPD outputs, ``F`` their Fisher information), exact for a linear-Gaussian model. A model
        without :meth:`likelihood_curvature` gets the prior's precision alone (the solver head then runs unpreconditioned
        conjugate gradients and its scales start at the prior's). Inactive coordinates hold :math:`1/\\sigma_0^2` too.
        """
        prior = torch.full(theta.shape, 1.0 / self.prior_var, dtype=torch.float64)
        lik = self.likelihood_curvature(adj, theta.detach(), rows)
        return prior if lik is None else prior + torch.where(self.active(adj), lik, 0.0)

    def newton_direction(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> Tensor | None:
        """:math:`(-\\nabla^2 \\log R)^{-1} \\nabla \\log R` ``[..., P]`` float64 solved exactly, where a model can (the solver head
        then takes Newton steps instead of conjugate gradients), or ``None``."""
        return None

    def likelihood_curvature(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> Tensor | None:
        """The diagonal of the Gauss-Newton matrix of :math:`-\\log P(D | G, \\theta)` ``[..., P]`` float64, or ``None`` (not known)."""
        return None

    def _check_adj(self, adj: Tensor) -> None:
        if adj.shape[-2:] != (self.d, self.d):
            raise ValueError(f"{type(self).__name__}: adj must be [..., {self.d}, {self.d}]; got shape {tuple(adj.shape)}")

    def _check_theta(self, theta: Tensor) -> None:
        if theta.shape[-1:] != (self.n_params,):
            raise ValueError(f"{type(self).__name__}: theta must be flat [..., {self.n_params}]; got shape {tuple(theta.shape)}")

    def _masked(self, adj: Tensor, theta: Tensor) -> Tensor:
        """``theta`` in float64 with the inactive coordinates set to 0 (``torch.where``: a NaN there never reaches the value or the gradient)."""
        self._check_theta(theta)
        return torch.where(self.active(adj), theta.to(torch.float64), 0.0)

    def _observed_sum(self, terms: Tensor, rows: Tensor | None) -> Tensor:
        """:math:`\\sum_{n, j : \\neg I_{nj}}` of the per-entry log-likelihood terms ``[..., M, d]`` of the rows ``rows``
        (all rows when ``None``), the intervened entries dropped (``torch.where``: a NaN or an infinity there is not read)."""
        intervened = self._intervened(rows)
        if intervened is not None:
            terms = torch.where(intervened, 0.0, terms)
        return terms.sum((-1, -2))

    def _intervened(self, rows: Tensor | None) -> Tensor | None:
        """``[M, d]`` bool: the entries of the rows ``rows`` (all rows when ``None``) that an intervention sets; ``None`` for observational data."""
        if self.interventions is None:
            return None
        return self.interventions if rows is None else self.interventions[torch.as_tensor(rows)]

    def _rows(self, rows: Tensor | None) -> tuple[Tensor, float]:
        """``(x [M, data's columns], N / M)``: the data rows ``rows [M]`` long (all ``N`` rows when ``None``) and the factor of the unbiased estimate."""
        if rows is None:
            return self.data, 1.0
        rows = torch.as_tensor(rows)
        if rows.dim() != 1 or rows.dtype != torch.long:
            raise ValueError(f"{type(self).__name__}: rows must be a 1-d long tensor of data-row indices; got {rows.dtype} of shape {tuple(rows.shape)}")
        if not 1 <= len(rows) <= self.n:
            raise ValueError(f"{type(self).__name__}: a mini-batch needs 1 <= M <= N = {self.n} rows; got M = {len(rows)}")
        return self.data[rows], self.n / len(rows)
