"""The reference measures of the DAG x Theta space without listing the DAGs: an importance rule for ``d > 5``.

:math:`\\nu = \\sum_G \\delta_{(G, \\#)} + \\sum_G \\lambda_{\\Theta_G}` and the terminal measure :math:`\\sum_G \\lambda_{\\Theta_G}`
(:mod:`~gflownet_measure.jsp_gfn.dag_params.space`) sum over every DAG on ``d`` nodes, about :math:`10^{72}` at ``d = 20``. Their
integrals are estimated by importance sampling from exact draws of DAGs with probability proportional to
:math:`x^{|E|}` (:mod:`~gflownet_measure.jsp_gfn.bayesnets.weighted_dags`, which sums :math:`Z_x = \\sum_G x^{|E(G)|}` exactly by
Robinson's recurrence):

- a DAG drawn with :math:`P_x(G) = x^{|E|} / Z_x` has weight :math:`1 / P_x(G)`, so that
  :math:`\\sum_G f(G) = \\mathbb E_{G \\sim P_x}[f(G) / P_x(G)]` exactly; where ``f`` weighs a graph by :math:`x^{|E|}`
  (up to a factor that varies little between graphs) every draw has nearly the same term, and the estimate nearly no
  variance. The theory checks' envelope :math:`e^{-\\|e\\|^2/2}` weighs a graph by :math:`e^{-1/2}` per edge (an
  adjacency entry 1), and the integrals of eq. 4 (Lahlou et al. 2023, Definition 1),

  .. math:: \\int f(s, s')\\, \\nu(ds) \\kappa(s, ds') = \\int f(s, s')\\, \\nu(ds') \\kappa_b(s', ds) \\;\\; (+ \\text{the pairs into the sink}),

  weigh a pair of states by two envelopes, :math:`e^{-1}` per edge (:data:`PAIR_EDGE_WEIGHT`), and a pair into the
  sink, :math:`f(s, \\bot) = \\cos(\\cdot)\\, g(s)`, by one (:data:`STATE_EDGE_WEIGHT`);
- :math:`\\nu` is drawn in ``L = n`` i.i.d. blocks of :data:`BLOCK_THETAS` + 2 states
  (:class:`~gflownet_measure.sampled.SampledMeasure`): :math:`(G, \\#)` and :math:`(G, \\theta_i)`,
  ``i = 1..BLOCK_THETAS``, with one :math:`G \\sim P_{e^{-1}}` (the intermediate state's pairs with its children and
  parents, and the pairs :math:`((G, \\#), (G, \\theta))` that eq. 4 sees from both sides: sharing ``G``, the two sides'
  terms of a block move together, and the variance of their difference is small), and :math:`(G', \\theta')` with
  :math:`G' \\sim P_{e^{-1/2}}` (pairs into the sink). An intermediate state weighs :math:`1 / (L P_{e^{-1}}(G))`; a
  terminal one, drawn by both terminal proposals, the balance heuristic :math:`1 / (L (k P_{e^{-1}}(G) +
  P_{e^{-1/2}}(G)))` (``k`` = :data:`BLOCK_THETAS`), never more than :math:`1 / (L P_j(G))` for either, so that both
  of its integrals keep a bounded variance. The terminal measure's ``n`` draws are i.i.d., :math:`G \\sim P_{e^{-1/2}}`;
- on :math:`\\Theta_G` the active coordinates are :math:`\\mathcal N(0, c^2)` (``proposal_scale`` c), weighted by the inverse of
  that density (a Lebesgue integral).

Graphs with more than ``max_parents`` parents at a node lie outside the space: their weight is 0 and ``contains`` is false.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import Tensor

from gflownet_measure.gaussian import LOG_2PI
from gflownet_measure.jsp_gfn.bayesnets.dags import is_dag
from gflownet_measure.jsp_gfn.bayesnets.weighted_dags import draw_weighted_dags, log_total
from gflownet_measure.jsp_gfn.dag_params.states import ActiveFn, join, split
from gflownet_measure.sampled import SampledMeasure

__all__ = ["STATE_EDGE_WEIGHT", "PAIR_EDGE_WEIGHT", "BLOCK_THETAS", "PROPOSAL_SCALE", "draw_dags", "sampled_measures"]

STATE_EDGE_WEIGHT = math.exp(-0.5)
""":math:`x` of the DAG proposal :math:`P_x(G) \\propto x^{|E|}` for integrals of one state: the theory checks' envelope
:math:`e^{-\\|e\\|^2/2}` weighs a graph by :math:`e^{-1/2}` per edge (an adjacency entry 1)."""
PAIR_EDGE_WEIGHT = math.exp(-1.0)
""":math:`x` for integrals over pairs of states, which carry two envelopes (module docstring)."""
BLOCK_THETAS = 3
"""Terminal states :math:`(G, \\theta_i)` per block of :math:`\\nu`'s draws, beside :math:`(G, \\#)`: eq. 4 integrates
:math:`\\theta` over :math:`\\Theta_G` by ``n`` nodes on one side and by these draws on the other, whose noise then
dominates the difference (measured at d = 20, ``model=mlp``: median tolerance / :math:`|\\text{integral}|` of those pairs 0.39 with one)."""
PROPOSAL_SCALE = 1 / math.sqrt(2 * math.pi)
"""Standard deviation :math:`c` of the Gaussian proposal on each parameter: the checks' envelope on it,
:math:`e^{-\\pi \\theta_i^2}` (the space's ``encode`` scales parameters by :math:`\\sqrt{2\\pi}`), so that the importance weights
of eq. 4's integrals stay bounded with 2,220 parameters, where any other scale's variance grows exponentially in their
number."""


def draw_dags(n: int, d: int, generator: torch.Generator | None = None, edge_weight: float = STATE_EDGE_WEIGHT) -> tuple[Tensor, Tensor]:
    """``n`` graphs ``adj [n, d, d]`` with probability :math:`P_x(G) = x^{|E|} / Z_x` (``x`` = ``edge_weight``) and their
    log-weights :math:`-\\log P_x(G)` ``[n]`` float64, so that :math:`\\frac1n \\sum_k w_k f(G_k)` estimates :math:`\\sum_G f(G)`."""
    adj, log_p = draw_weighted_dags(n, d, math.log(edge_weight), generator)
    return adj, -log_p


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


def _theta(on: Tensor, scale: float, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """``(theta [n, P], log q(theta) [n])``: :math:`\\mathcal N(0, c^2)` on the coordinates ``on [n, P]``, 0 elsewhere."""
    z = torch.randn(on.shape, dtype=torch.float64, generator=generator) * scale
    log_q = torch.where(on, -0.5 * (z / scale) ** 2 - math.log(scale) - 0.5 * LOG_2PI, torch.zeros_like(z)).sum(1)
    return torch.where(on, z, torch.zeros_like(z)), log_q


def _draw(
    d: int, n_params: int, active: ActiveFn, max_parents: int | None, scale: float, terminal_only: bool, n: int, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(x [M, D], sink [M], log_w [M], block [M])``: states of :math:`\\nu` in ``n`` blocks (or ``n`` i.i.d.
    states of the terminal measure) with importance log-weights (module docstring)."""
    lx_pair, lx_state = math.log(PAIR_EDGE_WEIGHT), math.log(STATE_EDGE_WEIGHT)
    L = n
    sink_graphs = draw_weighted_dags(L, d, lx_state, generator)[0]
    if terminal_only:
        adj, block, stopped = sink_graphs, torch.arange(n), torch.ones(n, dtype=torch.bool)
    else:
        pair_graphs = draw_weighted_dags(L, d, lx_pair, generator)[0]
        adj = torch.cat([pair_graphs.repeat(1 + BLOCK_THETAS, 1, 1), sink_graphs])
        block = torch.arange(L).repeat(2 + BLOCK_THETAS)
        stopped = torch.arange(len(adj)) >= L
    n_edges = adj.flatten(1).sum(1).double()
    log_p_pair = n_edges * lx_pair - log_total(d, lx_pair)
    log_p_state = n_edges * lx_state - log_total(d, lx_state)
    terminal = log_p_state if terminal_only else torch.logaddexp(log_p_pair + math.log(BLOCK_THETAS), log_p_state)  # a block's terminal proposals
    log_w = torch.where(stopped, -terminal, -log_p_pair) - math.log(L)
    if max_parents is not None:
        log_w = torch.where((adj.sum(1) <= max_parents).all(1), log_w, torch.full_like(log_w, -math.inf))
    on = active(adj) & stopped[:, None]  # [M, P]
    theta, log_q_theta = _theta(on, scale, generator)
    x = join(adj, n_params, theta, stopped, dtype=torch.float64)
    return x, torch.zeros(len(x), dtype=torch.bool), log_w - log_q_theta, block


def _atomic(d: int, active: ActiveFn, x: Tensor) -> Tensor:
    """``[B]`` bool: an intermediate state :math:`(G, \\#)`, or a terminal one with :math:`\\Theta_G = \\mathbb R^0`: the atoms of :math:`\\nu`."""
    adj, _, stopped = split(x, d)
    return ~stopped | ~active(adj).any(1)


def sampled_measures(
    d: int, n_params: int, active: ActiveFn, max_parents: int | None = None, proposal_scale: float = PROPOSAL_SCALE
) -> tuple[SampledMeasure, SampledMeasure]:
    """:math:`\\nu` and the terminal measure of the DAG x Theta space as importance rules (module docstring)."""

    def measure(terminal_only: bool, label: str) -> SampledMeasure:
        return SampledMeasure(
            draw=partial(_draw, d, n_params, active, max_parents, proposal_scale, terminal_only),
            contains=partial(_contains, d, n_params, active, max_parents, terminal_only),
            label=label,
            atomic=partial(_atomic, d, active),
        )

    return measure(False, "nu: DAGs drawn exactly by edge weight, Gaussian parameters"), measure(
        True, "terminal measure: DAGs drawn exactly by edge weight, Gaussian parameters"
    )
