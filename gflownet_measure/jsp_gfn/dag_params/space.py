"""The hybrid space :math:`\\mathcal G \\times \\Theta` of JSP-GFN as a measurable pointed graph (Deleu et al. 2023; Lahlou et al. 2023 section 4.4).

States are flat vectors ``[adj (d*d) | theta (P) | stopped]`` (:mod:`~gflownet_measure.jsp_gfn.dag_params.states`) (``adj`` row-major, ``adj[i, j] = 1`` for i -> j; ``theta`` the
flat parameter vector of the CPD model, :mod:`~gflownet_measure.jsp_gfn.bayesnets.cpds`, ``P`` its ``n_params``):

- an *intermediate* state :math:`(G, \\#)` has ``stopped = 0`` and ``theta = 0``; the source :math:`s_0` is the empty graph;
- a *terminal* state :math:`(G, \\theta)` has ``stopped = 1`` and :math:`\\theta \\in \\Theta_G`, the model's active coordinates
  for ``G`` (``model.active(adj)``: the weights of the edges of ``G`` for a linear model, :math:`|\\Theta_G| = |E(G)|`; for an
  MLP model the first-layer weights of each node's parents and every bias and output weight), 0 elsewhere.

The reference kernels:

- :math:`\\kappa((G, \\#), \\cdot) = \\sum_{e \\text{ valid}} \\delta_{(G + e, \\#)} + \\lambda_{\\Theta_G}`: counting measure on the
  one-edge supergraphs that stay acyclic (optionally within ``max_parents``), plus Lebesgue measure on the active
  coordinates of :math:`\\Theta_G`: *one* piece whatever :math:`|\\Theta_G|`, charted by :class:`ThetaChart`, a chart of
  varying dimension (:meth:`~gflownet_measure.charts.Chart.active`; for a linear model and the empty graph
  :math:`\\Theta_\\emptyset = \\mathbb R^0` and the piece is the unit atom :math:`(\\emptyset, ())`);
- :math:`\\kappa((G, \\theta), \\cdot) = \\delta_\\bot`;
- :math:`\\kappa_b((G', \\#), \\cdot) = \\sum_{e \\in E(G')} \\delta_{(G' - e, \\#)}` (zero at :math:`s_0`, eq. 5) and
  :math:`\\kappa_b((G, \\theta), \\cdot) = \\delta_{(G, \\#)}`;
- :math:`\\nu = \\sum_{G} \\delta_{(G, \\#)} + \\sum_G \\lambda_{\\Theta_G}` and the terminal measure :math:`\\sum_G \\lambda_{\\Theta_G}`:
  enumerated for :math:`d \\le 5` (:func:`~gflownet_measure.jsp_gfn.bayesnets.dags.enumerate_dags`); beyond, given by the importance
  rule of :mod:`~gflownet_measure.jsp_gfn.dag_params.reference` (a :class:`~gflownet_measure.sampled.SampledMeasure`).

Eq. 4 holds term by term: adding ``e`` to ``G`` and removing it from ``G + e`` pair the same counting measures, and
:math:`\\delta_{(G, \\#)} \\otimes \\lambda_{\\Theta_G}` is the swap of :math:`\\lambda_{\\Theta_G} \\otimes \\delta_{(G, \\#)}`.
The reward :math:`R(G, \\theta) = P(D | G, \\theta) P(\\theta | G) P(G)` is a density w.r.t. :math:`\\lambda_{\\Theta_G}` on
each :math:`\\{G\\} \\times \\Theta_G` (``model.log_reward``).
"""

from __future__ import annotations

import functools
import math
from typing import cast

import torch
from torch import Tensor

from gflownet_measure.charts import Chart
from gflownet_measure.graph import PointedGraph
from gflownet_measure.jsp_gfn.bayesnets.dags import MAX_ENUMERATE, enumerate_dags, transitive_closure, valid_edges
from gflownet_measure.jsp_gfn.dag_params.reference import PROPOSAL_SCALE, sampled_measures
from gflownet_measure.jsp_gfn.dag_params.states import ActiveFn, join, split
from gflownet_measure.kernels import ImplicitAtoms, Kernel
from gflownet_measure.measures import Atoms, Box, Measure, Piece
from gflownet_measure.sampled import SampledMeasure

__all__ = ["ThetaChart", "DagKernel", "dag_kernel", "enumerated_measures", "make_space", "encode"]


class ThetaChart(Chart):
    """:math:`\\varphi_{(G, \\#)}(u) = (G, u)`, stopped: the identity on the parameter slots, of varying dimension.

    .. math:: \\log |J| = 0

    relative to Lebesgue measure on the active coordinates :math:`\\Theta_G` = ``active(adj)`` of the anchor's graph
    (:meth:`~gflownet_measure.charts.Chart.active`); ``U = R^P``, the inactive coordinates 0.
    ``proposal_scale``: of the Gaussian on :math:`\\mathbb R` that Monte Carlo integrals and exploration draw from, by default
    :data:`~gflownet_measure.jsp_gfn.dag_params.reference.PROPOSAL_SCALE`.
    """

    def __init__(self, d: int, n_params: int, active: ActiveFn, proposal_scale: float = PROPOSAL_SCALE):
        self.d, self.n_params, self._active = d, n_params, active
        dd = d * d
        self.domain = Box((-math.inf,) * n_params, (math.inf,) * n_params, proposal_scale=proposal_scale)
        self.slots = tuple(range(dd, dd + n_params))
        self.fixed, self.advance = {dd + n_params: 1.0}, {}

    def active(self, s: Tensor) -> Tensor:
        return self._active(s[:, : self.d * self.d].reshape(-1, self.d, self.d) > 0.5)

    def _embed(self, s, u):
        return torch.where(self.active(s), u, torch.zeros_like(u))

    def _coords(self, s, y):
        return torch.where(self.active(s), y, torch.zeros_like(y))

    def log_abs_det_jacobian(self, s, u):
        return torch.zeros(u.shape[0], dtype=u.dtype, device=u.device)


class DagKernel(Kernel):
    """:math:`\\kappa` (``forward``) or :math:`\\kappa_b` of the DAG x Theta space (module docstring).

    Atom slots, forward: ``d^2`` edge additions (slot ``i d + j`` adds i -> j; the policy's logits follow this order), the
    sink; then the one :class:`ThetaChart` piece (present at intermediate states). Backward: the removals of the edges of
    ``G'`` (slot ``k`` removes its ``k``-th edge in row-major order; ``d(d-1)/2`` slots, the most edges of a DAG, half of
    the ``d^2`` a slot per pair would need), then the atom :math:`(G, \\#)` under :math:`(G, \\theta)`. Every state has the
    same slots (masked where absent), as the checks expect of a kernel.

    Each edge slot ``k`` flips one adjacency entry, at position :math:`p_k` (:meth:`_positions`), of the intermediate
    state of ``G``: its atom is :math:`(G \\oplus e_{p_k}, \\#)`. ``__call__`` builds the ``[B, K, D]`` block of these states
    (the reference path); the fast path (:meth:`outline`, :meth:`child`, :meth:`atom_of`) builds one child per state,
    and names the slot of a state from the one entry in which it differs from :math:`(G, \\#)`.
    """

    def __init__(self, d: int, n_params: int, forward: bool, active: ActiveFn, max_parents: int | None = None):
        self.d, self.n_params, self.forward, self.max_parents = d, n_params, forward, max_parents
        self.chart = ThetaChart(d, n_params, active)
        self.n_edge_slots = d * d if forward else max(1, d * (d - 1) // 2)

    def _positions(self, flat: Tensor) -> Tensor:
        """``[B, E]`` long: the adjacency entry :math:`p_k` each edge slot flips. Forward: :math:`p_k = k`; backward: the
        :math:`k`-th edge of ``G'`` in row-major order (the edges first, in order, then the other entries as padding)."""
        if self.forward:
            return torch.arange(self.d * self.d, device=flat.device).expand(len(flat), -1)
        return torch.argsort((~flat).to(torch.int8), dim=1, stable=True)[:, : self.n_edge_slots]

    def _intermediate(self, s: Tensor) -> tuple[Tensor, Tensor]:
        """``(flat adjacency [B, d^2] bool, (G, #) [B, D])``: each state's graph and its intermediate state (theta = 0, not stopped)."""
        flat = split(s, self.d)[0].flatten(1)
        x = torch.zeros_like(s)
        x[:, : self.d * self.d] = flat
        return flat, x

    def _layout(self, s: Tensor) -> tuple[Tensor, Tensor, Tensor, tuple[Piece, ...]]:
        """``(flat adjacency [B, d^2] bool, mask [B, K], sink [B, K], pieces)`` of :math:`\\kappa(s, \\cdot)`: everything but the atoms' states.

        Forward: edge slot ``k`` present iff the edge keeps ``G`` a DAG (``valid_edges``), the sink iff ``s`` is stopped. Backward:
        edge slot ``k`` present iff :math:`k < |E(G')|`, the last slot iff ``s`` is stopped."""
        adj, _, stopped = split(s, self.d)
        inter, flat = ~stopped, adj.flatten(1)
        if self.forward:
            edge_mask = valid_edges(adj, transitive_closure(adj), self.max_parents).flatten(1)
        else:
            edge_mask = torch.arange(self.n_edge_slots, device=s.device) < flat.sum(1, keepdim=True)
        mask = torch.cat([edge_mask & inter[:, None], stopped[:, None]], 1)
        sink = torch.zeros_like(mask)
        sink[:, -1] = self.forward
        return flat, mask, sink, ((Piece(self.chart, s, inter),) if self.forward else ())

    def __call__(self, s: Tensor) -> Measure:
        d, B = self.d, s.shape[0]
        flat, mask, sink, pieces = self._layout(s)
        edges = self._positions(flat)
        # the states (G with edge e flipped, theta = 0, not stopped), written in place: the [B, E, D] block is the cost
        # of a kernel call at d = 20 (docs/results.md, 'Why d = 20 misses')
        edge_x = torch.zeros(B, edges.shape[1], s.shape[1], dtype=s.dtype, device=s.device)
        adj_x = edge_x[:, :, : d * d]
        adj_x.copy_(flat[:, None, :].expand(B, edges.shape[1], d * d))
        adj_x.scatter_(2, edges[:, :, None], 1.0 - adj_x.gather(2, edges[:, :, None]))
        last = s if self.forward else self._intermediate(s)[1]  # the sink's (ignored) state, or (G, #)
        x = torch.cat([edge_x, last[:, None]], 1)
        return Measure(Atoms(x, torch.zeros(mask.shape, dtype=s.dtype), mask, sink), pieces)

    def outline(self, s: Tensor) -> Measure:
        """:math:`\\kappa(s, \\cdot)` without the ``[B, K, D]`` block: :class:`~gflownet_measure.kernels.ImplicitAtoms` (unit masses)."""
        _, mask, sink, pieces = self._layout(s)
        return Measure(ImplicitAtoms(self, s, torch.zeros(mask.shape, dtype=s.dtype, device=s.device), mask, sink), pieces)

    def child(self, s: Tensor, k: Tensor) -> Tensor:
        """Slot ``k``'s state: :math:`(G \\oplus e_{p_k}, \\#)` for an edge slot; the last slot: ``s`` forward (the sink's ignored
        state), :math:`(G, \\#)` backward."""
        flat, x = self._intermediate(s)
        edge = k < self.n_edge_slots
        p = self._positions(flat).gather(1, k.clamp(max=self.n_edge_slots - 1)[:, None])[:, 0]
        rows = torch.arange(len(s), device=s.device)
        x[rows, p] = torch.where(edge, 1.0 - x[rows, p], x[rows, p])
        return torch.where((self.forward & ~edge)[:, None], s, x)

    def atom_of(self, s: Tensor, x: Tensor, sink: Tensor) -> Tensor:
        """The slot holding ``(x, sink)``: ``x`` differs from :math:`(G, \\#)` in exactly one entry :math:`p`, an adjacency entry it
        flips, for an edge slot (forward: slot :math:`p`; backward, :math:`p` an edge of ``G'``: its rank
        :math:`\\sum_{q \\le p} A_q - 1`); in none for the backward last slot; the forward last slot is the sink."""
        flat, intermediate = self._intermediate(s)
        dd, last = self.d * self.d, self.n_edge_slots
        differs = x != intermediate
        n = differs.sum(1)
        p = differs.to(torch.int8).argmax(1)
        q = p.clamp(max=dd - 1)[:, None]
        was_edge = flat.gather(1, q)[:, 0]
        flips = (n == 1) & (p < dd) & (x.gather(1, q)[:, 0] == (~was_edge).to(x.dtype))
        if self.forward:
            return torch.where(sink, last, torch.where(flips, p, -1))
        rank = flat.cumsum(1).gather(1, q)[:, 0] - 1
        return torch.where(sink, -1, torch.where(flips & was_edge, rank, torch.where(n == 0, last, -1)))


def enumerated_measures(d: int, n_params: int, chart: ThetaChart, max_parents: int | None) -> tuple[Measure, Measure]:
    """:math:`\\nu` and the terminal measure :math:`\\kappa_b(\\bot, \\cdot)`, enumerating the DAGs on ``d <= 5`` nodes
    (those with at most ``max_parents`` parents per node: the others are unreachable); one :class:`ThetaChart` piece per DAG."""
    if d > MAX_ENUMERATE:
        raise ValueError(f"the reference measure nu of the DAG space is enumerated for d <= {MAX_ENUMERATE} (d = 6 has 3,781,503 DAGs); got d = {d}")
    inter = join(enumerate_dags(d, max_parents), n_params)
    pieces = tuple(Piece(chart, inter[g : g + 1], torch.ones(1, dtype=torch.bool)) for g in range(len(inter)))
    n = len(inter)
    atoms = Atoms(inter[None], torch.zeros(1, n), torch.ones(1, n, dtype=torch.bool), torch.zeros(1, n, dtype=torch.bool))
    return Measure(atoms, pieces), Measure(Atoms.empty(1, inter.shape[1]), pieces)


def make_space(model, max_parents: int | None = None, name: str = "dag-params") -> PointedGraph:
    """The pointed graph of the module docstring for a CPD ``model`` (:mod:`~gflownet_measure.jsp_gfn.bayesnets.cpds`: ``d``,
    ``n_params``, ``active``, ``log_reward``); :math:`\\log R` w.r.t. :math:`\\lambda_{\\Theta_G}` is ``model.log_reward`` on all
    the data. :math:`\\nu` is enumerated for ``d <= 5``, an importance rule beyond."""
    d, P = model.d, model.n_params
    kappa = DagKernel(d, P, True, model.active, max_parents)
    nu: Measure | SampledMeasure
    terminal: Measure | SampledMeasure
    if d <= MAX_ENUMERATE:
        nu, terminal = enumerated_measures(d, P, kappa.chart, max_parents)
    else:
        nu, terminal = sampled_measures(d, P, model.active, max_parents)

    def reward(x: Tensor) -> Tensor:
        adj, theta, _ = split(x, d)
        return model.log_reward(adj, theta.double()).to(x.dtype)

    return PointedGraph(
        name=name,
        source=join(torch.zeros(1, d, d, dtype=torch.bool), P)[0],
        kappa=kappa,
        kappa_b=DagKernel(d, P, False, model.active, max_parents),
        nu=nu,
        terminal=terminal,
        log_reward=reward,
        max_length=d * (d - 1) // 2 + 2,
        encode=functools.partial(encode, d * d, P),
    )


def dag_kernel(graph: PointedGraph) -> DagKernel:
    """``graph.kappa`` of a :func:`make_space` graph, typed as the :class:`DagKernel` it is (:class:`PointedGraph` types it
    :class:`~gflownet_measure.kernels.Kernel`). A cast, not a test: a :class:`~gflownet_measure.kernels.Materialised` wrapper
    of the kernel, which passes its attributes through, serves as well."""
    return cast(DagKernel, graph.kappa)


def encode(n_flags: int, n_params: int, s: Tensor) -> Tensor:
    """The features of states for the theory checks' test functions: the adjacency and stop flags as they are, the
    parameters times :math:`\\sqrt{2\\pi}`, so that the checks' envelope :math:`e^{-\\|e\\|^2/2}` is
    :math:`e^{-\\pi \\theta_i^2}` on each parameter, of integral 1: an integral over :math:`\\Theta_G` then has the same scale
    whether :math:`|\\Theta_G|` is 3 or 1,000 (Lebesgue measure on :math:`\\mathbb R^{1000}` against :math:`e^{-\\theta^2/2}` would be
    :math:`(2\\pi)^{500}`, beyond float64), and the reference rule's Gaussian proposal
    (:data:`~gflownet_measure.jsp_gfn.dag_params.reference.PROPOSAL_SCALE`) is that envelope itself."""
    return torch.cat([s[:, :n_flags], s[:, n_flags : n_flags + n_params] * math.sqrt(2 * math.pi), s[:, n_flags + n_params :]], 1)
