"""Policies as densities with respect to reference kernels (Lahlou et al. 2023, section 3).

A forward policy :math:`P_F(s, \\cdot) \\ll \\kappa(s, \\cdot)` is a categorical choice among the
kernel's components (atoms and continuous pieces), then a density ``q_c(u)`` over the chart
coordinates of the chosen piece. Its density w.r.t. :math:`\\kappa(s, \\cdot)` is

.. math:: p(s, x) = \\frac{\\pi_k}{m_k} \\text{ at atom } x_k, \\qquad
   p(s, \\varphi_c(u)) = \\pi_c\\, \\frac{q_c(u)}{|J_c(u)|} \\text{ on piece } c,

so the chart's Jacobian enters every continuous density. Backward policies are the same objects
w.r.t. :math:`\\kappa_b`.
"""

from __future__ import annotations

import functools
import math
from abc import abstractmethod
from typing import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.distributions import Distribution, Independent, Normal, VonMises

from .contract_error import ContractError
from .gaussian import LOG_2PI, StepNormal
from .kernels import Kernel
from .measures import Box, Measure, SupportPoint

__all__ = ["CoordinateFamily", "KernelDensity", "Policy", "UniformPolicy", "ReferenceCoordinates", "gumbel_max", "uniform_density"]


CoordinateFamily = Callable[[Tensor], Distribution]
"""``rows [B] bool -> q_c(. | s_b)`` for the selected rows: a piece's coordinate densities, built only where needed."""


class KernelDensity:
    """:math:`P(s_b, \\cdot)` for a batch of states: component logits plus coordinate densities.

    Args:
        measure: the reference measures :math:`\\kappa(s_b, \\cdot)`, ``B`` of them.
        logits: ``[B, K + C]`` unnormalised log-probabilities of the ``K`` atoms and ``C`` pieces
            (absent components are masked out). For flow matching they are log edge flows.
        coords: one :data:`CoordinateFamily` per piece: given a row mask, the distributions over the
            chart coordinates of those rows (batch ``[rows]``, event ``[k]``). They are only built for
            the rows that sample or are located on the piece.
    """

    def __init__(self, measure: Measure, logits: Tensor, coords: Sequence[CoordinateFamily] = ()):
        if len(coords) != len(measure.pieces):
            raise ValueError(f"KernelDensity needs one coordinate family per piece: {len(coords)} for {len(measure.pieces)} pieces")
        mask = measure.component_mask()
        fewest, most = mask.sum(1).aminmax() if len(mask) else (torch.ones(()), torch.ones(()))
        fewest, most = torch.stack([fewest, most]).tolist()  # one synchronisation
        if fewest == 0:
            raise ValueError(
                f"the reference kernel is the zero measure at {int((~mask.any(1)).sum())} of {len(mask)} states; a policy is only defined where kappa(s, .) != 0"
            )
        self.measure, self.coords, self._mask = measure, tuple(coords), mask
        self._one_component = most == 1  # every state has a single component (an SDE's levels): the draw takes it, no categorical
        self.logits = logits.masked_fill(~mask, float("-inf"))
        self.log_probs = torch.log_softmax(self.logits, 1)  # [B, K + C]

    def sample(self, epsilon: float = 0.0, reparametrise: bool = False) -> tuple[Tensor, Tensor]:
        """Sample :math:`x \\sim (1-\\epsilon) P(s, \\cdot) + \\epsilon U(s, \\cdot)` (``U``: :class:`UniformPolicy`).

        Returns the next states ``x [B, D]`` (rows that chose the sink repeat nothing meaningful)
        and ``sink [B]`` bool. With ``reparametrise`` the chart coordinates are drawn with
        ``rsample`` so that ``x`` is differentiable in the policy's parameters (the choice of
        component stays discrete); exploration then is not allowed.
        """
        x, sink, _ = self.draw(epsilon, reparametrise)
        return x, sink

    def draw(self, epsilon: float = 0.0, reparametrise: bool = False) -> tuple[Tensor, Tensor, SupportPoint]:
        """:meth:`sample`, plus the :class:`~gflownet_measure.measures.SupportPoint` (component and chart coordinates) it drew, for :meth:`log_prob_at`."""
        if reparametrise and epsilon > 0:
            raise ValueError("reparametrised sampling draws from the policy itself; epsilon must be 0")
        m = self.measure
        log_probs = self.log_probs.detach() if self.log_probs.requires_grad else self.log_probs
        explore = None  # rows that move uniformly (epsilon > 0 only)
        if epsilon > 0:
            uniform = uniform_density(m)
            explore = torch.rand(m.batch, device=log_probs.device) < epsilon
            log_probs = torch.where(explore[:, None], uniform.log_probs.to(log_probs.dtype), log_probs)
        if self._one_component:  # the categorical is certain; its uniforms are still drawn, so runs keep their random stream
            torch.rand(log_probs.shape, dtype=log_probs.dtype, device=log_probs.device)
            comp = self._mask.to(torch.uint8).argmax(1)
        else:
            comp = gumbel_max(log_probs)
        K, B = m.atoms.count, m.batch
        unfit = ~torch.isfinite(log_probs.gather(1, comp[:, None])[:, 0])  # NaN or infinite logits drew a component anyhow
        *drawn, n_unfit = torch.cat([torch.bincount(comp, minlength=m.n_components), unfit.sum()[None]]).tolist()  # one synchronisation
        if n_unfit:
            raise ContractError(f"the policy's component probabilities are not finite at {n_unfit} of {B} states: a diverged policy (NaN or infinite logits)")
        if sum(drawn[:K]):
            k = comp.clamp(max=K - 1)
            x = m.atoms.take(k)  # the drawn atom's state only
            sink = m.atoms.sink[torch.arange(B, device=comp.device), k] & (comp < K)
        else:  # every row drew a piece: no atom's state to build (x None until a piece writes it)
            x, sink = None, torch.zeros(B, dtype=torch.bool, device=comp.device)
        us = []
        for c, p in enumerate(m.pieces):
            u = None
            if drawn[K + c]:
                chosen = comp == K + c
                q = self.coords[c](chosen)
                u = q.rsample() if reparametrise else q.sample()
                if explore is not None and explore[chosen].any():
                    u = torch.where(explore[chosen][:, None], uniform.coords[c](chosen).sample().to(u.dtype), u)
                if drawn[K + c] == B:  # the whole batch moved on this piece: no gather or scatter
                    x = p.chart.forward(p.context, u)
                else:
                    base = torch.zeros_like(p.context) if x is None else x
                    x = base.index_put((chosen.nonzero()[:, 0],), p.chart.forward(p.context[chosen], u).to(base.dtype))
            us.append(u)
        assert x is not None, "draw on an empty batch of states (B = 0)"  # otherwise every row drew an atom or a piece
        return x, sink, SupportPoint(comp, tuple(us))

    def widened(self, variance: float) -> "KernelDensity":
        """The same density with ``variance`` added to every Gaussian coordinate density (off-policy exploration).

        .. math:: q_c(u) = \\mathcal N(u; m, \\mathrm{diag}(v)) \\;\\to\\; \\mathcal N(u; m, \\mathrm{diag}(v + \\text{variance}))

        in chart coordinates (Lahlou et al. 2023, section 4.2: the exploration noise of the SDE
        samplers). The component probabilities are unchanged; raises on non-Gaussian coordinates.
        """
        if variance < 0:
            raise ValueError(f"widened needs a non-negative extra variance, got {variance}")
        return KernelDensity(self.measure, self.logits, [functools.partial(_widen_rows, c, variance) for c in self.coords])

    def log_prob(self, x: Tensor, sink: Tensor) -> Tensor:
        """:math:`\\log \\frac{dP(s_b,\\cdot)}{d\\kappa(s_b,\\cdot)}(x_b)` ``[B]``; raises if ``x_b`` is outside the kernel's support.

        On piece ``c``: :math:`\\log \\pi_c + \\log q_c(u) - \\log|J_c(u)|` with :math:`u = \\varphi_c^{-1}(x)`.
        """
        return self.log_prob_at(self.point_of(x, sink))

    def point_of(self, x: Tensor, sink: Tensor) -> SupportPoint:
        """``x`` as a :class:`~gflownet_measure.measures.SupportPoint` of the kernel (the component holding it and its chart coordinates),
        to evaluate this density and others on the same kernel at ``x`` without inverting the charts again; raises if ``x_b`` is outside the kernel's support."""
        point = self.measure.point_of(x, sink)
        outside = point.comp < 0
        if outside.any():
            i = int(outside.nonzero()[0])
            raise ValueError(f"{int(outside.sum())} transitions lie outside the reference kernel's support (first: to {x[i].tolist()}, sink={bool(sink[i])})")
        return point

    def log_prob_at(self, point: SupportPoint) -> Tensor:
        """The log-density ``[B]`` at the points a :class:`~gflownet_measure.measures.SupportPoint` names (a draw of this density or of another on the same kernel),
        without inverting the charts."""
        comp = point.comp
        K = self.measure.atoms.count
        rows = torch.arange(len(comp), device=comp.device)
        out = self.log_probs[rows, comp]
        if K:
            is_atom = comp < K
            out = out - torch.where(is_atom, self.measure.atoms.log_mass[rows, comp.clamp(max=K - 1)], torch.zeros_like(out))
        for c, p in enumerate(self.measure.pieces):
            on = comp == K + c
            if on.any():
                u = point.u[c]
                assert u is not None  # the rows on piece c carry its chart coordinates
                density = (self.coords[c](on).log_prob(u) - p.chart.log_abs_det_jacobian(p.context[on], u)).to(out.dtype)
                out = out + torch.zeros_like(out).index_put((on.nonzero()[:, 0],), density)
        return out

    def log_flow(self, x: Tensor, sink: Tensor) -> Tensor:
        """Unnormalised logit of the atom holding ``x``: the log edge flow :math:`\\log F(s \\to x)` (flow matching)."""
        comp = self.measure.component_of(x, sink)
        if (comp < 0).any() or (comp >= self.measure.atoms.count).any():
            raise ValueError("log_flow is defined on atoms of the kernel only")
        return self.logits[torch.arange(len(comp)), comp]


def gumbel_max(logits: Tensor) -> Tensor:
    """One index per row of ``logits [..., C]``, :math:`P(j) = \\mathrm{softmax}(\\ell)_j`: :math:`\\arg\\max_j (\\ell_j + G_j)`, :math:`G_j` i.i.d. Gumbel.

    The Gumbel-max trick: exact, and a few elementwise operations where ``torch.multinomial`` costs
    a rollout step more than its policy network. ``-inf`` logits (absent components) are never drawn:
    the uniforms are kept off 0 (``torch.rand`` returns 0 once in ~2^24 draws in float32; its Gumbel
    would be +inf, every score -inf and ``argmax`` the first component, present or not).
    """
    u = torch.rand(logits.shape, dtype=logits.dtype, device=logits.device).clamp_(min=torch.finfo(logits.dtype).tiny)
    return (logits - u.log_().neg_().log_()).argmax(-1)  # in place: log(-log u), no temporaries


def _widen_rows(family: CoordinateFamily, variance: float, rows: Tensor) -> Distribution:
    q = family(rows)
    base = q.base_dist if isinstance(q, Independent) else q
    if not isinstance(base, Normal):
        raise ValueError(f"extra-variance exploration needs Gaussian coordinate densities, got {type(base).__name__}")
    widened = StepNormal(base.loc, (base.scale.square() + variance).sqrt())
    return Independent(widened, q.reinterpreted_batch_ndims) if isinstance(q, Independent) else widened


class ReferenceCoordinates(Distribution):
    """The reference proposal on a chart's box ``U``, for ``n`` rows: independent coordinates, uniform on a bounded one and
    :math:`\\mathcal N(0, \\text{proposal\\_scale}^2)` on the real line (``Box.proposal_scale``), restricted to each row's
    active coordinates ``active [n, k]`` (:meth:`~gflownet_measure.charts.Chart.active`; ``None``: all):

    .. math:: q(u) = \\prod_{i \\in A,\\, U_i = [l_i, h_i]} \\frac{1}{h_i - l_i} \\prod_{i \\in A,\\, U_i = \\mathbb R} \\mathcal N(u_i; 0, c^2)

    w.r.t. Lebesgue measure on the active coordinates; samples are 0 off them. On a periodic box with
    ``Box.proposal_concentration`` :math:`\\kappa > 0`, each coordinate's angle :math:`\\theta_i = 2\\pi (u_i - m_i) / T_i` about the
    midpoint :math:`m_i` (period :math:`T_i = h_i - l_i`) is von Mises instead:

    .. math:: q(u) = \\prod_{i \\in A} \\frac{e^{\\kappa \\cos \\theta_i}}{T_i\\, I_0(\\kappa)}.
    """

    arg_constraints: dict = {}
    has_rsample = False

    def __init__(self, box: Box, n: int, dtype, active: Tensor | None = None):
        self.low, self.high = torch.as_tensor(box.low, dtype=dtype), torch.as_tensor(box.high, dtype=dtype)
        self.bounded = torch.isfinite(self.low) & torch.isfinite(self.high)
        if not bool((self.bounded | (torch.isinf(self.low) & torch.isinf(self.high))).all()):
            raise ValueError(f"a reference proposal needs each coordinate bounded or the whole real line, got {box.low}, {box.high}")
        self.scale, self.active, self.n = box.proposal_scale, active, n
        self.kappa = box.proposal_concentration
        super().__init__(batch_shape=torch.Size([n]), event_shape=torch.Size([box.dim]), validate_args=False)

    def _angle_scale(self) -> tuple[Tensor, Tensor]:
        """The midpoints :math:`m_i` and :math:`T_i / 2\\pi` of a periodic box's coordinates (von Mises proposal)."""
        return (self.low + self.high) / 2, (self.high - self.low) / (2 * math.pi)

    def sample(self, sample_shape=torch.Size()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        if self.kappa > 0:
            mid, per_radian = self._angle_scale()
            theta = VonMises(torch.zeros((), dtype=self.low.dtype), torch.tensor(self.kappa, dtype=self.low.dtype), validate_args=False).sample(shape)
            u = mid + theta * per_radian
            return u if self.active is None else u * self.active
        low, high = self.low.expand(shape), self.high.expand(shape)
        u = torch.where(self.bounded, low, 0.0) + torch.rand(shape, dtype=self.low.dtype) * torch.where(self.bounded, high - low, 0.0)
        if not bool(self.bounded.all()):
            u = torch.where(self.bounded, u, self.scale * torch.randn(shape, dtype=self.low.dtype))
        return u if self.active is None else u * self.active

    def log_prob(self, value: Tensor) -> Tensor:
        if self.kappa > 0:
            mid, per_radian = self._angle_scale()
            k = torch.tensor(self.kappa, dtype=self.low.dtype)
            lp = self.kappa * torch.cos((value - mid) / per_radian) - (torch.special.i0e(k).log() + k) - torch.log(self.high - self.low)
            return (lp if self.active is None else torch.where(self.active, lp, torch.zeros_like(lp))).sum(-1)
        lb, ub = self.low.le(value).type_as(self.low), self.high.gt(value).type_as(self.low)
        lp = torch.log(lb.mul(ub)) - torch.log(self.high - self.low)  # as torch's Uniform
        if not bool(self.bounded.all()):
            z = value / self.scale
            lp = torch.where(self.bounded, lp, -0.5 * z.square() - math.log(self.scale) - 0.5 * LOG_2PI)
        return (lp if self.active is None else torch.where(self.active, lp, torch.zeros_like(lp))).sum(-1)


def _reference_rows(box: Box, active: Tensor | None, dtype, rows: Tensor) -> Distribution:
    return ReferenceCoordinates(box, int(rows.sum()), dtype, None if active is None else active[rows])


def uniform_density(measure: Measure) -> KernelDensity:
    """Equal probability for each present component, the reference proposal of each chart's box on its coordinates.

    .. math:: \\pi_k = 1/|\\text{components}|, \\quad q_c = \\text{:class:`ReferenceCoordinates`}: \\; 1/\\lambda(U_c) \\text{ on a bounded box}

    An exact density (it integrates to one against the kernel); uniform w.r.t. the reference measure itself when atoms
    have unit mass, charts have constant Jacobian and boxes are bounded. On an unbounded box (the parameters of a
    DAG, Deleu et al. 2023) the coordinates are Gaussian with the box's ``proposal_scale``: the exploration density of
    :meth:`KernelDensity.draw` there.
    """
    coords = [functools.partial(_reference_rows, p.chart.domain, p.chart.active(p.context), p.context.dtype) for p in measure.pieces]
    logits = torch.zeros(measure.batch, measure.n_components, dtype=measure.atoms.log_mass.dtype)
    return KernelDensity(measure, logits, coords)


class Policy(nn.Module):
    """A conditional density :math:`P(s, \\cdot)` w.r.t. ``kernel``; ``policy(s)`` is a :class:`KernelDensity`."""

    def __init__(self, kernel: Kernel):
        super().__init__()
        self.kernel = kernel

    def forward(self, s: Tensor) -> KernelDensity:
        m = self.kernel.outline(s)
        logits, coords = self.parameters_at(s, m)
        return KernelDensity(m, logits, coords)

    @abstractmethod
    def parameters_at(self, s: Tensor, measure: Measure) -> tuple[Tensor, list[CoordinateFamily]]:
        """Component logits ``[B, K + C]`` and one :data:`CoordinateFamily` per piece at states ``s``."""

    def for_rollout(self) -> Callable[[Tensor], KernelDensity]:
        """``s -> P(s, .)`` for the steps of one rollout, during which the parameters do not change: the policy itself, or a
        policy that computed beforehand what depends on its parameters alone (the same densities)."""
        return self


class UniformPolicy(Policy):
    """The fixed uniform policy of :func:`uniform_density` (e.g. the uniform :math:`P_B` of Bengio et al. 2021)."""

    def forward(self, s: Tensor) -> KernelDensity:
        return uniform_density(self.kernel.outline(s))

    def parameters_at(self, s, measure):
        d = uniform_density(measure)
        return d.logits, list(d.coords)
