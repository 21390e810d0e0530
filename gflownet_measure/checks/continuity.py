"""Eq. 3 and the continuity of the policies: no jump of :math:`s \\mapsto \\kappa(s, \\cdot)`, :math:`\\kappa_b(s, \\cdot)`,
:math:`P_F(s, \\cdot)` or :math:`P_B(s, \\cdot)` inside a piece of :math:`\\nu` (Lahlou et al. 2023, Definition 1 eq. 3;
Definitions 3 and 5).

Eq. 3 asks that :math:`s \\mapsto \\kappa(s, B)` be measurable for every measurable ``B``, and Definitions 3 and 5 ask
the policies' densities to vary continuously with the state. A function that code computes is measurable once it is
piecewise continuous; what numerics can see is a *jump*: a threshold inside a piece of :math:`\\nu` that the space does
not declare (a step feature in a policy's ``encode``, an atom's mass or a component switched on at ``x > 0.5``).
:func:`check_continuity` looks for jumps along short random segments, each inside one piece.

**Segments.** On each piece of :math:`\\nu` (where :math:`\\nu` is sampled, on the pieces of :math:`\\kappa(s, \\cdot)` at
states drawn from it), :data:`POINTS` equally spaced states :math:`\\varphi(u_0 + t (u_1 - u_0))`, :math:`t \\in [0, 1]`:
``u_0`` drawn as the support check draws (:func:`~.integration.draw_coordinates`), ``u_1 - u_0`` of length
:data:`SEGMENT_LENGTH` in a random direction of the active coordinates, in units of each coordinate's width
(``proposal_scale`` on the real line), both ends inside the box.

**Profiles.** At each state, the numbers whose jumps are looked for, NaN where their component is absent (so that a
component appearing or vanishing is a change of infinite size):

- of :math:`\\kappa` and :math:`\\kappa_b`: the number of (non-sink) atoms, the log of their total mass, their
  mass-weighted mean position along a fixed random direction (an atom that moves; a coordinate that a chart's
  ``period`` wraps enters as the cosine and sine of its angle, so that an angle written modulo its period does not
  jump), the sink atom's log-mass; per piece, the log of the mean :math:`|J_s(u_m)|` at :data:`NODES` fixed
  coordinates (the piece's mass up to its box's volume), the position of :math:`\\varphi_s(u_1)`, and the number of
  active coordinates;
- of :math:`P_F` and :math:`P_B`: the log-probability of the atoms, their probability-weighted mean position, the
  log-probability of the sink; per piece, its log-probability and the mean of :math:`\\log q_c(u_m \\mid s)` at the same
  fixed coordinates.

Sums over atoms make the profiles blind to the order of a kernel's atom slots.

**Rule.** Along a segment, a step :math:`\\Delta_i f = f(t_{i+1}) - f(t_i)` of a profile ``f`` is compared with what a
continuous ``f`` would do there, the mean :math:`\\bar\\Delta_i` of the steps on either side (a second difference). It is a
candidate jump where a component appears or vanishes, or where

.. math:: |\\Delta_i f - \\bar\\Delta_i| > K\\, \\mathrm{median}_{\\text{segment}} |\\Delta f - \\bar\\Delta| + \\epsilon\\, (1 + |f|),
   \\qquad K = 10 \\; (:data:`JUMP_RATIO`), \\quad \\epsilon = 10^{-3} \\; (:data:`JUMP_FLOOR`).

Its step is then bisected :data:`BISECTIONS` times, following the half whose change departs more from the slope
:math:`\\bar\\Delta_i`: across the final bracket a continuous ``f`` changes :math:`2^{-12}` times as much as across the step, a
jump as much as before. It is a jump when that departure is still at least half the candidate's and above the floor
:math:`\\epsilon (1 + |f|)`. A jump across which a level function of its kernel's
:meth:`~gflownet_measure.kernels.Kernel.boundaries` (a policy's: its own kernel's) changes sign, or is 0, is *declared*:
counted in the detail, not a failure (the quarter disc's forced exit and first disc, :mod:`gflownet_measure.environments.quarter_disc`).
Jumps are counted once per step of a segment, however many profiles jump there.

**Power.** A jump along a hyperplane through a piece is crossed by a segment with probability about
:math:`\\ell\\, \\mathbb E|\\cos|`: 1/4 on a one-coordinate piece, 0.16 on a two-coordinate one. With ``n // 4``
segments per piece (at most :data:`MAX_SEGMENTS` in all) it is missed with probability :math:`0.75^{64} = 10^{-8}` and
:math:`0.84^{64} = 10^{-5}` at ``n = 256``, 0.01 and 0.06 at ``n = 64``. The draws are seeded and leave torch's global
generator as they found it.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from ..charts import Chart
from ..densities import Policy
from ..graph import PointedGraph
from ..kernels import ImplicitAtoms, Kernel
from ..measures import Measure
from .integration import MARGIN, draw_coordinates, graph_pieces, max_states, nu_states
from .results import CONDITIONS, CheckResult

__all__ = ["POINTS", "SEGMENT_LENGTH", "JUMP_RATIO", "JUMP_FLOOR", "BISECTIONS", "NODES", "MAX_SEGMENTS", "Segments", "segments", "check_continuity"]

POINTS = 17
"""States per segment: 16 steps, whose median is the local variation a jump is measured against."""
SEGMENT_LENGTH = 0.25
"""Length of a segment in chart coordinates, in units of each coordinate's width (``proposal_scale`` on the real line)."""
JUMP_RATIO = 10.0
"""A step departing from its neighbours by more than this many median departures along its segment (plus :data:`JUMP_FLOOR`) is bisected."""
JUMP_FLOOR = 1e-3
"""Relative floor :math:`\\epsilon (1 + |f|)` under which no change is a jump: far above float32 round-off of a log-density
(1e-7 relative), far below the jumps looked for (a mass doubled: 0.69)."""
BISECTIONS = 12
"""Halvings of a candidate step: a continuous profile's change across the final bracket is :math:`2^{-12}` of the step."""
NODES = 4
"""Fixed chart coordinates per piece at which Jacobians and coordinate densities are compared."""
MAX_SEGMENTS = 512
"""Segments in all, shared among the pieces (an SDE's ``T`` time levels)."""


class Segments(NamedTuple):
    """Segments on one piece: ``chart`` anchored at ``context [S, D]``, from ``u0 [S, k]`` to ``u1 [S, k]`` (float64);
    ``where`` names the piece."""

    chart: Chart
    context: Tensor
    u0: Tensor
    u1: Tensor
    where: str

    def states(self, rows: Tensor, t: Tensor) -> Tensor:
        """:math:`\\varphi(u_0 + t (u_1 - u_0))` ``[R, D]`` on the segments ``rows [R]`` at ``t [R]``."""
        u = self.u0[rows] + t[:, None] * (self.u1[rows] - self.u0[rows])
        context = self.context[rows]
        return self.chart.forward(context, u.to(context.dtype))


def _anchored(graph: PointedGraph, n: int) -> list[tuple[Chart, Tensor, str]]:
    """``(chart, anchors [A, D], name)`` of each piece to draw segments on: the pieces of a listed :math:`\\nu`, or those of
    :math:`\\kappa` at states drawn from a sampled one."""
    dtype = graph.source.dtype
    if isinstance(graph.nu, Measure):
        pieces = [(c, p.chart, p.context[:1].to(dtype)) for c, p in enumerate(graph.nu.pieces) if bool(p.mask[0])]
        return [(chart, anchors, f"nu piece {c} ({type(chart).__name__})") for c, chart, anchors in pieces]
    s = nu_states(graph, n)
    pieces = [(c, p.chart, p.context[p.mask]) for c, p in enumerate(graph.kappa(s).pieces) if bool(p.mask.any())]
    return [(chart, anchors, f"kappa piece {c} ({type(chart).__name__}) at states drawn from nu") for c, chart, anchors in pieces]


def segments(graph: PointedGraph, n: int) -> list[Segments]:
    """``n // 4`` random segments per piece (module docstring; at most :data:`MAX_SEGMENTS` in all), drawn from torch's
    global generator; none on a piece of no active coordinate (a point)."""
    anchored = _anchored(graph, n)
    per = max(1, min(n // 4, MAX_SEGMENTS // max(1, len(anchored))))
    out = []
    for chart, anchors, where in anchored:
        box = chart.domain
        context = anchors[torch.randint(len(anchors), (per,))]
        u0 = draw_coordinates(box, per, torch.float64)
        direction = torch.randn(per, box.dim, dtype=torch.float64)
        active = chart.active(context)
        if active is not None:
            u0, direction = torch.where(active, u0, 0.0), torch.where(active, direction, 0.0)
        norm = direction.norm(dim=1, keepdim=True)
        width = torch.tensor([hi - lo if math.isfinite(hi - lo) else box.proposal_scale for lo, hi in zip(box.low, box.high)], dtype=torch.float64)
        low = torch.tensor(box.low, dtype=torch.float64) + MARGIN * width
        high = torch.tensor(box.high, dtype=torch.float64) - MARGIN * width
        u1 = torch.minimum(torch.maximum(u0 + SEGMENT_LENGTH * width * direction / norm.clamp(min=1e-300), low), high)
        keep = norm[:, 0] > 0
        if bool(keep.any()):
            out.append(Segments(chart, context[keep], u0[keep], u1[keep], where))
    return out


class _Direction(NamedTuple):
    """A fixed random direction to compare states along: weights ``linear`` of the coordinates ``flat``, and ``cos`` and
    ``sin`` of the angles :math:`2\\pi x_i / T_i` of the coordinates ``wrapped`` that a chart takes modulo ``period``."""

    flat: Tensor
    linear: Tensor
    wrapped: Tensor
    period: Tensor
    cos: Tensor
    sin: Tensor

    def along(self, x: Tensor) -> Tensor:
        """``[...]``: the position of the states ``x [..., D]`` along the direction, continuous on circles."""
        x = x.double()
        angle = 2 * math.pi * x[..., self.wrapped] / self.period
        return x[..., self.flat] @ self.linear + torch.cos(angle) @ self.cos + torch.sin(angle) @ self.sin


def _direction(graph: PointedGraph) -> _Direction:
    """A random :class:`_Direction` (torch's global generator), periodic on the slots of every chart of the graph with a ``period``."""
    period = torch.zeros(graph.state_dim, dtype=torch.float64)
    for p in graph_pieces(graph):
        wraps = getattr(p.chart, "period", None)
        if wraps is not None:
            period[list(p.chart.slots)] = float(wraps)
    wrapped, flat = (period > 0).nonzero()[:, 0], (period == 0).nonzero()[:, 0]
    linear, cos, sin = (torch.randn(len(i), dtype=torch.float64) for i in (flat, wrapped, wrapped))
    return _Direction(flat, linear, wrapped, period[wrapped], cos, sin)


class _Owner(NamedTuple):
    """What a profile is of: ``name`` (``"kappa"``, ``"P_F"``, ...), its kernel (a policy's own), the policy or ``None``,
    and the fixed coordinates ``[NODES, k]`` of each of the kernel's pieces."""

    name: str
    kernel: Kernel
    policy: Policy | None
    nodes: tuple[Tensor, ...]


def _present(v: Tensor) -> Tensor:
    """``v`` as float64 with NaN (absent) wherever it is not finite (the log of a zero mass, of an absent component)."""
    v = v.double()
    return torch.where(torch.isfinite(v), v, torch.full_like(v, math.nan))


def _mean_position(log_w: Tensor, place: Callable[[Tensor, Tensor], Tensor], r: _Direction) -> Tensor:
    """``[B]``: the mean position along ``r`` of atoms under the weights ``exp(log_w) [B, K]`` (``-inf``: none), NaN where
    no weight; ``place(rows, slots)`` gives the states ``[P, D]`` of the weighted atoms alone (a kernel of 401 atom slots
    of 2,621 numbers, the DAG x Theta space at d = 20, builds none at a terminal state)."""
    rows, slots = torch.isfinite(log_w).nonzero(as_tuple=True)
    w = torch.softmax(log_w, 1).nan_to_num(0.0)
    along = torch.zeros_like(w)
    if len(rows):
        along[rows, slots] = r.along(place(rows, slots))
    return torch.where(torch.isfinite(log_w).any(1), (w * along).sum(1), math.nan)


def _kernel_profile(measure: Measure, nodes: tuple[Tensor, ...], r: _Direction) -> tuple[list[Tensor], list[str]]:
    """The profile columns ``[B]`` of the measures :math:`\\kappa(s_b, \\cdot)` and their names (module docstring)."""
    a = measure.atoms
    real = a.mask & ~a.sink
    log_m = torch.where(real, a.log_mass.double(), -math.inf)
    sink = torch.where(a.mask & a.sink, a.log_mass.double(), -math.inf)
    log_total = _present(torch.logsumexp(log_m, 1))
    cols = [real.sum(1).double(), log_total, _mean_position(log_m, lambda rows, slots: a.x[rows, slots], r), _present(torch.logsumexp(sink, 1))]
    names = ["number of atoms", "atoms' log-mass", "atoms' position", "sink atom's log-mass"]
    B = measure.batch
    for c, p in enumerate(measure.pieces):
        rows = p.mask.nonzero()[:, 0]
        log_j, where, k = (torch.full((B,), math.nan, dtype=torch.float64) for _ in range(3))
        if len(rows):
            context = p.context[rows]
            active = p.chart.active(context)
            us = [u.to(context.dtype).expand(len(rows), -1) for u in nodes[c]]
            us = us if active is None else [torch.where(active, u, torch.zeros_like(u)) for u in us]
            js = torch.stack([p.chart.log_abs_det_jacobian(context, u).double() for u in us], 1)
            log_j[rows] = torch.logsumexp(js, 1) - math.log(len(us))
            where[rows] = r.along(p.chart.forward(context, us[0]))
            k[rows] = float(p.chart.domain.dim) if active is None else active.sum(1).double()
        label = f"piece {c} ({type(p.chart).__name__})"
        cols += [_present(log_j), where, k]
        names += [f"{label} log|J|", f"{label} position", f"{label} active coordinates"]
    return cols, names


def _policy_profile(policy: Policy, s: Tensor, nodes: tuple[Tensor, ...], r: _Direction) -> tuple[list[Tensor], list[str]]:
    """The profile columns ``[B]`` of the densities :math:`P(s_b, \\cdot)` and their names (module docstring)."""
    d = policy(s)
    a = d.measure.atoms
    K = a.count
    lp = d.log_probs.double()
    atoms = torch.where(a.mask & ~a.sink, lp[:, :K], -math.inf)
    sink = torch.where(a.mask & a.sink, lp[:, :K], -math.inf)
    implicit = isinstance(a, ImplicitAtoms)  # a fast path: build the weighted atoms' states alone

    def place(rows: Tensor, slots: Tensor) -> Tensor:
        return policy.kernel.child(s[rows], slots) if implicit else a.x[rows, slots]

    cols = [_present(torch.logsumexp(atoms, 1)), _mean_position(atoms, place, r), _present(torch.logsumexp(sink, 1))]
    names = ["log-probability of the atoms", "atoms' position", "log-probability of the sink"]
    for c, p in enumerate(d.measure.pieces):
        on = p.mask & torch.isfinite(lp[:, K + c])
        density = torch.full((len(s),), math.nan, dtype=torch.float64)
        if bool(on.any()):
            context = p.context[on]
            active = p.chart.active(context)
            q = d.coords[c](on)
            us = [u.to(context.dtype).expand(len(context), -1) for u in nodes[c]]
            us = us if active is None else [torch.where(active, u, torch.zeros_like(u)) for u in us]
            density[on] = torch.stack([q.log_prob(u).double() for u in us], 1).mean(1)
        label = f"piece {c} ({type(p.chart).__name__})"
        cols += [_present(lp[:, K + c]), _present(density)]
        names += [f"log-probability of {label}", f"{label} coordinate log-density"]
    return cols, names


def _profiles(owners: list[_Owner], x: Tensor, r: _Direction, chunk: int) -> tuple[Tensor, list[str], list[int]]:
    """``(values [B, F], names [F], owner [F])``: every owner's profile at the states ``x``, ``chunk`` states at a time."""
    parts = []
    for i in range(0, len(x), chunk):
        s = x[i : i + chunk]
        cols, names, owner = [], [], []
        for o, own in enumerate(owners):
            c, m = _kernel_profile(own.kernel(s), own.nodes, r) if own.policy is None else _policy_profile(own.policy, s, own.nodes, r)
            cols += c
            names += [f"{own.name} {name}" for name in m]
            owner += [o] * len(c)
        parts.append(torch.stack(cols, 1))
    return torch.cat(parts), names, owner


def _change(a: Tensor, b: Tensor) -> Tensor:
    """``b - a``; 0 where both are absent (NaN), infinite where one is (a component appears or vanishes)."""
    gone_a, gone_b = torch.isnan(a), torch.isnan(b)
    step = torch.where(gone_a | gone_b, math.inf, b - a)
    return torch.where(gone_a & gone_b, 0.0, step)


def _floor(a: Tensor, b: Tensor) -> Tensor:
    """:data:`JUMP_FLOOR` times ``1 + min(|a|, |b|)`` (absent values count as 0)."""
    return JUMP_FLOOR * (1 + torch.minimum(a.abs(), b.abs()).nan_to_num(0.0))


def _neighbours(step: Tensor) -> Tensor:
    """``[S, T - 1, F]``: the mean of the finite steps on either side of each step ``step [S, T - 1, F]`` (0 where none):
    what a continuous profile's step would be."""
    finite = torch.where(torch.isfinite(step), step, math.nan)
    pad = torch.full_like(finite[:, :1], math.nan)
    sides = torch.stack([torch.cat([pad, finite[:, :-1]], 1), torch.cat([finite[:, 1:], pad], 1)])
    return sides.nanmean(0).nan_to_num(0.0)


def _declared(kernel: Kernel, lo: Tensor, hi: Tensor) -> Tensor:
    """``[B]`` bool: a level function of ``kernel.boundaries`` changes sign, or is 0, between the states ``lo`` and ``hi``."""
    a, b = kernel.boundaries(lo), kernel.boundaries(hi)
    if a is None or b is None:
        return torch.zeros(len(lo), dtype=torch.bool)
    return ((torch.sign(a) != torch.sign(b)) | (a == 0) | (b == 0)).any(1)


class _Jump(NamedTuple):
    """A confirmed jump: of profile ``name`` on piece ``where``, from ``before`` to ``after`` at the state ``s`` (the final
    bracket's midpoint), on step ``step`` of segment ``segment``; ``declared`` by the kernel's boundaries."""

    where: str
    name: str
    before: float
    after: float
    s: Tensor
    segment: int
    step: int
    declared: bool


def _jumps(seg: Segments, owners: list[_Owner], r: _Direction, chunk: int) -> tuple[list[_Jump], int]:
    """The jumps on the segments ``seg`` (the rule of the module docstring) and the number of profiles compared."""
    S = len(seg.u0)
    t = torch.linspace(0, 1, POINTS, dtype=torch.float64)
    values, names, owner = _profiles(owners, seg.states(torch.arange(S).repeat_interleave(POINTS), t.repeat(S)), r, chunk)
    v = values.reshape(S, POINTS, -1)
    step = _change(v[:, :-1], v[:, 1:])  # [S, POINTS - 1, F]
    expected = _neighbours(step)
    residual = (step - expected).abs()
    floor = _floor(v[:, :-1], v[:, 1:])
    seg_i, step_i, feature = ((residual > JUMP_RATIO * residual.median(1, keepdim=True).values + floor) | torch.isinf(step)).nonzero(as_tuple=True)
    if not len(seg_i):
        return [], len(names)
    first, slope = residual[seg_i, step_i, feature], expected[seg_i, step_i, feature] * (POINTS - 1)
    lo, hi = t[step_i], t[step_i + 1]
    v_lo, v_hi = v[seg_i, step_i, feature], v[seg_i, step_i + 1, feature]
    rows = torch.arange(len(seg_i))
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        v_mid = _profiles(owners, seg.states(seg_i, mid), r, chunk)[0][rows, feature]
        left = (_change(v_lo, v_mid) - slope * (mid - lo)).abs() >= (_change(v_mid, v_hi) - slope * (hi - mid)).abs()
        lo, v_lo = torch.where(left, lo, mid), torch.where(left, v_lo, v_mid)
        hi, v_hi = torch.where(left, mid, hi), torch.where(left, v_mid, v_hi)
    final = (_change(v_lo, v_hi) - slope * (hi - lo)).abs()
    confirmed = ((final >= first / 2) & (final > _floor(v_lo, v_hi))).nonzero()[:, 0]
    x_lo, x_hi, x_mid = (
        seg.states(seg_i[confirmed], lo[confirmed]),
        seg.states(seg_i[confirmed], hi[confirmed]),
        seg.states(seg_i[confirmed], (lo + hi)[confirmed] / 2),
    )
    out = []
    for i, j in enumerate(confirmed.tolist()):
        f = int(feature[j])
        declared = bool(_declared(owners[owner[f]].kernel, x_lo[i : i + 1], x_hi[i : i + 1])[0])
        out.append(_Jump(seg.where, names[f], float(v_lo[j]), float(v_hi[j]), x_mid[i], int(seg_i[j]), int(step_i[j]), declared))
    return out, len(names)


def _owners(graph: PointedGraph, pf: Policy | None, pb: Policy | None, probe: Tensor) -> list[_Owner]:
    """The kernels and the given policies, each with :data:`NODES` fixed coordinates per piece (drawn once, from the
    pieces its kernel lists at the state ``probe [1, D]``)."""

    def nodes(kernel: Kernel) -> tuple[Tensor, ...]:
        return tuple(draw_coordinates(p.chart.domain, NODES, torch.float64) for p in kernel(probe).pieces)

    owners = [_Owner("kappa", graph.kappa, None, nodes(graph.kappa)), _Owner("kappa_b", graph.kappa_b, None, nodes(graph.kappa_b))]
    for name, policy in (("P_F", pf), ("P_B", pb)):
        if policy is not None:
            owners.append(_Owner(name, policy.kernel, policy, nodes(policy.kernel)))
    return owners


def _value(v: float) -> str:
    return "absent" if math.isnan(v) else f"{v:.4g}"


def check_continuity(graph: PointedGraph, pf: Policy | None, pb: Policy | None, n: int, seed: int = 0) -> CheckResult:
    """Eq. 3 and the policies' continuity: no undeclared jump of the profiles of :math:`\\kappa`, :math:`\\kappa_b`,
    :math:`P_F` and :math:`P_B` along random segments inside the pieces of :math:`\\nu` (module docstring: the segments, the
    profiles, the rule). The estimate counts the undeclared jumps; the detail locates the first (the profile, its two
    values, the state, the piece) or counts the declared ones. Draws from a generator seeded with ``seed``; torch's global
    one is restored afterwards."""
    name = CONDITIONS["continuity"]
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        segs = segments(graph, n)
        if not segs:
            return CheckResult(name, 0, 0, True, "nu has no piece of positive dimension: nothing to probe (on atoms every function is measurable)")
        r = _direction(graph)
        owners = _owners(graph, pf, pb, segs[0].states(torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.float64)))
        chunk = max_states(graph)
        found = [_jumps(seg, owners, r, chunk) for seg in segs]
    jumps = [j for js, _ in found for j in js]
    places = {(j.where, j.segment, j.step) for j in jumps if not j.declared}
    declared = {(j.where, j.segment, j.step) for j in jumps} - places
    total = sum(len(seg.u0) for seg in segs)
    if not places:
        at = f"; {len(declared)} jumps at boundaries the kernels declare (Kernel.boundaries)" if declared else ""
        owned = ", ".join(o.name for o in owners)
        return CheckResult(name, 0, 0, True, f"{total} segments of {POINTS} states on {len(segs)} pieces: no jump in {found[0][1]} profiles of {owned}{at}")
    j = next(j for j in jumps if not j.declared)
    s = [float(f"{v:.6g}") for v in j.s.tolist()]
    return CheckResult(
        name,
        len(places),
        0,
        False,
        f"{j.name} jumps from {_value(j.before)} to {_value(j.after)} at s={s}, inside {j.where} and on no boundary its kernel declares "
        f"({len(places)} such jumps on {len({p[:2] for p in places})} of {total} segments); a threshold inside a piece (a step in encode or "
        "in a policy's features, a mass or a component switched on)? A known boundary is declared by the kernel's `boundaries`",
    )
