"""The hybrid space :math:`\\mathcal G \\times \\Theta` of JSP-GFN as a measurable pointed graph (Deleu et al. 2023; Lahlou et al. 2023 section 4.4).

States are flat vectors ``[adj (d*d) | theta (d*d) | stopped]`` (row-major, ``adj[i, j] = 1`` for i -> j,
``theta[i, j]`` the weight of that edge):

- an *intermediate* state :math:`(G, \\#)` has ``stopped = 0`` and ``theta = 0``; the source :math:`s_0` is the empty graph;
- a *terminal* state :math:`(G, \\theta)` has ``stopped = 1`` and :math:`\\theta \\in \\Theta_G = \\mathbb R^{|E(G)|}`
  on the edge slots (zero elsewhere).

The reference kernels:

- :math:`\\kappa((G, \\#), \\cdot) = \\sum_{e \\text{ valid}} \\delta_{(G + e, \\#)} + \\lambda_{\\Theta_G}`: counting measure on the
  one-edge supergraphs that stay acyclic (optionally within ``max_parents``), plus Lebesgue measure on the active
  coordinates of :math:`\\Theta_G` (one piece per edge count :math:`k`, charted by :class:`EdgeWeightsChart`; for the
  empty graph :math:`\\Theta_\\emptyset = \\mathbb R^0` and the piece is the atom :math:`(\\emptyset, ())`);
- :math:`\\kappa((G, \\theta), \\cdot) = \\delta_\\bot`;
- :math:`\\kappa_b((G', \\#), \\cdot) = \\sum_{e \\in E(G')} \\delta_{(G' - e, \\#)}` (zero at :math:`s_0`, eq. 5) and
  :math:`\\kappa_b((G, \\theta), \\cdot) = \\delta_{(G, \\#)}`;
- :math:`\\nu = \\sum_{G} \\delta_{(G, \\#)} + \\sum_G \\lambda_{\\Theta_G}`, enumerated for :math:`d \\le 5`
  (:func:`~environments.dag_params.dags.enumerate_dags`); the terminal measure is its second sum.

Eq. 4 holds term by term: adding ``e`` to ``G`` and removing it from ``G + e`` pair the same counting measures, and
:math:`\\delta_{(G, \\#)} \\otimes \\lambda_{\\Theta_G}` is the swap of :math:`\\lambda_{\\Theta_G} \\otimes \\delta_{(G, \\#)}`.
The reward :math:`R(G, \\theta) = P(D | G, \\theta) P(\\theta | G) P(G)` is a density w.r.t. :math:`\\lambda_{\\Theta_G}` on
each :math:`\\{G\\} \\times \\Theta_G` (:class:`~environments.dag_params.bayesnet.LinearGaussian`).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from gflownet_measure.graph import PointedGraph
from gflownet_measure.kernels import Kernel
from gflownet_measure.measures import Atoms, Box, Measure, Piece
from gflownet_measure.transforms import Chart

from .dags import MAX_ENUMERATE, enumerate_dags, transitive_closure, valid_edges

__all__ = ["state_dim", "split", "join", "pack", "unpack", "EdgeWeightsChart", "DagKernel", "make_space"]


def state_dim(d: int) -> int:
    return 2 * d * d + 1


def split(s: Tensor, d: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(adj [B, d, d] bool, theta [B, d, d], stopped [B] bool)`` of states ``s [B, 2 d^2 + 1]``."""
    dd = d * d
    return s[:, :dd].reshape(-1, d, d) > 0.5, s[:, dd : 2 * dd].reshape(-1, d, d), s[:, 2 * dd] > 0.5


def join(adj: Tensor, theta: Tensor | None = None, stopped: Tensor | None = None, dtype=torch.float32) -> Tensor:
    """The states ``[B, 2 d^2 + 1]`` of ``adj [B, d, d]``, ``theta`` (default 0) and ``stopped [B]`` (default False)."""
    B = adj.shape[0]
    theta = torch.zeros(adj.shape, dtype=dtype) if theta is None else theta.to(dtype) * adj
    stopped = torch.zeros(B, dtype=dtype) if stopped is None else stopped.to(dtype)
    return torch.cat([adj.to(dtype).flatten(1), theta.flatten(1), stopped[:, None]], 1)


def _edge_slots(adj: Tensor, k: int) -> Tensor:
    """``[B, k]`` long: the flat positions of the first ``k`` edges of each graph in row-major order (padded with non-edges)."""
    return torch.argsort((~adj.flatten(1)).to(torch.int8), dim=1, stable=True)[:, :k]


def pack(theta: Tensor, adj: Tensor, k: int | None = None) -> Tensor:
    """The active coordinates ``[..., B, k]`` of ``theta [..., B, d, d]``: its entries on the edges of ``adj [B, d, d]``, row-major.

    ``k`` defaults to the edge count of the first graph; graphs with another count give meaningless rows.
    """
    k = (int(adj[0].sum()) if len(adj) else 0) if k is None else k
    slots = _edge_slots(adj, k)
    flat = theta.flatten(-2)
    return flat.gather(-1, slots.expand(*flat.shape[:-1], k))


def unpack(u: Tensor, adj: Tensor) -> Tensor:
    """Inverse of :func:`pack`: ``u [..., B, k]`` written into the edge slots of zeros ``[..., B, d, d]``."""
    d, k = adj.shape[-1], u.shape[-1]
    flat = torch.zeros(*u.shape[:-1], d * d, dtype=u.dtype, device=u.device)
    return flat.scatter(-1, _edge_slots(adj, k).expand(*u.shape[:-1], k), u).reshape(*u.shape[:-1], d, d)


class EdgeWeightsChart(Chart):
    """:math:`\\varphi_{(G, \\#)}(u) = (G, \\theta)` with :math:`\\theta` = ``u`` on the ``k`` edges of ``G`` (row-major), 0 elsewhere.

    .. math:: \\log |J| = 0

    relative to Lebesgue measure on the active coordinates :math:`\\Theta_G = \\mathbb R^{k}` (the chart is
    the identity on them). Anchored at intermediate states with exactly ``k`` edges.
    """

    def __init__(self, d: int, k: int):
        self.d, self.k = d, k
        dd = d * d
        self.domain = Box((-math.inf,) * k, (math.inf,) * k, proposal_scale=1.5)
        self.slots = tuple(range(dd, 2 * dd))
        self.fixed, self.advance = {2 * dd: 1.0}, {}

    def _embed(self, s, u):
        adj = s[:, : self.d * self.d].reshape(-1, self.d, self.d) > 0.5
        return unpack(u, adj).flatten(1)

    def _coords(self, s, y):
        adj = s[:, : self.d * self.d].reshape(-1, self.d, self.d) > 0.5
        return pack(y.reshape(-1, self.d, self.d), adj, self.k)

    def log_abs_det_jacobian(self, s, u):
        return torch.zeros(u.shape[0], dtype=u.dtype, device=u.device)


class DagKernel(Kernel):
    """:math:`\\kappa` (``forward``) or :math:`\\kappa_b` of the DAG x Theta space (module docstring).

    Atom slots, forward: ``d^2`` edge additions (slot ``i d + j`` adds i -> j), the terminal atom
    :math:`(\\emptyset, ())`, the sink; then one :class:`EdgeWeightsChart` piece per edge count
    ``k = 1..d(d-1)/2``. Backward: ``d^2`` edge removals, then the atom :math:`(G, \\#)` under :math:`(G, \\theta)`.
    """

    def __init__(self, d: int, forward: bool, max_parents: int | None = None):
        self.d, self.forward, self.max_parents = d, forward, max_parents
        self.charts = tuple(EdgeWeightsChart(d, k) for k in range(1, d * (d - 1) // 2 + 1)) if forward else ()

    def __call__(self, s: Tensor) -> Measure:
        d, B = self.d, s.shape[0]
        adj, _, stopped = split(s, d)
        eye = torch.eye(d * d, dtype=torch.bool)  # slot e toggles edge e
        toggled = adj.flatten(1)[:, None, :] ^ eye[None]  # [B, d^2, d^2]: G with edge e flipped
        edge_x = join(toggled.reshape(B * d * d, d, d), dtype=s.dtype).reshape(B, d * d, -1)
        inter = ~stopped
        if self.forward:
            n_edges = adj.flatten(1).sum(1)
            edge_mask = valid_edges(adj, transitive_closure(adj), self.max_parents).flatten(1) & inter[:, None]
            empty_terminal = join(torch.zeros(1, d, d, dtype=torch.bool), stopped=torch.ones(1), dtype=s.dtype).expand(B, -1)
            x = torch.cat([edge_x, empty_terminal[:, None], s[:, None]], 1)
            mask = torch.cat([edge_mask, (inter & (n_edges == 0))[:, None], stopped[:, None]], 1)
            sink = torch.zeros_like(mask)
            sink[:, -1] = True
            pieces = tuple(Piece(c, s, inter & (n_edges == c.k)) for c in self.charts)
        else:
            unstopped = join(adj, dtype=s.dtype)
            x = torch.cat([edge_x, unstopped[:, None]], 1)
            mask = torch.cat([adj.flatten(1) & inter[:, None], stopped[:, None]], 1)
            sink, pieces = torch.zeros_like(mask), ()
        return Measure(Atoms(x, torch.zeros(mask.shape, dtype=s.dtype), mask, sink), pieces)


def _nu(d: int, charts: tuple[EdgeWeightsChart, ...], max_parents: int | None) -> tuple[Measure, Measure]:
    """:math:`\\nu` and the terminal measure :math:`\\kappa_b(\\bot, \\cdot)`, enumerating the DAGs on ``d <= 5`` nodes
    (those with at most ``max_parents`` parents per node: the others are unreachable)."""
    if d > MAX_ENUMERATE:
        raise ValueError(f"the reference measure nu of the DAG space is enumerated for d <= {MAX_ENUMERATE} (d = 6 has 3,781,503 DAGs); got d = {d}")
    dags = enumerate_dags(d, max_parents)
    inter = join(dags)
    n_edges = dags.flatten(1).sum(1)
    empty = n_edges == 0
    terminal_atom = join(dags[empty], stopped=torch.ones(1))

    def pieces(rows: Tensor) -> tuple[Piece, ...]:
        return tuple(Piece(charts[int(n_edges[g]) - 1], inter[g : g + 1], torch.ones(1, dtype=torch.bool)) for g in rows.nonzero()[:, 0].tolist())

    def atoms(x: Tensor) -> Atoms:
        n = len(x)
        return Atoms(x[None], torch.zeros(1, n), torch.ones(1, n, dtype=torch.bool), torch.zeros(1, n, dtype=torch.bool))

    nu = Measure(atoms(torch.cat([inter, terminal_atom])), pieces(~empty))
    return nu, Measure(atoms(terminal_atom), pieces(~empty))


def make_space(d: int, log_reward, max_parents: int | None = None, name: str = "dag-params") -> PointedGraph:
    """The pointed graph of the module docstring; ``log_reward(adj, theta) -> [B]`` is :math:`\\log R(G, \\theta)` w.r.t. :math:`\\lambda_{\\Theta_G}`."""
    kappa = DagKernel(d, True, max_parents)
    nu, terminal = _nu(d, kappa.charts, max_parents)

    def reward(x: Tensor) -> Tensor:
        adj, theta, _ = split(x, d)
        return log_reward(adj, theta.double()).to(x.dtype)

    return PointedGraph(
        name=name,
        source=join(torch.zeros(1, d, d, dtype=torch.bool))[0],
        kappa=kappa,
        kappa_b=DagKernel(d, False),
        nu=nu,
        terminal=terminal,
        log_reward=reward,
        max_length=d * (d - 1) // 2 + 2,
        encode=lambda s: s,
    )
