"""The semi-amortised parameter head of JSP-GFN: :math:`P_\\phi(\\theta \\mid G)` whose mean is *solved for* on
:math:`\\log R(G, \\cdot)` rather than regressed (Kim et al. 2018, semi-amortised variational inference; docs/cpd_models.md,
'The solver head').

The amortised head of the paper (:class:`~gflownet_measure.jsp_gfn.dag_params.network.DiagGaussianHead`) must learn, for every graph,
a mean as precise as the conditional posterior :math:`P(\\theta \\mid G, D)`; at ``d = 20`` its standard deviation per
weight is 0.006-0.1 and a regression never gets there within a CPU budget. Here the network gives an initial mean
:math:`\\mu_0 = \\mu_{0,\\phi}(G)` and a raw scale :math:`\\rho_\\phi(G)`, and

.. math:: \\mu = \\mathrm{PCG}_T\\big(\\mu_0;\\, -\\log R(G, \\cdot)\\big), \\qquad
   \\sigma_p = \\mathrm{softplus}(\\rho_p + c)\\, h_p(G, \\mu)^{-1/2}, \\qquad c = \\log(e^m - 1),

with :math:`\\mathrm{PCG}_T` ``T`` steps of Jacobi-preconditioned (Polak-Ribiere) conjugate gradients from :math:`\\mu_0`
(:func:`refine_mean`), or ``T`` Newton steps where the model solves its Newton system exactly
(:meth:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel.newton_direction`: a linear-Gaussian model, whose first step lands on the posterior mean) and :math:`h` the model's positive curvature diagonal (:meth:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel.curvature`;
exact for a linear-Gaussian model, Gauss-Newton for an MLP). At initialisation :math:`\\mathrm{softplus}(c) = m` (setting
``solver_scale``, 1 by default), so :math:`\\sigma_p^2 = m^2/h_p`: at :math:`m = 1`, for a Gaussian posterior, the best factorised
Gaussian (mean-field), before any training (:func:`scale_offset`).

Models without an exact Newton solve (the MLP CPDs) take the mean from a cache instead: every CPD model's
:math:`\\log R` is a sum of per-node terms, node :math:`j`'s a function of its own block and parent set alone, so
:math:`\\mu_j = u^*_{j, \\mathrm{Pa}(j)}`, the conditional mode of node :math:`j`'s parameters from a multi-start solve
per (node, parent set), and :math:`\\sigma_p = \\mathrm{softplus}(\\rho_p + c)\\, \\Lambda_{pp}^{-1/2}` with :math:`\\Lambda`
the negative Hessian there (:mod:`gflownet_measure.jsp_gfn.bayesnets.laplace`; the mean-field scale of the Laplace
approximation, MacKay 1992). The network's :math:`\\mu_0` is then unused: a few conjugate-gradient steps from it left
an MLP's mean far from the mode (docs/cpd_models.md).

Why this is still a GFlowNet policy. :math:`\\mu` and :math:`\\sigma` are deterministic, measurable functions of
:math:`G` (the network, then a fixed number of solver steps on a fixed reward), so :math:`P_\\phi(\\theta \\mid G)` is a
Gaussian density w.r.t. Lebesgue measure on :math:`\\Theta_G`, as the amortised head's: eq. 8, Theorem 3.1 of Lahlou
et al. (2023) and the theory checks apply unchanged. The solver reads a fixed set of data rows (all of them, or a subset
fixed when the head is built: setting ``solver_rows``), never the mini-batch of an update (eq. 13): with the update's
rows the density would change from update to update and would no longer be one policy.

Gradients. The solver runs without a graph to :math:`\\phi`; :math:`\\mu = \\mu_0 + \\mathrm{sg}(\\mu_T - \\mu_0)` passes
the loss's gradient in :math:`\\mu` to :math:`\\mu_0` (straight through), which trains the initialisation where the
solver has not converged and is inert where it has. The scale's gradient reaches :math:`\\rho`; the curvature is
constant to :math:`\\phi`.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gflownet_measure.jsp_gfn.bayesnets.laplace import LaplaceCache
from gflownet_measure.jsp_gfn.dag_params.network import DiagGaussianHead, FullGaussianHead
from gflownet_measure.jsp_gfn.dag_params.theta import DiagNormalTheta, FullNormalTheta, MaskedNormalTheta

__all__ = ["refine_mean", "SolverHead", "scale_offset"]


def scale_offset(scale: float) -> float:
    """:math:`c = \\mathrm{softplus}^{-1}(m) = \\log(e^m - 1)`, so that the scale at initialisation (:math:`\\rho = 0`) is ``scale`` = :math:`m`
    times the curvature's (:math:`c = \\log(e - 1)` at :math:`m = 1`, the module docstring's). An MLP's Laplace precision is the curvature at one mode
    of a non-quadratic posterior: drawing every weight at :math:`m = 1` raised the held-out NLL of the true graph
    from -1,728 at the modes to 1.38 million at d = 20 (docs/results/jsp-gfn-d20.md), at :math:`m = 0.1` to -1,686."""
    return math.log(math.expm1(scale))


def refine_mean(
    value_and_grad: Callable[[Tensor], tuple[Tensor, Tensor]],
    hvp: Callable[[Tensor, Tensor], Tensor],
    precond: Tensor,
    x0: Tensor,
    steps: int,
    groups: Tensor | None = None,
) -> Tensor:
    """``steps`` iterations of preconditioned nonlinear conjugate gradients maximising :math:`f = \\log R(G, \\cdot)` from ``x0 [B, P]``.

    With :math:`g = -\\nabla f`, :math:`z = g / m` (``precond`` :math:`m > 0`, ``[B, P]``), the direction
    :math:`p_0 = -z_0` and the step of the local quadratic model,

    .. math:: x_{t+1} = x_t + \\alpha_t p_t, \\quad \\alpha_t = -\\frac{g_t^\\top p_t}{p_t^\\top H_t p_t}, \\quad
       p_{t+1} = -z_{t+1} + \\beta_t p_t, \\quad \\beta_t = \\max\\Big(0, \\frac{g_{t+1}^\\top (z_{t+1} - z_t)}{g_t^\\top z_t}\\Big)

    (Polak-Ribiere+, Nocedal and Wright 2006, section 5.2), :math:`H_t p_t` from ``hvp(x, p)`` (:math:`-\\nabla^2 f\\, p`).
    ``groups [P]`` long splits the coordinates into blocks on which :math:`f` separates and :math:`H` is block-diagonal
    (a CPD model's nodes): the inner products, :math:`\\alpha` and :math:`\\beta` are then per block, i.e. one CG per
    block, all in one batch. On a quadratic :math:`f` (a linear-Gaussian model) this is exactly preconditioned linear
    CG, which reaches the maximiser in as many steps as the largest block has active coordinates (at most ``d - 1``
    parents). Elsewhere two safeguards: where :math:`p^\\top H p \\le 0` the curvature of the preconditioner
    :math:`p^\\top \\mathrm{diag}(m) p` replaces it; a step that lowers :math:`f` is undone (for the whole row, ``f`` being a
    row's total), the direction restarts from :math:`-z` and the row's curvature gains :math:`\\lambda\\, p^\\top \\mathrm{diag}(m) p`
    (Levenberg-Marquardt damping: :math:`\\lambda \\leftarrow \\max(4 \\lambda, 1)` after a rejected step, :math:`\\lambda / 4` after an
    accepted one; 0 at the start, so a quadratic is solved undamped). Rows (graphs) are independent; inactive coordinates, where
    the gradient is 0, never move. ``value_and_grad(x) -> (f [B], grad f [B, P])``.
    """
    groups = torch.zeros(x0.shape[-1], dtype=torch.long) if groups is None else groups
    n_groups = int(groups.max()) + 1

    def dot(a: Tensor, b: Tensor) -> Tensor:  # [B, n_groups]: the inner product within each block
        return torch.zeros(a.shape[0], n_groups, dtype=a.dtype).index_add_(1, groups, a * b)

    tiny = torch.finfo(x0.dtype).tiny
    x = x0
    f, grad = value_and_grad(x)
    g = -grad
    z = g / precond
    p = -z
    damping = torch.zeros_like(f)  # [B]: lambda of the Levenberg-Marquardt safeguard
    for _ in range(steps):
        curv = dot(p, hvp(x, p))
        curv = torch.where(curv > 0, curv, dot(p, p * precond)) + damping[:, None] * dot(p, p * precond)
        alpha = torch.where(curv > 0, -dot(g, p) / curv.clamp(min=tiny), 0.0)
        x_new = x + alpha[:, groups] * p
        f_new, grad_new = value_and_grad(x_new)
        better = f_new >= f
        damping = torch.where(better, damping / 4, (4 * damping).clamp(min=1.0))
        x, f = torch.where(better[:, None], x_new, x), torch.where(better, f_new, f)
        g_new = torch.where(better[:, None], -grad_new, g)
        z_new = g_new / precond
        gz = dot(g, z)
        beta = torch.where(better[:, None] & (gz > 0), (dot(g_new, z_new - z) / gz.clamp(min=tiny)).clamp(min=0.0), 0.0)
        p = -z_new + beta[:, groups] * p
        g, z = g_new, z_new
    return x


class SolverHead(nn.Module):
    """:math:`P_\\phi(\\theta \\mid G)` of the module docstring: a :class:`~gflownet_measure.jsp_gfn.dag_params.network.DiagGaussianHead`
    for :math:`(\\mu_0, \\rho)`, then ``steps`` solver steps on ``model``'s :math:`\\log R(G, \\cdot)` over the data rows ``rows``,
    one conjugate-gradient run per node (every CPD model's :math:`\\log R` is a sum of per-node terms).

    Args:
        base: the amortised diagonal head whose :meth:`params` give :math:`(\\mu_0, \\rho)` and the active coordinates.
        model: the CPD model (:class:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel`: ``log_reward_and_grad``, ``log_reward_hvp``, ``curvature``).
        steps: ``T``, solver steps (0: :math:`\\mu = \\mu_0`, the scale still from the curvature).
        rows: ``[M]`` long, the data rows the solver reads (fixed for the head's life), or ``None`` for all.
        laplace: for a model without an exact Newton solve, the cache of per-(node, parent set) conditional modes and
            Laplace precisions on the same rows (:class:`~gflownet_measure.jsp_gfn.bayesnets.laplace.LaplaceCache`): then
            :math:`\\mu = u^*(G)` and :math:`\\sigma_p = \\mathrm{softplus}(\\rho_p + c)\\, \\Lambda_{pp}^{-1/2}` (:meth:`_laplace`), and
            :math:`\\mu_0` and ``steps`` are not used; ``None``: the conjugate-gradient refinement of :math:`\\mu_0`.
        scale: :math:`m`, the scale's multiplier of the curvature's at initialisation (:func:`scale_offset`).
    """

    rows: Tensor | None
    groups: Tensor
    theta_init: Tensor

    def __init__(
        self, base: DiagGaussianHead | FullGaussianHead, model, steps: int, rows: Tensor | None = None, laplace: LaplaceCache | None = None, scale: float = 1.0
    ):
        super().__init__()
        if steps < 0 or not scale > 0:
            raise ValueError(f"SolverHead: steps must be >= 0 and scale > 0; got {steps}, {scale}")
        self.base, self.model, self.steps, self.laplace = base, model, int(steps), laplace
        self.offset = scale_offset(scale)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer(
            "groups",
            torch.empty(model.n_params, dtype=torch.long).index_put_((model.block_index().flatten(),), torch.arange(model.d).repeat_interleave(model.block)),
            persistent=False,
        )  # coordinate -> node
        # theta_init: a fixed draw from the prior added to mu_0, so that the solver never starts where an MLP's ReLUs are all dead
        # (at theta = 0 every hidden unit is off and the gradient in W1, b1, W2 is 0: a saddle point the solver cannot leave)
        self.register_buffer(
            "theta_init",
            torch.randn(model.n_params, generator=torch.Generator().manual_seed(0), dtype=torch.float64, device="cpu").to(torch.get_default_device())
            * model.prior_var**0.5,
        )  # the same draw on every device
        # Newton steps where the model solves its Newton system exactly (it answers on an empty batch), CG otherwise: decided once
        self.newton = (
            model.newton_direction(torch.zeros(0, model.d, model.d, dtype=torch.bool), torch.zeros(0, model.n_params, dtype=torch.float64)) is not None
        )

    def _mean(self, graphs: Tensor, start: Tensor) -> Tensor:
        """The solved mean ``[B, P]`` float64 from ``start``: Newton steps where the model solves exactly, CG otherwise."""
        model, rows = self.model, self.rows
        mean = start
        if self.steps and self.newton:
            for _ in range(self.steps):
                step = model.newton_direction(graphs, mean, rows)
                mean = mean + step
                if float(step.abs().max()) <= 1e-12 * (
                    1.0 + float(mean.abs().max())
                ):  # converged (a quadratic: after one step); the rest would add rounding only
                    break
        elif self.steps:
            h0 = model.curvature(graphs, start, rows)
            mean = refine_mean(
                lambda x: model.log_reward_and_grad(graphs, x, rows), lambda x, v: model.log_reward_hvp(graphs, x, v, rows), h0, start, self.steps, self.groups
            )
        return mean

    def _refined(self, loc0: Tensor, on: Tensor, graphs: Tensor) -> tuple[Tensor, Tensor]:
        """``(mu [B, P], the solved mean float64 [B, P])`` from the network's ``loc0``: :math:`\\mu_0 = ` ``loc0`` :math:`+ \\theta_{\\mathrm{init}}`
        on the active coordinates ``on``, solved without a graph, the gradient in :math:`\\mu` passed to :math:`\\mu_0` straight through."""
        loc0 = torch.where(on, loc0 + self.theta_init.to(loc0.dtype), 0.0)
        with torch.no_grad():
            mean = self._mean(graphs, loc0.detach().to(torch.float64))
        return loc0 + (mean.to(loc0.dtype) - loc0).detach(), mean

    def forward(self, nodes: Tensor, glob: Tensor, adj: Tensor) -> MaskedNormalTheta:
        graphs = adj > 0
        if isinstance(self.base, FullGaussianHead):
            return self._full(self.base(nodes, glob, adj), graphs)
        loc0, raw_scale, on = self.base.params(nodes, glob, adj)
        if self.laplace is not None and not self.newton:
            return self._laplace(raw_scale, on, graphs)
        loc, mean = self._refined(loc0, on, graphs)
        with torch.no_grad():
            curv = self.model.curvature(graphs, mean, self.rows)
        scale = F.softplus(raw_scale + self.offset) * curv.rsqrt().to(raw_scale.dtype)
        return DiagNormalTheta(torch.where(on, loc, torch.zeros_like(loc)), scale, on)

    def _laplace(self, raw_scale: Tensor, on: Tensor, graphs: Tensor) -> DiagNormalTheta:
        """:math:`\\mu = u^*(G)`, :math:`\\sigma_p = \\mathrm{softplus}(\\rho_p + c)\\, \\Lambda_{pp}^{-1/2}`: each node's cached conditional mode and the
        diagonal of its Laplace precision (:class:`~gflownet_measure.jsp_gfn.bayesnets.laplace.LaplaceCache`), constants to :math:`\\phi`."""
        assert self.laplace is not None  # forward calls this with a cache only
        mode, precision = self.laplace.for_graphs(graphs)
        scale = F.softplus(raw_scale + self.offset) * precision.rsqrt().to(raw_scale.dtype)
        return DiagNormalTheta(torch.where(on, mode.to(raw_scale.dtype), 0.0), scale, on)

    def _full(self, base: FullNormalTheta, graphs: Tensor) -> FullNormalTheta:
        """The full-covariance version (linear models): the mean solved as above and the precision factor
        :math:`U_j = N_j\\, L_j^\\top`, with :math:`L_j L_j^\\top = \\Lambda_j` the model's conditional precision
        (:meth:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian.conditional_precision`) and :math:`N_j` the amortised head's factor with its parent
        diagonal divided by :math:`\\log 2`: the identity at initialisation, so that :math:`P_\\phi(\\theta \\mid G)` starts at
        the exact conditional posterior :math:`\\mathcal N(m_j, \\Lambda_j^{-1})` (JSP-GFN eq. D.24) and learns a correction."""
        d = self.model.d
        loc, _ = self._refined(base.mean, base.active, graphs)
        with torch.no_grad():
            exact = torch.linalg.cholesky(self.model.conditional_precision(graphs, self.rows)).mT.to(base.loc.dtype)  # [B, j, d, d] upper
        parents = base.adj.transpose(1, 2) > 0  # [B, j, d]
        norm = torch.where(parents, torch.full_like(base.adj.transpose(1, 2), 1 / math.log(2.0)), 1.0)
        factor = base.prec_chol * norm[..., :, None]  # rows of parents rescaled: the identity at initialisation
        return FullNormalTheta(loc.view(-1, d, d) * base.adj, factor @ exact, base.adj)
