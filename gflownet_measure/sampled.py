"""Reference measures given by an importance-sampling rule instead of a list of atoms and pieces.

The reference measure :math:`\\nu` of a pointed graph (Lahlou et al. 2023, Definition 1) and the terminal measure
:math:`\\kappa_b(\\bot, \\cdot)` enter the theory only through integrals: eq. 4,
:math:`\\nu \\otimes \\kappa = \\mathrm{swap}(\\nu \\otimes \\kappa_b)`, integrates test functions against them. Where
the support cannot be listed (the DAG x Theta space of JSP-GFN, :math:`\\nu = \\sum_G \\delta_{(G, \\#)} +
\\sum_G \\mathrm{Leb}(\\Theta_G)` over some 10^70 DAGs at d = 20) a :class:`SampledMeasure` describes :math:`\\mu` by

- a rule drawing ``M`` i.i.d. points :math:`x_m \\sim q` with log-weights
  :math:`\\log w_m = \\log \\frac{d\\mu}{dq}(x_m) - \\log M`, so that for every :math:`\\mu`-integrable ``f``

  .. math:: \\mathbb E\\Big[\\sum_{m=1}^M w_m f(x_m)\\Big] = \\int f\\, d\\mu;

  (:math:`\\frac{d\\mu}{dq}` is the reference density over the proposal density, e.g. :math:`|J| / q(u)` on a
  chart; a draw outside the support of :math:`\\mu` has :math:`w_m = 0`, ``log_w = -inf``);
- a membership test :math:`x \\in \\mathrm{supp}\\, \\mu`.

The theory checks (:mod:`gflownet_measure.checks`) then draw states from it and integrate eq. 4 over it by Monte
Carlo, with the sample variance of the ``M`` i.i.d. terms as the estimate's variance.

A rule may draw its points in *blocks*: the points of a block are drawn together (one from each of several proposals
:math:`q_j`, sharing what they like), the ``L`` blocks are i.i.d. With one point per proposal and block, the balance
heuristic of multiple importance sampling, :math:`w_m = \\frac{d\\mu}{d\\lambda}(x_m) / (L \\sum_j q_j(x_m))`, keeps
the sum unbiased whatever the blocks share, and its variance is ``L`` times the variance of one block's sum, which is
what the checks estimate. A proposal suited to each integral of eq. 4 (pairs weigh states by two envelopes, pairs into
the sink by one), and points that share a block where the two sides of eq. 4 see them alike, are how a space keeps
those variances small where one proposal for all of them would not (:mod:`gflownet_measure.jsp_gfn.dag_params.reference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from .measures import WeightedPoints

__all__ = ["SampledMeasure"]


@dataclass(frozen=True)
class SampledMeasure:
    """A measure :math:`\\mu` on states given by an unbiased importance-sampling rule and a support test (module docstring).

    Attributes:
        draw: ``draw(n, generator) -> (x [M, D], sink [M] bool, log_w [M])``: ``M`` i.i.d. draws (``M = n`` as a rule) with
            :math:`\\mathbb E[\\sum_m e^{\\text{log\\_w}_m} f(x_m)] = \\int f\\, d\\mu`; ``log_w = -inf`` marks a draw
            of weight zero, whose ``x`` must still be a state ``encode`` accepts (it is masked out of every integral).
            ``generator`` (possibly ``None``: torch's global one) drives every random number, so that one seed repeats the draws.
            It may also return ``block [M]`` (long, ``0..L-1``): draws of one block are made together, blocks are i.i.d.
            (module docstring); without it, every draw is its own block.
        contains: ``contains(x [B, D]) -> [B] bool``: :math:`x \\in \\mathrm{supp}\\, \\mu` (``x`` never the sink).
        label: names the measure in reports.
        atomic: ``atomic(x [B, D]) -> [B] bool``: :math:`\\mu(\\{x\\}) > 0`, ``x`` an atom of :math:`\\mu` rather than a point
            of a part with a density (eq. 4 compares atomic and diffuse pairs apart, :mod:`gflownet_measure.checks.reversibility`);
            ``None``: not known, and eq. 4 compares all pairs together.
    """

    draw: Callable[[int, torch.Generator | None], tuple[Tensor, ...]]
    contains: Callable[[Tensor], Tensor]
    label: str = "sampled measure"
    atomic: Callable[[Tensor], Tensor] | None = None

    def drawn(self, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``draw(n, generator)`` checked: ``x [M, D]``, ``sink [M]`` bool, ``log_w [M]`` in float64, neither NaN nor ``+inf``,
        and ``block [M]`` long (``0..M-1`` where ``draw`` gives none)."""
        x, sink, log_w, *rest = self.draw(n, generator)
        block = rest[0].long() if rest else torch.arange(len(x))
        if x.dim() != 2 or sink.shape != x.shape[:1] or log_w.shape != x.shape[:1] or block.shape != x.shape[:1]:
            raise ValueError(
                f"{self.label}: draw must return x [M, D], sink [M], log_w [M] (and block [M]), got "
                f"{tuple(x.shape)}, {tuple(sink.shape)}, {tuple(log_w.shape)}, {tuple(block.shape)}"
            )
        log_w = log_w.double()
        if (torch.isnan(log_w) | (log_w == float("inf"))).any():
            raise ValueError(f"{self.label}: draw returned a log-weight that is NaN or +inf; a log-weight must be finite or -inf")
        return x, sink.bool(), log_w, block

    def states(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``[M', D]``: the states drawn by ``draw(n, generator)`` that carry weight (not the sink, ``log_w > -inf``)."""
        x, sink, log_w, _ = self.drawn(n, generator)
        return x[~sink & (log_w > float("-inf"))]

    def weighted_points(self, n: int, generator: torch.Generator | None = None) -> WeightedPoints:
        """The draws as a batch-one :class:`~gflownet_measure.measures.WeightedPoints` (``x [1, M, D]`` in float64), all
        of one Monte Carlo component (``n_atoms = 0``) with their blocks, so that
        :func:`~gflownet_measure.checks.integration.integrate` estimates the variance of :math:`\\sum_m w_m f(x_m)` as
        ``L`` times the sample variance of the ``L`` blocks' sums; draws of weight zero stay in as masked nodes, which
        count as zero terms of that variance."""
        x, sink, log_w, block = self.drawn(n, generator)
        M = len(x)
        return WeightedPoints(x.double()[None], sink[None], log_w[None], (log_w > float("-inf"))[None], torch.zeros(M, dtype=torch.long), 0, block)
