"""Reference measures on a state space: atoms plus charted continuous pieces.

A (batched) reference measure is the sum

.. math:: \\mu_b = \\sum_k m_{bk}\\, \\delta_{x_{bk}} + \\sum_c (\\varphi_{c,b})_\\#\\big(|J_c|\\, du\\big)

of weighted atoms (discrete states, the sink) and continuous pieces, each the push-forward of
Lebesgue measure ``du`` on a box ``U`` through a chart ``phi`` weighted by the chart's Jacobian
(Lahlou et al. 2023, section 3: kappa(s, .), kappa_b(s', .) and nu are all of this form).
Counting measure is a sum of unit atoms, Dirac a single atom, Lebesgue on a box an identity
chart, Haar measure on a torus an angle chart: see :mod:`gflownet_measure.charts`.

A batch index ``b`` carries one measure per state (the value of a kernel at ``B`` states);
the reference measure ``nu`` of a graph is a batch of one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from .boxes import Box
from .charts import Chart
from .roundoff import ATOM_ULPS, ulps_from

__all__ = ["Box", "Atoms", "Piece", "SupportPoint", "Measure", "WeightedPoints", "counting", "dirac", "charted", "sum_measures"]


@dataclass(frozen=True)
class Atoms:
    """:math:`\\sum_k m_{bk} \\delta_{x_{bk}}`, some of which may be the sink.

    Attributes:
        x: atom states ``[B, K, D]`` (rows where ``sink`` is set are ignored).
        log_mass: :math:`\\log m_{bk}` ``[B, K]`` (0 for counting measure).
        mask: ``[B, K]`` bool, which atoms exist for state ``b``.
        sink: ``[B, K]`` bool, which atom is the sink.
    """

    x: Tensor
    log_mass: Tensor
    mask: Tensor
    sink: Tensor

    @staticmethod
    def empty(batch: int, dim: int, dtype=torch.float32, device=None) -> "Atoms":
        z = torch.zeros(batch, 0, dtype=torch.bool, device=device)
        return Atoms(torch.zeros(batch, 0, dim, dtype=dtype, device=device), torch.zeros(batch, 0, dtype=dtype, device=device), z, z)

    @property
    def count(self) -> int:
        return self.mask.shape[1]

    def take(self, k: Tensor) -> Tensor:
        """The states :math:`x_{b, k_b}` ``[B, D]`` of one named atom ``k [B]`` per measure (a new tensor)."""
        return self.x[torch.arange(len(k), device=k.device), k]

    def locate(self, x: Tensor, sink: Tensor) -> Tensor:
        """``[B]`` long: the first present atom of measure ``b`` holding ``(x_b, sink_b)``, -1 if none.

        .. math:: k_b = \\min\\{k : \\text{mask}_{bk},\\ \\text{sink}_{bk} = \\text{sink}_b,\\ (\\text{sink}_b \\lor x_{bk} = x_b)\\}

        (the sink matches by its flag alone: its state is ignored). States are equal within round-off,
        :data:`~gflownet_measure.roundoff.ATOM_ULPS` units of :func:`~gflownet_measure.roundoff.ulps_from`: a kernel
        that recomputes a state (a parent's angle by ``atan2``) still names the atom.
        """
        hit = self.mask & (self.sink == sink[:, None]) & (sink[:, None] | (ulps_from(self.x, x[:, None, :]) <= ATOM_ULPS))
        return torch.where(hit.any(1), hit.to(torch.int8).argmax(1), -1)


@dataclass(frozen=True)
class Piece:
    """:math:`(\\varphi_{s_b})_\\#(|J(s_b, u)|\\,du)`: a continuous component, present where ``mask [B]`` is set.

    ``context [B, D]`` is the state each chart is anchored at (the current state for a kernel).
    """

    chart: Chart
    context: Tensor
    mask: Tensor


class SupportPoint(NamedTuple):
    """Points of a batched measure's support, named by their component: ``comp [B]`` (atom ``k`` or piece ``K + c``;
    -1 for a point outside the support) and, per piece, the chart coordinates ``u`` of the rows on it (in row order; ``None`` if none)."""

    comp: Tensor
    u: tuple[Tensor | None, ...]


@dataclass(frozen=True)
class WeightedPoints:
    """A quadrature / Monte Carlo rule for a batched measure.

    :math:`\\int f\\, d\\mu_b \\approx \\sum_m \\exp(\\text{log\\_w}_{bm}) f(x_{bm}, \\text{sink}_{bm})`;
    Atom nodes are exact, the others come from charts (quadrature or Monte Carlo).
    Masked nodes carry weight zero through ``mask``. ``block`` (Monte Carlo draws of a
    :class:`~gflownet_measure.sampled.SampledMeasure`): nodes of one block were drawn together, blocks are i.i.d.;
    ``None``: the nodes of each piece are i.i.d.
    """

    x: Tensor  # [B, M, D]
    sink: Tensor  # [B, M]
    log_w: Tensor  # [B, M]
    mask: Tensor  # [B, M]
    component: Tensor  # [M] long: which atom (0..K-1) or piece (K..K+C-1) each node belongs to
    n_atoms: int  # K
    block: Tensor | None = None  # [M] long, 0..L-1: the block of each chart node (see above)

    @property
    def exact(self) -> Tensor:
        """``[M]`` bool: atom nodes (exact), as opposed to chart nodes."""
        return self.component < self.n_atoms


@dataclass(frozen=True)
class Measure:
    """A batch of reference measures: atoms plus continuous pieces (see module docstring)."""

    atoms: Atoms
    pieces: tuple[Piece, ...] = ()

    @property
    def batch(self) -> int:
        return self.atoms.mask.shape[0]

    @property
    def n_components(self) -> int:
        return self.atoms.count + len(self.pieces)

    def component_mask(self) -> Tensor:
        """``[B, K + C]`` bool: which atoms and pieces are present for each state."""
        return torch.cat([self.atoms.mask] + [p.mask[:, None] for p in self.pieces], 1)

    def is_zero(self) -> Tensor:
        """``[B]`` bool: the measure has no atom and no piece (e.g. kappa_b(s0, .), eq. 5)."""
        return ~self.component_mask().any(1)

    def component_of(self, x: Tensor, sink: Tensor) -> Tensor:
        """``[B]`` long: the component (atom ``k`` or piece ``K + c``) whose support holds ``x``, -1 if none.

        Atoms match by equality (and the sink flag), pieces by ``chart.contains``; the first match wins.
        """
        return self.point_of(x, sink).comp

    def point_of(self, x: Tensor, sink: Tensor) -> SupportPoint:
        """``x`` as a :class:`SupportPoint`: :meth:`component_of`, and per piece the chart coordinates ``u`` of the rows on it.

        The coordinates are those :meth:`~gflownet_measure.charts.Chart.coordinates_of` computed to test membership, so a density
        evaluated at these points (:meth:`~gflownet_measure.densities.KernelDensity.log_prob`) inverts each chart once.
        """
        hit, tested = [], []
        for p in self.pieces:
            on = p.mask & ~sink  # only these rows can lie on the piece: test them alone
            rows, u = on.nonzero()[:, 0], None
            if len(rows):
                inside, u = p.chart.coordinates_of(p.context[rows], x[rows])
                on = on.index_put((rows,), inside)
            hit.append(on[:, None])
            tested.append((rows, u))
        K, us = self.atoms.count, []
        atom = self.atoms.locate(x, sink) if K else torch.full(sink.shape, -1, dtype=torch.long, device=sink.device)
        comp = atom
        if hit:  # no atom holds x: the first piece that does
            on = torch.cat(hit, 1)
            comp = torch.where(atom >= 0, atom, torch.where(on.any(1), K + on.to(torch.int8).argmax(1), -1))
        for c, (rows, u) in enumerate(tested):
            mine = comp[rows] == K + c
            us.append(u[mine] if u is not None and bool(mine.any()) else None)
        return SupportPoint(comp, tuple(us))

    def weighted_points(self, n: int = 256, method: str = "mc", generator=None, coarse: bool = False) -> WeightedPoints:
        """Integration nodes for every measure of the batch: atoms exactly, pieces by ``Box.weighted_points``
        (Monte Carlo nodes drawn independently for each measure, quadrature nodes shared, ``coarse`` the coarse
        quadrature rule; a piece absent from every measure of the batch gets no nodes). Importance sampling from a
        policy's own moments, for the normalisation checks, is :func:`gflownet_measure.checks.normalisation.policy_nodes`.
        """
        a = self.atoms
        B, K = a.mask.shape
        xs, sinks, lws, masks = [a.x.double()], [a.sink], [a.log_mass.double()], [a.mask]
        comp = [torch.arange(K)]
        for c, p in enumerate(self.pieces):
            if not p.mask.any():  # absent from every measure of the batch: no nodes (an enumerated nu has one piece per state it anchors)
                continue
            valid = p.mask[:, None]
            active = p.chart.active(p.context)
            if active is not None:  # a piece of varying dimension: nodes on each measure's active coordinates
                u, lw, on = p.chart.domain.masked_points(n, method, active, generator=generator, coarse=coarse)
                valid = valid & on
            elif method == "mc":  # independent nodes per measure, so that errors do not correlate across an outer integral
                u1, lw1 = p.chart.domain.weighted_points(n * B, method, generator=generator)
                u, lw = u1.reshape(B, n, -1), lw1.reshape(B, n) + math.log(B)
            else:
                u1, lw1 = p.chart.domain.weighted_points(n, method, generator=generator, coarse=coarse)  # [M, k], [M]
                u, lw = u1[None].expand(B, -1, -1), lw1[None].expand(B, -1)
            M = u.shape[1]
            ctx = p.context.double()[:, None, :].expand(B, M, -1).reshape(B * M, -1)
            ub = u.reshape(B * M, -1)
            x = p.chart.forward(ctx, ub)
            lj = p.chart.log_abs_det_jacobian(ctx, ub)
            xs.append(x.reshape(B, M, -1))
            lws.append(lw + lj.reshape(B, M))
            sinks.append(torch.zeros(B, M, dtype=torch.bool))
            masks.append(valid.expand(B, M))
            comp.append(torch.full((M,), K + c))
        return WeightedPoints(torch.cat(xs, 1), torch.cat(sinks, 1), torch.cat(lws, 1), torch.cat(masks, 1), torch.cat(comp), K)


def counting(points: Tensor) -> Measure:
    """Counting measure :math:`\\sum_k \\delta_{x_k}` on a finite set ``points [K, D]`` (batch of one)."""
    K = points.shape[0]
    z = torch.zeros(1, K, dtype=torch.bool)
    return Measure(Atoms(points[None], torch.zeros(1, K, dtype=points.dtype), ~z, z))


def dirac(point: Tensor) -> Measure:
    """The Dirac measure :math:`\\delta_x` at one state ``point [D]``."""
    return counting(point[None])


def charted(chart, state_dim: int, dtype=torch.float32) -> Measure:
    """The single piece :math:`\\varphi_\\#(|J|\\,du)` of a chart anchored at the zero state (batch of one).

    With an :class:`~gflownet_measure.charts.AffineChart` of unit scale this is Lebesgue
    measure on a box (or Haar measure on a torus) written into the chart's slots.
    """
    ctx = torch.zeros(1, state_dim, dtype=dtype)
    return Measure(Atoms.empty(1, state_dim, dtype), (Piece(chart, ctx, torch.ones(1, dtype=torch.bool)),))


def sum_measures(*measures: Measure) -> Measure:
    """:math:`\\mu_1 + \\mu_2 + \\dots`: atoms concatenated, pieces collected (equal batch sizes)."""
    if len({m.batch for m in measures}) != 1:
        raise ValueError(f"sum_measures needs equal batch sizes, got {[m.batch for m in measures]}")
    a = [m.atoms for m in measures]
    atoms = Atoms(torch.cat([t.x for t in a], 1), torch.cat([t.log_mass for t in a], 1), torch.cat([t.mask for t in a], 1), torch.cat([t.sink for t in a], 1))
    return Measure(atoms, tuple(p for m in measures for p in m.pieces))
