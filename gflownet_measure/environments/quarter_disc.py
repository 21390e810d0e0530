"""The quarter-disc continuous grid (Lahlou et al. 2023, section 4.1): moves of length rho in [0, 1]^2.

States are points of :math:`S = [0, 1]^2` with source :math:`s_0 = (0, 0)`. The pointed graph:

- :math:`\\kappa(s_0, \\cdot)` = Lebesgue area on the quarter disc :math:`Q_\\rho = \\{\\|s\\| \\le \\rho\\}`
  (:class:`~gflownet_measure.charts.PolarChart`); :math:`s_0` cannot exit.
- :math:`\\kappa(s, \\cdot)`, :math:`s \\ne s_0`: arclength on the admissible arc
  :math:`\\{s + \\rho(\\cos\\theta, \\sin\\theta) \\in S: \\theta \\in [0, \\pi/2]\\}`
  (:class:`~gflownet_measure.charts.ArcChart`, angle fractions :math:`[A(s), B(s)]`) plus the
  sink atom; only the sink where the arc is empty (forced exit).
- :math:`\\kappa_b(s', \\cdot)`: the atom :math:`s_0` for :math:`s' \\in Q_\\rho` (their only parent),
  arclength on the backward arc :math:`\\{s' - \\rho(\\cos\\theta, \\sin\\theta) \\in S\\}` otherwise,
  zero at :math:`s_0` (eq. 5). Where that arc is a single point :math:`p(s')` (:math:`s'` on a wall beyond
  :math:`Q_\\rho`: :math:`x = 0 < \\rho < y` or :math:`y = 0 < \\rho < x`; numerically also within round-off of
  a wall or of the circle :math:`\\|s'\\| = \\rho`, where the computed bounds give :math:`B \\le A`) it carries no
  arclength; there :math:`\\kappa_b(s', \\cdot) = \\delta_{p(s')}`, the limit of the normalised arc, so that every
  :math:`s' \\ne s_0` of :math:`S` has a parent. These states are :math:`\\nu`-null, so eq. 4 is unchanged.
- :math:`\\nu = \\delta_{s_0} + \\lambda_S`; every :math:`s \\ne s_0` is terminable, so
  :math:`\\kappa_b(\\bot, \\cdot) = \\lambda_S` and the reward is a density w.r.t. Lebesgue area.

Eq. 4 holds because :math:`(s, \\theta) \\mapsto (s + \\rho e_\\theta, \\theta)` preserves
:math:`\\lambda_S \\otimes \\rho\\, d\\theta`, and a forward arc never re-enters the interior of
:math:`Q_\\rho` (:math:`\\|s + \\rho e_\\theta\\|^2 = \\|s\\|^2 + 2\\rho\\, s \\cdot e_\\theta + \\rho^2 \\ge \\rho^2`).

Reward (the exact version of the public code, github.com/saleml/continuous-gfn; docs/references.md, 'Quarter disc'),
:math:`a_d = |x_d - 1/2|`:

.. math:: R(x) = R_0 + R_1 \\prod_d 1[a_d > 0.25] + R_2 \\prod_d 1[0.3 < a_d < 0.4],\\quad
   Z = R_0 + 0.5^2 R_1 + 0.2^2 R_2 = 0.305
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from gflownet_measure.charts import AffineChart, ArcChart, PolarChart, WithoutJacobian
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.heads import BetaMixtureHead
from gflownet_measure.kernels import Kernel
from gflownet_measure.measures import Atoms, Box, Measure, Piece, charted, dirac, sum_measures
from gflownet_measure.networks import MLPPolicy, torso
from gflownet_measure.options import check_options, option, settings_of

__all__ = [
    "QuarterDiscConfig",
    "SETTINGS",
    "R0",
    "R1",
    "R2",
    "LEVELS",
    "LOG_Z",
    "REWARD_MAX",
    "arc_bounds",
    "QuarterDiscKernel",
    "log_reward",
    "reward_level",
    "level_masses",
    "make_graph",
    "make_policies",
]


ACTIVATIONS = {"elu": nn.ELU, "leaky_relu": nn.LeakyReLU}
"""The ``activation`` setting -> the torso's activation module (torch's default negative slope 0.01 for leaky ReLU)."""


@dataclass(frozen=True)
class QuarterDiscConfig:
    """The step length :math:`\\rho`, whether the policies' coordinate densities are divided by the chart Jacobians, and
    the policies' networks (:func:`make_policies`)."""

    rho: float = option(0.25, "step length (the paper uses 0.25 and 0.1)", low=0.05, high=0.5)
    jacobian: bool = option(True, "divide the policies' coordinate densities by the chart Jacobians (false: the Li et al. 2023 error)", choices=(True, False))
    backward: str = option("uniform", "P_B: uniform in angle on the backward arc, or a learned Beta mixture", choices=("uniform", "learned"))
    hidden: int = option(128, "MLP width", low=1)
    n_layers: int = option(4, "Linear+activation blocks before each head (the code's input layer + 3 hidden; the paper's network: 3)", low=0)
    activation: str = option("elu", "activation of those blocks: elu (the public code) or leaky_relu (the paper's network)", choices=tuple(ACTIVATIONS))
    flow_torso: str = option(
        "separate",
        "DB's state flow log F: its own MLP of the same shape (the public code) or a linear head on the P_F torso (shared, the paper's network)",
        choices=("separate", "shared"),
    )
    n_components: int = option(2, "Beta-mixture components of the arc heads (P_F at s != s0, learned P_B)", low=1)
    n_components_s0: int = option(4, "Beta-mixture components of P_F at s0 (polar coordinates)", low=1)
    concentration_max: float = option(
        5.1, "upper bound of the Beta concentrations alpha, beta (lower bound 0.1; the public code's 5.1 blurs the 0.1-wide 2.6 squares: see level_tv)", low=0.2
    )

    def __post_init__(self):
        check_options(self)


SETTINGS = settings_of(QuarterDiscConfig)

R0, R1, R2 = 0.1, 0.5, 2.0
BAND = 0.25  # the R1 band: |x_d - 1/2| > BAND in every coordinate
SQUARE = (0.3, 0.4)  # the R2 squares: SQUARE[0] < |x_d - 1/2| < SQUARE[1] in every coordinate
LEVELS = (R0, R0 + R1, R0 + R1 + R2)  # the values R takes: 0.1, 0.6, 2.6
LOG_Z = math.log(R0 + (1 - 2 * BAND) ** 2 * R1 + (2 * (SQUARE[1] - SQUARE[0])) ** 2 * R2)  # log(0.1 + 0.5^2 0.5 + 0.2^2 2) = log 0.305
REWARD_MAX = R0 + R1 + R2  # 2.6: the R2 squares lie inside the R1 band (the public code's sampler wrongly uses 2.1)
C_MIN = 0.1  # the Beta concentrations' lower bound (the public code's beta_min)


def arc_bounds(wall: Tensor, rho: float) -> tuple[Tensor, Tensor]:
    """Angle fractions :math:`(A, B)` ``[B]`` of the arc of radius rho that stays within ``wall [B, 2]`` of its centre.

    .. math:: A = \\tfrac{2}{\\pi} \\arccos\\big(\\min(w_x/\\rho, 1)\\big),\\quad B = \\tfrac{2}{\\pi} \\arcsin\\big(\\min(w_y/\\rho, 1)\\big)

    With ``wall = 1 - s`` these are the public code's forward bounds, with ``wall = s`` its backward
    bounds (docs/references.md, 'Quarter disc'); the ``min`` says a wall farther than rho is never hit
    (``A = 0``, ``B = 1``). The arc is empty iff :math:`B \\le A`, i.e. iff the corner
    ``s + wall`` lies within rho of ``s`` or a wall is touched: the public code's forced-exit rule.
    """
    w = (wall.double() / rho).clamp(max=1.0)  # the min above; float64 so that log(B - A) agrees across state dtypes
    return torch.arccos(w[:, 0]) * (2 / math.pi), torch.arcsin(w[:, 1]) * (2 / math.pi)


class QuarterDiscKernel(Kernel):
    """:math:`\\kappa` (``forward``) or :math:`\\kappa_b` of the quarter-disc grid (module docstring).

    Components, in order: forward ``[sink atom | polar piece at s0 | forward arc]``, backward
    ``[atom | backward arc]``: the atom is s0 inside the first quarter disc, and the arc's single
    point where the backward arc has no length (a wall beyond the disc, module docstring). With
    ``jacobian=False`` the charts report :math:`\\log|J| = 0`
    (:class:`~gflownet_measure.charts.WithoutJacobian`): such a kernel is not the graph's, and
    is only used to build the policies of the Jacobian-free demonstration.
    """

    def __init__(self, rho: float, forward: bool, jacobian: bool = True):
        self.rho, self.forward = rho, forward
        wrap = (lambda c: c) if jacobian else WithoutJacobian
        if forward:
            self.polar = wrap(PolarChart(rho))
            self.arc = wrap(ArcChart(rho, lambda s: arc_bounds(1 - s, rho), direction=1))
        else:
            self.arc = wrap(ArcChart(rho, lambda s: arc_bounds(s, rho), direction=-1))

    def __call__(self, s: Tensor) -> Measure:
        B = s.shape[0]
        at_source = (s == 0).all(1)
        walls = 1 - s if self.forward else s
        lo, hi = arc_bounds(walls, self.rho)
        has_arc = ~at_source & (hi > lo)
        if self.forward:
            atoms = Atoms(s[:, None], torch.zeros(B, 1, dtype=s.dtype), ~at_source[:, None], torch.ones(B, 1, dtype=torch.bool))
            return Measure(atoms, (Piece(self.polar, s, at_source), Piece(self.arc, s, has_arc)))
        in_disc = ~at_source & (torch.linalg.vector_norm(s, dim=1) <= self.rho)
        # the backward arc is a single point (module docstring): no arclength, the atom at that point instead
        point = ~at_source & ~in_disc & ~has_arc
        parent = torch.zeros_like(s)
        if point.any():
            theta = (math.pi / 4) * (lo + hi)[point]  # A = B up to round-off: (pi / 2) (A + B) / 2
            e = torch.stack([torch.cos(theta), torch.sin(theta)], -1)
            parent[point] = (s[point].double() - self.rho * e).clamp(min=0.0).to(s.dtype)  # cos(pi/2) = 6e-17: stay in S
        atoms = Atoms(parent[:, None], torch.zeros(B, 1, dtype=s.dtype), (in_disc | point)[:, None], torch.zeros(B, 1, dtype=torch.bool))
        return Measure(atoms, (Piece(self.arc, s, has_arc & ~in_disc),))

    def boundaries(self, s: Tensor) -> Tensor:
        """The known jumps of :math:`s \\mapsto \\kappa(s, \\cdot)` (:meth:`~gflownet_measure.kernels.Kernel.boundaries`), as
        level functions ``[B, L]``: forward, the forced exit :math:`B(1 - s) - A(1 - s)` (the arc vanishes where it is
        :math:`\\le 0` and the sink takes all of :math:`P_F`); backward, the first disc :math:`\\|s\\| - \\rho` (the atom
        :math:`s_0` inside, the backward arc outside) and the backward arc's :math:`B(s) - A(s)` (a single point on a wall)."""
        if self.forward:
            lo, hi = arc_bounds(1 - s, self.rho)
            return (hi - lo)[:, None]
        lo, hi = arc_bounds(s, self.rho)
        return torch.stack([torch.linalg.vector_norm(s, dim=1).double() - self.rho, hi - lo], 1)


def _regions(x: Tensor) -> tuple[Tensor, Tensor]:
    """Whether each point of ``x [B, 2]`` lies in the R1 band and in an R2 square (module docstring; strict inequalities), ``[B]`` each."""
    a = (x - 0.5).abs()
    return (a > BAND).all(-1), ((a > SQUARE[0]) & (a < SQUARE[1])).all(-1)


def log_reward(x: Tensor) -> Tensor:
    """:math:`\\log R(x)` ``[B]`` w.r.t. Lebesgue area on :math:`[0, 1]^2` (module docstring)."""
    band, square = _regions(x)
    return torch.log(R0 + R1 * band.to(x.dtype) + R2 * square.to(x.dtype))


def reward_level(x: Tensor) -> Tensor:
    """The index in ``LEVELS`` of :math:`R(x)`, ``[B]`` int64: 0 outside the band, 1 in the band outside the squares, 2 in a square
    (the squares lie inside the band, as :math:`(0.3, 0.4) \\subset (0.25, 0.5]`)."""
    band, square = _regions(x)
    return band.long() + square.long()


def level_masses() -> Tensor:
    """The exact mass :math:`\\pi_k = v_k\\, |\\{R = v_k\\}| / Z` of each level :math:`v_k` of ``LEVELS``, ``[3]`` float64, from the reward's geometry.

    Per coordinate the band is :math:`1 - 2 \\cdot 0.25 = 0.5` long and the squares :math:`2 (0.4 - 0.3) = 0.2`, so the level
    areas are :math:`1 - 0.5^2 = 0.75`, :math:`0.5^2 - 0.2^2 = 0.21` and :math:`0.2^2 = 0.04`, and the masses
    :math:`(0.1 \\cdot 0.75, 0.6 \\cdot 0.21, 2.6 \\cdot 0.04) / 0.305 = (0.2459, 0.4131, 0.3410)`.
    """
    band, square = (1 - 2 * BAND) ** 2, (2 * (SQUARE[1] - SQUARE[0])) ** 2
    areas = torch.tensor([1 - band, band - square, square], dtype=torch.float64)
    return torch.tensor(LEVELS, dtype=torch.float64) * areas / math.exp(LOG_Z)


def encode(x: Tensor) -> Tensor:
    """The raw coordinates ``(x, y)`` as float32 features ``[B, 2]`` (the paper's torso input)."""
    return x.float()


def make_graph(config: QuarterDiscConfig) -> PointedGraph:
    """The pointed graph for step ``rho``; states are float64 so arc end points survive the chart round trip."""
    rho = config.rho
    source = torch.zeros(2, dtype=torch.float64)
    square = charted(AffineChart(Box((0.0, 0.0), (1.0, 1.0)), slots=(0, 1)), 2, torch.float64)
    return PointedGraph(
        name=f"quarter-disc(rho={rho})",
        source=source,
        kappa=QuarterDiscKernel(rho, forward=True),
        kappa_b=QuarterDiscKernel(rho, forward=False),
        nu=sum_measures(dirac(source), square),
        terminal=square,
        log_reward=log_reward,
        max_length=2 + math.ceil(2 / rho),  # first move, at most 2/rho arcs (each adds >= rho to x + y), exit
        encode=encode,
    )


def make_policies(graph: PointedGraph, config: QuarterDiscConfig):
    """``(P_F, P_B)`` of the paper's quarter-disc experiment.

    P_F: one MLP on ``(x, y)`` (``n_layers`` Linear+``activation`` blocks of width ``hidden``; the public code's
    input layer plus 3 hidden ELU blocks is ``n_layers = 4``, the network Lahlou et al. 2023 describe for this experiment
    3 leaky-ReLU layers, ``n_layers=3 activation=leaky_relu``, with DB's state flow on the same torso, ``flow_torso``) with logits ``[sink, polar, arc]``, a
    ``n_components_s0``-mixture of products of two Betas over the polar coordinates (radius and angle
    fractions; at s0 the raw outputs are free parameters, as in the public code) and a
    ``n_components``-mixture of Betas over the arc coordinate. At ``s != s0`` the softmax over
    ``[sink, arc]`` is the exit probability. P_B: uniform in angle on the backward arc (an exact
    density w.r.t. arclength), or ``learned``: its own output layer and Beta mixture on the P_F torso
    (the code's ``tied`` option, the paper's "learned P_B"). Concentrations :math:`\\alpha, \\beta` in
    ``[0.1, concentration_max]`` (the public code's ``0.1 + 5.0 sigmoid``: 5.1; a Beta with both at most 5.1 has a standard
    deviation of at least 0.15 of its arc). With ``config.jacobian`` false both are built on kernels whose charts drop the Jacobian.
    Every name above is a field of ``config``.
    """
    rho, jac, hidden, n_layers, n_components = config.rho, config.jacobian, config.hidden, config.n_layers, config.n_components
    span = config.concentration_max - C_MIN
    pf_heads = [BetaMixtureHead(2, config.n_components_s0, C_MIN, span), BetaMixtureHead(1, n_components, C_MIN, span)]
    body = torso(2, hidden, n_layers, ACTIVATIONS[config.activation])
    pf = MLPPolicy(QuarterDiscKernel(rho, True, jac), graph.encode, 2, 1, pf_heads, source=graph.source, shared_torso=body)
    if config.backward == "uniform":
        return pf, uniform_backward(rho, jac)
    return pf, MLPPolicy(QuarterDiscKernel(rho, False, jac), graph.encode, 2, 1, [BetaMixtureHead(1, n_components, C_MIN, span)], shared_torso=pf.torso)


def uniform_backward(rho: float, jacobian: bool = True) -> UniformPolicy:
    """The fixed P_B of the paper's quarter disc: uniform in angle on the backward arc of radius ``rho``, a density
    w.r.t. arclength (without the arc chart's Jacobian where ``jacobian`` is false)."""
    return UniformPolicy(QuarterDiscKernel(rho, False, jacobian))
