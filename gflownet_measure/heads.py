"""Coordinate families: densities :math:`q_c(u)` over the chart coordinates of a piece (Lahlou et al. 2023, section 4.1).

A head maps raw network outputs to a distribution w.r.t. ``du`` on its box ``domain`` (a
:class:`~gflownet_measure.measures.Box`), which must be the domain ``U`` of its piece's chart:
:class:`~gflownet_measure.densities.KernelDensity` divides the density by the chart's Jacobian, and a
density on another box does not integrate to one against the piece. :func:`check_head` says so
(:class:`~gflownet_measure.networks.MLPPolicy` calls it).

- Beta heads (:class:`BetaHead`, :class:`BetaMixtureHead`) live on ``[0, 1]^k`` or, given ``domain``, on
  any bounded box :math:`\\prod_i [l_i, h_i]`: there the law of :math:`u = l + (h - l) \\odot v` with ``v`` the
  ``[0, 1]^k`` law (:class:`Rescaled`, e.g. the box ``[-1, 0]`` of a backward move).
- :class:`VonMisesHead` lives on a box of one period per coordinate: the head of a periodic chart
  (:class:`~gflownet_measure.charts.AffineChart` with ``period``: a circle, a torus), whose density is
  continuous across the point where the box's two ends meet. :class:`VonMisesMixtureHead` is its mixture, one
  independent mixture per coordinate (the torus policies of Lahlou et al. 2023, section 4.3).

Every Beta law here clamps its samples and its evaluation points to ``[edge, 1 - edge]`` (on ``[0, 1]``,
before any rescaling). A Beta with a concentration below 1 puts mass within float round-off of 0 and 1
(Beta(0.1, 0.1): 13% beyond 1e-6 of an edge); there a chart's inverse cannot recover ``u`` to the
precision its log-density needs (an arc maps ``u = 1e-30`` and ``u = 0`` to the same float), so
``log_prob`` turns infinite or NaN on sampled transitions. Clamping both keeps sample and density on
the same representable points; the moved mass is at most :math:`P(u < \\text{edge}) + P(u > 1 - \\text{edge})`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.distributions import Beta, Dirichlet, Distribution, Independent, VonMises, constraints

from .densities import gumbel_max
from .measures import Box

__all__ = [
    "ClampedBetaProduct",
    "BetaMixture",
    "Rescaled",
    "WrappedVonMises",
    "VonMisesMixture",
    "BetaHead",
    "BetaMixtureHead",
    "VonMisesHead",
    "VonMisesMixtureHead",
    "SquashedHead",
    "Saturation",
    "SATURATION_LEVEL",
    "box_text",
    "check_head",
]


def box_text(box: Box) -> str:
    """``[l, h]^k`` when every coordinate has the same bounds, else ``[l_1, h_1] x [l_2, h_2] x ...`` (numbers as ``%g``)."""
    sides = [f"[{lo:g}, {hi:g}]" for lo, hi in zip(box.low, box.high)]
    return f"{sides[0]}^{box.dim}" if len(set(sides)) == 1 else " x ".join(sides)


def check_head(index: int, head: nn.Module, chart) -> None:
    """Raise ``ValueError`` unless head ``index`` declares a ``domain`` box equal to the domain of piece ``index``'s ``chart``.

    Same box, hence same dimension: :math:`\\int_U q_c(u)\\,du = 1` only over the box ``U`` the head's
    density lives on (module docstring).
    """
    domain = getattr(head, "domain", None)
    if not isinstance(domain, Box):
        raise ValueError(
            f"head {index} ({type(head).__name__}) declares no domain box, so it cannot be matched with {_piece_text(index, chart)}: a head names the Box its density lives on"
        )
    if (tuple(domain.low), tuple(domain.high)) != (tuple(chart.domain.low), tuple(chart.domain.high)):
        raise ValueError(
            f"head {index} ({type(head).__name__}(k={domain.dim}), on {box_text(domain)}) does not match {_piece_text(index, chart)}: a head's dimension and box must be its chart's"
        )


def _piece_text(index: int, chart) -> str:
    return f"piece {index}'s chart {type(chart).__name__} with domain {box_text(chart.domain)}"


def _squashed(raw: Tensor, c_min: float, c_span: float) -> Tensor:
    """Concentrations :math:`c_{min} + c_{span}\\,\\mathrm{sigmoid}(\\cdot)` of raw outputs, elementwise (same shape): every head's."""
    return c_min + c_span * torch.sigmoid(raw)


SATURATION_LEVEL = 0.99
"""A squashed parameter :math:`c = c_{min} + c_{span}\\,\\sigma(z)` *sits at its cap* where :math:`\\sigma(z) > 0.99`, at its
floor where :math:`\\sigma(z) < 0.01`: within 1% of :math:`c_{span}` of the bound (:math:`|z| > \\log 99 = 4.6`).

Why 1%: there :math:`dc/dz = c_{span}\\,\\sigma(1 - \\sigma) < 0.0099\\, c_{span}`, under 4% of its value at :math:`z = 0`
(:math:`c_{span} / 4`), so the gradient that would move :math:`c` on is damped 25-fold, and a target that wants a
value beyond the bound keeps pushing :math:`z` outwards: a parameter that has settled inside the range because the
target asks for that value sits at :math:`|z| \\le 4.6` unless the target lies within 1% of the bound itself. A network's
outputs at initialisation are :math:`|z| \\ll 1` (:math:`\\sigma \\approx 0.5`), nowhere near either bound."""


class Saturation(NamedTuple):
    """How often one squashed parameter of a head sits at a bound (:data:`SATURATION_LEVEL`) over ``states`` rows.

    ``parameter`` names the output (``"alpha[0]"``, ``"kappa[1]"``, ``"beta[component 2, coordinate 0]"``), ``bound`` is
    ``"cap"`` (:math:`c_{min} + c_{span}`) or ``"floor"`` (:math:`c_{min}`), ``value`` that bound, ``fraction`` the share of
    the rows at which the parameter sits there."""

    parameter: str
    bound: str
    value: float
    fraction: float
    states: int

    def remedy(self, head: "SquashedHead") -> str:
        """What widens the range: ``c_span`` up past a cap, ``c_min`` down past a floor."""
        if self.bound == "cap":
            return f"raise c_span (now {head.c_span:g}; the parameter ranges over [c_min, c_min + c_span])"
        return f"lower c_min (now {head.c_min:g})"


class SquashedHead(nn.Module):
    """A head whose parameters are :math:`c_{min} + c_{span}\\,\\mathrm{sigmoid}(z)` of raw outputs ``z`` (:func:`_squashed`): the
    Beta heads' concentrations, the von Mises head's :math:`\\kappa`. Such a parameter cannot leave
    :math:`(c_{min}, c_{min} + c_{span})`; a target that needs a sharper (or flatter) law than the bound allows trains to
    the nearest law the head has, and to a wrong :math:`\\log Z`, without a loss that blows up. :meth:`saturation` measures
    how often that happens, from the raw outputs of the rows a head was given; a subclass says which of its outputs are
    squashed (:meth:`squashed`). :func:`gflownet_measure.checks.saturation.saturation_warnings` reads it for whole
    policies (``gflownet-measure check`` and a run's evaluations warn from it)."""

    c_min: float
    c_span: float

    def squashed(self, raw: Tensor) -> tuple[Tensor, tuple[str, ...]]:
        """``(z [R, m], names)``: the ``m`` pre-activations that are squashed, out of raw outputs ``raw [R, n_params]``, and the name of each."""
        raise NotImplementedError

    def describe(self) -> str:
        """The head's class and its bounds, e.g. ``BetaHead(k=1, c_min=0.1, c_span=5)``."""
        extra = f", C={self.n_components}" if isinstance(getattr(self, "n_components", None), int) else ""
        return f"{type(self).__name__}(k={self.k}{extra}, c_min={self.c_min:g}, c_span={self.c_span:g})"

    def saturation(self, raw: Tensor, level: float = SATURATION_LEVEL) -> list[Saturation]:
        """For every squashed parameter and each bound, the fraction of the rows of ``raw [R, n_params]`` (one per state)
        at which it sits there: :math:`\\sigma(z) > \\text{level}` at the cap, :math:`< 1 - \\text{level}` at the floor
        (:data:`SATURATION_LEVEL`); none for ``R = 0``."""
        z, names = self.squashed(raw.detach().reshape(-1, raw.shape[-1]))
        if not len(z):
            return []
        sig = torch.sigmoid(z.double())
        out = []
        for bound, value, at in (("cap", self.c_min + self.c_span, sig > level), ("floor", self.c_min, sig < 1 - level)):
            share = at.double().mean(0).tolist()
            out += [Saturation(name, bound, value, f, len(z)) for name, f in zip(names, share)]
        return out


def _indexed(name: str, k: int) -> list[str]:
    """``name`` for one coordinate, ``name[i]`` for each of ``k``."""
    return [name] if k == 1 else [f"{name}[{i}]" for i in range(k)]


def _bounds(box: Box, like: Tensor) -> tuple[Tensor, Tensor]:
    """``(low, high)`` ``[k]`` each, in the dtype and on the device of ``like``."""
    return torch.as_tensor(box.low, dtype=like.dtype, device=like.device), torch.as_tensor(box.high, dtype=like.dtype, device=like.device)


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


class Rescaled(Distribution):
    """The law of :math:`u = l + (h - l) \\odot v` with :math:`v \\sim q_0`, a law ``base`` on :math:`[0, 1]^k`: ``base`` moved onto the box ``[low, high]``.

    .. math:: q(u) = q_0\\Big(\\frac{u - l}{h - l}\\Big) \\prod_{i=1}^k \\frac{1}{h_i - l_i}

    (the change of variables of the affine map, whose Jacobian is :math:`\\prod_i (h_i - l_i)`). Reparametrisable
    when ``base`` is; ``low, high [k]``.
    """

    arg_constraints: dict = {}

    def __init__(self, base: Distribution, low: Tensor, high: Tensor):
        self.base, self.low, self.high = base, low, high
        self.width = high - low
        self.log_width = self.width.log().sum(-1)  # log prod_i (h_i - l_i)
        self.has_rsample = base.has_rsample
        super().__init__(base.batch_shape, base.event_shape, validate_args=False)

    @constraints.dependent_property(is_discrete=False, event_dim=1)
    def support(self):
        return constraints.independent(constraints.interval(self.low, self.high), 1)

    def rsample(self, sample_shape=torch.Size()) -> Tensor:
        return self.low + self.width * self.base.rsample(sample_shape)

    def sample(self, sample_shape=torch.Size()) -> Tensor:
        return self.low + self.width * self.base.sample(sample_shape)

    def log_prob(self, value: Tensor) -> Tensor:
        return self.base.log_prob((value - self.low) / self.width) - self.log_width


class WrappedVonMises(Distribution):
    """``k`` independent von Mises angles, each wrapped onto its side :math:`[l_i, h_i]` of a box, one period :math:`T_i = h_i - l_i` long.

    .. math:: q(u) = \\prod_{i=1}^k \\frac{2\\pi}{T_i}\\, \\mathrm{vM}\\Big(\\frac{2\\pi (u_i - l_i)}{T_i}; \\mu_i, \\kappa_i\\Big),
       \\qquad \\mathrm{vM}(\\theta; \\mu, \\kappa) = \\frac{e^{\\kappa \\cos(\\theta - \\mu)}}{2 \\pi I_0(\\kappa)}

    ``loc, concentration [..., k]`` (:math:`\\mu` in radians, any real), ``low, high [k]``. The density has
    period :math:`T_i` in :math:`u_i`, so it takes the same value at the box's two ends (one point of a
    periodic chart). Samples lie in ``[low, high]``; not reparametrisable (torch's von Mises sampler
    rejects draws).
    """

    arg_constraints: dict = {}
    has_rsample = False

    def __init__(self, loc: Tensor, concentration: Tensor, low: Tensor, high: Tensor):
        self.angles = VonMises(loc, concentration, validate_args=False)
        self.low, self.high = low, high
        self.to_angle = (2 * math.pi) / (high - low)  # [k]: 2 pi / T_i
        super().__init__(loc.shape[:-1], loc.shape[-1:], validate_args=False)

    @constraints.dependent_property(is_discrete=False, event_dim=1)
    def support(self):
        return constraints.independent(constraints.interval(self.low, self.high), 1)

    def sample(self, sample_shape=torch.Size()) -> Tensor:
        theta = self.angles.sample(sample_shape)  # [-pi, pi)
        return self.low + torch.remainder(theta, 2 * math.pi) / self.to_angle

    def log_prob(self, value: Tensor) -> Tensor:
        return (self.angles.log_prob((value - self.low) * self.to_angle) + self.to_angle.log()).sum(-1)


class VonMisesMixture(Distribution):
    """``k`` independent angles, each a mixture of ``C`` von Mises laws wrapped onto its side :math:`[l_i, h_i]` (one period :math:`T_i`).

    .. math:: q(u) = \\prod_{i=1}^k \\frac{2\\pi}{T_i} \\sum_{j=1}^C w_{ij}\\, \\mathrm{vM}\\Big(\\frac{2\\pi (u_i - l_i)}{T_i}; \\mu_{ij}, \\kappa_{ij}\\Big),
       \\qquad w_{i\\cdot} = \\mathrm{softmax}(\\ell_{i\\cdot})

    ``logits, loc, concentration [..., k, C]``, ``low, high [k]``; as in :class:`WrappedVonMises` the angle of :math:`u_i`
    is measured from :math:`l_i`. Built lazily as :class:`BetaMixture`: ``sample``
    draws the component of each angle by :func:`~gflownet_measure.densities.gumbel_max`, then that component's von Mises
    only; ``log_prob`` is a log-sum-exp over components per angle, summed over angles. Periodic in every :math:`u_i`;
    not reparametrisable (a discrete choice, and torch's von Mises sampler rejects draws).
    """

    arg_constraints: dict = {}
    has_rsample = False

    def __init__(self, logits: Tensor, loc: Tensor, concentration: Tensor, low: Tensor, high: Tensor):
        self.logits, self.loc, self.concentration, self.low, self.high = logits, loc, concentration, low, high
        self.to_angle = (2 * math.pi) / (high - low)  # [k]: 2 pi / T_i
        super().__init__(loc.shape[:-2], loc.shape[-2:-1], validate_args=False)

    @constraints.dependent_property(is_discrete=False, event_dim=1)
    def support(self):
        return constraints.independent(constraints.interval(self.low, self.high), 1)

    def sample(self, sample_shape=torch.Size()) -> Tensor:
        with torch.no_grad():
            shape = torch.Size(sample_shape) + self.logits.shape
            j = gumbel_max(self.logits.expand(shape))[..., None]  # [*S, *batch, k, 1]
            pick = lambda t: t.expand(shape).gather(-1, j)[..., 0]  # noqa: E731 (the chosen component's parameter)
            theta = VonMises(pick(self.loc), pick(self.concentration), validate_args=False).sample()  # [-pi, pi)
        return self.low + torch.remainder(theta, 2 * math.pi) / self.to_angle

    def log_prob(self, value: Tensor) -> Tensor:
        angle = ((value - self.low) * self.to_angle).unsqueeze(-1)  # [..., k, 1]: against every component
        per = VonMises(self.loc, self.concentration, validate_args=False).log_prob(angle)  # [..., k, C]
        return (torch.logsumexp(torch.log_softmax(self.logits, -1) + per, -1) + self.to_angle.log()).sum(-1)


class BetaHead(SquashedHead):
    """Product of Betas on the box ``domain`` (default ``[0, 1]^k``), concentrations :math:`c_{min} + c_{span}\\,\\mathrm{sigmoid}(\\cdot)`.

    .. math:: q(u) = \\prod_{i=1}^k \\frac{1}{h_i - l_i}\\, \\mathrm{Beta}\\Big(\\frac{u_i - l_i}{h_i - l_i}; \\alpha_i, \\beta_i\\Big),\\quad \\alpha_i, \\beta_i \\in [c_{min}, c_{min} + c_{span}]

    A density over chart coordinates (w.r.t. ``du``); :class:`~gflownet_measure.densities.KernelDensity` divides by the chart's
    Jacobian. On ``[0, 1]^k`` a :class:`ClampedBetaProduct`, on another (bounded) box that law
    :class:`Rescaled` onto it. Coordinates are clamped to ``[edge, 1 - edge]`` before rescaling (module
    docstring); ``edge`` defaults to 1e-6, about the float32 spacing just below 1.
    """

    def __init__(self, k: int, c_min: float = 0.1, c_span: float = 5.0, edge: float = 1e-6, domain: Box | None = None):
        super().__init__()
        self.k, self.c_min, self.c_span, self.edge = k, c_min, c_span, edge
        unit = Box((0.0,) * k, (1.0,) * k)
        self.domain = unit if domain is None else domain
        if self.domain.dim != k or not self.domain.bounded:
            raise ValueError(f"{type(self).__name__}(k={k}) needs a bounded domain box of dimension {k}, got {box_text(self.domain)}")
        self._unit = (tuple(self.domain.low), tuple(self.domain.high)) == (unit.low, unit.high)

    @property
    def n_params(self) -> int:
        return 2 * self.k

    def _concentrations(self, raw: Tensor) -> Tensor:
        return _squashed(raw, self.c_min, self.c_span)

    def squashed(self, raw: Tensor) -> tuple[Tensor, tuple[str, ...]]:
        """Every output is squashed: ``alpha`` of each coordinate, then ``beta``."""
        return raw, tuple(_indexed("alpha", self.k) + _indexed("beta", self.k))

    def _on_domain(self, q: Distribution, raw: Tensor) -> Distribution:
        """``q`` (a law on ``[0, 1]^k``) itself on the unit box, else :class:`Rescaled` onto ``domain``."""
        return q if self._unit else Rescaled(q, *_bounds(self.domain, raw))

    def forward(self, raw: Tensor) -> Distribution:
        a, b = self._concentrations(raw).chunk(2, -1)  # [..., 2k] -> alpha, beta [..., k]
        return self._on_domain(ClampedBetaProduct(a, b, self.edge), raw)


class BetaMixtureHead(BetaHead):
    """A mixture of ``n_components`` products of Betas on the box ``domain`` (default ``[0, 1]^k``; the quarter-disc policies, Lahlou et al. 2023 section 4.1).

    .. math:: q(u) = \\sum_{j=1}^{C} w_j \\prod_{i=1}^k \\frac{1}{h_i - l_i}\\, \\mathrm{Beta}\\Big(\\frac{u_i - l_i}{h_i - l_i}; \\alpha_{ji}, \\beta_{ji}\\Big),\\quad w = \\mathrm{softmax}(\\ell)

    Raw outputs: ``C`` mixture logits, then ``2 k C`` concentration pre-activations (all ``alpha``
    then all ``beta``, component-major). Same squashing, edge clamp and rescaling as :class:`BetaHead`.
    """

    def __init__(self, k: int, n_components: int, c_min: float = 0.1, c_span: float = 5.0, edge: float = 1e-6, domain: Box | None = None):
        super().__init__(k, c_min, c_span, edge, domain)
        self.n_components = n_components

    @property
    def n_params(self) -> int:
        return self.n_components * (1 + 2 * self.k)

    def squashed(self, raw: Tensor) -> tuple[Tensor, tuple[str, ...]]:
        """The ``2 k C`` concentrations after the ``C`` logits (alpha then beta, component-major)."""
        C, k = self.n_components, self.k
        names = [f"{ab}[component {j}{f', coordinate {i}' if k > 1 else ''}]" for ab in ("alpha", "beta") for j in range(C) for i in range(k)]
        return raw[..., C:], tuple(names)

    def forward(self, raw: Tensor) -> Distribution:
        C = self.n_components
        logits, conc = raw[..., :C], raw[..., C:]
        pairs = conc.unflatten(-1, (2, C, self.k)).movedim(-3, -1)  # [..., C, k, 2]: (alpha, beta) of each coordinate
        return self._on_domain(BetaMixture(logits, self._concentrations(pairs), self.edge), raw)


class VonMisesHead(SquashedHead):
    """Von Mises angles wrapped onto the box ``domain``, one period per coordinate: the head of a periodic chart (a circle, a torus).

    .. math:: q(u) = \\prod_{i=1}^k \\frac{2\\pi}{T_i}\\, \\mathrm{vM}\\Big(\\frac{2\\pi (u_i - l_i)}{T_i}; \\mu_i, \\kappa_i\\Big),
       \\quad \\mu_i = \\text{raw}_i, \\quad \\kappa_i = c_{min} + c_{span}\\, \\mathrm{sigmoid}(\\text{raw}_{k + i})

    (:class:`WrappedVonMises`, :math:`T_i = h_i - l_i`). Raw outputs: ``k`` locations (angles in radians;
    any real, the density is periodic in :math:`\\mu`), then ``k`` concentration pre-activations. For an
    :class:`~gflownet_measure.charts.AffineChart` with ``period`` :math:`T` and scale :math:`c` the
    domain is the whole circle, :math:`T / |c_i|` long in coordinate ``i``. ``c_min > 0`` (torch's
    sampler needs :math:`\\kappa > 0`); :math:`\\kappa = 0.1` is nearly uniform, :math:`\\kappa = 10.1` an angular
    standard deviation of about 0.32 rad, 5% of a period.
    """

    def __init__(self, domain: Box, c_min: float = 0.1, c_span: float = 10.0):
        super().__init__()
        if not domain.bounded:
            raise ValueError(f"VonMisesHead needs a bounded domain box (one period per coordinate), got {box_text(domain)}")
        if not c_min > 0:
            raise ValueError(f"VonMisesHead needs c_min > 0 (a von Mises concentration is positive), got {c_min}")
        self.domain, self.k, self.c_min, self.c_span = domain, domain.dim, c_min, c_span

    @property
    def n_params(self) -> int:
        return 2 * self.k

    def squashed(self, raw: Tensor) -> tuple[Tensor, tuple[str, ...]]:
        """The ``k`` concentration pre-activations after the ``k`` locations (which are not squashed)."""
        return raw[..., self.k :], tuple(_indexed("kappa", self.k))

    def forward(self, raw: Tensor) -> WrappedVonMises:
        loc, pre = raw.chunk(2, -1)  # [..., 2k] -> mu, kappa pre-activations [..., k]
        return WrappedVonMises(loc, _squashed(pre, self.c_min, self.c_span), *_bounds(self.domain, raw))


class VonMisesMixtureHead(nn.Module):
    """Per coordinate a mixture of ``n_components`` von Mises laws wrapped onto the box ``domain`` (one period per coordinate):
    the torus policies of Lahlou et al. 2023, section 4.3 (five components, minimum concentration 4 in the public code).

    .. math:: q(u) = \\prod_{i=1}^k \\frac{2\\pi}{T_i} \\sum_{j=1}^C w_{ij}\\, \\mathrm{vM}\\Big(\\frac{2\\pi (u_i - l_i)}{T_i}; \\mu_{ij}, \\kappa_{ij}\\Big),
       \\quad \\kappa_{ij} = c_{min} + \\mathrm{softplus}(\\cdot)

    (:class:`VonMisesMixture`). Raw outputs, coordinate-major: for each of the ``k`` coordinates ``C`` logits, ``C``
    locations (radians, any real) and ``C`` concentration pre-activations. The public code uses
    :math:`c_{min} + e^{(\\cdot)}`; softplus has the same floor and no overflow for large outputs. A density w.r.t. ``du``
    on ``domain``; the chart supplies the Jacobian (zero for a unit-scale angle chart: Haar measure is arclength).
    """

    def __init__(self, domain: Box, n_components: int = 5, c_min: float = 4.0):
        super().__init__()
        if not domain.bounded:
            raise ValueError(f"VonMisesMixtureHead needs a bounded domain box (one period per coordinate), got {box_text(domain)}")
        if not c_min > 0 or n_components < 1:
            raise ValueError(f"VonMisesMixtureHead needs c_min > 0 and n_components >= 1, got {c_min}, {n_components}")
        self.domain, self.k, self.n_components, self.c_min = domain, domain.dim, n_components, c_min

    @property
    def n_params(self) -> int:
        return 3 * self.k * self.n_components

    def location_offset(self, angles: Tensor) -> Tensor:
        """Raw offsets ``[B, n_params]`` that make the locations absolute for a move :math:`\\theta \\to \\theta + u` of the
        angles ``angles [B, k]`` (in the units of the domain): :math:`-2\\pi (\\theta_i + l_i) / T_i` at every component's
        location of coordinate :math:`i`, 0 elsewhere. Added to the raw outputs, a network output :math:`m` (radians)
        then centres the component on :math:`\\theta_i + u_i = m\\, T_i / 2\\pi` (von Mises being :math:`2\\pi`-periodic in its
        location): a smooth function of the state can aim at a fixed angle, where the increment's location
        :math:`m - \\theta` winds once around the circle with :math:`\\theta` and cannot be continuous."""
        low, high = _bounds(self.domain, angles)
        offset = angles.new_zeros(len(angles), self.k, 3, self.n_components)
        offset[:, :, 1, :] = (-(angles + low) * (2 * math.pi) / (high - low))[:, :, None]
        return offset.flatten(1)

    def forward(self, raw: Tensor) -> VonMisesMixture:
        logits, loc, pre = raw.unflatten(-1, (self.k, 3, self.n_components)).unbind(-2)  # [..., k, C] each
        return VonMisesMixture(logits, loc, self.c_min + nn.functional.softplus(pre), *_bounds(self.domain, raw))
