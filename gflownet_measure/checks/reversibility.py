"""eq. 4, :math:`\\nu \\otimes \\kappa = \\mathrm{swap}(\\nu \\otimes \\kappa_b)`, on random test functions (Lahlou et al. 2023, Definition 1).

Both sides are integrated against ``K`` random test functions

.. math:: f(s, s') = \\cos(a \\cdot e(s) + b \\cdot e(s') + c)\\, g(s) g(s'),\\qquad f(s, \\bot) = \\cos(a \\cdot e(s) + d)\\, g(s),

with :math:`e` = ``graph.encode`` and the envelope :math:`g(s) = \\exp(-\\|e(s)\\|^2/2)`; the pairs into the sink are
compared with the terminal measure, :math:`\\kappa_b(\\bot, ds) = \\nu(ds)\\,\\kappa(s, \\{\\bot\\})`. Each side is also
split by pair type (from :math:`s_0`, inner, into the sink) and by kernel component, so that a failure says where the
two measures differ.

Where :math:`\\nu` or the terminal measure is a :class:`~gflownet_measure.sampled.SampledMeasure`, its outer integrals
are the importance-sampling sums :math:`\\sum_m w_m \\int f(x_m, s')\\, \\kappa(x_m, ds')` over its draws, and their
variance (the sample variance of the ``M`` i.i.d. terms, inner noise included) enters the tolerance.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

import torch
from torch import Tensor

from ..graph import PointedGraph
from ..measures import WeightedPoints
from ..sampled import SampledMeasure
from .integration import EXACT_RTOL, QUADRATURE_SAFETY, STATE_BUDGET, Z_SCORE, Rule, exact_graph, integrate, nodes, pair_method, sampled_measures
from .normalisation import remedy
from .results import CONDITIONS, POWER, UNDECIDED, CheckResult, verdict
from .support import component_name

__all__ = ["PAIR_BUDGET", "PAIR_TYPES", "TestFunctions", "test_functions", "evaluate", "Side", "pair_integrals", "check_reversibility"]

PAIR_BUDGET = 2**24  # inner nodes x max(state coordinates, test functions) per chunk of outer states (128 MiB in float64)
PAIR_TYPES = ("from s0", "inner", "into the sink")
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


class Side(NamedTuple):
    """One side of eq. 4 for ``K`` test functions: estimates, Monte Carlo variances and :math:`\\int |f|` ``[K]`` each, and
    the estimate split by pair type and kernel component, ``groups [K, 3, C]`` (``names``: the ``C`` components)."""

    est: Tensor
    var: Tensor
    mass: Tensor
    groups: Tensor
    names: tuple[str, ...]


def _structure_order(kernel, s: Tensor) -> Tensor:
    """A permutation of the states ``s`` grouping those whose kernel has the same present components, so that a chunk
    of them asks :func:`~gflownet_measure.checks.integration.nodes` for the nodes of few pieces (states differ in which pieces their kernels hold)."""
    chunk = max(1, min(ORDER_CHUNK, STATE_BUDGET // max(1, kernel(s[:1]).atoms.count * s.shape[1]))) if len(s) else 1
    masks = torch.cat([kernel(s[i : i + chunk]).component_mask() for i in range(0, len(s), chunk)])
    _, key = torch.unique(masks, dim=0, return_inverse=True)
    return torch.argsort(key, stable=True)


def pair_integrals(graph: PointedGraph, outer: WeightedPoints, kernel, fs: TestFunctions, swap: bool, rule: Rule) -> Side:
    """:math:`\\int\\int f\\, d(\\nu \\otimes \\kappa)` (``swap``: :math:`\\int\\int f(s, s')\\, \\nu(ds') \\kappa_b(s', ds)`) for every test function.

    The outer states go through the kernel in chunks of at most :data:`PAIR_BUDGET` inner values, counted as
    nodes times the larger of the state's coordinates and the ``K`` test functions; a chunk that comes out larger is
    halved and redone (states differ in their number of pieces), so that a :math:`\\nu` with many pieces (the DAG x Theta
    space) stays within memory; every test function reuses a chunk's nodes. Pairs are typed by their first state
    (:math:`s_0` or not) and whether the second is the sink. Outer Monte Carlo nodes of weight zero or at the sink (a
    sampled :math:`\\nu`'s draws outside its support) are zero terms of the outer sum: never passed to the kernel,
    but counted in its variance.
    """
    keep = outer.mask[0] & ~outer.sink[0]
    order = _structure_order(kernel, outer.x[0][keep])
    idx = keep.nonzero()[:, 0][order]
    zero = (~keep & ~outer.exact).nonzero()[:, 0]
    rows = torch.cat([idx, zero])
    s = outer.x[0][idx]
    # the outer state's envelope g(s) joins its weight, the inner one g(s') (or nothing, into the sink) the inner weights
    log_go = _log_envelope(graph, fs, s[None])[1][0] if len(s) else s.new_zeros(0, dtype=torch.float64)
    shift = torch.cat([log_go, torch.zeros(len(zero), dtype=torch.float64)])
    sub = WeightedPoints(outer.x[:, rows], outer.sink[:, rows], outer.log_w[:, rows] + shift, outer.mask[:, rows], outer.component[rows], outer.n_atoms)
    w_out = (outer.log_w[0][idx] + log_go).exp()
    K, width = fs.a.shape[0], max(s.shape[1], fs.a.shape[0])
    first = kernel(s[:1])
    C = first.n_components
    chunk = max(1, PAIR_BUDGET // (nodes(first, rule).x.shape[1] * width))
    est_parts, var_parts, mass_parts, groups = [], [], [], torch.zeros(K, 3 * C, dtype=torch.float64)
    i = 0
    while i < len(s):
        inner = nodes(kernel(s[i : i + chunk]), rule)
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
        per_state = [integrate(inner, vk) for vk in v]
        est_parts.append(torch.stack([e for e, _ in per_state]))
        var_parts.append(torch.stack([vv for _, vv in per_state]))
        mass_parts.append((w * v.abs()).sum(2))
        slot = (kind * C + inner.component).flatten()  # [N M]: pair type and component of each node
        groups.index_add_(1, slot, (w_out[i : i + len(x), None] * terms).flatten(1))
        i += len(inner.x)
    pad = [torch.zeros(K, len(zero), dtype=torch.float64)]
    est, var, mass = torch.cat(est_parts + pad, 1), torch.cat(var_parts + pad, 1), torch.cat(mass_parts + pad, 1)
    out = [integrate(sub, est[k][None], var[k][None]) for k in range(K)]
    return Side(
        torch.cat([e for e, _ in out]),
        torch.cat([v for _, v in out]),
        torch.stack([integrate(sub, mass[k][None])[0][0] for k in range(K)]),
        groups.reshape(K, 3, C),
        tuple(component_name(first, c) for c in range(C)),
    )


class _Integrals(NamedTuple):
    """Both sides of eq. 4 and the sink term (estimate, variance, :math:`\\int |f|` ``[K]`` each) with one rule."""

    lhs: Side
    rhs: Side
    sink: tuple[Tensor, Tensor, Tensor]


def _integrals(graph: PointedGraph, fs: TestFunctions, rule: Rule, seed: int) -> _Integrals:
    """:math:`\\int f\\, d(\\nu \\otimes \\kappa)`, :math:`\\int f\\, d\\,\\mathrm{swap}(\\nu \\otimes \\kappa_b)` and the sink term
    :math:`\\int f(s, \\bot)\\, \\kappa_b(\\bot, ds)` for the test functions ``fs``, every piece integrated by ``rule``,
    a sampled :math:`\\nu` or terminal measure by its draws from a generator seeded with ``seed`` (the same draws for every rule)."""
    draws = torch.Generator().manual_seed(seed)
    nu = nodes(graph.nu, rule, draws)
    terminal = nodes(graph.terminal, rule, draws)
    lhs = pair_integrals(graph, nu, graph.kappa, fs, False, rule)
    rhs = pair_integrals(graph, nu, graph.kappa_b, fs, True, rule)
    t_sink, log_g = evaluate(graph, fs, terminal.x, terminal.x, torch.ones_like(terminal.sink))  # [K, 1, M], [1, M]
    terminal = replace(terminal, log_w=terminal.log_w + log_g)
    sink_terms = [(*integrate(terminal, t), integrate(terminal, t.abs())[0]) for t in t_sink]
    est, var, mass = (torch.cat(col) for col in zip(*sink_terms))
    return _Integrals(lhs, rhs, (est, var, mass))


def _statistical(graph: PointedGraph, fs: TestFunctions, fine: _Integrals, rule: Rule, seed: int) -> tuple[Tensor, str]:
    """The estimation-error part of the tolerance ``[K]`` and the rule's name (see :mod:`.integration`)."""
    if exact_graph(graph):
        return torch.zeros_like(fine.lhs.est), "exact sums over atoms"
    drawn = "".join(f"; {m.label} by {rule.n} importance-sampling draws" for m in sampled_measures(graph))
    if rule.method == "mc":
        return Z_SCORE * (fine.lhs.var + fine.rhs.var + fine.sink[1]).sqrt(), f"Monte Carlo, {rule.n} nodes per piece{drawn}, {Z_SCORE:g} standard errors"
    coarse = _integrals(graph, fs, rule._replace(coarse=True), seed)
    change = (fine.lhs.est - coarse.lhs.est).abs() + (fine.rhs.est - coarse.rhs.est).abs() + (fine.sink[0] - coarse.sink[0]).abs()
    # pooled: the rule's error on this graph is seen by every test function alike, and one function's change can vanish
    # by chance where an integrand jumps (a kernel switching components across nu; the quarter disc at 8 x 8 nodes)
    how = f"quadrature, {rule.n} nodes per piece, {QUADRATURE_SAFETY:g} x the largest change from 3/4 of the nodes per coordinate"
    quadrature = QUADRATURE_SAFETY * change.max().expand_as(change)
    if not drawn:
        return quadrature, how
    # the outer sums over sampled measures are Monte Carlo whatever the rule: their standard errors add to the quadrature's change
    var = (fine.lhs.var + fine.rhs.var) * isinstance(graph.nu, SampledMeasure) + fine.sink[1] * isinstance(graph.terminal, SampledMeasure)
    return quadrature + Z_SCORE * var.sqrt(), f"{how}{drawn}, plus {Z_SCORE:g} standard errors"


def _largest(side: Side, k: int, kind: int, label: str) -> str:
    c = int(side.groups[k, kind].abs().argmax())
    return f"{label} {side.names[c]}: {float(side.groups[k, kind, c]):.4g}"


def _located(r: _Integrals, k: int) -> str:
    """Where test function ``k`` sees the two measures differ: the pair type with the largest difference, and on it the
    largest component of each side."""
    left = r.lhs.groups[k].sum(1)  # [3]
    right = r.rhs.groups[k].sum(1) + torch.tensor([0.0, 0.0, float(r.sink[0][k])], dtype=torch.float64)
    t = int((left - right).abs().argmax())
    mine = _largest(r.lhs, k, t, "mostly kappa")
    theirs = "the terminal measure kappa_b(sink, .)" if t == 2 else _largest(r.rhs, k, t, "mostly kappa_b")
    return (
        f"test function {k + 1}: nu(x)kappa {float(r.lhs.est[k]):.4g} vs swap(nu(x)kappa_b) {float(r.rhs.est[k] + r.sink[0][k]):.4g}; "
        f"largest difference on pairs {PAIR_TYPES[t]}: nu(x)kappa {float(left[t]):.4g} ({mine}) vs {float(right[t]):.4g} ({theirs})"
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
    test function is one comparison of :math:`|\\text{lhs} - \\text{rhs}|` with its tolerance; the size it is judged
    against (undecided above :data:`~gflownet_measure.checks.results.POWER`) is the larger of :math:`|\\text{lhs}|` and :math:`|\\text{rhs}|`.
    """
    rule = Rule(pair_method(graph, method), n)
    fs = test_functions(graph, n_functions, gen)
    seed = int(torch.randint(2**62, (), generator=gen))  # the draws of sampled measures, repeated by the coarse rule
    r = _integrals(graph, fs, rule, seed)
    statistical, how = _statistical(graph, fs, r, rule, seed)
    rhs = r.rhs.est + r.sink[0]
    diff = (r.lhs.est - rhs).abs()
    tol = statistical + EXACT_RTOL * (1 + r.lhs.mass + r.rhs.mass + r.sink[2])
    passed, undecided, power, k = verdict(diff, tol, statistical, torch.maximum(r.lhs.est.abs(), rhs.abs()))
    if passed:
        detail = f"max |lhs - rhs| over {n_functions} test functions ({how}; median tolerance / |integral| {power:.2g})"
    elif undecided:
        detail = f"{UNDECIDED}; {_lacking(graph, rule, power, method)} (median tolerance / |integral| {power:.2g} > {POWER:g}; {how})"
    else:
        detail = _located(r, k)
    return CheckResult(CONDITIONS["reversibility"], float(diff[k]), float(tol[k]), passed, detail, undecided)
