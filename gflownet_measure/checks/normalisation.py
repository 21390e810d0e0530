"""eq. 15-16: :math:`P_F(s, \\cdot)` and :math:`P_B(s', \\cdot)` integrate to one against the graph's :math:`\\kappa(s, \\cdot)` and :math:`\\kappa_b(s', \\cdot)`.

:math:`\\int p(s, x)\\, \\kappa(s, dx)` is exact over atoms. Over a piece, the nodes are drawn from a proposal with the
moments of the policy's coordinate density (:func:`policy_nodes`), whose own density is exact and independent of the
policy's ``log_prob``, the quantity under test: for a correct policy the importance weights are nearly constant, so a few
hundred nodes decide, and a policy whose ``log_prob`` is wrong (a dropped Jacobian, a density off its box) still shows
unbiasedly. With ``method="quadrature"`` the pieces are integrated by Gauss rules instead, the tolerance being the change
from the coarse rule (:mod:`.integration`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

import torch
from torch import Tensor
from torch.distributions import Beta, Distribution, Independent, MultivariateNormal, Normal

from ..densities import KernelDensity, Policy
from ..graph import PointedGraph
from ..measures import Box, Measure, WeightedPoints
from .integration import QUADRATURE_SAFETY, STATE_BUDGET, Z_SCORE, Rule, integrate, nodes, nu_states, quadrature_fits
from .results import CONDITIONS, POWER, UNDECIDED, CheckResult, verdict

__all__ = [
    "PROPOSAL_WIDENING",
    "FIT_DRAWS",
    "DEFENSIVE",
    "SAMPLES_MARGIN",
    "policy_nodes",
    "normalisation_method",
    "remedy",
    "weakest_piece",
    "check_normalised",
]

PROPOSAL_WIDENING = 1.05
"""The Gaussian proposal's scale over the policy's: its weights' second moment is :math:`(s^2/\\sqrt{2s^2-1})^k`, 1.0043 per
coordinate (1.04 in 10 dimensions, where 1.1 gave 1.16 and, at 64 nodes, a tolerance of a quarter of the integral)."""
FIT_DRAWS = 2048  # moments from 2048 draws (when the density states none): 1.6% standard error on a scale, inside the 5% widening
DEFENSIVE = 0.1
"""Share of uniform nodes in the proposal on a bounded box: the weights are then at most ``|U| q / 0.1`` wherever the
fitted part misses the density ``q`` (a mode the moments blur), and no part of the box goes unvisited."""
CONCENTRATION = (0.05, 1e3)  # fitted Beta concentrations are kept within these bounds (a draw-free or degenerate fit)


def _moments(density: KernelDensity, c: int, rows: Tensor) -> tuple[Tensor, Tensor]:
    """Mean ``[R, k]`` and covariance (float64) of the policy's coordinate density of piece ``c`` at the ``R`` rows: the
    distribution's own when it states them (finite), as variances ``[R, k]`` for a diagonal one (no ``k x k`` matrix: a
    DAG's 2,220 MLP parameters) or a matrix ``[R, k, k]``, else the matrix of :data:`FIT_DRAWS` draws. Wrong moments
    only make the proposal worse, never the estimate biased."""
    q = density.coords[c](rows)
    try:
        mean = q.mean.double()
        cov = q.covariance_matrix.double() if hasattr(q, "covariance_matrix") else q.variance.double()
        if bool(torch.isfinite(mean).all() & torch.isfinite(cov).all()):
            return mean, cov
    except NotImplementedError:
        pass
    draws = q.sample((FIT_DRAWS,)).double()  # [draws, R, k]
    centred = draws - draws.mean(0)
    return draws.mean(0), torch.einsum("nri,nrj->rij", centred, centred) / (FIT_DRAWS - 1)


def _variances(cov: Tensor) -> Tensor:
    """``[R, k]``: the variances of a covariance given as variances ``[R, k]`` or as a matrix ``[R, k, k]``."""
    return cov if cov.dim() == 2 else cov.diagonal(dim1=-2, dim2=-1)


def _beta_proposal(box: Box, mean: Tensor, cov: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """``n`` nodes ``u [R, n, k]`` on the bounded ``box`` and their log-density: :math:`(1 - \\delta)\\prod_i \\mathrm{Beta}` with the
    policy's moments (mapped to ``[0, 1]``; moments of a density reaching beyond the box are clamped into it), the share
    :data:`DEFENSIVE` = :math:`\\delta` uniform."""
    lo = torch.tensor(box.low, dtype=torch.float64)
    width = torch.tensor(box.high, dtype=torch.float64) - lo
    m, v = ((mean - lo) / width).clamp(1e-6, 1 - 1e-6), (_variances(cov) / width.square()).clamp(min=1e-12)  # [R, k]
    total = (m * (1 - m) / v - 1).clamp(min=2 * CONCENTRATION[0])
    beta = Beta((m * total).clamp(*CONCENTRATION), ((1 - m) * total).clamp(*CONCENTRATION))
    R, k = m.shape
    eps = torch.finfo(torch.float64).eps
    fitted = beta.sample((n,)).permute(1, 0, 2)
    uniform = torch.rand(R, n, k, dtype=torch.float64)
    t = torch.where((torch.rand(R, n, 1) < DEFENSIVE), uniform, fitted).clamp(eps, 1 - eps)
    log_beta = beta.log_prob(t.permute(1, 0, 2)).permute(1, 0, 2).sum(-1)
    log_r = torch.logaddexp(math.log1p(-DEFENSIVE) + log_beta, torch.full_like(log_beta, math.log(DEFENSIVE))) - width.log().sum()
    return lo + width * t, log_r


def _gaussian_proposal(box: Box, mean: Tensor, cov: Tensor, n: int, active: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``n`` nodes ``u [R, n, k]`` from :math:`\\mathcal N(\\text{mean}, 1.05^2\\, \\Sigma)` with the policy's moments (an unbounded box), and their log-density.

    A fixed proposal is hopeless in high dimension: for a unit Gaussian and a proposal of scale ``s`` the weights'
    second moment grows as :math:`(s^2/\\sqrt{2s^2-1})^k` (:data:`PROPOSAL_WIDENING`); the full covariance follows a
    correlated density (JSP-GFN's full-covariance weights), whose weights against a diagonal proposal are heavy-tailed.
    A diagonal covariance (variances ``[R, k]``, :func:`_moments`) is drawn coordinate by coordinate (no ``k x k`` matrix). On a chart of varying
    dimension (``active [R, k]``) only the active coordinates are drawn: the others are 0 and their block of the
    proposal, made independent of the active one, is left out of the density (the density w.r.t. Lebesgue measure on
    the active coordinates).
    """
    k = mean.shape[-1]
    if active is not None:  # decouple the inactive block: unit variance there, no covariance with the active coordinates
        mean = torch.where(active, mean, torch.zeros_like(mean))
        if cov.dim() == 2:
            cov = torch.where(active, cov, torch.ones_like(cov))
        else:
            cov = torch.where(active[:, :, None] & active[:, None, :], cov, torch.diag_embed(torch.ones_like(mean)))
    per_coordinate = None
    q: Distribution
    if cov.dim() == 2:  # a diagonal covariance, drawn coordinate by coordinate
        coordinates = Normal(mean, PROPOSAL_WIDENING * cov.clamp(min=1e-24).sqrt())
        q = Independent(coordinates, 1)
        u = q.sample((n,))  # [n, R, k]
        per_coordinate = coordinates.log_prob(u)
    else:
        jitter = 1e-12 * (1 + cov.diagonal(dim1=-2, dim2=-1).amax(-1))[:, None, None] * torch.eye(k, dtype=cov.dtype)
        q = MultivariateNormal(mean, scale_tril=PROPOSAL_WIDENING * torch.linalg.cholesky(cov + jitter))
        u = q.sample((n,))
    log_q = q.log_prob(u)  # [n, R]
    if active is not None:
        # the inactive coordinates are independent N(0, 1.05^2) under q: divide their density out, then set them to 0
        inactive = Normal(0.0, PROPOSAL_WIDENING).log_prob(u) if per_coordinate is None else per_coordinate
        log_q = log_q - torch.where(active, torch.zeros_like(u), inactive).sum(-1)
        u = torch.where(active, u, torch.zeros_like(u))
    return u.permute(1, 0, 2), log_q.T


def policy_nodes(measure: Measure, density: KernelDensity, n: int) -> WeightedPoints:
    """Integration nodes for ``measure`` (a kernel at ``B`` states): its atoms, and ``n`` importance-sampling nodes per
    present piece from a proposal with the moments of the policy's coordinate density (:func:`_moments`): a product of Betas mixed
    with a uniform share on a bounded box, a widened Gaussian otherwise. Nodes outside the box (a half-infinite
    coordinate) get weight zero. The proposal's density is its own, never the policy's ``log_prob``."""
    a = measure.atoms
    B, K = a.mask.shape
    xs, sinks, lws, masks, comp = [a.x.double()], [a.sink], [a.log_mass.double()], [a.mask], [torch.arange(K)]
    for c, p in enumerate(measure.pieces):
        rows = p.mask
        if not rows.any():
            continue
        box = p.chart.domain
        mean, cov = _moments(density, c, rows)
        active = p.chart.active(p.context[rows])
        if active is not None and box.bounded:
            raise ValueError(
                "the normalisation check draws a chart of varying dimension (Chart.active) from a Gaussian proposal: its box must be the real line"
            )
        u, log_r = _beta_proposal(box, mean, cov, n) if box.bounded else _gaussian_proposal(box, mean, cov, n, active)  # [R, n, k], [R, n]
        lo, hi = (torch.tensor(v, dtype=torch.float64) for v in (box.low, box.high))
        inside = ((u >= lo) & (u <= hi)).all(-1)
        ctx = p.context[rows][:, None].expand(-1, n, -1).reshape(-1, p.context.shape[1])
        flat = u.clamp(lo, hi).reshape(len(ctx), -1).to(ctx.dtype)
        x = torch.zeros(B, n, a.x.shape[2], dtype=torch.float64)
        x[rows] = p.chart.forward(ctx, flat).double().reshape(-1, n, x.shape[2])
        lw = torch.zeros(B, n, dtype=torch.float64)
        lw[rows] = p.chart.log_abs_det_jacobian(ctx, flat).double().reshape(-1, n) - log_r - math.log(n)
        mask = torch.zeros(B, n, dtype=torch.bool)
        mask[rows] = inside
        xs.append(x)
        lws.append(lw)
        sinks.append(torch.zeros(B, n, dtype=torch.bool))
        masks.append(mask)
        comp.append(torch.full((n,), K + c))
    return WeightedPoints(torch.cat(xs, 1), torch.cat(sinks, 1), torch.cat(lws, 1), torch.cat(masks, 1), torch.cat(comp), K)


def _integral(policy: Policy, s: Tensor, inner: WeightedPoints) -> tuple[Tensor, Tensor, Tensor]:
    """:math:`\\int p(s, x)\\, \\kappa(s, dx)` ``[B]``, its Monte Carlo variance ``[B]``, and the policy's log-densities (their dtype sets the round-off).

    The log-density joins the nodes' log-weights before anything is exponentiated: on thousands of coordinates (the
    parameters of a DAG's CPDs) the importance weight and the density are each beyond float64, their product is near 1.
    """
    M = inner.x.shape[1]
    rows = torch.arange(len(s)).repeat_interleave(M)
    flat_mask = inner.mask.reshape(-1)
    log_dens = torch.zeros(len(s) * M, dtype=torch.float64)
    origin, x, sink = s[rows[flat_mask]], inner.x.reshape(len(s) * M, -1)[flat_mask].to(s.dtype), inner.sink.reshape(-1)[flat_mask]
    chunk = max(1, STATE_BUDGET // max(1, policy.kernel(s[:1]).atoms.count * s.shape[1]))  # the kernel's atoms at a chunk of nodes
    log_p = (
        torch.cat([policy(origin[i : i + chunk]).log_prob(x[i : i + chunk], sink[i : i + chunk]) for i in range(0, len(origin), chunk)])
        if len(origin)
        else x.new_zeros(0)
    )
    log_dens[flat_mask] = log_p.double()
    est, var = integrate(replace(inner, log_w=inner.log_w + log_dens.reshape(len(s), M)), torch.ones(len(s), M, dtype=torch.float64))
    return est, var, log_p


def _median(v: Tensor, rows: Tensor) -> Tensor:
    """The median of ``v`` over ``rows`` (0 if none)."""
    return v[rows].median() if bool(rows.any()) else torch.zeros((), dtype=v.dtype)


SAMPLES_MARGIN = 2.0
"""An undecided importance-sampling row suggests ``n`` times ``SAMPLES_MARGIN (power / POWER)^2`` nodes, up to a power of
two (:func:`remedy`): its tolerance falls as :math:`1/\\sqrt n`, and the margin covers the spread of a median tolerance
between draws."""


def normalisation_method(measure: Measure, method: str) -> str:
    """The rule for eq. 15-16 on the kernel ``measure``: ``method`` itself, or for ``"auto"`` quadrature where every piece
    fits it (:func:`~.integration.quadrature_fits`: at most :data:`~.integration.QUADRATURE_MAX_DIM` coordinates, as eq. 4
    under :func:`~.integration.pair_method`) or lies on a periodic box, and importance sampling (``"mc"``) otherwise."""
    if method != "auto":
        return method
    fits = all(quadrature_fits(p.chart.domain) or p.chart.domain.periodic for p in measure.pieces)
    return "quadrature" if measure.pieces and fits else "mc"


def remedy(box: Box | None, method: str, n: int, power: float, other: bool) -> str:
    """What would decide a row left undecided by ``n`` nodes of ``method`` with median tolerance ``power`` on a piece over
    ``box`` (``None``: the draws of a sampled measure): more nodes (``--samples``, :data:`SAMPLES_MARGIN`), or (``other``)
    the other rule where it fits the box."""
    if method == "mc":
        need = n * 2 ** max(1, math.ceil(math.log2(SAMPLES_MARGIN * (power / POWER) ** 2)))
        fits = other and box is not None and (quadrature_fits(box) or box.periodic)
        return f"undecided at {n} draws: try --samples {need}" + (" or --method quadrature" if fits else "")
    return f"undecided at {n} nodes: try --samples {4 * n}" + (" or --method mc" if other else "")


def weakest_piece(measure: Measure, statistical: Tensor) -> tuple[int, float]:
    """``(c, median)``: the piece of ``measure`` that lacks power, and the median ``statistical`` tolerance ``[B]`` over the
    states where it is present: of the pieces whose median exceeds :data:`~.results.POWER`, the one present at the most
    states (it carries the median the verdict reads), else the one of the largest median."""
    present = measure.component_mask()[:, measure.atoms.count :]
    medians = [float(statistical[present[:, c]].median()) if bool(present[:, c].any()) else -math.inf for c in range(present.shape[1])]
    c = max(range(len(medians)), key=lambda c: (medians[c] > POWER, int(present[:, c].sum()) if medians[c] > POWER else medians[c]))
    return c, medians[c]


class _Estimate(NamedTuple):
    """eq. 15-16 at the states under one rule: the integrals ``est [B]``, their statistical tolerance ``[B]``, the policy's
    log-densities (their dtype sets the round-off) and the rule in words."""

    est: Tensor
    statistical: Tensor
    log_p: Tensor
    rule: str


def _estimate(policy: Policy, s: Tensor, measure: Measure, on_pieces: Tensor, method: str, n: int) -> _Estimate:
    """The integrals of ``policy`` against ``measure`` (the kernel at ``s``) by ``method`` with ``n`` nodes per piece, and
    their tolerance (:func:`check_normalised`)."""
    if method == "quadrature":
        est, _, log_p = _integral(policy, s, nodes(measure, Rule("quadrature", n)))
        change = (est - _integral(policy, s, nodes(measure, Rule("quadrature", n, coarse=True)))[0]).abs()
        statistical = QUADRATURE_SAFETY * torch.maximum(change, _median(change, on_pieces))  # floored like the variances below
        return _Estimate(est, statistical, log_p, f"quadrature, {n} nodes per piece, {QUADRATURE_SAFETY:g} x the change from 3/4 of the nodes per coordinate")
    est, var, log_p = _integral(policy, s, policy_nodes(measure, policy(s), n))
    # The same estimator runs at every state, so its variance is pooled: a state's own sample variance is floored
    # at the median over the states with a piece (the others are exact sums). With near-matched importance weights
    # (bounded, left-skewed) a high estimate comes with a low sample variance, and the max over hundreds of states
    # of a z-score on its own variance fails a correct density (seen: 5.3 "standard errors" whose pooled value was 3.2).
    statistical = Z_SCORE * torch.maximum(var, _median(var, on_pieces)).sqrt()
    return _Estimate(est, statistical, log_p, f"importance sampling, {n} nodes per piece, {Z_SCORE:g} standard errors")


def _judged(e: _Estimate, on_pieces: Tensor) -> tuple[Tensor, Tensor, bool, bool, float, int]:
    """``(err, tol, passed, undecided, power, worst)`` of the comparisons :math:`|\\int - 1|` (:func:`~.results.verdict`)."""
    err = (e.est - 1).abs()
    # round-off of a softmax in the policy's precision, summed over up to a few dozen atoms, relative to 1 + |integral|
    tol = e.statistical + 64 * torch.finfo(e.log_p.dtype).eps * (1 + e.est.abs())
    return err, tol, *verdict(err, tol, e.statistical, torch.ones_like(e.est), on_pieces)


def check_normalised(graph: PointedGraph, policy: Policy, backward: bool, n: int, method: str) -> CheckResult:
    """eq. 15-16: :math:`\\int P(s, dx) = \\int p(s, x)\\, \\kappa(s, dx) = 1` at states drawn from :math:`\\nu` (in float32, the policies' precision).

    ``method``: ``"mc"`` uses :func:`policy_nodes`, ``"quadrature"`` Gauss rules (the trapezoidal rule of a periodic
    :class:`~gflownet_measure.boxes.Box`, where a moment-fitted proposal misses the modes of a von Mises mixture), and
    ``"auto"`` quadrature where every piece fits it (:func:`normalisation_method`, as eq. 4 does), importance sampling where
    a piece does not. Under ``"auto"`` a quadrature row that does not pass is decided again by importance sampling, whose
    error bars hold for any density: the change from the coarse rule underestimates the error of a density too sharp for
    the nodes (a Brownian bridge's Gaussian against a Gauss-Hermite rule of the box's scale, seen failing at 0.99963) or
    singular at an end (a Beta concentration below 1); a quadrature FAIL stands only where importance sampling is
    undecided. An undecided row
    names the piece that lacks power and the ``n`` (``--samples``) or method that would decide it (:func:`remedy`). Each state is one
    comparison of :math:`|\\int - 1|`; the size it is judged against for power is 1.
    """
    s = nu_states(graph, n, torch.float32)
    kernel = graph.kappa_b if backward else graph.kappa
    s = s[~kernel(s).is_zero()]
    with torch.no_grad():
        measure = kernel(s)  # the graph's kernel, not the policy's own (eq. 15-16)
        on_pieces = measure.component_mask()[:, measure.atoms.count :].any(1)  # the states whose integral is estimated
        rule = normalisation_method(measure, method)
        e = _estimate(policy, s, measure, on_pieces, rule, n)
        err, tol, passed, undecided, power, i = _judged(e, on_pieces)
        fallback = not passed and method == "auto" and rule == "quadrature"
        if fallback:  # quadrature is trusted to pass only (docstring): importance sampling decides the rest
            sampled = _estimate(policy, s, measure, on_pieces, "mc", n)
            judged = _judged(sampled, on_pieces)
            if not judged[3] or undecided:  # importance sampling decided, or neither did
                rule, e, (err, tol, passed, undecided, power, i) = "mc", sampled, judged
    name = CONDITIONS["P_B" if backward else "P_F"]
    if undecided:
        c, piece_power = weakest_piece(measure, e.statistical)
        chart = measure.pieces[c].chart
        advice = remedy(chart.domain, rule, n, max(power, piece_power), other=not fallback)
        piece = f"piece {c} ({type(chart).__name__}, {chart.domain.dim} coordinate{'s' if chart.domain.dim != 1 else ''})"
        detail = f"{UNDECIDED}; {piece} {advice} (median tolerance {power:.2g} > {POWER:g}; {e.rule})"
    elif passed:
        detail = f"worst of {len(s)} states: integral {float(e.est[i]):.6g} ({e.rule}; median tolerance {power:.2g})"
    else:
        detail = f"worst of {len(s)} states: integral {float(e.est[i]):.6g} at s={s[i].tolist()} ({e.rule})"
    return CheckResult(name, float(err[i]), float(tol[i]), passed, detail, undecided)
