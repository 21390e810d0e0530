"""Supports and charts: the exact, pointwise side of eq. 4 (Lahlou et al. 2023, Definition 1).

Eq. 4, :math:`\\nu \\otimes \\kappa = \\mathrm{swap}(\\nu \\otimes \\kappa_b)`, says in particular that the two measures
charge the same pairs: a move :math:`s \\to s'` that :math:`\\kappa(s, \\cdot)` allows has :math:`s` in the support of
:math:`\\kappa_b(s', \\cdot)`, the reverse holds for backward moves, both ends lie in the support of :math:`\\nu`, and a
state may stop (the sink atom of :math:`\\kappa(s, \\cdot)`) exactly when it lies in the terminal measure
:math:`\\kappa_b(\\bot, \\cdot)`. :func:`check_support` tests this on every atom and on random points of every piece at
states drawn from :math:`\\nu`; a violation is a training crash later ("transitions lie outside the reference kernel's
support"), and these messages say which kernel, component and states. :func:`check_charts` tests that every chart
inverts itself, on which :meth:`~gflownet_measure.measures.Measure.point_of` (and so both checks) relies.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from ..exact import index_of
from ..graph import PointedGraph
from ..kernels import Kernel
from ..measures import Atoms, Measure
from ..roundoff import ATOM_ULPS, ROUNDOFF_ULPS, row_max, ulps_from
from ..sampled import SampledMeasure
from .integration import STATE_BUDGET, broadcast, draw_on, nu_states, terminal_states
from .results import CONDITIONS, CheckResult

__all__ = [
    "MOVES_PER_PIECE",
    "MOVES_PER_KIND",
    "MOVE_BUDGET",
    "Moves",
    "moves",
    "moves_per_state",
    "state_kinds",
    "component_name",
    "check_support",
    "check_charts",
]

MOVES_PER_PIECE = 4
"""Random coordinates drawn at least on each piece present at a state (every atom is tested): with up to 2048 states, a piece
whose reverse misses a fraction ``p`` of it shows ``8192 p`` failures on average (a circle's backward arc without
``period`` misses about half). The chart row draws this many; the support row at least this many, and more where a
kind of state is rare (:data:`MOVES_PER_KIND`)."""

MOVES_PER_KIND = 256
"""Random moves the support row draws on each kernel piece from each *kind* of state (:func:`state_kinds`: :math:`s_0`,
each atom of :math:`\\nu`, the states drawn from each piece of :math:`\\nu`), however few states of that kind were drawn.

Without it a kind met once (:math:`s_0`, an atom ``(k, #)`` of a hybrid space) had :data:`MOVES_PER_PIECE` = 4 moves per
piece: a move from :math:`s_0` that overshoots :math:`\\nu` on a fraction ``p`` of its range went unseen with probability
:math:`(1 - p)^4` (0.32 for a radius 4/3 too long, ``p = 1/4``; 0.82 for 5% too long, ``p = 1/21``; issue 64). With
:math:`m = 256` draws per kind the miss probability is :math:`(1 - p)^{256}`: 2.0e-6 at ``p = 0.05``, 3.8e-6 at
``p = 1/21``, 0.076 at ``p = 0.01``. The draws are uniform on a bounded chart box (:func:`~.integration.draw_on`), so
``p`` is the fraction of the chart's coordinates whose move leaves :math:`\\nu`."""

MOVE_BUDGET = 2**14
"""Moves per kernel piece above :data:`MOVES_PER_PIECE` per state that :data:`MOVES_PER_KIND` may add: up to 64 kinds
with the piece get 256 moves each; beyond (many atoms of :math:`\\nu` with a continuous move, e.g. DAGs with parameters)
each of ``G`` kinds gets ``MOVE_BUDGET / G`` (at least :data:`MOVES_PER_PIECE` per state), so that the row costs at
most ``16384 + 4 B`` reverse-kernel memberships per piece. There a systematic overshoot, met at every kind, is still
seen with probability :math:`1 - (1 - p)^{16384}`; one confined to a single atom with :math:`1 - (1 - p)^{16384 / G}`."""


class Moves(NamedTuple):
    """Moves :math:`s \\to x` that a kernel allows: ``origin [M]`` (rows of the states), ``x [M, D]``, ``sink [M]`` and
    ``component [M]`` (atom ``k`` or piece ``K + c`` of the kernel's measure)."""

    origin: Tensor
    x: Tensor
    sink: Tensor
    component: Tensor


def moves_per_state(kind: Tensor, floor: int = MOVES_PER_PIECE, per_kind: int = MOVES_PER_KIND, budget: int = MOVE_BUDGET) -> Tensor:
    """``[R]`` long: how many random moves to draw at each of ``R`` states of kinds ``kind [R]`` (any labels) on one piece.

    A kind met at :math:`n_g` of the states gets :math:`\\lceil m / n_g \\rceil` moves at each, at least ``floor``, so
    :math:`m = \\min(\\text{per\\_kind}, \\lfloor \\text{budget} / G \\rfloor)` or more in all for each of the ``G`` kinds
    (:data:`MOVES_PER_KIND`, :data:`MOVE_BUDGET`)."""
    if not len(kind):
        return torch.zeros(0, dtype=torch.long)
    _, inverse, counts = kind.unique(return_inverse=True, return_counts=True)
    share = max(1, min(per_kind, budget // len(counts)))
    return ((share + counts - 1) // counts).clamp(min=floor)[inverse]


def moves(measure: Measure, per_piece: int = MOVES_PER_PIECE, kind: Tensor | None = None) -> Moves:
    """Every present atom of ``measure`` (a kernel at ``B`` states) and ``per_piece`` random points (:func:`~.integration.draw_on`) on each present piece;
    given the kinds ``kind [B]`` of the states (:func:`state_kinds`), at least :data:`MOVES_PER_KIND` points per piece
    from each kind (:func:`moves_per_state`, ``per_piece`` the least at a state)."""
    a = measure.atoms
    rows, k = a.mask.nonzero(as_tuple=True)
    origin, xs, sinks, comps = [rows], [a.x[rows, k]], [a.sink[rows, k]], [k]
    for c, p in enumerate(measure.pieces):
        present = p.mask.nonzero()[:, 0]
        count = per_piece if kind is None else moves_per_state(kind[present.cpu()], per_piece).to(present.device)
        on = present.repeat_interleave(count)
        u = draw_on(p.chart, p.context[on])
        origin.append(on)
        xs.append(p.chart.forward(p.context[on], u).to(a.x.dtype))
        sinks.append(torch.zeros(len(on), dtype=torch.bool))
        comps.append(torch.full((len(on),), a.count + c))
    return Moves(torch.cat(origin), torch.cat(xs), torch.cat(sinks), torch.cat(comps))


def component_name(measure: Measure, comp: int) -> str:
    """``"atom k"`` or ``"piece c (ChartClass)"`` for component ``comp`` of ``measure``."""
    K = measure.atoms.count
    return f"atom {comp}" if comp < K else f"piece {comp - K} ({type(measure.pieces[comp - K].chart).__name__})"


def _holds(measure: Measure, x: Tensor) -> Tensor:
    """``[B]`` bool: the state ``x [B, D]`` (not the sink) lies in the support of ``measure`` (batch ``B``)."""
    return measure.point_of(x, torch.zeros(len(x), dtype=torch.bool)).comp >= 0


WRITTEN_ATOL = 1e-6  # relative; the tolerance of ``Chart.contains``


def _ulps_to_atoms(measure: Measure, row: int, x: Tensor) -> float:
    """How far the state ``x [D]`` lies from the nearest atom (not the sink) of measure ``row`` of ``measure``, in units of
    :func:`~gflownet_measure.roundoff.ulps_from`; infinite where it has none."""
    a = measure.atoms
    keep = a.mask[row] & ~a.sink[row]
    return float(ulps_from(a.x[row][keep], x).min()) if bool(keep.any()) else math.inf


def _in_nu(graph: PointedGraph, x: Tensor) -> tuple[Tensor, Tensor]:
    """``(held [B], written [B])``: ``x`` lies in the support of :math:`\\nu` (atoms within round-off, pieces by their
    charts), and is written as :math:`\\nu`'s chart writes that point (``forward(inverse(x)) = x``; an angle of a
    periodic piece taken modulo its period: ``contains`` accepts any representative, the reward and the policies see this one).
    Atoms match within :data:`~gflownet_measure.roundoff.ATOM_ULPS` units of round-off (:func:`~gflownet_measure.exact.index_of`).
    A sampled :math:`\\nu` has no chart to write with: ``held`` is its ``contains``, and ``written`` the same."""
    if isinstance(graph.nu, SampledMeasure):
        held = graph.nu.contains(x).bool()
        return held, held
    a = graph.nu.atoms
    atoms = a.x[0][a.mask[0] & ~a.sink[0]]
    held = index_of(atoms, x) >= 0 if len(atoms) else torch.zeros(len(x), dtype=torch.bool)
    written = held.clone()
    if graph.nu.pieces:
        pieces = broadcast(Measure(Atoms.empty(1, x.shape[1], a.x.dtype), graph.nu.pieces), len(x))
        y = x.to(graph.source.dtype)
        point = pieces.point_of(y, torch.zeros(len(x), dtype=torch.bool))
        held |= point.comp >= 0
        for c, p in enumerate(pieces.pieces):
            rows, u = (point.comp == c).nonzero()[:, 0], point.u[c]
            if u is not None:  # the coordinates of the rows on piece c, None where no row is
                z = p.chart.forward(p.context[rows], u).to(y.dtype)
                written[rows] = ((z - y[rows]).abs() <= WRITTEN_ATOL * (1 + y[rows].abs())).all(1)
    return held, written


def state_kinds(graph: PointedGraph, s: Tensor) -> Tensor:
    """``[B]`` long: the kind of each state ``s [B, D]`` for the support row's draws (:data:`MOVES_PER_KIND`).

    0 for :math:`s_0`; ``1 + a`` for atom ``a`` of :math:`\\nu` (each a kind of its own: an inner atom ``(k, #)``, a
    state next to the sink); ``1 + A + c`` for the states on piece ``c`` of :math:`\\nu` (``A`` atoms), -1 for those
    in none. A sampled :math:`\\nu` (:class:`~gflownet_measure.sampled.SampledMeasure`) has no components to tell apart:
    its states other than :math:`s_0` are one kind, -1."""
    kind = torch.full((len(s),), -1, dtype=torch.long)
    if isinstance(graph.nu, Measure) and len(s):
        a = graph.nu.atoms
        atoms = a.x[0][a.mask[0] & ~a.sink[0]]
        if len(atoms):
            at = index_of(atoms, s).cpu()
            kind = torch.where(at >= 0, 1 + at, kind)
        if graph.nu.pieces:
            rest = (kind < 0).nonzero()[:, 0]
            pieces = broadcast(Measure(Atoms.empty(1, s.shape[1], a.x.dtype), graph.nu.pieces), len(rest))
            comp = pieces.point_of(s[rest].to(graph.source.dtype), torch.zeros(len(rest), dtype=torch.bool)).comp.cpu()
            kind[rest] = torch.where(comp >= 0, 1 + len(atoms) + comp, -1)
    return torch.where(graph.is_source(s).cpu(), 0, kind)


class _Finding(NamedTuple):
    """One kind of violation: how many of how many moves, and a message locating the first."""

    bad: int
    total: int
    message: str


def _first_violation(ok: Tensor, say: Callable[[int, int, int], str]) -> _Finding:
    """A finding over the moves or states ``ok [M]``: how many fail, of how many, and ``say(index of the first failing one, failures, total)``."""
    bad = ~ok
    if not bad.any():
        return _Finding(0, len(ok), "")
    return _Finding(int(bad.sum()), len(ok), say(int(bad.nonzero()[0]), int(bad.sum()), len(ok)))


_HINT_ATOM = "a shifted, rounded or missing atom on one side?"
_HINT_PIECE = "the {side} piece at this state has no matching {other} component: a missing `period` on a circle, a wrong arc length or a shifted atom?"
_HINT_ROUNDOFF = (
    "round-off: {s} differs from the nearest atom of {rk}({x}, .) by {ulps:.0f} ulps, and atoms match within {tol:g}; "
    "compute that atom exactly as {k} writes the state (copy the coordinate rather than recompute it, e.g. with atan2), "
    "or round both kernels' states the same way"
)


def _reversible(graph: PointedGraph, s: Tensor, kernel: Kernel, reverse: Kernel, forward: bool, kind: Tensor | None = None) -> list[_Finding]:
    """Moves of ``kernel`` at states ``s`` (not into the sink), at least :data:`MOVES_PER_KIND` per piece from each
    ``kind`` of state: their origin lies in the support of ``reverse`` at their target, and their target in the support of :math:`\\nu`."""
    measure = kernel(s)
    mv = moves(measure, kind=kind)
    keep = ~mv.sink
    origin, x, comp = mv.origin[keep], mv.x[keep], mv.component[keep]
    o = s[origin]
    # the reverse kernel at every move, in chunks of at most STATE_BUDGET numbers (at d = 20, 20,000 moves of 191 atoms: 12 GB at once)
    chunk = max(1, STATE_BUDGET // max(1, reverse(x[:1]).atoms.count * x.shape[1])) if len(x) else 1
    back = torch.cat([torch.ones(0, dtype=torch.bool)] + [_holds(reverse(x[i : i + chunk]), o[i : i + chunk]) for i in range(0, len(x), chunk)])
    held, written = _in_nu(graph, x) if len(x) else (torch.ones(0, dtype=torch.bool),) * 2
    k, rk = ("kappa", "kappa_b") if forward else ("kappa_b", "kappa")
    side, other = ("forward", "backward") if forward else ("backward", "forward")
    s_, x_ = ("s", "s'") if forward else ("s'", "s")

    def where(i: int) -> str:
        return f"{k}({s_}, .) {component_name(measure, int(comp[i]))} moves {s_}={o[i].tolist()} to {x_}={x[i].tolist()}"

    def not_reversible(i: int, bad: int, total: int) -> str:
        ulps = _ulps_to_atoms(reverse(x[i : i + 1]), 0, o[i])
        if ulps <= ROUNDOFF_ULPS:
            hint = _HINT_ROUNDOFF.format(s=s_, rk=rk, x=x_, ulps=ulps, tol=ATOM_ULPS, k=k)
        else:
            hint = _HINT_ATOM if int(comp[i]) < measure.atoms.count else _HINT_PIECE.format(side=side, other=other)
        return f"{side} move not reversible: {where(i)}, but {s_} is not in the support of {rk}({x_}, .) ({bad} of {total} {side} moves); {hint}"

    def not_in_nu(i: int, bad: int, total: int) -> str:
        if not held[i]:
            rejects = f"nu ({graph.nu.label}).contains rejects" if isinstance(graph.nu, SampledMeasure) else "no component of nu holds"
            return f"{side} move leaves the support of nu: {where(i)}, which {rejects} ({bad} of {total} {side} moves); a step off the state space or a piece missing from nu?"
        return (
            f"{side} move leaves nu's coordinates: {where(i)}, a point of nu that nu's chart writes otherwise ({bad} of {total} {side} moves); "
            "an angle left unwrapped (a chart without `period`)? The reward, the policies and the test functions of eq. 4 see the raw coordinates"
        )

    return [_first_violation(back, not_reversible), _first_violation(held & written, not_in_nu)]


def _in_terminal(graph: PointedGraph, x: Tensor) -> Tensor:
    """``[B]`` bool: the states ``x`` lie in the support of the terminal measure (its ``contains`` where it is sampled)."""
    if not len(x):
        return torch.ones(0, dtype=torch.bool)
    if isinstance(graph.terminal, SampledMeasure):
        return graph.terminal.contains(x).bool()
    return _holds(broadcast(graph.terminal, len(x)), x)


def _sink_moves(graph: PointedGraph, s: Tensor, terminal: Tensor) -> list[_Finding]:
    """The sink pairs of eq. 4: :math:`\\kappa(s, \\{\\bot\\}) > 0` exactly where :math:`s` lies in :math:`\\kappa_b(\\bot, \\cdot)` (``graph.terminal``)."""
    a = graph.kappa(s).atoms
    stops = (a.mask & a.sink).any(1)
    x = s[stops]
    held = _in_terminal(graph, x)
    b = graph.kappa(terminal).atoms
    can_stop = (b.mask & b.sink).any(1)
    return [
        _first_violation(
            held,
            lambda i, k, m: (
                f"kappa(s, .) has the sink atom at s={x[i].tolist()}, but s is not in the support of graph.terminal = kappa_b(sink, .) "
                f"({k} of {m} stopping states); the terminal measure must be nu restricted to the states that may stop (eq. 4 at the sink)"
            ),
        ),
        _first_violation(
            can_stop,
            lambda i, k, m: (
                f"graph.terminal = kappa_b(sink, .) holds s={terminal[i].tolist()}, but kappa(s, .) has no sink atom there "
                f"({k} of {m} terminal states); a terminal state must be able to stop (eq. 4 at the sink)"
            ),
        ),
    ]


def check_support(graph: PointedGraph, n: int) -> CheckResult:
    """eq. 4 on supports: :math:`\\kappa` and :math:`\\kappa_b` are each other's reverse, exactly on atoms and at random points of pieces.

    At states :math:`s` drawn from :math:`\\nu` (and :math:`s_0`): every move :math:`s \\to s'` of :math:`\\kappa(s, \\cdot)`
    has :math:`s \\in \\mathrm{supp}\\, \\kappa_b(s', \\cdot)` and :math:`s' \\in \\mathrm{supp}\\, \\nu`; every move
    :math:`s' \\to s` of :math:`\\kappa_b(s', \\cdot)` has :math:`s' \\in \\mathrm{supp}\\, \\kappa(s, \\cdot)` and
    :math:`s \\in \\mathrm{supp}\\, \\nu`; a state with the sink atom lies in ``graph.terminal``, and every state drawn
    from ``graph.terminal`` has the sink atom. The estimate counts the violations; the detail locates the first. Where
    :math:`\\nu` or the terminal measure is a :class:`~gflownet_measure.sampled.SampledMeasure`, states are drawn by its
    rule and membership is its ``contains``.

    Moves: every atom, and on each piece of a kernel at least :data:`MOVES_PER_PIECE` = 4 random points per state and
    :math:`m` = :data:`MOVES_PER_KIND` = 256 per kind of state (:func:`state_kinds`: :math:`s_0`, each atom of
    :math:`\\nu`, the states of each piece of :math:`\\nu`), forward and backward alike. A piece whose moves leave
    :math:`\\nu` (or have no reverse) on a fraction :math:`p` of its chart box, at the states of one kind, passes with
    probability at most :math:`(1 - p)^{256}`: 2.0e-6 for :math:`p = 0.05`, where 4 draws at :math:`s_0` missed it with
    probability 0.81. Beyond 64 kinds with a piece the extra draws share :data:`MOVE_BUDGET`.
    """
    s = nu_states(graph, n)
    kind = state_kinds(graph, s)
    findings = _reversible(graph, s, graph.kappa, graph.kappa_b, True, kind)
    has_parent = ~graph.kappa_b(s).is_zero()
    findings += _reversible(graph, s[has_parent], graph.kappa_b, graph.kappa, False, kind[has_parent.cpu()])
    findings += _sink_moves(graph, s, terminal_states(graph, n))
    bad = sum(f.bad for f in findings)
    fw, bw, stop, term = (findings[i].total for i in (0, 2, 4, 5))
    detail = next(
        (f.message for f in findings if f.bad),
        f"{fw} forward and {bw} backward moves reversible and within nu; {stop} stopping and {term} terminal states agree",
    )
    return CheckResult(CONDITIONS["support"], bad, 0, bad == 0, detail)


ROUND_TRIP_POWER = 0.5
"""A round trip is compared within ``eps ** 0.5`` of the states' dtype, relative to ``1 + |u|``: half the digits (3e-4 in
float32, 1.5e-8 in float64), far above the round-off of a chart that divides by a small scale, far below any wrong inverse."""


def _round_trip(label: str, measure: Measure, per_piece: int) -> tuple[int, int, str]:
    """``(bad, total, message)`` of ``per_piece`` chart round trips on every present piece of ``measure`` at each of its states."""
    bad_total, total, first = 0, 0, ""
    for c, p in enumerate(measure.pieces):
        rows = p.mask.nonzero()[:, 0].repeat_interleave(per_piece)
        if not len(rows):
            continue
        ctx = p.context[rows]
        u = draw_on(p.chart, ctx)
        x = p.chart.forward(ctx, u)
        back = p.chart.inverse(ctx, x)
        inside = p.chart.contains(ctx, x)
        log_j = p.chart.log_abs_det_jacobian(ctx, u)
        tol = torch.finfo(ctx.dtype).eps ** ROUND_TRIP_POWER * (1 + row_max(u.abs()))
        err = row_max((back.to(u.dtype) - u).abs())
        wrong, outside, infinite = ~(err <= tol), ~inside, ~torch.isfinite(log_j)
        bad = wrong | outside | infinite
        bad_total, total = bad_total + int(bad.sum()), total + len(bad)
        if first or not bad.any():
            continue
        i = int(bad.nonzero()[0])
        where = f"{label} piece {c} ({type(p.chart).__name__}) at s={ctx[i].tolist()}, u={u[i].tolist()}"
        if wrong[i]:
            first = f"{where}: inverse(s, forward(s, u)) = {back[i].tolist()} (error {float(err[i]):.3g} > {float(tol[i]):.3g}); the chart's inverse does not undo its forward map"
        elif outside[i]:
            first = f"{where}: contains(s, forward(s, u)) is false at x={x[i].tolist()}; the chart does not hold its own image"
        else:
            first = f"{where}: log|J| = {float(log_j[i])}; a chart's Jacobian must be finite on its domain"
    return bad_total, total, first


def check_charts(graph: PointedGraph, n: int) -> CheckResult:
    """Every chart inverts itself: :math:`\\varphi_s^{-1}(\\varphi_s(u)) = u`, :math:`\\varphi_s(u) \\in M_s` (``contains``) and
    :math:`\\log|J_s(u)|` finite, at random ``u`` on the pieces of :math:`\\nu`, the terminal measure (where enumerated: a
    sampled one has no charts), and of :math:`\\kappa` and :math:`\\kappa_b` at states drawn from :math:`\\nu`."""
    s = nu_states(graph, n)
    listed = tuple((label, m, n) for label, m in (("nu", graph.nu), ("terminal", graph.terminal)) if isinstance(m, Measure))
    labelled = listed + (("kappa", graph.kappa(s), MOVES_PER_PIECE), ("kappa_b", graph.kappa_b(s), MOVES_PER_PIECE))
    bad, total, first = 0, 0, ""
    for label, measure, per_piece in labelled:
        b, t, msg = _round_trip(label, measure, per_piece)
        bad, total, first = bad + b, total + t, first or msg
    detail = first or f"{total} round trips u -> forward -> inverse"
    return CheckResult(CONDITIONS["charts"], bad, 0, bad == 0, detail)
