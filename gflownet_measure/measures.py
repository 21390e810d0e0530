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

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from torch import Tensor

from .gaussian import LOG_2PI

if TYPE_CHECKING:  # for the annotation only: charts imports this module
    from .charts import Chart

__all__ = ["HERMITE_MAX", "Box", "Atoms", "Piece", "SupportPoint", "Measure", "WeightedPoints", "counting", "dirac", "charted", "sum_measures"]


HERMITE_MAX = 200
"""Most Gauss-Hermite nodes per unbounded coordinate. numpy's ``hermgauss`` divides by zero from about 300 nodes on
(``check dag-params --samples 512`` asked for 512 on a one-edge weight space), and 200 nodes already integrate
Gaussian-enveloped integrands to float64 round-off (``cos(u) e^{-u^2/2}``: relative error 1e-16). A coarse rule takes
three quarters of the capped count, so a fine and a coarse rule still differ."""


@functools.lru_cache(maxsize=64)
def _gauss_rule(kind: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre (on [-1, 1]) or Gauss-Hermite (weight e^{-x^2}) nodes and weights, computed once per ``n``."""
    rule = np.polynomial.legendre.leggauss if kind == "legendre" else np.polynomial.hermite.hermgauss
    return rule(n)


@dataclass(frozen=True)
class Box:
    """The coordinate domain ``U = prod_i [low_i, high_i]`` of a chart, with Lebesgue measure ``du``.

    Bounds may be infinite (``R^k``); Monte Carlo integration and the reference proposal
    (:class:`~gflownet_measure.densities.ReferenceCoordinates`: exploration, the uniform policy) then draw from a Gaussian
    of scale ``proposal_scale``, integration weighting by its inverse density. ``periodic``: every coordinate is one period of a
    circle (the box of a periodic chart, :class:`~gflownet_measure.charts.AffineChart` with ``period``), whose two
    ends are one point; quadrature then uses the periodic trapezoidal rule, exact for trigonometric polynomials of
    degree below the node count and spectrally accurate for smooth periodic integrands, where Gauss-Legendre is not.
    ``proposal_concentration`` :math:`\\kappa > 0` (periodic boxes only) makes the reference proposal a von Mises law
    :math:`\\mathrm{vM}(0, \\kappa)` of each coordinate's angle about the box's midpoint instead of uniform (the "random"
    action of the continuous torus's public code, Lahlou et al. 2023, docs/torus.md); Monte Carlo integration stays uniform.
    """

    low: tuple[float, ...]
    high: tuple[float, ...]
    proposal_scale: float = 3.0
    periodic: bool = False
    proposal_concentration: float = 0.0

    def __post_init__(self):
        if len(self.low) != len(self.high):
            raise ValueError(f"Box bounds differ in length: {len(self.low)} vs {len(self.high)}")
        if any(not lo < hi for lo, hi in zip(self.low, self.high)):
            raise ValueError(f"Box needs low < high in every coordinate, got {self.low}, {self.high}")
        if self.periodic and not self.bounded:
            raise ValueError(f"a periodic Box needs finite bounds (one period per coordinate), got {self.low}, {self.high}")
        if not self.proposal_concentration >= 0 or (self.proposal_concentration > 0 and not self.periodic):
            raise ValueError(f"proposal_concentration={self.proposal_concentration!r} must be >= 0, and > 0 only on a periodic Box")

    @property
    def dim(self) -> int:
        return len(self.low)

    @property
    def bounded(self) -> bool:
        return all(math.isfinite(v) for v in self.low + self.high)

    def weighted_points(self, n: int, method: str, dtype=torch.float64, generator=None, coarse: bool = False):
        """Nodes ``u [M, k]`` and log-weights ``[M]`` with :math:`\\sum_m w_m f(u_m) \\approx \\int_U f\\,du`.

        ``method="mc"``: uniform draws (Gaussian draws on infinite coordinates), unbiased, ``M = n``.
        ``method="quadrature"``: tensor-product Gauss-Legendre on bounded coordinates (the trapezoidal rule at
        :math:`l + (h - l)(j + 1/2)/m` on a ``periodic`` box) and Gauss-Hermite for the weight
        :math:`e^{-u^2/2}` on the real line, with ``m = ceil(n ** (1/k))`` nodes per coordinate (at most
        :data:`HERMITE_MAX` on the real line); exact for polynomials. ``coarse``: ``floor(3 m / 4)`` nodes per
        coordinate instead, a second rule whose change from the first estimates its error (the theory checks' tolerance).
        """
        if method == "quadrature":
            fine = max(2, math.ceil(n ** (1.0 / self.dim)))
            nodes, logw = [], []
            for lo, hi in zip(self.low, self.high):
                bounded = math.isfinite(lo) and math.isfinite(hi)
                per = fine if bounded else min(fine, HERMITE_MAX)
                per = max(1, 3 * per // 4) if coarse else per
                if self.periodic:
                    nodes.append(lo + (hi - lo) * (np.arange(per) + 0.5) / per)
                    logw.append(np.full(per, math.log((hi - lo) / per)))
                elif bounded:
                    x, w = _gauss_rule("legendre", per)
                    nodes.append(lo + (hi - lo) * (x + 1) / 2)
                    logw.append(np.log(w * (hi - lo) / 2))
                elif not math.isfinite(lo) and not math.isfinite(hi):
                    x, w = _gauss_rule("hermite", per)  # int f(u) du = sqrt 2 int e^{-y^2} [f(sqrt 2 y) e^{y^2}] dy
                    nodes.append(math.sqrt(2) * x)
                    logw.append(np.log(math.sqrt(2) * w) + x**2)
                else:
                    raise ValueError("quadrature on a half-infinite coordinate is not supported; use method='mc'")
            grids = np.meshgrid(*nodes, indexing="ij")
            wgrids = np.meshgrid(*logw, indexing="ij")
            u = torch.tensor(np.stack([g.ravel() for g in grids], -1), dtype=dtype)
            lw = torch.tensor(sum(g.ravel() for g in wgrids), dtype=dtype)
            return u, lw
        if method != "mc":
            raise ValueError(f"unknown integration method {method!r}; valid: 'mc', 'quadrature'")
        cols, col_lws = self._mc_columns(n, dtype, generator)
        lw = torch.zeros(n, dtype=dtype)
        for c in col_lws:
            lw = lw + c
        return torch.stack(cols, -1), lw - math.log(n)

    def _mc_columns(self, n: int, dtype, generator) -> tuple[list[Tensor], list[Tensor]]:
        """``n`` Monte Carlo draws per coordinate and their log-weights :math:`-\\log q_i(u_i)`: uniform on a bounded
        coordinate, :math:`\\mathcal N(0, \\text{proposal\\_scale}^2)` on the real line."""
        cols, lws = [], []
        for lo, hi in zip(self.low, self.high):
            if math.isfinite(lo) and math.isfinite(hi):
                cols.append(lo + (hi - lo) * torch.rand(n, dtype=dtype, generator=generator))
                lws.append(torch.full((n,), math.log(hi - lo), dtype=dtype))
            elif not math.isfinite(lo) and not math.isfinite(hi):
                z = torch.randn(n, dtype=dtype, generator=generator) * self.proposal_scale
                cols.append(z)
                lws.append(0.5 * (z / self.proposal_scale) ** 2 + math.log(self.proposal_scale) + 0.5 * LOG_2PI)
            else:
                raise ValueError("Monte Carlo on a half-infinite coordinate is not supported")
        return cols, lws

    def masked_points(self, n: int, method: str, active: Tensor, dtype=torch.float64, generator=None, coarse: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`weighted_points` for ``B`` measures that integrate over their own active coordinates ``active [B, k]`` only
        (a chart with :meth:`~gflownet_measure.charts.Chart.active`): nodes ``u [B, M, k]`` (0 on inactive coordinates),
        log-weights ``[B, M]`` and ``valid [B, M]`` (padding where a measure has fewer nodes than ``M``), with

        .. math:: \\sum_m w_{bm} f(u_{bm}) \\approx \\int f(u)\\, du_{A_b}, \\qquad A_b = \\{i : \\text{active}_{bi}\\}.

        ``"mc"``: ``n`` independent draws per measure, the inactive coordinates' proposal weights left out. ``"quadrature"``:
        the tensor rule of :meth:`weighted_points` on the sub-box of each distinct active set (one node of weight 1 for an
        empty set: Lebesgue measure on :math:`\\mathbb R^0` is a unit atom).
        """
        B, k = active.shape
        if method == "mc":
            cols, col_lws = self._mc_columns(n * B, dtype, generator)
            on = active.reshape(B, 1, k).expand(B, n, k).reshape(B * n, k)
            u = torch.stack(cols, -1) * on if cols else torch.zeros(B * n, 0, dtype=dtype)
            lw = torch.zeros(B * n, dtype=dtype)
            for i, c in enumerate(col_lws):
                lw = lw + torch.where(on[:, i], c, torch.zeros_like(c))
            return u.reshape(B, n, k), lw.reshape(B, n) - math.log(n), torch.ones(B, n, dtype=torch.bool)
        if method != "quadrature":
            raise ValueError(f"unknown integration method {method!r}; valid: 'mc', 'quadrature'")
        patterns, which = torch.unique(active, dim=0, return_inverse=True)
        rules = []
        for pattern in patterns:
            idx = pattern.nonzero()[:, 0].tolist()
            if not idx:
                rules.append((torch.zeros(1, k, dtype=dtype), torch.zeros(1, dtype=dtype)))
                continue
            sub = Box(tuple(self.low[i] for i in idx), tuple(self.high[i] for i in idx), self.proposal_scale, self.periodic, self.proposal_concentration)
            v, lw = sub.weighted_points(n, "quadrature", dtype, coarse=coarse)
            u = torch.zeros(len(v), k, dtype=dtype)
            u[:, idx] = v
            rules.append((u, lw))
        M = max(len(lw) for _, lw in rules)
        u = torch.zeros(len(rules), M, k, dtype=dtype)
        lw = torch.zeros(len(rules), M, dtype=dtype)
        valid = torch.zeros(len(rules), M, dtype=torch.bool)
        for r, (ur, lwr) in enumerate(rules):
            u[r, : len(lwr)], lw[r, : len(lwr)], valid[r, : len(lwr)] = ur, lwr, True
        return u[which], lw[which], valid[which]


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

        (the sink matches by its flag alone: its state is ignored).
        """
        hit = self.mask & (self.sink == sink[:, None]) & (sink[:, None] | (self.x == x[:, None, :]).all(-1))
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
    Masked nodes carry weight zero through ``mask``.
    """

    x: Tensor  # [B, M, D]
    sink: Tensor  # [B, M]
    log_w: Tensor  # [B, M]
    mask: Tensor  # [B, M]
    component: Tensor  # [M] long: which atom (0..K-1) or piece (K..K+C-1) each node belongs to
    n_atoms: int  # K

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
