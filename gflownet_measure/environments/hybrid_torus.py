"""The hybrid torus: a discrete choice (stay, or which angle to move), then a von Mises angle. The smallest hybrid space to copy.

States are :math:`s = (\\theta, t)` as on the torus (:mod:`gflownet_measure.environments.torus`), :math:`\\lambda` Haar measure on
:math:`\\mathbb T^n` and :math:`\\lambda_1` arclength on one circle. One kernel holds atoms and Haar pieces of two dimensions:

- :math:`\\kappa(s_0, \\cdot) = \\lambda \\otimes \\delta_1`: the first move draws every angle (the torus piece);
- :math:`\\kappa((\\theta, t), \\cdot) = \\delta_{(\\theta, t+1)} + \\sum_{i=1}^n \\lambda_1(d\\theta'_i) \\otimes \\delta_{\\theta_{-i}} \\otimes \\delta_{t+1}`
  for :math:`1 \\le t < T`: stay (an atom), or move angle :math:`i` alone to anywhere on its circle (piece :math:`i`, charted by the
  increment :math:`u \\in [-\\pi, \\pi)`, unit scale, :math:`\\log|J| = 0`); the sink atom at :math:`t = T`;
- :math:`\\kappa_b((\\theta, t), \\cdot)` the mirror: :math:`\\delta_{s_0}` at :math:`t = 1`, for :math:`t \\ge 2` the atom
  :math:`(\\theta, t-1)` and the circle pieces at :math:`t - 1`; zero at :math:`s_0` (eq. 5);
- :math:`\\nu = \\delta_{s_0} + \\sum_{t=1}^T \\lambda \\otimes \\delta_t`, :math:`\\kappa_b(\\bot, \\cdot) = \\lambda \\otimes \\delta_T`; the reward is a
  density w.r.t. Haar measure, as on the torus.

Eq. 4 holds level by level: :math:`\\lambda \\otimes \\delta_\\theta` (stay) is the diagonal measure both ways, and moving angle
:math:`i` gives :math:`\\lambda(d\\theta)\\, \\lambda_1(d\\theta'_i)\\, \\delta_{\\theta_{-i}}(d\\theta'_{-i})`, symmetric in
:math:`(\\theta, \\theta')`. A policy is a categorical choice among ``[atom, torus piece, circle 1..n]`` and a von Mises mixture
on the chosen piece; :func:`terminal_density` computes its :math:`P_T` exactly, by enumerating the discrete choices and
integrating the angles on a periodic grid.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gflownet_measure.charts import AffineChart
from gflownet_measure.densities import Policy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.heads import VonMisesMixtureHead
from gflownet_measure.kernels import Kernel
from gflownet_measure.measures import Atoms, Box, Measure, Piece

from .torus import TWO_PI, TorusConfig, increments_box, mlp_policies, torus_graph
from .torus_targets import periodic_grid

__all__ = ["HybridTorusKernel", "make_graph", "make_policies", "terminal_density"]

CIRCLE = Box((-math.pi,), (math.pi,), periodic=True)


class HybridTorusKernel(Kernel):
    """:math:`\\kappa` (``forward``) or :math:`\\kappa_b` of the hybrid torus (module docstring).

    Components: forward ``[atom (stay, or the sink at t = T) | torus piece (s0 only) | circle 1 .. circle n]``,
    backward ``[atom (s0 at t = 1, else stay) | circle 1 .. circle n]``.
    """

    def __init__(self, n: int, n_steps: int, forward: bool, concentration: float = 0.0):
        self.n, self.n_steps, self.forward = n, n_steps, forward
        step = {n: 1.0 if forward else -1.0}
        circle = increments_box(1, concentration)  # the forward moves' exploration proposal (uniform for 0)
        self.torus = AffineChart(increments_box(n, concentration), range(n), relative=True, period=TWO_PI, advance=step) if forward else None
        self.circles = tuple(AffineChart(circle, (i,), relative=True, period=TWO_PI, advance=step) for i in range(n))

    def __call__(self, s: Tensor) -> Measure:
        B, n = s.shape[0], self.n
        t = s[:, n]
        stay = s.clone()
        stay[:, n] = t + (1 if self.forward else -1)
        if self.forward:
            assert self.torus is not None  # built for the forward kernel
            at_source, last = t == 0, t == self.n_steps
            moving = ~at_source & ~last
            atoms = Atoms(torch.where(last[:, None], s, stay)[:, None], torch.zeros(B, 1, dtype=s.dtype), (~at_source)[:, None], last[:, None])
            return Measure(atoms, (Piece(self.torus, s, at_source), *(Piece(c, s, moving) for c in self.circles)))
        first, moving = t == 1, t >= 2
        atoms = Atoms(
            torch.where(first[:, None], torch.zeros_like(s), stay)[:, None],
            torch.zeros(B, 1, dtype=s.dtype),
            (t >= 1)[:, None],
            torch.zeros(B, 1, dtype=torch.bool),
        )
        return Measure(atoms, tuple(Piece(c, s, moving) for c in self.circles))


def make_graph(config: TorusConfig) -> PointedGraph:
    """The hybrid torus of ``config`` (the torus's settings and targets) with float64 states."""
    return torus_graph(config, HybridTorusKernel, "hybrid-torus")


def make_policies(graph: PointedGraph, config: TorusConfig):
    """``(P_F, P_B)``: logits over ``[atom, (torus,) circle 1..n]`` and a von Mises mixture per piece (``n_components``, ``c_min``)."""
    n = config.n_dim
    torus = VonMisesMixtureHead(increments_box(n), config.n_components, config.c_min)
    circles = lambda: [VonMisesMixtureHead(CIRCLE, config.n_components, config.c_min) for _ in range(n)]  # noqa: E731
    each = [[i] for i in range(n)]
    return mlp_policies(graph, config, graph.kappa, graph.kappa_b, 1, [torus, *circles()], circles(), [range(n), *each], each)


def _wrapped(v: Tensor) -> Tensor:
    """Angles to :math:`[-\\pi, \\pi)`."""
    return torch.remainder(v + math.pi, TWO_PI) - math.pi


@torch.no_grad()
def terminal_density(graph: PointedGraph, pf: Policy, G: int) -> Tensor:
    """:math:`P_T(\\theta)` ``[G^n]``, the density w.r.t. Haar measure of the terminal states of ``pf`` on :func:`periodic_grid` (float64).

    .. math:: p_1 = \\frac{dP_F(s_0, \\cdot)}{d\\lambda},\\qquad
       p_{t+1}(\\theta') = p_t(\\theta')\\, \\pi_{\\text{stay}}(\\theta') + \\sum_{i=1}^n \\int p_t(\\theta)\\, \\pi_i(\\theta)\\,
       q_i(\\theta'_i - \\theta_i \\mid \\theta)\\, d\\theta_i \\Big|_{\\theta_{-i} = \\theta'_{-i}}

    with :math:`\\pi` the probabilities of the discrete choices (enumerated) and :math:`q_i` the coordinate density of circle
    :math:`i` over its increment; each integral over a circle is the trapezoidal rule on the grid (spectrally accurate for
    smooth densities), and the grid's increments are themselves grid differences, so no interpolation enters.
    """
    n, T = graph.state_dim - 1, graph.max_length - 1
    theta = periodic_grid(n, G)
    weight = TWO_PI / G
    first = torch.cat([theta, torch.ones(len(theta), 1, dtype=torch.float64)], 1)
    p = pf(torch.zeros_like(first)).log_prob(first, torch.zeros(len(theta), dtype=torch.bool)).double().exp()  # [G^n]
    shift = (torch.arange(G)[:, None] - torch.arange(G)[None, :]) % G  # [j', j]: the grid step from theta_j to theta_j'
    increments = _wrapped(torch.arange(G, dtype=torch.float64) * weight)  # [G]: u_m = 2 pi m / G, wrapped
    for t in range(1, T):
        s = torch.cat([theta, torch.full((len(theta), 1), float(t), dtype=torch.float64)], 1)
        density = pf(s)
        probs = density.log_probs.double().exp()  # [G^n, 1 + 1 + n]: stay, torus (absent), circles
        nxt = p * probs[:, 0]
        for i in range(n):
            c = 1 + i  # coordinate family of circle i (after the torus piece)
            chart = density.measure.pieces[c].chart
            rows = torch.ones(len(s), dtype=torch.bool)
            log_q = density.coords[c](rows).log_prob(increments[:, None, None]).double()  # [G(m), G^n]
            log_q = log_q - chart.log_abs_det_jacobian(s, increments[:1, None].expand(len(s), 1)).double()  # zero: unit scale
            mass = (p * probs[:, 1 + c]).reshape([G] * n).movedim(i, 0).reshape(G, -1)  # [G(j), rest]
            q = log_q.exp().reshape([G] + [G] * n).movedim(1 + i, 1).reshape(G, G, -1)  # [G(m), G(j), rest]
            moved = (q[shift, torch.arange(G)[None, :]] * mass[None]).sum(1) * weight  # [G(j'), rest]
            nxt = nxt + moved.reshape([G] + [G] * (n - 1)).movedim(0, i).reshape(-1)
        p = nxt
    return p
