"""Exact computations on finite pointed graphs: enumeration, transition matrices, terminating distributions.

Used for metrics without sampling noise (the hypergrid's L1 to target) and for exact flow
solutions in tests. Everything here is float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .densities import Policy
from .graph import PointedGraph
from .measures import Measure
from .roundoff import ATOM_ULPS, ulps_from

__all__ = ["MATCH_BUDGET", "enumerate_states", "index_of", "transition_matrix", "terminating_distribution", "exact_flows", "TabularPolicy"]

MATCH_BUDGET = 2**26
"""Numbers compared at a time where queries without an exact match are compared with every state (256 MB in float32)."""


def enumerate_states(graph: PointedGraph) -> Tensor:
    """All non-sink states ``[S, D]``: the atoms of :math:`\\nu` (a finite counting measure)."""
    if not isinstance(graph.nu, Measure):
        raise ValueError(f"{graph.name}: nu is sampled ({graph.nu.label}); exact enumeration needs its atoms listed")
    if graph.nu.pieces:
        raise ValueError(f"{graph.name}: nu has continuous pieces; exact enumeration needs a finite state space")
    return graph.nu.atoms.x[0][graph.nu.atoms.mask[0]]


def index_of(states: Tensor, queries: Tensor) -> Tensor:
    """``[Q]`` long: the row of ``states [S, D]`` equal to each query ``[Q, D]`` within round-off, -1 where none.

    Equal as :meth:`~gflownet_measure.measures.Atoms.locate` matches atoms: every coordinate within
    :data:`~gflownet_measure.roundoff.ATOM_ULPS` units of :func:`~gflownet_measure.roundoff.ulps_from` at the query (a
    state recomputed by another formula is one state). Exact matches are found by sorting; the queries left are compared
    with every state, :data:`MATCH_BUDGET` numbers at a time, and take the first within the tolerance.
    """
    both = torch.cat([states, queries.to(states.dtype)])
    _, inv = torch.unique(both, dim=0, return_inverse=True)
    where = torch.full((int(inv.max()) + 1,), -1, dtype=torch.long)
    where[inv[: len(states)]] = torch.arange(len(states))
    found = where[inv[len(states) :]]
    miss = (found < 0).nonzero()[:, 0]
    chunk = max(1, MATCH_BUDGET // max(1, states.numel()))
    for i in range(0, len(miss), chunk):
        rows = miss[i : i + chunk]
        near = ulps_from(states[None], queries[rows, None]) <= ATOM_ULPS  # [R, S]
        found[rows] = torch.where(near.any(1), near.to(torch.int8).argmax(1), -1)
    return found


def transition_matrix(policy: Policy, states: Tensor) -> tuple[Tensor, Tensor]:
    """``(P [S, S], p_sink [S])``: :math:`P_{ij} = P_F(s_j | s_i)`, :math:`p_\\bot(i) = P_F(\\bot | s_i)` (atoms only).

    ``P`` is a coalesced sparse COO tensor: a state has a few children, and a dense ``S x S`` matrix of a
    65,536-state grid would take 34 GB.
    """
    with torch.no_grad():
        d = policy(states)
    a = d.measure.atoms
    if d.measure.pieces:
        raise ValueError("transition_matrix needs kernels made of atoms only")
    probs = (d.log_probs[:, : a.count].double()).exp() * a.mask
    S = len(states)
    p_sink = (probs * a.sink).sum(1)
    child = a.mask & ~a.sink
    rows = torch.arange(S)[:, None].expand_as(child)[child]
    cols = index_of(states, a.x[child])
    if (cols < 0).any():
        raise ValueError("the kernel has children outside nu's atoms")
    P = torch.sparse_coo_tensor(torch.stack([rows, cols]), probs[child], (S, S), dtype=torch.float64, check_invariants=True).coalesce()  # duplicates summed
    return P, p_sink


def terminating_distribution(graph: PointedGraph, policy: Policy, states: Tensor | None = None) -> Tensor:
    """Exact :math:`P_T(x)` ``[S]`` by propagating the reach probabilities for ``max_length`` steps.

    .. math:: \\rho_0 = \\delta_{s_0}, \\quad \\rho_{t+1} = \\rho_t P, \\quad P_T(x) = \\sum_t \\rho_t(x)\\, P_F(\\bot|x)
    """
    states = enumerate_states(graph) if states is None else states
    P, p_sink = transition_matrix(policy, states)
    rho = (index_of(states, graph.source[None])[0] == torch.arange(len(states))).double()
    out = torch.zeros_like(rho)
    for _ in range(graph.max_length):
        out += rho * p_sink
        rho = torch.sparse.mm(P.t(), rho[:, None])[:, 0]
    return out


def exact_flows(graph: PointedGraph, states: Tensor, pb: Policy) -> tuple[Tensor, Tensor]:
    """Flows that satisfy every balance condition for a given backward policy (Theorem 2, discrete case).

    .. math:: F(s) = R(s)\\,1[s \\text{ terminable}] + \\sum_{c \\in \\text{ch}(s)} F(c)\\, P_B(s | c)

    solved as a linear system; returns ``(log F [S], log R [S])`` with :math:`F(s_0) = Z`.
    """
    S = len(states)
    with torch.no_grad():
        d = pb(states[~graph.is_source(states)])
    a = d.measure.atoms
    probs = d.log_probs[:, : a.count].double().exp() * a.mask
    children = torch.arange(S)[~graph.is_source(states)]
    M = torch.zeros(S, S, dtype=torch.float64)  # M[parent, child] = P_B(parent | child)
    par = index_of(states, a.x[a.mask])
    M.index_put_((par, children[:, None].expand_as(a.mask)[a.mask]), probs[a.mask], accumulate=True)
    terminable = graph.kappa(states).atoms
    term = (terminable.sink & terminable.mask).any(1)
    log_R = graph.log_reward(states).double()
    R = torch.where(term, log_R.exp(), torch.zeros_like(log_R))
    F = torch.linalg.solve(torch.eye(S, dtype=torch.float64) - M, R)
    return F.log(), log_R


class TabularPolicy(Policy):
    """A policy with one logit vector per enumerated state: ``table [S, K]`` over the kernel's atom slots."""

    def __init__(self, kernel, states: Tensor, table: Tensor):
        super().__init__(kernel)
        self.states = states
        self.table = torch.nn.Parameter(table)

    def parameters_at(self, s: Tensor, measure: Measure):
        i = index_of(self.states, s)
        if (i < 0).any():
            raise ValueError("TabularPolicy called on a state outside its table")
        return self.table[i], []
