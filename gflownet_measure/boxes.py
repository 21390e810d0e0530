"""Boxes: the coordinate domains ``U`` of charts, with Lebesgue measure ``du`` and its integration rules.

A :class:`Box` gives the nodes and weights (Monte Carlo, Gauss quadrature, the periodic trapezoidal rule) with which
:mod:`gflownet_measure.measures` integrates over a charted piece. It lives apart from the measures so that
:mod:`gflownet_measure.charts` (whose charts have a box as their domain) and the measures (whose pieces carry a chart)
import in one direction: boxes, then charts, then measures.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .gaussian import LOG_2PI

__all__ = ["HERMITE_MAX", "Box"]

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
        if k == 0:  # R^0: its one point, of weight 1 (torch.unique cannot group rows of width 0)
            return torch.zeros(B, 1, 0, dtype=dtype), torch.zeros(B, 1, dtype=dtype), torch.ones(B, 1, dtype=torch.bool)
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
