"""Charts: the only place Jacobians are written.

A chart anchored at a state ``s`` is a bijection :math:`\\varphi_s: U \\to M_s` from a box ``U`` of
simple coordinates onto a piece ``M_s`` of the state space that carries its own reference measure
:math:`\\lambda_{M}` (Lebesgue area, arclength, Haar measure on a torus). Its log-Jacobian is taken
*relative to that measure*:

.. math:: |J_s(u)| = \\frac{d\\,(\\varphi_s^{-1})_\\# \\lambda_M}{du}(u),
   \\qquad \\lambda_M = (\\varphi_s)_\\#(|J_s|\\,du).

For an embedded chart (a curve in the plane) this is the area formula
:math:`|J| = \\sqrt{\\det(D\\varphi^\\top D\\varphi)}` over the coordinates the chart moves, which the
contract tests check against autograd. A density ``q(u)`` over coordinates becomes the density
:math:`q(u) / |J_s(u)|` w.r.t. :math:`\\lambda_M` (Lahlou et al. 2023, the change of variables that
Li et al. 2023 omitted).
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod

import torch
from torch import Tensor

from .boxes import Box
from .roundoff import ATOM_ULPS, row_max, ulps_from

__all__ = ["Chart", "AffineChart", "PolarChart", "ArcChart", "WithoutJacobian"]


@functools.lru_cache(maxsize=256)
def _constant(values: tuple[float, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """``torch.as_tensor(values)``, made once per chart constant (a scale, a box's bounds), dtype and device: a rollout
    uses its chart's constants at every step, where building them took as long as the arithmetic on them. Made outside
    inference mode, so that autograd may save it for a backward pass; shared, never written to."""
    with torch.inference_mode(False):
        return torch.as_tensor(values, dtype=dtype, device=device)


@functools.lru_cache(maxsize=None)
def _columns(slots: tuple[int, ...]) -> slice | list[int]:
    return slice(slots[0], slots[-1] + 1) if slots and slots == tuple(range(slots[0], slots[-1] + 1)) else list(slots)


class Chart(ABC):
    """:math:`\\varphi_s: U \\to M_s`, anchored at a state ``s``: a chart of your own.

    A subclass sets the attributes ``domain``, ``slots`` and ``fixed`` (``advance`` is optional) and writes three methods,
    on batches (``s [B, D]`` the anchors, ``u [B, k]`` coordinates in ``domain``, ``k = domain.dim``):

    - ``_embed(s, u)``: the ``len(slots)`` moved coordinates ``[B, len(slots)]`` of the image point, in the order of
      ``slots``;
    - ``_coords(s, y)``: its inverse, the coordinates ``u [B, k]`` of moved coordinates ``y [B, len(slots)]``;
    - ``log_abs_det_jacobian(s, u)``: ``[B]``, the log-density of the piece's reference measure w.r.t. ``du`` (module
      docstring): the area element ``sin(theta)`` of the sphere, an arc's length per unit of ``u``; not a policy's density.

    ``forward``, ``inverse``, ``contains`` and ``coordinates_of`` are built from these (``forward`` copies the anchor,
    writes ``fixed`` and ``advance``, then the slots), and so are the checks' round trips (``check_charts``). A chart
    whose piece changes dimension with the anchor also overrides :meth:`active`; a periodic coordinate is a
    ``domain`` with ``periodic=True`` (or :class:`AffineChart`'s ``period``). ``docs/tutorial.md``, 'A chart of your
    own', writes the sphere's area chart this way.

    Attributes:
        domain: the coordinate box ``U``.
        slots: the state coordinates the chart writes; all others are copied from the anchor
            state, set to ``fixed`` values (e.g. a stage flag) or advanced by a constant (a clock),
            and are checked by ``contains``.
        fixed: ``{coordinate: value}`` written into every image point.
        advance: ``{coordinate: delta}``: the image point holds the anchor's value plus ``delta``
            (the time step of an SDE state ``(x, t)``: +1 forward, -1 backward).
    """

    domain: Box
    slots: tuple[int, ...]
    fixed: dict[int, float]
    advance: dict[int, float] = {}

    @property
    def columns(self) -> slice | list[int]:
        """Index of the slot columns of a state batch: a slice (a view, no gather) when the slots are contiguous and increasing."""
        return _columns(tuple(self.slots))

    @abstractmethod
    def _embed(self, s: Tensor, u: Tensor) -> Tensor:
        """The moved coordinates ``[B, len(slots)]`` of :math:`\\varphi_s(u)`."""

    @abstractmethod
    def _coords(self, s: Tensor, y: Tensor) -> Tensor:
        """Inverse of ``_embed``: coordinates ``u [B, k]`` from the moved coordinates ``y``."""

    @abstractmethod
    def log_abs_det_jacobian(self, s: Tensor, u: Tensor) -> Tensor:
        """:math:`\\log |J_s(u)|` ``[B]`` relative to the piece's reference measure."""

    def active(self, s: Tensor) -> Tensor | None:
        """``[B, k]`` bool: the coordinates of ``U`` that are coordinates of the piece at anchor ``s``; ``None``: all of them.

        A chart whose pieces change dimension with the anchor (the parameters :math:`\\Theta_G = \\mathbb R^{|E(G)|}` of a
        graph ``G``, Deleu et al. 2023) writes them all into one box ``U`` of the largest dimension and marks the
        coordinates in use. Its piece is then :math:`(\\varphi_s)_\\#(|J_s(u)|\\, du_A)` with :math:`du_A` Lebesgue measure
        on the active coordinates :math:`A(s)` alone; the others are 0 in ``u`` (``inverse`` returns 0 there, ``forward``
        ignores them) and the log-Jacobian is relative to :math:`du_A`. A coordinate density on such a piece is a density
        w.r.t. :math:`du_A`, and a piece with no active coordinate is a unit atom (Lebesgue measure on
        :math:`\\mathbb R^0`). Integration rules draw only the active coordinates
        (:meth:`~gflownet_measure.boxes.Box.masked_points`).
        """
        return None

    def forward(self, s: Tensor, u: Tensor) -> Tensor:
        """:math:`x = \\varphi_s(u)`: ``s [B, D]``, ``u [B, k]`` -> ``x [B, D]``."""
        if self.slots == tuple(range(s.shape[1])):  # the chart moves every coordinate (fixed and advance name none)
            return self._embed(s, u).to(s.dtype)
        x = s.clone()
        for i, v in self.fixed.items():
            x[:, i] = v
        for i, v in self.advance.items():
            x[:, i] += v
        x[:, self.columns] = self._embed(s, u).to(x.dtype)
        return x

    def inverse(self, s: Tensor, x: Tensor) -> Tensor:
        """:math:`u = \\varphi_s^{-1}(x)` ``[B, k]`` (meaningful where ``contains`` holds)."""
        return self._coords(s, x[:, self.columns])

    def contains(self, s: Tensor, x: Tensor, atol: float = 1e-6) -> Tensor:
        """``[B]`` bool: ``x`` lies in the image :math:`M_s` (the coordinates copied from ``s`` agree within
        :data:`~gflownet_measure.roundoff.ATOM_ULPS` units of round-off, the ``fixed`` and ``advance`` ones exactly, ``u`` in ``U``)."""
        return self.coordinates_of(s, x, atol)[0]

    def coordinates_of(self, s: Tensor, x: Tensor, atol: float = 1e-6) -> tuple[Tensor, Tensor]:
        """``(inside [B], u [B, k])``: :meth:`contains`, and the coordinates :math:`u = \\varphi_s^{-1}(x)` it computed (meaningful where ``inside``)."""
        keep = [i for i in range(s.shape[1]) if i not in self.slots and i not in self.fixed and i not in self.advance]
        inside = torch.ones(s.shape[0], dtype=torch.bool, device=s.device)
        if keep:
            inside &= ulps_from(x[:, keep], s[:, keep]) <= ATOM_ULPS  # copied from the anchor: equal within round-off
        for i, v in self.fixed.items():
            inside &= x[:, i] == v
        for i, v in self.advance.items():
            inside &= x[:, i] == s[:, i] + v
        u = self.inverse(s, x)
        lo = _constant(tuple(self.domain.low), u.dtype, u.device) - atol
        hi = _constant(tuple(self.domain.high), u.dtype, u.device) + atol
        within = (u >= lo) & (u <= hi)
        active = self.active(s)
        inside &= (within if active is None else within | ~active).all(1)  # inactive coordinates: 0 by the contract of active
        y, anchor = x[:, self.columns], s[:, self.columns].to(x.dtype)
        inside &= self._gap(self._embed(s, u), y) <= atol * (1 + row_max(y.abs()) + row_max(anchor.abs()))  # round-off scales with both ends
        return inside, u

    def _gap(self, y: Tensor, z: Tensor) -> Tensor:
        """``[B]``: the largest distance :math:`\\max_i |y_i - z_i|` between two batches of moved coordinates."""
        return row_max((y - z).abs())


class AffineChart(Chart):
    """:math:`y = a + c \\odot u` (``c = scale``, any non-zero signs) with ``a = s[slots]`` (``relative``) or 0, wrapped modulo ``period`` if set.

    .. math:: \\varphi_s(u) = (a + c \\odot u) \\bmod T, \\qquad \\log |J| = \\sum_i \\log |c_i|

    relative to Lebesgue measure on the moved coordinates; with ``period`` :math:`T` each moved
    coordinate is an angle on a circle of circumference :math:`T` and the measure is arclength (Haar
    measure on a torus for :math:`T = 2\\pi`). Covers Lebesgue on a box (``relative=False``),
    Euler-Maruyama increments on R^n (``relative=True``, unbounded ``U``) and arcs or angle increments
    on a torus.

    ``U = domain``: any box without ``period``. With ``period``, a bounded box whose every coordinate
    has extent :math:`(h_i - l_i)\\,|c_i| \\le T` (up to a relative 1e-12 of round-off): the image of
    coordinate ``i`` is then an arc of that length, on which :math:`u_i \\mapsto (a_i + c_i u_i) \\bmod T`
    is one-to-one; an extent of exactly one period is the whole circle, whose two ends :math:`l_i` and
    :math:`h_i` are the same point. Of the preimages :math:`u_i + nT/|c_i|` of a point, ``inverse``
    returns the one within half a period :math:`T / (2|c_i|)` of the centre of :math:`[l_i, h_i]`: the
    one in ``U`` (for the whole circle, in :math:`[l_i, h_i)` up to round-off), and for a point that
    round-off put just off an arc's end, a preimage just beyond that end (which ``contains`` accepts
    within ``atol``).
    """

    def __init__(self, domain: Box, slots, scale=1.0, relative: bool = False, period: float | None = None, fixed=None, advance=None):
        self.domain, self.slots, self.relative = domain, tuple(slots), relative
        self.fixed, self.advance = dict(fixed or {}), dict(advance or {})
        k = domain.dim
        if len(self.slots) != k:
            raise ValueError(f"AffineChart writes {len(self.slots)} slots but its domain has dimension {k}")
        self.scale = tuple(float(v) for v in (scale if isinstance(scale, (tuple, list)) else [scale] * k))
        if any(v == 0 for v in self.scale):
            raise ValueError("AffineChart scale must be non-zero")
        self.period = None if period is None else float(period)
        if self.period is not None:
            self._check_one_period(self.period)
            self._span = tuple(self.period / abs(c) for c in self.scale)  # T / |c_i|: one period in coordinate units
            self._start = tuple((lo + hi - w) / 2 for lo, hi, w in zip(domain.low, domain.high, self._span))  # centre - span / 2

    def _check_one_period(self, period: float) -> None:
        """Raise unless ``period > 0`` and every coordinate's image is at most one period long (class docstring)."""
        if not period > 0:
            raise ValueError(f"AffineChart period must be positive, got {period}")
        for i, (lo, hi, c) in enumerate(zip(self.domain.low, self.domain.high, self.scale)):
            if not (hi - lo) * abs(c) <= period * (1 + 1e-12):
                raise ValueError(
                    f"AffineChart coordinate {i} maps [{lo:g}, {hi:g}] with scale {c:g} onto {(hi - lo) * abs(c):g}, more than one period {period:g}: the chart would not be one-to-one"
                )

    def _scale(self, like: Tensor) -> Tensor:
        return _constant(self.scale, like.dtype, like.device)

    def _base(self, s: Tensor) -> Tensor:
        return s[:, self.columns] if self.relative else torch.zeros_like(s[:, self.columns])

    def _embed(self, s, u):
        y = self._base(s).to(u.dtype) + self._scale(u) * u
        return torch.remainder(y, self.period) if self.period is not None else y

    def _coords(self, s, y):
        u = (y - self._base(s).to(y.dtype)) / self._scale(y)
        return self._nearest_to_domain(u) if self.period is not None else u

    def _nearest_to_domain(self, u: Tensor) -> Tensor:
        """The preimage :math:`u + nT/|c|` in :math:`[m - T/(2|c|), m + T/(2|c|))`, :math:`m` the centre of ``U`` (class docstring)."""
        start = _constant(self._start, u.dtype, u.device)
        return start + torch.remainder(u - start, _constant(self._span, u.dtype, u.device))

    def _gap(self, y, z):
        """With ``period``, the distance along the circle: :math:`\\max_i \\min(r_i, T - r_i)`, :math:`r = (y - z) \\bmod T`."""
        if self.period is None:
            return super()._gap(y, z)
        r = torch.remainder(y - z, self.period)
        return row_max(torch.minimum(r, self.period - r))

    def log_abs_det_jacobian(self, s, u):
        return self._scale(u).abs().log().sum().expand(u.shape[0])


class PolarChart(Chart):
    """Quarter disc of radius ``rho`` around the anchor, in (radius fraction, angle fraction) coordinates.

    .. math:: \\varphi_s(r, a) = s + \\rho r (\\cos\\tfrac{\\pi a}{2}, \\sin\\tfrac{\\pi a}{2}),\\quad
       \\log|J| = \\log(\\rho^2 r \\tfrac{\\pi}{2})

    relative to Lebesgue area, ``(r, a) in [0, 1]^2`` (the first step of the quarter-disc grid,
    Lahlou et al. 2023 section 4.1).
    """

    def __init__(self, rho: float, slots=(0, 1), fixed=None):
        self.rho, self.slots, self.fixed = float(rho), tuple(slots), dict(fixed or {})
        self.domain = Box((0.0, 0.0), (1.0, 1.0))

    def _embed(self, s, u):
        r, a = u[:, 0], u[:, 1] * (math.pi / 2)
        return s[:, self.columns].to(u.dtype) + self.rho * r[:, None] * torch.stack([torch.cos(a), torch.sin(a)], -1)

    def _coords(self, s, y):
        d = (y - s[:, self.columns].to(y.dtype)) / self.rho
        r = torch.linalg.vector_norm(d, dim=-1)
        a = torch.atan2(d[:, 1], d[:, 0]) / (math.pi / 2)
        return torch.stack([r, a], -1)

    def log_abs_det_jacobian(self, s, u):
        return torch.log(self.rho**2 * u[:, 0] * (math.pi / 2))


class ArcChart(Chart):
    """An arc of radius ``rho`` around the anchor, between angle fractions ``A(s)`` and ``B(s)``.

    .. math:: \\varphi_s(u) = s + \\sigma \\rho (\\cos\\theta, \\sin\\theta),\\quad
       \\theta = \\tfrac{\\pi}{2}\\big(A(s) + (B(s) - A(s))\\,u\\big),\\quad
       \\log|J| = \\log\\big(\\rho\\, \\tfrac{\\pi}{2}\\, (B(s) - A(s))\\big)

    relative to arclength, ``u in [0, 1]``. ``direction`` :math:`\\sigma = +1` gives the children of
    ``s`` (a forward move of length rho), :math:`\\sigma = -1` its parents (the backward arc); the
    continuous moves of the quarter-disc grid (Lahlou et al. 2023, section 4.1). ``bounds(s)``
    returns ``(A, B)`` ``[B]`` each; the chart is meaningful where ``B > A`` (its kernel masks the rest).
    """

    def __init__(self, rho: float, bounds, direction: int = 1, slots=(0, 1), fixed=None):
        if direction not in (1, -1):
            raise ValueError(f"ArcChart direction must be +1 (children) or -1 (parents), got {direction}")
        self.rho, self.bounds, self.direction = float(rho), bounds, direction
        self.slots, self.fixed = tuple(slots), dict(fixed or {})
        self.domain = Box((0.0,), (1.0,))

    def _embed(self, s, u):
        A, B = self.bounds(s)
        theta = (math.pi / 2) * (A + (B - A) * u[:, 0].to(s.dtype))
        return s[:, self.columns] + (self.direction * self.rho) * torch.stack([torch.cos(theta), torch.sin(theta)], -1)

    def _coords(self, s, y):
        A, B = self.bounds(s)
        d = self.direction * (y.to(s.dtype) - s[:, self.columns])
        u = (torch.atan2(d[:, 1], d[:, 0]) / (math.pi / 2) - A) / (B - A)
        # a point of the arc's image has u in [0, 1]; round-off in atan2 can push an end point out by
        # ~eps / (B - A): project it back (``contains`` still rejects points off the arc, via _embed)
        return u.clamp(0.0, 1.0)[:, None]

    def log_abs_det_jacobian(self, s, u):
        A, B = self.bounds(s)
        return torch.log(self.rho * (math.pi / 2) * (B - A)).to(u.dtype)


class WithoutJacobian(Chart):
    """``chart`` with :math:`\\log|J| := 0`: densities over coordinates passed off as densities over states.

    .. math:: \\tilde p(s, \\varphi(u)) = q(u) \\quad\\text{instead of}\\quad q(u) / |J_s(u)|

    This is the error Lahlou et al. 2023 (section 4.1) point out in Li et al. 2023. It exists to
    demonstrate that error (``jacobian=false`` in the quarter-disc experiment): a policy built on it
    does not integrate to one against the true reference kernel, which ``checks.check_graph`` reports.
    """

    def __init__(self, chart: Chart):
        self.chart = chart
        self.domain, self.slots, self.fixed, self.advance = chart.domain, chart.slots, chart.fixed, chart.advance

    def _embed(self, s, u):
        return self.chart._embed(s, u)

    def _coords(self, s, y):
        return self.chart._coords(s, y)

    def _gap(self, y, z):
        return self.chart._gap(y, z)

    def log_abs_det_jacobian(self, s, u):
        return torch.zeros(u.shape[0], dtype=u.dtype, device=u.device)
