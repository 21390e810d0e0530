"""Numerical checks of the theory's conditions on any pointed graph (Lahlou et al. 2023, Definition 1).

Each check returns a :class:`CheckResult` (condition, estimate, tolerance, pass/fail). Integrals are
exact sums over atoms and Monte Carlo (or quadrature) over charted pieces; a Monte Carlo estimate is
compared with ``z`` standard errors (``z = 5``: a false failure rate of about 6e-7 per comparison
under the normal approximation), an exact one with a float64 round-off tolerance.

=================  ====================================================================
eq. 1              every state of nu is reachable from s0 (exact search / backward walks)
eq. 2              the sink is absorbing: no state has the sink among its parents
eq. 4              nu (x) kappa = swap(nu (x) kappa_b) on random test functions, sink pairs included
eq. 5              kappa_b(s0, .) = 0
eq. 6              kappa(s, {sink}) is 0 or 1
eq. 7              every trajectory reaches the sink within N steps (no dead ends, no cycles)
eq. 15, 16         P_F(s, .) and P_B(s', .) integrate to one against kappa(s, .) and kappa_b(s', .)
=================  ====================================================================
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from .densities import Policy, UniformPolicy
from .exact import index_of
from .graph import PointedGraph
from .measures import WeightedPoints
from .rollout import sample_backward, sample_forward

__all__ = ["CheckResult", "Report", "check_graph", "integrate", "Z_SCORE"]

Z_SCORE = 5.0
EXACT_RTOL = 1e-9


@dataclass(frozen=True)
class CheckResult:
    condition: str
    estimate: float
    tolerance: float
    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Report:
    graph: str
    results: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def __str__(self) -> str:
        w = max(len(r.condition) for r in self.results)
        lines = [f"theory checks for {self.graph}", f"{'condition':<{w}}  {'estimate':>11}  {'tolerance':>11}  result"]
        for r in self.results:
            lines.append(f"{r.condition:<{w}}  {r.estimate:>11.3g}  {r.tolerance:>11.3g}  {'pass' if r.passed else 'FAIL'}  {r.detail}")
        lines.append(f"{'all conditions hold' if self.passed else 'some conditions FAIL'}")
        return "\n".join(lines)


def integrate(wp: WeightedPoints, values: Tensor, inner_var: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """:math:`\\int v\\, d\\mu_b \\approx \\sum_m w_{bm} v_{bm}` ``[B]`` and its Monte Carlo variance ``[B]``.

    Atom nodes are exact (they only pass on ``inner_var``, the variance of their own values); the
    ``M`` nodes of a piece are i.i.d., so the variance of their sum is the sample variance of
    ``M w v`` over ``M`` (inner noise included).
    """
    w = torch.where(wp.mask, wp.log_w.exp(), torch.zeros_like(wp.log_w))
    terms = torch.where(wp.mask, w * values, torch.zeros_like(values))
    var = torch.zeros(terms.shape[0], dtype=terms.dtype, device=terms.device)
    if inner_var is not None:
        var = var + (w[:, wp.exact] ** 2 * inner_var[:, wp.exact]).sum(1)
    for c in wp.component[~wp.exact].unique():
        nodes = wp.component == c
        M = int(nodes.sum())
        var = var + (M * terms[:, nodes]).var(1) / M
    return terms.sum(1), var


def _tolerance(var: Tensor, scale: Tensor, method: str, rtol: float = EXACT_RTOL) -> Tensor:
    """``z`` standard errors for Monte Carlo, plus round-off ``rtol`` (exact sums) or 1e-3 relative (quadrature)."""
    if method == "quadrature":  # deterministic nodes: no standard error, a relative quadrature tolerance
        return 1e-3 * (1 + scale)
    return Z_SCORE * var.clamp(min=0).sqrt() + rtol * (1 + scale)


MAX_STATES = 2048


def _nu_states(graph: PointedGraph, n: int, method: str) -> Tensor:
    """``[M, D]`` float32: the atoms of :math:`\\nu` and ``n`` nodes per piece, at most :data:`MAX_STATES` of them (a random subset).

    The states the pointwise kernel checks (eq. 1, 2, 6, 15, 16) run on; a graph whose :math:`\\nu` has many
    pieces (an SDE's T time levels) would otherwise ask for ``T n`` kernel integrals.
    """
    nodes = graph.nu.weighted_points(n, method)
    x = nodes.x[0][nodes.mask[0] & ~nodes.sink[0]].float()
    return x[torch.randperm(len(x))[:MAX_STATES]] if len(x) > MAX_STATES else x


class _TestFunctions(NamedTuple):
    """``K`` random test functions (parameters ``a, b [K, F]``, phases ``c, d [K]``), see :func:`_test_functions`."""

    a: Tensor
    b: Tensor
    c: Tensor
    d: Tensor


def _test_functions(graph: PointedGraph, k: int, gen: torch.Generator) -> _TestFunctions:
    """``k`` random :math:`f(s, s') = \\cos(a \\cdot e(s) + b \\cdot e(s') + c)\\, g(s) g(s')`, :math:`f(s, \\bot) = \\cos(a \\cdot e(s) + d)\\, g(s)`.

    ``e = graph.encode``; the envelope :math:`g(s) = \\exp(-\\|e(s)\\|^2 / 2)` makes ``f`` integrable
    (with finite Monte Carlo variance) where :math:`\\nu` has infinite mass, e.g. Lebesgue on R^n, provided
    ``encode`` puts states on the unit scale of the charts' Monte Carlo proposals (``Box.proposal_scale``
    must exceed 1 there); on bounded spaces it is a harmless positive factor.
    """
    F = graph.encode(graph.source[None].float()).shape[1]
    a, b = torch.randn(2, k, F, generator=gen, dtype=torch.float64)
    c, d = torch.rand(2, k, generator=gen, dtype=torch.float64) * 2 * math.pi
    return _TestFunctions(a, b, c, d)


def _evaluate(graph: PointedGraph, fs: _TestFunctions, s: Tensor, x: Tensor, sink: Tensor) -> Tensor:
    """All test functions at the pairs ``(s, x)`` (``[N, M, D]`` each, ``sink [N, M]``): ``[K, N, M]``. The states are encoded once."""

    def enc(y: Tensor) -> tuple[Tensor, Tensor]:
        e = graph.encode(y.flatten(0, 1).float()).double().reshape(*y.shape[:2], fs.a.shape[1])
        return e, torch.exp(-e.square().sum(-1) / 2)

    (es, gs), (ex, gx) = enc(s), enc(x)
    ps, px = es @ fs.a.T, ex @ fs.b.T  # [N, M, K]
    v = torch.where(sink[..., None], torch.cos(ps + fs.d) * gs[..., None], torch.cos(ps + px + fs.c) * (gs * gx)[..., None])
    return v.permute(2, 0, 1)


PAIR_BUDGET = 2**24  # inner nodes x max(state coordinates, test functions) per chunk of outer states (128 MiB in float64)


def _pair_integrals(graph: PointedGraph, outer: WeightedPoints, kernel, fs: _TestFunctions, swap: bool, n: int, method: str) -> tuple[Tensor, Tensor, Tensor]:
    """:math:`\\int\\int f\\, d(\\nu \\otimes \\kappa)` (``swap``: :math:`\\int\\int f(s, s')\\, \\nu(ds') \\kappa_b(s', ds)`) for every test function:
    estimates, variances and scales ``[K]`` each.

    The outer states go through the kernel in chunks of at most :data:`PAIR_BUDGET` inner values, counted as
    nodes times the larger of the state's coordinates and the ``K`` test functions (each function's values over the
    chunk's pairs are as large as its nodes); a chunk that comes out larger is halved and redone (states differ in their
    number of pieces), so that a :math:`\\nu` with many pieces (the DAG x Theta space) stays within memory; every test
    function reuses a chunk's nodes.
    """
    keep = outer.mask[0] & ~outer.sink[0]
    s = outer.x[0][keep]
    K = fs.a.shape[0]
    width = max(s.shape[1], K)
    chunk = max(1, PAIR_BUDGET // (kernel(s[:1]).weighted_points(n, method).x.shape[1] * width))
    est, var, mass = [[] for _ in range(K)], [[] for _ in range(K)], [[] for _ in range(K)]
    i = 0
    while i < len(s):
        inner = kernel(s[i : i + chunk]).weighted_points(n, method)
        if chunk > 1 and inner.x.shape[0] * inner.x.shape[1] * width > PAIR_BUDGET:
            chunk //= 2
            continue
        outer_s = s[i : i + chunk, None].expand_as(inner.x)
        x = torch.where(inner.mask[..., None], inner.x, outer_s)  # absent atoms may hold invalid states
        vs = _evaluate(graph, fs, x, outer_s, torch.zeros_like(inner.sink)) if swap else _evaluate(graph, fs, outer_s, x, inner.sink)
        for k, v in enumerate(vs):
            e, vv = integrate(inner, v)
            est[k].append(e)
            var[k].append(vv)
            mass[k].append(integrate(inner, v.abs())[0])
        i += len(inner.x)
    sub = WeightedPoints(outer.x[:, keep], outer.sink[:, keep], outer.log_w[:, keep], outer.mask[:, keep], outer.component[keep], outer.n_atoms)
    out = [(*integrate(sub, torch.cat(est[k])[None], torch.cat(var[k])[None]), integrate(sub, torch.cat(mass[k])[None])[0]) for k in range(K)]
    return tuple(torch.cat(col) for col in zip(*out))


def check_reversibility(graph: PointedGraph, n: int, method: str, n_functions: int, gen: torch.Generator) -> CheckResult:
    """eq. 4: :math:`\\int f\\, d(\\nu\\otimes\\kappa) = \\int f(s, s')\\, \\nu(ds')\\kappa_b(s', ds)` for random ``f``, sink pairs included."""
    nu = graph.nu.weighted_points(n, method)
    terminal = graph.terminal.weighted_points(n, method)
    fs = _test_functions(graph, n_functions, gen)
    lhs, v1, s1 = _pair_integrals(graph, nu, graph.kappa, fs, False, n, method)
    rhs, v2, s2 = _pair_integrals(graph, nu, graph.kappa_b, fs, True, n, method)
    t_sink = _evaluate(graph, fs, terminal.x, terminal.x, torch.ones_like(terminal.sink))  # [K, 1, M]
    sink_terms = [(*integrate(terminal, t), integrate(terminal, t.abs())[0]) for t in t_sink]
    e3, v3, s3 = (torch.cat(col) for col in zip(*sink_terms))
    diff = (lhs - rhs - e3).abs()
    tol = _tolerance(v1 + v2 + v3, s1 + s2 + s3, method)
    i = int((diff / tol).argmax())
    return CheckResult("eq. 4  nu(x)kappa = nu(x)kappa_b", float(diff[i]), float(tol[i]), bool((diff <= tol).all()), f"max |lhs - rhs| over {n_functions} test functions")


def _walk_policy(kernel, fallback: Policy | None) -> Policy:
    return fallback if fallback is not None else UniformPolicy(kernel)


def check_reachability(graph: PointedGraph, n: int, method: str, pb: Policy | None) -> CheckResult:
    """eq. 1: every state of :math:`\\nu` is reachable from :math:`s_0`."""
    if not graph.nu.pieces:
        states = graph.nu.atoms.x[0][graph.nu.atoms.mask[0]].float()
        seen = index_of(states, graph.source[None].float()) == torch.arange(len(states))
        frontier = seen.clone()
        for _ in range(graph.max_length):
            a = graph.kappa(states[frontier]).atoms
            nxt = index_of(states, a.x[a.mask & ~a.sink])
            frontier = torch.zeros_like(seen)
            frontier[nxt[nxt >= 0]] = True
            frontier &= ~seen
            seen |= frontier
        missing = int((~seen).sum())
        return CheckResult("eq. 1  reachability", missing, 0, missing == 0, f"{missing} of {len(states)} states unreachable from s0 (exact search)")
    x = _nu_states(graph, n, "mc")
    try:
        sample_backward(graph, _walk_policy(graph.kappa_b, pb), x)
        failed = 0
    except (RuntimeError, ValueError) as e:
        failed, note = 1, str(e)
    detail = f"backward walks from {len(x)} sampled states reach s0" if not failed else note
    return CheckResult("eq. 1  reachability", failed, 0, failed == 0, detail)


def check_absorbing_sink(graph: PointedGraph, n: int, method: str) -> CheckResult:
    """eq. 2: :math:`\\kappa(\\bot, \\cdot) = \\delta_\\bot`, i.e. no state lists the sink among its parents."""
    a = graph.kappa_b(_nu_states(graph, n, method)).atoms
    bad = int((a.sink & a.mask).any(1).sum())
    return CheckResult("eq. 2  absorbing sink", bad, 0, bad == 0, f"{bad} states have the sink as a parent")


def check_source_has_no_parent(graph: PointedGraph) -> CheckResult:
    """eq. 5: :math:`\\kappa_b(s_0, \\cdot) = 0`."""
    zero = bool(graph.kappa_b(graph.source[None]).is_zero()[0])
    return CheckResult("eq. 5  kappa_b(s0, .) = 0", 0.0 if zero else 1.0, 0, zero, "s0 has no parent" if zero else "s0 has parents")


def check_sink_mass(graph: PointedGraph, n: int, method: str) -> CheckResult:
    """eq. 6: :math:`\\kappa(s, \\{\\bot\\}) \\in \\{0, 1\\}` for every state."""
    a = graph.kappa(_nu_states(graph, n, method)).atoms
    mass = torch.where(a.sink & a.mask, a.log_mass.double().exp(), torch.zeros_like(a.log_mass, dtype=torch.float64)).sum(1)
    err = float(torch.minimum(mass, (mass - 1).abs()).max()) if len(mass) else 0.0
    return CheckResult("eq. 6  kappa(s, {sink}) in {0, 1}", err, 1e-9, err <= 1e-9, "max distance of the sink mass to {0, 1}")


def check_finite_absorption(graph: PointedGraph, n: int, pf: Policy | None) -> CheckResult:
    """eq. 7: :math:`\\kappa^N(s_0, \\cdot)` is concentrated on the sink (no dead ends, no cycles longer than ``N``)."""
    if not graph.nu.pieces:
        states = graph.nu.atoms.x[0][graph.nu.atoms.mask[0]].float()
        frontier = index_of(states, graph.source[None].float()) == torch.arange(len(states))
        dead = 0
        for _ in range(graph.max_length):
            m = graph.kappa(states[frontier])
            dead += int(m.is_zero().sum())
            a = m.atoms
            nxt = index_of(states, a.x[a.mask & ~a.sink])
            frontier = torch.zeros_like(frontier)
            frontier[nxt[nxt >= 0]] = True
        alive = int(frontier.sum())
        ok = alive == 0 and dead == 0
        return CheckResult("eq. 7  absorbed within N", alive + dead, 0, ok, f"N={graph.max_length}: {alive} states still reachable after N steps, {dead} dead ends (exact)")
    try:
        sample_forward(graph, _walk_policy(graph.kappa, pf), n)
        return CheckResult("eq. 7  absorbed within N", 0, 0, True, f"N={graph.max_length}: {n} forward walks reached the sink")
    except (RuntimeError, ValueError) as e:
        return CheckResult("eq. 7  absorbed within N", 1, 0, False, str(e))


PROPOSAL_WIDENING = 1.1
FIT_DRAWS = 2048  # moments from 2048 draws: 1.6% standard error on a scale, well inside the 10% widening


def _fitted_proposals(measure, density, n: int, method: str) -> dict:
    """Gaussian proposals in chart coordinates for the unbounded pieces: the moments of ``n`` draws from the policy's own
    coordinate density, the standard deviation widened by :data:`PROPOSAL_WIDENING`.

    A proposal only decides where the nodes go; its density is exact, so :math:`\\int p\\, d\\kappa` stays an
    unbiased estimate and a wrongly normalised density (or a wrong Jacobian) still shows. A fixed proposal is
    hopeless in high dimension: for a unit Gaussian and a proposal of scale ``s`` the weights' second moment
    grows as :math:`(s^2/\\sqrt{2s^2-1})^k` (``s = 1.1``: 1.015 per coordinate, 1.16 in 10 dimensions).
    """
    if method != "mc":
        return {}
    out = {}
    for c, p in enumerate(measure.pieces):
        if p.chart.domain.bounded:
            continue
        rows = p.mask  # only where the piece is present; elsewhere its nodes are masked out anyway
        if not rows.any():
            continue
        u = density.coords[c](rows).sample((FIT_DRAWS,))  # [draws, rows, k], in the policy's precision (memory)
        k = p.chart.domain.dim
        loc, scale = torch.zeros(measure.batch, k, dtype=torch.float64), torch.ones(measure.batch, k, dtype=torch.float64)
        loc[rows], scale[rows] = u.mean(0).double(), PROPOSAL_WIDENING * u.std(0).double().clamp(min=1e-6)
        out[c] = (loc, scale)
    return out


def check_normalised(graph: PointedGraph, policy: Policy, backward: bool, n: int, method: str) -> CheckResult:
    """eq. 15-16: :math:`\\int P(s, dx) = \\int p(s, x)\\, \\kappa(s, dx) = 1` at states drawn from :math:`\\nu`."""
    s = _nu_states(graph, n, method)
    kernel = graph.kappa_b if backward else graph.kappa
    s = s[~kernel(s).is_zero()]
    with torch.no_grad():
        measure = kernel(s)  # the graph's kernel, not the policy's own (eq. 15-16)
        inner = measure.weighted_points(n, method, proposals=_fitted_proposals(measure, policy(s), n, method))
        M = inner.x.shape[1]
        rows = torch.arange(len(s)).repeat_interleave(M)
        flat_mask = inner.mask.reshape(-1)
        dens = torch.zeros(len(s) * M, dtype=torch.float64)
        sub = policy(s[rows[flat_mask]])
        log_p = sub.log_prob(inner.x.reshape(len(s) * M, -1)[flat_mask].to(s.dtype), inner.sink.reshape(-1)[flat_mask])
        dens[flat_mask] = log_p.double().exp()
    est, var = integrate(inner, dens.reshape(len(s), M))
    # The same estimator runs at every state, so its variance is pooled: a state's own sample variance is floored
    # at the median over states. With near-matched importance weights (bounded, left-skewed) a high estimate comes
    # with a low sample variance, and the max over hundreds of states of a z-score on its own variance fails a
    # correct density (seen: 5.3 "standard errors" whose pooled value was 3.2).
    var = torch.maximum(var, var.median())
    err = (est - 1).abs()
    # round-off of a softmax in the policy's precision, summed over up to a few dozen atoms
    tol = _tolerance(var, torch.ones_like(est), method, rtol=64 * torch.finfo(log_p.dtype).eps)
    i = int((err / tol).argmax())
    name = "eq. 16 P_B integrates to 1" if backward else "eq. 15 P_F integrates to 1"
    return CheckResult(name, float(err[i]), float(tol[i]), bool((err <= tol).all()), f"worst of {len(s)} states: integral {float(est[i]):.6g}")


def check_graph(graph: PointedGraph, pf: Policy | None = None, pb: Policy | None = None, n: int = 256, method: str = "mc", n_functions: int = 8, seed: int = 0) -> Report:
    """Run every condition of Definition 1 (and eq. 15-16 when policies are given) on ``graph``.

    Args:
        n: Monte Carlo (or quadrature) nodes per continuous piece.
        method: ``"mc"`` or ``"quadrature"`` for the continuous pieces.
        n_functions: random test functions for eq. 4.
    """
    if method not in ("mc", "quadrature"):
        raise ValueError(f"unknown integration method {method!r}; valid: mc, quadrature")
    gen = torch.Generator().manual_seed(seed)
    state = torch.get_rng_state()
    torch.manual_seed(seed)
    try:
        results = [
            check_reachability(graph, n, method, pb),
            check_absorbing_sink(graph, n, method),
            check_reversibility(graph, n, method, n_functions, gen),
            check_source_has_no_parent(graph),
            check_sink_mass(graph, n, method),
            check_finite_absorption(graph, n, pf),
        ]
        for policy, backward in ((pf, False), (pb, True)):
            if policy is not None:
                results.append(check_normalised(graph, policy, backward, n, method))
    finally:
        torch.set_rng_state(state)
    return Report(graph.name, tuple(results))
