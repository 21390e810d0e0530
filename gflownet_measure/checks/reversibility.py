"""eq. 4, :math:`\\nu \\otimes \\kappa = \\mathrm{swap}(\\nu \\otimes \\kappa_b)`, on random test functions (Lahlou et al. 2023, Definition 1).

Both sides are integrated against ``K`` random test functions

.. math:: f(s, s') = \\cos(a \\cdot e(s) + b \\cdot e(s') + c)\\, g(s) g(s'),\\qquad f(s, \\bot) = \\cos(a \\cdot e(s) + d)\\, g(s),

with :math:`e` = ``graph.encode`` and the envelope :math:`g(s) = \\exp(-\\|e(s)\\|^2/2)`; the pairs into the sink are
compared with the terminal measure, :math:`\\kappa_b(\\bot, ds) = \\nu(ds)\\,\\kappa(s, \\{\\bot\\})`.

Each test function is compared on four classes of pairs apart (:data:`PAIR_CLASSES`): pairs of two states or into the
sink, and whether the pair is an atom of the pair measure or lies in its diffuse part. Both are properties of the pair
itself, so eq. 4, an equality of measures, holds on each class: :math:`f` times the indicator of the pairs into the
sink is a test function, and a measure's atomic part (its atoms) is unique, so the atomic parts of the two sides
agree, and hence their diffuse parts. A pair :math:`(s, s')` of :math:`\\nu \\otimes \\kappa` is atomic where :math:`s` is
an atom of :math:`\\nu` and :math:`s'` an atom of :math:`\\kappa(s, \\cdot)` (a piece of no active coordinate is an atom);
likewise for :math:`\\nu \\otimes \\kappa_b`. Apart, a class is judged against its own size: on the DAG x Theta space at
d = 20 the pairs into the sink weigh :math:`10^{13}` to :math:`10^{15}` times those between states, which a comparison of
the totals could never see. Each side is also split by pair type (:data:`PAIR_TYPES`) and kernel component, and a failure
by the moves that make and reverse its pairs (:class:`Moves`), so that it says where the two measures differ.

Where :math:`\\nu` or the terminal measure is a :class:`~gflownet_measure.sampled.SampledMeasure`, its outer integrals
are the importance-sampling sums :math:`\\sum_m w_m \\int f(x_m, s')\\, \\kappa(x_m, ds')` over its draws, and their
variance (``L`` times the sample variance of its ``L`` i.i.d. blocks of draws, inner noise included) enters the
tolerance: that of the two sides' difference, block by block, since both sum over the same draws (:func:`_integrals`).
Such a measure says which draws are atoms with :attr:`~gflownet_measure.sampled.SampledMeasure.atomic`; where it does
not, the atomic and diffuse pairs are compared together.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from ..graph import PointedGraph
from ..measures import Measure, WeightedPoints
from ..sampled import SampledMeasure
from .integration import EXACT_RTOL, QUADRATURE_SAFETY, STATE_BUDGET, Z_SCORE, Rule, exact_graph, integrate, nodes, pair_method, sampled_measures
from .normalisation import remedy
from .results import CONDITIONS, POWER, UNDECIDED, CheckResult, verdict
from .support import component_name

__all__ = [
    "PAIR_BUDGET",
    "PAIR_TYPES",
    "PAIR_CLASSES",
    "TestFunctions",
    "test_functions",
    "evaluate",
    "Side",
    "Moves",
    "diffuse_nodes",
    "pair_integrals",
    "check_reversibility",
]

PAIR_BUDGET = 2**24  # inner nodes x max(state coordinates, test functions) per chunk of outer states (128 MiB in float64)
PAIR_TYPES = ("from s0", "inner", "into the sink")
PAIR_CLASSES = tuple(f"{pairs}, {part}" for part in ("atomic", "diffuse") for pairs in ("between states", "into the sink"))
"""The classes of pairs compared apart (module docstring): class ``k + 2 d`` holds the pairs into the sink if ``k``, diffuse
ones if ``d``. (From :math:`s_0` and inner pairs are one class: apart, a quadrature rule's error on the pairs from
:math:`s_0` of the quarter disc, whose kernel jumps across its first disc, would leave that small class undecided.)"""
ORDER_CHUNK = 4096  # states per kernel call when sorting them by structure (fewer where its atoms exceed STATE_BUDGET numbers)


class TestFunctions(NamedTuple):
    """``K`` random test functions (parameters ``a, b [K, F]``, phases ``c, d [K]``), see :func:`test_functions`."""

    a: Tensor
    b: Tensor
    c: Tensor
    d: Tensor


def test_functions(graph: PointedGraph, k: int, gen: torch.Generator) -> TestFunctions:
    """``k`` random test functions (module docstring): :math:`a, b \\sim \\mathcal N(0, I/F)` over the ``F`` features, phases uniform.

    The frequencies are scaled by :math:`1/\\sqrt F` so that :math:`a \\cdot e(s)` has unit variance for unit-scale features
    whatever their number: with :math:`\\mathcal N(0, I)` the signed integrals against the envelope shrink as
    :math:`e^{-F/2}` while their Monte Carlo error does not, and eq. 4 lost all power in 10 dimensions (the funnel).
    The envelope makes ``f`` integrable (with finite Monte Carlo variance) where :math:`\\nu` has infinite mass, e.g.
    Lebesgue on R^n, provided ``encode`` puts states on the unit scale of the charts' coordinates.
    """
    F = graph.encode(graph.source[None]).shape[1]
    a, b = torch.randn(2, k, F, generator=gen, dtype=torch.float64) / math.sqrt(F)
    c, d = torch.rand(2, k, generator=gen, dtype=torch.float64) * 2 * math.pi
    return TestFunctions(a, b, c, d)


def _log_envelope(graph: PointedGraph, fs: TestFunctions, y: Tensor) -> tuple[Tensor, Tensor]:
    """Features :math:`e(y)` ``[N, M, F]`` (float64) and the log-envelope :math:`\\log g(y) = -\\|e(y)\\|^2/2` ``[N, M]``
    of states ``y [N, M, D]``, encoded once in the graph's dtype."""
    e = graph.encode(y.flatten(0, 1).to(graph.source.dtype)).double().reshape(*y.shape[:2], fs.a.shape[1])
    return e, -e.square().sum(-1) / 2


def evaluate(graph: PointedGraph, fs: TestFunctions, s: Tensor, x: Tensor, sink: Tensor) -> tuple[Tensor, Tensor]:
    """All test functions at the pairs ``(s, x)`` (``[N, M, D]`` each, ``sink [N, M]``) as ``(v [K, N, M], log_g [N, M])``
    with :math:`f = v\\, e^{\\log g}`: the oscillating factor and the log of the envelope :math:`g(s) g(s')` (:math:`g(s)`
    into the sink). The envelope stays in log space so that callers fold it into log-weights: on :math:`\\Theta_G` with
    thousands of parameters the envelope and an importance weight are each beyond float64 (:math:`e^{\\mp 3000}`), their
    product is not."""
    (es, log_gs), (ex, log_gx) = _log_envelope(graph, fs, s), _log_envelope(graph, fs, x)
    ps, px = es @ fs.a.T, ex @ fs.b.T  # [N, M, K]
    v = torch.where(sink[..., None], torch.cos(ps + fs.d), torch.cos(ps + px + fs.c))
    return v.permute(2, 0, 1), torch.where(sink, log_gs, log_gs + log_gx)


class Moves(NamedTuple):
    """One side's estimate on one class and pair type, split by the moves that make and reverse each pair: ``sums``
    maps ``(kappa's components, kappa_b's components)`` to ``[K]``, the terms of the pairs :math:`(s, s')` that exactly
    those components of :math:`\\kappa(s, \\cdot)` hold :math:`s'` and of :math:`\\kappa_b(s', \\cdot)` hold :math:`s`
    (:func:`_holders`), with the names of either kernel's components. The sets partition the pairs and are properties
    of the pair, so eq. 4 holds on each: the set where the two sides differ most names the moves at fault (all of
    them where moves overlap, which eq. 4 cannot tell apart), where a side's largest term may be a move both sides agree on."""

    sums: dict[tuple[tuple[int, ...], tuple[int, ...]], Tensor]
    kappa: tuple[str, ...]
    kappa_b: tuple[str, ...]


class Side(NamedTuple):
    """One side of eq. 4 for ``K`` test functions on each of the ``T`` classes of :data:`PAIR_CLASSES`: estimates, Monte
    Carlo variances and :math:`\\int |f|` ``[K, T]`` each, and the estimate split by class, pair type
    (:data:`PAIR_TYPES`) and kernel component, ``groups [K, T, 3, C]`` (``names``: the ``C`` components; a class's
    ``groups`` sum to its estimate). ``outer`` is the outer rule (:math:`\\nu`'s nodes, each
    weight times the envelope :math:`g` of its state), ``inner`` and ``inner_var`` ``[K, T, M]`` the inner integrals at
    its nodes and their variances (0 at nodes outside the kernel's domain), so that
    ``integrate(outer, inner, inner_var)`` is ``(est, var)``; both sides share ``outer``, and :func:`_integrals` takes
    the variance of their difference node by node. ``moves``: the estimate on one class and pair type split by move
    (:class:`Moves`), where :func:`pair_integrals` was asked for it (``split``), else ``None``."""

    est: Tensor
    var: Tensor
    mass: Tensor
    groups: Tensor
    names: tuple[str, ...]
    outer: WeightedPoints
    inner: Tensor
    inner_var: Tensor
    moves: Moves | None = None


def _holders(kernel, a: Tensor, b: Tensor) -> tuple[Tensor, tuple[str, ...]]:
    """``[R, C]`` bool: the components of :math:`\\kappa(a_r, \\cdot)` (``kernel``) that hold ``b_r`` (rows ``a, b [R, D]``,
    states, not the sink): the atom at ``b_r`` alone where there is one (a piece gives a point no mass), else every
    piece that holds it; and the names of the ``C`` components. Through the kernel's fast path where it has one
    (:meth:`~gflownet_measure.kernels.Kernel.outline`, which agrees with the kernel), in chunks of at most
    :data:`ORDER_CHUNK` states (fewer where their atoms exceed :data:`~gflownet_measure.checks.integration.STATE_BUDGET` numbers)."""
    probe = kernel.outline(a[:1])
    names = tuple(component_name(probe, c) for c in range(probe.n_components))
    chunk = max(1, min(ORDER_CHUNK, STATE_BUDGET // max(1, probe.atoms.count * a.shape[1])))
    out = []
    for i in range(0, len(a), chunk):
        m, x = kernel.outline(a[i : i + chunk]), b[i : i + chunk]
        atom = m.atoms.locate(x, torch.zeros(len(x), dtype=torch.bool)) if m.atoms.count else torch.full((len(x),), -1, dtype=torch.long)
        at = (atom >= 0).nonzero()[:, 0]
        hit = torch.zeros(len(x), len(names), dtype=torch.bool)
        hit[at, atom[at]] = True
        out.append(_pieces_holding(m, torch.arange(len(x)), x, atom < 0, hit))
    return torch.cat(out), names


def _pieces_holding(measure: Measure, row: Tensor, x: Tensor, test: Tensor, hit: Tensor) -> Tensor:
    """``hit [R, C]`` with, for each ``r`` where ``test [R]``, every piece of measure ``row[r]`` of ``measure`` that holds ``x [R, D]`` set."""
    K = measure.atoms.count
    for c, piece in enumerate(measure.pieces):
        rows = (test & piece.mask[row]).nonzero()[:, 0]
        if len(rows):
            inside, _ = piece.chart.coordinates_of(piece.context[row[rows]], x[rows])
            hit[rows[inside], K + c] = True
    return hit


def _structure_order(kernel, s: Tensor) -> Tensor:
    """A permutation of the states ``s`` grouping those whose kernel has the same present components, so that a chunk
    of them asks :func:`~gflownet_measure.checks.integration.nodes` for the nodes of few pieces (states differ in which pieces their kernels hold)."""
    chunk = max(1, min(ORDER_CHUNK, STATE_BUDGET // max(1, kernel(s[:1]).atoms.count * s.shape[1]))) if len(s) else 1
    masks = torch.cat([kernel(s[i : i + chunk]).component_mask() for i in range(0, len(s), chunk)])
    _, key = torch.unique(masks, dim=0, return_inverse=True)
    return torch.argsort(key, stable=True)


def diffuse_nodes(measure: Measure, wp: WeightedPoints) -> Tensor:
    """``[B, M]`` bool: the nodes ``wp`` of ``measure`` that lie on a piece with an active coordinate at their measure of
    the batch (:meth:`~gflownet_measure.charts.Chart.active`), as opposed to its atoms and its pieces of
    :math:`\\mathbb R^0` (unit atoms)."""
    dims = [torch.zeros(measure.batch, measure.atoms.count, dtype=torch.long)]
    for p in measure.pieces:
        active = p.chart.active(p.context)
        dims.append((torch.full((measure.batch,), p.chart.domain.dim) if active is None else active.sum(1))[:, None])
    return torch.cat(dims, 1)[:, wp.component] > 0


def _diffuse_draws(measure: Measure | SampledMeasure, wp: WeightedPoints) -> Tensor | None:
    """``[M]`` bool: the nodes ``wp`` (of the batch-one ``measure``) in its diffuse part; ``None`` where a sampled
    measure does not say which of its draws are atoms."""
    if isinstance(measure, Measure):
        return diffuse_nodes(measure, wp)[0]
    return None if measure.atomic is None else ~measure.atomic(wp.x[0])


def pair_integrals(
    graph: PointedGraph,
    outer: WeightedPoints,
    kernel,
    fs: TestFunctions,
    swap: bool,
    rule: Rule,
    outer_diffuse: Tensor | None = None,
    split: tuple[int, int] | None = None,
) -> Side:
    """:math:`\\int\\int f\\, d(\\nu \\otimes \\kappa)` (``swap``: :math:`\\int\\int f(s, s')\\, \\nu(ds') \\kappa_b(s', ds)`) for every test function.

    The outer states go through the kernel in chunks of at most :data:`PAIR_BUDGET` inner values, counted as
    nodes times the larger of the state's coordinates and the ``K`` test functions; a chunk that comes out larger is
    halved and redone (states differ in their number of pieces), so that a :math:`\\nu` with many pieces (the DAG x Theta
    space) stays within memory; every test function reuses a chunk's nodes. Pairs are typed by their first state
    (:math:`s_0` or not) and whether the second is the sink, and, where ``outer_diffuse`` (``[M]`` bool, the outer
    nodes in the diffuse part of their measure) is given, split into atomic and diffuse (:data:`PAIR_CLASSES`; without
    it every pair counts as atomic). Outer Monte Carlo nodes of weight zero or at the sink (a
    sampled :math:`\\nu`'s draws outside its support) are zero terms of the outer sum: never passed to the kernel,
    but counted in its variance.

    ``split``: ``(class, pair type)``, whose pairs are also split by the moves that make and reverse them
    (:class:`Moves`, ``Side.moves``; both kernels are evaluated at every such pair, so only to locate a failure).
    """
    keep = outer.mask[0] & ~outer.sink[0]
    order = _structure_order(kernel, outer.x[0][keep])
    idx = keep.nonzero()[:, 0][order]
    s = outer.x[0][idx]
    # the outer state's envelope g(s) joins its weight, the inner one g(s') (or nothing, into the sink) the inner weights
    log_go = _log_envelope(graph, fs, s[None])[1][0] if len(s) else s.new_zeros(0, dtype=torch.float64)
    sub = replace(outer, log_w=outer.log_w.index_add(1, idx, log_go[None]))
    w_out = (outer.log_w[0][idx] + log_go).exp()
    K, T, width = fs.a.shape[0], len(PAIR_CLASSES), max(s.shape[1], fs.a.shape[0])
    outer_part = torch.zeros(len(s), dtype=torch.bool) if outer_diffuse is None else outer_diffuse[idx]
    first = kernel(s[:1])
    C = first.n_components
    chunk = max(1, PAIR_BUDGET // (nodes(first, rule).x.shape[1] * width))
    est_parts, var_parts, mass_parts = (
        [torch.zeros(K, T, 0, dtype=torch.float64)],
        [torch.zeros(K, T, 0, dtype=torch.float64)],
        [torch.zeros(K, T, 0, dtype=torch.float64)],
    )
    groups = torch.zeros(K, T * 3 * C, dtype=torch.float64)
    moves = None if split is None else Moves({}, (), ())
    i = 0
    while i < len(s):
        measure = kernel(s[i : i + chunk])
        inner = nodes(measure, rule)
        if chunk > 1 and inner.x.shape[0] * inner.x.shape[1] * width > PAIR_BUDGET:
            chunk //= 2
            continue
        outer_s = s[i : i + chunk, None].expand_as(inner.x)
        x = torch.where(inner.mask[..., None], inner.x, outer_s)  # absent atoms may hold invalid states
        if swap:
            v, log_g = evaluate(graph, fs, x, outer_s, torch.zeros_like(inner.sink))
            kind = torch.where(graph.is_source(x), 0, 1)
        else:
            v, log_g = evaluate(graph, fs, outer_s, x, inner.sink)
            kind = torch.where(inner.sink, 2, torch.where(graph.is_source(outer_s), 0, 1))
        inner = replace(inner, log_w=inner.log_w + log_g - log_go[i : i + len(x), None])
        w = torch.where(inner.mask, inner.log_w.exp(), torch.zeros_like(inner.log_w))
        terms = w * v  # [K, N, M]; masked nodes have weight 0
        diffuse = outer_part[i : i + len(x), None] | (diffuse_nodes(measure, inner) & (outer_diffuse is not None))
        cls = (kind == 2).long() + 2 * diffuse.long()  # [N, M]: the class of each pair
        est_t, var_t, mass_t = (torch.zeros(K, T, len(x), dtype=torch.float64) for _ in range(3))
        for t in cls.unique().tolist():
            on = cls == t
            for k in range(K):
                est_t[k, t], var_t[k, t] = integrate(inner, v[k] * on)
            mass_t[:, t] = (w * v.abs() * on).sum(2)
        est_parts.append(est_t)
        var_parts.append(var_t)
        mass_parts.append(mass_t)
        slot = ((cls * 3 + kind) * C + inner.component).flatten()  # [N M]: class, pair type and component of each node
        groups.index_add_(1, slot, (w_out[i : i + len(x), None] * terms).flatten(1))
        if moves is not None and split is not None:
            on = (cls == split[0]) & (kind == split[1]) & inner.mask
            moves = _add_moves(graph, moves, measure, inner, outer_s, x, on, w_out[i : i + len(x), None] * terms, swap)
        i += len(inner.x)
    est, var, mass = (torch.zeros(K, T, outer.x.shape[1], dtype=torch.float64).index_copy(2, idx, torch.cat(p, 2)) for p in (est_parts, var_parts, mass_parts))
    out = [integrate(sub, e[None], v[None]) for e, v in zip(est.flatten(0, 1), var.flatten(0, 1))]
    return Side(
        torch.cat([e for e, _ in out]).reshape(K, T),
        torch.cat([v for _, v in out]).reshape(K, T),
        torch.stack([integrate(sub, m[None])[0][0] for m in mass.flatten(0, 1)]).reshape(K, T),
        groups.reshape(K, T, 3, C),
        tuple(component_name(first, c) for c in range(C)),
        sub,
        est,
        var,
        moves,
    )


def _add_moves(
    graph: PointedGraph, moves: Moves, measure: Measure, inner: WeightedPoints, s: Tensor, x: Tensor, on: Tensor, terms: Tensor, swap: bool
) -> Moves:
    """``moves`` with the ``terms [K, N, M]`` of the nodes ``on [N, M]`` added to the sets of :class:`Moves` that hold their
    pairs: those of the outer states ``s`` and the nodes ``x [N, M, D]`` of ``measure`` (their kernel at ``s``, whose
    components that hold a node are its own and the other pieces that hold it), :math:`(s, x)` or, with ``swap``, :math:`(x, s)`
    (where the other kernel is evaluated: at ``x``, holding ``s``, :func:`_holders`)."""
    if not bool(on.any()):
        return moves
    row = torch.arange(on.shape[0])[:, None].expand_as(on)[on]
    own = inner.component.expand_as(on)[on]
    hit = torch.nn.functional.one_hot(own, measure.n_components).bool()
    own_names = tuple(component_name(measure, c) for c in range(measure.n_components))
    mine = _pieces_holding(measure, row, x[on], own >= measure.atoms.count, hit)
    theirs, their_names = _holders(graph.kappa if swap else graph.kappa_b, x[on], s[on])
    forward, backward = (theirs, mine) if swap else (mine, theirs)
    kappa, kappa_b = (their_names, own_names) if swap else (own_names, their_names)
    patterns, which = torch.unique(torch.cat([forward, backward], 1), dim=0, return_inverse=True)
    sums = terms[:, on].new_zeros(terms.shape[0], len(patterns)).index_add_(1, which, terms[:, on])
    out = dict(moves.sums)
    for pattern, total in zip(patterns, sums.T):
        key = (tuple(pattern[: len(kappa)].nonzero()[:, 0].tolist()), tuple(pattern[len(kappa) :].nonzero()[:, 0].tolist()))
        out[key] = out[key] + total if key in out else total
    return Moves(out, kappa, kappa_b)


class _Integrals(NamedTuple):
    """Both sides of eq. 4 and the sink term (estimate, variance, :math:`\\int |f|` ``[K, T]`` each, over
    :data:`PAIR_CLASSES`) with one rule, and ``pair_var [K, T]``, the variance of ``lhs - rhs`` over the outer nodes
    they share (sink term aside)."""

    lhs: Side
    rhs: Side
    sink: tuple[Tensor, Tensor, Tensor]
    pair_var: Tensor


def _integrals(graph: PointedGraph, fs: TestFunctions, rule: Rule, seed: int, split: tuple[int, int] | None = None) -> _Integrals:
    """:math:`\\int f\\, d(\\nu \\otimes \\kappa)`, :math:`\\int f\\, d\\,\\mathrm{swap}(\\nu \\otimes \\kappa_b)` and the sink term
    :math:`\\int f(s, \\bot)\\, \\kappa_b(\\bot, ds)` for the test functions ``fs``, every piece integrated by ``rule``,
    a sampled :math:`\\nu` or terminal measure by its draws from a generator seeded with ``seed`` (the same draws for every rule).

    Both sides are sums over the same nodes of :math:`\\nu` (common random numbers): the variance of their difference is
    that of the node-by-node differences of their terms (inner noise included), which is far below the sum of the two
    variances where the two sides' terms at a node move together (a DAG's children and parents both follow its edges).
    ``split``: the class and pair type whose pairs each side also splits by move (:func:`pair_integrals`)."""
    draws = torch.Generator().manual_seed(seed)
    nu = nodes(graph.nu, rule, draws)
    terminal = nodes(graph.terminal, rule, draws)
    nu_diffuse, terminal_diffuse = _diffuse_draws(graph.nu, nu), _diffuse_draws(graph.terminal, terminal)
    apart = nu_diffuse is not None and terminal_diffuse is not None
    lhs = pair_integrals(graph, nu, graph.kappa, fs, False, rule, nu_diffuse if apart else None, split)
    rhs = pair_integrals(graph, nu, graph.kappa_b, fs, True, rule, nu_diffuse if apart else None, split)
    t_sink, log_g = evaluate(graph, fs, terminal.x, terminal.x, torch.ones_like(terminal.sink))  # [K, 1, M], [1, M]
    terminal = replace(terminal, log_w=terminal.log_w + log_g)
    K, T = t_sink.shape[0], len(PAIR_CLASSES)
    sink = [torch.zeros(K, T, dtype=torch.float64) for _ in range(3)]
    for part in (False, True):
        on = (terminal_diffuse == part) if apart else torch.full_like(terminal.sink[0], not part)
        for k, t in enumerate(t_sink):
            (e,), (v,) = integrate(terminal, t * on)
            sink[0][k, 1 + 2 * part], sink[1][k, 1 + 2 * part] = e, v
            sink[2][k, 1 + 2 * part] = integrate(terminal, (t * on).abs())[0][0]
    differences = zip((lhs.inner - rhs.inner).flatten(0, 1), (lhs.inner_var + rhs.inner_var).flatten(0, 1))
    pair_var = torch.cat([integrate(lhs.outer, d[None], v[None])[1] for d, v in differences]).reshape(K, T)
    return _Integrals(lhs, rhs, (sink[0], sink[1], sink[2]), pair_var)


def _statistical(graph: PointedGraph, fs: TestFunctions, fine: _Integrals, rule: Rule, seed: int) -> tuple[Tensor, str]:
    """The estimation-error part of the tolerance ``[K, T]`` and the rule's name (see :mod:`.integration`)."""
    if exact_graph(graph):
        return torch.zeros_like(fine.lhs.est), "exact sums over atoms"
    drawn = "".join(f"; {m.label} by {rule.n} importance-sampling draws" for m in sampled_measures(graph))
    if rule.method == "mc":
        return Z_SCORE * (fine.pair_var + fine.sink[1]).sqrt(), f"Monte Carlo, {rule.n} nodes per piece{drawn}, {Z_SCORE:g} standard errors"
    coarse = _integrals(graph, fs, rule._replace(coarse=True), seed)
    change = (fine.lhs.est - coarse.lhs.est).abs() + (fine.rhs.est - coarse.rhs.est).abs() + (fine.sink[0] - coarse.sink[0]).abs()
    # pooled over the test functions of each class of pairs: the rule's error on those pairs is seen by every test function
    # alike, and one function's change can vanish by chance where an integrand jumps (a kernel switching components across
    # nu; the quarter disc at 8 x 8 nodes); not across classes, whose integrals differ in size by orders of magnitude
    how = f"quadrature, {rule.n} nodes per piece, {QUADRATURE_SAFETY:g} x the largest change from 3/4 of the nodes per coordinate"
    quadrature = QUADRATURE_SAFETY * change.amax(0, keepdim=True).expand_as(change)
    if not drawn:
        return quadrature, how
    # the outer sums over sampled measures are Monte Carlo whatever the rule: their standard errors add to the quadrature's change
    var = fine.pair_var * isinstance(graph.nu, SampledMeasure) + fine.sink[1] * isinstance(graph.terminal, SampledMeasure)
    return quadrature + Z_SCORE * var.sqrt(), f"{how}{drawn}, plus {Z_SCORE:g} standard errors"


def _largest(side: Side, k: int, c: int, t: int, label: str) -> str:
    """``"mostly LABEL COMPONENT: VALUE"``: the largest term of ``side`` for test function ``k`` on class ``c`` and pair type ``t``."""
    j = int(side.groups[k, c, t].abs().argmax())
    return f"mostly {label} {side.names[j]}: {float(side.groups[k, c, t, j]):.4g}"


def _components(label: str, names: tuple[str, ...], held: tuple[int, ...], most: int = 3) -> str:
    """``"kappa piece 1 (AffineChart) and piece 2 (AffineChart)"``: components ``held`` of the kernel ``label`` (at most ``most`` named)."""
    if not held:
        return f"no component of {label}"
    listed = [names[j] for j in held[:most]] + ([f"{len(held) - most} more"] if len(held) > most else [])
    return f"{label} {', '.join(listed[:-1])}{' and ' if len(listed) > 1 else ''}{listed[-1]}"


def _moves_at_fault(r: _Integrals, k: int) -> str:
    """``"mostly on those made by ... and reversed by ...: LHS vs RHS"``: the set of :class:`Moves` where test function
    ``k``'s two sides differ most, with their integrals there."""
    assert r.lhs.moves is not None and r.rhs.moves is not None
    names = r.lhs.moves.kappa or r.rhs.moves.kappa, r.lhs.moves.kappa_b or r.rhs.moves.kappa_b
    zero = torch.zeros(r.lhs.est.shape[0], dtype=torch.float64)
    keys = sorted(r.lhs.moves.sums.keys() | r.rhs.moves.sums.keys())
    sides = {key: (r.lhs.moves.sums.get(key, zero)[k], r.rhs.moves.sums.get(key, zero)[k]) for key in keys}
    made, undone = max(keys, key=lambda key: float((sides[key][0] - sides[key][1]).abs()))
    lhs, rhs = sides[(made, undone)]
    return (
        f"mostly on those made by {_components('kappa', names[0], made)} and reversed by {_components('kappa_b', names[1], undone)}: "
        f"{float(lhs):.4g} vs {float(rhs):.4g}"
    )


def _located(r: _Integrals, k: int, c: int, by_moves: Callable[[int, int], _Integrals | None]) -> str:
    """Where test function ``k`` sees the two measures differ: the class of pairs ``c`` (:data:`PAIR_CLASSES`) where its
    difference is largest against its tolerance, with the two sides' integrals on that class (the sink pairs: against
    the terminal measure, with kappa's largest term); for the pairs between states, the pair type (:data:`PAIR_TYPES`,
    from s0 or inner, which share the class) that carries most of the difference, with the two sides' integrals on it,
    and the moves at fault there (:func:`_moves_at_fault`): ``by_moves(c, t)`` gives the integrals split by move
    (:class:`Moves`), or ``None`` where a kernel cannot be evaluated at the other side's pairs (then each side's largest term)."""
    lhs, rhs = float(r.lhs.est[k, c]), float(r.rhs.est[k, c] + r.sink[0][k, c])
    where = f"test function {k + 1}: pairs {PAIR_CLASSES[c]}: nu(x)kappa {lhs:.4g}"
    if c % 2:  # into the sink: kappa's stopping mass against the terminal measure
        return f"{where} ({_largest(r.lhs, k, c, 2, 'kappa')}) vs swap(nu(x)kappa_b) {rhs:.4g} (the terminal measure kappa_b(sink, .))"
    by_type = r.lhs.groups[k, c, :2].sum(1) - r.rhs.groups[k, c, :2].sum(1)  # from s0, inner
    t = int(by_type.abs().argmax())
    split = by_moves(c, t)
    moves = _moves_at_fault(split, k) if split is not None else f"{_largest(r.lhs, k, c, t, 'kappa')} vs {_largest(r.rhs, k, c, t, 'kappa_b')}"
    return (
        f"{where} vs swap(nu(x)kappa_b) {rhs:.4g}; most of the difference on pairs {PAIR_TYPES[t]} "
        f"({float(r.lhs.groups[k, c, t].sum()):.4g} vs {float(r.rhs.groups[k, c, t].sum()):.4g}), {moves}"
    )


def _lacking(graph: PointedGraph, rule: Rule, power: float, method: str) -> str:
    """The piece whose nodes are sparsest (the most coordinates, of nu, the terminal measure, kappa or kappa_b) and what
    would decide eq. 4 there (:func:`~.normalisation.remedy`); the draws of a sampled measure where no measure has a piece."""
    s0 = graph.source[None]
    listed = [(label, m.pieces) for label, m in (("nu", graph.nu), ("the terminal measure", graph.terminal)) if not isinstance(m, SampledMeasure)]
    named = [
        (label, c, p.chart)
        for label, pieces in listed + [("kappa", graph.kappa(s0).pieces), ("kappa_b", graph.kappa_b(s0).pieces)]
        for c, p in enumerate(pieces)
    ]
    if not named:
        return f"the draws of the sampled measures {remedy(None, 'mc', rule.n, power, False)}"
    label, c, chart = max(named, key=lambda t: t[2].domain.dim)
    k = chart.domain.dim
    return f"{label} piece {c} ({type(chart).__name__}, {k} coordinate{'s' if k != 1 else ''}) {remedy(chart.domain, rule.method, rule.n, power, method != 'quadrature')}"


def check_reversibility(graph: PointedGraph, n: int, method: str, n_functions: int, gen: torch.Generator) -> CheckResult:
    """eq. 4: :math:`\\int f\\, d(\\nu\\otimes\\kappa) = \\int f(s, s')\\, \\nu(ds')\\kappa_b(s', ds)` for random ``f``, sink pairs included.

    ``method``: ``"auto"``, ``"mc"`` or ``"quadrature"`` (:func:`~gflownet_measure.checks.integration.pair_method`; a sampled
    :math:`\\nu` or terminal measure is integrated by its own draws under each, module docstring). Each
    test function on each class of pairs (:data:`PAIR_CLASSES`) is one comparison of :math:`|\\text{lhs} - \\text{rhs}|`
    with its tolerance; the size it is judged against (undecided above :data:`~gflownet_measure.checks.results.POWER`)
    is the larger of :math:`|\\text{lhs}|` and :math:`|\\text{rhs}|`, and the classes that hold no pair (both
    :math:`\\int |f|` zero) are left out of that median.
    """
    rule = Rule(pair_method(graph, method), n)
    fs = test_functions(graph, n_functions, gen)
    seed = int(torch.randint(2**62, (), generator=gen))  # the draws of sampled measures, repeated by the coarse rule
    drawn = torch.get_rng_state()  # the inner Monte Carlo nodes are drawn from the global stream: a failure's split repeats them
    r = _integrals(graph, fs, rule, seed)
    statistical, how = _statistical(graph, fs, r, rule, seed)

    def by_moves(c: int, t: int) -> _Integrals | None:
        after = torch.get_rng_state()
        torch.set_rng_state(drawn)
        try:
            return _integrals(graph, fs, rule, seed, split=(c, t))
        except Exception:  # a kernel that fails at the other kernel's states (a wrong parent): no split, the failure stands
            return None
        finally:
            torch.set_rng_state(after)

    rhs = r.rhs.est + r.sink[0]
    diff = (r.lhs.est - rhs).abs().flatten()
    mass = (r.lhs.mass + r.rhs.mass + r.sink[2]).flatten()
    tol = statistical.flatten() + EXACT_RTOL * (1 + mass)
    size = torch.maximum(r.lhs.est.abs(), rhs.abs()).flatten()
    passed, undecided, power, k = verdict(diff, tol, statistical.flatten(), size, mass > 0)
    classes = int((mass.reshape(n_functions, -1) > 0).any(0).sum())
    if passed:
        detail = f"max |lhs - rhs| over {n_functions} test functions x {classes} classes of pairs ({how}; median tolerance / |integral| {power:.2g})"
    elif undecided:
        detail = f"{UNDECIDED}; {_lacking(graph, rule, power, method)} (median tolerance / |integral| {power:.2g} > {POWER:g}; {how})"
    else:
        detail = _located(r, *divmod(k, len(PAIR_CLASSES)), by_moves)
    return CheckResult(CONDITIONS["reversibility"], float(diff[k]), float(tol[k]), passed, detail, undecided)
