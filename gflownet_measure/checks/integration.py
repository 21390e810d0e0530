"""Integration rules of the checks: exact sums over atoms, Gauss quadrature or Monte Carlo over charted pieces.

Everything is summed in float64. How a comparison's tolerance is made:

- exact (atoms only): float64 round-off, :data:`EXACT_RTOL` relative to the integral of ``|f|``;
- Monte Carlo: :data:`Z_SCORE` estimated standard errors (:func:`integrate`), plus that round-off;
- quadrature: :data:`QUADRATURE_SAFETY` times the change of the integrals between the rule with ``n`` nodes per piece
  and the coarse rule with three quarters of its nodes per coordinate (:class:`Rule`), plus that round-off. For a
  rule that converges, the coarse rule's error bounds the fine one's; a singular integrand shows as a large change,
  hence a large tolerance, which the verdict then reports as undecided (:mod:`.results`).

``method="auto"`` (:func:`pair_method`) integrates eq. 4 by quadrature when every piece of the graph (of nu, the
terminal measure, kappa and kappa_b) has at most :data:`QUADRATURE_MAX_DIM` coordinates, none half-infinite, and by
Monte Carlo otherwise: one rule for the whole graph, because the nested integrals of eq. 4 mix the pieces, and a sum
of quadrature and Monte Carlo terms would have no clean error estimate.

Where nu or the terminal measure is a :class:`~gflownet_measure.sampled.SampledMeasure` (a support too large to
list), its integrals are always its own importance-sampling rule, drawn once per check (:func:`nodes` with a seeded
generator); ``"auto"`` then means Monte Carlo throughout. With ``method="quadrature"`` the kernels' pieces are still
integrated by quadrature, and the tolerance adds the quadrature change (on the same outer draws) to the Monte Carlo
standard errors of the outer sums.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from ..graph import PointedGraph
from ..measures import Atoms, Box, Measure, Piece, WeightedPoints
from ..sampled import SampledMeasure

__all__ = [
    "Z_SCORE",
    "EXACT_RTOL",
    "QUADRATURE_MAX_DIM",
    "QUADRATURE_SAFETY",
    "MAX_STATES",
    "STATE_BUDGET",
    "max_states",
    "METHODS",
    "Rule",
    "integrate",
    "sampled_measures",
    "exact_graph",
    "graph_pieces",
    "pair_method",
    "nodes",
    "quadrature_fits",
    "nu_states",
    "terminal_states",
    "broadcast",
    "draw_coordinates",
    "draw_on",
]

Z_SCORE = 5.0
"""Monte Carlo comparisons pass within ``Z_SCORE`` standard errors: a false failure rate of about 6e-7 per comparison
(normal approximation)."""
EXACT_RTOL = 1e-9
QUADRATURE_MAX_DIM = 3
"""Pieces of at most this many coordinates are integrated by quadrature under ``method="auto"``: a tensor rule with
``ceil(n^(1/k))`` nodes per coordinate has 16 per coordinate at ``n = 256`` in two dimensions, 7 in three, 4 in four."""
QUADRATURE_SAFETY = 2.0
"""A quadrature tolerance is twice the change from the coarse rule (three quarters of the nodes per coordinate). Where
an integrand jumps (a kernel that switches components across a piece of nu: the quarter disc's first disc) the error
does not fall monotonically with the nodes; measured there (rho 0.1 to 0.5, 8 x 8 and 16 x 16 nodes) the error of the
fine rule was at most 0.76 of the change (against half the nodes per coordinate: 0.81; one node fewer: 3.3)."""
MAX_STATES = 2048
"""States drawn from nu for the pointwise checks: a random subset beyond it (an SDE's T levels of n points each)."""
STATE_BUDGET = 2**26
"""Numbers the kernel's atoms may hold over the states of a pointwise check (256 MB in float32): where one kernel
evaluation is large (the DAG x Theta space at d = 20 has 401 atoms of 2,621 numbers per state) the checks run on
``STATE_BUDGET / (atoms x state size)`` states instead of :data:`MAX_STATES` (at least 16), and say how many."""
METHODS = ("auto", "mc", "quadrature")
MARGIN = 1e-4


def integrate(wp: WeightedPoints, values: Tensor, inner_var: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """:math:`\\int v\\, d\\mu_b \\approx \\sum_m w_{bm} v_{bm}` ``[B]`` and its Monte Carlo variance ``[B]``.

    Atom nodes are exact (they only pass on ``inner_var``, the variance of their own values); the
    ``M`` nodes of a piece are i.i.d., so the variance of their sum is the sample variance of
    ``M w v`` over ``M`` (inner noise included); where ``wp.block`` groups the chart nodes into ``L`` i.i.d. blocks
    (draws made together), the sample variance of ``L`` times the blocks' sums over ``L``. For quadrature nodes that
    variance means nothing: the callers use the coarse rule instead (module docstring).
    """
    w = torch.where(wp.mask, wp.log_w.exp(), torch.zeros_like(wp.log_w))
    terms = torch.where(wp.mask, w * values, torch.zeros_like(values))
    var = torch.zeros(terms.shape[0], dtype=terms.dtype, device=terms.device)
    if inner_var is not None:
        var = var + (w[:, wp.exact] ** 2 * inner_var[:, wp.exact]).sum(1)
    if wp.block is not None:
        drawn = ~wp.exact
        L = int(wp.block[drawn].max()) + 1 if bool(drawn.any()) else 0
        sums = terms.new_zeros(terms.shape[0], L).index_add_(1, wp.block[drawn], terms[:, drawn])
        return terms.sum(1), var + ((L * sums).var(1) / L if L > 1 else 0.0)
    for c in wp.component[~wp.exact].unique():
        nodes = wp.component == c
        M = int(nodes.sum())
        if M > 1:  # one node is exact: a piece of no active coordinate (Chart.active) is a unit atom
            var = var + (M * terms[:, nodes]).var(1) / M
    return terms.sum(1), var


def quadrature_fits(box: Box) -> bool:
    """A tensor Gauss rule suits ``box``: at most :data:`QUADRATURE_MAX_DIM` coordinates, each bounded (Gauss-Legendre)
    or the whole real line (Gauss-Hermite)."""
    whole_or_bounded = all(math.isfinite(lo) == math.isfinite(hi) for lo, hi in zip(box.low, box.high))
    return box.dim <= QUADRATURE_MAX_DIM and whole_or_bounded


def sampled_measures(graph: PointedGraph) -> tuple[SampledMeasure, ...]:
    """Those of nu and the terminal measure that are given by a sampling rule (:class:`~gflownet_measure.sampled.SampledMeasure`)."""
    return tuple(m for m in (graph.nu, graph.terminal) if isinstance(m, SampledMeasure))


def graph_pieces(graph: PointedGraph) -> tuple[Piece, ...]:
    """Every piece of nu, the terminal measure (where enumerated), kappa and kappa_b (a kernel lists all its pieces at any state, masked where absent)."""
    s0 = graph.source[None]
    listed = tuple(p for m in (graph.nu, graph.terminal) if isinstance(m, Measure) for p in m.pieces)
    return listed + graph.kappa(s0).pieces + graph.kappa_b(s0).pieces


def exact_graph(graph: PointedGraph) -> bool:
    """Eq. 4 is a finite sum: nu and the terminal measure are listed atoms, and so is every kernel."""
    return not graph_pieces(graph) and not sampled_measures(graph)


def pair_method(graph: PointedGraph, method: str) -> str:
    """The rule for eq. 4: ``method`` itself, or for ``"auto"`` quadrature when every piece of the graph fits it and no
    measure of it is sampled (module docstring)."""
    if method not in METHODS:
        raise ValueError(f"unknown integration method {method!r}; valid: {', '.join(METHODS)}")
    if method != "auto":
        return method
    fits = not sampled_measures(graph) and all(quadrature_fits(p.chart.domain) for p in graph_pieces(graph))
    return "quadrature" if fits else "mc"


class Rule(NamedTuple):
    """How the pieces are integrated: ``method`` (``"mc"`` or ``"quadrature"``) with ``n`` nodes per piece; ``coarse``: the
    quadrature rule with three quarters of the nodes per coordinate, whose change from the fine rule makes the tolerance."""

    method: str
    n: int
    coarse: bool = False


def nodes(measure: Measure | SampledMeasure, rule: Rule, generator: torch.Generator | None = None) -> WeightedPoints:
    """Integration nodes for every measure of the batch under ``rule`` (:meth:`Measure.weighted_points
    <gflownet_measure.measures.Measure.weighted_points>`: atoms exactly, the coarse quadrature rule if ``rule.coarse``);
    for a :class:`~gflownet_measure.sampled.SampledMeasure` its own ``rule.n`` draws, from ``generator``, whatever the rule."""
    if isinstance(measure, SampledMeasure):
        return measure.weighted_points(rule.n, generator)
    return measure.weighted_points(rule.n, rule.method, coarse=rule.coarse)


def draw_coordinates(box: Box, m: int, dtype) -> Tensor:
    """``m`` random chart coordinates ``[m, k]`` spread over ``box``: uniform on a bounded coordinate, kept
    :data:`MARGIN` of its width inside (the two ends of a periodic box name one point, where a round trip may
    return either end), :math:`\\mathcal N(0, \\text{proposal\\_scale}^2)` on the real line, and that Gaussian folded onto a half-line."""
    cols = []
    for lo, hi in zip(box.low, box.high):
        if math.isfinite(lo) and math.isfinite(hi):
            cols.append(lo + (hi - lo) * (MARGIN + (1 - 2 * MARGIN) * torch.rand(m, dtype=torch.float64)))
        elif math.isfinite(lo) or math.isfinite(hi):
            fold = torch.randn(m, dtype=torch.float64).abs() * box.proposal_scale
            cols.append(lo + fold if math.isfinite(lo) else hi - fold)
        else:
            cols.append(torch.randn(m, dtype=torch.float64) * box.proposal_scale)
    return torch.stack(cols, -1).to(dtype) if cols else torch.zeros(m, 0, dtype=dtype)


def draw_on(chart, context: Tensor) -> Tensor:
    """One random coordinate vector per anchor ``context [m, D]`` (:func:`draw_coordinates`), 0 on the coordinates a chart of
    varying dimension leaves inactive there (:meth:`~gflownet_measure.charts.Chart.active`)."""
    u = draw_coordinates(chart.domain, len(context), context.dtype)
    active = chart.active(context)
    return u if active is None else torch.where(active, u, torch.zeros_like(u))


def _draws(measure: Measure, n: int, dtype) -> tuple[Tensor, Tensor]:
    """The atoms ``[A, D]`` of the batch-one ``measure`` (no sink) and ``n`` random points on each of its pieces ``[P, D]``."""
    a = measure.atoms
    points = [torch.zeros(0, a.x.shape[2], dtype=dtype)]
    for p in measure.pieces:
        if bool(p.mask[0]):
            u = draw_on(p.chart, p.context[:1].expand(n, -1))
            points.append(p.chart.forward(p.context[:1].expand(n, -1), u).to(dtype))
    return a.x[0][a.mask[0] & ~a.sink[0]].to(dtype), torch.cat(points)


def _capped(atoms: Tensor, points: Tensor, cap: int) -> Tensor:
    """All ``atoms`` then random ``points``, at most ``cap`` rows: a random subset of the atoms if they alone exceed it."""
    atoms = atoms[torch.randperm(len(atoms))[:cap]] if len(atoms) > cap else atoms
    return torch.cat([atoms, points[torch.randperm(len(points))[: cap - len(atoms)]]])


def _states(measure: Measure | SampledMeasure, n: int, dtype) -> tuple[Tensor, Tensor]:
    """``(atoms, points)`` of a batch-one measure as :func:`_draws` gives them; a sampled measure's ``n`` draws of
    positive weight, without repeats, are all points."""
    if isinstance(measure, Measure):
        return _draws(measure, n, dtype)
    points = measure.states(n).to(dtype).unique(dim=0)
    return points[:0], points


def nu_states(graph: PointedGraph, n: int, dtype=None) -> Tensor:
    """``[M, D]``: :math:`s_0`, the atoms of :math:`\\nu` and ``n`` random points per piece, at most :data:`MAX_STATES` of them
    (atoms first, then a random subset of the points), in ``dtype`` (default: the graph's). A sampled :math:`\\nu`
    (:class:`~gflownet_measure.sampled.SampledMeasure`) gives the distinct states of ``n`` draws instead.

    The states the pointwise checks (eq. 1, 2, 6, 15, 16, supports, charts, encoding) run on; a graph whose :math:`\\nu` has many
    pieces (an SDE's T time levels) would otherwise ask for ``T n`` kernel integrals.
    """
    dtype = dtype or graph.source.dtype
    atoms, points = _states(graph.nu, n, dtype)
    atoms, points = atoms[~graph.is_source(atoms)], points[~graph.is_source(points)]
    return torch.cat([graph.source[None].to(dtype), _capped(atoms, points, max_states(graph) - 1)])


def max_states(graph: PointedGraph) -> int:
    """:data:`MAX_STATES`, or fewer where the kernels' atoms at that many states would exceed :data:`STATE_BUDGET` numbers."""
    s0 = graph.source[None]
    per_state = max(graph.kappa(s0).atoms.count, graph.kappa_b(s0).atoms.count, 1) * graph.state_dim
    return max(16, min(MAX_STATES, STATE_BUDGET // per_state))


def terminal_states(graph: PointedGraph, n: int) -> Tensor:
    """``[M, D]``: the atoms of the terminal measure :math:`\\kappa_b(\\bot, \\cdot)` and ``n`` random points per piece (at most
    :data:`MAX_STATES`, atoms first); the distinct states of ``n`` draws where it is sampled."""
    return _capped(*_states(graph.terminal, n, graph.source.dtype), max_states(graph))


def broadcast(measure: Measure, batch: int) -> Measure:
    """The batch-one ``measure`` (nu, the terminal measure) repeated ``batch`` times, to locate ``batch`` points in it."""
    a = measure.atoms
    atoms = Atoms(a.x.expand(batch, -1, -1), a.log_mass.expand(batch, -1), a.mask.expand(batch, -1), a.sink.expand(batch, -1))
    return Measure(atoms, tuple(Piece(p.chart, p.context.expand(batch, -1), p.mask.expand(batch)) for p in measure.pieces))
