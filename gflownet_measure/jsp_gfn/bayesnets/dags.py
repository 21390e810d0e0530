"""Directed acyclic graphs on ``d`` labelled nodes: closures, valid actions, enumeration and marginal features.

Conventions (JSP-GFN, Deleu et al. 2023; docs/references.md, 'States, actions and masks'): ``adj [..., d, d]`` with
``adj[i, j] = 1`` iff :math:`i \\to j`; ``reach [..., d, d]`` with ``reach[i, j] = True`` iff there is a
directed path :math:`i \\leadsto j`, reflexive. All functions are pure and batched over leading dimensions.

- The environment's mask is :math:`M = 1 - (A + R^\\top)`: :math:`i \\to j` may be added iff it is absent and
  :math:`j \\not\\leadsto i` (no self loop, no cycle).
- Graphs are indexed by :func:`dag_codes`, the integer :math:`\\sum_{ij} A_{ij} 2^{id + j}`;
  :func:`enumerate_dags` lists all DAGs in increasing code order, so a code table is sorted and
  ``torch.searchsorted`` looks graphs up.
- Features are the posterior marginals JSP-GFN compares (Deleu et al. 2023, section 5.1): edges
  :math:`i \\to j`, paths :math:`i \\leadsto j` (:math:`i \\neq j`) and Markov-blanket membership.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

__all__ = [
    "MAX_ENUMERATE",
    "MAX_CODE_NODES",
    "transitive_closure",
    "is_dag",
    "valid_edges",
    "dag_codes",
    "enumerate_dags",
    "edge_features",
    "path_features",
    "markov_blanket_features",
    "FEATURES",
    "weighted_features",
]

MAX_ENUMERATE = 5  # d = 6 already has 3,781,503 DAGs (OEIS A003024)
MAX_CODE_NODES = 7  # d * d bits must fit in a signed int64


def _eye(d: int, device) -> Tensor:
    return torch.eye(d, dtype=torch.bool, device=device)


def transitive_closure(adj: Tensor) -> Tensor:
    """:math:`R = (I \\vee A)^{2^k}` (boolean products), :math:`k = \\lceil \\log_2 d \\rceil`: ``reach [..., d, d]`` bool, reflexive.

    Each boolean squaring doubles the path length covered, and a simple path has at most ``d - 1`` edges.
    """
    d = adj.shape[-1]
    reach = adj.bool() | _eye(d, adj.device)
    for _ in range(math.ceil(math.log2(d)) if d > 1 else 0):
        r = reach.to(torch.float32)  # path counts <= d are exact in float32
        reach = (r @ r) > 0
    return reach


def is_dag(adj: Tensor) -> Tensor:
    """``[...]`` bool: ``adj [..., d, d]`` has no directed cycle (no edge :math:`i \\to j` with :math:`j \\leadsto i`)."""
    return ~(adj & transitive_closure(adj).transpose(-1, -2)).flatten(-2).any(-1)


def valid_edges(adj: Tensor, reach: Tensor, max_parents: int | None = None) -> Tensor:
    """:math:`M = \\neg A \\wedge \\neg R^\\top` (the public JSP-GFN code's mask): ``[..., d, d]`` bool, edges that keep the graph a DAG.

    ``reach`` is reflexive, so self loops are excluded; with ``max_parents``, every column ``j`` whose
    node already has that many parents is masked.
    """
    mask = ~adj.bool() & ~reach.transpose(-1, -2)
    if max_parents is not None:
        full = adj.bool().sum(-2) >= max_parents  # [..., d]: column j is full
        mask = mask & ~full[..., None, :]
    return mask


def _bit_weights(d: int, device=None) -> Tensor:
    if d > MAX_CODE_NODES:
        raise ValueError(f"dag codes use d * d bits of an int64, so d must be <= {MAX_CODE_NODES}; got d = {d}")
    return (1 << torch.arange(d * d, device=device)).view(d, d)  # [d, d]


def dag_codes(adj: Tensor) -> Tensor:
    """:math:`c(A) = \\sum_{ij} A_{ij} 2^{id + j}`: ``[...]`` long, one integer per graph (``d <= 7``)."""
    return (adj.long() * _bit_weights(adj.shape[-1], adj.device)).sum((-1, -2))


def _decode(codes: Tensor, d: int) -> Tensor:
    """The inverse of :func:`dag_codes`: ``[K] -> [K, d, d]`` bool."""
    return ((codes[:, None] >> torch.arange(d * d)) & 1).bool().view(-1, d, d)


def enumerate_dags(d: int, max_parents: int | None = None) -> Tensor:
    """All DAGs on ``d`` labelled nodes, ``[n_d, d, d]`` bool in increasing :func:`dag_codes` order (``1 <= d <= 5``);
    with ``max_parents``, only those where no node has more parents.

    Every DAG is a relabelling of a strictly upper-triangular one (order its nodes topologically), so the
    :math:`2^{d(d-1)/2} \\cdot d!` relabelled patterns cover them all; their codes are deduplicated.
    Counts: 1, 3, 25, 543, 29281.
    """
    if not 1 <= d <= MAX_ENUMERATE:
        raise ValueError(f"enumerate_dags: d must be in 1..{MAX_ENUMERATE} (d = 6 already has 3,781,503 DAGs); got {d}")
    iu, ju = torch.triu_indices(d, d, 1)  # [m] each
    m = len(iu)
    patterns = ((torch.arange(2**m)[:, None] >> torch.arange(m)) & 1).bool()  # [P, m]
    perms = torch.tensor(list(itertools.permutations(range(d))))  # [d!, d]
    # relabel node i as perm[i]: edge (i, j) -> bit perm[i] * d + perm[j]
    bits = 1 << (perms[:, iu] * d + perms[:, ju])  # [d!, m]
    codes = (patterns.long()[:, None, :] * bits).sum(-1)  # [P, d!]; a sum, not a matmul: CUDA has no integer matmul
    dags = _decode(torch.unique(codes), d)
    return dags if max_parents is None else dags[dags.sum(-2).amax(-1) <= max_parents]


def edge_features(adj: Tensor) -> Tensor:
    """:math:`f_{ij}(G) = 1[i \\to j]`: ``[K, d, d]`` float64."""
    return adj.to(torch.float64)


def path_features(adj: Tensor) -> Tensor:
    """:math:`f_{ij}(G) = 1[i \\leadsto j,\\ i \\neq j]`: ``[K, d, d]`` float64."""
    d = adj.shape[-1]
    return (transitive_closure(adj) & ~_eye(d, adj.device)).to(torch.float64)


def markov_blanket_features(adj: Tensor) -> Tensor:
    """:math:`f_{ij}(G) = 1[i \\in \\mathrm{MB}(j)]`, :math:`\\mathrm{MB}(j)` = parents, children and co-parents of :math:`j`: ``[K, d, d]`` float64.

    Co-parents: :math:`(A A^\\top)_{ij} > 0` (a common child). The relation is symmetric; the diagonal is 0.
    """
    a = adj.to(torch.float64)
    d = adj.shape[-1]
    mb = adj.bool() | adj.bool().transpose(-1, -2) | ((a @ a.transpose(-1, -2)) > 0)
    return (mb & ~_eye(d, adj.device)).to(torch.float64)


# the posterior marginals JSP-GFN compares, by name: [K, d, d] -> [K, d, d] float64
FEATURES = {"edge": edge_features, "path": path_features, "markov": markov_blanket_features}


def weighted_features(graphs: Tensor, weights: Tensor, chunk: int = 4096) -> dict[str, Tensor]:
    """:math:`\\sum_k w_k f(G_k)` ``[d, d]`` float64 for every feature of :data:`FEATURES` (``graphs [K, d, d]``, ``weights [K]``).

    The marginals of a distribution over graphs: the exact posterior, a policy's :math:`P_T`, or samples
    (weights = counts / K). ``chunk`` graphs are featurised at once (bounds memory at large K and d).
    """
    d = graphs.shape[-1]
    out = {name: torch.zeros(d, d, dtype=torch.float64) for name in FEATURES}
    for start in range(0, len(graphs), chunk):
        g, w = graphs[start : start + chunk], weights[start : start + chunk].double()
        for name, fn in FEATURES.items():
            out[name] += torch.einsum("k,kij->ij", w, fn(g).double())
    return out
