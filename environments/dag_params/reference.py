"""The reference measures of the DAG x Theta space without listing the DAGs: an importance rule for ``d > 5``.

:math:`\\nu = \\sum_G \\delta_{(G, \\#)} + \\sum_G \\lambda_{\\Theta_G}` and the terminal measure :math:`\\sum_G \\lambda_{\\Theta_G}`
(:mod:`~environments.dag_params.space`) sum over every DAG on ``d`` nodes, about :math:`10^{72}` at ``d = 20``. Their
integrals are estimated by importance sampling on an extended space of (graph, node order) pairs:

- the proposal draws a uniformly random order :math:`\\pi` of the nodes, then each of the :math:`d(d-1)/2` edges that
  follow the order independently with probability :math:`p`:
  :math:`q(G, \\pi) = \\frac{1}{d!}\\, p^{|E|} (1 - p)^{d(d-1)/2 - |E|}`;
- :math:`h(\\pi \\mid G) = \\prod_{t=1}^{d} 1 / c_t(\\pi, G)`, with :math:`c_t` the number of sources of :math:`G` restricted to
  the nodes not yet placed before step ``t``, is the probability that "repeatedly remove a uniformly random source" lists
  :math:`G`'s nodes in the order :math:`\\pi`; it sums to one over the linear extensions of :math:`G` (the orders
  :math:`q` can pair with :math:`G`), so

  .. math:: \\sum_G f(G) = \\mathbb E_{(G, \\pi) \\sim q}\\Big[\\frac{h(\\pi \\mid G)}{q(G, \\pi)} f(G)\\Big]

  exactly, with no count of linear extensions (a #P-hard number) needed;
- on :math:`\\Theta_G` the active coordinates are :math:`\\mathcal N(0, c^2)` (``proposal_scale`` c), weighted by the inverse of
  that density (a Lebesgue integral); for :math:`\\nu` each draw is an intermediate or a terminal state with probability 1/2.

Graphs with more than ``max_parents`` parents at a node lie outside the space: their weight is 0 and ``contains`` is false.
"""
from __future__ import annotations

import math
from functools import partial

import torch
from torch import Tensor

from gflownet_measure.gaussian import LOG_2PI
from gflownet_measure.sampled import SampledMeasure

from .dags import is_dag
from .states import ActiveFn, join, split

__all__ = ["PROPOSAL_EDGE_ODDS", "PROPOSAL_SCALE", "draw_dags", "sampled_measures"]

PROPOSAL_EDGE_ODDS = math.exp(-0.5)
"""Odds :math:`p / (1 - p)` of each edge under the proposal over graphs: those of the theory checks' envelope
:math:`e^{-\\|e\\|^2/2}`, which weighs a graph by :math:`e^{-1/2}` per edge (an adjacency entry 1), so that the checks'
integrals over graphs are sampled where their mass is."""
PROPOSAL_SCALE = 1 / math.sqrt(2 * math.pi)
"""Standard deviation :math:`c` of the Gaussian proposal on each parameter: the checks' envelope on it,
:math:`e^{-\\pi \\theta_i^2}` (the space's ``encode`` scales parameters by :math:`\\sqrt{2\\pi}`), so that the importance weights
of eq. 4's integrals stay bounded with 2,220 parameters, where any other scale's variance grows exponentially in their
number."""


def draw_dags(n: int, d: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """``n`` graphs ``adj [n, d, d]`` from the order proposal of the module docstring and their log-weights
    :math:`\\log h(\\pi | G) - \\log q(G, \\pi)` ``[n]`` float64, so that :math:`\\frac1n \\sum_k w_k f(G_k)` estimates :math:`\\sum_G f(G)`."""
    p = PROPOSAL_EDGE_ODDS / (1 + PROPOSAL_EDGE_ODDS)
    order = torch.rand(n, d, generator=generator).argsort(1)  # [n, d]: order[b, t] = the node at position t
    position = order.argsort(1)  # [n, d]: the position of each node
    forward = position[:, :, None] < position[:, None, :]  # i before j
    adj = forward & (torch.rand(n, d, d, generator=generator) < p)
    n_edges = adj.flatten(1).sum(1).double()
    pairs = d * (d - 1) / 2
    log_q = -math.lgamma(d + 1) + n_edges * math.log(p) + (pairs - n_edges) * math.log1p(-p)
    log_h = torch.zeros(n, dtype=torch.float64)
    placed = torch.zeros(n, d, dtype=torch.bool)
    rows = torch.arange(n)
    for t in range(d):
        remaining = ~placed
        indegree = (adj & remaining[:, :, None]).sum(1)  # parents among the nodes not yet placed
        sources = (remaining & (indegree == 0)).sum(1)
        log_h = log_h - sources.double().log()
        placed[rows, order[:, t]] = True
    return adj, log_h - log_q


def _contains(d: int, n_params: int, active: ActiveFn, max_parents: int | None, terminal_only: bool, x: Tensor) -> Tensor:
    """``[B]`` bool: ``x`` is a state of the space (a DAG within ``max_parents``, a 0/1 stop flag, parameters 0 off
    :math:`\\Theta_G` and everywhere at an intermediate state); ``terminal_only``: and stopped."""
    if x.shape[1] != d * d + n_params + 1:
        return torch.zeros(x.shape[0], dtype=torch.bool)
    flags = x[:, : d * d]
    adj, theta, stopped = split(x, d)
    ok = ((flags == 0) | (flags == 1)).all(1) & ((x[:, -1] == 0) | (x[:, -1] == 1)) & is_dag(adj)
    if max_parents is not None:
        ok &= (adj.sum(1) <= max_parents).all(1)
    on = active(adj) & stopped[:, None]
    ok &= torch.where(on, torch.isfinite(theta), theta == 0).all(1)
    return ok & stopped if terminal_only else ok


def _draw(d: int, n_params: int, active: ActiveFn, max_parents: int | None, scale: float, terminal_only: bool, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``(x [n, D], sink [n], log_w [n])``: ``n`` states of :math:`\\nu` (or of the terminal measure) with importance log-weights (module docstring)."""
    adj, log_w = draw_dags(n, d, generator)
    if max_parents is not None:
        log_w = torch.where((adj.sum(1) <= max_parents).all(1), log_w, torch.full_like(log_w, -math.inf))
    stopped = torch.ones(n, dtype=torch.bool) if terminal_only else torch.rand(n, generator=generator) < 0.5
    if not terminal_only:
        log_w = log_w + math.log(2.0)
    on = active(adj) & stopped[:, None]  # [n, P]
    z = torch.randn(n, n_params, dtype=torch.float64, generator=generator) * scale
    theta = torch.where(on, z, torch.zeros_like(z))
    log_q_theta = torch.where(on, -0.5 * (z / scale) ** 2 - math.log(scale) - 0.5 * LOG_2PI, torch.zeros_like(z)).sum(1)
    x = join(adj, n_params, theta, stopped, dtype=torch.float64)
    return x, torch.zeros(n, dtype=torch.bool), log_w - log_q_theta - math.log(n)


def sampled_measures(d: int, n_params: int, active: ActiveFn, max_parents: int | None = None, proposal_scale: float = PROPOSAL_SCALE) -> tuple[SampledMeasure, SampledMeasure]:
    """:math:`\\nu` and the terminal measure of the DAG x Theta space as importance rules (module docstring)."""

    def measure(terminal_only: bool, label: str) -> SampledMeasure:
        return SampledMeasure(
            draw=partial(_draw, d, n_params, active, max_parents, proposal_scale, terminal_only),
            contains=partial(_contains, d, n_params, active, max_parents, terminal_only),
            label=label,
        )

    return measure(False, "nu: DAGs by random orders, Gaussian parameters"), measure(True, "terminal measure: DAGs by random orders, Gaussian parameters")
